/* unwind_internal.h: what unwind.c (DWARF, through libunwind) shares with gounwind.c (Go
 * code, through the Go runtime's own tables). */
#pragma once

#include <elf.h>

#include "unwind.h"

struct map_entry;

/* Is [addr, addr + n) inside the snapshot? */
bool in_snapshot(const struct snapshot *s, uint64_t addr, uint64_t n);
/* One word (n bytes) of file-backed memory (or the vDSO) through the page cache: 0 or
 * -UNW_E*. */
int read_cached(struct unwinder *u, uint64_t addr, unw_word_t *val);
bool read_bytes(struct unwinder *u, uint64_t addr, void *out, size_t n);
bool is_code(struct unwinder *u, uint64_t addr);
/* The program headers of the ELF object whose first mapping is at base, read from the
 * process's memory and checked (at most MAX_PHDRS, all in the page cache's reach), and the
 * page-aligned vaddr of the segment holding file offset 0 (mapped at base: the load bias is
 * base - *first). Returns their count, 0 if not a sound 64-bit ELF object. */
#define MAX_PHDRS 64
int elf_phdrs(struct unwinder *u, uint64_t base, Elf64_Phdr *ph, uint64_t *first);
/* Was the instruction before ret a call? */
bool preceded_by_call(struct unwinder *u, uint64_t ret);

/* gounwind.c */

/* Look for a Go function table in the object whose table entry is t (once): its code then
 * unwinds by the table (go_covers). */
void go_probe(struct unwinder *u, struct eh_table *t);
/* Is pc in a Go module's code? */
bool go_covers(const struct unwinder *u, uint64_t pc);
/* Step Go frames from the frame at *pc, *sp (leaf: the interrupted frame, else a return
 * address), appending callers to ips (n of max used). Returns true when the unwind ended
 * (*end set), false when it left Go code for other code at *pc, *sp, which DWARF unwinds. */
bool go_unwind(struct unwinder *u, struct snapshot *s, uint64_t *pc, uint64_t *sp, bool leaf,
               uint64_t *ips, int *n, int max, enum unwind_end *end);
/* Forget the Go modules (flush), free everything (finish). */
/* A thread of a Go program sampled in libc's signal restorer (cgo), the handler returned:
 * the interrupted Go code's pc and sp from the ucontext at sp, if its stack is readable
 * (the kernel's copy of the goroutine). */
bool go_restorer(struct unwinder *u, struct snapshot *s, uint64_t *pc, uint64_t *sp);
void go_flush(struct unwinder *u);
void go_finish(struct unwinder *u);
