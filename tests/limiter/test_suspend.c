/*
 * Suspend and resume (docs/limiter.md): `cushare suspend LEDGER` parks
 * every process of the tenant at its next GPU call and reports when all
 * are parked; nothing reaches the GPU until `cushare resume LEDGER`. It
 * works for tenants without any limit (the checkpoint is in every
 * wrapper). A process that makes no GPU call cannot park: suspend says so
 * and fails after its timeout, leaving the request in place.
 * Workers run until a stop file and say when they have launched, so every
 * step waits for a condition; the one fixed interval is the 600 ms during
 * which a suspended tenant must leave the GPU idle (an absence can only be
 * observed over time).
 */
#include "limiter/lim_test.h"

static int cli(const char *args, const char *out)
{
    return lim_shell("'%s/cushare' %s > '%s' 2>&1", getenv("CS_BUILD_DIR"), args, out);
}

static void show(const char *file)
{
    char cmd[5000];
    snprintf(cmd, sizeof cmd, "cat '%s'", file);
    fflush(stdout);
    int rc = system(cmd); /* diagnostics only: its status does not matter */
    (void)rc;
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
}

int main(void)
{
    lim_dir("suspend");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *ledger = lim_path("t.ledger");
    const char *stop = lim_path("stop");
    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         "FAKECUDA_NS_PER_BLOCK=1000",
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", ledger), NULL};
    pid_t pid[2];
    const char *ready[2];
    for (int i = 0; i < 2; i++) {
        ready[i] = lim_path(lim_kv("w%d.ready", i));
        const char *args[] = {"--stop", stop, "--ready", ready[i], "--blocks", "1000", "--sync",
                              "4", "--out", lim_path(lim_kv("w%d.out", i)), NULL};
        pid[i] = lim_spawn(env, args);
    }
    CS_WAIT_FOR(exists(ready[0]) && exists(ready[1]), 10000, "both workers launching");
    int64_t t_s = cs_now_ns();
    int rc = cli(lim_kv("suspend --timeout %.0f '%s'", ceil(3 * cs_test_scale()), ledger),
                 lim_path("suspend.txt"));
    show(lim_path("suspend.txt"));
    CHECK_EQ(rc, 0);
    FILE *f = fopen(lim_path("suspend.txt"), "r");
    char line[512] = "";
    CHECK(f && fgets(line, sizeof line, f));
    fclose(f);
    CHECK_CONTAINS(line, "2 of 2 processes parked");
    int64_t t_parked = cs_now_ns();
    cs_sleep_ms(600);                   /* the observation window, not a wait */
    /* Work queued before the request (at most 4 launches of 1 ms) may
     * still run on the simulated device for a few ms. */
    uint64_t busy = lim_busy(gpu, 0, 0, t_parked + 50000000ll, cs_now_ns());
    printf("suspend took %.0f ms; GPU busy while suspended: %.1f ms in %.0f ms\n",
           (double)(t_parked - t_s) / 1e6, (double)busy / 1e6,
           (double)(cs_now_ns() - t_parked - 50000000ll) / 1e6);
    CHECK_LE(busy, 5000000);
    rc = cli(lim_kv("resume '%s'", ledger), lim_path("resume.txt"));
    show(lim_path("resume.txt"));
    CHECK_EQ(rc, 0);
    int64_t t_r = cs_now_ns();
    /* Both work again: each gets 20 ms of GPU time after the resume. */
    CS_WAIT_FOR(lim_busy(gpu, 0, pid[0], t_r, cs_now_ns()) >= 20000000 &&
                lim_busy(gpu, 0, pid[1], t_r, cs_now_ns()) >= 20000000, 10000, "work after resume");
    printf("GPU busy after resume: %.0f ms in %.0f ms\n",
           (double)lim_busy(gpu, 0, 0, t_r, cs_now_ns()) / 1e6, cs_ms_since(t_r));
    touch(stop);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(lim_wait(pid[i]), 0);
        CHECK_GE(lim_stat(lim_path(lim_kv("w%d.out", i)), "parks"), 1);
    }

    /* A process that makes no GPU call does not park. */
    const char *stop2 = lim_path("stop2"), *idle_ready = lim_path("idle.ready");
    const char *idle_args[] = {"--mode", "idle", "--stop", stop2, "--ready", idle_ready, NULL};
    pid_t idle = lim_spawn(env, idle_args);
    CS_WAIT_FOR(exists(idle_ready), 10000, "the idle worker's context");
    rc = cli(lim_kv("suspend --timeout 1 '%s'", ledger), lim_path("suspend2.txt"));
    show(lim_path("suspend2.txt"));
    CHECK_EQ(rc, 1);
    f = fopen(lim_path("suspend2.txt"), "r");
    CHECK(f && fgets(line, sizeof line, f));
    fclose(f);
    CHECK_CONTAINS(line, "0 of 1 processes parked");
    CHECK_EQ(cli(lim_kv("resume '%s'", ledger), lim_path("resume2.txt")), 0);
    touch(stop2);
    CHECK_EQ(lim_wait(idle), 0);
    CHECK_EQ(cli("suspend", lim_path("usage.txt")), 2);
    return 0;
}
