/* fuzz_frames.c: libFuzzer target for the frame decoder and the JSON field readers.
 *
 * Input: byte 0 picks the payload limit (bits 0-1) and how the stream is cut into chunks
 * (bits 2-4), byte 1 seeds the chunk sizes, the rest is the byte stream. The stream goes
 * through frame_reader_feed/next chunk by chunk and must decode exactly as a one-shot
 * reference decode does: the same frames at the same offsets, the same error at the same
 * place, 0 only while a frame is really incomplete, pending always equal to the bytes fed
 * minus those returned. Each frame's payload is parsed with cJSON, and json_get_u64/i64
 * are called on every key of every object, checking that they agree with each other and
 * with the number cJSON read.
 *
 * Fuzzing with libFuzzer (clang 14; from the source root):
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *       -DPROFD_LIBFUZZER -D_GNU_SOURCE -Icommon \
 *       tests/fuzz/fuzz_frames.c tests/fuzz/replay.c common/proto.c common/util.c -lcjson -lm \
 *       -o /tmp/fuzz_frames
 *   mkdir -p /tmp/frames-new
 *   /tmp/fuzz_frames -max_total_time=120 -max_len=4096 /tmp/frames-new tests/fuzz/corpus/frames
 *
 * New inputs land in /tmp/frames-new, failures in ./crash-* (replay one with
 * `/tmp/fuzz_frames crash-...`); add the ones worth keeping to tests/fuzz/corpus/frames.
 * -dict=tests/fuzz/frames.dict (JSON tokens, protocol keys, boundary numbers) finds number
 * bugs much sooner: cJSON comes from the system, uninstrumented.
 *
 * Built without PROFD_LIBFUZZER (as meson does), replay.c's main() replays the files and
 * directories named on the command line: `meson test --suite fuzz` replays the corpus. With
 * clang, meson also builds fuzz_frames-libfuzzer (see tests/fuzz/meson.build and tests/README.md's
 * "Fuzzing"). */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto.h"

static const size_t limits[4] = {PROTO_MAX_REQUEST, 64, 4096, 1};

/* Largest chunk per mode; 0: the whole stream at once. */
static const size_t chunk_max[8] = {0, 1, 4, 16, 64, 512, 4096, 3};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Inputs longer than this are ignored: a frame takes at least 5 bytes. */
#define MAX_INPUT (1u << 16)
#define MAX_FRAMES (MAX_INPUT / 5 + 1)

/* One-shot reference decode of the whole stream. */
struct ref {
    size_t nframes;
    size_t off[MAX_FRAMES], len[MAX_FRAMES]; /* payload offset and length of each frame */
    size_t consumed;                         /* bytes of complete frames */
    int error;                               /* 0, -EBADMSG or -EMSGSIZE at offset consumed */
};

static void ref_decode(struct ref *r, const uint8_t *s, size_t n, size_t max)
{
    r->nframes = r->consumed = 0;
    r->error = 0;
    for (;;) {
        size_t rem = n - r->consumed;
        if (rem < PROTO_HEADER_SIZE)
            return;
        uint32_t len = be32(s + r->consumed);
        if (len == 0) {
            r->error = -EBADMSG;
            return;
        }
        if (len > max) {
            r->error = -EMSGSIZE;
            return;
        }
        if (rem - PROTO_HEADER_SIZE < len)
            return;
        FUZZ_ASSERT(r->nframes < MAX_FRAMES);
        r->off[r->nframes] = r->consumed + PROTO_HEADER_SIZE;
        r->len[r->nframes] = len;
        r->nframes++;
        r->consumed += PROTO_HEADER_SIZE + len;
    }
}

/* json_get_u64/i64 on one key of an object. */
static void check_field(const cJSON *obj, const char *key)
{
    const uint64_t US = 0x5a5a5a5a5a5a5a5aull;
    const int64_t IS = -0x5a5a5a5a5a5a5a5all;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    uint64_t u = US;
    int64_t i = IS;
    int ru = json_get_u64(obj, key, &u), ri = json_get_i64(obj, key, &i);
    FUZZ_ASSERT(ru == 1 || ru == 0 || ru == -EINVAL);
    FUZZ_ASSERT(ri == 1 || ri == 0 || ri == -EINVAL);
    /* 0 means absent or null, nothing else. */
    FUZZ_ASSERT((ru == 0) == (!it || cJSON_IsNull(it)));
    FUZZ_ASSERT((ri == 0) == (!it || cJSON_IsNull(it)));
    if (ru != 1)
        FUZZ_ASSERT(u == US);
    if (ri != 1)
        FUZZ_ASSERT(i == IS);
    if (ru == 1 || ri == 1)
        FUZZ_ASSERT(cJSON_IsNumber(it) || cJSON_IsString(it));
    if (cJSON_IsNumber(it)) {
        double d = it->valuedouble;
        if (ru == 1)
            FUZZ_ASSERT((double)u == d && d >= 0);
        if (ri == 1)
            FUZZ_ASSERT((double)i == d);
    }
    /* Where both can hold the value they agree (strings only when plain digits: whether
     * "-0" or " 1" is a u64 is the readers' choice). */
    bool plain = cJSON_IsNumber(it) || (cJSON_IsString(it) && it->valuestring &&
                                        isdigit((unsigned char)*it->valuestring));
    if (ri == 1 && i >= 0 && plain)
        FUZZ_ASSERT(ru == 1 && u == (uint64_t)i);
    if (ru == 1 && u <= (uint64_t)INT64_MAX)
        FUZZ_ASSERT(ri == 1 && i == (int64_t)u);
    if (ri == 1 && i < 0)
        FUZZ_ASSERT(ru == -EINVAL);
    if (cJSON_IsString(it) && it->valuestring) {
        int e = proto_error_from_name(it->valuestring);
        if (e >= 0)
            FUZZ_ASSERT(!strcmp(proto_error_name((enum proto_error)e), it->valuestring));
    }
}

