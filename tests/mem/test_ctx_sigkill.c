/*
 * A process SIGKILLed while it holds two contexts (a primary: 16 MiB, and
 * a created one beside it: 8 MiB) and 8 MiB allocated in one of them: its
 * context charges are reaped with its allocations, by the next admission
 * that needs the room, and the survivor's ledger equals what the fake GPU
 * holds for it. Budget 64 MiB.
 */
#include "mem_test.h"

#include <signal.h>
#include <sys/wait.h>

#define FIRST (16 * MiB)
#define EXTRA (8 * MiB)

static void holder(int ready)
{
    CUcontext primary, extra;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    CHECK_EQ(cuCtxCreate_v2(&extra, 0, 0), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(write(ready, "x", 1), 1);
    pause();
    _exit(0);
}

int main(void)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    fflush(NULL);
    pid_t kid = fork();
    CHECK(kid >= 0);
    if (kid == 0)
        holder(pipefd[1]);
    char c;
    CHECK_EQ(read(pipefd[0], &c, 1), 1);

    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    struct cs_ledger_header *L = ledger_map();
    struct fakecuda_state *F = fake_state();
    CHECK_EQ_U(slot_bytes(L, kid, 0, CS_MEM_CONTEXT), FIRST + EXTRA);
    CHECK_EQ_U(ledger_used(L, 0), FIRST + EXTRA + 8 * MiB);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ_U(slot_bytes(L, getpid(), 0, CS_MEM_CONTEXT), FIRST);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);

    uint64_t reaped = L->reaped;
    kill(kid, SIGKILL);
    CHECK_EQ(waitpid(kid, NULL, 0), kid);
    CHECK_EQ(cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(L->reaped, reaped + 1);
    CHECK_EQ_U(slot_bytes(L, kid, 0, CS_MEM_CONTEXT), 0);
    CHECK_EQ_U(ledger_used(L, 0), FIRST + 40 * MiB);
    const struct fakecuda_proc *me = fakecuda_proc_find(F, getpid());
    CHECK(me != NULL);
    CHECK_EQ_U(fakecuda_load(&me->used[0]), ledger_used(L, 0));
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("a killed holder's two contexts and 8 MiB went to the next admission\n");
    return 0;
}
