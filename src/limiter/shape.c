/*
 * Launch shapes: what part of the GPU a launch can hold (docs/limiter.md,
 * "Concurrent devices (MPS)").
 *
 * On a device that time-slices, a running kernel holds the whole GPU: no
 * other process's work runs beside it, so it is charged its GPU time. When
 * the device's contexts are MPS clients (the driver says so:
 * CU_DEVICE_ATTRIBUTE_MPS_ENABLED), kernels of different processes run
 * side by side on the SMs, and a launch is charged its GPU time times the
 * part of the SMs its grid can occupy:
 *
 *   occupancy = min(1, blocks / (SMs x max resident blocks per SM))
 *
 * with the per-SM figure from cuOccupancyMaxActiveBlocksPerMultiprocessor
 * (threads per block, dynamic shared memory). A GPU-filling kernel (a
 * large matmul, an element-wise pass over 16M elements) is 1 and is
 * charged as on a time-sliced device; a small inference kernel (a batch-8
 * GEMV: 32 blocks of 132 SMs, one per SM, 0.24 on the H200) is charged a
 * quarter, so tenants whose kernels fit side by side are not held to
 * turns. A graph exec is read at instantiation: the largest occupancy of
 * its kernel nodes when they run one after another, their sum (at most 1)
 * when its nodes may run concurrently. Anything unknown — a memset, a
 * legacy launch without a block shape, a conditional node, an exec
 * instantiated before it was seen, a driver that does not answer — holds
 * the whole GPU (fail closed: never charged less than it may take).
 *
 * State: per device, shape_known/concurrent/sms are written once by the
 * first thread to see a context of the device (atomic flag last) and only
 * read afterwards; the occupancy cache D->occ is under the device mutex.
 * The exec table below: writers (instantiate, destroy) under exec_mu,
 * readers (launches) lock-free: a slot's occupancy is published before its
 * key, and an exec is not launched while it is being destroyed.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "limiter/internal.h"

#define SUBSYS "limiter"
#define EXECS 1024              /* graph execs remembered (hashed, evicted) */
#define GRAPH_NODES_MAX 65536   /* larger graphs hold the whole GPU */
#define GRAPH_DEPTH_MAX 4       /* child graphs followed this deep */

static struct {
    const void *exec;           /* atomic; NULL = empty */
    uint32_t ppm;               /* atomic; written before exec */
} execs[EXECS];
static pthread_mutex_t exec_mu = PTHREAD_MUTEX_INITIALIZER;

void cs__shape_device_seen(int d)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    if (__atomic_load_n(&D->shape_known, __ATOMIC_ACQUIRE))
        return;
    int mps = 0, sms = 0;
    if (cs_drv.cuDeviceGetAttribute &&
        cs_drv.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, (CUdevice)d) !=
            CUDA_SUCCESS)
        mps = 0;
    if (cs_drv.cuDeviceGetAttribute &&
        cs_drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                    (CUdevice)d) != CUDA_SUCCESS)
        sms = 0;
    /* Two threads may both ask: they write the same answers. */
    __atomic_store_n(&D->sms, sms > 0 ? sms : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&D->concurrent, mps == 1, __ATOMIC_RELAXED);
    __atomic_store_n(&D->shape_known, 1, __ATOMIC_RELEASE);
    if (mps == 1)
        cs_info(SUBSYS, "device %d: contexts are MPS clients (%d SMs): launches are charged "
                "for the part of the GPU they can hold, no windows", d, sms);
}

/* ---- kernels ------------------------------------------------------------- */

static uint32_t kernel_ppm(int sms, CUfunction f, uint64_t blocks, uint32_t threads,
                           uint32_t shmem)
{
    int per_sm = 0;
    if (!f || !threads || !blocks || sms <= 0 ||
        !cs_drv.cuOccupancyMaxActiveBlocksPerMultiprocessor ||
        cs_drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, (int)threads,
                                                           shmem) != CUDA_SUCCESS ||
        per_sm <= 0)
        return CS_LIM_OCC_FULL;
    uint64_t slots = (uint64_t)sms * (uint64_t)per_sm;
    if (blocks >= slots)
        return CS_LIM_OCC_FULL;
    uint64_t ppm = blocks * CS_LIM_OCC_FULL / slots;
    return ppm ? (uint32_t)ppm : 1;
}

/* ---- graph execs ---------------------------------------------------------- */

static size_t exec_slot(const void *exec)
{
    return (size_t)(((uint64_t)(uintptr_t)exec * 0x9e3779b97f4a7c15ull) >> 54) & (EXECS - 1);
}

