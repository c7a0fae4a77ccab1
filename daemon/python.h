/* python.h: a target's CPython runtime, if it has one: found in its maps, its threads'
 * Python frames captured with their native samples, and the code objects they ran named once.
 *
 * A sample's Python frames are stored after its native frames in the same stack (stacks.h),
 * each as a tagged value that no address can be (top bits 01: PY_TAG): the code object's
 * id in the target's table, the code unit it was at, and whether it is an evaluation call's
 * first frame. The slice resolves them (names, file, line) and puts each group of them in
 * place of the native _PyEval_EvalFrameDefault call that ran it.
 *
 * When the frames are read: while the thread cannot change them. In a ptrace stop (the
 * sampler reads them before resuming the thread) or while it is blocked in a system call
 * (read with the stack copy, whose check that the thread did not run covers them too). A
 * running thread of a Python target is sampled by a stop rather than from the kernel's copy:
 * the frames are in the heap, not on the copied stack, and by the time the copy is read they
 * are the thread's frames of another moment. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "containers.h"
#include "pyframes.h"

struct maps;

/* Top bits 01: a non-canonical x86-64 address, neither user space (below 2^47) nor the
 * kernel's half (the [vsyscall] page, 0xffffffffff600000, is in stacks too). */
#define PY_TAG (1ull << 62)
#define PY_ENTRY (1ull << 61)
#define PY_ID_MASK 0x1fffffffffull /* 37 bits of code id, above 24 of code unit */
#define PY_MAX_FRAMES 128
#define PY_CODE_ID(v) ((uint32_t)(((v) >> 24) & PY_ID_MASK))
#define PY_INSTR(v) ((uint32_t)((v) & 0xffffff))
static inline bool py_is_frame(uint64_t v)
{
    return (v >> 62) == 1;
}

enum py_status {
    PYS_NONE,        /* no CPython runtime mapped */
    PYS_OK,          /* frames read */
    PYS_UNSUPPORTED, /* a runtime this profd cannot read (why says which): native stacks only */
};

/* A code object the target ran, as first seen. Immutable once added. */
struct py_code_entry {
    uint64_t code, ident;
    char *module, *qualname, *filename; /* module "" if unknown */
    int firstlineno;
    uint8_t *linetable;
    size_t linetable_len;
};

#define PY_CODE_CHUNK 512
#define PY_MAX_CODES (1u << 20)

struct py_target {
    enum py_status status;
    char why[160];              /* for PYS_UNSUPPORTED, said once in the log and in status */
    uint64_t module_id;         /* the module that holds the runtime (0: none seen yet) */
    struct py_runtime rt;
    /* Code objects by address (-> index + 1), entries in chunks that never move. */
    struct u64map by_code;
    struct py_code_entry **chunks;
    uint32_t ncodes;
    size_t code_bytes;
    /* What was captured. */
    uint64_t samples;           /* samples with Python frames */
    uint64_t torn;              /* chains that failed a check (dropped: native only) */
    uint64_t unreadable;        /* chains that could not be read */
    uint64_t codes_failed;      /* code objects that could not be named */
    uint64_t captures;          /* chains read (py_capture calls on a Python runtime) */
    uint64_t capture_ns;        /* profd's CPU reading them: in a stop, the pause it adds */
    /* Its running threads' frames read in the kernel at their perf samples' instant
     * (pykernel.h): when kernel is false, they are stopped for them, kernel_why says why. */
    bool kernel;
    bool kernel_loading;        /* not yet: the program is being loaded */
    bool kernel_reopen;         /* it just began: events opened before, without the program,
                                   are closed at the next tick (sampler_tick) */
    uint64_t kernel_module;     /* the module whose runtime the program was given */
    char kernel_why[160];
    struct py_kernel_stats {
        uint64_t records;       /* records the program wrote for its threads */
        uint64_t paired;        /* samples that found their record */
        uint64_t missing;       /* samples without one (native frames only) */
        uint64_t faulted;       /* chains a read ended (a page not resident): native only */
        uint64_t failed_check;  /* chains a check ended (not a frame, not a code object) */
        uint64_t truncated;     /* chains longer than a record (innermost kept) */
        uint64_t no_thread_state; /* samples of threads without a thread state */
        uint64_t unpaired;      /* records whose sample was not read (skipped, lost) */
        uint64_t queue_dropped; /* records dropped for room before their sample was read */
    } ks;
};

/* Look for a runtime in the maps (at attach, and when they change). pid: the process. */
void py_target_detect(struct py_target *py, pid_t pid, const struct maps *maps);
void py_target_finish(struct py_target *py);

/* Read thread tid's Python frames now (the thread stopped, or blocked). *tstate: the address
 * of its thread state found last time (a hint; updated). Fills frames, returns how many (0:
 * none, not a Python thread, or torn: counted). */
int py_capture(struct py_target *py, pid_t tid, uint64_t *tstate, struct py_frame *frames);

/* Append the captured frames to ips (n of them there already, room for cap) as tagged
 * values, naming new code objects (reads the target's memory; allocates for new ones only).
 * Returns the new count. */
size_t py_encode(struct py_target *py, const struct py_frame *frames, int nframes,
                 uint64_t *ips, size_t n, size_t cap);

/* Code entry id, or NULL. (Entries never move or change: safe to read from the loop thread
 * while it adds more; the slice copies what it needs.) */
const struct py_code_entry *py_code_get(const struct py_target *py, uint32_t id);

size_t py_target_memory(const struct py_target *py);
