/* elfinfo.c: type, PT_LOAD headers and build-id of an ELF file (see elfinfo.h). */
#include "elfinfo.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <string.h>

/* Find the NT_GNU_BUILD_ID note in the PT_NOTE segment ph. */
static void read_build_id(Elf *elf, const GElf_Phdr *ph, struct symp_elf_info *info)
{
    Elf_Data *data = elf_getdata_rawchunk(elf, (int64_t)ph->p_offset, ph->p_filesz,
                                          ph->p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    if (!data)
        return;
    GElf_Nhdr nh;
    size_t off = 0, name_off, desc_off, next;
    while (off < data->d_size && (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
        const char *name = (const char *)data->d_buf + name_off;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof("GNU") &&
            !memcmp(name, "GNU", sizeof("GNU")) && nh.n_descsz > 0 &&
            nh.n_descsz <= SYMP_MAX_BUILD_ID) {
            memcpy(info->build_id, (const char *)data->d_buf + desc_off, nh.n_descsz);
            info->build_id_len = nh.n_descsz;
            info->build_id_vaddr = ph->p_vaddr + desc_off;
            return;
        }
        if (next <= off)
            break;
        off = next;
    }
}

/* Most .dynsym entries looked at: libpython3.13 has about 2,300, libc 3,000. */
#define MAX_DYNSYMS 200000

/* The other symbols a description carries (symp_elf_info.syms): OpenTelemetry's thread
 * context (a TLS symbol), and what glibc's libthread_db asks of libc and ld.so. */
static bool wanted(const char *name, unsigned type)
{
    if (type == STT_TLS)
        return !strcmp(name, "otel_thread_ctx_v1");
    return !strncmp(name, "_thread_db_", 11) || !strcmp(name, "__nptl_version") ||
           !strcmp(name, "__nptl_rtld_global") || !strcmp(name, "_r_debug") ||
           !strcmp(name, "_rtld_global");
}

/* The CPython runtime's symbols, if elf defines them in .dynsym (exported by every build:
 * extension modules link against them, so they survive stripping), and the others wanted. */
static void read_dynsyms(Elf *elf, struct symp_elf_info *info)
{
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t n = sh.sh_size / sh.sh_entsize;
        if (!d || n > MAX_DYNSYMS)
            return;
        for (size_t i = 1; i < n; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym))
                return;
            unsigned type = GELF_ST_TYPE(sym.st_info);
            /* A TLS symbol's value is an offset in the block: 0 is a fine one. */
            if ((!sym.st_value && type != STT_TLS) || sym.st_shndx == SHN_UNDEF ||
                (type != STT_OBJECT && type != STT_TLS))
                continue;
            const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
            if (!name || (name[0] != '_' && name[0] != 'P' && name[0] != 'o'))
                continue;
            if (type == STT_OBJECT && !strcmp(name, "_PyRuntime"))
                info->py_runtime = sym.st_value;
            else if (type == STT_OBJECT && !strcmp(name, "Py_Version"))
                info->py_version = sym.st_value;
            else if (type == STT_OBJECT && !strcmp(name, "PyCode_Type"))
                info->py_code_type = sym.st_value;
            else if (type == STT_OBJECT && !strcmp(name, "PyUnicode_Type"))
                info->py_str_type = sym.st_value;
            else if (wanted(name, type) && info->nsyms < SYMP_MAX_SYMS &&
                     strlen(name) < SYMP_MAX_SYM_NAME) {
                struct symp_sym *s = &info->syms[info->nsyms++];
                strcpy(s->name, name);
                s->value = sym.st_value;
            }
        }
        return;
    }
}

/* Type, PT_LOAD headers and build-id of elf. Returns 0 or -ENOEXEC. */
static int parse(Elf *elf, struct symp_elf_info *info)
{
    GElf_Ehdr eh;
    size_t phnum;
    if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh))
        return -ENOEXEC;
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
        return -ENOEXEC;
    if (elf_getphdrnum(elf, &phnum) != 0)
        return -ENOEXEC;
    info->e_type = eh.e_type;
    for (size_t i = 0; i < phnum; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph))
            return -ENOEXEC;
        if (ph.p_type == PT_LOAD) {
            /* Segments that wrap around are not loadable: no sane file has them. */
            if (ph.p_offset + ph.p_filesz < ph.p_offset || ph.p_vaddr + ph.p_memsz < ph.p_vaddr)
                return -ENOEXEC;
            if (info->nloads == SYMP_MAX_LOADS)
                continue; /* the first ones hold the code */
            info->loads[info->nloads++] = (struct symp_load){
                .offset = ph.p_offset,
                .vaddr = ph.p_vaddr,
                .filesz = ph.p_filesz,
                .memsz = ph.p_memsz,
                .flags = ph.p_flags,
            };
        } else if (ph.p_type == PT_NOTE && !info->build_id_len) {
            read_build_id(elf, &ph, info);
        }
    }
    if (!info->nloads)
        return -ENOEXEC;
    read_dynsyms(elf, info);
    /* Without _PyRuntime, no CPython runtime at all (the others alone mean nothing); with
     * it, a missing one says a version profd cannot read (Py_Version is 3.11's). */
    if (!info->py_runtime)
        info->py_version = info->py_code_type = info->py_str_type = 0;
    return 0;
}

void elfinfo_read(int fd, struct symp_elf_info *info)
{
    memset(info, 0, sizeof(*info));
    elf_version(EV_CURRENT);
    /* READ_MMAP: only the headers and the notes are touched, so only those pages are read. */
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf) {
        info->err = -EIO;
        return;
    }
    info->err = parse(elf, info);
    elf_end(elf);
    if (info->err < 0) {
        int e = info->err;
        memset(info, 0, sizeof(*info));
        info->err = e;
    }
}
