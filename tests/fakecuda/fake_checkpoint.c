/*
 * TEST TOOL (tests/fakecuda), never shipped: the driver's checkpoint API
 * (cuCheckpointProcess*), modelled as measured on the H200 (driver 580,
 * docs/parking.md "What the driver requires"):
 *
 *   RUNNING --Lock--> LOCKED --Checkpoint--> CHECKPOINTED --Restore--> LOCKED
 *   LOCKED --Unlock--> RUNNING; any other transition: ILLEGAL_STATE.
 *
 * - Any process may act on any pid it can see and may signal (same uid or
 *   root): otherwise CUDA_ERROR_OPERATING_SYSTEM, as the driver answers a
 *   foreign user or a pid outside the caller's PID namespace. A process may
 *   act on itself. The caller needs no cuInit.
 * - Lock waits for calls already inside the driver (threads waiting on the
 *   GPU in a synchronize) up to timeoutMs (0: for ever); on timeout it
 *   answers CUDA_ERROR_NOT_READY and the process stays RUNNING. While the
 *   process is not RUNNING its further calls block, except the few the
 *   driver answers meanwhile (cuMemGetInfo, the checkpoint API, version and
 *   error-string queries).
 * - Checkpoint waits for work already queued, then moves every byte the
 *   process holds off the device (it leaves NVML's process list). Memory
 *   it imported from another process, memory another process imported
 *   from it, and legacy IPC exports: CUDA_ERROR_NOT_SUPPORTED (the driver
 *   does not support IPC memory).
 * - Restore puts the bytes back: CUDA_ERROR_OUT_OF_MEMORY, state unchanged,
 *   when the device cannot hold them now.
 * - A process that dies in any state frees everything (the checkpoint is
 *   in its own host memory).
 * The state lives in the process's entry of the shared state, so a
 * performer in another process sees and changes it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_internal.h"

static long futex(uint32_t *w, int op, uint32_t v, const struct timespec *ts)
{
    return syscall(SYS_futex, w, op, v, ts, NULL, 0);
}

static int answered_while_locked(enum fakecuda_call c)
{
    switch (c) {
    case FAKECUDA_CALL_cuMemGetInfo_v2:
    case FAKECUDA_CALL_cuDriverGetVersion:
    case FAKECUDA_CALL_cuGetErrorName:
    case FAKECUDA_CALL_cuGetErrorString:
    case FAKECUDA_CALL_cuCheckpointProcessGetState:
    case FAKECUDA_CALL_cuCheckpointProcessLock:
    case FAKECUDA_CALL_cuCheckpointProcessCheckpoint:
    case FAKECUDA_CALL_cuCheckpointProcessRestore:
    case FAKECUDA_CALL_cuCheckpointProcessUnlock:
        return 1;
    default:
        return 0;
    }
}

void fc_ckpt_gate(enum fakecuda_call c)
{
    struct fakecuda_proc *p = fc_proc_peek();
    if (!p || answered_while_locked(c))
        return;
    for (;;) {
        uint32_t st = __atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE);
        if (st == CU_PROCESS_STATE_RUNNING)
            return;
        futex(&p->ckpt_state, FUTEX_WAIT, st, NULL);
    }
}

void fc_ckpt_sleep_until(uint64_t ns)
{
    struct fakecuda_proc *p = fc_proc_peek();
    if (p)
        __atomic_fetch_add(&p->in_driver, 1, __ATOMIC_SEQ_CST);
    fc_sleep_until(ns);
    if (p)
        __atomic_fetch_sub(&p->in_driver, 1, __ATOMIC_SEQ_CST);
}

/* The entry of `pid`, checked as the driver checks the caller's right to
 * act on it. */
