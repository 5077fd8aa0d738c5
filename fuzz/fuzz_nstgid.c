/*
 * libFuzzer target for the NStgid parser. The first byte picks the
 * capacity (0..40) so the E2BIG and EINVAL paths are reachable; the rest is
 * the status text. On success every level must be in 1..INT_MAX, the count
 * within capacity, nothing written past it, and printing the levels back
 * in kernel format must parse to the same list.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity/identity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GUARD ((pid_t)-77)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cap = data[0] % 41;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    pid_t levels[42];
    for (size_t i = 0; i < 42; i++)
        levels[i] = GUARD;
    size_t n = 12345;
    int rc = cs__parse_nstgid(text, len, levels, cap, &n);
    if (levels[cap] != GUARD)
        abort();                        /* wrote past capacity */
    if (rc != 0) {
        if (n != 12345)
            abort();
        return 0;
    }
    if (n == 0 || n > cap)
        abort();

    char line[42 * 12 + 16];
    size_t off = (size_t)snprintf(line, sizeof line, "NStgid:");
    for (size_t i = 0; i < n; i++) {
        if (levels[i] <= 0)
            abort();
        off += (size_t)snprintf(line + off, sizeof line - off, "\t%d", (int)levels[i]);
    }
    line[off++] = '\n';
    pid_t again[42];
    size_t m = 0;
    if (cs__parse_nstgid(line, off, again, cap, &m) != 0 || m != n ||
        memcmp(again, levels, n * sizeof levels[0]) != 0)
        abort();
    return 0;
}
