/* test_gopclntab.c: common/gopclntab.c on Go function tables built here by hand, as the Go
 * linker writes them (cmd/link/internal/ld/pcln.go; runtime/symtab.go, runtime2.go), one per
 * layout (1.16: 8-byte entries and funcoffs, _func from an 8-byte entry, absolute funcdata
 * pointers; 1.18: 4-byte entry offsets from textStart, funcdata offsets from go:func.*; 1.20:
 * the same with startLine) and 1.20 with an arm64 pc quantum of 4: lookups at each function's
 * entry, middle and last byte, stack deltas where they change, names, files of two
 * compilation units and lines, inline trees one and two levels deep. Then hostile tables:
 * every truncation (init succeeds exactly when all it reads is inside), bad headers, offsets
 * and function tables past the end, records that disagree with the function table, pc-value
 * tables that stop short, run off the end or hold a varint of more than 5 bytes, names and
 * files without their NUL, inline trees out of range. Every read is served by rd, which
 * refuses (and counts) any outside the table and the go:func.* region; ASan, UBSan and
 * valgrind run this too.
 *
 * `test_gopclntab --seeds DIR` writes the tables as fuzz_gopclntab's input (byte 0 = where
 * go:func.* is, / 8; then the table, padded to 8, then the go:func.* region). */
#include "check.h"
#include "gopclntab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define TEXT 0x401000ull
#define TAB 0x500000ull    /* where the table is */
#define GOFUNC 0x600000ull /* go:func.*, the inline trees (in the seeds: after the table) */
#define MAXB 4096

/* The address space the parser reads: the table and the go:func.* region. */
static uint8_t tab[MAXB], gofunc[256];
static size_t tab_len, gofunc_len;
static uint64_t gofunc_addr = GOFUNC;
static int oob; /* reads asked for outside both: refused, counted */

static bool rd(void *ctx, uint64_t addr, void *dst, size_t n)
{
    (void)ctx;
    if (addr >= TAB && n <= tab_len && addr - TAB <= tab_len - n) {
        memcpy(dst, tab + (addr - TAB), n);
        return true;
    }
    if (addr >= gofunc_addr && n <= gofunc_len && addr - gofunc_addr <= gofunc_len - n) {
        memcpy(dst, gofunc + (addr - gofunc_addr), n);
        return true;
    }
    oob++;
    return false;
}

/* Bytes appended at w->b + w->n. */
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
static void align(struct buf *w, size_t a)
{
    while ((w->n) % a)
        w->b[w->n++] = 0;
}

