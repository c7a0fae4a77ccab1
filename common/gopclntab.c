/* gopclntab.c: reading the Go runtime's function table (see gopclntab.h). The layouts are
 * those of runtime/symtab.go and runtime/runtime2.go of each version (and debug/gosym);
 * what differs between them is kept in one place, layout(). */
#include "gopclntab.h"

#include <errno.h>
#include <string.h>

/* Bounds on what a table may claim, far above any real program's (Kubernetes' binaries have
 * ~100k functions, tables of ~40 MiB). */
#define MAX_TABLE (1ull << 31)
#define MAX_FUNCS (1u << 24)
#define MAX_STEPS (1u << 20)  /* pc-value pairs walked for one lookup */
#define MAX_INLINE_INDEX (1 << 20)

uint64_t gopcln_header_word(uint32_t magic)
{
    /* magic (little-endian), 0, 0, quantum 1, pointer size 8 */
    return (uint64_t)magic | (uint64_t)1 << 48 | (uint64_t)8 << 56;
}

/* What differs between the layouts. */
struct layout {
    unsigned nwords;     /* header words after the first 8 bytes */
    unsigned ftab_field; /* bytes of each function table field */
    unsigned fixed;      /* bytes of a _func record before its pcdata */
    unsigned inl_size;   /* bytes of an inline tree node */
    unsigned inl_name, inl_parentpc; /* offsets in a node */
};

static struct layout layout(enum gopcln_version v)
{
    switch (v) {
    case GOPCLN_116: /* entry uintptr, 8 x u32, funcID, flag/pad, pad, nfuncdata */
        return (struct layout){7, 8, 8 + 8 * 4 + 4, 20, 12, 16};
    case GOPCLN_118: /* entryOff u32, 8 x u32, funcID, flag, pad, nfuncdata */
        return (struct layout){8, 4, 4 + 8 * 4 + 4, 20, 12, 16};
    case GOPCLN_120: /* ... and startLine */
    default:
        return (struct layout){8, 4, 4 + 9 * 4 + 4, 16, 4, 8};
    }
}

/* Read n bytes at offset off of the table, inside it. */
static bool tread(const struct gopcln *g, uint64_t off, void *dst, size_t n)
{
    if (off > g->len || n > g->len - off)
        return false;
    return g->read(g->ctx, g->base + off, dst, n);
}

static bool tread32(const struct gopcln *g, uint64_t off, uint32_t *v)
{
    return tread(g, off, v, 4);
}

static bool tread64(const struct gopcln *g, uint64_t off, uint64_t *v)
{
    return tread(g, off, v, 8);
}

