/*
 * Identity: which PID NVML reports for this process, learnt without an
 * experiment when possible (docs/identity.md).
 *
 * A process has one PID per PID namespace that contains it. NVML speaks the
 * host's (or, on drivers that translate, the caller's) numbering; getpid()
 * speaks ours. This subsystem resolves the mapping in tiers, cheapest and
 * most trustworthy first:
 *
 *   tier 0  NVML lists our own getpid() with a context: no host PID needed
 *   tier 1  broker: a root daemon in the host PID namespace reads our
 *           SO_PEERCRED and answers an HPID v1 frame (docs/broker.md)
 *   tier 2  trusted procfs: NStgid of <root>/self/status, opt-in only
 *   tier 3  legacy NVML before/after probe, run by the caller under the
 *           post-init lock (a record lock that survives owner death)
 *
 * Everything here is free of CUDA and NVML: tiers 0 and 3 are callbacks, so
 * the policy is testable without a GPU. Functions return 0 or a negative
 * errno; output parameters are written only on success. Nothing here reads
 * the environment: the caller passes configuration in (src/core/config.h).
 */
#ifndef CS_IDENTITY_IDENTITY_H
#define CS_IDENTITY_IDENTITY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/path.h"
#include "cushare/ledger.h"

/* ------------------------------------------------------------------------ */
/* HPID v1 wire format (docs/broker.md has the golden frames).               */
/*                                                                          */
/*   request  (8 bytes):  "HPID" | u16 version | u16 command                */
/*   response (12 bytes): "HPID" | u16 version | u16 status | u32 pid       */
/*                                                                          */
/* All integers big-endian, encoded with shifts (never struct casts). The    */
/* server closes the connection after the one response.                     */
/* ------------------------------------------------------------------------ */

#define CS_HPID_MAGIC "HPID"            /* 4 bytes on the wire, no NUL */
#define CS_HPID_VERSION 1u
#define CS_HPID_REQUEST_SIZE 8u
#define CS_HPID_RESPONSE_SIZE 12u
#define CS_HPID_CMD_GET_PID 1u

/* X(id, value, label): label is the finite Prometheus label of the status. */
#define CS_HPID_STATUSES(X)                                \
    X(OK, 0, "ok")                                         \
    X(BAD_MAGIC, 1, "bad_magic")                           \
    X(BAD_VERSION, 2, "unsupported_version")               \
    X(BAD_COMMAND, 3, "unsupported_command")               \
    X(CRED_FAILURE, 4, "credential_failure")

enum cs_hpid_status {
#define CS_X_ENUM(id, value, label) CS_HPID_##id = value,
    CS_HPID_STATUSES(CS_X_ENUM)
#undef CS_X_ENUM
    CS_HPID_NSTATUS
};

/* A decoded response. version is always CS_HPID_VERSION after a successful
 * decode; pid is 0 unless status is CS_HPID_OK. */
struct cs_hpid_response {
    uint16_t version;
    uint16_t status;
    uint32_t pid;
};

/* Writes a request frame. Any version/command may be encoded (tests and the
 * fuzzer build invalid frames with it). */
void cs__hpid_encode_request(uint8_t out[CS_HPID_REQUEST_SIZE], uint16_t version,
                             uint16_t command);

/* Writes a version-1 response frame. Callers must pass pid 0 with a
 * non-OK status; the encoder does not police that. */
void cs__hpid_encode_response(uint8_t out[CS_HPID_RESPONSE_SIZE], uint16_t status,
                              uint32_t pid);

/* Server side: classifies a received request. Returns the status the server
 * must answer with (CS_HPID_OK for a valid v1 GET_PID; checks magic, then
 * version, then command), or -EMSGSIZE if len != CS_HPID_REQUEST_SIZE. */
int cs__hpid_decode_request(const uint8_t *buf, size_t len);

/* Client side: strict decode of a response. 0 and *out filled for a valid
 * OK reply; -EMSGSIZE if len != 12; -EBADMSG for wrong magic, version, an
 * unknown status, or an error status that carries a PID; -ERANGE for an OK
 * reply whose PID is 0 or > INT32_MAX; -EREMOTEIO for a well-formed error
 * status (then *out is filled too, so the caller can report the status). */
