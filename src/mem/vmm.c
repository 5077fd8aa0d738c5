/*
 * Virtual memory management: the references one process holds to each
 * allocation (docs/accounting.md, "Shared memory").
 *
 * The driver frees a cuMemCreate allocation when the last reference to it
 * goes: every handle (create, cuMemRetainAllocationHandle, each import),
 * every mapping, in every process. So the charge is per allocation, not
 * per handle: this process counts its own references to each allocation
 * (`struct vmm_alloc`, vmm.h, found through the handles and mappings that
 * name it), charges it once when it is created and gives the charge back
 * once when its last reference here goes. What other processes and
 * tenants hold is vmm_shared.c's.
 *
 * Host-location cuMemCreate (CU_MEM_LOCATION_TYPE_HOST*) is not device
 * memory: passed through, never tracked.
 */
#define _GNU_SOURCE
#include "mem/vmm.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/fork.h"
#include "core/log.h"

#define SUBSYS "mem"

/* A handle value the driver gave us `count` times for one allocation. */
struct vmm_handle {
    struct vmm_handle *next;
    uint64_t handle;
    int count;
    struct vmm_alloc *a;
};

struct vmm_map {
    struct vmm_map *next;
    uint64_t va, size;
    struct vmm_alloc *a;
};

/* Handles hash by value, mappings by the 2 MiB granule of their start
 * (the driver's smallest VMM granularity), so that PyTorch's expandable
 * segments (one allocation and one mapping per 20 MiB page) cost O(1) per
 * call; an unmap walks the granules of its range, or every bucket when
 * the range has more granules than there are mappings. */
#define BUCKETS 1024
#define GRANULE_SHIFT 21

pthread_mutex_t cs__vmm_mu = PTHREAD_MUTEX_INITIALIZER;
struct vmm_alloc *cs__vmm_allocs;
static struct vmm_handle *handles[BUCKETS];
static struct vmm_map *maps[BUCKETS];
static size_t nmaps;

static size_t bucket(uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 54); /* top 10 bits */
}

static struct vmm_map **map_bucket(uint64_t va)
{
    return &maps[bucket(va >> GRANULE_SHIFT)];
}

static void free_chain(void *head, size_t next_off)
{
    while (head) {
        void *next = *(void **)((char *)head + next_off);
        free(head);
        head = next;
    }
}

void cs__vmm_atfork_child(void)
{
    /* The child holds none of the parent's references (the driver gives a
     * fork child nothing of the parent's), nor its share locks. */
    cs__mutex_reset(&cs__vmm_mu);
    cs__vmm_shared_atfork_child();
    cs__vmm_fdid_atfork_child();
    free_chain(cs__vmm_allocs, offsetof(struct vmm_alloc, next));
    cs__vmm_allocs = NULL;
    for (int b = 0; b < BUCKETS; b++) {
        free_chain(handles[b], offsetof(struct vmm_handle, next));
        free_chain(maps[b], offsetof(struct vmm_map, next));
        handles[b] = NULL;
        maps[b] = NULL;
    }
    nmaps = 0;
}

/* ---- tables (cs__vmm_mu held) --------------------------------------------------- */

static struct vmm_handle **handle_slot(uint64_t handle)
{
    struct vmm_handle **pp = &handles[bucket(handle)];
    while (*pp && (*pp)->handle != handle)
        pp = &(*pp)->next;
    return pp;
}

/* One more reference to `a` through `handle`. false: out of memory. */
bool cs__vmm_handle_add(uint64_t handle, struct vmm_alloc *a)
{
    struct vmm_handle **pp = handle_slot(handle), *h = *pp;
    if (h && h->a != a) {
        /* The driver reissued a value we still list, so the driver no
         * longer holds the old allocation through it: the newer wins. */
        struct vmm_alloc *old = h->a;
        old->refs -= h->count - 1;
        cs__vmm_alloc_unref(old);
        h->a = a;
        h->count = 0;
    }
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            return false;
        h->handle = handle;
        h->a = a;
        *pp = h;
    }
    h->count++;
    cs__vmm_alloc_ref(a);
    return true;
}

struct vmm_alloc *cs__vmm_alloc_new(int dev, uint64_t bytes, int share, bool in_slot)
{
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        a->payer_fd[k] = -1;
    for (int k = 0; k < VMM_FD_DUPS; k++)
        a->fd_dup[k] = a->fd_marker[k] = -1;
    a->export_probe = -1;
    a->dev = dev;
    a->bytes = bytes;
    a->share = share;
    a->in_slot = in_slot;
    a->next = cs__vmm_allocs;
    if (a->next)
        a->next->prev = a;
    cs__vmm_allocs = a;
    return a;
}

