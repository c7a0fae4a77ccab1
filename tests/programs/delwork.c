/* delwork.c: libdelwork.so for delprog: calls the program back three times, two calls deep,
 * so that samples in the callback have library frames between program frames. */
#define NOINLINE __attribute__((noinline, noclone))

typedef void (*delwork_fn)(unsigned n);

NOINLINE void delwork_step(delwork_fn f, unsigned n)
{
    f(n);
    __asm__ volatile("" ::: "memory");
}

void delwork_run(delwork_fn f, unsigned n)
{
    for (int i = 0; i < 3; i++)
        delwork_step(f, n);
    __asm__ volatile("" ::: "memory");
}
