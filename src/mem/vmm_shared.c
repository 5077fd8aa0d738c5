/*
 * Memory other processes and tenants hold (docs/accounting.md, "Shared
 * memory", "Across tenants"): VMM exports and imports, legacy IPC, payer
 * files. The per-process records are vmm.h's.
 *
 * Once an allocation is exported (a POSIX fd or fabric handle) its charge
 * moves out of our slot into a ledger share (src/ledger/share.c): every
 * process of the tenant that imports it holds the share, and the share
 * keeps the charge until the last holder lets go or dies. Both sides find
 * the share by a key they can both compute: the fabric handle's bytes; for
 * a POSIX fd, a random key its holders publish with a private dup of each
 * exported open file description (vmm_fdid.c: every exported fd is an open
 * of /dev/nvidiactl, so its inode names nothing). An fd whose description
 * no live process holds any more (the exporter let go while the fd was in
 * flight: the fd alone kept the memory) is charged to its importer as a
 * new share once its first mapping says its size. Legacy IPC works alike: cuIpcGetMemHandle moves the cuMemAlloc
 * charge into a share keyed by the 64 handle bytes, and each process's
 * opens of one handle (the driver returns the same pointer and counts
 * them) are one reference.
 *
 * Across tenants: every export also publishes a payer file
 * (src/ledger/payer.c). A process of another tenant that imports the
 * memory keeps a share in its own ledger carrying nothing and stands by;
 * when no tenant pays any more (the creating tenant let go or died), the
 * first standing-by process to look (a view, a charge) takes the
 * charge over into its tenant's share. An import with no share in our
 * ledger and no payer file of our uid (another user's memory, or a process
 * outside cushare) is not charged here; except a POSIX fd no live process
 * of our uid holds a description of (above): the importer holds it alone.
 *
 * cs__vmm_mu (vmm.h) guards the IPC table too; payer_allocs is atomic,
 * written under it.
 */
#define _GNU_SOURCE
#include "mem/vmm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "account/account.h"
#include "core/log.h"
#include "core/path.h"

#define SUBSYS "mem"

/* A legacy IPC pointer opened `count` times: one reference to `a` (NULL:
 * memory not charged here). */
struct ipc_open {
    struct ipc_open *next;
    uint64_t ptr;
    int count;
    struct vmm_alloc *a;
};

static struct ipc_open *ipcs;
/* Records holding payer files, and records kept only by exported
 * descriptions: views and charges look at them (cs__vmm_take_over_unpaid) only
 * while there are any. */
static int payer_allocs;
static int fd_only_allocs;

void cs__vmm_fd_only_changed(int delta)
{
    __atomic_fetch_add(&fd_only_allocs, delta, __ATOMIC_RELAXED);
}

void cs__vmm_shared_atfork_child(void)
{
    /* Our copies of the payer descriptors only: the parent keeps its locks
     * (an OFD lock goes with the last descriptor of its file; a POSIX lock
     * is the parent's alone). */
    cs__payer_atfork_child();
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next)
        for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
            if (a->payer_fd[k] >= 0)
                close(a->payer_fd[k]);
    while (ipcs) {
        struct ipc_open *o = ipcs;
        ipcs = o->next;
        free(o);
    }
    payer_allocs = 0;
    fd_only_allocs = 0;
}

/* ---- keys both sides can compute ------------------------------------------ */

enum key_kind { KEY_FABRIC = 2, KEY_IPC };

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

static uint64_t fabric_key(const void *shareable, CUmemAllocationHandleType type)
{
    if (type == CU_MEM_HANDLE_TYPE_FABRIC && shareable)
        return bytes_key(KEY_FABRIC, shareable, sizeof(CUmemFabricHandle));
    return 0; /* POSIX fds: vmm_fdid.c; Win32 handles: not on Linux */
}

/* ---- payer files (across tenants) --------------------------------------------- */

static const char *share_dir(void)
{
    return cs__config()->share_dir;
}

static bool has_payer(const struct vmm_alloc *a)
{
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        if (a->payer_fd[k] >= 0)
            return true;
    return false;
}

/* Keeps fd (a payer file of key) with a. cs__vmm_mu held. */
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

void cs__vmm_payer_drop_all(struct vmm_alloc *a)
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
        cs_warn_capped(1, SUBSYS, "another allocation of this user has the same identity; "
                       "other tenants importing it will not be charged when "
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
    const struct cs_ledger_share *sh = cs__ledger_share(cs__ledger(), j);
    return sh && __atomic_load_n(&sh->charged, __ATOMIC_ACQUIRE) != 0;
}

