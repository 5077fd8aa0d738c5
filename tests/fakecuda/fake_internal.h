/*
 * TEST TOOL (tests/fakecuda), never shipped: internals shared by the sources
 * of the fake libcuda.so.1 (fake_driver.c, fake_mem.c, fake_exec.c,
 * fake_capture.c) and, for
 * the common part (configuration, shared state, accounting, timeline), the
 * fake libnvidia-ml.so.1 (fake_nvml.c). Everything declared here is hidden.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "fakecuda_state.h"

#define FC_EXPORT __attribute__((visibility("default")))

#define FC_GRANULE (2ULL << 20)     /* VMM granularity, array alignment */
#define FC_POOL_CHUNK (32ULL << 20) /* stream-ordered pools reserve in these */

#pragma GCC visibility push(hidden)

/* ---- common: configuration, shared state, counters (fake_common.c) ----- */

enum fc_lib { FC_LIB_DRIVER = 0, FC_LIB_NVML = 1 };

struct fc_config {
    uint64_t init_cost_us;    /* FAKECUDA_INIT_COST_US */
    uint64_t ctx_cost_us;     /* FAKECUDA_CTX_COST_US */
    uint64_t ctx_bytes;       /* FAKECUDA_CTX_BYTES */
    uint64_t ctx_extra_bytes; /* FAKECUDA_CTX_EXTRA_BYTES */
    uint64_t mps_ctx_bytes;   /* FAKECUDA_MPS_CTX_BYTES (default: ctx_bytes) */
    uint64_t ns_per_block;    /* FAKECUDA_NS_PER_BLOCK */
    uint64_t memset_ns_per_mib; /* FAKECUDA_MEMSET_NS_PER_MIB */
    uint64_t graph_ns;        /* FAKECUDA_GRAPH_US * 1000 */
    uint64_t util_window_ns;  /* FAKECUDA_UTIL_WINDOW_MS * 1e6 */
    uint64_t ctx_switch_ns;   /* FAKECUDA_CTX_SWITCH_US * 1e3 */
    uint64_t submit_ns;       /* FAKECUDA_SUBMIT_US * 1e3 */
    uint64_t timeslice_ns;    /* FAKECUDA_TIMESLICE_US * 1e3 (0: FIFO timeline) */
    uint64_t power_busy_w;    /* FAKECUDA_POWER_BUSY_W (0: no power/DVFS model) */
    uint64_t power_idle_w;    /* FAKECUDA_POWER_IDLE_W */
    uint64_t power_cap_w;     /* FAKECUDA_POWER_CAP_W */
    uint64_t dvfs_window_ns;  /* FAKECUDA_DVFS_WINDOW_MS * 1e6 */
    long nvml_pid_offset;     /* FAKECUDA_NVML_PID_OFFSET */
    unsigned nvml_extra_procs; /* FAKECUDA_NVML_EXTRA_PROCS */
    uint64_t nvml_sample_ns;  /* FAKECUDA_NVML_SAMPLE_MS * 1e6 (0: a sample per query) */
    int driver_version;       /* FAKECUDA_DRIVER_VERSION */
    char nvml_driver_version[80]; /* FAKECUDA_NVML_DRIVER_VERSION */
    int fail[FAKECUDA_CALL_COUNT];       /* FAKECUDA_FAIL_<symbol>=CODE[:N] */
    unsigned fail_times[FAKECUDA_CALL_COUNT]; /* N: only the first N calls fail (0: all) */
    unsigned fail_seen[FAKECUDA_CALL_COUNT];  /* calls counted against N (atomic) */
    int hook_of_call[FAKECUDA_CALL_COUNT]; /* hooks.def row of an export, or -1 */
};

extern struct fc_config fc_cfg;
extern struct fakecuda_state *fc_S;

/* Reads the configuration and attaches the shared state, once per library
 * instance. 0, or -1 when the state file cannot be used (message on stderr). */
int fc_common_init(enum fc_lib lib);
/* The mapping of this library instance, or NULL (never creates one). */
struct fakecuda_state *fc_state_peek(void);

/* Bumps the call counters of export `c`; returns its injected failure code
 * (FAKECUDA_FAIL_<symbol>) or 0: for CODE:N, only the process's first N
 * calls of that export fail, so a test can see a refused call and then the
 * same call succeed. */
