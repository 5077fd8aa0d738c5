/*
 * A malformed limit fails CUDA initialisation (fail closed) with one clear
 * message naming the variable and the fix; the program itself goes on.
 */
#include "mem_test.h"

int main(void)
{
    int err[2];
    CHECK_EQ(pipe(err), 0);
    int saved = dup(2);
    dup2(err[1], 2);
    CUresult r = cuInit(0);
    CUresult r2 = cuInit(0);
    fflush(stderr);
    dup2(saved, 2);
    close(err[1]);
    char buf[4096] = "";
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    CHECK_GT(n, 0);
    CHECK_EQ(r, CUDA_ERROR_NOT_INITIALIZED);
    CHECK_EQ(r2, CUDA_ERROR_NOT_INITIALIZED);
    CHECK_CONTAINS(buf, "CUDA_DEVICE_MEMORY_LIMIT='4x'");
    CHECK_CONTAINS(buf, "k/m/g");
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    printf("bad configuration refused: %s", buf);
    return 0;
}
