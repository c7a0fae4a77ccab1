/* fix_vdso.c: fixture that reports where its vDSO's clock_gettime is and how long it is, as
 * the dynamic linker knows it (glibc loads the vDSO as "linux-vdso.so.1"), so the test checks
 * the symbolizer against a source that does not share its code. */
#include "fixture.h"

#include <dlfcn.h>
#include <link.h>

FIXTURE_DEFS
FIXTURE_RET_ADDR_DEF

/* Record __vdso_clock_gettime (address, and its size as the "line"), or a zero address if
 * this process has no vDSO; then a site in main for the caller frame. */
int main(void)
{
    void *vdso = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL;
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!fn || !dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
        fn = NULL;
    fixture_add("func", "vdso_clock_gettime", fn, fn ? (int)sym->st_size : 0);
    SITE("main");
    fixture_report_and_wait();
}
