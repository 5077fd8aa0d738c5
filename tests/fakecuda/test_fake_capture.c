/*
 * TEST of the test tool tests/fakecuda (never shipped): stream capture in
 * the fake driver (fake_capture.c). Captured work is not run but becomes
 * graph nodes; an instantiated captured graph runs for FAKECUDA_GRAPH_US
 * plus its kernel and memset nodes; memsets and the legacy launch API
 * occupy the device timeline; the capture interaction modes prohibit the
 * potentially unsafe calls exactly as cuThreadExchangeStreamCaptureMode
 * says (own thread and a second thread, ordered by a barrier); captured
 * events, stream queries of capturing streams, the legacy stream against
 * blocking captures, fork/join, isolation, capture into an existing graph,
 * stream-ordered allocation inside a capture (graph memory, pool
 * untouched) and ending from the wrong thread. Durations are read from the
 * device state (exact) and from events queued behind a blocker kernel.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fake_bringup.h"
#include "support/support.h"
#include "fakecuda/fakecuda_state.h"

/* cuda.h deprecates the legacy launch API; programs still call it, so the
 * fake models it and this test calls it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define MiB (1024ULL * 1024ULL)
#define US 1000ULL

/* Not declared by cuda.h outside the driver build. */
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult CUDAAPI cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                       size_t Height);
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

static CUcontext g_ctx;
static CUfunction g_fn;
static struct fakecuda_device *g_dev;

/* The tests' monotonic clock (tests/support), unsigned as these sums want. */
static uint64_t now_ns(void)
{
    return (uint64_t)cs_now_ns();
}

static CUresult launch(CUstream s, unsigned blocks)
{
    return cuLaunchKernel(g_fn, blocks, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
}

static CUstream stream(unsigned flags)
{
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, flags), CUDA_SUCCESS);
    return s;
}

