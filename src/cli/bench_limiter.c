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
 * never run by a shell.
 * Targets: each limit and each tenant of a mix within --tolerance points
 * (default 5) of its target; a mix's tenants together at least --conserve
 * % (default 97) of their limits' sum; a two-tenant mix at its limits'
 * ratio within 10 %; cushare without a
 * limit loses at most 1 %; the launch-bound workload keeps >= 97 %; an
 * empty-kernel launch costs at most 1 % more without a limit.
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

#include "cli/bench.h"
#include "cli/cli.h"
#include "core/clock.h"
#include "core/config.h"


static const char usage[] =
    "usage: cushare bench limiter [--secs S] [--warmup W] [--limits L,L,...] [--out DIR]\n"
    "                             [--workload NAME=COMMAND]... [--launchbound COMMAND|none]\n"
    "                             [--launchcost COMMAND|none]\n"
    "                             [--tolerance PP] [--start-delay S] [--runs K]\n"
    "                             [--mix L+L[+L...]]... [--conserve PCT]\n"
    "  --secs         measured seconds per run (default 5), after --warmup (default 1)\n"
    "  --limits       SM limits to run (default 10,25,50,75,100)\n"
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
    "                 (default 25+75)\n"
    "  --conserve     a mix's tenants together must reach PCT %% of their limits' sum\n"
    "                 (default 97)\n";

#define MAX_WORKLOADS 8
#define MAX_LIMITS 16
#define MAX_MIXES 8
#define MAX_MIX_TENANTS 8
#define MAX_RUNS 10

/* Tenants run side by side, each at its limit. */
struct mix {
    int n;
    int limits[MAX_MIX_TENANTS];
};

struct workload {
    char name[64];
    char cmd[1024];
    double native, unlimited;
    double rate[MAX_LIMITS];                            /* the worst run's */
    double mix_rate[MAX_MIXES][MAX_MIX_TENANTS];        /* the worst run's */
};

static struct {
    double secs, warmup, tol, start_delay, conserve;
    int runs, nlimits, nmixes;
    int limits[MAX_LIMITS];
    struct mix mixes[MAX_MIXES];
    char out[PATH_MAX];
    char self[PATH_MAX];
    int nw;
    struct workload w[MAX_WORKLOADS];
    char launchbound[1024];
    char launchcost[1024];
    int failures;
} B = {.secs = 5, .warmup = 1, .tol = 5, .start_delay = 10, .conserve = 97, .runs = 1};

/* A workload run in flight: its pid and its stdout. */
struct child {
    pid_t pid;
    FILE *out;
};

/* Our environment without LD_PRELOAD, for native runs (built once). */
static char **native_env(void)
{
    static char **env;
    if (!env) {
        size_t n = 0, k = 0;
        while (environ[n])
            n++;
        env = calloc(n + 1, sizeof *env);
        if (!env)
            return NULL;
        for (size_t i = 0; i < n; i++)
            if (strncmp(environ[i], "LD_PRELOAD=", 11))
                env[k++] = environ[i];
    }
    return env;
}

/* Starts `cmd` (split into words as the shell would, without running
 * anything: WRDE_NOCMD) natively, or under `cushare run` with limit pct
 * (0: none), with the timing options every workload takes. */
