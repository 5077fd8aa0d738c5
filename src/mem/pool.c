/*
 * Stream-ordered allocation. A pool's physical footprint is its reserved
 * size, which grows in chunks and shrinks when the driver releases memory
 * (at synchronisation, on trim, on destroy). Rule: each pool we allocate
 * from carries a charge equal to the reserved size we last saw; every
 * allocation charges its size first (so growth can never overshoot),
 * then the pool is recharged to its new reserved size. Frees, trims,
 * destroys and refused charges re-read the pools and uncharge what the
 * driver released. Graph memory (graph.c) follows the same rule
 * with the device's graph-memory reservation.
 */
#include <pthread.h>
#include <string.h>

#include "core/fork.h"
#include "core/log.h"
#include "limiter/limiter.h"
#include "mem/charge.h"

/* Serialises charge updates of one process's pools so a read of the
 * reserved size and the charge it produces stay paired. Never held across
 * an allocation call. */
static pthread_mutex_t recharge_lock = PTHREAD_MUTEX_INITIALIZER;

void cs__pools_atfork_child(void)
{
    /* A parent thread may have held it at fork; the records it guards are
     * dropped with the rest of the parent's (cs__track_reset). */
    cs__mutex_reset(&recharge_lock);
}

/* The driver forbids pool attribute reads to a thread in GLOBAL capture
 * mode while any GLOBAL capture is open: read in relaxed mode then. */
static uint64_t pool_reserved(CUmemoryPool pool)
{
    cuuint64_t v = 0;
    struct cs_capture_guard g;
    cs__capture_unsafe_begin(&g);
    CUresult r = cs_drv.cuMemPoolGetAttribute
                     ? cs_drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v)
                     : CUDA_ERROR_NOT_FOUND;
    cs__capture_unsafe_end(&g);
    return r == CUDA_SUCCESS ? v : UINT64_MAX;
}

/* Recharges `pool` to its reserved size, using `hold` bytes already
 * charged by the caller. CUDA_SUCCESS or OOM (charge unchanged, hold
 * uncharged). */
static CUresult recharge_pool(CUmemoryPool pool, int dev, uint64_t hold)
{
    pthread_mutex_lock(&recharge_lock);
    struct cs_tracked t = {.bytes = 0, .dev = dev, .cat = CS_MEM_POOL};
    cs__track_get(CS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &t);
    uint64_t reserved = pool_reserved(pool);
    if (reserved == UINT64_MAX)
        reserved = t.bytes + hold; /* cannot ask: keep what we reserved */
    CUresult r = cs__recharge(t.dev, CS_MEM_POOL, t.bytes + hold, reserved);
    if (r == CUDA_SUCCESS) {
        t.bytes = reserved;
        cs__track_put(CS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &t);
    } else {
        cs__uncharge(t.dev, CS_MEM_POOL, hold);
    }
    pthread_mutex_unlock(&recharge_lock);
    return r;
}

static CUmemoryPool current_pool(int dev)
{
    CUmemoryPool pool = NULL;
    if (cs_drv.cuDeviceGetMemPool && cs_drv.cuDeviceGetMemPool(&pool, dev) == CUDA_SUCCESS)
        return pool;
    return NULL;
}

