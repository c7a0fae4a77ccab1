/* test_vdso.c: the vDSO as a module: its image copied out of another process, shared by
 * build-id, reused on maps re-reads, named from its .dynsym, and printed by the slice
 * builder by name rather than as "[[vdso]+0x...]" (and [vsyscall] as "[vsyscall]"). */
#include "maps.h"
#include "modules.h"
#include "profile.h"
#include "slice.h"
#include "symbols.h"
#include "symtest.h"
#include "util.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Where x86-64 puts the legacy vsyscall page (fixed by the ABI). */
#define VSYSCALL_ADDR 0xffffffffff600000ull

/* The [vdso] entry of m, or NULL. */
static struct map_entry *vdso_entry(const struct maps *m)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].path && !strcmp(m->v[i].path, "[vdso]"))
            return &m->v[i];
    return NULL;
}

/* A copy of src with its own paths and module references, and room for `extra` more. */
static void copy_maps(const struct maps *src, size_t extra, struct maps *dst)
{
    dst->v = xcalloc(src->n + extra, sizeof(*dst->v));
    dst->n = src->n;
    for (size_t i = 0; i < src->n; i++) {
        dst->v[i] = src->v[i];
        dst->v[i].path = src->v[i].path ? xstrdup(src->v[i].path) : NULL;
        dst->v[i].mod = module_ref(src->v[i].mod);
    }
}

/* Build-id of the file open on our descriptor fd as readelf prints it ("" without
 * readelf): a second opinion that shares nothing with the module code's ELF parsing. */
static void readelf_build_id(int fd, char *out, size_t size)
{
    out[0] = '\0';
    char *cmd = xasprintf("readelf -n /proc/%d/fd/%d 2>/dev/null", (int)getpid(), fd);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p)
        return;
    char line[512];
    while (fgets(line, sizeof(line), p)) {
        const char *b = strstr(line, "Build ID: ");
        if (b) {
            snprintf(out, size, "%s", b + strlen("Build ID: "));
            out[strcspn(out, "\n")] = '\0';
        }
    }
    pclose(p);
}

/* The module holds exactly the image the process has mapped, and is the ELF object that
 * image says. */
static void check_module(const struct fixture *fx, const struct map_entry *e)
{
    const struct module *mod = e->mod;
    CHECK_STR(mod->path, "[vdso]");
    CHECK_STR(mod->name, "[vdso]");
    CHECK(!mod->deleted);
    CHECK_INT(mod->e_type, ET_DYN);
    CHECK(mod->nloads >= 1);
    CHECK(mod->build_id_len > 0);
    char hex[2 * MODULE_MAX_BUILD_ID + 1], want[2 * MODULE_MAX_BUILD_ID + 1];
    module_build_id_hex(mod, hex, sizeof(hex));
    readelf_build_id(mod->fd, want, sizeof(want));
    if (want[0])
        CHECK_STR(hex, want);

    size_t size = (size_t)(e->end - e->start);
    char *mem = xmalloc(size), *file = xmalloc(size + 1);
    struct iovec l = {mem, size}, r = {(void *)(uintptr_t)e->start, size};
    CHECK(process_vm_readv(fx->pid, &l, 1, &r, 1, 0) == (ssize_t)size);
    CHECK(pread(mod->fd, file, size + 1, 0) == (ssize_t)size);
    CHECK(!memcmp(mem, file, size));
    free(mem);
    free(file);
}

/* Name the first, middle and last byte of __vdso_clock_gettime (fn: its address, and its
 * size in the line field), and a byte of the ELF header, which no symbol covers. With
 * debug_path an empty directory the name can only come from .dynsym; with NULL (the default
 * path) a kernel debug file (linux-image-*-dbg) may give it from DWARF. */
static void check_names(const struct maps *m, const struct fx_site *fn, const char *debug_path)
{
    struct symbolizer *s = symbolizer_create();
    symbolizer_set_debug_path(s, debug_path);
    uint64_t size = (uint64_t)fn->line;
    uint64_t addrs[] = {fn->addr, fn->addr + size / 2, fn->addr + size - 1};
    for (size_t i = 0; i < ARRAY_SIZE(addrs); i++) {
        struct module *mod = NULL;
        uint64_t off = 0;
        const struct sym_frame *f = NULL;
        enum sym_source src = SYM_NONE;
        CHECK(symtest_offset(m, addrs[i], &mod, &off));
        int n = mod ? symbolizer_lookup(s, mod, off, &f, &src) : -EINVAL;
        CHECK(n >= 1);
        if (n < 1)
            continue;
        /* Innermost first: with DWARF, inlined helpers may come before the function. */
        if (!f[n - 1].function || strcmp(f[n - 1].function, "__vdso_clock_gettime")) {
            fprintf(stderr, "debug path %s: __vdso_clock_gettime+0x%" PRIx64 ":\n",
                    debug_path ? debug_path : "(default)", addrs[i] - fn->addr);
            symtest_print_frames("got", f, n);
            symtest_failures++;
        }
        if (debug_path)
            CHECK_INT(src, SYM_DYNSYM);
        else
            CHECK(src == SYM_DYNSYM || src == SYM_DWARF);
    }
    const struct map_entry *e = maps_find(m, fn->addr);
    const struct sym_frame *f = NULL;
    enum sym_source src = SYM_DWARF;
    CHECK_INT(symbolizer_lookup(s, e->mod, 0, &f, &src), 1);
    CHECK(f && f[0].function == NULL && src == SYM_NONE);
    symbolizer_destroy(s);
}

