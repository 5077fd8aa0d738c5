/*
 * A charge, family by family: charge the bytes against the device budget
 * first, then call the driver, then record the charge against the handle
 * the driver returned, or uncharge. Two tenants racing can never exceed a
 * budget because the ledger's per-device counter is only ever raised by a
 * successful compare-and-swap below the limit. These are thin wrappers of
 * src/account, which owns the charge, its retries and the HAMi region.
 */
#ifndef CS_MEM_CHARGE_H
#define CS_MEM_CHARGE_H

#include <stdint.h>

#include "hook/runtime.h"
#include "ledger/ledger.h"
#include "mem/track.h"

/* Charges `bytes` on `dev`: CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY.
 * Before refusing, account reaps dead slots and has the pool and graph
 * charges recharged to what the driver holds (cs__pools_recharge), so a
 * budget is not refused on account of memory that has already gone. */
CUresult cs__charge(int dev, enum cs_mem_category cat, uint64_t bytes);

/* Uncharges what cs__charge charged. */
void cs__uncharge(int dev, enum cs_mem_category cat, uint64_t bytes);

/* Uncharges what a record holds: its bytes from our slot, or our hold
 * of the share that took them over (vmm.c). */
void cs__uncharge_tracked(const struct cs_tracked *t);

/* Records a successful allocation, owned by the calling thread's current
 * context; on bookkeeping failure uncharges the bytes and returns -ENOMEM
 * (the caller frees the driver allocation). */
int cs__record_charge(enum cs_track_kind kind, uint64_t key, int dev, enum cs_mem_category cat,
                      uint64_t bytes);

/* Frees a tracked object: takes its record first (so the driver cannot
 * reissue the handle and another thread record it meanwhile), calls
 * destroy(key, ctx), then uncharges the bytes, or restores the record if
 * the driver refused. Objects never charged go to the driver untouched. */
CUresult cs__free_tracked(enum cs_track_kind kind, uint64_t key,
                          CUresult (*destroy)(uint64_t key, void *ctx), void *ctx);

/* Frees the record of `key` and uncharges its bytes. 0 or -ENOENT. */
int cs__uncharge_record(enum cs_track_kind kind, uint64_t key);

/* Moves a charge from `have` to `want` bytes (after the driver told us
 * the real size): CUDA_SUCCESS, or OOM with the original charge kept. */
CUresult cs__recharge(int dev, enum cs_mem_category cat, uint64_t have, uint64_t want);

/* Re-reads the reserved size of every pool / graph pool we charged and
 * recharges each to it: what the driver released since is uncharged
 * (pool.c). The reclaim step of a refused charge (src/account). */
void cs__pools_recharge(void);

/* The slice view of device `dev` given the physical figures (views.c):
 * total = min(limit, physical), free = min(physical free, total - used)
 * (0 when used >= total); the physical figures when `dev` has no budget. */
void cs__slice_view(int dev, uint64_t phys_total, uint64_t phys_free, uint64_t *total,
                    uint64_t *free_out);

/* After a graph launch: recharges the graph memory of the current device
 * to the driver's reservation (graph.c). */
void cs__graph_after_launch(void);

/* Re-reads every graph memory charge and uncharges what was released
 * (graph.c; part of cs__pools_recharge). */
void cs__graph_recharge(void);

/* A fork child starts with no graph / pool charges (graph.c, pool.c). */
void cs__graph_atfork_child(void);
void cs__pools_atfork_child(void);
void cs__vmm_atfork_child(void);

/* Memory shared across tenants (vmm.c): takes over the charge of what
 * this process holds and no tenant pays for any more. Cheap when this
 * process holds no such memory. Views and charges call it. */
void cs__vmm_take_over_unpaid(void);

/* The creator's cuMemAlloc record that holds share j (exported over legacy
 * IPC) goes: its payer files and its hold of the share (vmm.c). */
void cs__vmm_share_release(int j);

/* Fork child: resets every piece of src/mem's per-process state (contexts,
 * allocation records, pool and graph charges, their locks). Registered
 * with the one fork handler (core/fork.h); runs in the child, one thread. */
void cs__mem_atfork_child(void);

#endif
