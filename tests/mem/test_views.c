/*
 * Views show the slice and never underflow; the context is charged.
 * Budget 64 MiB, simulated context cost 8 MiB, device 1 GiB.
 */
#include "mem_test.h"

#define LIMIT (64 * MiB)

static void nvml_view(uint64_t *total, uint64_t *free_b, uint64_t *used)
{
    struct nvml_api n = nvml_open();
    nvmlDevice_t d;
    CHECK_EQ(n.by_index(0, &d), NVML_SUCCESS);
    nvmlMemory_t m = nvml_memory(&n, d);
    *total = m.total;
    *free_b = m.free;
    *used = m.used;
}

int main(void)
{
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    int me = getpid();

    /* The context is charged what NVML reports for us, and NVML listing us
     * under getpid() settles the identity tier for cushare status. */
    CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_CONTEXT), 8 * MiB);
    struct cs_ledger_slot *slots = (void *)((char *)L + L->header_size);
    int found = 0;
    for (uint32_t i = 0; i < L->slot_count; i++)
        if (slots[i].state == CS_SLOT_LIVE && slots[i].pid == me) {
            CHECK_EQ(slots[i].identity_tier, CS_IDENTITY_NVML_NS);
            CHECK_EQ(slots[i].host_pid, me);
            found = 1;
        }
    CHECK(found);

    size_t f, t, dt;
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 16 * MiB), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U(t, LIMIT);
    CHECK_EQ_U(f, LIMIT - 24 * MiB);
    CHECK_EQ(cuDeviceTotalMem_v2(&dt, 0), CUDA_SUCCESS);
    CHECK_EQ_U(dt, LIMIT);

    uint64_t nt, nf, nu;
    nvml_view(&nt, &nf, &nu);
    CHECK_EQ_U(nt, LIMIT);
    CHECK_EQ_U(nf, LIMIT - 24 * MiB);
    CHECK_EQ_U(nu, 24 * MiB);

    /* Usage above the limit (e.g. a limit lowered under a running tenant):
     * free is 0, never a huge unsigned number. The extra bytes are held by
     * our own slot: bytes no slot holds would be healed away by the view. */
    struct cs_ledger_slot *mine = NULL;
    for (uint32_t i = 0; i < L->slot_count; i++)
        if (slots[i].state == CS_SLOT_LIVE && slots[i].pid == me)
            mine = &slots[i];
    CHECK(mine != NULL);
    const uint64_t extra = LIMIT + 5 * MiB - L->dev[0].used;
    __atomic_fetch_add(&mine->bytes[0][CS_MEM_DATA], extra, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&L->dev[0].used, extra, __ATOMIC_SEQ_CST);
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U(f, 0);
    CHECK_EQ_U(t, LIMIT);
    nvml_view(&nt, &nf, &nu);
    CHECK_EQ_U(nf, 0);
    CHECK_EQ_U(nu, nt);
    __atomic_fetch_sub(&L->dev[0].used, extra, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&mine->bytes[0][CS_MEM_DATA], extra, __ATOMIC_SEQ_CST);

    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_EQ_U(slot_bytes(L, me, 0, CS_MEM_CONTEXT), 0);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("views show the 64 MiB slice and clamp at zero\n");
    return 0;
}
