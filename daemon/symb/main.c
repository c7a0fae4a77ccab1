/* profd-symbolizer: the unprivileged half of profd. It parses everything a target controls
 * that profd needs to name code (ELF headers, DWARF and symbol tables through libdwfl,
 * separate debug files, perf maps), in a process with no privileges, no capabilities, no
 * filesystem access and a seccomp allow-list (sandbox.h). profd starts it with one
 * SOCK_SEQPACKET socket on descriptor 3, opens the files it needs and passes descriptors
 * (symproto.h). It exits when profd closes the socket.
 *
 *   profd-symbolizer [--role NAME] [--memory BYTES] [--cpu SECONDS] [-v]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dwarfsym.h"
#include "elfinfo.h"
#include "jitmap.h"
#include "log.h"
#include "sandbox.h"
#include "symproto.h"
#include "util.h"

#define SOCK 3

static uint8_t inbuf[SYMP_MAX_MSG];
static struct symp_w out;

/* Protocol violations by profd: it is the trusted side, so this is a bug; give up. */
static void __attribute__((noreturn)) die(const char *what)
{
    log_err("%s", what);
    exit(2);
}

static void send_or_die(const struct symp_w *w)
{
    int r = symp_send(SOCK, w, -1);
    if (r < 0) {
        /* profd went away (EPIPE) or the message is too large (a bug). */
        exit(r == -EPIPE || r == -ECONNRESET ? 0 : 2);
    }
}

/* dwarfsym's open callback: ask profd for a debug file and wait for its answer. */
static int open_debug(void *arg, uint64_t id, enum symp_open_kind kind, const void *data,
                      size_t len)
{
    (void)arg;
    static struct symp_w req;
    symp_w_init(&req, SYMP_OPEN);
    symp_put_u32(&req, kind);
    symp_put_u64(&req, id);
    symp_put_bytes(&req, data, (uint32_t)len);
    send_or_die(&req);
    int fd;
    ssize_t n = symp_recv(SOCK, inbuf, &fd, -1);
    if (n <= 0)
        exit(n == 0 ? 0 : 2);
    struct symp_r r;
    symp_r_init(&r, inbuf, (size_t)n);
    if (symp_get_u32(&r) != SYMP_OPENED)
        die("expected an answer to an open request");
    int32_t err = (int32_t)symp_get_u32(&r);
    if (!symp_r_done(&r))
        die("malformed open answer");
    if (err < 0 || fd < 0) {
        if (fd >= 0)
            close(fd);
        return err < 0 ? err : -ENOENT;
    }
    return fd;
}

static void do_describe(int fd)
{
    struct symp_elf_info info;
    if (fd < 0)
        die("describe without a descriptor");
    elfinfo_read(fd, &info);
    close(fd);
    symp_w_init(&out, SYMP_DESCRIPTION);
    symp_put_elf_info(&out, &info);
    send_or_die(&out);
}

/* One address's frames; with each string cut at cap bytes. */
static void put_entry(struct symp_w *w, int n, const struct dsym_frame *f, enum symp_source src,
                      size_t cap)
{
    symp_put_u32(w, src);
    symp_put_u32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        symp_put_u32(w, (uint32_t)f[i].line);
        symp_put_u32(w, f[i].inlined);
        const char *s[2] = {f[i].function, f[i].file};
        for (int k = 0; k < 2; k++) {
            if (!s[k]) {
                symp_put_u32(w, UINT32_MAX);
                continue;
            }
            size_t len = strnlen(s[k], cap);
            symp_put_bytes(w, s[k], (uint32_t)len);
        }
    }
}

/* Where the count and final flag of the message being built are (written when it is sent). */
static size_t count_at;

static void begin_frames(uint64_t id, uint32_t first)
{
    symp_w_init(&out, SYMP_FRAMES);
    symp_put_u64(&out, id);
    symp_put_u32(&out, first);
    count_at = out.len;
    symp_put_u32(&out, 0);
    symp_put_u32(&out, 0);
}

static void begin_names(uint32_t first)
{
    symp_w_init(&out, SYMP_JIT_NAMES);
    symp_put_u32(&out, first);
    count_at = out.len;
    symp_put_u32(&out, 0);
    symp_put_u32(&out, 0);
}

/* Fill in the count and final flag, and send. */
static void finish_and_send(uint32_t count, bool final)
{
    uint32_t fin = final;
    memcpy(out.buf + count_at, &count, 4);
    memcpy(out.buf + count_at + 4, &fin, 4);
    send_or_die(&out);
}

/* FRAMES messages: u64 module, u32 first, u32 count, u32 final, then count entries: u32
 * source, u32 n, n x (u32 line, u32 inlined, str function, str file). */
