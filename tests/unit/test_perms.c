/* test_perms.c: the ptrace access rule as a decision table, credentials read from /proc for
 * live, dead and non-dumpable processes, and peer credentials from real sockets. Runs as
 * root to make children with other uids; as another user those cases are skipped. */
#include "perms.h"
#include "check.h"
#include "procstatus.h"
#include "util.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

/* Permitted and effective capability sets from capget(2), a source apart from /proc. */
static void own_caps(uint64_t *prm, uint64_t *eff)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2] = {{0}}; /* valgrind sees only d[0] written */
    REQUIRE(syscall(SYS_capget, &h, d) == 0);
    *prm = (uint64_t)d[1].permitted << 32 | d[0].permitted;
    *eff = (uint64_t)d[1].effective << 32 | d[0].effective;
}

static struct proc_creds creds(uid_t u, gid_t g, bool dumpable, uint64_t caps)
{
    return (struct proc_creds){
        .uid = {u, u, u}, .gid = {g, g, g}, .dumpable = dumpable, .cap_prm = caps};
}

#define PTRACE_CAP (1ull << CAP_SYS_PTRACE)

/* A client with CAP_SYS_PTRACE (root) may; equal credentials with no extra capability may;
 * any of the three uids or gids differing, a non-dumpable target, or a capability the
 * client lacks is refused with a reason that names what differs. Being uid 0 is not what
 * counts: a uid-0 client without CAP_SYS_PTRACE is held to the rule. */
