/* fuzz_export.c: libFuzzer target for what the exporters read that others write
 * (daemon/export/): a target's /proc/PID/cgroup, whose names a user with a delegated cgroup
 * subtree chooses (service_from_cgroup); a backend's Retry-After and X-Sentry-Rate-Limits
 * headers (retry_after_seconds, rate_limit_seconds, retry_judge); and the DSN and URLs of the
 * configuration (dsn_parse, dsn_redacted, url_check).
 *
 * Input: byte 0 picks the parser, the rest is its text (a NUL ends it, as in a C string).
 * What they return must hold: a service is 1 to 128 bytes of [A-Za-z0-9_.@:-]; a hold is
 * within an hour; a DSN taken apart has a numeric project and an alphanumeric key, and its
 * redacted form is its scheme, "***@", its host, path and project: nothing of its user part.
 *
 *   build-fuzz/tests/fuzz/fuzz_export-libfuzzer -max_len=4096 /tmp/export-new \
 *       tests/fuzz/corpus/export
 *
 * The plain build replays tests/fuzz/corpus/export under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "export_internal.h"
#include "retry.h"

static void check_service(const char *text)
{
    char *s = service_from_cgroup(text);
    if (!s)
        return;
    size_t n = strlen(s);
    FUZZ_ASSERT(n >= 1 && n <= 128);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(isalnum((unsigned char)s[i]) || strchr("_.@:-", s[i]));
    free(s);
}

static void check_retry(const char *text)
{
    int64_t a = retry_after_seconds(text, 1700000000);
    FUZZ_ASSERT(a >= -1);
    FUZZ_ASSERT(rate_limit_seconds(text, "profile_chunk") >= 0);
    static const long status[] = {0, 200, 400, 429, 503};
    for (size_t i = 0; i < sizeof(status) / sizeof(status[0]); i++) {
        struct retry_answer r = {.status = status[i], .retry_after = text,
                                 .rate_limits = text, .category = "profile_chunk"};
        uint64_t hold = 0;
        enum retry_verdict v = retry_judge(&r, 3, 1700000000, 12345, &hold);
        FUZZ_ASSERT(hold <= RETRY_HOLD_MAX_NS);
        FUZZ_ASSERT(v == (status[i] == 200 ? RETRY_SENT : status[i] == 400 ? RETRY_DROP
                                                                           : RETRY_LATER));
    }
}

static void check_dsn(const char *text)
{
    char why[200];
    struct sentry_dsn d;
    char *red = dsn_redacted(text);
    if (dsn_parse(text, &d, why, sizeof(why)) == 0) {
        FUZZ_ASSERT(d.key[0] && d.project[0]);
        for (const char *p = d.project; *p; p++)
            FUZZ_ASSERT(isdigit((unsigned char)*p));
        for (const char *p = d.key; *p; p++)
            FUZZ_ASSERT(isalnum((unsigned char)*p));
        /* Shown as the scheme, "***@", host, port, path and project: nothing of the user
         * part, which is the only '@'. */
        const char *rest = strstr(d.base, "://") + 3;
        size_t sl = (size_t)(rest - d.base);
        FUZZ_ASSERT(!strncmp(red, d.base, sl) && !strncmp(red + sl, "***@", 4));
        FUZZ_ASSERT(!strncmp(red + sl + 4, rest, strlen(rest)));
        FUZZ_ASSERT(!strchr(rest, '@'));
        FUZZ_ASSERT(!strcmp(red + sl + 4 + strlen(rest), "/") ||
                    (red[sl + 4 + strlen(rest)] == '/' &&
                     !strcmp(red + sl + 5 + strlen(rest), d.project)));
        dsn_free(&d);
    } else {
        FUZZ_ASSERT(!strcmp(red, "(invalid DSN)"));
    }
    free(red);
    url_check(text, why, sizeof(why));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1)
        return 0;
    char *text = malloc(n);
    memcpy(text, data + 1, n - 1);
    text[n - 1] = '\0';
    switch (data[0] % 3) {
    case 0:
        check_service(text);
        break;
    case 1:
        check_retry(text);
        break;
    default:
        check_dsn(text);
        break;
    }
    free(text);
    return 0;
}
