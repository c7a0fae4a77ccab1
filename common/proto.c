/* proto.c: framing (4-byte big-endian length + JSON) and client-side request/reply helpers. */
#include "proto.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *const error_names[PE_COUNT] = {
    [PE_BAD_REQUEST] = "bad_request",
    [PE_TOO_LARGE] = "too_large",
    [PE_UNSUPPORTED_VERSION] = "unsupported_version",
    [PE_HANDSHAKE_REQUIRED] = "handshake_required",
    [PE_UNKNOWN_COMMAND] = "unknown_command",
    [PE_NO_SUCH_PROCESS] = "no_such_process",
    [PE_PERMISSION_DENIED] = "permission_denied",
    [PE_NOT_ATTACHED] = "not_attached",
    [PE_ALREADY_ATTACHED] = "already_attached",
    [PE_ATTACH_FAILED] = "attach_failed",
    [PE_LIMIT] = "limit",
    [PE_SHUTTING_DOWN] = "shutting_down",
    [PE_INTERNAL] = "internal",
};

const char *proto_error_name(enum proto_error e)
{
    return (unsigned)e < PE_COUNT ? error_names[e] : "internal";
}

int proto_error_from_name(const char *name)
{
    for (int i = 0; name && i < PE_COUNT; i++)
        if (!strcmp(error_names[i], name))
            return i;
    return -1;
}

void frame_reader_init(struct frame_reader *r, size_t max_payload)
{
    memset(r, 0, sizeof(*r));
    r->max = max_payload;
}

void frame_reader_finish(struct frame_reader *r)
{
    strbuf_finish(&r->in);
    r->pos = 0;
}

/* Drop consumed frames from the front once they dominate the buffer. */
static void compact(struct frame_reader *r)
{
    if (r->pos == 0)
        return;
    if (r->pos == r->in.len) {
        r->in.len = 0;
        r->pos = 0;
    } else if (r->pos > r->in.len / 2 || r->pos > 65536) {
        memmove(r->in.buf, r->in.buf + r->pos, r->in.len - r->pos);
        r->in.len -= r->pos;
        r->pos = 0;
    }
}

ssize_t frame_reader_fill(struct frame_reader *r, int fd)
{
    compact(r);
    size_t buffered = r->in.len - r->pos;
    /* Back-pressure: never hold more than one maximal frame. */
    if (buffered >= r->max + PROTO_HEADER_SIZE)
        return -ENOBUFS;
    size_t want = r->max + PROTO_HEADER_SIZE - buffered;
    if (want > 65536)
        want = 65536;
    if (strbuf_reserve(&r->in, want) < 0)
        return -ENOMEM;
    for (;;) {
        ssize_t n = read(fd, r->in.buf + r->in.len, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        r->in.len += (size_t)n;
        return n;
    }
}

void frame_reader_trim(struct frame_reader *r)
{
    if (r->pos == r->in.len) {
        strbuf_finish(&r->in);
        r->pos = 0;
    }
}

int frame_reader_feed(struct frame_reader *r, const void *data, size_t n)
{
    compact(r);
    return strbuf_append(&r->in, data, n);
}

int frame_reader_next(struct frame_reader *r, const char **payload, size_t *len)
{
    size_t avail = r->in.len - r->pos;
    if (avail < PROTO_HEADER_SIZE)
        return 0;
    const unsigned char *h = (const unsigned char *)r->in.buf + r->pos;
    uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (n == 0)
        return -EBADMSG;
    if (n > r->max)
        return -EMSGSIZE;
    if (avail < PROTO_HEADER_SIZE + (size_t)n)
        return 0;
    *payload = r->in.buf + r->pos + PROTO_HEADER_SIZE;
    *len = n;
    r->pos += PROTO_HEADER_SIZE + n;
    return 1;
}

void frame_reader_unread(struct frame_reader *r, size_t len)
{
    r->pos -= PROTO_HEADER_SIZE + len;
}

size_t frame_reader_pending(const struct frame_reader *r)
{
    return r->in.len - r->pos;
}

int frame_encode(struct strbuf *out, const char *payload, size_t len)
{
    if (len == 0 || len > UINT32_MAX)
        return -EMSGSIZE;
    unsigned char h[PROTO_HEADER_SIZE] = {
        (unsigned char)(len >> 24),
        (unsigned char)(len >> 16),
        (unsigned char)(len >> 8),
        (unsigned char)len,
    };
    int r = strbuf_reserve(out, sizeof(h) + len);
    if (r < 0)
        return r;
    strbuf_append(out, h, sizeof(h));
    strbuf_append(out, payload, len);
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Wait until fd is ready for events, within the deadline. */
static int wait_fd(int fd, short events, uint64_t deadline, int timeout_ms)
{
    for (;;) {
        int t = -1;
        if (timeout_ms >= 0) {
            uint64_t now = mono_ms();
            t = now >= deadline ? 0 : (int)(deadline - now);
        }
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, t);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
        return 0;
    }
}

/* Send header and payload in one call where the socket has room (one wake-up of the
 * reader, not two). busy_if_full: return -EBUSY at once, having sent nothing, if the
 * socket has no room; once part of a frame is out the rest is always sent (within the
 * timeout), or the stream would be broken. */
static int send_frame(int fd, const unsigned char *h, size_t hlen, const char *payload,
                      size_t len, uint64_t deadline, int timeout_ms, bool busy_if_full)
{
    struct iovec iov[2] = {{(void *)h, hlen}, {(void *)payload, len}};
    struct iovec *v = iov;
    int nv = 2;
    bool started = false;
    while (nv > 0) {
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (busy_if_full && !started)
                    return -EBUSY;
                int r = wait_fd(fd, POLLOUT, deadline, timeout_ms);
                if (r < 0)
                    return r;
                continue;
            }
            return -errno;
        }
        started = true;
        size_t done = (size_t)w;
        while (nv > 0 && done >= v->iov_len) {
            done -= v->iov_len;
            v++;
            nv--;
        }
        if (nv > 0) {
            v->iov_base = (char *)v->iov_base + done;
            v->iov_len -= done;
        }
    }
    return 0;
}

