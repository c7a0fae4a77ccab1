/* txnserver.c: a small server whose requests are profd transactions.
 *
 * Listens on a Unix socket; each line a client sends ("fast" or "slow") is one request,
 * handled by a pool of worker threads as a transaction named after it. A slow request (one
 * in ten, or "slow") takes a slow path; its profile, with the 0.5 s before it, is written to
 * DIR/slow-N.json, the way an application would send the profiles of its slow requests to
 * Sentry. Fast requests' transactions are discarded: profiles cost only what is asked for.
 *
 *     cc -O2 txnserver.c $(pkg-config --cflags --libs profd) -lpthread -o txnserver
 *     ./txnserver /tmp/txnserver.sock /tmp/profiles &
 *     for i in $(seq 100); do echo fast; done | socat - UNIX-CONNECT:/tmp/txnserver.sock
 *
 * Usage: txnserver SOCKET DIR [WORKERS]   (profd's socket: $PROFD_SOCKET or the default) */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "profd.h"

static struct profd *pd;
static const char *dir;
static int listen_fd;
static volatile uint64_t sink;
static unsigned long slow_count;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void compute(unsigned iterations)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < iterations; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

__attribute__((noinline)) static void fast_path(void)
{
    compute(200000);
    __asm__ volatile("" ::: "memory"); /* a frame of its own, not a tail call */
}

__attribute__((noinline)) static void slow_path(void)
{
    compute(20000000); /* the regression a profile should point at */
    __asm__ volatile("" ::: "memory");
}

static void handle(int conn)
{
    FILE *in = fdopen(conn, "r+");
    if (!in)
        return;
    char line[256];
    unsigned long n = 0;
    while (fgets(line, sizeof(line), in)) {
        bool slow = !strncmp(line, "slow", 4) || ++n % 10 == 0;
        uint64_t txn = 0;
        int r = profd_txn_start(pd, slow ? "request (slow path)" : "request", NULL, &txn);
        if (slow)
            slow_path();
        else
            fast_path();
        if (r == 0 && slow) {
            char *json = NULL;
            if (profd_txn_finish_lookback(pd, txn, 0.5, &json) == 0) {
                pthread_mutex_lock(&mu);
                unsigned long k = ++slow_count;
                pthread_mutex_unlock(&mu);
                char path[512];
                snprintf(path, sizeof(path), "%s/slow-%lu.json", dir, k);
                FILE *f = fopen(path, "w");
                if (f) {
                    fputs(json, f);
                    fclose(f);
                }
                free(json);
            }
        } else if (r == 0) {
            profd_txn_discard(pd, txn);
        } else if (n == 1) {
            fprintf(stderr, "txnserver: not profiled: %s\n", profd_strerror(r));
        }
        fprintf(in, "%s\n", slow ? "done slowly" : "done");
        fflush(in);
    }
    fclose(in);
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        int conn = accept(listen_fd, NULL, NULL);
        if (conn >= 0)
            handle(conn);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: txnserver SOCKET DIR [WORKERS]\n");
        return 2;
    }
    dir = argv[2];
    int workers = argc > 3 ? atoi(argv[3]) : 4;
    pd = profd_open(NULL);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
    unlink(sa.sun_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (!pd || listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(listen_fd, 64) < 0) {
        perror("txnserver");
        return 1;
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    pthread_t th;
    for (int i = 0; i < (workers > 0 ? workers : 1); i++)
        pthread_create(&th, NULL, worker, NULL);
    pause();
    return 0;
}