int gopcln_init(struct gopcln *g, gopcln_read_fn read, void *ctx, uint64_t base, uint64_t len,
                uint64_t text)
{
    memset(g, 0, sizeof(*g));
    g->read = read;
    g->ctx = ctx;
    g->base = base;
    g->len = len < MAX_TABLE ? len : MAX_TABLE;
    uint64_t head[9];
    if (!tread(g, 0, head, 8))
        return -EINVAL;
    uint32_t magic = (uint32_t)head[0];
    uint8_t quantum = (uint8_t)(head[0] >> 48), ptrsize = (uint8_t)(head[0] >> 56);
    if ((head[0] >> 32 & 0xffff) != 0 || ptrsize != 8 || (quantum != 1 && quantum != 4))
        return -EINVAL;
    if (magic == GOPCLN_MAGIC_116)
        g->version = GOPCLN_116;
    else if (magic == GOPCLN_MAGIC_118)
        g->version = GOPCLN_118;
    else if (magic == GOPCLN_MAGIC_120)
        g->version = GOPCLN_120;
    else
        return -EINVAL;
    g->quantum = quantum;
    struct layout l = layout(g->version);
    if (!tread(g, 8, head + 1, l.nwords * 8))
        return -EINVAL;
    const uint64_t *w = head + 1;
    if (w[0] == 0 || w[0] > MAX_FUNCS || w[1] > MAX_FUNCS)
        return -EINVAL;
    g->nfunc = (uint32_t)w[0];
    g->nfiles = (uint32_t)w[1];
    const uint64_t *o = w + 2;
    if (g->version != GOPCLN_116) {
        g->text = text ? text : w[2];
        o++;
    }
    g->funcname = o[0];
    g->cutab = o[1];
    g->filetab = o[2];
    g->pctab = o[3];
    g->pcln = o[4];
    for (int i = 0; i < 5; i++)
        if (o[i] >= g->len)
            return -EINVAL;
    /* The function table (nfunc entries and the end's) lies in the table. */
    uint64_t ftab_len = (2ull * g->nfunc + 1) * l.ftab_field;
    if (ftab_len > g->len - g->pcln)
        return -EINVAL;
    struct gopcln_func f;
    uint64_t end;
    if (l.ftab_field == 4) {
        uint32_t e;
        if (!tread32(g, g->pcln + 2ull * g->nfunc * 4, &e))
            return -EINVAL;
        end = g->text + e;
    } else if (!tread64(g, g->pcln + 2ull * g->nfunc * 8, &end)) {
        return -EINVAL;
    }
    g->min_pc = 0;
    g->max_pc = UINT64_MAX;
    /* The first function's record must be sound: it says the table is what it claims. */
    uint64_t first;
    if (l.ftab_field == 4) {
        uint32_t e;
        if (!tread32(g, g->pcln, &e))
            return -EINVAL;
        first = g->text + e;
    } else if (!tread64(g, g->pcln, &first)) {
        return -EINVAL;
    }
    if (first >= end || end - first > MAX_TABLE * 4)
        return -EINVAL;
    g->min_pc = first;
    g->max_pc = end;
    if (!gopcln_find(g, first, &f))
        return -EINVAL;
    return 0;
}

/* Entry pc and record offset of function table entry i (i <= nfunc: nfunc is the end). */
static bool ftab_entry(const struct gopcln *g, uint32_t i, uint64_t *pc, uint64_t *funcoff)
{
    if (g->version == GOPCLN_116) {
        uint64_t v[2];
        if (!tread(g, g->pcln + (uint64_t)i * 16, v, i < g->nfunc ? 16 : 8))
            return false;
        *pc = v[0];
        *funcoff = i < g->nfunc ? v[1] : 0;
        return true;
    }
    uint32_t v[2];
    if (!tread(g, g->pcln + (uint64_t)i * 8, v, i < g->nfunc ? 8 : 4))
        return false;
    *pc = g->text + v[0];
    *funcoff = i < g->nfunc ? v[1] : 0;
    return true;
}

bool gopcln_find(const struct gopcln *g, uint64_t pc, struct gopcln_func *f)
{
    if (!gopcln_covers(g, pc) || !g->nfunc)
        return false;
    /* The last entry whose pc is <= pc. */
    uint32_t lo = 0, hi = g->nfunc; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t e, off;
        if (!ftab_entry(g, mid, &e, &off))
            return false;
        if (e <= pc)
            lo = mid;
        else
            hi = mid;
    }
    return gopcln_func_at(g, lo, f) && f->entry <= pc && pc < f->end;
}

