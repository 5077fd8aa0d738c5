/*
 * TEST TOOL (tests/fakecuda), never shipped: device memory of the fake
 * libcuda.so.1. No backing store: device addresses are numbers from a
 * per-process bump allocator (0x7f0000000000 + physical_device << 40, VMM
 * reservations from 0x600000000000); physical usage is charged to the
 * shared state (fake_common.c) and refused past the device's total.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_internal.h"

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* ---- address space ------------------------------------------------------ */

#define FC_DEV_VA_BASE 0x7f0000000000ULL
#define FC_VMM_VA_BASE 0x600000000000ULL

static uint64_t g_va_next[FAKECUDA_MAX_DEVICES];
static uint64_t g_vmm_va_next;

uint64_t fc_va_alloc(int phys, uint64_t size)
{
    if (!g_va_next[phys])
        g_va_next[phys] = FC_DEV_VA_BASE + ((uint64_t)phys << 40);
    uint64_t align = size >= FC_GRANULE ? FC_GRANULE : 512;
    uint64_t base = round_up(g_va_next[phys], align);
    g_va_next[phys] = base + round_up(size ? size : 1, 512);
    return base;
}

/* ---- allocation table (sorted by base) ---------------------------------- */

enum fc_akind { A_MEM = 1, A_POOL, A_IPC, A_EXTBUF };

struct fc_alloc {
    uint64_t base, size;
    int phys;
    int kind;             /* enum fc_akind */
    int managed;
    int refs;             /* A_IPC: opens of the same handle */
    uint64_t charged;     /* A_MEM: bytes charged (FAKECUDA_KIND_ALLOC) */
    struct fc_ctx *ctx;   /* owning context (A_MEM, A_IPC, A_EXTBUF) */
    void *owner;          /* A_POOL: pool, A_EXTBUF: external memory */
    int slot;             /* IPC export slot (A_MEM exporter, A_IPC importer) */
    uint64_t gen;
    uint64_t id;          /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
};

static struct fc_alloc *g_allocs;
static size_t g_nallocs, g_cap;
static uint64_t g_next_id = 1;

/* First index with base >= p. */
static size_t lower(uint64_t p)
{
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_allocs[mid].base < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct fc_alloc *alloc_at(uint64_t base)
{
    size_t i = lower(base);
    return i < g_nallocs && g_allocs[i].base == base ? &g_allocs[i] : NULL;
}

static struct fc_alloc *alloc_containing(uint64_t p)
{
    size_t i = lower(p + 1);
    if (!i)
        return NULL;
    struct fc_alloc *a = &g_allocs[i - 1];
    return p >= a->base && p < a->base + a->size ? a : NULL;
}

static struct fc_alloc *alloc_insert(const struct fc_alloc *a)
{
    if (g_nallocs == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 256;
        struct fc_alloc *n = realloc(g_allocs, cap * sizeof(*n));
        if (!n)
            return NULL;
        g_allocs = n;
        g_cap = cap;
    }
    size_t i = lower(a->base);
    memmove(&g_allocs[i + 1], &g_allocs[i], (g_nallocs - i) * sizeof(*a));
    g_allocs[i] = *a;
    g_allocs[i].id = g_next_id++;
    g_nallocs++;
    return &g_allocs[i];
}

static void alloc_remove(struct fc_alloc *a)
{
    size_t i = (size_t)(a - g_allocs);
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - i - 1) * sizeof(*a));
    g_nallocs--;
}

/* ---- host allocations ---------------------------------------------------- */

struct fc_host {
    struct fc_host *next;
    void *p;
    size_t size;
    struct fc_ctx *ctx;
};
static struct fc_host *g_hosts;

static struct fc_host *host_containing(uintptr_t p)
{
    for (struct fc_host *h = g_hosts; h; h = h->next)
        if (p >= (uintptr_t)h->p && p < (uintptr_t)h->p + h->size)
            return h;
    return NULL;
}

/* ---- objects ------------------------------------------------------------ */

struct fc_array {
    struct fc_obj o;
    uint64_t bytes;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned levels;
};

struct fc_pool {
    struct fc_obj o;
    int is_default;
    uint64_t reserved, used, reserved_high, used_high, threshold;
    CUmemPoolProps props;
};

struct fc_vmm {
    struct fc_obj o;       /* o.phys: device of the memory */
    int home;              /* device whose last context frees it */
    uint64_t size;
    int handle_refs;       /* cuMemCreate/Import/Retain minus cuMemRelease */
    int maps;              /* live cuMemMap mappings */
    int imported;
    int host;              /* host-location memory: charged to no device */
    int slot;              /* export slot (-1 none) */
    uint64_t gen;
    uint64_t charged;
    CUmemAllocationProp prop;
};

struct fc_va {
    struct fc_obj o;
    uint64_t base, size;
};

struct fc_map {
    struct fc_obj o;
    uint64_t base, size;
    struct fc_vmm *h;
};

struct fc_extmem {
    struct fc_obj o;
    uint64_t size;
};

struct fc_gexec {
    struct fc_obj o;
    int launched;
    uint64_t work_ns;      /* kernel and memset nodes, nominal */
    uint32_t occ_ppm;      /* the largest share of the SMs one of them occupies */
    uint64_t bytes[FAKECUDA_MAX_DEVICES];
};

struct gmem {
    uint64_t reserved, used, reserved_high, used_high;
};

static struct fc_pool *g_defpool[FAKECUDA_MAX_DEVICES];
static struct fc_pool *g_curpool[FAKECUDA_MAX_DEVICES];
static struct gmem g_gmem[FAKECUDA_MAX_DEVICES];

static void obj_free(struct fc_obj *o)
{
    fc_obj_del(o);
    free(o);
}

static int ordinal_of(int phys)
{
    for (int i = 0; i < fc_nvis; i++)
        if (fc_vis[i] == phys)
            return i;
    return -1;
}

/* Current context (validated) for calls that need one, under fc_mu. */
#define NEED_CTX(c)                                                       \
    struct fc_ctx *c;                                                     \
    do {                                                                  \
        CUresult r_ = fc_cur_ctx(&c);                                     \
        if (r_ != CUDA_SUCCESS) {                                         \
            fc_unlock();                                                  \
            return r_;                                                    \
        }                                                                 \
    } while (0)

/* A potentially unsafe call (fake_capture.c): refused while an unfinished
 * stream capture prohibits it to this thread (under fc_mu). */
#define UNSAFE_GUARD()                                                    \
    do {                                                                  \
        CUresult u_ = fc_cap_unsafe();                                    \
        if (u_ != CUDA_SUCCESS) {                                         \
            fc_unlock();                                                  \
            return u_;                                                    \
        }                                                                 \
    } while (0)

static void hi_update(uint64_t *hi, uint64_t v)
{
    if (v > *hi)
        *hi = v;
}

/* ---- plain allocations ---------------------------------------------------- */

