/* fuzz_symanswers.c: libFuzzer target for profd's reading of what its helper answers
 * (daemon/symbols/symbols.c: take_frames, the JIT names; daemon/symbols/modules.c: the description of a
 * file). The helper parses hostile files and may have been subverted by one: to profd, its
 * answers are hostile input too.
 *
 * Input: byte 0 picks the exchange (frames of a LOOKUP, names of a JIT request, or a
 * description), then what profd asked (offsets or addresses), then up to eight messages,
 * each a 16-bit length and that many bytes, read in turn as profd reads a helper's answers.
 * A message is either refused whole (-EPROTO: then nothing of it may be in the cache, and
 * profd stops reading) or accepted with what it answers cached exactly, every entry sound
 * (check_entry); a description is either refused or within the ranges profd relies on.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_symanswers-libfuzzer -max_len=8192 \
 *       -dict=tests/fuzz/symanswers.dict /tmp/symanswers-new tests/fuzz/corpus/symanswers
 *
 * The plain build replays tests/fuzz/corpus/symanswers under `meson test --suite fuzz`. */
#include "symside.h"

#include "log.h"

#define MAX_ASK 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    log_init("fuzz_symanswers", LOG_LVL_ERR);
    fake_modules_init();
    return 0;
}

/* What the cache held for each asked offset (or address) before a message. */
struct before {
    bool had;
    const void *what;
};

static void frames_exchange(struct symbolizer *s, struct fuzz_in *in)
{
    struct module *m = &fake_modules[fuzz_u8(in) % FAKE_MODULES];
    size_t n = 1 + fuzz_u8(in) % MAX_ASK;
    uint64_t offs[MAX_ASK];
    uint8_t how = fuzz_u8(in);
    for (size_t i = 0; i < n; i++)
        offs[i] = how & 1 ? fuzz_u32(in) : (uint64_t)i * (how | 1);
    size_t got = 0;
    for (int msg = 0; msg < 8 && in->n; msg++) {
        size_t len;
        const uint8_t *p = fuzz_bytes(in, fuzz_u16(in), &len);
        struct before b[MAX_ASK];
        for (size_t i = 0; i < n; i++) {
            const struct sym_frame *f = cached(s, m, offs[i]);
            b[i] = (struct before){f != NULL, f};
        }
        bool final = false;
        int k = symbolizer_take_frames(s, m, p, len, offs, n, got, &final);
        FUZZ_ASSERT(k == -EPROTO || (k >= 0 && (size_t)k <= n - got));
        for (size_t i = 0; i < n; i++) {
            const struct sym_frame *f = cached(s, m, offs[i]);
            bool answered = false;
            for (size_t j = got; k > 0 && j < got + (size_t)k; j++)
                answered |= offs[j] == offs[i];
            if (answered)
                FUZZ_ASSERT(f);
            else
                FUZZ_ASSERT((f != NULL) == b[i].had && (!f || f == b[i].what));
        }
        if (k < 0)
            return; /* profd kills the helper: nothing more is read */
        got += (size_t)k;
        if (final)
            return; /* profd checks got == n, and stops reading either way */
    }
}

static void names_exchange(struct symbolizer *s, struct fuzz_in *in)
{
    int pid = 1 + fuzz_u8(in) % 3;
    size_t n = fuzz_u8(in) % MAX_ASK;
    uint64_t addrs[MAX_ASK];
    uint8_t how = fuzz_u8(in);
    for (size_t i = 0; i < n; i++)
        addrs[i] = how & 1 ? fuzz_u32(in) : 0x7f0000000000ull + i * (how | 1);
    size_t got = 0;
    for (int msg = 0; msg < 8 && in->n; msg++) {
        size_t len;
        const uint8_t *p = fuzz_bytes(in, fuzz_u16(in), &len);
        struct before b[MAX_ASK];
        for (size_t i = 0; i < n; i++) {
            const char *name = NULL;
            b[i].had = symbolizer_jit_cached(s, pid, addrs[i], &name);
            b[i].what = name;
        }
        bool final = false;
        int k = symbolizer_take_jit_names(s, pid, p, len, addrs, n, got, &final);
        FUZZ_ASSERT(k == -EPROTO || (k >= 0 && (size_t)k <= n - got));
        for (size_t i = 0; i < n; i++) {
            const char *name = NULL;
            int has = symbolizer_jit_cached(s, pid, addrs[i], &name);
            bool answered = false;
            for (size_t j = got; k > 0 && j < got + (size_t)k; j++)
                answered |= addrs[j] == addrs[i];
            if (answered)
                FUZZ_ASSERT(has);
            else
                FUZZ_ASSERT(has == b[i].had && name == b[i].what);
            FUZZ_ASSERT(!name || strlen(name) <= SYMP_MAX_STR);
        }
        if (k < 0 || final)
            return;
        got += (size_t)k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 17)
        return 0;
    struct fuzz_in in = {data, size};
    uint8_t mode = fuzz_u8(&in) % 3;
    if (mode == 2) {
        check_description(in.p, in.n);
        return 0;
    }
    struct symbolizer *s = symbolizer_create();
    if (mode == 0)
        frames_exchange(s, &in);
    else
        names_exchange(s, &in);
    symbolizer_destroy(s);
    return 0;
}
