/* otlp.c: the OTLP exporter's body. */
#include <errno.h>

#include "export_internal.h"

void export_encode_otlp(struct export_window *w, const struct profile *p)
{
    (void)p;
    w->err = -ENOSYS;
}
