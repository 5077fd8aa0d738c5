/*
 * TEST of the test tool tests/fakecuda (never shipped): NVML's process
 * samples with FAKECUDA_NVML_SAMPLE_MS=50 (set by tests/fakecuda.cmake).
 * The driver samples on its own clock, every 50 ms of CLOCK_REALTIME, and
 * nvmlDeviceGetProcessUtilization returns only samples newer than the
 * time stamp it is passed: a query right after another, passed that one's
 * stamp, gets NVML_ERROR_NOT_FOUND; once the next sample is taken it gets
 * that one. (The limiter once read twice per tick and lost the samples to
 * the first read: 65dea60, limiter_contend_samples.)
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_scratch.h"
#include "nvml/nvml.h"

#define PERIOD_US 50000ULL

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* One query into a buffer of 4; returns its status, the newest stamp in *ts. */
static nvmlReturn_t query(nvmlDevice_t dev, unsigned long long since, unsigned long long *ts)
{
    nvmlProcessUtilizationSample_t s[4];
    unsigned n = 4;
    nvmlReturn_t r = nvmlDeviceGetProcessUtilization(dev, s, &n, since);
    if (r == NVML_SUCCESS) {
        CHECK_EQ(n, 1);
        CHECK_EQ(s[0].pid, getpid());
        CHECK_LE(s[0].smUtil, 100);
        *ts = s[0].timeStamp;
    }
    return r;
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "samples");
    CHECK(getenv("FAKECUDA_NVML_SAMPLE_MS") && atoi(getenv("FAKECUDA_NVML_SAMPLE_MS")) == 50);

    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS); /* NVML lists us */
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t dev;
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);

    /* A query and a second one right behind it, passed the first's stamp:
     * nothing new, unless a sample boundary fell between them (then the
     * pair is asked again; two boundaries in a row cannot both do so). */
    unsigned long long ts = 0, ts2 = 0;
    int pairs = 0;
    for (;; pairs++) {
        CHECK_LE(pairs, 2);
        uint64_t before = realtime_us();
        CHECK_EQ(query(dev, 0, &ts), NVML_SUCCESS);   /* 0: everything the driver has */
        nvmlReturn_t second = query(dev, ts, &ts2);
        uint64_t after = realtime_us();
        CHECK_EQ(ts % PERIOD_US, 0);                  /* taken on the driver's clock */
        CHECK_LE(ts, after);
        CHECK(ts + PERIOD_US > before);                /* the newest one */
        if (before / PERIOD_US != after / PERIOD_US)
            continue;
        CHECK_EQ(second, NVML_ERROR_NOT_FOUND);
        break;
    }
    /* The same again with a stamp in the future: still nothing. */
    CHECK_EQ(query(dev, realtime_us() + PERIOD_US, &ts2), NVML_ERROR_NOT_FOUND);

    /* After the next boundary, the query gets the sample taken there. */
    while (realtime_us() < ts + PERIOD_US)
        usleep(1000);
    CHECK_EQ(query(dev, ts, &ts2), NVML_SUCCESS);
    CHECK_EQ(ts2 % PERIOD_US, 0);
    CHECK(ts2 >= ts + PERIOD_US);
    printf("samples at %llu and %llu us (period %llu us); a query between them: not found\n",
           ts, ts2, (unsigned long long)PERIOD_US);

    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
    fake_scratch_close(&scratch);
    return 0;
}
