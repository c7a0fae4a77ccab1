/* symproto.h: the messages between profd and its unprivileged symbolizer (profd-symbolizer).
 *
 * One SOCK_SEQPACKET socketpair per helper: every message is one packet of at most
 * SYMP_MAX_MSG bytes, a u32 type followed by fields in host byte order; a descriptor travels
 * as SCM_RIGHTS with the message that needs it. profd asks, the helper answers; while it
 * works on a request the helper may ask profd to open a debug file (SYMP_OPEN) and waits for
 * the answer (SYMP_OPENED), as OpenSSH's privilege-separated child asks its monitor.
 *
 * Both sides decode what the other sends with the bounded reader below: a short or malformed
 * message is an error, never a read past its end. profd treats a helper that sends one as
 * crashed (it may have been subverted by what it parsed) and restarts it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SYMP_VERSION 2
#define SYMP_MAX_MSG (64 * 1024)
/* Longest function or file name sent; longer ones are cut (C++ templates can be kilobytes,
 * nothing a profile shows needs more). */
#define SYMP_MAX_STR 4096
/* Most frames per address (inlined callees and the function). */
#define SYMP_MAX_FRAMES 64
/* Most offsets or addresses in one request. */
#define SYMP_MAX_BATCH 4096
#define SYMP_MAX_BUILD_ID 64
#define SYMP_MAX_LOADS 16
/* Most named symbols in a description, and their names' longest length. */
#define SYMP_MAX_SYMS 96
#define SYMP_MAX_SYM_NAME 64

enum symp_type {
    SYMP_HELLO = 1,    /* helper: u32 version (sent once, when it is ready) */
    SYMP_DESCRIBE,     /* profd: + fd of an ELF file or image: read its headers */
    SYMP_DESCRIPTION,  /* helper: struct symp_elf_info (see symp_put_elf_info) */
    SYMP_LOOKUP,       /* profd: u64 module, u32 flags, [str path], u32 n, n x u64 file offset */
    SYMP_FRAMES,       /* helper: u64 module, u32 first, u32 count, u32 final, count x entry */
    SYMP_FORGET,       /* profd: u64 module: drop its state */
    SYMP_JIT,          /* profd: u32 pid, u32 flags, u32 n, n x u64 address [+ perf map fd] */
    SYMP_JIT_NAMES,    /* helper: u32 first, u32 count, u32 final, count x str name */
    SYMP_JIT_FORGET,   /* profd: u32 pid */
    SYMP_OPEN,         /* helper: u32 kind, u64 module, bytes (build-id) or str (file name) */
    SYMP_OPENED,       /* profd: i32 0 or -errno [+ fd] */
    SYMP_ERROR,        /* helper: i32 -errno, str reason: the request failed as a whole */
};

/* SYMP_LOOKUP flags. */
#define SYMP_LOOKUP_NEW 1u /* first lookup of this module: the fd and path come with it */
/* SYMP_JIT flags. */
#define SYMP_JIT_FILE 1u   /* the perf map's fd comes with it: read what changed */
#define SYMP_JIT_GONE 2u   /* the process has no perf map (any more): forget it */

/* SYMP_OPEN kinds: which debug file the helper wants (libdwfl's find_debuginfo). */
enum symp_open_kind {
    SYMP_OPEN_BUILD_ID = 1, /* DEBUG_DIR/.build-id/xx/rest.debug, for the module or dwz alt */
    SYMP_OPEN_DEBUGLINK,    /* .gnu_debuglink name: next to the module, .debug/, DEBUG_DIR/ */
};

/* Where a name came from, best first (as symbols.h's enum sym_source). */
enum symp_source {
    SYMP_SRC_DWARF,
    SYMP_SRC_SYMTAB,
    SYMP_SRC_DYNSYM,
    SYMP_SRC_NONE,
};

struct symp_load {
    uint64_t offset, vaddr, filesz, memsz;
    uint32_t flags;
};

