/*
 * `cushare bench init` end to end on the fake driver: one scenario per test
 * (argv[1]). The command runs as a child with its stdout and stderr in
 * files; its CSV is parsed by column name.
 *
 *   smoke     16 workers, --baseline --ctx: exit 0, 2x16 rows, every row ok
 *             with monotonic phases, percentiles printed, ledger removed
 *   failures  every cuInit fails (FAKECUDA_FAIL_cuInit): reported by reason,
 *             no percentile, exit 1
 *   crash     baseline workers die in cuInit: "crashed", never a success
 *   timeout   contexts take 30 s, --timeout 1: killed, "timeout", exit 1
 *   json      --alloc --json: machine-readable summary, exit 0
 *   usage     bad arguments exit 2 with a message
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static char tmp[4096];     /* per-test scratch directory */
static char out_path[4200], err_path[4200], csv_path[4200];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int c;
    while ((c = fgetc(f)) != EOF)
        fputc(c, m);
    fclose(m);
    fclose(f);
    return buf;
}

/* Runs `cushare bench ARGS...` (NULL-terminated) with extra "K=V" env
 * (NULL-terminated list); returns its exit status (128+sig if killed). */
static int run_bench(const char *const *env, ...)
{
    const char *build = getenv("CS_BUILD_DIR");
    CHECK(build != NULL);
    char cli[4200];
    snprintf(cli, sizeof cli, "%s/cushare", build);
    const char *argv[64] = {cli, "bench"};
    int argc = 2;
    va_list ap;
    va_start(ap, env);
    for (const char *a; (a = va_arg(ap, const char *));)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    fprintf(stderr, "test: running");
    for (int i = 0; i < argc; i++)
        fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n");

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(120);
        dup2(o, 1);
        dup2(e, 2);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(cli, (char **)argv);
        _exit(121);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    char *o = slurp(out_path), *e = slurp(err_path);
    fprintf(stderr, "---- stdout ----\n%s---- stderr ----\n%s----\n", o, e);
    free(o);
    free(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- CSV ------------------------------------------------------------------ */

#define MAX_COLS 32
#define MAX_ROWS 256

struct csv {
    int ncols, nrows;
    char *head[MAX_COLS];
    char *cell[MAX_ROWS][MAX_COLS];
};

static int split(char *line, char **cells)
{
    int n = 0;
    line[strcspn(line, "\n")] = '\0';
    for (char *p = line;; p++) {
        CHECK_LT(n, MAX_COLS);
        cells[n++] = p;
        p += strcspn(p, ",");
        if (!*p)
            break;
        *p = '\0';
    }
    return n;
}

static void csv_read(const char *path, struct csv *c)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    CHECK(getline(&line, &cap, f) > 0);
    c->ncols = split(strdup(line), c->head);
    while (getline(&line, &cap, f) > 0) {
        CHECK_LT(c->nrows, MAX_ROWS);
        CHECK_EQ(split(strdup(line), c->cell[c->nrows]), c->ncols);
        c->nrows++;
    }
    free(line);
    fclose(f);
}

static int col(const struct csv *c, const char *name)
{
    for (int i = 0; i < c->ncols; i++)
        if (!strcmp(c->head[i], name))
            return i;
    fprintf(stderr, "no CSV column %s\n", name);
    exit(1);
}

static const char *get(const struct csv *c, int row, const char *name)
{
    return c->cell[row][col(c, name)];
}

static int present(const struct csv *c, int row, const char *name)
{
    return get(c, row, name)[0] != '\0';
}

static long long num(const struct csv *c, int row, const char *name)
{
    const char *s = get(c, row, name);
    CHECK(*s);
    return strtoll(s, NULL, 10);
}

static int count_rows(const struct csv *c, const char *name, const char *value)
{
    int n = 0;
    for (int r = 0; r < c->nrows; r++)
        n += !strcmp(get(c, r, name), value);
    return n;
}

/* ---- scenarios ------------------------------------------------------------ */

static void check_contains_file(const char *path, const char *needle)
{
    char *s = slurp(path);
    CHECK_CONTAINS(s, needle);
    free(s);
}

/* The phases of row r that are present, in `names` order, from `prev` on. */
static void check_order(const struct csv *c, int r, const char *const *names, size_t n, long long prev)
{
    for (size_t k = 0; k < n; k++) {
        if (!present(c, r, names[k]))
            continue;
        long long v = num(c, r, names[k]);
        if (v < prev)
            fprintf(stderr, "row %d: %s %lld < %lld\n", r, names[k], v, prev);
        CHECK_LE(prev, v);
        prev = v;
    }
}

static void scenario_smoke(void)
{
    char xdg[4300], env_xdg[4400];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmp);
    mkdir(xdg, 0700);
    snprintf(env_xdg, sizeof env_xdg, "XDG_RUNTIME_DIR=%s", xdg);
    const char *env[] = {env_xdg, NULL};
    CHECK_EQ(run_bench(env, "init", "-n", "16", "--baseline", "--ctx", "--csv", csv_path, NULL), 0);

    struct csv c;
    csv_read(csv_path, &c);
    CHECK_EQ(c.nrows, 32);
    CHECK_EQ(count_rows(&c, "mode", "baseline"), 16);
    CHECK_EQ(count_rows(&c, "mode", "cushare"), 16);
    /* The worker's and cuInit's own thread, in order; the set-up thread's
     * stamps (setup_begin, ledger, setup_end) between wrapper and joined. */
    static const char *chain[] = {"woke_ns", "enter_ns", "wrapper_ns", "driver_ns", "real_init_ns",
                                  "joined_ns", "returned_ns", "ctx_ns", "exit_ns"};
    static const char *setup_chain[] = {"wrapper_ns", "setup_begin_ns", "ledger_ns",
                                        "setup_end_ns", "joined_ns"};
    int seen[2][16] = {{0}};
    for (int r = 0; r < c.nrows; r++) {
        int cushare = !strcmp(get(&c, r, "mode"), "cushare");
        CHECK_STREQ(get(&c, r, "run"), "1");
        CHECK_STREQ(get(&c, r, "reason"), "ok");
        CHECK_EQ(num(&c, r, "result"), 0);
        long long w = num(&c, r, "worker");
        CHECK(w >= 0 && w < 16);
        CHECK_EQ(seen[cushare][w]++, 0);
        /* Required phases, and the cushare-only ones exactly in cushare. */
        CHECK(present(&c, r, "woke_ns") && present(&c, r, "enter_ns") &&
              present(&c, r, "returned_ns") && present(&c, r, "ctx_ns") &&
              present(&c, r, "exit_ns"));
        CHECK(!present(&c, r, "alloc_ns"));
        static const char *cushare_only[] = {"wrapper_ns", "driver_ns", "setup_begin_ns",
                                             "ledger_ns", "setup_end_ns", "real_init_ns",
                                             "joined_ns"};
        for (size_t k = 0; k < sizeof cushare_only / sizeof cushare_only[0]; k++)
            CHECK_EQ(present(&c, r, cushare_only[k]), cushare);
        if (cushare)
            CHECK(strcmp(get(&c, r, "tier"), "none") != 0);
        else
            CHECK_STREQ(get(&c, r, "tier"), "none");
        /* release <= woke <= enter <= ... <= exit */
        check_order(&c, r, chain, sizeof chain / sizeof chain[0], 0);
        if (cushare)
            check_order(&c, r, setup_chain, sizeof setup_chain / sizeof setup_chain[0],
                        num(&c, r, "wrapper_ns"));
        if (present(&c, r, "identity_ns")) {
            CHECK_LE(num(&c, r, "wrapper_ns"), num(&c, r, "identity_ns"));
            CHECK_LE(num(&c, r, "identity_ns"), num(&c, r, "exit_ns"));
        }
        CHECK_EQ(num(&c, r, "init_latency_ns"), num(&c, r, "returned_ns") - num(&c, r, "enter_ns"));
        CHECK_EQ(num(&c, r, "ctx_latency_ns"), num(&c, r, "ctx_ns"));
    }
    check_contains_file(out_path, "run 1 baseline: ok 16/16, failed 0");
    check_contains_file(out_path, "run 1 cushare: ok 16/16, failed 0");
    check_contains_file(out_path, "p50 ");
    check_contains_file(out_path, "p95 ");
    check_contains_file(out_path, "p99 ");
    check_contains_file(out_path, "ratio cushare/baseline");
    check_contains_file(out_path, "baseline_failed=0 cushare_failed=0");

    /* The run's ledger directory is gone. */
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/cushare-%u", xdg, (unsigned)getuid());
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    CHECK_EQ(system(cmd), 0);
}

