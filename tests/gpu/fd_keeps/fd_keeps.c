/*
 * An exported POSIX fd keeps its memory charged (docs/security.md,
 * "Charges follow physical memory"), on the real driver: under the
 * preloaded library, create 512 MiB with the POSIX-fd handle type, export
 * it, release it and keep the fd, until the budget refuses. The number of
 * rounds admitted must be what the budget's free bytes allow (each kept fd
 * still charged); closing every fd gives it all back, and a create
 * succeeds again. Prints one SUMMARY line; exit 0 on PASS.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define ROUNDS_MAX 16

static CUresult create_export_release(size_t bytes, int *fd)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, bytes, &p, 0);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cuMemRelease(h);
    return r;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    size_t free0, free1, total;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuMemGetInfo(&free0, &total)) {
        printf("SUMMARY fd_keeps: FAIL (no CUDA context)\n");
        return 1;
    }
    size_t size = 512 * MiB;
    int fds[ROUNDS_MAX], rounds = 0;
    CUresult last = CUDA_SUCCESS;
    while (rounds < ROUNDS_MAX && (last = create_export_release(size, &fds[rounds])) == CUDA_SUCCESS)
        rounds++;
    int expected = (int)(free0 / size);
    printf("budget %zu MiB, free before %zu MiB: %d rounds of 512 MiB admitted (expected %d), "
           "then %d\n", total / MiB, free0 / MiB, rounds, expected, (int)last);
    for (int i = 0; i < rounds; i++)
        close(fds[i]);
    cuMemGetInfo(&free1, &total);
    int fd;
    CUresult again = create_export_release(size, &fd);
    if (again == CUDA_SUCCESS)
        close(fd);
    printf("fds closed: free %zu MiB; a new create: %d\n", free1 / MiB, (int)again);
    int pass = rounds == expected && rounds < ROUNDS_MAX && last == CUDA_ERROR_OUT_OF_MEMORY &&
               free1 == free0 && again == CUDA_SUCCESS;
    printf("SUMMARY fd_keeps: %s rounds=%d expected=%d free_before=%zu free_after=%zu\n",
           pass ? "PASS" : "FAIL", rounds, expected, free0 / MiB, free1 / MiB);
    return pass ? 0 : 1;
}
