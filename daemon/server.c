/* server.c: accept clients on the Unix socket, read framed requests, write replies.
 * A client that misbehaves (oversized, truncated, or never reading) is dropped alone. */
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "memory.h"
#include "util.h"
#include "worker.h"

#define MAX_CLIENTS 1024
/* A client with this much unread output gets no more requests processed until it reads:
 * a client that never reads cannot grow the daemon's memory. */
#define OUT_HIGH_WATER (1u << 20)
/* ... and past profd's max_memory (memory.h), already with this much. */
#define OUT_SOFT_WATER (64u << 10)
/* A client that leaves output unread this long is dropped (it may have stopped reading). */
#define STALL_TIMEOUT 30.0

struct server_config server_cfg;
int (*server_reload)(char *err, size_t errlen);
uint64_t server_start_ns;
static struct server_handlers handlers;

void server_init(const struct server_handlers *h)
{
    handlers = *h;
}

static struct ev_loop *loop;
static int listen_fd = -1;
static ev_io accept_io;
static ev_timer accept_backoff;
static struct client *clients;
static struct client *dead_clients; /* closed, freed in on_check (callbacks may still hold them) */
static ev_check reaper;
static size_t nclients;
static uint64_t next_id = 1;
static uint64_t nrefused;
/* Kept open to be given up when accept finds the descriptors used up: then the connection
 * is taken, told why, and closed, instead of waiting in the backlog for a reply that does
 * not come (a client library would time out not knowing why). */
static int spare_fd = -1;
static char *socket_path;

static void client_close(struct client *c);
static void on_read(struct ev_loop *l, ev_io *w, int revents);

struct ev_loop *server_loop(void)
{
    return loop;
}

size_t server_client_count(void)
{
    return nclients;
}

uint64_t server_refused_count(void)
{
    return nrefused;
}

/* A request set aside is kept parsed: counted at a nominal size (its text is gone). */
#define DEFERRED_BYTES 1024

size_t server_memory(void)
{
    size_t m = 0;
    for (const struct client *c = clients; c; c = c->next)
        m += sizeof(*c) + c->in.in.cap + c->out.cap + c->ndeferred * DEFERRED_BYTES;
    return m;
}

/* Tell a connection we will not serve why, in one error frame (best effort: a socket just
 * accepted has room for it), and close it. */
