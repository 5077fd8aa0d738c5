/*
 * A free the driver refuses leaves the charge in place: the memory is
 * still the tenant's, so the ledger keeps counting it, and the free that
 * the driver then accepts gives it back exactly once. The fake driver
 * refuses the first cuMemFree_v2 and the first cuArrayDestroy of the
 * process (FAKECUDA_FAIL_<symbol>=CODE:1, set by CTest). Budget: 64 MiB.
 */
#include "mem_test.h"

static struct cs_ledger_header *L;
static int me;

#define REFUSED CUDA_ERROR_ILLEGAL_ADDRESS

static void expect_charged(int cat, uint64_t bytes, const char *what)
{
    uint64_t u = ledger_used(L, 0), c = slot_bytes(L, me, 0, cat);
    if (u != bytes || c != bytes) {
        fprintf(stderr, "%s: ledger used %llu, category %d %llu (want %llu for both)\n", what,
                (unsigned long long)u, cat, (unsigned long long)c, (unsigned long long)bytes);
        exit(1);
    }
}

static void linear(struct fakecuda_state *f)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 3 * MiB), CUDA_SUCCESS);
    uint64_t held = f->dev[0].used;
    expect_charged(CS_MEM_DATA, 3 * MiB, "cuMemAlloc");
    CHECK_EQ(cuMemFree_v2(p), REFUSED);
    CHECK_EQ_U(f->dev[0].used, held); /* the driver still holds it */
    expect_charged(CS_MEM_DATA, 3 * MiB, "refused cuMemFree");
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    expect_charged(CS_MEM_DATA, 0, "cuMemFree after a refused one");
    CHECK_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE); /* gone: a third free changes nothing */
    expect_charged(CS_MEM_DATA, 0, "a free of what is gone");
}

static void array(void)
{
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 1024, .Height = 512, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CHECK_EQ(cuArrayCreate_v2(&a, &d), CUDA_SUCCESS);
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    CHECK_EQ(cuArrayGetMemoryRequirements(&req, a, 0), CUDA_SUCCESS);
    expect_charged(CS_MEM_ARRAY, req.size, "cuArrayCreate");
    CHECK_EQ(cuArrayDestroy(a), REFUSED);
    expect_charged(CS_MEM_ARRAY, req.size, "refused cuArrayDestroy");
    CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);
    expect_charged(CS_MEM_ARRAY, 0, "cuArrayDestroy after a refused one");
}

int main(void)
{
    CHECK(getenv("FAKECUDA_FAIL_cuMemFree_v2") && getenv("FAKECUDA_FAIL_cuArrayDestroy"));
    context_on_device0();
    L = ledger_map();
    me = getpid();
    expect_charged(CS_MEM_DATA, 0, "start");
    linear(fake_state());
    array();
    printf("a refused free keeps its charge; the accepted one gives it back once\n");
    return 0;
}