static void varint(struct buf *w, uint32_t v)
{
    while (v >= 0x80) {
        put8(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put8(w, (uint8_t)v);
}

static uint32_t zigzag(int32_t d)
{
    return d < 0 ? ((uint32_t)(-(d + 1)) << 1) | 1 : (uint32_t)d << 1;
}

/* A pc-value table of n (value, end offset from the entry) pairs, the value -1 before the
 * first, pc deltas in units of quantum, ended by a 0 byte; its offset in pctab (w). */
static uint32_t pctable(struct buf *w, const int32_t (*pairs)[2], int n, unsigned quantum)
{
    uint32_t at = (uint32_t)w->n;
    int32_t prev = -1, pc = 0;
    for (int i = 0; i < n; i++) {
        varint(w, zigzag(pairs[i][0] - prev));
        varint(w, (uint32_t)(pairs[i][1] - pc) / quantum);
        prev = pairs[i][0];
        pc = pairs[i][1];
    }
    put8(w, 0);
    return at;
}
#define PAIRS(a) a, (int)(sizeof(a) / sizeof(a[0]))

/* The program. Names (funcname offsets): main.a 0, main.b 7, main.inl 14, main.c 23, main.d
 * 30, main.inner 37. Files: unit 0 = {a.go, b.go}, unit 1 = {b.go}. Functions (offsets from
 * TEXT):
 *   main.a [0x00, 0x40): sp 0 / 16 from 4 / 0 from 0x3c; a.go lines 10, 12 from 0x20.
 *   main.b [0x40, 0x80): sp 8; a.go line 20, 21 from 8; main.inl (b.go:30) inlined at
 *     [0x10, 0x20) called from pc 8; a.go:22 from 0x20.
 *   main.c [0x80, 0xa0): unit 1; sp 0; b.go:40.
 *   main.d [0xa0, 0x100): sp 0 / 32 from 8 / 0 from 0x58; a.go:50; main.inl inlined at
 *     [0x10, 0x20) called from pc 0x30 (a.go:51), main.inner (b.go:60) inlined into it at
 *     [0x10, 0x18), called from pc 0x18 (main.inl's b.go:31); 4 pcdata, 5 funcdata.
 * main.b's inline tree is at go:func.* + 0x10, main.d's at + 0x40. */
#define NFUNC 4
static const uint32_t entry[NFUNC + 1] = {0, 0x40, 0x80, 0xa0, 0x100};
static const char *const fname[NFUNC] = {"main.a", "main.b", "main.c", "main.d"};
static const int32_t nameoff_of[NFUNC] = {0, 7, 23, 30};

/* Where the builder put things (offsets in the table). */
static struct {
    uint64_t funcname, cutab, filetab, pctab, pcln;
    uint32_t funcoff[NFUNC]; /* from pcln */
    uint32_t scratch;        /* 32 zero bytes in pctab, for hand-made pc-value tables */
    size_t ftab_len, fixed;
} B;

static void build(enum gopcln_version v, unsigned quantum)
{
    memset(tab, 0, sizeof(tab));
    memset(gofunc, 0, sizeof(gofunc));
    struct buf w = {tab, 0};
    uint32_t magic = v == GOPCLN_116 ? GOPCLN_MAGIC_116 : v == GOPCLN_118 ? GOPCLN_MAGIC_118
                                                                         : GOPCLN_MAGIC_120;
    put32(&w, magic);
    put8(&w, 0);
    put8(&w, 0);
    put8(&w, (uint8_t)quantum);
    put8(&w, 8);
    unsigned nwords = v == GOPCLN_116 ? 7 : 8;
    size_t words_at = w.n;
    w.n += 8 * nwords;
    B.funcname = w.n;
    put(&w, "main.a\0main.b\0main.inl\0main.c\0main.d\0main.inner", 48);
    align(&w, 4);
    B.cutab = w.n;
    put32(&w, 0);  /* unit 0, file 0: a.go */
    put32(&w, 10); /* unit 0, file 1: b.go */
    put32(&w, 10); /* unit 1, file 0: b.go */
    B.filetab = w.n;
    put(&w, "/src/a.go\0/src/b.go", 20);
    B.pctab = w.n;
    struct buf pw = {tab + B.pctab, 0};
    put8(&pw, 0); /* offset 0: no table */
    static const int32_t sp_a[][2] = {{0, 4}, {16, 0x3c}, {0, 0x40}};
    static const int32_t sp_b[][2] = {{8, 0x40}}, sp_c[][2] = {{0, 0x20}};
    static const int32_t sp_d[][2] = {{0, 8}, {32, 0x58}, {0, 0x60}};
    static const int32_t file_a[][2] = {{0, 0x40}}, file_c[][2] = {{0, 0x20}};
    static const int32_t file_b[][2] = {{0, 0x10}, {1, 0x20}, {0, 0x40}};
    static const int32_t file_d[][2] = {{0, 0x10}, {1, 0x20}, {0, 0x60}};
    static const int32_t ln_a[][2] = {{10, 0x20}, {12, 0x40}};
    static const int32_t ln_b[][2] = {{20, 0x8}, {21, 0x10}, {30, 0x20}, {22, 0x40}};
    static const int32_t ln_c[][2] = {{40, 0x20}};
    static const int32_t ln_d[][2] = {{50, 0x10}, {60, 0x18}, {31, 0x20}, {51, 0x60}};
    static const int32_t inl_b[][2] = {{-1, 0x10}, {0, 0x20}, {-1, 0x40}};
    static const int32_t inl_d[][2] = {{-1, 0x10}, {1, 0x18}, {0, 0x20}, {-1, 0x60}};
    uint32_t sp[NFUNC] = {pctable(&pw, PAIRS(sp_a), quantum), pctable(&pw, PAIRS(sp_b), quantum),
                          pctable(&pw, PAIRS(sp_c), quantum), pctable(&pw, PAIRS(sp_d), quantum)};
    uint32_t fl[NFUNC] = {pctable(&pw, PAIRS(file_a), quantum),
                          pctable(&pw, PAIRS(file_b), quantum),
                          pctable(&pw, PAIRS(file_c), quantum),
                          pctable(&pw, PAIRS(file_d), quantum)};
    uint32_t ln[NFUNC] = {pctable(&pw, PAIRS(ln_a), quantum), pctable(&pw, PAIRS(ln_b), quantum),
                          pctable(&pw, PAIRS(ln_c), quantum), pctable(&pw, PAIRS(ln_d), quantum)};
    uint32_t inl[NFUNC] = {0, pctable(&pw, PAIRS(inl_b), quantum), 0,
                           pctable(&pw, PAIRS(inl_d), quantum)};
    B.scratch = (uint32_t)pw.n;
    pw.n += 32;
    w.n += pw.n;
    align(&w, 8);
    B.pcln = w.n;
    /* The function table (filled in below), then the records. */
    unsigned fld = v == GOPCLN_116 ? 8 : 4;
    B.ftab_len = (2 * NFUNC + 1) * fld;
    w.n += B.ftab_len;
    static const uint32_t cuoff[NFUNC] = {0, 0, 2, 0};
    static const uint32_t npcdata[NFUNC] = {0, 3, 0, 4}, tree[NFUNC] = {0, 0x10, 0, 0x40};
    static const uint8_t nfuncdata[NFUNC] = {0, 4, 0, 5};
    B.fixed = v == GOPCLN_116 ? 44 : v == GOPCLN_118 ? 40 : 44;
    for (int i = 0; i < NFUNC; i++) {
        align(&w, 8);
        B.funcoff[i] = (uint32_t)(w.n - B.pcln);
        if (v == GOPCLN_116)
            put64(&w, TEXT + entry[i]);
        else
            put32(&w, entry[i]);
        put32(&w, (uint32_t)nameoff_of[i]);
        put32(&w, 16); /* args */
        put32(&w, 0);  /* deferreturn */
        put32(&w, sp[i]);
        put32(&w, fl[i]);
        put32(&w, ln[i]);
        put32(&w, npcdata[i]);
        put32(&w, cuoff[i]);
        if (v == GOPCLN_120)
            put32(&w, 9); /* startLine */
        put8(&w, 0);      /* funcID */
        put8(&w, 0);      /* flag */
        put8(&w, 0);
        put8(&w, nfuncdata[i]);
        for (uint32_t k = 0; k < npcdata[i]; k++)
            put32(&w, k == GOPCLN_PCDATA_INLTREE ? inl[i] : 0);
        if (v == GOPCLN_116) {
            if (nfuncdata[i] && ((TAB + w.n) & 4))
                w.n += 4; /* pointer-aligned */
            for (int k = 0; k < nfuncdata[i]; k++)
                put64(&w, k == GOPCLN_FUNCDATA_INLTREE ? gofunc_addr + tree[i] : 0);
        } else {
            for (int k = 0; k < nfuncdata[i]; k++)
                put32(&w, k == GOPCLN_FUNCDATA_INLTREE ? tree[i] : UINT32_MAX);
        }
    }
    tab_len = w.n;
    struct buf f = {tab + B.pcln, 0};
    for (int i = 0; i < NFUNC; i++) {
        if (v == GOPCLN_116) {
            put64(&f, TEXT + entry[i]);
            put64(&f, B.funcoff[i]);
        } else {
            put32(&f, entry[i]);
            put32(&f, B.funcoff[i]);
        }
    }
    if (v == GOPCLN_116)
        put64(&f, TEXT + entry[NFUNC]);
    else
        put32(&f, entry[NFUNC]);
    struct buf h = {tab + words_at, 0};
    put64(&h, NFUNC);
    put64(&h, 3); /* nfiles */
    if (v != GOPCLN_116)
        put64(&h, TEXT);
    put64(&h, B.funcname);
    put64(&h, B.cutab);
    put64(&h, B.filetab);
    put64(&h, B.pctab);
    put64(&h, B.pcln);
    /* The inline trees: nodes as runtime.inlinedCall of the layout. */
    static const struct {
        uint32_t tree, index; /* the tree's offset in go:func.*, the node's index in it */
        int16_t parent;
        int32_t file, line, name, parentpc;
    } nodes[] = {
        {0x10, 0, -1, 0, 21, 14, 0x08}, /* main.b's: main.inl called at 0x08 (a.go:21) */
        {0x40, 0, -1, 0, 51, 14, 0x30}, /* main.d's: main.inl called at 0x30 (a.go:51) */
        {0x40, 1, 0, 1, 31, 37, 0x18},  /* main.inner called by it at 0x18 (b.go:31) */
    };
    unsigned size = v == GOPCLN_120 ? 16 : 20;
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        struct buf g = {gofunc + nodes[i].tree + nodes[i].index * size, 0};
        if (v == GOPCLN_120) {
            put32(&g, 0); /* funcID, pad */
            put32(&g, (uint32_t)nodes[i].name);
            put32(&g, (uint32_t)nodes[i].parentpc);
            put32(&g, 5); /* startLine */
        } else {
            put32(&g, (uint16_t)nodes[i].parent); /* parent, funcID, pad */
            put32(&g, (uint32_t)nodes[i].file);
            put32(&g, (uint32_t)nodes[i].line);
            put32(&g, (uint32_t)nodes[i].name);
            put32(&g, (uint32_t)nodes[i].parentpc);
        }
    }
    gofunc_len = 0x40 + 2 * size;
}

static int init(struct gopcln *g, size_t len)
{
    int r = gopcln_init(g, rd, NULL, TAB, len, 0);
    if (r == 0)
        g->gofunc = gofunc_addr;
    return r;
}

static const struct {
    enum gopcln_version v;
    unsigned quantum;
} layouts[] = {{GOPCLN_116, 1}, {GOPCLN_118, 1}, {GOPCLN_120, 1}, {GOPCLN_120, 4}};
#define NLAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

static void check_layout(enum gopcln_version v, unsigned quantum)
{
    build(v, quantum);
    oob = 0;
    struct gopcln g;
    REQUIRE(init(&g, tab_len) == 0);
    CHECK_INT(g.version, v);
    CHECK_INT(g.quantum, quantum);
    CHECK_INT(g.nfunc, NFUNC);
    CHECK_INT(g.nfiles, 3);
    CHECK_U64(g.min_pc, TEXT);
    CHECK_U64(g.max_pc, TEXT + 0x100);
    if (v != GOPCLN_116)
        CHECK_U64(g.text, TEXT);
    CHECK_U64(g.funcname, B.funcname);
    CHECK_U64(g.pcln, B.pcln);
    CHECK(gopcln_covers(&g, TEXT) && gopcln_covers(&g, TEXT + 0xff));
    CHECK(!gopcln_covers(&g, TEXT - 1) && !gopcln_covers(&g, TEXT + 0x100));

    /* Each function at its entry, middle and last byte. */
    struct gopcln_func f;
    char name[64], file[64];
    for (int i = 0; i < NFUNC; i++) {
        uint64_t pcs[3] = {TEXT + entry[i], TEXT + (entry[i] + entry[i + 1]) / 2,
                           TEXT + entry[i + 1] - 1};
        for (int k = 0; k < 3; k++) {
            memset(&f, 0xa5, sizeof(f));
            CHECK(gopcln_find(&g, pcs[k], &f));
            CHECK_U64(f.entry, TEXT + entry[i]);
            CHECK_U64(f.end, TEXT + entry[i + 1]);
            CHECK_U64(f.off, B.pcln + B.funcoff[i]);
            CHECK_INT(f.nameoff, nameoff_of[i]);
            CHECK(gopcln_name(&g, f.nameoff, name, sizeof(name)));
            CHECK_STR(name, fname[i]);
        }
    }
    CHECK(!gopcln_find(&g, TEXT - 1, &f));
    CHECK(!gopcln_find(&g, TEXT + 0x100, &f));
    CHECK(!gopcln_find(&g, 0, &f));
    CHECK(!gopcln_find(&g, UINT64_MAX, &f));

    /* Stack deltas where they change: main.a 0 / 16 from 4 / 0 from 0x3c. */
    int32_t d;
    static const struct {
        uint32_t pc;
        int32_t delta;
    } sp[] = {{0, 0},     {3, 0},     {4, 16},    {0x20, 16}, {0x3b, 16},
              {0x3c, 0},  {0x3f, 0},  {0x40, 8},  {0x7f, 8},  {0x80, 0},
              {0xa0, 0},  {0xa7, 0},  {0xa8, 32}, {0xf7, 32}, {0xf8, 0}, {0xff, 0}};
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) {
        d = -1;
        CHECK(gopcln_find(&g, TEXT + sp[i].pc, &f));
        CHECK(gopcln_spdelta(&g, &f, TEXT + sp[i].pc, &d));
        CHECK_INT(d, sp[i].delta);
    }
    CHECK(gopcln_find(&g, TEXT, &f));
    CHECK(!gopcln_spdelta(&g, &f, TEXT + 0x40, &d)); /* not main.a's */
    CHECK(!gopcln_spdelta(&g, &f, TEXT - 1, &d));
    CHECK(!gopcln_pcvalue(&g, &f, 0, TEXT, &d)); /* no table */

    /* Files and lines, innermost (the inlined function's own) where inlined. */
    static const struct {
        uint32_t pc;
        const char *file;
        int32_t line;
    } pos[] = {{0, "/src/a.go", 10},    {0x1f, "/src/a.go", 10}, {0x20, "/src/a.go", 12},
               {0x3f, "/src/a.go", 12}, {0x40, "/src/a.go", 20}, {0x48, "/src/a.go", 21},
               {0x54, "/src/b.go", 30}, {0x60, "/src/a.go", 22}, {0x80, "/src/b.go", 40},
               {0x9f, "/src/b.go", 40}, {0xa0, "/src/a.go", 50}, {0xb2, "/src/b.go", 60},
               {0xb8, "/src/b.go", 31}, {0xd0, "/src/a.go", 51}};
    for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++) {
        int32_t line = -1;
        CHECK(gopcln_find(&g, TEXT + pos[i].pc, &f));
        CHECK(gopcln_fileline(&g, &f, TEXT + pos[i].pc, file, sizeof(file), &line));
        CHECK_STR(file, pos[i].file);
        CHECK_INT(line, pos[i].line);
    }

    /* main.b: main.inl inlined at [0x10, 0x20), called from pc 0x48 (line 21). */
    int32_t nameoff = -1;
    uint64_t parent = 0;
    CHECK(gopcln_find(&g, TEXT + 0x54, &f));
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), 1);
    CHECK_INT(nameoff, 14);
    CHECK(gopcln_name(&g, nameoff, name, sizeof(name)));
    CHECK_STR(name, "main.inl");
    CHECK_U64(parent, TEXT + 0x48);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x50, &nameoff, &parent), 1);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x5f, &nameoff, &parent), 1);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x48, &nameoff, &parent), 0);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x4f, &nameoff, &parent), 0);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x60, &nameoff, &parent), 0);
    /* main.d: two levels, main.inner in main.inl in main.d. */
    CHECK(gopcln_find(&g, TEXT + 0xb2, &f));
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0xb2, &nameoff, &parent), 1);
    CHECK_INT(nameoff, 37);
    CHECK_U64(parent, TEXT + 0xa0 + 0x18);
    CHECK_INT(gopcln_inlined(&g, &f, parent, &nameoff, &parent), 1);
    CHECK_INT(nameoff, 14);
    CHECK_U64(parent, TEXT + 0xa0 + 0x30);
    CHECK_INT(gopcln_inlined(&g, &f, parent, &nameoff, &parent), 0);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0xa0, &nameoff, &parent), 0);
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0xff, &nameoff, &parent), 0);
    /* No inline tree: main.a, main.c. */
    CHECK(gopcln_find(&g, TEXT + 0x10, &f));
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x10, &nameoff, &parent), 0);
    CHECK(gopcln_find(&g, TEXT + 0x90, &f));
    CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x90, &nameoff, &parent), 0);

    /* A name cut to the buffer; no buffer. */
    CHECK(gopcln_name(&g, 14, name, 5));
    CHECK_STR(name, "main");
    CHECK(!gopcln_name(&g, 14, name, 1));
    CHECK_STR(name, "");
    CHECK(!gopcln_name(&g, 14, name, 0));
    /* The line without a file buffer. */
    int32_t line = -1;
    CHECK(gopcln_find(&g, TEXT + 0x20, &f));
    CHECK(gopcln_fileline(&g, &f, TEXT + 0x20, NULL, 0, &line));
    CHECK_INT(line, 12);

    /* 1.18+ without gofunc: the tree is unknown, not guessed. */
    if (v != GOPCLN_116) {
        g.gofunc = 0;
        CHECK(gopcln_find(&g, TEXT + 0x54, &f));
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x48, &nameoff, &parent), 0);
    }
    CHECK_INT(oob, 0);
}

