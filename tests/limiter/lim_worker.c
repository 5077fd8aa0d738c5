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
 * --path is one of the eight launch wrappers (cuLaunchKernel, ..._ptsz,
 * cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch, ...).
 * --stream launches to a created stream instead of the default stream.
 * --count launches exactly N kernels instead of running for --secs.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
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

static const char *paths[] = {
#define CS_X(sym) #sym,
    CS_LIM_PATHS(CS_X)
#undef CS_X
};

static volatile sig_atomic_t usr1_before, usr1_after;
static void on_usr1_before(int sig) { (void)sig; usr1_before++; }
static void on_usr1_after(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    usr1_after++;
}

static void write_stats(const char *out, uint64_t launches, int64_t elapsed)
{
    if (!out)
        return;
    FILE *f = fopen(out, "w");
    if (!f)
        return;
    struct cushare_limiter_stats s;
    memset(&s, 0, sizeof s);
    void (*get)(struct cushare_limiter_stats *) =
        (void (*)(struct cushare_limiter_stats *))dlsym(RTLD_DEFAULT, "cushare_limiter_stats");
    if (get)
        get(&s);
    fprintf(f, "pid %d\nlaunches %llu\nelapsed_ns %lld\narmed %u\npaced %llu\nmeasured %llu\n"
               "markers %llu\nsleeps %llu\nsleep_ns %llu\nparks %llu\nengaged %llu\n",
            (int)getpid(), (unsigned long long)launches, (long long)elapsed, s.armed,
            (unsigned long long)s.paced_launches, (unsigned long long)s.measured,
            (unsigned long long)s.markers, (unsigned long long)s.sleeps,
            (unsigned long long)s.sleep_ns, (unsigned long long)s.parks,
            (unsigned long long)s.engaged_mask);
    for (int i = 0; i < CS_LIM_NPATHS; i++)
        fprintf(f, "path_%s %llu\n", paths[i], (unsigned long long)s.launches_by_path[i]);
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
    raise(SIGUSR1);
    if (usr1_before != 1) {
        fprintf(stderr, "worker: handler installed before CUDA init not called (%d)\n",
                (int)usr1_before);
        return 4;
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

int main(int argc, char **argv)
{
    double secs = 2;
    unsigned blocks = 1000, sync_every = 4, gap_us = 0, device = 0;
    const char *path = "cuLaunchKernel", *out = NULL, *mode = "launch";
    int use_stream = 0;
    long long count = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--secs"))
            secs = atof(v), i++;
        else if (!strcmp(a, "--blocks"))
            blocks = (unsigned)atoi(v), i++;
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
        else {
            fprintf(stderr, "worker: unknown argument %s\n", a);
            return 2;
        }
    }
    int p = -1;
    for (int i = 0; i < CS_LIM_NPATHS; i++)
        if (!strcmp(path, paths[i]))
            p = i;
    if (p < 0) {
        fprintf(stderr, "worker: unknown path %s\n", path);
        return 2;
    }
    if (!strcmp(mode, "signals")) {
        /* The application's own handler, installed before CUDA starts. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1_before;
        sigaction(SIGUSR1, &sa, NULL);
    }

    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, (int)device));
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
    if (p >= CS_LIM_PATH_cuGraphLaunch) {
        CK(cuGraphCreate(&graph, 0));
        CK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    }

    if (!strcmp(mode, "signals"))
        return signals_check(fn, out);
    if (!strcmp(mode, "idle")) {
        /* Init only: stay alive (for suspend tests of idle processes). */
        struct timespec ts = {.tv_sec = (time_t)secs,
                              .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9)};
        nanosleep(&ts, NULL);
        write_stats(out, 0, 0);
        return 0;
    }

    CUlaunchAttribute coop = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE};
    coop.value.cooperative = 0;
    CUlaunchConfig cfg = {.gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = stream, .attrs = &coop,
                          .numAttrs = 1};
    const int64_t t0 = now_ns(), end = t0 + (int64_t)(secs * 1e9);
    uint64_t n = 0;
    while (count ? n < (uint64_t)count : now_ns() < end) {
        switch (p) {
        case CS_LIM_PATH_cuLaunchKernel:
            CK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, stream, NULL, NULL));
            break;
        case CS_LIM_PATH_cuLaunchKernel_ptsz:
            CK(cuLaunchKernel_ptsz(fn, blocks, 1, 1, 128, 1, 1, 0, stream, NULL, NULL));
            break;
        case CS_LIM_PATH_cuLaunchKernelEx:
            CK(cuLaunchKernelEx(&cfg, fn, NULL, NULL));
            break;
        case CS_LIM_PATH_cuLaunchKernelEx_ptsz:
            CK(cuLaunchKernelEx_ptsz(&cfg, fn, NULL, NULL));
            break;
        case CS_LIM_PATH_cuLaunchCooperativeKernel:
            CK(cuLaunchCooperativeKernel(fn, blocks, 1, 1, 128, 1, 1, 0, stream, NULL));
            break;
        case CS_LIM_PATH_cuLaunchCooperativeKernel_ptsz:
            CK(cuLaunchCooperativeKernel_ptsz(fn, blocks, 1, 1, 128, 1, 1, 0, stream, NULL));
            break;
        case CS_LIM_PATH_cuGraphLaunch:
            CK(cuGraphLaunch(exec, stream));
            break;
        case CS_LIM_PATH_cuGraphLaunch_ptsz:
            CK(cuGraphLaunch_ptsz(exec, stream));
            break;
        }
        n++;
        if (sync_every && n % sync_every == 0)
            CK(p & 1 ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream));
        if (gap_us) {
            struct timespec ts = {.tv_nsec = (long)gap_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    CK(cuCtxSynchronize());
    write_stats(out, n, now_ns() - t0);
    return 0;
}
