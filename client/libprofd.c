/* libprofd.c: the client library (see profd.h). No threads, no signals, no timers: one
 * connection per handle and process, opened on first use; the only global state is the
 * list of open handles, for the fork handler. */
#include "profd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "proto.h"
#include "util.h"

#define DEFAULT_START_MS 1000
#define DEFAULT_FINISH_MS 10000
#define GEN_LIMIT (1u << 21) /* ids stay below 2^53, exact in JSON numbers */

struct profd {
    pthread_mutex_t mu;
    char *path;
    int fd;          /* -1: not connected */
    pid_t owner;     /* the process fd belongs to (fork safety) */
    int start_ms, finish_ms;
    uint64_t next_id;  /* request ids */
    /* Transaction ids are chosen here, (gen << 32) | seq: gen changes with each connection,
     * so the id of a transaction the daemon lost with its connection (daemon restarted,
     * or the parent's, across fork) is known at once to be gone. */
    uint32_t gen, seq;
    bool stalled; /* a send found no room for start_ms: fail fast until there is room */
    /* Calls waiting for replies. One of them at a time reads the socket, without the lock
     * (so that starts, discards and other calls go on meanwhile), and hands each reply to
     * its caller; the others wait on cv. */
    pthread_cond_t cv;
    bool reading;
    int reading_fd;
    struct waiter *waiters;
    int dead_fd;  /* dropped while being read: the reader closes it when it returns */
    uint64_t conn; /* number of the current connection (waiters name theirs) */
    /* Replies received so far (a frame may arrive in parts over several readers). */
    struct frame_reader in;
    /* profd reads this process's thread context (a finish's reply said so): transactions
     * are published there, and only a finish that wants its profile sends a message. */
    _Atomic bool ctx_ok;
    struct ctx_txn *ctx_open; /* this handle's open ones (under mu) */
    struct profd *next; /* in the list of open handles */
};

/* ---- OpenTelemetry's thread context (the Thread Context OTEP) ----
 *
 * Each thread's pointer to its current record, exported (libprofd.map) for profd and any
 * other reader to find in .dynsym; an executable or a library loaded before this one that
 * defines it too interposes, and this library's accesses go to that one (TLSDESC). */
__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1;

/* The record, byte-packed as the OTEP lays it out: the transaction's name is attribute 0
 * (at most 255 bytes: cut at a character's start). */
#define CTX_NAME_MAX 255
struct __attribute__((packed)) ctx_record {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_size;
    uint8_t attrs[2 + CTX_NAME_MAX];
};

/* A transaction published in its thread's context. Its record stays where the thread's
 * pointer may point until the thread itself moves the pointer on: a transaction finished
 * by another thread is only marked invalid, and freed by its own thread later (or, if that
 * thread has exited, by the one that ends it). */
enum { CTX_OPEN, CTX_ENDED, CTX_ORPHAN };
struct ctx_txn {
    struct ctx_record rec __attribute__((aligned(8)));
    uint64_t id, start_ns;
    pid_t tid;
    _Atomic int state;         /* CTX_OPEN; CTX_ENDED (by any thread: its thread frees it);
                                  CTX_ORPHAN (its thread exited: its end frees it) */
    char name[513];
    struct ctx_txn *next_open; /* in its handle's list */
};

/* The calling thread's published transactions, oldest first; what its pointer held before
 * the first (another writer's record, or NULL), restored after the last; a few freed ones
 * kept for the next starts. */
#define CTX_STACK 64
#define CTX_SPARE 4
static __thread struct ctx_txn *ctx_stack[CTX_STACK];
static __thread int ctx_depth;
static __thread void *ctx_base;
static __thread struct ctx_txn *ctx_spare[CTX_SPARE];
static __thread int ctx_nspare;
static __thread pid_t ctx_tid; /* gettid(), cached (reset in a forked child) */
static __thread uint64_t ctx_rng;
static __thread bool ctx_keyed; /* the thread's exit frees what it holds (ctx_key) */
static pthread_key_t ctx_key;
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;

static pid_t cached_tid(void)
{
    if (!ctx_tid)
        ctx_tid = (pid_t)syscall(SYS_gettid);
    return ctx_tid;
}

/* 64 random bits: xorshift64*, seeded from getrandom once per thread. */
static uint64_t ctx_random(void)
{
    if (!ctx_rng && (getrandom(&ctx_rng, sizeof(ctx_rng), 0) != sizeof(ctx_rng) || !ctx_rng))
        ctx_rng = now_ns() ^ ((uint64_t)cached_tid() << 32) ^ 0x9e3779b97f4a7c15ull;
    ctx_rng ^= ctx_rng >> 12;
    ctx_rng ^= ctx_rng << 25;
    ctx_rng ^= ctx_rng >> 27;
    return ctx_rng * 2685821657736338717ull;
}

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool from_hex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0)
                return false;
            v = v << 4 | d;
        }
        out[i] = (uint8_t)v;
    }
    return !s[2 * n];
}

