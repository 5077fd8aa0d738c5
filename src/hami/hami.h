/*
 * The HAMi v1 shared region kept at CUDA_DEVICE_MEMORY_SHARED_CACHE when
 * that path ends in ".cache" (include/cushare/hami_v1.h, docs/kubernetes.md).
 * It is a projection of the ledger, never the source of truth: admission
 * reads only the ledger. Each process writes the region slot with the
 * index of its own ledger slot (so no lock is needed between processes),
 * and zeroes slots whose ledger slot it saw FREE after a reap. From the
 * region it reads the monitor's feedback, which steers only the compute
 * limiter: recent_kernel < 0 holds this tenant's limited launches back,
 * utilization_switch decides whether policy `default` paces.
 *
 * State: the mapping is set once under the init mutex (cs__hami_open,
 * first initialisation) and read-only afterwards; a fork child keeps it
 * (MAP_SHARED, same file). Everything below is a no-op without a region.
 */
#ifndef CS_HAMI_HAMI_H
#define CS_HAMI_HAMI_H

#include <stdbool.h>
#include <stdint.h>

struct cs_config;
struct cs_ledger;

/* Opens or creates the region at cfg->hami_path (no-op when empty) as the
 * projection of `ledger`, the process's open ledger, which the region
 * code reads from then on (handed over by src/account, which owns the
 * projection: src/hami sits below it).
 * 0, or -errno after one message naming the file and the fix (a file
 * that is not a HAMi v1 region, or cannot be created). */
int cs__hami_open(const struct cs_config *cfg, const struct cs_ledger *ledger);

/* Copies ledger slot `idx` (ours, or one found FREE) into region slot idx.
 * Only src/account calls these two, after each change it makes. */
void cs__hami_sync_slot(int idx);
/* Every slot, after a reap returned dead processes' bytes. */
void cs__hami_sync_all(void);
/* Device count, once the driver told it (after cuInit), and the UUIDs the
 * ledger publishes for those devices. */
void cs__hami_set_devices(int count);

/* Called from the limiter's armed launch path, at most once a second per
 * process: marks the tenant active for the monitor (recent_kernel = 2,
 * last_kernel_time) unless the monitor blocks it, and refreshes our slot's
 * SM use. Returns true while the monitor blocks us (recent_kernel < 0). */
bool cs__hami_launch_tick(void);
/* The monitor's utilization_switch: 1 = the SM limit applies under policy
 * default, 0 = not; -1 without a region. */
int cs__hami_util_switch(void);
bool cs__hami_active(void);

#endif
