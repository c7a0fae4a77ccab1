/* symbols.h: address -> function, source file and line, with inlined frames.
 *
 * Runs at slice time only, never in the sample path. One symbolizer serves all targets; its
 * results are cached by (module, file offset), and since modules are deduplicated by
 * build-id, the same library is resolved once for every target. Not thread-safe: one
 * symbolizer per thread (the daemon has one, on its slice worker thread). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct module;
struct symbolizer;

struct sym_frame {
    const char *function; /* demangled (C++) name; NULL if unknown */
    const char *file;     /* source file; NULL if unknown */
    int line;             /* source line; 0 if unknown */
    bool inlined;         /* inlined into the next frame of the array */
};

/* Where a name came from, best first. */
enum sym_source {
    SYM_DWARF,   /* debug info (the file itself or a separate debug file) */
    SYM_SYMTAB,  /* .symtab */
    SYM_DYNSYM,  /* .dynsym only */
    SYM_NONE,    /* nothing: print module+0xOFF */
};

struct symbolizer *symbolizer_create(void);
void symbolizer_destroy(struct symbolizer *s);
/* Where separate debug files are searched, in elfutils' debuginfo_path syntax
 * (default ":.debug:/usr/lib/debug"); tests point it at their own directory. Call before the
 * first lookup. */
void symbolizer_set_debug_path(struct symbolizer *s, const char *path);

/* Resolve the instruction at file offset `file_off` of module m (the caller holds a
 * reference; the symbolizer takes its own while it keeps state for m). For a return address
 * pass the offset of the call (return address - 1). On return *frames points to n >= 1
 * frames, innermost first: inlined callees (inlined = true) then the function that contains
 * the code. If nothing is known, one frame with function == NULL. The memory belongs to the
 * symbolizer and stays valid until symbolizer_destroy (or symbolizer_trim releases m).
 * Returns n, or -EINVAL. *src (may be NULL) says where the name came from. Debug info is
 * looked up by build-id (/usr/lib/debug/.build-id/xx/...) and .gnu_debuglink, as gdb
 * does. */
int symbolizer_lookup(struct symbolizer *s, struct module *m, uint64_t file_off,
                      const struct sym_frame **frames, enum sym_source *src);

/* JIT code: look addr up in /proc/PID/root/tmp/perf-NSPID.map ("START SIZE name", hex
 * without 0x, as perf reads it). The file is re-read when it changes. Returns the name or
 * NULL; names stay valid until symbolizer_destroy. */
const char *symbolizer_jit_lookup(struct symbolizer *s, int pid, uint64_t addr);

/* Release what the symbolizer keeps for modules that no one else references any more (no
 * target maps them: their Dwfl, open debug files and cached frames, which become invalid)
 * and the perf maps of processes that have exited. Call between slices so that a daemon
 * running for months does not keep every library it ever saw. */
void symbolizer_trim(struct symbolizer *s);

/* Cache statistics, for status and tests. */
struct symbolizer_stats {
    uint64_t lookups, hits, modules;
};
void symbolizer_get_stats(const struct symbolizer *s, struct symbolizer_stats *st);
