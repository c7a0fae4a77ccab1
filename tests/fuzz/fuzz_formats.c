/* fuzz_formats.c: libFuzzer target for the output formats' handling of hostile names
 * (daemon/formats/profile_collapsed.c, daemon/formats/profile_sentry.c).
 *
 * Input: a profile: threads, frames, stacks, samples, transactions and images, every name
 * (thread, function, file, module, transaction, process) any NUL-free bytes: invalid UTF-8,
 * ';', newlines, spaces, quotes, digits at the end. The collapsed output must still be one
 * line per distinct stack, "root;...;leaf COUNT", sorted and unique, with no control byte,
 * no empty frame, no frame with a blank at either end or a trailing " NUMBER" (flamegraph.pl
 * would read it as a count), each line with as many frames as its samples' stacks have valid
 * frames (plus the thread, plus the transactions when split by them), and the counts adding
 * up to the samples with a valid stack. The Sentry profile must print as valid UTF-8 JSON
 * that cJSON parses back, with the samples relay would keep, in time order, each with the
 * number of frames its stack has, every index in range, and the names as given (invalid
 * UTF-8 replaced by U+FFFD). The Sentry chunks hold those samples again (any window
 * length), each chunk valid UTF-8 JSON. The pprof output must gunzip to a profile.proto whose
 * string table starts with "", whose samples have two values each and name only locations
 * that exist, and whose counts add up to the samples with a valid stack. The speedscope
 * output must parse back with as many weights as samples in every profile, every frame
 * index in range, and its thread profiles holding every sample with a valid stack. The
 * flame graph must be UTF-8 XML text without control bytes whose names never open a tag,
 * its root box holding every sample with a valid stack. The summary's sample count is
 * those samples too.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_formats-libfuzzer -max_len=4096 -dict=tests/fuzz/formats.dict \
 *       /tmp/formats-new tests/fuzz/corpus/formats
 *
 * The plain build replays tests/fuzz/corpus/formats under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <zlib.h>

#include "log.h"
#include "profile.h"
#include "util.h"

/* A string from the input, or NULL when the flag byte before it says so. */
static char *maybe_str(struct fuzz_in *in, size_t max)
{
    if (fuzz_u8(in) % 5 == 0)
        return NULL;
    return fuzz_str(in, max);
}

