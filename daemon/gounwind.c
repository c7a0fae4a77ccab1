/* gounwind.c: unwinding Go code by the Go runtime's own function table.
 *
 * Go emits no call-frame information (.eh_frame) for its code, so libunwind finds none and
 * would guess from rbp. Every Go binary (stripped with -ldflags=-s -w too) carries instead
 * .gopclntab, whose pcsp table gives, for every pc of every function, how far the stack
 * pointer is from the frame's return address slot; that is what the Go runtime's own
 * traceback uses. It is exact at every instruction (in a prologue before the frame pointer
 * is saved, in frameless leaf functions, which push no frame pointer at all), where a
 * frame-pointer walk would skip the caller of a leaf and misread a prologue: so this steps
 * Go frames by pcsp, not by rbp.
 *
 * The table is found once per object, in its memory: an object whose ELF notes say Go is
 * searched for the table's header (the first 8 bytes are fixed per layout) in its read-only
 * mappings, and the candidate must be a sound table whose code lies in the object's own
 * executable mapping. Reads go through the unwinder's page cache (file-backed memory only),
 * and the table is parsed by common/gopclntab.c, bounded and fuzzed.
 *
 * Where an unwind ends (Go's traceback, runtime/traceback.go, ends at the same places):
 * - runtime.goexit: the outermost frame of every goroutine; runtime.mstart and
 *   runtime.rt0_go: of the system stacks (g0) of threads and of the main thread. Complete.
 * - runtime.mcall: a goroutine gave the thread back to the scheduler, which runs on the
 *   thread's g0 stack from there; the goroutine is no longer this thread's. Complete.
 * - runtime.asmcgocall (a cgo call, C code running on g0): the goroutine's stack pointer is
 *   saved on g0 as its depth below the goroutine's stack top (g.stack.hi): the goroutine's
 *   frames are read from there and stepped on, down to runtime.goexit: from the kernel's
 *   copy of the goroutine at the sample (gokernel.h), or live (they do not change while the
 *   C call runs; kept only if still the call's).
 * - runtime.systemstack (the runtime's code on g0 for the thread's goroutine): the
 *   goroutine from the kernel's copy, or found from g0 (r14, at a kernel copy or a stop)
 *   through its m (m.curg's offset read from systemstack's own code), its frames read live
 *   from its saved sp as at a cgo call. Without either (a thread read from /proc) truncated.
 * - runtime.morestack (a stack growing): the goroutine's frames from the kernel's copy, at
 *   the sched morestack saved; a morestack whose newstack preempted the goroutine
 *   (runtime.gopreempt_m, its goschedImpl, preemptPark above it) is complete: the goroutine
 *   is off the thread then, as after mcall. Otherwise truncated.
 * - runtime.sigtramp, cgoSigtramp (Go's signal handler, on the signal stack): the
 *   interrupted pc and sp from the signal frame's ucontext, the interrupted goroutine's
 *   stack from the kernel's copy; otherwise (a stop's sample, C code interrupted) truncated.
 * - runtime.nanotime1, walltime, time.now called back into from the vDSO, or sampled in
 *   themselves after their switch to g0: their own sp is in r12 (saved there before they
 *   switch and align sp for the C code): stepped from it where that stack is in the copy or
 *   the kernel's copy of the goroutine (made when the thread is off the goroutine's stack);
 *   else truncated.
 * A return address outside Go code hands the unwind back to DWARF (C code called from Go
 * through a callback, the vDSO). */
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "gopclntab.h"
#include "log.h"
#include "maps.h"
#include "unwind_internal.h"

#define GO_CACHE 1024            /* pc -> step, per module */
#define GO_SCAN_MAX (512u << 20) /* bytes of an object searched for its table */
#define GO_STACK_READ (64 * 1024) /* a goroutine's stack read across a cgo call */
#define GO_MAX_STACK (1ull << 30) /* Go's own limit on a goroutine's stack */

