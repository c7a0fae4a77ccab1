/* modules.c: the registry of ELF files mapped by targets, shared and deduplicated by build-id. */
#include "modules.h"

#include "log.h"
#include "symhelper.h"
#include "symproto.h"
#include "util.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define DELETED_SUFFIX " (deleted)"
/* The vDSO is a few pages (two on x86-64; its data is in the separate [vvar] mapping): a
 * larger [vdso] mapping is not one we understand. */
#define VDSO_MAX_SIZE (1u << 20)

/* A module with what only the registry needs: the list link and the identity of the opened
 * file, which lets module_get skip parsing a file it already holds. */
struct module_priv {
    struct module pub; /* first, so a struct module * is a struct module_priv * */
    struct module_priv *next;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* What the helper read of a file (symproto.h). */
#define elf_info symp_elf_info

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module_priv *registry;
static size_t registry_count;
/* The helper that reads ELF headers for the registry: the file is the target's, so its
 * headers are parsed there, never here. One request at a time (the loop thread, and tests). */
static pthread_mutex_t describe_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symhelper *describer;
static uint64_t next_id = 1;

/* Take a reference unless the count already reached zero: a module whose last reference is
 * being dropped stays in the list until module_unref unlinks it, and must not come back. */
static bool ref_if_live(struct module *m)
{
    int r = __atomic_load_n(&m->refs, __ATOMIC_RELAXED);
    while (r > 0) {
        if (__atomic_compare_exchange_n(&m->refs, &r, r + 1, false, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return true;
    }
    return false;
}

/* Same file as st: device, inode, size and modification time. */
static bool same_stat(const struct module_priv *p, const struct stat *st)
{
    return p->dev == st->st_dev && p->ino == st->st_ino && p->size == st->st_size &&
           p->mtime.tv_sec == st->st_mtim.tv_sec && p->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Registry entry for the file behind st, with a new reference, or NULL. Caller holds the lock. */
static struct module *find_by_stat(const struct stat *st)
{
    for (struct module_priv *p = registry; p; p = p->next)
        if (same_stat(p, st) && ref_if_live(&p->pub))
            return &p->pub;
    return NULL;
}

/* The registry's module for the file behind st, with a new reference, or NULL: a file the
 * registry holds is not read again. */
static struct module *registered(const struct stat *st)
{
    pthread_mutex_lock(&registry_lock);
    struct module *m = find_by_stat(st);
    pthread_mutex_unlock(&registry_lock);
    return m;
}

/* Registry entry with this build-id (or, without one, this file identity), with a new
 * reference, or NULL. Caller holds the lock. */
static struct module *find_same(const struct module_priv *n)
{
    for (struct module_priv *p = registry; p; p = p->next) {
        bool same;
        if (n->pub.build_id_len)
            same = p->pub.build_id_len == n->pub.build_id_len &&
                   !memcmp(p->pub.build_id, n->pub.build_id, n->pub.build_id_len);
        else
            same = !p->pub.build_id_len && p->dev == n->dev && p->ino == n->ino &&
                   p->size == n->size && p->mtime.tv_sec == n->mtime.tv_sec &&
                   p->mtime.tv_nsec == n->mtime.tv_nsec;
        if (same && ref_if_live(&p->pub))
            return &p->pub;
    }
    return NULL;
}

/* Registry entry with the build-id read into info (which must have one), with a new
 * reference, or NULL. */
static struct module *find_build_id(const struct elf_info *info)
{
    struct module_priv key = {.pub.build_id_len = info->build_id_len};
    memcpy(key.pub.build_id, info->build_id, info->build_id_len);
    pthread_mutex_lock(&registry_lock);
    struct module *m = find_same(&key);
    pthread_mutex_unlock(&registry_lock);
    return m;
}

/* The helper's description of a file; see modules.h. */
int module_read_description(const void *msg, size_t len, struct symp_elf_info *info)
{
    struct symp_r rd;
    symp_r_init(&rd, msg, len);
    if (symp_get_u32(&rd) != SYMP_DESCRIPTION || symp_get_elf_info(&rd, info) < 0 ||
        (info->err != 0 && info->err != -ENOEXEC && info->err != -EIO) ||
        (info->err == 0 &&
         (!info->nloads || (info->e_type != ET_EXEC && info->e_type != ET_DYN))))
        return -EPROTO;
    return info->err;
}

/* Have the helper read the ELF headers of the file open on fd (the descriptor is passed, not
 * taken). Returns 0, -ENOEXEC if it is not a loadable ELF object, -EIO if it cannot be read,
 * or -EAGAIN if the helper failed (crashed, hung, or is resting after failures: the file may
 * be tried again later). */
static int describe(int fd, struct elf_info *info)
{
    pthread_mutex_lock(&describe_lock);
    if (!describer) {
        describer = symhelper_create("modules");
        /* The loop thread waits for this one: headers take milliseconds to read, and
         * sampling must not stop for the whole symbolizer_timeout if it hangs. */
        symhelper_set_max_wait(describer, 2 * NS_PER_SEC);
    }
    struct symp_w *w = xmalloc(sizeof(*w));
    uint8_t *buf = xmalloc(SYMP_MAX_MSG);
    symp_w_init(w, SYMP_DESCRIBE);
    int r = -EAGAIN;
    /* A helper killed just before (its end of the socket not closed yet when
     * symhelper_ensure looked) takes the request and answers nothing: ask a new one, once.
     * (A file that crashes the helper costs two starts, then it is given up for.) */
    for (int attempt = 0; attempt < 2; attempt++) {
        r = symhelper_send(describer, w, fd);
        if (r == 0) {
            int rfd;
            ssize_t n = symhelper_recv(describer, buf, &rfd);
            if (rfd >= 0)
                close(rfd);
            if (n == -ECONNRESET && attempt == 0)
                continue;
            if (n <= 0) {
                r = -EAGAIN;
            } else if ((r = module_read_description(buf, (size_t)n, info)) == -EPROTO) {
                symhelper_fail(describer, "sent a malformed description of a file");
                r = -EAGAIN;
            } else {
                symhelper_ok(describer);
            }
        } else {
            if ((r == -EPIPE || r == -ECONNRESET) && attempt == 0)
                continue;
            r = -EAGAIN;
        }
        break;
    }
    if (r == -EAGAIN)
        log_debug("cannot read an ELF file's headers: %s", symhelper_error(describer));
    free(w);
    free(buf);
    pthread_mutex_unlock(&describe_lock);
    return r;
}

void modules_shutdown(void)
{
    pthread_mutex_lock(&describe_lock);
    symhelper_destroy(describer);
    describer = NULL;
    pthread_mutex_unlock(&describe_lock);
}

void modules_helper_error(char *buf, size_t len)
{
    pthread_mutex_lock(&describe_lock);
    struct symhelper_stats st = {0};
    if (describer)
        symhelper_get_stats(describer, &st);
    snprintf(buf, len, "%s", st.last_error);
    pthread_mutex_unlock(&describe_lock);
}

pid_t modules_helper_pid(void)
{
    pthread_mutex_lock(&describe_lock);
    pid_t p = describer ? symhelper_pid(describer) : 0;
    pthread_mutex_unlock(&describe_lock);
    return p;
}

/* Make a module from fd (which it takes over) and what was read from it, or hand back the
 * registry's module for the same build-id (closing fd). Returns a new reference. */
static void free_syms(struct module *m)
{
    for (uint32_t i = 0; i < m->nsyms; i++)
        free(m->syms[i].name);
    free(m->syms);
}

static struct module *publish(int fd, const struct stat *st, const struct elf_info *info,
                              const char *path, bool deleted)
{
    struct module_priv *p = xcalloc(1, sizeof(*p));
    struct module *m = &p->pub;
    m->refs = 1;
    m->path = xstrdup(path);
    const char *slash = strrchr(m->path, '/');
    m->name = slash ? slash + 1 : m->path;
    m->fd = fd;
    m->deleted = deleted;
    memcpy(m->build_id, info->build_id, info->build_id_len);
    m->build_id_len = info->build_id_len;
    m->e_type = (int)info->e_type;
    for (uint32_t i = 0; i < info->nloads && i < MODULE_MAX_LOADS; i++)
        m->loads[i] = (struct module_load){info->loads[i].offset, info->loads[i].vaddr,
                                           info->loads[i].filesz, info->loads[i].memsz,
                                           info->loads[i].flags};
    m->nloads = (int)(info->nloads < MODULE_MAX_LOADS ? info->nloads : MODULE_MAX_LOADS);
    m->py_runtime = info->py_runtime;
    m->py_version = info->py_version;
    m->py_code_type = info->py_code_type;
    m->py_str_type = info->py_str_type;
    if (info->nsyms) {
        m->syms = xcalloc(info->nsyms, sizeof(*m->syms));
        for (uint32_t i = 0; i < info->nsyms; i++)
            m->syms[i] = (struct module_sym){xstrdup(info->syms[i].name), info->syms[i].value};
        m->nsyms = info->nsyms;
    }
    m->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    p->dev = st->st_dev;
    p->ino = st->st_ino;
    p->size = st->st_size;
    p->mtime = st->st_mtim;

    /* Parsing happened outside the lock; another thread may have published the same file
     * meanwhile, so look again before inserting. */
    pthread_mutex_lock(&registry_lock);
    struct module *old = find_same(p);
    if (!old) {
        p->next = registry;
        registry = p;
        registry_count++;
    }
    pthread_mutex_unlock(&registry_lock);
    if (old) {
        close(fd);
        free_syms(m);
        free(m->path);
        free(p);
        return old;
    }
    return m;
}

/* The module for a file the caller trusts to be the right one (map_files, or a path given by
 * a tool): the registry's if it already holds this file, else a new one. Takes over fd. */
static struct module *from_trusted_fd(int fd, const char *path, bool deleted)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = ENOEXEC;
        return NULL;
    }
    struct module *m = registered(&st);
    if (m) {
        close(fd);
        return m;
    }
    struct elf_info info;
    int r = describe(fd, &info);
    if (r < 0) {
        close(fd);
        errno = -r;
        return NULL;
    }
    return publish(fd, &st, &info, path, deleted);
}

/* Whether the build-id bytes of info (a file opened by path) are what process pid has in
 * memory for its mapping at start: 1 yes, 0 no, -errno if that cannot be told (memory not
 * readable, note not loaded). We do not know which segment is mapped at start, so try each
 * PT_LOAD as the one that starts there; a different binary matches under none of them. */
static int mapped_build_id_matches(int pid, uint64_t start, const struct elf_info *info)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    bool loaded = false;
    for (uint32_t i = 0; i < info->nloads; i++)
        loaded |= info->build_id_vaddr >= info->loads[i].vaddr &&
                  info->build_id_vaddr - info->loads[i].vaddr < info->loads[i].filesz;
    if (!loaded)
        return -ENODATA; /* the note is not mapped: nothing to compare with */
    int err = 0;
    for (uint32_t i = 0; i < info->nloads; i++) {
        uint64_t seg = info->loads[i].vaddr & ~(page - 1);
        if (info->e_type == ET_EXEC && seg != start)
            continue; /* not relocated: the segment must sit at its own address */
        uint64_t bias = start - seg;
        uint8_t buf[MODULE_MAX_BUILD_ID];
        struct iovec local = {buf, info->build_id_len};
        struct iovec remote = {(void *)(uintptr_t)(bias + info->build_id_vaddr),
                               info->build_id_len};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n < 0) {
            if (errno != EFAULT)
                err = -errno;
            continue;
        }
        if ((size_t)n == info->build_id_len && !memcmp(buf, info->build_id, (size_t)n))
            return 1;
    }
    return err ? err : 0;
}

