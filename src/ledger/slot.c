/*
 * Slots: claim, leave, crash detection and reaping.
 *
 * A slot belongs to whoever holds the OFD write lock on its lock byte
 * (CS_LEDGER_LOCK_BASE + index, far beyond EOF). The lock is the slot's
 * mutex and its liveness signal at once: the kernel drops it when the last
 * reference to the open file description goes, however the process dies.
 * PIDs are only displayed, never trusted: they are reused and differ
 * between PID namespaces.
 *
 * Taking a slot's lock (non-blocking) finds it either FREE (claim it) or
 * LIVE with a dead owner (reap it: return its bytes, mark it FREE). Reaping
 * happens under the lock, and the state is FREE before the lock is dropped,
 * so each dead slot is reaped exactly once. Bytes are taken out of the slot
 * before they are subtracted from the aggregate, and every such return is
 * announced in the slot (pending, op_seq) like an uncharge, so a reaper
 * killed in between leaves the aggregate over-counted, never under, and a
 * healer running meanwhile counts what is in flight (heal.c).
 *
 * Dead slots are reaped when a process claims a slot, whenever reaping is
 * asked for (views, refused admissions, `cushare status`), and then the
 * aggregates are healed. At claim this is opportunistic: only the process
 * that gets the tenant's heal lock without waiting does it, so claims never
 * queue behind each other.
 *
 * Within one process the description is shared by all threads, and OFD
 * locks do not exclude each other inside one description; a process-private
 * mutex therefore serialises the code that takes slot or heal locks (claim,
 * leave, reap, heal). It is never held across anything slow, and never
 * across processes.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"

#define SUBSYS "ledger"

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;

void cs__ledger_slots_atfork_child(void)
{
    /* Another parent thread may have held it at fork: start over. */
    cs__mutex_reset(&slot_mu);
}

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_RLX(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static struct cs_ledger_slot *slot_at(const struct cs_ledger *l, int idx)
{
    return (struct cs_ledger_slot *)((char *)l->hdr + CS_LEDGER_HEADER_SIZE +
                                     (size_t)idx * sizeof(struct cs_ledger_slot));
}

struct cs_ledger_slot *cs__ledger_slot(const struct cs_ledger *l, int idx)
{
    if (!l->hdr || idx < 0 || idx >= CS_LEDGER_SLOTS)
        return NULL;
    return slot_at(l, idx);
}

struct cs_ledger_slot *cs__ledger_my_slot(const struct cs_ledger *l)
{
    return cs__ledger_slot(l, l->slot);
}

int cs__ledger_lock_byte(const struct cs_ledger *l, uint64_t byte, int cmd, short type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)byte;
    fl.l_len = 1;
    fl.l_pid = 0; /* required for OFD locks */
    if (fcntl(l->fd, cmd, &fl) == 0)
        return 0;
    int e = errno;
    return e == EACCES ? -EAGAIN : -e;
}

static int try_lock(const struct cs_ledger *l, int idx)
{
    return cs__ledger_lock_byte(l, CS_LEDGER_LOCK_BASE + (uint64_t)idx, F_OFD_SETLK, F_WRLCK);
}

static void unlock(const struct cs_ledger *l, int idx)
{
    cs__ledger_lock_byte(l, CS_LEDGER_LOCK_BASE + (uint64_t)idx, F_OFD_SETLK, F_UNLCK);
}

