/* fuzz_unwind.c: libFuzzer target for the unwinder on hostile stacks and unwind tables
 * (daemon/unwind.c: the page cache, eh_build's reading of ELF headers and .eh_frame_hdr,
 * the frame-pointer guess; then libunwind's parsing of .eh_frame and CFI through them).
 *
 * Input: byte 0 holds flags (bit 0: all registers, as at a ptrace stop, else only rip and
 * rsp, as for a thread blocked in a system call; bit 1: the same file mapped a second time
 * higher up; bit 2: the image is also the vDSO), then rip's offset in the image (16 bits),
 * rsp's offset in the stack copy (16 bits), rbp and rax (64 bits each), orig_rax (16 bits),
 * the image's length (16 bits), the image (the bytes of an ELF object as loaded: headers,
 * .eh_frame_hdr, .eh_frame, code), and the rest is the stack copy. The image is mapped as
 * a file at a fixed address, the stack as [stack]; the unwinder reads memory only through
 * read_mem, which here serves the image and aborts on any read outside the file-backed
 * mappings it was given. The unwind must end (libFuzzer's -timeout catches a hang), return
 * at most the frames asked for, start at rip, read no stack outside the copy (ASan: the
 * copy is allocated to its exact size), and be as sound again from warm caches and after a
 * flush.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_unwind-libfuzzer -max_len=16384 -timeout=10 \
 *       /tmp/unwind-new tests/fuzz/corpus/unwind
 *
 * The seeds hold the loaded bytes of small binaries built for it, with stacks that unwind
 * through them. The plain build replays tests/fuzz/corpus/unwind under `meson test --suite
 * fuzz`. */
#include "fuzz.h"

#include <errno.h>

#include "log.h"
#include "maps.h"
#include "unwind.h"

#define IMAGE_BASE 0x555555554000ull
#define SECOND_BASE 0x7f0000000000ull
#define STACK_BASE 0x7ffd00010000ull /* the copy's first byte (sp - red zone, usually) */

static struct {
    const uint8_t *image;
    size_t image_len;
    uint64_t image_end; /* page-rounded */
    bool second;
    uint64_t reads;
} as;

/* The fake address space: file-backed memory is the image (zeroes after its bytes up to
 * the page end), at IMAGE_BASE and, mapped again, at SECOND_BASE. */
static ssize_t read_mem(pid_t pid, void *dst, uint64_t addr, size_t len)
{
    FUZZ_ASSERT(pid == 4242);
    FUZZ_ASSERT(len > 0 && len <= 4096);
    as.reads++;
    uint64_t base = addr >= SECOND_BASE && as.second ? SECOND_BASE : IMAGE_BASE;
    uint64_t size = as.image_end - IMAGE_BASE;
    /* The unwinder asks only for memory of the mappings it was given. */
    FUZZ_ASSERT(addr >= base && addr - base < size && len <= size - (addr - base));
    uint64_t off = addr - base;
    uint8_t *d = dst;
    for (size_t i = 0; i < len; i++)
        d[i] = off + i < as.image_len ? as.image[off + i] : 0;
    return (ssize_t)len;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    log_init("fuzz_unwind", LOG_LVL_ERR);
    return 0;
}

static struct map_entry entry(uint64_t start, uint64_t end, uint32_t prot, uint64_t pgoff,
                              const char *path, uint64_t inode)
{
    return (struct map_entry){.start = start, .end = end, .prot = prot, .pgoff = pgoff,
                              .path = (char *)path, .inode = inode, .dev_major = 8,
                              .dev_minor = 1};
}

/* What every unwind must be: frames within max, starting at rip, none 0; the stack read only
 * inside the copy; the registers as they were (the leaf fallback restores them). */
