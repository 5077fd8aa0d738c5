/*
 * Ledger file lifecycle: create exactly once, validate, map, re-open after
 * fork, close. Slots live in slot.c, the counters a charge moves in counters.c.
 *
 * Creation never takes a lock. The creator writes the whole file (header,
 * zeroed slots, full length) into an unnamed temporary in the target
 * directory and links it at the path; link(2) is atomic and fails with
 * EEXIST for everybody but the first, who then open the winner's file. So a
 * file at the path is always complete, and a creator killed at any point
 * leaves either nothing or a complete file there. Without O_TMPFILE (old
 * kernels, some filesystems) a uniquely named temporary plays the same role;
 * a creator killed before unlinking it leaves that temporary behind (never
 * at the path).
 *
 * A file that is not ours (foreign, truncated, another layout version) is
 * refused with -EPROTO and one message naming the file and the fix; it is
 * never written to, extended or truncated. A tenant also refuses a file
 * somebody else could have prepared or could change under it: a symlink
 * (-ELOOP), another user's file or one others can write (-EPERM), unless
 * CUSHARE_LEDGER_TRUST=directory says the directory is the tenant's own
 * (docs/ledger.md, "Ownership").
 *
 * Every mapping is registered with the SIGBUS guard (guard.c), so a file
 * truncated under us fails closed instead of killing the host program.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"

#define SUBSYS "ledger"

#define FIX_HINT                                                          \
    "remove it or point CUDA_DEVICE_MEMORY_SHARED_CACHE at a fresh path; " \
    "another cushare version may be using it"

struct cs_ledger_test_hooks cs__ledger_test_hooks;

static const char *const category_names[] = {
#define CS_X_NAME(id, name) [CS_MEM_##id] = name,
    CS_MEM_CATEGORIES(CS_X_NAME)
#undef CS_X_NAME
};

static const char *const identity_names[] = {
#define CS_X_NAME(id, name) [CS_IDENTITY_##id] = name,
    CS_IDENTITY_TIERS(CS_X_NAME)
#undef CS_X_NAME
};

const char *cs__ledger_category_name(int cat)
{
    return cat >= 0 && cat < CS_MEM_NCATEGORIES ? category_names[cat] : "?";
}

const char *cs__ledger_identity_name(uint32_t tier)
{
    return tier < CS_IDENTITY_NTIERS ? identity_names[tier] : "?";
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void build_header(struct cs_ledger_header *h, const struct cs_ledger_params *p)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CS_LEDGER_MAGIC, sizeof h->magic);
    h->version = CS_LEDGER_VERSION;
    h->header_size = CS_LEDGER_HEADER_SIZE;
    h->slot_size = sizeof(struct cs_ledger_slot);
    h->slot_count = CS_LEDGER_SLOTS;
    h->device_count = p->device_count;
    h->policy = p->policy;
    h->priority = p->priority;
    h->created_ns = realtime_ns();
    h->creator_pid = (int32_t)getpid();
    for (uint32_t i = 0; i < CS_MAX_DEVICES; i++) {
        h->limit[i] = p->limit[i];
        h->sm_limit[i] = p->sm_limit[i];
    }
}

/* Gives the temporary its full length (blocks allocated where the
 * filesystem can, so a full disk fails here and not as SIGBUS in the host
 * program later), its mode and the header. */
