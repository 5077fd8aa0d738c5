/*
 * TEST TOOL (tests/fakecuda), never shipped: NVML declarations the fake
 * libnvidia-ml.so.1 exports beyond src/nvml/nvml.h (legacy entry points,
 * one return code, power and clocks), from NVML's documented ABI.
 */
#ifndef FAKECUDA_NVML_EXTRA_H
#define FAKECUDA_NVML_EXTRA_H

#include "nvml/nvml.h"

#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2

nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);

/* nvmlClockType_t (an enum in NVML's header: 4 bytes, values below).
 * Skipped when src/nvml/nvml.h already declares the clock types. */
#ifndef NVML_CLOCK_SM
typedef int nvmlClockType_t;
#define NVML_CLOCK_GRAPHICS 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_CLOCK_VIDEO 3
#endif

/* Board power in milliwatts (a ~1 s average), enforced limit in milliwatts,
 * current clock of a domain in MHz. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock);

#endif
