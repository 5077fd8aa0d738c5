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
 *   limiter_workload decode [--n ELEMS] [--batch B] [--gap-us G] ...
 *       a stand-in for an LLM decode loop: a call is B (default 32) small
 *       element-wise kernels (default 256K elements) with G us (default
 *       60) of CPU time between them, slept rather than spun so tenants
 *       do not fight over a small runner's CPUs, then a synchronise: the
 *       GPU idles between its kernels (launch-bound)
 *   limiter_workload hog [--n ELEMS] [--batch B] ...
 *       large element-wise kernels (default 64M elements) back to back,
 *       synchronised every B (default 8): GPU-bound
 *   common: --secs S (measured, default 5)  --warmup W (default 1)
 *           --start-mono NS  wait until CLOCK_MONOTONIC reaches NS first
 *           (tenants started together measure the same wall-clock window)
 *
 * Prints one line: RESULT workload=NAME rate=KERNELS_PER_S kernels=N secs=T
 * calls=C p50_ms=P p99_ms=Q, where a call is one batch up to its
 * synchronise and P, Q are percentiles of its latency (decode: the
 * per-call latency a serving tenant sees).
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static void sleep_us(double us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1e6), .tv_nsec = (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentile q (0..1) of n latencies, sorted in place. */
static double percentile(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* BENCH_READY_DIR (bench/limiter/fair.py, as timing.py): says we are
 * set up (<pid>.ready), then waits for the file `start` and returns the
 * start time it holds; without it, `start_mono` as given. */
static long long ready_then_start(long long start_mono)
{
    const char *dir = getenv("BENCH_READY_DIR");
    if (!dir)
        return start_mono;
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.ready", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/start", dir);
    while (!(f = fopen(path, "r")))
        sleep_us(10000);
    long long v = 0;
    if (fscanf(f, "%lld", &v) != 1)
        v = 0;
    fclose(f);
    return v;
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
                     strcmp(argv[1], "launchcost") && strcmp(argv[1], "decode") &&
                     strcmp(argv[1], "hog"))) {
        fprintf(stderr, "usage: limiter_workload elementwise|launchbound|launchcost|decode|hog "
                        "[--secs S] [--warmup W] [--n ELEMS] [--batch B] [--gap-us G] "
                        "[--start-mono NS]\n");
        return 2;
    }
    const int decode = !strcmp(argv[1], "decode"), hog = !strcmp(argv[1], "hog");
    const int ew = !strcmp(argv[1], "elementwise") || decode || hog;
    double secs = 5, warmup = 1, gap_us = !strcmp(argv[1], "launchbound") ? 100 : decode ? 60 : 0;
    unsigned n = decode ? 256u << 10 : hog ? 64u << 20 : 16u << 20;
    unsigned batch = decode ? 32 : hog ? 8 : ew ? 64 : gap_us > 0 ? 32 : 1000;
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

    start_mono = ready_then_start(start_mono);
    if (start_mono) {
        struct timespec ts = {.tv_sec = (time_t)(start_mono / 1000000000ll),
                              .tv_nsec = (long)(start_mono % 1000000000ll)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    double t0 = now_s(), t_meas = 0;
    unsigned long long counted = 0;
    size_t ncalls = 0, cap = 0;
    double *lat = NULL;
    for (int measuring = 0;;) {
        double call0 = now_s();
        for (unsigned i = 0; i < batch; i++) {
            CK(cu.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, ew ? ew_args : tiny_args,
                               NULL));
            if (gap_us > 0 && decode)
                sleep_us(gap_us);
            else if (gap_us > 0)
                spin_us(gap_us);
        }
        CK(cu.CtxSynchronize());
        double t = now_s();
        if (measuring) {
            if (ncalls == cap) {
                cap = cap ? cap * 2 : 1024;
                double *p = realloc(lat, cap * sizeof *p);
                if (!p)
                    exit(1);
                lat = p;
            }
            lat[ncalls++] = (t - call0) * 1e3;
        }
        if (!measuring && t - t0 >= warmup) {
            measuring = 1;
            t_meas = t;
            continue;
        }
        if (measuring) {
            counted += batch;
            if (t - t_meas >= secs) {
                double p50 = percentile(lat, ncalls, 0.5), p99 = percentile(lat, ncalls, 0.99);
                printf("RESULT workload=%s rate=%.1f kernels=%llu secs=%.3f calls=%zu "
                       "p50_ms=%.3f p99_ms=%.3f\n", argv[1], (double)counted / (t - t_meas),
                       counted, t - t_meas, ncalls, p50, p99);
                free(lat);
                return 0;
            }
        }
    }
}
