/*
 * Helper of the limiter tests (not a test): a CUDA driver-API program run
 * under the preloaded libcushare.so over tests/fakecuda. It launches
 * kernels of --blocks blocks (each lasts blocks * FAKECUDA_NS_PER_BLOCK ns
 * on the simulated GPU) through one launch path until --secs have passed,
 * synchronising every --sync launches, optionally sleeping --gap-us
 * between launches, and writes its counters to --out.
 *
 *   limiter_worker [--secs S] [--blocks B] [--path NAME] [--sync N]
 *                  [--gap-us G] [--device D] [--stream] [--out FILE]
 *                  [--count N] [--mode launch|signals|idle]
 *
 * --path is one of the limiter's launch paths (launch_paths.inc: every
 * KERNEL, GRAPHRUN and MEMSET row of hooks.def, e.g. cuLaunchKernel_ptsz,
 * cuGraphLaunch, cuLaunchGrid, cuMemsetD32Async).
 * --stream launches to a created stream instead of the default stream.
 * --graph-kernels N: the graph paths replay a capture of N --blocks kernels
 * one after another (default: an empty graph, FAKECUDA_GRAPH_US long).
 * --count launches exactly N kernels instead of running for --secs.
 * --mode capture captures graphs under the limiter in every capture mode
 * (capture_check below), then replays the last one for --secs.
 * --mode churn (scripts/soak.sh) allocates and frees random sizes and
 * launches until a stop file appears (churn_loop below):
 *   --max-kib K --hold N --launches L --stop FILE --pause FILE --ack DIR
 * --stop FILE also ends the launch and idle modes (instead of --secs), and
 * --ready FILE is created once the context exists and, in launch mode, the
 * first launch returned: a test waits for conditions, not for time.
 * --log FILE sends the worker's (and so cushare's) stderr to FILE, for a
 * test that waits for what cushare logs.
 * --until-free first launches and syncs one kernel at a time until the
 * limiter's watcher has decided and no device is engaged (the free path),
 * then runs as usual; --out then also holds run_markers, run_paced and
 * run_free: the counters' growth over the run after that point.
 * --trace FILE (launch mode) appends one line per launch, written when it
 * returns: "<entry ns> <return ns> <quiet_waits> <sleeps> <watch_ticks>
 * <engaged_mask>", the launch's CLOCK_MONOTONIC entry and return times and
 * the limiter's counters after it, line-buffered so a test can follow it
 * while the worker runs.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "limiter/limiter.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

#define CK(call)                                                                       \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        if (r_ != CUDA_SUCCESS) {                                                      \
            fprintf(stderr, "worker %d: %s failed: %d\n", (int)getpid(), #call, (int)r_); \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)

static const struct {
    const char *name;
    int per_thread; /* a NULL stream is the per-thread default stream */
} paths[] = {
#define CS_LIM_X(sym, variant, kind) {#sym, variant != CS_PLAIN},
#include "limiter/launch_paths.inc"
#undef CS_LIM_X
};

static volatile sig_atomic_t usr1_before, usr1_after, usr1_mask_kept = 1;
static void on_usr1_before(int sig)
{
    (void)sig;
    usr1_before++;
    /* The kernel blocks the installed handler's sa_mask while it runs: with
     * cushare's handler chained in front, that must still be ours (SIGTERM). */
    sigset_t blocked;
    pthread_sigmask(SIG_BLOCK, NULL, &blocked);
    if (!sigismember(&blocked, SIGTERM))
        usr1_mask_kept = 0;
}
static void on_usr1_after(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    usr1_after++;
}

/* The library's counters (zeros when it is not preloaded). */
static void read_stats(struct cushare_limiter_stats *s)
{
    memset(s, 0, sizeof *s);
    void (*get)(struct cushare_limiter_stats *) =
        (void (*)(struct cushare_limiter_stats *))dlsym(RTLD_DEFAULT, "cushare_limiter_stats");
    if (get)
        get(s);
}

/* Before CUDA is initialised, so everything cushare logs goes there. */
static void log_to(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) {
        fprintf(stderr, "worker: cannot log to %s\n", path);
        exit(2);
    }
    close(fd);
}

