/*
 * Parking a tenant: every process of it locked and checkpointed together
 * through the driver's checkpoint API, and restored and unlocked together
 * (docs/parking.md). Shared by the preloaded library (wake on demand,
 * making room) and the command (`cushare park` / `cushare wake`).
 *
 * Who performs it is abstracted behind struct cs_ckpt_ops: the five
 * driver calls on a pid, resolved by the caller (the library through its
 * door to the driver, the command by loading libcuda.so.1 itself).
 *
 * Crash contract: the performer holds the tenant's park lock
 * (CS_LEDGER_PARK_LOCK, an OFD lock the kernel drops however it dies) for
 * the whole operation. PARKING or WAKING found without a holder means the
 * performer died; whoever takes the lock next drives every process back to
 * running from whatever driver state it is in (cs__park_wake), so a
 * tenant is always running, or parked and woken by its next call — never
 * locked for good. run_request stays CS_PARKED from the first step of a
 * park until a wake completes, so the tenant's next intercepted call
 * always wakes it.
 */
#ifndef CS_PARK_PARK_H
#define CS_PARK_PARK_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "ledger/ledger.h"

/* The driver's checkpoint calls, as the performer makes them. */
struct cs_ckpt_ops {
    CUresult (*get_state)(int pid, CUprocessState *state);
    CUresult (*lock)(int pid, CUcheckpointLockArgs *args);
    CUresult (*checkpoint)(int pid, CUcheckpointCheckpointArgs *args);
    CUresult (*restore)(int pid, CUcheckpointRestoreArgs *args);
    CUresult (*unlock)(int pid, CUcheckpointUnlockArgs *args);
    /* Optional: frees at least `bytes` of device memory by parking other
     * tenants (the library's make-room); 0 or -errno. NULL: nobody. */
    int (*make_room)(uint64_t bytes, void *ctx);
    void *ctx;
    /* Optional test hook: called at every named step of a park or wake
     * (kill points of the crash tests); NULL in production. */
    void (*step)(const char *name, int index);
};

struct cs_park_opts {
    unsigned lock_timeout_ms;  /* how long calls already inside the driver
                                  may take to finish (and our gate to empty) */
    bool skip_host_check;      /* tests of the mechanism only */
};

/* What happened, for the caller's message. */
struct cs_park_result {
    int procs;                 /* processes parked or woken */
    uint64_t bytes;            /* device bytes moved */
    int64_t ns;                /* how long it took */
    CUresult cu;               /* driver's answer of the failed step, or 0 */
    char why[256];             /* a refusal or failure, in words; "" on success */
};

/* Parks the tenant of ledger l (opened read-write). 0 parked (or it was
 * already), -EBUSY another park/wake holds the lock or the tenant is busy,
 * -EXDEV its processes share device memory, -ENOMEM host memory would not
 * hold it, -ESRCH no live process, -EIO the driver refused (r->cu); every
 * failure leaves the tenant running. */
int cs__park_tenant(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                    const struct cs_park_opts *o, struct cs_park_result *r);

/* Wakes the tenant of ledger l: restores and unlocks every process (also
 * recovers a park or wake whose performer died). `wait` blocks for the park
 * lock (a tenant's own thread), else -EBUSY when held. 0 running, -EAGAIN
 * the GPU has no room even after make_room (still parked; try later),
 * -EIO the driver failed (r->cu). */
int cs__park_wake(struct cs_ledger *l, const struct cs_ckpt_ops *ops, bool wait,
                  struct cs_park_result *r);

/* The tenant's park state (enum cs_park_state) and its name. */
uint32_t cs__park_state(const struct cs_ledger *l);
const char *cs__park_state_name(uint32_t state);

/* Bytes the tenant holds on the GPU, all devices (what a park moves). */
uint64_t cs__park_tenant_bytes(const struct cs_ledger *l);

/* Most recent intercepted call of any live process of the tenant
 * (CLOCK_MONOTONIC_COARSE ns, 0 never) and threads inside calls now. */
int64_t cs__park_last_active(const struct cs_ledger *l, uint32_t *in_call);

/* Whether the tenant holds device memory the driver cannot checkpoint
 * (shared between processes, or imported from another tenant). */
bool cs__park_shares_memory(const struct cs_ledger *l);

/* Frees at least `bytes` of device memory by parking idle tenants of the
 * node other than the caller's (policy.h chooses them). A make_room for
 * struct cs_ckpt_ops; ctx is a struct cs_park_room. 0 when enough came
 * free, -ENOSPC when idle tenants cannot free that much. */
struct cs_park_room {
    const char *registry;           /* node registry (NULL: the default) */
    const struct cs_ckpt_ops *ops;  /* how to park them */
    int32_t priority;               /* the requester's */
    int64_t idle_ns;                /* idle after this long */
    uint64_t self_dev, self_ino;    /* the requester's ledger: never a victim */
};
int cs__park_make_room(uint64_t bytes, void *ctx);

/* Host memory: MemAvailable (bytes) and the cgroup v2 limit and usage of
 * process pid (limit 0: none or unreadable). 0 or -errno. */
int cs__park_host_memory(int pid, uint64_t *mem_available, uint64_t *cg_limit,
                         uint64_t *cg_usage);

#endif