static void test_layouts(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++)
        check_layout(layouts[i].v, layouts[i].quantum);
}

/* Every lookup at every pc around the code: whatever the table gives, a found function holds
 * its pc, deltas are not negative, names and files are NUL-terminated in their buffers. */
static void exercise(struct gopcln *g)
{
    for (uint64_t pc = TEXT - 2; pc < TEXT + 0x104; pc++) {
        struct gopcln_func f;
        if (!gopcln_find(g, pc, &f))
            continue;
        CHECK(f.entry <= pc && pc < f.end);
        int32_t d, line, nameoff;
        uint64_t parent;
        char name[32], file[32];
        memset(name, '#', sizeof(name));
        memset(file, '#', sizeof(file));
        if (gopcln_spdelta(g, &f, pc, &d))
            CHECK(d >= 0);
        gopcln_name(g, f.nameoff, name, sizeof(name));
        CHECK(memchr(name, 0, sizeof(name)));
        if (gopcln_fileline(g, &f, pc, file, sizeof(file), &line))
            CHECK(memchr(file, 0, sizeof(file)) && line >= 0);
        uint64_t at = pc;
        for (int depth = 0; depth < 8 && gopcln_inlined(g, &f, at, &nameoff, &parent) == 1;
             depth++) {
            CHECK(parent >= f.entry && parent < f.end && nameoff >= 0);
            at = parent;
        }
    }
}

