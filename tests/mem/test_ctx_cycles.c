/*
 * 1000 cycles of cuCtxCreate_v2, a kernel launch in the new context, and
 * cuCtxDestroy_v2, beside a retained primary context, under a 25 % SM
 * limit. After each cycle the ledger's context charge is exactly what it
 * was before the cycle (no drift, no leak), and the launch of every cycle,
 * the last included, went through the compute limiter (its paced_launches
 * counter grew): the limiter forgets each destroyed context, so its
 * bounded context table never fills up.
 */
#include "mem_test.h"

#include <time.h>

#include "limiter/limiter.h"

#define CYCLES 1000
#define EXTRA (8 * MiB)

static uint64_t paced(void)
{
    static void (*get)(struct cushare_limiter_stats *);
    if (!get)
        get = (void (*)(struct cushare_limiter_stats *))dlsym(RTLD_DEFAULT, "cushare_limiter_stats");
    CHECK(get != NULL);
    struct cushare_limiter_stats s;
    memset(&s, 0, sizeof s);
    get(&s);
    return s.paced_launches;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    CUcontext primary, c;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    struct cs_ledger_header *L = ledger_map();
    const int me = getpid();
    const uint64_t start = slot_bytes(L, me, 0, CS_MEM_CONTEXT);
    CHECK_GT(start, 0);
    const double t0 = now_s();
    for (int i = 0; i < CYCLES; i++) {
        CHECK_EQ(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
        CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_CONTEXT), start + EXTRA);
        CUmodule mod;
        CUfunction fn;
        CHECK_EQ(cuModuleLoadData(&mod, "fake"), CUDA_SUCCESS);
        CHECK_EQ(cuModuleGetFunction(&fn, mod, "k"), CUDA_SUCCESS);
        uint64_t before = paced();
        CHECK_EQ(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
        if (paced() <= before) {
            fprintf(stderr, "cycle %d: the launch was not paced (%llu launches paced so far)\n", i,
                    (unsigned long long)before);
            return 1;
        }
        CHECK_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
        CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_CONTEXT), start);
        CHECK_EQ_U(ledger_used(L, 0), start);
    }
    CHECK_GE(paced(), CYCLES);
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("%d context cycles in %.2f s: context charge back to %llu MiB after each, "
           "every launch paced (%llu)\n",
           CYCLES, now_s() - t0, (unsigned long long)(start / MiB), (unsigned long long)paced());
    return 0;
}
