/*
 * The only door to the real driver and NVML. Hooked entry points are in
 * cs_real (hooks.h); helpers we call without hooking are in cs_drv. Both are
 * filled from the library that cs__real_load() opened, so a test swaps the
 * whole driver by putting tests/fakecuda first on the library path.
 */
#ifndef CS_HOOK_DRV_H
#define CS_HOOK_DRV_H

#include "hook/hooks.h"

struct cs_drv {
#define CS_DRV(sym, params) CUresult(CUDAAPI *sym) params;
#define CS_DRV_NVML(sym, params) nvmlReturn_t (*sym) params;
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
};

extern struct cs_drv cs_drv;

/* Fills cs_drv's CUDA half (after cs__real_load) / NVML half. 0 or -errno.
 * Individual pointers may stay NULL on drivers lacking them: check before
 * calling. */
int cs__drv_load(void);
int cs__drv_load_nvml(void);

/* The NVML per-process view is joined by PID; NVML must be initialised
 * first. Returns 0 and NVML's usedGpuMemory for `pid` on the NVML device
 * whose UUID matches `uuid` (driver format), -ESRCH when not listed,
 * -ENODATA when listed without a figure (NVML_VALUE_NOT_AVAILABLE). */
int cs__nvml_process_memory(const CUuuid *uuid, unsigned pid, unsigned long long *bytes);

/* NVML's compute processes of `dev` / their utilisation samples newer than
 * `since` (drv_nvml.c), however many there are: *out is malloc'ed (the
 * caller frees it, also on error, where it is NULL), *n its entries.
 * 0, -ENOSYS (symbol absent), -EIO (NVML refused), -ENOMEM, -EAGAIN (the
 * list kept growing). */
int cs__nvml_processes(nvmlDevice_t dev, nvmlProcessInfo_t **out, unsigned *n);
int cs__nvml_process_samples(nvmlDevice_t dev, unsigned long long since,
                             nvmlProcessUtilizationSample_t **out, unsigned *n);

#endif
