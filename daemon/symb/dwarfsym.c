/* dwarfsym.c: file offset -> function, file and line, with inlined frames, on elfutils
 * libdwfl (see dwarfsym.h). */
#include "dwarfsym.h"

#include "containers.h"
#include "elfinfo.h"
#include "gosym.h"
#include "log.h"
#include "util.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libstdc++'s demangler (the helper links libstdc++); declared here so that this C file
 * needs no C++ header. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Frames kept per address; a deeper inline chain loses its innermost frames. */
#define MAX_FRAMES SYMP_MAX_FRAMES

/* A function's code range, in a unit's function index. */
struct fn_range {
    uint64_t lo, hi;
    Dwarf_Die die;
};

/* The functions of one compilation unit, sorted by address. */
struct cu_index {
    size_t n;
    struct fn_range v[];
};

/* One cached answer: n frames, innermost first. */
struct sym_entry {
    int n;
    enum symp_source src;
    struct dsym_frame f[];
};

/* One module: a Dwfl holding that one file at its own virtual addresses, and the answers
 * found so far. Strings in the answers point into libdw's and libelf's data for the file or
 * into the arena, so they live as long as this. */
struct modsym {
    struct dsym *owner;
    uint64_t id;
    char *path;
    struct symp_elf_info info; /* PT_LOAD headers: file offset -> address */
    Dwfl *dwfl;
    Dwfl_Module *dmod;   /* NULL if libdwfl could not take the file */
    bool dwarf;          /* debug info found (in the file or a separate debug file) */
    struct u64map cache; /* file offset -> struct sym_entry */
    struct u64map names; /* address of a mangled name or of a DIE -> name to show */
    struct u64map units; /* address of a unit's DIE -> struct cu_index */
    struct u64map paths; /* address of a source file name -> its absolute path */
    struct arena arena;
    struct gosym *go; /* the Go runtime's table, for a Go program (gosym.h) */
    Elf *symelf; /* last symbol table file classified, and what it is */
    enum symp_source symelf_src;
    /* Parts of CPython's evaluation loop its symbol does not cover (split_parts()). */
    bool split_done;
    size_t nsplit;
    struct {
        uint64_t lo, hi;
    } split[4];
    /* Separate debug files: the next find_debuginfo call is for the dwz alternate file (the
     * main file's own DWARF, or its debug file, has been found), and that file's build-id
     * from .gnu_debugaltlink. */
    bool alt_phase;
    uint8_t alt_id[SYMP_MAX_BUILD_ID];
    size_t alt_id_len;
};

struct dsym {
    Dwfl_Callbacks cb;     /* dwfl_begin keeps a pointer to it */
    struct u64map mods;    /* id -> struct modsym */
    dsym_open_fn open_debug;
    void *open_arg;
};

/* File offset -> ELF virtual address through the PT_LOAD headers, executable ones first
 * (where segments share a page, the code's own segment is the right one). */
static bool offset_to_vaddr(const struct modsym *st, uint64_t off, uint64_t *vaddr)
{
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < st->info.nloads; i++) {
            const struct symp_load *l = &st->info.loads[i];
            if (!!(l->flags & PF_X) != (pass == 0))
                continue;
            if (off >= l->offset && off - l->offset < l->filesz) {
                *vaddr = l->vaddr + (off - l->offset);
                return true;
            }
        }
    }
    return false;
}

/* CRC-32 (IEEE 802.3, as zlib's crc32 and .gnu_debuglink use it) of the file open on fd. */
static int file_crc32(int fd, uint32_t *out)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t crc = 0xffffffffu;
    static unsigned char buf[64 * 1024];
    for (off_t at = 0;;) {
        ssize_t n = pread(fd, buf, sizeof(buf), at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
        at += n;
    }
    *out = crc ^ 0xffffffffu;
    return 0;
}

/* Whether the file open on fd has this build-id. */
static bool has_build_id(int fd, const void *id, size_t len)
{
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return false;
    const void *got;
    ssize_t n = dwelf_elf_gnu_build_id(elf, &got);
    bool same = n > 0 && (size_t)n == len && !memcmp(got, id, len);
    elf_end(elf);
    return same;
}

/* The build-id named by the .gnu_debugaltlink section of elf (a dwz-compressed debug file
 * points at the shared "alternate" file that way: NUL-terminated name, then the id). */
