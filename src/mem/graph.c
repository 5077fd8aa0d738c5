/*
 * Graph memory nodes. The driver reserves graph memory per device when a
 * graph with allocation nodes is launched and keeps it until
 * cuDeviceGraphMemTrim. Rule: adding an allocation node is refused when
 * its size alone would not fit the budget (early, clear error); the
 * device's graph reservation is charged after each launch (recharged like
 * a pool) and uncharged as trims release it.
 */
#include <pthread.h>
#include <string.h>

#include "core/fork.h"
#include "core/log.h"
#include "limiter/limiter.h"
#include "mem/charge.h"

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t graph_charged[CS_MAX_DEVICES]; /* guarded by graph_lock */

static void recharge_device(int dev)
{
    cuuint64_t reserved = 0;
    CUdevice d;
    if (!cs_drv.cuDeviceGetGraphMemAttribute || !cs_drv.cuDeviceGet ||
        cs_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        cs_drv.cuDeviceGetGraphMemAttribute(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
            CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&graph_lock);
    /* Graph memory is already resident when we see it grow. If the budget
     * cannot take it, say so: the next launch or trim recharges again. */
    if (reserved > graph_charged[dev]) {
        if (cs__charge(dev, CS_MEM_GRAPH, reserved - graph_charged[dev]) == CUDA_SUCCESS)
            graph_charged[dev] = reserved;
        else
            cs_warn_capped(4, "mem",
                           "device %d: graph memory grew to %llu bytes past the budget; it "
                           "stays uncharged until a trim brings it back within the budget",
                           dev, (unsigned long long)reserved);
    } else if (reserved < graph_charged[dev]) {
        cs__uncharge(dev, CS_MEM_GRAPH, graph_charged[dev] - reserved);
        graph_charged[dev] = reserved;
    }
    pthread_mutex_unlock(&graph_lock);
}

void cs__graph_atfork_child(void)
{
    /* The parent's graph memory is the parent's; a parent thread may have
     * held the lock at fork. */
    cs__mutex_reset(&graph_lock);
    memset(graph_charged, 0, sizeof graph_charged);
}

void cs__graph_recharge(void)
{
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (__atomic_load_n(&graph_charged[d], __ATOMIC_RELAXED))
            recharge_device(d);
}

void cs__graph_after_launch(void)
{
    int dev = cs__current_device();
    if (dev >= 0)
        recharge_device(dev);
}

/* Graph launches are launch paths (the limiter paces them) whose memory
 * nodes change what the device holds: recharged after each launch. */
static CUresult graph_launched(CUresult r)
{
    if (r == CUDA_SUCCESS)
        cs__graph_after_launch();
    return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec g, CUstream s)
{
    CS_LAUNCH_BODY(cuGraphLaunch, s, cs__lim_graph(g), graph_launched(cs_real.cuGraphLaunch(g, s)));
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    CS_LAUNCH_BODY(cuGraphLaunch_ptsz, s, cs__lim_graph(g), graph_launched(cs_real.cuGraphLaunch_ptsz(g, s)));
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    CS_ENTER(cuGraphAddMemAllocNode);
    if (nodeParams && nodeParams->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        int dev = nodeParams->poolProps.location.id;
        uint64_t limit = dev >= 0 && dev < CS_MAX_DEVICES ? cs__device_limit(dev) : 0;
        if (limit && nodeParams->bytesize > limit)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return cs_real.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies,
                                          nodeParams);
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
    CS_ENTER(cuDeviceGraphMemTrim);
    CUresult r = cs_real.cuDeviceGraphMemTrim(device);
    if (r == CUDA_SUCCESS && device >= 0 && device < CS_MAX_DEVICES)
        recharge_device(device);
    return r;
}