static void do_lookup(struct dsym *d, struct symp_r *r, int fd)
{
    uint64_t id = symp_get_u64(r);
    uint32_t flags = symp_get_u32(r);
    const char *path = NULL;
    uint32_t plen = 0;
    char pathbuf[SYMP_MAX_STR + 1];
    if (flags & SYMP_LOOKUP_NEW) {
        if (!symp_get_str(r, &path, &plen))
            path = NULL;
        if (path) {
            memcpy(pathbuf, path, plen);
            pathbuf[plen] = '\0';
        }
    }
    uint32_t n = symp_get_u32(r);
    if (r->bad || n > SYMP_MAX_BATCH || r->len - r->off != (size_t)n * 8) {
        if (fd >= 0)
            close(fd);
        die("malformed lookup request");
    }
    const uint8_t *offs = r->p + r->off;
    if (flags & SYMP_LOOKUP_NEW) {
        if (fd < 0)
            die("new module without a descriptor");
        dsym_add(d, id, fd, path ? pathbuf : NULL); /* takes fd; failures look up as unknown */
    } else if (fd >= 0) {
        close(fd);
    }
    if (!dsym_has(d, id))
        die("lookup in a module profd never sent"); /* profd would cache empty answers */
    begin_frames(id, 0);
    uint32_t count = 0, first = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off;
        memcpy(&off, offs + (size_t)i * 8, 8);
        const struct dsym_frame *f;
        enum symp_source src = SYMP_SRC_NONE;
        static const struct dsym_frame unknown;
        int nf = dsym_lookup(d, id, off, &f, &src);
        if (nf <= 0) {
            f = &unknown;
            nf = 1;
            src = SYMP_SRC_NONE;
        }
        /* Fit the entry in this message, else in the next; a single entry too large for
         * an empty message has its names cut shorter until it fits. */
        for (size_t cap = SYMP_MAX_STR;; cap /= 2) {
            size_t at = out.len;
            put_entry(&out, nf, f, src, cap);
            if (!out.overflow)
                break;
            out.overflow = false;
            out.len = at;
            if (count > 0) {
                finish_and_send(count, false);
                first += count;
                count = 0;
                begin_frames(id, first);
                cap *= 2; /* try again at full length in the empty message */
            } else if (cap < 16) {
                die("an entry does not fit in a message");
            }
        }
        count++;
    }
    finish_and_send(count, true);
}

/* JIT_NAMES messages: u32 first, u32 count, u32 final, then count names (str, NULL if
 * none). */
static void do_jit(struct jitmaps *j, struct symp_r *r, int fd)
{
    uint32_t pid = symp_get_u32(r);
    uint32_t flags = symp_get_u32(r);
    uint32_t n = symp_get_u32(r);
    if (r->bad || n > SYMP_MAX_BATCH || r->len - r->off != (size_t)n * 8) {
        if (fd >= 0)
            close(fd);
        die("malformed JIT request");
    }
    const uint8_t *addrs = r->p + r->off;
    if (flags & SYMP_JIT_FILE) {
        if (fd < 0)
            die("JIT request without its file");
        int e = jitmaps_update(j, pid, fd);
        if (e < 0)
            log_debug("perf map of %u: %s", pid, strerror(-e));
        close(fd);
    } else {
        if (fd >= 0)
            close(fd);
        if (flags & SYMP_JIT_GONE)
            jitmaps_update(j, pid, -1);
    }
    begin_names(0);
    uint32_t count = 0, first = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t a;
        memcpy(&a, addrs + (size_t)i * 8, 8);
        const char *name = jitmaps_lookup(j, pid, a);
        size_t at = out.len;
        symp_put_str(&out, name);
        if (out.overflow) {
            out.overflow = false;
            out.len = at;
            finish_and_send(count, false);
            first += count;
            count = 0;
            begin_names(first);
            symp_put_str(&out, name);
        }
        count++;
    }
    finish_and_send(count, true);
}

int main(int argc, char **argv)
{
    struct sandbox_opts so = {.keep_fd = SOCK};
    const char *role = "symbols";
    bool verbose = false;
    static const struct option longopts[] = {
        {"role", required_argument, NULL, 'r'},
        {"memory", required_argument, NULL, 'm'},
        {"cpu", required_argument, NULL, 'c'},
        {"verbose", no_argument, NULL, 'v'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "v", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            role = optarg;
            break;
        case 'm':
            if (parse_u64(optarg, &so.max_memory) < 0)
                return 2;
            break;
        case 'c':
            if (parse_u64(optarg, &so.max_cpu_s) < 0)
                return 2;
            break;
        case 'v':
            verbose = true;
            break;
        default:
            return 2;
        }
    }
    static char name[64];
    snprintf(name, sizeof(name), "profd-symbolizer[%s]", role);
    log_init(name, verbose ? LOG_LVL_DEBUG : LOG_LVL_INFO);
    if (fcntl(SOCK, F_GETFD) < 0) {
        log_err("descriptor %d is not open: profd-symbolizer is started by profd", SOCK);
        return 2;
    }
    if (sandbox_enter(&so) < 0)
        return 1;
    struct dsym *d = dsym_create(open_debug, NULL);
    struct jitmaps *j = jitmaps_create();
    symp_w_init(&out, SYMP_HELLO);
    symp_put_u32(&out, SYMP_VERSION);
    send_or_die(&out);
    for (;;) {
        int fd;
        ssize_t n = symp_recv(SOCK, inbuf, &fd, -1);
        if (n == 0)
            break; /* profd closed the socket */
        if (n < 0) {
            if (n == -ECONNRESET)
                break;
            log_err("receive: %s", strerror((int)-n));
            return 2;
        }
        struct symp_r r;
        symp_r_init(&r, inbuf, (size_t)n);
        uint32_t type = symp_get_u32(&r);
        switch (type) {
        case SYMP_DESCRIBE:
            do_describe(fd);
            break;
        case SYMP_LOOKUP:
            do_lookup(d, &r, fd);
            break;
        case SYMP_FORGET:
            dsym_forget(d, symp_get_u64(&r));
            if (fd >= 0)
                close(fd);
            break;
        case SYMP_JIT:
            do_jit(j, &r, fd);
            break;
        case SYMP_JIT_FORGET:
            jitmaps_forget(j, symp_get_u32(&r));
            if (fd >= 0)
                close(fd);
            break;
        default:
            die("unknown request");
        }
    }
    dsym_destroy(d);
    jitmaps_destroy(j);
    return 0;
}
