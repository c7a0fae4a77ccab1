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

/* CPython's evaluation loop as GCC splits it: the exported symbol covers the hot part, the
 * unlikely block is a part of its own (".cold" in .symtab; once stripped, in no symbol
 * table). The helper names that part after the function (daemon/symb/dwarfsym.c). */
__attribute__((cold, noinline)) static void eval_cold_work(void)
{
    SITE("eval_cold_work");
}

__attribute__((noinline)) int _PyEval_EvalFrameDefault(int x);
__attribute__((noinline)) int _PyEval_EvalFrameDefault(int x)
{
    if (x == 12345) {
        eval_cold_work(); /* (a call of a cold function: the block is the cold part) */
        SITE("eval_cold");
        return 2;
    }
    return x + 1;
}

/* Record the sites, print them, wait to be killed. */
int main(void)
{
    nodbg_global();
    nodbg_static();
    _PyEval_EvalFrameDefault(12345);
    fixture_report_and_wait();
}
