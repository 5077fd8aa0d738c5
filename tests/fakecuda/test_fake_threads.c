/*
 * TEST of the test tool tests/fakecuda (never shipped): the fake driver is
 * callable from many threads at once: allocations, launches on per-thread
 * and created streams, events and context push/pop from 4 threads leave
 * exact totals in the shared counters.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "fake_bringup.h"
#include "fakecuda/fakecuda_state.h"

#define THREADS 4
#define ROUNDS 200
#define MiB (1024ULL * 1024ULL)

static CUcontext g_ctx;
static CUfunction g_fn;

static void *worker(void *arg)
{
    long id = (long)arg;
    CHECK_EQ(cuCtxPushCurrent(g_ctx), CUDA_SUCCESS);
    CUstream s;
    CUevent e;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    for (int i = 0; i < ROUNDS; i++) {
        CUdeviceptr p;
        CHECK_EQ(cuMemAlloc(&p, MiB), CUDA_SUCCESS);
        CUstream on = (i + id) % 2 ? s : CU_STREAM_PER_THREAD;
        CHECK_EQ(cuLaunchKernel(g_fn, 2, 1, 1, 32, 1, 1, 0, on, NULL, NULL), CUDA_SUCCESS);
        CHECK_EQ(cuEventRecord(e, on), CUDA_SUCCESS);
        CUresult q = cuEventQuery(e);
        CHECK(q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY);
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    }
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy(e), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    CUcontext popped;
    CHECK_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
    CHECK(popped == g_ctx);
    return NULL;
}

int main(void)
{
    unsetenv("FAKECUDA_STATE"); /* anonymous state: private to this test */
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_CTX_BYTES", "0", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    g_ctx = fake_ctx_up();
    CUmodule m;
    g_fn = fake_kernel("k", &m);
    struct fakecuda_state *s = fakecuda_driver_state();
    CHECK(s != NULL);

    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);

    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&s->dev[0].used), 0);
    CHECK_EQ_U(fakecuda_load(&s->dev[0].allocs), THREADS * ROUNDS);
    CHECK_EQ_U(fakecuda_load(&s->dev[0].frees), THREADS * ROUNDS);
    CHECK_EQ_U(fakecuda_load(&s->dev[0].launches), THREADS * ROUNDS);
    CHECK_EQ_U(fakecuda_load(&s->dev[0].busy_ns), THREADS * ROUNDS * 2 * 1000);
    CHECK_LE_U(fakecuda_load(&s->dev[0].peak_used), THREADS * MiB);
    CHECK_EQ(fakecuda_hook_calls(s, FAKECUDA_HOOK_cuMemAlloc_v2), THREADS * ROUNDS);
    CHECK_EQ(fakecuda_calls(s, FAKECUDA_CALL_cuEventRecord), THREADS * ROUNDS);
    CHECK_EQ(cuModuleUnload(m), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    printf("threads: ok\n");
    return 0;
}
