/*
 * Accounting (account.h): the ledger decides, the HAMi region follows.
 * Only this file calls the region's projection (cs__hami_sync_*), so a
 * slot can change nowhere without the region seeing it.
 */
#include "account/account.h"

#include <errno.h>

#include "hami/hami.h"
#include "ledger/ledger.h"

int cs__account_charge(struct cs_ledger *l, int dev, enum cs_mem_category cat, uint64_t bytes,
                       void (*reclaim)(void))
{
    int rc = cs__ledger_charge(l, dev, cat, bytes);
    /* Over budget: bytes of dead processes may still be counted, in their
     * slots or beyond them; reaping and healing return both. Failing that,
     * the caller uncharges what the driver released since (reclaim), and
     * one more reap and attempt follow. */
    for (int step = 0; rc == -ENOMEM && step < 2; step++) {
        if (step == 1) {
            if (!reclaim)
                break;
            reclaim();
        }
        cs__ledger_reap(l);
        rc = cs__ledger_charge(l, dev, cat, bytes);
    }
    if (rc == 0)
        cs__hami_sync_slot(l->slot);
    else if (rc == -ENOMEM)
        cs__hami_sync_all(); /* the refusal reaped the dead first */
    return rc;
}

void cs__account_uncharge(struct cs_ledger *l, int dev, enum cs_mem_category cat,
                          uint64_t bytes)
{
    if (!bytes)
        return;
    cs__ledger_uncharge(l, dev, cat, bytes);
    cs__hami_sync_slot(l->slot);
}

int cs__account_share_from_slot(struct cs_ledger *l, uint64_t key, int dev,
                                enum cs_mem_category cat, uint64_t bytes)
{
    int j = cs__ledger_share_make(l, key, dev, cat, bytes, true);
    if (j >= 0)
        cs__hami_sync_slot(l->slot); /* our slot gave the bytes up */
    return j;
}

int cs__account_reap(struct cs_ledger *l)
{
    int n = cs__ledger_reap(l);
    cs__hami_sync_all();
    return n;
}

int cs__account_claim(struct cs_ledger *l)
{
    int rc = cs__ledger_claim(l);
    if (!rc)
        cs__hami_sync_slot(l->slot);
    return rc;
}

void cs__account_leave(struct cs_ledger *l)
{
    int slot = l->slot;
    cs__ledger_leave(l);
    cs__hami_sync_slot(slot);
}

int cs__account_open_region(const struct cs_config *cfg, struct cs_ledger *l)
{
    int rc = cs__hami_open(cfg, l);
    if (!rc)
        cs__hami_sync_all();
    return rc;
}
