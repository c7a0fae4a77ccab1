/* fds.c: the descriptor budget for traced threads (see fds.h). Loop thread only. */
#include "fds.h"

#include <dirent.h>
#include <sys/resource.h>

static uint64_t limit = 1024, reserve = 256, taken, refused;

void fds_init(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        limit = rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : rl.rlim_cur;
    /* A quarter of the limit, at least 64 and at most 1024: room for the listening socket,
     * the loop's and the worker's own descriptors, a few hundred clients, three files per
     * target (status, pidfd, timer), the maps and ELF files being read, the symbolizers'
     * sockets and the debug files they are handed. */
    reserve = limit / 4;
    if (reserve < 64)
        reserve = 64;
    if (reserve > 1024)
        reserve = 1024;
}

bool fds_take(unsigned n)
{
    if (taken + n + reserve > limit) {
        refused++;
        return false;
    }
    taken += n;
    return true;
}

bool fds_take_spare(unsigned n)
{
    if (limit < reserve || taken + n + reserve > limit - (limit - reserve) / 4)
        return false; /* (not counted: nothing goes without) */
    taken += n;
    return true;
}

void fds_give(unsigned n)
{
    taken = n > taken ? 0 : taken - n;
}

void fds_get_stats(struct fds_stats *st)
{
    st->limit = limit;
    st->reserve = reserve;
    st->per_thread = taken;
    st->refused = refused;
    st->open = (uint64_t)-1;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    uint64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    st->open = n - 1; /* not the directory's own descriptor */
}