static void build(struct fuzz_in *in, struct profile *p)
{
    memset(p, 0, sizeof(*p));
    uint8_t flags = fuzz_u8(in);
    p->thread_ids = flags & 1;
    p->by_transaction = flags & 2;
    p->pid = (int32_t)(fuzz_u8(in) % 8);
    p->comm = maybe_str(in, 32);
    p->exe = maybe_str(in, 64);
    p->start_ns = fuzz_u64(in) % (1ull << 62);
    p->end_ns = p->start_ns + (fuzz_u8(in) & 0x80 ? fuzz_u64(in) % (60 * NS_PER_SEC)
                                                  : fuzz_u16(in) * NS_PER_MS);
    p->realtime_offset_ns = (int64_t)(fuzz_u64(in) % (1ull << 62));
    p->hz = 101;
    p->period_ns = NS_PER_SEC / 101;

    p->nthreads = fuzz_u8(in) % 6;
    p->threads = xcalloc(p->nthreads + 1, sizeof(*p->threads));
    for (size_t i = 0; i < p->nthreads; i++) {
        p->threads[i].tid = (int32_t)(fuzz_u8(in) % 8) - 1;
        p->threads[i].name = fuzz_str(in, 40);
    }
    p->nframes = fuzz_u8(in) % 12;
    p->frames = xcalloc(p->nframes + 1, sizeof(*p->frames));
    for (size_t i = 0; i < p->nframes; i++) {
        struct profile_frame *f = &p->frames[i];
        f->function = maybe_str(in, 80);
        f->file = maybe_str(in, 60);
        f->module = maybe_str(in, 60);
        f->line = (int16_t)fuzz_u16(in);
        f->addr = fuzz_u8(in) & 1 ? fuzz_u64(in) : fuzz_u16(in);
        f->module_off = fuzz_u32(in);
        uint8_t b = fuzz_u8(in);
        f->inlined = b & 1;
        f->jit = b & 2;
        f->in_app = b & 4;
    }
    p->nstacks = fuzz_u8(in) % 10;
    p->stacks = xcalloc(p->nstacks + 1, sizeof(*p->stacks));
    for (size_t i = 0; i < p->nstacks; i++) {
        uint32_t n = fuzz_u8(in) % 8;
        if (n == 7) { /* a stack without its array */
            p->stacks[i].n = 3;
            continue;
        }
        p->stacks[i].n = n;
        p->stacks[i].frames = xcalloc(n + 1, sizeof(uint32_t));
        for (uint32_t k = 0; k < n; k++)
            p->stacks[i].frames[k] = fuzz_u8(in) % (p->nframes + 2);
    }
    /* Transaction paths as slice.c makes them: names (without the separator) joined. */
    p->ntxn_paths = 1 + fuzz_u8(in) % 4;
    p->txn_paths = xcalloc(p->ntxn_paths, sizeof(*p->txn_paths));
    for (size_t i = 1; i < p->ntxn_paths; i++) {
        struct strbuf sb = {0};
        int depth = 1 + fuzz_u8(in) % 3;
        for (int d = 0; d < depth; d++) {
            char *name = fuzz_str(in, 40);
            for (char *c = name; *c; c++)
                if (*c == PROFILE_TXN_SEP)
                    *c = '_';
            if (d)
                strbuf_append(&sb, (char[]){PROFILE_TXN_SEP}, 1);
            strbuf_puts(&sb, name);
            free(name);
        }
        p->txn_paths[i] = sb.buf ? sb.buf : xstrdup("");
    }
    p->nsamples = fuzz_u8(in) % 48;
    p->samples = xcalloc(p->nsamples + 1, sizeof(*p->samples));
    uint64_t t = p->start_ns - (fuzz_u8(in) & 1 ? 1000 : 0);
    for (size_t i = 0; i < p->nsamples; i++) {
        struct profile_sample *s = &p->samples[i];
        uint8_t b = fuzz_u8(in);
        t += b & 0x80 ? fuzz_u32(in) * 10000ull : (uint64_t)(b & 0x7f) * NS_PER_MS;
        s->t_ns = t;
        s->tid = (int32_t)(fuzz_u8(in) % 9) - 1;
        s->stack = fuzz_u8(in) % (p->nstacks + 1);
        s->txn_path = fuzz_u8(in) % (p->ntxn_paths + 1);
    }
    p->nspans = fuzz_u8(in) % 3;
    p->spans = xcalloc(p->nspans + 1, sizeof(*p->spans));
    for (size_t i = 0; i < p->nspans; i++) {
        p->spans[i].tid = (int32_t)(fuzz_u8(in) % 8);
        p->spans[i].start_ns = p->start_ns + fuzz_u32(in);
        p->spans[i].end_ns = fuzz_u8(in) & 1 ? UINT64_MAX : p->spans[i].start_ns + fuzz_u32(in);
        p->spans[i].name = fuzz_str(in, 40);
    }
    p->nimages = fuzz_u8(in) % 3;
    p->images = xcalloc(p->nimages + 1, sizeof(*p->images));
    for (size_t i = 0; i < p->nimages; i++) {
        struct profile_image *im = &p->images[i];
        im->code_file = fuzz_str(in, 60);
        size_t len;
        const uint8_t *id = fuzz_bytes(in, fuzz_u8(in) % (PROFILE_MAX_BUILD_ID + 1), &len);
        memcpy(im->build_id, id, len);
        im->build_id_len = len;
        im->addr = fuzz_u64(in);
        im->size = fuzz_u64(in);
    }
    p->txn.id = maybe_str(in, 40);
    p->txn.name = maybe_str(in, 40);
    p->txn.trace_id = maybe_str(in, 40);
    p->txn.active_tid = (int32_t)(fuzz_u8(in) % 8) - 1;
    p->txn.start_ns = p->start_ns + fuzz_u16(in);
    p->txn.end_ns = p->txn.start_ns + fuzz_u32(in);
}

