/*
 * GPU_CORE_UTILIZATION_POLICY and per-device limits, one tenant alone:
 *   disable       a 25 % limit is never applied, and nothing is measured
 *                 (no event is recorded: the fast path is taken)
 *   default       alone on its GPU the tenant is not limited; of the 16
 *                 device slots the limit covers only the device the fake
 *                 shows is armed
 *   force         (limiter_share_*) always limited
 *   perdev        CUDA_DEVICE_SM_LIMIT_0=25, _1=50: one tenant, one worker
 *                 per device, each device held to its own limit
 */
#include "limiter/lim_test.h"

static void one(const char *policy, double want_min, double want_max)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *env[] = {
        lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")), "FAKECUDA_NS_PER_BLOCK=1000",
        "FAKECUDA_UTIL_WINDOW_MS=300", lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s",
                                              lim_path("t.ledger")),
        "CUDA_DEVICE_SM_LIMIT=25", lim_kv("GPU_CORE_UTILIZATION_POLICY=%s", policy),
        lim_kv("CUSHARE_BOARD=%s", lim_path("board")), "CUSHARE_LOG_LEVEL=info", NULL};
    const char *args[] = {"--blocks", "1000", "--sync", "8", "--out",
                          lim_path("w.out"), "--log", lim_path("w.log"), NULL};
    pid_t pid = lim_spawn(env, args);
    static struct lim_series s;
    lim_sample(gpu, 0, &pid, 1, 2400, 200, 60, &s);
    CHECK_EQ(lim_wait(pid), 0);
    double m, sd;
    lim_print_series(lim_kv("policy %s, limit 25%%, share per 200 ms", policy), &s, 0);
    lim_stats(&s, 0, 700, 2400, &m, &sd);
    long long markers = lim_stat(lim_path("w.out"), "markers");
    printf("  mean %.1f%%, %lld event records, armed %lld\n", m, markers,
           lim_stat(lim_path("w.out"), "armed"));
    CHECK(m + lim_starved(&s, 0, 700, 2400) >= want_min && m <= want_max);
    /* The limit applies to every device slot; only the one the fake shows
     * is armed, so the watcher decides for it alone. */
    if (!strcmp(policy, "default")) {
        CHECK(lim_log_says(lim_path("w.log"), "device 0: pacing released"));
        CHECK(!lim_log_says(lim_path("w.log"), "device 1:"));
    }
    if (!strcmp(policy, "disable")) {
        CHECK_EQ(markers, 0);
        CHECK_EQ(fakecuda_calls(gpu, FAKECUDA_CALL_cuEventRecord), 0);
        CHECK_EQ(lim_stat(lim_path("w.out"), "armed"), 0);
    }
}

static void perdev(void)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    CHECK_EQ(gpu->ndevices, 2);
    pid_t pid[2];
    for (int d = 0; d < 2; d++) {
        const char *env[] = {
            lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")), "FAKECUDA_DEVICES=2",
            "FAKECUDA_NS_PER_BLOCK=1000",
            lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
            "CUDA_DEVICE_SM_LIMIT_0=25", "CUDA_DEVICE_SM_LIMIT_1=50",
            "GPU_CORE_UTILIZATION_POLICY=force", lim_kv("CUSHARE_BOARD=%s", lim_path("board")),
            NULL};
        const char *args[] = {"--blocks", "1000", "--sync", "4", "--device",
                              d ? "1" : "0", "--out", lim_path(lim_kv("w%d.out", d)), NULL};
        pid[d] = lim_spawn(env, args);
    }
    lim_ready(pid[0]);
    lim_ready(pid[1]);
    static struct lim_series s0, s1;
    /* Sample both devices: device 1 right after device 0, same windows. */
    const int64_t t0 = cs_now_ns();
    lim_note_rq(&s0, 0, -1, pid[0]);
    lim_note_rq(&s1, 0, -1, pid[1]);
    for (int w = 0; w < 11; w++) {
        int64_t to = t0 + (int64_t)(w + 1) * 200000000ll;
        while (cs_now_ns() < to + 60000000ll)
            cs_sleep_ms(5);
        s0.share[0][w] = 100.0 * (double)lim_busy(gpu, 0, pid[0], to - 200000000ll, to) / 2e8;
        s1.share[0][w] = 100.0 * (double)lim_busy(gpu, 1, pid[1], to - 200000000ll, to) / 2e8;
        lim_note_rq(&s0, 0, w, pid[0]);
        lim_note_rq(&s1, 0, w, pid[1]);
        s0.t[w] = s1.t[w] = to - t0;
        s0.n = s1.n = w + 1;
    }
    CHECK_EQ(lim_wait(pid[0]), 0);
    CHECK_EQ(lim_wait(pid[1]), 0);
    double m0, m1, sd;
    lim_print_series("device 0, CUDA_DEVICE_SM_LIMIT_0=25", &s0, 0);
    lim_print_series("device 1, CUDA_DEVICE_SM_LIMIT_1=50", &s1, 0);
    lim_stats(&s0, 0, 700, 2200, &m0, &sd);
    lim_stats(&s1, 0, 700, 2200, &m1, &sd);
    printf("  means %.1f%% and %.1f%%\n", m0, m1);
    /* Measured 24.8-25.0 and 49.7-50.0: 1 point either way. */
    CHECK_SHARE_STARVED(m0, 25, 1, 1, lim_starved(&s0, 0, 700, 2200));
    CHECK_SHARE_STARVED(m1, 50, 1, 1, lim_starved(&s1, 0, 700, 2200));
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    lim_dir(lim_kv("policy_%s", argv[1]));
    if (!strcmp(argv[1], "disable"))
        one("disable", 90, 100);  /* unlimited: measured 96.2-98.1 % */
    else if (!strcmp(argv[1], "default"))
        one("default", 90, 100);  /* measured 96.5-98.2 % */
    else if (!strcmp(argv[1], "perdev"))
        perdev();
    else
        CHECK(!"unknown case");
    return 0;
}
