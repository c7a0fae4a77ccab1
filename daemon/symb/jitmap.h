/* jitmap.h: perf maps (/tmp/perf-PID.map), the names JIT compilers give the code they
 * generate: lines "START SIZE name", START and SIZE hex with or without 0x, as perf reads
 * them. Runs in the unprivileged helper: the file is written by the target, so every line
 * is checked and what is kept is bounded. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Most entries kept for one process; later lines beyond it are ignored. */
#define JIT_MAX_ENTRIES (4u << 20)
/* Longest name kept; longer ones are cut. */
#define JIT_MAX_NAME 4096

struct jitmaps;

struct jitmaps *jitmaps_create(void);
void jitmaps_destroy(struct jitmaps *j);
/* Bring process pid's map up to date from its file, open on fd (not closed; -1: the file is
 * gone, forget the map): nothing if it did not change, only the new lines if it grew (perf
 * maps are append-only), else read it again. Returns 0 or -errno. */
int jitmaps_update(struct jitmaps *j, uint32_t pid, int fd);
/* Name of the code at addr in process pid, or NULL. Valid until the next update of pid. */
const char *jitmaps_lookup(const struct jitmaps *j, uint32_t pid, uint64_t addr);
void jitmaps_forget(struct jitmaps *j, uint32_t pid);
/* Entries held for pid (tests). */
size_t jitmaps_count(const struct jitmaps *j, uint32_t pid);

/* One parsed line (tests and fuzzers). */
struct jit_line {
    uint64_t start, size;
    const char *name; /* into the buffer, not NUL-terminated */
    size_t name_len;
};
/* Parse one line [p, end) (without its newline). Returns 0, or -EINVAL if it is not an entry
 * (blank, malformed, zero size, wrapping around, a NUL in the name). */
int jit_parse_line(const char *p, const char *end, struct jit_line *out);
