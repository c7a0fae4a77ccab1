/* test_proto.c: framing over socketpair() with no server (split and batched frames, limits,
 * back-pressure, truncation, timeouts, EOF, EPIPE without SIGPIPE), proto_call against a
 * forked fake server, error replies, and the json_get_* readers.
 */
#include "proto.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A connected stream pair; sv[1] (the reading end) non-blocking if asked. */
static void make_pair(int sv[2], bool nonblock_reader)
{
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    if (nonblock_reader)
        REQUIRE(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
}

static void close_pair(int sv[2])
{
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    sv[0] = sv[1] = -1;
}

static void put_header(unsigned char *h, uint32_t n)
{
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
}

/* n bytes of a pattern that differs per seed and per position (not NUL-terminated). */
static char *pattern(size_t n, unsigned seed)
{
    char *p = xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)('a' + (i * 7 + seed * 13 + i / 251) % 26);
    return p;
}

static void write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        REQUIRE(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static uint64_t elapsed_ms(uint64_t since_ns)
{
    return (now_ns() - since_ns) / NS_PER_MS;
}

/* Bytes waiting unread in a socket. */
static int unread(int fd)
{
    int n = -1;
    REQUIRE(ioctl(fd, FIONREAD, &n) == 0);
    return n;
}

static void test_encode_writes_big_endian_length(void)
{
    struct strbuf sb = {0};
    size_t n = 0x010203;
    char *p = pattern(n, 1);
    CHECK_INT(frame_encode(&sb, p, n), 0);
    CHECK_U64(sb.len, PROTO_HEADER_SIZE + n);
    const unsigned char *h = (const unsigned char *)sb.buf;
    CHECK(h[0] == 0x00 && h[1] == 0x01 && h[2] == 0x02 && h[3] == 0x03);
    CHECK(memcmp(sb.buf + PROTO_HEADER_SIZE, p, n) == 0);
    /* An empty frame is not a frame: refused, and the buffer is left alone. */
    CHECK_INT(frame_encode(&sb, "x", 0), -EMSGSIZE);
    CHECK_U64(sb.len, PROTO_HEADER_SIZE + n);
    /* Appends after what is there. */
    CHECK_INT(frame_encode(&sb, "{}", 2), 0);
    CHECK(memcmp(sb.buf + PROTO_HEADER_SIZE + n, "\0\0\0\2{}", 6) == 0);
    strbuf_finish(&sb);
    free(p);
}

/* A stream of frames of these sizes, and where each frame ends in it. */
static void build_stream(struct strbuf *out, const size_t *sizes, size_t nframes, char **payloads,
                         size_t *ends)
{
    for (size_t i = 0; i < nframes; i++) {
        payloads[i] = pattern(sizes[i], (unsigned)i);
        REQUIRE(frame_encode(out, payloads[i], sizes[i]) == 0);
        ends[i] = out->len;
    }
}

/* Feed the stream one byte at a time: each frame comes out exactly when its last byte
 * arrives, intact, and pending counts what is buffered but not returned. 70000 bytes cross
 * the 64 KiB compaction threshold. */
static void test_frames_split_one_byte_at_a_time(void)
{
    static const size_t sizes[] = {1, 2, 255, 256, 300, 70000, 5, 1};
    enum { N = ARRAY_SIZE(sizes) };
    struct strbuf s = {0};
    char *payloads[N];
    size_t ends[N];
    build_stream(&s, sizes, N, payloads, ends);

    struct frame_reader r;
    frame_reader_init(&r, PROTO_MAX_REQUEST);
    size_t next_frame = 0, consumed = 0;
    bool ok = true;
    for (size_t i = 0; i < s.len && ok; i++) {
        CHECK_INT(frame_reader_feed(&r, s.buf + i, 1), 0);
        const char *pl;
        size_t len;
        int got = frame_reader_next(&r, &pl, &len);
        if (next_frame < N && i + 1 == ends[next_frame]) {
            if (got != 1 || len != sizes[next_frame] ||
                memcmp(pl, payloads[next_frame], len) != 0) {
                fprintf(stderr, "frame %zu: got %d len %zu at byte %zu\n", next_frame, got, len, i);
                ok = false;
            }
            consumed = ends[next_frame];
            next_frame++;
            got = frame_reader_next(&r, &pl, &len);
        }
        if (got != 0) {
            fprintf(stderr, "byte %zu: next returned %d, want 0 (incomplete)\n", i, got);
            ok = false;
        }
        if (frame_reader_pending(&r) != i + 1 - consumed) {
            fprintf(stderr, "byte %zu: pending %zu, want %zu\n", i, frame_reader_pending(&r),
                    i + 1 - consumed);
            ok = false;
        }
    }
    CHECK(ok);
    CHECK_INT(next_frame, N);
    CHECK_U64(frame_reader_pending(&r), 0);
    frame_reader_finish(&r);
    for (size_t i = 0; i < N; i++)
        free(payloads[i]);
    strbuf_finish(&s);
}

/* Many frames fed in chunks of every size from 1 to 70 and some larger ones, so frames end
 * mid-chunk, the buffer holds the start of the next frame when one is returned, and the
 * reader moves the unconsumed tail to the front (both below and above 64 KiB). */
static void test_frames_split_at_every_chunk_size(void)
{
    enum { N = 60 };
    size_t sizes[N];
    for (size_t i = 0; i < N; i++)
        sizes[i] = 1 + (i * 37) % 97 + (i == 30 ? 70000 : 0);
    struct strbuf s = {0};
    char *payloads[N];
    size_t ends[N];
    build_stream(&s, sizes, N, payloads, ends);
    static const size_t big_chunks[] = {1000, 4099, 65537, 200000};
    bool ok = true;
    for (size_t c = 1; c <= 70 + ARRAY_SIZE(big_chunks) && ok; c++) {
        size_t chunk = c <= 70 ? c : big_chunks[c - 71];
        struct frame_reader r;
        frame_reader_init(&r, PROTO_MAX_REQUEST);
        size_t fed = 0, k = 0;
        while (fed < s.len && ok) {
            size_t n = s.len - fed < chunk ? s.len - fed : chunk;
            CHECK_INT(frame_reader_feed(&r, s.buf + fed, n), 0);
            fed += n;
            const char *pl;
            size_t len;
            int got;
            while ((got = frame_reader_next(&r, &pl, &len)) == 1) {
                if (k >= N || len != sizes[k] || memcmp(pl, payloads[k], len) != 0 ||
                    ends[k] > fed || frame_reader_pending(&r) != fed - ends[k]) {
                    fprintf(stderr, "chunk %zu: frame %zu wrong\n", chunk, k);
                    ok = false;
                    break;
                }
                k++;
            }
            if (got != 1 && got != 0) {
                fprintf(stderr, "chunk %zu: next returned %d\n", chunk, got);
                ok = false;
            }
        }
        if (ok && (k != N || frame_reader_pending(&r) != 0)) {
            fprintf(stderr, "chunk %zu: %zu frames, %zu pending\n", chunk, k,
                    frame_reader_pending(&r));
            ok = false;
        }
        frame_reader_finish(&r);
    }
    CHECK(ok);
    for (size_t i = 0; i < N; i++)
        free(payloads[i]);
    strbuf_finish(&s);
}

/* The same through a socket, one byte per write and per frame_reader_fill. */
static void test_fill_one_byte_writes(void)
{
    static const size_t sizes[] = {1, 300, 5000, 3};
    enum { N = ARRAY_SIZE(sizes) };
    struct strbuf s = {0};
    char *payloads[N];
    size_t ends[N];
    build_stream(&s, sizes, N, payloads, ends);
    int sv[2];
    make_pair(sv, true);

    struct frame_reader r;
    frame_reader_init(&r, 8192);
    const char *pl;
    size_t len, next_frame = 0;
    bool ok = true;
    CHECK_INT(frame_reader_fill(&r, sv[1]), -EAGAIN);
    for (size_t i = 0; i < s.len && ok; i++) {
        write_all(sv[0], s.buf + i, 1);
        ssize_t n = frame_reader_fill(&r, sv[1]);
        if (n != 1) {
            fprintf(stderr, "byte %zu: fill returned %zd, want 1\n", i, n);
            ok = false;
        }
        int got = frame_reader_next(&r, &pl, &len);
        if (next_frame < N && i + 1 == ends[next_frame]) {
            if (got != 1 || len != sizes[next_frame] ||
                memcmp(pl, payloads[next_frame], len) != 0) {
                fprintf(stderr, "frame %zu: got %d at byte %zu\n", next_frame, got, i);
                ok = false;
            }
            next_frame++;
        } else if (got != 0) {
            fprintf(stderr, "byte %zu: next returned %d, want 0\n", i, got);
            ok = false;
        }
    }
    CHECK(ok);
    CHECK_INT(next_frame, N);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -EAGAIN);
    close(sv[0]);
    sv[0] = -1;
    CHECK_INT(frame_reader_fill(&r, sv[1]), 0); /* EOF */
    CHECK_U64(frame_reader_pending(&r), 0);
    frame_reader_finish(&r);
    close_pair(sv);
    for (size_t i = 0; i < N; i++)
        free(payloads[i]);
    strbuf_finish(&s);
}

