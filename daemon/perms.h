/* perms.h: may this client profile that process? The kernel's ptrace rule, applied to the
 * client's credentials (SO_PEERCRED) instead of the daemon's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint64_t cap_eff; /* client's effective capabilities when it connected */
    bool by_group;    /* in a group allowed to profile any process (allow_groups) */
    gid_t *groups;    /* primary and supplementary groups when it connected (owned) */
    int ngroups;
};

/* May the client profile any process (not only its own): CAP_SYS_PTRACE, or a member of a
 * group the configuration allows (allow_groups) when it connected. */
static inline bool peer_may_trace_any(const struct peer *p)
{
    return (p->cap_eff & (1ull << 19 /* CAP_SYS_PTRACE */)) || p->by_group;
}

/* Read the client's groups (primary, then supplementary from SO_PEERGROUPS) into
 * p->groups: all of them, however many; the primary one alone if the kernel cannot say. */
void peer_read_groups(int fd, struct peer *p);
/* Set p->by_group: is one of its groups among allowed[0..n)? */
void peer_check_groups(struct peer *p, const gid_t *allowed, size_t n);

/* Fill peer from a connected Unix socket. Returns 0 or -errno (-EMFILE, -ENFILE, -ENOMEM:
 * profd could not look up the peer's capabilities; the connection is not to be served). */
int peer_from_socket(int fd, struct peer *p);

/* Process credentials as checked by the rule. */
struct proc_creds {
    uid_t uid[3]; /* real, effective, saved */
    gid_t gid[3];
    bool dumpable;
    uint64_t cap_prm;
};

struct procstatus;
/* The credentials the rule needs from a parsed status (all but dumpable, which the status
 * does not show). Returns 0, or -EPROTO if Uid, Gid or CapPrm is missing or malformed,
 * with the field named in why (may be NULL): never credentials guessed as 0. */
int proc_creds_from_status(const struct procstatus *st, struct proc_creds *c, char *why,
                           size_t whylen);
/* Read a live process's credentials. Returns 0, -ESRCH (no such process), or another
 * -errno when they cannot be read for certain (-EPROTO: a field missing or malformed;
 * -EFBIG...): then the caller must refuse. why (may be NULL) gets a message for the
 * client in either case. */
int proc_creds_read(pid_t pid, struct proc_creds *c, char *why, size_t whylen);

/* The rule (ptrace(2), "Ptrace access mode checking"): a client with CAP_SYS_PTRACE (root)
 * may; otherwise the client's uid and gid must equal the target's real, effective and saved
 * ones, the target must be dumpable, and it must hold no capability the client lacks.
 * Returns 0 or -EPERM with a reason in why. */
int perms_check(const struct peer *p, const struct proc_creds *c, char *why, size_t whylen);
/* The Yama LSM's restriction on top (kernel.yama.ptrace_scope): 1 allows a client without
 * CAP_SYS_PTRACE only its own descendants, 2 and 3 nothing. Returns 0 or -EPERM. */
int perms_check_yama(const struct peer *p, pid_t target, char *why, size_t whylen);