enum go_kind {
    GO_FRAME,   /* step by pcsp */
    GO_TOP,     /* the outermost frame of a stack: goexit, mstart, rt0_go, mcall */
    GO_CGOCALL, /* asmcgocall: C code on g0, the goroutine beneath */
    GO_STOP,    /* a switch not followed (systemstack, morestack, cgocallback) */
    GO_ASYNC,   /* asyncPreempt: called by a signal, at any instruction of its caller */
    GO_DESCHED, /* a frame that takes the goroutine off its thread (gopreempt_m) */
    GO_SYSTEMSTACK, /* systemstack: the runtime's code on g0 for the thread's goroutine */
    GO_VDSO,    /* nanotime1, walltime, time.now: a vDSO call on g0, the old sp in r12 */
    GO_SIGTRAMP, /* sigtramp, cgoSigtramp: Go's signal handler, the signal frame above */
    GO_MORESTACK, /* morestack: newstack on g0 growing the goroutine's stack */
    GO_SIGRETURN, /* sigreturn: Go's restorer, the handler returned, the ucontext at sp */
    GO_BAD,     /* no function or no delta at this pc */
};

struct go_slot {
    uint64_t pc; /* 0 = empty */
    int32_t delta;
    uint8_t kind;
};

struct go_module {
    struct go_module *next;
    struct gopcln tab;
    int32_t m_curg;       /* offset of m.curg, from systemstack's code; 0 unknown, -1 none */
    struct go_slot cache[GO_CACHE];
};

static bool go_read(void *ctx, uint64_t addr, void *dst, size_t n)
{
    return read_bytes(ctx, addr, dst, n);
}

/* Does the object at base carry Go's build-id note ("Go", type 4)? */
static bool is_go_object(struct unwinder *u, uint64_t base)
{
    Elf64_Phdr ph[MAX_PHDRS];
    uint64_t first;
    int phnum = elf_phdrs(u, base, ph, &first);
    for (int i = 0; i < phnum; i++) {
        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > 4096)
            continue;
        uint8_t note[4096];
        size_t len = (size_t)ph[i].p_filesz;
        if (ph[i].p_vaddr < first || !read_bytes(u, base + (ph[i].p_vaddr - first), note, len))
            continue;
        for (size_t at = 0; at + 12 <= len;) {
            uint32_t namesz, descsz, type;
            memcpy(&namesz, note + at, 4);
            memcpy(&descsz, note + at + 4, 4);
            memcpy(&type, note + at + 8, 4);
            size_t name_at = at + 12, desc_at = name_at + ((namesz + 3ull) & ~3ull);
            if (namesz > len || descsz > len || desc_at > len)
                break;
            if (namesz == 4 && type == 4 && !memcmp(note + name_at, "Go\0", 4))
                return true;
            at = desc_at + ((descsz + 3ull) & ~3ull);
        }
    }
    return false;
}

/* Is [lo, hi) inside an executable mapping of the same file as m? */
static bool in_code_of(const struct unwinder *u, const struct map_entry *m, uint64_t lo,
                       uint64_t hi)
{
    const struct map_entry *c = maps_find(u->maps, lo);
    return c && (c->prot & MAP_PROT_X) && c->inode == m->inode && c->path && m->path &&
           !strcmp(c->path, m->path) && hi <= c->end;
}

/* Search mapping m for a sound function table whose code is the object's. */
static bool scan_mapping(struct unwinder *u, const struct map_entry *m, uint8_t *buf,
                         size_t cap, struct gopcln *tab, uint64_t *budget)
{
    static const uint32_t magics[] = {GOPCLN_MAGIC_120, GOPCLN_MAGIC_118, GOPCLN_MAGIC_116};
    uint64_t words[3];
    for (int k = 0; k < 3; k++)
        words[k] = gopcln_header_word(magics[k]);
    for (uint64_t a = m->start; a < m->end && *budget > 0;) {
        size_t n = m->end - a < cap ? (size_t)(m->end - a) : cap;
        if (n > *budget)
            n = (size_t)*budget;
        *budget -= n;
        if (u->read_mem(u->pid, buf, a, n) != (ssize_t)n)
            return false;
        for (size_t i = 0; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            if (w != words[0] && w != words[1] && w != words[2])
                continue;
            if (gopcln_init(tab, go_read, u, a + i, m->end - (a + i), 0) == 0 &&
                in_code_of(u, m, tab->min_pc, tab->max_pc))
                return true;
        }
        a += n;
    }
    return false;
}

static int32_t m_curg_offset(struct unwinder *u, struct go_module *g, uint64_t pc);

/* Is g the Go runtime's module, the executable's (a c-shared library's g is in dynamic TLS,
 * out of the kernel's reach): its m.curg offset, from runtime.systemstack's code (an
 * assembly function early in the table: the runtime's are linked first), and where the
 * current g is from the thread pointer. Go's linker puts g at -8(FS): statically (no TLS
 * segment, or one of 8 bytes, the runtime's tlsg), and through the system linker (cgo) as
 * the executable's only thread-local variable, the last 8 bytes below the thread pointer
 * (TLS variant II). An executable whose C code has thread-locals of its own moves it: not
 * known then. */
