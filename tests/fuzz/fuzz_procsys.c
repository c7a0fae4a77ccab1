/* fuzz_procsys.c: libFuzzer target for the sample path's /proc readers (daemon/procfs.c):
 * /proc/PID/task/TID/syscall (sysc_parse, proc_read_syscall) and .../schedstat
 * (proc_read_schedstat).
 *
 * Input: byte 0 picks the file, the rest is its text, any bytes. The readers take at most
 * a buffer's worth (255 and 127 bytes) with one pread from offset 0, as from /proc; they must
 * read nothing past it, and what they return must be consistent: a "running" thread has no
 * system call, a blocked one a negative number and two values, one in a system call eight;
 * proc_read_syscall must agree with sysc_parse on the same bytes; a failed read leaves the
 * caller's values alone.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_procsys-libfuzzer -max_len=512 \
 *       /tmp/procsys-new tests/fuzz/corpus/procsys
 *
 * The plain build replays tests/fuzz/corpus/procsys under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <unistd.h>

#include "procfs.h"

static void check_sysc(int r, const struct sysc_info *si)
{
    FUZZ_ASSERT(r == 0 || r == -EINVAL);
    if (r < 0)
        return;
    switch (si->state) {
    case SYSC_RUNNING:
        FUZZ_ASSERT(si->nr == -1 && !si->sp && !si->pc);
        break;
    case SYSC_BLOCKED: {
        static const uint64_t zero[6];
        FUZZ_ASSERT(si->nr < 0 && !memcmp(si->args, zero, sizeof(zero)));
        break;
    }
    case SYSC_IN_SYSCALL:
        FUZZ_ASSERT(si->nr >= 0);
        break;
    default:
        FUZZ_ASSERT(!"unknown state");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    int fd = fuzz_memfd(body, n);
    if (data[0] & 1) {
        uint64_t run = 0x1111, pcount = 0x2222;
        int r = proc_read_schedstat(fd, &run, &pcount);
        FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ESRCH);
        FUZZ_ASSERT(r != -ESRCH || n == 0);
        if (r < 0)
            FUZZ_ASSERT(run == 0x1111 && pcount == 0x2222);
    } else {
        /* What pread gives the reader: at most 255 bytes, then its NUL. */
        char text[256];
        size_t k = n < sizeof(text) - 1 ? n : sizeof(text) - 1;
        memcpy(text, body, k);
        text[k] = '\0';
        struct sysc_info a, b;
        int ra = sysc_parse(text, &a);
        check_sysc(ra, &a);
        int rb = proc_read_syscall(fd, &b);
        if (n == 0) {
            FUZZ_ASSERT(rb == -ESRCH);
        } else {
            FUZZ_ASSERT(rb == ra);
            if (ra == 0)
                FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
        }
    }
    close(fd);
    return 0;
}
