/*
 * TEST TOOL (tests/fakecuda), never shipped: execution in the fake
 * libcuda.so.1: modules and kernels, launches on the simulated GPU
 * timeline, streams and events.
 *
 * Time model: a kernel lasts gridDimX*gridDimY*gridDimZ*FAKECUDA_NS_PER_BLOCK
 * ns, a graph launch FAKECUDA_GRAPH_US us. Each physical device is one
 * timeline shared by every process (fake_common.c, fc_schedule): an
 * ordinary process's work starts at max(now, device busy-until, stream
 * tail); an MPS client's holds only the SMs its grid occupies (launches
 * pass that share along) and runs beside other clients'. Launches return at once;
 * synchronisation sleeps until the tail has passed. With the power model
 * (FAKECUDA_POWER_BUSY_W) kernels and graph launches last nominal / clock,
 * the relative clock at enqueue time (fc_dvfs_dur).
 *
 * Stream capture (fake_capture.c): work pushed to a capturing stream
 * becomes a node of the capture's graph instead of running.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_internal.h"

/* Per-thread default stream: one per thread, for the current context. */
static __thread struct {
    struct fc_ctx *ctx;
    uint64_t tail;
    struct fc_capref cap;
} tls_pt;

static void obj_free(struct fc_obj *o)
{
    fc_obj_del(o);
    free(o);
}

static int ctx_live(struct fc_ctx *c)
{
    return c && fc_obj_get(c, FC_T_CTX) && c->active;
}