/* ---- the process context (OTEP 4719): the attributes' key names for readers ----
 *
 * A one-page mapping named OTEL_CTX (a memfd's, else anonymous and named): a header, then a
 * Resource (protobuf) whose threadlocal.attribute_key_map names attribute 0, the
 * transaction's name. Published once per process at its first transaction in the thread
 * context, unless the process has one already (an OpenTelemetry SDK's: a singleton); not
 * inherited across fork (a child publishes its own). */
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#define KEY_NAME "transaction.name"

static size_t pb_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A length-delimited field: its key and length before len bytes at body (copied). */
static size_t pb_bytes(uint8_t *out, uint32_t field, const void *body, size_t len)
{
    size_t n = pb_varint(out, (uint64_t)field << 3 | 2);
    n += pb_varint(out + n, len);
    memmove(out + n, body, len);
    return n + len;
}

/* The payload: Resource { attributes: [schema_version "tls_v1", attribute_key_map
 * [KEY_NAME]] }. Returns its length (out: at least 256 bytes). */
static size_t pctx_payload(uint8_t *out)
{
    uint8_t a[128], b[128], kv[192];
    size_t n = 0, k, v;
    /* KeyValue{key, value: AnyValue{string_value}} */
    v = pb_bytes(a, 1, "tls_v1", 6);
    k = pb_bytes(kv, 1, "threadlocal.schema_version", 26);
    k += pb_bytes(kv + k, 2, a, v);
    n += pb_bytes(out + n, 1, kv, k);
    /* KeyValue{key, value: AnyValue{array_value: ArrayValue{values: [AnyValue{string}]}}} */
    v = pb_bytes(a, 1, KEY_NAME, sizeof(KEY_NAME) - 1);
    size_t arr = pb_bytes(b, 1, a, v);
    v = pb_bytes(a, 5, b, arr);
    k = pb_bytes(kv, 1, "threadlocal.attribute_key_map", 29);
    k += pb_bytes(kv + k, 2, a, v);
    n += pb_bytes(out + n, 1, kv, k);
    return n;
}

static pthread_mutex_t pctx_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t pctx_pid; /* the process that published (or found one): its children publish */

/* Whether a mapping named OTEL_CTX is in the process already. */
static bool pctx_present(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    bool found = false;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, "OTEL_CTX") != NULL;
    if (f)
        fclose(f);
    return found;
}

static void pctx_publish(void)
{
    pid_t me = getpid();
    if (__atomic_load_n(&pctx_pid, __ATOMIC_ACQUIRE) == me)
        return;
    pthread_mutex_lock(&pctx_mu);
    if (pctx_pid != me && !pctx_present()) {
        size_t size = 4096;
        void *m = MAP_FAILED;
        int fd = (int)syscall(SYS_memfd_create, "OTEL_CTX", 1u /* MFD_CLOEXEC */);
        if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
            m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0)
            close(fd);
        if (m == MAP_FAILED)
            m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            madvise(m, size, MADV_DONTFORK);
            struct {
                char signature[8];
                uint32_t version, payload_size;
                uint64_t published_ns, payload;
            } *h = m;
            uint8_t *payload = (uint8_t *)m + 64;
            h->payload_size = (uint32_t)pctx_payload(payload);
            h->version = 2;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            h->published_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
            h->payload = (uint64_t)(uintptr_t)payload;
            atomic_thread_fence(memory_order_seq_cst);
            memcpy(h->signature, "OTEL_CTX", 8); /* last */
            prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)m, size, "OTEL_CTX");
        }
    }
    __atomic_store_n(&pctx_pid, me, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pctx_mu);
}

/* Point the thread's context at rec (compiler fences only: a reader reads it while the
 * thread is stopped or interrupted, never halfway through this). */
static void ctx_publish(void *rec)
{
    atomic_signal_fence(memory_order_seq_cst);
    *(void *volatile *)&otel_thread_ctx_v1 = rec;
    atomic_signal_fence(memory_order_seq_cst);
}

static void ctx_release(struct ctx_txn *x)
{
    if (ctx_nspare < CTX_SPARE)
        ctx_spare[ctx_nspare++] = x;
    else
        free(x);
}

