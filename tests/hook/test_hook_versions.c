/*
 * Every ABI version of an intercepted entry point has its own row in
 * src/hook/hooks.def. cuGetProcAddress hands out, for a symbol and a CUDA
 * version, the newest ABI at or below that version; when the driver's
 * pointer is none we know, the library routes by version to the newest
 * row it has. A newer ABI without a row (CUDA 13's cuCtxSynchronize takes
 * a context) would be routed to the older wrapper and called with the
 * wrong arguments. The driver's versions come from tests/fakecuda's
 * cuGetProcAddress table, which fake_procs_table_current keeps equal to
 * this toolkit's cudaTypedefs.h.
 */
#include <stdio.h>
#include <string.h>

struct row {
    const char *base, *symbol;
    int since;
    int per_thread; /* a _ptsz or _ptds variant */
};

#define PER_THREAD(v) (strcmp(#v, "PLAIN") != 0)

static const struct row hooked[] = {
#define CS_CU(base, sym, since, variant, family, params, args) \
    {#base, #sym, since, PER_THREAD(variant)},
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
};

static const struct row driver[] = {
#define FAKE_PROC(base, sym, since, variant) {#base, #sym, since, PER_THREAD(variant)},
#include "fake_procs.h"
#undef FAKE_PROC
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The newest version of `base` (plain or per-thread) we wrap; 0: none. */
static int newest_hooked(const char *base, int per_thread)
{
    int newest = 0;
    for (size_t i = 0; i < N(hooked); i++)
        if (!strcmp(hooked[i].base, base) && hooked[i].per_thread == per_thread &&
            hooked[i].since > newest)
            newest = hooked[i].since;
    return newest;
}

int main(void)
{
    int missing = 0, checked = 0;
    for (size_t i = 0; i < N(driver); i++) {
        const struct row *d = &driver[i];
        int newest = newest_hooked(d->base, d->per_thread);
        if (!newest)
            continue; /* not wrapped (a per-thread request gets the plain row) */
        checked++;
        if (d->since > newest) {
            fprintf(stderr, "%s: the driver's ABI version %s (CUDA %d) is newer than every "
                    "row of src/hook/hooks.def (CUDA %d); add a row for it, or a request for "
                    "it is routed to an older wrapper with other arguments\n",
                    d->base, d->symbol, d->since, newest);
            missing++;
        }
    }
    printf("%d driver ABI versions of intercepted entry points checked, %d newer than their "
           "rows\n", checked, missing);
    return missing || !checked;
}
