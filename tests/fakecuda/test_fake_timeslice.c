/*
 * TEST of the test tool tests/fakecuda (never shipped): the time-slicing
 * device (FAKECUDA_TIMESLICE_US=2000, FAKECUDA_CTX_SWITCH_US=100,
 * fake_slice.c). Beside another process's 200 ms kernel, our work does
 * not queue behind it: it gets the device when the other's time slice
 * ends, so a 1 ms kernel completes within a few ms and the other's kernel
 * completes that much later (completion depends on what was submitted
 * after it). An event pair around our kernel starts when our context gets
 * the device; around a kernel longer than a slice it spans the other's
 * slices in between, as on a GPU that time-slices contexts.
 */
#define _GNU_SOURCE
#include <cuda.h>
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

#define MS 1000000ULL
#define US 1000ULL

/* The tests' monotonic clock (tests/support), unsigned as these sums want. */
static uint64_t now_ns(void)
{
    return (uint64_t)cs_now_ns();
}

static void launch(CUfunction f, unsigned blocks, CUstream s)
{
    CHECK_EQ(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
}

/* Our kernel of `blocks` between two events beside the other's long
 * kernel: its elapsed time (ms) and how long after the launch the stream
 * synchronised. */
static float timed(CUfunction f, unsigned blocks, CUstream s, uint64_t *waited)
{
    CUevent e0, e1;
    float ms = -1;
    CHECK_EQ(cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    uint64_t t0 = now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    launch(f, blocks, s);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventQuery(e1), CUDA_ERROR_NOT_READY); /* no time is known at submit */
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    *waited = now_ns() - t0;
    CHECK_EQ(cuEventQuery(e1), CUDA_SUCCESS);
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    return ms;
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "slice");
    const char *path = scratch.path;
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_TIMESLICE_US", "2000", 1);
    setenv("FAKECUDA_CTX_SWITCH_US", "100", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("FAKECUDA_EVENT_TIMESLICE");

    struct fakecuda_state *st = fakecuda_state_open(path);
    CHECK(st != NULL);
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) { /* the other tenant: one 200 ms kernel */
        char c = 0;
        fake_ctx_up();
        CUfunction g = fake_kernel("spin", NULL);
        launch(g, 200000, NULL);
        CHECK(write(ready[1], &c, 1) == 1);
        CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
        CHECK(read(go[0], &c, 1) == 1);
        exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1);
    fake_ctx_up();
    CUfunction f = fake_kernel("spin", NULL);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

    /* A 1 ms kernel waits at most the rest of the other's slice and a
     * switch (FIFO: the whole 200 ms kernel); its pair times it alone. */
    uint64_t waited;
    float ms = timed(f, 1000, s, &waited);
    printf("1 ms kernel beside a 200 ms one: %.3f ms between its events, synced after %.1f ms\n",
           ms, (double)waited / 1e6);
    CHECK(ms >= 1.0f - 1e-3f && ms <= 1.0f + 1e-3f);
    CHECK_LT(waited, 100 * MS);

    /* A 5 ms kernel is cut by slice ends: 2 + 2 + 1 ms of ours with two of
     * the other's 2 ms slices between and four switches inside the pair. */
    ms = timed(f, 5000, s, &waited);
    printf("5 ms kernel beside it: %.3f ms between its events\n", ms);
    CHECK(ms >= 9.4f - 1e-3f && ms <= 9.4f + 1e-3f);

    /* The other kernel completed later by our 6 ms and the switches: its
     * busy time is still exactly its 200 ms, in pieces around ours. */
    CHECK(write(go[1], &c, 1) == 1);
    int status = 0;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const struct fakecuda_proc *me = fakecuda_proc_find(st, getpid());
    CHECK(me != NULL);
    CHECK_EQ_U(fakecuda_load(&me->busy_ns[0]), 6 * MS);
    CHECK_EQ_U(fakecuda_load(&st->dev[0].busy_ns), 206 * MS);
    uint64_t other = fakecuda_busy_in_window(st, 0, child, 0, UINT64_MAX);
    CHECK_EQ_U(other, 200 * MS);
    fakecuda_state_close(st);
    fake_scratch_close(&scratch);
    printf("ok\n");
    return 0;
}
