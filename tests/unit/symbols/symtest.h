/* symtest.h: helpers for the symbolizer tests: checks, fixture processes, temp files. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct maps;
struct module;
struct sym_frame;

extern int symtest_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            symtest_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (\"%s\" vs \"%s\")\n", __FILE__,        \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
            symtest_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                               \
            symtest_failures++;                                                                    \
        }                                                                                          \
    } while (0)

/* One line the fixture printed: "KIND TAG ADDR LINE". */
struct fx_site {
    char kind[8], tag[48];
    uint64_t addr;
    int line;
};

/* A running fixture process. */
struct fixture {
    pid_t pid;
    struct fx_site sites[64];
    int n;
};

/* Run path (argv = {path, NULL}) with stdout on a pipe and wait for its "ready" line.
 * Returns 0 or -1 (and says why on stderr). */
int fixture_start(struct fixture *fx, const char *path);
/* SIGKILL and reap it. */
void fixture_stop(struct fixture *fx);
/* The nth (0-based) site of this kind and tag; aborts the test if missing. */
const struct fx_site *fixture_site(const struct fixture *fx, const char *kind, const char *tag,
                                   int nth);

/* Path from the environment variable var (set by meson.build); exits 77 if unset, which
 * only happens when the test is run by hand without its fixtures. */
const char *fixture_path(const char *var);

/* Module and file offset of a runtime address of process maps m: for a return address
 * pass ret - 1 (the call). false if no module maps it. */
bool symtest_offset(const struct maps *m, uint64_t addr, struct module **mod, uint64_t *off);
/* Print frames for a failing check. */
void symtest_print_frames(const char *what, const struct sym_frame *f, int n);
/* Basename of a path (NULL-safe). */
const char *symtest_base(const char *path);

/* A fresh directory under /tmp (mode 0755); malloc'd path. */
char *symtest_mkdtemp(void);
/* Copy a file, creating it with mode. 0 or -errno. */
int symtest_copy(const char *from, const char *to, mode_t mode);
/* mkdir -p. */
int symtest_mkdirs(const char *path);
/* rm -rf (tests' own temp directories only). */
void symtest_rmtree(const char *path);
/* Number of open descriptors of this process. */
int symtest_count_fds(void);
