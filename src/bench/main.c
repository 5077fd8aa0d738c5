/*
 * `cushare-bench`: the benchmark harness, a program of its own so that the
 * `cushare` command carries none of it. `cushare bench ARGS` execs
 * `cushare-bench ARGS` (src/cli/cmd_bench.c), so messages and help speak
 * of `cushare bench` either way. `__worker` is the init benchmark's
 * worker: `bench init` re-executes this binary with it so every worker is
 * a fresh program image (loader, preload and driver start-up included).
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"

static const char bench_usage[] =
    "usage: cushare bench init -n N [--ctx] [--alloc SIZE] [--repeat K] [--csv FILE]\n"
    "                          [--baseline] [--json] [--timeout S] [--mem SIZE]\n"
    "       cushare bench limiter [ARGS...]\n"
    "  init     start-up density: N fresh processes released together into cuInit\n"
    "  limiter  compute-share accuracy of the limiter\n"
    "The benchmarks are the program cushare-bench, built and installed beside\n"
    "cushare: `cushare bench ARGS` runs `cushare-bench ARGS`.\n"
    "examples:\n"
    "  cushare bench init -n 16 --ctx\n"
    "  cushare bench limiter --help\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        return cs_cli_usage_error("bench", "no benchmark named; give init or limiter, e.g. "
                                  "cushare bench init -n 16");
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "init"))
        return cs_bench_init(argc - 1, argv + 1);
    if (!strcmp(sub, "__worker"))
        return cs_bench_worker(argc - 1, argv + 1);
    if (!strcmp(sub, "limiter"))
        return cs_bench_limiter(argc - 1, argv + 1);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        fputs(bench_usage, stdout);
        return CS_EXIT_OK;
    }
    return cs_cli_usage_error("bench", "unknown benchmark '%s'; give init or limiter (cushare "
                              "help bench)", sub);
}
