/* test_symbols.c: symbolize real fixture processes: PIE, non-PIE, a shared library, inlined
 * frames, C++ names, separate debug files (build-id, .gnu_debuglink), .symtab, .dynsym and
 * nothing; the cache shared across processes; trim; and cold/warm costs in libc. */
#include "maps.h"
#include "modules.h"
#include "symbols.h"
#include "symtest.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Symbolize a site of fixture maps m: a return address, so the call is at addr - 1. */
static int lookup_site(struct symbolizer *s, const struct maps *m, const struct fx_site *site,
                       uint64_t delta, const struct sym_frame **f, enum sym_source *src)
{
    struct module *mod;
    uint64_t off;
    if (!symtest_offset(m, site->addr - delta, &mod, &off)) {
        fprintf(stderr, "no module maps %s %s at %#llx\n", site->kind, site->tag,
                (unsigned long long)site->addr);
        symtest_failures++;
        return 0;
    }
    int n = symbolizer_lookup(s, mod, off, f, src);
    CHECK(n >= 1);
    return n;
}

/* A site in a function that is not inlined anywhere: exactly one frame with this function,
 * file basename (NULL: none expected) and the site's line, from src. */
static void expect_plain(struct symbolizer *s, const struct maps *m, const struct fixture *fx,
                         const char *tag, const char *function, const char *file,
                         enum sym_source want)
{
    int before = symtest_failures;
    const struct fx_site *site = fixture_site(fx, "site", tag, 0);
    const struct sym_frame *f;
    enum sym_source src = SYM_NONE;
    int n = lookup_site(s, m, site, 1, &f, &src);
    if (n < 1)
        return;
    CHECK_INT(n, 1);
    if (function)
        CHECK_STR(f[0].function, function);
    else
        CHECK(f[0].function == NULL);
    if (file) {
        CHECK_STR(symtest_base(f[0].file), file);
        CHECK_INT(f[0].line, site->line);
    } else {
        CHECK(f[0].file == NULL && f[0].line == 0);
    }
    CHECK(!f[0].inlined);
    CHECK_INT(src, want);
    if (symtest_failures != before)
        symtest_print_frames(tag, f, n);
}

/* A function's entry address: its name, and a line at or just before its first statement. */
static void expect_entry(struct symbolizer *s, const struct maps *m, const struct fixture *fx,
                         const char *tag, const char *function, const char *file)
{
    int before = symtest_failures;
    const struct fx_site *entry = fixture_site(fx, "func", tag, 0);
    const struct fx_site *site = fixture_site(fx, "site", tag, 0);
    const struct sym_frame *f;
    int n = lookup_site(s, m, entry, 0, &f, NULL);
    if (n < 1)
        return;
    CHECK_STR(f[n - 1].function, function);
    CHECK_STR(symtest_base(f[n - 1].file), file);
    CHECK(f[n - 1].line >= site->line - 3 && f[n - 1].line <= site->line);
    if (symtest_failures != before)
        symtest_print_frames(tag, f, n);
}

/* Read a fixture's maps; fails the test if it does not start. */
static bool start(struct fixture *fx, struct maps *m, const char *path)
{
    if (fixture_start(fx, path) < 0) {
        symtest_failures++;
        return false;
    }
    CHECK_INT(maps_read(fx->pid, true, NULL, m), 0);
    return true;
}

/* Stop a fixture and drop its maps. */
static void stop(struct fixture *fx, struct maps *m)
{
    maps_finish(m);
    fixture_stop(fx);
}

