#ifndef CS_CORE_IO_H
#define CS_CORE_IO_H

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

/* Whole-record positioned reads and writes of the node's shared files (the
 * board, the registry, ledgers read by viewers): true only when all `len`
 * bytes moved. A short count means the file is shorter than its layout
 * says (truncated or replaced under us): callers treat that record as
 * unusable rather than half-read. */
static inline bool cs__pread_full(int fd, void *buf, size_t len, off_t off)
{
    ssize_t n;
    do
        n = pread(fd, buf, len, off);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len;
}

static inline bool cs__pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
    ssize_t n;
    do
        n = pwrite(fd, buf, len, off);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len;
}

#endif
