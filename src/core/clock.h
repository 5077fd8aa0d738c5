/*
 * The one clock of cushare: CLOCK_MONOTONIC in nanoseconds. Deadlines,
 * pacing, start-up phases and benchmark stamps all use it, so any two
 * figures are comparable. Signed so that differences and deadlines in the
 * past need no casts; it wraps after 292 years of uptime.
 */
#ifndef CS_CORE_CLOCK_H
#define CS_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t cs__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
