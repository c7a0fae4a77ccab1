/* dlblock.c: libdlblock.so for dlopener: blocks forever in read() two calls deep. */
#include <unistd.h>

__attribute__((noinline)) static void dlblock_inner(int fd)
{
    char c;
    while (read(fd, &c, 1) != 0)
        ;
}

void dlblock_wait(void)
{
    int p[2];
    if (pipe(p) == 0)
        dlblock_inner(p[0]);
}
