/* containers.c: bump allocator, u64 hash map and string set (see containers.h). */
#include "containers.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    max_align_t data[];
};

void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    struct arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        /* Chunks grow so that a module looked up a few times costs little memory. */
        size_t size = a->next_size ? a->next_size : 1024;
        if (size < 64 * 1024)
            a->next_size = size * 2;
        if (size < n)
            size = n;
        c = xmalloc(sizeof(*c) + size);
        c->used = 0;
        c->size = size;
        c->next = a->head;
        a->head = c;
        a->bytes += sizeof(*c) + size;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

char *arena_strndup(struct arena *a, const char *s, size_t len)
{
    char *p = arena_alloc(a, len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void arena_free(struct arena *a)
{
    for (struct arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->next_size = 0;
    a->bytes = 0;
}

/* Slot where key's probe sequence starts (Fibonacci hashing). */
static size_t slot_of(uint64_t key, size_t cap)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

void *u64map_get(const struct u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->vals[i])
            return NULL;
        if (m->keys[i] == key)
            return m->vals[i];
    }
}

void u64map_put(struct u64map *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 4 > m->cap * 3) {
        struct u64map g = {.cap = m->cap ? m->cap * 2 : 16};
        g.keys = xmalloc(g.cap * sizeof(*g.keys));
        g.vals = xcalloc(g.cap, sizeof(*g.vals));
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i])
                u64map_put(&g, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        *m = g;
    }
    size_t i = slot_of(key, m->cap);
    while (m->vals[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->vals[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

void u64map_del(struct u64map *m, uint64_t key)
{
    if (!m->cap)
        return;
    size_t i = slot_of(key, m->cap);
    while (m->vals[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->vals[i])
        return;
    m->vals[i] = NULL;
    m->n--;
    /* Re-insert the rest of the cluster so that no probe sequence is cut short. */
    for (size_t j = (i + 1) & (m->cap - 1); m->vals[j]; j = (j + 1) & (m->cap - 1)) {
        uint64_t k = m->keys[j];
        void *v = m->vals[j];
        m->vals[j] = NULL;
        m->n--;
        u64map_put(m, k, v);
    }
}

void u64map_finish(struct u64map *m)
{
    free(m->keys);
    free(m->vals);
    *m = (struct u64map){0};
}

uint64_t hash_bytes(const void *s, size_t len)
{
    const unsigned char *p = s;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

const char *strset_intern(struct strset *set, const char *s, size_t len)
{
    if ((set->n + 1) * 4 > set->cap * 3) {
        size_t cap = set->cap ? set->cap * 2 : 256;
        const char **v = xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->v[i])
                continue;
            size_t j = (size_t)hash_bytes(set->v[i], strlen(set->v[i])) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = set->v[i];
        }
        free(set->v);
        set->v = v;
        set->cap = cap;
    }
    size_t i = (size_t)hash_bytes(s, len) & (set->cap - 1);
    for (; set->v[i]; i = (i + 1) & (set->cap - 1))
        if (!strncmp(set->v[i], s, len) && set->v[i][len] == '\0')
            return set->v[i];
    set->v[i] = arena_strndup(&set->arena, s, len);
    set->n++;
    return set->v[i];
}

void strset_finish(struct strset *set)
{
    free(set->v);
    arena_free(&set->arena);
    *set = (struct strset){0};
}
