/*
 * No limit, no cost: a tenant without CUDA_DEVICE_SM_LIMIT takes the fast
 * path on every launch (one flag load and a branch): the limiter stays
 * disarmed, records no event (the fake driver's own counter says so) and
 * the per-launch time matches the bare fake driver's. The timing is
 * printed; the check on it is loose because CI machines are noisy.
 */
#include "limiter/lim_test.h"

/* One run's time per launch. */
static double per_launch_ns(const char *preload, const char *out)
{
    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         "FAKECUDA_NS_PER_BLOCK=1",
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
                         preload, NULL};
    const char *args[] = {"--count", "200000", "--blocks", "1", "--sync", "0", "--out", out,
                          NULL};
    CHECK_EQ(lim_wait(lim_spawn(env, args)), 0);
    return (double)lim_stat(out, "elapsed_ns") / (double)lim_stat(out, "launches");
}

int main(void)
{
    lim_dir("nolimit");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    /* The best of five runs each, bare and ours alternated, so that a
     * burst of load on a shared machine hits both alike. */
    double bare = 1e18, ours = 1e18;
    for (int rep = 0; rep < 5; rep++) {
        double b = per_launch_ns("LD_PRELOAD=", lim_path("bare.out"));
        double o = per_launch_ns("CUSHARE_LOG_LEVEL=warn", lim_path("ours.out"));
        bare = b < bare ? b : bare;
        ours = o < ours ? o : ours;
    }
    long long armed = lim_stat(lim_path("ours.out"), "armed");
    long long markers = lim_stat(lim_path("ours.out"), "markers");
    uint64_t records = fakecuda_calls(gpu, FAKECUDA_CALL_cuEventRecord) +
                       fakecuda_calls(gpu, FAKECUDA_CALL_cuEventRecord_ptsz);
    printf("launch on the fake driver: %.0f ns bare, %.0f ns under cushare without a limit "
           "(%+.0f ns); armed %lld, markers %lld, event records %llu\n",
           bare, ours, ours - bare, armed, markers, (unsigned long long)records);
    CHECK_EQ(armed, 0);
    CHECK_EQ(markers, 0);
    CHECK_EQ(records, 0);
    CHECK_EQ(lim_stat(lim_path("ours.out"), "paced"), 0);
    CHECK_LE(ours, bare * 1.5 + 200);
    return 0;
}