static CUevent event(void)
{
    CUevent e;
    CHECK_EQ(cuEventCreate(&e, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    return e;
}

static CUstreamCaptureStatus status(CUstream s)
{
    CUstreamCaptureStatus st = (CUstreamCaptureStatus)-1;
    CHECK_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
    return st;
}

static CUstreamCaptureMode set_mode(CUstreamCaptureMode m)
{
    CHECK_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
    return m;
}

static size_t nodes(CUgraph g)
{
    size_t n = 0;
    CHECK_EQ(cuGraphGetNodes(g, NULL, &n), CUDA_SUCCESS);
    return n;
}

/* Ends a capture that must have failed with `want`: no graph. */
static void end_fails(CUstream s, CUresult want)
{
    CUgraph g = (CUgraph)&g;
    CHECK_EQ(cuStreamEndCapture(s, &g), want);
    CHECK(g == NULL);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
}

static CUgraph end_ok(CUstream s)
{
    CUgraph g = NULL;
    CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    CHECK(g != NULL);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
    return g;
}

static uint64_t busy(void)
{
    return fakecuda_load(&g_dev->busy_ns);
}

/* Device time of the work `fn` enqueues, exactly, from the device state. */
#define DEVICE_TIME(stmt)                                                    \
    ({                                                                       \
        uint64_t b0_ = busy();                                               \
        stmt;                                                                \
        busy() - b0_;                                                        \
    })

/* ---- 1. capture, instantiate, launch: the graph lasts what it holds ------- */

static void test_capture_and_duration(void)
{
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc(&d, 8 * MiB), CUDA_SUCCESS);
    CUevent inside = event();

    CHECK_EQ(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
             CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_EQ(cuStreamBeginCapture(s, (CUstreamCaptureMode)3), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUstreamCaptureStatus cs;
    cuuint64_t id = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t nd = 99;
    CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, &id, &cg, &deps, NULL, &nd), CUDA_SUCCESS);
    CHECK(cs == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && cg != NULL);
    CHECK_EQ(nd, 0);

    uint64_t busy0 = busy(), launches0 = fakecuda_load(&g_dev->launches);
    CHECK_EQ(launch(s, 10), CUDA_SUCCESS);                                 /* 10 us */
    CHECK_EQ(cuMemsetD8Async(d, 1, 2 * MiB, s), CUDA_SUCCESS);             /* 2 us */
    CHECK_EQ(cuMemsetD2D32Async(d, 8192, 7, 1024, 256, s), CUDA_SUCCESS);  /* 1 MiB: 1 us */
    CHECK_EQ(cuEventRecord(inside, s), CUDA_SUCCESS);                      /* no node */
    CHECK_EQ(cuLaunchCooperativeKernel(g_fn, 5, 1, 1, 32, 1, 1, 0, s, NULL), CUDA_SUCCESS); /* 5 us */
    CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, NULL, NULL, &deps, NULL, &nd), CUDA_SUCCESS);
    CHECK_EQ(nd, 1);
    /* Nothing ran: the device timeline did not move. */
    CHECK_EQ_U(busy(), busy0);
    CHECK_EQ_U(fakecuda_load(&g_dev->launches), launches0);
    /* A graph launch cannot be captured (measured on driver 580). */
    CUgraph empty;
    CUgraphExec empty_x;
    CHECK_EQ(cuGraphCreate(&empty, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphInstantiate(&empty_x, empty, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* unsafe */
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK_EQ(launch(s, 1), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* Again, cleanly. */
    CHECK_EQ(cuGraphInstantiate(&empty_x, empty, 0), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cuuint64_t id2 = 0;
    CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, &id2, NULL, NULL, NULL, NULL), CUDA_SUCCESS);
    CHECK(id2 != id);
    CHECK_EQ(cuGraphLaunch(empty_x, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(launch(s, 10), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8Async(d, 1, 2 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD2D32Async(d, 8192, 7, 1024, 256, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(inside, s), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchCooperativeKernel(g_fn, 5, 1, 1, 32, 1, 1, 0, s, NULL), CUDA_SUCCESS);
    CUgraph g = end_ok(s);
    CHECK_EQ(nodes(g), 4);
    CUgraphNode got[6];
    size_t n = 6;
    CHECK_EQ(cuGraphGetNodes(g, got, &n), CUDA_SUCCESS);
    CHECK_EQ(n, 4);
    CHECK(got[3] != NULL && got[4] == NULL && got[5] == NULL);
    CHECK_EQ_U(busy(), busy0);

    /* 100 us of graph launch + 10 + 2 + 1 + 5 us of nodes = 118 us. */
    const uint64_t want = 118 * US;
    CUgraphExec x;
    CHECK_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS)), want);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuGraphLaunch(empty_x, s), CUDA_SUCCESS)), 100 * US);

    /* Events on a stream outside capture, queued behind a 300 ms blocker
     * so both are timestamps of the device timeline, not of this thread. */
    CUevent e0 = event(), e1 = event();
    CHECK_EQ(launch(s, 300000), CUDA_SUCCESS);
    uint64_t blocker_end = fakecuda_load(&g_dev->busy_until_ns);
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    CHECK_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    int queued_in_time = now_ns() < blocker_end;
    CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
    float ms = 0;
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    CHECK(ms >= 0.118f - 1e-4f);
    if (queued_in_time) /* the record of e0 reached the queue before the blocker ended */
        CHECK(fabsf(ms - 0.118f) < 1e-4f);
    printf("captured graph: 4 nodes, launch %.4f ms (want 0.118)\n", ms);

    /* The event recorded inside the finished capture is unusable until
     * recorded again (measured: CUDA_ERROR_INVALID_VALUE). */
    CHECK_EQ(cuEventQuery(inside), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuStreamWaitEvent(s, inside, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuEventRecord(inside, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventSynchronize(inside), CUDA_SUCCESS);

    CHECK_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
    CHECK_EQ(cuGraphExecDestroy(empty_x), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(empty), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e0), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e1), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(inside), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(d), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

/* ---- 2. memsets and the legacy launch API occupy the timeline --------------- */

static void test_memsets_and_legacy_launches(void)
{
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc(&d, 8 * MiB), CUDA_SUCCESS);
    uint64_t launches0 = fakecuda_load(&g_dev->launches);
    /* FAKECUDA_MEMSET_NS_PER_MIB=1000: bytes written * 1000 / MiB ns, >= 1. */
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD8(d, 0, MiB), CUDA_SUCCESS)), 1000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD16(d, 0, MiB / 2), CUDA_SUCCESS)), 1000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD32(d, 0, MiB), CUDA_SUCCESS)), 4000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD2D8(d, 4096, 0, 1024, 1024), CUDA_SUCCESS)), 1000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD2D16(d, 4096, 0, 1024, 1024), CUDA_SUCCESS)), 2000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD2D32(d, 4096, 0, 1024, 1024), CUDA_SUCCESS)), 4000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD8_v2_ptds(d, 0, 3 * MiB), CUDA_SUCCESS)), 3000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD2D16_v2_ptds(d, 4096, 0, 2048, 512), CUDA_SUCCESS)), 2000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD8Async(d, 0, 10, s), CUDA_SUCCESS)), 1); /* at least 1 ns */
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD16Async(d, 0, MiB, s), CUDA_SUCCESS)), 2000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD32Async_ptsz(d, 0, MiB, NULL), CUDA_SUCCESS)), 4000);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuMemsetD2D8Async(d, 8192, 0, 8192, 512, s), CUDA_SUCCESS)), 4000);
    CHECK_EQ_U(fakecuda_load(&g_dev->launches), launches0); /* memsets are not launches */
    /* Ranges are checked like every other memory operation. */
    CHECK_EQ(cuMemsetD8(d + 8 * MiB - 8, 0, 9), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemsetD32Async(d + 2, 0, 4, s), CUDA_ERROR_INVALID_VALUE);  /* misaligned */
    CHECK_EQ(cuMemsetD2D8(d, 100, 0, 200, 2), CUDA_ERROR_INVALID_VALUE);  /* pitch < width */
    CHECK_EQ(cuMemsetD2D8Async(d, 4 * MiB, 0, 16, 3, s), CUDA_ERROR_INVALID_VALUE); /* last row outside */
    CHECK_EQ(cuMemsetD8(0x1000, 0, 1), CUDA_ERROR_INVALID_VALUE);

    /* Legacy launches: FAKECUDA_NS_PER_BLOCK=1000 per block. */
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuLaunch(g_fn), CUDA_SUCCESS)), 1 * US);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuLaunchGrid(g_fn, 3, 4), CUDA_SUCCESS)), 12 * US);
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuLaunchGridAsync(g_fn, 2, 5, s), CUDA_SUCCESS)), 10 * US);
    CHECK_EQ(cuLaunchGrid(g_fn, 0, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunch((CUfunction)&s), CUDA_ERROR_INVALID_HANDLE);
    CUDA_LAUNCH_PARAMS lp[2];
    memset(lp, 0, sizeof(lp));
    for (int i = 0; i < 2; i++) {
        lp[i].function = g_fn;
        lp[i].gridDimX = 7 + (unsigned)i;
        lp[i].gridDimY = lp[i].gridDimZ = 1;
        lp[i].blockDimX = 32;
        lp[i].blockDimY = lp[i].blockDimZ = 1;
        lp[i].hStream = i ? s : CU_STREAM_PER_THREAD;
    }
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuLaunchCooperativeKernelMultiDevice(lp, 2, 0), CUDA_SUCCESS)), 15 * US);
    CHECK_EQ_U(fakecuda_load(&g_dev->launches), launches0 + 5);

    /* The legacy launch API and the multi-device launch cannot be captured. */
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchGridAsync(g_fn, 1, 1, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchCooperativeKernelMultiDevice(&lp[1], 1, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* Nor can a synchronous memset on a capturing per-thread stream. */
    CHECK_EQ(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &(CUstreamCaptureStatus){0}), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8_v2_ptds(d, 0, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g = (CUgraph)&g;
    CHECK_EQ(cuStreamEndCapture_ptsz(NULL, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == NULL);

    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(d), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

/* cuGetProcAddress resolves the new names to the new exports. */
static void test_proc_address(void)
{
    static const struct {
        const char *base, *plain, *per_thread;
    } rows[] = {
        {"cuMemsetD8", "cuMemsetD8_v2", "cuMemsetD8_v2_ptds"},
        {"cuMemsetD2D32", "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds"},
        {"cuMemsetD16Async", "cuMemsetD16Async", "cuMemsetD16Async_ptsz"},
        {"cuStreamBeginCapture", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"},
        {"cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz"},
        {"cuStreamEndCapture", "cuStreamEndCapture", "cuStreamEndCapture_ptsz"},
        {"cuStreamIsCapturing", "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz"},
        {"cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v3_ptsz"},
        {"cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz"},
        {"cuThreadExchangeStreamCaptureMode", "cuThreadExchangeStreamCaptureMode", NULL},
        {"cuGraphGetNodes", "cuGraphGetNodes", NULL},
        {"cuLaunch", "cuLaunch", NULL},
        {"cuLaunchGrid", "cuLaunchGrid", NULL},
        {"cuLaunchGridAsync", "cuLaunchGridAsync", NULL},
        {"cuLaunchCooperativeKernelMultiDevice", "cuLaunchCooperativeKernelMultiDevice", NULL},
    };
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(self != NULL);
    /* CUDA 10.0 asked for the capture entry point without a mode. */
    void *p = NULL;
    CHECK_EQ(cuGetProcAddress("cuStreamBeginCapture", &p, 10000, CU_GET_PROC_ADDRESS_DEFAULT, NULL), CUDA_SUCCESS);
    CHECK(p != NULL && p == dlsym(self, "cuStreamBeginCapture"));
    CHECK_EQ(cuGetProcAddress("cuStreamBeginCapture", &p, 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                              NULL), CUDA_SUCCESS);
    CHECK(p != NULL && p == dlsym(self, "cuStreamBeginCapture_ptsz"));
    CUresult (*begin_v1)(CUstream) = (CUresult(*)(CUstream))dlsym(self, "cuStreamBeginCapture");
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CHECK_EQ(begin_v1(s), CUDA_SUCCESS);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc(&d, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* GLOBAL */
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        void *p = NULL;
        CUdriverProcAddressQueryResult q;
        CHECK_EQ(cuGetProcAddress(rows[i].base, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
        CHECK(p != NULL && p == dlsym(self, rows[i].plain));
        CHECK_EQ(cuGetProcAddress(rows[i].base, &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q),
                 CUDA_SUCCESS);
        CHECK(p == dlsym(self, rows[i].per_thread ? rows[i].per_thread : rows[i].plain));
    }
    dlclose(self);
}

/* ---- 3. capture interaction modes: own thread and a second thread ----------- */

/* A second thread, stepped by a barrier: the main thread sets up, the
 * helper acts, the main thread checks. */
static pthread_barrier_t g_bar;
static struct {
    int op;                   /* what the helper does next; -1: exit */
    CUstreamCaptureMode mode; /* in which mode */
    CUstream s;
    CUevent e;
    CUresult rc, again;
} g_job;

enum { OP_ALLOC, OP_EVENT_QUERY, OP_STREAM_SYNC, OP_END, OP_CAPTURE_AND_WAIT };

static CUresult helper_op(int op)
{
    switch (op) {
    case OP_ALLOC: {
        CUdeviceptr p;
        CUresult r = cuMemAlloc(&p, MiB);
        if (r == CUDA_SUCCESS)
            CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
        return r;
    }
    case OP_EVENT_QUERY: return cuEventQuery(g_job.e);
    case OP_STREAM_SYNC: return cuStreamSynchronize(g_job.s);
    case OP_END: {
        CUgraph g = (CUgraph)&g;
        CUresult r = cuStreamEndCapture(g_job.s, &g);
        if (r == CUDA_SUCCESS)
            CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
        else
            CHECK(g == NULL || g == (CUgraph)&g);
        return r;
    }
    }
    return CUDA_ERROR_UNKNOWN;
}

static void *helper(void *arg)
{
    (void)arg;
    CHECK_EQ(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    for (;;) {
        pthread_barrier_wait(&g_bar); /* the main thread has set g_job up */
        if (g_job.op < 0)
            break;
        if (g_job.op == OP_CAPTURE_AND_WAIT) {
            /* A GLOBAL capture in this thread while the main thread calls. */
            CHECK_EQ(cuStreamBeginCapture(g_job.s, g_job.mode), CUDA_SUCCESS);
            pthread_barrier_wait(&g_bar); /* capturing */
            pthread_barrier_wait(&g_bar); /* the main thread has made its call */
            g_job.rc = (CUresult)status(g_job.s);
            CUgraph g = (CUgraph)&g;
            g_job.again = cuStreamEndCapture(g_job.s, &g);
            if (g_job.again == CUDA_SUCCESS)
                CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
        } else {
            CUstreamCaptureMode old = set_mode(g_job.mode);
            g_job.rc = helper_op(g_job.op);
            g_job.again = helper_op(g_job.op);
            set_mode(old);
        }
        pthread_barrier_wait(&g_bar); /* done */
    }
    return NULL;
}

static void helper_do(int op, CUstreamCaptureMode mode)
{
    g_job.op = op;
    g_job.mode = mode;
    pthread_barrier_wait(&g_bar);
    pthread_barrier_wait(&g_bar);
}

static void test_modes(void)
{
    const CUstreamCaptureMode G = CU_STREAM_CAPTURE_MODE_GLOBAL, T = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                              R = CU_STREAM_CAPTURE_MODE_RELAXED;
    /* The mode is per thread, GLOBAL by default; only the three values. */
    CUstreamCaptureMode m = (CUstreamCaptureMode)7;
    CHECK_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(m, 7);
    CHECK_EQ(cuThreadExchangeStreamCaptureMode(NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(set_mode(R), G);
    CHECK_EQ(set_mode(G), R);

    CUstream s = stream(CU_STREAM_NON_BLOCKING), other = stream(CU_STREAM_NON_BLOCKING);
    CUevent done = event();
    CHECK_EQ(cuEventRecord(done, other), CUDA_SUCCESS);
    CHECK_EQ(cuEventSynchronize(done), CUDA_SUCCESS);
    g_job.s = other;
    g_job.e = done;

    /* Own thread: prohibited unless the thread is RELAXED or the capture
     * was begun RELAXED. A prohibited call invalidates the capture, and the
     * invalidated (unfinished) capture still prohibits. */
    static const struct {
        CUstreamCaptureMode cap, thr;
        int prohibited;
    } own[] = {{G, G, 1}, {G, T, 1}, {G, R, 0}, {T, G, 1}, {T, T, 1}, {T, R, 0}, {R, G, 0}, {R, T, 0}, {R, R, 0}};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        for (int op = OP_ALLOC; op <= OP_STREAM_SYNC; op++) {
            CHECK_EQ(cuStreamBeginCapture(s, own[i].cap), CUDA_SUCCESS);
            CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
            CUstreamCaptureMode old = set_mode(own[i].thr);
            CUresult r = helper_op(op), again = helper_op(op);
            set_mode(old);
            CUresult want = own[i].prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
            if (r != want || again != want)
                fprintf(stderr, "own cap=%d thr=%d op=%d: %d %d\n", own[i].cap, own[i].thr, op, r, again);
            CHECK_EQ(r, want);
            CHECK_EQ(again, want);
            if (own[i].prohibited) {
                end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            } else {
                CUgraph g = end_ok(s);
                CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
            }
        }
    }

    /* A second thread: prohibited only in GLOBAL mode by a capture begun in
     * GLOBAL mode; the helper's calls invalidate the main thread's capture. */
    pthread_t t;
    CHECK_EQ(pthread_barrier_init(&g_bar, NULL, 2), 0);
    CHECK_EQ(pthread_create(&t, NULL, helper, NULL), 0);
    static const struct {
        CUstreamCaptureMode cap, thr;
        int prohibited;
    } other_thr[] = {{G, G, 1}, {G, T, 0}, {G, R, 0}, {T, G, 0}, {R, G, 0}};
    for (size_t i = 0; i < sizeof(other_thr) / sizeof(other_thr[0]); i++) {
        for (int op = OP_ALLOC; op <= OP_STREAM_SYNC; op++) {
            CHECK_EQ(cuStreamBeginCapture(s, other_thr[i].cap), CUDA_SUCCESS);
            CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
            helper_do(op, other_thr[i].thr);
            CUresult want = other_thr[i].prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
            CHECK_EQ(g_job.rc, want);
            CHECK_EQ(g_job.again, want);
            if (other_thr[i].prohibited) {
                CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
                end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            } else {
                CUgraph g = end_ok(s);
                CHECK_EQ(nodes(g), 1);
                CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
            }
        }
    }

    /* The reverse: the helper captures in GLOBAL mode; the main thread, in
     * GLOBAL mode, is prohibited and invalidates the helper's capture. */
    CUstream hs = stream(CU_STREAM_NON_BLOCKING);
    g_job.s = hs;
    g_job.op = OP_CAPTURE_AND_WAIT;
    g_job.mode = G;
    pthread_barrier_wait(&g_bar);
    pthread_barrier_wait(&g_bar); /* the helper is capturing */
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_EQ(cuEventQuery(done), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureMode old = set_mode(T);
    CHECK_EQ(cuMemAlloc(&p, MiB), CUDA_SUCCESS); /* THREAD_LOCAL ignores other threads */
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    set_mode(old);
    pthread_barrier_wait(&g_bar); /* call made */
    pthread_barrier_wait(&g_bar); /* helper ended its capture */
    CHECK_EQ(g_job.rc, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK_EQ(g_job.again, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* cuStreamEndCapture from the wrong thread: WRONG_THREAD unless the
     * capture was begun RELAXED; measured, it ends the capture all the same. */
    g_job.s = s;
    for (CUstreamCaptureMode cm = G; cm <= R; cm++) {
        CHECK_EQ(cuStreamBeginCapture(s, cm), CUDA_SUCCESS);
        CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
        helper_do(OP_END, G);
        CHECK_EQ(g_job.rc, cm == R ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
        CUgraph g = (CUgraph)&g;
        CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
    }

    g_job.op = -1;
    pthread_barrier_wait(&g_bar);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(pthread_barrier_destroy(&g_bar), 0);

    /* cuCtxSynchronize is refused while any capture of the context is
     * unfinished, whatever the modes (measured). */
    old = set_mode(R);
    CHECK_EQ(cuStreamBeginCapture(s, R), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    set_mode(old);
    /* Loading a module where unsafe calls are prohibited succeeds but
     * invalidates the capture (measured). */
    CHECK_EQ(cuStreamBeginCapture(s, G), CUDA_SUCCESS);
    CUmodule mod;
    CHECK_EQ(cuModuleLoadData(&mod, "x"), CUDA_SUCCESS);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

    CHECK_EQ(cuEventDestroy(done), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(other), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(hs), CUDA_SUCCESS);
}

/* ---- 4. conflicts with capture in any mode ------------------------------------ */

static void test_conflicts(void)
{
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    CUstream s = stream(CU_STREAM_NON_BLOCKING), u = stream(CU_STREAM_NON_BLOCKING);
    CUevent e = event(), e0 = event();
    float ms;
    CHECK_EQ(cuEventRecord(e0, u), CUDA_SUCCESS);

    /* An event last recorded inside a capture: query / synchronize refuse
     * and invalidate; elapsed time refuses without invalidating. */
    for (int v = 0; v < 3; v++) {
        CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
        CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
        CHECK_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
        CUresult r = v == 0 ? cuEventQuery(e) : v == 1 ? cuEventSynchronize(e) : cuEventElapsedTime(&ms, e0, e);
        CHECK_EQ(r, CUDA_ERROR_CAPTURED_EVENT);
        if (v < 2) {
            CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
            CHECK_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_VALUE); /* its capture is invalid now */
            end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        } else {
            CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
            CUgraph g = end_ok(s);
            CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
        }
        CHECK_EQ(cuEventRecord(e, u), CUDA_SUCCESS); /* usable again */
        CHECK_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
    }
    /* Querying or synchronising a capturing stream (the origin or one that
     * joined) refuses and invalidates, whatever the mode. */
    for (int v = 0; v < 4; v++) {
        CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
        CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
        CHECK_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
        CHECK_EQ(cuStreamWaitEvent(u, e, 0), CUDA_SUCCESS); /* u joins */
        CHECK_EQ(status(u), CU_STREAM_CAPTURE_STATUS_ACTIVE);
        CUstream on = v < 2 ? s : u;
        CHECK_EQ(v % 2 ? cuStreamSynchronize(on) : cuStreamQuery(on), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        CHECK_EQ(status(u), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        CHECK_EQ(launch(u, 1), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        CHECK_EQ(status(u), CU_STREAM_CAPTURE_STATUS_NONE);
    }
    set_mode(old);
    CHECK_EQ(cuEventDestroy(e), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e0), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(u), CUDA_SUCCESS);
}

/* ---- 5. the legacy stream against blocking captures --------------------------- */

static void test_legacy(void)
{
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    CUstream blocking = stream(CU_STREAM_DEFAULT), nonblocking = stream(CU_STREAM_NON_BLOCKING);
    CUevent e = event();
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc(&d, MiB), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e, CU_STREAM_LEGACY), CUDA_SUCCESS);
    CHECK_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
    /* Every use of the legacy stream while a blocking stream captures. */
    for (int op = 0; op < 7; op++) {
        for (int kind = 0; kind < 3; kind++) {
            CUstream s = kind == 0 ? blocking : kind == 1 ? nonblocking : CU_STREAM_PER_THREAD;
            CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
            CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
            CUstreamCaptureStatus cs;
            CUresult r = CUDA_ERROR_UNKNOWN;
            switch (op) {
            case 0: r = launch(NULL, 1); break;
            case 1: r = cuMemsetD8(d, 0, 64); break;
            case 2: r = cuEventRecord(e, CU_STREAM_LEGACY); break;
            case 3: r = cuStreamWaitEvent(NULL, e, 0); break;
            case 4: r = cuStreamQuery(CU_STREAM_LEGACY); break;
            case 5: r = cuStreamSynchronize(NULL); break;
            case 6: r = cuMemcpyHtoD(d, &cs, sizeof(cs)); break;
            }
            if (kind == 1) { /* a non-blocking stream does not involve the legacy stream */
                CHECK_EQ(r, CUDA_SUCCESS);
                CUgraph g = end_ok(s);
                CHECK_EQ(nodes(g), 1);
                CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
            } else {
                CHECK_EQ(r, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
                CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
                end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            }
            CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
        }
    }
    /* Asking the legacy stream about capture: IMPLICIT, nothing invalidated. */
    CHECK_EQ(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUstreamCaptureStatus cs;
    CHECK_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &cs), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK_EQ(cuStreamGetCaptureInfo(NULL, &cs, NULL, NULL, NULL, NULL, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK_EQ(status(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK_EQ(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &cs), CUDA_SUCCESS);
    CHECK_EQ(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    CUgraph g = end_ok(blocking);
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &cs), CUDA_SUCCESS);
    CHECK_EQ(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    /* A blocking stream that joined a non-blocking origin counts too. */
    CHECK_EQ(cuStreamBeginCapture(nonblocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e, nonblocking), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(blocking, e, 0), CUDA_SUCCESS);
    CHECK_EQ(launch(CU_STREAM_LEGACY, 1), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    end_fails(nonblocking, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(status(blocking), CU_STREAM_CAPTURE_STATUS_NONE);
    set_mode(old);
    CHECK_EQ(cuMemFree(d), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(blocking), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(nonblocking), CUDA_SUCCESS);
}

/* ---- 6. fork / join, isolation, merge ---------------------------------------- */

static void test_fork_join(void)
{
    CUstream s = stream(CU_STREAM_NON_BLOCKING), t = stream(CU_STREAM_NON_BLOCKING);
    CUstream u = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    CUevent e1 = event(), e2 = event(), out = event();
    for (int v = 0; v < 4; v++) {
        CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
        CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
        CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
        CHECK_EQ(cuStreamWaitEvent(t, e1, 0), CUDA_SUCCESS); /* fork: t joins */
        CHECK_EQ(status(t), CU_STREAM_CAPTURE_STATUS_ACTIVE);
        cuuint64_t ids, idt;
        CUstreamCaptureStatus cs;
        CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, &ids, NULL, NULL, NULL, NULL), CUDA_SUCCESS);
        CHECK_EQ(cuStreamGetCaptureInfo(t, &cs, &idt, NULL, NULL, NULL, NULL), CUDA_SUCCESS);
        CHECK_EQ_U(ids, idt);
        CHECK_EQ(launch(t, 2), CUDA_SUCCESS);
        if (v != 1) { /* join back */
            CHECK_EQ(cuEventRecord(e2, t), CUDA_SUCCESS);
            CHECK_EQ(cuStreamWaitEvent(s, e2, 0), CUDA_SUCCESS);
        }
        if (v == 2)
            CHECK_EQ(launch(t, 1), CUDA_SUCCESS); /* more work after the join */
        CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
        if (v == 3) {
            /* Ending on the stream that joined is not allowed and spoils it. */
            CUgraph g = (CUgraph)&g;
            CHECK_EQ(cuStreamEndCapture(t, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
            CHECK(g == NULL);
            CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
            end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        } else if (v == 0) {
            size_t nd = 0;
            CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, NULL, NULL, NULL, NULL, &nd), CUDA_SUCCESS);
            CHECK_EQ(nd, 1);
            CUgraph g = end_ok(s);
            CHECK_EQ(nodes(g), 3);
            CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
        } else {
            end_fails(s, CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
        }
        CHECK_EQ(status(t), CU_STREAM_CAPTURE_STATUS_NONE);
        CHECK_EQ(launch(t, 1), CUDA_SUCCESS); /* t runs again */
    }

    /* Isolation: a capturing stream may not wait on work outside it. */
    CHECK_EQ(launch(u, 1), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(out, u), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(s, out, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* ... unless it asks for an external event wait node. */
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(s, out, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
    CHECK_EQ(launch(s, 1), CUDA_SUCCESS);
    CUgraph g = end_ok(s);
    CHECK_EQ(nodes(g), 2);
    CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(u, out, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_ILLEGAL_STATE);

    /* Merge: waiting on another capture's event spoils both (measured). */
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(s2, e1, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    end_fails(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    end_fails(s2, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* Destroying the origin ends its capture; a capture's graph cannot be
     * destroyed under it (both measured). */
    CUstream o = stream(CU_STREAM_NON_BLOCKING);
    CHECK_EQ(cuStreamBeginCapture(o, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUgraph cg;
    CUstreamCaptureStatus cs;
    CHECK_EQ(cuStreamGetCaptureInfo(o, &cs, NULL, &cg, NULL, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(cg), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(cuStreamDestroy(o), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS); /* no capture left */

    CHECK_EQ(cuEventDestroy(e1), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e2), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(out), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(t), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(u), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s2), CUDA_SUCCESS);
}

/* ---- 7. capture into an existing graph; graph memory -------------------------- */

static void test_to_graph_and_memory(void)
{
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CUgraph g0;
    CUgraphNode an;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof(ap));
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.bytesize = MiB;
    CHECK_EQ(cuGraphCreate(&g0, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphAddMemAllocNode(&an, g0, NULL, 0, &ap), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCaptureToGraph(s, g0, &an, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUgraph cg = NULL;
    CUstreamCaptureStatus cs;
    size_t nd = 0;
    CHECK_EQ(cuStreamGetCaptureInfo(s, &cs, NULL, &cg, NULL, NULL, &nd), CUDA_SUCCESS);
    CHECK(cg == g0);
    CHECK_EQ(nd, 1);
    CHECK_EQ(launch(s, 3), CUDA_SUCCESS);

    /* Stream-ordered allocation inside the capture: a graph allocation
     * node; the pool and the device are not touched until a launch. */
    CUmemoryPool pool;
    cuuint64_t used0, res0, v;
    CHECK_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    CUstreamCaptureMode old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED); /* pool queries are unsafe */
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used0), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res0), CUDA_SUCCESS);
    set_mode(old);
    uint64_t dev_used0 = fakecuda_load(&g_dev->used);
    CUdeviceptr p = 0, q = 0;
    CHECK_EQ(cuMemAllocAsync(&p, 3 * MiB, s), CUDA_SUCCESS);      /* 4 MiB of graph memory */
    CHECK_EQ(cuMemAllocFromPoolAsync(&q, 1000, pool, s), CUDA_SUCCESS); /* 2 MiB */
    CHECK(p && q && p != q);
    CHECK_EQ(cuMemsetD8Async(p, 0, 3 * MiB, s), CUDA_SUCCESS); /* the address is valid at once */
    CHECK_EQ(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, used0);
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, res0);
    set_mode(old);
    CHECK_EQ_U(fakecuda_load(&g_dev->used), dev_used0);
    CUgraph g = NULL;
    CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    CHECK(g == g0);
    CHECK_EQ(nodes(g0), 6); /* alloc node, kernel, 2 allocs, memset, free */

    CUgraphExec x;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof(ip));
    CHECK_EQ(cuGraphInstantiateWithParams(&x, g0, &ip), CUDA_SUCCESS);
    CHECK_EQ(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 0);
    /* 100 us + 3 us kernel + 3 us memset. */
    CHECK_EQ_U(DEVICE_TIME(CHECK_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS)), 106 * US);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 8 * MiB); /* 2 (the added node) + 4 + 2 MiB */
    CHECK_EQ_U(fakecuda_load(&g_dev->used_by_kind[FAKECUDA_KIND_GRAPH]), 8 * MiB);
    CHECK_EQ_U(fakecuda_load(&g_dev->used), dev_used0 + 8 * MiB);
    CHECK_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS); /* charged at the first launch only */
    CHECK_EQ_U(fakecuda_load(&g_dev->used), dev_used0 + 8 * MiB);
    old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, used0);
    set_mode(old);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    CHECK_EQ_U(v, 0);
    CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&g_dev->used), dev_used0);
    CHECK_EQ(cuGraphDestroy(g0), CUDA_SUCCESS);

    /* Outside capture the same calls are potentially unsafe: prohibited
     * during another GLOBAL capture of this thread. */
    CUstream c = stream(CU_STREAM_NON_BLOCKING);
    CHECK_EQ(cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocAsync(&p, MiB, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_fails(c, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_EQ(cuStreamDestroy(c), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

int main(void)
{
    unsetenv("FAKECUDA_STATE"); /* anonymous state: private to this test */
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_GRAPH_US", "100", 1);
    setenv("FAKECUDA_MEMSET_NS_PER_MIB", "1000", 1);
    unsetenv("FAKECUDA_POWER_BUSY_W");
    unsetenv("CUDA_VISIBLE_DEVICES");
    g_ctx = fake_ctx_up();
    CUmodule m;
    g_fn = fake_kernel("k", &m);
    struct fakecuda_state *st = fakecuda_driver_state();
    CHECK(st != NULL);
    g_dev = &st->dev[0];

    test_capture_and_duration();
    test_memsets_and_legacy_launches();
    test_proc_address();
    test_modes();
    test_conflicts();
    test_legacy();
    test_fork_join();
    test_to_graph_and_memory();

    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(cuModuleUnload(m), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    printf("capture: ok\n");
    return 0;
}
