/* sigrepair.h: no EINTR of profd's making, no wake-up lost (sigrepair.c). target.c calls
 * these at the ptrace stops it handles, with the thread stopped. */
#pragma once

#include <stdint.h>
#include <sys/user.h>

struct procstatus;
struct target;
struct thread;

/* Read the process's status (/proc/PID/status, its kept descriptor): the signal dispositions
 * (kept in t, the repairs' first look), the signals pending for the whole process (shd, may
 * be NULL), and its VM sizes (t->vm_now, for the housekeeping); the whole status in *stp.
 * Returns 0 or -errno (-EPROTO: a field missing). sigrepair_read_sigstate: the same without
 * *stp. */
int sigrepair_read_status(struct target *t, uint64_t *shd, struct procstatus *stp);
int sigrepair_read_sigstate(struct target *t, uint64_t *shd);
/* th is in a ptrace stop, about to be resumed: if an ignored signal it does not block waits
 * in the shared queue, rescue the thread it would have woken first. */
void sigrepair_guard_shared(struct thread *th);
/* th stopped with regs, woken by an ignored signal (its own, or one another thread took):
 * make the kernel restart the call it interrupted, its timeout measured across a chain of
 * such repairs. */
void sigrepair_ignored_wakeup(struct thread *th, struct user_regs_struct *regs);
/* In a signal-delivery-stop for sig: if the process ignores it, repair the call it
 * interrupted. */
void sigrepair_ignored_signal(struct thread *th, int sig);
/* In the stop profd's PTRACE_INTERRUPT caused: a call it interrupted that would fail with
 * EINTR is restarted instead. */
void sigrepair_interrupted_syscall(struct thread *th);
/* Free what the module holds (shutdown). */
void sigrepair_finish(void);
