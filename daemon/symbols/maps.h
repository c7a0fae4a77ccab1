/* maps.h: a process's memory map (/proc/PID/maps) with the modules behind file mappings. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct module;

#define MAP_PROT_R 1u
#define MAP_PROT_W 2u
#define MAP_PROT_X 4u

struct map_entry {
    uint64_t start, end; /* [start, end) */
    uint64_t pgoff;      /* file offset of start */
    uint32_t prot;       /* MAP_PROT_* */
    uint64_t inode;      /* inode and device as printed in maps (0 if anonymous) */
    uint32_t dev_major, dev_minor;
    char *path;          /* as printed in maps ("[stack]", "/usr/lib/...", NULL if anonymous) */
    struct module *mod;  /* ELF file or vDSO image (reference), NULL if anonymous or unreadable */
    int mod_err;         /* errno of the failed module_get when mod is NULL, else 0 */
};

struct maps {
    struct map_entry *v; /* sorted by start, non-overlapping */
    size_t n;
};

/* Read /proc/PID/maps. With open_modules, also open (module_get) the ELF file behind each
 * file-backed mapping that is executable or shares its file with an executable mapping (data
 * files such as locale archives are skipped), and the vDSO's image behind [vdso]. When prev
 * (may be NULL) holds an entry with the same path, device and inode (for [vdso]: the same
 * start and end), its module (or its mod_err) is reused instead of opening the file again,
 * so re-reading the maps of a process costs little. Returns 0 or -errno (-ESRCH if the
 * process is gone). */
int maps_read(int pid, bool open_modules, const struct maps *prev, struct maps *out);
/* Parse maps text (tests; no modules opened). Returns 0 or -EINVAL. */
int maps_parse(const char *text, struct maps *out);
/* The parser maps_read uses, on len bytes of text (any bytes; no modules opened): strict
 * refuses overlapping entries, else the later of two overlapping entries is dropped (a read
 * of a changing map is not atomic across pages). Returns 0 or -EINVAL. */
int maps_parse_text(const char *text, size_t len, bool strict, struct maps *out);
void maps_finish(struct maps *m);
/* Where the file virtual address vaddr of e's module (e->mod) is in memory, from mapping e
 * of it (its PT_LOAD headers give the bias); 0 if e maps none of its segments. */
uint64_t map_vaddr_addr(const struct map_entry *e, uint64_t vaddr);
/* Entry containing addr, or NULL. Binary search. */
const struct map_entry *maps_find(const struct maps *m, uint64_t addr);
