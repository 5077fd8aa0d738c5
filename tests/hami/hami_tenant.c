/*
 * A tenant for the HAMi tests, run under the preloaded library on the fake
 * driver: allocates --mib MiB on device 0, writes DIR/ready.<pid>, then
 * waits for DIR/go to exist (a condition, with a deadline scaled by
 * CS_TEST_SCALE). After "go" it launches one kernel in a second thread
 * while the main thread watches cushare_limiter_stats: DIR/held.<pid>
 * once the monitor's recent_kernel < 0 held the launch back, and
 * DIR/launched.<pid> once the launch returned. It then waits for
 * DIR/stop, frees and exits 0.
 *
 * With a third argument `engaged` it instead launches one kernel (which
 * arms the limiter) and, until DIR/stop, writes DIR/engaged.<pid>.<0|1>
 * whenever cushare_limiter_stats' engaged bit of device 0 changes: how
 * the test sees the monitor's utilization_switch turn pacing on and off.
 * While DIR/tickmark exists it also writes DIR/ticked.<pid> once the
 * limiter's watcher has completed two ticks since it saw the mark.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "limiter/limiter.h"

#define CK(x)                                                                   \
    do {                                                                        \
        CUresult r_ = (x);                                                      \
        if (r_ != CUDA_SUCCESS) {                                               \
            fprintf(stderr, "hami_tenant %d: %s = %d\n", (int)getpid(), #x, r_); \
            exit(3);                                                            \
        }                                                                       \
    } while (0)

static const char *dir;
static CUfunction fn;
static CUcontext ctx;
static volatile int launched;

static void touch_path(const char *p)
{
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
}

static void touch(const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.%d", dir, name, (int)getpid());
    touch_path(p);
}

static int exists(const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static double scale(void)
{
    const char *s = getenv("CS_TEST_SCALE");
    return s && atof(s) > 0 ? atof(s) : 1.0;
}

/* Waits until cond() holds; exits 4 past the (scaled) deadline. */
static void wait_for(int (*cond)(void), const char *what)
{
    struct timespec step = {0, 5 * 1000 * 1000};
    for (long i = 0; i < (long)(12000 * scale()); i++) {
        if (cond())
            return;
        nanosleep(&step, NULL);
    }
    fprintf(stderr, "hami_tenant %d: timed out waiting for %s\n", (int)getpid(), what);
    exit(4);
}

static int go_exists(void) { return exists("go"); }
static int stop_exists(void) { return exists("stop"); }

static struct cushare_limiter_stats stats(void)
{
    static void (*get)(struct cushare_limiter_stats *);
    if (!get)
        *(void **)&get = dlsym(RTLD_DEFAULT, "cushare_limiter_stats");
    struct cushare_limiter_stats s;
    memset(&s, 0, sizeof s);
    if (get)
        get(&s);
    return s;
}

static uint64_t holds(void)
{
    return stats().hami_holds;
}

/* Reports every change of device 0's engaged bit until DIR/stop. */
static void report_engaged(void)
{
    int last = -1;
    uint64_t mark = 0;
    struct timespec step = {0, 2 * 1000 * 1000};
    while (!exists("stop")) {
        struct cushare_limiter_stats st = stats();
        int now = (int)(st.engaged_mask & 1);
        /* DIR/tickmark asks: DIR/ticked.<pid> once the watcher has run two
         * whole ticks since we saw the mark (it has seen what was written
         * before it). */
        if (!exists("tickmark")) {
            mark = 0;
        } else if (!mark) {
            mark = st.watch_ticks + 1;
        } else if (st.watch_ticks > mark) {
            char p[4200];
            snprintf(p, sizeof p, "%s/ticked.%d", dir, (int)getpid());
            touch_path(p);
        }
        if (now != last) {
            char name[32];
            snprintf(name, sizeof name, "engaged.%d", now);
            char p[4200];
            snprintf(p, sizeof p, "%s/%s.%d", dir, name, (int)getpid());
            touch_path(p);
            last = now;
        }
        nanosleep(&step, NULL);
    }
}

static int held_or_launched(void) { return holds() > 0 || launched; }

static void *launcher(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
    __atomic_store_n(&launched, 1, __ATOMIC_RELEASE);
    touch("launched");
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "engaged"))) {
        fprintf(stderr, "usage: hami_tenant DIR MIB [engaged]\n");
        return 2;
    }
    dir = argv[1];
    size_t bytes = (size_t)atol(argv[2]) << 20;
    CUdevice dev;
    CUmodule mod;
    CUdeviceptr p;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, "fake"));
    CK(cuModuleGetFunction(&fn, mod, "k"));
    CK(cuMemAlloc_v2(&p, bytes));
    touch("ready");
    if (argc == 4) {
        CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CK(cuCtxSynchronize());
        report_engaged();
        CK(cuMemFree_v2(p));
        return 0;
    }
    wait_for(go_exists, "go");
    pthread_t t;
    pthread_create(&t, NULL, launcher, NULL);
    wait_for(held_or_launched, "the launch to be held or done");
    if (holds() > 0)
        touch("held");
    pthread_join(t, NULL);
    wait_for(stop_exists, "stop");
    CK(cuMemFree_v2(p));
    return 0;
}
