/* retry.h: what an exporter does after an answer, as a mail queue would: a pure function of
 * the answer and the attempts so far (tests/unit/test_retry.c).
 *
 * - 2xx: sent. Other 4xx but 408 and 429: final for that body (logged once, counted,
 *   dropped); 413 (too large) too.
 * - 5xx, 408, 429 and no answer (a connection refused or reset, a timeout): again later,
 *   after an exponential backoff with jitter (1 s, 2 s, 4 s ... at most 5 minutes, each
 *   drawn from [d/2, d]), or after what Retry-After (seconds or an HTTP date) or Sentry's
 *   X-Sentry-Rate-Limits ask for our category, if longer (at most an hour).
 * - A rate limit that comes with a 2xx holds the exporter's next sends as long. */
#pragma once

#include <stdint.h>

enum retry_verdict {
    RETRY_SENT,
    RETRY_LATER,
    RETRY_DROP,
};

struct retry_answer {
    long status;             /* the HTTP status; 0: no answer */
    const char *retry_after; /* the Retry-After header's value, or NULL */
    const char *rate_limits; /* X-Sentry-Rate-Limits', or NULL */
    const char *category;    /* the rate limits' category of what was sent, or NULL */
};

#define RETRY_BASE_NS (1 * UINT64_C(1000000000))
#define RETRY_MAX_NS (300 * UINT64_C(1000000000))
#define RETRY_HOLD_MAX_NS (3600 * UINT64_C(1000000000))

/* attempts: sends of this body so far, this one included (1 after the first). now_s: the
 * real time (for an HTTP date). rnd: a random number (the jitter). *hold_ns: how long the
 * exporter waits before its next send (0: not at all). */
enum retry_verdict retry_judge(const struct retry_answer *a, unsigned attempts,
                               int64_t now_s, uint64_t rnd, uint64_t *hold_ns);
/* Seconds a Retry-After value asks for (delta seconds or an HTTP date), or -1. */
int64_t retry_after_seconds(const char *v, int64_t now_s);
/* Seconds X-Sentry-Rate-Limits asks of category (the longest entry that names it or names
 * no category), or 0. */
int64_t rate_limit_seconds(const char *v, const char *category);
