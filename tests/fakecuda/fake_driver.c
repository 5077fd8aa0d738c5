/*
 * TEST TOOL (tests/fakecuda), never shipped: the fake libcuda.so.1. This
 * file: process state (init, fork, teardown), the handle registry, devices
 * (CUDA_VISIBLE_DEVICES), contexts, cuGetProcAddress and error strings.
 * Memory lives in fake_mem.c, streams/events/launches in fake_exec.c,
 * stream capture in fake_capture.c.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_internal.h"

pthread_mutex_t fc_mu = PTHREAD_MUTEX_INITIALIZER;
int fc_inited;
int fc_deinit;
int fc_nvis;
int fc_vis[FAKECUDA_MAX_DEVICES];

#define FC_DEVICE_NAME "Fake NVIDIA H100 (fakecuda)"

/* ---- handle registry ---------------------------------------------------- */

#define FC_HBUCKETS 4096
static struct fc_obj *g_hash[FC_HBUCKETS];
static size_t g_nobj;

static size_t hidx(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    return (size_t)((v >> 4) ^ (v >> 16)) % FC_HBUCKETS;
}

void fc_obj_add(struct fc_obj *o, int type, int phys, struct fc_ctx *ctx, void *owner)
{
    o->type = type;
    o->phys = phys;
    o->ctx = ctx;
    o->owner = owner;
    size_t i = hidx(o);
    o->hnext = g_hash[i];
    g_hash[i] = o;
    g_nobj++;
}

void fc_obj_del(struct fc_obj *o)
{
    for (struct fc_obj **pp = &g_hash[hidx(o)]; *pp; pp = &(*pp)->hnext)
        if (*pp == o) {
            *pp = o->hnext;
            g_nobj--;
            return;
        }
}

struct fc_obj *fc_obj_get(const void *p, int type)
{
    if (!p)
        return NULL;
    for (struct fc_obj *o = g_hash[hidx(p)]; o; o = o->hnext)
        if ((const void *)o == p)
            return !type || o->type == type ? o : NULL;
    return NULL;
}

size_t fc_obj_collect(struct fc_obj **out, size_t max, int type, struct fc_ctx *ctx,
                      void *owner, int phys)
{
    size_t n = 0;
    for (size_t i = 0; i < FC_HBUCKETS; i++)
        for (struct fc_obj *o = g_hash[i]; o; o = o->hnext) {
            if ((type && o->type != type) || (ctx && o->ctx != ctx) ||
                (owner && o->owner != owner) || (phys >= 0 && o->phys != phys))
                continue;
            if (n < max)
                out[n] = o;
            n++;
        }
    return n;
}

size_t fc_obj_count(void)
{
    return g_nobj;
}

void fc_lock(void)
{
    pthread_mutex_lock(&fc_mu);
}

void fc_unlock(void)
{
    pthread_mutex_unlock(&fc_mu);
}

/* ---- per-thread context stack ------------------------------------------- */

#define FC_STACK 32
static __thread struct fc_ctx *tls_stack[FC_STACK];
static __thread int tls_depth;

static struct fc_ctx *g_primary[FAKECUDA_MAX_DEVICES]; /* by CUDA ordinal */
static struct fc_ctx *g_dead;                          /* destroyed contexts */
static int g_devctx[FAKECUDA_MAX_DEVICES];             /* live contexts per physical device */

static struct fc_ctx *cur_raw(void)
{
    return tls_depth ? tls_stack[tls_depth - 1] : NULL;
}

CUresult fc_cur_ctx(struct fc_ctx **out)
{
    struct fc_ctx *c = cur_raw();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!fc_obj_get(c, FC_T_CTX) || !c->active)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

int fc_phys_of(CUdevice dev)
{
    return dev >= 0 && dev < fc_nvis ? fc_vis[dev] : -1;
}

/* ---- entry -------------------------------------------------------------- */