/* Drop the ended ones off the thread's stack, publish its newest open one (or what was
 * there before the first), then free the ended ones (nothing points at them any more). The
 * calling thread's own stack only. */
static void ctx_settle(void)
{
    struct ctx_txn *gone[CTX_STACK];
    int m = 0, ngone = 0;
    /* Another writer (an SDK beside this library) may have published since: its record
     * stays, and is what the thread's context goes back to. */
    void *cur = otel_thread_ctx_v1;
    bool ours = false;
    for (int i = 0; i < ctx_depth && !ours; i++)
        ours = cur == &ctx_stack[i]->rec;
    if (!ours)
        ctx_base = cur;
    for (int i = 0; i < ctx_depth; i++) {
        struct ctx_txn *x = ctx_stack[i];
        if (atomic_load_explicit(&x->state, memory_order_acquire) == CTX_ENDED)
            gone[ngone++] = x;
        else
            ctx_stack[m++] = x;
    }
    ctx_depth = m;
    if (ours)
        ctx_publish(m ? (void *)&ctx_stack[m - 1]->rec : ctx_base);
    for (int i = 0; i < ngone; i++)
        ctx_release(gone[i]);
}

/* A thread that published transactions exits: the ended ones and the spare ones are freed;
 * one still open is left to whichever thread ends it. */
static void ctx_thread_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < ctx_depth; i++) {
        struct ctx_txn *x = ctx_stack[i];
        int was = CTX_OPEN;
        if (!atomic_compare_exchange_strong(&x->state, &was, CTX_ORPHAN) && was == CTX_ENDED)
            free(x);
    }
    ctx_depth = 0;
    while (ctx_nspare)
        free(ctx_spare[--ctx_nspare]);
    ctx_keyed = false; /* (a later destructor's transaction keys it again) */
}

static void ctx_end(struct ctx_txn *x);

static void ctx_make_key(void)
{
    pthread_key_create(&ctx_key, ctx_thread_exit);
}


struct waiter {
    uint64_t id;
    uint64_t conn;   /* the connection it was sent on */
    bool done;
    int err;         /* when done: 0 (reply set) or a PROFD_E* code */
    cJSON *reply;
    struct waiter *next;
};

/* Every open handle, for the fork handler: a child may have been forked while another
 * thread of the parent held a handle's lock, which no thread of the child would ever
 * release. The child gets each lock afresh; its first call then drops the parent's
 * connection (owner differs) and opens its own. */
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static struct profd *handles;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A condition variable whose timed waits follow CLOCK_MONOTONIC. */
static void init_cv(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static void atfork_child(void)
{
    pthread_mutex_init(&handles_mu, NULL);
    /* The child is a process of its own: its thread's id, its random ids, and not the
     * parent's transactions (their records are left as they were, unpublished). */
    ctx_tid = 0;
    ctx_rng = 0;
    /* Every record of the parent's transactions is a copy nobody ends here: the ones ended
     * on this thread's stack, then every handle's open ones (this thread's among them). */
    for (int i = 0; i < ctx_depth; i++)
        if (atomic_load(&ctx_stack[i]->state) != CTX_OPEN)
            free(ctx_stack[i]);
    if (ctx_depth) {
        ctx_depth = 0;
        ctx_publish(ctx_base);
    }
    for (struct profd *p = handles; p; p = p->next) {
        p->ctx_ok = false;
        while (p->ctx_open) {
            struct ctx_txn *x = p->ctx_open;
            p->ctx_open = x->next_open;
            free(x);
        }
        pthread_mutex_init(&p->mu, NULL);
        init_cv(&p->cv);
        p->reading = false;
        p->waiters = NULL; /* the parent's threads' */
        if (p->dead_fd >= 0)
            close(p->dead_fd);
        p->dead_fd = -1;
    }
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

struct profd *profd_open(const char *socket_path)
{
    struct profd *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->path = profd_client_socket_path(socket_path);
    if (!p->path) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    init_cv(&p->cv);
    p->fd = -1;
    p->dead_fd = -1;
    frame_reader_init(&p->in, PROTO_MAX_REPLY);
    p->start_ms = DEFAULT_START_MS;
    p->finish_ms = DEFAULT_FINISH_MS;
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&handles_mu);
    p->next = handles;
    handles = p;
    pthread_mutex_unlock(&handles_mu);
    return p;
}

void profd_close(struct profd *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&handles_mu);
    for (struct profd **pp = &handles; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&handles_mu);
    if (p->fd >= 0)
        close(p->fd);
    if (p->dead_fd >= 0)
        close(p->dead_fd);
    /* Transactions still open in a thread's context: ended (their threads free them). */
    while (p->ctx_open) {
        struct ctx_txn *x = p->ctx_open;
        p->ctx_open = x->next_open;
        ctx_end(x);
    }
    frame_reader_finish(&p->in);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->path);
    free(p);
}

