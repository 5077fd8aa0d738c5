/*
 * `cushare bench limiter`: does CUDA_DEVICE_SM_LIMIT mean what it says?
 * (docs/limiter.md, "Benchmark").
 *
 * For each GPU-bound workload it measures throughput (kernels/s) natively,
 * under cushare without a limit, and under `cushare run --sm X --policy
 * force` for each limit X (--runs times, the worst run reported); then each
 * mix of tenants side by side (default 25+75; separate ledgers, one shared
 * measurement window): each tenant's share, and their sum, the work the GPU
 * still delivers when it switches between them. A launch-bound
 * workload (GPU busy well under its limit) must not be slowed by a limit.
 * It prints the table, writes a CSV and, when gnuplot is installed, a PNG
 * plot of achieved versus target share into --out (default docs/).
 *
 * A workload is any command that accepts --secs S --warmup W
 * --start-mono NS and prints "RESULT ... rate=R ..." (bench/limiter/); its
 * command line is split into words as the shell would (quotes allowed) but
 * never run by a shell. A workload may add " gpu_us=U": the GPU time of
 * one of its steps run back to back, measured in that process. Where the
 * native run and every tenant of a mix say it, the mix gets a row more,
 * not judged: its sum with each tenant's rate taken at the native run's
 * speed per step, the work the GPU did whatever the speed of the process
 * (docs/limiter.md, "Own speed").
 *
 * With --mps it also runs each limit and mix concurrently, as clients of the
 * MPS control daemon of the one visible GPU (cli/mps.h; started or joined
 * before the first such run, stopped at the end only if it was started
 * here): each limit under `cushare run --mps`, and each mix three ways side
 * by side: time-sliced (the run above), concurrent (`cushare run --mps`)
 * and bare MPS (MPS clients without cushare), the point being how much more
 * the tenants get done together.
 * Targets: each limit and each tenant of a mix within --tolerance points
 * (default 5) of its target; a mix's tenants together at least --conserve
 * % (default 97) of their limits' sum; a two-tenant mix at its limits'
 * ratio within 10 %; cushare without a
 * limit loses at most 1 %; the launch-bound workload keeps >= 97 %; an
 * empty-kernel launch costs at most 1 % more without a limit. Under MPS:
 * each limit within --mps-tolerance (default 5) points; a two-tenant mix at
 * its limits' ratio within 10 %; concurrent tenants together at least
 * --mps-bare % (default 90) of bare MPS when their limits sum to 100 or
 * more, and at least --mps-gain times (default 0: not judged) time-sliced.
 * Exit status 0 when every target is met, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "cli/mps.h"
#include "core/clock.h"
#include "core/config.h"


static const char usage[] =
    "usage: cushare bench limiter [--secs S] [--warmup W] [--limits L,L,...|none] [--out DIR]\n"
    "                             [--workload NAME=COMMAND]... [--launchbound COMMAND|none]\n"
    "                             [--launchcost COMMAND|none]\n"
    "                             [--tolerance PP] [--start-delay S] [--runs K]\n"
    "                             [--mix L+L[+L...]]... [--conserve PCT]\n"
    "                             [--mps [--mps-tolerance PP] [--mps-bare PCT] [--mps-gain X]]\n"
    "  --secs         measured seconds per run (default 5), after --warmup (default 1)\n"
    "  --limits       SM limits to run (default 10,25,50,75,100); none: only the mixes\n"
    "  --workload     a GPU-bound workload; repeatable (default: elementwise, the\n"
    "                 limiter_workload next to this binary)\n"
    "  --launchbound  the launch-bound workload (default: limiter_workload launchbound)\n"
    "  --launchcost   the launch-cost workload (default: limiter_workload launchcost)\n"
    "  --out          directory for limiter-bench.csv / .gp / .png (default docs)\n"
    "  --tolerance    allowed error of a limit, in percentage points (default 5)\n"
    "  --start-delay  seconds the tenants of a mix get to start up (default 10)\n"
    "  --runs         repeat each limited measurement K times (default 1); the worst\n"
    "                 run of each is the one reported and judged\n"
    "  --mix          tenants run side by side, their limits joined by '+'; repeatable\n"
    "                 (default 25+75; at most 8 tenants)\n"
    "  --conserve     a mix's tenants together must reach PCT % of their limits' sum\n"
    "                 (default 97)\n"
    "  --mps          also run concurrently, as clients of the MPS control daemon of\n"
    "                 the one visible GPU (started if none runs; docs/mps.md): each\n"
    "                 limit under `cushare run --mps`, and each mix time-sliced,\n"
    "                 concurrent and bare MPS (no cushare) side by side; writes\n"
    "                 limiter-share.gp / .png too\n"
    "  --mps-tolerance  allowed error of a limit under MPS, in points (default 5)\n"
    "  --mps-bare     concurrent tenants together must reach PCT % of bare MPS when\n"
    "                 their limits sum to 100 or more (default 90)\n"
    "  --mps-gain     concurrent tenants together must reach X times time-sliced\n"
    "                 (default 0: not judged)\n";

#define MAX_WORKLOADS 8
#define MAX_LIMITS 16
#define MAX_MIXES 8
#define MAX_MIX_TENANTS 8
#define MAX_RUNS 10

/* How a workload runs. A mix's side-by-side table has a column for each
 * of the last three. */
enum mode {
    NATIVE,             /* no cushare, no MPS */
    SLICED,             /* `cushare run`: the driver time-slices the tenants */
    CONCURRENT,         /* `cushare run --mps`: MPS clients under cushare's limits */
    BARE_MPS,           /* MPS clients without cushare: no limit */
    NMODES
};

/* Per mode: its column in a mix's table and its rows' `run` in the CSV
 * (time-sliced rows keep their old names: "pair" or "mix", "limit"). */
static const struct {
    const char *column, *limit_run, *mix_run;
} modes[NMODES] = {
    [NATIVE] = {"native", NULL, NULL},
    [SLICED] = {"time-sliced", "limit", NULL},
    [CONCURRENT] = {"concurrent", "mps_limit", "mps_mix"},
    [BARE_MPS] = {"bare MPS", NULL, "bare_mps_mix"},
};

/* Tenants run side by side, each at its limit. */
struct mix {
    int n;
    int limits[MAX_MIX_TENANTS];
};

