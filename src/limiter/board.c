/*
 * The node board (board.h): one file per user in a shared directory, read
 * and written with pread/pwrite, never mapped.
 *
 * Why not one shared, mapped file (layout version 1): a file every user
 * can write cannot say who wrote an entry, so nothing bounds a liar (it
 * could fill every entry, or pose as anyone), and a mapping of a file
 * others can truncate faults (SIGBUS) in every tenant that touches it. A
 * file per user makes the kernel's owner check the writer's identity and
 * the file's size the user's quota; pread/pwrite turn truncation and
 * replacement into short reads and rejected entries.
 *
 * The directory gets the broker's checks (docs/broker.md), adapted to a
 * directory every user must be able to write: opened O_DIRECTORY |
 * O_NOFOLLOW, owned by root or by us, and sticky when others can write it
 * (so nobody can remove or rename another user's file). Every file is
 * opened relative to that descriptor with O_NOFOLLOW (and O_NONBLOCK, so a
 * FIFO planted under a board name cannot block us).
 *
 * Pods (core/pod.h): where containers share a uid (every pod root, the
 * directory mounted into each), a uid's file would be one every pod can
 * lock, fill or truncate for all the others. So a process posts in its
 * pod's own file, `<base>.<uid>.<pod>` (its mount namespace, 16 hex
 * digits), and vouches for it with a POSIX read lock on byte
 * CS_BOARD_VOUCH_BYTE while it lives; the file's write lock is a POSIX
 * lock too, and one held by a stranger (not of our pod, or unseen) is
 * posted past instead of waited for. A reader reads a file whose vouch a
 * process of the named pod holds, and files vouched only by processes it
 * cannot see (a pod in another pid namespace: some pod, it cannot tell
 * which), without the per-uid limit; every other file (an older
 * library's, a fallback, one made to pass for a pod's) keeps the per-uid
 * limit, so a pod cannot crowd out another pod's file (docs/security.md,
 * "Kubernetes: every pod is root").
 *
 * Threads: a struct cs_board belongs to the watcher thread of one process
 * (watch.c); nothing here is shared between threads.
 */
#define _GNU_SOURCE
#include "limiter/board.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/io.h"
#include "core/log.h"
#include "core/path.h"
#include "core/pod.h"
#include "ledger/ledger.h"
#include "node/node.h"

#define SUBSYS "limiter"
#define CS_BOARD_RESCAN_NS 1000000000ll /* list the directory at most once a second */
#define CS_BOARD_SCAN_MAX 65536         /* directory entries looked at per listing */
#define CS_BOARD_POSTS 64               /* devices one process posts for */
#define FALLBACK "priorities of other tenants are unknown, NVML alone decides"
#define CS_BOARD_VOUCH_BYTE 1 /* POSIX read locks of the processes posting in a file */
#define STAMPS_LEN (CS_BOARD_ENTRIES * 8u) /* our file's stamps page, as mapped */
#define CS_BOARD_LOCK_TRIES 5           /* tries for the file lock of a claim ... */
#define CS_BOARD_LOCK_NAP_NS 50000l     /* ... napping 50, 100, 200, 400 us between */

/* One busy entry of another tenant, as a reader keeps it. */
struct seen {
    uint32_t uid, index;            /* the file's user, the entry's index */
    uint64_t suffix;                /* the file's name suffix (struct cs_board_peer) */
    struct cs_board_entry e;
};

struct cs_board {
    int dirfd;                      /* the checked board directory */
    char dir[PATH_MAX];             /* its path, for messages */
    char name[NAME_MAX + 1];        /* our file: <base>.<uid> */
    char base[NAME_MAX + 1];
    uint32_t uid;                   /* geteuid() at open: our files' owner */
    int fd;                         /* our file, read-write; -1: we do not post */
    dev_t own_dev;                  /* what `name` was when we opened it */
    ino_t own_ino;
    int mine[CS_BOARD_POSTS];       /* entry index per posted device, -1 none */
    /* Our file's stamps page, MAP_SHARED at a fixed address (NULL: not
     * mapped), the inode it maps and its SIGBUS guard. */
    uint64_t *stamps;
    dev_t stamps_dev;
    ino_t stamps_ino;
    struct cs_ledger_guard *stamps_guard;
    uint8_t mine_uuid[CS_BOARD_POSTS][16];
    int nmine;
    struct cs_board_entry file[CS_BOARD_ENTRIES]; /* scratch for whole-file reads */
    /* The users with a board file, listed at most every CS_BOARD_RESCAN_NS. */
    uint32_t users[CS_BOARD_MAX_USERS];
    uint64_t suffix[CS_BOARD_MAX_USERS]; /* 0: <base>.<uid>; else its pod's or
                                            fallback name
                                            <base>.<uid>.<suffix, 16 hex digits> */
    bool vouched[CS_BOARD_MAX_USERS];    /* a pod's file: not held to the per-uid limit */
    int nusers;
    int64_t listed_ns;
    bool listed;
    /* Busy entries of every user's file as of snap_now (snap_valid). */
    struct seen *snap;
    size_t nsnap, snap_cap;
    int64_t snap_now;
    bool snap_valid;
};

