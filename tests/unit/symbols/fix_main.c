/* fix_main.c: fixture built as PIE and as non-PIE: sites in an exported and a static
 * function, plus the shared library's. */
#include "fixture.h"
#include "fixlib.h"

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

/* An exported function of the executable. */
__attribute__((noipa)) void main_plain(void)
{
    SITE("main_plain");
}

/* A static function of the executable. */
__attribute__((noipa)) static int main_static(int x)
{
    SITE("main_static");
    return x + 1;
}

/* Record the sites, also the library's, print them, wait to be killed. */
int main(void)
{
    main_plain();
    main_static(1);
    FUNC("main_plain", main_plain);
    fixlib_run(fixture_add);
    fixture_report_and_wait();
}