static void walk(const cJSON *j)
{
    if (cJSON_IsObject(j)) {
        for (const cJSON *c = j->child; c; c = c->next) {
            FUZZ_ASSERT(c->string);
            check_field(j, c->string);
            walk(c);
        }
    } else if (cJSON_IsArray(j)) {
        for (const cJSON *c = j->child; c; c = c->next)
            walk(c);
    }
}

/* The payload parsed as a request would be, and re-encoded as a frame. */
static void check_payload(const char *p, size_t n, size_t max)
{
    cJSON *j = cJSON_ParseWithLength(p, n);
    if (j) {
        walk(j);
        cJSON_Delete(j);
    }
    struct strbuf sb = {0};
    FUZZ_ASSERT(frame_encode(&sb, p, n) == 0);
    FUZZ_ASSERT(sb.len == PROTO_HEADER_SIZE + n && be32((const uint8_t *)sb.buf) == n);
    struct frame_reader r;
    frame_reader_init(&r, max);
    FUZZ_ASSERT(frame_reader_feed(&r, sb.buf, sb.len) == 0);
    const char *q;
    size_t m;
    FUZZ_ASSERT(frame_reader_next(&r, &q, &m) == 1 && m == n && !memcmp(p, q, n));
    FUZZ_ASSERT(frame_reader_pending(&r) == 0);
    frame_reader_finish(&r);
    strbuf_finish(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > MAX_INPUT)
        return 0;
    size_t max = limits[data[0] & 3], cmax = chunk_max[(data[0] >> 2) & 7];
    uint32_t rng = 0x9e3779b9u ^ data[1] ^ (uint32_t)size << 8;
    const uint8_t *s = data + 2;
    size_t n = size - 2;

    static struct ref ref;
    ref_decode(&ref, s, n, max);

    struct frame_reader r;
    frame_reader_init(&r, max);
    size_t fed = 0, consumed = 0, k = 0;
    int error = 0;
    while (fed < n && !error) {
        size_t chunk = n - fed;
        if (cmax) {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            size_t c = 1 + rng % cmax;
            if (c < chunk)
                chunk = c;
        }
        FUZZ_ASSERT(frame_reader_feed(&r, s + fed, chunk) == 0);
        fed += chunk;
        for (;;) {
            const char *p = NULL;
            size_t len = 0;
            int got = frame_reader_next(&r, &p, &len);
            if (got == 1) {
                FUZZ_ASSERT(k < ref.nframes);
                FUZZ_ASSERT(len == ref.len[k] && len >= 1 && len <= max);
                FUZZ_ASSERT(ref.off[k] + len <= fed);
                FUZZ_ASSERT(!memcmp(p, s + ref.off[k], len));
                consumed = ref.off[k] + len;
                k++;
                FUZZ_ASSERT(frame_reader_pending(&r) == fed - consumed);
                check_payload(p, len, max);
                continue;
            }
            FUZZ_ASSERT(frame_reader_pending(&r) == fed - consumed);
            if (got == 0) {
                /* Incomplete: a header or a payload is still missing bytes. */
                size_t rem = fed - consumed;
                FUZZ_ASSERT(rem < PROTO_HEADER_SIZE ||
                            rem < PROTO_HEADER_SIZE + (size_t)be32(s + consumed));
                break;
            }
            FUZZ_ASSERT(got == -EBADMSG || got == -EMSGSIZE);
            FUZZ_ASSERT(got == ref.error && k == ref.nframes && consumed == ref.consumed);
            /* The error is sticky. */
            FUZZ_ASSERT(frame_reader_next(&r, &p, &len) == got);
            error = got;
            break;
        }
    }
    if (!error) {
        FUZZ_ASSERT(k == ref.nframes && consumed == ref.consumed && ref.error == 0);
        FUZZ_ASSERT(frame_reader_pending(&r) == n - consumed);
    }
    frame_reader_finish(&r);
    return 0;
}
