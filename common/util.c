/* util.c: time, parsing, paths and buffers shared by every part of profd. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void oom(void)
{
    static const char msg[] = "out of memory\n";
    ssize_t r = write(2, msg, sizeof(msg) - 1);
    (void)r;
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom();
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        oom();
    return p;
}

uint64_t random_below(uint64_t span)
{
    static uint64_t x;
    if (!x && (getrandom(&x, sizeof(x), 0) != sizeof(x) || !x))
        x = now_ns() | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return span ? (x * 0x2545F4914F6CDD1Dull) % span : 0;
}

void sort_array(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p)
        oom();
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        oom();
    return s;
}

int parse_u64(const char *s, uint64_t *out)
{
    /* strtoull would skip white space and accept a sign (" -1" is UINT64_MAX). */
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (*end)
        return -EINVAL;
    *out = v;
    return 0;
}

int parse_int(const char *s, int *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
        return -ERANGE;
    *out = (int)v;
    return 0;
}

int parse_duration_ns(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || end == s || !isfinite(v) || v < 0)
        return -EINVAL;
    double mult;
    if (!*end || !strcmp(end, "s"))
        mult = 1e9;
    else if (!strcmp(end, "ms"))
        mult = 1e6;
    else if (!strcmp(end, "us"))
        mult = 1e3;
    else if (!strcmp(end, "ns"))
        mult = 1;
    else if (!strcmp(end, "m"))
        mult = 60e9;
    else if (!strcmp(end, "h"))
        mult = 3600e9;
    else
        return -EINVAL;
    double ns = v * mult;
    if (ns > 9.2e18)
        return -ERANGE;
    *out = (uint64_t)llround(ns);
    return 0;
}

char *profd_socket_path(const char *explicit_path)
{
    if (explicit_path && *explicit_path)
        return strdup(explicit_path);
    const char *env = getenv("PROFD_SOCKET");
    if (env && *env)
        return strdup(env);
    if (geteuid() == 0)
        return strdup("/run/profd/profd.sock");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    char *p = NULL;
    int r;
    if (xdg && *xdg)
        r = asprintf(&p, "%s/profd.sock", xdg);
    else
        r = asprintf(&p, "/tmp/profd-%u.sock", (unsigned)geteuid());
    return r < 0 ? NULL : p;
}

char *profd_client_socket_path(const char *explicit_path)
{
    char *p = profd_socket_path(explicit_path);
    if (!p || (explicit_path && *explicit_path) || getenv("PROFD_SOCKET") || geteuid() == 0)
        return p;
    static const char sys[] = "/run/profd/profd.sock";
    if (access(p, F_OK) != 0 && access(sys, F_OK) == 0) {
        free(p);
        return strdup(sys);
    }
    return p;
}

int strbuf_reserve(struct strbuf *sb, size_t extra)
{
    if (extra > SIZE_MAX - sb->len - 1)
        return -ENOMEM;
    if (sb->len + extra + 1 <= sb->cap)
        return 0;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *p = realloc(sb->buf, cap);
    if (!p)
        return -ENOMEM;
    sb->buf = p;
    sb->cap = cap;
    return 0;
}

int strbuf_append(struct strbuf *sb, const void *data, size_t n)
{
    int r = strbuf_reserve(sb, n);
    if (r < 0)
        return r;
    memcpy(sb->buf + sb->len, data, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
    return 0;
}

int strbuf_puts(struct strbuf *sb, const char *s)
{
    return strbuf_append(sb, s, strlen(s));
}

int strbuf_vprintf(struct strbuf *sb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof(small))
        return strbuf_append(sb, small, (size_t)n);
    int r = strbuf_reserve(sb, (size_t)n);
    if (r < 0)
        return r;
    vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
    return 0;
}

int strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
    return r;
}

char *strbuf_steal(struct strbuf *sb)
{
    if (!sb->buf && strbuf_reserve(sb, 0) < 0)
        return NULL;
    char *p = sb->buf;
    p[sb->len] = '\0';
    sb->buf = NULL;
    sb->len = sb->cap = 0;
    return p;
}

void strbuf_finish(struct strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
}

ssize_t read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t off = 0;
    while (off + 1 < size) {
        ssize_t n = read(fd, buf + off, size - 1 - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    close(fd);
    return (ssize_t)off;
}

const char *parse_hex_span(const char *p, const char *end, uint64_t *v)
{
    const char *s = p;
    uint64_t x = 0;
    for (; p < end; p++) {
        unsigned d;
        if (*p >= '0' && *p <= '9')
            d = (unsigned)(*p - '0');
        else if (*p >= 'a' && *p <= 'f')
            d = (unsigned)(*p - 'a' + 10);
        else if (*p >= 'A' && *p <= 'F')
            d = (unsigned)(*p - 'A' + 10);
        else
            break;
        if (x >> 60)
            return NULL;
        x = x << 4 | d;
    }
    *v = x;
    return p > s ? p : NULL;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *data, size_t n)
{
    const uint8_t *in = data;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        *o++ = B64[v >> 18 & 63];
        *o++ = B64[v >> 12 & 63];
        *o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

int base64_decode(const char *s, struct strbuf *out)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t len = strlen(s);
    while (len && s[len - 1] == '=')
        len--;
    int r = strbuf_reserve(out, len / 4 * 3 + 3);
    if (r < 0)
        return r;
    for (size_t i = 0; i < len; i++) {
        const char *c = s[i] ? strchr(B64, s[i]) : NULL;
        if (!c)
            return -EINVAL;
        acc = acc << 6 | (uint32_t)(c - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out->buf[out->len++] = (char)(acc >> bits & 0xff);
        }
    }
    out->buf[out->len] = '\0';
    return 0;
}
