/*
 * Broker server: answers HPID v1 GET_PID with the connecting process's PID
 * as the kernel reports it (SO_PEERCRED) in the broker's PID namespace.
 * The request carries no PID: a caller can only learn its own, so the
 * socket may be world-connectable (docs/broker.md).
 *
 * Resources are bounded because every local process may connect to this
 * privileged daemon: a fixed pool of handler threads, a queue of accepted
 * connections no longer than the pool (beyond that, connections wait in
 * the kernel backlog), one spare fd to shed connections when the fd limit
 * is hit, and a read deadline per connection.
 *
 * Ownership: the server owns the listening socket, the directory fd (and
 * the flock on it, which marks this process as the directory's broker),
 * the spare fd, the eventfd, the handler threads and every accepted fd
 * until a handler closes it. The socket path is unlinked at close only if
 * it is still the inode we bound.
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"
#include "identity/stream.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

/* Upper bounds (seconds) of the request-latency histogram buckets. */
static const double latency_bounds_s[CS_BROKER_LATENCY_BUCKETS] = {
    0.0001, 0.001, 0.01, 0.1, 0.5, 1.0};
static const uint64_t latency_bounds_ns[CS_BROKER_LATENCY_BUCKETS] = {
    100000, 1000000, 10000000, 100000000, 500000000, 1000000000};

/* Counters are only touched with relaxed atomics: they are statistics. */
struct counters {
    uint64_t accepted, replies_ok, bad_frames[CS_BROKER_NBAD_FRAMES];
    uint64_t credential_failures, timeouts, rejected, io_errors;
    uint64_t active, active_peak;
    uint64_t latency_le[CS_BROKER_LATENCY_BUCKETS], latency_count, latency_sum_ns;
};

struct cs_broker_server {
    int listen_fd;
    int dir_fd;                         /* holds the directory flock */
    int spare_fd;                       /* given up to shed on EMFILE */
    int wake_fd;                        /* eventfd: a queue slot freed */
    char path[SUN_PATH_MAX];
    dev_t sock_dev;
    ino_t sock_ino;
    char *metrics_path;
    int read_timeout_ms;

    unsigned nthreads;
    pthread_t *threads;

