/* unwind.c: unwind a thread from a snapshot taken while it was stopped (or blocked).
 *
 * The thread is stopped only for PTRACE_GETREGS and one process_vm_readv of its stack; the
 * unwind runs afterwards, while the thread runs again, from the copy. libunwind-ptrace's
 * stock accessors would read the live thread with PEEKDATA (fails on a running thread) and
 * re-read /proc/PID/maps as the unwind crosses libraries (libunwind issue #431); its
 * _UPT_find_proc_info would also open and parse each library by path, in this privileged
 * process. Ours serve the stack from the snapshot and other memory from a page cache, and find
 * the unwind tables from the ELF headers in the process's memory: the unwinder opens no file.
 *
 * It does parse what the target controls (its stack, its .eh_frame_hdr and .eh_frame, through
 * libunwind): that parsing is bounded (every read goes through the accessors below, which
 * serve only the snapshot and file-backed mappings) and fuzzed (tests/fuzz/fuzz_unwind.c),
 * rather than moved behind the helper's boundary, which would cost a round trip to another
 * process for every sample (see daemon/DESIGN.md, "Privilege separation"). */
#include "unwind.h"

#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "log.h"
#include "maps.h"
#include "unwind_internal.h"

#define RED_ZONE 128

/* The accessors' argument: the unwinder and the snapshot being unwound. libunwind does not
 * pass it to every accessor in every path, so the context of the unwind in progress is also
 * kept here; unwinding is single-threaded. */
struct uctx {
    struct unwinder *u;
    struct snapshot *s;
    bool noinfo;        /* some frame had no unwind info: libunwind then guesses from rbp */
    uint64_t noinfo_ip;
    uint64_t cur_sp;    /* stack pointer of the frame being stepped */
    bool go_hit;        /* the frame being stepped was found to be Go code (gounwind.c) */
};
static struct uctx *cur;

/* libunwind blocks every signal around its cache lock at each step: two system calls per frame,
 * answered here from the mask read once per unwind. (daemon/DESIGN.md, "libunwind's signal
 * blocking".) */
static __thread bool unwinding;
static __thread bool mask_known;
static __thread sigset_t mask_now; /* this thread's mask */

static __thread sigset_t full_set;  /* sigfillset's, made once per thread */
static __thread bool have_full_set;

/* Do a and b hold the same signals? Only signals 1.._NSIG-1 count: glibc's sigset_t has room
 * for 1024, of which the kernel reads _NSIG - 1, and what lies past those may be anything
 * (libunwind's full set and the mask handed back differ there). Compared a word at a time:
 * signal n is bit (n - 1) % W of word (n - 1) / W, as sigismember reads it. */
static bool same_signals(const sigset_t *a, const sigset_t *b)
{
    enum { W = 8 * sizeof(unsigned long), N = _NSIG - 1 };
    for (size_t i = 0; i < N / W; i++)
        if (a->__val[i] != b->__val[i])
            return false;
    if (N % W) {
        unsigned long m = (1ul << (N % W)) - 1;
        if ((a->__val[N / W] ^ b->__val[N / W]) & m)
            return false;
    }
    return true;
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    if (unwinding && how == SIG_SETMASK && set) {
        if (!have_full_set) {
            sigfillset(&full_set);
            have_full_set = true;
        }
        if (old && same_signals(set, &full_set)) {
            *old = mask_now;
            if (cur)
                cur->u->masks_spared++;
            return 0;
        }
        if (!old && same_signals(set, &mask_now)) {
            if (cur)
                cur->u->masks_spared++;
            return 0;
        }
    }
    int r = pthread_sigmask(how, set, old);
    if (set)
        mask_known = false;
    if (r) {
        errno = r;
        return -1;
    }
    return 0;
}

/* libunwind's binary search of a .eh_frame_hdr table in the target's memory. Exported by
 * libunwind-x86_64 (it is what libunwind-ptrace's _UPT_find_proc_info calls) but not declared
 * in its headers. */
extern int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t as, unw_word_t ip,
                                              unw_dyn_info_t *di, unw_proc_info_t *pi,
                                              int need_unwind_info, void *arg);

/* Is [addr, addr + n) inside the snapshot? Written without addr + n, which a target can make
 * wrap around (an rbp of 0xfffffffffffffff8 followed by libunwind's frame-chain guess). */
bool in_snapshot(const struct snapshot *s, uint64_t addr, uint64_t n)
{
    return addr >= s->base && s->len >= n && addr - s->base <= s->len - n;
}