/* Every truncation: init succeeds exactly when the header, the function table and the first
 * record are inside; nothing is ever asked for past the length. */
static void test_truncated(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        build(layouts[i].v, layouts[i].quantum);
        size_t full = tab_len;
        size_t needed = B.pcln + B.ftab_len;
        if (B.pcln + B.funcoff[0] + B.fixed > needed)
            needed = B.pcln + B.funcoff[0] + B.fixed;
        int wrong = 0;
        for (size_t len = 0; len <= full; len++) {
            struct gopcln g;
            tab_len = len;
            oob = 0;
            int r = init(&g, len);
            if ((r == 0) != (len >= needed) || (r != 0 && r != -EINVAL))
                wrong++;
            if (r == 0)
                exercise(&g);
            CHECK_INT(oob, 0);
        }
        CHECK_INT(wrong, 0);
        tab_len = full;
    }
}

static void put_word(unsigned i, uint64_t v) { memcpy(tab + 8 + 8 * i, &v, 8); }
static uint64_t word(unsigned i)
{
    uint64_t v;
    memcpy(&v, tab + 8 + 8 * i, 8);
    return v;
}

/* Headers: each wrong field refused. */
static void test_bad_headers(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        enum gopcln_version v = layouts[i].v;
        build(v, layouts[i].quantum);
        size_t full = tab_len;
        struct gopcln g;
        uint8_t save[MAXB];
        memcpy(save, tab, sizeof(tab));
        static const struct {
            unsigned at;
            uint8_t val;
        } bytes[] = {{0, 0x12}, {3, 0x7f}, {4, 1}, {5, 1}, {6, 0}, {6, 2}, {6, 8}, {7, 4}, {7, 0}};
        for (size_t k = 0; k < sizeof(bytes) / sizeof(bytes[0]); k++) {
            tab[bytes[k].at] = bytes[k].val;
            CHECK_INT(init(&g, full), -EINVAL);
            memcpy(tab, save, sizeof(tab));
        }
        /* Another layout's magic on this body: refused or read within the table. */
        static const uint32_t magics[] = {GOPCLN_MAGIC_116, GOPCLN_MAGIC_118, GOPCLN_MAGIC_120};
        for (int k = 0; k < 3; k++) {
            memcpy(tab, &magics[k], 4);
            oob = 0;
            if (init(&g, full) == 0)
                exercise(&g);
            CHECK_INT(oob, 0);
            memcpy(tab, save, sizeof(tab));
        }
        /* nfunc: 0, past any bound, a function table past the end. */
        static const uint64_t nfuncs[] = {0, 1ull << 40, 1u << 24 | 1, MAXB, UINT64_MAX};
        for (size_t k = 0; k < sizeof(nfuncs) / sizeof(nfuncs[0]); k++) {
            put_word(0, nfuncs[k]);
            CHECK_INT(init(&g, full), -EINVAL);
        }
        memcpy(tab, save, sizeof(tab));
        put_word(1, 1ull << 32); /* nfiles */
        CHECK_INT(init(&g, full), -EINVAL);
        memcpy(tab, save, sizeof(tab));
        /* Each sub-table's offset at or past the end. */
        unsigned first = v == GOPCLN_116 ? 2 : 3, nwords = v == GOPCLN_116 ? 7 : 8;
        for (unsigned w = first; w < nwords; w++) {
            static const uint64_t past[] = {MAXB * 2, UINT64_MAX, 1ull << 63};
            for (size_t k = 0; k < 3; k++) {
                put_word(w, past[k]);
                CHECK_INT(init(&g, full), -EINVAL);
            }
            put_word(w, full);
            CHECK_INT(init(&g, full), -EINVAL);
            memcpy(tab, save, sizeof(tab));
        }
        /* The function table running past the end: at the end's last bytes. */
        put_word(nwords - 1, full - 8);
        CHECK_INT(init(&g, full), -EINVAL);
        put_word(nwords - 1, full - B.ftab_len + 1);
        CHECK_INT(init(&g, full), -EINVAL);
        memcpy(tab, save, sizeof(tab));
        /* The end before the first entry, or at it. */
        unsigned fld = v == GOPCLN_116 ? 8 : 4;
        uint64_t end_at = B.pcln + 2 * NFUNC * fld;
        memset(tab + end_at, 0, fld);
        CHECK_INT(init(&g, full), -EINVAL);
        memcpy(tab, save, sizeof(tab));
        /* 1.18+: textStart is the header's unless the caller gives one. */
        if (v != GOPCLN_116) {
            put_word(2, 0);
            CHECK_INT(init(&g, full), 0);
            CHECK_U64(g.min_pc, 0);
            CHECK_INT(gopcln_init(&g, rd, NULL, TAB, full, TEXT), 0);
            CHECK_U64(g.min_pc, TEXT);
            CHECK_U64(g.max_pc, TEXT + 0x100);
            memcpy(tab, save, sizeof(tab));
        }
        CHECK_INT(init(&g, full), 0);
        CHECK_U64(word(0), NFUNC);
    }
}

