/* spool.h: the exporters' spool: each body to send is a file of its own in the spool
 * directory (the unit's StateDirectory), written whole under a temporary name and renamed
 * into place, removed once it is sent or dropped; what is there when profd starts is sent
 * then. A file is "SEQ-EXPORTER.rec": SEQ orders them (16 hex digits: the real time of its
 * window's encoding, in ns), its first line is a JSON header (what the send needs besides
 * the body: the body's id, its window, its content type), the rest is the body as it is
 * sent.
 *
 * Files are not fsync'd: a record survives profd's SIGKILL or crash (it is in the kernel's
 * page cache), not the machine's power loss. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Make dir (mode 0700, its parent must exist) if needed and remove the temporary files a
 * crash left there. Returns 0 or -errno. */
int spool_open(const char *dir);
/* Write a record (any thread). Returns its path (malloc'd), or NULL with *err = -errno. */
char *spool_write(const char *dir, uint64_t seq, const char *exporter, const char *header,
                  const void *body, size_t len, int *err);
/* Call each(seq, exporter, path, size, ctx) for every record in dir. Returns how many, or
 * -errno. */
int spool_scan(const char *dir, void (*each)(uint64_t seq, const char *exporter,
                                             const char *path, size_t size, void *ctx),
               void *ctx);
/* Read a record: its header line (NUL-terminated) and its body, in one allocation *buf.
 * Returns 0 or -errno (-EINVAL: not a record). */
int spool_read(const char *path, char **buf, const char **header, const char **body,
               size_t *body_len);
/* Parse a record's file name. Returns 0 or -EINVAL. */
int spool_name_parse(const char *name, uint64_t *seq, char *exporter, size_t exporter_len);