/* The counters when the counted run began (--until-free), or NULL. */
static const struct cushare_limiter_stats *run_base;
/* The --trace file, or NULL. */
static FILE *open_trace(const char *path)
{
    if (!path)
        return NULL;
    FILE *f = fopen(path, "we");
    if (!f) {
        fprintf(stderr, "worker: cannot write the trace %s\n", path);
        exit(2);
    }
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

static void trace_launch(FILE *f, int64_t entry, int64_t ret)
{
    if (!f)
        return;
    struct cushare_limiter_stats s;
    read_stats(&s);
    fprintf(f, "%lld %lld %llu %llu %llu %llu\n", (long long)entry, (long long)ret,
            (unsigned long long)s.quiet_waits, (unsigned long long)s.sleeps,
            (unsigned long long)s.watch_ticks, (unsigned long long)s.engaged_mask);
}

static void write_stats(const char *out, uint64_t launches, int64_t elapsed)
{
    if (!out)
        return;
    FILE *f = fopen(out, "w");
    if (!f)
        return;
    struct cushare_limiter_stats s;
    read_stats(&s);
    fprintf(f, "free_launches %llu\n", (unsigned long long)s.free_launches);
    if (run_base)
        fprintf(f, "run_markers %llu\nrun_paced %llu\nrun_free %llu\n",
                (unsigned long long)(s.markers - run_base->markers),
                (unsigned long long)(s.paced_launches - run_base->paced_launches),
                (unsigned long long)(s.free_launches - run_base->free_launches));
    fprintf(f, "pid %d\nlaunches %llu\nelapsed_ns %lld\narmed %u\npaced %llu\nmeasured %llu\n"
               "markers %llu\nsleeps %llu\nsleep_ns %llu\nparks %llu\nengaged %llu\n",
            (int)getpid(), (unsigned long long)launches, (long long)elapsed, s.armed,
            (unsigned long long)s.paced_launches, (unsigned long long)s.measured,
            (unsigned long long)s.markers, (unsigned long long)s.sleeps,
            (unsigned long long)s.sleep_ns, (unsigned long long)s.parks,
            (unsigned long long)s.engaged_mask);
    for (int i = 0; i < CS_LIM_NPATHS; i++)
        fprintf(f, "path_%s %llu\n", paths[i].name, (unsigned long long)s.launches_by_path[i]);
    fprintf(f, "captured %llu\nwindow_waits %llu\nlaw_window_sleep_ns %llu\nquiet_waits %llu\n",
            (unsigned long long)s.captured, (unsigned long long)s.window_waits,
            (unsigned long long)s.law_window_sleep_ns, (unsigned long long)s.quiet_waits);
    fprintf(f, "usr1_before %d\nusr1_after %d\n", (int)usr1_before, (int)usr1_after);
    fclose(f);
}

static void *resume_later(void *arg)
{
    (void)arg;
    struct timespec ts = {.tv_nsec = 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGUSR1);
    return NULL;
}

/* The application's SIGUSR1 handlers keep working under cushare: the one
 * installed before CUDA init is called (chained when cushare installed its
 * HAMi handlers, untouched otherwise), and one installed after init wins.
 * With CUSHARE_HAMI_SIGNALS=1, SIGUSR2 parks the next CUDA call until
 * SIGUSR1 arrives. */
static int signals_check(CUfunction fn, const char *out)
{
    const char *v = getenv("CUSHARE_HAMI_SIGNALS");
    const int hami = v && !strcmp(v, "1");
    CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
    struct sigaction cur;
    sigaction(SIGUSR1, NULL, &cur);
    if (hami == (cur.sa_handler == on_usr1_before)) {
        fprintf(stderr, "worker: SIGUSR1 disposition %s cushare's after init (hami=%d)\n",
                hami ? "is not" : "is", hami);
        return 4;
    }
    /* Chained or not, the application's flags and mask stand: it asked for
     * no SA_RESTART and SIGTERM blocked in its handler. */
    if ((cur.sa_flags & SA_RESTART) || !sigismember(&cur.sa_mask, SIGTERM)) {
        fprintf(stderr, "worker: SIGUSR1 installed with SA_RESTART %s, SIGTERM %s in its mask: "
                "the application's settings were replaced\n",
                (cur.sa_flags & SA_RESTART) ? "on" : "off",
                sigismember(&cur.sa_mask, SIGTERM) ? "kept" : "dropped");
        return 4;
    }
    raise(SIGUSR1);
    if (usr1_before != 1 || !usr1_mask_kept) {
        fprintf(stderr, "worker: handler installed before CUDA init: %d calls, its mask %s\n",
                (int)usr1_before, usr1_mask_kept ? "kept" : "not applied");
        return 4;
    }
    if (hami) {
        /* No application handler for SIGUSR2: ours restarts system calls. */
        struct sigaction usr2;
        sigaction(SIGUSR2, NULL, &usr2);
        if (!(usr2.sa_flags & SA_RESTART)) {
            fprintf(stderr, "worker: SIGUSR2 handler without SA_RESTART\n");
            return 4;
        }
    }
    if (hami) {
        raise(SIGUSR2); /* HAMi: suspend this process */
        pthread_t t;
        pthread_create(&t, NULL, resume_later, NULL);
        int64_t t0 = now_ns();
        CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)); /* parks */
        int64_t parked = now_ns() - t0;
        pthread_join(t, NULL);
        if (parked < 250 * 1000 * 1000ll || usr1_before != 2) {
            fprintf(stderr, "worker: SIGUSR2/SIGUSR1 park %lld ns, app handler calls %d\n",
                    (long long)parked, (int)usr1_before);
            return 5;
        }
        printf("worker: parked %.0f ms between SIGUSR2 and SIGUSR1\n", (double)parked / 1e6);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1_after;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    int before = (int)usr1_before;
    raise(SIGUSR1);
    if (usr1_after != 1 || usr1_before != before) {
        fprintf(stderr, "worker: handler installed after CUDA init: %d calls (before: %d)\n",
                (int)usr1_after, (int)usr1_before - before);
        return 6;
    }
    write_stats(out, 1, 0);
    return 0;
}

