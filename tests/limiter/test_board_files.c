/*
 * limiter_board_files: the node board's files against a careless operator
 * or a process of the same user (the other users' side is
 * limiter_board_hostile). Each case says what it proves.
 * On c17f7cb the truncation kills the test with SIGBUS, the symlinked or
 * unsticky directory is used, and a board full of far-future entries
 * locks a new tenant out.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "limiter/board.h"
#include "limiter/board_test.h"

#define SEC 1000000000ll
#define MS 1000000ll

static const uint8_t gpu[16] = {7, 7, 7};
static char dir[64];
static char board[128];

static char *path_in(const char *name)
{
    static char bufs[8][PATH_MAX];
    static int k;
    char *p = bufs[k++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

/* ---- stderr capture -------------------------------------------------- */

static int saved_err = -1;
static char err_file[PATH_MAX];

static void capture_begin(void)
{
    fflush(stderr);
    snprintf(err_file, sizeof err_file, "%s.stderr", dir);
    int fd = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void)
{
    static char buf[16384];
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    int fd = open(err_file, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(err_file);
    return buf;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- board helpers ---------------------------------------------------- */

static int64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void post(struct cs_board *b, uint64_t tenant, int64_t now)
{
    struct cs_board_post p = {.tenant = tenant, .priority = 0, .sm_limit = 50,
                              .share_ppm = 400000, .busy = true};
    memcpy(p.uuid, gpu, 16);
    cs__board_post(b, &p, now);
}

/* Busy tenants of higher or equal priority that tenant `self` sees. */
static int busy_seen(struct cs_board *b, uint64_t self, int64_t now)
{
    struct cs_board_view v;
    cs__board_view(b, self, gpu, 0, now, &v);
    return v.busy_higher_or_equal;
}

/* Truncates every file of the board (whatever its layout names them). */
static int truncate_all(off_t len)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, "board", 5) && !truncate(path_in(de->d_name), len))
            n++;
    closedir(d);
    return n;
}

static void expect_refused(const char *path, const char *what)
{
    capture_begin();
    struct cs_board *b = cs__board_open(path);
    char *err = capture_end();
    if (b) {
        fprintf(stderr, "board %s was accepted; expected: %s\n", path, what);
        exit(1);
    }
    CHECK_EQ(lines(err), 1);
    CHECK_CONTAINS(err, "cushare: limiter: warning: node board: ");
    CHECK_CONTAINS(err, what);
    CHECK_CONTAINS(err, "NVML alone decides");
    printf("  %s", err);
}

/* Something not ours at our file's name: one warning, and the board is
 * used through a fallback file of our own. */
static void expect_fallback(const char *path, const char *what)
{
    capture_begin();
    struct cs_board *b = cs__board_open(path);
    char *err = capture_end();
    if (!b) {
        fprintf(stderr, "board %s was refused; expected a fallback file: %s\n", path, err);
        exit(1);
    }
    cs__board_close(b);
    CHECK_EQ(lines(err), 1);
    CHECK_CONTAINS(err, "cushare: limiter: warning: node board: ");
    CHECK_CONTAINS(err, what);
    CHECK_CONTAINS(err, "posting in ");
    printf("  %s", err);
}

/* ---- cases ------------------------------------------------------------ */

/* `truncate -s 0` of the board under tenants that post and
 * read it every tick. Nothing is mapped, so nothing faults; the writer
 * makes its file whole again at its next post. */
static void truncated_under_tenants(void)
{
    struct cs_board *w = cs__board_open(board), *r = cs__board_open(board);
    CHECK(w && r);
    int64_t now = mono_now();
    post(w, 21, now);
    CHECK_EQ(busy_seen(r, 99, now), 1);
    for (int round = 0; round < 3; round++) {
        CHECK_GE(truncate_all(0), 1);
        now += 100 * MS;
        CHECK_EQ(busy_seen(r, 99, now), 0); /* nothing to read, no fault */
        post(w, 21, now);
        CHECK_EQ(busy_seen(r, 99, now + 1), 1);
    }
    struct stat st;
    char own[PATH_MAX];
    board_own_file(own, sizeof own, board, (unsigned)geteuid());
    CHECK_EQ(stat(own, &st), 0);
    CHECK_EQ(st.st_size, CS_BOARD_SIZE);
    /* Cut inside an entry, then extended by someone else: same. */
    CHECK_GE(truncate_all(100), 1);
    CHECK_GE(truncate_all(CS_BOARD_SIZE * 2), 1);
    now += 100 * MS;
    post(w, 21, now);
    CHECK_EQ(busy_seen(r, 99, now), 1);
    cs__board_close(w);
    cs__board_close(r);
    printf("truncated board: no fault, the writer repairs its file\n");
}

/* Garbage over the whole file, then a file swapped in at its name: read
 * as no entries, repaired or re-opened at the next post. */