static void refuse(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(int fd, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    nrefused++;
    cJSON *r = proto_error_reply(NULL, PE_LIMIT, "%s", msg);
    char *s = r ? json_print(r) : NULL;
    struct strbuf out = {0};
    if (s && frame_encode(&out, s, strlen(s)) == 0)
        (void)!send(fd, out.buf, out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    strbuf_finish(&out);
    free(s);
    cJSON_Delete(r);
    close(fd);
}

/* The descriptors are used up (EMFILE, which accept returns before it looks for a
 * connection): take the next connection with the spare one and refuse it. Returns 1 if one
 * was refused (accepting goes on), 0 if none was waiting, -1 if there is no spare. */
static int refuse_with_spare(int err)
{
    if (spare_fd < 0)
        return -1;
    close(spare_fd);
    spare_fd = -1;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int e = errno;
    if (fd >= 0) {
        static uint64_t last_ns;
        uint64_t now = now_ns();
        if (now - last_ns > NS_PER_SEC) {
            last_ns = now;
            log_warn("accept: %s: refusing connections until descriptors are free",
                     strerror(err));
        }
        refuse(fd, "profd is out of file descriptors (%s): try again later", strerror(err));
    }
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (spare_fd < 0)
        return -1; /* another thread took it meanwhile */
    if (fd >= 0)
        return 1;
    return e == EAGAIN || e == EWOULDBLOCK ? 0 : -1;
}

/* Let go of c's output buffer. A large one is most likely a reply the slice worker encoded:
 * freed here, glibc would return it to that thread's arena and could then trim the arena's
 * free space from the loop thread (measured: madvise(MADV_DONTNEED) of 9 and 22 MB, 1.5 ms
 * each, while ticks waited). The worker frees it instead. */
#define OUT_FREE_ON_WORKER (64 * 1024)

static void out_release(struct client *c)
{
    void *buf = c->out.buf;
    bool large = c->out.cap >= OUT_FREE_ON_WORKER;
    c->out = (struct strbuf){0};
    c->out_off = 0;
    if (large)
        worker_free_later(buf);
    else
        free(buf);
}

/* Most bytes written to one client per call of flush: a client reading as fast as profd
 * writes would otherwise keep the loop thread in send() for a whole large reply (a Sentry
 * profile of many megabytes: milliseconds, ticks of every target late). The rest goes at
 * the write watcher's next event, after the other watchers' events. */
#define FLUSH_MAX_BYTES (256 * 1024)

/* Write what we can; arm the write watcher only while output is pending. */
static void flush(struct client *c)
{
    size_t sent = 0;
    while (c->out_off < c->out.len && sent < FLUSH_MAX_BYTES) {
        size_t len = c->out.len - c->out_off;
        ssize_t n = send(c->fd, c->out.buf + c->out_off,
                         len < FLUSH_MAX_BYTES - sent ? len : FLUSH_MAX_BYTES - sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            log_debug("client %" PRIu64 ": write: %s", c->id, strerror(errno));
            client_close(c);
            return;
        }
        c->out_off += (size_t)n;
        sent += (size_t)n;
        ev_timer_again(loop, &c->stall);
    }
    if (c->out_off == c->out.len) {
        c->out.len = 0;
        c->out_off = 0;
        ev_io_stop(loop, &c->wio);
        ev_timer_stop(loop, &c->stall);
        if (c->closing) {
            client_close(c);
            return;
        }
        if (c->out.cap > 1 << 20) {
            /* Do not keep a large reply's buffer around. */
            out_release(c);
        }
    } else {
        ev_io_start(loop, &c->wio);
        if (!ev_is_active(&c->stall))
            ev_timer_again(loop, &c->stall);
    }
}

void client_send(struct client *c, cJSON *reply)
{
    char *s = json_print(reply);
    cJSON_Delete(reply);
    if (!s || frame_encode(&c->out, s, strlen(s)) < 0) {
        log_err("client %" PRIu64 ": reply could not be encoded", c->id);
        free(s);
        client_close(c);
        return;
    }
    free(s);
    flush(c);
}

/* Reply with an error and close the connection once it is written: used when the stream
 * can no longer be trusted (oversized frame, failed handshake). */
static void fail_and_close(struct client *c, enum proto_error code, const char *msg)
{
    log_debug("client %" PRIu64 " (pid %d): %s", c->id, c->peer.pid, msg);
    c->closing = true;
    ev_io_stop(loop, &c->rio);
    client_send(c, proto_error_reply(NULL, code, "%s", msg));
}

/* A request that asks for no reply (txn_start, txn_discard with "noreply"): handled even
 * while the connection waits for an earlier request's reply, which it cannot delay. */
static bool is_noreply(const cJSON *req)
{
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "noreply")) &&
           cJSON_IsString(cmd) &&
           (!strcmp(cmd->valuestring, "txn_start") || !strcmp(cmd->valuestring, "txn_discard"));
}

/* Answer one request, parsed from a complete frame (NULL: it did not parse); req is
 * freed. */
static void handle(struct client *c, cJSON *req)
{
    if (!req || !cJSON_IsObject(req)) {
        cJSON_Delete(req);
        client_send(c, proto_error_reply(NULL, PE_BAD_REQUEST, "request is not a JSON object"));
        return;
    }
    cJSON *reply = handlers.dispatch(c, req);
    cJSON_Delete(req);
    if (reply)
        client_send(c, reply);
}

