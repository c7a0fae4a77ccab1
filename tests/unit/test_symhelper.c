/* test_symhelper.c: profd's side of the symbolizer against helpers that misbehave: one that
 * crashes, hangs, exits at start, speaks another version, or sends malformed answers (frames
 * without a function, lengths past the message, NUL in names, counts that do not add up,
 * another module's id, paths in a debuglink). profd must read none of it, kill the helper,
 * say why, keep its own state sound, and symbolize again with a good helper.
 *
 * This program is also the fake helper: symhelper starts it through a symbolic link named
 * fake-MODE (argv[0] says which misbehaviour). The module under test is this program itself,
 * described by the real helper ($PROFD_SYMBOLIZER). */
#include "fsaccess.h"
#include "modules.h"
#include "symbols.h"
#include "symhelper.h"
#include "symproto.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

/* ---- the fake helper ---- */

static struct symp_w w;
static uint8_t buf[SYMP_MAX_MSG];

static void send_w(void)
{
    if (symp_send(3, &w, -1) < 0)
        _exit(0);
}

/* Answer one LOOKUP according to mode. */
static void fake_lookup(const char *mode, struct symp_r *r)
{
    uint64_t id = symp_get_u64(r);
    uint32_t flags = symp_get_u32(r);
    if (flags & SYMP_LOOKUP_NEW) {
        const char *p;
        uint32_t l;
        symp_get_str(r, &p, &l);
    }
    uint32_t n = symp_get_u32(r);
    uint64_t offs[64];
    for (uint32_t i = 0; i < n && i < 64; i++)
        offs[i] = symp_get_u64(r);
    if (!strcmp(mode, "crash"))
        raise(SIGSEGV);
    if (!strcmp(mode, "hang"))
        for (;;)
            pause();
    if (!strcmp(mode, "openescape") || !strcmp(mode, "openbuildid")) {
        symp_w_init(&w, SYMP_OPEN);
        bool esc = !strcmp(mode, "openescape");
        symp_put_u32(&w, esc ? SYMP_OPEN_DEBUGLINK : SYMP_OPEN_BUILD_ID);
        symp_put_u64(&w, id);
        if (esc)
            symp_put_bytes(&w, "../../etc/passwd", 16);
        else
            symp_put_bytes(&w, "\xab\xcd\xef\x01", 4);
        send_w();
        int fd;
        ssize_t k = symp_recv(3, buf, &fd, -1);
        struct symp_r a;
        symp_r_init(&a, buf, k > 0 ? (size_t)k : 0);
        symp_get_u32(&a);
        int err = (int)symp_get_u32(&a);
        char got[64] = "";
        if (fd >= 0) {
            ssize_t m = read(fd, got, sizeof(got) - 1);
            got[m > 0 ? m : 0] = '\0';
            got[strcspn(got, "\n")] = '\0';
            close(fd);
        }
        static char name[128];
        snprintf(name, sizeof(name), "open_%d_%s", -err, got);
        symp_w_init(&w, SYMP_FRAMES);
        symp_put_u64(&w, id);
        symp_put_u32(&w, 0);
        symp_put_u32(&w, n);
        symp_put_u32(&w, 1);
        for (uint32_t i = 0; i < n; i++) {
            symp_put_u32(&w, SYMP_SRC_DWARF);
            symp_put_u32(&w, 1);
            symp_put_u32(&w, 1);
            symp_put_u32(&w, 0);
            symp_put_str(&w, name);
            symp_put_str(&w, NULL);
        }
        send_w();
        return;
    }
    bool wrongid = !strcmp(mode, "wrongid"), short_count = !strcmp(mode, "shortcount");
    symp_w_init(&w, SYMP_FRAMES);
    symp_put_u64(&w, wrongid ? id + 1 : id);
    symp_put_u32(&w, 0);
    symp_put_u32(&w, short_count ? n - 1 : n);
    symp_put_u32(&w, 1);
    for (uint32_t i = 0; i < n - short_count; i++) {
        char fn[64];
        snprintf(fn, sizeof(fn), "fn_%llx", (unsigned long long)offs[i]);
        symp_put_u32(&w, SYMP_SRC_DWARF);
        if (!strcmp(mode, "badframes")) {
            symp_put_u32(&w, 0);
            continue;
        }
        symp_put_u32(&w, 1);
        symp_put_u32(&w, (uint32_t)(offs[i] & 0xffff));
        symp_put_u32(&w, !strcmp(mode, "inlinedlast"));
        if (!strcmp(mode, "badlen")) {
            symp_put_u32(&w, 60000);
            symp_put_u32(&w, UINT32_MAX);
            continue;
        }
        if (!strcmp(mode, "nul")) {
            symp_put_bytes(&w, "fn\0evil", 7);
            symp_put_str(&w, NULL);
            continue;
        }
        symp_put_str(&w, fn);
        symp_put_str(&w, "fake.c");
    }
    send_w();
}

