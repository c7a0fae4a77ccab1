/* threadctx.c: OpenTelemetry's thread context of a target's threads (see threadctx.h). */
#include "threadctx.h"

#include <errno.h>
#include <stdarg.h>
#include <proc_service.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <thread_db.h>

#include <bpf/bpf.h>

#include "bpf/pybpf.h"
#include "log.h"
#include "maps.h"
#include "modules.h"
#include "pykernel.h"
#include "stacks.h"
#include "target.h"
#include "util.h"

struct tctx_sample tctx_cur;

/* libthread_db's process handle: what its callbacks (ps_*) need of the target.
 *
 * libthread_db was written for debuggers, which trust their inferior: its loops follow the
 * target's lists, and it allocas a copy of a thread's descriptor of the size the target's
 * libc states (_thread_db_sizeof_pthread). So every read counts against a budget (a list
 * that loops, or a length that never ends one, fails the call when it runs out), and a
 * size read from a _thread_db_sizeof_* symbol beyond any real descriptor's fails it too. */
#define MAX_SIZEOFS 8
#define SIZEOF_MAX 65536 /* (glibc 2.36's struct pthread: 2304 bytes) */
struct ps_prochandle {
    pid_t pid;
    struct target *t;
    uint64_t reads_left;
    uint64_t sizeof_addr[MAX_SIZEOFS];
    int nsizeof;
};

struct tctx_agent {
    struct ps_prochandle ph;
    td_thragent_t *ta;
};

/* Most threads one walk looks at: a list that loops (being changed as it is read) ends. */
#define WALK_MAX 65536
/* Walks at most this often while sampled threads lack their slot. */
#define WALK_EVERY_NS (100 * NS_PER_MS)

static int read_mem(pid_t pid, uint64_t addr, void *buf, size_t n)
{
    struct iovec local = {buf, n}, remote = {(void *)(uintptr_t)addr, n};
    ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    return r == (ssize_t)n ? 0 : -EFAULT;
}

/* ---- libthread_db's callbacks (proc_service.h) ---- */

ps_err_e ps_pdread(struct ps_prochandle *ph, psaddr_t addr, void *buf, size_t n)
{
    if (!ph->reads_left || n > SIZEOF_MAX)
        return PS_ERR;
    ph->reads_left--;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (read_mem(ph->pid, a, buf, n) < 0)
        return PS_ERR;
    for (int i = 0; i < ph->nsizeof; i++) {
        uint32_t v;
        if (a == ph->sizeof_addr[i] && n == sizeof(v)) {
            memcpy(&v, buf, sizeof(v));
            if (v > SIZEOF_MAX)
                return PS_ERR;
        }
    }
    return PS_OK;
}

ps_err_e ps_pdwrite(struct ps_prochandle *ph, psaddr_t addr, const void *buf, size_t n)
{
    (void)ph, (void)addr, (void)buf, (void)n;
    return PS_ERR; /* profd never writes a target's memory */
}

ps_err_e ps_lgetregs(struct ps_prochandle *ph, lwpid_t lwp, prgregset_t regs)
{
    (void)ph, (void)lwp, (void)regs;
    return PS_ERR; /* threads are found by the walk, never by their registers */
}

ps_err_e ps_lsetregs(struct ps_prochandle *ph, lwpid_t lwp, const prgregset_t regs)
{
    (void)ph, (void)lwp, (void)regs;
    return PS_ERR;
}

ps_err_e ps_lgetfpregs(struct ps_prochandle *ph, lwpid_t lwp, prfpregset_t *regs)
{
    (void)ph, (void)lwp, (void)regs;
    return PS_ERR;
}

ps_err_e ps_lsetfpregs(struct ps_prochandle *ph, lwpid_t lwp, const prfpregset_t *regs)
{
    (void)ph, (void)lwp, (void)regs;
    return PS_ERR;
}

pid_t ps_getpid(struct ps_prochandle *ph)
{
    return ph->pid;
}

/* Where module m's file virtual address vaddr is, from any mapping of it in maps. */
static bool module_addr(const struct maps *maps, const struct module *m, uint64_t vaddr,
                        uint64_t *addr)
{
    for (size_t i = 0; i < maps->n; i++) {
        const struct map_entry *e = &maps->v[i];
        if (e->mod == m && (*addr = map_vaddr_addr(e, vaddr)))
            return true;
    }
    return false;
}