static void check_unwind(const struct snapshot *s, const uint64_t *ips, int k, int max,
                         enum unwind_end end, uint16_t rip_off, uint16_t sp_off)
{
    FUZZ_ASSERT(k >= 0 && k <= max);
    FUZZ_ASSERT(end == UNWIND_COMPLETE || end == UNWIND_TRUNCATED || end == UNWIND_TOO_DEEP);
    FUZZ_ASSERT(end != UNWIND_TOO_DEEP || k == max);
    if (k > 0)
        FUZZ_ASSERT(ips[0] == s->regs.rip);
    for (int i = 0; i < k; i++)
        FUZZ_ASSERT(ips[i] != 0);
    FUZZ_ASSERT(!s->max_read || (s->max_read > s->base && s->max_read - s->base <= s->len));
    FUZZ_ASSERT(s->regs.rip == IMAGE_BASE + rip_off && s->regs.rsp == STACK_BASE + sp_off);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 18)
        return 0;
    struct fuzz_in in = {data, size};
    uint8_t flags = fuzz_u8(&in);
    uint16_t rip_off = fuzz_u16(&in), sp_off = fuzz_u16(&in);
    uint64_t rbp = fuzz_u64(&in), rax = fuzz_u64(&in);
    uint16_t orig_rax = fuzz_u16(&in);
    size_t image_len;
    as.image = fuzz_bytes(&in, fuzz_u16(&in), &image_len);
    as.image_len = image_len;
    as.image_end = IMAGE_BASE + ((image_len + 4095) & ~4095ull);
    if (as.image_end == IMAGE_BASE)
        as.image_end += 4096;
    as.second = flags & 2;
    as.reads = 0;
    size_t stack_len;
    const uint8_t *stack = fuzz_bytes(&in, in.n, &stack_len);

    /* The maps, sorted: the image (and the vDSO), the second mapping, the stack. */
    struct map_entry v[4];
    size_t n = 0;
    bool vdso = flags & 4;
    v[n++] = vdso ? entry(IMAGE_BASE, as.image_end, MAP_PROT_R | MAP_PROT_X, 0, "[vdso]", 0)
                  : entry(IMAGE_BASE, as.image_end, MAP_PROT_R | MAP_PROT_X, 0, "/fuzz/obj", 77);
    if (as.second)
        v[n++] = entry(SECOND_BASE, SECOND_BASE + (as.image_end - IMAGE_BASE),
                       MAP_PROT_R | MAP_PROT_X, 0, vdso ? "[vdso]" : "/fuzz/obj", vdso ? 0 : 77);
    uint64_t stack_end = (STACK_BASE + stack_len + 4095) & ~4095ull;
    if (stack_end == STACK_BASE)
        stack_end += 4096;
    v[n++] = entry(STACK_BASE - 4096, stack_end, MAP_PROT_R | MAP_PROT_W, 0, "[stack]", 0);
    struct maps maps = {.v = v, .n = n};

    /* The copy, allocated to its exact size. */
    uint8_t *copy = malloc(stack_len ? stack_len : 1);
    FUZZ_ASSERT(copy);
    memcpy(copy, stack, stack_len);
    struct snapshot s = {
        .full_regs = flags & 1,
        .base = STACK_BASE,
        .len = stack_len,
        .cap = stack_len,
        .data = copy,
    };
    s.regs.rip = IMAGE_BASE + rip_off;
    s.regs.rsp = STACK_BASE + sp_off;
    s.regs.rbp = flags & 8 ? STACK_BASE + (rbp & 0xffff) : rbp;
    s.regs.rax = rax;
    s.regs.orig_rax = orig_rax;

    struct unwinder u;
    FUZZ_ASSERT(unwinder_init(&u, 4242, &maps) == 0);
    u.read_mem = read_mem;
    uint64_t ips[UNWIND_MAX_FRAMES], again[UNWIND_MAX_FRAMES];
    int max = 1 + (flags >> 4) * 17; /* 1 to 256 frames */
    enum unwind_end end, end2;
    int k = unwinder_unwind(&u, &s, ips, max, &end);
    FUZZ_ASSERT(k >= 0 && k <= max);
    if (getenv("FUZZ_VERBOSE")) {
        fprintf(stderr, "%d frames, end %d, %llu reads:", k, (int)end,
                (unsigned long long)as.reads);
        for (int i = 0; i < k; i++)
            fprintf(stderr, " %#llx", (unsigned long long)ips[i]);
        fprintf(stderr, "\n");
    }
    check_unwind(&s, ips, k, max, end, rip_off, sp_off);

    /* Again, from warm caches (libunwind's, the page cache, the tables), and after a flush:
     * as sound. Not asserted to be the same frames: on malformed CFI, libunwind's step from
     * its register-state cache can end where a fresh parse of the same CFI steps on to a
     * garbage address (third-party; see tests/README.md's "Fuzzing"). */
    s.bp_tried = false;
    int k2 = unwinder_unwind(&u, &s, again, max, &end2);
    if (getenv("FUZZ_VERBOSE")) {
        fprintf(stderr, "again: %d frames, end %d:", k2, (int)end2);
        for (int i = 0; i < k2; i++)
            fprintf(stderr, " %#llx", (unsigned long long)again[i]);
        fprintf(stderr, "\n");
    }
    check_unwind(&s, again, k2, max, end2, rip_off, sp_off);
    unwinder_flush(&u);
    s.bp_tried = false;
    k2 = unwinder_unwind(&u, &s, again, max, &end2);
    check_unwind(&s, again, k2, max, end2, rip_off, sp_off);
    unwinder_finish(&u);
    free(copy);
    return 0;
}
