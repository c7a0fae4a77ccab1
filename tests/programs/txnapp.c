/* txnapp.c: an application using libprofd: THREADS threads ("txn-N"), each running COUNT
 * transactions "request-N" of about MS milliseconds of CPU in work_N(); every third one
 * holds a nested transaction "inner-N" around inner_work(). Each finished profile is
 * written to DIR/N-K.json (the inner ones to DIR/N-K-inner.json); errors are counted.
 * Built -O2 without frame pointers.
 *
 * Usage: txnapp SOCKET DIR THREADS COUNT MS [LOOP]
 * With LOOP = 1 it then keeps starting and finishing transactions until stdin closes,
 * printing "ok N" / "err CODE" lines for each (the daemon-restart test). With LOOP = 2 it
 * forks instead: the child, with the parent's handle, runs a transaction of its own and
 * writes its profile to DIR/-1-0child.json; then the parent, to DIR/-1-0parent.json; it prints
 * "fork CHILDPID CHILDRESULT PARENTRESULT". Prints "ready PID" first, "done OK ERRORS"
 * after the threads. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "profd.h"

#define NOINLINE __attribute__((noinline, noclone, noipa)) /* noipa: no identical-code folding */

static struct profd *pd;
static const char *dir;
static int count, ms;
static volatile uint64_t sink;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ok_n, err_n;

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static NOINLINE void spin_for(uint64_t ns)
{
    uint64_t end = cpu_ns() + ns, x = sink;
    while (cpu_ns() < end)
        for (int i = 0; i < 1000; i++) {
            x = x * 6364136223846793005ull + 1;
            __asm__ volatile("" : "+r"(x));
        }
    sink = x;
}

/* One work function per thread slot, so a profile shows whose work it holds. */
#define WORK(n)                                                                               \
    static NOINLINE void work_##n(uint64_t ns)                                                \
    {                                                                                         \
        spin_for(ns);                                                                         \
        __asm__ volatile("" ::: "memory");                                                    \
    }
WORK(0)
WORK(1)
WORK(2)
WORK(3)
WORK(4)
WORK(5)
WORK(6)
WORK(7)
static void (*const works[8])(uint64_t) = {work_0, work_1, work_2, work_3,
                                           work_4, work_5, work_6, work_7};

static NOINLINE void inner_work(uint64_t ns)
{
    spin_for(ns);
    __asm__ volatile("" ::: "memory");
}

static void save(int n, int k, const char *suffix, char *json)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%d-%d%s.json", dir, n, k, suffix);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(json, f);
        fclose(f);
    }
    free(json);
}

static void count_result(int r)
{
    pthread_mutex_lock(&mu);
    if (r == 0)
        ok_n++;
    else
        err_n++;
    pthread_mutex_unlock(&mu);
    if (r < 0)
        fprintf(stderr, "txnapp: %s\n", profd_strerror(r));
}

static void *worker(void *arg)
{
    int n = (int)(intptr_t)arg;
    char name[32], tname[16];
    snprintf(tname, sizeof(tname), "txn-%d", n);
    pthread_setname_np(pthread_self(), tname);
    for (int k = 0; k < count; k++) {
        uint64_t id, inner = 0;
        snprintf(name, sizeof(name), "request-%d", n);
        int r = profd_txn_start(pd, name, NULL, &id);
        count_result(r);
        if (r < 0)
            continue;
        works[n % 8]((uint64_t)ms * 1000000 / 2);
        if (k % 3 == 0) {
            snprintf(name, sizeof(name), "inner-%d", n);
            r = profd_txn_start(pd, name, NULL, &inner);
            count_result(r);
            inner_work((uint64_t)ms * 1000000 / 2);
            if (r == 0) {
                char *json = NULL;
                r = profd_txn_finish(pd, inner, &json);
                count_result(r);
                if (r == 0)
                    save(n, k, "-inner", json);
            }
        } else {
            works[n % 8]((uint64_t)ms * 1000000 / 2);
        }
        char *json = NULL;
        r = profd_txn_finish(pd, id, &json);
        count_result(r);
        if (r == 0)
            save(n, k, "", json);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: txnapp SOCKET DIR THREADS COUNT MS [LOOP]\n");
        return 2;
    }
    pd = profd_open(argv[1]);
    dir = argv[2];
    int threads = atoi(argv[3]);
    count = atoi(argv[4]);
    ms = atoi(argv[5]);
    int loop = argc > 6 ? atoi(argv[6]) : 0;
    if (!pd || threads < 1 || threads > 64)
        return 2;
    printf("ready %d\n", getpid());
    fflush(stdout);
    pthread_t th[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    printf("done %d %d\n", ok_n, err_n);
    fflush(stdout);
    if (loop == 2) {
        /* Fork safety: a transaction open in the parent across the fork. */
        uint64_t open_id;
        int r0 = profd_txn_start(pd, "across-fork", NULL, &open_id);
        pid_t child = fork();
        if (child == 0) {
            uint64_t id;
            char *json = NULL;
            int r = profd_txn_start(pd, "in-child", NULL, &id);
            if (r == 0) {
                work_1(20000000);
                r = profd_txn_finish(pd, id, &json);
            }
            if (r == 0)
                save(-1, 0, "child", json);
            _exit(r < 0 ? -r : 0);
        }
        int st = 0;
        waitpid(child, &st, 0);
        char *json = NULL;
        int r = r0;
        if (r == 0) {
            work_2(20000000);
            r = profd_txn_finish(pd, open_id, &json);
        }
        if (r == 0)
            save(-1, 0, "parent", json);
        printf("fork %d %d %d\n", child, WIFEXITED(st) ? -WEXITSTATUS(st) : -100, r);
        fflush(stdout);
    } else if (loop) {
        /* One transaction per line of input: how each call fares. */
        char line[64];
        while (fgets(line, sizeof(line), stdin)) {
            uint64_t id;
            char *json = NULL;
            int r = profd_txn_start(pd, "loop", NULL, &id);
            if (r == 0) {
                work_0(2000000);
                r = profd_txn_finish(pd, id, &json);
                free(json);
            }
            if (r == 0)
                printf("ok\n");
            else
                printf("err %d %s\n", r, profd_strerror(r));
            fflush(stdout);
        }
    }
    profd_close(pd);
    return 0;
}