    pthread_mutex_t mu;                 /* guards the queue and stopping */
    pthread_cond_t cv;                  /* work queued, or stopping */
    int *queue;                         /* accepted fds, owned while queued */
    unsigned qcap, qhead, qlen;
    bool stopping;

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

/* Creates missing ancestors 0755 (like mkdir -p). The protected directory
 * itself is checked separately, whoever created it. */
static int make_parents(const char *dir)
{
    char tmp[SUN_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -errno;
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

/* --- handlers ----------------------------------------------------------- */

/* Exactly len bytes or an error: -ETIMEDOUT, -ENODATA (EOF), -errno. */
static int read_exact(int fd, uint8_t *buf, size_t len, int64_t deadline_ns)
{
    ssize_t got = cs__stream_recv_upto(fd, buf, len, deadline_ns);
    if (got < 0)
        return (int)got;
    return (size_t)got == len ? 0 : -ENODATA;
}

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
    uint64_t ns = (uint64_t)(cs__stream_now_ns() - t0);
    for (int i = 0; i < CS_BROKER_LATENCY_BUCKETS; i++)
        if (ns <= latency_bounds_ns[i])
            inc(&s->c.latency_le[i]);
    inc(&s->c.latency_count);
    __atomic_fetch_add(&s->c.latency_sum_ns, ns, __ATOMIC_RELAXED);
}

/* One connection: credentials first (the kernel's word, not the client's),
 * then exactly one request, one reply, close. */
static void serve(struct cs_broker_server *s, int fd)
{
    int64_t t0 = cs__stream_now_ns();
    int64_t deadline = t0 + (int64_t)s->read_timeout_ms * 1000000;

    struct ucred cred = {0};
    socklen_t clen = sizeof cred;
    bool cred_ok = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 &&
                   clen == sizeof cred && cred.pid > 0;

    uint8_t req[CS_HPID_REQUEST_SIZE];
    int rc = read_exact(fd, req, sizeof req, deadline);
    if (rc == -ETIMEDOUT) {
        inc(&s->c.timeouts);
        return;
    }
    if (rc == -ENODATA) {
        inc(&s->c.bad_frames[CS_BROKER_FRAME_TRUNCATED]);
        return;
    }
    if (rc) {
        inc(&s->c.io_errors);
        return;
    }

    int status = cs__hpid_decode_request(req, sizeof req);
    uint32_t pid = 0;
    if (status != CS_HPID_OK) {
        count_bad_frame(s, status);
    } else if (!cred_ok) {
        /* pid 0: the peer lives in a namespace we cannot see into. */
        status = CS_HPID_CRED_FAILURE;
        inc(&s->c.credential_failures);
    } else {
        pid = (uint32_t)cred.pid;
    }
    uint8_t resp[CS_HPID_RESPONSE_SIZE];
    cs__hpid_encode_response(resp, (uint16_t)status, pid);
    rc = cs__stream_send_all(fd, resp, sizeof resp, deadline);
    if (rc == -ETIMEDOUT)
        inc(&s->c.timeouts);
    else if (rc)
        inc(&s->c.io_errors);
    else if (status == CS_HPID_OK)
        inc(&s->c.replies_ok);
    observe_latency(s, t0);
}

/* Takes the next queued fd; -1 when stopping and the queue is drained. */
static int dequeue(struct cs_broker_server *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->qlen == 0 && !s->stopping)
        pthread_cond_wait(&s->cv, &s->mu);
    int fd = -1;
    bool was_full = s->qlen == s->qcap;
    if (s->qlen > 0) {
        fd = s->queue[s->qhead];
        s->qhead = (s->qhead + 1) % s->qcap;
        s->qlen--;
    }
    pthread_mutex_unlock(&s->mu);
    if (was_full) {
        uint64_t one = 1;           /* the accept loop may resume */
        ssize_t w = write(s->wake_fd, &one, sizeof one);
        (void)w;
    }
    return fd;
}

static void *handler_main(void *arg)
{
    struct cs_broker_server *s = arg;
    int fd;
    while ((fd = dequeue(s)) >= 0) {
        uint64_t now = __atomic_add_fetch(&s->c.active, 1, __ATOMIC_RELAXED);
        uint64_t peak = load(&s->c.active_peak);
        while (now > peak &&
               !__atomic_compare_exchange_n(&s->c.active_peak, &peak, now, true,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        serve(s, fd);
        close(fd);
        __atomic_sub_fetch(&s->c.active, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static bool queue_full(struct cs_broker_server *s)
{
    pthread_mutex_lock(&s->mu);
    bool full = s->qlen == s->qcap;
    pthread_mutex_unlock(&s->mu);
    return full;
}

static bool enqueue(struct cs_broker_server *s, int fd)
{
    pthread_mutex_lock(&s->mu);
    bool ok = s->qlen < s->qcap;
    if (ok) {
        s->queue[(s->qhead + s->qlen) % s->qcap] = fd;
        s->qlen++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
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
    o->rejected = load(&s->c.rejected);
    o->io_errors = load(&s->c.io_errors);
    o->active = load(&s->c.active);
    o->active_peak = load(&s->c.active_peak);
    o->handlers = s->nthreads;
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
    put(&o, "# HELP cushare_broker_bad_frames_total Requests refused, by reason.\n"
            "# TYPE cushare_broker_bad_frames_total counter\n");
    for (int i = 0; i < CS_BROKER_NBAD_FRAMES; i++)
        put(&o, "cushare_broker_bad_frames_total{reason=\"%s\"} %llu\n", labels[i],
            (unsigned long long)st.bad_frames[i]);
    put_counter(&o, "cushare_broker_credential_failures_total",
                "Peers whose SO_PEERCRED gave no PID.", st.credential_failures);
    put_counter(&o, "cushare_broker_timeouts_total", "Connections past their deadline.",
                st.timeouts);
    put_counter(&o, "cushare_broker_rejected_total", "Connections closed unserved (fd limit).",
                st.rejected);
    put_counter(&o, "cushare_broker_io_errors_total", "Connections lost to socket errors.",
                st.io_errors);
    put_gauge(&o, "cushare_broker_handlers_active", "Handlers serving a connection now.",
              st.active);
    put_gauge(&o, "cushare_broker_handlers_active_peak", "Most handlers busy at once.",
              st.active_peak);
    put_gauge(&o, "cushare_broker_handlers_max", "Handler threads (the concurrency bound).",
              st.handlers);
    put(&o, "# HELP cushare_broker_request_duration_seconds Time from handler start to reply.\n"
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

/* --- accept loop -------------------------------------------------------- */

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
        inc(&s->c.rejected);
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cs_warn_capped(3, "broker", "out of file descriptors: connection rejected");
}

static void accept_ready(struct cs_broker_server *s)
{
    while (!queue_full(s)) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                shed_one(s);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                cs_warn_capped(3, "broker", "accept: %s", strerror(errno));
            return;
        }
        inc(&s->c.accepted);
        if (!enqueue(s, fd)) {          /* cannot happen: only we enqueue */
            close(fd);
            inc(&s->c.rejected);
        }
    }
}

int cs__broker_server_run(struct cs_broker_server *s, int stop_fd)
{
    int64_t next_metrics = cs__stream_now_ns();
    for (;;) {
        int64_t now = cs__stream_now_ns();
        if (now >= next_metrics) {
            write_metrics(s);
            next_metrics = now + 1000000000;
        }
        struct pollfd p[3] = {
            {.fd = stop_fd, .events = POLLIN},
            {.fd = s->wake_fd, .events = POLLIN},
            {.fd = queue_full(s) ? -1 : s->listen_fd, .events = POLLIN},
        };
        int timeout = (int)((next_metrics - now + 999999) / 1000000);
        int n = poll(p, 3, timeout);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        if (p[0].revents)
            return 0;
        if (p[1].revents) {
            uint64_t v;
            ssize_t r = read(s->wake_fd, &v, sizeof v);
            (void)r;
        }
        if (p[2].revents)
            accept_ready(s);
    }
}

/* --- lifecycle ---------------------------------------------------------- */

static int start_handlers(struct cs_broker_server *s)
{
    s->threads = calloc(s->nthreads, sizeof *s->threads);
    s->queue = calloc(s->qcap, sizeof *s->queue);
    if (!s->threads || !s->queue)
        return -ENOMEM;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);   /* handlers are tiny */
    for (unsigned i = 0; i < s->nthreads; i++) {
        int rc = pthread_create(&s->threads[i], &attr, handler_main, s);
        if (rc) {
            pthread_attr_destroy(&attr);
            s->nthreads = i;            /* close joins those started */
            return -rc;
        }
    }
    pthread_attr_destroy(&attr);
    return 0;
}

static int validate_config(const struct cs_broker_server_config *cfg, const char **path,
                           unsigned *handlers)
{
    *path = cfg && cfg->socket_path ? cfg->socket_path : CS_BROKER_SOCKET_PATH;
    *handlers = cfg && cfg->max_handlers ? cfg->max_handlers : CS_BROKER_DEFAULT_HANDLERS;
    if ((*path)[0] != '/' || *handlers > CS_BROKER_MAX_HANDLERS)
        return -EINVAL;
    if (strlen(*path) >= SUN_PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

static struct cs_broker_server *alloc_server(const struct cs_broker_server_config *cfg,
                                             const char *path, unsigned handlers)
{
    struct cs_broker_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->listen_fd = s->dir_fd = s->spare_fd = s->wake_fd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->read_timeout_ms = cfg && cfg->read_timeout_ms > 0 ? cfg->read_timeout_ms
                                                         : CS_BROKER_TIMEOUT_MS;
    s->nthreads = handlers;
    s->qcap = handlers;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
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

int cs__broker_server_open(const struct cs_broker_server_config *cfg,
                           struct cs_broker_server **out)
{
    const char *path;
    unsigned handlers;
    char dir[SUN_PATH_MAX];
    if (!out)
        return -EINVAL;
    int rc = validate_config(cfg, &path, &handlers);
    if (!rc)
        rc = split_dir(path, dir, sizeof dir);
    if (rc)
        return rc;
    struct cs_broker_server *s = alloc_server(cfg, path, handlers);
    if (!s)
        return -ENOMEM;

    rc = lock_dir(s, dir);
    if (!rc)
        rc = remove_stale(s->path);
    if (!rc)
        rc = bind_listen(s);
    if (!rc && (s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        rc = -errno;
    if (!rc)
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!rc)
        rc = start_handlers(s);
    if (rc) {
        cs_err("broker", "cannot serve %s: %s", s->path, strerror(-rc));
        cs__broker_server_close(s);
        return rc;
    }
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
        close(s->listen_fd);
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->nthreads && s->threads; i++)
        pthread_join(s->threads[i], NULL);
    if (s->listen_fd >= 0)
        write_metrics(s);               /* the final numbers of a real run */
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    if (s->dir_fd >= 0)
        close(s->dir_fd);               /* drops the directory flock */
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->threads);
    free(s->queue);
    free(s->metrics_path);
    free(s);
}
