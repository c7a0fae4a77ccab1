/* fix_nodbg.c: fixture linked with -rdynamic and then fully stripped: only .dynsym names its
 * exported functions, and nothing names its static ones. */
#include "fixture.h"

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

/* Exported with -rdynamic: in .dynsym. */
__attribute__((noipa)) void nodbg_global(void)
{
    SITE("nodbg_global");
}

/* Static: in no symbol table once stripped. */
__attribute__((noipa)) static void nodbg_static(void)
{
    SITE("nodbg_static");
}

/* Record the sites, print them, wait to be killed. */
int main(void)
{
    nodbg_global();
    nodbg_static();
    fixture_report_and_wait();
}
