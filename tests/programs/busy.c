/* busy.c: a multi-threaded CPU-bound target with a known call structure.
 *
 * Each worker thread loops forever: work_alpha (60% of iterations), work_beta (30%) and
 * work_gamma (10%), all spinning in spin(). work_gamma holds an 8 KiB array on its stack, so
 * samples taken inside spin() under it need a stack copy larger than 8 KiB to unwind.
 * With IDLE, that many more threads ("idle-N") that block: the odd ones in a read of a pipe
 * nobody writes to, for good; the even ones in 100 ms sleeps (the main thread sleeps too).
 * Built -O2 without frame pointers. Usage: busy [THREADS] [SECONDS] [IDLE]; prints
 * "ready PID". */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile uint64_t sink;

NOINLINE void spin(unsigned n)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

NOINLINE void work_alpha(void)
{
    spin(60000);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void work_beta(void)
{
    spin(30000);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void work_gamma(void)
{
    volatile char big[8192];
    for (size_t i = 0; i < sizeof(big); i += 64)
        big[i] = (char)i;
    spin(10000);
    sink += big[100];
}

static void *worker(void *arg)
{
    char name[16];
    snprintf(name, sizeof(name), "busy-%d", (int)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        work_alpha();
        work_beta();
        work_gamma();
    }
    return NULL;
}

static int idle_pipe[2];

static void *idler(void *arg)
{
    char name[16];
    int k = (int)(intptr_t)arg;
    snprintf(name, sizeof(name), "idle-%d", k);
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        if (k % 2) {
            char c;
            if (read(idle_pipe[0], &c, 1) <= 0)
                return NULL;
        } else {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    int secs = argc > 2 ? atoi(argv[2]) : 0;
    int idle = argc > 3 ? atoi(argv[3]) : 0;
    pthread_t th[64], ith[64];
    if (n < 1 || n > 64)
        n = 2;
    if (idle < 0 || idle > 64 || pipe(idle_pipe) < 0)
        idle = 0;
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, worker, (void *)(intptr_t)(i + 1));
    for (int i = 0; i < idle; i++)
        pthread_create(&ith[i], NULL, idler, (void *)(intptr_t)(i + 1));
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (secs > 0) {
        sleep((unsigned)secs);
        return 0;
    }
    for (;;)
        pause();
}
