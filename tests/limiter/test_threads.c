/*
 * Threads of one process share the tenant's budget, and the limiter's
 * shared state survives ThreadSanitizer: this test links the interposer's
 * sources into the executable itself (no LD_PRELOAD; hook_preload_threads
 * runs the preloaded library under TSan) over the fake driver, then four threads launch
 * to their own streams and the per-thread default stream at a 50 % limit
 * while the watcher thread runs. Together they get 50 % of GPU time.
 * Label "tsan": it runs in the TSan build too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

#include "limiter/lim_test.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

/* The interposer's dlsym.c is left out of this executable (it would
 * interpose the sanitizer runtime's own lookups); these are its doors. */
void *cs__libc_dlsym(void *handle, const char *name);
void *cs__libc_dlvsym(void *handle, const char *name, const char *version);
void *cs__libc_dlsym(void *handle, const char *name)
{
    return dlsym(handle, name);
}
void *cs__libc_dlvsym(void *handle, const char *name, const char *version)
{
    return dlvsym(handle, name, version);
}

#define CK(call) CHECK_EQ((call), CUDA_SUCCESS)

static CUcontext ctx;
static CUfunction fn;
static volatile int stop;
static pid_t tids[4]; /* each launcher's thread id, set before it launches */

static void *launcher(void *arg)
{
    long i = (long)arg;
    __atomic_store_n(&tids[i], gettid(), __ATOMIC_RELEASE);
    CK(cuCtxSetCurrent(ctx));
    CUstream s = NULL;
    if (i % 2 == 0)
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned blocks = i < 2 ? 300 : 800;
    for (long n = 1; !__atomic_load_n(&stop, __ATOMIC_RELAXED); n++) {
        if (i == 3)
            CK(cuLaunchKernel_ptsz(fn, blocks, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
        else
            CK(cuLaunchKernel(fn, blocks, 1, 1, 64, 1, 1, 0, s, NULL, NULL));
        if (n % 4 == 0)
            CK(i == 3 ? cuStreamSynchronize_ptsz(NULL) : cuStreamSynchronize(s));
    }
    return NULL;
}

int main(void)
{
    lim_dir("threads");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    setenv("FAKECUDA_STATE", lim_path("gpu.state"), 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", lim_path("t.ledger"), 1);
    setenv("CUDA_DEVICE_SM_LIMIT", "50", 1);
    setenv("GPU_CORE_UTILIZATION_POLICY", "force", 1);
    setenv("CUSHARE_BOARD", lim_path("board"), 1);
    CUdevice dev;
    CUmodule mod;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, "fake"));
    CK(cuModuleGetFunction(&fn, mod, "k"));
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, launcher, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        CS_WAIT_FOR(__atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) != 0, 10000, "a launcher");
    pid_t me = getpid();
    static struct lim_series s;
    /* The CPU wait of each launcher over the measured windows: the GPU
     * can only idle for want of launches while all four wait. */
    int64_t rq0[4], rq1[4];
    for (int i = 0; i < 4; i++)
        rq0[i] = lim_rq_wait_tid_ns(tids[i]);
    int64_t t0 = cs_now_ns();
    lim_sample(gpu, 0, &me, 1, 3000, 200, 60, &s);
    double span = (double)(cs_now_ns() - t0);
    for (int i = 0; i < 4; i++)
        rq1[i] = lim_rq_wait_tid_ns(tids[i]);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    lim_print_series("4 threads, limit 50%, share per 200 ms", &s, 0);
    double m, sd, starved = 100;
    lim_stats(&s, 0, 600, 3000, &m, &sd);
    for (int i = 0; i < 4; i++) {
        double w = 100.0 * (double)(rq1[i] - rq0[i]) / span;
        starved = w < starved ? w : starved;
    }
    printf("  mean %.1f%%, sd %.1f pts, CPU wait of the least starved launcher %.1f%%\n", m, sd,
           starved);
    /* Measured 49.6-49.8 %. Above: the law lets a tenant run ahead of its
     * share by its idle credit and run-ahead (CS_LAW_CREDIT_NS,
     * CS_LAW_AHEAD_NS: 0.5 points of 2.4 s at 50 %), and the four
     * threads' charges reach the law as the watcher harvests them, so a
     * CPU-starved watcher adds a little: 2 points. Below: 3 points, and
     * the CPU wait of the least starved launcher (while any launcher runs
     * the GPU has work). A launch path the limiter forgot
     * (cuLaunchKernel_ptsz, thread 3's) gives 100 %. Under TSan (gcc's -fsanitize=thread, the
     * tsan build) everything is slower: there the check is on the limit
     * only. */
#if defined(__SANITIZE_THREAD__)
    CHECK(m >= 30 && m <= 52);
#else
    CHECK_SHARE_STARVED(m, 50, 2, 3, starved);
#endif
    return 0;
}
