/* phases.c: a target that knows where its own time went, to hold profiles against.
 *
 * Each worker thread loops over three phases: phase_long (about 600 us of arithmetic),
 * phase_mid (about 300 us) and phase_short (about 150 us: qsort of an 8 KiB array on its
 * stack, refilled each time, so its samples have a deeper stack and need a larger copy).
 * An iteration is about 1.05 ms, close to a 999 Hz interval, the case where a fixed sampling
 * period aliases with the work. The amounts of work are calibrated once at start on this
 * CPU; each phase then does the same work every time.
 *
 * At every phase boundary a worker reads CLOCK_MONOTONIC and its own CPU clock and adds the
 * phase's wall and CPU time to its totals, published under a sequence count. The main thread
 * answers each line on stdin with the totals of all workers at that moment (the phase in
 * progress counted up to now), so a test can take the truth of any window:
 *
 *   snap T_NS LONG_WALL MID_WALL SHORT_WALL LONG_CPU MID_CPU SHORT_CPU   (nanoseconds)
 *
 * With PHASES_TIMELINE=N in its environment each worker also records its first N boundaries
 * (when, and the phase begun), which "dump" prints, so that each sample of a profile can be
 * held against the phase its thread was in at the sample's time.
 *
 * Usage: phases [THREADS] [SHORT_US]; prints "ready PID" once calibrated. Built -O2 without
 * frame pointers. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define MAX_THREADS 64
#define NPHASES 3
#define SORT_INTS 2048 /* 8 KiB */

struct worker {
    pthread_t thread;
    clockid_t cpu_clock;
    /* Written by the worker only; read by the main thread under seq (odd while writing). */
    _Atomic uint64_t seq;
    _Atomic uint64_t wall[NPHASES], cpu[NPHASES];
    _Atomic int phase;                      /* the phase in progress */
    _Atomic uint64_t phase_wall, phase_cpu; /* when it began */
    pid_t tid;
    /* With PHASES_TIMELINE=N: the first N boundaries (when, and the phase begun). */
    struct mark {
        uint64_t wall_ns;
        int phase;
    } *timeline;
    _Atomic size_t nmarks;
} __attribute__((aligned(64)));

static struct worker workers[MAX_THREADS];
static size_t timeline_max;
static volatile uint64_t sink;
static unsigned long long spins_long, spins_mid;
static unsigned sorts_short;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

