/*
 * The benchmark harness, `cushare-bench` (src/bench/main.c): built and
 * installed beside `cushare`, which execs it for `cushare bench ...`, so
 * the product binary carries none of it.
 *
 *   bench init      start-up density: N fresh processes released together
 *                   into cuInit (docs/bench-init.md): init.c (the command,
 *                   its options and method), worker.c (one released
 *                   process), run.c (one run: environment, spawn, release,
 *                   reap), stats.c (percentiles and summaries, pure),
 *                   report.c (text and JSON)
 *   bench limiter   compute-share accuracy (limiter.c)
 *
 * The init benchmark's pure parts (phase and reason tables, nearest-rank
 * percentiles, per-run summaries) are declared here so tests/bench can
 * check them without spawning workers.
 */
#ifndef CS_BENCH_BENCH_H
#define CS_BENCH_BENCH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cushare/ledger.h"

/* The benchmarks, each given argv with argv[0] = its name: `bench init`,
 * its hidden worker (`cushare-bench __worker MEMFD PIPEFD INDEX`) and
 * `bench limiter`. Exit status as the command's (cli/cli.h). */
int cs_bench_init(int argc, char **argv);
int cs_bench_worker(int argc, char **argv);
int cs_bench_limiter(int argc, char **argv);

/* Per-worker phase vector, in order of occurrence, except that cushare's
 * set-up (setup_begin, ledger, setup_end) runs on a thread of its own
 * beside the driver's cuInit: after wrapper and before joined, in any
 * order with driver and real_init. Each entry is a CLOCK_MONOTONIC
 * timestamp; 0 means "not reached". cushare-only phases come from
 * cushare_phases() (include/cushare/phases.h). */
#define CS_BENCH_PHASES(X)                                                    \
    X(WOKE, "woke")           /* worker returned from the barrier read      */ \
    X(ENTER, "enter")         /* worker about to call cuInit                */ \
    X(WRAPPER, "wrapper")     /* cushare: wrapper entered                   */ \
    X(DRIVER, "driver")       /* cushare: driver resolved, set-up started: the driver's cuInit called */ \
    X(SETUP_BEGIN, "setup_begin") /* cushare: set-up thread began         */ \
    X(LEDGER, "ledger")       /* cushare: ledger opened, slot claimed       */ \
    X(SETUP_END, "setup_end") /* cushare: set-up finished (registry, HAMi region too) */ \
    X(REAL_INIT, "real_init") /* cushare: the driver's cuInit returned      */ \
    X(JOINED, "joined")       /* cushare: cuInit has the set-up's outcome   */ \
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

static inline bool cs_bench_reached(const struct cs_bench_record *w, enum cs_bench_phase p)
{
    return w->t[p] != CS_BENCH_NOT_REACHED;
}

/* ---- between the files of `bench init` --------------------------------- */

/* The memfd the parent shares with its workers: a header, then one slot
 * per worker. Workers write their own slot only; the parent reads slots
 * after the worker is reaped. */
#define BENCH_MAGIC 0x31544e4948534355ull /* "UCSHINT1" */
#define BENCH_VERSION 2u

enum bench_mode { MODE_BASELINE = 0, MODE_CUSHARE = 1 };
extern const char *const cs_bench_mode_names[2];

struct bench_header {
    uint64_t magic;         /*  0 BENCH_MAGIC */
    uint32_t version;       /*  8 BENCH_VERSION */
    uint32_t header_size;   /* 12 sizeof(struct bench_header) */
    uint32_t slot_size;     /* 16 sizeof(struct bench_slot) */
    uint32_t nworkers;      /* 20 */
    uint32_t mode;          /* 24 enum bench_mode */
    uint32_t ctx;           /* 28 retain a primary context after cuInit */
    uint64_t alloc_bytes;   /* 32 then allocate and free this much; 0 = no */
    uint32_t ready;         /* 40 atomic: workers at the barrier */
    uint32_t reserved0;     /* 44 */
    uint8_t reserved1[16];  /* 48 */
};

enum slot_state { SLOT_PENDING = 0, SLOT_ARRIVED = 1, SLOT_DONE = 2 };

struct bench_slot {
    uint32_t state;         /*  0 atomic enum slot_state */
    uint32_t reason;        /*  4 enum cs_bench_reason */
    int32_t result;         /*  8 CUresult of the failing (or last) call */
    int32_t pid;            /* 12 */
    uint32_t tier;          /* 16 enum cs_identity_tier or CS_BENCH_TIER_NONE */
    uint32_t reserved0;     /* 20 */
    uint64_t lock_waits;    /* 24 */
    uint64_t t[CS_BENCH_NPHASES]; /* 32 CLOCK_MONOTONIC ns, 0 = not reached */
    uint8_t reserved1[192 - 32 - 8 * CS_BENCH_NPHASES];
};

_Static_assert(sizeof(struct bench_header) == 64, "bench header layout");
_Static_assert(sizeof(struct bench_slot) == 192, "bench slot layout (one slot per three lines)");

static inline struct bench_slot *cs_bench_slot_at(struct bench_header *h, size_t i)
{
    return (struct bench_slot *)((char *)h + h->header_size + i * h->slot_size);
}

/* Names by enum (stats.c). */
extern const char *const cs_bench_reason_keys[CS_BENCH_NREASONS];
extern const char *const cs_bench_reason_texts[CS_BENCH_NREASONS];
extern const char *const cs_bench_phase_names[CS_BENCH_NPHASES];
extern const char *const cs_bench_tier_names[CS_BENCH_TIER_NONE + 1];

#define BENCH_MAX_WORKERS 1000   /* below the ledger's CS_LEDGER_SLOTS */

struct bench_opts {
    long n, repeat, timeout_s;
    bool ctx, baseline, json;
    uint64_t alloc;
    const char *csv, *mem;
};

/* One invocation: its options, our own binary and library, the CSV. */
struct bench {
    struct bench_opts o;
    char self[PATH_MAX];
    char lib[PATH_MAX];
    FILE *csv;
};

/* What one run reports. */
struct run_result {
    int run;
    enum bench_mode mode;
    struct cs_bench_summary sum;
    int64_t p99_phases[CS_BENCH_NPHASES]; /* of the init p99 worker */
};

/* One run of N workers in `mode` (run.c): spawns, releases, reaps,
 * classifies and summarises; CSV rows to b->csv. 0 or -1 after a message. */
int cs_bench_run_once(struct bench *b, int run, enum bench_mode mode, struct run_result *out);
void cs_bench_csv_header(FILE *f);

/* Reports (report.c). */
void cs_bench_print_run_text(const struct bench *b, const struct run_result *r);
void cs_bench_print_summary_text(const struct bench *b, const struct run_result *runs,
                                 size_t nruns);
void cs_bench_print_json(const struct bench *b, const struct run_result *runs, size_t nruns,
                         bool all_ok);

#endif