/* What one launch of a path puts on the GPU. */
struct target {
    CUfunction fn;
    unsigned blocks;
    CUstream stream;
    CUgraphExec exec;
    CUdeviceptr buf;         /* memset paths */
};

/* A memset writes as many bytes as --blocks asks, in KiB. */
static size_t memset_bytes(unsigned blocks)
{
    return (size_t)blocks * 1024;
}

/* One launch through path p. The memset calls are generated from the
 * MEMSET rows of hooks.def: the locals below carry the parameter names
 * the table gives them. */
static CUresult launch_path(int p, const struct target *t)
{
    CUlaunchAttribute coop = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE};
    coop.value.cooperative = 0;
    CUlaunchConfig cfg = {.gridDimX = t->blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = t->stream, .attrs = &coop,
                          .numAttrs = 1};
    CUDA_LAUNCH_PARAMS multi = {.function = t->fn, .gridDimX = t->blocks, .gridDimY = 1,
                                .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1, .blockDimZ = 1,
                                .hStream = t->stream};
    CUdeviceptr dstDevice = t->buf;
    unsigned char uc = 1;
    unsigned short us = 1;
    unsigned int ui = 1;
    size_t N = memset_bytes(t->blocks) / 4, Height = 4, Width = N / Height, dstPitch = Width * 4;
    CUstream hStream = t->stream;
    (void)dstDevice, (void)uc, (void)us, (void)ui, (void)N, (void)Height, (void)Width;
    (void)dstPitch, (void)hStream;
    switch (p) {
    case CS_LIM_PATH_cuLaunchKernel:
        return cuLaunchKernel(t->fn, t->blocks, 1, 1, 128, 1, 1, 0, t->stream, NULL, NULL);
    case CS_LIM_PATH_cuLaunchKernel_ptsz:
        return cuLaunchKernel_ptsz(t->fn, t->blocks, 1, 1, 128, 1, 1, 0, t->stream, NULL, NULL);
    case CS_LIM_PATH_cuLaunchKernelEx:
        return cuLaunchKernelEx(&cfg, t->fn, NULL, NULL);
    case CS_LIM_PATH_cuLaunchKernelEx_ptsz:
        return cuLaunchKernelEx_ptsz(&cfg, t->fn, NULL, NULL);
    case CS_LIM_PATH_cuLaunchCooperativeKernel:
        return cuLaunchCooperativeKernel(t->fn, t->blocks, 1, 1, 128, 1, 1, 0, t->stream, NULL);
    case CS_LIM_PATH_cuLaunchCooperativeKernel_ptsz:
        return cuLaunchCooperativeKernel_ptsz(t->fn, t->blocks, 1, 1, 128, 1, 1, 0, t->stream,
                                              NULL);
    case CS_LIM_PATH_cuGraphLaunch:
        return cuGraphLaunch(t->exec, t->stream);
    case CS_LIM_PATH_cuGraphLaunch_ptsz:
        return cuGraphLaunch_ptsz(t->exec, t->stream);
    case CS_LIM_PATH_cuLaunch:
        return cuLaunch(t->fn);
    case CS_LIM_PATH_cuLaunchGrid:
        return cuLaunchGrid(t->fn, (int)t->blocks, 1);
    case CS_LIM_PATH_cuLaunchGridAsync:
        return cuLaunchGridAsync(t->fn, (int)t->blocks, 1, t->stream);
    case CS_LIM_PATH_cuLaunchCooperativeKernelMultiDevice:
        return cuLaunchCooperativeKernelMultiDevice(&multi, 1, 0);
#define MS_CASE_MEMSET(sym, args) \
    case CS_LIM_PATH_##sym:       \
        return sym args;
#define MS_CASE_INIT(sym, args)
#define MS_CASE_VIEW(sym, args)
#define MS_CASE_CTX(sym, args)
#define MS_CASE_MEM(sym, args)
#define MS_CASE_POOL(sym, args)
#define MS_CASE_VMM(sym, args)
#define MS_CASE_GRAPH(sym, args)
#define MS_CASE_CAPTURE(sym, args)
#define MS_CASE_KERNEL(sym, args)
#define MS_CASE_GRAPHRUN(sym, args)
#define MS_CASE_INSTANTIATE(sym, args)
#define MS_CASE_GATE(sym, args)
#define MS_CASE_SYNC(sym, args)
#define CS_CU(base, sym, since, variant, family, params, args) MS_CASE_##family(sym, args)
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- capture under the limiter -------------------------------------------- */

static uint64_t stat_of(size_t offset)
{
    struct cushare_limiter_stats s;
    read_stats(&s);
    return *(uint64_t *)((char *)&s + offset);
}
#define STAT(field) stat_of(offsetof(struct cushare_limiter_stats, field))

/* A second application thread launching (not capturing) on its own
 * stream while the main thread captures: its launches are paced and
 * measured, and none of that may touch the capture. */
static struct {
    pthread_barrier_t go, done;
    CUcontext ctx;
    CUfunction fn;
    unsigned blocks;
    int rounds;
    uint64_t before;     /* groups ended before the round (groups_ended) */
} bg;

static uint64_t groups_ended(void);

static void *bg_launcher(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(bg.ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int r = 0; r < bg.rounds; r++) {
        pthread_barrier_wait(&bg.go);
        /* Batches of 16 until one of our groups has ended: an unengaged
         * limiter measures only a sample of the launches (its free path),
         * so a round must be long enough to open a group. */
        for (int b = 0; b < 256 && (b == 0 || groups_ended() <= bg.before); b++)
            for (int i = 0; i < 16; i++)
                CK(cuLaunchKernel(bg.fn, bg.blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
        pthread_barrier_wait(&bg.done);
    }
    return NULL;
}

/* Groups of our launches that have ended: harvested as a measured pair,
 * or charged by estimate because the GPU caught up with them first. Every
 * group ends one way or the other, whatever the CPU does. */
static uint64_t groups_ended(void)
{
    return STAT(measured) + STAT(groups_estimated);
}

/* Waits (bounded, CS_TEST_SCALE) until a group the background round
 * opened has ended, counted from `before` (read before the round: the
 * watcher may harvest before this thread runs again). Nobody else calls
 * the limiter meanwhile. (Waiting for `measured` alone, read after the
 * round, timed out on a loaded CPU: the pair was harvested already, or
 * the bg thread was preempted between launches, the GPU caught up and
 * the group was charged by estimate instead.) */
static void wait_watcher_harvest(uint64_t before)
{
    const char *sc = getenv("CS_TEST_SCALE");
    double scale = sc && atof(sc) > 0 ? atof(sc) : 1;
    int64_t deadline = now_ns() + (int64_t)(10e9 * scale);
    while (groups_ended() <= before) {
        if (now_ns() > deadline) {
            fprintf(stderr, "worker: no group of the background launches ended in 10 s "
                    "(measured %llu, estimated %llu, markers %llu)\n",
                    (unsigned long long)STAT(measured),
                    (unsigned long long)STAT(groups_estimated),
                    (unsigned long long)STAT(markers));
            exit(7);
        }
        struct timespec ts = {.tv_nsec = 2000000};
        nanosleep(&ts, NULL);
    }
}

static const char *mode_name(CUstreamCaptureMode m)
{
    return m == CU_STREAM_CAPTURE_MODE_GLOBAL         ? "global"
           : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread_local"
                                                      : "relaxed";
}

/* Captures into `graph` on `s` the ways real programs do: kernels through
 * each kernel path, a memset, a fork/join over a second stream and a
 * stream-ordered allocation (memory nodes). Returns how many launches of
 * ours went into the capture. */
static int capture_body(CUfunction fn, unsigned blocks, CUstream s, CUstream side)
{
    int launched = 0;
    CUlaunchConfig cfg = {.gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = s};
    CK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernelEx(&cfg, fn, NULL, NULL));
    CK(cuLaunchCooperativeKernel(fn, blocks, 1, 1, 128, 1, 1, 0, s, NULL));
    launched += 3;
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, 1 << 20, s));
    CK(cuMemsetD32Async(p, 7, (1 << 20) / 4, s));
    launched++;
    CUevent fork_ev, join_ev;
    CK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(fork_ev, s));
    CK(cuStreamWaitEvent(side, fork_ev, 0));
    CK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, side, NULL, NULL));
    launched++;
    CK(cuEventRecord(join_ev, side));
    CK(cuStreamWaitEvent(s, join_ev, 0));
    CK(cuMemFreeAsync(p, s));
    return launched;
}

