/* queue.c: each exporter's queue of records, sent one at a time, oldest first; what the
 * answer means is retry.h's. A record waits at the head of its queue through its retries:
 * a backend that refuses one refuses the next as well, and the order is the windows'. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "endpoint.h"
#include "export_internal.h"
#include "http.h"
#include "log.h"
#include "retry.h"
#include "spool.h"
#include "util.h"

int exporter_setup(struct exporter *x, const char *url, char *why, size_t whylen)
{
    char reason[200];
    if (x == &exporters[EX_SENTRY]) {
        struct sentry_dsn d;
        if (dsn_parse(url, &d, reason, sizeof(reason)) < 0) {
            snprintf(why, whylen, "export_sentry: %s", reason);
            return -EINVAL;
        }
        x->url = dsn_envelope_url(&d);
        x->auth = dsn_auth_header(&d);
        x->shown = dsn_redacted(url);
        dsn_free(&d);
    } else {
        if (url_check(url, reason, sizeof(reason)) < 0) {
            snprintf(why, whylen, "export_%s: the URL %s", x->name, reason);
            return -EINVAL;
        }
        if (x == &exporters[EX_PYROSCOPE])
            x->url = url_join(url, "ingest");
        else
            x->url = url_has_path(url) ? xstrdup(url) : url_join(url, "v1development/profiles");
        x->shown = xstrdup(x->url);
    }
    x->on = true;
    return 0;
}

static void on_wake(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)revents;
    queue_pump(w->data);
}

void queue_add(struct exporter *x, uint64_t seq, char *path, char *mem, size_t size)
{
    struct record *r = xcalloc(1, sizeof(*r));
    r->seq = seq;
    r->path = path;
    r->mem = mem;
    r->size = size;
    /* In order of seq (the spool's files come in any order); the head stays the head while
     * it is being sent. */
    struct record **p = &x->head;
    if (*p && x->req)
        p = &(*p)->next;
    while (*p && (*p)->seq <= seq)
        p = &(*p)->next;
    r->next = *p;
    *p = r;
    if (!r->next)
        x->tail = r;
    x->queued++;
    x->bytes += size;
    export_spool_add((int64_t)size);
}

/* Take r (the head, or any record not being sent) out of x's queue, and off the disk. */
static void remove_record(struct exporter *x, struct record *r)
{
    struct record *prev = NULL;
    for (struct record *c = x->head; c && c != r; c = c->next)
        prev = c;
    if (prev)
        prev->next = r->next;
    else
        x->head = r->next;
    if (x->tail == r)
        x->tail = prev;
    x->queued--;
    x->bytes -= r->size;
    export_spool_add(-(int64_t)r->size);
    if (r->path && unlink(r->path) < 0 && errno != ENOENT)
        log_warn("export: cannot remove %s: %s", r->path, strerror(errno));
    free(r->path);
    free(r->mem);
    free(r);
}

void queue_bound(void)
{
    static uint64_t logged;
    uint64_t max = export_spool_max();
    while (max && export_spool_bytes() > max) {
        struct exporter *from = NULL;
        struct record *oldest = NULL;
        for (int i = 0; i < EX_COUNT; i++) {
            struct exporter *x = &exporters[i];
            struct record *r = x->head && x->req ? x->head->next : x->head;
            if (r && (!oldest || r->seq < oldest->seq)) {
                oldest = r;
                from = x;
            }
        }
        if (!oldest)
            return;
        from->dropped++;
        if (logged++ % 100 == 0)
            log_warn("export: the spool is past its bound (%" PRIu64 " bytes): the oldest "
                     "unsent profiles are dropped (%" PRIu64 " so far)", max, logged);
        remove_record(from, oldest);
    }
}

static void request_free(struct exporter *x)
{
    free(x->req_buf);
    x->req_buf = NULL;
    for (char **h = x->req_headers; h && *h; h++)
        free(*h);
    free(x->req_headers);
    x->req_headers = NULL;
    x->req = NULL;
}

/* A text fit for a log line: its first n bytes, control characters as spaces. */
static void tidy(char *dst, size_t dstlen, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < dstlen; i++)
        dst[i] = (unsigned char)src[i] < ' ' ? ' ' : src[i];
    dst[i] = '\0';
}

/* A final answer is logged once per status. */
static bool first_of_status(struct exporter *x, long status)
{
    size_t n = sizeof(x->logged_status) / sizeof(x->logged_status[0]);
    for (size_t i = 0; i < n; i++) {
        if (x->logged_status[i] == status)
            return false;
        if (!x->logged_status[i]) {
            x->logged_status[i] = status;
            return true;
        }
    }
    return false;
}

static void on_answer(void *ctx, const struct http_result *res)
{
    struct exporter *x = ctx;
    struct record *r = x->head;
    request_free(x);
    struct retry_answer a = {.status = res->status, .retry_after = res->retry_after,
                             .rate_limits = res->rate_limits, .category = x->category};
    uint64_t hold = 0;
    enum retry_verdict v = retry_judge(&a, r->attempts, (int64_t)(realtime_ns() / NS_PER_SEC),
                                       random_below(UINT64_MAX), &hold);
    char body[200];
    tidy(body, sizeof(body), res->body);
    if (v != RETRY_SENT) {
        x->failed++;
        if (res->status)
            snprintf(x->last_error, sizeof(x->last_error), "HTTP %ld: %s", res->status, body);
        else
            snprintf(x->last_error, sizeof(x->last_error), "no answer: %s",
                     res->error ? res->error : "?");
    }
    switch (v) {
    case RETRY_SENT:
        x->sent++;
        remove_record(x, r);
        break;
    case RETRY_LATER:
        log_debug("export: %s: %s; again in %.1f s", x->name, x->last_error, (double)hold / 1e9);
        break;
    case RETRY_DROP:
        x->dropped++;
        if (first_of_status(x, res->status))
            log_warn("export: %s refused a profile for good (%s): dropped; the same answer "
                     "is counted from now on, not logged", x->shown, x->last_error);
        remove_record(x, r);
        break;
    }
    if (hold)
        x->hold_until_ns = now_ns() + hold;
    queue_pump(x);
}