struct workload {
    char name[64];
    char cmd[1024];
    double native, unlimited;
    double native_gpu_us;                                   /* 0: not said */
    double rate[NMODES][MAX_LIMITS];                        /* the worst run's */
    double mix_rate[NMODES][MAX_MIXES][MAX_MIX_TENANTS];    /* the kept run's */
    double mix_sum[NMODES][MAX_MIXES][MAX_RUNS];            /* every run's together */
    double mix_own[NMODES][MAX_MIXES][MAX_RUNS];            /* ... at own speed, or -1 */
    double mix_gpu_us[NMODES][MAX_MIXES][MAX_MIX_TENANTS];  /* the kept run's, 0: none */
};

/* The bench's options, its workloads and what they measured. Only this
 * command's one thread touches it. */
static struct {
    double secs, warmup, tol, start_delay, conserve;
    double mps_tol, mps_bare, mps_gain;
    bool mps;
    int runs, nlimits, nmixes;
    int limits[MAX_LIMITS];
    struct mix mixes[MAX_MIXES];
    char out[PATH_MAX];
    char cushare[PATH_MAX];     /* the command that runs each limited workload */
    int nw;
    struct workload w[MAX_WORKLOADS];
    char launchbound[1024];
    char launchcost[1024];
    int failures;
} lbench = {.secs = 5, .warmup = 1, .tol = 5, .start_delay = 10, .conserve = 97, .runs = 1,
            .mps_tol = 5, .mps_bare = 90};

/* The MPS control daemon of --mps. Only this command's one thread touches
 * it: mps_check before any run, mps_up before each workload's MPS runs
 * (starts or joins once), mps_down at the end. */
static struct {
    struct cs_mps m;
    struct cs_mps_gpu gpu;
    enum { MPS_DOWN, MPS_UP, MPS_FAILED } state;
    enum cs_mps_started how;
    bool ours;                  /* started (or restarted) here: mps_down stops it */
    pid_t pid;
    char **env;                 /* its clients' environment (mps_client_env) */
    char pipe[PATH_MAX + 128], log[PATH_MAX + 128], visible[96];
} mpsd;

/* A workload run in flight: its pid and its stdout. */
struct child {
    pid_t pid;
    FILE *out;
};

/* Our environment without the variables named in drop[] ("NAME=" each,
 * NULL-terminated), followed by add[] ("NAME=VALUE" each, NULL-terminated,
 * kept alive by the caller). Built once per caller and kept for the
 * command's life; NULL when out of memory. */
static char **env_edit(const char *const *drop, char *const *add)
{
    size_t n = 0, k = 0, nadd = 0;
    while (environ[n])
        n++;
    while (add && add[nadd])
        nadd++;
    char **env = calloc(n + nadd + 1, sizeof *env);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        bool keep = true;
        for (size_t d = 0; drop[d]; d++)
            keep = keep && strncmp(environ[i], drop[d], strlen(drop[d]));
        if (keep)
            env[k++] = environ[i];
    }
    for (size_t i = 0; i < nadd; i++)
        env[k++] = add[i];
    return env;
}

/* Our environment without LD_PRELOAD, for native runs (built once). */
static char **native_env(void)
{
    static char **env;
    static const char *const drop[] = {"LD_PRELOAD=", NULL};
    if (!env)
        env = env_edit(drop, NULL);
    return env;
}

/* The environment of the daemon's clients, bare or under `cushare run
 * --mps`: the native one with the daemon's directories, and the GPU by
 * UUID as `run --mps` names it (which then finds nothing to replace). */
static char **mps_client_env(const struct cs_mps_daemon *d)
{
    static const char *const drop[] = {"LD_PRELOAD=", "CUDA_MPS_PIPE_DIRECTORY=",
                                       "CUDA_MPS_LOG_DIRECTORY=", "CUDA_VISIBLE_DEVICES=", NULL};
    snprintf(mpsd.pipe, sizeof mpsd.pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", d->pipe);
    snprintf(mpsd.log, sizeof mpsd.log, "CUDA_MPS_LOG_DIRECTORY=%s", d->log);
    snprintf(mpsd.visible, sizeof mpsd.visible, "CUDA_VISIBLE_DEVICES=%s", mpsd.gpu.uuid);
    char *const add[] = {mpsd.pipe, mpsd.log, mpsd.visible, NULL};
    return env_edit(drop, add);
}

/* The environment a mode's child gets: NULL (ours, inherited) for SLICED;
 * else the native one or the daemon clients' (NULL when out of memory). */
static char **env_for(enum mode mode)
{
    switch (mode) {
    case NATIVE:
        return native_env();
    case CONCURRENT:
    case BARE_MPS:
        return mpsd.env;
    default:
        return NULL;
    }
}

/* Starts `cmd` (split into words as the shell would, without running
 * anything: WRDE_NOCMD) as `mode` says, under `cushare run` with limit pct
 * (0: none) for SLICED and CONCURRENT, with the timing options every
 * workload takes. */
static struct child start(const char *cmd, enum mode mode, int pct, long long start_mono)
{
    struct child c = {.pid = -1};
    wordexp_t we;
    if (wordexp(cmd, &we, WRDE_NOCMD) || !we.we_wordc) {
        fprintf(stderr, "cushare: bench limiter: cannot split the workload command into words "
                        "(quotes, no $(...), pipes or redirections): %s\n", cmd);
        return c;
    }
    char secs[32], warmup[32], mono[32], pcts[16];
    snprintf(secs, sizeof secs, "%g", lbench.secs);
    snprintf(warmup, sizeof warmup, "%g", lbench.warmup);
    snprintf(mono, sizeof mono, "%lld", start_mono);
    snprintf(pcts, sizeof pcts, "%d", pct);
    char *av[we.we_wordc + 16];
    size_t k = 0;
    bool ours = mode == SLICED || mode == CONCURRENT;
    if (ours) {
        av[k++] = lbench.cushare;
        av[k++] = "run";
        if (mode == CONCURRENT)
            av[k++] = "--mps";
        if (pct > 0) {
            av[k++] = "--sm";
            av[k++] = pcts;
            av[k++] = "--policy";
            av[k++] = "force";
        }
        av[k++] = "--";
    }
    for (size_t i = 0; i < we.we_wordc; i++)
        av[k++] = we.we_wordv[i];
    av[k++] = "--secs";
    av[k++] = secs;
    av[k++] = "--warmup";
    av[k++] = warmup;
    if (start_mono) {
        av[k++] = "--start-mono";
        av[k++] = mono;
    }
    av[k] = NULL;
    int fd = -1;
    struct cs_cli_spawn s = {.argv = av, .envp = env_for(mode), .search_path = true,
                             .stdout_fd = &fd};
    if (mode == SLICED || s.envp)
        c.pid = cs_cli_spawn("bench limiter", &s);
    wordfree(&we);
    if (c.pid > 0 && !(c.out = fdopen(fd, "r"))) {
        close(fd);
        kill(c.pid, SIGKILL);
        cs_cli_wait(c.pid);
        c.pid = -1;
    }
    return c;
}

/* Reads the child's output to the end; its rate, or -1. Its gpu_us, or
 * 0 when it said none, goes to *gpu_us when that is not NULL. */
static double finish(struct child c, const char *what, double *gpu_us)
{
    if (gpu_us)
        *gpu_us = 0;
    if (c.pid <= 0)
        return -1;
    char buf[4096];
    double rate = -1;
    while (fgets(buf, sizeof buf, c.out)) {
        char *r = strstr(buf, "RESULT ");
        char *p = r ? strstr(r, " rate=") : NULL;
        char *u = r ? strstr(r, " gpu_us=") : NULL;
        if (p)
            rate = atof(p + 6);
        if (u && gpu_us)
            *gpu_us = atof(u + 8);
    }
    fclose(c.out);
    int st = cs_cli_wait(c.pid);
    if (st != 0 || rate < 0) {
        fprintf(stderr, "cushare: bench limiter: %s failed (status %d, %s)\n", what, st,
                rate < 0 ? "no RESULT line" : "result ignored");
        return -1;
    }
    return rate;
}

static double run1(const char *cmd, enum mode mode, int pct, const char *what)
{
    return finish(start(cmd, mode, pct, 0), what, NULL);
}

static void verdict(int ok)
{
    printf("  %s\n", ok ? "ok" : "MISSED");
    if (!ok)
        lbench.failures++;
}

static int parse_limits(const char *s)
{
    if (!strcmp(s, "none")) { /* mixes only */
        lbench.nlimits = 0;
        return 0;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    lbench.nlimits = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (lbench.nlimits == MAX_LIMITS || cs__parse_int(t, 1, 100, &v))
            return -1;
        lbench.limits[lbench.nlimits++] = (int)v;
    }
    return lbench.nlimits ? 0 : -1;
}

static int add_workload(const char *spec)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1] || lbench.nw == MAX_WORKLOADS ||
        (size_t)(eq - spec) >= sizeof lbench.w[0].name)
        return -1;
    struct workload *w = &lbench.w[lbench.nw++];
    memcpy(w->name, spec, (size_t)(eq - spec));
    w->name[eq - spec] = '\0';
    snprintf(w->cmd, sizeof w->cmd, "%s", eq + 1);
    return 0;
}

