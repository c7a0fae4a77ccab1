/* procfs.c: a thread's /proc files read without stopping it (schedstat, syscall): the
 * sample path's and the repairs' look at what a thread is doing. */
#include "procfs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t pread_text(int fd, char *buf, size_t size)
{
    if (fd < 0)
        return -EBADF;
    ssize_t n;
    do
        n = pread(fd, buf, size - 1, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return n;
}

int proc_read_schedstat(int fd, uint64_t *run_ns, uint64_t *pcount)
{
    char buf[128];
    ssize_t n = pread_text(fd, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    if (n == 0)
        return -ESRCH;
    char *p = buf, *end;
    uint64_t run = strtoull(p, &end, 10);
    if (end == p)
        return -EINVAL;
    p = end;
    strtoull(p, &end, 10); /* wait_ns */
    if (end == p)
        return -EINVAL;
    p = end;
    uint64_t pc = strtoull(p, &end, 10);
    if (end == p)
        return -EINVAL;
    *run_ns = run;
    *pcount = pc;
    return 0;
}

int sysc_parse(const char *text, struct sysc_info *out)
{
    memset(out, 0, sizeof(*out));
    if (!strncmp(text, "running", 7)) {
        out->state = SYSC_RUNNING;
        out->nr = -1;
        return 0;
    }
    char *end;
    const char *p = text;
    long nr = strtol(p, &end, 10);
    if (end == p)
        return -EINVAL;
    p = end;
    uint64_t v[8];
    int n = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            break;
        if (n == 8)
            return -EINVAL; /* more fields than the kernel prints */
        v[n] = strtoull(p, &end, 16);
        if (end == p)
            return -EINVAL;
        p = end;
        n++;
    }
    out->nr = nr;
    if (nr < 0) {
        if (n != 2)
            return -EINVAL;
        out->state = SYSC_BLOCKED;
        out->sp = v[0];
        out->pc = v[1];
        return 0;
    }
    if (n != 8)
        return -EINVAL;
    out->state = SYSC_IN_SYSCALL;
    memcpy(out->args, v, sizeof(out->args));
    out->sp = v[6];
    out->pc = v[7];
    return 0;
}

int proc_read_syscall(int fd, struct sysc_info *out)
{
    char buf[256];
    ssize_t n = pread_text(fd, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    if (n == 0)
        return -ESRCH;
    return sysc_parse(buf, out);
}
