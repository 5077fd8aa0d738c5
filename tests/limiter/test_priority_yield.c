/*
 * Yield on activity (docs/limiter.md, "Policy and priority"): a tenant
 * held for priority launches only once every busy higher-priority tenant
 * has launched nothing for the quiet period Q (CUSHARE_PRIORITY_QUIET_US),
 * and runs freely again once that tenant has gone.
 *
 * H (CUDA_TASK_PRIORITY 0) is launch-bound: a 1 ms kernel, a sync, 4 ms on
 * the CPU (gaps longer than Q, so L has room). L (priority 1) saturates the
 * GPU. Both trace every launch (lim_worker --trace: entry and return,
 * CLOCK_MONOTONIC, and L's limiter counters after it).
 *
 *   1. The test waits for L's log to say that its launch path yields to
 *      one tenant (said only while its pacing is engaged for priority),
 *      and for a non-zero launch stamp in the board file (H publishes). From then on
 *      (t_ready) every launch of H is stamped, at a time no earlier than
 *      its entry, and every launch of L looks at the stamps before it goes.
 *   2. Verdict from the traces: a launch of L that entered after a launch
 *      of H (entered after t_ready) had returned found that stamp, so it
 *      returned at least Q after that launch of H entered. Launches that
 *      entered before t_ready are not judged (H may not publish yet, L not
 *      yield yet). L must also have launched in H's gaps (it fills them)
 *      and have been held by yielding at least once.
 *   3. H stops. Once L's log says its pacing is released, L's later
 *      launches are never held again, neither by yielding nor by any
 *      pacing sleep: the GPU H left is L's (work conservation).
 *
 * Nothing here depends on timing: a slow CPU delays launches and the
 * stamps with them; every wait is for a condition, with scaled deadlines.
 *
 *   pod   (limiter_priority_yield) both in one pod, one board file: L
 *         reads H's stamp through its own mapping of that file.
 *   pods  (limiter_priority_yield_pods) H in a mount namespace of its own
 *         (another pod, so another board file, as for any other user): L
 *         reads H's stamp with pread through a checked descriptor. Needs
 *         root (unshare -m); skipped, visibly, otherwise.
 *   kept-out  (limiter_priority_kept_out) H launches more often than Q (a
 *         0.2 ms kernel, a sync, 0.3 ms asleep), so L finds no quiet gap
 *         and uses nothing. L's pacing still holds it, and a held tenant
 *         is busy on the board: H keeps publishing its launch times for as
 *         long as L waits, and L stays out. Judged over H's next 6000
 *         launches (at least 3 s, three times what L takes to fall under
 *         the board's 2 % share): H never stops publishing and no launch
 *         of L breaks step 2's rule. Then step 3. Fails where only a share
 *         makes a tenant busy: H stops publishing about a second after L
 *         is kept out and L runs on H's last, stale stamp.
 */
#include <dirent.h>
#include <fcntl.h>

#include "limiter/lim_test.h"

#define QUIET_US 2000
#define QUIET_NS (QUIET_US * 1000ll)
#define STAMPS_OFF 36864 /* board layout 3 (board.h), pinned by limiter_board */

static const char **tenant(const char *name, const char *prio)
{
    const char **env = calloc(16, sizeof *env);
    int n = 0;
    env[n++] = lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state"));
    env[n++] = "FAKECUDA_NS_PER_BLOCK=1000";
    env[n++] = "FAKECUDA_UTIL_WINDOW_MS=300";
    env[n++] = lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path(lim_kv("%s.ledger", name)));
    env[n++] = "GPU_CORE_UTILIZATION_POLICY=default";
    env[n++] = "CUDA_DEVICE_SM_LIMIT=50";
    env[n++] = lim_kv("CUDA_TASK_PRIORITY=%s", prio);
    env[n++] = lim_kv("CUSHARE_PRIORITY_QUIET_US=%d", QUIET_US);
    env[n++] = "CUSHARE_LOG_LEVEL=info";
    env[n++] = lim_kv("CUSHARE_BOARD=%s", lim_path("board"));
    return env;
}

static const char **worker(const char *name, const char *blocks, const char *sync,
                           const char *gap_us)
{
    const char **a = calloc(20, sizeof *a);
    const char *v[] = {"--blocks", blocks, "--sync", sync, "--gap-us", gap_us,
                       "--trace", lim_path(lim_kv("%s.trace", name)),
                       "--log", lim_path(lim_kv("%s.log", name)),
                       "--stop", lim_path(lim_kv("%s.stop", name)),
                       "--out", lim_path(lim_kv("%s.out", name)), NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* A worker in a mount namespace of its own (another pod), under the
 * preload, as lim_spawn starts one. */
static pid_t spawn_in_own_pod(const char *const *env, const char *const *args)
{
    const char *argv[40] = {"/usr/bin/unshare", "-m", "--propagation", "private",
                            lim_kv("%s/limiter_worker", getenv("CS_BUILD_DIR"))};
    int n = 5;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    const char *full[24] = {lim_kv("LD_PRELOAD=%s", getenv("CUSHARE_LIBRARY"))};
    int m = 1;
    for (int i = 0; env[i] && m < 23; i++)
        full[m++] = env[i];
    return cs_spawn((char *const *)argv, (char *const *)full);
}

/* Board files in the test directory. */
static int board_files(void)
{
    DIR *dir = opendir(lim_dir_path);
    CHECK(dir != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir)))
        n += !strncmp(de->d_name, "board.", 6);
    closedir(dir);
    return n;
}

