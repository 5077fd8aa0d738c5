/*
 * `bench init` statistics: nearest-rank percentiles and per-run summaries,
 * and the names of phases, reasons, tiers and modes. Pure: the unit test
 * tests/bench/test_percentiles.c links this file alone.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

/* ---- statistics ---------------------------------------------------------- */

size_t cs_bench_rank(unsigned pct, size_t n)
{
    if (n == 0)
        return 0;
    if (pct > 100)
        pct = 100;
    /* ceil(pct * n / 100) in integers: no rounding surprise at 99 * 300. */
    size_t rank = (pct * n + 99) / 100;
    return rank < 1 ? 1 : rank;
}

uint64_t cs_bench_percentile(const uint64_t *sorted, size_t n, unsigned pct)
{
    return n ? sorted[cs_bench_rank(pct, n) - 1] : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void cs_bench_stats(uint64_t *samples, size_t n, struct cs_bench_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!n)
        return;
    qsort(samples, n, sizeof *samples, cmp_u64);
    out->n = n;
    for (size_t i = 0; i < n; i++)
        out->sum += samples[i];
    out->mean = out->sum / n;
    out->p50 = cs_bench_percentile(samples, n, 50);
    out->p95 = cs_bench_percentile(samples, n, 95);
    out->p99 = cs_bench_percentile(samples, n, 99);
    out->max = samples[n - 1];
}

static uint64_t span(int64_t from, int64_t to)
{
    return to > from ? (uint64_t)(to - from) : 0;
}

int cs_bench_summarize(const struct cs_bench_record *r, size_t n, struct cs_bench_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->p99_worker = -1;
    uint64_t *init = calloc(n + 1, sizeof *init);
    uint64_t *ctx = calloc(n + 1, sizeof *ctx);
    uint64_t *off = calloc(n + 1, sizeof *off);
    if (!init || !ctx || !off) {
        free(init);
        free(ctx);
        free(off);
        return -ENOMEM;
    }
    size_t ni = 0, nc = 0, no = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cs_bench_record *w = &r[i];
        out->by_reason[w->reason < CS_BENCH_NREASONS ? w->reason : CS_BENCH_R_NO_REPORT]++;
        out->tiers[w->tier <= CS_BENCH_TIER_NONE ? w->tier : CS_IDENTITY_UNKNOWN]++;
        out->lock_waits += w->lock_waits;
        if (w->done > out->wall)
            out->wall = w->done;
        if (w->t[CS_BENCH_WOKE] != CS_BENCH_NOT_REACHED)
            off[no++] = span(0, w->t[CS_BENCH_WOKE]);
        if (w->reason != CS_BENCH_R_OK) {
            out->failed++;
            continue;
        }
        out->ok++;
        if (cs_bench_reached(w, CS_BENCH_ENTER) && cs_bench_reached(w, CS_BENCH_RETURNED))
            init[ni++] = span(w->t[CS_BENCH_ENTER], w->t[CS_BENCH_RETURNED]);
        if (cs_bench_reached(w, CS_BENCH_CTX))
            ctx[nc++] = span(0, w->t[CS_BENCH_CTX]);
    }
    cs_bench_stats(init, ni, &out->init);
    cs_bench_stats(ctx, nc, &out->ctx);
    cs_bench_stats(off, no, &out->offset);
    for (size_t i = 0; ni && i < n; i++)
        if (r[i].reason == CS_BENCH_R_OK && cs_bench_reached(&r[i], CS_BENCH_ENTER) &&
            cs_bench_reached(&r[i], CS_BENCH_RETURNED) &&
            span(r[i].t[CS_BENCH_ENTER], r[i].t[CS_BENCH_RETURNED]) == out->init.p99) {
            out->p99_worker = (int)i;
            break;
        }
    free(init);
    free(ctx);
    free(off);
    return 0;
}

/* ---- names ---- */

const char *const cs_bench_mode_names[2] = {[MODE_BASELINE] = "baseline", [MODE_CUSHARE] = "cushare"};
const char *const cs_bench_reason_keys[CS_BENCH_NREASONS] = {
#define CS_X_KEY(id, key, text) [CS_BENCH_R_##id] = key,
    CS_BENCH_REASONS(CS_X_KEY)
#undef CS_X_KEY
};
const char *const cs_bench_reason_texts[CS_BENCH_NREASONS] = {
#define CS_X_TEXT(id, key, text) [CS_BENCH_R_##id] = text,
    CS_BENCH_REASONS(CS_X_TEXT)
#undef CS_X_TEXT
};
const char *const cs_bench_phase_names[CS_BENCH_NPHASES] = {
#define CS_X_NAME(id, name) [CS_BENCH_##id] = name,
    CS_BENCH_PHASES(CS_X_NAME)
#undef CS_X_NAME
};
const char *const cs_bench_tier_names[CS_BENCH_TIER_NONE + 1] = {
#define CS_X_NAME(id, name) [CS_IDENTITY_##id] = name,
    CS_IDENTITY_TIERS(CS_X_NAME)
#undef CS_X_NAME
    [CS_BENCH_TIER_NONE] = "none",
};
