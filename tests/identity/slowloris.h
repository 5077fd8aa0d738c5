/*
 * A slowloris against `cushare broker`, shared by the regression test
 * (tests/identity/test_broker_slowloris.c) and the benchmark
 * (bench/broker_slowloris.c): a throwaway unprivileged user made with
 * useradd, a broker started as its own process through the command (so
 * the same test runs against any build, old or new), an attacker child
 * that drops to that user and holds N idle connections, legitimate
 * queries from root through the real client, and the broker's own
 * counters read back from its metrics file.
 *
 * Everything is black-box on purpose: it needs only the command line and
 * the wire protocol, both unchanged since c17f7cb, so the regression test
 * compiles and runs against the broker it was written to catch.
 */
#ifndef CS_TESTS_IDENTITY_SLOWLORIS_H
#define CS_TESTS_IDENTITY_SLOWLORIS_H

#include "id_test.h"

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <sys/inotify.h>
#include <sys/resource.h>

/* Raises RLIMIT_NOFILE to at least `want` (the hard limit too when root
 * may); returns the soft limit now in force. Children inherit it. */
ID_HELPER rlim_t sl_raise_nofile(rlim_t want)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rlim_t before = rl.rlim_cur;
    if (rl.rlim_cur >= want)
        return rl.rlim_cur;
    if (rl.rlim_max < want) {
        struct rlimit hard = {want, want};
        if (setrlimit(RLIMIT_NOFILE, &hard) == 0) {
            printf("RLIMIT_NOFILE raised from %llu to %llu (hard limit too)\n",
                   (unsigned long long)before, (unsigned long long)want);
            return want;
        }
        want = rl.rlim_max;
    }
    rl.rlim_cur = want;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    printf("RLIMIT_NOFILE raised from %llu to %llu\n", (unsigned long long)before,
           (unsigned long long)want);
    return want;
}

/* --- the throwaway user ---------------------------------------------------- */

struct sl_user {
    char name[32];
    uid_t uid;
    gid_t gid;
    bool made;                          /* useradd succeeded: userdel at the end */
};

/* Creates the user; 0, or -1 with the reason for skipping in why. Other
 * tests may hold /etc/passwd's lock (useradd exits 1 or 10 then): retry. */
ID_HELPER int sl_user_create(struct sl_user *u, char *why, size_t cap)
{
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "cs-slow-%d", (int)getpid());
    char *argv[] = {"useradd", "--system", "--no-create-home", "--user-group",
                    "--shell", "/usr/sbin/nologin", u->name, NULL};
    int rc = -1;
    for (int attempt = 0; attempt < 5; attempt++) {
        rc = cs_run(argv, false);
        if (rc == 0 || rc == 127)
            break;
        cs_sleep_ms(200 << attempt);    /* back off: another useradd holds the lock */
    }
    if (rc != 0) {
        snprintf(why, cap, rc == 127 ? "useradd is not installed: cannot make a throwaway user"
                                     : "useradd %s failed (exit %d): cannot make a throwaway user",
                 u->name, rc);
        return -1;
    }
    u->made = true;
    struct passwd *pw = getpwnam(u->name);
    if (!pw || pw->pw_uid == 0) {
        snprintf(why, cap, "useradd made %s but getpwnam cannot see it", u->name);
        return -1;
    }
    u->uid = pw->pw_uid;
    u->gid = pw->pw_gid;
    return 0;
}

/* userdel refuses while the user owns processes: reap them first. */
ID_HELPER void sl_user_delete(struct sl_user *u)
{
    if (!u->made)
        return;
    char *argv[] = {"userdel", u->name, NULL};
    int rc = cs_run(argv, false);
    for (int attempt = 0; rc != 0 && rc != 127 && attempt < 5; attempt++) {
        cs_sleep_ms(200 << attempt);    /* /etc/passwd locked by another test */
        rc = cs_run(argv, false);
    }
    if (rc != 0)
        fprintf(stderr, "warning: userdel %s failed (exit %d): remove it by hand\n", u->name, rc);
    u->made = false;
}

/* Drops this process to the user for good (no way back to root), and
 * re-arms the parent-death signal, which a credential change clears. */
ID_HELPER int sl_drop_to(const struct sl_user *u, pid_t parent)
{
    if (setgroups(0, NULL) != 0 || setresgid(u->gid, u->gid, u->gid) != 0 ||
        setresuid(u->uid, u->uid, u->uid) != 0)
        return -1;
    if (getuid() != u->uid || geteuid() != u->uid || setuid(0) == 0)
        return -1;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    return getppid() == parent ? 0 : -1;
}

/* --- the broker, as its own process ----------------------------------------- */

struct sl_broker {
    pid_t pid;
    int err_fd;                         /* read end of its stderr */
    char dir[64], sock[128], metrics[128];
    char err[16384];                    /* its stderr, once it exited */
    char final_metrics[8192];           /* written at shutdown */
};

