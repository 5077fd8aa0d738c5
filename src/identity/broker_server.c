/*
 * Broker server: answers HPID v1 GET_PID with the connecting process's PID
 * as the kernel reports it (SO_PEERCRED) in the broker's PID namespace.
 * The request carries no PID: a caller can only learn its own, so the
 * socket may be world-connectable (docs/broker.md).
 *
 * Every local process may connect to this privileged daemon, so nobody may
 * be able to tie it up. One thread runs an epoll loop over the listener
 * and every held connection, all non-blocking: a silent or trickling peer
 * costs a slot in a fixed table and a descriptor, never a thread, and is
 * closed at its deadline (CS_BROKER_SERVER_DEADLINE_MS from accept, far
 * under the client's). A connection whose request has already arrived is
 * answered in the same step as its accept and never held. One uid may
 * hold at most max_per_uid connections: more are closed at once (counted,
 * and logged at most once per 10 s). When the table is full the listener
 * leaves the epoll set and new clients wait in the kernel backlog until a
 * slot frees, within one deadline. One spare descriptor is given up to
 * shed a connection if the process hits its fd limit anyway.
 *
 * Ownership: the server owns the listening socket, the directory fd (and
 * the flock on it, which marks this process as the directory's broker),
 * the spare fd, the epoll fd and every accepted fd: a connection's fd is
 * owned by the step that accepted it until it is closed there or stored
 * in its table slot, then by the slot until drop() closes it. The socket
 * path is unlinked at close only if it is still the inode we bound.
 *
 * Threads: the event loop (run, then close) is the only thread that
 * touches the table, the slots and the listener. Counters are relaxed
 * atomics written by the loop, so stats may be read from any thread.
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"
#include "identity/broker_conns.h"
#include "identity/stream.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

/* Upper bounds (seconds) of the request-latency histogram buckets. */
static const double latency_bounds_s[CS_BROKER_LATENCY_BUCKETS] = {
    0.0001, 0.001, 0.01, 0.1, 0.5, 1.0};
static const uint64_t latency_bounds_ns[CS_BROKER_LATENCY_BUCKETS] = {
    100000, 1000000, 10000000, 100000000, 500000000, 1000000000};

/* Written by the event loop with relaxed atomics, read from any thread:
 * they are statistics, nothing is synchronised through them. */
struct counters {
    uint64_t accepted, replies_ok, bad_frames[CS_BROKER_NBAD_FRAMES];
    uint64_t credential_failures, timeouts, rejected[CS_BROKER_NREJECTS], io_errors;
    uint64_t open, open_peak;
    uint64_t latency_le[CS_BROKER_LATENCY_BUCKETS], latency_count, latency_sum_ns;
};

/* One connection's progress. A slot is free when fd is -1. */
struct conn {
    int fd;                             /* see "Ownership" above */
    bool cred_ok;                       /* SO_PEERCRED gave a pid > 0 */
    bool replying;                      /* request complete, resp built */
    bool want_out;                      /* registered for EPOLLOUT */
    uint8_t nreq, nsent;                /* bytes of req received, of resp sent */
    uint16_t status;                    /* the reply's status, once replying */
    uid_t uid;
    pid_t pid;
    int64_t t0_ns;                      /* accepted */
    uint8_t req[CS_HPID_REQUEST_SIZE];
    uint8_t resp[CS_HPID_RESPONSE_SIZE];
};

/* Refusals over the per-uid cap: one log line per interval at most. */
struct refusal_log {
    int64_t next_ns;                    /* no line before this */
    uint64_t unreported;                /* refusals since the last line */
};

struct cs_broker_server {
    /* Set by open, immutable afterwards (so stats may read max_*). */
    int dir_fd;                         /* holds the directory flock */
    int ep_fd;                          /* epoll: listener, held connections, stop fd */
    char path[SUN_PATH_MAX];
    dev_t sock_dev;
    ino_t sock_ino;
    char *metrics_path;
    int64_t deadline_ns;
    unsigned max_conns, max_per_uid;    /* as fitted to RLIMIT_NOFILE */
    bool serving;                       /* open succeeded: write final metrics */

