/*
 * TEST of the test tool tests/fakecuda (never shipped): processes sharing
 * one FAKECUDA_STATE file share one simulated GPU: the used/peak counters
 * add up across processes, NVML lists each process with its usage, an
 * allocation past the physical total fails with CUDA_ERROR_OUT_OF_MEMORY,
 * concurrent allocators never over-commit, and a process's memory goes
 * when it exits or is killed. A fork child must cuInit again.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fake_scratch.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ULL * 1024ULL)

struct child {
    pid_t pid;
    int to[2];   /* parent -> child */
    int from[2]; /* child -> parent */
};

static void put(int fd, long v)
{
    CHECK(write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
}

static long get(int fd)
{
    long v;
    CHECK(read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
    return v;
}

static void cuda_up(void)
{
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

/* Child protocol: a positive request allocates that many bytes and answers
 * the CUresult; 0 exits normally; -1 allocates 1 MiB until out of memory
 * and answers the count; the child otherwise waits (to be killed). */
static void child_main(struct child *c)
{
    close(c->to[1]);
    close(c->from[0]);
    CUdeviceptr d;
    /* CUDA state does not survive fork(): cuInit first. */
    CHECK_EQ(cuMemAlloc(&d, MiB), CUDA_ERROR_NOT_INITIALIZED);
    cuda_up();
    put(c->from[1], 0);
    for (;;) {
        long req = get(c->to[0]);
        if (req == 0)
            exit(0);
        if (req == -1) {
            long n = 0;
            CUresult r;
            while ((r = cuMemAlloc(&d, MiB)) == CUDA_SUCCESS)
                n++;
            CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
            put(c->from[1], n);
        } else {
            put(c->from[1], (long)cuMemAlloc(&d, (size_t)req));
        }
    }
}

static void spawn(struct child *c)
{
    CHECK(pipe(c->to) == 0 && pipe(c->from) == 0);
    c->pid = fork();
    CHECK(c->pid >= 0);
    if (c->pid == 0)
        child_main(c);
    close(c->to[0]);
    close(c->from[1]);
    CHECK_EQ(get(c->from[0]), 0);
}

static int wait_exit(pid_t pid)
{
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return st;
}

static unsigned nvml_procs(nvmlDevice_t dev, nvmlProcessInfo_t *infos, unsigned max)
{
    unsigned n = 0;
    nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, NULL);
    CHECK(r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE);
    if (r == NVML_SUCCESS)
        return 0;
    CHECK_LE(n, max);
    unsigned short_n = n - 1;
    if (n > 1) /* the size protocol: too small a buffer says how many */
        CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &short_n, infos), NVML_ERROR_INSUFFICIENT_SIZE);
    unsigned cnt = max;
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &cnt, infos), NVML_SUCCESS);
    CHECK_EQ(cnt, n);
    return cnt;
}

