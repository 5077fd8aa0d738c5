/*
 * Two tenants (two ledgers) on one simulated GPU, policy default.
 *
 *   recovery  A (limit 25 %) shares the GPU with B (no limit) for 2 s,
 *             then B exits. While B is busy A is held near its limit;
 *             once B has left (after NVML's window and the 1 s hold) A
 *             gets the whole GPU back.
 *   priority  H (limit 50 %) and L (limit 25 %), both GPU-bound. With
 *             equal priorities the GPU is split by their limits, all of
 *             it (two thirds and one third: limits are floors). With H at
 *             CUDA_TASK_PRIORITY=0 and L at 1, L is still held (a
 *             higher-priority tenant is busy) but H is not held by the
 *             lower-priority L: H gets clearly more than its 50 %.
 *             Both runs go side by side on two simulated GPUs.
 *   timeslice A (limit 25 %) and B (limit 75 %), policy force, both
 *             GPU-bound, on a fake whose events model a time-slicing GPU
 *             (FAKECUDA_EVENT_TIMESLICE=1: an event pair around a kernel
 *             spans the other tenant's queued work). Neither may exceed
 *             its limit, and A must not fall to half of it (A:B 1:3, -15 %
 *             / +20 %): a launch is charged no more than its signature's
 *             recent contention-free time.
 *   fulfil    A (25 %) and B (75 %), force, both GPU-bound, on a fake where
 *             switching between the two contexts costs 200 us of device
 *             time (FAKECUDA_CTX_SWITCH_US). B keeps a deep queue (it
 *             syncs every 32 launches), so the device stays saturated
 *             however a busy CPU runs the two; A, paced in short bursts,
 *             then gets only what B and the switches leave. With the
 *             default throughput share A posts that it is starved and B
 *             scales its share to A's fulfilment: A:B must be 1:3 within
 *             10 %. The same pair with CUSHARE_SM_SHARE=time (no
 *             fulfilment), side by side on a second simulated GPU, shows
 *             the gap it closes.
 *   windows   on fakes where a context switch costs 200 us of device time,
 *             tenants at 25 + 75 % (force, GPU-bound) on one GPU with
 *             coordinated windows (the default) and on a second without
 *             (CUSHARE_SM_PERIOD_US=0), then 20 + 30 + 50 % with windows
 *             of a 50 ms period and, on a second GPU, of the default one
 *             (100 ms for three tenants): with windows each gets its limit
 *             within 3 points, the GPU switches contexts twice (three
 *             times) per period, at most half as much time as without (at
 *             most 3/4 as much with the default period as with 50 ms for
 *             the three), and >= 95 % of it goes to
 *             the tenants' work (the fake does not time-slice queued work
 *             as a GPU does, so the 97 % target is the H200's to show:
 *             docs/results.md, "Issue 17").
 *   boost     one tenant at 50 %, force, GPU-bound, on a power-capped fake
 *             (busy 1400 W at the top clock, cap 700 W, idle 100 W): at
 *             full load kernels run at sqrt(600/1300) = 0.679 of the top
 *             clock, at 34 % busy at the top clock. A 50 % throughput share
 *             is therefore 34 % of GPU time (throughput share, default);
 *             CUSHARE_SM_SHARE=time holds 50 % of GPU time (71 % of the
 *             full-load throughput).
 *   joined    A (25 %, force) runs alone on a power-capped fake (the boost
 *             fake) until it has logged a clock boost of at least 1.3 (at
 *             25 % busy the fake runs at its top clock); then B (75 %)
 *             joins and the two take turns in windows that are exactly
 *             their limits. The device is then at full load, but A's boost
 *             inputs are one-second averages of the time it ran alone:
 *             kept, they make A's law stop it inside its own window (time
 *             nobody may use; 90-100 ms of it before 9cbfb4f). Both
 *             scales restart at 1 when such windows form: A's law must
 *             sleep at most 30 ms inside its window in all.
 *   first     A (limit 50 %, force) makes its first launch while B (no
 *             limit) has one 400 ms kernel queued, on a fake whose event
 *             pairs span other contexts' queued work
 *             (FAKECUDA_EVENT_TIMESLICE=1) and whose work reaches the
 *             device 50 us after it is submitted (FAKECUDA_SUBMIT_US), as
 *             a real driver's does: A's first measurement spans B's kernel
 *             and is charged as measured. After paying that off A runs
 *             alone and must get its 50 %. Before the fix its groups, held
 *             between single launches, were dropped and charged by that
 *             first, inflated estimate, never measured: A ran one kernel
 *             per few hundred ms for the rest of the run.
 *   samples   A (limit 25 %, default) beside B (no limit, so not on the
 *             board), GPU-bound, on a fake whose NVML samples processes
 *             every 50 ms and returns only samples newer than the stamp
 *             it is passed, as the driver does (FAKECUDA_NVML_SAMPLE_MS),
 *             and whose device utilisation, averaged over 10 minutes, says
 *             nothing: only B's process samples show it busy. A must be
 *             held. Before 65dea60 the watcher read the samples twice per
 *             tick; the policy decision got the second, empty read and
 *             released A to half the GPU.
 */
