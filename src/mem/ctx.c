/*
 * Contexts. A context costs device memory that no allocation call shows,
 * the first of a process and every further one alike, and destroying any
 * one of them frees its own share (what a real driver does, and its
 * figures: docs/accounting.md, "Contexts"). Rules:
 *
 *  - Every context this process creates is charged (CS_MEM_CONTEXT) what it
 *    costs on the device, once: a primary context when a retain makes it
 *    active (further retains only add driver references), a created one at
 *    cuCtxCreate_v2/_v3/_v4. Devices without a budget are not measured.
 *  - A context that does not fit is refused: the call undoes what the
 *    driver made and returns CUDA_ERROR_OUT_OF_MEMORY, with one error line.
 *  - When a context goes (cuCtxDestroy_v2; the release after which the
 *    primary is no longer active; a reset) its charge is uncharged, and so
 *    is every allocation the driver freed with it (track.c: context-owned
 *    records). Pools, VMM handles and graph memory stay charged: the driver
 *    keeps them until they are freed explicitly, even when the process has
 *    no context left (measured).
 *
 * Admission keeps DESIGN.md decision 2 (charge first) as far as a size
 * known only afterwards allows: an estimate is charged before the driver
 * call (this process's last measurement on the device, else the smallest
 * context charge of another process of the tenant there), then the charge
 * is recharged to the measured size. With no estimate the creation runs uncharged while
 * holding the tenant's context-measure lock of the device (an OFD lock on
 * byte CS_LEDGER_CTX_LOCK(dev) of the ledger file), so at most one
 * unmeasured context per tenant and device can be on the GPU beyond the
 * budget, and only until it is measured and refused.
 *
 * Measurement: NVML's figure for this process on the device after the
 * driver call, minus the figure before, minus the change of this process's
 * own ledger charges on the device over the same window (allocations of
 * other threads). NVML does not list a process that has no context on the
 * device, although the driver may still hold its pools and VMM memory
 * there: then the "before" is what the ledger holds for us on the device.
 * Residual races: docs/accounting.md.
 *
 * State: the table below and last_cost, guarded by ctx_mu. ctx_mu is held
 * across the driver's context calls (which the driver serialises anyway),
 * so no other context of this process appears or goes inside a measurement
 * window; allocation paths never take it. Lock order: ctx_mu, then the
 * measure lock, then whatever a charge takes (pool and graph locks, the
 * ledger's slot mutex).
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"
#include "core/uuid.h"
#include "identity/identity.h"
#include "limiter/limiter.h"
#include "mem/charge.h"

#define SUBSYS "mem"
/* Live contexts of one process we can account for. About 60 contexts fit
 * an H200 at once; a creation beyond the table is refused. */
#define CTX_MAX 256

/* A live context of this process: a created one, or a primary while the
 * driver keeps it active. An entry is freed (under ctx_mu) as soon as the
 * driver has destroyed its context, and creations run under ctx_mu too, so
 * a handle the driver reuses always finds a fresh entry; the records of
 * the old context were taken out before it was destroyed (take_owned). */
struct ctx_entry {
    CUcontext ctx;      /* NULL: free entry */
    int dev;
    bool primary;
    uint64_t charged;   /* CS_MEM_CONTEXT bytes charged for it */
};

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ctx_entry table[CTX_MAX];          /* guarded by ctx_mu */
/* Last measured cost on a device of a context that was the process's only
 * one there [0], or a further one [1]: the next estimate. ctx_mu. */
static uint64_t last_cost[CS_MAX_DEVICES][2];

/* ---- fork ---------------------------------------------------------------- */

/* A fork child has no CUDA state: the driver gives it no contexts and no
 * memory of the parent's, so it must not uncharge the parent's charges
 * when it destroys a context whose handle happens to equal a parent's.
 * last_cost stays: it is what a context costs on the device, for anyone.
 * Registered with the one fork handler (core/fork.h). */
void cs__mem_atfork_child(void)
{
    cs__mutex_reset(&ctx_mu);
    memset(table, 0, sizeof table);
    cs__track_reset();
    cs__pools_atfork_child();
    cs__vmm_atfork_child();
    cs__graph_atfork_child();
}
CS_FORK_CHILD_RESET(cs__mem_atfork_child, CS_FORK_MEM)

