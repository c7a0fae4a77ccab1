/* server.h: the Unix socket server: clients, framing, replies. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <ev.h>

#include "config.h"
#include "perms.h"
#include "proto.h"
#include "sampler.h"
#include "schedule.h"

struct pending;

struct client {
    int fd;
    struct peer peer;
    ev_io rio, wio;
    ev_timer stall;            /* output not drained for too long: drop the client */
    struct frame_reader in;
    struct strbuf out;
    size_t out_off;
    bool handshaken;
    bool closing;              /* close once the output is flushed */
    bool eof;                  /* the client closed its side: no more requests will come */
    bool dead;                 /* closed; freed after the current loop iteration */
    bool throttled;            /* reading paused until the client reads its replies */
    struct pending *pending;   /* request being answered asynchronously */
    struct deferred *deferred, *deferred_tail; /* requests set aside while one is pending */
    unsigned ndeferred;
    uint64_t id;               /* connection number, for logs */
    uint64_t accept_ns;        /* when it connected (CLOCK_MONOTONIC) */
    struct client *next;
};

/* A request set aside while an earlier one's reply is pending (in order). */
struct deferred {
    struct deferred *next;
    cJSON *req; /* parsed; NULL if it did not parse (answered with that error) */
};

/* A request whose reply comes later (slice, detach). If its client goes away first,
 * client is set to NULL and the reply is dropped. */
struct pending {
    struct client *client;
    cJSON *id;
    void *data;
};

/* Re-read the configuration (set by main): 0, or -1 with the reason in err (the running
 * configuration then stays). */
extern int (*server_reload)(char *err, size_t errlen);
extern uint64_t server_start_ns;

/* Where the server hands what it reads (set once, before listening): each request to its
 * handler, which returns the reply or NULL when it will be sent later through a pending;
 * and a client gone (connection closed), with the time. */
struct server_handlers {
    cJSON *(*dispatch)(struct client *c, const cJSON *req);
    void (*client_gone)(uint64_t client_id, uint64_t now);
};
void server_init(const struct server_handlers *h);

/* The event loop the server runs on. */
struct ev_loop *server_loop(void);

/* Listen on the socket. Returns 0 or -errno (with a logged reason). */
int server_listen(struct ev_loop *loop, const char *path);
/* allow_groups changed (reload): decide again for every connected client. */
void server_groups_changed(void);
/* Accept on fd, a listening socket the service manager passed (socket activation); path
 * is where it is, for logs. Returns 0 or -errno. */
int server_listen_fd(struct ev_loop *loop, int fd, const char *path);
/* Stop accepting, drop every client, remove the socket file. */
void server_shutdown(void);
size_t server_client_count(void);
/* Connections refused since start (descriptors used up, or too many clients). */
uint64_t server_refused_count(void);
/* Memory held for connected clients: their buffers and requests set aside. */
size_t server_memory(void);

/* Queue a reply (takes ownership of reply). */
void client_send(struct client *c, cJSON *reply);
/* Finish an asynchronous request: send its reply if the client is still there, then resume
 * reading its requests. Frees p. */
void pending_finish(struct pending *p, cJSON *reply);
/* The same with a reply already encoded for the wire, request id included (the worker makes
 * slices' replies); its buffer may be taken over (frame is left empty). */
void pending_finish_frame(struct pending *p, struct strbuf *frame);
