/* service.c: the service a process's profiles are filed under by default: its systemd unit
 * (what the fleet's dashboards call it), else its executable's name. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export_internal.h"
#include "target.h"
#include "util.h"

#define SERVICE_MAX 128

/* The innermost "NAME.service" of the cgroup v2 line ("0::/system.slice/nginx.service"):
 * NAME, its bytes outside [A-Za-z0-9_.@:-] made '_' (a delegated subtree's names are the
 * user's), or NULL. A pure function of the file's text (tests/unit/test_endpoint.c). */
char *service_from_cgroup(const char *text)
{
    const char *line = text;
    while (line && strncmp(line, "0::", 3)) {
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    if (!line)
        return NULL;
    const char *path = line + 3, *end = path + strcspn(path, "\n");
    const char *best = NULL;
    size_t bestlen = 0;
    for (const char *c = path; c < end;) {
        while (c < end && *c == '/')
            c++;
        size_t n = 0;
        while (c + n < end && c[n] != '/')
            n++;
        if (n > 8 && !memcmp(c + n - 8, ".service", 8)) {
            best = c;
            bestlen = n - 8;
        }
        c += n;
    }
    if (!best || !bestlen)
        return NULL;
    if (bestlen > SERVICE_MAX)
        bestlen = SERVICE_MAX;
    char *s = xmalloc(bestlen + 1);
    for (size_t i = 0; i < bestlen; i++) {
        char ch = best[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || strchr("_.@:-", ch);
        s[i] = ok && ch ? ch : '_';
    }
    s[bestlen] = '\0';
    return s;
}

char *export_default_service(const struct target *t)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)t->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    char *s = service_from_cgroup(buf);
    if (s)
        return s;
    const char *exe = t->exe ? strrchr(t->exe, '/') : NULL;
    return xstrdup(exe && exe[1] ? exe + 1 : t->comm);
}
