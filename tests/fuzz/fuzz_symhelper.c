/* fuzz_symhelper.c: libFuzzer target for the helper's handling of profd's requests
 * (daemon/symb/serve.c, with the symproto.c readers), in-process.
 *
 * Input: a sequence of up to 16 requests, each a kind byte then its fields: a DESCRIBE or
 * a new module's LOOKUP (an ELF file from the input on a memfd), a LOOKUP of a module the
 * helper may or may not know, a JIT request (a perf map from the input, or "gone", or
 * nothing), FORGET and JIT_FORGET, or raw bytes as a request (what profd never sends: it
 * must be refused with -EPROTO, or answered, never crash the helper or make it send a
 * malformed answer). Every answer to a well-formed request is decoded by profd's readers,
 * which must accept it, and must answer exactly what was asked (helperside.h).
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_symhelper-libfuzzer -max_len=8192 \
 *       /tmp/symhelper-new tests/fuzz/corpus/symhelper
 *
 * The plain build replays tests/fuzz/corpus/symhelper under `meson test --suite fuzz`. */
#include "helperside.h"

#include "log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* Refused requests are logged as errors: nothing is printed below level 0. */
    log_init("fuzz_symhelper", (enum log_level)0);
    fake_modules_init();
    return 0;
}

/* The send callback for raw requests. */
static int raw_answer(void *arg, const struct symp_w *w)
{
    (void)arg;
    FUZZ_ASSERT(!w->overflow && w->len >= 4 && w->len <= SYMP_MAX_MSG);
    uint32_t t = symp_type_of(w->buf);
    FUZZ_ASSERT(t == SYMP_DESCRIPTION || t == SYMP_FRAMES || t == SYMP_JIT_NAMES);
    return 0;
}

/* Debug files are never offered here (fuzz_elf covers them). */
static int no_debug(void *arg, uint64_t id, enum symp_open_kind kind, const void *data,
                    size_t len)
{
    (void)arg, (void)id, (void)kind, (void)data, (void)len;
    return -ENOENT;
}

static int memfd_from_input(struct fuzz_in *in)
{
    size_t len;
    const uint8_t *p = fuzz_bytes(in, fuzz_u16(in) % 8192, &len);
    return fuzz_memfd(p, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 17)
        return 0;
    struct fuzz_in in = {data, size};
    struct exchange x = {.s = symbolizer_create()};
    struct symb_server *srv = calloc(1, sizeof(*srv));
    struct symp_w *w = malloc(sizeof(*w));
    FUZZ_ASSERT(srv && w);
    srv->dsym = dsym_create(no_debug, NULL);
    srv->jit = jitmaps_create();
    srv->send = decode_answer;
    srv->send_arg = &x;
    bool known[FAKE_MODULES] = {0};
    for (int req = 0; req < 16 && in.n; req++) {
        uint8_t kind = fuzz_u8(&in);
        x.type = 0;
        switch (kind % 7) {
        case 0: /* DESCRIBE */
            x.type = SYMP_DESCRIBE;
            symp_w_init(w, SYMP_DESCRIBE);
            FUZZ_ASSERT(serve_checked(srv, &x, w, memfd_from_input(&in)) == 0);
            break;
        case 1:   /* LOOKUP of a new module */
        case 2: { /* LOOKUP of a module (known to the helper or not) */
            int mi = fuzz_u8(&in) % FAKE_MODULES;
            x.type = SYMP_LOOKUP;
            x.m = &fake_modules[mi];
            bool fresh = kind % 7 == 1 || !known[mi];
            int fd = -1;
            if (fresh) {
                if (dsym_has(srv->dsym, x.m->id))
                    break; /* profd sends a module anew only to a new helper */
                fd = memfd_from_input(&in);
                known[mi] = true;
            }
            x.n = fuzz_u8(&in) % 64;
            if (fuzz_u8(&in) == 0xff)
                x.n = MAX_REQ; /* the largest batch: answers span several messages */
            for (size_t i = 0; i < x.n; i++)
                x.ask[i] = i < 64 ? fuzz_u16(&in) : i * 3;
            put_lookup(w, x.m, fresh, fuzz_u8(&in) & 1 ? x.m->path : NULL, x.ask, x.n);
            FUZZ_ASSERT(serve_checked(srv, &x, w, fd) == 0);
            break;
        }
        case 3: { /* JIT */
            x.type = SYMP_JIT;
            x.pid = 1 + fuzz_u8(&in) % 3;
            uint8_t how = fuzz_u8(&in) % 3;
            int fd = how == 0 ? memfd_from_input(&in) : -1;
            x.n = fuzz_u8(&in) % 64;
            for (size_t i = 0; i < x.n; i++)
                x.ask[i] = fuzz_u8(&in) & 1 ? fuzz_u64(&in) : fuzz_u16(&in);
            symp_w_init(w, SYMP_JIT);
            symp_put_u32(w, (uint32_t)x.pid);
            symp_put_u32(w, how == 0 ? SYMP_JIT_FILE : how == 1 ? SYMP_JIT_GONE : 0);
            symp_put_u32(w, (uint32_t)x.n);
            for (size_t i = 0; i < x.n; i++)
                symp_put_u64(w, x.ask[i]);
            FUZZ_ASSERT(serve_checked(srv, &x, w, fd) == 0);
            break;
        }
        case 4: { /* FORGET */
            int mi = fuzz_u8(&in) % FAKE_MODULES;
            symp_w_init(w, SYMP_FORGET);
            symp_put_u64(w, fake_modules[mi].id);
            FUZZ_ASSERT(serve_checked(srv, &x, w, -1) == 0 && x.answers == 0);
            known[mi] = false;
            break;
        }
        case 5: /* JIT_FORGET */
            symp_w_init(w, SYMP_JIT_FORGET);
            symp_put_u32(w, 1 + fuzz_u8(&in) % 3);
            FUZZ_ASSERT(serve_checked(srv, &x, w, -1) == 0 && x.answers == 0);
            break;
        default: { /* raw bytes: whatever the helper makes of them, it must survive */
            size_t len;
            const uint8_t *p = fuzz_bytes(&in, fuzz_u16(&in) % 2048, &len);
            symp_w_init(w, 0);
            memcpy(w->buf, p, len);
            w->len = len;
            int fd = fuzz_u8(&in) & 1 ? fuzz_memfd("", 0) : -1;
            /* What would profd have asked? Its answers are only checked to be well-formed
             * messages of the answering kinds. */
            srv->send = raw_answer;
            int r = symb_serve(srv, w->buf, w->len, fd);
            FUZZ_ASSERT(r == 0 || r == -EPROTO);
            srv->send = decode_answer;
            /* A raw request may have taken a module: profd's view of which modules the
             * helper knows no longer holds. */
            for (int i = 0; i < FAKE_MODULES; i++)
                known[i] = dsym_has(srv->dsym, fake_modules[i].id);
            break;
        }
        }
    }
    free(w);
    dsym_destroy(srv->dsym);
    jitmaps_destroy(srv->jit);
    free(srv);
    symbolizer_destroy(x.s);
    return 0;
}
