/* test_maps.c: /proc/PID/maps parsing edge cases, lookups, and module opening on re-read. */
#include "maps.h"
#include "modules.h"
#include "symtest.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Parse hand-written maps text: spaces in paths, "(deleted)", anonymous and special
 * mappings, out-of-order lines. */
static void test_parse(void)
{
    static const char text[] =
        "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n"
        "00651000-00652000 r--p 00051000 08:02 173521      /usr/bin/dbus-daemon\n"
        "00e03000-00e24000 rw-p 00000000 00:00 0                                  [heap]\n"
        "7f0c1a000000-7f0c1a021000 rw-p 00000000 00:00 0 \n"
        "7f0c1a200000-7f0c1a201000 r-xp 00002000 fd:01 1234   /opt/my app/lib with  spaces.so\n"
        "7f0c1a201000-7f0c1a202000 r-xp 00001000 fd:01 1235   /tmp/gone (deleted)\n"
        "7f0c1a300000-7f0c1a301000 rw-s 00000000 00:01 99     /dev/zero (deleted)\n"
        "7f0c1a400000-7f0c1a401000 r--p 00000000 00:00 0      [anon:my name]\n"
        "7f0c1a100000-7f0c1a101000 ---p 00000000 00:00 0\n"
        "7ffd0e3a4000-7ffd0e3c5000 rw-p 00000000 00:00 0                          [stack]\n"
        "7ffd0e3f1000-7ffd0e3f3000 r-xp 00000000 00:00 0                          [vdso]\n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]";
    struct maps m;
    CHECK_INT(maps_parse(text, &m), 0);
    CHECK_INT(m.n, 12);
    if (m.n != 12) {
        maps_finish(&m);
        return;
    }
    for (size_t i = 1; i < m.n; i++)
        CHECK(m.v[i - 1].end <= m.v[i].start);

    const struct map_entry *e = &m.v[0];
    CHECK(e->start == 0x400000 && e->end == 0x452000 && e->pgoff == 0);
    CHECK_INT(e->prot, MAP_PROT_R | MAP_PROT_X);
    CHECK(e->dev_major == 8 && e->dev_minor == 2 && e->inode == 173521);
    CHECK_STR(e->path, "/usr/bin/dbus-daemon");
    CHECK(e->mod == NULL);
    CHECK(m.v[1].pgoff == 0x51000 && m.v[1].prot == MAP_PROT_R);
    CHECK_STR(m.v[2].path, "[heap]");
    CHECK_INT(m.v[2].prot, MAP_PROT_R | MAP_PROT_W);
    CHECK(m.v[3].path == NULL && m.v[3].inode == 0); /* anonymous, trailing space */
    CHECK(m.v[4].path == NULL && m.v[4].prot == 0);  /* out of order, no trailing space */
    CHECK(m.v[4].start == 0x7f0c1a100000);
    CHECK_STR(m.v[5].path, "/opt/my app/lib with  spaces.so");
    CHECK(m.v[5].dev_major == 0xfd && m.v[5].dev_minor == 1 && m.v[5].pgoff == 0x2000);
    CHECK_STR(m.v[6].path, "/tmp/gone (deleted)");
    CHECK_STR(m.v[7].path, "/dev/zero (deleted)");
    CHECK_INT(m.v[7].prot, MAP_PROT_R | MAP_PROT_W);
    CHECK_STR(m.v[8].path, "[anon:my name]");
    CHECK_STR(m.v[9].path, "[stack]");
    CHECK_STR(m.v[10].path, "[vdso]");
    CHECK_STR(m.v[11].path, "[vsyscall]");
    CHECK(m.v[11].end == 0xffffffffff601000ull && m.v[11].prot == MAP_PROT_X);

    /* Binary search: first and last byte in, end out, gaps and outside out. */
    CHECK(maps_find(&m, 0x400000) == &m.v[0]);
    CHECK(maps_find(&m, 0x451fff) == &m.v[0]);
    CHECK(maps_find(&m, 0x452000) == NULL);
    CHECK(maps_find(&m, 0x3fffff) == NULL);
    CHECK(maps_find(&m, 0) == NULL);
    CHECK(maps_find(&m, 0x7f0c1a200fff) == &m.v[5]);
    CHECK(maps_find(&m, 0x7f0c1a201000) == &m.v[6]);
    CHECK(maps_find(&m, 0xffffffffff600123ull) == &m.v[11]);
    CHECK(maps_find(&m, UINT64_MAX) == NULL);
    maps_finish(&m);
    CHECK(m.n == 0 && m.v == NULL);

    /* Empty text, and malformed lines. */
    CHECK_INT(maps_parse("", &m), 0);
    CHECK_INT(m.n, 0);
    CHECK(maps_find(&m, 0x1000) == NULL);
    maps_finish(&m);
    static const char *bad[] = {
        "garbage\n",
        "1000-0fff r-xp 00000000 00:00 0\n",    /* start >= end */
        "1000-2000 rwzp 00000000 00:00 0\n",    /* bad permission */
        "1000-2000 r-xq 00000000 00:00 0\n",    /* neither private nor shared */
        "1000-2000 r-xp 00000000 0000 0\n",     /* no minor */
        "1000-2000 r-xp 00000000 00:00 x /a\n", /* inode not decimal */
        "1000-2000 r-xp 0 00:00 0 /a\n1800-3000 r-xp 0 00:00 0 /b\n", /* overlap */
        "1000-2000 r-xp 00000000 00:00 0 /a\nbad line\n",             /* bad second line */
        "11111111111111111-2000 r-xp 0 00:00 0\n",                    /* too many digits */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m.n = 99;
        if (maps_parse(bad[i], &m) != -EINVAL) {
            fprintf(stderr, "accepted bad maps text %zu: %s", i, bad[i]);
            symtest_failures++;
            maps_finish(&m);
        } else {
            CHECK(m.n == 0 && m.v == NULL);
        }
    }
}