#include "limiter/lim_test.h"

static const char **tenant_env(const char *gpu, const char *ledger, const char *limit,
                               const char *prio)
{
    const char **env = calloc(16, sizeof *env);
    int n = 0;
    env[n++] = lim_kv("FAKECUDA_STATE=%s", lim_path(gpu));
    env[n++] = "FAKECUDA_NS_PER_BLOCK=1000";
    env[n++] = "FAKECUDA_UTIL_WINDOW_MS=300";
    env[n++] = lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(ledger));
    env[n++] = "GPU_CORE_UTILIZATION_POLICY=default";
    env[n++] = lim_kv("CUSHARE_BOARD=%s", lim_path("board"));
    if (limit)
        env[n++] = lim_kv("CUDA_DEVICE_SM_LIMIT=%s", limit);
    if (prio)
        env[n++] = lim_kv("CUDA_TASK_PRIORITY=%s", prio);
    return env;
}

/* Appends kv to a tenant_env environment (room for 15 and the NULL). */
static void env_add(const char **env, const char *kv)
{
    int n = 0;
    while (env[n])
        n++;
    CHECK(n < 15);
    env[n] = kv;
}

/* The power-capped fake of boost and joined: busy 1400 W at the top clock,
 * cap 700 W, idle 100 W. */
static void env_add_power_cap(const char **env)
{
    env_add(env, "FAKECUDA_POWER_BUSY_W=1400");
    env_add(env, "FAKECUDA_POWER_IDLE_W=100");
    env_add(env, "FAKECUDA_POWER_CAP_W=700");
}

static void recovery(void)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *a_args[] = {"--blocks", "1000", "--sync", "8", "--out",
                            lim_path("a.out"), NULL};
    const char *b_args[] = {"--secs", "2", "--blocks", "1000", "--sync", "2", "--out",
                            lim_path("b.out"), NULL};
    pid_t pid[2];
    pid[0] = lim_spawn(tenant_env("gpu.state", "a.ledger", "25", NULL), a_args);
    pid[1] = lim_spawn(tenant_env("gpu.state", "b.ledger", NULL, NULL), b_args);
    static struct lim_series s;
    lim_sample(gpu, 0, pid, 2, 4500, 200, 60, &s);
    CHECK_EQ(lim_wait(pid[0]), 0);
    CHECK_EQ(lim_wait(pid[1]), 0);
    lim_print_series("A (limit 25, default) share per 200 ms", &s, 0);
    lim_print_series("B (no limit, leaves at 2 s)           ", &s, 1);
    double during, after, sd;
    /* While B is busy: windows ending 1.0..1.9 s, so from 0.8 s on. The
     * decision follows one-second averages; with four tests on two busy
     * cores A was engaged only within the window ending at 0.8 s (its
     * share there 52 %), which counted as contended time before. */
    lim_stats(&s, 0, 1000, 1900, &during, &sd);
    lim_stats(&s, 0, 3600, 4500, &after, &sd);
    /* Lower bounds forgive the time A waited for a CPU (lim_starved). */
    double st_during = lim_starved(&s, 0, 1000, 1900), st_after = lim_starved(&s, 0, 3600, 4500);
    printf("A: %.1f%% while B is busy, %.1f%% after B left (CPU wait %.1f / %.1f %%)\n", during,
           after, st_during, st_after);
    /* Measured 24.9-25.1 % while B is busy, 94.7-98.1 % after (less
     * only when starved of CPU, which is forgiven). */
    CHECK_SHARE_STARVED(during, 25, 1, 1, st_during);
    CHECK_GE(after + st_after, 90);
}