static uint32_t exec_ppm(const void *exec)
{
    size_t i = exec_slot(exec);
    if (__atomic_load_n(&execs[i].exec, __ATOMIC_ACQUIRE) != exec)
        return CS_LIM_OCC_FULL;
    return __atomic_load_n(&execs[i].ppm, __ATOMIC_RELAXED);
}

static void exec_remember(const void *exec, uint32_t ppm)
{
    size_t i = exec_slot(exec);
    pthread_mutex_lock(&exec_mu);
    __atomic_store_n(&execs[i].exec, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&execs[i].ppm, ppm, __ATOMIC_RELAXED);
    __atomic_store_n(&execs[i].exec, exec, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&exec_mu);
}

static void exec_forget(const void *exec)
{
    size_t i = exec_slot(exec);
    pthread_mutex_lock(&exec_mu);
    if (execs[i].exec == exec)
        __atomic_store_n(&execs[i].exec, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&exec_mu);
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether g's nodes run one after another: no node has two edges in or
 * two out. Unknown: false (their occupancies are then added up). */
static bool graph_is_chain(CUgraph g, CUgraphNode *sorted, size_t n)
{
    size_t ne = 0;
    if (!cs_drv.cuGraphGetEdges_v2 ||
        cs_drv.cuGraphGetEdges_v2(g, NULL, NULL, NULL, &ne) != CUDA_SUCCESS)
        return false;
    if (!ne)
        return n <= 1;
    CUgraphNode *from = calloc(ne, sizeof *from), *to = calloc(ne, sizeof *to);
    uint8_t *in = calloc(n, 1), *out = calloc(n, 1);
    bool chain = from && to && in && out &&
                 cs_drv.cuGraphGetEdges_v2(g, from, to, NULL, &ne) == CUDA_SUCCESS;
    for (size_t k = 0; chain && k < ne; k++) {
        CUgraphNode *a = bsearch(&from[k], sorted, n, sizeof *sorted, ptr_cmp);
        CUgraphNode *b = bsearch(&to[k], sorted, n, sizeof *sorted, ptr_cmp);
        chain = a && b && ++out[a - sorted] <= 1 && ++in[b - sorted] <= 1;
    }
    free(from);
    free(to);
    free(in);
    free(out);
    return chain;
}

static uint32_t node_ppm(int sms, CUgraphNode node, int depth);

/* Occupancy of a graph's work: see the top of the file. */
static uint32_t graph_ppm(int sms, CUgraph g, int depth)
{
    size_t n = 0;
    if (depth > GRAPH_DEPTH_MAX || !cs_drv.cuGraphGetNodes ||
        cs_drv.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || n > GRAPH_NODES_MAX)
        return CS_LIM_OCC_FULL;
    if (!n)
        return 1;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    if (!nodes || cs_drv.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return CS_LIM_OCC_FULL;
    }
    uint64_t max = 0, sum = 0;
    for (size_t k = 0; k < n && sum < CS_LIM_OCC_FULL; k++) {
        uint32_t p = node_ppm(sms, nodes[k], depth);
        max = p > max ? p : max;
        sum += p;
    }
    if (max < CS_LIM_OCC_FULL && sum > max) {
        qsort(nodes, n, sizeof *nodes, ptr_cmp);
        if (!graph_is_chain(g, nodes, n))
            max = sum < CS_LIM_OCC_FULL ? sum : CS_LIM_OCC_FULL;
    }
    free(nodes);
    return max ? (uint32_t)max : 1;
}

static uint32_t node_ppm(int sms, CUgraphNode node, int depth)
{
    CUgraphNodeType type;
    if (!cs_drv.cuGraphNodeGetType || cs_drv.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS)
        return CS_LIM_OCC_FULL;
    switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        if (!cs_drv.cuGraphKernelNodeGetParams_v2 ||
            cs_drv.cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS)
            return CS_LIM_OCC_FULL;
        CUfunction f = p.func;
        if (!f && p.kern && cs_drv.cuKernelGetFunction &&
            cs_drv.cuKernelGetFunction(&f, p.kern) != CUDA_SUCCESS)
            f = NULL;
        return kernel_ppm(sms, f, (uint64_t)p.gridDimX * p.gridDimY * p.gridDimZ,
                          p.blockDimX * p.blockDimY * p.blockDimZ, p.sharedMemBytes);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph child = NULL;
        if (!cs_drv.cuGraphChildGraphNodeGetGraph ||
            cs_drv.cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS)
            return CS_LIM_OCC_FULL;
        return graph_ppm(sms, child, depth + 1);
    }
    /* No SMs: copies (copy engines, not paced), host work, events, graph
     * memory, empty nodes. */
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return 0;
    default: /* memsets, batched memory operations, conditional bodies */
        return CS_LIM_OCC_FULL;
    }
}

