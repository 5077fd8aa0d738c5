/*
 * The compute limiter's interface to the launch wrappers (docs/limiter.md).
 *
 * Every launch path calls cs__limiter_before_launch (which may pace the
 * caller: it sleeps, never spins) and cs__limiter_after_launch (which
 * records the end of what was launched so its GPU time can be measured).
 * A process with no SM limit in force on any device pays one load of a
 * cached flag and one predictable branch per launch: no lock, no syscall,
 * no event record. The flag starts "armed" so that the first launch takes
 * the slow path once and decides.
 */
#ifndef CS_LIMITER_LIMITER_H
#define CS_LIMITER_LIMITER_H

#include <stdbool.h>
#include <stdint.h>

#include "hook/runtime.h"

/* What a launch is: its kind keeps its own estimate of GPU time. */
enum cs_lim_kind { CS_LIM_KERNEL = 0, CS_LIM_GRAPH = 1, CS_LIM_MEMSET = 2, CS_LIM_NKINDS };

/* Carried from before_launch to after_launch on the caller's stack. */
struct cs_lim_ticket {
    void *stream;       /* limiter's stream record; NULL = nothing to do */
    CUevent start;      /* start marker recorded before the launch (it
                           opened a group), else NULL */
    uint64_t group;     /* generation of the stream's group the launch
                           joined (internal.h); 0: not sampled, charge the
                           estimate instead */
    uint64_t est;       /* GPU time expected of this launch (ns) */
    uint64_t sig;       /* kernel signature (cs__lim_sig_*), 0 = unknown */
    enum cs_lim_kind kind;
    uint32_t occ_ppm;   /* part of the GPU the launch can hold (shape.c) */
    uint32_t weight;    /* launches this one stands for: itself and those
                           its thread let go on the free path before it */
};

/* Nonzero while some device of this process may need pacing or
 * measuring; 0 once the limiter decided it has nothing to do. */
extern int cs__lim_armed;

/* Fork child: resets every piece of the limiter's per-process state
 * (devices, streams, contexts, the watcher, tenant sums, captures, suspend,
 * counters, their locks) so the child arms afresh. Registered with the
 * one fork handler (core/fork.h); runs in the child, one thread. */
void cs__lim_atfork_child(void);

/* One path per launch wrapper: the KERNEL, GRAPHRUN and MEMSET rows of
 * hooks.def (launch_paths.inc). */
enum cs_lim_path {
#define CS_LIM_X(sym, variant, kind) CS_LIM_PATH_##sym,
#include "limiter/launch_paths.inc"
#undef CS_LIM_X
    CS_LIM_NPATHS
};

struct cs_lim_path_info {
    const char *name;            /* the exported symbol */
    enum cs_variant variant;     /* PTSZ/PTDS: NULL is the per-thread stream */
    enum cs_lim_kind kind;
};

extern const struct cs_lim_path_info cs__lim_paths[CS_LIM_NPATHS];

/* What a launch is to the limiter: its signature, and its shape, from
 * which a device whose contexts are MPS clients tells what part of the
 * GPU it can hold (shape.c). */
struct cs_lim_launch {
    uint64_t sig;       /* cs__lim_sig_*, 0 = unknown */
    const void *f;      /* kernel function; NULL: not a kernel */
    const void *exec;   /* graph exec; NULL: not a graph launch */
    uint64_t blocks;    /* grid size in blocks */
    uint32_t threads;   /* threads per block, 0 = unknown */
    uint32_t shmem;     /* dynamic shared memory per block */
};

void cs__limiter_pace(struct cs_lim_ticket *t, CUstream stream, enum cs_lim_path path,
                      const struct cs_lim_launch *l);
void cs__limiter_measure(struct cs_lim_ticket *t, CUresult launched);

/* A call that waits for the GPU (a synchronisation, a blocking copy back)
 * ran from t0 to t1 (CLOCK_MONOTONIC ns). One that blocked returned when
 * the work it waited for had drained: the limiter's estimate of when its
 * queue runs dry (which time-slicing with others makes too early) is
 * corrected by it, so a tenant that keeps the GPU busy between its syncs
 * is seen to fill it (docs/limiter.md, "Windows"). */
void cs__limiter_synced(int64_t t0, int64_t t1);

/* A context of this process is gone (destroyed, or a primary context
 * reset or released for the last time): the limiter forgets it and its
 * events without calling the driver on them, so its table entry can hold
 * the next context. Called by the context wrappers after the driver
 * succeeded. */
void cs__limiter_ctx_gone(CUcontext ctx);

/* Signature of a launch (docs/limiter.md, "Charging the contention-free
 * time"): what makes two launches take the same GPU time, hashed. Only
 * computed on the slow path. Never 0. */
static inline uint64_t cs__lim_sig_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static inline uint64_t cs__lim_sig_kernel(const void *f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned shmem)
{
    uint64_t h = cs__lim_sig_mix(0x4b45524e454cull, (uint64_t)(uintptr_t)f);
    h = cs__lim_sig_mix(h, (uint64_t)gx | (uint64_t)gy << 32);
    h = cs__lim_sig_mix(h, (uint64_t)gz | (uint64_t)bx << 32);
    h = cs__lim_sig_mix(h, (uint64_t)by | (uint64_t)bz << 32);
    h = cs__lim_sig_mix(h, shmem);
    return h ? h : 1;
}

static inline uint64_t cs__lim_sig_graph(const void *exec)
{
    uint64_t h = cs__lim_sig_mix(0x4752415048ull, (uint64_t)(uintptr_t)exec);
    return h ? h : 1;
}

