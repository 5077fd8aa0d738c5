/*
 * The watcher: one thread per armed process, started at the first limited
 * launch (never in a constructor, never on the cuInit path). Every tick
 * (100 ms) it
 *   - harvests measurement pairs (so GPU time is published even when the
 *     application stops launching),
 *   - re-lists the tenant's other processes (tenant.c),
 *   - computes the tenant's share of each limited device over the last
 *     second and posts it to the node board, with whether the tenant is
 *     starved (held under its limit by the others),
 *   - sets the share the law charges at: the limit, scaled down for the
 *     clock boost the device gives a partly idle GPU and for the
 *     fulfilment of starved tenants on the board (CUSHARE_SM_SHARE=
 *     throughput, the default; docs/limiter.md),
 *   - decides, for policy `default`, whether pacing is engaged.
 *
 * The decision rule (docs/limiter.md, "What a share means") is fair.c's:
 * the watcher gathers its inputs (our use and whether we fill the GPU,
 * the device's utilisation, the busy tenants on the board and the busy
 * time nobody's board entry explains) and applies its outputs (engaged,
 * the share, the run-ahead, whether we take turns). For policy `default`
 * an engaged decision is held for CS_WATCH_HOLD_NS after it was last
 * made. Without NVML (or before the device's UUID is known) the device
 * counts as saturated (fail closed).
 *
 * Identity (which NVML pid is ours) is resolved here, once, lazily: tier 0
 * when NVML lists our own getpid(), else broker / procfs as configured,
 * else the legacy allocation probe (probe.c) when NVML works
 * (src/identity).
 */
#define _GNU_SOURCE
#include "hami/hami.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"
#include "core/uuid.h"
#include "identity/identity.h"
#include "limiter/board.h"
#include "limiter/fair.h"
#include "limiter/internal.h"

#define SUBSYS "limiter"

#define CS_WATCH_FOREIGN_PCT 10          /* NVML: foreign utilisation that counts */
#define CS_WATCH_HOLD_NS 1000000000ll    /* stay engaged 1 s after contention */
/* Watcher ticks pacing stays engaged after HAMi's utilization_switch was
 * last seen at 1: the contention hold, counted in ticks so that a value
 * the tenant writes cannot shorten it however the watcher is scheduled. */
#define CS_WATCH_HAMI_HOLD_TICKS 10
#define CS_WATCH_WINDOW 10               /* ticks in the share window (1 s) */
#define CS_WATCH_STARVED_PCT 97          /* under 97 % of the limit may be starved */
#define CS_WATCH_UNPACED_PCT 5           /* slept under 5 % of the last second */
#define CS_WATCH_FULFIL_FLOOR 0.2        /* never scaled below 20 % of the limit */
#define CS_WATCH_BOOST_MAX 2.0           /* largest clock-boost correction */
#define CS_WATCH_IDLE_AWAKE 0.175        /* idle draw at the boost clock, of the cap */
#define CS_WATCH_FILLING_PPM 500000u     /* MPS: kernels holding half the SMs or more */
#define CS_WATCH_SMOOTH 0.25             /* per-tick step towards a new scale */
#define CS_WATCH_CAP_REREAD_NS 10000000000ll /* power cap re-read every 10 s */
#define CS_WATCH_DRY_PCT 10              /* queue dry under 10 % of unheld time: filling */
#define CS_WATCH_BLOCKED_PCT 50          /* or blocked in syncs half of it: filling */
#define CS_WATCH_FILL_RECENT 2           /* ... and ran something in the last 2 ticks */
#define CS_WATCH_UNPOSTED_TICKS 10       /* board busy a second in a row: said */


static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static bool watch_started;
/* Held by the watcher for a whole tick; the exit handler takes it to stop
 * the watcher before init.c's own exit handler frees our ledger slot (so
 * a tick never writes into a slot another process may claim next). */
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static bool stopping;

