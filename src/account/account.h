/*
 * Accounting: the one owner of a charge. Every charge of device memory to
 * the tenant, and every uncharge, goes through here: the ledger's
 * counters (src/ledger, the source of truth), the retries that free room
 * before a refusal stands, and the HAMi region's projection of the ledger
 * (src/hami), which follows every change of a slot made here.
 *
 * The ledger is handed in by the caller (hook's cs__ledger()); what frees
 * room that only the caller knows of (mem's pool and graph charges the
 * driver has released since) is handed in as a function, so this module
 * knows nothing above it.
 *
 * Threads: any thread may call these; the state they touch is the
 * ledger's and the region's mappings, through atomics only.
 */
#ifndef CS_ACCOUNT_ACCOUNT_H
#define CS_ACCOUNT_ACCOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "cushare/ledger.h"

struct cs_config;
struct cs_ledger;

/* Charges `bytes` of category `cat` on `dev` to our slot if the budget
 * allows: 0, or the ledger's -errno (-ENOMEM over budget). Before a
 * refusal stands it reaps dead processes (their slots and what they left
 * beyond them) and tries again, then calls reclaim (if not NULL) and
 * tries once more. The HAMi region follows: our slot after a charge, every
 * slot after a refusal (the reap freed some). */
int cs__account_charge(struct cs_ledger *l, int dev, enum cs_mem_category cat, uint64_t bytes,
                       void (*reclaim)(void));

/* Uncharges what cs__account_charge charged (clamped and logged by the
 * ledger when more than was charged); the region follows. */
void cs__account_uncharge(struct cs_ledger *l, int dev, enum cs_mem_category cat,
                          uint64_t bytes);

/* Moves `bytes` that our slot holds on dev into a new share carrying key
 * (cs__ledger_share_make with from_slot); the region follows our slot.
 * The share's index or -errno (the charge then stays in our slot). */
int cs__account_share_from_slot(struct cs_ledger *l, uint64_t key, int dev,
                                enum cs_mem_category cat, uint64_t bytes);

/* Reaps dead processes (cs__ledger_reap) and projects every slot. */
int cs__account_reap(struct cs_ledger *l);

/* Claims our slot (cs__ledger_claim) and projects it. */
int cs__account_claim(struct cs_ledger *l);

/* Normal exit: leaves our slot (cs__ledger_leave) and projects it free. */
void cs__account_leave(struct cs_ledger *l);

/* Opens the HAMi region at cfg->hami_path (cs__hami_open; no-op without
 * one) as the projection of `l`, and projects every slot. 0 or -errno. */
int cs__account_open_region(const struct cs_config *cfg, struct cs_ledger *l);

#endif