/* One allocation: pays if its tenant's share carries the bytes, else
 * takes the charge over when nobody pays. cs__vmm_mu held. */
static void pay_or_take_over(struct vmm_alloc *a)
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
        int r = cs__ledger_share_adopt(cs__ledger(), a->share);
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

void cs__vmm_take_over_unpaid(void)
{
    if (!__atomic_load_n(&payer_allocs, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&fd_only_allocs, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&cs__vmm_mu);
    for (struct vmm_alloc *a = cs__vmm_allocs, *next; a; a = next) {
        next = a->next;
        if (a->fd_only && !cs__vmm_fdid_exports_alive(a)) {
            /* Every exported descriptor is closed: the driver freed it. */
            a->fd_only = false;
            cs__vmm_fd_only_changed(-1);
            cs__vmm_alloc_finish(a);
        } else if (has_payer(a)) {
            pay_or_take_over(a);
        }
    }
    pthread_mutex_unlock(&cs__vmm_mu);
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

/* An import: our tenant's share of key (joined by the caller, j >= 0; a
 * share freed while we came, j == -ESTALE, is made again and charged to
 * us), or else another tenant's payer file: a share of ours standing by.
 * Returns the allocation or NULL (not charged here). cs__vmm_mu held. */
static struct vmm_alloc *import_alloc(uint64_t key, int j, int dev, uint64_t bytes,
                                      enum cs_mem_category cat, int local_dev)
{
    struct vmm_alloc *a = NULL;
    if (j == -ESTALE) {
        /* Its last holder in our tenant let go after our import: the
         * memory is ours alone now, charged as a share of our own. */
        j = cs__ledger_share_make(cs__ledger(), key, dev, cat, bytes, false);
        if (j >= 0 && cs__ledger_share_adopt(cs__ledger(), j)) {
            cs__ledger_share_leave(cs__ledger(), j);
            j = -ENOENT;
        }
    }
    int pdev = dev;
    uint64_t pbytes = bytes;
    int fd = cs__payer_open(share_dir(), key, false, &pdev, &pbytes);
    if (j < 0 && fd >= 0) {
        /* Another tenant's index of the device may not be ours (its own
         * CUDA_VISIBLE_DEVICES): what our driver says wins. */
        dev = local_dev >= 0 && local_dev < CS_MAX_DEVICES ? local_dev : pdev;
        bytes = pbytes;
        j = cs__ledger_share_make(cs__ledger(), key, dev, cat, bytes, false);
    }
    if (j >= 0 && !(a = cs__vmm_alloc_new(dev, bytes, j, false)))
        cs__ledger_share_leave(cs__ledger(), j);
    if (a && fd >= 0) {
        payer_keep(a, key, fd);
        pay_or_take_over(a);
    } else if (fd >= 0) {
        cs__payer_close(share_dir(), key, fd);
    }
    return a;
}

/* ---- export and import ------------------------------------------------------ */

/* A key that already names another live share cannot tell the two apart:
 * the allocation is then not shared through it, and its creator alone
 * pays while it holds it. Said once. */
static bool key_taken(const struct vmm_alloc *a, uint64_t key)
{
    int other = cs__ledger_share_find(cs__ledger(), key);
    if (other < 0 || (a && other == a->share)) /* a NULL: not shared yet */
        return false;
    cs_warn_capped(1, SUBSYS, "two exported allocations have the same identity; such memory is charged to its creator only, while the creator "
                   "holds it (docs/accounting.md, \"Shared memory\")");
    return true;
}

/* Moves a's charge from our slot into a share carrying key (and publishes
 * its payer file), or adds key to a's share. cs__vmm_mu held. */
static void share_alloc(struct vmm_alloc *a, uint64_t key)
{
    if (key_taken(a, key))
        return;
    if (a->share >= 0) {
        cs__ledger_share_add_key(cs__ledger(), a->share, key);
    } else if (a->in_slot) {
        int j = cs__account_share_from_slot(cs__ledger(), key, a->dev, CS_MEM_VMM, a->bytes);
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

/* A POSIX-fd export of a: its identity (made at its first export) goes
 * with its share, and our dup of the new description tells importers.
 * cs__vmm_mu held. */
static void export_fd(struct vmm_alloc *a, int fd)
{
    if (!a->fd_key) {
        a->fd_key = cs__vmm_fdid_new_key();
        share_alloc(a, a->fd_key);
    }
    if (!cs__vmm_fdid_mark_export(a, fd))
        cs_warn_capped(1, SUBSYS, "cannot tell when an exported descriptor is closed (no "
                       "lock on it): its memory stays charged until this process exits");
    if (!cs__vmm_fdid_hold(a, fd))
        cs_warn_capped(4, SUBSYS, "cannot publish the identity of an exported descriptor in "
                       "%s; a process importing it will be charged for it as new memory (set "
                       "CUSHARE_SHARE_DIR to a writable directory)",
                       cs__config()->share_dir[0] ? cs__config()->share_dir : CS_NODE_DIR);
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CS_ENTER(cuMemExportToShareableHandle);
    CUresult r = cs_real.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
    if (r != CUDA_SUCCESS || !shareableHandle)
        return r;
    uint64_t key = fabric_key(shareableHandle, handleType);
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_alloc *a = cs__vmm_handle_alloc(handle);
    if (a && handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        export_fd(a, *(const int *)shareableHandle);
    else if (a && key)
        share_alloc(a, key);
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

void cs__vmm_size_known(struct vmm_alloc *a, uint64_t bytes)
{
    a->unsized = false;
    a->bytes = bytes;
    int j = cs__ledger_share_make(cs__ledger(), a->fd_key, a->dev, CS_MEM_VMM, bytes, false);
    if (j >= 0 && cs__ledger_share_adopt(cs__ledger(), j)) {
        cs__ledger_share_leave(cs__ledger(), j);
        j = -1;
    }
    if (j < 0) {
        cs_warn_capped(4, SUBSYS, "cannot charge %llu bytes of imported memory that only its "
                       "descriptor kept alive", (unsigned long long)bytes);
        return;
    }
    a->share = j;
    cs_info(SUBSYS, "device %d: %llu bytes imported from a descriptor no process holds any "
            "more: charged to this tenant", a->dev, (unsigned long long)bytes);
    payer_publish(a, a->fd_key);
}

static struct vmm_alloc *alloc_with_fd_key(uint64_t key)
{
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next)
        if (a->fd_key == key)
            return a;
    return NULL;
}

/* Our record of an import (ours, our tenant's, another tenant's share) or
 * NULL (not charged here). cs__vmm_mu held. */
static struct vmm_alloc *import_record(uint64_t key, int local_dev)
{
    /* Imported here before (or exported from here): the same allocation. */
    struct vmm_alloc *a = cs__vmm_alloc_of_share(cs__vmm_held_share_with_key(key));
    if (!a) {
        int dev = 0;
        uint64_t bytes = 0;
        int j = cs__ledger_share_join(cs__ledger(), key, &dev, &bytes);
        a = import_alloc(key, j, dev, bytes, CS_MEM_VMM, local_dev);
    }
    return a;
}

/* A POSIX-fd import: found says what vmm_fdid.c learned of fd's
 * description (0: key). cs__vmm_mu held. */
static struct vmm_alloc *import_fd(int found, uint64_t key, int local_dev)
{
    struct vmm_alloc *a = NULL;
    if (found == -ENOSYS)
        cs_warn_capped(1, SUBSYS, "kcmp(2) is not permitted here (a seccomp filter: a container "
                       "without CAP_SYS_PTRACE?), so an imported fd cannot be matched with its "
                       "exporter: such memory is charged to each importer as well (over-count; "
                       "docs/accounting.md, \"Shared memory\")");
    if (found == 0 && !(a = alloc_with_fd_key(key)) && (a = import_record(key, local_dev)))
        a->fd_key = key;
    if (!a && local_dev >= 0 && local_dev < CS_MAX_DEVICES) {
        /* Nobody we can believe holds it: only the fd kept it (the driver
         * counts an open description as a reference), or its last holder
         * let go while we matched (no share, no payer file of our uid is
         * left), or its holder is another user's or pod's process, whose
         * markers we do not believe. From now on we hold it: an over-count
         * at worst, never memory nobody pays for. */
        a = cs__vmm_alloc_new(local_dev, 0, -1, false);
        if (a) {
            a->unsized = true;
            a->fd_key = found == 0 ? key : cs__vmm_fdid_new_key();
        }
    }
    /* No dup of an imported description: it would keep the exporter's
     * liveness byte held after every exported fd was closed, and the
     * exporter's charge with it, until the exporter next looks. A later
     * importer of the same description matches the exporter's dup, or is
     * charged as for new memory (an over-count). */
    return a;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CS_ENTER(cuMemImportFromShareableHandle);
    bool posix = shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    int fd = (int)(intptr_t)osHandle;
    uint64_t key = posix ? 0 : fabric_key(osHandle, shHandleType);
    int found = posix ? cs__vmm_fdid_find(fd, &key) : 0;
    CUresult r = cs_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (r != CUDA_SUCCESS || !handle || (!posix && !key))
        return r;
    int local_dev = handle_device(*handle); /* a driver call: before the lock */
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_alloc *a = posix ? import_fd(found, key, local_dev)
                                : import_record(key, local_dev);
    if (!a && !posix)
        cs_info(SUBSYS, "import of memory no process of this tenant or user shares: not "
                "charged here (docs/accounting.md, \"Across tenants\")");
    if (a && !cs__vmm_handle_add(*handle, a))
        cs_warn_capped(8, SUBSYS, "out of host memory for a handle record");
    pthread_mutex_unlock(&cs__vmm_mu);
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
    pthread_mutex_lock(&cs__vmm_mu); /* one exporter at a time for the record below */
    struct cs_tracked t;
    struct vmm_alloc *a = NULL;
    if (cs__track_get(CS_TRACK_PTR, dptr, &t) == 0 &&
        !key_taken((a = t.share ? cs__vmm_alloc_of_share(t.share - 1) : NULL), key)) {
        if (a) {
            cs__ledger_share_add_key(cs__ledger(), a->share, key);
            payer_publish(a, key);
        } else if (!t.share && t.bytes) {
            /* The charge moves from our slot into a share, held by a record
             * of ours until the allocation goes (cs__vmm_share_release). */
            int j = cs__account_share_from_slot(cs__ledger(), key, t.dev, t.cat, t.bytes);
            if (j >= 0) {
                t.share = j + 1;
                cs__track_put(CS_TRACK_PTR, dptr, &t);
                a = cs__vmm_alloc_new(t.dev, t.bytes, j, false);
                if (a) {
                    a->refs = 1;
                    a->ipc_owner = true;
                    payer_publish(a, key);
                }
            }
        }
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

void cs__vmm_share_release(int j)
{
    pthread_mutex_lock(&cs__vmm_mu);
    struct vmm_alloc *a = cs__vmm_allocs;
    while (a && !(a->ipc_owner && a->share == j))
        a = a->next;
    if (a)
        cs__vmm_alloc_unref(a); /* its payer files, then the share */
    else
        cs__ledger_share_leave(cs__ledger(), j);
    pthread_mutex_unlock(&cs__vmm_mu);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CS_ENTER(cuIpcOpenMemHandle_v2);
    CUresult r = cs_real.cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
    if (r != CUDA_SUCCESS || !pdptr)
        return r;
    uint64_t key = bytes_key(KEY_IPC, handle.reserved, sizeof handle.reserved);
    int local_dev = pointer_device(*pdptr); /* a driver call: before the lock */
    pthread_mutex_lock(&cs__vmm_mu);
    struct ipc_open *o = ipcs;
    while (o && o->ptr != *pdptr)
        o = o->next;
    if (o) {
        o->count++; /* opened again: the driver returned the same pointer */
    } else if ((o = calloc(1, sizeof *o))) {
        struct vmm_alloc *a = cs__vmm_alloc_of_share(cs__vmm_held_share_with_key(key));
        if (!a) {
            int dev = 0;
            uint64_t bytes = 0;
            int j = cs__ledger_share_join(cs__ledger(), key, &dev, &bytes);
            a = import_alloc(key, j, dev, bytes, CS_MEM_DATA, local_dev);
        }
        if (a)
            cs__vmm_alloc_ref(a);
        o->ptr = *pdptr;
        o->count = 1;
        o->a = a;
        o->next = ipcs;
        ipcs = o;
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CS_ENTER(cuIpcCloseMemHandle);
    pthread_mutex_lock(&cs__vmm_mu);
    struct ipc_open **pp = &ipcs;
    while (*pp && (*pp)->ptr != dptr)
        pp = &(*pp)->next;
    struct ipc_open *o = *pp;
    if (o)
        o->count--;
    pthread_mutex_unlock(&cs__vmm_mu);
    CUresult r = cs_real.cuIpcCloseMemHandle(dptr);
    pthread_mutex_lock(&cs__vmm_mu);
    if (o && r != CUDA_SUCCESS) {
        o->count++;
    } else if (o && o->count == 0) {
        for (pp = &ipcs; *pp && *pp != o;)
            pp = &(*pp)->next;
        if (*pp)
            *pp = o->next;
        if (o->a)
            cs__vmm_alloc_unref(o->a);
        free(o);
    }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
}
