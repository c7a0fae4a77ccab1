/* ctl.c: what profctl's commands share: the connection to profd and its requests, errors
 * and exit statuses, reading replies, and writing a slice's profile and summary. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "profctl.h"
#include "proto.h"
#include "util.h"

#define TIMEOUT_MS 60000

const char *socket_opt;
const char *socket_path;

void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("profctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

int connect_daemon(void)
{
    char *path = profd_client_socket_path(socket_opt);
    if (!path)
        die(EXIT_FAIL, "out of memory");
    socket_path = path; /* kept until exit */
    int fd = proto_connect(socket_path);
    if (fd < 0)
        die(EXIT_NO_DAEMON, "cannot connect to profd at %s: %s (is profd running?)", socket_path,
            strerror(-fd));
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "hello");
    cJSON_AddNumberToObject(req, "version", PROTO_VERSION);
    cJSON_AddStringToObject(req, "client", "profctl " PROFD_VERSION);
    cJSON *reply;
    int r = proto_call(fd, req, &reply, TIMEOUT_MS);
    cJSON_Delete(req);
    if (r < 0)
        die(EXIT_NO_DAEMON, "no answer from profd at %s: %s", socket_path, strerror(-r));
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
    if (err) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
        die(EXIT_FAIL, "profd refused the connection: %s",
            cJSON_IsString(m) ? m->valuestring : "?");
    }
    cJSON_Delete(reply);
    return fd;
}

const cJSON *try_call(int fd, cJSON *req, cJSON **reply, const char **code, const char **msg)
{
    int r = proto_call(fd, req, reply, TIMEOUT_MS);
    cJSON_Delete(req);
    if (r < 0)
        die(EXIT_FAIL, "lost the connection to profd at %s: %s", socket_path, strerror(-r));
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(*reply, "error");
    if (err) {
        *code = str(err, "code");
        *msg = str(err, "message");
        return NULL;
    }
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(*reply, "result");
    if (!res)
        die(EXIT_FAIL, "malformed reply from profd");
    return res;
}

/* End profctl for profd's error code c, with its message, and the matching exit status. */
static void die_for(const char *c, const char *msg) __attribute__((noreturn));
static void die_for(const char *c, const char *msg)
{
    int ec = EXIT_FAIL;
    if (!strcmp(c, "no_such_process"))
        ec = EXIT_NO_PROCESS;
    else if (!strcmp(c, "permission_denied"))
        ec = EXIT_DENIED;
    else if (!strcmp(c, "not_attached"))
        ec = EXIT_NOT_ATTACHED;
    die(ec, "%s", *msg ? msg : c);
}

const cJSON *call(int fd, cJSON *req, cJSON **reply)
{
    const char *c, *msg;
    const cJSON *res = try_call(fd, req, reply, &c, &msg);
    if (!res)
        die_for(c, msg);
    return res;
}

bool attach_unless_attached(int fd, pid_t pid, uint64_t hz, const char *mode,
                            const char *sampler)
{
    cJSON *reply;
    const char *c, *msg;
    bool here = try_call(fd, attach_request(pid, hz, 0, mode, sampler), &reply, &c, &msg);
    if (!here && strcmp(c, "already_attached"))
        die_for(c, msg);
    cJSON_Delete(reply);
    return here;
}

double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

pid_t parse_pid(const char *s)
{
    int pid;
    if (!s || parse_int(s, &pid) < 0 || pid <= 0)
        die(EXIT_USAGE, "not a process id: \"%s\"", s ? s : "");
    return pid;
}

cJSON *attach_request(pid_t pid, uint64_t hz, uint64_t buffer_s, const char *mode,
                      const char *sampler)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "attach");
    cJSON_AddNumberToObject(req, "pid", pid);
    if (hz)
        cJSON_AddNumberToObject(req, "hz", (double)hz);
    if (buffer_s)
        cJSON_AddNumberToObject(req, "buffer_s", (double)buffer_s);
    if (mode)
        cJSON_AddStringToObject(req, "mode", mode);
    if (sampler)
        cJSON_AddStringToObject(req, "sampler", sampler);
    return req;
}

/* Where the time went, from the reply's summary: the top functions by self samples. */
static void print_summary(const cJSON *res, unsigned top)
{
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(res, "summary");
    const cJSON *fns = cJSON_GetObjectItemCaseSensitive(sum, "functions");
    double total = num(sum, "samples");
    if (!top || total <= 0 || !cJSON_GetArraySize(fns))
        return;
    fprintf(stderr, "  top functions by samples (self):\n");
    unsigned i = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, fns) {
        if (i++ == top || num(f, "self") <= 0)
            break;
        fprintf(stderr, "  %6.1f%%  %8.0f  %s\n", 100.0 * num(f, "self") / total, num(f, "self"),
                str(f, "name"));
    }
}

