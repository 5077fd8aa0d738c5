/*
 * TEST of the test tool tests/fakecuda (never shipped): every kind of
 * device memory the fake models is charged as documented (README.md):
 * pitch, arrays and mipmaps (2 MiB rounding), host memory (not charged),
 * stream-ordered pools (32 MiB chunks, reserved stays until trim/sync),
 * VMM (refcount with mappings; POSIX-fd export imported by another process
 * counts as an import there, physical bytes stay the exporter's), legacy
 * IPC, external memory, graph memory; destroying a context frees what it
 * owned; injected failures (FAKECUDA_FAIL_<symbol>) and the NVML pid
 * offset come from the environment set by CTest.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fake_scratch.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ULL * 1024ULL)

static struct fakecuda_state *st;
static struct fakecuda_device *D;

static uint64_t used(void)
{
    return fakecuda_load(&D->used);
}

static uint64_t kind(enum fakecuda_kind k)
{
    return fakecuda_load(&D->used_by_kind[k]);
}

static void test_plain_and_arrays(void)
{
    uint64_t u0 = used();
    CUdeviceptr p;
    size_t pitch;
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, 1000, 10, 4), CUDA_SUCCESS);
    CHECK_EQ(pitch, 1024);
    CHECK_EQ_U(used(), u0 + 10240);
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base;
    size_t size;
    CHECK_EQ(cuMemGetAddressRange(&base, &size, p + 100), CUDA_SUCCESS);
    CHECK_EQ_U(base, p);
    CHECK_EQ(size, 10240);
    char buf[64];
    CHECK_EQ(cuMemcpyHtoD(p, buf, sizeof(buf)), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoH(buf, p + 10240 - 32, 64), CUDA_ERROR_INVALID_VALUE); /* runs past the end */
    CHECK_EQ(cuMemsetD8(p, 0, 10240), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(p + 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);

    /* Host memory is not device memory. */
    void *h;
    CHECK_EQ(cuMemAllocHost(&h, 4 * MiB), CUDA_SUCCESS);
    CHECK_EQ(cuMemHostAlloc(&h, 4 * MiB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
    unsigned mt = 0;
    CHECK_EQ(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h), CUDA_SUCCESS);
    CHECK_EQ(mt, CU_MEMORYTYPE_HOST);
    CHECK_EQ(cuMemFreeHost(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);

    /* 1000 x 1000 float4 = 16,000,000 B -> 8 x 2 MiB. */
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1000, .Height = 1000, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CUarray arr;
    CHECK_EQ(cuArrayCreate(&arr, &ad), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_ARRAY), 16 * MiB);
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    CHECK_EQ(cuArrayGetMemoryRequirements(&req, arr, 0), CUDA_SUCCESS);
    CHECK_EQ(req.size, 16 * MiB);
    CHECK_EQ(req.alignment, 2 * MiB);
    ad.NumChannels = 3;
    CHECK_EQ(cuArrayCreate(&arr, &ad), CUDA_ERROR_INVALID_VALUE);
    /* 3D: 64 x 64 x 64 x 1 x 2 B = 512 KiB -> 2 MiB. */
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Depth = 64, .Format = CU_AD_FORMAT_HALF, .NumChannels = 1};
    CUarray arr3;
    CHECK_EQ(cuArray3DCreate(&arr3, &d3), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_ARRAY), 18 * MiB);
    /* Mipmap 2048^2 x 4 B, 3 levels: 16 MiB + 4 MiB + 1 MiB = 21 MiB -> 22 MiB. */
    CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 2048, .Height = 2048, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 4};
    CUmipmappedArray mip;
    CHECK_EQ(cuMipmappedArrayCreate(&mip, &dm, 3), CUDA_SUCCESS);
    CHECK_EQ(cuMipmappedArrayGetMemoryRequirements(&req, mip, 0), CUDA_SUCCESS);
    CHECK_EQ(req.size, 22 * MiB);
    CHECK_EQ_U(kind(FAKECUDA_KIND_ARRAY), 40 * MiB);
    CHECK_EQ(cuArrayDestroy(arr), CUDA_SUCCESS);
    CHECK_EQ(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(cuArrayDestroy(arr3), CUDA_SUCCESS);
    CHECK_EQ(cuMipmappedArrayDestroy(mip), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_ARRAY), 0);
    CHECK_EQ_U(used(), u0);
}

