/*
 * ctx_hold SECONDS [ALLOC_MIB]: a tiny driver-API tenant for the context
 * budget acceptance (tests/gpu/capture_contexts/steps.py ctx_budget3 / ctx_kill24).
 * cuInit, cuDevicePrimaryCtxRetain + cuCtxSetCurrent on device 0, then
 * (ALLOC_MIB > 0) cuMemAlloc + cuMemsetD8 of that much; prints the result
 * code name of every call, READY once everything succeeded, holds for
 * SECONDS (or until a signal), releases and exits.
 *
 * One line per event, flushed, so a script can poll the output:
 *   ctx_hold pid=P cuInit=CUDA_SUCCESS retain=CUDA_SUCCESS alloc=CUDA_SUCCESS
 *   READY pid=P            (admitted: holding)
 *   REFUSED pid=P at=retain code=CUDA_ERROR_OUT_OF_MEMORY
 * Exit status: 0 admitted, 3 refused with CUDA_ERROR_OUT_OF_MEMORY, 1 other.
 *
 * Build: gcc -O2 -I$CUDA_HOME/include ctx_hold.c -o ctx_hold -L$CUDA_HOME/lib64/stubs -lcuda
 * (linked directly, so under cushare the calls go through its relocation
 * hooks; at run time libcuda.so.1 is the driver's, or tests/fakecuda's).
 */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static const char *name(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN_CODE";
    return s;
}

/* Prints the line of results so far; a failure ends the program. */
static void step(CUresult r, const char *what, char *line, size_t len)
{
    size_t used = strlen(line);
    snprintf(line + used, len - used, " %s=%s", what, name(r));
    if (r == CUDA_SUCCESS)
        return;
    printf("%s\nREFUSED pid=%d at=%s code=%s\n", line, (int)getpid(), what, name(r));
    exit(r == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ctx_hold SECONDS [ALLOC_MIB]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double secs = atof(argv[1]);
    size_t bytes = (size_t)(argc > 2 ? strtoull(argv[2], NULL, 10) : 0) << 20;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char line[512];
    snprintf(line, sizeof line, "ctx_hold pid=%d", (int)getpid());
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    step(cuInit(0), "cuInit", line, sizeof line);
    step(cuDeviceGet(&dev, 0), "deviceGet", line, sizeof line);
    step(cuDevicePrimaryCtxRetain(&ctx, dev), "retain", line, sizeof line);
    step(cuCtxSetCurrent(ctx), "setCurrent", line, sizeof line);
    if (bytes) {
        step(cuMemAlloc(&p, bytes), "alloc", line, sizeof line);
        step(cuMemsetD8(p, 1, bytes), "memset", line, sizeof line);
        step(cuCtxSynchronize(), "sync", line, sizeof line);
    }
    printf("%s\nREADY pid=%d\n", line, (int)getpid());

    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        usleep(20000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (!stop && (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);

    if (p)
        cuMemFree(p);
    cuDevicePrimaryCtxRelease(dev);
    printf("DONE pid=%d\n", (int)getpid());
    return 0;
}
