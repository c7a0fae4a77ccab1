/* fuzz_client.c: libFuzzer target for the client library's reading of profd's replies
 * (client/libprofd.c: the handshake, the frame stream, matching replies to calls by id,
 * error codes, the profile of a finish), through its public API.
 *
 * Input: byte 0 says what the application does (bit 0: a second transaction; bit 1:
 * discard the second instead of finishing it), the rest is what "profd" sends: a byte stream
 * of frames, written to the library's connection right after it connects (a fake daemon on
 * a socket of its own, in a thread), after which the daemon stops writing. Whatever it is,
 * every call must return 0 or one of the documented PROFD_E* codes, promptly (no hang: the
 * stream ends), and a finish that succeeds must hand back a JSON object.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_client-libfuzzer -max_len=4096 -dict=tests/fuzz/client.dict \
 *       /tmp/client-new tests/fuzz/corpus/client
 *
 * The plain build replays tests/fuzz/corpus/client under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "profd.h"

static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int listen_fd = -1;

static void cleanup(void)
{
    unlink(sock_path);
    char dir[sizeof(sock_path)];
    snprintf(dir, sizeof(dir), "%s", sock_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(dir);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/fuzz_client.XXXXXX";
    FUZZ_ASSERT(mkdtemp(dir));
    snprintf(sock_path, sizeof(sock_path), "%s/profd.sock", dir);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
    FUZZ_ASSERT(listen_fd >= 0 && bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                listen(listen_fd, 8) == 0);
    atexit(cleanup);
    return 0;
}

struct daemon_script {
    const uint8_t *p;
    size_t n;
};

/* The fake daemon: accept one connection, send the script, stop writing, read until the
 * client closes. */
static void *fake_daemon(void *arg)
{
    struct daemon_script *d = arg;
    struct pollfd pf = {.fd = listen_fd, .events = POLLIN};
    if (poll(&pf, 1, 2000) <= 0)
        return NULL; /* the library never connected */
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    for (size_t off = 0; off < d->n;) {
        ssize_t w = send(fd, d->p + off, d->n - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    close(fd);
    return NULL;
}

static void check_code(int r)
{
    FUZZ_ASSERT(r <= 0 && r >= PROFD_EBUSY);
    FUZZ_ASSERT(profd_strerror(r) && *profd_strerror(r));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    struct daemon_script d = {data + 1, size - 1};
    pthread_t th;
    FUZZ_ASSERT(pthread_create(&th, NULL, fake_daemon, &d) == 0);
    struct profd *p = profd_open(sock_path);
    FUZZ_ASSERT(p);
    profd_set_timeout(p, 2000, 2000); /* the stream ends: nothing should wait this long */
    uint64_t a = 0, b = 0;
    int r = profd_txn_start(p, "fuzz", NULL, &a);
    check_code(r);
    if (r == 0 && (data[0] & 1)) {
        r = profd_txn_start(p, "second", "0123456789abcdef0123456789abcdef", &b);
        check_code(r);
        if (r == 0 && (data[0] & 2)) {
            check_code(profd_txn_discard(p, b));
            b = 0;
        }
    }
    uint64_t ids[2] = {b, a};
    for (int i = 0; i < 2; i++) {
        if (!ids[i])
            continue;
        char *json = (char *)0x1;
        r = profd_txn_finish_lookback(p, ids[i], i ? 0 : 0.5, &json);
        check_code(r);
        if (r == 0) {
            cJSON *j = cJSON_Parse(json);
            FUZZ_ASSERT(cJSON_IsObject(j));
            cJSON_Delete(j);
            free(json);
        } else {
            FUZZ_ASSERT(json == NULL);
        }
    }
    profd_close(p);
    /* The daemon thread ends when the library closes its connection (or never connected:
     * then after its poll's timeout, which a prompt library never needs). */
    pthread_join(th, NULL);
    return 0;
}