static void scenario_failures(void)
{
    const char *env[] = {"FAKECUDA_FAIL_cuInit=999", NULL};
    CHECK_EQ(run_bench(env, "init", "-n", "4", "--baseline", "--csv", csv_path, NULL), 1);
    struct csv c;
    csv_read(csv_path, &c);
    CHECK_EQ(c.nrows, 8);
    for (int r = 0; r < c.nrows; r++) {
        CHECK_STREQ(get(&c, r, "reason"), "cuinit");
        CHECK_EQ(num(&c, r, "result"), 999);
        CHECK(present(&c, r, "returned_ns"));
        CHECK(!present(&c, r, "ctx_ns"));
    }
    check_contains_file(out_path, "run 1 baseline: ok 0/4, failed 4");
    check_contains_file(out_path, "run 1 cushare: ok 0/4, failed 4");
    check_contains_file(out_path, "failures: cuInit error 4");
    check_contains_file(out_path, "no successful sample");
    check_contains_file(out_path, "baseline_init_p99_ms=- cushare_init_p99_ms=-");
    check_contains_file(out_path, "baseline_failed=4 cushare_failed=4");
}

static void scenario_crash(void)
{
    const char *lib = getenv("CS_BENCH_CRASH_LIB");
    CHECK(lib != NULL);
    char preload[4200];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
    const char *env[] = {preload, NULL};
    CHECK_EQ(run_bench(env, "init", "-n", "4", "--baseline", "--csv", csv_path, NULL), 1);
    struct csv c;
    csv_read(csv_path, &c);
    CHECK_EQ(c.nrows, 8);
    for (int r = 0; r < c.nrows; r++) {
        if (strcmp(get(&c, r, "mode"), "baseline"))
            continue; /* cushare resolves the real cuInit itself */
        CHECK_STREQ(get(&c, r, "reason"), "crashed");
        CHECK(!present(&c, r, "returned_ns"));
        CHECK(present(&c, r, "enter_ns"));
    }
    check_contains_file(out_path, "run 1 baseline: ok 0/4, failed 4");
    check_contains_file(out_path, "failures: crashed/killed 4");
}

