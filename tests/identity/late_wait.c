/*
 * Preloaded into broker_roundtrip (broker_roundtrip_late_client): a
 * client preempted right after one of its trickle waits. Every 20 ms
 * poll() that saw nothing returns a broker deadline later, so the broker
 * has closed the connection before the client's next byte: the close must
 * be taken as the end of the exchange, not as a failed send.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <time.h>

#include "identity/identity.h"

#define TRICKLE_WAIT_MS 20 /* test_broker_roundtrip.c, test_trickle */

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    static int (*real)(struct pollfd *, nfds_t, int);
    if (!real)
        real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    int r = real(fds, n, timeout);
    if (r == 0 && timeout == TRICKLE_WAIT_MS) {
        long ms = CS_BROKER_SERVER_DEADLINE_MS + TRICKLE_WAIT_MS;
        struct timespec late = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&late, NULL);
    }
    return r;
}
