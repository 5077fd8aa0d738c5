/*
 * Shares: device memory that several processes of the tenant hold at once
 * (VMM allocations exported as shareable handles, legacy IPC). The driver
 * frees such memory only when the last reference in any process goes, so
 * its charge cannot live in one process's slot: a creator that exits or is
 * killed while an importer still maps it would take the charge along.
 *
 * A share is a record in the ledger (struct cs_ledger_share) whose bytes
 * are counted in dev[].used and in no slot. Liveness is the kernel's: every
 * process that holds the share holds an OFD read lock on its lock byte
 * (CS_LEDGER_SHARE_LOCK(j)); the kernel drops it when the process dies,
 * however it dies. Whoever gets the byte's write lock knows that nobody
 * holds the share and frees it; a write lock is also what makes one.
 *
 * Crash ordering (over-counted, never under), every change bracketed by an
 * announce in the acting process's own slot (heal.c counts shares' charged
 * bytes and a slot's pending bytes as held):
 *   make:  announce; slot bytes -= n; share.charged = n; LIVE; withdraw.
 *          Killed after the slot step: nobody holds the bytes, the heal
 *          returns them; the memory went with its only holder.
 *   free:  announce; charged -> 0; dev[].used -= n; FREE; withdraw.
 *          Killed in between: the sweep or the heal finishes it.
 *
 * Within one process all threads share one open file description, and OFD
 * locks do not exclude each other inside it: share_mu serialises this
 * file's functions, and `held` says which shares this process holds, so
 * that a sweep never takes (and so converts) a lock we hold ourselves.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"

#define SUBSYS "ledger"
#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

/* share_mu guards held[] and every share lock this process takes. */
static pthread_mutex_t share_mu = PTHREAD_MUTEX_INITIALIZER;
static bool held[CS_LEDGER_SHARES];

void cs__ledger_shares_atfork_child(void)
{
    /* The child has its own description (after_fork): it holds nothing. */
    cs__mutex_reset(&share_mu);
    for (int j = 0; j < CS_LEDGER_SHARES; j++)
        held[j] = false;
}

struct cs_ledger_share *cs__ledger_share(const struct cs_ledger *l, int j)
{
    if (!l->hdr || j < 0 || j >= CS_LEDGER_SHARES)
        return NULL;
    return (struct cs_ledger_share *)((char *)l->hdr + CS_LEDGER_SHARE_BASE) + j;
}

static int share_lock(const struct cs_ledger *l, int j, short type)
{
    return cs__ledger_lock_byte(l, CS_LEDGER_SHARE_LOCK(j), F_OFD_SETLK, type);
}

static int check(const struct cs_ledger *l)
{
    if (!l->hdr || l->fd < 0 || l->read_only)
        return -EBADF;
    if (l->slot < 0)
        return -ENOTCONN;
    if (l->owner_pid != getpid())
        return -ECHILD;
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE;
    return 0;
}

/* Returns share j's bytes to the aggregate and marks it FREE. We hold its
 * write lock, so no process holds or joins it. */
static void free_locked(struct cs_ledger *l, int j)
{
    struct cs_ledger_share *sh = cs__ledger_share(l, j);
    struct cs_ledger_slot *me = cs__ledger_my_slot(l);
    int dev = (int)LOAD(&sh->dev);
    uint64_t n = __atomic_exchange_n(&sh->charged, 0, __ATOMIC_SEQ_CST);
    if (dev < 0 || dev >= CS_MAX_DEVICES)
        dev = 0; /* a garbage record: nothing of it is trusted but its lock */
    cs__ledger_announce(me, dev, n);
    if (n)
        cs__ledger_sub_clamped(&l->hdr->dev[dev].used, n);
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        STORE(&sh->key[k], 0);
    STORE(&sh->state, (uint32_t)CS_SHARE_FREE);
    cs__ledger_withdraw(me, dev, n);
}

