/* spanctx.c: OpenTelemetry's thread context (the Thread Context OTEP, otel_thread_ctx_v1), as
 * a tracing SDK's native part publishes it: a TLS pointer to the thread's current record,
 * exported in .dynsym. Built two ways: into libspanctx.so with the TLSDESC dialect
 * (-mtls-dialect=gnu2, the OTEP's recommended model), and into the spans-exe executable,
 * where the linker relaxes the access to local-exec. The writer uses compiler fences only:
 * a reader reads the record only while the thread is stopped or interrupted. */
#include <stdatomic.h>
#include <stddef.h>

#include "spanctx.h"

__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1;

__attribute__((visibility("default"))) void spanctx_set(void *record)
{
    atomic_signal_fence(memory_order_seq_cst);
    *(void *volatile *)&otel_thread_ctx_v1 = record;
    atomic_signal_fence(memory_order_seq_cst);
}

__attribute__((visibility("default"))) void *spanctx_get(void)
{
    return otel_thread_ctx_v1;
}
