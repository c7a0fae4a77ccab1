/* test_procstatus.c: the /proc/PID/status parser on the kernel's format, on texts longer
 * than 4 KiB (a long Groups line ahead of CapPrm), cut short, malformed, repeated and
 * unterminated, every prefix of a real file; and the reader on live files of this process,
 * of a child in 65536 groups (as root), of a file too large, and of a dead process. */
#include "procstatus.h"
#include "check.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A status file as this kernel (6.18) prints it, abridged in the middle (memory lines). */
static const char sample[] = "Name:\tbusy worker\n"
                             "Umask:\t0022\n"
                             "State:\tS (sleeping)\n"
                             "Tgid:\t4242\n"
                             "Ngid:\t0\n"
                             "Pid:\t4243\n"
                             "PPid:\t17\n"
                             "TracerPid:\t99\n"
                             "Uid:\t1000\t1001\t1002\t1003\n"
                             "Gid:\t2000\t2001\t2002\t2003\n"
                             "FDSize:\t64\n"
                             "Groups:\t4 24 27 \n"
                             "NStgid:\t4242\t12\n"
                             "NSpid:\t4243\t13\n"
                             "NSpgid:\t4242\t12\n"
                             "NSsid:\t4242\t12\n"
                             "Kthread:\t0\n"
                             "VmPeak:\t    3060 kB\n"
                             "VmSize:\t    3004 kB\n"
                             "VmExe:\t      16 kB\n"
                             "VmLib:\t    1700 kB\n"
                             "Threads:\t2\n"
                             "SigQ:\t0/7823\n"
                             "SigPnd:\t0000000000000000\n"
                             "ShdPnd:\t0000000000000000\n"
                             "SigBlk:\t0000000000000000\n"
                             "SigIgn:\t0000000000001000\n"
                             "SigCgt:\t0000000180000002\n"
                             "CapInh:\t0000000000000000\n"
                             "CapPrm:\t000001ffffffffff\n"
                             "CapEff:\t0000000000003000\n"
                             "CapBnd:\t000001ffffffffff\n"
                             "NoNewPrivs:\t0\n"
                             "Seccomp:\t0\n"
                             "Cpus_allowed_list:\t0-1\n"
                             "voluntary_ctxt_switches:\t150\n"
                             "nonvoluntary_ctxt_switches:\t545\n";

#define ALL_FIELDS ((1u << PS_NFIELDS) - 1)

/* Parse exactly len bytes from a heap copy with nothing after it: a read past the end is
 * an ASan error (and valgrind's). */
static int parse_exact(const char *text, size_t len, struct procstatus *st)
{
    char *copy = xmalloc(len ? len : 1);
    memcpy(copy, text, len);
    int n = procstatus_parse(copy, len, st);
    free(copy);
    return n;
}

static int parse_str(const char *text, struct procstatus *st)
{
    return parse_exact(text, strlen(text), st);
}

/* Every field of the kernel's format, with its value. */
static void test_parse_kernel_format(void)
{
    struct procstatus st;
    CHECK_INT(parse_str(sample, &st), PS_NFIELDS);
    CHECK_U64(st.have, ALL_FIELDS);
    CHECK_U64(st.bad, 0);
    CHECK_STR(st.name, "busy worker");
    CHECK_INT(st.state, 'S');
    CHECK_INT(st.tgid, 4242);
    CHECK_INT(st.pid, 4243);
    CHECK_INT(st.ppid, 17);
    CHECK_INT(st.tracer_pid, 99);
    CHECK(st.uid[0] == 1000 && st.uid[1] == 1001 && st.uid[2] == 1002 && st.uid[3] == 1003);
    CHECK(st.gid[0] == 2000 && st.gid[1] == 2001 && st.gid[2] == 2002 && st.gid[3] == 2003);
    CHECK_INT(st.ngroups, 3);
    CHECK_INT(st.nspid, 13); /* the last field: the pid in its own namespace */
    CHECK_INT(st.nspid_depth, 2);
    CHECK_U64(st.sig_ign, 0x1000);
    CHECK_U64(st.sig_cgt, 0x180000002ull);
    CHECK_U64(st.cap_prm, 0x1ffffffffffull);
    CHECK_U64(st.cap_eff, 0x3000);
    CHECK_U64(st.vcsw, 150);
    CHECK_U64(st.nvcsw, 545);
    CHECK_U64(st.vm_size_kb, 3004);
    CHECK_U64(st.vm_exe_kb, 16);
    CHECK_U64(st.vm_lib_kb, 1700);
    CHECK_STR(procstatus_field_name(PS_CAPPRM), "CapPrm");
    CHECK_STR(procstatus_field_name(PS_NFIELDS), "?");
}