/* Open PATH (absolute, as /proc/PID/maps prints it) inside process pid's root, following no
 * symbolic link on the way: the kernel prints the path it resolved when the file was mapped,
 * so a link found there now was put there since. Returns a descriptor or -errno. */
static int open_in_root(int pid, const char *path)
{
    char root[64];
    snprintf(root, sizeof(root), "/proc/%d/root", pid);
    int dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -errno;
    char *copy = xstrdup(path), *save = NULL;
    int fd = -ENOENT;
    for (char *c = strtok_r(copy, "/", &save); c;) {
        char *next = strtok_r(NULL, "/", &save);
        if (!strcmp(c, "..") || !strcmp(c, ".")) {
            fd = -EINVAL;
            break;
        }
        int f = openat(dir, c, (next ? O_PATH | O_DIRECTORY : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
        if (f < 0) {
            fd = errno == ELOOP ? -ESTALE : -errno;
            break;
        }
        if (!next) {
            fd = f;
            break;
        }
        close(dir);
        dir = f;
        c = next;
    }
    close(dir);
    free(copy);
    return fd;
}

/* The module for mapping [start, end) opened through /proc/PID/root/PATH, where map_files is
 * out of reach. It is handed to the helper only if it is the mapped file by its inode (as
 * the maps line printed it; device numbers differ on btrfs and overlayfs), and kept only if
 * its build-id is the one in the target's memory. */
static struct module *from_root_path(int pid, uint64_t start, const char *path, uint64_t inode,
                                     bool deleted)
{
    int fd = open_in_root(pid, path);
    if (fd < 0) {
        errno = -fd;
        return NULL;
    }
    struct stat st;
    struct elf_info info;
    int r = fstat(fd, &st) < 0            ? -errno
            : !S_ISREG(st.st_mode)        ? -ENOEXEC
            : inode && st.st_ino != inode ? -ESTALE
                                          : 0;
    if (r == 0) {
        struct module *m = registered(&st);
        if (m) {
            close(fd);
            return m;
        }
        r = describe(fd, &info);
    }
    if (r == 0 && info.build_id_len) {
        int match = mapped_build_id_matches(pid, start, &info);
        if (match == 0) {
            log_debug("pid %d: %s on disk is not the mapped file (replaced)", pid, path);
            r = -ESTALE;
        } else if (match < 0 && deleted) {
            /* The path is known not to name the mapped file any more and we cannot check
             * this one: do not guess. */
            r = -ESTALE;
        }
    } else if (r == 0 && deleted) {
        r = -ESTALE; /* no build-id to compare, and the mapped file was deleted */
    }
    if (r < 0) {
        close(fd);
        errno = -r;
        return NULL;
    }
    return publish(fd, &st, &info, path, deleted);
}

/* A new memfd holding [img, img + size), for readers that want a file (libdwfl reads the
 * descriptor it is given; nothing ever writes to it again). Returns it, or -errno. */
static int memfd_from(const char *name, const void *img, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, (const char *)img + done, size - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? -errno : -EIO;
            close(fd);
            return e;
        }
        done += (size_t)w;
    }
    return fd;
}

