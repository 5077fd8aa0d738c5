/*
 * Virtual memory management, sharing and interop (docs/accounting.md,
 * "Shared memory").
 *
 * The driver frees a cuMemCreate allocation when the last reference to it
 * goes: every handle (create, cuMemRetainAllocationHandle, each import),
 * every mapping, in every process. So the charge is per allocation, not
 * per handle: this process counts its own references to each allocation
 * (`struct vmm_alloc`, found through the handles and mappings that name
 * it), charges it once when it is created and gives the charge back once
 * when its last reference here goes.
 *
 * Once an allocation is exported (a POSIX fd or fabric handle) its charge
 * moves out of our slot into a ledger share (src/ledger/share.c): every
 * process of the tenant that imports it holds the share, and the share
 * keeps the charge until the last holder lets go or dies. Both sides find
 * the share by a key they can both compute: the exported fd's inode (an
 * fd passed over SCM_RIGHTS names the same open file), the fabric handle's
 * bytes. Legacy IPC works alike: cuIpcGetMemHandle moves the cuMemAlloc
 * charge into a share keyed by the 64 handle bytes, and each process's
 * opens of one handle (the driver returns the same pointer and counts
 * them) are one hold.
 *
 * Across tenants (docs/accounting.md, "Across tenants"): every export also
 * publishes a payer file (src/ledger/payer.c). A process of another tenant
 * that imports the memory keeps a share in its own ledger carrying nothing
 * and stands by; when no tenant pays any more (the creating tenant let go
 * or died), the first standing-by process to look (a view, an admission)
 * takes the charge over into its tenant's share. An import with no share
 * in our ledger and no payer file of our uid (another user's memory, or a
 * process outside cushare) is not charged here.
 *
 * Host-location cuMemCreate (CU_MEM_LOCATION_TYPE_HOST*) is not device
 * memory: passed through, never tracked.
 *
 * vmm_mu guards every table below; it is never held across a driver call
 * (records are taken out first and put back if the driver refuses). Lock
 * order: vmm_mu, then the ledger's share mutex.
 */
#define _GNU_SOURCE
#include "mem/admit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"
#include "core/path.h"

#define SUBSYS "mem"

/* One allocation as this process sees it. */
struct vmm_alloc {
    struct vmm_alloc *next;
    int dev;
    uint64_t bytes;
    int refs;              /* our handles (with multiplicity) + mappings */
    int share;             /* ledger share holding the charge, -1: our slot
                            * holds it (in_slot) or nobody here does */
    bool in_slot;          /* charged to our slot (we created it) */
    bool ipc_owner;        /* the creator's record of a cuMemAlloc handed out
                            * with cuIpcGetMemHandle: its one reference is
                            * the allocation's (cuMemFree, its context) */
    int payer_fd[CS_LEDGER_SHARE_KEYS]; /* payer files we hold (-1 none) */
    uint64_t payer_key[CS_LEDGER_SHARE_KEYS];
};

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

/* A legacy IPC pointer opened `count` times: one reference to `a` (NULL:
 * memory not charged here). */
struct ipc_open {
    struct ipc_open *next;
    uint64_t ptr;
    int count;
    struct vmm_alloc *a;
};

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_alloc *allocs;
/* Allocations holding payer files: views and admissions look at them
 * (cs__vmm_settle) only while there are any. Atomic; written under vmm_mu. */
static int payer_allocs;
static struct vmm_handle *handles;
static struct vmm_map *maps;
static struct ipc_open *ipcs;

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
    cs__mutex_reset(&vmm_mu);
    /* Our copies of the payer descriptors only: the parent's keep its
     * locks (an OFD lock goes with the last descriptor of its file). */
    for (struct vmm_alloc *a = allocs; a; a = a->next)
        for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
            if (a->payer_fd[k] >= 0)
                close(a->payer_fd[k]);
    free_chain(allocs, offsetof(struct vmm_alloc, next));
    free_chain(handles, offsetof(struct vmm_handle, next));
    free_chain(maps, offsetof(struct vmm_map, next));
    free_chain(ipcs, offsetof(struct ipc_open, next));
    allocs = NULL;
    handles = NULL;
    maps = NULL;
    ipcs = NULL;
    payer_allocs = 0;
}