NOINLINE void spin(unsigned long long n)
{
    uint64_t x = sink;
    for (unsigned long long i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* A phase ends: its time is added to the totals, and the next one begins now. Called at the
 * end of each phase's function, so that the boundary's own time is on that phase's stack, and
 * its CPU clock read first: that read is a system call, where the kernel may preempt the
 * thread (its slice found used up), and the wait is then the phase's as its stack says. */
static void boundary(struct worker *w, int next)
{
    uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall = clock_ns(CLOCK_MONOTONIC);
    int cur = atomic_load_explicit(&w->phase, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->seq, 1, memory_order_acq_rel);
    atomic_store_explicit(&w->wall[cur],
                          atomic_load_explicit(&w->wall[cur], memory_order_relaxed) + wall -
                              atomic_load_explicit(&w->phase_wall, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&w->cpu[cur],
                          atomic_load_explicit(&w->cpu[cur], memory_order_relaxed) + cpu -
                              atomic_load_explicit(&w->phase_cpu, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&w->phase, next, memory_order_relaxed);
    atomic_store_explicit(&w->phase_wall, wall, memory_order_relaxed);
    atomic_store_explicit(&w->phase_cpu, cpu, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->seq, 1, memory_order_acq_rel);
    size_t k = atomic_load_explicit(&w->nmarks, memory_order_relaxed);
    if (k < timeline_max) {
        w->timeline[k] = (struct mark){wall, next};
        atomic_store_explicit(&w->nmarks, k + 1, memory_order_release);
    }
}

NOINLINE void phase_long(struct worker *w)
{
    spin(spins_long);
    boundary(w, 1);
    __asm__ volatile("" ::: "memory"); /* (no tail call: the phase stays on the stack) */
}

NOINLINE void phase_mid(struct worker *w)
{
    spin(spins_mid);
    boundary(w, 2);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void sort_once(unsigned seed)
{
    int a[SORT_INTS];
    uint32_t x = seed;
    for (int i = 0; i < SORT_INTS; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (int)(x >> 8);
    }
    qsort(a, SORT_INTS, sizeof(a[0]), cmp_int);
    sink += (uint64_t)a[SORT_INTS / 2];
}

NOINLINE void phase_short(struct worker *w, unsigned seed)
{
    for (unsigned i = 0; i < sorts_short; i++)
        sort_once(seed + i);
    boundary(w, 0);
    __asm__ volatile("" ::: "memory");
}

static void *work(void *arg)
{
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "phases-%u", (unsigned)(w - workers) % MAX_THREADS + 1);
    pthread_setname_np(pthread_self(), name);
    unsigned seed = (unsigned)(w - workers) * 7919u;
    w->tid = gettid();
    atomic_store_explicit(&w->phase_wall, clock_ns(CLOCK_MONOTONIC), memory_order_relaxed);
    atomic_store_explicit(&w->phase_cpu, clock_ns(CLOCK_THREAD_CPUTIME_ID),
                          memory_order_relaxed);
    atomic_fetch_add_explicit(&w->seq, 2, memory_order_release); /* started */
    for (;;) {
        phase_long(w);
        phase_mid(w);
        phase_short(w, seed++);
    }
    return NULL;
}

/* CPU nanoseconds of the quickest of five runs of f(arg). */
static uint64_t fastest(void (*f)(unsigned long long), unsigned long long arg)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        f(arg);
        uint64_t t = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        if (t < best)
            best = t;
    }
    return best ? best : 1;
}

static void sort_n(unsigned long long n)
{
    for (unsigned long long i = 0; i < n; i++)
        sort_once((unsigned)i);
}

static void calibrate(unsigned short_us)
{
    double spin_ns = (double)fastest(spin, 2000000) / 2000000;
    double sort_ns = (double)fastest(sort_n, 20) / 20;
    spins_long = (unsigned long long)(600000 / spin_ns);
    spins_mid = (unsigned long long)(300000 / spin_ns);
    sorts_short = (unsigned)(short_us * 1000.0 / sort_ns + 0.5);
    if (!sorts_short)
        sorts_short = 1;
}

/* The timelines so far, "mark TID WALL_NS PHASE" a line, then "marks N". */
static void dump(int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t k = atomic_load_explicit(&workers[i].nmarks, memory_order_acquire);
        for (size_t j = 0; j < k; j++)
            printf("mark %d %llu %d\n", (int)workers[i].tid,
                   (unsigned long long)workers[i].timeline[j].wall_ns, workers[i].timeline[j].phase);
        total += k;
    }
    printf("marks %zu\n", total);
    fflush(stdout);
}

static void snapshot(int n)
{
    uint64_t wall[NPHASES] = {0}, cpu[NPHASES] = {0};
    uint64_t now = 0;
    for (int i = 0; i < n; i++) {
        struct worker *w = &workers[i];
        uint64_t s, ww[NPHASES], cc[NPHASES], pw, pc, nw, nc;
        int ph;
        do {
            while ((s = atomic_load_explicit(&w->seq, memory_order_acquire)) & 1)
                ;
            for (int p = 0; p < NPHASES; p++) {
                ww[p] = atomic_load_explicit(&w->wall[p], memory_order_relaxed);
                cc[p] = atomic_load_explicit(&w->cpu[p], memory_order_relaxed);
            }
            ph = atomic_load_explicit(&w->phase, memory_order_relaxed);
            pw = atomic_load_explicit(&w->phase_wall, memory_order_relaxed);
            pc = atomic_load_explicit(&w->phase_cpu, memory_order_relaxed);
            nc = clock_ns(w->cpu_clock);
            nw = clock_ns(CLOCK_MONOTONIC);
        } while (atomic_load_explicit(&w->seq, memory_order_acquire) != s);
        if (nw > pw)
            ww[ph] += nw - pw;
        if (nc > pc)
            cc[ph] += nc - pc;
        for (int p = 0; p < NPHASES; p++) {
            wall[p] += ww[p];
            cpu[p] += cc[p];
        }
        now = nw;
    }
    printf("snap %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)now,
           (unsigned long long)wall[0], (unsigned long long)wall[1], (unsigned long long)wall[2],
           (unsigned long long)cpu[0], (unsigned long long)cpu[1], (unsigned long long)cpu[2]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    unsigned short_us = argc > 2 ? (unsigned)atoi(argv[2]) : 150;
    if (n < 1 || n > MAX_THREADS)
        n = 2;
    calibrate(short_us);
    const char *tl = getenv("PHASES_TIMELINE");
    if (tl && atol(tl) > 0) {
        timeline_max = (size_t)atol(tl);
        for (int i = 0; i < n; i++)
            if (!(workers[i].timeline = calloc(timeline_max, sizeof(struct mark))))
                return 1;
    }
    for (int i = 0; i < n; i++) {
        pthread_create(&workers[i].thread, NULL, work, &workers[i]);
        pthread_getcpuclockid(workers[i].thread, &workers[i].cpu_clock);
    }
    for (int i = 0; i < n; i++)
        while (!atomic_load_explicit(&workers[i].seq, memory_order_acquire))
            usleep(1000);
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        if (!strncmp(line, "dump", 4))
            dump(n);
        else
            snapshot(n);
    }
    return 0;
}