static void find_runtime(struct unwinder *u, struct go_module *g, uint64_t base)
{
    enum { FLAG_ASM = 4 };
    if (u->go_rt.module)
        return;
    Elf64_Phdr ph[MAX_PHDRS];
    uint64_t first;
    int phnum = elf_phdrs(u, base, ph, &first);
    bool interp = false;
    const Elf64_Phdr *tls = NULL;
    for (int i = 0; i < phnum; i++) {
        interp |= ph[i].p_type == PT_INTERP;
        if (ph[i].p_type == PT_TLS)
            tls = &ph[i];
    }
    if (phnum <= 0 || (!interp && first == 0))
        return; /* (a shared library: first 0 and no interpreter) */
    struct gopcln_func f;
    char name[24];
    for (uint32_t i = 0; i < g->tab.nfunc && i < 20000; i++) {
        if (!gopcln_func_at(&g->tab, i, &f) ||
            (g->tab.version != GOPCLN_116 && !(f.flag & FLAG_ASM)) ||
            !gopcln_name(&g->tab, f.nameoff, name, sizeof(name)) ||
            strcmp(name, "runtime.systemstack"))
            continue;
        u->go_rt.module = g->tab.base;
        u->go_rt.m_curg = m_curg_offset(u, g, f.entry);
        u->go_rt.tls_known = !tls || (tls->p_memsz == 8 && tls->p_align <= 8);
        u->go_rt.tls_g = -8;
        log_debug("pid %d: the Go runtime: m.curg at %d, g at %s", u->pid, u->go_rt.m_curg,
                  u->go_rt.tls_known ? "fs-8" : "an unknown place (C thread-locals)");
        return;
    }
}

void go_probe(struct unwinder *u, struct eh_table *t)
{
    if (t->go_probed || !u->maps)
        return;
    t->go_probed = true;
    const struct map_entry *b = maps_find(u->maps, t->base);
    if (!b || !b->path || b->path[0] != '/' || !is_go_object(u, t->base))
        return;
    struct go_module *g = calloc(1, sizeof(*g));
    size_t cap = 256 * 1024;
    uint8_t *buf = malloc(cap);
    uint64_t budget = GO_SCAN_MAX;
    bool found = false;
    for (size_t i = 0; g && buf && i < u->maps->n && !found; i++) {
        const struct map_entry *m = &u->maps->v[i];
        if (m->start < t->base || (m->prot & MAP_PROT_X) || !(m->prot & MAP_PROT_R) ||
            m->inode != b->inode || !m->path || strcmp(m->path, b->path))
            continue;
        found = scan_mapping(u, m, buf, cap, &g->tab, &budget);
    }
    free(buf);
    if (!found) {
        log_debug("pid %d: %s: a Go object without a function table found", u->pid, b->path);
        free(g);
        return;
    }
    log_debug("pid %d: %s: Go function table (layout %d, %u functions) at %#llx", u->pid,
              b->path, g->tab.version, g->tab.nfunc, (unsigned long long)g->tab.base);
    g->next = u->go;
    u->go = g;
    find_runtime(u, g, t->base);
}

static struct go_module *module_of(const struct unwinder *u, uint64_t pc)
{
    for (struct go_module *g = u->go; g; g = g->next)
        if (gopcln_covers(&g->tab, pc))
            return g;
    return NULL;
}

bool go_covers(const struct unwinder *u, uint64_t pc)
{
    return u->go && module_of(u, pc);
}

/* What the function f is, for where an unwind ends: by name (the funcID numbers change
 * between versions), among the runtime's assembly functions only (from 1.17 the table
 * flags them; the ABI wrappers of the same names are ordinary frames). */