static struct child start(const char *cmd, int cushare, int pct, long long start_mono)
{
    struct child c = {.pid = -1};
    wordexp_t we;
    if (wordexp(cmd, &we, WRDE_NOCMD) || !we.we_wordc) {
        fprintf(stderr, "cushare: bench limiter: cannot split the workload command into words "
                        "(quotes, no $(...), pipes or redirections): %s\n", cmd);
        return c;
    }
    char secs[32], warmup[32], mono[32], pcts[16];
    snprintf(secs, sizeof secs, "%g", B.secs);
    snprintf(warmup, sizeof warmup, "%g", B.warmup);
    snprintf(mono, sizeof mono, "%lld", start_mono);
    snprintf(pcts, sizeof pcts, "%d", pct);
    char *av[we.we_wordc + 16];
    size_t k = 0;
    if (cushare) {
        av[k++] = B.self;
        av[k++] = "run";
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
    struct cs_cli_spawn s = {.argv = av, .envp = cushare ? NULL : native_env(),
                             .search_path = true, .stdout_fd = &fd};
    if (cushare || s.envp)
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

/* Reads the child's output to the end; its rate, or -1. */
static double finish(struct child c, const char *what)
{
    if (c.pid <= 0)
        return -1;
    char buf[4096];
    double rate = -1;
    while (fgets(buf, sizeof buf, c.out)) {
        char *r = strstr(buf, "RESULT ");
        char *p = r ? strstr(r, " rate=") : NULL;
        if (p)
            rate = atof(p + 6);
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

static double run1(const char *cmd, int cushare, int pct, const char *what)
{
    return finish(start(cmd, cushare, pct, 0), what);
}

static void verdict(int ok)
{
    printf("  %s\n", ok ? "ok" : "MISSED");
    if (!ok)
        B.failures++;
}

static int parse_limits(const char *s)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    B.nlimits = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (B.nlimits == MAX_LIMITS || cs__parse_int(t, 1, 100, &v))
            return -1;
        B.limits[B.nlimits++] = (int)v;
    }
    return B.nlimits ? 0 : -1;
}

static int add_workload(const char *spec)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1] || B.nw == MAX_WORKLOADS ||
        (size_t)(eq - spec) >= sizeof B.w[0].name)
        return -1;
    struct workload *w = &B.w[B.nw++];
    memcpy(w->name, spec, (size_t)(eq - spec));
    w->name[eq - spec] = '\0';
    snprintf(w->cmd, sizeof w->cmd, "%s", eq + 1);
    return 0;
}

static int parse_mix(const char *s)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    if (B.nmixes == MAX_MIXES)
        return -1;
    struct mix m = {0};
    int sum = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        long v;
        if (m.n == MAX_MIX_TENANTS || cs__parse_int(t, 1, 99, &v))
            return -1;
        m.limits[m.n++] = (int)v;
        sum += (int)v;
    }
    if (m.n < 2 || sum > 100)
        return -1;
    B.mixes[B.nmixes++] = m;
    return 0;
}

static double share_of(const struct workload *w, double rate)
{
    return 100.0 * rate / w->native;
}

/* One limit, --runs times: the run furthest from the target is kept. */
static void run_limit(struct workload *w, int i)
{
    char label[64];
    snprintf(label, sizeof label, "--sm %d (force)", B.limits[i]);
    double worst = -1, worst_err = -1;
    char all[256] = "";
    size_t used = 0;
    for (int r = 0; r < B.runs; r++) {
        double rate = run1(w->cmd, 1, B.limits[i], label);
        double err = rate > 0 ? fabs(share_of(w, rate) - B.limits[i]) : 1e9;
        if (err > worst_err)
            worst = rate, worst_err = err;
        if (B.runs > 1 && used < sizeof all)
            used += (size_t)snprintf(all + used, sizeof all - used, "%s%.1f", r ? " " : "",
                                     share_of(w, rate));
    }
    w->rate[i] = worst;
    double share = share_of(w, worst);
    printf("%-22s %12.1f %7.1f%% %7d%% %+6.1fpp", label, worst, share, B.limits[i],
           share - B.limits[i]);
    if (B.runs > 1)
        printf("  runs: %s", all);
    verdict(worst > 0 && fabs(share - B.limits[i]) <= B.tol);
}

/* How far a run of a mix is from its targets: the largest error of a
 * tenant, or of the sum's shortfall below --conserve. */
static double mix_badness(const struct workload *w, const struct mix *m, const double *rate)
{
    double bad = 0, sum = 0, target = 0;
    for (int t = 0; t < m->n; t++) {
        if (rate[t] <= 0)
            return 1e9;
        double e = fabs(share_of(w, rate[t]) - m->limits[t]);
        bad = e > bad ? e : bad;
        sum += share_of(w, rate[t]);
        target += m->limits[t];
    }
    double short_pp = B.conserve * target / 100 - sum;
    return short_pp > bad ? short_pp : bad;
}

static void run_mix_once(const struct workload *w, const struct mix *m, double *rate)
{
    long long t0 = cs__now_ns() + (long long)(B.start_delay * 1e9);
    struct child c[MAX_MIX_TENANTS];
    for (int t = 0; t < m->n; t++)
        c[t] = start(w->cmd, 1, m->limits[t], t0);
    for (int t = 0; t < m->n; t++) {
        char what[64];
        snprintf(what, sizeof what, "tenant at %d%%", m->limits[t]);
        rate[t] = finish(c[t], what);
    }
}

