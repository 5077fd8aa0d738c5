/*
 * The same wrapper is reached through every entry path,
 * unknown names pass through unchanged, fork and exec children are
 * interposed. Runs with libcushare.so preloaded over tests/fakecuda, with a
 * 1 MiB budget so "the wrapper was reached" is observable as behaviour: a
 * 2 MiB allocation the fake driver would grant is refused.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

#define MiB (1024u * 1024u)

static const char *object_of(const void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "(none)";
    return info.dli_fname;
}

static void check_is_wrapper(const void *p, const char *how)
{
    if (!strstr(object_of(p), "libcushare")) {
        fprintf(stderr, "%s: %p resolves into %s, not libcushare\n", how, p, object_of(p));
        exit(1);
    }
}

/* Reaching the wrapper must mean the budget applies. */
static void check_enforced(alloc_fn fn, const char *how)
{
    CUdeviceptr p = 0;
    CUresult r = fn(&p, 2 * MiB);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
        fprintf(stderr, "%s: 2 MiB over a 1 MiB budget returned %d, not OOM\n", how, (int)r);
        exit(1);
    }
    CHECK_EQ(fn(&p, 512 * 1024), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

static void init_context(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

static void check_direct_and_dlsym(void)
{
    check_is_wrapper((void *)&cuMemAlloc_v2, "direct call");
    check_enforced(cuMemAlloc_v2, "direct call");

    void *p = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    check_is_wrapper(p, "dlsym(RTLD_DEFAULT)");
    check_enforced((alloc_fn)p, "dlsym(RTLD_DEFAULT)");

    p = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    check_is_wrapper(p, "dlsym(RTLD_NEXT)");

    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL);
    p = dlsym(h, "cuMemAlloc_v2");
    check_is_wrapper(p, "dlopen+dlsym");
    check_enforced((alloc_fn)p, "dlopen+dlsym");

    /* An unhooked name on the same handle is the driver's own function. */
    void *name_fn = dlsym(h, "cuDeviceGetName");
    CHECK(name_fn != NULL);
    CHECK_CONTAINS(object_of(name_fn), "fakecuda");
}

static void check_proc_address(void)
{
    CUdriverProcAddressQueryResult st;
    void *p = NULL;
    int versions[] = {12000, 12080, 13000};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        p = NULL;
        CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &p, versions[i], 0, &st), CUDA_SUCCESS);
        CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
        check_is_wrapper(p, "cuGetProcAddress_v2(cuMemAlloc)");
        CHECK(p == (void *)&cuMemAlloc_v2);
        check_enforced((alloc_fn)p, "cuGetProcAddress_v2");
    }
    /* The legacy 4-argument export (CUDA 11.3 ABI). */
    p = NULL;
    CHECK_EQ(cuGetProcAddress("cuMemAlloc", &p, 11030, 0), CUDA_SUCCESS);
    CHECK(p == (void *)&cuMemAlloc_v2);

    /* Per-thread default stream variants. */
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuLaunchKernel", &p, 13000,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(p == (void *)&cuLaunchKernel_ptsz);
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                 &st),
             CUDA_SUCCESS);
    CHECK(p == (void *)&cuLaunchKernel);
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &p, 12000,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(p == (void *)&cuMemAllocAsync_ptsz);

    /* Each ABI version of a function gets its own wrapper: CUDA 13's
     * cuCtxSynchronize takes the context to wait for. */
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuCtxSynchronize", &p, 12080, 0, &st), CUDA_SUCCESS);
    CHECK(p == (void *)&cuCtxSynchronize);
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuCtxSynchronize", &p, 13000, 0, &st), CUDA_SUCCESS);
    CHECK(p == (void *)&cuCtxSynchronize_v2);
    CUcontext cur = NULL;
    CHECK_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK_EQ(((CUresult(*)(CUcontext))p)(cur), CUDA_SUCCESS);

    /* The resolver itself resolves to our resolver. */
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuGetProcAddress", &p, 13000, 0, &st), CUDA_SUCCESS);
    check_is_wrapper(p, "cuGetProcAddress(cuGetProcAddress)");

    /* Unknown, unhooked and too-new names: exactly the driver's answer. */
    p = (void *)1;
    st = 99;
    CUresult r = cuGetProcAddress_v2("cuNoSuchFunction", &p, 13000, 0, &st);
    CHECK_EQ(r, CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    p = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuDeviceGetName", &p, 13000, 0, &st), CUDA_SUCCESS);
    CHECK_CONTAINS(object_of(p), "fakecuda");
    st = 99;
    r = cuGetProcAddress_v2("cuLaunchKernelEx", &p, 11000, 0, &st);
    CHECK_EQ(r, CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

static int child_checks(void)
{
    init_context();
    check_is_wrapper(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), "child dlsym");
    check_enforced(cuMemAlloc_v2, "child direct call");
    return 0;
}

static void check_fork_and_exec(const char *self)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* CUDA state does not survive fork (the driver wants cuInit again);
         * the child re-initialises through the wrapper, claims its own
         * ledger slot and is limited by the tenant's budget. */
        init_context();
        check_enforced(cuMemAlloc_v2, "forked child");
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);

    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(self, self, "exec-child", (char *)NULL);
        _exit(127);
    }
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "exec-child"))
        return child_checks();
    init_context();
    check_direct_and_dlsym();
    check_proc_address();
    check_fork_and_exec(argv[0]);
    printf("hook paths: all entry paths reach the wrapper\n");
    return 0;
}