static int send_payload(int fd, const char *payload, size_t len, int timeout_ms,
                        bool busy_if_full)
{
    if (len == 0 || len > UINT32_MAX)
        return -EMSGSIZE;
    uint64_t deadline = mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    unsigned char h[PROTO_HEADER_SIZE] = {
        (unsigned char)(len >> 24),
        (unsigned char)(len >> 16),
        (unsigned char)(len >> 8),
        (unsigned char)len,
    };
    return send_frame(fd, h, sizeof(h), payload, len, deadline, timeout_ms, busy_if_full);
}

int proto_send(int fd, const char *payload, size_t len, int timeout_ms)
{
    return send_payload(fd, payload, len, timeout_ms, false);
}

int proto_send_nowait(int fd, const char *payload, size_t len, int timeout_ms)
{
    return send_payload(fd, payload, len, timeout_ms, true);
}

static int recv_all(int fd, void *data, size_t n, uint64_t deadline, int timeout_ms)
{
    char *p = data;
    while (n > 0) {
        ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
        if (got == 0)
            return -ECONNRESET;
        if (got < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int r = wait_fd(fd, POLLIN, deadline, timeout_ms);
                if (r < 0)
                    return r;
                continue;
            }
            return -errno;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int proto_recv(int fd, size_t max, char **payload, size_t *len, int timeout_ms)
{
    uint64_t deadline = mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    unsigned char h[PROTO_HEADER_SIZE];
    int r = recv_all(fd, h, sizeof(h), deadline, timeout_ms);
    if (r < 0)
        return r;
    uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (n == 0)
        return -EBADMSG;
    if (n > max)
        return -EMSGSIZE;
    char *buf = malloc((size_t)n + 1);
    if (!buf)
        return -ENOMEM;
    r = recv_all(fd, buf, n, deadline, timeout_ms);
    if (r < 0) {
        free(buf);
        /* Out of time inside a frame: the stream cannot be read on. */
        return r == -ETIMEDOUT ? -ECONNABORTED : r;
    }
    buf[n] = '\0';
    *payload = buf;
    *len = n;
    return 0;
}

int proto_call(int fd, const cJSON *req, cJSON **reply, int timeout_ms)
{
    char *s = cJSON_PrintUnformatted(req);
    if (!s)
        return -ENOMEM;
    int r = proto_send(fd, s, strlen(s), timeout_ms);
    free(s);
    if (r < 0)
        return r;
    char *buf;
    size_t len;
    r = proto_recv(fd, PROTO_MAX_REPLY, &buf, &len, timeout_ms);
    if (r < 0)
        return r;
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return -EBADMSG;
    }
    *reply = j;
    return 0;
}

int proto_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

cJSON *proto_error_reply(const cJSON *id, enum proto_error code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cJSON *reply = cJSON_CreateObject();
    if (id)
        cJSON_AddItemToObject(reply, "id", cJSON_Duplicate(id, 1));
    cJSON *err = cJSON_AddObjectToObject(reply, "error");
    cJSON_AddStringToObject(err, "code", proto_error_name(code));
    cJSON_AddStringToObject(err, "message", msg);
    return reply;
}

/* A JSON number or decimal string as an exact integer. Ranges are checked on the double
 * before converting it (converting an out-of-range double is undefined behaviour). */
static int parse_u64_item(const cJSON *it, uint64_t *out)
{
    if (cJSON_IsNumber(it)) {
        double d = it->valuedouble;
        if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d))
            return -EINVAL;
        *out = (uint64_t)d;
        return 1;
    }
    if (cJSON_IsString(it) && it->valuestring) {
        const char *s = it->valuestring;
        if (!isdigit((unsigned char)s[0]))
            return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end)
            return -EINVAL;
        *out = v;
        return 1;
    }
    return -EINVAL;
}

