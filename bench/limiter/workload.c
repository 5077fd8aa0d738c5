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
 *           --serve  stay up and measure one window per request on stdin,
 *           as bench/limiter/timing.py's serve (fair.py's warm tenants):
 *           READY, then per line "go START_NS WARMUP SECS [gpu]" a RESULT
 *           line; "quit" or the end of stdin ends it
 *
 * Prints one line: RESULT workload=NAME rate=KERNELS_PER_S kernels=N secs=T
 * calls=C p50_ms=P p99_ms=Q, where a call is one batch up to its
 * synchronise and P, Q are percentiles of its latency (decode: the
 * per-call latency a serving tenant sees). With `gpu` in a served request
 * it adds kernel_ms=K: the wall time of one kernel run back to back, the
 * least of five batches (alone, that is its GPU time).
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

static void spin_us(double us)
{
    double end = now_s() + us * 1e-6;
    while (now_s() < end) {
    }
}

/* What one window runs: `batch` launches of `f` (with `gap_us` of CPU
 * time after each, slept for the decode stand-in, spun otherwise), then a
 * synchronise. */
struct job {
    const char *name;
    CUfunction f;
    unsigned grid, block, batch;
    void **args;
    double gap_us;
    int sleep_gaps;
};

static void one_call(const struct job *j)
{
    for (unsigned i = 0; i < j->batch; i++) {
        CK(cu.LaunchKernel(j->f, j->grid, 1, 1, j->block, 1, 1, 0, NULL, j->args, NULL));
        if (j->gap_us > 0 && j->sleep_gaps)
            sleep_us(j->gap_us);
        else if (j->gap_us > 0)
            spin_us(j->gap_us);
    }
    CK(cu.CtxSynchronize());
}

/* Wall milliseconds of one kernel run back to back: the least of five
 * batches (a batch someone else's work delayed only takes longer). */
static double kernel_ms(const struct job *j)
{
    struct job back_to_back = *j;
    back_to_back.gap_us = 0;
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        one_call(&back_to_back);
        double ms = (now_s() - t0) * 1e3 / j->batch;
        best = ms < best ? ms : best;
    }
    return best;
}

static int append(double **v, size_t *n, size_t *cap, double x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        double *p = realloc(*v, c * sizeof *p);
        if (!p)
            return -1;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* One measurement: waits for `start_mono` (0: now), runs calls for
 * `warmup` s, then counts them over `secs` s, and prints the RESULT line
 * (with kernel_ms when `gpu`). */
static int run_window(const struct job *j, long long start_mono, double warmup, double secs,
                      int gpu)
{
    if (start_mono > 0) {
        struct timespec ts = {.tv_sec = (time_t)(start_mono / 1000000000ll),
                              .tv_nsec = (long)(start_mono % 1000000000ll)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    double t0 = now_s(), t_meas = 0, t;
    unsigned long long counted = 0;
    size_t ncalls = 0, cap = 0;
    double *lat = NULL;
    for (int measuring = 0;;) {
        double call0 = now_s();
        one_call(j);
        t = now_s();
        if (!measuring && t - t0 >= warmup) {
            measuring = 1;
            t_meas = t;
            continue;
        }
        if (measuring) {
            if (append(&lat, &ncalls, &cap, (t - call0) * 1e3)) {
                fprintf(stderr, "limiter_workload: out of memory\n");
                free(lat);
                return 1;
            }
            counted += j->batch;
            if (t - t_meas >= secs)
                break;
        }
    }
    double p50 = percentile(lat, ncalls, 0.5), p99 = percentile(lat, ncalls, 0.99);
    printf("RESULT workload=%s rate=%.1f kernels=%llu secs=%.3f calls=%zu p50_ms=%.3f "
           "p99_ms=%.3f from=%.6f to=%.6f",
           j->name, (double)counted / (t - t_meas), counted, t - t_meas, ncalls, p50, p99,
           t_meas, t);
    if (gpu)
        printf(" kernel_ms=%.4f", kernel_ms(j));
    printf("\n");
    fflush(stdout);
    free(lat);
    return 0;
}

/* --serve: READY, then one window per "go START_NS WARMUP SECS [gpu]"
 * line on stdin until "quit" or its end; a line it cannot read gets an
 * ERROR line and is otherwise ignored. */
static int serve(const struct job *j)
{
    char line[256];
    printf("READY\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        long long start;
        double warmup, secs;
        char flag[16] = "";
        if (!strncmp(line, "quit", 4))
            return 0;
        int n = sscanf(line, "go %lld %lf %lf %15s", &start, &warmup, &secs, flag);
        if (n < 3 || warmup < 0 || secs <= 0) {
            line[strcspn(line, "\n")] = 0;
            printf("ERROR expected 'go START_NS WARMUP SECS [gpu]', got '%s'\n", line);
            fflush(stdout);
            continue;
        }
        if (run_window(j, start, warmup, secs, n == 4 && !strcmp(flag, "gpu")))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "elementwise") && strcmp(argv[1], "launchbound") &&
                     strcmp(argv[1], "launchcost") && strcmp(argv[1], "decode") &&
                     strcmp(argv[1], "hog"))) {
        fprintf(stderr, "usage: limiter_workload elementwise|launchbound|launchcost|decode|hog "
                        "[--secs S] [--warmup W] [--n ELEMS] [--batch B] [--gap-us G] "
                        "[--start-mono NS] [--serve]\n");
        return 2;
    }
    const int decode = !strcmp(argv[1], "decode"), hog = !strcmp(argv[1], "hog");
    const int ew = !strcmp(argv[1], "elementwise") || decode || hog;
    double secs = 5, warmup = 1, gap_us = !strcmp(argv[1], "launchbound") ? 100 : decode ? 60 : 0;
    unsigned n = decode ? 256u << 10 : hog ? 64u << 20 : 16u << 20;
    unsigned batch = decode ? 32 : hog ? 8 : ew ? 64 : gap_us > 0 ? 32 : 1000;
    long long start_mono = 0;
    int serving = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--serve")) {
            serving = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "limiter_workload: %s needs a value\n", argv[i]);
            return 2;
        }
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
        i++;
    }
    if (!batch) {
        fprintf(stderr, "limiter_workload: --batch must be at least 1\n");
        return 2;
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
    const struct job j = {.name = argv[1], .f = f, .grid = ew ? (n + 255) / 256 : 1,
                          .block = ew ? 256 : 32, .batch = batch,
                          .args = ew ? ew_args : tiny_args, .gap_us = gap_us,
                          .sleep_gaps = decode};
    return serving ? serve(&j) : run_window(&j, start_mono, warmup, secs, 0);
}
