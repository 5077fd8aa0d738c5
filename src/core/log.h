/*
 * Logging fit for an interposer: the level is read once from
 * CUSHARE_LOG_LEVEL (error, warn, info, debug; default warn; a bad value
 * is the configuration's error, src/core/config.c), messages are
 * formatted into a stack buffer and written with one write(2) to stderr,
 * errno is preserved, a thread-local flag drops re-entrant calls, and each
 * call site can cap how often it repeats. Every message starts with
 * "cushare: <subsystem>: ".
 */
#ifndef CS_CORE_LOG_H
#define CS_CORE_LOG_H

#include <stdarg.h>

enum cs_log_level { CS_LOG_ERROR = 0, CS_LOG_WARN, CS_LOG_INFO, CS_LOG_DEBUG };

/* "error", "warn"/"warning", "info", "debug" (any case) or "0".."3":
 * 0 and the level in *out, or -EINVAL. The configuration table refuses
 * what this refuses (fail closed); the logger itself falls back to warn
 * so that it can still say why. */
int cs__log_parse_level(const char *s, int *out);

/* HAMi-core's LIBCUDA_LOG_LEVEL number as our level: 0 and 1 errors (an
 * error that fails a CUDA call closed is never silenced), 2 warnings (its
 * default), 3 info, 4 and above debug. */
int cs__log_from_hami(int n);

int cs__log_enabled(enum cs_log_level level);
void cs__log_write(enum cs_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Arguments are evaluated only when the level is enabled; the do/while keeps
 * the macro safe inside if/else. */
#define cs_log(level, subsys, ...)                                 \
    do {                                                           \
        if (cs__log_enabled(level))                                \
            cs__log_write((level), (subsys), __VA_ARGS__);         \
    } while (0)
#define cs_err(subsys, ...) cs_log(CS_LOG_ERROR, subsys, __VA_ARGS__)
#define cs_warn(subsys, ...) cs_log(CS_LOG_WARN, subsys, __VA_ARGS__)
#define cs_info(subsys, ...) cs_log(CS_LOG_INFO, subsys, __VA_ARGS__)
#define cs_debug(subsys, ...) cs_log(CS_LOG_DEBUG, subsys, __VA_ARGS__)

/* Logs at most `cap` times per call site for the process lifetime. */
#define cs_warn_capped(cap, subsys, ...)                                   \
    do {                                                                   \
        static unsigned cs__seen_;                                         \
        if (__atomic_fetch_add(&cs__seen_, 1, __ATOMIC_RELAXED) < (cap))   \
            cs_warn(subsys, __VA_ARGS__);                                  \
    } while (0)

#endif
