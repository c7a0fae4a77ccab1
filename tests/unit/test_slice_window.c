/* test_slice_window.c: a slice request's window (daemon/slice.c slice_window), without a
 * daemon: the last N ns up to now or to the process's exit, from/to with their defaults (the
 * oldest sample, now, the exit), a window that ends before the oldest sample, from after to
 * refused, and a Sentry profile's window never before the attach. */
#include "check.h"
#include "slice.h"

#include <errno.h>

#define S 1000000000ull

/* A live target attached at 100 s, its oldest sample at 110 s, now 200 s. */
static struct slice_window_in live(void)
{
    return (struct slice_window_in){.now_ns = 200 * S, .have_oldest = true,
                                    .oldest_ns = 110 * S, .attach_ns = 100 * S};
}

static void test_last(void)
{
    struct slice_window_in in = live();
    uint64_t from = 1, to = 1;
    in.has_last = true;
    in.last_ns = 30 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 170 * S); /* the last 30 s ... */
    CHECK_U64(to, 200 * S);   /* ... up to now */
    /* Longer than there has been time: from the clock's start (the samples say where the
     * buffer begins; the window does not invent a start). */
    in.last_ns = 500 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 0);
    CHECK_U64(to, 200 * S);
    /* An exited process: up to its exit, not now. */
    in.exited = true;
    in.exit_ns = 150 * S;
    in.last_ns = 10 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 140 * S);
    CHECK_U64(to, 150 * S);
}

static void test_defaults(void)
{
    struct slice_window_in in = live();
    uint64_t from = 1, to = 1;
    /* Nothing given: the whole buffer, from its oldest sample to now. */
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 110 * S);
    CHECK_U64(to, 200 * S);
    /* An empty buffer: from the clock's start. */
    in.have_oldest = false;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 0);
    CHECK_U64(to, 200 * S);
    in.have_oldest = true;
    /* Only from: up to now; only to: from the oldest sample. */
    in.has_from = true;
    in.from_ns = 120 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 120 * S);
    CHECK_U64(to, 200 * S);
    in.has_from = false;
    in.has_to = true;
    in.to_ns = 130 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 110 * S);
    CHECK_U64(to, 130 * S);
    /* Only from, the process exited: up to its exit. */
    in.has_to = false;
    in.has_from = true;
    in.exited = true;
    in.exit_ns = 160 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 120 * S);
    CHECK_U64(to, 160 * S);
}

static void test_before_the_oldest(void)
{
    struct slice_window_in in = live();
    uint64_t from = 1, to = 1;
    /* A window that ends before the oldest sample, from not given: empty, at its end (not
     * refused: the caller asked for nothing wrong). */
    in.has_to = true;
    in.to_ns = 105 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 105 * S);
    CHECK_U64(to, 105 * S);
}

static void test_from_after_to(void)
{
    struct slice_window_in in = live();
    uint64_t from = 7, to = 7;
    in.has_from = in.has_to = true;
    in.from_ns = 150 * S;
    in.to_ns = 140 * S;
    CHECK_INT(slice_window(&in, &from, &to), -EINVAL);
    CHECK_U64(from, 7); /* untouched */
    CHECK_U64(to, 7);
    /* from after now, to not given: refused too. */
    in.has_to = false;
    in.from_ns = 300 * S;
    CHECK_INT(slice_window(&in, &from, &to), -EINVAL);
    /* from == to: an empty window, not an error. */
    in.has_to = true;
    in.from_ns = in.to_ns = 140 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 140 * S);
    CHECK_U64(to, 140 * S);
}

static void test_from_attach(void)
{
    struct slice_window_in in = live();
    uint64_t from = 1, to = 1;
    in.has_last = true;
    in.last_ns = 150 * S; /* back to 50 s, before the attach at 100 s */
    in.from_attach = true;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 100 * S);
    CHECK_U64(to, 200 * S);
    /* Other formats keep the window asked for. */
    in.from_attach = false;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 50 * S);
    /* A window wholly before the attach stays as it is (empty of samples, its times as
     * asked). */
    in.from_attach = true;
    in.has_last = false;
    in.has_from = in.has_to = true;
    in.from_ns = 10 * S;
    in.to_ns = 90 * S;
    CHECK_INT(slice_window(&in, &from, &to), 0);
    CHECK_U64(from, 10 * S);
    CHECK_U64(to, 90 * S);
}

int main(void)
{
    RUN(test_last);
    RUN(test_defaults);
    RUN(test_before_the_oldest);
    RUN(test_from_after_to);
    RUN(test_from_attach);
    return check_status("test_slice_window");
}
