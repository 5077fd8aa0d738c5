/*
 * The registry of ledgers (node.h): one file per user and pod in the node
 * directory, written with pwrite under a POSIX write lock on byte 0, read
 * with pread, never mapped (a file truncated under a reader is a short
 * read, never a SIGBUS).
 *
 * Liveness is a lock, not a timestamp: the registrant takes a shared OFD
 * lock on byte CS_REG_LOCK_BASE + i of its file for record i and keeps
 * the descriptor open (O_CLOEXEC). Fork children share the description
 * and so the lock; the kernel drops it when the last of them dies, by
 * any death. A reader asks F_OFD_GETLK for a write lock on the byte: a
 * conflict means some registrant lives.
 *
 * The directory gets the board's checks (board.c): a real directory,
 * owned by root or by us, sticky when others can write it.
 *
 * Threads: cs__node_register runs once per process image, from the
 * library's initialisation (one thread at a time: src/hook/init.c); reg_fd
 * is written only there and by nobody else.
 */
#define _GNU_SOURCE
#include "node/node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/io.h"
#include "core/log.h"
#include "core/path.h"
#include "core/pod.h"
#include "node/internal.h"

#define SUBSYS "node"

static int reg_fd = -1; /* our registry file, kept open for the lock */

uint32_t cs__reg_check(const struct cs_reg_record *r)
{
    const uint8_t *p = (const uint8_t *)r;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < offsetof(struct cs_reg_record, check); i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

bool cs__reg_record_intact(const struct cs_reg_record *r)
{
    return r->dev | r->ino ? r->check == cs__reg_check(r) && memchr(r->path, 0, sizeof r->path)
                           : false;
}

void cs__reg_init_header(struct cs_reg_header *h, uint32_t uid)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CS_REG_MAGIC, 8);
    h->version = CS_REG_VERSION;
    h->header_size = sizeof(struct cs_reg_header);
    h->record_size = sizeof(struct cs_reg_record);
    h->records = CS_REG_RECORDS;
    h->uid = uid;
}

bool cs__reg_header_ok(const struct cs_reg_header *h, uint32_t uid)
{
    struct cs_reg_header want;
    cs__reg_init_header(&want, uid);
    return !memcmp(h, &want, offsetof(struct cs_reg_header, reserved));
}

off_t cs__reg_offset(unsigned i)
{
    return (off_t)(sizeof(struct cs_reg_header) + (size_t)i * sizeof(struct cs_reg_record));
}

bool cs_node_lock_held(int fd, uint64_t byte)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte,
                       .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return true; /* cannot tell: never call a registrant dead on a guess */
    return fl.l_type != F_UNLCK;
}

/* An OFD lock on one byte, never waited for. */
static bool lock_byte(int fd, short type, uint64_t byte)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

int cs__node_open_dir(const char *dir, bool create)
{
    int fd = create ? cs__node_dir_open(dir)
                    : open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return create ? fd : -errno;
    struct stat st;
    if (fstat(fd, &st) || cs__node_dir_trust(&st)) {
        close(fd);
        return -EPERM;
    }
    return fd;
}

/* Our file, made whole (size, header) under the write lock. A bad header
 * means nobody could read the records, so they go with it. */
static bool repair_own(int fd, uint32_t uid)
{
    struct stat st;
    struct cs_reg_header h;
    if (fstat(fd, &st))
        return false;
    if ((st.st_mode & 07777) != 0644)
        fchmod(fd, 0644);
    if (st.st_size == CS_REG_SIZE && cs__pread_full(fd, &h, sizeof h, 0) &&
        cs__reg_header_ok(&h, uid))
        return true;
    cs__reg_init_header(&h, uid);
    return !ftruncate(fd, 0) && !ftruncate(fd, CS_REG_SIZE) && cs__pwrite_full(fd, &h, sizeof h, 0);
}

/* `name` in dirfd, read-write, only when it is a regular file `uid`
 * owns: a descriptor, -EPERM (another user's file or not a file: a
 * squat), or -errno. */
static int open_if_ours(int dirfd, const char *name, uint32_t uid, int flags)
{
    int fd = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | flags, 0644);
    if (fd < 0)
        return errno == ELOOP ? -EPERM : -errno;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != uid) {
        close(fd);
        return -EPERM;
    }
    return fd;
}

