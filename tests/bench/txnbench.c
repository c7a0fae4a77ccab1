/* txnbench.c: what the client library costs the application.
 *
 * Usage: txnbench SOCKET [N], or txnbench SOCKET cold MS K: K transactions of MS ms of work
 * one after the other (the first attaches the process), printing "finish_ms I T PENDING" for
 * each (T the finish's time, PENDING 1 if the profile says frames wait for symbols).
 * txnbench SOCKET spans N: beside 4 threads that spin, N transactions of 200 us of work on
 * one thread, every tenth finished with its profile and the others discarded: the time of
 * each start, discard and finish, p50 and p99 (in nanoseconds), after 20 warm-up ones (the
 * first attaches the process; a finish's reply says whether profd reads its thread
 * context, and from then on starts and discards publish there without a message, unless
 * $PROFD_THREAD_CONTEXT=0). tests/bench/spans.py runs it both ways.
 * 0. The first two transactions of 200 ms of a process new to profd: how long each finish
 *    takes (the first one pays for what profd had not yet read of the process's files);
 * 1. N start + discard pairs on one thread (the process attached by the first): the
 *    round-trip latency of txn_start and of txn_discard, p50 and p99;
 * 2. 20 transactions of 1 s with 4 threads busy, sampled at the daemon's rate: the time
 *    txn_finish takes to return the profile (symbolized, formatted), p50 and max.
 * Prints one "name value" line per figure (microseconds or milliseconds as named). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profd.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double q)
{
    qsort(v, n, sizeof(*v), cmp);
    size_t i = (size_t)(q * (double)n);
    return v[i < n ? i : n - 1];
}

static atomic_int stop;
static volatile uint64_t sink;

static void *busy(void *arg)
{
    (void)arg;
    uint64_t x = 1;
    while (!atomic_load(&stop))
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005ull + 1, sink = x;
    return NULL;
}

static atomic_int finishes;

/* Transactions of 5 ms, each waiting for its profile. */
static void *finisher(void *arg)
{
    struct profd *p = arg;
    while (!atomic_load(&stop)) {
        uint64_t id;
        if (profd_txn_start(p, "finisher", NULL, &id) != 0)
            continue;
        usleep(5000); /* waiting (not computing: the CPUs stay free for the measuring thread) */
        char *json = NULL;
        if (profd_txn_finish(p, id, &json) == 0)
            atomic_fetch_add(&finishes, 1);
        free(json);
    }
    return NULL;
}

/* Round trips of 100 bytes over a socketpair to a child that echoes them. */
static void socket_floor(uint64_t *v, size_t n)
{
    int sv[2];
    char buf[256] = {0};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        close(sv[0]);
        for (;;) {
            ssize_t k = read(sv[1], buf, sizeof(buf));
            if (k <= 0 || write(sv[1], buf, (size_t)k) != k)
                _exit(0);
        }
    }
    close(sv[1]);
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (write(sv[0], buf, 100) != 100 || read(sv[0], buf, sizeof(buf)) <= 0)
            break;
        v[i] = now_ns() - t0;
    }
    close(sv[0]);
    waitpid(c, NULL, 0);
}

static void spin_ns(uint64_t ns)
{
    uint64_t x = 1, end = now_ns() + ns;
    while (now_ns() < end)
        for (int j = 0; j < 100; j++)
            x = x * 6364136223846793005ull + 1, sink = x;
}

/* The spans mode (see the top). */
static int spans(const char *sock, size_t n)
{
    struct profd *p = profd_open(sock);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, busy, NULL);
    uint64_t *st = calloc(n, sizeof(*st)), *dt = calloc(n, sizeof(*dt)),
             *ft = calloc(n / 10 + 1, sizeof(*ft));
    size_t nd = 0, nf = 0;
    int errors = 0;
    for (size_t i = 0; i < n + 20; i++) {
        uint64_t id, t0 = now_ns();
        int e = p ? profd_txn_start(p, "span", NULL, &id) : PROFD_ENOMEM;
        uint64_t t1 = now_ns();
        if (e != 0) {
            fprintf(stderr, "txnbench: start: %s\n", profd_strerror(e));
            return 1;
        }
        spin_ns(200000);
        bool profile = i < 20 ? true : i % 10 == 0;
        char *json = NULL;
        uint64_t t2 = now_ns();
        e = profile ? profd_txn_finish(p, id, &json) : profd_txn_discard(p, id);
        uint64_t t3 = now_ns();
        free(json);
        errors += e != 0;
        if (i < 20)
            continue;
        st[i - 20] = t1 - t0;
        if (profile)
            ft[nf++] = t3 - t2;
        else
            dt[nd++] = t3 - t2;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    printf("start_p50_ns %llu\nstart_p99_ns %llu\n", (unsigned long long)pct(st, n, 0.5),
           (unsigned long long)pct(st, n, 0.99));
    printf("discard_p50_ns %llu\ndiscard_p99_ns %llu\n", (unsigned long long)pct(dt, nd, 0.5),
           (unsigned long long)pct(dt, nd, 0.99));
    printf("finish_p50_ns %llu\nfinish_p99_ns %llu\n", (unsigned long long)pct(ft, nf, 0.5),
           (unsigned long long)pct(ft, nf, 0.99));
    printf("errors %d\n", errors);
    profd_close(p);
    return 0;
}