static int fake_main(const char *mode)
{
    if (!strcmp(mode, "exit"))
        return 1;
    symp_w_init(&w, SYMP_HELLO);
    symp_put_u32(&w, !strcmp(mode, "badhello") ? SYMP_VERSION + 1 : SYMP_VERSION);
    send_w();
    for (;;) {
        int fd;
        ssize_t n = symp_recv(3, buf, &fd, -1);
        if (n <= 0)
            return 0;
        if (fd >= 0)
            close(fd);
        struct symp_r r;
        symp_r_init(&r, buf, (size_t)n);
        if (symp_get_u32(&r) == SYMP_LOOKUP)
            fake_lookup(mode, &r);
    }
}

/* ---- the test ---- */

static char dir[64];
static struct module *mod;

/* A symbolizer whose helper is the fake in mode. */
static struct symbolizer *with_mode(const char *mode)
{
    char link[128], self[4096];
    snprintf(link, sizeof(link), "%s/fake-%s", dir, mode);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    REQUIRE(n > 0);
    self[n] = '\0';
    unlink(link);
    REQUIRE(symlink(self, link) == 0);
    symhelper_configure(link, 0, 1 * NS_PER_SEC, false);
    return symbolizer_create();
}

/* One lookup must come back unknown, with err in the symbolizer's error. */
static void expect_failure(const char *mode, const char *err)
{
    struct symbolizer *s = with_mode(mode);
    symbolizer_begin(s, NULL);
    const struct sym_frame *f;
    enum sym_source src;
    CHECK_INT(symbolizer_lookup(s, mod, 0x1000, &f, &src), 1);
    CHECK(f[0].function == NULL && src == SYM_NONE);
    if (!strstr(symbolizer_error(s), err))
        fprintf(stderr, "%s: error \"%s\", expected \"%s\"\n", mode, symbolizer_error(s), err);
    CHECK_CONTAINS(symbolizer_error(s), err);
    struct symbolizer_stats st;
    symbolizer_get_stats(s, &st);
    CHECK(st.helper_failures >= 1 && st.helper_pid == 0);
    /* The rest of the request asks nothing more of a failed helper. */
    uint64_t starts = st.helper_starts;
    CHECK_INT(symbolizer_lookup(s, mod, 0x2000, &f, &src), 1);
    symbolizer_get_stats(s, &st);
    CHECK(st.helper_starts == starts);
    symbolizer_destroy(s);
}

static void test_misbehaving(void)
{
    /* Under ASan the helper's crash is its sanitizer's abort. */
    expect_failure("crash", "was killed by signal");
    expect_failure("hang", "did not answer within 1.0 s");
    expect_failure("exit", "closed its socket at start");
    expect_failure("badhello", "is not the version");
    expect_failure("badframes", "malformed");
    expect_failure("badlen", "malformed");
    expect_failure("nul", "malformed");
    expect_failure("wrongid", "malformed");
    expect_failure("inlinedlast", "malformed");
    expect_failure("shortcount", "answered 0 of 1 addresses");
}