/* Several frames in one write come out one by one, in order, from one fill. */
static void test_several_frames_in_one_write(void)
{
    static const size_t sizes[] = {2, 17, 1, 400, 9};
    enum { N = ARRAY_SIZE(sizes) };
    struct strbuf s = {0};
    char *payloads[N];
    size_t ends[N];
    build_stream(&s, sizes, N, payloads, ends);
    int sv[2];
    make_pair(sv, true);
    write_all(sv[0], s.buf, s.len);

    struct frame_reader r;
    frame_reader_init(&r, 4096);
    CHECK_INT(frame_reader_fill(&r, sv[1]), (ssize_t)s.len);
    for (size_t i = 0; i < N; i++) {
        const char *pl = NULL;
        size_t len = 0;
        CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
        CHECK_U64(len, sizes[i]);
        CHECK(pl && memcmp(pl, payloads[i], sizes[i]) == 0);
        CHECK_U64(frame_reader_pending(&r), s.len - ends[i]);
    }
    const char *pl;
    size_t len;
    CHECK_INT(frame_reader_next(&r, &pl, &len), 0);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -EAGAIN);
    frame_reader_finish(&r);
    close_pair(sv);
    for (size_t i = 0; i < N; i++)
        free(payloads[i]);
    strbuf_finish(&s);
}

