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
#include "limiter/board.h"

static inline void board_own_file(char *out, size_t n, const char *path, unsigned uid)
{
    struct stat st;
    CHECK(stat("/proc/self/ns/mnt", &st) == 0);
    snprintf(out, n, "%s.%u.%016llx", path, uid, (unsigned long long)st.st_ino);
}

/* A board opened in a fresh directory made from the mkdtemp template
 * `dir`: its path <dir>/board in `path`, our own file's name in `file`. */
static inline struct cs_board *board_open_fresh(char *dir, char *path, size_t npath, char *file,
                                                size_t nfile)
{
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, npath, "%s/board", dir);
    board_own_file(file, nfile, path, (unsigned)geteuid());
    struct cs_board *b = cs__board_open(path);
    CHECK(b != NULL);
    return b;
}

#endif
