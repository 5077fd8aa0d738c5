/*
 * Every allocation family is charged on admission and given back exactly
 * on release; over-budget requests are refused before the driver sees
 * them; host memory and unknown frees change nothing. Budget: 64 MiB.
 */
#include "mem_test.h"

#include <sys/syscall.h>

static struct cs_ledger_header *L;
static struct fakecuda_state *F;
static int me;

#define LIMIT (64 * MiB)

static void expect(uint64_t total, int cat, uint64_t in_cat, const char *what)
{
    uint64_t u = ledger_used(L, 0), c = slot_bytes(L, me, 0, cat);
    if (u != total || c != in_cat) {
        fprintf(stderr, "%s: ledger used %llu (want %llu), category %d %llu (want %llu)\n", what,
                (unsigned long long)u, (unsigned long long)total, cat, (unsigned long long)c,
                (unsigned long long)in_cat);
        exit(1);
    }
}

/* The driver is never asked for a refused request. */
static void expect_refused(CUresult r, const char *what)
{
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
        fprintf(stderr, "%s: over budget returned %d, not CUDA_ERROR_OUT_OF_MEMORY\n", what, (int)r);
        exit(1);
    }
}

static void linear(void)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 3 * MiB), CUDA_SUCCESS);
    expect(3 * MiB, CS_MEM_DATA, 3 * MiB, "cuMemAlloc");
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    expect(0, CS_MEM_DATA, 0, "cuMemFree");

    size_t pitch = 0;
    CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 100, 4), CUDA_SUCCESS);
    CHECK_GE(pitch, 1000);
    expect(pitch * 100, CS_MEM_DATA, pitch * 100, "cuMemAllocPitch");
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    expect(0, CS_MEM_DATA, 0, "pitched free");

    CHECK_EQ(cuMemAllocManaged(&p, 5 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    expect(5 * MiB, CS_MEM_MANAGED, 5 * MiB, "cuMemAllocManaged");
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    expect(0, CS_MEM_MANAGED, 0, "managed free");

    uint64_t fake_before = F->dev[0].allocs;
    expect_refused(cuMemAlloc_v2(&p, LIMIT + 1), "cuMemAlloc");
    expect_refused(cuMemAllocManaged(&p, LIMIT + 1, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    expect_refused(cuMemAllocPitch_v2(&p, &pitch, 1 << 20, 65, 4), "cuMemAllocPitch");
    CHECK_EQ_U(F->dev[0].allocs, fake_before);
    expect(0, CS_MEM_DATA, 0, "after refusals");
}

static void arrays(void)
{
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 1024, .Height = 512, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CHECK_EQ(cuArrayCreate_v2(&a, &d), CUDA_SUCCESS);
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    CHECK_EQ(cuArrayGetMemoryRequirements(&req, a, 0), CUDA_SUCCESS);
    CHECK_GE(req.size, 1024ull * 512 * 16);
    expect(req.size, CS_MEM_ARRAY, req.size, "cuArrayCreate (driver's size)");
    CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);
    expect(0, CS_MEM_ARRAY, 0, "cuArrayDestroy");

    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Depth = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CHECK_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_SUCCESS);
    CHECK_EQ(cuArrayGetMemoryRequirements(&req, a, 0), CUDA_SUCCESS);
    expect(req.size, CS_MEM_ARRAY, req.size, "cuArray3DCreate");
    CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);

    CUmipmappedArray m;
    CHECK_EQ(cuMipmappedArrayCreate(&m, &d3, 4), CUDA_SUCCESS);
    CHECK_EQ(cuMipmappedArrayGetMemoryRequirements(&req, m, 0), CUDA_SUCCESS);
    expect(req.size, CS_MEM_ARRAY, req.size, "cuMipmappedArrayCreate");
    CHECK_EQ(cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
    expect(0, CS_MEM_ARRAY, 0, "cuMipmappedArrayDestroy");

    CUDA_ARRAY3D_DESCRIPTOR huge = {.Width = 8192, .Height = 8192, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    expect_refused(cuArray3DCreate_v2(&a, &huge), "cuArray3DCreate");
}

static uint64_t pool_reserved(CUmemoryPool pool)
{
    cuuint64_t v = 0;
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
    return v;
}

static void pools(void)
{
    CUstream s;
    CUdeviceptr p;
    CUmemoryPool def;
    CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetMemPool(&def, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocAsync(&p, 1 * MiB, s), CUDA_SUCCESS);
    uint64_t r = pool_reserved(def);
    CHECK_GE(r, 1 * MiB);
    expect(r, CS_MEM_POOL, r, "cuMemAllocAsync charges the pool's reserved size");
    CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolTrimTo(def, 0), CUDA_SUCCESS);
    expect(pool_reserved(def), CS_MEM_POOL, pool_reserved(def), "trim gives back");
    CHECK_EQ_U(pool_reserved(def), 0);

    /* An explicit pool, per-thread variant, destroy. */
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool pool;
    CHECK_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocFromPoolAsync_ptsz(&p, 2 * MiB, pool, s), CUDA_SUCCESS);
    r = pool_reserved(pool);
    expect(r, CS_MEM_POOL, r, "cuMemAllocFromPoolAsync charges that pool");
    CHECK_EQ(cuMemFreeAsync_ptsz(p, s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    expect(0, CS_MEM_POOL, 0, "cuMemPoolDestroy gives everything back");

    expect_refused(cuMemAllocAsync(&p, LIMIT + 1, s), "cuMemAllocAsync");
    expect(0, CS_MEM_POOL, 0, "refused async");
    CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

static void vmm_and_external(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
    expect(4 * MiB, CS_MEM_VMM, 4 * MiB, "cuMemCreate");
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    expect(0, CS_MEM_VMM, 0, "cuMemRelease");
    expect_refused(cuMemCreate(&h, LIMIT + 2 * MiB, &prop, 0), "cuMemCreate");

    int fd = (int)syscall(SYS_memfd_create, "ext", 0);
    CHECK(fd >= 0);
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = {.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
                                             .handle.fd = fd, .size = 6 * MiB};
    CUexternalMemory ext;
    CHECK_EQ(cuImportExternalMemory(&ext, &desc), CUDA_SUCCESS);
    expect(6 * MiB, CS_MEM_EXTERNAL, 6 * MiB, "cuImportExternalMemory");
    CHECK_EQ(cuDestroyExternalMemory(ext), CUDA_SUCCESS);
    expect(0, CS_MEM_EXTERNAL, 0, "cuDestroyExternalMemory");
    desc.size = LIMIT + 1;
    expect_refused(cuImportExternalMemory(&ext, &desc), "cuImportExternalMemory");
}

/* Every graph launch variant hooks.def lists (GRAPHRUN rows), called
 * through the exported symbol as an application linked to it would. */
struct graph_launch {
    const char *sym;
    const char *family;
};
static const struct graph_launch graph_rows[] = {
#define CS_CU(base, sym, since, variant, family, params, args) {#sym, #family},
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
};

/* A graph with one 8 MiB allocation node, launched through `launch`: the
 * device's graph reservation grows and is charged by that launch alone;
 * trimming after the graph is gone gives it back. */
static void graph_launch_charges(const char *sym)
{
    typedef CUresult (*launch_fn)(CUgraphExec, CUstream);
    launch_fn launch = (launch_fn)dlsym(RTLD_DEFAULT, sym);
    CHECK(launch != NULL);
    cuuint64_t before = 0, reserved = 0;
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &before), CUDA_SUCCESS);
    expect(before, CS_MEM_GRAPH, before, sym);
    CUgraph g;
    CUgraphNode n;
    CUgraphExec e;
    CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS np = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
                                     .bytesize = 8 * MiB};
    CHECK_EQ(cuGraphAddMemAllocNode(&n, g, NULL, 0, &np), CUDA_SUCCESS);
    CHECK_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
    CHECK_EQ(launch(e, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK_GE(reserved, before + 8 * MiB);
    expect(reserved, CS_MEM_GRAPH, reserved, sym);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    expect(reserved, CS_MEM_GRAPH, reserved, "trim gives graph memory back");
}

static void graphs(void)
{
    CUgraph g;
    CUgraphNode n;
    CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS np = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
                                     .bytesize = LIMIT + 1};
    expect_refused(cuGraphAddMemAllocNode(&n, g, NULL, 0, &np), "cuGraphAddMemAllocNode");
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    int variants = 0;
    for (size_t i = 0; i < sizeof graph_rows / sizeof graph_rows[0]; i++)
        if (!strcmp(graph_rows[i].family, "GRAPHRUN")) {
            graph_launch_charges(graph_rows[i].sym);
            variants++;
        }
    CHECK_GE(variants, 2); /* cuGraphLaunch and its per-thread-stream variant at least */
}

static void host_and_unknown(void)
{
    void *hp;
    uint64_t before = ledger_used(L, 0);
    CHECK_EQ(cuMemAllocHost_v2(&hp, 32 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), before);
    CHECK_EQ(cuMemFreeHost(hp), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2((CUdeviceptr)0xdead0000ull), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ_U(ledger_used(L, 0), before);
}

int main(void)
{
    context_on_device0();
    L = ledger_map();
    F = fake_state();
    me = getpid();
    CHECK_EQ_U(L->limit[0], LIMIT);
    linear();
    arrays();
    pools();
    vmm_and_external();
    graphs();
    host_and_unknown();
    printf("every family charged and given back exactly\n");
    return 0;
}
