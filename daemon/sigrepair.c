/* sigrepair.c: what profd does so that a sampled thread never sees an EINTR of profd's
 * making nor loses a wake-up: the interrupted system calls restarted (the tables in
 * syscalls.c), ignored signals' interruptions repaired in chains, wake-ups another
 * thread stole rescued. Called by target.c at the stops it handles; calls nothing above it.
 * (daemon/DESIGN.md: "Stolen wake-ups", "Chains of repairs".) */
#include "sigrepair.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include "procstatus.h"
#include "procfs.h"
#include "syscalls.h"
#include "target.h"
#include "util.h"

/* The status files read here (the process's dispositions, a thread's switches). */
static struct strbuf sig_status_buf;

void sigrepair_finish(void)
{
    strbuf_finish(&sig_status_buf);
}

/* Read the process's signal dispositions, and the signals pending for the whole process
 * (shd, may be NULL). The dispositions are kept: sigrepair_guard_shared looks at them first.
 * The whole status in *stp (the leader thread's: its name and state). */
int sigrepair_read_status(struct target *t, uint64_t *shd, struct procstatus *stp)
{
    struct procstatus st;
    memset(&t->vm_now, 0, sizeof(t->vm_now)); /* (unknown unless read below) */
    int r = procstatus_read_fd(t->status_fd, &sig_status_buf, &st);
    *stp = st;
    if (r < 0)
        return r;
    if (!procstatus_has(&st, PS_SHDPND) || !procstatus_has(&st, PS_SIGIGN) ||
        !procstatus_has(&st, PS_SIGCGT))
        return -EPROTO;
    t->sig_ign = st.sig_ign;
    t->sig_cgt = st.sig_cgt;
    if (shd)
        *shd = st.sig_shd;
    /* What a change of its mappings changes (a mapping replaced by one of the very same
     * sizes aside): its address space's size, and its code's. */
    if (procstatus_has(&st, PS_VMSIZE) && procstatus_has(&st, PS_VMEXE) &&
        procstatus_has(&st, PS_VMLIB))
        t->vm_now = (struct vm_sizes){st.vm_size_kb, st.vm_exe_kb, st.vm_lib_kb};
    return 0;
}

int sigrepair_read_sigstate(struct target *t, uint64_t *shd)
{
    struct procstatus st;
    return sigrepair_read_status(t, shd, &st);
}

/* A signal sent to the process can wake a thread that another one, leaving a ptrace stop, robs
 * of it: a thread is not resumed while such a signal waits. (daemon/DESIGN.md, "Stolen
 * wake-ups".) */
static void rescue_stolen_wakeups(struct target *t, struct thread *thief)
{
    for (size_t i = 0; i < t->nthreads; i++) {
        struct thread *o = t->threads[i];
        if (o == thief || o->zombie || !o->born || o->state != TH_RUNNING ||
            o->interrupt_pending || o->rescue_pending)
            continue;
        /* The thread woken is runnable, "running" in the syscall file, or waking and not
         * yet on a run queue (TASK_WAKING), which the syscall file still shows in its
         * call. So: every thread shown running (busy ones get a stop they did not need)
         * and every one shown in a call that EINTR would break (one asleep there gets an
         * interruption of ours, repaired as any other). A thread in any other call restarts
         * it itself when woken for nothing (read on a pipe, select, futex), and a thread in
         * a ptrace stop is not woken at all (complete_signal() passes it over). */
        struct sysc_info si;
        if (proc_read_syscall(o->syscall_fd, &si) < 0 ||
            !(si.state == SYSC_RUNNING ||
              (si.state == SYSC_IN_SYSCALL && sysc_restartable(si.nr))))
            continue;
        if (ptrace(PTRACE_INTERRUPT, o->tid, 0, 0) == 0) {
            o->rescue_pending = true;
            t->stats.wakeups_rescued++;
        }
    }
}

/* th is in a ptrace stop, about to be resumed: if an ignored signal that it does not block
 * waits in the shared queue, rescue the thread woken for it first (see above). The queue is
 * peeked with PTRACE_PEEKSIGINFO, one system call (~1 us; it is nearly always empty). Only
 * when it holds a signal that th does not block and that the process ignored or did not
 * handle at the last look is /proc/PID/status read (10-20 us, more on a busy machine) for
 * the pending set and the dispositions: a program whose shared queue keeps signals it
 * handles (blocked in all threads but one, say) must not pay that at every sample. (So a
 * handler replaced by SIG_IGN is seen at the next read: a repair, or housekeeping, within a
 * second. A legacy signal queued with RLIMIT_SIGPENDING exhausted has no entry to peek at.) */
