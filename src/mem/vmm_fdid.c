/*
 * The identity of an allocation exported as a POSIX fd, and how long the
 * exported descriptions keep it alive (docs/accounting.md, "Shared
 * memory"; docs/security.md, "Share markers").
 *
 * Two facts of the real driver (docs/accounting.md; tests/gpu/vmm_sharing
 * checks them on a GPU): every fd cuMemExportToShareableHandle returns is a
 * new open of /dev/nvidiactl, so every export of every allocation has the
 * same st_dev:st_ino and the inode names nothing; and an exported fd is
 * itself a reference: the memory lives while any process has it open.
 *
 * What does name an export is its open file description: SCM_RIGHTS hands
 * the receiver the same struct file, and kcmp(KCMP_FILE) tells whether two
 * fds of two processes are one description. So a process that exports
 * an allocation keeps a private dup (O_CLOEXEC) of each description it
 * exported while it holds the allocation, and publishes it as an empty
 * marker file in the share directory named by (uid, key, pid, dup's fd
 * number); an importer compares its fd with every live exporter's dup and
 * so learns the key its ledger share and payer file carry. Keys are
 * random per allocation. Importers keep no dup: it would keep the
 * exported description, and so the exporter's charge, alive after every
 * fd of it was closed, until the exporter next looks.
 *
 * Markers are hostile input (anyone who can write the directory names
 * files): one is believed only if its name is canonical (one name per
 * holder and descriptor: no zero-padded or signed numbers), it is a
 * regular file owned by the uid its name gives, which is ours, and the
 * process it names vouches for it: the holder keeps a POSIX write lock on
 * its marker for as long as the marker is true, and F_GETLK reports the
 * locker's pid (0 when it lives in a pid namespace we cannot see). A
 * marker nobody locks is stale: its holder died or withdrew it.
 *
 * Liveness of exports: every exported description also carries an OFD
 * read lock on one byte of /dev/nvidiactl chosen by the allocation
 * (export_byte). The kernel drops it when the description's last
 * reference goes: every fd in every process, a message in flight, a fork
 * child's copy. A description of our own that never locks asks with
 * F_OFD_GETLK whether any exported description is still alive. So the
 * charge of an allocation kept only by exported fds stays until they are
 * all closed (cs__vmm_fdid_exports_alive). The dups go with our last
 * handle or mapping: a dup kept longer would keep the memory alive itself.
 *
 * Callers hold cs__vmm_mu for everything but find, which takes it only to
 * look at this process's own dups.
 */
#define _GNU_SOURCE
#include "mem/vmm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"

#define SUBSYS "mem"
#define PREFIX "cushare-fdid-"
/* Markers looked at per scan: a directory filled by an attacker costs a
 * bounded time (its importer is then charged as for new memory). */
#define SCAN_MAX 4096
/* Export liveness bytes lie above any offset a driver or the fake uses. */
#define EXPORT_BYTE_BASE (1ull << 40)
#define EXPORT_BYTE_SPAN (1ull << 40)

static const char *dir_name(void)
{
    const char *d = cs__config()->share_dir;
    return d[0] ? d : CS_NODE_DIR;
}

static void marker_name(char *out, size_t n, uint64_t key, int pid, int fd)
{
    snprintf(out, n, PREFIX "%u-%016" PRIx64 "-%d-%d", (unsigned)geteuid(), key, pid, fd);
}

bool cs__vmm_fdid_parse(const char *name, struct cs_fdid_marker *m)
{
    unsigned uid;
    uint64_t key;
    int pid, fd;
    if (strncmp(name, PREFIX, sizeof PREFIX - 1) ||
        sscanf(name + sizeof PREFIX - 1, "%u-%16" SCNx64 "-%d-%d", &uid, &key, &pid, &fd) != 4 ||
        pid <= 0 || fd < 0 || !key)
        return false;
    char canon[128];
    snprintf(canon, sizeof canon, PREFIX "%u-%016" PRIx64 "-%d-%d", uid, key, pid, fd);
    if (strcmp(canon, name))
        return false; /* an alias (padding, sign, case): one name per holder and fd */
    *m = (struct cs_fdid_marker){.uid = uid, .key = key, .pid = pid, .fd = fd};
    return true;
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

/* Who locks the marker `name` in dfd: its pid as we see it, 0 for a
 * process we cannot see, -1 nobody (stale), -2 not a marker we believe
 * (not a regular file of ours, cannot be opened without blocking). Never
 * called for our own markers: closing our descriptor of a file we lock
 * would drop our lock. */
static int marker_locker(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -2;
    struct stat st;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    int r = -2;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        fcntl(fd, F_GETLK, &fl) == 0)
        r = fl.l_type == F_UNLCK ? -1 : (int)fl.l_pid;
    close(fd);
    return r;
}

