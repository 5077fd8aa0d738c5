/*
 * The control law of the compute limiter, as a pure state machine with an
 * injected clock, so tests drive it without a GPU (docs/limiter.md).
 *
 * A tenant limited to share L (0 < L < 1) of a device owns one virtual
 * clock V, shared by all its processes (it lives in the ledger). Every
 * nanosecond of GPU time the tenant's work is measured to take advances V
 * by 1/L ns. A process may launch while V, plus its own work launched but
 * not yet measured (charged by estimate), is at most AHEAD past real time;
 * otherwise it sleeps until V is back to real time. V never lags real time
 * by more than CREDIT: idle time earns at most CREDIT*L of burst.
 *
 * Over any interval the GPU time charged is L * (advance of V), and V stays
 * within [now - CREDIT, now + AHEAD + one launch / L] while the tenant is
 * busy, so the long-run share is L with an error bounded by
 * (CREDIT + AHEAD + longest launch / L) / interval. Estimates of work in
 * flight bound what is queued on the GPU to about AHEAD * L of GPU time.
 * One clock for the whole tenant makes its processes behave like threads
 * of one process: none can run ahead on a private clock and starve another.
 */
#ifndef CS_LIMITER_LAW_H
#define CS_LIMITER_LAW_H

#include <stdbool.h>
#include <stdint.h>

#define CS_LAW_AHEAD_NS 4000000ll    /* default run-ahead (CUSHARE_SM_BURST_US) */
#define CS_LAW_CREDIT_NS 20000000ll  /* at most 20 ms of idle credit */

struct cs_law {
    int64_t *vt;         /* the tenant's virtual clock, CLOCK_MONOTONIC ns;
                            0 = unset; touched with atomics only */
    int64_t pending;     /* this process's estimated unmeasured GPU ns */
    uint32_t share_pm;   /* the share in parts per 10000, 1..9999 */
    int64_t ahead_ns;    /* how far V may run ahead of real time */
    int64_t credit_ns;   /* how far V may lag real time (0: CS_LAW_CREDIT_NS) */
};

/* A tenant's window in the coordinated schedule of a device: time is cut
 * into periods of `period_ns` on CLOCK_MONOTONIC (the same clock in every
 * process of the node), and the tenant may put work on the GPU only in
 * [off_ns, off_ns + len_ns) of each period (docs/limiter.md, "Windows"). */
struct cs_window {
    int64_t period_ns, off_ns, len_ns;  /* len_ns 0: no window, launch any time */
};

/* Binds l to the shared clock `vt` for a share of `pct` percent (1..99),
 * running ahead by CS_LAW_AHEAD_NS, and starts the clock at `now` if
 * nobody has yet. */
void cs__law_start(struct cs_law *l, int64_t *vt, uint32_t pct, int64_t now);

/* Changes the share (parts per 10000, clamped to 1..9999) for charges from
 * now on: the limiter lowers it below the configured limit to charge for
 * clock boost and to equalise fulfilment (docs/limiter.md). */
void cs__law_set_share(struct cs_law *l, uint32_t share_pm);

/* Changes the run-ahead (the pacing burst), at least 100 us. */
void cs__law_set_ahead(struct cs_law *l, int64_t ahead_ns);

/* Changes how much idle time the tenant may make up (0: the default). A
 * tenant held out of the GPU for most of a window period must be able to
 * use its whole window when it comes. */
void cs__law_set_credit(struct cs_law *l, int64_t credit_ns);

/* `gpu_ns` of measured GPU time of this process; `est_ns` is what it had
 * been estimated at when launched: it leaves the pending sum in the same
 * step, so the credit clamp sees in-flight work as in flight until it is
 * charged. */
void cs__law_charge(struct cs_law *l, uint64_t gpu_ns, int64_t est_ns, int64_t now);

/* Adds (launch) or drops (lost, never measured) an estimate of own work. */
void cs__law_pending(struct cs_law *l, int64_t est_ns);

/* Sets the clock back to `now` if it is ahead: what was charged before
 * the law (re)started is not held against the tenant. */
void cs__law_forgive(struct cs_law *l, int64_t now);

/* 0: launch now. Otherwise how long to sleep (ns) before asking again. */
int64_t cs__law_wait(const struct cs_law *l, int64_t now);

/* Where `now` falls in window w's period: 0 at the window's opening, up to
 * period_ns - 1 (period_ns > 0). */
int64_t cs__law_window_phase(const struct cs_window *w, int64_t now);

/* 0: a launch may go now under window w, with `queued_ns` of our own work
 * still on the GPU (estimated): inside the window, and that work ends
 * before the window does (so the next tenant finds the GPU drained) —
 * or nothing of ours is queued, so a launch longer than the window still
 * runs once per period. Otherwise how long to sleep (ns) until our next
 * window opens. */
int64_t cs__law_window_wait(const struct cs_window *w, int64_t queued_ns, int64_t now);

/* True while the tenant is well under its share (more than half of the
 * credit unused): the limiter may then measure only a sample of launches
 * and charge the rest by estimate. */
bool cs__law_well_under(const struct cs_law *l, int64_t now);

#endif