/* One capture in mode m (ToGraph: into an existing graph) while the
 * background thread launches and the watcher harvests. */
static CUgraph capture_once(CUstreamCaptureMode m, int to_graph, CUfunction fn, unsigned blocks,
                            CUstream s, CUstream side)
{
    CUgraph graph = NULL;
    if (to_graph) {
        CK(cuGraphCreate(&graph, 0));
        CK(cuStreamBeginCaptureToGraph(s, graph, NULL, NULL, 0, m));
    } else {
        CK(cuStreamBeginCapture_v2(s, m));
    }
    uint64_t before = groups_ended();
    bg.before = before;
    pthread_barrier_wait(&bg.go);
    pthread_barrier_wait(&bg.done);
    wait_watcher_harvest(before);
    uint64_t markers0 = STAT(markers), captured0 = STAT(captured);
    int launched = capture_body(fn, blocks, s, side);
    uint64_t markers = STAT(markers) - markers0, captured = STAT(captured) - captured0;
    CUgraph out = NULL;
    CUresult r = cuStreamEndCapture(s, &out);
    printf("worker: capture %s%s: end %d, %llu of %d launches passed untouched, %llu markers\n",
           mode_name(m), to_graph ? " (to graph)" : "", (int)r, (unsigned long long)captured,
           launched, (unsigned long long)markers);
    if (r != CUDA_SUCCESS || !out || captured != (uint64_t)launched || markers) {
        fprintf(stderr, "worker: capture %s%s failed under the limiter\n", mode_name(m),
                to_graph ? " to graph" : "");
        exit(8);
    }
    return out;
}