    /* Event loop only (run, then close). */
    int listen_fd;                      /* -1 once close stopped listening */
    int spare_fd;                       /* given up to shed on EMFILE */
    bool accepting;                     /* listener is in the epoll set */
    struct cs__bconns table;            /* which slots are held, deadlines, uid counts */
    struct conn *conns;                 /* [max_conns], indexed by table slot */
    struct refusal_log uid_cap_log;

    struct counters c;
};

static void inc(uint64_t *p)
{
    __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* --- directory and socket setup ---------------------------------------- */

static int split_dir(const char *path, char *dir, size_t dirsz)
{
    const char *base;
    cs__path_dir(path, dir, dirsz, &base);
    if (base == path || base == path + 1 || !*base)
        return -EINVAL;                 /* need /dir/name */
    return 0;
}

/* Creates a missing ancestor: 0755, except the node directory, which
 * tenants of every user share (their board files live there): 1777 as
 * HAMi makes it, set explicitly so the umask cannot narrow it. */
static int make_ancestor(const char *path)
{
    bool node = strcmp(path, CS_NODE_DIR) == 0;
    mode_t mode = node ? CS_NODE_DIR_MODE : 0755;
    if (mkdir(path, mode) != 0)
        return errno == EEXIST ? 0 : -errno;
    if (node && chmod(path, mode) != 0)
        return -errno;
    return 0;
}

/* Creates missing ancestors (like mkdir -p). The protected directory
 * itself is checked separately, whoever created it. */
static int make_parents(const char *dir)
{
    char tmp[SUN_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = make_ancestor(tmp);
        if (rc)
            return rc;
        *p = '/';
    }
    return 0;
}

static int check_dir_stat(const char *dir, const struct stat *st)
{
    if (!S_ISDIR(st->st_mode)) {
        cs_err("broker", "%s is not a directory: remove it", dir);
        return -ENOTDIR;
    }
    if (st->st_uid != 0) {
        cs_err("broker", "%s is owned by uid %u, not root: remove it (the broker must run as root)",
               dir, (unsigned)st->st_uid);
        return -EACCES;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        cs_err("broker", "%s is group/world-writable (mode %03o): clients will refuse it; use 0755",
               dir, (unsigned)(st->st_mode & 0777));
        return -EPERM;
    }
    if (!(st->st_mode & S_IXOTH))
        cs_warn("broker", "%s mode %03o: non-root clients cannot reach the socket; use 0755",
                dir, (unsigned)(st->st_mode & 0777));
    return 0;
}

/* Opens (creating if missing) the protected directory; returns its fd. */
static int open_protected_dir(const char *dir)
{
    int rc = make_parents(dir);
    if (rc)
        return rc;
    bool created = mkdir(dir, 0755) == 0;
    if (!created && errno != EEXIST)
        return -errno;
    struct stat lst;
    if (lstat(dir, &lst) != 0)
        return -errno;
    if (S_ISLNK(lst.st_mode)) {
        cs_err("broker", "%s is a symlink: refused (remove it)", dir);
        return -ELOOP;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        cs_err("broker", "cannot open %s: %s", dir, strerror(-rc));
        return rc;
    }
    struct stat st;
    rc = fstat(fd, &st) == 0 ? 0 : -errno;
    /* Opened what we inspected, not something swapped in between (the
     * parent may be world-writable). */
    if (!rc && (st.st_dev != lst.st_dev || st.st_ino != lst.st_ino))
        rc = -EAGAIN;
    /* umask may have narrowed what mkdir made; we want exactly 0755. */
    if (!rc && created && st.st_uid == 0 && fchmod(fd, 0755) == 0)
        st.st_mode = (st.st_mode & ~(mode_t)07777) | 0755;
    if (!rc)
        rc = check_dir_stat(dir, &st);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Removes a stale socket at path. Only called with the directory flock
 * held, so a socket there belongs to no live broker. */
static int remove_stale(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid())) {
        cs_err("broker", "%s exists and is not a stale broker socket (%s, uid %u): refusing to remove it",
               path, S_ISLNK(st.st_mode) ? "symlink" : S_ISSOCK(st.st_mode) ? "socket" : "file",
               (unsigned)st.st_uid);
        return -EEXIST;
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return -errno;
    cs_info("broker", "removed stale socket %s", path);
    return 0;
}

static int bind_listen(struct cs_broker_server *s)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
    struct stat st;
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        chmod(s->path, 0666) != 0 || lstat(s->path, &st) != 0 ||
        listen(fd, CS_BROKER_BACKLOG) != 0)
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    s->sock_dev = st.st_dev;
    s->sock_ino = st.st_ino;
    s->listen_fd = fd;
    return 0;
}