static int limits_sum(const struct mix *m)
{
    int sum = 0;
    for (int t = 0; t < m->n; t++)
        sum += m->limits[t];
    return sum;
}

static int parse_mix(const char *s)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    if (lbench.nmixes == MAX_MIXES)
        return -1;
    struct mix m = {0};
    char *save = NULL;
    for (char *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        long v;
        if (m.n == MAX_MIX_TENANTS || cs__parse_int(t, 1, 99, &v))
            return -1;
        m.limits[m.n++] = (int)v;
    }
    if (m.n < 2 || limits_sum(&m) > 100)
        return -1;
    lbench.mixes[lbench.nmixes++] = m;
    return 0;
}

/* "25+75" */
static void mix_name(const struct mix *m, char *out, size_t len)
{
    size_t used = 0;
    for (int t = 0; t < m->n && used < len; t++)
        used += (size_t)snprintf(out + used, len - used, "%s%d", t ? "+" : "", m->limits[t]);
}

/* Whether the workload ran natively: every share is relative to that. */
static bool measured(const struct workload *w)
{
    return w->native > 0;
}

static double share_of(const struct workload *w, double rate)
{
    return 100.0 * rate / w->native;
}

/* One limit, --runs times, time-sliced or concurrent: the run furthest
 * from the target is kept. */
static void run_limit(struct workload *w, int i, enum mode mode)
{
    char label[64];
    snprintf(label, sizeof label, "--sm %d (force%s)", lbench.limits[i],
             mode == CONCURRENT ? ", MPS" : "");
    double tol = mode == CONCURRENT ? lbench.mps_tol : lbench.tol;
    double worst = -1, worst_err = -1;
    char all[256] = "";
    size_t used = 0;
    for (int r = 0; r < lbench.runs; r++) {
        double rate = run1(w->cmd, mode, lbench.limits[i], label);
        double err = rate > 0 ? fabs(share_of(w, rate) - lbench.limits[i]) : 1e9;
        if (err > worst_err)
            worst = rate, worst_err = err;
        if (lbench.runs > 1 && used < sizeof all)
            used += (size_t)snprintf(all + used, sizeof all - used, "%s%.1f", r ? " " : "",
                                     share_of(w, rate));
    }
    w->rate[mode][i] = worst;
    double share = share_of(w, worst);
    printf("%-22s %12.1f %7.1f%% %7d%% %+6.1fpp", label, worst, share, lbench.limits[i],
           share - lbench.limits[i]);
    if (lbench.runs > 1)
        printf("  runs: %s", all);
    verdict(worst > 0 && fabs(share - lbench.limits[i]) <= tol);
}

/* The tenants' shares together (the aggregate throughput in units of one
 * native tenant, %), or -1 when a tenant has no rate. */
static double together(const struct workload *w, const struct mix *m, const double *rate)
{
    double sum = 0;
    for (int t = 0; t < m->n; t++) {
        if (rate[t] <= 0)
            return -1;
        sum += share_of(w, rate[t]);
    }
    return sum;
}

/* A tenant's share at the native run's speed: its rate scaled by its GPU
 * time per step over the native run's. */
static double own_speed_share(const struct workload *w, double rate, double gpu_us)
{
    return share_of(w, rate) * gpu_us / w->native_gpu_us;
}

/* together() at each tenant's own speed (own_speed_share): what the mix
 * got done at the native run's speed. -1 when the native run or a tenant
 * did not say its gpu_us. */
