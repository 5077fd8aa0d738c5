/*
 * TEST TOOL (tests/fakecuda), never shipped: the fake libnvidia-ml.so.1.
 * Reports the simulated devices of the shared state (fakecuda_state.h):
 * ALL physical devices (NVML ignores CUDA_VISIBLE_DEVICES), physical memory
 * truth, the processes that hold a context (pid + FAKECUDA_NVML_PID_OFFSET),
 * utilisation computed from the device timelines, and power and clocks of
 * the power / DVFS model.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fake_internal.h"
#include "fake_nvml_extra.h"

#define FC_DEVICE_NAME "Fake NVIDIA H100 (fakecuda)"

struct nvmlDevice_st {
    unsigned index;
};

static struct nvmlDevice_st g_devs[FAKECUDA_MAX_DEVICES];
static int g_init_count;

FC_EXPORT struct fakecuda_state *fakecuda_nvml_state(void)
{
    return fc_state_peek();
}

static nvmlReturn_t enter(enum fakecuda_call c, int need_init)
{
    if (fc_common_init(FC_LIB_NVML))
        return NVML_ERROR_UNKNOWN;
    int fail = fc_count(c);
    if (fail)
        return (nvmlReturn_t)fail;
    if (need_init && __atomic_load_n(&g_init_count, __ATOMIC_ACQUIRE) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

#define BEGIN(sym, need_init)                                             \
    do {                                                                  \
        nvmlReturn_t r_ = enter(FAKECUDA_CALL_##sym, need_init);          \
        if (r_ != NVML_SUCCESS)                                           \
            return r_;                                                    \
    } while (0)

/* Physical index of a handle, or -1. */
static int dev_index(nvmlDevice_t d)
{
    if (d < &g_devs[0] || d >= &g_devs[FAKECUDA_MAX_DEVICES])
        return -1;
    int i = (int)(d - &g_devs[0]);
    return i < (int)fc_S->ndevices ? i : -1;
}

static void number_devices(void)
{
    for (unsigned i = 0; i < FAKECUDA_MAX_DEVICES; i++)
        g_devs[i].index = i;
}

/* Like NVML's, init is thread-safe: the handles are numbered once. */
static nvmlReturn_t do_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, number_devices);
    __atomic_fetch_add(&g_init_count, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlInit(void)
{
    BEGIN(nvmlInit, 0);
    return do_init();
}

FC_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    BEGIN(nvmlInit_v2, 0);
    return do_init();
}

FC_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    BEGIN(nvmlInitWithFlags, 0);
    if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
        return NVML_ERROR_INVALID_ARGUMENT;
    return do_init();
}

