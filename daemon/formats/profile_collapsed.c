/* profile_collapsed.c: collapsed ("folded") stacks, one line per distinct thread and stack.
 *
 * The readers are flamegraph.pl, inferno and speedscope (see shared/formats.md), and the
 * conventions are those of stackcollapse-perf.pl, which turns `perf script` into this format:
 * the thread name (spaces made '_') is the root, frames follow root first, an unresolved frame
 * is [module+0xOFF] (or [unknown]), inlined and JIT frames carry _[i] and _[j], and a ';'
 * inside a name becomes ':'. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One (thread, stack) pair; samples sorted on it form runs that become lines. */
struct key {
    uint32_t path; /* transactions (by_transaction), or the context (by_span) */
    bool late;     /* (by_span) the context was read after the sample */
    int32_t tid;
    uint32_t stack;
};

struct line {
    char *text; /* "THREAD;root;...;leaf", without the count */
    uint64_t count;
};

/* Order keys by thread, then stack. */
static int cmp_key(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    if (x->path != y->path)
        return x->path < y->path ? -1 : 1;
    if (x->late != y->late)
        return x->late < y->late ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return 0;
}

/* Order lines by their text, bytewise, so the output does not depend on sample order. */
static int cmp_line(const void *a, const void *b)
{
    const struct line *x = a, *y = b;
    return strcmp(x->text, y->text);
}

/* An ASCII digit, what \d matches in flamegraph.pl and speedscope. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Where the space is in a trailing " 12" or " 1.5" of s[0..len), or len if there is none.
 *
 * flamegraph.pl splits a line with /^(.*)\s+?(\d+(?:\.\d*)?)$/ and then tries the same regex
 * on the stack part to find a second column for differential graphs: a leaf named "tick 42"
 * would turn "app;tick 42 7" into stack "app;tick" with counts 42 and 7, silently. */
static size_t trailing_number_space(const char *s, size_t len)
{
    size_t i = len;
    while (i > 0 && is_digit(s[i - 1]))
        i--;
    if (i > 0 && s[i - 1] == '.') {
        /* \d+\.\d*: at least one digit must precede the dot. */
        size_t dot = i - 1, k = dot;
        while (k > 0 && is_digit(s[k - 1]))
            k--;
        if (k < dot && k > 0 && s[k - 1] == ' ')
            return k - 1;
        return len;
    }
    if (i < len && i > 0 && s[i - 1] == ' ')
        return i - 1;
    return len;
}

/* Append s, mapped so it cannot break a line: ';' (the frame separator) becomes ':' as
 * stackcollapse does, control characters (a newline would end the line) become '_', and with
 * `thread` spaces become '_' as stackcollapse-perf does with the comm. */
static int put_name(struct strbuf *sb, const char *s, bool thread)
{
    size_t n = strlen(s);
    int r = strbuf_reserve(sb, n);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ';')
            c = ':';
        else if (c < 0x20 || c == 0x7f || (thread && c == ' '))
            c = '_';
        sb->buf[sb->len++] = (char)c;
    }
    sb->buf[sb->len] = '\0';
    return 0;
}

/* Fix the frame that occupies sb->buf[start..len): readers split on ';' and trim nothing, so
 * a name with a leading or trailing space would be a different frame from the same name
 * elsewhere, and a trailing " NUMBER" is read as a count (see trailing_number_space). */
static void fix_edges(struct strbuf *sb, size_t start)
{
    char *f = sb->buf + start;
    size_t len = sb->len - start;
    if (len == 0)
        return;
    if (f[0] == ' ')
        f[0] = '_';
    if (f[len - 1] == ' ')
        f[len - 1] = '_';
    size_t sp = trailing_number_space(f, len);
    if (sp < len)
        f[sp] = '_';
}

/* Append the root of a line: the thread's name, or "name-TID" when threads are kept apart.
 * A thread missing from p->threads is labelled with the process name, as perf labels a
 * sample with the comm it has. */
static int put_thread(struct strbuf *sb, const struct profile *p, int32_t tid)
{
    const char *name = profile_thread_name(p, tid);
    if (!name || !*name)
        name = p->comm;
    if (!name || !*name)
        name = "[unknown]";
    size_t start = sb->len;
    int r = put_name(sb, name, true);
    if (r == 0 && p->thread_ids)
        r = strbuf_printf(sb, "-%" PRId32, tid);
    if (r == 0)
        fix_edges(sb, start);
    return r;
}

/* Append one frame as stackcollapse-perf names it: its name (profile_frame_name), made safe
 * for the format, and _[j] or _[i] after a JIT or inlined function's. */
static int put_frame(struct strbuf *sb, const struct profile_frame *f)
{
    struct strbuf name = {0};
    size_t start = sb->len;
    int r = profile_frame_name(&name, f);
    if (r == 0)
        r = put_name(sb, name.buf ? name.buf : "", false);
    strbuf_finish(&name);
    bool named = !f->python && f->function && *f->function;
    if (r == 0 && named && f->jit)
        r = strbuf_puts(sb, "_[j]");
    else if (r == 0 && named && f->inlined)
        r = strbuf_puts(sb, "_[i]");
    if (r == 0)
        fix_edges(sb, start);
    return r;
}

