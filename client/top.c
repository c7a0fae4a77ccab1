/* top.c: `profctl top PID`, as `py-spy top` and `perf top`: a live view of where a process
 * spends its time, refreshed every second from profd's samples of the last --window seconds
 * (the "summary" slice): functions by self or total share, the busiest threads, a thread
 * filter. Keys: s and t sort by self or total samples, f sets the thread filter (a thread id
 * or part of a name), a shows all threads again, q quits. It fits any terminal from 80x24
 * (over ssh too: plain ANSI, no colour needed), and leaves the terminal as it found it. The
 * process is attached if it was not (and detached on quit); with --once, or when standard
 * output is not a terminal, one view is printed and top exits. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "profctl.h"
#include "util.h"

struct view {
    const struct top_opts *o;
    pid_t pid;
    bool sort_total;
    char filter[128];
    bool editing;        /* typing a filter */
    char edit[128];
    size_t edit_len;
    int rows, cols;
};

static struct termios saved;
static bool raw_mode;
static volatile sig_atomic_t quit_sig, resized;

static void on_quit(int sig)
{
    quit_sig = sig;
}

static void on_winch(int sig)
{
    (void)sig;
    resized = 1;
}

static void restore_terminal(void)
{
    if (!raw_mode)
        return;
    /* Cursor back, main screen back, the terminal's modes back. */
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    raw_mode = false;
}

static void enter_raw(void)
{
    if (tcgetattr(STDIN_FILENO, &saved) < 0)
        die(EXIT_FAIL, "top needs a terminal: %s", strerror(errno));
    struct termios t = saved;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &t);
    raw_mode = true;
    atexit(restore_terminal);
    fputs("\033[?1049h\033[?25l", stdout);
}

static void term_size(struct view *v)
{
    struct winsize ws;
    v->rows = 24;
    v->cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        v->rows = ws.ws_row;
        v->cols = ws.ws_col;
    }
}

/* Append one line, cut to the terminal's width. */
static void line(struct strbuf *sb, const struct view *v, bool tty, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void line(struct strbuf *sb, const struct view *v, bool tty, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    /* Cut at cols characters (UTF-8 aware: continuation bytes do not count). */
    size_t i = 0;
    for (int c = 0; buf[i]; i++) {
        if (((unsigned char)buf[i] & 0xc0) != 0x80 && c++ == v->cols)
            break;
    }
    buf[i] = '\0';
    strbuf_puts(sb, buf);
    strbuf_puts(sb, tty ? "\033[K\r\n" : "\n");
}

static const cJSON *summary(int fd, const struct view *v, int limit, cJSON **reply,
                            const char **why)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "slice");
    cJSON_AddNumberToObject(req, "pid", v->pid);
    cJSON_AddStringToObject(req, "format", "summary");
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v->o->window_ns);
    cJSON_AddStringToObject(req, "last_ns", buf);
    cJSON_AddNumberToObject(req, "limit", limit > 0 ? limit : 1);
    cJSON_AddStringToObject(req, "sort", v->sort_total ? "total" : "self");
    if (v->filter[0])
        cJSON_AddStringToObject(req, "threads", v->filter);
    const char *code;
    const cJSON *res = try_call(fd, req, reply, &code, why);
    if (!res && !**why)
        *why = code;
    return res ? cJSON_GetObjectItemCaseSensitive(res, "profile") : NULL;
}

static const cJSON *target(int fd, pid_t pid, cJSON **reply)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "cmd", "status");
    cJSON_AddNumberToObject(req, "pid", pid);
    const char *code, *msg;
    const cJSON *res = try_call(fd, req, reply, &code, &msg);
    return res ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "targets"), 0) : NULL;
}

