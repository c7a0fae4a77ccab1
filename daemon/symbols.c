/* symbols.c: address -> function, file and line, with inlined frames, on elfutils libdwfl. */
#include "symbols.h"

#include "log.h"
#include "modules.h"
#include "util.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* libstdc++'s demangler (the project links libstdc++); declared here so that this C file
 * needs no C++ header. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define DEFAULT_DEBUG_PATH ":.debug:/usr/lib/debug"
/* Frames kept per address; a deeper inline chain loses its innermost frames. */
#define MAX_FRAMES 64
/* A perf map is checked for changes at most this often while its lookups succeed... */
#define JIT_RECHECK_NS (1 * NS_PER_SEC)
/* ...and this often while they miss (new code is usually just being appended). */
#define JIT_MISS_RECHECK_NS (10 * NS_PER_MS)

/* Bump allocator: cached results are never freed one by one, only with their module. */
struct chunk {
    struct chunk *next;
    size_t used, size;
    max_align_t data[];
};

struct arena {
    struct chunk *head;
    size_t next_size;
};

/* Open-addressing hash map from a 64-bit key to a non-NULL pointer (linear probing). */
struct u64map {
    uint64_t *keys;
    void **vals; /* NULL marks a free slot */
    size_t cap, n;
};

/* Set of interned strings. */
struct strset {
    const char **v;
    size_t cap, n;
    struct arena arena;
};

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
    enum sym_source src;
    struct sym_frame f[];
};

/* What the symbolizer keeps per module (module->sym): a Dwfl holding that one file at its
 * own virtual addresses, and the answers found so far. Strings in the answers point into
 * libdw's and libelf's data for the file or into the arena, so they live as long as this. */
struct modsym {
    struct symbolizer *owner;
    struct module *mod; /* reference */
    Dwfl *dwfl;
    Dwfl_Module *dmod;   /* NULL if libdwfl could not take the file */
    bool dwarf;          /* debug info found (in the file or a separate debug file) */
    struct u64map cache; /* file offset -> struct sym_entry */
    struct u64map names; /* address of a mangled name or of a DIE -> name to show */
    struct u64map units; /* address of a unit's DIE -> struct cu_index */
    struct u64map paths; /* address of a source file name -> its absolute path */
    struct arena arena;
    Elf *symelf; /* last symbol table file classified, and what it is */
    enum sym_source symelf_src;
};

/* One perf map line. */
struct jit_sym {
    uint64_t start, end, seq;
    const char *name; /* interned */
};

/* A process's perf map as last read. */
struct jitmap {
    int pid;
    char *path; /* /proc/PID/root/tmp/perf-NSPID.map */
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    off_t parsed; /* bytes of complete lines read so far */
    uint64_t checked_ns, seq;
    struct jit_sym *v; /* sorted by start, non-overlapping */
    size_t n, cap;
};

struct symbolizer {
    char *debug_path;
    Dwfl_Callbacks cb;    /* dwfl_begin keeps a pointer to it */
    struct u64map states; /* module address -> struct modsym */
    struct u64map jits;   /* pid -> struct jitmap */
    struct strset jit_names;
    uint64_t lookups, hits;
};

/* Allocate n bytes, aligned for any type, that live until arena_free. */
static void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    struct chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        /* Chunks grow so that a module looked up a few times costs little memory. */
        size_t size = a->next_size ? a->next_size : 1024;
        if (size < 64 * 1024)
            a->next_size = size * 2;
        if (size < n)
            size = n;
        c = xmalloc(sizeof(*c) + size);
        c->used = 0;
        c->size = size;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

