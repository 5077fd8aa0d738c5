/*
 * TEST TOOL (tests/fakecuda), never shipped: asks a CUDA driver how it
 * enforces the rules of stream capture, one line per question, so the fake
 * libcuda.so.1 can be held to what the real driver does. Run it against the
 * real driver on a GPU machine and against the fake; the lines must match
 * (capture_probe.expected holds the real driver's answers; the CTest
 * fake_capture_probe diffs the fake's against them).
 *
 *   cc -O2 -I$CUDA_HOME/include tests/fakecuda/capture_probe.c -lcuda -lpthread
 *
 * Every question starts from a clean state: fresh captures, streams that are
 * not capturing, threads started and joined in turn (no two threads run
 * CUDA calls at once, so the answers never depend on timing).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ULL * 1024ULL)

static const char *rc_name(CUresult r)
{
    switch ((int)r) {
    case 0: return "SUCCESS";
    case 1: return "INVALID_VALUE";
    case 201: return "INVALID_CONTEXT";
    case 400: return "INVALID_HANDLE";
    case 401: return "ILLEGAL_STATE";
    case 500: return "NOT_FOUND";
    case 600: return "NOT_READY";
    case 800: return "NOT_PERMITTED";
    case 801: return "NOT_SUPPORTED";
    case 900: return "CAPTURE_UNSUPPORTED";
    case 901: return "CAPTURE_INVALIDATED";
    case 902: return "CAPTURE_MERGE";
    case 903: return "CAPTURE_UNMATCHED";
    case 904: return "CAPTURE_UNJOINED";
    case 905: return "CAPTURE_ISOLATION";
    case 906: return "CAPTURE_IMPLICIT";
    case 907: return "CAPTURED_EVENT";
    case 908: return "CAPTURE_WRONG_THREAD";
    default: {
        static __thread char buf[32];
        snprintf(buf, sizeof(buf), "CODE_%d", (int)r);
        return buf;
    }
    }
}

static const char *mode_name(int m)
{
    return m == 0 ? "GLOBAL" : m == 1 ? "THREAD_LOCAL" : m == 2 ? "RELAXED" : "?";
}

#define MUST(x)                                                                  \
    do {                                                                         \
        CUresult r_ = (x);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                \
            fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #x, rc_name(r_)); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

/* Not declared by cuda.h outside the driver build. */
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);

CUresult CUDAAPI cuEventElapsedTime_v1(float *pMilliseconds, CUevent hStart, CUevent hEnd)
    __asm__("cuEventElapsedTime");

static CUcontext g_ctx;
static CUfunction g_fn;
static const char g_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry k()\n{\n\tret;\n}\n";
static char g_ptx_path[64];

/* Capture status of a stream as a word (or the error of the query). */
static const char *status(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = cuStreamIsCapturing(s, &st);
    if (r != CUDA_SUCCESS)
        return rc_name(r);
    return st == CU_STREAM_CAPTURE_STATUS_NONE     ? "NONE"
           : st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "ACTIVE"
                                                   : "INVALIDATED";
}

static CUresult launch(CUstream s)
{
    return cuLaunchKernel(g_fn, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
}

static CUstream new_stream(unsigned flags)
{
    CUstream s;
    MUST(cuStreamCreate(&s, flags));
    return s;
}

static CUevent new_event(void)
{
    CUevent e;
    MUST(cuEventCreate(&e, CU_EVENT_DEFAULT));
    return e;
}

static size_t graph_nodes(CUgraph g)
{
    size_t n = 0;
    if (!g || cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS)
        return (size_t)-1;
    return n;
}

/* Ends a capture and prints its result (graph or not, node count). */
static void end_and_print(const char *what, CUstream s)
{
    CUgraph g = (CUgraph)(uintptr_t)1;
    CUresult r = cuStreamEndCapture(s, &g);
    if (r == CUDA_SUCCESS && g)
        printf("%s end=%s nodes=%zu after=%s\n", what, rc_name(r), graph_nodes(g), status(s));
    else
        printf("%s end=%s graph=%s after=%s\n", what, rc_name(r),
               g == NULL ? "null" : g == (CUgraph)(uintptr_t)1 ? "unset" : "set", status(s));
    if (r == CUDA_SUCCESS && g)
        MUST(cuGraphDestroy(g));
}

/* One call, then the stream's status (in that order). */
#define Q(label, call, s)                                                    \
    do {                                                                     \
        CUresult q_ = (call);                                                \
        printf("%s: %s st=%s\n", label, rc_name(q_), status(s));            \
    } while (0)

static CUstreamCaptureMode set_mode(CUstreamCaptureMode m)
{
    MUST(cuThreadExchangeStreamCaptureMode(&m));
    return m;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) || pthread_join(t, NULL)) {
        fprintf(stderr, "pthread failed\n");
        exit(1);
    }
}

/* ---- the potentially unsafe calls (and controls) ------------------------- */

struct res {
    CUstream other;        /* a non-blocking stream that is not capturing */
    CUevent ev_out;        /* recorded on `other`, outside any capture */
    CUdeviceptr dbuf;      /* 1 MiB */
    char hbuf[256];
    CUdeviceptr to_free;   /* freed by the cuMemFree call */
    void *host_to_free;    /* freed by the cuMemFreeHost call */
    CUdeviceptr got;       /* allocated by a call that succeeded */
    void *host_got;
    int got_kind;          /* 1 device, 2 host, 3 async */
    CUdeviceptr pool_ptr;  /* a stream-ordered allocation, freed by the cuMemFreeAsync call */
    CUevent ev_out2;       /* recorded on `other` after ev_out */
    CUevent ev_spare;      /* destroyed by the cuEventDestroy call */
    CUstream st_spare;     /* destroyed by the cuStreamDestroy call */
    CUgraph graph;         /* empty */
    CUgraphExec exec;      /* of `graph`, destroyed by the cuGraphExecDestroy call */
    CUarray array;         /* destroyed by the cuArrayDestroy call */
    CUmipmappedArray mip;  /* destroyed by the cuMipmappedArrayDestroy call */
    CUgraph graph2;        /* destroyed by the cuGraphDestroy call */
    CUmodule module;       /* unloaded by the cuModuleUnload call */
    CUlibrary library;     /* unloaded by the cuLibraryUnload call */
    CUmemGenericAllocationHandle vmm; /* released by the cuMemRelease call */
    CUmemGenericAllocationHandle vmm2; /* mapped at va2 by the cuMemMap call */
    CUdeviceptr va, va2;   /* 2 MiB reservations; va mapped (unmapped by cuMemUnmap) */
    CUstream capturing;    /* the stream being captured */
};