static void priority(void)
{
    struct fakecuda_state *g[2] = {lim_gpu("eq.state"), lim_gpu("pr.state")};
    const char *gname[2] = {"eq.state", "pr.state"};
    pid_t pid[2][2];
    for (int k = 0; k < 2; k++) {
        const char *h_args[] = {"--secs", "5", "--blocks", "1000", "--sync", "8", "--out",
                                lim_path(lim_kv("h%d.out", k)), NULL};
        const char *l_args[] = {"--secs", "5", "--blocks", "1000", "--sync", "8", "--out",
                                lim_path(lim_kv("l%d.out", k)), NULL};
        /* A board per GPU: the fakes' UUIDs are the same. */
        const char **he = tenant_env(gname[k], lim_kv("h%d.ledger", k), "50", k ? "0" : "1");
        const char **le = tenant_env(gname[k], lim_kv("l%d.ledger", k), "25", "1");
        he[5] = le[5] = lim_kv("CUSHARE_BOARD=%s", lim_path(lim_kv("%d.board", k)));
        pid[k][0] = lim_spawn(he, h_args);
        pid[k][1] = lim_spawn(le, l_args);
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++)
            lim_ready(pid[k][j]);
    static double sh[2][2][24];
    int64_t rq0[2][2], rq1[2][2];   /* CPU wait at the ends of windows 13..22 */
    const int64_t t0 = cs_now_ns();
    for (int w = 0; w < 23; w++) {
        int64_t to = t0 + (int64_t)(w + 1) * 200000000ll;
        while (cs_now_ns() < to + 60000000ll)
            cs_sleep_ms(5);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++)
                sh[k][j][w] = 100.0 * (double)lim_busy(g[k], 0, pid[k][j], to - 200000000ll, to) /
                              2e8;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++) {
                if (w == 13)
                    rq0[k][j] = lim_rq_wait_ns(pid[k][j]);
                if (w == 22)
                    rq1[k][j] = lim_rq_wait_ns(pid[k][j]);
            }
    }
    double m[2][2] = {{0}}, st[2][2];
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 2; j++) {
            CHECK_EQ(lim_wait(pid[k][j]), 0);
            printf("%s, %s share per 200 ms:", k ? "H priority 0, L 1" : "equal priorities",
                   j ? "L (25)" : "H (50)");
            for (int w = 0; w < 23; w++) {
                printf(" %.0f", sh[k][j][w]);
                if (w >= 14)
                    m[k][j] += sh[k][j][w] / 9;
            }
            /* CPU wait over windows 14..22 (9 x 200 ms, the steady state
             * after up to 2.5 s of settling), forgiven below. */
            st[k][j] = 100.0 * (double)(rq1[k][j] - rq0[k][j]) / 1.8e9;
            printf("  mean %.1f%%, CPU wait %.1f%%\n", m[k][j], st[k][j]);
        }
    }
    /* Each verdict compares what the two pairs got side by side, in one
     * run, so that a CPU the suite shares with other work moves both
     * alike, and what starvation could explain (a worker's CPU wait:
     * lim_starved) is forgiven below; upper bounds are never forgiven
     * (waiting for a CPU only ever lowers a share).
     *
     * Equal priorities: the whole GPU split by the limits, 2:1 (work
     * conserving): L gets clearly more than its 25 % (measured 33.3). */
    CHECK_SHARE_STARVED(m[0][0], 66.7, 2, 6, st[0][0]);
    CHECK_SHARE_STARVED(m[0][1], 33.3, 2, 4, st[0][1]);
    /* H at priority 0: L is held to at most its limit while H is busy
     * (with priority ignored it gets the 33.3 above). How far below: L is
     * entitled to what H leaves, and what H, unpaced, leaves on the fake's
     * one FIFO timeline is a matter of how the CPU runs the two (measured
     * 1.3-20, H 96.7-80 beside it): no lower bound, but the GPU is used. */
    CHECK_LE(m[1][1], 26);
    CHECK_GE(m[1][0] + m[1][1] + st[1][0] + st[1][1], 90);
    /* ... and H is not held by the lower L: it gets more than its
     * two-thirds split with an equal L (measured 79.8-87.3, against 66.7
     * when L's priority does not yield). */
    CHECK_GE(m[1][0] + st[1][0], 75);
    CHECK_GE(m[1][0] + st[1][0], m[0][0] + 5);
}