static void run_mix(struct workload *w, int k)
{
    const struct mix *m = &B.mixes[k];
    double *best = w->mix_rate[k], worst_bad = -1;
    for (int r = 0; r < B.runs; r++) {
        double rate[MAX_MIX_TENANTS];
        run_mix_once(w, m, rate);
        double bad = mix_badness(w, m, rate);
        if (bad > worst_bad) {
            worst_bad = bad;
            memcpy(best, rate, sizeof rate);
        }
    }
    double sum = 0, target = 0;
    bool ran = true;
    for (int t = 0; t < m->n; t++) {
        char label[64];
        snprintf(label, sizeof label, "tenant %c --sm %d", 'A' + t, m->limits[t]);
        double share = share_of(w, best[t]);
        printf("%-22s %12.1f %7.1f%% %7d%% %+6.1fpp", label, best[t], share, m->limits[t],
               share - m->limits[t]);
        verdict(best[t] > 0 && fabs(share - m->limits[t]) <= B.tol);
        sum += share;
        target += m->limits[t];
        ran = ran && best[t] > 0;
    }
    printf("%-22s %12s %7.1f%% %7.0f%% %7.1f%% of limits", "together", "", sum, target,
           100 * sum / target);
    verdict(ran && sum >= B.conserve * target / 100);
    if (m->n == 2) {
        double ratio = best[1] > 0 ? best[0] / best[1] : 0;
        double want = (double)m->limits[0] / m->limits[1];
        printf("%-22s %12.3f %8s %8.3f %+6.1f%%", "A:B ratio", ratio, "", want,
               100.0 * (ratio / want - 1));
        verdict(ran && fabs(ratio / want - 1) <= 0.10);
    }
}

static void run_workload(struct workload *w)
{
    printf("\n== %s: %s\n", w->name, w->cmd);
    printf("%-22s %12s %8s %8s %8s\n", "run", "kernels/s", "share", "target", "error");
    w->native = run1(w->cmd, 0, 0, "native run");
    printf("%-22s %12.1f %7.1f%%\n", "native (no cushare)", w->native, 100.0);
    if (w->native <= 0) {
        B.failures++;
        return;
    }
    w->unlimited = run1(w->cmd, 1, 0, "cushare run without a limit");
    double loss = 100.0 * (1 - w->unlimited / w->native);
    printf("%-22s %12.1f %7.1f%% %8s %+7.1f%%", "cushare, no limit", w->unlimited,
           100.0 * w->unlimited / w->native, "<=1% off", -loss);
    verdict(w->unlimited > 0 && loss <= 1.0);
    for (int i = 0; i < B.nlimits; i++)
        run_limit(w, i);
    for (int k = 0; k < B.nmixes; k++)
        run_mix(w, k);
}

