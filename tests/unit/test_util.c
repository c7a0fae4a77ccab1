/* test_util.c: number and duration parsing edge cases, socket path precedence, strbuf
 * growth and formatting, read_file, clocks.
 */
#include "util.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_parse_u64(void)
{
    uint64_t v;
    static const struct {
        const char *s;
        int ret;
        uint64_t val;
    } cases[] = {
        {"0", 0, 0},
        {"1", 0, 1},
        {"007", 0, 7},
        {"18446744073709551615", 0, UINT64_MAX},
        {"18446744073709551616", -ERANGE, 0},
        {"99999999999999999999999", -ERANGE, 0},
        {"", -EINVAL, 0},
        {"-1", -EINVAL, 0},
        {"-0", -EINVAL, 0},
        {"+1", -EINVAL, 0},
        {"1.5", -EINVAL, 0},
        {"5x", -EINVAL, 0},
        {"x5", -EINVAL, 0},
        {"5 ", -EINVAL, 0},
        {"0x10", -EINVAL, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        v = 12345;
        int r = parse_u64(cases[i].s, &v);
        if (r != cases[i].ret || v != (r == 0 ? cases[i].val : 12345)) {
            fprintf(stderr, "parse_u64(\"%s\") = %d, %llu; want %d, %llu\n", cases[i].s, r,
                    (unsigned long long)v, cases[i].ret,
                    (unsigned long long)(cases[i].ret == 0 ? cases[i].val : 12345));
            check_failures++;
        }
    }
    CHECK_INT(parse_u64(NULL, &v), -EINVAL);
}

static void test_parse_int(void)
{
    int v;
    static const struct {
        const char *s;
        int ret;
        int val;
    } cases[] = {
        {"0", 0, 0},
        {"-1", 0, -1},
        {"+12", 0, 12},
        {"2147483647", 0, INT_MAX},
        {"-2147483648", 0, INT_MIN},
        {"2147483648", -ERANGE, 0},
        {"-2147483649", -ERANGE, 0},
        {"99999999999999999999999", -ERANGE, 0},
        {"", -EINVAL, 0},
        {"-", -EINVAL, 0},
        {"1.5", -EINVAL, 0},
        {"5x", -EINVAL, 0},
        {"12 ", -EINVAL, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        v = 777;
        int r = parse_int(cases[i].s, &v);
        if (r != cases[i].ret || v != (r == 0 ? cases[i].val : 777)) {
            fprintf(stderr, "parse_int(\"%s\") = %d, %d; want %d, %d\n", cases[i].s, r, v,
                    cases[i].ret, cases[i].ret == 0 ? cases[i].val : 777);
            check_failures++;
        }
    }
    CHECK_INT(parse_int(NULL, &v), -EINVAL);
}

static void test_parse_duration(void)
{
    static const struct {
        const char *s;
        int ret;
        uint64_t ns;
    } cases[] = {
        {"5", 0, 5 * NS_PER_SEC},
        {"0", 0, 0},
        {"5s", 0, 5 * NS_PER_SEC},
        {"1.5s", 0, 1500 * NS_PER_MS},
        {"1.5", 0, 1500 * NS_PER_MS},
        {".5s", 0, 500 * NS_PER_MS},
        {"250ms", 0, 250 * NS_PER_MS},
        {"0.5ms", 0, 500 * NS_PER_US},
        {"7us", 0, 7 * NS_PER_US},
        {"9ns", 0, 9},
        {"2m", 0, 120 * NS_PER_SEC},
        {"1h", 0, 3600 * NS_PER_SEC},
        {"1.25h", 0, 4500 * NS_PER_SEC},
        {"2500000h", 0, 2500000ull * 3600 * NS_PER_SEC},
        {"", -EINVAL, 0},
        {"-1", -EINVAL, 0},
        {"-1s", -EINVAL, 0},
        {"+1s", -EINVAL, 0},
        {"5x", -EINVAL, 0},
        {"5 s", -EINVAL, 0},
        {"5sec", -EINVAL, 0},
        {"5S", -EINVAL, 0},
        {"s", -EINVAL, 0},
        {"ms", -EINVAL, 0},
        {"nan", -EINVAL, 0},
        {"inf", -EINVAL, 0},
        {"1e400", -EINVAL, 0},
        {"3000000h", -ERANGE, 0},
        {"1e10", -ERANGE, 0},
        {"99999999999999999999", -ERANGE, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t v = 4242;
        int r = parse_duration_ns(cases[i].s, &v);
        if (r != cases[i].ret || v != (r == 0 ? cases[i].ns : 4242)) {
            fprintf(stderr, "parse_duration_ns(\"%s\") = %d, %llu; want %d, %llu\n", cases[i].s, r,
                    (unsigned long long)v, cases[i].ret,
                    (unsigned long long)(cases[i].ret == 0 ? cases[i].ns : 4242));
            check_failures++;
        }
    }
    uint64_t v;
    CHECK_INT(parse_duration_ns(NULL, &v), -EINVAL);
}

/* The path chosen by a forked child running as uid (root or not), with the given
 * environment; returns it malloc'd, or NULL. */
static char *socket_path_as(uid_t uid, const char *explicit_path, const char *profd_socket,
                            const char *xdg)
{
    int p[2];
    REQUIRE(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        if (uid != 0 && setresuid(uid, uid, uid) < 0)
            _exit(1);
        if (profd_socket)
            setenv("PROFD_SOCKET", profd_socket, 1);
        else
            unsetenv("PROFD_SOCKET");
        if (xdg)
            setenv("XDG_RUNTIME_DIR", xdg, 1);
        else
            unsetenv("XDG_RUNTIME_DIR");
        char *s = profd_socket_path(explicit_path);
        if (!s)
            _exit(1);
        ssize_t w = write(p[1], s, strlen(s));
        free(s);
        _exit(w < 0 ? 1 : 0);
    }
    close(p[1]);
    char buf[512];
    size_t off = 0;
    ssize_t n;
    while ((n = read(p[0], buf + off, sizeof(buf) - 1 - off)) > 0)
        off += (size_t)n;
    close(p[0]);
    buf[off] = '\0';
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return NULL;
    return xstrdup(buf);
}

#define CHECK_PATH(uid, expl, env, xdg, want)                                                      \
    do {                                                                                           \
        char *got_ = socket_path_as(uid, expl, env, xdg);                                          \
        CHECK_STR(got_, want);                                                                     \
        free(got_);                                                                                \
    } while (0)

/* Explicit, then $PROFD_SOCKET, then the root default, then $XDG_RUNTIME_DIR, then /tmp;
 * empty strings count as unset. The non-root cases run in a child as uid 65534. */
static void test_socket_path_precedence(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: checking the non-root order as uid %u only\n", geteuid());
        char want[64];
        snprintf(want, sizeof(want), "/tmp/profd-%u.sock", (unsigned)geteuid());
        CHECK_PATH(geteuid(), NULL, NULL, NULL, want);
        CHECK_PATH(geteuid(), NULL, NULL, "/run/user/9", "/run/user/9/profd.sock");
        return;
    }
    CHECK_PATH(0, "/x/explicit.sock", "/x/env.sock", "/run/user/9", "/x/explicit.sock");
    CHECK_PATH(0, NULL, "/x/env.sock", "/run/user/9", "/x/env.sock");
    CHECK_PATH(0, "", "/x/env.sock", NULL, "/x/env.sock");
    CHECK_PATH(0, NULL, NULL, "/run/user/9", "/run/profd/profd.sock");
    CHECK_PATH(0, NULL, "", NULL, "/run/profd/profd.sock");

    CHECK_PATH(65534, "/x/explicit.sock", "/x/env.sock", "/run/user/9", "/x/explicit.sock");
    CHECK_PATH(65534, NULL, "/x/env.sock", "/run/user/9", "/x/env.sock");
    CHECK_PATH(65534, NULL, NULL, "/run/user/9", "/run/user/9/profd.sock");
    CHECK_PATH(65534, NULL, "", "/run/user/9", "/run/user/9/profd.sock");
    CHECK_PATH(65534, NULL, NULL, NULL, "/tmp/profd-65534.sock");
    CHECK_PATH(65534, NULL, NULL, "", "/tmp/profd-65534.sock");
}

/* Byte by byte to 100 KB: contents intact, always NUL-terminated, capacity a power of two
 * that always has room for the terminator. */
static void test_strbuf_growth(void)
{
    struct strbuf sb = {0};
    bool ok = true;
    for (size_t i = 0; i < 100000 && ok; i++) {
        char c = (char)('a' + i % 26);
        if (strbuf_append(&sb, &c, 1) != 0 || sb.len != i + 1 || sb.buf[i] != c ||
            sb.buf[i + 1] != '\0' || sb.cap < sb.len + 1 || (sb.cap & (sb.cap - 1)) != 0) {
            fprintf(stderr, "append %zu: len %zu cap %zu\n", i, sb.len, sb.cap);
            ok = false;
        }
    }
    CHECK(ok);
    for (size_t i = 0; i < sb.len && ok; i++)
        ok = sb.buf[i] == (char)('a' + i % 26);
    CHECK(ok);
    CHECK(sb.cap <= 2 * (sb.len + 1));
    strbuf_finish(&sb);
    CHECK(sb.buf == NULL && sb.len == 0 && sb.cap == 0);

    /* Reserve grows once, then appends within it do not move the buffer. */
    CHECK_INT(strbuf_reserve(&sb, 5000), 0);
    CHECK(sb.cap >= 5001);
    char *before = sb.buf;
    for (int i = 0; i < 5000; i++)
        strbuf_append(&sb, "z", 1);
    CHECK(sb.buf == before);
    CHECK_INT(strbuf_puts(&sb, ""), 0);
    CHECK_U64(sb.len, 5000);
    strbuf_finish(&sb);

    /* An impossible size is refused, not wrapped around. */
    CHECK_INT(strbuf_reserve(&sb, SIZE_MAX / 2 + 1), -ENOMEM);
    CHECK(sb.buf == NULL && sb.len == 0);
}

/* printf: short results, results around the internal 256-byte buffer (outputs of 254 to
 * 258 bytes: the argument plus 5), and long ones, each appended after what is there. */
static void test_strbuf_printf_long_strings(void)
{
    static const size_t lens[] = {0, 1, 249, 250, 251, 252, 253, 256, 1000, 70000};
    for (size_t k = 0; k < ARRAY_SIZE(lens); k++) {
        size_t n = lens[k];
        char *s = xmalloc(n + 1);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)('A' + (i * 5) % 26);
        s[n] = '\0';
        struct strbuf sb = {0};
        CHECK_INT(strbuf_puts(&sb, "<<"), 0);
        CHECK_INT(strbuf_printf(&sb, "[%s|%d]", s, 42), 0);
        CHECK_INT(strbuf_printf(&sb, "%s", "end"), 0);
        size_t want = 2 + 1 + n + 4 + 3;
        CHECK_U64(sb.len, want);
        CHECK(sb.len == want && !memcmp(sb.buf, "<<[", 3) && !memcmp(sb.buf + 3, s, n) &&
              !strcmp(sb.buf + 3 + n, "|42]end"));
        CHECK_U64(strlen(sb.buf), want);
        strbuf_finish(&sb);
        free(s);
    }
    /* Outputs of 200 to 298 bytes, one after another: every size across the boundary, at
     * every alignment of what is already there. */
    struct strbuf sb = {0};
    char pad[300];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    for (int i = 0; i < 99; i++)
        CHECK_INT(strbuf_printf(&sb, "%.*s", 200 + i, pad), 0);
    size_t total = 0;
    for (int i = 0; i < 99; i++)
        total += 200 + (size_t)i;
    CHECK_U64(sb.len, total);
    CHECK_U64(strlen(sb.buf), total);
    strbuf_finish(&sb);
}

/* steal hands over a NUL-terminated string and leaves an empty buffer; an untouched buffer
 * gives "". */
static void test_strbuf_steal(void)
{
    struct strbuf sb = {0};
    char *s = strbuf_steal(&sb);
    CHECK_STR(s, "");
    free(s);
    strbuf_puts(&sb, "hello");
    strbuf_printf(&sb, " %d", 7);
    s = strbuf_steal(&sb);
    CHECK_STR(s, "hello 7");
    CHECK(sb.buf == NULL && sb.len == 0 && sb.cap == 0);
    free(s);
}

static void test_read_file(void)
{
    char path[] = "/tmp/test_util-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "0123456789", 10) == 10);
    close(fd);
    char buf[32];
    CHECK_INT(read_file(path, buf, sizeof(buf)), 10);
    CHECK_STR(buf, "0123456789");
    /* Cut to fit, still terminated. */
    CHECK_INT(read_file(path, buf, 5), 4);
    CHECK_STR(buf, "0123");
    unlink(path);
    CHECK_INT(read_file(path, buf, sizeof(buf)), -ENOENT);
    /* /proc files report size 0 but have content. */
    char big[4096];
    CHECK(read_file("/proc/self/status", big, sizeof(big)) > 0);
    CHECK(strstr(big, "\nPid:") != NULL);
}

static void test_clocks_and_alloc(void)
{
    uint64_t a = now_ns(), b = now_ns();
    CHECK(b >= a);
    usleep(2000);
    CHECK(now_ns() - a >= 2 * NS_PER_MS);
    CHECK(realtime_ns() > UINT64_C(1600000000) * NS_PER_SEC);
    char *s = xasprintf("%s-%d", "pid", 99);
    CHECK_STR(s, "pid-99");
    free(s);
    s = xstrdup(NULL);
    CHECK_STR(s, "");
    free(s);
    int *z = xcalloc(16, sizeof(int));
    bool zero = true;
    for (int i = 0; i < 16; i++)
        zero = zero && z[i] == 0;
    CHECK(zero);
    z = xrealloc(z, 1000 * sizeof(int));
    z[999] = 1;
    free(z);
}

/* Regression: strtoull skips white space and negates, so " -1" once parsed as UINT64_MAX. */
static void test_parse_u64_rejects_space_and_sign(void)
{
    uint64_t v = 0;
    CHECK_INT(parse_u64(" -1", &v), -EINVAL);
    CHECK_INT(parse_u64("\t-5", &v), -EINVAL);
    CHECK_INT(parse_u64(" 5", &v), -EINVAL);
}

/* Regression: len + extra + 1 wrapped for a huge extra, so reserve returned 0 without
 * growing and the caller wrote past the buffer. */
static void test_strbuf_reserve_overflow(void)
{
    struct strbuf sb = {0};
    CHECK_INT(strbuf_reserve(&sb, SIZE_MAX), -ENOMEM);
    strbuf_puts(&sb, "abc");
    CHECK_INT(strbuf_reserve(&sb, SIZE_MAX - 2), -ENOMEM);
    strbuf_finish(&sb);
}

int main(void)
{
    RUN(test_parse_u64);
    RUN(test_parse_u64_rejects_space_and_sign);
    RUN(test_strbuf_reserve_overflow);
    RUN(test_parse_int);
    RUN(test_parse_duration);
    RUN(test_socket_path_precedence);
    RUN(test_strbuf_growth);
    RUN(test_strbuf_printf_long_strings);
    RUN(test_strbuf_steal);
    RUN(test_read_file);
    RUN(test_clocks_and_alloc);
    return check_status("test_util");
}
