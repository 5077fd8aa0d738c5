/*
 * What one launch signature costs (docs/limiter.md, "What is measured, and
 * how"), as pure functions over its entry, so tests drive them without a
 * driver.
 *
 * On a GPU that time-slices contexts, an event pair around our kernel also
 * spans the slices other contexts ran in. A launch is therefore charged at
 * most its signature's recent minimum (+ CS_LIM_SIG_SLACK_PCT); alone on
 * the GPU the measurement is about the minimum and nothing changes. A
 * signature measured for the first time has no minimum yet and is charged
 * as measured. Launches that are not measured are charged the signature's
 * estimate: the average of its recent charges, never more than its minimum
 * + slack, so a first measurement that spanned other contexts' work is not
 * charged again for every launch estimated after it.
 *
 * The caller owns the entry and serialises access to it (the device mutex).
 */
#ifndef CS_LIMITER_SIG_H
#define CS_LIMITER_SIG_H

#include <stdint.h>

#define CS_LIM_SIG_WINDOW 16     /* minimum over the last 16..32 measurements */
#define CS_LIM_SIG_SLACK_PCT 5   /* charge at most the minimum + 5 % */

/* Recent contention-free GPU time of one launch signature: the minimum
 * over two half-windows of CS_LIM_SIG_WINDOW measurements, and an average
 * of what its launches were charged. */
struct cs_lim_sig {
    uint64_t key;                /* signature; 0 = empty */
    int64_t min_cur, min_prev;   /* ns; 0 = none yet */
    int64_t charged;             /* EMA of charged ns */
    uint32_t n;                  /* measurements in the current half-window */
};

/* The recent minimum in ns; 0 when nothing was measured yet. */
int64_t cs__sig_min(const struct cs_lim_sig *e);

/* A launch of the signature measured `ns`: returns what it is charged (at
 * most the minimum known before it, + slack) and adds `ns` to the minimum. */
int64_t cs__sig_measure(struct cs_lim_sig *e, int64_t ns);

/* Adds what a measured launch was finally charged (after any scaling of
 * the caller's) to the average. */
void cs__sig_note_charge(struct cs_lim_sig *e, int64_t charged);

/* What a launch that is not measured is charged: the average of recent
 * charges, at most the minimum + slack; 0 when nothing is known. */
int64_t cs__sig_estimate(const struct cs_lim_sig *e);

#endif
