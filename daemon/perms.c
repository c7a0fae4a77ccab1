/* perms.c: peer credentials and the ptrace access rule, per request. */
#include "perms.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "procstatus.h"
#include "util.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* Same user namespace as the daemon? Capabilities count only there: inside a namespace of
 * its own (unshare -r) any user holds every capability, over nothing of ours. */
static bool same_userns(pid_t pid)
{
    char path[64];
    struct stat a, b;
    snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
    return stat(path, &a) == 0 && stat("/proc/self/ns/user", &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* profd's own shortage (descriptors, memory): not something to decide a client's rights on. */
static bool shortage(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOMEM;
}

/* The client's effective capabilities, as they bear on our processes: 0 unless they can be
 * read for certain. They come from /proc/PID/status by pid, so the peer process is held (its
 * SO_PEERPIDFD pidfd names that very process, however late it is taken; else pidfd_open at
 * once) and checked to live after the read, so a pid reused meanwhile cannot lend its
 * capabilities; the status must also show the uid that SO_PEERCRED gave.
 *
 * The peer's effective capabilities (0 if it has exited or they cannot be known), or -errno
 * when profd is short of descriptors or memory to look: a privileged client must not be
 * taken for an unprivileged one for its whole connection because of a passing shortage. */
static int peer_caps(int fd, const struct ucred *uc, uint64_t *out)
{
    *out = 0;
    /* The status is read first, then the peer's own pidfd (SO_PEERPIDFD) says whether the
     * peer still lived after that read: one descriptor at a time, so that a connection can
     * be served with two free (not three). Without SO_PEERPIDFD (before Linux 6.5) a pidfd
     * of the pid is opened first and the status read after it, as the pidfd vouches only
     * for what is read while it is held. */
    struct procstatus st;
    int r = procstatus_read(uc->pid, 0, NULL, &st);
    if (r < 0 && shortage(-r))
        return r;
    int pidfd = -1;
    socklen_t len = sizeof(pidfd);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0) {
        int e = errno;
        if (shortage(e))
            return -e;
        pidfd = (int)syscall(SYS_pidfd_open, uc->pid, 0);
        if (pidfd < 0 && shortage(errno))
            return -errno;
        if (pidfd >= 0) {
            r = procstatus_read(uc->pid, 0, NULL, &st);
            if (r < 0 && shortage(-r)) {
                close(pidfd);
                return r;
            }
        }
    }
    if (pidfd < 0)
        return 0;
    uint64_t caps = 0;
    if (r == 0 && procstatus_has(&st, PS_UID) &&
        procstatus_has(&st, PS_CAPEFF) && st.uid[1] == uc->uid && same_userns(uc->pid))
        caps = st.cap_eff;
    /* A pidfd polls readable once its process has exited: then what we read may be another
     * process's (poll rather than pidfd_send_signal, which valgrind does not know). */
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    if (poll(&pfd, 1, 0) != 0)
        caps = 0;
    close(pidfd);
    *out = caps;
    return 0;
}

int peer_from_socket(int fd, struct peer *p)
{
    struct ucred uc;
    socklen_t len = sizeof(uc);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
        return -errno;
    p->pid = uc.pid;
    p->uid = uc.uid;
    p->gid = uc.gid;
    return peer_caps(fd, &uc, &p->cap_eff);
}

void peer_read_groups(int fd, struct peer *p)
{
    free(p->groups);
    p->groups = NULL;
    p->ngroups = 0;
    socklen_t len = 0;
    gid_t *g = NULL;
    /* Ask for the size first (ERANGE fills in nothing, only the size): a client may have
     * thousands of groups. */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, NULL, &len) < 0 && errno == ERANGE &&
        len > 0) {
        g = malloc(len + sizeof(gid_t));
        if (g && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g + 1, &len) < 0) {
            free(g);
            g = NULL;
        }
    }
    if (!g) {
        g = malloc(sizeof(gid_t));
        len = 0;
        if (!g)
            return; /* no group counts: fails closed */
    }
    g[0] = p->gid;
    p->groups = g;
    p->ngroups = 1 + (int)(len / sizeof(gid_t));
}

void peer_check_groups(struct peer *p, const gid_t *allowed, size_t n)
{
    p->by_group = false;
    for (int i = 0; i < p->ngroups && !p->by_group; i++)
        for (size_t j = 0; j < n; j++)
            p->by_group |= p->groups[i] == allowed[j];
}

int proc_creds_from_status(const struct procstatus *st, struct proc_creds *c, char *why,
                           size_t whylen)
{
    /* Each of these decides the rule: one the text does not give for certain must not
     * read as 0 (uid root, no capability), so the credentials are not known at all. */
    static const enum procstatus_field need[] = {PS_UID, PS_GID, PS_CAPPRM};
    for (size_t i = 0; i < ARRAY_SIZE(need); i++) {
        if (!procstatus_has(st, need[i])) {
            if (why)
                snprintf(why, whylen, "its /proc status has %s %s line",
                         st->bad & (1u << need[i]) ? "a malformed" : "no",
                         procstatus_field_name(need[i]));
            return -EPROTO;
        }
    }
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < 3; i++) {
        c->uid[i] = st->uid[i];
        c->gid[i] = st->gid[i];
    }
    c->cap_prm = st->cap_prm;
    return 0;
}

