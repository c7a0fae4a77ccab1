/* fuzz_requests.c: libFuzzer target for the daemon's handling of requests' JSON
 * (daemon/commands.c and its cmd_*.c: validation in its fixed order and every command's
 * arguments; daemon/txn.c: the transactions' bookkeeping), without a socket.
 *
 * Input: byte 0 picks who the client is (its pid: profd's own, which exists, or one that
 * does not), the rest is requests separated by NUL bytes, each parsed with cJSON and, when
 * it is an object, handed to commands_dispatch on one connection, as server.c does; at the
 * end the connection closes (txn_client_gone). The client is an unprivileged user that owns
 * no process: every access check must refuse it, so nothing is ever attached (checked after
 * each request: fuzzing must not ptrace the machine's processes), so the commands on a
 * process (attach, configure, detach, slice) stop at the access check, before their other
 * arguments are read. Everything else is reached: the handshake, the id, cmd and pid
 * checks, hello, list, status, reload, and the transactions (every argument of txn_start,
 * refused starts with and without replies, finish and discard of them). Each
 * reply must be one the protocol allows: NULL only for a request without reply, else an
 * object with "result" or "error" (a known code, a message), the request's id echoed.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_requests-libfuzzer -max_len=4096 -dict=tests/fuzz/requests.dict \
 *       /tmp/requests-new tests/fuzz/corpus/requests
 *
 * The plain build replays tests/fuzz/corpus/requests under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

#include <ev.h>

#include "commands.h"
#include "log.h"
#include "memory.h"
#include "proto.h"
#include "server.h"
#include "schedule.h"
#include "target.h"
#include "txn.h"
#include "util.h"

/* A uid and pid no process has: pid_max is at most 2^22. */
#define NOBODY_UID 4242424
#define NO_PID 0x3ffffff0

static struct ev_loop *loop;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    log_init("fuzz_requests", LOG_LVL_ERR);
    loop = ev_loop_new(EVFLAG_AUTO);
    FUZZ_ASSERT(loop);
    targets_init(loop, &sched_target_hooks);
    memory_count_with(targets_memory, server_memory);
    server_init(&(struct server_handlers){.dispatch = commands_dispatch,
                                          .client_gone = txn_client_gone});
    /* The defaults main.c applies (profd.conf(5)). */
    server_cfg.default_hz = 101;
    server_cfg.default_mode = SCHED_ALARM;
    server_cfg.default_buffer_ns = 60 * NS_PER_SEC;
    server_cfg.max_hz = 10000;
    server_cfg.max_buffer_ns = 3600 * NS_PER_SEC;
    server_cfg.max_targets = 256;
    server_cfg.max_targets_per_user = 32;
    server_cfg.max_memory = 1ull << 30;
    return 0;
}

static bool is_noreply(const cJSON *req)
{
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "noreply")) &&
           cJSON_IsString(cmd) &&
           (!strcmp(cmd->valuestring, "txn_start") || !strcmp(cmd->valuestring, "txn_discard"));
}

static void check_reply(const cJSON *req, cJSON *reply, bool handshaken_before)
{
    if (!reply) {
        FUZZ_ASSERT(is_noreply(req));
        return;
    }
    FUZZ_ASSERT(cJSON_IsObject(reply));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
    FUZZ_ASSERT(!res != !err);
    if (err) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        FUZZ_ASSERT(cJSON_IsString(code) && proto_error_from_name(code->valuestring) >= 0);
        FUZZ_ASSERT(cJSON_IsString(msg) && *msg->valuestring);
    } else {
        /* Only hello succeeds before the handshake. */
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
        FUZZ_ASSERT(handshaken_before ||
                    (cJSON_IsString(cmd) && !strcmp(cmd->valuestring, "hello")));
        FUZZ_ASSERT(cJSON_IsObject(res));
    }
    /* The id comes back as it was sent, when it was a valid one. */
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(reply, "id");
    if (id && ((cJSON_IsNumber(id) && isfinite(id->valuedouble)) || cJSON_IsString(id)))
        FUZZ_ASSERT(rid && cJSON_Compare(id, rid, true));
    else
        FUZZ_ASSERT(!rid);
    /* It goes on the wire. */
    char *text = cJSON_PrintUnformatted(reply);
    FUZZ_ASSERT(text);
    struct strbuf sb = {0};
    FUZZ_ASSERT(frame_encode(&sb, text, strlen(text)) == 0);
    strbuf_finish(&sb);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    txn_init(loop, 5 * NS_PER_SEC);
    static uint64_t conn;
    struct client c = {
        .fd = -1,
        .peer = {.pid = data[0] & 1 ? getpid() : NO_PID, .uid = NOBODY_UID,
                 .gid = NOBODY_UID},
        .id = ++conn,
        .accept_ns = now_ns(),
    };
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p < end && !c.closing) {
        const char *nul = memchr(p, '\0', (size_t)(end - p));
        const char *e = nul ? nul : end;
        cJSON *req = cJSON_ParseWithLength(p, (size_t)(e - p));
        p = e + 1;
        if (!req || !cJSON_IsObject(req)) {
            cJSON_Delete(req); /* server.c answers bad_request itself */
            continue;
        }
        bool was = c.handshaken;
        cJSON *reply = commands_dispatch(&c, req);
        check_reply(req, reply, was);
        FUZZ_ASSERT(!c.pending);
        FUZZ_ASSERT(targets_count() == 0);
        cJSON_Delete(reply);
        cJSON_Delete(req);
    }
    txn_client_gone(c.id, now_ns());
    txn_shutdown();
    return 0;
}
