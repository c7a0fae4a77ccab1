/* config.c: defaults, the configuration file and flags (see config.h). */
#include "config.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void config_defaults(struct profd_config *c)
{
    memset(c, 0, sizeof(*c));
    c->socket_mode = 0666;
    c->mode = SCHED_ALARM;
    c->hz = 101;
    c->buffer_ns = 60 * NS_PER_SEC;
    c->max_hz = 10000;
    c->max_cpu = 25;
    c->cputime_source = CPU_SRC_AUTO;
    c->sampler = SAMPLER_AUTO;
    c->txn_linger_ns = 5 * NS_PER_SEC;
    c->max_targets = 256;
    c->max_targets_per_user = 32;
    c->max_stack_kib = 512;
    c->max_memory = 1ull << 30;
    c->symbolizer_memory = 4ull << 30;
    c->symbolizer_timeout_ns = 30 * NS_PER_SEC;
}

void config_free(struct profd_config *c)
{
    free(c->socket);
    free(c->socket_group);
    c->socket = c->socket_group = NULL;
}

void config_copy(struct profd_config *dst, const struct profd_config *src)
{
    *dst = *src;
    dst->socket = src->socket ? xstrdup(src->socket) : NULL;
    dst->socket_group = src->socket_group ? xstrdup(src->socket_group) : NULL;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int set_uint(unsigned *out, const char *key, const char *v, unsigned lo, unsigned hi,
                    char *err, size_t errlen)
{
    uint64_t n;
    if (parse_u64(v, &n) < 0 || n < lo || n > hi)
        return bad(err, errlen, "%s must be an integer from %u to %u, not \"%s\"", key, lo, hi,
                   v);
    *out = (unsigned)n;
    return 0;
}

static int set_duration(uint64_t *out, const char *key, const char *v, uint64_t lo,
                        uint64_t hi, const char *range, char *err, size_t errlen)
{
    uint64_t ns;
    if (parse_duration_ns(v, &ns) < 0 || ns < lo || ns > hi)
        return bad(err, errlen, "%s must be a duration %s (\"60\", \"500ms\", \"5m\"), not "
                   "\"%s\"", key, range, v);
    *out = ns;
    return 0;
}

/* "0", "4096", "512K", "64M", "1G" (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || (shift && n > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)n << shift;
    return 0;
}

/* "profd adm 1001": group names or numbers, separated by spaces or commas. */
static int set_groups(struct profd_config *c, const char *v, char *err, size_t errlen)
{
    size_t n = 0;
    gid_t g[CONFIG_MAX_GROUPS];
    char *copy = xstrdup(v), *save = NULL;
    int r = 0;
    for (char *tok = strtok_r(copy, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
        uint64_t num;
        gid_t gid;
        if (parse_u64(tok, &num) == 0 && num < (gid_t)-1) {
            gid = (gid_t)num;
        } else {
            struct group *gr = getgrnam(tok);
            if (!gr) {
                r = bad(err, errlen, "allow_groups: no group named \"%s\"", tok);
                break;
            }
            gid = gr->gr_gid;
        }
        if (n == CONFIG_MAX_GROUPS) {
            r = bad(err, errlen, "allow_groups: at most %d groups", CONFIG_MAX_GROUPS);
            break;
        }
        g[n++] = gid;
    }
    free(copy);
    if (r == 0) {
        memcpy(c->allow_groups, g, n * sizeof(*g));
        c->nallow_groups = n;
    }
    return r;
}

/* Keys are compared with '-' and '_' alike. */
static bool key_is(const char *key, const char *name)
{
    for (; *key && *name; key++, name++) {
        char a = *key == '-' ? '_' : *key, b = *name;
        if (a != b)
            return false;
    }
    return !*key && !*name;
}

int config_set(struct profd_config *c, const char *key, const char *v, char *err,
               size_t errlen)
{
    if (key_is(key, "socket")) {
        if (v[0] != '/' || strlen(v) > 107)
            return bad(err, errlen, "socket must be an absolute path of at most 107 bytes, "
                       "not \"%s\"", v);
        free(c->socket);
        c->socket = xstrdup(v);
        return 0;
    }
    if (key_is(key, "socket_group")) {
        if (!*v) {
            free(c->socket_group);
            c->socket_group = NULL;
            return 0;
        }
        if (!getgrnam(v)) {
            uint64_t num;
            if (parse_u64(v, &num) < 0 || num >= (gid_t)-1 || !getgrgid((gid_t)num))
                return bad(err, errlen, "socket_group: no group named \"%s\"", v);
        }
        free(c->socket_group);
        c->socket_group = xstrdup(v);
        return 0;
    }
    if (key_is(key, "socket_mode")) {
        char *end;
        errno = 0;
        unsigned long m = strtoul(v, &end, 8);
        if (errno || end == v || *end || m > 0777 || !isdigit((unsigned char)v[0]))
            return bad(err, errlen, "socket_mode must be octal permissions such as 0660, not "
                       "\"%s\"", v);
        c->socket_mode = (unsigned)m;
        return 0;
    }
    if (key_is(key, "mode")) {
        if (sched_mode_parse(v, &c->mode) < 0)
            return bad(err, errlen, "mode must be alarm, sleep, event or cputime, not \"%s\"",
                       v);
        return 0;
    }
    if (key_is(key, "hz"))
        return set_uint(&c->hz, "hz", v, 1, 100000, err, errlen);
    if (key_is(key, "buffer"))
        return set_duration(&c->buffer_ns, "buffer", v, NS_PER_SEC, 3600 * NS_PER_SEC,
                            "from 1 s to 1 h", err, errlen);
    if (key_is(key, "max_hz"))
        return set_uint(&c->max_hz, "max_hz", v, 1, 100000, err, errlen);
    if (key_is(key, "max_cpu")) {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !(d >= 0 && d <= 10000))
            return bad(err, errlen, "max_cpu must be a percentage from 0 to 10000, not \"%s\"",
                       v);
        c->max_cpu = d;
        return 0;
    }
    if (key_is(key, "cputime_source")) {
        if (cpu_source_parse(v, &c->cputime_source) < 0)
            return bad(err, errlen, "cputime_source must be auto, perf, timer or poll, not "
                       "\"%s\"", v);
        return 0;
    }
    if (key_is(key, "sampler")) {
        if (sampler_kind_parse(v, &c->sampler) < 0)
            return bad(err, errlen, "sampler must be auto, perf or ptrace, not \"%s\"", v);
        return 0;
    }
    if (key_is(key, "txn_linger"))
        return set_duration(&c->txn_linger_ns, "txn_linger", v, 0, 3600 * NS_PER_SEC,
                            "up to 1 h", err, errlen);
    if (key_is(key, "max_targets"))
        return set_uint(&c->max_targets, "max_targets", v, 1, 65536, err, errlen);
    if (key_is(key, "max_targets_per_user"))
        return set_uint(&c->max_targets_per_user, "max_targets_per_user", v, 1, 65536, err,
                        errlen);
    if (key_is(key, "max_stack"))
        return set_uint(&c->max_stack_kib, "max_stack", v, 8, 65536, err, errlen);
    if (key_is(key, "max_memory")) {
        uint64_t n;
        if (parse_size(v, &n) < 0 || (n && n < (1u << 20)))
            return bad(err, errlen, "max_memory must be a size of at least 1M (\"512M\", "
                       "\"2G\"), or 0 for no limit, not \"%s\"", v);
        c->max_memory = n;
        return 0;
    }
    if (key_is(key, "symbolizer_memory")) {
        uint64_t n;
        if (parse_size(v, &n) < 0 || (n && n < (64u << 20)))
            return bad(err, errlen, "symbolizer_memory must be a size of at least 64M "
                       "(\"1G\", \"8G\"), or 0 for no limit, not \"%s\"", v);
        c->symbolizer_memory = n;
        return 0;
    }
    if (key_is(key, "symbolizer_timeout"))
        return set_duration(&c->symbolizer_timeout_ns, "symbolizer_timeout", v,
                            100 * NS_PER_MS, 600 * NS_PER_SEC, "from 100ms to 10m", err, errlen);
    if (key_is(key, "allow_groups"))
        return set_groups(c, v, err, errlen);
    if (key_is(key, "verbose")) {
        if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
            c->verbose = true;
        else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
            c->verbose = false;
        else
            return bad(err, errlen, "verbose must be yes or no, not \"%s\"", v);
        return 0;
    }
    snprintf(err, errlen, "unknown key \"%s\"", key);
    return -ENOENT;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int config_load(struct profd_config *c, const char *path, bool missing_ok, char *err,
                size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        if (e == ENOENT && missing_ok)
            return 0;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    char line[4096];
    unsigned lineno = 0;
    int r = 0;
    while (r == 0 && fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            snprintf(err, errlen, "%s:%u: line longer than %zu bytes", path, lineno,
                     sizeof(line) - 2);
            r = -EINVAL;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%u: expected \"key = value\", not \"%.80s\"", path,
                     lineno, s);
            r = -EINVAL;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        size_t vl = strlen(value);
        if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
            value[vl - 1] = '\0';
            value++;
        }
        char why[300];
        r = config_set(c, key, value, why, sizeof(why));
        if (r < 0)
            snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
    }
    if (r == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        r = -EIO;
    }
    fclose(f);
    return r;
}

int config_check(const struct profd_config *c, char *err, size_t errlen)
{
    if (c->hz > c->max_hz)
        return bad(err, errlen, "hz %u is above max_hz %u", c->hz, c->max_hz);
    return 0;
}

bool config_group_allowed(const struct profd_config *c, gid_t gid)
{
    for (size_t i = 0; i < c->nallow_groups; i++)
        if (c->allow_groups[i] == gid)
            return true;
    return false;
}
