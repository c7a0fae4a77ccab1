/* fuzz_maps.c: libFuzzer target for the /proc/PID/maps parser (daemon/symbols/maps.c).
 *
 * Input: the maps text, any bytes. It goes through maps_parse_text as maps_read reads a
 * process (lenient: overlapping entries dropped) and as the tests do (strict), and through
 * maps_parse (a C string: up to the first NUL). Whatever is accepted must be what the rest
 * of profd relies on: entries sorted, non-overlapping and non-empty, permissions within
 * r/w/x, paths without NUL or newline, and maps_find must find exactly the entry holding an
 * address. The strict parse, when it accepts, must agree with the lenient one.
 *
 * Fuzzing with libFuzzer (clang; see tests/README.md's "Fuzzing" for the build directory):
 *
 *   ninja -C build-fuzz tests/fuzz/fuzz_maps-libfuzzer
 *   mkdir -p /tmp/maps-new
 *   build-fuzz/tests/fuzz/fuzz_maps-libfuzzer -max_len=4096 -dict=tests/fuzz/maps.dict \
 *       /tmp/maps-new tests/fuzz/corpus/maps
 *
 * The plain build replays tests/fuzz/corpus/maps under `meson test --suite fuzz`. */
#include "fuzz.h"
#include "maps.h"

#include <errno.h>

static void check(const struct maps *m)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct map_entry *e = &m->v[i];
        FUZZ_ASSERT(e->start < e->end);
        FUZZ_ASSERT(e->prot <= (MAP_PROT_R | MAP_PROT_W | MAP_PROT_X));
        FUZZ_ASSERT(!e->mod && !e->mod_err);
        if (e->path)
            FUZZ_ASSERT(*e->path && !strchr(e->path, '\n'));
        if (i > 0)
            FUZZ_ASSERT(m->v[i - 1].end <= e->start);
        FUZZ_ASSERT(maps_find(m, e->start) == e);
        FUZZ_ASSERT(maps_find(m, e->end - 1) == e);
        if (e->start > 0 && (i == 0 || m->v[i - 1].end < e->start))
            FUZZ_ASSERT(maps_find(m, e->start - 1) == NULL);
        if (i + 1 == m->n || m->v[i + 1].start > e->end)
            FUZZ_ASSERT(maps_find(m, e->end) == NULL);
    }
}

static bool same_entry(const struct map_entry *a, const struct map_entry *b)
{
    return a->start == b->start && a->end == b->end && a->pgoff == b->pgoff &&
           a->prot == b->prot && a->inode == b->inode && a->dev_major == b->dev_major &&
           a->dev_minor == b->dev_minor && !a->path == !b->path &&
           (!a->path || !strcmp(a->path, b->path));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    const char *text = (const char *)data;
    struct maps lenient, strict;
    int rl = maps_parse_text(text, size, false, &lenient);
    int rs = maps_parse_text(text, size, true, &strict);
    FUZZ_ASSERT(rl == 0 || rl == -EINVAL);
    FUZZ_ASSERT(rs == 0 || rs == -EINVAL);
    if (rl < 0)
        FUZZ_ASSERT(lenient.n == 0 && !lenient.v);
    if (rs < 0)
        FUZZ_ASSERT(strict.n == 0 && !strict.v);
    /* Overlaps are the only thing lenient forgives. */
    if (rs == 0) {
        FUZZ_ASSERT(rl == 0 && lenient.n == strict.n);
        for (size_t i = 0; i < strict.n; i++)
            FUZZ_ASSERT(same_entry(&strict.v[i], &lenient.v[i]));
    }
    if (rl < 0)
        FUZZ_ASSERT(rs < 0);
    check(&lenient);
    check(&strict);
    maps_finish(&lenient);
    maps_finish(&strict);

    /* maps_parse reads a C string: the text up to its first NUL. */
    char *cstr = strndup(text, size);
    FUZZ_ASSERT(cstr);
    struct maps c, ref;
    int rc = maps_parse(cstr, &c);
    int rr = maps_parse_text(cstr, strlen(cstr), true, &ref);
    FUZZ_ASSERT(rc == rr && c.n == ref.n);
    for (size_t i = 0; i < c.n; i++)
        FUZZ_ASSERT(same_entry(&c.v[i], &ref.v[i]));
    maps_finish(&c);
    maps_finish(&ref);
    free(cstr);
    return 0;
}