static struct {
    bool nvml_ok;
    nvmlDevice_t nvml[CS_MAX_DEVICES];
    bool nvml_known[CS_MAX_DEVICES];
    unsigned long long last_sample_us[CS_MAX_DEVICES];
    struct cs_board *board;
    uint64_t tenant_id;
    bool identity_done;
    int identity_attempts;       /* ticks tier 0 was tried (watcher only) */
    /* Per limited device: the scales of the share (watcher only). */
    struct {
        double boost;            /* full-load slowdown of our kernels, >= 1 */
        double fulfil;           /* equal-fulfilment scale, FLOOR..1 */
        unsigned cap_mw;         /* enforced power limit, 0 unknown */
        int64_t cap_read_ns;
        int64_t boost_logged_ns; /* boost inputs last logged (debug) */
        int64_t scales_held_until; /* boost and fulfilment kept at 1 until then */
        bool full_window;        /* our window is our limit of every period */
        bool saturated;          /* fulfilment's last verdict on the device */
        int64_t pacing_logged_ns; /* pacing summary last logged (debug) */
        uint64_t pacing_at[8];   /* own, work, slept, window idled by the law, then;
                                    the process's launches, markers, pairs, estimates */
        uint32_t logged_pm;      /* share last logged */
        struct cs_fair_out fair; /* the last engaged decision (policy default) */
        int yielding_to;         /* higher-priority peers whose launch stamps
                                    our launches wait on (yield on activity) */
        uint32_t posted_ppm;     /* the share of our last board post */
        int unposted;            /* ticks in a row our post found the board busy */
        uint32_t posts_missed;   /* posts the board was busy for, since the
                                    pacing summary */
    } dev[CS_MAX_DEVICES];
    /* One entry per tick, the last second and one more: the tenant's GPU
     * time, this process's charged time, work and pacing sleep (counters
     * of limiter.c; differences give the last second's), and NVML's
     * utilisation of limited devices (-1 unknown). */
    int64_t t[CS_WATCH_WINDOW + 1];
    uint64_t total[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    uint64_t own[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    uint64_t work[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    uint64_t slept[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    uint64_t dry[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    uint64_t blocked[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES]; /* process-wide: the same
                                                              for every device */
    uint64_t idle_gaps[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    int8_t util[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    int ring_n, ring_head;
} W;

void cs__watch_atfork_child(void)
{
    cs__mutex_reset(&watch_mu);
    cs__mutex_reset(&run_mu);
    watch_started = false;
    stopping = false;
    cs__board_close(W.board);
    memset(&W, 0, sizeof W);
}

/* ---- NVML ------------------------------------------------------------- */

static bool nvml_device(int d)
{
    if (W.nvml_known[d])
        return true;
    if (!W.nvml_ok || !cs__device_info(d)->known || !cs_drv.nvmlDeviceGetHandleByUUID)
        return false;
    char s[41];
    cs__format_uuid((const uint8_t *)cs__device_info(d)->uuid.bytes, s);
    if (cs_drv.nvmlDeviceGetHandleByUUID(s, &W.nvml[d]) != NVML_SUCCESS)
        return false;
    W.nvml_known[d] = true;
    return true;
}

static int nvml_sees_self(void *ctx)
{
    (void)ctx;
    if (!W.nvml_ok || !cs_drv.nvmlDeviceGetComputeRunningProcesses_v3)
        return -ENOSYS;
    unsigned me = (unsigned)getpid();
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        if (!nvml_device(d))
            continue;
        nvmlProcessInfo_t *infos;
        unsigned n;
        if (cs__nvml_processes(W.nvml[d], &infos, &n))
            continue;
        bool seen = false;
        for (unsigned i = 0; i < n && !seen; i++)
            seen = infos[i].pid == me;
        free(infos);
        if (seen)
            return 1;
    }
    return 0;
}

/* Tier 3 for cs__identity_resolve: the probe on our first known device. */
static uint32_t probe_waits;

static int probe_cb(void *ctx, pid_t *host_pid)
{
    (void)ctx;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (nvml_device(d))
            return cs__identity_probe(d, W.nvml[d], host_pid, &probe_waits);
    return -ENODEV;
}

static void resolve_identity(void)
{
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (!s)
        return;
    if (__atomic_load_n(&s->identity_tier, __ATOMIC_ACQUIRE) != CS_IDENTITY_UNKNOWN) {
        W.identity_done = true; /* resolved elsewhere in this process */
        return;
    }
    /* NVML lists a process once its context exists; give tier 0 a second
     * before the other tiers run. */
    if (nvml_sees_self(NULL) != 1 && ++W.identity_attempts < 10)
        return;
    struct cs_identity_config cfg = {
        .broker = cs__config()->hostpid_broker,
        .procfs_root = cs__config()->host_procfs[0] ? cs__config()->host_procfs : NULL,
        .nvml_sees_self = nvml_sees_self,
        .probe = W.nvml_ok ? probe_cb : NULL,
    };
    struct cs_identity_result res;
    int rc = cs__identity_resolve(&cfg, &res);
    W.identity_done = true;
    cs__ledger_set_identity(cs__ledger(), rc ? 0 : (int32_t)res.host_pid, (uint32_t)res.tier,
                            (uint32_t)(res.reason < 0 ? -res.reason : 0));
    __atomic_store_n(&s->lock_waits, probe_waits, __ATOMIC_RELAXED);
    cs__phase_identity((uint32_t)res.tier, probe_waits);
    if (rc)
        cs_info(SUBSYS, "NVML identity unresolved (%s): foreign utilisation is judged from "
                "device totals only", cs__identity_reason(res.reason_tier, res.reason));
}

static bool is_ours(unsigned pid, const unsigned *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] == pid)
            return true;
    return false;
}

/* NVML's device utilisation of device d in percent, or -1 when unknown. */
static int device_util(int d)
{
    nvmlUtilization_t u;
    if (!nvml_device(d) || !cs_drv.nvmlDeviceGetUtilizationRates ||
        cs_drv.nvmlDeviceGetUtilizationRates(W.nvml[d], &u) != NVML_SUCCESS)
        return -1;
    return u.gpu > 100 ? 100 : (int)u.gpu;
}

/* Foreign utilisation of device d in percent, or -1 when unknown; `util`
 * is device_util(d). */
static int foreign_pct(int d, int util, int our_pct)
{
    if (util < 0)
        return -1;
    int foreign = util - our_pct;
    if (cs_drv.nvmlDeviceGetProcessUtilization) {
        static unsigned pids[CS_LEDGER_SLOTS];
        int npids = cs__tenant_pids(pids, CS_LEDGER_SLOTS);
        nvmlProcessUtilizationSample_t *smp;
        unsigned n;
        if (cs__nvml_process_samples(W.nvml[d], W.last_sample_us[d], &smp, &n) == 0) {
            int sum = 0;
            unsigned long long newest = W.last_sample_us[d];
            /* Latest sample per foreign pid. */
            for (unsigned i = 0; i < n; i++) {
                if (smp[i].timeStamp > newest)
                    newest = smp[i].timeStamp;
                if (is_ours(smp[i].pid, pids, npids))
                    continue;
                bool later = false;
                for (unsigned j = 0; j < n; j++)
                    if (j != i && smp[j].pid == smp[i].pid && smp[j].timeStamp > smp[i].timeStamp)
                        later = true;
                if (!later)
                    sum += (int)smp[i].smUtil;
            }
            W.last_sample_us[d] = newest;
            if (sum > foreign)
                foreign = sum;
            free(smp);
        }
    }
    return foreign < 0 ? 0 : foreign;
}

/* ---- the tick ----------------------------------------------------------- */

static uint64_t tenant_total(int d)
{
    return cs__tenant_others(d) + __atomic_load_n(&cs__lim_devs[d].own_total, __ATOMIC_RELAXED);
}

/* The ring entry `back` ticks before the newest one. */
static int ring_at(int back)
{
    const int R = CS_WATCH_WINDOW + 1;
    return (W.ring_head - 1 - back + 2 * R) % R;
}

/* How many ticks back the ring covers, at most `ticks`. */
static int ring_span(int ticks)
{
    return ticks < W.ring_n - 1 ? ticks : W.ring_n - 1;
}

/* Growth of counter a of device d over the last `ticks` ticks. */
static uint64_t ring_delta(const uint64_t a[][CS_MAX_DEVICES], int d, int ticks)
{
    ticks = ring_span(ticks);
    return ticks < 1 ? 0 : a[ring_at(0)][d] - a[ring_at(ticks)][d];
}

/* Tenant share of device d over the last `ticks` ticks, in ppm. */
static uint32_t share_over(int d, int ticks)
{
    ticks = ring_span(ticks);
    if (ticks < 1)
        return 0;
    int64_t dt = W.t[ring_at(0)] - W.t[ring_at(ticks)];
    if (dt <= 0)
        return 0;
    uint64_t ppm = ring_delta(W.total, d, ticks) * 1000000ull / (uint64_t)dt;
    return ppm > 1000000 ? 1000000 : (uint32_t)ppm;
}

/* The tenant's share of device d over the last second counted in work
 * (contention-free launch time), what fulfilment compares
 * (docs/limiter.md, "Fulfilment"). */
static uint32_t work_share(int d)
{
    uint32_t ppm = share_over(d, CS_WATCH_WINDOW);
    uint64_t own = ring_delta(W.own, d, CS_WATCH_WINDOW);
    uint64_t work = ring_delta(W.work, d, CS_WATCH_WINDOW);
    if (!own || work >= own)
        return ppm;
    return (uint32_t)((uint64_t)ppm * work / own);
}

/* Our share as NVML might have seen it: NVML's sample period is anything
 * from 1/6 s to 1 s, so take the largest of our shares over windows in
 * that range. Attributing the most we can to ourselves errs towards "not
 * contended" by at most one window (1 s) when another tenant arrives. */
static uint32_t share_as_nvml_sees(int d)
{
    static const int windows[] = {2, 3, 5, CS_WATCH_WINDOW};
    uint32_t best = 0;
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        uint32_t v = share_over(d, windows[i]);
        if (v > best)
            best = v;
    }
    return best;
}

static void record_totals(int64_t now)
{
    int i = W.ring_head;
    W.t[i] = now;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        W.total[i][d] = tenant_total(d);
        W.own[i][d] = __atomic_load_n(&cs__lim_devs[d].own_total, __ATOMIC_RELAXED);
        W.work[i][d] = __atomic_load_n(&cs__lim_devs[d].own_work, __ATOMIC_RELAXED);
        W.slept[i][d] = __atomic_load_n(&cs__lim_devs[d].sleep_ns, __ATOMIC_RELAXED);
        W.dry[i][d] = __atomic_load_n(&cs__lim_devs[d].dry_ns, __ATOMIC_RELAXED);
        W.blocked[i][d] = cs__lim_blocked_ns();
        W.idle_gaps[i][d] = __atomic_load_n(&cs__lim_devs[d].idle_gaps, __ATOMIC_RELAXED);
        W.util[i][d] = -1; /* the device loop of the tick fills it in */
    }
    W.ring_head = (W.ring_head + 1) % (CS_WATCH_WINDOW + 1);
    if (W.ring_n < CS_WATCH_WINDOW + 1)
        W.ring_n++;
}

static uint64_t tenant_id(void)
{
    struct stat st;
    const struct cs_ledger_header *h = cs__ledger()->hdr;
    if (cs__ledger()->fd < 0 || fstat(cs__ledger()->fd, &st) || !h)
        return 0;
    uint64_t x = (uint64_t)st.st_dev * 0x9e3779b97f4a7c15ull ^ (uint64_t)st.st_ino;
    x ^= h->created_ns + 0x632be59bd9b4e019ull + (x << 6) + (x >> 2);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x > 1 ? x : x + 2; /* 0 and 1 are not tenant ids (board.h) */
}

/* ---- the share the law charges at --------------------------------------- */

/* Clock boost: each busy nanosecond charged as the longer time it would
 * take at full load under the power cap, sqrt(((P - idle) / D) /
 * (cap - idle)), 1 when below 1 (docs/limiter.md, "Clock boost"). */
static void update_boost(int d, int util, uint32_t own_ppm, int64_t now)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    if (!w->boost)
        w->boost = 1;
    if (cs__config()->sm_share_time || !nvml_device(d) || !cs_drv.nvmlDeviceGetPowerUsage ||
        !cs_drv.nvmlDeviceGetEnforcedPowerLimit) {
        w->boost = 1;
        return;
    }
    if (!w->cap_mw || now - w->cap_read_ns > CS_WATCH_CAP_REREAD_NS) {
        unsigned cap = 0;
        if (cs_drv.nvmlDeviceGetEnforcedPowerLimit(W.nvml[d], &cap) == NVML_SUCCESS && cap)
            w->cap_mw = cap;
        w->cap_read_ns = now;
    }
    unsigned mw = 0;
    if (!w->cap_mw || cs_drv.nvmlDeviceGetPowerUsage(W.nvml[d], &mw) != NVML_SUCCESS || !mw)
        return;
    double cap = w->cap_mw / 1000.0, p = mw / 1000.0;
    /* Idle power here is what the board draws with nothing running but its
     * clocks up, between our bursts (a fixed fraction of the cap). The
     * lowest reading is not it: the deep idle shows only after seconds
     * without work, which a lightly paced tenant's power average never
     * reaches, and taken as idle it would charge such a tenant a boost
     * larger than its kernels got (figures: docs/limiter.md). */
    double idle = CS_WATCH_IDLE_AWAKE * cap;
    double duty = fmax(util / 100.0, own_ppm / 1e6);
    if (util < 0 || duty < 0.03 || cap <= idle)
        return; /* too little signal: keep the last estimate */
    double h = (p - idle) / duty / (cap - idle);
    double target = h > 1 ? fmin(sqrt(h), CS_WATCH_BOOST_MAX) : 1;
    w->boost += (target - w->boost) * CS_WATCH_SMOOTH;
    /* The inputs, once a second: what a boost estimate is checked against
     * on a real GPU (clocks and power sampled beside it). */
    if (now - w->boost_logged_ns >= 1000000000ll) {
        w->boost_logged_ns = now;
        cs_debug(SUBSYS, "device %d: boost inputs: power %.1f W, idle %.1f W, cap %.1f W, "
                 "utilisation %d %%, own %.1f %%, target x%.3f, boost x%.3f", d, p, idle, cap,
                 util, own_ppm / 1e4, target, w->boost);
    }
}

/* Whether our board post went through; a post the board was busy for a
 * second in a row is said, since until it goes through the other tenants
 * do not see this one (board.c, "posting"). */
static void note_post(int d, enum cs_board_posted r, uint32_t ppm)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    if (r != CS_BOARD_POST_BUSY) {
        if (w->unposted >= CS_WATCH_UNPOSTED_TICKS)
            cs_info(SUBSYS, "device %d: on the node board again after %d ticks", d,
                    w->unposted);
        w->unposted = 0;
        w->posted_ppm = r == CS_BOARD_POSTED ? ppm : 0;
        return;
    }
    w->posts_missed++;
    if (++w->unposted == CS_WATCH_UNPOSTED_TICKS)
        cs_info(SUBSYS, "device %d: not on the node board for %d ticks: claiming an entry "
                "found the file locked by other processes of this pod every time; other "
                "tenants do not see this one meanwhile", d, w->unposted);
}