/* Reads the broker's stderr until `want` appears or the deadline. */
ID_HELPER bool sl_read_until(struct sl_broker *b, size_t *len, const char *want, int64_t deadline)
{
    while (!strstr(b->err, want)) {
        int64_t left = (deadline - cs_now_ns()) / 1000000;
        struct pollfd p = {.fd = b->err_fd, .events = POLLIN};
        if (left <= 0 || *len >= sizeof b->err - 1 || poll(&p, 1, (int)left) <= 0)
            return false; /* past the deadline, or the buffer is full without it */
        ssize_t n = read(b->err_fd, b->err + *len, sizeof b->err - 1 - *len);
        if (n <= 0)
            return false;
        *len += (size_t)n;
        b->err[*len] = '\0';
    }
    return true;
}

/* Starts `cli broker` on a fresh trusted directory; returns once it said
 * "ready" (the listener exists and is root's). */
ID_HELPER void sl_broker_start(struct sl_broker *b, const char *cli)
{
    memset(b, 0, sizeof *b);
    id_mkdtemp(b->dir, sizeof b->dir);
    snprintf(b->sock, sizeof b->sock, "%s/hostpid/broker.sock", b->dir);
    snprintf(b->metrics, sizeof b->metrics, "%s/broker.prom", b->dir);
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    b->pid = cs_fork_tied();
    CHECK(b->pid >= 0);
    if (b->pid == 0) {
        dup2(p[1], STDERR_FILENO);
        execl(cli, "cushare", "broker", "--socket", b->sock, "--metrics", b->metrics,
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    b->err_fd = p[0];
    size_t len = 0;
    if (!sl_read_until(b, &len, "ready on", cs_now_ns() + (int64_t)(10000 * cs_test_scale()) * 1000000)) {
        fprintf(stderr, "broker did not become ready; its stderr:\n%s\n", b->err);
        exit(1);
    }
}

ID_HELPER size_t sl_slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return n;
}

/* SIGTERM, exit 0 required; keeps its stderr and final metrics. */
ID_HELPER void sl_broker_stop(struct sl_broker *b)
{
    CHECK(kill(b->pid, SIGTERM) == 0);
    int st = cs_wait_child(b->pid, 10000);
    b->pid = 0;
    size_t len = strlen(b->err);
    ssize_t n;
    while (len < sizeof b->err - 1 && (n = read(b->err_fd, b->err + len, sizeof b->err - 1 - len)) > 0)
        len += (size_t)n;
    b->err[len] = '\0';
    close(b->err_fd);
    if (cs_exit_code(st) != 0) {
        fprintf(stderr, "broker exit status %d; its stderr:\n%s\n", st, b->err);
        exit(1);
    }
    sl_slurp(b->metrics, b->final_metrics, sizeof b->final_metrics);
    cs_rmtree(b->dir);
}

/* Value of an unlabelled (or exactly labelled) sample, -1 if absent. */
ID_HELPER double sl_metric(const char *text, const char *sample)
{
    size_t n = strlen(sample);
    for (const char *p = text; (p = strstr(p, sample)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return atof(p + n + 1);
    return -1;
}

/* Waits until the broker's metrics file shows sample >= total - ref (ref
 * present and positive), or timeout_ms; returns the last value of sample.
 * Event-driven: the broker renames a fresh file into place every second,
 * and inotify reports each rename. */
ID_HELPER double sl_wait_metric(const struct sl_broker *b, const char *sample, const char *ref,
                                double total, int timeout_ms)
{
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    CHECK(in >= 0);
    CHECK(inotify_add_watch(in, b->dir, IN_MOVED_TO) >= 0);
    int64_t deadline = cs_now_ns() + (int64_t)timeout_ms * 1000000;
    char buf[8192];
    double v = -1;
    for (;;) {
        sl_slurp(b->metrics, buf, sizeof buf);
        v = sl_metric(buf, sample);
        double r = sl_metric(buf, ref);
        if (r > 0 && v >= total - r)
            break;
        int64_t left = (deadline - cs_now_ns()) / 1000000;
        struct pollfd p = {.fd = in, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        char ev[4096];
        while (read(in, ev, sizeof ev) > 0)
            ;
    }
    close(in);
    return v;
}

/* Open file descriptors of a process (its /proc/PID/fd entries). */
ID_HELPER int sl_count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* --- the attacker ------------------------------------------------------------ */

/* Written by the attacker only, read by the parent after reaping it. */
struct sl_attack_stats {
    uint64_t connects;                  /* connect(2) succeeded */
    uint64_t closed_by_broker;          /* a held connection saw EOF/HUP */
    uint64_t backlog_full;              /* connect(2) said EAGAIN */
    int error;                          /* nonzero: could not start */
};

struct sl_attack {
    pid_t pid;
    int ready[2];                       /* attacker -> parent: all N connected */
    int stop[2];                        /* parent -> attacker: hang up */
    struct sl_attack_stats *stats;      /* shared memory */
};

/* Nonblocking connect: 0, -EAGAIN (backlog full) or another -errno. Odd
 * connections also send 3 bytes of a request: a frame begun and never
 * finished must not buy more time than silence. */
ID_HELPER int sl_connect_one(const char *sock, int i, int *out)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (i % 2) {
        ssize_t w = send(fd, "HPI", 3, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    *out = fd;
    return 0;
}

/* The attacker's loop: keep n connections open; in churn mode, reconnect
 * each one the broker closes (a real slowloris), else leave it closed.
 * p[0] is the stop pipe; p[1..n] the connections (fd -1: to connect,
 * -2: given up in hold mode). */
ID_HELPER int sl_attack_loop(const char *sock, int n, bool churn, struct sl_attack *a)
{
    struct pollfd *p = calloc((size_t)n + 1, sizeof *p);
    bool *ever = calloc((size_t)n + 1, sizeof *ever);  /* slot i connected once */
    if (!p || !ever)
        return -ENOMEM;
    p[0] = (struct pollfd){.fd = a->stop[0], .events = POLLIN};
    for (int i = 1; i <= n; i++)
        p[i] = (struct pollfd){.fd = -1, .events = POLLIN};
    int first_connected = 0;            /* slots connected at least once */
    for (;;) {
        bool waiting = false;
        for (int i = 1; i <= n; i++) {
            if (p[i].fd != -1)
                continue;
            int rc = sl_connect_one(sock, i, &p[i].fd);
            if (rc == -EAGAIN) {
                a->stats->backlog_full++;
                waiting = true;
            } else if (rc) {
                return rc;
            } else {
                a->stats->connects++;
                first_connected += !ever[i];
                ever[i] = true;
            }
        }
        if (first_connected == n) {
            char c = 1;
            if (write(a->ready[1], &c, 1) != 1)
                return -EPIPE;
            first_connected = -1;       /* announced once */
        }
        /* Backlog full: retry connects in a millisecond. */
        if (poll(p, (nfds_t)n + 1, waiting ? 1 : -1) < 0 && errno != EINTR)
            return -errno;
        for (int i = 1; i <= n; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            a->stats->closed_by_broker++;
            close(p[i].fd);
            p[i].fd = churn ? -1 : -2;
        }
        if (p[0].revents)
            return 0;
    }
}

/* Forks the attacker as user u; returns once it holds n connections. */
ID_HELPER void sl_attack_start(struct sl_attack *a, const struct sl_user *u, const char *sock,
                               int n, bool churn)
{
    memset(a, 0, sizeof *a);
    a->stats = cs_shared(sizeof *a->stats);
    CHECK(pipe2(a->ready, O_CLOEXEC) == 0 && pipe2(a->stop, O_CLOEXEC) == 0);
    pid_t parent = getpid();
    a->pid = cs_fork_tied();
    CHECK(a->pid >= 0);
    if (a->pid == 0) {
        if (sl_drop_to(u, parent) != 0) {
            a->stats->error = 1;
            _exit(2);
        }
        int rc = sl_attack_loop(sock, n, churn, a);
        a->stats->error = rc;
        _exit(rc ? 3 : 0);
    }
    char c;
    struct pollfd p = {.fd = a->ready[0], .events = POLLIN};
    if (poll(&p, 1, (int)(20000 * cs_test_scale())) != 1 || read(a->ready[0], &c, 1) != 1) {
        fprintf(stderr, "attacker (uid %u) never held its %d connections (error %d)\n",
                (unsigned)u->uid, n, a->stats->error);
        exit(1);
    }
}

/* Hangs up every connection and reaps the attacker; exit 0 required. */
ID_HELPER void sl_attack_stop(struct sl_attack *a)
{
    char c = 1;
    CHECK(write(a->stop[1], &c, 1) == 1);
    int st = cs_wait_child(a->pid, 10000);
    a->pid = 0;
    close(a->ready[0]);
    close(a->ready[1]);
    close(a->stop[0]);
    close(a->stop[1]);
    if (cs_exit_code(st) != 0) {
        fprintf(stderr, "attacker failed: status %d, error %d\n", st, a->stats->error);
        exit(1);
    }
}

/* SIGKILL and reap (cleanup after a failed check): userdel needs the
 * user's processes gone. */
ID_HELPER void sl_kill(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

/* --- legitimate queries ------------------------------------------------------- */

struct sl_queries {
    int n, ok;
    int first_err;                      /* first failure's errno (negative) */
    int max_fds;                        /* most fds the broker held, sampled per query */
    double ms[1024];
};

/* n sequential queries through the real client with deadline timeout_ms;
 * each must return our own PID. Samples the broker's fd count between
 * queries (the attack goes on meanwhile). */
ID_HELPER void sl_query_many(struct sl_queries *q, const char *sock, int n, int timeout_ms,
                             pid_t broker)
{
    CHECK(n <= (int)(sizeof q->ms / sizeof q->ms[0]));
    q->n = n;
    for (int i = 0; i < n; i++) {
        pid_t p;
        int64_t t0 = cs_now_ns();
        int rc = id_query_timeout(sock, timeout_ms, &p);
        q->ms[i] = cs_ms_since(t0);
        if (rc == 0 && p == getpid())
            q->ok++;
        else if (!q->first_err)
            q->first_err = rc ? rc : -ERANGE;
        int fds = sl_count_fds(broker);
        if (fds > q->max_fds)
            q->max_fds = fds;
    }
}

#endif