static const char *const call_names[] = {
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost",
    "cuMemAllocManaged", "cuMemAllocPitch_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2", "cuMemsetD8_v2", "cuCtxSynchronize", "cuEventQuery", "cuEventSynchronize",
    "cuStreamQuery", "cuStreamSynchronize", "cuMemGetInfo_v2", "cuEventCreate", "cuStreamCreate",
    "cuMemAllocAsync", "cuMemsetD8Async", "cuLaunchKernel", "cuEventRecord", "cuStreamWaitEvent",
    "cuGraphInstantiate", "cuMemFreeAsync", "cuMemPoolGetAttribute", "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo", "cuDeviceGetGraphMemAttribute", "cuDeviceGraphMemTrim", "cuDeviceGetDefaultMemPool",
    "cuMemcpyHtoDAsync_v2", "cuGraphLaunch", "cuModuleLoadData", "cuEventDestroy_v2", "cuStreamDestroy_v2",
    "cuEventElapsedTime_v2", "cuPointerGetAttribute", "cuMemGetAddressRange_v2", "cuStreamGetCtx",
    "cuCtxPushCurrent_v2", "cuMemCreate", "cuArrayCreate_v2", "cuGraphExecDestroy", "cuGraphCreate",
    "cuStreamSynchronize per-thread", "cuDevicePrimaryCtxRetain", "cuMemsetD32_v2", "cuEventRecordWithFlags",
    "cuStreamGetCaptureInfo other", "cuMemAllocFromPoolAsync", "cuGraphAddMemAllocNode",
    "cuArray3DCreate_v2", "cuMipmappedArrayCreate", "cuArrayDestroy", "cuMipmappedArrayDestroy", "cuGraphDestroy",
    "cuGraphInstantiateWithParams", "cuModuleLoad", "cuModuleLoadDataEx", "cuModuleUnload", "cuLibraryLoadData",
    "cuMemRelease", "cuMemAddressReserve", "cuMemMap", "cuIpcGetMemHandle", "cuMemPoolCreate", "cuDeviceSetMemPool",
    "cuDeviceGetMemPool", "cuMemGetAllocationGranularity", "cuStreamCreateWithPriority", "cuCtxCreate_v4",
    "cuMemcpyDtoHAsync_v2", "cuEventElapsedTime", "cuStreamQuery per-thread", "cuMemsetD8_v2_ptds",
    "cuGraphAddMemFreeNode", "cuDeviceSetGraphMemAttribute", "cuLibraryUnload", "cuMemUnmap",
    "cuLaunchKernel on the capturing stream", "cuStreamIsCapturing of the capturing stream",
    "cuEventQuery of an event recorded on the capturing stream"};
#define NCALLS (int)(sizeof(call_names) / sizeof(call_names[0]))

static void res_prepare(struct res *r)
{
    memset(r, 0, sizeof(*r));
    r->other = new_stream(CU_STREAM_NON_BLOCKING);
    r->ev_out = new_event();
    MUST(cuMemAlloc(&r->dbuf, MiB));
    MUST(cuMemAlloc(&r->to_free, MiB));
    MUST(cuMemAllocHost(&r->host_to_free, 4096));
    MUST(cuEventRecord(r->ev_out, r->other));
    r->ev_out2 = new_event();
    MUST(cuEventRecord(r->ev_out2, r->other));
    MUST(cuMemAllocAsync(&r->pool_ptr, MiB, r->other));
    r->ev_spare = new_event();
    r->st_spare = new_stream(CU_STREAM_NON_BLOCKING);
    MUST(cuGraphCreate(&r->graph, 0));
    MUST(cuGraphInstantiate(&r->exec, r->graph, 0));
    CUDA_ARRAY_DESCRIPTOR ad = {64, 64, CU_AD_FORMAT_FLOAT, 1};
    MUST(cuArrayCreate(&r->array, &ad));
    CUDA_ARRAY3D_DESCRIPTOR md = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    MUST(cuMipmappedArrayCreate(&r->mip, &md, 2));
    MUST(cuGraphCreate(&r->graph2, 0));
    MUST(cuModuleLoadData(&r->module, g_ptx));
    MUST(cuLibraryLoadData(&r->library, g_ptx, NULL, NULL, 0, NULL, NULL, 0));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    MUST(cuMemCreate(&r->vmm, 2 * MiB, &prop, 0));
    MUST(cuMemCreate(&r->vmm2, 2 * MiB, &prop, 0));
    MUST(cuMemAddressReserve(&r->va, 2 * MiB, 0, 0, 0));
    MUST(cuMemAddressReserve(&r->va2, 2 * MiB, 0, 0, 0));
    MUST(cuMemMap(r->va, 2 * MiB, 0, r->vmm2, 0));
    MUST(cuStreamSynchronize(r->other));
}

static void res_release(struct res *r)
{
    if (r->got_kind == 1)
        MUST(cuMemFree(r->got));
    if (r->got_kind == 2)
        MUST(cuMemFreeHost(r->host_got));
    if (r->got_kind == 3)
        MUST(cuMemFreeAsync(r->got, r->other));
    MUST(cuStreamSynchronize(r->other));
    cuMemFree(r->to_free);        /* may already be freed */
    cuMemFreeHost(r->host_to_free);
    cuMemFreeAsync(r->pool_ptr, r->other);
    cuEventDestroy(r->ev_spare);
    cuStreamDestroy(r->st_spare);
    cuGraphExecDestroy(r->exec);
    MUST(cuGraphDestroy(r->graph));
    cuArrayDestroy(r->array);
    cuMipmappedArrayDestroy(r->mip);
    cuGraphDestroy(r->graph2);
    cuModuleUnload(r->module);
    cuLibraryUnload(r->library);
    cuMemRelease(r->vmm);
    cuMemUnmap(r->va, 2 * MiB);
    cuMemUnmap(r->va2, 2 * MiB);
    MUST(cuMemRelease(r->vmm2));
    MUST(cuMemAddressFree(r->va, 2 * MiB));
    MUST(cuMemAddressFree(r->va2, 2 * MiB));
    MUST(cuEventDestroy(r->ev_out2));
    MUST(cuStreamSynchronize(r->other));
    MUST(cuMemFree(r->dbuf));
    MUST(cuEventDestroy(r->ev_out));
    MUST(cuStreamDestroy(r->other));
}

