/* export_internal.h: what export.c, queue.c and encode.c share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <ev.h>

struct profile;
struct slice_job;
struct target;

enum exporter_kind {
    EX_SENTRY,
    EX_PYROSCOPE,
    EX_OTLP,
    EX_COUNT
};

/* A body waiting to be sent: a spool file (path), or in memory when there is no spool. */
struct record {
    uint64_t seq;
    char *path;
    char *mem;
    size_t size;
    unsigned attempts;
    struct record *next;
};

struct http_req;

struct exporter {
    const char *name;
    const char *category;   /* its Sentry rate-limit category, or NULL */
    bool on;
    char *url;              /* where bodies go (Pyroscope's: the server's base) */
    char *shown;            /* url as logs and status show it (a DSN's key hidden) */
    char *auth;             /* Sentry's X-Sentry-Auth header line, or NULL */
    struct record *head, *tail;
    size_t queued;
    uint64_t bytes;         /* of its queued records */
    uint64_t sent, failed, retried, dropped;
    char last_error[320];
    long logged_status[8];  /* final statuses logged (each once) */
    uint64_t hold_until_ns; /* CLOCK_MONOTONIC: no send before */
    struct http_req *req;   /* the send in flight (of head), or NULL */
    char *req_buf;          /* its record, read */
    char **req_headers;
    ev_timer wake;
};

extern struct exporter exporters[EX_COUNT];

/* One body of a window (worker -> loop). */
struct export_out {
    enum exporter_kind ex;
    uint64_t seq;
    char *path, *mem;
    size_t size;
};

/* A window on its way through the worker. */
struct export_window {
    pid_t pid;
    uint64_t from_ns, to_ns; /* CLOCK_MONOTONIC, both in it */
    char *service;
    char **labels;
    size_t nlabels;
    const char *host;
    char profiler_id[33];
    bool want[EX_COUNT];     /* the exporters it is encoded for */
    char *spool_dir;         /* NULL: records in memory */
    /* Worker's results. */
    uint64_t from_rt, to_rt; /* the window in real time (ns) */
    char window[48];         /* "FROM_RT-TO_RT" */
    int err;
    size_t samples;
    struct export_out out[EX_COUNT * 2];
    size_t nout;
};

/* encode.c (worker thread): the window's profile, once per exporter, spooled. */
void export_encode(struct slice_job *job, const struct profile *p);
/* The OTLP body (otlp.c). */
void export_encode_otlp(struct export_window *w, const struct profile *p);
/* Write a record of w for exporter ex (encode.c). extra: more header fields (taken). */
void export_emit(struct export_window *w, enum exporter_kind ex, const char *type,
                 const char *id, cJSON *extra, const void *body, size_t len);
/* The same, the body gzipped (Content-Encoding: gzip). */
void export_emit_gzip(struct export_window *w, enum exporter_kind ex, const char *type,
                      const char *id, const void *body, size_t len);
static inline const char *exporters_name(enum exporter_kind ex)
{
    return ex == EX_SENTRY ? "sentry" : ex == EX_PYROSCOPE ? "pyroscope" : "otlp";
}

/* service.c: a process's service: its systemd unit (/proc/PID/cgroup), else its executable's
 * name (malloc'd). */
char *export_default_service(const struct target *t);
char *service_from_cgroup(const char *text);

/* queue.c (loop thread). */
int exporter_setup(struct exporter *x, const char *url, char *why, size_t whylen);
/* Queue a record (path or mem, taken) of size bytes: the id sent is in its header. */
void queue_add(struct exporter *x, uint64_t seq, char *path, char *mem, size_t size);
void queue_pump(struct exporter *x);
/* Drop the oldest records of every queue while the spool is past its bound. */
void queue_bound(void);
cJSON *queue_describe(const struct exporter *x);
void queue_shutdown(struct exporter *x);

/* export.c's settings, for the others. */
uint64_t export_spool_bytes(void);
void export_spool_add(int64_t delta);
uint64_t export_spool_max(void);
uint64_t export_timeout_ns(void);
const char *export_spool_dir(void);
struct ev_loop *export_ev_loop(void);
