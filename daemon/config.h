/* config.h: profd's settings: built-in defaults, then the configuration file
 * (/etc/profd/profd.conf, profd.conf(5)), then command-line flags, which win.
 *
 * The file is lines of "key = value"; '#' starts a comment; blank lines are ignored. Every
 * key is also a flag (--key, '_' written '-'). Values are checked as they are read: a bad
 * line is an error naming the file, the line and what is wrong, and profd refuses to start
 * (on SIGHUP it keeps the configuration it runs with). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sampler.h"
#include "schedule.h"

#ifdef PROFD_CONFIG
#define PROFD_DEFAULT_CONFIG PROFD_CONFIG /* from meson: SYSCONFDIR/profd/profd.conf */
#else
#define PROFD_DEFAULT_CONFIG "/etc/profd/profd.conf"
#endif
#define CONFIG_MAX_GROUPS 32

struct profd_config {
    char *socket;            /* NULL: the default path (profd_socket_path) */
    char *socket_group;      /* group owning the socket profd creates; NULL: profd's own */
    unsigned socket_mode;    /* permissions of the socket profd creates (0666) */
    enum sched_mode mode;    /* default schedule for attach */
    unsigned hz;             /* default rate */
    uint64_t buffer_ns;      /* default buffer length */
    unsigned max_hz;
    double max_cpu;          /* sampling budget, percent of one CPU; 0: none */
    enum cpu_source cputime_source;
    enum sampler_kind sampler; /* how running threads are sampled, default for attach */
    uint64_t txn_linger_ns;
    unsigned max_targets;
    unsigned max_targets_per_user;
    unsigned max_stack_kib;
    uint64_t max_memory;     /* bytes for all targets' samples and stacks; 0: no limit */
    uint64_t symbolizer_memory;  /* address space of each symbolizer helper; 0: no limit */
    uint64_t symbolizer_timeout_ns; /* longest wait for a symbolizer's answer */
    /* Export (export/export.h): each backend's address ("": none), how often, the spool. */
    char *export_sentry;     /* a DSN: its key is a secret (never shown) */
    char *export_sentry_file; /* a file holding the DSN, readable by root alone */
    char *export_pyroscope;
    char *export_otlp;
    uint64_t export_interval_ns;
    uint64_t export_timeout_ns;
    char *export_spool;      /* "": $STATE_DIRECTORY/spool, else /var/lib/profd/spool */
    uint64_t export_spool_max;
    gid_t allow_groups[CONFIG_MAX_GROUPS]; /* members may profile other users' processes */
    size_t nallow_groups;
    bool verbose;
};

/* A setting's type: how its value is read, checked and written. */
enum config_type {
    CFG_PATH,     /* an absolute path of at most hi bytes (char *) */
    CFG_GROUP,    /* an existing group's name or number, "" for none (char *) */
    CFG_OCTAL,    /* permissions, 0 to hi (unsigned) */
    CFG_MODE,     /* enum sched_mode */
    CFG_CPUSRC,   /* enum cpu_source */
    CFG_SAMPLER,  /* enum sampler_kind */
    CFG_UINT,     /* lo to hi (unsigned) */
    CFG_DURATION, /* lo to hi nanoseconds (uint64_t), written "60", "500ms", "5m" */
    CFG_PERCENT,  /* lo to hi (double) */
    CFG_SIZE,     /* bytes (uint64_t), at least lo, or 0 for none; "512K", "1G" */
    CFG_GROUPS,   /* groups, by name or number (allow_groups, nallow_groups) */
    CFG_BOOL,     /* yes or no (bool); as a flag, it takes no value */
    CFG_URL,      /* an http(s) URL, "" for none (char *) */
    CFG_DSN,      /* a Sentry DSN, "" for none (char *): shown with its key hidden, and never
                     quoted in an error */
};

/* One setting (config.c's table is the only place each is defined). */
struct config_key {
    const char *key;     /* in the file; the flag is --key with '-' for '_' */
    char short_flag;     /* the flag's one-letter form, or 0 */
    enum config_type type;
    size_t off;          /* its field in struct profd_config */
    uint64_t lo, hi;     /* its range, as the type says */
    const char *def;     /* its default, as the file would say it; NULL: unset */
    const char *arg;     /* the flag's argument in the usage text; NULL: none */
    const char *range;   /* the range in words, for errors (durations, sizes) */
    const char *help;    /* the usage text */
};

/* The table, n entries. */
const struct config_key *config_keys(size_t *n);
/* The built-in defaults (the table's). */
void config_defaults(struct profd_config *c);
/* "key = value" lines of every setting of c, in the table's order. */
struct strbuf;
void config_show(const struct profd_config *c, struct strbuf *out);
/* The options' part of the usage text: flag, argument, help, default. */
void config_usage(struct strbuf *out);
/* Free what c owns (not c). */
void config_free(struct profd_config *c);
/* A deep copy. */
void config_copy(struct profd_config *dst, const struct profd_config *src);
/* Set key (a file key, or a flag's name without "--", '-' or '_') to value. Returns 0, or
 * -EINVAL with a reason in err ("hz must be an integer from 1 to 10000, not \"x\""), or
 * -ENOENT for an unknown key. */
int config_set(struct profd_config *c, const char *key, const char *value, char *err,
               size_t errlen);
/* Read a configuration file into c. missing_ok: a file that does not exist is no error.
 * Returns 0, or -errno with "PATH:LINE: reason" in err. */
int config_load(struct profd_config *c, const char *path, bool missing_ok, char *err,
                size_t errlen);
/* Read the DSN of export_sentry_file into export_sentry: the file must be a regular file
 * owned by root and readable by no one else (mode 0600 or 0400). Returns 0 or -errno with
 * why (never the DSN). Nothing to do without the key. */
int config_read_secrets(struct profd_config *c, char *err, size_t errlen);
/* Checks across keys (hz not above max_hz). Returns 0 or -EINVAL with a reason in err. */
int config_check(const struct profd_config *c, char *err, size_t errlen);
/* Is gid one of the groups allowed to profile other users' processes? */
bool config_group_allowed(const struct profd_config *c, gid_t gid);

/* What the server and the commands read of the settings (main.c fills it from struct
 * profd_config at start and at each reload). */
struct server_config {
    const char *socket_path;
    unsigned default_hz;
    enum sched_mode default_mode;
    enum sampler_kind default_sampler;
    uint64_t default_buffer_ns;
    unsigned max_hz;
    uint64_t max_buffer_ns;
    unsigned max_targets;
    unsigned max_targets_per_user; /* for clients without CAP_SYS_PTRACE */
    uint64_t max_memory;           /* all targets' samples and stacks; 0: no limit */
    gid_t allow_groups[CONFIG_MAX_GROUPS]; /* members may profile any process */
    size_t nallow_groups;
    gid_t socket_gid;              /* group of the socket profd creates; -1: its own */
    unsigned socket_mode;
};

extern struct server_config server_cfg;
