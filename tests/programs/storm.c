/* storm.c: targets that change under the profiler as fast as they can. Built -O2 without
 * frame pointers. Prints "ready PID", then:
 *
 *   storm forkexec SECONDS  forks a child that execs /bin/true, waits for it, and again, for
 *                           SECONDS; then prints "done OK of N" (OK of the N children
 *                           exited 0) and exits 0
 *   storm selfexec N        waits for a line on stdin, then execs itself N times; each
 *                           generation starts a thread, computes ~5 ms on both, and execs
 *                           from the main thread or (every other time) from the new one;
 *                           the last prints "done N" and exits 0
 *   storm exit MS           computes MS milliseconds on two threads, then exits 0 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile uint64_t sink;
static char *self;
static int gen, total;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static NOINLINE void storm_work(uint64_t ns)
{
    uint64_t end = mono_ns() + ns, x = sink;
    while (mono_ns() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ull + 1;
    sink = x;
}

static void next_generation(void)
{
    char g[16], t[16];
    snprintf(g, sizeof(g), "%d", gen + 1);
    snprintf(t, sizeof(t), "%d", total);
    execl(self, self, "selfexec-gen", g, t, (char *)NULL);
    perror("execl");
    exit(1);
}

static void *gen_thread(void *arg)
{
    storm_work(5000000);
    if (arg)
        next_generation(); /* from a thread that is not the leader */
    for (;;)
        storm_work(1000000);
    return NULL;
}

static void *exit_thread(void *arg)
{
    storm_work(*(uint64_t *)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    self = argv[0];
    if (!strcmp(argv[1], "selfexec-gen")) {
        gen = atoi(argv[2]);
        total = atoi(argv[3]);
        if (gen >= total) {
            printf("done %d\n", gen);
            fflush(stdout);
            return 0;
        }
        pthread_t th;
        bool from_thread = gen % 2 == 1;
        pthread_create(&th, NULL, gen_thread, from_thread ? (void *)1 : NULL);
        storm_work(5000000);
        if (!from_thread)
            next_generation();
        pthread_join(th, NULL); /* the thread execs */
        return 1;
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!strcmp(argv[1], "forkexec")) {
        uint64_t end = mono_ns() + (uint64_t)atoi(argv[2]) * 1000000000ull;
        int ok = 0, n = 0;
        while (mono_ns() < end) {
            n++;
            pid_t c = fork();
            if (c == 0) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            int st;
            if (c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0)
                ok++;
        }
        printf("done %d of %d\n", ok, n);
        fflush(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "selfexec")) {
        char line[16];
        if (!fgets(line, sizeof(line), stdin))
            return 1;
        total = atoi(argv[2]);
        gen = 0;
        next_generation();
    }
    if (!strcmp(argv[1], "exit")) {
        uint64_t ns = (uint64_t)atoi(argv[2]) * 1000000ull;
        pthread_t th;
        pthread_create(&th, NULL, exit_thread, &ns);
        storm_work(ns);
        pthread_join(th, NULL);
        return 0;
    }
    return 2;
}