void profd_set_timeout(struct profd *p, int start_ms, int finish_ms)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->start_ms = start_ms > 0 ? start_ms : DEFAULT_START_MS;
    p->finish_ms = finish_ms > 0 ? finish_ms : DEFAULT_FINISH_MS;
    pthread_mutex_unlock(&p->mu);
}

static uint64_t mono_ms(void)
{
    return now_ns() / NS_PER_MS;
}

/* Drop the connection (called with the lock held). If a thread is reading it, wake that
 * thread up and let it close the descriptor: closing it under its feet could hand the number
 * to another file. */
static void disconnect(struct profd *p)
{
    if (p->fd >= 0 && p->reading && p->reading_fd == p->fd) {
        shutdown(p->fd, SHUT_RDWR);
        p->dead_fd = p->fd; /* only ever the fd being read; read_one closes it */
    } else if (p->fd >= 0) {
        close(p->fd);
    }
    p->fd = -1;
    p->conn++;
    frame_reader_finish(&p->in);
    frame_reader_init(&p->in, PROTO_MAX_REPLY);
}

static int errno_to_profd(int e)
{
    switch (e) {
    case ETIMEDOUT:
        return PROFD_ETIMEDOUT;
    case ENOMEM:
        return PROFD_ENOMEM;
    case EMSGSIZE:
    case EPROTO:
    case EBADMSG:
        return PROFD_EPROTO;
    default:
        return PROFD_EDISCONNECTED;
    }
}

static int daemon_error(const cJSON *reply)
{
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    const char *c = cJSON_IsString(code) ? code->valuestring : "";
    const char *m = cJSON_IsString(msg) && msg->valuestring ? msg->valuestring : "";
    if (!strcmp(c, "permission_denied"))
        return PROFD_EPERM;
    if (!strcmp(c, "limit"))
        return PROFD_ELIMIT;
    if (!strcmp(c, "not_attached") || !strcmp(c, "attach_failed") ||
        !strcmp(c, "no_such_process"))
        return PROFD_ENOTPROFILED;
    if (!strcmp(c, "bad_request") && strstr(m, "no open transaction"))
        return PROFD_ENOTXN;
    return PROFD_EDAEMON;
}

/* Connect (and shake hands) unless connected. Called with the lock held. */
static int ensure_connected(struct profd *p, int timeout_ms)
{
    if (p->fd >= 0 && p->owner != getpid()) {
        /* Inherited across fork(): the parent's connection, never ours to use (our copy
         * of the descriptor is closed; the parent's stays open). */
        disconnect(p);
    }
    if (p->fd < 0) {
        int fd = proto_connect(p->path);
        if (fd < 0)
            return fd == -ENOMEM ? PROFD_ENOMEM : PROFD_ENODAEMON;
        p->fd = fd;
        p->conn++;
        p->stalled = false;
        p->ctx_ok = false; /* (a new daemon, perhaps: not attached yet) */
        p->owner = getpid();
        cJSON *hello = cJSON_CreateObject(), *reply = NULL;
        if (!hello) {
            disconnect(p);
            return PROFD_ENOMEM;
        }
        cJSON_AddStringToObject(hello, "cmd", "hello");
        cJSON_AddNumberToObject(hello, "version", PROTO_VERSION);
        int r = proto_call(p->fd, hello, &reply, timeout_ms);
        cJSON_Delete(hello);
        if (r < 0) {
            disconnect(p);
            return errno_to_profd(-r);
        }
        bool ok = cJSON_GetObjectItemCaseSensitive(reply, "result") != NULL;
        cJSON_Delete(reply);
        if (!ok) {
            disconnect(p);
            return PROFD_EPROTO;
        }
        p->gen = p->gen + 1 < GEN_LIMIT ? p->gen + 1 : 1;
        p->seq = 0;
    }
    return 0;
}

/* Is txn_id one of this connection's (it may still be open)? */
static bool current_txn(const struct profd *p, uint64_t txn_id)
{
    return p->fd >= 0 && p->owner == getpid() && (uint32_t)(txn_id >> 32) == p->gen &&
           (uint32_t)txn_id != 0;
}

/* Send a request that has no reply. If profd is behind and its socket full, wait for room
 * up to start_ms; if that passes, fail at once (PROFD_EBUSY) until there is room again, so
 * a stopped daemon costs the application one timeout, not one per call. */
