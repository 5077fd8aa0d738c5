/*
 * The share decision of the compute limiter, as pure functions over
 * explicit state, so tests drive it without a driver (docs/limiter.md,
 * "What a share means").
 *
 * A limit is a guaranteed floor, not a ceiling (policy `default`): a
 * tenant is held only while the device is contended right now (the GPU is
 * saturated and another tenant of equal or higher priority is busy on it)
 * and it uses more than its entitlement. The entitlement is the weighted
 * max-min split of the device: every tenant gets what it uses up to its
 * floor; what the tenants below their floor leave goes to those above it,
 * in proportion to their floors. Idle capacity is never held back from
 * anyone (work conservation).
 *
 * Only someone owed something makes anyone wait: a rival that would use
 * more than it gets, or gets less than its floor. A tenant that leaves
 * the GPU idle between its launches (a decode loop, bounded by its CPU)
 * is held only while a rival that fills the GPU, unheld by its own
 * pacing, gets less than its floor; beside other such tenants, or beside
 * a hog that has its floor or is held by its own pacing, it runs as it
 * would with no limiter.
 *
 * Policy `force` keeps the hard cap: held to the limit at all times.
 *
 * CUDA_TASK_PRIORITY orders tenants: what busy higher-priority tenants use
 * is served first, and while one of them is busy a lower-priority tenant
 * keeps its queue on the GPU short (CS_FAIR_PRIORITY_AHEAD_NS of run-ahead),
 * so the higher-priority tenant's work never waits behind a deep queue.
 *
 * Turn-taking windows (watch.c) are only for tenants that fill the GPU
 * (their own queue never runs dry unless the limiter holds them): a
 * tenant with CPU gaps between its kernels loses its gaps' worth of every
 * window, and its latency grows by the others' windows, so it never takes
 * turns; the decision says whether this tenant may take part.
 *
 * Shares are in parts per 10000 of the device's time.
 */
#ifndef CS_LIMITER_FAIR_H
#define CS_LIMITER_FAIR_H

#include <stdbool.h>
#include <stdint.h>

#define CS_FAIR_FULL 10000u
#define CS_FAIR_SATURATED_PM 9500u     /* device busy at least 95 %: contended */
#define CS_FAIR_FOREIGN_PM 1000u       /* unexplained busy time that counts: 10 % */
#define CS_FAIR_FOREIGN_GREEDY_PM 2000u /* ... that may want more than it gets: 20 % */
#define CS_FAIR_AT_FLOOR_PCT 97        /* using 97 % of a share counts as using it all */
#define CS_FAIR_OWED_PCT 90            /* a filling rival under 90 % of its floor is owed
                                          what a launch-bound tenant takes */
#define CS_FAIR_UNEVEN_PCT 3          /* an entitlement 3 % over an equal part differs
                                          from what time-slicing gives */
#define CS_FAIR_FULFIL_BUSY_PCT 95     /* fulfilment: device busy at least 95 % ... */
#define CS_FAIR_FULFIL_HOLD_PCT 90     /* ... and once so, while at least 90 % ... */
#define CS_FAIR_FULFIL_BOARD_PCT 70    /* ... at least 70 % of it by limited tenants */
#define CS_FAIR_MAX_PEERS 64
#define CS_FAIR_PRIORITY_AHEAD_NS 1000000ll /* queue bound beside a higher priority */

/* Why a tenant is held (shown by `cushare top` and `status --json`). */
enum cs_fair_why {
    CS_FAIR_FREE = 0,        /* not held: fast path, or engaged only to be
                                measured and take turns (under its floor) */
    CS_FAIR_CONTENDED = 1,   /* device saturated, above its entitlement */
    CS_FAIR_CAPPED = 2,      /* policy force: hard cap */
    CS_FAIR_PRIORITY = 3,    /* a higher-priority tenant is busy */
};