static double together_own_speed(const struct workload *w, const struct mix *m,
                                 const double *rate, const double *gpu_us)
{
    if (w->native_gpu_us <= 0)
        return -1;
    double sum = 0;
    for (int t = 0; t < m->n; t++) {
        if (rate[t] <= 0 || gpu_us[t] <= 0)
            return -1;
        sum += own_speed_share(w, rate[t], gpu_us[t]);
    }
    return sum;
}

/* A two-tenant mix's A:B throughput ratio against its limits' ratio:
 * the relative error, or 1e9 when a tenant has no rate. */
static double ratio_error(const struct mix *m, const double *rate)
{
    if (rate[0] <= 0 || rate[1] <= 0)
        return 1e9;
    return fabs(rate[0] / rate[1] * m->limits[1] / m->limits[0] - 1);
}

/* How far a time-sliced run of a mix is from its targets: the largest
 * error of a tenant, or of the sum's shortfall below --conserve. */
static double sliced_badness(const struct workload *w, const struct mix *m, const double *rate)
{
    double bad = 0, sum = together(w, m, rate);
    if (sum < 0)
        return 1e9;
    for (int t = 0; t < m->n; t++) {
        double e = fabs(share_of(w, rate[t]) - m->limits[t]);
        bad = e > bad ? e : bad;
    }
    double short_pp = lbench.conserve * limits_sum(m) / 100 - sum;
    return short_pp > bad ? short_pp : bad;
}

static bool bare_judged(const struct mix *m)
{
    return limits_sum(m) >= 100;
}

/* How far a concurrent run of mix k misses its targets (time-sliced and
 * bare MPS are measured before it), each in units of its own margin: 0 at
 * the bar, > 0 missed. With no target to judge, the lower aggregate. */
static double concurrent_badness(const struct workload *w, int k, const double *rate)
{
    const struct mix *m = &lbench.mixes[k];
    double sum = together(w, m, rate), bad = -HUGE_VAL;
    if (sum < 0)
        return 1e9;
    double sliced = together(w, m, w->mix_rate[SLICED][k]);
    double bare = together(w, m, w->mix_rate[BARE_MPS][k]);
    if (m->n == 2)
        bad = fmax(bad, ratio_error(m, rate) / 0.10 - 1);
    if (bare_judged(m) && bare > 0)
        bad = fmax(bad, 1 - sum / (lbench.mps_bare / 100 * bare));
    if (lbench.mps_gain > 0 && sliced > 0)
        bad = fmax(bad, 1 - sum / (lbench.mps_gain * sliced));
    return bad > -HUGE_VAL ? bad : -sum;
}

/* Which of --runs runs of mix k is kept: the highest score. Time-sliced
 * and concurrent: the run furthest from its targets. Bare MPS, the
 * reference: the run that gets the most done (noise only slows a run), so
 * concurrent is held to what MPS can do. */
static double keep_score(const struct workload *w, int k, enum mode mode, const double *rate)
{
    const struct mix *m = &lbench.mixes[k];
    switch (mode) {
    case SLICED:
        return sliced_badness(w, m, rate);
    case CONCURRENT:
        return concurrent_badness(w, k, rate);
    default:
        return together(w, m, rate);
    }
}

static void run_mix_once(const struct workload *w, const struct mix *m, enum mode mode,
                         double *rate, double *gpu_us)
{
    long long t0 = cs__now_ns() + (long long)(lbench.start_delay * 1e9);
    struct child c[MAX_MIX_TENANTS];
    for (int t = 0; t < m->n; t++)
        c[t] = start(w->cmd, mode, m->limits[t], t0);
    for (int t = 0; t < m->n; t++) {
        char what[64];
        snprintf(what, sizeof what, "%s tenant at %d%%", modes[mode].column, m->limits[t]);
        rate[t] = finish(c[t], what, &gpu_us[t]);
    }
}

/* Mix k under `mode`, --runs times: the kept run's rates (keep_score). */
static void measure_mix(struct workload *w, int k, enum mode mode)
{
    double *kept = w->mix_rate[mode][k], best = -HUGE_VAL;
    for (int r = 0; r < lbench.runs; r++) {
        double rate[MAX_MIX_TENANTS] = {0}, gpu_us[MAX_MIX_TENANTS] = {0};
        run_mix_once(w, &lbench.mixes[k], mode, rate, gpu_us);
        w->mix_sum[mode][k][r] = together(w, &lbench.mixes[k], rate);
        w->mix_own[mode][k][r] = together_own_speed(w, &lbench.mixes[k], rate, gpu_us);
        double score = keep_score(w, k, mode, rate);
        if (score > best || !r) {
            best = score;
            memcpy(kept, rate, sizeof rate);
            memcpy(w->mix_gpu_us[mode][k], gpu_us, sizeof gpu_us);
        }
    }
}

/* The A:B row of a two-tenant mix, judged within 10 % of the limits'. */
static void ratio_row(const char *label, const struct mix *m, const double *rate)
{
    double ratio = rate[1] > 0 ? rate[0] / rate[1] : 0;
    double want = (double)m->limits[0] / m->limits[1];
    printf("%-22s %12.3f %8s %8.3f %+6.1f%%", label, ratio, "", want, 100.0 * (ratio / want - 1));
    verdict(ratio_error(m, rate) <= 0.10);
}

/* The time-sliced mix's sum at each tenant's own speed (not judged), when
 * every run has it; then the kept run's tenants at their own speed. */
static void own_speed_row(const struct workload *w, int k)
{
    const struct mix *m = &lbench.mixes[k];
    const double *own = w->mix_own[SLICED][k], *rate = w->mix_rate[SLICED][k];
    const double *gpu_us = w->mix_gpu_us[SLICED][k];
    for (int r = 0; r < lbench.runs; r++)
        if (own[r] < 0)
            return;
    double target = limits_sum(m), kept = together_own_speed(w, m, rate, gpu_us);
    printf("%-22s %12s %7.1f%% %7.0f%% %7.1f%% of limits", "together, own speed", "", kept,
           target, 100 * kept / target);
    if (lbench.runs > 1) {
        printf("  runs:");
        for (int r = 0; r < lbench.runs; r++)
            printf(" %.1f", own[r]);
    }
    printf("  tenants:");
    for (int t = 0; t < m->n; t++)
        printf("%s%.1f", t ? " + " : " ", own_speed_share(w, rate[t], gpu_us[t]));
    printf("  (not judged)\n");
}