CUresult fc_stream_resolve(CUstream h, int ptsz, struct fc_sref *out)
{
    memset(out, 0, sizeof(*out));
    int legacy = h == CU_STREAM_LEGACY || (!h && !ptsz);
    int per_thread = h == CU_STREAM_PER_THREAD || (!h && ptsz);
    if (legacy || per_thread) {
        struct fc_ctx *c;
        CUresult r = fc_cur_ctx(&c);
        if (r != CUDA_SUCCESS)
            return r;
        out->ctx = c;
        if (legacy) {
            out->tail = &c->tail_ns; /* the legacy stream waits for all work of the context */
            out->legacy = 1;
        } else {
            if (tls_pt.ctx != c) {
                tls_pt.ctx = c;
                tls_pt.tail = 0;
                tls_pt.cap.id = 0;
            }
            out->tail = &tls_pt.tail;
            out->cap = &tls_pt.cap;
            out->key = &tls_pt;
            out->blocking = 1; /* it synchronises with the legacy stream */
        }
        return CUDA_SUCCESS;
    }
    struct fc_stream *s = (struct fc_stream *)fc_obj_get(h, FC_T_STREAM);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!ctx_live(s->o.ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    out->ctx = s->o.ctx;
    out->tail = &s->tail_ns;
    out->stream = s;
    out->cap = &s->cap;
    out->key = s;
    out->blocking = !(s->flags & CU_STREAM_NON_BLOCKING);
    return CUDA_SUCCESS;
}

uint64_t fc_slice_wait(int dev, uint64_t v)
{
    for (;;) {
        uint64_t bound = 0, t = fc_slice_resolve(dev, v, &bound);
        if (!(t & FC_SLICE_TOKEN)) {
            fc_ckpt_sleep_until(t);
            return t;
        }
        /* It cannot end before its context's work up to it has run; the
         * others' slices only push it later: look again then. */
        uint64_t soon = fc_now_ns() + 20000;
        fc_ckpt_sleep_until(bound > soon ? bound : soon);
    }
}

/* A stream tail or event time as a time (a time-slicing device's token
 * resolved and stored back once its work completed); under fc_mu. */
static uint64_t settle(int dev, uint64_t *v)
{
    if (*v & FC_SLICE_TOKEN) {
        uint64_t t = fc_slice_resolve(dev, *v, NULL);
        if (!(t & FC_SLICE_TOKEN))
            *v = t;
    }
    return *v;
}

void fc_enqueue(struct fc_sref *s, uint64_t dur, uint32_t occ_ppm, int launch)
{
    struct fc_work w = {.not_before = *s->tail, .dur = dur, .occ_ppm = occ_ppm, .launch = launch};
    uint64_t end = fc_schedule(s->ctx->o.phys, &w);
    *s->tail = end;
    if (end > s->ctx->tail_ns)
        s->ctx->tail_ns = end;
}

/* ---- modules and kernels ------------------------------------------------- */

struct fc_module {
    struct fc_obj o;
};

struct fc_func {
    struct fc_obj o; /* owner: module or library */
    int faults;      /* named FAKECUDA_FAULT_KERNEL: faults when it runs */
};

static CUresult module_new(CUmodule *out)
{
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    /* Measured on driver 580: loading a module where a capture prohibits
     * unsafe calls succeeds but invalidates that capture. */
    if (r == CUDA_SUCCESS)
        (void)fc_cap_unsafe();
    struct fc_module *m = NULL;
    if (r == CUDA_SUCCESS && !(m = calloc(1, sizeof(*m))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        fc_obj_add(&m->o, FC_T_MODULE, c->o.phys, c, NULL);
        *out = (CUmodule)m;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    FC_BEGIN(cuModuleLoad);
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK))
        return CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(module);
}

FC_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    FC_BEGIN(cuModuleLoadData);
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

FC_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                              CUjit_option *options, void **optionValues)
{
    FC_BEGIN(cuModuleLoadDataEx);
    if (!module || !image || (numOptions && (!options || !optionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

static CUresult func_new(void *owner, int owner_type, int type, const char *name, void **out)
{
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_obj *o = fc_obj_get(owner, owner_type);
    struct fc_func *f = o ? calloc(1, sizeof(*f)) : NULL;
    CUresult r = !o ? CUDA_ERROR_INVALID_HANDLE : !f ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        f->faults = !strcmp(name, FAKECUDA_FAULT_KERNEL);
        fc_obj_add(&f->o, type, o->phys, o->ctx, o);
        *out = f;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    FC_BEGIN(cuModuleGetFunction);
    return func_new(hmod, FC_T_MODULE, FC_T_FUNC, name, (void **)hfunc);
}

static void free_owned(void *owner, int type)
{
    struct fc_obj *objs[4096];
    size_t n;
    while ((n = fc_obj_collect(objs, 4096, type, NULL, owner, -1)) > 0)
        for (size_t i = 0; i < n && i < 4096; i++)
            obj_free(objs[i]);
}

/* Unloading a module or library is a potentially unsafe call (measured). */
static CUresult unload(void *h, int type, int child_type)
{
    fc_lock();
    CUresult r = fc_cap_unsafe();
    struct fc_obj *o = r == CUDA_SUCCESS ? fc_obj_get(h, type) : NULL;
    if (o) {
        free_owned(o, child_type);
        obj_free(o);
    } else if (r == CUDA_SUCCESS) {
        r = CUDA_ERROR_INVALID_HANDLE;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    FC_BEGIN(cuModuleUnload);
    return unload(hmod, FC_T_MODULE, FC_T_FUNC);
}

FC_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                             void **jitOptionsValues, unsigned int numJitOptions,
                                             CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                             unsigned int numLibraryOptions)
{
    FC_BEGIN(cuLibraryLoadData);
    if (!library || !code || (numJitOptions && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_module *l = calloc(1, sizeof(*l)); /* context-independent */
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fc_lock();
    (void)fc_cap_unsafe(); /* as module loads: succeeds, invalidates */
    fc_obj_add(&l->o, FC_T_LIB, -1, NULL, NULL);
    fc_unlock();
    *library = (CUlibrary)l;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    FC_BEGIN(cuLibraryGetKernel);
    return func_new(library, FC_T_LIB, FC_T_KERNEL, name, (void **)pKernel);
}

FC_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
    FC_BEGIN(cuLibraryUnload);
    return unload(library, FC_T_LIB, FC_T_KERNEL);
}

/* ---- launches ------------------------------------------------------------ */

/* A kernel launch on a stream; on a capturing stream a kernel node (or,
 * `uncapturable`, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). */
static CUresult launch_on(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shmem, CUstream h, int ptsz, int coop, int uncapturable)
{
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return CUDA_ERROR_INVALID_VALUE;
    if (gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
        (uint64_t)bx * by * bz > 1024 || shmem > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t blocks = (uint64_t)gx * gy * gz;
    unsigned threads = bx * by * bz;
    fc_lock();
    CUresult r = CUDA_SUCCESS;
    if (!fc_obj_get(f, FC_T_FUNC) && !fc_obj_get(f, FC_T_KERNEL))
        r = CUDA_ERROR_INVALID_HANDLE;
    struct fc_sref s;
    struct fc_capture *cap = NULL;
    if (r == CUDA_SUCCESS)
        r = fc_stream_resolve(h, ptsz, &s);
    /* A cooperative grid must be resident at once (cuda.h: at most the
     * occupancy per SM times the SMs). */
    if (r == CUDA_SUCCESS && coop &&
        blocks > (uint64_t)fc_S->dev[s.ctx->o.phys].sms * (uint64_t)fc_blocks_per_sm(threads, shmem))
        r = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    if (r == CUDA_SUCCESS)
        r = uncapturable ? fc_cap_uncapturable(&s) : fc_cap_check(&s, &cap);
    uint32_t occ = r == CUDA_SUCCESS ? fc_occupancy_ppm(s.ctx->o.phys, blocks, threads, shmem) : 0;
    if (r == CUDA_SUCCESS && cap) {
        const struct fc_kshape k = {(void *)f, {gx, gy, gz}, {bx, by, bz}, shmem};
        struct fc_gnode *n = fc_cap_kernel_node(cap, &s, s.ctx->o.phys, blocks * fc_cfg.ns_per_block, &k);
        if (n)
            n->occ_ppm = occ;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (r == CUDA_SUCCESS) {
        /* The launch itself succeeds; the fault shows at the next call. */
        if (((struct fc_func *)f)->faults)
            fc_fault(s.ctx->o.phys);
        fc_enqueue(&s, fc_dvfs_dur(s.ctx->o.phys, blocks * fc_cfg.ns_per_block), occ, 1);
    }
    fc_unlock();
    return r;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shmem, CUstream h, int ptsz, int coop)
{
    return launch_on(f, gx, gy, gz, bx, by, bz, shmem, h, ptsz, coop, 0);
}

/* The legacy launch API (cuLaunch, cuLaunchGrid, cuLaunchGridAsync): a
 * grid of w x h blocks. Measured on driver 580: it cannot be captured
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capture invalidated) and its
 * use of the legacy stream is not checked against blocking captures. */
static CUresult launch_legacy(CUfunction f, int w, int h, CUstream hs, int async)
{
    if (w <= 0 || h <= 0 || h > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t blocks = (uint64_t)w * (uint64_t)h;
    fc_lock();
    CUresult r = CUDA_SUCCESS;
    if (!fc_obj_get(f, FC_T_FUNC) && !fc_obj_get(f, FC_T_KERNEL))
        r = CUDA_ERROR_INVALID_HANDLE;
    struct fc_sref s;
    if (r == CUDA_SUCCESS)
        r = fc_stream_resolve(async ? hs : CU_STREAM_LEGACY, 0, &s);
    if (r == CUDA_SUCCESS && !s.legacy)
        r = fc_cap_uncapturable(&s);
    /* The block shape (cuFuncSetBlockShape) is not modelled: the grid is
     * taken to fill the device. */
    if (r == CUDA_SUCCESS)
        fc_enqueue(&s, fc_dvfs_dur(s.ctx->o.phys, blocks * fc_cfg.ns_per_block), FC_PPM, 1);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuLaunch(CUfunction f)
{
    FC_BEGIN(cuLaunch);
    return launch_legacy(f, 1, 1, NULL, 0);
}

FC_EXPORT CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    FC_BEGIN(cuLaunchGrid);
    return launch_legacy(f, grid_width, grid_height, NULL, 0);
}

FC_EXPORT CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    FC_BEGIN(cuLaunchGridAsync);
    return launch_legacy(f, grid_width, grid_height, hStream, 1);
}

FC_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                          void **kernelParams, void **extra)
{
    FC_BEGIN(cuLaunchKernel);
    (void)kernelParams;
    (void)extra;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  0, 0);
}

FC_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX,
                                               unsigned int blockDimY, unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams, void **extra)
{
    FC_BEGIN(cuLaunchKernel_ptsz);
    (void)kernelParams;
    (void)extra;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  1, 0);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, int ptsz)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    int coop = 0;
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && config->attrs[i].value.cooperative)
            coop = 1;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, ptsz, coop);
}