/* The module for the vDSO mapped at [start, end) in pid. It has no file, but its image in
 * the target's memory is a whole ELF object (headers, .dynsym, a build-id note, section
 * headers; only the [vvar] data pages are elsewhere): copy it out with process_vm_readv into
 * a memfd, which the helper reads as it reads files, and libdwfl symbolizes. The image is the
 * target's memory, which it can rewrite: it is parsed in the helper only. Every process of
 * one ABI on a kernel maps the same image, so the registry almost always has it already (the
 * same build-id) and the copy is dropped. */
static struct module *from_vdso(int pid, uint64_t start, uint64_t end)
{
    if (end <= start || end - start > VDSO_MAX_SIZE) {
        errno = ENOEXEC;
        return NULL;
    }
    size_t size = (size_t)(end - start);
    char *img = xmalloc(size);
    struct iovec local = {img, size};
    struct iovec remote = {(void *)(uintptr_t)start, size};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    int r = n < 0 ? -errno : (size_t)n != size ? -EIO : 0;
    int fd = r == 0 ? memfd_from(MODULE_VDSO, img, size) : -1;
    free(img);
    if (r == 0 && fd < 0)
        r = fd;
    struct elf_info info;
    if (r == 0)
        r = describe(fd, &info);
    struct module *m = NULL;
    if (r == 0 && info.build_id_len)
        m = find_build_id(&info);
    if (r == 0 && !m) {
        /* Without a build-id (never seen on Linux) every process gets its own copy: the
         * memfd's identity matches nothing else. */
        struct stat st;
        if (fstat(fd, &st) < 0) {
            r = -errno;
        } else {
            m = publish(fd, &st, &info, MODULE_VDSO, false);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    if (!m)
        errno = -r;
    return m;
}

/* Find or open the module behind mapping [start, end) of pid; see modules.h. */
struct module *module_get(int pid, uint64_t start, uint64_t end, const char *path,
                          uint64_t inode)
{
    if (path && !strcmp(path, MODULE_VDSO))
        return from_vdso(pid, start, end);
    if (!path || path[0] != '/') {
        errno = EINVAL;
        return NULL;
    }
    char *clean = xstrdup(path);
    size_t len = strlen(clean), slen = strlen(DELETED_SUFFIX);
    bool deleted = len > slen && !strcmp(clean + len - slen, DELETED_SUFFIX);
    if (deleted)
        clean[len - slen] = '\0';

    /* map_files is the very file that is mapped, deleted or replaced or in another mount
     * namespace; it needs CAP_SYS_ADMIN (CAP_CHECKPOINT_RESTORE since Linux 5.9). */
    char mf[80];
    snprintf(mf, sizeof(mf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, start, end);
    struct module *m;
    int fd = open(mf, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        m = from_trusted_fd(fd, clean, deleted);
    } else if (errno == ENOENT && kill(pid, 0) < 0 && errno == ESRCH) {
        m = NULL;
        errno = ESRCH;
    } else {
        m = from_root_path(pid, start, clean, inode, deleted);
    }
    int e = errno;
    free(clean);
    errno = e;
    return m;
}

/* Open a module from a path in our own mount namespace; see modules.h. */
struct module *module_open_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    return from_trusted_fd(fd, path, false);
}

/* Take another reference. */
struct module *module_ref(struct module *m)
{
    if (m)
        __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return m;
}

/* Drop a reference; the last one unlinks the module and closes its file. */
void module_unref(struct module *m)
{
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    struct module_priv *p = (struct module_priv *)m;
    pthread_mutex_lock(&registry_lock);
    for (struct module_priv **pp = &registry; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            registry_count--;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    /* The symbolizer holds a reference while it keeps state here, so none can be left. */
    if (m->sym)
        log_err("module %s freed with symbolizer state", m->path);
    close(m->fd);
    free_syms(m);
    free(m->path);
    free(p);
}

bool module_symbol(const struct module *m, const char *name, uint64_t *value)
{
    for (uint32_t i = 0; i < m->nsyms; i++)
        if (!strcmp(m->syms[i].name, name)) {
            *value = m->syms[i].value;
            return true;
        }
    return false;
}

/* File offset -> ELF virtual address through the PT_LOAD headers, executable ones first
 * (where segments share a page, the code's own segment is the right one). */
bool module_offset_to_vaddr(const struct module *m, uint64_t off, uint64_t *vaddr)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < m->nloads; i++) {
            const struct module_load *l = &m->loads[i];
            if (!!(l->flags & PF_X) != (pass == 0))
                continue;
            if (off >= l->offset && off - l->offset < l->filesz) {
                *vaddr = l->vaddr + (off - l->offset);
                return true;
            }
        }
    }
    return false;
}

/* Lowercase hex of the build-id; "" without one. */
void module_build_id_hex(const struct module *m, char *buf, size_t size)
{
    if (!size)
        return;
    buf[0] = '\0';
    if (size < 2 * m->build_id_len + 1)
        return;
    for (size_t i = 0; i < m->build_id_len; i++)
        snprintf(buf + 2 * i, 3, "%02x", m->build_id[i]);
}

/* Number of modules in the registry. */
size_t modules_count(void)
{
    pthread_mutex_lock(&registry_lock);
    size_t n = registry_count;
    pthread_mutex_unlock(&registry_lock);
    return n;
}