static void timeslice(void)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *a_args[] = {"--blocks", "200", "--sync", "8", "--out",
                            lim_path("a.out"), NULL};
    const char *b_args[] = {"--blocks", "200", "--sync", "8", "--out",
                            lim_path("b.out"), NULL};
    const char **ea = tenant_env("gpu.state", "a.ledger", "25", NULL);
    const char **eb = tenant_env("gpu.state", "b.ledger", "75", NULL);
    ea[4] = eb[4] = "GPU_CORE_UTILIZATION_POLICY=force";
    ea[7] = eb[7] = "FAKECUDA_EVENT_TIMESLICE=1";
    /* The charge under time-slicing is the point: no windows that would
     * keep the two from overlapping. */
    ea[8] = eb[8] = "CUSHARE_SM_PERIOD_US=0";
    pid_t pid[2];
    pid[0] = lim_spawn(ea, a_args);
    pid[1] = lim_spawn(eb, b_args);
    static struct lim_series s;
    lim_sample(gpu, 0, pid, 2, 3200, 200, 60, &s);
    CHECK_EQ(lim_wait(pid[0]), 0);
    CHECK_EQ(lim_wait(pid[1]), 0);
    lim_print_series("A (limit 25, force) share per 200 ms", &s, 0);
    lim_print_series("B (limit 75, force) share per 200 ms", &s, 1);
    double a, b, sd;
    lim_stats(&s, 0, 800, 3200, &a, &sd);
    lim_stats(&s, 1, 800, 3200, &b, &sd);
    double ratio = b > 0 ? a / b : 99;
    double sa = lim_starved(&s, 0, 800, 3200), sb = lim_starved(&s, 1, 800, 3200);
    printf("A %.1f%%, B %.1f%%, A:B = %.3f (target 0.333 -15 %% / +20 %%; CPU wait %.1f / %.1f %%)\n", a,
           b, ratio, sa, sb);
    /* The caps (never forgiven: a CPU wait only lowers a share): each at
     * most 1 point over its limit. */
    CHECK_SHARE_STARVED(a, 25, 1, 4, sa);
    CHECK_SHARE_STARVED(b, 75, 1, 9, sb);
    /* What the per-signature charge does: A, whose event pairs span B's
     * queued work, is charged its own kernels' time, not B's. Measured A
     * 24.0-24.6, B 66.4-73.4 (B also loses to its watcher's CPU wait,
     * which is not measured), A:B 0.320-0.337 at the low end of the
     * interval below; charged as measured instead, A gets 12.0 and A:B is
     * 0.169. The lower bounds sit well between the two, so a CPU shared
     * with other work (which lim_starved forgives only in part) does not
     * decide the verdict and the broken charge still fails it: A:B within
     * 1:3 -15 % / +20 %, A at least 21. */
    CHECK((a + sa) / b >= 0.2833 && a / (b + sb) <= 0.40);
}

/* Runs a 25 % + 75 % pair (force) on each of two simulated GPUs, the
 * second pair with CUSHARE_SM_SHARE=time; B queues 32 launches between
 * syncs, A 8; extra[] adds to every tenant's environment. Fills A and B's
 * mean shares per GPU, and in st the share of that time each waited for
 * a CPU (lim_starved). */