/* A symbol of libc or ld.so (libthread_db asks for "libpthread.so.0", "libc.so.6" and
 * "ld-linux-x86-64.so.2"; since glibc 2.34 libpthread is libc): looked for in every module
 * the target maps, as gdb does; each such symbol is defined in one of them only. */
ps_err_e ps_pglobal_lookup(struct ps_prochandle *ph, const char *object, const char *name,
                           psaddr_t *addr)
{
    (void)object;
    const struct maps *maps = &ph->t->maps;
    const struct module *seen = NULL;
    for (size_t i = 0; i < maps->n; i++) {
        const struct module *m = maps->v[i].mod;
        uint64_t value, a;
        if (!m || m == seen || !m->nsyms)
            continue;
        seen = m;
        if (module_symbol(m, name, &value) && module_addr(maps, m, value, &a)) {
            *addr = (psaddr_t)(uintptr_t)a;
            if (!strncmp(name, "_thread_db_sizeof_", 18) && ph->nsizeof < MAX_SIZEOFS)
                ph->sizeof_addr[ph->nsizeof++] = a;
            return PS_OK;
        }
    }
    return PS_NOSYM;
}

/* ---- finding the symbol and each thread's slot ---- */

static const char *td_error(td_err_e e)
{
    switch (e) {
    case TD_VERSION:
        return "its glibc is not the version of profd's libthread_db";
    case TD_NOLIBTHREAD:
        return "libthread_db found no thread library in it (a static or non-glibc program?)";
    case TD_NOCAPAB:
    case TD_NOTLS:
        return "libthread_db cannot read its TLS";
    default:
        return "libthread_db cannot read its threads";
    }
}

