/* fuzz_procstatus.c: libFuzzer target for the /proc/PID/status reader (common/procstatus.c).
 *
 * Input: the status text, any bytes (a process chooses its Name; everything else is the
 * kernel's, but the reader must not trust that). procstatus_parse must never read past the
 * text, a field is never both present and malformed, and the result depends only on the
 * complete lines (a last line without its newline counts for nothing). procstatus_read_fd on
 * a memfd holding the same bytes must parse the same; the same text with its fields
 * re-printed from what was parsed must parse to the same values.
 *
 * Fuzzing with libFuzzer (see tests/README.md's "Fuzzing"):
 *
 *   build-fuzz/tests/fuzz/fuzz_procstatus-libfuzzer -max_len=4096 \
 *       -dict=tests/fuzz/procstatus.dict /tmp/procstatus-new tests/fuzz/corpus/procstatus
 *
 * The plain build replays tests/fuzz/corpus/procstatus under `meson test --suite fuzz`. */
#include "fuzz.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

#include "procstatus.h"
#include "util.h"

static bool same(const struct procstatus *a, const struct procstatus *b)
{
    return !memcmp(a, b, sizeof(*a));
}

/* The values of a parse, printed as the kernel prints them. */
static void reprint(const struct procstatus *st, struct strbuf *sb)
{
    if (procstatus_has(st, PS_STATE))
        strbuf_printf(sb, "State:\t%c (x)\n", st->state);
    if (procstatus_has(st, PS_TGID))
        strbuf_printf(sb, "Tgid:\t%d\n", st->tgid);
    if (procstatus_has(st, PS_PID))
        strbuf_printf(sb, "Pid:\t%d\n", st->pid);
    if (procstatus_has(st, PS_PPID))
        strbuf_printf(sb, "PPid:\t%d\n", st->ppid);
    if (procstatus_has(st, PS_TRACERPID))
        strbuf_printf(sb, "TracerPid:\t%d\n", st->tracer_pid);
    if (procstatus_has(st, PS_UID))
        strbuf_printf(sb, "Uid:\t%u\t%u\t%u\t%u\n", st->uid[0], st->uid[1], st->uid[2],
                      st->uid[3]);
    if (procstatus_has(st, PS_GID))
        strbuf_printf(sb, "Gid:\t%u\t%u\t%u\t%u\n", st->gid[0], st->gid[1], st->gid[2],
                      st->gid[3]);
    if (procstatus_has(st, PS_SHDPND))
        strbuf_printf(sb, "ShdPnd:\t%016" PRIx64 "\n", st->sig_shd);
    if (procstatus_has(st, PS_SIGIGN))
        strbuf_printf(sb, "SigIgn:\t%016" PRIx64 "\n", st->sig_ign);
    if (procstatus_has(st, PS_SIGCGT))
        strbuf_printf(sb, "SigCgt:\t%016" PRIx64 "\n", st->sig_cgt);
    if (procstatus_has(st, PS_CAPPRM))
        strbuf_printf(sb, "CapPrm:\t%016" PRIx64 "\n", st->cap_prm);
    if (procstatus_has(st, PS_CAPEFF))
        strbuf_printf(sb, "CapEff:\t%016" PRIx64 "\n", st->cap_eff);
    if (procstatus_has(st, PS_VCSW))
        strbuf_printf(sb, "voluntary_ctxt_switches:\t%" PRIu64 "\n", st->vcsw);
    if (procstatus_has(st, PS_NVCSW))
        strbuf_printf(sb, "nonvoluntary_ctxt_switches:\t%" PRIu64 "\n", st->nvcsw);
    if (procstatus_has(st, PS_VMSIZE))
        strbuf_printf(sb, "VmSize:\t%8" PRIu64 " kB\n", st->vm_size_kb);
    if (procstatus_has(st, PS_VMEXE))
        strbuf_printf(sb, "VmExe:\t%8" PRIu64 " kB\n", st->vm_exe_kb);
    if (procstatus_has(st, PS_VMLIB))
        strbuf_printf(sb, "VmLib:\t%8" PRIu64 " kB\n", st->vm_lib_kb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 18)
        return 0;
    const char *text = (const char *)data;
    struct procstatus st;
    int n = procstatus_parse(text, size, &st);
    FUZZ_ASSERT(n == __builtin_popcount(st.have));
    FUZZ_ASSERT(!(st.have & st.bad));
    FUZZ_ASSERT(st.have >> PS_NFIELDS == 0 && st.bad >> PS_NFIELDS == 0);
    FUZZ_ASSERT(memchr(st.name, '\0', sizeof(st.name)));
    if (procstatus_has(&st, PS_NSPID))
        FUZZ_ASSERT(st.nspid_depth >= 1 && st.nspid >= 0);
    /* Values count only where have says so (callers check procstatus_has); those must be
     * in range. */
    FUZZ_ASSERT(!procstatus_has(&st, PS_TGID) || st.tgid >= 0);
    FUZZ_ASSERT(!procstatus_has(&st, PS_PID) || st.pid >= 0);
    FUZZ_ASSERT(!procstatus_has(&st, PS_PPID) || st.ppid >= 0);
    FUZZ_ASSERT(!procstatus_has(&st, PS_TRACERPID) || st.tracer_pid >= 0);

    /* Only complete lines count. */
    const char *last = NULL;
    for (size_t i = size; i-- > 0;)
        if (text[i] == '\n') {
            last = text + i;
            break;
        }
    struct procstatus cut;
    procstatus_parse(text, last ? (size_t)(last - text) + 1 : 0, &cut);
    FUZZ_ASSERT(same(&st, &cut));

    /* The same bytes in a file. */
    if (size > 0) {
        int fd = fuzz_memfd(data, size);
        struct strbuf sb = {0};
        struct procstatus fromfd;
        int r = procstatus_read_fd(fd, &sb, &fromfd);
        FUZZ_ASSERT(r == 0);
        FUZZ_ASSERT(same(&st, &fromfd));
        /* Again through the grown buffer: the same. */
        r = procstatus_read_fd(fd, &sb, &fromfd);
        FUZZ_ASSERT(r == 0 && same(&st, &fromfd));
        strbuf_finish(&sb);
        close(fd);
    }

    /* What was parsed, printed back, parses to the same values. */
    struct strbuf sb = {0};
    reprint(&st, &sb);
    struct procstatus again;
    procstatus_parse(sb.buf ? sb.buf : "", sb.len, &again);
    uint32_t numeric = st.have & ~(1u << PS_NAME | 1u << PS_NGROUPS | 1u << PS_NSPID);
    FUZZ_ASSERT(again.have == numeric);
    FUZZ_ASSERT(again.state == (procstatus_has(&st, PS_STATE) ? st.state : 0));
    FUZZ_ASSERT(!memcmp(again.uid, procstatus_has(&st, PS_UID) ? st.uid : again.uid,
                        sizeof(st.uid)));
    FUZZ_ASSERT(again.sig_ign == (procstatus_has(&st, PS_SIGIGN) ? st.sig_ign : 0));
    FUZZ_ASSERT(again.sig_shd == (procstatus_has(&st, PS_SHDPND) ? st.sig_shd : 0));
    FUZZ_ASSERT(again.cap_prm == (procstatus_has(&st, PS_CAPPRM) ? st.cap_prm : 0));
    FUZZ_ASSERT(again.cap_eff == (procstatus_has(&st, PS_CAPEFF) ? st.cap_eff : 0));
    FUZZ_ASSERT(again.vcsw == (procstatus_has(&st, PS_VCSW) ? st.vcsw : 0));
    FUZZ_ASSERT(again.vm_size_kb == (procstatus_has(&st, PS_VMSIZE) ? st.vm_size_kb : 0));
    FUZZ_ASSERT(again.vm_exe_kb == (procstatus_has(&st, PS_VMEXE) ? st.vm_exe_kb : 0));
    FUZZ_ASSERT(again.vm_lib_kb == (procstatus_has(&st, PS_VMLIB) ? st.vm_lib_kb : 0));
    strbuf_finish(&sb);
    return 0;
}
