/*
 * Concurrent devices (docs/limiter.md, "Concurrent devices
 * (MPS)"): when the process's contexts are MPS clients, a launch is
 * charged its GPU time times the part of the SMs its grid can hold. Four
 * simulated GPUs side by side, one worker each at --sm 25 (force):
 *
 *   0  MPS client, small kernels (200 blocks of 128 threads: 200 of the
 *      fake's 132 SMs x 16 resident blocks = 9.5 % of the GPU): charged
 *      9.5 % of their time, so never held back: far over 25 % of GPU time;
 *   1  the same kernels without MPS (time-sliced): held to 25 %;
 *   2  MPS client, GPU-filling kernels (4224 blocks): held to 25 %;
 *   3  MPS client, four of the small kernels captured into a graph and
 *      replayed: the exec's occupancy is read at instantiation (the
 *      largest of a chain), so it is charged as the kernels are.
 *
 * Case "together": four such small-kernel tenants at --sm 25 on one GPU,
 * as MPS clients and (on a second simulated GPU, at the same time) time-
 * sliced: side by side the clients' kernels overlap on the fake's
 * timeline, so together they get at least twice the GPU time the
 * time-sliced four can.
 *
 * The fake MPS control daemon (tests/fakecuda/fake_mps_control.c) serves
 * the clients; a time-sliced worker gets an empty pipe directory, so it is
 * an ordinary process, as with the real driver when no daemon runs.
 *
 * Case "filling": two MPS clients of GPU-filling kernels at 25 + 75 take
 * turns in windows with CUSHARE_MPS_TURNS=filling (the default since the
 * H200 measured it; docs/limiter.md) and not with off; the other cases set
 * off where they compare against clients side by side.
 *
 *   limiter_mps_{alone,together,filling}: the case is the argument
 */
#include "limiter/lim_test.h"

#define N 4

static const char *ctl, *pipe_dir, *nopipe;

/* The fake MPS control daemon on the test's pipe directory. */
static void daemon_start(void)
{
    ctl = getenv("CS_FAKE_MPS_CONTROL");
    CHECK(ctl != NULL);
    pipe_dir = lim_path("pipe");
    nopipe = lim_path("nopipe");
    const char *log = lim_path("log");
    CHECK(mkdir(pipe_dir, 0700) == 0 && mkdir(log, 0700) == 0 && mkdir(nopipe, 0700) == 0);
    CHECK_EQ(lim_shell("CUDA_MPS_PIPE_DIRECTORY='%s' CUDA_MPS_LOG_DIRECTORY='%s' '%s' -d", pipe_dir,
                       log, ctl),
             0);
}

static void daemon_stop(void)
{
    CHECK_EQ(lim_shell("echo quit | CUDA_MPS_PIPE_DIRECTORY='%s' '%s' >/dev/null", pipe_dir, ctl), 0);
}

/* A worker: its simulated GPU `state`, an MPS client or not, its own
 * ledger and stats file (by id); `board` groups the tenants that see
 * each other. Unset fields: --sm 25, 1 us per block, CUSHARE_MPS_TURNS unset. */
struct tenant {
    const char *state, *board, *blocks, *sync, *path, *limit, *ns_per_block, *turns;
    bool mps;
};

static pid_t worker(const struct tenant *t, int id)
{
    const char *env[] = {
        lim_kv("FAKECUDA_STATE=%s", lim_path(t->state)),
        lim_kv("FAKECUDA_NS_PER_BLOCK=%s", t->ns_per_block ? t->ns_per_block : "1000"),
        lim_kv("CUDA_MPS_PIPE_DIRECTORY=%s", t->mps ? pipe_dir : nopipe),
        lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("l%d.ledger", id))),
        lim_kv("CUDA_DEVICE_SM_LIMIT=%s", t->limit ? t->limit : "25"),
        "GPU_CORE_UTILIZATION_POLICY=force",
        lim_kv("CUSHARE_BOARD=%s", lim_path(t->board)),
        t->turns ? lim_kv("CUSHARE_MPS_TURNS=%s", t->turns) : NULL, /* unset: the default */
        NULL};
    const char *args[] = {"--blocks", t->blocks, "--sync", t->sync, "--path",
                          t->path ? t->path : "cuLaunchKernel", "--graph-kernels", "4", "--out",
                          lim_path(lim_kv("w%d.out", id)), NULL};
    return lim_spawn(env, args);
}

static void case_together(void)
{
    enum { T = 4 };
    struct fakecuda_state *gpu[2] = {lim_gpu("mps.state"), lim_gpu("ts.state")};
    pid_t pid[2 * T];
    for (int k = 0; k < T; k++) {
        const struct tenant mps = {.state = "mps.state", .board = "board-mps", .blocks = "200",
                                   .sync = "16", .mps = true};
        const struct tenant ts = {.state = "ts.state", .board = "board-ts", .blocks = "200",
                                  .sync = "16"};
        pid[k] = worker(&mps, k);
        pid[T + k] = worker(&ts, T + k);
    }
    static struct lim_series s[2];
    lim_sample_gpus(gpu, 2, 0, pid, T, 2000, 200, 60, s);
    for (int i = 0; i < 2 * T; i++)
        CHECK_EQ(lim_wait(pid[i]), 0);
    double sum[2] = {0, 0}, starved[2] = {0, 0};
    for (int g = 0; g < 2; g++) {
        for (int k = 0; k < T; k++) {
            double mean, sd;
            lim_print_series(lim_kv("%s tenant %d, 200-block kernels, limit 25%%, share per 200 ms",
                                    g ? "time-sliced" : "MPS", k),
                             &s[g], k);
            lim_stats(&s[g], k, 600, 2000, &mean, &sd);
            sum[g] += mean;
            starved[g] += lim_starved(&s[g], k, 600, 2000);
        }
        printf("%s: together %.1f %% of GPU time (CPU-starved %.1f pts)\n",
               g ? "time-sliced" : "MPS", sum[g], starved[g]);
    }
    CHECK_LE(sum[1], 101);                       /* turns: never more than the GPU */
    CHECK_GE(sum[0] + starved[0], 2 * sum[1]);   /* side by side: at least twice that */
}

