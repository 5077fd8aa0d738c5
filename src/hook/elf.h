#ifndef CS_HOOK_ELF_H
#define CS_HOOK_ELF_H

#include <link.h>

/* First definition of `name` (default version, or exactly `version`) in
 * any loaded object other than libcushare, in load order. */
void *cs__elf_find_global(const char *name, const char *version);

/* Definition of `name` in one object given its base and dynamic section. */
void *cs__elf_lookup_in(ElfW(Addr) base, const ElfW(Dyn) *dyn, const char *name,
                        const char *version);

#endif
