/* elfinfo.h: the headers of an ELF file that profd needs to place it in a process: its type,
 * PT_LOAD segments and GNU build-id. Runs in the unprivileged helper: the file is whatever a
 * target mapped, so every field is read with libelf's bounds checks and nothing is trusted. */
#pragma once

#include "symproto.h"

/* Read the file open on fd (not closed). Fills info (info->err 0, -ENOEXEC for anything but
 * a loadable ELF object, -EIO if libelf cannot read it). */
void elfinfo_read(int fd, struct symp_elf_info *info);