static void run_launchbound(double *native, double *limited)
{
    /* A CPU-bound rate: noise only ever slows a run, so best of 3,
     * alternating, as for the launch cost. */
    printf("\n== launch-bound (best of 3, alternating): %s\n", B.launchbound);
    *native = *limited = 0;
    for (int rep = 0; rep < 3; rep++) {
        double a = run1(B.launchbound, 0, 0, "launch-bound native run");
        double b = run1(B.launchbound, 1, 25, "launch-bound run at 25%");
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
    printf("\n== launch cost (best of 3, alternating): %s\n", B.launchcost);
    double native = 0, none = 0, lim = 0;
    for (int rep = 0; rep < 3; rep++) {
        double a = run1(B.launchcost, 0, 0, "launch-cost native run");
        double b = run1(B.launchcost, 1, 0, "launch-cost run without a limit");
        double c = run1(B.launchcost, 1, 99, "launch-cost run at 99%");
        native = a > native ? a : native;
        none = b > none ? b : none;
        lim = c > lim ? c : lim;
    }
    if (native <= 0 || none <= 0 || lim <= 0) {
        B.failures++;
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

static void write_outputs(double lb_native, double lb_limited)
{
    mkdir(B.out, 0755);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/limiter-bench.csv", B.out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cushare: bench limiter: cannot write %s: %s\n", path, strerror(errno));
        B.failures++;
        return;
    }
    fprintf(f, "workload,run,target_pct,kernels_per_s,share_pct\n");
    for (int k = 0; k < B.nw; k++) {
        const struct workload *w = &B.w[k];
        if (w->native <= 0)
            continue;
        fprintf(f, "%s,native,100,%.1f,100.0\n", w->name, w->native);
        fprintf(f, "%s,unlimited,100,%.1f,%.2f\n", w->name, w->unlimited,
                100 * w->unlimited / w->native);
        for (int i = 0; i < B.nlimits; i++)
            fprintf(f, "%s,limit,%d,%.1f,%.2f\n", w->name, B.limits[i], w->rate[i],
                    100 * w->rate[i] / w->native);
        for (int k = 0; k < B.nmixes; k++)
            for (int t = 0; t < B.mixes[k].n; t++)
                fprintf(f, "%s,%s,%d,%.1f,%.2f\n", w->name, B.mixes[k].n == 2 ? "pair" : "mix",
                        B.mixes[k].limits[t], w->mix_rate[k][t],
                        100 * w->mix_rate[k][t] / w->native);
    }
    if (lb_native > 0)
        fprintf(f, "launchbound,limit,25,%.1f,%.2f\n", lb_limited, 100 * lb_limited / lb_native);
    fclose(f);
    printf("\nwrote %s\n", path);

    snprintf(path, sizeof path, "%s/limiter-bench.gp", B.out);
    f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "set datafile separator ','\n"
               "set terminal pngcairo size 900,600 noenhanced\n"
               "set output '%s/limiter-bench.png'\n"
               "set title 'cushare: achieved GPU share vs CUDA_DEVICE_SM_LIMIT (force)'\n"
               "set xlabel 'SM limit (%%)'\nset ylabel 'throughput, %% of native'\n"
               "set xrange [0:105]\nset yrange [0:110]\nset grid\nset key left top\n"
               "# HAMi-core (force) on the same H200, from docs (DESIGN.md)\n"
               "$hami << EOD\n10,38,5\n25,100,36\n50,100,73\n75,100,88\nEOD\n"
               "plot x title 'target' with lines dt 2 lc 'gray'",
            B.out);
    for (int k = 0; k < B.nw; k++) {
        if (!strcmp(B.w[k].name, "matmul"))
            fprintf(f, ", $hami using 1:2 title 'HAMi-core, matmul' with linespoints dt 3 pt 6");
        if (!strcmp(B.w[k].name, "elementwise"))
            fprintf(f, ", $hami using 1:3 title 'HAMi-core, elementwise' with linespoints dt 3 "
                       "pt 6");
    }
    for (int k = 0; k < B.nw; k++)
        fprintf(f, ", '%s/limiter-bench.csv' using ((strcol(1) eq '%s' && strcol(2) eq "
                   "'limit') ? $3 : 1/0):5 title '%s' with linespoints lw 2 pt 7",
                B.out, B.w[k].name, B.w[k].name);
    for (int k = 0; k < B.nw; k++)
        fprintf(f, ", '%s/limiter-bench.csv' using ((strcol(1) eq '%s' && (strcol(2) eq "
                   "'pair' || strcol(2) eq 'mix')) ? $3 : 1/0):5 title '%s, tenants side by "
                   "side' with points pt 5 ps 1.5",
                B.out, B.w[k].name, B.w[k].name);
    fprintf(f, "\n");
    fclose(f);
    char *av[] = {"gnuplot", path, NULL};
    struct cs_cli_spawn s = {.argv = av, .search_path = true, .quiet = true,
                             .in_child = quiet_stderr};
    pid_t pid = cs_cli_spawn("bench limiter", &s);
    if (pid > 0 && cs_cli_wait(pid) == 0)
        printf("wrote %s/limiter-bench.png\n", B.out);
    else
        printf("gnuplot not found or failed: plot script left in %s\n", path);
}