static CUresult target(int pid, struct fakecuda_proc **out)
{
    *out = NULL;
    if (pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (kill(pid, 0))
        return CUDA_ERROR_OPERATING_SYSTEM; /* not visible from here, or another user's */
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++)
        if (__atomic_load_n(&fc_S->proc[i].pid, __ATOMIC_ACQUIRE) == pid) {
            *out = &fc_S->proc[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_INITIALIZED; /* not a CUDA process */
}

#define CKPT_BEGIN(sym, pid, p)                                    \
    CUresult r_ = fc_enter(FAKECUDA_CALL_##sym, 0);                \
    if (r_ != CUDA_SUCCESS)                                        \
        return r_;                                                 \
    struct fakecuda_proc *p;                                       \
    r_ = target(pid, &p);                                          \
    if (r_ != CUDA_SUCCESS)                                        \
        return r_

static void set_state(struct fakecuda_proc *p, CUprocessState st)
{
    __atomic_store_n(&p->ckpt_state, (uint32_t)st, __ATOMIC_SEQ_CST);
    futex(&p->ckpt_state, FUTEX_WAKE, INT32_MAX, NULL);
}

/* CAS from `from` to `to` under the state lock: ILLEGAL_STATE otherwise. */
static CUresult move_state(struct fakecuda_proc *p, CUprocessState from, CUprocessState to)
{
    uint32_t cur = (uint32_t)from;
    if (!__atomic_compare_exchange_n(&p->ckpt_state, &cur, (uint32_t)to, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return CUDA_ERROR_ILLEGAL_STATE;
    futex(&p->ckpt_state, FUTEX_WAKE, INT32_MAX, NULL);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    CKPT_BEGIN(cuCheckpointProcessGetState, pid, p);
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    *state = (CUprocessState)__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    CKPT_BEGIN(cuCheckpointProcessLock, pid, p);
    unsigned tmo = args ? args->timeoutMs : 0;
    CUresult r = move_state(p, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
    if (r != CUDA_SUCCESS)
        return r;
    /* Calls already inside the driver finish first. */
    uint64_t deadline = fc_now_ns() + (uint64_t)tmo * 1000000ull;
    while (__atomic_load_n(&p->in_driver, __ATOMIC_SEQ_CST)) {
        if (tmo && fc_now_ns() >= deadline) {
            set_state(p, CU_PROCESS_STATE_RUNNING);
            return CUDA_ERROR_NOT_READY;
        }
        fc_sleep_until(fc_now_ns() + 200000);
    }
    return CUDA_SUCCESS;
}

/* Whether p's memory includes what the driver cannot checkpoint. */
static int holds_ipc_locked(const struct fakecuda_proc *p)
{
    int idx = (int)(p - fc_S->proc);
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++)
        if (p->imported[d])
            return 1;
    for (int i = 0; i < FAKECUDA_MAX_EXPORTS; i++) {
        const struct fakecuda_export *e = &fc_S->exports[i];
        if (e->kind == FAKECUDA_EXPORT_FREE)
            continue;
        if (e->holds[idx])
            return 1;
        if (e->pid == p->pid && (e->kind == FAKECUDA_EXPORT_IPC || e->importers))
            return 1;
    }
    return 0;
}

static uint64_t queued_until(int pid)
{
    uint64_t until = 0;
    for (uint32_t d = 0; d < fc_S->ndevices && d < FAKECUDA_MAX_DEVICES; d++) {
        struct fakecuda_device *D = &fc_S->dev[d];
        fakecuda_lock(&D->lock);
        uint64_t h = D->ring_head;
        for (uint64_t k = 0; k < FAKECUDA_RING && k < h; k++) {
            const struct fakecuda_interval *iv = &D->ring[(h - 1 - k) % FAKECUDA_RING];
            if (iv->pid == pid && iv->end_ns > until)
                until = iv->end_ns;
        }
        fakecuda_unlock(&D->lock);
    }
    return until;
}

FC_EXPORT CUresult CUDAAPI cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    (void)args;
    CKPT_BEGIN(cuCheckpointProcessCheckpoint, pid, p);
    if (__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE) != CU_PROCESS_STATE_LOCKED)
        return CUDA_ERROR_ILLEGAL_STATE;
    /* Work already submitted completes first: the end of its latest
     * interval on each device's timeline. */
    fc_sleep_until(queued_until(p->pid));
    while (__atomic_load_n(&p->in_driver, __ATOMIC_SEQ_CST))
        fc_sleep_until(fc_now_ns() + 200000);
    fakecuda_lock(&fc_S->lock);
    if (holds_ipc_locked(p)) {
        fakecuda_unlock(&fc_S->lock);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++) {
        struct fakecuda_device *D = &fc_S->dev[d];
        uint64_t moved = 0;
        for (int k = 0; k < FAKECUDA_KIND_COUNT; k++) {
            uint64_t b = __atomic_exchange_n(&p->kind_used[d][k], 0, __ATOMIC_ACQ_REL);
            p->checkpointed[d][k] += b;
            __atomic_fetch_sub(&D->used_by_kind[k], b, __ATOMIC_ACQ_REL);
            moved += b;
        }
        __atomic_fetch_sub(&p->used[d], moved, __ATOMIC_ACQ_REL);
        __atomic_fetch_sub(&D->used, moved, __ATOMIC_ACQ_REL);
    }
    p->checkpoints++;
    set_state(p, CU_PROCESS_STATE_CHECKPOINTED);
    fakecuda_unlock(&fc_S->lock);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    CKPT_BEGIN(cuCheckpointProcessRestore, pid, p);
    if (args && args->gpuPairsCount)
        return CUDA_ERROR_NOT_SUPPORTED; /* remapping GPUs is not modelled */
    fc_reap_dead(); /* the driver freed what dead processes held */
    fakecuda_lock(&fc_S->lock);
    if (__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE) != CU_PROCESS_STATE_CHECKPOINTED) {
        fakecuda_unlock(&fc_S->lock);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++) {
        uint64_t want = 0;
        for (int k = 0; k < FAKECUDA_KIND_COUNT; k++)
            want += p->checkpointed[d][k];
        struct fakecuda_device *D = &fc_S->dev[d];
        if (want && __atomic_load_n(&D->used, __ATOMIC_ACQUIRE) + want > D->total) {
            __atomic_fetch_add(&D->failed_allocs, 1, __ATOMIC_RELAXED);
            fakecuda_unlock(&fc_S->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++) {
        struct fakecuda_device *D = &fc_S->dev[d];
        for (int k = 0; k < FAKECUDA_KIND_COUNT; k++) {
            uint64_t b = p->checkpointed[d][k];
            p->checkpointed[d][k] = 0;
            __atomic_fetch_add(&p->kind_used[d][k], b, __ATOMIC_ACQ_REL);
            __atomic_fetch_add(&D->used_by_kind[k], b, __ATOMIC_ACQ_REL);
            __atomic_fetch_add(&p->used[d], b, __ATOMIC_ACQ_REL);
            uint64_t now = __atomic_add_fetch(&D->used, b, __ATOMIC_ACQ_REL);
            if (now > D->peak_used)
                D->peak_used = now;
        }
    }
    p->restores++;
    set_state(p, CU_PROCESS_STATE_LOCKED);
    fakecuda_unlock(&fc_S->lock);
    return CUDA_SUCCESS;
}

FC_EXPORT CUresult CUDAAPI cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    (void)args;
    CKPT_BEGIN(cuCheckpointProcessUnlock, pid, p);
    return move_state(p, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
}