static void print_sliced_mix(const struct workload *w, int k)
{
    const struct mix *m = &lbench.mixes[k];
    const double *rate = w->mix_rate[SLICED][k];
    for (int t = 0; t < m->n; t++) {
        char label[64];
        snprintf(label, sizeof label, "tenant %c --sm %d", 'A' + t, m->limits[t]);
        double share = share_of(w, rate[t]);
        printf("%-22s %12.1f %7.1f%% %7d%% %+6.1fpp", label, rate[t], share, m->limits[t],
               share - m->limits[t]);
        verdict(rate[t] > 0 && fabs(share - m->limits[t]) <= lbench.tol);
    }
    double sum = together(w, m, rate), target = limits_sum(m);
    printf("%-22s %12s %7.1f%% %7.0f%% %7.1f%% of limits", "together", "", sum, target,
           100 * sum / target);
    if (lbench.runs > 1) {
        printf("  runs:");
        for (int r = 0; r < lbench.runs; r++)
            printf(" %.1f", w->mix_sum[SLICED][k][r]);
    }
    verdict(sum >= 0 && sum >= lbench.conserve * target / 100);
    own_speed_row(w, k);
    if (m->n == 2)
        ratio_row("A:B ratio", m, rate);
}

/* A row of the side-by-side table: each mode's share (%), "-" for none. */
static void share_cells(const char *label, const double *share)
{
    printf("%-26s", label);
    for (int mode = SLICED; mode < NMODES; mode++) {
        if (share[mode] < 0)
            printf(" %12s", "-");
        else
            printf(" %11.1f%%", share[mode]);
    }
    printf("\n");
}

/* "concurrent / X": the ratio of two aggregates, judged >= want when
 * `judged` (else the reason it is not, `why`). */
static void gain_row(const char *label, double num, double den, double want, bool judged,
                     const char *why)
{
    if (num > 0 && den > 0)
        printf("%-26s %11.2fx", label, num / den);
    else
        printf("%-26s %12s", label, "-");
    if (!judged) {
        printf("  (not judged: %s)\n", why);
        return;
    }
    printf("  >= %.2fx", want);
    verdict(num > 0 && den > 0 && num / den >= want);
}

/* Mix k time-sliced, concurrent and bare MPS side by side: each tenant's
 * share, the aggregate, and the verdicts on concurrent. */
static void print_side_by_side(const struct workload *w, int k)
{
    const struct mix *m = &lbench.mixes[k];
    char name[64] = "mix ";
    mix_name(m, name + 4, sizeof name - 4);
    printf("%-26s %12s %12s %12s\n", name, modes[SLICED].column, modes[CONCURRENT].column,
           modes[BARE_MPS].column);
    double share[NMODES], sum[NMODES];
    for (int t = 0; t < m->n; t++) {
        char label[64];
        snprintf(label, sizeof label, "tenant %c --sm %d", 'A' + t, m->limits[t]);
        for (int mode = SLICED; mode < NMODES; mode++) {
            double rate = w->mix_rate[mode][k][t];
            share[mode] = rate > 0 ? share_of(w, rate) : -1;
        }
        share_cells(label, share);
    }
    for (int mode = SLICED; mode < NMODES; mode++)
        sum[mode] = together(w, m, w->mix_rate[mode][k]);
    share_cells("together", sum);
    if (m->n == 2)
        ratio_row("A:B ratio (concurrent)", m, w->mix_rate[CONCURRENT][k]);
    gain_row("concurrent / time-sliced", sum[CONCURRENT], sum[SLICED], lbench.mps_gain,
             lbench.mps_gain > 0, "no --mps-gain");
    gain_row("concurrent / bare MPS", sum[CONCURRENT], sum[BARE_MPS], lbench.mps_bare / 100,
             bare_judged(m), "the limits sum to under 100");
}

/* Before any run: the one visible GPU and the daemon's directory and
 * binary, so a bad setup is a usage error now, not after the time-sliced
 * runs. CS_EXIT_OK, or the exit status after a message. */
static int mps_check(void)
{
    int rc = cs_mps_visible_gpu("bench limiter", &mpsd.gpu);
    return rc ? rc : cs_mps_setup(&mpsd.m, "bench limiter", NULL, false);
}

/* Starts or joins the daemon, once; whether MPS runs can be made. A daemon
 * that cannot be started is one missed target, once. */
static bool mps_up(void)
{
    if (mpsd.state == MPS_DOWN) {
        struct cs_mps_daemon d;
        mpsd.state = MPS_FAILED;
        if (cs_mps_start(&mpsd.m, mpsd.gpu.uuid, &d, &mpsd.how) == CS_EXIT_OK) {
            mpsd.ours = mpsd.how != CS_MPS_JOINED;
            mpsd.pid = d.pid;
            if ((mpsd.env = mps_client_env(&d)))
                mpsd.state = MPS_UP;
        }
        if (mpsd.state == MPS_FAILED) {
            printf("%-22s %s", "MPS control daemon", "not started: no concurrent runs");
            verdict(0);
        }
    }
    return mpsd.state == MPS_UP;
}

/* Stops the daemon if we started it (a joined one is someone else's). A
 * failure to stop is reported (cs_mps_stop says why) but judges nothing. */
static void mps_down(void)
{
    char did[256];
    if (mpsd.ours && cs_mps_stop(&mpsd.m, mpsd.gpu.uuid, false, did, sizeof did) == CS_EXIT_OK)
        printf("MPS control daemon of %s: %s\n", mpsd.gpu.uuid, did);
}

/* The concurrent rows of a workload: each limit under `cushare run --mps`,
 * then each mix bare and concurrent (bare first: concurrent's kept run is
 * judged against it), side by side with its time-sliced run. */
static void run_mps(struct workload *w)
{
    if (!mps_up())
        return;
    static const char *const how[] = {[CS_MPS_JOINED] = "joined", [CS_MPS_STARTED] = "started",
                                      [CS_MPS_RESTARTED] = "restarted"};
    printf("-- concurrent: MPS control daemon of %s (pid %d, %s by this bench)\n",
           mpsd.gpu.uuid, (int)mpsd.pid, how[mpsd.how]);
    for (int i = 0; i < lbench.nlimits; i++)
        run_limit(w, i, CONCURRENT);
    for (int k = 0; k < lbench.nmixes; k++) {
        measure_mix(w, k, BARE_MPS);
        measure_mix(w, k, CONCURRENT);
        print_side_by_side(w, k);
    }
}