/* The default read_mem: the target's memory. */
static ssize_t read_remote(pid_t pid, void *dst, uint64_t addr, size_t len)
{
    struct iovec l = {dst, len}, r = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(pid, &l, 1, &r, 1, 0);
}

/* Read one word of file-backed memory through the page cache. */
int read_cached(struct unwinder *u, uint64_t addr, unw_word_t *val)
{
    const struct map_entry *m = u->maps ? maps_find(u->maps, addr) : NULL;
    if (!m)
        return -UNW_EINVAL;
    /* Only file-backed memory (code, .eh_frame, relocated read-only data) and the vDSO are
     * read live: anonymous memory (other stacks, heap) may have changed since the snapshot. */
    if (!m->path || (m->path[0] == '[' && strcmp(m->path, "[vdso]") != 0))
        return -UNW_EINVAL;
    if (addr > m->end - sizeof(*val)) /* maps entries are page-sized: no underflow */
        return -UNW_EINVAL;
    if (!u->pages) {
        u->pages = calloc(PAGE_CACHE_SLOTS, sizeof(*u->pages));
        if (!u->pages)
            return -UNW_ENOMEM;
    }
    uint64_t page = addr & ~4095ull;
    uint64_t off = addr - page;
    if (off + sizeof(*val) > 4096) {
        /* An unaligned word straddling two pages: from the two aligned words around it,
         * each in its page's slot (a return address just past a page boundary is checked
         * for the call before it at every unwind through it: Go's runtime.mstart). */
        unw_word_t lo, hi;
        uint64_t a = addr & ~7ull;
        int r = read_cached(u, a, &lo);
        r = r ? r : read_cached(u, a + 8, &hi);
        if (r)
            return r;
        uint8_t both[16];
        memcpy(both, &lo, 8);
        memcpy(both + 8, &hi, 8);
        memcpy(val, both + (addr - a), sizeof(*val));
        return 0;
    }
    struct page_slot *slot = &u->pages[(page >> 12) % PAGE_CACHE_SLOTS];
    if (slot->addr != page) {
        u->page_reads++;
        if (u->read_mem(u->pid, slot->data, page, 4096) != 4096) {
            slot->addr = 0;
            return -UNW_EINVAL;
        }
        slot->addr = page;
    }
    memcpy(val, slot->data + off, sizeof(*val));
    return 0;
}

/* Was the instruction before the sample's pc `leave` (C9) or `pop %rbp` (5D)? */
static bool popped_rbp(struct unwinder *u, const struct snapshot *s)
{
    unw_word_t w;
    if (s->regs.rip < 8 || read_cached(u, s->regs.rip - 8, &w) < 0)
        return false;
    uint8_t last = (uint8_t)(w >> 56);
    return last == 0xc9 || last == 0x5d;
}

/* Could addr above the copy still be the thread's stack? Not past the end of the mapping
 * that holds the copy's start (the stack's top): the kernel's copy runs on into whatever is
 * mapped above it (a library's pages, say), and an unwind that went astray in a frame reads
 * there too; copying more would not help it. Unknown (no mapping known there yet): maybe. */
static bool in_stack_mapping(struct unwinder *u, const struct snapshot *s, uint64_t addr)
{
    const struct map_entry *m = u->maps ? maps_find(u->maps, s->base) : NULL;
    return !m || addr < m->end;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
                      void *arg)
{
    (void)as;
    struct uctx *c = cur;
    if (!c || write)
        return -UNW_EINVAL;
    (void)arg;
    struct snapshot *s = c->s;
    if (in_snapshot(s, addr, sizeof(*val))) {
        memcpy(val, s->data + (addr - s->base), sizeof(*val));
        if (addr + sizeof(*val) > s->max_read)
            s->max_read = addr + sizeof(*val);
        return 0;
    }
    if (addr + sizeof(*val) == s->base && s->base == s->regs.rsp && popped_rbp(c->u, s)) {
        /* The word just below a kernel copy (which starts at sp): after `leave` or `pop %rbp`
         * ending a function that then jumps on (a tail call), GCC's CFI keeps the caller's
         * rbp saved at CFA-16, which is sp-8, the word just popped into rbp. (CPython
         * 3.14's `leave; jmp *%rax` in PyObject_Vectorcall: 0.3-0.9% of a busy thread's
         * unwinds ended there.) */
        *val = s->regs.rbp;
        return 0;
    }
    /* (Not once a frame had no CFI: libunwind's guesses from rbp there read anywhere, and
     * the frames beyond it are dropped anyway, unwind_pass.) */
    if (addr >= s->base && addr - s->base >= s->len && addr - s->base - s->len < 65536 &&
        !c->noinfo && in_stack_mapping(c->u, s, addr)) {
        s->short_copy = true; /* probably stack just above the copy */
        /* The thread has run on since the kernel's copy: its live stack there now holds
         * other frames, which would unwind into nonsense. */
        if (s->sealed)
            return -UNW_EINVAL;
    }
    return read_cached(c->u, addr, val);
}