/* Has c so much unread output that its next requests must wait (resuming: may they be read
 * again, with some hysteresis)? */
static bool output_full(const struct client *c, bool resuming)
{
    size_t pending = c->out.len - c->out_off, div = resuming ? 2 : 1;
    if (pending >= OUT_HIGH_WATER / div)
        return true;
    /* Past max_memory a client that does not read gets much less room. */
    return pending >= OUT_SOFT_WATER / div && memory_over();
}

/* Most requests with replies held back while one is pending; past them, reading stops. */
#define MAX_DEFERRED 16

/* Parse and answer every complete request in the buffer. While a reply is pending,
 * requests without replies are handled at once, and up to MAX_DEFERRED others are set
 * aside, to be answered in order once the reply is out: a request waiting for its turn
 * does not hold up the transaction starts sent after it. */
static void process(struct client *c)
{
    while (!c->closing && !c->dead) {
        if (output_full(c, false)) {
            c->throttled = true;
            ev_io_stop(loop, &c->rio);
            return;
        }
        if (!c->pending && c->deferred) {
            struct deferred *d = c->deferred;
            c->deferred = d->next;
            if (!c->deferred)
                c->deferred_tail = NULL;
            c->ndeferred--;
            handle(c, d->req);
            free(d);
            continue;
        }
        const char *payload;
        size_t len;
        int r = frame_reader_next(&c->in, &payload, &len);
        if (r == 0)
            return;
        if (c->pending && r > 0) {
            cJSON *req = cJSON_ParseWithLength(payload, len);
            bool now = req && c->handshaken && is_noreply(req);
            if (now) {
                cJSON *reply = handlers.dispatch(c, req); /* only an error about "id" */
                if (reply)
                    client_send(c, reply);
            }
            if (now) {
                cJSON_Delete(req);
                continue;
            }
            if (c->ndeferred < MAX_DEFERRED) {
                struct deferred *d = xmalloc(sizeof(*d));
                d->req = req; /* answered, in order, once the reply is out */
                d->next = NULL;
                if (c->deferred_tail)
                    c->deferred_tail->next = d;
                else
                    c->deferred = d;
                c->deferred_tail = d;
                c->ndeferred++;
                continue;
            }
            cJSON_Delete(req);
            frame_reader_unread(&c->in, len);
            ev_io_stop(loop, &c->rio);
            return;
        }
        if (c->pending) {
            /* A broken frame: reported in order, after the pending reply. */
            ev_io_stop(loop, &c->rio);
            return;
        }
        if (r == -EMSGSIZE) {
            fail_and_close(c, PE_TOO_LARGE, "request larger than 1 MiB");
            return;
        }
        if (r < 0) {
            fail_and_close(c, PE_BAD_REQUEST, "empty frame");
            return;
        }
        handle(c, cJSON_ParseWithLength(payload, len));
    }
}

/* The client closed its side: once every request is answered (none pending or set aside,
 * and the complete ones in the buffer handled), close when the output is written. */
static void finish_at_eof(struct client *c)
{
    ev_io_stop(loop, &c->rio);
    if (c->pending || c->deferred || c->throttled)
        return; /* pending_finish (or on_write) brings us back here through on_read */
    if (c->out.len > c->out_off)
        c->closing = true;
    else
        client_close(c);
}

