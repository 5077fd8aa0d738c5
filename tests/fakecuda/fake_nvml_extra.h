/*
 * TEST TOOL (tests/fakecuda), never shipped: NVML declarations the fake
 * libnvidia-ml.so.1 exports beyond src/nvml/nvml.h (legacy entry points and
 * one return code), from NVML's documented ABI.
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

#endif
