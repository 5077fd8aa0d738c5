/*
 * Compute limiter: arming, pacing and measurement on the launch path
 * (docs/limiter.md).
 *
 * Measurement: every launch of a limited tenant is bracketed by two CUDA
 * events recorded on the stream it goes to (a start marker after pacing,
 * an end marker after the launch). When the end marker has completed, the
 * elapsed time between the two is the GPU time that launch took; it is
 * added to our ledger slot's gpu_ns[dev] (so every process of the tenant
 * sees it) and charged to the control law (law.h). Pairs wait in a FIFO
 * per stream, because a stream completes in order; the launch thread and
 * the watcher harvest them.
 *
 * Pacing: before a launch, the law says whether the tenant is ahead of its
 * share; if so the thread sleeps (clock_nanosleep, in slices of at most
 * 50 ms) and asks again. Only devices whose policy decision is "engaged"
 * pace. While no device of the process is engaged (policy default, no
 * contention) launches take the free path: no lock, no driver call, no
 * marker, except one in CS_LIM_FREE_SAMPLE per thread, which is measured
 * and charged for the launches before it, so the decision still sees the
 * tenant's real share.
 *
 * Fast path: cs__lim_armed (limiter.h) starts at 1; the first launch arms
 * the limiter from the ledger header (the creator's limits and policy
 * rule the tenant) and clears the flag when no device has a limit.
 */
#define _GNU_SOURCE
#include "hami/hami.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"
#include "limiter/board.h"
#include "limiter/fair.h"
#include "limiter/internal.h"

#define SUBSYS "limiter"

int cs__lim_armed = 1;
struct cs_lim_dev cs__lim_devs[CS_MAX_DEVICES];
struct cushare_limiter_stats cs__lim_stats = {.version = 3};

const struct cs_lim_path_info cs__lim_paths[CS_LIM_NPATHS] = {
#define CS_LIM_X(sym, variant_, kind_) [CS_LIM_PATH_##sym] = {#sym, variant_, kind_},
#include "limiter/launch_paths.inc"
#undef CS_LIM_X
};

static pthread_mutex_t arm_mu = PTHREAD_MUTEX_INITIALIZER;
static int arm_decided;          /* atomic */
static struct cs_lim_ctx ctxs[CS_LIM_CTXS];
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread char per_thread_key; /* its address names this thread's default stream */

void cs__lim_sleep(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {.tv_sec = ns / 1000000000ll, .tv_nsec = ns % 1000000000ll};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
    }
}

/* Sleeps until CLOCK_MONOTONIC reaches `deadline`. Absolute, so the time
 * since the wait was computed (the device mutex, a harvest) does not push
 * the wake-up later; and with the thread's timer slack at 1 ns, since a
 * tenant whose window opens wakes at its edge, and up to 50 us of default
 * slack per edge is GPU time nobody uses. The slack is the application
 * thread's own setting, so it is put back. */
static void sleep_until(int64_t deadline)
{
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, 1ul, 0, 0, 0);
    struct timespec ts = {.tv_sec = deadline / 1000000000ll, .tv_nsec = deadline % 1000000000ll};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

struct cs_ledger_slot *cs__lim_my_slot(void)
{
    return cs__ledger_my_slot(cs__ledger());
}

CS_EXPORT void cushare_limiter_stats(struct cushare_limiter_stats *out)
{
    if (!out)
        return;
    struct cushare_limiter_stats s;
    uint64_t *src = (uint64_t *)&cs__lim_stats.paced_launches;
    uint64_t *dst = (uint64_t *)&s.paced_launches;
    size_t n = (sizeof s - offsetof(struct cushare_limiter_stats, paced_launches)) / 8;
    for (size_t i = 0; i < n; i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    s.version = 6;
    s.parks = cs__gate_suspend_holds(); /* the gate (src/hook) counts them */
    s.armed = (uint32_t)__atomic_load_n(&cs__lim_armed, __ATOMIC_RELAXED);
    uint64_t mask = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (__atomic_load_n(&cs__lim_devs[d].engaged, __ATOMIC_RELAXED))
            mask |= 1ull << d;
    s.engaged_mask = mask;
    *out = s;
}

/* Bit d set while device d's pacing is engaged (or may be: a bit is
 * cleared only when the flag it copies is 0 after the clearing), bit
 * CS_LIM_STAMP_SHIFT + d while device d's launches are stamped (a busy
 * lower-priority tenant yields to them), so a launch finding 0 needs no
 * device lookup, no clock and no mutex. Written by the arming launch and
 * the watcher; read by every launch. */
static uint64_t engaged_bits;
/* When a call of this process that waited for the GPU last returned
 * after blocking (cs__limiter_synced); 0 never. Any thread writes it,
 * launch paths read it (relaxed: one timestamp, a late view only counts
 * one gap by estimate). */
static int64_t drained_ns;
/* Sum of the calls that blocked waiting for the GPU (cs__limiter_synced):
 * any thread adds, the watcher reads. */
static uint64_t blocked_ns;

#define CS_LIM_STAMP_SHIFT 32
#define CS_LIM_ENGAGED_MASK ((1ull << CS_LIM_STAMP_SHIFT) - 1)
_Static_assert(CS_MAX_DEVICES <= CS_LIM_STAMP_SHIFT, "engaged and stamp bits overlap");

void cs__lim_set_stamp(int d, uint64_t *p)
{
    uint64_t bit = 1ull << (CS_LIM_STAMP_SHIFT + d);
    /* The pointer before the bit: a launch that sees the bit finds it. A
     * launch that loaded the old pointer may still store there once: the
     * board keeps every address it handed out mapped. */
    __atomic_store_n(&cs__lim_devs[d].stamp, p, __ATOMIC_RELEASE);
    if (p)
        __atomic_or_fetch(&engaged_bits, bit, __ATOMIC_SEQ_CST);
    else
        __atomic_and_fetch(&engaged_bits, ~bit, __ATOMIC_SEQ_CST);
}

/* Stamps this launch's time for the devices whose bits are in `mask` (a
 * process rarely uses more than one device, and the free path does not
 * know which one a launch goes to: every stamped device is stamped). */
static void stamp_launch(uint64_t mask)
{
    uint64_t now = (uint64_t)cs__now_ns();
    for (; mask; mask &= mask - 1) {
        uint64_t *p = __atomic_load_n(&cs__lim_devs[__builtin_ctzll(mask)].stamp,
                                      __ATOMIC_ACQUIRE);
        if (p)
            __atomic_store_n(p, now, __ATOMIC_RELAXED);
    }
}

static void quiet_close(const struct cs_lim_quiet *q, int n)
{
    for (int i = 0; i < n; i++)
        if (q[i].fd >= 0)
            close(q[i].fd);
}

void cs__lim_set_quiet(int d, const struct cs_lim_quiet *q, int n, int64_t quiet_ns)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    struct cs_lim_quiet old[CS_LIM_QUIET];
    if (n > CS_LIM_QUIET) { /* the device keeps CS_LIM_QUIET; it was given all */
        quiet_close(q + CS_LIM_QUIET, n - CS_LIM_QUIET);
        n = CS_LIM_QUIET;
    }
    pthread_mutex_lock(&D->mu);
    int nold = D->nquiet;
    memcpy(old, D->quiet, sizeof old);
    memcpy(D->quiet, q, (size_t)n * sizeof *q);
    D->nquiet = n;
    D->quiet_ns = quiet_ns;
    pthread_mutex_unlock(&D->mu);
    quiet_close(old, nold);
}

