/*
 * The node board: where limited tenants of one node announce, per device,
 * their priority and recent activity, so tenants in different ledgers
 * (different containers, different users) see each other (docs/limiter.md,
 * "The node board"). NVML shows that *someone* keeps a GPU busy; only the
 * board says who, and at which CUDA_TASK_PRIORITY.
 *
 * Layout version 2: one file per user. In the board directory (default
 * /tmp/vgpulock) user U writes only `<base>.<U>` (default base
 * `cushare-board`), a regular file U owns, mode 0644. Nobody else can write
 * it, so the file system vouches that every entry in it is U's word, and a
 * user's file has CS_BOARD_ENTRIES entries: that is the per-user quota. A
 * user can fill, garble or truncate only their own file. Where pods share a
 * uid (every pod root), U's processes in pod P write `<base>.<U>.<P>`
 * instead, vouched for by their POSIX locks (board.c, "Pods").
 *
 * Nothing is mapped. Entries are read with pread and written with pwrite on
 * descriptors opened relative to the checked directory (O_NOFOLLOW), so a
 * file truncated, replaced or garbled under a tenant costs it at most a
 * tick of board information, never a SIGBUS.
 *
 * File (layout 3): [0, 64) struct cs_board_header; [64 + 64 i, 64 + 64
 * (i + 1)) entry i, i < CS_BOARD_ENTRIES; zeros up to CS_BOARD_STAMPS_OFF;
 * then one uint64_t launch stamp per entry; native-endian. `check` is
 * FNV-1a over the entry's first 60 bytes: a pread racing a pwrite (which
 * may tear) or garbage reads as no entry.
 *
 * Launch stamps: stamp i is the CLOCK_MONOTONIC time of the latest launch
 * of entry i's tenant on entry i's device, stored by the launch path while
 * a busy lower-priority tenant shares the device (limiter.c), so that
 * tenant can yield while this one is active (fair.h, cs__fair_quiet_wait).
 * Written on every launch, so outside the checksummed entry: the writer
 * maps only the stamps page (MAP_SHARED, under the SIGBUS guard) and does
 * one relaxed store; readers pread it. A stamp is believed only for an
 * intact, busy entry of higher priority, one in the future counts as now,
 * and one more than CS_BOARD_FUTURE_NS ahead as none.
 *
 * Writers of one user and pod share the file. A process posts under a
 * POSIX write lock on the file's first byte (non-blocking: when another
 * process of the pod holds it, this tick's post is skipped; a stranger's
 * lock is posted past): it rewrites the entry of its
 * (tenant, device), else takes a free one (tenant 0), a stale one (seen
 * more than CS_BOARD_STALE_NS ago, or in the future) or a garbled one. A
 * writer repairs its own file (size, header, mode) if someone damaged it.
 *
 * What a reader believes (cs__board_view): only entries of files that pass
 * the owner checks; a timestamp in the future counts as now, one more than
 * CS_BOARD_FUTURE_NS ahead as garbage; an entry is busy for at most
 * CS_BOARD_BUSY_HOLD_NS after it was seen, with a share of at least
 * CS_BOARD_BUSY_PPM or held by its pacing (CS_BOARD_F_HELD: it has work
 * waiting, though it may use nothing, as a tenant that yields to a higher
 * priority), whatever busy_until says. Priority, policy, limit and
 * share are the writer's word (CUDA_TASK_PRIORITY is each tenant's own
 * setting anyway); what that word can do to others is bounded in
 * docs/limiter.md ("What a board entry can do to others").
 */
#ifndef CS_LIMITER_BOARD_H
#define CS_LIMITER_BOARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/path.h"

#define CS_BOARD_MAGIC "CUSHBRD3"
#define CS_BOARD_VERSION 3u
#define CS_BOARD_ENTRIES 512u              /* per user: the quota */
#define CS_BOARD_MAX_USERS 64              /* user files a reader reads */
#define CS_BOARD_DEFAULT_PATH CS_NODE_DIR "/cushare-board"
#define CS_BOARD_STALE_NS 60000000000ll    /* unposted for 60 s: free */
#define CS_BOARD_FUTURE_NS 1000000000ll    /* seen further ahead: garbage */
#define CS_BOARD_BUSY_HOLD_NS 300000000ll  /* busy until seen + 300 ms at most */
#define CS_BOARD_BUSY_PPM 20000u           /* a 2 % share (or being held) makes a tenant busy */