/* PIE or non-PIE executable and the shared library it loads. */
static void test_exec(const char *var, bool pie)
{
    struct fixture fx;
    struct maps m;
    if (!start(&fx, &m, fixture_path(var)))
        return;
    struct symbolizer *s = symbolizer_create();
    expect_plain(s, &m, &fx, "main_plain", "main_plain", "fix_main.c", SYM_DWARF);
    expect_plain(s, &m, &fx, "main_static", "main_static", "fix_main.c", SYM_DWARF);
    expect_plain(s, &m, &fx, "lib_exported", "lib_exported", "fixlib.c", SYM_DWARF);
    expect_plain(s, &m, &fx, "lib_static", "lib_static", "fixlib.c", SYM_DWARF);
    expect_entry(s, &m, &fx, "main_plain", "main_plain", "fix_main.c");
    expect_entry(s, &m, &fx, "lib_exported", "lib_exported", "fixlib.c");

    const struct map_entry *exe = maps_find(&m, fixture_site(&fx, "site", "main_plain", 0)->addr);
    const struct map_entry *lib = maps_find(&m, fixture_site(&fx, "site", "lib_exported", 0)->addr);
    CHECK(exe && exe->mod && lib && lib->mod);
    if (exe && exe->mod && lib && lib->mod) {
        CHECK_INT(exe->mod->e_type, pie ? 3 /* ET_DYN */ : 2 /* ET_EXEC */);
        /* The library sits far from its link-time addresses: resolved at its load bias. */
        CHECK(lib->start > lib->mod->loads[lib->mod->nloads - 1].vaddr + (1u << 20));
    }
    symbolizer_destroy(s);
    stop(&fx, &m);
}

/* always_inline functions: inlined frames above their callers, with call lines. */
static void test_inline(void)
{
    struct fixture fx;
    struct maps m;
    if (!start(&fx, &m, fixture_path("FIX_INLINE")))
        return;
    struct symbolizer *s = symbolizer_create();
    const struct sym_frame *f;
    enum sym_source src;
    int before = symtest_failures;

    /* inner inlined into middle, inlined into outer. */
    const struct fx_site *site = fixture_site(&fx, "site", "inner", 0);
    int n = lookup_site(s, &m, site, 1, &f, &src);
    CHECK_INT(n, 3);
    CHECK_INT(src, SYM_DWARF);
    if (n == 3) {
        CHECK_STR(f[0].function, "inner");
        CHECK(f[0].inlined);
        CHECK_INT(f[0].line, site->line);
        CHECK_STR(f[1].function, "middle");
        CHECK(f[1].inlined);
        CHECK_INT(f[1].line, fixture_site(&fx, "line", "middle_calls_inner", 0)->line);
        CHECK_STR(f[2].function, "outer");
        CHECK(!f[2].inlined);
        CHECK_INT(f[2].line, fixture_site(&fx, "line", "outer_calls_middle", 0)->line);
        for (int i = 0; i < 3; i++)
            CHECK_STR(symtest_base(f[i].file), "fix_inline.c");
    }
    if (symtest_failures != before)
        symtest_print_frames("inner in outer", f, n);

    /* inner inlined straight into outer1. */
    before = symtest_failures;
    site = fixture_site(&fx, "site", "inner", 1);
    n = lookup_site(s, &m, site, 1, &f, &src);
    CHECK_INT(n, 2);
    if (n == 2) {
        CHECK_STR(f[0].function, "inner");
        CHECK(f[0].inlined);
        CHECK_INT(f[0].line, site->line);
        CHECK_STR(f[1].function, "outer1");
        CHECK(!f[1].inlined);
        CHECK_INT(f[1].line, fixture_site(&fx, "line", "outer1_calls_inner", 0)->line);
        CHECK_STR(symtest_base(f[1].file), "fix_inline.c");
    }
    if (symtest_failures != before)
        symtest_print_frames("inner in outer1", f, n);
    symbolizer_destroy(s);
    stop(&fx, &m);
}