int proc_creds_read(pid_t pid, struct proc_creds *c, char *why, size_t whylen)
{
    char detail[128];
    struct procstatus st;
    int r = procstatus_read(pid, 0, NULL, &st);
    if (r == 0)
        r = proc_creds_from_status(&st, c, detail, sizeof(detail));
    else if (r != -ESRCH)
        snprintf(detail, sizeof(detail), "its /proc status cannot be read: %s", strerror(-r));
    if (r == -ESRCH) {
        if (why)
            snprintf(why, whylen, "no such process: %d", pid);
        return r;
    }
    if (r == -EMFILE || r == -ENFILE || r == -ENOMEM) {
        /* profd's own shortage, not the process's doing: said as such (still refused). */
        if (why)
            snprintf(why, whylen, "profd cannot check process %d now: it is out of %s (%s)",
                     pid, r == -ENOMEM ? "memory" : "file descriptors", strerror(-r));
        return r;
    }
    if (r < 0) {
        if (why)
            snprintf(why, whylen, "permission denied: the credentials of process %d cannot be "
                                  "checked (%s)", pid, detail);
        return r;
    }
    /* A non-dumpable process's /proc/PID files belong to root (proc(5), "/proc/pid";
     * task_dump_owner in fs/proc/base.c): the kernel's own signal of the dumpable flag,
     * which /proc does not print otherwise. The /proc/PID directory itself is exempt, so
     * look at a file in it. */
    struct stat sst;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (stat(path, &sst) < 0) {
        if (why)
            snprintf(why, whylen, "no such process: %d", pid);
        return -ESRCH;
    }
    c->dumpable = sst.st_uid == c->uid[1] || c->uid[1] == 0; /* root: see perms_check */
    return 0;
}

/* Yama's ptrace_scope (0 if Yama is absent). */
static int yama_scope(void)
{
    char buf[16];
    if (read_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof(buf)) <= 0)
        return 0;
    return atoi(buf);
}

/* Is pid a descendant of ancestor, as Yama counts it? A process is its own: the kernel's
 * task_is_descendant (security/yama/yama_lsm.c) compares the child itself before walking up
 * to its parents, so at ptrace_scope 1 a process profiling itself (a transaction) passes.
 * (walks PPid through /proc; an unreadable link: no) */
static bool descends_from(pid_t pid, pid_t ancestor)
{
    if (pid == ancestor)
        return true;
    for (int depth = 0; pid > 1 && depth < 4096; depth++) {
        struct procstatus st;
        if (procstatus_read(pid, 0, NULL, &st) < 0 || !procstatus_has(&st, PS_PPID))
            return false;
        pid = st.ppid;
        if (pid == ancestor)
            return true;
    }
    return false;
}

int perms_check_yama(const struct peer *p, pid_t target, char *why, size_t whylen)
{
    if (peer_may_trace_any(p))
        return 0;
    int scope = yama_scope();
    if (scope >= 2 || (scope == 1 && !descends_from(target, p->pid))) {
        snprintf(why, whylen, "permission denied: kernel.yama.ptrace_scope is %d, which lets "
                              "you trace %s",
                 scope, scope == 1 ? "only your own descendants" : "nothing without CAP_SYS_PTRACE");
        return -EPERM;
    }
    return 0;
}

int perms_check(const struct peer *p, const struct proc_creds *c, char *why, size_t whylen)
{
    /* What makes root all-powerful here is what makes it so for ptrace: CAP_SYS_PTRACE.
     * A uid-0 client that dropped it is held to the same rule as everyone else. */
    if (peer_may_trace_any(p))
        return 0;
    for (int i = 0; i < 3; i++) {
        if (c->uid[i] != p->uid || c->gid[i] != p->gid) {
            snprintf(why, whylen,
                     "permission denied: the process runs as uid %u/%u/%u gid %u/%u/%u, you "
                     "are uid %u gid %u",
                     c->uid[0], c->uid[1], c->uid[2], c->gid[0], c->gid[1], c->gid[2], p->uid,
                     p->gid);
            return -EPERM;
        }
    }
    if (!c->dumpable) {
        snprintf(why, whylen, "permission denied: the process is not dumpable "
                              "(prctl PR_SET_DUMPABLE, or it changed credentials)");
        return -EPERM;
    }
    if (c->cap_prm & ~p->cap_eff) {
        snprintf(why, whylen, "permission denied: the process holds capabilities you lack "
                              "(%#llx)",
                 (unsigned long long)(c->cap_prm & ~p->cap_eff));
        return -EPERM;
    }
    if (c->uid[1] == 0) {
        /* A root process's /proc files belong to root whether or not it is dumpable, so
         * its dumpable flag cannot be read: take the safe side. */
        snprintf(why, whylen, "permission denied: the process runs as root and whether it "
                              "is dumpable cannot be checked; profiling it needs "
                              "CAP_SYS_PTRACE");
        return -EPERM;
    }
    return 0;
}