/* The current context's device, when it is a concurrent one; else -1. */
static int concurrent_device(void)
{
    int d = cs__current_device();
    if (d < 0)
        return -1;
    cs__shape_device_seen(d);
    return __atomic_load_n(&cs__lim_devs[d].concurrent, __ATOMIC_RELAXED) ? d : -1;
}

/* After a successful instantiation: the exec's occupancy, on concurrent
 * devices only (elsewhere nobody asks). Graph calls are not legal inside
 * another thread's global-mode capture, so the walk is bracketed. */
static CUresult instantiated(CUresult r, CUgraphExec *exec, CUgraph g)
{
    if (r != CUDA_SUCCESS || !exec || !*exec || !g)
        return r;
    int d = __atomic_load_n(&cs__lim_armed, __ATOMIC_RELAXED) ? concurrent_device() : -1;
    if (d < 0)
        return r; /* nobody asks: only concurrent devices read the table */
    struct cs_capture_guard cg;
    cs__capture_unsafe_begin(&cg);
    uint32_t ppm = graph_ppm(__atomic_load_n(&cs__lim_devs[d].sms, __ATOMIC_RELAXED), g, 0);
    cs__capture_unsafe_end(&cg);
    exec_remember(*exec, ppm);
    cs_debug(SUBSYS, "graph exec %p: holds %.1f %% of the GPU", (void *)*exec, ppm / 1e4);
    return r;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    CS_ENTER(cuGraphInstantiateWithFlags);
    return instantiated(cs_real.cuGraphInstantiateWithFlags(exec, g, flags), exec, g);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CS_ENTER(cuGraphInstantiateWithParams);
    return instantiated(cs_real.cuGraphInstantiateWithParams(exec, g, params), exec, g);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CS_ENTER(cuGraphInstantiateWithParams_ptsz);
    return instantiated(cs_real.cuGraphInstantiateWithParams_ptsz(exec, g, params), exec, g);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec)
{
    CS_ENTER(cuGraphExecDestroy);
    if (exec)
        exec_forget(exec);
    return cs_real.cuGraphExecDestroy(exec);
}

/* ---- the launch path ------------------------------------------------------ */

static uint32_t launch_ppm(const struct cs_lim_dev *D, const struct cs_lim_launch *l)
{
    if (l->exec)
        return exec_ppm(l->exec);
    if (l->f)
        return kernel_ppm(__atomic_load_n(&D->sms, __ATOMIC_RELAXED), (CUfunction)l->f, l->blocks,
                          l->threads, l->shmem);
    return CS_LIM_OCC_FULL;
}

/* The part of the GPU the launch can hold, cached per signature. */
static uint32_t cached_ppm(struct cs_lim_dev *D, const struct cs_lim_launch *l)
{
    if (!l->sig)
        return CS_LIM_OCC_FULL;
    struct cs_lim_occ *e = &D->occ[(l->sig * 0x9e3779b97f4a7c15ull) >> 56 & (CS_LIM_SIGS - 1)];
    /* Graph execs are asked every time: destroying one and instantiating
     * another at the same address must not keep the old answer. */
    if (e->sig == l->sig && !l->exec)
        return e->ppm;
    uint32_t ppm = launch_ppm(D, l);
    *e = (struct cs_lim_occ){.sig = l->sig, .ppm = ppm};
    return ppm;
}

uint32_t cs__shape_occupancy(struct cs_lim_dev *D, const struct cs_lim_launch *l)
{
    if (!__atomic_load_n(&D->concurrent, __ATOMIC_RELAXED))
        return CS_LIM_OCC_FULL;
    uint32_t ppm = cached_ppm(D, l);
    /* Whether our kernels fill the GPU (watch.c, CUSHARE_MPS_TURNS): an
     * average over the last ~16 launches. */
    uint32_t avg = __atomic_load_n(&D->occ_avg_ppm, __ATOMIC_RELAXED);
    __atomic_store_n(&D->occ_avg_ppm, avg + (uint32_t)(((int64_t)ppm - (int64_t)avg) / 16),
                     __ATOMIC_RELAXED);
    return ppm;
}