static CUresult do_call(int i, struct res *r)
{
    CUresult x;
    switch (i) {
    case 0:
        x = cuMemAlloc(&r->got, MiB);
        if (!x)
            r->got_kind = 1;
        return x;
    case 1:
        x = cuMemFree(r->to_free);
        return x;
    case 2:
        x = cuMemAllocHost(&r->host_got, 4096);
        if (!x)
            r->got_kind = 2;
        return x;
    case 3:
        x = cuMemHostAlloc(&r->host_got, 4096, 0);
        if (!x)
            r->got_kind = 2;
        return x;
    case 4: return cuMemFreeHost(r->host_to_free);
    case 5:
        x = cuMemAllocManaged(&r->got, MiB, CU_MEM_ATTACH_GLOBAL);
        if (!x)
            r->got_kind = 1;
        return x;
    case 6: {
        size_t pitch;
        x = cuMemAllocPitch(&r->got, &pitch, 1000, 4, 4);
        if (!x)
            r->got_kind = 1;
        return x;
    }
    case 7: return cuMemcpyHtoD(r->dbuf, r->hbuf, 64);
    case 8: return cuMemcpyDtoH(r->hbuf, r->dbuf, 64);
    case 9: return cuMemcpyDtoD(r->dbuf + 128, r->dbuf, 64);
    case 10: return cuMemsetD8(r->dbuf, 0, 64);
    case 11: return cuCtxSynchronize();
    case 12: return cuEventQuery(r->ev_out);
    case 13: return cuEventSynchronize(r->ev_out);
    case 14: return cuStreamQuery(r->other);
    case 15: return cuStreamSynchronize(r->other);
    case 16: {
        size_t f, t;
        return cuMemGetInfo(&f, &t);
    }
    case 17: {
        CUevent e;
        x = cuEventCreate(&e, 0);
        if (!x)
            cuEventDestroy(e);
        return x;
    }
    case 18: {
        CUstream s;
        x = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
        if (!x)
            cuStreamDestroy(s);
        return x;
    }
    case 19:
        x = cuMemAllocAsync(&r->got, MiB, r->other);
        if (!x)
            r->got_kind = 3;
        return x;
    case 20: return cuMemsetD8Async(r->dbuf, 0, 64, r->other);
    case 21: return launch(r->other);
    case 22: return cuEventRecord(r->ev_out, r->other);
    case 23: return cuStreamWaitEvent(r->other, r->ev_out, 0);
    case 24: {
        CUgraph g;
        CUgraphExec x2;
        MUST(cuGraphCreate(&g, 0));
        x = cuGraphInstantiate(&x2, g, 0);
        if (!x)
            cuGraphExecDestroy(x2);
        cuGraphDestroy(g);
        return x;
    }
    case 25: return cuMemFreeAsync(r->pool_ptr, r->other);
    case 26: case 27: case 28: case 31: {
        CUmemoryPool pool;
        cuuint64_t v = 0;
        x = cuDeviceGetDefaultMemPool(&pool, 0);
        if (i == 26 && !x)
            x = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
        if (i == 27 && !x)
            x = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        if (i == 28 && !x)
            x = cuMemPoolTrimTo(pool, 0);
        return x;
    }
    case 29: {
        cuuint64_t v;
        return cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v);
    }
    case 30: return cuDeviceGraphMemTrim(0);
    case 32: return cuMemcpyHtoDAsync(r->dbuf, r->hbuf, 64, r->other);
    case 33: return cuGraphLaunch(r->exec, r->other);
    case 34: {
        static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                                  ".visible .entry k2()\n{\n\tret;\n}\n";
        CUmodule m;
        x = cuModuleLoadData(&m, ptx);
        if (!x)
            cuModuleUnload(m);
        return x;
    }
    case 35: x = cuEventDestroy(r->ev_spare); if (!x) r->ev_spare = NULL; return x;
    case 36: x = cuStreamDestroy(r->st_spare); if (!x) r->st_spare = NULL; return x;
    case 37: {
        float ms;
        return cuEventElapsedTime(&ms, r->ev_out, r->ev_out2);
    }
    case 38: {
        CUcontext c;
        return cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, r->dbuf);
    }
    case 39: {
        CUdeviceptr b;
        size_t n;
        return cuMemGetAddressRange(&b, &n, r->dbuf + 10);
    }
    case 40: {
        CUcontext c;
        return cuStreamGetCtx(r->other, &c);
    }
    case 41: {
        CUcontext c;
        x = cuCtxPushCurrent(g_ctx);
        if (!x)
            cuCtxPopCurrent(&c);
        return x;
    }
    case 42: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h;
        x = cuMemCreate(&h, 2 * MiB, &prop, 0);
        if (!x)
            cuMemRelease(h);
        return x;
    }
    case 43: {
        CUDA_ARRAY_DESCRIPTOR d = {64, 64, CU_AD_FORMAT_FLOAT, 1};
        CUarray a;
        x = cuArrayCreate(&a, &d);
        if (!x)
            cuArrayDestroy(a);
        return x;
    }
    case 44: x = cuGraphExecDestroy(r->exec); if (!x) r->exec = NULL; return x;
    case 45: {
        CUgraph g;
        x = cuGraphCreate(&g, 0);
        if (!x)
            cuGraphDestroy(g);
        return x;
    }
    case 46: return cuStreamSynchronize(CU_STREAM_PER_THREAD);
    case 47: {
        CUcontext c;
        x = cuDevicePrimaryCtxRetain(&c, 0);
        if (!x)
            cuDevicePrimaryCtxRelease(0);
        return x;
    }
    case 48: return cuMemsetD32(r->dbuf, 0, 16);
    case 49: return cuEventRecordWithFlags(r->ev_out, r->other, 0);
    case 50: {
        CUstreamCaptureStatus cs;
        return cuStreamGetCaptureInfo(r->other, &cs, NULL, NULL, NULL, NULL, NULL);
    }
    case 51: {
        CUmemoryPool pool;
        x = cuDeviceGetDefaultMemPool(&pool, 0);
        if (!x)
            x = cuMemAllocFromPoolAsync(&r->got, MiB, pool, r->other);
        if (!x)
            r->got_kind = 3;
        return x;
    }
    case 52: {
        CUgraph g;
        CUgraphNode n;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof(p));
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.bytesize = MiB;
        MUST(cuGraphCreate(&g, 0));
        x = cuGraphAddMemAllocNode(&n, g, NULL, 0, &p);
        cuGraphDestroy(g);
        return x;
    }
    case 53: {
        CUDA_ARRAY3D_DESCRIPTOR d = {64, 64, 4, CU_AD_FORMAT_FLOAT, 1, 0};
        CUarray a;
        x = cuArray3DCreate(&a, &d);
        if (!x)
            cuArrayDestroy(a);
        return x;
    }
    case 54: {
        CUDA_ARRAY3D_DESCRIPTOR d = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
        CUmipmappedArray a;
        x = cuMipmappedArrayCreate(&a, &d, 2);
        if (!x)
            cuMipmappedArrayDestroy(a);
        return x;
    }
    case 55: x = cuArrayDestroy(r->array); if (!x) r->array = NULL; return x;
    case 56: x = cuMipmappedArrayDestroy(r->mip); if (!x) r->mip = NULL; return x;
    case 57: x = cuGraphDestroy(r->graph2); if (!x) r->graph2 = NULL; return x;
    case 58: {
        CUgraphExec e2;
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        memset(&ip, 0, sizeof(ip));
        x = cuGraphInstantiateWithParams(&e2, r->graph, &ip);
        if (!x)
            cuGraphExecDestroy(e2);
        return x;
    }
    case 59: case 60: {
        CUmodule m;
        x = i == 59 ? cuModuleLoad(&m, g_ptx_path) : cuModuleLoadDataEx(&m, g_ptx, 0, NULL, NULL);
        if (!x)
            cuModuleUnload(m);
        return x;
    }
    case 61: x = cuModuleUnload(r->module); if (!x) r->module = NULL; return x;
    case 62: {
        CUlibrary l;
        x = cuLibraryLoadData(&l, g_ptx, NULL, NULL, 0, NULL, NULL, 0);
        if (!x)
            cuLibraryUnload(l);
        return x;
    }
    case 63: x = cuMemRelease(r->vmm); if (!x) r->vmm = 0; return x;
    case 64: {
        CUdeviceptr v;
        x = cuMemAddressReserve(&v, 2 * MiB, 0, 0, 0);
        if (!x)
            cuMemAddressFree(v, 2 * MiB);
        return x;
    }
    case 65: return cuMemMap(r->va2, 2 * MiB, 0, r->vmm2, 0);
    case 66: {
        CUipcMemHandle h;
        return cuIpcGetMemHandle(&h, r->dbuf);
    }
    case 67: {
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CUmemoryPool pool;
        x = cuMemPoolCreate(&pool, &pp);
        if (!x)
            cuMemPoolDestroy(pool);
        return x;
    }
    case 68: case 69: {
        CUmemoryPool pool;
        x = cuDeviceGetDefaultMemPool(&pool, 0);
        if (!x)
            x = i == 68 ? cuDeviceSetMemPool(0, pool) : cuDeviceGetMemPool(&pool, 0);
        return x;
    }
    case 70: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        size_t g;
        return cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    }
    case 71: {
        CUstream s2;
        x = cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, 0);
        if (!x)
            cuStreamDestroy(s2);
        return x;
    }
    case 72: {
        CUcontext c;
        x = cuCtxCreate_v4(&c, NULL, 0, 0);
        if (!x) {
            cuCtxDestroy(c);
            cuCtxSetCurrent(g_ctx);
        }
        return x;
    }
    case 73: return cuMemcpyDtoHAsync(r->hbuf, r->dbuf, 64, r->other);
    case 74: {
        float ms;
        return cuEventElapsedTime_v1(&ms, r->ev_out, r->ev_out2);
    }
    case 75: return cuStreamQuery(CU_STREAM_PER_THREAD);
    case 76: return cuMemsetD8_v2_ptds(r->dbuf, 0, 64);
    case 77: {
        CUgraph g;
        CUgraphNode an, fn;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof(p));
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.bytesize = MiB;
        MUST(cuGraphCreate(&g, 0));
        MUST(cuGraphAddMemAllocNode(&an, g, NULL, 0, &p));
        x = cuGraphAddMemFreeNode(&fn, g, &an, 1, p.dptr);
        cuGraphDestroy(g);
        return x;
    }
    case 78: {
        cuuint64_t v = 0;
        return cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v);
    }
    case 79: x = cuLibraryUnload(r->library); if (!x) r->library = NULL; return x;
    case 80: return cuMemUnmap(r->va, 2 * MiB);
    case 81: return launch(r->capturing);
    case 82: {
        CUstreamCaptureStatus cs;
        return cuStreamIsCapturing(r->capturing, &cs);
    }
    case 83:
        x = cuEventRecord(r->ev_out2, r->capturing);
        return x ? x : cuEventQuery(r->ev_out2);
    }
    return CUDA_ERROR_UNKNOWN;
}