static void pair_both_modes(const char *const *extra, double ab[2][2], double st[2][2])
{
    struct fakecuda_state *g[2] = {lim_gpu("tput.state"), lim_gpu("time.state")};
    pid_t pid[2][2];
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 2; j++) {
            const char *args[] = {"--blocks", "200", "--sync", j ? "32" : "8", "--out",
                                  lim_path(lim_kv("%d%d.out", k, j)), NULL};
            const char **e = tenant_env(k ? "time.state" : "tput.state",
                                        lim_kv("%d%d.ledger", k, j), j ? "75" : "25", NULL);
            e[4] = "GPU_CORE_UTILIZATION_POLICY=force";
            e[5] = lim_kv("CUSHARE_BOARD=%s", lim_path(k ? "time.board" : "tput.board"));
            env_add(e, k ? "CUSHARE_SM_SHARE=time" : "CUSHARE_SM_SHARE=throughput");
            for (int x = 0; extra[x]; x++)
                env_add(e, extra[x]);
            pid[k][j] = lim_spawn(e, args);
        }
    }
    static struct lim_series s[2];
    lim_sample_gpus(g, 2, 0, &pid[0][0], 2, 4860, 200, 60, s);
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 2; j++)
            CHECK_EQ(lim_wait(pid[k][j]), 0);
        printf("%s:\n", k ? "CUSHARE_SM_SHARE=time" : "throughput share (default)");
        lim_print_series("  A (limit 25) share per 200 ms", &s[k], 0);
        lim_print_series("  B (limit 75) share per 200 ms", &s[k], 1);
        double sd;
        lim_stats(&s[k], 0, 2400, 4800, &ab[k][0], &sd);
        lim_stats(&s[k], 1, 2400, 4800, &ab[k][1], &sd);
        st[k][0] = lim_starved(&s[k], 0, 2400, 4800);
        st[k][1] = lim_starved(&s[k], 1, 2400, 4800);
        printf("  A %.1f%%, B %.1f%%, A:B = %.3f (CPU wait %.1f / %.1f %%)\n", ab[k][0],
               ab[k][1], ab[k][1] > 0 ? ab[k][0] / ab[k][1] : 99.0, st[k][0], st[k][1]);
    }
}

static void fulfil(void)
{
    /* Fulfilment is what evens out an interleaved pair: no windows. */
    const char *extra[] = {"FAKECUDA_CTX_SWITCH_US=200", "CUSHARE_SM_PERIOD_US=0", NULL};
    double ab[2][2], st[2][2];
    pair_both_modes(extra, ab, st);
    /* A starved tenant could have had up to its CPU wait more: each ratio
     * is known within an interval, which must meet the bound. */
    double tput_lo = ab[0][0] / (ab[0][1] + st[0][1]), tput_hi = (ab[0][0] + st[0][0]) / ab[0][1];
    double time_ratio = ab[1][0] / ab[1][1];
    /* 1:3 within 10 %. Measured on one CPU: 0.317-0.338. */
    CHECK(tput_hi >= 0.3 && tput_lo <= 0.3667);
    /* What it corrects: without fulfilment A is under 0.3 (measured
     * 0.256-0.269, A 19-20 % beside B at its cap). As measured, not
     * widened by CPU wait: a wait (or the host's steal) takes from A,
     * whose short bursts need the CPU often, while B's deep queue rides
     * out short ones ... */
    CHECK(time_ratio < 0.3);
    /* ... and what B gives up goes to A. */
    CHECK_GE(ab[0][0] + st[0][0], ab[1][0] + 1);
}

/* Tenants at `limits` (force, GPU-bound) on each of `ngpus` simulated
 * GPUs whose context switches cost 200 us; GPU k's tenants get env_k[k]
 * too. Fills each tenant's mean share and CPU wait over [1.2, 3.2] s, and
 * the share of time each GPU spent switching contexts in the steady state:
 * the median of the last 1.5 s's five 300 ms slices (windows that re-form
 * once, when a tick comes late on a busy machine, cost one slice the
 * switches of a transition; the steady state is what is judged). */