int fc_count(enum fakecuda_call c);

uint64_t fc_now_ns(void);          /* CLOCK_MONOTONIC */
void fc_sleep_until(uint64_t ns);  /* CLOCK_MONOTONIC absolute */

/* Accounting (device index = physical). The calling process's entry in the
 * process table is claimed on first use. fc_charge fails (-1) when the
 * device would exceed its total; that bumps failed_allocs. */
int fc_charge(int dev, uint64_t bytes, enum fakecuda_kind kind);
void fc_uncharge(int dev, uint64_t bytes, enum fakecuda_kind kind);
void fc_import_add(int dev, int64_t bytes);
struct fakecuda_proc *fc_proc_self(void);
/* This process's entry if it has claimed one (never claims), or NULL. */
struct fakecuda_proc *fc_proc_peek(void);
/* Marks (on=1) or clears the context bit of this process on a device; the
 * entry is dropped when no context bit remains. */
void fc_proc_ctx(int dev, int on);
/* Drops this process's entry: uncharges everything still charged to it
 * (process teardown). */
void fc_proc_drop_self(void);
/* This process as an MPS client (fake_mps.c sets both at cuInit, under
 * fc_mu; a fork child clears them; always 0 in the NVML library). Read
 * with relaxed atomics: the scheduler and fc_proc_self (which copies them
 * into the process's entry when it claims it). */
extern uint32_t fc_mps_mask;    /* bit d: an MPS client on physical device d */
extern uint32_t fc_mps_cap_ppm; /* active thread percentage, ppm of the SMs */
extern int32_t fc_mps_server_pid; /* the daemon's pid (SO_PEERCRED), 0 = none */
/* A kernel of this name faults when it runs: the launching process's
 * calls fail with CUDA_ERROR_ILLEGAL_ADDRESS from then on (a sticky
 * error), and so do those of every MPS client of the device (measured on
 * the H200: an illegal address in one client ends the others' work). */
#define FAKECUDA_FAULT_KERNEL "fakecuda_illegal_address"
/* The launch of a faulting kernel on physical device `phys` (fake_mps.c). */
void fc_fault(int phys);
/* This process's sticky error, or CUDA_SUCCESS (fake_mps.c; fc_enter). */
CUresult fc_sticky_error(void);
#define FC_PPM 1000000u
#define FC_MPS_SERVER_BYTES (66ull << 20) /* the MPS server's process in NVML's
                                             compute list (H200, driver 580) */
/* Reclaims entries of dead processes. */
void fc_reap_dead(void);
int fc_pid_alive(int pid);

/* Export slots (shared state). */
int fc_export_new(int kind, int dev, uint64_t size, uint64_t ptr, uint64_t *gen);
/* The exporting process lets go of its memory (free, release, last
 * unmap): 1 when imports keep it on the device (the bytes moved from this
 * process to the export: do not uncharge them), 0 when the caller
 * uncharges as usual. */
int fc_export_owner_gone(int slot, uint64_t gen);
/* Validates a slot/generation; fills kind/pid/dev/size. 0 or -1. */
int fc_export_get(int slot, uint64_t gen, struct fakecuda_export *out);
/* Exported fds (fake_common.c, "the control file"): export gives a new
 * open description of the one control file naming (slot, gen), -1 on
 * failure; which reads them back from an fd, -1 if it is not one. */
#define FC_CTL_SLOT_BITS 12
int fc_ctl_export(int slot, uint64_t gen);
int fc_ctl_which(int fd, int *slot, uint64_t *gen);
void fc_export_importers(int slot, uint64_t gen, int delta);

/* A piece of work for the GPU timeline of one physical device. */
struct fc_work {
    uint64_t not_before; /* its stream's tail */
    uint64_t dur;        /* ns it lasts with its SMs (DVFS applied) */
    uint32_t occ_ppm;    /* share of the SMs its grid occupies (0: all);
                          * only MPS clients' work holds just that share */
    int launch;          /* count it in the launch counters (kernels and
                          * graph launches; not memsets) */
};
/* Schedules w (fake_common.c, "timeline": time-sliced processes queue and
 * hold the whole device; MPS clients' work shares it by occupancy); returns
 * its end (CLOCK_MONOTONIC ns). */
