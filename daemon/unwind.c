/* unwind.c: unwind a thread from a snapshot taken while it was stopped (or blocked).
 *
 * The thread is stopped only for PTRACE_GETREGS and one process_vm_readv of its stack; the
 * unwind runs afterwards, while the thread runs again, from the copy. libunwind-ptrace's
 * stock accessors would read the live thread with PEEKDATA (fails on a running thread) and
 * re-read /proc/PID/maps as the unwind crosses libraries (libunwind issue #431); ours serve
 * the stack from the snapshot and other memory from a page cache, and delegate only the
 * search for unwind tables to one long-lived _UPT handle. */
#include "unwind.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <libunwind-ptrace.h>

#include "log.h"
#include "maps.h"

#define RED_ZONE 128

/* The accessors' argument: the unwinder and the snapshot being unwound. Nested calls from
 * _UPT_find_proc_info pass the _UPT handle instead (it forwards its own argument), so the
 * context of the unwind in progress is also kept here; unwinding is single-threaded. */
struct uctx {
    struct unwinder *u;
    struct snapshot *s;
};
static struct uctx *cur;

/* Read one word of file-backed memory through the page cache. */
static int read_cached(struct unwinder *u, uint64_t addr, unw_word_t *val)
{
    const struct map_entry *m = u->maps ? maps_find(u->maps, addr) : NULL;
    if (!m) {
        u->maps_miss = true;
        return -UNW_EINVAL;
    }
    /* Only file-backed memory (code, .eh_frame, relocated read-only data) is read live:
     * anonymous memory (other stacks, heap) may have changed since the snapshot. */
    if (!m->path || m->path[0] == '[')
        return -UNW_EINVAL;
    if (addr + sizeof(*val) > m->end)
        return -UNW_EINVAL;
    if (!u->pages) {
        u->pages = calloc(PAGE_CACHE_SLOTS, sizeof(*u->pages));
        if (!u->pages)
            return -UNW_ENOMEM;
    }
    uint64_t page = addr & ~4095ull;
    uint64_t off = addr - page;
    if (off + sizeof(*val) > 4096) {
        /* Unaligned word straddling two pages: read it directly. */
        struct iovec l = {val, sizeof(*val)}, r = {(void *)(uintptr_t)addr, sizeof(*val)};
        u->page_reads++;
        return process_vm_readv(u->pid, &l, 1, &r, 1, 0) == sizeof(*val) ? 0 : -UNW_EINVAL;
    }
    struct page_slot *slot = &u->pages[(page >> 12) % PAGE_CACHE_SLOTS];
    if (slot->addr != page) {
        struct iovec l = {slot->data, 4096}, r = {(void *)(uintptr_t)page, 4096};
        u->page_reads++;
        if (process_vm_readv(u->pid, &l, 1, &r, 1, 0) != 4096) {
            slot->addr = 0;
            return -UNW_EINVAL;
        }
        slot->addr = page;
    }
    memcpy(val, slot->data + off, sizeof(*val));
    return 0;
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
    if (addr >= s->base && addr + sizeof(*val) <= s->base + s->len) {
        memcpy(val, s->data + (addr - s->base), sizeof(*val));
        return 0;
    }
    return read_cached(c->u, addr, val);
}

static bool is_code(struct unwinder *u, uint64_t addr)
{
    const struct map_entry *m = u->maps ? maps_find(u->maps, addr) : NULL;
    return m && (m->prot & MAP_PROT_X);
}

/* Was the instruction before ret a call? Checks the common encodings: call rel32 (E8),
 * call *%reg (FF D0+r), call *disp8(%reg) (FF 50+r), call *disp32(%rip) or *disp32(%reg)
 * (FF 15 / FF 90+r), call *(%reg,...) with SIB forms. */
static bool preceded_by_call(struct unwinder *u, uint64_t ret)
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
 * or the address of a higher such record. Checked against gdb: it finds the same RBP. */