/* Copy [s, s + len) and a terminating NUL into the arena. */
static char *arena_strndup(struct arena *a, const char *s, size_t len)
{
    char *p = arena_alloc(a, len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Free every chunk. */
static void arena_free(struct arena *a)
{
    for (struct chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->next_size = 0;
}

/* Slot where key's probe sequence starts (Fibonacci hashing). */
static size_t u64map_slot(uint64_t key, size_t cap)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

/* Value for key, or NULL. */
static void *u64map_get(const struct u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = u64map_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->vals[i])
            return NULL;
        if (m->keys[i] == key)
            return m->vals[i];
    }
}

/* Insert or replace; val must not be NULL. Keeps the load under 3/4. */
static void u64map_put(struct u64map *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 4 > m->cap * 3) {
        struct u64map g = {.cap = m->cap ? m->cap * 2 : 16};
        g.keys = xmalloc(g.cap * sizeof(*g.keys));
        g.vals = xcalloc(g.cap, sizeof(*g.vals));
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i])
                u64map_put(&g, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        *m = g;
    }
    size_t i = u64map_slot(key, m->cap);
    while (m->vals[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->vals[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

/* Free the table (not the values). */
static void u64map_finish(struct u64map *m)
{
    free(m->keys);
    free(m->vals);
    *m = (struct u64map){0};
}

/* FNV-1a of [s, s + len). */
static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* The interned copy of [s, s + len), made on first sight. */
static const char *strset_intern(struct strset *set, const char *s, size_t len)
{
    if ((set->n + 1) * 4 > set->cap * 3) {
        size_t cap = set->cap ? set->cap * 2 : 256;
        const char **v = xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->v[i])
                continue;
            size_t j = (size_t)hash_bytes(set->v[i], strlen(set->v[i])) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = set->v[i];
        }
        free(set->v);
        set->v = v;
        set->cap = cap;
    }
    size_t i = (size_t)hash_bytes(s, len) & (set->cap - 1);
    for (; set->v[i]; i = (i + 1) & (set->cap - 1))
        if (!strncmp(set->v[i], s, len) && set->v[i][len] == '\0')
            return set->v[i];
    set->v[i] = arena_strndup(&set->arena, s, len);
    set->n++;
    return set->v[i];
}

/* Free the set and its strings. */
static void strset_finish(struct strset *set)
{
    free(set->v);
    arena_free(&set->arena);
    *set = (struct strset){0};
}

/* Create a symbolizer with the default debug path. */
struct symbolizer *symbolizer_create(void)
{
    struct symbolizer *s = xcalloc(1, sizeof(*s));
    s->debug_path = xstrdup(DEFAULT_DEBUG_PATH);
    s->cb.find_elf = dwfl_build_id_find_elf;
    s->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    s->cb.section_address = dwfl_offline_section_address;
    s->cb.debuginfo_path = &s->debug_path;
    return s;
}

/* Set where separate debug files are searched (NULL: the default). */
void symbolizer_set_debug_path(struct symbolizer *s, const char *path)
{
    free(s->debug_path);
    s->debug_path = xstrdup(path ? path : DEFAULT_DEBUG_PATH);
}

/* Open module m in its own Dwfl and look for its debug info, once. */
static struct modsym *state_create(struct symbolizer *s, struct module *m)
{
    struct modsym *st = xcalloc(1, sizeof(*st));
    st->owner = s;
    st->mod = module_ref(m);
    st->dwfl = dwfl_begin(&s->cb);
    if (!st->dwfl) {
        log_warn("dwfl_begin: %s", dwfl_errmsg(-1));
        return st;
    }
    /* Dwfl closes the descriptors it is given: give it its own. It reads with pread and
     * mmap, so sharing the file offset with m->fd does not matter. */
    int fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("%s: dup: %s", m->path, strerror(errno));
    } else {
        /* Base 0 with add_p_vaddr: the module sits at the ELF's own p_vaddr (bias 0) for
         * ET_DYN as for ET_EXEC, so module_offset_to_vaddr() gives Dwfl addresses. */
        st->dmod = dwfl_report_elf(st->dwfl, m->name, m->path, fd, 0, true);
        if (!st->dmod) {
            log_debug("%s: dwfl_report_elf: %s", m->path, dwfl_errmsg(-1));
            close(fd);
        }
    }
    dwfl_report_end(st->dwfl, NULL, NULL);
    if (st->dmod) {
        /* This is where the separate debug file is searched (build-id, then debuglink). */
        Dwarf_Addr bias = 0;
        st->dwarf = dwfl_module_getdwarf(st->dmod, &bias) != NULL;
        log_debug("%s: %s", m->path, st->dwarf ? "debug info" : "no debug info");
    }
    return st;
}

