/* pyframes.c: CPython 3.11-3.14 frames from a process's memory (see pyframes.h). */
#include "pyframes.h"
#include "bpf/pybpf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Measured with offsetof against each version's internal headers (Py_BUILD_CORE). */
static const struct py_layout layouts[] = {
    {
        .version = 0x030b0000,
        .rt_interp_head = 40, .interp_next = 0, .interp_threads = 16,
        .ts_next = 8, .ts_native_tid = 160, .ts_frame = 56, .cframe_current = 8,
        .fr_code = 32, .fr_previous = 48, .fr_instr = 56, .fr_owner = 69, .fr_owner_max = 3,
        .fr_is_entry = 68,
        .fr_func = 0, .fr_size = 72, .fn_code = 48, .fn_module = 104,
        .co_firstlineno = 72, .co_filename = 112, .co_name = 120, .co_qualname = 128,
        .co_linetable = 136, .co_code_adaptive = 184, .co_size = 144,
        .str_ascii = 48, .str_compact = 72,
    },
    {
        .version = 0x030c0000,
        .rt_interp_head = 40, .interp_next = 0, .interp_threads = 72,
        .ts_next = 8, .ts_native_tid = 144, .ts_frame = 56, .cframe_current = 0,
        .fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70, .fr_owner_max = 3,
        .fr_is_entry = -1,
        .fr_func = 16, .fr_size = 72, .fn_code = 48, .fn_module = 104,
        .co_firstlineno = 68, .co_filename = 112, .co_name = 120, .co_qualname = 128,
        .co_linetable = 136, .co_code_adaptive = 192, .co_size = 144,
        .str_ascii = 40, .str_compact = 56,
    },
    {
        .version = 0x030d0000,
        .rt_interp_head = 632, .interp_next = 7264, .interp_threads = 7344,
        .ts_next = 8, .ts_native_tid = 160, .ts_frame = 72, .cframe_current = -1,
        .fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 70, .fr_owner_max = 3,
        .fr_is_entry = -1,
        .fr_func = 16, .fr_size = 72, .fn_code = 48, .fn_module = 104,
        .co_firstlineno = 68, .co_filename = 112, .co_name = 120, .co_qualname = 128,
        .co_linetable = 136, .co_code_adaptive = 200, .co_size = 144,
        .str_ascii = 40, .str_compact = 56,
    },
    {
        /* (Debian's 3.14.10, libpython3.14-dev's headers.) f_executable and f_funcobj are
         * _PyStackRefs: bit 0 tags a deferred reference. */
        .version = 0x030e0000,
        .rt_interp_head = 808, .interp_next = 7272, .interp_threads = 7344,
        .ts_next = 8, .ts_native_tid = 160, .ts_frame = 72, .cframe_current = -1,
        .fr_code = 0, .fr_previous = 8, .fr_instr = 56, .fr_owner = 74, .fr_owner_max = 4,
        .ptr_tag = 1, .fr_is_entry = -1,
        .fr_func = 16, .fr_size = 80, .fn_code = 48, .fn_module = 104,
        .co_firstlineno = 68, .co_filename = 112, .co_name = 120, .co_qualname = 128,
        .co_linetable = 136, .co_code_adaptive = 208, .co_size = 144,
        .str_ascii = 40, .str_compact = 56,
    },
};

/* Bounds on what a hostile or torn structure can make us walk. */
#define MAX_INTERPRETERS 64
#define MAX_THREAD_STATES 16384
#define MAX_LINETABLE (1u << 20)
#define MAX_CODE_UNITS (1u << 24)

const struct py_layout *py_layout_of(unsigned long version_hex)
{
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if ((version_hex & 0xffff0000ul) == layouts[i].version)
            return &layouts[i];
    return NULL;
}

/* Read len bytes at addr of pid: 0, or -EFAULT (not all of it could be read), -ESRCH. */
static int peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    if (!addr)
        return -EFAULT;
    struct iovec l = {buf, len}, r = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n == (ssize_t)len)
        return 0;
    return n < 0 && errno == ESRCH ? -ESRCH : -EFAULT;
}