int cs__hpid_decode_response(const uint8_t *buf, size_t len, struct cs_hpid_response *out);

/* "ok", "bad_magic", ...; "invalid" for values outside the enum. */
const char *cs__hpid_status_name(unsigned status);

/* ------------------------------------------------------------------------ */
/* Broker client                                                            */
/* ------------------------------------------------------------------------ */

#ifndef CS_BROKER_SOCKET_PATH
#define CS_BROKER_SOCKET_PATH CS_NODE_DIR "/hostpid/broker.sock"
#endif
#define CS_BROKER_TIMEOUT_MS 500        /* whole exchange: connect .. EOF */

/* Why a broker query failed. Each reason has its own negative errno, so
 * the code alone is the telemetry value (cs__broker_reason names it). */
#define CS_BROKER_REASONS(X)                                                   \
    X(EINVAL, "invalid_argument")   /* NULL out, empty/relative path        */ \
    X(ENAMETOOLONG, "path_too_long") /* does not fit sockaddr_un            */ \
    X(EXDEV, "path_not_pinned")     /* production call, not compiled path   */ \
    X(ENOENT, "missing")            /* directory or socket does not exist   */ \
    X(ELOOP, "symlink")             /* directory or socket is a symlink     */ \
    X(ENOTDIR, "not_directory")     /* parent is not a directory            */ \
    X(ENOTSOCK, "not_socket")       /* endpoint is not a socket             */ \
    X(EACCES, "bad_owner")          /* directory or socket not owned by 0   */ \
    X(EPERM, "insecure_directory")  /* directory group- or world-writable   */ \
    X(ECONNREFUSED, "refused")      /* socket exists, nobody listens        */ \
    X(EHOSTUNREACH, "connect_denied") /* connect(2) EACCES/EPERM            */ \
    X(EKEYREJECTED, "peer_not_root") /* listener's SO_PEERCRED uid != 0     */ \
    X(ETIMEDOUT, "timeout")         /* deadline passed (connect/send/recv)  */ \
    X(ECONNRESET, "reset")          /* connection reset / broken pipe       */ \
    X(ENODATA, "truncated")         /* EOF before a whole response          */ \
    X(EMSGSIZE, "oversized")        /* bytes after the 12-byte response     */ \
    X(EBADMSG, "bad_frame")         /* magic/version/status malformed       */ \
    X(EREMOTEIO, "server_error")    /* well-formed non-OK status            */ \
    X(ERANGE, "bad_pid")            /* OK reply with PID 0 or > INT32_MAX   */ \
    X(EIO, "io_error")              /* anything else (socket(2) failing..)  */

/* Test-only knobs, passed explicitly (never read from the environment). */
struct cs_broker_query_opts {
    const char *socket_path;        /* any path; trust checks still apply */
    int timeout_ms;                 /* <= 0: CS_BROKER_TIMEOUT_MS */
};

/* Asks the broker for this process's PID in the broker's namespace.
 * socket_path must be NULL or exactly CS_BROKER_SOCKET_PATH (else -EXDEV,
 * before touching the file system). Before connecting it lstat()s the
 * socket and its directory: no symlinks, a socket, both owned by uid 0,
 * directory not group/world-writable. After connecting it requires the
 * listener to be uid 0 (SO_PEERCRED). One deadline of CS_BROKER_TIMEOUT_MS
 * covers connect, send, receive and the closing EOF. Returns 0 and
 * *host_pid (> 0), or one of the CS_BROKER_REASONS errnos; *host_pid is
 * untouched on failure. Thread-safe; no signals (MSG_NOSIGNAL). */
int cs__broker_query(const char *socket_path, pid_t *host_pid);

/* Same checks with a caller-chosen path and deadline: for tests only. */
int cs__broker_query_opts(const struct cs_broker_query_opts *opts, pid_t *host_pid);