/* --- one connection ------------------------------------------------------ */

/* What a connection waits for next. */
enum step { STEP_WAIT_IN, STEP_WAIT_OUT, STEP_DONE };

static void count_bad_frame(struct cs_broker_server *s, int status)
{
    static const enum cs_broker_bad_frame map[] = {
        [CS_HPID_BAD_MAGIC] = CS_BROKER_FRAME_BAD_MAGIC,
        [CS_HPID_BAD_VERSION] = CS_BROKER_FRAME_BAD_VERSION,
        [CS_HPID_BAD_COMMAND] = CS_BROKER_FRAME_BAD_COMMAND,
    };
    inc(&s->c.bad_frames[map[status]]);
}

static void observe_latency(struct cs_broker_server *s, int64_t t0)
{
    uint64_t ns = (uint64_t)(cs__now_ns() - t0);
    for (int i = 0; i < CS_BROKER_LATENCY_BUCKETS; i++)
        if (ns <= latency_bounds_ns[i])
            inc(&s->c.latency_le[i]);
    inc(&s->c.latency_count);
    __atomic_fetch_add(&s->c.latency_sum_ns, ns, __ATOMIC_RELAXED);
}

/* The request is complete: its status for a bad frame, status 4 if the
 * credentials failed (pid 0: the peer lives in a namespace we cannot see
 * into), otherwise OK with the peer's PID. */
static void build_reply(struct cs_broker_server *s, struct conn *c)
{
    int status = cs__hpid_decode_request(c->req, sizeof c->req);
    uint32_t pid = 0;
    if (status != CS_HPID_OK) {
        count_bad_frame(s, status);
    } else if (!c->cred_ok) {
        status = CS_HPID_CRED_FAILURE;
        inc(&s->c.credential_failures);
    } else {
        pid = (uint32_t)c->pid;
    }
    c->status = (uint16_t)status;
    cs__hpid_encode_response(c->resp, c->status, pid);
    c->replying = true;
}

static enum step send_reply(struct cs_broker_server *s, struct conn *c)
{
    while (c->nsent < sizeof c->resp) {
        ssize_t n = send(c->fd, c->resp + c->nsent, sizeof c->resp - c->nsent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->nsent += (uint8_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return STEP_WAIT_OUT;
        } else if (n == 0 || errno != EINTR) {    /* 0: nothing moved, never again */
            inc(&s->c.io_errors);
            return STEP_DONE;
        }
    }
    if (c->status == CS_HPID_OK)
        inc(&s->c.replies_ok);
    observe_latency(s, c->t0_ns);
    return STEP_DONE;
}

/* Takes what has arrived, never more than one request: the server closes
 * after its one reply, whatever else the peer sent. */
static enum step read_request(struct cs_broker_server *s, struct conn *c)
{
    while (c->nreq < sizeof c->req) {
        ssize_t n = recv(c->fd, c->req + c->nreq, sizeof c->req - c->nreq, MSG_DONTWAIT);
        if (n > 0) {
            c->nreq += (uint8_t)n;
        } else if (n == 0) {
            inc(&s->c.bad_frames[CS_BROKER_FRAME_TRUNCATED]);
            return STEP_DONE;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return STEP_WAIT_IN;
        } else if (errno != EINTR) {
            inc(&s->c.io_errors);
            return STEP_DONE;
        }
    }
    build_reply(s, c);
    return send_reply(s, c);
}

/* Moves a connection as far as its peer allows without waiting. */
static enum step conn_step(struct cs_broker_server *s, struct conn *c)
{
    return c->replying ? send_reply(s, c) : read_request(s, c);
}

/* --- held connections ------------------------------------------------------ */

#define TOKEN_STOP UINT64_MAX           /* epoll data of the caller's stop fd */
#define TOKEN_LISTEN (UINT64_MAX - 1)   /* of the listener; else a slot index */
#define NS_PER_S 1000000000LL
#define REFUSAL_LOG_INTERVAL_NS (10 * NS_PER_S)

static void set_open(struct cs_broker_server *s)
{
    uint64_t n = s->table.used;
    __atomic_store_n(&s->c.open, n, __ATOMIC_RELAXED);
    if (n > load(&s->c.open_peak))      /* the loop is the only writer */
        __atomic_store_n(&s->c.open_peak, n, __ATOMIC_RELAXED);
}

/* The listener is in the epoll set exactly while a slot is free: a full
 * table leaves new clients in the kernel backlog, where they wait for the
 * next slot (at most one deadline away) instead of being refused. */
static void update_accepting(struct cs_broker_server *s)
{
    bool want = s->listen_fd >= 0 && !cs__bconns_full(&s->table);
    if (want == s->accepting)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TOKEN_LISTEN};
    if (epoll_ctl(s->ep_fd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->listen_fd, &ev) == 0)
        s->accepting = want;
    else
        cs_warn_capped(3, "broker", "epoll_ctl on the listener: %s", strerror(errno));
}

