/*
 * Trusted procfs: the host PID from the NStgid line of <root>/self/status.
 *
 * NStgid lists our PID in every namespace from the one the procfs was
 * mounted in (leftmost) down to our own (rightmost). The leftmost value is
 * the host PID only if that procfs belongs to the initial PID namespace. A
 * container's own /proc yields one plausible-looking, wrong number, so the
 * root is opt-in and checked (docs/identity.md, "procfs rule"):
 *
 *   1. the root is a procfs (statfs magic), not a directory of crafted files;
 *   2. the rightmost level is getpid(): the file describes this process;
 *   3. one level: the procfs is our own namespace's. Trusted only if that
 *      namespace is the initial one, i.e. <root>/self/ns/pid has the
 *      initial namespace's fixed inode (PROC_PID_INIT_INO);
 *   4. several levels: the procfs is from a proper ancestor. If we may read
 *      <root>/1/ns/pid (its init's namespace), it must be the initial one;
 *      if the kernel denies that (unprivileged reader), the level count is
 *      the evidence we have (residual risk documented).
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/log.h"

#define PROC_SUPER_MAGIC_ 0x9fa0
#define PROC_PID_INIT_INO_ 0xEFFFFFFCu   /* kernel ABI since Linux 3.8 */
#define STATUS_MAX 16384                  /* real status files are ~1.5 KiB */

static const char field[] = "NStgid:";

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Finds the single line starting with "NStgid:"; returns the offset just
 * past the colon, -ENOENT if none, -EBADMSG if there are two. */
static long find_field(const char *s, size_t len)
{
    const size_t flen = sizeof field - 1;
    long found = -ENOENT;
    size_t i = 0;
    while (i < len) {
        if (len - i >= flen && memcmp(s + i, field, flen) == 0) {
            if (found >= 0)
                return -EBADMSG;
            found = (long)(i + flen);
        }
        const char *nl = memchr(s + i, '\n', len - i);
        if (!nl)
            break;
        i = (size_t)(nl - s) + 1;
    }
    return found;
}

/* Parses one decimal PID at s[*pos]; advances *pos past its digits. */
static int parse_pid(const char *s, size_t len, size_t *pos, pid_t *out)
{
    size_t i = *pos;
    if (i >= len || s[i] < '0' || s[i] > '9')
        return -EBADMSG;
    if (s[i] == '0') {
        /* "0" alone is a zero PID; "0123" is not how the kernel prints. */
        if (i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9')
            return -EBADMSG;
        if (i + 1 < len && !is_blank(s[i + 1]) && s[i + 1] != '\n')
            return -EBADMSG;
        return -ERANGE;
    }
    long long v = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (s[i] - '0');
        if (v > INT_MAX)
            return -ERANGE;
    }
    if (i < len && !is_blank(s[i]) && s[i] != '\n')
        return -EBADMSG;                /* "12a", "12-", "12\r" */
    *pos = i;
    *out = (pid_t)v;
    return 0;
}

int cs__parse_nstgid(const char *status_text, size_t len, pid_t *levels, size_t cap,
                     size_t *nlevels)
{
    if (!status_text || !levels || !nlevels || cap == 0)
        return -EINVAL;
    long start = find_field(status_text, len);
    if (start < 0)
        return (int)start;

    size_t i = (size_t)start, n = 0;
    if (i >= len || !is_blank(status_text[i])) {
        /* "NStgid:" followed by the end, a newline or junk. */
        return (i >= len || status_text[i] == '\n') ? -ENODATA : -EBADMSG;
    }
    for (;;) {
        while (i < len && is_blank(status_text[i]))
            i++;
        if (i >= len || status_text[i] == '\n')
            break;
        if (n == cap)
            return -E2BIG;
        int rc = parse_pid(status_text, len, &i, &levels[n]);
        if (rc)
            return rc;
        n++;
    }
    if (n == 0)
        return -ENODATA;
    *nlevels = n;
    return 0;
}

/* Reads a whole small file into buf; returns its length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    ssize_t rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == cap) {
            rc = -EFBIG;
            break;
        }
    }
    close(fd);
    return rc ? rc : (ssize_t)got;
}

/* Inode of a namespace file, or -errno. */
static long long ns_inode(const char *root, const char *rel)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", root, rel) >= (int)sizeof path)
        return -ENAMETOOLONG;
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    return (long long)st.st_ino;
}

/* Rules 3 and 4 of the header comment. */
static int check_namespace(const char *root, size_t nlevels)
{
    if (nlevels == 1) {
        long long ino = ns_inode(root, "self/ns/pid");
        if (ino < 0)
            return (int)ino;
        return ino == PROC_PID_INIT_INO_ ? 0 : -EPERM;
    }
    long long ino = ns_inode(root, "1/ns/pid");
    if (ino == -EACCES || ino == -EPERM || ino == -ENOENT)
        return 0;                       /* not inspectable: see rule 4 */
    if (ino < 0)
        return (int)ino;
    return ino == PROC_PID_INIT_INO_ ? 0 : -EXDEV;
}

int cs__procfs_host_pid(const char *procfs_root, pid_t *out)
{
    if (!procfs_root || procfs_root[0] != '/' || !out)
        return -EINVAL;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/self/status", procfs_root) >= (int)sizeof path)
        return -ENAMETOOLONG;

    struct statfs sf;
    if (statfs(procfs_root, &sf) != 0)
        return -errno;
    if (sf.f_type != PROC_SUPER_MAGIC_)
        return -EMEDIUMTYPE;

    char buf[STATUS_MAX];
    ssize_t len = read_small(path, buf, sizeof buf);
    if (len < 0)
        return (int)len;
    pid_t levels[CS_NSTGID_MAX_LEVELS];
    size_t n = 0;
    int rc = cs__parse_nstgid(buf, (size_t)len, levels, CS_NSTGID_MAX_LEVELS, &n);
    if (rc)
        return rc;
    if (levels[n - 1] != getpid())
        return -ESRCH;
    rc = check_namespace(procfs_root, n);
    if (rc) {
        cs_warn_capped(4, "identity", "procfs %s is not the host's (%s): not trusted",
                       procfs_root, cs__procfs_reason(rc));
        return rc;
    }
    *out = levels[0];
    return 0;
}

const char *cs__procfs_reason(int err)
{
    switch (-err) {
    case 0: return "ok";
    case EINVAL: return "invalid_argument";
    case ENAMETOOLONG: return "path_too_long";
    case ENOENT: return "missing";
    case EACCES: return "denied";
    case EMEDIUMTYPE: return "not_procfs";
    case EFBIG: return "status_too_big";
    case ENODATA: return "nstgid_empty";
    case EBADMSG: return "nstgid_malformed";
    case ERANGE: return "nstgid_out_of_range";
    case E2BIG: return "nstgid_too_deep";
    case ESRCH: return "not_self";
    case EPERM: return "private_procfs";
    case EXDEV: return "intermediate_namespace";
    }
    return "other";
}
