/* gosym.h: function, file, line and inlined frames of Go code from the Go runtime's own
 * table (.gopclntab), which every Go binary keeps, stripped ones (-ldflags=-s -w) too.
 * Read from the file's section in the unprivileged helper; the table is parsed by
 * common/gopclntab.c (bounded; tests/fuzz/fuzz_gopclntab.c). */
#pragma once

#include <gelf.h>
#include <stdbool.h>
#include <stdint.h>

#include "containers.h"
#include "dwarfsym.h"

struct gosym;

/* The Go table of the ELF file elf, or NULL if it has none (not Go, or not a sound table).
 * elf must outlive it. */
struct gosym *gosym_open(Elf *elf);
void gosym_close(struct gosym *g);
/* Does the table describe the code at vaddr? */
bool gosym_covers(const struct gosym *g, uint64_t vaddr);
/* Frames for vaddr, innermost first (inlined functions, then the function), at most max,
 * their strings in a. Returns the count, 0 if the table has no function there. */
int gosym_resolve(struct gosym *g, uint64_t vaddr, struct dsym_frame *f, int max,
                  struct arena *a);