int cs__node_open_fallback(int dirfd, const char *name, uint32_t uid, char *used, size_t len)
{
    int lfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d && lfd >= 0)
        close(lfd);
    size_t n = strlen(name);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, name, n) || de->d_name[n] != '.' ||
            strspn(de->d_name + n + 1, "0123456789abcdef") != CS_REG_SUFFIX_LEN ||
            de->d_name[n + 1 + CS_REG_SUFFIX_LEN])
            continue;
        int fd = open_if_ours(dirfd, de->d_name, uid, 0);
        if (fd >= 0) {
            snprintf(used, len, "%s", de->d_name);
            closedir(d);
            return fd;
        }
    }
    if (d)
        closedir(d);
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint64_t)cs__now_ns() ^ ((uint64_t)getpid() << 32);
    r |= 1; /* never all zeros: readers take suffix 0 for the plain name */
    snprintf(used, len, "%s.%016llx", name, (unsigned long long)r);
    return open_if_ours(dirfd, used, uid, O_CREAT | O_EXCL);
}

/* Our registry file: `name`, or a fallback beside `plain` (our uid's
 * name without a pod) when another user took that name first, said at
 * warning level since the administrator's view depends on it. `used` gets
 * the name. */
static int open_own(int dirfd, const char *dir, const char *name, const char *plain,
                    uint32_t uid, char *used, size_t len)
{
    snprintf(used, len, "%s", name);
    int fd = open_if_ours(dirfd, name, uid, O_CREAT);
    struct stat st;
    bool there = !fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW);
    /* Another user's 0644 file at our name: EACCES for us, EPERM for root. */
    if (fd != -EPERM && !(fd == -EACCES && there && st.st_uid != uid))
        return fd;
    unsigned owner = there ? (unsigned)st.st_uid : 0u;
    fd = cs__node_open_fallback(dirfd, plain, uid, used, len);
    cs_warn(SUBSYS, "registry file %s/%s is not ours (owned by uid %u, or not a regular "
            "file): another user took our name; %s%s%s (root: remove %s/%s)", dir, name, owner,
            fd >= 0 ? "registered in " : "cannot register at all: ", fd >= 0 ? used : "",
            fd >= 0 ? " instead" : strerror(-fd), dir, name);
    return fd;
}

/* How long a registrant waits for another process of its own pod to
 * finish writing the file: bounded, on the start-up path. */
#define REG_LOCK_WAIT_NS 2000000000ll

/* The file's write lock among the registrants of our pod: a POSIX lock,
 * so that the kernel names its holder. A holder of another pod, or one in
 * a pid namespace we cannot see (or an OFD lock, pid -1), is a stranger
 * holding it to keep us out: we write without it (the worst a race with
 * an honest writer costs is one record, found again at its next start).
 * True when we hold it. */
static bool writer_lock(int fd)
{
    int64_t deadline = cs__now_ns() + REG_LOCK_WAIT_NS;
    for (;;) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fcntl(fd, F_SETLK, &fl) == 0)
            return true;
        if (errno != EACCES && errno != EAGAIN)
            return false;
        fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK &&
            cs_pod_of(fl.l_pid) != cs_pod_self())
            return false;
        if (cs__now_ns() > deadline)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void writer_unlock(int fd)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    fcntl(fd, F_SETLK, &fl);
}

/* Whether a live record's registrant is a process of our pod: a record
 * a stranger wrote (or keeps live with a lock of its own) in our pod's
 * file may be given up when the file is full. */
static bool registrant_of_our_pod(const struct cs_reg_record *r)
{
    return r->pid > 0 && cs_pod_of((pid_t)r->pid) == cs_pod_self();
}

/* Records are read a page at a time. Read whole (256 KiB) into a buffer
 * a fresh process touches for the first time, they cost ~0.3 ms of page
 * faults, under the file's write lock, which every process of the user
 * starting on the node takes in turn. */
#define REG_BATCH 16u
_Static_assert(CS_REG_RECORDS % REG_BATCH == 0, "whole batches");

/* The record for our ledger: one that already names it, else a free or
 * stale one. Under the file's write lock. -1 when every record is live. */
