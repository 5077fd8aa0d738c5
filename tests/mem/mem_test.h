/*
 * Shared helpers of the memory tests: they run with libcushare.so preloaded
 * over tests/fakecuda and read the ledger the way a monitor would, through
 * the public ABI (include/cushare/ledger.h), and the fake driver's own
 * counters (tests/fakecuda/fakecuda_state.h).
 */
#ifndef CS_TESTS_MEM_TEST_H
#define CS_TESTS_MEM_TEST_H

#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <dlfcn.h>

#include "check.h"
#include "cushare/ledger.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ull * 1024ull)

static inline struct cs_ledger_header *ledger_map_path(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    void *p = mmap(NULL, CS_LEDGER_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    close(fd);
    return p;
}

static inline struct cs_ledger_header *ledger_map(void)
{
    const char *path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    CHECK(path != NULL);
    return ledger_map_path(path);
}

static inline uint64_t ledger_used(struct cs_ledger_header *h, int dev)
{
    return __atomic_load_n(&h->dev[dev].used, __ATOMIC_ACQUIRE);
}

/* Bytes of category `cat` on `dev` charged to the slot of process `pid`. */
static inline uint64_t slot_bytes(struct cs_ledger_header *h, int pid, int dev, int cat)
{
    struct cs_ledger_slot *slots = (void *)((char *)h + h->header_size);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < h->slot_count; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == CS_SLOT_LIVE && slots[i].pid == pid)
            sum += __atomic_load_n(&slots[i].bytes[dev][cat], __ATOMIC_ACQUIRE);
    return sum;
}

static inline struct fakecuda_state *fake_state(void)
{
    const char *path = getenv("FAKECUDA_STATE");
    CHECK(path != NULL);
    struct fakecuda_state *s = fakecuda_state_open(path);
    CHECK(s != NULL);
    return s;
}

static inline void context_on_device0(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

/* NVML resolved the way monitoring tools (nvidia-smi) do: dlopen + dlsym,
 * initialised. */
struct nvml_api {
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*mem_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
};

static inline struct nvml_api nvml_open(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h != NULL);
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    struct nvml_api n = {
        .by_index = (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2"),
        .by_uuid = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByUUID"),
        .mem = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo"),
        .mem_v2 = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2"),
    };
    CHECK(init && n.by_index && n.by_uuid && n.mem && n.mem_v2);
    CHECK_EQ(init(), NVML_SUCCESS);
    return n;
}

/* Both memory-info versions of `d`, checked to agree; returns v1's. */
static inline nvmlMemory_t nvml_memory(const struct nvml_api *n, nvmlDevice_t d)
{
    nvmlMemory_t a;
    nvmlMemory_v2_t b = {.version = nvmlMemory_v2};
    CHECK_EQ(n->mem(d, &a), NVML_SUCCESS);
    CHECK_EQ(n->mem_v2(d, &b), NVML_SUCCESS);
    CHECK_EQ_U(a.total, b.total);
    CHECK_EQ_U(a.free, b.free);
    CHECK_EQ_U(a.used, b.used);
    return a;
}

#endif