static const char *json_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* Begin sending x's head. false: it could not be read (dropped), try the next. */
static bool send_head(struct exporter *x)
{
    struct record *r = x->head;
    const char *header, *body;
    size_t len;
    int e = 0;
    if (r->path) {
        e = spool_read(r->path, &x->req_buf, &header, &body, &len);
    } else {
        x->req_buf = xmalloc(r->size + 1);
        memcpy(x->req_buf, r->mem, r->size);
        x->req_buf[r->size] = '\0';
        char *nl = memchr(x->req_buf, '\n', r->size);
        e = nl ? 0 : -EINVAL;
        if (nl) {
            *nl = '\0';
            header = x->req_buf;
            body = nl + 1;
            len = r->size - (size_t)(nl + 1 - x->req_buf);
        }
    }
    cJSON *h = e < 0 ? NULL : cJSON_Parse(header);
    const char *type = json_str(h, "content_type"), *id = json_str(h, "id");
    const char *window = json_str(h, "window"), *query = json_str(h, "query");
    const char *encoding = json_str(h, "content_encoding");
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(h, "samples");
    if (!type || !id || !window || !cJSON_IsNumber(samples)) {
        log_warn("export: %s: not a record (%s): dropped", r->path ? r->path : "(memory)",
                 e < 0 ? strerror(-e) : "its header");
        cJSON_Delete(h);
        request_free(x);
        x->dropped++;
        remove_record(x, r);
        return false;
    }
    x->req_headers = xcalloc(7, sizeof(char *));
    size_t n = 0;
    x->req_headers[n++] = xasprintf("Content-Type: %s", type);
    x->req_headers[n++] = xasprintf("X-Profd-Id: %s", id);
    x->req_headers[n++] = xasprintf("X-Profd-Window: %s", window);
    x->req_headers[n++] = xasprintf("X-Profd-Samples: %.0f", samples->valuedouble);
    if (encoding)
        x->req_headers[n++] = xasprintf("Content-Encoding: %s", encoding);
    if (x->auth)
        x->req_headers[n++] = xstrdup(x->auth);
    char *url = query ? xasprintf("%s?%s", x->url, query) : xstrdup(x->url);
    bool form = x == &exporters[EX_PYROSCOPE];
    struct http_post p = {
        .url = url, .headers = (const char *const *)x->req_headers, .body = body, .len = len,
        .form_field = form ? "profile" : NULL, .form_file = form ? "profile.pprof" : NULL,
        .timeout_ns = export_timeout_ns(), .done = on_answer, .ctx = x};
    if (r->attempts)
        x->retried++;
    r->attempts++;
    x->req = http_start(&p);
    free(url);
    cJSON_Delete(h);
    if (!x->req) {
        struct http_result res = {.status = 0, .error = "the request could not be made",
                                  .body = ""};
        on_answer(x, &res);
    }
    return true;
}

void queue_pump(struct exporter *x)
{
    if (!x->on || x->req)
        return;
    while (x->head) {
        uint64_t now = now_ns();
        if (now < x->hold_until_ns) {
            ev_timer_stop(export_ev_loop(), &x->wake);
            ev_timer_init(&x->wake, on_wake, (double)(x->hold_until_ns - now) / 1e9, 0.);
            x->wake.data = x;
            ev_timer_start(export_ev_loop(), &x->wake);
            return;
        }
        if (send_head(x))
            return;
    }
}

cJSON *queue_describe(const struct exporter *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "url", x->shown);
    cJSON_AddNumberToObject(o, "sent", (double)x->sent);
    cJSON_AddNumberToObject(o, "failed", (double)x->failed);
    cJSON_AddNumberToObject(o, "retried", (double)x->retried);
    cJSON_AddNumberToObject(o, "queued", (double)x->queued);
    cJSON_AddNumberToObject(o, "spool_bytes", (double)x->bytes);
    cJSON_AddNumberToObject(o, "dropped", (double)x->dropped);
    cJSON_AddStringToObject(o, "last_error", x->last_error);
    uint64_t now = now_ns();
    cJSON_AddNumberToObject(o, "held_s", x->hold_until_ns > now
                                             ? (double)(x->hold_until_ns - now) / 1e9 : 0);
    cJSON_AddBoolToObject(o, "sending", x->req != NULL);
    return o;
}

void queue_shutdown(struct exporter *x)
{
    if (!x->on)
        return;
    ev_timer_stop(export_ev_loop(), &x->wake);
    if (x->req)
        http_cancel(x->req);
    request_free(x);
    size_t in_memory = 0;
    while (x->head) {
        struct record *r = x->head;
        x->head = r->next;
        in_memory += !r->path;
        free(r->path);
        free(r->mem);
        free(r);
    }
    if (in_memory)
        log_warn("export: %s: %zu unsent profiles were in memory only (no spool): lost",
                 x->name, in_memory);
    free(x->url);
    free(x->shown);
    free(x->auth);
    x->url = x->shown = x->auth = NULL;
    x->on = false;
}
