/*
 * What the real driver does with contexts, as src/mem/ctx.c and the fake
 * driver assume it (docs/accounting.md, "Contexts"). Run on the GPU
 * machine, without cushare:
 *
 *   gcc -O1 -o /tmp/ctx_semantics bench/gpu-probes/ctx_semantics.c \
 *       -I/usr/local/cuda/include -lcuda -lnvidia-ml && /tmp/ctx_semantics
 *
 * Each step prints NVML's usedGpuMemory for this process (-1: not listed).
 * On the H200, driver 580.159.04 (2026-11-30):
 *   - every context costs 518 MiB, the primary, the first created one and
 *     each further one alike; destroying any one frees its own 518 MiB;
 *   - a primary reset frees the primary and what was allocated in it
 *     (cuMemAlloc, arrays), but not pool, VMM or graph memory;
 *   - pool, VMM and graph memory survive the process's last context: NVML
 *     stops listing the process, and a context made later shows them held;
 *   - a reset keeps the primary's retain count: after retain, retain,
 *     reset, retain, it takes three releases to end it; the handle stays.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <nvml.h>
#include <stdio.h>
#include <unistd.h>

static nvmlDevice_t nvml_dev;

static long long mine_mib(void)
{
    nvmlProcessInfo_t info[64];
    unsigned n = 64;
    if (nvmlDeviceGetComputeRunningProcesses_v3(nvml_dev, &n, info) != NVML_SUCCESS)
        return -2;
    for (unsigned i = 0; i < n; i++)
        if (info[i].pid == (unsigned)getpid())
            return (long long)(info[i].usedGpuMemory >> 20);
    return -1;
}

static int active(void)
{
    unsigned flags;
    int a = -1;
    cuDevicePrimaryCtxGetState(0, &flags, &a);
    return a;
}

#define STEP(call)                                                                     \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        printf("%-58s -> %d  nvml %5lld MiB  primary active %d\n", #call, (int)r_,     \
               mine_mib(), active());                                                  \
    } while (0)

static const CUmemAllocationProp vmm_prop = {
    .type = CU_MEM_ALLOCATION_TYPE_PINNED,
    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};

static void each_context_costs_the_same(void)
{
    CUcontext p, c1, c2;
    printf("-- contexts, first and further\n");
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuCtxCreate_v2(&c1, 0, 0));
    STEP(cuCtxCreate_v2(&c2, 0, 0));
    STEP(cuCtxDestroy_v2(c1));
    STEP(cuCtxDestroy_v2(c2));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
}

static void what_outlives_contexts(void)
{
    CUcontext p, c1;
    CUdeviceptr a, b;
    CUmemGenericAllocationHandle h;
    CUstream s;
    printf("-- a reset beside a created context; what outlives the last one\n");
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuCtxCreate_v2(&c1, 0, 0));
    STEP(cuCtxSetCurrent(p));
    STEP(cuMemAlloc_v2(&a, 64 << 20));
    STEP(cuMemCreate(&h, 64 << 20, &vmm_prop, 0));
    STEP(cuStreamCreate(&s, 0));
    STEP(cuMemAllocAsync(&b, 64 << 20, s));
    STEP(cuStreamSynchronize(s));
    STEP(cuDevicePrimaryCtxReset_v2(0));
    STEP(cuCtxDestroy_v2(c1));
    STEP(cuCtxCreate_v2(&c1, 0, 0));
    STEP(cuMemRelease(h));
    STEP(cuCtxDestroy_v2(c1));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
}

static void graph_memory_outlives_a_reset(void)
{
    CUcontext p;
    CUgraph g;
    CUgraphNode n;
    CUgraphExec e;
    CUDA_MEM_ALLOC_NODE_PARAMS np = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = vmm_prop.location},
                                     .bytesize = 256 << 20};
    printf("-- graph memory\n");
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuCtxSetCurrent(p));
    STEP(cuGraphCreate(&g, 0));
    STEP(cuGraphAddMemAllocNode(&n, g, NULL, 0, &np));
    STEP(cuGraphInstantiateWithFlags(&e, g, 0));
    STEP(cuGraphLaunch(e, 0));
    STEP(cuCtxSynchronize());
    STEP(cuDevicePrimaryCtxReset_v2(0));
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
}

static void reset_keeps_the_count(void)
{
    CUcontext p, q;
    printf("-- a reset keeps the retain count\n");
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuDevicePrimaryCtxRetain(&p, 0));
    STEP(cuDevicePrimaryCtxReset_v2(0));
    STEP(cuDevicePrimaryCtxRetain(&q, 0));
    printf("same handle after the reset: %d\n", p == q);
    STEP(cuDevicePrimaryCtxRelease_v2(0));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
    STEP(cuDevicePrimaryCtxRelease_v2(0));
}

int main(void)
{
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &nvml_dev) != NVML_SUCCESS ||
        cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    each_context_costs_the_same();
    what_outlives_contexts();
    reset_keeps_the_count();
    graph_memory_outlives_a_reset();
    return 0;
}
