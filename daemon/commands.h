/* commands.h: the handlers of the requests the server reads (commands.c, the dispatcher, and
 * its cmd_*.c), one per "cmd" of common/PROTOCOL.md. */
#pragma once

#include <cjson/cJSON.h>

struct client;

/* Handle one request. Returns the reply, or NULL when it will be sent later
 * through a pending (then reading from the client pauses until it is). */
cJSON *commands_dispatch(struct client *c, const cJSON *req);
/* Answer and free requests still waiting (at exit): the slices' (cmd_slice.c). */
void commands_shutdown(void);
/* Stops were reaped: start the slices that were waiting for them (cmd_slice.c). */
void commands_stops_reaped(void);
