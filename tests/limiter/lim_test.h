/*
 * Harness of the limiter tests (tests/limiter.cmake). A test is a parent
 * that starts limiter_worker processes under the preloaded libcushare.so
 * over tests/fakecuda and measures, from the fake's shared device
 * timeline, which share of GPU time each worker actually got, window by
 * window. Each test uses its own fake state file (its own simulated GPUs),
 * ledgers and node board under $CS_BUILD_DIR/tmp/limiter/<test>/, so tests
 * can run in parallel.
 */
#ifndef CS_TESTS_LIM_TEST_H
#define CS_TESTS_LIM_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fakecuda/fakecuda_state.h"

static char lim_dir_path[4096];

/* $CS_BUILD_DIR/tmp/limiter/<name>/, emptied. Returns the path. */
static inline const char *lim_dir(const char *name)
{
    const char *b = getenv("CS_BUILD_DIR");
    CHECK(b != NULL);
    char parent[2048];
    snprintf(parent, sizeof parent, "%s/tmp/limiter", b);
    CHECK(mkdir(parent, 0755) == 0 || errno == EEXIST);
    snprintf(lim_dir_path, sizeof lim_dir_path, "%s/%s", parent, name);
    cs_rmtree(lim_dir_path);
    CHECK(mkdir(lim_dir_path, 0755) == 0);
    return lim_dir_path;
}

/* "<test dir>/<file>", alive for the whole test. (It was a ring of 16
 * static buffers: limiter_suspend kept its ledger's path past 16 more
 * calls and then suspended "suspend2.txt", whose refusal passed for the
 * idle process not parking.) */
static inline const char *lim_path(const char *file)
{
    char *p = malloc(4200);
    CHECK(p != NULL);
    snprintf(p, 4200, "%s/%s", lim_dir_path, file);
    return p;
}

/* A fresh simulated GPU set: the state file `name` in the test directory.
 * The environment of the parent (FAKECUDA_DEVICES...) shapes it. */
static inline struct fakecuda_state *lim_gpu(const char *name)
{
    struct fakecuda_state *s = fakecuda_state_open(lim_path(name));
    CHECK(s != NULL);
    return s;
}

/* "NAME=value" strings that live for the test. */
static inline const char *lim_kv(const char *fmt, ...)
{
    char *p = malloc(4300);
    CHECK(p != NULL);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, 4300, fmt, ap);
    va_end(ap);
    return p;
}

#define LIM_MAXREADY 64
static pid_t lim_ready_pid[LIM_MAXREADY];
static const char *lim_ready_file[LIM_MAXREADY];
static int lim_nready;

/* A worker: environment assignments (NULL-terminated) and arguments
 * (NULL-terminated, without the program). Runs under the preload. Without
 * --secs, --count or --stop it runs until lim_wait. */
static inline pid_t lim_spawn(const char *const *env, const char *const *args)
{
    const char *b = getenv("CS_BUILD_DIR");
    const char *lib = getenv("CUSHARE_LIBRARY");
    CHECK(b && lib);
    char prog[4200];
    snprintf(prog, sizeof prog, "%s/limiter_worker", b);
    const char *argv[64] = {prog};
    int n = 1;
    bool timed = false, ready = false, launches = true;
    for (int i = 0; args && args[i] && n < 59; i++) {
        timed |= !strcmp(args[i], "--secs") || !strcmp(args[i], "--count") ||
                 !strcmp(args[i], "--stop");
        ready |= !strcmp(args[i], "--ready");
        launches &= strcmp(args[i], "--mode") != 0;
        argv[n++] = args[i];
    }
    /* A launching worker says when its first launch returned (lim_ready). */
    const char *ready_path = NULL;
    if (!ready && launches && lim_nready < LIM_MAXREADY) {
        ready_path = lim_path(lim_kv("ready.%d", lim_nready));
        unlink(ready_path);
        argv[n++] = "--ready";
        argv[n++] = ready_path;
    }
    /* No end of its own: it runs until lim_wait, so it outlives any
     * sampling however late the CPU let this test start sampling. */
    if (!timed) {
        unlink(lim_path("stop"));
        argv[n++] = "--stop";
        argv[n++] = lim_path("stop");
    }
    /* The test's own assignments come last and so win. */
    const char *full_env[72] = {lim_kv("LD_PRELOAD=%s", lib),
                                lim_kv("CUSHARE_LOG_LEVEL=%s", getenv("LIM_LOG") ? getenv("LIM_LOG") : "warn")};
    int m = 2;
    for (int i = 0; env && env[i] && m < 71; i++)
        full_env[m++] = env[i];
    pid_t pid = cs_spawn((char *const *)argv, (char *const *)full_env);
    cs_prefer_cpu(pid);                 /* its share is what we measure */
    if (ready_path) {
        lim_ready_pid[lim_nready] = pid;
        lim_ready_file[lim_nready++] = ready_path;
    }
    return pid;
}

