/* deep.c: threads spinning at the bottom of a deep stack, for the kernel's stack copies.
 *
 * Each of two worker threads calls descend(LEVELS), each level holding a 24 KiB array on its
 * stack, and spins in spin_deep() at the bottom: a complete unwind needs about
 * LEVELS x 24 KiB of stack copied. With 2 levels (48 KiB) the kernel's first 16 KiB copy is
 * too short and must grow; with 4 (96 KiB) no copy of the kernel's (at most 65 528 bytes)
 * is enough. Built -O2 without frame pointers. Usage: deep LEVELS; prints "ready PID". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile uint64_t sink;
static int levels = 2;

NOINLINE void spin_deep(void)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < 200000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

NOINLINE void descend(int n)
{
    volatile char frame[24 * 1024];
    for (size_t i = 0; i < sizeof(frame); i += 256)
        frame[i] = (char)i;
    if (n > 1)
        descend(n - 1);
    else
        spin_deep();
    sink += frame[512];
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;)
        descend(levels);
    return NULL;
}

int main(int argc, char **argv)
{
    levels = argc > 1 ? atoi(argv[1]) : 2;
    if (levels < 1 || levels > 64)
        levels = 2;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 4 << 20);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], &a, worker, NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    for (;;)
        pause();
}