static void read_altlink(Elf *elf, struct modsym *st)
{
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        const char *name;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS ||
            !(name = elf_strptr(elf, shstrndx, sh.sh_name)) || strcmp(name, ".gnu_debugaltlink"))
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data || !data->d_buf)
            return;
        const char *nul = memchr(data->d_buf, '\0', data->d_size);
        if (!nul)
            return;
        size_t off = (size_t)(nul - (const char *)data->d_buf) + 1;
        size_t len = data->d_size - off;
        if (len == 0 || len > sizeof(st->alt_id))
            return;
        memcpy(st->alt_id, (const char *)data->d_buf + off, len);
        st->alt_id_len = len;
        return;
    }
}

/* Whether elf holds DWARF of its own (a .debug_info with contents). */
static bool has_debug_info(Elf *elf)
{
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return false;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        const char *name;
        if (gelf_getshdr(scn, &sh) && sh.sh_type != SHT_NOBITS &&
            (name = elf_strptr(elf, shstrndx, sh.sh_name)) &&
            (!strcmp(name, ".debug_info") || !strcmp(name, ".zdebug_info")))
            return true;
    }
    return false;
}

/* Check a debug file from the open callback: the build-id it must have (len > 0), else the
 * debuglink's CRC (crc != 0). Returns fd, or -1 (closed) if it is not the file asked for. On
 * success, remembers the file's own alternate-file link. */
static int accept_debug(struct modsym *st, int fd, const void *id, size_t len, uint32_t crc)
{
    if (fd < 0)
        return -1;
    bool ok;
    if (len) {
        ok = has_build_id(fd, id, len);
    } else {
        uint32_t got = 0;
        ok = crc == 0 || (file_crc32(fd, &got) == 0 && got == crc);
    }
    Elf *elf = ok ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    if (elf) {
        if (!st->alt_phase)
            read_altlink(elf, st);
        elf_end(elf);
    }
    if (!ok) {
        log_debug("%s: a debug file that is not the one asked for was ignored", st->path);
        close(fd);
        return -1;
    }
    return fd;
}

/* libdwfl's find_debuginfo callback: asked first for the module's separate debug file
 * (unless the file has DWARF of its own), then for the dwz alternate file of whichever holds
 * the DWARF. Nothing is opened by path here: files come from the open callback, and one is
 * used only if it is the file asked for (build-id, or the debuglink's CRC), as libdwfl's own
 * search checks. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          Dwarf_Addr base, const char *file_name, const char *debuglink,
                          GElf_Word crc, char **debuginfo_file_name)
{
    (void)modname, (void)base, (void)file_name;
    struct modsym *st = *userdata;
    *debuginfo_file_name = NULL;
    errno = 0;
    if (!st || !st->owner->open_debug)
        return -1;
    struct dsym *d = st->owner;
    if (st->alt_phase) {
        if (!st->alt_id_len)
            return -1;
        int fd = d->open_debug(d->open_arg, st->id, SYMP_OPEN_BUILD_ID, st->alt_id,
                               st->alt_id_len);
        return accept_debug(st, fd, st->alt_id, st->alt_id_len, 0);
    }
    st->alt_phase = true; /* whatever happens, the next call is for the alternate file */
    const unsigned char *bits;
    GElf_Addr vaddr;
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len > 0) {
        int fd = d->open_debug(d->open_arg, st->id, SYMP_OPEN_BUILD_ID, bits, (size_t)len);
        st->alt_phase = false;
        fd = accept_debug(st, fd, bits, (size_t)len, 0);
        st->alt_phase = true;
        if (fd >= 0)
            return fd;
    }
    /* A debuglink names a file, never a path: anything else is not one we look for. */
    if (debuglink && *debuglink && !strchr(debuglink, '/') && strcmp(debuglink, ".") &&
        strcmp(debuglink, "..")) {
        int fd = d->open_debug(d->open_arg, st->id, SYMP_OPEN_DEBUGLINK, debuglink,
                               strlen(debuglink));
        st->alt_phase = false;
        fd = accept_debug(st, fd, NULL, 0, crc);
        st->alt_phase = true;
        if (fd >= 0)
            return fd;
    }
    return -1;
}

/* libdwfl's find_elf: the file is always given as a descriptor; never look for it. */
static int find_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                    char **file_name, Elf **elfp)
{
    (void)mod, (void)userdata, (void)modname, (void)base, (void)file_name, (void)elfp;
    return -1;
}

