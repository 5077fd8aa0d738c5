#include "core/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cs__path_dir(const char *path, char *dir, size_t dirsz, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, dirsz, ".");
    else if (slash == path)
        snprintf(dir, dirsz, "/");
    else
        snprintf(dir, dirsz, "%.*s", (int)(slash - path), path);
    if (base)
        *base = slash ? slash + 1 : path;
}

/* Missing (a fresh node without HAMi's /tmp/vgpulock): created one level,
 * shared like /tmp. The mode is set on the descriptor we then check, never
 * left to the umask. Losing a race to another creator is fine: its
 * directory is checked like any other. Returns a descriptor or -errno. */
int cs__node_dir_open(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    struct stat st;
    if (errno == ENOTDIR && !lstat(dir, &st) && S_ISLNK(st.st_mode))
        return -ELOOP; /* O_DIRECTORY | O_NOFOLLOW reports a symlink so */
    if (errno != ENOENT)
        return -errno;
    bool made = mkdir(dir, 0700) == 0;
    if (!made && errno != EEXIST)
        return -errno;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (made && !fstat(fd, &st) && st.st_uid == geteuid())
        fchmod(fd, 01777);
    return fd;
}

int cs__node_dir_trust(const struct stat *st)
{
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return -EPERM;
    if ((st->st_mode & 022) && !(st->st_mode & S_ISVTX))
        return -EACCES;
    return 0;
}