struct unsafe_job {
    int call;
    CUstreamCaptureMode thread_mode;
    struct res *r;
    CUresult rc, again;
};

static void *unsafe_thread(void *arg)
{
    struct unsafe_job *j = arg;
    MUST(cuCtxSetCurrent(g_ctx));
    CUstreamCaptureMode old = set_mode(j->thread_mode);
    j->rc = do_call(j->call, j->r);
    /* A second try: does an invalidated (no longer active) capture still
     * prohibit the call? Only for calls that can be repeated. */
    j->again = -1;
    if (j->call == 0 || j->call == 12 || j->call == 15 || j->call == 11 || j->call == 26) {
        if (j->call == 0 && j->r->got_kind == 1) {
            cuMemFree(j->r->got);
            j->r->got_kind = 0;
        }
        j->again = do_call(j->call, j->r);
    }
    set_mode(old);
    return NULL;
}

/* Capture begun in `cap_mode` on a non-blocking stream by the main thread;
 * the call made by the main thread (other=0) or a second thread (other=1)
 * in `thread_mode`. */
static void unsafe_matrix(const char *tag, int other, CUstreamCaptureMode cap_mode,
                          CUstreamCaptureMode thread_mode)
{
    for (int i = 0; i < NCALLS; i++) {
        struct res r;
        res_prepare(&r);
        CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
        MUST(cuStreamBeginCapture(s, cap_mode));
        MUST(launch(s));
        r.capturing = s;
        struct unsafe_job j = {i, thread_mode, &r, 0, 0};
        if (other) {
            run_thread(unsafe_thread, &j);
        } else {
            unsafe_thread(&j);
        }
        char what[256];
        snprintf(what, sizeof(what), "unsafe %s cap=%s thr=%s %s: rc=%s again=%s st=%s", tag,
                 mode_name(cap_mode), mode_name(thread_mode), call_names[i], rc_name(j.rc),
                 j.again == (CUresult)-1 ? "-" : rc_name(j.again), status(s));
        end_and_print(what, s);
        res_release(&r);
        MUST(cuStreamDestroy(s));
    }
}

/* ---- single questions ------------------------------------------------------ */

static void *end_other_thread(void *arg)
{
    CUstream s = arg;
    MUST(cuCtxSetCurrent(g_ctx));
    CUgraph g = (CUgraph)(uintptr_t)1;
    CUresult r = cuStreamEndCapture(s, &g);
    printf("end_other_thread: rc=%s graph=%s st=%s\n", rc_name(r),
           g == NULL ? "null" : g == (CUgraph)(uintptr_t)1 ? "unset" : "set", status(s));
    if (r == CUDA_SUCCESS && g)
        cuGraphDestroy(g);
    return NULL;
}

static void basics(void)
{
    CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
    CUgraph g;
    printf("begin legacy: %s\n", rc_name(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL)));
    printf("begin null: %s\n", rc_name(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL)));
    printf("status legacy: %s\n", status(CU_STREAM_LEGACY));
    Q("begin bad mode", cuStreamBeginCapture(s, (CUstreamCaptureMode)7), s);
    g = (CUgraph)(uintptr_t)1;
    printf("end not capturing: %s graph=%s\n", rc_name(cuStreamEndCapture(s, &g)),
           g == NULL ? "null" : g == (CUgraph)(uintptr_t)1 ? "unset" : "set");
    printf("status fresh: %s\n", status(s));
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    Q("begin twice", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), s);
    MUST(launch(s));
    Q("end null graph ptr", cuStreamEndCapture(s, NULL), s);
    if (strcmp(status(s), "NONE"))
        end_and_print("  end after null graph ptr", s);
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus cs;
    cuuint64_t id1 = 0, id2 = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t nd = 99;
    MUST(cuStreamGetCaptureInfo(s, &cs, &id1, &cg, &deps, NULL, &nd));
    printf("info active: status=%d id=%s graph=%s deps=%zu\n", (int)cs, id1 ? "nonzero" : "zero",
           cg ? "set" : "null", nd);
    MUST(launch(s));
    MUST(cuStreamGetCaptureInfo(s, &cs, &id2, &cg, &deps, NULL, &nd));
    printf("info after launch: same_id=%d deps=%zu\n", id1 == id2, nd);
    end_and_print("basic capture", s);
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(cuStreamGetCaptureInfo(s, &cs, &id2, NULL, NULL, NULL, NULL));
    printf("second capture: new_id=%d\n", id1 != id2);
    end_and_print("empty capture", s);
    printf("info none: %s\n", rc_name(cuStreamGetCaptureInfo(s, &cs, &id2, NULL, NULL, NULL, NULL)));
    printf("info null status ptr: %s\n", rc_name(cuStreamGetCaptureInfo(s, NULL, NULL, NULL, NULL, NULL, NULL)));
    printf("is_capturing null ptr: %s\n", rc_name(cuStreamIsCapturing(s, NULL)));

    CUstreamCaptureMode m = (CUstreamCaptureMode)99;
    printf("exchange bad mode: %s\n", rc_name(cuThreadExchangeStreamCaptureMode(&m)));
    printf("exchange bad mode returned: %s\n", mode_name((int)m));
    if (m != (CUstreamCaptureMode)99) { /* accepted: put the old mode back, see what was stored */
        printf("exchange restore: %s\n", rc_name(cuThreadExchangeStreamCaptureMode(&m)));
        printf("exchange stored: %d\n", (int)m);
    }
    m = CU_STREAM_CAPTURE_MODE_RELAXED;
    MUST(cuThreadExchangeStreamCaptureMode(&m));
    printf("exchange default was: %s\n", mode_name(m));
    MUST(cuThreadExchangeStreamCaptureMode(&m));

    /* Per-thread default stream. */
    printf("begin ptsz null: %s\n", rc_name(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL)));
    printf("status per-thread: %s\n", status(CU_STREAM_PER_THREAD));
    printf("launch per-thread: %s\n", rc_name(launch(CU_STREAM_PER_THREAD)));
    end_and_print("per-thread capture", CU_STREAM_PER_THREAD);

    /* Everything that becomes a node. */
    CUevent e = new_event();
    CUdeviceptr d;
    MUST(cuMemAlloc(&d, MiB));
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("cap launch: %s\n", rc_name(launch(s)));
    printf("cap memset8: %s\n", rc_name(cuMemsetD8Async(d, 1, 4096, s)));
    printf("cap memset32 2d: %s\n", rc_name(cuMemsetD2D32Async(d, 1024, 7, 16, 4, s)));
    printf("cap record: %s\n", rc_name(cuEventRecord(e, s)));
    printf("cap wait own: %s\n", rc_name(cuStreamWaitEvent(s, e, 0)));
    end_and_print("node capture", s);
    printf("event query after capture ended: %s\n", rc_name(cuEventQuery(e)));
    printf("event sync after capture ended: %s\n", rc_name(cuEventSynchronize(e)));
    MUST(cuEventRecord(e, s));
    printf("event sync after re-record outside: %s\n", rc_name(cuEventSynchronize(e)));

    /* EndCapture from another thread. */
    for (int mode = 0; mode < 3; mode++) {
        MUST(cuStreamBeginCapture(s, (CUstreamCaptureMode)mode));
        printf("end from other thread, capture %s: ", mode_name(mode));
        fflush(stdout);
        run_thread(end_other_thread, s);
        if (cuStreamIsCapturing(s, &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE) {
            char what[64];
            snprintf(what, sizeof(what), "  then own thread (%s)", mode_name(mode));
            end_and_print(what, s);
        }
    }

    /* A capture invalidated: pushes, queries and the end. */
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr tmp;
    Q("invalidate by cuMemAlloc", cuMemAlloc(&tmp, MiB), s);
    printf("invalidated launch: %s\n", rc_name(launch(s)));
    printf("invalidated memset: %s\n", rc_name(cuMemsetD8Async(d, 0, 64, s)));
    printf("invalidated record: %s\n", rc_name(cuEventRecord(e, s)));
    printf("invalidated wait: %s\n", rc_name(cuStreamWaitEvent(s, e, 0)));
    printf("invalidated info: %s\n", rc_name(cuStreamGetCaptureInfo(s, &cs, &id1, NULL, NULL, NULL, NULL)));
    printf("invalidated info status: %d\n", (int)cs);
    printf("invalidated begin again: %s\n", rc_name(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)));
    printf("invalidated stream query: %s\n", rc_name(cuStreamQuery(s)));
    end_and_print("invalidated capture", s);
    printf("after invalidated end, launch: %s\n", rc_name(launch(s)));
    MUST(cuStreamSynchronize(s));
    MUST(cuMemFree(d));
    MUST(cuEventDestroy(e));
    MUST(cuStreamDestroy(s));
}

