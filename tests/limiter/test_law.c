/*
 * The control law alone (src/limiter/law.c), on a simulated clock: GPU-
 * bound processes launching kernels into a FIFO GPU, measured when they
 * complete, sleeping when the law says so (each sleep overshoots by 80 us,
 * as timer slack does). Checks that the GPU-time share converges to the
 * limit for kernels from 20 us to 5 ms, that windows do not oscillate,
 * that two processes of one tenant with very different kernels share the
 * tenant's clock without either starving, and that idle time earns at
 * most CREDIT of burst.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "limiter/law.h"

#define MS 1000000ll
#define US 1000ll
#define NW 64

struct proc {
    struct cs_law law;
    int64_t k;                     /* kernel length */
    int64_t t;                     /* when it acts next */
    int64_t q_end[1024], q_len[1024], q_est[1024];
    int qh, qn;
    int64_t est;
    double win[NW];                /* GPU ns per 100 ms window */
};

static int64_t busy_until;
static uint32_t share_pm;          /* run(): cs__law_set_share after start, 0 none */
static int64_t ahead_ns;           /* run(): cs__law_set_ahead after start, 0 none */

static void gpu_add(struct proc *p, int64_t start, int64_t end)
{
    for (int64_t a = start; a < end;) {
        int w = (int)(a / (100 * MS));
        int64_t b = (int64_t)(w + 1) * 100 * MS;
        if (b > end)
            b = end;
        if (w < NW)
            p->win[w] += (double)(b - a);
        a = b;
    }
}

/* One action of process p at p->t: harvest, then launch or sleep. */
static void step(struct proc *p)
{
    while (p->qn && p->q_end[p->qh] <= p->t) {
        int64_t k = p->q_len[p->qh];
        cs__law_charge(&p->law, (uint64_t)k, p->q_est[p->qh], p->t);
        p->est = p->est ? p->est + (k - p->est) / 4 : k;
        p->qh = (p->qh + 1) % 1024;
        p->qn--;
    }
    int64_t w = cs__law_wait(&p->law, p->t);
    if (!w && !p->est && p->qn >= 2)
        w = 200 * US;
    if (w) {
        p->t += w + 80 * US;
        return;
    }
    int64_t start = p->t > busy_until ? p->t : busy_until;
    busy_until = start + p->k;
    gpu_add(p, start, busy_until);
    int i = (p->qh + p->qn) % 1024;
    p->q_end[i] = busy_until;
    p->q_len[i] = p->k;
    p->q_est[i] = p->est;
    p->qn++;
    cs__law_pending(&p->law, p->est);
    p->t += 4 * US; /* launch cost */
    if (p->qn >= 1000)
        p->t = p->q_end[p->qh];
}

/* Runs n processes of one tenant (shared clock) for `secs`; fills the mean
 * share of windows 1..secs*10-2 of each and the sd of their sum. */
static void run(int pct, const int64_t *k, int n, double secs, double *mean, double *sd)
{
    static struct proc ps[4];
    int64_t vt = 0;
    memset(ps, 0, sizeof ps);
    busy_until = 0;
    for (int i = 0; i < n; i++) {
        ps[i].k = k[i];
        ps[i].t = i * 37 * US;
        cs__law_start(&ps[i].law, &vt, (uint32_t)pct, ps[i].t);
        if (share_pm)
            cs__law_set_share(&ps[i].law, share_pm);
        if (ahead_ns)
            cs__law_set_ahead(&ps[i].law, ahead_ns);
    }
    const int64_t end = (int64_t)(secs * 1000) * MS;
    for (;;) {
        struct proc *p = &ps[0];
        for (int i = 1; i < n; i++)
            if (ps[i].t < p->t)
                p = &ps[i];
        if (p->t >= end)
            break;
        step(p);
    }
    int nw = (int)(secs * 10);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++)
        mean[i] = 0;
    for (int w = 1; w < nw - 1; w++) {
        double tot = 0;
        for (int i = 0; i < n; i++) {
            double v = 100.0 * ps[i].win[w] / (100.0 * MS);
            mean[i] += v / (nw - 2);
            tot += v;
        }
        sum += tot;
        sq += tot * tot;
    }
    double m = sum / (nw - 2);
    *sd = sqrt(fmax(0, sq / (nw - 2) - m * m));
}

/* The law on its simulated clock is deterministic: every run prints the
 * same numbers (within 0.05 point of the limit, window sd at most 1.0).
 * The bounds leave room for tuning, not for noise. */
#define LAW_TOL 0.5   /* points from the target share */
#define LAW_SD 1.5    /* points, sd of the 100 ms windows */

