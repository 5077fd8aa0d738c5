/*
 * Per-call cost of an empty kernel launch and of a 1 MiB cuMemAlloc+free,
 * measured in one process. Run natively and under cushare by
 * bench/overhead/run.sh, alternating, so both see the same GPU state.
 * Prints one JSON object per line: {"what":..., "ns_per_call":...}.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty_kernel()\n{\n\tret;\n}\n";

#define CK(call)                                                            \
    do {                                                                    \
        CUresult r_ = (call);                                               \
        if (r_ != CUDA_SUCCESS) {                                           \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__,   \
                    #call, (int)r_);                                        \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int launches = argc > 1 ? atoi(argv[1]) : 100000;
    int allocs = argc > 2 ? atoi(argv[2]) : 5000;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    const char *label = argc > 4 ? argv[4] : "native";
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, ptx));
    CK(cuModuleGetFunction(&fn, mod, "empty_kernel"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    double launch_ns[64], alloc_ns[64];
    if (rounds > 64)
        rounds = 64;
    for (int i = 0; i < 2000; i++)
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CK(cuStreamSynchronize(s));
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (int i = 0; i < launches; i++)
            CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        double t1 = now_ns();
        CK(cuStreamSynchronize(s));
        launch_ns[r] = (t1 - t0) / launches;

        CUdeviceptr p;
        t0 = now_ns();
        for (int i = 0; i < allocs; i++) {
            CK(cuMemAlloc(&p, 1 << 20));
            CK(cuMemFree(p));
        }
        alloc_ns[r] = (now_ns() - t0) / allocs;
    }
    qsort(launch_ns, rounds, sizeof(double), cmp_double);
    qsort(alloc_ns, rounds, sizeof(double), cmp_double);
    printf("{\"mode\":\"%s\",\"what\":\"launch\",\"ns_per_call\":%.1f}\n", label, launch_ns[rounds / 2]);
    printf("{\"mode\":\"%s\",\"what\":\"alloc_free_1MiB\",\"ns_per_call\":%.1f}\n", label, alloc_ns[rounds / 2]);
    return 0;
}