/* ---- entries and headers ---------------------------------------------- */

static uint32_t entry_check(const struct cs_board_entry *e)
{
    const uint8_t *p = (const uint8_t *)e;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < offsetof(struct cs_board_entry, check); i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static bool entry_intact(const struct cs_board_entry *e)
{
    return e->tenant > 1 && e->check == entry_check(e);
}

static void init_header(struct cs_board_header *h, uint32_t uid)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CS_BOARD_MAGIC, 8);
    h->version = CS_BOARD_VERSION;
    h->header_size = sizeof(struct cs_board_header);
    h->entry_size = sizeof(struct cs_board_entry);
    h->entries = CS_BOARD_ENTRIES;
    h->uid = uid;
}

static bool header_ok(const struct cs_board_header *h, uint32_t uid)
{
    struct cs_board_header want;
    init_header(&want, uid);
    return !memcmp(h, &want, offsetof(struct cs_board_header, reserved));
}

static off_t entry_offset(unsigned i)
{
    return (off_t)(sizeof(struct cs_board_header) + (size_t)i * sizeof(struct cs_board_entry));
}

/* ---- the directory ---------------------------------------------------- */

/* One warning for a refused board, naming what and why. */
#define refuse(fmt, ...) cs_warn(SUBSYS, "node board: " fmt "; " FALLBACK, __VA_ARGS__)

static void dir_unusable(const char *dir, int e)
{
    if (e == ELOOP)
        refuse("directory %s is a symbolic link: refused (whoever made the link would choose "
               "where tenants write); remove it, or point CUSHARE_BOARD at a directory owned "
               "by root with mode 1777", dir);
    else if (e == ENOTDIR)
        refuse("%s is not a directory: refused", dir);
    else
        cs_info(SUBSYS, "no node board in %s (%s): " FALLBACK, dir, strerror(e));
}

/* cs__node_dir_trust, with a warning that names the fix. */
static bool dir_trusted(const char *dir, const struct stat *st)
{
    int why = cs__node_dir_trust(st);
    if (why == -EPERM) {
        refuse("directory %s is owned by uid %u, neither root nor us: refused (its owner "
               "could remove or replace any board file); make it root's with mode 1777, as "
               "HAMi's /tmp/vgpulock, or point CUSHARE_BOARD elsewhere", dir,
               (unsigned)st->st_uid);
        return false;
    }
    if (why == -EACCES) {
        refuse("directory %s is writable by others without the sticky bit (mode %04o): "
               "refused (anyone could replace a board file); chmod +t it or point "
               "CUSHARE_BOARD elsewhere", dir, (unsigned)(st->st_mode & 07777));
        return false;
    }
    return true;
}

