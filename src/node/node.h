/*
 * Finding every tenant of a node (docs/node.md): the one discovery
 * mechanism that `cushare top`, `cushare status --json` and
 * `cushare exporter` share.
 *
 * Two sources, merged by file identity (device, inode):
 *
 *   1. The registry. When the library has claimed a slot in a ledger, it
 *      registers that ledger in its user's registry file
 *      `<dir>/<base>.<uid>` (default /tmp/vgpulock/cushare-ledgers.<uid>):
 *      a record naming the ledger's path, identity and the registrant's
 *      pid and descriptor (an unnamed private ledger is reachable only
 *      through /proc/<pid>/fd/<fd>). The registrant holds a shared OFD
 *      lock on the record's lock byte for as long as it lives, as a slot
 *      owner holds its slot byte (docs/ledger.md): the kernel drops it
 *      however the process dies, so a record whose byte nobody holds is
 *      stale, is never shown and is reused. Nothing to clean up after a
 *      SIGKILL.
 *   2. A scan of the directories HAMi's device plugin keeps its caches in
 *      (default /usr/local/vgpu/containers, two levels): every regular
 *      file of exactly a ledger's size whose first bytes are the ledger
 *      magic, whatever its name. A container registers paths inside the
 *      container, which the host cannot open; the scan finds those.
 *
 * A ledger is listed only while some process holds a slot lock in it.
 *
 * Privilege: a reader that is not root reads only its own registry files
 * and lists only ledgers it owns; root reads every user's files.
 *
 * Names: a user's registry file is `<base>.<uid>`; when another user took
 * that name first (a squat: the file's owner is not <uid>), the registrant
 * says so at warning level and uses `<base>.<uid>.<16 hex digits>`, a
 * name chosen at random that it creates itself (and finds again by
 * listing the directory). Readers list the directory and read every file
 * whose name carries a uid that owns it, at most CS_REG_FILES_PER_USER
 * per uid; a file whose owner is not the uid in its name is counted as a
 * squat and never read. No fixed table a user can fill: each uid's
 * ledgers count against its own quota (CS_NODE_USER_TENANTS), so root's
 * view lists every user's tenants however many another user registers. A record
 * in user U's file counts only for a ledger U owns (root's records count
 * for any), so nobody can make a reader attribute another user's ledger
 * to themselves.
 *
 * Pods (core/pod.h): where containers share a uid (all root, the node
 * directory mounted into each), a registrant uses `<base>.<uid>.<pod>`,
 * its pod's mount namespace in 16 hex digits, and vouches for it with a
 * POSIX read lock on byte CS_REG_VOUCH_BYTE while it lives. Readers read
 * such a file beyond the per-uid limit only when a process of the pod it
 * names holds that vouch: one pod cannot crowd out another's file, nor
 * make a file that passes for another pod's. The file's write lock is a
 * POSIX lock too, waited for only while a process of the same pod holds
 * it (a stranger holding it is written past), and a full file gives up a
 * record whose registrant is not of the pod (docs/security.md,
 * "Kubernetes: every pod is root"). Files others can write are hostile input (as the board,
 * board.h): opened with O_NOFOLLOW | O_NONBLOCK relative to a checked
 * directory, read with pread, checked field by field.
 */
#ifndef CS_NODE_NODE_H
#define CS_NODE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/path.h"

#define CS_REG_MAGIC "CUSHREG1"
#define CS_REG_VERSION 1u
#define CS_REG_RECORDS 1024u               /* per user: the quota */
#define CS_REG_DEFAULT_PATH CS_NODE_DIR "/cushare-ledgers"
#define CS_REG_LOCK_BASE (1ull << 40)      /* record i's liveness byte: base + i */
#define CS_NODE_DEFAULT_SCAN "/usr/local/vgpu/containers"
#define CS_NODE_SCAN_MAX 8                 /* scan directories a reader takes */
#define CS_REG_FILES_PER_USER 4            /* registry files read per uid */
#define CS_REG_SUFFIX_LEN 16               /* hex digits of a fallback or pod name */
#define CS_REG_VOUCH_BYTE 1u               /* POSIX read locks of the pod's registrants */
#define CS_NODE_USER_TENANTS CS_REG_RECORDS /* ledgers listed per owner */