CUresult fc_enter(enum fakecuda_call c, int need_init)
{
    if (fc_common_init(FC_LIB_DRIVER))
        return CUDA_ERROR_OPERATING_SYSTEM;
    int fail = fc_count(c);
    if (fail)
        return (CUresult)fail;
    fc_ckpt_gate(c);
    if (need_init) {
        if (__atomic_load_n(&fc_deinit, __ATOMIC_ACQUIRE))
            return CUDA_ERROR_DEINITIALIZED;
        if (!__atomic_load_n(&fc_inited, __ATOMIC_ACQUIRE))
            return CUDA_ERROR_NOT_INITIALIZED;
        return fc_sticky_error();
    }
    return CUDA_SUCCESS;
}

FC_EXPORT struct fakecuda_state *fakecuda_driver_state(void)
{
    return fc_state_peek();
}

/* ---- fork and teardown -------------------------------------------------- */

static void free_obj(struct fc_obj *o)
{
    fc_obj_del(o);
    free(o);
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&fc_mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&fc_mu);
}

/* A fork child inherits copies of the tables but no GPU state: like the
 * real driver, CUDA is unusable there until the child calls cuInit again,
 * which starts from empty tables (the parent's memory stays the parent's). */
static void atfork_child(void)
{
    pthread_mutex_init(&fc_mu, NULL);
    fc_mps_forget();
    fc_exec_reset();
    fc_mem_reset();
    static struct fc_obj *all[65536];
    size_t n;
    while ((n = fc_obj_collect(all, 65536, 0, NULL, NULL, -1)) > 0)
        for (size_t i = 0; i < n && i < 65536; i++)
            free_obj(all[i]);
    while (g_dead) {
        struct fc_ctx *d = g_dead;
        g_dead = d->dead_next;
        free(d);
    }
    memset(g_primary, 0, sizeof(g_primary));
    memset(g_devctx, 0, sizeof(g_devctx));
    tls_depth = 0;
    fc_nvis = 0;
    __atomic_store_n(&fc_inited, 0, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void fc_ctor(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Process exit: the driver releases everything the process held. */
__attribute__((destructor)) static void fc_dtor(void)
{
    if (!fc_state_peek())
        return;
    pthread_mutex_lock(&fc_mu);
    __atomic_store_n(&fc_deinit, 1, __ATOMIC_RELEASE);
    fc_proc_drop_self();
    pthread_mutex_unlock(&fc_mu);
}

/* ---- init, devices ------------------------------------------------------ */

/* CUDA_VISIBLE_DEVICES: comma list of indices or UUIDs ("GPU-" + unique
 * prefix); the list ends at the first invalid, unknown or repeated entry. */
static void parse_visible(void)
{
    int n = (int)fc_S->ndevices;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    fc_nvis = 0;
    if (!v) {
        for (int i = 0; i < n; i++)
            fc_vis[fc_nvis++] = i;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", v);
    unsigned seen = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        char *end = tok + strlen(tok);
        while (end > tok && isspace((unsigned char)end[-1]))
            *--end = 0;
        int phys = -1;
        if (!strncmp(tok, "GPU-", 4)) {
            for (int i = 0; i < n; i++) {
                char s[41];
                fakecuda_uuid_string(fc_S->dev[i].uuid, s);
                if (!strncasecmp(s, tok, strlen(tok))) {
                    if (phys >= 0) { /* ambiguous prefix */
                        phys = -1;
                        break;
                    }
                    phys = i;
                }
            }
        } else if (*tok && strspn(tok, "0123456789") == strlen(tok)) {
            long i = strtol(tok, NULL, 10);
            phys = i < n ? (int)i : -1;
        }
        if (phys < 0 || (seen & (1u << phys)))
            break;
        seen |= 1u << phys;
        fc_vis[fc_nvis++] = phys;
    }
}

FC_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags)
{
    FC_BEGIN_NOINIT(cuInit);
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (__atomic_load_n(&fc_deinit, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_DEINITIALIZED;
    /* The real driver's first cuInit takes ~97 ms on the H200, outside
     * any lock a caller could see: modelled by a sleep. */
    if (fc_cfg.init_cost_us && !__atomic_load_n(&fc_inited, __ATOMIC_ACQUIRE))
        usleep((useconds_t)fc_cfg.init_cost_us);
    CUresult r = CUDA_SUCCESS;
    fc_lock();
    if (!fc_inited) {
        parse_visible();
        if (!fc_nvis)
            r = CUDA_ERROR_NO_DEVICE;
        else
            r = fc_mps_connect(); /* the driver asks for MPS at init */
        if (r == CUDA_SUCCESS) {
            for (int i = 0; i < fc_nvis; i++) {
                struct fc_ctx *c = calloc(1, sizeof(*c));
                if (!c) {
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
                c->ordinal = i;
                c->primary = 1;
                fc_obj_add(&c->o, FC_T_CTX, fc_vis[i], NULL, NULL);
                g_primary[i] = c;
            }
            if (r == CUDA_SUCCESS)
                __atomic_store_n(&fc_inited, 1, __ATOMIC_RELEASE);
            else
                fc_mps_forget(); /* not initialised: not a client either */
        }
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    FC_BEGIN_NOINIT(cuDriverGetVersion);
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = fc_cfg.driver_version;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    FC_BEGIN(cuDeviceGetCount);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fc_nvis;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    FC_BEGIN(cuDeviceGet);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= fc_nvis)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetName);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", FC_DEVICE_NAME);
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    int p = fc_phys_of(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, fc_S->dev[p].uuid, 16);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetUuid);
    return get_uuid(uuid, dev);
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetUuid_v2);
    return get_uuid(uuid, dev);
}

FC_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FC_BEGIN(cuDeviceTotalMem_v2);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    int p = fc_phys_of(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)fc_S->dev[p].total;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetPCIBusId);
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int p = fc_phys_of(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + p);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    FC_BEGIN(cuDeviceGetByPCIBusId);
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus, d, f;
    if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &d, &f) != 4 &&
        sscanf(pciBusId, "%x:%x.%x", &bus, &d, &f) != 3)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fc_nvis; i++)
        if (dom == 0 && bus == (unsigned)(0x10 + fc_vis[i]) && d == 0 && f == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FC_BEGIN(cuDeviceGetAttribute);
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int p = fc_phys_of(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    int v = 0;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = (int)fc_S->dev[p].sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x10 + p; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = fc_mps_client(p); break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
    default: v = 0; break;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------- */

/* Context c becomes live on physical device `phys` (under fc_mu). It
 * charges FAKECUDA_CTX_BYTES when it is the process's only context there
 * (FAKECUDA_MPS_CTX_BYTES for an MPS client; and lists the process in
 * NVML), FAKECUDA_CTX_EXTRA_BYTES when the process has others; it gives
 * back exactly that when it goes, whichever goes first. The H200 (driver
 * 580) takes 518 MiB for every context, the first and any further one:
 * set both knobs alike to model it. */
static CUresult device_ctx_up(struct fc_ctx *c, int phys)
{
    const int first = g_devctx[phys] == 0;
    if (first && fc_cfg.ctx_cost_us)
        usleep((useconds_t)fc_cfg.ctx_cost_us);
    uint64_t bytes = !first ? fc_cfg.ctx_extra_bytes
                     : fc_mps_client(phys) ? fc_cfg.mps_ctx_bytes
                                           : fc_cfg.ctx_bytes;
    if (fc_charge(phys, bytes, FAKECUDA_KIND_CONTEXT))
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->ctx_bytes = bytes;
    if (g_devctx[phys]++ == 0)
        fc_proc_ctx(phys, 1);
    return CUDA_SUCCESS;
}

/* Pools, VMM allocations and graph memory outlive the process's last
 * context on the device, as on the H200: the driver keeps them until they
 * are freed (NVML just stops listing the process). */
static void device_ctx_down(struct fc_ctx *c, int phys)
{
    fc_uncharge(phys, c->ctx_bytes, FAKECUDA_KIND_CONTEXT);
    c->ctx_bytes = 0;
    if (--g_devctx[phys] == 0)
        fc_proc_ctx(phys, 0);
}

/* Frees what a context owns and takes it off this thread's stack. */
static void ctx_teardown(struct fc_ctx *c)
{
    fc_exec_ctx_teardown(c);
    fc_mem_ctx_teardown(c);
    c->active = 0;
    c->tail_ns = 0;
    device_ctx_down(c, c->o.phys);
}

static void stack_remove(struct fc_ctx *c)
{
    int j = 0;
    for (int i = 0; i < tls_depth; i++)
        if (tls_stack[i] != c)
            tls_stack[j++] = tls_stack[i];
    tls_depth = j;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~0xffu)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fc_phys_of(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (tls_depth >= FC_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fc_lock();
    CUresult r = device_ctx_up(c, phys);
    if (r == CUDA_SUCCESS) {
        c->ordinal = dev;
        c->flags = flags;
        c->active = 1;
        fc_obj_add(&c->o, FC_T_CTX, phys, NULL, NULL);
        tls_stack[tls_depth++] = c;
        *pctx = (CUcontext)c;
    }
    fc_unlock();
    if (r != CUDA_SUCCESS)
        free(c);
    return r;
}

FC_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FC_BEGIN(cuCtxCreate_v2);
    return ctx_create(pctx, flags, dev);
}

FC_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                          int numParams, unsigned int flags, CUdevice dev)
{
    FC_BEGIN(cuCtxCreate_v3);
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

FC_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                          unsigned int flags, CUdevice dev)
{
    FC_BEGIN(cuCtxCreate_v4);
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams > 0 &&
        !ctxCreateParams->execAffinityParams)
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

FC_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    FC_BEGIN(cuCtxDestroy_v2);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c = (struct fc_ctx *)fc_obj_get(ctx, FC_T_CTX);
    CUresult r = CUDA_SUCCESS;
    if (!c || c->primary) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        ctx_teardown(c);
        stack_remove(c);
        fc_obj_del(&c->o);
        c->dead_next = g_dead;
        g_dead = c;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FC_BEGIN(cuDevicePrimaryCtxRetain);
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_ctx *c = g_primary[dev];
    CUresult r = CUDA_SUCCESS;
    if (!c->active) {
        r = device_ctx_up(c, c->o.phys);
        if (r == CUDA_SUCCESS)
            c->active = 1;
    }
    if (r == CUDA_SUCCESS) {
        c->refs++;
        *pctx = (CUcontext)c;
    }
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    FC_BEGIN(cuDevicePrimaryCtxRelease_v2);
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_ctx *c = g_primary[dev];
    CUresult r = CUDA_SUCCESS;
    /* References taken before a reset still count (the H200 needs as many
     * releases after a reset as there were retains). */
    if (c->refs <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--c->refs == 0 && c->active)
        ctx_teardown(c);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    FC_BEGIN(cuDevicePrimaryCtxReset_v2);
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    struct fc_ctx *c = g_primary[dev];
    if (c->active)
        ctx_teardown(c);
    c->flags = 0; /* the retain count stays: a reset does not release */
    fc_unlock();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FC_BEGIN(cuDevicePrimaryCtxGetState);
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fc_lock();
    *flags = g_primary[dev]->flags;
    *active = g_primary[dev]->active;
    fc_unlock();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    FC_BEGIN(cuDevicePrimaryCtxSetFlags_v2);
    if (fc_phys_of(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~0xffu)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    g_primary[dev]->flags = flags;
    fc_unlock();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    FC_BEGIN(cuCtxGetCurrent);
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)cur_raw();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    FC_BEGIN(cuCtxSetCurrent);
    if (!ctx) {
        if (tls_depth)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    fc_lock();
    int ok = fc_obj_get(ctx, FC_T_CTX) != NULL;
    fc_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth)
        tls_stack[tls_depth - 1] = (struct fc_ctx *)ctx;
    else
        tls_stack[tls_depth++] = (struct fc_ctx *)ctx;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    FC_BEGIN(cuCtxPushCurrent_v2);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    int ok = fc_obj_get(ctx, FC_T_CTX) != NULL;
    fc_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth >= FC_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = (struct fc_ctx *)ctx;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FC_BEGIN(cuCtxPopCurrent_v2);
    if (!tls_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fc_ctx *c = tls_stack[--tls_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    FC_BEGIN(cuCtxGetDevice);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    if (r == CUDA_SUCCESS)
        *device = c->ordinal;
    fc_unlock();
    return r;
}

/* Waits for context c's work (c: the current context when NULL); the
 * fake's lock is held on entry and released. */
static CUresult ctx_sync_unlock(struct fc_ctx *c)
{
    CUresult r = CUDA_SUCCESS;
    if (!c)
        r = fc_cur_ctx(&c);
    else if (!fc_obj_get(c, FC_T_CTX) || !c->active)
        r = CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS)
        r = fc_cap_ctx_sync(c);
    uint64_t until = r == CUDA_SUCCESS ? c->tail_ns : 0;
    int phys = r == CUDA_SUCCESS ? c->o.phys : -1;
    fc_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    fc_slice_wait(phys, until);
    fc_lock();
    if (fc_obj_get(c, FC_T_CTX))
        fc_pools_sync_trim(c->o.phys);
    fc_unlock();
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
    FC_BEGIN(cuCtxSynchronize);
    fc_lock();
    return ctx_sync_unlock(NULL);
}

/* CUDA 13's version: the context it is given (NULL: the current one),
 * current or not. */
FC_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    FC_BEGIN(cuCtxSynchronize_v2);
    fc_lock();
    return ctx_sync_unlock((struct fc_ctx *)ctx);
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

enum { FC_PLAIN = 0, FC_PTSZ = 1, FC_PTDS = 2 };

static const struct proc_row {
    const char *base;
    const char *symbol;
    int since;
    int variant;
} g_procs[] = {
#define FAKE_PROC(base, sym, since, variant) {#base, #sym, since, FC_##variant},
#include "fake_procs.h"
#undef FAKE_PROC
};

/* Addresses of everything this library exports. Linked with -Bsymbolic:
 * &sym is this library's own definition even when a preloaded library
 * interposes the name, i.e. what dlsym(handle_of_this_library, sym) gives. */
static const struct export_row {
    const char *name;
    void *addr;
} g_exports[] = {
#define FAKE_CU(sym) {#sym, (void *)&sym},
#define FAKE_NVML(sym)
#include "fake_exports.def"
#undef FAKE_CU
#undef FAKE_NVML
};

static void *export_addr(const char *name)
{
    for (size_t i = 0; i < sizeof(g_exports) / sizeof(g_exports[0]); i++)
        if (!strcmp(g_exports[i].name, name))
            return g_exports[i].addr;
    return NULL;
}

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc_row *plain = NULL, *pt = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof(g_procs) / sizeof(g_procs[0]); i++) {
        const struct proc_row *r = &g_procs[i];
        if (strcmp(r->base, symbol))
            continue;
        known = 1;
        if (r->since > cudaVersion)
            continue;
        if (r->variant == FC_PLAIN) {
            if (!plain || r->since > plain->since)
                plain = r;
        } else if (!pt || r->since > pt->since) {
            pt = r;
        }
    }
    if (!known)
        return CUDA_ERROR_NOT_FOUND;
    if (!plain) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    const struct proc_row *r = per_thread && pt ? pt : plain;
    void *addr = export_addr(r->symbol);
    if (!addr)
        return CUDA_ERROR_NOT_FOUND; /* an ABI variant the fake lacks */
    *pfn = addr;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags)
{
    FC_BEGIN_NOINIT(cuGetProcAddress);
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

FC_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *symbolStatus)
{
    FC_BEGIN_NOINIT(cuGetProcAddress_v2);
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ---- error strings ------------------------------------------------------ */

static const struct err_row {
    CUresult code;
    const char *name;
    const char *text;
} g_errs[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "timeout"},
    {CUDA_ERROR_MPS_CONNECTION_FAILED, "CUDA_ERROR_MPS_CONNECTION_FAILED",
     "MPS client failed to connect to the MPS control daemon or the MPS server"},
    {CUDA_ERROR_MPS_SERVER_NOT_READY, "CUDA_ERROR_MPS_SERVER_NOT_READY",
     "MPS server is not ready to accept new MPS client requests"},
    {CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
     "the hardware resources required to create MPS client have been exhausted"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct err_row *find_err(CUresult e)
{
    for (size_t i = 0; i < sizeof(g_errs) / sizeof(g_errs[0]); i++)
        if (g_errs[i].code == e)
            return &g_errs[i];
    return NULL;
}

/* Like the real driver these work before cuInit. */
FC_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    FC_BEGIN_NOINIT(cuGetErrorName);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct err_row *r = find_err(error);
    *pStr = r ? r->name : NULL;
    return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    FC_BEGIN_NOINIT(cuGetErrorString);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct err_row *r = find_err(error);
    *pStr = r ? r->text : NULL;
    return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
