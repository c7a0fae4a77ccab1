/* check.h: checks for the core unit tests: each failure is printed and counted, every test
 * function runs, and the exit status says whether any check failed. */
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures __attribute__((unused));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_INT(got, want)                                                                       \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        if (g_ != w_) {                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s == %s (got %lld, want %lld)\n", __FILE__,     \
                    __LINE__, #got, #want, g_, w_);                                                \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_U64(got, want)                                                                       \
    do {                                                                                           \
        unsigned long long g_ = (unsigned long long)(got), w_ = (unsigned long long)(want);        \
        if (g_ != w_) {                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s == %s (got %llu, want %llu)\n", __FILE__,     \
                    __LINE__, #got, #want, g_, w_);                                                \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!g_ || strcmp(g_, w_) != 0) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n  got:  %s\n  want: %s\n", __FILE__,         \
                    __LINE__, #got, g_ ? g_ : "(null)", w_);                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* The text contains needle (for messages meant for people). */
#define CHECK_CONTAINS(text, needle)                                                               \
    do {                                                                                           \
        const char *t_ = (text), *n_ = (needle);                                                   \
        if (!t_ || !strstr(t_, n_)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: \"%s\" contains \"%s\"\n", __FILE__, __LINE__,   \
                    t_ ? t_ : "(null)", n_);                                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* A failure the test cannot continue past (setup that the rest depends on). */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: required: %s\n", __FILE__, __LINE__, #cond);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Open descriptors of this process (not counting the one used to count them). */
static inline int check_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

/* Run one test function, say which one failed, and check it leaked no descriptor. */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int before_ = check_failures, fds_ = check_count_fds();                                    \
        fn();                                                                                      \
        int after_fds_ = check_count_fds();                                                        \
        if (after_fds_ != fds_) {                                                                  \
            fprintf(stderr, "%s: leaked descriptors: %d before, %d after\n", #fn, fds_,            \
                    after_fds_);                                                                   \
            check_failures++;                                                                      \
        }                                                                                          \
        fprintf(stderr, "%s %s\n", check_failures == before_ ? "ok  " : "FAIL", #fn);              \
    } while (0)

/* Exit status of the whole test. */
static inline int check_status(const char *test)
{
    if (check_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", test, check_failures);
    return check_failures ? 1 : 0;
}
