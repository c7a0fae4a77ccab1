/* syscalls.h: the rules for repairing system calls that a ptrace stop or an ignored signal
 * would make fail with EINTR (syscalls.c), used by sigrepair.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

/* Would the process ignore sig if it were not traced, given SigIgn and SigCgt of its
 * status (procstatus.h)? (SIG_IGN, or default action ignore: SIGCHLD, SIGCONT, SIGURG,
 * SIGWINCH, with no handler.) */
bool sig_is_ignored(uint64_t ign, uint64_t cgt, int sig);

/* System calls that return a plain -EINTR (not a restart code) when a ptrace stop or an
 * ignored signal interrupts them, and that are safe to restart because -EINTR means
 * nothing happened: the epoll waits and socket calls with SO_RCVTIMEO/SO_SNDTIMEO. Never
 * close or connect, whose restart would be wrong. */
bool sysc_restartable(long nr);

/* ERESTARTNOHAND: the kernel restarts the call unless a handler runs (then EINTR, exactly
 * as without a tracer). */
#define KERNEL_ERESTARTNOHAND 514

/* Repair regs of a thread stopped while returning -EINTR from a restartable call, when the
 * interruption was ours (interrupt stop) or an ignored signal's. elapsed_ns is a lower bound
 * of the time already spent blocked (0 if unknown): epoll timeouts are lowered by it, and a
 * call whose timeout has expired returns 0 instead. epoll_pwait2's timeout lives in the
 * target's memory and is read with process_vm_readv. Returns true if regs were changed
 * (the caller must PTRACE_SETREGS). */
bool sysc_repair_eintr(pid_t tid, struct user_regs_struct *regs, uint64_t elapsed_ns);

/* The whole timeout of the restartable call in regs, in ns: epoll_ms (its original int
 * timeout, for the epoll waits), the timespec of epoll_pwait2 or rt_sigtimedwait (read from
 * the target's memory), or for socket calls the socket's SO_RCVTIMEO / SO_SNDTIMEO (read
 * through a copy of the target's descriptor, pidfd_getfd on pidfd). -1 if it waits without
 * a timeout or the timeout cannot be known. */
int64_t sysc_timeout_ns(pid_t tid, int pidfd, const struct user_regs_struct *regs, int epoll_ms);

/* Repair regs of a call that an ignored signal made fail with EINTR, knowing it has waited
 * waited_ns of a timeout_ns timeout (-1: none): if the time is up, complete it as timed out
 * (0 for the epoll waits, -EAGAIN for socket calls and rt_sigtimedwait), as it would have
 * natively; otherwise restart it, an epoll wait with what is left of its timeout (rounded
 * up to the millisecond: never early). Returns true if regs changed. */
bool sysc_repair_ignored(struct user_regs_struct *regs, uint64_t waited_ns, int64_t timeout_ns);
