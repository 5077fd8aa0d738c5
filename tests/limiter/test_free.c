/*
 * The free path (docs/limiter.md, "When a tenant is held"): while no
 * device of the process is engaged, a launch goes untouched except one in
 * CS_LIM_FREE_SAMPLE (32) per thread, which takes the slow path, is
 * measured (a marker pair) and is charged for the ones its thread let go
 * before it.
 *
 * A lone tenant at 50 % under policy default: once the watcher has
 * decided (nobody to yield to: released), it launches N kernels from one
 * thread. At most N/32 of them (and one more group's markers for the
 * launch that straddles the start) may take the slow path, each with at
 * most two markers; every other launch is counted in `free_launches`, and
 * the two counts add up to N. With the free path disabled every launch
 * takes the slow path (measured 1 in 8 while well under its share):
 * N/4 markers, far above N/16.
 */
#include "limiter/lim_test.h"

#define N 32000
#define SAMPLE 32

int main(void)
{
    lim_dir("free_path");
    lim_gpu("gpu.state");
    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         "FAKECUDA_NS_PER_BLOCK=1000",
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
                         lim_kv("CUSHARE_BOARD=%s", lim_path("board")),
                         "GPU_CORE_UTILIZATION_POLICY=default", "CUDA_DEVICE_SM_LIMIT=50",
                         NULL};
    const char *out = lim_path("t.out");
    const char *args[] = {"--until-free", "--count", lim_kv("%d", N), "--blocks", "1",
                          "--sync", "64", "--out", out, NULL};
    CHECK_EQ(lim_wait(lim_spawn(env, args)), 0);
    long long markers = lim_stat(out, "run_markers"), slow = lim_stat(out, "run_paced");
    long long free_ = lim_stat(out, "run_free");
    printf("%d launches after release: %lld slow (markers %lld), %lld free\n", N, slow, markers,
           free_);
    CHECK_EQ(slow + free_, N);
    CHECK_LE(slow, N / SAMPLE + 1);
    CHECK_LE(markers, 2 * (N / SAMPLE + 1));
    CHECK_GE(free_, N - N / SAMPLE - 1);
    return 0;
}