/* Event and stream queries that conflict with capture, in RELAXED mode. */
static void conflicts(void)
{
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    const char *names[] = {"cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime start",
                           "cuEventElapsedTime end", "cuStreamQuery", "cuStreamSynchronize",
                           "cuStreamWaitEvent other stream", "cuEventRecord again outside"};
    for (int i = 0; i < 8; i++) {
        CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
        CUstream u = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e = new_event(), e0 = new_event();
        MUST(cuEventRecord(e0, u));
        MUST(cuStreamSynchronize(u));
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        MUST(launch(s));
        MUST(cuEventRecord(e, s));
        CUresult r = CUDA_ERROR_UNKNOWN;
        float ms;
        switch (i) {
        case 0: r = cuEventQuery(e); break;
        case 1: r = cuEventSynchronize(e); break;
        case 2: r = cuEventElapsedTime(&ms, e, e0); break;
        case 3: r = cuEventElapsedTime(&ms, e0, e); break;
        case 4: r = cuStreamQuery(s); break;
        case 5: r = cuStreamSynchronize(s); break;
        case 6: r = cuStreamWaitEvent(u, e, 0); break;
        case 7: r = cuEventRecord(e, u); break;
        }
        char what[160];
        snprintf(what, sizeof(what), "relaxed %s: rc=%s st=%s u=%s", names[i], rc_name(r), status(s),
                 status(u));
        if (i == 6) {
            /* u joined: let it rejoin so the end is clean. */
            CUevent j = new_event();
            MUST(cuEventRecord(j, u));
            MUST(cuStreamWaitEvent(s, j, 0));
            cuEventDestroy(j);
        }
        if (i == 7)
            printf("relaxed sync after re-record outside: %s\n", rc_name(cuEventSynchronize(e)));
        end_and_print(what, s);
        MUST(cuStreamSynchronize(u));
        cuEventDestroy(e);
        cuEventDestroy(e0);
        cuStreamDestroy(s);
        cuStreamDestroy(u);
    }
    /* The same conflicts in GLOBAL mode: which error comes first? */
    set_mode(CU_STREAM_CAPTURE_MODE_GLOBAL);
    for (int i = 0; i < 2; i++) {
        CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e = new_event();
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        MUST(cuEventRecord(e, s));
        CUresult r = i == 0 ? cuEventQuery(e) : cuStreamQuery(s);
        char what[160];
        snprintf(what, sizeof(what), "global %s on captured: rc=%s st=%s",
                 i == 0 ? "cuEventQuery" : "cuStreamQuery", rc_name(r), status(s));
        end_and_print(what, s);
        cuEventDestroy(e);
        cuStreamDestroy(s);
    }
    set_mode(old);
}

static void fork_join(void)
{
    for (int v = 0; v < 6; v++) {
        static const char *const names[] = {
            "join back", "never joined back", "joined, no work", "work after the join back",
            "end on the forked stream", "second fork level"};
        CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
        CUstream t = new_stream(CU_STREAM_NON_BLOCKING);
        CUstream w = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e1 = new_event(), e2 = new_event(), e3 = new_event();
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        MUST(launch(s));
        MUST(cuEventRecord(e1, s));
        CUresult wr = cuStreamWaitEvent(t, e1, 0);
        const char *tst = status(t);
        cuuint64_t ids = 0, idt = 0;
        CUstreamCaptureStatus cs;
        cuStreamGetCaptureInfo(s, &cs, &ids, NULL, NULL, NULL, NULL);
        cuStreamGetCaptureInfo(t, &cs, &idt, NULL, NULL, NULL, NULL);
        if (v != 2)
            MUST(launch(t));
        if (v == 5) {
            MUST(cuEventRecord(e3, t));
            MUST(cuStreamWaitEvent(w, e3, 0));
            MUST(launch(w));
            MUST(cuEventRecord(e3, w));
            MUST(cuStreamWaitEvent(t, e3, 0));
        }
        if (v == 0 || v == 3 || v == 5) {
            MUST(cuEventRecord(e2, t));
            MUST(cuStreamWaitEvent(s, e2, 0));
        }
        if (v == 3)
            MUST(launch(t));
        MUST(launch(s));
        char what[200];
        snprintf(what, sizeof(what), "fork %s: wait=%s t=%s same_id=%d", names[v], rc_name(wr), tst,
                 ids == idt);
        if (v == 4) {
            CUgraph g = (CUgraph)(uintptr_t)1;
            CUresult r = cuStreamEndCapture(t, &g);
            printf("%s end_t=%s graph=%s s=%s t=%s\n", what, rc_name(r),
                   g == NULL ? "null" : g == (CUgraph)(uintptr_t)1 ? "unset" : "set", status(s), status(t));
            printf("  record on t: %s\n", rc_name(cuEventRecord(e2, t)));
            end_and_print("  then origin", s);
        } else {
            end_and_print(what, s);
        }
        printf("  forked after end: t=%s w=%s launch_t=%s\n", status(t), status(w), rc_name(launch(t)));
        MUST(cuStreamSynchronize(t));
        cuEventDestroy(e1);
        cuEventDestroy(e2);
        cuEventDestroy(e3);
        cuStreamDestroy(s);
        cuStreamDestroy(t);
        cuStreamDestroy(w);
    }
}

static void isolation(void)
{
    for (int v = 0; v < 4; v++) {
        CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
        CUstream s2 = new_stream(CU_STREAM_NON_BLOCKING);
        CUstream u = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e = new_event();
        const char *name = "";
        CUresult r;
        if (v < 3) {
            MUST(launch(u));
            MUST(cuEventRecord(e, u));
            MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
            MUST(launch(s));
            if (v == 0) {
                name = "outside event";
                r = cuStreamWaitEvent(s, e, 0);
            } else if (v == 1) {
                name = "outside event, WAIT_EXTERNAL";
                r = cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL);
            } else {
                CUevent fresh = new_event();
                name = "never recorded event";
                r = cuStreamWaitEvent(s, fresh, 0);
                cuEventDestroy(fresh);
            }
            char what[160];
            snprintf(what, sizeof(what), "isolation %s: rc=%s st=%s", name, rc_name(r), status(s));
            end_and_print(what, s);
        } else {
            MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
            MUST(launch(s));
            MUST(cuEventRecord(e, s));
            MUST(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL));
            MUST(launch(s2));
            r = cuStreamWaitEvent(s2, e, 0);
            char what[160];
            snprintf(what, sizeof(what), "merge wait on other capture's event: rc=%s s=%s s2=%s", rc_name(r),
                     status(s), status(s2));
            printf("%s\n", what);
            end_and_print("  end s", s);
            end_and_print("  end s2", s2);
        }
        printf("  wait external outside capture: %s\n", rc_name(cuStreamWaitEvent(u, e, CU_EVENT_WAIT_EXTERNAL)));
        MUST(cuCtxSynchronize());
        cuEventDestroy(e);
        cuStreamDestroy(s);
        cuStreamDestroy(s2);
        cuStreamDestroy(u);
    }
}

