/*
 * The demo's CUDA program: shows the memory view it gets, then either
 * holds some memory for a while or allocates until the budget refuses.
 *   slice_demo view
 *   slice_demo hold MIB SECONDS
 *   slice_demo fill [CHUNK_MIB]
 * Plain driver API; no knowledge of cushare.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)

static int check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "slice_demo: %s: %s\n", what, name);
        exit(1);
    }
    return 0;
}

static void show_view(const char *who)
{
    size_t free_b, total_b;
    char name[128] = "";
    CUdevice dev;
    check(cuCtxGetDevice(&dev), "cuCtxGetDevice");
    cuDeviceGetName(name, sizeof name, dev);
    check(cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
    printf("[%s pid %d] device \"%s\": cuMemGetInfo says total %.0f MiB, free %.0f MiB\n", who,
           (int)getpid(), name, total_b / MiB, free_b / MiB);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "view";
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    show_view(mode);
    if (!strcmp(mode, "hold") && argc > 3) {
        CUdeviceptr p;
        size_t bytes = (size_t)atol(argv[2]) << 20;
        check(cuMemAlloc(&p, bytes), "cuMemAlloc");
        printf("[hold pid %d] holding %zu MiB for %s s\n", (int)getpid(), bytes >> 20, argv[3]);
        fflush(stdout);
        sleep((unsigned)atoi(argv[3]));
        check(cuMemFree(p), "cuMemFree");
    } else if (!strcmp(mode, "fill")) {
        size_t chunk = (size_t)(argc > 2 ? atol(argv[2]) : 128) << 20;
        CUdeviceptr ptrs[4096];
        int n = 0;
        CUresult r = CUDA_SUCCESS;
        while (n < 4096 && (r = cuMemAlloc(&ptrs[n], chunk)) == CUDA_SUCCESS)
            n++;
        const char *name = "?";
        cuGetErrorName(r, &name);
        printf("[fill pid %d] allocated %d x %zu MiB = %zu MiB, then %s\n", (int)getpid(), n,
               chunk >> 20, (size_t)n * (chunk >> 20), name);
        show_view("fill");
        while (n > 0)
            cuMemFree(ptrs[--n]);
        if (r != CUDA_ERROR_OUT_OF_MEMORY)
            return 1;
    }
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}