/* Release a module's state; its cached frames become invalid. */
static void state_free(struct modsym *st)
{
    void *expected = st;
    __atomic_compare_exchange_n(&st->mod->sym, &expected, NULL, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
    if (st->dwfl)
        dwfl_end(st->dwfl);
    u64map_finish(&st->cache);
    u64map_finish(&st->names);
    u64map_finish(&st->paths);
    u64map_finish(&st->units);
    arena_free(&st->arena);
    module_unref(st->mod);
    free(st);
}

/* The symbolizer's state for m, created on first use. m->sym is the fast path; the map
 * holds what this symbolizer owns and covers a module whose sym another symbolizer took
 * (tests using two symbolizers on one thread). */
static struct modsym *state_get(struct symbolizer *s, struct module *m)
{
    struct modsym *st = __atomic_load_n(&m->sym, __ATOMIC_ACQUIRE);
    if (st && st->owner == s)
        return st;
    st = u64map_get(&s->states, (uintptr_t)m);
    if (st)
        return st;
    st = state_create(s, m);
    u64map_put(&s->states, (uintptr_t)m, st);
    void *expected = NULL;
    __atomic_compare_exchange_n(&m->sym, &expected, st, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    return st;
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
    if (dwarf_formudata(dwarf_attr(inl, DW_AT_call_line, &attr), &v) == 0)
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
    qsort(v, n, sizeof(*v), cmp_range);
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
static int resolve_dwarf(struct modsym *st, uint64_t vaddr, struct sym_frame *f, int max)
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
    Dwarf_Die fn, chain[MAX_FRAMES];
    if (!find_function(cu_index(st, cu), vaddr - bias, &fn)) {
        f[0] = (struct sym_frame){.file = file, .line = line};
        return 1;
    }
    int nc = inline_chain(&fn, vaddr - bias, chain, max < MAX_FRAMES ? max : MAX_FRAMES);
    /* Innermost first: each inlined instance's call site is the line in the frame that
     * contains it, the next one out. */
    int n = 0;
    for (int i = nc - 1; i >= 0; i--) {
        f[n++] = (struct sym_frame){die_name(st, &chain[i], i ? 0 : vaddr), file, line, i > 0};
        if (i > 0) {
            call_site(&chain[i], &file, &line);
            file = absolute(st, cu, file);
        }
    }
    return n;
}

/* Whether a symbol table found by libdwfl is a full .symtab (the file's, a debug file's or
 * MiniDebugInfo's) or only .dynsym: a file with a SHT_SYMTAB section has it used. */
static enum sym_source symtab_kind(struct modsym *st, Elf *elf)
{
    if (elf == st->symelf)
        return st->symelf_src;
    enum sym_source src = SYM_DYNSYM;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB) {
            src = SYM_SYMTAB;
            break;
        }
    }
    st->symelf = elf;
    st->symelf_src = src;
    return src;
}

/* Name of the symbol containing vaddr, from whichever symbol table libdwfl has. */
static const char *symtab_name(struct modsym *st, uint64_t vaddr, enum sym_source *src)
{
    GElf_Off off;
    GElf_Sym sym;
    Elf *elf = NULL;
    Dwarf_Addr bias;
    const char *name = dwfl_module_addrinfo(st->dmod, vaddr, &off, &sym, NULL, &elf, &bias);
    /* An absolute symbol is a value, not code: version names such as the vDSO's LINUX_2.6
     * or libc's GLIBC_2.2.5 are sizeless ABS symbols at 0 that libdwfl offers for address 0. */
    if (!name || !*name || !elf || sym.st_shndx == SHN_ABS) {
        *src = SYM_NONE;
        return NULL;
    }
    *src = symtab_kind(st, elf);
    return demangle(st, name);
}

/* Work out the answer for file offset off of the module (a cache miss). */
static const struct sym_entry *resolve(struct modsym *st, uint64_t off)
{
    struct sym_frame f[MAX_FRAMES];
    int n = 0;
    enum sym_source src = SYM_NONE;
    uint64_t vaddr;
    if (st->dmod && module_offset_to_vaddr(st->mod, off, &vaddr)) {
        if (st->dwarf)
            n = resolve_dwarf(st, vaddr, f, MAX_FRAMES);
        if (n > 0 && f[n - 1].function) {
            src = SYM_DWARF;
        } else {
            /* No debug info here (stripped file, assembly, CRT code): name the frame from
             * the symbol table, keeping any line the line table gave. */
            if (n == 0)
                f[n++] = (struct sym_frame){0};
            f[n - 1].function = symtab_name(st, vaddr, &src);
        }
    } else {
        f[n++] = (struct sym_frame){0};
    }
    struct sym_entry *e = arena_alloc(&st->arena, sizeof(*e) + (size_t)n * sizeof(f[0]));
    e->n = n;
    e->src = src;
    memcpy(e->f, f, (size_t)n * sizeof(f[0]));
    return e;
}

/* Resolve file offset file_off of module m; see symbols.h. Returns the number of frames
 * (>= 1), or -EINVAL. */