/* Records that disagree with the function table, records past the end, entries out of
 * order. */
static void test_bad_records(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        enum gopcln_version v = layouts[i].v;
        build(v, layouts[i].quantum);
        size_t full = tab_len;
        uint8_t save[MAXB];
        memcpy(save, tab, sizeof(tab));
        struct gopcln g;
        struct gopcln_func f;
        /* The first function's record: init refuses the table. */
        tab[B.pcln + B.funcoff[0]] ^= 1;
        CHECK_INT(init(&g, full), -EINVAL);
        memcpy(tab, save, sizeof(tab));
        /* main.b's: main.b is not found, the others are. */
        REQUIRE(init(&g, full) == 0);
        tab[B.pcln + B.funcoff[1]] ^= 4;
        CHECK(!gopcln_find(&g, TEXT + 0x40, &f));
        CHECK(!gopcln_find(&g, TEXT + 0x7f, &f));
        CHECK(gopcln_find(&g, TEXT + 0x3f, &f) && f.entry == TEXT);
        CHECK(gopcln_find(&g, TEXT + 0x80, &f) && f.entry == TEXT + 0x80);
        memcpy(tab, save, sizeof(tab));
        /* A record offset past the end, or whose fixed part runs past it. */
        unsigned fld = v == GOPCLN_116 ? 8 : 4;
        uint64_t off_at = B.pcln + (2 * 2 + 1) * fld; /* main.c's funcoff */
        static const uint64_t offs[] = {MAXB, UINT32_MAX, 1ull << 40};
        for (size_t k = 0; k < 3; k++) {
            if (fld == 4 && offs[k] > UINT32_MAX)
                continue;
            memcpy(tab + off_at, &offs[k], fld);
            CHECK(!gopcln_find(&g, TEXT + 0x80, &f));
        }
        uint64_t near_end = full - B.pcln - B.fixed + 4;
        memcpy(tab + off_at, &near_end, fld);
        CHECK(!gopcln_find(&g, TEXT + 0x80, &f));
        memcpy(tab, save, sizeof(tab));
        /* Entries out of order: whatever is found holds its pc; nothing read outside. */
        uint64_t e1_at = B.pcln + 2 * fld, big = v == GOPCLN_116 ? TEXT + 0xc0 : 0xc0;
        memcpy(tab + e1_at, &big, fld);
        oob = 0;
        exercise(&g);
        CHECK_INT(oob, 0);
        memcpy(tab, save, sizeof(tab));
        CHECK(gopcln_find(&g, TEXT + 0x80, &f));
    }
}

