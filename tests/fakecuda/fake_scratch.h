/*
 * A fake-driver test's own scratch: a fresh directory under /tmp holding
 * the simulated GPU's state file, named in FAKECUDA_STATE for the test and
 * the processes it starts, so no two tests (or runs) share a device.
 */
#ifndef CS_TESTS_FAKE_SCRATCH_H
#define CS_TESTS_FAKE_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

struct fake_scratch {
    char dir[64];
    char path[96]; /* dir/state */
};

static inline void fake_scratch_open(struct fake_scratch *s, const char *tag)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/fakecuda-%s-XXXXXX", tag);
    CHECK(mkdtemp(s->dir) != NULL);
    snprintf(s->path, sizeof s->path, "%s/state", s->dir);
    setenv("FAKECUDA_STATE", s->path, 1);
}

static inline void fake_scratch_close(const struct fake_scratch *s)
{
    unlink(s->path);
    rmdir(s->dir);
}

#endif
