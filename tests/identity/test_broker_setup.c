/*
 * Server start-up refusals: the broker must not adopt a directory another
 * user could have prepared, must not delete anything at the socket path
 * but a stale socket, and must not start twice on one directory.
 */
#include "id_test.h"

static int open_at(const char *sock, struct cs_broker_server **s)
{
    struct cs_broker_server_config cfg = {.socket_path = sock, .max_conns = 2};
    *s = NULL;
    return cs__broker_server_open(&cfg, s);
}

static void expect_refused(const char *sock, int want, const char *what)
{
    struct cs_broker_server *s;
    int rc = open_at(sock, &s);
    if (rc != want) {
        fprintf(stderr, "%s: open returned %d, want %d\n", what, rc, want);
        exit(1);
    }
    CHECK(s == NULL);
    printf("  %-40s refused (%s)\n", what, strerror(-want));
}

static void test_directory_refusals(const char *base)
{
    char dir[128], sock[160], target[128];

    snprintf(dir, sizeof dir, "%s/ww", base);
    CHECK(mkdir(dir, 0755) == 0 && chmod(dir, 0777) == 0);
    snprintf(sock, sizeof sock, "%s/broker.sock", dir);
    expect_refused(sock, -EPERM, "world-writable directory");

    snprintf(dir, sizeof dir, "%s/nobody", base);
    CHECK(mkdir(dir, 0755) == 0 && chown(dir, 65534, 65534) == 0);
    snprintf(sock, sizeof sock, "%s/broker.sock", dir);
    expect_refused(sock, -EACCES, "directory owned by uid 65534");

    snprintf(target, sizeof target, "%s/real", base);
    CHECK(mkdir(target, 0755) == 0);
    snprintf(dir, sizeof dir, "%s/link", base);
    CHECK(symlink(target, dir) == 0);
    snprintf(sock, sizeof sock, "%s/broker.sock", dir);
    expect_refused(sock, -ELOOP, "symlinked directory");
    CHECK(access(target, F_OK) == 0);

    expect_refused("relative/broker.sock", -EINVAL, "relative path");
}

static void test_socket_path_refusals(const char *base)
{
    char dir[128], sock[160], victim[160];
    snprintf(dir, sizeof dir, "%s/hostpid", base);

    /* A regular file at the socket path is left alone. */
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(sock, sizeof sock, "%s/broker.sock", dir);
    int fd = open(sock, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "keep", 4) == 4);
    close(fd);
    expect_refused(sock, -EEXIST, "regular file at socket path");
    struct stat st;
    CHECK(lstat(sock, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 4);
    unlink(sock);

    /* A symlink at the socket path is left alone, and so is its target. */
    snprintf(victim, sizeof victim, "%s/victim", base);
    fd = open(victim, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK(symlink(victim, sock) == 0);
    expect_refused(sock, -EEXIST, "symlink at socket path");
    CHECK(lstat(sock, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(access(victim, F_OK) == 0);
    unlink(sock);

    /* A socket owned by another user is not "stale": refuse. */
    int lfd = id_listen_at(sock);
    close(lfd);
    CHECK(lchown(sock, 65534, 65534) == 0);
    expect_refused(sock, -EEXIST, "socket owned by uid 65534");
    unlink(sock);
}

/* connect(2) alone: 0 when a listener exists (even one not accepting). */
static int try_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

static void test_stale_and_double(const char *base)
{
    char sock[160];
    snprintf(sock, sizeof sock, "%s/hostpid/broker.sock", base);
    /* A root-owned socket left by a dead broker is replaced. */
    int lfd = id_listen_at(sock);
    close(lfd);
    CHECK_EQ(try_connect(sock), -ECONNREFUSED);
    struct cs_broker_server *s1;
    CHECK_EQ(open_at(sock, &s1), 0);
    CHECK_EQ(try_connect(sock), 0);      /* a live listener now */
    struct stat after;
    CHECK(lstat(sock, &after) == 0);
    printf("  stale root-owned socket replaced\n");

    /* A second broker on the same directory is refused, and does not
     * touch the first one's socket. */
    char other[160];
    snprintf(other, sizeof other, "%s/hostpid/other.sock", base);
    expect_refused(other, -EBUSY, "second broker, same directory");
    expect_refused(sock, -EBUSY, "second broker, same socket");
    struct stat still;
    CHECK(lstat(sock, &still) == 0 && still.st_ino == after.st_ino);
    cs__broker_server_close(s1);
    CHECK(lstat(sock, &still) != 0 && errno == ENOENT);

    /* Missing ancestors are created; the protected directory is 0755
     * whatever the umask. */
    mode_t old = umask(077);
    char deep[160];
    snprintf(deep, sizeof deep, "%s/a/b/hostpid/broker.sock", base);
    CHECK_EQ(open_at(deep, &s1), 0);
    char ddir[160];
    snprintf(ddir, sizeof ddir, "%s/a/b/hostpid", base);
    CHECK(lstat(ddir, &still) == 0);
    CHECK_EQ(still.st_mode & 07777, 0755);
    cs__broker_server_close(s1);
    umask(old);

    struct cs_broker_server_config bad = {.socket_path = sock,
                                          .max_conns = CS_BROKER_MAX_CONNS + 1};
    CHECK_EQ(cs__broker_server_open(&bad, &s1), -EINVAL);
    bad = (struct cs_broker_server_config){.socket_path = sock, .max_conns = 2,
                                           .max_per_uid = 3};
    CHECK_EQ(cs__broker_server_open(&bad, &s1), -EINVAL);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    char base[64];
    id_mkdtemp(base, sizeof base);
    printf("server start-up:\n");
    test_directory_refusals(base);
    test_socket_path_refusals(base);
    test_stale_and_double(base);
    cs_rmtree(base);
    printf("broker setup ok\n");
    return 0;
}
