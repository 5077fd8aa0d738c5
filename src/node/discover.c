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
#include "core/pod.h"
#include "cushare/ledger.h"
#include "node/internal.h"

#define SCAN_ENTRIES_MAX 4096   /* directory entries looked at per scanned directory */
/* Entries of the registry directory looked at: far beyond the files of
 * every user of a node, so a user who fills the directory with names
 * (each costing them an inode) slows a listing down, never ends it
 * before the files of users listed after theirs. */
#define REG_LIST_MAX (1 << 20)

/* Per owner: how many of its ledgers are listed and registry files read. */
struct owner_count {
    uint32_t uid;
    int ledgers, files;
};

struct found_list {
    struct cs_node_found **v;   /* the caller's array, grown here */
    int *cap;
    int n;
    struct owner_count *own;
    int nown, own_cap;
    struct cs_node_notes *notes;
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

int cs_node_open_regular(int dirfd, const char *path, bool nofollow, struct stat *st)
{
    int p = openat(dirfd, path, O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (p < 0)
        return -1;
    int fd = -1;
    if (!fstat(p, st) && S_ISREG(st->st_mode)) {
        char via[64];
        snprintf(via, sizeof via, "/proc/self/fd/%d", p);
        fd = open(via, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) /* no procfs: the name again, checked below */
            fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
                                         (nofollow ? O_NOFOLLOW : 0));
    }
    close(p);
    struct stat now;
    if (fd >= 0 && (fstat(fd, &now) || now.st_dev != st->st_dev || now.st_ino != st->st_ino)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static bool is_ledger(int fd, struct stat *st)
{
    char magic[8];
    return !fstat(fd, st) && S_ISREG(st->st_mode) &&
           (uint64_t)st->st_size >= CS_LEDGER_FILE_SIZE &&
           cs__pread_full(fd, magic, sizeof magic, 0) && !memcmp(magic, CS_LEDGER_MAGIC, 8);
}

/* The owner's counters, added when new; NULL when memory is short. */
static struct owner_count *owner(struct found_list *l, uint32_t uid)
{
    for (int i = 0; i < l->nown; i++)
        if (l->own[i].uid == uid)
            return &l->own[i];
    if (l->nown == l->own_cap) {
        int cap = l->own_cap ? 2 * l->own_cap : 16;
        struct owner_count *o = realloc(l->own, (size_t)cap * sizeof *o);
        if (!o)
            return NULL;
        l->own = o;
        l->own_cap = cap;
    }
    l->own[l->nown] = (struct owner_count){.uid = uid};
    return &l->own[l->nown++];
}

static bool listed(const struct found_list *l, const struct stat *st)
{
    for (int i = 0; i < l->n; i++)
        if ((*l->v)[i].dev == st->st_dev && (*l->v)[i].ino == st->st_ino)
            return true;
    return false;
}

/* Room for one more in the caller's array. */
static bool grow(struct found_list *l)
{
    if (l->n < *l->cap)
        return true;
    int cap = *l->cap ? 2 * *l->cap : 64;
    struct cs_node_found *v = realloc(*l->v, (size_t)cap * sizeof *v);
    if (!v)
        return false;
    *l->v = v;
    *l->cap = cap;
    return true;
}

/* A ledger beyond its owner's quota is left out and counted. */
static bool within_quota(struct found_list *l, uid_t uid)
{
    struct owner_count *o = owner(l, (uint32_t)uid);
    if (o && o->ledgers < (int)CS_NODE_USER_TENANTS) {
        o->ledgers++;
        return true;
    }
    if (l->notes) {
        l->notes->hidden++;
        l->notes->hidden_uid = (uint32_t)uid;
    }
    return false;
}

/* Takes ownership of fd: listed, or closed. */
static void offer(struct found_list *l, int fd, const char *path, const char *container,
                  uid_t want_owner, bool any_owner)
{
    struct stat st;
    bool ok = is_ledger(fd, &st) && may_see(st.st_uid) &&
              (any_owner || st.st_uid == want_owner) && cs_node_ledger_live(fd) &&
              !listed(l, &st) && within_quota(l, st.st_uid) && grow(l);
    if (!ok) {
        close(fd);
        return;
    }
    struct cs_node_found *f = &(*l->v)[l->n++];
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->uid = st.st_uid;
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->container, sizeof f->container, "%s", container ? container : "");
}

/* An open of the ledger a record names that is still that file. */
static int open_named(const char *path, const struct cs_reg_record *r)
{
    struct stat st;
    int fd = cs_node_open_regular(AT_FDCWD, path, false, &st);
    if (fd >= 0 && ((uint64_t)st.st_dev != r->dev || (uint64_t)st.st_ino != r->ino)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The ledger a live record names: its path if that is still the same
 * file, else the registrant's descriptor (an unnamed private ledger).
 * Only regular files are opened: a record naming a device or a FIFO
 * opens nothing. */
static void offer_record(struct found_list *l, const struct cs_reg_record *r, uid_t uid)
{
    char via[64];
    const char *shown = r->path;
    int fd = open_named(r->path, r);
    if (fd < 0 && r->pid > 0 && r->fd >= 0) {
        snprintf(via, sizeof via, "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
        fd = open_named(via, r);
        shown = via;
    }
    if (fd >= 0)
        offer(l, fd, shown, NULL, uid, uid == 0);
}

/* Whether the file named `<base>.<uid>.<pod>` is that pod's: a process
 * of the pod holds its vouch (node.h, "Pods"). A name of a pod that no
 * process of it vouches for is any other file. */
static bool pod_file(int fd, const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || strlen(dot + 1) != CS_REG_SUFFIX_LEN)
        return false;
    uint64_t pod = strtoull(dot + 1, NULL, 16);
    return pod && cs_pod_vouches(fd, CS_REG_VOUCH_BYTE, pod);
}

/* One registry file, named for `uid`: read only when `uid` owns it (else
 * it is a squat, counted). */
static void read_registry_file(struct found_list *l, int dirfd, const char *name, uint32_t uid,
                               struct cs_reg_record *recs)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW))
        return;
    if (st.st_uid != uid) {
        if (l->notes) {
            l->notes->squats++;
            l->notes->squat_owner = (uint32_t)st.st_uid;
        }
        return;
    }
    struct owner_count *o = owner(l, uid);
    if (!o)
        return;
    int fd = cs_node_open_regular(dirfd, name, true, &st);
    if (fd < 0)
        return;
    /* A pod's own file (vouched for by a process of the pod its name
     * carries) is always read; the others count against the uid's few. */
    if (!pod_file(fd, name)) {
        if (o->files >= CS_REG_FILES_PER_USER) {
            close(fd);
            return;
        }
        o->files++;
    }
    struct cs_reg_header h;
    bool ok = st.st_uid == uid && !(st.st_mode & 022) && st.st_size == CS_REG_SIZE &&
              cs__pread_full(fd, &h, sizeof h, 0) && cs__reg_header_ok(&h, uid) &&
              cs__pread_full(fd, recs, CS_REG_RECORDS * sizeof *recs, cs__reg_offset(0));
    for (unsigned i = 0; ok && i < CS_REG_RECORDS; i++)
        if (cs__reg_record_intact(&recs[i]) && cs_node_lock_held(fd, CS_REG_LOCK_BASE + i))
            offer_record(l, &recs[i], (uid_t)uid);
    close(fd);
}

static bool hex_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return !s[n];
}

