/*
 * Healing the aggregates: returning to dev[d].used what no process of the
 * tenant holds, while the tenant's other processes keep running.
 *
 * A process killed between charging the aggregate and recording the charge
 * in its slot (a charge), or between taking bytes out of its slot and out
 * of the aggregate (an uncharge, a leave, a reap), leaves dev[d].used above
 * what the slots hold: the over-count of docs/ledger.md's crash-window
 * rule. Reaping cannot find those bytes, since no slot has them; only a
 * measurement can. To make one possible every owner announces a change
 * before it makes it: pending[d] += n, then op_seq += 1; then used and
 * bytes change; then pending[d] -= n (slot.c, counters.c). The heal then
 *
 *   1. reads, slot by slot: op_seq, state, and for a slot that is not FREE
 *      pending[d] and then bytes[d][*]; held[d] sums pending + bytes, and
 *      then what every share (share.c) has charged;
 *   2. reads used[d];
 *   3. reads every op_seq again and gives up if any changed;
 *   4. subtracts used[d] - held[d] from used[d] when that is positive.
 *
 * Why step 4 never takes bytes a live process owns, whatever the others do
 * meanwhile, is argued in docs/ledger.md ("Healing"). In short: an owner's
 * pending + bytes never falls below what it has added to used; what it
 * starts after its slot was read bumps op_seq before it touches used, so
 * either step 3 sees it or used was read before it; and the subtraction is
 * relative, so what others add or remove after step 2 is kept. Only one
 * process heals at a time (the caller holds CS_LEDGER_HEAL_LOCK) and only
 * one thread in it (slot.c's mutex): two healers could both return the
 * same excess.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "core/log.h"

#define SUBSYS "ledger"
#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)

/* A scan that keeps changing under us is retried this often, then left to
 * the next occasion (a claim, a view, a refusal). */
#define HEAL_ATTEMPTS 3

/* op_seq of every slot as step 1 saw it. Written and read only by the
 * healer, who holds slot.c's mutex, so one copy per process suffices
 * (8 KiB that would otherwise sit on an application thread's stack). */
static uint64_t seen_seq[CS_LEDGER_SLOTS];

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    uint64_t s;
    return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/* Devices with anything charged: the only ones that can have an excess. */
static uint32_t charged_devices(const struct cs_ledger_header *h)
{
    uint32_t mask = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (LOAD(&h->dev[d].used))
            mask |= 1u << d;
    return mask;
}

/* What slot s holds or has in flight on dev. pending first: an announced
 * charge that is withdrawn after we read pending is in bytes by then. */
static uint64_t slot_held(const struct cs_ledger_slot *s, int dev)
{
    uint64_t v = LOAD(&s->pending[dev]);
    for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++)
        v = add_sat(v, LOAD(&s->bytes[dev][c]));
    return v;
}

/* Step 1. Returns whether any slot was not FREE. */
static bool measure_held(const struct cs_ledger *l, uint32_t mask,
                         uint64_t held[CS_MAX_DEVICES])
{
    bool any = false;
    memset(held, 0, CS_MAX_DEVICES * sizeof held[0]);
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        const struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        seen_seq[i] = LOAD(&s->op_seq);
        if (LOAD(&s->state) == CS_SLOT_FREE)
            continue; /* FREE slots hold nothing; a claim after this read
                         bumps op_seq before its first charge */
        any = true;
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            if (mask & (1u << d))
                held[d] = add_sat(held[d], slot_held(s, d));
    }
    /* Shares after slots: a share is made and freed between an announce
     * and a withdraw in its maker's or freer's slot (share.c), so its
     * bytes are in pending or in charged whenever they are in used. */
    for (int j = 0; j < CS_LEDGER_SHARES; j++) {
        const struct cs_ledger_share *sh = cs__ledger_share(l, j);
        uint64_t c = LOAD(&sh->charged);
        uint32_t d = LOAD(&sh->dev);
        if (c && d < CS_MAX_DEVICES && (mask & (1u << d))) {
            held[d] = add_sat(held[d], c);
        }
    }
    return any;
}

/* Step 3: no slot announced anything since step 1 read it. */
static bool nothing_announced(const struct cs_ledger *l)
{
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        if (LOAD(&cs__ledger_slot(l, i)->op_seq) != seen_seq[i])
            return false;
    return true;
}

static uint64_t return_excess(struct cs_ledger *l, int dev, uint64_t excess, uint64_t held)
{
    uint64_t took = cs__ledger_sub_clamped(&l->hdr->dev[dev].used, excess);
    cs_warn(SUBSYS, "ledger %s: device %d had %" PRIu64 " bytes charged beyond the %" PRIu64
            " its processes hold or have in flight (a process died between charging and "
            "recording); returned them", l->path, dev, took, held);
    return took;
}

/* With no slot in use, the count of LIVE slots must be 0 too; it is
 * replaced only if unchanged since before the scan, so a claim meanwhile
 * keeps its count. (It is shown by `cushare status`; admission never uses
 * it.) */
static void reset_live(struct cs_ledger_header *h, uint64_t seen)
{
    if (seen)
        __atomic_compare_exchange_n(&h->live, &seen, 0, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
}

uint64_t cs__ledger_heal(struct cs_ledger *l)
{
    struct cs_ledger_header *h = l->hdr;
    const uint64_t live = LOAD(&h->live);
    const uint32_t mask = charged_devices(h);
    /* With nothing charged there is no excess; the scan could only reset
     * `live`, which it does when no slot is LIVE, and a caller holding a
     * slot knows one is. */
    if (!mask && (!live || l->slot >= 0))
        return 0;
    for (int attempt = 0; attempt < HEAL_ATTEMPTS; attempt++) {
        uint64_t held[CS_MAX_DEVICES], used[CS_MAX_DEVICES];
        bool any = measure_held(l, mask, held);
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            used[d] = mask & (1u << d) ? LOAD(&h->dev[d].used) : 0;
        if (!nothing_announced(l))
            continue;
        uint64_t total = 0;
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            if (used[d] > held[d])
                total += return_excess(l, d, used[d] - held[d], held[d]);
        if (!any)
            reset_live(h, live);
        return total;
    }
    cs_debug(SUBSYS, "ledger %s: slots kept changing during %d scans; healing left for later",
             l->path, HEAL_ATTEMPTS);
    return 0;
}
