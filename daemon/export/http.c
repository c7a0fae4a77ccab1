/* http.c: libcurl's multi interface on libev (http.h). libcurl tells which sockets to watch
 * (socket_cb: an ev_io each) and when to call it back (timer_cb: one ev_timer); the
 * watchers hand events to curl_multi_socket_action, and finished transfers are collected
 * after each. */
#include "http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "log.h"
#include "util.h"

#define HEADER_MAX 512
#define BODY_HEAD 300

struct http_req {
    CURL *easy;
    struct curl_slist *headers;
    curl_mime *mime;
    void (*done)(void *ctx, const struct http_result *r);
    void *ctx;
    char error[CURL_ERROR_SIZE];
    char retry_after[HEADER_MAX], rate_limits[HEADER_MAX];
    char body[BODY_HEAD + 1];
    size_t body_len;
};

/* A socket libcurl asked to watch. */
struct sock {
    ev_io io;
    curl_socket_t fd;
};

static struct ev_loop *loop;
static CURLM *multi;
static ev_timer timer;
static bool inited;

static void finish(struct http_req *r)
{
    curl_multi_remove_handle(multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    curl_mime_free(r->mime);
    free(r);
}

static void collect(void)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct http_req *r;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        long status = 0;
        if (m->data.result == CURLE_OK)
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        struct http_result res = {
            .status = status,
            .error = m->data.result == CURLE_OK ? NULL
                     : r->error[0]               ? r->error
                                                 : curl_easy_strerror(m->data.result),
            .retry_after = r->retry_after[0] ? r->retry_after : NULL,
            .rate_limits = r->rate_limits[0] ? r->rate_limits : NULL,
            .body = r->body,
        };
        void (*done)(void *, const struct http_result *) = r->done;
        void *ctx = r->ctx;
        /* The result's strings live in r: done is called before r goes. */
        done(ctx, &res);
        finish(r);
    }
}

static void on_io(struct ev_loop *l, ev_io *w, int revents)
{
    (void)l;
    struct sock *s = (struct sock *)w;
    int action = (revents & EV_READ ? CURL_CSELECT_IN : 0) |
                 (revents & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(multi, s->fd, action, &running);
    collect();
}

static void on_timer(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)w;
    (void)revents;
    int running;
    curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
    collect();
}

static int socket_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)e;
    (void)userp;
    struct sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            ev_io_stop(loop, &s->io);
            free(s);
            curl_multi_assign(multi, fd, NULL);
        }
        return 0;
    }
    if (!s) {
        s = xcalloc(1, sizeof(*s));
        s->fd = fd;
        curl_multi_assign(multi, fd, s);
    } else {
        ev_io_stop(loop, &s->io);
    }
    int ev = (what & CURL_POLL_IN ? EV_READ : 0) | (what & CURL_POLL_OUT ? EV_WRITE : 0);
    ev_io_init(&s->io, on_io, fd, ev);
    ev_io_start(loop, &s->io);
    return 0;
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    (void)userp;
    ev_timer_stop(loop, &timer);
    if (timeout_ms >= 0) {
        ev_timer_set(&timer, (double)timeout_ms / 1000.0, 0.);
        ev_timer_start(loop, &timer);
    }
    return 0;
}

/* The answer's headers: only the two the retry policy reads are kept. */
static void keep_header(char *dst, const char *line, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
        vl--;
    if (vl >= HEADER_MAX)
        vl = HEADER_MAX - 1;
    memcpy(dst, v, vl);
    dst[vl] = '\0';
}

static size_t header_cb(char *line, size_t size, size_t n, void *userp)
{
    struct http_req *r = userp;
    size_t len = size * n;
    if (len >= 5 && !strncmp(line, "HTTP/", 5)) {
        /* A new answer (after a 100 Continue): its headers only. */
        r->retry_after[0] = r->rate_limits[0] = '\0';
    }
    keep_header(r->retry_after, line, len, "Retry-After");
    keep_header(r->rate_limits, line, len, "X-Sentry-Rate-Limits");
    return len;
}

static size_t body_cb(char *data, size_t size, size_t n, void *userp)
{
    struct http_req *r = userp;
    size_t len = size * n, room = BODY_HEAD - r->body_len;
    size_t take = len < room ? len : room;
    memcpy(r->body + r->body_len, data, take);
    r->body_len += take;
    r->body[r->body_len] = '\0';
    return len;
}

int http_init(struct ev_loop *l)
{
    if (inited)
        return 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -ENOMEM;
    multi = curl_multi_init();
    if (!multi)
        return -ENOMEM;
    loop = l;
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    ev_timer_init(&timer, on_timer, 0., 0.);
    inited = true;
    return 0;
}

static bool setup(struct http_req *r, const struct http_post *p)
{
    CURL *e = r->easy;
    long timeout_ms = (long)(p->timeout_ns / NS_PER_MS);
    bool ok = curl_easy_setopt(e, CURLOPT_URL, p->url) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "profd/" PROFD_VERSION);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    /* No "Expect: 100-continue" wait before a large body. */
    r->headers = curl_slist_append(NULL, "Expect:");
    for (const char *const *h = p->headers; h && *h && r->headers; h++)
        r->headers = curl_slist_append(r->headers, *h);
    ok = ok && r->headers && curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers) == CURLE_OK;
    if (p->form_field) {
        r->mime = curl_mime_init(e);
        curl_mimepart *part = r->mime ? curl_mime_addpart(r->mime) : NULL;
        ok = ok && part && curl_mime_name(part, p->form_field) == CURLE_OK &&
             curl_mime_filename(part, p->form_file) == CURLE_OK &&
             curl_mime_data(part, p->body, p->len) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_MIMEPOST, r->mime) == CURLE_OK;
    } else {
        ok = ok && curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)p->len) == CURLE_OK &&
             curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body) == CURLE_OK;
    }
    return ok;
}

struct http_req *http_start(const struct http_post *p)
{
    if (!inited)
        return NULL;
    struct http_req *r = xcalloc(1, sizeof(*r));
    r->done = p->done;
    r->ctx = p->ctx;
    r->easy = curl_easy_init();
    if (!r->easy || !setup(r, p) || curl_multi_add_handle(multi, r->easy) != CURLM_OK) {
        if (r->easy)
            curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->headers);
        curl_mime_free(r->mime);
        free(r);
        return NULL;
    }
    return r;
}

void http_cancel(struct http_req *r)
{
    if (r)
        finish(r);
}

void http_shutdown(void)
{
    if (!inited)
        return;
    ev_timer_stop(loop, &timer);
    curl_multi_cleanup(multi);
    multi = NULL;
    curl_global_cleanup();
    inited = false;
}