static void side_by_side(int ngpus, const char *const *env_k, const int *limits, int n,
                         double share[2][3], double wait[2][3], double switching[2])
{
    const char *names[2] = {lim_kv("win%d.state", n), lim_kv("free%d.state", n)};
    struct fakecuda_state *g[2];
    pid_t pid[6]; /* GPU k's tenant j at k * n + j, as lim_sample_gpus reads them */
    for (int k = 0; k < ngpus; k++) {
        g[k] = lim_gpu(names[k]);
        for (int j = 0; j < n; j++) {
            /* Deep queues (a sync every 64 kernels, 12.8 ms): a window
             * is the owner's alone, so the gap after each of its syncs is
             * lost to everyone (docs/limiter.md, "Windows"). */
            const char *args[] = {"--blocks", "200", "--sync", "64", "--out",
                                  lim_path(lim_kv("w%d%d%d.out", n, k, j)), NULL};
            const char **e = tenant_env(names[k], lim_kv("w%d%d%d.ledger", n, k, j),
                                        lim_kv("%d", limits[j]), NULL);
            e[4] = "GPU_CORE_UTILIZATION_POLICY=force";
            e[5] = lim_kv("CUSHARE_BOARD=%s", lim_path(lim_kv("w%d%d.board", n, k)));
            env_add(e, "FAKECUDA_CTX_SWITCH_US=200");
            env_add(e, env_k[k]);
            pid[k * n + j] = lim_spawn(e, args);
        }
    }
    static struct lim_series s[2];
    lim_sample_gpus(g, ngpus, 0, pid, n, 3260, 200, 60, s);
    const int64_t slice = 300000000ll;
    int64_t to = cs_now_ns() - 100000000ll;
    for (int k = 0; k < ngpus; k++) {
        double pct[5];
        for (int i = 0; i < 5; i++) {
            int64_t from = to - (5 - i) * slice;
            pct[i] = 100.0 * (double)lim_busy(g[k], 0, -1, from, from + slice) / (double)slice;
        }
        for (int i = 1; i < 5; i++) /* insertion sort: five values */
            for (int j = i; j > 0 && pct[j - 1] > pct[j]; j--) {
                double t = pct[j];
                pct[j] = pct[j - 1];
                pct[j - 1] = t;
            }
        switching[k] = pct[2];
    }
    for (int k = 0; k < ngpus; k++) {
        double sum = 0, sd;
        for (int j = 0; j < n; j++) {
            CHECK_EQ(lim_wait(pid[k * n + j]), 0);
            lim_print_series(lim_kv("  %s, limit %d, share per 200 ms", env_k[k], limits[j]),
                             &s[k], j);
            lim_stats(&s[k], j, 1200, 3200, &share[k][j], &sd);
            wait[k][j] = lim_starved(&s[k], j, 1200, 3200);
            printf("  mean %.1f%%, CPU wait %.1f%%\n", share[k][j], wait[k][j]);
            sum += share[k][j];
        }
        printf("%s: together %.1f%% of the GPU, %.2f%% switching contexts\n", env_k[k], sum,
               switching[k]);
    }
}

static void windows(void)
{
    const char *env_k[2] = {"CUSHARE_SM_PERIOD_US=50000", "CUSHARE_SM_PERIOD_US=0"};
    double sh[2][3], st[2][3], sw[2];
    const int pair[2] = {25, 75}, triple[3] = {20, 30, 50};
    /* Measured: never over a limit; under by up to 2.1 points (75) once
     * CPU wait is forgiven: a window is its owner's alone, so the gap
     * after each of its syncs is lost. The lower bounds stay at 3. */
    side_by_side(2, env_k, pair, 2, sh, st, sw);
    CHECK_SHARE_STARVED(sh[0][0], 25, 1, 3, st[0][0]);
    CHECK_SHARE_STARVED(sh[0][1], 75, 1, 3, st[0][1]);
    CHECK_GE(sh[0][0] + sh[0][1] + st[0][0] + st[0][1], 95);
    /* Two switches per 50 ms period: 0.8 % of the GPU at 200 us each
     * (measured 0.48-0.71 %). Without windows the tenants' bursts
     * interleave more often (2.15-2.39 %). */
    CHECK_LE(sw[0], 1.0);
    CHECK_GE(sw[1], 2 * sw[0]);
    /* The triple with the period fixed at 50 ms and, beside it, left to
     * grow with the tenants (100 ms for three): half the switches. */
    const char *env_t[2] = {"CUSHARE_SM_PERIOD_US=50000", "CUSHARE_SM_WINDOW_LEAD_US=150"};
    side_by_side(2, env_t, triple, 3, sh, st, sw);
    for (int k = 0; k < 2; k++) {
        double sum = 0, waited = 0;
        for (int j = 0; j < 3; j++) {
            CHECK_SHARE_STARVED(sh[k][j], triple[j], 1, 3, st[k][j]);
            sum += sh[k][j];
            waited += st[k][j];
        }
        CHECK_GE(sum + waited, 95);
    }
    CHECK_LE(sw[0], 1.5); /* three switches per 50 ms: 1.2 % (the median slice) */
    CHECK_LE(sw[1], 0.75 * sw[0]);
}

