/*
 * The tenant's GPU time on each device: what the other processes of our
 * ledger measured and published in their slots (gpu_ns[dev]).
 *
 * A slot's counter starts at 0 when a process claims it and only grows;
 * the counters of processes that exit vanish. We keep, per slot we list,
 * the value last seen and the slot's generation, and fold positive deltas
 * into a monotonic per-device sum, so processes coming and going never
 * make it jump. A slot first seen contributes from that moment on (its
 * history is not charged again).
 *
 * The watcher uses these sums for the tenant's share (board, policy); the
 * pacing itself needs none of this: the tenant's processes share one
 * clock in the ledger header (law.h). Cost: one pass over the states of
 * all CS_LEDGER_SLOTS slots per watcher tick (100 ms).
 */
#include <string.h>

#include "core/fork.h"
#include "limiter/internal.h"

static struct {
    pthread_mutex_t mu;
    int n;                               /* listed slots */
    int idx[CS_LEDGER_SLOTS];
    uint64_t gen[CS_LEDGER_SLOTS];
    uint64_t last[CS_LEDGER_SLOTS][CS_MAX_DEVICES];
    uint64_t others[CS_MAX_DEVICES];     /* atomic: monotonic sums */
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

void cs__tenant_reset(void)
{
    cs__mutex_reset(&T.mu);
    T.n = 0;
    memset(T.others, 0, sizeof T.others);
}

static struct cs_ledger_slot *slot_at(int i)
{
    return cs__ledger_slot(cs__ledger(), i);
}

/* T.mu held. */
static void sum_locked(void)
{
    for (int k = 0; k < T.n; k++) {
        struct cs_ledger_slot *s = slot_at(T.idx[k]);
        uint64_t gen = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
        bool same = gen == T.gen[k] && LD(&s->state) == CS_SLOT_LIVE;
        for (int d = 0; d < CS_MAX_DEVICES; d++) {
            uint64_t v = LD(&s->gpu_ns[d]);
            if (same && v > T.last[k][d])
                __atomic_fetch_add(&T.others[d], v - T.last[k][d], __ATOMIC_RELAXED);
            T.last[k][d] = v;
        }
        T.gen[k] = gen;
    }
}

void cs__tenant_refresh(void)
{
    const int me = cs__ledger()->slot;
    pthread_mutex_lock(&T.mu);
    sum_locked();
    /* Rebuild the list, keeping what we know of slots still listed. */
    static int idx[CS_LEDGER_SLOTS];
    static uint64_t gen[CS_LEDGER_SLOTS];
    static uint64_t last[CS_LEDGER_SLOTS][CS_MAX_DEVICES];
    int n = 0, k = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (i == me)
            continue;
        struct cs_ledger_slot *s = slot_at(i);
        if (!s || LD(&s->state) != CS_SLOT_LIVE)
            continue;
        while (k < T.n && T.idx[k] < i)
            k++;
        idx[n] = i;
        if (k < T.n && T.idx[k] == i) {
            gen[n] = T.gen[k];
            memcpy(last[n], T.last[k], sizeof last[n]);
        } else {
            gen[n] = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
            for (int d = 0; d < CS_MAX_DEVICES; d++)
                last[n][d] = LD(&s->gpu_ns[d]);
        }
        n++;
    }
    memcpy(T.idx, idx, (size_t)n * sizeof idx[0]);
    memcpy(T.gen, gen, (size_t)n * sizeof gen[0]);
    memcpy(T.last, last, (size_t)n * sizeof last[0]);
    T.n = n;
    pthread_mutex_unlock(&T.mu);
}

uint64_t cs__tenant_others(int d)
{
    return __atomic_load_n(&T.others[d], __ATOMIC_RELAXED);
}

int cs__tenant_pids(unsigned *out, int cap)
{
    int n = 0;
    struct cs_ledger_slot *me = cs__lim_my_slot();
    if (me && cap > 0) {
        unsigned p = (unsigned)LD(&me->host_pid);
        if (p)
            out[n++] = p;
    }
    pthread_mutex_lock(&T.mu);
    for (int k = 0; k < T.n && n < cap; k++) {
        unsigned p = (unsigned)LD(&slot_at(T.idx[k])->host_pid);
        if (p)
            out[n++] = p;
    }
    pthread_mutex_unlock(&T.mu);
    return n;
}
