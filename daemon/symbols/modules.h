/* modules.h: ELF files mapped into targets, opened once and shared by every target.
 *
 * A module is the exact file a target mapped, identified by its GNU build-id (or, without
 * one, by device/inode/size/mtime). It keeps an open descriptor so the file can still be read
 * after the target exits or the file is deleted or replaced on disk (package upgrade). The
 * vDSO, which has no file, is a module too: its image copied from a target into a memfd.
 * Modules are reference counted and immutable after module_get() returns, except `sym`,
 * which only the symbolizer (one thread) touches. The registry is thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MODULE_MAX_BUILD_ID 64
/* Path and name of the vDSO's module, as /proc/PID/maps names its mapping. */
#define MODULE_VDSO "[vdso]"
#define MODULE_MAX_LOADS 16

struct module_load {
    uint64_t offset; /* p_offset */
    uint64_t vaddr;  /* p_vaddr */
    uint64_t filesz; /* p_filesz */
    uint64_t memsz;  /* p_memsz */
    uint32_t flags;  /* p_flags (PF_X ...) */
};

struct module {
    int refs;           /* atomic */
    uint64_t id;        /* unique for the daemon's life: names the module to the helper */
    char *path;         /* path as mapped, without " (deleted)" */
    const char *name;   /* basename of path */
    int fd;             /* O_RDONLY onto the mapped file (the vDSO: a memfd of its image) */
    bool deleted;       /* the target's maps said "(deleted)" when first seen */
    uint8_t build_id[MODULE_MAX_BUILD_ID];
    size_t build_id_len; /* 0 if the file has no NT_GNU_BUILD_ID note */
    int e_type;          /* ET_EXEC or ET_DYN */
    struct module_load loads[MODULE_MAX_LOADS];
    int nloads;
    /* A CPython runtime: file virtual addresses of _PyRuntime, Py_Version, PyCode_Type and
     * PyUnicode_Type (its .dynsym, as the helper read it); 0 if it is none. */
    uint64_t py_runtime, py_version, py_code_type, py_str_type;
    /* The other .dynsym symbols the helper reports by name (symproto.h's syms): the
     * thread context's TLS symbol, libthread_db's in libc and ld.so. */
    struct module_sym {
        char *name;
        uint64_t value;
    } *syms;
    uint32_t nsyms;
    void *sym; /* symbolizer-private state; see symbols.c */
};

/* Find or open the module backing mapping [start, end) of process pid, whose path in
 * /proc/PID/maps is `path` (may end in " (deleted)") and inode `inode` (0: unknown). Opens
 * /proc/PID/map_files/START-END first (the exact mapped file, even if deleted), else
 * /proc/PID/root/PATH without following symbolic links, which must have that inode; a
 * path-opened file's build-id must also match the one in the target's memory when both can be
 * read. The file's ELF headers are read by the unprivileged helper (profd-symbolizer), never
 * in this process.
 * For path MODULE_VDSO, reads the image of the mapping with process_vm_readv (which needs
 * the right to ptrace pid) and returns the registry's module with its build-id, or a new
 * one (path and name "[vdso]") holding a memfd copy of it.
 * Returns a new reference, or NULL with errno set (ENOENT, EACCES, EPERM, ENOEXEC for
 * non-ELF, ESTALE if the file at PATH is not the one mapped, ESRCH if the process is gone,
 * EFAULT if the vDSO mapping cannot be read, EAGAIN if the helper failed: try again later). */
struct module *module_get(int pid, uint64_t start, uint64_t end, const char *path,
                          uint64_t inode);
/* Check the helper's SYMP_DESCRIPTION of a file (msg, len: the whole message; the helper is
 * untrusted) into info: 0 (a loadable ELF object), -ENOEXEC or -EIO as the helper found it,
 * or -EPROTO for an answer that is malformed or out of range. For tests and fuzzers too. */
struct symp_elf_info;
int module_read_description(const void *msg, size_t len, struct symp_elf_info *info);
/* Open a module from a file path (tests, tools). */
struct module *module_open_path(const char *path);
struct module *module_ref(struct module *m);
void module_unref(struct module *m);

/* The value of the named symbol the helper reported (module_sym), or false. */
bool module_symbol(const struct module *m, const char *name, uint64_t *value);
/* File offset -> ELF virtual address using the PT_LOAD headers. false if outside them. */
bool module_offset_to_vaddr(const struct module *m, uint64_t off, uint64_t *vaddr);
/* Lowercase hex of the build-id into buf (>= 2*len+1); "" if none. */
void module_build_id_hex(const struct module *m, char *buf, size_t size);
/* Number of live modules in the registry (for status and leak tests). */
size_t modules_count(void);
/* Stop the helper that reads ELF headers (at exit). */
void modules_shutdown(void);
/* Its last failure ("" if none), for the reply of a slice whose files it could not read. */
void modules_helper_error(char *buf, size_t len);
/* Its pid (0 if not running), for status. */
pid_t modules_helper_pid(void);