/* A zero length is a protocol error (-EBADMSG), after the good frames before it, and stays
 * one. Three zero bytes are only an incomplete header. */
static void test_zero_length_frame_is_bad(void)
{
    struct frame_reader r;
    frame_reader_init(&r, 1024);
    const char *pl;
    size_t len;
    CHECK_INT(frame_reader_feed(&r, "\0\0\0\2{}\0\0\0", 9), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 0);
    CHECK_INT(frame_reader_feed(&r, "\0{\"a\":1}", 8), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EBADMSG);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EBADMSG);
    frame_reader_finish(&r);

    int sv[2];
    make_pair(sv, false);
    write_all(sv[0], "\0\0\0\0", 4);
    char *buf = NULL;
    CHECK_INT(proto_recv(sv[1], 1024, &buf, &len, 1000), -EBADMSG);
    CHECK(buf == NULL);
    close_pair(sv);
}

/* An announced length over the maximum is refused as soon as the header is in, before any
 * payload arrives, and the buffer is never sized by it. */
static void test_oversized_length_refused_without_allocating(void)
{
    struct frame_reader r;
    const char *pl;
    size_t len;
    frame_reader_init(&r, 1024);
    CHECK_INT(frame_reader_feed(&r, "\xff\xff\xff\xff", 4), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EMSGSIZE);
    CHECK(r.in.cap <= 256);
    frame_reader_finish(&r);

    unsigned char h[PROTO_HEADER_SIZE];
    frame_reader_init(&r, 1024);
    put_header(h, 1025);
    CHECK_INT(frame_reader_feed(&r, h, sizeof(h)), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EMSGSIZE);
    frame_reader_finish(&r);

    /* Through a socket: a 4 GiB announcement with the daemon's limit. fill reads in chunks
     * of at most 64 KiB, so the buffer stays within two of them. */
    int sv[2];
    make_pair(sv, true);
    frame_reader_init(&r, PROTO_MAX_REQUEST);
    write_all(sv[0], "\xff\xff\xff\xf0{\"a\":1}", 11);
    CHECK_INT(frame_reader_fill(&r, sv[1]), 11);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EMSGSIZE);
    CHECK(r.in.cap <= 2 * 65536);
    frame_reader_finish(&r);
    close_pair(sv);

    /* proto_recv answers -EMSGSIZE at once (a broken check would wait for the payload and
     * time out instead) and reads nothing past the header. */
    make_pair(sv, false);
    char *buf = NULL;
    put_header(h, 101);
    write_all(sv[0], h, sizeof(h));
    write_all(sv[0], "0123456789", 10);
    uint64_t t0 = now_ns();
    CHECK_INT(proto_recv(sv[1], 100, &buf, &len, 2000), -EMSGSIZE);
    CHECK(elapsed_ms(t0) < 1000);
    CHECK_INT(unread(sv[1]), 10);
    close_pair(sv);
    make_pair(sv, false);
    write_all(sv[0], "\xff\xff\xff\xff", 4);
    CHECK_INT(proto_recv(sv[1], PROTO_MAX_REPLY, &buf, &len, 2000), -EMSGSIZE);
    CHECK(buf == NULL);
    close_pair(sv);
}

/* Write what the socket takes without blocking; returns bytes written. */
static size_t write_some(int fd, const char *p, size_t n)
{
    ssize_t w = write(fd, p, n);
    if (w < 0) {
        REQUIRE(errno == EAGAIN);
        return 0;
    }
    return (size_t)w;
}