/* Case "filling": two MPS clients of GPU-filling kernels (4224 blocks) at
 * 25 + 75, on two simulated GPUs at once: with the default
 * (CUSHARE_MPS_TURNS unset, i.e. filling) they take turns in windows
 * (launches held for their window), with off never. */
static void case_filling(void)
{
    struct fakecuda_state *gpu[2] = {lim_gpu("turns.state"), lim_gpu("off.state")};
    static const char *const state[2] = {"turns.state", "off.state"};
    static const char *const lim[2] = {"25", "75"};
    pid_t pid[4];
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++) {
            const struct tenant t = {.state = state[g], .board = lim_kv("board%d", g),
                                     .blocks = "4224", .sync = "4", .limit = lim[k],
                                     .ns_per_block = "100", .turns = g ? "off" : NULL,
                                     .mps = true};
            pid[g * 2 + k] = worker(&t, g * 2 + k);
        }
    static struct lim_series s[2];
    lim_sample_gpus(gpu, 2, 0, pid, 2, 3000, 200, 60, s);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(lim_wait(pid[i]), 0);
    double mean[2][2], sd;
    long long waits[2][2];
    for (int g = 0; g < 2; g++) {
        for (int k = 0; k < 2; k++) {
            lim_print_series(lim_kv("CUSHARE_MPS_TURNS=%s, 4224-block kernels, limit %s%%",
                                    g ? "off" : "unset (filling)", lim[k]),
                             &s[g], k);
            lim_stats(&s[g], k, 1000, 3000, &mean[g][k], &sd);
            waits[g][k] = lim_stat(lim_path(lim_kv("w%d.out", g * 2 + k)), "window_waits");
        }
        printf("CUSHARE_MPS_TURNS=%s: %.1f%% + %.1f%% (A:B %.3f), launches held for a window "
               "%lld + %lld\n", g ? "off" : "unset (filling)", mean[g][0], mean[g][1],
               mean[g][0] / mean[g][1], waits[g][0], waits[g][1]);
    }
    CHECK_GT(waits[0][0], 0);   /* turns: both wait for their windows */
    CHECK_GT(waits[0][1], 0);
    CHECK_EQ(waits[1][0], 0);   /* off: side by side, no windows */
    CHECK_EQ(waits[1][1], 0);
    CHECK_LE(fabs(mean[0][0] / mean[0][1] / (25.0 / 75.0) - 1), 0.05);
}

static void case_alone(void)
{
    const char *blocks[N] = {"200", "200", "4224", "200"};
    const char *sync[N] = {"16", "16", "2", "16"};
    const char *path[N] = {"cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel", "cuGraphLaunch"};
    struct fakecuda_state *gpu[N];
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        const char *name = lim_kv("gpu%d.state", i);
        gpu[i] = lim_gpu(name);
        const struct tenant t = {.state = name, .board = "board", .blocks = blocks[i],
                                 .sync = sync[i], .path = path[i], .mps = i != 1};
        pid[i] = worker(&t, i);
    }
    static struct lim_series s[N];
    lim_sample_gpus(gpu, N, 0, pid, 1, 2000, 200, 60, s);
    for (int i = 0; i < N; i++)
        CHECK_EQ(lim_wait(pid[i]), 0);

    static const char *const what[N] = {
        "MPS, 200-block kernels (9.5 % of the SMs)", "time-sliced, 200-block kernels",
        "MPS, 4224-block kernels (the whole GPU)", "MPS, graphs of 4 200-block kernels"};
    double mean[N], sd[N], starved[N];
    for (int i = 0; i < N; i++) {
        lim_print_series(lim_kv("%s, limit 25%%, share of GPU time per 200 ms", what[i]), &s[i],
                         0);
        lim_stats(&s[i], 0, 600, 2000, &mean[i], &sd[i]);
        starved[i] = lim_starved(&s[i], 0, 600, 2000);
        printf("  mean %.1f%%, sd %.1f pts, CPU-starved %.1f pts (windows 0.6-2.0 s)\n", mean[i],
               sd[i], starved[i]);
    }
    /* Charged 9.5 % of their time, the small kernels never reach 25 %:
     * they run as the worker launches them (it syncs every 16). */
    CHECK_GE(mean[0] + starved[0], 60);
    CHECK_GE(mean[3] + starved[3], 60);
    CHECK_SHARE_STARVED(mean[1], 25, 3, 5, starved[1]);
    CHECK_SHARE_STARVED(mean[2], 25, 3, 5, starved[2]);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    lim_dir(lim_kv("mps_%s", argv[1]));
    daemon_start();
    if (!strcmp(argv[1], "together"))
        case_together();
    else if (!strcmp(argv[1], "filling"))
        case_filling();
    else
        case_alone();
    daemon_stop();
    return 0;
}