static int send_only(struct profd *p, cJSON *req)
{
    char *text = cJSON_PrintUnformatted(req);
    if (!text)
        return PROFD_ENOMEM;
    int r = proto_send_nowait(p->fd, text, strlen(text), p->start_ms);
    if (r == -EBUSY && !p->stalled) {
        uint64_t deadline = mono_ms() + (uint64_t)p->start_ms;
        for (uint64_t now = mono_ms(); r == -EBUSY && now < deadline; now = mono_ms()) {
            struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
            if (poll(&pf, 1, (int)(deadline - now)) < 0 && errno != EINTR)
                break;
            r = proto_send_nowait(p->fd, text, strlen(text), p->start_ms);
        }
    }
    free(text);
    p->stalled = r == -EBUSY;
    if (r == -EBUSY)
        return PROFD_EBUSY;
    if (r < 0) {
        disconnect(p);
        return errno_to_profd(-r);
    }
    return 0;
}

/* Hand every complete reply in p->in to its waiter (a late reply, of a call that timed
 * out, is dropped). Returns 0, or -EPROTO if the stream is broken. */
static int deliver(struct profd *p)
{
    for (;;) {
        const char *payload;
        size_t len;
        int r = frame_reader_next(&p->in, &payload, &len);
        if (r == 0)
            return 0;
        cJSON *reply = r > 0 ? cJSON_ParseWithLength(payload, len) : NULL;
        if (!reply)
            return -EPROTO;
        /* Our ids are integers: a reply whose id is none (negative, fractional, beyond
         * 2^64, whose conversion would be undefined) answers no call of ours. */
        uint64_t rid = 0;
        bool has_id = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(reply, "id")) &&
                      json_get_u64(reply, "id", &rid) == 1;
        struct waiter *w = p->waiters;
        while (w && !(w->conn == p->conn && has_id && rid == w->id))
            w = w->next;
        if (w && !w->done) {
            w->done = true;
            w->reply = reply;
        } else {
            cJSON_Delete(reply);
        }
    }
}

/* Wait up to timeout_ms for the connection to have data, without the lock; then read what
 * it has and hand out the complete replies. Called with the lock held, as the only reader.
 * A part of a reply stays in p->in for the next reader, so a reader's own deadline never
 * breaks the stream. On a broken connection every call waiting on it fails. */
static void read_some(struct profd *p, int timeout_ms)
{
    int fd = p->fd;
    uint64_t conn = p->conn;
    p->reading = true;
    p->reading_fd = fd;
    pthread_mutex_unlock(&p->mu);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int n = poll(&pf, 1, timeout_ms);
    pthread_mutex_lock(&p->mu);
    p->reading = false;
    int err = 0;
    if (p->conn != conn) {
        /* Dropped meanwhile (its waiters were failed then). */
    } else if (n > 0) {
        ssize_t got = frame_reader_fill(&p->in, fd);
        if (got == 0)
            err = PROFD_EDISCONNECTED;
        else if (got < 0 && got != -EAGAIN && got != -EWOULDBLOCK && got != -EINTR)
            err = got == -ENOMEM ? PROFD_ENOMEM : PROFD_EDISCONNECTED;
        else if (deliver(p) < 0)
            err = PROFD_EPROTO;
    }
    if (err) {
        for (struct waiter *w = p->waiters; w; w = w->next)
            if (w->conn == conn && !w->done) {
                w->done = true;
                w->err = err;
            }
        disconnect(p);
    }
    if (p->dead_fd == fd) {
        close(fd); /* dropped while we read it */
        p->dead_fd = -1;
    }
    pthread_cond_broadcast(&p->cv);
}

/* One request and its reply, matched by id. Called with the lock held (released while
 * waiting). On success *result is the reply (free it). */