/* Closes slot i's connection and frees the slot. Deregistered first: close
 * alone leaves the registration alive while a forked child of an
 * in-process broker still holds a copy of the fd, and its level-triggered
 * EOF would then be reported forever. */
static void drop(struct cs_broker_server *s, uint32_t i)
{
    epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->conns[i].fd, NULL);
    close(s->conns[i].fd);
    s->conns[i].fd = -1;
    cs__bconns_release(&s->table, i);
    set_open(s);
    update_accepting(s);
}

/* A slowloris makes thousands of these a second: one line per interval,
 * with how many there were; the metric counts every one. */
static void refuse_uid_cap(struct cs_broker_server *s, uid_t uid)
{
    inc(&s->c.rejected[CS_BROKER_REJECT_UID_CAP]);
    struct refusal_log *l = &s->uid_cap_log;
    l->unreported++;
    int64_t now = cs__now_ns();
    if (now < l->next_ns)
        return;
    cs_warn("broker",
            "per-uid cap: uid %u already holds %u connections; closed %llu new one(s) at once "
            "since the last report (every one is counted in "
            "cushare_broker_rejected_total{reason=\"uid_cap\"})",
            (unsigned)uid, s->max_per_uid, (unsigned long long)l->unreported);
    l->unreported = 0;
    l->next_ns = now + REFUSAL_LOG_INTERVAL_NS;
}

/* Keeps a connection that must wait for its peer: a slot (refused at once
 * if its uid is at the cap), the deadline, the epoll set. Takes ownership
 * of c->fd. */
static void hold(struct cs_broker_server *s, const struct conn *c, enum step st)
{
    int i = cs__bconns_admit(&s->table, c->uid, c->t0_ns + s->deadline_ns);
    if (i < 0) {
        close(c->fd);
        if (i == -EUSERS)
            refuse_uid_cap(s, c->uid);
        else
            inc(&s->c.io_errors);       /* -ENFILE: cannot happen, see accept_ready */
        return;
    }
    struct conn *slot = &s->conns[i];
    *slot = *c;
    slot->want_out = st == STEP_WAIT_OUT;
    struct epoll_event ev = {.events = slot->want_out ? EPOLLOUT : EPOLLIN,
                             .data.u64 = (uint64_t)i};
    if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, slot->fd, &ev) != 0) {
        inc(&s->c.io_errors);
        drop(s, (uint32_t)i);
        return;
    }
    set_open(s);
}

/* A connection just accepted: credentials first (the kernel's word, not the
 * client's), then whatever of the request has arrived. Clients send it
 * right after connecting, so most are answered here and never held. A
 * peer whose credentials cannot be read shares the uid (uid_t)-1, capped
 * like any other. Takes ownership of fd. */