static void test_good_and_poison(void)
{
    struct symbolizer *s = with_mode("good");
    symbolizer_begin(s, NULL);
    const struct sym_frame *f;
    enum sym_source src;
    CHECK_INT(symbolizer_lookup(s, mod, 0x1234, &f, &src), 1);
    CHECK_STR(f[0].function, "fn_1234");
    CHECK_STR(f[0].file, "fake.c");
    CHECK_INT(f[0].line, 0x1234);
    CHECK(src == SYM_DWARF && !symbolizer_error(s)[0]);
    symbolizer_destroy(s);

    /* A module that made the helper crash twice is not sent to it again. */
    s = with_mode("crash");
    for (int i = 0; i < 2; i++) {
        symbolizer_begin(s, NULL);
        symbolizer_lookup(s, mod, 0x1000, &f, &src);
        CHECK_CONTAINS(symbolizer_error(s), "was killed by signal");
    }
    struct symbolizer_stats st;
    symbolizer_get_stats(s, &st);
    symbolizer_begin(s, NULL);
    CHECK_INT(symbolizer_prefetch(s, mod, (uint64_t[]){0x3000}, 1), -EIO);
    CHECK_CONTAINS(symbolizer_error(s), "is not read any more");
    struct symbolizer_stats st2;
    symbolizer_get_stats(s, &st2);
    CHECK(st2.helper_starts == st.helper_starts);
    symbolizer_destroy(s);
}

/* Debug files the helper asks for: only a file name may come from the target's debuglink,
 * and files are opened with the requester's rights. */
static void test_debug_opens(void)
{
    struct symbolizer *s = with_mode("openescape");
    symbolizer_begin(s, NULL);
    const struct sym_frame *f;
    CHECK_INT(symbolizer_lookup(s, mod, 0x1000, &f, NULL), 1);
    CHECK_STR(f[0].function, "open_22_"); /* EINVAL: not a file name */
    symbolizer_destroy(s);

    /* A build-id debug file in a test debug directory, readable by root only. */
    char *bid = xasprintf("%s/.build-id/ab", dir);
    char *file = xasprintf("%s/cdef01.debug", bid);
    char *dbg = xasprintf("%s/.build-id", dir);
    REQUIRE(mkdir(dbg, 0755) == 0 && mkdir(bid, 0755) == 0);
    FILE *fp = fopen(file, "w");
    REQUIRE(fp);
    fputs("root_only_contents\n", fp);
    fclose(fp);
    REQUIRE(chmod(file, 0600) == 0);
    s = with_mode("openbuildid");
    symbolizer_set_debug_path(s, dir);
    symbolizer_begin(s, NULL); /* profd's own rights */
    CHECK_INT(symbolizer_lookup(s, mod, 0x1000, &f, NULL), 1);
    CHECK_STR(f[0].function, "open_0_root_only_contents");
    symbolizer_destroy(s);
    if (geteuid() == 0) {
        s = with_mode("openbuildid");
        symbolizer_set_debug_path(s, dir);
        gid_t g = 65534;
        struct fs_creds nobody = {.uid = 65534, .gid = 65534, .groups = &g, .ngroups = 1};
        symbolizer_begin(s, &nobody);
        CHECK_INT(symbolizer_lookup(s, mod, 0x1000, &f, NULL), 1);
        CHECK_STR(f[0].function, "open_13_"); /* EACCES: the client may not read it */
        symbolizer_destroy(s);
    }
    unlink(file);
    rmdir(bid);
    rmdir(dbg);
    free(file);
    free(bid);
    free(dbg);
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (!strncmp(base, "fake-", 5))
        return fake_main(base + 5);
    signal(SIGPIPE, SIG_IGN);
    snprintf(dir, sizeof(dir), "/tmp/profd-symhelper-XXXXXX");
    REQUIRE(mkdtemp(dir));
    REQUIRE(chmod(dir, 0755) == 0);
    int fds = check_count_fds();
    mod = module_open_path("/proc/self/exe");
    REQUIRE(mod);
    RUN(test_misbehaving);
    RUN(test_good_and_poison);
    RUN(test_debug_opens);
    module_unref(mod);
    modules_shutdown();
    CHECK_INT(check_count_fds(), fds);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_INT(system(cmd), 0);
    return check_status("test_symhelper");
}
