/*
 * State shared by the files of src/limiter (private; docs/limiter.md).
 *
 *   limiter.c  arming, per-device pacing and measurement (launch threads)
 *   tenant.c   the tenant's GPU time: other processes' slots in the ledger
 *   watch.c    the watcher thread: NVML, identity, board, policy decision
 *   board.c    the node board: tenants' priority and recent activity
 *   suspend.c  the optional HAMi signal handlers (suspend and resume)
 *   law.c      the control law (pure)
 *   sig.c      what a launch signature costs (pure)
 *   shape.c    what part of the GPU a launch can hold (MPS devices)
 *
 * Locking: each device has one mutex (struct cs_lim_dev.mu) over its
 * control state, its stream records, its signature table and the event
 * pools of its contexts.
 * It is held for a handful of driver calls (event record/query), never
 * across a sleep, a launch or an NVML call. tenant.mu orders the scans of
 * the ledger; it is only try-locked on the launch path.
 */
#ifndef CS_LIMITER_INTERNAL_H
#define CS_LIMITER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"

#include "hook/runtime.h"
#include "ledger/ledger.h"
#include "limiter/law.h"
#include "limiter/limiter.h"
#include "limiter/sig.h"

#define CS_LIM_FIFO 512          /* start/end pairs in flight per stream */
#define CS_LIM_STREAMS 64        /* stream records per device */
#define CS_LIM_CTXS 16           /* contexts the limiter tracks */
#define CS_LIM_TICK_NS 100000000ll /* watcher period: 100 ms */
#define CS_LIM_SLEEP_MAX_NS 50000000ll /* one pacing sleep at most 50 ms */
#define CS_LIM_SAMPLE 8          /* well under the share: measure 1 launch in 8 */
#define CS_LIM_SYNC_BLOCKED_NS 20000 /* a sync this long waited for the GPU */
#define CS_LIM_IDLE_GAP_NS 100000000ll /* a dry spell this long: the tenant rested */
#define CS_LIM_FREE_SAMPLE 32    /* nothing engaged: 1 launch in 32 per thread
                                    takes the slow path, charged for all 32 */
#define CS_LIM_GROUP 8           /* launches one marker pair may span */
#define CS_LIM_SIGS 256          /* signature table entries per device (hashed) */
#define CS_LIM_OCC_FULL 1000000u /* a launch that can hold the whole GPU, ppm */

/* A context we record markers in: its device and a pool of free events. */
struct cs_lim_ctx {
    CUcontext ctx;               /* atomic publish; NULL = unused */
    int dev;                     /* ledger device index */
    CUevent *pool;               /* under devs[dev].mu */
    int npool, cap;
};

struct cs_lim_pair {
    CUevent s, e;
    int64_t est;                 /* ns charged as pending until harvested */
    uint64_t sig;
    enum cs_lim_kind kind;
    uint32_t launches;           /* launches of signature sig between s and e */
    uint32_t occ_ppm;            /* part of the GPU they can hold (shape.c) */
};

/* Launches of one signature queued back to back after one start marker,
 * still open for more (docs/limiter.md, "Groups"): a marker between two
 * launches costs the GPU ~1.2 us on an H200 and shows up inside the next
 * launch's measured time, so a pair spans up to CS_LIM_GROUP launches. A
 * launch joins only while the start marker has not completed: everything
 * since is still queued, so no idle gap can fall inside the span. */
struct cs_lim_group {
    CUevent start;               /* NULL: no group open */
    uint64_t gen;                /* generation, never 0 */
    uint32_t n;                  /* launches in it */
    int64_t est;                 /* their estimates, pending in the law */
    uint64_t sig;
    enum cs_lim_kind kind;
    uint32_t occ_ppm;            /* part of the GPU its launches can hold */
};

/* Occupancy of a launch signature on a concurrent device (shape.c). */
struct cs_lim_occ {
    uint64_t sig;                /* 0 = empty */
    uint32_t ppm;
};

/* One stream (or default stream) the tenant launched to on a device. */
struct cs_lim_stream {
    uintptr_t key;               /* stream handle or per-thread key */
    CUstream rec;                /* handle to record markers on */
    struct cs_lim_ctx *cx;
    int tickets;                 /* launches between pace and measure */
    struct cs_lim_group group;   /* the open group, if any */
    uint32_t head, n;            /* FIFO of pairs, oldest first */
    int64_t used_ns;             /* last launch: eviction order */
    struct cs_lim_pair fifo[CS_LIM_FIFO];
};

/* A higher-priority peer's launch stamp: in our own board file's mapping
 * (own) or at `index` of the file open at fd. */
#define CS_LIM_QUIET 8
struct cs_lim_quiet {
    int fd;
    const uint64_t *own;
    uint32_t index;
};

