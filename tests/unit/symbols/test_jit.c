/* test_jit.c: JIT names from perf maps (/proc/PID/root/tmp/perf-NSPID.map): parsing,
 * lookups at the edges, appends, rewrites, and a process in its own pid and mount namespace. */
#include "fsaccess.h"
#include "modules.h"
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* Lookup that must give want (NULL: nothing). A lookup of an address the last prefetch did
 * not cover reads the map again. */
#define EXPECT(s, pid, addr, want)                                                                 \
    do {                                                                                           \
        const char *got_ = symbolizer_jit_lookup(s, pid, addr);                                    \
        if ((want) == NULL)                                                                        \
            CHECK(got_ == NULL);                                                                   \
        else                                                                                       \
            CHECK_STR(got_, (want));                                                               \
    } while (0)

/* Read the map again (as each slice does) for these addresses. */
static void refresh(struct symbolizer *s, int pid, const uint64_t *addrs, size_t n)
{
    CHECK_INT(symbolizer_jit_prefetch(s, pid, addrs, n), 0);
}

/* Our own perf map: format, edges, appends, a partial line, overlaps, rewrites. */
static void test_own_map(void)
{
    int pid = getpid();
    char *path = xasprintf("/tmp/perf-%d.map", pid);
    struct symbolizer *s = symbolizer_create();
    unlink(path);

    EXPECT(s, pid, 0x7f0000001000, NULL); /* no file yet */
    /* A blank line before an entry once made the parser read past its buffer (strtoull
     * skipped the newline and the name's length wrapped around). */
    put(path,
        "7f0000001000 100 jit_func_a\n"
        "7f0000001100 80 LazyCompile:*foo bar.js:10\n"
        "0x7f0000002000 0x40 with_0x_prefix\n"
        "not a line\n"
        "7f0000005000 0 zero_size\n"
        "\n"
        "7f0000007000 10 after_blank_line\n"
        "  \n7f0000007100 10\n"
        "7f0000007200 10 \n"
        "ffffffffffffff00 1000 wraps_around\n"
        "7F0000006000 10 upper_hex\r\n",
        false);
    static const uint64_t first[] = {0x7f0000001000, 0x7f00000010ff, 0x7f0000001100,
                                     0x7f000000117f, 0x7f0000001180, 0x7f0000000fff,
                                     0x7f0000002020, 0x7f0000005000, 0x7f0000006005,
                                     0x7f0000007005, 0x7f0000007105, 0x7f0000007205,
                                     0xffffffffffffff10};
    refresh(s, pid, first, sizeof(first) / sizeof(first[0]));
    EXPECT(s, pid, 0x7f0000001000, "jit_func_a");
    EXPECT(s, pid, 0x7f00000010ff, "jit_func_a");
    EXPECT(s, pid, 0x7f0000001100, "LazyCompile:*foo bar.js:10");
    EXPECT(s, pid, 0x7f000000117f, "LazyCompile:*foo bar.js:10");
    EXPECT(s, pid, 0x7f0000001180, NULL);
    EXPECT(s, pid, 0x7f0000000fff, NULL);
    EXPECT(s, pid, 0x7f0000002020, "with_0x_prefix");
    EXPECT(s, pid, 0x7f0000005000, NULL);
    EXPECT(s, pid, 0x7f0000006005, "upper_hex");
    EXPECT(s, pid, 0x7f0000007005, "after_blank_line");
    EXPECT(s, pid, 0x7f0000007105, NULL); /* no name */
    EXPECT(s, pid, 0x7f0000007205, NULL); /* an empty name */
    EXPECT(s, pid, 0xffffffffffffff10, NULL);

    /* Appended lines are seen at the next read; a line still being written (no newline yet)
     * is not. */
    put(path, "7f0000003000 10 appended\n7f0000004000 10 partial", true);
    EXPECT(s, pid, 0x7f0000003005, "appended");
    EXPECT(s, pid, 0x7f0000004005, NULL);
    put(path, "_done\n", true);
    EXPECT(s, pid, 0x7f0000004006, "partial_done");

    /* Code memory reused: the later line wins where they overlap. */
    put(path, "7f0000001080 100 reused\n", true);
    static const uint64_t reuse[] = {0x7f0000001000, 0x7f000000107f, 0x7f0000001080,
                                     0x7f0000001120, 0x7f000000117f, 0x7f0000001180};
    refresh(s, pid, reuse, 6);
    EXPECT(s, pid, 0x7f0000001000, "jit_func_a");
    EXPECT(s, pid, 0x7f000000107f, "jit_func_a");
    EXPECT(s, pid, 0x7f0000001080, "reused");
    EXPECT(s, pid, 0x7f0000001120, "reused"); /* the older entry there is wholly covered */
    EXPECT(s, pid, 0x7f000000117f, "reused");
    EXPECT(s, pid, 0x7f0000001180, NULL);

    /* Rewritten from scratch: old names gone. */
    put(path, "7f0000009000 10 rewritten\n", false);
    static const uint64_t rewrite[] = {0x7f0000009000, 0x7f0000001000};
    refresh(s, pid, rewrite, 2);
    EXPECT(s, pid, 0x7f0000009000, "rewritten");
    EXPECT(s, pid, 0x7f0000001000, NULL);

    /* Deleted: nothing. */
    unlink(path);
    refresh(s, pid, rewrite, 1);
    EXPECT(s, pid, 0x7f0000009000, NULL);

    /* A few thousand entries, looked up by binary search, and a line of 3 MiB among them
     * (longer than the helper's read chunk: skipped, the rest still read). */
    struct strbuf sb = {0};
    for (int i = 0; i < 5000; i++) {
        strbuf_printf(&sb, "%x 10 fn_%d\n", 0x10000000 + i * 0x20, i);
        if (i == 100) {
            for (int k = 0; k < (3 << 20) / 64; k++)
                strbuf_puts(&sb, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
            strbuf_puts(&sb, "\n");
        }
    }
    put(path, sb.buf, false);
    strbuf_finish(&sb);
    uint64_t *many = xmalloc(5000 * sizeof(*many));
    for (int i = 0; i < 5000; i++)
        many[i] = 0x10000000 + (uint64_t)i * 0x20 + 5;
    uint64_t t0 = now_ns();
    refresh(s, pid, many, 5000);
    printf("jit prefetch (5000 entries, 5000 addresses, a 3 MiB line): %.2f ms\n",
           (double)(now_ns() - t0) / 1e6);
    EXPECT(s, pid, 0x10000000 + 4321 * 0x20 + 5, "fn_4321");
    EXPECT(s, pid, 0x10000000 + 100 * 0x20 + 5, "fn_100");
    EXPECT(s, pid, 0x10000000 + 101 * 0x20 + 5, "fn_101");
    EXPECT(s, pid, 0x10000000 + 4321 * 0x20 + 0x10, NULL);
    free(many);
    unlink(path);
    symbolizer_destroy(s);
    free(path);
}

/* What the perf map may be: a regular file owned by the process's user or root, not a
 * symbolic link (it could point at a file only root may read, whose lines would come back
 * as names), not larger than the cap, and readable by the client who asked. */
static void test_untrusted_map(void)
{
    int pid = getpid();
    char *path = xasprintf("/tmp/perf-%d.map", pid);
    char *secret = xasprintf("/tmp/profd-test-secret-%d", pid);
    static const uint64_t a[] = {0x1000};
    unlink(path);
    put(secret, "1000 10 root_only_secret\n", false);
    CHECK_INT(chmod(secret, 0600), 0);
    CHECK_INT(symlink(secret, path), 0);
    struct symbolizer *s = symbolizer_create();
    refresh(s, pid, a, 1);
    EXPECT(s, pid, 0x1000, NULL);

    /* Owned by someone else than the process's user (root) or root. */
    unlink(path);
    put(path, "1000 10 someone_elses\n", false);
    CHECK_INT(chown(path, 65534, 65534), 0);
    refresh(s, pid, a, 1);
    EXPECT(s, pid, 0x1000, NULL);

    /* Readable by root only: a client that is not root does not get it; one that may read
     * it does. */
    CHECK_INT(chown(path, 0, 0), 0);
    put(path, "1000 10 mode_0600\n", false);
    CHECK_INT(chmod(path, 0600), 0);
    gid_t groups[] = {65534};
    struct fs_creds nobody = {.uid = 65534, .gid = 65534, .groups = groups, .ngroups = 1};
    symbolizer_begin(s, &nobody);
    refresh(s, pid, a, 1);
    EXPECT(s, pid, 0x1000, NULL);
    CHECK_INT(chmod(path, 0644), 0);
    refresh(s, pid, a, 1);
    EXPECT(s, pid, 0x1000, "mode_0600");
    symbolizer_begin(s, NULL);

    /* Larger than the cap (a sparse file: no disk used): not read at all. */
    int fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK_INT(write(fd, "1000 10 huge\n", 13), 13);
    CHECK_INT(ftruncate(fd, (off_t)300 << 20), 0);
    close(fd);
    refresh(s, pid, a, 1);
    EXPECT(s, pid, 0x1000, NULL);

    unlink(path);
    unlink(secret);
    symbolizer_destroy(s);
    free(path);
    free(secret);
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
    for (int i = 0; i < 500 && access(inside, R_OK) != 0; i++)
        usleep(10000);
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
    test_untrusted_map();
    test_namespaced();
    CHECK_INT(symtest_count_fds(), fds);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