/* ---- keys both sides can compute ------------------------------------------ */

enum key_kind { KEY_FD = 1, KEY_FABRIC, KEY_IPC };

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

static uint64_t bytes_key(enum key_kind kind, const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return mix(h);
}

/* The inode of the open file behind fd: the same in every process the
 * descriptor is passed to. 0 when fd is not open. */
static uint64_t fd_key(int fd)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 0;
    uint64_t id[2] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    return bytes_key(KEY_FD, id, sizeof id);
}

static uint64_t export_key(const void *shareable, CUmemAllocationHandleType type)
{
    if (!shareable)
        return 0;
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return fd_key(*(const int *)shareable);
    if (type == CU_MEM_HANDLE_TYPE_FABRIC)
        return bytes_key(KEY_FABRIC, shareable, sizeof(CUmemFabricHandle));
    return 0; /* Win32 handles: not on Linux */
}

static uint64_t import_key(void *osHandle, CUmemAllocationHandleType type)
{
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return fd_key((int)(intptr_t)osHandle);
    if (type == CU_MEM_HANDLE_TYPE_FABRIC && osHandle)
        return bytes_key(KEY_FABRIC, osHandle, sizeof(CUmemFabricHandle));
    return 0;
}

/* ---- tables (vmm_mu held) --------------------------------------------------- */

static struct vmm_handle **handle_slot(uint64_t handle)
{
    struct vmm_handle **pp = &handles;
    while (*pp && (*pp)->handle != handle)
        pp = &(*pp)->next;
    return pp;
}

static void alloc_unref(struct vmm_alloc *a);
static void payer_drop_all(struct vmm_alloc *a);

/* One more reference to `a` through `handle`. false: out of memory. */
static bool handle_add(uint64_t handle, struct vmm_alloc *a)
{
    struct vmm_handle *h = *handle_slot(handle);
    if (h && h->a != a) {
        /* The driver reissued a value we still list, so the driver no
         * longer holds the old allocation through it: the newer wins. */
        struct vmm_alloc *old = h->a;
        old->refs -= h->count - 1;
        alloc_unref(old);
        h->a = a;
        h->count = 0;
    }
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            return false;
        h->handle = handle;
        h->a = a;
        h->next = handles;
        handles = h;
    }
    h->count++;
    a->refs++;
    return true;
}

static struct vmm_alloc *alloc_new(int dev, uint64_t bytes, int share, bool in_slot)
{
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        a->payer_fd[k] = -1;
    a->dev = dev;
    a->bytes = bytes;
    a->share = share;
    a->in_slot = in_slot;
    a->next = allocs;
    allocs = a;
    return a;
}

/* Drops one reference; the last gives the charge (or our hold) back. */
static void alloc_unref(struct vmm_alloc *a)
{
    if (--a->refs > 0)
        return;
    struct vmm_alloc **pp = &allocs;
    while (*pp && *pp != a)
        pp = &(*pp)->next;
    if (*pp)
        *pp = a->next;
    /* Payer files first: a tenant that takes the charge over meanwhile is
     * counted twice for that moment, never nobody. */
    payer_drop_all(a);
    if (a->share >= 0)
        cs__ledger_share_leave(&cs_rt.ledger, a->share);
    else if (a->in_slot)
        cs__give_back(a->dev, CS_MEM_VMM, a->bytes);
    free(a);
}

static struct vmm_alloc *alloc_of_share(int j)
{
    for (struct vmm_alloc *a = allocs; a; a = a->next)
        if (j >= 0 && a->share == j)
            return a;
    return NULL;
}

/* The share of ours (held by an allocation here) that carries key. */
static int held_share_with_key(uint64_t key)
{
    for (struct vmm_alloc *a = allocs; a; a = a->next) {
        const struct cs_ledger_share *sh = cs__ledger_share(&cs_rt.ledger, a->share);
        for (int k = 0; sh && k < CS_LEDGER_SHARE_KEYS; k++)
            if (__atomic_load_n(&sh->key[k], __ATOMIC_ACQUIRE) == key)
                return a->share;
    }
    return -1;
}

/* ---- payer files (across tenants) --------------------------------------------- */