static void start_conn(struct cs_broker_server *s, int fd)
{
    struct conn c = {.fd = fd, .uid = (uid_t)-1, .t0_ns = cs__now_ns()};
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred) {
        c.uid = cred.uid;
        c.pid = cred.pid;
        c.cred_ok = cred.pid > 0;
    }
    enum step st = conn_step(s, &c);
    if (st == STEP_DONE)
        close(fd);
    else
        hold(s, &c, st);
}

/* The peer of slot i moved (or hung up). Events of a slot dropped earlier
 * in the same epoll batch may arrive for its next tenant: stepping that one
 * is harmless, it only does non-blocking I/O. */
static void on_ready(struct cs_broker_server *s, uint64_t token)
{
    if (token >= s->max_conns || s->conns[token].fd < 0)
        return;
    uint32_t i = (uint32_t)token;
    struct conn *c = &s->conns[i];
    enum step st = conn_step(s, c);
    if (st == STEP_DONE) {
        drop(s, i);
        return;
    }
    if (st == STEP_WAIT_OUT && !c->want_out) {
        struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = i};
        if (epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
            inc(&s->c.io_errors);
            drop(s, i);
            return;
        }
        c->want_out = true;
    }
}

/* Closes every held connection whose deadline has passed; the list is in
 * deadline order, so only its head is ever looked at. */
static void expire(struct cs_broker_server *s, int64_t now)
{
    uint32_t i;
    while ((i = cs__bconns_oldest(&s->table)) != CS_BCONNS_NONE &&
           s->table.node[i].deadline_ns <= now) {
        inc(&s->c.timeouts);
        drop(s, i);
    }
}

/* --- accepting ------------------------------------------------------------- */

/* At the fd limit the pending connection would keep the listener readable
 * forever: give up the spare fd, accept, close, take the spare back. */
static void shed_one(struct cs_broker_server *s)
{
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
        s->spare_fd = -1;
    }
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        inc(&s->c.rejected[CS_BROKER_REJECT_FD_LIMIT]);
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cs_warn_capped(3, "broker", "out of file descriptors: connection rejected");
}

/* A bounded batch, then held connections and deadlines get their turn;
 * the listener is level-triggered, so the rest is reported again. Stops
 * while the table is full, so admission never finds it full. */
#define ACCEPT_BATCH 256

static void accept_ready(struct cs_broker_server *s)
{
    for (int n = 0; n < ACCEPT_BATCH && !cs__bconns_full(&s->table); n++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                shed_one(s);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                cs_warn_capped(3, "broker", "accept: %s", strerror(errno));
            break;
        }
        inc(&s->c.accepted);
        start_conn(s, fd);
    }
    update_accepting(s);
}

/* --- the loop ---------------------------------------------------------------- */

/* Milliseconds until `until` or the oldest deadline, whichever is first,
 * rounded up so that we wake after a deadline, not just before it. */
static int wait_ms(const struct cs_broker_server *s, int64_t until)
{
    uint32_t i = cs__bconns_oldest(&s->table);
    if (i != CS_BCONNS_NONE && s->table.node[i].deadline_ns < until)
        until = s->table.node[i].deadline_ns;
    if (until == INT64_MAX)
        return -1;
    int64_t left = until - cs__now_ns();
    return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

/* One round: wait for events (or the next deadline, or until), handle
 * them, expire. 1 when the stop fd fired, 0, or -errno. */
static int turn(struct cs_broker_server *s, int64_t until)
{
    struct epoll_event ev[64];
    int n = epoll_wait(s->ep_fd, ev, 64, wait_ms(s, until));
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int k = 0; k < n; k++) {
        if (ev[k].data.u64 == TOKEN_STOP)
            return 1;
        if (ev[k].data.u64 == TOKEN_LISTEN)
            accept_ready(s);
        else
            on_ready(s, ev[k].data.u64);
    }
    expire(s, cs__now_ns());
    return 0;
}

/* --- metrics ------------------------------------------------------------ */

