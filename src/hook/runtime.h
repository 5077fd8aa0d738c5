/*
 * Process-wide runtime state of the interposer: configuration, the ledger
 * handle and what we learnt about devices. One instance, cs_rt, owned by
 * src/hook/init.c:
 *   - cfg, ledger, device_count and dev[] are written once during
 *     initialisation (under the init mutex, before `ready` is published
 *     with release ordering) and read-only afterwards.
 * Contexts are src/mem/ctx.c's own state, not kept here.
 * A fork child resets `ready` in its atfork handler and initialises again
 * on its next CUDA call, claiming its own ledger slot.
 */
#ifndef CS_HOOK_RUNTIME_H
#define CS_HOOK_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/config.h"
#include "hook/drv.h"
#include "ledger/ledger.h"

struct cs_device_info {
    bool known;                  /* uuid/physical_total valid */
    CUuuid uuid;
    uint64_t physical_total;
};

struct cs_runtime {
    struct cs_config cfg;
    struct cs_ledger ledger;
    int device_count;
    struct cs_device_info dev[CS_MAX_DEVICES];
};

extern struct cs_runtime cs_rt;

/* Initialises once per process (and again in a fork child): parses the
 * configuration, loads the driver, opens the ledger and claims a slot.
 * Never touches the GPU. 0, or the sticky -errno of a failed attempt. */
int cs__init(void);

/* After the real cuInit succeeded: learns device UUIDs and totals. */
void cs__init_devices(void);

/* CUresult for a failed cs__init (fail closed: CUDA stays unusable). */
CUresult cs__init_error(int err);

/* Ledger device index of the calling thread's current context, or -1. */
int cs__current_device(void);

/* The calling thread's current context as a record key, 0 if none. */
uint64_t cs__current_context(void);

/* Start-up phases (include/cushare/phases.h). */
enum cs_phase {
    CS_PHASE_WRAPPER_ENTER,
    CS_PHASE_LEDGER_READY,
    CS_PHASE_REAL_INIT_DONE,
    CS_PHASE_IDENTITY_DONE,
};
void cs__phase_mark(enum cs_phase p);
void cs__phase_identity(uint32_t tier, uint64_t lock_waits);

/* Effective budget of ledger device `dev` (0 = none). */
uint64_t cs__device_limit(int dev);

#endif