int cs__ledger_share_make(struct cs_ledger *l, uint64_t key, int dev, enum cs_mem_category cat,
                          uint64_t bytes, bool from_slot)
{
    int r = check(l);
    if (r)
        return r;
    if (dev < 0 || dev >= CS_MAX_DEVICES || (int)cat < 0 || cat >= CS_MEM_NCATEGORIES || !key)
        return -EINVAL;
    struct cs_ledger_slot *me = cs__ledger_my_slot(l);
    pthread_mutex_lock(&share_mu);
    r = -ENOSPC;
    for (int j = 0; j < CS_LEDGER_SHARES && r == -ENOSPC; j++) {
        struct cs_ledger_share *sh = cs__ledger_share(l, j);
        if (held[j] || LOAD(&sh->state) != CS_SHARE_FREE || share_lock(l, j, F_WRLCK))
            continue;
        if (LOAD(&sh->state) != CS_SHARE_FREE) { /* made and freed since we looked */
            share_lock(l, j, F_UNLCK);
            continue;
        }
        STORE(&sh->state, (uint32_t)CS_SHARE_MAKING);
        STORE(&sh->dev, (uint32_t)dev);
        STORE(&sh->cat, (uint32_t)cat);
        STORE(&sh->bytes, bytes);
        STORE(&sh->key[0], key);
        cs__ledger_announce(me, dev, bytes);
        uint64_t took = from_slot ? cs__ledger_sub_clamped(&me->bytes[dev][cat], bytes) : 0;
        STORE(&sh->charged, took);
        STORE(&sh->state, (uint32_t)CS_SHARE_LIVE);
        cs__ledger_withdraw(me, dev, bytes);
        share_lock(l, j, F_RDLCK); /* atomic downgrade: we hold it */
        held[j] = true;
        r = j;
    }
    pthread_mutex_unlock(&share_mu);
    if (r == -ENOSPC)
        cs_warn_capped(4, SUBSYS, "ledger %s: all %d share records in use; %" PRIu64 " bytes "
                       "of shared memory stay charged to this process only", l->path,
                       CS_LEDGER_SHARES, bytes);
    return r;
}

int cs__ledger_share_adopt(struct cs_ledger *l, int j)
{
    int r = check(l);
    struct cs_ledger_share *sh = cs__ledger_share(l, j);
    if (r || !sh)
        return r ? r : -EINVAL;
    pthread_mutex_lock(&share_mu);
    r = held[j] ? 0 : -ENOENT;
    uint32_t dev = LOAD(&sh->dev);
    uint64_t n = LOAD(&sh->bytes);
    if (!r && (LOAD(&sh->charged) || dev >= CS_MAX_DEVICES))
        r = -EALREADY;
    if (!r) {
        /* The memory exists and we hold it: counted whatever the limit
         * (admission refuses what follows while the tenant is over). */
        struct cs_ledger_slot *me = cs__ledger_my_slot(l);
        cs__ledger_announce(me, (int)dev, n);
        __atomic_fetch_add(&l->hdr->dev[dev].used, n, __ATOMIC_SEQ_CST);
        STORE(&sh->charged, n);
        cs__ledger_withdraw(me, (int)dev, n);
    }
    pthread_mutex_unlock(&share_mu);
    return r;
}