void cs__broker_server_stats(const struct cs_broker_server *s, struct cs_broker_stats *o)
{
    memset(o, 0, sizeof *o);
    o->accepted = load(&s->c.accepted);
    o->replies_ok = load(&s->c.replies_ok);
    for (int i = 0; i < CS_BROKER_NBAD_FRAMES; i++)
        o->bad_frames[i] = load(&s->c.bad_frames[i]);
    o->credential_failures = load(&s->c.credential_failures);
    o->timeouts = load(&s->c.timeouts);
    for (int i = 0; i < CS_BROKER_NREJECTS; i++)
        o->rejected[i] = load(&s->c.rejected[i]);
    o->io_errors = load(&s->c.io_errors);
    o->open = load(&s->c.open);
    o->open_peak = load(&s->c.open_peak);
    o->max_conns = s->max_conns;
    o->max_per_uid = s->max_per_uid;
    for (int i = 0; i < CS_BROKER_LATENCY_BUCKETS; i++)
        o->latency_le[i] = load(&s->c.latency_le[i]);
    o->latency_count = load(&s->c.latency_count);
    o->latency_sum_ns = load(&s->c.latency_sum_ns);
}

struct out {
    char *p;
    size_t cap, len;
    bool overflow;
};

static void __attribute__((format(printf, 2, 3))) put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len)
        o->overflow = true;
    else
        o->len += (size_t)n;
}

static void put_counter(struct out *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void put_gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

int cs__broker_server_format_metrics(const struct cs_broker_server *s, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return -ENOBUFS;
    struct cs_broker_stats st;
    cs__broker_server_stats(s, &st);
    struct out o = {buf, cap, 0, false};
    buf[0] = '\0';
    put_counter(&o, "cushare_broker_accepted_total", "Connections accepted.", st.accepted);
    put_counter(&o, "cushare_broker_replies_ok_total", "GET_PID requests answered with a PID.",
                st.replies_ok);
    static const char *const labels[] = {
#define CS_X_LABEL(id, label) label,
        CS_BROKER_BAD_FRAMES(CS_X_LABEL)
#undef CS_X_LABEL
    };
    static const char *const reject_labels[] = {
#define CS_X_LABEL(id, label) label,
        CS_BROKER_REJECTS(CS_X_LABEL)
#undef CS_X_LABEL
    };
    put(&o, "# HELP cushare_broker_bad_frames_total Requests refused, by reason.\n"
            "# TYPE cushare_broker_bad_frames_total counter\n");
    for (int i = 0; i < CS_BROKER_NBAD_FRAMES; i++)
        put(&o, "cushare_broker_bad_frames_total{reason=\"%s\"} %llu\n", labels[i],
            (unsigned long long)st.bad_frames[i]);
    put_counter(&o, "cushare_broker_credential_failures_total",
                "Peers whose SO_PEERCRED gave no PID.", st.credential_failures);
    put_counter(&o, "cushare_broker_timeouts_total", "Connections past their deadline.",
                st.timeouts);
    put(&o, "# HELP cushare_broker_rejected_total Connections closed at once, unserved.\n"
            "# TYPE cushare_broker_rejected_total counter\n");
    for (int i = 0; i < CS_BROKER_NREJECTS; i++)
        put(&o, "cushare_broker_rejected_total{reason=\"%s\"} %llu\n", reject_labels[i],
            (unsigned long long)st.rejected[i]);
    put_counter(&o, "cushare_broker_io_errors_total", "Connections lost to socket errors.",
                st.io_errors);
    put_gauge(&o, "cushare_broker_connections_open", "Connections held now.", st.open);
    put_gauge(&o, "cushare_broker_connections_open_peak", "Most connections held at once.",
              st.open_peak);
    put_gauge(&o, "cushare_broker_connections_max", "Connections held at most (the bound).",
              st.max_conns);
    put_gauge(&o, "cushare_broker_connections_per_uid_max",
              "Connections one uid may hold; more are closed at once.", st.max_per_uid);
    put(&o, "# HELP cushare_broker_request_duration_seconds Time from accept to reply.\n"
            "# TYPE cushare_broker_request_duration_seconds histogram\n");
    for (int i = 0; i < CS_BROKER_LATENCY_BUCKETS; i++)
        put(&o, "cushare_broker_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
            latency_bounds_s[i], (unsigned long long)st.latency_le[i]);
    put(&o, "cushare_broker_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
            "cushare_broker_request_duration_seconds_sum %.9f\n"
            "cushare_broker_request_duration_seconds_count %llu\n",
        (unsigned long long)st.latency_count, (double)st.latency_sum_ns / 1e9,
        (unsigned long long)st.latency_count);
    return o.overflow ? -ENOBUFS : (int)o.len;
}

/* Atomic replace: scrapers never see a half-written file. */
static int write_metrics(const struct cs_broker_server *s)
{
    if (!s->metrics_path)
        return 0;
    char buf[8192];
    int len = cs__broker_server_format_metrics(s, buf, sizeof buf);
    if (len < 0)
        return len;
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", s->metrics_path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, buf, (size_t)len);
    int rc = w == len ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    if (!rc && rename(tmp, s->metrics_path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        cs_warn_capped(3, "broker", "cannot write metrics %s: %s", s->metrics_path,
                       strerror(-rc));
    }
    return rc;
}

/* --- run and lifecycle ------------------------------------------------------- */

int cs__broker_server_run(struct cs_broker_server *s, int stop_fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TOKEN_STOP};
    if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, stop_fd, &ev) != 0)
        return -errno;
    int rc = 0;
    int64_t next_metrics = cs__now_ns();
    while (rc == 0) {
        int64_t now = cs__now_ns();
        if (now >= next_metrics) {
            write_metrics(s);
            next_metrics = now + NS_PER_S;
        }
        rc = turn(s, next_metrics);
    }
    epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, stop_fd, NULL);   /* the caller's fd */
    return rc > 0 ? 0 : rc;
}