/* Another tenant busy on the device, as its board entry says. */
struct cs_fair_peer {
    uint32_t floor_pm;       /* its limit; 0: none */
    uint32_t use_pm;         /* what it used over the last second */
    int32_t priority;        /* CUDA_TASK_PRIORITY, lower = higher */
    bool held;               /* its pacing holds it: it has no work waiting
                                that the queues of others would delay */
    bool filling;            /* its queue never runs dry: throughput, not
                                latency, is what it needs */
};

struct cs_fair_in {
    bool force;              /* policy force */
    uint32_t floor_pm;       /* our limit, 1..9999 */
    uint32_t use_pm;         /* what we used over the last second */
    int32_t priority;
    bool held;               /* our pacing slept over the last second: we
                                would use more than we get */
    bool filling;            /* our own queue on the GPU stayed non-empty
                                while we were not held: we fill the GPU */
    int device_busy_pm;      /* device busy over the last second; -1 unknown */
    bool windows;            /* we take turns in windows with every busy
                                tenant now: the GPU idles only in their
                                gaps (after a sync inside a window), which
                                is no spare capacity to release us into */
    uint32_t foreign_pm;     /* busy time of processes on no board entry */
    int npeers;              /* at most CS_FAIR_MAX_PEERS are read */
    const struct cs_fair_peer *peers;
};

struct cs_fair_out {
    bool engaged;            /* launches go through the law */
    uint32_t share_pm;       /* the share the law holds us to */
    uint32_t entitled_pm;    /* our floor plus what others leave us */
    int64_t ahead_ns;        /* run-ahead for the law; 0: the default */
    enum cs_fair_why why;
    bool turns;              /* may take part in turn-taking windows */
};

/* Weighted max-min split of `capacity` among n tenants with weights w[i]
 * (> 0) and demands d[i] (UINT32_MAX: would use anything): each gets
 * min(demand, its weighted part of what the satisfied ones leave). */
void cs__fair_split(uint32_t capacity, int n, const uint32_t *w, const uint32_t *d,
                    uint32_t *out);

/* Whether a tenant using `use_pm` of a share of `share_pm` wants more than
 * it gets (uses all of it, within CS_FAIR_AT_FLOOR_PCT). */
bool cs__fair_wants_more(uint32_t use_pm, uint32_t share_pm);

/* The decision for one tenant on one device. */
void cs__fair_decide(const struct cs_fair_in *in, struct cs_fair_out *out);

/* Yield on activity: how long a lower-priority tenant held for priority
 * must wait before its next launch. It launches only once every busy
 * higher-priority peer has been quiet (launched nothing) for `quiet_ns`;
 * last[i] is peer i's latest launch (CLOCK_MONOTONIC, 0: none published;
 * one after `now` counts as now, since a peer's clock read cannot be later
 * than ours). The wait is at most `quiet_ns`, so a caller that sleeps it
 * and asks again looks at most every quiet period. 0: launch now (also
 * when quiet_ns <= 0: yielding is off). */
int64_t cs__fair_quiet_wait(int64_t now, const int64_t *last, int n, int64_t quiet_ns);

/* Fulfilment's view of the device (watch.c): saturated, and by limited
 * tenants. NVML's mean utilisation over the last second `util_pct` is at
 * least CS_FAIR_FULFIL_BUSY_PCT, and our share plus the busy board
 * tenants' `board_ppm` (ppm of the device) at least
 * CS_FAIR_FULFIL_BOARD_PCT, so the GPU, not a CPU or an unlimited tenant,
 * is what is lacking. Once saturated (`was`), it stays so while busy at
 * least CS_FAIR_FULFIL_HOLD_PCT: a yield to a starved tenant removes
 * context switches between us, which NVML counts as busy time, so the
 * yield alone lowers the utilisation it is conditioned on, and a single
 * threshold would undo every yield a second later. */
bool cs__fair_fulfil_saturated(int util_pct, uint64_t board_ppm, bool was);

/* Short name of a reason: "-", "contended", "capped", "priority". */
const char *cs__fair_why_name(enum cs_fair_why why);

#endif