static void test_pools(void)
{
    uint64_t u0 = used();
    CUmemoryPool pool, defpool;
    CHECK_EQ(cuDeviceGetDefaultMemPool(&defpool, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetMemPool(&pool, 0), CUDA_SUCCESS);
    CHECK(pool == defpool);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    CUdeviceptr a, b;
    CHECK_EQ(cuMemAllocAsync(&a, 10 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 32 * MiB); /* one chunk reserved */
    CHECK_EQ(cuMemAllocAsync(&b, 30 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 64 * MiB);
    cuuint64_t v;
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 64 * MiB);
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 40 * MiB);
    CHECK_EQ(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeAsync(b, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ_U(used(), u0 + 64 * MiB); /* freed memory stays reserved */
    /* Above the release threshold it goes at a synchronisation point. */
    v = 64 * MiB;
    CHECK_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 64 * MiB);
    v = 0;
    CHECK_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 32 * MiB); /* the chunk still holding `a` stays */
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 64 * MiB);
    CHECK_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
    CHECK_EQ(cuMemPoolDestroy(defpool), CUDA_ERROR_INVALID_VALUE);

    /* An explicit pool, its own reserve, released by destroy. */
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool mine;
    CHECK_EQ(cuMemPoolCreate(&mine, &props), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocFromPoolAsync(&a, 100 * MiB, mine, s), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_POOL), 128 * MiB);
    CUmemoryPool from = NULL;
    CHECK_EQ(cuPointerGetAttribute(&from, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a), CUDA_SUCCESS);
    CHECK(from == mine);
    CHECK_EQ(cuMemPoolDestroy(mine), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

static void test_vmm_and_ipc(void)
{
    uint64_t u0 = used();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran;
    CHECK_EQ(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    CHECK_EQ(gran, 2 * MiB);
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemCreate(&h, 8 * MiB, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_VMM), 8 * MiB);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 16 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, 8 * MiB, 0, h, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, 8 * MiB, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(cuMemSetAccess(va, 8 * MiB, &acc, 1), CUDA_SUCCESS);
    CHECK_EQ(cuMemSetAccess(va, 16 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE);
    /* Released while mapped: the memory lives until the unmap. */
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_VMM), 8 * MiB);
    CUmemGenericAllocationHandle back;
    CHECK_EQ(cuMemRetainAllocationHandle(&back, (void *)(uintptr_t)(va + 4096)), CUDA_SUCCESS);
    CHECK_EQ_U(back, h);
    CUmemAllocationProp got;
    CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, back), CUDA_SUCCESS);
    CHECK_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

    /* Export as a POSIX fd; a child process imports it. */
    int fd = -1;
    CHECK_EQ(cuMemExportToShareableHandle(&fd, back, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK_GE(fd, 0);
    /* Legacy IPC of a plain allocation, opened by the same child. */
    CUdeviceptr ipcbuf;
    CHECK_EQ(cuMemAlloc(&ipcbuf, 6 * MiB), CUDA_SUCCESS);
    CUipcMemHandle ih;
    CHECK_EQ(cuIpcGetMemHandle(&ih, ipcbuf), CUDA_SUCCESS);
    CUdeviceptr self;
    CHECK_EQ(cuIpcOpenMemHandle(&self, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
    uint64_t u1 = used();
    int sync[2];
    CHECK(pipe(sync) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CUcontext ctx;
        CHECK_EQ(cuInit(0), CUDA_SUCCESS);
        CHECK_EQ(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_SUCCESS);
        CUmemGenericAllocationHandle imp;
        CHECK_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
        CUdeviceptr d;
        CHECK_EQ(cuIpcOpenMemHandle(&d, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS);
        size_t sz = 0;
        CHECK_EQ(cuMemGetAddressRange(NULL, &sz, d), CUDA_SUCCESS);
        CHECK_EQ(sz, 6 * MiB); /* the handle carries the size */
        const struct fakecuda_proc *me = fakecuda_proc_find(st, getpid());
        CHECK(me != NULL);
        CHECK_EQ_U(fakecuda_load(&me->imported[0]), 14 * MiB);
        CHECK_EQ_U(fakecuda_load(&me->used[0]), 0); /* the bytes are the exporter's */
        CHECK_EQ(cuIpcCloseMemHandle(d), CUDA_SUCCESS);
        CHECK_EQ(cuMemRelease(imp), CUDA_SUCCESS);
        CHECK_EQ_U(fakecuda_load(&me->imported[0]), 0);
        char c = 1;
        CHECK(write(sync[1], &c, 1) == 1);
        CHECK_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
        exit(0);
    }
    char c;
    CHECK(read(sync[0], &c, 1) == 1);
    int stt;
    CHECK_EQ(waitpid(pid, &stt, 0), pid);
    CHECK(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
    CHECK_EQ_U(used(), u1); /* the child's imports never charged anything */
    CHECK_EQ_U(fakecuda_load(&D->imports), 2);
    close(fd);
    CHECK_EQ(cuMemFree(ipcbuf), CUDA_SUCCESS);

    CHECK_EQ(cuMemRelease(back), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_VMM), 8 * MiB);
    CHECK_EQ(cuMemUnmap(va, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_VMM), 0);
    CHECK_EQ(cuMemRelease(back), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemAddressFree(va, 16 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);

    /* As on the H200 (driver 580): every exported fd of every allocation
     * is an open of one file (one inode), and each is a reference that
     * keeps the memory until closed (freed at the next reap: a view). */
    CUmemGenericAllocationHandle h2, h3;
    int fa = -1, fb = -1, fc = -1;
    CHECK_EQ(cuMemCreate(&h2, 4 * MiB, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemCreate(&h3, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemExportToShareableHandle(&fa, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemExportToShareableHandle(&fb, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemExportToShareableHandle(&fc, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    struct stat sa, sb, sc;
    CHECK(fstat(fa, &sa) == 0 && fstat(fb, &sb) == 0 && fstat(fc, &sc) == 0);
    CHECK(sa.st_dev == sc.st_dev && sa.st_ino == sb.st_ino && sa.st_ino == sc.st_ino);
    CHECK_EQ(cuMemRelease(h2), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h3), CUDA_SUCCESS);
    size_t fr, tot;
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 6 * MiB); /* only the fds hold them */
    close(fc);
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 4 * MiB);
    close(fa);
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 4 * MiB); /* fb: another description of it */
    CUmemGenericAllocationHandle imp;
    CHECK_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fb,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
    close(fb);
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0 + 4 * MiB); /* the import holds it now */
    CHECK_EQ(cuMemRelease(imp), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
}

static void test_external_and_graphs(void)
{
    uint64_t u0 = used();
    int fd = memfd_create("ext", 0);
    CHECK_GE(fd, 0);
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = {.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
                                             .handle = {.fd = fd}, .size = 5 * MiB};
    CUexternalMemory ext;
    CHECK_EQ(cuImportExternalMemory(&ext, &desc), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_EXTERNAL), 5 * MiB);
    CUDA_EXTERNAL_MEMORY_BUFFER_DESC bd = {.offset = MiB, .size = 4 * MiB};
    CUdeviceptr eb;
    CHECK_EQ(cuExternalMemoryGetMappedBuffer(&eb, ext, &bd), CUDA_SUCCESS);
    bd.size = 5 * MiB;
    CHECK_EQ(cuExternalMemoryGetMappedBuffer(&eb, ext, &bd), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuDestroyExternalMemory(ext), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);

    /* Graph memory: reserved at the first launch, kept after the exec is
     * gone until cuDeviceGraphMemTrim. */
    CUgraph g;
    CUgraphNode n, fnode;
    CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS ap = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
                                     .bytesize = 20 * MiB};
    CHECK_EQ(cuGraphAddMemAllocNode(&n, g, NULL, 0, &ap), CUDA_SUCCESS);
    CHECK(ap.dptr != 0);
    CHECK_EQ(cuGraphAddMemFreeNode(&fnode, g, &n, 1, ap.dptr), CUDA_SUCCESS);
    CUgraphExec x;
    CHECK_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
    CHECK_EQ(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_GRAPH), 20 * MiB);
    CHECK_EQ(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_GRAPH), 20 * MiB);
    cuuint64_t v;
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 20 * MiB);
    CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_GRAPH), 20 * MiB); /* still used by a launched exec */
    CHECK_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 0);
    CHECK_EQ_U(kind(FAKECUDA_KIND_GRAPH), 20 * MiB);
    CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
    CHECK_EQ_U(kind(FAKECUDA_KIND_GRAPH), 0);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 20 * MiB);
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
}