/* The format an output file's name asks for, or NULL: FILE.folded (or .collapsed),
 * FILE.json (Sentry), FILE.chunks.json (Sentry chunks), FILE.pb.gz (pprof),
 * FILE.speedscope.json, FILE.svg. */
const char *format_of(const char *path)
{
    static const struct { const char *ext, *format; } exts[] = {
        {".speedscope.json", "speedscope"}, {".chunks.json", "sentry-chunks"},
        {".pb.gz", "pprof"}, {".pprof", "pprof"}, {".svg", "flamegraph"},
        {".folded", "collapsed"}, {".collapsed", "collapsed"}, {".json", "sentry"}};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
        size_t e = strlen(exts[i].ext);
        if (n > e && !strcmp(path + n - e, exts[i].ext))
            return exts[i].format;
    }
    return NULL;
}

bool valid_format(const char *f)
{
    static const char *const formats[] = {"collapsed", "sentry", "sentry-chunks", "pprof",
                                          "speedscope", "flamegraph", "svg", "folded"};
    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
        if (!strcmp(f, formats[i]))
            return true;
    return false;
}

void write_slice(const cJSON *res, pid_t pid, const char *out, unsigned top)
{
    const cJSON *profile = cJSON_GetObjectItemCaseSensitive(res, "profile");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(res, "data");
    struct strbuf bytes = {0};
    bool binary = !strcmp(str(res, "encoding"), "base64");
    if (profile) {
        char *text = cJSON_Print(profile);
        if (!text || strbuf_puts(&bytes, text) < 0)
            die(EXIT_FAIL, "out of memory");
        free(text);
    } else if (cJSON_IsString(data) && binary) {
        if (base64_decode(data->valuestring, &bytes) < 0)
            die(EXIT_FAIL, "malformed reply from profd: bad base64 data");
    } else if (cJSON_IsString(data)) {
        if (strbuf_puts(&bytes, data->valuestring) < 0)
            die(EXIT_FAIL, "out of memory");
    } else {
        die(EXIT_FAIL, "malformed reply from profd: no profile");
    }
    FILE *f = stdout;
    if (out && strcmp(out, "-")) {
        f = fopen(out, "w");
        if (!f)
            die(EXIT_FAIL, "cannot write %s: %s", out, strerror(errno));
    } else if (binary && isatty(STDOUT_FILENO)) {
        die(EXIT_USAGE, "the %s format is binary: write it to a file with -o FILE",
            str(res, "format"));
    }
    size_t len = bytes.len;
    if ((len && fwrite(bytes.buf, 1, len, f) != len) || (profile && fputc('\n', f) == EOF) ||
        (f != stdout ? fclose(f) : fflush(f)) != 0)
        die(EXIT_FAIL, "cannot write %s: %s", out ? out : "standard output", strerror(errno));
    double samples = num(res, "samples"), trunc = num(res, "truncated_samples");
    double dur = (num(res, "end_ns") - num(res, "start_ns")) / 1e9;
    fprintf(stderr,
            "profctl: %.0f samples of %d threads of %d over %.2f s (%.2f%% of stacks "
            "truncated), %s format%s%s\n",
            samples, (int)num(res, "threads"), pid, dur, samples ? 100 * trunc / samples : 0,
            str(res, "format"), out && strcmp(out, "-") ? ", written to " : "",
            out && strcmp(out, "-") ? out : "");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(res, "sampling");
    if (m) {
        bool cpu = !strcmp(str(m, "mode"), "cputime");
        fprintf(stderr, "profctl: sampled %s at %d Hz%s%s (sampler %s); now %.1f Hz effective%s, "
                        "%.0f ticks missed since attach\n",
                str(m, "mode"), (int)num(m, "hz"), cpu ? " of CPU time, source " : "",
                cpu ? str(m, "cputime_source") : "", str(m, "sampler"), num(m, "effective_hz"),
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "throttled"))
                    ? " (throttled by the CPU budget)"
                    : "",
                num(m, "missed"));
    }
    /* Which path took the samples (the kernel's copy of a running thread, a blocked one read
     * from /proc, a ptrace stop, an idle thread's last stack). */
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(res, "summary");
    const cJSON *paths = sum ? cJSON_GetObjectItemCaseSensitive(sum, "paths") : NULL;
    if (cJSON_IsObject(paths)) {
        fprintf(stderr, "profctl: samples by path:");
        const cJSON *x;
        cJSON_ArrayForEach(x, paths)
            fprintf(stderr, "%s %s %.0f", x == paths->child ? "" : ",", x->string, x->valuedouble);
        fputc('\n', stderr);
    }
    const char *why = str(res, "symbols_error");
    if (*why)
        fprintf(stderr, "profctl: warning: some frames are not symbolized (shown as "
                        "[module+0xOFFSET]): %s\n", why);
    print_summary(res, top);
    strbuf_finish(&bytes);
}
