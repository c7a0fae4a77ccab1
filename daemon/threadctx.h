/* threadctx.h: OpenTelemetry's thread context (the Thread Context OTEP, 4947) of a target's
 * threads, read at each sample's instant.
 *
 * A process that publishes it exports a TLS symbol, otel_thread_ctx_v1, in the .dynsym of
 * its executable or of a library: in each thread, a pointer to the thread's current record
 * (NULL: none), byte-packed, host endian: trace_id[16], span_id[8], valid (u8, 1 = valid),
 * trace_flags (u8), attrs_data_size (u16), then attrs_data (entries of key index u8, length
 * u8, that many bytes of UTF-8). The writer uses compiler fences only: the record is read
 * only where the thread cannot run, in a ptrace stop, a blocked thread's copy (it did not
 * run), or the eBPF program at a perf sample. Read after a kernel copy without the program,
 * the context is marked late: it is the thread's a little after its sample.
 *
 * Where each thread's pointer is: glibc's libthread_db (td_thr_tls_get_addr, as gdb does)
 * walks the process's threads and their TLS blocks (static, or dlopen's dynamic ones) over
 * profd's memory reads, with the symbols it needs from libc and ld.so as the unprivileged
 * helper read them from their .dynsym (modules.h's syms). It requires the target's glibc to
 * be the daemon's version (libthread_db checks): another glibc (a container's) is refused
 * with the reason in status.
 *
 * A sample's context is interned in the target's stack table (a STACK_CONTEXT entry) and
 * paired with its stack (a STACK_PAIR entry) whose id the ring entry holds: the ring entry
 * stays 16 bytes, and a target that publishes no context has no such entries. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct target;
struct thread;
struct maps;
struct tctx_agent; /* threadctx.c: libthread_db's agent and its process handle */

/* Attribute key indexes (u8), and the longest key name kept. */
#define TCTX_MAX_KEYS 256
#define TCTX_MAX_KEY_NAME 128
/* The record's fixed head, and the most of its attributes profd keeps (the OTEP
 * recommends records of 640 bytes at most). */
#define TCTX_HEAD 28
#define TCTX_MAX_ATTRS 612
/* A context as interned: trace_id, span_id, trace_flags, then the attributes' whole entries
 * (TCTX_KEPT bytes before them). */
#define TCTX_KEPT 25
#define TCTX_MAX (TCTX_KEPT + TCTX_MAX_ATTRS)

enum tctx_status {
    TCTX_NONE,        /* no module defines otel_thread_ctx_v1 (yet) */
    TCTX_OK,          /* its threads' contexts are read */
    TCTX_UNSUPPORTED, /* one does, and it cannot be read: why says so */
};

struct tctx_target {
    enum tctx_status status;
    char why[200];
    uint64_t module_id;   /* the module whose symbol is read */
    char module[64];      /* its name */
    uint64_t sym_off;     /* the symbol's offset in its TLS block */
    uint64_t link_map;    /* its struct link_map in the target */
    struct tctx_agent *agent;
    bool walk_wanted;     /* a thread without its slot was sampled: walk the threads */
    uint64_t retry_ns;    /* not found for now (libc not mapped yet): looked for again then */
    uint64_t walked_ns;   /* last walk */
    /* For the eBPF program: the module's TLS module id (its dtv slot), when a thread's slot
     * was found where the dtv says (0: not known). */
    uint64_t modid;
    /* Read by the eBPF program at each perf sample (pybpf.h's ctx_*): its records paired
     * with their samples as Go's are (gokernel.h). */
    bool kernel;
    bool reopen;          /* it just began: events opened before lack the program */
    bool kernel_tried;    /* (given to the program, or refused: not again) */
    char kernel_why[160]; /* why not, when not */
    struct {
        uint64_t records, paired, unpaired, dropped, missing;
    } ks;
    /* The attributes' key names, from the process context (OTEP 4719: a mapping named
     * OTEL_CTX, its Resource's threadlocal.attribute_key_map), by key index; NULL where
     * unknown. Read again when its publication time changes (looked at every second). */
    char *keys[TCTX_MAX_KEYS];
    unsigned nkeys;
    uint64_t keys_published_ns, keys_looked_ns;
    struct {
        uint64_t with;       /* samples that carry a context */
        uint64_t without;    /* read, and the thread had none (NULL, or not valid) */
        uint64_t late;       /* read after the sample (a kernel copy without the program) */
        uint64_t unreadable; /* the pointer or the record could not be read */
        uint64_t no_slot;    /* the thread's slot was not known yet */
        uint64_t walks;      /* walks of the thread list (libthread_db) */
        uint64_t slots;      /* threads whose slot was found */
    } stats;
};

