/* gosym.c: names of Go code from the Go runtime's own table (.gopclntab), see gosym.h. */
#include "gosym.h"

#include "gopclntab.h"
#include "util.h"

#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SECTIONS 128

struct section {
    uint64_t addr, size;
    const uint8_t *data;
};

struct gosym {
    struct gopcln tab;
    struct section sec[MAX_SECTIONS]; /* the file's loaded sections with contents */
    size_t nsec;
    Elf_Data *rela;                   /* .rela.dyn: a position independent file's pointers */
};

/* The addend of the R_X86_64_RELATIVE relocation of the word at addr (what the word holds
 * once loaded, less the load bias), or 0. */
static uint64_t relocated(const struct gosym *g, uint64_t addr)
{
    if (!g->rela)
        return 0;
    size_t n = g->rela->d_size / sizeof(Elf64_Rela);
    for (size_t i = 0; i < n; i++) {
        GElf_Rela r;
        if (gelf_getrela(g->rela, (int)i, &r) && r.r_offset == addr &&
            GELF_R_TYPE(r.r_info) == R_X86_64_RELATIVE)
            return (uint64_t)r.r_addend;
    }
    return 0;
}

/* A word of the loaded file at addr, relocated. */
static uint64_t word_at(const struct gosym *g, uint64_t addr);

/* Read the file's loaded bytes at address addr (inside one section). */
static bool sec_read(void *ctx, uint64_t addr, void *dst, size_t n)
{
    const struct gosym *g = ctx;
    for (size_t i = 0; i < g->nsec; i++) {
        const struct section *s = &g->sec[i];
        if (addr >= s->addr && n <= s->size && addr - s->addr <= s->size - n) {
            memcpy(dst, s->data + (addr - s->addr), n);
            return true;
        }
    }
    return false;
}

static uint64_t word_at(const struct gosym *g, uint64_t addr)
{
    uint64_t w = 0;
    if (!sec_read((void *)g, addr, &w, 8))
        return 0;
    return w ? w : relocated(g, addr);
}

/* The address of the symbol named name in elf's .symtab, 0 if none. */
static uint64_t symbol(Elf *elf, const char *const *names, size_t nnames)
{
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t n = d ? d->d_size / sh.sh_entsize : 0;
        for (size_t i = 0; i < n; i++) {
            GElf_Sym sym;
            const char *nm;
            if (!gelf_getsym(d, (int)i, &sym) ||
                !(nm = elf_strptr(elf, sh.sh_link, sym.st_name)))
                continue;
            for (size_t k = 0; k < nnames; k++)
                if (!strcmp(nm, names[k]))
                    return sym.st_value;
        }
    }
    return 0;
}

/* Where funcdata offsets count from (1.18+): the go:func.* symbol, or, in a stripped file,
 * moduledata's gofunc field: moduledata is found in .noptrdata as the words holding the
 * table's address followed by its function name table's (an unrelocated position
 * independent file holds zeroes there: no inline trees then). */
static uint64_t find_gofunc(struct gosym *g, Elf *elf, const struct section *noptrdata)
{
    static const char *const names[] = {"go:func.*", "go.func.*"};
    uint64_t a = symbol(elf, names, 2);
    if (a || !noptrdata)
        return a;
    unsigned word = gopcln_gofunc_word(&g->tab);
    for (uint64_t off = 0; off + 8 * (word + 1ull) <= noptrdata->size; off += 8) {
        uint64_t at = noptrdata->addr + off;
        if (word_at(g, at) != g->tab.base ||
            word_at(g, at + 8) != g->tab.base + g->tab.funcname)
            continue;
        uint64_t gofunc = word_at(g, at + 8ull * word);
        uint8_t probe;
        if (sec_read(g, gofunc, &probe, 1))
            return gofunc;
    }
    return 0;
}

/* Is there a sound table at [a, end) describing code in [text, etext)? Its header's text
 * address (1.18+) as loaded: what the file holds, or the relocation that sets it in a
 * position independent file. */
