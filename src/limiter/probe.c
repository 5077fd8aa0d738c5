/*
 * The last identity tier: a before/after experiment that finds which PID
 * NVML uses for this process, for drivers that do not report namespace
 * PIDs when neither the broker nor a trusted procfs is available.
 *
 * HAMi retains a fresh context and diffs NVML's process list; our watcher
 * runs after the application's context exists, so the experiment is a
 * small allocation instead: snapshot NVML's per-process memory, allocate
 * PROBE_BYTES, snapshot again; the one PID whose usage grew by exactly
 * that much is us. Probes of one tenant are serialised by the post-init
 * record lock on the ledger (the kernel releases it if a prober dies, and
 * waiting never gives up), so two of our processes never blur each
 * other's difference; a coincidence with another tenant's allocation of
 * the same size shows up as zero or several matches and is retried. The
 * probe buffer is charged to the budget in the ledger directly (this file
 * sits below src/mem): a full budget fails the probe, which says so.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "account/account.h"
#include "core/log.h"
#include "identity/identity.h"
#include "limiter/internal.h"

#define SUBSYS "identity"
#define PROBE_BYTES (2ull << 20)
#define PROBE_TRIES 3
struct snapshot {
    nvmlProcessInfo_t *p; /* malloc'ed by cs__nvml_processes, or NULL */
    unsigned n;
};

static int snap(nvmlDevice_t d, struct snapshot *s)
{
    return cs__nvml_processes(d, &s->p, &s->n) ? -EIO : 0;
}

static unsigned long long used_by(const struct snapshot *s, unsigned pid)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->p[i].pid == pid)
            return s->p[i].usedGpuMemory;
    return 0;
}

/* The one PID whose usage grew by exactly PROBE_BYTES, or -EAGAIN. */
static int unique_grower(const struct snapshot *before, const struct snapshot *after,
                         pid_t *out)
{
    int found = 0;
    for (unsigned i = 0; i < after->n; i++) {
        unsigned pid = after->p[i].pid;
        if (after->p[i].usedGpuMemory - used_by(before, pid) == PROBE_BYTES) {
            *out = (pid_t)pid;
            found++;
        }
    }
    return found == 1 ? 0 : -EAGAIN;
}

/* One experiment on device `dev` with our primary context current. */
static int experiment(int dev, nvmlDevice_t nd, pid_t *out)
{
    struct snapshot before = {0}, after = {0};
    CUdeviceptr p;
    int rc = cs__account_charge(cs__ledger(), dev, CS_MEM_DATA, PROBE_BYTES, NULL);
    if (rc)
        return rc;
    rc = snap(nd, &before);
    if (!rc && cs_real.cuMemAlloc_v2(&p, PROBE_BYTES) == CUDA_SUCCESS) {
        rc = snap(nd, &after);
        cs_real.cuMemFree_v2(p);
        if (!rc)
            rc = unique_grower(&before, &after, out);
    } else if (!rc) {
        rc = -ENOMEM;
    }
    cs__account_uncharge(cs__ledger(), dev, CS_MEM_DATA, PROBE_BYTES);
    free(before.p);
    free(after.p);
    return rc;
}

int cs__identity_probe(int dev, nvmlDevice_t nd, pid_t *host_pid, uint32_t *waits)
{
    if (!cs_real.cuDevicePrimaryCtxRetain || !cs_drv.cuCtxPushCurrent_v2 ||
        !cs_drv.nvmlDeviceGetComputeRunningProcesses_v3)
        return -ENOSYS;
    struct cs_postinit_lock lock;
    int rc = cs__postinit_lock_init(&lock, cs__ledger()->fd, CS_POSTINIT_LOCK_OFFSET,
                                    CS_POSTINIT_WAIT_AUTO);
    if (rc)
        return rc;
    CUcontext ctx = NULL, popped;
    rc = cs__postinit_lock_acquire(&lock, waits);
    bool locked = rc == 0;
    if (!rc && cs_real.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        rc = -ENODEV;
    if (!rc && cs_drv.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
        rc = -EAGAIN;
        for (int i = 0; i < PROBE_TRIES && rc == -EAGAIN; i++)
            rc = experiment(dev, nd, host_pid);
        cs_drv.cuCtxPopCurrent_v2(&popped);
    } else if (!rc) {
        rc = -ENODEV;
    }
    if (ctx && cs_real.cuDevicePrimaryCtxRelease_v2)
        cs_real.cuDevicePrimaryCtxRelease_v2(dev);
    if (locked)
        cs__postinit_lock_release(&lock);
    cs__postinit_lock_destroy(&lock);
    if (rc)
        cs_info(SUBSYS, "legacy NVML probe on device %d failed: %s", dev, strerror(-rc));
    return rc;
}
