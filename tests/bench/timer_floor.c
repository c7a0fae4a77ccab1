/* timer_floor.c: what a wake-up of an event loop costs on this machine, with nothing done in
 * it: a libev ev_timer at HZ, N wake-ups, the process's CPU time per wake-up. This is the floor
 * of a wall-clock (alarm) tick of profd, which wakes its loop at each tick.
 *   timer_floor HZ N   prints "wake_ns=NS" (CPU time per wake-up, ns) */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int n, wakes;

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w, (void)revents;
    if (++n >= wakes)
        ev_break(loop, EVBREAK_ALL);
}

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    double hz = argc > 1 ? atof(argv[1]) : 101;
    wakes = argc > 2 ? atoi(argv[2]) : 500;
    if (hz <= 0 || wakes <= 0) {
        fprintf(stderr, "usage: timer_floor HZ N\n");
        return 2;
    }
    struct ev_loop *loop = ev_default_loop(0);
    ev_timer t;
    ev_timer_init(&t, on_timer, 1 / hz, 1 / hz);
    ev_timer_start(loop, &t);
    double c0 = cpu_ns();
    ev_run(loop, 0);
    printf("wake_ns=%.0f\n", (cpu_ns() - c0) / wakes);
    return 0;
}