static void lock_contexts(void)
{
    pthread_mutex_lock(&ctx_mu);
}

static void unlock_contexts(void)
{
    pthread_mutex_unlock(&ctx_mu);
}

/* ---- the table (ctx_mu held) ----------------------------------------------- */

static struct ctx_entry *created_entry(CUcontext ctx)
{
    if (!ctx)
        return NULL;
    for (int i = 0; i < CTX_MAX; i++)
        if (table[i].ctx == ctx && !table[i].primary)
            return &table[i];
    return NULL;
}

static struct ctx_entry *primary_entry(int dev)
{
    for (int i = 0; i < CTX_MAX; i++)
        if (table[i].ctx && table[i].primary && table[i].dev == dev)
            return &table[i];
    return NULL;
}

static struct ctx_entry *free_entry(void)
{
    for (int i = 0; i < CTX_MAX; i++)
        if (!table[i].ctx)
            return &table[i];
    return NULL;
}

static bool has_context_on(int dev)
{
    for (int i = 0; i < CTX_MAX; i++)
        if (table[i].ctx && table[i].dev == dev)
            return true;
    return false;
}

/* 1 the primary context of `dev` is active, 0 it is not, -1 unknown. */
static int primary_active(int dev)
{
    unsigned flags = 0;
    int active = 0;
    if (!cs_drv.cuDevicePrimaryCtxGetState ||
        cs_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS)
        return -1;
    return active ? 1 : 0;
}

/* ---- measuring ------------------------------------------------------------- */

/* NVML's bytes for this process on `dev`; false when NVML does not list it
 * (no context there, or a driver that reports other PIDs). */
static bool nvml_bytes(int dev, uint64_t *out)
{
    unsigned long long b = 0;
    if (!cs__device_info(dev)->known ||
        cs__nvml_process_memory(&cs__device_info(dev)->uuid, (unsigned)getpid(), &b))
        return false;
    *out = b;
    return true;
}

/* NVML listed us under getpid(): identity tier "nvml-namespace" holds, for
 * free. */
static void note_nvml_identity(void)
{
    struct cs_ledger_slot *slot = cs__ledger_my_slot(cs__ledger());
    if (slot && __atomic_load_n(&slot->identity_tier, __ATOMIC_ACQUIRE) == CS_IDENTITY_UNKNOWN) {
        cs__ledger_set_identity(cs__ledger(), (int32_t)getpid(), CS_IDENTITY_NVML_NS, 0);
        cs__phase_identity(CS_IDENTITY_NVML_NS, 0);
    }
}

/* Before and after one driver call that makes a context on `dev`. `held`
 * is the estimate already charged for that context: in our slot, but not
 * yet memory the driver holds. */
struct window {
    int dev;
    uint64_t held;
    uint64_t phys_before;   /* what the driver held for us before */
    uint64_t own_before;    /* what our slot held, without `held` */
};

static uint64_t own_bytes(const struct window *w)
{
    uint64_t b = cs__ledger_my_device_bytes(cs__ledger(), w->dev);
    return b > w->held ? b - w->held : 0;
}

static void window_open(struct window *w, int dev, uint64_t held, bool first)
{
    w->dev = dev;
    w->held = held;
    w->own_before = own_bytes(w);
    /* Without a context NVML does not list us (and asking would cost the
     * start-up path an NVML query): what the driver still holds of ours on
     * the device is what the ledger holds for us there. */
    if (first || !nvml_bytes(dev, &w->phys_before))
        w->phys_before = w->own_before;
}

/* The new context's cost, or false when NVML cannot see this process. */
static bool window_close(const struct window *w, uint64_t *cost)
{
    uint64_t after;
    if (!nvml_bytes(w->dev, &after))
        return false;
    note_nvml_identity();
    int64_t own_change = (int64_t)own_bytes(w) - (int64_t)w->own_before;
    int64_t c = (int64_t)after - (int64_t)w->phys_before - own_change;
    *cost = c > 0 ? (uint64_t)c : 0;
    return true;
}

/* What to charge before the driver makes a context on `dev`: the cost
 * this process last measured there for a context of the same kind, else
 * of the other kind (on the H200 they are equal), else the smallest
 * context charge of another process of the tenant there (each holds at
 * least one whole context); 0 when nobody knows. */