bool cs_node_user_file_name(const char *name, const char *base, uint32_t *uid)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) || name[n] != '.')
        return false;
    const char *s = name + n + 1;
    if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
        return false;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((v = v * 10 + (uint64_t)(*s - '0')) > UINT32_MAX)
            return false;
    if (*s && !(*s == '.' && hex_digits(s + 1, CS_REG_SUFFIX_LEN)))
        return false;
    *uid = (uint32_t)v;
    return true;
}

/* Every registry file of a user we may see (root: all users; else our
 * own), found by listing the directory: the plain name and any fallback
 * name a squat made the user take. */
static void read_registry(struct found_list *l, const char *registry)
{
    char dir[PATH_MAX];
    const char *base;
    cs__path_dir(registry ? registry : CS_REG_DEFAULT_PATH, dir, sizeof dir, &base);
    int dirfd = cs__node_open_dir(dir, false);
    struct cs_reg_record *recs = malloc(CS_REG_RECORDS * sizeof *recs);
    int lfd = dirfd >= 0 ? openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *d = lfd >= 0 && recs ? fdopendir(lfd) : NULL;
    if (!d && lfd >= 0)
        close(lfd);
    struct dirent *de;
    for (int seen = 0; d && (de = readdir(d)) && seen < REG_LIST_MAX; seen++) {
        uint32_t uid;
        if (cs_node_user_file_name(de->d_name, base, &uid) && may_see((uid_t)uid))
            read_registry_file(l, dirfd, de->d_name, uid, recs);
    }
    if (d)
        closedir(d);
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
            int fd = cs_node_open_regular(dfd, de->d_name, true, &st);
            const char *container = depth ? strrchr(shown, '/') : NULL;
            if (fd >= 0)
                offer(l, fd, path, container ? container + 1 : NULL, 0, true);
        }
    }
    closedir(d);
}

int cs_node_discover(const struct cs_node_where *w, struct cs_node_found **out, int *cap,
                     struct cs_node_notes *notes)
{
    struct found_list l = {.v = out, .cap = cap, .notes = notes};
    if (notes)
        memset(notes, 0, sizeof *notes);
    read_registry(&l, w->registry);
    static const char *const dflt[] = {CS_NODE_DEFAULT_SCAN, NULL};
    const char *const *scan = w->scan[0] ? w->scan : dflt;
    for (int i = 0; !w->no_scan && i < CS_NODE_SCAN_MAX && scan[i]; i++)
        scan_dir(&l, AT_FDCWD, scan[i], scan[i], 0);
    free(l.own);
    return l.n;
}
