/*
 * The application's SIGUSR1 handlers still work under cushare. The worker
 * installs one before CUDA init and another after it; raising SIGUSR1
 * calls the one in place each time. Without CUSHARE_HAMI_SIGNALS cushare
 * installs no handler at all; with CUSHARE_HAMI_SIGNALS=1 its handlers
 * (SIGUSR2 suspends, SIGUSR1 resumes, as HAMi-core's) chain to the
 * application's, and a SIGUSR2 parks the next CUDA call until SIGUSR1.
 * Chaining keeps the application's sa_flags and sa_mask: its handler asks
 * for no SA_RESTART and SIGTERM blocked, and gets both with cushare's in
 * front (before, they were forced to SA_RESTART and an empty mask).
 *   limiter_signals_plain / limiter_signals_hami
 */
#include "limiter/lim_test.h"

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const int hami = !strcmp(argv[1], "hami");
    lim_dir(hami ? "signals_hami" : "signals_plain");
    lim_gpu("gpu.state");
    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
                         hami ? "CUSHARE_HAMI_SIGNALS=1" : "CUSHARE_HAMI_SIGNALS=0",
                         "CUDA_DEVICE_SM_LIMIT=50", NULL};
    const char *args[] = {"--mode", "signals", "--out", lim_path("w.out"), NULL};
    pid_t pid = lim_spawn(env, args);
    int rc = lim_wait(pid);
    printf("signals (%s): worker exit %d, app handler before init called %lld times, after "
           "init %lld\n", argv[1], rc, lim_stat(lim_path("w.out"), "usr1_before"),
           lim_stat(lim_path("w.out"), "usr1_after"));
    CHECK_EQ(rc, 0);
    return 0;
}
