/* sdnotify.h: the service manager's side channels, without libsystemd: readiness and
 * status (sd_notify(3)'s $NOTIFY_SOCKET datagrams) and socket activation
 * (sd_listen_fds(3)'s $LISTEN_FDS). Both protocols are stable interfaces of systemd
 * (systemd.io/PORTABILITY_AND_STABILITY). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Send "KEY=VALUE\n..." to $NOTIFY_SOCKET if set (READY=1, RELOADING=1, STOPPING=1,
 * STATUS=...). Returns 1 if sent, 0 if there is no service manager to tell, or -errno. */
int notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether there is a service manager to tell ($NOTIFY_SOCKET set). */
bool notify_wanted(void);

/* The listening socket passed by the service manager: fd 3 if $LISTEN_PID is this process
 * and $LISTEN_FDS is 1; -1 if none was passed; -EINVAL (with a reason in why) if the
 * variables are inconsistent (several sockets). The variables are removed so that children
 * do not inherit them. */
int listen_fd_passed(char *why, size_t whylen);
