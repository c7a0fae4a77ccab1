/* test_jit.c: JIT names from perf maps (/proc/PID/root/tmp/perf-NSPID.map): parsing,
 * lookups at the edges, appends, rewrites, and a process in its own pid and mount namespace. */
#include "symbols.h"
#include "symtest.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Sleep ms milliseconds. */
static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Write (or with append, add to) a file. */
static void put(const char *path, const char *text, bool append)
{
    FILE *f = fopen(path, append ? "a" : "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/* Lookup that must give want (NULL: nothing). */
#define EXPECT(s, pid, addr, want)                                                                 \
    do {                                                                                           \
        const char *got_ = symbolizer_jit_lookup(s, pid, addr);                                    \
        if ((want) == NULL)                                                                        \
            CHECK(got_ == NULL);                                                                   \
        else                                                                                       \
            CHECK_STR(got_, (want));                                                               \
    } while (0)

/* Our own perf map: format, edges, appends, a partial line, overlaps, rewrites. */
static void test_own_map(void)
{
    int pid = getpid();
    char *path = xasprintf("/tmp/perf-%d.map", pid);
    struct symbolizer *s = symbolizer_create();

    EXPECT(s, pid, 0x7f0000001000, NULL); /* no file yet */
    put(path,
        "7f0000001000 100 jit_func_a\n"
        "7f0000001100 80 LazyCompile:*foo bar.js:10\n"
        "0x7f0000002000 0x40 with_0x_prefix\n"
        "not a line\n"
        "7f0000005000 0 zero_size\n"
        "7F0000006000 10 upper_hex\r\n",
        false);
    sleep_ms(15); /* the miss above was checked just now */
    EXPECT(s, pid, 0x7f0000001000, "jit_func_a");
    EXPECT(s, pid, 0x7f00000010ff, "jit_func_a");
    EXPECT(s, pid, 0x7f0000001100, "LazyCompile:*foo bar.js:10");
    EXPECT(s, pid, 0x7f000000117f, "LazyCompile:*foo bar.js:10");
    EXPECT(s, pid, 0x7f0000001180, NULL);
    EXPECT(s, pid, 0x7f0000000fff, NULL);
    EXPECT(s, pid, 0x7f0000002020, "with_0x_prefix");
    EXPECT(s, pid, 0x7f0000005000, NULL);
    EXPECT(s, pid, 0x7f0000006005, "upper_hex");
    const char *kept = symbolizer_jit_lookup(s, pid, 0x7f0000001000);

    /* Appended lines are seen on the next miss (after 10 ms); a line still being written
     * (no newline yet) is not. */
    put(path, "7f0000003000 10 appended\n7f0000004000 10 partial", true);
    sleep_ms(15);
    EXPECT(s, pid, 0x7f0000003005, "appended");
    EXPECT(s, pid, 0x7f0000004005, NULL);
    put(path, "_done\n", true);
    sleep_ms(15);
    EXPECT(s, pid, 0x7f0000004005, "partial_done");

    /* Code memory reused: the later line wins where they overlap; a hit is rechecked
     * within a second. */
    put(path, "7f0000001080 100 reused\n", true);
    sleep_ms(1100);
    EXPECT(s, pid, 0x7f0000001000, "jit_func_a");
    EXPECT(s, pid, 0x7f000000107f, "jit_func_a");
    EXPECT(s, pid, 0x7f0000001080, "reused");
    EXPECT(s, pid, 0x7f0000001120, "reused"); /* the older entry there is wholly covered */
    EXPECT(s, pid, 0x7f000000117f, "reused");
    EXPECT(s, pid, 0x7f0000001180, NULL);

    /* Rewritten from scratch: old names gone (but earlier results stay valid). */
    put(path, "7f0000009000 10 rewritten\n", false);
    sleep_ms(1100);
    EXPECT(s, pid, 0x7f0000009000, "rewritten");
    EXPECT(s, pid, 0x7f0000001000, NULL);
    CHECK_STR(kept, "jit_func_a");

    /* Deleted: nothing. */
    unlink(path);
    sleep_ms(1100);
    EXPECT(s, pid, 0x7f0000009000, NULL);

    /* A few thousand entries, looked up by binary search. */
    struct strbuf sb = {0};
    for (int i = 0; i < 5000; i++)
        strbuf_printf(&sb, "%x 10 fn_%d\n", 0x10000000 + i * 0x20, i);
    put(path, sb.buf, false);
    strbuf_finish(&sb);
    sleep_ms(15);
    EXPECT(s, pid, 0x10000000 + 4321 * 0x20 + 5, "fn_4321");
    EXPECT(s, pid, 0x10000000 + 4321 * 0x20 + 0x10, NULL);
    uint64_t t0 = now_ns();
    for (int i = 0; i < 100000; i++)
        symbolizer_jit_lookup(s, pid, 0x10000000 + (uint64_t)(i % 5000) * 0x20);
    printf("jit lookup (5000 entries, cached): %.0f ns\n", (double)(now_ns() - t0) / 1e5);
    unlink(path);
    symbolizer_destroy(s);
    free(path);
}

/* A process in its own pid and mount namespace (pid 1 there, its /tmp a private tmpfs)
 * writes /tmp/perf-1.map: found through /proc/PID/root and the NSpid line. */
static void test_namespaced(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t mid = fork();
    if (mid == 0) {
        close(p[0]);
        pid_t inner = -1;
        if (unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 &&
            mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0 &&
            mount("profd-test", "/tmp", "tmpfs", 0, NULL) == 0) {
            inner = fork();
            if (inner == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                /* Written aside and renamed: the test sees it whole or not at all. */
                FILE *f = fopen("/tmp/perf-1.tmp", "w");
                if (f) {
                    fprintf(f, "%x 1000 in_namespace\n", 0x5000);
                    fclose(f);
                    rename("/tmp/perf-1.tmp", "/tmp/perf-1.map");
                }
                for (;;)
                    pause();
            }
        }
        int host = inner;
        if (write(p[1], &host, sizeof(host)) != sizeof(host))
            _exit(1);
        if (inner > 0)
            waitpid(inner, NULL, 0);
        _exit(0);
    }
    close(p[1]);
    int host = -1;
    CHECK(read(p[0], &host, sizeof(host)) == sizeof(host));
    close(p[0]);
    if (host <= 0) {
        printf("skip namespaced perf map: cannot unshare pid/mount namespaces here\n");
        waitpid(mid, NULL, 0);
        return;
    }
    char *inside = xasprintf("/proc/%d/root/tmp/perf-1.map", host);
    for (int i = 0; i < 200 && access(inside, R_OK) != 0; i++)
        sleep_ms(10);
    CHECK(access("/tmp/perf-1.map", F_OK) != 0); /* not ours: theirs */
    char status[64], buf[4096];
    snprintf(status, sizeof(status), "/proc/%d/status", host);
    CHECK(read_file(status, buf, sizeof(buf)) > 0);
    const char *nspid = strstr(buf, "NSpid:");
    CHECK(nspid && strstr(nspid, "\t1\n") != NULL); /* pid 1 in its namespace */
    struct symbolizer *s = symbolizer_create();
    EXPECT(s, host, 0x5100, "in_namespace");
    EXPECT(s, host, 0x6000, NULL);
    kill(host, SIGKILL);
    waitpid(mid, NULL, 0);
    symbolizer_trim(s); /* drops the exited process's map */
    symbolizer_destroy(s);
    free(inside);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fds = symtest_count_fds();
    test_own_map();
    test_namespaced();
    CHECK_INT(symtest_count_fds(), fds);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
