/*
 * The NVML view of a slice, so `nvidia-smi` and NVML-based monitors inside
 * a slice show the slice: NVML devices are physical; we find the ledger
 * device by UUID (recorded by any process of the tenant after cuInit),
 * else by CUDA_VISIBLE_DEVICES (indices or UUIDs), else by index. Beside
 * views.c, the CUDA view: both are cs__slice_view of the same budget.
 * (src/nvml holds only NVML's declarations, which src/hook needs.)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/uuid.h"
#include "mem/charge.h"


static int by_ledger_uuid(const char *uuid)
{
    const struct cs_ledger_header *h = cs__ledger()->hdr;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        if (__atomic_load_n(&h->uuid_state[d], __ATOMIC_ACQUIRE) != 2)
            continue;
        char s[CS_UUID_STRLEN];
        cs__format_uuid(h->uuid[d], s);
        if (!strcasecmp(s, uuid))
            return d;
    }
    return -1;
}

/* Position of NVML device (index, uuid) in CUDA_VISIBLE_DEVICES, -1 if
 * hidden, -2 if the variable is unset. */
static int by_visible_devices(unsigned index, const char *uuid)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd)
        return -2;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", cvd);
    int pos = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), pos++) {
        while (*tok == ' ')
            tok++;
        if (!strncasecmp(tok, "GPU-", 4) ? !strncasecmp(uuid, tok, strlen(tok))
                                         : (unsigned)atoi(tok) == index && *tok)
            return pos < CS_MAX_DEVICES ? pos : -1;
    }
    return -1;
}

static int ledger_device_of(nvmlDevice_t device)
{
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    unsigned index = 0;
    if (cs__drv_load_nvml() || !cs_drv.nvmlDeviceGetUUID ||
        cs_drv.nvmlDeviceGetUUID(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    int d = by_ledger_uuid(uuid);
    if (d >= 0)
        return d;
    if (!cs_drv.nvmlDeviceGetIndex || cs_drv.nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS)
        return -1;
    d = by_visible_devices(index, uuid);
    if (d == -2)
        d = index < CS_MAX_DEVICES ? (int)index : -1;
    return d;
}

/* Rewrites NVML's physical figures for `device` into the slice view when
 * the device has a budget. False: leave NVML's answer untouched. */
static bool slice_of(nvmlDevice_t device, unsigned long long *total, unsigned long long *free,
                     unsigned long long *used)
{
    int d = ledger_device_of(device);
    if (d < 0 || !cs__device_limit(d))
        return false;
    uint64_t t, f;
    cs__slice_view(d, *total, *free, &t, &f);
    *total = t;
    *free = f;
    *used = t - f;
    return true;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    /* nvidia-smi and monitors call NVML without ever touching CUDA. */
    if (cs__real_load_nvml() || cs__init() || !cs_real.nvmlDeviceGetMemoryInfo)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = cs_real.nvmlDeviceGetMemoryInfo(device, memory);
    if (r == NVML_SUCCESS && memory)
        slice_of(device, &memory->total, &memory->free, &memory->used);
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (cs__real_load_nvml() || cs__init() || !cs_real.nvmlDeviceGetMemoryInfo_v2)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = cs_real.nvmlDeviceGetMemoryInfo_v2(device, memory);
    /* Within a slice nothing is reserved by the driver: used = total - free. */
    if (r == NVML_SUCCESS && memory &&
        slice_of(device, &memory->total, &memory->free, &memory->used))
        memory->reserved = 0;
    return r;
}