void cs__vmm_alloc_ref(struct vmm_alloc *a)
{
    if (a->refs++ == 0 && a->fd_only) {
        a->fd_only = false; /* held here again */
        cs__vmm_fd_only_changed(-1);
    }
}

static void alloc_unlink(struct vmm_alloc *a)
{
    if (a->prev)
        a->prev->next = a->next;
    else
        cs__vmm_allocs = a->next;
    if (a->next)
        a->next->prev = a->prev;
}

void cs__vmm_alloc_finish(struct vmm_alloc *a)
{
    alloc_unlink(a);
    /* Payer files first: a tenant that takes the charge over meanwhile is
     * counted twice for that moment, never nobody. */
    cs__vmm_payer_drop_all(a);
    if (a->share >= 0)
        cs__ledger_share_leave(cs__ledger(), a->share);
    else if (a->in_slot)
        cs__uncharge(a->dev, CS_MEM_VMM, a->bytes);
    free(a);
}

/* Drops one reference; the last gives the charge (or our hold) back,
 * unless an exported descriptor still keeps the memory alive somewhere:
 * then the record stays, charged, until cs__vmm_take_over_unpaid finds every
 * exported description closed. */
void cs__vmm_alloc_unref(struct vmm_alloc *a)
{
    if (--a->refs > 0)
        return;
    cs__vmm_fdid_drop_all(a); /* our dups would keep the memory alive */
    if (a->export_probe >= 0 || a->export_pinned) {
        if (cs__vmm_fdid_exports_alive(a)) {
            a->fd_only = true;
            cs__vmm_fd_only_changed(+1);
            return;
        }
    }
    cs__vmm_alloc_finish(a);
}

static void map_insert(struct vmm_map *m)
{
    struct vmm_map **pp = map_bucket(m->va);
    m->next = *pp;
    *pp = m;
    nmaps++;
}

/* Moves the mappings of bucket *pp that lie inside [ptr, end) to *taken. */
static void take_bucket(struct vmm_map **pp, uint64_t ptr, uint64_t end, struct vmm_map **taken)
{
    while (*pp) {
        struct vmm_map *m = *pp;
        if (m->va >= ptr && m->va + m->size <= end) {
            *pp = m->next;
            m->next = *taken;
            *taken = m;
            nmaps--;
        } else {
            pp = &m->next;
        }
    }
}

/* Every mapping inside [ptr, ptr + size), taken out of the table. */
static struct vmm_map *take_maps(uint64_t ptr, uint64_t size)
{
    struct vmm_map *taken = NULL;
    uint64_t end = ptr + size < ptr ? UINT64_MAX : ptr + size;
    uint64_t granules = (end >> GRANULE_SHIFT) - (ptr >> GRANULE_SHIFT) + 1;
    if (granules > nmaps || granules > BUCKETS) {
        for (int b = 0; b < BUCKETS; b++)
            take_bucket(&maps[b], ptr, end, &taken);
    } else {
        for (uint64_t g = ptr >> GRANULE_SHIFT; g <= (end - 1) >> GRANULE_SHIFT; g++)
            take_bucket(&maps[bucket(g)], ptr, end, &taken);
    }
    return taken;
}

static struct vmm_map *map_containing(uint64_t p)
{
    for (int b = 0; b < BUCKETS; b++)
        for (struct vmm_map *m = maps[b]; m; m = m->next)
            if (p >= m->va && p - m->va < m->size)
                return m;
    return NULL;
}

struct vmm_alloc *cs__vmm_alloc_of_share(int j)
{
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next)
        if (j >= 0 && a->share == j)
            return a;
    return NULL;
}

/* The share of ours (held by an allocation here) that carries key. */
int cs__vmm_held_share_with_key(uint64_t key)
{
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next) {
        const struct cs_ledger_share *sh = cs__ledger_share(cs__ledger(), a->share);
        for (int k = 0; sh && k < CS_LEDGER_SHARE_KEYS; k++)
            if (__atomic_load_n(&sh->key[k], __ATOMIC_ACQUIRE) == key)
                return a->share;
    }
    return -1;
}

struct vmm_alloc *cs__vmm_handle_alloc(uint64_t handle)
{
    struct vmm_handle *h = *handle_slot(handle);
    return h ? h->a : NULL;
}

