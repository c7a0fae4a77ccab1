/* export.h: profiles leave the host. Every attached process's samples are exported in
 * windows of the export interval, back to back from its attach to its detach or exit (no
 * gap, no overlap: each window begins 1 ns after the last one ended), symbolized and encoded
 * on the worker thread, spooled (spool.h) and sent from the loop (http.h) to each backend
 * configured: Sentry (envelopes of profile chunks), Pyroscope (/ingest of pprof) and an
 * OpenTelemetry collector (OTLP profiles), retried as retry.h says until they are taken.
 * daemon/DESIGN.md, "Export", says more. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <ev.h>

struct target;

struct export_config {
    const char *sentry_dsn;    /* NULL: no Sentry exporter */
    const char *pyroscope_url; /* NULL: none */
    const char *otlp_url;      /* NULL: none */
    uint64_t interval_ns;
    uint64_t timeout_ns;       /* of one request */
    const char *spool_dir;
    uint64_t spool_max;        /* bytes; 0: no bound */
};

/* Labels a process's profiles carry: at most EXPORT_MAX_LABELS, KEY=VALUE. */
#define EXPORT_MAX_LABELS 16

/* Set up the exporters c names (none: export stays off), read the spool and begin sending
 * what it holds. Returns 0, or -errno with why. */
int export_init(struct ev_loop *loop, const struct export_config *c, char *why, size_t whylen);
/* Is any exporter configured? */
bool export_enabled(void);
/* t was attached: export it (unless off) as service (NULL: its systemd unit, else its
 * executable's name) with labels ("KEY=VALUE", copied). */
void export_attached(struct target *t, const char *service, char *const *labels,
                     size_t nlabels, bool off);
/* t samples no more (detach, exit): its last window, up to its end, goes now. */
void export_target_stopped(struct target *t);
/* The Sentry profiler_id of t's attach (32 hex digits), or NULL when it is not exported. */
const char *export_profiler_id(const struct target *t);
/* A label's check: KEY=VALUE, KEY a letter or '_' then letters, digits or '_' (at most 64),
 * VALUE printable (at most 256 bytes). */
bool export_label_ok(const char *kv);
/* status: "daemon.export" (NULL when export is off), and a target's "export". */
cJSON *export_describe(void);
cJSON *export_describe_target(const struct target *t);
/* Shutdown: every target's last window encoded and spooled (waiting at most timeout_ns for
 * the worker), then the sends abandoned (what was not sent stays in the spool). */
void export_shutdown(uint64_t timeout_ns);
