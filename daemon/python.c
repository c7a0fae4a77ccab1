/* python.c: a target's CPython runtime (see python.h). */
#include "python.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "maps.h"
#include "modules.h"
#include "util.h"

void py_target_detect(struct py_target *py, pid_t pid, const struct maps *maps)
{
    for (size_t i = 0; i < maps->n; i++) {
        const struct map_entry *e = &maps->v[i];
        const struct module *m = e->mod;
        if (!m || !m->py_runtime || !(e->prot & MAP_PROT_X))
            continue;
        if (m->id == py->module_id)
            return; /* the one found before */
        uint64_t runtime = map_vaddr_addr(e, m->py_runtime);
        uint64_t version = m->py_version ? map_vaddr_addr(e, m->py_version) : 0;
        uint64_t code_type = m->py_code_type ? map_vaddr_addr(e, m->py_code_type) : 0;
        uint64_t str_type = m->py_str_type ? map_vaddr_addr(e, m->py_str_type) : 0;
        py->module_id = m->id;
        if (!m->py_version) {
            /* Py_Version appeared in 3.11: an older CPython. */
            py->status = PYS_UNSUPPORTED;
            snprintf(py->why, sizeof(py->why), "a CPython before 3.11 in %s (no Py_Version): "
                     "profd reads 3.11 to 3.14; its native stacks are sampled", m->name);
            log_warn("pid %d: %s", pid, py->why);
            return;
        }
        int r = runtime && version && code_type && str_type
                    ? py_runtime_init(&py->rt, pid, runtime, version, code_type, str_type)
                    : -EFAULT;
        if (r == 0) {
            py->status = PYS_OK;
            log_info("pid %d: CPython %lu.%lu in %s: Python frames are read", pid,
                     (py->rt.version_hex >> 24) & 0xff, (py->rt.version_hex >> 16) & 0xff,
                     m->path);
            return;
        }
        py->status = PYS_UNSUPPORTED;
        if (r == -ENOTSUP && py->rt.free_threaded)
            snprintf(py->why, sizeof(py->why), "a free-threaded CPython (3.13t or later) in "
                     "%s: its objects' layout is not the one profd reads; its native stacks "
                     "are sampled", m->name);
        else if (r == -ENOTSUP)
            snprintf(py->why, sizeof(py->why), "CPython %lu.%lu in %s: profd reads 3.11 to "
                     "3.14; its native stacks are sampled",
                     (py->rt.version_hex >> 24) & 0xff, (py->rt.version_hex >> 16) & 0xff,
                     m->name);
        else
            snprintf(py->why, sizeof(py->why), "the CPython runtime in %s cannot be read (%s); "
                     "its native stacks are sampled", m->name, strerror(-r));
        log_warn("pid %d: %s", pid, py->why);
        return;
    }
}

void py_target_finish(struct py_target *py)
{
    for (uint32_t i = 0; i < py->ncodes; i++) {
        struct py_code_entry *e = &py->chunks[i / PY_CODE_CHUNK][i % PY_CODE_CHUNK];
        free(e->module);
        free(e->qualname);
        free(e->filename);
        free(e->linetable);
    }
    for (uint32_t i = 0; i < (py->ncodes + PY_CODE_CHUNK - 1) / PY_CODE_CHUNK; i++)
        free(py->chunks[i]);
    free(py->chunks);
    u64map_finish(&py->by_code);
    memset(py, 0, sizeof(*py));
}

static int capture(struct py_target *py, pid_t tid, uint64_t *tstate, struct py_frame *frames);

int py_capture(struct py_target *py, pid_t tid, uint64_t *tstate, struct py_frame *frames)
{
    if (py->status != PYS_OK)
        return 0;
    uint64_t t0 = thread_cpu_ns();
    int n = capture(py, tid, tstate, frames);
    py->captures++;
    py->capture_ns += thread_cpu_ns() - t0;
    return n;
}

static int capture(struct py_target *py, pid_t tid, uint64_t *tstate, struct py_frame *frames)
{
    int64_t ts = py_thread_state(&py->rt, tid, tstate);
    if (ts <= 0) {
        py->unreadable += ts < 0;
        return 0;
    }
    bool truncated;
    int n = py_read_frames(&py->rt, (uint64_t)ts, frames, PY_MAX_FRAMES, &truncated);
    if (n == -EAGAIN) {
        py->torn++;
        return 0;
    }
    if (n < 0) {
        py->unreadable++;
        return 0;
    }
    return n;
}

const struct py_code_entry *py_code_get(const struct py_target *py, uint32_t id)
{
    if (id >= __atomic_load_n(&py->ncodes, __ATOMIC_ACQUIRE))
        return NULL;
    return &py->chunks[id / PY_CODE_CHUNK][id % PY_CODE_CHUNK];
}

/* The id of the code object a frame ran: the one seen before at its address, unless that
 * address is another object's now; else a new entry, named now. UINT32_MAX if it cannot be
 * named. */
static uint32_t code_id(struct py_target *py, const struct py_frame *f)
{
    size_t k = (size_t)(uintptr_t)u64map_get(&py->by_code, f->code);
    if (k) {
        const struct py_code_entry *e = py_code_get(py, (uint32_t)(k - 1));
        if (e && e->ident == f->ident)
            return (uint32_t)(k - 1);
    }
    if (py->ncodes >= PY_MAX_CODES)
        return UINT32_MAX;
    struct py_code c;
    if (py_read_code(&py->rt, f->code, f->func, &c) < 0 || c.ident != f->ident) {
        py_code_free(&c);
        py->codes_failed++;
        return UINT32_MAX;
    }
    uint32_t id = py->ncodes;
    if (id % PY_CODE_CHUNK == 0) {
        py->chunks = xrealloc(py->chunks, (id / PY_CODE_CHUNK + 1) * sizeof(*py->chunks));
        py->chunks[id / PY_CODE_CHUNK] = xcalloc(PY_CODE_CHUNK, sizeof(struct py_code_entry));
        py->code_bytes += PY_CODE_CHUNK * sizeof(struct py_code_entry) + sizeof(void *);
    }
    struct py_code_entry *e = &py->chunks[id / PY_CODE_CHUNK][id % PY_CODE_CHUNK];
    e->code = f->code;
    e->ident = c.ident;
    e->module = xstrdup(c.module);
    e->qualname = xstrdup(c.qualname[0] ? c.qualname : c.name);
    e->filename = xstrdup(c.filename);
    e->firstlineno = c.firstlineno;
    e->linetable = c.linetable; /* taken over */
    e->linetable_len = c.linetable_len;
    py->code_bytes += c.linetable_len + strlen(e->module) + strlen(e->qualname) +
                      strlen(e->filename) + 3;
    __atomic_store_n(&py->ncodes, id + 1, __ATOMIC_RELEASE);
    u64map_put(&py->by_code, f->code, (void *)(uintptr_t)(id + 1));
    return id;
}

size_t py_encode(struct py_target *py, const struct py_frame *frames, int nframes,
                 uint64_t *ips, size_t n, size_t cap)
{
    size_t start = n;
    for (int i = 0; i < nframes && n < cap; i++) {
        uint32_t id = code_id(py, &frames[i]);
        if (id == UINT32_MAX)
            return start; /* all or nothing: a gap would misplace the rest */
        ips[n++] = PY_TAG | (frames[i].entry ? PY_ENTRY : 0) | ((uint64_t)id << 24) |
                   (frames[i].instr & 0xffffffu);
    }
    if (n > start)
        py->samples++;
    return n;
}

size_t py_target_memory(const struct py_target *py)
{
    return py->code_bytes + py->by_code.cap * 16;
}
