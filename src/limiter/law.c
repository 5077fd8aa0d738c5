/*
 * The control law (law.h). Integer arithmetic in nanoseconds: advancing V
 * by ns * 10000 / share_pm cannot overflow for any GPU time below 10^14 ns
 * (a day) per charge. The
 * shared clock is updated with a compare-and-swap loop, so processes of a
 * tenant charging at once never lose a charge.
 */
#include "limiter/law.h"

static int64_t scale(const struct cs_law *l, int64_t ns)
{
    return ns * 10000 / (int64_t)l->share_pm;
}

/* Idle time earns at most CREDIT: the clock including our work still in
 * flight may lag real time by CREDIT at most. (Clamping V alone would
 * forfeit credit that in-flight work is about to use up.) */
static int64_t credit(const struct cs_law *l)
{
    return l->credit_ns > 0 ? l->credit_ns : CS_LAW_CREDIT_NS;
}

static int64_t clamped(const struct cs_law *l, int64_t v, int64_t now)
{
    int64_t floor = now - credit(l) - scale(l, l->pending);
    return v < floor ? floor : v;
}

void cs__law_start(struct cs_law *l, int64_t *vt, uint32_t pct, int64_t now)
{
    l->vt = vt;
    cs__law_set_share(l, (pct < 1 ? 1 : pct > 99 ? 99 : pct) * 100);
    if (!l->ahead_ns)
        l->ahead_ns = CS_LAW_AHEAD_NS;
    if (l->pending < 0)
        l->pending = 0;
    int64_t unset = 0;
    __atomic_compare_exchange_n(vt, &unset, now, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void cs__law_set_share(struct cs_law *l, uint32_t share_pm)
{
    l->share_pm = share_pm < 1 ? 1 : share_pm > 9999 ? 9999 : share_pm;
}

void cs__law_set_ahead(struct cs_law *l, int64_t ahead_ns)
{
    l->ahead_ns = ahead_ns < 100000 ? 100000 : ahead_ns;
}

void cs__law_set_credit(struct cs_law *l, int64_t credit_ns)
{
    l->credit_ns = credit_ns > 0 ? credit_ns : 0;
}

void cs__law_charge(struct cs_law *l, uint64_t gpu_ns, int64_t est_ns, int64_t now)
{
    int64_t v = __atomic_load_n(l->vt, __ATOMIC_ACQUIRE), nv;
    do
        nv = clamped(l, v, now) + scale(l, (int64_t)gpu_ns);
    while (!__atomic_compare_exchange_n(l->vt, &v, nv, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    cs__law_pending(l, -est_ns);
}

void cs__law_forgive(struct cs_law *l, int64_t now)
{
    int64_t v = __atomic_load_n(l->vt, __ATOMIC_ACQUIRE);
    while (v > now &&
           !__atomic_compare_exchange_n(l->vt, &v, now, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

void cs__law_pending(struct cs_law *l, int64_t est_ns)
{
    l->pending += est_ns;
    if (l->pending < 0)
        l->pending = 0;
}

int64_t cs__law_wait(const struct cs_law *l, int64_t now)
{
    int64_t v = __atomic_load_n(l->vt, __ATOMIC_ACQUIRE);
    int64_t veff = clamped(l, v, now) + scale(l, l->pending);
    if (veff <= now + l->ahead_ns)
        return 0;
    /* Hysteresis: once over, sleep until V is back to real time, so the
     * tenant alternates bursts of ~AHEAD*L GPU time with sleeps of
     * ~AHEAD instead of waking for every launch. */
    return veff - now;
}

bool cs__law_well_under(const struct cs_law *l, int64_t now)
{
    int64_t v = __atomic_load_n(l->vt, __ATOMIC_ACQUIRE);
    return clamped(l, v, now) + scale(l, l->pending) <= now - credit(l) / 2;
}

int64_t cs__law_window_phase(const struct cs_window *w, int64_t now)
{
    return ((now - w->off_ns) % w->period_ns + w->period_ns) % w->period_ns;
}

int64_t cs__law_window_wait(const struct cs_window *w, int64_t queued_ns, int64_t now)
{
    if (w->len_ns <= 0 || w->period_ns <= 0 || w->len_ns >= w->period_ns)
        return 0;
    int64_t phase = cs__law_window_phase(w, now);
    if (phase < w->len_ns && (queued_ns <= 0 || phase + queued_ns <= w->len_ns))
        return 0;
    return w->period_ns - phase;
}
