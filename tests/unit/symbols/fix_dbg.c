/* fix_dbg.c: fixture whose debug info the build moves to a separate file (found by build-id
 * or by .gnu_debuglink) before the test runs it. */
#include "fixture.h"

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

/* Named by the separate debug file only (or by .symtab). */
__attribute__((noipa)) void dbg_func(void)
{
    SITE("dbg_func");
}

/* Record the site, print it, wait to be killed. */
int main(void)
{
    dbg_func();
    fixture_report_and_wait();
}