/* A created context owns its allocations: destroying it frees them. */
static void test_context_teardown(void)
{
    uint64_t u0 = used();
    CUcontext ctx, prev;
    CHECK_EQ(cuCtxGetCurrent(&prev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, 7 * MiB), CUDA_SUCCESS);
    CUdevice dev = -1;
    CHECK_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    CHECK_EQ(dev, 0);
    CHECK_EQ_U(used(), u0 + 7 * MiB);
    CHECK_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
    CHECK_EQ_U(used(), u0);
    CHECK_EQ(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext cur;
    CHECK_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == prev);
    CHECK_EQ(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "kinds");
    const char *path = scratch.path;
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_MEM", "4g", 1);
    setenv("FAKECUDA_CTX_BYTES", "0", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");

    /* Injected failures (CTest sets FAKECUDA_FAIL_cuMemAllocManaged=2). */
    const char *inj = getenv("FAKECUDA_FAIL_cuMemAllocManaged");
    CUdeviceptr m;
    if (inj)
        CHECK_EQ(cuMemAllocManaged(&m, MiB, CU_MEM_ATTACH_GLOBAL), atoi(inj));

    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    st = fakecuda_state_open(path);
    CHECK(st != NULL);
    D = &st->dev[0];

    test_plain_and_arrays();
    test_pools();
    test_vmm_and_ipc();
    test_external_and_graphs();
    test_context_teardown();

    if (inj) {
        CHECK_EQ(cuMemAllocManaged(&m, MiB, CU_MEM_ATTACH_GLOBAL), atoi(inj));
        CHECK_EQ(fakecuda_calls(st, FAKECUDA_CALL_cuMemAllocManaged), 2);
        CHECK_EQ(fakecuda_hook_calls(st, FAKECUDA_HOOK_cuMemAllocManaged), 2);
    }
    /* NVML reports pids shifted by FAKECUDA_NVML_PID_OFFSET (CTest: 100000). */
    const char *off = getenv("FAKECUDA_NVML_PID_OFFSET");
    nvmlDevice_t nd;
    nvmlProcessInfo_t info[2];
    unsigned n = 2;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &nd), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(nd, &n, info), NVML_SUCCESS);
    CHECK_EQ(n, 1);
    CHECK_EQ(info[0].pid, getpid() + (off ? atol(off) : 0));
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(nd, &mem2), NVML_SUCCESS);
    CHECK_EQ_U(mem2.total, 4096 * MiB);
    mem2.version = 1;
    CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(nd, &mem2), 25 /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */);
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(nd, &mem2), NVML_ERROR_UNINITIALIZED);

    CHECK_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    CHECK_EQ_U(used(), 0);
    fakecuda_state_close(st);
    fake_scratch_close(&scratch);
    printf("memory kinds: ok\n");
    return 0;
}
