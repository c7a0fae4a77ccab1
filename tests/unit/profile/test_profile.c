/* test_profile.c: the collapsed and Sentry outputs of hand-built profiles, checked exactly
 * here and by validators written from their readers' rules (check_collapsed.py,
 * check_sentry.py, run on the output when $PYTHON3 is set, as meson test sets it).
 *
 * `test_profile --emit-collapsed` and `--emit-sentry` print the outputs of the main test
 * profile, for test_checkers.py to break in known ways. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include "profile.h"
#include "util.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!g_ || strcmp(g_, w_) != 0) {                                                          \
            fprintf(stderr, "%s:%d: %s\n  got:  %s\n  want: %s\n", __FILE__, __LINE__, #got,       \
                    g_ ? g_ : "(null)", w_);                                                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- building profiles by hand ---- */

struct frame_spec {
    const char *function, *file;
    int line;
    const char *module;
    uint64_t addr, off;
    bool inlined, jit, in_app;
};

/* Append a frame; returns its index. */
static uint32_t add_frame(struct profile *p, struct frame_spec s)
{
    p->frames = xrealloc(p->frames, (p->nframes + 1) * sizeof(*p->frames));
    p->frames[p->nframes] = (struct profile_frame){
        .function = s.function ? xstrdup(s.function) : NULL,
        .file = s.file ? xstrdup(s.file) : NULL,
        .line = s.line,
        .module = s.module ? xstrdup(s.module) : NULL,
        .addr = s.addr,
        .module_off = s.off,
        .inlined = s.inlined,
        .jit = s.jit,
        .in_app = s.in_app,
    };
    return (uint32_t)p->nframes++;
}

/* A stack of n frame indices, leaf first. */
static uint32_t add_stack(struct profile *p, uint32_t n, ...)
{
    p->stacks = xrealloc(p->stacks, (p->nstacks + 1) * sizeof(*p->stacks));
    struct profile_stack *st = &p->stacks[p->nstacks];
    st->n = n;
    st->frames = n ? xcalloc(n, sizeof(uint32_t)) : NULL;
    va_list ap;
    va_start(ap, n);
    for (uint32_t i = 0; i < n; i++)
        st->frames[i] = va_arg(ap, uint32_t);
    va_end(ap);
    return (uint32_t)p->nstacks++;
}

/* A sample at `ms` milliseconds after 0 on the monotonic clock. */
static void add_sample(struct profile *p, uint64_t ms, int32_t tid, uint32_t stack)
{
    p->samples = xrealloc(p->samples, (p->nsamples + 1) * sizeof(*p->samples));
    p->samples[p->nsamples++] =
        (struct profile_sample){.t_ns = ms * NS_PER_MS, .tid = tid, .stack = stack};
}

/* Name thread tid. */
static void add_thread(struct profile *p, int32_t tid, const char *name)
{
    p->threads = xrealloc(p->threads, (p->nthreads + 1) * sizeof(*p->threads));
    p->threads[p->nthreads++] = (struct profile_thread){.tid = tid, .name = xstrdup(name)};
}

/* A mapped ELF image with a build-id of idlen bytes (none when 0). */
static void add_image(struct profile *p, const char *path, const uint8_t *id, size_t idlen,
                      uint64_t addr, uint64_t size)
{
    p->images = xrealloc(p->images, (p->nimages + 1) * sizeof(*p->images));
    struct profile_image *im = &p->images[p->nimages++];
    memset(im, 0, sizeof(*im));
    im->code_file = xstrdup(path);
    if (idlen)
        memcpy(im->build_id, id, idlen);
    im->build_id_len = idlen;
    im->addr = addr;
    im->size = size;
}

#define APP "/usr/bin/app"
#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"
#define LIBFOO "/usr/lib/x86_64-linux-gnu/libfoo.so"
#define CXX_NAME "std::vector<int, std::allocator<int> >::push_back(int const&)"
#define JIT_NAME "LazyCompile:*fib /srv/x.js:3"

/* The main test profile: a process "app" (pid 100) sampled from 1 s to 4 s with threads
 * that share a name, have ';', spaces or bad UTF-8 in theirs, are idle, or are unknown;
 * inlined, JIT, unresolved and module-less frames; awkward names; duplicate frames and
 * stacks. */
