/* test_pyframes.c: daemon/pyframes.c against real interpreters: Debian's python3.11 (a
 * non-PIE executable), pyenv's 3.11, 3.12 and 3.13 (libpython3.X.so) and Debian unstable's
 * 3.14 (tests/integration/fetch_python.py) where present, each
 * running pyscript.py (threads waiting at known lines: nested calls, a method, a generator,
 * Python called back from C, and a thread busy in zlib). Every interpreter found is
 * checked: the thread states of the threads by their native ids, the frame chains innermost
 * first with qualified names, files and lines (the location table), the evaluation-call
 * boundaries (Python called back from C), and a running thread's chain read while it runs
 * (retried when torn, the tears counted). Exit 77 only if no interpreter is found at all. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <glob.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pyframes.h"

static int failures;
#define CHECK(c, ...)                                                                  \
    do {                                                                               \
        if (c) {                                                                       \
            printf("ok: ");                                                            \
        } else {                                                                       \
            printf("FAIL: ");                                                          \
            failures++;                                                                \
        }                                                                              \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
    } while (0)

struct syms {
    uint64_t runtime, version, code_type, str_type;
};

/* The three symbols in file's .dynsym, plus bias. Returns how many were found. */
static int find_syms(const char *file, uint64_t bias, struct syms *out)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int found = 0;
    Elf_Scn *scn = NULL;
    while (e && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s) || !s.st_value)
                continue;
            const char *n = elf_strptr(e, sh.sh_link, s.st_name);
            if (!n)
                continue;
            uint64_t *slot = !strcmp(n, "_PyRuntime")     ? &out->runtime
                             : !strcmp(n, "Py_Version")   ? &out->version
                             : !strcmp(n, "PyCode_Type") ? &out->code_type
                             : !strcmp(n, "PyUnicode_Type") ? &out->str_type
                                                          : NULL;
            if (slot && !*slot) {
                *slot = s.st_value + bias;
                found++;
            }
        }
    }
    if (e)
        elf_end(e);
    close(fd);
    return found;
}

/* The interpreter's symbols in process pid: the first mapped file (offset 0) named like
 * python that has them; bias from its first loadable segment. */
static int locate(pid_t pid, struct syms *out)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int r = -1;
    while (r < 0 && fgets(line, sizeof(line), f)) {
        unsigned long start, off;
        char file[512] = "";
        if (sscanf(line, "%lx-%*x %*s %lx %*s %*s %511s", &start, &off, file) < 2 || off ||
            !strstr(file, "python"))
            continue;
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        Elf *e = elf_begin(fd, ELF_C_READ, NULL);
        GElf_Ehdr eh;
        uint64_t bias = 0;
        if (e && gelf_getehdr(e, &eh) && eh.e_type == ET_DYN) {
            size_t n;
            elf_getphdrnum(e, &n);
            for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD) {
                    bias = start - (ph.p_vaddr & ~0xfffull);
                    break;
                }
            }
        }
        if (e)
            elf_end(e);
        close(fd);
        memset(out, 0, sizeof(*out));
        if (find_syms(file, bias, out) == 4)
            r = 0;
    }
    fclose(f);
    return r;
}

struct named {
    char module[128];
    char qual[256];
    char file[512];
    int line;
    bool entry;
};