/* Waits (scaled) until worker pid has launched, if lim_spawn asked it to
 * say so; other pids (the test itself) return at once. Sampling starts
 * after this, so its windows count from when the workers run, however
 * late a starved CPU let them start. */
static inline void lim_ready(pid_t pid)
{
    for (int i = 0; i < lim_nready; i++)
        if (lim_ready_pid[i] == pid)
            CS_WAIT_FOR(access(lim_ready_file[i], F_OK) == 0, 20000, "a worker's first launch");
}

/* A worker's exit code (128 + signal); one that outlives the limiter
 * tests' CTest timeout is killed and counts as -1. */
static inline int lim_wait(pid_t pid)
{
    FILE *f = fopen(lim_path("stop"), "w");   /* ends workers without --secs */
    CHECK(f != NULL);
    fclose(f);
    return cs_exit_code(cs_wait_child(pid, 60000));
}

/* Runs `cmd` (a shell command line) and returns its exit status. */
static inline int lim_shell(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Busy ns of `pid` (0: anyone) on device d of the fake in [from, to). */
static inline uint64_t lim_busy(struct fakecuda_state *s, int d, int pid, int64_t from, int64_t to)
{
    return fakecuda_busy_in_window(s, d, pid, from > 0 ? (uint64_t)from : 0,
                                   to > 0 ? (uint64_t)to : 0);
}

/* The second field of a schedstat file: nanoseconds the thread has spent
 * runnable but waiting for a CPU. 0 if unreadable (the thread is gone),
 * which only makes the lower bounds below stricter. */
static inline int64_t lim_schedstat_wait_ns(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long run = 0, wait = 0;
    int n = fscanf(f, "%llu %llu", &run, &wait);
    fclose(f);
    return n == 2 ? (int64_t)wait : 0;
}

/* Nanoseconds the hypervisor has taken this machine's CPUs (the `steal`
 * field of /proc/stat), per CPU. A guest's schedstat cannot see that
 * time: its thread was running as far as the guest knows. 0 on bare
 * metal or when unreadable. */
static inline int64_t lim_steal_ns(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (n != 8 || hz <= 0 || cpus <= 0)
        return 0;
    return (int64_t)(v[7] * (1000000000ull / (unsigned long long)hz) / (unsigned long long)cpus);
}

/* CPU wait of thread `pid` (a worker's main thread, the one that
 * launches): its own wait for a CPU of the guest, plus the time the host
 * took the guest's CPUs from under it (lim_steal_ns, as the average over
 * the CPUs: a worker that keeps to one CPU may have lost more or less). */
static inline int64_t lim_rq_wait_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    return lim_schedstat_wait_ns(path) + lim_steal_ns();
}

/* CPU wait of thread `tid` of this process. */
static inline int64_t lim_rq_wait_tid_ns(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    return lim_schedstat_wait_ns(path);
}

/* Per-window shares of up to 8 pids on one device, sampled live, with
 * how long each waited for a CPU: a worker starved of CPU launches less,
 * which lowers its share by at most that time (it loses GPU time only
 * while it is runnable and not running), and is not the limiter's doing. */
#define LIM_MAXW 256
struct lim_series {
    int n;
    int64_t t[LIM_MAXW];          /* window end, ns since the series start */
    double share[8][LIM_MAXW];    /* percent */
    int64_t rq0[8];               /* lim_rq_wait_ns at the series start */
    int64_t rq[8][LIM_MAXW];      /* ... at each sample */
};

/* Records pid's CPU wait for sample i of series k (sample -1: the start). */
static inline void lim_note_rq(struct lim_series *s, int k, int i, pid_t pid)
{
    if (i < 0)
        s->rq0[k] = lim_rq_wait_ns(pid);
    else
        s->rq[k][i] = lim_rq_wait_ns(pid);
}

