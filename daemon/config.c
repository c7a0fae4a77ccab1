/* config.c: defaults, the configuration file and flags (see config.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "endpoint.h"
#include "log.h"
#include "util.h"

/* The settings that are strings, which the configuration owns. */
#define STRING_FIELDS(X) X(socket) X(socket_group) X(export_sentry) X(export_sentry_file) \
    X(export_pyroscope) X(export_otlp) X(export_spool)

void config_free(struct profd_config *c)
{
    if (c->export_sentry) /* the DSN's key: not left in freed memory */
        memset(c->export_sentry, 0, strlen(c->export_sentry));
#define FREE(f) free(c->f); c->f = NULL;
    STRING_FIELDS(FREE)
#undef FREE
}

void config_copy(struct profd_config *dst, const struct profd_config *src)
{
    *dst = *src;
#define COPY(f) dst->f = src->f ? xstrdup(src->f) : NULL;
    STRING_FIELDS(COPY)
#undef COPY
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


/* Every setting, once: its key (the flag is --key with '-' for '_'), short flag, type,
 * place, range, default (as the file would say it), the flag's argument and its help. The
 * defaults (config_defaults), the file and the flags (config_set), the usage text
 * (config_usage), the effective configuration (config_show) and profd's getopt table come
 * from here; profd.conf(5) documents the same keys and defaults (tests/integration/
 * test_service.py checks it). */
#define F(field) offsetof(struct profd_config, field)
static const struct config_key keys[] = {
    {"socket", 's', CFG_PATH, F(socket), 0, 107, NULL, "PATH", NULL,
     "listen on PATH (default: $PROFD_SOCKET, else /run/profd/profd.sock as root, else $XDG_RUNTIME_DIR/profd.sock); with socket activation ($LISTEN_FDS), the socket passed"},
    {"socket_group", 0, CFG_GROUP, F(socket_group), 0, 0, "", "GROUP", NULL,
     "group of the socket profd creates (default: profd's own)"},
    {"socket_mode", 0, CFG_OCTAL, F(socket_mode), 0, 0777, "0666", "MODE", NULL,
     "its permissions, octal (every request is checked against the caller's credentials anyway)"},
    {"mode", 0, CFG_MODE, F(mode), 0, 0, "alarm", "MODE", NULL,
     "default schedule for attach: alarm (fixed rate on the wall clock), sleep, event, or cputime (per interval of each thread's CPU time)"},
    {"hz", 0, CFG_UINT, F(hz), 1, 100000, "101", "N", NULL,
     "default sampling rate for attach"},
    {"buffer", 0, CFG_DURATION, F(buffer_ns), NS_PER_SEC, 3600 * NS_PER_SEC, "60", "SECONDS",
     "from 1 s to 1 h", "default sample buffer length"},
    {"max_hz", 0, CFG_UINT, F(max_hz), 1, 100000, "10000", "N", NULL,
     "highest rate a client may ask for"},
    {"max_cpu", 0, CFG_PERCENT, F(max_cpu), 0, 10000, "25", "PERCENT", NULL,
     "CPU budget for sampling, in percent of one CPU: rates are lowered fairly across targets to stay within it; 0: none"},
    {"cputime_source", 0, CFG_CPUSRC, F(cputime_source), 0, 0, "auto", "auto|perf|timer|poll",
     NULL, "how cputime follows CPU time (auto: the best available)"},
    {"sampler", 0, CFG_SAMPLER, F(sampler), 0, 0, "auto", "auto|perf|ptrace", NULL,
     "how running threads are sampled, default for attach: the kernel's copy of registers and stack at a perf sample (perf), a ptrace stop (ptrace), or perf where the kernel allows it (auto)"},
    {"txn_linger", 0, CFG_DURATION, F(txn_linger_ns), 0, 3600 * NS_PER_SEC, "5", "SECONDS",
     "up to 1 h",
     "how long a process attached for its transactions stays attached after its last one ended"},
    {"max_targets", 0, CFG_UINT, F(max_targets), 1, 65536, "256", "N", NULL,
     "most processes followed at once"},
    {"max_targets_per_user", 0, CFG_UINT, F(max_targets_per_user), 1, 65536, "32", "N", NULL,
     "most of them one user without CAP_SYS_PTRACE may attach"},
    {"max_stack", 0, CFG_UINT, F(max_stack_kib), 8, 65536, "512", "KIB", NULL,
     "most stack copied per sample"},
    {"max_memory", 0, CFG_SIZE, F(max_memory), 1ull << 20, 0, "1G", "SIZE", "1M",
     "memory for everything profd holds: samples grow below 3/4 of it; attaches, and slices that would exceed it, are refused (0: no limit)"},
    {"symbolizer_memory", 0, CFG_SIZE, F(symbolizer_memory), 64ull << 20, 0, "4G", "SIZE",
     "64M", "address space of each unprivileged symbolizer process (0: no limit)"},
    {"symbolizer_timeout", 0, CFG_DURATION, F(symbolizer_timeout_ns), 100 * NS_PER_MS,
     600 * NS_PER_SEC, "30", "SECONDS", "from 100ms to 10m",
     "a symbolizer that does not answer within it is killed and restarted; that slice's frames stay unsymbolized"},
    {"allow_groups", 0, CFG_GROUPS, F(allow_groups), 0, 0, "", "GROUPS", NULL,
     "members of these groups may profile any process"},
    {"export_sentry", 0, CFG_DSN, F(export_sentry), 0, 0, "", "DSN", NULL,
     "send every attached process's profile chunks to Sentry (continuous profiling) at this "
     "DSN (its key is visible in the process list: prefer export_sentry_file)"},
    {"export_sentry_file", 0, CFG_PATH, F(export_sentry_file), 0, 4095, NULL, "PATH", NULL,
     "read the Sentry DSN from this file, owned by root and readable by root alone"},
    {"export_pyroscope", 0, CFG_URL, F(export_pyroscope), 0, 0, "", "URL", NULL,
     "send every attached process's profiles (pprof) to the Pyroscope server at this URL"},
    {"export_otlp", 0, CFG_URL, F(export_otlp), 0, 0, "", "URL", NULL,
     "send every attached process's profiles (OTLP/HTTP) to the OpenTelemetry collector at "
     "this URL (its /v1development/profiles, unless the URL has a path)"},
    {"export_interval", 0, CFG_DURATION, F(export_interval_ns), NS_PER_SEC / 5, 60 * NS_PER_SEC,
     "10", "SECONDS", "from 0.2 to 60 seconds", "export each process's samples in windows of "
     "this length"},
    {"export_timeout", 0, CFG_DURATION, F(export_timeout_ns), NS_PER_SEC / 2,
     600 * NS_PER_SEC, "30", "SECONDS", "from 0.5 to 600 seconds",
     "longest wait for a backend's answer to one request"},
    {"export_spool", 0, CFG_PATH, F(export_spool), 0, 4095, NULL, "DIR", NULL,
     "keep unsent profiles in this directory until a backend takes them (default: "
     "$STATE_DIRECTORY/spool, else /var/lib/profd/spool)"},
    {"export_spool_max", 0, CFG_SIZE, F(export_spool_max), 64ull << 10, 0, "256M", "SIZE", "64K",
     "most bytes of unsent profiles kept: past it the oldest are dropped (and counted)"},
    {"verbose", 'v', CFG_BOOL, F(verbose), 0, 0, "no", NULL, NULL, "debug logging"},
};
#undef F

const struct config_key *config_keys(size_t *n)
{
    *n = sizeof(keys) / sizeof(keys[0]);
    return keys;
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

void config_defaults(struct profd_config *c)
{
    memset(c, 0, sizeof(*c));
    char err[300];
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (keys[i].def && config_set(c, keys[i].key, keys[i].def, err, sizeof(err)) < 0)
            fatal("built-in default of %s: %s", keys[i].key, err);
}

/* A numeric key's value, checked against its bounds (config_set). */
static int set_number(const struct config_key *k, void *field, const char *v, char *err,
                      size_t errlen)
{
    const char *name = k->key;
    switch (k->type) {
    case CFG_OCTAL: {
        char *end;
        errno = 0;
        unsigned long m = strtoul(v, &end, 8);
        if (errno || end == v || *end || m > k->hi || !isdigit((unsigned char)v[0]))
            return bad(err, errlen, "%s must be octal permissions such as 0660, not \"%s\"",
                       name, v);
        *(unsigned *)field = (unsigned)m;
        return 0;
    }
    case CFG_UINT: {
        uint64_t n;
        if (parse_u64(v, &n) < 0 || n < k->lo || n > k->hi)
            return bad(err, errlen, "%s must be an integer from %" PRIu64 " to %" PRIu64
                       ", not \"%s\"", name, k->lo, k->hi, v);
        *(unsigned *)field = (unsigned)n;
        return 0;
    }
    case CFG_DURATION: {
        uint64_t ns;
        if (parse_duration_ns(v, &ns) < 0 || ns < k->lo || ns > k->hi)
            return bad(err, errlen, "%s must be a duration %s (\"60\", \"500ms\", \"5m\"), "
                       "not \"%s\"", name, k->range, v);
        *(uint64_t *)field = ns;
        return 0;
    }
    case CFG_PERCENT: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !(d >= (double)k->lo && d <= (double)k->hi))
            return bad(err, errlen, "%s must be a percentage from %" PRIu64 " to %" PRIu64
                       ", not \"%s\"", name, k->lo, k->hi, v);
        *(double *)field = d;
        return 0;
    }
    case CFG_SIZE: {
        uint64_t n;
        if (parse_size(v, &n) < 0 || (n && n < k->lo))
            return bad(err, errlen, "%s must be a size of at least %s (\"512M\", \"2G\"), or "
                       "0 for no limit, not \"%s\"", name, k->range, v);
        *(uint64_t *)field = n;
        return 0;
    }
    default:
        break;
    }
    return bad(err, errlen, "%s: unknown type", name);
}

