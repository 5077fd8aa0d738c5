/*
 * The legacy identity tier on a driver that does not report namespace
 * PIDs (the fake's NVML adds FAKECUDA_NVML_PID_OFFSET): with no broker and
 * no trusted procfs, a limited process's watcher finds the PID NVML uses
 * for it by the serialised before/after probe and records tier "probe"
 * and that PID in its slot; the probe's memory is given back.
 */
#include "mem_test.h"

#include <time.h>

#define OFFSET 100000

static struct cs_ledger_slot *my_slot(struct cs_ledger_header *h)
{
    struct cs_ledger_slot *slots = (void *)((char *)h + h->header_size);
    for (uint32_t i = 0; i < h->slot_count; i++)
        if (slots[i].state == CS_SLOT_LIVE && slots[i].pid == getpid())
            return &slots[i];
    return NULL;
}

int main(void)
{
    context_on_device0();
    CUmodule mod;
    CUfunction f;
    CHECK_EQ(cuModuleLoadData(&mod, "fake"), CUDA_SUCCESS);
    CHECK_EQ(cuModuleGetFunction(&f, mod, "k"), CUDA_SUCCESS);
    struct cs_ledger_header *L = ledger_map();
    struct cs_ledger_slot *s = my_slot(L);
    CHECK(s != NULL);
    /* Limited launches start the watcher, which resolves identity lazily. */
    time_t end = time(NULL) + 15;
    while (time(NULL) < end &&
           __atomic_load_n(&s->identity_tier, __ATOMIC_ACQUIRE) == CS_IDENTITY_UNKNOWN) {
        CHECK_EQ(cuLaunchKernel(f, 100, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
        CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    }
    CHECK_EQ(s->identity_tier, CS_IDENTITY_PROBE);
    CHECK_EQ(s->host_pid, getpid() + OFFSET);
    CHECK_EQ_U(ledger_used(L, 0), 0);
    printf("legacy probe found NVML's pid %d for pid %d\n", s->host_pid, (int)getpid());
    return 0;
}