static void boost(void)
{
    struct fakecuda_state *g[2] = {lim_gpu("tput.state"), lim_gpu("time.state")};
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        const char *args[] = {"--blocks", "200", "--sync", "8", "--out",
                              lim_path(lim_kv("%d.out", k)), NULL};
        const char **e = tenant_env(k ? "time.state" : "tput.state", lim_kv("%d.ledger", k),
                                    "50", NULL);
        e[4] = "GPU_CORE_UTILIZATION_POLICY=force";
        e[5] = lim_kv("CUSHARE_BOARD=%s", lim_path(lim_kv("%d.board", k)));
        env_add(e, k ? "CUSHARE_SM_SHARE=time" : "CUSHARE_SM_SHARE=throughput");
        env_add_power_cap(e);
        pid[k] = lim_spawn(e, args);
    }
    static struct lim_series s[2];
    lim_sample_gpus(g, 2, 0, pid, 1, 3860, 200, 60, s);
    double m[2], sd;
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(lim_wait(pid[k]), 0);
        lim_print_series(k ? "time share:       GPU time per 200 ms"
                           : "throughput share: GPU time per 200 ms", &s[k], 0);
        lim_stats(&s[k], 0, 2000, 3800, &m[k], &sd);
    }
    /* Below 46 % busy the fake runs at the top clock, 1/0.679 of the
     * full-load speed; at 50 % busy at 0.961 of it. */
    double full = sqrt(600.0 / 1300.0);
    double t_tput = m[0] / full, t_time = m[1] * sqrt(600.0 / (m[1] / 100 * 1300)) / full;
    printf("throughput share: %.1f%% of GPU time = %.1f%% of the full-load work (target 50)\n",
           m[0], t_tput);
    printf("time share:       %.1f%% of GPU time = %.1f%% of the full-load work\n", m[1], t_time);
    /* Measured 33.7-33.9 and 49.0-49.5 when not starved of CPU; since the
     * fake's timeline keeps busy time as a union of intervals (MPS), the
     * time share measures 48.1-48.3 alone on an idle machine. */
    CHECK_SHARE_STARVED(m[0], 34, 1, 1, lim_starved(&s[0], 0, 2000, 3800));
    CHECK_SHARE_STARVED(m[1], 50, 1, 2.7, lim_starved(&s[1], 0, 2000, 3800));
}

/* The largest clock boost a worker logged so far (its --log file). */
static double boost_logged(const char *log)
{
    FILE *f = fopen(log, "r");
    double best = 0, b;
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "clock boost x");
        if (p && sscanf(p, "clock boost x%lf", &b) == 1 && b > best)
            best = b;
    }
    if (f)
        fclose(f);
    return best;
}

static pid_t joined_tenant(const char *name, const char *limit)
{
    const char *args[] = {"--blocks", "200", "--sync", "64", "--log",
                          lim_path(lim_kv("%s.log", name)), "--out",
                          lim_path(lim_kv("%s.out", name)), NULL};
    const char **e = tenant_env("gpu.state", lim_kv("%s.ledger", name), limit, NULL);
    e[4] = "GPU_CORE_UTILIZATION_POLICY=force";
    env_add_power_cap(e);
    env_add(e, "CUSHARE_LOG_LEVEL=info");
    return lim_spawn(e, args);
}

static void joined(void)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    pid_t pid[2];
    pid[0] = joined_tenant("a", "25");
    lim_ready(pid[0]);
    CS_WAIT_FOR(boost_logged(lim_path("a.log")) >= 1.3, 20000, "A's clock boost estimate");
    printf("A alone: clock boost x%.2f logged\n", boost_logged(lim_path("a.log")));
    pid[1] = joined_tenant("b", "75");
    static struct lim_series s;
    lim_sample(gpu, 0, pid, 2, 2500, 200, 60, &s);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(lim_wait(pid[k]), 0);
        lim_print_series(k ? "B (75 %, joined) share per 200 ms" : "A (25 %) share per 200 ms",
                         &s, k);
    }
    long long a = lim_stat(lim_path("a.out"), "law_window_sleep_ns");
    long long b = lim_stat(lim_path("b.out"), "law_window_sleep_ns");
    long long waits = lim_stat(lim_path("a.out"), "window_waits");
    printf("the law slept inside its own window: A %.1f ms, B %.1f ms (A held for its window "
           "%lld times)\n", a / 1e6, b / 1e6, waits);
    CHECK_GT(waits, 0); /* the windows formed */
    CHECK_LE(a, 30000000ll);
    CHECK_LE(b, 30000000ll);
}