static void on_read(struct ev_loop *l, ev_io *w, int revents)
{
    (void)l, (void)revents;
    struct client *c = w->data;
    if (c->eof) {
        /* Its end was read while a reply was pending: answer what is left, then close. */
        process(c);
        if (!c->dead)
            finish_at_eof(c);
        return;
    }
    bool drained = false;
    for (;;) {
        ssize_t n = frame_reader_fill(&c->in, c->fd);
        if (n == -EAGAIN || n == -EWOULDBLOCK || n == -ENOBUFS) {
            drained = true;
            break;
        }
        if (n < 0) {
            log_debug("client %" PRIu64 ": read: %s", c->id, strerror((int)-n));
            client_close(c);
            return;
        }
        if (n == 0) {
            if (frame_reader_pending(&c->in))
                log_debug("client %" PRIu64 ": connection closed inside a frame", c->id);
            /* Answer what arrived complete, then close. */
            c->eof = true;
            process(c);
            if (!c->dead)
                finish_at_eof(c);
            return;
        }
        process(c);
        if (c->closing || c->dead || !ev_is_active(&c->rio))
            break;
    }
    if (drained)
        process(c);
    /* Nothing left unread: give back the read buffer (an idle client holds none). */
    if (!c->dead)
        frame_reader_trim(&c->in);
}

static void on_write(struct ev_loop *l, ev_io *w, int revents)
{
    (void)l, (void)revents;
    struct client *c = w->data;
    flush(c);
    if (!c->dead && c->throttled && !output_full(c, true)) {
        c->throttled = false;
        if (!c->pending && !c->closing) {
            ev_io_start(loop, &c->rio);
            process(c);
        }
    }
}

static void on_stall(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)revents;
    struct client *c = w->data;
    log_warn("client %" PRIu64 " (pid %d) has not read its reply for %.0f s: dropped", c->id,
             c->peer.pid, STALL_TIMEOUT);
    client_close(c);
}

static void client_close(struct client *c)
{
    if (c->dead)
        return;
    for (struct client **p = &clients; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    nclients--;
    if (c->pending)
        c->pending->client = NULL;
    /* An application that went away (or crashed) ends its open transactions. */
    handlers.client_gone(c->id, now_ns());
    ev_io_stop(loop, &c->rio);
    ev_io_stop(loop, &c->wio);
    ev_timer_stop(loop, &c->stall);
    close(c->fd);
    c->fd = -1;
    c->dead = true;
    c->next = dead_clients;
    dead_clients = c;
    if (listen_fd >= 0 && !ev_is_active(&accept_io) && !ev_is_active(&accept_backoff))
        ev_io_start(loop, &accept_io);
}

/* After each loop iteration: free clients closed during it. */
static void on_check(struct ev_loop *l, ev_check *w, int revents)
{
    (void)l, (void)w, (void)revents;
    while (dead_clients) {
        struct client *c = dead_clients;
        dead_clients = c->next;
        frame_reader_finish(&c->in);
        out_release(c);
        while (c->deferred) {
            struct deferred *d = c->deferred;
            c->deferred = d->next;
            cJSON_Delete(d->req);
            free(d);
        }
        free(c->peer.groups);
        free(c);
    }
}

/* Queue a reply already encoded (a frame): its buffer is taken over when nothing else is
 * waiting to be written, so a reply of any size costs nothing to queue. */
static void client_send_frame(struct client *c, struct strbuf *frame)
{
    if (c->out_off == c->out.len) {
        out_release(c);
        c->out = *frame;
        c->out_off = 0;
        memset(frame, 0, sizeof(*frame));
    } else if (strbuf_append(&c->out, frame->buf, frame->len) < 0) {
        log_err("client %" PRIu64 ": reply could not be queued", c->id);
        client_close(c);
        return;
    }
    flush(c);
}

static void pending_resume(struct client *c);

void pending_finish(struct pending *p, cJSON *reply)
{
    struct client *c = p->client;
    if (c) {
        if (p->id)
            cJSON_AddItemToObject(reply, "id", cJSON_Duplicate(p->id, 1));
        c->pending = NULL;
        client_send(c, reply);
    } else {
        cJSON_Delete(reply);
    }
    cJSON_Delete(p->id);
    free(p);
    pending_resume(c);
}

void pending_finish_frame(struct pending *p, struct strbuf *frame)
{
    struct client *c = p->client;
    if (c) {
        c->pending = NULL;
        client_send_frame(c, frame);
    }
    cJSON_Delete(p->id);
    free(p);
    pending_resume(c);
}

/* After a pending request's reply: carry on with the client's next requests. */
static void pending_resume(struct client *c)
{
    if (!c || c->dead)
        return;
    if (c->closing) {
        if (c->out.len == c->out_off)
            client_close(c);
    } else if (!c->throttled) {
        /* Handle its next requests from the loop, not from here: this may run inside a
         * ptrace callback (a detach that completed), where a request (another detach, an
         * attach) must not change the targets under the caller's feet. */
        ev_io_start(loop, &c->rio);
        ev_feed_event(loop, &c->rio, EV_READ);
    }
}

static void on_backoff(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)w, (void)revents;
    ev_io_start(loop, &accept_io);
}