void sigrepair_guard_shared(struct thread *th)
{
    struct target *t = th->t;
    if (t->state != T_ATTACHED)
        return;
    /* Zeroed although the kernel fills what it returns: valgrind (3.19) does not know that
     * PTRACE_PEEKSIGINFO writes here. */
    siginfo_t si[8];
    memset(si, 0, sizeof(si));
    struct __ptrace_peeksiginfo_args a = {.off = 0, .flags = PTRACE_PEEKSIGINFO_SHARED,
                                          .nr = 8};
    long n = ptrace(PTRACE_PEEKSIGINFO, th->tid, &a, si);
    if (n <= 0)
        return;
    uint64_t blocked = 0;
    if (ptrace(PTRACE_GETSIGMASK, th->tid, sizeof(blocked), &blocked) < 0)
        blocked = 0;
    bool look = n == (long)(sizeof(si) / sizeof(si[0])); /* maybe more than peeked */
    for (long i = 0; i < n && !look; i++) {
        int sig = si[i].si_signo;
        look = sig >= 1 && sig <= 64 && !(blocked & (1ull << (sig - 1))) &&
               !(t->sig_cgt & (1ull << (sig - 1)) && !(t->sig_ign & (1ull << (sig - 1))));
    }
    uint64_t shd;
    if (!look || sigrepair_read_sigstate(t, &shd) < 0)
        return;
    for (int sig = 1; sig <= 64; sig++) {
        uint64_t bit = 1ull << (sig - 1);
        if ((shd & bit) && !(blocked & bit) && sig_is_ignored(t->sig_ign, t->sig_cgt, sig)) {
            rescue_stolen_wakeups(t, th);
            return;
        }
    }
}

/* Between two repairs of one call the thread gives up the CPU exactly twice (voluntary
 * switches); three or more mean a new call. (daemon/DESIGN.md, "Chains of repairs".) */
#define CHAIN_SWITCHES 2

/* A thread's voluntary context switches (its status): it gave up the CPU to wait (blocking,
 * a ptrace stop), unlike a preemption. Returns 0 or -errno. */
static int thread_vcsw(struct thread *th, uint64_t *vcsw)
{
    struct procstatus st;
    int r = procstatus_read_fd(th->status_fd, &sig_status_buf, &st);
    if (r < 0)
        return r;
    if (!procstatus_has(&st, PS_VCSW))
        return -EPROTO;
    *vcsw = st.vcsw;
    return 0;
}

/* th stopped again in the exit from a call whose repair is already done (rax is
 * -ERESTARTNOHAND: a further signal dequeued, or a rescue, before the restart): that stop is
 * one more voluntary switch, which the chain must not take for a wake-up of its own. */
static void chain_note_stop(struct thread *th, const struct user_regs_struct *regs)
{
    uint64_t vcsw;
    if (th->chain_valid && th->chain_nr == (long)regs->orig_rax &&
        th->chain_args[0] == regs->rdi && th->chain_args[1] == regs->rsi &&
        th->chain_args[2] == regs->rdx && thread_vcsw(th, &vcsw) == 0)
        th->chain_vcsw = vcsw;
}

/* The kernel can rewrite an ignored signal's interruption into a restart: the program
 * would never have been woken without the tracer (traced threads get even ignored
 * signals, which interrupt their system calls). th is stopped with regs, woken by an
 * ignored signal (its own, or one another thread took: rescue_stolen_wakeups). */