static void test_check_decision_table(void)
{
    char why[512];
    struct peer user = {.pid = 100, .uid = 1000, .gid = 1000, .cap_eff = 0};
    struct peer root = {.pid = 1, .uid = 0, .gid = 0, .cap_eff = 0x1ffffffffffull};

    struct proc_creds same = creds(1000, 1000, true, 0);
    CHECK_INT(perms_check(&user, &same, why, sizeof(why)), 0);

    /* CAP_SYS_PTRACE: whatever the target. */
    struct proc_creds hard = creds(5, 6, false, ~0ull);
    hard.uid[2] = 7;
    CHECK_INT(perms_check(&root, &hard, why, sizeof(why)), 0);
    CHECK_INT(perms_check(&root, &same, why, sizeof(why)), 0);
    struct peer tracer = user;
    tracer.cap_eff = PTRACE_CAP;
    CHECK_INT(perms_check(&tracer, &hard, why, sizeof(why)), 0);

    /* uid 0 without it: not other users' processes; and not root's either, because a root
     * process's dumpable flag cannot be read from /proc (the safe side of the kernel's
     * rule). */
    struct peer weak_root = root;
    weak_root.cap_eff &= ~PTRACE_CAP;
    why[0] = '\0';
    CHECK_INT(perms_check(&weak_root, &same, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "you are uid 0 gid 0");
    struct proc_creds root_target = creds(0, 0, true, 0x1ffffffffffull & ~PTRACE_CAP);
    why[0] = '\0';
    CHECK_INT(perms_check(&weak_root, &root_target, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "needs CAP_SYS_PTRACE");
    root_target.cap_prm |= PTRACE_CAP;
    CHECK_INT(perms_check(&weak_root, &root_target, why, sizeof(why)), -EPERM);

    for (int i = 0; i < 3; i++) {
        struct proc_creds c = same;
        c.uid[i] = 1001;
        why[0] = '\0';
        CHECK_INT(perms_check(&user, &c, why, sizeof(why)), -EPERM);
        char want[64];
        snprintf(want, sizeof(want), "uid %u/%u/%u", c.uid[0], c.uid[1], c.uid[2]);
        CHECK_CONTAINS(why, want);
        CHECK_CONTAINS(why, "you are uid 1000 gid 1000");

        c = same;
        c.gid[i] = 2000;
        why[0] = '\0';
        CHECK_INT(perms_check(&user, &c, why, sizeof(why)), -EPERM);
        snprintf(want, sizeof(want), "gid %u/%u/%u", c.gid[0], c.gid[1], c.gid[2]);
        CHECK_CONTAINS(why, want);
        CHECK_CONTAINS(why, "you are uid 1000 gid 1000");
    }

    struct proc_creds nd = creds(1000, 1000, false, 0);
    why[0] = '\0';
    CHECK_INT(perms_check(&user, &nd, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "not dumpable");

    /* Capabilities: the target's permitted set must be within the client's effective. */
    struct proc_creds capped = creds(1000, 1000, true, 0x1400); /* CAP_NET_ADMIN|NET_BIND */
    why[0] = '\0';
    CHECK_INT(perms_check(&user, &capped, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "0x1400");
    struct peer partial = user;
    partial.cap_eff = 0x400;
    why[0] = '\0';
    CHECK_INT(perms_check(&partial, &capped, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "0x1000");
    struct peer equal = user;
    equal.cap_eff = 0x1400;
    CHECK_INT(perms_check(&equal, &capped, why, sizeof(why)), 0);
    struct peer super = user;
    super.cap_eff = 0xffff; /* not CAP_SYS_PTRACE (19) */
    CHECK_INT(perms_check(&super, &capped, why, sizeof(why)), 0);

    /* A small reason buffer is cut, never overrun (ASan watches the canary). */
    char *small = xmalloc(16);
    CHECK_INT(perms_check(&user, &nd, small, 16), -EPERM);
    CHECK_U64(strlen(small), 15);
    free(small);
}

/* Our own credentials as /proc shows them: the ids getresuid/getresgid report, dumpable,
 * and the permitted capabilities capget reports. */
static void test_creds_of_self(void)
{
    struct proc_creds c;
    memset(&c, 0xaa, sizeof(c));
    CHECK_INT(proc_creds_read(getpid(), &c, NULL, 0), 0);
    uid_t r, e, s;
    gid_t gr, ge, gs;
    REQUIRE(getresuid(&r, &e, &s) == 0 && getresgid(&gr, &ge, &gs) == 0);
    CHECK(c.uid[0] == r && c.uid[1] == e && c.uid[2] == s);
    CHECK(c.gid[0] == gr && c.gid[1] == ge && c.gid[2] == gs);
    CHECK(c.dumpable);
    uint64_t prm, eff;
    own_caps(&prm, &eff);
    CHECK_U64(c.cap_prm, prm);
}

/* A reaped child's pid, and pids that never exist, are -ESRCH. */
static void test_creds_of_dead_pid(void)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(0);
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    struct proc_creds c;
    CHECK_INT(proc_creds_read(pid, &c, NULL, 0), -ESRCH);
    CHECK_INT(proc_creds_read(0, &c, NULL, 0), -ESRCH);
    CHECK_INT(proc_creds_read(-1, &c, NULL, 0), -ESRCH);
    CHECK_INT(proc_creds_read(INT32_MAX, &c, NULL, 0), -ESRCH);
}

/* A child that takes the ids given (unless NULL), says 'A' dumpable, and on a byte from
 * the parent says 'B' after prctl(PR_SET_DUMPABLE, 0); it exits when its pipe closes. */
struct kid {
    pid_t pid;
    int to, from;
};

/* Real, effective and saved ids for a child; NULL stays root. With ngroups, that many
 * supplementary groups (1000000 and up); with keepcaps, its permitted capabilities kept
 * across the change of uid (PR_SET_KEEPCAPS). */
struct ids {
    uid_t uid[3];
    gid_t gid[3];
    int ngroups;
    bool keepcaps;
};

static const struct ids nobody_ids = {.uid = {NOBODY, NOBODY, NOBODY},
                                      .gid = {NOBODY, NOBODY, NOBODY}};

static int become(const struct ids *ids)
{
    if (!ids)
        return 0;
    gid_t groups[1024];
    if (ids->ngroups > (int)ARRAY_SIZE(groups))
        return -1;
    for (int i = 0; i < ids->ngroups; i++)
        groups[i] = 1000000 + (gid_t)i;
    if (setgroups((size_t)ids->ngroups, groups) < 0 ||
        (ids->keepcaps && prctl(PR_SET_KEEPCAPS, 1) < 0) ||
        setresgid(ids->gid[0], ids->gid[1], ids->gid[2]) < 0 ||
        setresuid(ids->uid[0], ids->uid[1], ids->uid[2]) < 0)
        return -1;
    return 0;
}

static void kid_start(struct kid *k, const struct ids *ids)
{
    int to[2], from[2];
    REQUIRE(pipe(to) == 0 && pipe(from) == 0);
    fflush(NULL);
    k->pid = fork();
    REQUIRE(k->pid >= 0);
    if (k->pid == 0) {
        close(to[1]);
        close(from[0]);
        char c;
        if (become(ids) < 0)
            _exit(1);
        /* Changing the effective uid clears the flag (prctl(2)); set it back to start from
         * a dumpable process. */
        if (prctl(PR_SET_DUMPABLE, 1) < 0 || write(from[1], "A", 1) != 1)
            _exit(2);
        ssize_t r = read(to[0], &c, 1);
        if (r == 0) /* the parent is done after 'A' */
            _exit(0);
        if (r != 1)
            _exit(2);
        if (prctl(PR_SET_DUMPABLE, 0) < 0 || write(from[1], "B", 1) != 1)
            _exit(3);
        while (read(to[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    close(to[0]);
    close(from[1]);
    k->to = to[1];
    k->from = from[0];
}

static char kid_wait(struct kid *k)
{
    char c = 0;
    if (read(k->from, &c, 1) != 1)
        return 0;
    return c;
}

static int kid_finish(struct kid *k)
{
    close(k->to);
    close(k->from);
    int st;
    REQUIRE(waitpid(k->pid, &st, 0) == k->pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Owner of /proc/PID/status: root for a non-dumpable process (proc(5)), the kernel's view
 * to compare with. */
static uid_t status_owner(pid_t pid)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    REQUIRE(stat(path, &st) == 0);
    return st.st_uid;
}

/* A real non-dumpable process: a child running as nobody is dumpable and nobody may
 * profile it; after prctl(PR_SET_DUMPABLE, 0) the kernel shows it non-dumpable (its files
 * in /proc turn root's), proc_creds_read says so, and nobody is refused. */
static void test_creds_of_non_dumpable_child(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: cannot make a child with another uid; skipped\n");
        return;
    }
    struct kid k;
    kid_start(&k, &nobody_ids);
    struct peer nobody = {.pid = 1, .uid = NOBODY, .gid = NOBODY, .cap_eff = 0};
    char why[256];
    struct proc_creds c;
    CHECK_INT(kid_wait(&k), 'A');
    CHECK_INT(status_owner(k.pid), NOBODY);
    CHECK_INT(proc_creds_read(k.pid, &c, NULL, 0), 0);
    CHECK(c.uid[0] == NOBODY && c.uid[1] == NOBODY && c.uid[2] == NOBODY);
    CHECK(c.gid[0] == NOBODY && c.gid[1] == NOBODY && c.gid[2] == NOBODY);
    CHECK(c.dumpable);
    CHECK_U64(c.cap_prm, 0); /* dropped with the uids */
    CHECK_INT(perms_check(&nobody, &c, why, sizeof(why)), 0);

    CHECK_INT(write(k.to, "g", 1), 1);
    CHECK_INT(kid_wait(&k), 'B');
    CHECK_INT(status_owner(k.pid), 0);
    CHECK_INT(proc_creds_read(k.pid, &c, NULL, 0), 0);
    CHECK(c.uid[0] == NOBODY && c.uid[1] == NOBODY && c.uid[2] == NOBODY);
    CHECK(c.gid[0] == NOBODY && c.gid[1] == NOBODY && c.gid[2] == NOBODY);
    CHECK(!c.dumpable);
    why[0] = '\0';
    CHECK_INT(perms_check(&nobody, &c, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "not dumpable");
    CHECK_INT(kid_finish(&k), 0);
}

/* Real, effective and saved ids that all differ are read in that order, and the refusal
 * names all three. */
static void test_creds_of_child_with_distinct_ids(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: skipped\n");
        return;
    }
    static const struct ids ids = {.uid = {1001, 1002, 1003}, .gid = {2001, 2002, 2003}};
    struct kid k;
    kid_start(&k, &ids);
    CHECK_INT(kid_wait(&k), 'A');
    struct proc_creds c;
    CHECK_INT(proc_creds_read(k.pid, &c, NULL, 0), 0);
    CHECK(c.uid[0] == 1001 && c.uid[1] == 1002 && c.uid[2] == 1003);
    CHECK(c.gid[0] == 2001 && c.gid[1] == 2002 && c.gid[2] == 2003);
    struct peer p = {.pid = 1, .uid = 1001, .gid = 2001, .cap_eff = 0};
    char why[256];
    CHECK_INT(perms_check(&p, &c, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "uid 1001/1002/1003 gid 2001/2002/2003");
    CHECK_INT(kid_finish(&k), 0);
}

/* A root process that clears its dumpable flag still reads as dumpable: its /proc files
 * belong to root either way, so perms.c counts euid 0 as dumpable. A client that is not
 * root fails the uid rule, and a uid-0 one without CAP_SYS_PTRACE the capability rule
 * (this child keeps root's full set). */
static void test_creds_of_root_non_dumpable_child(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: skipped\n");
        return;
    }
    struct kid k;
    kid_start(&k, NULL);
    CHECK_INT(kid_wait(&k), 'A');
    CHECK_INT(write(k.to, "g", 1), 1);
    CHECK_INT(kid_wait(&k), 'B');
    struct proc_creds c;
    CHECK_INT(proc_creds_read(k.pid, &c, NULL, 0), 0);
    CHECK(c.uid[1] == 0);
    CHECK(c.dumpable);
    struct peer user = {.pid = 1, .uid = 1000, .gid = 1000, .cap_eff = 0};
    char why[256];
    CHECK_INT(perms_check(&user, &c, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "uid 0/0/0");
    uint64_t prm, eff;
    own_caps(&prm, &eff);
    CHECK_U64(c.cap_prm, prm);
    struct peer weak_root = {.pid = 1, .uid = 0, .gid = 0, .cap_eff = eff & ~PTRACE_CAP};
    why[0] = '\0';
    CHECK_INT(perms_check(&weak_root, &c, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "capabilities");
    CHECK_INT(kid_finish(&k), 0);
}

/* The defect of the 4 KiB readers: a process of nobody's in 700 supplementary groups that
 * kept root's permitted capabilities. Its CapPrm lies past the first 4 KiB of its status;
 * it must read as what the kernel holds, and nobody must be refused for it (it read as 0,
 * and the rule let nobody profile a process holding every capability). */
static void test_creds_of_child_in_many_groups(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: skipped\n");
        return;
    }
    static const struct ids ids = {.uid = {NOBODY, NOBODY, NOBODY},
                                   .gid = {NOBODY, NOBODY, NOBODY},
                                   .ngroups = 700,
                                   .keepcaps = true};
    struct kid k;
    kid_start(&k, &ids);
    CHECK_INT(kid_wait(&k), 'A');
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)k.pid);
    CHECK(read_file(path, buf, sizeof(buf)) == sizeof(buf) - 1 && !strstr(buf, "\nCapPrm:"));
    struct proc_creds c;
    CHECK_INT(proc_creds_read(k.pid, &c, NULL, 0), 0);
    CHECK(c.uid[0] == NOBODY && c.uid[1] == NOBODY && c.uid[2] == NOBODY);
    CHECK(c.dumpable);
    uint64_t prm, eff;
    own_caps(&prm, &eff);
    CHECK(prm != 0);
    CHECK_U64(c.cap_prm, prm);
    struct peer nobody = {.pid = 1, .uid = NOBODY, .gid = NOBODY, .cap_eff = 0};
    char why[256] = "";
    CHECK_INT(perms_check(&nobody, &c, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "holds capabilities you lack");
    CHECK_INT(kid_finish(&k), 0);
}

/* Credentials from a status text: every field the rule needs, or none. A text cut before
 * CapPrm (as a 4 KiB read cut it) or with a malformed Uid gives no credentials (-EPROTO,
 * the field named), never a CapPrm of 0 that the rule would pass; proc_creds_read says the
 * same in a refusal for the client. */
static void test_creds_from_status_fail_closed(void)
{
    static const char full[] = "Name:\tx\nUid:\t65534\t65534\t65534\t65534\n"
                               "Gid:\t65534\t65534\t65534\t65534\nGroups:\t1 2 3 \n"
                               "CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\n";
    struct procstatus st;
    struct proc_creds c;
    char why[256] = "";
    procstatus_parse(full, strlen(full), &st);
    CHECK_INT(proc_creds_from_status(&st, &c, why, sizeof(why)), 0);
    CHECK_U64(c.cap_prm, 0x1ffffffffffull);
    CHECK(c.uid[0] == NOBODY && c.gid[2] == NOBODY);
    struct peer nobody = {.pid = 1, .uid = NOBODY, .gid = NOBODY, .cap_eff = 0};
    c.dumpable = true;
    CHECK_INT(perms_check(&nobody, &c, why, sizeof(why)), -EPERM);

    /* Cut inside the Groups line: CapPrm is not there. */
    procstatus_parse(full, (size_t)(strstr(full, "Groups:") - full) + 9, &st);
    memset(&c, 0, sizeof(c));
    why[0] = '\0';
    CHECK_INT(proc_creds_from_status(&st, &c, why, sizeof(why)), -EPROTO);
    CHECK_CONTAINS(why, "no CapPrm line");
    /* Cut inside CapPrm's value. */
    procstatus_parse(full, (size_t)(strstr(full, "CapPrm:") - full) + 10, &st);
    CHECK_INT(proc_creds_from_status(&st, &c, NULL, 0), -EPROTO);

    static const char bad_uid[] = "Uid:\t65534\t65534\t65534\nGid:\t0\t0\t0\t0\n"
                                  "CapPrm:\t0\n";
    procstatus_parse(bad_uid, strlen(bad_uid), &st);
    why[0] = '\0';
    CHECK_INT(proc_creds_from_status(&st, &c, why, sizeof(why)), -EPROTO);
    CHECK_CONTAINS(why, "a malformed Uid line");
    static const char no_gid[] = "Uid:\t1\t1\t1\t1\nCapPrm:\t0\n";
    procstatus_parse(no_gid, strlen(no_gid), &st);
    why[0] = '\0';
    CHECK_INT(proc_creds_from_status(&st, &c, why, sizeof(why)), -EPROTO);
    CHECK_CONTAINS(why, "no Gid line");

    /* A live process: a refusal that names the pid; a dead one: no such process. */
    why[0] = '\0';
    CHECK_INT(proc_creds_read(-1, &c, why, sizeof(why)), -ESRCH);
    CHECK_CONTAINS(why, "no such process: -1");
}

/* SO_PEERCRED over a socketpair gives our own pid, uid and gid, and the effective
 * capabilities capget reports; a descriptor that is not a socket is an error. */
static void test_peer_from_socketpair(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct peer p;
    memset(&p, 0xaa, sizeof(p));
    CHECK_INT(peer_from_socket(sv[0], &p), 0);
    CHECK_INT(p.pid, getpid());
    CHECK_INT(p.uid, geteuid());
    CHECK_INT(p.gid, getegid());
    uint64_t prm, eff;
    own_caps(&prm, &eff);
    CHECK_U64(p.cap_eff, eff);
    close(sv[0]);
    close(sv[1]);

    int pp[2];
    REQUIRE(pipe(pp) == 0);
    CHECK_INT(peer_from_socket(pp[0], &p), -ENOTSOCK);
    close(pp[0]);
    close(pp[1]);
}

/* Connect to path from a child that first takes ids (unless NULL) and, if drop_cap >= 0,
 * removes that capability from its effective set only; it stays connected until go closes.
 * Returns the child's pid and the accepted descriptor. */
static pid_t client_child(int l, const struct sockaddr_un *sa, const struct ids *ids, int drop_cap,
                          int *accepted, int *go_w)
{
    int go[2];
    REQUIRE(pipe(go) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(l);
        close(go[1]);
        if (become(ids) < 0)
            _exit(1);
        if (drop_cap >= 0) {
            struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
            struct __user_cap_data_struct d[2] = {{0}};
            if (syscall(SYS_capget, &h, d) < 0)
                _exit(2);
            d[drop_cap / 32].effective &= ~(1u << (drop_cap % 32));
            if (syscall(SYS_capset, &h, d) < 0)
                _exit(3);
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
            _exit(4);
        char c;
        while (read(go[0], &c, 1) > 0) /* stay alive while the parent reads /proc */
            ;
        close(fd);
        _exit(0);
    }
    close(go[0]);
    *go_w = go[1];
    *accepted = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    CHECK(*accepted >= 0);
    return pid;
}

static void client_done(pid_t pid, int accepted, int go_w)
{
    close(go_w);
    if (accepted >= 0)
        close(accepted);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Clients that connect from other processes: the daemon side sees each one's pid, uid and
 * gid (told apart: gid 1234 for uid nobody) and its effective capabilities, not its
 * permitted ones; the rule refuses both our (root's) process. */
static void test_peer_from_connected_children(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: skipped\n");
        return;
    }
    char path[108];
    snprintf(path, sizeof(path), "/tmp/test_perms-%d.sock", (int)getpid());
    unlink(path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(l >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    REQUIRE(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 1) == 0);
    REQUIRE(chmod(path, 0777) == 0);

    static const struct ids user = {.uid = {NOBODY, NOBODY, NOBODY}, .gid = {1234, 1234, 1234}};
    int a, go;
    pid_t pid = client_child(l, &sa, &user, -1, &a, &go);
    struct peer p = {0};
    CHECK_INT(peer_from_socket(a, &p), 0);
    CHECK_INT(p.pid, pid);
    CHECK_INT(p.uid, NOBODY);
    CHECK_INT(p.gid, 1234);
    CHECK_U64(p.cap_eff, 0);
    struct proc_creds mine;
    REQUIRE(proc_creds_read(getpid(), &mine, NULL, 0) == 0);
    char why[256];
    CHECK_INT(perms_check(&p, &mine, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "you are uid 65534 gid 1234");
    client_done(pid, a, go);

    /* Root without CAP_SYS_PTRACE in its effective set (still in its permitted one): the
     * peer carries the effective set, so this client may not profile us. */
    uint64_t prm, eff;
    own_caps(&prm, &eff);
    REQUIRE(eff & PTRACE_CAP);
    pid = client_child(l, &sa, NULL, CAP_SYS_PTRACE, &a, &go);
    CHECK_INT(peer_from_socket(a, &p), 0);
    CHECK_INT(p.pid, pid);
    CHECK_INT(p.uid, 0);
    CHECK_U64(p.cap_eff, eff & ~PTRACE_CAP);
    struct proc_creds c;
    CHECK_INT(proc_creds_read(pid, &c, NULL, 0), 0);
    CHECK_U64(c.cap_prm, prm);
    why[0] = '\0';
    CHECK_INT(perms_check(&p, &mine, why, sizeof(why)), -EPERM);
    CHECK_CONTAINS(why, "capabilities");
    client_done(pid, a, go);

    close(l);
    unlink(path);
}

int main(void)
{
    RUN(test_check_decision_table);
    RUN(test_creds_of_self);
    RUN(test_creds_of_dead_pid);
    RUN(test_creds_of_non_dumpable_child);
    RUN(test_creds_of_child_with_distinct_ids);
    RUN(test_creds_of_root_non_dumpable_child);
    RUN(test_creds_of_child_in_many_groups);
    RUN(test_creds_from_status_fail_closed);
    RUN(test_peer_from_socketpair);
    RUN(test_peer_from_connected_children);
    return check_status("test_perms");
}