/* A root frame "[PREFIXNAME];" before a line's thread (name made safe as frames are). */
static int put_root(struct strbuf *sb, const char *prefix, const char *name)
{
    size_t start = sb->len;
    int r = strbuf_puts(sb, "[");
    if (r == 0)
        r = strbuf_puts(sb, prefix);
    if (r == 0)
        r = put_name(sb, name, false);
    if (r == 0)
        r = strbuf_puts(sb, "]");
    if (r == 0)
        fix_edges(sb, start);
    if (r == 0)
        r = strbuf_puts(sb, ";");
    return r;
}

/* Split by transaction: a root frame per transaction open on the thread, outermost first,
 * "[txn NAME]", or "[no transaction]". */
static int put_txns(struct strbuf *sb, const struct profile *p, uint32_t path)
{
    const char *s = path < p->ntxn_paths ? p->txn_paths[path] : NULL;
    if (!s)
        return strbuf_puts(sb, "[no transaction];");
    int r = 0;
    while (r == 0 && s) {
        const char *end = strchr(s, PROFILE_TXN_SEP);
        size_t n = end ? (size_t)(end - s) : strlen(s);
        char *name = strndup(s, n);
        if (!name)
            return -ENOMEM;
        r = put_root(sb, "txn ", name);
        free(name);
        s = end ? end + 1 : NULL;
    }
    return r;
}

/* Split by span: a root frame "[span SPAN_ID VALUE...]" (its attributes' values, by key
 * index; " (read late)" where the context was read after the sample), or "[no span]". */
static int put_span(struct strbuf *sb, const struct profile *p, uint32_t ctx, bool late)
{
    if (!ctx || ctx > p->nctxs)
        return strbuf_puts(sb, "[no span];");
    const struct profile_ctx *c = &p->ctxs[ctx - 1];
    struct strbuf name = {0};
    int r = strbuf_printf(&name, "span %s", c->span_hex);
    for (unsigned k = 0; r == 0 && k < 256; k++) {
        size_t len;
        const uint8_t *v = profile_ctx_attr(c, k, &len);
        if (v)
            r = strbuf_printf(&name, " %.*s", (int)len, (const char *)v);
    }
    if (r == 0 && late)
        r = strbuf_puts(&name, " (read late)");
    if (r == 0)
        r = put_root(sb, "", name.buf);
    strbuf_finish(&name);
    return r;
}

/* Render "THREAD;root;...;leaf" for one key (with its transactions first when split by
 * them). Frame indices out of range are skipped: the sample still counts, under the frames
 * that are known. */
static int render(struct strbuf *sb, const struct profile *p, const struct key *k)
{
    int r = p->by_transaction ? put_txns(sb, p, k->path) : p->by_span ? put_span(sb, p, k->path, k->late)
                                                                     : 0;
    if (r == 0)
        r = put_thread(sb, p, k->tid);
    const struct profile_stack *st = &p->stacks[k->stack];
    uint32_t n = st->frames ? st->n : 0;
    for (uint32_t i = n; r == 0 && i-- > 0;) {
        uint32_t fi = st->frames[i]; /* leaf first in the profile: walk it backwards */
        if (fi >= p->nframes)
            continue;
        r = strbuf_puts(sb, ";");
        if (r == 0)
            r = put_frame(sb, &p->frames[fi]);
    }
    return r;
}

/* Count samples per distinct (thread, stack) pair, render each pair once, then merge the
 * pairs whose text is equal (same-named threads, duplicate stacks, different addresses in
 * the same function) and print them sorted. On failure out is left as it was. */
int profile_write_collapsed(const struct profile *p, struct strbuf *out)
{
    size_t base = out->len;
    struct key *keys = NULL;
    struct line *lines = NULL;
    size_t nkeys = 0, nlines = 0;
    struct strbuf sb = {0};
    int r = -ENOMEM;

    keys = malloc((p->nsamples ? p->nsamples : 1) * sizeof(*keys));
    if (!keys)
        goto out;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack >= p->nstacks) /* a broken slice: drop the sample rather than guess */
            continue;
        keys[nkeys++] = (struct key){
            .path = p->by_transaction ? s->txn_path : p->by_span ? s->ctx : 0,
            .late = p->by_span && s->ctx_late, .tid = s->tid, .stack = s->stack};
    }
    sort_array(keys, nkeys, sizeof(*keys), cmp_key);

    lines = malloc((nkeys ? nkeys : 1) * sizeof(*lines));
    if (!lines)
        goto out;
    for (size_t i = 0; i < nkeys;) {
        size_t j = i + 1;
        while (j < nkeys && cmp_key(&keys[i], &keys[j]) == 0)
            j++;
        r = render(&sb, p, &keys[i]);
        if (r < 0)
            goto out;
        r = -ENOMEM;
        char *text = strbuf_steal(&sb);
        if (!text)
            goto out;
        lines[nlines++] = (struct line){.text = text, .count = j - i};
        i = j;
    }
    sort_array(lines, nlines, sizeof(*lines), cmp_line);

    for (size_t i = 0; i < nlines;) {
        uint64_t count = lines[i].count;
        size_t j = i + 1;
        for (; j < nlines && strcmp(lines[i].text, lines[j].text) == 0; j++)
            count += lines[j].count;
        r = strbuf_printf(out, "%s %" PRIu64 "\n", lines[i].text, count);
        if (r < 0)
            goto out;
        i = j;
    }
    r = 0;
out:
    if (r < 0 && out->buf) {
        out->len = base;
        out->buf[base] = '\0';
    }
    for (size_t i = 0; i < nlines; i++)
        free(lines[i].text);
    free(lines);
    free(keys);
    strbuf_finish(&sb);
    return r;
}