/* A payload of exactly the maximum is accepted; one byte more is not. */
static void test_frame_exactly_at_limit(void)
{
    struct frame_reader r;
    const char *pl;
    size_t len;
    struct strbuf s = {0};
    char *p = pattern(1001, 3);
    frame_reader_init(&r, 1000);
    REQUIRE(frame_encode(&s, p, 1000) == 0);
    REQUIRE(frame_encode(&s, p, 1001) == 0);
    CHECK_INT(frame_reader_feed(&r, s.buf, s.len), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_U64(len, 1000);
    CHECK_INT(frame_reader_next(&r, &pl, &len), -EMSGSIZE);
    frame_reader_finish(&r);

    int sv[2];
    make_pair(sv, false);
    char *buf = NULL;
    CHECK_INT(proto_send(sv[0], p, 1000, 1000), 0);
    CHECK_INT(proto_recv(sv[1], 1000, &buf, &len, 1000), 0);
    CHECK_U64(len, 1000);
    CHECK(buf && memcmp(buf, p, 1000) == 0 && buf[1000] == '\0');
    free(buf);
    buf = NULL;
    CHECK_INT(proto_send(sv[0], p, 1001, 1000), 0);
    CHECK_INT(proto_recv(sv[1], 1000, &buf, &len, 1000), -EMSGSIZE);
    close_pair(sv);

    /* The daemon's own limit, through fill: the writer and the reader take turns without
     * blocking, since the frame is larger than the socket buffer. */
    size_t big = PROTO_MAX_REQUEST;
    char *q = pattern(big, 4);
    strbuf_finish(&s);
    REQUIRE(frame_encode(&s, q, big) == 0);
    make_pair(sv, true);
    REQUIRE(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
    frame_reader_init(&r, PROTO_MAX_REQUEST);
    size_t off = 0;
    int got = 0;
    while (got == 0) {
        off += write_some(sv[0], s.buf + off, s.len - off);
        ssize_t n = frame_reader_fill(&r, sv[1]);
        if (n < 0 && n != -EAGAIN) {
            CHECK_INT(n, 0);
            break;
        }
        got = frame_reader_next(&r, &pl, &len);
    }
    CHECK_INT(got, 1);
    CHECK_U64(len, big);
    CHECK(got == 1 && memcmp(pl, q, big) == 0);
    frame_reader_finish(&r);
    close_pair(sv);
    free(q);
    free(p);
    strbuf_finish(&s);
}

/* EOF in the middle of a frame: fill says 0 and the partial bytes stay pending. */
static void test_truncated_stream_leaves_pending(void)
{
    int sv[2];
    struct frame_reader r;
    const char *pl;
    size_t len;
    unsigned char h[PROTO_HEADER_SIZE];
    char *p = pattern(100, 5);

    make_pair(sv, true);
    frame_reader_init(&r, 1024);
    put_header(h, 2);
    write_all(sv[0], h, sizeof(h));
    write_all(sv[0], "{}", 2);
    put_header(h, 100);
    write_all(sv[0], h, sizeof(h));
    write_all(sv[0], p, 40);
    close(sv[0]);
    sv[0] = -1;
    CHECK_INT(frame_reader_fill(&r, sv[1]), 50);
    CHECK_INT(frame_reader_fill(&r, sv[1]), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 0);
    CHECK_U64(frame_reader_pending(&r), 44);
    frame_reader_finish(&r);
    close_pair(sv);

    /* Half a header. */
    make_pair(sv, true);
    frame_reader_init(&r, 1024);
    write_all(sv[0], "\0\0", 2);
    close(sv[0]);
    sv[0] = -1;
    CHECK_INT(frame_reader_fill(&r, sv[1]), 2);
    CHECK_INT(frame_reader_fill(&r, sv[1]), 0);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 0);
    CHECK_U64(frame_reader_pending(&r), 2);
    frame_reader_finish(&r);
    close_pair(sv);
    free(p);
}

/* fill stops reading (-ENOBUFS) once a whole maximal frame is buffered, and not before; the
 * rest stays in the socket until a frame is taken out. */
static void test_back_pressure_at_one_max_frame(void)
{
    enum { MAX = 1024 };
    int sv[2];
    struct frame_reader r;
    const char *pl;
    size_t len;
    struct strbuf s = {0};
    char *p = pattern(MAX, 6);
    REQUIRE(frame_encode(&s, p, MAX) == 0);
    REQUIRE(frame_encode(&s, p, MAX) == 0);
    REQUIRE(frame_encode(&s, p, 10) == 0);

    make_pair(sv, true);
    frame_reader_init(&r, MAX);
    write_all(sv[0], s.buf, s.len);
    CHECK_INT(frame_reader_fill(&r, sv[1]), MAX + PROTO_HEADER_SIZE);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -ENOBUFS);
    CHECK_U64(frame_reader_pending(&r), MAX + PROTO_HEADER_SIZE);
    CHECK_INT(unread(sv[1]), (int)s.len - (MAX + PROTO_HEADER_SIZE));
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_U64(len, MAX);
    CHECK_INT(frame_reader_fill(&r, sv[1]), MAX + PROTO_HEADER_SIZE);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -ENOBUFS);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_INT(frame_reader_fill(&r, sv[1]), 10 + PROTO_HEADER_SIZE);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    CHECK_U64(len, 10);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -EAGAIN);
    frame_reader_finish(&r);
    close_pair(sv);

    /* One byte short of a maximal frame is not back-pressure: more may be read. */
    make_pair(sv, true);
    frame_reader_init(&r, MAX);
    write_all(sv[0], s.buf, MAX + PROTO_HEADER_SIZE - 1);
    CHECK_INT(frame_reader_fill(&r, sv[1]), MAX + PROTO_HEADER_SIZE - 1);
    CHECK_INT(frame_reader_fill(&r, sv[1]), -EAGAIN);
    write_all(sv[0], s.buf + MAX + PROTO_HEADER_SIZE - 1, 1);
    CHECK_INT(frame_reader_fill(&r, sv[1]), 1);
    CHECK_INT(frame_reader_next(&r, &pl, &len), 1);
    frame_reader_finish(&r);
    close_pair(sv);
    strbuf_finish(&s);
    free(p);
}