static int call(struct profd *p, cJSON *req, int timeout_ms, cJSON **result)
{
    *result = NULL;
    int r = ensure_connected(p, timeout_ms);
    if (r < 0)
        return r;
    uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
    struct waiter w = {.id = ++p->next_id, .conn = p->conn};
    cJSON_AddNumberToObject(req, "id", (double)w.id);
    /* Sent as a start is: never blocking the other threads for long on a full socket. */
    r = send_only(p, req);
    if (r < 0)
        return r;
    w.next = p->waiters;
    p->waiters = &w;
    while (!w.done) {
        uint64_t now = mono_ms();
        if (now >= deadline) {
            w.done = true;
            w.err = PROFD_ETIMEDOUT; /* its reply, when it comes, is dropped */
        } else if (p->conn != w.conn || p->fd < 0) {
            w.done = true;
            w.err = PROFD_EDISCONNECTED;
        } else if (!p->reading) {
            read_some(p, (int)(deadline - now));
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t wait = deadline - now;
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
    }
    for (struct waiter **pp = &p->waiters; *pp; pp = &(*pp)->next)
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    if (w.err)
        return w.err;
    if (!cJSON_GetObjectItemCaseSensitive(w.reply, "result")) {
        int e = daemon_error(w.reply);
        cJSON_Delete(w.reply);
        return e;
    }
    *result = w.reply;
    return 0;
}

int profd_txn_start(struct profd *p, const char *name, const char *trace_id, uint64_t *txn_id)
{
    return profd_txn_start_span(p, name, trace_id, NULL, txn_id);
}

/* Whether transactions may be published in the thread context ($PROFD_THREAD_CONTEXT=0:
 * never, every start and end a message). */
static bool ctx_allowed(void)
{
    static int allowed = -1;
    if (allowed < 0) {
        const char *e = getenv("PROFD_THREAD_CONTEXT");
        allowed = !(e && !strcmp(e, "0"));
    }
    return allowed;
}

/* Publish a transaction's record in the calling thread's context: trace_id (32 hex digits;
 * NULL: the trace of the thread's open one it nests in, else a random one), span_id (16;
 * NULL: random), name attribute 0. NULL with *err 1 where it cannot be (a trace id of
 * another form, too deep: the caller sends messages), or a PROFD_E* code. */
static struct ctx_txn *ctx_begin(const char *name, const char *trace_id, const char *span_id,
                                 int *err)
{
    *err = 1;
    /* (The forked child's reset: the Python module never calls profd_open.) */
    pthread_once(&atfork_once, install_atfork);
    pctx_publish(); /* (once per process: attribute 0's name for readers) */
    if (ctx_depth && atomic_load_explicit(&ctx_stack[ctx_depth - 1]->state,
                                          memory_order_acquire) != CTX_OPEN)
        ctx_settle(); /* (an ended one on top: not the one to nest in) */
    if (ctx_depth == CTX_STACK)
        ctx_settle();
    if (ctx_depth == CTX_STACK)
        return NULL;
    if (!ctx_keyed) {
        pthread_once(&ctx_key_once, ctx_make_key);
        pthread_setspecific(ctx_key, (void *)1);
        ctx_keyed = true;
    }
    struct ctx_txn *x = ctx_nspare ? ctx_spare[--ctx_nspare] : malloc(sizeof(*x));
    if (!x) {
        *err = PROFD_ENOMEM;
        return NULL;
    }
    x->start_ns = now_ns();
    struct ctx_record *r = &x->rec;
    r->valid = 0;
    if ((trace_id && !from_hex(trace_id, r->trace_id, 16)) ||
        (span_id && !from_hex(span_id, r->span_id, 8))) {
        ctx_release(x);
        *err = span_id && strlen(span_id) != 16 ? PROFD_EINVAL : 1;
        return NULL;
    }
    if (!trace_id && ctx_depth) {
        /* Nested in another of this thread's: its trace. */
        memcpy(r->trace_id, ctx_stack[ctx_depth - 1]->rec.trace_id, 16);
    } else if (!trace_id) {
        uint64_t a = ctx_random(), b = ctx_random();
        memcpy(r->trace_id, &a, 8);
        memcpy(r->trace_id + 8, &b, 8);
    }
    if (!span_id) {
        uint64_t v = ctx_random() | 1; /* (never all zeroes) */
        memcpy(r->span_id, &v, 8);
    }
    r->trace_flags = 1; /* sampled: its profile is wanted */
    size_t n = strlen(name);
    memcpy(x->name, name, n + 1);
    if (n > CTX_NAME_MAX) {
        n = CTX_NAME_MAX;
        while (n && ((uint8_t)name[n] & 0xc0) == 0x80)
            n--; /* (cut at a character's start) */
    }
    r->attrs[0] = 0;
    r->attrs[1] = (uint8_t)n;
    memcpy(r->attrs + 2, name, n);
    r->attrs_size = (uint16_t)(2 + n);
    r->valid = 1;
    x->tid = cached_tid();
    atomic_init(&x->state, CTX_OPEN);
    x->id = 0;
    if (!ctx_depth)
        ctx_base = otel_thread_ctx_v1;
    ctx_stack[ctx_depth++] = x;
    ctx_publish(r);
    return x;
}

/* Start a transaction in the thread's context: no message. 1 where it cannot be (profd
 * does not read it, or ctx_begin's cases): the message path. */
static int ctx_start(struct profd *p, const char *name, const char *trace_id,
                     const char *span_id, uint64_t *txn_id)
{
    if (!atomic_load_explicit(&p->ctx_ok, memory_order_relaxed))
        return 1;
    int err;
    struct ctx_txn *x = ctx_begin(name, trace_id, span_id, &err);
    if (!x)
        return err;
    pthread_mutex_lock(&p->mu);
    bool ok = p->ctx_ok && p->seq != UINT32_MAX;
    if (ok) {
        x->id = (uint64_t)p->gen << 32 | ++p->seq;
        x->next_open = p->ctx_open;
        p->ctx_open = x;
    }
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        ctx_end(x);
        return 1;
    }
    *txn_id = x->id;
    return 0;
}