static int open_dir(const char *dir)
{
    int fd = cs__node_dir_open(dir);
    if (fd < 0) {
        dir_unusable(dir, -fd);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISDIR(st.st_mode) || !dir_trusted(dir, &st)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- our own file ----------------------------------------------------- */

/* The file's write lock (byte 0) among the processes posting in it: a
 * POSIX lock, so that the kernel names its holder. Never waited for. */
static bool take_lock(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_SETLK, &fl) == 0;
}

/* The write lock is held by a stranger: a process of another pod, one we
 * cannot see, or an OFD lock (pid -1), none of which posts in our pod's
 * file. Holding it must not keep us from posting. */
static bool lock_held_by_stranger(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK &&
           cs_pod_of(fl.l_pid) != cs_pod_self();
}

/* Our file as readers accept it: a regular file of the layout's size,
 * mode 0644, with our header. */
static bool own_whole(struct cs_board *b)
{
    struct stat st;
    struct cs_board_header h;
    return !fstat(b->fd, &st) && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644 &&
           st.st_size == CS_BOARD_SIZE && cs__pread_full(b->fd, &h, sizeof h, 0) &&
           header_ok(&h, b->uid);
}

/* Our file, damaged (truncated, garbled, a wrong mode) by us, root or a
 * crash halfway through creation: made whole again. A bad header means
 * nobody could read the entries either, so they are cleared with it. Runs
 * under the file lock. */
static bool repair_own(struct cs_board *b)
{
    struct stat st;
    struct cs_board_header h;
    if (fstat(b->fd, &st))
        return false;
    if ((st.st_mode & 07777) != 0644)
        fchmod(b->fd, 0644);
    if (own_whole(b))
        return true;
    init_header(&h, b->uid);
    b->nmine = 0;
    /* Cleared by writing zeros, never by truncating to 0: our stamps page
     * is mapped, and a store past the end would fault. */
    static const uint8_t zeros[CS_BOARD_STAMPS_OFF];
    return !ftruncate(b->fd, CS_BOARD_SIZE) && cs__pwrite_full(b->fd, zeros, sizeof zeros, 0) &&
           cs__pwrite_full(b->fd, &h, sizeof h, 0);
}

/* The file at our name must be a regular file we own. Another user's file
 * there was made to lock us out or to speak in our name. */
static bool own_trusted(struct cs_board *b, int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return false;
    if (!S_ISREG(st.st_mode) || st.st_uid != b->uid)
        return false; /* a squat: own_fallback says so */
    b->own_dev = st.st_dev;
    b->own_ino = st.st_ino;
    return true;
}

enum own_result { OWN_OK, OWN_READ_ONLY, OWN_REFUSED };

/* Our file cannot be opened for writing: refused when what is at our name
 * is not ours (a symlink, another user's file), else we only read. */
static enum own_result own_unwritable(struct cs_board *b, int e)
{
    struct stat st;
    if (e == ELOOP || (!fstatat(b->dirfd, b->name, &st, AT_SYMLINK_NOFOLLOW) &&
                       st.st_uid != b->uid))
        return OWN_REFUSED; /* a squat: own_fallback says so */
    cs_info(SUBSYS, "node board: cannot write %s/%s (%s): this process reads the board but "
            "posts nothing", b->dir, b->name, strerror(e));
    return OWN_READ_ONLY;
}

static enum own_result adopt_own(struct cs_board *b, int fd)
{
    b->fd = fd;
    if (take_lock(fd, F_WRLCK)) {
        repair_own(b);
        take_lock(fd, F_UNLCK);
    }
    /* Kept while we live; read_user never opens (and so never closes) a
     * second descriptor of this file, which would drop it. */
    cs_pod_vouch(fd, CS_BOARD_VOUCH_BYTE, F_RDLCK);
    return OWN_OK;
}

/* Another user made a file (or a link) at our name first, to lock us out
 * of priority coordination or to speak in our name: we post in a
 * fallback file of ours instead (readers find it by listing), and say so
 * loudly, since only root can remove the squat. */
static enum own_result own_fallback(struct cs_board *b)
{
    struct stat st;
    char plain[sizeof b->base + 16], used[sizeof b->name], squat[sizeof b->name];
    snprintf(plain, sizeof plain, "%s.%u", b->base, (unsigned)b->uid);
    snprintf(squat, sizeof squat, "%s", b->name); /* our pod's name, or the plain one */
    unsigned owner = fstatat(b->dirfd, squat, &st, AT_SYMLINK_NOFOLLOW) ? 0u
                                                                         : (unsigned)st.st_uid;
    int fd = cs__node_open_fallback(b->dirfd, plain, b->uid, used, sizeof used);
    if (fd >= 0 && !own_trusted(b, fd)) {
        close(fd);
        fd = -EPERM;
    }
    if (fd < 0) {
        refuse("%s/%s is not ours (owned by uid %u, or not a regular file) and no file of "
               "our own could be made beside it (%s); root: remove it", b->dir, squat, owner,
               strerror(-fd));
        return OWN_REFUSED;
    }
    snprintf(b->name, sizeof b->name, "%s", used);
    cs_warn(SUBSYS, "node board: %s/%s is not ours (owned by uid %u, or not a regular file): "
            "another user took our name; posting in %s instead (root: remove %s/%s)", b->dir,
            squat, owner, used, b->dir, squat);
    return adopt_own(b, fd);
}

static enum own_result open_own(struct cs_board *b)
{
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        fd = openat(b->dirfd, b->name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
            fd = openat(b->dirfd, b->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0644);
        if (fd < 0 && errno != ENOENT && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        enum own_result r = own_unwritable(b, errno);
        return r == OWN_REFUSED ? own_fallback(b) : r;
    }
    if (!own_trusted(b, fd)) {
        close(fd);
        return own_fallback(b);
    }
    /* Vouched for by us, or replaced when a stranger keeps us from it. */
    fd = cs_pod_claim(b->dirfd, b->name, fd, CS_BOARD_VOUCH_BYTE);
    if (fd < 0 || !own_trusted(b, fd)) {
        if (fd >= 0)
            close(fd);
        return own_fallback(b);
    }
    return adopt_own(b, fd);
}

/* Someone (root) replaced or removed our file: open the one at our name
 * now. False when we can no longer post. */
static bool own_still_ours(struct cs_board *b)
{
    struct stat st;
    if (!fstatat(b->dirfd, b->name, &st, AT_SYMLINK_NOFOLLOW) && st.st_dev == b->own_dev &&
        st.st_ino == b->own_ino)
        return true;
    close(b->fd);
    b->fd = -1;
    b->nmine = 0;
    return open_own(b) == OWN_OK;
}

/* ---- open / close ----------------------------------------------------- */

static bool split_path(struct cs_board *b, const char *path)
{
    const char *base;
    cs__path_dir(path, b->dir, sizeof b->dir, &base);
    uint64_t pod = cs_pod_self();
    int n = pod ? snprintf(b->name, sizeof b->name, "%s.%u.%016llx", base, (unsigned)b->uid,
                           (unsigned long long)pod)
                : snprintf(b->name, sizeof b->name, "%s.%u", base, (unsigned)b->uid);
    if (!*base || n < 0 || (size_t)n >= sizeof b->name) {
        cs_warn(SUBSYS, "node board path %s has no usable file name; " FALLBACK, path);
        return false;
    }
    snprintf(b->base, sizeof b->base, "%s", base);
    return true;
}

struct cs_board *cs__board_open(const char *path)
{
    if (!path)
        path = CS_BOARD_DEFAULT_PATH;
    struct cs_board *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->uid = (uint32_t)geteuid();
    b->fd = -1;
    b->dirfd = -1;
    if (!split_path(b, path) || (b->dirfd = open_dir(b->dir)) < 0 ||
        open_own(b) == OWN_REFUSED) {
        cs__board_close(b);
        return NULL;
    }
    return b;
}

void cs__board_close(struct cs_board *b)
{
    if (!b)
        return;
    if (b->stamps) {
        /* Launch threads may still store into the addresses handed out:
         * private zeros stay mapped there (one page, once per process
         * image) instead of a hole; the guard goes once nothing there can
         * fault. */
        mmap(b->stamps, STAMPS_LEN, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        cs__ledger_guard_remove(b->stamps_guard);
    }
    if (b->fd >= 0)
        close(b->fd);
    if (b->dirfd >= 0)
        close(b->dirfd);
    free(b->snap);
    free(b);
}

/* ---- posting ---------------------------------------------------------- */

static bool entry_is(const struct cs_board_entry *e, uint64_t tenant, const uint8_t uuid[16])
{
    return entry_intact(e) && e->tenant == tenant && !memcmp(e->uuid, uuid, 16);
}

/* An entry a claim may take: never used, or an intact one its tenant
 * stopped posting (stale) or dated far ahead. */
static bool entry_unused(const struct cs_board_entry *e, int64_t now)
{
    static const struct cs_board_entry zero;
    if (!memcmp(e, &zero, sizeof zero))
        return true;
    if (!entry_intact(e))
        return false;
    int64_t seen = (int64_t)e->seen_ns;
    return now - seen > CS_BOARD_STALE_NS || seen - now > CS_BOARD_FUTURE_NS;
}

/* The index of our (tenant, device) entry in our file, claiming one if we
 * have none; -1 when the file is full of live entries. Under the lock. A
 * garbled entry is taken only when nothing else is left: its owner
 * rewrites it in place without the lock (post_in_place), so a read that
 * met that write looks garbled too. */
static int find_or_claim(struct cs_board *b, int k, const struct cs_board_post *p, int64_t now)
{
    int i = b->mine[k];
    struct cs_board_entry e;
    if (i >= 0 && cs__pread_full(b->fd, &e, sizeof e, entry_offset((unsigned)i)) &&
        entry_is(&e, p->tenant, p->uuid))
        return i;
    if (!cs__pread_full(b->fd, b->file, sizeof b->file, entry_offset(0)))
        return -1;
    int spare = -1, garbled = -1;
    for (unsigned j = 0; j < CS_BOARD_ENTRIES; j++) {
        if (entry_is(&b->file[j], p->tenant, p->uuid))
            return b->mine[k] = (int)j;
        if (spare < 0 && entry_unused(&b->file[j], now))
            spare = (int)j;
        else if (garbled < 0 && !entry_intact(&b->file[j]))
            garbled = (int)j;
    }
    return b->mine[k] = spare >= 0 ? spare : garbled;
}

/* Our slot in mine[] for this device; nmine when we have none. */
static int find_mine(const struct cs_board *b, const uint8_t uuid[16])
{
    int k = 0;
    while (k < b->nmine && memcmp(b->mine_uuid[k], uuid, 16))
        k++;
    return k;
}

/* Our slot in mine[] for this device, made when new. -1 past
 * CS_BOARD_POSTS devices. */
static int post_slot(struct cs_board *b, const uint8_t uuid[16])
{
    int k = find_mine(b, uuid);
    if (k == b->nmine) {
        if (k == CS_BOARD_POSTS)
            return -1;
        memcpy(b->mine_uuid[k], uuid, 16);
        b->mine[k] = -1;
        b->nmine++;
    }
    return k;
}

static void fill_entry(struct cs_board_entry *e, const struct cs_board_post *p, int64_t now)
{
    memset(e, 0, sizeof *e);
    e->tenant = p->tenant;
    e->seen_ns = (uint64_t)now;
    e->busy_until_ns = p->busy ? (uint64_t)(now + CS_BOARD_BUSY_HOLD_NS) : 0;
    memcpy(e->uuid, p->uuid, 16);
    e->priority = p->priority;
    e->policy = p->policy;
    e->sm_limit = p->sm_limit;
    e->share_ppm = p->share_ppm;
    e->flags = (p->starved ? CS_BOARD_F_STARVED : 0u) | (p->paced ? CS_BOARD_F_PACED : 0u) |
               (p->held ? CS_BOARD_F_HELD : 0u) | (p->filling ? CS_BOARD_F_FILLING : 0u);
    e->check = entry_check(e);
}

/* The first mapping of our file's stamps page, with its SIGBUS guard;
 * false (nothing mapped) without a guard: a store into a shared page that
 * a truncation could fault would kill the application. */
static bool map_stamps_first(struct cs_board *b)
{
    void *m = mmap(NULL, STAMPS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd,
                   CS_BOARD_STAMPS_OFF);
    if (m == MAP_FAILED) {
        cs_warn_capped(1, SUBSYS, "node board: cannot map the launch stamps of %s/%s (%s): "
                       "lower-priority tenants will not yield to this one's activity", b->dir,
                       b->name, strerror(errno));
        return false;
    }
    char msg[PATH_MAX + NAME_MAX + 200];
    snprintf(msg, sizeof msg, "cushare: %s: warning: node board %s/%s was truncated while in "
             "use: this tenant's launch times are published again at its next post", SUBSYS,
             b->dir, b->name);
    b->stamps_guard = cs__ledger_guard_add_plain(m, STAMPS_LEN, msg);
    if (!b->stamps_guard) {
        munmap(m, STAMPS_LEN);
        cs_warn_capped(1, SUBSYS, "node board: no SIGBUS guard left for the launch stamps of "
                       "%s/%s: lower-priority tenants will not yield to this one's activity",
                       b->dir, b->name);
        return false;
    }
    b->stamps = m;
    return true;
}

/* Maps our file's stamps page: the first time, or the file now at our
 * name over the old one, or again after a truncation turned it into
 * private zeros. Later mappings go to the same address, so the pointers
 * handed out stay valid, and keep the same guard registered throughout. */
static void map_stamps(struct cs_board *b)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || CS_BOARD_STAMPS_OFF % (unsigned long)page)
        return; /* pages larger than the layout's alignment: no stamps */
    if (!b->stamps) {
        if (map_stamps_first(b)) {
            b->stamps_dev = b->own_dev;
            b->stamps_ino = b->own_ino;
        }
        return;
    }
    bool replaced = cs__ledger_guard_replaced(b->stamps_guard);
    bool moved = b->stamps_dev != b->own_dev || b->stamps_ino != b->own_ino;
    /* Intact; or a fault is being handled right now: the next post. */
    if (!replaced && (!moved || cs__ledger_guard_lost(b->stamps_guard)))
        return;
    void *m = mmap(b->stamps, STAMPS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b->fd,
                   CS_BOARD_STAMPS_OFF);
    if (m == MAP_FAILED) {
        /* A failed MAP_FIXED may have unmapped the range: zeros again. */
        mmap(b->stamps, STAMPS_LEN, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        cs_warn_capped(1, SUBSYS, "node board: cannot map the launch stamps of %s/%s again "
                       "(%s): lower-priority tenants will not yield to this one's activity",
                       b->dir, b->name, strerror(errno));
        return;
    }
    if (replaced)
        cs__ledger_guard_rearm(b->stamps_guard);
    b->stamps_dev = b->own_dev;
    b->stamps_ino = b->own_ino;
}

uint64_t *cs__board_stamp(struct cs_board *b, const uint8_t uuid[16])
{
    if (!b || !b->stamps || b->fd < 0)
        return NULL;
    int k = find_mine(b, uuid);
    return k < b->nmine && b->mine[k] >= 0 ? &b->stamps[b->mine[k]] : NULL;
}

/* Rewrites the entry we already hold, without the file's lock: nobody
 * else writes an entry of a live tenant (a claim takes unused ones, and a
 * garbled one only when none is left), and readers reject a torn one by
 * its check. False when the file or the entry needs the locked path
 * (repair, claim). */
static bool post_in_place(struct cs_board *b, const struct cs_board_post *p, int64_t now)
{
    int k = find_mine(b, p->uuid);
    struct cs_board_entry e;
    if (k == b->nmine || b->mine[k] < 0 || !own_whole(b) ||
        !cs__pread_full(b->fd, &e, sizeof e, entry_offset((unsigned)b->mine[k])) ||
        !entry_is(&e, p->tenant, p->uuid))
        return false;
    fill_entry(&e, p, now);
    return cs__pwrite_full(b->fd, &e, sizeof e, entry_offset((unsigned)b->mine[k]));
}

/* The file's write lock for a claim or a repair. Other processes of our
 * pod hold it for a few system calls at a time, so we try again a few
 * times over most of a millisecond (posting ticks of tenants started
 * together keep their phase, and a lone try could lose every tick); a
 * stranger's lock is posted past (take_lock). *locked says whether we
 * hold it. False: still busy, post next tick. */
static bool lock_for_claim(struct cs_board *b, bool *locked)
{
    for (int attempt = 0;; attempt++) {
        if ((*locked = take_lock(b->fd, F_WRLCK)) || lock_held_by_stranger(b->fd))
            return true;
        if (attempt + 1 == CS_BOARD_LOCK_TRIES)
            return false;
        struct timespec ts = {0, CS_BOARD_LOCK_NAP_NS << attempt};
        nanosleep(&ts, NULL);
    }
}

enum cs_board_posted cs__board_post(struct cs_board *b, const struct cs_board_post *p,
                                    int64_t now)
{
    if (!b || b->fd < 0 || p->tenant <= 1)
        return CS_BOARD_POST_NONE;
    b->snap_valid = false;
    if (!own_still_ours(b))
        return CS_BOARD_POST_NONE;
    if (post_in_place(b, p, now)) {
        map_stamps(b);
        return CS_BOARD_POSTED;
    }
    bool locked;
    if (!lock_for_claim(b, &locked))
        return CS_BOARD_POST_BUSY;
    int k = repair_own(b) ? post_slot(b, p->uuid) : -1;
    int i = k >= 0 ? find_or_claim(b, k, p, now) : -1;
    if (i >= 0) {
        struct cs_board_entry e;
        fill_entry(&e, p, now);
        cs__pwrite_full(b->fd, &e, sizeof e, entry_offset((unsigned)i));
    }
    if (locked)
        take_lock(b->fd, F_UNLCK);
    if (i >= 0)
        map_stamps(b);
    if (k >= 0 && i < 0)
        cs_warn_capped(1, SUBSYS, "node board: our file %s/%s is full (%u live entries of "
                       "this user's tenants)", b->dir, b->name, CS_BOARD_ENTRIES);
    return i >= 0 ? CS_BOARD_POSTED : k >= 0 ? CS_BOARD_POST_FULL : CS_BOARD_POST_NONE;
}

/* ---- reading ---------------------------------------------------------- */

/* "<base>.<uid>" with a canonical decimal uid (*suffix 0), or its
 * fallback "<base>.<uid>.<16 hex digits>" (*suffix their value). */
static bool parse_user_file(const struct cs_board *b, const char *name, uint32_t *uid,
                            uint64_t *suffix)
{
    if (!cs_node_user_file_name(name, b->base, uid))
        return false;
    const char *dot = strchr(name + strlen(b->base) + 1, '.');
    *suffix = dot ? strtoull(dot + 1, NULL, 16) : 0;
    return true;
}

static void name_of(const struct cs_board *b, uint32_t uid, uint64_t suffix, char *out,
                    size_t n);

static void user_file_name(const struct cs_board *b, int u, char *out, size_t n)
{
    name_of(b, b->users[u], b->suffix[u], out, n);
}

/* Files of uid listed under the per-uid limit (not vouched for by a pod). */
static int files_of(const struct cs_board *b, uint32_t uid)
{
    int n = 0;
    for (int u = 0; u < b->nusers; u++)
        n += b->users[u] == uid && !b->vouched[u];
    return n;
}

/* Who vouches for the file `name` that claims to be pod `suffix`'s (0: a
 * plain name, nobody's). */
static enum cs_vouch file_vouch(const struct cs_board *b, const char *name, uint64_t suffix)
{
    if (!suffix)
        return CS_VOUCH_NONE;
    int fd = openat(b->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return CS_VOUCH_NONE;
    enum cs_vouch v = cs_pod_vouch_state(fd, CS_BOARD_VOUCH_BYTE, suffix);
    close(fd);
    return v;
}

/* Lists the users' board files; ours first, so that however many users
 * there are, we always see the tenants of our own user. A file named for
 * a uid that does not own it is a squat and is not listed (nor counted:
 * another user cannot use up the list with names), and a user has at
 * most CS_REG_FILES_PER_USER files listed. */
static void list_users(struct cs_board *b)
{
    b->nusers = 0;
    uint32_t own_uid;
    b->users[0] = b->uid;
    if (!parse_user_file(b, b->name, &own_uid, &b->suffix[0]))
        b->suffix[0] = 0;
    b->vouched[0] = true;
    b->nusers = 1;
    int fd = openat(b->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    bool more = false;
    struct dirent *de;
    for (int seen = 0; (de = readdir(d)) && seen < CS_BOARD_SCAN_MAX; seen++) {
        uint32_t uid;
        uint64_t suffix;
        struct stat st;
        if (!parse_user_file(b, de->d_name, &uid, &suffix) ||
            (uid == b->uid && suffix == b->suffix[0]) ||
            fstatat(b->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || st.st_uid != uid)
            continue;
        enum cs_vouch v = file_vouch(b, de->d_name, suffix);
        bool pods = v == CS_VOUCH_POD || v == CS_VOUCH_UNSEEN;
        if (!pods && files_of(b, uid) >= CS_REG_FILES_PER_USER)
            continue; /* over the uid's few: a fallback, or made to pass for a pod's */
        if (b->nusers == CS_BOARD_MAX_USERS) {
            more = true;
            break;
        }
        b->suffix[b->nusers] = suffix;
        b->vouched[b->nusers] = pods;
        b->users[b->nusers++] = uid;
    }
    closedir(d);
    if (more)
        cs_warn_capped(1, SUBSYS, "node board: more than %d users have board files in %s; "
                       "the others are not read", CS_BOARD_MAX_USERS, b->dir);
}

/* Reads one user's file into b->file. The file must be what only that
 * user can have written: a regular file it owns, that nobody else can
 * write, of the exact size, with its uid in the header. */
static void name_of(const struct cs_board *b, uint32_t uid, uint64_t suffix, char *out, size_t n)
{
    if (suffix)
        snprintf(out, n, "%s.%u.%016llx", b->base, (unsigned)uid, (unsigned long long)suffix);
    else
        snprintf(out, n, "%s.%u", b->base, (unsigned)uid);
}

/* Whether `name` is our own file: it must be read through our descriptor,
 * since closing a second one would drop our vouch (a POSIX lock). Unless
 * the name names another file now (replaced): that is what the others
 * read. */
static bool is_own(const struct cs_board *b, const char *name)
{
    struct stat at;
    return b->fd >= 0 && !fstatat(b->dirfd, name, &at, AT_SYMLINK_NOFOLLOW) &&
           at.st_dev == b->own_dev && at.st_ino == b->own_ino;
}

/* Opens another's file `name` of user uid for reading, checked: a regular
 * file of uid's, writable by nobody else, of the layout's size and with
 * its header. -1 when it fails any of that. */
static int open_checked(const struct cs_board *b, const char *name, uint32_t uid)
{
    int fd = openat(b->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    struct cs_board_header h;
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == uid && !(st.st_mode & 022) &&
        st.st_size == CS_BOARD_SIZE && cs__pread_full(fd, &h, sizeof h, 0) && header_ok(&h, uid))
        return fd;
    close(fd);
    return -1;
}

static bool read_user(struct cs_board *b, int u)
{
    uint32_t uid = b->users[u];
    char name[sizeof b->base + 40];
    user_file_name(b, u, name, sizeof name);
    bool own = u == 0 && is_own(b, name);
    struct stat st;
    struct cs_board_header h;
    int fd = own ? b->fd : open_checked(b, name, uid);
    if (fd < 0)
        return false;
    bool ok = !own || (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == uid &&
                       !(st.st_mode & 022) && st.st_size == CS_BOARD_SIZE &&
                       cs__pread_full(fd, &h, sizeof h, 0) && header_ok(&h, uid));
    ok = ok && cs__pread_full(fd, b->file, sizeof b->file, entry_offset(0));
    if (!own)
        close(fd);
    return ok;
}

int cs__board_stamps_fd(struct cs_board *b, const struct cs_board_peer *p,
                        const uint64_t **own)
{
    *own = NULL;
    if (!b || p->index >= CS_BOARD_ENTRIES)
        return -1;
    char name[sizeof b->base + 40];
    name_of(b, p->uid, p->suffix, name, sizeof name);
    if (p->uid == b->uid && is_own(b, name)) {
        *own = b->stamps;
        return -1;
    }
    return open_checked(b, name, p->uid);
}

int64_t cs__board_read_stamp(int fd, const uint64_t *own, uint32_t index, int64_t now)
{
    uint64_t v = 0;
    if (index >= CS_BOARD_ENTRIES)
        return 0;
    if (own)
        v = __atomic_load_n(&own[index], __ATOMIC_RELAXED);
    else if (fd < 0 || !cs__pread_full(fd, &v, sizeof v, CS_BOARD_STAMPS_OFF + (off_t)index * 8))
        return 0;
    if (v > (uint64_t)INT64_MAX || (int64_t)v - now > CS_BOARD_FUTURE_NS)
        return 0;
    return (int64_t)v;
}

/* When the entry counts as busy at `now`: its timestamps are clamped to
 * what an honest writer could have posted (seen no later than now, busy
 * no longer than the hold after it was seen). */
static bool entry_busy(const struct cs_board_entry *e, int64_t now)
{
    int64_t seen = (int64_t)e->seen_ns;
    if (seen < 0 || seen - now > CS_BOARD_FUTURE_NS)
        return false;
    if (seen > now)
        seen = now;
    int64_t until = (int64_t)(e->busy_until_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX
                                                                      : e->busy_until_ns);
    if (until > seen + CS_BOARD_BUSY_HOLD_NS)
        until = seen + CS_BOARD_BUSY_HOLD_NS;
    bool wants = e->share_ppm >= CS_BOARD_BUSY_PPM || (e->flags & CS_BOARD_F_HELD);
    return until > now && wants && e->share_ppm <= 1000000 && e->sm_limit <= 100;
}

static bool snap_push(struct cs_board *b, int u, uint32_t index, const struct cs_board_entry *e)
{
    if (b->nsnap == b->snap_cap) {
        size_t cap = b->snap_cap ? 2 * b->snap_cap : 64;
        struct seen *s = realloc(b->snap, cap * sizeof *s);
        if (!s)
            return false;
        b->snap = s;
        b->snap_cap = cap;
    }
    b->snap[b->nsnap++] = (struct seen){.uid = b->users[u], .index = index,
                                        .suffix = b->suffix[u], .e = *e};
    return true;
}

static void refresh(struct cs_board *b, int64_t now)
{
    if (!b->listed || now - b->listed_ns >= CS_BOARD_RESCAN_NS || now < b->listed_ns) {
        list_users(b);
        b->listed = true;
        b->listed_ns = now;
    }
    b->nsnap = 0;
    for (int u = 0; u < b->nusers; u++) {
        if (!read_user(b, u))
            continue;
        for (unsigned j = 0; j < CS_BOARD_ENTRIES; j++)
            if (entry_intact(&b->file[j]) && entry_busy(&b->file[j], now))
                snap_push(b, u, j, &b->file[j]);
    }
    b->snap_now = now;
    b->snap_valid = true;
}

static uint32_t clamp_ppm(uint64_t v)
{
    return v > 1000000 ? 1000000 : (uint32_t)v;
}

/* A starved claim as the writer's own rule states it: a limited tenant
 * under 97 % of its limit. Its fulfilment (share / limit) in ppm. */
static bool starved_claim(const struct cs_board_entry *e, uint32_t *fulfil_ppm)
{
    if (!(e->flags & CS_BOARD_F_STARVED) || e->sm_limit < 1 || e->sm_limit > 99)
        return false;
    uint64_t f = (uint64_t)e->share_ppm * 100 / e->sm_limit;
    if (f >= 970000)
        return false;
    *fulfil_ppm = (uint32_t)f;
    return true;
}

void cs__board_view(struct cs_board *b, uint64_t self, const uint8_t uuid[16],
                    int32_t priority, int64_t now, struct cs_board_view *out)
{
    memset(out, 0, sizeof *out);
    out->starved_fulfil_ppm = 1000000;
    if (!b)
        return;
    if (!b->snap_valid || b->snap_now != now)
        refresh(b, now);
    uint64_t lower = 0, busy = 0;
    for (size_t i = 0; i < b->nsnap; i++) {
        const struct cs_board_entry *e = &b->snap[i].e;
        if ((b->snap[i].uid == b->uid && e->tenant == self) || memcmp(e->uuid, uuid, 16))
            continue;
        busy += e->share_ppm;
        if (out->npeers < CS_BOARD_VIEW_PEERS)
            out->peers[out->npeers++] = (struct cs_board_peer){
                .sm_limit = e->sm_limit <= 99 ? e->sm_limit : 0,
                .share_ppm = e->share_ppm > 1000000 ? 1000000 : e->share_ppm,
                .priority = e->priority, .held = (e->flags & CS_BOARD_F_HELD) != 0,
                .filling = (e->flags & CS_BOARD_F_FILLING) != 0, .uid = b->snap[i].uid,
                .index = b->snap[i].index, .suffix = b->snap[i].suffix};
        if ((e->flags & CS_BOARD_F_PACED) && e->sm_limit >= 1 && e->sm_limit <= 99) {
            if (out->nmembers < CS_BOARD_WINDOW_MEMBERS)
                out->members[out->nmembers] = (struct cs_board_member){
                    .tenant = e->tenant, .uid = b->snap[i].uid, .sm_limit = e->sm_limit};
            out->nmembers++;
        }
        if (e->priority > priority) {
            out->busy_lower++;
            lower += e->share_ppm;
            continue;
        }
        out->busy_higher_or_equal++;
        uint32_t f;
        if (starved_claim(e, &f) && f < out->starved_fulfil_ppm) {
            out->starved_fulfil_ppm = f;
            out->starved_limit = e->sm_limit;
        }
    }
    out->lower_share_ppm = clamp_ppm(lower);
    out->busy_share_ppm = clamp_ppm(busy);
}