int symbolizer_lookup(struct symbolizer *s, struct module *m, uint64_t file_off,
                      const struct sym_frame **frames, enum sym_source *src)
{
    if (!s || !m || !frames)
        return -EINVAL;
    s->lookups++;
    struct modsym *st = state_get(s, m);
    const struct sym_entry *e = u64map_get(&st->cache, file_off);
    if (e) {
        s->hits++;
    } else {
        e = resolve(st, file_off);
        u64map_put(&st->cache, file_off, (void *)e);
    }
    *frames = e->f;
    if (src)
        *src = e->src;
    return e->n;
}

/* The pid a process has in its own pid namespace: the last field of NSpid in its status
 * (perf map files are named by it). pid itself if the kernel does not say. */
static int ns_pid(int pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if (read_file(path, buf, sizeof(buf)) < 0)
        return pid;
    const char *p = strstr(buf, "\nNSpid:");
    if (!p)
        return pid;
    p += strlen("\nNSpid:");
    int last = pid;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            break;
        last = (int)strtol(p, (char **)&p, 10);
    }
    return last;
}

/* Forget what was read of a perf map. */
static void jit_clear(struct jitmap *jm)
{
    jm->n = 0;
    jm->parsed = 0;
    jm->exists = false;
}

/* Order perf map entries by start, then by line (later lines win). */
static int cmp_jit(const void *a, const void *b)
{
    const struct jit_sym *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sort and make entries disjoint. A JIT reuses freed code memory and appends the new name,
 * so where entries overlap the later line wins: an earlier entry is cut short at the later
 * one's start, or dropped if it starts inside it. (An older entry overlapping the tail of a
 * newer one loses its tail too; perf maps do not have such partial overlaps in practice.) */
static void jit_sort(struct jitmap *jm)
{
    qsort(jm->v, jm->n, sizeof(jm->v[0]), cmp_jit);
    size_t k = 0;
    for (size_t i = 0; i < jm->n; i++) {
        struct jit_sym e = jm->v[i];
        bool keep = true;
        while (k > 0 && jm->v[k - 1].end > e.start) {
            struct jit_sym *p = &jm->v[k - 1];
            if (e.seq < p->seq) {
                keep = false; /* starts inside a newer entry */
                break;
            }
            if (p->start < e.start) {
                p->end = e.start;
                break;
            }
            k--; /* same start, older: replaced */
        }
        if (keep)
            jm->v[k++] = e;
    }
    jm->n = k;
}

/* Parse "START SIZE name" lines (hex, 0x optional) from buf; returns the bytes of complete
 * lines consumed. A last line without newline is being written: leave it for next time. */
static size_t jit_parse(struct symbolizer *s, struct jitmap *jm, const char *buf, size_t len)
{
    size_t used = 0;
    while (used < len) {
        const char *p = buf + used, *nl = memchr(p, '\n', len - used);
        if (!nl)
            break;
        used = (size_t)(nl - buf) + 1;
        char *end;
        uint64_t start = strtoull(p, &end, 16);
        if (end == p || *end != ' ')
            continue;
        p = end + 1;
        uint64_t size = strtoull(p, &end, 16);
        if (end == p || *end != ' ' || size == 0 || start + size < start)
            continue;
        p = end + 1;
        const char *ne = nl;
        if (ne > p && ne[-1] == '\r')
            ne--;
        if (jm->n == jm->cap) {
            jm->cap = jm->cap ? jm->cap * 2 : 64;
            jm->v = xrealloc(jm->v, jm->cap * sizeof(jm->v[0]));
        }
        jm->v[jm->n++] = (struct jit_sym){
            .start = start,
            .end = start + size,
            .seq = jm->seq++,
            .name = strset_intern(&s->jit_names, p, (size_t)(ne - p)),
        };
    }
    return used;
}

/* Bring a perf map up to date: nothing if its size and mtime did not change, only the new
 * lines if it grew (perf maps are append-only), else read it again. */