static enum go_kind special(const struct gopcln *tab, const struct gopcln_func *f)
{
    enum { FLAG_ASM = 4 };
    char name[40];
    if (!gopcln_name(tab, f->nameoff, name, sizeof(name)))
        return GO_FRAME;
    /* (goschedImpl: gopreempt_m's callee, which 1.22 inlines into newstack.) */
    if (!strcmp(name, "runtime.gopreempt_m") || !strcmp(name, "runtime.preemptPark") ||
        !strcmp(name, "runtime.goschedImpl"))
        return GO_DESCHED;
    if (tab->version != GOPCLN_116 && !(f->flag & FLAG_ASM))
        return GO_FRAME;
    /* (Stops: each switches to another stack, whose frames pcsp does not describe: a step
     * by it would read stale return addresses left on the new one.) */
    static const struct {
        const char *name;
        enum go_kind kind;
    } names[] = {
        {"runtime.goexit", GO_TOP},
        {"runtime.mstart", GO_TOP},
        {"runtime.rt0_go", GO_TOP},
        {"runtime.mcall", GO_TOP},
        {"runtime.asmcgocall", GO_CGOCALL},
        {"runtime.asyncPreempt", GO_ASYNC},
        {"runtime.systemstack", GO_SYSTEMSTACK},
        {"runtime.morestack", GO_MORESTACK},
        {"runtime.cgocallback", GO_STOP},
        {"runtime.gogo", GO_STOP},
        {"runtime.sigtramp", GO_SIGTRAMP},
        {"runtime.cgoSigtramp", GO_SIGTRAMP},
        {"runtime.sigreturn", GO_SIGRETURN},
        {"runtime.sigreturn__sigaction", GO_SIGRETURN},
        {"runtime.nanotime1", GO_VDSO},
        {"runtime.walltime", GO_VDSO},
        {"runtime.walltime1", GO_VDSO},
        {"runtime.vdsoCall", GO_STOP},
        {"time.now", GO_VDSO},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i].name))
            return names[i].kind;
    return GO_FRAME;
}

/* How to step the frame at pc (exact: the leaf's pc, or a return address - 1). */
static struct go_slot classify(struct go_module *g, uint64_t pc)
{
    struct go_slot *slot = &g->cache[(pc ^ pc >> 10) % GO_CACHE];
    if (slot->pc == pc)
        return *slot;
    struct go_slot r = {.pc = pc, .kind = GO_BAD};
    struct gopcln_func f;
    if (gopcln_find(&g->tab, pc, &f)) {
        r.kind = special(&g->tab, &f);
        if ((r.kind == GO_FRAME || r.kind == GO_ASYNC || r.kind == GO_DESCHED ||
             r.kind == GO_VDSO || r.kind == GO_SIGTRAMP) &&
            !gopcln_spdelta(&g->tab, &f, pc, &r.delta))
            r.kind = GO_BAD;
    }
    *slot = r;
    return r;
}

static bool is_named(struct go_module *g, uint64_t pc, const char *want)
{
    struct gopcln_func f;
    char name[40];
    return gopcln_find(&g->tab, pc, &f) && gopcln_name(&g->tab, f.nameoff, name, sizeof(name)) &&
           !strcmp(name, want);
}

/* Is ret just after a direct call (E8 rel32) of a function named want? A frame read live
 * from another stack (the goroutine's, at a cgo call or systemstack) must be the one that
 * made the switch, not whatever the goroutine has called since the sample: its return
 * address must follow a call of the switching function (its ABI wrapper's, or its own). */
static bool calls_named(struct unwinder *u, uint64_t ret, const char *want)
{
    uint8_t b[5];
    if (ret < 5 || !read_bytes(u, ret - 5, b, 5) || b[0] != 0xe8)
        return false;
    int32_t rel;
    memcpy(&rel, b + 1, 4);
    uint64_t target = ret + (uint64_t)(int64_t)rel;
    struct go_module *m = module_of(u, target);
    return m && is_named(m, target, want);
}

/* The goroutine's stack, read live at a cgo call: [base, base + len). */
struct gstack {
    uint64_t base;
    size_t len;
};

/* Read a goroutine's stack from gsp up to its top hi (GO_STACK_READ at most) into
 * u->go_stack: from the kernel's copy of goroutine g at the sample (s->gcopy), if it is g's
 * and holds gsp; else live. The bytes read, 0 if it could not be. */
static size_t read_gstack(struct unwinder *u, const struct snapshot *s, uint64_t g,
                          uint64_t gsp, uint64_t hi)
{
    size_t len = hi - gsp < GO_STACK_READ ? (size_t)(hi - gsp) : GO_STACK_READ;
    if (!u->go_stack && !(u->go_stack = malloc(GO_STACK_READ)))
        return 0;
    const struct go_copy *c = s->gcopy;
    if (c && c->g == g) {
        if (gsp < c->base || gsp - c->base >= c->len)
            return 0; /* (not where the goroutine was then) */
        size_t have = c->len - (size_t)(gsp - c->base);
        len = have < len ? have : len;
        memcpy(u->go_stack, c->data + (gsp - c->base), len);
        u->go_copied++;
        return len;
    }
    return u->read_mem(u->pid, u->go_stack, gsp, len) == (ssize_t)len ? len : 0;
}

