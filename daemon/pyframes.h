/* pyframes.h: the Python frames of a CPython 3.11-3.14 process, read from its memory.
 *
 * 3.11+ keeps each thread's Python frames as _PyInterpreterFrame structs in per-thread data
 * stack chunks (generators' in their own objects), linked innermost first from the thread
 * state: tstate->cframe->current_frame in 3.11 and 3.12, tstate->current_frame in 3.13 and
 * 3.14. One C-level call of _PyEval_EvalFrameDefault runs several of them: the first one it
 * ran is marked (3.11: the frame's is_entry; 3.12+: a shim frame below it, owned by the C
 * stack or, 3.14, the interpreter),
 * so the chain splits into one group per native evaluation frame, innermost first, which is
 * how they interleave with the native stack.
 *
 * Everything here is read with process_vm_readv from a process that keeps running (a thread
 * sampled from the kernel's copy or from /proc is not stopped): a chain can be torn. Every
 * pointer is followed only after checking what it points to (a code object's type is
 * PyCode_Type's address; lengths and counts are bounded), and a chain that fails a check is
 * reported as torn, never guessed at. Nothing here allocates per frame. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where the fields an out-of-process reader needs are, for one CPython minor version
 * (x86-64, release builds; measured with offsetof against each version's internal headers:
 * Debian's 3.11.2 and pyenv's 3.11.7 agree). */
struct py_layout {
    unsigned version;           /* 0x030b0000 ... 0x030e0000 */
    unsigned rt_interp_head;    /* _PyRuntimeState.interpreters.head */
    unsigned interp_next;       /* PyInterpreterState.next */
    unsigned interp_threads;    /* PyInterpreterState.threads.head */
    unsigned ts_next;           /* PyThreadState.next */
    unsigned ts_native_tid;     /* PyThreadState.native_thread_id */
    unsigned ts_frame;          /* .cframe (3.11, 3.12) or .current_frame (3.13) */
    int cframe_current;         /* _PyCFrame.current_frame, or -1 where there is no cframe */
    unsigned fr_code;           /* _PyInterpreterFrame.f_code (3.13: f_executable) */
    unsigned fr_previous;
    unsigned fr_instr;          /* .prev_instr (3.11, 3.12: the last instruction run) or
                                   .instr_ptr (3.13: the one running or next) */
    unsigned fr_owner;          /* a byte */
    unsigned fr_owner_max;      /* its largest value; PY_OWNED_BY_SHIM and above: a shim */
    unsigned ptr_tag;           /* low bits of f_executable and f_funcobj that are not the
                                   pointer's (3.14: a _PyStackRef's tag), cleared */
    int fr_is_entry;            /* a byte (3.11), or -1 */
    unsigned fr_func;           /* .f_func (3.11) or .f_funcobj: the function object */
    unsigned fr_size;           /* bytes read of a frame: every field above */
    unsigned fn_code, fn_module; /* PyFunctionObject.func_code, .func_module */
    unsigned co_firstlineno;    /* int */
    unsigned co_filename, co_name, co_qualname, co_linetable; /* object pointers */
    unsigned co_code_adaptive;  /* where the bytecode starts, in the code object */
    unsigned co_size;           /* bytes read of a code object's head */
    unsigned str_ascii;         /* sizeof(PyASCIIObject): a compact ASCII string's text */
    unsigned str_compact;       /* sizeof(PyCompactUnicodeObject): other compact strings' */
};

/* The layout of version hex (Py_Version: PY_VERSION_HEX), or NULL if not one of 3.11-3.14. */
const struct py_layout *py_layout_of(unsigned long version_hex);

/* _PyInterpreterFrame.owner values. */
#define PY_OWNED_BY_THREAD 0
#define PY_OWNED_BY_GENERATOR 1
#define PY_OWNED_BY_FRAME_OBJECT 2
/* 3.12+: the shim frame an evaluation call starts with (3.12, 3.13: FRAME_OWNED_BY_CSTACK;
 * 3.14: FRAME_OWNED_BY_INTERPRETER, and 4 FRAME_OWNED_BY_CSTACK, also no code's frame). */
#define PY_OWNED_BY_SHIM 3

/* A CPython runtime in a process. Not to be copied: lay may point into it. */
struct py_runtime {
    pid_t pid;
    const struct py_layout *lay; /* the table's, or own */
    struct py_layout own;        /* 3.13+: the table's with what its debug offsets say */
    unsigned long version_hex;
    uint64_t runtime;   /* address of _PyRuntime */
    uint64_t code_type; /* address of PyCode_Type: what a code object's ob_type must be */
    uint64_t str_type;  /* address of PyUnicode_Type: a str's */
    bool free_threaded; /* a free-threaded build (3.13t, 3.14t), which this file cannot read */
};

/* Set up rt for process pid: the addresses of _PyRuntime, Py_Version, PyCode_Type and
 * PyUnicode_Type in its
 * memory (symbols of the interpreter's binary or libpython, plus its load bias). Reads
 * Py_Version. Returns 0, -ENOTSUP (a version this file cannot read: rt->version_hex says
 * which) or -errno of the read. */
int py_runtime_init(struct py_runtime *rt, pid_t pid, uint64_t runtime, uint64_t version_addr,
                    uint64_t code_type, uint64_t str_type);

/* One Python frame: its code object and where in its bytecode it is. */
struct py_frame {
    uint64_t code;      /* address of the code object */
    uint64_t ident;     /* what the code object was then (its names' and table's addresses,
                           first line): with code, tells a reused address from the object */
    uint64_t func;      /* its function object (0 if none), for the module's name */
    uint32_t instr;     /* code unit (2 bytes) it is at, for the location table */
    bool entry;         /* the first frame its native _PyEval_EvalFrameDefault call ran: the
                           frames from here outwards belong to the next evaluation call */
};

/* The address of thread tid's PyThreadState (0 if it has none: not a Python thread, or
 * not yet), or -errno of a read. *hint: an address it had before (0 if none), checked
 * first; updated. */
int64_t py_thread_state(const struct py_runtime *rt, pid_t tid, uint64_t *hint);

/* Most frames one read returns. */
#define PY_READ_MAX 128

/* The Python frames of the thread whose state is at tstate, innermost first: at most max
 * (and PY_READ_MAX),
 * *truncated set when there were more. Returns how many, or -errno: -EAGAIN when the chain
 * was torn (a frame or its code object failed a check: the thread moved on while it was
 * read), -EFAULT when memory could not be read. */
int py_read_frames(const struct py_runtime *rt, uint64_t tstate, struct py_frame *out,
                   size_t max, bool *truncated);

/* What a code object names: function (qualified where the version has it), file, the
 * line of its definition, and its location table (to map an instruction to a line). */
struct py_code {
    uint64_t ident;     /* as py_frame's */
    char module[128];   /* the function's __module__ (read through func), "" if unknown */
    char name[128];
    char qualname[256];
    char filename[512];
    int firstlineno;
    uint8_t *linetable; /* malloc'd copy */
    size_t linetable_len;
};
/* Read code object `code` (and, with func non-zero, the module name of the function object
 * that ran it). Returns 0, -EAGAIN (not a code object any more), or -errno. */
int py_read_code(const struct py_runtime *rt, uint64_t code, uint64_t func,
                 struct py_code *out);
void py_code_free(struct py_code *c);
/* The line of code unit instr in c (its location table), or -1 if it has none. */
int py_code_line(const struct py_code *c, uint32_t instr);
