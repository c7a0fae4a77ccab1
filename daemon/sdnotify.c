/* sdnotify.c: readiness notification and socket activation (see sdnotify.h). */
#include "sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

bool notify_wanted(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    return path && *path;
}

int notify_send(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof(msg))
        return -EMSGSIZE;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t w = sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
    int e = errno;
    close(fd);
    return w < 0 ? -e : 1;
}

int listen_fd_passed(char *why, size_t whylen)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid || !fds)
        return -1;
    uint64_t p, n;
    int r = -1;
    if (parse_u64(pid, &p) < 0 || parse_u64(fds, &n) < 0) {
        snprintf(why, whylen, "LISTEN_PID=%s LISTEN_FDS=%s: not numbers", pid, fds);
        r = -EINVAL;
    } else if (p != (uint64_t)getpid()) {
        r = -1; /* meant for another process */
    } else if (n != 1) {
        snprintf(why, whylen, "the service manager passed %s sockets; profd listens on one "
                 "(ListenStream= once in profd.socket)", fds);
        r = n == 0 ? -1 : -EINVAL;
    } else {
        r = 3; /* SD_LISTEN_FDS_START */
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return r;
}
