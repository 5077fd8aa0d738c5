/*
 * dlsym / dlvsym interposition. A program (or the CUDA runtime) that looks a
 * driver entry point up by name gets our wrapper whenever the lookup would
 * have produced the driver's own function: on RTLD_DEFAULT, RTLD_NEXT and on
 * a handle from dlopen("libcuda.so.1"). A lookup of dlsym or dlvsym
 * themselves, on any handle and for any version, gets ours too. Every other
 * lookup answers exactly what libc would, including RTLD_NEXT relative to
 * the real caller.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>

#include "hook/elf.h"
#include "hook/hooks.h"

/* This file keeps elf.h's contract: it may run before a sanitizer runtime
 * is initialised, so no instrumentation and no intercepted libc call. */

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

/* libc's dlsym and dlvsym, found on first use. No pthread_once: threads
 * racing to find them find the same addresses, so each just stores what it
 * found; readers see NULL (and look) or the final value. */
static dlsym_fn libc_dlsym_fn;
static dlvsym_fn libc_dlvsym_fn;

static dlsym_fn libc_dlsym_ptr(void)
{
    dlsym_fn f = __atomic_load_n(&libc_dlsym_fn, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (dlsym_fn)cs__elf_find_global("dlsym", NULL);
        __atomic_store_n(&libc_dlsym_fn, f, __ATOMIC_RELEASE);
    }
    return f;
}

static dlvsym_fn libc_dlvsym_ptr(void)
{
    dlvsym_fn f = __atomic_load_n(&libc_dlvsym_fn, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (dlvsym_fn)cs__elf_find_global("dlvsym", NULL);
        __atomic_store_n(&libc_dlvsym_fn, f, __ATOMIC_RELEASE);
    }
    return f;
}

void *cs__libc_dlsym(void *handle, const char *name)
{
    dlsym_fn f = libc_dlsym_ptr();
    return f ? f(handle, name) : NULL;
}

void *cs__libc_dlvsym(void *handle, const char *name, const char *version)
{
    dlvsym_fn f = libc_dlvsym_ptr();
    return f ? f(handle, name, version) : NULL;
}

static bool is_own_object(const struct link_map *m)
{
    Dl_info info;
    struct link_map *own = NULL;
    if (!dladdr1((void *)&is_own_object, &info, (void **)&own, RTLD_DL_LINKMAP))
        return false;
    return own == m;
}

/* RTLD_NEXT means "after the caller". Our own call to libc would mean
 * "after libcushare", which is the same answer for callers that precede us
 * (the executable, the usual case) but not for libraries loaded after us
 * (a sanitizer runtime linked into the program, for one: it looks up
 * memcpy, an indirect function, this way); for those, walk the link map
 * from the caller onwards. */
static void *next_after_caller(const char *name, const char *version, const void *caller)
{
    Dl_info info;
    struct link_map *cm = NULL;
    if (!dladdr1(caller, &info, (void **)&cm, RTLD_DL_LINKMAP) || !cm)
        goto from_us;
    bool ours_before_caller = false;
    for (struct link_map *m = cm->l_prev; m; m = m->l_prev)
        if (is_own_object(m))
            ours_before_caller = true;
    if (!ours_before_caller)
        goto from_us;
    for (struct link_map *m = cm->l_next; m; m = m->l_next) {
        void *p = cs__elf_lookup_in(m->l_addr, m->l_ld, name, version);
        if (p)
            return p;
    }
    return NULL;
from_us:
    return version ? cs__libc_dlvsym(RTLD_NEXT, name, version) : cs__libc_dlsym(RTLD_NEXT, name);
}

static bool from_driver_library(const void *p)
{
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname)
        return false;
    const char *base = info.dli_fname;
    for (const char *c = info.dli_fname; *c; c++)
        if (*c == '/')
            base = c + 1;
    return cs__elf_strneq(base, "libcuda.so", 10) || cs__elf_strneq(base, "libnvidia-ml.so", 15);
}

CS_EXPORT void *dlsym(void *handle, const char *name);
CS_EXPORT void *dlvsym(void *handle, const char *name, const char *version);

/* glibc's lookup-by-name entry points, and what a lookup of one answers.
 * Handing out libc's own dlsym would hand out the unchecked driver one
 * call later (dlvsym(libc, "dlsym", "GLIBC_2.34"), dlsym(libc, "dlvsym"),
 * dlsym(RTLD_NEXT, "dlsym")), so every such lookup, on any handle and for
 * any version, gets ours: it answers as libc's does except for driver
 * symbols. The private ones (exported by glibc before 2.34 only, called by
 * nobody outside glibc) find nothing. */
static const struct {
    const char *name;
    void *ours;
} dl_doors[] = {
    {"dlsym", (void *)dlsym},
    {"dlvsym", (void *)dlvsym},
    {"__libc_dlsym", NULL},
    {"__libc_dlvsym", NULL},
    {"_dl_sym", NULL},
    {"_dl_vsym", NULL},
};

static bool is_dl_door(const char *name, void **ours)
{
    for (size_t i = 0; i < sizeof dl_doors / sizeof dl_doors[0]; i++) {
        if (cs__elf_streq(name, dl_doors[i].name)) {
            *ours = dl_doors[i].ours;
            return true;
        }
    }
    return false;
}

/* Our wrapper if `found` is the driver's definition of a hooked symbol;
 * our dlsym/dlvsym if it is libc's. */
static void *route(const char *name, void *found)
{
    void *ours;
    if (found && name && (name[0] == 'd' || name[0] == '_') && is_dl_door(name, &ours))
        return ours;
    if (!found || !name || (name[0] != 'c' && name[0] != 'n'))
        return found;
    /* The driver test first: it keeps every lookup of a libc function
     * (a sanitizer's, at its start-up) out of the instrumented hook table. */
    if (!from_driver_library(found))
        return found;
    int id = cs__hook_find_symbol(name);
    return id >= 0 ? cs_hook_rows[id].wrapper : found;
}

static void *lookup(void *handle, const char *name, const char *version, const void *caller)
{
    void *found;
    if (handle == RTLD_NEXT)
        found = next_after_caller(name, version, caller);
    else if (version)
        found = cs__libc_dlvsym(handle, name, version);
    else
        found = cs__libc_dlsym(handle, name);
    return route(name, found);
}

CS_EXPORT void *dlsym(void *handle, const char *name)
{
    return lookup(handle, name, NULL, __builtin_return_address(0));
}

CS_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
    return lookup(handle, name, version, __builtin_return_address(0));
}