struct cs_lim_dev {
    pthread_mutex_t mu;
    uint32_t pct;                /* configured limit 1..99, 0 = none */
    uint32_t share_pm;           /* atomic; written by the watcher: the share
                                    the law charges at, parts per 10000
                                    (pct * 100 scaled for clock boost and
                                    fulfilment); 0 = pct * 100 */
    uint64_t sleep_ns;           /* atomic: time pacing slept on this device */
    uint64_t law_in_window_ns;   /* atomic: window time the law's holds left
                                    idle (our queue dry, our window open) */
    int engaged;                 /* atomic: pacing on (policy decision);
                                    written only through cs__lim_set_engaged */
    int64_t ahead_ns;            /* atomic; written by the watcher: the law's
                                    run-ahead while engaged (short beside a
                                    higher priority, fair.h); 0 = default */
    uint64_t dry_ns;             /* atomic; added under the device mutex: time
                                    our queue had run dry (by estimate) when
                                    a launch went without being held */
    uint64_t idle_gaps;          /* atomic; added under the device mutex: dry
                                    spells of CS_LIM_IDLE_GAP_NS or more (the
                                    tenant rested) */
    uint64_t window;             /* atomic; written by the watcher: our window
                                    in the device's coordinated schedule,
                                    cs__lim_window_pack; 0 = none */
    uint64_t *stamp;             /* atomic; written by the watcher through
                                    cs__lim_set_stamp: where our launches are
                                    stamped for a busy lower-priority tenant
                                    (board.h, launch stamps); NULL: nowhere */
    /* Yield on activity (fair.h, cs__fair_quiet_wait): while held for
     * priority, the busy higher-priority peers' launch stamps. Under the
     * mutex; replaced by the watcher (cs__lim_set_quiet), which opened the
     * descriptors; they are closed by whoever replaces them. */
    int nquiet;
    struct cs_lim_quiet quiet[CS_LIM_QUIET];
    int64_t quiet_ns;            /* under the mutex: the quiet period */
    int law_running;             /* law started since last engaged */
    int hami_hold;               /* watcher thread only: ticks pacing stays
                                    engaged after HAMi's utilization_switch
                                    was last 1 */
    struct cs_law law;
    int64_t est[CS_LIM_NKINDS];  /* EMA of measured GPU ns per launch */
    uint64_t measured;           /* pairs harvested */
    uint64_t inflight;           /* pairs pushed, not harvested */
    int groups;                  /* streams with an open group */
    int alone;                   /* atomic; written by the watcher: nobody
                                    else busy on the device (alone or inside
                                    our window, a pair may span launches) */
    uint64_t launches;           /* slow-path launches: sampling counter */
    uint64_t own_total;          /* atomic: GPU ns this process was charged */
    uint64_t own_work;           /* atomic: the same launches at their
                                    signatures' contention-free minimum: the
                                    work done, for fulfilment */
    int64_t contended_until;     /* watcher only: hold of the decision */
    int64_t queue_end_ns;        /* when our work launched so far should be
                                    done, by estimate (sampled or not) */
    int64_t last_issue_ns;       /* under the mutex: our last launch through
                                    the slow path */
    int nstreams;
    struct cs_lim_stream *streams[CS_LIM_STREAMS];
    struct cs_lim_sig sigs[CS_LIM_SIGS];
    int shape_known;             /* atomic: the two below are set (shape.c,
                                    once, at the device's first context) */
    int concurrent;              /* atomic: its contexts are MPS clients: kernels of
                                    other processes run beside ours, so a
                                    launch is charged for the part of the GPU
                                    it can hold, and windows are only for
                                    GPU-filling ones (CUSHARE_MPS_TURNS) */
    int sms;                     /* atomic: its multiprocessors, 0 = unknown */
    uint32_t occ_avg_ppm;        /* atomic; written under the device mutex:
                                    recent launches' occupancy (average) */
    struct cs_lim_occ occ[CS_LIM_SIGS]; /* device mutex: recent signatures */
};

extern struct cs_lim_dev cs__lim_devs[CS_MAX_DEVICES];
extern struct cushare_limiter_stats cs__lim_stats;

#define CS_LIM_STAT_ADD(field, v) __atomic_fetch_add(&cs__lim_stats.field, (v), __ATOMIC_RELAXED)

void cs__lim_sleep(int64_t ns);

/* Sets device d's `engaged` flag and the process's copy of all of them
 * that the free path reads; returns the flag's previous value. */
int cs__lim_set_engaged(int d, int on);

/* Time this process's threads have spent blocked in calls that waited
 * for the GPU (cs__limiter_synced), summed over threads; monotonic. The
 * watcher tells a tenant that fills the GPU by it. */
uint64_t cs__lim_blocked_ns(void);

/* Stamps every launch of the process with its time at *p (NULL: stops),
 * for device d's busy lower-priority tenants; watcher only. */