static void jit_refresh(struct symbolizer *s, struct jitmap *jm)
{
    struct stat st;
    if (stat(jm->path, &st) < 0 || !S_ISREG(st.st_mode)) {
        jit_clear(jm);
        return;
    }
    bool same_file = jm->exists && st.st_dev == jm->dev && st.st_ino == jm->ino;
    bool same_mtime =
        st.st_mtim.tv_sec == jm->mtime.tv_sec && st.st_mtim.tv_nsec == jm->mtime.tv_nsec;
    if (same_file && st.st_size == jm->size && same_mtime)
        return;
    if (!same_file || st.st_size <= jm->size || st.st_size < jm->parsed)
        jit_clear(jm); /* a new file, or rewritten rather than appended to */
    int fd = open(jm->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        jit_clear(jm);
        return;
    }
    size_t cap = (size_t)(st.st_size - jm->parsed) + 4096, len = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (len == cap)
            buf = xrealloc(buf, cap *= 2);
        ssize_t r = pread(fd, buf + len, cap - len, jm->parsed + (off_t)len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    size_t before = jm->n;
    jm->parsed += (off_t)jit_parse(s, jm, buf, len);
    free(buf);
    if (jm->n != before)
        jit_sort(jm);
    jm->exists = true;
    jm->dev = st.st_dev;
    jm->ino = st.st_ino;
    jm->size = st.st_size;
    jm->mtime = st.st_mtim;
}

/* The entry containing addr, by binary search, or NULL. */
static const struct jit_sym *jit_find(const struct jitmap *jm, uint64_t addr)
{
    size_t lo = 0, hi = jm->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (jm->v[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && addr < jm->v[lo - 1].end ? &jm->v[lo - 1] : NULL;
}

/* Name of the JIT code at addr in process pid from its perf map; see symbols.h. */
const char *symbolizer_jit_lookup(struct symbolizer *s, int pid, uint64_t addr)
{
    struct jitmap *jm = u64map_get(&s->jits, (uint64_t)(uint32_t)pid);
    if (!jm) {
        jm = xcalloc(1, sizeof(*jm));
        jm->pid = pid;
        jm->path = xasprintf("/proc/%d/root/tmp/perf-%d.map", pid, ns_pid(pid));
        u64map_put(&s->jits, (uint64_t)(uint32_t)pid, jm);
    }
    const struct jit_sym *e = jm->checked_ns ? jit_find(jm, addr) : NULL;
    uint64_t now = now_ns();
    uint64_t age = now - jm->checked_ns;
    if (!jm->checked_ns || age >= JIT_RECHECK_NS || (!e && age >= JIT_MISS_RECHECK_NS)) {
        jit_refresh(s, jm);
        jm->checked_ns = now;
        e = jit_find(jm, addr);
    }
    return e ? e->name : NULL;
}

/* Free one process's perf map. */
static void jit_free(struct jitmap *jm)
{
    free(jm->v);
    free(jm->path);
    free(jm);
}

/* Drop state of modules only the symbolizer still holds and perf maps of exited
 * processes; see symbols.h. */
void symbolizer_trim(struct symbolizer *s)
{
    struct u64map keep = {0};
    for (size_t i = 0; i < s->states.cap; i++) {
        struct modsym *st = s->states.vals[i];
        if (!st)
            continue;
        /* Only our reference left: no target maps the file any more. A concurrent
         * module_get may take a new one right after; it then just finds sym NULL. */
        if (__atomic_load_n(&st->mod->refs, __ATOMIC_ACQUIRE) == 1)
            state_free(st);
        else
            u64map_put(&keep, s->states.keys[i], st);
    }
    u64map_finish(&s->states);
    s->states = keep;

    struct u64map jkeep = {0};
    for (size_t i = 0; i < s->jits.cap; i++) {
        struct jitmap *jm = s->jits.vals[i];
        if (!jm)
            continue;
        if (kill(jm->pid, 0) < 0 && errno == ESRCH)
            jit_free(jm);
        else
            u64map_put(&jkeep, s->jits.keys[i], jm);
    }
    u64map_finish(&s->jits);
    s->jits = jkeep;
}

/* Free everything, and drop the module references the symbolizer holds. */
void symbolizer_destroy(struct symbolizer *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->states.cap; i++)
        if (s->states.vals[i])
            state_free(s->states.vals[i]);
    u64map_finish(&s->states);
    for (size_t i = 0; i < s->jits.cap; i++)
        if (s->jits.vals[i])
            jit_free(s->jits.vals[i]);
    u64map_finish(&s->jits);
    strset_finish(&s->jit_names);
    free(s->debug_path);
    free(s);
}

/* Lookups, cache hits and modules with state. */
void symbolizer_get_stats(const struct symbolizer *s, struct symbolizer_stats *st)
{
    st->lookups = s->lookups;
    st->hits = s->hits;
    st->modules = s->states.n;
}