struct cs_board_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;       /* 64 */
    uint32_t entry_size;        /* 64 */
    uint32_t entries;           /* CS_BOARD_ENTRIES */
    uint32_t uid;               /* the writer: must be the file's owner */
    uint8_t reserved[36];
};

struct cs_board_entry {
    uint64_t tenant;            /* 0 free, else the tenant id (never 1) */
    uint64_t seen_ns;           /* CLOCK_MONOTONIC of the last post */
    uint64_t busy_until_ns;     /* the tenant counts as busy until then */
    uint8_t uuid[16];           /* the device (driver UUID bytes) */
    int32_t priority;           /* CUDA_TASK_PRIORITY (lower = higher) */
    uint32_t policy;            /* enum cs_policy */
    uint32_t sm_limit;          /* percent, 0 none */
    uint32_t share_ppm;         /* measured share of the last second */
    uint32_t flags;             /* CS_BOARD_F_* */
    uint32_t check;             /* FNV-1a of bytes [0, 60) */
};

/* The tenant is held below its limit by the others: it is under 97 % of
 * its limit, its pacer (almost) did not sleep in the last second, and the
 * device is saturated by limited tenants on the board. Limited tenants of
 * lower or equal priority then scale their own share down to its
 * fulfilment, if what they measure themselves agrees (docs/limiter.md,
 * "Fulfilment"). */
#define CS_BOARD_F_STARVED 1u

/* The tenant is held on this device and fills the GPU, so it takes part
 * in the device's coordinated windows (docs/limiter.md, "Windows"). */
#define CS_BOARD_F_PACED 2u

/* The tenant's pacing held it over the last second: it would use more
 * than it gets. A busy tenant without it has work it cannot wait with:
 * others above their floor keep their queues short (fair.h). */
#define CS_BOARD_F_HELD 4u

/* The tenant's own queue on the GPU did not run dry while it was not held
 * (watch.c): it fills the GPU. One that does not (a decode loop) is the
 * latency-sensitive kind the short queues protect (fair.h). */
#define CS_BOARD_F_FILLING 8u

/* Pacing tenants a window schedule is made for; with more, or with limits
 * adding up to more than 100 %, nobody keeps to windows. */
#define CS_BOARD_WINDOW_MEMBERS 16
_Static_assert(sizeof(struct cs_board_header) == 64, "board ABI");
_Static_assert(sizeof(struct cs_board_entry) == 64, "board ABI");

#define CS_BOARD_STAMPS_OFF 36864u /* page-aligned (9 * 4096): mapped alone */
#define CS_BOARD_SIZE (CS_BOARD_STAMPS_OFF + CS_BOARD_ENTRIES * 8u)
_Static_assert(64u + CS_BOARD_ENTRIES * 64u <= CS_BOARD_STAMPS_OFF, "board ABI");

/* What a tenant publishes for one device. */
struct cs_board_post {
    uint64_t tenant;
    uint8_t uuid[16];
    int32_t priority;
    uint32_t policy, sm_limit, share_ppm;
    bool busy, starved, paced, held, filling;
};

/* Another tenant in the device's window schedule. */
struct cs_board_member {
    uint64_t tenant;
    uint32_t uid;
    uint32_t sm_limit;          /* percent, 1..99 */
};

/* Another busy tenant on the device, as the share decision reads it
 * (fair.h). */
#define CS_BOARD_VIEW_PEERS 32
struct cs_board_peer {
    uint32_t sm_limit;          /* percent, 0 none */
    uint32_t share_ppm;         /* its use over the last second */
    int32_t priority;
    bool held;                  /* CS_BOARD_F_HELD */
    bool filling;               /* CS_BOARD_F_FILLING */
    /* Where its launch stamp is: entry `index` of user `uid`'s file
     * `suffix` (0: <base>.<uid>, else its pod's <base>.<uid>.<16 hex>). */
    uint32_t uid, index;
    uint64_t suffix;
};