struct dsym *dsym_create(dsym_open_fn open_debug, void *arg)
{
    elf_version(EV_CURRENT);
    struct dsym *d = xcalloc(1, sizeof(*d));
    d->cb.find_elf = find_elf;
    d->cb.find_debuginfo = find_debuginfo;
    d->cb.section_address = dwfl_offline_section_address;
    d->open_debug = open_debug;
    d->open_arg = arg;
    return d;
}

/* Free a module's state. */
static void state_free(struct modsym *st)
{
    gosym_close(st->go);
    if (st->dwfl)
        dwfl_end(st->dwfl);
    u64map_finish(&st->cache);
    u64map_finish(&st->names);
    u64map_finish(&st->paths);
    u64map_finish(&st->units);
    arena_free(&st->arena);
    free(st->path);
    free(st);
}

int dsym_add(struct dsym *d, uint64_t id, int fd, const char *path)
{
    if (u64map_get(&d->mods, id)) {
        close(fd);
        return -EEXIST;
    }
    struct modsym *st = xcalloc(1, sizeof(*st));
    st->owner = d;
    st->id = id;
    st->path = xstrdup(path && *path ? path : "?");
    u64map_put(&d->mods, id, st);
    elfinfo_read(fd, &st->info);
    if (st->info.err < 0) {
        close(fd);
        return st->info.err;
    }
    st->dwfl = dwfl_begin(&d->cb);
    if (!st->dwfl) {
        log_warn("dwfl_begin: %s", dwfl_errmsg(-1));
        close(fd);
        return -ENOMEM;
    }
    const char *slash = strrchr(st->path, '/');
    /* Base 0 with add_p_vaddr: the module sits at the ELF's own p_vaddr (bias 0) for ET_DYN as
     * for ET_EXEC, so offset_to_vaddr() gives Dwfl addresses. Dwfl owns fd from here. */
    st->dmod = dwfl_report_elf(st->dwfl, slash ? slash + 1 : st->path, st->path, fd, 0, true);
    if (!st->dmod) {
        log_debug("%s: dwfl_report_elf: %s", st->path, dwfl_errmsg(-1));
        close(fd);
    }
    dwfl_report_end(st->dwfl, NULL, NULL);
    if (st->dmod) {
        void **ud = NULL;
        dwfl_module_info(st->dmod, &ud, NULL, NULL, NULL, NULL, NULL, NULL);
        if (ud)
            *ud = st;
        Dwarf_Addr bias;
        Elf *elf = dwfl_module_getelf(st->dmod, &bias);
        st->go = gosym_open(elf);
        if (elf && has_debug_info(elf)) {
            st->alt_phase = true;
            read_altlink(elf, st);
        }
        /* This is where the separate debug file is asked for (build-id, then debuglink). */
        st->dwarf = dwfl_module_getdwarf(st->dmod, &bias) != NULL;
        log_debug("%s: %s", st->path, st->dwarf ? "debug info" : "no debug info");
    }
    return 0;
}

bool dsym_has(const struct dsym *d, uint64_t id)
{
    return u64map_get(&d->mods, id) != NULL;
}

void dsym_forget(struct dsym *d, uint64_t id)
{
    struct modsym *st = u64map_get(&d->mods, id);
    if (!st)
        return;
    u64map_del(&d->mods, id);
    state_free(st);
}

size_t dsym_count(const struct dsym *d)
{
    return d->mods.n;
}

void dsym_destroy(struct dsym *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->mods.cap; i++)
        if (d->mods.vals[i])
            state_free(d->mods.vals[i]);
    u64map_finish(&d->mods);
    free(d);
}

/* Demangled form of a C++ name, computed once per name; other names as they are. The
 * mangled name lives in libdw's or libelf's data, so its address is a stable key. */
static const char *demangle(struct modsym *st, const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z')
        return name;
    const char *d = u64map_get(&st->names, (uintptr_t)name);
    if (d)
        return d;
    int status = -1;
    char *out = __cxa_demangle(name, NULL, NULL, &status);
    d = status == 0 && out ? arena_strndup(&st->arena, out, strlen(out)) : name;
    free(out);
    u64map_put(&st->names, (uintptr_t)name, (void *)d);
    return d;
}

/* Whether the unit holding die is C++, where names are qualified and mangled. */
static bool is_cxx(Dwarf_Die *die)
{
    Dwarf_Die cu;
    if (!dwarf_diecu(die, &cu, NULL, NULL))
        return false;
    int lang = dwarf_srclang(&cu);
    return lang == DW_LANG_C_plus_plus || lang == DW_LANG_C_plus_plus_03 ||
           lang == DW_LANG_C_plus_plus_11 || lang == DW_LANG_C_plus_plus_14;
}

