/*
 * The counters a charge moves: the shared per-device aggregates and the
 * caller's slot (src/account owns the charge; this is its ledger half).
 *
 * charge raises the aggregate first (compare-and-swap against the limit:
 * two processes racing can never both fit into the last free bytes) and
 * records the charge in the caller's slot second. uncharge undoes it in the
 * opposite order: slot first, aggregate second. Either way a process killed
 * between the two steps leaves the aggregate over-counted (fail closed:
 * admission is stricter than needed), never under-counted. Both announce
 * the bytes in the slot's pending[] (and op_seq) before the first step and
 * withdraw them after the second, so that the heal (heal.c) can tell such
 * an over-count from a charge in flight and return it while others live.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

#include "core/log.h"

#define SUBSYS "ledger"

static int check_args(const struct cs_ledger *l, int dev, int cat)
{
    if (!l->hdr || l->read_only)
        return -EBADF;
    if (dev < 0 || dev >= CS_MAX_DEVICES || cat < 0 || cat >= CS_MEM_NCATEGORIES)
        return -EINVAL;
    if (l->slot < 0)
        return -ENOTCONN; /* not claimed: a charge nobody could ever reap */
    if (l->owner_pid != getpid())
        return -ECHILD; /* the slot is a fork parent's */
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE; /* damaged in use: said once by guard.c */
    return 0;
}

/* Raises the aggregate by `bytes` if the limit allows (one CAS). */
static int charge_aggregate(const struct cs_ledger *l, int dev, uint64_t bytes)
{
    struct cs_ledger_header *h = l->hdr;
    const uint64_t limit = l->pinned ? l->pinned_limit[dev]
                                     : __atomic_load_n(&h->limit[dev], __ATOMIC_RELAXED);
    uint64_t cur = __atomic_load_n(&h->dev[dev].used, __ATOMIC_SEQ_CST), next;
    do {
        if (bytes > UINT64_MAX - cur)
            return -EOVERFLOW;
        next = cur + bytes;
        if (limit && next > limit)
            return -ENOMEM;
    } while (!__atomic_compare_exchange_n(&h->dev[dev].used, &cur, next, true,
                                          __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    uint64_t peak = __atomic_load_n(&h->dev[dev].peak, __ATOMIC_RELAXED);
    while (next > peak && !__atomic_compare_exchange_n(&h->dev[dev].peak, &peak, next, true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return 0;
}

static int charge_slot(struct cs_ledger *l, int dev, int cat, uint64_t bytes)
{
    struct cs_ledger_slot *s = cs__ledger_my_slot(l);
    cs__ledger_announce(s, dev, bytes);
    int r = charge_aggregate(l, dev, bytes);
    if (r == 0)
        __atomic_fetch_add(&s->bytes[dev][cat], bytes, __ATOMIC_SEQ_CST);
    cs__ledger_withdraw(s, dev, bytes);
    return r;
}

int cs__ledger_charge(struct cs_ledger *l, int dev, enum cs_mem_category cat, uint64_t bytes)
{
    int r = check_args(l, dev, (int)cat);
    if (r || bytes == 0)
        return r;
    r = charge_slot(l, dev, (int)cat, bytes);
    /* Truncated or overwritten meanwhile: whatever the charge did, it did
     * to counters that no longer exist, so nothing is admitted. */
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE;
    return r;
}

void cs__ledger_uncharge(struct cs_ledger *l, int dev, enum cs_mem_category cat, uint64_t bytes)
{
    int r = check_args(l, dev, (int)cat);
    if (r == -ENOTRECOVERABLE)
        return; /* nothing left to uncharge */
    if (r) {
        cs_warn_capped(8, SUBSYS, "ledger %s: uncharge of %" PRIu64 " bytes on device %d "
                       "ignored: %s", l->path, bytes, dev,
                       r == -EINVAL ? "bad device or category" : "no slot of this process");
        return;
    }
    if (bytes == 0)
        return;
    uint64_t agg;
    uint64_t took = cs__ledger_uncharge_slot(l, cs__ledger_my_slot(l), dev, (int)cat, bytes, &agg);
    if (!cs__ledger_usable(l))
        return; /* lost under us: the slot we read is the private copy */
    if (took < bytes)
        cs_warn_capped(8, SUBSYS, "ledger %s: uncharge of %" PRIu64 " bytes on device %d (%s) "
                       "exceeds the %" PRIu64 " charged to this process; clamped", l->path,
                       bytes, dev, cs__ledger_category_name((int)cat), took);
    if (agg < took)
        cs_warn_capped(8, SUBSYS, "ledger %s: device %d aggregate was %" PRIu64 " bytes short "
                       "on uncharge; clamped at 0", l->path, dev, took - agg);
}

uint64_t cs__ledger_used(const struct cs_ledger *l, int dev)
{
    if (!l->hdr || dev < 0 || dev >= CS_MAX_DEVICES)
        return 0;
    cs__ledger_usable(l); /* a header overwritten in place reads as the private copy */
    return __atomic_load_n(&l->hdr->dev[dev].used, __ATOMIC_RELAXED);
}

uint64_t cs__ledger_my_device_bytes(const struct cs_ledger *l, int dev)
{
    struct cs_ledger_slot *s = cs__ledger_my_slot(l);
    if (!s || dev < 0 || dev >= CS_MAX_DEVICES)
        return 0;
    uint64_t sum = 0;
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
        sum += __atomic_load_n(&s->bytes[dev][c], __ATOMIC_ACQUIRE);
    return sum;
}

uint64_t cs__ledger_min_peer_charge(const struct cs_ledger *l, int dev, enum cs_mem_category cat)
{
    if (!l->hdr || dev < 0 || dev >= CS_MAX_DEVICES || (int)cat < 0 || cat >= CS_MEM_NCATEGORIES)
        return 0;
    uint64_t best = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        if (i == l->slot || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CS_SLOT_LIVE)
            continue;
        uint64_t b = __atomic_load_n(&s->bytes[dev][cat], __ATOMIC_RELAXED);
        if (b && (!best || b < best))
            best = b;
    }
    return best;
}

int64_t *cs__ledger_pace_clock(const struct cs_ledger *l, int dev)
{
    return &l->hdr->dev[dev].pace_vt_ns;
}

uint64_t cs__ledger_limit(const struct cs_ledger *l, int dev)
{
    if (!l->hdr || dev < 0 || dev >= CS_MAX_DEVICES)
        return 0;
    cs__ledger_usable(l); /* a zeroed header must not read as "no limit" */
    if (l->pinned)
        return l->pinned_limit[dev];
    return __atomic_load_n(&l->hdr->limit[dev], __ATOMIC_RELAXED);
}