/* What a tenant learns about the others on one device. */
struct cs_board_view {
    int busy_higher_or_equal;   /* busy tenants with priority <= ours */
    int busy_lower;             /* busy tenants with priority > ours */
    uint32_t lower_share_ppm;   /* sum of the shares of busy_lower, at most 1e6 */
    uint32_t busy_share_ppm;    /* sum of the shares of all busy others, at most 1e6 */
    /* Smallest share/limit (ppm) of the starved, busy, limited tenants of
     * higher or equal priority; 1000000 when there is none. */
    uint32_t starved_fulfil_ppm;
    uint32_t starved_limit;     /* that tenant's limit (percent), 0 none */
    /* The other busy tenants that pace on the device (any priority), in
     * board order; nmembers > CS_BOARD_WINDOW_MEMBERS when there were more. */
    int nmembers;
    struct cs_board_member members[CS_BOARD_WINDOW_MEMBERS];
    /* The other busy tenants, any priority, the first CS_BOARD_VIEW_PEERS
     * in board order. */
    int npeers;
    struct cs_board_peer peers[CS_BOARD_VIEW_PEERS];
};

struct cs_board;

/* Opens the board whose files are `<path>.<uid>.<pod>` (NULL: the default). The
 * directory must be a real directory (no symlink) owned by root or by us,
 * and sticky if others can write it; it is created mode 1777, one level,
 * when missing. Our own file must be a regular file we own (created 0644).
 * Returns NULL when the board is unusable or refused (one message: info
 * when it is merely absent, warning when something is wrong with it): the
 * limiter then works from NVML alone. Read-only (we post nothing) when the
 * directory does not let us create our file. */
struct cs_board *cs__board_open(const char *path);
void cs__board_close(struct cs_board *b);

/* What became of a post. */
enum cs_board_posted {
    CS_BOARD_POSTED,            /* our entry says p now */
    CS_BOARD_POST_BUSY,         /* a claim or repair found the file's lock held by another
                                   process of our pod on every try: next tick */
    CS_BOARD_POST_FULL,         /* no free entry left in our file */
    CS_BOARD_POST_NONE,         /* no file of ours to post in (read only, refused, lost) */
};

/* Publishes one device's entry for our tenant in our own file. An entry
 * we hold is rewritten in place; claiming one (the first post, or after
 * it was lost) takes the file's lock. */
enum cs_board_posted cs__board_post(struct cs_board *b, const struct cs_board_post *p,
                                    int64_t now);

/* Summarises the other tenants busy on device `uuid` at `now`. Reads every
 * user's file once per `now` (again after a post of ours); the directory
 * is listed again at most once a second. */
void cs__board_view(struct cs_board *b, uint64_t self, const uint8_t uuid[16],
                    int32_t priority, int64_t now, struct cs_board_view *out);

/* Our launch stamp for device `uuid` (an entry of ours posted there), in
 * the shared mapping of our file's stamps page, or NULL. The address
 * stays valid while the board is open (a replaced file is mapped at the
 * same address). Watcher thread only. */
uint64_t *cs__board_stamp(struct cs_board *b, const uint8_t uuid[16]);

/* Where a reader finds peer p's launch stamps: our own file's mapping
 * (*own set, returns -1), or a new read-only descriptor of p's file that
 * passed the reader's checks (the caller closes it), else -1 with *own
 * NULL. Never a second descriptor of our own file: closing one would drop
 * our POSIX locks. Watcher thread only. */
int cs__board_stamps_fd(struct cs_board *b, const struct cs_board_peer *p,
                        const uint64_t **own);

/* Launch stamp `index` through fd (or own, when not NULL), as a reader
 * believes it at `now`: 0 when unreadable or more than CS_BOARD_FUTURE_NS
 * ahead. Any thread. */
int64_t cs__board_read_stamp(int fd, const uint64_t *own, uint32_t index, int64_t now);

#endif