static int parse_i64_item(const cJSON *it, int64_t *out)
{
    if (cJSON_IsNumber(it)) {
        double d = it->valuedouble;
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != floor(d))
            return -EINVAL;
        *out = (int64_t)d;
        return 1;
    }
    if (cJSON_IsString(it) && it->valuestring) {
        const char *s = it->valuestring;
        if (!isdigit((unsigned char)s[s[0] == '-']))
            return -EINVAL;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || *end)
            return -EINVAL;
        *out = v;
        return 1;
    }
    return -EINVAL;
}

int json_get_u64(const cJSON *obj, const char *key, uint64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return 0;
    return parse_u64_item(it, out);
}

int json_get_i64(const cJSON *obj, const char *key, int64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return 0;
    return parse_i64_item(it, out);
}

/* A number as JSON text, as cJSON would print it but cheaper: an integral value (below
 * 2^63) in decimal digits, any other in 15 significant digits (17 past 10^9). cJSON prints
 * 15, reads them back with sscanf and prints 17 where they differ, all through printf's
 * floating-point conversion: most of profd's CPU for a status of 100 targets, 30 ms on its
 * loop thread. Neither NaN nor an infinity exists in JSON: null, as cJSON prints them. */
static void number_text(double d, char out[32])
{
    if (isnan(d) || isinf(d))
        strcpy(out, "null");
    else if (d == floor(d) && fabs(d) < 9.2e18)
        snprintf(out, 32, "%" PRId64, (int64_t)d);
    else /* (past 10^9, where 15 digits leave little after the point: all 17) */
        snprintf(out, 32, "%.*g", fabs(d) < 1e9 ? 15 : 17, d);
}

/* Every number under item turned into its text (a raw item), for json_print. Returns -1
 * out of memory (the numbers done so far stay done). */
static int numbers_to_raw(cJSON *item)
{
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            char buf[32];
            number_text(item->valuedouble, buf);
            char *s = strdup(buf);
            if (!s)
                return -1;
            item->valuestring = s;
            item->type = cJSON_Raw | (item->type & cJSON_StringIsConst);
        } else if (item->child && numbers_to_raw(item->child) < 0) {
            return -1;
        }
    }
    return 0;
}

char *json_print(cJSON *item)
{
    if (!item)
        return NULL;
    /* (Only item and what it holds: not its siblings.) */
    if (cJSON_IsNumber(item) || item->child) {
        cJSON *next = item->next;
        item->next = NULL;
        int r = numbers_to_raw(item);
        item->next = next;
        if (r < 0)
            return NULL;
    }
    return cJSON_PrintUnformatted(item);
}
