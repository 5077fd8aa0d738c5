/*
 * A share is a floor, not a ceiling (policy default, docs/limiter.md,
 * "What a share means"), on simulated GPUs whose context switches cost
 * device time (FAKECUDA_CTX_SWITCH_US).
 *
 *   launchbound  two launch-bound tenants (a 1 ms kernel, a sync, 1.5 ms
 *                of CPU: about 40 % of the GPU each) at limits 25 and 75
 *                on one GPU, and the same pair without limits on a second
 *                GPU beside it (plain time-slicing). The GPU is never
 *                saturated, so neither limited tenant may be held: each
 *                gets at least 90 % of what its unlimited twin gets.
 *   floor        the 25 % launch-bound tenant beside a GPU-bound tenant
 *                at 75 % that queues deep (16 ms of work between its
 *                syncs): the GPU is saturated, so the launch-bound one
 *                keeps its floor (25 %, not the 40 % it would use alone),
 *                the other gets the rest, and little is lost: the two
 *                together keep at least 92 % of the GPU. Unheld, the deep
 *                queue leaves the launch-bound one about 6 %: a gap no
 *                CPU scheduling closes or opens.
 *   saturating   two GPU-bound tenants at 50 and 25 (limits adding up to
 *                75 %): the GPU is split 2:1 by their limits, nearly all
 *                of it used (66.7 and 33.3 %), rather than capped at
 *                50 + 25. Both fill the GPU, so they take turns in
 *                windows (as they must on a time-slicing GPU), and each
 *                loses the moment after each of its syncs inside its own
 *                window: at least 93 % together (94-96 % measured; 98 %
 *                interleaved before they took turns).
 *
 * On a GPU that time-slices between contexts (the fake's
 * FAKECUDA_TIMESLICE_US, tests/fakecuda/fake_slice.c: a context with work
 * queued gets a slice whenever the one on the device has used its own,
 * whatever either's queue depth) only the time a tenant has nothing
 * queued decides its share (docs/limiter.md, "Windows"):
 *
 *   slice_launchbound  launchbound on that GPU: never held, no turns for
 *                tenants that do not fill the GPU.
 *   slice_equal  two GPU-bound tenants at 50 and 50 on that GPU: time-
 *                slicing already splits it by their floors, so neither is
 *                held (pacing sleeps under a quarter of the run: the first
 *                second, before a tenant sees the other on the board, it
 *                may hold for an unknown one; about half of the run while
 *                equal floors took turns), and the split stays even.
 *
 * Shares are the fake's busy time per pid over 200 ms windows; the time a
 * worker waited for a CPU is forgiven below (lim_starved).
 */
#include "limiter/lim_test.h"

/* The simulated GPUs time-slice (the slice_* cases): the slice in us. */
static const char *timeslice_us;

static const char **tenant(const char *gpu, const char *name, const char *limit)
{
    const char **env = calloc(16, sizeof *env);
    int n = 0;
    env[n++] = lim_kv("FAKECUDA_STATE=%s", lim_path(gpu));
    env[n++] = "FAKECUDA_NS_PER_BLOCK=1000";
    env[n++] = "FAKECUDA_UTIL_WINDOW_MS=300";
    env[n++] = "FAKECUDA_CTX_SWITCH_US=50";
    if (timeslice_us)
        env[n++] = lim_kv("FAKECUDA_TIMESLICE_US=%s", timeslice_us);
    env[n++] = lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("%s.ledger", name)));
    env[n++] = "GPU_CORE_UTILIZATION_POLICY=default";
    if (getenv("CONSERVE_LOG"))
        env[n++] = "CUSHARE_LOG_LEVEL=info";
    env[n++] = lim_kv("CUSHARE_BOARD=%s", lim_path(lim_kv("%s.board", gpu)));
    if (limit)
        env[n++] = lim_kv("CUDA_DEVICE_SM_LIMIT=%s", limit);
    return env;
}