static void on_accept(struct ev_loop *l, ev_io *w, int revents)
{
    (void)l, (void)w, (void)revents;
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            int k = e == EMFILE ? refuse_with_spare(e) : -1;
            if (k > 0)
                continue;
            if (k == 0)
                return;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* Out of descriptors or memory (and no spare): stop accepting for a moment
                 * instead of spinning (the listening socket stays readable). */
                log_warn("accept: %s; pausing for 100 ms", strerror(e));
                ev_io_stop(loop, &accept_io);
                ev_timer_set(&accept_backoff, 0.1, 0);
                ev_timer_start(loop, &accept_backoff);
            }
            return;
        }
        if (nclients >= MAX_CLIENTS) {
            static uint64_t last_ns;
            uint64_t now = now_ns();
            if (now - last_ns > NS_PER_SEC) {
                last_ns = now;
                log_warn("too many clients (%d): refusing connections", MAX_CLIENTS);
            }
            refuse(fd, "profd serves %d clients already: try again later", MAX_CLIENTS);
            continue;
        }
        struct client *c = xcalloc(1, sizeof(*c));
        c->fd = fd;
        c->id = next_id++;
        c->accept_ns = now_ns();
        int pr = peer_from_socket(fd, &c->peer);
        if (pr < 0) {
            free(c);
            if (pr == -EMFILE || pr == -ENFILE || pr == -ENOMEM)
                refuse(fd, "profd cannot check who is connecting now: %s: try again later",
                       strerror(-pr));
            else
                close(fd); /* not a peer to answer (gone already) */
            continue;
        }
        peer_read_groups(fd, &c->peer);
        peer_check_groups(&c->peer, server_cfg.allow_groups, server_cfg.nallow_groups);
        frame_reader_init(&c->in, PROTO_MAX_REQUEST);
        ev_io_init(&c->rio, on_read, fd, EV_READ);
        ev_io_init(&c->wio, on_write, fd, EV_WRITE);
        ev_init(&c->stall, on_stall);
        c->stall.repeat = STALL_TIMEOUT;
        c->rio.data = c->wio.data = c->stall.data = c;
        ev_io_start(loop, &c->rio);
        c->next = clients;
        clients = c;
        nclients++;
        log_debug("client %" PRIu64 " connected: pid %d uid %u", c->id, c->peer.pid,
                  c->peer.uid);
    }
}

/* mkdir -p for the socket's directory. Directories it creates are 0755 whatever the umask:
 * other users must reach the socket (each request is checked on its own). */
static void make_parent(const char *path)
{
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1;; p++) {
            if (*p == '/' || !*p) {
                char c = *p;
                *p = '\0';
                /* A directory users cannot search hides the socket from them: say so. */
                if (mkdir(dir, 0755) == 0 && chmod(dir, 0755) < 0)
                    log_warn("cannot make %s reachable by every user (chmod 0755): %s", dir,
                             strerror(errno));
                *p = c;
                if (!c)
                    break;
            }
        }
    }
    free(dir);
}

void server_groups_changed(void)
{
    for (struct client *c = clients; c; c = c->next)
        peer_check_groups(&c->peer, server_cfg.allow_groups, server_cfg.nallow_groups);
}

