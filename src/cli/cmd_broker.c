/*
 * `cushare broker`: the host-PID broker daemon (docs/broker.md). Runs as
 * root in the host PID namespace (a DaemonSet with hostPID: true) and
 * answers each local process's HPID v1 request with its host PID.
 *
 * Signals are this command's business, not the library's: SIGTERM/SIGINT
 * write one byte to a self-pipe that the event loop polls, so shutdown
 * happens on the main thread (unlink the socket, finish held connections,
 * final metrics) rather than in a handler. The command also owns the process's
 * descriptor limit: it raises RLIMIT_NOFILE so that the connection table
 * fits (the engine would otherwise shrink the table to the limit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "identity/identity.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static const char usage[] =
    "usage: cushare broker [--socket PATH] [--metrics PATH] [--max-conns N]\n"
    "                      [--max-per-uid N] [--ready-file PATH]\n"
    "  --socket PATH        listen here (default " CS_BROKER_SOCKET_PATH ");\n"
    "                       clients only trust the default path\n"
    "  --metrics PATH       write Prometheus text metrics here every second\n"
    "  --max-conns N        connections held at once, 1.." STR(CS_BROKER_MAX_CONNS) " (default "
    STR(CS_BROKER_DEFAULT_CONNS) ")\n"
    "  --max-per-uid N      of them held by one uid, 1..max-conns (default\n"
    "                       max-conns/" STR(CS_BROKER_PER_UID_SHARE) ", so "
    STR(CS_BROKER_DEFAULT_PER_UID) ");\n"
    "                       a uid's connections beyond it are closed at once\n"
    "  --ready-file PATH    create PATH once listening; removed at shutdown\n"
    "examples (as root, one per node; docs/node.md):\n"
    "  cushare broker\n"
    "  cushare broker --metrics /run/cushare/broker.prom --max-conns 256\n";

struct broker_args {
    struct cs_broker_server_config cfg;
    const char *ready_file;
};

/* Written by the signal handler, read by nobody else: the pipe's write end. */
static volatile sig_atomic_t stop_write_fd = -1;

static void on_stop_signal(int sig)
{
    (void)sig;
    int saved = errno;
    char b = 1;
    ssize_t w = write(stop_write_fd, &b, 1);   /* full pipe: already stopping */
    (void)w;
    errno = saved;
}

/* "--opt VALUE" or "--opt=VALUE"; returns the value or NULL. */
static const char *opt_value(const char *name, int argc, char **argv, int *i)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0' || *i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* 1..CS_BROKER_MAX_CONNS, decimal, nothing trailing. */
static int parse_count(const char *v, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || n < 1 || n > CS_BROKER_MAX_CONNS)
        return -1;
    *out = (unsigned)n;
    return 0;
}

static int parse_args(int argc, char **argv, struct broker_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return -1;
        } else if ((v = opt_value("--socket", argc, argv, &i))) {
            a->cfg.socket_path = v;
        } else if ((v = opt_value("--metrics", argc, argv, &i))) {
            a->cfg.metrics_path = v;
        } else if ((v = opt_value("--ready-file", argc, argv, &i))) {
            a->ready_file = v;
        } else if ((v = opt_value("--max-conns", argc, argv, &i))) {
            if (parse_count(v, &a->cfg.max_conns))
                return cs_cli_usage_error("broker", "--max-conns wants 1..%u, got '%s'",
                                          CS_BROKER_MAX_CONNS, v);
        } else if ((v = opt_value("--max-per-uid", argc, argv, &i))) {
            if (parse_count(v, &a->cfg.max_per_uid))
                return cs_cli_usage_error("broker", "--max-per-uid wants 1..%u, got '%s'",
                                          CS_BROKER_MAX_CONNS, v);
        } else {
            return cs_cli_unknown_option("broker", argv[i], usage);
        }
    }
    unsigned conns = a->cfg.max_conns ? a->cfg.max_conns : CS_BROKER_DEFAULT_CONNS;
    if (a->cfg.max_per_uid > conns)
        return cs_cli_usage_error("broker", "--max-per-uid %u exceeds --max-conns %u",
                                  a->cfg.max_per_uid, conns);
    return 0;
}

/* Room for the connection table plus the daemon's own descriptors, within
 * the hard limit; the engine shrinks the table (and warns) if this falls
 * short. */
static void raise_fd_limit(unsigned max_conns)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)(max_conns ? max_conns : CS_BROKER_DEFAULT_CONNS) +
                  CS_BROKER_RESERVED_FDS;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* Self-pipe plus handlers; the previous dispositions go to old[]. */
static int install_signals(int fds[2], struct sigaction old[2])
{
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return -errno;
    stop_write_fd = fds[1];
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old[0]);
    sigaction(SIGINT, &sa, &old[1]);
    return 0;
}

static void restore_signals(int fds[2], const struct sigaction old[2])
{
    sigaction(SIGTERM, &old[0], NULL);
    sigaction(SIGINT, &old[1], NULL);
    stop_write_fd = -1;
    close(fds[0]);
    close(fds[1]);
}

static int write_ready_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
    ssize_t w = write(fd, buf, (size_t)n);
    close(fd);
    return w == n ? 0 : -EIO;
}

int cs_cmd_broker(int argc, char **argv)
{
    struct broker_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? CS_EXIT_OK : rc;   /* --help, or usage error */

    int fds[2];
    struct sigaction old[2];
    if (install_signals(fds, old)) {
        fprintf(stderr, "cushare: broker: cannot create self-pipe: %s\n", strerror(errno));
        return CS_EXIT_FAIL;
    }
    raise_fd_limit(a.cfg.max_conns);
    struct cs_broker_server *s;
    rc = cs__broker_server_open(&a.cfg, &s);
    if (rc) {
        fprintf(stderr, "cushare: broker: cannot start: %s\n", strerror(-rc));
        restore_signals(fds, old);
        return CS_EXIT_FAIL;
    }
    fprintf(stderr, "cushare: broker: ready on %s\n", cs__broker_server_path(s));
    if (a.ready_file && (rc = write_ready_file(a.ready_file)) != 0)
        fprintf(stderr, "cushare: broker: cannot create ready file %s: %s\n", a.ready_file,
                strerror(-rc));
    if (!rc)
        rc = cs__broker_server_run(s, fds[0]);
    if (a.ready_file)
        unlink(a.ready_file);
    cs__broker_server_close(s);
    restore_signals(fds, old);
    if (rc) {
        fprintf(stderr, "cushare: broker: stopped: %s\n", strerror(-rc));
        return CS_EXIT_FAIL;
    }
    fprintf(stderr, "cushare: broker: stopped\n");
    return CS_EXIT_OK;
}
