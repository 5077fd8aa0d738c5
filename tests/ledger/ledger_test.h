/*
 * Helpers shared by the ledger tests: a private scratch directory removed at
 * exit, stderr capture, whole-file reads, the helper ready/go handshake.
 * Clocks and children with deadlines are tests/support/support.h's.
 * Header-only (every test is one executable).
 */
#ifndef CS_TESTS_LEDGER_TEST_H
#define CS_TESTS_LEDGER_TEST_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ledger/ledger.h"

#define MiB (1024ull * 1024ull)

static char lt_dir_[4096];
static pid_t lt_dir_owner_;

static int lt_rm_(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void lt_cleanup_(void)
{
    if (lt_dir_[0] && getpid() == lt_dir_owner_)
        nftw(lt_dir_, lt_rm_, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh private directory for this test, removed when the test exits. */
static inline const char *lt_dir(void)
{
    if (!lt_dir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(lt_dir_, sizeof lt_dir_, "%s/cs-ledger-XXXXXX", t && *t ? t : "/tmp");
        CHECK(mkdtemp(lt_dir_) != NULL);
        lt_dir_owner_ = getpid();
        atexit(lt_cleanup_);
    }
    return lt_dir_;
}

/* "<dir>/<name>" in a static buffer that is reused after 8 more calls
 * (copy a path that must live longer). */
static inline const char *lt_path(const char *name)
{
    static char bufs[8][4200];
    static int n;
    char *b = bufs[n++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", lt_dir(), name);
    return b;
}

static inline struct cs_ledger_params lt_params(uint64_t limit0)
{
    struct cs_ledger_params p;
    memset(&p, 0, sizeof p);
    p.device_count = 1;
    p.limit[0] = limit0;
    return p;
}

/* Reads a whole file; *len gets its size. Caller frees. NULL if missing. */
static inline char *lt_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    CHECK(buf != NULL);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            CHECK(buf != NULL);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        CHECK(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

static inline void lt_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, data, len), (int64_t)len);
    close(fd);
}

/* Redirects stderr into a file until lt_capture_end, which returns what was
 * written (caller frees). */
static int lt_saved_stderr_ = -1;
static char lt_capture_path_[4300];

static inline void lt_capture_begin(void)
{
    fflush(stderr);
    snprintf(lt_capture_path_, sizeof lt_capture_path_, "%s/.stderr", lt_dir());
    int fd = open(lt_capture_path_, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    lt_saved_stderr_ = dup(STDERR_FILENO);
    CHECK(lt_saved_stderr_ >= 0);
    CHECK(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
    close(fd);
}

static inline char *lt_capture_end(void)
{
    fflush(stderr);
    CHECK(dup2(lt_saved_stderr_, STDERR_FILENO) == STDERR_FILENO);
    close(lt_saved_stderr_);
    lt_saved_stderr_ = -1;
    char *s = lt_read_file(lt_capture_path_, NULL);
    unlink(lt_capture_path_);
    CHECK(s != NULL);
    return s;
}

static inline int lt_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Waits for `pid` at most `seconds` (scaled); fails on expiry. Returns the
 * raw wait status. */
static inline int lt_wait(pid_t pid, double seconds)
{
    int st = cs_wait_child(pid, seconds * 1000);
    if (st < 0) {
        fprintf(stderr, "child %d did not finish within %.1f s (x%g)\n", (int)pid, seconds,
                cs_test_scale());
        exit(1);
    }
    return st;
}

static inline void lt_write_full(int fd, const void *buf, size_t len)
{
    CHECK_EQ(write(fd, buf, len), (int64_t)len);
}

/* Forks a helper process of the tenant for a ready/go handshake: in the
 * child (return 0) it holds the write end of `ready` and the read end of
 * `go`, has its own ledger description and a claimed slot. */
static inline pid_t lt_helper_fork(struct cs_ledger *l, int ready[2], int go[2])
{
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        CHECK_EQ(cs__ledger_after_fork(l), 0);
        CHECK_EQ(cs__ledger_claim(l), 0);
    }
    return pid;
}

/* Parent side of a helper's ready/go handshake: keeps the ends the parent
 * uses, waits (bounded) for the helper's "ready" byte, and hands back the
 * write end of `go` that releases it. Returns pid. */
static inline pid_t lt_helper_ready(pid_t pid, int ready[2], int go[2], int *go_fd)
{
    close(ready[1]);
    close(go[0]);
    char c;
    cs_read_full(ready[0], &c, 1, 10000);
    close(ready[0]);
    *go_fd = go[1];
    return pid;
}

#endif
