/*
 * One process, budget 64 MiB; on the fake a context costs 16 MiB when it
 * is the process's only one on the device and 8 MiB beside others. After
 * every step the ledger holds exactly what the fake GPU holds for this
 * process (what nvidia-smi shows), category by category where it matters:
 *
 *  - every cuCtxCreate_v2/_v3/_v4 context is charged and given back by
 *    cuCtxDestroy_v2; a primary reset while a created context lives gives
 *    back the primary and what was allocated in it, and keeps the created
 *    context's charge and allocations;
 *  - the primary context is charged once however often it is retained and
 *    given back by the release that ends it (a reset keeps the driver's
 *    count);
 *  - allocate 40 MiB, reset, retain again: another 40 MiB fits;
 *  - a reset gives back linear, pitched and managed memory, arrays and
 *    external memory; pools and VMM handles outlive every context, and a
 *    context made while they are held is charged its own size only.
 */
#include "mem_test.h"

#include <sys/syscall.h>

#define LIMIT (64 * MiB)
#define FIRST (16 * MiB)
#define EXTRA (8 * MiB)

static struct cs_ledger_header *L;
static struct fakecuda_state *F;
static int me;

static uint64_t physical(void)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(F, me);
    return p ? fakecuda_load(&p->used[0]) : 0;
}

/* The ledger's context charge is `ctx` and everything it holds is what the
 * fake GPU holds for us. */
static void expect(uint64_t ctx, const char *step)
{
    uint64_t c = slot_bytes(L, me, 0, CS_MEM_CONTEXT), u = ledger_used(L, 0), p = physical();
    printf("%-52s context %3llu MiB, ledger %3llu MiB, GPU %3llu MiB\n", step,
           (unsigned long long)(c / MiB), (unsigned long long)(u / MiB),
           (unsigned long long)(p / MiB));
    if (c != ctx || u != p) {
        fprintf(stderr, "%s: context charge %llu (want %llu), ledger %llu, GPU %llu\n", step,
                (unsigned long long)c, (unsigned long long)ctx, (unsigned long long)u,
                (unsigned long long)p);
        exit(1);
    }
}

static int primary_active(void)
{
    unsigned flags;
    int active = -1;
    CHECK_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
    return active;
}

static void created_contexts_and_a_reset(CUcontext *primary)
{
    CHECK_EQ(cuDevicePrimaryCtxRetain(primary, 0), CUDA_SUCCESS); /* count 1 */
    expect(FIRST, "primary retained");
    CUcontext c1, c2, c3;
    CHECK_EQ(cuCtxCreate_v2(&c1, 0, 0), CUDA_SUCCESS);
    expect(FIRST + EXTRA, "cuCtxCreate_v2");
    CHECK_EQ(cuCtxCreate_v3(&c2, NULL, 0, 0, 0), CUDA_SUCCESS);
    expect(FIRST + 2 * EXTRA, "cuCtxCreate_v3");
    CHECK_EQ(cuCtxCreate_v4(&c3, NULL, 0, 0), CUDA_SUCCESS);
    expect(FIRST + 3 * EXTRA, "cuCtxCreate_v4");
    CHECK_EQ(cuCtxDestroy_v2(c3), CUDA_SUCCESS);
    CHECK_EQ(cuCtxDestroy_v2(c2), CUDA_SUCCESS);
    expect(FIRST + EXTRA, "two destroyed");

    CUcontext cur;
    CHECK_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == c1);
    CUdeviceptr in_c1, in_primary;
    CHECK_EQ(cuMemAlloc_v2(&in_c1, 4 * MiB), CUDA_SUCCESS);
    CHECK_EQ(cuCtxPushCurrent_v2(*primary), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&in_primary, 2 * MiB), CUDA_SUCCESS);
    CHECK_EQ(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    expect(FIRST + EXTRA, "4 MiB in the created one, 2 MiB in the primary");

    CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    CHECK_EQ(primary_active(), 0);
    expect(EXTRA, "primary reset: the created one stays");
    CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_DATA), 4 * MiB);

    CHECK_EQ(cuDevicePrimaryCtxRetain(primary, 0), CUDA_SUCCESS); /* count 2 */
    expect(2 * EXTRA, "primary retained beside it");
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS); /* count 1 */
    CHECK_EQ(primary_active(), 1);
    expect(2 * EXTRA, "a release that does not end it");
    CHECK_EQ(cuCtxDestroy_v2(c1), CUDA_SUCCESS);
    CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_DATA), 0);
    expect(EXTRA, "created one destroyed with its 4 MiB");
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS); /* count 0 */
    CHECK_EQ(primary_active(), 0);
    expect(0, "the release that ends the primary");
}