/* sample with its Groups line replaced by one of n groups of 7 digits. */
static char *with_groups(int n)
{
    struct strbuf sb = {0};
    const char *g = strstr(sample, "Groups:");
    REQUIRE(strbuf_append(&sb, sample, (size_t)(g - sample)) == 0);
    REQUIRE(strbuf_puts(&sb, "Groups:\t") == 0);
    for (int i = 0; i < n; i++)
        REQUIRE(strbuf_printf(&sb, "%d ", 1000000 + i) == 0);
    REQUIRE(strbuf_puts(&sb, strchr(g, '\n')) == 0);
    return strbuf_steal(&sb);
}

/* The defect this module fixes: 700 groups put CapPrm at byte ~6000. Read whole, CapPrm
 * and everything after the Groups line are there; cut at 4 KiB, as the eight 4 KiB readers
 * did, CapPrm is absent (not 0), and so are SigIgn, NSpid and the context switches. */
static void test_groups_beyond_4k(void)
{
    char *text = with_groups(700);
    size_t len = strlen(text);
    CHECK(strstr(text, "\nCapPrm:") - text > 4096);
    struct procstatus st;
    CHECK_INT(parse_exact(text, len, &st), PS_NFIELDS);
    CHECK_INT(st.ngroups, 700);
    CHECK_U64(st.cap_prm, 0x1ffffffffffull);
    CHECK_U64(st.cap_eff, 0x3000);
    CHECK_U64(st.vcsw, 150);
    CHECK_INT(st.nspid, 13);

    CHECK_INT(parse_exact(text, 4095, &st), 8); /* what read_file(path, buf, 4096) kept */
    CHECK(procstatus_has(&st, PS_UID) && procstatus_has(&st, PS_PPID));
    CHECK(!procstatus_has(&st, PS_NGROUPS)); /* its line was cut */
    CHECK(!procstatus_has(&st, PS_CAPPRM));
    CHECK(!procstatus_has(&st, PS_CAPEFF));
    CHECK(!procstatus_has(&st, PS_SIGIGN));
    CHECK(!procstatus_has(&st, PS_NSPID));
    CHECK(!procstatus_has(&st, PS_VCSW));
    CHECK_U64(st.bad, 0); /* absent, not malformed */
    free(text);
}

/* A last line without its newline is not a line: "CapPrm:\t0000" is a value cut short (a
 * prefix of 000001ffffffffff), not 0. */
static void test_cut_inside_a_value(void)
{
    const char *c = strstr(sample, "CapPrm:\t");
    size_t at = (size_t)(c - sample) + strlen("CapPrm:\t0000");
    struct procstatus st;
    parse_exact(sample, at, &st);
    CHECK(!procstatus_has(&st, PS_CAPPRM));
    CHECK(procstatus_has(&st, PS_SIGCGT));
    parse_exact(sample, at + 12, &st); /* the digits whole, the newline not */
    CHECK(!procstatus_has(&st, PS_CAPPRM));
    parse_exact(sample, at + 13, &st);
    CHECK(procstatus_has(&st, PS_CAPPRM));
    CHECK_U64(st.cap_prm, 0x1ffffffffffull);
}

/* Every prefix of the file (a read cut anywhere): a field is either absent or has exactly
 * the value the whole file gives, never a shorter one. */
