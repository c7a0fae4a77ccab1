/* http.h: HTTP(S) POSTs on profd's loop, through libcurl's multi interface: a request never
 * blocks the loop (its sockets and timeouts are libev watchers; names are resolved on
 * libcurl's resolver threads). TLS is verified against the system's CA store; only http and
 * https, no redirects followed. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

struct http_result {
    long status;             /* the HTTP status; 0: no answer (why in error) */
    const char *error;       /* libcurl's reason when there was no answer, else NULL */
    const char *retry_after; /* the Retry-After header, or NULL */
    const char *rate_limits; /* X-Sentry-Rate-Limits, or NULL */
    const char *body;        /* the answer's first bytes (for a log line), NUL-terminated */
};

struct http_post {
    const char *url;
    const char *const *headers; /* "Name: value" lines, NULL-terminated */
    const char *body;        /* the caller's until done is called */
    size_t len;
    const char *form_field;  /* non-NULL: the body goes as this multipart/form-data field */
    const char *form_file;   /* ... with this file name */
    uint64_t timeout_ns;     /* the whole request; connecting takes at most 10 s of it */
    void (*done)(void *ctx, const struct http_result *r); /* on the loop, once */
    void *ctx;
};

struct http_req;

/* Returns 0 or -errno (libcurl could not be set up). Before any thread is started. */
int http_init(struct ev_loop *loop);
void http_shutdown(void);
/* Begin a POST. Returns the request, or NULL (with done not called) if it could not begin. */
struct http_req *http_start(const struct http_post *p);
/* Abandon a request: done is not called. */
void http_cancel(struct http_req *r);
