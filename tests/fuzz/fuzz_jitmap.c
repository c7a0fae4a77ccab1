/* fuzz_jitmap.c: libFuzzer target for the perf map parser (daemon/symb/jitmap.c), which runs
 * in profd-symbolizer on a file the target writes.
 *
 * Input: byte 0 is a flag ('L': put a line longer than the read chunk, 1 MiB, first),
 * bytes 1-2 where to cut the rest into appends, the rest is the file. Each line goes through
 * jit_parse_line, checked against a reference of the format ("START SIZE name", hex with or
 * without 0x, a '\r' before the newline ignored). The file is then appended to a memfd in up
 * to three parts with jitmaps_update after each (as a JIT appends while profd reads), and
 * must give exactly what one update of the whole file gives: entries sorted and disjoint,
 * every lookup equal; the later of two overlapping lines wins at its own start.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_jitmap-libfuzzer -max_len=4096 -dict=tests/fuzz/jitmap.dict \
 *       /tmp/jitmap-new tests/fuzz/corpus/jitmap
 *
 * The plain build replays tests/fuzz/corpus/jitmap under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <unistd.h>

#include "jitmap.h"

#define LONG_LINE ((1u << 20) + 100)

/* The format as perf documents it, written plainly: 0 and the entry, or -EINVAL. */
static int ref_hex(const char **p, const char *end, uint64_t *v)
{
    const char *q = *p;
    if (end - q >= 2 && q[0] == '0' && (q[1] == 'x' || q[1] == 'X'))
        q += 2;
    int digits = 0;
    uint64_t x = 0;
    while (q < end && strchr("0123456789abcdefABCDEF", *q) && *q) {
        if (digits == 16 && x >> 60)
            return -EINVAL;
        unsigned d = *q <= '9' ? (unsigned)(*q - '0') : (unsigned)((*q | 0x20) - 'a' + 10);
        if (x >> 60)
            return -EINVAL;
        x = x << 4 | d;
        digits++;
        q++;
    }
    if (!digits)
        return -EINVAL;
    *v = x;
    *p = q;
    return 0;
}

static int ref_parse(const char *p, const char *end, struct jit_line *out)
{
    if (end > p && end[-1] == '\r')
        end--;
    uint64_t start, size;
    if (ref_hex(&p, end, &start) < 0 || p == end || *p++ != ' ')
        return -EINVAL;
    if (ref_hex(&p, end, &size) < 0 || p == end || *p++ != ' ')
        return -EINVAL;
    if (size == 0 || start > UINT64_MAX - size || p == end || memchr(p, '\0', (size_t)(end - p)))
        return -EINVAL;
    out->start = start;
    out->size = size;
    out->name = p;
    out->name_len = (size_t)(end - p) < JIT_MAX_NAME ? (size_t)(end - p) : JIT_MAX_NAME;
    return 0;
}

static void check_lines(const char *text, size_t n)
{
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        struct jit_line a, b;
        int ra = jit_parse_line(p, le, &a), rb = ref_parse(p, le, &b);
        FUZZ_ASSERT(ra == rb);
        if (ra == 0) {
            FUZZ_ASSERT(a.start == b.start && a.size == b.size && a.name == b.name &&
                        a.name_len == b.name_len);
            FUZZ_ASSERT(a.name >= p && a.name + a.name_len <= le && a.name_len > 0);
        }
        p = le + 1;
    }
}

/* Addresses worth looking up: each entry's edges in the text, as far as it parses. */
static size_t probes(const char *text, size_t n, uint64_t *out, size_t max)
{
    size_t k = 0;
    const char *p = text, *end = text + n;
    while (p < end && k + 4 <= max) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        struct jit_line l;
        if (jit_parse_line(p, nl, &l) == 0) {
            out[k++] = l.start;
            out[k++] = l.start + l.size - 1;
            out[k++] = l.start + l.size;
            out[k++] = l.start ? l.start - 1 : 0;
        }
        p = nl + 1;
    }
    return k;
}

static void append(int fd, const void *p, size_t n)
{
    if (n && write(fd, p, n) != (ssize_t)n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3 || size > 1 << 16)
        return 0;
    bool long_line = data[0] == 'L'; /* rare: it costs a 1 MiB write */
    const char *text = (const char *)data + 3;
    size_t n = size - 3;
    size_t cut1 = n ? data[1] % (n + 1) : 0, cut2 = n ? data[2] % (n + 1) : 0;
    if (cut1 > cut2) {
        size_t t = cut1;
        cut1 = cut2;
        cut2 = t;
    }
    check_lines(text, n);

    char *pad = NULL;
    if (long_line) {
        pad = malloc(LONG_LINE);
        FUZZ_ASSERT(pad);
        memset(pad, 'a', LONG_LINE - 1);
        pad[LONG_LINE - 1] = '\n';
    }
    /* Appended in parts, updating after each. */
    struct jitmaps *inc = jitmaps_create(), *whole = jitmaps_create();
    int fd = fuzz_memfd("", 0);
    if (pad)
        append(fd, pad, LONG_LINE);
    append(fd, text, cut1);
    FUZZ_ASSERT(jitmaps_update(inc, 7, fd) == 0);
    append(fd, text + cut1, cut2 - cut1);
    FUZZ_ASSERT(jitmaps_update(inc, 7, fd) == 0);
    append(fd, text + cut2, n - cut2);
    FUZZ_ASSERT(jitmaps_update(inc, 7, fd) == 0);
    /* Unchanged: nothing to do, same result. */
    FUZZ_ASSERT(jitmaps_update(inc, 7, fd) == 0);
    FUZZ_ASSERT(jitmaps_update(whole, 7, fd) == 0);
    FUZZ_ASSERT(jitmaps_count(inc, 7) == jitmaps_count(whole, 7));

    uint64_t addrs[512];
    size_t na = probes(text, n, addrs, 508);
    addrs[na++] = 0;
    addrs[na++] = UINT64_MAX;
    for (size_t i = 0; i < na; i++) {
        const char *a = jitmaps_lookup(inc, 7, addrs[i]), *b = jitmaps_lookup(whole, 7, addrs[i]);
        FUZZ_ASSERT((!a && !b) || (a && b && !strcmp(a, b)));
        FUZZ_ASSERT(!a || (*a && strlen(a) <= JIT_MAX_NAME));
        FUZZ_ASSERT(!jitmaps_lookup(inc, 8, addrs[i]));
    }
    /* The last complete line that parses names its own start (the later line wins). */
    const char *p = text, *end = text + n, *lastnl = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '\n')
            lastnl = q;
    if (lastnl && jitmaps_count(whole, 7) < JIT_MAX_ENTRIES) {
        const char *ls = lastnl;
        while (ls > p && ls[-1] != '\n')
            ls--;
        struct jit_line l;
        if (jit_parse_line(ls, lastnl, &l) == 0) {
            const char *got = jitmaps_lookup(whole, 7, l.start);
            FUZZ_ASSERT(got && strlen(got) == l.name_len && !memcmp(got, l.name, l.name_len));
        }
    }
    /* The file gone: forgotten. */
    FUZZ_ASSERT(jitmaps_update(inc, 7, -1) == 0 && jitmaps_count(inc, 7) == 0);
    close(fd);
    jitmaps_destroy(inc);
    jitmaps_destroy(whole);
    free(pad);
    return 0;
}