/* Short telemetry string of a query result: "ok" for 0, the reason name
 * for a CS_BROKER_REASONS errno, "other" for anything else. */
const char *cs__broker_reason(int err);

/* ------------------------------------------------------------------------ */
/* Broker server (the `cushare broker` daemon; docs/broker.md)               */
/* ------------------------------------------------------------------------ */

/* One thread multiplexes every connection (docs/broker.md, "Serving"), so
 * a silent client costs a table slot and a descriptor, never a thread. */
#define CS_BROKER_DEFAULT_CONNS 4096    /* connections held at once */
#define CS_BROKER_MAX_CONNS 65536
/* By default one uid may hold 1/16 of the table (256 of 4096): it takes
 * sixteen uids at their cap to fill it. */
#define CS_BROKER_PER_UID_SHARE 16
#define CS_BROKER_DEFAULT_PER_UID 256
_Static_assert(CS_BROKER_DEFAULT_PER_UID * CS_BROKER_PER_UID_SHARE == CS_BROKER_DEFAULT_CONNS,
               "the default cap is the default table's share");
#define CS_BROKER_BACKLOG 4096          /* kernel clamps to somaxconn */
/* Descriptors the daemon needs besides its held connections: stdio, the
 * listener, the directory, epoll, the spare, the metrics file being
 * rewritten, the caller's own. RLIMIT_NOFILE must fit the table plus these. */
#define CS_BROKER_RESERVED_FDS 32
/* From accept to the whole reply written. Far under the client's
 * CS_BROKER_TIMEOUT_MS: a silent peer is gone long before anybody queued
 * behind it could give up. */
#define CS_BROKER_SERVER_DEADLINE_MS 100
_Static_assert(5 * CS_BROKER_SERVER_DEADLINE_MS <= CS_BROKER_TIMEOUT_MS,
               "the server's deadline must stay well under the client's");

struct cs_broker_server_config {
    const char *socket_path;        /* NULL: CS_BROKER_SOCKET_PATH */
    const char *metrics_path;       /* NULL: no metrics file */
    unsigned max_conns;             /* 0: default; 1..CS_BROKER_MAX_CONNS */
    unsigned max_per_uid;           /* 0: max_conns / CS_BROKER_PER_UID_SHARE (>= 1); 1..max_conns */
    int deadline_ms;                /* <= 0: CS_BROKER_SERVER_DEADLINE_MS */
};

/* Why a connection got no OK reply: finite, used as metric labels. */
#define CS_BROKER_BAD_FRAMES(X)                                \
    X(BAD_MAGIC, "bad_magic")                                  \
    X(BAD_VERSION, "unsupported_version")                      \
    X(BAD_COMMAND, "unsupported_command")                      \
    X(TRUNCATED, "truncated") /* EOF before 8 request bytes */

enum cs_broker_bad_frame {
#define CS_X_ENUM(id, label) CS_BROKER_FRAME_##id,
    CS_BROKER_BAD_FRAMES(CS_X_ENUM)
#undef CS_X_ENUM
    CS_BROKER_NBAD_FRAMES
};

/* Why a connection was closed at once, unserved: finite metric labels. */
#define CS_BROKER_REJECTS(X)                                               \
    X(UID_CAP, "uid_cap")   /* its uid already held max_per_uid connections */ \
    X(FD_LIMIT, "fd_limit") /* the process was out of file descriptors */

enum cs_broker_reject {
#define CS_X_ENUM(id, label) CS_BROKER_REJECT_##id,
    CS_BROKER_REJECTS(CS_X_ENUM)
#undef CS_X_ENUM
    CS_BROKER_NREJECTS
};

#define CS_BROKER_LATENCY_BUCKETS 6     /* seconds: see docs/broker.md */

