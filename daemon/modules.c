/* modules.c: the registry of ELF files mapped by targets, shared and deduplicated by build-id. */
#include "modules.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
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

/* What read_elf() learns from a file. */
struct elf_info {
    int e_type;
    uint8_t build_id[MODULE_MAX_BUILD_ID];
    size_t build_id_len;
    uint64_t build_id_vaddr; /* p_vaddr of the build-id bytes, if a PT_NOTE holds them */
    struct module_load loads[MODULE_MAX_LOADS];
    int nloads;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module_priv *registry;
static size_t registry_count;
static pthread_once_t elf_once = PTHREAD_ONCE_INIT;

/* libelf refuses every call until the version is set, once per process. */
static void elf_init(void)
{
    elf_version(EV_CURRENT);
}

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

/* Find the NT_GNU_BUILD_ID note in the PT_NOTE segment ph. */
static void read_build_id(Elf *elf, const GElf_Phdr *ph, struct elf_info *info)
{
    Elf_Data *data = elf_getdata_rawchunk(elf, (int64_t)ph->p_offset, ph->p_filesz,
                                          ph->p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    if (!data)
        return;
    GElf_Nhdr nh;
    size_t off = 0, name_off, desc_off, next;
    while (off < data->d_size && (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
        const char *name = (const char *)data->d_buf + name_off;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof("GNU") &&
            !memcmp(name, "GNU", sizeof("GNU")) && nh.n_descsz > 0 &&
            nh.n_descsz <= MODULE_MAX_BUILD_ID) {
            memcpy(info->build_id, (const char *)data->d_buf + desc_off, nh.n_descsz);
            info->build_id_len = nh.n_descsz;
            info->build_id_vaddr = ph->p_vaddr + desc_off;
            return;
        }
        off = next;
    }
}

/* Read the ELF type, PT_LOAD headers and build-id of elf (a file or an image in memory).
 * Returns 0, or -ENOEXEC if it is not a loadable ELF object. */
static int parse_elf(Elf *elf, struct elf_info *info)
{
    memset(info, 0, sizeof(*info));
    GElf_Ehdr eh;
    size_t phnum;
    if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh))
        return -ENOEXEC;
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
        return -ENOEXEC;
    if (elf_getphdrnum(elf, &phnum) != 0)
        return -ENOEXEC;
    info->e_type = eh.e_type;
    for (size_t i = 0; i < phnum; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph))
            return -ENOEXEC;
        if (ph.p_type == PT_LOAD) {
            if (info->nloads == MODULE_MAX_LOADS) {
                log_debug("more than %d PT_LOAD headers; ignoring the rest", MODULE_MAX_LOADS);
                continue;
            }
            info->loads[info->nloads++] = (struct module_load){
                .offset = ph.p_offset,
                .vaddr = ph.p_vaddr,
                .filesz = ph.p_filesz,
                .memsz = ph.p_memsz,
                .flags = ph.p_flags,
            };
        } else if (ph.p_type == PT_NOTE && !info->build_id_len) {
            read_build_id(elf, &ph, info);
        }
    }
    return info->nloads ? 0 : -ENOEXEC;
}

/* parse_elf() for the file open on fd. Returns 0, -ENOEXEC if it is not a loadable ELF
 * file, or -EIO if libelf cannot read it. */
static int read_elf(int fd, struct elf_info *info)
{
    pthread_once(&elf_once, elf_init);
    /* READ_MMAP: only the headers and the notes are touched, so only those pages are read. */
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return -EIO;
    int r = parse_elf(elf, info);
    elf_end(elf);
    return r;
}

/* Make a module from fd (which it takes over) and what was read from it, or hand back the
 * registry's module for the same build-id (closing fd). Returns a new reference. */
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
    m->e_type = info->e_type;
    memcpy(m->loads, info->loads, sizeof(info->loads));
    m->nloads = info->nloads;
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
    pthread_mutex_lock(&registry_lock);
    struct module *m = find_by_stat(&st);
    pthread_mutex_unlock(&registry_lock);
    if (m) {
        close(fd);
        return m;
    }
    struct elf_info info;
    int r = read_elf(fd, &info);
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
    for (int i = 0; i < info->nloads; i++)
        loaded |= info->build_id_vaddr >= info->loads[i].vaddr &&
                  info->build_id_vaddr - info->loads[i].vaddr < info->loads[i].filesz;
    if (!loaded)
        return -ENODATA; /* the note is not mapped: nothing to compare with */
    int err = 0;
    for (int i = 0; i < info->nloads; i++) {
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

/* The module for mapping [start, end) opened through /proc/PID/root/PATH: usable only if it
 * is the file that is mapped, which the build-id in the target's memory tells. */
static struct module *from_root_path(int pid, uint64_t start, const char *path, bool deleted)
{
    char *p = xasprintf("/proc/%d/root%s", pid, path);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    free(p);
    if (fd < 0)
        return NULL;
    struct stat st;
    struct elf_info info;
    int r = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -ENOEXEC : read_elf(fd, &info);
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
    pthread_mutex_lock(&registry_lock);
    struct module *m = find_by_stat(&st);
    pthread_mutex_unlock(&registry_lock);
    if (m) {
        close(fd);
        return m;
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
 * headers; only the [vvar] data pages are elsewhere): copy it out with process_vm_readv and
 * give libdwfl a memfd of it. Every process of one ABI on a kernel maps the same image, so
 * the build-id almost always finds it in the registry and nothing is created. */
static struct module *from_vdso(int pid, uint64_t start, uint64_t end)
{
    if (end <= start || end - start > VDSO_MAX_SIZE) {
        errno = ENOEXEC;
        return NULL;
    }
    pthread_once(&elf_once, elf_init);
    size_t size = (size_t)(end - start);
    char *img = xmalloc(size);
    struct iovec local = {img, size};
    struct iovec remote = {(void *)(uintptr_t)start, size};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    int r = n < 0 ? -errno : (size_t)n != size ? -EIO : 0;
    struct elf_info info;
    if (r == 0) {
        Elf *elf = elf_memory(img, size);
        r = elf ? parse_elf(elf, &info) : -EIO;
        elf_end(elf);
    }
    struct module *m = NULL;
    if (r == 0 && info.build_id_len)
        m = find_build_id(&info);
    if (r == 0 && !m) {
        /* Without a build-id (never seen on Linux) every process gets its own copy: the
         * memfd's identity matches nothing else. */
        int fd = memfd_from(MODULE_VDSO, img, size);
        struct stat st;
        if (fd < 0) {
            r = fd;
        } else if (fstat(fd, &st) < 0) {
            r = -errno;
            close(fd);
        } else {
            m = publish(fd, &st, &info, MODULE_VDSO, false);
        }
    }
    free(img);
    if (!m)
        errno = -r;
    return m;
}

/* Find or open the module behind mapping [start, end) of pid; see modules.h. */
struct module *module_get(int pid, uint64_t start, uint64_t end, const char *path)
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
        m = from_root_path(pid, start, clean, deleted);
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
    free(m->path);
    free(p);
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