/* Every capture mode, plain and into an existing graph, with a second
 * thread launching meanwhile; then the last graph is replayed for `secs`
 * (the test measures its share of GPU time). */
static int capture_check(CUfunction fn, unsigned blocks, double secs, unsigned sync_every,
                         const char *out)
{
    CUstream s, side;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 8; i++) /* arms the limiter, starts the watcher */
        CK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
    CK(cuStreamSynchronize(s));
    static const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL,
                                                CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                CU_STREAM_CAPTURE_MODE_RELAXED};
    CK(cuCtxGetCurrent(&bg.ctx));
    bg.fn = fn;
    bg.blocks = blocks;
    bg.rounds = 6;
    pthread_barrier_init(&bg.go, NULL, 2);
    pthread_barrier_init(&bg.done, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, bg_launcher, NULL);
    CUgraph graph = NULL;
    for (int i = 0; i < 6; i++)
        graph = capture_once(modes[i / 2], i & 1, fn, blocks, s, side);
    pthread_join(t, NULL);
    CUgraphExec exec;
    CK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    if (out) { /* tells the test the replay starts */
        char mark[4200];
        snprintf(mark, sizeof mark, "%s.replay", out);
        FILE *f = fopen(mark, "w");
        if (f)
            fclose(f);
    }
    const int64_t t0 = now_ns(), end = t0 + (int64_t)(secs * 1e9);
    uint64_t n = 0;
    while (now_ns() < end) {
        CK(cuGraphLaunch(exec, s));
        if (sync_every && ++n % sync_every == 0)
            CK(cuStreamSynchronize(s));
    }
    CK(cuCtxSynchronize());
    write_stats(out, n, now_ns() - t0);
    return 0;
}

