/* procstatus.h: the one reader of /proc/PID/status and /proc/PID/task/TID/status.
 *
 * The file has no size bound: its Groups line lists every supplementary group (up to
 * NGROUPS_MAX, 65536: ~600 KB of text), and every field after it (NSpid, SigIgn, CapPrm,
 * voluntary_ctxt_switches...) moves with it. It is read whole, in one read(2) so that its
 * fields belong to one moment, and parsed into a struct that says which fields were there.
 * A field that is missing or malformed is absent, never 0: a permission decision that needs
 * it must then refuse. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* The largest status file read: a process in NGROUPS_MAX groups of 10-digit ids fills
 * ~720 KB; anything past this is not a status file (-EFBIG). */
#define PROCSTATUS_MAX_SIZE (4u << 20)

/* Fields parsed, as bits of procstatus.have (present and well-formed) and .bad (present
 * but malformed, or given twice). */
enum procstatus_field {
    PS_NAME,
    PS_STATE,
    PS_TGID,
    PS_PID,
    PS_PPID,
    PS_TRACERPID,
    PS_UID,
    PS_GID,
    PS_NGROUPS, /* the Groups line (its count; the ids themselves are not kept) */
    PS_NSPID,
    PS_SHDPND, /* signals pending for the whole process (kill), not one thread (tgkill) */
    PS_SIGIGN,
    PS_SIGCGT,
    PS_CAPPRM,
    PS_CAPEFF,
    PS_VCSW,
    PS_NVCSW,
    PS_VMSIZE, /* VmSize, VmExe, VmLib: in kB */
    PS_VMEXE,
    PS_VMLIB,
    PS_NFIELDS
};

struct procstatus {
    uint32_t have; /* 1u << enum procstatus_field: present and well-formed */
    uint32_t bad;  /* present but malformed or repeated: not in have */
    char name[64]; /* Name: as printed (the kernel escapes it), cut to fit */
    char state;    /* State: its letter (R, S, D, T, t, Z, X, ...) */
    pid_t tgid, pid, ppid, tracer_pid;
    uid_t uid[4]; /* real, effective, saved, filesystem */
    gid_t gid[4];
    uint32_t ngroups;
    pid_t nspid;          /* NSpid: its last field, the pid in the innermost namespace */
    uint32_t nspid_depth; /* how many fields NSpid had */
    uint64_t sig_shd, sig_ign, sig_cgt;
    uint64_t cap_prm, cap_eff;
    uint64_t vcsw, nvcsw; /* voluntary_ctxt_switches, nonvoluntary_ctxt_switches */
    uint64_t vm_size_kb, vm_exe_kb, vm_lib_kb;
};

static inline bool procstatus_has(const struct procstatus *st, enum procstatus_field f)
{
    return st->have & (1u << f);
}

/* Parse len bytes of status text (not NUL-terminated; any bytes at all: it never reads
 * past text + len). Only complete lines count: a last line without its newline is
 * ignored, so a text cut short cannot give a field a shortened value. Numbers that do not
 * fit their field, unknown syntax and repeated keys make that field bad. Fills *out;
 * returns how many fields it found well-formed. */
int procstatus_parse(const char *text, size_t len, struct procstatus *out);

/* Read the status file open on fd whole (pread from offset 0, into sb, which grows as
 * needed and is kept for the next call: a caller on the sample path allocates nothing once
 * it has grown) and parse it. Returns 0, -ESRCH (the process or thread is gone), -EFBIG
 * (larger than PROCSTATUS_MAX_SIZE), -ENOMEM or another -errno of the read; after an error
 * *out has no field. */
int procstatus_read_fd(int fd, struct strbuf *sb, struct procstatus *out);

/* Read /proc/PID/status, or with tid > 0 /proc/PID/task/TID/status, through sb as
 * procstatus_read_fd does (NULL: a buffer of its own, freed before it returns). Returns 0,
 * -ESRCH (no such process or thread), or an -errno of procstatus_read_fd. */
int procstatus_read(pid_t pid, pid_t tid, struct strbuf *sb, struct procstatus *out);

/* The name of a field as it appears in the file ("CapPrm"), for messages. */
const char *procstatus_field_name(enum procstatus_field f);