bool is_code(struct unwinder *u, uint64_t addr)
{
    const struct map_entry *m = u->maps ? maps_find(u->maps, addr) : NULL;
    return m && (m->prot & MAP_PROT_X);
}

/* Was the instruction before ret a call? Checks the common encodings: call rel32 (E8),
 * call *%reg (FF D0+r), call *disp8(%reg) (FF 50+r), call *disp32(%rip) or *disp32(%reg)
 * (FF 15 / FF 90+r), call *(%reg,...) with SIB forms. */
bool preceded_by_call(struct unwinder *u, uint64_t ret)
{
    unw_word_t w;
    if (ret < 8 || read_cached(u, ret - 8, &w) < 0)
        return false;
    uint8_t b[8];
    memcpy(b, &w, 8); /* b[7] is the byte at ret - 1 */
    if (b[3] == 0xe8)
        return true; /* ret-5 */
    if (b[6] == 0xff && (b[7] & 0xf8) == 0xd0)
        return true; /* ret-2: call *%reg */
    if (b[5] == 0xff && ((b[6] & 0xf8) == 0x50 || b[6] == 0x14))
        return true; /* ret-3 */
    if (b[2] == 0xff && (b[3] == 0x15 || (b[3] & 0xf8) == 0x90))
        return true; /* ret-6 */
    if (b[1] == 0xff && (b[2] == 0x94 || b[2] == 0x14))
        return true; /* ret-7 */
    if (b[4] == 0xff && b[5] == 0x54)
        return true; /* ret-4: call *disp8(%reg,%idx,s) */
    return false;
}

/* A blocked thread has no saved RBP. Frame-pointer code needs it for the caller's CFA
 * (rbp + 16). Find the lowest aligned stack slot that looks like a frame record: [slot + 8]
 * is a return address (in an executable mapping, after a call instruction) and [slot] is 0
 * or the address of a higher such record. The scan starts at the stack pointer of the frame
 * that needs rbp (libunwind asks while stepping it), not at the leaf's: a frame record lies
 * above its own frame's locals, and the leaf (the syscall wrapper) may hold a 0 just below
 * its return address, which looks like a record but is not. Checked against gdb. */
static bool guess_bp(struct unwinder *u, struct snapshot *s, uint64_t from, uint64_t *bp)
{
    uint64_t sp = from > s->regs.rsp ? from : s->regs.rsp;
    if (sp < s->base || sp - s->base > s->len)
        return false;
    for (uint64_t slot = (sp + 7) & ~7ull; in_snapshot(s, slot, 16); slot += 8) {
        uint64_t saved, ret;
        memcpy(&saved, s->data + (slot - s->base), 8);
        memcpy(&ret, s->data + (slot + 8 - s->base), 8);
        if (!is_code(u, ret) || !preceded_by_call(u, ret))
            continue;
        if (saved == 0) {
            *bp = slot;
            return true;
        }
        if (saved <= slot || !in_snapshot(s, saved, 16) || (saved & 7))
            continue;
        uint64_t ret2;
        memcpy(&ret2, s->data + (saved + 8 - s->base), 8);
        if (is_code(u, ret2) && preceded_by_call(u, ret2)) {
            *bp = slot;
            return true;
        }
    }
    return false;
}