/* Debug, once a second: where our time went (charged GPU time, work,
 * pacing sleeps, the time of our own window that the law's holds left
 * idle, which nobody may use), how far our clock runs ahead of real time,
 * our window, the process's launch path counts (cushare_limiter_stats), and
 * what we posted on the board. */
static void log_pacing(int d, int64_t now)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    const struct cs_lim_dev *D = &cs__lim_devs[d];
    if (!cs__log_enabled(CS_LOG_DEBUG) || !__atomic_load_n(&D->own_total, __ATOMIC_RELAXED) ||
        now - w->pacing_logged_ns < 1000000000ll)
        return; /* a device we have not run on says nothing */
    uint64_t at[8] = {__atomic_load_n(&D->own_total, __ATOMIC_RELAXED),
                      __atomic_load_n(&D->own_work, __ATOMIC_RELAXED),
                      __atomic_load_n(&D->sleep_ns, __ATOMIC_RELAXED),
                      __atomic_load_n(&D->law_in_window_ns, __ATOMIC_RELAXED),
                      __atomic_load_n(&cs__lim_stats.paced_launches, __ATOMIC_RELAXED),
                      __atomic_load_n(&cs__lim_stats.markers, __ATOMIC_RELAXED),
                      __atomic_load_n(&cs__lim_stats.measured, __ATOMIC_RELAXED),
                      __atomic_load_n(&cs__lim_stats.groups_estimated, __ATOMIC_RELAXED)};
    double ms[4];
    uint64_t n[4];
    for (int i = 0; i < 4; i++) {
        ms[i] = (double)(at[i] - w->pacing_at[i]) / 1e6;
        n[i] = at[4 + i] - w->pacing_at[4 + i];
    }
    const int64_t *vt = cs__lim_clock(d);
    int64_t v = vt ? __atomic_load_n(vt, __ATOMIC_RELAXED) : 0;
    double lead = v ? (double)(v - now) / 1e6 : 0;
    struct cs_window win = cs__lim_window_unpack(__atomic_load_n(&D->window, __ATOMIC_RELAXED));
    struct cs_lim_queue_view q = cs__lim_queue_view(d, now);
    if (w->pacing_logged_ns)
        cs_debug(SUBSYS, "device %d: last %.2f s: charged %.1f ms (work %.1f ms), slept %.1f "
                 "ms, %.1f ms of our window left idle by the law; clock %+.1f ms; queue ends "
                 "in %.2f ms; launch estimates up to %.3f ms (minimum up to %.3f ms); window %lld "
                 "us at %lld us of %lld us; process %d: %llu launches, %llu markers, %llu pairs "
                 "measured, %llu groups by estimate; %s, posted share %.1f %%, %u posts "
                 "missed", d, (double)(now - w->pacing_logged_ns) / 1e9,
                 ms[0], ms[1], ms[2], ms[3], lead, (double)q.queue_ahead_ns / 1e6,
                 (double)q.sig_est_max_ns / 1e6, (double)q.sig_min_max_ns / 1e6,
                 (long long)win.len_ns / 1000,
                 (long long)win.off_ns / 1000, (long long)win.period_ns / 1000, (int)getpid(),
                 (unsigned long long)n[0], (unsigned long long)n[1], (unsigned long long)n[2],
                 (unsigned long long)n[3],
                 __atomic_load_n(&D->engaged, __ATOMIC_RELAXED) ? "engaged" : "released",
                 w->posted_ppm / 1e4, w->posts_missed);
    w->posts_missed = 0;
    w->pacing_logged_ns = now;
    memcpy(w->pacing_at, at, sizeof at);
}