static bool table_at(struct gosym *g, uint64_t a, uint64_t end, uint64_t text, uint64_t etext)
{
    if (gopcln_init(&g->tab, sec_read, g, a, end - a, 0) < 0)
        return false;
    if (g->tab.version != GOPCLN_116 && !g->tab.text) {
        uint64_t t = relocated(g, a + 24);
        if (gopcln_init(&g->tab, sec_read, g, a, end - a, t ? t : text) < 0)
            return false;
    }
    return g->tab.min_pc >= text && g->tab.max_pc <= etext;
}

struct gosym *gosym_open(Elf *elf)
{
    size_t shstr;
    if (!elf || elf_getshdrstrndx(elf, &shstr) < 0)
        return NULL;
    struct gosym *g = xcalloc(1, sizeof(*g));
    const struct section *tab = NULL, *noptrdata = NULL, *relro = NULL;
    uint64_t text = 0, etext = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) && g->nsec < MAX_SECTIONS;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) || sh.sh_type == SHT_NOBITS)
            continue;
        const char *name = elf_strptr(elf, shstr, sh.sh_name);
        Elf_Data *d = elf_getdata(scn, NULL);
        if (name && d && sh.sh_type == SHT_RELA && !strcmp(name, ".rela.dyn"))
            g->rela = d;
        if (!name || !d || !d->d_buf || d->d_size < sh.sh_size)
            continue;
        struct section *s = &g->sec[g->nsec++];
        *s = (struct section){sh.sh_addr, sh.sh_size, d->d_buf};
        if (!strcmp(name, ".gopclntab") || !strcmp(name, ".data.rel.ro.gopclntab"))
            tab = s;
        else if (!strcmp(name, ".noptrdata"))
            noptrdata = s;
        else if (!strcmp(name, ".data.rel.ro"))
            relro = s;
        else if (!strcmp(name, ".text"))
            text = sh.sh_addr, etext = sh.sh_addr + sh.sh_size;
    }
    /* A position independent program linked by the system's linker (cgo) has the table
     * merged into .data.rel.ro: found there by its header. */
    bool ok = tab && table_at(g, tab->addr, tab->addr + tab->size, text, etext);
    for (uint64_t a = relro ? relro->addr : 0; !ok && !tab && relro && a + 64 <= relro->addr +
         relro->size; a += 8) {
        uint64_t w;
        memcpy(&w, relro->data + (a - relro->addr), 8);
        if (w == gopcln_header_word(GOPCLN_MAGIC_120) ||
            w == gopcln_header_word(GOPCLN_MAGIC_118) || w == gopcln_header_word(GOPCLN_MAGIC_116))
            ok = table_at(g, a, relro->addr + relro->size, text, etext);
    }
    if (!ok) {
        free(g);
        return NULL;
    }
    if (g->tab.version != GOPCLN_116)
        g->tab.gofunc = find_gofunc(g, elf, noptrdata);
    return g;
}

void gosym_close(struct gosym *g)
{
    free(g);
}

bool gosym_covers(const struct gosym *g, uint64_t vaddr)
{
    return g && gopcln_covers(&g->tab, vaddr);
}

int gosym_resolve(struct gosym *g, uint64_t vaddr, struct dsym_frame *f, int max,
                  struct arena *a)
{
    struct gopcln_func fn;
    if (!g || max < 1 || !gopcln_find(&g->tab, vaddr, &fn))
        return 0;
    char name[512], file[1024];
    uint64_t pc = vaddr;
    int n = 0;
    for (;;) {
        int32_t line = 0, nameoff;
        uint64_t parent;
        int inl = n + 1 < max ? gopcln_inlined(&g->tab, &fn, pc, &nameoff, &parent) : 0;
        if (inl != 1)
            nameoff = fn.nameoff;
        file[0] = 0;
        bool pos = gopcln_fileline(&g->tab, &fn, pc, file, sizeof(file), &line);
        f[n] = (struct dsym_frame){.inlined = inl == 1};
        if (gopcln_name(&g->tab, nameoff, name, sizeof(name)))
            f[n].function = arena_strndup(a, name, strlen(name));
        if (pos && file[0])
            f[n].file = arena_strndup(a, file, strlen(file));
        f[n].line = pos ? line : 0;
        n++;
        if (inl != 1)
            return n;
        pc = parent; /* the call site, in the function one level out */
    }
}