static uint64_t u64_at(const uint8_t *b, unsigned off)
{
    uint64_t v;
    memcpy(&v, b + off, sizeof(v));
    return v;
}

static uint32_t u32_at(const uint8_t *b, unsigned off)
{
    uint32_t v;
    memcpy(&v, b + off, sizeof(v));
    return v;
}

/* What a code object is (the addresses of its names and location table, its first line):
 * another object reusing its address after it was freed differs here. */
static uint64_t ident_of(const struct py_layout *L, const uint8_t *cb)
{
    /* (The eBPF program's hash: a code object it read and one read here agree.) */
    return pybpf_ident(u64_at(cb, L->co_filename), u64_at(cb, L->co_name),
                       u64_at(cb, L->co_qualname), u64_at(cb, L->co_linetable),
                       u32_at(cb, L->co_firstlineno));
}

/* 3.13 starts _PyRuntime with _Py_DebugOffsets (a cookie, the version, then the offsets an
 * out-of-process reader needs, for this very build): take the fields from there, so that a
 * 3.13.x or 3.14.x whose structures moved is still read right. Where they are in
 * _Py_DebugOffsets (each version's own layout of it, offsetof against its headers; 3.14's
 * has more fields before the thread state's): */
enum do_field {
    DO_RT_INTERP_HEAD, DO_INTERP_NEXT, DO_INTERP_THREADS, DO_TS_NEXT, DO_TS_FRAME,
    DO_TS_NATIVE_TID, DO_FR_PREVIOUS, DO_FR_CODE, DO_FR_INSTR, DO_FR_OWNER, DO_CO_FILENAME,
    DO_CO_NAME, DO_CO_QUALNAME, DO_CO_LINETABLE, DO_CO_FIRSTLINENO, DO_CO_CODE_ADAPTIVE,
    DO_STR_ASCII, DO_FIELDS
};
#define DO_VERSION 8
#define DO_FREE_THREADED 16
static const struct {
    unsigned version;
    unsigned off[DO_FIELDS];
} debug_layouts[] = {
    {0x030d0000, {40, 64, 72, 168, 184, 200, 232, 240, 248, 264, 280, 288, 296, 304, 312, 344,
                  560}},
    {0x030e0000, {40, 64, 72, 192, 208, 224, 256, 264, 272, 288, 320, 328, 336, 344, 352, 384,
                  640}},
};
#define DO_SIZE 648 /* read: past the last field of either */