static uint64_t estimate(int dev, bool further)
{
    uint64_t e = last_cost[dev][further];
    if (!e)
        e = last_cost[dev][!further];
    if (!e)
        e = cs__ledger_min_peer_charge(cs__ledger(), dev, CS_MEM_CONTEXT);
    return e;
}

/* The tenant's context-measure lock of a device (file comment). If it
 * cannot be taken the creation goes on without it: a broken lock must not
 * stop CUDA, and the worst case is the uncharged creation it guards. */
struct measure_lock {
    struct cs_postinit_lock lk;
    bool held;
};

static void measure_lock_take(struct measure_lock *m, int dev)
{
    m->held = false;
    int rc = cs__postinit_lock_init(&m->lk, cs__ledger()->fd, CS_LEDGER_CTX_LOCK(dev),
                                    CS_POSTINIT_WAIT_AUTO);
    if (!rc) {
        rc = cs__postinit_lock_acquire(&m->lk, NULL);
        if (rc)
            cs__postinit_lock_destroy(&m->lk);
    }
    if (rc)
        cs_warn_capped(4, SUBSYS, "device %d: the context-measure lock of %s cannot be taken "
                       "(%s); measuring a new context without it", dev, cs__ledger()->path,
                       strerror(-rc));
    m->held = rc == 0;
}

static void measure_lock_drop(struct measure_lock *m)
{
    if (!m->held)
        return;
    cs__postinit_lock_release(&m->lk);
    cs__postinit_lock_destroy(&m->lk);
    m->held = false;
}

/* ---- messages -------------------------------------------------------------- */

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

static void say_refused(int dev, uint64_t cost, bool estimated)
{
    char uuid[CS_UUID_STRLEN] = "UUID unknown";
    if (cs__device_info(dev)->known)
        cs__format_uuid((const uint8_t *)cs__device_info(dev)->uuid.bytes, uuid);
    uint64_t limit = cs__device_limit(dev), used = cs__ledger_used(cs__ledger(), dev);
    cs_err(SUBSYS, "device %d (%s): a new context needs %.1f MiB%s, but only %.1f MiB of the "
           "%.1f MiB budget is left; refused with CUDA_ERROR_OUT_OF_MEMORY. Give the tenant a "
           "larger budget (cushare run --mem SIZE, or CUDA_DEVICE_MEMORY_LIMIT / "
           "CUDA_DEVICE_MEMORY_LIMIT_%d)",
           dev, uuid, mib(cost), estimated ? " (as much as a context measured before on it)" : "",
           mib(used < limit ? limit - used : 0), mib(limit), dev);
}

static void say_not_charged(int dev)
{
    cs_warn_capped(4, SUBSYS, "device %d: NVML gives no memory figure for this process (pid %d), "
                   "so a new context cannot be measured: it is NOT charged to the budget, and "
                   "the GPU holds that much more for this tenant than the ledger shows",
                   dev, (int)getpid());
}

/* ---- making a context ------------------------------------------------------ */

enum ctx_call { CALL_RETAIN, CALL_CREATE_V2, CALL_CREATE_V3, CALL_CREATE_V4 };

/* One driver call that makes a context, with its arguments. */
struct ctx_call_args {
    enum ctx_call call;
    CUdevice dev;
    unsigned int flags;
    CUexecAffinityParam *affinity;
    int naffinity;
    CUctxCreateParams *params;
};

