/*
 * NVML's per-process lists, whole. NVML answers INSUFFICIENT_SIZE with the
 * count it needs when the buffer is short; processes come and go between
 * two calls, so the buffer grows until one call fits. No fixed cap: at 300
 * processes on one GPU (bench init -n 300) a 256-entry array silently lost
 * the tail, and with it the charge of a context listed there.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/uuid.h"
#include "hook/drv.h"

#define FIRST_GUESS 64u
#define MAX_TRIES 8

int cs__nvml_processes(nvmlDevice_t dev, nvmlProcessInfo_t **out, unsigned *n)
{
    *out = NULL;
    *n = 0;
    if (!cs_drv.nvmlDeviceGetComputeRunningProcesses_v3)
        return -ENOSYS;
    unsigned cap = FIRST_GUESS;
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        nvmlProcessInfo_t *buf = calloc(cap, sizeof *buf);
        if (!buf)
            return -ENOMEM;
        unsigned got = cap;
        nvmlReturn_t r = cs_drv.nvmlDeviceGetComputeRunningProcesses_v3(dev, &got, buf);
        if (r == NVML_SUCCESS && got <= cap) {
            *out = buf;
            *n = got;
            return 0;
        }
        free(buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            return -EIO;
        cap = got > cap ? got + got / 4 : cap * 2; /* room for late arrivals */
    }
    return -EAGAIN;
}

int cs__nvml_process_samples(nvmlDevice_t dev, unsigned long long since,
                             nvmlProcessUtilizationSample_t **out, unsigned *n)
{
    *out = NULL;
    *n = 0;
    if (!cs_drv.nvmlDeviceGetProcessUtilization)
        return -ENOSYS;
    unsigned cap = FIRST_GUESS;
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        nvmlProcessUtilizationSample_t *buf = calloc(cap, sizeof *buf);
        if (!buf)
            return -ENOMEM;
        unsigned got = cap;
        nvmlReturn_t r = cs_drv.nvmlDeviceGetProcessUtilization(dev, buf, &got, since);
        if (r == NVML_SUCCESS && got <= cap) {
            *out = buf;
            *n = got;
            return 0;
        }
        free(buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            return -EIO;
        cap = got > cap ? got + got / 4 : cap * 2;
    }
    return -EAGAIN;
}

int cs__nvml_process_memory(const CUuuid *uuid, unsigned pid, unsigned long long *bytes)
{
    if (cs__drv_load_nvml() || !cs_drv.nvmlInit_v2 || cs_drv.nvmlInit_v2() != NVML_SUCCESS ||
        !cs_drv.nvmlDeviceGetHandleByUUID || !cs_drv.nvmlDeviceGetComputeRunningProcesses_v3)
        return -ENOSYS;
    char s[CS_UUID_STRLEN];
    cs__format_uuid((const uint8_t *)uuid->bytes, s);
    nvmlDevice_t dev;
    if (cs_drv.nvmlDeviceGetHandleByUUID(s, &dev) != NVML_SUCCESS)
        return -ENODEV;
    nvmlProcessInfo_t *infos;
    unsigned n;
    int rc = cs__nvml_processes(dev, &infos, &n);
    if (rc)
        return rc == -ENOSYS ? rc : -EIO;
    rc = -ESRCH;
    for (unsigned i = 0; i < n; i++) {
        if (infos[i].pid == pid) {
            /* Listed, but without a figure (NVML does this under WDDM). */
            rc = infos[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ? -ENODATA : 0;
            if (!rc)
                *bytes = infos[i].usedGpuMemory;
            break;
        }
    }
    free(infos);
    return rc;
}