/* Yield on activity (device mutex held): how long to wait until every
 * busy higher-priority peer has been quiet for the quiet period. */
static int64_t quiet_wait(struct cs_lim_dev *D, int64_t now)
{
    if (!D->nquiet || D->quiet_ns <= 0)
        return 0;
    int64_t last[CS_LIM_QUIET];
    for (int i = 0; i < D->nquiet; i++)
        last[i] = cs__board_read_stamp(D->quiet[i].fd, D->quiet[i].own, D->quiet[i].index, now);
    return cs__fair_quiet_wait(now, last, D->nquiet, D->quiet_ns);
}

int cs__lim_set_engaged(int d, int on)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    int was = __atomic_exchange_n(&D->engaged, on, __ATOMIC_SEQ_CST);
    uint64_t bit = 1ull << d;
    if (on) {
        __atomic_or_fetch(&engaged_bits, bit, __ATOMIC_SEQ_CST);
    } else {
        __atomic_and_fetch(&engaged_bits, ~bit, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&D->engaged, __ATOMIC_SEQ_CST)) /* engaged meanwhile */
            __atomic_or_fetch(&engaged_bits, bit, __ATOMIC_SEQ_CST);
    }
    return was;
}

/* ---- arming ------------------------------------------------------------ */

static void reset_all(void);

void cs__lim_atfork_child(void)
{
    /* Only this thread exists now; CUDA objects of the parent are not ours
     * (the child re-initialises CUDA). Forget them without touching them.
     * The counters count this process's own work. */
    reset_all();
    cs__watch_atfork_child();
    cs__capture_atfork_child();
    cs__mutex_reset(&arm_mu);
    memset(&cs__lim_stats, 0, sizeof cs__lim_stats);
    cs__lim_stats.version = 6;
    __atomic_store_n(&arm_decided, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&cs__lim_armed, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&drained_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&blocked_ns, 0, __ATOMIC_RELAXED);
}
CS_FORK_CHILD_RESET(cs__lim_atfork_child, CS_FORK_LIMITER)

static void reset_all(void)
{
    __atomic_store_n(&engaged_bits, 0, __ATOMIC_SEQ_CST); /* set again by arming */
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_lim_dev *D = &cs__lim_devs[d];
        for (int i = 0; i < D->nstreams; i++)
            free(D->streams[i]);
        quiet_close(D->quiet, D->nquiet);
        memset(D, 0, sizeof *D);
        cs__mutex_reset(&D->mu);
    }
    for (int i = 0; i < CS_LIM_CTXS; i++) {
        free(ctxs[i].pool);
        memset(&ctxs[i], 0, sizeof ctxs[i]);
    }
    cs__mutex_reset(&ctx_mu);
    cs__tenant_reset();
}

static void arm(void)
{
    static bool first; /* under arm_mu; once per process image: handlers survive fork */
    pthread_mutex_lock(&arm_mu);
    if (__atomic_load_n(&arm_decided, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&arm_mu);
        return;
    }
    if (!first) {
        first = true;
        reset_all();
        cs__suspend_install_signals();
    }
    const struct cs_ledger_header *h = cs__ledger()->hdr;
    bool any = false;
    uint32_t policy = h ? cs__ledger_policy(cs__ledger()) : CS_POLICY_DISABLE;
    /* A device the driver does not show takes no launches: arming it would
     * only give the watcher a slot to decide for. Before the devices are
     * counted every slot is armed (fail closed). */
    int ndev = cs__device_count();
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        uint32_t pct = h && (ndev <= 0 || d < ndev) ? cs__ledger_sm_limit(cs__ledger(), d) : 0;
        struct cs_lim_dev *D = &cs__lim_devs[d];
        pthread_mutex_lock(&D->mu);
        D->pct = (pct >= 1 && pct <= 99 && policy != CS_POLICY_DISABLE) ? pct : 0;
        /* force: always; default: engaged until the watcher has looked
         * (fail closed). */
        cs__lim_set_engaged(d, D->pct ? 1 : 0);
        any |= D->pct != 0;
        pthread_mutex_unlock(&D->mu);
    }
    if (any) {
        cs_info(SUBSYS, "armed: policy %s, priority %d",
                policy == CS_POLICY_FORCE ? "force" : "default", (int)h->priority);
        cs__watch_start();
    } else {
        __atomic_store_n(&cs__lim_armed, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&arm_decided, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&arm_mu);
}

/* ---- contexts and their events ------------------------------------------ */

