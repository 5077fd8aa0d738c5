/*
 * Everything derived from src/hook/hooks.def. This header and drv.h are the
 * only places that include cuda.h with the internal API-version switch,
 * which makes cuda.h declare every exported ABI variant (cuMemAlloc_v2,
 * cuLaunchKernel_ptsz, the 4-argument cuGetProcAddress, ...) so each of our
 * wrappers is checked against the real prototype.
 */
#ifndef CS_HOOK_HOOKS_H
#define CS_HOOK_HOOKS_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stddef.h>

#include "nvml/nvml.h"

#define CS_EXPORT __attribute__((visibility("default")))

enum cs_variant { CS_PLAIN = 0, CS_PTSZ = 1, CS_PTDS = 2 };
enum cs_lib { CS_LIB_CUDA = 0, CS_LIB_NVML = 1 };

/* Wrapper prototypes: redeclared with default visibility. A mismatch with
 * cuda.h or nvml.h is a compile error. */
#define CS_CU(base, sym, since, variant, family, params, args) CS_EXPORT CUresult CUDAAPI sym params;
#define CS_NVML(sym, family, params, args) CS_EXPORT nvmlReturn_t sym params;
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML

/* The real entry points, typed. Filled once by cs__real_load(); a pointer
 * stays NULL when the driver lacks that symbol (wrappers then answer
 * CUDA_ERROR_NOT_FOUND / NVML_ERROR_FUNCTION_NOT_FOUND, never call NULL). */
struct cs_real {
#define CS_CU(base, sym, since, variant, family, params, args) CUresult(CUDAAPI *sym) params;
#define CS_NVML(sym, family, params, args) nvmlReturn_t (*sym) params;
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
};

/* Row indices, in table order. */
enum cs_hook_id {
#define CS_CU(base, sym, since, variant, family, params, args) CS_HOOK_##sym,
#define CS_NVML(sym, family, params, args) CS_HOOK_##sym,
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    CS_HOOK_COUNT
};

struct cs_hook_row {
    const char *base;     /* name asked of cuGetProcAddress */
    const char *symbol;   /* exported ABI variant */
    int since;            /* CUDA version introducing this ABI of base */
    enum cs_variant variant;
    enum cs_lib lib;
    void *wrapper;        /* our exported function */
    size_t real_offset;   /* offset of its pointer in struct cs_real */
};

extern const struct cs_hook_row cs_hook_rows[CS_HOOK_COUNT];

/* The real pointers, valid after cs__real_load() returned 0. Written once
 * under pthread_once, read-only afterwards: no lock on the hot path. */
extern struct cs_real cs_real;

/* Loads libcuda.so.1 (and libnvidia-ml.so.1 when `nvml`) and fills cs_real.
 * Idempotent, thread-safe, never called from a constructor. 0 or -errno. */
int cs__real_load(void);
int cs__real_load_nvml(void);

/* Real pointer stored for a row (NULL if not loaded or absent). */
void *cs__real_ptr(enum cs_hook_id id);

/* Row index for an exported symbol name, or -1. */
int cs__hook_find_symbol(const char *symbol);

/* cuGetProcAddress routing: the row for (base, cudaVersion, flags), or -1.
 * Picks the variant with the highest `since` <= cudaVersion, per-thread
 * variants when flags ask for them and one exists. */
int cs__hook_route(const char *base, int cuda_version, cuuint64_t flags);

/* Row whose real pointer is `real`, or -1: maps the driver's own answer to
 * our wrapper. */
int cs__hook_find_real(const void *real);

/* The libc dlsym/dlvsym, found without going through our own exports. */
void *cs__libc_dlsym(void *handle, const char *name);
void *cs__libc_dlvsym(void *handle, const char *name, const char *version);

#endif
