/* pybpf.h: what the eBPF Python walker (pyframes.bpf.c) and profd (pykernel.c) share: the
 * per-process layout profd hands the program, and the record the program writes for each
 * sample into its ring buffer. Plain fixed-width types: compiled for the BPF target and for
 * the host alike. */
#pragma once

#include <linux/types.h>

/* Frames one record holds (python.h PY_MAX_FRAMES); the chain's rest is marked truncated. */
#define PYBPF_MAX_FRAMES 128
/* Steps of one walk: frames plus the shim frames between them. */
#define PYBPF_MAX_STEPS 256
/* Thread states looked at to find a thread's (per interpreter), and interpreters. */
#define PYBPF_MAX_TSTATES 512
#define PYBPF_MAX_INTERPS 4
/* Bytes read of a frame and of a code object's head: every field the layout names lies
 * below (pyframes.c bounds them so for 3.13+'s debug offsets). */
#define PYBPF_FRAME_BYTES 128
#define PYBPF_CODE_BYTES 160

/* Which of a thread's perf events the sample came from (its own program each: the record
 * pairs with that event's sample only). */
enum pybpf_kind { PYBPF_CLOCK, PYBPF_LATEST, PYBPF_PREEMPT, PYBPF_KINDS };

/* A Python process: where its runtime is and its version's layout (pyframes.h py_layout,
 * the fields a walk needs). Key: the process's pid (tgid). */
struct pybpf_proc {
    __u64 runtime;        /* address of _PyRuntime */
    __u64 code_type;      /* address of PyCode_Type */
    __u32 rt_interp_head, interp_next, interp_threads;
    __u32 ts_next, ts_native_tid, ts_frame;
    __s32 cframe_current; /* -1: none (3.13+) */
    __u32 fr_code, fr_previous, fr_instr, fr_owner, fr_func;
    __s32 fr_is_entry;    /* -1: none (3.12+) */
    __u32 fr_size;
    __u32 co_filename, co_name, co_qualname, co_linetable, co_firstlineno;
    __u32 co_code_adaptive, co_size;
    __u32 fr_owner_max;   /* owner values from 3 to this: shims (above: a bad frame) */
    __u32 ptr_tag;        /* bits cleared from f_executable and f_funcobj (3.14: 1) */
};

/* A thread's state, found once (and again when it moved). Key: tid. */
struct pybpf_tstate {
    __u64 addr;           /* 0: none found */
    __u64 checked_ns;     /* when none was found (looked for again after PYBPF_RECHECK_NS) */
};
#define PYBPF_RECHECK_NS 100000000ull

/* One frame (python.h py_frame's fields). */
struct pybpf_frame {
    __u64 code, ident, func;
    __u32 instr;
    __u32 entry;
};

/* Record flags. */
#define PYBPF_TRUNCATED 1u  /* more frames than a record holds: the outermost are left out */
#define PYBPF_FAULT 2u      /* a read failed (a page not resident): the chain ends there */
#define PYBPF_BAD 4u        /* a frame or code object failed a check: the chain ends there */
#define PYBPF_NO_TSTATE 8u  /* the thread has no thread state (not running Python) */

struct pybpf_rec {
    __u64 time_ns;        /* bpf_ktime_get_ns: CLOCK_MONOTONIC, just after the perf sample's */
    __u32 pid, tid;
    __u16 nframes;
    __u8 kind;            /* enum pybpf_kind */
    __u8 flags;
    __u32 pad;
    struct pybpf_frame frames[PYBPF_MAX_FRAMES];
};
#define PYBPF_REC_HEAD 24u /* bytes before frames[] */

/* A Go process (the same program, on the same events; gokernel.h): where its threads' g
 * is and the offsets to its goroutine. Key: the process's pid (tgid). */
struct gobpf_proc {
    __s64 tls_g;          /* the current g: at fs base + tls_g */
    __u32 g_m;            /* g.m */
    __u32 m_curg;         /* m.curg */
    __u32 g_sched;        /* g.sched.sp (pc follows) */
    __u32 pad;
};

/* Most bytes of a goroutine's stack a record holds (from its saved sp up). */
#define GOBPF_STACK 16384

/* Go records carry this flag (their head is a Python record's: time, ids, kind, flags). */
#define GOBPF_GO 0x80u

/* A goroutine's stack at a sample of a thread off it: on its system stack (g0: a cgo call,
 * runtime.systemstack, morestack), a signal's, a vDSO call's. The goroutine is m.curg, or
 * g0 where the thread runs none (the scheduler's code, a signal handler interrupted). From
 * GOBPF_BELOW_SP below the sp its switch saved; with none saved (sp and pc 0), or for g0,
 * the stack's top GOBPF_STACK - 8 bytes. */
struct gobpf_rec {
    __u64 time_ns;
    __u32 pid, tid;
    __u16 unused;
    __u8 kind;
    __u8 flags;           /* GOBPF_GO */
    __u32 len;            /* bytes of stack[] */
    __u64 g, lo, hi, sp, pc; /* the goroutine, its stack, its saved sched (sp 0: none) */
    __u64 base;           /* where stack[] was copied from */
    __u8 stack[GOBPF_STACK];
};
#define GOBPF_REC_HEAD 72u /* bytes before stack[] */
/* Copied below a saved sp too: a switch caught between saving it and leaving the stack. */
#define GOBPF_BELOW_SP 1024u

/* OpenTelemetry's thread context (threadctx.h): where a process's otel_thread_ctx_v1 is
 * in each thread, for the program that reads the record at each sample (ctx_*, also tail-
 * called by the Python and Go programs). Key: the process's pid (tgid). */
struct ctxbpf_proc {
    __u64 sym_off;        /* the symbol's offset in its module's TLS block */
    __u32 modid;          /* the module's slot in the thread's dtv (at fs base + 8) */
    __u32 pad;
};

/* Most bytes of a record kept (threadctx.h TCTX_HEAD + TCTX_MAX_ATTRS). */
#define CTXBPF_MAX 640u
#define CTXBPF_HEAD 28u
/* Context records carry this flag (their head is a Python record's, as Go's). */
#define CTXBPF_CTX 0x40u
#define CTXBPF_NONE 0x01u  /* the thread has no context (a NULL pointer) */
#define CTXBPF_FAULT 0x02u /* the pointer or the record could not be read */

/* The thread's record at a sample (len bytes of it: the head and what its attributes'
 * size says, up to CTXBPF_MAX), or the header alone with NONE or FAULT: every sample has its
 * record, as Go's. */
struct ctxbpf_rec {
    __u64 time_ns;
    __u32 pid, tid;
    __u16 len;
    __u8 kind;
    __u8 flags;           /* CTXBPF_CTX, and NONE or FAULT */
    __u32 pad;
    __u8 rec[CTXBPF_MAX];
};
#define CTXBPF_REC_HEAD 24u /* bytes before rec[] */

/* Counters (a per-CPU array, summed by profd). */
enum { PYBPF_C_RECORDS, PYBPF_C_RB_FULL, PYBPF_C_NO_PROC, PYBPF_C_WALK_STEPS, PYBPF_C_GO_RECORDS,
       PYBPF_C_CTX_RECORDS, PYBPF_C_N };

/* What a code object is: with its address, tells a reused address from the object it was
 * (the addresses of its names and location table, its first line). The same hash in the
 * program and in pyframes.c. */
static inline __u64 pybpf_ident(__u64 filename, __u64 name, __u64 qualname, __u64 linetable,
                                __u64 firstlineno)
{
    __u64 parts[5] = {filename, name, qualname, linetable, firstlineno};
    __u64 h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 5; i++) {
        h ^= parts[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}
