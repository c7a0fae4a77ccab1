/* chaos.c: a target for tests/integration/test_chaos.py whose output is deterministic, so
 * that a run profiled by a daemon that is killed or stopped at random points can be compared
 * with an unprofiled run. Built -O2 without frame pointers.
 *
 * Usage: chaos [-c COMPUTE] [-i IDLE] [-r ROUNDS] [-s SOCKET]
 *
 * Threads, each doing a fixed amount of work paced by blocking calls, then waiting in
 * blocking calls until "finish":
 *   "compute-N"  ROUNDS rounds of a hash chain computed through a recursion that holds 2 KiB
 *                of locals per level (the sampler copies 40 KiB of stack for each sample),
 *                then a 1 ms nanosleep;
 *   "pipe-w"     ROUNDS blocks of 4 KiB of pseudo-random bytes written to a pipe (a 1 ms
 *                poll every 4 blocks); "pipe-r" reads them after epoll_wait (50 ms) and
 *                hashes the stream;
 *   "spawner"    ROUNDS / 8 short threads, each hashing its number, created and joined one
 *                by one (clone events while the daemon works);
 *   "sig"        the only thread with the real-time signals SIGRTMIN..SIGRTMIN+7 unblocked
 *                (handlers count each); computes 100 us every 2 ms;
 *   "idle-N"     IDLE threads alternating pthread_cond_timedwait, nanosleep, select and
 *                epoll_wait with short timeouts (a target with many threads to detach);
 *   "txn"        with -s, transactions of the client library (start, 1 ms of work, finish)
 *                every 2 ms; their outcome is counted, not part of the digest.
 * SIGWINCH keeps its default action (ignored): sent to the process, it reaches any thread.
 * Every call that fails with EINTR is retried and counted.
 *
 * stdin: "report" prints "report rt=TOTAL rt0=N .. rt7=N done=THREADS_DONE"; "finish" waits
 * for the work to end and prints
 *   digest c0=H .. stream=H bytes=N spawn=H     (the same in every run with these arguments)
 *   signals rt0=N .. rt7=N                      (what the handlers counted)
 *   eintr epoll=N read=N write=N select=N other=N
 *   txn ok=N err=N
 * then exits 0. At start: "ready PID". */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "profd.h"

#define NOINLINE __attribute__((noinline, noclone, noipa))
#define NRT 8
#define MAX_COMPUTE 8
#define BLOCK 4096

static int ncompute = 2, nidle = 2, rounds = 300;
static const char *sock_path;
static atomic_bool finishing;
static atomic_int threads_done;
static atomic_ulong rt_count[NRT];
static atomic_ulong eintr_epoll, eintr_read, eintr_write, eintr_select, eintr_other;
static atomic_ulong txn_ok, txn_err;
static uint64_t compute_hash[MAX_COMPUTE], stream_hash, stream_bytes, spawn_hash;
static int pipefd[2];
static volatile uint64_t sink;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t start_ns;

/* An EINTR, said on stderr with where and when (the test shows it with a failure). */
static void said_eintr(const char *call, uint64_t t0)
{
    char name[16] = "?";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    uint64_t t = mono_ns();
    fprintf(stderr, "chaos %d: EINTR from %s in %s at +%.3f s after %.1f ms\n", getpid(), call,
            name, (double)(t - start_ns) / 1e9, (double)(t - t0) / 1e6);
}

/* The thread that takes the real-time signals: its sleeps end early at each (a handler
 * interrupts nanosleep whatever SA_RESTART says, signal(7)), natively too. */
static __thread bool handles_signals;

static void sleep_ns(long ns)
{
    struct timespec ts = {0, ns};
    /* clock_nanosleep is restarted by the kernel after a signal without a handler (which is
     * all the other threads ever get). */
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
        if (!handles_signals)
            atomic_fetch_add(&eintr_other, 1);
}

/* A level of the recursion: 2 KiB of locals the compiler must keep on the stack. */
static NOINLINE uint64_t deep(uint64_t h, int depth)
{
    volatile uint64_t frame[256];
    for (int i = 0; i < 256; i += 16)
        frame[i] = h + (uint64_t)i;
    if (depth > 0)
        h = deep(mix(h ^ frame[depth & 0xf0]), depth - 1);
    for (int i = 0; i < 2000; i++)
        h = h * 6364136223846793005ull + 1442695040888963407ull;
    return h ^ frame[16];
}

static void *compute_thread(void *arg)
{
    int k = (int)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof(name), "compute-%d", k);
    pthread_setname_np(pthread_self(), name);
    uint64_t h = mix(0x1234 + (uint64_t)k);
    for (int r = 0; r < rounds; r++) {
        h = deep(h ^ (uint64_t)r, 20);
        sleep_ns(1000000);
    }
    compute_hash[k] = h;
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