int cs__ledger_share_add_key(struct cs_ledger *l, int j, uint64_t key)
{
    struct cs_ledger_share *sh = cs__ledger_share(l, j);
    if (!sh || !key)
        return -EINVAL;
    pthread_mutex_lock(&share_mu);
    int r = held[j] ? 0 : -ENOENT;
    if (!r) {
        int k;
        for (k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
            if (LOAD(&sh->key[k]) == key || LOAD(&sh->key[k]) == 0)
                break;
        if (k == CS_LEDGER_SHARE_KEYS) { /* full: the oldest identity goes */
            for (k = 0; k + 1 < CS_LEDGER_SHARE_KEYS; k++)
                STORE(&sh->key[k], LOAD(&sh->key[k + 1]));
        }
        STORE(&sh->key[k], key);
    }
    pthread_mutex_unlock(&share_mu);
    return r;
}

static bool has_key(const struct cs_ledger_share *sh, uint64_t key)
{
    for (int k = 0; k < CS_LEDGER_SHARE_KEYS; k++)
        if (LOAD(&sh->key[k]) == key)
            return true;
    return false;
}

int cs__ledger_share_find(const struct cs_ledger *l, uint64_t key)
{
    for (int j = 0; key && l->hdr && j < CS_LEDGER_SHARES; j++) {
        const struct cs_ledger_share *sh = cs__ledger_share(l, j);
        if (LOAD(&sh->state) == CS_SHARE_LIVE && has_key(sh, key))
            return j;
    }
    return -ENOENT;
}

int cs__ledger_share_join(struct cs_ledger *l, uint64_t key, int *dev, uint64_t *bytes)
{
    int r = check(l);
    if (r)
        return r;
    if (!key)
        return -ENOENT;
    pthread_mutex_lock(&share_mu);
    r = -ENOENT;
    for (int j = 0; j < CS_LEDGER_SHARES && (r == -ENOENT || r == -ESTALE); j++) {
        struct cs_ledger_share *sh = cs__ledger_share(l, j);
        if (held[j] || LOAD(&sh->state) != CS_SHARE_LIVE || !has_key(sh, key))
            continue;
        *dev = (int)LOAD(&sh->dev);
        *bytes = LOAD(&sh->bytes);
        /* Waits only for a maker or a freer, who hold the write lock for a
         * few stores; then the record must still be the one we found. */
        if (cs__ledger_lock_byte(l, CS_LEDGER_SHARE_LOCK(j), F_OFD_SETLKW, F_RDLCK))
            continue;
        if (LOAD(&sh->state) != CS_SHARE_LIVE || !has_key(sh, key)) {
            share_lock(l, j, F_UNLCK);
            r = -ESTALE; /* freed while we came: the caller's import holds it now */
            continue;
        }
        held[j] = true;
        r = j;
    }
    pthread_mutex_unlock(&share_mu);
    return r;
}

/* Frees share j if nobody holds it: its write lock free means that. */
static bool free_if_unheld(struct cs_ledger *l, int j)
{
    struct cs_ledger_share *sh = cs__ledger_share(l, j);
    if (share_lock(l, j, F_WRLCK))
        return false;
    bool freed = LOAD(&sh->state) != CS_SHARE_FREE;
    if (freed) {
        cs_info(SUBSYS, "ledger %s: share %d (%" PRIu64 " bytes) held by nobody; freed",
                l->path, j, LOAD(&sh->charged));
        free_locked(l, j);
    }
    share_lock(l, j, F_UNLCK);
    return freed;
}

void cs__ledger_share_leave(struct cs_ledger *l, int j)
{
    if (check(l) || j < 0 || j >= CS_LEDGER_SHARES)
        return;
    pthread_mutex_lock(&share_mu);
    if (held[j]) {
        held[j] = false;
        /* Unlock, then try to free: of several holders leaving at once the
         * last to unlock finds the byte free. */
        share_lock(l, j, F_UNLCK);
        free_if_unheld(l, j);
    }
    pthread_mutex_unlock(&share_mu);
}

int cs__ledger_share_sweep(struct cs_ledger *l)
{
    if (check(l))
        return 0;
    int n = 0;
    pthread_mutex_lock(&share_mu);
    for (int j = 0; j < CS_LEDGER_SHARES; j++)
        if (!held[j] && LOAD(&cs__ledger_share(l, j)->state) != CS_SHARE_FREE &&
            free_if_unheld(l, j))
            n++;
    pthread_mutex_unlock(&share_mu);
    return n;
}
