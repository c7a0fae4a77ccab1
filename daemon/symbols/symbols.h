/* symbols.h: address -> function, source file and line, with inlined frames.
 *
 * Runs at slice time only, never in the sample path. The parsing (ELF, DWARF, symbol tables,
 * separate debug files, perf maps) happens in the unprivileged helper profd-symbolizer
 * (symb/, symhelper.h); this side hands it descriptors of the files it opened, opens the
 * debug files it asks for with the requesting client's rights (fsaccess.h), checks what it
 * answers, and caches the answers by (module, file offset). Since modules are deduplicated by
 * build-id, the same library is resolved once for every target.
 *
 * A helper that crashes, hangs or answers nonsense costs the symbols of the rest of the slice
 * in progress (symbolizer_error says why; those frames print as [module+0xOFF]); the next
 * slice starts a new helper, and a file that made it fail twice is not sent to it again.
 * Not thread-safe: one symbolizer per thread (the daemon has one, on its slice worker). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct module;
struct symbolizer;
struct fs_creds;

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
 * (default ":.debug:/usr/lib/debug"); tests point it at their own directory. */
void symbolizer_set_debug_path(struct symbolizer *s, const char *path);

/* Start the work for one request: debug files and perf maps are opened with c's rights from
 * now on (NULL: profd's own), and the error of the previous request is forgotten. */
void symbolizer_begin(struct symbolizer *s, const struct fs_creds *c);
/* Why some frames were left unsymbolized since symbolizer_begin ("" if none were). */
const char *symbolizer_error(const struct symbolizer *s);

/* Resolve the file offsets offs[0..n) of module m in one exchange with the helper (the
 * caller holds a reference to m). Returns 0, or -EIO if they could not be (see
 * symbolizer_error); those then look up as unknown. */
int symbolizer_prefetch(struct symbolizer *s, struct module *m, const uint64_t *offs, size_t n);
/* Frames for file offset `file_off` of module m: cached, else asked for (one exchange, unless
 * the helper failed in this request). For a return address pass the offset of the call
 * (return address - 1). On return *frames points to n >= 1 frames, innermost first: inlined
 * callees (inlined = true) then the function that contains the code. If nothing is known, one
 * frame with function == NULL. The memory belongs to the symbolizer and stays valid until
 * symbolizer_destroy (or symbolizer_trim releases m). Returns n, or -EINVAL. *src (may be
 * NULL) says where the name came from. Debug info is looked up by build-id
 * (DEBUG_DIR/.build-id/xx/...) and .gnu_debuglink, as gdb does. */
int symbolizer_lookup(struct symbolizer *s, struct module *m, uint64_t file_off,
                      const struct sym_frame **frames, enum sym_source *src);

/* JIT code: names of the addresses addrs[0..n) of process pid from its perf map
 * (/proc/PID/root/tmp/perf-NSPID.map, "START SIZE name"), read again if it changed. The file
 * is opened with the requester's rights, not followed through symbolic links, and used only
 * if it is a regular file owned by the process's user or root. Returns 0 or -errno. */
int symbolizer_jit_prefetch(struct symbolizer *s, int pid, const uint64_t *addrs, size_t n);
/* The name of the JIT code at addr in pid: from the last prefetch for pid, else asked for.
 * NULL if none. Valid until the next prefetch for pid or symbolizer_destroy. */
const char *symbolizer_jit_lookup(struct symbolizer *s, int pid, uint64_t addr);

/* Release what the symbolizer (and its helper) keeps for modules that no one else references
 * any more (no target maps them) and the perf maps of processes that have exited. Call
 * between slices so that a daemon running for months does not keep every library it saw. */
void symbolizer_trim(struct symbolizer *s);

/* The decoding of the helper's answers, for tests and fuzzers (the helper is untrusted: it
 * parses what targets control). symbolizer_take_frames reads one SYMP_FRAMES message (msg,
 * len: the whole message) answering the offsets offs[0..n) of module m asked in one LOOKUP,
 * of which the first `first` are answered already; symbolizer_take_jit_names one
 * SYMP_JIT_NAMES message for the addresses addrs[0..n) of process pid. What a message
 * answers is cached only if the whole message is sound. Return how many it answered, with
 * *final set if it is the last, or -EPROTO. */
int symbolizer_take_frames(struct symbolizer *s, struct module *m, const void *msg, size_t len,
                           const uint64_t *offs, size_t n, size_t first, bool *final);
int symbolizer_take_jit_names(struct symbolizer *s, int pid, const void *msg, size_t len,
                              const uint64_t *addrs, size_t n, size_t first, bool *final);

/* What the cache holds, without asking the helper: symbolizer_lookup's answer for file_off
 * of m, or -ENOENT; symbolizer_jit_cached: 1 with *name set (NULL: no name) if addr of pid
 * was answered, else 0. */
int symbolizer_lookup_cached(struct symbolizer *s, struct module *m, uint64_t file_off,
                             const struct sym_frame **frames, enum sym_source *src);
int symbolizer_jit_cached(struct symbolizer *s, int pid, uint64_t addr, const char **name);

/* Bytes the symbolizer keeps (its caches, the answers' arenas, its buffers). */
size_t symbolizer_memory(const struct symbolizer *s);

/* Statistics, for status and tests. */
struct symbolizer_stats {
    uint64_t lookups, hits, modules;
    uint64_t helper_starts, helper_failures;
    pid_t helper_pid;
    char helper_error[320]; /* the last failure, "" if none */
};
void symbolizer_get_stats(struct symbolizer *s, struct symbolizer_stats *st);