void *profd_context_begin(const char *trace_id, const char *span_id, const char *name,
                          char trace_out[33], char span_out[17])
{
    int err;
    if (!name || !*name || strlen(name) > 512)
        return NULL;
    struct ctx_txn *x = ctx_begin(name, trace_id, span_id, &err);
    if (x && trace_out)
        to_hex(x->rec.trace_id, 16, trace_out);
    if (x && span_out)
        to_hex(x->rec.span_id, 8, span_out);
    return x;
}

void profd_context_end(void *handle)
{
    if (handle)
        ctx_end(handle);
}

/* The open transaction txn_id of p's thread context, taken off its list; NULL if it is not
 * one. Called with the lock held. */
static struct ctx_txn *ctx_take(struct profd *p, uint64_t txn_id)
{
    for (struct ctx_txn **pp = &p->ctx_open; *pp; pp = &(*pp)->next_open)
        if ((*pp)->id == txn_id) {
            struct ctx_txn *x = *pp;
            *pp = x->next_open;
            return x;
        }
    return NULL;
}

/* End x's publication: on its own thread, now (its context goes back to what it was); from
 * another, marked invalid, and freed by its thread later. x is not to be touched after. */
static void ctx_end(struct ctx_txn *x)
{
    if (x->tid == cached_tid()) {
        atomic_store_explicit(&x->state, CTX_ENDED, memory_order_relaxed);
        ctx_settle();
        return;
    }
    atomic_signal_fence(memory_order_seq_cst);
    *(volatile uint8_t *)&x->rec.valid = 0;
    if (atomic_exchange_explicit(&x->state, CTX_ENDED, memory_order_acq_rel) == CTX_ORPHAN)
        free(x); /* (its thread exited: nothing points at it) */
}

int profd_txn_start_span(struct profd *p, const char *name, const char *trace_id,
                         const char *span_id, uint64_t *txn_id)
{
    if (!p || !name || !*name || strlen(name) > 512 || !txn_id ||
        (trace_id && strlen(trace_id) > 64) || (span_id && strlen(span_id) != 16))
        return PROFD_EINVAL;
    int c = ctx_start(p, name, trace_id, span_id, txn_id);
    if (c <= 0)
        return c;
    uint64_t t = now_ns();
    cJSON *req = cJSON_CreateObject();
    if (!req)
        return PROFD_ENOMEM;
    cJSON_AddStringToObject(req, "cmd", "txn_start");
    cJSON_AddStringToObject(req, "name", name);
    if (trace_id)
        cJSON_AddStringToObject(req, "trace_id", trace_id);
    if (span_id)
        cJSON_AddStringToObject(req, "span_id", span_id);
    cJSON_AddNumberToObject(req, "tid", (double)syscall(SYS_gettid));
    /* Its start by our clock: the daemon reads the request a little later. */
    cJSON_AddNumberToObject(req, "t_ns", (double)t);
    cJSON_AddBoolToObject(req, "noreply", 1);
    pthread_mutex_lock(&p->mu);
    int r = ensure_connected(p, p->start_ms);
    uint64_t id = 0;
    if (r == 0 && p->seq == UINT32_MAX)
        r = PROFD_ELIMIT; /* 4 billion starts on one connection */
    if (r == 0) {
        id = (uint64_t)p->gen << 32 | ++p->seq;
        cJSON_AddNumberToObject(req, "txn_id", (double)id);
        r = send_only(p, req);
    }
    pthread_mutex_unlock(&p->mu);
    cJSON_Delete(req);
    if (r == 0)
        *txn_id = id;
    return r;
}