static int fill_temp(int fd, const struct cs_ledger_header *h, const struct cs_ledger_params *p,
                     const char *path)
{
    /* In a directory private to the tenant, every user of its container
     * may join (as HAMi's own cache files allow); otherwise 0600, less
     * what the umask takes away. */
    if (p->trust == CS_LEDGER_TRUST_DIRECTORY && fchmod(fd, 0666) != 0) {
        int e = errno;
        cs_err(SUBSYS, "cannot create ledger %s: setting its mode: %s", path, strerror(e));
        return -e;
    }
    if (ftruncate(fd, (off_t)CS_LEDGER_FILE_SIZE) != 0) {
        int e = errno;
        cs_err(SUBSYS, "cannot create ledger %s: sizing the new file: %s", path, strerror(e));
        return -e;
    }
    int r = posix_fallocate(fd, 0, (off_t)CS_LEDGER_FILE_SIZE);
    if (r == ENOSPC || r == EDQUOT || r == EFBIG) {
        cs_err(SUBSYS, "cannot create ledger %s: %s", path, strerror(r));
        return -r;
    }
    const char *b = (const char *)h;
    size_t off = 0;
    while (off < sizeof *h) {
        ssize_t n = pwrite(fd, b + off, sizeof *h - off, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            cs_err(SUBSYS, "cannot create ledger %s: writing the header: %s", path, strerror(e));
            return -e;
        }
        off += (size_t)n;
    }
    return 0;
}

static int dir_error(const char *path, const char *dir, int e)
{
    if (e == ENOENT || e == ENOTDIR)
        cs_err(SUBSYS, "cannot create ledger %s: directory %s does not exist "
               "(create it or point CUDA_DEVICE_MEMORY_SHARED_CACHE elsewhere)", path, dir);
    else
        cs_err(SUBSYS, "cannot create ledger %s in directory %s: %s", path, dir, strerror(e));
    return -e;
}

/* Named-temporary fallback. Returns 0 with *fd_out set when our file is now
 * at the path, -EEXIST when another creator won, else -errno (logged). */
static int create_named(const char *path, const char *dir, const char *base,
                        const struct cs_ledger_header *h, const struct cs_ledger_params *p,
                        int *fd_out)
{
    static unsigned counter;
    char tmp[PATH_MAX];
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) {
        unsigned n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        int len = snprintf(tmp, sizeof tmp, "%s/.%s.%d.%u.tmp", dir, base, (int)getpid(), n);
        if (len < 0 || (size_t)len >= sizeof tmp) {
            cs_err(SUBSYS, "cannot create ledger %s: path too long", path);
            return -ENAMETOOLONG;
        }
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST)
            return dir_error(path, dir, errno);
    }
    if (fd < 0) {
        cs_err(SUBSYS, "cannot create ledger %s: no free temporary name in %s", path, dir);
        return -EAGAIN;
    }
    int r = fill_temp(fd, h, p, path);
    if (r == 0) {
        if (cs__ledger_test_hooks.before_link)
            cs__ledger_test_hooks.before_link();
        r = link(tmp, path) == 0 ? 0 : -errno;
    }
    unlink(tmp);
    if (r == 0) {
        *fd_out = fd;
        return 0;
    }
    close(fd);
    if (r != -EEXIST)
        cs_err(SUBSYS, "cannot create ledger %s: %s", path, strerror(-r));
    return r;
}

/* Builds the file in an unnamed temporary and links it at `path`. Returns 0
 * with *fd_out (read-write, O_CLOEXEC) when we created it, -EEXIST when
 * another process won the race, else -errno (logged). */
static int create_file(const char *path, const struct cs_ledger_params *p, int *fd_out)
{
    char dir[PATH_MAX];
    const char *base;
    cs__path_dir(path, dir, sizeof dir, &base);

    struct cs_ledger_header h;
    build_header(&h, p);

    if (!cs__ledger_test_hooks.force_named_temp) {
        int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            int e = errno;
            /* Kernels or filesystems without O_TMPFILE: named fallback. */
            if (e != EOPNOTSUPP && e != EISDIR && e != EINVAL)
                return dir_error(path, dir, e);
        } else {
            int r = fill_temp(fd, &h, p, path);
            if (r) {
                close(fd);
                return r;
            }
            if (cs__ledger_test_hooks.before_link)
                cs__ledger_test_hooks.before_link();
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
            if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) {
                *fd_out = fd;
                return 0;
            }
            int e = errno;
            close(fd);
            if (e == EEXIST)
                return -EEXIST;
            /* ENOENT: no /proc here; try the named way. */
            if (e != ENOENT) {
                cs_err(SUBSYS, "cannot create ledger %s: %s", path, strerror(e));
                return -e;
            }
        }
    }
    return create_named(path, dir, base, &h, p, fd_out);
}

