/* hostile.c: a process that makes unwinding hard on purpose. Thread "badrbp" spins in code
 * without unwind information with rbp = 0xfffffffffffffff8 (libunwind's frame-chain guess
 * then asks for memory at the very top of the address space); the main thread computes
 * normally. Prints "ready PID"; runs until killed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

__asm__(".text\n"
        ".globl spin_badrbp\n"
        ".type spin_badrbp, @function\n"
        "spin_badrbp:\n"
        "  movabs $0xfffffffffffffff8, %rbp\n"
        "1: pause\n"
        "  jmp 1b\n");
void spin_badrbp(void);

static void *bad(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "badrbp");
    spin_badrbp();
    return NULL;
}

static volatile uint64_t sink;

__attribute__((noinline)) static void compute(void)
{
    for (;;)
        for (int i = 0; i < 1000000; i++)
            sink = sink * 6364136223846793005ull + 1;
}

int main(void)
{
    pthread_t th;
    pthread_create(&th, NULL, bad, NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    compute();
}