FC_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                            void **extra)
{
    FC_BEGIN(cuLaunchKernelEx);
    (void)kernelParams;
    (void)extra;
    return launch_ex(config, f, 0);
}

FC_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                                 void **kernelParams, void **extra)
{
    FC_BEGIN(cuLaunchKernelEx_ptsz);
    (void)kernelParams;
    (void)extra;
    return launch_ex(config, f, 1);
}

FC_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                     unsigned int gridDimZ, unsigned int blockDimX,
                                                     unsigned int blockDimY, unsigned int blockDimZ,
                                                     unsigned int sharedMemBytes, CUstream hStream,
                                                     void **kernelParams)
{
    FC_BEGIN(cuLaunchCooperativeKernel);
    (void)kernelParams;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  0, 1);
}

FC_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                          unsigned int gridDimY, unsigned int gridDimZ,
                                                          unsigned int blockDimX, unsigned int blockDimY,
                                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                          CUstream hStream, void **kernelParams)
{
    FC_BEGIN(cuLaunchCooperativeKernel_ptsz);
    (void)kernelParams;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  1, 1);
}

/* cuLaunchCooperativeKernelMultiDevice: each entry a cooperative launch on
 * its own stream and function. Measured on driver 580: it cannot be
 * captured. */
FC_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                                unsigned int numDevices, unsigned int flags)
{
    FC_BEGIN(cuLaunchCooperativeKernelMultiDevice);
    if (!launchParamsList || !numDevices ||
        (flags & ~(unsigned)(CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                             CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC)))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numDevices; i++) {
        const CUDA_LAUNCH_PARAMS *p = &launchParamsList[i];
        CUresult r = launch_on(p->function, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX,
                               p->blockDimY, p->blockDimZ, p->sharedMemBytes, p->hStream, 0, 1, 1);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* A graph launch lasts FAKECUDA_GRAPH_US plus its kernel and memset nodes,
 * one block of time occupying the largest share of the SMs one of its
 * nodes occupies (one SM without such nodes). Measured on driver 580: a
 * graph launch cannot be captured. */
static CUresult graph_launch(CUgraphExec x, CUstream h, int ptsz)
{
    fc_lock();
    struct fc_sref s;
    uint64_t work = 0;
    uint32_t occ = 0;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = fc_cap_uncapturable(&s);
    if (r == CUDA_SUCCESS)
        r = fc_graph_launch_memory(x, &work, &occ);
    if (r == CUDA_SUCCESS && !occ) {
        uint32_t sms = fc_S->dev[s.ctx->o.phys].sms;
        occ = (FC_PPM + sms - 1) / sms; /* one SM */
    }
    if (r == CUDA_SUCCESS)
        fc_enqueue(&s, fc_dvfs_dur(s.ctx->o.phys, fc_cfg.graph_ns + work), occ, 1);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    FC_BEGIN(cuGraphLaunch);
    return graph_launch(hGraphExec, hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    FC_BEGIN(cuGraphLaunch_ptsz);
    return graph_launch(hGraphExec, hStream, 1);
}

/* ---- streams ------------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    struct fc_stream *s = NULL;
    if (r == CUDA_SUCCESS && !(s = calloc(1, sizeof(*s))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        s->flags = flags;
        s->priority = prio < -5 ? -5 : prio > 0 ? 0 : prio;
        fc_obj_add(&s->o, FC_T_STREAM, c->o.phys, c, NULL);
        *ph = (CUstream)s;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    FC_BEGIN(cuStreamCreate);
    return stream_create(phStream, Flags, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    FC_BEGIN(cuStreamCreateWithPriority);
    return stream_create(phStream, flags, priority);
}

FC_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    FC_BEGIN(cuStreamDestroy_v2);
    fc_lock();
    struct fc_obj *s = fc_obj_get(hStream, FC_T_STREAM);
    if (s) {
        fc_cap_stream_destroy((struct fc_stream *)s);
        obj_free(s); /* pending work still completes on the device timeline */
    }
    fc_unlock();
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_sync(CUstream h, int ptsz)
{
    fc_lock();
    struct fc_sref s;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = fc_cap_stream_sync(&s);
    uint64_t until = r == CUDA_SUCCESS ? *s.tail : 0;
    int phys = r == CUDA_SUCCESS ? s.ctx->o.phys : -1;
    fc_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    fc_slice_wait(phys, until);
    fc_lock();
    fc_pools_sync_trim(phys);
    fc_unlock();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    FC_BEGIN(cuStreamSynchronize);
    return stream_sync(hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    FC_BEGIN(cuStreamSynchronize_ptsz);
    return stream_sync(hStream, 1);
}

static CUresult stream_query(CUstream h, int ptsz)
{
    fc_lock();
    struct fc_sref s;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = fc_cap_stream_sync(&s);
    if (r == CUDA_SUCCESS && (settle(s.ctx->o.phys, s.tail), *s.tail > fc_now_ns()))
        r = CUDA_ERROR_NOT_READY;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    FC_BEGIN(cuStreamQuery);
    return stream_query(hStream, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    FC_BEGIN(cuStreamQuery_ptsz);
    return stream_query(hStream, 1);
}

static CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, int ptsz)
{
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_event *e = (struct fc_event *)fc_obj_get(ev, FC_T_EVENT);
    struct fc_sref s;
    int handled = 0;
    CUresult r = e ? fc_stream_resolve(h, ptsz, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        r = fc_cap_wait(&s, e, flags, &handled);
    if (r == CUDA_SUCCESS && !handled && e->recorded && e->ts_ns > *s.tail)
        *s.tail = e->ts_ns;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    FC_BEGIN(cuStreamWaitEvent);
    return stream_wait_event(hStream, hEvent, Flags, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    FC_BEGIN(cuStreamWaitEvent_ptsz);
    return stream_wait_event(hStream, hEvent, Flags, 1);
}

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, int ptsz)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_sref s;
    CUresult r = fc_stream_resolve(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        *pctx = (CUcontext)s.ctx;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    FC_BEGIN(cuStreamGetCtx);
    return stream_get_ctx(hStream, pctx, 0);
}

FC_EXPORT CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    FC_BEGIN(cuStreamGetCtx_ptsz);
    return stream_get_ctx(hStream, pctx, 1);
}

/* ---- events -------------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    FC_BEGIN(cuEventCreate);
    if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                         CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    struct fc_event *e = NULL;
    if (r == CUDA_SUCCESS && !(e = calloc(1, sizeof(*e))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        e->flags = Flags;
        fc_obj_add(&e->o, FC_T_EVENT, c->o.phys, c, NULL);
        *phEvent = (CUevent)e;
    }
    fc_unlock();
    return r;
}

/* FAKECUDA_EVENT_TIMESLICE=1: events complete when their own stream reaches
 * them, not after the device's queue (a GPU that time-slices contexts: an
 * event pair around a kernel spans the other contexts' work). */
static int event_timeslice(void)
{
    static int v = -1; /* racy first read is harmless: same value */
    int c = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (c < 0) {
        const char *s = getenv("FAKECUDA_EVENT_TIMESLICE");
        c = s && *s && strcmp(s, "0") != 0;
        __atomic_store_n(&v, c, __ATOMIC_RELAXED);
    }
    return c;
}

static CUresult event_record(CUevent ev, CUstream h, unsigned flags, int ptsz)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_event *e = (struct fc_event *)fc_obj_get(ev, FC_T_EVENT);
    struct fc_sref s;
    int captured = 0;
    CUresult r = e ? fc_stream_resolve(h, ptsz, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        r = fc_cap_event_record(&s, e, flags, &captured);
    if (r == CUDA_SUCCESS && !captured) {
        /* An event is a zero-length operation in the device's one queue: it
         * completes after the stream's own work and after work already
         * queued on the device by anyone (the model has a single queue);
         * with FAKECUDA_EVENT_TIMESLICE=1 only after the stream's own. An
         * MPS client's completes when the MPS server's context reaches it
         * after the stream's own work: a pair around a kernel spans that
         * kernel (stretched if it had to share), not other clients' work. */
        int phys = s.ctx->o.phys;
        e->ts_ns = fc_slice_on(phys) ? fc_slice_submit(phys, getpid(), 0)
                                     : fc_event_ns(phys, *s.tail, event_timeslice());
        e->recorded = 1;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    FC_BEGIN(cuEventRecord);
    return event_record(hEvent, hStream, 0, 0);
}

FC_EXPORT CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    FC_BEGIN(cuEventRecord_ptsz);
    return event_record(hEvent, hStream, 0, 1);
}

FC_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    FC_BEGIN(cuEventRecordWithFlags);
    return event_record(hEvent, hStream, flags, 0);
}

FC_EXPORT CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    FC_BEGIN(cuEventRecordWithFlags_ptsz);
    return event_record(hEvent, hStream, flags, 1);
}

