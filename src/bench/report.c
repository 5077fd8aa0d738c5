/*
 * `bench init` reports: each run and the summary over runs as text, or one
 * JSON object.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"

/* ---- reporting ----------------------------------------------------------- */

static void print_ms(FILE *f, uint64_t ns)
{
    fprintf(f, "%.3f", (double)ns / 1e6);
}

void print_stats(FILE *f, const char *label, const struct cs_bench_stats *st)
{
    fprintf(f, "  %-20s", label);
    if (!st->n) {
        fputs(" no successful sample\n", f);
        return;
    }
    const char *names[] = {"p50", "p95", "p99", "max", "mean"};
    uint64_t vals[] = {st->p50, st->p95, st->p99, st->max, st->mean};
    for (int i = 0; i < 5; i++) {
        fprintf(f, " %s ", names[i]);
        print_ms(f, vals[i]);
    }
    fprintf(f, "  (%zu samples)\n", st->n);
}

void cs_bench_print_run_text(const struct bench *b, const struct run_result *r)
{
    const struct cs_bench_summary *s = &r->sum;
    printf("run %d %s: ok %zu/%zu, failed %zu, wall ", r->run, cs_bench_mode_names[r->mode], s->ok, s->n,
           s->failed);
    print_ms(stdout, s->wall > 0 ? (uint64_t)s->wall : 0);
    printf(" ms\n");
    print_stats(stdout, "cuInit latency (ms)", &s->init);
    if (b->o.ctx)
        print_stats(stdout, "context ready (ms)", &s->ctx);
    print_stats(stdout, "release offset (ms)", &s->offset);
    if (s->failed) {
        printf("  failures:");
        const char *sep = " ";
        for (int k = 0; k < CS_BENCH_NREASONS; k++)
            if (k != CS_BENCH_R_OK && s->by_reason[k]) {
                printf("%s%s %zu", sep, cs_bench_reason_texts[k], s->by_reason[k]);
                sep = ", ";
            }
        printf("\n");
    }
    printf("  identity:");
    for (int k = 0; k <= CS_BENCH_TIER_NONE; k++)
        if (s->tiers[k])
            printf(" %s %zu", cs_bench_tier_names[k], s->tiers[k]);
    printf("; lock waits %llu\n", (unsigned long long)s->lock_waits);
    if (s->p99_worker >= 0) {
        printf("  cuInit p99 worker %d (ms after release):", s->p99_worker);
        for (int k = 0; k < CS_BENCH_NPHASES; k++) {
            if (r->p99_phases[k] == CS_BENCH_NOT_REACHED)
                continue;
            printf(" %s ", cs_bench_phase_names[k]);
            printf("%.3f", (double)r->p99_phases[k] / 1e6);
        }
        printf("\n");
    }
    fflush(stdout);
}

/* Mean over the runs of one mode of a p99 (runs without a successful
 * sample excluded). false when no run had one. */
static bool mean_p99(const struct run_result *runs, size_t nruns, enum bench_mode mode, bool ctx,
                     double *out, size_t *used)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < nruns; i++) {
        const struct cs_bench_stats *st = ctx ? &runs[i].sum.ctx : &runs[i].sum.init;
        if (runs[i].mode == mode && st->n) {
            sum += (double)st->p99;
            k++;
        }
    }
    *used = k;
    *out = k ? sum / (double)k : 0;
    return k > 0;
}

static size_t failed_in(const struct run_result *runs, size_t nruns, enum bench_mode mode)
{
    size_t f = 0;
    for (size_t i = 0; i < nruns; i++)
        if (runs[i].mode == mode)
            f += runs[i].sum.failed;
    return f;
}

void cs_bench_print_summary_text(const struct bench *b, const struct run_result *runs, size_t nruns)
{
    int nm = b->o.ctx ? 2 : 1;
    for (int m = 0; m < nm; m++) {
        bool ctx = m == 1;
        double base = 0, cush = 0;
        size_t ub = 0, uc = 0;
        bool hb = b->o.baseline && mean_p99(runs, nruns, MODE_BASELINE, ctx, &base, &ub);
        bool hc = mean_p99(runs, nruns, MODE_CUSHARE, ctx, &cush, &uc);
        printf("mean p99 %s:", ctx ? "context ready" : "cuInit");
        if (b->o.baseline) {
            if (hb)
                printf(" baseline %.3f ms (%zu runs),", base / 1e6, ub);
            else
                printf(" baseline - (no successful run),");
        }
        if (hc)
            printf(" cushare %.3f ms (%zu runs)", cush / 1e6, uc);
        else
            printf(" cushare - (no successful run)");
        if (hb && hc && base > 0)
            printf(", ratio cushare/baseline %.3f", cush / base);
        printf("\n");
    }
    /* One line of key=value pairs for scripts (bench/run_init_sweep.sh). */
    printf("summary n=%ld ctx=%d alloc=%llu repeat=%ld", b->o.n, b->o.ctx,
           (unsigned long long)b->o.alloc, b->o.repeat);
    for (int m = 0; m < 2; m++) {
        bool ctx = m == 1;
        const char *what = ctx ? "ctx" : "init";
        double base = 0, cush = 0;
        size_t u;
        bool hb = b->o.baseline && mean_p99(runs, nruns, MODE_BASELINE, ctx, &base, &u);
        bool hc = mean_p99(runs, nruns, MODE_CUSHARE, ctx, &cush, &u);
        if (hb)
            printf(" baseline_%s_p99_ms=%.3f", what, base / 1e6);
        else
            printf(" baseline_%s_p99_ms=-", what);
        if (hc)
            printf(" cushare_%s_p99_ms=%.3f", what, cush / 1e6);
        else
            printf(" cushare_%s_p99_ms=-", what);
        if (hb && hc && base > 0)
            printf(" %s_ratio=%.3f", what, cush / base);
        else
            printf(" %s_ratio=-", what);
    }
    if (b->o.baseline)
        printf(" baseline_failed=%zu", failed_in(runs, nruns, MODE_BASELINE));
    else
        printf(" baseline_failed=-");
    printf(" cushare_failed=%zu\n", failed_in(runs, nruns, MODE_CUSHARE));
}

