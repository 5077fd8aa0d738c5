/*
 * TEST of the test tool tests/fakecuda (never shipped): the GPU time model.
 * With FAKECUDA_NS_PER_BLOCK=1000 two launches of 1000 blocks occupy 2 ms of
 * device time, launches are asynchronous, events measure the device time,
 * a second process's work queues behind the first on the one shared device
 * timeline, and NVML's device / per-process utilisation follow the
 * timeline (FAKECUDA_UTIL_WINDOW_MS=100 here).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_bringup.h"
#include "fake_scratch.h"
#include "support/support.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MS 1000000ULL

/* The tests' monotonic clock (tests/support), unsigned as these sums want. */
static uint64_t now_ns(void)
{
    return (uint64_t)cs_now_ns();
}

static void launch(CUfunction f, unsigned blocks, CUstream s)
{
    CHECK_EQ(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "time");
    const char *path = scratch.path;
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_UTIL_WINDOW_MS", "100", 1);
    unsetenv("FAKECUDA_GRAPH_US");
    unsetenv("CUDA_VISIBLE_DEVICES");

    fake_ctx_up();
    struct fakecuda_state *st = fakecuda_state_open(path);
    CHECK(st != NULL);
    struct fakecuda_device *D = &st->dev[0];
    CUfunction f = fake_kernel("spin", NULL);
    CUstream s;
    CUevent e0, e1;
    fake_timed_stream(&s, &e0, &e1);

    /* Malformed launches are refused and take no time. */
    CHECK_EQ(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunchKernel((CUfunction)&st, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ_U(fakecuda_load(&D->busy_ns), 0);

    /* 1. Two launches of 1000 blocks: 2 ms of device time, asynchronous. */
    uint64_t t0 = now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    launch(f, 1000, s);
    launch(f, 1000, s);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    CUresult q = cuStreamQuery(s);
    CUresult eq = cuEventQuery(e1);
    uint64_t t1 = now_ns();
    /* The work ends at >= t0 + 2 ms: anything asked before then is not done
     * (checked unless this thread was descheduled that long). */
    if (t1 - t0 < 2 * MS) {
        CHECK_EQ(q, CUDA_ERROR_NOT_READY);
        CHECK_EQ(eq, CUDA_ERROR_NOT_READY);
    }
    float ms = -1;
    CUresult er = cuEventElapsedTime(&ms, e0, e1);
    if (now_ns() - t0 < 2 * MS)
        CHECK_EQ(er, CUDA_ERROR_NOT_READY);
    CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
    uint64_t t2 = now_ns();
    CHECK_GE(t2 - t0, 2 * MS); /* the synchronisation really waited */
    CHECK_EQ(cuStreamQuery(s), CUDA_SUCCESS);
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    CHECK(ms >= 2.0f - 1e-3f);
    CHECK(ms <= 2.0f + (float)(t1 - t0) / 1e6f + 1e-3f);
    CHECK_EQ_U(fakecuda_load(&D->busy_ns), 2 * MS);
    CHECK_EQ_U(fakecuda_load(&D->launches), 2);
    const struct fakecuda_proc *me = fakecuda_proc_find(st, getpid());
    CHECK(me != NULL);
    CHECK_EQ_U(fakecuda_load(&me->busy_ns[0]), 2 * MS);
    CHECK_EQ(fakecuda_hook_calls(st, FAKECUDA_HOOK_cuLaunchKernel), 5);

    /* 2. Another process's 200 ms of work: ours queues behind it. */
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        char c = 0;
        fake_ctx_up();
        CUfunction g = fake_kernel("spin", NULL);
        launch(g, 200000, NULL);
        CHECK(write(ready[1], &c, 1) == 1);
        CHECK(read(go[0], &c, 1) == 1);
        exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    uint64_t busy_until = fakecuda_load(&D->busy_until_ns);
    uint64_t t3 = now_ns();
    CHECK_GT(busy_until, t3 + 10 * MS); /* still queued when we launch */
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    launch(f, 1000, s);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    uint64_t t4 = now_ns();
    CHECK_EQ_U(fakecuda_load(&D->busy_until_ns), busy_until + 1 * MS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    uint64_t t5 = now_ns();
    CHECK_GE(t5, busy_until + 1 * MS);
    /* Events are operations in the device's single queue: e0 completes
     * after the other process's work, so the pair times our 1 ms kernel,
     * not the wait behind it (as on a GPU that time-slices contexts). */
    (void)t4;
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    CHECK(ms >= 1.0f - 1e-2f);
    CHECK(ms <= 1.0f + 1e-2f);
    const struct fakecuda_proc *other = fakecuda_proc_find(st, child);
    CHECK(other != NULL);
    CHECK_EQ_U(fakecuda_load(&other->busy_ns[0]), 200 * MS);
    CHECK_EQ_U(fakecuda_load(&D->busy_ns), 203 * MS);

    /* 3. NVML: the device was busy for (nearly) the whole last 100 ms. */
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t dev;
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    nvmlUtilization_t u;
    CHECK_EQ(nvmlDeviceGetUtilizationRates(dev, &u), NVML_SUCCESS);
    uint64_t t6 = now_ns();
    /* Busy from busy_until-200ms to busy_until+1ms; window [t6-100ms, t6]. */
    CHECK_LE(u.gpu, 100);
    uint64_t lag = t6 - (busy_until + 1 * MS); /* how late after the work we looked */
    (void)t5;
    if (lag < 20 * MS)
        CHECK_GE(u.gpu, 75);
    unsigned n = 0;
    CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, NULL, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ(n, 2);
    nvmlProcessUtilizationSample_t samples[4];
    n = 4;
    CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, samples, &n, 0), NVML_SUCCESS);
    CHECK_EQ(n, 2);
    for (unsigned i = 0; i < n; i++) {
        if (samples[i].pid == (unsigned)child) {
            if (now_ns() - (busy_until + 1 * MS) < 20 * MS)
                CHECK_GE(samples[i].smUtil, 75);
        } else {
            CHECK_EQ(samples[i].pid, getpid());
            CHECK_LE(samples[i].smUtil, 3); /* 1 ms of the last 100 */
        }
    }
    CHECK(write(go[1], &c, 1) == 1);
    CHECK_EQ(waitpid(child, NULL, 0), child);

    /* Idle for longer than the window: 0 %. */
    usleep(150 * 1000);
    CHECK_EQ(nvmlDeviceGetUtilizationRates(dev, &u), NVML_SUCCESS);
    CHECK_EQ(u.gpu, 0);

    /* 4. A graph launch is one FAKECUDA_GRAPH_US (100 us) block of time;
     * cuCtxSynchronize waits for it. */
    CUgraph graph;
    CUgraphExec exec;
    CHECK_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
    uint64_t busy0 = fakecuda_load(&D->busy_ns);
    CHECK_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
    uint64_t graph_end = fakecuda_load(&D->busy_until_ns);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_GE(now_ns(), graph_end);
    CHECK_EQ(cuStreamQuery(s), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&D->busy_ns) - busy0, 100 * 1000);
    CHECK_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);

    /* Per-thread default stream and the legacy stream are valid streams. */
    CHECK_EQ(cuLaunchKernel(f, 10, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel(f, 10, 1, 1, 1, 1, 1, 0, CU_STREAM_LEGACY, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    CHECK_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    CHECK_EQ(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);

    fakecuda_state_close(st);
    fake_scratch_close(&scratch);
    printf("time model: queued behind %.1f ms of another process\n", ms);
    return 0;
}
