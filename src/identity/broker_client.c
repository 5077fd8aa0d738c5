/*
 * Broker client: one HPID v1 exchange over a Unix socket, fenced by trust
 * checks before connecting and a single deadline for the whole exchange.
 *
 * Trust model (docs/broker.md): whoever can place a listener at the socket
 * path decides which PID we report to NVML, i.e. whose usage we are billed
 * for. So the path is compiled in, its directory must be root-owned and not
 * writable by others, neither may be a symlink, and after connecting the
 * kernel must tell us (SO_PEERCRED of the listener) that root is listening.
 * The last check closes the race between lstat() and connect().
 *
 * Availability failures must be fast because a fallback exists: a missing
 * socket fails at lstat() in microseconds; everything else is bounded by
 * CS_BROKER_TIMEOUT_MS.
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/path.h"
#include "identity/stream.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

/* The client's reasons are few and distinct (CS_BROKER_REASONS): a
 * transport failure is a timeout, a reset peer, or plain I/O trouble. */
static int io_reason(int err)
{
    if (err == -ETIMEDOUT)
        return err;
    if (err == -EPIPE || err == -ECONNRESET)
        return -ECONNRESET;
    return -EIO;
}

/* lstat-based checks of the directory holding the socket. */
static int check_dir(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? -ENOENT : -EIO;
    if (S_ISLNK(st.st_mode))
        return -ELOOP;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    if (st.st_uid != 0)
        return -EACCES;
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return -EPERM;
    return 0;
}

static int check_socket(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? -ENOENT : -EIO;
    if (S_ISLNK(st.st_mode))
        return -ELOOP;
    if (!S_ISSOCK(st.st_mode))
        return -ENOTSOCK;
    if (st.st_uid != 0)
        return -EACCES;
    return 0;
}

static int check_trust(const char *path)
{
    char dir[SUN_PATH_MAX];
    cs__path_dir(path, dir, sizeof dir, NULL);
    int rc = check_dir(dir);
    return rc ? rc : check_socket(path);
}

static int map_connect_errno(int e)
{
    switch (e) {
    case ECONNREFUSED: return -ECONNREFUSED;
    case ENOENT: return -ENOENT;
    case EACCES:
    case EPERM: return -EHOSTUNREACH;
    case ETIMEDOUT: return -ETIMEDOUT;
    default: return -EIO;
    }
}

/* Non-blocking connect bounded by the deadline. AF_UNIX answers EAGAIN
 * (backlog full) rather than EINPROGRESS: that one is retried. */
static int connect_until(int fd, const struct sockaddr_un *sa, int64_t deadline)
{
    unsigned backoff_ms = 1;
    for (;;) {
        if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            int64_t left_ms = (deadline - cs__now_ns()) / 1000000;
            if (left_ms <= 0)
                return -ETIMEDOUT;
            unsigned nap = backoff_ms < left_ms ? backoff_ms : (unsigned)left_ms;
            struct timespec ts = {0, (long)nap * 1000000L};
            nanosleep(&ts, NULL);
            backoff_ms = backoff_ms < 16 ? backoff_ms * 2 : 16;
            continue;
        }
        if (errno != EINPROGRESS)
            return map_connect_errno(errno);
        int rc = cs__stream_wait(fd, POLLOUT, deadline);
        if (rc)
            return io_reason(rc);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            return -EIO;
        return soerr ? map_connect_errno(soerr) : 0;
    }
}

/* The listener's credentials are recorded by the kernel at listen() time. */
static int check_peer_is_root(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
        return -EIO;
    return cred.uid == 0 ? 0 : -EKEYREJECTED;
}

/* Request, response, then EOF: v1 servers close after one reply, so any
 * further byte means the peer does not speak v1 framing. */
static int exchange(int fd, int64_t deadline, pid_t *host_pid)
{
    uint8_t req[CS_HPID_REQUEST_SIZE];
    cs__hpid_encode_request(req, CS_HPID_VERSION, CS_HPID_CMD_GET_PID);
    int rc = cs__stream_send_all(fd, req, sizeof req, deadline);
    if (rc)
        return io_reason(rc);

    uint8_t resp[CS_HPID_RESPONSE_SIZE];
    ssize_t got = cs__stream_recv_upto(fd, resp, sizeof resp, deadline);
    if (got < 0)
        return io_reason((int)got);
    if ((size_t)got < sizeof resp)
        return -ENODATA;
    struct cs_hpid_response r;
    rc = cs__hpid_decode_response(resp, sizeof resp, &r);
    if (rc)
        return rc;

    uint8_t extra;
    got = cs__stream_recv_upto(fd, &extra, 1, deadline);
    if (got < 0)
        return io_reason((int)got);
    if (got > 0)
        return -EMSGSIZE;
    *host_pid = (pid_t)r.pid;
    return 0;
}

static int query(const char *path, int timeout_ms, pid_t *host_pid)
{
    if (!path || path[0] != '/' || !host_pid)
        return -EINVAL;
    if (strlen(path) >= SUN_PATH_MAX)
        return -ENAMETOOLONG;
    int64_t deadline = cs__now_ns() +
                       (int64_t)(timeout_ms > 0 ? timeout_ms : CS_BROKER_TIMEOUT_MS) * 1000000;

    int rc = check_trust(path);
    if (rc)
        return rc;

    /* fd is owned by this function and closed on every path below. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -EIO;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);

    rc = connect_until(fd, &sa, deadline);
    if (!rc)
        rc = check_peer_is_root(fd);
    pid_t pid = 0;
    if (!rc)
        rc = exchange(fd, deadline, &pid);
    close(fd);
    if (!rc)
        *host_pid = pid;
    return rc;
}

int cs__broker_query(const char *socket_path, pid_t *host_pid)
{
    if (socket_path && strcmp(socket_path, CS_BROKER_SOCKET_PATH) != 0)
        return -EXDEV;
    int rc = query(CS_BROKER_SOCKET_PATH, CS_BROKER_TIMEOUT_MS, host_pid);
    if (rc)
        cs_debug("identity", "broker %s: %s", CS_BROKER_SOCKET_PATH, cs__broker_reason(rc));
    return rc;
}

int cs__broker_query_opts(const struct cs_broker_query_opts *opts, pid_t *host_pid)
{
    if (!opts)
        return -EINVAL;
    return query(opts->socket_path, opts->timeout_ms, host_pid);
}

const char *cs__broker_reason(int err)
{
    if (err == 0)
        return "ok";
    switch (-err) {
#define CS_X_CASE(e, name) case e: return name;
        CS_BROKER_REASONS(CS_X_CASE)
#undef CS_X_CASE
    }
    return "other";
}
