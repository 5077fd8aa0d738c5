/*
 * A program must not get libc's own dlsym/dlvsym by
 * name, because with it the driver's unchecked functions are one call
 * away (`dlvsym(dlopen("libc.so.6"), "dlsym", "GLIBC_2.34")` did that).
 * Every way of asking for them (libc's handle, RTLD_DEFAULT, RTLD_NEXT,
 * each version, dlsym and dlvsym) must answer libcushare's, and what that
 * answers for a driver symbol must be enforced: with a 1 MiB budget a
 * 2 MiB allocation through it is refused.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

#define MiB (1024u * 1024u)

static const char *object_of(const void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "(none)";
    return info.dli_fname;
}

/* `fn`, a lookup function obtained by `how`, is libcushare's, and the
 * driver's allocation it finds is the enforced one. */
static void check_lookup(void *fn, int versioned, void *cuda, const char *how)
{
    if (!strstr(object_of(fn), "libcushare")) {
        fprintf(stderr, "%s: %p is in %s, not libcushare: the driver is reachable unchecked\n",
                how, fn, object_of(fn));
        exit(1);
    }
    /* The driver's symbols are unversioned, out of dlvsym's reach: a
     * dlvsym is asked for dlsym again, which must be ours as well. */
    void *lookup_fn = fn;
    if (versioned) {
        lookup_fn = ((dlvsym_fn)fn)(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
        CHECK_CONTAINS(object_of(lookup_fn), "libcushare");
    }
    void *p = ((dlsym_fn)lookup_fn)(cuda, "cuMemAlloc_v2");
    CHECK(p != NULL);
    CUdeviceptr d = 0;
    CUresult r = ((alloc_fn)p)(&d, 2 * MiB);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
        fprintf(stderr, "%s: cuMemAlloc_v2 through it ignored the 1 MiB budget (%d)\n", how,
                (int)r);
        exit(1);
    }
    printf("%-45s -> %s\n", how, object_of(fn));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);

    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(cuda && libc);
    /* glibc >= 2.34 defines both names in libc.so.6 under two versions. */
    const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5"};
    const char *names[] = {"dlsym", "dlvsym"};
    char how[128];
    for (int n = 0; n < 2; n++) {
        for (int v = 0; v < 2; v++) {
            void *fn = dlvsym(libc, names[n], versions[v]);
            if (!fn) /* a glibc without this version: nothing handed out */
                continue;
            snprintf(how, sizeof how, "dlvsym(libc, %s, %s)", names[n], versions[v]);
            check_lookup(fn, n, cuda, how);
            snprintf(how, sizeof how, "dlvsym(RTLD_NEXT, %s, %s)", names[n], versions[v]);
            fn = dlvsym(RTLD_NEXT, names[n], versions[v]);
            CHECK(fn != NULL);
            check_lookup(fn, n, cuda, how);
        }
        snprintf(how, sizeof how, "dlsym(libc, %s)", names[n]);
        check_lookup(dlsym(libc, names[n]), n, cuda, how);
        snprintf(how, sizeof how, "dlsym(RTLD_NEXT, %s)", names[n]);
        check_lookup(dlsym(RTLD_NEXT, names[n]), n, cuda, how);
        snprintf(how, sizeof how, "dlsym(RTLD_DEFAULT, %s)", names[n]);
        check_lookup(dlsym(RTLD_DEFAULT, names[n]), n, cuda, how);
    }
    /* Lookups of other libc functions are libc's own. */
    CHECK_CONTAINS(object_of(dlsym(libc, "malloc")), "libc.so");
    CHECK_CONTAINS(object_of(dlvsym(libc, "memcpy", "GLIBC_2.14")), "libc.so");
    /* glibc's private lookup functions (exported before 2.34) find nothing. */
    CHECK(dlsym(RTLD_DEFAULT, "_dl_sym") == NULL);
    CHECK(dlsym(RTLD_DEFAULT, "__libc_dlsym") == NULL);
    printf("glibc %s: no lookup function of libc's is handed out\n", gnu_get_libc_version());
    return 0;
}
