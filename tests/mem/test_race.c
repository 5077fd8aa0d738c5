/*
 * Two processes race 1000 allocations each against one 64 MiB budget. The
 * fake driver's own high-water mark proves the budget was never exceeded.
 * That the two really competed is not left to the scheduler: each first
 * holds a 24 MiB base, and a start gate releases the rounds only once both
 * bases are charged; a second gate keeps both bases until both finished.
 * So every round of either process is admitted against the other's
 * charge (16 MiB of headroom: each must see refusals), and the peak must
 * include both bases.
 */
#include "mem_test.h"

#include <sys/wait.h>

#define LIMIT (64 * MiB)
#define ROUNDS 1000
#define BASE (24 * MiB)

static struct cs_gate start, finish;

static int worker(int seed, int *refused_out)
{
    context_on_device0();
    CUdeviceptr base;
    CHECK_EQ(cuMemAlloc_v2(&base, BASE), CUDA_SUCCESS);
    cs_gate_arrive(&start);
    CUdeviceptr held[16] = {0};
    uint64_t sizes[16] = {0};
    unsigned x = (unsigned)seed * 2654435761u + 1;
    int refused = 0;
    for (int i = 0; i < ROUNDS; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % 16);
        if (held[k]) {
            CHECK_EQ(cuMemFree_v2(held[k]), CUDA_SUCCESS);
            held[k] = 0;
            continue;
        }
        sizes[k] = (1 + (x >> 16) % 8) * MiB;
        CUresult r = cuMemAlloc_v2(&held[k], sizes[k]);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            held[k] = 0;
            refused++;
        } else {
            CHECK_EQ(r, CUDA_SUCCESS);
        }
    }
    for (int k = 0; k < 16; k++)
        if (held[k])
            CHECK_EQ(cuMemFree_v2(held[k]), CUDA_SUCCESS);
    *refused_out = refused;
    cs_gate_arrive(&finish);
    CHECK_EQ(cuMemFree_v2(base), CUDA_SUCCESS);
    return 0;
}

int main(void)
{
    struct fakecuda_state *F = NULL;
    int *refused = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(refused != MAP_FAILED);
    pid_t kids[2];
    cs_gate_init(&start);
    cs_gate_init(&finish);
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0)
            _exit(worker(i + 1, &refused[i]));
    }
    cs_gate_open(&start, 2, 30000);
    cs_gate_open(&finish, 2, 60000);
    for (int i = 0; i < 2; i++)
        cs_wait_ok(kids[i], 30000);
    F = fake_state();
    struct cs_ledger_header *L = ledger_map();
    printf("fake driver peak %llu MiB of a %llu MiB budget; refused %d + %d\n",
           (unsigned long long)(F->dev[0].peak_used / MiB), (unsigned long long)(LIMIT / MiB),
           refused[0], refused[1]);
    CHECK_LE_U(F->dev[0].peak_used, LIMIT);
    CHECK_GE(F->dev[0].peak_used, 2 * BASE);
    CHECK_GT(refused[0], 0);
    CHECK_GT(refused[1], 0);
    CHECK_LE_U(L->dev[0].peak, LIMIT);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    return 0;
}