/* C++: namespaces, a class template's methods, overloads, an anonymous namespace. */
static void test_cpp(void)
{
    struct fixture fx;
    struct maps m;
    if (!start(&fx, &m, fixture_path("FIX_CPP")))
        return;
    struct symbolizer *s = symbolizer_create();
    expect_plain(s, &m, &fx, "method_int", "ns::Klass<int>::method(int)", "fix_cpp.cpp", SYM_DWARF);
    expect_plain(s, &m, &fx, "method_double", "ns::Klass<double>::method(double)", "fix_cpp.cpp",
                 SYM_DWARF);
    expect_plain(s, &m, &fx, "over_int", "ns::over(int)", "fix_cpp.cpp", SYM_DWARF);
    expect_plain(s, &m, &fx, "over_double", "ns::over(double)", "fix_cpp.cpp", SYM_DWARF);
    expect_plain(s, &m, &fx, "hidden", "ns::(anonymous namespace)::hidden(int)", "fix_cpp.cpp",
                 SYM_DWARF);

    /* An internal inline function (no linkage name: qualified from its scopes, without
     * parameters) inlined into a member function template of a class template. */
    int before = symtest_failures;
    const struct fx_site *site = fixture_site(&fx, "site", "helper", 0);
    const struct sym_frame *f;
    enum sym_source src;
    int n = lookup_site(s, &m, site, 1, &f, &src);
    CHECK_INT(n, 2);
    if (n == 2) {
        CHECK_STR(f[0].function, "ns::(anonymous namespace)::helper");
        CHECK(f[0].inlined);
        CHECK_INT(f[0].line, site->line);
        CHECK_STR(f[1].function, "long ns::Outer<char>::convert<long>(long)");
        CHECK_INT(f[1].line, fixture_site(&fx, "line", "convert_calls_helper", 0)->line);
        CHECK_STR(symtest_base(f[1].file), "fix_cpp.cpp");
    }
    if (symtest_failures != before)
        symtest_print_frames("helper", f, n);
    symbolizer_destroy(s);
    stop(&fx, &m);
}

/* Symbolize fix_dbg's site in the fixture at path with this debug path. */
static void expect_dbg(const char *path, const char *debug_path, enum sym_source want)
{
    struct fixture fx;
    struct maps m;
    if (!start(&fx, &m, path))
        return;
    struct symbolizer *s = symbolizer_create();
    symbolizer_set_debug_path(s, debug_path);
    if (want == SYM_DWARF)
        expect_plain(s, &m, &fx, "dbg_func", "dbg_func", "fix_dbg.c", SYM_DWARF);
    else
        expect_plain(s, &m, &fx, "dbg_func", "dbg_func", NULL, want);
    symbolizer_destroy(s);
    stop(&fx, &m);
    CHECK_INT(modules_count(), 0);
}

/* Stripped executables whose debug info is in a separate file: by build-id, by
 * .gnu_debuglink, and without it (.symtab only). */