/* One view: the header, the functions, the threads, the keys. */
static void draw(int fd, struct view *v, bool tty)
{
    struct strbuf sb = {0};
    if (tty)
        strbuf_puts(&sb, "\033[H");
    cJSON *sreply = NULL, *treply = NULL;
    const cJSON *t = target(fd, v->pid, &treply);
    /* Rows: 3 of header, 1 of column titles, 2 of threads and keys at the bottom. */
    int fn_rows = (tty ? v->rows : 24) - 7;
    const char *why = "";
    const cJSON *sum = t ? summary(fd, v, fn_rows, &sreply, &why) : NULL;
    double total = num(sum, "samples");
    if (t) {
        line(&sb, v, tty, "profd top: %d (%s), %d threads, %s at %d Hz (%.1f achieved)", v->pid,
             str(t, "comm"), (int)num(t, "threads"), str(t, "mode"), (int)num(t, "hz"),
             num(t, "achieved_hz"));
        line(&sb, v, tty, "last %.0f s: %.0f samples%s%s%s; sorted by %s", (double)v->o->window_ns / 1e9,
             total, v->filter[0] ? " of threads matching \"" : "", v->filter,
             v->filter[0] ? "\"" : "", v->sort_total ? "total" : "self");
    } else {
        line(&sb, v, tty, "profd top: %d is not profiled any more (it exited?)", v->pid);
        line(&sb, v, tty, " ");
    }
    line(&sb, v, tty, "%s", *why ? why : " ");
    line(&sb, v, tty, "%7s %7s %8s %8s  %s", "SELF%", "TOTAL%", "SELF", "TOTAL", "FUNCTION");
    const cJSON *f;
    int shown = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(sum, "functions")) {
        if (shown++ == fn_rows)
            break;
        double s = num(f, "self"), tt = num(f, "total");
        line(&sb, v, tty, "%6.1f%% %6.1f%% %8.0f %8.0f  %s", total ? 100 * s / total : 0,
             total ? 100 * tt / total : 0, s, tt, str(f, "name"));
    }
    for (; tty && shown < fn_rows; shown++)
        line(&sb, v, tty, " ");
    /* The busiest threads, on one line. */
    char threads[512] = "threads:";
    size_t used = strlen(threads);
    const cJSON *th;
    cJSON_ArrayForEach(th, cJSON_GetObjectItemCaseSensitive(sum, "threads")) {
        int w = snprintf(threads + used, sizeof(threads) - used, "  %s (%d) %.0f%%",
                         str(th, "name"), (int)num(th, "tid"),
                         total ? 100 * num(th, "samples") / total : 0);
        if (w < 0 || (size_t)w >= sizeof(threads) - used)
            break;
        used += (size_t)w;
    }
    line(&sb, v, tty, "%s", threads);
    if (v->editing)
        line(&sb, v, tty, "thread filter (an id or part of a name, empty for all): %.*s_",
             (int)v->edit_len, v->edit);
    else if (tty)
        line(&sb, v, tty, "keys: s sort by self, t by total, f filter threads, a all threads, q quit");
    if (tty)
        strbuf_puts(&sb, "\033[J");
    fwrite(sb.buf, 1, sb.len, stdout);
    fflush(stdout);
    strbuf_finish(&sb);
    cJSON_Delete(sreply);
    cJSON_Delete(treply);
}

/* A key; false to quit. */
static bool key(struct view *v, unsigned char c)
{
    if (v->editing) {
        if (c == '\r' || c == '\n') {
            snprintf(v->filter, sizeof(v->filter), "%.*s", (int)v->edit_len, v->edit);
            v->editing = false;
        } else if (c == 27) { /* Escape */
            v->editing = false;
        } else if ((c == 127 || c == 8) && v->edit_len) {
            v->edit_len--;
        } else if (c >= 0x20 && c != 127 && v->edit_len < sizeof(v->edit) - 1) {
            v->edit[v->edit_len++] = (char)c;
        }
        return true;
    }
    switch (c) {
    case 'q':
    case 'Q':
        return false;
    case 's':
        v->sort_total = false;
        break;
    case 't':
        v->sort_total = true;
        break;
    case 'f':
        v->editing = true;
        v->edit_len = 0;
        break;
    case 'a':
        v->filter[0] = '\0';
        break;
    default:
        break;
    }
    return true;
}

int cmd_top(const struct top_opts *o, pid_t pid)
{
    int fd = connect_daemon();
    /* Without a terminal: the usual 24 rows, lines as long as they are. */
    struct view v = {.o = o, .pid = pid, .sort_total = o->sort_total, .rows = 24, .cols = 1000};
    if (o->threads)
        snprintf(v.filter, sizeof(v.filter), "%s", o->threads);
    /* Attach it unless it is already a target. */
    bool attached_here = attach_unless_attached(fd, pid, o->hz, o->mode, o->sampler);
    bool tty = !o->once && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
    if (!tty) {
        /* One view, after a window's worth of samples (at most --window). */
        struct timespec ts = {(time_t)(o->interval_ns / NS_PER_SEC),
                              (long)(o->interval_ns % NS_PER_SEC)};
        if (attached_here)
            nanosleep(&ts, NULL);
        draw(fd, &v, false);
    } else {
        struct sigaction sa = {.sa_handler = on_quit};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sa.sa_handler = on_winch;
        sigaction(SIGWINCH, &sa, NULL);
        enter_raw();
        term_size(&v);
        bool run = true;
        uint64_t next = 0;
        while (run && !quit_sig) {
            uint64_t now = now_ns();
            if (resized) {
                resized = 0;
                term_size(&v);
                next = 0;
            }
            if (now >= next) {
                draw(fd, &v, true);
                next = now + o->interval_ns;
            }
            struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
            int wait_ms = (int)((next > now ? next - now : 0) / NS_PER_MS) + 1;
            if (poll(&pfd, 1, wait_ms) > 0 && (pfd.revents & POLLIN)) {
                unsigned char keys[64];
                ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
                if (n == 0)
                    run = false; /* the terminal went away */
                for (ssize_t i = 0; i < n && run; i++)
                    run = key(&v, keys[i]);
                next = 0; /* show the change now */
            } else if (pfd.revents & (POLLHUP | POLLERR)) {
                run = false;
            }
        }
    }
    /* Detached before the terminal is given back: when the shell's prompt returns, nothing
     * top attached is still attached. */
    if (attached_here) {
        cJSON *reply;
        const char *code, *msg;
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "cmd", "detach");
        cJSON_AddNumberToObject(req, "pid", pid);
        try_call(fd, req, &reply, &code, &msg);
        cJSON_Delete(reply);
    }
    restore_terminal();
    close(fd);
    return 0;
}