int config_set(struct profd_config *c, const char *key, const char *v, char *err,
               size_t errlen)
{
    const struct config_key *k = NULL;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !k; i++)
        if (key_is(key, keys[i].key))
            k = &keys[i];
    if (!k) {
        snprintf(err, errlen, "unknown key \"%s\"", key);
        return -ENOENT;
    }
    void *field = (char *)c + k->off;
    const char *name = k->key;
    switch (k->type) {
    case CFG_PATH:
        if (v[0] != '/' || strlen(v) > k->hi)
            return bad(err, errlen, "%s must be an absolute path of at most %" PRIu64
                       " bytes, not \"%s\"", name, k->hi, v);
        free(*(char **)field);
        *(char **)field = xstrdup(v);
        return 0;
    case CFG_GROUP:
        if (*v && !getgrnam(v)) {
            uint64_t num;
            if (parse_u64(v, &num) < 0 || num >= (gid_t)-1 || !getgrgid((gid_t)num))
                return bad(err, errlen, "%s: no group named \"%s\"", name, v);
        }
        free(*(char **)field);
        *(char **)field = *v ? xstrdup(v) : NULL;
        return 0;
    case CFG_MODE:
        if (sched_mode_parse(v, (enum sched_mode *)field) < 0)
            return bad(err, errlen, "%s must be alarm, sleep, event or cputime, not \"%s\"",
                       name, v);
        return 0;
    case CFG_CPUSRC:
        if (cpu_source_parse(v, (enum cpu_source *)field) < 0)
            return bad(err, errlen, "%s must be auto, perf, timer or poll, not \"%s\"", name,
                       v);
        return 0;
    case CFG_SAMPLER:
        if (sampler_kind_parse(v, (enum sampler_kind *)field) < 0)
            return bad(err, errlen, "%s must be auto, perf or ptrace, not \"%s\"", name, v);
        return 0;
    case CFG_OCTAL:
    case CFG_UINT:
    case CFG_DURATION:
    case CFG_PERCENT:
    case CFG_SIZE:
        return set_number(k, field, v, err, errlen);
    case CFG_GROUPS:
        return set_groups(c, v, err, errlen);
    case CFG_URL:
    case CFG_DSN: {
        char why[200];
        if (*v && k->type == CFG_URL && url_check(v, why, sizeof(why)) < 0)
            return bad(err, errlen, "%s: the URL %s", name, why);
        if (*v && k->type == CFG_DSN && dsn_parse_check(v, why, sizeof(why)) < 0)
            return bad(err, errlen, "%s: %s", name, why);
        free(*(char **)field);
        *(char **)field = *v ? xstrdup(v) : NULL;
        return 0;
    }
    case CFG_BOOL:
        if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
            *(bool *)field = true;
        else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
            *(bool *)field = false;
        else
            return bad(err, errlen, "%s must be yes or no, not \"%s\"", name, v);
        return 0;
    }
    return bad(err, errlen, "%s: unknown type", name);
}