/* Subtracts up to v, never below zero; returns what was subtracted. */
uint64_t cs__ledger_sub_clamped(uint64_t *p, uint64_t v)
{
    uint64_t cur = LOAD(p), take;
    do
        take = cur < v ? cur : v;
    while (!__atomic_compare_exchange_n(p, &cur, cur - take, true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
    return take;
}

void cs__ledger_announce(struct cs_ledger_slot *s, int dev, uint64_t bytes)
{
    /* pending before op_seq: a healer that reads the new op_seq first
     * and pending second is sure to see these bytes (heal.c). */
    __atomic_fetch_add(&s->pending[dev], bytes, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&s->op_seq, 1, __ATOMIC_SEQ_CST);
}

void cs__ledger_withdraw(struct cs_ledger_slot *s, int dev, uint64_t bytes)
{
    cs__ledger_sub_clamped(&s->pending[dev], bytes);
}

uint64_t cs__ledger_uncharge_slot(struct cs_ledger *l, struct cs_ledger_slot *s, int dev, int cat,
                                  uint64_t bytes, uint64_t *from_aggregate)
{
    cs__ledger_announce(s, dev, bytes);
    uint64_t took = cs__ledger_sub_clamped(&s->bytes[dev][cat], bytes);
    /* Damaged meanwhile (guard.c): the slot was the private copy, and so
     * would the aggregate be; nothing to give back to. */
    uint64_t agg = took && cs__ledger_usable(l)
                       ? cs__ledger_sub_clamped(&l->hdr->dev[dev].used, took) : 0;
    cs__ledger_withdraw(s, dev, bytes);
    if (from_aggregate)
        *from_aggregate = agg;
    return took;
}

/* Returns everything slot s holds. Only its owner adds to a slot, and the
 * owner is either us (leave) or dead (reap); a few rounds cover a thread
 * of ours that charged while we returned. What is left (a thread still
 * charging at exit) stays counted: an over-count the heal repairs. */
static uint64_t return_all(struct cs_ledger *l, struct cs_ledger_slot *s)
{
    uint64_t total = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++)
            for (int round = 0; round < 8; round++) {
                uint64_t v = LOAD(&s->bytes[d][c]);
                if (!v)
                    break;
                total += cs__ledger_uncharge_slot(l, s, d, c, v, NULL);
            }
    return total;
}

/* A descriptor inherited over fork shares the parent's locks: taking "a
 * lock" through it would succeed on the parent's own slot. */
static bool fork_child_unprepared(const struct cs_ledger *l, const char *what)
{
    if (l->owner_pid == getpid())
        return false;
    cs_warn_capped(4, SUBSYS, "ledger %s: %s in a fork child before cs__ledger_after_fork; "
                   "refused (the parent owns this descriptor)", l->path, what);
    return true;
}

static int check_writable(const struct cs_ledger *l, const char *what)
{
    if (!l->hdr || l->fd < 0)
        return -EBADF;
    if (l->read_only) {
        cs_err(SUBSYS, "ledger %s: %s needs a read-write open", l->path, what);
        return -EBADF;
    }
    if (fork_child_unprepared(l, what))
        return -ECHILD;
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE; /* damaged in use: said once by guard.c */
    return 0;
}

/* Returns the bytes of a LIVE slot whose lock we hold and marks it FREE.
 * False when it was not LIVE (nothing to do). Whether the dead owner's
 * in-flight charge (its pending bytes) reached the aggregate cannot be
 * known; that is the over-count the heal measures and returns. */
static bool reap_locked(struct cs_ledger *l, int idx)
{
    struct cs_ledger_slot *s = slot_at(l, idx);
    if (LOAD_ACQ(&s->state) != CS_SLOT_LIVE)
        return false;
    uint64_t total = return_all(l, s);
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        __atomic_store_n(&s->pending[d], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->state, CS_SLOT_FREE, __ATOMIC_SEQ_CST);
    cs__ledger_sub_clamped(&l->hdr->live, 1);
    __atomic_fetch_add(&l->hdr->reaped, 1, __ATOMIC_SEQ_CST);
    cs_info(SUBSYS, "ledger %s: reaped slot %d of dead pid %" PRId32 ", %" PRIu64
            " bytes returned", l->path, idx, __atomic_load_n(&s->pid, __ATOMIC_RELAXED), total);
    return true;
}

/* Reaps every LIVE slot but ours whose lock is free. No heal lock needed:
 * each slot's own lock makes its reap happen once. */
static int reap_dead_locked(struct cs_ledger *l)
{
    int n = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (i == l->slot || LOAD_ACQ(&slot_at(l, i)->state) != CS_SLOT_LIVE)
            continue;
        if (try_lock(l, i) != 0)
            continue; /* held: its owner is alive */
        if (reap_locked(l, i))
            n++;
        unlock(l, i);
    }
    return n;
}