/* Percent of the time between the samples around windows ending in
 * [from_ms, to_ms] that series k's process waited for a CPU, or lost it
 * to the host (lim_rq_wait_ns). */
static inline double lim_starved(const struct lim_series *s, int k, double from_ms, double to_ms)
{
    int first = -1, last = -1;
    for (int i = 0; i < s->n; i++) {
        double t = (double)s->t[i] / 1e6;
        if (t >= from_ms && t <= to_ms) {
            if (first < 0)
                first = i;
            last = i;
        }
    }
    CHECK(first >= 0);
    int64_t rq_a = first ? s->rq[k][first - 1] : s->rq0[k];
    int64_t t_a = first ? s->t[first - 1] : s->t[first] - (s->n > 1 ? s->t[1] - s->t[0] : s->t[0]);
    int64_t span = s->t[last] - t_a;
    int64_t rq = s->rq[k][last] - rq_a;
    return span > 0 && rq > 0 ? 100.0 * (double)rq / (double)span : 0;
}

/* Samples windows of `win_ms` every `win_ms` for `total_ms`, each window
 * ending `lag_ms` in the past (work is scheduled ahead of time), on
 * device d of `ngpus` simulated GPUs at once: series out[g] holds the
 * shares of pids[g * npids + k] on gpus[g]. */
static inline void lim_sample_gpus(struct fakecuda_state *const *gpus, int ngpus, int d,
                                   const pid_t *pids, int npids, double total_ms, double win_ms,
                                   double lag_ms, struct lim_series *out)
{
    for (int g = 0; g < ngpus; g++)
        memset(&out[g], 0, sizeof out[g]);
    for (int i = 0; i < ngpus * npids; i++)
        lim_ready(pids[i]);
    const int64_t t0 = cs_now_ns();
    for (int g = 0; g < ngpus; g++)
        for (int k = 0; k < npids && k < 8; k++)
            lim_note_rq(&out[g], k, -1, pids[g * npids + k]);
    const int64_t win = (int64_t)(win_ms * 1e6), lag = (int64_t)(lag_ms * 1e6);
    int64_t next = t0 + win + lag;
    while (next - t0 <= (int64_t)(total_ms * 1e6) && out[0].n < LIM_MAXW) {
        int64_t now = cs_now_ns();
        if (now < next) {
            cs_sleep_ms((double)(next - now) / 1e6);
            continue;
        }
        int64_t to = next - lag, from = to - win;
        for (int g = 0; g < ngpus; g++) {
            struct lim_series *o = &out[g];
            for (int k = 0; k < npids && k < 8; k++) {
                o->share[k][o->n] = 100.0 *
                                    (double)lim_busy(gpus[g], d, pids[g * npids + k], from, to) /
                                    (double)win;
                lim_note_rq(o, k, o->n, pids[g * npids + k]);
            }
            o->t[o->n] = to - t0;
            o->n++;
        }
        next += win;
    }
}

static inline void lim_sample(struct fakecuda_state *s, int d, const pid_t *pids, int npids,
                              double total_ms, double win_ms, double lag_ms,
                              struct lim_series *out)
{
    lim_sample_gpus(&s, 1, d, pids, npids, total_ms, win_ms, lag_ms, out);
}

/* Mean and standard deviation of series k over windows ending in
 * [from_ms, to_ms] since the start. */
static inline void lim_stats(const struct lim_series *s, int k, double from_ms, double to_ms,
                             double *mean, double *sd)
{
    double sum = 0, sq = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        double t = (double)s->t[i] / 1e6;
        if (t < from_ms || t > to_ms)
            continue;
        sum += s->share[k][i];
        sq += s->share[k][i] * s->share[k][i];
        n++;
    }
    CHECK(n > 0);
    *mean = sum / n;
    double var = sq / n - *mean * *mean;
    *sd = var > 0 ? sqrt(var) : 0;
}

static inline void lim_print_series(const char *label, const struct lim_series *s, int k)
{
    printf("%s:", label);
    for (int i = 0; i < s->n; i++)
        printf(" %.0f", s->share[k][i]);
    printf("\n");
}

/* Value of `key` in a worker's --out file, or -1. */
static inline long long lim_stat(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char k[128];
    long long v, r = -1;
    while (fscanf(f, "%127s %lld", k, &v) == 2)
        if (!strcmp(k, key))
            r = v;
    fclose(f);
    return r;
}


/* `what` in a line of a worker's log (--log) that starts at or after byte
 * `from`; false while the file does not exist. */
