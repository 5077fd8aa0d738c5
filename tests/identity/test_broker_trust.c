/*
 * Trust checks of the broker client. Each case breaks exactly one property
 * of an otherwise working broker (a real one is listening), asserts the
 * specific errno, that no PID came back, and that identity resolution fell
 * back to the probe recording that errno; then repairs the property and
 * asserts the query works again, so the check (not a broken setup) is what
 * refused.
 */
#include "id_test.h"
#include <grp.h>

#define NOBODY 65534

static int probe_4242(void *ctx, pid_t *out)
{
    (void)ctx;
    *out = 4242;
    return 0;
}

/* The query fails with `want`, returns no PID, and the resolver falls back
 * to the probe with that reason. */
static void expect_rejected(const char *path, int want, const char *what)
{
    pid_t p;
    int rc = id_query(path, &p);
    if (rc != want) {
        fprintf(stderr, "%s: query returned %d (%s), want %d (%s)\n", what, rc,
                cs__broker_reason(rc), want, cs__broker_reason(want));
        exit(1);
    }
    CHECK_EQ(p, ID_SENTINEL);

    struct cs_broker_query_opts bo = {.socket_path = path};
    struct cs_identity_config cfg = {.broker = true, .probe = probe_4242, .broker_test = &bo};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), 0);
    CHECK_EQ(r.tier, CS_IDENTITY_PROBE);
    CHECK_EQ(r.host_pid, 4242);
    CHECK_EQ(r.reason, want);
    CHECK_EQ(r.reason_tier, CS_IDENTITY_BROKER);
    CHECK_EQ(r.err[CS_IDENTITY_BROKER], want);
    printf("  %-34s -> %s\n", what, cs__broker_reason(want));
}

static void expect_ok(const char *path)
{
    pid_t p;
    CHECK_EQ(id_query(path, &p), 0);
    CHECK_EQ(p, getpid());
}

static void test_directory_modes(struct id_broker *b, const char *dir)
{
    CHECK(chmod(dir, 0777) == 0);
    expect_rejected(b->sock, -EPERM, "world-writable directory");
    CHECK(chmod(dir, 0775) == 0);
    expect_rejected(b->sock, -EPERM, "group-writable directory");
    CHECK(chmod(dir, 0757) == 0);
    expect_rejected(b->sock, -EPERM, "other-writable directory");
    CHECK(chmod(dir, 0755) == 0);
    expect_ok(b->sock);
}

static void test_owners(struct id_broker *b, const char *dir)
{
    CHECK(lchown(b->sock, NOBODY, NOBODY) == 0);
    expect_rejected(b->sock, -EACCES, "socket owned by uid 65534");
    CHECK(lchown(b->sock, 0, 0) == 0);
    expect_ok(b->sock);

    CHECK(chown(dir, NOBODY, NOBODY) == 0);
    expect_rejected(b->sock, -EACCES, "directory owned by uid 65534");
    CHECK(chown(dir, 0, 0) == 0);
    expect_ok(b->sock);
}

static void test_symlinks(struct id_broker *b)
{
    /* A symlink to the real, working socket, in a trusted directory. */
    char link[160];
    snprintf(link, sizeof link, "%s/link.sock", b->dir);
    CHECK(symlink(b->sock, link) == 0);
    CHECK(chmod(b->dir, 0755) == 0);
    expect_rejected(link, -ELOOP, "symlinked socket");
    unlink(link);

    /* A symlinked directory whose target is the real, trusted one. */
    char linkdir[160], via[200];
    snprintf(linkdir, sizeof linkdir, "%s/linkdir", b->dir);
    char target[160];
    snprintf(target, sizeof target, "%s/hostpid", b->dir);
    CHECK(symlink(target, linkdir) == 0);
    snprintf(via, sizeof via, "%s/broker.sock", linkdir);
    expect_rejected(via, -ELOOP, "symlinked directory");
    unlink(linkdir);
}

static void test_not_socket_missing_stale(struct id_broker *b)
{
    char path[160];
    snprintf(path, sizeof path, "%s/hostpid/regular", b->dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    close(fd);
    expect_rejected(path, -ENOTSOCK, "regular file at socket path");
    unlink(path);

    snprintf(path, sizeof path, "%s/hostpid/absent.sock", b->dir);
    int64_t t0 = cs_now_ns();
    pid_t p;
    CHECK_EQ(id_query(path, &p), -ENOENT);
    double ms = cs_ms_since(t0);
    printf("  missing socket answered in %.3f ms\n", ms);
    CHECK_LT(ms, 50 * cs_test_scale());
    expect_rejected(path, -ENOENT, "missing socket");

    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s/nodir/broker.sock", b->dir);
    expect_rejected(nodir, -ENOENT, "missing directory");

    /* A root-owned socket nobody listens on (a dead broker's leftover). */
    snprintf(path, sizeof path, "%s/hostpid/stale.sock", b->dir);
    int lfd = id_listen_at(path);
    close(lfd);
    expect_rejected(path, -ECONNREFUSED, "stale socket, no listener");
    unlink(path);

    /* Parent is a file, not a directory. */
    snprintf(path, sizeof path, "%s/hostpid/file", b->dir);
    fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    close(fd);
    char under[200];
    snprintf(under, sizeof under, "%s/broker.sock", path);
    expect_rejected(under, -ENOTDIR, "parent is a regular file");
    unlink(path);
}

/* A correct-looking broker whose listener dropped root before listen():
 * the socket file is root's, the frames are valid, the PID is wrong. */
static void test_listener_not_root(struct id_broker *b)
{
    char path[160];
    snprintf(path, sizeof path, "%s/hostpid/nonroot.sock", b->dir);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = cs_fork_tied();
    CHECK(child >= 0);
    if (child == 0) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        CHECK(strlen(path) < sizeof sa.sun_path);
        memcpy(sa.sun_path, path, strlen(path) + 1);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            chmod(path, 0666) != 0 || setgroups(0, NULL) != 0 ||
            setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0 ||
            listen(fd, 16) != 0)
            _exit(2);
        char c = 1;
        if (write(ready[1], &c, 1) != 1)
            _exit(3);
        for (;;) {
            int cfd = accept(fd, NULL, NULL);
            if (cfd < 0)
                continue;
            uint8_t req[8], resp[12];
            ssize_t n = recv(cfd, req, sizeof req, MSG_WAITALL);
            (void)n;
            cs__hpid_encode_response(resp, CS_HPID_OK, 8011);
            n = send(cfd, resp, sizeof resp, MSG_NOSIGNAL);
            close(cfd);
        }
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    struct stat st;
    CHECK(lstat(path, &st) == 0);
    CHECK_EQ(st.st_uid, 0);              /* the file looks trusted */
    expect_rejected(path, -EKEYREJECTED, "listener not root (SO_PEERCRED)");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    unlink(path);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    struct id_broker b;
    id_broker_start(&b, 4, NULL);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/hostpid", b.dir);
    expect_ok(b.sock);

    printf("rejections (a working broker listens in every case):\n");
    test_directory_modes(&b, dir);
    test_owners(&b, dir);
    test_symlinks(&b);
    test_not_socket_missing_stale(&b);
    test_listener_not_root(&b);
    expect_ok(b.sock);

    id_broker_stop(&b);
    printf("broker trust checks ok\n");
    return 0;
}
