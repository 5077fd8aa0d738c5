/*
 * The watcher: one thread per armed process, started at the first limited
 * launch (never in a constructor, never on the cuInit path). Every tick
 * (100 ms) it
 *   - harvests measurement pairs (so GPU time is published even when the
 *     application stops launching),
 *   - re-lists the tenant's other processes (tenant.c),
 *   - computes the tenant's share of each limited device over the last
 *     second and posts it to the node board,
 *   - decides, for policy `default`, whether pacing is engaged.
 *
 * The decision rule (docs/limiter.md, "Policy and priority"), for a device
 * with a limit:
 *   force     engaged.
 *   disable   never armed (limiter.c).
 *   default   engaged while another tenant of equal or higher priority is
 *             busy on the device, held for CS_WATCH_HOLD_NS after the last
 *             time it was seen busy. "Busy" is
 *               - a board entry of another tenant with priority <= ours
 *                 (lower number = higher priority) posted busy, or
 *               - foreign GPU time seen through NVML that the board does
 *                 not explain by lower-priority tenants:
 *                   foreign = max(device utilisation - our share,
 *                                 sum of smUtil of NVML samples of
 *                                 processes not in our ledger)
 *                             - shares of busy lower-priority tenants
 *                 at least CS_WATCH_FOREIGN_PCT percent.
 *             Without NVML (or before the device's UUID is known) the
 *             decision fails closed: engaged.
 *
 * Identity (which NVML pid is ours) is resolved here, once, lazily: tier 0
 * when NVML lists our own getpid(), else broker / procfs as configured
 * (src/identity). The legacy probe is not run by the limiter.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "identity/identity.h"
#include "limiter/board.h"
#include "limiter/internal.h"

#define SUBSYS "limiter"

#define CS_WATCH_FOREIGN_PCT 10          /* NVML: foreign utilisation that counts */
#define CS_WATCH_BUSY_PPM 20000          /* board: 2 % share makes a tenant busy */
#define CS_WATCH_HOLD_NS 1000000000ll    /* stay engaged 1 s after contention */
#define CS_WATCH_WINDOW 10               /* ticks in the share window (1 s) */

void cs__format_uuid(const unsigned char b[16], char out[41]);

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
    /* Tenant GPU time per tick, for the share over the last second. */
    int64_t t[CS_WATCH_WINDOW + 1];
    uint64_t total[CS_WATCH_WINDOW + 1][CS_MAX_DEVICES];
    int ring_n, ring_head;
} W;

