/* dwarfsym.h: file offset -> function, source file and line, with inlined frames, for ELF
 * files given as descriptors, on elfutils libdwfl.
 *
 * Runs in the unprivileged helper (profd-symbolizer), and in unit tests and fuzzers on their
 * own. It opens nothing by path: separate debug files are asked for through the open
 * callback (the helper asks profd, which opens them with the requesting client's rights), and
 * every file it is given is checked before use (a debug file's build-id or CRC must match).
 * Not thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symproto.h"

struct dsym;

struct dsym_frame {
    const char *function; /* demangled (C++) name; NULL if unknown */
    const char *file;     /* source file; NULL if unknown */
    int line;             /* source line; 0 if unknown */
    bool inlined;         /* inlined into the next frame of the array */
};

/* Open a separate debug file for module `id`: kind SYMP_OPEN_BUILD_ID with the build-id's
 * bytes, or SYMP_OPEN_DEBUGLINK with the .gnu_debuglink file name (data, len). Returns a
 * descriptor (the callee takes it), or -errno. */
typedef int (*dsym_open_fn)(void *arg, uint64_t id, enum symp_open_kind kind, const void *data,
                            size_t len);

struct dsym *dsym_create(dsym_open_fn open_debug, void *arg);
void dsym_destroy(struct dsym *d);

/* Take module `id`: the ELF file open on fd (taken over, also on failure) whose path in the
 * target was path (for libdwfl's messages and the debuglink search). Returns 0, -EEXIST if
 * id is known (fd closed), or -ENOEXEC if it is not a loadable ELF object (its lookups then
 * find nothing). */
int dsym_add(struct dsym *d, uint64_t id, int fd, const char *path);
bool dsym_has(const struct dsym *d, uint64_t id);
/* Frames for file offset off of module id (for a return address, pass the offset of the call,
 * return address - 1): n >= 1 frames, innermost first, inlined callees then the function; one
 * frame with function NULL if nothing is known. Valid until the module is forgotten.
 * Returns n, or -ENOENT for an unknown module. */
int dsym_lookup(struct dsym *d, uint64_t id, uint64_t off, const struct dsym_frame **frames,
                enum symp_source *src);
/* Drop module id and everything kept for it. */
void dsym_forget(struct dsym *d, uint64_t id);
size_t dsym_count(const struct dsym *d);
