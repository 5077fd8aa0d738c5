/*
 * nvidia-smi inside a slice: a process that uses NVML and never CUDA sees
 * the slice's total in both memory-info versions (regression: the NVML
 * wrappers once answered "uninitialized" when CUDA had not been loaded).
 */
#include "mem_test.h"

#include <dlfcn.h>

#include "nvml/nvml.h"

int main(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h != NULL);
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nvmlReturn_t (*get)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*m1)(nvmlDevice_t, nvmlMemory_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    nvmlReturn_t (*m2)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    CHECK(init && get && m1 && m2);
    nvmlDevice_t d;
    CHECK_EQ(init(), NVML_SUCCESS);
    CHECK_EQ(get(0, &d), NVML_SUCCESS);
    nvmlMemory_t a;
    nvmlMemory_v2_t b = {.version = nvmlMemory_v2};
    CHECK_EQ(m1(d, &a), NVML_SUCCESS);
    CHECK_EQ(m2(d, &b), NVML_SUCCESS);
    CHECK_EQ_U(a.total, 64 * MiB);
    CHECK_EQ_U(b.total, 64 * MiB);
    CHECK_EQ_U(b.free, 64 * MiB);
    CHECK_EQ_U(b.used, 0);
    printf("NVML-only process sees the 64 MiB slice\n");
    return 0;
}
