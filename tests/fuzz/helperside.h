/* helperside.h: the helper's request handling (daemon/symb/serve.c) driven in-process, its
 * answers decoded at once by profd's readers (symside.h), which must accept every one of
 * them: an honest helper's answer that profd refused would get the helper killed and the
 * module poisoned. Included by one harness each (static functions). */
#pragma once

#include "symside.h"

#include <unistd.h>

#include "dwarfsym.h"
#include "jitmap.h"
#include "serve.h"

#define MAX_REQ 4096

/* The request in progress, as profd would track it. */
struct exchange {
    struct symbolizer *s;
    uint32_t type;      /* SYMP_DESCRIBE, SYMP_LOOKUP or SYMP_JIT */
    struct module *m;   /* LOOKUP: the module */
    int pid;            /* JIT: the process */
    uint64_t ask[MAX_REQ];
    size_t n, got;
    bool final;
    int answers;
};

/* symb_serve's send callback: profd's reading of the answer. */
static int decode_answer(void *arg, const struct symp_w *w)
{
    struct exchange *x = arg;
    FUZZ_ASSERT(!w->overflow && w->len >= 4 && w->len <= SYMP_MAX_MSG);
    FUZZ_ASSERT(!x->final); /* nothing after the last answer */
    x->answers++;
    int k;
    switch (x->type) {
    case SYMP_DESCRIBE:
        FUZZ_ASSERT(check_description(w->buf, w->len) != -EPROTO);
        x->final = true;
        return 0;
    case SYMP_LOOKUP:
        k = symbolizer_take_frames(x->s, x->m, w->buf, w->len, x->ask, x->n, x->got, &x->final);
        break;
    case SYMP_JIT:
        k = symbolizer_take_jit_names(x->s, x->pid, w->buf, w->len, x->ask, x->n, x->got,
                                      &x->final);
        break;
    default:
        FUZZ_ASSERT(!"an answer to no request");
        return -EPROTO;
    }
    FUZZ_ASSERT(k >= 0);
    x->got += (size_t)k;
    if (x->final)
        FUZZ_ASSERT(x->got == x->n);
    return 0;
}

/* Serve one request built in w (with fd, taken) and check the exchange ended properly. */
static int serve_checked(struct symb_server *srv, struct exchange *x, const struct symp_w *w,
                         int fd)
{
    x->got = 0;
    x->final = false;
    x->answers = 0;
    int r = symb_serve(srv, w->buf, w->len, fd);
    FUZZ_ASSERT(r == 0 || r == -EPROTO);
    if (r == 0 && (x->type == SYMP_DESCRIBE || x->type == SYMP_LOOKUP || x->type == SYMP_JIT))
        FUZZ_ASSERT(x->final);
    if (r == 0 && x->type == SYMP_LOOKUP)
        for (size_t i = 0; i < x->n; i++)
            FUZZ_ASSERT(cached(x->s, x->m, x->ask[i]));
    if (r == 0 && x->type == SYMP_JIT)
        for (size_t i = 0; i < x->n; i++) {
            const char *name;
            FUZZ_ASSERT(symbolizer_jit_cached(x->s, x->pid, x->ask[i], &name));
            FUZZ_ASSERT(!name || (*name && strlen(name) <= SYMP_MAX_STR));
        }
    return r;
}

/* A LOOKUP request for offs[0..n) of module m (new: with its file on fd and its path). */
static void put_lookup(struct symp_w *w, const struct module *m, bool new_mod, const char *path,
                       const uint64_t *offs, size_t n)
{
    symp_w_init(w, SYMP_LOOKUP);
    symp_put_u64(w, m->id);
    symp_put_u32(w, new_mod ? SYMP_LOOKUP_NEW : 0);
    if (new_mod)
        symp_put_str(w, path);
    symp_put_u32(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        symp_put_u64(w, offs[i]);
}
