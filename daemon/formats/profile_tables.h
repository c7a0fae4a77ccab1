/* profile_tables.h: what pprof and OTLP share, built once from a profile (profile_pprof.c,
 * profile_otlp.c): a string table (each string once, "" first), a function per (name, file),
 * a location per native address (the functions inlined there and the one they are inlined
 * into: its lines, innermost first) or per Python frame, and each stack as its locations,
 * leaf first. Ids count from 1 (0: none), as pprof's ids and OTLP's table indices (whose
 * entry 0 is the zero entry) both want. The encoders' messages live in an arena
 * (containers.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "containers.h"
#include "profile.h"

struct ptab_function {
    uint32_t name, file; /* string ids */
};

struct ptab_line {
    uint32_t function;   /* function id */
    int64_t line;        /* 0: unknown */
};

struct ptab_location {
    uint32_t mapping;    /* image index + 1, 0: none (a Python frame, anonymous memory) */
    uint64_t address;    /* 0 for a Python frame */
    uint32_t line0, nlines; /* its lines in lines[] */
};

struct ptables {
    const struct profile *p;
    char **strings;
    size_t nstrings, cap_strings;
    struct u64map string_index; /* hash -> first string id + 1 with that hash */
    uint32_t *string_next;      /* next string id + 1 with the same hash */
    struct ptab_function *functions; /* functions[id - 1] */
    size_t nfunctions, cap_functions;
    struct u64map function_index; /* name << 32 | file -> id */
    struct ptab_location *locations; /* locations[id - 1] */
    size_t nlocations, cap_locations;
    struct ptab_line *lines;
    size_t nlines, cap_lines;
    uint32_t *location_of;      /* per frame: the location id its group starts, 0: none yet */
    bool oom;
};

void ptables_init(struct ptables *t, const struct profile *p);
void ptables_finish(struct ptables *t);
/* s's id (NULL: ""). */
uint32_t ptables_string(struct ptables *t, const char *s);
/* The locations of stack `stack`, leaf first, into ids (room for the stack's frames).
 * Returns how many. */
uint32_t ptables_stack(struct ptables *t, uint32_t stack, uint64_t *ids);
/* The image (index + 1) holding a native frame, or 0. */
uint32_t ptables_mapping(const struct profile *p, const struct profile_frame *f);
/* The build id of image i in hex (out: at least 2 * PROFILE_MAX_BUILD_ID + 1 bytes). */
void ptables_build_id(const struct profile_image *im, char *out);
/* A transaction path's names joined by " > " (out is reset first). */
void ptables_txn_path(const char *names, struct strbuf *out);