static void legacy(void)
{
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    static const char *const names[] = {
        "launch", "memsetD8Async", "cuMemsetD8_v2", "cuEventRecord", "cuStreamWaitEvent", "cuStreamQuery",
        "cuStreamSynchronize", "cuStreamIsCapturing", "cuStreamGetCaptureInfo", "cuLaunchKernel NULL",
        "cuMemAllocAsync", "cuMemcpyHtoDAsync_v2", "cuCtxSynchronize", "cuEventQuery other",
        "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemsetD32_v2", "cuMemsetD2D8_v2",
        "cuLaunchGridAsync NULL", "cuGraphLaunch", "cuMemFreeAsync", "cuLaunchCooperativeKernel NULL",
        "cuEventRecord per-thread", "cuMemsetD8_v2_ptds"};
    int n = (int)(sizeof(names) / sizeof(names[0]));
    CUgraph eg;
    CUgraphExec ex;
    MUST(cuGraphCreate(&eg, 0));
    MUST(cuGraphInstantiate(&ex, eg, 0));
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < n; i++) {
            CUstream s = kind == 2 ? CU_STREAM_PER_THREAD
                                   : new_stream(kind == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING);
            CUstream t = NULL;
            CUdeviceptr pp;
            MUST(cuMemAllocAsync(&pp, MiB, CU_STREAM_LEGACY));
            CUevent e = new_event();
            CUdeviceptr d;
            char hb[64];
            MUST(cuMemAlloc(&d, MiB));
            MUST(cuEventRecord(e, CU_STREAM_LEGACY));
            MUST(cuCtxSynchronize());
            MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
            MUST(launch(s));
            CUevent je = NULL;
            if (kind == 3) { /* a blocking stream joins a non-blocking origin */
                t = new_stream(CU_STREAM_DEFAULT);
                je = new_event();
                MUST(cuEventRecord(je, s));
                MUST(cuStreamWaitEvent(t, je, 0));
            }
            CUresult r = CUDA_ERROR_UNKNOWN;
            CUstreamCaptureStatus cs = 9;
            switch (i) {
            case 0: r = launch(CU_STREAM_LEGACY); break;
            case 1: r = cuMemsetD8Async(d, 0, 64, CU_STREAM_LEGACY); break;
            case 2: r = cuMemsetD8(d, 0, 64); break;
            case 3: r = cuEventRecord(e, CU_STREAM_LEGACY); break;
            case 4: r = cuStreamWaitEvent(CU_STREAM_LEGACY, e, 0); break;
            case 5: r = cuStreamQuery(CU_STREAM_LEGACY); break;
            case 6: r = cuStreamSynchronize(CU_STREAM_LEGACY); break;
            case 7: r = cuStreamIsCapturing(CU_STREAM_LEGACY, &cs); break;
            case 8: r = cuStreamGetCaptureInfo(CU_STREAM_LEGACY, &cs, NULL, NULL, NULL, NULL, NULL); break;
            case 9: r = launch(NULL); break;
            case 10: {
                CUdeviceptr p;
                r = cuMemAllocAsync(&p, MiB, CU_STREAM_LEGACY);
                if (!r)
                    cuMemFreeAsync(p, CU_STREAM_LEGACY);
                break;
            }
            case 11: r = cuMemcpyHtoDAsync(d, hb, 64, CU_STREAM_LEGACY); break;
            case 12: r = cuCtxSynchronize(); break;
            case 13: r = cuEventQuery(e); break;
            case 14: r = cuMemcpyHtoD(d, hb, 64); break;
            case 15: r = cuMemcpyDtoH(hb, d, 64); break;
            case 16: r = cuMemcpyDtoD(d + 64, d, 64); break;
            case 17: r = cuMemsetD32(d, 0, 16); break;
            case 18: r = cuMemsetD2D8(d, 64, 0, 16, 4); break;
            case 19: r = cuLaunchGridAsync(g_fn, 2, 2, NULL); break;
            case 20: r = cuGraphLaunch(ex, CU_STREAM_LEGACY); break;
            case 21: r = cuMemFreeAsync(pp, CU_STREAM_LEGACY); if (!r) pp = 0; break;
            case 22: r = cuLaunchCooperativeKernel(g_fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL); break;
            case 23: r = kind == 2 ? CUDA_ERROR_NOT_SUPPORTED : cuEventRecord(e, CU_STREAM_PER_THREAD); break;
            case 24: r = kind == 2 ? CUDA_ERROR_NOT_SUPPORTED : cuMemsetD8_v2_ptds(d, 0, 64); break;
            }
            char what[200];
            snprintf(what, sizeof(what), "legacy capture on %s, %s: rc=%s st=%s",
                     kind == 0 ? "blocking" : kind == 1 ? "non-blocking" : kind == 2 ? "per-thread" : "joined blocking",
                     names[i], rc_name(r), status(s));
            if (t && cuEventRecord(je, t) == CUDA_SUCCESS)
                MUST(cuStreamWaitEvent(s, je, 0));
            end_and_print(what, s);
            if (t) {
                cuEventDestroy(je);
                cuStreamDestroy(t);
            }
            if (pp)
                MUST(cuMemFreeAsync(pp, CU_STREAM_LEGACY));
            MUST(cuCtxSynchronize());
            MUST(cuMemFree(d));
            cuEventDestroy(e);
            if (kind != 2)
                cuStreamDestroy(s);
        }
    }
    cuGraphExecDestroy(ex);
    cuGraphDestroy(eg);
    set_mode(old);
}

/* Graph launches and the legacy launch API into a capture; events of a
 * finished capture; which captures a prohibited call invalidates. */