/* A duration as the file would say it: whole seconds, else milliseconds. */
static void put_duration(struct strbuf *sb, uint64_t ns)
{
    if (ns % NS_PER_SEC == 0)
        strbuf_printf(sb, "%" PRIu64, ns / NS_PER_SEC);
    else if (ns % NS_PER_MS == 0)
        strbuf_printf(sb, "%" PRIu64 "ms", ns / NS_PER_MS);
    else
        strbuf_printf(sb, "%" PRIu64 "ns", ns);
}

static void put_size(struct strbuf *sb, uint64_t n)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (n && n % 1024 == 0 && u < 3) {
        n /= 1024;
        u++;
    }
    if (u < 0)
        strbuf_printf(sb, "%" PRIu64, n);
    else
        strbuf_printf(sb, "%" PRIu64 "%c", n, units[u]);
}

/* Append key's value in c as the file would say it. */
static void put_value(struct strbuf *sb, const struct profd_config *c, const struct config_key *k)
{
    const void *field = (const char *)c + k->off;
    switch (k->type) {
    case CFG_PATH:
    case CFG_GROUP:
    case CFG_URL:
        strbuf_puts(sb, *(char *const *)field ? *(char *const *)field : "");
        break;
    case CFG_DSN:
        if (*(char *const *)field) {
            char *shown = dsn_redacted(*(char *const *)field);
            strbuf_puts(sb, shown);
            free(shown);
        }
        break;
    case CFG_OCTAL:
        strbuf_printf(sb, "%04o", *(const unsigned *)field);
        break;
    case CFG_MODE:
        strbuf_puts(sb, sched_mode_name(*(const enum sched_mode *)field));
        break;
    case CFG_CPUSRC:
        strbuf_puts(sb, cpu_source_name(*(const enum cpu_source *)field));
        break;
    case CFG_SAMPLER:
        strbuf_puts(sb, sampler_kind_name(*(const enum sampler_kind *)field));
        break;
    case CFG_UINT:
        strbuf_printf(sb, "%u", *(const unsigned *)field);
        break;
    case CFG_DURATION:
        put_duration(sb, *(const uint64_t *)field);
        break;
    case CFG_PERCENT:
        strbuf_printf(sb, "%g", *(const double *)field);
        break;
    case CFG_SIZE:
        put_size(sb, *(const uint64_t *)field);
        break;
    case CFG_GROUPS:
        for (size_t i = 0; i < c->nallow_groups; i++) {
            struct group *g = getgrgid(c->allow_groups[i]);
            if (g)
                strbuf_printf(sb, "%s%s", i ? " " : "", g->gr_name);
            else
                strbuf_printf(sb, "%s%u", i ? " " : "", (unsigned)c->allow_groups[i]);
        }
        break;
    case CFG_BOOL:
        strbuf_puts(sb, *(const bool *)field ? "yes" : "no");
        break;
    }
}

