/* endpoint.h: where the exporters send: a Sentry DSN taken apart, and the HTTP(S) URLs of
 * Pyroscope and an OpenTelemetry collector checked. Pure functions (tests/unit/
 * test_endpoint.c): the configuration checks its values with them, the exporters build their
 * requests' addresses from them.
 *
 * A DSN holds a secret, its public key: only dsn_redacted's form of it is ever logged,
 * shown in status or --show-config. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* scheme://KEY[:SECRET]@HOST[:PORT]/[PATH/]PROJECT */
struct sentry_dsn {
    char *base;    /* scheme://HOST[:PORT][/PATH] (no key, no trailing '/') */
    char *project; /* the project id (digits) */
    char *key;     /* the public key: the secret part */
};

/* Take dsn apart. Returns 0, or -EINVAL with a reason in why that never quotes the DSN. */
int dsn_parse(const char *dsn, struct sentry_dsn *out, char *why, size_t whylen);
void dsn_free(struct sentry_dsn *d);
/* dsn_parse, only to check. */
int dsn_parse_check(const char *dsn, char *why, size_t whylen);
/* BASE/api/PROJECT/envelope/ (malloc'd). */
char *dsn_envelope_url(const struct sentry_dsn *d);
/* "Sentry sentry_version=7, sentry_key=KEY, sentry_client=profd/VERSION" (malloc'd). */
char *dsn_auth_header(const struct sentry_dsn *d);
/* The DSN as it may be shown: its key (and secret) replaced by "***" (malloc'd); a string
 * that is no DSN gives "(invalid DSN)". */
char *dsn_redacted(const char *dsn);

/* Is url an http:// or https:// URL with a host, of at most 2048 bytes, without white space,
 * control characters, a user name or password, or a fragment? 0, or -EINVAL with why. */
int url_check(const char *url, char *why, size_t whylen);
/* url with path appended, one '/' between them (malloc'd). */
char *url_join(const char *url, const char *path);
/* Does url name a path beyond "/"? (Then the OTLP exporter posts to it as it is.) */
bool url_has_path(const char *url);