static void scenario_timeout(void)
{
    const char *env[] = {"FAKECUDA_CTX_COST_US=30000000", NULL};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ(run_bench(env, "init", "-n", "3", "--ctx", "--timeout", "1", "--csv", csv_path, NULL),
             1);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK_LT(b.tv_sec - a.tv_sec, 20);
    struct csv c;
    csv_read(csv_path, &c);
    CHECK_EQ(c.nrows, 3);
    for (int r = 0; r < c.nrows; r++) {
        CHECK_STREQ(get(&c, r, "reason"), "timeout");
        CHECK(present(&c, r, "returned_ns")); /* cuInit done, context never */
        CHECK(!present(&c, r, "ctx_ns"));
    }
    check_contains_file(out_path, "failures: timeout 3");
}

static void scenario_json(void)
{
    CHECK_EQ(run_bench(NULL, "init", "-n", "4", "--alloc", "1m", "--repeat", "2", "--json", NULL),
             0);
    char *s = slurp(out_path);
    CHECK(s[0] == '{');
    CHECK_CONTAINS(s, "\"benchmark\":\"init\",\"workers\":4,\"ctx\":true,\"alloc_bytes\":1048576");
    CHECK_CONTAINS(s, "\"all_ok\":true");
    CHECK_CONTAINS(s, "{\"run\":2,\"mode\":\"cushare\",\"workers\":4,\"ok\":4,\"failed\":0");
    CHECK_CONTAINS(s, "\"init_ns\":{\"samples\":4,");
    CHECK_CONTAINS(s, "\"ctx_ns\":{\"samples\":4,");
    CHECK_CONTAINS(s, "\"baseline\":{\"init\":null,\"ctx\":null}");
    CHECK_CONTAINS(s, "\"ratio\":{\"init\":null,\"ctx\":null}");
    CHECK(!strstr(s, "p50 ")); /* no text report mixed in */
    free(s);
}

