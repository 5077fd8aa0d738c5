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

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - now_ms();
    return left > 0 ? (int)left : 0;
}

/* Waits for `events` on fd until the deadline: 0 ready, -ETIMEDOUT. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int left = remaining_ms(deadline);
        if (left == 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left);
        if (n > 0)
            return 0;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -EIO;
    }
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
    const char *slash = strrchr(path, '/');
    size_t dlen = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
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
            int left = remaining_ms(deadline);
            if (left == 0)
                return -ETIMEDOUT;
            unsigned nap = backoff_ms < (unsigned)left ? backoff_ms : (unsigned)left;
            struct timespec ts = {0, (long)nap * 1000000L};
            nanosleep(&ts, NULL);
            backoff_ms = backoff_ms < 16 ? backoff_ms * 2 : 16;
            continue;
        }
        if (errno != EINPROGRESS)
            return map_connect_errno(errno);
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc)
            return rc;
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

static int send_all(int fd, const uint8_t *buf, size_t len, int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc)
                return rc;
            continue;
        }
        return (n < 0 && (errno == EPIPE || errno == ECONNRESET)) ? -ECONNRESET : -EIO;
    }
    return 0;
}

/* Reads until len bytes or EOF; returns the byte count or -errno. */
static ssize_t recv_upto(int fd, uint8_t *buf, size_t len, int64_t deadline)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            break;                      /* peer closed */
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc)
                return rc;
            continue;
        }
        return errno == ECONNRESET ? -ECONNRESET : -EIO;
    }
    return (ssize_t)got;
}

/* Request, response, then EOF: v1 servers close after one reply, so any
 * further byte means the peer does not speak v1 framing. */
static int exchange(int fd, int64_t deadline, pid_t *host_pid)
{
    uint8_t req[CS_HPID_REQUEST_SIZE];
    cs__hpid_encode_request(req, CS_HPID_VERSION, CS_HPID_CMD_GET_PID);
    int rc = send_all(fd, req, sizeof req, deadline);
    if (rc)
        return rc;

    uint8_t resp[CS_HPID_RESPONSE_SIZE];
    ssize_t got = recv_upto(fd, resp, sizeof resp, deadline);
    if (got < 0)
        return (int)got;
    if ((size_t)got < sizeof resp)
        return -ENODATA;
    struct cs_hpid_response r;
    rc = cs__hpid_decode_response(resp, sizeof resp, &r);
    if (rc)
        return rc;

    uint8_t extra;
    got = recv_upto(fd, &extra, 1, deadline);
    if (got < 0)
        return (int)got;
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
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : CS_BROKER_TIMEOUT_MS);

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
