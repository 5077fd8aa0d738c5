/*
 * Linear device memory: cuMemAlloc, pitched, managed, and their free.
 * Rule (docs/accounting.md): charge the bytes the application asked for
 * (pitched: pitch x height as the driver chose it; managed: the full size,
 * since all of it may become resident), uncharge exactly that on free.
 */
#include "mem/charge.h"

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CS_ENTER(cuMemAlloc_v2);
    int dev = cs__current_device();
    if (!dptr || bytesize == 0 || dev < 0)
        return cs_real.cuMemAlloc_v2(dptr, bytesize);
    CUresult r = cs__charge(dev, CS_MEM_DATA, bytesize);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemAlloc_v2(dptr, bytesize);
    for (int64_t until = 0;
         r == CUDA_ERROR_OUT_OF_MEMORY && cs__park_make_room_for(bytesize, &until) == 0;)
        r = cs_real.cuMemAlloc_v2(dptr, bytesize); /* idle tenants parked for it */
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_DATA, bytesize);
        return r;
    }
    if (cs__record_charge(CS_TRACK_PTR, *dptr, dev, CS_MEM_DATA, bytesize)) {
        cs_real.cuMemFree_v2(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The driver aligns each row; until it answers, assume the largest
 * alignment it uses so the charge is never short. */
#define PITCH_ALIGN_MAX 512u

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    CS_ENTER(cuMemAllocPitch_v2);
    int dev = cs__current_device();
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 || dev < 0 ||
        WidthInBytes > SIZE_MAX - PITCH_ALIGN_MAX ||
        (WidthInBytes + PITCH_ALIGN_MAX) > SIZE_MAX / Height)
        return cs_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    uint64_t estimate = (uint64_t)((WidthInBytes + PITCH_ALIGN_MAX - 1) / PITCH_ALIGN_MAX *
                                   PITCH_ALIGN_MAX) * Height;
    CUresult r = cs__charge(dev, CS_MEM_DATA, estimate);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_DATA, estimate);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (cs__recharge(dev, CS_MEM_DATA, estimate, actual) != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_DATA, estimate);
        cs_real.cuMemFree_v2(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (cs__record_charge(CS_TRACK_PTR, *dptr, dev, CS_MEM_DATA, actual)) {
        cs_real.cuMemFree_v2(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CS_ENTER(cuMemAllocManaged);
    int dev = cs__current_device();
    if (!dptr || bytesize == 0 || dev < 0)
        return cs_real.cuMemAllocManaged(dptr, bytesize, flags);
    CUresult r = cs__charge(dev, CS_MEM_MANAGED, bytesize);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemAllocManaged(dptr, bytesize, flags);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_MANAGED, bytesize);
        return r;
    }
    if (cs__record_charge(CS_TRACK_PTR, *dptr, dev, CS_MEM_MANAGED, bytesize)) {
        cs_real.cuMemFree_v2(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult free_linear(uint64_t dptr, void *ctx)
{
    (void)ctx;
    return cs_real.cuMemFree_v2((CUdeviceptr)dptr);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    CS_ENTER(cuMemFree_v2);
    return cs__free_tracked(CS_TRACK_PTR, dptr, free_linear, NULL);
}
