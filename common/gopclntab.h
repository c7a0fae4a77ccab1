/* gopclntab.h: the Go runtime's own function table (.gopclntab), versions 1.16 to today.
 *
 * Go emits no call-frame information for its code; every Go binary (stripped with
 * `-ldflags=-s -w` too) carries instead the table its runtime unwinds and names with:
 * each function's entry, name, and pc-value tables giving per pc the stack pointer's
 * offset from the frame's base (pcsp), the source file and line, and the inline tree.
 * The daemon's unwinder steps Go frames with pcsp; the symbolizer names them from it.
 *
 * The table is the target's to forge: every read goes through the caller's read function
 * with an offset checked against the table's length, every walk is bounded, and a field
 * out of range fails the lookup (tests/fuzz/fuzz_gopclntab.c). Layouts (magic):
 * 1.16-1.17 0xfffffffa, 1.18-1.19 0xfffffff0, 1.20+ 0xfffffff1 (little-endian, 8-byte
 * pointers: amd64 and arm64). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Read n bytes of the module at address addr into dst; false if they cannot be read. The
 * table is read at [base, base + len); the inline trees lie outside it (in go:func.*). */
typedef bool (*gopcln_read_fn)(void *ctx, uint64_t addr, void *dst, size_t n);

enum gopcln_version { GOPCLN_116 = 116, GOPCLN_118 = 118, GOPCLN_120 = 120 };

#define GOPCLN_MAGIC_116 0xfffffffau
#define GOPCLN_MAGIC_118 0xfffffff0u
#define GOPCLN_MAGIC_120 0xfffffff1u
/* The header's first 8 bytes for a layout: magic, two zeros, pc quantum 1, pointer size 8. */
uint64_t gopcln_header_word(uint32_t magic);

/* Funcdata and pcdata indices (runtime/symtab.go, stable since 1.12). */
#define GOPCLN_PCDATA_INLTREE 2
#define GOPCLN_FUNCDATA_INLTREE 3

struct gopcln {
    gopcln_read_fn read;
    void *ctx;
    uint64_t base, len; /* where the table is: [base, base + len) */
    enum gopcln_version version;
    uint8_t quantum;    /* pc units of the tables (1 on amd64, 4 on arm64) */
    uint32_t nfunc, nfiles;
    uint64_t text;      /* where the functions' entry offsets count from (1.18+) */
    uint64_t funcname, cutab, filetab, pctab, pcln; /* offsets of the sub-tables */
    uint64_t min_pc, max_pc;                        /* [first entry, end of the last) */
    uint64_t gofunc;    /* address funcdata offsets count from (1.18+); 0 = unknown */
};

struct gopcln_func {
    uint64_t entry, end; /* [entry, end): the function's code */
    uint64_t off;        /* its _func record, as an offset in the table */
    int32_t nameoff;
    uint32_t pcsp, pcfile, pcln, npcdata, cuoff;
    uint8_t funcid, flag, nfuncdata;
};

/* Check the header of a table of len bytes and fill g. text is where the table's code is
 * (1.18+: the header's own textStart is used if text is 0; an unrelocated file's table
 * reads 0 there, so the symbolizer passes the .text section's address). Returns 0, or
 * -EINVAL for anything but a sound table of a supported layout. */
int gopcln_init(struct gopcln *g, gopcln_read_fn read, void *ctx, uint64_t base, uint64_t len,
                uint64_t text);

/* Is pc in the table's code? */
static inline bool gopcln_covers(const struct gopcln *g, uint64_t pc)
{
    return pc >= g->min_pc && pc < g->max_pc;
}

/* The function whose code holds pc (a binary search of the function table). */
bool gopcln_find(const struct gopcln *g, uint64_t pc, struct gopcln_func *f);

/* Function i of the table (i < nfunc, in address order): false if its entry or record is
 * unsound. */
bool gopcln_func_at(const struct gopcln *g, uint32_t i, struct gopcln_func *f);

/* The value of pc-value table `table` (an offset in pctab; 0 = none) at pc of f: false if
 * the table does not reach pc or is malformed. */
bool gopcln_pcvalue(const struct gopcln *g, const struct gopcln_func *f, uint32_t table,
                    uint64_t pc, int32_t *val);

/* The stack pointer's distance from the frame's return address slot at pc of f: the
 * caller's frame starts at sp + delta + 8 (amd64), its return address at sp + delta. */
bool gopcln_spdelta(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                    int32_t *delta);

/* f's name into buf (NUL-terminated, cut to n - 1 bytes): false if unreadable. */
bool gopcln_name(const struct gopcln *g, int32_t nameoff, char *buf, size_t n);
/* The source file and line of pc in f (the innermost inlined function's, if inlined). */
bool gopcln_fileline(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                     char *file, size_t n, int32_t *line);

/* One level of inlining at pc of f: the inlined function's name offset, and the pc (in f)
 * whose source position is the call site. Reads the inline tree, which needs g->gofunc on
 * 1.18+. Returns 1 (filled), 0 (pc is not in inlined code), -1 (unknown: no tree, or a
 * malformed one). */
int gopcln_inlined(const struct gopcln *g, const struct gopcln_func *f, uint64_t pc,
                   int32_t *nameoff, uint64_t *parent_pc);

/* The index of moduledata's gofunc field (pointer-sized words from its start; 1.18+). */
unsigned gopcln_gofunc_word(const struct gopcln *g);