void cs__watch_atfork_child(void)
{
    pthread_mutex_init(&watch_mu, NULL);
    pthread_mutex_init(&run_mu, NULL);
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
    if (!W.nvml_ok || !cs_rt.dev[d].known || !cs_drv.nvmlDeviceGetHandleByUUID)
        return false;
    char s[41];
    cs__format_uuid((const unsigned char *)cs_rt.dev[d].uuid.bytes, s);
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
        nvmlProcessInfo_t infos[256];
        unsigned n = 256;
        if (cs_drv.nvmlDeviceGetComputeRunningProcesses_v3(W.nvml[d], &n, infos) != NVML_SUCCESS)
            continue;
        for (unsigned i = 0; i < n && i < 256; i++)
            if (infos[i].pid == me)
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
    static int attempts;
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (!s)
        return;
    if (__atomic_load_n(&s->identity_tier, __ATOMIC_ACQUIRE) != CS_IDENTITY_UNKNOWN) {
        W.identity_done = true; /* resolved elsewhere in this process */
        return;
    }
    /* NVML lists a process once its context exists; give tier 0 a second
     * before the other tiers run. */
    if (nvml_sees_self(NULL) != 1 && ++attempts < 10)
        return;
    struct cs_identity_config cfg = {
        .broker = cs_rt.cfg.hostpid_broker,
        .procfs_root = cs_rt.cfg.host_procfs[0] ? cs_rt.cfg.host_procfs : NULL,
        .nvml_sees_self = nvml_sees_self,
        .probe = W.nvml_ok ? probe_cb : NULL,
    };
    struct cs_identity_result res;
    int rc = cs__identity_resolve(&cfg, &res);
    W.identity_done = true;
    cs__ledger_set_identity(&cs_rt.ledger, rc ? 0 : (int32_t)res.host_pid, (uint32_t)res.tier,
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

/* Foreign utilisation of device d in percent, or -1 when unknown. */
static int foreign_pct(int d, int our_pct)
{
    if (!nvml_device(d) || !cs_drv.nvmlDeviceGetUtilizationRates)
        return -1;
    nvmlUtilization_t u;
    if (cs_drv.nvmlDeviceGetUtilizationRates(W.nvml[d], &u) != NVML_SUCCESS)
        return -1;
    int foreign = (int)u.gpu - our_pct;
    if (cs_drv.nvmlDeviceGetProcessUtilization) {
        unsigned pids[256];
        int npids = cs__tenant_pids(pids, 256);
        static nvmlProcessUtilizationSample_t smp[256];
        unsigned n = 256;
        nvmlReturn_t r = cs_drv.nvmlDeviceGetProcessUtilization(W.nvml[d], smp, &n,
                                                                W.last_sample_us[d]);
        if (r == NVML_SUCCESS) {
            int sum = 0;
            unsigned long long newest = W.last_sample_us[d];
            /* Latest sample per foreign pid. */
            for (unsigned i = 0; i < n && i < 256; i++) {
                if (smp[i].timeStamp > newest)
                    newest = smp[i].timeStamp;
                if (is_ours(smp[i].pid, pids, npids))
                    continue;
                bool later = false;
                for (unsigned j = 0; j < n && j < 256; j++)
                    if (j != i && smp[j].pid == smp[i].pid && smp[j].timeStamp > smp[i].timeStamp)
                        later = true;
                if (!later)
                    sum += (int)smp[i].smUtil;
            }
            W.last_sample_us[d] = newest;
            if (sum > foreign)
                foreign = sum;
        }
    }
    return foreign < 0 ? 0 : foreign;
}

/* ---- the tick ----------------------------------------------------------- */

static uint64_t tenant_total(int d)
{
    return cs__tenant_others(d) + __atomic_load_n(&cs__lim_devs[d].own_total, __ATOMIC_RELAXED);
}

/* Tenant share of device d over the last `ticks` ticks, in ppm. */
static uint32_t share_over(int d, int ticks)
{
    const int R = CS_WATCH_WINDOW + 1;
    if (ticks > W.ring_n - 1)
        ticks = W.ring_n - 1;
    if (ticks < 1)
        return 0;
    int newest = (W.ring_head - 1 + R) % R;
    int oldest = (W.ring_head - 1 - ticks + 2 * R) % R;
    int64_t dt = W.t[newest] - W.t[oldest];
    if (dt <= 0)
        return 0;
    uint64_t g = W.total[newest][d] - W.total[oldest][d];
    uint64_t ppm = g * 1000000ull / (uint64_t)dt;
    return ppm > 1000000 ? 1000000 : (uint32_t)ppm;
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
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        W.total[i][d] = tenant_total(d);
    W.ring_head = (W.ring_head + 1) % (CS_WATCH_WINDOW + 1);
    if (W.ring_n < CS_WATCH_WINDOW + 1)
        W.ring_n++;
}

static uint64_t tenant_id(void)
{
    struct stat st;
    const struct cs_ledger_header *h = cs_rt.ledger.hdr;
    if (cs_rt.ledger.fd < 0 || fstat(cs_rt.ledger.fd, &st) || !h)
        return 0;
    uint64_t x = (uint64_t)st.st_dev * 0x9e3779b97f4a7c15ull ^ (uint64_t)st.st_ino;
    x ^= h->created_ns + 0x632be59bd9b4e019ull + (x << 6) + (x >> 2);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x > CS_BOARD_CLAIMING ? x : x + 2;
}

static void tick(int64_t now)
{
    const struct cs_ledger_header *h = cs_rt.ledger.hdr;
    uint32_t policy = __atomic_load_n(&h->policy, __ATOMIC_RELAXED);
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

    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_lim_dev *D = &cs__lim_devs[d];
        if (!D->pct)
            continue;
        uint32_t ppm = share_over(d, CS_WATCH_WINDOW);
        bool known = cs_rt.dev[d].known;
        if (known && W.board) {
            struct cs_board_post p = {.tenant = W.tenant_id, .priority = prio,
                                      .policy = policy, .sm_limit = D->pct,
                                      .share_ppm = ppm, .busy = ppm >= CS_WATCH_BUSY_PPM};
            memcpy(p.uuid, cs_rt.dev[d].uuid.bytes, 16);
            cs__board_post(W.board, &p, now);
        }
        if (policy == CS_POLICY_FORCE) {
            __atomic_store_n(&D->engaged, 1, __ATOMIC_RELAXED);
            continue;
        }
        struct cs_board_view v = {0};
        if (known && W.board)
            cs__board_view(W.board, W.tenant_id, (const uint8_t *)cs_rt.dev[d].uuid.bytes, prio,
                           now, &v);
        int foreign = foreign_pct(d, (int)(share_as_nvml_sees(d) / 10000));
        bool contended;
        if (foreign < 0) {
            contended = true; /* fail closed */
        } else {
            foreign -= (int)(v.lower_share_ppm / 10000);
            contended = v.busy_higher_or_equal > 0 || foreign >= CS_WATCH_FOREIGN_PCT;
        }
        if (contended)
            D->contended_until = now + CS_WATCH_HOLD_NS;
        int engaged = D->contended_until > now;
        if (__atomic_exchange_n(&D->engaged, engaged, __ATOMIC_RELAXED) != engaged)
            cs_info(SUBSYS, "device %d: pacing %s (foreign %d%%, board: %d busy at higher or "
                    "equal priority, %d lower)", d, engaged ? "engaged" : "released", foreign,
                    v.busy_higher_or_equal, v.busy_lower);
    }
}

static void *watcher(void *arg)
{
    (void)arg;
    if (!cs__drv_load_nvml() && cs_drv.nvmlInit_v2 && cs_drv.nvmlInit_v2() == NVML_SUCCESS)
        W.nvml_ok = true;
    else
        cs_info(SUBSYS, "NVML unavailable: policy default treats every limited device as "
                "contended (fail closed)");
    W.board = cs__board_open(cs_rt.cfg.board_path[0] ? cs_rt.cfg.board_path : NULL);
    W.tenant_id = tenant_id();
    int64_t next = cs__lim_now();
    for (;;) {
        pthread_mutex_lock(&run_mu);
        if (stopping) {
            pthread_mutex_unlock(&run_mu);
            return NULL;
        }
        tick(cs__lim_now());
        pthread_mutex_unlock(&run_mu);
        next += CS_LIM_TICK_NS;
        int64_t now = cs__lim_now();
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