static const char *share_dir(void)
{
    return cs_rt.cfg.share_dir;
}

static bool has_payer(const struct vmm_alloc *a)
{
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        if (a->payer_fd[k] >= 0)
            return true;
    return false;
}

/* Keeps fd (a payer file of key) with a. vmm_mu held. */
static void payer_keep(struct vmm_alloc *a, uint64_t key, int fd)
{
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        if (a->payer_fd[k] < 0) {
            if (!has_payer(a))
                __atomic_fetch_add(&payer_allocs, 1, __ATOMIC_RELAXED);
            a->payer_fd[k] = fd;
            a->payer_key[k] = key;
            return;
        }
    cs__payer_close(share_dir(), key, fd); /* more identities than we track */
}

static void payer_drop_all(struct vmm_alloc *a)
{
    bool had = has_payer(a);
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        if (a->payer_fd[k] >= 0) {
            cs__payer_close(share_dir(), a->payer_key[k], a->payer_fd[k]);
            a->payer_fd[k] = -1;
        }
    if (had)
        __atomic_fetch_sub(&payer_allocs, 1, __ATOMIC_RELAXED);
}

/* Publishes key as ours to pay for (the creator, at export). */
static void payer_publish(struct vmm_alloc *a, uint64_t key)
{
    int dev = a->dev;
    uint64_t bytes = a->bytes;
    int fd = cs__payer_open(share_dir(), key, true, &dev, &bytes);
    if (fd == -EEXIST) {
        cs_warn_capped(1, SUBSYS, "another allocation of this user has the same identity "
                       "(descriptor inode); other tenants importing it will not be charged when "
                       "this one lets go");
        return;
    }
    if (fd < 0) {
        cs_warn_capped(4, SUBSYS, "cannot publish who pays for shared memory in %s: %s; "
                       "another tenant importing it will not be charged when this one lets go "
                       "(set CUSHARE_SHARE_DIR to a directory every tenant can reach)",
                       share_dir()[0] ? share_dir() : CS_NODE_DIR, strerror(-fd));
        return;
    }
    cs__payer_pay(fd);
    payer_keep(a, key, fd);
}

static bool share_charged(int j)
{
    const struct cs_ledger_share *sh = cs__ledger_share(&cs_rt.ledger, j);
    return sh && __atomic_load_n(&sh->charged, __ATOMIC_ACQUIRE) != 0;
}

/* One allocation: pays if its tenant's share carries the bytes, else
 * takes the charge over when nobody pays. vmm_mu held. */
static void payer_settle(struct vmm_alloc *a)
{
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++) {
        int fd = a->payer_fd[k];
        if (fd < 0 || a->share < 0)
            continue;
        if (share_charged(a->share)) {
            cs__payer_pay(fd); /* a process of ours took it over: we pay too */
            continue;
        }
        if (!cs__payer_unpaid(fd) || cs__payer_elect(fd))
            continue;
        int r = cs__ledger_share_adopt(&cs_rt.ledger, a->share);
        if (r == 0 || r == -EALREADY) {
            if (r == 0)
                cs_info(SUBSYS, "device %d: %llu bytes shared with another tenant, which let go "
                        "of them: now charged to this tenant", a->dev,
                        (unsigned long long)a->bytes);
            cs__payer_elected(fd);
        } else {
            cs__payer_close(share_dir(), a->payer_key[k], fd); /* cannot pay: let another */
            a->payer_fd[k] = -1;
            if (!has_payer(a))
                __atomic_fetch_sub(&payer_allocs, 1, __ATOMIC_RELAXED);
        }
    }
}

void cs__vmm_settle(void)
{
    if (!__atomic_load_n(&payer_allocs, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&vmm_mu);
    for (struct vmm_alloc *a = allocs; a; a = a->next)
        if (has_payer(a))
            payer_settle(a);
    pthread_mutex_unlock(&vmm_mu);
}

/* The device index, in this process's numbering, of an imported handle
 * or an opened IPC pointer; -1 if the driver does not say. */
static int handle_device(CUmemGenericAllocationHandle h)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    if (!cs_drv.cuMemGetAllocationPropertiesFromHandle ||
        cs_drv.cuMemGetAllocationPropertiesFromHandle(&p, h) != CUDA_SUCCESS ||
        p.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return -1;
    return p.location.id;
}

static int pointer_device(CUdeviceptr ptr)
{
    int ordinal = -1;
    if (!cs_drv.cuPointerGetAttribute ||
        cs_drv.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) !=
            CUDA_SUCCESS)
        return -1;
    return ordinal;
}