/* MPS clients run side by side: no turns to take (shape.c). Except, with
 * CUSHARE_MPS_TURNS=filling, those whose kernels fill the GPU: side by
 * side they only slow each other down and make each other's measurements
 * long (an element-wise 25 + 75 pair got A:B 0.296 on the H200), so they
 * take turns as time-sliced tenants do. */
static bool runs_beside_others(int d)
{
    const struct cs_lim_dev *D = &cs__lim_devs[d];
    if (!__atomic_load_n(&D->concurrent, __ATOMIC_RELAXED))
        return false;
    return !cs__config()->mps_turns_filling ||
           __atomic_load_n(&D->occ_avg_ppm, __ATOMIC_RELAXED) < CS_WATCH_FILLING_PPM;
}

/* Fulfilment: scale our share to the fulfilment of a starved tenant of
 * higher or equal priority, only while our own samples say the device is
 * saturated, never below the floor; the step shrinks by its limit / ours
 * so the loop converges (docs/limiter.md, "Fulfilment"). */
static void update_fulfil(int d, const struct cs_board_view *v, bool saturated)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    if (!w->fulfil)
        w->fulfil = 1;
    double target = cs__config()->sm_share_time || !saturated ? 1 : v->starved_fulfil_ppm / 1e6;
    target = fmax(CS_WATCH_FULFIL_FLOOR, fmin(1, target));
    double step = CS_WATCH_SMOOTH;
    uint32_t ours = cs__lim_devs[d].pct;
    if (target < w->fulfil && v->starved_limit && v->starved_limit < ours)
        step *= (double)v->starved_limit / ours;
    w->fulfil += (target - w->fulfil) * step;
}

/* Mean NVML utilisation of device d over the last second (the window
 * NVML averages board power over), -1 when unknown. */
static int util_mean(int d)
{
    int sum = 0, n = 0;
    for (int k = 0; k < CS_WATCH_WINDOW && k < W.ring_n; k++) {
        int u = W.util[ring_at(k)][d];
        if (u >= 0) {
            sum += u;
            n++;
        }
    }
    return n ? sum / n : -1;
}

/* Starved: under its limit, (almost) never held back by its pacer in the
 * last second, on a device saturated by limited tenants. */
static bool starved(int d, uint32_t ppm, bool saturated)
{
    const struct cs_lim_dev *D = &cs__lim_devs[d];
    bool under = (uint64_t)ppm * 100 < (uint64_t)D->pct * 10000 * CS_WATCH_STARVED_PCT;
    bool unpaced = ring_delta(W.slept, d, CS_WATCH_WINDOW) * 100 <
                   (uint64_t)CS_WATCH_WINDOW * CS_LIM_TICK_NS * CS_WATCH_UNPACED_PCT;
    return W.ring_n > CS_WATCH_WINDOW && under && unpaced && saturated;
}