static CUresult mem_alloc(CUdeviceptr *dptr, uint64_t size, int managed)
{
    fc_lock();
    NEED_CTX(c);
    UNSAFE_GUARD();
    int phys = c->o.phys;
    CUresult r = CUDA_SUCCESS;
    if (fc_charge(phys, size, FAKECUDA_KIND_ALLOC)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        struct fc_alloc a = {.base = fc_va_alloc(phys, size), .size = size, .phys = phys,
                             .kind = A_MEM, .managed = managed, .charged = size,
                             .ctx = c, .slot = -1};
        if (!alloc_insert(&a)) {
            fc_uncharge(phys, size, FAKECUDA_KIND_ALLOC);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *dptr = a.base;
        }
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    FC_BEGIN(cuMemAlloc_v2);
    if (!dptr || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(dptr, bytesize, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                              size_t Height, unsigned int ElementSizeBytes)
{
    FC_BEGIN(cuMemAllocPitch_v2);
    if (!dptr || !pPitch || !WidthInBytes || !Height)
        return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch = round_up(WidthInBytes, 512);
    CUresult r = mem_alloc(dptr, pitch * Height, 0);
    if (r == CUDA_SUCCESS)
        *pPitch = (size_t)pitch;
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    FC_BEGIN(cuMemAllocManaged);
    if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(dptr, bytesize, 1);
}

static void pool_free_alloc(struct fc_alloc *a);

/* Frees an allocation record of any kind (under fc_mu). */
static void alloc_release(struct fc_alloc *a)
{
    switch (a->kind) {
    case A_MEM:
        if (a->slot < 0 || !fc_export_owner_gone(a->slot, a->gen))
            fc_uncharge(a->phys, a->charged, FAKECUDA_KIND_ALLOC);
        alloc_remove(a);
        break;
    case A_POOL:
        pool_free_alloc(a);
        break;
    case A_IPC:
        fc_import_add(a->phys, -(int64_t)a->size);
        fc_export_importers(a->slot, a->gen, -1);
        alloc_remove(a);
        break;
    default:
        alloc_remove(a);
        break;
    }
}

FC_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    FC_BEGIN(cuMemFree_v2);
    fc_lock();
    NEED_CTX(c);
    (void)c;
    UNSAFE_GUARD();
    struct fc_alloc *a = alloc_at(dptr);
    CUresult r = CUDA_SUCCESS;
    if (!a || a->kind == A_IPC)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        alloc_release(a);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    FC_BEGIN(cuMemGetInfo_v2);
    if (!free_ || !total)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    NEED_CTX(c);
    int phys = c->o.phys;
    fc_unlock();
    fc_reap_dead();
    const struct fakecuda_device *D = &fc_S->dev[phys];
    uint64_t used = fakecuda_load(&D->used);
    *total = (size_t)D->total;
    *free_ = (size_t)(used < D->total ? D->total - used : 0);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    FC_BEGIN(cuMemGetAddressRange_v2);
    fc_lock();
    NEED_CTX(c);
    (void)c;
    uint64_t base = 0, size = 0;
    struct fc_alloc *a = alloc_containing(dptr);
    if (a) {
        base = a->base;
        size = a->size;
    } else {
        struct fc_obj *maps[1024];
        size_t n = fc_obj_collect(maps, 1024, FC_T_MAP, NULL, NULL, -1);
        for (size_t i = 0; i < n && i < 1024; i++) {
            struct fc_map *m = (struct fc_map *)maps[i];
            if (dptr >= m->base && dptr < m->base + m->size) {
                base = m->base;
                size = m->size;
            }
        }
    }
    fc_unlock();
    if (!size)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = base;
    if (psize)
        *psize = (size_t)size;
    return CUDA_SUCCESS;
}

/* Device range [p, p+n) inside a live allocation, mapping or graph
 * allocation (under fc_mu). */
int fc_dptr_valid(uint64_t p, uint64_t n)
{
    struct fc_alloc *a = alloc_containing(p);
    if (a)
        return p + n <= a->base + a->size;
    static struct fc_obj *objs[4096];
    size_t cnt = fc_obj_collect(objs, 4096, FC_T_MAP, NULL, NULL, -1);
    for (size_t i = 0; i < cnt && i < 4096; i++) {
        struct fc_map *m = (struct fc_map *)objs[i];
        if (p >= m->base && p + n <= m->base + m->size)
            return 1;
    }
    cnt = fc_obj_collect(objs, 4096, FC_T_GNODE, NULL, NULL, -1);
    for (size_t i = 0; i < cnt && i < 4096; i++) {
        struct fc_gnode *g = (struct fc_gnode *)objs[i];
        if (g->kind == FC_GN_ALLOC && p >= g->dptr && p + n <= g->dptr + g->size)
            return 1;
    }
    return 0;
}

/* A copy of device ranges [d1, d1+n) (and [d2, d2+n) unless d2 is 0) on a
 * stream: the ranges are checked; a copy takes no device time, and on a
 * capturing stream it is a graph node instead (*captured = 1). The
 * synchronous copies use the legacy stream. */
static CUresult copy_op(uint64_t d1, uint64_t d2, uint64_t n, CUstream h, int ptsz, int *captured)
{
    *captured = 0;
    fc_lock();
    struct fc_sref s;
    struct fc_capture *cap = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS && (!fc_dptr_valid(d1, n) || (d2 && !fc_dptr_valid(d2, n))))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = fc_cap_check(&s, &cap);
    if (r == CUDA_SUCCESS && cap) {
        if (!fc_cap_node(cap, &s, FC_GN_MEMCPY, s.ctx->o.phys, 0))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        *captured = 1;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    FC_BEGIN(cuMemcpyHtoD_v2);
    if (!srcHost && ByteCount)
        return CUDA_ERROR_INVALID_VALUE;
    int captured;
    return copy_op(dstDevice, 0, ByteCount, NULL, 0, &captured);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    FC_BEGIN(cuMemcpyDtoH_v2);
    if (!dstHost && ByteCount)
        return CUDA_ERROR_INVALID_VALUE;
    int captured;
    CUresult r = copy_op(srcDevice, 0, ByteCount, NULL, 0, &captured);
    if (r == CUDA_SUCCESS && ByteCount)
        memset(dstHost, 0, ByteCount); /* no backing store: reads zeros */
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    FC_BEGIN(cuMemcpyDtoD_v2);
    int captured;
    if (!dstDevice || !srcDevice)
        return CUDA_ERROR_INVALID_VALUE;
    return copy_op(dstDevice, srcDevice, ByteCount, NULL, 0, &captured);
}

static CUresult htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream h, int ptsz)
{
    if (!src && n)
        return CUDA_ERROR_INVALID_VALUE;
    int captured;
    return copy_op(dst, 0, n, h, ptsz, &captured);
}

static CUresult dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream h, int ptsz)
{
    if (!dst && n)
        return CUDA_ERROR_INVALID_VALUE;
    int captured;
    CUresult r = copy_op(src, 0, n, h, ptsz, &captured);
    if (r == CUDA_SUCCESS && n && !captured)
        memset(dst, 0, n);
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                                size_t ByteCount, CUstream hStream)
{
    FC_BEGIN(cuMemcpyHtoDAsync_v2);
    return htod_async(dstDevice, srcHost, ByteCount, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                                                size_t ByteCount, CUstream hStream)
{
    FC_BEGIN(cuMemcpyDtoHAsync_v2);
    return dtoh_async(dstHost, srcDevice, ByteCount, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                                     size_t ByteCount, CUstream hStream)
{
    FC_BEGIN(cuMemcpyHtoDAsync_v2_ptsz);
    return htod_async(dstDevice, srcHost, ByteCount, hStream, 1);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                                     size_t ByteCount, CUstream hStream)
{
    FC_BEGIN(cuMemcpyDtoHAsync_v2_ptsz);
    return dtoh_async(dstHost, srcDevice, ByteCount, hStream, 1);
}

/* Unified addressing: the direction follows from which side is device
 * memory of ours; host to host is a plain copy. */
static CUresult copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int ptsz)
{
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    int dd = fc_dptr_valid(dst, n), sd = fc_dptr_valid(src, n);
    fc_unlock();
    int captured = 0;
    CUresult r = CUDA_SUCCESS;
    if (dd || sd)
        r = copy_op(dd ? dst : src, dd && sd ? src : 0, n, h, ptsz, &captured);
    if (r == CUDA_SUCCESS && !captured && n && !dd) {
        if (sd)
            memset((void *)(uintptr_t)dst, 0, n); /* no backing store: reads zeros */
        else
            memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    }
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    FC_BEGIN(cuMemcpy);
    return copy_unified(dst, src, ByteCount, NULL, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                         CUstream hStream)
{
    FC_BEGIN(cuMemcpyAsync);
    return copy_unified(dst, src, ByteCount, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                              CUstream hStream)
{
    FC_BEGIN(cuMemcpyAsync_ptsz);
    return copy_unified(dst, src, ByteCount, hStream, 1);
}

/* ---- memsets ---------------------------------------------------------------
 * width elements of `elem` bytes in each of `height` rows `pitch` bytes
 * apart (1D: one row). The range must lie in live device memory and be
 * aligned to the element size. The work occupies the stream's device
 * timeline for bytes * FAKECUDA_MEMSET_NS_PER_MIB / MiB ns (at least 1),
 * stretched by the DVFS model like kernels; on a capturing stream it is a
 * graph node of that duration instead. The synchronous variants (`sync`)
 * use the legacy stream (_ptds: the per-thread default stream) and, like
 * the real driver's, return before the memset has run; measured on driver
 * 580, they cannot be captured (a _ptds memset on a capturing per-thread
 * stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capture invalidated). */
static CUresult memset_op(CUdeviceptr dst, size_t pitch, unsigned elem, size_t width, size_t height, CUstream h,
                          int ptsz, int sync)
{
    uint64_t row = (uint64_t)width * elem;
    if (dst % elem || (height > 1 && pitch < row) || (height > 1 && pitch % elem))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t span = height ? (uint64_t)pitch * (height - 1) + row : 0;
    uint64_t bytes = row * height;
    uint64_t ns = (uint64_t)((unsigned __int128)bytes * fc_cfg.memset_ns_per_mib / (1024 * 1024));
    if (!ns)
        ns = 1;
    fc_lock();
    struct fc_sref s;
    struct fc_capture *cap = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = fc_dptr_valid(dst, span) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = sync ? fc_cap_uncapturable(&s) : fc_cap_check(&s, &cap);
    /* A memset kernel fills the device (under MPS: all the SMs it may have). */
    if (r == CUDA_SUCCESS && cap) {
        struct fc_gnode *n = fc_cap_node(cap, &s, FC_GN_MEMSET, s.ctx->o.phys, ns);
        if (n)
            n->occ_ppm = FC_PPM;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (r == CUDA_SUCCESS) {
        fc_enqueue(&s, fc_dvfs_dur(s.ctx->o.phys, ns), FC_PPM, 0);
    }
    fc_unlock();
    return r;
}

/* The 24 memset exports (1D and 2D; synchronous, _ptds, asynchronous,
 * _ptsz) from one list: (name, element bytes, value type). */
#define FC_MEMSET_1D(X)                                                                                 \
    X(D8, 1, unsigned char)                                                                             \
    X(D16, 2, unsigned short)                                                                           \
    X(D32, 4, unsigned int)

#define FC_MEMSET_EXPORTS(name, elem, type)                                                                \
    FC_EXPORT CUresult CUDAAPI cuMemset##name##_v2(CUdeviceptr dst, type v, size_t N)                   \
    {                                                                                                   \
        FC_BEGIN(cuMemset##name##_v2);                                                                  \
        (void)v;                                                                                        \
        return memset_op(dst, 0, elem, N, 1, NULL, 0, 1);                                               \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemset##name##_v2_ptds(CUdeviceptr dst, type v, size_t N)              \
    {                                                                                                   \
        FC_BEGIN(cuMemset##name##_v2_ptds);                                                             \
        (void)v;                                                                                        \
        return memset_op(dst, 0, elem, N, 1, NULL, 1, 1);                                               \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemset##name##Async(CUdeviceptr dst, type v, size_t N, CUstream h)     \
    {                                                                                                   \
        FC_BEGIN(cuMemset##name##Async);                                                                \
        (void)v;                                                                                        \
        return memset_op(dst, 0, elem, N, 1, h, 0, 0);                                                  \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemset##name##Async_ptsz(CUdeviceptr dst, type v, size_t N,            \
                                                          CUstream h)                                   \
    {                                                                                                   \
        FC_BEGIN(cuMemset##name##Async_ptsz);                                                           \
        (void)v;                                                                                        \
        return memset_op(dst, 0, elem, N, 1, h, 1, 0);                                                  \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemsetD2##name##_v2(CUdeviceptr dst, size_t pitch, type v, size_t w,   \
                                                    size_t hgt)                                         \
    {                                                                                                   \
        FC_BEGIN(cuMemsetD2##name##_v2);                                                                \
        (void)v;                                                                                        \
        return memset_op(dst, pitch, elem, w, hgt, NULL, 0, 1);                                         \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemsetD2##name##_v2_ptds(CUdeviceptr dst, size_t pitch, type v,        \
                                                         size_t w, size_t hgt)                          \
    {                                                                                                   \
        FC_BEGIN(cuMemsetD2##name##_v2_ptds);                                                           \
        (void)v;                                                                                        \
        return memset_op(dst, pitch, elem, w, hgt, NULL, 1, 1);                                         \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemsetD2##name##Async(CUdeviceptr dst, size_t pitch, type v, size_t w, \
                                                      size_t hgt, CUstream h)                           \
    {                                                                                                   \
        FC_BEGIN(cuMemsetD2##name##Async);                                                              \
        (void)v;                                                                                        \
        return memset_op(dst, pitch, elem, w, hgt, h, 0, 0);                                            \
    }                                                                                                   \
    FC_EXPORT CUresult CUDAAPI cuMemsetD2##name##Async_ptsz(CUdeviceptr dst, size_t pitch, type v,      \
                                                           size_t w, size_t hgt, CUstream h)            \
    {                                                                                                   \
        FC_BEGIN(cuMemsetD2##name##Async_ptsz);                                                         \
        (void)v;                                                                                        \
        return memset_op(dst, pitch, elem, w, hgt, h, 1, 0);                                            \
    }
FC_MEMSET_1D(FC_MEMSET_EXPORTS)
#undef FC_MEMSET_EXPORTS
#undef FC_MEMSET_1D

/* ---- host memory (malloc, not device usage) ------------------------------ */

static CUresult host_alloc(void **pp, size_t size)
{
    if (!pp || !size)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    NEED_CTX(c);
    UNSAFE_GUARD();
    struct fc_host *h = calloc(1, sizeof(*h));
    void *p = h ? malloc(size) : NULL;
    CUresult r = CUDA_SUCCESS;
    if (!p) {
        free(h);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        h->p = p;
        h->size = size;
        h->ctx = c;
        h->next = g_hosts;
        g_hosts = h;
        *pp = p;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    FC_BEGIN(cuMemAllocHost_v2);
    return host_alloc(pp, bytesize);
}

FC_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    FC_BEGIN(cuMemHostAlloc);
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

FC_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
    FC_BEGIN(cuMemFreeHost);
    fc_lock();
    UNSAFE_GUARD();
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (struct fc_host **pp = &g_hosts; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p) {
            struct fc_host *h = *pp;
            *pp = h->next;
            free(h->p);
            free(h);
            r = CUDA_SUCCESS;
            break;
        }
    fc_unlock();
    return r;
}

/* ---- pointer attributes ------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FC_BEGIN(cuPointerGetAttribute);
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    CUresult r = CUDA_SUCCESS;
    struct fc_alloc *a = alloc_containing(ptr);
    struct fc_host *h = a ? NULL : host_containing((uintptr_t)ptr);
    struct fc_map *m = NULL;
    struct fc_va *va = NULL;
    if (!a && !h) {
        struct fc_obj *objs[1024];
        size_t n = fc_obj_collect(objs, 1024, FC_T_MAP, NULL, NULL, -1);
        for (size_t i = 0; i < n && i < 1024; i++) {
            struct fc_map *x = (struct fc_map *)objs[i];
            if (ptr >= x->base && ptr < x->base + x->size)
                m = x;
        }
        n = fc_obj_collect(objs, 1024, FC_T_VA, NULL, NULL, -1);
        for (size_t i = 0; i < n && i < 1024 && m; i++) {
            struct fc_va *x = (struct fc_va *)objs[i];
            if (ptr >= x->base && ptr < x->base + x->size)
                va = x;
        }
    }
    if (!a && !h && !m) {
        fc_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    int phys = a ? a->phys : m ? m->h->o.phys : -1;
    uint64_t base = a ? a->base : h ? (uintptr_t)h->p : va ? va->base : m->base;
    uint64_t size = a ? a->size : h ? h->size : va ? va->size : m->size;
    struct fc_ctx *ctx = a ? a->ctx : h ? h->ctx : NULL;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!ctx)
            fc_cur_ctx(&ctx);
        *(CUcontext *)data = (CUcontext)ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = h ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (h || (a && a->managed))
            *(void **)data = (void *)(uintptr_t)ptr;
        else
            r = CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a && a->managed;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned int *)data = a && a->kind == A_MEM && !a->managed;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = phys >= 0 ? ordinal_of(phys) : (ctx ? ctx->ordinal : 0);
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a ? a->id : base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)size;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = m ? (unsigned long long)m->h->prop.requestedHandleTypes : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a && a->kind == A_POOL ? (CUmemoryPool)a->owner : NULL;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
        break;
    }
    fc_unlock();
    return r;
}

/* ---- arrays ------------------------------------------------------------- */

static unsigned format_bytes(CUarray_format f)
{
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
    case CU_AD_FORMAT_NV12:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
        return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
        return 8;
    default:
        return 0;
    }
}

/* Bytes of one level (raw, unrounded); 0 when the descriptor is invalid. */
static uint64_t level_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned level)
{
    unsigned eb = format_bytes(d->Format);
    if (!eb || !d->Width || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
        return 0;
    uint64_t w = d->Width >> level ? d->Width >> level : 1;
    uint64_t h = d->Height ? (d->Height >> level ? d->Height >> level : 1) : 1;
    uint64_t z = d->Depth;
    if (!(d->Flags & CUDA_ARRAY3D_LAYERED))
        z = d->Depth ? (d->Depth >> level ? d->Depth >> level : 1) : 1;
    else if (!z)
        z = 1;
    return w * h * z * d->NumChannels * eb;
}

static CUresult array_create(struct fc_array **out, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels,
                             int type)
{
    uint64_t raw = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t b = level_bytes(d, l);
        if (!b)
            return CUDA_ERROR_INVALID_VALUE;
        raw += b;
    }
    uint64_t bytes = round_up(raw, FC_GRANULE);
    fc_lock();
    NEED_CTX(c);
    UNSAFE_GUARD();
    struct fc_array *a = calloc(1, sizeof(*a));
    CUresult r = CUDA_SUCCESS;
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (fc_charge(c->o.phys, bytes, FAKECUDA_KIND_ARRAY)) {
        free(a);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        a->bytes = bytes;
        a->desc = *d;
        a->levels = levels;
        fc_obj_add(&a->o, type, c->o.phys, c, NULL);
        *out = a;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    FC_BEGIN(cuArrayCreate_v2);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = pAllocateArray->Width, .Height = pAllocateArray->Height,
                                 .Depth = 0, .Format = pAllocateArray->Format,
                                 .NumChannels = pAllocateArray->NumChannels, .Flags = 0};
    struct fc_array *a;
    CUresult r = array_create(&a, &d, 1, FC_T_ARRAY);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)a;
    return r;
}

FC_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    FC_BEGIN(cuArray3DCreate_v2);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_array *a;
    CUresult r = array_create(&a, pAllocateArray, 1, FC_T_ARRAY);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)a;
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                                  const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                                  unsigned int numMipmapLevels)
{
    FC_BEGIN(cuMipmappedArrayCreate);
    if (!pHandle || !pMipmappedArrayDesc || !numMipmapLevels || numMipmapLevels > 32)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_array *a;
    CUresult r = array_create(&a, pMipmappedArrayDesc, numMipmapLevels, FC_T_MIPMAP);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)a;
    return r;
}

static void array_free(struct fc_array *a)
{
    fc_uncharge(a->o.phys, a->bytes, FAKECUDA_KIND_ARRAY);
    obj_free(&a->o);
}

static CUresult array_destroy(void *h, int type)
{
    fc_lock();
    UNSAFE_GUARD();
    struct fc_array *a = (struct fc_array *)fc_obj_get(h, type);
    if (a)
        array_free(a);
    fc_unlock();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
    FC_BEGIN(cuArrayDestroy);
    return array_destroy(hArray, FC_T_ARRAY);
}

FC_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    FC_BEGIN(cuMipmappedArrayDestroy);
    return array_destroy(hMipmappedArray, FC_T_MIPMAP);
}

static CUresult array_reqs(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, void *h, int type, CUdevice dev)
{
    if (!req)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_array *a = (struct fc_array *)fc_obj_get(h, type);
    if (a) {
        memset(req, 0, sizeof(*req));
        req->size = (size_t)a->bytes;
        req->alignment = (size_t)FC_GRANULE;
    }
    fc_unlock();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_EXPORT CUresult CUDAAPI cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements,
                                                        CUarray array, CUdevice device)
{
    FC_BEGIN(cuArrayGetMemoryRequirements);
    return array_reqs(memoryRequirements, array, FC_T_ARRAY, device);
}

FC_EXPORT CUresult CUDAAPI cuMipmappedArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUmipmappedArray mipmap, CUdevice device)
{
    FC_BEGIN(cuMipmappedArrayGetMemoryRequirements);
    return array_reqs(memoryRequirements, mipmap, FC_T_MIPMAP, device);
}

/* ---- stream-ordered pools ----------------------------------------------- */

static struct fc_pool *pool_new(int phys, const CUmemPoolProps *props, int is_default)
{
    struct fc_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->is_default = is_default;
    if (props)
        p->props = *props;
    p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->props.location.id = ordinal_of(phys);
    fc_obj_add(&p->o, FC_T_POOL, phys, NULL, NULL);
    return p;
}

static struct fc_pool *default_pool(int phys)
{
    if (!g_defpool[phys])
        g_defpool[phys] = pool_new(phys, NULL, 1);
    return g_defpool[phys];
}

static struct fc_pool *current_pool(int phys)
{
    if (!g_curpool[phys])
        g_curpool[phys] = default_pool(phys);
    return g_curpool[phys];
}

/* Gives reserved chunks back down to max(used, keep) (chunk granularity). */
static void pool_trim(struct fc_pool *p, uint64_t keep)
{
    uint64_t target = round_up(p->used, FC_POOL_CHUNK);
    uint64_t k = round_up(keep, FC_POOL_CHUNK);
    if (k > target)
        target = k;
    if (target < p->reserved) {
        fc_uncharge(p->o.phys, p->reserved - target, FAKECUDA_KIND_POOL);
        p->reserved = target;
    }
}

void fc_pools_sync_trim(int phys)
{
    struct fc_obj *objs[1024];
    size_t n = fc_obj_collect(objs, 1024, FC_T_POOL, NULL, NULL, phys);
    for (size_t i = 0; i < n && i < 1024; i++) {
        struct fc_pool *p = (struct fc_pool *)objs[i];
        if (p->reserved > p->threshold)
            pool_trim(p, p->threshold);
    }
}

static void pool_free_alloc(struct fc_alloc *a)
{
    struct fc_pool *p = (struct fc_pool *)a->owner;
    p->used -= a->size;
    alloc_remove(a);
}

static void pool_destroy(struct fc_pool *p)
{
    for (size_t i = g_nallocs; i-- > 0;)
        if (g_allocs[i].kind == A_POOL && g_allocs[i].owner == p)
            alloc_remove(&g_allocs[i]);
    fc_uncharge(p->o.phys, p->reserved, FAKECUDA_KIND_POOL);
    int phys = p->o.phys;
    if (g_curpool[phys] == p)
        g_curpool[phys] = NULL;
    if (g_defpool[phys] == p)
        g_defpool[phys] = NULL;
    obj_free(&p->o);
}

static CUresult pool_alloc(struct fc_pool *p, uint64_t size, CUdeviceptr *dptr)
{
    int phys = p->o.phys;
    if (p->used + size > p->reserved) {
        uint64_t grow = round_up(p->used + size - p->reserved, FC_POOL_CHUNK);
        if (p->props.maxSize && p->reserved + grow > p->props.maxSize)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (fc_charge(phys, grow, FAKECUDA_KIND_POOL))
            return CUDA_ERROR_OUT_OF_MEMORY;
        p->reserved += grow;
        hi_update(&p->reserved_high, p->reserved);
    }
    struct fc_alloc a = {.base = fc_va_alloc(phys, size), .size = size, .phys = phys,
                         .kind = A_POOL, .owner = p, .slot = -1};
    if (!alloc_insert(&a))
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->used += size;
    hi_update(&p->used_high, p->used);
    *dptr = a.base;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetDefaultMemPool);
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_pool *p = default_pool(phys);
    fc_unlock();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetMemPool);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_pool *p = current_pool(phys);
    fc_unlock();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    FC_BEGIN(cuDeviceSetMemPool);
    int phys = fc_phys_of(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = (struct fc_pool *)fc_obj_get(pool, FC_T_POOL);
    CUresult r = CUDA_SUCCESS;
    if (!p || p->o.phys != phys)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        g_curpool[phys] = p;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    FC_BEGIN(cuMemPoolCreate);
    if (!pool || !poolProps)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->handleTypes & ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int phys = fc_phys_of(poolProps->location.id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = pool_new(phys, poolProps, 0);
    fc_unlock();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    FC_BEGIN(cuMemPoolDestroy);
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = (struct fc_pool *)fc_obj_get(pool, FC_T_POOL);
    CUresult r = CUDA_SUCCESS;
    if (!p || p->is_default)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        pool_destroy(p);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    FC_BEGIN(cuMemPoolTrimTo);
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = (struct fc_pool *)fc_obj_get(pool, FC_T_POOL);
    if (p)
        pool_trim(p, minBytesToKeep);
    fc_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FC_BEGIN(cuMemPoolGetAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = (struct fc_pool *)fc_obj_get(pool, FC_T_POOL);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = 1;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FC_BEGIN(cuMemPoolSetAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    UNSAFE_GUARD();
    struct fc_pool *p = (struct fc_pool *)fc_obj_get(pool, FC_T_POOL);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t *)value; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            if (*(cuuint64_t *)value)
                r = CUDA_ERROR_INVALID_VALUE;
            else
                p->reserved_high = p->reserved;
            break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(cuuint64_t *)value)
                r = CUDA_ERROR_INVALID_VALUE;
            else
                p->used_high = p->used;
            break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    fc_unlock();
    return r;
}

/* Stream-ordered allocation. On a capturing stream it is a graph memory
 * allocation node (rounded and accounted as cuGraphAddMemAllocNode: charged
 * when an exec of the graph is first launched) and the pool is not touched;
 * elsewhere a potentially unsafe call that allocates from the pool. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, int ptsz)
{
    if (!dptr || !size)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_sref s;
    struct fc_capture *cap = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    struct fc_pool *p = NULL;
    if (r == CUDA_SUCCESS) {
        p = pool ? (struct fc_pool *)fc_obj_get(pool, FC_T_POOL) : current_pool(s.ctx->o.phys);
        if (!p)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    if (r == CUDA_SUCCESS)
        r = fc_cap_check(&s, &cap);
    if (r == CUDA_SUCCESS && cap) {
        struct fc_gnode *n = fc_cap_alloc_node(cap, &s, p->o.phys, size);
        if (n)
            *dptr = n->dptr;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (r == CUDA_SUCCESS) {
        r = fc_cap_unsafe();
        if (r == CUDA_SUCCESS)
            r = pool_alloc(p, size, dptr);
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    FC_BEGIN(cuMemAllocAsync);
    return alloc_async(dptr, bytesize, NULL, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    FC_BEGIN(cuMemAllocAsync_ptsz);
    return alloc_async(dptr, bytesize, NULL, hStream, 1);
}

FC_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                   CUstream hStream)
{
    FC_BEGIN(cuMemAllocFromPoolAsync);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, pool, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream)
{
    FC_BEGIN(cuMemAllocFromPoolAsync_ptsz);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, pool, hStream, 1);
}

/* Stream-ordered free. On a capturing stream it is a graph memory free
 * node (of a graph allocation or of a pool allocation; the fake frees
 * nothing when the graph runs); elsewhere a potentially unsafe call. */
static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptsz)
{
    fc_lock();
    struct fc_sref s;
    struct fc_capture *cap = NULL;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = fc_cap_check(&s, &cap);
    if (r == CUDA_SUCCESS && cap) {
        struct fc_gnode *n = NULL;
        if (!fc_dptr_valid(dptr, 1))
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(n = fc_cap_node(cap, &s, FC_GN_FREE, -1, 0)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            n->dptr = dptr;
    } else if (r == CUDA_SUCCESS) {
        r = fc_cap_unsafe();
        struct fc_alloc *a = r == CUDA_SUCCESS ? alloc_at(dptr) : NULL;
        if (r == CUDA_SUCCESS && (!a || a->kind != A_POOL))
            r = CUDA_ERROR_INVALID_VALUE;
        else if (r == CUDA_SUCCESS)
            pool_free_alloc(a);
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    FC_BEGIN(cuMemFreeAsync);
    return free_async(dptr, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    FC_BEGIN(cuMemFreeAsync_ptsz);
    return free_async(dptr, hStream, 1);
}

/* ---- virtual memory management ------------------------------------------ */

static int prop_phys(const CUmemAllocationProp *prop)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return -1;
    return fc_phys_of(prop->location.id);
}

static int prop_host(const CUmemAllocationProp *prop);

FC_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option)
{
    FC_BEGIN(cuMemGetAllocationGranularity);
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop_phys(prop) < 0 && !prop_host(prop))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = (size_t)FC_GRANULE;
    return CUDA_SUCCESS;
}

static void vmm_destroy(struct fc_vmm *h)
{
    if (h->imported) {
        fc_import_add(h->o.phys, -(int64_t)h->size);
        fc_export_importers(h->slot, h->gen, -1);
    } else if (!h->host && (h->slot < 0 || !fc_export_owner_gone(h->slot, h->gen))) {
        fc_uncharge(h->o.phys, h->charged, FAKECUDA_KIND_VMM);
    }
    obj_free(&h->o);
}

static void vmm_maybe_destroy(struct fc_vmm *h)
{
    if (h->handle_refs <= 0 && h->maps <= 0)
        vmm_destroy(h);
}

/* Host-location VMM memory (CUDA 12.2+: CU_MEM_LOCATION_TYPE_HOST,
 * _HOST_NUMA, _HOST_NUMA_CURRENT): pinned host pages, nothing on any
 * device. The handle maps and releases like any other; it is never
 * exported here. */
static int prop_host(const CUmemAllocationProp *prop)
{
    return prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
            prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
            prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
}

static CUresult vmm_create_host(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop)
{
    fc_lock();
    NEED_CTX(c);
    struct fc_vmm *h = calloc(1, sizeof(*h));
    if (h) {
        h->home = c->o.phys;
        h->size = size;
        h->handle_refs = 1;
        h->slot = -1;
        h->host = 1;
        h->prop = *prop;
        fc_obj_add(&h->o, FC_T_VMM, -1, NULL, NULL);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    }
    fc_unlock();
    return h ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FC_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                       const CUmemAllocationProp *prop, unsigned long long flags)
{
    FC_BEGIN(cuMemCreate);
    if (!handle || !prop || flags || !size || size % FC_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop_host(prop))
        return vmm_create_host(handle, size, prop);
    int phys = prop_phys(prop);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    NEED_CTX(c);
    struct fc_vmm *h = calloc(1, sizeof(*h));
    CUresult r = CUDA_SUCCESS;
    if (!h) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (fc_charge(phys, size, FAKECUDA_KIND_VMM)) {
        free(h);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        h->home = c->o.phys;
        h->size = size;
        h->charged = size;
        h->handle_refs = 1;
        h->slot = -1;
        h->prop = *prop;
        fc_obj_add(&h->o, FC_T_VMM, phys, NULL, NULL);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FC_BEGIN(cuMemRelease);
    fc_lock();
    struct fc_vmm *h = (struct fc_vmm *)fc_obj_get((void *)(uintptr_t)handle, FC_T_VMM);
    CUresult r = CUDA_SUCCESS;
    if (!h || h->handle_refs <= 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        h->handle_refs--;
        vmm_maybe_destroy(h);
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags)
{
    FC_BEGIN(cuMemAddressReserve);
    (void)addr;
    if (!ptr || !size || size % FC_GRANULE || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment && (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_va *v = calloc(1, sizeof(*v));
    CUresult r = CUDA_SUCCESS;
    if (!v) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        if (!g_vmm_va_next)
            g_vmm_va_next = FC_VMM_VA_BASE;
        uint64_t a = alignment > FC_GRANULE ? alignment : FC_GRANULE;
        v->base = round_up(g_vmm_va_next, a);
        v->size = size;
        g_vmm_va_next = v->base + size + FC_GRANULE; /* guard gap */
        fc_obj_add(&v->o, FC_T_VA, -1, NULL, NULL);
        *ptr = v->base;
    }
    fc_unlock();
    return r;
}

static struct fc_va *va_find(uint64_t base, uint64_t size, int exact)
{
    struct fc_obj *objs[4096];
    size_t n = fc_obj_collect(objs, 4096, FC_T_VA, NULL, NULL, -1);
    for (size_t i = 0; i < n && i < 4096; i++) {
        struct fc_va *v = (struct fc_va *)objs[i];
        if (exact ? (v->base == base && v->size == size)
                  : (base >= v->base && base + size <= v->base + v->size))
            return v;
    }
    return NULL;
}

FC_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FC_BEGIN(cuMemAddressFree);
    fc_lock();
    struct fc_va *v = va_find(ptr, size, 1);
    if (v)
        obj_free(&v->o);
    fc_unlock();
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static struct fc_map *map_overlapping(uint64_t base, uint64_t size)
{
    struct fc_obj *objs[4096];
    size_t n = fc_obj_collect(objs, 4096, FC_T_MAP, NULL, NULL, -1);
    for (size_t i = 0; i < n && i < 4096; i++) {
        struct fc_map *m = (struct fc_map *)objs[i];
        if (base < m->base + m->size && m->base < base + size)
            return m;
    }
    return NULL;
}

FC_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    FC_BEGIN(cuMemMap);
    if (!size || size % FC_GRANULE || offset || flags)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_vmm *h = (struct fc_vmm *)fc_obj_get((void *)(uintptr_t)handle, FC_T_VMM);
    struct fc_map *m = NULL;
    CUresult r = CUDA_SUCCESS;
    if (!h || h->handle_refs <= 0 || size > h->size || !va_find(ptr, size, 0))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (map_overlapping(ptr, size))
        r = CUDA_ERROR_ALREADY_MAPPED;
    else if (!(m = calloc(1, sizeof(*m))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        m->base = ptr;
        m->size = size;
        m->h = h;
        h->maps++;
        fc_obj_add(&m->o, FC_T_MAP, h->o.phys, NULL, h);
    }
    fc_unlock();
    return r;
}

static void map_free(struct fc_map *m)
{
    struct fc_vmm *h = m->h;
    obj_free(&m->o);
    h->maps--;
    vmm_maybe_destroy(h);
}

FC_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FC_BEGIN(cuMemUnmap);
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    struct fc_map *m;
    /* Unmaps every mapping inside [ptr, ptr+size); a partial overlap is an error. */
    while ((m = map_overlapping(ptr, size))) {
        if (m->base < ptr || m->base + m->size > ptr + size) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        map_free(m);
        r = CUDA_SUCCESS;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                          size_t count)
{
    FC_BEGIN(cuMemSetAccess);
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || fc_phys_of(desc[i].location.id) < 0)
            return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    /* The whole range must be covered by mappings. */
    uint64_t p = ptr, end = ptr + size;
    CUresult r = CUDA_SUCCESS;
    while (p < end) {
        struct fc_map *m = map_overlapping(p, 1);
        if (!m) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        p = m->base + m->size;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                        CUmemAllocationHandleType handleType,
                                                        unsigned long long flags)
{
    FC_BEGIN(cuMemExportToShareableHandle);
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    fc_lock();
    struct fc_vmm *h = (struct fc_vmm *)fc_obj_get((void *)(uintptr_t)handle, FC_T_VMM);
    CUresult r = CUDA_SUCCESS;
    if (!h || !(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (h->host) {
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (h->slot < 0) {
        h->slot = fc_export_new(FAKECUDA_EXPORT_VMM, h->o.phys, h->size, 0, &h->gen);
        if (h->slot < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        int fd = fc_ctl_export(h->slot, h->gen); /* each export a new description */
        if (fd < 0)
            r = CUDA_ERROR_OPERATING_SYSTEM;
        else
            *(int *)shareableHandle = fd;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                          CUmemAllocationHandleType shHandleType)
{
    FC_BEGIN(cuMemImportFromShareableHandle);
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct {
        int slot;
        uint64_t gen;
    } rec;
    if (fc_ctl_which((int)(intptr_t)osHandle, &rec.slot, &rec.gen))
        return CUDA_ERROR_INVALID_VALUE;
    struct fakecuda_export e;
    if (fc_export_get(rec.slot, rec.gen, &e) || e.kind != FAKECUDA_EXPORT_VMM)
        return CUDA_ERROR_INVALID_VALUE;
    int ord = -1;
    fc_lock();
    ord = ordinal_of((int)e.device);
    NEED_CTX(c);
    struct fc_vmm *h = ord < 0 ? NULL : calloc(1, sizeof(*h));
    CUresult r = CUDA_SUCCESS;
    if (ord < 0) {
        r = CUDA_ERROR_INVALID_DEVICE;
    } else if (!h) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        h->home = c->o.phys;
        h->size = e.size;
        h->handle_refs = 1;
        h->imported = 1;
        h->slot = rec.slot;
        h->gen = rec.gen;
        h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        h->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        h->prop.location.id = ord;
        fc_obj_add(&h->o, FC_T_VMM, (int)e.device, NULL, NULL);
        fc_import_add((int)e.device, (int64_t)e.size);
        fc_export_importers(rec.slot, rec.gen, +1);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                                  CUmemGenericAllocationHandle handle)
{
    FC_BEGIN(cuMemGetAllocationPropertiesFromHandle);
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_vmm *h = (struct fc_vmm *)fc_obj_get((void *)(uintptr_t)handle, FC_T_VMM);
    if (h)
        *prop = h->prop;
    fc_unlock();
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FC_BEGIN(cuMemRetainAllocationHandle);
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_map *m = map_overlapping((uint64_t)(uintptr_t)addr, 1);
    if (m) {
        m->h->handle_refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
    }
    fc_unlock();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- legacy IPC --------------------------------------------------------- */

struct fc_ipcrec {
    uint32_t magic;
    int32_t pid;
    int32_t slot;
    uint32_t device;
    uint64_t gen;
    uint64_t ptr;
    uint64_t size;
};
#define FC_IPC_MAGIC 0x50494346u /* "FCIP" */
_Static_assert(sizeof(struct fc_ipcrec) <= CU_IPC_HANDLE_SIZE, "IPC handle too small");

FC_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    FC_BEGIN(cuIpcGetMemHandle);
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    NEED_CTX(c);
    (void)c;
    struct fc_alloc *a = alloc_containing(dptr);
    CUresult r = CUDA_SUCCESS;
    if (!a || a->kind != A_MEM || a->managed) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (a->slot < 0) {
        a->slot = fc_export_new(FAKECUDA_EXPORT_IPC, a->phys, a->size, a->base, &a->gen);
        if (a->slot < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        struct fc_ipcrec rec = {FC_IPC_MAGIC, getpid(), a->slot, (uint32_t)a->phys,
                                a->gen, a->base, a->size};
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &rec, sizeof(rec));
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    FC_BEGIN(cuIpcOpenMemHandle_v2);
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_ipcrec rec;
    memcpy(&rec, handle.reserved, sizeof(rec));
    if (rec.magic != FC_IPC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (rec.pid == getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the driver refuses opening one's own handle */
    struct fakecuda_export e;
    if (fc_export_get(rec.slot, rec.gen, &e) || e.kind != FAKECUDA_EXPORT_IPC || e.pid != rec.pid)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    NEED_CTX(c);
    CUresult r = CUDA_SUCCESS;
    struct fc_alloc *found = NULL;
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].kind == A_IPC && g_allocs[i].slot == rec.slot && g_allocs[i].gen == rec.gen)
            found = &g_allocs[i];
    if (found) {
        found->refs++;
        *pdptr = found->base;
    } else {
        struct fc_alloc a = {.base = fc_va_alloc((int)rec.device, rec.size), .size = rec.size,
                             .phys = (int)rec.device, .kind = A_IPC, .refs = 1, .ctx = c,
                             .slot = rec.slot, .gen = rec.gen};
        if (!alloc_insert(&a)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            fc_import_add(a.phys, (int64_t)a.size);
            fc_export_importers(rec.slot, rec.gen, +1);
            *pdptr = a.base;
        }
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    FC_BEGIN(cuIpcCloseMemHandle);
    fc_lock();
    struct fc_alloc *a = alloc_at(dptr);
    CUresult r = CUDA_SUCCESS;
    if (!a || a->kind != A_IPC)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (--a->refs == 0)
        alloc_release(a);
    fc_unlock();
    return r;
}

/* ---- external memory ----------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuImportExternalMemory(CUexternalMemory *extMem_out,
                                                  const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *memHandleDesc)
{
    FC_BEGIN(cuImportExternalMemory);
    if (!extMem_out || !memHandleDesc || !memHandleDesc->size)
        return CUDA_ERROR_INVALID_VALUE;
    if (memHandleDesc->type != CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (memHandleDesc->handle.fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    NEED_CTX(c);
    struct fc_extmem *x = calloc(1, sizeof(*x));
    CUresult r = CUDA_SUCCESS;
    if (!x) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (fc_charge(c->o.phys, memHandleDesc->size, FAKECUDA_KIND_EXTERNAL)) {
        free(x);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        x->size = memHandleDesc->size;
        fc_obj_add(&x->o, FC_T_EXTMEM, c->o.phys, c, NULL);
        /* Ownership of the fd passes to the driver on success. */
        close(memHandleDesc->handle.fd);
        *extMem_out = (CUexternalMemory)x;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuExternalMemoryGetMappedBuffer(CUdeviceptr *devPtr, CUexternalMemory extMem,
                                                           const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *bufferDesc)
{
    FC_BEGIN(cuExternalMemoryGetMappedBuffer);
    if (!devPtr || !bufferDesc || !bufferDesc->size || bufferDesc->flags)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_extmem *x = (struct fc_extmem *)fc_obj_get(extMem, FC_T_EXTMEM);
    CUresult r = CUDA_SUCCESS;
    if (!x) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (bufferDesc->offset + bufferDesc->size > x->size ||
               bufferDesc->offset + bufferDesc->size < bufferDesc->offset) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct fc_alloc a = {.base = fc_va_alloc(x->o.phys, bufferDesc->size), .size = bufferDesc->size,
                             .phys = x->o.phys, .kind = A_EXTBUF, .ctx = x->o.ctx, .owner = x,
                             .slot = -1};
        if (!alloc_insert(&a))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *devPtr = a.base;
    }
    fc_unlock();
    return r;
}

static void extmem_free(struct fc_extmem *x)
{
    for (size_t i = g_nallocs; i-- > 0;)
        if (g_allocs[i].kind == A_EXTBUF && g_allocs[i].owner == x)
            alloc_remove(&g_allocs[i]);
    fc_uncharge(x->o.phys, x->size, FAKECUDA_KIND_EXTERNAL);
    obj_free(&x->o);
}

FC_EXPORT CUresult CUDAAPI cuDestroyExternalMemory(CUexternalMemory extMem)
{
    FC_BEGIN(cuDestroyExternalMemory);
    fc_lock();
    struct fc_extmem *x = (struct fc_extmem *)fc_obj_get(extMem, FC_T_EXTMEM);
    if (x)
        extmem_free(x);
    fc_unlock();
    return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- graphs and graph memory -------------------------------------------- */

struct fc_graph *fc_graph_new(void)
{
    struct fc_graph *g = calloc(1, sizeof(*g));
    if (g)
        fc_obj_add(&g->o, FC_T_GRAPH, -1, NULL, NULL);
    return g;
}

void fc_graph_free(struct fc_graph *g)
{
    struct fc_obj *objs[4096];
    size_t n;
    while ((n = fc_obj_collect(objs, 4096, FC_T_GNODE, NULL, g, -1)) > 0)
        for (size_t i = 0; i < n && i < 4096; i++)
            obj_free(objs[i]);
    obj_free(&g->o);
}

struct fc_gnode *fc_gnode_new(struct fc_graph *g, int kind, int phys, struct fc_gnode *const *deps, size_t n)
{
    struct fc_gnode *x = calloc(1, sizeof(*x) + n * sizeof(x->deps[0]));
    if (!x)
        return NULL;
    x->kind = kind;
    x->seq = g->next_seq++;
    x->ndeps = n;
    if (n)
        memcpy(x->deps, deps, n * sizeof(x->deps[0]));
    fc_obj_add(&x->o, FC_T_GNODE, phys, NULL, g);
    return x;
}

struct fc_gnode *fc_gnode_alloc(struct fc_graph *g, int phys, uint64_t bytes, struct fc_gnode *const *deps,
                                size_t n)
{
    struct fc_gnode *x = fc_gnode_new(g, FC_GN_ALLOC, phys, deps, n);
    if (x) {
        x->size = round_up(bytes, FC_GRANULE);
        x->dptr = fc_va_alloc(phys, x->size);
    }
    return x;
}

FC_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    FC_BEGIN(cuGraphCreate);
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_graph *g = fc_graph_new();
    fc_unlock();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    FC_BEGIN(cuGraphDestroy);
    fc_lock();
    struct fc_graph *g = (struct fc_graph *)fc_obj_get(hGraph, FC_T_GRAPH);
    CUresult r = !g ? CUDA_ERROR_INVALID_VALUE : fc_cap_graph_busy(g) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        fc_graph_free(g);
    fc_unlock();
    return r;
}

static int fc_gnode_seq_cmp(const void *a, const void *b)
{
    const struct fc_gnode *x = *(struct fc_gnode *const *)a, *y = *(struct fc_gnode *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

long fc_graph_nodes_locked(CUgraph h, struct fc_obj **out, size_t max)
{
    struct fc_graph *g = (struct fc_graph *)fc_obj_get(h, FC_T_GRAPH);
    if (!g)
        return -1;
    size_t n = fc_obj_collect(out, max, FC_T_GNODE, NULL, g, -1);
    qsort(out, n < max ? n : max, sizeof(out[0]), fc_gnode_seq_cmp);
    return (long)n;
}

FC_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    FC_BEGIN(cuGraphGetNodes);
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    static struct fc_obj *objs[4096]; /* under fc_mu */
    long got = fc_graph_nodes_locked(hGraph, objs, 4096);
    if (got < 0) {
        fc_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t n = (size_t)got;
    if (nodes) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < *numNodes; i++)
            nodes[i] = i < k ? (CUgraphNode)objs[i] : NULL;
        if (*numNodes > n)
            *numNodes = n;
    } else {
        *numNodes = n;
    }
    fc_unlock();
    return CUDA_SUCCESS;
}

static CUresult check_deps(const CUgraphNode *deps, size_t n, struct fc_graph *g)
{
    if (n && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        struct fc_gnode *d = (struct fc_gnode *)fc_obj_get(deps[i], FC_T_GNODE);
        if (!d || d->o.owner != g)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                  const CUgraphNode *dependencies, size_t numDependencies,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    FC_BEGIN(cuGraphAddMemAllocNode);
    if (!phGraphNode || !nodeParams || !nodeParams->bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(nodeParams->poolProps.location.id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_graph *g = (struct fc_graph *)fc_obj_get(hGraph, FC_T_GRAPH);
    CUresult r = g ? check_deps(dependencies, numDependencies, g) : CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *n = NULL;
    if (r == CUDA_SUCCESS &&
        !(n = fc_gnode_alloc(g, phys, nodeParams->bytesize, (struct fc_gnode *const *)dependencies,
                             numDependencies)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        nodeParams->dptr = n->dptr;
        *phGraphNode = (CUgraphNode)n;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode *dependencies, size_t numDependencies,
                                                 CUdeviceptr dptr)
{
    FC_BEGIN(cuGraphAddMemFreeNode);
    if (!phGraphNode)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_graph *g = (struct fc_graph *)fc_obj_get(hGraph, FC_T_GRAPH);
    CUresult r = g ? check_deps(dependencies, numDependencies, g) : CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *n = NULL;
    if (r == CUDA_SUCCESS && !fc_dptr_valid(dptr, 1))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS &&
        !(n = fc_gnode_new(g, FC_GN_FREE, -1, (struct fc_gnode *const *)dependencies, numDependencies)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        n->dptr = dptr;
        *phGraphNode = (CUgraphNode)n;
    }
    fc_unlock();
    return r;
}

/* An exec of a graph: its graph memory (allocation nodes) and its work
 * (kernel and memset nodes, nominal ns) are fixed at instantiation. */
static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    if (!phGraphExec)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                      CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    CUresult r = fc_cap_unsafe();
    if (r != CUDA_SUCCESS) {
        fc_unlock();
        return r;
    }
    struct fc_ctx *c = NULL;
    fc_cur_ctx(&c);
    struct fc_graph *g = (struct fc_graph *)fc_obj_get(hGraph, FC_T_GRAPH);
    struct fc_gexec *x = g ? calloc(1, sizeof(*x)) : NULL;
    r = !g ? CUDA_ERROR_INVALID_VALUE : !x ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        static struct fc_obj *objs[4096]; /* under fc_mu */
        size_t n = fc_obj_collect(objs, 4096, FC_T_GNODE, NULL, g, -1);
        for (size_t i = 0; i < n && i < 4096; i++) {
            struct fc_gnode *gn = (struct fc_gnode *)objs[i];
            if (gn->kind == FC_GN_ALLOC)
                x->bytes[gn->o.phys] += gn->size;
            if (gn->kind == FC_GN_KERNEL || gn->kind == FC_GN_MEMSET) {
                x->work_ns += gn->work_ns;
                if (gn->occ_ppm > x->occ_ppm)
                    x->occ_ppm = gn->occ_ppm;
            }
        }
        fc_obj_add(&x->o, FC_T_GEXEC, c ? c->o.phys : -1, c, NULL);
        *phGraphExec = (CUgraphExec)x;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       unsigned long long flags)
{
    FC_BEGIN(cuGraphInstantiateWithFlags);
    return instantiate(phGraphExec, hGraph, flags);
}

static CUresult instantiate_params(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *p,
                                   int ptsz)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) { /* the upload stream must be valid */
        fc_lock();
        struct fc_sref s;
        CUresult r = fc_stream_resolve(p->hUploadStream, ptsz, &s);
        fc_unlock();
        if (r != CUDA_SUCCESS)
            return r;
    }
    CUresult r = instantiate(phGraphExec, hGraph, p->flags);
    p->hErrNode_out = NULL;
    p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

FC_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    FC_BEGIN(cuGraphInstantiateWithParams);
    return instantiate_params(phGraphExec, hGraph, instantiateParams, 0);
}

FC_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    FC_BEGIN(cuGraphInstantiateWithParams_ptsz);
    return instantiate_params(phGraphExec, hGraph, instantiateParams, 1);
}

CUresult fc_graph_exec_first_launch(int phys, uint64_t bytes)
{
    struct gmem *m = &g_gmem[phys];
    uint64_t used = m->used + bytes;
    if (used > m->reserved) {
        if (fc_charge(phys, used - m->reserved, FAKECUDA_KIND_GRAPH))
            return CUDA_ERROR_OUT_OF_MEMORY;
        m->reserved = used;
        hi_update(&m->reserved_high, m->reserved);
    }
    m->used = used;
    hi_update(&m->used_high, m->used);
    return CUDA_SUCCESS;
}

void fc_graph_exec_release(int phys, uint64_t bytes)
{
    struct gmem *m = &g_gmem[phys];
    m->used = m->used > bytes ? m->used - bytes : 0;
}

static void gexec_free(struct fc_gexec *x)
{
    if (x->launched)
        for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++)
            if (x->bytes[d])
                fc_graph_exec_release(d, x->bytes[d]);
    obj_free(&x->o);
}

FC_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    FC_BEGIN(cuGraphExecDestroy);
    fc_lock();
    CUresult r = fc_cap_unsafe();
    struct fc_gexec *x = NULL;
    if (r == CUDA_SUCCESS) {
        x = (struct fc_gexec *)fc_obj_get(hGraphExec, FC_T_GEXEC);
        if (x)
            gexec_free(x);
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    fc_unlock();
    return r;
}

CUresult fc_graph_launch_memory(void *exec, uint64_t *work_ns, uint32_t *occ_ppm)
{
    struct fc_gexec *x = (struct fc_gexec *)fc_obj_get(exec, FC_T_GEXEC);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    *work_ns = x->work_ns;
    *occ_ppm = x->occ_ppm;
    if (x->launched)
        return CUDA_SUCCESS;
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++) {
        if (!x->bytes[d])
            continue;
        CUresult r = fc_graph_exec_first_launch(d, x->bytes[d]);
        if (r != CUDA_SUCCESS) {
            for (int e = 0; e < d; e++)
                if (x->bytes[e])
                    fc_graph_exec_release(e, x->bytes[e]);
            return r;
        }
    }
    x->launched = 1;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    FC_BEGIN(cuDeviceGetGraphMemAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct gmem *m = &g_gmem[phys];
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = m->used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = m->used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = m->reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = m->reserved_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    FC_BEGIN(cuDeviceSetGraphMemAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (*(cuuint64_t *)value)
        return CUDA_ERROR_INVALID_VALUE; /* only resetting a high-water mark */
    fc_lock();
    struct gmem *m = &g_gmem[phys];
    CUresult r = CUDA_SUCCESS;
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        m->used_high = m->used;
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        m->reserved_high = m->reserved;
    else
        r = CUDA_ERROR_INVALID_VALUE;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
    FC_BEGIN(cuDeviceGraphMemTrim);
    int phys = fc_phys_of(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct gmem *m = &g_gmem[phys];
    if (m->reserved > m->used) {
        fc_uncharge(phys, m->reserved - m->used, FAKECUDA_KIND_GRAPH);
        m->reserved = m->used;
    }
    fc_unlock();
    return CUDA_SUCCESS;
}

/* ---- teardown ----------------------------------------------------------- */

void fc_mem_ctx_teardown(struct fc_ctx *ctx)
{
    for (size_t i = g_nallocs; i-- > 0;)
        if (i < g_nallocs && g_allocs[i].ctx == ctx &&
            (g_allocs[i].kind == A_MEM || g_allocs[i].kind == A_IPC))
            alloc_release(&g_allocs[i]);
    for (struct fc_host **pp = &g_hosts; *pp;) {
        struct fc_host *h = *pp;
        if (h->ctx == ctx) {
            *pp = h->next;
            free(h->p);
            free(h);
        } else {
            pp = &h->next;
        }
    }
    struct fc_obj *objs[4096];
    size_t n;
    while ((n = fc_obj_collect(objs, 4096, FC_T_EXTMEM, ctx, NULL, -1)) > 0)
        for (size_t i = 0; i < n && i < 4096; i++)
            extmem_free((struct fc_extmem *)objs[i]);
    static const int arr_types[] = {FC_T_ARRAY, FC_T_MIPMAP};
    for (int t = 0; t < 2; t++)
        while ((n = fc_obj_collect(objs, 4096, arr_types[t], ctx, NULL, -1)) > 0)
            for (size_t i = 0; i < n && i < 4096; i++)
                array_free((struct fc_array *)objs[i]);
    while ((n = fc_obj_collect(objs, 4096, FC_T_GEXEC, ctx, NULL, -1)) > 0)
        for (size_t i = 0; i < n && i < 4096; i++)
            gexec_free((struct fc_gexec *)objs[i]);
}

void fc_mem_reset(void)
{
    free(g_allocs);
    g_allocs = NULL;
    g_nallocs = g_cap = 0;
    while (g_hosts) {
        struct fc_host *h = g_hosts;
        g_hosts = h->next;
        free(h->p);
        free(h);
    }
    memset(g_defpool, 0, sizeof(g_defpool));
    memset(g_curpool, 0, sizeof(g_curpool));
    memset(g_gmem, 0, sizeof(g_gmem));
    memset(g_va_next, 0, sizeof(g_va_next));
    g_vmm_va_next = 0;
}