static void more(void)
{
    CUstream s = new_stream(CU_STREAM_NON_BLOCKING), u = new_stream(CU_STREAM_NON_BLOCKING);
    CUgraph g, eg;
    CUgraphExec x, ex;
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    MUST(cuStreamEndCapture(s, &g));
    MUST(cuGraphInstantiate(&x, g, 0));
    MUST(cuGraphCreate(&eg, 0));
    MUST(cuGraphInstantiate(&ex, eg, 0));
    for (int i = 0; i < 7; i++) {
        static const char *const names[] = {"cuGraphLaunch kernel graph", "cuGraphLaunch empty graph",
                                            "cuLaunchGridAsync", "cuLaunchCooperativeKernel", "cuLaunchKernelEx",
                                            "cuMemsetD2D16Async", "cuMemcpyHtoDAsync_v2"};
        CUdeviceptr d;
        char hb[64];
        MUST(cuMemAlloc(&d, MiB));
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CUresult r = CUDA_ERROR_UNKNOWN;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = 32;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = s;
        switch (i) {
        case 0: r = cuGraphLaunch(x, s); break;
        case 1: r = cuGraphLaunch(ex, s); break;
        case 2: r = cuLaunchGridAsync(g_fn, 2, 3, s); break;
        case 3: r = cuLaunchCooperativeKernel(g_fn, 1, 1, 1, 32, 1, 1, 0, s, NULL); break;
        case 4: r = cuLaunchKernelEx(&cfg, g_fn, NULL, NULL); break;
        case 5: r = cuMemsetD2D16Async(d, 128, 3, 16, 4, s); break;
        case 6: r = cuMemcpyHtoDAsync(d, hb, 64, s); break;
        }
        char what[160];
        snprintf(what, sizeof(what), "capture %s: rc=%s st=%s", names[i], rc_name(r), status(s));
        end_and_print(what, s);
        MUST(cuMemFree(d));
    }
    printf("cuLaunchGrid outside capture: %s\n", rc_name(cuLaunchGrid(g_fn, 1, 1)));
    printf("cuLaunch outside capture: %s\n", rc_name(cuLaunch(g_fn)));
    MUST(cuCtxSynchronize());

    /* Events of a capture that ended well, and of one still invalidated. */
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    for (int v = 0; v < 2; v++) {
        CUevent e = new_event(), e0 = new_event();
        float ms;
        MUST(cuEventRecord(e0, u));
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        MUST(launch(s));
        MUST(cuEventRecord(e, s));
        if (v == 1) {
            CUstreamCaptureMode m2 = set_mode(CU_STREAM_CAPTURE_MODE_GLOBAL);
            CUdeviceptr p;
            printf("invalidating cuMemAlloc: %s st=", rc_name(cuMemAlloc(&p, MiB)));
            printf("%s\n", status(s));
            set_mode(m2);
            printf("invalidated capture's event: query=%s", rc_name(cuEventQuery(e)));
            printf(" wait_u=%s", rc_name(cuStreamWaitEvent(u, e, 0)));
            printf(" u=%s\n", status(u));
        }
        CUgraph cg = NULL;
        CUresult er = cuStreamEndCapture(s, &cg);
        printf("%s capture's event after end (%s): query=%s", v ? "invalidated" : "finished", rc_name(er),
               rc_name(cuEventQuery(e)));
        printf(" sync=%s", rc_name(cuEventSynchronize(e)));
        printf(" elapsed=%s", rc_name(cuEventElapsedTime(&ms, e0, e)));
        printf(" wait_u=%s", rc_name(cuStreamWaitEvent(u, e, 0)));
        printf(" u=%s", status(u));
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        printf(" wait_in_new_capture=%s", rc_name(cuStreamWaitEvent(s, e, 0)));
        printf(" st=%s", status(s));
        CUgraph g2 = NULL;
        printf(" end2=%s", rc_name(cuStreamEndCapture(s, &g2)));
        printf(" rerecord=%s", rc_name(cuEventRecord(e, u)));
        printf(" query=%s\n", rc_name(cuEventSynchronize(e)));
        if (cg)
            cuGraphDestroy(cg);
        if (g2)
            cuGraphDestroy(g2);
        cuEventDestroy(e);
        cuEventDestroy(e0);
    }
    set_mode(old);

    /* Which captures a prohibited call invalidates. */
    struct res r;
    for (int v = 0; v < 4; v++) {
        static const char *const names[] = {"own GLOBAL+RELAXED", "other GLOBAL+RELAXED", "other GLOBAL+GLOBAL",
                                            "own GLOBAL+THREAD_LOCAL"};
        CUstream a = new_stream(CU_STREAM_NON_BLOCKING), b = new_stream(CU_STREAM_NON_BLOCKING);
        res_prepare(&r);
        MUST(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
        MUST(cuStreamBeginCapture(b, v == 2 ? CU_STREAM_CAPTURE_MODE_GLOBAL
                                     : v == 3 ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL : CU_STREAM_CAPTURE_MODE_RELAXED));
        struct unsafe_job j = {0, CU_STREAM_CAPTURE_MODE_GLOBAL, &r, 0, 0};
        if (v == 1 || v == 2)
            run_thread(unsafe_thread, &j);
        else
            unsafe_thread(&j);
        char what[160];
        snprintf(what, sizeof(what), "two captures %s: rc=%s again=%s a=%s b=%s", names[v], rc_name(j.rc),
                 rc_name(j.again), status(a), status(b));
        printf("%s\n", what);
        end_and_print("  end a", a);
        end_and_print("  end b", b);
        res_release(&r);
        cuStreamDestroy(a);
        cuStreamDestroy(b);
    }

    /* Queries of a stream that joined a capture. */
    for (int v = 0; v < 2; v++) {
        CUstream t = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e = new_event();
        old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        MUST(launch(s));
        MUST(cuEventRecord(e, s));
        MUST(cuStreamWaitEvent(t, e, 0));
        CUresult q = v ? cuStreamSynchronize(t) : cuStreamQuery(t);
        printf("joined stream %s: rc=%s s=%s", v ? "cuStreamSynchronize" : "cuStreamQuery", rc_name(q), status(s));
        printf(" t=%s\n", status(t));
        cuEventRecord(e, t);
        cuStreamWaitEvent(s, e, 0);
        end_and_print("  end", s);
        set_mode(old);
        cuEventDestroy(e);
        cuStreamDestroy(t);
    }
    /* Capture info of a joined stream and its dependencies. */
    {
        CUstream t = new_stream(CU_STREAM_NON_BLOCKING);
        CUevent e = new_event();
        CUstreamCaptureStatus cs;
        size_t nd = 99, nt = 99;
        CUgraph gs = NULL, gt = NULL;
        MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        MUST(launch(s));
        MUST(launch(s));
        MUST(cuEventRecord(e, s));
        MUST(cuStreamWaitEvent(t, e, 0));
        MUST(cuStreamGetCaptureInfo(t, &cs, NULL, &gt, NULL, NULL, &nt));
        MUST(launch(t));
        MUST(cuEventRecord(e, t));
        MUST(cuStreamWaitEvent(s, e, 0));
        MUST(cuStreamGetCaptureInfo(s, &cs, NULL, &gs, NULL, NULL, &nd));
        printf("joined info: t_deps=%zu same_graph=%d s_deps_after_join=%zu\n", nt, gs == gt, nd);
        end_and_print("  end", s);
        cuEventDestroy(e);
        cuStreamDestroy(t);
    }
    MUST(cuGraphExecDestroy(x));
    MUST(cuGraphExecDestroy(ex));
    MUST(cuGraphDestroy(g));
    MUST(cuGraphDestroy(eg));
    MUST(cuStreamDestroy(s));
    MUST(cuStreamDestroy(u));
}

/* Odds and ends: a graph in use, the legacy stream against an invalidated
 * capture or a captured event, destroying streams of a capture, external
 * event nodes, synchronous per-thread memsets, the legacy launch API. */
static void edges(void)
{
    CUstream s = new_stream(CU_STREAM_NON_BLOCKING), t = new_stream(CU_STREAM_NON_BLOCKING);
    CUstream b = new_stream(CU_STREAM_DEFAULT);
    CUevent e = new_event();
    CUdeviceptr d;
    CUstreamCaptureStatus cs;
    MUST(cuMemAlloc(&d, MiB));
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);

    CUgraph g0;
    MUST(cuGraphCreate(&g0, 0));
    MUST(cuStreamBeginCaptureToGraph(s, g0, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    CUgraphExec x0;
    CUresult r = cuGraphInstantiate(&x0, g0, 0);
    printf("instantiate graph under capture: %s", rc_name(r));
    if (!r)
        cuGraphExecDestroy(x0);
    printf(" st=%s\n", status(s));
    Q("destroy graph under capture", cuGraphDestroy(g0), s);
    end_and_print("  end", s);
    cuGraphDestroy(g0);

    MUST(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(b));
    (void)cuStreamQuery(b); /* invalidates the capture */
    printf("legacy on invalidated blocking capture: launch=%s", rc_name(launch(CU_STREAM_LEGACY)));
    printf(" is_capturing=%s", rc_name(cuStreamIsCapturing(CU_STREAM_LEGACY, &cs)));
    printf(" st=%s\n", status(b));
    end_and_print("  end", b);

    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    MUST(cuEventRecord(e, s));
    Q("legacy waits on captured event", cuStreamWaitEvent(CU_STREAM_LEGACY, e, 0), s);
    end_and_print("  end", s);

    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    MUST(cuEventRecord(e, s));
    MUST(cuStreamWaitEvent(t, e, 0));
    Q("begin on joined stream", cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_GLOBAL), s);
    Q("end on legacy", cuStreamEndCapture(CU_STREAM_LEGACY, &g0), s);
    const CUgraphEdgeData *ed;
    Q("info edges without deps", cuStreamGetCaptureInfo(s, &cs, NULL, NULL, NULL, &ed, NULL), s);
    Q("destroy joined stream", cuStreamDestroy(t), s);
    end_and_print("  end", s);
    MUST(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));

    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    r = cuStreamDestroy(s);
    printf("destroy origin stream: %s\n", rc_name(r));
    if (r)
        end_and_print("  end", s);
    else
        MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(s));
    Q("record external in capture", cuEventRecordWithFlags(e, s, CU_EVENT_RECORD_EXTERNAL), s);
    MUST(launch(s));
    end_and_print("  end", s);

    MUST(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
    Q("memset ptds on capturing per-thread stream", cuMemsetD8_v2_ptds(d, 0, 64), CU_STREAM_PER_THREAD);
    end_and_print("  end", CU_STREAM_PER_THREAD);

    MUST(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_GLOBAL));
    MUST(launch(b));
    Q("cuLaunch with blocking capture", cuLaunch(g_fn), b);
    Q("cuLaunchGrid with blocking capture", cuLaunchGrid(g_fn, 2, 2), b);
    end_and_print("  end", b);

    CUDA_LAUNCH_PARAMS lp;
    memset(&lp, 0, sizeof(lp));
    lp.function = g_fn;
    lp.gridDimX = lp.gridDimY = lp.gridDimZ = 1;
    lp.blockDimX = 32;
    lp.blockDimY = lp.blockDimZ = 1;
    lp.hStream = s;
    printf("multi-device launch outside capture: %s\n", rc_name(cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0)));
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    Q("multi-device launch in capture", cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0), s);
    end_and_print("  end", s);

    CUgraph ga, gb;
    CUgraphNode na;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof(ap));
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.bytesize = MiB;
    MUST(cuGraphCreate(&ga, 0));
    MUST(cuGraphCreate(&gb, 0));
    MUST(cuGraphAddMemAllocNode(&na, ga, NULL, 0, &ap));
    Q("capture to graph, deps of another graph", cuStreamBeginCaptureToGraph(s, gb, &na, NULL, 1,
                                                                              CU_STREAM_CAPTURE_MODE_GLOBAL), s);
    r = cuStreamBeginCaptureToGraph(s, ga, &na, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL);
    size_t nd = 99;
    cuStreamGetCaptureInfo(s, &cs, NULL, NULL, NULL, NULL, &nd);
    printf("capture to graph with a dependency: %s deps=%zu\n", rc_name(r), nd);
    MUST(launch(s));
    CUgraph out = NULL;
    r = cuStreamEndCapture(s, &out);
    printf("  end=%s out_is_graph=%d nodes=%zu\n", rc_name(r), out == ga, graph_nodes(ga));
    cuGraphDestroy(ga);
    cuGraphDestroy(gb);

    set_mode(old);
    MUST(cuCtxSynchronize());
    MUST(cuMemFree(d));
    cuEventDestroy(e);
    cuStreamDestroy(s);
    cuStreamDestroy(t);
    cuStreamDestroy(b);
}

