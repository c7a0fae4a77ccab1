/* txnapp.c: an application using libprofd: THREADS threads ("txn-N"), each running COUNT
 * transactions "request-N" of about MS milliseconds of CPU in work_N(); every third one
 * holds a nested transaction "inner-N" around inner_work(). Each finished profile is
 * written to DIR/N-K.json (the inner ones to DIR/N-K-inner.json); errors are counted.
 * Built -O2 without frame pointers.
 *
 * Usage: txnapp SOCKET DIR THREADS COUNT MS [LOOP]. With TXNAPP_SPANS=1 each request
 * carries a trace and a span id (profd_txn_start_span). With PROFD_SLOW=N (N > 1) in its
 * environment the library's timeouts are N times its defaults.
 * With LOOP = 1 it then keeps starting and finishing transactions until stdin closes,
 * printing "ok N" / "err CODE" lines for each (the daemon-restart test). With LOOP = 2 it
 * forks instead: the child, with the parent's handle, runs a transaction of its own (work_1
 * until profd has attached, then 200 ms more, PROFD_SLOW times that) and writes its profile to DIR/-1-0child.json; then the parent, to DIR/-1-0parent.json; it prints
 * "fork CHILDPID CHILDRESULT PARENTRESULT".
 * LOOP = 3, a prefork server: the THREADS threads are skipped; the parent runs one
 * transaction ("parent", DIR/parent.json), then forks COUNT workers that inherit its handle;
 * each runs 5 transactions "job" of MS ms in work_3, writing DIR/wPID-K.json, and the
 * parent prints "worker PID STATUS" for each.
 * LOOP = 4, a stalled daemon: timeouts of 200 ms; for each line "burst N" of stdin it
 * starts N transactions without finishing them and prints "burst OK BUSY OTHER
 * FIRST_BUSY_MS MAX_LATER_BUSY_MS SLOW_LATER" (the latency of the first PROFD_EBUSY, the
 * slowest after it, and how many after it took 100 ms or more); for "one", a transaction of 2 ms with a finish: "ok" or "err CODE"; for
 * "forkprep" then "forkbusy", a thread starts a transaction and waits in its finish while
 * the main thread forks a child that starts one of its own: "forkbusy CHILDRESULT CHILD_MS
 * FINISHRESULT STARTRESULT START_MS CHILD_CALL_MS" (a start of the main thread while the
 * other waits; CHILD_MS from before the fork until the child's result is read,
 * CHILD_CALL_MS the child's call alone, timed by the child);
 * "forkend" then lets the child exit.
 * LOOP = 5, a stream of short transactions: the THREADS threads are skipped; at a line on
 * stdin, one thread runs transactions of 50 us (start, work, discard) for MS ms and prints
 * "stream N ERRORS".
 * Prints "ready PID" first, "done OK ERRORS" after the threads. */
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

/* Write json (freed) to DIR/NAME.json. */
static void write_profile(const char *name, char *json)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.json", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(json, f);
        fclose(f);
    }
    free(json);
}