static void run_workload(struct workload *w)
{
    printf("\n== %s: %s\n", w->name, w->cmd);
    printf("%-22s %12s %8s %8s %8s\n", "run", "kernels/s", "share", "target", "error");
    w->native = finish(start(w->cmd, NATIVE, 0, 0), "native run", &w->native_gpu_us);
    printf("%-22s %12.1f %7.1f%%\n", "native (no cushare)", w->native, 100.0);
    if (w->native <= 0) {
        lbench.failures++;
        return;
    }
    w->unlimited = run1(w->cmd, SLICED, 0, "cushare run without a limit");
    double loss = 100.0 * (1 - w->unlimited / w->native);
    printf("%-22s %12.1f %7.1f%% %8s %+7.1f%%", "cushare, no limit", w->unlimited,
           100.0 * w->unlimited / w->native, "<=1% off", -loss);
    verdict(w->unlimited > 0 && loss <= 1.0);
    for (int i = 0; i < lbench.nlimits; i++)
        run_limit(w, i, SLICED);
    for (int k = 0; k < lbench.nmixes; k++) {
        measure_mix(w, k, SLICED);
        print_sliced_mix(w, k);
    }
    if (lbench.mps)
        run_mps(w);
}

static void run_launchbound(double *native, double *limited)
{
    /* A CPU-bound rate: noise only ever slows a run, so best of 3,
     * alternating, as for the launch cost. */
    printf("\n== launch-bound (best of 3, alternating): %s\n", lbench.launchbound);
    *native = *limited = 0;
    for (int rep = 0; rep < 3; rep++) {
        double a = run1(lbench.launchbound, NATIVE, 0, "launch-bound native run");
        double b = run1(lbench.launchbound, SLICED, 25, "launch-bound run at 25%");
        *native = a > *native ? a : *native;
        *limited = b > *limited ? b : *limited;
    }
    double kept = *native > 0 ? 100.0 * *limited / *native : 0;
    printf("%-22s %12.1f\n%-22s %12.1f %7.1f%% %8s", "native (no cushare)", *native,
           "--sm 25 (force)", *limited, kept, ">=97%");
    verdict(*native > 0 && kept >= 97.0);
}

/* Launch cost: what cushare adds to every launch when no limit is set
 * (fast path) and when one is (measurement, pacing idle). */
static void run_launchcost(void)
{
    printf("\n== launch cost (best of 3, alternating): %s\n", lbench.launchcost);
    double native = 0, none = 0, lim = 0;
    for (int rep = 0; rep < 3; rep++) {
        double a = run1(lbench.launchcost, NATIVE, 0, "launch-cost native run");
        double b = run1(lbench.launchcost, SLICED, 0, "launch-cost run without a limit");
        double c = run1(lbench.launchcost, SLICED, 99, "launch-cost run at 99%");
        native = a > native ? a : native;
        none = b > none ? b : none;
        lim = c > lim ? c : lim;
    }
    if (native <= 0 || none <= 0 || lim <= 0) {
        lbench.failures++;
        return;
    }
    double n_us = 1e6 / native, u_us = 1e6 / none, l_us = 1e6 / lim;
    printf("%-22s %9.2f us\n", "native (no cushare)", n_us);
    printf("%-22s %9.2f us %+7.1f%% %8s", "cushare, no limit", u_us, 100 * (u_us / n_us - 1),
           "<=+1%");
    verdict(u_us <= n_us * 1.01);
    printf("%-22s %9.2f us %+7.1f%%  (measurement: two events per launch)\n",
           "cushare, --sm 99", l_us, 100 * (l_us / n_us - 1));
}

/* gnuplot's own complaints are not ours to show (as 2>/dev/null was). */
static void quiet_stderr(void *arg)
{
    (void)arg;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0)
        dup2(fd, STDERR_FILENO);
}

/* Runs gnuplot on the script at `gp`, which writes --out/`png`. */
static void plot(const char *gp, const char *png)
{
    char *av[] = {"gnuplot", (char *)gp, NULL};
    struct cs_cli_spawn s = {.argv = av, .search_path = true, .quiet = true,
                             .in_child = quiet_stderr};
    pid_t pid = cs_cli_spawn("bench limiter", &s);
    if (pid > 0 && cs_cli_wait(pid) == 0)
        printf("wrote %s/%s\n", lbench.out, png);
    else
        printf("gnuplot not found or failed: plot script left in %s\n", gp);
}

/* --out/`name` opened for writing into path, or NULL after a message
 * (also when the path does not fit: a cut path is another file). */
static FILE *out_file(const char *name, char *path, size_t len)
{
    int n = snprintf(path, len, "%s/%s", lbench.out, name);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "cushare: bench limiter: --out %s: path too long for %s\n",
                lbench.out, name);
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "cushare: bench limiter: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static void csv_row(FILE *f, const char *name, const char *run, int target, double rate,
                    double native)
{
    fprintf(f, "%s,%s,%d,%.1f,%.2f\n", name, run, target, rate, 100 * rate / native);
}

/* A workload's rows of `mode`: its limits (when the mode has limit rows)
 * and each tenant of each mix, mixes in --mix order. */
static void csv_mode_rows(FILE *f, const struct workload *w, enum mode mode)
{
    for (int i = 0; modes[mode].limit_run && i < lbench.nlimits; i++)
        csv_row(f, w->name, modes[mode].limit_run, lbench.limits[i], w->rate[mode][i], w->native);
    for (int k = 0; k < lbench.nmixes; k++) {
        const struct mix *m = &lbench.mixes[k];
        const char *run = modes[mode].mix_run ? modes[mode].mix_run : m->n == 2 ? "pair" : "mix";
        for (int t = 0; t < m->n; t++)
            csv_row(f, w->name, run, m->limits[t], w->mix_rate[mode][k][t], w->native);
    }
}

static int write_csv(double lb_native, double lb_limited)
{
    char path[PATH_MAX + 32];
    FILE *f = out_file("limiter-bench.csv", path, sizeof path);
    if (!f)
        return -1;
    fprintf(f, "workload,run,target_pct,kernels_per_s,share_pct\n");
    for (int k = 0; k < lbench.nw; k++) {
        const struct workload *w = &lbench.w[k];
        if (!measured(w))
            continue;
        fprintf(f, "%s,native,100,%.1f,100.0\n", w->name, w->native);
        csv_row(f, w->name, "unlimited", 100, w->unlimited, w->native);
        csv_mode_rows(f, w, SLICED);
        if (lbench.mps && mpsd.state == MPS_UP) {
            csv_mode_rows(f, w, CONCURRENT);
            csv_mode_rows(f, w, BARE_MPS);
        }
    }
    if (lb_native > 0)
        csv_row(f, "launchbound", "limit", 25, lb_limited, lb_native);
    fclose(f);
    printf("\nwrote %s\n", path);
    return 0;
}

