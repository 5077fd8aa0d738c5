/*
 * Ledger files that belong to one process tree (private ledgers): who keeps
 * them in place, who removes them, and the sweep of those nobody removed.
 *
 * A ledger file is in use while any process holds a slot lock on it (its
 * processes) or a shared lock on its keep byte (CS_LEDGER_KEEP_LOCK: the
 * process that made it for others, `cushare run`). Whoever removes a file
 * first takes the keep byte exclusively, without waiting, then checks that
 * no slot lock is held, then unlinks the name if it still names that file.
 * The kernel drops every one of these locks when its holder dies, however
 * it dies, so "no lock held" is proof that nobody uses the file, and the
 * exclusive keep lock held across the check and the unlink keeps a keeper
 * from arriving in between. PIDs in names are never trusted.
 *
 * A keeper takes its shared lock and then checks that the name still
 * names its file: if a remover came first it makes another.
 *
 * Only names of our own patterns in the caller's own 0700 directory, owned
 * by the caller's uid, are ever removed.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"

#define SUBSYS "ledger"

void cs__ledger_params_from_config(const struct cs_config *c, struct cs_ledger_params *p)
{
    memset(p, 0, sizeof *p);
    /* Devices are not known before cuInit; record how many carry a
     * configured value (at least one). */
    p->device_count = 1;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        p->limit[d] = cs__config_mem_limit(c, d);
        p->sm_limit[d] = cs__config_sm_limit(c, d);
        if (c->mem_limit_set[d] || c->sm_limit_set[d])
            p->device_count = (uint32_t)d + 1;
    }
    p->policy = c->policy;
    p->priority = c->priority;
    p->trust = c->ledger_trust_dir ? CS_LEDGER_TRUST_DIRECTORY : CS_LEDGER_TRUST_OWNER;
    p->authority = c->from_slice_file;
}

static int lock_range(int fd, int cmd, short type, uint64_t start, uint64_t len)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)start;
    fl.l_len = (off_t)len;
    if (fcntl(fd, cmd, &fl) != 0)
        return errno == EACCES ? -EAGAIN : -errno;
    return cmd == F_OFD_GETLK && fl.l_type != F_UNLCK ? -EBUSY : 0;
}

/* Whether `name` (relative to dirfd, or a path when dirfd is AT_FDCWD)
 * still names the file open as fd: itself (a remover unlinks only that),
 * or also through symbolic links (a keeper only needs to find it). */
static bool names_file(int dirfd, const char *name, int fd, bool follow)
{
    struct stat a, b;
    return fstatat(dirfd, name, &a, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 &&
           fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Removes `name` if nobody uses the file: keep byte exclusive (not
 * waited for), then no slot lock. fd is open read-write on it; its locks
 * go with it when the caller closes it. */
static bool remove_if_unused(int dirfd, const char *name, int fd)
{
    if (lock_range(fd, F_OFD_SETLK, F_WRLCK, CS_LEDGER_KEEP_LOCK, 1) != 0)
        return false; /* kept, or another remover is at it */
    if (lock_range(fd, F_OFD_GETLK, F_WRLCK, CS_LEDGER_LOCK_BASE, CS_LEDGER_SLOTS) != 0)
        return false; /* a process holds a slot (or we could not tell) */
    return names_file(dirfd, name, fd, false) && unlinkat(dirfd, name, 0) == 0;
}

int cs__ledger_keep(struct cs_ledger *l)
{
    if (!l->hdr || l->fd < 0 || l->read_only)
        return -EBADF;
    int r = lock_range(l->fd, F_OFD_SETLK, F_RDLCK, CS_LEDGER_KEEP_LOCK, 1);
    if (r)
        return r;
    return names_file(AT_FDCWD, l->path, l->fd, true) ? 0 : -ESTALE;
}

bool cs__ledger_remove_if_unused(struct cs_ledger *l)
{
    /* Our own shared keep lock, if any, is converted: OFD locks of one
     * description never conflict with each other. */
    return l->hdr && l->fd >= 0 && !l->read_only && remove_if_unused(AT_FDCWD, l->path, l->fd);
}

int cs__ledger_reopen_fd(int fd, int flags)
{
    /* Async-signal-safe (used in an at-fork child handler): no stdio. */
    char path[32] = "/proc/self/fd/";
    char digits[12];
    int n = 0;
    unsigned v = (unsigned)fd;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < (int)sizeof digits);
    size_t at = strlen(path);
    while (n)
        path[at++] = digits[--n];
    path[at] = '\0';
    return open(path, flags | O_CLOEXEC);
}

int cs__ledger_unname(struct cs_ledger *l)
{
    if (!l->hdr || l->fd < 0)
        return -EBADF;
    /* Fork children reach an unnamed file through /proc/self/fd only. */
    int probe = cs__ledger_reopen_fd(l->fd, O_RDONLY);
    if (probe < 0)
        return -errno;
    close(probe);
    if (names_file(AT_FDCWD, l->path, l->fd, false) && unlink(l->path) != 0)
        return -errno;
    return 0;
}

/* Names of our patterns: prefix, then pid/clock digits (hex, '-'), then
 * optionally ".ledger". Temporaries of a creator (".name.pid.n.tmp")
 * never match: a live creator may be about to link one. */
static bool ours_by_name(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return false;
    const char *p = name + n;
    const char *end = p + strlen(p);
    if (end - p > 7 && !strcmp(end - 7, ".ledger"))
        end -= 7;
    if (p == end)
        return false;
    for (; p < end; p++)
        if (!strchr("0123456789abcdefx-", *p))
            return false;
    return true;
}

static bool sweep_one(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return false;
    struct stat st;
    bool removed = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
                   remove_if_unused(dirfd, name, fd);
    close(fd);
    return removed;
}

int cs__ledger_sweep(const char *dir, const char *prefix)
{
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dirfd < 0)
        return -errno;
    DIR *d = fdopendir(dirfd);
    if (!d) {
        int e = errno;
        close(dirfd);
        return -e;
    }
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (ours_by_name(e->d_name, prefix) && sweep_one(dirfd, e->d_name)) {
            cs_info(SUBSYS, "removed %s/%s: a ledger no live process uses", dir, e->d_name);
            removed++;
        }
    closedir(d);
    return removed;
}
