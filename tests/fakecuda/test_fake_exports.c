/*
 * TEST of the test tool tests/fakecuda (never shipped): the built fake
 * libcuda.so.1 / libnvidia-ml.so.1 export every symbol of src/hook/hooks.def
 * and src/hook/drv.def (each library its own family, not the other's), and
 * every row of fake_exports.def.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "check.h"

#ifndef FAKECUDA_DIR
#error "FAKECUDA_DIR must name the directory of the built fake libraries"
#endif

static const char *const cu_syms[] = {
#define CS_CU(base, sym, ...) #sym,
#define CS_NVML(sym, ...)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
#if __has_include("hook/drv.def")
#define CS_DRV(sym, params) #sym,
#define CS_DRV_NVML(sym, params)
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
#endif
#define FAKE_CU(sym) #sym,
#define FAKE_NVML(sym)
#include "fakecuda/fake_exports.def"
#undef FAKE_CU
#undef FAKE_NVML
};

static const char *const nvml_syms[] = {
#define CS_CU(base, sym, ...)
#define CS_NVML(sym, ...) #sym,
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
#if __has_include("hook/drv.def")
#define CS_DRV(sym, params)
#define CS_DRV_NVML(sym, params) #sym,
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
#endif
#define FAKE_CU(sym)
#define FAKE_NVML(sym) #sym,
#include "fakecuda/fake_exports.def"
#undef FAKE_CU
#undef FAKE_NVML
};

static void *open_lib(const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", FAKECUDA_DIR, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    CHECK(h != NULL);
    return h;
}

int main(void)
{
    void *cu = open_lib("libcuda.so.1");
    void *nv = open_lib("libnvidia-ml.so.1");
    int missing = 0;
    size_t ncu = sizeof(cu_syms) / sizeof(cu_syms[0]);
    size_t nnv = sizeof(nvml_syms) / sizeof(nvml_syms[0]);
    for (size_t i = 0; i < ncu; i++) {
        if (!dlsym(cu, cu_syms[i])) {
            fprintf(stderr, "libcuda.so.1 lacks %s\n", cu_syms[i]);
            missing++;
        }
        /* The driver's names are not NVML's. */
        if (dlsym(nv, cu_syms[i])) {
            fprintf(stderr, "libnvidia-ml.so.1 exports driver symbol %s\n", cu_syms[i]);
            missing++;
        }
    }
    for (size_t i = 0; i < nnv; i++) {
        if (!dlsym(nv, nvml_syms[i])) {
            fprintf(stderr, "libnvidia-ml.so.1 lacks %s\n", nvml_syms[i]);
            missing++;
        }
        if (dlsym(cu, nvml_syms[i])) {
            fprintf(stderr, "libcuda.so.1 exports NVML symbol %s\n", nvml_syms[i]);
            missing++;
        }
    }
    CHECK_EQ(missing, 0);
    /* The lists are not empty by accident (hooks.def has both families). */
    CHECK_GT(ncu, 40);
    CHECK_GT(nnv, 2);
    /* A name the fake does not define is absent (dlsym is not lenient). */
    CHECK(dlsym(cu, "cuNoSuchEntryPoint") == NULL);
    /* The hooks tests use to find the shared state. */
    CHECK(dlsym(cu, "fakecuda_driver_state") != NULL);
    CHECK(dlsym(nv, "fakecuda_nvml_state") != NULL);
    printf("fake exports: %zu driver, %zu NVML names checked\n", ncu, nnv);
    return 0;
}