static void fill_block(unsigned char *b, int r)
{
    uint64_t x = mix(0xabcdef + (uint64_t)r);
    for (int i = 0; i < BLOCK; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
}

static void *writer_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "pipe-w");
    static unsigned char b[BLOCK];
    for (int r = 0; r < rounds; r++) {
        fill_block(b, r);
        size_t off = 0;
        while (off < BLOCK) {
            ssize_t n = write(pipefd[1], b + off, BLOCK - off);
            if (n < 0) {
                if (errno == EINTR) {
                    atomic_fetch_add(&eintr_write, 1);
                    continue;
                }
                perror("write");
                exit(3);
            }
            off += (size_t)n;
        }
        if (r % 4 == 3)
            while (poll(NULL, 0, 1) < 0 && errno == EINTR)
                atomic_fetch_add(&eintr_other, 1);
    }
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

static void *reader_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "pipe-r");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &ev);
    uint64_t h = 1469598103934665603ull, total = 0, want = (uint64_t)rounds * BLOCK;
    static unsigned char b[2 * BLOCK];
    while (total < want) {
        struct epoll_event out;
        uint64_t t0 = mono_ns();
        int n = epoll_wait(ep, &out, 1, 50);
        if (n < 0) {
            if (errno == EINTR) {
                atomic_fetch_add(&eintr_epoll, 1);
                said_eintr("epoll_wait", t0);
            }
            continue;
        }
        if (n == 0)
            continue;
        ssize_t got = read(pipefd[0], b, sizeof(b));
        if (got < 0) {
            if (errno == EINTR)
                atomic_fetch_add(&eintr_read, 1);
            continue;
        }
        for (ssize_t i = 0; i < got; i++)
            h = (h ^ b[i]) * 1099511628211ull;
        total += (uint64_t)got;
    }
    stream_hash = h;
    stream_bytes = total;
    close(ep);
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

static void *short_thread(void *arg)
{
    uint64_t *v = arg;
    uint64_t h = *v;
    for (int i = 0; i < 20000; i++)
        h = h * 6364136223846793005ull + 1442695040888963407ull;
    *v = mix(h);
    return NULL;
}

static void *spawner_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "spawner");
    uint64_t h = 0;
    for (int r = 0; r < rounds / 8; r++) {
        uint64_t v = (uint64_t)r;
        pthread_t th;
        if (pthread_create(&th, NULL, short_thread, &v) != 0) {
            perror("pthread_create");
            exit(3);
        }
        pthread_join(th, NULL);
        h = mix(h ^ v);
        sleep_ns(3000000);
    }
    spawn_hash = h;
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

static void on_rt(int sig)
{
    atomic_fetch_add(&rt_count[sig - SIGRTMIN], 1);
}

static void *sig_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "sig");
    handles_signals = true;
    sigset_t s;
    sigemptyset(&s);
    for (int i = 0; i < NRT; i++)
        sigaddset(&s, SIGRTMIN + i);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    uint64_t x = 1;
    while (!atomic_load(&finishing)) {
        for (int i = 0; i < 30000; i++)
            x = x * 6364136223846793005ull + 1;
        sink = x;
        sleep_ns(2000000);
    }
    return NULL;
}

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;

static void *idle_thread(void *arg)
{
    int k = (int)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof(name), "idle-%d", k);
    pthread_setname_np(pthread_self(), name);
    int ep = epoll_create1(0), quiet[2];
    if (pipe(quiet) < 0)
        exit(3);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, quiet[0], &ev);
    for (int i = k; !atomic_load(&finishing); i++) {
        switch (i % 4) {
        case 0: {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_mutex_lock(&idle_mu);
            pthread_cond_timedwait(&idle_cv, &idle_mu, &ts);
            pthread_mutex_unlock(&idle_mu);
            break;
        }
        case 1:
            sleep_ns(7000000);
            break;
        case 2: {
            fd_set r;
            FD_ZERO(&r);
            FD_SET(quiet[0], &r);
            struct timeval tv = {0, 13000};
            uint64_t t0 = mono_ns();
            if (select(quiet[0] + 1, &r, NULL, NULL, &tv) < 0 && errno == EINTR) {
                atomic_fetch_add(&eintr_select, 1);
                said_eintr("select", t0);
            }
            break;
        }
        case 3: {
            struct epoll_event out;
            uint64_t t0 = mono_ns();
            if (epoll_wait(ep, &out, 1, 17) < 0 && errno == EINTR) {
                atomic_fetch_add(&eintr_epoll, 1);
                said_eintr("epoll_wait", t0);
            }
            break;
        }
        }
    }
    close(ep);
    close(quiet[0]);
    close(quiet[1]);
    return NULL;
}

