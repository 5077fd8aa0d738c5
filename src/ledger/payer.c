/*
 * Payer files: which tenant pays for device memory shared across tenants
 * (docs/accounting.md, "Across tenants").
 *
 * Every tenant that holds a shared allocation keeps a share for it in its
 * own ledger (share.c); at most one of those shares carries the bytes. The
 * node-wide payer file of the allocation, named by its key in the share
 * directory (CUSHARE_SHARE_DIR, default /tmp/vgpulock), says whether one
 * does. Its bytes are OFD locks, which the kernel drops when a process
 * dies however it dies:
 *
 *   byte 0  read-locked by every process whose share carries the bytes
 *           (the paying tenant's holders);
 *   byte 1  write-locked, briefly, by a process taking the charge over;
 *   byte 2  read-locked by every other holder (standing by);
 *   byte 3  a POSIX read lock of every paying process: its vouch.
 *
 * When byte 0 is free, no tenant pays: a standing-by process takes byte 1,
 * checks byte 0 again and moves the charge into its own tenant's share
 * (the caller, src/mem/vmm.c). The file is removed by whoever finds all
 * three bytes free as it lets go; an opener checks after locking that the
 * name still names its file, so nobody keeps locks on a removed file.
 *
 * The file holds {magic, device, bytes}, written by the creator before it
 * locks anything. It is created 0600 and opened only if the caller's uid
 * owns it: a tenant of another user cannot make us believe that somebody
 * pays (their memory is not charged to us: the documented limit). Names
 * are chosen by whoever writes the directory, so a file is looked at
 * (fstatat, no open) before it is opened, and opened O_NONBLOCK: a lease
 * another user holds on a file at our name fails the open at once instead
 * of stalling us (under cs__vmm_mu) until the lease breaks
 * (docs/security.md, "Payer files").
 *
 * Where pods all run as root (docs/security.md, "Kubernetes: every pod is
 * root"), the owner check cannot keep another pod out: it may open the
 * file and hold byte 0, so that nobody standing by ever takes the charge
 * over. Byte 0 is an OFD lock, which does not say who holds it; so "paid"
 * also needs byte 3's vouch: a POSIX lock (the kernel names its holder)
 * held by a process of our own pod (core/pod.h). A file nobody of our pod
 * vouches for is not believed when we import (we are charged as for new
 * memory) and counts as unpaid when we stand by (we take the charge over):
 * a stranger's lock costs an over-count, never an uncharged byte.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"
#include "core/pod.h"

#define SUBSYS "ledger"
#define PAYER_MAGIC 0x3152594150534355ull /* "UCSPAYR1" */
/* Entries a sweep looks at: a directory filled by an attacker costs a
 * bounded time under the caller's lock. */
#define SWEEP_MAX 4096
#define OPEN_FLAGS (O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)

enum { BYTE_PAYING = 0, BYTE_ELECT = 1, BYTE_STANDBY = 2, BYTE_VOUCH = 3 };

struct payer_file {
    uint64_t magic;
    uint32_t dev;
    uint32_t reserved;
    uint64_t bytes;
};

/* The payer files this process vouches for. The vouch is a POSIX lock,
 * which the kernel drops when the process closes *any* descriptor of the
 * file: so every descriptor closed here is followed by vouching again
 * through the ones kept (close_keeping_vouch). Guarded by cs__vmm_mu,
 * which every caller of this file holds; emptied in a fork child (whose
 * copies the caller closes; POSIX locks are not inherited). One past
 * VOUCHED_MAX is not remembered: its vouch may lapse (an over-count). */
#define VOUCHED_MAX 256
static struct {
    int fd;
    dev_t dev;
    ino_t ino;
} vouched[VOUCHED_MAX];
static int nvouched;

static void vouched_add(int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return;
    for (int i = 0; i < nvouched; i++)
        if (vouched[i].fd == fd)
            return;
    if (nvouched < VOUCHED_MAX)
        vouched[nvouched++] = (__typeof__(vouched[0])){fd, st.st_dev, st.st_ino};
}

static void vouched_remove(int fd)
{
    for (int i = 0; i < nvouched; i++)
        if (vouched[i].fd == fd)
            vouched[i--] = vouched[--nvouched];
}

/* close(fd), then our vouch again on the same file through the
 * descriptors we keep. */
static void close_keeping_vouch(int fd)
{
    struct stat st;
    bool known = fstat(fd, &st) == 0;
    close(fd);
    for (int i = 0; known && i < nvouched; i++)
        if (vouched[i].dev == st.st_dev && vouched[i].ino == st.st_ino)
            cs_pod_vouch(vouched[i].fd, BYTE_VOUCH, F_RDLCK);
}

void cs__payer_atfork_child(void)
{
    nvouched = 0;
}

static void payer_name(const char *dir, uint64_t key, char *out, size_t n)
{
    snprintf(out, n, "%s/cushare-share-%u-%016" PRIx64, dir && dir[0] ? dir : CS_NODE_DIR,
             (unsigned)geteuid(), key);
}

static int lock(int fd, int byte, int cmd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
    if (fcntl(fd, cmd, &fl) == 0)
        return 0;
    return errno == EACCES ? -EAGAIN : -errno;
}

