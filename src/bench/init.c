/*
 * `cushare bench init`: start-up density. N fresh processes are released
 * together into cuInit, with and without cushare, and the tail of their
 * start-up latency is reported (docs/bench-init.md).
 *
 * Method. The parent never touches CUDA. It maps one result slot per worker
 * in a memfd, initialised to "did not report", and creates a pipe. Each
 * worker is fork()+exec() of this binary (`cushare-bench __worker`), so it
 * is a fresh program image that goes through the loader and, in cushare
 * mode, the preloaded library. A worker loads libcuda.so.1 and resolves its
 * entry points (the preloaded wrappers win through RTLD_DEFAULT), increments
 * a ready counter and blocks in read() on the pipe. When all are ready the
 * parent takes a CLOCK_MONOTONIC release stamp and closes the write end:
 * every read returns EOF at once.
 *
 * What is timed. cuInit latency is from the worker's stamp just before
 * cuInit(0) to just after it returns. Loading libcuda.so.1 happens before
 * the barrier in both modes (as for a program linked against it) and is not
 * timed; in cushare mode the latency includes everything the library does
 * lazily on the first call (resolving the real driver, then, beside the
 * driver's own cuInit, configuration, opening the ledger and claiming a
 * slot; identity) and the driver's cuInit: the longer of the set-up and
 * the driver, plus what is on the caller's path alone (the phases tell);
 * in baseline mode it is the driver's cuInit alone. Context-ready
 * latency (--ctx) is from the release to the primary context being current,
 * so it includes the release offset (scheduler delay before cuInit).
 *
 * Failures. A slot only says "ok" if the worker wrote it and then exited
 * with status 0; a worker that dies is "crashed", one still running at the
 * deadline is killed and "timeout". Percentiles use successful workers only
 * and are always printed beside the failure counts.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "core/config.h"

static const char init_usage[] =
    "usage: cushare bench init -n N [--ctx] [--alloc SIZE] [--repeat K] [--csv FILE]\n"
    "                          [--baseline] [--json] [--timeout S] [--mem SIZE]\n"
    "  -n N        workers released together (1..1000)\n"
    "  --ctx       after cuInit, retain device 0's primary context and make it current\n"
    "  --alloc SZ  then cuMemAlloc SZ bytes and free them (implies --ctx)\n"
    "  --repeat K  repeat the whole run K times; report each and the mean of p99s\n"
    "  --csv FILE  write one row per worker and run (phases in ns after the release)\n"
    "  --baseline  also run without cushare, alternating baseline and cushare runs,\n"
    "              and report the ratio of p99s\n"
    "  --json      print a machine-readable summary instead of text\n"
    "  --timeout S per-run deadline in seconds (default 600); stragglers are killed\n"
    "  --mem SIZE  memory budget of the cushare workers (CUDA_DEVICE_MEMORY_LIMIT)\n";

static void check_nproc(long n)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)n + 64;
    if (getrlimit(RLIMIT_NPROC, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NPROC, &rl);
    if (rl.rlim_cur < want)
        fprintf(stderr, "cushare: bench init: RLIMIT_NPROC is %llu; workers that cannot be "
                        "forked count as failed\n", (unsigned long long)rl.rlim_cur);
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option opts[] = {
        {"ctx", no_argument, NULL, 'c'},         {"alloc", required_argument, NULL, 'a'},
        {"repeat", required_argument, NULL, 'r'}, {"csv", required_argument, NULL, 'C'},
        {"baseline", no_argument, NULL, 'b'},    {"json", no_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 't'}, {"mem", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *cmd = "bench init";
    *o = (struct bench_opts){.n = 0, .repeat = 1, .timeout_s = 600};
    int c;
    uint64_t size;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (cs__parse_int(optarg, 1, BENCH_MAX_WORKERS, &o->n))
                return cs_cli_usage_error(cmd, "-n '%s' must be a worker count from 1 to %d",
                                          optarg, BENCH_MAX_WORKERS);
            break;
        case 'c':
            o->ctx = true;
            break;
        case 'a':
            if (cs__parse_size(optarg, &size) || size == 0)
                return cs_cli_usage_error(cmd, "--alloc '%s' is not a size above 0: use bytes "
                                          "or a k/m/g/t suffix, e.g. 64MiB", optarg);
            o->alloc = size;
            o->ctx = true;
            break;
        case 'r':
            if (cs__parse_int(optarg, 1, 1000, &o->repeat))
                return cs_cli_usage_error(cmd, "--repeat '%s' must be from 1 to 1000", optarg);
            break;
        case 'C':
            o->csv = optarg;
            break;
        case 'b':
            o->baseline = true;
            break;
        case 'j':
            o->json = true;
            break;
        case 't':
            if (cs__parse_int(optarg, 1, 86400, &o->timeout_s))
                return cs_cli_usage_error(cmd, "--timeout '%s' must be seconds from 1 to 86400",
                                          optarg);
            break;
        case 'm': {
            /* As `run --mem`: a fraction goes to the workers as bytes. */
            static char mem[64];
            if (cs_cli_limit_value(cmd, true, optarg, mem, sizeof mem))
                return CS_EXIT_USAGE;
            o->mem = mem;
            break;
        }
        case 'h':
            fputs(init_usage, stdout);
            return -1;
        case ':':
            fputs(init_usage, stderr);
            return cs_cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            fputs(init_usage, stderr);
            return cs_cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        fputs(init_usage, stderr);
        return cs_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    }
    if (!o->n) {
        fputs(init_usage, stderr);
        return cs_cli_usage_error(cmd, "missing -n N (the number of workers)");
    }
    return 0;
}

