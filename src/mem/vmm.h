/*
 * Private to src/mem: what this process knows of each VMM allocation and
 * of each cuMemAlloc handed out over legacy IPC, shared by vmm.c (create,
 * map, retain, release: the references one process holds) and
 * vmm_shared.c (export, import, IPC, payer files: the references other
 * processes and tenants hold). docs/accounting.md, "Shared memory".
 *
 * cs__vmm_mu guards the list and every record and table of both files; it
 * is never held across a call into the driver's allocation functions
 * (records are taken out first and put back if the driver refuses). Lock
 * order: cs__vmm_mu, then the ledger's share mutex.
 */
#ifndef CS_MEM_VMM_H
#define CS_MEM_VMM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem/charge.h"

/* Exported open file descriptions of one allocation we keep dups of. */
#define VMM_FD_DUPS 4

/* One allocation as this process sees it. */
struct vmm_alloc {
    struct vmm_alloc *next, *prev; /* cs__vmm_allocs, doubly linked */
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
    uint64_t fd_key;       /* identity of its POSIX-fd exports (0 none) */
    int fd_dup[VMM_FD_DUPS]; /* our private dups of its exported descriptions
                              * (-1 none): vmm_fdid.c */
    int fd_marker[VMM_FD_DUPS]; /* our locked marker of each dup (-1 none) */
    int export_probe;      /* vmm_fdid.c's probe of its exported descriptions'
                            * liveness byte, -1 none exported */
    bool export_pinned;    /* exported, but liveness cannot be asked: the
                            * charge stays while this process lives */
    bool fd_only;          /* no handle or mapping here any more: only
                            * exported descriptions keep it (charge kept
                            * until they are closed everywhere) */
    bool unsized;          /* imported from a description nobody holds: its
                            * size (and charge) comes with its first mapping */
};

extern pthread_mutex_t cs__vmm_mu;
extern struct vmm_alloc *cs__vmm_allocs;

/* All with cs__vmm_mu held. alloc_new: a record with no reference yet,
 * NULL without memory. alloc_unref: drops one reference; the last gives
 * the charge (or the process's hold of its share) back and frees a.
 * handle_add: one more reference to a through a driver handle value
 * (false: out of memory); handle_alloc: whose that value is, or NULL.
 * alloc_of_share: the record holding ledger share j (j < 0: NULL).
 * held_share_with_key: the share one of our records holds that carries
 * key, or -1. */
struct vmm_alloc *cs__vmm_alloc_new(int dev, uint64_t bytes, int share, bool in_slot);
void cs__vmm_alloc_unref(struct vmm_alloc *a);
/* One more reference to a (a record kept only by exported descriptions is
 * held here again). */
void cs__vmm_alloc_ref(struct vmm_alloc *a);
/* vmm_shared.c: the count of fd_only records changed by delta. */
void cs__vmm_fd_only_changed(int delta);
bool cs__vmm_handle_add(uint64_t handle, struct vmm_alloc *a);
struct vmm_alloc *cs__vmm_handle_alloc(uint64_t handle);
struct vmm_alloc *cs__vmm_alloc_of_share(int j);
int cs__vmm_held_share_with_key(uint64_t key);

/* vmm_shared.c: lets go of a's payer files (cs__vmm_mu held); in a fork
 * child, forgets its IPC opens and closes its copies of payer files. */
void cs__vmm_payer_drop_all(struct vmm_alloc *a);
void cs__vmm_shared_atfork_child(void);
/* vmm.c: gives a's charge (or our hold of its share) back and frees it;
 * vmm_shared.c calls it when exported descriptions no longer keep an
 * fd_only record (cs__vmm_mu held). */
void cs__vmm_alloc_finish(struct vmm_alloc *a);
/* vmm_shared.c: the first mapping of an unsized import gives its size:
 * charged to our tenant from then on (cs__vmm_mu held). */
void cs__vmm_size_known(struct vmm_alloc *a, uint64_t bytes);

/* vmm_fdid.c: which open file description of /dev/nvidiactl names which
 * allocation (docs/accounting.md, "Shared memory"). All but find with
 * cs__vmm_mu held.
 * fdid_new_key: a fresh identity for an allocation's POSIX-fd exports.
 * fdid_hold: a keeps a private dup of fd's description and publishes
 * (our pid, the dup, key) for importers; false when it cannot.
 * fdid_drop_all: closes a's dups and withdraws them (an exported
 * description keeps the memory alive, so no dup may outlive our last
 * reference). fdid_atfork_child: closes the child's copies only.
 * fdid_find: the key of the allocation behind fd, matched with
 * kcmp(KCMP_FILE) against every live holder's dup: 0, -ENOENT (no live
 * holder: only descriptions in flight keep it), -EPERM (some holder could
 * not be compared: another user's), -ENOSYS (kcmp refused to all: a
 * seccomp filter). */
struct cs_fdid_marker {
    unsigned uid;
    uint64_t key;
    int pid, fd;
};
uint64_t cs__vmm_fdid_new_key(void);
/* fdid_parse: a marker's name, only in its one canonical spelling.
 * fdid_mark_export: fd (a new POSIX export of a) carries a's liveness
 * byte; false (a->export_pinned set) when it cannot.
 * fdid_exports_alive: whether any description exported of a is still
 * open anywhere (in flight included); true when it cannot tell. */
bool cs__vmm_fdid_parse(const char *name, struct cs_fdid_marker *m);
bool cs__vmm_fdid_mark_export(struct vmm_alloc *a, int fd);
bool cs__vmm_fdid_exports_alive(const struct vmm_alloc *a);
bool cs__vmm_fdid_hold(struct vmm_alloc *a, int fd);
void cs__vmm_fdid_drop_all(struct vmm_alloc *a);
void cs__vmm_fdid_atfork_child(void);
int cs__vmm_fdid_find(int fd, uint64_t *key);

#endif