/* proto_recv gives up after its timeout, with nothing (-ETIMEDOUT) or part of a frame
 * (-ECONNABORTED) received. */
static void test_recv_times_out(void)
{
    int sv[2];
    char *buf = NULL;
    size_t len;
    make_pair(sv, false);
    uint64_t t0 = now_ns();
    CHECK_INT(proto_recv(sv[1], 1024, &buf, &len, 100), -ETIMEDOUT);
    uint64_t ms = elapsed_ms(t0);
    CHECK(ms >= 95 && ms < 3000);
    /* Inside a frame: the stream cannot be read on, which the caller must know. */
    write_all(sv[0], "\0\0\0\x10{\"a\"", 8);
    t0 = now_ns();
    CHECK_INT(proto_recv(sv[1], 1024, &buf, &len, 100), -ECONNABORTED);
    ms = elapsed_ms(t0);
    CHECK(ms >= 95 && ms < 3000);
    CHECK(buf == NULL);
    /* Timeout 0 polls once. */
    CHECK_INT(proto_recv(sv[1], 1024, &buf, &len, 0), -ETIMEDOUT);
    close_pair(sv);
}

/* EOF before or inside a frame is -ECONNRESET (and frees the partial payload). */
static void test_recv_eof_is_connreset(void)
{
    static const char *const sends[] = {"", "\0\0", "\0\0\0\x10{\"a\":"};
    static const size_t lens[] = {0, 2, 9};
    for (size_t i = 0; i < ARRAY_SIZE(sends); i++) {
        int sv[2];
        char *buf = NULL;
        size_t len;
        make_pair(sv, false);
        if (lens[i])
            write_all(sv[0], sends[i], lens[i]);
        close(sv[0]);
        sv[0] = -1;
        CHECK_INT(proto_recv(sv[1], 1024, &buf, &len, 1000), -ECONNRESET);
        CHECK(buf == NULL);
        close_pair(sv);
    }
}

/* Sending to a closed peer is -EPIPE and raises no SIGPIPE: with SIGPIPE at its default
 * action, a raised one would kill this test. */
static void test_send_to_closed_peer_is_epipe_without_sigpipe(void)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigprocmask(SIG_UNBLOCK, &set, NULL);

    int sv[2];
    make_pair(sv, false);
    close(sv[1]);
    sv[1] = -1;
    CHECK_INT(proto_send(sv[0], "{}", 2, 1000), -EPIPE);
    char *big = pattern(1 << 20, 7);
    CHECK_INT(proto_send(sv[0], big, 1 << 20, 1000), -EPIPE);
    CHECK_INT(proto_send(sv[0], big, 0, 1000), -EMSGSIZE);
    free(big);
    close_pair(sv);
}

/* A peer that stops reading makes proto_send time out instead of blocking forever. */
static void test_send_times_out_when_peer_stops_reading(void)
{
    int sv[2];
    make_pair(sv, false);
    size_t n = 16u << 20;
    char *big = pattern(n, 8);
    uint64_t t0 = now_ns();
    CHECK_INT(proto_send(sv[0], big, n, 100), -ETIMEDOUT);
    uint64_t ms = elapsed_ms(t0);
    CHECK(ms >= 95 && ms < 3000);
    free(big);
    close_pair(sv);
}