uint64_t fc_schedule(int dev, const struct fc_work *w);
/* When an event recorded now behind stream work ending at `tail`
 * completes: for an MPS client, when the MPS server's context can run it;
 * otherwise after the device's queued work (`timeslice`: after the
 * stream's own only). */
uint64_t fc_event_ns(int dev, uint64_t tail, int timeslice);
/* Appends an interval to a device's ring (caller holds D->lock). */
void fc_ring_add_locked(struct fakecuda_device *D, uint64_t start, uint64_t end, int pid);

/* The time-slicing device (fake_slice.c, FAKECUDA_TIMESLICE_US). A
 * submission's completion is not known when it is queued: fc_schedule
 * returns FC_SLICE_TOKEN | seq, which stream tails and event timestamps
 * hold until it is resolved; a token compares greater than any time. */
#define FC_SLICE_TOKEN (1ULL << 63)
/* Whether device `dev` time-slices (the knob is set, not an MPS device). */
int fc_slice_on(int dev);
/* Queues `dur` ns of `pid`'s work (0: an event record); its token. */
uint64_t fc_slice_submit(int dev, int pid, uint64_t dur);
/* Simulates the device up to `to` (caller holds its lock). */
void fc_slice_advance_locked(int dev, uint64_t to);
/* The completion time of `v` (a token or a time; 1: done long ago), or
 * the token while it runs, with *bound (if not NULL) a time before which
 * it cannot complete. */
uint64_t fc_slice_resolve(int dev, uint64_t v, uint64_t *bound);
/* Sleeps until `v` has completed (fake_exec.c); its completion time. */
uint64_t fc_slice_wait(int dev, uint64_t v);

/* Busy ns of the timeline (pid 0: any process) inside [from, to). */
uint64_t fc_busy_in_window(int dev, int pid, uint64_t from, uint64_t to);

/* Power and DVFS model (FAKECUDA_POWER_*; off: clock 1, power idle). */
#define FC_CLOCK_SM_MHZ 1980u   /* maximum SM / graphics clock (H200) */
#define FC_CLOCK_MEM_MHZ 3201u
/* Relative SM clock of a device now, (0, 1]: from the duty over the last
 * FAKECUDA_DVFS_WINDOW_MS (cached per process for 1 ms). */
double fc_clock_rel(int dev);
/* Duration of `nominal` ns of compute work enqueued now: nominal / clock. */
uint64_t fc_dvfs_dur(int dev, uint64_t nominal);
/* Board power in milliwatts (average over the last second). */
uint64_t fc_power_mw(int dev);

/* ---- driver: per-process objects (fake_driver.c) ------------------------ */

enum fc_type {
    FC_T_CTX = 1, FC_T_STREAM, FC_T_EVENT, FC_T_MODULE, FC_T_FUNC, FC_T_LIB,
    FC_T_KERNEL, FC_T_ARRAY, FC_T_MIPMAP, FC_T_POOL, FC_T_VMM, FC_T_VA,
    FC_T_MAP, FC_T_EXTMEM, FC_T_GRAPH, FC_T_GNODE, FC_T_GEXEC
};

struct fc_ctx;

/* Header of every handle the fake gives out. Handles are validated by
 * looking them up in a per-process hash set, never by dereferencing. */
struct fc_obj {
    struct fc_obj *hnext;
    int type;
    int phys;              /* physical device, -1 if none */
    struct fc_ctx *ctx;    /* owning context (freed with it), or NULL */
    void *owner;           /* parent object (module of a function, ...) */
};

struct fc_ctx {
    struct fc_obj o;
    struct fc_ctx *dead_next; /* destroyed contexts are kept, never reused */
    int ordinal;
    int primary;
    int active;
    int refs;              /* primary: retain count (a reset keeps it) */
    uint64_t ctx_bytes;    /* device memory it charged (KIND_CONTEXT) while active */
    unsigned flags;
    uint64_t tail_ns;      /* end of the last work of any stream of it */
};

/* A stream's (or an event's) link to a stream capture (fake_capture.c):
 * the capture's id (0: none; a capture that has ended is no longer found
 * by its id, so a stale link reads as "not capturing") and the index of
 * the stream's member record (of the event's dependency snapshot) in it. */
