/* fix_inline.c: fixture with always_inline functions inlined into their callers, two deep
 * in one place; the test expects inlined frames above the caller with its call line. */
#include "fixture.h"

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

/* Innermost: inlined into middle() and into outer1(). */
static inline __attribute__((always_inline)) void inner(void)
{
    SITE("inner");
}

/* Inlined into outer(), with inner() inlined into it. */
static inline __attribute__((always_inline)) void middle(void)
{
    AT_LINE("middle_calls_inner", inner());
}

/* A real function holding two levels of inlined code. */
__attribute__((noipa)) void outer(void)
{
    AT_LINE("outer_calls_middle", middle());
}

/* A real function holding one level of inlined code. */
__attribute__((noipa)) void outer1(void)
{
    AT_LINE("outer1_calls_inner", inner());
}

/* Record the sites, print them, wait to be killed. */
int main(void)
{
    outer();
    outer1();
    fixture_report_and_wait();
}