/* "ns::Klass::name" for a C++ function DIE, from the namespaces and classes around its
 * declaration (followed through DW_AT_abstract_origin and DW_AT_specification). Cached per
 * declaration DIE: finding its parents walks the unit. */
static const char *qualify(struct modsym *st, Dwarf_Die *die, const char *name)
{
    Dwarf_Die decl = *die, next;
    Dwarf_Attribute attr;
    for (int i = 0; i < 8; i++) {
        if (!dwarf_attr(&decl, DW_AT_abstract_origin, &attr) &&
            !dwarf_attr(&decl, DW_AT_specification, &attr))
            break;
        if (!dwarf_formref_die(&attr, &next))
            break;
        decl = next;
    }
    const char *q = u64map_get(&st->names, (uintptr_t)decl.addr);
    if (q)
        return q;
    Dwarf_Die *chain = NULL;
    int n = dwarf_getscopes_die(&decl, &chain);
    struct strbuf sb = {0};
    for (int i = n - 1; i >= 1; i--) {
        int tag = dwarf_tag(&chain[i]);
        if (tag != DW_TAG_namespace && tag != DW_TAG_class_type && tag != DW_TAG_structure_type &&
            tag != DW_TAG_union_type)
            continue;
        const char *part = dwarf_diename(&chain[i]);
        strbuf_printf(&sb, "%s::",
                      part                      ? part
                      : tag == DW_TAG_namespace ? "(anonymous namespace)"
                                                : "{unnamed}");
    }
    free(chain);
    strbuf_puts(&sb, name);
    q = sb.buf ? arena_strndup(&st->arena, sb.buf, sb.len) : name;
    strbuf_finish(&sb);
    u64map_put(&st->names, (uintptr_t)decl.addr, (void *)q);
    return q;
}

/* Name of a function DIE. C++: the demangled linkage name ("ns::Klass<int>::method(int)"),
 * which DW_AT_abstract_origin / DW_AT_specification lead to for inlined instances and
 * out-of-class definitions. Functions with internal linkage (anonymous namespace) have no
 * linkage name in DWARF: for code that is not inlined, the symbol table's mangled name of the
 * same function, else the name qualified from the DIE's scopes. C: DW_AT_name (not a
 * linkage name such as glibc's "__GI___libc_malloc"). vaddr is where the function's code
 * is for the outermost frame, 0 for inlined ones. */
static const char *die_name(struct modsym *st, Dwarf_Die *die, uint64_t vaddr)
{
    Dwarf_Attribute attr;
    const char *linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (!linkage)
        linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
    if (linkage && linkage[0] == '_' && linkage[1] == 'Z')
        return demangle(st, linkage);
    const char *name = dwarf_diename(die);
    if (!name)
        return linkage;
    if (linkage || !is_cxx(die))
        return name;
    Dwarf_Addr entry;
    GElf_Off off;
    GElf_Sym sym;
    Dwarf_Addr bias;
    Elf *elf;
    if (vaddr && dwarf_entrypc(die, &entry) == 0) {
        const char *sname = dwfl_module_addrinfo(st->dmod, vaddr, &off, &sym, NULL, &elf, &bias);
        if (sname && sname[0] == '_' && sname[1] == 'Z' && sym.st_value == entry)
            return demangle(st, sname);
    }
    return qualify(st, die, name);
}

/* The absolute path of a source file name from the line table of unit cu: names are often
 * relative to the compilation directory (DW_AT_comp_dir), e.g. "../src/main.c" from a
 * meson or cmake build; Sentry's abs_path and editors want the real path. "." and ".."
 * components are resolved lexically, as the compiler saw the tree. Cached per name. */
static const char *absolute(struct modsym *st, Dwarf_Die *cu, const char *file)
{
    if (!file || file[0] == '/')
        return file;
    const char *done = u64map_get(&st->paths, (uintptr_t)file);
    if (done)
        return done;
    Dwarf_Attribute attr;
    const char *dir = cu ? dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr)) : NULL;
    if (!dir || dir[0] != '/')
        return file;
    size_t cap = strlen(dir) + strlen(file) + 2;
    char *joined = xmalloc(cap), *out = arena_alloc(&st->arena, cap);
    snprintf(joined, cap, "%s/%s", dir, file);
    /* Normalize component by component into out. */
    size_t n = 0;
    for (char *save = NULL, *c = strtok_r(joined, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
            continue;
        }
        out[n++] = '/';
        size_t l = strlen(c);
        memcpy(out + n, c, l);
        n += l;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    free(joined);
    u64map_put(&st->paths, (uintptr_t)file, out);
    return out;
}