/* ---- collapsed ---- */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Does the frame end in " DIGITS" or " DIGITS.DIGITS*", which flamegraph.pl's
 * /^(.*)\s+?(\d+(?:\.\d*)?)$/ would take for a count? */
static bool ends_in_number(const char *f, size_t n)
{
    size_t i = n;
    while (i > 0 && is_digit(f[i - 1]))
        i--;
    if (i > 0 && f[i - 1] == '.') {
        size_t k = i - 1;
        while (k > 0 && is_digit(f[k - 1]))
            k--;
        return k < i - 1 && k > 0 && f[k - 1] == ' ';
    }
    return i < n && i > 0 && f[i - 1] == ' ';
}

static size_t txn_depth(const struct profile *p, uint32_t path)
{
    const char *s = path < p->ntxn_paths ? p->txn_paths[path] : NULL;
    if (!s)
        return 1; /* [no transaction] */
    size_t d = 1;
    for (; *s; s++)
        d += *s == PROFILE_TXN_SEP;
    return d;
}

static void check_collapsed(const struct profile *p, const char *out, size_t len)
{
    /* Expected frames per line, counted per sample. */
    uint64_t want[64] = {0}, valid = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack >= p->nstacks)
            continue;
        const struct profile_stack *st = &p->stacks[s->stack];
        size_t f = 1;
        for (uint32_t k = 0; st->frames && k < st->n; k++)
            f += st->frames[k] < p->nframes;
        if (p->by_transaction)
            f += txn_depth(p, s->txn_path);
        FUZZ_ASSERT(f < 64);
        want[f]++;
        valid++;
    }
    FUZZ_ASSERT(strlen(out) == len);
    FUZZ_ASSERT(len == 0 || out[len - 1] == '\n');
    const char *line = out, *prev = NULL;
    size_t prevlen = 0;
    uint64_t total = 0;
    while (line < out + len) {
        const char *nl = strchr(line, '\n');
        /* "STACK COUNT" */
        const char *sp = NULL;
        for (const char *c = nl; c > line; c--)
            if (c[-1] == ' ') {
                sp = c - 1;
                break;
            }
        FUZZ_ASSERT(sp && sp > line && sp + 1 < nl);
        uint64_t count = 0;
        for (const char *c = sp + 1; c < nl; c++) {
            FUZZ_ASSERT(is_digit(*c));
            count = count * 10 + (uint64_t)(*c - '0');
        }
        FUZZ_ASSERT(count >= 1);
        total += count;
        size_t slen = (size_t)(sp - line), frames = 0;
        for (size_t i = 0; i < slen; i++)
            FUZZ_ASSERT((unsigned char)line[i] >= 0x20 && line[i] != 0x7f);
        for (const char *f = line; f <= sp;) {
            const char *e = memchr(f, ';', (size_t)(sp - f));
            if (!e)
                e = sp;
            size_t fl = (size_t)(e - f);
            FUZZ_ASSERT(fl > 0 && f[0] != ' ' && f[fl - 1] != ' ' && !ends_in_number(f, fl));
            frames++;
            f = e + 1;
        }
        FUZZ_ASSERT(frames < 64 && want[frames] >= count);
        want[frames] -= count;
        /* Sorted and merged: each line's text differs from, and follows, the previous one. */
        if (prev) {
            size_t m = prevlen < slen ? prevlen : slen;
            int c = memcmp(prev, line, m);
            FUZZ_ASSERT(c < 0 || (c == 0 && prevlen < slen));
        }
        prev = line;
        prevlen = slen;
        line = nl + 1;
    }
    FUZZ_ASSERT(total == valid);
}

