/* proto.h: the profd wire protocol (see common/PROTOCOL.md): length-prefixed JSON frames. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "util.h"

#define PROTO_VERSION 1
#define PROTO_HEADER_SIZE 4
/* Largest request the daemon accepts; a bigger one is refused and the connection closed. */
#define PROTO_MAX_REQUEST (1u << 20)
/* Largest reply a client accepts (profiles of long windows can be large). */
#define PROTO_MAX_REPLY (256u << 20)

/* Error codes carried in {"error": {"code": NAME, "message": ...}}. */
enum proto_error {
    PE_BAD_REQUEST,
    PE_TOO_LARGE,
    PE_UNSUPPORTED_VERSION,
    PE_HANDSHAKE_REQUIRED,
    PE_UNKNOWN_COMMAND,
    PE_NO_SUCH_PROCESS,
    PE_PERMISSION_DENIED,
    PE_NOT_ATTACHED,
    PE_ALREADY_ATTACHED,
    PE_ATTACH_FAILED,
    PE_LIMIT,
    PE_SHUTTING_DOWN,
    PE_INTERNAL,
    PE_COUNT
};

const char *proto_error_name(enum proto_error e);
/* Map a code name back; -1 if unknown. */
int proto_error_from_name(const char *name);

/* Incremental decoder of frames arriving on a stream. */
struct frame_reader {
    struct strbuf in;
    size_t pos; /* start of the first unconsumed frame */
    size_t max; /* largest payload accepted */
};

void frame_reader_init(struct frame_reader *r, size_t max_payload);
void frame_reader_finish(struct frame_reader *r);
/* Read what the (non-blocking) fd has. Returns bytes read, 0 at EOF, or -errno (-EAGAIN when
 * nothing is available, -ENOBUFS when a whole maximal frame is already buffered). */
ssize_t frame_reader_fill(struct frame_reader *r, int fd);
/* Feed bytes directly (tests, fuzzing). Returns 0 or -ENOMEM. */
int frame_reader_feed(struct frame_reader *r, const void *data, size_t n);
/* Next complete frame: 1 with payload and len set (valid until the next call), 0 if the frame is
 * still incomplete, -EMSGSIZE if its announced length exceeds the maximum, -EBADMSG if it is
 * empty. After an error the stream cannot be resynchronised. */
int frame_reader_next(struct frame_reader *r, const char **payload, size_t *len);
/* Bytes buffered but not yet returned as frames (nonzero at EOF means truncation). */
size_t frame_reader_pending(const struct frame_reader *r);
/* Free the buffer if everything in it has been returned as frames: an idle connection then
 * holds none (a read reserves 64 KiB). */
void frame_reader_trim(struct frame_reader *r);
/* Put back the frame of payload length len that frame_reader_next just returned. */
void frame_reader_unread(struct frame_reader *r, size_t len);

/* Append header + payload to out. Returns 0, -EMSGSIZE or -ENOMEM. */
int frame_encode(struct strbuf *out, const char *payload, size_t len);

/* Blocking helpers for clients: send a whole frame (MSG_NOSIGNAL, never SIGPIPE) and receive
 * one whole frame, each bounded by timeout_ms (-1: no limit). Return 0 or -errno
 * (-ETIMEDOUT, -ECONNRESET at EOF, -EMSGSIZE if the reply exceeds max; -ECONNABORTED if
 * the time ran out inside a frame: the stream is then unusable). */
int proto_send(int fd, const char *payload, size_t len, int timeout_ms);
/* The same, but -EBUSY at once (nothing sent) if the socket has no room: for requests sent
 * without waiting, which must not block the caller on a daemon that is not reading. */
int proto_send_nowait(int fd, const char *payload, size_t len, int timeout_ms);
int proto_recv(int fd, size_t max, char **payload, size_t *len, int timeout_ms);
/* Send a cJSON request and wait for its reply, parsed. */
int proto_call(int fd, const cJSON *req, cJSON **reply, int timeout_ms);

/* Connect to the daemon's socket. Returns fd or -errno. */
int proto_connect(const char *path);

/* Build {"id": id, "error": {"code": ..., "message": ...}}. id may be NULL. */
cJSON *proto_error_reply(const cJSON *id, enum proto_error code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* item as compact JSON text (malloc'd; NULL out of memory), as cJSON_PrintUnformatted
 * gives it but with numbers printed cheaply: integral values exactly, others in 15
 * significant digits (17 past 10^9). Its numbers become raw items (their text): print it,
 * then delete it. */
char *json_print(cJSON *item);

/* Read an integer field that may be a JSON number or a decimal string (for exact 64-bit
 * values). Returns 1 if present and valid, 0 if absent, -EINVAL if present but invalid. */
int json_get_u64(const cJSON *obj, const char *key, uint64_t *out);
int json_get_i64(const cJSON *obj, const char *key, int64_t *out);