bool gopcln_func_at(const struct gopcln *g, uint32_t i, struct gopcln_func *f)
{
    uint64_t entry, next, funcoff, unused;
    if (i >= g->nfunc || !ftab_entry(g, i, &entry, &funcoff) ||
        !ftab_entry(g, i + 1, &next, &unused) || entry >= next)
        return false;
    struct layout l = layout(g->version);
    uint64_t off = g->pcln + funcoff;
    if (funcoff >= g->len)
        return false;
    uint8_t rec[48];
    if (!tread(g, off, rec, l.fixed))
        return false;
    uint64_t rec_entry;
    unsigned at;
    if (g->version == GOPCLN_116) {
        memcpy(&rec_entry, rec, 8);
        at = 8;
    } else {
        uint32_t e;
        memcpy(&e, rec, 4);
        rec_entry = g->text + e;
        at = 4;
    }
    /* The record must be the one the table points at. */
    if (rec_entry != entry)
        return false;
    uint32_t u[9];
    memcpy(u, rec + at, sizeof(u));
    *f = (struct gopcln_func){.entry = entry, .end = next, .off = off,
                              .nameoff = (int32_t)u[0], .pcsp = u[3], .pcfile = u[4],
                              .pcln = u[5], .npcdata = u[6], .cuoff = u[7],
                              .funcid = rec[l.fixed - 4], .flag = rec[l.fixed - 3],
                              .nfuncdata = rec[l.fixed - 1]};
    return true;
}

/* A buffered reader of a pc-value table. */
struct cursor {
    const struct gopcln *g;
    uint64_t off; /* table offset of buf[0] */
    uint8_t buf[64];
    unsigned n, at;
};

static bool next_byte(struct cursor *c, uint8_t *b)
{
    if (c->at == c->n) {
        c->off += c->n;
        if (c->off >= c->g->len)
            return false;
        uint64_t left = c->g->len - c->off;
        c->n = left < sizeof(c->buf) ? (unsigned)left : sizeof(c->buf);
        c->at = 0;
        if (!tread(c->g, c->off, c->buf, c->n))
            return false;
    }
    *b = c->buf[c->at++];
    return true;
}

