/* test_modules.c: the module registry: ELF headers, dedup by build-id across processes,
 * deleted and replaced binaries (through map_files, and the path fallback's build-id check),
 * refcounts under threads, no leaked modules or descriptors. */
#include "maps.h"
#include "modules.h"
#include "symbols.h"
#include "symtest.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

/* Build-id of a file as readelf prints it, or "" if readelf is missing. */
static void readelf_build_id(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    char *cmd = xasprintf("readelf -n '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p)
        return;
    char line[512];
    while (fgets(line, sizeof(line), p)) {
        const char *b = strstr(line, "Build ID: ");
        if (b) {
            snprintf(out, size, "%s", b + strlen("Build ID: "));
            out[strcspn(out, "\n")] = '\0';
        }
    }
    pclose(p);
}

/* Hex build-id of the file at path, opened on its own. */
static void build_id_of(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    struct module *m = module_open_path(path);
    CHECK(m != NULL);
    if (m)
        module_build_id_hex(m, out, size);
    module_unref(m);
}

/* module_open_path: headers, build-id, offsets, dedup of a second open, errors. */
static void test_open_path(void)
{
    const char *path = fixture_path("FIX_INLINE");
    struct module *m = module_open_path(path);
    CHECK(m != NULL);
    if (!m)
        return;
    CHECK_STR(m->path, path);
    CHECK_STR(m->name, "fix_inline");
    CHECK_INT(m->e_type, 3 /* ET_DYN */);
    CHECK_INT(m->build_id_len, 20);
    CHECK(m->fd >= 0 && !m->deleted && m->sym == NULL);
    char hex[2 * MODULE_MAX_BUILD_ID + 1], want[256];
    module_build_id_hex(m, hex, sizeof(hex));
    CHECK_INT(strlen(hex), 40);
    readelf_build_id(path, want, sizeof(want));
    if (want[0])
        CHECK_STR(hex, want);
    char tiny[8];
    module_build_id_hex(m, tiny, sizeof(tiny));
    CHECK_STR(tiny, "");

    int exec_loads = 0;
    for (int i = 0; i < m->nloads; i++) {
        const struct module_load *l = &m->loads[i];
        uint64_t v;
        exec_loads += !!(l->flags & 1 /* PF_X */);
        CHECK(module_offset_to_vaddr(m, l->offset, &v) && v == l->vaddr);
        if (l->filesz > 1)
            CHECK(module_offset_to_vaddr(m, l->offset + l->filesz - 1, &v) &&
                  v == l->vaddr + l->filesz - 1);
    }
    CHECK(m->nloads >= 2);
    CHECK_INT(exec_loads, 1);
    uint64_t v;
    CHECK(!module_offset_to_vaddr(m, 1ull << 40, &v));

    struct module *again = module_open_path(path);
    CHECK(again == m);
    CHECK_INT(m->refs, 2);
    CHECK_INT(modules_count(), 1);
    module_unref(again);
    module_unref(m);
    CHECK_INT(modules_count(), 0);

    /* Non-ELF, missing, and directories. */
    char *tmp = symtest_mkdtemp();
    char *txt = xasprintf("%s/not-elf", tmp);
    FILE *f = fopen(txt, "w");
    fputs("#!/bin/sh\necho not an ELF file\n", f);
    fclose(f);
    errno = 0;
    CHECK(module_open_path(txt) == NULL && errno == ENOEXEC);
    errno = 0;
    CHECK(module_open_path("/nonexistent/profd") == NULL && errno == ENOENT);
    errno = 0;
    CHECK(module_open_path(tmp) == NULL && errno == ENOEXEC);
    errno = 0;
    CHECK(module_get(getpid(), 0x1000, 0x2000, "[heap]", 0) == NULL && errno == EINVAL);
    CHECK_INT(modules_count(), 0);
    symtest_rmtree(tmp);
    free(txt);
    free(tmp);
}

/* The module mapping a fixture's code, from maps read with modules. */
static const struct map_entry *exe_entry(const struct maps *m, const struct fixture *fx)
{
    const struct fx_site *s = fixture_site(fx, "site", "inner", 0);
    return maps_find(m, s->addr - 1);
}

/* The outermost function of fix_inline's first "inner" site, symbolized through maps m. */
static void check_symbolized(const struct maps *m, const struct fixture *fx)
{
    struct symbolizer *s = symbolizer_create();
    const struct fx_site *site = fixture_site(fx, "site", "inner", 0);
    struct module *mod;
    uint64_t off;
    CHECK(symtest_offset(m, site->addr - 1, &mod, &off));
    const struct sym_frame *f;
    enum sym_source src;
    int n = mod ? symbolizer_lookup(s, mod, off, &f, &src) : 0;
    CHECK_INT(n, 3);
    if (n == 3) {
        CHECK_STR(f[0].function, "inner");
        CHECK_INT(f[0].line, site->line);
        CHECK_STR(f[2].function, "outer");
        CHECK_STR(symtest_base(f[2].file), "fix_inline.c");
    } else if (n > 0) {
        symtest_print_frames("inner", f, n);
    }
    symbolizer_destroy(s);
}

/* Two processes of one binary share one module; a third from a copy of the same file too
 * (same build-id). */
static void test_dedup(void)
{
    const char *path = fixture_path("FIX_INLINE");
    struct fixture a, b;
    if (fixture_start(&a, path) < 0 || fixture_start(&b, path) < 0) {
        symtest_failures++;
        return;
    }
    struct maps ma, mb;
    CHECK_INT(maps_read(a.pid, true, NULL, &ma), 0);
    size_t n1 = modules_count();
    CHECK_INT(maps_read(b.pid, true, NULL, &mb), 0);
    CHECK_INT(modules_count(), n1);
    const struct map_entry *ea = exe_entry(&ma, &a), *eb = exe_entry(&mb, &b);
    CHECK(ea && eb && ea->mod && ea->mod == eb->mod);
    if (ea && ea->mod)
        CHECK_STR(ea->mod->path, path);
    /* Every module of b is one of a's (same executable, same libraries). */
    for (size_t i = 0; i < mb.n; i++) {
        if (!mb.v[i].mod)
            continue;
        bool found = false;
        for (size_t j = 0; j < ma.n && !found; j++)
            found = ma.v[j].mod == mb.v[i].mod;
        CHECK(found);
    }
    maps_finish(&ma);
    maps_finish(&mb);
    CHECK_INT(modules_count(), 0);
    fixture_stop(&a);
    fixture_stop(&b);
}

/* Run a copy of fix_inline, delete it (and, with replace, put another binary at its path),
 * and check the process is still symbolized from the file it maps. */
static void test_deleted(bool replace)
{
    char inline_id[256], cpp_id[256];
    build_id_of(fixture_path("FIX_INLINE"), inline_id, sizeof(inline_id));
    build_id_of(fixture_path("FIX_CPP"), cpp_id, sizeof(cpp_id));
    CHECK(strcmp(inline_id, cpp_id) != 0);
    CHECK_INT(modules_count(), 0);

    char *tmp = symtest_mkdtemp();
    char *exe = xasprintf("%s/fixture", tmp);
    char *next = xasprintf("%s/fixture.new", tmp);
    char *deleted = xasprintf("%s (deleted)", exe);
    CHECK_INT(symtest_copy(fixture_path("FIX_INLINE"), exe, 0755), 0);
    struct fixture fx;
    if (fixture_start(&fx, exe) < 0) {
        symtest_failures++;
        goto out;
    }
    if (replace) {
        /* What a package upgrade does: write the new file aside, rename it over. */
        CHECK_INT(symtest_copy(fixture_path("FIX_CPP"), next, 0755), 0);
        CHECK_INT(rename(next, exe), 0);
    } else {
        CHECK_INT(unlink(exe), 0);
    }
    struct maps m;
    CHECK_INT(maps_read(fx.pid, true, NULL, &m), 0);
    const struct map_entry *e = exe_entry(&m, &fx);
    CHECK(e && e->mod);
    if (e && e->mod) {
        CHECK_STR(e->path, deleted);
        CHECK_STR(e->mod->path, exe);
        CHECK(e->mod->deleted);
        char hex[2 * MODULE_MAX_BUILD_ID + 1];
        module_build_id_hex(e->mod, hex, sizeof(hex));
        CHECK_STR(hex, inline_id);
        check_symbolized(&m, &fx);
    }
    if (replace) {
        /* Opening the path (what a tool without map_files would do) gives the other file. */
        struct module *other = module_open_path(exe);
        CHECK(other && e && other != e->mod);
        if (other) {
            char hex[2 * MODULE_MAX_BUILD_ID + 1];
            module_build_id_hex(other, hex, sizeof(hex));
            CHECK_STR(hex, cpp_id);
        }
        module_unref(other);
    }
    maps_finish(&m);
    fixture_stop(&fx);
    CHECK_INT(modules_count(), 0);
out:
    symtest_rmtree(tmp);
    free(tmp);
    free(exe);
    free(next);
    free(deleted);
}

/* As an unprivileged user, map_files cannot be opened and module_get falls back to
 * /proc/PID/root/PATH: the file there is used only if its build-id is the one mapped in the
 * process. Runs in a child that drops to nobody; returns its failure count. */
static int fallback_child(const char *dir, const char *inline_id)
{
    if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0) {
        perror("setuid(nobody)");
        return 1;
    }
    /* The parent copied the fixtures here (the build tree may be closed to nobody). */
    char *ok = xasprintf("%s/ok", dir), *rep = xasprintf("%s/rep", dir);
    char *rep_new = xasprintf("%s/rep.new", dir), *rep_del = xasprintf("%s (deleted)", rep);
    struct fixture a, b;
    if (fixture_start(&a, ok) < 0 || fixture_start(&b, rep) < 0)
        return symtest_failures + 1;
    CHECK_INT(rename(rep_new, rep), 0);

    struct maps ma, mb;
    CHECK_INT(maps_read(a.pid, false, NULL, &ma), 0);
    CHECK_INT(maps_read(b.pid, false, NULL, &mb), 0);
    const struct map_entry *ea = exe_entry(&ma, &a), *eb = exe_entry(&mb, &b);
    CHECK(ea && eb);
    if (ea && eb) {
        char mf[128];
        snprintf(mf, sizeof(mf), "/proc/%d/map_files/%llx-%llx", a.pid,
                 (unsigned long long)ea->start, (unsigned long long)ea->end);
        int fd = open(mf, O_RDONLY);
        if (fd >= 0) {
            /* Then the fallback is not what runs here; the rest still must hold. */
            printf("note: map_files readable without privileges here\n");
            close(fd);
        } else {
            printf("as nobody, map_files: %s: checking the path fallback\n", strerror(errno));
        }
        /* Intact file: the build-id in memory matches, so the path is used. */
        errno = 0;
        struct module *m = module_get(a.pid, ea->start, ea->end, ea->path, ea->inode);
        CHECK(m != NULL);
        if (m) {
            char hex[2 * MODULE_MAX_BUILD_ID + 1];
            module_build_id_hex(m, hex, sizeof(hex));
            CHECK_STR(hex, inline_id);
            CHECK(!m->deleted);
            module_unref(m);
        }
        /* Replaced file: refused, whether or not maps says "(deleted)". */
        CHECK_STR(eb->path, rep_del);
        errno = 0;
        m = module_get(b.pid, eb->start, eb->end, eb->path, eb->inode);
        if (fd < 0)
            CHECK(m == NULL && errno == ESTALE);
        module_unref(m);
        errno = 0;
        m = module_get(b.pid, eb->start, eb->end, rep, eb->inode);
        if (fd < 0)
            CHECK(m == NULL && errno == ESTALE);
        module_unref(m);
        /* A symbolic link where the mapped file was: not followed (it could lead anywhere,
         * a file only root may read among others), even to the very file. */
        char *lnk = xasprintf("%s/lnk", dir);
        CHECK_INT(symlink(ok, lnk), 0);
        errno = 0;
        m = module_get(a.pid, ea->start, ea->end, lnk, ea->inode);
        if (fd < 0)
            CHECK(m == NULL && errno == ESTALE);
        module_unref(m);
        free(lnk);
    }
    maps_finish(&ma);
    maps_finish(&mb);
    fixture_stop(&a);
    fixture_stop(&b);
    CHECK_INT(modules_count(), 0);
    free(ok);
    free(rep);
    free(rep_new);
    free(rep_del);
    return symtest_failures;
}

