/* symside.h: profd's side of the symbolizer's protocol, for the harnesses of the helper and
 * of its answers: a symbolizer that is never asked to start a helper (only the decoders and
 * the cache are used), modules that are not opened from files, and the checks of what the
 * cache holds. Included by one harness each (static functions). */
#pragma once

#include "fuzz.h"

#include <errno.h>

#include "modules.h"
#include "symbols.h"
#include "symproto.h"

#define FAKE_MODULES 4

/* Modules 1..FAKE_MODULES as module_get would have made them (the helper knows them by id);
 * the harness holds a reference to each for good, so none is ever freed. */
static struct module fake_modules[FAKE_MODULES];

static void fake_modules_init(void)
{
    static const char *const paths[FAKE_MODULES] = {"/usr/lib/libfuzz.so.1", "/opt/app/bin/app",
                                                    "relative", "/deleted/x.so"};
    for (int i = 0; i < FAKE_MODULES; i++) {
        fake_modules[i] = (struct module){.refs = 1, .id = (uint64_t)i + 1, .fd = -1};
        fake_modules[i].path = (char *)paths[i];
        const char *slash = strrchr(paths[i], '/');
        fake_modules[i].name = slash ? slash + 1 : paths[i];
    }
}

/* An answer as profd keeps it: 1..SYMP_MAX_FRAMES frames, the outermost not inlined, known
 * sources, names that are C strings no longer than the protocol allows, lines not negative. */
static void check_entry(int n, const struct sym_frame *f, enum sym_source src)
{
    FUZZ_ASSERT(n >= 1 && n <= SYMP_MAX_FRAMES);
    FUZZ_ASSERT(src <= SYM_NONE);
    FUZZ_ASSERT(!f[n - 1].inlined);
    for (int i = 0; i < n; i++) {
        FUZZ_ASSERT(f[i].line >= 0);
        FUZZ_ASSERT(!f[i].function || strlen(f[i].function) <= SYMP_MAX_STR);
        FUZZ_ASSERT(!f[i].file || strlen(f[i].file) <= SYMP_MAX_STR);
    }
}

/* The cache entry of off in m, or NULL (checked when there is one). */
static const struct sym_frame *cached(struct symbolizer *s, struct module *m, uint64_t off)
{
    const struct sym_frame *f;
    enum sym_source src;
    int n = symbolizer_lookup_cached(s, m, off, &f, &src);
    FUZZ_ASSERT(n == -ENOENT || n >= 1);
    if (n < 0)
        return NULL;
    check_entry(n, f, src);
    return f;
}

/* The description profd reads from the helper, checked as profd checks it. */
static int check_description(const void *msg, size_t len)
{
    struct symp_elf_info info;
    int r = module_read_description(msg, len, &info);
    FUZZ_ASSERT(r == 0 || r == -ENOEXEC || r == -EIO || r == -EPROTO);
    if (r == 0) {
        FUZZ_ASSERT(info.nloads >= 1 && info.nloads <= SYMP_MAX_LOADS);
        FUZZ_ASSERT(info.e_type == 2 /* ET_EXEC */ || info.e_type == 3 /* ET_DYN */);
        FUZZ_ASSERT(info.build_id_len <= SYMP_MAX_BUILD_ID);
        for (uint32_t i = 0; i < info.nloads; i++) {
            const struct symp_load *l = &info.loads[i];
            FUZZ_ASSERT(l->offset + l->filesz >= l->offset && l->vaddr + l->memsz >= l->vaddr);
        }
    }
    return r;
}