static void test_debug_files(void)
{
    const char *debug = fixture_path("FIX_DBG_DEBUG");
    const char *stripped = fixture_path("FIX_DBG_STRIPPED");
    char *tmp = symtest_mkdtemp();

    /* <dir>/.build-id/xx/rest.debug */
    struct module *mod = module_open_path(stripped);
    CHECK(mod && mod->build_id_len > 1);
    char hex[2 * MODULE_MAX_BUILD_ID + 1] = "";
    if (mod)
        module_build_id_hex(mod, hex, sizeof(hex));
    module_unref(mod);
    char *dbga = xasprintf("%s/dbga", tmp);
    char *iddir = xasprintf("%s/.build-id/%.2s", dbga, hex);
    char *idfile = xasprintf("%s/%s.debug", iddir, hex + 2);
    CHECK_INT(symtest_mkdirs(iddir), 0);
    CHECK_INT(symtest_copy(debug, idfile, 0644), 0);
    expect_dbg(stripped, dbga, SYM_DWARF);
    /* Not found: names from .symtab, which --strip-debug keeps; no lines. */
    expect_dbg(stripped, "/nonexistent", SYM_SYMTAB);

    /* .gnu_debuglink "fix_dbg.debug", under <dir>/<the binary's directory>/ as distributions
     * lay it out (/usr/lib/debug/usr/bin/foo.debug). The build-id directory is not on this
     * path, so only the debuglink can find it. */
    char *bindir = xasprintf("%s/b/bin", tmp);
    char *linked = xasprintf("%s/fix_dbg_linked", bindir);
    char *dbgb = xasprintf("%s/dbgb", tmp);
    char *linkdir = xasprintf("%s%s", dbgb, bindir);
    char *linkfile = xasprintf("%s/fix_dbg.debug", linkdir);
    CHECK_INT(symtest_mkdirs(bindir), 0);
    CHECK_INT(symtest_mkdirs(linkdir), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_DBG_LINKED"), linked, 0755), 0);
    CHECK_INT(symtest_copy(debug, linkfile, 0644), 0);
    expect_dbg(linked, dbgb, SYM_DWARF);
    /* The default path's ".debug" entry: <binary's dir>/.debug/fix_dbg.debug. */
    char *dotdebug = xasprintf("%s/.debug", bindir);
    char *dotfile = xasprintf("%s/fix_dbg.debug", dotdebug);
    CHECK_INT(symtest_mkdirs(dotdebug), 0);
    CHECK_INT(rename(linkfile, dotfile), 0);
    expect_dbg(linked, ":.debug:/nonexistent", SYM_DWARF);

    symtest_rmtree(tmp);
    free(tmp);
    free(dbga);
    free(iddir);
    free(idfile);
    free(bindir);
    free(linked);
    free(dbgb);
    free(linkdir);
    free(linkfile);
    free(dotdebug);
    free(dotfile);
}

/* Fully stripped -rdynamic executable: exported names from .dynsym, static ones unknown, but
 * for the evaluation loop's split part. */
static void test_dynsym(void)
{
    struct fixture fx;
    struct maps m;
    if (!start(&fx, &m, fixture_path("FIX_NODBG_STRIPPED")))
        return;
    struct symbolizer *s = symbolizer_create();
    expect_plain(s, &m, &fx, "nodbg_global", "nodbg_global", NULL, SYM_DYNSYM);
    expect_plain(s, &m, &fx, "nodbg_static", NULL, NULL, SYM_NONE);
    /* The part GCC split off the evaluation loop, which its symbol jumps to: named after it
     * (Python's frames go in its place); a cold function it calls is no such part. */
    expect_plain(s, &m, &fx, "eval_cold", "_PyEval_EvalFrameDefault", NULL, SYM_DYNSYM);
    expect_plain(s, &m, &fx, "eval_cold_work", NULL, NULL, SYM_NONE);
    symbolizer_destroy(s);
    stop(&fx, &m);
}

/* One cache for all processes mapping the same file; trim releases what no target maps. */
static void test_cache_and_trim(void)
{
    struct fixture a, b;
    struct maps ma, mb;
    if (!start(&a, &ma, fixture_path("FIX_INLINE")) || !start(&b, &mb, fixture_path("FIX_INLINE")))
        return;
    struct symbolizer *s = symbolizer_create();
    struct symbolizer_stats st0, st1, st2;
    symbolizer_get_stats(s, &st0);
    CHECK(st0.lookups == 0 && st0.hits == 0 && st0.modules == 0);
    const struct sym_frame *fa, *fb;
    enum sym_source src;
    int na = lookup_site(s, &ma, fixture_site(&a, "site", "inner", 0), 1, &fa, &src);
    symbolizer_get_stats(s, &st1);
    int nb = lookup_site(s, &mb, fixture_site(&b, "site", "inner", 0), 1, &fb, &src);
    symbolizer_get_stats(s, &st2);
    CHECK(na == 3 && nb == 3 && fa == fb);
    CHECK(st1.lookups == 1 && st1.hits == 0 && st1.modules == 1);
    CHECK(st2.lookups == 2 && st2.hits == 1 && st2.modules == 1);

    /* Offsets outside the file's segments, and bad arguments. */
    struct module *mod;
    uint64_t off;
    CHECK(symtest_offset(&ma, fixture_site(&a, "site", "inner", 0)->addr, &mod, &off));
    const struct sym_frame *f;
    CHECK_INT(symbolizer_lookup(s, mod, 1ull << 40, &f, &src), 1);
    CHECK(f[0].function == NULL && f[0].file == NULL && src == SYM_NONE);
    CHECK_INT(symbolizer_lookup(s, NULL, 0, &f, &src), -EINVAL);
    CHECK_INT(symbolizer_lookup(s, mod, 0, NULL, &src), -EINVAL);

    /* While the targets' maps hold the module, trim keeps it. */
    symbolizer_trim(s);
    symbolizer_get_stats(s, &st1);
    CHECK_INT(st1.modules, 1);
    stop(&a, &ma);
    stop(&b, &mb);
    CHECK_INT(modules_count(), 1); /* the symbolizer's own reference */
    symbolizer_trim(s);
    symbolizer_get_stats(s, &st1);
    CHECK_INT(st1.modules, 0);
    CHECK_INT(modules_count(), 0);
    symbolizer_destroy(s);
}

/* Thread start routine: the return address is in libc's start_thread. */
__attribute__((noipa)) static void *thread_ret(void *arg)
{
    (void)arg;
    return __builtin_return_address(0);
}

/* libc: start_thread is named right (needs libc's debug file; checked only when found),
 * and what a cold and a warm lookup cost. */
static void test_libc_and_costs(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL);
    if (!libc)
        return;
    static const char *names[] = {
        "malloc", "free",     "printf", "qsort",        "strtol",      "fopen",   "getenv",
        "open",   "read",     "write",  "opendir",      "strftime",    "regcomp", "setlocale",
        "fork",   "system",   "dlopen", "pthread_join", "getaddrinfo", "fclose",  "puts",
        "strdup", "realpath", "mktime", "localtime_r",  "sigaction",   "execvp",  "syslog",
    };
    enum { N = sizeof(names) / sizeof(names[0]) };
    struct maps m;
    CHECK_INT(maps_read(getpid(), true, NULL, &m), 0);
    struct module *mods[N];
    uint64_t offs[N];
    int ok = 0;
    for (int i = 0; i < N; i++) {
        void *p = dlsym(libc, names[i]);
        if (p && symtest_offset(&m, (uint64_t)(uintptr_t)p, &mods[ok], &offs[ok]))
            ok++;
    }
    CHECK(ok > N / 2);

    struct symbolizer *s = symbolizer_create();
    const struct sym_frame *f;
    enum sym_source src;
    uint64_t t0 = now_ns();
    int n = symbolizer_lookup(s, mods[0], offs[0], &f, &src);
    uint64_t t1 = now_ns();
    CHECK(n >= 1 && f[n - 1].function != NULL);
    const char *srcname[] = {"DWARF", "symtab", "dynsym", "none"};
    printf("libc %s: first lookup (opens the module, its debug info) %.1f ms: %s [%s]\n",
           mods[0]->name, (double)(t1 - t0) / 1e6, f[n - 1].function ? f[n - 1].function : "?",
           srcname[src]);
    for (int i = 1; i < ok; i++)
        CHECK(symbolizer_lookup(s, mods[i], offs[i], &f, &src) >= 1);
    uint64_t t2 = now_ns();
    printf("libc: %d more first lookups, %.1f us each\n", ok - 1,
           (double)(t2 - t1) / 1e3 / (ok - 1));
    enum { ROUNDS = 20000 };
    uint64_t t3 = now_ns();
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < ok; i++)
            symbolizer_lookup(s, mods[i], offs[i], &f, &src);
    uint64_t t4 = now_ns();
    printf("warm (cached) lookup: %.1f ns each\n", (double)(t4 - t3) / ROUNDS / ok);
    struct symbolizer_stats st;
    symbolizer_get_stats(s, &st);
    CHECK_INT(st.hits, (uint64_t)ROUNDS * ok);

    /* start_thread, as the design notes say libdwfl names it. */
    pthread_t t;
    void *ret = NULL;
    pthread_create(&t, NULL, thread_ret, NULL);
    pthread_join(t, &ret);
    struct module *mod;
    uint64_t off;
    if (ret && symtest_offset(&m, (uint64_t)(uintptr_t)ret - 1, &mod, &off)) {
        n = symbolizer_lookup(s, mod, off, &f, &src);
        printf("thread return address: %s %s at %s:%d [%s]\n", mod->name,
               f[n - 1].function ? f[n - 1].function : "??",
               f[n - 1].file ? symtest_base(f[n - 1].file) : "??", f[n - 1].line, srcname[src]);
        /* Under ASan the thread starts in the sanitizer's runtime, not libc. */
        if (!strcmp(mod->name, "libc.so.6") && src == SYM_DWARF) {
            CHECK_STR(f[n - 1].function, "start_thread");
            CHECK_STR(symtest_base(f[n - 1].file), "pthread_create.c");
        }
    }
    symbolizer_destroy(s);
    maps_finish(&m);
    dlclose(libc);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fds = symtest_count_fds();
    test_exec("FIX_PIE", true);
    test_exec("FIX_NOPIE", false);
    test_inline();
    test_cpp();
    test_debug_files();
    test_dynsym();
    test_cache_and_trim();
    CHECK_INT(modules_count(), 0);
    test_libc_and_costs();
    CHECK_INT(modules_count(), 0);
    modules_shutdown(); /* the helper that read ELF headers: its socket */
    CHECK_INT(symtest_count_fds(), fds);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