static void test_every_prefix(void)
{
    char *text = with_groups(40);
    size_t len = strlen(text);
    struct procstatus whole, st;
    parse_exact(text, len, &whole);
    for (size_t n = 0; n <= len; n++) {
        parse_exact(text, n, &st);
        CHECK_U64(st.bad, 0);
        CHECK_U64(st.have & ~whole.have, 0);
        if (procstatus_has(&st, PS_NAME))
            CHECK_STR(st.name, whole.name);
        if (procstatus_has(&st, PS_UID))
            CHECK(!memcmp(st.uid, whole.uid, sizeof(st.uid)));
        if (procstatus_has(&st, PS_NGROUPS))
            CHECK_INT(st.ngroups, whole.ngroups);
        if (procstatus_has(&st, PS_NSPID))
            CHECK_INT(st.nspid, whole.nspid);
        if (procstatus_has(&st, PS_CAPPRM))
            CHECK_U64(st.cap_prm, whole.cap_prm);
        if (procstatus_has(&st, PS_CAPEFF))
            CHECK_U64(st.cap_eff, whole.cap_eff);
        if (procstatus_has(&st, PS_SIGCGT))
            CHECK_U64(st.sig_cgt, whole.sig_cgt);
        if (procstatus_has(&st, PS_NVCSW))
            CHECK_U64(st.nvcsw, whole.nvcsw);
        if (procstatus_has(&st, PS_VMSIZE))
            CHECK_U64(st.vm_size_kb, whole.vm_size_kb);
    }
    free(text);
}

/* One line in isolation: is the field well-formed, bad, or not there? */
static void expect_line(const char *line, enum procstatus_field f, int want)
{
    struct procstatus st;
    parse_str(line, &st);
    int got = procstatus_has(&st, f) ? 1 : (st.bad & (1u << f)) ? -1 : 0;
    if (got != want) {
        fprintf(stderr, "line %s: got %d, want %d\n", line, got, want);
        check_failures++;
    }
}

/* Numbers that do not fit, signs, junk, missing or extra ids, empty values: the field is
 * bad (never a truncated or wrapped value); a key that only resembles one is ignored. */
static void test_malformed(void)
{
    expect_line("Uid:\t1\t2\t3\t4\n", PS_UID, 1);
    expect_line("Uid:\t1\t2\t3\n", PS_UID, -1);       /* three ids */
    expect_line("Uid:\t1\t2\t3\t4\t5\n", PS_UID, -1); /* five */
    expect_line("Uid:\t4294967295\t0\t0\t0\n", PS_UID, 1);
    expect_line("Uid:\t4294967296\t0\t0\t0\n", PS_UID, -1); /* past 32 bits */
    expect_line("Uid:\t-1\t0\t0\t0\n", PS_UID, -1);
    expect_line("Uid:\t+1\t0\t0\t0\n", PS_UID, -1);
    expect_line("Uid:\t1x\t0\t0\t0\n", PS_UID, -1);
    expect_line("Uid:\n", PS_UID, -1);
    expect_line("Uid :\t1\t2\t3\t4\n", PS_UID, 0); /* another key */
    expect_line("uid:\t1\t2\t3\t4\n", PS_UID, 0);
    expect_line("Uidx:\t1\t2\t3\t4\n", PS_UID, 0);
    expect_line("CapPrm:\t000001ffffffffff\n", PS_CAPPRM, 1);
    expect_line("CapPrm:\tFFFFFFFFFFFFFFFF\n", PS_CAPPRM, 1);
    expect_line("CapPrm:\t0000000000000000000001ff\n", PS_CAPPRM, 1); /* leading zeros */
    expect_line("CapPrm:\t10000000000000000\n", PS_CAPPRM, -1);       /* 65 bits */
    expect_line("CapPrm:\t0x1ff\n", PS_CAPPRM, -1);
    expect_line("CapPrm:\tfffg\n", PS_CAPPRM, -1);
    expect_line("CapPrm:\t\n", PS_CAPPRM, -1);
    expect_line("CapPrm:\t1ff 1\n", PS_CAPPRM, -1);
    expect_line("Tgid:\t2147483647\n", PS_TGID, 1);
    expect_line("Tgid:\t2147483648\n", PS_TGID, -1); /* not a pid_t */
    expect_line("PPid:\t99999999999999999999999\n", PS_PPID, -1);
    expect_line("voluntary_ctxt_switches:\t18446744073709551615\n", PS_VCSW, 1);
    expect_line("voluntary_ctxt_switches:\t18446744073709551616\n", PS_VCSW, -1);
    expect_line("VmSize:\t    3004 kB\n", PS_VMSIZE, 1);
    expect_line("VmSize:\t3004 kB\n", PS_VMSIZE, 1);
    expect_line("VmSize:\t    3004\n", PS_VMSIZE, -1);   /* no unit */
    expect_line("VmSize:\t    3004 MB\n", PS_VMSIZE, -1); /* another */
    expect_line("VmSize:\t    3004 kBx\n", PS_VMSIZE, -1);
    expect_line("VmSize:\t 18014398509481983 kB\n", PS_VMSIZE, 1);
    expect_line("VmSize:\t 18014398509481984 kB\n", PS_VMSIZE, -1); /* past 64 bits in bytes */
    expect_line("VmLib:\t kB\n", PS_VMLIB, -1);
    expect_line("NSpid:\t\n", PS_NSPID, -1);
    expect_line("NSpid:\t5\t-6\n", PS_NSPID, -1);
    expect_line("Groups:\t\n", PS_NGROUPS, 1); /* no supplementary groups */
    expect_line("Groups:\t1 2 x \n", PS_NGROUPS, -1);
    expect_line("State:\tS (sleeping)\n", PS_STATE, 1);
    expect_line("State:\t\n", PS_STATE, -1);
    expect_line("State:\t5\n", PS_STATE, -1);
    expect_line("State:\tSleeping\n", PS_STATE, -1);
    expect_line("Name:\t\n", PS_NAME, 1);      /* an empty name is a name */
    expect_line("CapPrm:\t1ff", PS_CAPPRM, 0); /* no newline: not a line */

    /* Bytes that are no text at all: a NUL inside a value makes it bad, a NUL elsewhere
     * does not stop the parse. */
    static const char nul[] = "CapPrm:\t1f\0f\nUid:\t1\t2\t3\t4\n\0\nCapEff:\t3\n";
    struct procstatus st;
    parse_exact(nul, sizeof(nul) - 1, &st);
    CHECK(st.bad & (1u << PS_CAPPRM));
    CHECK(procstatus_has(&st, PS_UID) && procstatus_has(&st, PS_CAPEFF));
    CHECK_U64(st.cap_eff, 3);

    /* A long name is cut to fit; nothing overflows. */
    char name[300] = "Name:\t";
    memset(name + 6, 'n', 200);
    strcpy(name + 206, "\n");
    parse_str(name, &st);
    CHECK(procstatus_has(&st, PS_NAME));
    CHECK_U64(strlen(st.name), sizeof(st.name) - 1);

    /* Nothing at all, and no newline at all. */
    CHECK_INT(parse_exact("", 0, &st), 0);
    CHECK_U64(st.have | st.bad, 0);
    CHECK_INT(parse_str("CapPrm", &st), 0);
}

