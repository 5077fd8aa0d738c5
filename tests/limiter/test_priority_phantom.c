/*
 * A lower-priority tenant's time-slice is no unlimited tenant
 * (docs/limiter.md, "Policy and priority"; fair.c, entitlement()).
 *
 * While two contexts time-slice, NVML's device utilisation counts busy
 * time that no tenant's own measurement explains. On the fake that is the
 * cost of a context switch (FAKECUDA_CTX_SWITCH_US on a time-slicing
 * device, FAKECUDA_TIMESLICE_US): busy for NVML, nobody's work, outside
 * every event pair. The watcher hands it to the decision as busy time no
 * board entry explains.
 *
 * H (CUDA_TASK_PRIORITY 0, limit 25) is launch-bound: a 1.5 ms kernel, a
 * sync, 1 ms on the CPU, above its floor. L (priority 1, limit 75) keeps
 * the GPU saturated and yields to H. Each launch of H costs a switch to H
 * and one back to L, so the device is all busy while the two tenants'
 * uses explain much less of it. The floors of H and L claim the whole
 * device: nobody is owed, so H must never be paced. (Counting only floors
 * of H's own priority, that busy time was an unlimited tenant owed the
 * 75 % nobody claimed, and H, over the 25 % it was entitled to beside it,
 * was engaged as contended and held.)
 *
 *   1. L starts alone and decides once (it is on the board), then H.
 *   2. H's launches are judged once H says it sees L busy (it publishes
 *      its launch times for L) and its watcher has made JUDGE_FROM_TICKS
 *      decisions. Until it has seen half a second a tenant is taken as
 *      filling the GPU, and a filling tenant over its floor keeps a short
 *      queue while much busy time is unexplained (fair.c: the guard for a
 *      waiting rival), held for a second: another rule than the floors
 *      this test is about, and H's start may show it.
 *   3. After JUDGED_TICKS more decisions of H: no judged launch found H's
 *      pacing engaged and none slept; and the fake shows the busy time
 *      nobody explains over that span (switches at least the share of
 *      busy time the decision takes for an unlimited tenant that wants
 *      more), so the verdict is not vacuous. How saturated the device
 *      was is printed, not judged: a CPU-starved L leaves it idle.
 *
 * Every wait is for a condition (a log line, a number of the watcher's
 * decisions), with scaled deadlines; a slow CPU only delays them.
 */
#include "limiter/lim_test.h"

#include "limiter/fair.h"

#define JUDGE_FROM_TICKS 25 /* the start's hold (step 2) over, with room to spare */
#define JUDGED_TICKS 12

static const char **tenant(const char *name, const char *prio, const char *limit)
{
    const char **env = calloc(16, sizeof *env);
    int n = 0;
    env[n++] = lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state"));
    env[n++] = "FAKECUDA_NS_PER_BLOCK=1000";
    env[n++] = "FAKECUDA_UTIL_WINDOW_MS=300";
    env[n++] = "FAKECUDA_TIMESLICE_US=2000";
    env[n++] = "FAKECUDA_CTX_SWITCH_US=1000";
    env[n++] = lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("%s.ledger", name)));
    env[n++] = "GPU_CORE_UTILIZATION_POLICY=default";
    env[n++] = lim_kv("CUDA_DEVICE_SM_LIMIT=%s", limit);
    env[n++] = lim_kv("CUDA_TASK_PRIORITY=%s", prio);
    env[n++] = "CUSHARE_LOG_LEVEL=info";
    env[n++] = lim_kv("CUSHARE_BOARD=%s", lim_path("board"));
    return env;
}