FC_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    FC_BEGIN(cuEventQuery);
    fc_lock();
    struct fc_event *e = (struct fc_event *)fc_obj_get(hEvent, FC_T_EVENT);
    CUresult r = !e ? CUDA_ERROR_INVALID_HANDLE : fc_cap_event_use(e, FC_EV_QUERY);
    if (r == CUDA_SUCCESS)
        r = fc_cap_unsafe();
    if (r == CUDA_SUCCESS && e->recorded && (settle(e->o.phys, &e->ts_ns), e->ts_ns > fc_now_ns()))
        r = CUDA_ERROR_NOT_READY;
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    FC_BEGIN(cuEventSynchronize);
    fc_lock();
    struct fc_event *e = (struct fc_event *)fc_obj_get(hEvent, FC_T_EVENT);
    CUresult r = !e ? CUDA_ERROR_INVALID_HANDLE : fc_cap_event_use(e, FC_EV_SYNC);
    if (r == CUDA_SUCCESS)
        r = fc_cap_unsafe();
    uint64_t until = r == CUDA_SUCCESS && e->recorded ? e->ts_ns : 0;
    int phys = e ? e->o.phys : -1;
    fc_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    fc_slice_wait(phys, until);
    fc_lock();
    fc_pools_sync_trim(phys);
    fc_unlock();
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_event *s = (struct fc_event *)fc_obj_get(a, FC_T_EVENT);
    struct fc_event *e = (struct fc_event *)fc_obj_get(b, FC_T_EVENT);
    CUresult r = !s || !e ? CUDA_ERROR_INVALID_HANDLE : fc_cap_event_use(s, FC_EV_ELAPSED);
    if (r == CUDA_SUCCESS)
        r = fc_cap_event_use(e, FC_EV_ELAPSED);
    if (r != CUDA_SUCCESS)
        goto out;
    if (!s->recorded || !e->recorded || ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (settle(s->o.phys, &s->ts_ns), settle(e->o.phys, &e->ts_ns),
             s->ts_ns > fc_now_ns() || e->ts_ns > fc_now_ns())
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)e->ts_ns - (double)s->ts_ns) / 1e6);
out:
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    FC_BEGIN(cuEventElapsedTime);
    return elapsed(pMilliseconds, hStart, hEnd);
}

FC_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    FC_BEGIN(cuEventElapsedTime_v2);
    return elapsed(pMilliseconds, hStart, hEnd);
}

FC_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    FC_BEGIN(cuEventDestroy_v2);
    fc_lock();
    struct fc_obj *e = fc_obj_get(hEvent, FC_T_EVENT);
    if (e)
        obj_free(e);
    fc_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- teardown ------------------------------------------------------------ */

void fc_exec_ctx_teardown(struct fc_ctx *ctx)
{
    static const int types[] = {FC_T_STREAM, FC_T_EVENT, FC_T_FUNC, FC_T_MODULE};
    struct fc_obj *objs[4096];
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        size_t n;
        while ((n = fc_obj_collect(objs, 4096, types[t], ctx, NULL, -1)) > 0)
            for (size_t i = 0; i < n && i < 4096; i++)
                obj_free(objs[i]);
    }
    if (tls_pt.ctx == ctx)
        tls_pt.ctx = NULL;
    fc_cap_ctx_teardown(ctx);
}

void fc_exec_reset(void)
{
    tls_pt.ctx = NULL;
    tls_pt.tail = 0;
    tls_pt.cap.id = 0;
    fc_cap_reset();
}