void json_stats(const char *key, const struct cs_bench_stats *st)
{
    if (!st->n) {
        printf("\"%s\":null", key);
        return;
    }
    printf("\"%s\":{\"samples\":%zu,\"p50\":%llu,\"p95\":%llu,\"p99\":%llu,\"max\":%llu,"
           "\"mean\":%llu,\"sum\":%llu}",
           key, st->n, (unsigned long long)st->p50, (unsigned long long)st->p95,
           (unsigned long long)st->p99, (unsigned long long)st->max,
           (unsigned long long)st->mean, (unsigned long long)st->sum);
}

static void json_number_or_null(double v, bool have)
{
    if (have)
        printf("%.0f", v);
    else
        printf("null");
}

void cs_bench_print_json(const struct bench *b, const struct run_result *runs, size_t nruns,
                       bool all_ok)
{
    printf("{\"benchmark\":\"init\",\"workers\":%ld,\"ctx\":%s,\"alloc_bytes\":%llu,"
           "\"repeat\":%ld,\"timeout_s\":%ld,\"baseline\":%s,\"all_ok\":%s,\"runs\":[\n",
           b->o.n, b->o.ctx ? "true" : "false", (unsigned long long)b->o.alloc, b->o.repeat,
           b->o.timeout_s, b->o.baseline ? "true" : "false", all_ok ? "true" : "false");
    for (size_t i = 0; i < nruns; i++) {
        const struct cs_bench_summary *s = &runs[i].sum;
        printf(" {\"run\":%d,\"mode\":\"%s\",\"workers\":%zu,\"ok\":%zu,\"failed\":%zu,"
               "\"failures\":{",
               runs[i].run, cs_bench_mode_names[runs[i].mode], s->n, s->ok, s->failed);
        for (int k = 1; k < CS_BENCH_NREASONS; k++)
            printf("%s\"%s\":%zu", k > 1 ? "," : "", cs_bench_reason_keys[k], s->by_reason[k]);
        printf("},");
        json_stats("init_ns", &s->init);
        printf(",");
        json_stats("ctx_ns", &s->ctx);
        printf(",");
        json_stats("offset_ns", &s->offset);
        printf(",\"wall_ns\":%lld,\"identity\":{", (long long)(s->wall > 0 ? s->wall : 0));
        for (int k = 0; k <= CS_BENCH_TIER_NONE; k++)
            printf("%s\"%s\":%zu", k ? "," : "", cs_bench_tier_names[k], s->tiers[k]);
        printf("},\"lock_waits\":%llu,\"p99_worker\":%d}%s\n",
               (unsigned long long)s->lock_waits, s->p99_worker, i + 1 < nruns ? "," : "");
    }
    printf("],\"mean_p99_ns\":{");
    double v[2][2];
    bool have[2][2];
    for (int m = 0; m < 2; m++) {
        printf("%s\"%s\":{", m ? "," : "", cs_bench_mode_names[m]);
        for (int c = 0; c < 2; c++) {
            size_t u;
            have[m][c] = (m == MODE_CUSHARE || b->o.baseline) &&
                         mean_p99(runs, nruns, (enum bench_mode)m, c == 1, &v[m][c], &u);
            printf("%s\"%s\":", c ? "," : "", c ? "ctx" : "init");
            json_number_or_null(v[m][c], have[m][c]);
        }
        printf("}");
    }
    printf("},\"ratio\":{");
    for (int c = 0; c < 2; c++) {
        bool h = have[0][c] && have[1][c] && v[0][c] > 0;
        printf("%s\"%s\":", c ? "," : "", c ? "ctx" : "init");
        if (h)
            printf("%.4f", v[1][c] / v[0][c]);
        else
            printf("null");
    }
    printf("}}\n");
}

/* Forks beyond RLIMIT_NPROC fail: raise the soft limit if N needs it. The
 * parent holds a constant number of descriptors whatever N is, so
 * RLIMIT_NOFILE needs no change. */