/* Serves what is already held, accepting nothing: each held connection
 * finishes or meets its deadline, so this ends within one deadline. If
 * epoll fails, whatever is left is closed unserved. */
static void drain(struct cs_broker_server *s)
{
    while (s->table.used > 0 && turn(s, INT64_MAX) == 0)
        ;
    for (uint32_t i = 0; s->conns && i < s->max_conns; i++)
        if (s->conns[i].fd >= 0)
            drop(s, i);
}

static int validate_config(const struct cs_broker_server_config *cfg, const char **path,
                           unsigned *max_conns, unsigned *per_uid)
{
    *path = cfg && cfg->socket_path ? cfg->socket_path : CS_BROKER_SOCKET_PATH;
    *max_conns = cfg && cfg->max_conns ? cfg->max_conns : CS_BROKER_DEFAULT_CONNS;
    unsigned share = *max_conns / CS_BROKER_PER_UID_SHARE;
    *per_uid = cfg && cfg->max_per_uid ? cfg->max_per_uid : share ? share : 1;
    if ((*path)[0] != '/' || *max_conns > CS_BROKER_MAX_CONNS || *per_uid > *max_conns)
        return -EINVAL;
    if (strlen(*path) >= SUN_PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

static struct cs_broker_server *alloc_server(const struct cs_broker_server_config *cfg,
                                             const char *path, unsigned max_conns,
                                             unsigned per_uid)
{
    struct cs_broker_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->listen_fd = s->dir_fd = s->spare_fd = s->ep_fd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    int ms = cfg && cfg->deadline_ms > 0 ? cfg->deadline_ms : CS_BROKER_SERVER_DEADLINE_MS;
    s->deadline_ns = (int64_t)ms * 1000000;
    s->max_conns = max_conns;
    s->max_per_uid = per_uid;
    if (cfg && cfg->metrics_path && !(s->metrics_path = strdup(cfg->metrics_path))) {
        free(s);
        return NULL;
    }
    return s;
}

static int lock_dir(struct cs_broker_server *s, const char *dir)
{
    s->dir_fd = open_protected_dir(dir);
    if (s->dir_fd < 0) {
        int rc = s->dir_fd;
        s->dir_fd = -1;
        return rc;
    }
    if (flock(s->dir_fd, LOCK_EX | LOCK_NB) != 0) {
        cs_err("broker", "another broker serves %s", dir);
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
    }
    return 0;
}

/* Holding more connections than RLIMIT_NOFILE allows would only trade the
 * table's bound for EMFILE: shrink the table to fit, and say so. The cap
 * shrinks in proportion, or one uid could fill the smaller table. */
static void fit_fd_limit(struct cs_broker_server *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur >= (rlim_t)s->max_conns + CS_BROKER_RESERVED_FDS)
        return;
    unsigned fit = rl.rlim_cur > CS_BROKER_RESERVED_FDS + 1
                       ? (unsigned)rl.rlim_cur - CS_BROKER_RESERVED_FDS
                       : 1;
    unsigned per_uid = (unsigned)((uint64_t)s->max_per_uid * fit / s->max_conns);
    per_uid = per_uid ? per_uid : 1;
    cs_warn("broker", "RLIMIT_NOFILE is %llu: holding at most %u connections, %u per uid, "
            "not %u and %u (raise the limit to %u)", (unsigned long long)rl.rlim_cur, fit,
            per_uid, s->max_conns, s->max_per_uid, s->max_conns + CS_BROKER_RESERVED_FDS);
    s->max_conns = fit;
    s->max_per_uid = per_uid;
}

/* The connection table and the slots, once the final size is known. */
static int make_table(struct cs_broker_server *s)
{
    fit_fd_limit(s);
    int rc = cs__bconns_init(&s->table, s->max_conns, s->max_per_uid);
    if (rc)
        return rc;
    s->conns = calloc(s->max_conns, sizeof *s->conns);
    if (!s->conns)
        return -ENOMEM;
    for (unsigned i = 0; i < s->max_conns; i++)
        s->conns[i].fd = -1;
    return 0;
}

int cs__broker_server_open(const struct cs_broker_server_config *cfg,
                           struct cs_broker_server **out)
{
    const char *path;
    unsigned max_conns, per_uid;
    char dir[SUN_PATH_MAX];
    if (!out)
        return -EINVAL;
    int rc = validate_config(cfg, &path, &max_conns, &per_uid);
    if (!rc)
        rc = split_dir(path, dir, sizeof dir);
    if (rc)
        return rc;
    struct cs_broker_server *s = alloc_server(cfg, path, max_conns, per_uid);
    if (!s)
        return -ENOMEM;

    rc = lock_dir(s, dir);
    if (!rc)
        rc = remove_stale(s->path);
    if (!rc)
        rc = bind_listen(s);
    if (!rc && (s->ep_fd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        rc = -errno;
    if (!rc)
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!rc)
        rc = make_table(s);
    if (!rc) {
        update_accepting(s);
        rc = s->accepting ? 0 : -ENOMEM;
    }
    if (rc) {
        cs_err("broker", "cannot serve %s: %s", s->path, strerror(-rc));
        cs__broker_server_close(s);
        return rc;
    }
    s->serving = true;
    *out = s;
    return 0;
}

const char *cs__broker_server_path(const struct cs_broker_server *s)
{
    return s->path;
}

static void unlink_if_ours(struct cs_broker_server *s)
{
    struct stat st;
    if (s->sock_ino && lstat(s->path, &st) == 0 && st.st_dev == s->sock_dev &&
        st.st_ino == s->sock_ino)
        unlink(s->path);
}

void cs__broker_server_close(struct cs_broker_server *s)
{
    if (!s)
        return;
    /* Clients arriving from now on get ENOENT and fall back at once. */
    if (s->listen_fd >= 0) {
        unlink_if_ours(s);
        close(s->listen_fd);            /* also leaves the epoll set */
        s->listen_fd = -1;
        s->accepting = false;
    }
    if (s->ep_fd >= 0)
        drain(s);
    if (s->serving)
        write_metrics(s);               /* the final numbers of a real run */
    if (s->ep_fd >= 0)
        close(s->ep_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    if (s->dir_fd >= 0)
        close(s->dir_fd);               /* drops the directory flock */
    cs__bconns_fini(&s->table);
    free(s->conns);
    free(s->metrics_path);
    free(s);
}