/* A snapshot of the server's counters (all monotonic except the gauges). */
struct cs_broker_stats {
    uint64_t accepted;              /* connections taken off the backlog */
    uint64_t replies_ok;            /* full OK frames written */
    uint64_t bad_frames[CS_BROKER_NBAD_FRAMES];
    uint64_t credential_failures;   /* SO_PEERCRED failed or pid 0 */
    uint64_t timeouts;              /* request or reply not done by the deadline */
    uint64_t rejected[CS_BROKER_NREJECTS]; /* closed at once, unserved */
    uint64_t io_errors;             /* recv/send errors */
    uint64_t open;                  /* gauge: connections held now */
    uint64_t open_peak;             /* gauge: most held at once */
    uint64_t max_conns;             /* gauge: the table's size (the bound) */
    uint64_t max_per_uid;           /* gauge: the per-uid cap */
    uint64_t latency_le[CS_BROKER_LATENCY_BUCKETS]; /* cumulative buckets */
    uint64_t latency_count;
    uint64_t latency_sum_ns;
};

struct cs_broker_server;

/* Sets up everything a client needs, in this order: the socket's directory
 * (created 0755 and root-owned if missing; refused if it is a symlink, not
 * owned by uid 0, or group/world-writable), an exclusive flock on that
 * directory (a second broker on the same directory fails with -EBUSY), the
 * stale socket removed (only a socket owned by uid 0 or us; a symlink or
 * any other file is -EEXIST), bind, chmod 0666, listen(CS_BROKER_BACKLOG),
 * and the connection table. max_conns is lowered (with a warning) to what
 * RLIMIT_NOFILE leaves room for, and max_per_uid in proportion. When it returns 0 the broker is ready:
 * clients connecting now queue in the backlog until cs__broker_server_run.
 * -EINVAL for max_conns or max_per_uid out of range. */
int cs__broker_server_open(const struct cs_broker_server_config *cfg,
                           struct cs_broker_server **out);

/* The event loop, on the calling thread: accepts, reads requests, replies,
 * closes connections past their deadline, writes the metrics file every
 * second; returns 0 once stop_fd becomes readable (the caller's self-pipe;
 * it is polled, never read), or -errno if waiting fails. */
int cs__broker_server_run(struct cs_broker_server *s, int stop_fd);

/* Counters, safe to call from any thread while the server runs. */
void cs__broker_server_stats(const struct cs_broker_server *s, struct cs_broker_stats *out);

/* Prometheus text exposition of the counters into buf (NUL-terminated).
 * Returns the length, or -ENOBUFS if cap is too small. */
int cs__broker_server_format_metrics(const struct cs_broker_server *s, char *buf, size_t cap);

/* The path the server listens on. */
const char *cs__broker_server_path(const struct cs_broker_server *s);

/* Stops listening, unlinks the socket (only if it is still the one we
 * bound), serves the connections already held until they finish or reach
 * their deadline, writes the metrics file a last time, drops the directory
 * lock, frees s. Call it after cs__broker_server_run returned. */
void cs__broker_server_close(struct cs_broker_server *s);

/* ------------------------------------------------------------------------ */
/* Trusted procfs (LIBVGPU_HOST_PROCFS)                                     */
/* ------------------------------------------------------------------------ */

#define CS_NSTGID_MAX_LEVELS 33         /* kernel MAX_PID_NS_LEVEL 32, + init */

/* Strict parser of the "NStgid:" line of a /proc/<pid>/status text (not
 * necessarily NUL-terminated). Exactly one line must start with "NStgid:";
 * it holds one or more decimal PIDs separated by tabs/spaces (trailing
 * tabs/spaces allowed). On success writes levels[0..n) (leftmost = the
 * procfs's own namespace, rightmost = the reader's) and *nlevels = n.
 * Errors: -EINVAL NULL argument or cap 0; -ENOENT no NStgid line;
 * -ENODATA empty list; -EBADMSG anything but digits and tabs/spaces, a
 * sign, a leading zero, a second NStgid line; -ERANGE a PID of 0 or
 * > INT_MAX; -E2BIG more levels than cap. levels may be partly written on
 * failure; *nlevels is not. */
int cs__parse_nstgid(const char *status_text, size_t len, pid_t *levels, size_t cap,
                     size_t *nlevels);

