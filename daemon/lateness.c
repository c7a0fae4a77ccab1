/* lateness.c: histograms of how late ticks ran (see lateness.h). */
#include "lateness.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "util.h"

unsigned lateness_bucket(uint64_t ns)
{
    if (ns < 1024)
        return 0;
    unsigned e = 63 - (unsigned)__builtin_clzll(ns); /* >= 10 */
    unsigned m = (unsigned)(ns >> (e - 3)) & (LATE_SUB - 1);
    unsigned i = 1 + (e - 10) * LATE_SUB + m;
    return i < LATE_BUCKETS ? i : LATE_BUCKETS - 1;
}

void lateness_bucket_bounds(unsigned i, uint64_t *lo, uint64_t *hi)
{
    if (i == 0) {
        *lo = 0;
        *hi = 1024;
        return;
    }
    unsigned e = (i - 1) / LATE_SUB + 10, m = (i - 1) % LATE_SUB;
    *lo = (uint64_t)(LATE_SUB + m) << (e - 3);
    *hi = i == LATE_BUCKETS - 1 ? UINT64_MAX : (uint64_t)(LATE_SUB + m + 1) << (e - 3);
}

/* The upper bound of the bucket holding the q-th quantile of n counts, at most max. */
static uint64_t quantile(const void *counts, int wide, uint64_t n, double q, uint64_t max)
{
    if (!n)
        return 0;
    uint64_t want = (uint64_t)((double)n * q + 0.999999), seen = 0;
    if (want < 1)
        want = 1;
    for (unsigned i = 0; i < LATE_BUCKETS; i++) {
        seen += wide ? ((const uint64_t *)counts)[i] : ((const uint32_t *)counts)[i];
        if (seen >= want) {
            uint64_t lo, hi;
            lateness_bucket_bounds(i, &lo, &hi);
            return hi < max ? hi : max;
        }
    }
    return max;
}

void lateness_record(struct lateness *l, uint64_t due_ns, uint64_t now)
{
    uint64_t late = now > due_ns ? now - due_ns : 0;
    unsigned b = lateness_bucket(late);
    l->n++;
    l->sum_ns += late;
    if (late > l->max_ns)
        l->max_ns = late;
    l->hist[b]++;
    if (!l->win_start_ns)
        l->win_start_ns = now;
    if (now - l->win_start_ns >= NS_PER_SEC) {
        l->last_n = l->win_n;
        l->last_max_ns = l->win_max_ns;
        l->last_p50_ns = quantile(l->win, 0, l->win_n, 0.50, l->win_max_ns);
        l->last_p99_ns = quantile(l->win, 0, l->win_n, 0.99, l->win_max_ns);
        l->last_end_ns = now;
        memset(l->win, 0, sizeof(l->win));
        l->win_n = l->win_max_ns = 0;
        l->win_start_ns = now;
    }
    l->win[b]++;
    l->win_n++;
    if (late > l->win_max_ns)
        l->win_max_ns = late;
}

cJSON *lateness_describe(const struct lateness *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "ticks", (double)l->n);
    cJSON_AddNumberToObject(o, "max_us", (double)l->max_ns / 1e3);
    cJSON_AddNumberToObject(o, "mean_us", l->n ? (double)l->sum_ns / (double)l->n / 1e3 : 0);
    cJSON_AddNumberToObject(o, "p50_us", (double)quantile(l->hist, 1, l->n, 0.50, l->max_ns) / 1e3);
    cJSON_AddNumberToObject(o, "p99_us", (double)quantile(l->hist, 1, l->n, 0.99, l->max_ns) / 1e3);
    cJSON *last = cJSON_AddObjectToObject(o, "last_second");
    cJSON_AddNumberToObject(last, "ticks", (double)l->last_n);
    cJSON_AddNumberToObject(last, "max_us", (double)l->last_max_ns / 1e3);
    cJSON_AddNumberToObject(last, "p50_us", (double)l->last_p50_ns / 1e3);
    cJSON_AddNumberToObject(last, "p99_us", (double)l->last_p99_ns / 1e3);
    cJSON_AddNumberToObject(last, "end_ns", (double)l->last_end_ns);
    cJSON *h = cJSON_AddArrayToObject(o, "histogram_us");
    for (unsigned i = 0; i < LATE_BUCKETS; i++) {
        if (!l->hist[i])
            continue;
        uint64_t lo, hi;
        lateness_bucket_bounds(i, &lo, &hi);
        cJSON *b = cJSON_CreateArray();
        cJSON_AddItemToArray(b, cJSON_CreateNumber((double)lo / 1e3));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(hi == UINT64_MAX ? -1 : (double)hi / 1e3));
        cJSON_AddItemToArray(b, cJSON_CreateNumber((double)l->hist[i]));
        cJSON_AddItemToArray(h, b);
    }
    return o;
}
