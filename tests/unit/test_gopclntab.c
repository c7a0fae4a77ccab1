/* test_gopclntab.c: common/gopclntab.c on Go function tables built here by hand, one per
 * layout (1.16, 1.18, 1.20), as the Go linker writes them (cmd/link/internal/ld/pcln.go,
 * runtime/symtab.go): lookups, pc-value tables, names, files and lines, inline trees; and
 * hostile tables (bad headers, offsets and records out of range, every truncation, runaway
 * varints, names without their end), which must be refused without a read out of bounds
 * (the reads are checked here; the build's sanitizers and valgrind run this too). */
#include "check.h"
#include "gopclntab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define TEXT 0x401000ull
#define TAB 0x500000ull   /* where the table is */
#define GOFUNC 0x600000ull /* go:func.*: the inline tree */
#define MAXB 4096

/* The address space the parser reads: the table and the go:func.* region. */
static uint8_t tab[MAXB], gofunc[256];
static size_t tab_len, gofunc_len;
static int oob; /* reads asked for outside both: allowed (refused), counted */

static bool rd(void *ctx, uint64_t addr, void *dst, size_t n)
{
    (void)ctx;
    if (addr >= TAB && n <= tab_len && addr - TAB <= tab_len - n) {
        memcpy(dst, tab + (addr - TAB), n);
        return true;
    }
    if (addr >= GOFUNC && n <= gofunc_len && addr - GOFUNC <= gofunc_len - n) {
        memcpy(dst, gofunc + (addr - GOFUNC), n);
        return true;
    }
    oob++;
    return false;
}

/* A growing byte buffer. */
struct buf {
    uint8_t *b;
    size_t n;
};

