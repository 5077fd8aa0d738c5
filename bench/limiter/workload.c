/*
 * GPU workloads of `cushare bench limiter` (docs/limiter.md), in plain C
 * over the CUDA driver API, loaded with dlopen so the same binary runs on
 * a real GPU and on tests/fakecuda, with or without libcushare preloaded
 * (the preload interposes dlsym, so the launches go through its wrappers).
 * The kernels are PTX (kernels.cu -> kernels_ptx.h), JIT-compiled by the
 * driver.
 *
 *   limiter_workload elementwise [--n ELEMS] [--batch B] ...
 *       y = a*x + y over ELEMS fp32 (default 16M): GPU-bound, back to back
 *   limiter_workload launchbound [--gap-us G] [--batch B] ...
 *       one-block kernels with G us (default 100) of CPU work between
 *       launches: the GPU is busy a few percent of the time
 *   limiter_workload launchcost [--batch B] ...
 *       one-block kernels back to back, synchronised every B (default
 *       1000): the rate is the cost of a launch
 *   common: --secs S (measured, default 5)  --warmup W (default 1)
 *           --start-mono NS  wait until CLOCK_MONOTONIC reaches NS first
 *           (tenants started together measure the same wall-clock window)
 *
 * Prints one line: RESULT workload=NAME rate=KERNELS_PER_S kernels=N secs=T
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels_ptx.h"

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*CtxSynchronize)(void);
} cu;

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            fprintf(stderr, "limiter_workload: %s failed: %d\n", #call, (int)r_); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "limiter_workload: libcuda.so.1 lacks %s\n", name);
        exit(1);
    }
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void spin_us(double us)
{
    double end = now_s() + us * 1e-6;
    while (now_s() < end) {
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "elementwise") && strcmp(argv[1], "launchbound") &&
                     strcmp(argv[1], "launchcost"))) {
        fprintf(stderr, "usage: limiter_workload elementwise|launchbound|launchcost [--secs S] "
                        "[--warmup W] [--n ELEMS] [--batch B] [--gap-us G] [--start-mono NS]\n");
        return 2;
    }
    const int ew = !strcmp(argv[1], "elementwise");
    double secs = 5, warmup = 1, gap_us = !strcmp(argv[1], "launchbound") ? 100 : 0;
    unsigned n = 16u << 20, batch = ew ? 64 : gap_us > 0 ? 32 : 1000;
    long long start_mono = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--secs"))
            secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--n"))
            n = (unsigned)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--batch"))
            batch = (unsigned)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--gap-us"))
            gap_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--start-mono"))
            start_mono = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "limiter_workload: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "limiter_workload: %s\n", dlerror());
        return 1;
    }
    cu.Init = sym(h, "cuInit");
    cu.DeviceGet = sym(h, "cuDeviceGet");
    cu.PrimaryCtxRetain = sym(h, "cuDevicePrimaryCtxRetain");
    cu.CtxSetCurrent = sym(h, "cuCtxSetCurrent");
    cu.ModuleLoadData = sym(h, "cuModuleLoadData");
    cu.ModuleGetFunction = sym(h, "cuModuleGetFunction");
    cu.MemAlloc = sym(h, "cuMemAlloc_v2");
    cu.MemsetD8 = sym(h, "cuMemsetD8_v2");
    cu.LaunchKernel = sym(h, "cuLaunchKernel");
    cu.CtxSynchronize = sym(h, "cuCtxSynchronize");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CK(cu.Init(0));
    CK(cu.DeviceGet(&dev, 0));
    CK(cu.PrimaryCtxRetain(&ctx, dev));
    CK(cu.CtxSetCurrent(ctx));
    CK(cu.ModuleLoadData(&mod, kernels_ptx));
    CK(cu.ModuleGetFunction(&f, mod, ew ? "axpy" : "tiny"));
    CUdeviceptr x, y;
    CK(cu.MemAlloc(&x, ew ? (size_t)n * 4 : 4));
    CK(cu.MemAlloc(&y, ew ? (size_t)n * 4 : 4));
    CK(cu.MemsetD8(x, 0, ew ? (size_t)n * 4 : 4));
    CK(cu.MemsetD8(y, 0, ew ? (size_t)n * 4 : 4));
    float a = 1.0001f;
    void *ew_args[] = {&a, &x, &y, &n};
    void *tiny_args[] = {&y};
    unsigned grid = ew ? (n + 255) / 256 : 1, block = ew ? 256 : 32;

    if (start_mono) {
        struct timespec ts = {.tv_sec = (time_t)(start_mono / 1000000000ll),
                              .tv_nsec = (long)(start_mono % 1000000000ll)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    double t0 = now_s(), t_meas = 0;
    unsigned long long counted = 0;
    for (int measuring = 0;;) {
        for (unsigned i = 0; i < batch; i++) {
            CK(cu.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, ew ? ew_args : tiny_args,
                               NULL));
            if (gap_us > 0)
                spin_us(gap_us);
        }
        CK(cu.CtxSynchronize());
        double t = now_s();
        if (!measuring && t - t0 >= warmup) {
            measuring = 1;
            t_meas = t;
            continue;
        }
        if (measuring) {
            counted += batch;
            if (t - t_meas >= secs) {
                printf("RESULT workload=%s rate=%.1f kernels=%llu secs=%.3f\n", argv[1],
                       (double)counted / (t - t_meas), counted, t - t_meas);
                return 0;
            }
        }
    }
}
