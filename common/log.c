/* log.c: leveled logging to stderr; "<N>" prefixes when stderr is the journal. */
#include "log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = "profd";
static enum log_level max_lvl = LOG_LVL_INFO;
static int journal = -1;

/* Is stderr the journal? systemd sets $JOURNAL_STREAM to "DEVICE:INODE" of the stream it
 * connected; a child whose stderr was redirected elsewhere inherits the variable, so the
 * device and inode must match stderr's (systemd.exec(5)). */
static bool stderr_is_journal(void)
{
    const char *e = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* Set the program name and verbosity. When stderr is the journal, lines carry
 * sd-daemon(3) "<N>" priority prefixes, which journald turns into priorities. */
void log_init(const char *progname, enum log_level max_level)
{
    prog = progname;
    max_lvl = max_level;
    journal = stderr_is_journal();
}

void log_set_level(enum log_level max_level)
{
    max_lvl = max_level;
}

enum log_level log_get_level(void)
{
    return max_lvl;
}

static const char *lvl_name(enum log_level lvl)
{
    switch (lvl) {
    case LOG_LVL_ERR:
        return "error";
    case LOG_LVL_WARN:
        return "warning";
    case LOG_LVL_INFO:
        return "info";
    default:
        return "debug";
    }
}

/* Write one line; debug lines carry [file:line] to find their origin. */
void log_write(enum log_level lvl, const char *file, int line, const char *fmt, ...)
{
    if (lvl > max_lvl)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (journal < 0)
        journal = stderr_is_journal();
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (journal)
        fprintf(stderr, "<%d>%s\n", (int)lvl, msg);
    else if (lvl == LOG_LVL_DEBUG)
        fprintf(stderr, "%s: %s: [%s:%d] %s\n", prog, lvl_name(lvl), base, line, msg);
    else
        fprintf(stderr, "%s: %s: %s\n", prog, lvl_name(lvl), msg);
}

void fatal(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_write(LOG_LVL_ERR, __FILE__, __LINE__, "%s", msg);
    exit(1);
}