/* A graph of n launches of `blocks`-block kernels one after another,
 * captured from a stream of its own (--graph-kernels). */
static CUgraph captured_chain(CUfunction fn, unsigned blocks, unsigned n)
{
    CUstream s;
    CUgraph g;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (unsigned i = 0; i < n; i++)
        CK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
    CK(cuStreamEndCapture(s, &g));
    return g;
}

/* ---- churn (scripts/soak.sh) ---------------------------------------------- */

struct churn_opts {
    unsigned max_kib, hold, launches, blocks, sync_every, gap_us;
    const char *stop, *pause, *ack;
};

static int exists(const char *path)
{
    return path && access(path, F_OK) == 0;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Creates the --ready file, if any. */
static void mark_ready(const char *path)
{
    if (!path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "worker: cannot create %s: %s\n", path, strerror(errno));
        exit(3);
    }
    close(fd);
}

/* While the pause file exists: hold everything, touch nothing, and say so
 * once in ACK/<pid> (the soak compares the ledger with the device then).
 * Returns when it is gone or the stop file appears. */
static void churn_pause(const struct churn_opts *o)
{
    if (!exists(o->pause))
        return;
    char ack[4200];
    snprintf(ack, sizeof ack, "%s/%d", o->ack, (int)getpid());
    FILE *f = fopen(ack, "w");
    if (f)
        fclose(f);
    while (exists(o->pause) && !exists(o->stop))
        sleep_us(20000);
}

/* The primary context, retried while the tenant's budget has no room for
 * it (a refusal is the budget working, not a failure of this process). */
static CUcontext churn_context(CUdevice dev, const struct churn_opts *o, uint64_t *refused)
{
    CUcontext ctx = NULL;
    for (;;) {
        CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev);
        if (r == CUDA_SUCCESS)
            return ctx;
        if (r != CUDA_ERROR_OUT_OF_MEMORY) {
            fprintf(stderr, "worker %d: cuDevicePrimaryCtxRetain failed: %d\n", (int)getpid(),
                    (int)r);
            exit(3);
        }
        ++*refused;
        churn_pause(o);
        if (exists(o->stop))
            return NULL;
        sleep_us(20000);
    }
}

/* Allocation churn and launches under the tenant's budget and share:
 * each round allocates a random size (linear, pitched or managed) while
 * fewer than --hold are held, else frees a random one, memsets one, makes
 * --launches kernel launches and now and then asks for the memory view.
 * A refusal for lack of budget (CUDA_ERROR_OUT_OF_MEMORY) is expected and
 * counted; any other failure exits 3. On the stop file everything is freed
 * and the process exits 0 with one summary line on stdout. */
