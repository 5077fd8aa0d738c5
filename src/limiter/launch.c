/*
 * Launch wrappers: every way of putting work on the GPU passes the limiter.
 * Each pair (legacy and per-thread default stream) shares one body; the
 * path index tells the limiter which default stream a NULL handle means.
 * The signature (function, grid, block, shared memory; the exec of a
 * graph) is only computed when the limiter is armed.
 */

#include "limiter/limiter.h"
#include "mem/admit.h"

void cs__graph_after_launch(void);

#define SIG_K cs__lim_sig_kernel(f, gx, gy, gz, bx, by, bz, shmem)
#define SIG_EX                                                                            \
    (config ? cs__lim_sig_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, \
                                 config->blockDimX, config->blockDimY, config->blockDimZ, \
                                 config->sharedMemBytes)                                 \
            : 0)

#define CS_LAUNCH_BODY(sym, stream, sig, call)                      \
    do {                                                            \
        CS_ENTER(sym);                                              \
        struct cs_lim_ticket t_;                                    \
        cs__limiter_before_launch(&t_, (stream), CS_LIM_PATH_##sym, (sig)); \
        CUresult r_ = call;                                         \
        cs__limiter_after_launch(&t_, r_);                          \
        return r_;                                                  \
    } while (0)

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

static CUresult graph_launched(CUresult r)
{
    if (r == CUDA_SUCCESS)
        cs__graph_after_launch();
    return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec g, CUstream s)
{
    CS_LAUNCH_BODY(cuGraphLaunch, s, cs__lim_sig_graph(g), graph_launched(cs_real.cuGraphLaunch(g, s)));
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    CS_LAUNCH_BODY(cuGraphLaunch_ptsz, s, cs__lim_sig_graph(g), graph_launched(cs_real.cuGraphLaunch_ptsz(g, s)));
}
