/*
 * Pods (src/core/pod.c): /proc/locks lines parsed as the kernel writes
 * them, and a vouch that a stranger's lock on the same byte cannot hide.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/pod.h"

static void lines(void)
{
    struct cs_lock_line l;
    CHECK(cs_lock_line_parse("1: POSIX  ADVISORY  READ 1234 fe:00:5736175 3 3\n", &l));
    CHECK(l.posix && !l.write);
    CHECK_EQ(l.pid, 1234);
    CHECK_EQ(l.major, 0xfe);
    CHECK_EQ(l.minor, 0);
    CHECK_EQ_U(l.ino, 5736175);
    CHECK_EQ_U(l.start, 3);
    CHECK_EQ_U(l.end, 3);
    CHECK(cs_lock_line_parse("12: OFDLCK ADVISORY  WRITE -1 08:11:42 0 EOF\n", &l));
    CHECK(!l.posix && l.write);
    CHECK_EQ(l.pid, 0); /* -1 (OFD) and 0 (not visible): nobody we can name */
    CHECK_EQ(l.major, 8);
    CHECK_EQ(l.minor, 0x11);
    CHECK(l.end == UINT64_MAX);
    CHECK(cs_lock_line_parse("3: FLOCK  ADVISORY  WRITE 25967 fe:00:10952867 0 EOF", &l));
    CHECK(!l.posix);
    /* A waiter holds nothing; garbage and reversed ranges are refused. */
    CHECK(!cs_lock_line_parse("1: -> POSIX  ADVISORY  WRITE 99 fe:00:5 0 0\n", &l));
    CHECK(!cs_lock_line_parse("1: POSIX  ADVISORY  READ 1 fe:00:5 9 3\n", &l));
    CHECK(!cs_lock_line_parse("1: POSIX  ADVISORY  SHARED 1 fe:00:5 0 0\n", &l));
    CHECK(!cs_lock_line_parse("", &l));
    CHECK(!cs_lock_line_parse("1: POSIX ADVISORY READ 1 nonsense 0 0", &l));
    printf("/proc/locks lines parsed\n");
}

/* Our own vouch is found even when a child (a stranger to F_GETLK's one
 * answer) holds a read lock on the same byte; a file nobody vouches for,
 * or only a process of another pod (pod 1: no mount namespace has inode
 * 1), is not vouched for. */
static void vouches(void)
{
    char path[] = "/tmp/cs-pod-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    uint64_t pod = cs_pod_self();
    CHECK(pod != 0);
    CHECK(!cs_pod_vouches(fd, 3, pod));
    CHECK_EQ(cs_pod_vouch_state(fd, 3, pod), CS_VOUCH_NONE);
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        int cfd = open(path, O_RDWR);
        char c = 'r';
        if (cfd < 0 || cs_pod_vouch(cfd, 3, F_RDLCK) || write(ready[1], &c, 1) != 1)
            _exit(1);
        _exit(read(done[0], &c, 1) < 0);
    }
    char c;
    CHECK_EQ(read(ready[0], &c, 1), 1);
    CHECK(cs_pod_vouches(fd, 3, pod));      /* the child is of our pod */
    CHECK(!cs_pod_vouches(fd, 3, 1));       /* not of pod 1 */
    CHECK_EQ(cs_pod_vouch_state(fd, 3, 1), CS_VOUCH_OTHER);
    CHECK_EQ(cs_pod_vouch(fd, 3, F_RDLCK), 0);
    CHECK(cs_pod_vouches(fd, 3, pod));
    CHECK_EQ(cs_pod_vouch_state(fd, 3, pod), CS_VOUCH_POD);
    CHECK_EQ(write(done[1], "x", 1), 1);
    int st;
    CHECK_EQ(waitpid(child, &st, 0), child);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(cs_pod_vouches(fd, 3, pod));      /* ours alone now: found in /proc/locks */
    CHECK(!cs_pod_vouches(fd, 4, pod));
    close(fd);
    unlink(path);
    printf("vouches found by pod, a stranger's lock hides none\n");
}

int main(void)
{
    lines();
    vouches();
    return 0;
}
