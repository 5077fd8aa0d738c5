/*
 * Virtual memory management, sharing and interop (docs/accounting.md):
 *  - cuMemCreate charges the physical handle's size on its device;
 *    cuMemRelease gives it back. Mappings (cuMemMap) are not charged: they
 *    create no memory.
 *  - Imports (cuMemImportFromShareableHandle, cuIpcOpenMemHandle) create
 *    no physical memory: it stays charged to the process that created it.
 *    They pass through; so do their closes.
 *  - cuImportExternalMemory brings memory allocated outside CUDA (Vulkan,
 *    D3D, NvSci) onto the device: it is charged at its declared size and
 *    given back by cuDestroyExternalMemory.
 */
#include "mem/admit.h"

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CS_ENTER(cuMemCreate);
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        prop->location.id < 0 || prop->location.id >= CS_MAX_DEVICES)
        return cs_real.cuMemCreate(handle, size, prop, flags);
    int dev = prop->location.id;
    CUresult r = cs__admit(dev, CS_MEM_VMM, size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        cs__give_back(dev, CS_MEM_VMM, size);
        return r;
    }
    if (cs__commit(CS_TRACK_VMM, *handle, dev, CS_MEM_VMM, size)) {
        cs_real.cuMemRelease(*handle);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult release_handle(uint64_t handle, void *ctx)
{
    (void)ctx;
    return cs_real.cuMemRelease(handle);
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CS_ENTER(cuMemRelease);
    return cs__free_tracked(CS_TRACK_VMM, handle, release_handle, NULL);
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CS_ENTER(cuMemImportFromShareableHandle);
    return cs_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CS_ENTER(cuIpcOpenMemHandle_v2);
    return cs_real.cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CS_ENTER(cuIpcCloseMemHandle);
    return cs_real.cuIpcCloseMemHandle(dptr);
}

CUresult CUDAAPI cuImportExternalMemory(CUexternalMemory *extMem_out,
                                        const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    CS_ENTER(cuImportExternalMemory);
    int dev = cs__current_device();
    if (!extMem_out || !desc || desc->size == 0 || dev < 0)
        return cs_real.cuImportExternalMemory(extMem_out, desc);
    CUresult r = cs__admit(dev, CS_MEM_EXTERNAL, desc->size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuImportExternalMemory(extMem_out, desc);
    if (r != CUDA_SUCCESS) {
        cs__give_back(dev, CS_MEM_EXTERNAL, desc->size);
        return r;
    }
    if (cs__commit(CS_TRACK_EXTMEM, (uint64_t)(uintptr_t)*extMem_out, dev, CS_MEM_EXTERNAL,
                   desc->size)) {
        cs_real.cuDestroyExternalMemory(*extMem_out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult destroy_external(uint64_t ext, void *ctx)
{
    (void)ctx;
    return cs_real.cuDestroyExternalMemory((CUexternalMemory)(uintptr_t)ext);
}

CUresult CUDAAPI cuDestroyExternalMemory(CUexternalMemory extMem)
{
    CS_ENTER(cuDestroyExternalMemory);
    return cs__free_tracked(CS_TRACK_EXTMEM, (uint64_t)(uintptr_t)extMem, destroy_external, NULL);
}
