/* spool.c: the exporters' spool on disk (spool.h). */
#include "spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* A record's body is at most this big (a window of many threads' samples is far smaller). */
#define SPOOL_MAX_RECORD (256u << 20)

int spool_open(const char *dir)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp"))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

char *spool_write(const char *dir, uint64_t seq, const char *exporter, const char *header,
                  const void *body, size_t len, int *err)
{
    char *path = xasprintf("%s/%016" PRIx64 "-%s.rec", dir, seq, exporter);
    char *tmp = xasprintf("%s/.%016" PRIx64 "-%s.tmp", dir, seq, exporter);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int r = fd < 0 ? -errno : 0;
    if (!r)
        r = write_all(fd, header, strlen(header));
    if (!r)
        r = write_all(fd, "\n", 1);
    if (!r)
        r = write_all(fd, body, len);
    if (fd >= 0 && close(fd) < 0 && !r)
        r = -errno;
    if (!r && rename(tmp, path) < 0)
        r = -errno;
    if (r) {
        unlink(tmp);
        free(path);
        path = NULL;
    }
    free(tmp);
    *err = r;
    return path;
}

int spool_name_parse(const char *name, uint64_t *seq, char *exporter, size_t exporter_len)
{
    const char *end = parse_hex_span(name, name + strlen(name), seq);
    if (!end || end - name != 16 || *end != '-')
        return -EINVAL;
    const char *ex = end + 1, *dot = strrchr(ex, '.');
    if (!dot || strcmp(dot, ".rec") || dot == ex || (size_t)(dot - ex) >= exporter_len)
        return -EINVAL;
    memcpy(exporter, ex, (size_t)(dot - ex));
    exporter[dot - ex] = '\0';
    return 0;
}

int spool_scan(const char *dir, void (*each)(uint64_t seq, const char *exporter,
                                             const char *path, size_t size, void *ctx),
               void *ctx)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t seq;
        char exporter[32];
        struct stat st;
        if (spool_name_parse(e->d_name, &seq, exporter, sizeof(exporter)) < 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        char *path = xasprintf("%s/%s", dir, e->d_name);
        each(seq, exporter, path, (size_t)st.st_size, ctx);
        free(path);
        n++;
    }
    closedir(d);
    return n;
}

int spool_read(const char *path, char **buf, const char **header, const char **body,
               size_t *body_len)
{
    *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SPOOL_MAX_RECORD) {
        close(fd);
        return -EINVAL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *b = xmalloc(n + 1);
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    b[got] = '\0';
    char *nl = memchr(b, '\n', got);
    if (got < n || !nl) {
        free(b);
        return -EINVAL;
    }
    *nl = '\0';
    *buf = b;
    *header = b;
    *body = nl + 1;
    *body_len = got - (size_t)(nl + 1 - b);
    return 0;
}
