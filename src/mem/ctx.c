/*
 * Context overhead. A context costs device memory that no allocation call
 * shows (hundreds of MiB on current GPUs). Rule: when a process's first
 * context on a device with a budget appears, charge what NVML reports for
 * this process on that device at that moment (nothing else of ours can be
 * there yet); give it back when the process's last context there goes.
 * Devices without a budget are not measured (no NVML cost on start-up).
 * If NVML cannot see us (a driver that does not report namespace PIDs),
 * the charge is skipped with a warning: `cushare status` shows 0 context
 * bytes and the views under-report by the context size.
 */
#include <unistd.h>

#include "core/log.h"
#include "mem/admit.h"

static uint64_t measure_context(int dev)
{
    if (!cs_rt.dev[dev].known || cs__drv_load_nvml() || !cs_drv.nvmlInit_v2)
        return 0;
    unsigned long long bytes = 0;
    if (cs__nvml_process_memory(&cs_rt.dev[dev].uuid, (unsigned)getpid(), &bytes)) {
        cs_warn_capped(1, "mem",
                       "NVML does not list this process (pid %d) on device %d; context memory "
                       "is not charged to the budget",
                       (int)getpid(), dev);
        return 0;
    }
    /* NVML listed us under getpid(): identity tier 0 holds, for free. */
    struct cs_ledger_slot *slot = cs__ledger_my_slot(&cs_rt.ledger);
    if (slot && __atomic_load_n(&slot->identity_tier, __ATOMIC_ACQUIRE) == CS_IDENTITY_UNKNOWN) {
        cs__ledger_set_identity(&cs_rt.ledger, (int32_t)getpid(), CS_IDENTITY_NVML_NS, 0);
        cs__phase_identity(CS_IDENTITY_NVML_NS, 0);
    }
    return bytes;
}

void cs__ctx_created(int dev)
{
    if (dev < 0 || dev >= CS_MAX_DEVICES)
        return;
    struct cs_device_info *di = &cs_rt.dev[dev];
    if (__atomic_fetch_add(&di->ctx_refs, 1, __ATOMIC_ACQ_REL) != 0 || !cs__device_limit(dev))
        return;
    uint64_t bytes = measure_context(dev);
    if (bytes && cs__admit(dev, CS_MEM_CONTEXT, bytes) == CUDA_SUCCESS)
        __atomic_store_n(&di->ctx_charged, bytes, __ATOMIC_RELEASE);
    else if (bytes)
        cs_warn("mem", "device %d: the context alone (%llu bytes) exceeds the remaining budget",
                dev, (unsigned long long)bytes);
}

void cs__ctx_released(int dev, int all)
{
    if (dev < 0 || dev >= CS_MAX_DEVICES)
        return;
    struct cs_device_info *di = &cs_rt.dev[dev];
    uint64_t refs = __atomic_load_n(&di->ctx_refs, __ATOMIC_ACQUIRE);
    do {
        if (refs == 0)
            return;
    } while (!__atomic_compare_exchange_n(&di->ctx_refs, &refs, all ? 0 : refs - 1, false,
                                          __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    if (all || refs == 1) {
        uint64_t charged = __atomic_exchange_n(&di->ctx_charged, 0, __ATOMIC_ACQ_REL);
        cs__give_back(dev, CS_MEM_CONTEXT, charged);
    }
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxRetain);
    CUresult r = cs_real.cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_created(dev);
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxRelease_v2);
    CUresult r = cs_real.cuDevicePrimaryCtxRelease_v2(dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_released(dev, 0);
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CS_ENTER(cuDevicePrimaryCtxReset_v2);
    CUresult r = cs_real.cuDevicePrimaryCtxReset_v2(dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_released(dev, 1);
    return r;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v2);
    CUresult r = cs_real.cuCtxCreate_v2(pctx, flags, dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_created(dev);
    return r;
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v3);
    CUresult r = cs_real.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_created(dev);
    return r;
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    CS_ENTER(cuCtxCreate_v4);
    CUresult r = cs_real.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
    if (r == CUDA_SUCCESS)
        cs__ctx_created(dev);
    return r;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    CS_ENTER(cuCtxDestroy_v2);
    int dev = -1;
    CUcontext cur = NULL;
    /* The device of `ctx`: make it current briefly only if it is not. */
    if (cs_drv.cuCtxGetCurrent && cs_drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) {
        dev = cs__current_device();
    } else if (cs_drv.cuCtxPushCurrent_v2 && cs_drv.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
        dev = cs__current_device();
        CUcontext popped;
        cs_drv.cuCtxPopCurrent_v2(&popped);
    }
    CUresult r = cs_real.cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS)
        cs__ctx_released(dev, 0);
    return r;
}