/* The context of the sample being taken (like pyframes in sampler.c): set by a sampling
 * path, taken by the stack's interning (tctx_tag). */
struct tctx_sample {
    bool have;
    bool late;
    pid_t tid;                /* the thread it was read of */
    uint16_t len;             /* bytes of rec */
    uint8_t rec[TCTX_MAX];    /* as interned (TCTX_KEPT, then attributes) */
};
extern struct tctx_sample tctx_cur;

/* Look for the symbol in t's maps (after each read of them): the first time one is found,
 * set up the reader. */
void tctx_target_detect(struct target *t);
void tctx_target_finish(struct tctx_target *c);
/* At a tick, before its samples: find the slots of threads sampled without one. */
void tctx_target_update(struct target *t);
/* Read th's context now into tctx_cur (th cannot run: stopped, or blocked; late: it can,
 * and did since its sample). No-op for a target without one. */
void tctx_capture(struct target *t, struct thread *th, bool late);
/* The program's record of th's sample of event ev taken at time_ns, into tctx_cur (exact):
 * false if it has none (then read it late). pyk_event: pykernel.h's enum. */
bool tctx_take(struct target *t, struct thread *th, int ev, uint64_t time_ns);
/* A record from the program's ring buffer (pykernel.c reads it): to its thread's queue. */
void tctx_on_record(const void *data, size_t size);
/* The kernel refused the program on one of t's perf events (-errno r): read late from now. */
void tctx_kernel_refused(struct target *t, int r);
/* The queue's parts, pure (tests/unit): append a record; take the one of the sample at
 * time_ns into out (false: none). */
struct pyk_queue;
struct ctxbpf_rec;
void tctx_queue_push(struct pyk_queue *q, const struct ctxbpf_rec *r, struct tctx_target *c);
bool tctx_queue_take(struct pyk_queue *q, uint64_t time_ns, struct tctx_sample *out,
                     struct tctx_target *c);
/* A record rec of len bytes as read (head and attributes, len >= TCTX_HEAD) into out:
 * false if it is not a valid context (valid != 1, or no trace and no span). The attributes
 * are cut to their whole entries. Pure (tests/unit). */
bool tctx_parse(const uint8_t *rec, size_t len, struct tctx_sample *out);
/* The key names of a process context's payload (a Resource, protobuf: len bytes the target
 * wrote): threadlocal.attribute_key_map's strings into names[0..] (malloc'd; an entry that
 * is not a string, or is longer than TCTX_MAX_KEY_NAME, NULL). Returns how many, or -1
 * for a payload that is not a Resource or holds no key map. Pure (tests/unit, fuzz). */
int tctx_parse_keymap(const uint8_t *buf, size_t len, char **names, unsigned max);
/* The stack id for a sample of thread tid: stack itself without a context (or with one read
 * of another thread: a sample that failed after its read), else the pair of stack and
 * tctx_cur's context (the references taken over). tctx_cur is cleared. */
uint32_t tctx_tag(struct target *t, pid_t tid, uint32_t stack);
/* A ring entry's stack id resolved: the stack, and the context entry (STACK_NONE: none)
 * and whether it was read late. */
uint32_t tctx_resolve(const struct target *t, uint32_t id, uint32_t *ctx, bool *late);
/* The context's bytes (as tctx_sample.rec) of a STACK_CONTEXT entry; NULL if id is none. */
const uint8_t *tctx_bytes(const struct target *t, uint32_t id, uint16_t *len);