/* Thread tid's frames, resolved; retried while torn. Returns how many, or -errno. */
static int frames_of(const struct py_runtime *rt, pid_t tid, struct named *out, size_t max,
                     int *torn)
{
    uint64_t hint = 0;
    struct py_frame fr[128];
    for (int attempt = 0; attempt < 1000; attempt++) {
        int64_t ts = py_thread_state(rt, tid, &hint);
        if (ts <= 0)
            return ts < 0 ? (int)ts : -ENOENT;
        bool trunc;
        int n = py_read_frames(rt, (uint64_t)ts, fr, 128, &trunc);
        if (n == -EAGAIN) {
            (*torn)++;
            continue;
        }
        if (n < 0)
            return n;
        int k = 0;
        for (; k < n && (size_t)k < max; k++) {
            struct py_code c;
            int r = py_read_code(rt, fr[k].code, fr[k].func, &c);
            if (r == 0 && c.ident != fr[k].ident)
                r = -EAGAIN;
            if (r < 0)
                break;
            snprintf(out[k].qual, sizeof(out[k].qual), "%s", c.qualname);
            snprintf(out[k].module, sizeof(out[k].module), "%s", c.module);
            snprintf(out[k].file, sizeof(out[k].file), "%s", c.filename);
            out[k].line = py_code_line(&c, fr[k].instr);
            out[k].entry = fr[k].entry;
            py_code_free(&c);
        }
        if (k < n) {
            (*torn)++;
            continue;
        }
        return n;
    }
    return -EAGAIN;
}

/* The line of marker "# L:name" in the script. */
static int marker_line(const char *script, const char *name)
{
    FILE *f = fopen(script, "r");
    char line[512], want[96];
    snprintf(want, sizeof(want), "# L:%s\n", name);
    int n = 0, found = -1;
    while (f && fgets(line, sizeof(line), f)) {
        n++;
        size_t a = strlen(line), b = strlen(want);
        if (a >= b && !strcmp(line + a - b, want))
            found = n;
    }
    if (f)
        fclose(f);
    return found;
}

/* Do frames [0, n) contain, in order (innermost first, not necessarily adjacent), each of
 * want[] as "qualname:marker"? */
static bool in_order(const struct named *fr, int n, const char *script, const char *const *want,
                     char *why, size_t whylen)
{
    int k = 0;
    for (size_t w = 0; want[w]; w++) {
        char q[128], m[64];
        const char *colon = strchr(want[w], ':');
        snprintf(q, sizeof(q), "%.*s", (int)(colon - want[w]), want[w]);
        snprintf(m, sizeof(m), "%s", colon + 1);
        int line = marker_line(script, m);
        while (k < n && !(strcmp(fr[k].qual, q) == 0 && fr[k].line == line &&
                          strstr(fr[k].file, "pyscript.py")))
            k++;
        if (k == n) {
            snprintf(why, whylen, "%s at line %d not found in order", q, line);
            return false;
        }
        k++;
    }
    return true;
}

static void describe(const struct named *fr, int n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o + 1 < cap; i++) {
        const char *base = strrchr(fr[i].file, '/');
        int w = snprintf(buf + o, cap - o, "%s%s(%s:%d)%s", i ? " < " : "", fr[i].qual,
                         base ? base + 1 : fr[i].file, fr[i].line, fr[i].entry ? "*" : "");
        if (w < 0 || (size_t)w >= cap - o)
            break;
        o += (size_t)w;
    }
}