void cs__lim_set_stamp(int d, uint64_t *p);

/* Replaces device d's higher-priority launch stamps with q[0..n) (the
 * device takes the descriptors) and the quiet period; watcher only. */
void cs__lim_set_quiet(int d, const struct cs_lim_quiet *q, int n, int64_t quiet_ns);

/* Harvests completed pairs of device d (its mutex held): publishes the
 * measured GPU time in our slot and charges the tenant's clock. */
void cs__lim_harvest_locked(int d, int64_t now);

/* For the pacing debug line (takes device d's mutex): how far our queue's
 * estimated end runs ahead of `now` (0 when drained), and the largest
 * estimate and minimum any known signature holds. */
struct cs_lim_queue_view {
    int64_t queue_ahead_ns, sig_est_max_ns, sig_min_max_ns;
};
struct cs_lim_queue_view cs__lim_queue_view(int d, int64_t now);

/* The tenant's other processes (tenant.c). others[d] is a monotonic sum
 * of the GPU time their slots published since we first saw them. */
void cs__tenant_reset(void);
/* Re-lists live slots (and sums): watcher, every tick. */
void cs__tenant_refresh(void);
uint64_t cs__tenant_others(int d);
/* NVML pids of the tenant's live processes (host_pid of each slot, 0s
 * skipped); returns how many were written. */
int cs__tenant_pids(unsigned *out, int cap);

/* Our window as one word, so the launch path reads period, offset and
 * length (lead included) of one schedule: 21 bits of microseconds each
 * (config caps the period at 1 s, the lead at 0.1 s). */
#define CS_LIM_WINDOW_BITS 21
#define CS_LIM_WINDOW_MASK ((1ull << CS_LIM_WINDOW_BITS) - 1)
static inline uint64_t cs__lim_window_pack(uint64_t period_us, uint64_t off_us, uint64_t len_us)
{
    return (period_us & CS_LIM_WINDOW_MASK) << (2 * CS_LIM_WINDOW_BITS) |
           (off_us & CS_LIM_WINDOW_MASK) << CS_LIM_WINDOW_BITS | (len_us & CS_LIM_WINDOW_MASK);
}

static inline struct cs_window cs__lim_window_unpack(uint64_t w)
{
    return (struct cs_window){
        .period_ns = (int64_t)(w >> (2 * CS_LIM_WINDOW_BITS) & CS_LIM_WINDOW_MASK) * 1000,
        .off_ns = (int64_t)(w >> CS_LIM_WINDOW_BITS & CS_LIM_WINDOW_MASK) * 1000,
        .len_ns = (int64_t)(w & CS_LIM_WINDOW_MASK) * 1000};
}

/* How early a window of len_us opens, overlapping the previous owner's
 * end: CUSHARE_SM_WINDOW_LEAD_US, at most len_us. The watcher adds it to
 * the window it posts (watch.c, window_for); the launch path, which reads
 * only the sum, gets it back as cs__lim_window_lead_us(sum / 2): the lead
 * is at most the length, so at most half the sum. */
static inline uint64_t cs__lim_window_lead_us(uint64_t len_us)
{
    uint64_t lead = cs__config()->sm_window_lead_us;
    return lead < len_us ? lead : len_us;
}

/* The tenant's virtual clock of device d (law.h), shared by its processes
 * through the ledger header (dev[d].pace_vt_ns, docs/ledger.md). */
static inline int64_t *cs__lim_clock(int d)
{
    return cs__ledger_pace_clock(cs__ledger(), d);
}

/* Our slot, or NULL before the ledger is ready. */
struct cs_ledger_slot *cs__lim_my_slot(void);

/* Launch shapes (shape.c). cs__shape_device_seen: asks the driver, once
 * per device, whether its contexts are MPS clients and how many SMs it
 * has. cs__shape_occupancy (device mutex held): the part of the GPU a
 * launch can hold, in ppm of CS_LIM_OCC_FULL; the whole GPU on a device
 * that time-slices, or when unknown; on a concurrent device it also keeps
 * occ_avg_ppm, the recent launches' average. */
void cs__shape_device_seen(int d);
uint32_t cs__shape_occupancy(struct cs_lim_dev *D, const struct cs_lim_launch *l);

/* Watcher (watch.c). Started once per process (again in a fork child). */
void cs__watch_start(void);
void cs__watch_atfork_child(void);

/* Suspend signals (suspend.c): installs the opt-in handlers once. */
void cs__suspend_install_signals(void);


/* The legacy identity tier (probe.c): the PID NVML reports for us on
 * device `dev` (NVML handle `nd`), found by a serialised before/after
 * allocation. *waits: post-init lock waits. 0 or -errno. */
int cs__identity_probe(int dev, nvmlDevice_t nd, pid_t *host_pid, uint32_t *waits);

#endif