/* The share the law charges at: the cap (force) or the entitlement of the
 * last engaged decision (default), scaled for clock boost; fulfilment
 * only scales a cap (an entitlement already gives way to the others). */
static void apply_share(int d, bool force)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    struct cs_lim_dev *D = &cs__lim_devs[d];
    double base = force || !w->fair.entitled_pm ? D->pct * 100.0 * w->fulfil
                                                : (double)w->fair.entitled_pm;
    double pm = base / w->boost;
    uint32_t v = pm < 1 ? 1 : pm > 9999 ? 9999 : (uint32_t)lround(pm);
    __atomic_store_n(&D->share_pm, v, __ATOMIC_RELAXED);
    if (v + 100 <= w->logged_pm || v >= w->logged_pm + 100) {
        w->logged_pm = v;
        cs_info(SUBSYS, "device %d: %u %% share charged at %.1f %% of GPU time (clock boost "
                "x%.2f, fulfilment %.2f)", d, D->pct, v / 100.0, w->boost, w->fulfil);
    }
}

/* ---- coordinated windows ------------------------------------------------ */

/* Orders the tenants of a window schedule the same way in every process. */
static bool member_before(const struct cs_board_member *m, uint32_t uid, uint64_t tenant)
{
    return m->uid != uid ? m->uid < uid : m->tenant < tenant;
}

/* The period of a schedule of `tenants` (us). Every switch between busy
 * contexts costs the GPU work: on the H200 0.14 ms with the next tenant's
 * work already queued, 0.2-0.4 ms as tenants wake and launch (docs/
 * results.md, "Window edges"). So by default the period grows with the
 * tenants, 50 ms per tenant after the first (two: 50 ms, three: 100 ms)
 * up to 200 ms: at most 40 switches a second up to eight tenants, while a
 * tenant waits for its turn at most a period minus its window.
 * CUSHARE_SM_PERIOD_US fixes it (0: no windows). */
static uint32_t period_for(int tenants)
{
    const struct cs_config *c = cs__config();
    if (!c->sm_period_auto)
        return c->sm_period_us;
    uint32_t p = CS_SM_PERIOD_DEFAULT_US * (uint32_t)(tenants > 2 ? tenants - 1 : 1);
    return p < CS_SM_PERIOD_AUTO_MAX_US ? p : CS_SM_PERIOD_AUTO_MAX_US;
}

/* Our window on device d: the pacing tenants busy on it (the board's and
 * us) take turns within each period, in (uid, tenant) order, each for a
 * part of the period proportional to its limit. Only while their limits
 * add up to at most 100 %, so every window is at least its tenant's limit
 * of the period whatever others claim; otherwise (or alone, or not
 * pacing) no window (docs/limiter.md, "Windows"). */
static uint64_t window_for(int d, const struct cs_board_view *v, bool engaged, bool *full)
{
    *full = false;
    uint32_t period_us = period_for(v->nmembers + 1), pct = cs__lim_devs[d].pct;
    if (!period_us || !engaged || !v->nmembers || v->nmembers > CS_BOARD_WINDOW_MEMBERS ||
        runs_beside_others(d))
        return 0;
    /* Turns only when every busy tenant on the board takes them: one that
     * launches whenever it likes would run inside our window while we
     * keep out of its time, and the two views of who holds the GPU would
     * disagree until the next decisions. */
    if (v->npeers < CS_BOARD_VIEW_PEERS && v->nmembers != v->npeers)
        return 0;
    uint32_t uid = (uint32_t)geteuid(), sum = pct, before = 0;
    for (int i = 0; i < v->nmembers; i++) {
        const struct cs_board_member *m = &v->members[i];
        sum += m->sm_limit;
        if (member_before(m, uid, W.tenant_id))
            before += m->sm_limit;
    }
    if (sum > 100)
        return 0;
    *full = sum == 100;
    uint64_t off = (uint64_t)period_us * before / sum, len = (uint64_t)period_us * pct / sum;
    /* Opened early, overlapping the previous owner's end: our first
     * launches are queued while its last work drains (no idle GPU while we
     * wake up and launch), and time lost inside our window (a sync gap of
     * a shallow queue) can be made up there. The law still holds us to our
     * limit. */
    uint64_t lead = cs__lim_window_lead_us(len);
    off = (off + period_us - lead) % period_us;
    return cs__lim_window_pack(period_us, off, len + lead);
}

/* Windows that are exactly the members' limits leave the scales nothing
 * to correct: the device runs at full load by construction (no clock
 * boost), and nobody can use time we yield inside our window (fulfilment
 * only idles it). But the inputs of both are one-second averages of the
 * time before: a tenant that ran alone at 20 % measured a boost of 1.2,
 * kept it for a second after the windows formed, and its law stopped it
 * inside its own window (on the H200 the matmul 20/30/50 mix kept 96.5 %
 * of the GPU, 99.7 % since). So when such windows form, both scales
 * restart at 1 and their inputs are ignored for the second they still
 * describe. */
static void scales_on_full_window(int d, bool full, int64_t now)
{
    __typeof__(W.dev[0]) *w = &W.dev[d];
    if (full && !w->full_window) {
        w->boost = 1;
        w->fulfil = 1;
        w->scales_held_until = now + CS_WATCH_WINDOW * CS_LIM_TICK_NS;
    }
    w->full_window = full;
}

static void update_window(int d, const struct cs_board_view *v, bool engaged, int64_t now)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    bool full;
    uint64_t w = window_for(d, v, engaged, &full);
    scales_on_full_window(d, w && full, now);
    uint64_t old = __atomic_exchange_n(&D->window, w, __ATOMIC_RELAXED);
    if (old == w)
        return;
    struct cs_window win = cs__lim_window_unpack(w);
    if (w)
        cs_info(SUBSYS, "device %d: window of %lld us at %lld us of each %lld us period, %d "
                "other tenant%s", d, (long long)win.len_ns / 1000, (long long)win.off_ns / 1000,
                (long long)win.period_ns / 1000, v->nmembers, v->nmembers == 1 ? "" : "s");
    else
        cs_info(SUBSYS, "device %d: no window: launches whenever the law allows (%s, %d of %d "
                "busy tenants take turns)", d, engaged ? "engaged" : "not engaged",
                v->nmembers, v->npeers);
}

/* ---- the share decision (fair.c) ---------------------------------------- */

