/* sigprof_times.c: LD_PRELOAD shim that timestamps an in-process profiler's samples.
 *
 * gperftools' profiler writes no sample times. Preloaded before libprofiler.so, this
 * interposes sigaction(): when a SIGPROF handler is installed, it installs its own, which
 * reads CLOCK_MONOTONIC (vDSO, ~20-30 ns: async-signal-safe and far below the benchmark's
 * gap threshold) and then calls the profiler's handler. The entry time lies inside the
 * pause the signal causes the interrupted thread, so the benchmark attributes pauses to
 * samples the same way as for perf, whose samples are also taken inside the target. At
 * exit the times are written, one per line, to $SIGPROF_TIMES_OUT. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TIMES (1 << 20)

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static uint64_t times[MAX_TIMES];
static atomic_size_t ntimes;
static struct sigaction theirs;

static void wrapper(int sig, siginfo_t *si, void *uc)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    size_t i = atomic_fetch_add(&ntimes, 1);
    if (i < MAX_TIMES)
        times[i] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (theirs.sa_flags & SA_SIGINFO)
        theirs.sa_sigaction(sig, si, uc);
    else if (theirs.sa_handler != SIG_IGN && theirs.sa_handler != SIG_DFL)
        theirs.sa_handler(sig);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    static sigaction_fn real;
    if (!real)
        real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGPROF || !act || act->sa_handler == SIG_IGN || act->sa_handler == SIG_DFL)
        return real(sig, act, old);
    struct sigaction mine = *act;
    theirs = *act;
    mine.sa_flags |= SA_SIGINFO;
    mine.sa_sigaction = wrapper;
    int r = real(sig, &mine, old);
    if (r == 0 && old && old->sa_sigaction == wrapper)
        *old = theirs;
    return r;
}

__attribute__((destructor)) static void dump(void)
{
    const char *path = getenv("SIGPROF_TIMES_OUT");
    if (!path)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    size_t n = atomic_load(&ntimes);
    if (n > MAX_TIMES)
        n = MAX_TIMES;
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%llu\n", (unsigned long long)times[i]);
    fclose(f);
}
