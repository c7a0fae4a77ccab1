/* fuzz_config.c: libFuzzer target for the configuration file and settings (daemon/config.c).
 *
 * Input: byte 0 picks the mode, the rest is its data.
 *   even: the data is a configuration file, read with config_load (from a memfd, through
 *         /proc/self/fd). Accepted: every setting is in its documented range. Refused: the
 *         message names the file and a line of it (or the read), and fits its buffer.
 *   odd:  the data is pairs "key\0value\0" given to config_set, as flags are. A refused
 *         setting changes nothing; an accepted one is in range, and the same "key = value"
 *         line read from a file gives the same configuration (when the value is one a file
 *         can carry: no '#', newline, quote or blank at its ends).
 * config_check runs on the result either way.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_config-libfuzzer -max_len=2048 -dict=tests/fuzz/config.dict \
 *       /tmp/config-new tests/fuzz/corpus/config
 *
 * The plain build replays tests/fuzz/corpus/config under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <ctype.h>
#include <errno.h>
#include <unistd.h>

#include "config.h"
#include "util.h"

static void check_ranges(const struct profd_config *c)
{
    if (c->socket)
        FUZZ_ASSERT(c->socket[0] == '/' && strlen(c->socket) <= 107);
    if (c->socket_group)
        FUZZ_ASSERT(*c->socket_group);
    FUZZ_ASSERT(c->socket_mode <= 0777);
    FUZZ_ASSERT(c->hz >= 1 && c->hz <= 100000);
    FUZZ_ASSERT(c->max_hz >= 1 && c->max_hz <= 100000);
    FUZZ_ASSERT(c->buffer_ns >= NS_PER_SEC && c->buffer_ns <= 3600 * NS_PER_SEC);
    FUZZ_ASSERT(c->max_cpu >= 0 && c->max_cpu <= 10000);
    FUZZ_ASSERT(c->txn_linger_ns <= 3600 * NS_PER_SEC);
    FUZZ_ASSERT(c->max_targets >= 1 && c->max_targets <= 65536);
    FUZZ_ASSERT(c->max_targets_per_user >= 1 && c->max_targets_per_user <= 65536);
    FUZZ_ASSERT(c->max_stack_kib >= 8 && c->max_stack_kib <= 65536);
    FUZZ_ASSERT(c->max_memory == 0 || c->max_memory >= (1u << 20));
    FUZZ_ASSERT(c->symbolizer_memory == 0 || c->symbolizer_memory >= (64u << 20));
    FUZZ_ASSERT(c->symbolizer_timeout_ns >= 100 * NS_PER_MS &&
                c->symbolizer_timeout_ns <= 600 * NS_PER_SEC);
    FUZZ_ASSERT(c->nallow_groups <= CONFIG_MAX_GROUPS);
    char err[300];
    int r = config_check(c, err, sizeof(err));
    FUZZ_ASSERT(r == 0 || (r == -EINVAL && *err && strlen(err) < sizeof(err)));
    FUZZ_ASSERT(r == 0 || c->hz > c->max_hz);
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Every setting equal (strings by content). */
static bool same_config(const struct profd_config *a, const struct profd_config *b)
{
    struct profd_config x = *a, y = *b;
    if (!same_str(x.socket, y.socket) || !same_str(x.socket_group, y.socket_group))
        return false;
    x.socket = y.socket = x.socket_group = y.socket_group = NULL;
    return !memcmp(&x, &y, sizeof(x));
}

static int load_text(struct profd_config *c, const void *text, size_t len, char *err,
                     size_t errlen, char *path, size_t pathlen)
{
    int fd = fuzz_memfd(text, len);
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    int r = config_load(c, path, false, err, errlen);
    close(fd);
    return r;
}

static void fuzz_file(const uint8_t *data, size_t size)
{
    struct profd_config c;
    config_defaults(&c);
    char err[512], path[64];
    memset(err, 0x55, sizeof(err));
    err[sizeof(err) - 1] = '\0';
    int r = load_text(&c, data, size, err, sizeof(err), path, sizeof(path));
    FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOENT || r == -EIO);
    if (r < 0) {
        FUZZ_ASSERT(memchr(err, '\0', sizeof(err)));
        FUZZ_ASSERT(!strncmp(err, path, strlen(path)) && err[strlen(path)] == ':');
        /* "PATH:LINE: ...": a line the file has. */
        const char *p = err + strlen(path) + 1;
        if (isdigit((unsigned char)*p)) {
            unsigned long line = strtoul(p, NULL, 10);
            size_t lines = 1;
            for (size_t i = 0; i + 1 < size; i++)
                lines += data[i] == '\n';
            FUZZ_ASSERT(line >= 1 && line <= lines);
        }
    }
    check_ranges(&c);
    config_free(&c);
}

/* Can value travel in a file as "key = value" and be read back unchanged? */
static bool file_safe(const char *key, const char *v)
{
    if (!*key || strpbrk(key, "=#\n\r") || isspace((unsigned char)key[0]) ||
        isspace((unsigned char)key[strlen(key) - 1]))
        return false;
    size_t n = strlen(v);
    if (strpbrk(v, "#\n\r") || (n && (isspace((unsigned char)v[0]) ||
                                      isspace((unsigned char)v[n - 1]))))
        return false;
    /* A value in double quotes loses them in a file. */
    return !(n >= 2 && v[0] == '"' && v[n - 1] == '"');
}

static void fuzz_set(struct fuzz_in *in)
{
    struct profd_config c;
    config_defaults(&c);
    for (int k = 0; k < 16 && in->n; k++) {
        char *key = fuzz_str(in, 64), *value = fuzz_str(in, 4200);
        struct profd_config before = c, copy;
        config_copy(&copy, &c); /* a success may free before's strings */
        char err[300];
        int r = config_set(&c, key, value, err, sizeof(err));
        FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOENT);
        if (r < 0) {
            /* Refused: nothing changed (the strings are the same allocations). */
            FUZZ_ASSERT(!memcmp(&before, &c, sizeof(c)));
            FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) && *err);
        } else if (file_safe(key, value) && strlen(key) + strlen(value) < 4000) {
            /* The same setting from a file. */
            struct profd_config f;
            config_copy(&f, &copy);
            char *line = xasprintf("%s = %s\n", key, value);
            char ferr[512], path[64];
            int rf = load_text(&f, line, strlen(line), ferr, sizeof(ferr), path, sizeof(path));
            if (rf != 0)
                fprintf(stderr, "config_set took %s = \"%s\", the file refused it: %s\n", key,
                        value, ferr);
            FUZZ_ASSERT(rf == 0);
            FUZZ_ASSERT(same_config(&f, &c));
            free(line);
            config_free(&f);
        }
        check_ranges(&c);
        config_free(&copy);
        free(key);
        free(value);
    }
    config_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    if (data[0] & 1) {
        struct fuzz_in in = {data + 1, size - 1};
        fuzz_set(&in);
    } else {
        fuzz_file(data + 1, size - 1);
    }
    return 0;
}