/* Whether our queue on the GPU stayed non-empty over the last second
 * while we were not held: we fill the GPU (turn-taking pays), rather than
 * leave it idle between launches for the CPU (a decode loop). Either our
 * queue was seen dry for little of that time, or our threads spent much
 * of it blocked waiting for the GPU: the dry time of launches the free
 * path lets go is estimated from contention-free kernel times, and beside
 * a tenant that time-slices with us our work drains later than that, so
 * a GPU-bound tenant would read dry; its syncs tell the truth. A tenant
 * that rested within the second (a dry spell of CS_LIM_IDLE_GAP_NS) does
 * not fill it: its use over the second says little yet of what it gets
 * (a rival would read it as owed its floor while it only ramps up), and
 * one that ran nothing over the last CS_WATCH_FILL_RECENT ticks has
 * stopped (no launch notes a dry queue then: a rival would read it as
 * filling the GPU and owed while its use decays). */
/* The time of the last second we were not asleep in pacing (ns). */
static int64_t unheld_ns(int d)
{
    return (int64_t)ring_span(CS_WATCH_WINDOW) * CS_LIM_TICK_NS -
           (int64_t)ring_delta(W.slept, d, CS_WATCH_WINDOW);
}

/* A dry spell of CS_LIM_IDLE_GAP_NS ended within the last second, or
 * nothing of ours ran over the last CS_WATCH_FILL_RECENT ticks. */
static bool rested(int d)
{
    return ring_delta(W.idle_gaps, d, CS_WATCH_WINDOW) != 0 ||
           ring_delta(W.own, d, CS_WATCH_FILL_RECENT) == 0;
}

/* Under half of the last second seen yet: whether we fill the GPU is
 * unknown. */
static bool fill_unknown(void)
{
    return ring_span(CS_WATCH_WINDOW) < CS_WATCH_WINDOW / 2;
}

static bool filling(int d)
{
    /* Unknown is taken as filling, so a tenant that just started claims
     * no short queues of the others. */
    if (fill_unknown())
        return true;
    int64_t span = (int64_t)ring_span(CS_WATCH_WINDOW) * CS_LIM_TICK_NS;
    int64_t unheld = unheld_ns(d);
    int64_t dry = (int64_t)ring_delta(W.dry, d, CS_WATCH_WINDOW);
    int64_t blocked = (int64_t)ring_delta(W.blocked, d, CS_WATCH_WINDOW);
    return span > 0 && unheld > 0 && !rested(d) &&
           (dry * 100 < unheld * CS_WATCH_DRY_PCT || blocked * 100 >= unheld * CS_WATCH_BLOCKED_PCT);
}

/* Counter a of device d over the last second, in percent of the time we
 * were not held (log lines). */
static int of_unheld(int d, const uint64_t a[][CS_MAX_DEVICES])
{
    int64_t unheld = unheld_ns(d);
    return unheld > 0 ? (int)((int64_t)ring_delta(a, d, CS_WATCH_WINDOW) * 100 / unheld) : 0;
}

/* Why filling(d) said what it said, for the log: a rest, or the queue's
 * dry and blocked time. A dry spell is counted whole at the launch that
 * ends it, so one that began seconds ago would read as more than the
 * second. */
static const char *fill_evidence(int d, char *buf, size_t n)
{
    if (fill_unknown())
        snprintf(buf, n, "under half a second seen");
    else if (rested(d))
        snprintf(buf, n, "rested within the last second");
    else
        snprintf(buf, n, "queue dry %d %%, blocked in syncs %d %% of the time not held",
                 of_unheld(d, W.dry), of_unheld(d, W.blocked));
    return buf;
}

/* Our pacing slept at least CS_WATCH_UNPACED_PCT of the last second. */
static bool held(int d)
{
    return ring_delta(W.slept, d, CS_WATCH_WINDOW) * 100 >=
           (uint64_t)ring_span(CS_WATCH_WINDOW) * CS_LIM_TICK_NS * CS_WATCH_UNPACED_PCT;
}

/* Whether our board entry says busy: we use a share that counts, or our
 * pacing holds us (work waiting, though we may use nothing, as while we
 * yield to a higher priority: that tenant keeps publishing its launch
 * times for us). Held while our last decision engaged us only: a new
 * tenant's first launches wait for a measurement, engaged until a first
 * decision (fail closed), which is no pacing. */
static bool busy_on_board(int d, uint32_t ppm)
{
    return ppm >= CS_BOARD_BUSY_PPM || (held(d) && W.dev[d].fair.engaged);
}

/* What we would use unthrottled, roughly: our use over the time we were
 * not asleep in pacing, in parts per 10000 (display only). */
static uint32_t demand_pm(int d, uint32_t use_ppm)
{
    int64_t span = (int64_t)ring_span(CS_WATCH_WINDOW) * CS_LIM_TICK_NS;
    int64_t unheld = unheld_ns(d);
    if (span <= 0)
        return use_ppm / 100;
    if (unheld < span / 100)
        unheld = span / 100;
    uint64_t pm = (uint64_t)use_ppm / 100 * (uint64_t)span / (uint64_t)unheld;
    return pm > CS_FAIR_FULL ? CS_FAIR_FULL : (uint32_t)pm;
}

/* For viewers (top, status): the decision in the ledger header. */
static void publish_state(int d, uint32_t use_ppm, enum cs_fair_why why, uint32_t entitled_pm)
{
    struct cs_ledger_header *h = cs__ledger()->hdr;
    if (!h)
        return;
    __atomic_store_n(&h->dev[d].share_state,
                     cs_share_state_pack(demand_pm(d, use_ppm), entitled_pm, (uint32_t)why),
                     __ATOMIC_RELAXED);
}

/* Policy default: fair.c decides from what the board and NVML say; an
 * engaged decision holds for CS_WATCH_HOLD_NS. Returns whether pacing is
 * engaged now. */