static inline bool lim_log_says_after(const char *file, const char *what, long from)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return false;
    if (fseek(f, from, SEEK_SET)) {
        fclose(f);
        return false;
    }
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static inline bool lim_log_says(const char *file, const char *what)
{
    return lim_log_says_after(file, what, 0);
}

/* Creates the stop file of worker `name` (started with --stop
 * lim_path("<name>.stop")): it ends after its current launch. */
static inline void lim_stop(const char *name)
{
    FILE *f = fopen(lim_path(lim_kv("%s.stop", name)), "w");
    if (f)
        fclose(f);
}

/* Workers that run until their stop files appear must not outlive a test
 * that a failed CHECK ended (CTest would wait for them): the names given
 * to lim_stop_at_exit are stopped at exit. */
static const char *lim_exit_stops[2];

static inline void lim_stop_listed(void)
{
    for (int i = 0; i < 2 && lim_exit_stops[i]; i++)
        lim_stop(lim_exit_stops[i]);
}

static inline void lim_stop_at_exit(const char *a, const char *b)
{
    lim_exit_stops[0] = a;
    lim_exit_stops[1] = b;
    atexit(lim_stop_listed);
}

/* One launch of a worker's --trace (lim_worker.c says what each is). */
struct lim_launch {
    int64_t entry, ret;
    uint64_t quiet_waits, sleeps, ticks, engaged;
};

/* A worker's --trace, read as it grows. */
struct lim_trace {
    const char *path;
    long off;               /* bytes of complete lines read */
    int n, cap;
    struct lim_launch *l;
};

/* Reads the complete lines appended since the last call. */
static inline void lim_trace_follow(struct lim_trace *t)
{
    FILE *f = fopen(t->path, "r");
    if (!f)
        return;
    CHECK(fseek(f, t->off, SEEK_SET) == 0);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (!len || line[len - 1] != '\n')
            break; /* the worker is still writing it */
        long long e, r;
        unsigned long long q, s, k, m;
        CHECK(sscanf(line, "%lld %lld %llu %llu %llu %llu", &e, &r, &q, &s, &k, &m) == 6);
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 4096;
            t->l = realloc(t->l, (size_t)t->cap * sizeof *t->l);
            CHECK(t->l != NULL);
        }
        t->l[t->n++] = (struct lim_launch){.entry = e, .ret = r, .quiet_waits = q, .sleeps = s,
                                           .ticks = k, .engaged = m};
        t->off += (long)len;
    }
    fclose(f);
}

/* The bounds the tests give these are what the fake holds: docs/limiter.md
 * ("Tests") has the spreads measured for each (10 runs on one core while
 * the other was busy) and how each bound follows from them.
 *
 * A share must never exceed its limit by more than `over` points; it may
 * fall short by up to `under` (a CPU-starved CI machine delays launches,
 * which only ever lowers a share). */
#define CHECK_SHARE(v, want, over, under)                                                \
    do {                                                                                 \
        double v_ = (v), w_ = (want);                                                    \
        if (v_ > w_ + (over) || v_ < w_ - (under)) {                                     \
            fprintf(stderr, "%s:%d: %s = %.2f, expected %.2f (+%.1f/-%.1f)\n", __FILE__,   \
                    __LINE__, #v, v_, w_, (double)(over), (double)(under));              \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* CHECK_SHARE whose lower bound also forgives `starved` points: the
 * share of time the worker waited for a CPU (lim_starved), which CPU hogs
 * beside the suite cost it and the limiter did not. The upper bound stays:
 * starvation never raises a share. */
#define CHECK_SHARE_STARVED(v, want, over, under, starved)                               \
    do {                                                                                 \
        double st_ = (starved);                                                          \
        if (st_ > 0.5)                                                                   \
            printf("%s: %.1f points of CPU wait forgiven below %.1f\n", #v, st_,          \
                   (double)(want) - (under));                                            \
        CHECK_SHARE(v, want, over, (double)(under) + st_);                               \
    } while (0)

#define CHECK_NEAR(v, want, tol)                                                         \
    do {                                                                                 \
        double v_ = (v), w_ = (want), t_ = (tol);                                        \
        if (fabs(v_ - w_) > t_) {                                                        \
            fprintf(stderr, "%s:%d: %s = %.2f, expected %.2f +- %.2f\n", __FILE__,        \
                    __LINE__, #v, v_, w_, t_);                                           \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
