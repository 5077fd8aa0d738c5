/*
 * The preload path under the sanitizers. A
 * multi-threaded CUDA program runs with libcushare.so preloaded over the
 * fake driver: eight threads, released together by a barrier, race
 * through lazy initialisation (cuInit), dlsym lookups of driver symbols,
 * context retains, allocations against the budget (plain and stream
 * ordered) and launches at an SM limit, while the limiter's watcher
 * thread runs; then the process exits through the library's exit
 * handlers. In the TSan build (label tsan) the library and this program
 * are instrumented and TSan's report of any race fails the test (exit 66);
 * in the ASan/UBSan build (label sanitize) a memory error does.
 *
 * How a sanitizer build of the library is preloaded (docs/testing.md):
 *   - TSan, into a program built with -fsanitize=thread:
 *     LD_PRELOAD=libcushare.so alone, as `cushare run` does
 *     (hook_preload_threads);
 *   - TSan, into a program built without it: the runtime first,
 *     LD_PRELOAD="libtsan.so.2 libcushare.so" (hook_preload_threads_plain);
 *   - ASan: the runtime first in every case (it checks that it is).
 * The runtime calls our dlsym from its own initialiser, before it can run
 * instrumented code; so that path is built uninstrumented and calls
 * nothing a sanitizer intercepts (src/hook/elf.h). Before, the preloaded
 * TSan library crashed inside TSan's start-up, so the preload path never
 * ran under TSan.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define THREADS 8
#define ROUNDS 50
#define MiB (1024ull * 1024ull)
#define CK(call) CHECK_EQ((call), CUDA_SUCCESS)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

static pthread_barrier_t start;

/* Each thread loads its own module: a thread that finishes early releases
 * the primary context, and when it was the last holder the context goes
 * with every module loaded in it, so a function shared between threads
 * would be a dead handle for one that retains the context afresh. */
static CUfunction load_kernel(CUmodule *mod)
{
    CUfunction k;
    CK(cuModuleLoadData(mod, "fake"));
    CK(cuModuleGetFunction(&k, *mod, "k"));
    return k;
}

static void *worker(void *arg)
{
    long i = (long)arg;
    pthread_barrier_wait(&start);
    CK(cuInit(0));
    alloc_fn alloc = (alloc_fn)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    CHECK(alloc != NULL);
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CUfunction fn = load_kernel(&mod);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int r = 0; r < ROUNDS; r++) {
        CUdeviceptr p = 0, q = 0;
        CK(alloc(&p, (size_t)(1 + (i + r) % 4) * MiB));
        CK(cuMemAllocAsync(&q, MiB, s));
        CK(cuLaunchKernel(fn, 64, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
        CK(cuMemFreeAsync(q, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemFree_v2(p));
    }
    /* Over the 256 MiB budget whatever the others hold: refused. (At most
     * 8 x 4 MiB plus the pool's 32 MiB chunks are held: far below it.) */
    CUdeviceptr big;
    CHECK_EQ(alloc(&big, 257 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuStreamDestroy_v2(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease_v2(dev));
    return NULL;
}

int main(void)
{
    CHECK(getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libcushare"));
    /* A fresh ledger and simulated device for every run. */
    unlink(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(getenv("FAKECUDA_STATE"));
    /* In a sanitizer build its runtime must be there, not silently absent. */
    if (getenv("CS_EXPECT_RUNTIME"))
        CHECK(dlsym(RTLD_DEFAULT, getenv("CS_EXPECT_RUNTIME")) != NULL);
    CHECK_EQ(pthread_barrier_init(&start, NULL, THREADS), 0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
    void (*stats)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cushare_limiter_stats");
    CHECK(stats != NULL); /* the library is the one preloaded */
    printf("%d threads x %d rounds of alloc/launch/free under the preloaded library\n", THREADS,
           ROUNDS);
    return 0;
}