static void save(int n, int k, const char *suffix, char *json)
{
    char name[128];
    snprintf(name, sizeof(name), "%d-%d%s", n, k, suffix);
    write_profile(name, json);
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

static int spans; /* TXNAPP_SPANS=1: requests with trace and span ids */

static void *worker(void *arg)
{
    int n = (int)(intptr_t)arg;
    char name[32], tname[16];
    snprintf(tname, sizeof(tname), "txn-%d", n);
    pthread_setname_np(pthread_self(), tname);
    for (int k = 0; k < count; k++) {
        uint64_t id, inner = 0;
        snprintf(name, sizeof(name), "request-%d", n);
        /* With TXNAPP_SPANS=1, each request is a trace and span of its own: trace
         * 00..0<thread>00<k>, span 00..<k + 1> (in hex), as test_export reads them back. */
        char trace[33], span[17];
        snprintf(trace, sizeof(trace), "%024x%02x%06x", 0, (unsigned)(n + 1) & 0xff,
                 (unsigned)k & 0xffffff);
        snprintf(span, sizeof(span), "%016x", k + 1);
        int r = spans ? profd_txn_start_span(pd, name, trace, span, &id)
                      : profd_txn_start(pd, name, NULL, &id);
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

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A transaction of 2 ms in work_0 and its finish: prints "ok" or "err CODE TEXT". */
static void report_one(const char *name)
{
    uint64_t id;
    char *json = NULL;
    int r = profd_txn_start(pd, name, NULL, &id);
    if (r == 0) {
        work_0(2000000);
        r = profd_txn_finish(pd, id, &json);
        free(json);
    }
    if (r == 0)
        printf("ok\n");
    else
        printf("err %d %s\n", r, profd_strerror(r));
}

/* One transaction of about ms ms in work_3, its profile saved as DIR/NAME.json. */
static int one_saved(const char *txn, const char *file)
{
    uint64_t id;
    char *json = NULL;
    int r = profd_txn_start(pd, txn, NULL, &id);
    if (r == 0) {
        work_3((uint64_t)ms * 1000000);
        r = profd_txn_finish(pd, id, &json);
    }
    if (r == 0)
        write_profile(file, json);
    return r;
}

/* Whether a tracer (profd) is attached to this process. */
static int traced(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int pid = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "TracerPid: %d", &pid) == 1)
            break;
    if (f)
        fclose(f);
    return pid != 0;
}

/* A prefork server: workers inherit the parent's handle (and its connection). */
static int prefork(int workers)
{
    int r = one_saved("parent", "parent");
    if (r < 0)
        fprintf(stderr, "txnapp: parent: %s\n", profd_strerror(r));
    pid_t pids[64];
    for (int i = 0; i < workers && i < 64; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int bad = 0;
            for (int k = 0; k < 5; k++) {
                char file[64];
                snprintf(file, sizeof(file), "w%d-%d", getpid(), k);
                int e = one_saved("job", file);
                if (e < 0) {
                    fprintf(stderr, "txnapp: worker %d: %s\n", getpid(), profd_strerror(e));
                    bad++;
                }
            }
            _exit(bad);
        }
    }
    for (int i = 0; i < workers && i < 64; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        printf("worker %d %d\n", pids[i], WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    fflush(stdout);
    profd_close(pd);
    return r < 0;
}

/* A thread made in advance ("forkprep": a traced process cannot create a thread while its
 * tracer is stopped, the clone waits for the tracer), which at "forkbusy" starts a
 * transaction and waits in its finish. */
static pthread_t busy_th;
static int busy_pipe[2] = {-1, -1};
static int busy_r, busy_done;

static void *busy_finish(void *arg)
{
    (void)arg;
    char c;
    if (read(busy_pipe[0], &c, 1) != 1)
        return NULL;
    uint64_t id;
    char *json = NULL;
    busy_r = profd_txn_start(pd, "waiting", NULL, &id);
    if (busy_r == 0)
        busy_r = profd_txn_finish(pd, id, &json);
    free(json);
    __atomic_store_n(&busy_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Fork while another thread is inside a call (holding the handle's lock). The child
 * reports its result through a pipe and stays until "forkend": its exit would signal the
 * parent (SIGCHLD), and a traced process's signal waits for its tracer. */
static pid_t busy_child;
static int child_pipe[2], child_go[2];

static void fork_busy(void)
{
    if (pipe(child_pipe) < 0 || pipe(child_go) < 0 || write(busy_pipe[1], "x", 1) != 1)
        return;
    usleep(100000);
    /* A start of this thread meanwhile: not held up by the waiting call. */
    uint64_t id, ts0 = mono_ns();
    int rs = profd_txn_start(pd, "meanwhile", NULL, &id);
    double start_ms = (double)(mono_ns() - ts0) / 1e6;
    uint64_t t0 = mono_ns();
    busy_child = fork();
    if (busy_child == 0) {
        /* Only the parent writes to child_go: if it dies (killed by a failing test), the
         * read below ends, and so does the child, instead of living on. */
        close(child_go[1]);
        uint64_t id, tc = mono_ns();
        int res[2] = {profd_txn_start(pd, "child", NULL, &id), 0};
        res[1] = (int)((mono_ns() - tc) / 1000000);
        char c;
        if (write(child_pipe[1], res, sizeof(res)) != sizeof(res) ||
            read(child_go[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    int res[2] = {-100, -1};
    if (read(child_pipe[0], res, sizeof(res)) != sizeof(res))
        res[0] = -100;
    int r = res[0];
    double child_ms = (double)(mono_ns() - t0) / 1e6;
    /* The waiting call ends at its own timeout (2 s). */
    while (!__atomic_load_n(&busy_done, __ATOMIC_ACQUIRE))
        usleep(10000);
    printf("forkbusy %d %.0f %d %d %.2f %d\n", r, child_ms, busy_r, rs, start_ms, res[1]);
}

static void fork_end(void)
{
    if (write(child_go[1], "x", 1) != 1)
        return;
    waitpid(busy_child, NULL, 0);
    pthread_join(busy_th, NULL);
    printf("forkend\n");
}

/* Calls while the daemon does not read: each waits at most the timeout once, then fails
 * at once until the daemon reads again. */
static int stalled(void)
{
    profd_set_timeout(pd, 200, 2000);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        int n = 0;
        if (sscanf(line, "burst %d", &n) == 1) {
            int ok = 0, busy = 0, other = 0, slow_later = 0;
            double first_busy = -1, max_later = 0;
            for (int i = 0; i < n; i++) {
                uint64_t id, t0 = mono_ns();
                int r = profd_txn_start(pd, "burst", NULL, &id);
                double dt = (double)(mono_ns() - t0) / 1e6;
                if (r == 0) {
                    ok++;
                } else if (r == PROFD_EBUSY) {
                    if (busy++ == 0) {
                        first_busy = dt;
                    } else {
                        if (dt > max_later)
                            max_later = dt;
                        slow_later += dt >= 100;
                    }
                } else {
                    other++;
                }
            }
            printf("burst %d %d %d %.1f %.2f %d\n", ok, busy, other, first_busy, max_later,
                   slow_later);
        } else if (!strncmp(line, "forkprep", 8)) {
            if (pipe(busy_pipe) == 0 && pthread_create(&busy_th, NULL, busy_finish, NULL) == 0)
                printf("prepped\n");
            else
                printf("err\n");
        } else if (!strncmp(line, "forkbusy", 8)) {
            fork_busy();
        } else if (!strncmp(line, "forkend", 7)) {
            fork_end();
        } else {
            report_one("one");
        }
        fflush(stdout);
    }
    profd_close(pd);
    return 0;
}

/* Many short transactions on one thread. */
static int stream(void)
{
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    int n = 0, errors = 0;
    uint64_t end = mono_ns() + (uint64_t)ms * 1000000;
    while (mono_ns() < end) {
        uint64_t id;
        int r = profd_txn_start(pd, "short", NULL, &id);
        work_5(50000);
        if (r == 0)
            r = profd_txn_discard(pd, id);
        n++;
        errors += r != 0;
    }
    printf("stream %d %d\n", n, errors);
    fflush(stdout);
    if (fgets(line, sizeof(line), stdin)) {
        /* wait for the caller */
    }
    profd_close(pd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: txnapp SOCKET DIR THREADS COUNT MS [LOOP]\n");
        return 2;
    }
    pd = profd_open(argv[1]);
    spans = getenv("TXNAPP_SPANS") && !strcmp(getenv("TXNAPP_SPANS"), "1");
    /* Under a slow wrapper (the tests' PROFD_SLOW: the daemon under valgrind, which runs
     * its threads one at a time) the library's default waits are scaled as the tests'
     * are: a start answered after a finish's symbolization can take over the 1 s default. */
    const char *slow = getenv("PROFD_SLOW");
    if (pd && slow && atoi(slow) > 1)
        profd_set_timeout(pd, 1000 * atoi(slow), 10000 * atoi(slow));
    dir = argv[2];
    int threads = atoi(argv[3]);
    count = atoi(argv[4]);
    ms = atoi(argv[5]);
    int loop = argc > 6 ? atoi(argv[6]) : 0;
    if (!pd || threads < 1 || threads > 64)
        return 2;
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (loop == 3)
        return prefork(count);
    if (loop == 4)
        return stalled();
    if (loop == 5)
        return stream();
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
                /* Its start sends no reply: the daemon attaches meanwhile (a few ms here,
                 * half a second under valgrind, where its first samples came later still
                 * on a loaded machine). Work until traced, then 200 ms more (PROFD_SLOW
                 * times that under a slow wrapper), so that the profile holds work_1 on
                 * any daemon. */
                const char *sl = getenv("PROFD_SLOW");
                int f = sl && atoi(sl) > 1 ? atoi(sl) : 1;
                for (int i = 0; i < 3000 && !traced(); i++)
                    work_1(10000000);
                for (int i = 0; i < f; i++)
                    work_1(200000000);
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
            report_one("loop");
            fflush(stdout);
        }
    }
    profd_close(pd);
    return 0;
}
