/*
 * A tenant process for the parking tests (tests/park/test_park.c), run
 * under the preloaded libcushare.so over tests/fakecuda. It reads one
 * command per line on stdin and answers one line on stdout:
 *   a MIB   allocate MIB MiB (cuMemAlloc)        -> "ok RESULT"
 *   c       one copy into its memory (a GATE call) -> "ok RESULT"
 *   i       an IPC handle of its first allocation  -> "ok RESULT"
 *   w       a memset of its first MiB, then a synchronize (long with a
 *           large FAKECUDA_MEMSET_NS_PER_MIB)      -> "ok RESULT"
 *   q       exit 0
 * It starts with cuInit and a context and says "ready PID".
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx)) {
        printf("error init\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    CUdeviceptr first = 0;
    char line[128];
    static char host[4096];
    while (fgets(line, sizeof line, stdin)) {
        CUresult r = CUDA_SUCCESS;
        if (line[0] == 'a') {
            CUdeviceptr p;
            r = cuMemAlloc(&p, (size_t)strtoull(line + 2, NULL, 10) << 20);
            if (r == CUDA_SUCCESS && !first)
                first = p;
        } else if (line[0] == 'c') {
            r = first ? cuMemcpyHtoD(first, host, sizeof host) : CUDA_ERROR_INVALID_VALUE;
        } else if (line[0] == 'i') {
            CUipcMemHandle h;
            r = cuIpcGetMemHandle(&h, first);
        } else if (line[0] == 'w') {
            r = cuMemsetD8Async(first, 0, 1 << 20, NULL);
            if (r == CUDA_SUCCESS)
                r = cuStreamSynchronize(NULL);
        } else if (line[0] == 'q') {
            return 0;
        }
        printf("ok %d\n", (int)r);
    }
    return 0;
}