/* Frames larger than the socket buffer go through whole, both ways, with a forked echo. */
static void test_send_recv_round_trip_large(void)
{
    int sv[2];
    make_pair(sv, false);
    size_t n = (3u << 20) + 7;
    char *big = pattern(n, 9);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        char *buf;
        size_t len;
        int r = proto_recv(sv[1], PROTO_MAX_REPLY, &buf, &len, 10000);
        if (r == 0) {
            r = proto_send(sv[1], buf, len, 10000);
            free(buf);
        }
        close(sv[1]);
        free(big);
        _exit(r == 0 ? 0 : 1);
    }
    close(sv[1]);
    sv[1] = -1;
    CHECK_INT(proto_send(sv[0], big, n, 10000), 0);
    char *buf = NULL;
    size_t len = 0;
    CHECK_INT(proto_recv(sv[0], PROTO_MAX_REPLY, &buf, &len, 10000), 0);
    CHECK_U64(len, n);
    CHECK(buf && len == n && memcmp(buf, big, n) == 0 && buf[n] == '\0');
    free(buf);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(big);
    close_pair(sv);
}

/* The fake server's replies, in order. */
static const char *const fake_replies[] = {
    "{\"id\":7,\"ok\":true}",
    "[1,2]",
    "{\"id\":",
};

static int fake_server(int fd)
{
    for (size_t i = 0; i < ARRAY_SIZE(fake_replies); i++) {
        char *buf;
        size_t len;
        if (proto_recv(fd, PROTO_MAX_REQUEST, &buf, &len, 10000) < 0)
            return 1;
        cJSON *req = cJSON_ParseWithLength(buf, len);
        free(buf);
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "command");
        bool good = cJSON_IsString(cmd) && !strcmp(cmd->valuestring, "ping");
        cJSON_Delete(req);
        if (!good)
            return 2;
        if (proto_send(fd, fake_replies[i], strlen(fake_replies[i]), 10000) < 0)
            return 3;
    }
    return 0;
}

/* proto_call: the reply object parsed; a reply that is not a JSON object is -EBADMSG; a
 * closed server is an error, not a hang. */
static void test_proto_call_against_fake_server(void)
{
    int sv[2];
    make_pair(sv, false);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        int r = fake_server(sv[1]);
        close(sv[1]);
        _exit(r);
    }
    close(sv[1]);
    sv[1] = -1;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "command", "ping");
    cJSON *reply = NULL;
    CHECK_INT(proto_call(sv[0], req, &reply, 5000), 0);
    int64_t id = 0;
    CHECK_INT(json_get_i64(reply, "id", &id), 1);
    CHECK_INT(id, 7);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")));
    cJSON_Delete(reply);
    reply = NULL;
    CHECK_INT(proto_call(sv[0], req, &reply, 5000), -EBADMSG);
    CHECK(reply == NULL);
    CHECK_INT(proto_call(sv[0], req, &reply, 5000), -EBADMSG);
    CHECK(reply == NULL);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int r = proto_call(sv[0], req, &reply, 5000);
    CHECK(r == -EPIPE || r == -ECONNRESET);
    CHECK(reply == NULL);
    cJSON_Delete(req);
    close_pair(sv);
}

/* Error names map back to their codes; the reply has the id, code and formatted message. */
static void test_error_names_and_replies(void)
{
    for (int e = 0; e < PE_COUNT; e++) {
        const char *name = proto_error_name((enum proto_error)e);
        CHECK(name && *name);
        CHECK_INT(proto_error_from_name(name), e);
    }
    CHECK_STR(proto_error_name(PE_NO_SUCH_PROCESS), "no_such_process");
    CHECK_STR(proto_error_name((enum proto_error)PE_COUNT), "internal");
    CHECK_INT(proto_error_from_name("no_such_thing"), -1);
    CHECK_INT(proto_error_from_name(NULL), -1);

    cJSON *id = cJSON_CreateNumber(12);
    cJSON *rep = proto_error_reply(id, PE_NO_SUCH_PROCESS, "no process %d", 4242);
    cJSON_Delete(id);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "id")) == 12);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(rep, "error");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "code")),
              "no_such_process");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")),
              "no process 4242");
    cJSON_Delete(rep);

    /* No id; a message longer than the internal buffer is cut, not overflowed. */
    char *longmsg = pattern(2000, 10);
    longmsg[1999] = '\0';
    rep = proto_error_reply(NULL, PE_INTERNAL, "%s", longmsg);
    CHECK(cJSON_GetObjectItemCaseSensitive(rep, "id") == NULL);
    err = cJSON_GetObjectItemCaseSensitive(rep, "error");
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message"));
    CHECK(m && strlen(m) > 0 && strlen(m) < 2000 && !strncmp(m, longmsg, strlen(m)));
    cJSON_Delete(rep);
    free(longmsg);
}

