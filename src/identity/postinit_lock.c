/*
 * Post-init lock: an OFD record lock on one byte of the ledger file,
 * serialising the legacy NVML before/after probe across processes.
 *
 * Why a record lock: the kernel drops it when the last reference to the
 * open file description goes away, so a holder killed by SIGKILL at any
 * instruction frees it (HAMi's sem_postinit stays taken forever then).
 * Why OFD and not classic POSIX locks: a classic lock is dropped when *any*
 * fd of the file is closed by the process, which library code cannot
 * control in a host program.
 *
 * Ownership: the fd is borrowed from the caller. The process-local mutex
 * `mu` is owned by the thread that holds the lock (held/holder), and the
 * record lock by this process's open file description. A fork child shares
 * that description, so it must never use it for this lock: the atfork
 * child handler marks every registered lock stale until the child reopens
 * the file and calls cs__postinit_lock_set_fd.
 *
 * Waiting (reference/003): on local file systems F_OFD_SETLKW wakes a
 * waiter within a millisecond of the owner's death; on NFS some lock
 * managers wake blocked waiters tens of seconds late while fresh requests
 * succeed, so there we poll with F_OFD_SETLK and jittered backoff. No
 * timeout: a timeout that gives up would disable limiting (HAMi's 300 s
 * path), so acquire waits for as long as the lock is busy.
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"

#define BACKOFF_MIN_US 1000u
#define BACKOFF_MAX_US 250000u

static cs_postinit_hook_fn test_hook;
static void *test_hook_arg;

void cs__postinit_set_test_hook(cs_postinit_hook_fn fn, void *arg)
{
    __atomic_store_n(&test_hook_arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&test_hook, fn, __ATOMIC_RELEASE);
}

static void hook(enum cs_postinit_point p)
{
    cs_postinit_hook_fn fn = __atomic_load_n(&test_hook, __ATOMIC_ACQUIRE);
    if (fn)
        fn(p, __atomic_load_n(&test_hook_arg, __ATOMIC_RELAXED));
}

/* --- fork registry ------------------------------------------------------ */

/* Every initialised lock, so the atfork child handler can reset them. The
 * registry mutex is held across fork (prepare .. parent/child) so the list
 * is never copied half-edited. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cs_postinit_lock *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void)
{
    pthread_mutex_lock(&registry_mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&registry_mu);
}

/* In the child only the forking thread exists: a mutex another parent
 * thread held is locked forever in this copy, and the record lock is the
 * parent's. Reset the local state to "free" and demand a reopen. */
static void atfork_child(void)
{
    for (struct cs_postinit_lock *l = registry; l; l = l->next) {
        cs__mutex_reset(&l->mu);
        l->held = false;
        l->stale = true;
    }
    cs__mutex_reset(&registry_mu);
}

static void install_atfork(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void registry_add(struct cs_postinit_lock *l)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&registry_mu);
    l->prev = NULL;
    l->next = registry;
    if (registry)
        registry->prev = l;
    registry = l;
    pthread_mutex_unlock(&registry_mu);
}

static void registry_remove(struct cs_postinit_lock *l)
{
    pthread_mutex_lock(&registry_mu);
    if (l->prev)
        l->prev->next = l->next;
    else if (registry == l)
        registry = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->next = l->prev = NULL;
    pthread_mutex_unlock(&registry_mu);
}

/* --- strategy ----------------------------------------------------------- */

enum cs_postinit_wait cs__postinit_wait_for_fs(int64_t f_type)
{
    /* Known-local file systems, whose lock waits are woken by the local
     * kernel the moment the owner's file is released. Everything else
     * (NFS 0x6969, SMB/CIFS, Ceph, FUSE, Lustre, GPFS, 9p, ...) polls. */
    switch ((uint32_t)f_type) {
    case 0xEF53u:       /* ext2/3/4 */
    case 0x58465342u:   /* xfs */
    case 0x9123683Eu:   /* btrfs */
    case 0x01021994u:   /* tmpfs */
    case 0x858458F6u:   /* ramfs */
    case 0x794C7630u:   /* overlayfs */
    case 0x2FC12FC1u:   /* zfs */
    case 0xF2F52010u:   /* f2fs */
    case 0x52654973u:   /* reiserfs */
    case 0x3153464Au:   /* jfs */
    case 0xCA451A4Eu:   /* bcachefs */
    case 0x958458F6u:   /* hugetlbfs */
        return CS_POSTINIT_WAIT_BLOCKING;
    default:
        return CS_POSTINIT_WAIT_POLLING;
    }
}

static int resolve_strategy(struct cs_postinit_lock *l)
{
    if (l->requested != CS_POSTINIT_WAIT_AUTO) {
        l->wait = l->requested;
        return 0;
    }
    struct statfs sf;
    if (fstatfs(l->fd, &sf) != 0)
        return -errno;
    l->wait = cs__postinit_wait_for_fs((int64_t)sf.f_type);
    return 0;
}

int cs__postinit_lock_init(struct cs_postinit_lock *l, int fd, uint64_t offset,
                           enum cs_postinit_wait wait)
{
    if (!l || fd < 0 || offset > (uint64_t)INT64_MAX || wait > CS_POSTINIT_WAIT_POLLING)
        return -EINVAL;
    memset(l, 0, sizeof *l);
    l->fd = fd;
    l->offset = offset;
    l->requested = wait;
    int rc = resolve_strategy(l);
    if (rc)
        return rc;
    pthread_mutex_init(&l->mu, NULL);
    l->pid = getpid();
    registry_add(l);
    return 0;
}

