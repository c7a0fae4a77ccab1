/* dlopener.c: after a line on stdin, dlopens libdlblock.so (built beside it) and blocks in
 * its dlblock_wait() (a read() on a pipe nobody writes). The library is mapped after the
 * profiler read the maps, and the thread never runs again: its stack must still come out
 * whole. Prints "ready PID" first, "loaded" once blocked. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    (void)argc;
    char lib[4096];
    snprintf(lib, sizeof(lib), "%s", argv[0]);
    char *slash = strrchr(lib, '/');
    snprintf(slash ? slash + 1 : lib, sizeof(lib) - (size_t)(slash ? slash + 1 - lib : 0),
             "libdlblock.so");
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void (*wait_fn)(void) = (void (*)(void))dlsym(h, "dlblock_wait");
    printf("loaded\n");
    fflush(stdout);
    wait_fn();
    return 0;
}
