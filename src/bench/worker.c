/*
 * One `bench init` worker (`cushare-bench __worker MEMFD PIPEFD INDEX`): a
 * fresh program image that loads libcuda.so.1, waits at the release
 * barrier, then times cuInit (and optionally a context and an allocation)
 * into its slot of the shared memfd (init.c says what is timed).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "core/clock.h"
#include "core/config.h"
#include "cushare/phases.h"

/* ---- the worker ---------------------------------------------------------- */

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* The preloaded wrapper when cushare is active, else the driver's export. */
static void *resolve(void *drv, const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p && drv)
        p = dlsym(drv, name);
    return p;
}

static int worker_report_setup(struct bench_header *h, struct bench_slot *s, long index,
                               const char *what)
{
    fprintf(stderr, "cushare: bench: worker %ld: %s\n", index, what);
    s->reason = CS_BENCH_R_SETUP;
    s->t[CS_BENCH_EXIT] = (uint64_t)cs__now_ns();
    __atomic_store_n(&s->state, SLOT_DONE, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->ready, 1, __ATOMIC_ACQ_REL);
    return CS_EXIT_FAIL;
}

/* cushare's own start-up stamps (a no-op without cushare). */
static void copy_phases(cushare_phases_fn phases, struct bench_slot *s)
{
    if (!phases)
        return;
    struct cushare_phases ph;
    memset(&ph, 0, sizeof ph);
    ph.version = CUSHARE_PHASES_VERSION;
    phases(&ph);
    if (ph.version != CUSHARE_PHASES_VERSION)
        return;
    s->t[CS_BENCH_WRAPPER] = ph.wrapper_enter_ns;
    s->t[CS_BENCH_DRIVER] = ph.driver_enter_ns;
    s->t[CS_BENCH_SETUP_BEGIN] = ph.setup_begin_ns;
    s->t[CS_BENCH_LEDGER] = ph.ledger_ready_ns;
    s->t[CS_BENCH_SETUP_END] = ph.setup_end_ns;
    s->t[CS_BENCH_REAL_INIT] = ph.real_init_done_ns;
    s->t[CS_BENCH_JOINED] = ph.joined_ns;
    s->t[CS_BENCH_IDENTITY] = ph.identity_done_ns;
    s->tier = ph.identity_tier < CS_IDENTITY_NTIERS ? ph.identity_tier : CS_IDENTITY_UNKNOWN;
    s->lock_waits = ph.lock_waits;
}

int cs_bench_worker(int argc, char **argv)
{
    long memfd, pipefd, index;
    if (argc != 4 || cs__parse_int(argv[1], 0, INT_MAX, &memfd) ||
        cs__parse_int(argv[2], 0, INT_MAX, &pipefd) ||
        cs__parse_int(argv[3], 0, INT_MAX, &index)) {
        fprintf(stderr, "cushare: bench: __worker is started by `cushare bench init` only\n");
        return CS_EXIT_USAGE;
    }
    struct stat st;
    if (fstat((int)memfd, &st) || (size_t)st.st_size < sizeof(struct bench_header)) {
        fprintf(stderr, "cushare: bench: worker %ld: no result memory\n", index);
        return CS_EXIT_FAIL;
    }
    struct bench_header *h =
        mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)memfd, 0);
    close((int)memfd);
    if (h == MAP_FAILED || h->magic != BENCH_MAGIC || h->version != BENCH_VERSION ||
        h->header_size != sizeof(struct bench_header) ||
        h->slot_size != sizeof(struct bench_slot) || (uint64_t)index >= h->nworkers ||
        (size_t)st.st_size < h->header_size + (size_t)h->nworkers * h->slot_size) {
        fprintf(stderr, "cushare: bench: worker %ld: result memory of another version\n", index);
        return CS_EXIT_FAIL;
    }
    struct bench_slot *s = cs_bench_slot_at(h, (size_t)index);
    s->pid = getpid();
    s->tier = CS_BENCH_TIER_NONE;

    /* Before the barrier, untimed: load the driver library as a program
     * linked against it would have, and resolve every entry point. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv)
        return worker_report_setup(h, s, index, dlerror());
    cushare_phases_fn phases = (cushare_phases_fn)dlsym(RTLD_DEFAULT, CUSHARE_PHASES_SYMBOL);
    if (h->mode == MODE_CUSHARE && !phases)
        return worker_report_setup(h, s, index, "libcushare.so is not preloaded");
    if (phases)
        s->tier = CS_IDENTITY_UNKNOWN;
    init_fn cu_init = (init_fn)resolve(drv, "cuInit");
    device_get_fn cu_device_get = (device_get_fn)resolve(drv, "cuDeviceGet");
    retain_fn cu_retain = (retain_fn)resolve(drv, "cuDevicePrimaryCtxRetain");
    set_current_fn cu_set_current = (set_current_fn)resolve(drv, "cuCtxSetCurrent");
    alloc_fn cu_alloc = (alloc_fn)resolve(drv, "cuMemAlloc_v2");
    free_fn cu_free = (free_fn)resolve(drv, "cuMemFree_v2");
    if (!cu_init || (h->ctx && (!cu_device_get || !cu_retain || !cu_set_current)) ||
        (h->alloc_bytes && (!cu_alloc || !cu_free)))
        return worker_report_setup(h, s, index, "libcuda.so.1 lacks an entry point");

    __atomic_store_n(&s->state, SLOT_ARRIVED, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->ready, 1, __ATOMIC_ACQ_REL);
    char c;
    while (read((int)pipefd, &c, 1) < 0 && errno == EINTR)
        ;
    s->t[CS_BENCH_WOKE] = (uint64_t)cs__now_ns();
    close((int)pipefd);

    enum cs_bench_reason reason = CS_BENCH_R_OK;
    s->t[CS_BENCH_ENTER] = (uint64_t)cs__now_ns();
    CUresult r = cu_init(0);
    s->t[CS_BENCH_RETURNED] = (uint64_t)cs__now_ns();
    s->result = (int32_t)r;
    if (r != CUDA_SUCCESS)
        reason = CS_BENCH_R_INIT;
    copy_phases(phases, s); /* kept if a later step hangs and is killed */
    if (reason == CS_BENCH_R_OK && h->ctx) {
        CUdevice dev;
        CUcontext ctx;
        r = cu_device_get(&dev, 0);
        if (r == CUDA_SUCCESS)
            r = cu_retain(&ctx, dev);
        if (r == CUDA_SUCCESS)
            r = cu_set_current(ctx);
        if (r == CUDA_SUCCESS)
            s->t[CS_BENCH_CTX] = (uint64_t)cs__now_ns();
        else
            reason = CS_BENCH_R_CTX;
    }
    if (reason == CS_BENCH_R_OK && h->alloc_bytes) {
        CUdeviceptr p;
        r = cu_alloc(&p, (size_t)h->alloc_bytes);
        if (r == CUDA_SUCCESS) {
            s->t[CS_BENCH_ALLOC] = (uint64_t)cs__now_ns();
            r = cu_free(p);
        }
        if (r != CUDA_SUCCESS)
            reason = CS_BENCH_R_ALLOC;
    }
    copy_phases(phases, s);
    s->result = (int32_t)r;
    s->reason = reason;
    s->t[CS_BENCH_EXIT] = (uint64_t)cs__now_ns();
    __atomic_store_n(&s->state, SLOT_DONE, __ATOMIC_RELEASE);
    return reason == CS_BENCH_R_OK ? CS_EXIT_OK : CS_EXIT_FAIL;
}