static NOINLINE void txn_work(void)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t x = sink;
    do {
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ull + 1;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000l + (t.tv_nsec - t0.tv_nsec) < 1000000);
    sink = x;
}

static void *txn_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "txn");
    struct profd *p = profd_open(sock_path);
    if (!p)
        exit(3);
    /* A daemon stopped by the test must not hold this thread for the default 10 s. */
    profd_set_timeout(p, 200, 2000);
    while (!atomic_load(&finishing)) {
        uint64_t id;
        char *prof = NULL;
        if (profd_txn_start(p, "chaos-txn", NULL, &id) == 0) {
            txn_work();
            if (profd_txn_finish(p, id, &prof) == 0)
                atomic_fetch_add(&txn_ok, 1);
            else
                atomic_fetch_add(&txn_err, 1);
            free(prof);
        } else {
            atomic_fetch_add(&txn_err, 1);
        }
        sleep_ns(2000000);
    }
    profd_close(p);
    return NULL;
}

static void print_rt(const char *what)
{
    unsigned long total = 0;
    for (int i = 0; i < NRT; i++)
        total += atomic_load(&rt_count[i]);
    printf("%s", what);
    if (!strcmp(what, "report"))
        printf(" rt=%lu", total);
    for (int i = 0; i < NRT; i++)
        printf(" rt%d=%lu", i, atomic_load(&rt_count[i]));
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "c:i:r:s:")) != -1) {
        switch (opt) {
        case 'c':
            ncompute = atoi(optarg);
            break;
        case 'i':
            nidle = atoi(optarg);
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 's':
            sock_path = optarg;
            break;
        default:
            return 2;
        }
    }
    if (ncompute < 0 || ncompute > MAX_COMPUTE || nidle < 0 || rounds < 8)
        return 2;
    sigset_t s;
    sigemptyset(&s);
    for (int i = 0; i < NRT; i++)
        sigaddset(&s, SIGRTMIN + i);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_rt;
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < NRT; i++)
        sigaction(SIGRTMIN + i, &sa, NULL);
    if (pipe(pipefd) < 0)
        return 1;
    start_ns = mono_ns();

    pthread_t work[MAX_COMPUTE + 3], other[2], *idle = calloc((size_t)nidle + 1, sizeof(*idle));
    int nwork = 0;
    for (int k = 0; k < ncompute; k++)
        pthread_create(&work[nwork++], NULL, compute_thread, (void *)(intptr_t)k);
    pthread_create(&work[nwork++], NULL, writer_thread, NULL);
    pthread_create(&work[nwork++], NULL, reader_thread, NULL);
    pthread_create(&work[nwork++], NULL, spawner_thread, NULL);
    pthread_create(&other[0], NULL, sig_thread, NULL);
    if (sock_path)
        pthread_create(&other[1], NULL, txn_thread, NULL);
    for (int k = 0; k < nidle; k++)
        pthread_create(&idle[k], NULL, idle_thread, (void *)(intptr_t)k);
    printf("ready %d\n", getpid());
    fflush(stdout);

    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        if (!strncmp(line, "report", 6)) {
            print_rt("report");
            printf(" done=%d\n", atomic_load(&threads_done));
            fflush(stdout);
        } else if (!strncmp(line, "finish", 6)) {
            for (int i = 0; i < nwork; i++)
                pthread_join(work[i], NULL);
            atomic_store(&finishing, true);
            pthread_join(other[0], NULL);
            if (sock_path)
                pthread_join(other[1], NULL);
            for (int k = 0; k < nidle; k++)
                pthread_join(idle[k], NULL);
            printf("digest");
            for (int k = 0; k < ncompute; k++)
                printf(" c%d=%016llx", k, (unsigned long long)compute_hash[k]);
            printf(" stream=%016llx bytes=%llu spawn=%016llx\n",
                   (unsigned long long)stream_hash, (unsigned long long)stream_bytes,
                   (unsigned long long)spawn_hash);
            print_rt("signals");
            printf("\neintr epoll=%lu read=%lu write=%lu select=%lu other=%lu\n",
                   atomic_load(&eintr_epoll), atomic_load(&eintr_read),
                   atomic_load(&eintr_write), atomic_load(&eintr_select),
                   atomic_load(&eintr_other));
            printf("txn ok=%lu err=%lu\n", atomic_load(&txn_ok), atomic_load(&txn_err));
            fflush(stdout);
            free(idle);
            return 0;
        }
    }
    return 0;
}
