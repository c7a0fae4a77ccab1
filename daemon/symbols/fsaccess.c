/* fsaccess.c: open files as the requesting client (see fsaccess.h). */
#include "fsaccess.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

#define MAX_GROUPS 65536

/* The calling thread's capability sets (capget/capset act on one thread). */
static int caps_get(struct __user_cap_data_struct d[2])
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    return syscall(SYS_capget, &h, d) < 0 ? -errno : 0;
}

static int caps_set(const struct __user_cap_data_struct d[2])
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

static bool has_cap(const struct __user_cap_data_struct d[2], int cap)
{
    return d[cap / 32].effective & (1u << (cap % 32));
}

bool fs_can_switch_ids(void)
{
    struct __user_cap_data_struct d[2];
    return caps_get(d) == 0 && has_cap(d, CAP_SETUID) && has_cap(d, CAP_SETGID);
}

/* The capabilities that bypass file permissions. */
static const int dac_caps[] = {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER};

/* Could c read this file by its mode bits? (owner, then group, then others, as the kernel
 * decides) */
static bool readable_by(const struct fs_creds *c, const struct stat *st)
{
    if (st->st_uid == c->uid)
        return st->st_mode & S_IRUSR;
    bool in_group = st->st_gid == c->gid;
    for (int i = 0; i < c->ngroups && !in_group; i++)
        in_group = c->groups[i] == st->st_gid;
    if (in_group)
        return st->st_mode & S_IRGRP;
    return st->st_mode & S_IROTH;
}

/* A failure to give back profd's own credentials would leave this thread acting as the
 * client, or with capabilities it should not have: nothing safe can follow. */
static void __attribute__((noreturn)) cannot_restore(const char *what)
{
    log_err("cannot restore profd's own %s after opening a file as a client", what);
    abort();
}

int fs_open_as(const struct fs_creds *c, int dirfd, const char *path, int flags)
{
    flags |= O_CLOEXEC;
    if (!c || c->dac) {
        int fd = openat(dirfd, path, flags);
        return fd < 0 ? -errno : fd;
    }
    /* profd's DAC capabilities off the effective set for the open, on this thread only. */
    struct __user_cap_data_struct saved[2], lowered[2];
    if (caps_get(saved) < 0)
        return -EPERM;
    memcpy(lowered, saved, sizeof(saved));
    for (size_t i = 0; i < sizeof(dac_caps) / sizeof(dac_caps[0]); i++)
        lowered[dac_caps[i] / 32].effective &= ~(1u << (dac_caps[i] % 32));
    bool switch_ids = has_cap(saved, CAP_SETUID) && has_cap(saved, CAP_SETGID);
    if (caps_set(lowered) < 0)
        return -EPERM;
    int fd, err = 0;
    if (switch_ids) {
        /* Raw system calls: the kernel changes these per thread; glibc's wrappers of
         * setgroups would change every thread of profd. */
        gid_t *old = malloc(MAX_GROUPS * sizeof(gid_t));
        long nold = old ? syscall(SYS_getgroups, MAX_GROUPS, old) : -1;
        if (nold < 0) {
            free(old);
            if (caps_set(saved) < 0)
                cannot_restore("capabilities");
            return -ENOMEM;
        }
        uid_t old_uid = (uid_t)syscall(SYS_setfsuid, -1);
        gid_t old_gid = (gid_t)syscall(SYS_setfsgid, -1);
        if (syscall(SYS_setgroups, c->ngroups, c->groups) < 0) {
            err = -errno;
        } else {
            syscall(SYS_setfsgid, c->gid);
            syscall(SYS_setfsuid, c->uid);
            /* setfsuid reports failure only by not changing: check. */
            if ((uid_t)syscall(SYS_setfsuid, -1) != c->uid ||
                (gid_t)syscall(SYS_setfsgid, -1) != c->gid)
                err = -EPERM;
        }
        fd = err ? -1 : openat(dirfd, path, flags);
        if (fd < 0 && !err)
            err = -errno;
        syscall(SYS_setfsuid, old_uid);
        syscall(SYS_setfsgid, old_gid);
        if ((uid_t)syscall(SYS_setfsuid, -1) != old_uid ||
            (gid_t)syscall(SYS_setfsgid, -1) != old_gid)
            cannot_restore("filesystem ids");
        if (syscall(SYS_setgroups, nold, old) < 0)
            cannot_restore("groups");
        free(old);
    } else {
        fd = openat(dirfd, path, flags);
        if (fd < 0)
            err = -errno;
    }
    /* Changing the fsuid back to 0 may have raised capabilities again: restore exactly. */
    if (caps_set(saved) < 0)
        cannot_restore("capabilities");
    if (fd < 0)
        return err;
    if (!switch_ids) {
        /* Opened as profd's own user without its capabilities: also the client must be
         * able to read it. */
        struct stat st;
        if (fstat(fd, &st) < 0 || !readable_by(c, &st)) {
            close(fd);
            return -EACCES;
        }
    }
    return fd;
}