/* ---- sentry ---- */

/* Length of the valid UTF-8 sequence at s (RFC 3629), 0 if none starts there. */
static size_t utf8_len(const unsigned char *s, size_t left)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!n || n > left)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    uint32_t cp = s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++)
        cp = cp << 6 | (s[i] & 0x3f);
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static bool valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left) {
        size_t n = utf8_len(u, left);
        if (!n)
            return false;
        u += n;
        left -= n;
    }
    return true;
}

/* s with each invalid byte replaced by U+FFFD, as String::from_utf8_lossy would (per
 * byte, as profile_sentry.c does). */
static char *lossy(const char *s)
{
    struct strbuf sb = {0};
    const unsigned char *u = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left) {
        size_t n = utf8_len(u, left);
        if (n) {
            strbuf_append(&sb, u, n);
        } else {
            strbuf_puts(&sb, "\xef\xbf\xbd");
            n = 1;
        }
        u += n;
        left -= n;
    }
    return sb.buf ? sb.buf : xstrdup("");
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* The string member k of o equals name (lossily converted), or is absent for NULL/"". */
static void check_name(const cJSON *o, const char *k, const char *name)
{
    const cJSON *v = get(o, k);
    if (!name || !*name) {
        FUZZ_ASSERT(!v);
        return;
    }
    FUZZ_ASSERT(cJSON_IsString(v));
    char *want = lossy(name);
    FUZZ_ASSERT(!strcmp(v->valuestring, want));
    free(want);
}

struct kept {
    uint64_t elapsed;
    size_t order;
};