#define TRUST_HINT                                                              \
    "remove it, or point CUDA_DEVICE_MEMORY_SHARED_CACHE at a path of your own; "  \
    "a directory private to this tenant (such as HAMi's per-container mount) can " \
    "be trusted with CUSHARE_LEDGER_TRUST=directory"

/* A tenant's ledger holds its budget: whoever can write the file can
 * raise it, and whoever prepared it chose it. So it must be ours, and
 * nobody else may write it. -EPERM (logged) otherwise. */
static int check_owner(const struct stat *st, const char *path)
{
    if (st->st_uid != geteuid()) {
        cs_err(SUBSYS, "ledger %s is owned by uid %u, not by this process's uid %u: refused "
               "(its owner could change this tenant's limits); " TRUST_HINT, path,
               (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st->st_mode & 022) {
        cs_err(SUBSYS, "ledger %s is writable by group or others (mode %04o): refused "
               "(they could change this tenant's limits); chmod go-w it, or " TRUST_HINT,
               path, (unsigned)(st->st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

/* Checks an open file against this build's layout without writing to it,
 * and, for a tenant that trusts only its own files, who owns it. Returns
 * 0, -EPROTO (logged: what is wrong and the fix), -EPERM or -errno. */
static int validate(int fd, const char *path, bool check_ownership)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        cs_err(SUBSYS, "cannot stat ledger %s: %s", path, strerror(e));
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        cs_err(SUBSYS, "ledger %s is not a regular file; %s", path, FIX_HINT);
        return -EPROTO;
    }
    if (check_ownership) {
        int r = check_owner(&st, path);
        if (r)
            return r;
    }
    struct cs_ledger_header h;
    memset(&h, 0, sizeof h);
    ssize_t n;
    do
        n = pread(fd, &h, sizeof h, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        int e = errno;
        cs_err(SUBSYS, "cannot read ledger %s: %s", path, strerror(e));
        return -e;
    }
    const uint64_t want = CS_LEDGER_FILE_SIZE;
    const uint64_t have = (uint64_t)st.st_size;
    if ((size_t)n < sizeof h.magic + sizeof h.version) {
        cs_err(SUBSYS, "ledger %s is truncated: size %" PRIu64 " bytes, expected %" PRIu64
               "; %s", path, have, want, FIX_HINT);
        return -EPROTO;
    }
    if (memcmp(h.magic, CS_LEDGER_MAGIC, sizeof h.magic) != 0) {
        cs_err(SUBSYS, "ledger %s is a foreign file: bad magic (not a cushare ledger; "
               "a HAMi-core cache file?); %s", path, FIX_HINT);
        return -EPROTO;
    }
    if (h.version != CS_LEDGER_VERSION) {
        cs_err(SUBSYS, "ledger %s has %s layout version %" PRIu32 ", this build understands %u; %s",
               path, h.version > CS_LEDGER_VERSION ? "newer" : "older", h.version,
               CS_LEDGER_VERSION, FIX_HINT);
        return -EPROTO;
    }
    if ((size_t)n < sizeof h) {
        cs_err(SUBSYS, "ledger %s is truncated: size %" PRIu64 " bytes, expected %" PRIu64
               "; %s", path, have, want, FIX_HINT);
        return -EPROTO;
    }
    if (h.header_size != CS_LEDGER_HEADER_SIZE || h.slot_size != sizeof(struct cs_ledger_slot) ||
        h.slot_count != CS_LEDGER_SLOTS || h.device_count > CS_MAX_DEVICES) {
        cs_err(SUBSYS, "ledger %s is corrupt: header_size %" PRIu32 ", slot_size %" PRIu32
               ", slot_count %" PRIu32 ", device_count %" PRIu32 " where layout version %u "
               "has %u, %zu, %u and at most %u; %s", path, h.header_size, h.slot_size,
               h.slot_count, h.device_count, CS_LEDGER_VERSION, CS_LEDGER_HEADER_SIZE,
               sizeof(struct cs_ledger_slot), CS_LEDGER_SLOTS, CS_MAX_DEVICES, FIX_HINT);
        return -EPROTO;
    }
    if (have < want) {
        cs_err(SUBSYS, "ledger %s is truncated: size %" PRIu64 " bytes, expected %" PRIu64
               "; %s", path, have, want, FIX_HINT);
        return -EPROTO;
    }
    return 0;
}

/* The creator's settings win; say so when ours differ. */
static void warn_param_mismatch(const struct cs_ledger *l, const struct cs_ledger_params *p)
{
    const struct cs_ledger_header *h = l->hdr;
    for (uint32_t i = 0; i < CS_MAX_DEVICES; i++) {
        if (h->limit[i] != p->limit[i])
            cs_warn(SUBSYS, "ledger %s: limit for device %" PRIu32 " is %" PRIu64
                    " bytes (set by its creator); this process asked for %" PRIu64
                    "; using the ledger's", l->path, i, h->limit[i], p->limit[i]);
        if (h->sm_limit[i] != p->sm_limit[i])
            cs_warn(SUBSYS, "ledger %s: sm limit for device %" PRIu32 " is %" PRIu32
                    "%% (set by its creator); this process asked for %" PRIu32
                    "%%; using the ledger's", l->path, i, h->sm_limit[i], p->sm_limit[i]);
    }
    if (h->policy != p->policy)
        cs_warn(SUBSYS, "ledger %s: utilization policy is %" PRIu32 " (set by its creator); "
                "this process asked for %" PRIu32 "; using the ledger's", l->path, h->policy,
                p->policy);
}

/* The slice file is the authority over a slice's limits; the ledger is a
 * file the tenant can write (it created it, or edits its header). So the
 * slice's values are what this process enforces, and they are written
 * back over a header that says otherwise, for monitors to see. */
static void pin_limits(struct cs_ledger *l, const struct cs_ledger_params *p)
{
    struct cs_ledger_header *h = l->hdr;
    l->pinned = true;
    int differ = -1;
    uint64_t had_limit = 0;
    uint32_t had_sm = 0;
    for (uint32_t i = 0; i < CS_MAX_DEVICES; i++) {
        l->pinned_limit[i] = p->limit[i];
        l->pinned_sm_limit[i] = p->sm_limit[i];
        uint64_t lim = __atomic_exchange_n(&h->limit[i], p->limit[i], __ATOMIC_RELAXED);
        uint32_t sm = __atomic_exchange_n(&h->sm_limit[i], p->sm_limit[i], __ATOMIC_RELAXED);
        if (differ < 0 && (lim != p->limit[i] || sm != p->sm_limit[i])) {
            differ = (int)i;
            had_limit = lim;
            had_sm = sm;
        }
    }
    l->pinned_policy = p->policy;
    uint32_t had_policy = __atomic_exchange_n(&h->policy, p->policy, __ATOMIC_RELAXED);
    if (differ >= 0)
        cs_warn(SUBSYS, "ledger %s said limit %" PRIu64 " bytes, sm %" PRIu32 "%% for device %d "
                "(and perhaps others); the slice file sets %" PRIu64 " bytes, %" PRIu32 "%%: the "
                "slice file's limits apply and were written back (docs/security.md, "
                "\"Limits\")", l->path, had_limit, had_sm, differ, p->limit[differ],
                p->sm_limit[differ]);
    else if (had_policy != p->policy)
        cs_warn(SUBSYS, "ledger %s had another utilization policy than the slice file's: "
                "the slice file's applies", l->path);
}

uint32_t cs__ledger_sm_limit(const struct cs_ledger *l, int dev)
{
    if (dev < 0 || dev >= CS_MAX_DEVICES)
        return 0;
    if (l->pinned)
        return l->pinned_sm_limit[dev];
    return l->hdr ? __atomic_load_n(&l->hdr->sm_limit[dev], __ATOMIC_RELAXED) : 0;
}

uint32_t cs__ledger_policy(const struct cs_ledger *l)
{
    if (l->pinned)
        return l->pinned_policy;
    return l->hdr ? __atomic_load_n(&l->hdr->policy, __ATOMIC_RELAXED) : CS_POLICY_DISABLE;
}

/* Whether `l` (already holding its tenant/trust) accepts only its own files. */
static bool own_only(const struct cs_ledger *l)
{
    return l->tenant && l->trust != CS_LEDGER_TRUST_DIRECTORY;
}

/* Validates the open ledger `fd`, maps it and guards the mapping (guard.c);
 * on failure closes fd. */
static int validate_and_map(int fd, const struct cs_ledger *l, const char *path, void **map_out,
                            struct cs_ledger_guard **guard_out)
{
    int r = validate(fd, path, own_only(l));
    if (r) {
        close(fd);
        return r;
    }
    void *m = mmap(NULL, CS_LEDGER_FILE_SIZE, l->read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        cs_err(SUBSYS, "cannot map ledger %s: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    /* A tenant's first touches are the header and its own slot. Without
     * this, the first touch of a page nobody has touched yet reads the
     * whole 2 MiB file ahead into the page cache (zero-filling it: ~1 ms
     * on ext4 with an 8 MiB read_ahead_kb) inside cuInit. The claim gives
     * the advice back before anything scans every slot, where reading
     * ahead is what one wants (page by page, a scan of a fresh ledger
     * costs three times as much). */
    if (l->tenant)
        madvise(m, CS_LEDGER_FILE_SIZE, MADV_RANDOM);
    *map_out = m;
    *guard_out = cs__ledger_guard_add(m, CS_LEDGER_FILE_SIZE, path);
    return 0;
}

/* open(2) flags for the ledger at its path: a tenant that trusts only its
 * own files never follows a symlink there. */
/* O_NONBLOCK: a FIFO at the ledger's path must not block the opener (an
 * administrator's `cushare status`, a tenant starting); validate() then
 * refuses it as not a regular file. No effect on a regular file. */
static int open_flags(const struct cs_ledger *l)
{
    return (l->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK |
           (own_only(l) ? O_NOFOLLOW : 0);
}

static int symlink_refused(const char *path)
{
    cs_err(SUBSYS, "ledger %s is a symbolic link: refused (whoever made the link chose the "
           "file); " TRUST_HINT, path);
    return -ELOOP;
}

int cs__ledger_open(const char *path, const struct cs_ledger_params *params,
                    bool read_only, struct cs_ledger *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    out->slot = -1;
    if (!path || !*path) {
        cs_err(SUBSYS, "no ledger path (set CUDA_DEVICE_MEMORY_SHARED_CACHE)");
        return -EINVAL;
    }
    if (strlen(path) >= sizeof out->path) {
        cs_err(SUBSYS, "ledger path too long: %.64s...", path);
        return -ENAMETOOLONG;
    }
    const bool create = params && !read_only;
    out->read_only = read_only;
    out->tenant = params != NULL;
    out->trust = params ? params->trust : CS_LEDGER_TRUST_OWNER;
    if (create && params->device_count > CS_MAX_DEVICES) {
        cs_err(SUBSYS, "ledger %s: %" PRIu32 " devices configured, at most %d supported", path,
               params->device_count, CS_MAX_DEVICES);
        return -EINVAL;
    }

    int fd = -1;
    bool created = false;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        fd = open(path, open_flags(out));
        if (fd >= 0)
            break;
        int e = errno;
        if (e == ELOOP && own_only(out))
            return symlink_refused(path);
        struct stat lst;
        if (e == ENOENT && attempt > 0 && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
            cs_err(SUBSYS, "ledger %s is a symbolic link to a missing file; remove it or "
                   "point CUDA_DEVICE_MEMORY_SHARED_CACHE at a fresh path", path);
            return -ENOENT;
        }
        if (e != ENOENT || !create) {
            if (e == ENOENT)
                cs_err(SUBSYS, "ledger %s does not exist", path);
            else if (e == EACCES)
                cs_err(SUBSYS, "cannot open ledger %s: %s (ledgers are private to the user "
                       "that created them, mode 0600)", path, strerror(e));
            else
                cs_err(SUBSYS, "cannot open ledger %s: %s", path, strerror(e));
            return -e;
        }
        int r = create_file(path, params, &fd);
        if (r == 0)
            created = true;
        else if (r != -EEXIST)
            return r;
        /* -EEXIST: another process linked first; open its file (and should
         * it vanish again before we do, create once more). */
    }
    if (fd < 0) {
        cs_err(SUBSYS, "ledger %s keeps disappearing while being opened (something removes it)",
               path);
        return -EAGAIN;
    }

    void *m;
    int r = validate_and_map(fd, out, path, &m, &out->guard);
    if (r)
        return r;
    out->fd = fd;
    out->hdr = m;
    out->map_len = CS_LEDGER_FILE_SIZE;
    out->owner_pid = getpid();
    out->created = created;
    memcpy(out->path, path, strlen(path) + 1);
    if (params && params->authority)
        pin_limits(out, params);
    else if (params && !created)
        warn_param_mismatch(out, params);
    cs_debug(SUBSYS, "%s ledger %s", created ? "created" : "opened", path);
    return 0;
}

void cs__ledger_close(struct cs_ledger *l)
{
    cs__ledger_guard_remove(l->guard);
    l->guard = NULL;
    if (l->hdr)
        munmap(l->hdr, l->map_len);
    if (l->fd >= 0)
        close(l->fd);
    l->hdr = NULL;
    l->fd = -1;
    l->slot = -1;
}

/* Opens l's path as an existing ledger and maps it (never creates), with
 * the checks of the first open. */
static int open_mapped(const struct cs_ledger *l, int *fd_out, void **map_out,
                       struct cs_ledger_guard **guard_out)
{
    int fd = open(l->path, open_flags(l));
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && own_only(l))
            return symlink_refused(l->path);
        cs_err(SUBSYS, "cannot re-open ledger %s: %s", l->path, strerror(e));
        return -e;
    }
    int r = validate_and_map(fd, l, l->path, map_out, guard_out);
    if (r)
        return r;
    *fd_out = fd;
    return 0;
}

void cs__ledger_atfork_child(void)
{
    cs__ledger_slots_atfork_child();
    cs__ledger_shares_atfork_child();
    cs__ledger_guard_atfork_child();
}

int cs__ledger_after_fork(struct cs_ledger *l)
{
    cs__ledger_atfork_child();
    /* The slot and the inherited open file description (with the OFD lock
     * on that slot) are the parent's: forget the slot without touching it.
     * Closing our reference does not release the parent's lock, which
     * belongs to the description, still referenced by the parent. */
    l->slot = -1;
    l->owner_pid = getpid();
    if (!l->hdr)
        return 0; /* never opened */
    const int flags = (l->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (l->fd >= 0) {
        /* Re-opening through /proc gives a new description of the same
         * inode even if the path was replaced or removed since: the
         * mapping stays valid and stays the parent's ledger. */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", l->fd);
        int fd = open(proc, flags);
        close(l->fd);
        l->fd = fd;
        if (fd >= 0)
            return 0;
    }
    /* The caller already dropped the inherited descriptor (an atfork
     * handler may, so the parent's death stays visible at once), or /proc
     * is missing: open the path again and map what is there now. */
    int fd = -1;
    void *m = NULL;
    struct cs_ledger_guard *g = NULL;
    int r = open_mapped(l, &fd, &m, &g);
    if (r)
        return r;
    cs__ledger_guard_remove(l->guard);
    munmap(l->hdr, l->map_len);
    l->guard = g;
    l->hdr = m;
    l->map_len = CS_LEDGER_FILE_SIZE;
    l->fd = fd;
    return 0;
}