/* --out/`NAME`.gp opened for writing, its first lines drawing into
 * --out/`NAME`.png; NULL after a message. */
static FILE *plot_file(const char *name, char *path, size_t len)
{
    char gp[64];
    snprintf(gp, sizeof gp, "%s.gp", name);
    FILE *f = out_file(gp, path, len);
    if (f)
        fprintf(f, "set terminal pngcairo size 900,600 noenhanced\nset output '%s/%s.png'\n",
                lbench.out, name);
    return f;
}

static void write_bench_gp(void)
{
    char path[PATH_MAX + 32];
    FILE *f = plot_file("limiter-bench", path, sizeof path);
    if (!f)
        return;
    fprintf(f, "set datafile separator ','\n"
               "set title 'cushare: achieved GPU share vs CUDA_DEVICE_SM_LIMIT (force)'\n"
               "set xlabel 'SM limit (%%)'\nset ylabel 'throughput, %% of native'\n"
               "set xrange [0:105]\nset yrange [0:110]\nset grid\nset key left top\n"
               "plot x title 'target' with lines dt 2 lc 'gray'");
    for (int k = 0; k < lbench.nw; k++)
        fprintf(f, ", '%s/limiter-bench.csv' using ((strcol(1) eq '%s' && strcol(2) eq "
                   "'limit') ? $3 : 1/0):5 title '%s' with linespoints lw 2 pt 7",
                lbench.out, lbench.w[k].name, lbench.w[k].name);
    for (int k = 0; k < lbench.nw; k++)
        fprintf(f, ", '%s/limiter-bench.csv' using ((strcol(1) eq '%s' && (strcol(2) eq "
                   "'pair' || strcol(2) eq 'mix')) ? $3 : 1/0):5 title '%s, tenants side by "
                   "side' with points pt 5 ps 1.5",
                lbench.out, lbench.w[k].name, lbench.w[k].name);
    fprintf(f, "\n");
    fclose(f);
    plot(path, "limiter-bench.png");
}

/* One aggregate of the share plot: a number, or NaN (no bar) when a
 * tenant of that run failed. */
static void share_cell(FILE *f, const struct workload *w, int k, enum mode mode)
{
    double sum = together(w, &lbench.mixes[k], w->mix_rate[mode][k]);
    if (sum < 0)
        fprintf(f, " NaN");
    else
        fprintf(f, " %.2f", sum);
}

/* limiter-share.gp: per workload and mix, the tenants' aggregate
 * throughput (% of one native tenant) time-sliced, concurrent and bare
 * MPS as grouped bars. Its data is inline: the CSV's rows do not say
 * which mix a tenant belongs to. */
static void write_share_gp(void)
{
    char path[PATH_MAX + 32];
    FILE *f = plot_file("limiter-share", path, sizeof path);
    if (!f)
        return;
    fprintf(f, "set title 'cushare: tenants together, time-sliced vs concurrent (MPS)'\n"
               "set ylabel 'aggregate throughput, %% of one tenant alone'\n"
               "set style data histograms\nset style histogram clustered gap 1\n"
               "set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
               "set yrange [0:*]\nset grid ytics\nset key below\n"
               "set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2\n"
               "# workload and mix, then time-sliced, concurrent, bare MPS\n$share << EOD\n");
    for (int i = 0; i < lbench.nw; i++)
        for (int k = 0; measured(&lbench.w[i]) && k < lbench.nmixes; k++) {
            char name[64];
            mix_name(&lbench.mixes[k], name, sizeof name);
            fprintf(f, "\"%s %s\"", lbench.w[i].name, name);
            for (int mode = SLICED; mode < NMODES; mode++)
                share_cell(f, &lbench.w[i], k, mode);
            fprintf(f, "\n");
        }
    fprintf(f, "EOD\nplot $share using 2:xtic(1) title 'time-sliced (cushare run)', "
               "'' using 3 title 'concurrent (cushare run --mps)', "
               "'' using 4 title 'bare MPS (no cushare)'\n");
    fclose(f);
    plot(path, "limiter-share.png");
}

static void write_outputs(double lb_native, double lb_limited)
{
    mkdir(lbench.out, 0755);
    if (write_csv(lb_native, lb_limited)) {
        lbench.failures++;
        return;
    }
    write_bench_gp();
    if (lbench.mps && mpsd.state == MPS_UP)
        write_share_gp();
}

/* The numeric options: a number in [min, max], or (min, max] when
 * `above`; `mps`: only with --mps. */
static const struct num_opt {
    const char *name;
    double *val;
    double min, max;
    bool above, mps;
} num_opts[] = {
    {"--secs", &lbench.secs, 0, 1e6, true, false},
    {"--warmup", &lbench.warmup, 0, 1e6, false, false},
    {"--tolerance", &lbench.tol, 0, 100, true, false},
    {"--start-delay", &lbench.start_delay, 0, 1e6, false, false},
    {"--conserve", &lbench.conserve, 0, 100, false, false},
    {"--mps-tolerance", &lbench.mps_tol, 0, 100, true, true},
    {"--mps-bare", &lbench.mps_bare, 0, 100, false, true},
    {"--mps-gain", &lbench.mps_gain, 0, 1e3, false, true},
};

/* Option `a` with value v when it is a numeric one: CS_EXIT_OK, -1 when
 * it is not one of them, or the usage error. *mps_only names it when it needs --mps. */
static int num_option(const char *a, const char *v, const char **mps_only)
{
    for (size_t i = 0; i < sizeof num_opts / sizeof num_opts[0]; i++) {
        const struct num_opt *o = &num_opts[i];
        if (strcmp(a, o->name))
            continue;
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(o->above ? x > o->min : x >= o->min) || x > o->max)
            return cs_cli_usage_error("bench limiter", "%s takes a number %s %g, at most %g: "
                                      "not '%s'", a, o->above ? "above" : "from", o->min,
                                      o->max, v);
        *o->val = x;
        if (o->mps)
            *mps_only = o->name;
        return CS_EXIT_OK;
    }
    return -1;
}