static void run_one(const char *python, const char *script)
{
    printf("== %s\n", python);
    int in[2], outp[2];
    if (pipe(in) < 0 || pipe(outp) < 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(outp[1], 1);
        close(in[1]);
        close(outp[0]);
        execl(python, python, "-u", script, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    FILE *o = fdopen(outp[0], "r");
    char ready[512] = "";
    if (!fgets(ready, sizeof(ready), o) || strncmp(ready, "ready ", 6)) {
        CHECK(false, "%s: the script starts (%s)", python, ready);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    pid_t tid_method = 0, tid_gen = 0, tid_sorted = 0, tid_zlib = 0;
    for (char *tok = strtok(ready + 6, " \n"); tok; tok = strtok(NULL, " \n")) {
        int v = atoi(strchr(tok, '=') ? strchr(tok, '=') + 1 : "0");
        if (!strncmp(tok, "method=", 7))
            tid_method = v;
        else if (!strncmp(tok, "gen=", 4))
            tid_gen = v;
        else if (!strncmp(tok, "sorted=", 7))
            tid_sorted = v;
        else if (!strncmp(tok, "zlib=", 5))
            tid_zlib = v;
    }
    usleep(200000); /* (the threads reach their waits) */
    struct syms s;
    int r = locate(pid, &s);
    CHECK(r == 0, "%s: _PyRuntime, Py_Version, PyCode_Type and PyUnicode_Type found in its .dynsym", python);
    struct py_runtime rt;
    if (r == 0) {
        r = py_runtime_init(&rt, pid, s.runtime, s.version, s.code_type, s.str_type);
        CHECK(r == 0, "%s: version %#lx is read (%s)", python, rt.version_hex,
              r ? strerror(-r) : "ok");
        if (r == 0 && rt.lay->version == 0x030d0000) {
            /* 3.13: the offsets come from its _Py_DebugOffsets; for 3.13.0 they are the
             * ones measured against its headers. */
            const struct py_layout *t = py_layout_of(rt.version_hex);
            const struct py_layout *l = rt.lay;
            CHECK(l == &rt.own && l->rt_interp_head == t->rt_interp_head &&
                      l->interp_threads == t->interp_threads && l->interp_next == t->interp_next &&
                      l->ts_frame == t->ts_frame && l->ts_native_tid == t->ts_native_tid &&
                      l->fr_code == t->fr_code && l->fr_previous == t->fr_previous &&
                      l->fr_instr == t->fr_instr && l->fr_owner == t->fr_owner &&
                      l->co_qualname == t->co_qualname && l->co_linetable == t->co_linetable &&
                      l->co_code_adaptive == t->co_code_adaptive && l->str_ascii == t->str_ascii,
                  "%s: the offsets read from _Py_DebugOffsets (interpreters at %u, threads at "
                  "%u, current_frame at %u, code at %u) are the ones measured for 3.13.0",
                  python, l->rt_interp_head, l->interp_threads, l->ts_frame,
                  l->co_code_adaptive);
        }
    }
    if (r == 0) {
        struct named fr[128];
        char why[256], desc[4096];
        int torn = 0;
        struct {
            const char *what;
            pid_t tid;
            const char *want[8];
        } cases[] = {
            {"nested calls and a method", tid_method,
             {"leaf_wait:leaf_wait", "middle:middle", "Outer.method:method",
              "run_method:run_method", NULL}},
            {"a generator", tid_gen,
             {"leaf_wait:leaf_wait", "middle:middle", "gen:gen", "run_gen:run_gen", NULL}},
            {"Python called back from C (sorted's key)", tid_sorted,
             {"leaf_wait:leaf_wait", "middle:middle", "keyf:keyf", "run_sorted:run_sorted",
              NULL}},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            int n = frames_of(&rt, cases[i].tid, fr, 128, &torn);
            describe(fr, n > 0 ? n : 0, desc, sizeof(desc));
            bool ok = n > 0 && in_order(fr, n, script, cases[i].want, why, sizeof(why));
            CHECK(ok, "%s: %s: %s%s%s", python, cases[i].what, desc, ok ? "" : ": ",
                  ok ? "" : (n > 0 ? why : strerror(-n)));
            if (i == 2 && ok) {
                /* keyf runs in an evaluation call of its own (sorted, C, called it): it is
                 * that call's first frame; run_sorted's call is another. */
                int k = 0;
                while (k < n && strcmp(fr[k].qual, "keyf"))
                    k++;
                bool inner_none = true;
                for (int j = 0; j < k; j++)
                    inner_none &= !fr[j].entry;
                CHECK(k < n && fr[k].entry && inner_none,
                      "%s: the evaluation call boundary is at keyf, called from C, and not "
                      "between the Python calls inside it", python);
            }
            if (ok) {
                int k = 0;
                while (k < n && strcmp(fr[k].qual, "leaf_wait"))
                    k++;
                int w = 0;
                while (w < n && strcmp(fr[w].qual, "Event.wait"))
                    w++;
                CHECK(k < n && !strcmp(fr[k].module, "__main__") && w < n &&
                          !strcmp(fr[w].module, "threading"),
                      "%s: modules from the functions: leaf_wait in %s, Event.wait in %s",
                      python, k < n ? fr[k].module : "?", w < n ? fr[w].module : "?");
            }
            if (i == 0 && ok) {
                /* The outermost frame is the thread's bootstrap, called from C. */
                CHECK(fr[n - 1].entry && strstr(fr[n - 1].qual, "_bootstrap"),
                      "%s: the outermost frame is an entry (%s)", python, fr[n - 1].qual);
            }
        }
        /* The thread busy in zlib.compress: read while it runs, many times. */
        int reads = 0, good = 0, torn_z = 0;
        for (; reads < 300; reads++) {
            int t0 = torn_z;
            int n = frames_of(&rt, tid_zlib, fr, 128, &torn_z);
            (void)t0;
            /* Between two compress calls the loop tests ev.is_set(), a Python method: a
             * read may end there, one frame above run_zlib (seen once in 300 reads). */
            int at = n > 1 && !strcmp(fr[0].qual, "Event.is_set") ? 1 : 0;
            if (n > at && !strcmp(fr[at].qual, "run_zlib") && strstr(fr[at].file, "pyscript.py"))
                good++;
        }
        CHECK(good == reads, "%s: a running thread (in zlib.compress): %d of %d reads end in "
              "run_zlib (or in Event.is_set called from it); %d torn reads retried", python,
              good, reads, torn_z);
        CHECK(py_thread_state(&rt, 1, &(uint64_t){0}) == 0,
              "%s: a thread id that is not a Python thread has no thread state", python);
    }
    if (write(in[1], "\n", 1) < 0)
        kill(pid, SIGKILL);
    close(in[1]);
    int st;
    waitpid(pid, &st, 0);
    fclose(o);
}

/* Every interpreter matching pattern pat: how many. */
static int run_matching(const char *pat, const char *script)
{
    glob_t g;
    int n = 0;
    if (glob(pat, 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++, n++)
        run_one(g.gl_pathv[i], script);
    globfree(&g);
    return n;
}

int main(int argc, char **argv)
{
    (void)argc;
    elf_version(EV_CURRENT);
    /* pyscript.py next to this test's source. */
    char script[4096];
    const char *src = getenv("PYSCRIPT");
    snprintf(script, sizeof(script), "%s", src ? src : "pyscript.py");
    (void)argv;
    if (access(script, R_OK) < 0) {
        printf("FAIL: %s not found\n", script);
        return 1;
    }
    int found = 0;
    if (access("/usr/bin/python3.11", X_OK) == 0) {
        run_one("/usr/bin/python3.11", script);
        found++;
    }
    const char *home = getenv("PYENV_ROOT");
    char pat[4096];
    snprintf(pat, sizeof(pat), "%s/versions/3.1[123].*/bin/python3.1[123]",
             home ? home : "/root/.pyenv");
    int n = run_matching(pat, script);
    if (!n)
        printf("(no pyenv interpreters at %s: only Debian's python3.11 checked)\n", pat);
    found += n;
    /* Debian unstable's 3.14 where tests/integration/fetch_python.py fetched it. */
    const char *extra = getenv("PROFD_TEST_PYTHONS");
    snprintf(pat, sizeof(pat), "%s/python3.1[1-9]/usr/bin/python3.1[1-9]",
             extra ? extra : "/opt/profd-tests");
    n = run_matching(pat, script);
    if (!n)
        printf("(no CPython at %s: 3.14 not checked)\n", pat);
    found += n;
    if (!found) {
        printf("SKIP: no CPython 3.11-3.14 on this machine\n");
        return 77;
    }
    printf("%d interpreters checked, %d failures\n", found, failures);
    return failures ? 1 : 0;
}
