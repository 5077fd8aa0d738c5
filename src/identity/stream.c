#include "identity/stream.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

int cs__stream_wait(int fd, short events, int64_t deadline_ns)
{
    for (;;) {
        int64_t left = deadline_ns - cs__now_ns();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)((left + 999999) / 1000000));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

int cs__stream_send_all(int fd, const uint8_t *buf, size_t len, int64_t deadline_ns)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = cs__stream_wait(fd, POLLOUT, deadline_ns);
            if (rc)
                return rc;
        } else if (n < 0 && errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

ssize_t cs__stream_recv_upto(int fd, uint8_t *buf, size_t len, int64_t deadline_ns)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0) {
            break; /* peer closed */
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = cs__stream_wait(fd, POLLIN, deadline_ns);
            if (rc)
                return rc;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return (ssize_t)got;
}
