/* containers.h: the few containers the symbolizers need: a bump allocator, a hash map from a
 * 64-bit key to a pointer, and a set of interned strings. Allocation failures abort (xmalloc). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Bump allocator: what it hands out is never freed one by one, only all at once. */
struct arena_chunk;
struct arena {
    struct arena_chunk *head;
    size_t next_size;
    size_t bytes; /* allocated in chunks, for statistics */
};
/* n bytes, aligned for any type, valid until arena_free. */
void *arena_alloc(struct arena *a, size_t n);
/* A copy of [s, s + len) and a terminating NUL. */
char *arena_strndup(struct arena *a, const char *s, size_t len);
void arena_free(struct arena *a);

/* Open-addressing hash map from a 64-bit key to a non-NULL pointer (linear probing). */
struct u64map {
    uint64_t *keys;
    void **vals; /* NULL marks a free slot */
    size_t cap, n;
};
/* Value for key, or NULL. */
void *u64map_get(const struct u64map *m, uint64_t key);
/* Insert or replace; val must not be NULL. */
void u64map_put(struct u64map *m, uint64_t key, void *val);
/* Remove key (no-op if absent). */
void u64map_del(struct u64map *m, uint64_t key);
/* Free the table (not the values). */
void u64map_finish(struct u64map *m);
/* Iterate: for (size_t i = 0; i < m->cap; i++) if (m->vals[i]) ... */

/* Set of interned strings. */
struct strset {
    const char **v;
    size_t cap, n;
    struct arena arena;
};
/* The interned copy of [s, s + len), made on first sight. */
const char *strset_intern(struct strset *set, const char *s, size_t len);
void strset_finish(struct strset *set);

/* FNV-1a of [s, s + len). */
uint64_t hash_bytes(const void *s, size_t len);