/* The entry whose path is exactly path and which has at least the permissions prot (and
 * not execute, with no_x), or NULL. */
static const struct map_entry *by_path(const struct maps *m, const char *path, uint32_t prot,
                                       bool no_x)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].path && !strcmp(m->v[i].path, path) && (m->v[i].prot & prot) == prot &&
            !(no_x && (m->v[i].prot & MAP_PROT_X)))
            return &m->v[i];
    return NULL;
}

/* Read our own maps with modules: a library whose path has spaces, a deleted one, a data
 * file (no module), a non-ELF executable mapping (ENOEXEC), [vdso] (its image as a module);
 * then re-read with prev and check every module is reused, not reopened. */
static void test_read_self(void)
{
    int fds = symtest_count_fds();
    size_t mods = modules_count();
    char *tmp = symtest_mkdtemp();
    char *dir = xasprintf("%s/dir with spaces", tmp);
    char *spaced = xasprintf("%s/lib fix.so", dir);
    char *gone = xasprintf("%s/gone.so", tmp);
    char *gone_deleted = xasprintf("%s (deleted)", gone);
    char *data = xasprintf("%s/data.txt", tmp);
    char *code = xasprintf("%s/code.bin", tmp);
    CHECK_INT(symtest_mkdirs(dir), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_LIB"), spaced, 0755), 0);
    CHECK_INT(symtest_copy(fixture_path("FIX_LIB_B"), gone, 0755), 0);
    void *h1 = dlopen(spaced, RTLD_NOW | RTLD_LOCAL);
    void *h2 = dlopen(gone, RTLD_NOW | RTLD_LOCAL);
    CHECK(h1 && h2);
    unlink(gone);

    /* A data file mapped read-only, and another non-ELF file mapped executable. */
    char page[4096];
    memset(page, 'x', sizeof(page));
    void *maps[2];
    for (int i = 0; i < 2; i++) {
        int fd = open(i ? code : data, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        CHECK(write(fd, page, sizeof(page)) == (ssize_t)sizeof(page));
        maps[i] = mmap(NULL, 4096, i ? PROT_READ | PROT_EXEC : PROT_READ, MAP_PRIVATE, fd, 0);
        CHECK(maps[i] != MAP_FAILED);
        close(fd);
    }

    struct maps m, m2, bare;
    uint64_t t0 = now_ns();
    CHECK_INT(maps_read(getpid(), true, NULL, &m), 0);
    uint64_t t1 = now_ns();
    CHECK(m.n > 10);

    const struct map_entry *e = by_path(&m, spaced, MAP_PROT_X, false);
    CHECK(e && e->mod);
    if (e && e->mod) {
        CHECK_STR(e->mod->path, spaced);
        CHECK_STR(e->mod->name, "lib fix.so");
        CHECK(!e->mod->deleted);
        CHECK_INT(e->mod->e_type, 3 /* ET_DYN */);
        /* Its read-only and data mappings share the module. */
        int same = 0;
        for (size_t i = 0; i < m.n; i++)
            if (m.v[i].path && !strcmp(m.v[i].path, spaced))
                same += m.v[i].mod == e->mod;
        CHECK(same >= 3);
    }
    e = by_path(&m, gone_deleted, MAP_PROT_X, false);
    CHECK(e && e->mod);
    if (e && e->mod) {
        CHECK_STR(e->mod->path, gone);
        CHECK(e->mod->deleted);
    }
    e = by_path(&m, data, MAP_PROT_R, true);
    CHECK(e && !(e->prot & MAP_PROT_X) && e->mod == NULL && e->mod_err == 0);
    e = by_path(&m, code, MAP_PROT_X, false);
    CHECK(e && e->mod == NULL && e->mod_err == ENOEXEC);
    e = by_path(&m, "[vdso]", MAP_PROT_X, false); /* none under valgrind */
    CHECK(!e || (e->mod && !strcmp(e->mod->path, "[vdso]") && e->mod_err == 0));
    CHECK(by_path(&m, "[stack]", 0, false) != NULL);
    e = maps_find(&m, (uint64_t)(uintptr_t)&test_read_self);
    CHECK(e && e->mod && e->mod->e_type > 0);
    e = maps_find(&m, (uint64_t)(uintptr_t)&dlopen);
    CHECK(e && e->mod);
    size_t after_first = modules_count();
    CHECK(after_first > mods);

    /* Re-read with prev: the same modules, none opened again. */
    uint64_t t2 = now_ns();
    CHECK_INT(maps_read(getpid(), true, &m, &m2), 0);
    uint64_t t3 = now_ns();
    CHECK_INT(modules_count(), after_first);
    int reused = 0, files = 0;
    for (size_t i = 0; i < m2.n; i++) {
        if (!m2.v[i].mod && !m2.v[i].mod_err)
            continue;
        files++;
        const struct map_entry *o = maps_find(&m, m2.v[i].start);
        if (o && o->start == m2.v[i].start && o->mod == m2.v[i].mod &&
            o->mod_err == m2.v[i].mod_err)
            reused++;
    }
    CHECK(files > 0);
    CHECK_INT(reused, files);
    printf("maps_read(self, %zu entries): %.0f us first, %.0f us re-read with prev\n", m.n,
           (double)(t1 - t0) / 1e3, (double)(t3 - t2) / 1e3);

    /* Without open_modules nothing is opened. */
    CHECK_INT(maps_read(getpid(), false, NULL, &bare), 0);
    for (size_t i = 0; i < bare.n; i++)
        CHECK(bare.v[i].mod == NULL && bare.v[i].mod_err == 0);
    maps_finish(&bare);

    maps_finish(&m);
    maps_finish(&m2);
    CHECK_INT(modules_count(), mods);
    munmap(maps[0], 4096);
    munmap(maps[1], 4096);
    dlclose(h1);
    dlclose(h2);
    symtest_rmtree(tmp);
    modules_shutdown(); /* the helper that read ELF headers: its socket */
    CHECK_INT(symtest_count_fds(), fds);
    free(tmp);
    free(dir);
    free(spaced);
    free(gone);
    free(gone_deleted);
    free(data);
    free(code);
}

/* A process that is gone reads as -ESRCH. */
static void test_gone(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    struct maps m;
    CHECK_INT(maps_read(pid, true, NULL, &m), -ESRCH);
    CHECK(m.n == 0);
}

/* Modules of a fixture process (another process than ours). */
static void test_read_fixture(void)
{
    struct fixture fx;
    if (fixture_start(&fx, fixture_path("FIX_PIE")) < 0) {
        symtest_failures++;
        return;
    }
    struct maps m;
    CHECK_INT(maps_read(fx.pid, true, NULL, &m), 0);
    const struct fx_site *s = fixture_site(&fx, "site", "main_plain", 0);
    const struct map_entry *e = maps_find(&m, s->addr - 1);
    CHECK(e && e->mod && (e->prot & MAP_PROT_X));
    if (e && e->mod)
        CHECK_STR(e->mod->name, "fix_pie");
    s = fixture_site(&fx, "site", "lib_exported", 0);
    e = maps_find(&m, s->addr - 1);
    CHECK(e && e->mod);
    if (e && e->mod)
        CHECK_STR(e->mod->name, "libfixlib.so");
    maps_finish(&m);
    fixture_stop(&fx);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t mods = modules_count();
    test_parse();
    test_read_self();
    test_gone();
    test_read_fixture();
    CHECK_INT(modules_count(), mods);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
