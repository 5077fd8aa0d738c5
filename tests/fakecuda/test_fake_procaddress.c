/*
 * TEST of the test tool tests/fakecuda (never shipped): the fake driver's
 * cuGetProcAddress / cuGetProcAddress_v2 resolve a base name and CUDA
 * version to the right ABI variant, return exactly what dlsym on the fake
 * returns, honour the per-thread-default-stream flag, and report "not
 * found" / "version not sufficient" like the real driver. Every row of
 * src/hook/hooks.def resolves to its own symbol at its `since` version.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

#include "check.h"
#include "fakecuda/fakecuda_state.h"

typedef CUresult (*gpa_v2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_t)(const char *, void **, int, cuuint64_t);

static void *lib;
static gpa_v2_t gpa;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "dlsym(%s) failed\n", name);
    CHECK(p != NULL);
    return p;
}

/* Resolves base@version/flags, expecting `expect` (a symbol name). */
static void expect_resolves(const char *base, int version, cuuint64_t flags, const char *expect)
{
    void *p = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult r = gpa(base, &p, version, flags, &st);
    if (r != CUDA_SUCCESS || p != sym(expect))
        fprintf(stderr, "%s@%d flags %llu: r=%d got %p want %s=%p\n", base, version,
                (unsigned long long)flags, (int)r, p, expect, sym(expect));
    CHECK_EQ(r, CUDA_SUCCESS);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(p == sym(expect));
}

static void expect_fails(const char *base, int version, CUdriverProcAddressQueryResult want)
{
    void *p = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CHECK_EQ(gpa(base, &p, version, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, want);
    CHECK(p == NULL);
}

enum { V_PLAIN, V_PTSZ, V_PTDS };
struct hook_row {
    const char *base, *symbol;
    int since, variant;
};
static const struct hook_row rows[] = {
#define CS_CU(base, sym, since, variant, ...) {#base, #sym, since, V_##variant},
#define CS_NVML(...)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
};

int main(void)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/libcuda.so.1", FAKECUDA_DIR);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    gpa = (gpa_v2_t)sym("cuGetProcAddress_v2");
    gpa_v1_t gpa1 = (gpa_v1_t)sym("cuGetProcAddress");

    /* Works before cuInit, while other entry points do not. */
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2");
    CUdeviceptr d;
    CHECK_EQ(mem_alloc(&d, 16), CUDA_ERROR_NOT_INITIALIZED);

    expect_resolves("cuMemAlloc", 12000, 0, "cuMemAlloc_v2");
    expect_resolves("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect_resolves("cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2");
    expect_resolves("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz");
    expect_resolves("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel");
    expect_resolves("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuLaunchKernel");
    /* Per-thread variant introduced later than the plain one. */
    expect_resolves("cuLaunchKernel", 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel");
    expect_resolves("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
    expect_resolves("cuCtxCreate", 12000, 0, "cuCtxCreate_v3");
    expect_resolves("cuCtxCreate", 12050, 0, "cuCtxCreate_v4");
    expect_resolves("cuCtxCreate", 13000, 0, "cuCtxCreate_v4");
    expect_resolves("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_resolves("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_resolves("cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2");
    expect_resolves("cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                    "cuStreamSynchronize_ptsz");
    expect_resolves("cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags");
    /* Functions cushare does not intercept resolve too (pass-through). */
    expect_resolves("cuDeviceGetName", 12000, 0, "cuDeviceGetName");
    expect_resolves("cuCtxGetCurrent", 12000, 0, "cuCtxGetCurrent");

    expect_fails("cuMemAllocAsync", 11010, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_fails("cuGetProcAddress", 11020, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_fails("cuNoSuchFunction", 12000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* ABI names are not base names. */
    expect_fails("cuMemAlloc_v2", 12000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

    void *p;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(NULL, &p, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gpa("cuMemAlloc", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gpa("cuMemAlloc", &p, 12000, 0x100, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gpa("cuMemAlloc", &p, 12000, 0, NULL), CUDA_SUCCESS);

    /* The legacy 4-argument entry point. */
    p = NULL;
    CHECK_EQ(gpa1("cuMemAlloc", &p, 12000, 0), CUDA_SUCCESS);
    CHECK(p == sym("cuMemAlloc_v2"));
    CHECK_EQ(gpa1("cuNoSuchFunction", &p, 12000, 0), CUDA_ERROR_NOT_FOUND);

    /* Every intercepted row resolves to itself at its own version. */
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        cuuint64_t flags = rows[i].variant == V_PLAIN ? CU_GET_PROC_ADDRESS_LEGACY_STREAM
                                                      : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        expect_resolves(rows[i].base, rows[i].since, flags, rows[i].symbol);
    }

    /* The call counters of the shared state saw it. */
    struct fakecuda_state *(*state)(void) = (struct fakecuda_state * (*)(void)) sym("fakecuda_driver_state");
    struct fakecuda_state *s = state();
    CHECK(s != NULL);
    CHECK_GE(fakecuda_hook_calls(s, FAKECUDA_HOOK_cuGetProcAddress_v2), 30);
    CHECK_EQ(fakecuda_hook_calls(s, FAKECUDA_HOOK_cuGetProcAddress), 2);
    CHECK_EQ(fakecuda_hook_calls(s, FAKECUDA_HOOK_cuMemAlloc_v2), 1);
    CHECK_EQ(fakecuda_calls(s, FAKECUDA_CALL_cuMemAlloc_v2), 1);
    CHECK_EQ(fakecuda_calls(s, FAKECUDA_CALL_cuInit), 0);
    printf("procaddress: %zu hook rows resolved\n", sizeof(rows) / sizeof(rows[0]));
    return 0;
}
