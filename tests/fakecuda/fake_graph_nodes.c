/*
 * Reading a graph back (cuda.h: cuGraphNodeGetType,
 * cuGraphKernelNodeGetParams_v2, cuGraphGetEdges_v2,
 * cuGraphChildGraphNodeGetGraph, cuKernelGetFunction): what cushare's
 * limiter reads at instantiation to tell what part of the GPU a graph's
 * kernels can hold (src/limiter/shape.c). Graphs here come from stream
 * capture (and graph memory nodes); there are no child-graph nodes, so
 * asking a node for its child graph is the driver's "not that kind of
 * node". A CUkernel and a CUfunction are the same object in this fake
 * (both launch), so a kernel's function is the kernel itself.
 */
#include <string.h>

#include "fake_internal.h"

#define NODES_MAX 4096

static CUgraphNodeType node_type(const struct fc_gnode *n)
{
    switch (n->kind) {
    case FC_GN_ALLOC: return CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    case FC_GN_FREE: return CU_GRAPH_NODE_TYPE_MEM_FREE;
    case FC_GN_KERNEL: return CU_GRAPH_NODE_TYPE_KERNEL;
    case FC_GN_MEMSET: return CU_GRAPH_NODE_TYPE_MEMSET;
    case FC_GN_MEMCPY: return CU_GRAPH_NODE_TYPE_MEMCPY;
    case FC_GN_EVENT_WAIT: return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    default: return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    }
}

FC_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    FC_BEGIN(cuGraphNodeGetType);
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    const struct fc_gnode *n = (const struct fc_gnode *)fc_obj_get(hNode, FC_T_GNODE);
    if (n)
        *type = node_type(n);
    fc_unlock();
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *p)
{
    FC_BEGIN(cuGraphKernelNodeGetParams_v2);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    const struct fc_gnode *n = (const struct fc_gnode *)fc_obj_get(hNode, FC_T_GNODE);
    CUresult r = n && n->kind == FC_GN_KERNEL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        const struct fc_kshape *k = &n->kshape;
        memset(p, 0, sizeof *p);
        p->func = (CUfunction)k->func;
        p->gridDimX = k->grid[0];
        p->gridDimY = k->grid[1];
        p->gridDimZ = k->grid[2];
        p->blockDimX = k->block[0];
        p->blockDimY = k->block[1];
        p->blockDimZ = k->block[2];
        p->sharedMemBytes = k->shmem;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    FC_BEGIN(cuGraphChildGraphNodeGetGraph);
    (void)hNode; /* no node here is a child-graph node */
    (void)phGraph;
    return CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    FC_BEGIN(cuKernelGetFunction);
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    if (r == CUDA_SUCCESS && !fc_obj_get(kernel, FC_T_KERNEL))
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        *pFunc = (CUfunction)kernel;
    fc_unlock();
    return r;
}

/* Edges in node creation order, each node's dependencies in their order:
 * dependency -> node. No edge data (all default edges). */
FC_EXPORT CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                              CUgraphEdgeData *edgeData, size_t *numEdges)
{
    FC_BEGIN(cuGraphGetEdges_v2);
    if (!numEdges || (!from) != (!to) || (edgeData && !from))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    static struct fc_obj *objs[NODES_MAX]; /* under fc_mu */
    long got = fc_graph_nodes_locked(hGraph, objs, NODES_MAX);
    if (got < 0) {
        fc_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t n = got < NODES_MAX ? (size_t)got : NODES_MAX, e = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fc_gnode *x = (const struct fc_gnode *)objs[i];
        for (size_t k = 0; k < x->ndeps; k++, e++) {
            if (!from || e >= *numEdges)
                continue;
            from[e] = (CUgraphNode)x->deps[k];
            to[e] = (CUgraphNode)x;
            if (edgeData)
                memset(&edgeData[e], 0, sizeof edgeData[e]);
        }
    }
    /* cuda.h: with arrays, fewer edges than asked leave the rest NULL and
     * *numEdges says how many were written. */
    if (from) {
        for (size_t k = e; k < *numEdges; k++)
            from[k] = to[k] = NULL;
        if (*numEdges > e)
            *numEdges = e;
    } else {
        *numEdges = e;
    }
    fc_unlock();
    return CUDA_SUCCESS;
}