struct fc_capref {
    uint64_t id;
    uint32_t idx;
};

struct fc_stream {
    struct fc_obj o;
    unsigned flags;
    int priority;
    uint64_t tail_ns;
    struct fc_capref cap;
};

struct fc_event {
    struct fc_obj o;
    unsigned flags;
    int recorded;
    uint64_t ts_ns;        /* completion time of the recorded point */
    struct fc_capref cap;  /* last recorded inside this capture (id 0: outside) */
};

extern pthread_mutex_t fc_mu;   /* protects every per-process table */
extern int fc_inited;           /* cuInit succeeded in this process */
extern int fc_deinit;           /* process teardown started */
extern int fc_nvis;             /* CUDA-visible devices */
extern int fc_vis[FAKECUDA_MAX_DEVICES]; /* CUDA ordinal -> physical device */

/* Entry of every driver export: init, counters, injected failure, and
 * (need_init) CUDA_ERROR_NOT_INITIALIZED before cuInit. */
CUresult fc_enter(enum fakecuda_call c, int need_init);
#define FC_BEGIN(sym)                                                     \
    do {                                                                  \
        CUresult fc_r_ = fc_enter(FAKECUDA_CALL_##sym, 1);                \
        if (fc_r_ != CUDA_SUCCESS)                                        \
            return fc_r_;                                                 \
    } while (0)
#define FC_BEGIN_NOINIT(sym)                                              \
    do {                                                                  \
        CUresult fc_r_ = fc_enter(FAKECUDA_CALL_##sym, 0);                \
        if (fc_r_ != CUDA_SUCCESS)                                        \
            return fc_r_;                                                 \
    } while (0)

void fc_lock(void);
void fc_unlock(void);

/* Checkpoint model (fake_checkpoint.c). fc_ckpt_gate blocks the calling
 * thread while its process is locked or checkpointed (every export but
 * the few the driver answers meanwhile); fc_ckpt_sleep_until is
 * fc_sleep_until for a call that waits on the GPU inside the driver,
 * which a lock waits for. */
void fc_ckpt_gate(enum fakecuda_call c);
void fc_ckpt_sleep_until(uint64_t ns);

void fc_obj_add(struct fc_obj *o, int type, int phys, struct fc_ctx *ctx, void *owner);
void fc_obj_del(struct fc_obj *o);
/* The live object `p` of `type` (0: any type), or NULL. */
struct fc_obj *fc_obj_get(const void *p, int type);
/* Collects up to `max` live objects matching type (0 any) and the filters
 * (NULL/-1: any). Returns the count. */
size_t fc_obj_collect(struct fc_obj **out, size_t max, int type, struct fc_ctx *ctx,
                      void *owner, int phys);
size_t fc_obj_count(void);

/* CUDA ordinal -> physical device, or -1. */
int fc_phys_of(CUdevice dev);
/* Current context of the calling thread, validated (under fc_mu). */
CUresult fc_cur_ctx(struct fc_ctx **out);

/* Stream handle resolution (under fc_mu): NULL, CU_STREAM_LEGACY,
 * CU_STREAM_PER_THREAD or a created stream. `ptsz`: NULL means per-thread. */
struct fc_sref {
    struct fc_ctx *ctx;
    uint64_t *tail;
    struct fc_stream *stream; /* NULL for legacy / per-thread */
    struct fc_capref *cap;    /* capture link; NULL for the legacy stream */
    const void *key;          /* identity of the stream (per-thread: per thread) */
    int legacy;               /* the legacy stream: never captures */
    int blocking;             /* synchronises with the legacy stream */
};
CUresult fc_stream_resolve(CUstream h, int ptsz, struct fc_sref *out);
/* Puts `dur` ns of work occupying `occ_ppm` of the SMs (0: all) on the
 * stream's device timeline (under fc_mu); `launch` as for fc_schedule. */
void fc_enqueue(struct fc_sref *s, uint64_t dur, uint32_t occ_ppm, int launch);

/* ---- driver: memory (fake_mem.c) ---------------------------------------- */

/* Graphs. A node's duration counts toward its graph's launches (kernels,
 * memsets: nominal ns, before DVFS); deps are the nodes it depends on. */
enum fc_gnode_kind {
    FC_GN_ALLOC = 1, FC_GN_FREE, FC_GN_KERNEL, FC_GN_MEMSET, FC_GN_MEMCPY,
    FC_GN_EVENT_WAIT, FC_GN_EVENT_RECORD
};
struct fc_graph {
    struct fc_obj o;
    uint64_t next_seq;
};
struct fc_gnode {
    struct fc_obj o;       /* owner: graph */
    int kind;              /* enum fc_gnode_kind */
    uint64_t seq;          /* creation order in its graph */
    uint64_t dptr, size;   /* FC_GN_ALLOC / FC_GN_FREE */
    uint64_t work_ns;      /* FC_GN_KERNEL / FC_GN_MEMSET */
    uint32_t occ_ppm;      /* FC_GN_KERNEL / FC_GN_MEMSET: share of the SMs */
    uint64_t mark;         /* scratch for graph walks (under fc_mu) */
    struct fc_kshape {     /* FC_GN_KERNEL: what cuGraphKernelNodeGetParams gives */
        void *func;        /* the CUfunction or CUkernel launched */
        unsigned grid[3], block[3], shmem;
    } kshape;
    size_t ndeps;
    struct fc_gnode *deps[];
};
/* Under fc_mu: the live nodes of graph handle h, the first `max` of them
 * in creation order in out; how many there are, or -1 if h is no graph. */
long fc_graph_nodes_locked(CUgraph h, struct fc_obj **out, size_t max);
/* A new, empty graph (registered), or NULL. */
struct fc_graph *fc_graph_new(void);
void fc_graph_free(struct fc_graph *g);
/* A node of `kind` in g depending on deps[0..n), or NULL (out of memory). */
struct fc_gnode *fc_gnode_new(struct fc_graph *g, int kind, int phys, struct fc_gnode *const *deps,
                              size_t n);
/* A graph memory allocation node: size rounded up to 2 MiB, its address
 * given out now (as cuGraphAddMemAllocNode). */
struct fc_gnode *fc_gnode_alloc(struct fc_graph *g, int phys, uint64_t bytes, struct fc_gnode *const *deps,
                                size_t n);

/* New device address range on a physical device (per-process bump). */
uint64_t fc_va_alloc(int phys, uint64_t size);
/* A device range [p, p+n) inside something live (allocation, mapping). */
int fc_dptr_valid(uint64_t p, uint64_t n);
/* Frees everything owned by a context (under fc_mu). */
void fc_mem_ctx_teardown(struct fc_ctx *ctx);
/* Stream-ordered pools of a device give memory above their release
 * threshold back at synchronisation points (under fc_mu). */
void fc_pools_sync_trim(int phys);
/* Graph memory: first launch of an exec charges it (under fc_mu). */
CUresult fc_graph_exec_first_launch(int phys, uint64_t bytes);
void fc_graph_exec_release(int phys, uint64_t bytes);
/* Validates a graph exec and charges its graph memory on its first launch;
 * *work_ns: nominal duration of its kernel and memset nodes, *occ_ppm the
 * largest share of the SMs one of them occupies (0: no such node). */
CUresult fc_graph_launch_memory(void *exec, uint64_t *work_ns, uint32_t *occ_ppm);
/* Forgets every per-process memory table (fork child). */
void fc_mem_reset(void);

/* ---- driver: MPS client and occupancy (fake_mps.c) ---------------------- */

/* At the first successful cuInit (under fc_mu, after CUDA_VISIBLE_DEVICES):
 * looks for an MPS control daemon and becomes its client on every visible
 * device, or stays an ordinary process. CUDA_SUCCESS either way, or
 * CUDA_ERROR_MPS_MAX_CLIENTS_REACHED / CUDA_ERROR_MPS_CONNECTION_FAILED
 * when a daemon accepted but did not answer "ok <pct>". */
CUresult fc_mps_connect(void);
/* Fork child: the parent's connection is not the child's (closes it). */
void fc_mps_forget(void);
/* 1 when this process is an MPS client on physical device `phys`. */
int fc_mps_client(int phys);
/* Occupancy model: resident blocks of `threads`-thread blocks using
 * `shmem` bytes of dynamic shared memory on one SM (0: cannot run). */
int fc_blocks_per_sm(unsigned threads, size_t shmem);
/* Share of physical device `phys` a grid can occupy, in ppm:
 * min(1, blocks / (SMs x fc_blocks_per_sm)), at least 1 ppm. */
uint32_t fc_occupancy_ppm(int phys, uint64_t blocks, unsigned threads, size_t shmem);

/* ---- driver: execution (fake_exec.c) ------------------------------------ */

void fc_exec_reset(void);
void fc_exec_ctx_teardown(struct fc_ctx *ctx);

/* ---- driver: stream capture (fake_capture.c), all under fc_mu ----------- */

struct fc_capture;
/* Work pushed to a stream: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (legacy
 * stream while a blocking stream of its context captures; those captures
 * are invalidated), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, or success with
 * *cap the stream's active capture (the work becomes a node, see
 * fc_cap_node) or NULL (the work runs). */
CUresult fc_cap_check(struct fc_sref *s, struct fc_capture **cap);
/* Appends a node of `kind` after the stream's current dependencies in the
 * capture's graph; the stream then depends on it. NULL: out of memory. */
struct fc_gnode *fc_cap_node(struct fc_capture *c, struct fc_sref *s, int kind, int phys,
                             uint64_t work_ns);
/* As fc_cap_node for a kernel node of shape k. */
struct fc_gnode *fc_cap_kernel_node(struct fc_capture *c, struct fc_sref *s, int phys, uint64_t work_ns,
                                    const struct fc_kshape *k);
/* As fc_cap_node for a graph memory allocation node. */
struct fc_gnode *fc_cap_alloc_node(struct fc_capture *c, struct fc_sref *s, int phys, uint64_t bytes);
/* Work the driver cannot capture (cuGraphLaunch, cuLaunchGridAsync): the
 * legacy-stream check, then CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and
 * invalidation) on a capturing stream. */
CUresult fc_cap_uncapturable(struct fc_sref *s);
/* cuStreamQuery / cuStreamSynchronize: the legacy-stream check, then
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and invalidation) on a capturing
 * stream, then fc_cap_unsafe. */
CUresult fc_cap_stream_sync(struct fc_sref *s);
/* A potentially unsafe call: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when the
 * calling thread is prohibited from it by an unfinished capture (see
 * cuThreadExchangeStreamCaptureMode), invalidating the captures that
 * prohibit it; else success. */
CUresult fc_cap_unsafe(void);
/* cuCtxSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while any capture
 * of the context is unfinished (invalidating it), in any mode. */
CUresult fc_cap_ctx_sync(struct fc_ctx *c);
/* Event record on a stream: inside a capture the event is marked as
 * recorded there (*captured = 1) and nothing reaches the timeline. */
CUresult fc_cap_event_record(struct fc_sref *s, struct fc_event *e, unsigned flags, int *captured);
/* Uses of an event's completion: CUDA_ERROR_CAPTURED_EVENT while it was
 * last recorded in an active capture (query and synchronize invalidate
 * that capture, elapsed time does not); CUDA_ERROR_INVALID_VALUE when that
 * capture was invalidated or has ended. */
enum fc_event_use { FC_EV_QUERY, FC_EV_SYNC, FC_EV_ELAPSED };
CUresult fc_cap_event_use(struct fc_event *e, enum fc_event_use how);
/* cuStreamWaitEvent: joins, merges, isolation. *handled = 1 when the wait
 * was resolved by the capture model (nothing for the timeline to do). */
CUresult fc_cap_wait(struct fc_sref *s, struct fc_event *e, unsigned flags, int *handled);
/* A stream is destroyed: measured on driver 580, destroying the origin of
 * a capture ends that capture (graph dropped); a stream that joined one
 * just goes (the capture keeps what it captured from it). */
void fc_cap_stream_destroy(struct fc_stream *s);
/* The graph an unfinished capture builds may not be destroyed. */
int fc_cap_graph_busy(const struct fc_graph *g);
void fc_cap_ctx_teardown(struct fc_ctx *ctx);
void fc_cap_reset(void);

#pragma GCC visibility pop

#endif
