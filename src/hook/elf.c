/*
 * Symbol lookup in loaded objects by reading their dynamic symbol tables.
 *
 * We export dlsym and dlvsym, so calling either from inside the library
 * would call ourselves. The real ones are found here by walking libc's own
 * GNU hash table: no dl* call, no recursion, no dependence on a private
 * glibc symbol, and it works with glibc 2.34+ (dlsym in libc.so.6) and
 * older (libdl.so.2) alike. The same walk emulates RTLD_NEXT for callers
 * that sit after us in the search order.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>

#include "hook/elf.h"

struct dyn_tables {
    ElfW(Addr) base;
    const ElfW(Sym) *symtab;
    const char *strtab;
    const uint32_t *gnu_hash;
    const ElfW(Half) *versym;
    const ElfW(Verdef) *verdef;
};

static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = h * 33 + *p;
    return h;
}

/* glibc relocates most d_ptr entries in place; some ports keep them
 * relative. A value below the load base is relative. */
static const void *dyn_ptr(ElfW(Addr) base, ElfW(Addr) v)
{
    return (const void *)(v < base ? v + base : v);
}

static bool read_tables(ElfW(Addr) base, const ElfW(Dyn) *dyn, struct dyn_tables *t)
{
    /* Field by field: a struct clear may become a call to memset. */
    t->base = base;
    t->symtab = NULL;
    t->strtab = NULL;
    t->gnu_hash = NULL;
    t->versym = NULL;
    t->verdef = NULL;
    if (!dyn)
        return false;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: t->symtab = dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: t->strtab = dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_GNU_HASH: t->gnu_hash = dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_VERSYM: t->versym = dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_VERDEF: t->verdef = dyn_ptr(base, dyn->d_un.d_ptr); break;
        default: break;
        }
    }
    return t->symtab && t->strtab && t->gnu_hash;
}

/* Name of version index `ndx` in the object's version definitions. */
static const char *version_name(const struct dyn_tables *t, unsigned ndx)
{
    const ElfW(Verdef) *vd = t->verdef;
    while (vd) {
        if (vd->vd_ndx == ndx) {
            const ElfW(Verdaux) *aux = (const void *)((const char *)vd + vd->vd_aux);
            return t->strtab + aux->vda_name;
        }
        if (!vd->vd_next)
            break;
        vd = (const void *)((const char *)vd + vd->vd_next);
    }
    return NULL;
}

/* version NULL: the default (non-hidden) definition; else exactly that. */
static bool version_matches(const struct dyn_tables *t, uint32_t idx, const char *version)
{
    if (!t->versym)
        return version == NULL;
    ElfW(Half) vs = t->versym[idx];
    if (!version)
        return (vs & 0x8000) == 0;
    const char *name = version_name(t, vs & 0x7fff);
    return name && cs__elf_streq(name, version);
}

static const ElfW(Sym) *find_sym(const struct dyn_tables *t, const char *name,
                                 const char *version)
{
    const uint32_t *h = t->gnu_hash;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    const ElfW(Addr) *bloom = (const void *)&h[4];
    const uint32_t *buckets = (const void *)&bloom[bloom_size];
    const uint32_t *chain = &buckets[nbuckets];
    if (!nbuckets)
        return NULL;
    uint32_t hash = gnu_hash(name);
    uint32_t idx = buckets[hash % nbuckets];
    if (idx < symoffset)
        return NULL;
    for (;; idx++) {
        uint32_t h2 = chain[idx - symoffset];
        const ElfW(Sym) *s = &t->symtab[idx];
        if ((hash | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF &&
            cs__elf_streq(name, t->strtab + s->st_name) && version_matches(t, idx, version))
            return s;
        if (h2 & 1)
            return NULL;
    }
}

/* The address an indirect function resolves to, as the dynamic linker
 * computes it: x86 resolvers take no arguments (glibc's dl-irel.h). Other
 * architectures pass hardware capabilities we do not reproduce: there the
 * lookup finds nothing, and libc's dlsym answers for callers before us. */
static void *resolve_ifunc(ElfW(Addr) resolver)
{
#if defined(__x86_64__) || defined(__i386__)
    return ((void *(*)(void))resolver)();
#else
    (void)resolver;
    return NULL;
#endif
}

void *cs__elf_lookup_in(ElfW(Addr) base, const ElfW(Dyn) *dyn, const char *name,
                        const char *version)
{
    struct dyn_tables t;
    if (!read_tables(base, dyn, &t))
        return NULL;
    const ElfW(Sym) *s = find_sym(&t, name, version);
    if (!s)
        return NULL;
    if (ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC)
        return resolve_ifunc(base + s->st_value);
    return (void *)(base + s->st_value);
}

static ElfW(Addr) own_base(void)
{
    Dl_info info;
    if (!dladdr((void *)&own_base, &info))
        return 0;
    return (ElfW(Addr))info.dli_fbase;
}

/* The main link map through the debugger's interface (_r_debug, defined by
 * the dynamic linker) rather than dl_iterate_phdr, which sanitizers
 * intercept: the same objects, in load order, without a call. */
void *cs__elf_find_global(const char *name, const char *version)
{
    ElfW(Addr) skip = own_base();
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next) {
        if (skip && m->l_addr == skip)
            continue;
        void *p = cs__elf_lookup_in(m->l_addr, m->l_ld, name, version);
        if (p)
            return p;
    }
    return NULL;
}