int main(void)
{
    const int pcts[] = {10, 25, 50, 75};
    const int64_t ks[] = {20 * US, 35 * US, 200 * US, 1 * MS, 5 * MS};
    int failed = 0;
    for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++) {
        for (size_t b = 0; b < sizeof pcts / sizeof pcts[0]; b++) {
            double m, sd;
            run(pcts[b], &ks[a], 1, 3.0, &m, &sd);
            int ok = fabs(m - pcts[b]) <= LAW_TOL && sd <= LAW_SD;
            printf("kernel %6lld us, limit %2d%%: share %5.1f%%, sd %.2f pts%s\n",
                   (long long)(ks[a] / US), pcts[b], m, sd, ok ? "" : "  <-- FAIL");
            failed |= !ok;
        }
    }
    /* Two processes of one tenant, 400 us and 1.5 ms kernels, 50 %. */
    const int64_t two[2] = {400 * US, 1500 * US};
    double m2[2], sd2;
    run(50, two, 2, 3.0, m2, &sd2);
    int ok = fabs(m2[0] + m2[1] - 50) <= LAW_TOL && m2[0] >= 10 && m2[1] >= 10;
    printf("one tenant at 50%%, two processes: %.1f%% (400 us) + %.1f%% (1.5 ms) = %.1f%%, "
           "sd %.2f%s\n", m2[0], m2[1], m2[0] + m2[1], sd2, ok ? "" : "  <-- FAIL");
    failed |= !ok;

    /* A share set below the limit (clock boost, fulfilment) is what the
     * law holds; a longer run-ahead keeps the share, in longer bursts. */
    const int64_t k200[1] = {200 * US};
    share_pm = 4120;
    run(50, k200, 1, 3.0, m2, &sd2);
    ok = fabs(m2[0] - 41.2) <= LAW_TOL;
    printf("limit 50%%, share set to 41.20%%: %.1f%%%s\n", m2[0], ok ? "" : "  <-- FAIL");
    failed |= !ok;
    share_pm = 0;
    for (int64_t a = 4 * MS; a <= 8 * MS; a += 4 * MS) {
        ahead_ns = a;
        run(25, k200, 1, 3.0, m2, &sd2);
        ok = fabs(m2[0] - 25) <= LAW_TOL && sd2 <= LAW_SD;
        printf("limit 25%%, run-ahead %lld ms: %.1f%%, sd %.2f%s\n", (long long)(a / MS), m2[0],
               sd2, ok ? "" : "  <-- FAIL");
        failed |= !ok;
    }
    ahead_ns = 0;
    CHECK(!failed);

    /* Credit: after a long idle period the law allows at most
     * (CREDIT + AHEAD) * L of GPU time before pacing again. */
    struct cs_law l;
    int64_t vt = 0;
    memset(&l, 0, sizeof l);
    cs__law_start(&l, &vt, 25, 1);
    int64_t now = 10000 * MS, granted = 0;
    while (!cs__law_wait(&l, now)) {
        cs__law_charge(&l, 100 * US, 0, now);
        granted += 100 * US;
    }
    printf("burst after 10 s idle at 25%%: %.1f ms of GPU time\n", (double)granted / MS);
    CHECK_LE(granted, (CS_LAW_CREDIT_NS + CS_LAW_AHEAD_NS) / 4 + 100 * US);
    CHECK_GE(granted, (CS_LAW_CREDIT_NS + CS_LAW_AHEAD_NS) / 4 - 100 * US);

    /* A larger credit (a tenant held out of the GPU by its window) allows
     * that much more after the same idle time. */
    vt = 0;
    memset(&l, 0, sizeof l);
    cs__law_start(&l, &vt, 25, 1);
    cs__law_set_credit(&l, 54 * MS);
    granted = 0;
    while (!cs__law_wait(&l, now)) {
        cs__law_charge(&l, 100 * US, 0, now);
        granted += 100 * US;
    }
    printf("burst after 10 s idle at 25%% with 54 ms of credit: %.1f ms\n", (double)granted / MS);
    CHECK_LE(granted, (54 * MS + CS_LAW_AHEAD_NS) / 4 + 100 * US);
    CHECK_GE(granted, (54 * MS + CS_LAW_AHEAD_NS) / 4 - 100 * US);

    /* Forgiveness at a (re)start: 100 ms of work charged at 25 % puts the
     * clock 400 ms ahead (the law would hold the tenant that long); set
     * back to now, a launch goes at once. A clock behind is left alone. */
    vt = 0;
    memset(&l, 0, sizeof l);
    cs__law_start(&l, &vt, 25, now);
    cs__law_charge(&l, 100 * MS, 0, now);
    CHECK_GE(cs__law_wait(&l, now), 390 * MS);
    cs__law_forgive(&l, now);
    CHECK_EQ(vt, now);
    CHECK_EQ(cs__law_wait(&l, now), 0);
    vt = now - 5 * MS;
    cs__law_forgive(&l, now);
    CHECK_EQ(vt, now - 5 * MS);

    /* Windows: [10, 22.5) ms of every 50 ms period, any epoch. */
    struct cs_window w = {.period_ns = 50 * MS, .off_ns = 10 * MS, .len_ns = 12500 * US};
    int64_t base = 1000 * 50 * MS;
    CHECK_EQ(cs__law_window_wait(&w, 0, base + 10 * MS), 0);        /* opens */
    CHECK_EQ(cs__law_window_wait(&w, 0, base + 22 * MS), 0);        /* still open */
    CHECK_EQ(cs__law_window_wait(&w, 0, base + 22500 * US), 37500 * US); /* closed */
    CHECK_EQ(cs__law_window_wait(&w, 0, base + 5 * MS), 5 * MS);   /* before it */
    CHECK_EQ(cs__law_window_wait(&w, 0, base - 45 * MS), 5 * MS);  /* an earlier period */
    /* Our queued work must end inside the window... */
    CHECK_EQ(cs__law_window_wait(&w, 2 * MS, base + 20 * MS), 0);
    CHECK_EQ(cs__law_window_wait(&w, 3 * MS, base + 20 * MS), 40 * MS);
    /* ...but with nothing queued a launch goes, however long it is. */
    CHECK_EQ(cs__law_window_wait(&w, 0, base + 22400 * US), 0);
    CHECK_EQ(cs__law_window_wait(&w, 1 * MS, base + 22400 * US), 37600 * US);
    /* No window, or a degenerate one: launch any time. */
    struct cs_window none = {.period_ns = 50 * MS};
    CHECK_EQ(cs__law_window_wait(&none, 5 * MS, base), 0);
    struct cs_window whole = {.period_ns = 50 * MS, .len_ns = 50 * MS};
    CHECK_EQ(cs__law_window_wait(&whole, 5 * MS, base), 0);
    return 0;
}