/* Pc-value tables: stopping short, running off the end, varints of 5 bytes (read) and 6
 * (refused), negative deltas, the value reached exactly at the last pair. */
static void test_bad_pctables(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        build(layouts[i].v, layouts[i].quantum);
        unsigned q = layouts[i].quantum;
        size_t full = tab_len;
        struct gopcln g;
        struct gopcln_func f, h;
        REQUIRE(init(&g, full) == 0);
        REQUIRE(gopcln_find(&g, TEXT, &f));
        uint8_t *s = tab + B.pctab + B.scratch;
        h = f;
        h.pcsp = B.scratch;
        int32_t d = -1;
        /* Value 3 for [0, 4), then the end: pc 4 is not covered. */
        uint8_t short_[] = {8, (uint8_t)(4 / q), 0};
        memcpy(s, short_, sizeof(short_));
        CHECK(gopcln_spdelta(&g, &h, TEXT + 3, &d));
        CHECK_INT(d, 3);
        CHECK(!gopcln_spdelta(&g, &h, TEXT + 4, &d));
        /* A value delta in 5 bytes (not canonical, but a uint32 varint): read. */
        uint8_t five[] = {0x8a, 0x80, 0x80, 0x80, 0x00, (uint8_t)(0x40 / q), 0};
        memset(s, 0, 32);
        memcpy(s, five, sizeof(five));
        d = -1;
        CHECK(gopcln_spdelta(&g, &h, TEXT + 0x3f, &d));
        CHECK_INT(d, 4);
        /* In 6 bytes: refused, as a pc delta too. */
        uint8_t six[] = {0x8a, 0x80, 0x80, 0x80, 0x80, 0x00, (uint8_t)(0x40 / q), 0};
        memset(s, 0, 32);
        memcpy(s, six, sizeof(six));
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        uint8_t six_pc[] = {2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0};
        memset(s, 0, 32);
        memcpy(s, six_pc, sizeof(six_pc));
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        /* A negative value: no delta (but the pc-value itself reads). */
        uint8_t neg[] = {3, (uint8_t)(0x40 / q), 0}; /* -1 + -2 */
        memset(s, 0, 32);
        memcpy(s, neg, sizeof(neg));
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        CHECK(gopcln_pcvalue(&g, &h, B.scratch, TEXT, &d));
        CHECK_INT(d, -3);
        /* A zero pc delta never reaches pc: bounded, no value. */
        uint8_t zero_pc[] = {2, 0, 2, 0, 2, 0, 2, 0, 0};
        memset(s, 0, 32);
        memcpy(s, zero_pc, sizeof(zero_pc));
        CHECK(!gopcln_spdelta(&g, &h, TEXT + 1, &d));
        /* Running off the table's end mid-varint, at its last byte, and past it. */
        uint8_t last = tab[full - 1];
        tab[full - 1] = 0x80;
        h.pcsp = (uint32_t)(full - 1 - B.pctab);
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        tab[full - 1] = 2; /* a value, then no pc delta */
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        tab[full - 1] = last;
        h.pcsp = (uint32_t)(full - B.pctab);
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        h.pcsp = UINT32_MAX;
        CHECK(!gopcln_spdelta(&g, &h, TEXT, &d));
        CHECK_INT(oob, 0);
    }
}