static void build_main(struct profile *p)
{
    memset(p, 0, sizeof(*p));
    p->pid = 100;
    p->comm = xstrdup("app");
    p->exe = xstrdup(APP);
    p->start_ns = 1 * NS_PER_SEC;
    p->end_ns = 4 * NS_PER_SEC;
    /* Realtime at start_ns is 1700000000.123456789 s (2023-11-14T22:13:20.123456789Z). */
    p->realtime_offset_ns = 1700000000123456789LL - (int64_t)p->start_ns;
    p->hz = 100;
    p->period_ns = 10 * NS_PER_MS;

    uint32_t f_main = add_frame(p, (struct frame_spec){"main", "/src/app.c", 10, APP, 0x401000,
                                                       0x1000, false, false, true});
    uint32_t f_compute = add_frame(p, (struct frame_spec){"compute", "/src/app.c", 20, APP,
                                                          0x401100, 0x1100, false, false, true});
    uint32_t f_square = add_frame(p, (struct frame_spec){"square", "/src/math.h", 3, APP, 0x401100,
                                                         0x1100, true, false, true});
    uint32_t f_libc = add_frame(
        p, (struct frame_spec){NULL, NULL, 0, LIBC, 0x7f1234529d90, 0x29d90, false, false, false});
    uint32_t f_anon = add_frame(
        p, (struct frame_spec){NULL, NULL, 0, NULL, 0x7f0000001000, 0, false, false, false});
    uint32_t f_jit = add_frame(
        p, (struct frame_spec){JIT_NAME, NULL, 0, NULL, 0x3e0000001234, 0, false, true, true});
    uint32_t f_cxx =
        add_frame(p, (struct frame_spec){CXX_NAME, "include/c++/12/bits/stl_vector.h", 1287, LIBFOO,
                                         0x7f5555001000, 0x1000, false, false, false});
    uint32_t f_semi = add_frame(
        p, (struct frame_spec){"weird;name", NULL, 0, APP, 0x401200, 0x1200, false, false, true});
    uint32_t f_ctl = add_frame(
        p, (struct frame_spec){"bad\tname\n", NULL, 0, APP, 0x401300, 0x1300, false, false, true});
    uint32_t f_tick = add_frame(
        p, (struct frame_spec){"tick 42", NULL, 0, APP, 0x401400, 0x1400, false, false, true});
    uint32_t f_compute2 = add_frame(p, (struct frame_spec){"compute", "/src/app.c", 20, APP,
                                                           0x401100, 0x1100, false, false, true});
    uint32_t f_start =
        add_frame(p, (struct frame_spec){"start_thread", NULL, 0, LIBC, 0x7f1234594ac3, 0x94ac3,
                                         false, false, false});
    uint32_t f_empty = add_frame(
        p, (struct frame_spec){"", NULL, 0, LIBC, 0x7f12345e0000, 0xe0000, false, false, false});
    uint32_t f_spin = add_frame(
        p, (struct frame_spec){"spin 1.5", NULL, 0, APP, 0x401500, 0x1500, false, false, true});

    uint32_t s_square = add_stack(p, 3, f_square, f_compute, f_main);
    uint32_t s_compute = add_stack(p, 2, f_compute, f_main);
    uint32_t s_libc = add_stack(p, 3, f_libc, f_compute, f_main);
    uint32_t s_idle = add_stack(p, 0);
    uint32_t s_jit = add_stack(p, 3, f_jit, f_anon, f_start);
    uint32_t s_cxx = add_stack(p, 3, f_cxx, f_semi, f_start);
    uint32_t s_compute2 = add_stack(p, 2, f_compute2, f_main); /* same as s_compute */
    uint32_t s_ctl = add_stack(p, 3, f_ctl, f_tick, f_start);
    uint32_t s_compute3 = add_stack(p, 2, f_compute, f_main); /* exact duplicate */
    uint32_t s_spin = add_stack(p, 3, f_empty, f_spin, f_start);

    add_thread(p, 100, "app");
    add_thread(p, 101, "worker 1");
    add_thread(p, 102, "worker 1");
    add_thread(p, 103, "io;loop");
    add_thread(p, 104, "idle");
    add_thread(p, 106, "bad\xff\xfename");
    /* tid 105 is not listed. */

    add_sample(p, 1000, 100, s_idle);
    add_sample(p, 1100, 100, s_square);
    add_sample(p, 1150, 101, s_jit);
    add_sample(p, 1150, 102, s_jit);
    add_sample(p, 1200, 100, s_compute);
    add_sample(p, 1250, 101, s_cxx);
    add_sample(p, 1300, 100, s_compute2);
    add_sample(p, 1350, 101, s_jit);
    add_sample(p, 1400, 100, s_compute3);
    add_sample(p, 1450, 102, s_ctl);
    add_sample(p, 1500, 100, s_libc);
    add_sample(p, 1600, 100, s_square);
    add_sample(p, 1700, 100, s_idle);
    add_sample(p, 2000, 103, s_spin);
    add_sample(p, 2000, 104, s_idle);
    add_sample(p, 2100, 106, s_compute);
    add_sample(p, 2200, 105, s_compute);
    add_sample(p, 2300, 106, s_compute);
    add_sample(p, 2500, 103, s_spin);
    add_sample(p, 3000, 103, s_spin);
    add_sample(p, 3000, 104, s_idle);

    static const uint8_t app_id[20] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                       11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    static const uint8_t libc_id[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
    add_image(p, APP, app_id, sizeof(app_id), 0x400000, 0x5000);
    add_image(p, LIBC, libc_id, sizeof(libc_id), 0x7f1234500000, 0x1c0000);
    add_image(p, LIBFOO, NULL, 0, 0x7f5555000000, 0x3000); /* no build-id */
}

/* Collapsed output of build_main, threads merged by name and then with their tids. */
static const char expected_merged[] = "app 2\n"
                                      "app;main;compute 4\n"
                                      "app;main;compute;[libc.so.6+0x29d90] 1\n"
                                      "app;main;compute;square_[i] 2\n"
                                      "bad\xff\xfename;main;compute 2\n"
                                      "idle 2\n"
                                      "io:loop;start_thread;spin_1.5;[libc.so.6+0xe0000] 3\n"
                                      "worker_1;start_thread;[unknown];" JIT_NAME "_[j] 3\n"
                                      "worker_1;start_thread;tick_42;bad_name_ 1\n"
                                      "worker_1;start_thread;weird:name;" CXX_NAME " 1\n";

static const char expected_tids[] = "app-100 2\n"
                                    "app-100;main;compute 3\n"
                                    "app-100;main;compute;[libc.so.6+0x29d90] 1\n"
                                    "app-100;main;compute;square_[i] 2\n"
                                    "app-105;main;compute 1\n"
                                    "bad\xff\xfename-106;main;compute 2\n"
                                    "idle-104 2\n"
                                    "io:loop-103;start_thread;spin_1.5;[libc.so.6+0xe0000] 3\n"
                                    "worker_1-101;start_thread;[unknown];" JIT_NAME "_[j] 2\n"
                                    "worker_1-101;start_thread;weird:name;" CXX_NAME " 1\n"
                                    "worker_1-102;start_thread;[unknown];" JIT_NAME "_[j] 1\n"
                                    "worker_1-102;start_thread;tick_42;bad_name_ 1\n";

/* ---- running the validators ---- */

/* Feed text to `$PYTHON3 $script args` and return its exit status; 77 when the validators
 * are not available (the binary run by hand without meson's environment). */
static int run_checker(const char *script_var, const char *args, const char *text, size_t len)
{
    const char *py = getenv("PYTHON3"), *script = getenv(script_var);
    if (!py || !*py || !script || !*script)
        return 77;
    char *cmd = xasprintf("'%s' '%s' %s", py, script, args);
    FILE *f = popen(cmd, "w");
    free(cmd);
    if (!f) {
        perror("popen");
        return -1;
    }
    fwrite(text, 1, len, f);
    int status = pclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Count a failure when the validator rejects text; note when it cannot run. */
static void check_with(const char *script_var, const char *args, const char *text, size_t len)
{
    int r = run_checker(script_var, args, text, len);
    if (r == 77) {
        fprintf(stderr, "note: %s not run ($PYTHON3 or $%s unset)\n", script_var, script_var);
        return;
    }
    if (r != 0) {
        fprintf(stderr, "%s rejected this output:\n%.*s\n", script_var, (int)len, text);
        failures++;
    }
}

/* ---- profile.c ---- */

/* profile_free on zeroed, NULL and built profiles, twice; profile_thread_name. */
static void test_free_and_names(void)
{
    struct profile z;
    memset(&z, 0, sizeof(z));
    profile_free(&z);
    profile_free(&z);
    profile_free(NULL);
    CHECK(profile_thread_name(&z, 1) == NULL);
    CHECK(profile_thread_name(NULL, 1) == NULL);

    struct profile p;
    build_main(&p);
    add_thread(&p, 101, "renamed"); /* a tid listed twice answers with its first name */
    CHECK_STR(profile_thread_name(&p, 101), "worker 1");
    CHECK_STR(profile_thread_name(&p, 103), "io;loop");
    CHECK(profile_thread_name(&p, 105) == NULL);
    profile_free(&p);
    CHECK(p.frames == NULL && p.nframes == 0 && p.comm == NULL);
    profile_free(&p); /* zeroed by the first call */
}

/* ---- collapsed ---- */

/* The exact collapsed text of build_main, merged by thread name and by tid. */
static void test_collapsed(void)
{
    struct profile p;
    build_main(&p);
    struct strbuf sb = {0};
    CHECK(profile_write_collapsed(&p, &sb) == 0);
    CHECK_STR(sb.buf, expected_merged);
    check_with("CHECK_COLLAPSED", "", sb.buf, sb.len);

    /* Appends: a second call adds the same lines after the first. */
    size_t len = sb.len;
    CHECK(profile_write_collapsed(&p, &sb) == 0);
    CHECK(sb.len == 2 * len && memcmp(sb.buf, sb.buf + len, len) == 0);
    strbuf_finish(&sb);

    p.thread_ids = true;
    CHECK(profile_write_collapsed(&p, &sb) == 0);
    CHECK_STR(sb.buf, expected_tids);
    check_with("CHECK_COLLAPSED", "", sb.buf, sb.len);
    strbuf_finish(&sb);

    /* The output does not depend on the order of the samples. */
    p.thread_ids = false;
    for (size_t i = 0; i < p.nsamples / 2; i++) {
        struct profile_sample t = p.samples[i];
        p.samples[i] = p.samples[p.nsamples - 1 - i];
        p.samples[p.nsamples - 1 - i] = t;
    }
    CHECK(profile_write_collapsed(&p, &sb) == 0);
    CHECK_STR(sb.buf, expected_merged);
    strbuf_finish(&sb);
    profile_free(&p);
}

/* Empty input, missing names, space-only names, bad indices, odd module paths. */
static void test_collapsed_edge_cases(void)
{
    struct profile p;
    memset(&p, 0, sizeof(p));
    struct strbuf sb = {0};
    CHECK(profile_write_collapsed(&p, &sb) == 0); /* nothing at all */
    CHECK(sb.len == 0);

    /* No comm, an unnamed thread, a name that is only spaces, a bad stack index (the
     * sample is dropped) and a bad frame index (the frame is skipped). */
    uint32_t f = add_frame(
        &p, (struct frame_spec){" lead and trail ", NULL, 0, NULL, 1, 0, false, false, false});
    uint32_t g =
        add_frame(&p, (struct frame_spec){NULL, NULL, 0, "/", 2, 0x10, false, false, false});
    uint32_t h = add_frame(
        &p, (struct frame_spec){NULL, NULL, 0, "/opt/v2/lib;a b.so", 3, 0x20, false, false, false});
    uint32_t k =
        add_frame(&p, (struct frame_spec){"x 1.", NULL, 0, NULL, 4, 0, false, false, false});
    uint32_t s0 = add_stack(&p, 4, f, 99, k, g);
    uint32_t s1 = add_stack(&p, 1, h);
    add_thread(&p, 7, "   ");
    add_sample(&p, 1, 7, s0);
    add_sample(&p, 2, 8, s1);
    add_sample(&p, 3, 8, 42);
    CHECK(profile_write_collapsed(&p, &sb) == 0);
    CHECK_STR(sb.buf, "[unknown];[lib:a b.so+0x20] 1\n"
                      "___;[/+0x10];x_1.;_lead and trail_ 1\n");
    check_with("CHECK_COLLAPSED", "", sb.buf, sb.len);
    strbuf_finish(&sb);
    profile_free(&p);
}

/* ---- Sentry ---- */

/* Member key of o (NULL-safe). */
static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* String member key of o, or NULL. */
static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Number member key of o, or -1. */
static double num(const cJSON *o, const char *key)
{
    const cJSON *v = get(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* 32 lowercase hex digits: how ids are sent. */
static bool is_hex32(const char *s)
{
    if (!s || strlen(s) != 32)
        return false;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* Build the Sentry profile of p, have check_sentry.py accept it (or, when !valid, reject it)
 * and return its text parsed back: what readers see, exact integers included. */
static cJSON *sentry(const struct profile *p, bool valid)
{
    cJSON *root = profile_to_sentry(p);
    CHECK(root != NULL);
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return NULL;
    int r = run_checker("CHECK_SENTRY", "", text, strlen(text));
    if (r == 77)
        fprintf(stderr, "note: check_sentry.py not run ($PYTHON3 or $CHECK_SENTRY unset)\n");
    else if (r != (valid ? 0 : 1)) {
        fprintf(stderr, "check_sentry.py %s this profile:\n%s\n", valid ? "rejected" : "accepted",
                text);
        failures++;
    }
    cJSON *doc = cJSON_Parse(text);
    CHECK(doc != NULL);
    free(text);
    return doc;
}

/* The frame whose function is name, or NULL. */
static const cJSON *frame_named(const cJSON *frames, const char *name)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, frames)
    {
        const char *fn = str(f, "function");
        if (fn && strcmp(fn, name) == 0)
            return f;
    }
    return NULL;
}

/* Every field of the Sentry profile of build_main. */
static void test_sentry_main(void)
{
    struct profile p;
    build_main(&p);
    cJSON *root = sentry(&p, true);
    if (!root) {
        profile_free(&p);
        return;
    }
    struct utsname un;
    uname(&un);

    CHECK_STR(str(root, "version"), "1");
    CHECK_STR(str(root, "platform"), "native");
    const char *eid = str(root, "event_id");
    CHECK(is_hex32(eid) && eid[12] == '4');
    CHECK_STR(str(root, "timestamp"), "2023-11-14T22:13:20.123456Z");
    CHECK_STR(str(get(root, "os"), "name"), "Linux");
    CHECK_STR(str(get(root, "os"), "version"), un.release);
    CHECK_STR(str(get(root, "device"), "architecture"), un.machine);
    CHECK(get(root, "runtime") == NULL);

    const cJSON *txn = get(root, "transaction");
    CHECK_STR(str(txn, "name"), "app");
    CHECK(is_hex32(str(txn, "id")) && is_hex32(str(txn, "trace_id")));
    CHECK(str(txn, "id") && eid && strcmp(str(txn, "id"), eid) != 0);
    CHECK(num(txn, "active_thread_id") == 100);
    CHECK(num(txn, "relative_start_ns") == 0);
    CHECK(num(txn, "relative_end_ns") == 3e9);

    /* Images: the two with a build-id. */
    const cJSON *images = get(get(root, "debug_meta"), "images");
    CHECK(cJSON_GetArraySize(images) == 2);
    const cJSON *app = cJSON_GetArrayItem(images, 0), *libc = cJSON_GetArrayItem(images, 1);
    CHECK_STR(str(app, "type"), "symbolic");
    CHECK_STR(str(app, "code_file"), APP);
    CHECK_STR(str(app, "debug_id"), "04030201-0605-0807-090a-0b0c0d0e0f10");
    CHECK_STR(str(app, "code_id"), "0102030405060708090a0b0c0d0e0f1011121314");
    CHECK_STR(str(app, "image_addr"), "0x400000");
    CHECK(num(app, "image_size") == 0x5000);
    CHECK_STR(str(libc, "debug_id"), "a4a3a2a1-a6a5-a8a7-0000-000000000000");
    CHECK_STR(str(libc, "code_id"), "a1a2a3a4a5a6a7a8");
    CHECK_STR(str(libc, "image_addr"), "0x7f1234500000");

    const cJSON *trace = get(root, "profile");
    const cJSON *frames = get(trace, "frames"), *stacks = get(trace, "stacks");
    const cJSON *samples = get(trace, "samples"), *threads = get(trace, "thread_metadata");
    /* 14 frames, one a duplicate of "compute"; 10 stacks, three the same. */
    CHECK(cJSON_GetArraySize(frames) == 13);
    CHECK(cJSON_GetArraySize(stacks) == 8);
    CHECK(cJSON_GetArraySize(samples) == 21);

    /* Frames in input order, duplicates merged into the first. */
    const cJSON *f0 = cJSON_GetArrayItem(frames, 0);
    CHECK_STR(str(f0, "function"), "main");
    CHECK_STR(str(f0, "abs_path"), "/src/app.c");
    CHECK_STR(str(f0, "filename"), "app.c");
    CHECK(num(f0, "lineno") == 10);
    CHECK_STR(str(f0, "module"), APP);
    CHECK_STR(str(f0, "instruction_addr"), "0x401000");
    CHECK(cJSON_IsTrue(get(f0, "in_app")));
    const cJSON *sq = frame_named(frames, "square");
    CHECK(sq && strcmp(str(sq, "instruction_addr"), "0x401100") == 0);
    const cJSON *cxx = frame_named(frames, CXX_NAME);
    CHECK(cxx && !get(cxx, "abs_path") && cJSON_IsFalse(get(cxx, "in_app")));
    CHECK_STR(str(cxx, "filename"), "include/c++/12/bits/stl_vector.h");
    const cJSON *anon = cJSON_GetArrayItem(frames, 4); /* the module-less unresolved one */
    CHECK(!get(anon, "function") && !get(anon, "module") && !get(anon, "lineno"));
    CHECK_STR(str(anon, "instruction_addr"), "0x7f0000001000");
    CHECK(frame_named(frames, "weird;name") && frame_named(frames, JIT_NAME));

    /* Every index in range; stacks leaf first: the first is square, compute, main. */
    const cJSON *st, *s;
    int nframes = cJSON_GetArraySize(frames), nstacks = cJSON_GetArraySize(stacks);
    cJSON_ArrayForEach(st, stacks)
    {
        const cJSON *i;
        cJSON_ArrayForEach(i, st) CHECK(i->valueint >= 0 && i->valueint < nframes);
    }
    const cJSON *st0 = cJSON_GetArrayItem(stacks, 0);
    CHECK(cJSON_GetArraySize(st0) == 3);
    CHECK_STR(str(cJSON_GetArrayItem(frames, cJSON_GetArrayItem(st0, 0)->valueint), "function"),
              "square");
    CHECK_STR(str(cJSON_GetArrayItem(frames, cJSON_GetArrayItem(st0, 2)->valueint), "function"),
              "main");

    /* Samples: sorted, thread_id and elapsed as decimal strings, relative to start_ns. */
    uint64_t prev = 0;
    cJSON_ArrayForEach(s, samples)
    {
        const char *tid = str(s, "thread_id"), *el = str(s, "elapsed_since_start_ns");
        CHECK(tid && el);
        if (!tid || !el)
            continue;
        uint64_t e = strtoull(el, NULL, 10);
        CHECK(e >= prev);
        prev = e;
        CHECK(num(s, "stack_id") >= 0 && num(s, "stack_id") < nstacks);
    }
    CHECK_STR(str(cJSON_GetArrayItem(samples, 0), "elapsed_since_start_ns"), "0");
    CHECK_STR(str(cJSON_GetArrayItem(samples, 0), "thread_id"), "100");
    CHECK_STR(str(cJSON_GetArrayItem(samples, 20), "elapsed_since_start_ns"), "2000000000");
    /* The two samples at 1150 ms keep their input order (101, then 102). */
    CHECK_STR(str(cJSON_GetArrayItem(samples, 2), "thread_id"), "101");
    CHECK_STR(str(cJSON_GetArrayItem(samples, 3), "thread_id"), "102");

    /* Names of the sampled threads that have one; bad UTF-8 replaced. */
    CHECK(cJSON_GetArraySize(threads) == 6);
    CHECK_STR(str(get(threads, "101"), "name"), "worker 1");
    CHECK_STR(str(get(threads, "103"), "name"), "io;loop");
    CHECK_STR(str(get(threads, "106"), "name"), "bad\xef\xbf\xbd\xef\xbf\xbdname");
    CHECK(get(threads, "105") == NULL);

    cJSON_Delete(root);

    /* Two calls give new event ids. */
    cJSON *a = sentry(&p, true), *b = sentry(&p, true);
    CHECK(a && b && strcmp(str(a, "event_id"), str(b, "event_id")) != 0);
    cJSON_Delete(a);
    cJSON_Delete(b);
    profile_free(&p);
}

/* A caller's transaction is passed on, normalized; ids relay would refuse are replaced. */
static void test_sentry_transaction(void)
{
    struct profile p;
    build_main(&p);
    p.txn.id = xstrdup("A2669CD2-C7E0-47ED-8298-4AAF9666A6B6");
    p.txn.name = xstrdup("GET /users");
    p.txn.trace_id = xstrdup("4705bd13368a499aaa48439dafd9cfb0");
    p.txn.active_tid = 101;
    cJSON *root = sentry(&p, true);
    const cJSON *txn = get(root, "transaction");
    CHECK_STR(str(txn, "id"), "a2669cd2c7e047ed82984aaf9666a6b6");
    CHECK_STR(str(txn, "name"), "GET /users");
    CHECK_STR(str(txn, "trace_id"), "4705bd13368a499aaa48439dafd9cfb0");
    CHECK(num(txn, "active_thread_id") == 101);
    cJSON_Delete(root);

    /* Ids relay would refuse (not a uuid, nil) are replaced rather than sent. */
    free(p.txn.id);
    free(p.txn.trace_id);
    p.txn.id = xstrdup("not-a-uuid");
    p.txn.trace_id = xstrdup("00000000000000000000000000000000");
    root = sentry(&p, true);
    txn = get(root, "transaction");
    CHECK(is_hex32(str(txn, "id")) && is_hex32(str(txn, "trace_id")));
    CHECK(strcmp(str(txn, "trace_id"), "00000000000000000000000000000000") != 0);
    cJSON_Delete(root);

    /* No name and no comm: the executable's basename. */
    free(p.txn.name);
    p.txn.name = NULL;
    free(p.comm);
    p.comm = NULL;
    root = sentry(&p, true);
    CHECK_STR(str(get(root, "transaction"), "name"), "app");
    cJSON_Delete(root);
    profile_free(&p);
}

/* A 40 s window: relay rejects a profile whose last sample is past 30 s, so it is cut. Also
 * samples before the window and after it, which cannot be expressed. */
static void test_sentry_window(void)
{
    struct profile p;
    memset(&p, 0, sizeof(p));
    p.pid = 50;
    p.comm = xstrdup("long");
    p.start_ns = 10 * NS_PER_SEC;
    p.end_ns = 50 * NS_PER_SEC;
    uint32_t f = add_frame(
        &p, (struct frame_spec){"work", NULL, 0, "/bin/long", 0x1000, 0x1000, false, false, true});
    uint32_t s = add_stack(&p, 1, f);
    add_thread(&p, 50, "long");
    add_thread(&p, 51, "helper");
    add_sample(&p, 9000, 50, s); /* before the window */
    for (uint64_t ms = 10000; ms <= 50000; ms += 100) {
        add_sample(&p, ms, 50, s);
        add_sample(&p, ms + 50, 51, s);
    }
    add_sample(&p, 51000, 50, s); /* after it */
    cJSON *root = sentry(&p, true);
    const cJSON *samples = get(get(root, "profile"), "samples");
    CHECK(num(get(root, "transaction"), "relative_end_ns") == 30e9);
    /* 10.0 s .. 40.0 s for tid 50 (301), 10.05 .. 39.95 s for tid 51 (300). */
    CHECK(cJSON_GetArraySize(samples) == 601);
    const cJSON *last = cJSON_GetArrayItem(samples, cJSON_GetArraySize(samples) - 1);
    CHECK_STR(str(last, "elapsed_since_start_ns"), "30000000000");
    cJSON_Delete(root);

    /* An empty window still gives relative_start_ns < relative_end_ns; its one sample is
     * too few for relay (a thread needs two). */
    p.end_ns = p.start_ns;
    root = sentry(&p, false);
    CHECK(num(get(root, "transaction"), "relative_end_ns") == 1);
    CHECK(cJSON_GetArraySize(get(get(root, "profile"), "samples")) == 1);
    cJSON_Delete(root);
    profile_free(&p);
}

/* Indices out of range in the input never reach the output. */
static void test_sentry_bad_indices(void)
{
    struct profile p;
    memset(&p, 0, sizeof(p));
    p.pid = 9;
    p.comm = xstrdup("bad");
    p.start_ns = 0;
    p.end_ns = NS_PER_SEC;
    uint32_t f = add_frame(&p, (struct frame_spec){"f", NULL, 0, NULL, 16, 0, false, false, true});
    uint32_t s0 = add_stack(&p, 3, f, 77, f);
    uint32_t unused = add_stack(&p, 1, 88);
    (void)unused;
    add_sample(&p, 10, 9, s0);
    add_sample(&p, 20, 9, 5); /* no such stack */
    add_sample(&p, 30, 9, s0);
    add_sample(&p, 40, -3, s0); /* not a tid relay can read */
    cJSON *root = sentry(&p, true);
    const cJSON *trace = get(root, "profile");
    CHECK(cJSON_GetArraySize(get(trace, "samples")) == 2);
    CHECK(cJSON_GetArraySize(get(trace, "stacks")) == 1);
    CHECK(cJSON_GetArraySize(cJSON_GetArrayItem(get(trace, "stacks"), 0)) == 2);
    CHECK(cJSON_GetArraySize(get(trace, "frames")) == 1);
    CHECK(get(root, "debug_meta") == NULL);
    cJSON_Delete(root);

    /* Nothing at all: a profile relay will refuse (NotEnoughSamples), but well formed. */
    struct profile z;
    memset(&z, 0, sizeof(z));
    root = sentry(&z, false);
    CHECK(root != NULL);
    CHECK(cJSON_GetArraySize(get(get(root, "profile"), "samples")) == 0);
    CHECK_STR(str(get(root, "transaction"), "name"), "profd");
    cJSON_Delete(root);
    profile_free(&p);
}

/* cJSON allocations fail after a budget: every failure must give NULL and ENOMEM and leak
 * nothing (ASan and valgrind see the leaks). */
static long alloc_budget = -1;

/* malloc for cJSON that fails once alloc_budget allocations are spent. */
static void *failing_malloc(size_t n)
{
    if (alloc_budget == 0)
        return NULL;
    if (alloc_budget > 0)
        alloc_budget--;
    return malloc(n);
}

/* Fail each cJSON allocation of profile_to_sentry in turn. */
static void test_sentry_oom(void)
{
    struct profile p;
    build_main(&p);
    cJSON_Hooks hooks = {.malloc_fn = failing_malloc, .free_fn = free};
    long n;
    for (n = 0; n < 100000; n++) {
        alloc_budget = n;
        cJSON_InitHooks(&hooks);
        errno = 0;
        cJSON *root = profile_to_sentry(&p);
        alloc_budget = -1;
        if (root) {
            cJSON_Delete(root);
            break;
        }
        CHECK(errno == ENOMEM);
    }
    cJSON_InitHooks(NULL);
    CHECK(n > 100); /* the failures were really injected, at every step */
    profile_free(&p);
}

/* Print the outputs of the main profile for test_checkers.py. */
static int emit(const char *what)
{
    struct profile p;
    build_main(&p);
    int r = 0;
    if (strcmp(what, "--emit-collapsed") == 0) {
        struct strbuf sb = {0};
        r = profile_write_collapsed(&p, &sb);
        if (r == 0)
            fwrite(sb.buf, 1, sb.len, stdout);
        strbuf_finish(&sb);
    } else if (strcmp(what, "--emit-sentry") == 0) {
        cJSON *root = profile_to_sentry(&p);
        char *text = root ? cJSON_Print(root) : NULL;
        if (text)
            printf("%s\n", text);
        else
            r = -ENOMEM;
        free(text);
        cJSON_Delete(root);
    } else {
        fprintf(stderr, "usage: test_profile [--emit-collapsed | --emit-sentry]\n");
        r = -EINVAL;
    }
    profile_free(&p);
    return r == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    /* A validator that exits before reading all its input must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1)
        return emit(argv[1]);

    test_free_and_names();
    test_collapsed();
    test_collapsed_edge_cases();
    test_sentry_main();
    test_sentry_transaction();
    test_sentry_window();
    test_sentry_bad_indices();
    test_sentry_oom();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("test_profile: all checks passed\n");
    return 0;
}
