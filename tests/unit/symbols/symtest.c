/* symtest.c: helpers for the symbolizer tests: fixture processes, offsets, temp files. */
#include "symtest.h"

#include "maps.h"
#include "modules.h"
#include "symbols.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int symtest_failures;

/* Start a fixture and read what it printed up to "ready". */
int fixture_start(struct fixture *fx, const char *path)
{
    memset(fx, 0, sizeof(*fx));
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        execl(path, path, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    fx->pid = pid;
    char buf[8192];
    size_t len = 0;
    for (;;) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        if (poll(&pfd, 1, 20000) <= 0) {
            fprintf(stderr, "%s: no \"ready\" within 20 s\n", path);
            break;
        }
        ssize_t r = read(p[0], buf + len, sizeof(buf) - 1 - len);
        if (r <= 0) {
            fprintf(stderr, "%s: exited before \"ready\"\n", path);
            break;
        }
        len += (size_t)r;
        buf[len] = '\0';
        if (strstr(buf, "ready\n")) {
            close(p[0]);
            for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                struct fx_site *s = &fx->sites[fx->n];
                unsigned long long addr;
                if (fx->n < (int)(sizeof(fx->sites) / sizeof(fx->sites[0])) &&
                    sscanf(line, "%7s %47s %llx %d", s->kind, s->tag, &addr, &s->line) == 4) {
                    s->addr = addr;
                    fx->n++;
                }
            }
            return 0;
        }
        if (len == sizeof(buf) - 1)
            break;
    }
    close(p[0]);
    fixture_stop(fx);
    return -1;
}

/* Kill and reap. */
void fixture_stop(struct fixture *fx)
{
    if (fx->pid > 0) {
        kill(fx->pid, SIGKILL);
        waitpid(fx->pid, NULL, 0);
    }
    fx->pid = 0;
}

/* Find a site; a missing one is a broken fixture, so stop here. */
const struct fx_site *fixture_site(const struct fixture *fx, const char *kind, const char *tag,
                                   int nth)
{
    for (int i = 0; i < fx->n; i++)
        if (!strcmp(fx->sites[i].kind, kind) && !strcmp(fx->sites[i].tag, tag) && nth-- == 0)
            return &fx->sites[i];
    fprintf(stderr, "fixture printed no %s %s\n", kind, tag);
    exit(1);
}

/* Fixture path from the environment. */
const char *fixture_path(const char *var)
{
    const char *p = getenv(var);
    if (!p || !*p) {
        fprintf(stderr, "%s not set: run this test through meson test\n", var);
        exit(77);
    }
    return p;
}

/* Address -> (module, file offset) through the maps. */
bool symtest_offset(const struct maps *m, uint64_t addr, struct module **mod, uint64_t *off)
{
    const struct map_entry *e = maps_find(m, addr);
    if (!e || !e->mod)
        return false;
    *mod = e->mod;
    *off = addr - e->start + e->pgoff;
    return true;
}

/* Dump frames to stderr. */
void symtest_print_frames(const char *what, const struct sym_frame *f, int n)
{
    fprintf(stderr, "  %s: %d frame(s)\n", what, n);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "    #%d %s at %s:%d%s\n", i, f[i].function ? f[i].function : "??",
                f[i].file ? f[i].file : "??", f[i].line, f[i].inlined ? " (inlined)" : "");
}

/* Basename. */
const char *symtest_base(const char *path)
{
    if (!path)
        return NULL;
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Fresh temp directory that other users may enter. */
char *symtest_mkdtemp(void)
{
    char *t = strdup("/tmp/profd-symtest-XXXXXX");
    if (!t || !mkdtemp(t)) {
        perror("mkdtemp");
        exit(1);
    }
    chmod(t, 0755);
    return t;
}

/* Copy a file. */
int symtest_copy(const char *from, const char *to, mode_t mode)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (out < 0) {
        int e = -errno;
        close(in);
        return e;
    }
    char buf[65536];
    ssize_t r;
    int err = 0;
    while ((r = read(in, buf, sizeof(buf))) > 0) {
        if (write(out, buf, (size_t)r) != r) {
            err = -EIO;
            break;
        }
    }
    if (r < 0)
        err = -errno;
    close(in);
    if (fchmod(out, mode) < 0 && !err)
        err = -errno;
    if (close(out) < 0 && !err)
        err = -errno;
    return err;
}

/* mkdir -p. */
int symtest_mkdirs(const char *path)
{
    char *p = strdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    }
    int r = mkdir(p, 0755) < 0 && errno != EEXIST ? -errno : 0;
    free(p);
    return r;
}

/* nftw callback: remove one entry. */
static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* rm -rf of a test's temp directory. */
void symtest_rmtree(const char *path)
{
    if (path && !strncmp(path, "/tmp/profd-symtest-", strlen("/tmp/profd-symtest-")))
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Count /proc/self/fd entries (minus the one opendir uses). */
int symtest_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}
