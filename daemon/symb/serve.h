/* serve.h: how profd-symbolizer answers profd's requests (symproto.h), apart from the process
 * around it (main.c: the socket, the sandbox, the loop), so that tests and fuzzers can drive
 * it in-process. */
#pragma once

#include <stddef.h>

#include "dwarfsym.h"
#include "jitmap.h"
#include "symproto.h"

struct symb_server {
    struct dsym *dsym;
    struct jitmaps *jit;
    /* Send one answer to profd: 0, or -errno (the helper then stops). */
    int (*send)(void *arg, const struct symp_w *w);
    void *send_arg;
    struct symp_w out; /* the answer being built */
    size_t count_at;   /* where its count and final flag go */
};

/* Handle one request of len bytes (its type included) and the descriptor that came with it
 * (-1 if none; always taken). Returns 0; -EPROTO for a request profd never sends (malformed,
 * unknown, a descriptor missing: a bug, logged, after which the helper gives up); or the send
 * callback's error. */
int symb_serve(struct symb_server *s, const void *msg, size_t len, int fd);
