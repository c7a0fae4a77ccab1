/* gokernel.h: a Go target's goroutine read in the kernel at the instant of each perf sample,
 * by the same eBPF program as Python's frames (bpf/pyframes.bpf.c, on the same events).
 *
 * A thread that runs C code (a cgo call) or the runtime's own code on its system stack
 * (runtime.systemstack) is sampled on that stack: the kernel's copy holds it, not the
 * goroutine's frames beneath, which live in another stack (a heap span). Read at the unwind,
 * after the sample, the goroutine has often moved on (a 3 ms C call: two in three of its
 * samples lost the goroutine's frames). So at the sample, the program follows the thread's
 * g (at fs-8) to its m and m.curg: when that is another goroutine, it copies its stack from
 * the sp it saved (16 KiB at most) into a record, paired here with the sample as Python's
 * records are (pykernel.h), and the unwinder crosses to it from that copy (gounwind.c).
 * Without the program (refused, PROFD_PYTHON_BPF=0) or without a record, the goroutine is
 * read live as before, and kept only if it is still in the same call. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "pykernel.h"

struct target;
struct thread;
struct go_copy;

/* A Go target's figures (status "go"). */
struct go_kernel {
    bool kernel;         /* its threads' goroutines are read at their samples */
    bool reopen;         /* it just began: events opened before lack the program */
    uint64_t module;     /* the runtime (u->go_rt.module) the program was given */
    char why[128];       /* why not, when not */
    uint64_t records;    /* records the program wrote for its threads */
    uint64_t paired;     /* samples that found one */
    uint64_t unpaired;   /* records whose sample was not read */
    uint64_t dropped;    /* records dropped for room before their sample was read */
    uint64_t stopped_reads; /* goroutines read in a ptrace stop's sample (gok_read_stopped) */
};

/* After an unwind found t's Go runtime (t->unw.go_rt), or lost it (exec): give the program
 * the process, or take it back. Cheap when nothing changed (called at each tick). */
void gok_target_update(struct target *t);
/* t is going. */
void gok_target_forget(struct target *t);
/* The goroutine of th's sample of event ev taken at time_ns, if the kernel copied one:
 * valid until the next call (for any thread). NULL if none. */
const struct go_copy *gok_take(struct target *t, struct thread *th, enum pyk_event ev,
                               uint64_t time_ns);
/* The queue's parts, pure (tests/unit/test_gokernel.c): append a record (the oldest dropped
 * for room, counted); take the record of the sample at time_ns (the first of the queue at
 * or after it, at most PYK_PAIR_NS after; older ones go, counted unpaired) into c, its
 * stack copied to stack (GOBPF_STACK bytes): false if it has none. */
struct gobpf_rec;
struct pyk_queue;
void gok_queue_push(struct pyk_queue *q, const struct gobpf_rec *r, struct go_kernel *k);
bool gok_queue_take(struct pyk_queue *q, uint64_t time_ns, struct go_copy *c, uint8_t *stack,
                    struct go_kernel *k);
/* In a ptrace stop's sample of thread tid of a Go target (regs its registers): the
 * goroutine, read as the program would at a kernel copy, while it cannot change (the unwind
 * comes after the thread runs on). Valid until the next call; NULL if none. */
struct user_regs_struct;
const struct go_copy *gok_read_stopped(struct target *t, pid_t tid,
                                       const struct user_regs_struct *regs);
/* A record from the program's ring buffer with GOBPF_GO set (pykernel.c's reader). */
void gok_on_record(const void *data, size_t size);
