/* profctl.h: what profctl's commands share (ctl.c), and the commands of their own files
 * (record.c, top.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

/* Exit codes, so scripts can tell failures apart. */
enum {
    EXIT_FAIL = 1,
    EXIT_USAGE = 2,
    EXIT_NO_DAEMON = 3,
    EXIT_NO_PROCESS = 4,
    EXIT_DENIED = 5,
    EXIT_NOT_ATTACHED = 6,
};

extern const char *socket_opt;  /* --socket */
extern const char *socket_path; /* the socket connect_daemon connected to */

void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Connect to profd and shake hands (dies if it cannot). */
int connect_daemon(void);
/* Send a request (freed); its "result" (the whole reply in *reply, for the caller to free).
 * An error from profd ends the program with one line and a matching exit code. */
const cJSON *call(int fd, cJSON *req, cJSON **reply);
/* As call, but an error is returned: its code ("no_such_process"...) in *code, NULL result. */
const cJSON *try_call(int fd, cJSON *req, cJSON **reply, const char **code, const char **msg);
double num(const cJSON *o, const char *k);
const char *str(const cJSON *o, const char *k);
pid_t parse_pid(const char *s);
/* Attach pid (0/NULL: profd's defaults); false if it was attached already. Any other error
 * ends profctl as call's do. */
bool attach_unless_attached(int fd, pid_t pid, uint64_t hz, const char *mode,
                            const char *sampler);
/* "attach" with the options given (0/NULL: profd's defaults). */
cJSON *attach_request(pid_t pid, uint64_t hz, uint64_t buffer_s, const char *mode,
                      const char *sampler);
/* A slice's reply: write its profile to out (NULL or "-": standard output), then say on
 * stderr what it holds, how it was sampled, and the top functions (top of them). */
void write_slice(const cJSON *res, pid_t pid, const char *out, unsigned top);
/* The format -o's name asks for, or NULL. */
const char *format_of(const char *path);
/* Whether --format's argument is a format. */
bool valid_format(const char *f);

/* profctl record, profctl top: argv after the command; 0 or an exit code. */
struct record_opts {
    uint64_t hz, duration_ns;
    const char *mode, *sampler, *format, *out;
    unsigned top;
};
int cmd_record(const struct record_opts *o, int argc, char **argv);
struct top_opts {
    uint64_t hz, window_ns, interval_ns;
    const char *mode, *sampler, *threads;
    bool sort_total, once;
};
int cmd_top(const struct top_opts *o, pid_t pid);
