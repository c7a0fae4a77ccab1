/* test_jitmap.c: the perf map parser of the unprivileged helper, in-process: line by line
 * (bounds, blank lines, prefixes, overflow), and whole files read incrementally from a
 * descriptor (appends, partial lines, rewrites, overlong lines, the entry cap). */
#include "jitmap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../check.h"
#include "util.h"

/* Parse one line given without its newline; the buffer holds exactly the line, so that any
 * read past it is a heap overflow under ASan. */
static int parse(const char *line, struct jit_line *out)
{
    size_t n = strlen(line);
    char *copy = xmalloc(n ? n : 1);
    memcpy(copy, line, n);
    int r = jit_parse_line(copy, copy + n, out);
    static char name[JIT_MAX_NAME + 1];
    if (r == 0) {
        memcpy(name, out->name, out->name_len);
        name[out->name_len] = '\0';
        out->name = name;
    }
    free(copy);
    return r;
}

static void test_lines(void)
{
    struct jit_line l;
    CHECK_INT(parse("7f0000001000 100 jit_func_a", &l), 0);
    CHECK_U64(l.start, 0x7f0000001000);
    CHECK_U64(l.size, 0x100);
    CHECK_STR(l.name, "jit_func_a");
    CHECK_INT(parse("0x10 0X20 LazyCompile:*foo bar.js:10\r", &l), 0);
    CHECK_U64(l.start, 0x10);
    CHECK_U64(l.size, 0x20);
    CHECK_STR(l.name, "LazyCompile:*foo bar.js:10");
    CHECK_INT(parse("ABCDEF 1 upper", &l), 0);
    CHECK_U64(l.start, 0xabcdef);
    /* Not entries: each must be refused without reading outside the line. */
    const char *bad[] = {
        "", " ", "\r", "7f00", "7f00 ", "7f00 10", "7f00 10 ", "7f00  10 x", " 7f00 10 x",
        "7f00 0 zero_size", "ffffffffffffff00 1000 wraps", "10000000000000000 1 too_long",
        "0x 10 no_digits", "g00 10 not_hex", "7f00\t10\tx", "-1 10 negative",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = parse(bad[i], &l);
        if (r != -EINVAL)
            fprintf(stderr, "accepted: \"%s\"\n", bad[i]);
        CHECK_INT(r, -EINVAL);
    }
    /* A NUL inside the name: refused (names are C strings from here on). */
    char nul[] = "1000 10 a\0b";
    CHECK_INT(jit_parse_line(nul, nul + sizeof(nul) - 1, &l), -EINVAL);
    /* A long name is cut at JIT_MAX_NAME. */
    struct strbuf sb = {0};
    strbuf_puts(&sb, "1000 10 ");
    for (int i = 0; i < JIT_MAX_NAME + 100; i++)
        strbuf_puts(&sb, "n");
    CHECK_INT(parse(sb.buf, &l), 0);
    CHECK_INT(l.name_len, JIT_MAX_NAME);
    strbuf_finish(&sb);
}

/* A memfd holding text. */
static int memfd_text(const char *text)
{
    int fd = memfd_create("perfmap", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    size_t n = strlen(text);
    REQUIRE(write(fd, text, n) == (ssize_t)n);
    return fd;
}

static void append(int fd, const char *text)
{
    size_t n = strlen(text);
    REQUIRE(pwrite(fd, text, n, lseek(fd, 0, SEEK_END)) == (ssize_t)n);
}

static void test_files(void)
{
    struct jitmaps *j = jitmaps_create();
    /* The blank line before an entry that once overflowed the parser's buffer. */
    int fd = memfd_text("1000 100 first\n\n2000 10 after_blank\n\n\n3000 10 partial");
    CHECK_INT(jitmaps_update(j, 7, fd), 0);
    CHECK_STR(jitmaps_lookup(j, 7, 0x1050), "first");
    CHECK_STR(jitmaps_lookup(j, 7, 0x2000), "after_blank");
    CHECK(jitmaps_lookup(j, 7, 0x3000) == NULL); /* still being written */
    CHECK(jitmaps_lookup(j, 8, 0x1050) == NULL); /* another process */
    append(fd, "_done\n1080 100 reused\n");
    CHECK_INT(jitmaps_update(j, 7, fd), 0);
    CHECK_STR(jitmaps_lookup(j, 7, 0x3005), "partial_done");
    CHECK_STR(jitmaps_lookup(j, 7, 0x1000), "first");
    CHECK_STR(jitmaps_lookup(j, 7, 0x1080), "reused");
    CHECK_INT(jitmaps_count(j, 7), 4);
    /* Rewritten shorter: read from scratch. */
    REQUIRE(ftruncate(fd, 0) == 0);
    REQUIRE(pwrite(fd, "5000 10 new\n", 12, 0) == 12);
    CHECK_INT(jitmaps_update(j, 7, fd), 0);
    CHECK(jitmaps_lookup(j, 7, 0x1000) == NULL);
    CHECK_STR(jitmaps_lookup(j, 7, 0x5000), "new");
    close(fd);
    /* The file is gone. */
    CHECK_INT(jitmaps_update(j, 7, -1), 0);
    CHECK(jitmaps_lookup(j, 7, 0x5000) == NULL);

    /* A line longer than the read chunk is skipped; what follows is read. */
    struct strbuf sb = {0};
    strbuf_puts(&sb, "1000 10 before\n");
    for (int i = 0; i < (3 << 20) / 16; i++)
        strbuf_puts(&sb, "0123456789abcdef");
    strbuf_puts(&sb, "\n2000 10 after_long_line\n");
    fd = memfd_text(sb.buf);
    strbuf_finish(&sb);
    CHECK_INT(jitmaps_update(j, 9, fd), 0);
    CHECK_STR(jitmaps_lookup(j, 9, 0x1000), "before");
    CHECK_STR(jitmaps_lookup(j, 9, 0x2000), "after_long_line");
    close(fd);
    /* Not a regular file. */
    int p[2];
    REQUIRE(pipe(p) == 0);
    CHECK_INT(jitmaps_update(j, 10, p[0]), -EINVAL);
    close(p[0]);
    close(p[1]);
    jitmaps_forget(j, 9);
    CHECK_INT(jitmaps_count(j, 9), 0);
    jitmaps_destroy(j);
}

int main(void)
{
    RUN(test_lines);
    RUN(test_files);
    return check_status("test_jitmap");
}
