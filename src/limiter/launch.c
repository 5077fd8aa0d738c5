/*
 * Launch wrappers: every way of putting work on the SMs passes the limiter
 * (the KERNEL, GRAPHRUN and MEMSET rows of hooks.def). Each pair (legacy
 * and per-thread default stream) shares one body; the path tells the
 * limiter which default stream a NULL handle means. The signature
 * (function, grid, block, shared memory; the exec of a graph; a memset's
 * shape) is only computed when the limiter is armed. The SYNC rows (calls
 * that wait for the GPU) are timed here too: when one returns after
 * blocking, the tenant's queue has just drained (limiter.c).
 */

#include "limiter/limiter.h"

#define SIG_K cs__lim_kernel(f, gx, gy, gz, bx, by, bz, shmem)
#define SIG_EX                                                                        \
    (config ? cs__lim_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, \
                             config->blockDimX, config->blockDimY, config->blockDimZ, \
                             config->sharedMemBytes)                                 \
            : (struct cs_lim_launch){0})


CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shmem, CUstream s, void **params, void **extra)
{
    CS_LAUNCH_BODY(cuLaunchKernel, s, SIG_K,
                   cs_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shmem, CUstream s,
                                     void **params, void **extra)
{
    CS_LAUNCH_BODY(cuLaunchKernel_ptsz, s, SIG_K,
                   cs_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    CS_LAUNCH_BODY(cuLaunchKernelEx, config ? config->hStream : NULL, SIG_EX,
                   cs_real.cuLaunchKernelEx(config, f, params, extra));
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                       void **extra)
{
    CS_LAUNCH_BODY(cuLaunchKernelEx_ptsz, config ? config->hStream : NULL, SIG_EX,
                   cs_real.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int shmem, CUstream s,
                                           void **params)
{
    CS_LAUNCH_BODY(cuLaunchCooperativeKernel, s, SIG_K,
                   cs_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int shmem, CUstream s,
                                                void **params)
{
    CS_LAUNCH_BODY(cuLaunchCooperativeKernel_ptsz, s, SIG_K,
                   cs_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s,
                                                          params));
}

/* ---- legacy entry points ------------------------------------------------ */

CUresult CUDAAPI cuLaunch(CUfunction f)
{
    CS_LAUNCH_BODY(cuLaunch, NULL, cs__lim_kernel(f, 1, 1, 1, 0, 0, 0, 0), cs_real.cuLaunch(f));
}

CUresult CUDAAPI cuLaunchGrid(CUfunction f, int w, int h)
{
    CS_LAUNCH_BODY(cuLaunchGrid, NULL, cs__lim_kernel(f, (unsigned)w, (unsigned)h, 1, 0, 0, 0, 0),
                   cs_real.cuLaunchGrid(f, w, h));
}

CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
    CS_LAUNCH_BODY(cuLaunchGridAsync, s,
                   cs__lim_kernel(f, (unsigned)w, (unsigned)h, 1, 0, 0, 0, 0),
                   cs_real.cuLaunchGridAsync(f, w, h, s));
}

/* One kernel per device, each on its own stream: each is paced on its
 * device before the launch and measured after it. */
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                      unsigned int flags)
{
    CS_ENTER(cuLaunchCooperativeKernelMultiDevice);
    struct cs_lim_ticket t[CS_MAX_DEVICES];
    unsigned m = list ? (n < CS_MAX_DEVICES ? n : CS_MAX_DEVICES) : 0;
    for (unsigned i = 0; i < m; i++) {
        const CUDA_LAUNCH_PARAMS *p = &list[i];
        cs__limiter_before_launch(&t[i], p->hStream,
                                  CS_LIM_PATH_cuLaunchCooperativeKernelMultiDevice,
                                  cs__lim_kernel(p->function, p->gridDimX, p->gridDimY,
                                                 p->gridDimZ, p->blockDimX, p->blockDimY,
                                                 p->blockDimZ, p->sharedMemBytes));
    }
    CUresult r = cs_real.cuLaunchCooperativeKernelMultiDevice(list, n, flags);
    for (unsigned i = 0; i < m; i++)
        cs__limiter_after_launch(&t[i], r);
    return r;
}

/* ---- memsets: generated from the MEMSET rows of hooks.def ---------------- */

/* The four memset shapes, told apart by their argument count:
 * (dst, value, N), (dst, value, N, stream), (dst, pitch, value, width,
 * height) and the same with a stream. The synchronous ones use the
 * default stream of their variant (NULL). */
#define MS_NARGS(...) MS_NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1)
#define MS_NARGS_(a, b, c, d, e, f, n, ...) n
#define MS_CAT(a, b) MS_CAT_(a, b)
#define MS_CAT_(a, b) a##b
#define MS_STREAM(...) MS_CAT(MS_STREAM_, MS_NARGS(__VA_ARGS__))(__VA_ARGS__)
#define MS_STREAM_3(d, v, n) NULL
#define MS_STREAM_4(d, v, n, s) s
#define MS_STREAM_5(d, p, v, w, h) NULL
#define MS_STREAM_6(d, p, v, w, h, s) s
#define MS_SIG(...) MS_CAT(MS_SIG_, MS_NARGS(__VA_ARGS__))(__VA_ARGS__)
#define MS_SIG_3(d, v, n) MS_LAUNCH(cs__lim_sig_memset(sizeof(v), n, 1))
#define MS_SIG_4(d, v, n, s) MS_LAUNCH(cs__lim_sig_memset(sizeof(v), n, 1))
#define MS_SIG_5(d, p, v, w, h) MS_LAUNCH(cs__lim_sig_memset(sizeof(v), w, h))
#define MS_SIG_6(d, p, v, w, h, s) MS_LAUNCH(cs__lim_sig_memset(sizeof(v), w, h))
/* A memset holds the GPU as a whole as far as the limiter knows. */
#define MS_LAUNCH(sig_) ((struct cs_lim_launch){.sig = (sig_)})

#define MS_WRAP_MEMSET(sym, params, args) \
    CUresult CUDAAPI sym params { CS_LAUNCH_BODY(sym, MS_STREAM args, MS_SIG args, cs_real.sym args); }
#define MS_WRAP_INIT(sym, params, args)
#define MS_WRAP_VIEW(sym, params, args)
#define MS_WRAP_CTX(sym, params, args)
#define MS_WRAP_MEM(sym, params, args)
#define MS_WRAP_POOL(sym, params, args)
#define MS_WRAP_VMM(sym, params, args)
#define MS_WRAP_GRAPH(sym, params, args)
#define MS_WRAP_CAPTURE(sym, params, args)
#define MS_WRAP_KERNEL(sym, params, args)
#define MS_WRAP_GRAPHRUN(sym, params, args)
#define MS_WRAP_INSTANTIATE(sym, params, args)
#define MS_WRAP_GATE(sym, params, args)
/* A call that waits for the GPU: when it returns after blocking, our
 * queue has just drained (limiter.c, cs__limiter_synced). */
#define MS_WRAP_SYNC(sym, params, args)         \
    CUresult CUDAAPI sym params                 \
    {                                           \
        CS_ENTER(sym);                          \
        int64_t t0_ = cs__now_ns();             \
        CUresult r_ = cs_real.sym args;         \
        cs__limiter_synced(t0_, cs__now_ns());  \
        return r_;                              \
    }
#define CS_CU(base, sym, since, variant, family, params, args) MS_WRAP_##family(sym, params, args)
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
