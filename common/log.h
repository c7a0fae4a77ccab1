/* log.h: leveled logging to stderr, with sd-daemon priority prefixes under journald. */
#pragma once

#include <stdarg.h>

enum log_level {
    LOG_LVL_ERR = 3,
    LOG_LVL_WARN = 4,
    LOG_LVL_INFO = 6,
    LOG_LVL_DEBUG = 7,
};

/* Set the program name shown in each line and the most verbose level printed. */
void log_init(const char *progname, enum log_level max_level);
void log_set_level(enum log_level max_level);
enum log_level log_get_level(void);

void log_write(enum log_level lvl, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_err(...) log_write(LOG_LVL_ERR, __FILE__, __LINE__, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LVL_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define log_info(...) log_write(LOG_LVL_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_get_level() >= LOG_LVL_DEBUG)                                                      \
            log_write(LOG_LVL_DEBUG, __FILE__, __LINE__, __VA_ARGS__);                             \
    } while (0)

/* Log at error level and exit(1). Only for start-up failures. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
