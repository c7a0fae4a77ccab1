/* zleader.c: the main thread calls pthread_exit while two worker threads compute, so the
 * thread group leader is a zombie for the rest of the process's life. Prints "ready PID";
 * runs until killed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) static void zwork(void)
{
    for (;;)
        for (int i = 0; i < 1000000; i++)
            sink = sink * 6364136223846793005ull + 1;
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "zworker");
    zwork();
    return NULL;
}

int main(void)
{
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);
    pthread_create(&th, NULL, worker, NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    pthread_exit(NULL);
}