void sigrepair_ignored_wakeup(struct thread *th, struct user_regs_struct *regs)
{
    struct target *t = th->t;
    if ((long)regs->rax == -KERNEL_ERESTARTNOHAND) {
        chain_note_stop(th, regs);
        return;
    }
    if ((long)regs->rax != -EINTR || !sysc_restartable((long)regs->orig_rax))
        return;
    /* How long has this call waited? Signals can keep coming, each restarting it: a chain
     * of repairs of the same call (same number and first arguments, and no other wake-up
     * of the thread in between: CHAIN_SWITCHES) is measured from its first start, so the
     * call still ends when its timeout is up instead of being postponed for as long as the
     * signals come. That start is the first signal's arrival: the call may end late by
     * what it waited before it, never early. (An earlier sight of the thread blocked in a
     * call with the same arguments, and one schedule-in since, cannot tell that call from a
     * new one entered after it timed out, when the signal lands before the new one sleeps:
     * taken as the start, it ended waits early, twice in CI under load: an accept and an
     * epoll_pwait of tests/programs/blocker returned their timeouts after a fraction of
     * them. A timeout is a lower bound; lateness is what a busy machine gives anyway.) */
    uint64_t now = now_ns(), run = 0, pcount = 0, vcsw = 0;
    long nr = (long)regs->orig_rax;
    if (proc_read_schedstat(th->schedstat_fd, &run, &pcount) < 0)
        run = 0;
    bool have_vcsw = thread_vcsw(th, &vcsw) == 0;
    bool epoll_ms = nr == SYS_epoll_wait || nr == SYS_epoll_pwait;
    bool in_time = th->chain_limit_ns < 0 ||
                   now - th->chain_repair_ns < (uint64_t)th->chain_limit_ns;
    bool same = th->chain_valid && th->chain_nr == nr && th->chain_args[0] == regs->rdi &&
                th->chain_args[1] == regs->rsi && th->chain_args[2] == regs->rdx && have_vcsw &&
                vcsw == th->chain_vcsw + CHAIN_SWITCHES && in_time &&
                (!epoll_ms || regs->r10 == th->chain_r10);
    int64_t timeout;
    if (!same) {
        th->chain_epoll_ms = (int)regs->r10;
        th->chain_valid = true;
        th->chain_nr = nr;
        th->chain_args[0] = regs->rdi;
        th->chain_args[1] = regs->rsi;
        th->chain_args[2] = regs->rdx;
        th->chain_start_ns = now;
        timeout = sysc_timeout_ns(th->tid, t->pidfd, regs, th->chain_epoll_ms);
    } else {
        timeout = sysc_timeout_ns(th->tid, t->pidfd, regs, th->chain_epoll_ms);
    }
    th->chain_run_ns = run;
    th->chain_vcsw = vcsw;
    if (sysc_repair_ignored(regs, now - th->chain_start_ns, timeout) &&
        ptrace(PTRACE_SETREGS, th->tid, 0, regs) == 0)
        t->stats.syscalls_restarted++;
    if ((long)regs->rax != -KERNEL_ERESTARTNOHAND) {
        th->chain_valid = false; /* completed: the next call is a new one */
        return;
    }
    /* Restarted: the earliest it can time out by itself is its (lowered) epoll timeout, or
     * for the other calls their whole timeout, which the kernel starts over. */
    th->chain_repair_ns = now;
    th->chain_r10 = regs->r10;
    th->chain_limit_ns = epoll_ms && timeout >= 0 ? (int64_t)regs->r10 * 1000000 : timeout;
}

/* In a signal-delivery-stop for sig: if the process ignores it, repair the call it
 * interrupted. */
void sigrepair_ignored_signal(struct thread *th, int sig)
{
    struct target *t = th->t;
    struct user_regs_struct regs;
    if (th->stop_eintr) {
        /* The EINTR came from a job-control stop: the program sees it natively too. The
         * flag stays until the thread is seen past it (back in user mode or in another
         * call): more signals may be delivered before it returns. */
        return;
    }
    if (ptrace(PTRACE_GETREGS, th->tid, 0, &regs) < 0)
        return;
    if ((long)regs.rax == -KERNEL_ERESTARTNOHAND) {
        chain_note_stop(th, &regs);
        return;
    }
    if ((long)regs.rax != -EINTR || !sysc_restartable((long)regs.orig_rax))
        return;
    if (sigrepair_read_sigstate(t, NULL) < 0 || !sig_is_ignored(t->sig_ign, t->sig_cgt, sig))
        return;
    sigrepair_ignored_wakeup(th, &regs);
}

/* In the stop that our PTRACE_INTERRUPT caused: an epoll wait or a socket call with a
 * timeout that it interrupted would now fail with EINTR; make the kernel restart it. */
void sigrepair_interrupted_syscall(struct thread *th)
{
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, th->tid, 0, &regs) < 0)
        return;
    if (sysc_repair_eintr(th->tid, &regs, 0) && ptrace(PTRACE_SETREGS, th->tid, 0, &regs) == 0)
        th->t->stats.syscalls_restarted++;
}
