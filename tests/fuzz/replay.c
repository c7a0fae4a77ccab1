/* replay.c: main() of the plain (non-libFuzzer) build of every harness: replays each file
 * named on the command line, and each file in each directory named, through
 * LLVMFuzzerTestOneInput. An empty or missing corpus fails: it would pass without testing
 * anything. Also the helpers of fuzz.h that are not inline. */
#include "fuzz.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

char *fuzz_str(struct fuzz_in *in, size_t max)
{
    size_t k = 0;
    while (k < max && k < in->n && in->p[k])
        k++;
    char *s = malloc(k + 1);
    if (!s)
        abort();
    memcpy(s, in->p, k);
    s[k] = '\0';
    /* Consume the terminating NUL too, if that is what ended it. */
    size_t used = k < in->n && k < max ? k + 1 : k;
    in->p += used;
    in->n -= used;
    return s;
}

int fuzz_memfd(const void *p, size_t n)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) {
        perror("memfd_create");
        abort();
    }
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) {
            perror("write");
            abort();
        }
        b += w;
        n -= (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) < 0)
        abort();
    return fd;
}

#ifndef PROFD_LIBFUZZER
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb)
                abort();
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0)
            break;
        len += got;
    }
    fclose(f);
    /* An exact-size copy: ASan then catches a read one past the end of the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int only_files(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int runs = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            perror(argv[i]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += run_file(argv[i]) < 0;
            runs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, only_files, alphasort);
        if (n < 0) {
            perror(argv[i]);
            errors++;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
            errors += run_file(path) < 0;
            runs++;
            free(names[k]);
        }
        free(names);
    }
    fprintf(stderr, "replayed %d input(s), %d unreadable\n", runs, errors);
    return runs > 0 && errors == 0 ? 0 : 1;
}
#endif