static void memory(void)
{
    CUdevice dev = 0;
    CUmemoryPool pool;
    MUST(cuDeviceGetDefaultMemPool(&pool, dev));
    cuuint64_t used0 = 0, res0 = 0, used1 = 0, res1 = 0, gu0 = 0, gu1 = 0, gu2 = 0, gr = 0;
    CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
    MUST(cuStreamSynchronize(s));
    MUST(cuMemPoolTrimTo(pool, 0));
    MUST(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used0));
    MUST(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res0));
    MUST(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &gu0));
    MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p = 0, q = 0;
    CUresult r1 = cuMemAllocAsync(&p, 3 * MiB, s);
    CUresult r2 = cuMemAllocAsync(&q, 1000, s);
    MUST(launch(s));
    CUresult r3 = cuMemFreeAsync(q, s);
    /* Pool queries are unsafe during a GLOBAL capture: ask in RELAXED mode. */
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    MUST(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used1));
    MUST(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res1));
    set_mode(old);
    CUgraph g;
    MUST(cuStreamEndCapture(s, &g));
    printf("alloc in capture: %s %s free=%s ptr=%s pool_used_delta=%llu pool_reserved_delta=%llu nodes=%zu\n",
           rc_name(r1), rc_name(r2), rc_name(r3), p ? "set" : "zero",
           (unsigned long long)(used1 - used0), (unsigned long long)(res1 - res0), graph_nodes(g));
    CUgraphExec x;
    MUST(cuGraphInstantiate(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    MUST(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &gu1));
    MUST(cuGraphLaunch(x, s));
    MUST(cuStreamSynchronize(s));
    MUST(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &gu2));
    MUST(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &gr));
    printf("graph mem: before_launch=%llu after_launch=%llu reserved_after=%llu\n",
           (unsigned long long)(gu1 - gu0), (unsigned long long)(gu2 - gu0), (unsigned long long)gr);
    MUST(cuGraphExecDestroy(x));
    MUST(cuGraphDestroy(g));
    MUST(cuDeviceGraphMemTrim(dev));

    /* Capturing into an existing graph. */
    CUgraph g0, out = NULL;
    MUST(cuGraphCreate(&g0, 0));
    CUresult rb = cuStreamBeginCaptureToGraph(s, g0, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CUgraph cg = NULL;
    CUstreamCaptureStatus cs;
    cuStreamGetCaptureInfo(s, &cs, NULL, &cg, NULL, NULL, NULL);
    MUST(launch(s));
    MUST(launch(s));
    CUresult re = cuStreamEndCapture(s, &out);
    printf("capture to graph: begin=%s info_graph_is_g0=%d end=%s out_is_g0=%d nodes=%zu\n", rc_name(rb),
           cg == g0, rc_name(re), out == g0, graph_nodes(g0));
    MUST(cuGraphDestroy(g0));
    MUST(cuStreamDestroy(s));
}

int main(void)
{
    CUmodule mod;
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_ptx_path, sizeof(g_ptx_path), "/tmp/capture_probe.%d.ptx", (int)getpid());
    FILE *f = fopen(g_ptx_path, "w");
    if (!f || fputs(g_ptx, f) < 0 || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", g_ptx_path);
        return 1;
    }
    MUST(cuInit(0));
    MUST(cuDevicePrimaryCtxRetain(&g_ctx, 0));
    MUST(cuCtxSetCurrent(g_ctx));
    MUST(cuModuleLoadData(&mod, g_ptx));
    MUST(cuModuleGetFunction(&g_fn, mod, "k"));

    basics();
    conflicts();
    fork_join();
    isolation();
    legacy();
    memory();
    more();
    edges();
    unsafe_matrix("own", 0, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
    unsafe_matrix("own", 0, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    unsafe_matrix("own", 0, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED);
    unsafe_matrix("own", 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
    unsafe_matrix("own", 0, CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_GLOBAL);
    unsafe_matrix("other", 1, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
    unsafe_matrix("other", 1, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    unsafe_matrix("other", 1, CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED);
    unsafe_matrix("other", 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
    unsafe_matrix("other", 1, CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_GLOBAL);
    MUST(cuModuleUnload(mod));
    MUST(cuDevicePrimaryCtxRelease(0));
    unlink(g_ptx_path);
    printf("probe done\n");
    return 0;
}
