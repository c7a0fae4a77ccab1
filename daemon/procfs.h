/* procfs.h: reading a thread's state from its /proc files without stopping it (procfs.c). */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* /proc/PID/task/TID/schedstat: "run_ns wait_ns pcount". Returns 0 or -errno. */
int proc_read_schedstat(int fd, uint64_t *run_ns, uint64_t *pcount);

enum sysc_state {
    SYSC_RUNNING,   /* "running": on a CPU or runnable */
    SYSC_BLOCKED,   /* blocked, not in a system call ("-1 sp pc") */
    SYSC_IN_SYSCALL /* blocked in system call nr */
};

struct sysc_info {
    enum sysc_state state;
    long nr;
    uint64_t args[6];
    uint64_t sp, pc; /* pc is just after the syscall instruction */
};

/* /proc/PID/task/TID/syscall: "nr a0..a5 sp pc" (nr decimal, the rest 0x-hex), "-1 sp pc"
 * or "running". Returns 0 or -errno. */
int proc_read_syscall(int fd, struct sysc_info *out);
/* Parse the text of that file (tests). */
int sysc_parse(const char *text, struct sysc_info *out);
