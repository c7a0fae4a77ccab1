/* profile.c: ownership of a symbolized profile (freeing it) and small lookups on it. */
#include "profile.h"

#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* Free every string and array the profile owns and zero it, so that a second call, or a call
 * on a profile that was only zeroed (or half built when an allocation failed), is harmless. */
void profile_free(struct profile *p)
{
    if (!p)
        return;
    free(p->comm);
    free(p->mode);
    free(p->sampler);
    free(p->exe);
    free(p->txn.id);
    free(p->txn.name);
    free(p->txn.trace_id);
    for (size_t i = 0; p->frames && i < p->nframes; i++) {
        free(p->frames[i].function);
        free(p->frames[i].file);
        free(p->frames[i].module);
        free(p->frames[i].pymodule);
    }
    free(p->frames);
    for (size_t i = 0; p->stacks && i < p->nstacks; i++)
        free(p->stacks[i].frames);
    free(p->stacks);
    free(p->samples);
    for (size_t i = 0; p->ctxs && i < p->nctxs; i++)
        free(p->ctxs[i].attrs);
    free(p->ctxs);
    for (size_t i = 0; p->attr_keys && i < p->nattr_keys; i++)
        free(p->attr_keys[i]);
    free(p->attr_keys);
    for (size_t i = 0; p->threads && i < p->nthreads; i++)
        free(p->threads[i].name);
    free(p->threads);
    for (size_t i = 0; p->images && i < p->nimages; i++)
        free(p->images[i].code_file);
    free(p->images);
    for (size_t i = 0; p->txn_paths && i < p->ntxn_paths; i++)
        free(p->txn_paths[i]);
    free(p->txn_paths);
    for (size_t i = 0; p->spans && i < p->nspans; i++) {
        free(p->spans[i].name);
        free(p->spans[i].trace_id);
        free(p->spans[i].span_id);
    }
    free(p->spans);
    memset(p, 0, sizeof(*p));
}

/* Name of thread tid. A tid listed twice (a slice builder that appended a thread again after
 * a rename) answers with its first entry, so every format names a thread the same way. */
const char *profile_thread_name(const struct profile *p, int32_t tid)
{
    if (!p || !p->threads)
        return NULL;
    for (size_t i = 0; i < p->nthreads; i++)
        if (p->threads[i].tid == tid)
            return p->threads[i].name;
    return NULL;
}

/* The frame's name as every format shows it (formats escape it as their syntax needs). */
int profile_frame_name(struct strbuf *sb, const struct profile_frame *f)
{
    if (f->python) {
        const char *fn = f->function ? f->function : "<unknown>";
        if (f->pymodule && *f->pymodule)
            return strbuf_printf(sb, "%s.%s", f->pymodule, fn);
        return strbuf_puts(sb, fn);
    }
    if (f->function && *f->function)
        return strbuf_puts(sb, f->function);
    if (f->module && *f->module) {
        const char *base = strrchr(f->module, '/');
        base = base && base[1] ? base + 1 : f->module;
        return strbuf_printf(sb, "[%s+0x%" PRIx64 "]", base, f->module_off);
    }
    return strbuf_puts(sb, "[unknown]");
}

/* Length of the valid UTF-8 sequence at s (as Rust's str::from_utf8 accepts it: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 if the byte at s starts none. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* A copy of s that is valid UTF-8: invalid sequences become U+FFFD, as Rust's
 * String::from_utf8_lossy and browsers' decoders make them. NULL on ENOMEM. */
char *profile_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    size_t len = strlen((const char *)u), bad = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(u + i);
        bad += n == 0;
        i += n ? n : 1;
    }
    char *fixed = malloc(len + 2 * bad + 1);
    if (!fixed)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(u + i);
        if (n) {
            memcpy(fixed + o, u + i, n);
            o += n;
            i += n;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    fixed[o] = '\0';
    return fixed;
}

const char *profile_path_name(unsigned path)
{
    static const char *const names[PATH_COUNT] = {
        [PATH_PERF] = "perf", [PATH_PROC] = "proc", [PATH_PTRACE] = "ptrace", [PATH_REUSED] = "reused"};
    return path < PATH_COUNT ? names[path] : "?";
}

int profile_describe_sampling(const struct profile *p, struct strbuf *out)
{
    int r = strbuf_printf(out, "sampled by profd: %s at %u Hz, sampler %s; %zu samples:",
                  p->mode ? p->mode : "?", p->hz, p->sampler ? p->sampler : "?", p->nsamples);
    for (unsigned i = 0; i < PATH_COUNT; i++)
        r |= strbuf_printf(out, "%s %s %" PRIu64, i ? "," : "", profile_path_name(i),
                           p->by_path[i]);
    return r ? -ENOMEM : 0;
}

void profile_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int profile_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int profile_random_id(uint8_t bytes[16], char hex[33])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(bytes + got, 16 - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    bytes[6] = (uint8_t)((bytes[6] & 0x0f) | 0x40); /* version 4: never the nil uuid */
    bytes[8] = (uint8_t)((bytes[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    profile_hex(bytes, 16, hex);
    return 0;
}

const uint8_t *profile_ctx_attr(const struct profile_ctx *c, unsigned key, size_t *len)
{
    const uint8_t *found = NULL;
    for (size_t at = 0; at + 2 <= c->attrs_len && at + 2 + c->attrs[at + 1] <= c->attrs_len;
         at += 2 + c->attrs[at + 1])
        if (c->attrs[at] == key) {
            found = c->attrs + at + 2;
            *len = c->attrs[at + 1];
        }
    return found;
}

void profile_ctx_attr_name(const struct profile *p, unsigned key, char *out, size_t size)
{
    if (key < p->nattr_keys && p->attr_keys && p->attr_keys[key] && *p->attr_keys[key])
        snprintf(out, size, "%s", p->attr_keys[key]);
    else
        snprintf(out, size, "otel.attr.%u", key);
}
