/*
 * CUDA arrays and mipmapped arrays. Rule: charge an estimate from the
 * descriptor before creating (never short: the driver's real size is
 * rounded up from it), then recharge to the driver's own answer from
 * cuArrayGetMemoryRequirements / cuMipmappedArrayGetMemoryRequirements.
 */
#include "mem/charge.h"

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 16; /* block-compressed and exotic formats: generous upper bound */
    }
}

static uint64_t extent_bytes(size_t w, size_t h, size_t d, unsigned channels, CUarray_format f)
{
    __uint128_t b = (__uint128_t)(w ? w : 1) * (h ? h : 1) * (d ? d : 1) * (channels ? channels : 1) *
                    format_bytes(f);
    return b > UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)b;
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t total = 0;
    size_t w = d->Width, h = d->Height, dp = d->Depth;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        total += extent_bytes(w, h, dp, d->NumChannels, d->Format);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        dp = dp > 1 ? dp / 2 : dp;
    }
    return total;
}

/* The driver's size for an array, or `fallback` when it cannot tell. */
static uint64_t driver_size(CUarray a, CUmipmappedArray m, int dev, uint64_t fallback)
{
    CUDA_ARRAY_MEMORY_REQUIREMENTS req = {0};
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (a && cs_drv.cuArrayGetMemoryRequirements)
        r = cs_drv.cuArrayGetMemoryRequirements(&req, a, dev);
    else if (m && cs_drv.cuMipmappedArrayGetMemoryRequirements)
        r = cs_drv.cuMipmappedArrayGetMemoryRequirements(&req, m, dev);
    return r == CUDA_SUCCESS && req.size ? req.size : fallback;
}

static CUresult recharge_array(CUarray a, CUmipmappedArray m, int dev, uint64_t estimate)
{
    uint64_t actual = driver_size(a, m, dev, estimate);
    if (cs__recharge(dev, CS_MEM_ARRAY, estimate, actual) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    enum cs_track_kind kind = a ? CS_TRACK_ARRAY : CS_TRACK_MIPMAP;
    uint64_t key = a ? (uint64_t)(uintptr_t)a : (uint64_t)(uintptr_t)m;
    if (cs__record_charge(kind, key, dev, CS_MEM_ARRAY, actual))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

/* The array protocol: charge the descriptor's estimate, let `create`
 * make the array (into *arr or *mip), recharge to the driver's size, or undo
 * everything when that does not fit. */
struct array_create {
    CUarray *arr;
    CUmipmappedArray *mip;
    const CUDA_ARRAY_DESCRIPTOR *desc2d;
    const CUDA_ARRAY3D_DESCRIPTOR *desc3d;
    unsigned levels;
};

static CUresult create_real(const struct array_create *c)
{
    if (c->mip)
        return cs_real.cuMipmappedArrayCreate(c->mip, c->desc3d, c->levels);
    if (c->desc3d)
        return cs_real.cuArray3DCreate_v2(c->arr, c->desc3d);
    return cs_real.cuArrayCreate_v2(c->arr, c->desc2d);
}

static CUresult charge_array(int dev, uint64_t estimate, const struct array_create *c)
{
    CUresult r = cs__charge(dev, CS_MEM_ARRAY, estimate);
    if (r != CUDA_SUCCESS)
        return r;
    r = create_real(c);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_ARRAY, estimate);
        return r;
    }
    CUarray a = c->mip ? NULL : *c->arr;
    CUmipmappedArray m = c->mip ? *c->mip : NULL;
    if (recharge_array(a, m, dev, estimate) != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_ARRAY, estimate);
        if (m)
            cs_real.cuMipmappedArrayDestroy(m);
        else
            cs_real.cuArrayDestroy(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    CS_ENTER(cuArrayCreate_v2);
    int dev = cs__current_device();
    if (!pHandle || !desc || dev < 0)
        return cs_real.cuArrayCreate_v2(pHandle, desc);
    struct array_create c = {.arr = pHandle, .desc2d = desc};
    return charge_array(dev,
                        extent_bytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format),
                        &c);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    CS_ENTER(cuArray3DCreate_v2);
    int dev = cs__current_device();
    if (!pHandle || !desc || dev < 0)
        return cs_real.cuArray3DCreate_v2(pHandle, desc);
    struct array_create c = {.arr = pHandle, .desc3d = desc};
    return charge_array(dev, extent_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
                                         desc->Format),
                       &c);
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                        unsigned int numMipmapLevels)
{
    CS_ENTER(cuMipmappedArrayCreate);
    int dev = cs__current_device();
    if (!pHandle || !desc || dev < 0)
        return cs_real.cuMipmappedArrayCreate(pHandle, desc, numMipmapLevels);
    struct array_create c = {.mip = pHandle, .desc3d = desc, .levels = numMipmapLevels};
    return charge_array(dev, mipmap_bytes(desc, numMipmapLevels), &c);
}

static CUresult destroy_array(uint64_t h, void *ctx)
{
    (void)ctx;
    return cs_real.cuArrayDestroy((CUarray)(uintptr_t)h);
}

static CUresult destroy_mipmap(uint64_t h, void *ctx)
{
    (void)ctx;
    return cs_real.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h);
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
    CS_ENTER(cuArrayDestroy);
    return cs__free_tracked(CS_TRACK_ARRAY, (uint64_t)(uintptr_t)hArray, destroy_array, NULL);
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    CS_ENTER(cuMipmappedArrayDestroy);
    return cs__free_tracked(CS_TRACK_MIPMAP, (uint64_t)(uintptr_t)h, destroy_mipmap, NULL);
}
