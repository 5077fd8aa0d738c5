/*
 * Views settle the ledger before they answer: after SIGKILL churn,
 * cuMemGetInfo must not count what dead processes held as used, since
 * frameworks size their pools from that figure. Two holders are killed
 * while this process lives and has already claimed its slot, so neither a
 * claim nor a refused admission reaps them: cuMemGetInfo after the first
 * death and NVML's memory info after the second must not count them, nor
 * what the first left charged beyond its slot (a death inside a charge).
 * Budget 64 MiB, 8 MiB per context.
 */
#include "mem_test.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define LIMIT (64 * MiB)
#define CTX (8 * MiB)

static pid_t holder(uint64_t bytes)
{
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    fflush(NULL);
    pid_t kid = fork();
    CHECK(kid >= 0);
    if (kid == 0) {
        CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0); /* not past a failed test */
        context_on_device0();
        CUdeviceptr p;
        CHECK_EQ(cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
        CHECK_EQ(write(fds[1], "x", 1), 1);
        for (;;)
            pause();
    }
    char c;
    CHECK_EQ(read(fds[0], &c, 1), 1);
    close(fds[0]);
    close(fds[1]);
    return kid;
}

static void kill_holder(pid_t kid)
{
    CHECK_EQ(kill(kid, SIGKILL), 0);
    int st;
    CHECK_EQ(waitpid(kid, &st, 0), kid);
    CHECK(WIFSIGNALED(st));
}

int main(void)
{
    /* Both holders first: CUDA does not survive a fork in the parent. */
    pid_t h1 = holder(24 * MiB);
    pid_t h2 = holder(8 * MiB);
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    CHECK_EQ_U(ledger_used(L, 0), 3 * CTX + 24 * MiB + 8 * MiB);
    /* h1 is about to die inside a charge of 4 MiB it never records. */
    __atomic_fetch_add(&L->dev[0].used, 4 * MiB, __ATOMIC_SEQ_CST);

    const uint64_t reaped = L->reaped;
    kill_holder(h1);
    CHECK_EQ_U(ledger_used(L, 0), 3 * CTX + 36 * MiB); /* nothing ran at its death */
    size_t f, t;
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U(t, LIMIT);
    CHECK_EQ_U(f, LIMIT - 2 * CTX - 8 * MiB);
    CHECK_EQ_U(L->reaped, reaped + 1);
    CHECK_EQ_U(ledger_used(L, 0), 2 * CTX + 8 * MiB);

    kill_holder(h2);
    struct nvml_api n = nvml_open();
    nvmlDevice_t d;
    CHECK_EQ(n.by_index(0, &d), NVML_SUCCESS);
    nvmlMemory_t m = nvml_memory(&n, d);
    CHECK_EQ_U(m.total, LIMIT);
    CHECK_EQ_U(m.free, LIMIT - CTX);
    CHECK_EQ_U(m.used, CTX);
    CHECK_EQ_U(L->reaped, reaped + 2);
    CHECK_EQ_U(ledger_used(L, 0), CTX);

    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("views did not count two killed holders nor what one left beyond its slot\n");
    return 0;
}