static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
                      void *arg)
{
    (void)as;
    (void)arg;
    struct uctx *c = cur;
    if (!c)
        return -UNW_EINVAL;
    if (write)
        return -UNW_EREADONLYREG;
    const struct user_regs_struct *r = &c->s->regs;
    switch (reg) {
    case UNW_X86_64_RIP:
        *val = r->rip;
        return 0;
    case UNW_X86_64_RSP:
        *val = r->rsp;
        return 0;
    case UNW_X86_64_RBP:
        if (c->s->full_regs) {
            *val = r->rbp;
            return 0;
        }
        if (!c->s->bp_tried) {
            c->s->bp_tried = true;
            c->s->bp_found = guess_bp(c->u, c->s, c->cur_sp, &c->s->bp_guess);
        }
        if (!c->s->bp_found)
            return -UNW_EBADREG;
        *val = c->s->bp_guess;
        return 0;
    default:
        break;
    }
    if (!c->s->full_regs)
        return -UNW_EBADREG;
    switch (reg) {
    case UNW_X86_64_RAX: *val = r->rax; break;
    case UNW_X86_64_RDX: *val = r->rdx; break;
    case UNW_X86_64_RCX: *val = r->rcx; break;
    case UNW_X86_64_RBX: *val = r->rbx; break;
    case UNW_X86_64_RSI: *val = r->rsi; break;
    case UNW_X86_64_RDI: *val = r->rdi; break;
    case UNW_X86_64_R8: *val = r->r8; break;
    case UNW_X86_64_R9: *val = r->r9; break;
    case UNW_X86_64_R10: *val = r->r10; break;
    case UNW_X86_64_R11: *val = r->r11; break;
    case UNW_X86_64_R12: *val = r->r12; break;
    case UNW_X86_64_R13: *val = r->r13; break;
    case UNW_X86_64_R14: *val = r->r14; break;
    case UNW_X86_64_R15: *val = r->r15; break;
    default:
        return -UNW_EBADREG;
    }
    return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                        void *arg)
{
    (void)as, (void)reg, (void)val, (void)write, (void)arg;
    return -UNW_EBADREG;
}

/* Read a DWARF-encoded pointer (the forms .eh_frame_hdr uses) at p; addr is p's address in
 * the target, base the start of the header (for datarel). */
static bool read_encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t addr,
                         uint64_t hdr_addr, uint64_t *out)
{
    uint64_t v;
    switch (enc & 0x0f) {
    case 0x00: /* absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        if (end - *p < 8)
            return false;
        memcpy(&v, *p, 8);
        *p += 8;
        break;
    case 0x03: { /* udata4 */
        uint32_t x;
        if (end - *p < 4)
            return false;
        memcpy(&x, *p, 4);
        v = x;
        *p += 4;
        break;
    }
    case 0x0b: { /* sdata4 */
        int32_t x;
        if (end - *p < 4)
            return false;
        memcpy(&x, *p, 4);
        v = (uint64_t)(int64_t)x;
        *p += 4;
        break;
    }
    default:
        return false;
    }
    switch (enc & 0x70) {
    case 0x00:
        break;
    case 0x10: /* pcrel */
        v += addr;
        break;
    case 0x30: /* datarel */
        v += hdr_addr;
        break;
    default:
        return false;
    }
    *out = v;
    return true;
}

/* Read n bytes of file-backed memory at addr through the page cache. */
bool read_bytes(struct unwinder *u, uint64_t addr, void *out, size_t n)
{
    uint8_t *o = out;
    while (n > 0) {
        uint64_t word = addr & ~7ull, skip = addr - word;
        unw_word_t w;
        if (read_cached(u, word, &w) < 0)
            return false;
        size_t k = 8 - skip < n ? 8 - skip : n;
        memcpy(o, (uint8_t *)&w + skip, k);
        o += k;
        addr += k;
        n -= k;
    }
    return true;
}

#define MAX_TABLES 4096

/* Fill t from the ELF headers at t->base: where the object's segments are, and its
 * .eh_frame_hdr binary search table. Every field is the target's to forge: each is checked
 * before it is used, and what libunwind is given stays inside the PT_GNU_EH_FRAME segment. */
int elf_phdrs(struct unwinder *u, uint64_t base, Elf64_Phdr *ph, uint64_t *first)
{
    Elf64_Ehdr eh;
    if (!read_bytes(u, base, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
        eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS || eh.e_phoff > 65536 ||
        !read_bytes(u, base + eh.e_phoff, ph, eh.e_phnum * sizeof(Elf64_Phdr)))
        return 0;
    /* The segment holding file offset 0 is mapped at base: that gives the load bias. */
    for (int i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset < 4096) {
            *first = ph[i].p_vaddr & ~4095ull;
            return eh.e_phnum;
        }
    }
    return 0;
}