FC_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    BEGIN(nvmlShutdown, 1);
    __atomic_fetch_sub(&g_init_count, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

FC_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    if (!fc_common_init(FC_LIB_NVML))
        fc_count(FAKECUDA_CALL_nvmlErrorString);
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_str(char *buf, unsigned len, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (len < strlen(s) + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    BEGIN(nvmlSystemGetDriverVersion, 1);
    return copy_str(version, length, fc_cfg.nvml_driver_version);
}

static nvmlReturn_t get_count(unsigned *n)
{
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = fc_S->ndevices;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    BEGIN(nvmlDeviceGetCount, 1);
    return get_count(deviceCount);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    BEGIN(nvmlDeviceGetCount_v2, 1);
    return get_count(deviceCount);
}

static nvmlReturn_t by_index(unsigned i, nvmlDevice_t *d)
{
    if (!d || i >= fc_S->ndevices)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_devs[i];
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    BEGIN(nvmlDeviceGetHandleByIndex, 1);
    return by_index(index, device);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    BEGIN(nvmlDeviceGetHandleByIndex_v2, 1);
    return by_index(index, device);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    BEGIN(nvmlDeviceGetHandleByUUID, 1);
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < fc_S->ndevices; i++) {
        char s[41];
        fakecuda_uuid_string(fc_S->dev[i].uuid, s);
        if (!strcasecmp(s, uuid)) {
            *device = &g_devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    BEGIN(nvmlDeviceGetIndex, 1);
    int i = dev_index(device);
    if (i < 0 || !index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)i;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    BEGIN(nvmlDeviceGetUUID, 1);
    int i = dev_index(device);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    char s[41];
    fakecuda_uuid_string(fc_S->dev[i].uuid, s);
    return copy_str(uuid, length, s);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    BEGIN(nvmlDeviceGetName, 1);
    if (dev_index(device) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return copy_str(name, length, FC_DEVICE_NAME);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    BEGIN(nvmlDeviceGetMemoryInfo, 1);
    int i = dev_index(device);
    if (i < 0 || !memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    fc_reap_dead();
    const struct fakecuda_device *D = &fc_S->dev[i];
    uint64_t used = fakecuda_load(&D->used);
    memory->total = D->total;
    memory->used = used;
    memory->free = used < D->total ? D->total - used : 0;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    BEGIN(nvmlDeviceGetMemoryInfo_v2, 1);
    int i = dev_index(device);
    if (i < 0 || !memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    fc_reap_dead();
    const struct fakecuda_device *D = &fc_S->dev[i];
    uint64_t used = fakecuda_load(&D->used);
    memory->total = D->total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = used < D->total ? D->total - used : 0;
    return NVML_SUCCESS;
}

/* Live processes with a context on physical device d; only MPS clients of
 * it when `mps_only`. */
static unsigned list_procs(int d, bool mps_only, const struct fakecuda_proc **out, unsigned max)
{
    fc_reap_dead();
    unsigned n = 0;
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++) {
        const struct fakecuda_proc *p = &fc_S->proc[i];
        int pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (!pid || !(__atomic_load_n(&p->ctx_mask, __ATOMIC_ACQUIRE) & (1u << d)) || !fc_pid_alive(pid))
            continue;
        /* A checkpointed process holds nothing on the GPU: the driver no
         * longer lists it. */
        if (__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE) == CU_PROCESS_STATE_CHECKPOINTED)
            continue;
        if (mps_only && !(__atomic_load_n(&p->mps_mask, __ATOMIC_ACQUIRE) & (1u << d)))
            continue;
        if (n < max)
            out[n] = p;
        n++;
    }
    return n;
}

/* The live MPS servers of the clients in procs[0..n), each once, into
 * out (at most FAKECUDA_MAX_PROCS); returns how many. */
static unsigned list_servers(const struct fakecuda_proc *const *procs, unsigned n, int32_t *out)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n && i < FAKECUDA_MAX_PROCS; i++) {
        int32_t s = procs[i]->mps_server_pid;
        bool seen = false;
        for (unsigned j = 0; j < k && !seen; j++)
            seen = out[j] == s;
        if (s > 0 && !seen && fc_pid_alive(s))
            out[k++] = s;
    }
    return k;
}

/* One of NVML's process lists of device `device`: `extra` processes of
 * nobody first; in the compute list the MPS servers of the clients there
 * (the driver lists the server's own process, 66 MiB on the H200, beside
 * its clients: docs/mps.md); then the live processes with a context there
 * (MPS clients only when `mps_only`). Pids + FAKECUDA_NVML_PID_OFFSET. */
static nvmlReturn_t process_list(nvmlDevice_t device, bool mps_only, unsigned extra,
                                 unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    int d = dev_index(device);
    if (d < 0 || !infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct fakecuda_proc *procs[FAKECUDA_MAX_PROCS];
    unsigned n = list_procs(d, mps_only, procs, FAKECUDA_MAX_PROCS);
    int32_t servers[FAKECUDA_MAX_PROCS];
    unsigned nserv = mps_only ? 0 : list_servers(procs, n, servers);
    extra += nserv;
    unsigned total = extra + n;
    if (*infoCount < total) {
        *infoCount = total;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (total && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned phantoms = extra - nserv;
    for (unsigned i = 0; i < total; i++) {
        bool phantom = i < phantoms, server = !phantom && i < extra;
        infos[i].pid = phantom   ? 0x7f000000u + i
                       : server ? (unsigned)(servers[i - phantoms] + fc_cfg.nvml_pid_offset)
                                : (unsigned)(procs[i - extra]->pid + fc_cfg.nvml_pid_offset);
        infos[i].usedGpuMemory = phantom  ? 1u << 20
                                 : server ? FC_MPS_SERVER_BYTES
                                          : fakecuda_load(&procs[i - extra]->used[d]);
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *infoCount = total;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_t *infos)
{
    BEGIN(nvmlDeviceGetComputeRunningProcesses_v3, 1);
    /* FAKECUDA_NVML_EXTRA_PROCS: that many processes of nobody we know
     * (pids no test process has) listed first, as on a busy node, so the
     * real ones come after them. */
    return process_list(device, false, fc_cfg.nvml_extra_procs, infoCount, infos);
}

/* MPS clients with a context on the device, each with its own memory (as
 * the compute list shows them). The phantoms of FAKECUDA_NVML_EXTRA_PROCS
 * stand for ordinary processes: never listed here. */
FC_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos)
{
    BEGIN(nvmlDeviceGetMPSComputeRunningProcesses_v3, 1);
    return process_list(device, true, 0, infoCount, infos);
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    BEGIN(nvmlDeviceGetUtilizationRates, 1);
    int d = dev_index(device);
    if (d < 0 || !utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = fc_now_ns(), w = fc_cfg.util_window_ns;
    uint64_t busy = fc_busy_in_window(d, 0, now > w ? now - w : 0, now);
    utilization->gpu = (unsigned)(busy * 100 / w);
    utilization->memory = 0;
    return NVML_SUCCESS;
}

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* The newest sample the driver has taken, at or before now_us (CLOCK_REALTIME
 * us): with FAKECUDA_NVML_SAMPLE_MS, at the last multiple of that period, as
 * the driver samples on its own clock; without it, now (a fresh sample for
 * every query, what the fake always did). */
static uint64_t newest_sample_us(uint64_t now_us)
{
    uint64_t period_us = fc_cfg.nvml_sample_ns / 1000;
    return period_us ? now_us - now_us % period_us : now_us;
}

/* Samples newer than lastSeenTimeStamp only, as the driver returns them:
 * none (NVML_ERROR_NOT_FOUND) when it has taken none since. A second query
 * right after a first one, passed the first one's time stamp, gets nothing
 * (65dea60 was the limiter reading twice per tick). One sample per listed
 * process, its smUtil the process's busy share of (max(lastSeen, sample -
 * FAKECUDA_UTIL_WINDOW_MS), sample]. */
FC_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                       nvmlProcessUtilizationSample_t *utilization,
                                                       unsigned int *processSamplesCount,
                                                       unsigned long long lastSeenTimeStamp)
{
    BEGIN(nvmlDeviceGetProcessUtilization, 1);
    int d = dev_index(device);
    if (d < 0 || !processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct fakecuda_proc *procs[FAKECUDA_MAX_PROCS];
    unsigned n = list_procs(d, false, procs, FAKECUDA_MAX_PROCS);
    if (!n)
        return NVML_ERROR_NOT_FOUND;
    uint64_t now = fc_now_ns(), now_us = realtime_us();
    uint64_t at_us = newest_sample_us(now_us);
    if (fc_cfg.nvml_sample_ns && lastSeenTimeStamp >= at_us)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    /* The sample's end on the monotonic timeline. */
    uint64_t age = (now_us - at_us) * 1000, to = now > age ? now - age : 0;
    uint64_t w = fc_cfg.util_window_ns;
    if (lastSeenTimeStamp && lastSeenTimeStamp < at_us && (at_us - lastSeenTimeStamp) * 1000 < to)
        w = (at_us - lastSeenTimeStamp) * 1000;
    if (!w)
        w = 1;
    uint64_t from = to > w ? to - w : 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t busy = fc_busy_in_window(d, procs[i]->pid, from, to);
        utilization[i].pid = (unsigned)(procs[i]->pid + fc_cfg.nvml_pid_offset);
        utilization[i].timeStamp = at_us;
        utilization[i].smUtil = (unsigned)(busy * 100 / w);
        utilization[i].memUtil = 0;
        utilization[i].encUtil = 0;
        utilization[i].decUtil = 0;
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

/* Power and clocks (fake_common.c: the power / DVFS model; without it the
 * clock is the maximum and the power the idle power). */
FC_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    BEGIN(nvmlDeviceGetPowerUsage, 1);
    int d = dev_index(device);
    if (d < 0 || !power)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t mw = fc_power_mw(d);
    *power = mw > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)mw;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    BEGIN(nvmlDeviceGetEnforcedPowerLimit, 1);
    int d = dev_index(device);
    if (d < 0 || !limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t mw = fc_cfg.power_cap_w * 1000;
    *limit = mw > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)mw;
    return NVML_SUCCESS;
}

FC_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    BEGIN(nvmlDeviceGetClockInfo, 1);
    int d = dev_index(device);
    if (d < 0 || !clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch ((int)type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *clock = (unsigned)(FC_CLOCK_SM_MHZ * fc_clock_rel(d) + 0.5);
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        *clock = FC_CLOCK_MEM_MHZ;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}