/* A word of the stack being unwound: the snapshot, or the goroutine's stack read. */
static bool stack_word(struct unwinder *u, struct snapshot *s, const struct gstack *gs,
                       uint64_t addr, uint64_t *val)
{
    if (in_snapshot(s, addr, 8)) {
        memcpy(val, s->data + (addr - s->base), 8);
        if (addr + 8 > s->max_read)
            s->max_read = addr + 8;
        return true;
    }
    if (gs->len && addr >= gs->base && gs->len >= 8 && addr - gs->base <= gs->len - 8) {
        memcpy(val, u->go_stack + (addr - gs->base), 8);
        return true;
    }
    /* The goroutine's stack as the kernel copied it at the sample (a vDSO call's goroutine
     * sp in r12, an interrupted goroutine's under a signal handler). */
    const struct go_copy *c = s->gcopy;
    if (c && addr >= c->base && c->len >= 8 && addr - c->base <= c->len - 8) {
        memcpy(val, c->data + (addr - c->base), 8);
        return true;
    }
    if (addr >= s->base && addr - s->base >= s->len && addr - s->base - s->len < 65536)
        s->short_copy = true; /* probably stack just above the copy */
    return false;
}

/* At a return address into asmcgocall (C code running on g0), sp its frame's: find the
 * goroutine's stack pointer from the g and depth asmcgocall saved, read the goroutine's
 * stack from there, and give the caller of asmcgocall (*pc) and its sp. The caller's
 * return address there must follow a call of asmcgocall: the goroutine may have returned
 * from the C call and called other code since the sample (read live, they would be
 * another moment's frames). Where asmcgocall
 * keeps them changed (1.21: [sp], [sp+8], the C function called through a landing pad's
 * tail call; before: [sp+40], [sp+48]): both are tried, and the one whose g's stack holds
 * the goroutine's stack pointer and whose return address there is a call into Go code
 * wins. */
static bool cross_cgocall(struct unwinder *u, struct snapshot *s, struct gstack *gs,
                          uint64_t *pc, uint64_t *sp)
{
    static const unsigned at[][2] = {{40, 48}, {0, 8}};
    for (size_t k = 0; k < 2; k++) {
        uint64_t depth, g, bounds[2], ret;
        if (!stack_word(u, s, gs, *sp + at[k][0], &depth) ||
            !stack_word(u, s, gs, *sp + at[k][1], &g) || !g)
            continue;
        if (s->gcopy && s->gcopy->g == g) {
            bounds[0] = s->gcopy->lo;
            bounds[1] = s->gcopy->hi;
        } else if (u->read_mem(u->pid, bounds, g, sizeof(bounds)) != sizeof(bounds)) {
            continue;
        }
        uint64_t lo = bounds[0], hi = bounds[1];
        if (hi <= lo || hi - lo > GO_MAX_STACK || depth > hi - lo || depth < 8)
            continue;
        uint64_t gsp = hi - depth;
        size_t len = read_gstack(u, s, g, gsp, hi);
        if (!len)
            continue;
        /* The saved stack pointer is asmcgocall's own, after its prologue: the return
         * address is there, or above the frame pointer the assembler's prologue pushes
         * (1.21+). */
        for (size_t fp = 0; fp <= 8 && fp + 8 <= len; fp += 8) {
            memcpy(&ret, u->go_stack + fp, 8);
            if (!go_covers(u, ret) || !calls_named(u, ret, "runtime.asmcgocall"))
                continue;
            gs->base = gsp;
            gs->len = len;
            *pc = ret;
            *sp = gsp + fp + 8;
            return true;
        }
    }
    return false;
}


/* Is ret a return address for a frame stepped as st: just after a call instruction;
 * for asyncPreempt (pushed as if called, by a signal), any instruction of Go code; and
 * goexit + 1, which every goroutine's first frame returns to (newproc1 makes it so, and
 * goexit begins with a NOP before its call). */