/* ---- following a worker's trace ----------------------------------------- */

/* Index of t's first launch of those that entered at or after `from`
 * (t->n when none did). */
static int first_since(const struct lim_trace *t, int64_t from)
{
    int first = t->n;
    while (first > 0 && t->l[first - 1].entry >= from)
        first--;
    return first;
}

/* Launches of t that entered at or after `from`, as far as it has been
 * written. */
static int entered_since(struct lim_trace *t, int64_t from)
{
    lim_trace_follow(t);
    return t->n - first_since(t, from);
}

/* ---- conditions ----------------------------------------------------------- */

static long log_size(const char *file)
{
    struct stat st;
    CHECK(stat(file, &st) == 0);
    return (long)st.st_size;
}

/* Some launch stamp in the test's board file(s) is not zero. */
static bool board_stamped(void)
{
    DIR *dir = opendir(lim_dir_path);
    CHECK(dir != NULL);
    bool stamped = false;
    struct dirent *de;
    while (!stamped && (de = readdir(dir))) {
        if (strncmp(de->d_name, "board.", 6))
            continue;
        int fd = openat(dirfd(dir), de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        uint64_t st[512];
        if (pread(fd, st, sizeof st, STAMPS_OFF) == (ssize_t)sizeof st)
            for (int i = 0; i < 512 && !stamped; i++)
                stamped = st[i] != 0;
        close(fd);
    }
    closedir(dir);
    return stamped;
}

/* ---- verdicts ------------------------------------------------------------- */

/* Step 2: every launch of L entered since `from` after some launch of H
 * (entered since `from`) had returned, returned at least Q after the
 * latest such launch of H entered. Returns how many launches of L were
 * judged. */
static int judge_yield(const struct lim_trace *h, const struct lim_trace *l, int64_t from)
{
    int judged = 0, bad = 0, j = 0, from_h;
    int64_t latest = -1, margin = INT64_MAX; /* entry of the latest H returned before */
    /* Launches of H, in order, by return: each launch's return follows the
     * one before (one thread), so a single pass does. */
    while (j < h->n && h->l[j].entry < from)
        j++;
    from_h = j;
    for (int i = 0; i < l->n; i++) {
        const struct lim_launch *x = &l->l[i];
        if (x->entry < from)
            continue;
        while (j < h->n && h->l[j].ret < x->entry)
            latest = h->l[j++].entry;
        if (latest < 0)
            continue;
        judged++;
        int64_t m = x->ret - (latest + QUIET_NS);
        if (m < margin)
            margin = m;
        if (m < 0 && bad++ < 5)
            fprintf(stderr, "L's launch %d (entered %.3f ms, returned %.3f ms) went %.3f ms "
                    "after H's launch that entered at %.3f ms: under the quiet period\n", i,
                    (double)(x->entry - from) / 1e6, (double)(x->ret - from) / 1e6,
                    (double)(x->ret - latest) / 1e6, (double)(latest - from) / 1e6);
    }
    printf("yield: %d launches of L judged against %d of H, %d under the quiet period, "
           "least margin %.3f ms\n", judged, h->n - from_h, bad,
           judged ? (double)margin / 1e6 : 0.0);
    CHECK_EQ(bad, 0);
    return judged;
}

/* Step 3: L's launches that entered since `from` were never held: its
 * counters stand where the launch before them left them. */
static void judge_free(const struct lim_trace *l, int64_t from)
{
    int first = first_since(l, from);
    CHECK(first > 0 && first < l->n);
    const struct lim_launch *base = &l->l[first - 1];
    for (int i = first; i < l->n; i++) {
        CHECK_EQ(l->l[i].quiet_waits, base->quiet_waits);
        CHECK_EQ(l->l[i].sleeps, base->sleeps);
    }
    printf("released: %d launches of L after the release, none held\n", l->n - first);
}

/* Step 3: H has gone; once L's log says its pacing is released (after
 * `before_stop`), L's later launches are never held. */
static void released_runs_free(struct lim_trace *l, const char *llog, long before_stop, pid_t lp)
{
    CS_WAIT_FOR(lim_log_says_after(llog, "pacing released", before_stop), 20000,
                "L's pacing released after H left");
    const int64_t released = cs_now_ns();
    CS_WAIT_FOR(entered_since(l, released) >= 200, 20000, "launches of L after its release");
    lim_stop("l");
    CHECK_EQ(cs_exit_code(cs_wait_child(lp, 20000)), 0);
    lim_trace_follow(l);
    judge_free(l, released);
}

/* Whether the trace's launches entered since `from` include one held by
 * yielding: its quiet_waits exceed those before it. */
static bool yield_held(const struct lim_trace *t, int64_t from)
{
    int first = first_since(t, from);
    return first > 0 && t->l[t->n - 1].quiet_waits > t->l[first - 1].quiet_waits;
}

/* H (priority 0: kernels of `h_blocks`, a sync each, `h_gap_us` asleep;
 * in a pod of its own when `own_pod`) and L (priority 1, saturating) in
 * a fresh directory `dir`, both ready. */
static void start_pair(const char *dir, bool own_pod, const char *h_blocks, const char *h_gap_us,
                       pid_t *hp, pid_t *lp)
{
    lim_dir(dir);
    lim_stop_at_exit("h", "l");
    lim_gpu("gpu.state");
    const char **h_args = worker("h", h_blocks, "1", h_gap_us);
    *hp = own_pod ? spawn_in_own_pod(tenant("h", "0"), h_args)
                  : lim_spawn(tenant("h", "0"), h_args);
    *lp = lim_spawn(tenant("l", "1"), worker("l", "500", "8", "0"));
    lim_ready(*hp);
    lim_ready(*lp);
}

/* Step 1: L yields to H and H publishes (L says it yields only while its
 * pacing is engaged for priority; "pacing engaged (priority" is no
 * condition: L may engage as contended first, before H is on the board,
 * and only a change of engagement is logged, not of reason). Returns
 * t_ready. */
static int64_t wait_yielding(const char *llog)
{
    CS_WAIT_FOR(lim_log_says(llog, "yielding on activity to 1 busy higher-priority tenant"), 20000,
                "L yielding to H's launches");
    CS_WAIT_FOR(board_stamped(), 20000, "H's launch stamps on the board");
    return cs_now_ns();
}

/* kept-out: L waits through all of H's activity, and H publishes for it
 * throughout. */
static int kept_out(void)
{
    pid_t hp, lp;
    start_pair("priority_kept_out", false, "200", "300", &hp, &lp);
    struct lim_trace h = {.path = lim_path("h.trace")}, l = {.path = lim_path("l.trace")};
    const char *hlog = lim_path("h.log"), *llog = lim_path("l.log");
    const int64_t ready = wait_yielding(llog);
    long h_ready = log_size(hlog);
    CS_WAIT_FOR(entered_since(&h, ready) >= 6000, 60000, "6000 launches of H since L yields");
    CHECK(!lim_log_says_after(hlog, "stopped publishing", h_ready));
    CHECK(!lim_log_says_after(llog, "not yielding", 0));

    long before_stop = log_size(llog);
    lim_stop("h");
    CHECK_EQ(cs_exit_code(cs_wait_child(hp, 20000)), 0);
    lim_trace_follow(&h);
    lim_trace_follow(&l);
    judge_yield(&h, &l, ready);
    CHECK(l.n > 0 && yield_held(&l, ready));
    released_runs_free(&l, llog, before_stop, lp);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "kept-out"))
        return kept_out();
    bool pods = argc > 1 && !strcmp(argv[1], "pods");
    if (argc > 1 && !pods && strcmp(argv[1], "pod"))
        return 2;
    if (pods)
        cs_require_root("another pod is another mount namespace (unshare -m)");
    pid_t hp, lp;
    start_pair(pods ? "priority_yield_pods" : "priority_yield", pods, "1000", "4000", &hp, &lp);
    struct lim_trace h = {.path = lim_path("h.trace")}, l = {.path = lim_path("l.trace")};
    const char *hlog = lim_path("h.log"), *llog = lim_path("l.log");

    /* 1. L yields to H; H publishes. */
    const int64_t ready = wait_yielding(llog);
    CHECK_EQ(board_files(), pods ? 2 : 1);
    CS_WAIT_FOR(entered_since(&h, ready) >= 60 && entered_since(&l, ready) >= 200, 30000,
                "launches of H and of L (L filling H's gaps) since both yield and stamps");

    /* 2. H goes; then every launch of L so far is judged. What L logs
     * from here on is about H's absence (it may have been released and
     * engaged again while the two started). */
    long before_stop = log_size(llog);
    lim_stop("h");
    CHECK_EQ(cs_exit_code(cs_wait_child(hp, 20000)), 0);
    lim_trace_follow(&h);
    lim_trace_follow(&l);
    int judged = judge_yield(&h, &l, ready);
    CHECK_GE(judged, 200);
    CHECK(yield_held(&l, ready));

    /* 3. Released, L runs freely. */
    released_runs_free(&l, llog, before_stop, lp);
    CHECK(lim_log_says(hlog, "publishing launch times"));
    printf("ok\n");
    return 0;
}
