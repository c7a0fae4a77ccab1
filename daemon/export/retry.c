/* retry.c: the retry policy of the exporters (retry.h). */
#include "retry.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t retry_after_seconds(const char *v, int64_t now_s)
{
    if (!v)
        return -1;
    while (*v == ' ')
        v++;
    if (isdigit((unsigned char)*v)) {
        char *end;
        long long s = strtoll(v, &end, 10);
        while (*end == ' ')
            end++;
        return *end ? -1 : s;
    }
    struct tm tm = {0};
    const char *end = strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end)
        return -1;
    int64_t at = (int64_t)timegm(&tm);
    return at > now_s ? at - now_s : 0;
}

/* Does the ';'-separated category list cats (n bytes) name category, or nothing at all? */
static bool names_category(const char *cats, size_t n, const char *category)
{
    if (!n)
        return true;
    size_t cl = category ? strlen(category) : 0;
    for (size_t i = 0; i < n;) {
        size_t l = 0;
        while (i + l < n && cats[i + l] != ';')
            l++;
        if (cl && l == cl && !memcmp(cats + i, category, cl))
            return true;
        i += l + 1;
    }
    return false;
}

int64_t rate_limit_seconds(const char *v, const char *category)
{
    int64_t best = 0;
    while (v && *v) {
        size_t n = strcspn(v, ",");
        /* SECONDS:CATEGORIES:SCOPE[:REASON[:NAMESPACES]] */
        const char *colon = memchr(v, ':', n);
        char *end;
        long long s = strtoll(v, &end, 10);
        if (colon && end == colon && s > 0) {
            const char *cats = colon + 1;
            const char *c2 = memchr(cats, ':', n - (size_t)(cats - v));
            size_t cl = c2 ? (size_t)(c2 - cats) : n - (size_t)(cats - v);
            while (cl && cats[0] == ' ') {
                cats++;
                cl--;
            }
            if (names_category(cats, cl, category) && s > best)
                best = s;
        }
        v += n;
        while (*v == ',' || *v == ' ')
            v++;
    }
    return best;
}

static uint64_t backoff_ns(unsigned attempts, uint64_t rnd)
{
    uint64_t d = RETRY_BASE_NS;
    for (unsigned i = 1; i < attempts && d < RETRY_MAX_NS; i++)
        d *= 2;
    if (d > RETRY_MAX_NS)
        d = RETRY_MAX_NS;
    return d / 2 + rnd % (d / 2 + 1);
}

enum retry_verdict retry_judge(const struct retry_answer *a, unsigned attempts,
                               int64_t now_s, uint64_t rnd, uint64_t *hold_ns)
{
    int64_t asked = rate_limit_seconds(a->rate_limits, a->category);
    int64_t after = retry_after_seconds(a->retry_after, now_s);
    if (after > asked && (a->status == 429 || a->status == 503 || a->status == 0))
        asked = after;
    uint64_t hold = asked > 0 ? (uint64_t)asked * UINT64_C(1000000000) : 0;
    if (hold > RETRY_HOLD_MAX_NS)
        hold = RETRY_HOLD_MAX_NS;
    enum retry_verdict v;
    if (a->status >= 200 && a->status < 300) {
        v = RETRY_SENT;
    } else if (a->status == 0 || a->status >= 500 || a->status == 408 || a->status == 429) {
        uint64_t b = backoff_ns(attempts, rnd);
        if (b > hold)
            hold = b;
        v = RETRY_LATER;
    } else {
        v = RETRY_DROP; /* another 4xx (or a 1xx/3xx we do not follow): final */
    }
    *hold_ns = hold;
    return v;
}