static int decide_default(int d, uint32_t ppm, int32_t prio, int util, int foreign,
                          const struct cs_board_view *v, int64_t now)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    struct cs_fair_peer peers[CS_BOARD_VIEW_PEERS];
    for (int i = 0; i < v->npeers; i++)
        peers[i] = (struct cs_fair_peer){.floor_pm = v->peers[i].sm_limit * 100,
                                         .use_pm = v->peers[i].share_ppm / 100,
                                         .priority = v->peers[i].priority,
                                         .held = v->peers[i].held,
                                         .filling = v->peers[i].filling};
    /* Busy time of processes on no board entry (unlimited tenants). */
    int unexplained = foreign < 0 ? 0 : foreign - (int)(v->busy_share_ppm / 10000);
    /* Busy: NVML's utilisation, or what we and the others are seen to use
     * (its per-process samples may know when its utilisation, averaged
     * over a long window, does not). */
    int busy = foreign < 0 || util < 0 ? -1 : (int)(share_as_nvml_sees(d) / 10000) + foreign;
    if (busy >= 0 && util > busy)
        busy = util;
    struct cs_fair_in in = {.floor_pm = D->pct * 100, .use_pm = ppm / 100, .priority = prio,
                            .filling = filling(d), .held = held(d),
                            .windows = __atomic_load_n(&D->window, __ATOMIC_RELAXED) != 0,
                            .device_busy_pm = busy < 0 ? -1 : busy > 100 ? 10000 : busy * 100,
                            .foreign_pm = unexplained > 0 ? (uint32_t)unexplained * 100 : 0,
                            .npeers = v->npeers, .peers = peers};
    struct cs_fair_out out;
    cs__fair_decide(&in, &out);
    __typeof__(W.dev[0]) *w = &W.dev[d];
    if (out.engaged && out.turns != w->fair.turns)
        cs_debug(SUBSYS, "device %d: %s turns (%s, %s the GPU: queue dry %.1f ms of %.1f ms "
                 "not held)", d, out.turns ? "takes" : "takes no", cs__fair_why_name(out.why),
                 in.filling ? "fills" : "does not fill",
                 (double)ring_delta(W.dry, d, CS_WATCH_WINDOW) / 1e6,
                 (double)unheld_ns(d) / 1e6);
    /* A tenant that fills the GPU keeps an engaged decision for
     * CS_WATCH_HOLD_NS: held, its use drops to its share, and releasing it
     * at once would flap. One that leaves the GPU idle between launches is
     * held only tick by tick, while a rival is owed: it gains nothing by
     * the hold, and each tick held costs it CPU time it runs on. */
    if (out.engaged) {
        if (in.filling)
            D->contended_until = now + CS_WATCH_HOLD_NS;
        w->fair = out;
    } else if (D->contended_until <= now) {
        w->fair = out;
    }
    int engaged = out.engaged || D->contended_until > now;
    char evidence[96];
    __atomic_store_n(&D->ahead_ns, engaged ? w->fair.ahead_ns : 0, __ATOMIC_RELAXED);
    publish_state(d, ppm, engaged ? w->fair.why : CS_FAIR_FREE, w->fair.entitled_pm);
    if (cs__lim_set_engaged(d, engaged) != engaged)
        cs_info(SUBSYS, "device %d: pacing %s (%s; use %.1f %%, entitled %.1f %%, %s the GPU "
                "(%s), device %d %% busy, %d other busy tenant%s, unexplained %d %%)", d,
                engaged ? "engaged" : "released", cs__fair_why_name(w->fair.why), ppm / 1e4,
                w->fair.entitled_pm / 100.0, in.filling ? "fills" : "does not fill",
                fill_evidence(d, evidence, sizeof evidence), util, v->npeers,
                v->npeers == 1 ? "" : "s", unexplained);
    return engaged;
}

/* Yield on activity (fair.h): while a busy lower-priority tenant shares
 * device d, our launches are stamped in our board entry for it to see;
 * while we are held for priority, our launches wait for the busy
 * higher-priority peers' stamps to be a quiet period old. */
static void update_stamp(int d, const struct cs_board_view *v)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    int64_t quiet = (int64_t)cs__config()->priority_quiet_us * 1000;
    const uint8_t *uuid = (const uint8_t *)cs__device_info(d)->uuid.bytes;
    uint64_t *stamp = quiet && v->busy_lower && W.board ? cs__board_stamp(W.board, uuid) : NULL;
    if ((stamp != NULL) != (__atomic_load_n(&D->stamp, __ATOMIC_RELAXED) != NULL))
        cs_info(SUBSYS, "device %d: %s launch times (%s)", d, stamp ? "publishing" : "stopped "
                "publishing", stamp ? "a busy lower-priority tenant yields to them"
                                    : "no busy lower-priority tenant");
    cs__lim_set_stamp(d, stamp);
}

/* `may`: policy default decided this tick (under force, or while HAMi's
 * switch holds the device, priority plays no part: stamps handed over
 * before are dropped). */
static void update_yield(int d, const struct cs_board_view *v, int32_t prio, bool may)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    int64_t quiet = (int64_t)cs__config()->priority_quiet_us * 1000;
    struct cs_lim_quiet q[CS_LIM_QUIET];
    int n = 0;
    bool yielding = may && quiet && W.board && __atomic_load_n(&D->engaged, __ATOMIC_RELAXED) &&
                    W.dev[d].fair.why == CS_FAIR_PRIORITY;
    for (int i = 0; yielding && i < v->npeers && n < CS_LIM_QUIET; i++) {
        if (v->peers[i].priority >= prio)
            continue;
        q[n] = (struct cs_lim_quiet){.index = v->peers[i].index};
        q[n].fd = cs__board_stamps_fd(W.board, &v->peers[i], &q[n].own);
        n += q[n].fd >= 0 || q[n].own;
    }
    cs__lim_set_quiet(d, q, n, quiet);
    /* Said once the launch path has them: a launch after this line waits. */
    if (n != W.dev[d].yielding_to) {
        if (n)
            cs_info(SUBSYS, "device %d: yielding on activity to %d busy higher-priority "
                    "tenant%s (quiet period %lld us)", d, n, n == 1 ? "" : "s",
                    (long long)(quiet / 1000));
        else
            cs_info(SUBSYS, "device %d: not yielding on activity", d);
        W.dev[d].yielding_to = n;
    }
}