int cs_bench_init(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);
    int rc = parse_opts(argc, argv, &b.o);
    if (rc)
        return rc < 0 ? CS_EXIT_OK : rc;

    ssize_t len = readlink("/proc/self/exe", b.self, sizeof b.self - 1);
    if (len <= 0) {
        fprintf(stderr, "cushare: bench init: cannot find my own binary: %s\n", strerror(errno));
        return CS_EXIT_FAIL;
    }
    b.self[len] = '\0';
    if (cs_cli_find_library("bench init", b.lib, sizeof b.lib))
        return CS_EXIT_FAIL;
    if (b.o.csv) {
        b.csv = fopen(b.o.csv, "w");
        if (!b.csv) {
            fprintf(stderr, "cushare: bench init: cannot write %s: %s\n", b.o.csv,
                    strerror(errno));
            return CS_EXIT_FAIL;
        }
        cs_bench_csv_header(b.csv);
    }
    check_nproc(b.o.n);
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old_chld;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld); /* an inherited SIG_IGN would auto-reap */

    size_t per = b.o.baseline ? 2 : 1, nruns = 0;
    struct run_result *runs = calloc((size_t)b.o.repeat * per, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "cushare: bench init: out of memory\n");
        return CS_EXIT_FAIL;
    }
    if (!b.o.json)
        printf("cushare bench init: %ld workers, ctx %s, alloc %llu B, repeat %ld, timeout %ld s, "
               "modes %s\n", b.o.n, b.o.ctx ? "yes" : "no", (unsigned long long)b.o.alloc,
               b.o.repeat, b.o.timeout_s,
               b.o.baseline ? "baseline,cushare alternating" : "cushare");
    bool all_ok = true;
    rc = CS_EXIT_OK;
    /* Alternate modes run by run so slow drift of the host hits both. */
    for (long k = 0; k < b.o.repeat && rc == CS_EXIT_OK; k++)
        for (size_t m = 0; m < per; m++) {
            enum bench_mode mode = per == 2 && m == 0 ? MODE_BASELINE : MODE_CUSHARE;
            struct run_result *r = &runs[nruns];
            if (cs_bench_run_once(&b, (int)k + 1, mode, r)) {
                rc = CS_EXIT_FAIL;
                break;
            }
            nruns++;
            if (r->sum.failed)
                all_ok = false;
            if (!b.o.json)
                cs_bench_print_run_text(&b, r);
        }
    if (b.o.json)
        cs_bench_print_json(&b, runs, nruns, all_ok && rc == CS_EXIT_OK);
    else if (nruns)
        cs_bench_print_summary_text(&b, runs, nruns);
    if (b.csv && fclose(b.csv)) {
        fprintf(stderr, "cushare: bench init: writing %s: %s\n", b.o.csv, strerror(errno));
        rc = CS_EXIT_FAIL;
    }
    sigaction(SIGCHLD, &old_chld, NULL);
    free(runs);
    if (rc == CS_EXIT_OK && !all_ok)
        rc = CS_EXIT_FAIL;
    return rc;
}
