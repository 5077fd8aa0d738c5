/*
 * How a fake-driver test starts: the driver up with device 0's primary
 * context current, a kernel to launch (the fake takes any image; a
 * kernel's time is its blocks times FAKECUDA_NS_PER_BLOCK, whatever its
 * name), and a stream with two events to time it.
 */
#ifndef CS_TESTS_FAKE_BRINGUP_H
#define CS_TESTS_FAKE_BRINGUP_H

#include <cuda.h>

#include "check.h"

static inline CUcontext fake_ctx_up(void)
{
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
}

/* Kernel `name` of a module loaded for it, which *mod (if not NULL)
 * receives for the caller to unload. */
static inline CUfunction fake_kernel(const char *name, CUmodule *mod)
{
    CUmodule m;
    CUfunction f;
    CHECK_EQ(cuModuleLoadData(&m, "fake cubin"), CUDA_SUCCESS);
    CHECK_EQ(cuModuleGetFunction(&f, m, name), CUDA_SUCCESS);
    if (mod)
        *mod = m;
    return f;
}

/* A stream of its own and two events to time work on it with. */
static inline void fake_timed_stream(CUstream *s, CUevent *e0, CUevent *e1)
{
    CHECK_EQ(cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
}

#endif
