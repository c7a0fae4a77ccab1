/* fuzz.h: what every harness in tests/fuzz shares: the libFuzzer entry point's declaration,
 * an invariant check that aborts (a crash libFuzzer and the corpus replay both report), a
 * reader of the input as a byte stream, and memfd helpers for parsers that read files.
 *
 * Each harness is built twice: with -DPROFD_LIBFUZZER and -fsanitize=fuzzer (libFuzzer
 * provides main), and as a plain program linked with replay.c, whose main() replays the
 * files and directories named on its command line: `meson test --suite fuzz` replays the
 * committed corpora that way, under the normal build, ASan/UBSan and valgrind. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: run once before the first input (replay.c calls it if the harness defines it). */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The input consumed from the front: numbers and lengths for the harness's choices. Past
 * the end every read yields zeroes (an input is never too short to run). */
struct fuzz_in {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
    return (uint16_t)(fuzz_u8(in) | fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
    return (uint32_t)fuzz_u16(in) | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(struct fuzz_in *in)
{
    return (uint64_t)fuzz_u32(in) | (uint64_t)fuzz_u32(in) << 32;
}

/* Up to max bytes (fewer at the end of the input); *len says how many. */
static inline const uint8_t *fuzz_bytes(struct fuzz_in *in, size_t max, size_t *len)
{
    size_t k = max < in->n ? max : in->n;
    const uint8_t *p = in->p;
    in->p += k;
    in->n -= k;
    *len = k;
    return p;
}

/* A NUL-terminated copy (malloc'd) of the bytes up to the next NUL, or of at most max bytes:
 * a string that cannot hold a NUL byte, however hostile the rest is. */
char *fuzz_str(struct fuzz_in *in, size_t max);

/* A memfd holding [p, p + n), its offset at 0. Aborts if it cannot be made. */
int fuzz_memfd(const void *p, size_t n);