static void garbage_and_replacement(void)
{
    struct cs_board *w = cs__board_open(board), *r = cs__board_open(board);
    CHECK(w && r);
    char own[PATH_MAX];
    board_own_file(own, sizeof own, board, (unsigned)geteuid());
    static char junk[CS_BOARD_SIZE];
    unsigned rng = 4242;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)((rng = rng * 1103515245u + 12345u) >> 16);
    int fd = open(own, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, junk, sizeof junk, 0), (int64_t)sizeof junk);
    close(fd);
    int64_t now = mono_now();
    CHECK_EQ(busy_seen(r, 99, now), 0);
    post(w, 22, now);
    CHECK_EQ(busy_seen(r, 99, now + 1), 1);

    char swap[PATH_MAX + 8];
    snprintf(swap, sizeof swap, "%s.swap", own);
    fd = open(swap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, junk, 1000), 1000);
    close(fd);
    CHECK_EQ(rename(swap, own), 0);
    now += 100 * MS;
    CHECK_EQ(busy_seen(r, 99, now), 0);
    post(w, 22, now);
    CHECK_EQ(busy_seen(r, 99, now + 1), 1);
    cs__board_close(w);
    cs__board_close(r);
    printf("garbled and replaced board: ignored, repaired\n");
}

/* The directory gets the broker's checks. */
static void directory_checks(void)
{
    char target[PATH_MAX], link[PATH_MAX], lpath[PATH_MAX + 16];
    snprintf(target, sizeof target, "%s", path_in("private"));
    snprintf(link, sizeof link, "%s", path_in("vgpulock"));
    CHECK_EQ(mkdir(target, 0700), 0);
    CHECK_EQ(symlink(target, link), 0);
    snprintf(lpath, sizeof lpath, "%s/board", link);
    expect_refused(lpath, "is a symbolic link: refused");
    DIR *d = opendir(target);
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        files += de->d_name[0] != '.';
    closedir(d);
    CHECK_EQ(files, 0); /* nothing created through the link */

    char open_dir[PATH_MAX], opath[PATH_MAX + 16];
    snprintf(open_dir, sizeof open_dir, "%s", path_in("unsticky"));
    CHECK_EQ(mkdir(open_dir, 0700), 0);
    CHECK_EQ(chmod(open_dir, 0777), 0);
    snprintf(opath, sizeof opath, "%s/board", open_dir);
    expect_refused(opath, "without the sticky bit (mode 0777): refused");
    CHECK_EQ(chmod(open_dir, 01777), 0);
    struct cs_board *b = cs__board_open(opath);
    CHECK(b != NULL);
    cs__board_close(b);
    printf("board directory: symlink and unsticky shared directory refused\n");
}

/* What sits at our own file's name must be a regular file: a symlink or a
 * FIFO planted there is not used (nothing is created through the link,
 * the FIFO does not block us); we post in a fallback file instead. */
static void own_file_checks(void)
{
    char base[PATH_MAX], own[PATH_MAX + 16];
    snprintf(base, sizeof base, "%s", path_in("planted"));
    board_own_file(own, sizeof own, base, (unsigned)geteuid());
    CHECK_EQ(symlink(path_in("elsewhere"), own), 0);
    expect_fallback(base, "is not ours (owned by uid ");
    CHECK(access(path_in("elsewhere"), F_OK) != 0);
    CHECK_EQ(unlink(own), 0);
    CHECK_EQ(mkfifo(own, 0644), 0);
    expect_fallback(base, "is not ours (owned by uid ");
    CHECK_EQ(unlink(own), 0);
    printf("own board file: symlink and FIFO not used, a fallback file instead\n");
}

/* Within one user: a full file of entries stamped far in the
 * future does not lock a new tenant out (they count as stale), and a
 * reader believes no timestamp beyond now. */
static void future_entries(void)
{
    struct cs_board *w = cs__board_open(board), *r = cs__board_open(board);
    CHECK(w && r);
    int64_t now = mono_now();
    int64_t future = now + 1000000 * SEC;
    for (uint64_t t = 0; t < CS_BOARD_ENTRIES; t++)
        post(w, 1000 + t, future);
    CHECK_EQ(busy_seen(r, 99, now), 0); /* not believed */
    capture_begin();
    post(w, 23, now);
    char *err = capture_end();
    CHECK_EQ(lines(err), 0); /* no "node board is full" */
    CHECK_EQ(busy_seen(r, 99, now + 1), 1);
    /* Busy for at most the hold after it was seen, whatever it says. */
    CHECK_EQ(busy_seen(r, 99, now + CS_BOARD_BUSY_HOLD_NS + 1), 0);
    cs__board_close(w);
    cs__board_close(r);
    printf("far-future entries: no lockout, not believed\n");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/cs-boardf-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(board, sizeof board, "%s/board", dir);
    truncated_under_tenants();
    garbage_and_replacement();
    directory_checks();
    own_file_checks();
    future_entries();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    printf("limiter_board_files: ok\n");
    return 0;
}