int cs_bench_limiter(int argc, char **argv)
{
    snprintf(B.out, sizeof B.out, "docs");
    parse_limits("10,25,50,75,100");
    B.launchbound[0] = '\0';
    bool lb_set = false, lc_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return CS_EXIT_OK;
        }
        if (!v)
            return cs_cli_usage_error("bench limiter", "%s needs a value (see --help)", a);
        i++;
        if (!strcmp(a, "--secs"))
            B.secs = atof(v);
        else if (!strcmp(a, "--warmup"))
            B.warmup = atof(v);
        else if (!strcmp(a, "--tolerance"))
            B.tol = atof(v);
        else if (!strcmp(a, "--start-delay"))
            B.start_delay = atof(v);
        else if (!strcmp(a, "--conserve"))
            B.conserve = atof(v);
        else if (!strcmp(a, "--runs")) {
            long r;
            if (cs__parse_int(v, 1, MAX_RUNS, &r))
                return cs_cli_usage_error("bench limiter", "--runs takes 1..%d", MAX_RUNS);
            B.runs = (int)r;
        } else if (!strcmp(a, "--mix") && parse_mix(v))
            return cs_cli_usage_error("bench limiter", "--mix takes 2..%d limits 1..99 joined "
                                      "by '+', summing to at most 100 (at most %d mixes)",
                                      MAX_MIX_TENANTS, MAX_MIXES);
        else if (!strcmp(a, "--out"))
            snprintf(B.out, sizeof B.out, "%s", v);
        else if (!strcmp(a, "--limits") && parse_limits(v))
            return cs_cli_usage_error("bench limiter", "--limits takes percentages 1..100, "
                                      "comma separated");
        else if (!strcmp(a, "--workload") && add_workload(v))
            return cs_cli_usage_error("bench limiter", "--workload takes NAME=COMMAND");
        else if (!strcmp(a, "--launchbound")) {
            snprintf(B.launchbound, sizeof B.launchbound, "%s", strcmp(v, "none") ? v : "");
            lb_set = true;
        } else if (!strcmp(a, "--launchcost")) {
            snprintf(B.launchcost, sizeof B.launchcost, "%s", strcmp(v, "none") ? v : "");
            lc_set = true;
        } else if (strcmp(a, "--limits") && strcmp(a, "--workload") && strcmp(a, "--mix"))
            return cs_cli_usage_error("bench limiter", "unknown option %s (see --help)", a);
    }
    if (B.secs <= 0 || B.warmup < 0 || B.tol <= 0 || B.conserve < 0 || B.conserve > 100)
        return cs_cli_usage_error("bench limiter", "--secs and --tolerance must be positive, "
                                  "--conserve 0..100");
    if (!B.nmixes)
        parse_mix("25+75");
    snprintf(B.self, sizeof B.self, "%s/cushare", cs_cli_self_dir());
    char dflt[PATH_MAX + 32];
    snprintf(dflt, sizeof dflt, "%s/limiter_workload", cs_cli_self_dir());
    bool have_dflt = access(dflt, X_OK) == 0;
    if (!B.nw) {
        if (!have_dflt)
            return cs_cli_usage_error("bench limiter", "no workload: pass --workload "
                                      "NAME=COMMAND (limiter_workload is not next to cushare)");
        char spec[PATH_MAX + 64];
        snprintf(spec, sizeof spec, "elementwise='%s' elementwise", dflt);
        add_workload(spec);
    }
    if (!lb_set && have_dflt && strlen(dflt) + 16 < sizeof B.launchbound) {
        strcpy(B.launchbound, "'");
        strcat(B.launchbound, dflt);
        strcat(B.launchbound, "' launchbound");
    }
    if (!lc_set && have_dflt && strlen(dflt) + 16 < sizeof B.launchcost) {
        strcpy(B.launchcost, "'");
        strcat(B.launchcost, dflt);
        strcat(B.launchcost, "' launchcost");
    }
    /* Children get their slice from `cushare run`, nothing inherited. */
    unsetenv("LD_PRELOAD");
    unsetenv("CUDA_DEVICE_SM_LIMIT");
    unsetenv("GPU_CORE_UTILIZATION_POLICY");
    unsetenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    for (int d = 0; d < 16; d++) {
        char v[64];
        snprintf(v, sizeof v, "CUDA_DEVICE_SM_LIMIT_%d", d);
        unsetenv(v);
    }
    printf("cushare bench limiter: %g s measured after %g s warm-up per run, tolerance %g pp\n",
           B.secs, B.warmup, B.tol);
    for (int k = 0; k < B.nw; k++)
        run_workload(&B.w[k]);
    double lb_native = 0, lb_limited = 0;
    if (B.launchbound[0])
        run_launchbound(&lb_native, &lb_limited);
    if (B.launchcost[0])
        run_launchcost();
    write_outputs(lb_native, lb_limited);
    printf("\n%s: %d target%s missed\n", B.failures ? "FAIL" : "PASS", B.failures,
           B.failures == 1 ? "" : "s");
    return B.failures ? CS_EXIT_FAIL : CS_EXIT_OK;
}