typedef CUresult(CUDAAPI *alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult(CUDAAPI *alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult(CUDAAPI *free_async_fn)(CUdeviceptr, CUstream);

/* On a capturing stream an allocation is a graph node, not pool memory:
 * nothing is reserved in a pool now, and the graph's memory is charged
 * when it is launched (graph.c). So it passes through, refused early only
 * when it alone could never fit the budget, like an explicit node. */
static CUresult alloc_captured(alloc_async_fn fn_dev, alloc_pool_fn fn_pool, CUdeviceptr *dptr,
                               size_t bytesize, CUmemoryPool pool, CUstream s)
{
    int dev = cs__current_device();
    uint64_t limit = dev >= 0 ? cs__device_limit(dev) : 0;
    if (limit && bytesize > limit)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return fn_pool ? fn_pool(dptr, bytesize, pool, s) : fn_dev(dptr, bytesize, s);
}

static CUresult alloc_async(alloc_async_fn fn_dev, alloc_pool_fn fn_pool, free_async_fn fn_free,
                            CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s,
                            bool ptsz)
{
    if (cs__capture_stream_captured(s ? s : ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY))
        return alloc_captured(fn_dev, fn_pool, dptr, bytesize, pool, s);
    int dev = cs__current_device();
    if (!pool && dev >= 0)
        pool = current_pool(dev);
    if (!dptr || bytesize == 0 || dev < 0 || !pool)
        return fn_pool ? fn_pool(dptr, bytesize, pool, s) : fn_dev(dptr, bytesize, s);
    CUresult r = cs__charge(dev, CS_MEM_POOL, bytesize);
    if (r != CUDA_SUCCESS)
        return r;
    r = fn_pool ? fn_pool(dptr, bytesize, pool, s) : fn_dev(dptr, bytesize, s);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_POOL, bytesize);
        return r;
    }
    if (recharge_pool(pool, dev, bytesize) != CUDA_SUCCESS) {
        fn_free(*dptr, s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CS_ENTER(cuMemAllocAsync);
    return alloc_async(cs_real.cuMemAllocAsync, NULL, cs_real.cuMemFreeAsync, dptr, bytesize, NULL,
                       hStream, false);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CS_ENTER(cuMemAllocAsync_ptsz);
    return alloc_async(cs_real.cuMemAllocAsync_ptsz, NULL, cs_real.cuMemFreeAsync_ptsz, dptr,
                       bytesize, NULL, hStream, true);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    CS_ENTER(cuMemAllocFromPoolAsync);
    return alloc_async(NULL, cs_real.cuMemAllocFromPoolAsync, cs_real.cuMemFreeAsync, dptr,
                       bytesize, pool, hStream, false);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                              CUmemoryPool pool, CUstream hStream)
{
    CS_ENTER(cuMemAllocFromPoolAsync_ptsz);
    return alloc_async(NULL, cs_real.cuMemAllocFromPoolAsync_ptsz, cs_real.cuMemFreeAsync_ptsz,
                       dptr, bytesize, pool, hStream, true);
}

/* A synchronous cuMemAlloc pointer freed with cuMemFreeAsync is ours to
 * uncharge; pool pointers only change the pool's reserved size later. */
struct free_async_call {
    free_async_fn fn;
    CUstream stream;
};

static CUresult call_free_async(uint64_t dptr, void *ctx)
{
    struct free_async_call *c = ctx;
    return c->fn((CUdeviceptr)dptr, c->stream);
}

static CUresult free_async(free_async_fn fn, CUdeviceptr dptr, CUstream s)
{
    struct free_async_call c = {fn, s};
    return cs__free_tracked(CS_TRACK_PTR, dptr, call_free_async, &c);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    CS_ENTER(cuMemFreeAsync);
    return free_async(cs_real.cuMemFreeAsync, dptr, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    CS_ENTER(cuMemFreeAsync_ptsz);
    return free_async(cs_real.cuMemFreeAsync_ptsz, dptr, hStream);
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CS_ENTER(cuMemPoolTrimTo);
    CUresult r = cs_real.cuMemPoolTrimTo(pool, minBytesToKeep);
    struct cs_tracked t;
    if (r == CUDA_SUCCESS && cs__track_get(CS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &t) == 0)
        recharge_pool(pool, t.dev, 0);
    return r;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    CS_ENTER(cuMemPoolDestroy);
    CUresult r = cs_real.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&recharge_lock);
        cs__uncharge_record(CS_TRACK_POOL, (uint64_t)(uintptr_t)pool);
        pthread_mutex_unlock(&recharge_lock);
    }
    return r;
}

struct stale {
    uint64_t key[64];
    int dev[64];
    int n;
};

static void collect_pool(uint64_t key, struct cs_tracked *t, void *ctx)
{
    struct stale *s = ctx;
    if (s->n < 64) {
        s->key[s->n] = key;
        s->dev[s->n++] = t->dev;
    }
}

void cs__pools_recharge(void)
{
    struct stale s = {.n = 0};
    cs__track_each(CS_TRACK_POOL, collect_pool, &s);
    for (int i = 0; i < s.n; i++)
        recharge_pool((CUmemoryPool)(uintptr_t)s.key[i], s.dev[i], 0);
    cs__graph_recharge();
}