/* A key given twice: which one did the kernel write? Neither counts. */
static void test_repeated_key(void)
{
    struct procstatus st;
    parse_str("CapPrm:\t0\nCapPrm:\t1ff\n", &st);
    CHECK(!procstatus_has(&st, PS_CAPPRM));
    CHECK(st.bad & (1u << PS_CAPPRM));
    parse_str("Uid:\t0\t0\t0\t0\nUid:\tx\nUid:\t0\t0\t0\t0\n", &st);
    CHECK(!procstatus_has(&st, PS_UID));
}

/* This process's own status: the ids getresuid/getresgid give, the capabilities capget
 * gives, SigIgn and SigCgt after ignoring SIGUSR1 and catching SIGUSR2. */
static void on_usr2(int sig)
{
    (void)sig;
}

static void test_read_self(void)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, cgt = {.sa_handler = on_usr2}, o1, o2;
    sigaction(SIGUSR1, &ign, &o1);
    sigaction(SIGUSR2, &cgt, &o2);
    struct procstatus st;
    CHECK_INT(procstatus_read(getpid(), 0, NULL, &st), 0);
    uid_t r, e, s;
    gid_t gr, ge, gs;
    REQUIRE(getresuid(&r, &e, &s) == 0 && getresgid(&gr, &ge, &gs) == 0);
    CHECK(procstatus_has(&st, PS_UID) && procstatus_has(&st, PS_GID));
    CHECK(st.uid[0] == r && st.uid[1] == e && st.uid[2] == s);
    CHECK(st.gid[0] == gr && st.gid[1] == ge && st.gid[2] == gs);
    CHECK_INT(st.tgid, getpid());
    CHECK_INT(st.pid, getpid());
    CHECK_INT(st.ppid, getppid());
    CHECK_INT(st.state, 'R');
    CHECK_INT(st.ngroups, getgroups(0, NULL));
    CHECK(procstatus_has(&st, PS_NSPID) && st.nspid > 0);
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2] = {{0}};
    REQUIRE(syscall(SYS_capget, &h, d) == 0);
    CHECK_U64(st.cap_prm, (uint64_t)d[1].permitted << 32 | d[0].permitted);
    CHECK_U64(st.cap_eff, (uint64_t)d[1].effective << 32 | d[0].effective);
    CHECK(st.sig_ign & (1ull << (SIGUSR1 - 1)));
    CHECK(!(st.sig_cgt & (1ull << (SIGUSR1 - 1))));
    CHECK(st.sig_cgt & (1ull << (SIGUSR2 - 1)));
    CHECK(procstatus_has(&st, PS_VCSW) && procstatus_has(&st, PS_NVCSW));
    CHECK_U64(st.bad, 0);
    sigaction(SIGUSR1, &o1, NULL);
    sigaction(SIGUSR2, &o2, NULL);
}

