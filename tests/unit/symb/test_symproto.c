/* test_symproto.c: the messages between profd and its helper: what one side writes the other
 * reads back, and a reader never goes past a message, whatever its bytes say. */
#include "symproto.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check.h"
#include "util.h"

static void test_roundtrip(void)
{
    static struct symp_w w;
    symp_w_init(&w, SYMP_DESCRIPTION);
    struct symp_elf_info in = {.err = 0, .e_type = 3, .build_id_len = 20, .nloads = 2,
                               .build_id_vaddr = 0x2a8};
    for (int i = 0; i < 20; i++)
        in.build_id[i] = (uint8_t)(i * 7);
    in.loads[0] = (struct symp_load){0, 0, 0x1000, 0x1000, 4};
    in.loads[1] = (struct symp_load){0x1000, 0x1000, 0x500, 0x500, 5};
    symp_put_elf_info(&w, &in);
    symp_put_str(&w, "hello");
    symp_put_str(&w, NULL);
    struct symp_r r;
    symp_r_init(&r, w.buf, w.len);
    CHECK_INT(symp_get_u32(&r), SYMP_DESCRIPTION);
    /* The elf info must be the whole message for symp_get_elf_info: read it from a copy
     * without the strings. */
    struct symp_r r2 = r;
    r2.len = w.len - (4 + 5) - 4;
    struct symp_elf_info out;
    CHECK_INT(symp_get_elf_info(&r2, &out), 0);
    CHECK(!memcmp(&in, &out, sizeof(in)));
    r.off = r2.off;
    const char *s;
    uint32_t len;
    CHECK(symp_get_str(&r, &s, &len) && len == 5 && !memcmp(s, "hello", 5));
    CHECK(!symp_get_str(&r, &s, &len) && s == NULL);
    CHECK(symp_r_done(&r));
}

static void test_hostile(void)
{
    /* Every prefix of a valid description is refused, never read past. */
    static struct symp_w w;
    symp_w_init(&w, SYMP_DESCRIPTION);
    struct symp_elf_info in = {.build_id_len = 8, .nloads = 1, .e_type = 3};
    symp_put_elf_info(&w, &in);
    for (size_t n = 4; n < w.len; n++) {
        uint8_t *copy = xmalloc(n);
        memcpy(copy, w.buf, n);
        struct symp_r r;
        symp_r_init(&r, copy, n);
        symp_get_u32(&r);
        struct symp_elf_info out;
        CHECK_INT(symp_get_elf_info(&r, &out), -EPROTO);
        free(copy);
    }
    /* Counts and lengths beyond their bounds. */
    struct symp_r r;
    uint8_t msg[64];
    uint32_t big = 65;
    memcpy(msg, &big, 4);
    symp_r_init(&r, msg, sizeof(msg));
    uint8_t id[64];
    CHECK_INT(symp_get_bytes(&r, id, sizeof(id)), 0);
    CHECK(r.bad);
    uint32_t huge = 0xfffffff0;
    memcpy(msg, &huge, 4);
    symp_r_init(&r, msg, sizeof(msg));
    const char *s;
    uint32_t len;
    CHECK(!symp_get_str(&r, &s, &len) && r.bad);
    /* A string with a NUL inside. */
    uint32_t three = 3;
    memcpy(msg, &three, 4);
    memcpy(msg + 4, "a\0b", 3);
    symp_r_init(&r, msg, 7);
    CHECK(!symp_get_str(&r, &s, &len) && r.bad);
    /* Loads wrapping around, too many loads, an error code out of range. */
    static struct symp_w w2;
    struct symp_elf_info e = {.nloads = 1, .e_type = 3};
    e.loads[0] = (struct symp_load){.vaddr = UINT64_MAX - 10, .memsz = 100};
    symp_w_init(&w2, SYMP_DESCRIPTION);
    symp_put_elf_info(&w2, &e);
    symp_r_init(&r, w2.buf, w2.len);
    symp_get_u32(&r);
    struct symp_elf_info out;
    CHECK_INT(symp_get_elf_info(&r, &out), -EPROTO);
    e.loads[0].vaddr = 0;
    e.err = 5;
    symp_w_init(&w2, SYMP_DESCRIPTION);
    symp_put_elf_info(&w2, &e);
    symp_r_init(&r, w2.buf, w2.len);
    symp_get_u32(&r);
    CHECK_INT(symp_get_elf_info(&r, &out), -EPROTO);
    /* A writer never writes past its buffer: it remembers the overflow. */
    symp_w_init(&w2, SYMP_FRAMES);
    for (int i = 0; i < 200; i++)
        symp_put_str(&w2, "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123"
                          "0123456789012345678901234567890123456789012345678901234567890123");
    CHECK(w2.overflow && w2.len <= SYMP_MAX_MSG);
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_INT(symp_send(sv[0], &w2, -1), -EMSGSIZE);
    close(sv[0]);
    close(sv[1]);
}

static void test_transport(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    static struct symp_w w;
    static uint8_t buf[SYMP_MAX_MSG];
    symp_w_init(&w, SYMP_HELLO);
    symp_put_u32(&w, SYMP_VERSION);
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK_INT(symp_send(sv[0], &w, fd), 0);
    close(fd);
    int got;
    CHECK_INT(symp_recv(sv[1], buf, &got, 1000), 8);
    CHECK(got >= 0);
    if (got >= 0)
        close(got);
    CHECK_INT(symp_type_of(buf), SYMP_HELLO);
    /* Nothing to read: a timeout, not a wait. */
    CHECK_INT(symp_recv(sv[1], buf, &got, 10), -ETIMEDOUT);
    /* Several descriptors where one was expected: the rest are closed, not leaked. */
    int fds[3] = {open("/dev/null", O_RDONLY | O_CLOEXEC), open("/dev/null", O_RDONLY | O_CLOEXEC),
                  open("/dev/null", O_RDONLY | O_CLOEXEC)};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(fds))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {w.buf, w.len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                        .msg_controllen = sizeof(ctl.b)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(c), fds, sizeof(fds));
    CHECK(sendmsg(sv[0], &mh, 0) == (ssize_t)w.len);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    int before = check_count_fds();
    CHECK_INT(symp_recv(sv[1], buf, &got, 1000), 8);
    CHECK(got >= 0);
    CHECK_INT(check_count_fds(), before + 1);
    if (got >= 0)
        close(got);
    /* The peer gone: end of stream. */
    close(sv[0]);
    CHECK_INT(symp_recv(sv[1], buf, &got, 1000), 0);
    close(sv[1]);
}

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_hostile);
    RUN(test_transport);
    return check_status("test_symproto");
}