static bool guess_bp(struct unwinder *u, struct snapshot *s, uint64_t *bp)
{
    uint64_t sp = s->regs.rsp;
    uint64_t end = s->base + s->len;
    for (uint64_t slot = (sp + 7) & ~7ull; slot + 16 <= end; slot += 8) {
        uint64_t saved, ret;
        memcpy(&saved, s->data + (slot - s->base), 8);
        memcpy(&ret, s->data + (slot + 8 - s->base), 8);
        if (!is_code(u, ret) || !preceded_by_call(u, ret))
            continue;
        if (saved == 0) {
            *bp = slot;
            return true;
        }
        if (saved <= slot || saved + 16 > end || (saved & 7))
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
            c->s->bp_found = guess_bp(c->u, c->s, &c->s->bp_guess);
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

/* Unwind tables are found by the _UPT handle, which maps the ELF file once per library and
 * reads .eh_frame through our access_mem (the page cache). */
static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                          int need_unwind_info, void *arg)
{
    (void)arg;
    if (!cur)
        return -UNW_EINVAL;
    return _UPT_find_proc_info(as, ip, pi, need_unwind_info, cur->u->upt);
}

static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
    (void)arg;
    if (cur)
        _UPT_put_unwind_info(as, pi, cur->u->upt);
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
    u->as = unw_create_addr_space(&accessors, 0);
    if (!u->as)
        return -ENOMEM;
    /* One cache for all threads of the process: the register-state cache keyed by ip makes
     * a warm unwind skip the .eh_frame search entirely. */
    unw_set_caching_policy(u->as, UNW_CACHE_GLOBAL);
    unw_set_cache_size(u->as, 4096, 0);
    u->upt = _UPT_create(pid);
    if (!u->upt) {
        unw_destroy_addr_space(u->as);
        u->as = NULL;
        return -ENOMEM;
    }
    return 0;
}

void unwinder_finish(struct unwinder *u)
{
    if (u->upt)
        _UPT_destroy(u->upt);
    if (u->as)
        unw_destroy_addr_space(u->as);
    free(u->pages);
    memset(u, 0, sizeof(*u));
}

void unwinder_flush(struct unwinder *u)
{
    if (u->as)
        unw_flush_cache(u->as, 0, 0);
    /* The _UPT handle caches the ELF image of the last library it used: recreate it. */
    if (u->upt) {
        _UPT_destroy(u->upt);
        u->upt = _UPT_create(u->pid);
    }
    if (u->pages)
        for (int i = 0; i < PAGE_CACHE_SLOTS; i++)
            u->pages[i].addr = 0;
    u->maps_miss = false;
}

int unwinder_unwind(struct unwinder *u, struct snapshot *s, uint64_t *ips, int max,
                    enum unwind_end *end)
{
    struct uctx c = {.u = u, .s = s};
    unw_cursor_t cursor;
    int n = 0;
    *end = UNWIND_TRUNCATED;
    if (!u->upt)
        return 0;
    cur = &c;
    if (unw_init_remote(&cursor, u->as, &c) < 0)
        goto out;
    for (;;) {
        unw_word_t ip;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        if (n == max) {
            *end = UNWIND_TOO_DEEP;
            break;
        }
        ips[n++] = ip;
        int r = unw_step(&cursor);
        if (r == 0) {
            *end = UNWIND_COMPLETE;
            break;
        }
        if (r < 0)
            break;
    }
out:
    cur = NULL;
    return n;
}

int snapshot_copy_stack(pid_t tid, uint64_t sp, struct snapshot *s)
{
    uint64_t base = sp > RED_ZONE ? sp - RED_ZONE : 0;
    /* Remote side split into pages: the copy then ends exactly at the first unreadable page
     * (the top of the stack mapping, or a guard page), whatever the kernel's granularity for
     * partial transfers. */
    enum { MAXIOV = 1024 };
    struct iovec remote[MAXIOV];
    size_t want = s->cap;
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
    struct iovec local = {s->data, s->cap - want};
    ssize_t got = process_vm_readv(tid, &local, 1, remote, (unsigned long)n, 0);
    if (got < 0)
        return -errno;
    if (got == 0)
        return -EFAULT;
    s->base = base;
    s->len = (size_t)got;
    s->hit_cap = (size_t)got == s->cap;
    s->bp_tried = false;
    s->bp_found = false;
    return 0;
}