/* The heal lock is tried, never waited for: whoever holds it is healing
 * right now, which is all a caller could want. */
static bool try_heal_lock(const struct cs_ledger *l)
{
    return cs__ledger_lock_byte(l, CS_LEDGER_HEAL_LOCK, F_OFD_SETLK, F_WRLCK) == 0;
}

static void heal_unlock(const struct cs_ledger *l)
{
    cs__ledger_lock_byte(l, CS_LEDGER_HEAL_LOCK, F_OFD_SETLK, F_UNLCK);
}

/* Every dead slot reaped, then the aggregates healed if no other process
 * of the tenant is healing. slot_mu held. */
static int reap_and_heal_locked(struct cs_ledger *l)
{
    int n = reap_dead_locked(l);
    cs__ledger_share_sweep(l);
    if (try_heal_lock(l)) {
        cs__ledger_heal(l);
        heal_unlock(l);
    }
    return n;
}

/* At claim: only if the heal lock is free, so that a crowd of processes
 * starting together does not scan the slots once each, all at once; the
 * one that holds the lock reaps for everybody. And only if a slot besides
 * ours is LIVE: a dead process's slot stays LIVE, and counted in `live`,
 * until it is reaped, so a count of 1 (ours) leaves nothing to reap. The
 * scan touches every page of the file (a page fault each in a fresh
 * ledger, milliseconds in all), which the first process of a tenant, the
 * one a user waits for, would pay for nothing. `live` is only shown, never
 * trusted for admission: should it under-count, a dead slot waits for the
 * next reap (a view, a refused admission), which heals too. slot_mu held. */
static void reap_and_heal_if_idle(struct cs_ledger *l)
{
    if (LOAD(&l->hdr->live) <= 1 || !try_heal_lock(l))
        return;
    reap_dead_locked(l);
    cs__ledger_share_sweep(l);
    cs__ledger_heal(l);
    heal_unlock(l);
}

int cs__ledger_reap(struct cs_ledger *l)
{
    int r = check_writable(l, "reap");
    if (r)
        return r;
    pthread_mutex_lock(&slot_mu);
    int n = reap_and_heal_locked(l);
    pthread_mutex_unlock(&slot_mu);
    return n;
}

static uint64_t pidns_inode(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void init_slot(struct cs_ledger *l, int idx)
{
    struct cs_ledger_slot *s = slot_at(l, idx);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    STORE_RLX(&s->pid, (int32_t)getpid());
    STORE_RLX(&s->host_pid, 0);
    STORE_RLX(&s->identity_tier, (uint32_t)CS_IDENTITY_UNKNOWN);
    STORE_RLX(&s->identity_reason, 0u);
    STORE_RLX(&s->lock_waits, 0u);
    STORE_RLX(&s->run_request, (uint32_t)CS_RUN);
    STORE_RLX(&s->run_state, 0u);
    STORE_RLX(&s->in_call, 0u);
    STORE_RLX(&s->last_call_ns, 0);
    STORE_RLX(&s->start_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    STORE_RLX(&s->pidns_ino, pidns_inode());
    STORE_RLX(&s->throttled_ns, 0);
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++)
            STORE_RLX(&s->bytes[d][c], 0);
        STORE_RLX(&s->pending[d], 0);
        STORE_RLX(&s->gpu_ns[d], 0);
        STORE_RLX(&s->last_launch_ns[d], 0);
    }
    /* op_seq is not reset: a healer compares it across its scan, and a
     * slot claimed meanwhile must not look unchanged. */
    __atomic_fetch_add(&s->generation, 1, __ATOMIC_RELAXED);
    /* Publishes the fields above; seq_cst orders it against the heal's
     * scan (heal.c). */
    __atomic_store_n(&s->state, CS_SLOT_LIVE, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&l->hdr->live, 1, __ATOMIC_SEQ_CST);
    /* A process joining a tenant that is being parked (or is parked) waits
     * for the wake at its first call like the others: the parker stores
     * the state before it scans the slots, we store LIVE before we read
     * the state, so one of the two sees the other (docs/parking.md). */
    if (__atomic_load_n(&l->hdr->park.state, __ATOMIC_SEQ_CST) != CS_PARK_RUNNING)
        __atomic_store_n(&s->run_request, (uint32_t)CS_PARKED, __ATOMIC_SEQ_CST);
}

