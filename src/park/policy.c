/*
 * Parking policy (policy.h, docs/parking.md). Pure: no clock, no I/O, no
 * globals; every input is an argument.
 */
#include <errno.h>

#include "park/policy.h"

#define MIB (1ull << 20)
#define HOST_RESERVE_MIN (256 * MIB)

bool cs__park_idle(const struct cs_park_tenant *t, int64_t now, int64_t idle_ns)
{
    if (t->in_call)
        return false;
    if (!t->last_active_ns)
        return true;
    if (t->last_active_ns > now)
        return false;
    return now - t->last_active_ns >= idle_ns;
}

bool cs__park_eligible(const struct cs_park_tenant *t, int32_t req_prio, int64_t now,
                       int64_t idle_ns)
{
    return !t->parked && !t->shares && t->on_gpu && t->priority >= req_prio &&
           cs__park_idle(t, now, idle_ns);
}

/* a before b in the order victims are taken: lower priority (larger
 * number) first, then the one idle the longest. */
static bool before(const struct cs_park_tenant *a, const struct cs_park_tenant *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->last_active_ns < b->last_active_ns;
}

/* The next eligible, unchosen tenant in victim order, or -1. */
static long next_victim(const struct cs_park_tenant *t, size_t n, int32_t req_prio, int64_t now,
                        int64_t idle_ns)
{
    long best = -1;
    for (size_t i = 0; i < n; i++)
        if (!t[i].chosen && cs__park_eligible(&t[i], req_prio, now, idle_ns) &&
            (best < 0 || before(&t[i], &t[best])))
            best = (long)i;
    return best;
}

/* The chosen tenant taken last in victim order (the most recently active
 * of the lowest-ranked), or -1. */
static long last_chosen(const struct cs_park_tenant *t, size_t n, const bool *kept)
{
    long last = -1;
    for (size_t i = 0; i < n; i++)
        if (t[i].chosen && !kept[i] && (last < 0 || before(&t[last], &t[i])))
            last = (long)i;
    return last;
}

int cs__park_choose(struct cs_park_tenant *t, size_t n, uint64_t need, int32_t req_prio,
                    int64_t now, int64_t idle_ns, uint64_t *freed)
{
    for (size_t i = 0; i < n; i++)
        t[i].chosen = false;
    *freed = 0;
    if (!need)
        return 0;
    uint64_t sum = 0;
    int count = 0;
    while (sum < need) {
        long v = next_victim(t, n, req_prio, now, idle_ns);
        if (v < 0)
            break;
        t[v].chosen = true;
        sum += t[v].on_gpu;
        count++;
    }
    if (sum < need) {
        for (size_t i = 0; i < n; i++)
            t[i].chosen = false;
        return -ENOSPC;
    }
    /* Never more than needed: walking back from the last taken, drop every
     * choice the remaining ones cover without. */
    bool kept[n ? n : 1];
    for (size_t i = 0; i < n; i++)
        kept[i] = false;
    for (;;) {
        long v = last_chosen(t, n, kept);
        if (v < 0)
            break;
        if (sum - t[v].on_gpu >= need) {
            t[v].chosen = false;
            sum -= t[v].on_gpu;
            count--;
        } else {
            kept[v] = true;
        }
    }
    *freed = sum;
    return count;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

bool cs__park_host_fits(uint64_t bytes, uint64_t mem_available, uint64_t cg_limit,
                        uint64_t cg_usage)
{
    uint64_t room = mem_available;
    if (cg_limit)
        room = min_u64(room, cg_limit > cg_usage ? cg_limit - cg_usage : 0);
    uint64_t reserve = room / 16 > HOST_RESERVE_MIN ? room / 16 : HOST_RESERVE_MIN;
    return room >= reserve && bytes <= room - reserve;
}

uint64_t cs__park_budget_on_card(uint64_t budget, uint64_t card)
{
    return budget && budget < card ? budget : card;
}

bool cs__park_budget_admits(uint64_t sum, uint64_t budget, uint64_t card, uint32_t pct)
{
    if (!pct)
        pct = 100;
    uint64_t b = cs__park_budget_on_card(budget, card);
    /* card * pct / 100 without overflow for any card below 2^57 bytes. */
    uint64_t cap = card / 100 * pct + card % 100 * pct / 100;
    return sum <= cap && b <= cap - sum;
}

uint64_t cs__park_need(uint64_t want, uint64_t free_now)
{
    return want > free_now ? want - free_now : 0;
}
