/* util.h: small helpers shared by the daemon, profctl and the client library. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define NS_PER_SEC UINT64_C(1000000000)
#define NS_PER_MS UINT64_C(1000000)
#define NS_PER_US UINT64_C(1000)

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds. Sample timestamps are monotonic. */
uint64_t now_ns(void);
uint64_t realtime_ns(void);
/* The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in ns. */
uint64_t thread_cpu_ns(void);

/* Allocation that aborts on out-of-memory: for the daemon and CLI only, never the client
 * library (which must report ENOMEM to the application). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A random number below span (0 for span 0): xorshift64*, seeded once from getrandom. Not for
 * secrets: for spreading samples in time against aliasing. Not thread-safe (the loop's). */
uint64_t random_below(uint64_t span);

/* qsort for arrays that may be empty: glibc declares qsort's array nonnull even for n == 0
 * (an empty array is often a null pointer here), which UBSan stops the daemon for. */
void sort_array(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* Parse a whole string as a number. Return 0 or -EINVAL / -ERANGE. */
int parse_u64(const char *s, uint64_t *out);
int parse_int(const char *s, int *out);
/* Hex digits (either case) at p, up to end, into *v: returns the first byte after them, or
 * NULL if there are none or more than fit in 64 bits. Reads nothing else (unlike strtoull,
 * which skips white space and newlines first). */
const char *parse_hex_span(const char *p, const char *end, uint64_t *v);
/* "5", "5s", "250ms", "2m", "1.5s" -> nanoseconds. A bare number is seconds. */
int parse_duration_ns(const char *s, uint64_t *out);

/* Socket path: the explicit one, else $PROFD_SOCKET, else /run/profd/profd.sock as root,
 * else $XDG_RUNTIME_DIR/profd.sock, else /tmp/profd-UID.sock. Returns a malloc'd string,
 * NULL on out-of-memory. */
char *profd_socket_path(const char *explicit_path);
/* The same for clients, except that when no path was given and the caller's own default
 * socket does not exist, the system daemon's /run/profd/profd.sock is used if it exists. */
char *profd_client_socket_path(const char *explicit_path);

/* Growable byte buffer. Functions return 0 or -ENOMEM. */
struct strbuf {
    char *buf;
    size_t len;
    size_t cap;
};
int strbuf_reserve(struct strbuf *sb, size_t extra);
int strbuf_append(struct strbuf *sb, const void *data, size_t n);
int strbuf_puts(struct strbuf *sb, const char *s);
int strbuf_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int strbuf_vprintf(struct strbuf *sb, const char *fmt, va_list ap);
/* Hand the buffer (NUL-terminated) to the caller and reset sb. */
char *strbuf_steal(struct strbuf *sb);
/* data[0..n) in base64 (RFC 4648, padded), NUL-terminated; NULL on ENOMEM. */
char *base64_encode(const void *data, size_t n);
/* Decode base64 text s (padding optional, no whitespace) onto out: 0, -EINVAL or -ENOMEM. */
int base64_decode(const char *s, struct strbuf *out);
void strbuf_finish(struct strbuf *sb);

/* Read a small file (such as one under /proc) whole. Returns bytes read or -errno;
 * buf is NUL-terminated. */
ssize_t read_file(const char *path, char *buf, size_t size);