/* What SYMP_DESCRIPTION says of an ELF object. */
struct symp_elf_info {
    int32_t err; /* 0, or -ENOEXEC (not a loadable ELF object), -EIO */
    uint32_t e_type;
    uint8_t build_id[SYMP_MAX_BUILD_ID];
    uint32_t build_id_len;
    uint64_t build_id_vaddr; /* where the note's bytes are loaded (if a PT_NOTE holds them) */
    struct symp_load loads[SYMP_MAX_LOADS];
    uint32_t nloads;
    /* A CPython runtime (the interpreter's binary or libpython): where its .dynsym puts
     * _PyRuntime, Py_Version, PyCode_Type and PyUnicode_Type (file virtual addresses); 0 when
     * absent. */
    uint64_t py_runtime, py_version, py_code_type, py_str_type;
    /* Other .dynsym symbols profd reads by name (elfinfo.c's list: OpenTelemetry's thread
     * context, a TLS symbol whose value is its offset in the module's TLS block; and what
     * glibc's libthread_db looks up in libc and ld.so to find a thread's TLS), defined
     * ones only. */
    struct symp_sym {
        char name[SYMP_MAX_SYM_NAME];
        uint64_t value;
    } syms[SYMP_MAX_SYMS];
    uint32_t nsyms;
};

/* Writer: fields appended to a fixed buffer; overflow is remembered, not written. */
struct symp_w {
    uint8_t buf[SYMP_MAX_MSG];
    size_t len;
    bool overflow;
};
void symp_w_init(struct symp_w *w, uint32_t type);
void symp_put_u32(struct symp_w *w, uint32_t v);
void symp_put_u64(struct symp_w *w, uint64_t v);
void symp_put_bytes(struct symp_w *w, const void *p, uint32_t n); /* u32 n, then bytes */
/* A string: u32 length (UINT32_MAX for NULL) then bytes, cut at SYMP_MAX_STR. */
void symp_put_str(struct symp_w *w, const char *s);
/* Bytes left before the message is full. */
size_t symp_w_room(const struct symp_w *w);

/* Reader over one received message. Any read past the end sets bad and yields zeroes. */
struct symp_r {
    const uint8_t *p;
    size_t len, off;
    bool bad;
};
void symp_r_init(struct symp_r *r, const void *msg, size_t len);
uint32_t symp_get_u32(struct symp_r *r);
uint64_t symp_get_u64(struct symp_r *r);
/* Bytes into out (at most cap); returns their count. More than cap is bad. */
uint32_t symp_get_bytes(struct symp_r *r, void *out, uint32_t cap);
/* A string of at most SYMP_MAX_STR bytes, pointing into the message (not NUL-terminated):
 * returns false for NULL. A longer one, or one holding a NUL byte, is bad. */
bool symp_get_str(struct symp_r *r, const char **s, uint32_t *len);
/* Whole message read and nothing wrong with it. */
bool symp_r_done(const struct symp_r *r);

void symp_put_elf_info(struct symp_w *w, const struct symp_elf_info *e);
/* Returns 0 or -EPROTO (malformed, or values out of range). */
int symp_get_elf_info(struct symp_r *r, struct symp_elf_info *e);

/* Send w (and fd if >= 0) as one message. Returns 0 or -errno (-EMSGSIZE on overflow). */
int symp_send(int sock, const struct symp_w *w, int fd);
/* Receive one message into buf (SYMP_MAX_MSG bytes) and at most one descriptor (*fd, -1 if
 * none; extra descriptors are closed). Returns its length, 0 at end of stream, or -errno
 * (-EPROTO for a truncated message or one shorter than its type). timeout_ms < 0: wait
 * forever. -ETIMEDOUT when nothing came in time. */
ssize_t symp_recv(int sock, void *buf, int *fd, int timeout_ms);
/* The type of a received message. */
uint32_t symp_type_of(const void *buf);
