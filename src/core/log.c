#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* -1 until first read; then the level. A race reads the same value twice. */
static int log_level = -1;
static __thread int log_reentered;

static int read_level(void)
{
    const char *v = getenv("CUSHARE_LOG_LEVEL");
    if (!v || !*v)
        return CS_LOG_WARN;
    if (!strcmp(v, "error") || !strcmp(v, "0"))
        return CS_LOG_ERROR;
    if (!strcmp(v, "warn") || !strcmp(v, "1"))
        return CS_LOG_WARN;
    if (!strcmp(v, "info") || !strcmp(v, "2"))
        return CS_LOG_INFO;
    if (!strcmp(v, "debug") || !strcmp(v, "3"))
        return CS_LOG_DEBUG;
    return CS_LOG_WARN;
}

int cs__log_enabled(enum cs_log_level level)
{
    int cur = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (cur < 0) {
        cur = read_level();
        __atomic_store_n(&log_level, cur, __ATOMIC_RELAXED);
    }
    return (int)level <= cur;
}

void cs__log_write(enum cs_log_level level, const char *subsys, const char *fmt, ...)
{
    if (log_reentered)
        return;
    int saved_errno = errno;
    log_reentered = 1;

    char buf[1024];
    int n = snprintf(buf, sizeof buf, "cushare: %s: %s: ", subsys, level_names[level]);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof buf - 1)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;

    log_reentered = 0;
    errno = saved_errno;
}
