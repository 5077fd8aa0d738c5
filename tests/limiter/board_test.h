/*
 * The board file a process of this pod posts in (src/limiter/board.c,
 * "Pods"): <path>.<uid>.<its mount namespace, 16 hex digits>.
 */
#ifndef CS_TESTS_BOARD_TEST_H
#define CS_TESTS_BOARD_TEST_H

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static inline void board_own_file(char *out, size_t n, const char *path, unsigned uid)
{
    struct stat st;
    CHECK(stat("/proc/self/ns/mnt", &st) == 0);
    snprintf(out, n, "%s.%u.%016llx", path, uid, (unsigned long long)st.st_ino);
}

#endif
