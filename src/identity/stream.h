/*
 * Whole-frame I/O on a non-blocking stream socket under one deadline,
 * shared by the HPID broker client and server: short transfers continue,
 * EINTR retries, SIGPIPE never fires (MSG_NOSIGNAL), and waiting is poll()
 * bounded by the deadline. Deadlines are CLOCK_MONOTONIC nanoseconds.
 * Errors are returned raw (-errno); each side maps them at its edge.
 */
#ifndef CS_IDENTITY_STREAM_H
#define CS_IDENTITY_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/clock.h"

/* Waits for `events` until the deadline: 0 ready, -ETIMEDOUT, -errno. */
int cs__stream_wait(int fd, short events, int64_t deadline_ns);

/* All `len` bytes sent: 0, -ETIMEDOUT or -errno. */
int cs__stream_send_all(int fd, const uint8_t *buf, size_t len, int64_t deadline_ns);

/* Reads until `len` bytes or the peer closes: the byte count (short only
 * at EOF), or -ETIMEDOUT / -errno. */
ssize_t cs__stream_recv_upto(int fd, uint8_t *buf, size_t len, int64_t deadline_ns);

#endif
