/* fuzz_pyframes.c: daemon/pyframes.c on memory a target controls. A CPython process's
 * runtime, thread states, frames, code objects, strings and location tables are its own
 * memory, which profd reads with process_vm_readv: here that memory is the input, laid out in
 * this process, read through the same calls (pid = our own). So that the fuzzer can build
 * real chains, every 8-byte word of the input below its length is taken as an offset into it
 * and turned into the address there (the rest stay as they are: wild pointers, which the
 * reads must survive). The first bytes choose the version and which object types to trust.
 * Checked: nothing reads out of bounds, loops, or returns more frames than asked for; names
 * are NUL-terminated; a line is -1 (none) or a line number. */
#include "fuzz.h"

#include <errno.h>
#include <unistd.h>

#include "pyframes.h"

#define MAXLEN (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_in in = {data, size};
    static const unsigned long versions[] = {0x030b02f0, 0x030c01f0, 0x030d00f0, 0x030a0000};
    unsigned long version = versions[fuzz_u8(&in) % 4];
    uint32_t code_off = fuzz_u8(&in) * 8u, str_off = fuzz_u8(&in) * 8u;
    uint32_t tid = fuzz_u8(&in);
    size_t len = in.n > MAXLEN ? MAXLEN : in.n;
    /* The "memory": the rest of the input, 8-byte aligned, plus Py_Version's word. */
    size_t words = (len + 7) / 8 + 1;
    uint64_t *mem = calloc(words, 8);
    FUZZ_ASSERT(mem);
    memcpy(mem, in.p, len);
    uint64_t base = (uint64_t)(uintptr_t)mem;
    for (size_t i = 0; i + 1 < words; i++)
        if (mem[i] && mem[i] < len)
            mem[i] = base + mem[i];
    mem[words - 1] = version;
    struct py_runtime rt;
    int r = py_runtime_init(&rt, getpid(), base, base + (words - 1) * 8,
                            code_off < len ? base + code_off : 1,
                            str_off < len ? base + str_off : 1);
    if (r == 0) {
        uint64_t hint = 0;
        int64_t ts = py_thread_state(&rt, (pid_t)tid, &hint);
        FUZZ_ASSERT(ts >= -4095);
        /* Any address in the memory may be taken for a thread state: try a few. */
        uint64_t starts[3] = {ts > 0 ? (uint64_t)ts : base, base + (len / 2 & ~7ull),
                              base + 8};
        for (int s = 0; s < 3; s++) {
            struct py_frame fr[16];
            bool truncated;
            int n = py_read_frames(&rt, starts[s], fr, 16, &truncated);
            FUZZ_ASSERT(n <= 16);
            FUZZ_ASSERT(n >= 0 || n == -EAGAIN || n == -EFAULT || n == -ESRCH);
            for (int i = 0; i < n; i++) {
                struct py_code c;
                if (py_read_code(&rt, fr[i].code, fr[i].func, &c) == 0) {
                    FUZZ_ASSERT(memchr(c.name, 0, sizeof(c.name)));
                    FUZZ_ASSERT(memchr(c.qualname, 0, sizeof(c.qualname)));
                    FUZZ_ASSERT(memchr(c.filename, 0, sizeof(c.filename)));
                    FUZZ_ASSERT(memchr(c.module, 0, sizeof(c.module)));
                    FUZZ_ASSERT(py_code_line(&c, fr[i].instr) >= -1);
                    py_code_free(&c);
                }
            }
        }
    }
    /* The location table parser alone, on the raw input. */
    struct py_code c = {.firstlineno = (int)(size & 0xffff),
                        .linetable = (uint8_t *)(uintptr_t)data,
                        .linetable_len = size};
    for (uint32_t instr = 0; instr < 64; instr += 7)
        FUZZ_ASSERT(py_code_line(&c, instr) >= -1);
    free(mem);
    return 0;
}
