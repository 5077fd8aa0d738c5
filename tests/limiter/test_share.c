/*
 * Convergence: a GPU-bound worker limited with
 * policy force gets its share of GPU time, window after window, for long
 * kernels (1 ms) and short ones (20 us), and the share does not oscillate.
 * Three simulated GPUs run side by side: 25 %, 50 %, and an unlimited
 * reference that shows the workload is GPU-bound at all.
 *
 *   limiter_share_long / limiter_share_short: argument "long" or "short"
 */
#include "limiter/lim_test.h"

/* Standard deviation, over the windows ending in [0.7, 2.8] s, of what
 * worker k's share could have been in each: its share plus the time it
 * waited for a CPU in that window (which only ever lowers a share), at
 * most its limit + 1 (the idle credit a starved window leaves is spent
 * in the next). A window short of the limit for the limiter's own reasons
 * still counts in full. */
static double forgiven_sd(const struct lim_series *s, double limit)
{
    double sum = 0, sq = 0;
    int n = 0;
    for (int w = 0; w < s->n; w++) {
        double t = (double)s->t[w] / 1e6;
        if (t < 700 || t > 2800)
            continue;
        int64_t before = w ? s->rq[0][w - 1] : s->rq0[0];
        int64_t span = w ? s->t[w] - s->t[w - 1] : s->t[w];
        double x = s->share[0][w] + 100.0 * (double)(s->rq[0][w] - before) / (double)span;
        x = x < limit + 1 ? x : limit + 1;
        sum += x;
        sq += x * x;
        n++;
    }
    CHECK(n > 1);
    double mean = sum / n, var = sq / n - mean * mean;
    return var > 0 ? sqrt(var) : 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const int shortk = !strcmp(argv[1], "short");
    lim_dir(shortk ? "share_short" : "share_long");
    const char *blocks = shortk ? "20" : "1000";  /* x 1 us per block */
    const char *sync = shortk ? "250" : "4";
    const int limits[3] = {25, 50, 0};
    struct fakecuda_state *gpu[3];
    pid_t pid[3];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "gpu%d.state", i);
        gpu[i] = lim_gpu(name);
        const char *env[] = {
            lim_kv("FAKECUDA_STATE=%s", lim_path(name)),
            "FAKECUDA_NS_PER_BLOCK=1000",
            lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("l%d.ledger", i))),
            lim_kv("CUDA_DEVICE_SM_LIMIT=%d", limits[i]),
            "GPU_CORE_UTILIZATION_POLICY=force",
            lim_kv("CUSHARE_BOARD=%s", lim_path("board")),
            NULL};
        const char *args[] = {"--blocks", blocks, "--sync", sync, "--out",
                              lim_path(lim_kv("w%d.out", i)), NULL};
        pid[i] = lim_spawn(env, args);
    }
    /* The three GPUs are sampled in turn at the end of each window. */
    static struct lim_series s[3];
    for (int i = 0; i < 3; i++)
        lim_ready(pid[i]);
    const int64_t t0 = cs_now_ns();
    for (int i = 0; i < 3; i++)
        lim_note_rq(&s[i], 0, -1, pid[i]);
    for (int w = 0; w < 14; w++) {
        int64_t to = t0 + (int64_t)(w + 1) * 200000000ll;
        while (cs_now_ns() < to + 60000000ll)
            cs_sleep_ms(5);
        for (int i = 0; i < 3; i++) {
            s[i].t[w] = to - t0;
            s[i].share[0][w] = 100.0 * (double)lim_busy(gpu[i], 0, pid[i], to - 200000000ll, to) /
                               2e8;
            lim_note_rq(&s[i], 0, w, pid[i]);
            s[i].n = w + 1;
        }
    }
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lim_wait(pid[i]), 0);

    double mean[3], sd[3];
    for (int i = 0; i < 3; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s kernels, limit %d%%, share per 200 ms",
                 shortk ? "20 us" : "1 ms", limits[i]);
        lim_print_series(label, &s[i], 0);
        lim_stats(&s[i], 0, 700, 2800, &mean[i], &sd[i]);
        printf("  mean %.1f%%, sd %.1f pts (windows 0.7-2.8 s)\n", mean[i], sd[i]);
    }
    printf("markers: %lld / launches %lld (limit 25)\n",
           lim_stat(lim_path("w0.out"), "markers"), lim_stat(lim_path("w0.out"), "launches"));
    CHECK_GE(mean[2] + lim_starved(&s[2], 0, 700, 2800), 70);   /* GPU-bound without a limit */
    /* Measured 24.9-25.0 and 49.8-50.1: 1 point either way (a 200 ms
     * window holds 50 to 5000 kernels; CPU wait is forgiven below). */
    CHECK_SHARE_STARVED(mean[0], 25, 1, 1, lim_starved(&s[0], 0, 700, 2800));
    CHECK_SHARE_STARVED(mean[1], 50, 1, 1, lim_starved(&s[1], 0, 700, 2800));
    /* No oscillation after warm-up: sd measured <= 0.5 with one core
     * busy, up to 1.3 with another test suite running beside, 5.7 once
     * when the worker waited for a CPU 28 % of the time. So it is judged
     * on each window's share with that window's CPU wait forgiven
     * (forgiven_sd). Oscillation would be several points. */
    for (int i = 0; i < 2; i++) {
        double f = forgiven_sd(&s[i], limits[i]);
        printf("limit %d%%: sd %.1f pts with each window's CPU wait forgiven\n", limits[i], f);
        CHECK_LE(f, 2);
    }
    CHECK_EQ(lim_stat(lim_path("w2.out"), "markers"), 0); /* no limit: no events */
    return 0;
}
