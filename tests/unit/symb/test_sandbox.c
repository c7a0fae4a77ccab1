/* test_sandbox.c: what profd-symbolizer can do once it is in its sandbox: read and map the
 * descriptors it has, and nothing else. Each check runs in a child that enters the sandbox
 * (as the helper does) and tries. */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "util.h"

/* In the child: results go to fd 3 (the only descriptor the sandbox keeps), one int each. */
static void report(int v)
{
    if (write(3, &v, sizeof(v)) != sizeof(v))
        _exit(99);
}

/* The result of a call: 0, or errno. */
static int err_of(long r)
{
    return r < 0 ? errno : 0;
}

enum { T_OPEN, T_OPENAT, T_STAT, T_SOCKET, T_EXEC_MMAP, T_EXEC_MPROTECT, T_FSTAT, T_READ_MMAP,
       T_COUNT };

/* Enter the sandbox and try everything, reporting on fd 3 (a socket to the parent); then,
 * once the parent has looked at us and says go, try `last`, which must kill us. */
static void child(int out, const char *last)
{
    if (dup2(out, 3) < 0)
        _exit(98);
    struct sandbox_opts o = {.max_memory = 1ull << 30, .max_cpu_s = 60, .keep_fd = 3};
    if (sandbox_enter(&o) < 0)
        _exit(97);
    int r[T_COUNT];
    r[T_OPEN] = err_of(open("/etc/passwd", O_RDONLY));
    r[T_OPENAT] = err_of(openat(AT_FDCWD, "/etc/hostname", O_RDONLY));
    struct stat st;
    r[T_STAT] = err_of(stat("/", &st));
    r[T_SOCKET] = err_of(socket(AF_INET, SOCK_STREAM, 0));
    void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r[T_EXEC_MMAP] = p == MAP_FAILED ? errno : 0;
    void *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r[T_EXEC_MPROTECT] = q == MAP_FAILED ? -1 : err_of(mprotect(q, 4096, PROT_READ | PROT_EXEC));
    r[T_FSTAT] = err_of(fstat(3, &st));
    void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r[T_READ_MMAP] = m == MAP_FAILED ? errno : 0;
    for (int i = 0; i < T_COUNT; i++)
        report(r[i]);
    /* Wait for the parent's go (a byte on the socket), then try what must kill us. */
    char c;
    if (read(3, &c, 1) != 1)
        _exit(96);
    if (!strcmp(last, "fork"))
        syscall(SYS_fork);
    else if (!strcmp(last, "execve"))
        execl("/bin/true", "true", (char *)NULL);
    else if (!strcmp(last, "ptrace"))
        syscall(SYS_ptrace, 0, 0, 0, 0);
    else if (!strcmp(last, "kill"))
        kill(1, 0);
    _exit(0);
}

static void run(const char *last)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        child(sv[1], last);
    }
    close(sv[1]);
    int r[T_COUNT];
    for (int i = 0; i < T_COUNT; i++)
        REQUIRE(read(sv[0], &r[i], sizeof(r[i])) == sizeof(r[i]));
    CHECK_INT(r[T_OPEN], EACCES);
    CHECK_INT(r[T_OPENAT], EACCES);
    CHECK_INT(r[T_STAT], EACCES);
    CHECK_INT(r[T_SOCKET], EACCES);
    CHECK_INT(r[T_EXEC_MMAP], EACCES);
    CHECK_INT(r[T_EXEC_MPROTECT], EACCES);
    CHECK_INT(r[T_FSTAT], 0);
    CHECK_INT(r[T_READ_MMAP], 0);
    /* What the kernel says of it. */
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    CHECK(read_file(path, buf, sizeof(buf)) > 0);
    CHECK_CONTAINS(buf, "NoNewPrivs:\t1");
    CHECK_CONTAINS(buf, "Seccomp:\t2");
    CHECK_CONTAINS(buf, "CapEff:\t0000000000000000");
    CHECK_CONTAINS(buf, "CapPrm:\t0000000000000000");
    CHECK_CONTAINS(buf, "CapAmb:\t0000000000000000");
    if (geteuid() == 0) {
        CHECK_CONTAINS(buf, "Uid:\t65534\t65534\t65534\t65534");
        CHECK_CONTAINS(buf, "CapBnd:\t0000000000000000");
    }
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_uid == 0); /* not dumpable: /proc/PID is root's */
    REQUIRE(write(sv[0], "g", 1) == 1);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (last[0]) {
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
            fprintf(stderr, "%s: status %#x\n", last, status);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS);
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    close(sv[0]);
}

static void test_allowed(void)
{
    run("");
}

static void test_fork_kills(void)
{
    run("fork");
}

static void test_exec_kills(void)
{
    run("execve");
}

static void test_ptrace_kills(void)
{
    run("ptrace");
}

static void test_kill_kills(void)
{
    run("kill");
}

/* Inherited hard limits below the sandbox's own (a profd started with RLIMIT_NOFILE 256,
 * RLIMIT_CPU 30 s) are kept, not an error: the helper used to exit at start with EPERM
 * (raising a hard limit needs privileges). */
static void test_lower_limits_kept(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct rlimit nofile = {256, 256}, cpu = {30, 30};
        if (setrlimit(RLIMIT_NOFILE, &nofile) < 0 || setrlimit(RLIMIT_CPU, &cpu) < 0 ||
            dup2(sv[1], 3) < 0)
            _exit(98);
        struct sandbox_opts o = {.max_memory = 1ull << 30, .max_cpu_s = 60, .keep_fd = 3};
        if (sandbox_enter(&o) < 0)
            _exit(97);
        char c = 'r';
        if (write(3, &c, 1) != 1 || read(3, &c, 1) != 1) /* in, then wait for the parent */
            _exit(96);
        _exit(0);
    }
    close(sv[1]);
    char c;
    CHECK(read(sv[0], &c, 1) == 1); /* in the sandbox */
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/limits", pid);
    CHECK(read_file(path, buf, sizeof(buf)) > 0);
    CHECK_CONTAINS(buf, "Max open files            256                  256");
    CHECK_CONTAINS(buf, "Max cpu time              30                   30");
    REQUIRE(write(sv[0], "g", 1) == 1);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "status %#x\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(sv[0]);
}

int main(void)
{
    RUN(test_allowed);
    RUN(test_lower_limits_kept);
    RUN(test_fork_kills);
    RUN(test_exec_kills);
    RUN(test_ptrace_kills);
    RUN(test_kill_kills);
    return check_status("test_sandbox");
}
