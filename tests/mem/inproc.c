/*
 * For the in-process variants of the memory tests (tests/mem.cmake): the
 * interposer is linked into the test executable instead of preloaded, so
 * the ASan and TSan builds check it without a runtime preloaded ahead of
 * it (docs/testing.md). src/hook/dlsym.c is left out; these are its doors
 * to libc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

void *cs__libc_dlsym(void *handle, const char *name);
void *cs__libc_dlvsym(void *handle, const char *name, const char *version);

void *cs__libc_dlsym(void *handle, const char *name)
{
    return dlsym(handle, name);
}

void *cs__libc_dlvsym(void *handle, const char *name, const char *version)
{
    return dlvsym(handle, name, version);
}