/* proto_connect: too long a path, no such socket, and a listening one. */
static void test_connect(void)
{
    char longpath[200];
    memset(longpath, 'x', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    CHECK_INT(proto_connect(longpath), -ENAMETOOLONG);
    CHECK_INT(proto_connect("/nonexistent-dir/profd.sock"), -ENOENT);

    char path[64];
    snprintf(path, sizeof(path), "/tmp/test_proto-%d.sock", (int)getpid());
    unlink(path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(l >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    REQUIRE(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 4) == 0);
    int fd = proto_connect(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
        CHECK_INT(proto_send(fd, "{}", 2, 1000), 0);
        int a = accept(l, NULL, NULL);
        char *buf = NULL;
        size_t len;
        CHECK_INT(proto_recv(a, 16, &buf, &len, 1000), 0);
        CHECK(buf && len == 2 && !strcmp(buf, "{}"));
        free(buf);
        close(a);
        close(fd);
    }
    close(l);
    unlink(path);
}

static cJSON *parse(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    REQUIRE(j);
    return j;
}

/* json_get_u64/i64: numbers, decimal strings (exact beyond 2^53), negatives, fractions,
 * out of range, wrong types, absent and null; the output is untouched unless 1. */
static void test_json_get_integers(void)
{
    cJSON *j = parse("{\"n\": 42, \"zero\": 0, \"neg\": -5, \"frac\": 1.5, \"exp\": 1e3,"
                     " \"str\": \"123\", \"negstr\": \"-7\", \"big\": \"9007199254740993\","
                     " \"maxi\": \"9223372036854775807\", \"mini\": \"-9223372036854775808\","
                     " \"over\": \"99999999999999999999\", \"badstr\": \"12x\","
                     " \"fracstr\": \"1.5\", \"empty\": \"\", \"null\": null, \"t\": true,"
                     " \"obj\": {\"n\": 1}, \"arr\": [1], \"huge\": 1e300,"
                     " \"neghuge\": -1e300, \"negbig\": -9.2e18, \"N\": 43}");
    const uint64_t U = 0xdeadbeefull;
    const int64_t I = -0xdeadbeefll;
    uint64_t u;
    int64_t i;
#define U64(key, ret, val)                                                                         \
    do {                                                                                           \
        u = U;                                                                                     \
        CHECK_INT(json_get_u64(j, key, &u), ret);                                                  \
        CHECK_U64(u, (ret) == 1 ? (uint64_t)(val) : U);                                            \
    } while (0)
#define I64(key, ret, val)                                                                         \
    do {                                                                                           \
        i = I;                                                                                     \
        CHECK_INT(json_get_i64(j, key, &i), ret);                                                  \
        CHECK_INT(i, (ret) == 1 ? (int64_t)(val) : I);                                             \
    } while (0)
    U64("n", 1, 42);
    U64("N", 1, 43); /* keys are case-sensitive */
    U64("zero", 1, 0);
    U64("exp", 1, 1000);
    U64("str", 1, 123);
    U64("big", 1, 9007199254740993ull);
    U64("maxi", 1, INT64_MAX);
    U64("neg", -EINVAL, 0);
    U64("negstr", -EINVAL, 0);
    U64("frac", -EINVAL, 0);
    U64("fracstr", -EINVAL, 0);
    U64("over", -EINVAL, 0);
    U64("badstr", -EINVAL, 0);
    U64("empty", -EINVAL, 0);
    U64("t", -EINVAL, 0);
    U64("obj", -EINVAL, 0);
    U64("arr", -EINVAL, 0);
    U64("huge", -EINVAL, 0);
    U64("neghuge", -EINVAL, 0);
    U64("null", 0, 0);
    U64("absent", 0, 0);

    I64("n", 1, 42);
    I64("neg", 1, -5);
    I64("negstr", 1, -7);
    I64("big", 1, 9007199254740993ll);
    I64("maxi", 1, INT64_MAX);
    I64("mini", 1, INT64_MIN);
    I64("negbig", 1, -9200000000000000000ll);
    I64("frac", -EINVAL, 0);
    I64("over", -EINVAL, 0);
    I64("badstr", -EINVAL, 0);
    I64("empty", -EINVAL, 0);
    I64("huge", -EINVAL, 0);
    I64("neghuge", -EINVAL, 0);
    I64("t", -EINVAL, 0);
    I64("null", 0, 0);
    I64("absent", 0, 0);
#undef U64
#undef I64
    /* Not an object at all. */
    cJSON *arr = parse("[1, 2]");
    u = U;
    CHECK_INT(json_get_u64(arr, "n", &u), 0);
    CHECK_INT(json_get_u64(NULL, "n", &u), 0);
    CHECK_U64(u, U);
    cJSON_Delete(arr);
    cJSON_Delete(j);
}

/* Regression (found by fuzzing): u64 strings went through strtoll, so a u64 above
 * INT64_MAX was refused although the header promises exact 64-bit values; and a number in
 * [2^63, 1.8e19] was converted to int64_t, which is undefined behaviour. */
static void test_json_u64_above_int64(void)
{
    uint64_t u = 0;
    int64_t i = 0;
    cJSON *j = parse("{\"s\": \"18446744073709551615\", \"h\": \"9223372036854775808\","
                     " \"d\": 1e19, \"big\": 1e20, \"neg\": \"-1\", \"sp\": \" 1\"}");
    CHECK_INT(json_get_u64(j, "s", &u), 1);
    CHECK_U64(u, UINT64_MAX);
    CHECK_INT(json_get_u64(j, "h", &u), 1);
    CHECK_U64(u, 9223372036854775808ull);
    CHECK_INT(json_get_u64(j, "d", &u), 1);
    CHECK_U64(u, 10000000000000000000ull);
    CHECK_INT(json_get_u64(j, "big", &u), -EINVAL);
    CHECK_INT(json_get_u64(j, "neg", &u), -EINVAL);
    CHECK_INT(json_get_u64(j, "sp", &u), -EINVAL);
    CHECK_INT(json_get_i64(j, "neg", &i), 1);
    CHECK_INT((int)i, -1);
    CHECK_INT(json_get_i64(j, "d", &i), -EINVAL);
    cJSON_Delete(j);
}

/* json_print: the text cJSON would print, numbers cheaper: integral values exactly (also
 * past int's range, where cJSON goes through printf's floating point), others in 15
 * significant digits that read back as the same number where they are that precise; NaN and
 * infinities as null. Nested numbers too; the siblings of the item printed untouched. */
static void test_json_print_numbers(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "zero", 0);
    cJSON_AddNumberToObject(o, "neg", -42);
    cJSON_AddNumberToObject(o, "ns", 1733212345678901.0);  /* ns: integral, past int */
    cJSON_AddNumberToObject(o, "t", 1733212345.678901);    /* s: past 10^9, 17 digits */
    cJSON_AddNumberToObject(o, "big", 4611686018427387904.0); /* 2^62 */
    cJSON_AddNumberToObject(o, "frac", 0.25);
    cJSON_AddNumberToObject(o, "hz", 101.00000101);
    cJSON_AddNumberToObject(o, "nan", NAN);
    cJSON_AddNumberToObject(o, "inf", -INFINITY);
    cJSON *a = cJSON_AddArrayToObject(o, "h");
    cJSON *b = cJSON_CreateArray();
    cJSON_AddItemToArray(b, cJSON_CreateNumber(1.5));
    cJSON_AddItemToArray(b, cJSON_CreateNumber(7));
    cJSON_AddItemToArray(a, b);
    cJSON_AddStringToObject(o, "s", "12");
    char *text = json_print(o);
    CHECK_STR(text, "{\"zero\":0,\"neg\":-42,\"ns\":1733212345678901,"
                    "\"t\":1733212345.678901,\"big\":4611686018427387904,\"frac\":0.25,"
                    "\"hz\":101.00000101,"
                    "\"nan\":null,\"inf\":null,\"h\":[[1.5,7]],\"s\":\"12\"}");
    /* It parses back to the same values. */
    cJSON *back = cJSON_Parse(text);
    REQUIRE(back);
    CHECK(cJSON_GetObjectItem(back, "ns")->valuedouble == 1733212345678901.0);
    CHECK(cJSON_GetObjectItem(back, "hz")->valuedouble == 101.00000101);
    CHECK(cJSON_GetObjectItem(back, "t")->valuedouble == 1733212345.678901);
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(o);
    /* An item among siblings: only it is printed and converted. */
    cJSON *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(3));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(4));
    text = json_print(arr->child);
    CHECK_STR(text, "3");
    CHECK(cJSON_IsNumber(arr->child->next));
    free(text);
    cJSON_Delete(arr);
    CHECK(json_print(NULL) == NULL);
}

int main(void)
{
    RUN(test_json_print_numbers);
    RUN(test_encode_writes_big_endian_length);
    RUN(test_json_u64_above_int64);
    RUN(test_frames_split_one_byte_at_a_time);
    RUN(test_frames_split_at_every_chunk_size);
    RUN(test_fill_one_byte_writes);
    RUN(test_several_frames_in_one_write);
    RUN(test_zero_length_frame_is_bad);
    RUN(test_oversized_length_refused_without_allocating);
    RUN(test_frame_exactly_at_limit);
    RUN(test_truncated_stream_leaves_pending);
    RUN(test_back_pressure_at_one_max_frame);
    RUN(test_recv_times_out);
    RUN(test_recv_eof_is_connreset);
    RUN(test_send_to_closed_peer_is_epipe_without_sigpipe);
    RUN(test_send_times_out_when_peer_stops_reading);
    RUN(test_send_recv_round_trip_large);
    RUN(test_proto_call_against_fake_server);
    RUN(test_error_names_and_replies);
    RUN(test_connect);
    RUN(test_json_get_integers);
    return check_status("test_proto");
}