static int cmp_kept(const void *a, const void *b)
{
    const struct kept *x = a, *y = b;
    if (x->elapsed != y->elapsed)
        return x->elapsed < y->elapsed ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void check_sentry(const struct profile *p, cJSON *root)
{
    char *text = cJSON_PrintUnformatted(root);
    FUZZ_ASSERT(text);
    if (!valid_utf8(text))
        fprintf(stderr, "not UTF-8: %s\n", text);
    FUZZ_ASSERT(valid_utf8(text));
    cJSON *j = cJSON_Parse(text);
    FUZZ_ASSERT(j);
    const cJSON *prof = get(j, "profile");
    const cJSON *samples = get(prof, "samples"), *stacks = get(prof, "stacks"),
                *frames = get(prof, "frames");
    FUZZ_ASSERT(cJSON_IsArray(samples) && cJSON_IsArray(stacks) && cJSON_IsArray(frames));
    int nstacks = cJSON_GetArraySize(stacks), nframes = cJSON_GetArraySize(frames);

    /* The samples relay keeps, in the order they must come. */
    uint64_t span = p->end_ns > p->start_ns ? p->end_ns - p->start_ns : 0;
    if (span > 30 * NS_PER_SEC)
        span = 30 * NS_PER_SEC;
    if (!span)
        span = 1;
    struct kept *k = xcalloc(p->nsamples + 1, sizeof(*k));
    size_t nk = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->t_ns < p->start_ns || s->t_ns - p->start_ns > span || s->stack >= p->nstacks ||
            s->tid < 0)
            continue;
        k[nk++] = (struct kept){s->t_ns - p->start_ns, i};
    }
    qsort(k, nk, sizeof(*k), cmp_kept);
    FUZZ_ASSERT(cJSON_GetArraySize(samples) == (int)nk);
    size_t i = 0;
    const cJSON *so;
    cJSON_ArrayForEach(so, samples) {
        const struct profile_sample *s = &p->samples[k[i].order];
        const cJSON *sid = get(so, "stack_id"), *tid = get(so, "thread_id"),
                    *el = get(so, "elapsed_since_start_ns");
        FUZZ_ASSERT(cJSON_IsNumber(sid) && sid->valuedouble >= 0 && sid->valuedouble < nstacks);
        FUZZ_ASSERT(cJSON_IsString(tid) && strtol(tid->valuestring, NULL, 10) == s->tid);
        FUZZ_ASSERT(cJSON_IsString(el) &&
                    strtoull(el->valuestring, NULL, 10) == k[i].elapsed);
        /* Its stack: as many frames as the original's valid ones, the same functions. */
        const struct profile_stack *st = &p->stacks[s->stack];
        const cJSON *ost = cJSON_GetArrayItem(stacks, sid->valueint);
        FUZZ_ASSERT(cJSON_IsArray(ost));
        const cJSON *fi = ost->child;
        for (uint32_t f = 0; st->frames && f < st->n; f++) {
            if (st->frames[f] >= p->nframes)
                continue;
            FUZZ_ASSERT(fi && cJSON_IsNumber(fi) && fi->valueint >= 0 && fi->valueint < nframes);
            const cJSON *fo = cJSON_GetArrayItem(frames, fi->valueint);
            check_name(fo, "function", p->frames[st->frames[f]].function);
            check_name(fo, "module", p->frames[st->frames[f]].module);
            fi = fi->next;
        }
        FUZZ_ASSERT(!fi);
        i++;
    }
    free(k);
    /* Every thread with a name and a kept sample is named. */
    const cJSON *tm = get(prof, "thread_metadata"), *t;
    FUZZ_ASSERT(cJSON_IsObject(tm));
    cJSON_ArrayForEach(t, tm) {
        const char *name = profile_thread_name(p, (int32_t)strtol(t->string, NULL, 10));
        const cJSON *v = get(t, "name");
        FUZZ_ASSERT(name && cJSON_IsString(v));
        char *want = lossy(name);
        FUZZ_ASSERT(!strcmp(v->valuestring, want));
        free(want);
    }
    const cJSON *txn = get(j, "transaction");
    FUZZ_ASSERT(cJSON_IsObject(txn) && cJSON_IsString(get(txn, "name")) &&
                *get(txn, "name")->valuestring);
    FUZZ_ASSERT(cJSON_IsString(get(txn, "id")) && strlen(get(txn, "id")->valuestring) == 32);
    cJSON_Delete(j);
    free(text);
}

/* Samples with a stack the formats can use. */
static size_t valid_samples(const struct profile *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->nsamples; i++)
        n += p->samples[i].stack < p->nstacks;
    return n;
}

/* A protobuf reader over [p, end): enough of the wire format to check pprof's structure. */
struct pbr {
    const uint8_t *p, *end;
};