static void *sleeper(void *arg)
{
    int *fd = arg;
    char c;
    while (read(*fd, &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* A thread's own file (task/TID/status) through a kept descriptor and a kept buffer: its
 * tid, its process, its voluntary switches moving as it blocks; a second read allocates
 * nothing new. */
static void test_read_thread_fd(void)
{
    int p[2];
    REQUIRE(pipe(p) == 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, sleeper, &p[0]) == 0);
    /* Its tid: the task that is not us. */
    pid_t tid = 0;
    for (int tries = 0; !tid && tries < 1000; tries++) {
        DIR *dir = opendir("/proc/self/task");
        REQUIRE(dir);
        struct dirent *de;
        while ((de = readdir(dir)))
            if (de->d_name[0] != '.' && atoi(de->d_name) != getpid())
                tid = atoi(de->d_name);
        closedir(dir);
    }
    REQUIRE(tid > 0);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/status", getpid(), tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct strbuf sb = {0};
    struct procstatus st;
    CHECK_INT(procstatus_read_fd(fd, &sb, &st), 0);
    CHECK_INT(st.pid, tid);
    CHECK_INT(st.tgid, getpid());
    size_t cap = sb.cap;
    char *buf = sb.buf;
    CHECK_INT(procstatus_read_fd(fd, &sb, &st), 0);
    CHECK(sb.cap == cap && sb.buf == buf);
    struct procstatus by_path;
    CHECK_INT(procstatus_read(getpid(), tid, &sb, &by_path), 0);
    CHECK_INT(by_path.pid, tid);
    CHECK(sb.buf == buf);
    CHECK_INT(write(p[1], "x", 1), 1);
    REQUIRE(pthread_join(th, NULL) == 0);
    /* Gone: the kept descriptor reads nothing. (pthread_join returns at the futex wake of
     * its exit, a moment before the kernel releases the task.) */
    int r = 0;
    for (int tries = 0; tries < 1000 && (r = procstatus_read_fd(fd, &sb, &st)) == 0; tries++)
        usleep(1000);
    CHECK_INT(r, -ESRCH);
    CHECK_INT(procstatus_read(getpid(), tid, NULL, &st), -ESRCH);
    close(fd);
    close(p[0]);
    close(p[1]);
    strbuf_finish(&sb);
    memset(&st, 0xff, sizeof(st));
    CHECK_INT(procstatus_read_fd(-1, &sb, &st), -EBADF);
    CHECK_U64(st.have, 0); /* nothing left from before */
}

/* A child in NGROUPS_MAX (65536) groups of 10-digit ids: a status file of ~700 KB, read
 * whole (the buffer grows past it), CapPrm and the rest after the Groups line right. */
static void test_read_child_in_65536_groups(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: cannot setgroups; skipped\n");
        return;
    }
    enum { N = 65536 };
    gid_t *g = xmalloc(N * sizeof(*g));
    for (int i = 0; i < N; i++)
        g[i] = 1000000000u + (gid_t)i;
    int to[2], from[2];
    REQUIRE(pipe(to) == 0 && pipe(from) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        char c;
        close(to[1]);
        close(from[0]);
        if (setgroups(N, g) < 0 || write(from[1], "A", 1) != 1)
            _exit(1);
        while (read(to[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    free(g);
    close(to[0]);
    close(from[1]);
    char c = 0;
    CHECK_INT(read(from[0], &c, 1), 1);
    CHECK_INT(c, 'A');
    struct strbuf sb = {0};
    struct procstatus st, self;
    CHECK_INT(procstatus_read(pid, 0, &sb, &st), 0);
    CHECK(sb.cap > 650000);
    CHECK_INT(st.ngroups, N);
    CHECK_INT(st.pid, pid);
    CHECK_INT(procstatus_read(getpid(), 0, NULL, &self), 0);
    CHECK(procstatus_has(&st, PS_CAPPRM) && procstatus_has(&st, PS_VCSW));
    CHECK_U64(st.cap_prm, self.cap_prm);
    CHECK_U64(st.sig_ign, self.sig_ign);
    strbuf_finish(&sb);
    close(to[1]);
    close(from[0]);
    int ws;
    REQUIRE(waitpid(pid, &ws, 0) == pid);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* A file past PROCSTATUS_MAX_SIZE is no status file: -EFBIG. An empty one: -ESRCH. */
static void test_read_limits(void)
{
    char path[] = "/tmp/test_procstatus-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    struct strbuf sb = {0};
    struct procstatus st;
    CHECK_INT(procstatus_read_fd(fd, &sb, &st), -ESRCH);
    REQUIRE(ftruncate(fd, PROCSTATUS_MAX_SIZE + 1) == 0);
    CHECK_INT(procstatus_read_fd(fd, &sb, &st), -EFBIG);
    CHECK(sb.cap <= PROCSTATUS_MAX_SIZE);
    /* Just below the limit: read. */
    REQUIRE(ftruncate(fd, 0) == 0);
    char line[] = "CapPrm:\t1ff\n";
    REQUIRE(pwrite(fd, line, strlen(line), 0) == (ssize_t)strlen(line));
    REQUIRE(ftruncate(fd, PROCSTATUS_MAX_SIZE - 2) == 0);
    CHECK_INT(procstatus_read_fd(fd, &sb, &st), 0);
    CHECK_U64(st.cap_prm, 0x1ff);
    strbuf_finish(&sb);
    close(fd);

    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(0);
    int ws;
    REQUIRE(waitpid(pid, &ws, 0) == pid);
    CHECK_INT(procstatus_read(pid, 0, NULL, &st), -ESRCH);
    CHECK_INT(procstatus_read(0, 0, NULL, &st), -ESRCH);
    CHECK_INT(procstatus_read(-5, 0, NULL, &st), -ESRCH);
}

/* ShdPnd: a signal sent to the process (kill) while every thread blocks it waits in the
 * shared queue; one sent to a thread (tgkill) does not. (The EINTR repair looks for ignored
 * signals waiting there: any thread may take one that woke another.) */
static uint64_t shared_pending(int fd)
{
    struct strbuf sb = {0};
    struct procstatus st;
    uint64_t shd = UINT64_MAX;
    if (procstatus_read_fd(fd, &sb, &st) == 0 && procstatus_has(&st, PS_SHDPND))
        shd = st.sig_shd;
    strbuf_finish(&sb);
    return shd;
}

static void test_shared_pending_of_self(void)
{
    sigset_t usr2, old;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    REQUIRE(sigprocmask(SIG_BLOCK, &usr2, &old) == 0);
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    uint64_t bit = 1ull << (SIGUSR2 - 1);
    CHECK(!(shared_pending(fd) & bit));
    syscall(SYS_tgkill, getpid(), gettid(), SIGUSR2);
    CHECK(!(shared_pending(fd) & bit));
    struct timespec zero = {0, 0};
    CHECK_INT(sigtimedwait(&usr2, NULL, &zero), SIGUSR2);
    kill(getpid(), SIGUSR2);
    CHECK(shared_pending(fd) & bit);
    CHECK_INT(sigtimedwait(&usr2, NULL, &zero), SIGUSR2);
    CHECK(!(shared_pending(fd) & bit));
    close(fd);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

int main(void)
{
    RUN(test_parse_kernel_format);
    RUN(test_groups_beyond_4k);
    RUN(test_cut_inside_a_value);
    RUN(test_every_prefix);
    RUN(test_malformed);
    RUN(test_repeated_key);
    RUN(test_read_self);
    RUN(test_read_thread_fd);
    RUN(test_read_child_in_65536_groups);
    RUN(test_read_limits);
    RUN(test_shared_pending_of_self);
    return check_status("test_procstatus");
}
