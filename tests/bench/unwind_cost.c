/* unwind_cost.c: what the unwinder's place costs per sample (issue 9, privilege separation).
 *
 * profd unwinds in its own process, from the stack copy and the target's memory, with
 * libunwind parsing the target's .eh_frame (bounded and fuzzed: tests/fuzz/fuzz_unwind.c).
 * The alternative was to move it behind the same boundary as the symbolizer: every sample's
 * registers and stack copy sent to the unprivileged helper and its frames sent back. This
 * measures both, per sample, in the same run:
 *
 *   unwind  profd's unwinder (daemon/unwind.c) on real snapshots of a child spinning a few
 *           frames deep: warm (after the first), as profd runs it, CPU per sample;
 *   ipc     one round trip of a snapshot's size (registers and COPY bytes of stack) to
 *           another process over SOCK_SEQPACKET and 32 return addresses back, which the
 *           helper would add to every sample before doing the same unwind: wall time and
 *           CPU of both sides per sample.
 *
 * Usage: unwind_cost [-n SAMPLES] [-c COPY_BYTES]. Output: "key value" lines (ns). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "maps.h"
#include "unwind.h"

static uint64_t clk(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp);
    return v[n / 2];
}

static volatile uint64_t sink;

__attribute__((noinline)) static void leaf(void)
{
    while (sink != UINT64_MAX)
        sink++;
}

__attribute__((noinline)) static void middle(int d)
{
    volatile char pad[512];
    pad[0] = (char)d;
    if (d > 0)
        middle(d - 1);
    else
        leaf();
    sink += (uint64_t)pad[0];
}

int main(int argc, char **argv)
{
    int n = 20000;
    size_t copy = 16384;
    int opt;
    while ((opt = getopt(argc, argv, "n:c:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'c')
            copy = (size_t)atol(optarg);
        else
            return 2;
    }
    pid_t child = fork();
    if (child == 0) {
        middle(8);
        _exit(0);
    }
    usleep(100000);
    /* Ten snapshots of the spinning child, taken as profd takes them. */
    enum { SNAPS = 10 };
    static struct snapshot snaps[SNAPS];
    if (ptrace(PTRACE_SEIZE, child, 0, 0) < 0) {
        perror("PTRACE_SEIZE");
        return 1;
    }
    struct maps maps;
    for (int i = 0; i < SNAPS; i++) {
        int st;
        ptrace(PTRACE_INTERRUPT, child, 0, 0);
        waitpid(child, &st, __WALL);
        snaps[i].cap = copy;
        snaps[i].data = malloc(copy);
        ptrace(PTRACE_GETREGS, child, 0, &snaps[i].regs);
        snaps[i].full_regs = true;
        if (i == 0 && maps_read(child, false, NULL, &maps) < 0)
            return 1;
        const struct map_entry *stk = maps_find(&maps, snaps[i].regs.rsp);
        snapshot_copy_stack(child, snaps[i].regs.rsp, stk ? stk->end : snaps[i].regs.rsp + copy,
                            &snaps[i]);
        ptrace(PTRACE_CONT, child, 0, 0);
        usleep(2000);
    }
    struct unwinder u;
    unwinder_init(&u, child, &maps);
    uint64_t ips[UNWIND_MAX_FRAMES];
    enum unwind_end end;
    int frames = unwinder_unwind(&u, &snaps[0], ips, UNWIND_MAX_FRAMES, &end); /* cold */
    uint64_t *t = malloc((size_t)n * sizeof(*t));
    for (int i = 0; i < n; i++) {
        uint64_t c0 = clk(CLOCK_THREAD_CPUTIME_ID);
        unwinder_unwind(&u, &snaps[i % SNAPS], ips, UNWIND_MAX_FRAMES, &end);
        t[i] = clk(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    printf("frames %d\ncomplete %d\n", frames, end == UNWIND_COMPLETE);
    printf("unwind_cpu_p50 %llu\n", (unsigned long long)median(t, (size_t)n));

    /* The round trip the helper would add. */
    int sv[2];
    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
    size_t req = sizeof(struct user_regs_struct) + copy;
    pid_t echo = fork();
    if (echo == 0) {
        close(sv[0]);
        char *b = malloc(req);
        uint64_t reply[32] = {0};
        while (read(sv[1], b, req) > 0)
            if (write(sv[1], reply, sizeof(reply)) < 0)
                break;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        uint64_t cpu = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull +
                       (uint64_t)ru.ru_utime.tv_usec * 1000 +
                       (uint64_t)ru.ru_stime.tv_sec * 1000000000ull +
                       (uint64_t)ru.ru_stime.tv_usec * 1000;
        if (write(sv[1], &cpu, sizeof(cpu)) < 0)
            _exit(1);
        _exit(0);
    }
    close(sv[1]);
    int one = (int)(req + 4096);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    char *b = calloc(1, req);
    uint64_t reply[32];
    uint64_t *w = malloc((size_t)n * sizeof(*w)), *c = malloc((size_t)n * sizeof(*c));
    for (int i = 0; i < n; i++) {
        uint64_t w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_THREAD_CPUTIME_ID);
        if (write(sv[0], b, req) != (ssize_t)req || read(sv[0], reply, sizeof(reply)) <= 0) {
            perror("round trip");
            return 1;
        }
        w[i] = clk(CLOCK_MONOTONIC) - w0;
        c[i] = clk(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    shutdown(sv[0], SHUT_WR);
    uint64_t echo_cpu = 0;
    if (read(sv[0], &echo_cpu, sizeof(echo_cpu)) != sizeof(echo_cpu))
        echo_cpu = 0;
    waitpid(echo, NULL, 0);
    printf("ipc_bytes %zu\n", req);
    printf("ipc_wall_p50 %llu\n", (unsigned long long)median(w, (size_t)n));
    printf("ipc_cpu_p50 %llu\n", (unsigned long long)median(c, (size_t)n));
    printf("ipc_helper_cpu_mean %llu\n", (unsigned long long)(echo_cpu / (uint64_t)n));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    unwinder_finish(&u);
    maps_finish(&maps);
    return 0;
}