static int churn_loop(CUdevice dev, const struct churn_opts *o)
{
    uint64_t ctx_refused = 0, allocs = 0, refused = 0, frees = 0, launches = 0, rounds = 0;
    unsigned seed = (unsigned)getpid() ^ (unsigned)now_ns();
    CUcontext ctx = churn_context(dev, o, &ctx_refused);
    if (!ctx) {
        printf("churn pid %d: stopped before it had a context (%llu refused)\n", (int)getpid(),
               (unsigned long long)ctx_refused);
        return 0;
    }
    CK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CUfunction fn;
    CK(cuModuleLoadData(&mod, "fake"));
    CK(cuModuleGetFunction(&fn, mod, "k"));
    enum { MAXHOLD = 64 };
    struct {
        CUdeviceptr p;
        size_t bytes;
        int linear;
    } held[MAXHOLD];
    unsigned n = 0, hold = o->hold > MAXHOLD ? MAXHOLD : o->hold;
    const size_t max_bytes = (size_t)(o->max_kib ? o->max_kib : 1) * 1024;
    while (!exists(o->stop)) {
        churn_pause(o);
        rounds++;
        unsigned r = (unsigned)rand_r(&seed);
        if (n < hold && (n == 0 || r % 100 < 55)) {
            size_t bytes = 1 + (size_t)rand_r(&seed) % max_bytes;
            unsigned kind = (unsigned)rand_r(&seed) % 100;
            CUdeviceptr p = 0;
            CUresult res;
            if (kind < 70) {
                res = cuMemAlloc_v2(&p, bytes);
            } else if (kind < 85) {
                size_t pitch = 0, height = 1 + bytes / 65536, width = 1 + bytes / height;
                res = cuMemAllocPitch_v2(&p, &pitch, width, height, 4);
            } else {
                res = cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
            }
            if (res == CUDA_ERROR_OUT_OF_MEMORY) {
                refused++;
            } else if (res != CUDA_SUCCESS) {
                fprintf(stderr, "worker %d: allocation of %zu bytes (kind %u) failed: %d\n",
                        (int)getpid(), bytes, kind, (int)res);
                exit(3);
            } else {
                held[n].p = p;
                held[n].bytes = bytes;
                held[n].linear = kind < 70;
                n++;
                allocs++;
            }
        } else if (n > 0) {
            unsigned i = (unsigned)rand_r(&seed) % n;
            CK(cuMemFree_v2(held[i].p));
            held[i] = held[--n];
            frees++;
        }
        for (unsigned i = 0; i < n; i++)
            if (held[i].linear && held[i].bytes >= 4) {
                size_t words = held[i].bytes / 4 > 65536 ? 65536 : held[i].bytes / 4;
                CK(cuMemsetD32_v2(held[i].p, 1, words));
                break;
            }
        for (unsigned i = 0; i < o->launches; i++) {
            CK(cuLaunchKernel(fn, o->blocks, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
            launches++;
            if (o->sync_every && launches % o->sync_every == 0)
                CK(cuStreamSynchronize(NULL));
        }
        if (rounds % 16 == 0) {
            size_t free_b, total_b;
            CK(cuMemGetInfo_v2(&free_b, &total_b));
        }
        if (o->gap_us)
            sleep_us(o->gap_us);
    }
    CK(cuCtxSynchronize());
    while (n > 0) {
        CK(cuMemFree_v2(held[--n].p));
        frees++;
    }
    struct cushare_limiter_stats ls;
    read_stats(&ls);
    printf("churn pid %d: rounds %llu allocs %llu refused %llu frees %llu launches %llu "
           "ctx_refused %llu paced %llu sleeps %llu sleep_ms %llu\n",
           (int)getpid(), (unsigned long long)rounds, (unsigned long long)allocs,
           (unsigned long long)refused, (unsigned long long)frees, (unsigned long long)launches,
           (unsigned long long)ctx_refused, (unsigned long long)ls.paced_launches,
           (unsigned long long)ls.sleeps, (unsigned long long)(ls.sleep_ns / 1000000));
    return 0;
}

int main(int argc, char **argv)
{
    double secs = 2;
    unsigned blocks = 1000, sync_every = 4, gap_us = 0, device = 0, graph_kernels = 0;
    const char *path = "cuLaunchKernel", *out = NULL, *mode = "launch", *ready = NULL;
    const char *trace_path = NULL;
    int use_stream = 0, until_free = 0;
    long long count = 0;
    struct churn_opts churn = {.max_kib = 16384, .hold = 4, .launches = 4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--secs"))
            secs = atof(v), i++;
        else if (!strcmp(a, "--blocks"))
            blocks = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--graph-kernels"))
            graph_kernels = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--path"))
            path = v, i++;
        else if (!strcmp(a, "--sync"))
            sync_every = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--gap-us"))
            gap_us = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--device"))
            device = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--out"))
            out = v, i++;
        else if (!strcmp(a, "--mode"))
            mode = v, i++;
        else if (!strcmp(a, "--count"))
            count = atoll(v), i++;
        else if (!strcmp(a, "--stream"))
            use_stream = 1;
        else if (!strcmp(a, "--until-free"))
            until_free = 1;
        else if (!strcmp(a, "--max-kib"))
            churn.max_kib = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--hold"))
            churn.hold = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--launches"))
            churn.launches = (unsigned)atoi(v), i++;
        else if (!strcmp(a, "--ready"))
            ready = v, i++;
        else if (!strcmp(a, "--log"))
            log_to(v), i++;
        else if (!strcmp(a, "--trace"))
            trace_path = v, i++;
        else if (!strcmp(a, "--stop"))
            churn.stop = v, i++;
        else if (!strcmp(a, "--pause"))
            churn.pause = v, i++;
        else if (!strcmp(a, "--ack"))
            churn.ack = v, i++;
        else {
            fprintf(stderr, "worker: unknown argument %s\n", a);
            return 2;
        }
    }
    int p = -1;
    for (int i = 0; i < CS_LIM_NPATHS; i++)
        if (!strcmp(path, paths[i].name))
            p = i;
    if (p < 0) {
        fprintf(stderr, "worker: unknown path %s\n", path);
        return 2;
    }
    if (!strcmp(mode, "signals")) {
        /* The application's own handler, installed before CUDA starts:
         * interrupting (no SA_RESTART), with SIGTERM blocked while it runs. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1_before;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGTERM);
        sigaction(SIGUSR1, &sa, NULL);
    }

    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, (int)device));
    if (!strcmp(mode, "churn")) {
        if (!churn.stop || !churn.pause || !churn.ack) {
            fprintf(stderr, "worker: --mode churn needs --stop, --pause and --ack\n");
            return 2;
        }
        churn.blocks = blocks;
        churn.sync_every = sync_every;
        churn.gap_us = gap_us;
        return churn_loop(dev, &churn);
    }
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CUfunction fn;
    CK(cuModuleLoadData(&mod, "fake"));
    CK(cuModuleGetFunction(&fn, mod, "k"));
    CUstream stream = NULL;
    if (use_stream)
        CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUgraph graph;
    CUgraphExec exec = NULL;
    if (p == CS_LIM_PATH_cuGraphLaunch || p == CS_LIM_PATH_cuGraphLaunch_ptsz) {
        if (graph_kernels)
            graph = captured_chain(fn, blocks, graph_kernels);
        else
            CK(cuGraphCreate(&graph, 0));
        CK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    }

    if (!strcmp(mode, "signals"))
        return signals_check(fn, out);
    if (!strcmp(mode, "capture"))
        return capture_check(fn, blocks, secs, sync_every, out);
    if (!strcmp(mode, "idle")) {
        /* Init only: stay alive (for suspend tests of idle processes). */
        mark_ready(ready);
        if (churn.stop) {
            while (!exists(churn.stop))
                sleep_us(1000);
        } else {
            struct timespec ts = {.tv_sec = (time_t)secs,
                                  .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9)};
            nanosleep(&ts, NULL);
        }
        write_stats(out, 0, 0);
        return 0;
    }

    struct target tg = {.fn = fn, .blocks = blocks, .stream = stream, .exec = exec};
    if (paths[p].name[2] == 'M') /* cuMemset... */
        CK(cuMemAlloc_v2(&tg.buf, memset_bytes(blocks)));
    static struct cushare_limiter_stats base;
    if (until_free) {
        const int64_t give_up = now_ns() + 20000000000ll;
        for (;;) {
            read_stats(&base);
            if (base.watch_ticks > 0 && !base.engaged_mask)
                break;
            if (now_ns() > give_up) {
                fprintf(stderr, "worker: the limiter never released the device\n");
                return 4;
            }
            CK(launch_path(p, &tg));
            CK(cuCtxSynchronize());
            sleep_us(1000);
        }
        run_base = &base;
    }
    FILE *trace = open_trace(trace_path);
    const int64_t t0 = now_ns(), end = t0 + (int64_t)(secs * 1e9);
    uint64_t n = 0;
    while (count ? n < (uint64_t)count : churn.stop ? !exists(churn.stop) : now_ns() < end) {
        int64_t entry = now_ns();
        CK(launch_path(p, &tg));
        trace_launch(trace, entry, now_ns());
        if (n++ == 0)
            mark_ready(ready);
        if (sync_every && n % sync_every == 0)
            CK(paths[p].per_thread ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream));
        if (gap_us) {
            struct timespec ts = {.tv_nsec = (long)gap_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    CK(cuCtxSynchronize());
    write_stats(out, n, now_ns() - t0);
    if (trace)
        fclose(trace);
    return 0;
}
