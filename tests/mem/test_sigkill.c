/*
 * A process SIGKILLed while holding most of the budget: its bytes go back
 * to the next admission that needs them (the dead slot is reaped once).
 */
#include "mem_test.h"

#include <signal.h>
#include <sys/wait.h>

int main(void)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t kid = fork();
    CHECK(kid >= 0);
    if (kid == 0) {
        context_on_device0();
        CUdeviceptr p;
        CHECK_EQ(cuMemAlloc_v2(&p, 48 * MiB), CUDA_SUCCESS);
        CHECK_EQ(write(pipefd[1], "x", 1), 1);
        pause();
        _exit(0);
    }
    char c;
    CHECK_EQ(read(pipefd[0], &c, 1), 1);
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    CHECK_EQ_U(ledger_used(L, 0), 48 * MiB);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 48 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    uint64_t reaped = L->reaped;
    kill(kid, SIGKILL);
    CHECK_EQ(waitpid(kid, NULL, 0), kid);
    CHECK_EQ(cuMemAlloc_v2(&p, 48 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(L->reaped, reaped + 1);
    CHECK_EQ_U(ledger_used(L, 0), 48 * MiB);
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("a killed holder's 48 MiB went to the next admission\n");
    return 0;
}