void config_show(const struct profd_config *c, struct strbuf *out)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        strbuf_printf(out, "%s = ", keys[i].key);
        put_value(out, c, &keys[i]);
        strbuf_puts(out, "\n");
    }
}

void config_usage(struct strbuf *out)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const struct config_key *k = &keys[i];
        char flag[80];
        int n = snprintf(flag, sizeof(flag), "  %c%c%s--", k->short_flag ? '-' : ' ',
                         k->short_flag ? k->short_flag : ' ', k->short_flag ? ", " : "  ");
        for (const char *p = k->key; *p && n < (int)sizeof(flag) - 1; p++)
            flag[n++] = *p == '_' ? '-' : *p;
        flag[n] = '\0';
        if (k->arg)
            snprintf(flag + n, sizeof(flag) - (size_t)n, " %s", k->arg);
        /* The help beside the flag when it fits, else on the next line; its default last. */
        const char *indent = "                        ";
        if (strlen(flag) + 2 <= strlen(indent))
            strbuf_printf(out, "%-24s", flag);
        else
            strbuf_printf(out, "%s\n%s", flag, indent);
        char text[600];
        if (k->def && *k->def && k->type != CFG_BOOL)
            snprintf(text, sizeof(text), "%s (%s)", k->help, k->def);
        else
            snprintf(text, sizeof(text), "%s", k->help);
        /* Words wrapped to 80 columns. */
        size_t col = 0, width = 80 - strlen(indent);
        for (char *w = strtok(text, " "); w; w = strtok(NULL, " ")) {
            size_t l = strlen(w);
            if (col && col + 1 + l > width) {
                strbuf_printf(out, "\n%s", indent);
                col = 0;
            }
            strbuf_printf(out, "%s%s", col ? " " : "", w);
            col += (col ? 1 : 0) + l;
        }
        strbuf_puts(out, "\n");
    }
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

int config_read_secrets(struct profd_config *c, char *err, size_t errlen)
{
    const char *path = c->export_sentry_file;
    if (!path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        bad(err, errlen, "export_sentry_file %s: %s", path, strerror(e));
        return -e;
    }
    char buf[2100];
    ssize_t n = -1;
    if (S_ISREG(st.st_mode) && st.st_uid == 0 && !(st.st_mode & 077))
        n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077))
        return bad(err, errlen, "export_sentry_file %s must be a file owned by root that no "
                   "one else may read (chmod 600)", path);
    if (n < 0)
        return bad(err, errlen, "export_sentry_file %s: %s", path, strerror(errno));
    buf[n] = '\0';
    char why[200];
    char *dsn = trim(buf);
    int r = 0;
    if (dsn_parse_check(dsn, why, sizeof(why)) < 0) {
        r = bad(err, errlen, "export_sentry_file %s: %s", path, why);
    } else {
        free(c->export_sentry);
        c->export_sentry = xstrdup(dsn);
    }
    memset(buf, 0, sizeof(buf));
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