/* A re-read with prev takes prev's vDSO module, or prev's failure, while the mapping is
 * where it was (the kept failure shows the image was not read again), and reads the image
 * again when the mapping moved (as after an exec). */
static void check_reuse(int pid, const struct maps *m, const struct map_entry *e)
{
    struct maps again, prev, out;
    CHECK_INT(maps_read(pid, true, m, &again), 0);
    const struct map_entry *ae = vdso_entry(&again);
    CHECK(ae && ae->mod == e->mod && ae->mod_err == 0);
    maps_finish(&again);

    copy_maps(m, 0, &prev);
    struct map_entry *pe = vdso_entry(&prev);
    module_unref(pe->mod);
    pe->mod = NULL;
    pe->mod_err = EPERM;
    CHECK_INT(maps_read(pid, true, &prev, &out), 0);
    const struct map_entry *oe = vdso_entry(&out);
    CHECK(oe && oe->mod == NULL && oe->mod_err == EPERM);
    maps_finish(&out);

    /* Moved: the failure, now at another address, is not reused (prev is searched for
     * [vdso] by path, so its order does not matter). */
    pe->start = 0x1000;
    pe->end = 0x1000 + (e->end - e->start);
    CHECK_INT(maps_read(pid, true, &prev, &out), 0);
    oe = vdso_entry(&out);
    CHECK(oe && oe->mod == e->mod && oe->mod_err == 0);
    maps_finish(&out);
    maps_finish(&prev);
}

/* Another process's vDSO, at another address, is the same module: one per kernel image. */
static void check_sharing(const struct map_entry *e)
{
    struct fixture fx2;
    if (fixture_start(&fx2, fixture_path("FIX_VDSO")) < 0) {
        symtest_failures++;
        return;
    }
    size_t mods = modules_count();
    struct maps m2;
    CHECK_INT(maps_read(fx2.pid, true, NULL, &m2), 0);
    const struct map_entry *e2 = vdso_entry(&m2);
    CHECK(e2 && e2->mod == e->mod);
    /* Its executable, libraries and vDSO are all in the registry already (same build-ids). */
    CHECK_INT(modules_count(), mods);
    maps_finish(&m2);
    fixture_stop(&fx2);
}

/* The frame of p whose function is name, or NULL. */
static const struct profile_frame *frame_named(const struct profile *p, const char *name)
{
    for (size_t i = 0; i < p->nframes; i++)
        if (p->frames[i].function && !strcmp(p->frames[i].function, name))
            return &p->frames[i];
    return NULL;
}

/* Through the slice builder and the collapsed formatter: a sample in the vDSO's
 * clock_gettime prints its name, one in [vsyscall] (added to the maps if the kernel has no
 * vsyscall page) prints "[vsyscall]", one in vDSO bytes no symbol covers (its ELF header)
 * prints "[vdso]"; none of them is the application's code. */