/* Markers of our uid whose holder died (killed: it could not withdraw
 * them), once per process at its first hold: nobody locks them any more. */
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
    for (int n = 0; n < SCAN_MAX && (e = readdir(d)); n++) {
        struct cs_fdid_marker m;
        if (cs__vmm_fdid_parse(e->d_name, &m) && m.uid == (unsigned)geteuid() &&
            m.pid != getpid() && marker_locker(dfd, e->d_name) == -1)
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

/* Creates our marker for (key, our pid, dup), locked before anybody can
 * see it (an unlocked marker is stale to every reader). Returns its fd. */
static int publish_marker(int dfd, uint64_t key, int dup)
{
    char name[128];
    marker_name(name, sizeof name, key, getpid(), dup);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    int m = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (m >= 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", m);
        bool locked = fcntl(m, F_SETLK, &fl) == 0;
        int r = locked ? linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) : -1;
        if (r && locked && errno == EEXIST && marker_locker(dfd, name) == -1) {
            /* A stale marker of a dead process that had our pid. */
            unlinkat(dfd, name, 0);
            r = linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW);
        }
        if (r == 0)
            return m;
        int e = errno;
        close(m);
        if (e == EEXIST)
            return -1; /* somebody squats our name: importers charge as new memory */
    }
    /* No O_TMPFILE here (or no /proc): create, then lock; a reader in
     * between sees a stale marker and charges its import as new memory. */
    m = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (m >= 0 && fcntl(m, F_SETLK, &fl)) {
        unlinkat(dfd, name, 0);
        close(m);
        m = -1;
    }
    return m;
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
    int m = dup >= 0 ? publish_marker(dfd, a->fd_key, dup) : -1;
    close(dfd);
    if (m < 0) {
        if (dup >= 0)
            close(dup);
        return false;
    }
    a->fd_dup[k] = dup;
    a->fd_marker[k] = m;
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
        close(a->fd_marker[k]);    /* our lock goes with it */
        close(a->fd_dup[k]);
        a->fd_dup[k] = a->fd_marker[k] = -1;
    }
    if (dfd >= 0)
        close(dfd);
}

/* ---- how long exported descriptions keep an allocation -------------------- */

/* One description per inode of exported fds that never locks: it asks.
 * Process-wide, set under cs__vmm_mu, closed in a fork child. */
#define PROBES 4
static struct {
    dev_t dev;
    ino_t ino;
    int fd;
} probes[PROBES] = {{0, 0, -1}, {0, 0, -1}, {0, 0, -1}, {0, 0, -1}};

static int probe_for(int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return -1;
    int k;
    for (k = 0; k < PROBES && probes[k].fd >= 0; k++)
        if (probes[k].dev == st.st_dev && probes[k].ino == st.st_ino)
            return k;
    if (k == PROBES)
        return -1;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int p = open(proc, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat pst;
    if (p < 0 || fstat(p, &pst) || pst.st_dev != st.st_dev || pst.st_ino != st.st_ino) {
        if (p >= 0)
            close(p);
        return -1;
    }
    probes[k].dev = st.st_dev;
    probes[k].ino = st.st_ino;
    probes[k].fd = p;
    return k;
}

static off_t export_byte(uint64_t key)
{
    return (off_t)(EXPORT_BYTE_BASE + key % EXPORT_BYTE_SPAN);
}

bool cs__vmm_fdid_mark_export(struct vmm_alloc *a, int fd)
{
    int k = probe_for(fd);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = export_byte(a->fd_key),
                       .l_len = 1};
    if (k < 0 || (a->export_probe >= 0 && a->export_probe != k) || fcntl(fd, F_OFD_SETLK, &fl)) {
        a->export_pinned = true; /* cannot tell when it goes: charged while we live */
        return false;
    }
    a->export_probe = k;
    return true;
}

bool cs__vmm_fdid_exports_alive(const struct vmm_alloc *a)
{
    if (a->export_pinned)
        return true;
    if (a->export_probe < 0)
        return false;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = export_byte(a->fd_key),
                       .l_len = 1};
    if (fcntl(probes[a->export_probe].fd, F_OFD_GETLK, &fl))
        return true; /* cannot ask: fail closed, the charge stays */
    return fl.l_type != F_UNLCK;
}

void cs__vmm_fdid_atfork_child(void)
{
    /* Our copies only: the markers name the parent's descriptors, and its
     * marker locks are not ours (POSIX locks are not inherited). */
    for (struct vmm_alloc *a = cs__vmm_allocs; a; a = a->next)
        for (int k = 0; k < VMM_FD_DUPS; k++)
            if (a->fd_dup[k] >= 0) {
                close(a->fd_dup[k]);
                close(a->fd_marker[k]);
            }
    for (int k = 0; k < PROBES; k++)
        if (probes[k].fd >= 0) {
            close(probes[k].fd);
            probes[k].fd = -1;
        }
}

/* ---- finding the key of an imported descriptor ----------------------------- */

/* This process's own dups: 0 and *key when fd is one of their descriptions. */
static int find_own(int fd, uint64_t *key)
{
    int r = -ENOENT;
    pthread_mutex_lock(&cs__vmm_mu);
    for (struct vmm_alloc *a = cs__vmm_allocs; a && r; a = a->next)
        for (int k = 0; k < VMM_FD_DUPS && r && a->fd_dup[k] >= 0; k++)
            if (syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, fd, a->fd_dup[k]) == 0) {
                *key = a->fd_key;
                r = 0;
            }
    pthread_mutex_unlock(&cs__vmm_mu);
    return r;
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
    if (find_own(fd, key) == 0)
        return 0;
    int dfd = cs__node_dir_open(dir_name());
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return -ENOENT;
    }
    int r = -ENOENT;
    struct dirent *e;
    for (int n = 0; r != 0 && n < SCAN_MAX && (e = readdir(d)); n++) {
        struct cs_fdid_marker m;
        if (!cs__vmm_fdid_parse(e->d_name, &m) || m.uid != (unsigned)geteuid() ||
            m.pid == getpid())
            continue;
        /* Compared first (cheap, and a mismatch needs no trust); a match
         * counts only if the process it names vouches for the marker. */
        if (syscall(SYS_kcmp, getpid(), m.pid, KCMP_FILE, fd, m.fd) != 0)
            continue;
        if (marker_locker(dirfd(d), e->d_name) == m.pid) {
            *key = m.key;
            r = 0;
        }
    }
    closedir(d);
    return r;
}