/* The options with text values: 0, or the usage error. */
static int text_option(const char *a, const char *v, bool *lb_set, bool *lc_set)
{
    long r;
    if (!strcmp(a, "--runs")) {
        if (cs__parse_int(v, 1, MAX_RUNS, &r))
            return cs_cli_usage_error("bench limiter", "--runs takes 1..%d", MAX_RUNS);
        lbench.runs = (int)r;
    } else if (!strcmp(a, "--mix")) {
        if (parse_mix(v))
            return cs_cli_usage_error("bench limiter", "--mix takes 2..%d limits 1..99 joined "
                                      "by '+', summing to at most 100 (at most %d mixes)",
                                      MAX_MIX_TENANTS, MAX_MIXES);
    } else if (!strcmp(a, "--out")) {
        snprintf(lbench.out, sizeof lbench.out, "%s", v);
    } else if (!strcmp(a, "--limits")) {
        if (parse_limits(v))
            return cs_cli_usage_error("bench limiter", "--limits takes percentages 1..100, "
                                      "comma separated");
    } else if (!strcmp(a, "--workload")) {
        if (add_workload(v))
            return cs_cli_usage_error("bench limiter", "--workload takes NAME=COMMAND");
    } else if (!strcmp(a, "--launchbound")) {
        snprintf(lbench.launchbound, sizeof lbench.launchbound, "%s", strcmp(v, "none") ? v : "");
        *lb_set = true;
    } else if (!strcmp(a, "--launchcost")) {
        snprintf(lbench.launchcost, sizeof lbench.launchcost, "%s", strcmp(v, "none") ? v : "");
        *lc_set = true;
    } else {
        return cs_cli_usage_error("bench limiter", "unknown option %s (see --help)", a);
    }
    return 0;
}

/* `cmd` with `arg` after it, quoted, when it fits (a default workload). */
static void default_cmd(char *out, size_t len, const char *cmd, const char *arg)
{
    if ((size_t)snprintf(out, len, "'%s' %s", cmd, arg) >= len)
        out[0] = '\0';
}

/* What was not given: the default mix and the limiter_workload next to
 * this binary. And the `cushare` that runs the limited workloads: the one
 * installed (or built) beside this binary. CS_EXIT_OK, or the error. */
static int apply_defaults(bool lb_set, bool lc_set)
{
    if (!lbench.nmixes)
        parse_mix("25+75");
    snprintf(lbench.cushare, sizeof lbench.cushare, "%s/cushare", cs_cli_self_dir());
    if (access(lbench.cushare, X_OK) != 0) {
        fprintf(stderr, "cushare: bench limiter: no cushare command next to cushare-bench (%s): "
                        "build both with `make`, or install both with `make install`\n",
                lbench.cushare);
        return CS_EXIT_FAIL;
    }
    char dflt[PATH_MAX + 32];
    snprintf(dflt, sizeof dflt, "%s/limiter_workload", cs_cli_self_dir());
    if (access(dflt, X_OK) != 0) {
        if (!lbench.nw)
            return cs_cli_usage_error("bench limiter", "no workload: pass --workload NAME=COMMAND "
                                      "(limiter_workload is not next to cushare-bench)");
        return CS_EXIT_OK;
    }
    if (!lbench.nw) {
        char spec[PATH_MAX + 64];
        snprintf(spec, sizeof spec, "elementwise='%s' elementwise", dflt);
        add_workload(spec);
    }
    if (!lb_set)
        default_cmd(lbench.launchbound, sizeof lbench.launchbound, dflt, "launchbound");
    if (!lc_set)
        default_cmd(lbench.launchcost, sizeof lbench.launchcost, dflt, "launchcost");
    return CS_EXIT_OK;
}

/* The arguments into lbench: -1 after --help, else CS_EXIT_OK or the usage
 * error. */
static int parse_args(int argc, char **argv)
{
    bool lb_set = false, lc_set = false;
    const char *mps_only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (!strcmp(a, "--mps")) {
            lbench.mps = true;
            continue;
        }
        if (!v)
            return cs_cli_usage_error("bench limiter", "%s needs a value (see --help)", a);
        i++;
        int rc = num_option(a, v, &mps_only);
        if (rc < 0)
            rc = text_option(a, v, &lb_set, &lc_set);
        if (rc)
            return rc;
    }
    if (mps_only && !lbench.mps)
        return cs_cli_usage_error("bench limiter", "%s judges the concurrent runs: add --mps",
                                  mps_only);
    return apply_defaults(lb_set, lc_set);
}

/* Children get their slice from `cushare run`, nothing inherited. */
static void clean_env(void)
{
    static const char *const vars[] = {"LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT",
                                       "GPU_CORE_UTILIZATION_POLICY",
                                       "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    for (int d = 0; d < 16; d++) {
        char v[64];
        snprintf(v, sizeof v, "CUDA_DEVICE_SM_LIMIT_%d", d);
        unsetenv(v);
    }
}

int cs_bench_limiter(int argc, char **argv)
{
    snprintf(lbench.out, sizeof lbench.out, "docs");
    parse_limits("10,25,50,75,100");
    int rc = parse_args(argc, argv);
    if (rc)
        return rc < 0 ? CS_EXIT_OK : rc;
    if (lbench.mps && (rc = mps_check()))
        return rc;
    clean_env();
    printf("cushare bench limiter: %g s measured after %g s warm-up per run, tolerance %g pp\n",
           lbench.secs, lbench.warmup, lbench.tol);
    if (lbench.mps)
        printf("concurrent (--mps): tolerance %g pp, >= %g %% of bare MPS, >= %gx time-sliced%s\n",
               lbench.mps_tol, lbench.mps_bare, lbench.mps_gain,
               lbench.mps_gain > 0 ? "" : " (not judged)");
    for (int k = 0; k < lbench.nw; k++)
        run_workload(&lbench.w[k]);
    double lb_native = 0, lb_limited = 0;
    if (lbench.launchbound[0])
        run_launchbound(&lb_native, &lb_limited);
    if (lbench.launchcost[0])
        run_launchcost();
    write_outputs(lb_native, lb_limited);
    mps_down();
    printf("\n%s: %d target%s missed\n", lbench.failures ? "FAIL" : "PASS", lbench.failures,
           lbench.failures == 1 ? "" : "s");
    return lbench.failures ? CS_EXIT_FAIL : CS_EXIT_OK;
}