/* Reads <procfs_root>/self/status and returns the leftmost NStgid level if
 * the procfs is trusted to be the host's (docs/identity.md, "procfs rule"):
 * the root is a real procfs (statfs magic), its self/status describes us
 * (rightmost level == getpid()), and it belongs to the initial PID
 * namespace: with one level we must be in the initial namespace ourselves;
 * with several, <root>/1/ns/pid must name the initial namespace when it is
 * readable. Errors: -EINVAL, -ENAMETOOLONG, open/read errno (-ENOENT ...),
 * -EFBIG status larger than 16 KiB, -EMEDIUMTYPE not a procfs, parser
 * errors, -ESRCH rightmost level is not
 * getpid(), -EPERM private procfs (one level, we are in a child namespace),
 * -EXDEV procfs of an intermediate (non-initial) ancestor namespace. */
int cs__procfs_host_pid(const char *procfs_root, pid_t *out);

/* Short telemetry string for a cs__procfs_host_pid result. */
const char *cs__procfs_reason(int err);

/* ------------------------------------------------------------------------ */
/* Post-init lock: serialises the legacy NVML before/after probe.            */
/*                                                                          */
/* An OFD write lock on one byte of the ledger file, which the kernel drops  */
/* when the holder dies, however it dies. OFD locks belong to the open file  */
/* description, which all threads of a process share, so threads serialise  */
/* first on a process-local mutex. On known-local file systems the record   */
/* lock is taken with F_OFD_SETLKW; on NFS and unknown (network) file       */
/* systems with fresh F_OFD_SETLK attempts and jittered exponential backoff */
/* (1 ms .. 250 ms), because some NFS lock managers wake blocked waiters    */
/* tens of seconds late. There is no timeout: acquire waits until it holds  */
/* the lock or fails with an unexpected error.                              */
/*                                                                          */
/* fork: the child inherits the fd, hence the same open file description    */
/* and the parent's lock. A pthread_atfork child handler marks every lock   */
/* stale and resets its local state; acquire then fails with -ESTALE until  */
/* the child reopens the file and calls cs__postinit_lock_set_fd.           */
/* ------------------------------------------------------------------------ */

#define CS_POSTINIT_LOCK_OFFSET (CS_LEDGER_LOCK_BASE - 1) /* beyond EOF */

enum cs_postinit_wait {
    CS_POSTINIT_WAIT_AUTO = 0,      /* by file system type (statfs) */
    CS_POSTINIT_WAIT_BLOCKING,      /* F_OFD_SETLKW */
    CS_POSTINIT_WAIT_POLLING,       /* F_OFD_SETLK + backoff */
};

struct cs_postinit_lock {
    int fd;                         /* borrowed: the caller (ledger) owns it */
    uint64_t offset;                /* the locked byte */
    enum cs_postinit_wait wait;     /* resolved: BLOCKING or POLLING */
    enum cs_postinit_wait requested;
    pid_t pid;                      /* getpid() when fd was set: fork check */
    bool stale;                     /* fd shared with a parent: must reopen */
    bool held;                      /* this process holds it (under mu) */
    pthread_t holder;               /* thread that holds it, when held */
    pthread_mutex_t mu;             /* serialises this process's threads */
    struct cs_postinit_lock *next, *prev; /* fork registry (atfork reset) */
};

/* Points where the test hook runs (tests kill the process there). */
enum cs_postinit_point {
    CS_POSTINIT_AT_ENTER,           /* acquire entered, nothing held */
    CS_POSTINIT_AT_LOCAL_HELD,      /* local mutex held, record lock not asked */
    CS_POSTINIT_AT_BUSY,            /* record lock found busy; about to wait */
    CS_POSTINIT_AT_ACQUIRED,        /* both held, acquire about to return */
    CS_POSTINIT_AT_RELEASE,         /* release entered, both still held */
    CS_POSTINIT_AT_RELEASED,        /* record lock dropped, local still held */
};
typedef void (*cs_postinit_hook_fn)(enum cs_postinit_point point, void *arg);

/* Installs a process-wide hook called at each point (NULL removes it).
 * Tests only; production never sets one. */