static CUresult make_real(const struct ctx_call_args *a, CUcontext *out)
{
    switch (a->call) {
    case CALL_RETAIN:
        return cs_real.cuDevicePrimaryCtxRetain(out, a->dev);
    case CALL_CREATE_V2:
        return cs_real.cuCtxCreate_v2(out, a->flags, a->dev);
    case CALL_CREATE_V3:
        return cs_real.cuCtxCreate_v3(out, a->affinity, a->naffinity, a->flags, a->dev);
    case CALL_CREATE_V4:
        return cs_real.cuCtxCreate_v4(out, a->params, a->flags, a->dev);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Undoes make_real after a refusal. A created context is destroyed (which
 * also pops it from this thread). A primary is released; the driver's
 * reference count survives a reset (measured), so an older retain may keep
 * the context we just activated alive: it holds nothing yet, so a reset
 * returns it to the inactive state it had before our retain. */
static void unmake_real(const struct ctx_call_args *a, CUcontext ctx, bool primary_was_active)
{
    if (a->call != CALL_RETAIN) {
        cs_real.cuCtxDestroy_v2(ctx);
        return;
    }
    cs_real.cuDevicePrimaryCtxRelease_v2(a->dev);
    if (!primary_was_active && primary_active(a->dev) == 1)
        cs_real.cuDevicePrimaryCtxReset_v2(a->dev);
}

static void record(struct ctx_entry *e, CUcontext ctx, int dev, bool primary, uint64_t charged)
{
    e->ctx = ctx;
    e->dev = dev;
    e->primary = primary;
    e->charged = charged;
}

/* Makes the context with `est` already charged for it, measures it and
 * recharges to the cost (*charged); a context that does not fit is undone.
 * ctx_mu held. */
/* Room asked of parking for a context nobody has measured yet: more than
 * a context takes on the devices we know. */
#define CTX_ROOM_GUESS (1ull << 30)

/* make_real, and on a full device (parking on) again after each park of
 * idle tenants that makes room (src/hook/gate.c). The window measures our
 * own bytes, which others' parks do not move. */
static CUresult make_real_with_room(const struct ctx_call_args *a, CUcontext *out, uint64_t est)
{
    CUresult r = make_real(a, out);
    for (int64_t until = 0; r == CUDA_ERROR_OUT_OF_MEMORY &&
                            cs__park_make_room_for(est ? est : CTX_ROOM_GUESS, &until) == 0;)
        r = make_real(a, out);
    return r;
}

static CUresult make_measured(const struct ctx_call_args *a, CUcontext *out, bool further,
                              uint64_t est, uint64_t *charged)
{
    const int dev = a->dev;
    const bool was_active = a->call == CALL_RETAIN && primary_active(dev) == 1;
    struct window w;
    window_open(&w, dev, est, !further);
    CUresult r = make_real_with_room(a, out, est);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_CONTEXT, est);
        return r;
    }
    uint64_t cost;
    if (!window_close(&w, &cost)) {
        cs__uncharge(dev, CS_MEM_CONTEXT, est);
        say_not_charged(dev);
        *charged = 0;
        return CUDA_SUCCESS;
    }
    /* Remembered even when refused: a retry is then refused on this size
     * before the driver puts another uncharged context on the GPU. */
    if (cost)
        last_cost[dev][further] = cost;
    if (cs__recharge(dev, CS_MEM_CONTEXT, est, cost) != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_CONTEXT, est);
        unmake_real(a, *out, was_active);
        *out = NULL;
        say_refused(dev, cost, false);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *charged = cost;
    return CUDA_SUCCESS;
}

/* Charges an estimate (or, with none, takes the measure lock) and makes
 * the context on a device with a budget. ctx_mu held. */
static CUresult make_charged(const struct ctx_call_args *a, CUcontext *out, uint64_t *charged)
{
    const int dev = a->dev;
    const bool further = has_context_on(dev);
    struct measure_lock ml = {.held = false};
    uint64_t est = estimate(dev, further);
    if (!est) {
        measure_lock_take(&ml, dev);
        est = estimate(dev, further); /* someone may have measured while we waited */
    }
    CUresult r = est ? cs__charge(dev, CS_MEM_CONTEXT, est) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = make_measured(a, out, further, est, charged);
    else
        say_refused(dev, est, true);
    measure_lock_drop(&ml);
    return r;
}

/* Makes a context that is new on the GPU and enters it in the table.
 * ctx_mu held. */
