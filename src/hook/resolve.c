/*
 * The real driver: opening libcuda.so.1 / libnvidia-ml.so.1 lazily, filling
 * the typed pointer table, and the routing queries derived from hooks.def.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/log.h"
#include "hook/drv.h"
#include "hook/hooks.h"

const struct cs_hook_row cs_hook_rows[CS_HOOK_COUNT] = {
#define CS_CU(base, sym, since, variant, family, params, args) \
    [CS_HOOK_##sym] = {#base, #sym, since, CS_##variant, CS_LIB_CUDA, (void *)&sym, offsetof(struct cs_real, sym)},
#define CS_NVML(sym, family, params, args) \
    [CS_HOOK_##sym] = {#sym, #sym, 0, CS_PLAIN, CS_LIB_NVML, (void *)&sym, offsetof(struct cs_real, sym)},
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
};

struct cs_real cs_real;
struct cs_drv cs_drv;

/* Handles are owned for the process lifetime (RTLD_NODELETE semantics:
 * wrappers may run during exit after any dlclose by the application). */
static void *lib_handle[2];
static int lib_status[2] = {-EAGAIN, -EAGAIN};
static pthread_once_t lib_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static const char *const lib_name[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};

static void **real_slot(int id)
{
    return (void **)((char *)&cs_real + cs_hook_rows[id].real_offset);
}

static void fill_drv(enum cs_lib lib, void *h)
{
#define CS_DRV(sym, params) \
    if (lib == CS_LIB_CUDA) cs_drv.sym = (CUresult(CUDAAPI *) params)cs__libc_dlsym(h, #sym);
#define CS_DRV_NVML(sym, params) \
    if (lib == CS_LIB_NVML) cs_drv.sym = (nvmlReturn_t (*) params)cs__libc_dlsym(h, #sym);
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
}

static void load_lib(enum cs_lib lib)
{
    /* Prefer the copy the application already loaded (same file, same
     * handle); otherwise load by soname like the CUDA runtime does. */
    void *h = dlopen(lib_name[lib], RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
    if (!h)
        h = dlopen(lib_name[lib], RTLD_NOW | RTLD_NODELETE | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        cs_err("hook", "cannot open %s: %s", lib_name[lib], e ? e : "unknown error");
        lib_status[lib] = -ENOENT;
        return;
    }
    lib_handle[lib] = h;
    for (int id = 0; id < CS_HOOK_COUNT; id++) {
        if (cs_hook_rows[id].lib != lib)
            continue;
        void *p = cs__libc_dlsym(h, cs_hook_rows[id].symbol);
        /* A driver that does not export a row (older driver) leaves it NULL;
         * the wrapper answers "not found" instead of calling through NULL. */
        if (p == cs_hook_rows[id].wrapper)
            p = NULL;
        __atomic_store_n(real_slot(id), p, __ATOMIC_RELEASE);
    }
    fill_drv(lib, h);
    __atomic_store_n(&lib_status[lib], 0, __ATOMIC_RELEASE);
}

static void load_cuda(void) { load_lib(CS_LIB_CUDA); }
static void load_nvml(void) { load_lib(CS_LIB_NVML); }

int cs__real_load(void)
{
    pthread_once(&lib_once[CS_LIB_CUDA], load_cuda);
    return __atomic_load_n(&lib_status[CS_LIB_CUDA], __ATOMIC_ACQUIRE);
}

int cs__real_load_nvml(void)
{
    pthread_once(&lib_once[CS_LIB_NVML], load_nvml);
    return __atomic_load_n(&lib_status[CS_LIB_NVML], __ATOMIC_ACQUIRE);
}

void *cs__real_ptr(enum cs_hook_id id)
{
    return __atomic_load_n(real_slot(id), __ATOMIC_ACQUIRE);
}

int cs__hook_find_symbol(const char *symbol)
{
    if (!symbol)
        return -1;
    for (int id = 0; id < CS_HOOK_COUNT; id++)
        if (!strcmp(cs_hook_rows[id].symbol, symbol))
            return id;
    return -1;
}

int cs__hook_find_real(const void *real)
{
    if (!real)
        return -1;
    for (int id = 0; id < CS_HOOK_COUNT; id++)
        if (cs__real_ptr((enum cs_hook_id)id) == real)
            return id;
    return -1;
}

int cs__hook_route(const char *base, int cuda_version, cuuint64_t flags)
{
    if (!base)
        return -1;
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1, best_pt = -1;
    for (int id = 0; id < CS_HOOK_COUNT; id++) {
        const struct cs_hook_row *r = &cs_hook_rows[id];
        if (r->lib != CS_LIB_CUDA || strcmp(r->base, base) || r->since > cuda_version)
            continue;
        int *slot = r->variant == CS_PLAIN ? &best : &best_pt;
        if (*slot < 0 || cs_hook_rows[*slot].since < r->since)
            *slot = id;
    }
    return per_thread && best_pt >= 0 ? best_pt : best;
}

int cs__drv_load(void) { return cs__real_load(); }
int cs__drv_load_nvml(void) { return cs__real_load_nvml(); }
