/*
 * TEST of the test tool tests/fakecuda (never shipped): the checkpoint
 * state machine as the driver behaves (fake_checkpoint.c). A performer
 * that never called cuInit acts on child processes: transitions out of
 * order are ILLEGAL_STATE; a locked process's calls wait; checkpoint moves
 * exactly what it held off the device and leaves NVML's list; restore
 * without room is OUT_OF_MEMORY and changes nothing; a lock that a call
 * inside the driver outlasts is NOT_READY and leaves the process running;
 * IPC memory is NOT_SUPPORTED; a pid that is gone is OPERATING_SYSTEM.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fakecuda/fakecuda_state.h"
#include "support/support.h"

#define MiB (1024ULL * 1024ULL)

struct child {
    pid_t pid;
    int to[2], from[2];
};

static void put(int fd, long v)
{
    CHECK(write(fd, &v, sizeof v) == (ssize_t)sizeof v);
}

static long get(int fd)
{
    long v;
    cs_read_full(fd, &v, sizeof v, 10000);
    return v;
}

/* Child: a context and `mib` MiB, then commands: 1 allocates 32 MiB, 2
 * queues a long memset and synchronises, 3 makes an IPC handle, 0 exits;
 * each answers its CUresult. */
static void child_main(struct child *c, long mib)
{
    close(c->to[1]);
    close(c->from[0]);
    CUcontext ctx;
    CUdeviceptr d = 0, more;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    put(c->from[1], (long)cuMemAlloc(&d, (size_t)mib * MiB));
    for (;;) {
        long cmd = get(c->to[0]);
        CUresult r = CUDA_SUCCESS;
        if (cmd == 0)
            _exit(0);
        if (cmd == 1)
            r = cuMemAlloc(&more, 32 * MiB);
        if (cmd == 2) {
            r = cuMemsetD8Async(d, 0, 64 * MiB, NULL);
            if (r == CUDA_SUCCESS)
                r = cuStreamSynchronize(NULL);
        }
        if (cmd == 3) {
            CUipcMemHandle h;
            r = cuIpcGetMemHandle(&h, d);
        }
        put(c->from[1], (long)r);
    }
}

static struct child start(long mib)
{
    struct child c;
    CHECK(pipe(c.to) == 0 && pipe(c.from) == 0);
    c.pid = cs_fork_tied();
    CHECK(c.pid >= 0);
    if (c.pid == 0)
        child_main(&c, mib);
    close(c.to[0]);
    close(c.from[1]);
    CHECK_EQ(get(c.from[0]), CUDA_SUCCESS);
    return c;
}

static void stop(struct child *c)
{
    put(c->to[1], 0);
    cs_wait_ok(c->pid, 10000);
}

static struct fakecuda_state *S;

static const struct fakecuda_proc *entry(pid_t pid)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(S, pid);
    CHECK(p != NULL);
    return p;
}

static CUprocessState state(pid_t pid)
{
    CUprocessState st;
    CHECK_EQ(cuCheckpointProcessGetState(pid, &st), CUDA_SUCCESS);
    return st;
}

static uint64_t checkpointed(pid_t pid)
{
    uint64_t sum = 0;
    for (int k = 0; k < FAKECUDA_KIND_COUNT; k++)
        sum += entry(pid)->checkpointed[0][k];
    return sum;
}

