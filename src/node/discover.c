/*
 * Reading the node's tenants (node.h): registry files, then the scan of
 * HAMi's directories; every candidate is opened read-only, checked to be
 * a ledger (regular file, whole size, magic) that somebody uses (a slot
 * lock held) and that the reader may see, and listed once per file.
 */
#define _GNU_SOURCE
#include "node/node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io.h"
#include "cushare/ledger.h"
#include "node/internal.h"

#define SCAN_ENTRIES_MAX 4096   /* directory entries looked at per directory */
#define REG_USERS_MAX 256       /* registry files root reads */

struct found_list {
    struct cs_node_found *v;
    int n, max;
};

bool cs_node_ledger_live(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)CS_LEDGER_LOCK_BASE, .l_len = CS_LEDGER_SLOTS};
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

static bool may_see(uid_t owner)
{
    uid_t me = geteuid();
    return me == 0 || owner == me;
}

static bool is_ledger(int fd, struct stat *st)
{
    char magic[8];
    return !fstat(fd, st) && S_ISREG(st->st_mode) &&
           (uint64_t)st->st_size >= CS_LEDGER_FILE_SIZE &&
           cs__pread_full(fd, magic, sizeof magic, 0) && !memcmp(magic, CS_LEDGER_MAGIC, 8);
}

/* Takes ownership of fd: listed, or closed. */
static void offer(struct found_list *l, int fd, const char *path, const char *container,
                  uid_t want_owner, bool any_owner)
{
    struct stat st;
    bool ok = is_ledger(fd, &st) && may_see(st.st_uid) &&
              (any_owner || st.st_uid == want_owner) && cs_node_ledger_live(fd);
    for (int i = 0; ok && i < l->n; i++)
        ok = !(l->v[i].dev == st.st_dev && l->v[i].ino == st.st_ino);
    if (!ok || l->n == l->max) {
        close(fd);
        return;
    }
    struct cs_node_found *f = &l->v[l->n++];
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->uid = st.st_uid;
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->container, sizeof f->container, "%s", container ? container : "");
}

static int open_ro(int dirfd, const char *path)
{
    return openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

/* The ledger a live record names: its path if that is still the same
 * file, else the registrant's descriptor (an unnamed private ledger). */
static void offer_record(struct found_list *l, const struct cs_reg_record *r, uid_t uid)
{
    char via[64];
    int fd = open_ro(AT_FDCWD, r->path);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) || (uint64_t)st.st_dev != r->dev ||
                    (uint64_t)st.st_ino != r->ino)) {
        close(fd);
        fd = -1;
    }
    const char *shown = r->path;
    if (fd < 0 && r->pid > 0 && r->fd >= 0) {
        snprintf(via, sizeof via, "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
        fd = open_ro(AT_FDCWD, via);
        if (fd >= 0 && (fstat(fd, &st) || (uint64_t)st.st_dev != r->dev ||
                        (uint64_t)st.st_ino != r->ino)) {
            close(fd);
            fd = -1;
        }
        shown = via;
    }
    if (fd >= 0)
        offer(l, fd, shown, NULL, uid, uid == 0);
}

static void read_registry_file(struct found_list *l, int dirfd, const char *name, uint32_t uid,
                               struct cs_reg_record *recs)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    struct cs_reg_header h;
    bool ok = !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == uid &&
              !(st.st_mode & 022) && st.st_size == CS_REG_SIZE &&
              cs__pread_full(fd, &h, sizeof h, 0) && cs__reg_header_ok(&h, uid) &&
              cs__pread_full(fd, recs, CS_REG_RECORDS * sizeof *recs, cs__reg_offset(0));
    for (unsigned i = 0; ok && i < CS_REG_RECORDS; i++)
        if (cs__reg_record_intact(&recs[i]) && cs_node_lock_held(fd, CS_REG_LOCK_BASE + i))
            offer_record(l, &recs[i], (uid_t)uid);
    close(fd);
}

static bool parse_uid_suffix(const char *name, const char *base, uint32_t *uid)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) || name[n] != '.')
        return false;
    const char *s = name + n + 1;
    if (*s < '0' || *s > '9' || (*s == '0' && s[1]))
        return false;
    uint64_t v = 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9' || (v = v * 10 + (uint64_t)(*s - '0')) > UINT32_MAX)
            return false;
    *uid = (uint32_t)v;
    return true;
}

static void read_registry(struct found_list *l, const char *registry)
{
    char dir[PATH_MAX], name[NAME_MAX + 1];
    const char *base;
    cs__path_dir(registry ? registry : CS_REG_DEFAULT_PATH, dir, sizeof dir, &base);
    int dirfd = cs__node_open_dir(dir, false);
    struct cs_reg_record *recs = malloc(CS_REG_RECORDS * sizeof *recs);
    if (dirfd < 0 || !recs)
        goto out;
    if (geteuid() != 0) {
        snprintf(name, sizeof name, "%s.%u", base, (unsigned)geteuid());
        read_registry_file(l, dirfd, name, (uint32_t)geteuid(), recs);
        goto out;
    }
    int lfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        goto out;
    }
    struct dirent *de;
    int users = 0;
    for (int seen = 0; (de = readdir(d)) && seen < SCAN_ENTRIES_MAX && users < REG_USERS_MAX;
         seen++) {
        uint32_t uid;
        if (parse_uid_suffix(de->d_name, base, &uid)) {
            users++;
            read_registry_file(l, dirfd, de->d_name, uid, recs);
        }
    }
    closedir(d);
out:
    free(recs);
    if (dirfd >= 0)
        close(dirfd);
}

/* Ledgers by magic in `dir` and, at depth 0, in its subdirectories
 * (HAMi: <dir>/<pod uid>_<container>/<file>). No symlink is followed. */
static void scan_dir(struct found_list *l, int parent, const char *rel, const char *shown,
                     int depth)
{
    int dfd = openat(parent, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    struct dirent *de;
    for (int seen = 0; (de = readdir(d)) && seen < SCAN_ENTRIES_MAX; seen++) {
        if (de->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", shown, de->d_name);
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW))
            continue;
        if (S_ISDIR(st.st_mode) && depth == 0) {
            scan_dir(l, dfd, de->d_name, path, 1);
        } else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= CS_LEDGER_FILE_SIZE &&
                   may_see(st.st_uid)) {
            int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            const char *container = depth ? strrchr(shown, '/') : NULL;
            if (fd >= 0)
                offer(l, fd, path, container ? container + 1 : NULL, 0, true);
        }
    }
    closedir(d);
}

int cs_node_discover(const struct cs_node_where *w, struct cs_node_found *out, int max)
{
    struct found_list l = {.v = out, .n = 0, .max = max};
    read_registry(&l, w->registry);
    if (w->no_scan)
        return l.n;
    static const char *const dflt[] = {CS_NODE_DEFAULT_SCAN, NULL};
    const char *const *scan = w->scan[0] ? w->scan : dflt;
    for (int i = 0; i < CS_NODE_SCAN_MAX && scan[i]; i++)
        scan_dir(&l, AT_FDCWD, scan[i], scan[i], 0);
    return l.n;
}
