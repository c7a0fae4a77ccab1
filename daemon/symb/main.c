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
#include "serve.h"
#include "symproto.h"
#include "util.h"

#define SOCK 3

static uint8_t inbuf[SYMP_MAX_MSG];

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

/* serve.c's way to send an answer. */
static int send_answer(void *arg, const struct symp_w *w)
{
    (void)arg;
    return symp_send(SOCK, w, -1);
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
    /* profd's loop thread waits for the ELF headers the "modules" helper reads
     * (daemon/symbols/modules.c): that one keeps profd's priority. */
    so.keep_priority = !strcmp(role, "modules");
    if (sandbox_enter(&so) < 0)
        return 1;
    static struct symb_server srv;
    srv.dsym = dsym_create(open_debug, NULL);
    srv.jit = jitmaps_create();
    srv.send = send_answer;
    symp_w_init(&srv.out, SYMP_HELLO);
    symp_put_u32(&srv.out, SYMP_VERSION);
    send_or_die(&srv.out);
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
        int r = symb_serve(&srv, inbuf, (size_t)n, fd);
        if (r < 0) {
            /* profd went away (EPIPE), or sent what it never sends (a bug): give up. */
            return r == -EPIPE || r == -ECONNRESET ? 0 : 2;
        }
    }
    dsym_destroy(srv.dsym);
    jitmaps_destroy(srv.jit);
    return 0;
}