/* Start accepting on a listening socket. */
static void start_accepting(void)
{
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ev_check_init(&reaper, on_check);
    ev_check_start(loop, &reaper);
    ev_io_init(&accept_io, on_accept, listen_fd, EV_READ);
    ev_init(&accept_backoff, on_backoff);
    ev_io_start(loop, &accept_io);
}

int server_listen_fd(struct ev_loop *l, int fd, const char *path)
{
    loop = l;
    int type = 0, acc = 0;
    socklen_t len = sizeof(type);
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &(socklen_t){sizeof(acc)}) < 0 ||
        !acc || getsockname(fd, (struct sockaddr *)&sa, &salen) < 0 ||
        sa.sun_family != AF_UNIX) {
        log_err("the socket passed by the service manager (fd %d) is not a listening Unix "
                "stream socket", fd);
        return -EINVAL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    listen_fd = fd;
    /* Its file belongs to the service manager (it outlives us): not ours to remove. */
    (void)path;
    start_accepting();
    return 0;
}

int server_listen(struct ev_loop *l, const char *path)
{
    loop = l;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_err("socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
    strcpy(sa.sun_path, path);
    make_parent(path);
    /* A live daemon on the path is not ours to replace; a stale socket file is. */
    int probe = proto_connect(path);
    if (probe >= 0) {
        close(probe);
        log_err("another profd is already listening on %s", path);
        return -EADDRINUSE;
    }
    unlink(path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0)
        return -errno;
    /* The socket file is made with its final permissions (no window where a wider umask
     * lets others connect before the chmod). */
    mode_t old_mask = umask(0777 & ~(mode_t)server_cfg.socket_mode);
    int b = bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old_mask);
    if (b < 0 || listen(listen_fd, SOMAXCONN) < 0) {
        int e = -errno;
        log_err("cannot listen on %s: %s", path, strerror(-e));
        close(listen_fd);
        listen_fd = -1;
        return e;
    }
    /* By default anyone may connect: every request is checked against the caller's
     * credentials (SO_PEERCRED), so users can profile their own processes and nothing
     * else. socket_group and socket_mode narrow who may connect at all. */
    if (server_cfg.socket_gid != (gid_t)-1 && chown(path, (uid_t)-1, server_cfg.socket_gid) < 0)
        log_warn("cannot give %s to group %u: %s", path, server_cfg.socket_gid,
                 strerror(errno));
    /* bind made it with its mode already (the umask above): the chmod only confirms it.
     * Should it fail, the socket is used only if its mode is the configured one, which is
     * part of who may connect. */
    if (chmod(path, server_cfg.socket_mode) < 0) {
        int e = -errno;
        struct stat st;
        if (stat(path, &st) < 0 || (st.st_mode & 07777) != server_cfg.socket_mode) {
            log_err("cannot give %s its mode %04o: %s", path, server_cfg.socket_mode,
                    strerror(-e));
            close(listen_fd);
            listen_fd = -1;
            unlink(path);
            return e;
        }
        log_warn("chmod %04o %s: %s (its mode is %04o already)", server_cfg.socket_mode, path,
                 strerror(-e), server_cfg.socket_mode);
    }
    socket_path = xstrdup(path);
    start_accepting();
    return 0;
}

void server_shutdown(void)
{
    if (listen_fd >= 0) {
        ev_io_stop(loop, &accept_io);
        ev_timer_stop(loop, &accept_backoff);
        close(listen_fd);
        listen_fd = -1;
    }
    if (spare_fd >= 0)
        close(spare_fd);
    spare_fd = -1;
    while (clients)
        client_close(clients);
    on_check(loop, &reaper, 0);
    ev_check_stop(loop, &reaper);
    if (socket_path) {
        unlink(socket_path);
        free(socket_path);
        socket_path = NULL;
    }
}