static void eh_build(struct unwinder *u, struct eh_table *t)
{
    uint64_t page = 4096, first;
    Elf64_Phdr ph[MAX_PHDRS];
    int phnum = elf_phdrs(u, t->base, ph, &first);
    const Elf64_Phdr *hdr = NULL;
    for (int i = 0; i < phnum && !hdr; i++)
        if (ph[i].p_type == PT_GNU_EH_FRAME)
            hdr = &ph[i];
    if (!hdr)
        return;
    uint64_t bias = t->base - first;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < phnum; i++) {
        if (ph[i].p_type != PT_LOAD)
            continue;
        uint64_t a = bias + (ph[i].p_vaddr & ~(page - 1)), e = bias + ph[i].p_vaddr + ph[i].p_memsz;
        if (e < a || ph[i].p_memsz > (1ull << 40))
            return; /* wraps around: not a loaded object */
        lo = a < lo ? a : lo;
        hi = e > hi ? e : hi;
    }
    uint64_t hdr_addr = bias + hdr->p_vaddr;
    if (hdr->p_filesz < 12 || hdr->p_filesz > (1ull << 32) || hdr_addr < lo ||
        hdr_addr - lo > hi - lo || hdr->p_filesz > hi - hdr_addr)
        return;
    uint8_t head[4 + 2 * 8];
    size_t hn = hdr->p_filesz < sizeof(head) ? (size_t)hdr->p_filesz : sizeof(head);
    if (!read_bytes(u, hdr_addr, head, hn))
        return;
    const uint8_t *p = head + 4, *end = head + hn;
    uint8_t version = head[0], ptr_enc = head[1], count_enc = head[2], table_enc = head[3];
    uint64_t eh_frame, count;
    if (version != 1 || table_enc != 0x3b /* datarel | sdata4 */ ||
        !read_encoded(&p, end, ptr_enc, hdr_addr + (uint64_t)(p - head), hdr_addr, &eh_frame) ||
        !read_encoded(&p, end, count_enc, hdr_addr + (uint64_t)(p - head), hdr_addr, &count))
        return;
    uint64_t table_off = (uint64_t)(p - head);
    /* The table's entries (two 4-byte values each) must lie in the segment. */
    if (count == 0 || count > (hdr->p_filesz - table_off) / 8)
        return;
    memset(&t->di, 0, sizeof(t->di));
    t->di.start_ip = lo;
    t->di.end_ip = hi;
    t->di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    t->di.u.rti.segbase = hdr_addr;
    t->di.u.rti.table_len = count * 8 / sizeof(unw_word_t);
    t->di.u.rti.table_data = hdr_addr + table_off;
    t->lo = lo;
    t->hi = hi;
    t->ok = true;
}

/* The mapping of m's file that holds its file offset 0: where its ELF headers are. */
static const struct map_entry *base_mapping(const struct unwinder *u, const struct map_entry *m)
{
    const struct map_entry *best = NULL;
    for (size_t i = 0; i < u->maps->n; i++) {
        const struct map_entry *e = &u->maps->v[i];
        if (e->pgoff == 0 && e->path && !strcmp(e->path, m->path) && e->inode == m->inode &&
            e->dev_major == m->dev_major && e->dev_minor == m->dev_minor && e->start <= m->start &&
            (!best || e->start > best->start))
            best = e; /* the closest one below: a file mapped twice has two */
    }
    return best;
}

/* The entry of the object mapped at m, its unwind table found on first use. */
static struct eh_table *module_table(struct unwinder *u, const struct map_entry *m)
{
    const struct map_entry *b = base_mapping(u, m);
    if (!b)
        return NULL;
    for (size_t i = 0; i < u->ntables; i++)
        if (u->tables[i].base == b->start)
            return &u->tables[i];
    if (u->ntables == MAX_TABLES)
        return NULL;
    if (u->ntables == u->cap_tables) {
        size_t cap = u->cap_tables ? u->cap_tables * 2 : 16;
        struct eh_table *v = realloc(u->tables, cap * sizeof(*v));
        if (!v)
            return NULL;
        u->tables = v;
        u->cap_tables = cap;
    }
    struct eh_table *t = &u->tables[u->ntables++];
    memset(t, 0, sizeof(*t));
    t->base = b->start;
    eh_build(u, t);
    return t;
}

/* Unwind tables, from the ELF headers and .eh_frame_hdr in the process's memory (file-backed
 * mappings and the vDSO alike); nothing for anonymous memory (JIT code). A frame without
 * unwind info is remembered: libunwind then falls back to the rbp chain, which in code built
 * without frame pointers yields invented frames. */
