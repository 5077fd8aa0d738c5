/*
 * Shares on a GPU that time-slices between contexts (the fake's
 * FAKECUDA_TIMESLICE_US, tests/fakecuda/fake_slice.c): a context that has
 * work queued gets a time slice whenever the one on the device has used
 * its own, whatever either's queue depth, as on the real GPU. On the
 * first-come, first-served fake a tenant's queue decides its share; here
 * only the time it has nothing queued does (docs/limiter.md, "Windows").
 *
 *   saturating  two GPU-bound tenants at 25 and 75 (policy default, a
 *               sync every 8 launches as bench/limiter's workload): the
 *               GPU is split by their limits, A:B = 1:3 within 8 %, and
 *               at least 93 % of it is used. They take turns in windows;
 *               each loses the moment after each of its syncs inside its
 *               own window (the fake's sync wakes 50-200 us late on a
 *               loaded CPU: measured A 23.3-23.8, B 69.7-71.5), never
 *               gains over its limit.
 *               Without turns time-slicing splits them about evenly
 *               (45.6 / 51.8 before the tenant under its floor was
 *               engaged and its queue judged by its syncs).
 *   launchbound two launch-bound tenants (1 ms kernel, sync, 1.5 ms of
 *               CPU: about 40 % each) at 25 and 75: never held, so each
 *               keeps what time-slicing gives its unlimited twin on a
 *               second GPU beside it (no turns for tenants that do not
 *               fill the GPU).
 *
 * Shares are the fake's busy time per pid over 200 ms windows; the time a
 * worker waited for a CPU is forgiven (lim_starved).
 */
#include "limiter/lim_test.h"

#define SLICE_US "2000"

static const char **tenant(const char *gpu, const char *name, const char *limit)
{
    const char **env = calloc(16, sizeof *env);
    int n = 0;
    env[n++] = lim_kv("FAKECUDA_STATE=%s", lim_path(gpu));
    env[n++] = "FAKECUDA_NS_PER_BLOCK=1000";
    env[n++] = "FAKECUDA_UTIL_WINDOW_MS=300";
    env[n++] = "FAKECUDA_CTX_SWITCH_US=50";
    env[n++] = "FAKECUDA_TIMESLICE_US=" SLICE_US;
    env[n++] = lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("%s.ledger", name)));
    env[n++] = "GPU_CORE_UTILIZATION_POLICY=default";
    if (getenv("SLICE_LOG"))
        env[n++] = "CUSHARE_LOG_LEVEL=debug";
    env[n++] = lim_kv("CUSHARE_BOARD=%s", lim_path(lim_kv("%s.board", gpu)));
    if (limit)
        env[n++] = lim_kv("CUDA_DEVICE_SM_LIMIT=%s", limit);
    return env;
}

static const char **worker(const char *name, const char *blocks, const char *sync,
                           const char *gap_us)
{
    const char **a = calloc(14, sizeof *a);
    const char *v[] = {"--secs", "5.2", "--blocks", blocks, "--sync", sync, "--gap-us", gap_us,
                       "--out", lim_path(lim_kv("%s.out", name)), NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* Samples ngpus x n tenants; each one's mean share and CPU wait over
 * 3.0..5.0 s (the decisions use one-second averages and hold a second). */
static void run(int ngpus, int n, pid_t *pid, struct fakecuda_state **g, double share[][2],
                double wait[][2], const char *const *label)
{
    static struct lim_series s[2];
    lim_sample_gpus(g, ngpus, 0, pid, n, 5060, 200, 60, s);
    for (int k = 0; k < ngpus; k++)
        for (int j = 0; j < n; j++) {
            double sd;
            CHECK_EQ(lim_wait(pid[k * n + j]), 0);
            lim_print_series(label[k * n + j], &s[k], j);
            lim_stats(&s[k], j, 3000, 5000, &share[k][j], &sd);
            wait[k][j] = lim_starved(&s[k], j, 3000, 5000);
            printf("  mean %.1f%%, CPU wait %.1f%%\n", share[k][j], wait[k][j]);
        }
}

static void saturating(void)
{
    struct fakecuda_state *g[1] = {lim_gpu("sat.state")};
    pid_t pid[2] = {
        lim_spawn(tenant("sat.state", "a", "25"), worker("a", "500", "8", "0")),
        lim_spawn(tenant("sat.state", "b", "75"), worker("b", "500", "8", "0")),
    };
    double sh[1][2], st[1][2];
    run(1, 2, pid, g, sh, st, (const char *[]){"GPU-bound (25)", "GPU-bound (75)"});
    CHECK_SHARE_STARVED(sh[0][0], 25, 1, 3, st[0][0]);
    CHECK_SHARE_STARVED(sh[0][1], 75, 1, 6, st[0][1]);
    CHECK_NEAR(sh[0][0] / sh[0][1], 1.0 / 3, 0.08 / 3);
    CHECK_GE(sh[0][0] + sh[0][1] + st[0][0] + st[0][1], 93);
}

static void launchbound(void)
{
    struct fakecuda_state *g[2] = {lim_gpu("lim.state"), lim_gpu("free.state")};
    pid_t pid[4] = {
        lim_spawn(tenant("lim.state", "a", "25"), worker("a", "1000", "1", "1500")),
        lim_spawn(tenant("lim.state", "b", "75"), worker("b", "1000", "1", "1500")),
        lim_spawn(tenant("free.state", "c", NULL), worker("c", "1000", "1", "1500")),
        lim_spawn(tenant("free.state", "d", NULL), worker("d", "1000", "1", "1500")),
    };
    const char *label[4] = {"A (25, default)", "B (75, default)", "C (no limit)",
                            "D (no limit)"};
    double sh[2][2], st[2][2];
    run(2, 2, pid, g, sh, st, label);
    for (int j = 0; j < 2; j++) {
        double twin = sh[1][j] + st[1][j];
        CHECK_GE(sh[0][j] + st[0][j], 0.9 * twin);
        CHECK_GE(twin, 30);
    }
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "saturating";
    lim_dir(lim_kv("slice_%s", c));
    if (!strcmp(c, "saturating"))
        saturating();
    else if (!strcmp(c, "launchbound"))
        launchbound();
    else
        return 2;
    printf("ok\n");
    return 0;
}