/* Names and files without their NUL before the table's end, out of range offsets, file
 * numbers and units out of range: refused, buffers left NUL-terminated. */
static void test_bad_strings(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        build(layouts[i].v, layouts[i].quantum);
        size_t full = tab_len;
        uint8_t save[MAXB];
        memcpy(save, tab, sizeof(tab));
        struct gopcln g;
        struct gopcln_func f;
        REQUIRE(init(&g, full) == 0);
        char name[64], file[64];
        memset(tab + full - 4, 'x', 4);
        memset(name, '#', sizeof(name));
        CHECK(!gopcln_name(&g, (int32_t)(full - 4 - B.funcname), name, sizeof(name)));
        CHECK_INT(name[0], 0);
        /* ... cut to the buffer before the end is reached: the part that fits. */
        CHECK(gopcln_name(&g, (int32_t)(full - 4 - B.funcname), name, 3));
        CHECK_STR(name, "xx");
        memset(name, '#', sizeof(name));
        CHECK(!gopcln_name(&g, -1, name, sizeof(name)));
        CHECK_INT(name[0], 0);
        memset(name, '#', sizeof(name));
        CHECK(!gopcln_name(&g, INT32_MAX, name, sizeof(name)));
        CHECK(!gopcln_name(&g, (int32_t)(full - B.funcname), name, sizeof(name)));
        CHECK_INT(name[0], 0);
        /* A file without its NUL: the line, no file. */
        REQUIRE(gopcln_find(&g, TEXT, &f));
        uint32_t fileoff = (uint32_t)(full - 4 - B.filetab);
        memcpy(tab + B.cutab, &fileoff, 4);
        int32_t line = -1;
        memset(file, '#', sizeof(file));
        CHECK(gopcln_fileline(&g, &f, TEXT, file, sizeof(file), &line));
        CHECK_INT(line, 10);
        CHECK_INT(file[0], 0);
        /* A unit's file missing (^0), past the end, a unit past the end. */
        uint32_t none = UINT32_MAX, far = MAXB;
        memcpy(tab + B.cutab, &none, 4);
        memset(file, '#', sizeof(file));
        CHECK(gopcln_fileline(&g, &f, TEXT, file, sizeof(file), &line));
        CHECK_INT(file[0], 0);
        memcpy(tab + B.cutab, &far, 4);
        memset(file, '#', sizeof(file));
        CHECK(gopcln_fileline(&g, &f, TEXT, file, sizeof(file), &line));
        CHECK_INT(file[0], 0);
        memcpy(tab, save, sizeof(tab));
        struct gopcln_func h = f;
        h.cuoff = UINT32_MAX;
        CHECK(gopcln_fileline(&g, &h, TEXT, file, sizeof(file), &line));
        CHECK_INT(file[0], 0);
        CHECK_INT(line, 10);
        /* No line table: nothing. */
        h = f;
        h.pcln = 0;
        CHECK(!gopcln_fileline(&g, &h, TEXT, file, sizeof(file), &line));
        CHECK_INT(oob, 0);
    }
}

/* Inline trees out of range: an index far out, a node whose parent pc is outside the
 * function or whose name is negative, a tree that cannot be read, a funcdata missing. */