/* A decode-like loop: one 1 ms kernel, wait for it, 1.5 ms on the CPU. */
static const char **launch_bound(const char *name)
{
    const char **a = calloc(12, sizeof *a);
    const char *v[] = {"--secs", "5.2", "--blocks", "1000", "--sync", "1", "--gap-us", "1500",
                       "--out", lim_path(lim_kv("%s.out", name)), NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* GPU-bound: 0.5 ms kernels, a sync every `depth` of them. */
static const char **gpu_bound(const char *name, int depth)
{
    const char **a = calloc(12, sizeof *a);
    const char *v[] = {"--secs", "5.2", "--blocks", "500", "--sync", lim_kv("%d", depth), "--out",
                       lim_path(lim_kv("%s.out", name)), NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* Runs ngpus x n tenants, samples them, and stores each one's mean share
 * and CPU wait over 3.0..5.0 s: the steady state (a pair can take up to
 * about 2.5 s to settle on a loaded machine: the decisions use one-second
 * averages and hold for a second). */
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

static void launchbound(void)
{
    struct fakecuda_state *g[2] = {lim_gpu("lim.state"), lim_gpu("free.state")};
    pid_t pid[4] = {
        lim_spawn(tenant("lim.state", "a", "25"), launch_bound("a")),
        lim_spawn(tenant("lim.state", "b", "75"), launch_bound("b")),
        lim_spawn(tenant("free.state", "c", NULL), launch_bound("c")),
        lim_spawn(tenant("free.state", "d", NULL), launch_bound("d")),
    };
    const char *label[4] = {"A (25, default)", "B (75, default)", "C (no limit)",
                            "D (no limit)"};
    double sh[2][2], st[2][2];
    run(2, 2, pid, g, sh, st, label);
    /* Alone each would use 40 % less its launch costs; unlimited side by
     * side, what the switches leave. A limited one may fall short of its
     * twin only by the CPU it waited for. */
    for (int j = 0; j < 2; j++) {
        double twin = sh[1][j] + st[1][j];
        CHECK_GE(sh[0][j] + st[0][j], 0.9 * twin);
        CHECK_GE(twin, 30);
    }
}

/* Two tenants on one fresh simulated GPU: their mean shares and CPU
 * waits. */
static void pair(const char *gpu, const char *const *name, const char *const *limit,
                 const char **args0, const char **args1, const char *const *label,
                 double sh[1][2], double st[1][2])
{
    struct fakecuda_state *g[1] = {lim_gpu(gpu)};
    pid_t pid[2] = {lim_spawn(tenant(gpu, name[0], limit[0]), args0),
                    lim_spawn(tenant(gpu, name[1], limit[1]), args1)};
    run(1, 2, pid, g, sh, st, label);
}

static void floor_kept(void)
{
    double sh[1][2], st[1][2];
    pair("floor.state", (const char *[]){"lb", "hog"}, (const char *[]){"25", "75"},
         launch_bound("lb"), gpu_bound("hog", 32),
         (const char *[]){"launch-bound (25)", "GPU-bound (75)"}, sh, st);
    /* Measured 20.5-23.3 (its 1.5 ms between kernels is CPU time a
     * shared machine stretches, and forgives only in part), 5.9 with the
     * hog never held (fair.c's contended hold taken out): the bound sits
     * well between the two. */
    CHECK_SHARE_STARVED(sh[0][0], 25, 6, 10, st[0][0]);
    /* The fake runs queued work first come, first served (no time
     * slices): the floor holds only because the GPU-bound tenant keeps a
     * short queue, which its syncs then leave dry at times (measured
     * 94-97 % together). */
    CHECK_GE(sh[0][0] + sh[0][1] + st[0][0] + st[0][1], 92);
}

static void saturating(void)
{
    double sh[1][2], st[1][2];
    pair("sat.state", (const char *[]){"h", "l"}, (const char *[]){"50", "25"}, gpu_bound("h", 8),
         gpu_bound("l", 8), (const char *[]){"GPU-bound (50)", "GPU-bound (25)"}, sh, st);
    /* The split as a ratio of what the two got together: CPU contention
     * (two tests on each busy core: 62.5 + 31.1) idles the GPU in both
     * tenants' windows alike, which moves the shares, not their split. */
    double together = sh[0][0] + sh[0][1];
    CHECK(together > 0);
    CHECK_NEAR(100 * sh[0][0] / together, 66.7, 2);
    CHECK_GE(together + st[0][0] + st[0][1], 93);
}

/* The time tenant `name` slept in pacing (its own law and its windows),
 * in percent of its run. */
static double paced_pct(const char *name)
{
    const char *out = lim_path(lim_kv("%s.out", name));
    long long elapsed = lim_stat(out, "elapsed_ns");
    long long slept = lim_stat(out, "sleep_ns") + lim_stat(out, "law_window_sleep_ns");
    printf("%s: slept %.1f %% of %.1f s in pacing\n", name,
           elapsed > 0 ? 100.0 * (double)slept / (double)elapsed : -1.0, (double)elapsed / 1e9);
    return elapsed > 0 ? 100.0 * (double)slept / (double)elapsed : 100.0;
}

static void equal_floors(void)
{
    double sh[1][2], st[1][2];
    pair("eq.state", (const char *[]){"e1", "e2"}, (const char *[]){"50", "50"},
         gpu_bound("e1", 8), gpu_bound("e2", 8),
         (const char *[]){"GPU-bound (50)", "GPU-bound (50)"}, sh, st);
    double together = sh[0][0] + sh[0][1];
    CHECK(together > 0);
    CHECK_NEAR(100 * sh[0][0] / together, 50, 5);
    CHECK(paced_pct("e1") < 25);
    CHECK(paced_pct("e2") < 25);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "launchbound";
    lim_dir(lim_kv("conserve_%s", c));
    if (!strncmp(c, "slice_", 6))
        timeslice_us = "2000";
    if (!strcmp(c, "launchbound") || !strcmp(c, "slice_launchbound"))
        launchbound();
    else if (!strcmp(c, "floor"))
        floor_kept();
    else if (!strcmp(c, "saturating"))
        saturating();
    else if (!strcmp(c, "slice_equal"))
        equal_floors();
    else
        return 2;
    printf("ok\n");
    return 0;
}