static void put(struct buf *w, const void *p, size_t n)
{
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void put8(struct buf *w, uint8_t v) { put(w, &v, 1); }
static void put32(struct buf *w, uint32_t v) { put(w, &v, 4); }
static void put64(struct buf *w, uint64_t v) { put(w, &v, 8); }

static void varint(struct buf *w, uint32_t v)
{
    while (v >= 0x80) {
        put8(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put8(w, (uint8_t)v);
}

/* A pc-value table: n (value, end offset from the entry) pairs, from value -1 at the entry. */
static uint32_t pctable(struct buf *w, const int32_t (*pairs)[2], int n)
{
    uint32_t at = (uint32_t)w->n;
    int32_t prev = -1, pc = 0;
    for (int i = 0; i < n; i++) {
        int32_t d = pairs[i][0] - prev;
        varint(w, d < 0 ? ((uint32_t)(-d - 1) << 1) | 1 : (uint32_t)d << 1);
        varint(w, (uint32_t)(pairs[i][1] - pc));
        prev = pairs[i][0];
        pc = pairs[i][1];
    }
    put8(w, 0);
    return at;
}

/* Three functions: main.a [0, 0x40) (sp 0 / 16 / 0; lines 10, 12), main.b [0x40, 0x80)
 * (sp 8; line 20; main.inl inlined at [0x10, 0x20), called from pc 0x48's line 21),
 * main.c [0x80, 0xa0). Offsets of names: main.a 0, main.b 7, main.inl 14, main.c 23. */
static void build(enum gopcln_version v)
{
    memset(tab, 0, sizeof(tab));
    memset(gofunc, 0, sizeof(gofunc));
    struct buf w = {tab, 0};
    uint32_t magic = v == GOPCLN_116 ? GOPCLN_MAGIC_116 : v == GOPCLN_118 ? GOPCLN_MAGIC_118
                                                                         : GOPCLN_MAGIC_120;
    put64(&w, gopcln_header_word(magic));
    unsigned nwords = v == GOPCLN_116 ? 7 : 8;
    size_t words_at = w.n;
    w.n += 8 * nwords;
    uint32_t funcname = (uint32_t)w.n;
    put(&w, "main.a\0main.b\0main.inl\0main.c", 30);
    uint32_t cu = (uint32_t)w.n;
    put32(&w, 0); /* file 0 of the unit: filetab + 0 */
    uint32_t filetab = (uint32_t)w.n;
    put(&w, "/src/a.go", 10);
    uint32_t pctab = (uint32_t)w.n;
    struct buf pw = {tab + pctab, 0};
    put8(&pw, 0); /* offset 0: no table */
    static const int32_t sp_a[][2] = {{0, 4}, {16, 0x3c}, {0, 0x40}};
    static const int32_t sp_b[][2] = {{8, 0x40}}, sp_c[][2] = {{0, 0x20}};
    static const int32_t file0_a[][2] = {{0, 0x40}}, file0_c[][2] = {{0, 0x20}};
    static const int32_t ln_a[][2] = {{10, 0x20}, {12, 0x40}};
    static const int32_t ln_b[][2] = {{20, 0x8}, {21, 0x10}, {30, 0x20}, {22, 0x40}};
    static const int32_t ln_c[][2] = {{40, 0x20}};
    static const int32_t inl_b[][2] = {{-1, 0x10}, {0, 0x20}, {-1, 0x40}};
    uint32_t t_sp_a = pctable(&pw, sp_a, 3), t_sp_b = pctable(&pw, sp_b, 1);
    uint32_t t_sp_c = pctable(&pw, sp_c, 1), t_f_a = pctable(&pw, file0_a, 1);
    uint32_t t_f_c = pctable(&pw, file0_c, 1), t_ln_a = pctable(&pw, ln_a, 2);
    uint32_t t_ln_b = pctable(&pw, ln_b, 4), t_ln_c = pctable(&pw, ln_c, 1);
    uint32_t t_inl = pctable(&pw, inl_b, 3);
    w.n += pw.n;
    while (w.n % 8)
        w.n++;
    uint32_t pcln = (uint32_t)w.n;
    /* The function table, then the records. */
    unsigned fld = v == GOPCLN_116 ? 8 : 4;
    size_t ftab_at = w.n;
    w.n += (2 * 3 + 1) * fld;
    while (w.n % 8)
        w.n++;
    static const uint32_t entry[4] = {0, 0x40, 0x80, 0xa0};
    static const int32_t names[3] = {0, 7, 23};
    uint32_t sp[3] = {t_sp_a, t_sp_b, t_sp_c}, fl[3] = {t_f_a, t_f_a, t_f_c};
    uint32_t ln[3] = {t_ln_a, t_ln_b, t_ln_c};
    uint32_t funcoff[3];
    for (int i = 0; i < 3; i++) {
        while (w.n % 8)
            w.n++;
        funcoff[i] = (uint32_t)(w.n - pcln);
        bool inl = i == 1;
        if (v == GOPCLN_116)
            put64(&w, TEXT + entry[i]);
        else
            put32(&w, entry[i]);
        put32(&w, (uint32_t)names[i]);
        put32(&w, 0);  /* args */
        put32(&w, 0);  /* deferreturn */
        put32(&w, sp[i]);
        put32(&w, fl[i]);
        put32(&w, ln[i]);
        put32(&w, inl ? 3 : 0); /* npcdata */
        put32(&w, 0);           /* cuOffset */
        if (v == GOPCLN_120)
            put32(&w, 1); /* startLine */
        put8(&w, 0);      /* funcID */
        put8(&w, 0);      /* flag */
        put8(&w, 0);
        put8(&w, inl ? 4 : 0); /* nfuncdata */
        if (!inl)
            continue;
        put32(&w, 0);
        put32(&w, 0);
        put32(&w, t_inl); /* PCDATA_InlTreeIndex */
        if (v == GOPCLN_116) {
            if ((TAB + w.n) & 4)
                w.n += 4;
            for (int k = 0; k < 3; k++)
                put64(&w, 0);
            put64(&w, GOFUNC + 0x10); /* FUNCDATA_InlTree, absolute */
        } else {
            for (int k = 0; k < 3; k++)
                put32(&w, UINT32_MAX);
            put32(&w, 0x10); /* from gofunc */
        }
    }
    tab_len = w.n;
    /* The function table. */
    struct buf f = {tab + ftab_at, 0};
    for (int i = 0; i < 3; i++) {
        if (v == GOPCLN_116) {
            put64(&f, TEXT + entry[i]);
            put64(&f, funcoff[i]);
        } else {
            put32(&f, entry[i]);
            put32(&f, funcoff[i]);
        }
    }
    if (v == GOPCLN_116)
        put64(&f, TEXT + entry[3]);
    else
        put32(&f, entry[3]);
    /* The header's words. */
    struct buf h = {tab + words_at, 0};
    put64(&h, 3);
    put64(&h, 1);
    if (v != GOPCLN_116)
        put64(&h, TEXT);
    put64(&h, funcname);
    put64(&h, cu);
    put64(&h, filetab);
    put64(&h, pctab);
    put64(&h, pcln);
    /* The inline tree, one node: main.inl called at pc 0x48 of main.b. */
    struct buf g = {gofunc + 0x10, 0};
    if (v == GOPCLN_120) {
        put32(&g, 0);  /* funcID, pad */
        put32(&g, 14); /* nameOff */
        put32(&g, 8);  /* parentPc */
        put32(&g, 5);  /* startLine */
    } else {
        put32(&g, 0xffff); /* parent -1, funcID, pad */
        put32(&g, 0);      /* file */
        put32(&g, 21);     /* line */
        put32(&g, 14);     /* func_ */
        put32(&g, 8);      /* parentPc */
    }
    gofunc_len = 0x10 + g.n;
}

static int init(struct gopcln *g, size_t len)
{
    int r = gopcln_init(g, rd, NULL, TAB, len, 0);
    if (r == 0)
        g->gofunc = GOFUNC;
    return r;
}

static void test_layout(enum gopcln_version v)
{
    build(v);
    struct gopcln g;
    CHECK_INT(init(&g, tab_len), 0);
    CHECK_INT(g.version, v);
    CHECK_INT(g.nfunc, 3);
    CHECK_U64(g.min_pc, TEXT);
    CHECK_U64(g.max_pc, TEXT + 0xa0);
    struct gopcln_func f;
    static const struct {
        uint64_t pc, entry;
    } finds[] = {{0, 0}, {0x20, 0}, {0x3f, 0}, {0x40, 0x40}, {0x7f, 0x40}, {0x80, 0x80},
                 {0x9f, 0x80}};
    for (size_t i = 0; i < sizeof(finds) / sizeof(finds[0]); i++) {
        CHECK(gopcln_find(&g, TEXT + finds[i].pc, &f));
        CHECK_U64(f.entry, TEXT + finds[i].entry);
    }
    CHECK(!gopcln_find(&g, TEXT - 1, &f));
    CHECK(!gopcln_find(&g, TEXT + 0xa0, &f));
    /* Stack deltas of main.a: 0 in the prologue, 16 in the body, 0 at its last RET. */
    CHECK(gopcln_find(&g, TEXT, &f));
    int32_t d = -1;
    static const struct {
        uint32_t pc;
        int32_t delta;
    } sp[] = {{0, 0}, {3, 0}, {4, 16}, {0x3b, 16}, {0x3c, 0}, {0x3f, 0}};
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) {
        CHECK(gopcln_spdelta(&g, &f, TEXT + sp[i].pc, &d));
        CHECK_INT(d, sp[i].delta);
    }
    CHECK(!gopcln_spdelta(&g, &f, TEXT + 0x40, &d)); /* not main.a's */
    char name[64], file[64];
    int32_t line = 0;
    CHECK(gopcln_name(&g, f.nameoff, name, sizeof(name)) && !strcmp(name, "main.a"));
    CHECK(gopcln_fileline(&g, &f, TEXT + 0x21, file, sizeof(file), &line));
    CHECK(!strcmp(file, "/src/a.go"));
    CHECK_INT(line, 12);
    /* main.b, with main.inl inlined at [0x10, 0x20). */
    CHECK(gopcln_find(&g, TEXT + 0x50, &f));
    CHECK(gopcln_name(&g, f.nameoff, name, sizeof(name)) && !strcmp(name, "main.b"));
    int32_t nameoff = -1;
    uint64_t parent = 0;
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x40 + 0x14, &nameoff, &parent), 1);
    CHECK(gopcln_name(&g, nameoff, name, sizeof(name)) && !strcmp(name, "main.inl"));
    CHECK_U64(parent, TEXT + 0x48);
    CHECK(gopcln_fileline(&g, &f, TEXT + 0x40 + 0x14, file, sizeof(file), &line));
    CHECK_INT(line, 30); /* the inlined function's own line */
    CHECK(gopcln_fileline(&g, &f, parent, file, sizeof(file), &line));
    CHECK_INT(line, 21); /* the call site */
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x40 + 0x8, &nameoff, &parent), 0);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x40 + 0x30, &nameoff, &parent), 0);
    /* A name cut to the buffer. */
    CHECK(gopcln_name(&g, 14, name, 5) && !strcmp(name, "main"));
    /* main.c: no inline tree; its delta. */
    CHECK(gopcln_find(&g, TEXT + 0x90, &f));
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x90, &nameoff, &parent), 0);
    CHECK(gopcln_spdelta(&g, &f, TEXT + 0x90, &d));
    CHECK_INT(d, 0);
    /* 1.18+ without gofunc: the tree is unknown, not guessed. */
    if (v != GOPCLN_116) {
        g.gofunc = 0;
        CHECK(gopcln_find(&g, TEXT + 0x50, &f));
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
    }
}