int cs__ledger_claim(struct cs_ledger *l)
{
    int r = check_writable(l, "claim");
    if (r)
        return r;
    if (l->slot >= 0)
        return 0;
    pthread_mutex_lock(&slot_mu);
    const uint64_t start = __atomic_fetch_add(&l->hdr->claim_hint, 1, __ATOMIC_RELAXED);
    for (int k = 0; k < CS_LEDGER_SLOTS; k++) {
        int i = (int)((start + (uint64_t)k) % CS_LEDGER_SLOTS);
        r = try_lock(l, i);
        if (r == -EAGAIN)
            continue;
        if (r) {
            pthread_mutex_unlock(&slot_mu);
            cs_err(SUBSYS, "ledger %s: cannot lock slot %d: %s", l->path, i, strerror(-r));
            return r;
        }
        reap_locked(l, i); /* LIVE with its lock free: a dead owner */
        init_slot(l, i);
        l->slot = i;
        l->owner_pid = getpid();
        /* Our slot's page is touched: scans may read ahead (ledger.c). */
        if (l->tenant)
            madvise(l->hdr, l->map_len, MADV_NORMAL);
        reap_and_heal_if_idle(l);
        pthread_mutex_unlock(&slot_mu);
        cs_debug(SUBSYS, "ledger %s: claimed slot %d", l->path, i);
        return 0;
    }
    pthread_mutex_unlock(&slot_mu);
    cs_err(SUBSYS, "ledger %s: all %d slots are held by live processes; this tenant runs "
           "too many GPU processes at once", l->path, CS_LEDGER_SLOTS);
    return -ENOSPC;
}

void cs__ledger_leave(struct cs_ledger *l)
{
    if (!l->hdr || l->slot < 0)
        return;
    if (l->owner_pid != getpid()) {
        l->slot = -1; /* a fork child: the slot is the parent's */
        return;
    }
    pthread_mutex_lock(&slot_mu);
    int idx = l->slot;
    if (!cs__ledger_usable(l)) {
        /* Damaged in use: the counters we would give back are gone. */
        unlock(l, idx);
        l->slot = -1;
        pthread_mutex_unlock(&slot_mu);
        return;
    }
    struct cs_ledger_slot *s = slot_at(l, idx);
    return_all(l, s);
    __atomic_store_n(&s->state, CS_SLOT_FREE, __ATOMIC_SEQ_CST);
    cs__ledger_sub_clamped(&l->hdr->live, 1);
    unlock(l, idx);
    l->slot = -1;
    /* The last one out repairs what dead processes left counted. */
    if (LOAD(&l->hdr->live) == 0 && try_heal_lock(l)) {
        cs__ledger_heal(l);
        heal_unlock(l);
    }
    pthread_mutex_unlock(&slot_mu);
}

bool cs__ledger_slot_alive(const struct cs_ledger *l, int idx)
{
    const struct cs_ledger_slot *s = cs__ledger_slot(l, idx);
    if (!s || LOAD_ACQ(&s->state) != CS_SLOT_LIVE)
        return false;
    /* F_OFD_GETLK never reports our own description's locks. */
    if (idx == l->slot)
        return true;
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)(CS_LEDGER_LOCK_BASE + (uint64_t)idx);
    fl.l_len = 1;
    if (fcntl(l->fd, F_OFD_GETLK, &fl) != 0)
        return true; /* cannot tell: never call a process dead on a guess */
    return fl.l_type != F_UNLCK;
}