int cs__postinit_lock_set_fd(struct cs_postinit_lock *l, int fd)
{
    if (!l || fd < 0)
        return -EINVAL;
    int old = l->fd;
    l->fd = fd;
    int rc = resolve_strategy(l);
    if (rc) {
        l->fd = old;
        return rc;
    }
    l->pid = getpid();
    l->held = false;
    l->stale = false;
    return 0;
}

void cs__postinit_lock_destroy(struct cs_postinit_lock *l)
{
    if (!l)
        return;
    registry_remove(l);
    pthread_mutex_destroy(&l->mu);
}

enum cs_postinit_wait cs__postinit_lock_strategy(const struct cs_postinit_lock *l)
{
    return l->wait;
}

/* --- acquire / release -------------------------------------------------- */

static int record_lock(const struct cs_postinit_lock *l, int cmd, short type)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
        .l_start = (off_t)l->offset,
        .l_len = 1,
        .l_pid = 0,                     /* required 0 for OFD commands */
    };
    return fcntl(l->fd, cmd, &fl) == 0 ? 0 : -errno;
}

static int is_busy(int rc)
{
    return rc == -EAGAIN || rc == -EACCES;
}

/* Per-thread xorshift for jitter: no shared state, no libc rand lock. */
static uint32_t jitter_rand(void)
{
    static __thread uint64_t s;
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = ((uint64_t)getpid() << 32) ^ (uint64_t)syscall(SYS_gettid) ^
            (uint64_t)ts.tv_nsec ^ 0x9E3779B97F4A7C15ull;
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (uint32_t)(s >> 32);
}

static void sleep_us(uint32_t us)
{
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);               /* EINTR: an early retry is harmless */
}

static int wait_polling(const struct cs_postinit_lock *l, uint32_t *waits)
{
    uint32_t backoff = BACKOFF_MIN_US;
    for (;;) {
        int rc = record_lock(l, F_OFD_SETLK, F_WRLCK);
        if (!is_busy(rc))
            return rc;
        ++*waits;
        hook(CS_POSTINIT_AT_BUSY);
        /* Uniform in [backoff/2, backoff]: waiters that started together
         * drift apart instead of retrying in lock step. */
        sleep_us(backoff / 2 + jitter_rand() % (backoff / 2 + 1));
        backoff = backoff >= BACKOFF_MAX_US / 2 ? BACKOFF_MAX_US : backoff * 2;
    }
}

static int wait_blocking(const struct cs_postinit_lock *l, uint32_t *waits)
{
    int rc = record_lock(l, F_OFD_SETLK, F_WRLCK);
    if (!is_busy(rc))
        return rc;
    ++*waits;
    hook(CS_POSTINIT_AT_BUSY);
    do
        rc = record_lock(l, F_OFD_SETLKW, F_WRLCK);
    while (rc == -EINTR);               /* the host program's signals */
    return rc;
}

/* Whether the calling thread holds l. held/holder are written by the
 * holder under mu and read by any thread without it, hence atomics: a
 * reader that is not the holder can never see its own pthread_self(). */
static bool holds(const struct cs_postinit_lock *l)
{
    return __atomic_load_n(&l->held, __ATOMIC_ACQUIRE) &&
           pthread_equal(__atomic_load_n(&l->holder, __ATOMIC_RELAXED), pthread_self());
}

int cs__postinit_lock_acquire(struct cs_postinit_lock *l, uint32_t *waits)
{
    uint32_t n = 0;
    if (!l)
        return -EINVAL;
    hook(CS_POSTINIT_AT_ENTER);
    /* Checked before touching mu: in a fork child that skipped the atfork
     * handler (raw clone), mu may be a copy locked by a parent thread. */
    if (l->stale || l->pid != getpid())
        return -ESTALE;

    int rc = pthread_mutex_trylock(&l->mu);
    if (rc == EBUSY) {
        if (holds(l))
            return -EDEADLK;
        n++;
        rc = pthread_mutex_lock(&l->mu);
    }
    if (rc)
        return -rc;
    hook(CS_POSTINIT_AT_LOCAL_HELD);

    rc = l->wait == CS_POSTINIT_WAIT_POLLING ? wait_polling(l, &n) : wait_blocking(l, &n);
    if (rc) {
        pthread_mutex_unlock(&l->mu);
        cs_warn("identity", "post-init lock: fcntl on byte %llu failed: %s",
                (unsigned long long)l->offset, strerror(-rc));
        return rc;
    }
    __atomic_store_n(&l->holder, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&l->held, true, __ATOMIC_RELEASE);
    hook(CS_POSTINIT_AT_ACQUIRED);
    if (waits)
        *waits = n;
    return 0;
}

int cs__postinit_lock_release(struct cs_postinit_lock *l)
{
    if (!l || !holds(l))
        return -EPERM;
    hook(CS_POSTINIT_AT_RELEASE);
    int rc = record_lock(l, F_OFD_SETLK, F_UNLCK);
    if (rc)
        cs_warn("identity", "post-init lock: unlock failed: %s", strerror(-rc));
    hook(CS_POSTINIT_AT_RELEASED);
    __atomic_store_n(&l->held, false, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&l->mu);
    return rc;
}