/* An import: our tenant's share of key (joined by the caller, j >= 0), or
 * else another tenant's payer file: a share of ours standing by. Returns
 * the allocation or NULL (not charged here). vmm_mu held. */
static struct vmm_alloc *import_alloc(uint64_t key, int j, int dev, uint64_t bytes,
                                      enum cs_mem_category cat, int local_dev)
{
    struct vmm_alloc *a = NULL;
    int pdev = dev;
    uint64_t pbytes = bytes;
    int fd = cs__payer_open(share_dir(), key, false, &pdev, &pbytes);
    if (j < 0 && fd >= 0) {
        /* Another tenant's index of the device may not be ours (its own
         * CUDA_VISIBLE_DEVICES): what our driver says wins. */
        dev = local_dev >= 0 && local_dev < CS_MAX_DEVICES ? local_dev : pdev;
        bytes = pbytes;
        j = cs__ledger_share_make(&cs_rt.ledger, key, dev, cat, bytes, false);
    }
    if (j >= 0 && !(a = alloc_new(dev, bytes, j, false)))
        cs__ledger_share_leave(&cs_rt.ledger, j);
    if (a && fd >= 0) {
        payer_keep(a, key, fd);
        payer_settle(a);
    } else if (fd >= 0) {
        cs__payer_close(share_dir(), key, fd);
    }
    return a;
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
    CUresult r = cs__admit(dev, CS_MEM_VMM, size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        cs__give_back(dev, CS_MEM_VMM, size);
        return r;
    }
    pthread_mutex_lock(&vmm_mu);
    struct vmm_alloc *a = alloc_new(dev, size, -1, true);
    bool ok = a && handle_add(*handle, a);
    if (a && !ok) {
        allocs = a->next;
        free(a);
    }
    pthread_mutex_unlock(&vmm_mu);
    if (!ok) {
        cs__give_back(dev, CS_MEM_VMM, size);
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
    pthread_mutex_lock(&vmm_mu);
    struct vmm_handle **pp = handle_slot(handle), *h = *pp;
    struct vmm_alloc *a = h ? h->a : NULL;
    if (h && --h->count == 0) {
        *pp = h->next;
        free(h);
    }
    pthread_mutex_unlock(&vmm_mu);
    CUresult r = cs_real.cuMemRelease(handle);
    pthread_mutex_lock(&vmm_mu);
    if (a && r == CUDA_SUCCESS)
        alloc_unref(a);
    else if (a && handle_add(handle, a)) /* refused: the handle is ours again */
        a->refs--;                       /* (it never stopped counting in refs) */
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CS_ENTER(cuMemMap);
    CUresult r = cs_real.cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_mu);
    struct vmm_handle *h = *handle_slot(handle);
    struct vmm_map *m = h ? calloc(1, sizeof *m) : NULL;
    if (m) {
        m->va = ptr;
        m->size = size;
        m->a = h->a;
        m->next = maps;
        maps = m;
        h->a->refs++;
    } else if (h) {
        cs_warn_capped(8, SUBSYS, "out of host memory for a mapping record: its allocation "
                       "may be given back while still mapped");
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CS_ENTER(cuMemUnmap);
    /* Every mapping inside [ptr, ptr + size) goes (the driver refuses a
     * range that cuts one); taken out first, put back on refusal. */
    struct vmm_map *taken = NULL;
    pthread_mutex_lock(&vmm_mu);
    for (struct vmm_map **pp = &maps; *pp;) {
        struct vmm_map *m = *pp;
        if (m->va >= ptr && m->va + m->size <= ptr + size) {
            *pp = m->next;
            m->next = taken;
            taken = m;
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&vmm_mu);
    CUresult r = cs_real.cuMemUnmap(ptr, size);
    pthread_mutex_lock(&vmm_mu);
    while (taken) {
        struct vmm_map *m = taken;
        taken = m->next;
        if (r == CUDA_SUCCESS) {
            alloc_unref(m->a);
            free(m);
        } else {
            m->next = maps;
            maps = m;
        }
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CS_ENTER(cuMemRetainAllocationHandle);
    CUresult r = cs_real.cuMemRetainAllocationHandle(handle, addr);
    if (r != CUDA_SUCCESS || !handle)
        return r;
    uint64_t p = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&vmm_mu);
    struct vmm_map *m = maps;
    while (m && !(p >= m->va && p < m->va + m->size))
        m = m->next;
    if (m && !handle_add(*handle, m->a))
        cs_warn_capped(8, SUBSYS, "out of host memory for a handle record");
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

/* ---- export and import ------------------------------------------------------ */

/* Moves a's charge from our slot into a share carrying key, or adds key
 * to a's share. vmm_mu held. */
/* A key that already names another live share cannot tell the two apart
 * (a driver whose exported descriptors share one inode would do that):
 * the allocation is then not shared through it, and its creator alone
 * pays while it holds it. Said once. */
static bool key_taken(const struct vmm_alloc *a, uint64_t key)
{
    int other = cs__ledger_share_find(&cs_rt.ledger, key);
    if (other < 0 || (a && other == a->share)) /* a NULL: not shared yet */
        return false;
    cs_warn_capped(1, SUBSYS, "two exported allocations have the same identity (descriptor "
                   "inode); such memory is charged to its creator only, while the creator "
                   "holds it (docs/accounting.md, \"Shared memory\")");
    return true;
}

static void share_alloc(struct vmm_alloc *a, uint64_t key)
{
    if (key_taken(a, key))
        return;
    if (a->share >= 0) {
        cs__ledger_share_add_key(&cs_rt.ledger, a->share, key);
    } else if (a->in_slot) {
        int j = cs__ledger_share_make(&cs_rt.ledger, key, a->dev, CS_MEM_VMM, a->bytes, true);
        if (j < 0)
            return; /* the charge stays in our slot; it never moves to a share */
        a->share = j;
        a->in_slot = false;
    } else {
        return;
    }
    if (share_charged(a->share))
        payer_publish(a, key);
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CS_ENTER(cuMemExportToShareableHandle);
    CUresult r = cs_real.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t key = export_key(shareableHandle, handleType);
    pthread_mutex_lock(&vmm_mu);
    struct vmm_handle *h = *handle_slot(handle);
    if (h && key)
        share_alloc(h->a, key);
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CS_ENTER(cuMemImportFromShareableHandle);
    uint64_t key = import_key(osHandle, shHandleType);
    CUresult r = cs_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (r != CUDA_SUCCESS || !handle || !key)
        return r;
    pthread_mutex_lock(&vmm_mu);
    /* Imported here before (or exported from here): the same allocation. */
    struct vmm_alloc *a = alloc_of_share(held_share_with_key(key));
    if (!a) {
        int dev = 0;
        uint64_t bytes = 0;
        int j = cs__ledger_share_join(&cs_rt.ledger, key, &dev, &bytes);
        a = import_alloc(key, j, dev, bytes, CS_MEM_VMM, handle_device(*handle));
        if (!a)
            cs_info(SUBSYS, "import of memory no process of this tenant or user shares: not "
                    "charged here (docs/accounting.md, \"Across tenants\")");
    }
    if (a && !handle_add(*handle, a))
        cs_warn_capped(8, SUBSYS, "out of host memory for a handle record");
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

/* ---- legacy IPC -------------------------------------------------------------- */

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CS_ENTER(cuIpcGetMemHandle);
    CUresult r = cs_real.cuIpcGetMemHandle(pHandle, dptr);
    if (r != CUDA_SUCCESS || !pHandle)
        return r;
    uint64_t key = bytes_key(KEY_IPC, pHandle->reserved, sizeof pHandle->reserved);
    pthread_mutex_lock(&vmm_mu); /* one exporter at a time for the record below */
    struct cs_tracked t;
    struct vmm_alloc *a = NULL;
    if (cs__track_get(CS_TRACK_PTR, dptr, &t) == 0 &&
        !key_taken((a = t.share ? alloc_of_share(t.share - 1) : NULL), key)) {
        if (a) {
            cs__ledger_share_add_key(&cs_rt.ledger, a->share, key);
            payer_publish(a, key);
        } else if (!t.share && t.bytes) {
            /* The charge moves from our slot into a share, held by a record
             * of ours until the allocation goes (cs__vmm_share_release). */
            int j = cs__ledger_share_make(&cs_rt.ledger, key, t.dev, t.cat, t.bytes, true);
            if (j >= 0) {
                t.share = j + 1;
                cs__track_put(CS_TRACK_PTR, dptr, &t);
                a = alloc_new(t.dev, t.bytes, j, false);
                if (a) {
                    a->refs = 1;
                    a->ipc_owner = true;
                    payer_publish(a, key);
                }
            }
        }
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

void cs__vmm_share_release(int j)
{
    pthread_mutex_lock(&vmm_mu);
    struct vmm_alloc *a = allocs;
    while (a && !(a->ipc_owner && a->share == j))
        a = a->next;
    if (a)
        alloc_unref(a); /* its payer files, then the share */
    else
        cs__ledger_share_leave(&cs_rt.ledger, j);
    pthread_mutex_unlock(&vmm_mu);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CS_ENTER(cuIpcOpenMemHandle_v2);
    CUresult r = cs_real.cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
    if (r != CUDA_SUCCESS || !pdptr)
        return r;
    uint64_t key = bytes_key(KEY_IPC, handle.reserved, sizeof handle.reserved);
    pthread_mutex_lock(&vmm_mu);
    struct ipc_open *o = ipcs;
    while (o && o->ptr != *pdptr)
        o = o->next;
    if (o) {
        o->count++; /* opened again: the driver returned the same pointer */
    } else if ((o = calloc(1, sizeof *o))) {
        struct vmm_alloc *a = alloc_of_share(held_share_with_key(key));
        if (!a) {
            int dev = 0;
            uint64_t bytes = 0;
            int j = cs__ledger_share_join(&cs_rt.ledger, key, &dev, &bytes);
            a = import_alloc(key, j, dev, bytes, CS_MEM_DATA, pointer_device(*pdptr));
        }
        if (a)
            a->refs++;
        o->ptr = *pdptr;
        o->count = 1;
        o->a = a;
        o->next = ipcs;
        ipcs = o;
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CS_ENTER(cuIpcCloseMemHandle);
    pthread_mutex_lock(&vmm_mu);
    struct ipc_open **pp = &ipcs;
    while (*pp && (*pp)->ptr != dptr)
        pp = &(*pp)->next;
    struct ipc_open *o = *pp;
    if (o)
        o->count--;
    pthread_mutex_unlock(&vmm_mu);
    CUresult r = cs_real.cuIpcCloseMemHandle(dptr);
    pthread_mutex_lock(&vmm_mu);
    if (o && r != CUDA_SUCCESS) {
        o->count++;
    } else if (o && o->count == 0) {
        for (pp = &ipcs; *pp && *pp != o;)
            pp = &(*pp)->next;
        if (*pp)
            *pp = o->next;
        if (o->a)
            alloc_unref(o->a);
        free(o);
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

/* ---- external memory ----------------------------------------------------------- */

/* cuImportExternalMemory brings memory allocated outside CUDA (Vulkan,
 * D3D, NvSci) onto the device: charged at its declared size, given back
 * by cuDestroyExternalMemory. */
CUresult CUDAAPI cuImportExternalMemory(CUexternalMemory *extMem_out,
                                        const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    CS_ENTER(cuImportExternalMemory);
    int dev = cs__current_device();
    if (!extMem_out || !desc || desc->size == 0 || dev < 0)
        return cs_real.cuImportExternalMemory(extMem_out, desc);
    CUresult r = cs__admit(dev, CS_MEM_EXTERNAL, desc->size);
    if (r != CUDA_SUCCESS)
        return r;
    r = cs_real.cuImportExternalMemory(extMem_out, desc);
    if (r != CUDA_SUCCESS) {
        cs__give_back(dev, CS_MEM_EXTERNAL, desc->size);
        return r;
    }
    if (cs__commit(CS_TRACK_EXTMEM, (uint64_t)(uintptr_t)*extMem_out, dev, CS_MEM_EXTERNAL,
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