/* Every lookup on whatever a (possibly truncated or corrupted) table gives: bounded. */
static void exercise(struct gopcln *g)
{
    for (uint64_t pc = TEXT - 2; pc < TEXT + 0xa4; pc++) {
        struct gopcln_func f;
        if (!gopcln_find(g, pc, &f))
            continue;
        int32_t d, line, nameoff;
        uint64_t parent;
        char name[32], file[32];
        gopcln_spdelta(g, &f, pc, &d);
        gopcln_name(g, f.nameoff, name, sizeof(name));
        gopcln_fileline(g, &f, pc, file, sizeof(file), &line);
        gopcln_inlined(g, &f, pc, &nameoff, &parent);
    }
}

static void test_hostile(enum gopcln_version v)
{
    struct gopcln g;
    build(v);
    size_t full = tab_len;
    /* Every truncation: refused, or sound as far as it reads (reads outside are refused by
     * rd, never made by the parser past its length: checked by counting none beyond). */
    for (size_t len = 0; len <= full; len++) {
        tab_len = len;
        oob = 0;
        if (init(&g, len) == 0)
            exercise(&g);
        /* The parser asks only within [TAB, TAB + len) of the table; rd serves the same. */
        CHECK_INT(oob, 0);
    }
    tab_len = full;
    /* Headers. */
    uint8_t save[16];
    memcpy(save, tab, 16);
    tab[0] = 0x12; /* magic: none of the layouts (flipping one bit may give another) */
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab, save, 16);
    tab[6] = 2; /* quantum */
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab, save, 16);
    tab[7] = 4; /* pointer size */
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab, save, 16);
    tab[4] = 1; /* the zero bytes */
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab, save, 16);
    uint64_t w;
    memcpy(&w, tab + 8, 8);
    uint64_t zero = 0, huge = 1ull << 40;
    memcpy(tab + 8, &zero, 8); /* nfunc 0 */
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab + 8, &huge, 8); /* nfunc past everything */
    CHECK_INT(init(&g, full), -EINVAL);
    uint64_t many = full; /* a function table past the end */
    memcpy(tab + 8, &many, 8);
    CHECK_INT(init(&g, full), -EINVAL);
    memcpy(tab + 8, &w, 8);
    /* Each sub-table offset past the length. */
    unsigned first = v == GOPCLN_116 ? 2 : 3, nwords = v == GOPCLN_116 ? 7 : 8;
    for (unsigned i = first; i < nwords; i++) {
        uint64_t o;
        memcpy(&o, tab + 8 + 8 * i, 8);
        uint64_t past = full;
        memcpy(tab + 8 + 8 * i, &past, 8);
        CHECK_INT(init(&g, full), -EINVAL);
        memcpy(tab + 8 + 8 * i, &o, 8);
    }
    CHECK_INT(init(&g, full), 0);
    /* A record whose entry disagrees with the function table: main.b not found. */
    struct gopcln_func f;
    CHECK(gopcln_find(&g, TEXT + 0x40, &f));
    uint64_t rec = f.off;
    uint32_t e;
    memcpy(&e, tab + rec, 4);
    uint32_t bad = e + 1;
    memcpy(tab + rec, &bad, 4);
    CHECK(!gopcln_find(&g, TEXT + 0x40, &f));
    memcpy(tab + rec, &e, 4);
    /* A pc-value table of runaway varints (more than 5 bytes) and one running off the end:
     * no value. */
    CHECK(gopcln_find(&g, TEXT + 0x10, &f));
    struct gopcln_func h = f;
    memset(tab + full - 8, 0x80, 8);
    h.pcsp = (uint32_t)(full - 8 - g.pctab);
    int32_t d;
    CHECK(!gopcln_spdelta(&g, &h, TEXT + 0x10, &d));
    h.pcsp = (uint32_t)(full - 2 - g.pctab);
    CHECK(!gopcln_spdelta(&g, &h, TEXT + 0x10, &d));
    h.pcsp = UINT32_MAX; /* past everything */
    CHECK(!gopcln_spdelta(&g, &h, TEXT + 0x10, &d));
    /* A name without its NUL before the table's end. */
    char name[64];
    memset(tab + full - 4, 'x', 4);
    CHECK(!gopcln_name(&g, (int32_t)(full - 4 - g.funcname), name, sizeof(name)));
    CHECK(!gopcln_name(&g, -1, name, sizeof(name)));
    /* An inline tree index far out, and a node pointing outside its function. */
    build(v);
    CHECK_INT(init(&g, tab_len), 0);
    CHECK(gopcln_find(&g, TEXT + 0x50, &f));
    int32_t nameoff;
    uint64_t parent;
    uint32_t ppc_at = 0x10 + (v == GOPCLN_120 ? 8 : 16), far = 0x1000;
    memcpy(gofunc + ppc_at, &far, 4);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
}

