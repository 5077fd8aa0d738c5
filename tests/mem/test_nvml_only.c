/*
 * nvidia-smi inside a slice: a process that uses NVML and never CUDA sees
 * the slice's total in both memory-info versions (regression: the NVML
 * wrappers once answered "uninitialized" when CUDA had not been loaded).
 */
#include "mem_test.h"


int main(void)
{
    struct nvml_api n = nvml_open();
    nvmlDevice_t d;
    CHECK_EQ(n.by_index(0, &d), NVML_SUCCESS);
    nvmlMemory_t m = nvml_memory(&n, d);
    CHECK_EQ_U(m.total, 64 * MiB);
    CHECK_EQ_U(m.free, 64 * MiB);
    CHECK_EQ_U(m.used, 0);
    printf("NVML-only process sees the 64 MiB slice\n");
    return 0;
}