/* Before, the 40 MiB of the reset context stayed
 * charged and the second 40 MiB was refused. */
static void reset_gives_back_its_memory(CUcontext *primary)
{
    CHECK_EQ(cuDevicePrimaryCtxRetain(primary, 0), CUDA_SUCCESS); /* count 1 */
    CHECK_EQ(cuCtxSetCurrent(*primary), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    expect(FIRST, "40 MiB allocated");
    CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    expect(0, "reset");
    CHECK_EQ(cuDevicePrimaryCtxRetain(primary, 0), CUDA_SUCCESS); /* count 2 */
    CHECK_EQ(cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    expect(FIRST, "retained again, 40 MiB more fit");
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

static uint64_t cat(int c)
{
    return slot_bytes(L, me, 0, c);
}

static void what_a_reset_frees(CUcontext *primary)
{
    CUdeviceptr pitched, managed, pooled;
    size_t pitch;
    CHECK_EQ(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 100, 4), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocManaged(&managed, MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 1024, .Height = 512, .Format = CU_AD_FORMAT_FLOAT,
                               .NumChannels = 4};
    CHECK_EQ(cuArrayCreate_v2(&arr, &d), CUDA_SUCCESS);
    int fd = (int)syscall(SYS_memfd_create, "ext", 0);
    CHECK(fd >= 0);
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC ed = {.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
                                           .handle.fd = fd, .size = MiB};
    CUexternalMemory ext;
    CHECK_EQ(cuImportExternalMemory(&ext, &ed), CUDA_SUCCESS);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle vmm;
    CHECK_EQ(cuMemCreate(&vmm, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocAsync(&pooled, MiB, NULL), CUDA_SUCCESS);
    CHECK_GT(cat(CS_MEM_DATA), 0);
    CHECK_GT(cat(CS_MEM_MANAGED), 0);
    CHECK_GT(cat(CS_MEM_ARRAY), 0);
    CHECK_GT(cat(CS_MEM_EXTERNAL), 0);
    const uint64_t pool = cat(CS_MEM_POOL);
    CHECK_GT(pool, 0);
    expect(FIRST, "every family allocated");

    CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    CHECK_EQ(cat(CS_MEM_DATA) + cat(CS_MEM_MANAGED) + cat(CS_MEM_ARRAY) + cat(CS_MEM_EXTERNAL), 0);
    CHECK_EQ_U(cat(CS_MEM_VMM), 2 * MiB);
    CHECK_EQ_U(cat(CS_MEM_POOL), pool);
    expect(0, "reset: pool and VMM memory stay");

    /* NVML does not list us now, yet the driver holds 2 MiB + the pool:
     * the new context is charged its own size, not theirs too. */
    CHECK_EQ(cuDevicePrimaryCtxRetain(primary, 0), CUDA_SUCCESS); /* count 3 */
    expect(FIRST, "a context beside surviving pool and VMM memory");
    CHECK_EQ(cuMemRelease(vmm), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeAsync(pooled, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CUmemoryPool def;
    CHECK_EQ(cuDeviceGetMemPool(&def, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolTrimTo(def, 0), CUDA_SUCCESS);
    expect(FIRST, "pool and VMM memory freed");
    for (int refs = 3; refs > 1; refs--) {
        CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        expect(FIRST, "released, references left");
    }
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    expect(0, "last release");
}

int main(void)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    L = ledger_map();
    F = fake_state();
    me = getpid();
    CHECK_EQ_U(L->limit[0], LIMIT);
    CUcontext primary;
    created_contexts_and_a_reset(&primary);
    reset_gives_back_its_memory(&primary);
    what_a_reset_frees(&primary);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("every context charged and given back; a reset takes its allocations along\n");
    return 0;
}
