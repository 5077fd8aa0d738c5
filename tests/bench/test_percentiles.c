/*
 * bench_init_percentiles: the nearest-rank definition of `cushare bench
 * init` (docs/bench-init.md) and the rule that failed workers are counted
 * beside the percentiles, never inside them.
 */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "bench/bench.h"

static void check_ranks(void)
{
    /* The article's examples: p99 of 300 is sample 297, of 128 sample 127. */
    CHECK_EQ(cs_bench_rank(99, 300), 297);
    CHECK_EQ(cs_bench_rank(99, 128), 127);
    CHECK_EQ(cs_bench_rank(95, 300), 285);
    CHECK_EQ(cs_bench_rank(50, 300), 150);
    CHECK_EQ(cs_bench_rank(50, 128), 64);
    CHECK_EQ(cs_bench_rank(50, 5), 3);    /* ceil(2.5) */
    CHECK_EQ(cs_bench_rank(99, 100), 99);
    CHECK_EQ(cs_bench_rank(99, 101), 100); /* ceil(99.99) */
    CHECK_EQ(cs_bench_rank(99, 16), 16);
    CHECK_EQ(cs_bench_rank(100, 7), 7);
    CHECK_EQ(cs_bench_rank(99, 1), 1);
    CHECK_EQ(cs_bench_rank(1, 1000), 10);
    CHECK_EQ(cs_bench_rank(0, 10), 1);    /* at least the first sample */
    CHECK_EQ(cs_bench_rank(99, 0), 0);
    /* No floating-point rounding at any size up to the worker cap. */
    for (size_t n = 1; n <= 1000; n++)
        for (unsigned p = 1; p <= 100; p++) {
            size_t r = cs_bench_rank(p, n);
            CHECK(r >= 1 && r <= n);
            CHECK(r * 100 >= p * n);          /* rank >= p% of n */
            CHECK((r - 1) * 100 < p * n);     /* the smallest such rank */
        }
}

static void check_values(void)
{
    uint64_t v[300];
    /* 1..300 shuffled: the stats sort first. */
    for (int i = 0; i < 300; i++)
        v[i] = (uint64_t)i + 1;
    srand(7);
    for (int i = 299; i > 0; i--) {
        int j = rand() % (i + 1);
        uint64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    struct cs_bench_stats st;
    cs_bench_stats(v, 300, &st);
    CHECK_EQ_U(st.n, 300);
    CHECK_EQ_U(st.p50, 150);
    CHECK_EQ_U(st.p95, 285);
    CHECK_EQ_U(st.p99, 297);
    CHECK_EQ_U(st.max, 300);
    CHECK_EQ_U(st.sum, 300 * 301 / 2);
    CHECK_EQ_U(st.mean, 150);
    CHECK_EQ_U(cs_bench_percentile(v, 128, 99), 127);

    cs_bench_stats(v, 0, &st);
    CHECK_EQ_U(st.n, 0);
    CHECK_EQ_U(st.p99, 0);
}

static struct cs_bench_record rec(int worker, enum cs_bench_reason reason, int64_t enter,
                                  int64_t returned)
{
    struct cs_bench_record r = {.worker = worker, .reason = reason, .tier = CS_BENCH_TIER_NONE};
    for (int k = 0; k < CS_BENCH_NPHASES; k++)
        r.t[k] = CS_BENCH_NOT_REACHED;
    r.t[CS_BENCH_WOKE] = enter;
    r.t[CS_BENCH_ENTER] = enter;
    r.t[CS_BENCH_RETURNED] = returned;
    r.t[CS_BENCH_EXIT] = returned;
    r.done = returned;
    return r;
}

static void check_summary(void)
{
    /* 8 successes of 10..80 ms latency, two slow failures and a worker
     * that never reported: the failures are counted, not sampled. */
    struct cs_bench_record r[11];
    for (int i = 0; i < 8; i++)
        r[i] = rec(i, CS_BENCH_R_OK, 1000, 1000 + (int64_t)(i + 1) * 10000000);
    r[8] = rec(8, CS_BENCH_R_TIMEOUT, 1000, 900000000);
    r[9] = rec(9, CS_BENCH_R_INIT, 1000, 500000000);
    r[10] = rec(10, CS_BENCH_R_CRASHED, CS_BENCH_NOT_REACHED, CS_BENCH_NOT_REACHED);
    r[10].done = 950000000;
    r[3].tier = CS_IDENTITY_BROKER;
    r[4].lock_waits = 3;

    struct cs_bench_summary s;
    CHECK_EQ(cs_bench_summarize(r, 11, &s), 0);
    CHECK_EQ(s.n, 11);
    CHECK_EQ(s.ok, 8);
    CHECK_EQ(s.failed, 3);
    CHECK_EQ(s.by_reason[CS_BENCH_R_OK], 8);
    CHECK_EQ(s.by_reason[CS_BENCH_R_TIMEOUT], 1);
    CHECK_EQ(s.by_reason[CS_BENCH_R_INIT], 1);
    CHECK_EQ(s.by_reason[CS_BENCH_R_CRASHED], 1);
    CHECK_EQ(s.init.n, 8);
    CHECK_EQ_U(s.init.p50, 40000000);
    CHECK_EQ_U(s.init.p99, 80000000);
    CHECK_EQ_U(s.init.max, 80000000);
    CHECK_EQ(s.p99_worker, 7);
    CHECK_EQ(s.ctx.n, 0);
    CHECK_EQ(s.offset.n, 10);       /* every worker that woke, failed or not */
    CHECK_EQ(s.wall, 950000000);    /* the last worker, whatever its fate */
    CHECK_EQ(s.tiers[CS_IDENTITY_BROKER], 1);
    CHECK_EQ(s.tiers[CS_BENCH_TIER_NONE], 10);
    CHECK_EQ_U(s.lock_waits, 3);

    /* All failed: no sample, no p99 worker. */
    CHECK_EQ(cs_bench_summarize(r + 8, 3, &s), 0);
    CHECK_EQ(s.ok, 0);
    CHECK_EQ(s.init.n, 0);
    CHECK_EQ(s.p99_worker, -1);
}

int main(void)
{
    check_ranks();
    check_values();
    check_summary();
    return 0;
}