/* File and line an inlined instance was called from (DW_AT_call_file / DW_AT_call_line). */
static void call_site(Dwarf_Die *inl, const char **file, int *line)
{
    Dwarf_Attribute attr;
    Dwarf_Word v;
    *file = NULL;
    *line = 0;
    /* A line that does not fit an int is none: profd takes 0 to INT32_MAX. */
    if (dwarf_formudata(dwarf_attr(inl, DW_AT_call_line, &attr), &v) == 0 && v <= INT32_MAX)
        *line = (int)v;
    if (dwarf_formudata(dwarf_attr(inl, DW_AT_call_file, &attr), &v) == 0) {
        /* The index is into the line table of the unit holding the inlined instance. */
        Dwarf_Die cu;
        Dwarf_Files *files;
        size_t nfiles;
        if (dwarf_diecu(inl, &cu, NULL, NULL) && dwarf_getsrcfiles(&cu, &files, &nfiles) == 0 &&
            v < nfiles)
            *file = dwarf_filesrc(files, v, NULL, NULL);
    }
}

/* Order function ranges by start address. */
static int cmp_range(const void *a, const void *b)
{
    const struct fn_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Append the address ranges of the functions among parent's children to *v, descending into
 * namespaces, where C++ compilers put the definitions of namespaced functions. */
static void index_children(Dwarf_Die *parent, struct fn_range **v, size_t *n, size_t *cap,
                           int depth)
{
    Dwarf_Die child;
    if (depth > 32 || dwarf_child(parent, &child) != 0)
        return;
    do {
        int tag = dwarf_tag(&child);
        if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
            Dwarf_Addr base, lo, hi;
            ptrdiff_t off = 0;
            while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
                if (hi <= lo)
                    continue;
                if (*n == *cap) {
                    *cap = *cap ? *cap * 2 : 64;
                    *v = xrealloc(*v, *cap * sizeof(**v));
                }
                (*v)[(*n)++] = (struct fn_range){lo, hi, child};
            }
        } else if (tag == DW_TAG_namespace || tag == DW_TAG_module) {
            index_children(&child, v, n, cap, depth + 1);
        }
    } while (dwarf_siblingof(&child, &child) == 0);
}

/* The function index of a unit, built on its first lookup: its functions' ranges sorted by
 * address. dwarf_getscopes would instead test every top-level DIE of the unit (types and
 * declarations included) against the address on every lookup, which made a new address in a
 * big unit of libc cost ~75 us. */
static const struct cu_index *cu_index(struct modsym *st, Dwarf_Die *cu)
{
    struct cu_index *ix = u64map_get(&st->units, (uintptr_t)cu->addr);
    if (ix)
        return ix;
    struct fn_range *v = NULL;
    size_t n = 0, cap = 0;
    index_children(cu, &v, &n, &cap, 0);
    if (n) /* v is NULL for a unit without functions: qsort's pointer must not be */
        sort_array(v, n, sizeof(*v), cmp_range);
    ix = arena_alloc(&st->arena, sizeof(*ix) + n * sizeof(*v));
    ix->n = n;
    if (n)
        memcpy(ix->v, v, n * sizeof(*v));
    free(v);
    u64map_put(&st->units, (uintptr_t)cu->addr, ix);
    return ix;
}

/* The function of a unit whose code contains pc, by binary search of its index. */
static bool find_function(const struct cu_index *ix, uint64_t pc, Dwarf_Die *fn)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->v[mid].lo <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || pc >= ix->v[lo - 1].hi)
        return false;
    *fn = ix->v[lo - 1].die;
    return true;
}

/* Whether a DIE of this kind can hold code of an inlined instance below it. */
static bool may_hold_inline(int tag)
{
    return tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
           tag == DW_TAG_subprogram || tag == DW_TAG_try_block || tag == DW_TAG_catch_block ||
           tag == DW_TAG_entry_point;
}

/* The function fn and the inlined instances within it that contain pc, outermost first,
 * found by descending only into the children that contain pc. Returns the count. */