static inline struct cs_lim_launch cs__lim_kernel(const void *f, unsigned gx, unsigned gy,
                                                  unsigned gz, unsigned bx, unsigned by,
                                                  unsigned bz, unsigned shmem)
{
    return (struct cs_lim_launch){.sig = cs__lim_sig_kernel(f, gx, gy, gz, bx, by, bz, shmem),
                                  .f = f, .blocks = (uint64_t)gx * gy * gz,
                                  .threads = bx * by * bz, .shmem = shmem};
}

static inline struct cs_lim_launch cs__lim_graph(const void *exec)
{
    return (struct cs_lim_launch){.sig = cs__lim_sig_graph(exec), .exec = exec};
}

/* A memset's time depends on the bytes it writes and their shape. */
static inline uint64_t cs__lim_sig_memset(size_t elem, size_t width, size_t height)
{
    uint64_t h = cs__lim_sig_mix(0x4d454d534554ull, (uint64_t)elem);
    h = cs__lim_sig_mix(h, (uint64_t)width);
    h = cs__lim_sig_mix(h, (uint64_t)height);
    return h ? h : 1;
}

/* `launch_` (a struct cs_lim_launch) is an expression evaluated only
 * when the limiter is armed. */
#define cs__limiter_before_launch(t_, stream_, path_, launch_)                     \
    do {                                                                           \
        (t_)->stream = 0;                                                          \
        if (__builtin_expect(__atomic_load_n(&cs__lim_armed, __ATOMIC_RELAXED) != 0, 0)) { \
            const struct cs_lim_launch l_ = (launch_);                             \
            cs__limiter_pace((t_), (stream_), (path_), &l_);                       \
        }                                                                          \
    } while (0)

static inline void cs__limiter_after_launch(struct cs_lim_ticket *t, CUresult launched)
{
    if (__builtin_expect(t->stream != 0, 0))
        cs__limiter_measure(t, launched);
}

/* The body of a launch wrapper: prologue, pacing, the call, measurement.
 * `sym` names the hooks.def row (and so the path); `call` is evaluated
 * once, between the two halves. */
#define CS_LAUNCH_BODY(sym, stream, launch, call)                   \
    do {                                                            \
        CS_ENTER(sym);                                              \
        struct cs_lim_ticket t_;                                    \
        cs__limiter_before_launch(&t_, (stream), CS_LIM_PATH_##sym, (launch)); \
        CUresult r_ = call;                                         \
        cs__limiter_after_launch(&t_, r_);                          \
        return r_;                                                  \
    } while (0)

/* ---- stream capture (capture.c; docs/limiter.md "Stream capture") -------
 * Which work is being captured rather than run, and how cushare's own
 * driver calls keep out of the way of an open capture. Used by the launch
 * path and by the stream-ordered allocation wrappers (src/mem/pool.c). */

/* Whether any stream capture is open in this process. */
bool cs__capture_any_open(void);

/* Whether work pushed to `rec` now would be captured (or the driver will
 * not say: the legacy stream beside a capturing blocking stream). Costs
 * one load while no capture is open. */
bool cs__capture_stream_captured(CUstream rec);

/* Brackets driver calls that a GLOBAL-mode capture forbids to every other
 * thread (event queries, pool attributes): while a capture is open they
 * run in relaxed mode, and a capture cannot begin in the middle of an
 * unrelaxed one. Never held across a sleep or a call that may block. */
struct cs_capture_guard {
    bool relaxed;
    CUstreamCaptureMode prev;
};
void cs__capture_unsafe_begin(struct cs_capture_guard *g);
void cs__capture_unsafe_end(struct cs_capture_guard *g);

/* Puts the calling thread in relaxed capture mode for good: for cushare's
 * own threads (the watcher). */
void cs__capture_relax_thread(void);

/* Fork child: no capture survives fork. */
void cs__capture_atfork_child(void);

/* Counters for tests and `cushare bench limiter` (process-local, relaxed).
 * Exported as cushare_limiter_stats() so a test can read them through
 * dlsym without linking internals. */
struct cushare_limiter_stats {
    uint32_t version;           /* 6: quiet_waits added; 5: free_launches added; 4: watch_ticks added; 3: law_window_sleep_ns added; 2:
                                   launches_by_path follows hooks.def */
    uint32_t armed;             /* the fast-path flag */
    uint64_t paced_launches;    /* launches that went through the slow path */
    uint64_t measured;          /* start/end pairs harvested */
    uint64_t markers;           /* events recorded */
    uint64_t sleeps;            /* pacing sleeps */
    uint64_t sleep_ns;          /* total time slept by pacing */
    uint64_t parks;             /* suspend checkpoint holds (src/hook/gate.c) */
    uint64_t engaged_mask;      /* bit d: pacing engaged on device d now */
    uint64_t captured;          /* launches passed through untouched because
                                   their stream was capturing */
    uint64_t launches_by_path[CS_LIM_NPATHS]; /* per enum cs_lim_path,
                                                 slow path only */
    uint64_t hami_holds;        /* launches HAMi's monitor held back
                                   (recent_kernel < 0) */
    uint64_t window_waits;      /* launches held until our coordinated window */
    uint64_t groups_estimated;  /* groups the GPU caught up with: charged by
                                   estimate, not measured */
    uint64_t law_window_sleep_ns; /* of sleep_ns, the law's sleeps inside our
                                     own window: time nobody may use */
    uint64_t watch_ticks;       /* watcher ticks completed: a test waits for
                                   the watcher to have seen what it wrote */
    uint64_t free_launches;     /* launches let go without the slow path:
                                   nothing engaged, not this thread's sample */
    uint64_t quiet_waits;       /* launches held because a busy higher-priority
                                   tenant launched within the quiet period */
};

#endif
