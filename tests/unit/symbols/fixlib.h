/* fixlib.h: the shared library the PIE and non-PIE fixtures load. */
#pragma once

/* Record sites in the library's functions through add (the executable's fixture_add). */
void fixlib_run(void (*add)(const char *kind, const char *tag, void *addr, int line));