static void samples(void)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *a_args[] = {"--blocks", "1000", "--sync", "8", "--out",
                            lim_path("a.out"), NULL};
    const char *b_args[] = {"--blocks", "1000", "--sync", "8", "--out",
                            lim_path("b.out"), NULL};
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        const char **e = tenant_env("gpu.state", k ? "b.ledger" : "a.ledger", k ? NULL : "25",
                                    NULL);
        e[2] = "FAKECUDA_UTIL_WINDOW_MS=600000"; /* replaces tenant_env's 300 ms */
        env_add(e, "FAKECUDA_NVML_SAMPLE_MS=50"); /* a new sample every tick (100 ms) */
        pid[k] = lim_spawn(e, k ? b_args : a_args);
    }
    static struct lim_series s;
    lim_sample(gpu, 0, pid, 2, 3000, 200, 60, &s);
    CHECK_EQ(lim_wait(pid[0]), 0);
    CHECK_EQ(lim_wait(pid[1]), 0);
    lim_print_series("A (limit 25, default) share per 200 ms", &s, 0);
    lim_print_series("B (no limit, not on the board)       ", &s, 1);
    double a, b, sd;
    lim_stats(&s, 0, 1000, 3000, &a, &sd);
    lim_stats(&s, 1, 1000, 3000, &b, &sd);
    double st = lim_starved(&s, 0, 1000, 3000);
    printf("A %.1f%%, B %.1f%% (CPU wait of A %.1f %%)\n", a, b, st);
    /* Held: measured 24.9-25.1 on an idle machine. Unheld, A gets half
     * the GPU (the parent of 65dea60: 50.0 %): the upper bound tells the
     * two apart and is never forgiven. The lower one allows 3 points: A's
     * kernels wait behind B's queue on the fake's one FIFO timeline, and
     * on a busy CPU A has got as little as 23.6 (once in 13 runs pinned
     * to one CPU) with next to no CPU wait of its own to forgive. */
    CHECK_SHARE_STARVED(a, 25, 1, 3, st);
    CHECK_GE(b, 60);
}

static void first_measured(void)
{
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *b_args[] = {"--count", "1", "--blocks", "400000", "--sync", "1", "--out",
                            lim_path("b.out"), NULL};
    const char *a_args[] = {"--secs", "4", "--blocks", "200", "--sync", "8", "--out",
                            lim_path("a.out"), NULL};
    const char **eb = tenant_env("gpu.state", "b.ledger", NULL, NULL);
    const char **ea = tenant_env("gpu.state", "a.ledger", "50", NULL);
    ea[4] = "GPU_CORE_UTILIZATION_POLICY=force";
    for (const char **e = ea;; e = eb) {
        env_add(e, "FAKECUDA_EVENT_TIMESLICE=1");
        env_add(e, "FAKECUDA_SUBMIT_US=50");
        if (e == eb)
            break;
    }
    pid_t b = lim_spawn(eb, b_args);
    lim_ready(b); /* its 400 ms kernel is queued */
    pid_t a = lim_spawn(ea, a_args);
    static struct lim_series s;
    lim_sample(gpu, 0, &a, 1, 4000, 200, 60, &s);
    CHECK_EQ(lim_wait(a), 0);
    CHECK_EQ(lim_wait(b), 0);
    lim_print_series("A (limit 50, force) share per 200 ms", &s, 0);
    double mean, sd;
    /* From 1.4 s: A's first charge (at most B's 400 ms, so 800 ms of its
     * clock) is paid off by then. */
    lim_stats(&s, 0, 1400, 4000, &mean, &sd);
    double st = lim_starved(&s, 0, 1400, 4000);
    printf("A %.1f%% after its first charge (CPU wait %.1f %%)\n", mean, st);
    /* Measured 49.x; with dropped groups charged by the inflated estimate
     * A got under 1 %. The cap is never forgiven. */
    CHECK_SHARE_STARVED(mean, 50, 1, 10, st);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    lim_dir(lim_kv("contend_%s", argv[1]));
    if (!strcmp(argv[1], "recovery"))
        recovery();
    else if (!strcmp(argv[1], "priority"))
        priority();
    else if (!strcmp(argv[1], "timeslice"))
        timeslice();
    else if (!strcmp(argv[1], "fulfil"))
        fulfil();
    else if (!strcmp(argv[1], "boost"))
        boost();
    else if (!strcmp(argv[1], "windows"))
        windows();
    else if (!strcmp(argv[1], "joined"))
        joined();
    else if (!strcmp(argv[1], "first"))
        first_measured();
    else if (!strcmp(argv[1], "samples"))
        samples();
    else
        CHECK(!"unknown case");
    return 0;
}
