/*
 * Concurrent devices (issue 15; docs/limiter.md, "Concurrent devices
 * (MPS)"): when the process's contexts are MPS clients, a launch is
 * charged its GPU time times the part of the SMs its grid can hold. Four
 * simulated GPUs side by side, one worker each at --sm 25 (force):
 *
 *   0  MPS client, small kernels (200 blocks of 128 threads: 200 of the
 *      fake's 132 SMs x 16 resident blocks = 9.5 % of the GPU): charged
 *      9.5 % of their time, so never held back: far over 25 % of GPU time;
 *   1  the same kernels without MPS (time-sliced): held to 25 %;
 *   2  MPS client, GPU-filling kernels (4224 blocks): held to 25 %;
 *   3  MPS client, the small kernels captured into a graph and replayed:
 *      the exec's occupancy is read at instantiation, as 0.
 *
 * The fake MPS control daemon (tests/fakecuda/fake_mps_control.c) serves
 * the clients; worker 1 gets an empty pipe directory, so it is an ordinary
 * process, as with the real driver when no daemon runs.
 */
#include "limiter/lim_test.h"

#define N 4

int main(void)
{
    lim_dir("mps");
    const char *ctl = getenv("CS_FAKE_MPS_CONTROL");
    CHECK(ctl != NULL);
    const char *pipe = lim_path("pipe"), *log = lim_path("log"), *nopipe = lim_path("nopipe");
    CHECK(mkdir(pipe, 0700) == 0 && mkdir(log, 0700) == 0 && mkdir(nopipe, 0700) == 0);
    CHECK_EQ(lim_shell("CUDA_MPS_PIPE_DIRECTORY='%s' CUDA_MPS_LOG_DIRECTORY='%s' '%s' -d", pipe,
                       log, ctl),
             0);

    const char *blocks[N] = {"200", "200", "4224", "200"};
    const char *sync[N] = {"16", "16", "2", "16"};
    const char *path[N] = {"cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel", "cuGraphLaunch"};
    struct fakecuda_state *gpu[N];
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "gpu%d.state", i);
        gpu[i] = lim_gpu(name);
        const char *env[] = {
            lim_kv("FAKECUDA_STATE=%s", lim_path(name)),
            "FAKECUDA_NS_PER_BLOCK=1000",
            lim_kv("CUDA_MPS_PIPE_DIRECTORY=%s", i == 1 ? nopipe : pipe),
            lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("l%d.ledger", i))),
            "CUDA_DEVICE_SM_LIMIT=25",
            "GPU_CORE_UTILIZATION_POLICY=force",
            lim_kv("CUSHARE_BOARD=%s", lim_path("board")),
            NULL};
        const char *args[] = {"--blocks", blocks[i], "--sync", sync[i], "--path", path[i],
                              "--out", lim_path(lim_kv("w%d.out", i)), NULL};
        pid[i] = lim_spawn(env, args);
    }
    static struct lim_series s[N];
    for (int i = 0; i < N; i++)
        lim_ready(pid[i]);
    const int64_t t0 = cs_now_ns();
    for (int i = 0; i < N; i++)
        lim_note_rq(&s[i], 0, -1, pid[i]);
    for (int w = 0; w < 10; w++) {
        int64_t to = t0 + (int64_t)(w + 1) * 200000000ll;
        while (cs_now_ns() < to + 60000000ll)
            cs_sleep_ms(5);
        for (int i = 0; i < N; i++) {
            s[i].t[w] = to - t0;
            s[i].share[0][w] =
                100.0 * (double)lim_busy(gpu[i], 0, pid[i], to - 200000000ll, to) / 2e8;
            lim_note_rq(&s[i], 0, w, pid[i]);
            s[i].n = w + 1;
        }
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ(lim_wait(pid[i]), 0);
    CHECK_EQ(lim_shell("echo quit | CUDA_MPS_PIPE_DIRECTORY='%s' '%s' >/dev/null", pipe, ctl), 0);

    static const char *const what[N] = {
        "MPS, 200-block kernels (9.5 % of the SMs)", "time-sliced, 200-block kernels",
        "MPS, 4224-block kernels (the whole GPU)", "MPS, graphs of 200-block kernels"};
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
    return 0;
}