int profd_txn_finish_lookback(struct profd *p, uint64_t txn_id, double lookback_s,
                              char **profile_json)
{
    uint64_t called = now_ns();
    if (!p || !txn_id || !profile_json || !(lookback_s >= 0))
        return PROFD_EINVAL;
    *profile_json = NULL;
    cJSON *req = cJSON_CreateObject();
    if (!req)
        return PROFD_ENOMEM;
    pthread_mutex_lock(&p->mu);
    struct ctx_txn *x = ctx_take(p, txn_id);
    pthread_mutex_unlock(&p->mu);
    if (x) {
        /* Published in the thread context: its profile asked for by its ids. */
        char trace[33], span[17];
        to_hex(x->rec.trace_id, 16, trace);
        to_hex(x->rec.span_id, 8, span);
        cJSON_AddStringToObject(req, "cmd", "txn_profile");
        cJSON_AddStringToObject(req, "name", x->name);
        cJSON_AddStringToObject(req, "trace_id", trace);
        cJSON_AddStringToObject(req, "span_id", span);
        cJSON_AddNumberToObject(req, "start_ns", (double)x->start_ns);
        cJSON_AddNumberToObject(req, "txn_tid", (double)x->tid);
        ctx_end(x);
    } else {
        cJSON_AddStringToObject(req, "cmd", "txn_finish");
        cJSON_AddNumberToObject(req, "txn_id", (double)txn_id);
    }
    /* When and where we were called: until profd reads the request, this thread is in
     * this call. */
    cJSON_AddNumberToObject(req, "t_ns", (double)called);
    cJSON_AddNumberToObject(req, "tid", (double)syscall(SYS_gettid));
    if (lookback_s > 0)
        cJSON_AddNumberToObject(req, "lookback_s", lookback_s);
    cJSON *reply;
    pthread_mutex_lock(&p->mu);
    int r = x || current_txn(p, txn_id) ? call(p, req, p->finish_ms, &reply) : PROFD_ENOTXN;
    if (x && r == PROFD_ENOTPROFILED)
        p->ctx_ok = false; /* (not attached: a new daemon, say) the next start sends one */
    pthread_mutex_unlock(&p->mu);
    cJSON_Delete(req);
    if (r < 0)
        return r;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
    /* Whether profd reads this process's thread context: the next starts are published
     * there, without a message. */
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(res, "thread_context");
    if (cJSON_IsBool(tc))
        atomic_store_explicit(&p->ctx_ok, cJSON_IsTrue(tc) && ctx_allowed(), memory_order_relaxed);
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(res, "profile");
    if (!cJSON_IsObject(prof)) {
        cJSON_Delete(reply);
        return PROFD_EPROTO;
    }
    *profile_json = cJSON_PrintUnformatted(prof);
    cJSON_Delete(reply);
    return *profile_json ? 0 : PROFD_ENOMEM;
}

int profd_txn_finish(struct profd *p, uint64_t txn_id, char **profile_json)
{
    return profd_txn_finish_lookback(p, txn_id, 0, profile_json);
}

int profd_txn_discard(struct profd *p, uint64_t txn_id)
{
    if (!p || !txn_id)
        return PROFD_EINVAL;
    pthread_mutex_lock(&p->mu);
    struct ctx_txn *x = ctx_take(p, txn_id);
    pthread_mutex_unlock(&p->mu);
    if (x) {
        ctx_end(x); /* (nothing to send) */
        return 0;
    }
    cJSON *req = cJSON_CreateObject();
    if (!req)
        return PROFD_ENOMEM;
    cJSON_AddStringToObject(req, "cmd", "txn_discard");
    cJSON_AddNumberToObject(req, "txn_id", (double)txn_id);
    cJSON_AddBoolToObject(req, "noreply", 1);
    pthread_mutex_lock(&p->mu);
    int r = current_txn(p, txn_id) ? send_only(p, req) : PROFD_ENOTXN;
    pthread_mutex_unlock(&p->mu);
    cJSON_Delete(req);
    return r;
}

const char *profd_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case PROFD_ENOMEM:
        return "out of memory";
    case PROFD_EINVAL:
        return "invalid argument";
    case PROFD_ENODAEMON:
        return "profd is not running";
    case PROFD_ETIMEDOUT:
        return "profd did not answer in time";
    case PROFD_EDISCONNECTED:
        return "the connection to profd was lost";
    case PROFD_EPROTO:
        return "profd's answer was not understood";
    case PROFD_EPERM:
        return "profd may not profile this process";
    case PROFD_ENOTXN:
        return "no such open transaction";
    case PROFD_ELIMIT:
        return "profd follows as many processes as it may";
    case PROFD_ENOTPROFILED:
        return "the process is not profiled (it could not be attached, or not yet)";
    case PROFD_EDAEMON:
        return "profd refused the request";
    case PROFD_EBUSY:
        return "profd is not keeping up (its socket is full): nothing was sent";
    default:
        return "unknown error";
    }
}