static bool pb_varint(struct pbr *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, and a varint value or a length-delimited body. */
static bool pb_field(struct pbr *r, uint64_t *field, uint64_t *v, struct pbr *body)
{
    uint64_t key;
    if (r->p >= r->end || !pb_varint(r, &key))
        return false;
    *field = key >> 3;
    if ((key & 7) == 0)
        return pb_varint(r, v);
    FUZZ_ASSERT((key & 7) == 2);
    FUZZ_ASSERT(pb_varint(r, v) && *v <= (uint64_t)(r->end - r->p));
    body->p = r->p;
    body->end = r->p + *v;
    r->p += *v;
    return true;
}

static void check_pprof(const struct profile *p, const struct strbuf *gz)
{
    FUZZ_ASSERT(gz->len >= 18 && (uint8_t)gz->buf[0] == 0x1f && (uint8_t)gz->buf[1] == 0x8b);
    z_stream z = {0};
    FUZZ_ASSERT(inflateInit2(&z, 15 + 16) == Z_OK);
    size_t cap = 1 << 16, len = 0;
    uint8_t *raw = xmalloc(cap);
    z.next_in = (Bytef *)gz->buf;
    z.avail_in = (uInt)gz->len;
    int zr;
    do {
        if (len == cap)
            raw = xrealloc(raw, cap *= 2);
        z.next_out = raw + len;
        z.avail_out = (uInt)(cap - len);
        zr = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
    } while (zr == Z_OK);
    FUZZ_ASSERT(zr == Z_STREAM_END);
    inflateEnd(&z);

    struct pbr r = {raw, raw + len}, body, sub;
    uint64_t field, v, nsamples = 0, count = 0, nstrings = 0, *locs = NULL;
    size_t nlocs = 0;
    bool first_empty = false;
    /* Locations first (they may follow the samples). */
    while (pb_field(&r, &field, &v, &body)) {
        if (field == 4) {
            uint64_t f2, id = 0;
            while (pb_field(&body, &f2, &v, &sub))
                if (f2 == 1)
                    id = v;
            FUZZ_ASSERT(id != 0);
            locs = xrealloc(locs, (nlocs + 1) * sizeof(*locs));
            locs[nlocs++] = id;
        } else if (field == 6) {
            if (nstrings++ == 0)
                first_empty = body.p == body.end;
        }
    }
    FUZZ_ASSERT(nstrings > 0 && first_empty);
    r = (struct pbr){raw, raw + len};
    while (pb_field(&r, &field, &v, &body)) {
        if (field != 2)
            continue;
        nsamples++;
        uint64_t f2, nvalues = 0;
        while (pb_field(&body, &f2, &v, &sub)) {
            if (f2 == 1) {
                uint64_t id;
                while (sub.p < sub.end) {
                    FUZZ_ASSERT(pb_varint(&sub, &id));
                    bool found = false;
                    for (size_t i = 0; i < nlocs && !found; i++)
                        found = locs[i] == id;
                    FUZZ_ASSERT(found);
                }
            } else if (f2 == 2) {
                uint64_t x;
                while (sub.p < sub.end) {
                    FUZZ_ASSERT(pb_varint(&sub, &x));
                    if (nvalues++ == 0)
                        count += x;
                }
            }
        }
        FUZZ_ASSERT(nvalues == 2);
    }
    FUZZ_ASSERT(count == valid_samples(p));
    FUZZ_ASSERT(nsamples <= valid_samples(p));
    free(locs);
    free(raw);
}

static void check_speedscope(const struct profile *p, cJSON *root)
{
    char *text = cJSON_PrintUnformatted(root);
    FUZZ_ASSERT(text && valid_utf8(text));
    cJSON *j = cJSON_Parse(text);
    FUZZ_ASSERT(j);
    int nframes = cJSON_GetArraySize(get(get(j, "shared"), "frames"));
    const cJSON *prof;
    size_t in_threads = 0;
    cJSON_ArrayForEach(prof, get(j, "profiles")) {
        const cJSON *samples = get(prof, "samples"), *weights = get(prof, "weights"), *s, *f;
        FUZZ_ASSERT(cJSON_GetArraySize(samples) == cJSON_GetArraySize(weights));
        cJSON_ArrayForEach(s, samples) {
            cJSON_ArrayForEach(f, s) {
                FUZZ_ASSERT(cJSON_IsNumber(f) && f->valueint >= 0 && f->valueint < nframes);
            }
        }
        /* A thread's profile is "NAME (tid N)"; a transaction's ends "(tid N, at T s)". */
        const cJSON *name = get(prof, "name");
        FUZZ_ASSERT(cJSON_IsString(name));
        const char *tid = strrchr(name->valuestring, '(');
        const char *close = tid ? strchr(tid, ')') : NULL;
        bool thread = tid && !strncmp(tid, "(tid ", 5) && close && close[1] == '\0' &&
                      !strchr(tid, ',');
        if (thread)
            in_threads += (size_t)cJSON_GetArraySize(samples);
    }
    /* Thread profiles: every usable sample once. */
    FUZZ_ASSERT(in_threads == valid_samples(p));
    cJSON_Delete(j);
    free(text);
}

static void check_flamegraph(const struct profile *p, const struct strbuf *svg)
{
    FUZZ_ASSERT(svg->buf && strlen(svg->buf) == svg->len && valid_utf8(svg->buf));
    for (size_t i = 0; i < svg->len; i++) {
        unsigned char c = (unsigned char)svg->buf[i];
        FUZZ_ASSERT(c >= 0x20 || c == '\n');
    }
    /* Names are escaped: nothing between <title> and </title>, or <text class="n" ...> and
     * </text>, opens a tag. */
    for (const char *t = strstr(svg->buf, "<title>"); t; t = strstr(t + 1, "<title>")) {
        const char *end = strstr(t, "</title>");
        FUZZ_ASSERT(end && !memchr(t + 7, '<', (size_t)(end - t - 7)));
    }
    for (const char *t = strstr(svg->buf, "<text class=\"n\""); t;
         t = strstr(t + 1, "<text class=\"n\"")) {
        const char *gt = strchr(t, '>'), *end = strstr(t, "</text>");
        FUZZ_ASSERT(gt && end && gt < end && !memchr(gt + 1, '<', (size_t)(end - gt - 1)));
    }
    size_t n = valid_samples(p);
    static const char first[] = "<g class=\"f\" data-s=\"0\" data-n=\"";
    const char *root = strstr(svg->buf, first);
    if (n) {
        FUZZ_ASSERT(root && strtoull(root + sizeof(first) - 1, NULL, 10) == n);
    } else {
        FUZZ_ASSERT(!root);
    }
}

static void check_chunks(const struct profile *p, cJSON *chunks)
{
    size_t n = 0, want = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, chunks) {
        char *text = cJSON_PrintUnformatted(c);
        FUZZ_ASSERT(text && valid_utf8(text));
        free(text);
        FUZZ_ASSERT(cJSON_IsString(get(c, "version")) && !strcmp(get(c, "version")->valuestring, "2"));
        n += (size_t)cJSON_GetArraySize(get(get(c, "profile"), "samples"));
    }
    for (size_t i = 0; i < p->nsamples; i++)
        want += p->samples[i].stack < p->nstacks && p->samples[i].tid >= 0 &&
                p->samples[i].t_ns >= p->start_ns;
    FUZZ_ASSERT(n == want);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    log_init("fuzz_formats", LOG_LVL_ERR); /* malformed ids are warned about */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    struct fuzz_in in = {data, size};
    struct profile p;
    build(&in, &p);
    struct strbuf out = {0};
    FUZZ_ASSERT(profile_write_collapsed(&p, &out) == 0);
    check_collapsed(&p, out.buf ? out.buf : "", out.len);
    strbuf_finish(&out);
    cJSON *s = profile_to_sentry(&p);
    FUZZ_ASSERT(s);
    check_sentry(&p, s);
    cJSON_Delete(s);
    cJSON *chunks = profile_to_sentry_chunks(&p);
    FUZZ_ASSERT(chunks);
    check_chunks(&p, chunks);
    cJSON_Delete(chunks);
    out.len = 0;
    FUZZ_ASSERT(profile_write_pprof(&p, &out) == 0);
    check_pprof(&p, &out);
    strbuf_finish(&out);
    cJSON *ss = profile_to_speedscope(&p);
    FUZZ_ASSERT(ss);
    check_speedscope(&p, ss);
    cJSON_Delete(ss);
    FUZZ_ASSERT(profile_write_flamegraph(&p, &out) == 0);
    check_flamegraph(&p, &out);
    strbuf_finish(&out);
    cJSON *sum = profile_to_summary(&p, 0, NULL, false);
    FUZZ_ASSERT(sum && get(sum, "samples")->valuedouble == (double)valid_samples(&p));
    cJSON_Delete(sum);
    profile_free(&p);
    return 0;
}
