/*
 * Pods (pod.h): a shared file speaks for a pod while a process of that
 * pod holds a POSIX lock on it. POSIX, not OFD, locks: the kernel records
 * the holder's pid only for POSIX locks (an OFD lock shows pid -1), and a
 * pod cannot take a lock in another pod's process.
 *
 * Nothing here keeps state but the cached pod of this process, written
 * once (racing first callers write the same value).
 */
#define _GNU_SOURCE
#include "core/pod.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Lines of /proc/locks read per question: a node with more locks than
 * this answers "cannot tell" (fail closed: the caller over-counts or
 * does not believe), never a long read under a caller's lock. */
#define LOCK_LINES_MAX 65536

static uint64_t pod_at(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t cs_pod_self(void)
{
    static uint64_t self;
    uint64_t v = __atomic_load_n(&self, __ATOMIC_RELAXED);
    if (!v) {
        v = pod_at("/proc/self/ns/mnt");
        __atomic_store_n(&self, v, __ATOMIC_RELAXED);
    }
    return v;
}

uint64_t cs_pod_of(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
    return pod_at(path);
}

bool cs_lock_line_parse(const char *line, struct cs_lock_line *out)
{
    char kind[16], adv[16], type[16], end[32];
    int pid, used = 0;
    unsigned long long ino, start;
    memset(out, 0, sizeof *out);
    /* "7: POSIX  ADVISORY  READ 1234 fe:00:5736175 0 EOF"; a waiter has
     * "7: -> POSIX ..." and holds nothing. */
    if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%llu %llu %31s%n", kind, adv, type, &pid,
               &out->major, &out->minor, &ino, &start, end, &used) != 9 || !used)
        return false;
    out->posix = !strcmp(kind, "POSIX");
    out->write = !strcmp(type, "WRITE");
    if (!out->write && strcmp(type, "READ"))
        return false;
    out->pid = pid > 0 ? pid : 0;
    out->ino = ino;
    out->start = start;
    if (!strcmp(end, "EOF")) {
        out->end = UINT64_MAX;
    } else {
        char *e;
        errno = 0;
        unsigned long long v = strtoull(end, &e, 10);
        if (errno || *e || v < start)
            return false;
        out->end = v;
    }
    return true;
}

static bool holder_of_pod(pid_t pid, uint64_t pod)
{
    return pid > 0 && pod && (pid == getpid() ? cs_pod_self() : cs_pod_of(pid)) == pod;
}

/* The POSIX locks on st's file covering byte, from /proc/locks: true as
 * soon as one is held by a process of pod. */
static bool listed_voucher(const struct stat *st, uint64_t byte, uint64_t pod)
{
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    struct cs_lock_line l;
    for (int n = 0; !found && n < LOCK_LINES_MAX && fgets(line, sizeof line, f); n++)
        found = cs_lock_line_parse(line, &l) && l.posix && l.ino == (uint64_t)st->st_ino &&
                l.major == major(st->st_dev) && l.minor == minor(st->st_dev) &&
                l.start <= byte && byte <= l.end && holder_of_pod(l.pid, pod);
    fclose(f);
    return found;
}

bool cs_pod_vouches(int fd, uint64_t byte, uint64_t pod)
{
    if (!pod)
        return false;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte,
                       .l_len = 1};
    /* F_GETLK names one holder (never this process: its own locks do not
     * conflict with it); if that one is of the pod, that is enough. */
    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK && holder_of_pod(fl.l_pid, pod))
        return true;
    struct stat st;
    return fstat(fd, &st) == 0 && listed_voucher(&st, byte, pod);
}

enum cs_vouch cs_pod_vouch_state(int fd, uint64_t byte, uint64_t pod)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte,
                       .l_len = 1};
    if (fcntl(fd, F_GETLK, &fl) != 0)
        return CS_VOUCH_NONE;
    if (fl.l_type == F_UNLCK)
        return holder_of_pod(getpid(), pod) && cs_pod_vouches(fd, byte, pod) ? CS_VOUCH_POD
                                                                            : CS_VOUCH_NONE;
    if (holder_of_pod(fl.l_pid, pod))
        return CS_VOUCH_POD;
    struct stat st;
    if (fstat(fd, &st))
        return CS_VOUCH_NONE;
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return fl.l_pid > 0 ? CS_VOUCH_OTHER : CS_VOUCH_UNSEEN;
    enum cs_vouch best = CS_VOUCH_NONE;
    char line[256];
    struct cs_lock_line l;
    for (int n = 0; best != CS_VOUCH_POD && n < LOCK_LINES_MAX && fgets(line, sizeof line, f);
         n++) {
        if (!cs_lock_line_parse(line, &l) || !l.posix || l.ino != (uint64_t)st.st_ino ||
            l.major != major(st.st_dev) || l.minor != minor(st.st_dev) || l.start > byte ||
            byte > l.end)
            continue;
        enum cs_vouch v = !l.pid                        ? CS_VOUCH_UNSEEN
                          : holder_of_pod(l.pid, pod) ? CS_VOUCH_POD
                                                      : CS_VOUCH_OTHER;
        if (v > best)
            best = v;
    }
    fclose(f);
    return best;
}

int cs_pod_vouch(int fd, uint64_t byte, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
    return fcntl(fd, F_SETLK, &fl) == 0 ? 0 : -errno;
}

int cs_pod_claim(int dirfd, const char *name, int fd, uint64_t byte)
{
    if (cs_pod_vouch(fd, byte, F_RDLCK) == 0)
        return fd;
    close(fd);
    for (int attempt = 0; attempt < 8; attempt++) {
        int t = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
        if (t < 0)
            return -errno;
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", t);
        if (fchmod(t, 0644) == 0 && cs_pod_vouch(t, byte, F_RDLCK) == 0) {
            unlinkat(dirfd, name, 0); /* the squatted file: its holder keeps only that */
            if (linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) == 0)
                return t;
        }
        close(t); /* the name was made again first: again */
    }
    return -EBUSY;
}