static uint64_t nvml_used_of(nvmlProcessInfo_t *infos, unsigned n, pid_t pid)
{
    for (unsigned i = 0; i < n; i++)
        if (infos[i].pid == (unsigned)pid)
            return infos[i].usedGpuMemory;
    return (uint64_t)-1;
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "mpm");
    const char *path = scratch.path;
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("FAKECUDA_CTX_BYTES", "16m", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");

    cuda_up();
    struct fakecuda_state *s = fakecuda_state_open(path);
    CHECK(s != NULL);
    struct fakecuda_device *D = &s->dev[0];
    CHECK_EQ_U(D->total, 1024 * MiB);
    CHECK_EQ_U(fakecuda_load(&D->used), 16 * MiB);

    CUdeviceptr p0;
    CHECK_EQ(cuMemAlloc(&p0, 256 * MiB), CUDA_SUCCESS);

    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t dev;
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);

    struct child a, b;
    spawn(&a);
    spawn(&b);
    CHECK_EQ(get((put(a.to[1], (long)(300 * MiB)), a.from[0])), CUDA_SUCCESS);
    CHECK_EQ(get((put(b.to[1], (long)(200 * MiB)), b.from[0])), CUDA_SUCCESS);

    /* Three contexts, three allocations, one shared device. */
    uint64_t expect = 3 * 16 * MiB + (256 + 300 + 200) * MiB;
    CHECK_EQ_U(fakecuda_load(&D->used), expect);
    CHECK_EQ_U(fakecuda_load(&D->peak_used), expect);
    CHECK_EQ_U(fakecuda_load(&D->used_by_kind[FAKECUDA_KIND_CONTEXT]), 48 * MiB);
    CHECK_EQ_U(fakecuda_load(&D->used_by_kind[FAKECUDA_KIND_ALLOC]), 756 * MiB);
    CHECK_EQ_U(fakecuda_load(&D->allocs), 6);
    const struct fakecuda_proc *pa = fakecuda_proc_find(s, a.pid);
    CHECK(pa != NULL);
    CHECK_EQ_U(fakecuda_load(&pa->used[0]), 316 * MiB);
    CHECK_EQ_U(fakecuda_load(&pa->kind_used[0][FAKECUDA_KIND_ALLOC]), 300 * MiB);
    CHECK_EQ(fakecuda_hook_calls(s, FAKECUDA_HOOK_cuMemAlloc_v2), 5); /* 3 successes, 2 refused before cuInit */

    size_t fr, tot;
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(tot, 1024 * MiB);
    CHECK_EQ_U(fr, 1024 * MiB - expect);

    nvmlMemory_t m;
    CHECK_EQ(nvmlDeviceGetMemoryInfo(dev, &m), NVML_SUCCESS);
    CHECK_EQ_U(m.used, expect);
    CHECK_EQ_U(m.free, 1024 * MiB - expect);

    nvmlProcessInfo_t infos[8];
    unsigned n = nvml_procs(dev, infos, 8);
    CHECK_EQ(n, 3);
    CHECK_EQ_U(nvml_used_of(infos, n, getpid()), 272 * MiB);
    CHECK_EQ_U(nvml_used_of(infos, n, a.pid), 316 * MiB);
    CHECK_EQ_U(nvml_used_of(infos, n, b.pid), 216 * MiB);

    /* Past the physical total: refused, counted, nothing charged. */
    CUdeviceptr big;
    CHECK_EQ(cuMemAlloc(&big, 300 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(get((put(b.to[1], (long)(250 * MiB)), b.from[0])), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_U(fakecuda_load(&D->failed_allocs), 2);
    CHECK_EQ_U(fakecuda_load(&D->used), expect);
    CHECK_EQ(get((put(b.to[1], (long)(200 * MiB)), b.from[0])), CUDA_SUCCESS);
    expect += 200 * MiB;
    CHECK_EQ_U(fakecuda_load(&D->used), expect);
    CHECK_EQ_U(fakecuda_load(&D->peak_used), expect);

    /* A exits normally: the driver frees its memory at teardown. */
    put(a.to[1], 0);
    int st = wait_exit(a.pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    expect -= 316 * MiB;
    CHECK_EQ_U(fakecuda_load(&D->used), expect);
    CHECK(fakecuda_proc_find(s, a.pid) == NULL);

    /* B is killed: its entry is stale until someone looks (NVML here). */
    kill(b.pid, SIGKILL);
    wait_exit(b.pid);
    CHECK_EQ(nvmlDeviceGetMemoryInfo(dev, &m), NVML_SUCCESS);
    expect = 272 * MiB;
    CHECK_EQ_U(m.used, expect);
    CHECK_EQ_U(fakecuda_load(&D->used), expect);
    CHECK_EQ(nvml_procs(dev, infos, 8), 1);
    CHECK_EQ_U(fakecuda_load(&D->peak_used), 1004 * MiB);

    /* Two processes racing for the last megabytes never over-commit. */
    CHECK_EQ(cuMemFree(p0), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(p0), CUDA_ERROR_INVALID_VALUE);
    struct child c, d;
    spawn(&c);
    spawn(&d);
    put(c.to[1], -1);
    put(d.to[1], -1);
    long nc = get(c.from[0]), nd = get(d.from[0]);
    CHECK_EQ(nc + nd, 1024 - 3 * 16);
    CHECK_EQ_U(fakecuda_load(&D->used), 1024 * MiB);
    CHECK_EQ_U(fakecuda_load(&D->failed_allocs), 4);
    put(c.to[1], 0);
    put(d.to[1], 0);
    wait_exit(c.pid);
    wait_exit(d.pid);
    CHECK_EQ_U(fakecuda_load(&D->used), 16 * MiB);

    /* Releasing the last context frees the rest and leaves NVML's list. */
    CHECK_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&D->used), 0);
    CHECK_EQ(nvml_procs(dev, infos, 8), 0);
    CHECK(fakecuda_proc_find(s, getpid()) == NULL);

    fakecuda_state_close(s);
    fake_scratch_close(&scratch);
    printf("multiprocess memory: ok (%ld + %ld MiB raced)\n", nc, nd);
    return 0;
}
