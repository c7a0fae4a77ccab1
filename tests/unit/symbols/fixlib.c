/* fixlib.c: shared library fixture: sites in an exported and a static function, resolved at
 * whatever address the library gets loaded. */
#include "fixlib.h"

#include <stddef.h>

#ifdef FIXLIB_B
/* Only here to give this copy another build-id. */
const char fixlib_variant[] = "b";
#endif

static void (*fixture_add)(const char *kind, const char *tag, void *addr, int line);

/* Our own return address; as in fixture.h. */
__attribute__((noipa)) static void *ret_addr(void)
{
    return __builtin_return_address(0);
}

#define SITE(tag) fixture_add("site", tag, ret_addr(), __LINE__)

/* A static function of the library. */
__attribute__((noipa)) static int lib_static(int x)
{
    SITE("lib_static");
    return x * 3;
}

/* An exported function of the library. */
__attribute__((noipa)) int lib_exported(int x)
{
    SITE("lib_exported");
    return lib_static(x) + 1;
}

/* Record the library's sites through the executable's recorder. */
void fixlib_run(void (*add)(const char *kind, const char *tag, void *addr, int line))
{
    fixture_add = add;
    lib_exported(2);
    fixture_add("func", "lib_exported", (void *)lib_exported, 0);
}
