/* forker.c: creates child processes with clone() without CLONE_THREAD and without an exit
 * signal (the kernel reports such a clone to a tracer as PTRACE_EVENT_CLONE and attaches
 * the child), each child exec'ing /bin/true, and waits for each with __WALL. A profiler
 * that takes these children for threads of this process, or leaves one stopped, makes it
 * hang. Usage: forker N; prints "ready PID", then "done N" and exits 0. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char stack[64 * 1024] __attribute__((aligned(16)));

static int child(void *arg)
{
    (void)arg;
    execl("/bin/true", "true", (char *)NULL);
    _exit(127);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    printf("ready %d\n", getpid());
    fflush(stdout);
    usleep(300000); /* time for the profiler to attach */
    int done = 0;
    for (int i = 0; i < n; i++) {
        /* No flags, no exit signal: a new process, reported to a tracer as a clone. */
        pid_t c = clone(child, stack + sizeof(stack), 0, NULL);
        if (c < 0)
            return 1;
        int st;
        if (waitpid(c, &st, __WALL) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            done++;
    }
    printf("done %d\n", done);
    fflush(stdout);
    return done == n ? 0 : 1;
}