static int inline_chain(Dwarf_Die *fn, uint64_t pc, Dwarf_Die *chain, int max)
{
    int n = 0;
    chain[n++] = *fn;
    Dwarf_Die cur = *fn, child;
    while (dwarf_child(&cur, &child) == 0) {
        int tag = 0;
        bool found = false;
        do {
            tag = dwarf_tag(&child);
            if (may_hold_inline(tag) && dwarf_haspc(&child, pc) == 1) {
                found = true;
                break;
            }
        } while (dwarf_siblingof(&child, &child) == 0);
        if (!found)
            break;
        if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point)
            n = 0; /* a nested function (GNU C): the code is its own */
        if (tag != DW_TAG_lexical_block && tag != DW_TAG_try_block && tag != DW_TAG_catch_block &&
            n < max)
            chain[n++] = child;
        cur = child;
    }
    return n;
}

/* Frames for vaddr from DWARF: the inlined instances containing it, innermost first, then
 * the function. Returns the count (0 if no unit covers vaddr); the outermost frame's
 * function is NULL if no function DIE covers vaddr. */
static int resolve_dwarf(struct modsym *st, uint64_t vaddr, struct dsym_frame *f, int max)
{
    Dwarf_Addr bias;
    Dwarf_Die *cu = dwfl_module_addrdie(st->dmod, vaddr, &bias);
    if (!cu)
        return 0;
    const char *file = NULL;
    int line = 0;
    Dwfl_Line *l = dwfl_module_getsrc(st->dmod, vaddr);
    if (l)
        file = absolute(st, cu, dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL));
    /* libdw hands the line table's unsigned numbers over as int: a hostile table gives
     * negative ones, which profd refuses (the whole answer with it). Unknown instead. */
    if (line < 0)
        line = 0;
    Dwarf_Die fn, chain[MAX_FRAMES];
    if (!find_function(cu_index(st, cu), vaddr - bias, &fn)) {
        f[0] = (struct dsym_frame){.file = file, .line = line};
        return 1;
    }
    int nc = inline_chain(&fn, vaddr - bias, chain, max < MAX_FRAMES ? max : MAX_FRAMES);
    /* Innermost first: each inlined instance's call site is the line in the frame that
     * contains it, the next one out. */
    int n = 0;
    for (int i = nc - 1; i >= 0; i--) {
        f[n++] = (struct dsym_frame){die_name(st, &chain[i], i ? 0 : vaddr), file, line, i > 0};
        if (i > 0) {
            call_site(&chain[i], &file, &line);
            file = absolute(st, cu, file);
        }
    }
    return n;
}

/* Whether a symbol table found by libdwfl is a full .symtab (the file's, a debug file's or
 * MiniDebugInfo's) or only .dynsym: a file with a SHT_SYMTAB section has it used. */
static enum symp_source symtab_kind(struct modsym *st, Elf *elf)
{
    if (elf == st->symelf)
        return st->symelf_src;
    enum symp_source src = SYMP_SRC_DYNSYM;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB) {
            src = SYMP_SRC_SYMTAB;
            break;
        }
    }
    st->symelf = elf;
    st->symelf_src = src;
    return src;
}

/* Name of the symbol containing vaddr, from whichever symbol table libdwfl has. */
static const char *symtab_name(struct modsym *st, uint64_t vaddr, enum symp_source *src)
{
    GElf_Off off;
    GElf_Sym sym;
    Elf *elf = NULL;
    Dwarf_Addr bias;
    const char *name = dwfl_module_addrinfo(st->dmod, vaddr, &off, &sym, NULL, &elf, &bias);
    /* An absolute symbol is a value, not code: version names such as the vDSO's LINUX_2.6
     * or libc's GLIBC_2.2.5 are sizeless ABS symbols at 0 that libdwfl offers for address 0. */
    if (!name || !*name || !elf || sym.st_shndx == SHN_ABS) {
        *src = SYMP_SRC_NONE;
        return NULL;
    }
    *src = symtab_kind(st, elf);
    return demangle(st, name);
}

/* A stripped CPython whose compiler split _PyEval_EvalFrameDefault (GCC 16's Debian 3.14:
 * its .dynsym symbol is the 1.2 KiB entry and exit; the loop itself, 84 KiB of computed-goto
 * dispatch, is a part elsewhere that only .symtab names, ".cold" or ".part"): the frames the
 * loop makes would be unnamed, and Python's frames could not take their place. The parts
 * are the call frame entries (.eh_frame) that the symbol's code jumps into (jmp or jcc with a
 * 32-bit displacement) outside every symbol: named after it. The file is the target's, so
 * every read is bounded: the symbol's bytes within its section (under 16 KiB), the table and
 * entries within their sections, 4 parts. Scanned once per module, at its first unnamed
 * address. */
