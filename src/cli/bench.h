/*
 * `cushare bench`: benchmarks of the library, run from the command.
 *
 *   bench init      start-up density: N fresh processes released together
 *                   into cuInit (src/cli/bench_init.c, docs/bench-init.md)
 *   bench limiter   compute-share accuracy (src/cli/bench_limiter.c)
 *
 * The init benchmark's pure parts (phase and reason tables, nearest-rank
 * percentiles, per-run summaries) are declared here so tests/bench can
 * check them without spawning workers.
 */
#ifndef CS_CLI_BENCH_H
#define CS_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cushare/ledger.h"

/* `bench init` and its hidden worker (`bench __worker MEMFD PIPEFD INDEX`). */
int cs_bench_init(int argc, char **argv);
int cs_bench_worker(int argc, char **argv);

/* Weak: `bench limiter` lives in src/cli/bench_limiter.c, built separately;
 * the dispatcher reports "not built" while the symbol is absent. */
int cs_bench_limiter(int argc, char **argv) __attribute__((weak));

/* Per-worker phase vector, in order of occurrence. Each entry is a
 * CLOCK_MONOTONIC timestamp; 0 means "not reached". cushare-only phases
 * come from cushare_phases() (include/cushare/phases.h). */
#define CS_BENCH_PHASES(X)                                                    \
    X(WOKE, "woke")           /* worker returned from the barrier read      */ \
    X(ENTER, "enter")         /* worker about to call cuInit                */ \
    X(WRAPPER, "wrapper")     /* cushare: wrapper entered                   */ \
    X(LEDGER, "ledger")       /* cushare: ledger opened, slot claimed       */ \
    X(REAL_INIT, "real_init") /* cushare: the driver's cuInit returned      */ \
    X(IDENTITY, "identity")   /* cushare: identity tier decided (may be late) */ \
    X(RETURNED, "returned")   /* cuInit returned to the worker              */ \
    X(CTX, "ctx")             /* --ctx: primary context retained and current */ \
    X(ALLOC, "alloc")         /* --alloc: cuMemAlloc_v2 returned            */ \
    X(EXIT, "exit")           /* worker about to exit                       */

enum cs_bench_phase {
#define CS_X_ENUM(id, name) CS_BENCH_##id,
    CS_BENCH_PHASES(CS_X_ENUM)
#undef CS_X_ENUM
    CS_BENCH_NPHASES
};

/* Why a worker is not a success. A result slot starts as NO_REPORT, so a
 * worker that dies before writing it can never read as a success. */
#define CS_BENCH_REASONS(X)                                                   \
    X(OK, "ok", "ok")                                                         \
    X(NO_REPORT, "no_report", "did not report")                               \
    X(SPAWN, "spawn", "fork/exec failed")                                     \
    X(SETUP, "setup", "driver or preload missing")                            \
    X(INIT, "cuinit", "cuInit error")                                         \
    X(CTX, "ctx", "context error")                                            \
    X(ALLOC, "alloc", "alloc error")                                          \
    X(CRASHED, "crashed", "crashed/killed")                                   \
    X(TIMEOUT, "timeout", "timeout")

enum cs_bench_reason {
#define CS_X_ENUM(id, key, text) CS_BENCH_R_##id,
    CS_BENCH_REASONS(CS_X_ENUM)
#undef CS_X_ENUM
    CS_BENCH_NREASONS
};

/* Identity tier of a worker that ran without cushare. */
#define CS_BENCH_TIER_NONE CS_IDENTITY_NTIERS

/* One worker's outcome, phases relative to the release in ns (negative:
 * before it, e.g. a set-up failure), CS_BENCH_NOT_REACHED when absent. */
#define CS_BENCH_NOT_REACHED INT64_MIN
struct cs_bench_record {
    int worker;
    int pid;
    enum cs_bench_reason reason;
    int result;             /* CUresult of the failing (or last) call */
    uint32_t tier;          /* enum cs_identity_tier, or CS_BENCH_TIER_NONE */
    uint64_t lock_waits;
    int64_t t[CS_BENCH_NPHASES];
    int64_t done;           /* EXIT, else when the parent reaped it */
};

/* Nearest-rank statistics of one sample set. */
struct cs_bench_stats {
    size_t n;               /* 0: no sample, every other field 0 */
    uint64_t p50, p95, p99, max, mean, sum;
};

/* One run (one mode, N workers). */
struct cs_bench_summary {
    size_t n, ok, failed;
    size_t by_reason[CS_BENCH_NREASONS];
    size_t tiers[CS_IDENTITY_NTIERS + 1];   /* [CS_BENCH_TIER_NONE]: no cushare */
    uint64_t lock_waits;
    struct cs_bench_stats init;     /* ENTER -> RETURNED, successful workers */
    struct cs_bench_stats ctx;      /* release -> CTX, successful workers */
    struct cs_bench_stats offset;   /* release -> WOKE, every worker that woke */
    int64_t wall;                   /* release -> last worker done */
    int p99_worker;                 /* record index of the init p99 sample, -1 */
};

/* 1-based nearest rank of percentile `pct` (1..100) among n samples:
 * ceil(pct/100 * n), at least 1. p99 of 300 is 297, of 128 is 127. */
size_t cs_bench_rank(unsigned pct, size_t n);

/* Value of nearest-rank percentile `pct` in `sorted` (ascending, n > 0). */
uint64_t cs_bench_percentile(const uint64_t *sorted, size_t n, unsigned pct);

/* Sorts `samples` in place and fills *out. */
void cs_bench_stats(uint64_t *samples, size_t n, struct cs_bench_stats *out);

/* Summarises one run. Latency percentiles use successful workers only;
 * failures are counted by reason beside them. 0 or -ENOMEM. */
int cs_bench_summarize(const struct cs_bench_record *r, size_t n, struct cs_bench_summary *out);

#endif
