/* test_export_rules.c: the exporters' pure rules, without a daemon or a network: Sentry
 * DSNs taken apart and shown without their key (daemon/export/endpoint.c), the URLs
 * accepted, a process's service from its cgroup (service.c), and what each answer means
 * for a body and the next send (retry.c). */
#include "check.h"
#include "endpoint.h"
#include "export.h"
#include "export_internal.h"
#include "retry.h"

#include <stdlib.h>
#include <string.h>

#define SEC UINT64_C(1000000000)

static void test_dsn(void)
{
    struct sentry_dsn d;
    char why[200];
    CHECK_INT(dsn_parse("https://abc123@o1.ingest.sentry.io/4506", &d, why, sizeof(why)), 0);
    CHECK_STR(d.base, "https://o1.ingest.sentry.io");
    CHECK_STR(d.project, "4506");
    CHECK_STR(d.key, "abc123");
    char *u = dsn_envelope_url(&d);
    CHECK_STR(u, "https://o1.ingest.sentry.io/api/4506/envelope/");
    free(u);
    char *a = dsn_auth_header(&d);
    CHECK(strstr(a, "sentry_key=abc123") && strstr(a, "sentry_version=7"));
    free(a);
    dsn_free(&d);
    /* A path before the project, a port, a secret, a trailing '/'. */
    CHECK_INT(dsn_parse("http://k:secret@host:9000/sentry/7/", &d, why, sizeof(why)), 0);
    CHECK_STR(d.base, "http://host:9000/sentry");
    CHECK_STR(d.project, "7");
    CHECK_STR(d.key, "k");
    dsn_free(&d);
    static const char *bad[] = {
        "ftp://k@h/1", "https://h/1", "https://@h/1", "https://k@h/", "https://k@h/x",
        "https://k@/1", "https://k@h/1?x=1", "https://k@h/1#f", "https://k @h/1",
        "https://k@h/p@q/1",
        "https://k-!@h/1", "https://k@h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        CHECK(dsn_parse(bad[i], &d, why, sizeof(why)) < 0);
        /* The reason never quotes the DSN (its key is a secret). */
        CHECK(why[0] && !strstr(why, "k@"));
    }
    char *r = dsn_redacted("https://abc123@o1.ingest.sentry.io/4506");
    CHECK_STR(r, "https://***@o1.ingest.sentry.io/4506");
    CHECK(!strstr(r, "abc123"));
    free(r);
    r = dsn_redacted("https://abc123:s3cr3t@h:1/p/2");
    CHECK_STR(r, "https://***@h:1/p/2");
    free(r);
    r = dsn_redacted("nonsense abc123");
    CHECK_STR(r, "(invalid DSN)");
    free(r);
}