struct cs_reg_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;       /* 64 */
    uint32_t record_size;       /* 256 */
    uint32_t records;           /* CS_REG_RECORDS */
    uint32_t uid;               /* the writer: must be the file's owner */
    uint8_t reserved[36];
};

struct cs_reg_record {
    uint64_t dev, ino;          /*   0 the ledger file's identity (0 = free) */
    uint64_t created_ns;        /*  16 its header's created_ns */
    int32_t pid;                /*  24 the registrant, in its PID namespace */
    int32_t fd;                 /*  28 its descriptor of the ledger */
    uint32_t reserved;          /*  32 */
    char path[216];             /*  36 the path it was opened by, NUL-terminated */
    uint32_t check;             /* 252 FNV-1a of bytes [0, 252) */
};

_Static_assert(sizeof(struct cs_reg_header) == 64, "registry ABI");
_Static_assert(sizeof(struct cs_reg_record) == 256, "registry ABI");

#define CS_REG_SIZE (64u + CS_REG_RECORDS * 256u)

/* Registers the ledger open on `fd` (opened by `path`, created at
 * `created_ns`) in our user's registry file `<registry>.<euid>` (NULL:
 * the default), and keeps the record alive until this process and every
 * fork child sharing the descriptor are gone. Best effort: the node view
 * is the only user, so a failure is one info line, never an error.
 * Idempotent per process. */
void cs__node_register(const char *registry, const char *path, int fd, uint64_t created_ns);

/* In a fork child: nothing to do (the child shares the registry
 * descriptor and so keeps the record alive with its parent). Exec drops
 * it (O_CLOEXEC); the new image registers again when it initialises. */

/* One discovered tenant: an open, read-only descriptor of its ledger. */
struct cs_node_found {
    int fd;
    dev_t dev;
    ino_t ino;
    uid_t uid;                  /* the ledger file's owner */
    char path[512];             /* how it was reached (for people) */
    char container[128];        /* HAMi `<pod>_<container>` directory name, "" */
};

struct cs_node_where {
    const char *registry;       /* DIR/BASE, NULL: the default */
    const char *scan[CS_NODE_SCAN_MAX]; /* NULL-terminated; scan[0] NULL: the default */
    bool no_scan;               /* registry only */
};

/* What discovery left out, for the views to say. */
struct cs_node_notes {
    int hidden;                 /* live ledgers beyond their owner's quota */
    uint32_t hidden_uid;        /* the owner of one of them */
    int squats;                 /* registry files named for a uid that does not own them */
    uint32_t squat_owner;       /* the owner of one of them */
};

/* Lists the live ledgers of the node that we may see into *out (grown
 * with realloc; *cap its capacity, both owned by the caller). Returns
 * how many (each with an open fd the caller closes); notes (may be NULL)
 * says what was left out. */
int cs_node_discover(const struct cs_node_where *w, struct cs_node_found **out, int *cap,
                     struct cs_node_notes *notes);

/* Whether `name` is a registry or board file name of `base`:
 * `<base>.<uid>` or `<base>.<uid>.<CS_REG_SUFFIX_LEN hex digits>`; *uid
 * gets the uid it names. */
bool cs_node_user_file_name(const char *name, const char *base, uint32_t *uid);

/* When another user squats our per-user file `name` (`<base>.<uid>`) in
 * the checked directory dirfd: a fallback file of ours,
 * `<name>.<CS_REG_SUFFIX_LEN hex digits>`, read-write: one we made before
 * (found by listing the directory), else a new one (0644) at a name
 * chosen at random, so that the squatter cannot take it first. `used`
 * gets its name. A descriptor or -errno. */
int cs__node_open_fallback(int dirfd, const char *name, uint32_t uid, char *used, size_t len);

/* Opens `path` (relative to dirfd) read-only only when it is a regular
 * file: looked at through O_PATH first, so naming a device or a FIFO
 * opens nothing (no driver's open runs, no FIFO blocks). st gets its
 * status. A descriptor, or -1. */
int cs_node_open_regular(int dirfd, const char *path, bool nofollow, struct stat *st);

/* Whether a process holds a slot of the ledger open on fd. */
bool cs_node_ledger_live(int fd);

/* Whether another open file description holds a lock on `byte` of fd
 * (true when it cannot tell: nobody is called dead on a guess). */
bool cs_node_lock_held(int fd, uint64_t byte);


#endif
