/*
 * The CUDA memory view of a slice: total = min(limit, physical), free =
 * min(physical free, total - used), never below zero. Devices without a
 * budget show the driver's truth.
 *
 * `used` is read only after a reap (src/account): slots of dead processes
 * reaped and what they left beyond their slots healed (docs/ledger.md), so
 * that a framework sizing its pool from free memory is not handed the
 * charges of processes that are gone. cuDeviceTotalMem shows the budget,
 * which no charge changes, so it reaps nothing.
 */
#include "account/account.h"
#include "mem/charge.h"

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

void cs__slice_view(int dev, uint64_t phys_total, uint64_t phys_free, uint64_t *total,
                    uint64_t *free_out)
{
    uint64_t limit = dev >= 0 ? cs__device_limit(dev) : 0;
    if (!limit) {
        *total = phys_total;
        *free_out = phys_free;
        return;
    }
    uint64_t t = min_u64(limit, phys_total);
    cs__vmm_take_over_unpaid();
    cs__account_reap(cs__ledger());
    uint64_t used = cs__ledger_used(cs__ledger(), dev);
    *total = t;
    *free_out = min_u64(phys_free, used >= t ? 0 : t - used);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CS_ENTER(cuMemGetInfo_v2);
    size_t pf = 0, pt = 0;
    CUresult r = cs_real.cuMemGetInfo_v2(&pf, &pt);
    if (r != CUDA_SUCCESS || !free || !total) {
        if (free)
            *free = pf;
        if (total)
            *total = pt;
        return r;
    }
    uint64_t t, f;
    cs__slice_view(cs__current_device(), pt, pf, &t, &f);
    *free = (size_t)f;
    *total = (size_t)t;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CS_ENTER(cuDeviceTotalMem_v2);
    CUresult r = cs_real.cuDeviceTotalMem_v2(bytes, dev);
    if (r != CUDA_SUCCESS || !bytes || dev < 0 || dev >= CS_MAX_DEVICES)
        return r;
    uint64_t limit = cs__device_limit(dev);
    if (limit && limit < *bytes)
        *bytes = (size_t)limit;
    return CUDA_SUCCESS;
}
