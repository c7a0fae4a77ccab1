/* delprog.c: a program to run from a copy that is then deleted or replaced, together with
 * its library libdelwork.so (dlopened from the directory the program was started from,
 * also deleted or replaced): BUSY threads ("del-N") loop in
 *   worker -> app_round -> delwork_run -> delwork_step -> app_callback -> app_spin
 * (delwork_* in the library, the rest in the program), so that every sample's stack
 * crosses both objects twice and unwinds completely only with the unwind tables of both.
 * The main thread blocks in read() on stdin. Built -O2 without frame pointers.
 * Usage: delprog [BUSY] (default 2); prints "ready PID" once the threads run, and exits at
 * the end of its input. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

typedef void (*delwork_fn)(unsigned n);
static void (*delwork_run)(delwork_fn f, unsigned n);
static volatile uint64_t sink;

NOINLINE void app_spin(unsigned n)
{
    uint64_t x = sink;
    for (unsigned i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

NOINLINE void app_callback(unsigned n)
{
    app_spin(n);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void app_round(void)
{
    delwork_run(app_callback, 20000);
    __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg)
{
    char name[16];
    snprintf(name, sizeof(name), "del-%d", (int)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    for (;;)
        app_round();
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    if (n < 1 || n > 64)
        n = 2;
    char lib[4096];
    snprintf(lib, sizeof(lib), "%s", argv[0]);
    char *slash = strrchr(lib, '/');
    snprintf(slash ? slash + 1 : lib, sizeof(lib) - (size_t)(slash ? slash + 1 - lib : 0),
             "libdelwork.so");
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    delwork_run = (void (*)(delwork_fn, unsigned))dlsym(h, "delwork_run");
    if (!delwork_run) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    pthread_t th;
    for (int i = 0; i < n; i++)
        pthread_create(&th, NULL, worker, (void *)(intptr_t)(i + 1));
    printf("ready %d\n", getpid());
    fflush(stdout);
    char buf[256];
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    return 0;
}