/* The same file at `name` and behind fd (not removed meanwhile). */
static bool still_named(int fd, const char *name)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(name, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Removes the payer files of this uid that nobody holds (their holders
 * were killed: only a process that lets go removes one). Once per
 * process, at its first publication. */
static void sweep_once(const char *dir)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
        return;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "cushare-share-%u-", (unsigned)geteuid());
    DIR *d = opendir(dir && dir[0] ? dir : CS_NODE_DIR);
    if (!d)
        return;
    struct dirent *e;
    struct stat st;
    for (int n = 0; n < SWEEP_MAX && (e = readdir(d)); n++) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || st.st_uid != geteuid() ||
            !S_ISREG(st.st_mode))
            continue;
        int fd = openat(dirfd(d), e->d_name, OPEN_FLAGS);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 3};
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
            fcntl(fd, F_OFD_SETLK, &fl) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        if (fd >= 0)
            close_keeping_vouch(fd);
    }
    closedir(d);
}

int cs__payer_open(const char *dir, uint64_t key, bool create, int *dev, uint64_t *bytes)
{
    if (create)
        sweep_once(dir);
    char name[4200];
    payer_name(dir, key, name, sizeof name);
    for (int attempt = 0; attempt < 4; attempt++) {
        struct stat st;
        if (lstat(name, &st) == 0 && (st.st_uid != geteuid() || !S_ISREG(st.st_mode)))
            return -EPERM; /* squatted: not ours to open */
        int fd = open(name, OPEN_FLAGS | (create ? O_CREAT : 0), 0600);
        if (fd < 0 && errno == ENOENT && create) { /* a node without the directory yet */
            int dfd = cs__node_dir_open(dir && dir[0] ? dir : CS_NODE_DIR);
            if (dfd < 0)
                return dfd;
            close(dfd);
            fd = open(name, OPEN_FLAGS | O_CREAT, 0600);
        }
        if (fd < 0)
            return errno == EWOULDBLOCK ? -EPERM : -errno; /* leased by somebody */
        struct payer_file f;
        if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 077) ||
            !S_ISREG(st.st_mode)) {
            close_keeping_vouch(fd);
            return -EPERM;
        }
        if (create) {
            /* Ours to write only if nobody holds it: a held file of the same
             * key is another allocation's (the key is not unique). */
            struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 3};
            f = (struct payer_file){PAYER_MAGIC, (uint32_t)*dev, 0, *bytes};
            if (fcntl(fd, F_OFD_SETLK, &fl)) {
                close_keeping_vouch(fd);
                return -EEXIST;
            }
            if (ftruncate(fd, 0) || pwrite(fd, &f, sizeof f, 0) != (ssize_t)sizeof f) {
                close_keeping_vouch(fd);
                return -EIO;
            }
            fl.l_len = 2; /* keep byte 2 (standby) through the downgrade below */
            fl.l_type = F_UNLCK;
            fcntl(fd, F_OFD_SETLK, &fl);
        } else if (pread(fd, &f, sizeof f, 0) != (ssize_t)sizeof f || f.magic != PAYER_MAGIC ||
                   f.dev >= CS_MAX_DEVICES) {
            close_keeping_vouch(fd);
            return -EPROTO;
        } else if (!cs_pod_vouches(fd, BYTE_VOUCH, cs_pod_self())) {
            close_keeping_vouch(fd); /* a stranger's file: its size is not ours to believe */
            return -EPERM;
        }
        /* A standby lock first, so that the file is not removed under us;
         * then the name must still be ours (else a remover won: retry). */
        if (lock(fd, BYTE_STANDBY, F_OFD_SETLK, F_RDLCK) == 0 && still_named(fd, name)) {
            *dev = (int)f.dev;
            *bytes = f.bytes;
            return fd;
        }
        close_keeping_vouch(fd);
    }
    return -EAGAIN;
}

/* Nobody pays: byte 0 is free, or whoever holds it is not vouched for
 * by a process of our pod (a stranger holding byte 0 to keep us from
 * taking the charge over). Asked by processes standing by, which hold no
 * vouch of their own on the file. */
bool cs__payer_unpaid(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = BYTE_PAYING, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return false; /* cannot tell: the one who may pay keeps paying */
    return fl.l_type == F_UNLCK || !cs_pod_vouches(fd, BYTE_VOUCH, cs_pod_self());
}

/* The POSIX vouch is this process's: closing any other descriptor of the
 * file in this process drops it (the kernel's rule for POSIX locks); the
 * next settle of a process paying through this file takes it again. */
int cs__payer_pay(int fd)
{
    int r = lock(fd, BYTE_PAYING, F_OFD_SETLK, F_RDLCK);
    if (r == 0) {
        if (cs_pod_vouch(fd, BYTE_VOUCH, F_RDLCK) == 0)
            vouched_add(fd);
        lock(fd, BYTE_STANDBY, F_OFD_SETLK, F_UNLCK);
    }
    return r;
}

int cs__payer_elect(int fd)
{
    if (lock(fd, BYTE_ELECT, F_OFD_SETLK, F_WRLCK))
        return -EAGAIN; /* another process is taking it over right now */
    if (!cs__payer_unpaid(fd)) {
        lock(fd, BYTE_ELECT, F_OFD_SETLK, F_UNLCK);
        return -EAGAIN;
    }
    return 0;
}

void cs__payer_elected(int fd)
{
    cs__payer_pay(fd);
    lock(fd, BYTE_ELECT, F_OFD_SETLK, F_UNLCK);
}

void cs__payer_close(const char *dir, uint64_t key, int fd)
{
    if (fd < 0)
        return;
    for (int b = BYTE_PAYING; b <= BYTE_STANDBY; b++)
        lock(fd, b, F_OFD_SETLK, F_UNLCK);
    vouched_remove(fd);
    cs_pod_vouch(fd, BYTE_VOUCH, F_UNLCK); /* another of ours keeps paying: see below */
    char name[4200];
    payer_name(dir, key, name, sizeof name);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 3};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0 && still_named(fd, name))
        unlink(name); /* nobody pays, elects or stands by: nobody holds it */
    close_keeping_vouch(fd);
}
