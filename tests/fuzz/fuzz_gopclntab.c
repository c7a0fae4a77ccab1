/* fuzz_gopclntab.c: libFuzzer target for common/gopclntab.c, the Go function table the
 * unwinder (daemon/gounwind.c, in the privileged daemon, from a target's memory) and the
 * symbolizer (daemon/symb/gosym.c) read.
 *
 * Input: byte 0 places go:func.* (where 1.18+ inline trees are found) at 8 * byte 0 into
 * the table; the rest is the table, at a fixed address (TAB: 1.16 tables' inline tree
 * pointers point into it there). The reader serves only the input: a read the parser asks
 * for outside it is refused (it must not matter), and ASan catches any it makes past its own
 * buffers. Looked up: the table's first and last pc and the one past it, 3 pcs chosen by the
 * input's last 12 bytes (offsets from the first pc; they are part of the table too), and up
 * to 512 spread across its code: the function, its stack delta, name, file and line, and the
 * inline chain (bounded here at 64 levels: a tree may loop, the symbolizer bounds it too).
 * Invariants: the first pc's function is found (init checked it); a found function holds the
 * pc; names and files are NUL-terminated in their buffers, whatever the answer; deltas are
 * not negative; an inlined call's parent pc lies in the function.
 *
 *   build-fuzz/tests/fuzz/fuzz_gopclntab-libfuzzer -max_len=16384 tests/fuzz/corpus/gopclntab
 *
 * Seeds: the hand-built tables of tests/unit/test_gopclntab.c (1.16, 1.18, 1.20 layouts, and
 * 1.20 with arm64's pc quantum of 4), written by `test_gopclntab --seeds DIR` (layout*); real
 * tables of a Go program built by Debian's Go 1.19 and 1.22, a few functions each with their
 * names, files, pc-value tables and inline trees, repacked as such inputs in their own
 * layout, and Go 1.19's also in the 1.16 layout (go119-*, go122-*: each answers every pc as
 * the whole table does); and the first 16 KiB of those programs' whole tables (*-head16k:
 * refused, their function tables are further on). */
#include "fuzz.h"

#include "gopclntab.h"

#define TAB 0x500000ull

static const uint8_t *tab;
static size_t tab_len;

static bool rd(void *ctx, uint64_t addr, void *dst, size_t n)
{
    (void)ctx;
    if (addr < TAB || n > tab_len || addr - TAB > tab_len - n)
        return false;
    memcpy(dst, tab + (addr - TAB), n);
    return true;
}

static void lookup(struct gopcln *g, uint64_t pc)
{
    struct gopcln_func f;
    if (!gopcln_find(g, pc, &f)) {
        FUZZ_ASSERT(pc != g->min_pc);
        return;
    }
    FUZZ_ASSERT(gopcln_covers(g, pc) && f.entry <= pc && pc < f.end);
    int32_t d, line, nameoff;
    char name[64], file[64];
    if (gopcln_spdelta(g, &f, pc, &d))
        FUZZ_ASSERT(d >= 0);
    memset(name, '#', sizeof(name));
    gopcln_name(g, f.nameoff, name, sizeof(name));
    FUZZ_ASSERT(memchr(name, 0, sizeof(name)));
    memset(file, '#', sizeof(file));
    if (gopcln_fileline(g, &f, pc, file, sizeof(file), &line))
        FUZZ_ASSERT(memchr(file, 0, sizeof(file)) && line >= 0);
    uint64_t at = pc, parent;
    for (int depth = 0; depth < 64 && gopcln_inlined(g, &f, at, &nameoff, &parent) == 1;
         depth++) {
        FUZZ_ASSERT(parent >= f.entry && parent < f.end && nameoff >= 0);
        memset(name, '#', sizeof(name));
        gopcln_name(g, nameoff, name, sizeof(name));
        FUZZ_ASSERT(memchr(name, 0, sizeof(name)));
        at = parent;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    tab = data + 1;
    tab_len = size - 1;
    struct gopcln g;
    if (gopcln_init(&g, rd, NULL, TAB, tab_len, 0) < 0)
        return 0;
    g.gofunc = TAB + 8ull * data[0];
    FUZZ_ASSERT(g.min_pc < g.max_pc && g.nfunc > 0);
    FUZZ_ASSERT(g.version == GOPCLN_116 || g.version == GOPCLN_118 || g.version == GOPCLN_120);
    uint64_t span = g.max_pc - g.min_pc;
    lookup(&g, g.min_pc);
    lookup(&g, g.max_pc - 1);
    lookup(&g, g.max_pc);
    for (size_t i = 0; i < 3 && tab_len >= 12; i++) {
        uint32_t off;
        memcpy(&off, tab + tab_len - 12 + 4 * i, 4);
        lookup(&g, g.min_pc + off % span);
    }
    for (uint64_t i = 0; i < 512 && i < span; i++)
        lookup(&g, g.min_pc + (span <= 512 ? i : span / 512 * i));
    return 0;
}