static const char **worker(const char *name, const char *blocks, const char *sync,
                           const char *gap_us, bool trace)
{
    const char **a = calloc(20, sizeof *a);
    const char *v[] = {"--blocks", blocks, "--sync", sync, "--gap-us", gap_us,
                       "--log", lim_path(lim_kv("%s.log", name)),
                       "--stop", lim_path(lim_kv("%s.stop", name)),
                       "--out", lim_path(lim_kv("%s.out", name)),
                       trace ? "--trace" : NULL, lim_path(lim_kv("%s.trace", name)), NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* ---- following H's trace (lim_worker --trace) ----------------------------- */

/* H's watcher has completed `ticks` decisions (as its latest launch saw). */
static bool decided(struct lim_trace *t, uint64_t ticks)
{
    lim_trace_follow(t);
    return t->n && t->l[t->n - 1].ticks >= ticks;
}

static void print_lines(const char *file, const char *what)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (strstr(line, what))
            fprintf(stderr, "  %s", line);
    fclose(f);
}

int main(void)
{
    lim_dir("priority_phantom");
    lim_stop_at_exit("h", "l");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *hlog = lim_path("h.log"), *llog = lim_path("l.log");
    struct lim_trace h = {.path = lim_path("h.trace")};

    /* 1. L first, so H's first decisions already see it on the board. */
    pid_t lp = lim_spawn(tenant("l", "1", "75"), worker("l", "500", "8", "0", false));
    lim_ready(lp);
    CS_WAIT_FOR(lim_log_says(llog, "device 0: pacing"), 20000, "L's first decision");
    pid_t hp = lim_spawn(tenant("h", "0", "25"), worker("h", "1500", "1", "1000", true));
    lim_ready(hp);

    /* 2. H sees L busy beside it, and has decided long enough. */
    CS_WAIT_FOR(lim_log_says(hlog, "publishing launch times"), 20000, "H seeing L busy on the board");
    const int64_t seen = cs_now_ns();
    CS_WAIT_FOR(decided(&h, JUDGE_FROM_TICKS), 20000, "H's first decisions");
    CS_WAIT_FOR(decided(&h, JUDGE_FROM_TICKS + JUDGED_TICKS), 20000, "H's judged decisions");
    lim_trace_follow(&h);

    /* 3. Never paced. */
    int first = -1, judged = 0, engaged = 0, slept = 0;
    for (int i = 0; i < h.n; i++) {
        const struct lim_launch *x = &h.l[i];
        if (x->entry < seen || x->ticks < JUDGE_FROM_TICKS)
            continue;
        if (first < 0)
            first = i;
        judged++;
        engaged += (x->engaged & 1) != 0;
        slept += i > 0 && x->sleeps != h.l[i - 1].sleeps;
    }
    CHECK(first > 0);
    const int64_t from = h.l[first].entry, to = h.l[h.n - 1].ret;
    double span = (double)(to - from);
    double all = 100.0 * (double)lim_busy(gpu, 0, 0, from, to) / span;
    double sw = 100.0 * (double)lim_busy(gpu, 0, -1, from, to) / span;
    double hs = 100.0 * (double)lim_busy(gpu, 0, hp, from, to) / span;
    double ls = 100.0 * (double)lim_busy(gpu, 0, lp, from, to) / span;
    printf("phantom: %d launches of H judged over %.0f ms: device %.1f %% busy, H %.1f %%, "
           "L %.1f %%, switches %.1f %%; H engaged at %d, slept in %d\n", judged, span / 1e6,
           all, hs, ls, sw, engaged, slept);
    if (engaged || slept) {
        fprintf(stderr, "H was paced beside the lower-priority tenant; it logged:\n");
        print_lines(hlog, "pacing engaged");
    }
    CHECK_EQ(engaged, 0);
    CHECK_EQ(slept, 0);
    CHECK_GE(judged, 4 * JUDGED_TICKS); /* a decision's engagement shows in its launches */
    CHECK(sw * 100 >= CS_FAIR_FOREIGN_GREEDY_PM);

    lim_stop_listed();
    CHECK_EQ(cs_exit_code(cs_wait_child(hp, 20000)), 0);
    CHECK_EQ(cs_exit_code(cs_wait_child(lp, 20000)), 0);
    printf("ok\n");
    return 0;
}