static int debug_offsets(struct py_runtime *rt)
{
    uint8_t d[DO_SIZE];
    int r = peek(rt->pid, rt->runtime, d, sizeof(d));
    if (r < 0)
        return r;
    const unsigned *o = NULL;
    for (size_t i = 0; i < sizeof(debug_layouts) / sizeof(debug_layouts[0]); i++)
        if (debug_layouts[i].version == rt->lay->version)
            o = debug_layouts[i].off;
    if (!o || memcmp(d, "xdebugpy", 8) ||
        (u64_at(d, DO_VERSION) & 0xffff0000ul) != rt->lay->version)
        return -ENOTSUP;
    /* The free-threaded build (3.13t, 3.14t): every object's head is another size, so no
     * offset of the table below holds for it (and its debug offsets do not give them all). */
    if (u64_at(d, DO_FREE_THREADED)) {
        rt->free_threaded = true;
        return -ENOTSUP;
    }
    /* The target's memory: every offset bounded by what the reads here can hold. */
    struct py_layout L = *rt->lay;
    uint64_t v[] = {u64_at(d, o[DO_RT_INTERP_HEAD]), u64_at(d, o[DO_INTERP_NEXT]),
                    u64_at(d, o[DO_INTERP_THREADS]), u64_at(d, o[DO_TS_NEXT]),
                    u64_at(d, o[DO_TS_FRAME]), u64_at(d, o[DO_TS_NATIVE_TID])};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (v[i] > (i < 3 ? 65536u : 240u))
            return -ENOTSUP;
    L.rt_interp_head = (unsigned)v[0];
    L.interp_next = (unsigned)v[1];
    L.interp_threads = (unsigned)v[2];
    L.ts_next = (unsigned)v[3];
    L.ts_frame = (unsigned)v[4];
    L.ts_native_tid = (unsigned)v[5];
    uint64_t fr[] = {u64_at(d, o[DO_FR_PREVIOUS]), u64_at(d, o[DO_FR_CODE]),
                     u64_at(d, o[DO_FR_INSTR]), u64_at(d, o[DO_FR_OWNER])};
    uint64_t co[] = {u64_at(d, o[DO_CO_FILENAME]), u64_at(d, o[DO_CO_NAME]),
                     u64_at(d, o[DO_CO_QUALNAME]), u64_at(d, o[DO_CO_LINETABLE]),
                     u64_at(d, o[DO_CO_FIRSTLINENO])};
    for (size_t i = 0; i < 4; i++)
        if (fr[i] > 120)
            return -ENOTSUP;
    for (size_t i = 0; i < 5; i++)
        if (co[i] > 152)
            return -ENOTSUP;
    L.fr_previous = (unsigned)fr[0];
    L.fr_code = (unsigned)fr[1];
    L.fr_instr = (unsigned)fr[2];
    L.fr_owner = (unsigned)fr[3];
    L.co_filename = (unsigned)co[0];
    L.co_name = (unsigned)co[1];
    L.co_qualname = (unsigned)co[2];
    L.co_linetable = (unsigned)co[3];
    L.co_firstlineno = (unsigned)co[4];
    uint64_t adaptive = u64_at(d, o[DO_CO_CODE_ADAPTIVE]), ascii = u64_at(d, o[DO_STR_ASCII]);
    if (adaptive > 4096 || ascii < 40 || ascii > 64)
        return -ENOTSUP;
    L.co_code_adaptive = (unsigned)adaptive;
    L.str_ascii = (unsigned)ascii;
    /* Bytes read of a frame and of a code object's head: up to the last field. */
    unsigned fs = L.fr_func + 8;
    for (size_t i = 0; i < 4; i++)
        fs = fr[i] + 8 > fs ? (unsigned)fr[i] + 8 : fs;
    unsigned cs = 24;
    for (size_t i = 0; i < 5; i++)
        cs = co[i] + 8 > cs ? (unsigned)co[i] + 8 : cs;
    L.fr_size = fs;
    L.co_size = cs;
    rt->own = L;
    rt->lay = &rt->own;
    return 0;
}

int py_runtime_init(struct py_runtime *rt, pid_t pid, uint64_t runtime, uint64_t version_addr,
                    uint64_t code_type, uint64_t str_type)
{
    memset(rt, 0, sizeof(*rt));
    rt->pid = pid;
    rt->runtime = runtime;
    rt->code_type = code_type;
    rt->str_type = str_type;
    unsigned long v;
    int r = peek(pid, version_addr, &v, sizeof(v));
    if (r < 0)
        return r;
    rt->version_hex = v;
    rt->lay = py_layout_of(v);
    if (!rt->lay || !code_type || !str_type)
        return -ENOTSUP;
    if (rt->lay->version >= 0x030d0000)
        return debug_offsets(rt);
    return 0;
}

int64_t py_thread_state(const struct py_runtime *rt, pid_t tid, uint64_t *hint)
{
    const struct py_layout *L = rt->lay;
    uint8_t ts[256];
    unsigned need = (L->ts_native_tid > L->ts_next ? L->ts_native_tid : L->ts_next) + 8;
    if (*hint && peek(rt->pid, *hint, ts, need) == 0 &&
        (pid_t)u64_at(ts, L->ts_native_tid) == tid)
        return (int64_t)*hint;
    uint64_t interp;
    int r = peek(rt->pid, rt->runtime + L->rt_interp_head, &interp, sizeof(interp));
    if (r < 0)
        return r;
    for (int i = 0; interp && i < MAX_INTERPRETERS; i++) {
        uint64_t t;
        if ((r = peek(rt->pid, interp + L->interp_threads, &t, sizeof(t))) < 0)
            return r;
        for (int k = 0; t && k < MAX_THREAD_STATES; k++) {
            if ((r = peek(rt->pid, t, ts, need)) < 0)
                return r;
            if ((pid_t)u64_at(ts, L->ts_native_tid) == tid) {
                *hint = t;
                return (int64_t)t;
            }
            t = u64_at(ts, L->ts_next);
        }
        if ((r = peek(rt->pid, interp + L->interp_next, &interp, sizeof(interp))) < 0)
            return r;
    }
    *hint = 0;
    return 0;
}

