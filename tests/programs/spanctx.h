/* spanctx.h: see spanctx.c. */
#pragma once
#include <stdint.h>

/* The OTEP's record: byte-packed, host endian; attrs_data holds entries of key index (u8),
 * length (u8) and that many bytes of UTF-8. */
struct __attribute__((packed)) spanctx_record {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_data_size;
    uint8_t attrs_data[64];
};

/* Make record the calling thread's context (NULL: none). */
void spanctx_set(void *record);
void *spanctx_get(void);
/* Publish the process context (OTEP 4719) that names attribute 0 "work". */
void spanctx_publish_keys(void);
