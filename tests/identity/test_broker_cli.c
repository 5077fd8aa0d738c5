/*
 * `cushare broker` as a process: readiness line and ready file, a client
 * served, the metrics file refreshed every second, clean SIGTERM shutdown
 * (socket unlinked, ready file removed, exit 0), usage errors exit 2; under
 * a low descriptor limit the table and the per-uid cap shrink to fit.
 */
#include "id_test.h"
#include <sys/resource.h>

static char cli[512];

/* nofile > 0: the broker's RLIMIT_NOFILE, soft and hard. */
static pid_t start_broker_limited(char *const argv[], int err_fd, rlim_t nofile)
{
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {nofile, nofile};
        if (nofile && setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(126);
        dup2(err_fd, STDERR_FILENO);
        execv(cli, argv);
        _exit(127);
    }
    return pid;
}

static pid_t start_broker(char *const argv[], int err_fd)
{
    return start_broker_limited(argv, err_fd, 0);
}

static int run_usage(char *const argv[])
{
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t pid = start_broker(argv, devnull);
    close(devnull);
    return cs_exit_code(cs_wait_child(pid, 10000));
}

static bool wait_file(const char *path, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (access(path, F_OK) == 0)
            return true;
        cs_sleep_ms(1);
    }
    return false;
}

static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return n;
}

/* A hard limit of 100 descriptors: the command cannot raise it, so the
 * table shrinks to 100 - CS_BROKER_RESERVED_FDS and the per-uid cap in
 * proportion, with a warning; the broker still serves. */
static void test_fd_limit(const char *base)
{
    char sock[128], metrics[128], ready[128], errlog[128], buf[8192];
    snprintf(sock, sizeof sock, "%s/lim/hostpid/broker.sock", base);
    snprintf(metrics, sizeof metrics, "%s/lim.prom", base);
    snprintf(ready, sizeof ready, "%s/lim.ready", base);
    snprintf(errlog, sizeof errlog, "%s/lim.stderr", base);
    int err_fd = open(errlog, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(err_fd >= 0);
    char *argv[] = {"cushare", "broker", "--socket", sock, "--metrics", metrics,
                    "--ready-file", ready, NULL};
    pid_t pid = start_broker_limited(argv, err_fd, 100);
    close(err_fd);
    CHECK(wait_file(ready, (int)(5000 * cs_test_scale())));
    pid_t p;
    CHECK_EQ(id_query(sock, &p), 0);
    CHECK_EQ(p, getpid());
    CHECK(kill(pid, SIGTERM) == 0);
    CHECK_EQ(cs_exit_code(cs_wait_child(pid, 5000)), 0);
    unsigned table = 100 - CS_BROKER_RESERVED_FDS;
    unsigned per_uid = CS_BROKER_DEFAULT_PER_UID * table / CS_BROKER_DEFAULT_CONNS;
    char want[128];
    slurp(metrics, buf, sizeof buf);
    snprintf(want, sizeof want, "cushare_broker_connections_max %u\n", table);
    CHECK_CONTAINS(buf, want);
    snprintf(want, sizeof want, "cushare_broker_connections_per_uid_max %u\n", per_uid);
    CHECK_CONTAINS(buf, want);
    slurp(errlog, buf, sizeof buf);
    CHECK_CONTAINS(buf, "RLIMIT_NOFILE is 100: holding at most");
    printf("fd limit 100: table %u, per uid %u\n", table, per_uid);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    const char *bd = getenv("CS_BUILD_DIR");
    CHECK(bd != NULL);
    snprintf(cli, sizeof cli, "%s/cushare", bd);
    CHECK(access(cli, X_OK) == 0);

    char base[64], sock[128], metrics[128], ready[128], errlog[128];
    id_mkdtemp(base, sizeof base);
    snprintf(sock, sizeof sock, "%s/hostpid/broker.sock", base);
    snprintf(metrics, sizeof metrics, "%s/metrics.prom", base);
    snprintf(ready, sizeof ready, "%s/ready", base);
    snprintf(errlog, sizeof errlog, "%s/stderr", base);

    char *usage1[] = {"cushare", "broker", "--max-conns", "0", NULL};
    CHECK_EQ(run_usage(usage1), 2);
    char *usage4[] = {"cushare", "broker", "--max-conns", "4", "--max-per-uid", "5", NULL};
    CHECK_EQ(run_usage(usage4), 2);
    char *usage5[] = {"cushare", "broker", "--max-handlers", "4", NULL};   /* gone */
    CHECK_EQ(run_usage(usage5), 2);
    char *usage2[] = {"cushare", "broker", "--bogus", NULL};
    CHECK_EQ(run_usage(usage2), 2);
    char *usage3[] = {"cushare", "broker", "--socket", NULL};
    CHECK_EQ(run_usage(usage3), 2);

    int err_fd = open(errlog, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(err_fd >= 0);
    char *argv[] = {"cushare", "broker", "--socket", sock, "--metrics", metrics,
                    "--max-conns", "4", "--ready-file", ready, NULL};
    int64_t t0 = cs_now_ns();
    pid_t pid = start_broker(argv, err_fd);
    close(err_fd);
    CHECK(wait_file(ready, (int)(5000 * cs_test_scale())));
    printf("broker ready after %.1f ms\n", cs_ms_since(t0));

    char buf[8192], want[256];
    slurp(errlog, buf, sizeof buf);
    snprintf(want, sizeof want, "cushare: broker: ready on %s\n", sock);
    CHECK_CONTAINS(buf, want);

    pid_t p;
    CHECK_EQ(id_query(sock, &p), 0);
    CHECK_EQ(p, getpid());

    /* The periodic writer must pick the reply up within about a second. */
    CS_WAIT_FOR((slurp(metrics, buf, sizeof buf),
                 strstr(buf, "cushare_broker_replies_ok_total 1\n") != NULL),
                3000, "the metrics file to show the reply");
    CHECK_CONTAINS(buf, "cushare_broker_connections_max 4\n");

    CHECK(kill(pid, SIGTERM) == 0);
    CHECK_EQ(cs_exit_code(cs_wait_child(pid, 5000)), 0);
    struct stat st;
    CHECK(lstat(sock, &st) != 0 && errno == ENOENT);
    CHECK(access(ready, F_OK) != 0);
    slurp(errlog, buf, sizeof buf);
    CHECK_CONTAINS(buf, "cushare: broker: stopped\n");
    CHECK_EQ(id_query(sock, &p), -ENOENT);
    slurp(metrics, buf, sizeof buf);
    CHECK_CONTAINS(buf, "cushare_broker_accepted_total 1\n");
    test_fd_limit(base);
    cs_rmtree(base);
    printf("broker cli ok\n");
    return 0;
}
