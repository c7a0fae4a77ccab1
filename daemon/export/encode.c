/* encode.c: a window's profile as each backend takes it (worker thread), spooled.
 *
 * - Sentry: an envelope of profile_chunk items (version 2, formats.md), one per minute of
 *   the window with samples (a window is at most the interval, 60 s: one chunk), sharing the
 *   attach's profiler_id; the record's id is the first chunk's chunk_id.
 * - Pyroscope: the window's pprof (gzipped), its query naming the service and its labels.
 * - OTLP: an ExportProfilesServiceRequest, its resource the process and the host.
 * A window without samples sends nothing (relay rejects an empty chunk). Each record's
 * header says what the send needs: the content type, the id, the window (real time, ns),
 * the samples. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_internal.h"
#include "log.h"
#include "profile.h"
#include "proto.h"
#include "slice.h"
#include "spool.h"
#include "util.h"

/* The spool's order, across windows (worker thread only). */
static uint64_t last_seq;

static uint64_t next_seq(void)
{
    uint64_t s = realtime_ns();
    last_seq = s > last_seq ? s : last_seq + 1;
    return last_seq;
}

/* A record: header (content type, id, window, samples, and extra fields) and body. */
void export_emit(struct export_window *w, enum exporter_kind ex, const char *type,
                 const char *id, cJSON *extra, const void *body, size_t len)
{
    cJSON *h = extra ? extra : cJSON_CreateObject();
    cJSON_AddStringToObject(h, "content_type", type);
    cJSON_AddStringToObject(h, "id", id);
    cJSON_AddStringToObject(h, "window", w->window);
    cJSON_AddNumberToObject(h, "samples", (double)w->samples);
    cJSON_AddNumberToObject(h, "pid", w->pid);
    cJSON_AddStringToObject(h, "service", w->service);
    char *header = json_print(h);
    cJSON_Delete(h);
    struct export_out *o = &w->out[w->nout];
    o->ex = ex;
    o->seq = next_seq();
    int err = 0;
    if (w->spool_dir)
        o->path = spool_write(w->spool_dir, o->seq, exporters_name(ex), header, body, len, &err);
    if (o->path) {
        o->size = strlen(header) + 1 + len;
    } else {
        if (w->spool_dir)
            log_warn("export: cannot spool a profile in %s: %s: kept in memory", w->spool_dir,
                     strerror(-err));
        size_t hl = strlen(header);
        o->mem = xmalloc(hl + 1 + len);
        memcpy(o->mem, header, hl);
        o->mem[hl] = '\n';
        memcpy(o->mem + hl + 1, body, len);
        o->size = hl + 1 + len;
    }
    free(header);
    w->nout++;
}

static void sentry(struct export_window *w, const struct profile *p)
{
    struct profile sub = *p;
    sub.profiler_id = w->profiler_id;
    cJSON *chunks = profile_to_sentry_chunks(&sub);
    if (!chunks) {
        w->err = -ENOMEM;
        return;
    }
    struct strbuf env = {0};
    strbuf_puts(&env, "{\"sdk\":{\"name\":\"profd\",\"version\":\"" PROFD_VERSION "\"}}\n");
    char id[33] = "";
    cJSON *c;
    cJSON_ArrayForEach(c, chunks) {
        const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "chunk_id");
        const cJSON *plat = cJSON_GetObjectItemCaseSensitive(c, "platform");
        if (!id[0] && cJSON_IsString(cid))
            snprintf(id, sizeof(id), "%s", cid->valuestring);
        char *payload = json_print(c);
        strbuf_printf(&env, "{\"type\":\"profile_chunk\",\"platform\":\"%s\",\"length\":%zu}\n",
                      cJSON_IsString(plat) ? plat->valuestring : "native", strlen(payload));
        strbuf_puts(&env, payload);
        strbuf_puts(&env, "\n");
        free(payload);
    }
    if (id[0])
        export_emit_gzip(w, EX_SENTRY, "application/x-sentry-envelope", id, env.buf, env.len);
    strbuf_finish(&env);
    cJSON_Delete(chunks);
}