static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                          int need_unwind_info, void *arg)
{
    (void)arg;
    struct uctx *c = cur;
    if (!c)
        return -UNW_EINVAL;
    struct unwinder *u = c->u;
    const struct map_entry *m = u->maps ? maps_find(u->maps, ip) : NULL;
    int r = -UNW_ENOINFO;
    if (!m) {
        u->maps_miss = true;
    } else if (m->path && (m->path[0] == '/' || !strcmp(m->path, "[vdso]"))) {
        struct eh_table *t = module_table(u, m);
        if (t && t->ok && ip >= t->lo && ip < t->hi) {
            unw_dyn_info_t di = t->di;
            r = _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, need_unwind_info, c);
        }
        /* Code without CFI in an object not looked at yet: Go's? (gounwind.c) */
        if (r < 0 && t && !t->go_probed) {
            go_probe(u, t);
            if (go_covers(u, ip))
                c->go_hit = true;
        }
    }
    if (r < 0 && !c->noinfo) {
        c->noinfo = true;
        c->noinfo_ip = ip;
    }
    return r;
}

/* Only called for dynamically registered unwind info, which find_proc_info never gives. */
static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
    (void)as, (void)pi, (void)arg;
}

/* libunwind's own dynamic registration (_U_dyn_register) is used by nobody we profile, and
 * looking for it costs a maps scan per unknown ip: report none. */
static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
    (void)as, (void)addr, (void)arg;
    return -UNW_ENOINFO;
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
    (void)as, (void)c, (void)arg;
    return -UNW_EINVAL;
}

static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
                         unw_word_t *off, void *arg)
{
    (void)as, (void)addr, (void)buf, (void)len, (void)off, (void)arg;
    return -UNW_ENOINFO;
}

static unw_accessors_t accessors = {
    .find_proc_info = find_proc_info,
    .put_unwind_info = put_unwind_info,
    .get_dyn_info_list_addr = get_dyn_info_list_addr,
    .access_mem = access_mem,
    .access_reg = access_reg,
    .access_fpreg = access_fpreg,
    .resume = resume,
    .get_proc_name = get_proc_name,
};

int unwinder_init(struct unwinder *u, pid_t pid, const struct maps *maps)
{
    memset(u, 0, sizeof(*u));
    u->pid = pid;
    u->maps = maps;
    u->read_mem = read_remote;
    u->as = unw_create_addr_space(&accessors, 0);
    if (!u->as)
        return -ENOMEM;
    /* One cache for all threads of the process: the register-state cache keyed by ip makes
     * a warm unwind skip the .eh_frame search entirely. */
    if (unw_set_caching_policy(u->as, UNW_CACHE_GLOBAL) < 0 ||
        unw_set_cache_size(u->as, 4096, 0) < 0)
        log_warn("pid %d: libunwind's cache cannot be set up: each unwind searches .eh_frame "
                 "again (several times slower)", pid);
    return 0;
}

void unwinder_finish(struct unwinder *u)
{
    go_finish(u);
    if (u->as)
        unw_destroy_addr_space(u->as);
    free(u->pages);
    free(u->tables);
    memset(u, 0, sizeof(*u));
}

void unwinder_flush(struct unwinder *u)
{
    if (u->as)
        unw_flush_cache(u->as, 0, 0);
    if (u->pages)
        for (int i = 0; i < PAGE_CACHE_SLOTS; i++)
            u->pages[i].addr = 0;
    u->ntables = 0;
    u->maps_miss = false;
    go_flush(u);
}

/* One libunwind pass over the snapshot's current registers. Stops at a frame in Go code
 * (*go_at, the frame's stack pointer in *go_sp: the last of the frames returned), which
 * gounwind.c steps on. */