#define EVAL_LOOP "_PyEval_EvalFrameDefault"

static bool named_at(struct modsym *st, uint64_t vaddr)
{
    GElf_Off off;
    GElf_Sym sym;
    return dwfl_module_addrinfo(st->dmod, vaddr, &off, &sym, NULL, NULL, NULL) != NULL;
}

/* A section's bytes by name (NULL if absent), and its address. */
static const uint8_t *section_bytes(Elf *elf, const char *name, uint64_t *addr, size_t *len)
{
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) < 0)
        return NULL;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        const char *n;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS ||
            !(n = elf_strptr(elf, shstrndx, sh.sh_name)) || strcmp(n, name))
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data || !data->d_buf || data->d_size > sh.sh_size)
            return NULL;
        *addr = sh.sh_addr;
        *len = data->d_size;
        return data->d_buf;
    }
    return NULL;
}

static int32_t s32_at(const uint8_t *b)
{
    int32_t v;
    memcpy(&v, b, sizeof(v));
    return v;
}

/* The function (call frame entry) holding vaddr, from .eh_frame_hdr's sorted table, in the
 * encoding every x86-64 linker writes (data-relative signed 4-byte entries; the entry's own
 * pc-relative 4-byte start and length); false for any other. */
struct eh_sections {
    const uint8_t *h, *f; /* .eh_frame_hdr's and .eh_frame's bytes (NULL: none) */
    uint64_t ha, fa;      /* their addresses */
    size_t hl, fl;        /* their lengths */
};

static bool fde_range(const struct eh_sections *eh, uint64_t vaddr, uint64_t *lo, uint64_t *hi)
{
    const uint8_t *h = eh->h, *f = eh->f;
    uint64_t ha = eh->ha, fa = eh->fa;
    size_t hl = eh->hl, fl = eh->fl;
    /* version 1; eh_frame_ptr pcrel sdata4; fde_count udata4; table datarel sdata4 */
    if (!h || !f || hl < 12 || h[0] != 1 || h[1] != 0x1b || h[2] != 0x03 || h[3] != 0x3b)
        return false;
    uint32_t count;
    memcpy(&count, h + 8, sizeof(count));
    if (count == 0 || count > (hl - 12) / 8)
        return false;
    const uint8_t *t = h + 12;
    size_t l = 0, r = count; /* the last entry starting at or below vaddr */
    while (r - l > 1) {
        size_t m = l + (r - l) / 2;
        if (ha + (int64_t)s32_at(t + 8 * m) <= vaddr)
            l = m;
        else
            r = m;
    }
    uint64_t start = ha + (int64_t)s32_at(t + 8 * l);
    uint64_t fde = ha + (int64_t)s32_at(t + 8 * l + 4);
    if (start > vaddr || fde < fa || fde - fa > fl || fl - (fde - fa) < 16)
        return false;
    const uint8_t *e = f + (fde - fa);
    uint32_t len;
    memcpy(&len, e, sizeof(len));
    /* (Its start, pc-relative at e + 8, must be the table's: else another encoding.) */
    if (len < 12 || len == 0xffffffffu || fde + 8 + (int64_t)s32_at(e + 8) != start)
        return false;
    uint32_t range;
    memcpy(&range, e + 12, sizeof(range));
    if (vaddr >= start + range)
        return false;
    *lo = start;
    *hi = start + range;
    return true;
}

static void add_split_part(struct modsym *st, const struct eh_sections *eh, uint64_t lo,
                           uint64_t hi, uint64_t target)
{
    if (target >= lo && target < hi)
        return;
    for (size_t i = 0; i < st->nsplit; i++)
        if (target >= st->split[i].lo && target < st->split[i].hi)
            return;
    uint64_t start, end;
    /* (A part starts with no symbol either: else the jump went into another function.) */
    if (st->nsplit == sizeof(st->split) / sizeof(st->split[0]) || named_at(st, target) ||
        !fde_range(eh, target, &start, &end) || named_at(st, start))
        return;
    st->split[st->nsplit].lo = start;
    st->split[st->nsplit].hi = end;
    st->nsplit++;
}

