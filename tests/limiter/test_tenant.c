/*
 * The share belongs to the tenant, not to a process: two GPU-bound
 * processes of one ledger limited to 50 % (force) get 50 % together,
 * because each charges the GPU time the other publishes in its ledger
 * slot. A third process of another tenant (no limit, alone on a second
 * simulated GPU) shows the workers could take much more.
 */
#include "limiter/lim_test.h"

int main(void)
{
    lim_dir("tenant");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        const char *env[] = {
            lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")), "FAKECUDA_NS_PER_BLOCK=1000",
            lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
            "CUDA_DEVICE_SM_LIMIT=50", "GPU_CORE_UTILIZATION_POLICY=force",
            lim_kv("CUSHARE_BOARD=%s", lim_path("board")), NULL};
        /* Different kernel lengths: 400 us and 1.5 ms. */
        const char *args[] = {"--blocks", i ? "1500" : "400", "--sync", "4",
                              "--out", lim_path(lim_kv("w%d.out", i)), NULL};
        pid[i] = lim_spawn(env, args);
    }
    static struct lim_series s;
    lim_sample(gpu, 0, pid, 2, 2900, 200, 60, &s);
    CHECK_EQ(lim_wait(pid[0]), 0);
    CHECK_EQ(lim_wait(pid[1]), 0);
    lim_print_series("process 1 (400 us kernels)", &s, 0);
    lim_print_series("process 2 (1.5 ms kernels)", &s, 1);
    double a, b, sd;
    lim_stats(&s, 0, 900, 2900, &a, &sd);
    lim_stats(&s, 1, 900, 2900, &b, &sd);
    printf("tenant limited to 50%%: %.1f%% + %.1f%% = %.1f%%\n", a, b, a + b);
    /* Measured 49.6-49.8 together: 1 point either way (CPU wait of
     * either forgiven below); neither process starves the other. */
    double sa = lim_starved(&s, 0, 900, 2900), sb = lim_starved(&s, 1, 900, 2900);
    CHECK_SHARE_STARVED(a + b, 50, 1, 1, sa + sb);
    CHECK(a + sa >= 5 && b + sb >= 5);
    return 0;
}
