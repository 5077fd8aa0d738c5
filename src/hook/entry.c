/*
 * The two entry points every CUDA program passes through first: cuInit and
 * the driver's own symbol resolver. cuGetProcAddress asks the real driver
 * first (so status, version checks and unknown names are exactly the
 * driver's), then swaps in our wrapper when the driver's answer is one of
 * the functions we hook. The CUDA runtime resolves everything this way, so
 * cudaGetDriverEntryPoint* is covered too.
 */
#include <string.h>

#include "core/log.h"
#include "hook/hooks.h"
#include "hook/runtime.h"

/* Our set-up runs beside the driver's cuInit (init.c says why); a set-up
 * that failed fails cuInit even where the driver's succeeded. */
CUresult CUDAAPI cuInit(unsigned int Flags)
{
    cs__phase_mark(CS_PHASE_WRAPPER_ENTER);
    struct cs_init_job job;
    int rc = cs__init_start(&job);
    if (rc)
        return cs__init_error(rc);
    CUresult r = CUDA_ERROR_NOT_FOUND;
    cs__phase_mark(CS_PHASE_DRIVER_ENTER);
    if (cs_real.cuInit) {
        r = cs_real.cuInit(Flags);
        cs__phase_mark(CS_PHASE_REAL_INIT_DONE);
    }
    rc = cs__init_finish(&job);
    cs__phase_mark(CS_PHASE_JOINED);
    if (rc)
        return cs__init_error(rc);
    if (r == CUDA_SUCCESS)
        cs__init_devices();
    return r;
}

/* Our wrapper for what the driver resolved, or the driver's pointer. */
static void *swap_in_wrapper(const char *symbol, void *real, int cuda_version, cuuint64_t flags)
{
    int id = cs__hook_find_real(real);
    if (id < 0) {
        /* The driver may hand out an internal alias of an exported
         * function; fall back to the documented version rules. */
        id = cs__hook_route(symbol, cuda_version, flags);
        if (id >= 0 && !cs__real_ptr((enum cs_hook_id)id))
            id = -1;
        if (id >= 0)
            cs_debug("hook", "cuGetProcAddress(%s, %d): routed by version to %s", symbol,
                     cuda_version, cs_hook_rows[id].symbol);
    }
    return id >= 0 ? cs_hook_rows[id].wrapper : real;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    if (cs__real_load())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r;
    if (cs_real.cuGetProcAddress_v2)
        r = cs_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    else if (cs_real.cuGetProcAddress)
        r = cs_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    else
        return CUDA_ERROR_NOT_FOUND;
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = swap_in_wrapper(symbol, *pfn, cudaVersion, flags);
    return r;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    if (cs__real_load())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r;
    if (cs_real.cuGetProcAddress)
        r = cs_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    else if (cs_real.cuGetProcAddress_v2)
        r = cs_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
    else
        return CUDA_ERROR_NOT_FOUND;
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = swap_in_wrapper(symbol, *pfn, cudaVersion, flags);
    return r;
}