static int device_of_ctx(CUcontext ctx)
{
    CUcontext cur = NULL;
    if (!cs_drv.cuCtxGetCurrent || cs_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
        return -1;
    if (cur == ctx)
        return cs__current_device();
    if (!cs_drv.cuCtxPushCurrent_v2 || cs_drv.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
        return -1;
    int d = cs__current_device();
    CUcontext popped;
    cs_drv.cuCtxPopCurrent_v2(&popped);
    return d;
}

static struct cs_lim_ctx *ctx_get(CUcontext ctx)
{
    for (int i = 0; i < CS_LIM_CTXS; i++)
        if (__atomic_load_n(&ctxs[i].ctx, __ATOMIC_ACQUIRE) == ctx)
            return &ctxs[i];
    int d = device_of_ctx(ctx);
    if (d < 0)
        return NULL;
    cs__shape_device_seen(d);
    struct cs_lim_ctx *cx = NULL;
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < CS_LIM_CTXS && !cx; i++)
        if (ctxs[i].ctx == ctx)
            cx = &ctxs[i];
    for (int i = 0; i < CS_LIM_CTXS && !cx; i++) {
        if (!ctxs[i].ctx) {
            cx = &ctxs[i];
            cx->dev = d;
            __atomic_store_n(&cx->ctx, ctx, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    if (!cx)
        cs_warn_capped(1, SUBSYS, "more than %d contexts: launches of the others are not "
                       "measured", CS_LIM_CTXS);
    return cx;
}

/* A free event of cx's context (device mutex held), or NULL. */
static CUevent pool_get(struct cs_lim_ctx *cx)
{
    if (cx->npool > 0)
        return cx->pool[--cx->npool];
    if (!cs_drv.cuEventCreate)
        return NULL;
    CUcontext cur = NULL;
    bool pushed = false;
    if (cs_drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != cx->ctx) {
        if (cs_drv.cuCtxPushCurrent_v2(cx->ctx) != CUDA_SUCCESS)
            return NULL;
        pushed = true;
    }
    CUevent ev = NULL;
    if (cs_drv.cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        ev = NULL;
    if (pushed) {
        CUcontext popped;
        cs_drv.cuCtxPopCurrent_v2(&popped);
    }
    return ev;
}

static void pool_put(struct cs_lim_ctx *cx, CUevent ev)
{
    if (!ev)
        return;
    if (cx->npool == cx->cap) {
        int cap = cx->cap ? cx->cap * 2 : 64;
        CUevent *p = realloc(cx->pool, (size_t)cap * sizeof *p);
        if (!p) {
            if (cs_drv.cuEventDestroy_v2)
                cs_drv.cuEventDestroy_v2(ev);
            return;
        }
        cx->pool = p;
        cx->cap = cap;
    }
    cx->pool[cx->npool++] = ev;
}

/* The open group is gone from the stream (its start marker handed on or
 * given back by the caller). Device mutex held. */
static void group_forget(struct cs_lim_dev *D, struct cs_lim_stream *st)
{
    st->group.start = NULL;
    D->groups--;
}

/* The context's events went with it (destroyed or reset): forget them all
 * without calling the driver on them. */
static void ctx_lost(struct cs_lim_dev *D, struct cs_lim_ctx *cx)
{
    cx->npool = 0;
    for (int i = 0; i < D->nstreams; i++) {
        struct cs_lim_stream *st = D->streams[i];
        if (st->cx != cx)
            continue;
        for (; st->n; st->n--, st->head = (st->head + 1) % CS_LIM_FIFO) {
            cs__law_pending(&D->law, -st->fifo[st->head].est);
            D->inflight--;
        }
        if (st->group.start) {
            cs__law_pending(&D->law, -st->group.est);
            group_forget(D, st);
        }
    }
    cs_info(SUBSYS, "a context of device %d went away; its markers are dropped",
            (int)(D - cs__lim_devs));
}

void cs__limiter_ctx_gone(CUcontext ctx)
{
    if (!ctx || !__atomic_load_n(&arm_decided, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < CS_LIM_CTXS; i++) {
        struct cs_lim_ctx *cx = &ctxs[i];
        if (__atomic_load_n(&cx->ctx, __ATOMIC_ACQUIRE) != ctx)
            continue;
        struct cs_lim_dev *D = &cs__lim_devs[cx->dev];
        pthread_mutex_lock(&D->mu);
        ctx_lost(D, cx);
        __atomic_store_n(&cx->ctx, NULL, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&D->mu);
    }
    pthread_mutex_unlock(&ctx_mu);
}

static CUresult record(CUevent ev, CUstream rec)
{
    CS_LIM_STAT_ADD(markers, 1);
    return cs_drv.cuEventRecord(ev, rec);
}

/* Errors that mean the context (and every event of it) is gone; anything
 * else (a stream the application just destroyed) spoils one marker. */
static bool ctx_gone(CUresult r)
{
    return r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT ||
           r == CUDA_ERROR_DEINITIALIZED || r == CUDA_ERROR_ILLEGAL_ADDRESS ||
           r == CUDA_ERROR_LAUNCH_FAILED;
}

/* ---- streams ------------------------------------------------------------ */

static struct cs_lim_stream *stream_get(struct cs_lim_dev *D, struct cs_lim_ctx *cx,
                                        uintptr_t key, CUstream rec, int64_t now)
{
    for (int i = 0; i < D->nstreams; i++) {
        struct cs_lim_stream *st = D->streams[i];
        if (st->key == key && st->cx == cx) {
            st->used_ns = now;
            return st;
        }
    }
    struct cs_lim_stream *st = NULL;
    if (D->nstreams < CS_LIM_STREAMS) {
        st = calloc(1, sizeof *st);
        if (!st)
            return NULL;
        D->streams[D->nstreams++] = st;
    } else {
        /* Reuse the least recently used idle record. */
        for (int i = 0; i < D->nstreams; i++) {
            struct cs_lim_stream *c = D->streams[i];
            if (!c->n && !c->tickets && !c->group.start && (!st || c->used_ns < st->used_ns))
                st = c;
        }
        if (!st) {
            cs_warn_capped(1, SUBSYS, "more than %d busy streams on one device: launches "
                           "to the others are not measured", CS_LIM_STREAMS);
            return NULL;
        }
        st->head = st->n = 0;
    }
    st->key = key;
    st->rec = rec;
    st->cx = cx;
    st->used_ns = now;
    return st;
}

/* ---- signatures: charge the contention-free time (sig.h) ----------------- */

/* The entry of signature key (device mutex held); a hash collision evicts
 * the older one. */
static struct cs_lim_sig *sig_slot(struct cs_lim_dev *D, uint64_t key)
{
    return &D->sigs[(key * 0x9e3779b97f4a7c15ull) >> 56 & (CS_LIM_SIGS - 1)];
}

/* GPU time ns of a launch that can hold occ ppm of the GPU, as a charge
 * (shape.c: the whole GPU on a device that time-slices). */
static int64_t occ_scale(int64_t ns, uint32_t occ)
{
    return occ >= CS_LIM_OCC_FULL ? ns : (int64_t)((double)ns * occ / CS_LIM_OCC_FULL);
}

/* Signature key's entry, or NULL when it is unknown (0, never measured,
 * or evicted by a colliding one). */
static const struct cs_lim_sig *sig_known(struct cs_lim_dev *D, uint64_t key)
{
    const struct cs_lim_sig *e = key ? sig_slot(D, key) : NULL;
    return e && e->key == key ? e : NULL;
}

/* Work of a launch measured or charged `charged` (already scaled by its
 * occupancy occ): at most its signature's minimum when that is known. */
static int64_t sig_work(struct cs_lim_dev *D, uint64_t key, int64_t charged, uint32_t occ)
{
    const struct cs_lim_sig *e = sig_known(D, key);
    int64_t mn = e ? occ_scale(cs__sig_min(e), occ) : 0;
    return mn > 0 && mn < charged ? mn : charged;
}

/* What a launch of signature key measured `ns` is charged (sig.h), scaled
 * by its occupancy occ. Also stores in *work what the launch did: its
 * measurement, at most the signature's minimum (without slack). Throughput,
 * unlike time, is not inflated by a co-tenant's slices or a cold cache
 * after a switch. */
static int64_t sig_charge(struct cs_lim_dev *D, uint64_t key, int64_t ns, int64_t *work,
                          uint32_t occ)
{
    *work = sig_work(D, key, occ_scale(ns, occ), occ);
    if (!key)
        return occ_scale(ns, occ);
    struct cs_lim_sig *e = sig_slot(D, key);
    if (e->key != key) {
        memset(e, 0, sizeof *e);
        e->key = key;
    }
    int64_t charged = occ_scale(cs__sig_measure(e, ns), occ);
    cs__sig_note_charge(e, charged);
    return charged;
}

/* How long a launch of signature key keeps the GPU busy when nothing else
 * runs, as far as we know: its recent minimum, else `est`. What decides
 * whether our queue drains before our window ends: judged by the estimate
 * (charges run up to the slack over the minimum), the GPU ran dry early at
 * the end of every window; a queue that drains a few us late costs nobody
 * work, the next owner's launches queue behind it. */
static int64_t sig_drain(struct cs_lim_dev *D, uint64_t key, int64_t est)
{
    const struct cs_lim_sig *e = sig_known(D, key);
    int64_t mn = e ? cs__sig_min(e) : 0;
    return mn > 0 ? mn : est;
}

/* Expected charge of a launch of signature key, or 0 when unknown. */
static int64_t sig_estimate(struct cs_lim_dev *D, uint64_t key)
{
    const struct cs_lim_sig *e = sig_known(D, key);
    return e ? cs__sig_estimate(e) : 0;
}

/* Harvests one stream; adds the estimates of what it measured to *est_done. */
static uint64_t harvest_stream(struct cs_lim_dev *D, struct cs_lim_stream *st, int64_t *est_done,
                               uint64_t *work)
{
    uint64_t got = 0;
    while (st->n) {
        struct cs_lim_pair *p = &st->fifo[st->head];
        CUresult q = cs_drv.cuEventQuery(p->e);
        if (q == CUDA_ERROR_NOT_READY)
            break;
        if (q != CUDA_SUCCESS) {
            if (ctx_gone(q)) {
                ctx_lost(D, st->cx);
                return got;
            }
            /* A marker that can never complete: drop it, keep the rest. */
            *est_done += p->est;
            D->inflight--;
            st->head = (st->head + 1) % CS_LIM_FIFO;
            st->n--;
            continue;
        }
        float ms = 0;
        CUresult r = cs_drv.cuEventElapsedTime_v2 ? cs_drv.cuEventElapsedTime_v2(&ms, p->s, p->e)
                                                  : cs_drv.cuEventElapsedTime(&ms, p->s, p->e);
        if (r == CUDA_SUCCESS && ms > 0) {
            /* The launches of a group are of one signature: each took
             * its share of the span. */
            int64_t w, n = p->launches ? p->launches : 1;
            int64_t ns = sig_charge(D, p->sig, (int64_t)((double)ms * 1e6) / n, &w, p->occ_ppm);
            got += (uint64_t)(ns * n);
            *work += (uint64_t)(w * n);
            int64_t *est = &D->est[p->kind];
            *est = *est ? *est + (ns - *est) / 4 : ns;
        }
        D->measured++;
        CS_LIM_STAT_ADD(measured, 1);
        *est_done += p->est;
        D->inflight--;
        pool_put(st->cx, p->s);
        pool_put(st->cx, p->e);
        st->head = (st->head + 1) % CS_LIM_FIFO;
        st->n--;
    }
    return got;
}

/* Our window in the device's coordinated schedule (watch.c), if any. */
static struct cs_window window_of(const struct cs_lim_dev *D)
{
    return cs__lim_window_unpack(__atomic_load_n(&D->window, __ATOMIC_RELAXED));
}

/* When our window ends, if `now` is inside it past its lead (the part
 * that overlaps the previous owner's end: watch.c, window_for); else 0. */
static int64_t own_window_end(const struct cs_lim_dev *D, int64_t now)
{
    struct cs_window w = window_of(D);
    if (!w.len_ns)
        return 0;
    int64_t lead = (int64_t)cs__lim_window_lead_us((uint64_t)w.len_ns / 2000) * 1000;
    int64_t phase = cs__law_window_phase(&w, now);
    return phase >= lead && phase < w.len_ns ? now + w.len_ns - phase : 0;
}

static bool in_own_window(const struct cs_lim_dev *D, int64_t now)
{
    return own_window_end(D, now) != 0;
}

/* A co-tenant's time slices inside a long span would be charged to us:
 * groups only alone on the device or inside our own window, past the
 * lead the previous owner may still be draining in — or on a concurrent
 * device, where nobody's slices interrupt ours. */
static bool groups_allowed(const struct cs_lim_dev *D, int64_t now)
{
    return __atomic_load_n(&D->alone, __ATOMIC_RELAXED) || in_own_window(D, now) ||
           __atomic_load_n(&D->concurrent, __ATOMIC_RELAXED);
}

/* Charges `ns` of our work by estimate, `pending` of it pending until now
 * (device mutex held): in our slot, the tenant's clock and our work. */
static void charge_by_estimate(struct cs_lim_dev *D, int dev, uint64_t sig, uint32_t occ,
                               uint32_t launches, int64_t ns, int64_t pending, int64_t now)
{
    if (ns <= 0) {
        cs__law_pending(&D->law, -pending);
        return;
    }
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (s)
        __atomic_fetch_add(&s->gpu_ns[dev], (uint64_t)ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&D->own_total, (uint64_t)ns, __ATOMIC_RELAXED);
    int64_t n = launches ? launches : 1;
    __atomic_fetch_add(&D->own_work, (uint64_t)(sig_work(D, sig, ns / n, occ) * n), __ATOMIC_RELAXED);
    if (D->law_running)
        cs__law_charge(&D->law, (uint64_t)ns, pending, now);
    else
        cs__law_pending(&D->law, -pending);
}

/* The open group's start marker has not completed: all of it is queued. */
static bool group_queued(const struct cs_lim_stream *st)
{
    return cs_drv.cuEventQuery(st->group.start) == CUDA_ERROR_NOT_READY;
}

/* The GPU caught up with the open group, so its end may be followed by
 * idle time a late end marker would measure: its launches are charged by
 * estimate instead (device mutex held). */
static void group_drop(struct cs_lim_dev *D, struct cs_lim_stream *st, int64_t now)
{
    struct cs_lim_group *g = &st->group;
    CS_LIM_STAT_ADD(groups_estimated, 1);
    charge_by_estimate(D, st->cx->dev, g->sig, g->occ_ppm, g->n, g->est, g->est, now);
    pool_put(st->cx, g->start);
    group_forget(D, st);
}

/* Records the end marker of the open group now, right behind its last
 * launch, and queues the pair for harvest (device mutex held). */
static void group_close(struct cs_lim_dev *D, struct cs_lim_stream *st, int64_t now)
{
    struct cs_lim_group *g = &st->group;
    struct cs_lim_ctx *cx = st->cx;
    CUevent e = st->n < CS_LIM_FIFO ? pool_get(cx) : NULL;
    CUresult r = e ? record(e, st->rec) : CUDA_ERROR_NOT_READY;
    if (r != CUDA_SUCCESS && ctx_gone(r)) {
        ctx_lost(D, cx);
        return;
    }
    if (r != CUDA_SUCCESS) {
        pool_put(cx, e);
        group_drop(D, st, now);
        return;
    }
    struct cs_lim_pair *p = &st->fifo[(st->head + st->n) % CS_LIM_FIFO];
    *p = (struct cs_lim_pair){.s = g->start, .e = e, .est = g->est, .sig = g->sig,
                              .kind = g->kind, .launches = g->n, .occ_ppm = g->occ_ppm};
    st->n++;
    D->inflight++;
    group_forget(D, st);
}

void cs__lim_harvest_locked(int d, int64_t now)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    uint64_t own = 0, work = 0;
    int64_t est_done = 0;
    if (D->inflight || D->groups) {
        /* Event queries: never in a mode that would invalidate a capture. */
        struct cs_capture_guard g;
        cs__capture_unsafe_begin(&g);
        for (int i = 0; i < D->nstreams; i++) {
            struct cs_lim_stream *st = D->streams[i];
            if (st->n)
                own += harvest_stream(D, st, &est_done, &work);
            if (st->group.start && !st->tickets && !group_queued(st))
                group_drop(D, st, now);
        }
        cs__capture_unsafe_end(&g);
    }
    if (own) {
        struct cs_ledger_slot *s = cs__lim_my_slot();
        if (s)
            __atomic_fetch_add(&s->gpu_ns[d], own, __ATOMIC_RELAXED);
        __atomic_fetch_add(&D->own_total, own, __ATOMIC_RELAXED);
        __atomic_fetch_add(&D->own_work, work, __ATOMIC_RELAXED);
    }
    if (D->law_running)
        cs__law_charge(&D->law, own, est_done, now);
    else
        cs__law_pending(&D->law, -est_done);
}

struct cs_lim_queue_view cs__lim_queue_view(int d, int64_t now)
{
    struct cs_lim_dev *D = &cs__lim_devs[d];
    struct cs_lim_queue_view v = {0};
    pthread_mutex_lock(&D->mu);
    if (D->queue_end_ns > now)
        v.queue_ahead_ns = D->queue_end_ns - now;
    for (int i = 0; i < CS_LIM_SIGS; i++) {
        const struct cs_lim_sig *e = &D->sigs[i];
        if (!e->key)
            continue;
        if (cs__sig_estimate(e) > v.sig_est_max_ns)
            v.sig_est_max_ns = cs__sig_estimate(e);
        if (cs__sig_min(e) > v.sig_min_max_ns)
            v.sig_min_max_ns = cs__sig_min(e);
    }
    pthread_mutex_unlock(&D->mu);
    return v;
}

/* ---- the launch path ---------------------------------------------------- */

static CUcontext ctx_of(CUstream s)
{
    CUcontext ctx = NULL;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        if (cs_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
            return NULL;
    } else if (!cs_drv.cuStreamGetCtx || cs_drv.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS) {
        return NULL;
    }
    return ctx;
}

/* Starts the law when pacing is engaged, stops it when not, and follows
 * the share the watcher asks for (device mutex held). */
static bool law_follow(struct cs_lim_dev *D, int dev, int64_t now)
{
    bool engaged = __atomic_load_n(&D->engaged, __ATOMIC_RELAXED);
    if (engaged && !D->law_running) {
        cs__law_start(&D->law, cs__lim_clock(dev), D->pct, now);
        /* Work done while we were not held is not a debt: the first
         * harvests after a (re)start measure it, and charged at the
         * share it would hold the tenant for its whole length. */
        cs__law_forgive(&D->law, now);
        D->law_running = 1;
    } else if (!engaged) {
        D->law_running = 0;
    }
    if (D->law_running) {
        /* A short queue beside a higher priority (fair.h), else the burst. */
        int64_t ahead = __atomic_load_n(&D->ahead_ns, __ATOMIC_RELAXED);
        if (!ahead)
            ahead = cs__config()->sm_burst_us ? (int64_t)cs__config()->sm_burst_us * 1000
                                              : CS_LAW_AHEAD_NS;
        if (ahead != D->law.ahead_ns)
            cs__law_set_ahead(&D->law, ahead);
    }
    uint32_t want = __atomic_load_n(&D->share_pm, __ATOMIC_RELAXED);
    if (D->law_running && want && want != D->law.share_pm)
        cs__law_set_share(&D->law, want);
    return engaged;
}


/* A law's hold inside our own window: from when our queue runs dry
 * (estimate) to the window's end, the GPU time nobody may use. */
struct cs_lim_hold {
    int64_t idle_from, window_end;   /* window_end 0: no such hold */
    bool quiet;                      /* the wait is a yield on activity */
};

/* 0 when the law and our window let a launch go now (device mutex held),
 * else how long to sleep, and in *hold what a law's hold inside our own
 * window may leave idle. Held out of the GPU for most of a period, the
 * tenant may make up that much idle time inside its window. */
static int64_t pace_wait(struct cs_lim_dev *D, int64_t now, struct cs_lim_hold *hold)
{
    struct cs_window w = window_of(D);
    /* A short run-ahead (a rival waits on our queue, fair.h) comes with as
     * little credit: what idle time earns would otherwise queue at once.
     * Not inside windows: every busy tenant takes turns then, nobody's
     * work waits behind ours in our window, and with that little credit
     * the law would stop us in it after a millisecond and idle the GPU. */
    int64_t guard = __atomic_load_n(&D->ahead_ns, __ATOMIC_RELAXED);
    cs__law_set_credit(&D->law, w.len_ns ? w.period_ns + D->law.ahead_ns : guard);
    int64_t wait = cs__law_wait(&D->law, now);
    bool quiet = false;
    if (!wait)
        quiet = (wait = quiet_wait(D, now)) != 0;
    int64_t queue_end = D->queue_end_ns > now ? D->queue_end_ns : now;
    *hold = (struct cs_lim_hold){.idle_from = queue_end,
                                 .window_end = wait ? own_window_end(D, now) : 0,
                                 .quiet = quiet};
    if (!wait && w.len_ns) {
        wait = cs__law_window_wait(&w, queue_end - now, now);
        if (wait)
            CS_LIM_STAT_ADD(window_waits, 1);
    }
    return wait;
}

/* Sleeps one pacing slice outside the device mutex, until `until` at the
 * latest. */
static void pace_sleep(struct cs_lim_dev *D, int64_t until, const struct cs_lim_hold *hold)
{
    int64_t t0 = cs__now_ns();
    if (until - t0 > CS_LIM_SLEEP_MAX_NS)
        until = t0 + CS_LIM_SLEEP_MAX_NS;
    CS_LIM_STAT_ADD(sleeps, 1);
    sleep_until(until);
    int64_t t1 = cs__now_ns();
    uint64_t slept = (uint64_t)(t1 - t0);
    CS_LIM_STAT_ADD(sleep_ns, slept);
    __atomic_fetch_add(&D->sleep_ns, slept, __ATOMIC_RELAXED);
    int64_t idle = (t1 < hold->window_end ? t1 : hold->window_end) - hold->idle_from;
    if (hold->window_end && idle > 0) {
        __atomic_fetch_add(&D->law_in_window_ns, (uint64_t)idle, __ATOMIC_RELAXED);
        CS_LIM_STAT_ADD(law_window_sleep_ns, (uint64_t)idle);
    }
    /* Published for the node view (throttled %), not read back here. */
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (s)
        __atomic_fetch_add(&s->throttled_ns, slept, __ATOMIC_RELAXED);
}

/* How long the next launch must wait now (device mutex held), and the
 * stream record it goes to. */
static int64_t turn_wait(struct cs_lim_dev *D, struct cs_lim_ctx *cx, uintptr_t key,
                         CUstream rec, bool engaged, int64_t now, struct cs_lim_hold *hold,
                         struct cs_lim_stream **st)
{
    *hold = (struct cs_lim_hold){0};
    int64_t wait = engaged ? pace_wait(D, now, hold) : 0;
    *st = stream_get(D, cx, key, rec, now);
    /* Until a first measurement gives an estimate, keep at most two
     * launches in flight; a full FIFO waits for the GPU too. */
    if (!wait && ((D->measured == 0 && D->inflight >= 2) || (*st && (*st)->n >= CS_LIM_FIFO)))
        wait = 200000;
    return wait;
}

void cs__limiter_synced(int64_t t0, int64_t t1)
{
    if (t1 - t0 >= CS_LIM_SYNC_BLOCKED_NS && __atomic_load_n(&cs__lim_armed, __ATOMIC_RELAXED)) {
        __atomic_store_n(&drained_ns, t1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&blocked_ns, (uint64_t)(t1 - t0), __ATOMIC_RELAXED);
    }
}

uint64_t cs__lim_blocked_ns(void)
{
    return __atomic_load_n(&blocked_ns, __ATOMIC_RELAXED);
}

/* Where our queue ran dry before a launch at `now` of weight one (device
 * mutex held): by estimate, unless a blocking sync since our last launch
 * says when. The estimate is contention-free time: beside a tenant that
 * time-slices with us our work drains later than it says, and a tenant
 * that syncs every few launches would look idle for the difference. */
static int64_t dry_from(const struct cs_lim_dev *D, uint32_t weight)
{
    int64_t drained = __atomic_load_n(&drained_ns, __ATOMIC_RELAXED);
    /* A free-path sample stands for launches the estimate covers and the
     * syncs between them do not: only one gap of them would be seen. */
    if (weight == 1 && D->last_issue_ns && drained > D->last_issue_ns)
        return drained;
    return D->queue_end_ns;
}

/* A launch that was not held found our queue run dry at `now`: the GPU
 * had none of our work for that long, which the watcher uses to tell a
 * tenant that fills the GPU from one that leaves it idle between launches
 * (device mutex held). */
static void note_dry(struct cs_lim_dev *D, bool held, uint32_t weight, int64_t now)
{
    int64_t from = dry_from(D, weight);
    if (held || !from || now <= from)
        return;
    __atomic_fetch_add(&D->dry_ns, (uint64_t)(now - from), __ATOMIC_RELAXED);
    if (now - from >= CS_LIM_IDLE_GAP_NS)
        __atomic_fetch_add(&D->idle_gaps, 1, __ATOMIC_RELAXED);
}

/* Waits until the law lets the next launch of device `dev` go; returns
 * with the device mutex held, the stream record found (or NULL) and
 * whether pacing is engaged. Completed pairs are harvested here only when
 * the launch would wait: harvesting moves work from the law's estimate to
 * its measured time, which changes the verdict only by the estimate's
 * error, so a launch that may go is measured after it is queued
 * (cs__limiter_measure), while the GPU runs it. After a synchronisation
 * every pair is complete, and harvesting them all first kept the GPU idle
 * for that long. */
static struct cs_lim_stream *wait_turn(struct cs_lim_dev *D, struct cs_lim_ctx *cx,
                                       uintptr_t key, CUstream rec, uint32_t weight,
                                       bool *engaged)
{
    bool yielded = false; /* counted in quiet_waits */
    for (bool held = false;; held = true) {
        int64_t now = cs__now_ns();
        pthread_mutex_lock(&D->mu);
        *engaged = law_follow(D, cx->dev, now);
        struct cs_lim_hold hold;
        struct cs_lim_stream *st;
        int64_t wait = turn_wait(D, cx, key, rec, *engaged, now, &hold, &st);
        if (wait) {
            cs__lim_harvest_locked(cx->dev, now);
            wait = turn_wait(D, cx, key, rec, *engaged, now, &hold, &st);
        }
        if (!wait) {
            note_dry(D, held, weight, now);
            return st;
        }
        if (hold.quiet && !yielded) {
            yielded = true;
            CS_LIM_STAT_ADD(quiet_waits, 1);
        }
        pthread_mutex_unlock(&D->mu);
        pace_sleep(D, now + wait, &hold);
    }
}

/* Opens a group on st with a start marker recorded now (device mutex
 * held); false when no marker could be recorded. */
static bool group_open(struct cs_lim_dev *D, struct cs_lim_ctx *cx, struct cs_lim_stream *st,
                       const struct cs_lim_ticket *t)
{
    CUevent ev = pool_get(cx);
    CUresult r = ev ? record(ev, st->rec) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        if (ctx_gone(r))
            ctx_lost(D, cx);
        else
            pool_put(cx, ev);
        return false;
    }
    static uint64_t gens; /* under the device mutex of whichever device; only unique */
    st->group = (struct cs_lim_group){.start = ev, .gen = __atomic_add_fetch(&gens, 1,
                                                                            __ATOMIC_RELAXED),
                                      .sig = t->sig, .kind = t->kind,
                                      .occ_ppm = t->occ_ppm};
    D->groups++;
    return true;
}

/* Issues the ticket for a launch whose turn has come (device mutex held):
 * it joins the stream's open group (no marker), opens a new one (a start
 * marker recorded on `rec`), or is only estimated. */
static void issue_ticket(struct cs_lim_ticket *t, struct cs_lim_dev *D, struct cs_lim_ctx *cx,
                         struct cs_lim_stream *st, bool engaged)
{
    int64_t est = sig_estimate(D, t->sig);
    if (est <= 0)
        est = D->est[t->kind];
    t->est = (uint64_t)(est > 0 ? est : 0);
    int64_t now = cs__now_ns();
    /* A blocking sync since our last launch drained the queue. */
    int64_t queued = __atomic_load_n(&drained_ns, __ATOMIC_RELAXED) > D->last_issue_ns
                         ? now : D->queue_end_ns;
    D->last_issue_ns = now;
    D->queue_end_ns = (queued > now ? queued : now) +
                      sig_drain(D, t->sig, (int64_t)t->est) * t->weight;
    t->stream = NULL;
    t->start = NULL;
    t->group = 0;
    if (!st)
        return;
    struct cs_lim_group *g = &st->group;
    if (g->start) {
        /* The free path let launches go around the limiter since the
         * group's last launch (a weight over one): on the GPU they sit
         * inside the group's span, which would charge their time to the
         * group's launches. */
        bool closable = t->weight <= 1 && group_queued(st);
        if (closable && t->est && t->sig && g->sig == t->sig && g->occ_ppm == t->occ_ppm &&
            g->n < CS_LIM_GROUP && groups_allowed(D, now))
            goto join;
        if (closable)
            group_close(D, st, now);
        else
            group_drop(D, st, now);
    }
    /* Well under the share (or not pacing at all), a sample of the
     * launches is enough: the others are charged by estimate. */
    bool estimate_only = est > 0 && (!engaged || cs__law_well_under(&D->law, now)) &&
                         D->launches++ % CS_LIM_SAMPLE != 0;
    if (estimate_only) {
        st->tickets++;
        t->stream = st;
        return;
    }
    if (!group_open(D, cx, st, t))
        return;
    t->start = g->start;
join:
    g->n++;
    g->est += (int64_t)t->est;
    cs__law_pending(&D->law, (int64_t)t->est);
    st->tickets++;
    t->stream = st;
    t->group = g->gen;
}

/* HAMi's monitor holds back a limited container whose priority is lower
 * than a busy one's by writing recent_kernel = -1 (HAMi-core sleeps in its
 * launch path until the value is 0 again); we do the same, in 20 ms steps
 * so a release is seen soon. docs/kubernetes.md. */
static void hold_while_hami_blocks(void)
{
    if (!cs__hami_launch_tick())
        return;
    CS_LIM_STAT_ADD(hami_holds, 1);
    const struct timespec step = {0, 20 * 1000 * 1000};
    while (cs__hami_launch_tick())
        nanosleep(&step, NULL);
}

/* The free path: while no device of this process is engaged, a launch
 * goes untouched (no lock, no driver call) except one in
 * CS_LIM_FREE_SAMPLE of each thread's, which takes the slow path and is
 * charged by estimate for the ones before it, so the watcher still sees
 * what the tenant uses. Returns the weight of a launch that must take the
 * slow path, 0 for one that may go. */
static uint32_t free_path_weight(void)
{
    static __thread uint32_t let_go; /* this thread's launches since its last sample */
    uint64_t bits = __atomic_load_n(&engaged_bits, __ATOMIC_RELAXED);
    if (bits) {
        if (bits >> CS_LIM_STAMP_SHIFT)
            stamp_launch(bits >> CS_LIM_STAMP_SHIFT);
        if (bits & CS_LIM_ENGAGED_MASK)
            return let_go = 0, 1;
    }
    if (++let_go < CS_LIM_FREE_SAMPLE)
        return 0;
    uint32_t w = let_go;
    let_go = 0;
    CS_LIM_STAT_ADD(free_launches, w - 1);
    return w;
}

void cs__limiter_pace(struct cs_lim_ticket *t, CUstream stream, enum cs_lim_path path,
                      const struct cs_lim_launch *l)
{
    if (!__atomic_load_n(&arm_decided, __ATOMIC_ACQUIRE))
        arm();
    if (!__atomic_load_n(&cs__lim_armed, __ATOMIC_RELAXED))
        return;
    const struct cs_lim_path_info *pi = &cs__lim_paths[path];
    CUstream rec = stream;
    if (rec == NULL)
        rec = pi->variant != CS_PLAIN ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (cs__capture_stream_captured(rec)) {
        CS_LIM_STAT_ADD(captured, 1);
        return;
    }
    hold_while_hami_blocks();
    uint32_t weight = free_path_weight();
    if (!weight)
        return;
    if (!cs_drv.cuEventRecord || !cs_drv.cuEventQuery || !cs_drv.cuCtxGetCurrent ||
        (!cs_drv.cuEventElapsedTime_v2 && !cs_drv.cuEventElapsedTime))
        return;
    uintptr_t key = rec == CU_STREAM_PER_THREAD ? (uintptr_t)&per_thread_key : (uintptr_t)rec;
    CUcontext ctx = ctx_of(rec);
    if (!ctx)
        return;
    struct cs_lim_ctx *cx = ctx_get(ctx);
    struct cs_lim_dev *D = cx ? &cs__lim_devs[cx->dev] : NULL;
    if (D && D->pct) { /* pct: written once at arming, before arm_decided */
        CS_LIM_STAT_ADD(paced_launches, 1);
        CS_LIM_STAT_ADD(launches_by_path[path], 1);
        t->sig = l->sig;
        t->kind = pi->kind;
        t->weight = weight;
        bool engaged;
        struct cs_lim_stream *st = wait_turn(D, cx, key, rec, weight, &engaged);
        struct cs_capture_guard g;
        cs__capture_unsafe_begin(&g);
        t->occ_ppm = cs__shape_occupancy(D, l);
        issue_ticket(t, D, cx, st, engaged);
        cs__capture_unsafe_end(&g);
        pthread_mutex_unlock(&D->mu);
    }
}

/* Whether the next launch would be held now, by the law or outside our
 * window (device mutex held). Only while engaged with the law running:
 * the watcher may engage us between this launch's turn and now, before
 * any launch has started the law. */
static bool held_next(struct cs_lim_dev *D, int64_t now)
{
    if (!D->law_running || !__atomic_load_n(&D->engaged, __ATOMIC_RELAXED))
        return false;
    if (cs__law_wait(&D->law, now))
        return true;
    struct cs_window w = window_of(D);
    int64_t queued = D->queue_end_ns > now ? D->queue_end_ns - now : 0;
    return w.len_ns && cs__law_window_wait(&w, queued, now) != 0;
}

/* After the launch of a ticket that joined or opened a group (device
 * mutex held): a failed launch leaves it. It is closed right behind this
 * launch when full, when its launches cannot be told apart (no signature
 * or no estimate yet), when the GPU has reached its start already
 * (nothing queued, so no later launch could join it without a gap), when
 * it is a free-path sample (a weight over one): the launches the free
 * path lets go next would land inside its span uncounted, or when the
 * next launch would be held: by then the GPU has most likely run the
 * group, which would be dropped and charged by estimate, never measured —
 * and a tenant held between single launches would then never correct an
 * estimate that a first measurement beside busy contexts inflated. */
static void group_after_launch(struct cs_lim_dev *D, struct cs_lim_stream *st,
                               const struct cs_lim_ticket *t, CUresult launched, int64_t now)
{
    struct cs_lim_group *g = &st->group;
    if (!g->start || g->gen != t->group)
        return; /* closed meanwhile by another thread's launch: charged with it */
    if (launched != CUDA_SUCCESS) {
        g->n--;
        g->est -= (int64_t)t->est;
        cs__law_pending(&D->law, -(int64_t)t->est);
        if (!g->n) {
            pool_put(st->cx, g->start);
            group_forget(D, st);
        }
        return;
    }
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (s)
        __atomic_store_n(&s->last_launch_ns[st->cx->dev], (uint64_t)now, __ATOMIC_RELAXED);
    struct cs_capture_guard cg;
    cs__capture_unsafe_begin(&cg);
    if (g->n >= CS_LIM_GROUP || !g->sig || !t->est || t->weight > 1 || !group_queued(st) ||
        held_next(D, now))
        group_close(D, st, now);
    cs__capture_unsafe_end(&cg);
}

void cs__limiter_measure(struct cs_lim_ticket *t, CUresult launched)
{
    struct cs_lim_stream *st = t->stream;
    struct cs_lim_dev *D = &cs__lim_devs[st->cx->dev];
    int64_t now = cs__now_ns();
    pthread_mutex_lock(&D->mu);
    st->tickets--;
    /* The launches the free path let go before this one ran as surely as
     * it did: charged by its estimate, whether or not it is measured. */
    uint32_t before = t->weight > 1 ? t->weight - 1 : 0;
    if (before)
        charge_by_estimate(D, st->cx->dev, t->sig, t->occ_ppm, before,
                           (int64_t)t->est * before, 0, now);
    if (!t->group) {
        if (launched == CUDA_SUCCESS)
            charge_by_estimate(D, st->cx->dev, t->sig, t->occ_ppm, 1, (int64_t)t->est, 0, now);
    } else {
        group_after_launch(D, st, t, launched, now);
    }
    cs__lim_harvest_locked(st->cx->dev, now); /* the GPU has our launch now */
    pthread_mutex_unlock(&D->mu);
}