/* Run fallback_child in a child process as nobody. */
static void test_path_fallback(void)
{
    if (geteuid() != 0) {
        printf("skip path fallback: needs root to switch to nobody\n");
        return;
    }
    char inline_id[256];
    build_id_of(fixture_path("FIX_INLINE"), inline_id, sizeof(inline_id));
    char *tmp = symtest_mkdtemp();
    char *dir = xasprintf("%s/nobody", tmp);
    char *ok = xasprintf("%s/ok", dir), *rep = xasprintf("%s/rep", dir);
    char *rep_new = xasprintf("%s/rep.new", dir);
    CHECK_INT(symtest_mkdirs(dir), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_INLINE"), ok, 0755), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_INLINE"), rep, 0755), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_CPP"), rep_new, 0755), 0);
    CHECK_INT(chown(dir, NOBODY, NOBODY), 0);
    free(ok);
    free(rep);
    free(rep_new);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int r = fallback_child(dir, inline_id);
        free(dir);
        free(tmp);
        fflush(NULL);
        _exit(r > 100 ? 100 : r);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    symtest_rmtree(tmp);
    free(dir);
    free(tmp);
}

/* Thread body: open and drop the same files over and over. */
static void *churn(void *arg)
{
    const char **paths = arg;
    for (int i = 0; i < 200; i++) {
        struct module *a = module_open_path(paths[i % 3]);
        struct module *b = module_open_path(paths[(i + 1) % 3]);
        CHECK(a && b && a != b);
        module_ref(a);
        module_unref(a);
        module_unref(a);
        module_unref(b);
    }
    return NULL;
}

/* The registry under concurrent opens and unrefs: no crash, nothing left. */
static void test_threads(void)
{
    const char *paths[] = {fixture_path("FIX_INLINE"), fixture_path("FIX_CPP"),
                           fixture_path("FIX_PIE")};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, paths);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK_INT(modules_count(), 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fds = symtest_count_fds();
    test_open_path();
    test_dedup();
    test_deleted(false);
    test_deleted(true);
    test_path_fallback();
    test_threads();
    CHECK_INT(modules_count(), 0);
    modules_shutdown(); /* the helper that read ELF headers: its socket */
    CHECK_INT(symtest_count_fds(), fds);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