static bool varint(struct cursor *c, uint32_t *v)
{
    uint32_t x = 0;
    for (unsigned shift = 0; shift < 35; shift += 7) {
        uint8_t b;
        if (!next_byte(c, &b))
            return false;
        x |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false; /* more than 5 bytes: not a uint32 */
}

bool gopcln_pcvalue(const struct gopcln *g, const struct gopcln_func *f, uint32_t table,
                    uint64_t pc, int32_t *val)
{
    if (!table || pc < f->entry || pc >= f->end || g->pctab + table >= g->len)
        return false;
    struct cursor c = {.g = g, .off = g->pctab + table};
    int32_t v = -1;
    uint64_t at = f->entry;
    for (unsigned step = 0; step < MAX_STEPS; step++) {
        uint32_t uv, pcd;
        if (!varint(&c, &uv))
            return false;
        if (uv == 0 && step > 0)
            return false; /* the end: pc not covered */
        int32_t d = (uv & 1) ? (int32_t)~(uv >> 1) : (int32_t)(uv >> 1);
        if (!varint(&c, &pcd))
            return false;
        /* Each entry covers pcs the last did not (the linker writes no empty range): a
         * forged table of empty ranges is not walked a million steps per lookup. */
        if (pcd == 0 && step > 0)
            return false;
        /* (Wraps as Go's int32 does: a table of real code never does.) */
        v = (int32_t)((uint32_t)v + (uint32_t)d);
        at += (uint64_t)pcd * g->quantum;
        if (pc < at) {
            *val = v;
            return true;
        }
        if (at >= f->end)
            return false;
    }
    return false;
}

bool gopcln_spdelta(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                    int32_t *delta)
{
    int32_t d;
    if (!gopcln_pcvalue(g, f, f->pcsp, pc, &d) || d < 0)
        return false;
    *delta = d;
    return true;
}

/* A NUL-terminated string at table offset off into buf (cut to n - 1 bytes). On failure buf
 * holds "" (never the part read before the table ended: that is not NUL-terminated). */
static bool tstring(const struct gopcln *g, uint64_t off, char *buf, size_t n)
{
    if (!n)
        return false;
    size_t got = 0;
    while (got + 1 < n) {
        char chunk[64];
        uint64_t left = off < g->len ? g->len - off : 0;
        size_t k = left < sizeof(chunk) ? (size_t)left : sizeof(chunk);
        if (k > n - 1 - got)
            k = n - 1 - got;
        if (!k || !tread(g, off, chunk, k)) {
            buf[0] = 0;
            return false;
        }
        const char *nul = memchr(chunk, 0, k);
        size_t take = nul ? (size_t)(nul - chunk) : k;
        memcpy(buf + got, chunk, take);
        got += take;
        if (nul)
            break;
        off += k;
    }
    buf[got] = 0;
    return got > 0;
}

bool gopcln_name(const struct gopcln *g, int32_t nameoff, char *buf, size_t n)
{
    if (nameoff < 0) {
        if (n)
            buf[0] = 0;
        return false;
    }
    return tstring(g, g->funcname + (uint64_t)nameoff, buf, n);
}

bool gopcln_fileline(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                     char *file, size_t n, int32_t *line)
{
    int32_t fileno, ln;
    if (!gopcln_pcvalue(g, f, f->pcln, pc, &ln) || ln < 0)
        return false;
    *line = ln;
    if (n)
        file[0] = 0;
    uint32_t fileoff;
    if (!n || !gopcln_pcvalue(g, f, f->pcfile, pc, &fileno) || fileno < 0 ||
        !tread32(g, g->cutab + ((uint64_t)f->cuoff + (uint32_t)fileno) * 4, &fileoff) ||
        fileoff == UINT32_MAX)
        return true; /* the line without its file */
    tstring(g, g->filetab + fileoff, file, n);
    return true;
}

/* Funcdata i of f: the address of the data, 0 if none or unknown. */
static uint64_t funcdata(const struct gopcln *g, const struct gopcln_func *f, unsigned i)
{
    if (i >= f->nfuncdata)
        return 0;
    uint64_t at = f->off + layout(g->version).fixed + 4ull * f->npcdata;
    if (g->version == GOPCLN_116) {
        if ((g->base + at) & 4)
            at += 4; /* pointer-aligned */
        uint64_t p;
        return tread64(g, at + 8ull * i, &p) ? p : 0;
    }
    uint32_t o;
    if (!g->gofunc || !tread32(g, at + 4ull * i, &o) || o == UINT32_MAX)
        return 0;
    return g->gofunc + o;
}

int gopcln_inlined(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                   int32_t *nameoff, uint64_t *parent_pc)
{
    uint32_t table;
    if (f->npcdata <= GOPCLN_PCDATA_INLTREE || f->nfuncdata <= GOPCLN_FUNCDATA_INLTREE)
        return 0; /* no inlining in f */
    if (!tread32(g, f->off + layout(g->version).fixed + 4 * GOPCLN_PCDATA_INLTREE, &table))
        return -1;
    if (!table)
        return 0;
    int32_t index;
    if (!gopcln_pcvalue(g, f, table, pc, &index))
        return -1;
    if (index < 0)
        return 0;
    uint64_t tree = funcdata(g, f, GOPCLN_FUNCDATA_INLTREE);
    if (!tree || index > MAX_INLINE_INDEX)
        return -1;
    struct layout l = layout(g->version);
    int32_t node[5];
    if (!g->read(g->ctx, tree + (uint64_t)index * l.inl_size, node, l.inl_size))
        return -1;
    int32_t name, ppc;
    memcpy(&name, (char *)node + l.inl_name, 4);
    memcpy(&ppc, (char *)node + l.inl_parentpc, 4);
    if (name < 0 || ppc < 0 || (uint64_t)ppc >= f->end - f->entry)
        return -1;
    *nameoff = name;
    *parent_pc = f->entry + (uint64_t)ppc;
    return 1;
}

unsigned gopcln_gofunc_word(const struct gopcln *g)
{
    /* pcHeader, 6 slices, findfunctab, minpc..enoptrbss (12 words), [1.20: covctrs,
     * ecovctrs], end, gcdata, gcbss, types, etypes, rodata, gofunc */
    return g->version >= GOPCLN_120 ? 40 : 38;
}