static bool called_from(struct unwinder *u, struct go_module *g, uint64_t ret,
                        struct go_slot st)
{
    if (st.kind == GO_ASYNC)
        return go_covers(u, ret);
    if (preceded_by_call(u, ret))
        return true;
    struct go_module *rg = module_of(u, ret - 1);
    (void)g;
    return rg && classify(rg, ret - 1).kind == GO_TOP;
}

/* The offset of m.curg, read from the instruction of runtime.systemstack (pc in it) that
 * compares the current g with it: `cmp disp32(%rbx), %rax` (48 3b 83), the only one with
 * a 32-bit displacement among its first instructions (m.gsignal's is 8-bit). The same code
 * in 1.16 to 1.23; the offset moves with m's fields (192 in 1.19 and 1.22). */
static int32_t m_curg_offset(struct unwinder *u, struct go_module *g, uint64_t pc)
{
    if (g->m_curg)
        return g->m_curg;
    g->m_curg = -1;
    struct gopcln_func f;
    uint8_t code[96];
    if (!gopcln_find(&g->tab, pc, &f) || f.end - f.entry < sizeof(code) ||
        !read_bytes(u, f.entry, code, sizeof(code)))
        return -1;
    for (size_t i = 0; i + 7 <= sizeof(code); i++) {
        if (code[i] == 0x48 && code[i + 1] == 0x3b && code[i + 2] == 0x83) {
            int32_t off;
            memcpy(&off, code + i + 3, 4);
            if (off > 0 && off < 4096)
                g->m_curg = off;
            break;
        }
    }
    return g->m_curg;
}

/* The goroutine a thread runs runtime.systemstack for, from its g0 (r14 holds the current
 * g in Go's register ABI, 1.17+): g0.m (offset 48, as g's first fields have been since
 * 1.4), m.g0 must be g0 again, m.curg the goroutine, whose saved sched (sp, pc at 56)
 * points into runtime.systemstack_switch on its own stack. Its stack is read from there as
 * at a cgo call; the unwind goes on at sched.pc (exact: not a return address). Read at the
 * unwind, after the sample: a systemstack call that has returned by then has cleared
 * sched.sp (a goroutine allocating here: two in three of those samples), or left other
 * frames there (its caller's return address must follow a call of systemstack), and the
 * stack ends at systemstack. */
static bool cross_systemstack(struct unwinder *u, struct snapshot *s, struct gstack *gs,
                              struct go_module *g, uint64_t *pc, uint64_t *sp)
{
    int32_t curg_off = m_curg_offset(u, g, *pc - 1);
    uint64_t g0 = s->regs.r14, m, m_g0, curg, bounds[2], sched[2];
    const struct go_copy *c = s->gcopy;
    if (c && c->g && c->sp && (!s->full_regs || c->g != g0)) {
        /* The kernel's, at the sample: the goroutine and its sched as they were. */
        curg = c->g;
        bounds[0] = c->lo;
        bounds[1] = c->hi;
        sched[0] = c->sp;
        sched[1] = c->pc;
    } else if (!s->full_regs || curg_off < 0 || !g0 ||
               u->read_mem(u->pid, &m, g0 + 48, 8) != 8 || !m ||
               u->read_mem(u->pid, &m_g0, m, 8) != 8 || m_g0 != g0 ||
               u->read_mem(u->pid, &curg, m + (uint64_t)curg_off, 8) != 8 || !curg ||
               curg == g0 || u->read_mem(u->pid, bounds, curg, 16) != 16 ||
               u->read_mem(u->pid, sched, curg + 56, 16) != 16) {
        return false;
    }
    uint64_t lo = bounds[0], hi = bounds[1], gsp = sched[0], gpc = sched[1];
    struct go_module *pm = module_of(u, gpc);
    if (hi <= lo || hi - lo > GO_MAX_STACK || gsp < lo || gsp >= hi || !pm ||
        !is_named(pm, gpc, "runtime.systemstack_switch"))
        return false;
    size_t len = read_gstack(u, s, curg, gsp, hi);
    if (!len)
        return false;
    /* The caller of systemstack, above systemstack_switch's frame, must still be there. */
    struct go_slot sw = classify(pm, gpc);
    uint64_t ret;
    if (sw.kind != GO_FRAME || (uint64_t)sw.delta + 8 > len)
        return false;
    memcpy(&ret, u->go_stack + sw.delta, 8);
    if (!calls_named(u, ret, "runtime.systemstack"))
        return false;
    gs->base = gsp;
    gs->len = len;
    *pc = gpc;
    *sp = gsp;
    return true;
}