static int pick_record(int fd, const struct cs_reg_record *want, bool *same)
{
    /* Only the thread initialising the process registers it. */
    static struct cs_reg_record recs[REG_BATCH];
    int spare = -1;
    for (unsigned base = 0; base < CS_REG_RECORDS; base += REG_BATCH) {
        if (!cs__pread_full(fd, recs, sizeof recs, cs__reg_offset(base)))
            return -1;
        for (unsigned i = base; i < base + REG_BATCH; i++) {
            const struct cs_reg_record *r = &recs[i - base];
            bool intact = cs__reg_record_intact(r);
            if (intact && r->dev == want->dev && r->ino == want->ino &&
                r->created_ns == want->created_ns) {
                *same = cs_node_lock_held(fd, CS_REG_LOCK_BASE + i);
                return (int)i;
            }
            if (spare < 0 && (!intact || !cs_node_lock_held(fd, CS_REG_LOCK_BASE + i)))
                spare = (int)i;
        }
    }
    *same = false;
    if (spare >= 0)
        return spare;
    for (unsigned base = 0; base < CS_REG_RECORDS; base += REG_BATCH) {
        if (!cs__pread_full(fd, recs, sizeof recs, cs__reg_offset(base)))
            return -1;
        for (unsigned i = base; i < base + REG_BATCH; i++)
            if (!registrant_of_our_pod(&recs[i - base]))
                return (int)i;
    }
    return -1;
}

static int register_in(int fd, const struct cs_reg_record *rec)
{
    bool locked = writer_lock(fd);
    int rc = -ENOSPC;
    bool same = false;
    int i = repair_own(fd, (uint32_t)geteuid()) ? pick_record(fd, rec, &same) : -1;
    /* A live record of the same ledger keeps its registrant's pid/fd: we
     * only add our lock to it. */
    if (i >= 0 && (same || cs__pwrite_full(fd, rec, sizeof *rec, cs__reg_offset((unsigned)i))))
        rc = lock_byte(fd, F_RDLCK, CS_REG_LOCK_BASE + (unsigned)i) ? 0 : -errno;
    if (locked)
        writer_unlock(fd);
    if (rc == 0)
        cs_pod_vouch(fd, CS_REG_VOUCH_BYTE, F_RDLCK); /* kept while we live (reg_fd) */
    return rc;
}

void cs__node_register(const char *registry, const char *path, int fd, uint64_t created_ns)
{
    if (reg_fd >= 0)
        return;
    if (!registry || !*registry)
        registry = CS_REG_DEFAULT_PATH;
    struct stat st;
    struct cs_reg_record rec;
    memset(&rec, 0, sizeof rec);
    if (fstat(fd, &st) || strlen(path) >= sizeof rec.path) {
        cs_info(SUBSYS, "ledger %s not registered (path too long for the registry): "
                "the node view finds it only by a directory scan", path);
        return;
    }
    rec.dev = (uint64_t)st.st_dev;
    rec.ino = (uint64_t)st.st_ino;
    rec.created_ns = created_ns;
    rec.pid = (int32_t)getpid();
    rec.fd = fd;
    strcpy(rec.path, path);
    rec.check = cs__reg_check(&rec);

    char dir[4096], name[320], plain[300], used[360] = "";
    const char *base;
    cs__path_dir(registry, dir, sizeof dir, &base);
    uint64_t pod = cs_pod_self();
    snprintf(plain, sizeof plain, "%s.%u", base, (unsigned)geteuid());
    if (pod)
        snprintf(name, sizeof name, "%s.%u.%016llx", base, (unsigned)geteuid(),
                 (unsigned long long)pod);
    else
        snprintf(name, sizeof name, "%s", plain);
    int dirfd = cs__node_open_dir(dir, true);
    int own = dirfd >= 0
                  ? open_own(dirfd, dir, name, plain, (uint32_t)geteuid(), used, sizeof used)
                  : dirfd;
    /* Vouched for by us, or replaced when a stranger keeps us from it. */
    if (own >= 0 && !strcmp(used, name))
        own = cs_pod_claim(dirfd, used, own, CS_REG_VOUCH_BYTE);
    int rc = own >= 0 ? register_in(own, &rec) : own;
    if (dirfd >= 0)
        close(dirfd);
    if (rc) {
        if (own >= 0)
            close(own);
        cs_info(SUBSYS, "ledger %s not registered in %s/%s (%s): the node view may not "
                "list this tenant", path, dir, used, strerror(-rc));
        return;
    }
    reg_fd = own;
}