void cs__postinit_set_test_hook(cs_postinit_hook_fn fn, void *arg);

/* Prepares l for fd (open for writing) and byte `offset` (normally
 * CS_POSTINIT_LOCK_OFFSET); picks the wait strategy when `wait` is AUTO
 * (-errno if fstatfs fails). Registers l for the fork reset, so l must
 * stay at this address until cs__postinit_lock_destroy; init it once. */
int cs__postinit_lock_init(struct cs_postinit_lock *l, int fd, uint64_t offset,
                           enum cs_postinit_wait wait);

/* Tells l that the file was reopened (after fork, or a ledger reopen):
 * adopts fd, recomputes the strategy, clears the stale mark. Call it while
 * no thread of this process uses l (the fork handler path). */
int cs__postinit_lock_set_fd(struct cs_postinit_lock *l, int fd);

/* Unregisters l. It must not be held. */
void cs__postinit_lock_destroy(struct cs_postinit_lock *l);

/* Waits until this thread holds the lock. *waits (may be NULL) is the
 * number of times it found the lock busy (local or record). 0 on success;
 * -ESTALE after fork without set_fd; -EDEADLK if this thread holds it
 * already; other -errno from fcntl (nothing is held then). */
int cs__postinit_lock_acquire(struct cs_postinit_lock *l, uint32_t *waits);

/* Releases it. -EPERM if this thread does not hold it. */
int cs__postinit_lock_release(struct cs_postinit_lock *l);

/* The strategy acquire uses (BLOCKING or POLLING). */
enum cs_postinit_wait cs__postinit_lock_strategy(const struct cs_postinit_lock *l);

/* Strategy for a statfs f_type: BLOCKING for known-local file systems,
 * POLLING for NFS and anything unknown. */
enum cs_postinit_wait cs__postinit_wait_for_fs(int64_t f_type);

/* ------------------------------------------------------------------------ */
/* Resolution                                                               */
/* ------------------------------------------------------------------------ */

struct cs_identity_config {
    bool broker;                    /* LIBVGPU_HOSTPID_BROKER=1 */
    const char *procfs_root;        /* LIBVGPU_HOST_PROCFS, NULL/"" = off */
    /* tier 0: 1 if NVML lists getpid() with a context, 0 if not, -errno.
     * NULL skips the tier. */
    int (*nvml_sees_self)(void *ctx);
    /* tier 3: the legacy probe; the callback takes the post-init lock
     * itself. 0 and *host_pid, or -errno. NULL skips the tier. */
    int (*probe)(void *ctx, pid_t *host_pid);
    void *ctx;
    /* Tests only: broker path/deadline override. NULL in production. */
    const struct cs_broker_query_opts *broker_test;
};

struct cs_identity_result {
    enum cs_identity_tier tier;     /* the tier that answered, or FAILED */
    pid_t host_pid;                 /* PID NVML reports for us; 0 if FAILED */
    /* First failure among the host-PID tiers (broker, procfs, probe) that
     * were tried, as a negative errno, and its tier; 0/UNKNOWN if none
     * failed. Tier 0 answering "no" is not a failure: it is the reason the
     * other tiers run. */
    int reason;
    enum cs_identity_tier reason_tier;
    int err[CS_IDENTITY_NTIERS];    /* per tier: 0 ok or not tried, -errno */
};

/* Tries the enabled tiers in order and fills *res (always). Returns 0 if a
 * tier answered, else res->reason (or -ENOENT when no tier was enabled). A
 * tier's answer must be a PID in 1..INT32_MAX, else it counts as -ERANGE. */
int cs__identity_resolve(const struct cs_identity_config *cfg, struct cs_identity_result *res);

/* Telemetry string for a tier's error (dispatches to the broker/procfs
 * names; "ok" for 0). */
const char *cs__identity_reason(enum cs_identity_tier tier, int err);

/* "nvml-namespace", "broker", ... from include/cushare/ledger.h. */
const char *cs__identity_tier_name(enum cs_identity_tier tier);

#endif
