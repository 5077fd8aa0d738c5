#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* -1 until first read; then the level. A race reads the same value twice. */
static int log_level = -1;
static __thread int log_reentered;

int cs__log_parse_level(const char *s, int *out)
{
    static const char *const words[][2] = {
        [CS_LOG_ERROR] = {"error", "0"},
        [CS_LOG_WARN] = {"warn", "1"},
        [CS_LOG_INFO] = {"info", "2"},
        [CS_LOG_DEBUG] = {"debug", "3"},
    };
    for (int l = CS_LOG_ERROR; l <= CS_LOG_DEBUG; l++) {
        if (!strcasecmp(s, words[l][0]) || !strcmp(s, words[l][1]) ||
            (l == CS_LOG_WARN && !strcasecmp(s, "warning"))) {
            *out = l;
            return 0;
        }
    }
    return -EINVAL;
}

int cs__log_from_hami(int n)
{
    return n <= 1 ? CS_LOG_ERROR : n == 2 ? CS_LOG_WARN : n == 3 ? CS_LOG_INFO : CS_LOG_DEBUG;
}

/* CUSHARE_LOG_LEVEL, else HAMi's LIBCUDA_LOG_LEVEL, else warnings. A bad
 * value is config.c's to report; here it only means the default. */
static int read_level(void)
{
    const char *v = getenv("CUSHARE_LOG_LEVEL");
    int level;
    if (v && *v && !cs__log_parse_level(v, &level))
        return level;
    v = getenv("LIBCUDA_LOG_LEVEL");
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : -1;
    if (v && *v && !*end && n >= 0)
        return cs__log_from_hami(n > 1000 ? 1000 : (int)n);
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
