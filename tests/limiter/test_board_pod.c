/*
 * limiter_board_pod: two root "pods" on one node board (docs/security.md,
 * "Kubernetes: every pod is root"). Each pod is a mount namespace of its
 * own (unshare -m; the attacker sees the board directory bind-mounted
 * elsewhere, as a node directory is into every container), all root, so
 * no owner check can tell them apart.
 *
 * The attacker makes root's plain board file and the victim pod's own
 * file first, write-locks the vouch byte of the pod's file (so that it
 * looks like nobody's, or the attacker's), and keeps taking the write lock
 * of every root board file it finds. The victim tenant posts a busy entry;
 * a reader in a third pod must see it within the (scaled) deadline.
 * Before: all root pods shared one file whose lock the attacker held, so
 * the victim never posted and nobody saw it.
 *
 * Needs root (unshare, mount); skipped, visibly, otherwise.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>

#include "limiter/board.h"
#include "limiter/lim_test.h"
#include "multiuser.h"

#define VICTIM 77
#define READER 99

static const uint8_t uuid[16] = {0xb0, 0xa7, 0xd0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

/* Write-locks byte 0 of every root board file in dir (OFD locks; the
 * descriptors that hold them stay open). */
static void lock_all(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char name[4400];
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        snprintf(name, sizeof name, "%s/%s", dir, de->d_name);
        int fd = open(name, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        struct flock w = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &w) != 0)
            close(fd); /* already held (by us): the first descriptor keeps it */
    }
    if (d)
        closedir(d);
}

/* The attacker pod: squats `path`.0 and `path`.0.<pod> (write-locking the
 * vouch byte of the latter), holds the write lock of both, says `ready`,
 * then keeps taking the write lock of every root board file that appears,
 * until killed. */
static int attacker(const char *path, const char *pod, const char *ready)
{
    char name[4200];
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, k ? "%s.0.%s" : "%s.0", path, pod);
        int fd = open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        struct flock v = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
        CHECK(fd >= 0 && ftruncate(fd, CS_BOARD_SIZE) == 0);
        /* The pod file's vouch byte; already vouched for when the victim
         * came first (scripts/soak.sh runs this beside live tenants). */
        if (k && fcntl(fd, F_SETLK, &v) != 0)
            printf("attacker: the pod's file is vouched for already\n");
    }
    char dir[4200], prefix[300];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    snprintf(prefix, sizeof prefix, "%s.0", strrchr(path, '/') + 1);
    lock_all(dir, prefix);
    CHECK(open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) >= 0);
    for (;;) {
        cs_sleep_ms(20); /* pacing of the attack only */
        lock_all(dir, prefix);
    }
}

/* The victim tenant: posts a busy entry every 20 ms until killed. */
static int victim(const char *path)
{
    struct cs_board *b = cs__board_open(path);
    CHECK(b != NULL);
    struct cs_board_post p = {.tenant = VICTIM, .priority = 0, .policy = 1, .sm_limit = 50,
                              .share_ppm = 400000, .busy = true};
    memcpy(p.uuid, uuid, 16);
    for (;;) {
        cs__board_post(b, &p, cs_now_ns());
        cs_sleep_ms(20); /* a tenant's posting tick */
    }
}

static bool sees(void *arg)
{
    struct cs_board *b = arg;
    struct cs_board_view v;
    cs__board_view(b, READER, uuid, 0, cs_now_ns(), &v);
    return v.busy_higher_or_equal >= 1 && v.busy_share_ppm >= 400000;
}

/* The reader pod: exit 0 once it sees the victim busy, 1 at the deadline. */
static int reader(const char *path)
{
    struct cs_board *b = cs__board_open(path);
    CHECK(b != NULL);
    bool ok = cs_wait_until(sees, b, 10000);
    printf("reader pod: the victim's busy entry %s\n", ok ? "seen" : "NOT seen");
    return ok ? 0 : 1;
}

/* Runs `self mode args` as root in a mount namespace of its own; with a
 * bind mount of `dir` at `dir`.pod for the attacker. */
static pid_t in_pod(const char *mode, const char *dir, const char *a1, const char *a2)
{
    char script[] = "if [ \"$1\" = attack ]; then mkdir -p \"$2.pod\" && "
                    "mount --bind \"$2\" \"$2.pod\" && "
                    "exec \"$0\" attack \"$2.pod/cushare-board\" \"$3\" \"$4\"; fi; "
                    "exec \"$0\" \"$1\" \"$2/cushare-board\"";
    char *a[] = {"unshare", "-m", "--propagation", "private", "sh", "-c", script,
                 (char *)cs_test_self(), (char *)mode, (char *)dir, (char *)a1, (char *)a2,
                 NULL};
    pid_t pid = cs_fork_tied();
    if (pid == 0) {
        execvp(a[0], a);
        _exit(127);
    }
    return pid;
}

static bool exists(void *path)
{
    return access(path, F_OK) == 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "attack"))
        return attacker(argv[2], argv[3], argv[4]);
    if (argc == 3 && !strcmp(argv[1], "victim"))
        return victim(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "read"))
        return reader(argv[2]);
    CHECK(argc == 1);
    cs_require_root("two root pods are two mount namespaces (unshare -m)");
    const char *dir = lim_dir("board_pod");
    CHECK(chmod(dir, 01777) == 0);
    struct stat st;
    CHECK(stat("/proc/self/ns/mnt", &st) == 0);
    char pod[24], ready[4200], path[4200];
    snprintf(pod, sizeof pod, "%016llx", (unsigned long long)st.st_ino);
    snprintf(ready, sizeof ready, "%s.ready", dir);
    snprintf(path, sizeof path, "%s/cushare-board", dir);
    unlink(ready);
    pid_t att = in_pod("attack", dir, pod, ready);
    CHECK(cs_wait_until(exists, ready, 30000));

    /* The victim in our own mount namespace: its pod is `pod`. */
    pid_t vic = cs_fork_tied();
    if (vic == 0) {
        char *a[] = {(char *)cs_test_self(), "victim", path, NULL};
        execv(a[0], a);
        _exit(127);
    }
    pid_t rd = in_pod("read", dir, "", "");
    int rc = cs_exit_code(cs_wait_child(rd, 60000));
    kill(vic, SIGKILL);
    kill(att, SIGKILL);
    waitpid(vic, NULL, 0);
    waitpid(att, NULL, 0);
    unlink(ready);
    CHECK_EQ(rc, 0);
    printf("limiter_board_pod: ok\n");
    return 0;
}
