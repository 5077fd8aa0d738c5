/*
 * The node board (board.h). Created like the ledger: a complete file is
 * built in an unnamed temporary and linked into place, so a reader never
 * sees a half-written header. Mode 0666 (set with fchmod, never umask):
 * tenants of different users share it, as they share HAMi's /tmp/vgpulock.
 */
#define _GNU_SOURCE
#include "limiter/board.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"

#define SUBSYS "limiter"

struct cs_board {
    struct cs_board_header *hdr;
    struct cs_board_entry *e;
    bool writable;
    int mine[64];               /* entry index per post slot, -1 none */
    uint8_t mine_uuid[64][16];
    int nmine;
};

static void init_header(struct cs_board_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CS_BOARD_MAGIC, 8);
    h->version = CS_BOARD_VERSION;
    h->header_size = sizeof(struct cs_board_header);
    h->entry_size = sizeof(struct cs_board_entry);
    h->entries = CS_BOARD_ENTRIES;
}

static int create(const char *path)
{
    char dir[PATH_MAX];
    cs__path_dir(path, dir, sizeof dir, NULL);
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct cs_board_header h;
    init_header(&h);
    int r = 0;
    if (ftruncate(fd, CS_BOARD_SIZE) || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
        fchmod(fd, 0666))
        r = -errno;
    if (!r) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW))
            r = -errno;
    }
    close(fd);
    return r == -EEXIST ? 0 : r;
}

/* The board's directory (HAMi's /tmp/vgpulock on a node HAMi manages) may
 * not exist yet: create it, one level, shared like /tmp (mode 1777, set
 * with chmod, never left to the umask), so tenants of every user can post.
 * Losing a race to another creator is fine. */
static int make_parent(const char *path)
{
    char dir[PATH_MAX];
    cs__path_dir(path, dir, sizeof dir, NULL);
    if (mkdir(dir, 0700) == 0) {
        if (chmod(dir, 01777))
            return -errno;
        return 0;
    }
    return errno == EEXIST ? 0 : -errno;
}

struct cs_board *cs__board_open(const char *path)
{
    if (!path)
        path = CS_BOARD_DEFAULT_PATH;
    bool writable = true;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        int r = create(path);
        if (r == -ENOENT && make_parent(path) == 0)
            r = create(path);
        if (r) {
            cs_info(SUBSYS, "no node board at %s (%s): priorities of other tenants are "
                    "unknown, NVML alone decides", path, strerror(-r));
            return NULL;
        }
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0 && errno == EACCES) {
        writable = false;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0) {
        cs_info(SUBSYS, "cannot open node board %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    struct cs_board_header h;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size != CS_BOARD_SIZE ||
        pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.magic, CS_BOARD_MAGIC, 8) ||
        h.version != CS_BOARD_VERSION || h.entries != CS_BOARD_ENTRIES ||
        h.entry_size != sizeof(struct cs_board_entry)) {
        cs_warn(SUBSYS, "node board %s is not a version-%u board; ignoring it (remove the "
                "file when no tenant runs)", path, CS_BOARD_VERSION);
        close(fd);
        return NULL;
    }
    void *m = mmap(NULL, CS_BOARD_SIZE, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    struct cs_board *b = calloc(1, sizeof *b);
    if (!b) {
        munmap(m, CS_BOARD_SIZE);
        return NULL;
    }
    b->hdr = m;
    b->e = (struct cs_board_entry *)((char *)m + sizeof(struct cs_board_header));
    b->writable = writable;
    for (int i = 0; i < 64; i++)
        b->mine[i] = -1;
    return b;
}

void cs__board_close(struct cs_board *b)
{
    if (!b)
        return;
    munmap(b->hdr, CS_BOARD_SIZE);
    free(b);
}

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static bool entry_is(const struct cs_board_entry *e, uint64_t tenant, const uint8_t uuid[16])
{
    return LD(&e->tenant) == tenant && !memcmp(e->uuid, uuid, 16);
}

static int claim(struct cs_board *b, const struct cs_board_post *p, int64_t now)
{
    for (unsigned i = 0; i < CS_BOARD_ENTRIES; i++)
        if (entry_is(&b->e[i], p->tenant, p->uuid))
            return (int)i;
    for (unsigned i = 0; i < CS_BOARD_ENTRIES; i++) {
        struct cs_board_entry *e = &b->e[i];
        uint64_t t = LD(&e->tenant);
        bool stale = t > CS_BOARD_CLAIMING && now - (int64_t)LD(&e->seen_ns) > CS_BOARD_STALE_NS;
        if (t != 0 && !stale)
            continue;
        if (!__atomic_compare_exchange_n(&e->tenant, &t, CS_BOARD_CLAIMING, false,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        memcpy(e->uuid, p->uuid, 16);
        ST(&e->seen_ns, (uint64_t)now);
        ST(&e->tenant, p->tenant);
        return (int)i;
    }
    return -1;
}

void cs__board_post(struct cs_board *b, const struct cs_board_post *p, int64_t now)
{
    if (!b || !b->writable || !p->tenant)
        return;
    int k = 0;
    while (k < b->nmine && memcmp(b->mine_uuid[k], p->uuid, 16))
        k++;
    if (k == b->nmine) {
        if (k == 64)
            return;
        memcpy(b->mine_uuid[k], p->uuid, 16);
        b->mine[k] = -1;
        b->nmine++;
    }
    int i = b->mine[k];
    if (i < 0 || !entry_is(&b->e[i], p->tenant, p->uuid))
        i = b->mine[k] = claim(b, p, now);
    if (i < 0) {
        cs_warn_capped(1, SUBSYS, "node board is full (%u entries)", CS_BOARD_ENTRIES);
        return;
    }
    struct cs_board_entry *e = &b->e[i];
    ST(&e->priority, p->priority);
    ST(&e->policy, p->policy);
    ST(&e->sm_limit, p->sm_limit);
    ST(&e->share_ppm, p->share_ppm);
    ST(&e->flags, p->starved ? CS_BOARD_F_STARVED : 0u);
    if (p->busy)
        ST(&e->busy_until_ns, (uint64_t)now + 3 * 100000000ull);
    ST(&e->seen_ns, (uint64_t)now);
}

void cs__board_view(const struct cs_board *b, uint64_t self, const uint8_t uuid[16],
                    int32_t priority, int64_t now, struct cs_board_view *out)
{
    memset(out, 0, sizeof *out);
    out->starved_fulfil_ppm = 1000000;
    if (!b)
        return;
    for (unsigned i = 0; i < CS_BOARD_ENTRIES; i++) {
        const struct cs_board_entry *e = &b->e[i];
        uint64_t t = LD(&e->tenant);
        if (t <= CS_BOARD_CLAIMING || t == self || memcmp(e->uuid, uuid, 16))
            continue;
        if ((int64_t)LD(&e->busy_until_ns) <= now)
            continue;
        out->busy_share_ppm += LD(&e->share_ppm);
        if (LD(&e->priority) <= priority) {
            out->busy_higher_or_equal++;
            uint32_t limit = LD(&e->sm_limit);
            if ((LD(&e->flags) & CS_BOARD_F_STARVED) && limit >= 1 && limit <= 99) {
                uint64_t f = (uint64_t)LD(&e->share_ppm) * 100 / limit;
                if (f < out->starved_fulfil_ppm) {
                    out->starved_fulfil_ppm = (uint32_t)f;
                    out->starved_limit = limit;
                }
            }
        } else {
            out->busy_lower++;
            out->lower_share_ppm += LD(&e->share_ppm);
        }
    }
}
