/* ptrace_floor.c: the irreducible cost of sampling a running thread with one ptrace stop.
 *
 * A child spins on CLOCK_MONOTONIC (recording every gap longer than a threshold, with its
 * start, in memory shared with the parent) a few frames deep under a 64 KiB stack frame.
 * The parent seizes it (PTRACE_SEIZE, no options) and, once per interval on an absolute
 * clock_nanosleep, does exactly what a stop-based sampler cannot avoid:
 *   PTRACE_INTERRUPT, waitpid (sleeping until the stop), PTRACE_GETREGS,
 *   one process_vm_readv of COPY bytes from sp - 128, PTRACE_CONT.
 * Nothing else: no /proc reads, no unwinding, no event loop.
 *
 * Passes, each over N samples after a warm-up:
 *   timer   the same sleep/wake loop without ptrace: what one wake-up of the tracer costs
 *   clean   the sample loop, tracer CPU from CLOCK_THREAD_CPUTIME_ID over the whole pass
 *           (includes the timer wake-up, as a sampler's tick does)
 *   split   the same with the wall time and thread CPU of every step measured (the extra
 *           clock reads add ~1 us of CPU per sample)
 * and for clean, the child's pause per sample: the recorded gap overlapping
 * [PTRACE_INTERRUPT, PTRACE_CONT return] (or "at most the threshold" when there is none).
 *
 * Usage: ptrace_floor [-n SAMPLES] [-i INTERVAL_US] [-c COPY_BYTES] [-t THRESHOLD_NS]
 *                     [-p TRACER_CPU,CHILD_CPU] [-b]
 * -b keeps the tracer's CPU busy between samples with a nice 19 spinner pinned there (with
 * -p), to tell the cost of waking an idle CPU from that of the stop itself.
 * Output: "key value" lines (times in ns), then a human summary on stderr. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_GAPS (1 << 20)

struct shared {
    volatile int ready, stop;
    volatile size_t ngaps;
    uint64_t start[MAX_GAPS];
    uint64_t len[MAX_GAPS];
};

static struct shared *sh;
static uint64_t threshold = 1000;

static uint64_t clk(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono(void)
{
    return clk(CLOCK_MONOTONIC);
}

static uint64_t tcpu(void)
{
    return clk(CLOCK_THREAD_CPUTIME_ID);
}

static void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0)
        perror("sched_setaffinity");
}

__attribute__((noinline)) static void child_spin(void)
{
    uint64_t prev = mono();
    sh->ready = 1;
    while (!sh->stop) {
        uint64_t now = mono();
        if (now - prev > threshold && sh->ngaps < MAX_GAPS) {
            size_t i = sh->ngaps;
            sh->start[i] = prev;
            sh->len[i] = now - prev;
            sh->ngaps = i + 1;
        }
        prev = now;
    }
}

/* A deep-ish stack: the copy then reads real stack, as it would in a program. */
__attribute__((noinline)) static void child_deep(int depth)
{
    volatile char pad[64 * 1024];
    pad[0] = (char)depth;
    pad[sizeof(pad) - 1] = (char)depth;
    if (depth > 0)
        child_deep(depth - 1);
    else
        child_spin();
    pad[1] = 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

enum { S_INT, S_WAIT, S_REGS, S_COPY, S_CONT, S_SLEEP, NSTEP };
static const char *step_name[NSTEP] = {"interrupt", "waitpid", "getregs", "readv", "cont",
                                       "sleep"};

static char *buf;
static size_t copy_bytes = 16384;
static pid_t child;

/* One sample. With split, fill wall[] and cpu[] per step. Returns 0 or -1. */
static int sample(int split, uint64_t *wall, uint64_t *cpu, uint64_t *t_int, uint64_t *t_cont)
{
    uint64_t w0 = 0, c0 = 0;
#define STEP_BEGIN()                                                                          \
    do {                                                                                      \
        if (split) {                                                                          \
            w0 = mono();                                                                      \
            c0 = tcpu();                                                                      \
        }                                                                                     \
    } while (0)
#define STEP_END(s)                                                                           \
    do {                                                                                      \
        if (split) {                                                                          \
            wall[s] = mono() - w0;                                                            \
            cpu[s] = tcpu() - c0;                                                             \
        }                                                                                     \
    } while (0)
    *t_int = mono();
    STEP_BEGIN();
    if (ptrace(PTRACE_INTERRUPT, child, 0, 0) < 0)
        return -1;
    STEP_END(S_INT);
    STEP_BEGIN();
    int st;
    if (waitpid(child, &st, __WALL) != child || !WIFSTOPPED(st) || (st >> 16) != PTRACE_EVENT_STOP)
        return -1;
    STEP_END(S_WAIT);
    STEP_BEGIN();
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, child, 0, &regs) < 0)
        return -1;
    STEP_END(S_REGS);
    STEP_BEGIN();
    struct iovec local = {buf, copy_bytes}, remote = {(void *)(uintptr_t)(regs.rsp - 128), copy_bytes};
    if (process_vm_readv(child, &local, 1, &remote, 1, 0) <= 0)
        return -1;
    STEP_END(S_COPY);
    STEP_BEGIN();
    if (ptrace(PTRACE_CONT, child, 0, 0) < 0)
        return -1;
    STEP_END(S_CONT);
    *t_cont = mono();
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = 3000;
    uint64_t interval = 1000000;
    int tracer_cpu = -1, child_cpu = -1, busy = 0;
    int c;
    while ((c = getopt(argc, argv, "n:i:c:t:p:b")) != -1) {
        switch (c) {
        case 'n':
            n = strtoull(optarg, NULL, 10);
            break;
        case 'i':
            interval = strtoull(optarg, NULL, 10) * 1000;
            break;
        case 'c':
            copy_bytes = strtoull(optarg, NULL, 10);
            break;
        case 't':
            threshold = strtoull(optarg, NULL, 10);
            break;
        case 'b':
            busy = 1;
            break;
        case 'p':
            if (sscanf(optarg, "%d,%d", &tracer_cpu, &child_cpu) != 2) {
                fprintf(stderr, "-p TRACER_CPU,CHILD_CPU\n");
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: ptrace_floor [-n SAMPLES] [-i INTERVAL_US] [-c COPY_BYTES] "
                            "[-t THRESHOLD_NS] [-p TRACER_CPU,CHILD_CPU] [-b]\n");
            return 2;
        }
    }
    if (n < 10)
        n = 10;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    buf = malloc(copy_bytes);
    if (sh == MAP_FAILED || !buf)
        return 1;
    pid_t parent = getpid();
    child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        pin(child_cpu);
        child_deep(2);
        _exit(0);
    }
    pid_t hog = -1;
    if (busy) {
        hog = fork();
        if (hog == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            pin(tracer_cpu);
            setpriority(PRIO_PROCESS, 0, 19);
            for (;;)
                __asm__ volatile("" ::: "memory");
        }
    }
    pin(tracer_cpu);
    while (!sh->ready)
        usleep(1000);
    if (ptrace(PTRACE_SEIZE, child, 0, 0) < 0) {
        perror("PTRACE_SEIZE");
        kill(child, SIGKILL);
        return 1;
    }
    size_t warm = n / 10 < 100 ? 100 : n / 10;
    uint64_t *t_int = calloc(n, sizeof(uint64_t)), *t_cont = calloc(n, sizeof(uint64_t));
    uint64_t *wall[NSTEP], *cpu[NSTEP];
    for (int s = 0; s < NSTEP; s++) {
        wall[s] = calloc(n, sizeof(uint64_t));
        cpu[s] = calloc(n, sizeof(uint64_t));
    }
    uint64_t w[NSTEP], cp[NSTEP], a, b;
    int rc = 0;

    /* timer: the wake-ups alone. */
    uint64_t next = mono() + interval;
    uint64_t c0 = tcpu();
    for (size_t i = 0; i < n; i++, next += interval)
        sleep_until(next);
    double timer_cpu = (double)(tcpu() - c0) / (double)n;

    /* warm-up, then clean. */
    next = mono() + interval;
    for (size_t i = 0; i < warm; i++, next += interval) {
        sleep_until(next);
        if (sample(0, w, cp, &a, &b) < 0) {
            rc = 1;
            goto out;
        }
    }
    size_t gaps_before = sh->ngaps;
    c0 = tcpu();
    for (size_t i = 0; i < n; i++, next += interval) {
        sleep_until(next);
        if (sample(0, w, cp, &t_int[i], &t_cont[i]) < 0) {
            rc = 1;
            goto out;
        }
    }
    double clean_cpu = (double)(tcpu() - c0) / (double)n;
    size_t gaps_after = sh->ngaps;

    /* split: per step. */
    for (size_t i = 0; i < n; i++, next += interval) {
        uint64_t s0 = mono(), sc = tcpu();
        sleep_until(next);
        wall[S_SLEEP][i] = mono() - s0;
        cpu[S_SLEEP][i] = tcpu() - sc;
        if (sample(1, w, cp, &a, &b) < 0) {
            rc = 1;
            goto out;
        }
        for (int s = 0; s < S_SLEEP; s++) {
            wall[s][i] = w[s];
            cpu[s][i] = cp[s];
        }
    }

    /* The child's pause per clean sample: the gap overlapping [interrupt, cont]. Gaps are
     * in time order. */
    uint64_t *pause = calloc(n, sizeof(uint64_t));
    size_t g = gaps_before, matched = 0;
    for (size_t i = 0; i < n; i++) {
        while (g < gaps_after && sh->start[g] + sh->len[g] < t_int[i])
            g++;
        pause[i] = threshold;
        if (g < gaps_after && sh->start[g] <= t_cont[i]) {
            pause[i] = sh->len[g];
            matched++;
        }
    }
    printf("samples %zu\n", n);
    printf("interval_ns %llu\n", (unsigned long long)interval);
    printf("copy_bytes %zu\n", copy_bytes);
    printf("threshold_ns %llu\n", (unsigned long long)threshold);
    printf("timer_cpu_ns %.0f\n", timer_cpu);
    printf("tracer_cpu_ns %.0f\n", clean_cpu);
    printf("pauses_matched %zu\n", matched);
    printf("pause_p50_ns %llu\n", (unsigned long long)pct(pause, n, 0.5));
    printf("pause_p99_ns %llu\n", (unsigned long long)pct(pause, n, 0.99));
    uint64_t split_cpu_total = 0;
    for (int s = 0; s < NSTEP; s++) {
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += cpu[s][i];
        if (s != S_SLEEP)
            split_cpu_total += sum;
        printf("step_%s_cpu_mean_ns %.0f\n", step_name[s], (double)sum / (double)n);
        printf("step_%s_wall_p50_ns %llu\n", step_name[s],
               (unsigned long long)pct(wall[s], n, 0.5));
    }
    printf("split_ptrace_cpu_mean_ns %.0f\n", (double)split_cpu_total / (double)n);
    fprintf(stderr,
            "ptrace_floor: %zu samples every %llu us, %zu-byte copy: tracer %.1f us CPU per "
            "sample (a bare timer wake-up %.1f us); child pause p50 %.1f us, p99 %.1f us\n",
            n, (unsigned long long)(interval / 1000), copy_bytes, clean_cpu / 1e3,
            timer_cpu / 1e3, (double)pct(pause, n, 0.5) / 1e3, (double)pct(pause, n, 0.99) / 1e3);
out:
    if (rc)
        fprintf(stderr, "ptrace_floor: a ptrace step failed: %s\n", strerror(errno));
    sh->stop = 1;
    ptrace(PTRACE_DETACH, child, 0, 0); /* stopped or not: the child is killed next */
    kill(child, SIGKILL);
    waitpid(child, NULL, __WALL);
    if (hog > 0) {
        kill(hog, SIGKILL);
        waitpid(hog, NULL, 0);
    }
    return rc;
}
