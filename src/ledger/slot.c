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
 * (atomic exchange) before they are subtracted from the aggregate, so a
 * reaper killed in between leaves the aggregate over-counted, never under.
 *
 * Within one process the description is shared by all threads, and OFD
 * locks do not exclude each other inside one description; a process-private
 * mutex therefore serialises the code that takes slot locks (claim, leave,
 * reap). It is never held across anything slow, and never across processes.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

#define SUBSYS "ledger"

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;

void cs__ledger_slots_atfork_child(void)
{
    /* Another parent thread may have held it at fork: start over. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&slot_mu, &fresh, sizeof fresh);
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

static int lock_op(const struct cs_ledger *l, int idx, int cmd, short type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)(CS_LEDGER_LOCK_BASE + (uint64_t)idx);
    fl.l_len = 1;
    fl.l_pid = 0; /* required for OFD locks */
    if (fcntl(l->fd, cmd, &fl) == 0)
        return 0;
    int e = errno;
    return e == EACCES ? -EAGAIN : -e;
}

static int try_lock(const struct cs_ledger *l, int idx)
{
    return lock_op(l, idx, F_OFD_SETLK, F_WRLCK);
}

static void unlock(const struct cs_ledger *l, int idx)
{
    lock_op(l, idx, F_OFD_SETLK, F_UNLCK);
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
 * False when it was not LIVE (nothing to do). */
static bool reap_locked(struct cs_ledger *l, int idx)
{
    struct cs_ledger_slot *s = slot_at(l, idx);
    if (LOAD_ACQ(&s->state) != CS_SLOT_LIVE)
        return false;
    uint64_t total = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++) {
            uint64_t v = __atomic_exchange_n(&s->bytes[d][c], 0, __ATOMIC_SEQ_CST);
            if (v) {
                cs__ledger_sub_clamped(&l->hdr->dev[d].used, v);
                total += v;
            }
        }
    __atomic_store_n(&s->state, CS_SLOT_FREE, __ATOMIC_SEQ_CST);
    cs__ledger_sub_clamped(&l->hdr->live, 1);
    __atomic_fetch_add(&l->hdr->reaped, 1, __ATOMIC_SEQ_CST);
    cs_info(SUBSYS, "ledger %s: reaped slot %d of dead pid %" PRId32 ", %" PRIu64
            " bytes returned", l->path, idx, __atomic_load_n(&s->pid, __ATOMIC_RELAXED), total);
    return true;
}

/* The repair for the crash window: a process killed between charging the
 * aggregate and recording the charge in its slot (or a reaper killed
 * between the two halves of a return) leaves used[] over-counted. When no
 * slot at all is LIVE nobody holds device memory, so the aggregates must be
 * zero. The values are read before the slot scan and only replaced if they
 * are unchanged (CAS): a process that went LIVE after the scan and charged
 * meanwhile makes the CAS fail; one that charged and gave back nets zero. */
static void reconcile(struct cs_ledger *l)
{
    struct cs_ledger_header *h = l->hdr;
    uint64_t used[CS_MAX_DEVICES];
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        used[d] = LOAD(&h->dev[d].used);
    uint64_t live = LOAD(&h->live);
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        if (LOAD(&slot_at(l, i)->state) != CS_SLOT_FREE)
            return;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        uint64_t v = used[d];
        if (v && __atomic_compare_exchange_n(&h->dev[d].used, &v, 0, false, __ATOMIC_SEQ_CST,
                                             __ATOMIC_SEQ_CST))
            cs_warn(SUBSYS, "ledger %s: no live process, yet device %d had %" PRIu64
                    " bytes charged (a process died between charging and recording); "
                    "reset to 0", l->path, d, used[d]);
    }
    if (live)
        __atomic_compare_exchange_n(&h->live, &live, 0, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
}

static int reap_all_locked(struct cs_ledger *l)
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
    if (l->slot < 0)
        reconcile(l);
    return n;
}

int cs__ledger_reap(struct cs_ledger *l)
{
    int r = check_writable(l, "reap");
    if (r)
        return r;
    pthread_mutex_lock(&slot_mu);
    int n = reap_all_locked(l);
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
    STORE_RLX(&s->start_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    STORE_RLX(&s->pidns_ino, pidns_inode());
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++)
            STORE_RLX(&s->bytes[d][c], 0);
        STORE_RLX(&s->gpu_ns[d], 0);
        STORE_RLX(&s->last_launch_ns[d], 0);
    }
    __atomic_fetch_add(&s->generation, 1, __ATOMIC_RELAXED);
    /* Publishes the fields above; seq_cst orders it against reconcile(). */
    __atomic_store_n(&s->state, CS_SLOT_LIVE, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&l->hdr->live, 1, __ATOMIC_SEQ_CST);
}

int cs__ledger_claim(struct cs_ledger *l)
{
    int r = check_writable(l, "claim");
    if (r)
        return r;
    if (l->slot >= 0)
        return 0;
    pthread_mutex_lock(&slot_mu);
    /* Nobody registered: a cheap moment to repair a crash window. */
    if (LOAD(&l->hdr->live) == 0)
        reap_all_locked(l);
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
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        for (int c = 0; c < CS_MEM_CATEGORY_SLOTS; c++) {
            uint64_t v = __atomic_exchange_n(&s->bytes[d][c], 0, __ATOMIC_SEQ_CST);
            if (v)
                cs__ledger_sub_clamped(&l->hdr->dev[d].used, v);
        }
    __atomic_store_n(&s->state, CS_SLOT_FREE, __ATOMIC_SEQ_CST);
    cs__ledger_sub_clamped(&l->hdr->live, 1);
    unlock(l, idx);
    l->slot = -1;
    if (LOAD(&l->hdr->live) == 0)
        reconcile(l);
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
