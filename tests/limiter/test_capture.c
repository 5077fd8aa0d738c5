/*
 * Stream capture under a compute share (docs/limiter.md, "Stream
 * capture"). A worker limited by the ledger captures graphs in every
 * capture mode (global, thread-local, relaxed), plain and into an existing
 * graph, with kernels of three launch paths, a memset, a fork/join over a
 * second stream and a stream-ordered allocation (memory nodes), while a
 * second thread of it launches on its own stream and the watcher harvests.
 * The fake driver enforces the capture rules (tests/fakecuda/README.md):
 * one event of ours recorded into a capture, one query of such an event,
 * or one unsafe call from another thread during a GLOBAL capture, and the
 * capture ends invalidated; the worker then exits non-zero. Every capture
 * must end in a graph, none of our markers may be recorded while it is
 * open, and every captured launch must have passed the limiter untouched.
 * Then the graph is replayed: paced as one unit when it is launched, it
 * gets its share of GPU time.
 *
 *   force 25 and force 50: replay share within the limit;
 *   default 50 (alone on its GPU: pacing released once the watcher looked,
 *   measurement still on): the captures succeed as well.
 */
#include "limiter/lim_test.h"

struct run {
    const char *policy;
    int pct;
};

static const struct run runs[] = {{"force", 25}, {"force", 50}, {"default", 50}};
#define NRUNS (int)(sizeof runs / sizeof runs[0])

static double scale(void)
{
    const char *s = getenv("CS_TEST_SCALE");
    return s && atof(s) > 0 ? atof(s) : 1;
}

/* Waits until every worker has created its replay marker (bounded); a
 * worker that exits before (a capture it could not end) fails the test
 * with its status. */
static void wait_replays(const pid_t *pid)
{
    const int64_t deadline = cs_now_ns() + (int64_t)(30e9 * scale());
    for (int i = 0; i < NRUNS; i++) {
        while (access(lim_path(lim_kv("w%d.out.replay", i)), F_OK) != 0) {
            int st;
            if (waitpid(pid[i], &st, WNOHANG) == pid[i]) {
                fprintf(stderr, "worker %d (%s %d) exited before its replay: status %d\n", i,
                        runs[i].policy, runs[i].pct, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
                exit(1);
            }
            CHECK(cs_now_ns() < deadline);
            cs_sleep_ms(5);
        }
    }
}

int main(void)
{
    lim_dir("capture");
    struct fakecuda_state *gpu[NRUNS];
    pid_t pid[NRUNS];
    for (int i = 0; i < NRUNS; i++) {
        const char *name = lim_kv("gpu%d.state", i);
        gpu[i] = lim_gpu(name);
        const char *env[] = {
            lim_kv("FAKECUDA_STATE=%s", lim_path(name)),
            "FAKECUDA_NS_PER_BLOCK=1000",
            lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("l%d.ledger", i))),
            lim_kv("CUDA_DEVICE_SM_LIMIT=%d", runs[i].pct),
            lim_kv("GPU_CORE_UTILIZATION_POLICY=%s", runs[i].policy),
            lim_kv("CUSHARE_BOARD=%s", lim_path("board")),
            NULL};
        const char *args[] = {"--mode", "capture", "--secs", "3", "--blocks", "200", "--sync",
                              "4", "--out", lim_path(lim_kv("w%d.out", i)), NULL};
        pid[i] = lim_spawn(env, args);
    }
    wait_replays(pid);
    /* Replays of about 0.9 ms each; windows of 200 ms from 0.6 s into the
     * replay (the law's first second settles the estimate). */
    static double share[NRUNS][16];
    static int64_t rq[NRUNS][16];        /* CPU wait at each window's sample */
    const int64_t t0 = cs_now_ns();
    const int nw = 10;
    for (int w = 0; w < nw; w++) {
        int64_t to = t0 + (int64_t)(w + 1) * 200000000ll;
        while (cs_now_ns() < to + 60000000ll)
            cs_sleep_ms(5);
        for (int i = 0; i < NRUNS; i++) {
            share[i][w] = 100.0 * (double)lim_busy(gpu[i], 0, pid[i], to - 200000000ll, to) / 2e8;
            rq[i][w] = lim_rq_wait_ns(pid[i]);
        }
    }
    double mean[NRUNS], starved[NRUNS];
    for (int i = 0; i < NRUNS; i++) {
        CHECK_EQ(lim_wait(pid[i]), 0);
        mean[i] = 0;
        printf("%s %d: graph replay share per 200 ms:", runs[i].policy, runs[i].pct);
        for (int w = 0; w < nw; w++)
            printf(" %.0f", share[i][w]);
        for (int w = 3; w < nw; w++)
            mean[i] += share[i][w] / (nw - 3);
        /* What a CPU-starved worker could not replay is forgiven
         * (lim_starved): windows 3.. span (nw - 3) * 200 ms. */
        starved[i] = 100.0 * (double)(rq[i][nw - 1] - rq[i][2]) / ((nw - 3) * 2e8);
        const char *out = lim_path(lim_kv("w%d.out", i));
        printf("  mean %.1f%%; %lld replays, %lld captured launches untouched, CPU wait %.1f%%\n",
               mean[i], lim_stat(out, "launches"), lim_stat(out, "captured"), starved[i]);
        CHECK_GE(lim_stat(out, "captured"), 6 * 5);
        fakecuda_state_close(gpu[i]);
    }
    /* Measured 24.8-25.0 and 49.7-49.9: 1 point either way. */
    CHECK_SHARE_STARVED(mean[0], 25, 1, 1, starved[0]);
    CHECK_SHARE_STARVED(mean[1], 50, 1, 1, starved[1]);
    return 0;
}