static void transitions_and_room(void)
{
    CUcheckpointLockArgs la = {0};
    CUcheckpointCheckpointArgs ca = {{0}};
    CUcheckpointRestoreArgs ra;
    CUcheckpointUnlockArgs ua = {{0}};
    memset(&ra, 0, sizeof ra);
    struct child a = start(64);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_RUNNING);
    CHECK_EQ(cuCheckpointProcessUnlock(a.pid, &ua), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(cuCheckpointProcessCheckpoint(a.pid, &ca), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(cuCheckpointProcessRestore(a.pid, &ra), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(cuCheckpointProcessLock(a.pid, &la), CUDA_SUCCESS);
    CHECK_EQ(cuCheckpointProcessLock(a.pid, &la), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_LOCKED);
    /* A call made while locked waits: it has entered the driver (counted)
     * but allocates nothing before the checkpoint, which moves exactly the
     * 64 MiB held before the lock. */
    uint64_t entered = fakecuda_calls(S, FAKECUDA_CALL_cuMemAlloc_v2);
    put(a.to[1], 1);
    CS_WAIT_FOR(fakecuda_calls(S, FAKECUDA_CALL_cuMemAlloc_v2) > entered, 10000,
                "the locked child's allocation to enter the driver");
    CHECK_EQ(cuCheckpointProcessCheckpoint(a.pid, &ca), CUDA_SUCCESS);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ_U(checkpointed(a.pid), 64 * MiB);
    CHECK_EQ_U(entry(a.pid)->used[0], 0);
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), 0);
    /* No room: another process takes the device. */
    struct child b = start(1000);
    CHECK_EQ(cuCheckpointProcessRestore(a.pid, &ra), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ_U(checkpointed(a.pid), 64 * MiB);
    stop(&b);
    CHECK_EQ(cuCheckpointProcessRestore(a.pid, &ra), CUDA_SUCCESS);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_LOCKED);
    CHECK_EQ_U(entry(a.pid)->used[0], 64 * MiB);
    CHECK_EQ(cuCheckpointProcessUnlock(a.pid, &ua), CUDA_SUCCESS);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_RUNNING);
    CHECK_EQ(get(a.from[0]), CUDA_SUCCESS); /* the waiting allocation proceeds */
    CHECK_EQ_U(entry(a.pid)->used[0], 96 * MiB);
    stop(&a);
    puts("transitions, blocked calls, checkpoint and restore without room: ok");
}

static void lock_timeout(void)
{
    struct child a = start(64);
    put(a.to[1], 2); /* a memset lasting minutes, then a synchronize */
    CS_WAIT_FOR(__atomic_load_n(&entry(a.pid)->in_driver, __ATOMIC_ACQUIRE) == 1, 10000,
                "the child to wait inside the driver");
    CUcheckpointLockArgs la = {0};
    la.timeoutMs = 20;
    CHECK_EQ(cuCheckpointProcessLock(a.pid, &la), CUDA_ERROR_NOT_READY);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_RUNNING);
    kill(a.pid, SIGKILL);
    int st;
    waitpid(a.pid, &st, 0);
    puts("a lock outlasted by a call inside the driver: NOT_READY, still running: ok");
}

static void refusals(void)
{
    CUcheckpointLockArgs la = {0};
    CUcheckpointCheckpointArgs ca = {{0}};
    CUcheckpointUnlockArgs ua = {{0}};
    struct child a = start(16);
    put(a.to[1], 3);
    CHECK_EQ(get(a.from[0]), CUDA_SUCCESS);
    CHECK_EQ(cuCheckpointProcessLock(a.pid, &la), CUDA_SUCCESS);
    CHECK_EQ(cuCheckpointProcessCheckpoint(a.pid, &ca), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(state(a.pid), CU_PROCESS_STATE_LOCKED);
    CHECK_EQ(cuCheckpointProcessUnlock(a.pid, &ua), CUDA_SUCCESS);
    pid_t gone = a.pid;
    stop(&a);
    CUprocessState st;
    CHECK_EQ(cuCheckpointProcessGetState(gone, &st), CUDA_ERROR_OPERATING_SYSTEM);
    CHECK_EQ(cuCheckpointProcessLock(gone, &la), CUDA_ERROR_OPERATING_SYSTEM);
    puts("IPC memory NOT_SUPPORTED, a gone pid OPERATING_SYSTEM: ok");
}

int main(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tmp/fake_checkpoint.state", getenv("CS_BUILD_DIR"));
    unlink(path);
    setenv("FAKECUDA_STATE", path, 1);
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("FAKECUDA_MEMSET_NS_PER_MIB", "1000000000", 1);
    S = fakecuda_state_open(path);
    CHECK(S != NULL);
    transitions_and_room();
    lock_timeout();
    refusals();
    return 0;
}
