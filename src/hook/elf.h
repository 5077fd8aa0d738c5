#ifndef CS_HOOK_ELF_H
#define CS_HOOK_ELF_H

#include <link.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Contract of this file and of dlsym.c: they run before anything else in
 * the process is ready. A sanitizer runtime (TSan, ASan) calls our dlsym
 * from its own initialiser to find the functions it intercepts, before it
 * can handle an intercepted call or an instrumented function. So both are
 * built without sanitizer instrumentation (CMakeLists.txt) and call no
 * libc function a sanitizer intercepts (string functions, memset,
 * pthread_*, dl_iterate_phdr) on the way: only dladdr/dladdr1 and libc's
 * own dlsym/dlvsym, and the helpers below.
 */

/* strcmp(a, b) == 0, and strncmp(a, b, n) == 0, without calling libc. */
static inline bool cs__elf_streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

static inline bool cs__elf_strneq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i])
            return false;
        if (!a[i])
            return true;
    }
    return true;
}

/* First definition of `name` (default version, or exactly `version`) in
 * any object of the main link map other than libcushare, in load order. */
void *cs__elf_find_global(const char *name, const char *version);

/* Definition of `name` in one object given its base and dynamic section.
 * An indirect function (IFUNC, such as libc's memcpy) is resolved as the
 * dynamic linker does (x86; elsewhere it is not found). */
void *cs__elf_lookup_in(ElfW(Addr) base, const ElfW(Dyn) *dyn, const char *name,
                        const char *version);

#endif