/* A body sent gzipped (Content-Encoding: gzip, which relay and the OpenTelemetry collector
 * take): a window's Sentry chunk or OTLP request shrinks several times, on the wire and in
 * the spool. */
void export_emit_gzip(struct export_window *w, enum exporter_kind ex, const char *type,
                      const char *id, const void *body, size_t len)
{
    struct strbuf gz = {0};
    int r = profile_gzip(body, len, 1, &gz);
    if (r < 0) {
        w->err = r;
    } else {
        cJSON *extra = cJSON_CreateObject();
        cJSON_AddStringToObject(extra, "content_encoding", "gzip");
        export_emit(w, ex, type, id, extra, gz.buf, gz.len);
    }
    strbuf_finish(&gz);
}

/* Pyroscope's name syntax has no quoting: its separators in a value become '_'. */
static void put_label(struct strbuf *sb, const char *key, const char *value, bool first)
{
    strbuf_printf(sb, "%s%s=", first ? "" : ",", key);
    for (const char *v = value; *v; v++)
        strbuf_append(sb, strchr("{},=\"", *v) ? "_" : v, 1);
}

static void percent_encode(struct strbuf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c))
            strbuf_append(out, &s[i], 1);
        else
            strbuf_printf(out, "%%%02X", c);
    }
}

static void pyroscope(struct export_window *w, const struct profile *p)
{
    struct strbuf body = {0}, name = {0}, query = {0};
    struct profile fast = *p;
    fast.gzip_level = 1;
    int r = profile_write_pprof(&fast, &body);
    if (r < 0) {
        w->err = r;
        strbuf_finish(&body);
        return;
    }
    strbuf_printf(&name, "%s{", w->service);
    put_label(&name, "service_name", w->service, true);
    put_label(&name, "hostname", w->host, false);
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)w->pid);
    put_label(&name, "pid", pid, false);
    for (size_t i = 0; i < w->nlabels; i++) {
        char *eq = strchr(w->labels[i], '=');
        char key[65];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - w->labels[i]), w->labels[i]);
        put_label(&name, key, eq + 1, false);
    }
    strbuf_puts(&name, "}");
    strbuf_puts(&query, "name=");
    percent_encode(&query, name.buf, name.len);
    strbuf_printf(&query, "&from=%" PRIu64 "&until=%" PRIu64 "&format=pprof&sampleRate=%u"
                  "&spyName=profd", w->from_rt / NS_PER_SEC,
                  (w->to_rt + NS_PER_SEC - 1) / NS_PER_SEC, p->hz);
    uint8_t raw[16];
    char id[33];
    r = profile_random_id(raw, id);
    if (r < 0) {
        w->err = r;
    } else {
        cJSON *extra = cJSON_CreateObject();
        cJSON_AddStringToObject(extra, "query", query.buf);
        export_emit(w, EX_PYROSCOPE, "multipart/form-data", id, extra, body.buf, body.len);
    }
    strbuf_finish(&body);
    strbuf_finish(&name);
    strbuf_finish(&query);
}

void export_encode(struct slice_job *job, const struct profile *p)
{
    struct export_window *w = job->ctx;
    w->samples = p->nsamples;
    if (!p->nsamples)
        return;
    w->from_rt = (uint64_t)((int64_t)w->from_ns + p->realtime_offset_ns);
    w->to_rt = (uint64_t)((int64_t)w->to_ns + p->realtime_offset_ns);
    snprintf(w->window, sizeof(w->window), "%" PRIu64 "-%" PRIu64, w->from_rt, w->to_rt);
    if (w->want[EX_SENTRY])
        sentry(w, p);
    if (w->want[EX_PYROSCOPE] && !w->err)
        pyroscope(w, p);
    if (w->want[EX_OTLP] && !w->err)
        export_encode_otlp(w, p);
}