static void test_bad_inline(void)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        enum gopcln_version v = layouts[i].v;
        build(v, layouts[i].quantum);
        size_t full = tab_len;
        struct gopcln g;
        struct gopcln_func f;
        REQUIRE(init(&g, full) == 0);
        REQUIRE(gopcln_find(&g, TEXT + 0x54, &f));
        int32_t nameoff;
        uint64_t parent;
        unsigned size = v == GOPCLN_120 ? 16 : 20, name_at = v == GOPCLN_120 ? 4 : 12;
        unsigned ppc_at = v == GOPCLN_120 ? 8 : 16;
        uint8_t save[256];
        memcpy(save, gofunc, sizeof(gofunc));
        static const uint32_t bad_ppc[] = {0x40, 0x1000, UINT32_MAX, 0x80000000u};
        for (size_t k = 0; k < 4; k++) {
            memcpy(gofunc + 0x10 + ppc_at, &bad_ppc[k], 4);
            CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        }
        memcpy(gofunc, save, sizeof(gofunc));
        uint32_t neg = 0x80000000u;
        memcpy(gofunc + 0x10 + name_at, &neg, 4);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        memcpy(gofunc, save, sizeof(gofunc));
        /* The go:func.* region ends inside the node. */
        size_t len = gofunc_len;
        gofunc_len = 0x10 + size - 1;
        oob = 0;
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(oob, 1); /* asked of the reader (the tree is outside the table), refused */
        gofunc_len = len;
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), 1);
        /* An index far out (the inline pcdata's value): refused, never read. */
        uint8_t tsave[MAXB];
        memcpy(tsave, tab, sizeof(tab));
        uint32_t t_inl;
        memcpy(&t_inl, tab + f.off + B.fixed + 4 * GOPCLN_PCDATA_INLTREE, 4);
        uint8_t *p = tab + B.pctab + t_inl;
        static const int32_t far[][2] = {{-1, 0x10}, {(1 << 20) + 1, 0x20}, {-1, 0x40}};
        struct buf pw = {p, 0};
        pctable(&pw, PAIRS(far), layouts[i].quantum);
        oob = 0;
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(oob, 0);
        /* An index within bounds but past the go:func.* region: asked, refused. */
        static const int32_t past[][2] = {{-1, 0x10}, {1000, 0x20}, {-1, 0x40}};
        pw.n = 0;
        pctable(&pw, PAIRS(past), layouts[i].quantum);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(oob, 1);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x48, &nameoff, &parent), 0);
        memcpy(tab, tsave, sizeof(tab));
        /* The tree's funcdata missing (^0 on 1.18+, nil on 1.16). */
        uint64_t fd_at = f.off + B.fixed + 4ull * 3;
        if (v == GOPCLN_116) {
            if ((TAB + fd_at) & 4)
                fd_at += 4;
            memset(tab + fd_at + 8 * GOPCLN_FUNCDATA_INLTREE, 0, 8);
        } else {
            memset(tab + fd_at + 4 * GOPCLN_FUNCDATA_INLTREE, 0xff, 4);
        }
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x48, &nameoff, &parent), 0);
        memcpy(tab, tsave, sizeof(tab));
        /* Fewer funcdata or pcdata than the tree's index: no inlining. */
        struct gopcln_func h = f;
        h.nfuncdata = 3;
        CHECK_INT(gopcln_inlined(&g, &h, TEXT + 0x54, &nameoff, &parent), 0);
        h = f;
        h.npcdata = 2;
        CHECK_INT(gopcln_inlined(&g, &h, TEXT + 0x54, &nameoff, &parent), 0);
        /* A record whose funcdata would lie past the table's end. */
        h = f;
        h.npcdata = 1u << 30;
        CHECK_INT(gopcln_inlined(&g, &h, TEXT + 0x54, &nameoff, &parent), -1);
        CHECK_INT(gopcln_inlined(&g, &f, TEXT + 0x54, &nameoff, &parent), 1);
        CHECK_INT(gopcln_gofunc_word(&g), v == GOPCLN_120 ? 40 : 38);
    }
}

/* The tables as fuzz_gopclntab's seeds, go:func.* (where 1.16's pointers point, too) after
 * the table: byte 0 = its offset in the table / 8. */
static int write_seeds(const char *dir)
{
    for (size_t i = 0; i < NLAYOUTS; i++) {
        build(layouts[i].v, layouts[i].quantum); /* for the table's length */
        size_t padded = (tab_len + 7) & ~(size_t)7;
        REQUIRE(padded / 8 < 256 && padded + sizeof(gofunc) <= MAXB);
        gofunc_addr = TAB + padded;
        build(layouts[i].v, layouts[i].quantum);
        uint8_t at = (uint8_t)(padded / 8);
        char path[512];
        snprintf(path, sizeof(path), "%s/layout%d%s", dir, layouts[i].v,
                 layouts[i].quantum == 4 ? "-quantum4" : "");
        FILE *f = fopen(path, "wb");
        if (!f)
            return 1;
        fwrite(&at, 1, 1, f);
        fwrite(tab, 1, padded, f); /* (tab is zeroed past tab_len) */
        fwrite(gofunc, 1, gofunc_len, f);
        fclose(f);
        gofunc_addr = GOFUNC;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--seeds"))
        return write_seeds(argv[2]);
    RUN(test_layouts);
    RUN(test_truncated);
    RUN(test_bad_headers);
    RUN(test_bad_records);
    RUN(test_bad_pctables);
    RUN(test_bad_strings);
    RUN(test_bad_inline);
    return check_status("test_gopclntab");
}