static void expect_usage(const char *needle, ...)
{
    const char *argv[16];
    int n = 0;
    va_list ap;
    va_start(ap, needle);
    for (const char *a; (a = va_arg(ap, const char *));)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    /* run_bench is variadic: spell out up to six arguments. */
    CHECK_LE(n, 6);
    const char *a[7] = {NULL};
    for (int i = 0; i < n; i++)
        a[i] = argv[i];
    CHECK_EQ(run_bench(NULL, a[0], a[1], a[2], a[3], a[4], a[5], a[6]), 2);
    check_contains_file(err_path, needle);
}

static void scenario_usage(void)
{
    expect_usage("-n '0' must be a worker count", "init", "-n", "0", NULL);
    expect_usage("-n 'abc' must be a worker count", "init", "-n", "abc", NULL);
    expect_usage("-n '1001' must be a worker count", "init", "-n", "1001", NULL);
    expect_usage("-n '4x' must be a worker count", "init", "-n", "4x", NULL);
    expect_usage("missing -n N", "init", "--ctx", NULL);
    expect_usage("--alloc '12q' is not a size", "init", "-n", "2", "--alloc", "12q", NULL);
    expect_usage("--alloc '0' is not a size", "init", "-n", "2", "--alloc", "0", NULL);
    expect_usage("--mem '4x' is not a size", "init", "-n", "2", "--mem", "4x", NULL);
    expect_usage("--repeat '0' must be", "init", "-n", "2", "--repeat", "0", NULL);
    expect_usage("--timeout '-1' must be", "init", "-n", "2", "--timeout", "-1", NULL);
    expect_usage("--repeat needs a value", "init", "-n", "2", "--repeat", NULL);
    expect_usage("unknown option '--bogus'", "init", "-n", "2", "--bogus", NULL);
    expect_usage("unexpected argument 'extra'", "init", "-n", "2", "extra", NULL);
    expect_usage("no benchmark named; give init or limiter", NULL);
    expect_usage("unknown benchmark 'nope'", "nope", NULL);
}

int main(int argc, char **argv)
{
    CHECK_EQ(argc, 2);
    const char *build = getenv("CS_BUILD_DIR");
    CHECK(build != NULL);
    snprintf(tmp, sizeof tmp, "%s/tmp/bench_init_%s.%d", build, argv[1], (int)getpid());
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmp);
    CHECK_EQ(system(cmd), 0);
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp);
    snprintf(csv_path, sizeof csv_path, "%s/workers.csv", tmp);

    static const struct {
        const char *name;
        void (*fn)(void);
    } scenarios[] = {
        {"smoke", scenario_smoke},     {"failures", scenario_failures},
        {"crash", scenario_crash},     {"timeout", scenario_timeout},
        {"json", scenario_json},       {"usage", scenario_usage},
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (!strcmp(argv[1], scenarios[i].name)) {
            scenarios[i].fn();
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
            CHECK_EQ(system(cmd), 0);
            return 0;
        }
    fprintf(stderr, "unknown scenario %s\n", argv[1]);
    return 1;
}