static int unwind_pass(struct unwinder *u, struct snapshot *s, uint64_t *ips, int max,
                       enum unwind_end *end, bool *go_at, uint64_t *go_sp)
{
    struct uctx c = {.u = u, .s = s};
    *go_at = false;
    unw_cursor_t cursor;
    int n = 0;
    *end = UNWIND_TRUNCATED;
    if (!u->as)
        return 0;
    cur = &c;
    /* (The mask for this unwind's steps' signal-mask calls, above.) */
    if (!mask_known)
        mask_known = pthread_sigmask(SIG_SETMASK, NULL, &mask_now) == 0;
    unwinding = mask_known;
    /* unw_init_remote leaves some cursor fields unset (valgrind sees libunwind 1.6.2 branch
     * on them in unw_step's fallback path): start from zeroes. */
    memset(&cursor, 0, sizeof(cursor));
    if (unw_init_remote(&cursor, u->as, &c) < 0)
        goto out;
    for (;;) {
        unw_word_t ip;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0)
            break;
        if (ip == 0) {
            /* A zero return address ends the chain (the x86-64 ABI's marker). libunwind's
             * step says so itself (returns 0) when it works from its cache, but steps to ip 0
             * and returns 1 when it parses the frame's CFI afresh: the same stack was
             * complete or truncated depending on the cache (found by fuzz_unwind). */
            if (n > 0)
                *end = UNWIND_COMPLETE;
            break;
        }
        if (n == max) {
            *end = UNWIND_TOO_DEEP;
            break;
        }
        ips[n++] = ip;
        unw_word_t sp;
        if (unw_get_reg(&cursor, UNW_REG_SP, &sp) == 0)
            c.cur_sp = sp;
        if (u->go && go_covers(u, ip)) {
            *go_at = true;
            *go_sp = c.cur_sp;
            /* (r12 there: where Go's vDSO callers keep their own stack pointer.) */
            unw_word_t r12;
            u->go_r12_ok = s->full_regs && n > 1 &&
                           unw_get_reg(&cursor, UNW_X86_64_R12, &r12) == 0;
            u->go_r12 = u->go_r12_ok ? r12 : 0;
            break;
        }
        int r = unw_step(&cursor);
        if (c.go_hit) {
            /* This frame's code was just found to be Go's (its lookup found no CFI). */
            *go_at = true;
            *go_sp = c.cur_sp;
            u->go_r12_ok = false;
            break;
        }
        if (r == 0) {
            *end = UNWIND_COMPLETE;
            break;
        }
        if (r < 0)
            break;
    }
out:
    unwinding = false;
    cur = NULL;
    if (c.noinfo && n > 0) {
        /* Keep the frames up to the one without unwind info; what libunwind guessed beyond
         * it from rbp is not trustworthy. (ip - 1 is what it looks up for callers.) The Go
         * frame a pass stopped at has none either: gounwind.c goes on from it. */
        for (int i = 0; i < n; i++) {
            if (ips[i] == c.noinfo_ip || ips[i] - 1 == c.noinfo_ip) {
                if (*go_at && i == n - 1)
                    break;
                n = i + 1;
                *end = UNWIND_TRUNCATED;
                *go_at = false;
                break;
            }
        }
    }
    return n;
}

/* Just after a syscall instruction? (0f 05 before pc) */
static bool after_syscall(struct unwinder *u, uint64_t pc)
{
    unw_word_t w;
    if (pc < 8 || read_cached(u, pc - 8, &w) < 0)
        return false;
    return (w >> 48) == 0x050f;
}

void unwinder_set_tid(struct unwinder *u, pid_t tid)
{
    if (u->pid == tid || !u->as)
        return;
    u->pid = tid;
    unwinder_flush(u);
}

/* The DWARF part of an unwind from the snapshot's registers (see unwinder_unwind). */
static int dwarf_unwind(struct unwinder *u, struct snapshot *s, uint64_t *ips, int max,
                        enum unwind_end *end, bool *go_at, uint64_t *go_sp)
{
    int n = unwind_pass(u, s, ips, max, end, go_at, go_sp);
    if (n != 1 || *end != UNWIND_TRUNCATED || max < 2 || *go_at)
        return n;
    /* The leaf has no unwind information. glibc's syscall stubs leave their syscall
     * instruction and what follows it without CFI on purpose (clone3: parent and child
     * both return there), so a thread stopped right after such a syscall is common.
     * A new thread there has rax 0 from clone: it has not run a single instruction of its
     * own, and this one frame is its whole stack. Otherwise, if the word at sp is a return
     * address (in code, just after a call), the leaf pushed nothing: step to its caller by
     * hand and let libunwind go on from there. */
    uint64_t pc = s->regs.rip, sp = s->regs.rsp;
    if (s->full_regs && s->regs.rax == 0 &&
        ((long)s->regs.orig_rax == SYS_clone || (long)s->regs.orig_rax == SYS_clone3) &&
        after_syscall(u, pc)) {
        *end = UNWIND_COMPLETE;
        return 1;
    }
    uint64_t ret;
    if (!in_snapshot(s, sp, 8))
        return n;
    memcpy(&ret, s->data + (sp - s->base), 8);
    if (!is_code(u, ret) || !preceded_by_call(u, ret))
        return n;
    struct user_regs_struct saved = s->regs;
    s->regs.rip = ret;
    s->regs.rsp = sp + 8;
    int m = unwind_pass(u, s, ips + 1, max - 1, end, go_at, go_sp);
    s->regs = saved;
    if (m == 0) {
        *end = UNWIND_TRUNCATED;
        return 1;
    }
    return 1 + m;
}

