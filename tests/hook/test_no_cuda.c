/*
 * A program that never touches CUDA is unaffected by the preload: libc
 * lookups through dlsym/dlvsym/RTLD_NEXT answer as without it, no driver
 * is loaded and no ledger file is created.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char *object_of(const void *p)
{
    Dl_info info;
    return p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "(none)";
}

static int maps_contain(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return found;
}

int main(void)
{
    CHECK(getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libcushare"));
    CHECK(maps_contain("libcushare"));

    void *m = dlsym(RTLD_NEXT, "malloc");
    CHECK(m != NULL);
    CHECK_CONTAINS(object_of(m), "libc.so");
    void *p = dlsym(RTLD_DEFAULT, "printf");
    CHECK(p == (void *)&printf);
    void *v = dlvsym(RTLD_DEFAULT, "memcpy", "GLIBC_2.14");
    CHECK(v != NULL);
    CHECK_CONTAINS(object_of(v), "libc.so");
    CHECK(dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") == NULL);
    void *h = dlopen("libm.so.6", RTLD_NOW);
    CHECK(h != NULL);
    CHECK_CONTAINS(object_of(dlsym(h, "cos")), "libm.so");

    CHECK(!maps_contain("libcuda"));
    const char *ledger = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    CHECK(ledger && access(ledger, F_OK) != 0);
    printf("no-cuda program unaffected\n");
    return 0;
}