static void split_parts(struct modsym *st)
{
    st->split_done = true;
    int nsym = dwfl_module_getsymtab(st->dmod);
    uint64_t lo = 0, size = 0;
    for (int i = 1; i < nsym; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(st->dmod, i, &sym, &addr, NULL, NULL, NULL);
        if (name && GELF_ST_TYPE(sym.st_info) == STT_FUNC && !strcmp(name, EVAL_LOOP)) {
            lo = addr;
            size = sym.st_size;
            break;
        }
    }
    /* The whole loop is tens of KiB: a small symbol is what a split left. */
    Dwarf_Addr bias;
    Elf *elf = dwfl_module_getelf(st->dmod, &bias);
    if (!lo || !size || size >= 16384 || !elf || bias)
        return;
    /* (Looked up once: every jump's target is searched in them.) */
    struct eh_sections eh = {0};
    eh.h = section_bytes(elf, ".eh_frame_hdr", &eh.ha, &eh.hl);
    eh.f = section_bytes(elf, ".eh_frame", &eh.fa, &eh.fl);
    if (!eh.h || !eh.f)
        return;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS ||
            !(sh.sh_flags & SHF_EXECINSTR) || lo < sh.sh_addr ||
            lo + size > sh.sh_addr + sh.sh_size)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        uint64_t at = lo - sh.sh_addr;
        if (!data || !data->d_buf || at + size > data->d_size)
            return;
        const uint8_t *b = (const uint8_t *)data->d_buf + at;
        for (uint64_t i = 0; i + 5 <= size; i++) {
            unsigned len = b[i] == 0xe9 ? 5 : b[i] == 0x0f && i + 6 <= size &&
                                                  (b[i + 1] & 0xf0) == 0x80 ? 6 : 0;
            if (len)
                add_split_part(st, &eh, lo, lo + size,
                               lo + i + len + (int64_t)s32_at(b + i + len - 4));
        }
        return;
    }
}

/* The name of vaddr where no symbol covers it: a part of the evaluation loop, or none. */
static const char *split_part_name(struct modsym *st, uint64_t vaddr)
{
    if (!st->split_done)
        split_parts(st);
    for (size_t i = 0; i < st->nsplit; i++)
        if (vaddr >= st->split[i].lo && vaddr < st->split[i].hi)
            return EVAL_LOOP;
    return NULL;
}

/* Work out the answer for file offset off of the module (a cache miss). */
static const struct sym_entry *resolve(struct modsym *st, uint64_t off)
{
    struct dsym_frame f[MAX_FRAMES];
    int n = 0;
    enum symp_source src = SYMP_SRC_NONE;
    uint64_t vaddr;
    if (st->dmod && offset_to_vaddr(st, off, &vaddr) && gosym_covers(st->go, vaddr) &&
        (n = gosym_resolve(st->go, vaddr, f, MAX_FRAMES, &st->arena)) > 0) {
        /* Go code: its runtime's table has what debug info would (function, file, line,
         * inlining), stripped binaries too, and costs no DWARF parse. */
        src = SYMP_SRC_DWARF;
    } else if (st->dmod && offset_to_vaddr(st, off, &vaddr)) {
        if (st->dwarf)
            n = resolve_dwarf(st, vaddr, f, MAX_FRAMES);
        if (n > 0 && f[n - 1].function) {
            src = SYMP_SRC_DWARF;
        } else {
            /* No debug info here (stripped file, assembly, CRT code): name the frame from
             * the symbol table, keeping any line the line table gave. */
            if (n == 0)
                f[n++] = (struct dsym_frame){0};
            f[n - 1].function = symtab_name(st, vaddr, &src);
            if (!f[n - 1].function && (f[n - 1].function = split_part_name(st, vaddr)))
                src = SYMP_SRC_DYNSYM;
        }
    } else {
        f[n++] = (struct dsym_frame){0};
    }
    struct sym_entry *e = arena_alloc(&st->arena, sizeof(*e) + (size_t)n * sizeof(f[0]));
    e->n = n;
    e->src = src;
    memcpy(e->f, f, (size_t)n * sizeof(f[0]));
    return e;
}


int dsym_lookup(struct dsym *d, uint64_t id, uint64_t off, const struct dsym_frame **frames,
                enum symp_source *src)
{
    struct modsym *st = u64map_get(&d->mods, id);
    if (!st)
        return -ENOENT;
    const struct sym_entry *e = u64map_get(&st->cache, off);
    if (!e) {
        e = resolve(st, off);
        u64map_put(&st->cache, off, (void *)e);
    }
    *frames = e->f;
    if (src)
        *src = e->src;
    return e->n;
}
