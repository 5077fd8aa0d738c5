/*
 * The identity of an allocation exported as a POSIX fd (docs/accounting.md,
 * "Shared memory").
 *
 * Two facts of the real driver (docs/accounting.md; tests/gpu/vmm_sharing
 * checks them on a GPU): every fd cuMemExportToShareableHandle returns is a
 * new open of /dev/nvidiactl, so every export of every allocation has the
 * same st_dev:st_ino and the inode names nothing; and an exported fd is
 * itself a reference: the memory lives while any process has it open.
 *
 * What does name an export is its open file description: SCM_RIGHTS hands
 * the receiver the same struct file, and kcmp(KCMP_FILE) tells whether two
 * fds of two processes are one description. So every process that holds
 * an allocation keeps a private dup (O_CLOEXEC) of each description it
 * exported or imported, and publishes it as an empty marker file in the
 * share directory named by (uid, key, pid, dup's fd number); an importer
 * compares its fd with every live holder's dup and so learns the key its
 * ledger share and payer file carry. Keys are random per allocation.
 *
 * The dups go with our last local reference (fact 2: a dup kept longer
 * would keep the memory alive itself). kcmp needs PTRACE_MODE_READ over
 * the other process: true for our own uid, not for another user's (then
 * find says -EPERM and the memory is not charged to us, as before).
 *
 * Callers hold cs__vmm_mu for hold/drop (a's dups); find takes nothing:
 * the directory and the other processes are the kernel's.
 */
#define _GNU_SOURCE
#include "mem/vmm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"

#define SUBSYS "mem"
#define PREFIX "cushare-fdid-"

static const char *dir_name(void)
{
    const char *d = cs__config()->share_dir;
    return d[0] ? d : CS_NODE_DIR;
}

static void marker_name(char *out, size_t n, uint64_t key, int pid, int fd)
{
    snprintf(out, n, PREFIX "%u-%016" PRIx64 "-%d-%d", (unsigned)geteuid(), key, pid, fd);
}

uint64_t cs__vmm_fdid_new_key(void)
{
    static uint64_t counter;
    uint64_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        /* No entropy yet: unique enough among live holders of this node. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k = ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^
            (++counter << 52);
    }
    return k ? k : 1;
}

/* Markers whose holder died (killed: it could not withdraw them), of our
 * uid, once per process at its first hold: the directory does not grow
 * with dead holders nobody imports from. */
static void sweep_dead(int dfd)
{
    static bool swept; /* cs__vmm_mu held */
    if (swept)
        return;
    swept = true;
    int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup < 0 ? NULL : fdopendir(dup);
    if (!d) {
        if (dup >= 0)
            close(dup);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned uid;
        uint64_t k;
        int pid, their;
        if (!strncmp(e->d_name, PREFIX, sizeof PREFIX - 1) &&
            sscanf(e->d_name + sizeof PREFIX - 1, "%u-%" SCNx64 "-%d-%d", &uid, &k, &pid,
                   &their) == 4 &&
            uid == (unsigned)geteuid() && pid > 0 && kill(pid, 0) && errno == ESRCH)
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

bool cs__vmm_fdid_hold(struct vmm_alloc *a, int fd)
{
    int k = 0;
    while (k < VMM_FD_DUPS && a->fd_dup[k] >= 0) {
        if (syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, fd, a->fd_dup[k]) == 0)
            return true; /* this description is held already */
        k++;
    }
    if (k == VMM_FD_DUPS || !a->fd_key)
        return false;
    int dfd = cs__node_dir_open(dir_name());
    if (dfd < 0)
        return false;
    sweep_dead(dfd);
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    char name[128];
    int m = -1;
    if (dup >= 0) {
        marker_name(name, sizeof name, a->fd_key, getpid(), dup);
        m = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    close(dfd);
    if (m < 0) {
        if (dup >= 0)
            close(dup);
        return false;
    }
    close(m);
    a->fd_dup[k] = dup;
    return true;
}

void cs__vmm_fdid_drop_all(struct vmm_alloc *a)
{
    int dfd = -1;
    for (int k = 0; k < VMM_FD_DUPS; k++) {
        if (a->fd_dup[k] < 0)
            continue;
        if (dfd < 0)
            dfd = cs__node_dir_open(dir_name());
        char name[128];
        marker_name(name, sizeof name, a->fd_key, getpid(), a->fd_dup[k]);
        if (dfd >= 0)
            unlinkat(dfd, name, 0); /* first: nobody matches a closed number */
        close(a->fd_dup[k]);
        a->fd_dup[k] = -1;
    }
    if (dfd >= 0)
        close(dfd);
}

void cs__vmm_fdid_atfork_child(void)
{
    /* Our copies only: the markers name the parent's descriptors. */
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next)
        for (int k = 0; k < VMM_FD_DUPS; k++)
            if (a->fd_dup[k] >= 0)
                close(a->fd_dup[k]);
}

int cs__vmm_fdid_find(int fd, uint64_t *key)
{
    /* A seccomp filter may refuse kcmp to everyone (Docker's default
     * profile without CAP_SYS_PTRACE): then even comparing with ourselves
     * fails, and no holder can be matched. */
    static int kcmp_works = -1; /* atomic: -1 unknown, 0, 1 */
    int works = __atomic_load_n(&kcmp_works, __ATOMIC_RELAXED);
    if (works < 0) {
        works = syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, fd, fd) == 0 ||
                errno == EBADF; /* fd not open: the driver will refuse it */
        __atomic_store_n(&kcmp_works, works, __ATOMIC_RELAXED);
    }
    if (!works)
        return -ENOSYS;
    int dfd = cs__node_dir_open(dir_name());
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return -ENOENT;
    }
    int r = -ENOENT;
    unsigned me = (unsigned)geteuid();
    struct dirent *e;
    while (r != 0 && (e = readdir(d))) {
        unsigned uid;
        uint64_t k;
        int pid, their;
        if (strncmp(e->d_name, PREFIX, sizeof PREFIX - 1) ||
            sscanf(e->d_name + sizeof PREFIX - 1, "%u-%" SCNx64 "-%d-%d", &uid, &k, &pid,
                   &their) != 4)
            continue;
        long c = syscall(SYS_kcmp, getpid(), pid, KCMP_FILE, fd, their);
        if (c == 0) {
            *key = k;
            r = 0;
        } else if (c < 0 && errno == ESRCH && uid == me) {
            unlinkat(dirfd(d), e->d_name, 0); /* its holder died */
        } else if (c < 0 && errno == EPERM) {
            r = -EPERM; /* a holder we may not compare with: perhaps this one */
        }
    }
    closedir(d);
    return r;
}
