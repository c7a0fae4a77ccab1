/* unwind.h: DWARF unwinding of a copied stack with libunwind's remote API and our accessors. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include <libunwind.h>

struct maps;

/* A goroutine's stack as it was at a sample's instant, read by the kernel (gokernel.h) or
 * in a stop: the goroutine g the thread's m ran (m.curg; g0 if none) while the thread
 * itself ran off its stack (a cgo call, runtime.systemstack, a signal handler), its stack's
 * bounds, its saved sp and pc (g.sched), and len bytes of its stack from base. */
struct go_copy {
    uint64_t g, lo, hi, sp, pc; /* sp, pc: its saved sched (0: none) */
    uint64_t base;              /* where data was copied from */
    uint32_t len;
    const uint8_t *data;
};

/* Registers and a copy of the stack of one thread at one instant. */
struct snapshot {
    struct user_regs_struct regs;
    bool full_regs;     /* all registers (ptrace stop) or only rip/rsp (blocked thread) */
    bool bp_tried;      /* frame-pointer guess attempted (blocked threads only) */
    bool bp_found;
    uint64_t bp_guess;
    uint64_t base;      /* target address of data[0] (sp - red zone) */
    size_t len;         /* bytes copied */
    size_t cap;         /* size of data */
    uint64_t max_read;  /* highest stack address the unwind read, plus one word */
    bool short_copy;    /* the unwind wanted stack above the copy */
    bool sealed;        /* a copy from the past (the kernel's, at a perf sample): the live
                           stack above it is not read in its place */
    const struct go_copy *gcopy; /* the goroutine beneath, as it was then (NULL: none) */
    uint8_t *data;
};

#define UNWIND_MAX_FRAMES 256
#define PAGE_CACHE_SLOTS 64

struct page_slot {
    uint64_t addr; /* page address; 0 = empty */
    uint8_t data[4096];
};

/* Where one ELF object's unwind table is in the process: found from its ELF headers in the
 * process's memory (PT_GNU_EH_FRAME), never from a file, so a deleted or replaced binary, a
 * library in another mount namespace and the vDSO all unwind alike, and nothing a target
 * controls is opened by path here. */
struct eh_table {
    uint64_t base;      /* address of the object's first mapping (file offset 0) */
    uint64_t lo, hi;    /* its loaded segments */
    bool ok;            /* a usable .eh_frame_hdr search table */
    bool go_probed;     /* looked for a Go function table (gounwind.c) */
    unw_dyn_info_t di;
};

struct go_module; /* gounwind.c */

/* Unwinding state of one process: one libunwind address space with a global cache, the
 * unwind tables of the objects it maps, and a small cache of pages of file-backed memory
 * (.eh_frame, code) read with process_vm_readv. Everything the unwinder reads of the target
 * (its stack, its code, its unwind tables) is bounded and checked: the target can write all
 * of it. */
struct unwinder {
    pid_t pid;
    unw_addr_space_t as;
    const struct maps *maps; /* the process's current maps (owned by the target) */
    struct page_slot *pages; /* PAGE_CACHE_SLOTS, allocated on first use */
    struct eh_table *tables; /* objects seen so far, by base */
    size_t ntables, cap_tables;
    bool maps_miss;          /* code outside every known mapping was asked for */
    uint64_t page_reads;     /* process_vm_readv calls for the page cache */
    uint64_t masks_spared;   /* libunwind's signal-mask calls not made (unwind.c) */
    struct go_module *go;    /* Go modules found (gounwind.c), a list */
    uint8_t *go_stack;       /* a goroutine's stack read across a cgo call (gounwind.c) */
    uint64_t go_frames;      /* frames stepped by the Go runtime's tables */
    uint64_t go_copied;      /* goroutine stacks taken from the kernel's copy at the sample */
    uint64_t go_r12;         /* r12 at the Go frame a DWARF pass ended at, if go_r12_ok */
    bool go_r12_ok;
    /* The Go runtime's module (the executable), once found: what the kernel needs to read a
     * thread's goroutine at a sample (gokernel.h). */
    struct go_runtime {
        uint64_t module;     /* its table's address; 0: none found */
        int64_t tls_g;       /* where the current g is from the thread pointer (fs) */
        int32_t m_curg;      /* offset of m.curg (-1: unknown) */
        bool tls_known;      /* tls_g is known (the executable's TLS is Go's g alone) */
    } go_rt;
    /* How the target's memory outside the snapshot is read: len bytes at addr into dst,
     * returning the bytes read or -1 (errno set). process_vm_readv of pid (set by
     * unwinder_init); tests/fuzz/fuzz_unwind.c gives the unwinder an address space of its
     * own here. */
    ssize_t (*read_mem)(pid_t pid, void *dst, uint64_t addr, size_t len);
};

int unwinder_init(struct unwinder *u, pid_t pid, const struct maps *maps);
void unwinder_finish(struct unwinder *u);
/* Forget everything cached about the process's code (after exec, dlclose, ...). */
void unwinder_flush(struct unwinder *u);
/* Read the process's memory and maps through thread tid (when the leader is a zombie, its
 * own /proc files show no memory). Flushes if it changes. */
void unwinder_set_tid(struct unwinder *u, pid_t tid);

enum unwind_end {
    UNWIND_COMPLETE,  /* reached the outermost frame (libunwind step returned 0) */
    UNWIND_TRUNCATED, /* stopped early: missing unwind info, copy too short, bad frame */
    UNWIND_TOO_DEEP,  /* more than max frames */
};

/* Unwind the snapshot into ips (leaf first: ips[0] = pc, then return addresses). Returns
 * the number of frames (0 if even the first failed). */
int unwinder_unwind(struct unwinder *u, struct snapshot *s, uint64_t *ips, int max,
                    enum unwind_end *end);

/* Copy a thread's stack from sp - 128 (the red zone) up to limit (the end of the mapping
 * holding sp: the stack's top), at most s->cap bytes, with process_vm_readv (works on
 * running threads, unlike PEEKDATA). Fills s->base/len/hit_cap. Returns 0 or -errno. */
int snapshot_copy_stack(pid_t tid, uint64_t sp, uint64_t limit, struct snapshot *s);
/* Forget what an unwind learned of the previous copy (before a new copy is put in). */
void snapshot_reset(struct snapshot *s);
