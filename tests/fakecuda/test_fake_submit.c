/*
 * TEST of the test tool tests/fakecuda (never shipped): the submission
 * latency (FAKECUDA_SUBMIT_US=20000 here). Work reaches the device 20 ms
 * after it is submitted: an event recorded on an idle device completes no
 * earlier than that, and a kernel behind it starts no earlier either.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>

#include "check.h"
#include "fake_bringup.h"
#include "fake_scratch.h"
#include "support/support.h"

#define MS 1000000ll

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "submit");
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_SUBMIT_US", "20000", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    fake_ctx_up();
    CUfunction f = fake_kernel("spin", NULL);
    CUstream s;
    CUevent e0, e1;
    fake_timed_stream(&s, &e0, &e1);

    /* An event on an idle device: not complete right after the record. */
    int64_t t0 = cs_now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    CUresult q = cuEventQuery(e0);
    if (cs_now_ns() - t0 < 20 * MS) /* unless this thread was descheduled that long */
        CHECK_EQ(q, CUDA_ERROR_NOT_READY);
    CHECK_EQ(cuEventSynchronize(e0), CUDA_SUCCESS);
    CHECK_GE(cs_now_ns() - t0, 20 * MS);

    /* A 1 ms kernel between two events: the pair measures the kernel only,
     * and it ends no earlier than 21 ms after its launch. */
    int64_t t1 = cs_now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel(f, 1000, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
    CHECK_GE(cs_now_ns() - t1, 21 * MS);
    float ms = -1;
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    CHECK(ms >= 1.0f - 1e-3f);
    CHECK(ms <= 1.0f + (float)(cs_now_ns() - t1) / 1e6f);
    fake_scratch_close(&scratch);
    printf("ok\n");
    return 0;
}