static void check_slice(const struct fixture *fx, const struct maps *m, uint64_t vdso_start)
{
    const struct fx_site *fn = fixture_site(fx, "func", "vdso_clock_gettime", 0);
    const struct fx_site *site = fixture_site(fx, "site", "main", 0);
    struct slice_job *job = xcalloc(1, sizeof(*job));
    job->format = SLICE_COLLAPSED;
    job->pid = fx->pid;
    snprintf(job->comm, sizeof(job->comm), "fix_vdso");
    job->exe = xstrdup(fixture_path("FIX_VDSO"));
    job->hz = 100;
    job->nepochs = 1;
    job->epochs = xcalloc(1, sizeof(*job->epochs));
    struct maps *jm = &job->epochs[0].maps;
    copy_maps(m, 1, jm);
    if (!maps_find(jm, VSYSCALL_ADDR) && (!jm->n || jm->v[jm->n - 1].end <= VSYSCALL_ADDR))
        jm->v[jm->n++] = (struct map_entry){.start = VSYSCALL_ADDR,
                                            .end = VSYSCALL_ADDR + 0x1000,
                                            .prot = MAP_PROT_X,
                                            .path = xstrdup("[vsyscall]")};
    uint64_t leaves[] = {fn->addr + (uint64_t)fn->line / 2, VSYSCALL_ADDR, vdso_start};
    job->nstacks = ARRAY_SIZE(leaves);
    job->stacks = xcalloc(job->nstacks, sizeof(*job->stacks));
    for (size_t i = 0; i < job->nstacks; i++) {
        job->stacks[i].n = 2;
        job->stacks[i].ips = xmalloc(2 * sizeof(uint64_t));
        job->stacks[i].ips[0] = leaves[i];
        job->stacks[i].ips[1] = site->addr;
    }
    /* Stacks 0, 1, 2, 0. */
    job->nsamples = 4;
    job->samples = xcalloc(job->nsamples, sizeof(*job->samples));
    for (size_t i = 0; i < job->nsamples; i++)
        job->samples[i] = (struct ring_entry){.t_ns = i + 1, .tid = fx->pid, .stack = i % 3};

    struct symbolizer *s = symbolizer_create();
    struct profile p;
    CHECK_INT(slice_build_profile(job, s, &p), 0);
    struct strbuf sb = {0};
    CHECK_INT(profile_write_collapsed(&p, &sb), 0);
    const char *out = sb.buf ? sb.buf : "";
    if (!strstr(out, "fix_vdso;main;__vdso_clock_gettime 2\n") ||
        !strstr(out, "fix_vdso;main;[vsyscall] 1\n") || !strstr(out, "fix_vdso;main;[vdso] 1\n") ||
        strstr(out, "[[")) {
        fprintf(stderr, "unexpected collapsed output:\n%s", out);
        symtest_failures++;
    }
    const struct profile_frame *f = frame_named(&p, "__vdso_clock_gettime");
    CHECK(f && !f->in_app && f->module && !strcmp(f->module, "[vdso]"));
    f = frame_named(&p, "[vsyscall]");
    CHECK(f && !f->in_app && f->module && !strcmp(f->module, "[vsyscall]"));
    f = frame_named(&p, "[vdso]");
    CHECK(f && !f->in_app && f->module && !strcmp(f->module, "[vdso]") && f->module_off == 0);
    f = frame_named(&p, "main");
    CHECK(f && f->in_app);
    bool image = false;
    for (size_t i = 0; i < p.nimages; i++)
        image |= !strcmp(p.images[i].code_file, "[vdso]") && p.images[i].build_id_len > 0;
    CHECK(image);
    strbuf_finish(&sb);
    profile_free(&p);
    symbolizer_destroy(s);
    slice_job_free(job);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t mods = modules_count();
    int fds = symtest_count_fds();
    struct fixture fx;
    if (fixture_start(&fx, fixture_path("FIX_VDSO")) < 0)
        return 1;
    const struct fx_site *fn = fixture_site(&fx, "func", "vdso_clock_gettime", 0);
    struct maps m;
    CHECK_INT(maps_read(fx.pid, true, NULL, &m), 0);
    struct map_entry *e = vdso_entry(&m);
    if (!e && !fn->addr) {
        /* A kernel booted with vdso=0, or the fixture run under valgrind. */
        printf("the fixture has no vDSO: skipped\n");
        maps_finish(&m);
        fixture_stop(&fx);
        return 77;
    }
    CHECK(e && fn->addr && fn->line > 0);
    CHECK(e && e->mod);
    if (e && !e->mod)
        fprintf(stderr, "no vDSO module: %s\n", strerror(e->mod_err));
    if (!e || !e->mod || !fn->addr || fn->line <= 0) {
        maps_finish(&m);
        fixture_stop(&fx);
        return 1;
    }
    CHECK(maps_find(&m, fn->addr) == e);
    printf("vDSO at %#" PRIx64 "-%#" PRIx64 ", __vdso_clock_gettime at %#" PRIx64 " (%d bytes)\n",
           e->start, e->end, fn->addr, fn->line);

    char *tmp = symtest_mkdtemp();
    check_module(&fx, e);
    check_names(&m, fn, tmp);
    check_names(&m, fn, NULL);
    check_reuse(fx.pid, &m, e);
    check_sharing(e);
    check_slice(&fx, &m, e->start);

    maps_finish(&m);
    fixture_stop(&fx);
    symtest_rmtree(tmp);
    free(tmp);
    CHECK_INT(modules_count(), mods);
    modules_shutdown(); /* the helper that read ELF headers: its socket */
    CHECK_INT(symtest_count_fds(), fds);
    if (symtest_failures)
        fprintf(stderr, "%d check(s) failed\n", symtest_failures);
    return symtest_failures ? 1 : 0;
}