static CUresult make_new(const struct ctx_call_args *a, CUcontext *out)
{
    struct ctx_entry *e = free_entry();
    if (!e) {
        cs_err(SUBSYS, "device %d: this process has %d live contexts, as many as cushare can "
               "account for; a new one is refused with CUDA_ERROR_OUT_OF_MEMORY",
               (int)a->dev, CTX_MAX);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t charged = 0;
    CUresult r = cs__device_limit(a->dev) ? make_charged(a, out, &charged)
                                          : make_real_with_room(a, out, 0);
    if (r == CUDA_SUCCESS)
        record(e, *out, a->dev, a->call == CALL_RETAIN, charged);
    return r;
}

/* ---- a context goes ---------------------------------------------------------- */

static void uncharge_each(const struct cs_tracked *t, void *arg)
{
    (void)arg;
    cs__uncharge_tracked(t);
}

/* The records of what the driver frees with `ctx`, taken out before the
 * driver call: once it has freed them it may hand the same addresses to
 * another context's allocation, whose record must not be mistaken for
 * these. A free racing with this (undefined behaviour by cuda.h) finds no
 * record and passes through; if the context then stays, its record comes
 * back and is uncharged when the context goes: an over-count meanwhile,
 * never an under-count. */
static void take_owned(CUcontext ctx, struct cs_track_batch *owned)
{
    cs__track_take_ctx((uint64_t)(uintptr_t)ctx, owned);
}

/* The driver destroyed `ctx` (entry `e`, NULL if we never charged it) and
 * everything in `owned`. */
static void context_gone(CUcontext ctx, struct ctx_entry *e, struct cs_track_batch *owned)
{
    cs__track_batch_each(owned, uncharge_each, NULL);
    cs__track_batch_free(owned);
    if (e) {
        cs__uncharge(e->dev, CS_MEM_CONTEXT, e->charged);
        memset(e, 0, sizeof *e);
    }
    cs__limiter_ctx_gone(ctx);
}

/* ---- entry points ------------------------------------------------------------ */

static bool device_in_range(CUdevice dev)
{
    return dev >= 0 && dev < CS_MAX_DEVICES;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxRetain);
    if (!pctx || !device_in_range(dev))
        return cs_real.cuDevicePrimaryCtxRetain(pctx, dev);
    lock_contexts();
    CUresult r;
    if (primary_entry(dev)) {
        /* One more reference to an active context: no new memory. */
        r = cs_real.cuDevicePrimaryCtxRetain(pctx, dev);
    } else {
        struct ctx_call_args a = {.call = CALL_RETAIN, .dev = dev};
        r = make_new(&a, pctx);
    }
    unlock_contexts();
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxRelease_v2);
    if (!device_in_range(dev))
        return cs_real.cuDevicePrimaryCtxRelease_v2(dev);
    lock_contexts();
    struct ctx_entry *e = primary_entry(dev);
    struct cs_track_batch owned = {NULL};
    if (e)
        take_owned(e->ctx, &owned);
    CUresult r = cs_real.cuDevicePrimaryCtxRelease_v2(dev);
    /* Only the release that drops the driver's count to zero ends it. */
    if (r == CUDA_SUCCESS && e && primary_active(dev) == 0)
        context_gone(e->ctx, e, &owned);
    else
        cs__track_batch_restore(&owned);
    unlock_contexts();
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxReset_v2);
    if (!device_in_range(dev))
        return cs_real.cuDevicePrimaryCtxReset_v2(dev);
    lock_contexts();
    struct ctx_entry *e = primary_entry(dev);
    struct cs_track_batch owned = {NULL};
    if (e)
        take_owned(e->ctx, &owned);
    CUresult r = cs_real.cuDevicePrimaryCtxReset_v2(dev);
    if (r == CUDA_SUCCESS && e)
        context_gone(e->ctx, e, &owned);
    else
        cs__track_batch_restore(&owned);
    unlock_contexts();
    return r;
}

static CUresult create(const struct ctx_call_args *a, CUcontext *pctx)
{
    if (!pctx || !device_in_range(a->dev))
        return make_real(a, pctx);
    lock_contexts();
    CUresult r = make_new(a, pctx);
    unlock_contexts();
    return r;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v2);
    struct ctx_call_args a = {.call = CALL_CREATE_V2, .dev = dev, .flags = flags};
    return create(&a, pctx);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v3);
    struct ctx_call_args a = {.call = CALL_CREATE_V3, .dev = dev, .flags = flags,
                              .affinity = paramsArray, .naffinity = numParams};
    return create(&a, pctx);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v4);
    struct ctx_call_args a = {.call = CALL_CREATE_V4, .dev = dev, .flags = flags,
                              .params = ctxCreateParams};
    return create(&a, pctx);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    CS_ENTER(cuCtxDestroy_v2);
    lock_contexts();
    struct cs_track_batch owned = {NULL};
    take_owned(ctx, &owned);
    CUresult r = cs_real.cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS)
        context_gone(ctx, created_entry(ctx), &owned);
    else
        cs__track_batch_restore(&owned);
    unlock_contexts();
    return r;
}