static void refuse(struct target *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(struct target *t, const char *fmt, ...)
{
    struct tctx_target *c = &t->tctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    c->status = TCTX_UNSUPPORTED;
    log_warn("pid %d: OpenTelemetry's thread context in %s is not read: %s", t->pid,
             c->module, c->why);
}

/* Most modules defining the symbol looked at. */
#define MAX_DEFINERS 8

/* Of the mappings in defs (modules that define the symbol, each with its load bias), the
 * one whose definition the process uses: the first in the dynamic linker's list of objects
 * (_r_debug.r_map: the executable, then the libraries in load order), the order in which
 * symbols are looked up, so the one that interposes on the others (a library's references
 * to its own are resolved to it, as libprofd's are to an executable's). Its link_map into
 * *lm. -1 if none is in the list. */
static int first_definer(struct target *t, const uint64_t *bias, int n, uint64_t *lm)
{
    psaddr_t rd;
    if (ps_pglobal_lookup(&t->tctx.agent->ph, "ld-linux-x86-64.so.2", "_r_debug", &rd) != PS_OK)
        return -1;
    uint64_t map; /* struct r_debug { int r_version; struct link_map *r_map; ... } */
    if (read_mem(t->pid, (uint64_t)(uintptr_t)rd + 8, &map, 8) < 0)
        return -1;
    for (int k = 0; map && k < 4096; k++) {
        uint64_t l[4]; /* l_addr, l_name, l_ld, l_next */
        if (read_mem(t->pid, map, l, sizeof(l)) < 0)
            return -1;
        for (int i = 0; i < n; i++)
            if (l[0] == bias[i]) {
                *lm = map;
                return i;
            }
        map = l[3];
    }
    return -1;
}

void tctx_target_detect(struct target *t)
{
    struct tctx_target *c = &t->tctx;
    if (c->status != TCTX_NONE || (c->retry_ns && now_ns() < c->retry_ns))
        return;
    const struct maps *maps = &t->maps;
    const struct map_entry *defs[MAX_DEFINERS];
    uint64_t bias[MAX_DEFINERS], off;
    int n = 0;
    for (size_t i = 0; i < maps->n && n < MAX_DEFINERS; i++) {
        const struct map_entry *e = &maps->v[i];
        bool seen = false;
        for (int k = 0; k < n && !seen; k++)
            seen = defs[k]->mod == e->mod;
        if (!seen && e->mod && e->mod->nsyms && (e->prot & MAP_PROT_X) &&
            module_symbol(e->mod, "otel_thread_ctx_v1", &off)) {
            defs[n] = e;
            bias[n++] = map_vaddr_addr(e, 0);
        }
    }
    if (!n)
        return;
    snprintf(c->module, sizeof(c->module), "%s", defs[0]->mod->name);
    c->agent = xcalloc(1, sizeof(*c->agent));
    c->agent->ph = (struct ps_prochandle){.pid = t->pid, .t = t, .reads_left = 100000};
    static bool td_ready;
    if (!td_ready && td_init() == TD_OK)
        td_ready = true;
    td_err_e e = td_ready ? td_ta_new(&c->agent->ph, &c->agent->ta) : TD_ERR;
    int k = e == TD_OK ? first_definer(t, bias, n, &c->link_map) : -1;
    if (e != TD_OK || k < 0) {
        /* Libc not mapped yet (the first maps after an exec), or the object not in the
         * dynamic linker's list yet (a dlopen under way): looked for again at a later maps
         * read, at most every second; another glibc's version is final. */
        bool final = e == TD_VERSION || e == TD_NOCAPAB || e == TD_NOTLS;
        if (e == TD_OK)
            td_ta_delete(c->agent->ta);
        c->agent->ta = NULL;
        if (final) {
            refuse(t, "%s", td_error(e));
            return;
        }
        free(c->agent);
        c->agent = NULL;
        c->retry_ns = now_ns() + NS_PER_SEC;
        snprintf(c->why, sizeof(c->why), "%s", e != TD_OK ? td_error(e)
                 : "the dynamic linker's list of objects does not hold it yet");
        return;
    }
    const struct module *m = defs[k]->mod;
    module_symbol(m, "otel_thread_ctx_v1", &c->sym_off);
    c->module_id = m->id;
    snprintf(c->module, sizeof(c->module), "%s", m->name);
    c->status = TCTX_OK;
    c->walk_wanted = true;
    log_info("pid %d: OpenTelemetry's thread context (otel_thread_ctx_v1 in %s) is read at "
             "its samples", t->pid, m->name);
}

/* ---- the process context (OTEP 4719): the attributes' key names ---- */

/* A protobuf message read field by field, bounded by its bytes. */
struct pbuf {
    const uint8_t *p, *end;
};

static bool pb_varint(struct pbuf *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, and for a length-delimited one its bytes in *sub. Fields of
 * other wire types are skipped. false at the end or on a malformed one. */
static bool pb_next(struct pbuf *b, uint64_t *field, struct pbuf *sub)
{
    for (;;) {
        uint64_t key, v;
        if (b->p >= b->end || !pb_varint(b, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!pb_varint(b, &v))
                return false;
            break;
        case 1:
            if (b->end - b->p < 8)
                return false;
            b->p += 8;
            break;
        case 5:
            if (b->end - b->p < 4)
                return false;
            b->p += 4;
            break;
        case 2:
            if (!pb_varint(b, &v) || v > (uint64_t)(b->end - b->p))
                return false;
            *field = key >> 3;
            *sub = (struct pbuf){b->p, b->p + v};
            b->p += v;
            return true;
        default:
            return false;
        }
    }
}

int tctx_parse_keymap(const uint8_t *buf, size_t len, char **names, unsigned max)
{
    static const char want[] = "threadlocal.attribute_key_map";
    struct pbuf res = {buf, buf + len}, kv, f;
    uint64_t field;
    while (pb_next(&res, &field, &kv)) {
        if (field != 1)
            continue; /* Resource.attributes: KeyValue */
        struct pbuf key = {0}, value = {0};
        bool has_key = false, has_value = false;
        while (pb_next(&kv, &field, &f)) {
            if (field == 1)
                key = f, has_key = true;
            else if (field == 2)
                value = f, has_value = true;
        }
        if (!has_key || !has_value || (size_t)(key.end - key.p) != sizeof(want) - 1 ||
            memcmp(key.p, want, sizeof(want) - 1))
            continue;
        struct pbuf arr = {0};
        bool has_arr = false;
        while (pb_next(&value, &field, &f))
            if (field == 5) /* AnyValue.array_value */
                arr = f, has_arr = true;
        if (!has_arr)
            return -1;
        unsigned n = 0;
        struct pbuf any;
        while (n < max && pb_next(&arr, &field, &any)) {
            if (field != 1)
                continue; /* ArrayValue.values: AnyValue */
            char *name = NULL;
            while (pb_next(&any, &field, &f))
                if (field == 1 && f.end - f.p <= TCTX_MAX_KEY_NAME && !memchr(f.p, 0, (size_t)(f.end - f.p))) {
                    free(name);
                    name = xmalloc((size_t)(f.end - f.p) + 1);
                    memcpy(name, f.p, (size_t)(f.end - f.p));
                    name[f.end - f.p] = '\0';
                }
            names[n++] = name;
        }
        return (int)n;
    }
    return -1;
}

/* The process context's header (OTEP 4719). */
struct pctx_header {
    char signature[8];     /* "OTEL_CTX", written last */
    uint32_t version;      /* 2 (1: development) */
    uint32_t payload_size;
    uint64_t published_ns; /* 0 while being updated */
    uint64_t payload;
};
#define PCTX_MAX_PAYLOAD (64 * 1024)

/* Read the key map again if the process context was published anew since. */
static void read_keymap(struct target *t)
{
    struct tctx_target *c = &t->tctx;
    const struct map_entry *m = NULL;
    for (size_t i = 0; i < t->maps.n && !m; i++) {
        const char *path = t->maps.v[i].path;
        if (path && (!strncmp(path, "/memfd:OTEL_CTX", 15) ||
                     !strncmp(path, "[anon_shmem:OTEL_CTX]", 21) ||
                     !strncmp(path, "[anon:OTEL_CTX]", 15)))
            m = &t->maps.v[i];
    }
    struct pctx_header h, again;
    if (!m || m->end - m->start < sizeof(h) || read_mem(t->pid, m->start, &h, sizeof(h)) < 0 ||
        memcmp(h.signature, "OTEL_CTX", 8) || (h.version != 1 && h.version != 2) ||
        !h.published_ns || h.published_ns == c->keys_published_ns ||
        !h.payload_size || h.payload_size > PCTX_MAX_PAYLOAD)
        return;
    uint8_t *buf = xmalloc(h.payload_size);
    char *names[TCTX_MAX_KEYS];
    int n = read_mem(t->pid, h.payload, buf, h.payload_size) == 0 &&
                    read_mem(t->pid, m->start, &again, sizeof(again)) == 0 &&
                    again.published_ns == h.published_ns
                ? tctx_parse_keymap(buf, h.payload_size, names, TCTX_MAX_KEYS)
                : -1;
    free(buf);
    if (n < 0)
        return; /* (being updated, or no key map: looked at again in a second) */
    for (unsigned i = 0; i < c->nkeys; i++)
        free(c->keys[i]);
    memcpy(c->keys, names, (size_t)n * sizeof(*names));
    c->nkeys = (unsigned)n;
    c->keys_published_ns = h.published_ns;
}

void tctx_target_finish(struct tctx_target *c)
{
    for (unsigned i = 0; i < c->nkeys; i++)
        free(c->keys[i]);
    if (c->kernel) {
        int fd = pyk_ctxprocs_fd();
        __u32 key = c->agent ? (__u32)c->agent->ph.pid : 0;
        if (fd >= 0 && key)
            bpf_map_delete_elem(fd, &key);
        pyk_ctx_targets(-1);
    }
    if (c->agent && c->agent->ta)
        td_ta_delete(c->agent->ta);
    free(c->agent);
    memset(c, 0, sizeof(*c));
}

struct walk {
    struct target *t;
    unsigned seen;
};

/* Where the dtv says the module's block is, for the eBPF program (which has the thread
 * pointer, not libthread_db): x86-64's TCB holds the dtv at 8; each dtv entry is 16 bytes,
 * the block's address first (all ones: not allocated yet). */
static void learn_modid(struct target *t, uint64_t tp, uint64_t slot)
{
    struct tctx_target *c = &t->tctx;
    uint64_t dtv, len;
    /* (The TCB's dtv points at its generation entry; the entry before holds its length,
     * the modules' entries follow, one per module id.) */
    if (c->modid || read_mem(t->pid, tp + 8, &dtv, 8) < 0 || !dtv ||
        read_mem(t->pid, dtv - 16, &len, 8) < 0)
        return;
    uint64_t v[2 * 64];
    unsigned n = len + 1 < 64 ? (unsigned)len + 1 : 64;
    if (n < 2 || read_mem(t->pid, dtv, v, n * 16) < 0)
        return;
    for (unsigned k = 1; k < n; k++)
        if (v[2 * k] != UINT64_MAX && v[2 * k] + c->sym_off == slot) {
            c->modid = k;
            return;
        }
}

static int walk_one(const td_thrhandle_t *th, void *arg)
{
    struct walk *w = arg;
    struct tctx_target *c = &w->t->tctx;
    if (++w->seen > WALK_MAX)
        return 1;
    td_thrinfo_t info;
    if (td_thr_get_info(th, &info) != TD_OK)
        return 0;
    struct thread *x = target_thread(w->t, info.ti_lid);
    if (!x || x->tctx_slot)
        return 0;
    psaddr_t slot;
    if (td_thr_tls_get_addr(th, (psaddr_t)(uintptr_t)c->link_map, c->sym_off, &slot) != TD_OK ||
        !slot)
        return 0; /* TD_TLSDEFER: a dlopened module's block not allocated yet */
    x->tctx_slot = (uint64_t)(uintptr_t)slot;
    c->stats.slots++;
    learn_modid(w->t, (uint64_t)(uintptr_t)th->th_unique, x->tctx_slot);
    return 0;
}

/* Give the process to the eBPF program, once its module's dtv slot is known. */
static void kernel_update(struct target *t)
{
    struct tctx_target *c = &t->tctx;
    if (c->status != TCTX_OK || c->kernel || c->kernel_tried)
        return;
    if (!c->modid) {
        if (c->stats.slots)
            snprintf(c->kernel_why, sizeof(c->kernel_why), "the threads' dtv does not hold "
                     "the module's TLS block where libthread_db found it");
        return; /* (until a thread's slot is found) */
    }
    const char *why = NULL;
    int r = pyk_load_ctx(&why);
    if (r == -EINPROGRESS) {
        snprintf(c->kernel_why, sizeof(c->kernel_why), "%s", why);
        return;
    }
    c->kernel_tried = true;
    if (r < 0) {
        snprintf(c->kernel_why, sizeof(c->kernel_why), "%s", why ? why : "no eBPF program");
        log_info("pid %d: the thread context is read after each kernel copy: %s", t->pid,
                 c->kernel_why);
        return;
    }
    struct ctxbpf_proc p = {.sym_off = c->sym_off, .modid = (__u32)c->modid};
    __u32 key = (__u32)t->pid;
    if (bpf_map_update_elem(pyk_ctxprocs_fd(), &key, &p, BPF_ANY) < 0) {
        snprintf(c->kernel_why, sizeof(c->kernel_why), "the eBPF program's map refused it (%s)",
                 strerror(errno));
        return;
    }
    c->kernel = true;
    c->reopen = true;
    c->kernel_why[0] = '\0';
    pyk_ctx_targets(1);
    log_debug("pid %d: the thread context is read by the eBPF program at each sample", t->pid);
}

void tctx_kernel_refused(struct target *t, int r)
{
    struct tctx_target *c = &t->tctx;
    snprintf(c->kernel_why, sizeof(c->kernel_why), "the kernel refused the eBPF program on a "
             "perf event (%s)", strerror(-r));
    log_info("pid %d: %s: the thread context is read after each kernel copy", t->pid,
             c->kernel_why);
    if (c->kernel)
        pyk_ctx_targets(-1);
    c->kernel = false;
    int fd = pyk_ctxprocs_fd();
    __u32 key = (__u32)t->pid;
    if (fd >= 0)
        bpf_map_delete_elem(fd, &key);
}

void tctx_target_update(struct target *t)
{
    struct tctx_target *c = &t->tctx;
    kernel_update(t);
    uint64_t now = now_ns();
    if (c->status == TCTX_OK && now - c->keys_looked_ns >= NS_PER_SEC) {
        c->keys_looked_ns = now;
        read_keymap(t);
    }
    if (c->status != TCTX_OK || !c->walk_wanted || now - c->walked_ns < WALK_EVERY_NS)
        return;
    c->walk_wanted = false;
    c->walked_ns = now;
    c->stats.walks++;
    struct walk w = {t, 0};
    c->agent->ph.reads_left = 1000 + 64 * (uint64_t)t->nthreads;
    td_ta_thr_iter(c->agent->ta, walk_one, &w, TD_THR_ANY_STATE, TD_THR_LOWEST_PRIORITY,
                   TD_SIGNO_MASK, TD_THR_ANY_USER_FLAGS);
    /* Threads still without their slot (a dlopened module's block is made at a thread's
     * first access, which some never make) ask for a walk less and less often. */
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *th = t->threads[i];
        if (th->tctx_slot)
            continue;
        th->tctx_backoff = th->tctx_backoff ? th->tctx_backoff * 2 : 1;
        if (th->tctx_backoff > 100)
            th->tctx_backoff = 100;
        th->tctx_retry_ns = now + th->tctx_backoff * WALK_EVERY_NS;
    }
}

/* ---- reading a context ---- */

bool tctx_parse(const uint8_t *rec, size_t len, struct tctx_sample *out)
{
    out->have = false;
    if (len < TCTX_HEAD || rec[24] != 1)
        return false;
    static const uint8_t zero[24];
    if (!memcmp(rec, zero, 24))
        return false; /* valid, yet neither trace nor span */
    memcpy(out->rec, rec, 24);
    out->rec[24] = rec[25]; /* trace_flags */
    uint16_t size;
    memcpy(&size, rec + 26, 2);
    size_t avail = len - TCTX_HEAD;
    if (size > avail)
        size = (uint16_t)avail;
    /* Whole entries only: parsing stops where the rest cannot hold one. */
    size_t at = 0;
    while (at + 2 <= size && at + 2 + rec[TCTX_HEAD + at + 1] <= size)
        at += 2 + rec[TCTX_HEAD + at + 1];
    memcpy(out->rec + TCTX_KEPT, rec + TCTX_HEAD, at);
    out->len = (uint16_t)(TCTX_KEPT + at);
    out->have = true;
    return true;
}

void tctx_capture(struct target *t, struct thread *th, bool late)
{
    struct tctx_target *c = &t->tctx;
    tctx_cur.have = false;
    if (c->status != TCTX_OK)
        return;
    if (!th->tctx_slot) {
        c->stats.no_slot++;
        if (!th->tctx_retry_ns || now_ns() >= th->tctx_retry_ns)
            c->walk_wanted = true;
        return;
    }
    uint64_t ptr;
    uint8_t rec[TCTX_HEAD + TCTX_MAX_ATTRS];
    if (read_mem(t->pid, th->tctx_slot, &ptr, 8) < 0) {
        c->stats.unreadable++;
        return;
    }
    if (!ptr) {
        c->stats.without++;
        return;
    }
    if (read_mem(t->pid, ptr, rec, TCTX_HEAD) < 0) {
        c->stats.unreadable++;
        return;
    }
    uint16_t size;
    memcpy(&size, rec + 26, 2);
    if (size > TCTX_MAX_ATTRS)
        size = TCTX_MAX_ATTRS;
    if (rec[24] == 1 && size && read_mem(t->pid, ptr + TCTX_HEAD, rec + TCTX_HEAD, size) < 0)
        size = 0; /* the head alone: the attributes are lost, not the span */
    if (!tctx_parse(rec, TCTX_HEAD + (size_t)size, &tctx_cur)) {
        c->stats.without++;
        return;
    }
    tctx_cur.late = late;
    tctx_cur.tid = th->tid;
    c->stats.with++;
    c->stats.late += late;
}

/* ---- the eBPF program's records ---- */

/* Most bytes of records one thread's queue for one event holds. */
#define QUEUE_MAX (256u * 1024u)

static size_t rec_size(const struct ctxbpf_rec *r)
{
    return CTXBPF_REC_HEAD + ((r->len + 7u) & ~7u);
}

static size_t size_at(const uint8_t *at)
{
    return rec_size((const void *)at);
}

void tctx_queue_push(struct pyk_queue *q, const struct ctxbpf_rec *r, struct tctx_target *c)
{
    if (r->len > CTXBPF_MAX)
        return;
    bool stale = r->kind == PYBPF_PREEMPT;
    unsigned dropped = pyk_queue_room(q, rec_size(r), QUEUE_MAX, stale, size_at);
    if (dropped == PYK_NO_ROOM)
        return;
    if (stale)
        c->ks.unpaired += dropped; /* (other switches', never to be read) */
    else
        c->ks.dropped += dropped;
    memcpy(q->buf + q->tail, r, CTXBPF_REC_HEAD + r->len);
    q->tail += (uint32_t)rec_size(r);
}

bool tctx_queue_take(struct pyk_queue *q, uint64_t time_ns, struct tctx_sample *out,
                     struct tctx_target *c)
{
    out->have = false;
    while (q->head < q->tail) {
        const struct ctxbpf_rec *r = (const void *)(q->buf + q->head);
        uint32_t size = (uint32_t)rec_size(r);
        if (r->time_ns < time_ns) {
            q->head += size; /* a sample not read (skipped, lost) */
            c->ks.unpaired++;
            continue;
        }
        if (r->time_ns - time_ns > PYK_PAIR_NS)
            break; /* a later sample's: this one's is missing */
        c->ks.paired++;
        if (r->flags & CTXBPF_FAULT) {
            c->stats.unreadable++;
        } else if ((r->flags & CTXBPF_NONE) || !tctx_parse(r->rec, r->len, out)) {
            c->stats.without++;
        } else {
            out->late = false;
            c->stats.with++;
        }
        q->head += size;
        if (q->head == q->tail)
            q->head = q->tail = 0;
        return true;
    }
    if (q->head == q->tail)
        q->head = q->tail = 0;
    c->ks.missing++;
    return false;
}

void tctx_on_record(const void *data, size_t size)
{
    const struct ctxbpf_rec *r = data;
    if (size < CTXBPF_REC_HEAD || r->len > CTXBPF_MAX || size < CTXBPF_REC_HEAD + r->len ||
        r->kind >= PYBPF_KINDS)
        return;
    struct target *t = target_find((pid_t)r->pid);
    if (!t || !t->tctx.kernel)
        return;
    struct thread *th = target_thread(t, (pid_t)r->tid);
    if (!th)
        return;
    t->tctx.ks.records++;
    tctx_queue_push(&th->smp.ctxq[r->kind], r, &t->tctx);
}

bool tctx_take(struct target *t, struct thread *th, int ev, uint64_t time_ns)
{
    tctx_cur.have = false;
    if (!t->tctx.kernel || ev < 0 || ev >= PYK_EVENTS)
        return false;
    pyk_consume();
    tctx_cur.tid = th->tid;
    return tctx_queue_take(&th->smp.ctxq[ev], time_ns, &tctx_cur, &t->tctx);
}

/* ---- interning ---- */

uint32_t tctx_tag(struct target *t, pid_t tid, uint32_t stack)
{
    bool have = tctx_cur.have && tctx_cur.tid == tid; /* (never another sample's) */
    tctx_cur.have = false;
    if (!have || stack == STACK_NONE)
        return stack;
    /* The bytes in words, their count first (the table holds words). */
    uint64_t words[1 + (TCTX_MAX + 7) / 8] = {tctx_cur.len};
    memcpy(words + 1, tctx_cur.rec, tctx_cur.len);
    uint16_t n = (uint16_t)(1 + (tctx_cur.len + 7) / 8);
    uint32_t ctx = stacks_intern(&t->stacks, 0, STACK_CONTEXT, words, n);
    if (ctx == STACK_NONE)
        return stack;
    uint64_t pair[2] = {stack, ctx};
    uint32_t id = stacks_intern(&t->stacks, 0,
                                STACK_PAIR | (tctx_cur.late ? STACK_CTX_LATE : 0), pair, 2);
    if (id == STACK_NONE) {
        stacks_unref(&t->stacks, ctx);
        return stack;
    }
    /* A new pair holds the references it was given; one found holds its own. */
    if (stacks_get(&t->stacks, id)->refs > 1) {
        stacks_unref(&t->stacks, stack);
        stacks_unref(&t->stacks, ctx);
    }
    return id;
}

uint32_t tctx_resolve(const struct target *t, uint32_t id, uint32_t *ctx, bool *late)
{
    *ctx = STACK_NONE;
    *late = false;
    const struct stack_entry *e = stacks_get(&t->stacks, id);
    if (!e || !(e->flags & STACK_PAIR) || e->n != 2)
        return id;
    *ctx = (uint32_t)e->ips[1];
    *late = e->flags & STACK_CTX_LATE;
    return (uint32_t)e->ips[0];
}

const uint8_t *tctx_bytes(const struct target *t, uint32_t id, uint16_t *len)
{
    const struct stack_entry *e = stacks_get(&t->stacks, id);
    if (!e || !(e->flags & STACK_CONTEXT) || e->n < 1 || e->ips[0] > (e->n - 1u) * 8)
        return NULL;
    *len = (uint16_t)e->ips[0];
    return (const uint8_t *)(e->ips + 1);
}
