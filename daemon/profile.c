/* profile.c: ownership of a symbolized profile (freeing it) and small lookups on it. */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

/* Free every string and array the profile owns and zero it, so that a second call, or a call
 * on a profile that was only zeroed (or half built when an allocation failed), is harmless. */
void profile_free(struct profile *p)
{
    if (!p)
        return;
    free(p->comm);
    free(p->exe);
    free(p->txn.id);
    free(p->txn.name);
    free(p->txn.trace_id);
    for (size_t i = 0; p->frames && i < p->nframes; i++) {
        free(p->frames[i].function);
        free(p->frames[i].file);
        free(p->frames[i].module);
        free(p->frames[i].pymodule);
    }
    free(p->frames);
    for (size_t i = 0; p->stacks && i < p->nstacks; i++)
        free(p->stacks[i].frames);
    free(p->stacks);
    free(p->samples);
    for (size_t i = 0; p->threads && i < p->nthreads; i++)
        free(p->threads[i].name);
    free(p->threads);
    for (size_t i = 0; p->images && i < p->nimages; i++)
        free(p->images[i].code_file);
    free(p->images);
    for (size_t i = 0; p->txn_paths && i < p->ntxn_paths; i++)
        free(p->txn_paths[i]);
    free(p->txn_paths);
    for (size_t i = 0; p->spans && i < p->nspans; i++)
        free(p->spans[i].name);
    free(p->spans);
    memset(p, 0, sizeof(*p));
}

/* Name of thread tid. A tid listed twice (a slice builder that appended a thread again after
 * a rename) answers with its first entry, so every format names a thread the same way. */
const char *profile_thread_name(const struct profile *p, int32_t tid)
{
    if (!p || !p->threads)
        return NULL;
    for (size_t i = 0; i < p->nthreads; i++)
        if (p->threads[i].tid == tid)
            return p->threads[i].name;
    return NULL;
}