/* The frames of a chain sit mostly in one data-stack chunk, close together: whole pages of
 * it are read (a few, kept for one chain), each frame copied from its page, so that a chain
 * of tens of frames costs a read or two rather than one each. */
#define PAGE 4096u
#define PAGES 4

struct pages {
    uint64_t addr[PAGES]; /* 0: empty */
    uint8_t data[PAGES][PAGE];
    unsigned next;
};

/* Read the len bytes of a frame at f, through pages where it lies within one. */
static int read_frame(pid_t pid, struct pages *pg, uint64_t f, uint8_t *dst, unsigned len)
{
    uint64_t page = f & ~(uint64_t)(PAGE - 1);
    if (f + len > page + PAGE || f + len < f)
        return peek(pid, f, dst, len);
    for (unsigned i = 0; i < PAGES; i++) {
        if (pg->addr[i] == page) {
            memcpy(dst, pg->data[i] + (f - page), len);
            return 0;
        }
    }
    unsigned k = pg->next++ % PAGES;
    if (peek(pid, page, pg->data[k], PAGE) < 0) {
        pg->addr[k] = 0;
        return peek(pid, f, dst, len); /* (a page only partly readable: just the frame) */
    }
    pg->addr[k] = page;
    memcpy(dst, pg->data[k] + (f - page), len);
    return 0;
}

int py_read_frames(const struct py_runtime *rt, uint64_t tstate, struct py_frame *out,
                   size_t max, bool *truncated)
{
    const struct py_layout *L = rt->lay;
    *truncated = false;
    uint64_t f;
    int r = peek(rt->pid, tstate + L->ts_frame, &f, sizeof(f));
    if (r < 0)
        return r;
    if (L->cframe_current >= 0 && f &&
        (r = peek(rt->pid, f + (unsigned)L->cframe_current, &f, sizeof(f))) < 0)
        return r == -ESRCH ? r : -EAGAIN;
    /* Pass 1: the frames, innermost first, with their code objects' addresses. */
    static struct pages pg; /* (the loop thread's: one chain at a time) */
    memset(pg.addr, 0, sizeof(pg.addr));
    pg.next = 0;
    size_t n = 0;
    uint8_t fb[128];
    uint64_t instr_ptr[PY_READ_MAX];
    if (max > PY_READ_MAX)
        max = PY_READ_MAX;
    /* A cycle (a torn chain) ends at max. */
    for (size_t steps = 0; f && steps < 4 * max + 16; steps++) {
        if ((r = read_frame(rt->pid, &pg, f, fb, L->fr_size)) < 0)
            return r == -ESRCH ? r : -EAGAIN;
        uint64_t prev = u64_at(fb, L->fr_previous);
        uint8_t owner = fb[L->fr_owner];
        if (owner > L->fr_owner_max)
            return -EAGAIN;
        if (owner >= PY_OWNED_BY_SHIM) {
            /* A shim: the frame above it (already recorded) is an evaluation call's first. */
            if (n)
                out[n - 1].entry = true;
            f = prev;
            continue;
        }
        if (n == max) {
            *truncated = true;
            break;
        }
        out[n].code = u64_at(fb, L->fr_code) & ~(uint64_t)L->ptr_tag;
        out[n].func = u64_at(fb, L->fr_func) & ~(uint64_t)L->ptr_tag;
        out[n].entry = L->fr_is_entry >= 0 && fb[L->fr_is_entry];
        instr_ptr[n] = u64_at(fb, L->fr_instr);
        n++;
        f = prev;
    }
    if (f && !*truncated)
        return -EAGAIN; /* longer than any real chain we keep: a cycle */
    /* Pass 2: the code objects' heads, in one read: each one's type, its size in code
     * units (ob_size) bounding instr, and what it is (ident). */
    static uint8_t cb[PY_READ_MAX][160];
    struct iovec lv[PY_READ_MAX], rv[PY_READ_MAX];
    for (size_t i = 0; i < n; i++) {
        lv[i] = (struct iovec){cb[i], L->co_size};
        rv[i] = (struct iovec){(void *)(uintptr_t)out[i].code, L->co_size};
    }
    ssize_t got = n ? process_vm_readv(rt->pid, lv, n, rv, n, 0) : 0;
    if (got < 0 && errno == ESRCH)
        return -ESRCH;
    size_t whole = got > 0 ? (size_t)got / L->co_size : 0;
    for (size_t i = 0; i < n; i++) {
        /* (A read stops at the first code object it cannot read: the rest one by one.) */
        if (i >= whole && (r = peek(rt->pid, out[i].code, cb[i], L->co_size)) < 0)
            return r == -ESRCH ? r : -EAGAIN;
        if (u64_at(cb[i], 8) != rt->code_type)
            return -EAGAIN;
        uint64_t units = u64_at(cb[i], 16);
        uint64_t base = out[i].code + L->co_code_adaptive;
        uint64_t instr = instr_ptr[i] >= base ? (instr_ptr[i] - base) / 2 : 0;
        if (units > MAX_CODE_UNITS || instr > units)
            return -EAGAIN;
        out[i].instr = (uint32_t)instr;
        out[i].ident = ident_of(L, cb[i]);
    }
    return (int)n;
}

