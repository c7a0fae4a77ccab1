/* spans.c: THREADS threads ("span-N"), each switching its OpenTelemetry span every PERIOD_US
 * microseconds and running, inside span number s, the function span_work_K with K = s % 5
 * (spanctx.c publishes the context). A span's id says which: its bytes are "span", the
 * thread's index (1 byte), then s (3 bytes, big endian); its trace id is 0x7e, 14 zero bytes
 * and the thread's index; its one attribute (key 0) is "work-K", key 0 named "work" by the
 * process context (OTEP 4719) it publishes.
 * A profiler that reads the context at a sample's instant sees, for a sample in
 * span_work_K, a span whose s % 5 == K. Between spans (the switch) no function of those runs.
 * Built -O2 without frame pointers.
 *
 * Usage: spans THREADS PERIOD_US SECONDS. Prints "ready PID" when the threads run, "done N"
 * (spans run) at the end. SECONDS 0: until stdin closes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spanctx.h"

#define NOINLINE __attribute__((noinline, noclone, noipa))

static int period_us;
static volatile int stop;
static volatile uint64_t sink;
static uint64_t spans_run;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin until the span's time is up (checked every few hundred ns of work). */
#define SPIN(until)                                                                           \
    do {                                                                                      \
        uint64_t x = sink;                                                                    \
        while (mono_ns() < (until))                                                           \
            for (int i = 0; i < 200; i++)                                                     \
                x = x * 6364136223846793005ull + 1442695040888963407ull;                      \
        sink = x;                                                                             \
    } while (0)

NOINLINE void span_work_0(uint64_t until) { SPIN(until); }
NOINLINE void span_work_1(uint64_t until) { SPIN(until); }
NOINLINE void span_work_2(uint64_t until) { SPIN(until); }
NOINLINE void span_work_3(uint64_t until) { SPIN(until); }
NOINLINE void span_work_4(uint64_t until) { SPIN(until); }

static void (*const works[5])(uint64_t) = {span_work_0, span_work_1, span_work_2, span_work_3,
                                           span_work_4};

static void fill(struct spanctx_record *r, int index, uint32_t s)
{
    memset(r, 0, sizeof(*r));
    r->trace_id[0] = 0x7e;
    r->trace_id[15] = (uint8_t)index;
    memcpy(r->span_id, "span", 4);
    r->span_id[4] = (uint8_t)index;
    r->span_id[5] = (uint8_t)(s >> 16);
    r->span_id[6] = (uint8_t)(s >> 8);
    r->span_id[7] = (uint8_t)s;
    r->trace_flags = 1;
    int n = snprintf((char *)r->attrs_data + 2, sizeof(r->attrs_data) - 2, "work-%u", s % 5);
    r->attrs_data[0] = 0;
    r->attrs_data[1] = (uint8_t)n;
    r->attrs_data_size = (uint16_t)(n + 2);
    r->valid = 1;
}

static void *run(void *arg)
{
    int index = (int)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof(name), "span-%d", index);
    pthread_setname_np(pthread_self(), name);
    /* Two records, the next one filled while the other is published. */
    struct spanctx_record rec[2];
    uint64_t next = mono_ns();
    uint32_t s = 0;
    while (!stop) {
        struct spanctx_record *r = &rec[s & 1];
        fill(r, index, s);
        spanctx_set(r);
        next += (uint64_t)period_us * 1000;
        works[s % 5](next);
        spanctx_set(NULL);
        s++;
    }
    pthread_mutex_lock(&mu);
    spans_run += s;
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: spans THREADS PERIOD_US SECONDS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    period_us = atoi(argv[2]);
    double seconds = atof(argv[3]);
    if (n < 1 || n > 64 || period_us < 1)
        return 2;
    pthread_t th[64];
    spanctx_publish_keys();
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, run, (void *)(intptr_t)(i + 1));
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (seconds > 0) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        while (nanosleep(&ts, &ts) != 0)
            ;
    } else {
        char buf[64];
        while (read(0, buf, sizeof(buf)) > 0)
            ;
    }
    stop = 1;
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    printf("done %llu\n", (unsigned long long)spans_run);
    return 0;
}
