/* oneshot_refresh.c: does a one-shot task-clock sample, re-armed at every tick with
 * PERF_EVENT_IOC_REFRESH(1) as profd's wall-clock modes do (daemon/perfsample.c perfs_arm),
 * always come?
 *
 * A thread spins; a disabled task-clock event on it (period 100 us, TID|TIME) is armed with
 * REFRESH(1) at a tick on an absolute CLOCK_MONOTONIC period, and at each later tick its ring
 * is read: a sample clears the arm and the event is armed again; no sample leaves it armed
 * (as profd counts `skipped.still_stopping`). An arm that has waited WATCH ticks while the
 * spinning thread ran more than 1 ms of CPU (ten periods) without a sample is *lost*; the
 * program then disables the event and arms it again (a watchdog), where profd waits on.
 *
 * Usage: oneshot_refresh [TICKS [PERIOD_US [WATCH]]] (5000, 1000, 50). Prints one line:
 * ticks, samples, ticks with the arm still waiting, lost arms, the longest wait in ticks and
 * the most CPU the thread ran while an arm waited. Not a test: run it by hand (perf events
 * need perf_event_paranoid <= 1 or CAP_PERFMON). */
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t spin_tid;

static void *spin(void *arg)
{
    spin_tid = (pid_t)syscall(SYS_gettid);
    for (;;)
        __asm__ volatile("");
    return arg;
}

/* The thread's CPU time so far, ns (schedstat). */
static uint64_t run_ns(pid_t tid)
{
    char path[64];
    unsigned long long r = 0;
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%llu", &r) != 1)
            r = 0;
        fclose(f);
    }
    return r;
}

int main(int argc, char **argv)
{
    int ticks = argc > 1 ? atoi(argv[1]) : 5000;
    long period_us = argc > 2 ? atol(argv[2]) : 1000;
    int watch = argc > 3 ? atoi(argv[3]) : 50;
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);
    while (!spin_tid)
        usleep(100);
    struct perf_event_attr pa;
    memset(&pa, 0, sizeof(pa));
    pa.size = sizeof(pa);
    pa.type = PERF_TYPE_SOFTWARE;
    pa.config = PERF_COUNT_SW_TASK_CLOCK;
    pa.sample_period = 100000; /* profd's ONESHOT_PERIOD_NS */
    pa.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
    pa.disabled = 1;
    pa.watermark = 1;
    pa.wakeup_watermark = 4096;
    int fd = (int)syscall(SYS_perf_event_open, &pa, spin_tid, -1, -1, 0);
    if (fd < 0) {
        perror("perf_event_open");
        return 1;
    }
    long pg = sysconf(_SC_PAGESIZE);
    struct perf_event_mmap_page *mp =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mp == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    int armed = 0, waited = 0, lost = 0, samples = 0, pending = 0, longest = 0;
    uint64_t armed_run = 0, most_ran = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int i = 0; i < ticks; i++) {
        next.tv_nsec += period_us * 1000;
        while (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
        uint64_t tail = mp->data_tail;
        int n = 0;
        while (tail < head) {
            struct perf_event_header *h = (void *)((char *)mp + pg + (tail & (uint64_t)(pg - 1)));
            n += h->type == PERF_RECORD_SAMPLE;
            tail += h->size;
        }
        __atomic_store_n(&mp->data_tail, head, __ATOMIC_RELEASE);
        samples += n;
        if (n) {
            armed = 0;
            waited = 0;
        }
        if (armed) {
            pending++;
            if (++waited > longest)
                longest = waited;
            if (waited >= watch) {
                uint64_t ran = run_ns(spin_tid) - armed_run;
                if (ran > most_ran)
                    most_ran = ran;
                lost += ran > 1000000;
                ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                armed = 0;
                waited = 0;
            }
            continue;
        }
        if (ioctl(fd, PERF_EVENT_IOC_REFRESH, 1) == 0) {
            armed = 1;
            armed_run = run_ns(spin_tid);
        }
    }
    printf("ticks %d samples %d waiting %d lost %d longest_wait_ticks %d most_cpu_while_waiting_ms "
           "%.1f\n", ticks, samples, pending, lost, longest, (double)most_ran / 1e6);
    return 0;
}