/* At a return address into morestack (newstack on g0 growing the goroutine's stack): the
 * goroutine's frames, from the kernel's copy of it at the sample (gokernel.h), whose saved
 * sched morestack filled (sp and pc of the function whose prologue called it: its return
 * address must follow a call of morestack_noctxt or morestack). Not read live: a stack
 * growing is a moment, over by the unwind. */
static bool cross_morestack(struct unwinder *u, struct snapshot *s, struct gstack *gs,
                            uint64_t *pc, uint64_t *sp)
{
    const struct go_copy *c = s->gcopy;
    if (!c || !c->pc || !c->sp || !go_covers(u, c->pc) ||
        !(calls_named(u, c->pc, "runtime.morestack_noctxt") ||
          calls_named(u, c->pc, "runtime.morestack")))
        return false;
    size_t len = read_gstack(u, s, c->g, c->sp, c->hi);
    if (!len)
        return false;
    gs->base = c->sp;
    gs->len = len;
    *pc = c->pc;
    *sp = c->sp;
    return true;
}

/* At Go's signal handler (sigtramp; ra: its return address slot, which holds the restorer
 * the kernel's signal frame begins with): the interrupted pc and sp from the frame's
 * ucontext (after the restorer's address: uc_flags, uc_link, uc_stack, then mcontext's
 * r8 ... r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip), in the copy with the handler's
 * stack. Interrupted Go code's stack is its goroutine's, taken from the kernel's copy of
 * it at the sample (the signal stack is g's, the goroutine m.curg); not read live (the
 * goroutine runs on once the handler returns). */
static bool cross_signal(struct unwinder *u, struct snapshot *s, struct gstack *gs,
                         uint64_t ra, uint64_t *pc, uint64_t *sp)
{
    uint64_t uc = ra + 8, rsp, rip;
    const struct go_copy *c = s->gcopy;
    if (uc < ra || !stack_word(u, s, gs, uc + 160, &rsp) || !stack_word(u, s, gs, uc + 168, &rip) ||
        !go_covers(u, rip))
        return false;
    if (!in_snapshot(s, rsp, 8)) {
        if (!c || rsp < c->base || rsp - c->base >= c->len || rsp >= c->hi)
            return false;
        size_t len = read_gstack(u, s, c->g, rsp, c->hi);
        if (!len)
            return false;
        gs->base = rsp;
        gs->len = len;
    }
    *pc = rip;
    *sp = rsp;
    return true;
}

/* In nanotime1, walltime or time.now itself (pc): has it saved its sp in r12 yet
 * (`MOVQ SP, R12`, 49 89 e4, before its switch to g0)? Then r12, not sp, is what its pcsp
 * delta counts from. Known only with every register (a kernel copy, a stop). */
static bool vdso_saved_sp(struct unwinder *u, struct go_module *g, const struct snapshot *s,
                          uint64_t pc)
{
    struct gopcln_func f;
    uint8_t code[256];
    if (!s->full_regs || !gopcln_find(&g->tab, pc, &f) || pc - f.entry > sizeof(code) ||
        pc - f.entry < 3 || !read_bytes(u, f.entry, code, (size_t)(pc - f.entry)))
        return false;
    for (size_t i = 0; i + 3 <= pc - f.entry; i++)
        if (code[i] == 0x49 && code[i + 1] == 0x89 && code[i + 2] == 0xe4)
            return true;
    return false;
}

bool go_restorer(struct unwinder *u, struct snapshot *s, uint64_t *pc, uint64_t *sp)
{
    /* mov $15, %rax; syscall: glibc's __restore_rt (the sample at either instruction, or
     * after the call, in it). */
    static const uint8_t code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05};
    static const unsigned at[] = {0, 7, 9};
    uint8_t b[9];
    uint64_t rip = s->regs.rip;
    for (size_t i = 0; i < 3; i++) {
        if (rip < at[i] || !read_bytes(u, rip - at[i], b, sizeof(b)) || memcmp(b, code, 9))
            continue;
        struct gstack gs = {0};
        uint64_t p = 0, q = 0;
        if (s->regs.rsp < 8 || !cross_signal(u, s, &gs, s->regs.rsp - 8, &p, &q))
            return false;
        *pc = p;
        *sp = q;
        return true;
    }
    return false;
}