/* Legs of an unwind that crosses between Go code and other code: a bound on a stack that
 * would bounce between them for ever. */
#define MAX_LEGS 16

int unwinder_unwind(struct unwinder *u, struct snapshot *s, uint64_t *ips, int max,
                    enum unwind_end *end)
{
    bool go_at;
    uint64_t go_sp, rpc, rsp;
    int n;
    bool exact = false; /* the first Go leg's pc is an interrupted one, not a return address */
    if (u->go && s->gcopy && max >= 2 && go_restorer(u, s, &rpc, &rsp)) {
        ips[0] = s->regs.rip;
        ips[1] = rpc;
        n = 2;
        *end = UNWIND_TRUNCATED;
        go_at = true;
        go_sp = rsp;
        exact = true;
    } else {
        n = dwarf_unwind(u, s, ips, max, end, &go_at, &go_sp);
    }
    for (int leg = 0; go_at && n > 0; leg++) {
        uint64_t pc = ips[n - 1], sp = go_sp;
        bool leaf = n == 1 || exact;
        exact = false;
        if (leg == MAX_LEGS || go_unwind(u, s, &pc, &sp, leaf, ips, &n, max, end))
            break;
        /* Out of Go code into code with CFI at pc (the last frame), sp: DWARF again, with
         * only those two registers known (rbp is guessed, as for a blocked thread). */
        struct user_regs_struct saved = s->regs;
        bool full = s->full_regs, tried = s->bp_tried, found = s->bp_found;
        uint64_t guess = s->bp_guess;
        memset(&s->regs, 0, sizeof(s->regs));
        s->regs.rip = pc;
        s->regs.rsp = sp;
        s->full_regs = false;
        s->bp_tried = false;
        int m = unwind_pass(u, s, ips + n - 1, max - n + 1, end, &go_at, &go_sp);
        s->regs = saved;
        s->full_regs = full;
        s->bp_tried = tried;
        s->bp_found = found;
        s->bp_guess = guess;
        if (m == 0) {
            *end = UNWIND_TRUNCATED;
            break;
        }
        n += m - 1;
    }
    return n;
}

int snapshot_copy_stack(pid_t tid, uint64_t sp, uint64_t limit, struct snapshot *s)
{
    uint64_t base = sp > RED_ZONE ? sp - RED_ZONE : 0;
    if (limit <= base)
        return -EFAULT;
    /* Remote side split into pages: the copy then ends exactly at the first unreadable page
     * (the top of the stack mapping, or a guard page), whatever the kernel's granularity for
     * partial transfers. */
    enum { MAXIOV = 1024 };
    struct iovec remote[MAXIOV];
    size_t want = limit - base < s->cap ? (size_t)(limit - base) : s->cap;
    size_t total = want;
    int n = 0;
    uint64_t a = base;
    while (want > 0 && n < MAXIOV) {
        uint64_t next = (a & ~4095ull) + 4096;
        size_t chunk = (size_t)(next - a);
        if (chunk > want)
            chunk = want;
        remote[n].iov_base = (void *)(uintptr_t)a;
        remote[n].iov_len = chunk;
        n++;
        a += chunk;
        want -= chunk;
    }
    struct iovec local = {s->data, total - want};
    ssize_t got = process_vm_readv(tid, &local, 1, remote, (unsigned long)n, 0);
    if (got < 0)
        return -errno;
    if (got == 0)
        return -EFAULT;
    snapshot_reset(s);
    s->base = base;
    s->len = (size_t)got;
    return 0;
}

void snapshot_reset(struct snapshot *s)
{
    s->max_read = 0;
    s->short_copy = false;
    s->sealed = false;
    s->gcopy = NULL;
    s->bp_tried = false;
    s->bp_found = false;
}
