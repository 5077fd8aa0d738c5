/*
 * Two processes race 1000 allocations each against one 64 MiB budget. The
 * fake driver's own high-water mark proves the budget was never exceeded,
 * and some requests were refused, so the race was real.
 */
#include "mem_test.h"

#include <sys/wait.h>

#define LIMIT (64 * MiB)
#define ROUNDS 1000

static int worker(int seed, int *refused_out)
{
    context_on_device0();
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
    return 0;
}

int main(void)
{
    struct fakecuda_state *F = NULL;
    int *refused = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(refused != MAP_FAILED);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0)
            _exit(worker(i + 1, &refused[i]));
    }
    for (int i = 0; i < 2; i++) {
        int st;
        CHECK_EQ(waitpid(kids[i], &st, 0), kids[i]);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 0);
    }
    F = fake_state();
    struct cs_ledger_header *L = ledger_map();
    printf("fake driver peak %llu MiB of a %llu MiB budget; refused %d + %d\n",
           (unsigned long long)(F->dev[0].peak_used / MiB), (unsigned long long)(LIMIT / MiB),
           refused[0], refused[1]);
    CHECK_LE_U(F->dev[0].peak_used, LIMIT);
    CHECK_GT(F->dev[0].peak_used, LIMIT / 2);
    CHECK_GT(refused[0] + refused[1], 0);
    CHECK_LE_U(L->dev[0].peak, LIMIT);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    return 0;
}