bool go_unwind(struct unwinder *u, struct snapshot *s, uint64_t *pc, uint64_t *sp, bool leaf,
               uint64_t *ips, int *n, int max, enum unwind_end *end)
{
    struct gstack gs = {0};
    bool desched = false, first = true;
    *end = UNWIND_TRUNCATED;
    for (int crossings = 0;;) {
        struct go_module *g = module_of(u, *pc);
        if (!g)
            return false; /* other code: DWARF's */
        struct go_slot st = classify(g, leaf ? *pc : *pc - 1);
        uint64_t ret, ra;
        switch (st.kind) {
        case GO_TOP:
            *end = UNWIND_COMPLETE;
            return true;
        case GO_STOP:
            return true;
        case GO_BAD:
            return true;
        case GO_MORESTACK:
            /* morestack's newstack preempting the goroutine: it is off the thread, whose
             * g0 stack is all there is (as after mcall); else the goroutine beneath. */
            if (desched) {
                *end = UNWIND_COMPLETE;
                return true;
            }
            if (leaf || crossings++ || !cross_morestack(u, s, &gs, pc, sp))
                return true;
            ret = *pc;
            break;
        case GO_SIGRETURN:
            /* In the restorer, the handler returned: the ucontext is at sp. */
            if (!leaf || crossings++ || *sp < 8 || !cross_signal(u, s, &gs, *sp - 8, pc, sp))
                return true;
            ret = *pc;
            st.kind = GO_ASYNC;
            break;
        case GO_SIGTRAMP:
            ra = *sp + (uint64_t)st.delta;
            if (ra < *sp || crossings++ || !cross_signal(u, s, &gs, ra, pc, sp))
                return true;
            ret = *pc;
            st.kind = GO_ASYNC; /* (the interrupted pc is exact) */
            break;
        case GO_CGOCALL:
            if (leaf || crossings++ || !cross_cgocall(u, s, &gs, pc, sp))
                return true;
            ret = *pc;
            break;
        case GO_SYSTEMSTACK:
            if (leaf || crossings++ || !cross_systemstack(u, s, &gs, g, pc, sp))
                return true;
            ret = *pc;
            st.kind = GO_ASYNC; /* (the next frame's pc is exact) */
            break;
        case GO_VDSO:
            /* Called back into from the vDSO's code (DWARF's frames above): the switch to
             * g0 is done, and the function's own sp, which its pcsp delta counts from, is
             * in r12 ("R12 unchanged by C code", sys_linux_amd64.s), as the DWARF pass
             * left it at this frame. Otherwise (in the function itself, perhaps before
             * its switch) a stop. */
            if (leaf && first) {
                /* Sampled in the function itself: on its goroutine's stack still (no copy
                 * of the goroutine: the kernel, or the stop, saw the thread on it), or
                 * switched to g0, its own sp in r12 and the goroutine copied. */
                uint64_t base = vdso_saved_sp(u, g, s, *pc) ? s->regs.r12 : *sp;
                ra = base + (uint64_t)st.delta;
                if (ra < base || !stack_word(u, s, &gs, ra, &ret) || !called_from(u, g, ret, st))
                    return true;
                *sp = ra + 8;
                *pc = ret;
                break;
            }
            if (leaf || !first || !u->go_r12_ok)
                return true;
            ra = u->go_r12 + (uint64_t)st.delta;
            if (ra < u->go_r12 || !stack_word(u, s, &gs, ra, &ret) || !called_from(u, g, ret, st))
                return true;
            *sp = ra + 8;
            *pc = ret;
            break;
        case GO_DESCHED:
            desched = true;
            /* fall through */
        case GO_FRAME:
        case GO_ASYNC:
        default:
            ra = *sp + (uint64_t)st.delta;
            if (ra < *sp || !stack_word(u, s, &gs, ra, &ret) || !called_from(u, g, ret, st))
                return true;
            *sp = ra + 8;
            *pc = ret;
            break;
        }
        if (*n == max) {
            *end = UNWIND_TOO_DEEP;
            return true;
        }
        ips[(*n)++] = ret;
        u->go_frames++;
        first = false;
        /* (asyncPreempt's "return address" is the instruction it interrupted.) */
        leaf = st.kind == GO_ASYNC;
    }
}

void go_flush(struct unwinder *u)
{
    memset(&u->go_rt, 0, sizeof(u->go_rt));
    while (u->go) {
        struct go_module *g = u->go;
        u->go = g->next;
        free(g);
    }
}

void go_finish(struct unwinder *u)
{
    go_flush(u);
    free(u->go_stack);
    u->go_stack = NULL;
}