static void tick(int64_t now)
{
    const struct cs_ledger_header *h = cs__ledger()->hdr;
    uint32_t policy = cs__ledger_policy(cs__ledger());
    int32_t prio = __atomic_load_n(&h->priority, __ATOMIC_RELAXED);

    cs__tenant_refresh();
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_lim_dev *D = &cs__lim_devs[d];
        if (!D->pct)
            continue;
        pthread_mutex_lock(&D->mu);
        cs__lim_harvest_locked(d, now);
        pthread_mutex_unlock(&D->mu);
    }
    record_totals(now);
    if (!W.identity_done && W.nvml_ok)
        resolve_identity();

    /* Every view before our first post: the board is read once a tick. */
    struct cs_board_view views[CS_MAX_DEVICES];
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        views[d] = (struct cs_board_view){.starved_fulfil_ppm = 1000000};
        if (cs__lim_devs[d].pct && cs__device_info(d)->known && W.board)
            cs__board_view(W.board, W.tenant_id, (const uint8_t *)cs__device_info(d)->uuid.bytes, prio,
                           now, &views[d]);
    }
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_lim_dev *D = &cs__lim_devs[d];
        if (!D->pct)
            continue;
        uint32_t ppm = work_share(d);
        bool known = cs__device_info(d)->known;
        int util_now = known ? device_util(d) : -1;
        W.util[ring_at(0)][d] = (int8_t)util_now;
        int util = util_mean(d); /* over the second board power averages */
        const struct cs_board_view v = views[d];
        bool saturated = cs__fair_fulfil_saturated(util, (uint64_t)ppm + v.busy_share_ppm,
                                                   W.dev[d].saturated);
        W.dev[d].saturated = saturated;
        if (known && W.board) {
            struct cs_board_post p = {.tenant = W.tenant_id, .priority = prio,
                                      .policy = policy, .sm_limit = D->pct,
                                      .share_ppm = ppm, .busy = busy_on_board(d, ppm),
                                      .starved = starved(d, ppm, saturated),
                                      .paced = !runs_beside_others(d) &&
                                               __atomic_load_n(&D->engaged,
                                                               __ATOMIC_RELAXED) != 0 &&
                                               (policy == CS_POLICY_FORCE ||
                                                W.dev[d].fair.turns),
                                      .held = held(d), .filling = filling(d)};
            memcpy(p.uuid, cs__device_info(d)->uuid.bytes, 16);
            note_post(d, cs__board_post(W.board, &p, now), ppm);
            update_stamp(d, &v);
        }
        /* Pairs spanning several launches measure other contexts' slices
         * with ours when a busy co-tenant time-slices with us: only alone,
         * or inside our own window. */
        int foreign = foreign_pct(d, util_now, (int)(share_as_nvml_sees(d) / 10000));
        __atomic_store_n(&D->alone,
                         !v.busy_higher_or_equal && !v.busy_lower && foreign >= 0 &&
                             foreign < CS_WATCH_FOREIGN_PCT,
                         __ATOMIC_RELAXED);
        if (known && now >= W.dev[d].scales_held_until) {
            update_boost(d, util, ppm, now);
            update_fulfil(d, &v, saturated);
        }
        log_pacing(d, now);
        if (policy == CS_POLICY_FORCE) {
            W.dev[d].fair = (struct cs_fair_out){.engaged = true, .why = CS_FAIR_CAPPED,
                                                 .turns = true};
            if (known)
                apply_share(d, true);
            cs__lim_set_engaged(d, 1);
            publish_state(d, ppm, CS_FAIR_CAPPED, (uint32_t)D->pct * 100);
            update_yield(d, &v, prio, false);
            update_window(d, &v, true, now);
            continue;
        }
        /* Under HAMi's monitor its utilization_switch engages pacing, as
         * it does for HAMi-core: it sees every container of the node. Its
         * 0 never releases pacing by itself: the tenant can write the
         * region too (docs/security.md, "HAMi's region"), so then our own
         * decision below rules, once the hold after its last 1 is over. */
        if (cs__hami_util_switch() > 0)
            D->hami_hold = CS_WATCH_HAMI_HOLD_TICKS;
        else if (D->hami_hold > 0)
            D->hami_hold--;
        if (D->hami_hold > 0) {
            if (known)
                apply_share(d, true);
            if (cs__lim_set_engaged(d, 1) != 1)
                cs_info(SUBSYS, "device %d: pacing engaged by HAMi's utilization_switch", d);
            publish_state(d, ppm, CS_FAIR_CAPPED, (uint32_t)D->pct * 100);
            update_yield(d, &v, prio, false);
            update_window(d, &v, true, now);
            continue;
        }
        int engaged = decide_default(d, ppm, prio, util_now, foreign, &v, now);
        update_yield(d, &v, prio, known);
        if (known)
            apply_share(d, false);
        update_window(d, &v, engaged && W.dev[d].fair.turns, now);
    }
}

static void *watcher(void *arg)
{
    (void)arg;
    /* Harvests query events, the probe allocates: calls a GLOBAL-mode
     * capture in an application thread forbids to every other thread. */
    cs__capture_relax_thread();
    if (!cs__drv_load_nvml() && cs_drv.nvmlInit_v2 && cs_drv.nvmlInit_v2() == NVML_SUCCESS)
        W.nvml_ok = true;
    else
        cs_info(SUBSYS, "NVML unavailable: policy default treats every limited device as "
                "contended (fail closed)");
    W.board = cs__board_open(cs__config()->board_path[0] ? cs__config()->board_path : NULL);
    W.tenant_id = tenant_id();
    int64_t next = cs__now_ns();
    for (;;) {
        pthread_mutex_lock(&run_mu);
        if (stopping) {
            pthread_mutex_unlock(&run_mu);
            return NULL;
        }
        tick(cs__now_ns());
        CS_LIM_STAT_ADD(watch_ticks, 1);
        pthread_mutex_unlock(&run_mu);
        next += CS_LIM_TICK_NS;
        int64_t now = cs__now_ns();
        if (next < now)
            next = now;
        cs__lim_sleep(next - now);
    }
    return NULL;
}

/* Registered after init.c's handler, so it runs first (atexit is LIFO). */
static void stop_at_exit(void)
{
    pthread_mutex_lock(&run_mu);
    stopping = true;
    pthread_mutex_unlock(&run_mu);
}

void cs__watch_start(void)
{
    static bool exit_registered; /* once per process image */
    pthread_mutex_lock(&watch_mu);
    if (!exit_registered) {
        exit_registered = true;
        atexit(stop_at_exit);
    }
    if (!watch_started) {
        watch_started = true;
        /* The thread takes none of the application's signals. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 256 * 1024);
        pthread_t t;
        int rc = pthread_create(&t, &a, watcher, NULL);
        pthread_attr_destroy(&a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc)
            cs_warn(SUBSYS, "cannot start the watcher thread (%s): policy default stays "
                    "engaged (fail closed)", strerror(rc));
    }
    pthread_mutex_unlock(&watch_mu);
}