/* The cold mode: a process new to profd, its first transactions. */
static int cold(const char *sock, int ms, int k)
{
    struct profd *p = profd_open(sock);
    for (int i = 0; i < k; i++) {
        uint64_t id;
        if (!p || profd_txn_start(p, "cold", NULL, &id) != 0) {
            fprintf(stderr, "txnbench: cannot reach profd at %s\n", sock);
            return 1;
        }
        uint64_t x = 1, end = now_ns() + (uint64_t)ms * 1000000ull;
        while (now_ns() < end)
            for (int j = 0; j < 10000; j++)
                x = x * 6364136223846793005ull + 1, sink = x;
        char *json = NULL;
        uint64_t t0 = now_ns();
        int e = profd_txn_finish(p, id, &json);
        double t = (double)(now_ns() - t0) / 1e6;
        if (e != 0) {
            fprintf(stderr, "txnbench: finish: %s\n", profd_strerror(e));
            return 1;
        }
        printf("finish_ms %d %.2f %d\n", i, t, json && strstr(json, "\"symbols_pending\":true") != NULL);
        fflush(stdout);
        free(json);
    }
    profd_close(p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: txnbench SOCKET [N] | SOCKET cold MS K\n");
        return 2;
    }
    if (argc > 4 && !strcmp(argv[2], "cold"))
        return cold(argv[1], atoi(argv[3]), atoi(argv[4]));
    if (argc > 3 && !strcmp(argv[2], "spans"))
        return spans(argv[1], (size_t)atoi(argv[3]));
    size_t n = argc > 2 ? (size_t)atoi(argv[2]) : 5000;
    struct profd *p = profd_open(argv[1]);
    uint64_t id;
    /* 0. The first transactions of a process new to profd (its first start attaches it):
     * 200 ms of work each, and the time their finish takes. The first pays for whatever
     * profd had not read yet of the process's files. */
    double first_ms[2];
    for (int k = 0; k < 2; k++) {
        if (!p || profd_txn_start(p, k ? "second" : "first", NULL, &id) != 0) {
            fprintf(stderr, "txnbench: cannot reach profd at %s\n", argv[1]);
            return 1;
        }
        uint64_t x = 1, end = now_ns() + 200000000ull;
        while (now_ns() < end)
            for (int i = 0; i < 10000; i++)
                x = x * 6364136223846793005ull + 1, sink = x;
        char *json = NULL;
        uint64_t t0 = now_ns();
        int e = profd_txn_finish(p, id, &json);
        first_ms[k] = (double)(now_ns() - t0) / 1e6;
        free(json);
        if (e != 0) {
            fprintf(stderr, "txnbench: finish: %s\n", profd_strerror(e));
            return 1;
        }
    }
    printf("first_finish_ms %.1f\nsecond_finish_ms %.1f\n", first_ms[0], first_ms[1]);
    uint64_t *st = calloc(n, sizeof(*st)), *dt = calloc(n, sizeof(*dt));
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        int e = profd_txn_start(p, "bench", NULL, &id);
        if (e != 0) {
            fprintf(stderr, "txnbench: start %zu: %s\n", i, profd_strerror(e));
            return 1;
        }
        uint64_t t1 = now_ns();
        profd_txn_discard(p, id);
        dt[i] = now_ns() - t1;
        st[i] = t1 - t0;
    }
    printf("start_p50_us %.1f\nstart_p99_us %.1f\n", (double)pct(st, n, 0.5) / 1e3,
           (double)pct(st, n, 0.99) / 1e3);
    printf("discard_p50_us %.1f\ndiscard_p99_us %.1f\n", (double)pct(dt, n, 0.5) / 1e3,
           (double)pct(dt, n, 0.99) / 1e3);

    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, busy, NULL);
    uint64_t fin[20];
    size_t nf = 0;
    for (int k = 0; k < 20; k++) {
        if (profd_txn_start(p, "one-second", NULL, &id) != 0)
            return 1;
        uint64_t end = now_ns() + 1000000000ull, x = 1;
        while (now_ns() < end)
            for (int i = 0; i < 1000; i++)
                x = x * 6364136223846793005ull + 1, sink = x;
        char *json = NULL;
        uint64_t t0 = now_ns();
        int r = profd_txn_finish(p, id, &json);
        uint64_t t1 = now_ns();
        if (r == 0)
            fin[nf++] = t1 - t0;
        free(json);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    if (nf) {
        printf("finish_1s_4threads_p50_ms %.2f\n", (double)pct(fin, nf, 0.5) / 1e6);
        printf("finish_1s_4threads_max_ms %.2f\n", (double)pct(fin, nf, 1.0) / 1e6);
    }

    atomic_store(&stop, 0);
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, finisher, p);
    usleep(100000);
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (profd_txn_start(p, "bench", NULL, &id) != 0)
            return 1;
        st[i] = now_ns() - t0;
        profd_txn_discard(p, id);
        usleep(200);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    printf("start_during_finishes_p50_us %.1f\nstart_during_finishes_p99_us %.1f\n",
           (double)pct(st, n, 0.5) / 1e3, (double)pct(st, n, 0.99) / 1e3);
    printf("finishes_meanwhile %d\n", atomic_load(&finishes));

    socket_floor(st, n);
    printf("socketpair_rtt_p50_us %.1f\nsocketpair_rtt_p99_us %.1f\n",
           (double)pct(st, n, 0.5) / 1e3, (double)pct(st, n, 0.99) / 1e3);
    profd_close(p);
    free(st);
    free(dt);
    return 0;
}
