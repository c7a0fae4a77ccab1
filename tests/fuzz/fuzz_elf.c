/* fuzz_elf.c: libFuzzer target for the symbolizer on mutated ELF files, in the helper
 * (daemon/symb/elfinfo.c, daemon/symb/dwarfsym.c through libdwfl), end to end.
 *
 * Input: byte 0 holds flags (bit 0: offer the debug file for a build-id request, bit 1: for
 * a debuglink request; bits 2-7: the step between the offsets looked up), bytes 1-2 the size
 * of the ELF file that follows, the rest a separate debug file (possibly empty). The file is
 * read by elfinfo_read directly, then described and symbolized as profd has the helper do it
 * (symb_serve: DESCRIBE, then LOOKUP of offsets through its loaded segments, then again from
 * the cache), with the debug file handed to its open callback as profd would (from a memfd).
 * Every answer must be one profd accepts (helperside.h), every frame sound.
 *
 * libdw itself (elfutils 0.188, uninstrumented) is what parses most of the file: a crash
 * there is a crash of the sandboxed helper, which profd survives (it kills and restarts it,
 * and stops sending a file that made it fail twice); see tests/README.md's "Fuzzing" for what
 * was found there.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_elf-libfuzzer -max_len=16384 -rss_limit_mb=2560 \
 *       /tmp/elf-new tests/fuzz/corpus/elf
 *
 * The seeds are tiny ELF files built for it (-nostdlib, with DWARF, stripped, with a
 * debuglink or a build-id debug file, C++). The plain build replays tests/fuzz/corpus/elf
 * under `meson test --suite fuzz`. */
#include "helperside.h"

#include "elfinfo.h"
#include "log.h"

#define MAX_LOOKUPS 48

static struct {
    const uint8_t *debug;
    size_t debug_len;
    uint8_t flags;
    int opens;
} ctx;

/* The helper's open callback, answered as profd would: the debug file if asked for the
 * kind the flags allow. The helper checks it is the right file (build-id or CRC). */
static int open_debug(void *arg, uint64_t id, enum symp_open_kind kind, const void *data,
                      size_t len)
{
    (void)arg, (void)id;
    FUZZ_ASSERT(++ctx.opens <= 8);
    FUZZ_ASSERT(kind == SYMP_OPEN_BUILD_ID || kind == SYMP_OPEN_DEBUGLINK);
    if (kind == SYMP_OPEN_BUILD_ID)
        FUZZ_ASSERT(len > 0 && len <= SYMP_MAX_BUILD_ID && data);
    else
        FUZZ_ASSERT(len > 0 && !memchr(data, '/', len) && !memchr(data, '\0', len));
    bool offer = kind == SYMP_OPEN_BUILD_ID ? ctx.flags & 1 : ctx.flags & 2;
    if (!offer || !ctx.debug_len)
        return -ENOENT;
    return fuzz_memfd(ctx.debug, ctx.debug_len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    log_init("fuzz_elf", LOG_LVL_ERR);
    fake_modules_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3 || size > 1 << 20)
        return 0;
    ctx.flags = data[0];
    size_t main_len = (size_t)(data[1] | data[2] << 8);
    if (main_len > size - 3)
        main_len = size - 3;
    const uint8_t *elf = data + 3;
    ctx.debug = elf + main_len;
    ctx.debug_len = size - 3 - main_len;
    ctx.opens = 0;

    /* The headers, directly. */
    int fd = fuzz_memfd(elf, main_len);
    struct symp_elf_info info;
    elfinfo_read(fd, &info);
    FUZZ_ASSERT(info.err == 0 || info.err == -ENOEXEC || info.err == -EIO);
    if (info.err == 0)
        FUZZ_ASSERT(info.nloads >= 1 && info.nloads <= SYMP_MAX_LOADS &&
                    info.build_id_len <= SYMP_MAX_BUILD_ID);
    else
        FUZZ_ASSERT(info.nloads == 0 && info.build_id_len == 0);

    struct exchange x = {.s = symbolizer_create()};
    struct symb_server *srv = calloc(1, sizeof(*srv));
    FUZZ_ASSERT(srv);
    srv->dsym = dsym_create(open_debug, NULL);
    srv->jit = jitmaps_create();
    srv->send = decode_answer;
    srv->send_arg = &x;
    struct symp_w *w = malloc(sizeof(*w));
    FUZZ_ASSERT(w);

    /* DESCRIBE, as module_get has the helper do. */
    x.type = SYMP_DESCRIBE;
    symp_w_init(w, SYMP_DESCRIBE);
    FUZZ_ASSERT(serve_checked(srv, &x, w, dup(fd)) == 0);

    /* LOOKUP of offsets through the loaded segments, then past them. */
    x.type = SYMP_LOOKUP;
    x.m = &fake_modules[0];
    size_t step = 1 + (ctx.flags >> 2) * 7;
    for (uint32_t i = 0; i < info.nloads && x.n < MAX_LOOKUPS; i++)
        for (uint64_t o = 0; o < info.loads[i].filesz && x.n < MAX_LOOKUPS; o += step)
            x.ask[x.n++] = info.loads[i].offset + o;
    x.ask[x.n++] = UINT64_MAX;
    x.ask[x.n++] = main_len;
    put_lookup(w, x.m, true, x.m->path, x.ask, x.n);
    FUZZ_ASSERT(serve_checked(srv, &x, w, dup(fd)) == 0);
    /* The same again: from the helper's cache this time. */
    put_lookup(w, x.m, false, NULL, x.ask, x.n);
    FUZZ_ASSERT(serve_checked(srv, &x, w, -1) == 0);

    /* Directly: dsym_lookup's own contract. */
    for (size_t i = 0; i < x.n; i++) {
        const struct dsym_frame *f;
        enum symp_source src;
        int n = dsym_lookup(srv->dsym, x.m->id, x.ask[i], &f, &src);
        FUZZ_ASSERT(n >= 1 && n <= SYMP_MAX_FRAMES && src <= SYMP_SRC_NONE);
        FUZZ_ASSERT(!f[n - 1].inlined);
    }
    symp_w_init(w, SYMP_FORGET);
    symp_put_u64(w, x.m->id);
    x.type = SYMP_FORGET;
    FUZZ_ASSERT(symb_serve(srv, w->buf, w->len, -1) == 0 && !dsym_has(srv->dsym, x.m->id));

    close(fd);
    free(w);
    dsym_destroy(srv->dsym);
    jitmaps_destroy(srv->jit);
    free(srv);
    symbolizer_destroy(x.s);
    return 0;
}
