/* endpoint.c: Sentry DSNs and exporters' URLs (endpoint.h). */
#include "endpoint.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define URL_MAX 2048

static int bad(char *why, size_t whylen, const char *text)
{
    snprintf(why, whylen, "%s", text);
    return -EINVAL;
}

/* After "http://" or "https://", or NULL. */
static const char *after_scheme(const char *url)
{
    if (!strncmp(url, "http://", 7))
        return url + 7;
    if (!strncmp(url, "https://", 8))
        return url + 8;
    return NULL;
}

/* Printable ASCII without spaces: what a URL may hold as it is. */
static bool clean(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

/* host[:port] up to the first '/' (or the end) is a plausible authority. */
static bool good_host(const char *h, size_t n)
{
    if (!n || h[0] == ':')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)h[i]) && !strchr(".-:[]_", h[i]))
            return false;
    return true;
}

int url_check(const char *url, char *why, size_t whylen)
{
    const char *rest = after_scheme(url);
    if (!rest)
        return bad(why, whylen, "must begin with http:// or https://");
    if (strlen(url) > URL_MAX)
        return bad(why, whylen, "is longer than 2048 bytes");
    if (!clean(url))
        return bad(why, whylen, "holds white space or control characters");
    if (strchr(url, '#'))
        return bad(why, whylen, "has a fragment ('#')");
    size_t hl = strcspn(rest, "/?");
    if (memchr(rest, '@', hl))
        return bad(why, whylen, "holds a user name or password");
    if (!good_host(rest, hl))
        return bad(why, whylen, "has no valid host");
    return 0;
}

bool url_has_path(const char *url)
{
    const char *rest = after_scheme(url);
    const char *slash = rest ? strchr(rest, '/') : NULL;
    return slash && slash[1] && slash[1] != '?';
}

char *url_join(const char *url, const char *path)
{
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    while (*path == '/')
        path++;
    return xasprintf("%.*s/%s", (int)n, url, path);
}

int dsn_parse(const char *dsn, struct sentry_dsn *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    const char *rest = after_scheme(dsn);
    if (!rest)
        return bad(why, whylen, "a DSN must begin with http:// or https://");
    if (strlen(dsn) > URL_MAX || !clean(dsn) || strchr(dsn, '#') || strchr(dsn, '?'))
        return bad(why, whylen, "a DSN is a URL without white space, control characters, "
                   "query or fragment, of at most 2048 bytes");
    const char *at = strchr(rest, '@');
    const char *slash = strchr(rest, '/');
    if (!at || (slash && slash < at))
        return bad(why, whylen, "a DSN names its public key before '@' "
                   "(https://KEY@HOST/PROJECT)");
    size_t keylen = strcspn(rest, ":@");
    if (!keylen)
        return bad(why, whylen, "the DSN's public key is empty");
    for (size_t i = 0; i < keylen; i++)
        if (!isalnum((unsigned char)rest[i]))
            return bad(why, whylen, "the DSN's public key must be letters and digits");
    const char *host = at + 1;
    if (strchr(host, '@'))
        return bad(why, whylen, "a DSN has one '@', after its public key");
    slash = strchr(host, '/');
    if (!slash || !good_host(host, (size_t)(slash - host)))
        return bad(why, whylen, "the DSN has no valid host followed by /PROJECT");
    const char *last = strrchr(slash, '/');
    const char *project = last + 1;
    size_t plen = strlen(project);
    while (plen && project[plen - 1] == '/') /* a trailing '/' is tolerated */
        plen--;
    if (!plen && last > slash) { /* ".../123/": the project is before the trailing '/' */
        const char *p = last - 1;
        while (p > slash && *p != '/')
            p--;
        project = p + 1;
        plen = (size_t)(last - project);
        last = p;
    }
    if (!plen)
        return bad(why, whylen, "the DSN names no project (https://KEY@HOST/PROJECT)");
    for (size_t i = 0; i < plen; i++)
        if (!isdigit((unsigned char)project[i]))
            return bad(why, whylen, "the DSN's project must be a number");
    size_t schemelen = (size_t)(rest - dsn);
    out->base = xasprintf("%.*s%.*s", (int)schemelen, dsn, (int)(last - host), host);
    out->project = xasprintf("%.*s", (int)plen, project);
    out->key = xasprintf("%.*s", (int)keylen, rest);
    return 0;
}

int dsn_parse_check(const char *dsn, char *why, size_t whylen)
{
    struct sentry_dsn d;
    int r = dsn_parse(dsn, &d, why, whylen);
    if (!r)
        dsn_free(&d);
    return r;
}

void dsn_free(struct sentry_dsn *d)
{
    free(d->base);
    free(d->project);
    if (d->key)
        memset(d->key, 0, strlen(d->key));
    free(d->key);
    memset(d, 0, sizeof(*d));
}

char *dsn_envelope_url(const struct sentry_dsn *d)
{
    return xasprintf("%s/api/%s/envelope/", d->base, d->project);
}

char *dsn_auth_header(const struct sentry_dsn *d)
{
    return xasprintf("X-Sentry-Auth: Sentry sentry_version=7, sentry_key=%s, "
                     "sentry_client=profd/%s", d->key, PROFD_VERSION);
}

char *dsn_redacted(const char *dsn)
{
    struct sentry_dsn d;
    char why[8];
    if (!dsn || dsn_parse(dsn, &d, why, sizeof(why)) < 0)
        return xstrdup("(invalid DSN)");
    const char *rest = after_scheme(dsn);
    char *s = xasprintf("%.*s***@%s/%s", (int)(rest - dsn), dsn, d.base + (rest - dsn),
                        d.project);
    dsn_free(&d);
    return s;
}