/* Append code point c to dst as UTF-8 (dst has room: 4 bytes). */
static size_t put_utf8(char *dst, uint32_t c)
{
    if (c < 0x80) {
        dst[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        dst[0] = (char)(0xc0 | (c >> 6));
        dst[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        if (c >= 0xd800 && c < 0xe000)
            c = 0xfffd; /* a lone surrogate: not UTF-8 */
        dst[0] = (char)(0xe0 | (c >> 12));
        dst[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        dst[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    if (c > 0x10ffff)
        c = 0xfffd;
    if (c < 0x10000)
        return put_utf8(dst, c);
    dst[0] = (char)(0xf0 | (c >> 18));
    dst[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    dst[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    dst[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* A str object's text as UTF-8 into dst (cut to fit). Returns 0 or -errno (-EAGAIN: not a
 * compact string). */
static int read_str(const struct py_runtime *rt, uint64_t obj, char *dst, size_t cap)
{
    const struct py_layout *L = rt->lay;
    uint8_t h[40];
    dst[0] = '\0';
    int r = peek(rt->pid, obj, h, sizeof(h));
    if (r < 0)
        return r;
    if (u64_at(h, 8) != rt->str_type)
        return -EAGAIN; /* not a str (None, or a subclass: not named) */
    uint64_t len = u64_at(h, 16);
    uint32_t state = u32_at(h, 32);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (kind != 1 && kind != 2 && kind != 4))
        return -EAGAIN;
    uint8_t buf[1024];
    size_t want = len * kind;
    if (want > sizeof(buf))
        want = sizeof(buf) / kind * kind;
    if ((r = peek(rt->pid, obj + (ascii ? L->str_ascii : L->str_compact), buf, want)) < 0)
        return r;
    size_t o = 0;
    for (size_t i = 0; i + kind <= want && o + 5 < cap; i += kind) {
        uint32_t c = kind == 1 ? buf[i] : kind == 2 ? (uint32_t)(buf[i] | buf[i + 1] << 8)
                                                    : u32_at(buf, (unsigned)i);
        o += put_utf8(dst + o, c);
    }
    dst[o] = '\0';
    return 0;
}

int py_read_code(const struct py_runtime *rt, uint64_t code, uint64_t func,
                 struct py_code *out)
{
    const struct py_layout *L = rt->lay;
    memset(out, 0, sizeof(*out));
    uint8_t cb[256];
    int r = peek(rt->pid, code, cb, L->co_size);
    if (r < 0)
        return r;
    if (u64_at(cb, 8) != rt->code_type)
        return -EAGAIN;
    out->ident = ident_of(L, cb);
    out->firstlineno = (int)u32_at(cb, L->co_firstlineno);
    if ((r = read_str(rt, u64_at(cb, L->co_name), out->name, sizeof(out->name))) < 0 ||
        (r = read_str(rt, u64_at(cb, L->co_qualname), out->qualname, sizeof(out->qualname))) < 0 ||
        (r = read_str(rt, u64_at(cb, L->co_filename), out->filename, sizeof(out->filename))) < 0)
        return r;
    /* The module: the function object's __module__, if that function runs this code. */
    uint8_t fn[128];
    if (func && peek(rt->pid, func, fn, L->fn_module + 8) == 0 &&
        u64_at(fn, L->fn_code) == code &&
        read_str(rt, u64_at(fn, L->fn_module), out->module, sizeof(out->module)) < 0)
        out->module[0] = '\0';
    /* The location table: a bytes object (ob_size at 16, the bytes at 32). */
    uint64_t lt = u64_at(cb, L->co_linetable);
    uint8_t bh[24];
    if ((r = peek(rt->pid, lt, bh, sizeof(bh))) < 0)
        return r;
    uint64_t len = u64_at(bh, 16);
    if (len > MAX_LINETABLE)
        return -EAGAIN;
    if (len) {
        out->linetable = malloc(len);
        if (!out->linetable)
            return -ENOMEM;
        if ((r = peek(rt->pid, lt + 32, out->linetable, len)) < 0) {
            py_code_free(out);
            return r;
        }
        out->linetable_len = len;
    }
    /* Still the same object (the reads above were not of freed memory reused meanwhile). */
    uint64_t type;
    if (peek(rt->pid, code + 8, &type, sizeof(type)) < 0 || type != rt->code_type) {
        py_code_free(out);
        return -EAGAIN;
    }
    return 0;
}

void py_code_free(struct py_code *c)
{
    free(c->linetable);
    c->linetable = NULL;
    c->linetable_len = 0;
}

/* The location table's variable-length integers: 6 bits a byte, bit 6 says more follow. */
static bool varint(const uint8_t **p, const uint8_t *end, uint32_t *out)
{
    uint32_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (*p >= end || shift > 30)
            return false;
        uint8_t b = *(*p)++;
        v |= (uint32_t)(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *out = v;
    return true;
}

static bool svarint(const uint8_t **p, const uint8_t *end, int *out)
{
    uint32_t v;
    if (!varint(p, end, &v))
        return false;
    *out = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
    return true;
}

int py_code_line(const struct py_code *c, uint32_t instr)
{
    if (!c->linetable || !c->linetable_len)
        return -1; /* no table: no line (and no arithmetic on a null pointer) */
    const uint8_t *p = c->linetable, *end = p + c->linetable_len;
    int64_t line = c->firstlineno; /* (a hostile table's deltas may sum past an int) */
    uint64_t addr = 0;
    while (p < end) {
        uint8_t first = *p++;
        if (!(first & 0x80))
            return -1; /* not an entry's start: malformed */
        unsigned code = (first >> 3) & 15, len = (first & 7) + 1u;
        int delta = 0;
        bool none = false;
        uint32_t skip;
        if (code == 15) {
            none = true;
        } else if (code == 14) {
            if (!svarint(&p, end, &delta) || !varint(&p, end, &skip) ||
                !varint(&p, end, &skip) || !varint(&p, end, &skip))
                return -1;
        } else if (code == 13) {
            if (!svarint(&p, end, &delta))
                return -1;
        } else if (code >= 10) {
            delta = (int)code - 10;
            p += 2;
        } else {
            p += 1;
        }
        if (p > end)
            return -1;
        line += delta;
        if (line < -1 || line > INT32_MAX)
            return -1;
        if (instr < addr + len)
            return none ? -1 : (int)line;
        addr += len;
    }
    return -1;
}
