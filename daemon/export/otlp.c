/* otlp.c: the OTLP exporter's body (worker thread): an ExportProfilesServiceRequest of the
 * window (profile_otlp.c), its resource the process with its service, host and labels, its
 * profile_id the record's id (so that a retried send is recognisably the same profile). */
#include <string.h>

#include "export_internal.h"
#include "profile.h"
#include "util.h"

void export_encode_otlp(struct export_window *w, const struct profile *p)
{
    struct otlp_resource res = {.service = w->service, .host = w->host,
                                .labels = w->labels, .nlabels = w->nlabels};
    char id[33];
    struct strbuf body = {0};
    int r = profile_random_id(res.profile_id, id);
    if (r == 0)
        r = profile_write_otlp(p, &res, &body);
    if (r < 0)
        w->err = r;
    else
        export_emit_gzip(w, EX_OTLP, "application/x-protobuf", id, body.buf, body.len);
    strbuf_finish(&body);
}
