/* sandbox.h: what profd-symbolizer gives up before it reads a byte of anything a target
 * controls (OpenSSH's privilege-separated child and chrony's privops are the models):
 * - uid and gid: nobody (65534) when started as root; profd's own user otherwise;
 * - every capability: effective, permitted, inheritable, ambient and bounding sets;
 * - new privileges (no_new_privs), and ptrace by others (not dumpable);
 * - limits: address space (unless built with a sanitizer, which needs terabytes of it),
 *   CPU time, descriptors, no processes, no core dumps; a lower priority than profd, but
 *   for the helper the loop thread waits for (keep_priority). (Not
 *   file size: its stderr is profd's, which may be a log file, and it can write nothing
 *   else: every descriptor profd passes it is read-only.)
 * - system calls: a seccomp allow-list. The helper reads and maps the descriptors profd
 *   sends, answers on its socket, and nothing else: opening, creating or executing files,
 *   sockets, processes and threads are refused (EACCES for the path calls, so that a library
 *   looking for a file fails cleanly; every other call kills the process).
 * Everything is checked after it is done (capget, getresuid); any failure is fatal. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct sandbox_opts {
    uint64_t max_memory;  /* RLIMIT_AS in bytes; 0: none */
    uint64_t max_cpu_s;   /* RLIMIT_CPU in seconds; 0: none */
    int keep_fd;          /* the socket to profd: every other descriptor above 2 is closed */
    bool keep_priority;   /* profd's loop thread waits for its answers: not lowered */
};

/* Enter the sandbox. Returns 0, or -errno (the caller must exit). */
int sandbox_enter(const struct sandbox_opts *o);
/* Whether this build runs under a sanitizer (no address-space limit then). */
int sandbox_sanitized(void);
