/* deep.c: threads spinning at the bottom of a deep stack, for the kernel's stack copies.
 *
 * Each of two worker threads calls descend(LEVELS), each level holding a 24 KiB array on its
 * stack, and spins in spin_deep() at the bottom: a complete unwind needs about
 * LEVELS x 24 KiB of stack copied. With 2 levels (48 KiB) the kernel's first 16 KiB copy is
 * too short and must grow; with 4 (96 KiB) no copy of the kernel's (at most 65 528 bytes)
 * is enough. Built -O2 without frame pointers. Usage: deep LEVELS; prints "ready PID".
 *
 * deep stray: the threads spin instead in spin_stray(), code without CFI (libunwind falls
 * back to the rbp chain there), with rbp pointing 40 KiB past the end of the thread's stack
 * mapping: an unwind that reads there has gone astray, its read says nothing of how deep the
 * stack is (a library loaded since the maps were read gives such unwinds too). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* spin_stray(rbp): rbp set to its argument while it spins; no CFI (no FDE covers it). */
__asm__(".text\n"
        ".globl spin_stray\n"
        ".type spin_stray, @function\n"
        "spin_stray:\n"
        "  push %rbp\n"
        "  mov %rdi, %rbp\n"
        "  mov $200000, %ecx\n"
        "1: dec %ecx\n"
        "  jnz 1b\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size spin_stray, .-spin_stray\n");
void spin_stray(uint64_t rbp);

/* The end of the mapping holding addr, from /proc/self/maps (0: not found). */
static uint64_t mapping_end(uint64_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uint64_t end = 0;
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && addr >= lo && addr < hi)
            end = hi;
    }
    if (f)
        fclose(f);
    return end;
}

static void *worker(void *arg)
{
    if (arg) {
        volatile char here;
        uint64_t past = mapping_end((uint64_t)(uintptr_t)&here);
        if (!past) {
            fprintf(stderr, "deep: no mapping holds the stack\n");
            exit(1);
        }
        for (;;)
            spin_stray(past + 40 * 1024);
    }
    for (;;)
        descend(levels);
    return NULL;
}

int main(int argc, char **argv)
{
    bool stray = argc > 1 && !strcmp(argv[1], "stray");
    levels = argc > 1 ? atoi(argv[1]) : 2;
    if (!stray && (levels < 1 || levels > 64))
        levels = 2;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 4 << 20);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], &a, worker, stray ? &th[i] : NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    for (;;)
        pause();
}
