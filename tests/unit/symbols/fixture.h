/* fixture.h: what the symbolizer test fixtures share: record code addresses with the source
 * line they belong to, print them for the test, then wait to be killed.
 *
 * A site is the return address of a call to ret_addr(): the instruction before it (the call)
 * belongs to the line of the SITE() statement, exactly what a profiler sees in a stack.
 * Output lines: "site TAG ADDR LINE", "func TAG ADDR 0", "line TAG 0 LINE", then "ready". */
#pragma once

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define FIXTURE_MAX_SITES 64

struct fixture_site {
    const char *kind, *tag;
    void *addr;
    int line;
};

extern struct fixture_site fixture_sites[FIXTURE_MAX_SITES];
extern int fixture_nsites;

/* Our own return address, i.e. the address after the call in the caller. noipa: no
 * inlining, cloning or other assumptions across this call. */
#define FIXTURE_RET_ADDR_DEF                                                                       \
    __attribute__((noipa)) static void *ret_addr(void)                                             \
    {                                                                                              \
        return __builtin_return_address(0);                                                        \
    }

/* Record where this statement's call is, and its line; both on one line on purpose. */
#define SITE(tag) fixture_add("site", tag, ret_addr(), __LINE__)
/* Record a function's entry address. */
#define FUNC(tag, fn) fixture_add("func", tag, (void *)(fn), 0)
/* Record a line number only. */
#define LINE(tag, line) fixture_add("line", tag, NULL, line)
/* Run stmt (a call that gets inlined) and record its line: a macro keeps both on one line. */
#define AT_LINE(tag, stmt)                                                                         \
    do {                                                                                           \
        stmt;                                                                                      \
        LINE(tag, __LINE__);                                                                       \
    } while (0)

#define FIXTURE_DEFS                                                                               \
    struct fixture_site fixture_sites[FIXTURE_MAX_SITES];                                          \
    int fixture_nsites;                                                                            \
    __attribute__((noipa)) void fixture_add(const char *kind, const char *tag, void *addr,         \
                                            int line)                                              \
    {                                                                                              \
        if (fixture_nsites < FIXTURE_MAX_SITES)                                                    \
            fixture_sites[fixture_nsites++] = (struct fixture_site){kind, tag, addr, line};        \
    }                                                                                              \
    /* Print what was recorded and wait for SIGKILL (also sent if the test dies). */               \
    void fixture_report_and_wait(void)                                                             \
    {                                                                                              \
        prctl(PR_SET_PDEATHSIG, SIGKILL);                                                          \
        for (int i = 0; i < fixture_nsites; i++) {                                                 \
            struct fixture_site *s = &fixture_sites[i];                                            \
            if (s->addr)                                                                           \
                printf("%s %s %p %d\n", s->kind, s->tag, s->addr, s->line);                        \
            else                                                                                   \
                printf("%s %s 0 %d\n", s->kind, s->tag, s->line);                                  \
        }                                                                                          \
        printf("ready\n");                                                                         \
        fflush(stdout);                                                                            \
        for (;;)                                                                                   \
            pause();                                                                               \
    }

#ifdef __cplusplus
extern "C" {
#endif
void fixture_add(const char *kind, const char *tag, void *addr, int line);
void fixture_report_and_wait(void);
#ifdef __cplusplus
}
#endif