/* ---- create, map, retain, release ------------------------------------------ */

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CS_ENTER(cuMemCreate);
    /* Host locations (HAMi-core #169/#187 crashed here) and anything we
     * cannot place on a device go to the driver untouched. */
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        prop->location.id < 0 || prop->location.id >= CS_MAX_DEVICES)
        return cs_real.cuMemCreate(handle, size, prop, flags);
    int dev = prop->location.id;
    CUresult r = cs__charge(dev, CS_MEM_VMM, size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemCreate(handle, size, prop, flags);
    for (int64_t until = 0;
         r == CUDA_ERROR_OUT_OF_MEMORY && cs__park_make_room_for(size, &until) == 0;)
        r = cs_real.cuMemCreate(handle, size, prop, flags); /* idle tenants parked for it */
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_VMM, size);
        return r;
    }
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_alloc *a = cs__vmm_alloc_new(dev, size, -1, true);
    bool ok = a && cs__vmm_handle_add(*handle, a);
    if (a && !ok) {
        alloc_unlink(a);
        free(a);
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    if (!ok) {
        cs__uncharge(dev, CS_MEM_VMM, size);
        cs_real.cuMemRelease(*handle);
        cs_warn_capped(8, SUBSYS, "out of host memory for allocation records");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CS_ENTER(cuMemRelease);
    /* Taken out before the driver call, so a value the driver reissues
     * meanwhile to another thread is not ours to drop. */
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_handle **pp = handle_slot(handle), *h = *pp;
    struct vmm_alloc *a = h ? h->a : NULL;
    if (h && --h->count == 0) {
        *pp = h->next;
        free(h);
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    CUresult r = cs_real.cuMemRelease(handle);
    pthread_mutex_lock(&cs__vmm_mu);
    if (a && r == CUDA_SUCCESS)
        cs__vmm_alloc_unref(a);
    else if (a && cs__vmm_handle_add(handle, a)) /* refused: the handle is ours again */
        a->refs--;                       /* (it never stopped counting in refs) */
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CS_ENTER(cuMemMap);
    CUresult r = cs_real.cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_handle *h = *handle_slot(handle);
    struct vmm_map *m = h ? calloc(1, sizeof *m) : NULL;
    if (m) {
        m->va = ptr;
        m->size = size;
        m->a = h->a;
        map_insert(m);
        cs__vmm_alloc_ref(h->a);
        if (h->a->unsized)
            cs__vmm_size_known(h->a, (uint64_t)offset + size);
    } else if (h) {
        cs_warn_capped(8, SUBSYS, "out of host memory for a mapping record: its allocation "
                       "may be uncharged while still mapped");
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CS_ENTER(cuMemUnmap);
    /* Every mapping inside [ptr, ptr + size) goes (the driver refuses a
     * range that cuts one); taken out first, put back on refusal. */
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_map *taken = size ? take_maps(ptr, size) : NULL;
    pthread_mutex_unlock(&cs__vmm_mu);
    CUresult r = cs_real.cuMemUnmap(ptr, size);
    pthread_mutex_lock(&cs__vmm_mu);
    while (taken) {
        struct vmm_map *m = taken;
        taken = m->next;
        if (r == CUDA_SUCCESS) {
            cs__vmm_alloc_unref(m->a);
            free(m);
        } else {
            map_insert(m);
        }
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CS_ENTER(cuMemRetainAllocationHandle);
    CUresult r = cs_real.cuMemRetainAllocationHandle(handle, addr);
    if (r != CUDA_SUCCESS || !handle)
        return r;
    uint64_t p = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_map *m = map_containing(p);
    if (m && !cs__vmm_handle_add(*handle, m->a))
        cs_warn_capped(8, SUBSYS, "out of host memory for a handle record");
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

/* ---- external memory ----------------------------------------------------------- */

/* cuImportExternalMemory brings memory allocated outside CUDA (Vulkan,
 * D3D, NvSci) onto the device: charged at its declared size, uncharged
 * by cuDestroyExternalMemory. */
CUresult CUDAAPI cuImportExternalMemory(CUexternalMemory *extMem_out,
                                        const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    CS_ENTER(cuImportExternalMemory);
    int dev = cs__current_device();
    if (!extMem_out || !desc || desc->size == 0 || dev < 0)
        return cs_real.cuImportExternalMemory(extMem_out, desc);
    CUresult r = cs__charge(dev, CS_MEM_EXTERNAL, desc->size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuImportExternalMemory(extMem_out, desc);
    if (r != CUDA_SUCCESS) {
        cs__uncharge(dev, CS_MEM_EXTERNAL, desc->size);
        return r;
    }
    if (cs__record_charge(CS_TRACK_EXTMEM, (uint64_t)(uintptr_t)*extMem_out, dev, CS_MEM_EXTERNAL,
                          desc->size)) {
        cs_real.cuDestroyExternalMemory(*extMem_out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult destroy_external(uint64_t ext, void *ctx)
{
    (void)ctx;
    return cs_real.cuDestroyExternalMemory((CUexternalMemory)(uintptr_t)ext);
}

CUresult CUDAAPI cuDestroyExternalMemory(CUexternalMemory extMem)
{
    CS_ENTER(cuDestroyExternalMemory);
    return cs__free_tracked(CS_TRACK_EXTMEM, (uint64_t)(uintptr_t)extMem, destroy_external, NULL);
}