static void test_urls(void)
{
    char why[200];
    CHECK_INT(url_check("http://127.0.0.1:4040", why, sizeof(why)), 0);
    CHECK_INT(url_check("https://collector.example:4318/", why, sizeof(why)), 0);
    CHECK_INT(url_check("https://[::1]:4318/otlp", why, sizeof(why)), 0);
    static const char *bad[] = {"file:///etc/passwd", "http://", "http://u:p@h/",
                                "http://h/a b", "http://h/#x", "gopher://h", "http:///x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(url_check(bad[i], why, sizeof(why)) < 0);
    CHECK(!url_has_path("http://h:1"));
    CHECK(!url_has_path("http://h:1/"));
    CHECK(url_has_path("http://h:1/custom/path"));
    char *j = url_join("http://h:1/", "/ingest");
    CHECK_STR(j, "http://h:1/ingest");
    free(j);
}

static void test_service(void)
{
    char *s = service_from_cgroup("0::/system.slice/nginx.service\n");
    CHECK_STR(s, "nginx");
    free(s);
    s = service_from_cgroup("0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
                            "web@8080.service\n");
    CHECK_STR(s, "web@8080");
    free(s);
    /* cgroup v1 lines first, the unified one last. */
    s = service_from_cgroup("12:pids:/x.service\n0::/system.slice/db.service/sub\n");
    CHECK_STR(s, "db");
    free(s);
    CHECK(!service_from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n"));
    CHECK(!service_from_cgroup("3:cpu:/system.slice/x.service\n"));
    CHECK(!service_from_cgroup(""));
    CHECK(!service_from_cgroup("0::/.service\n"));
    /* A delegated subtree's names are the user's: odd bytes become '_'. */
    s = service_from_cgroup("0::/a/we{i}rd na=me.service\n");
    CHECK_STR(s, "we_i_rd_na_me");
    free(s);
}

static void test_labels(void)
{
    CHECK(export_label_ok("env=prod"));
    CHECK(export_label_ok("_k9=with spaces, ok"));
    CHECK(export_label_ok("k="));
    CHECK(!export_label_ok("=v"));
    CHECK(!export_label_ok("9k=v"));
    CHECK(!export_label_ok("k-x=v"));
    CHECK(!export_label_ok("novalue"));
    CHECK(!export_label_ok("k=a\nb"));
}

static void test_retry(void)
{
    uint64_t hold;
    struct retry_answer a = {.status = 200};
    CHECK_INT(retry_judge(&a, 1, 0, 0, &hold), RETRY_SENT);
    CHECK_U64(hold, 0);
    /* Exponential backoff with jitter in [d/2, d]: 1, 2, 4 ... 300 s. */
    a.status = 503;
    for (unsigned n = 1; n <= 12; n++) {
        uint64_t d = SEC << (n - 1);
        if (d > RETRY_MAX_NS)
            d = RETRY_MAX_NS;
        CHECK_INT(retry_judge(&a, n, 0, 0, &hold), RETRY_LATER);
        CHECK_U64(hold, d / 2);
        retry_judge(&a, n, 0, UINT64_MAX - 1, &hold);
        CHECK(hold >= d / 2 && hold <= d);
    }
    static const long later[] = {500, 502, 504, 408, 429, 0};
    for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++) {
        a.status = later[i];
        CHECK_INT(retry_judge(&a, 1, 0, 0, &hold), RETRY_LATER);
    }
    static const long final[] = {400, 401, 403, 404, 413, 302};
    for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++) {
        a.status = final[i];
        CHECK_INT(retry_judge(&a, 1, 0, 0, &hold), RETRY_DROP);
    }
    /* Retry-After: seconds, or a date. */
    a = (struct retry_answer){.status = 429, .retry_after = "30"};
    retry_judge(&a, 1, 0, 0, &hold);
    CHECK_U64(hold, 30 * SEC);
    a.retry_after = "Wed, 21 Oct 2015 07:28:00 GMT";
    retry_judge(&a, 1, 1445412480 - 90, 0, &hold);
    CHECK_U64(hold, 90 * SEC);
    CHECK_INT(retry_after_seconds("soon", 0), -1);
    /* Sentry's rate limits: ours, or every category; others' not. */
    CHECK_INT(rate_limit_seconds("60:profile_chunk:key", "profile_chunk"), 60);
    CHECK_INT(rate_limit_seconds("60:transaction:key, 5::organization", "profile_chunk"), 5);
    CHECK_INT(rate_limit_seconds("60:transaction;error:key", "profile_chunk"), 0);
    CHECK_INT(rate_limit_seconds("10:profile;profile_chunk:org:quota, 40:profile_chunk:key",
                                 "profile_chunk"), 40);
    a = (struct retry_answer){.status = 429, .rate_limits = "120:profile_chunk:key",
                              .category = "profile_chunk"};
    CHECK_INT(retry_judge(&a, 1, 0, 0, &hold), RETRY_LATER);
    CHECK_U64(hold, 120 * SEC);
    /* A limit that comes with a 200 holds the next sends. */
    a.status = 200;
    CHECK_INT(retry_judge(&a, 1, 0, 0, &hold), RETRY_SENT);
    CHECK_U64(hold, 120 * SEC);
    /* Never longer than an hour. */
    a = (struct retry_answer){.status = 503, .retry_after = "999999"};
    retry_judge(&a, 1, 0, 0, &hold);
    CHECK_U64(hold, RETRY_HOLD_MAX_NS);
}

int main(void)
{
    RUN(test_dsn);
    RUN(test_urls);
    RUN(test_service);
    RUN(test_labels);
    RUN(test_retry);
    return check_status("test_export_rules");
}