/* The three tables as fuzz_gopclntab's seeds: byte 0 places go:func.*, then the table,
 * then (8-aligned) this test's go:func.* region with the inline tree, where byte 0 says. */
static int write_seeds(const char *dir)
{
    static const enum gopcln_version vs[] = {GOPCLN_116, GOPCLN_118, GOPCLN_120};
    for (size_t i = 0; i < 3; i++) {
        build(vs[i]);
        char path[512];
        snprintf(path, sizeof(path), "%s/layout%d", dir, vs[i]);
        FILE *f = fopen(path, "wb");
        if (!f)
            return 1;
        size_t padded = (tab_len + 7) & ~(size_t)7;
        uint8_t at = (uint8_t)(padded / 8);
        fwrite(&at, 1, 1, f);
        fwrite(tab, 1, padded, f); /* (tab is zeroed past tab_len) */
        fwrite(gofunc, 1, gofunc_len, f);
        fclose(f);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--seeds"))
        return write_seeds(argv[2]);
    static const enum gopcln_version vs[] = {GOPCLN_116, GOPCLN_118, GOPCLN_120};
    for (size_t i = 0; i < 3; i++) {
        test_layout(vs[i]);
        test_hostile(vs[i]);
    }
    if (check_failures)
        fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures ? 1 : 0;
}
