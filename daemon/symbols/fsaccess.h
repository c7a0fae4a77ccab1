/* fsaccess.h: opening files by path with the rights of the client who asked, not profd's.
 *
 * profd holds CAP_DAC_READ_SEARCH (and runs as root outside the unit), so a path a target or
 * client can influence (a perf map in /tmp, a debug file named by .gnu_debuglink) must not be
 * opened with profd's own rights: the file could be one only root may read, and its contents
 * would come back as symbol names. Such paths are opened here as the client would open them:
 * its filesystem uid, gid and groups (setfsuid, setfsgid and setgroups on the calling thread
 * only, when profd may change them), never profd's DAC capabilities; where profd may not
 * change ids (the unit runs it as user profd), the file must also be readable by the client
 * by its mode bits. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

struct fs_creds {
    uid_t uid;
    gid_t gid;
    const gid_t *groups; /* supplementary groups (may include gid) */
    int ngroups;
    bool dac;            /* the client itself bypasses file permissions (CAP_DAC_*) */
};

/* Open path, relative to dirfd (AT_FDCWD), with flags (O_CLOEXEC added) as c would; c NULL:
 * with profd's own rights. Returns a descriptor or -errno. */
int fs_open_as(const struct fs_creds *c, int dirfd, const char *path, int flags);
/* Whether profd can take a client's ids on a thread (CAP_SETUID and CAP_SETGID). */
bool fs_can_switch_ids(void);
