/*
 * TEST TOOL (tests/fakecuda), never shipped: fake-nvidia-cuda-mps-control,
 * a stand-in for NVIDIA's MPS control daemon and its control client, so CI
 * can drive `cushare mps` and `cushare run --mps` (CUSHARE_MPS_CONTROL) and
 * the fake libcuda can be an MPS client. The protocol (docs/mps.md, "The
 * fake control daemon"):
 *
 *   fake-nvidia-cuda-mps-control -d
 *       Starts a daemon for the pipe directory $CUDA_MPS_PIPE_DIRECTORY
 *       (default /tmp/nvidia-mps; log directory $CUDA_MPS_LOG_DIRECTORY,
 *       default /var/log/nvidia-mps, both created one level if missing).
 *       It listens on the unix stream socket <pipe>/control and writes its
 *       pid to <pipe>/nvidia-cuda-mps-control.pid, on which it holds an
 *       flock for its whole life: a second daemon on the same pipe
 *       directory finds the lock taken and exits 1 with a message. The
 *       command returns 0 once the daemon answers (socket listening, pid
 *       written), 1 if it could not start. The daemon detaches (new
 *       session, stdio on /dev/null, cwd /).
 *   fake-nvidia-cuda-mps-control            (no argument)
 *       The control client: each line of stdin is one command, sent over
 *       its own connection to <pipe>/control; the reply is printed as it
 *       comes. Exits 1 with "Cannot find MPS control daemon process" when
 *       nothing listens there, else 0.
 *
 * On the socket every connection starts with one line:
 *   client <pid>       a CUDA process (the fake libcuda at cuInit): the
 *                      daemon answers "ok <default active thread
 *                      percentage, %g>" and keeps the connection; its end
 *                      (the process exited or was killed) means the client
 *                      is gone. At most MAX_CLIENTS (48, MPS's client
 *                      limit per device since Volta); one more is answered
 *                      "error too many clients" and closed.
 *   get_server_list    the daemon's pid once a client came (it stands for
 *                      the one MPS server, which the real daemon starts for
 *                      the first client and keeps after the last one left,
 *                      until quit), nothing before
 *   get_client_list P  the clients' pids, one a line, when P is that server
 *   set_default_active_thread_percentage N   (0 < N <= 100) -> "N" (%.1f)
 *   get_default_active_thread_percentage     -> "N" (%.1f, default 100.0)
 *   quit               no reply; the daemon closes every connection,
 *                      removes its socket and pid file and exits 0
 *   anything else      "error unknown command"
 * A command connection is answered and closed. SIGTERM and SIGINT end the
 * daemon as quit does; after SIGKILL the pid file and socket stay behind
 * (stale state, which `cushare mps` cleans).
 *
 * Each event is one line of <log>/control.log ("started", "client P
 * connected", "client P gone", "command ...", "exit").
 *
 * FAKECUDA_MPS_START_US: the daemon sleeps that long before it answers
 * (the real daemon's start is not instant), widening the window in which
 * concurrent starters could race.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 48
#define MAX_CONNS 64            /* clients plus command connections */
#define LINE_MAX_LEN 256
#define PID_FILE "nvidia-cuda-mps-control.pid"

enum conn_kind { CONN_FREE, CONN_NEW, CONN_CLIENT };

struct conn {
    enum conn_kind kind;
    int fd;
    long pid;                   /* CONN_CLIENT: the pid it announced */
    size_t len;
    char buf[LINE_MAX_LEN];
};

/* The daemon's state: its event loop is its only thread. */
static struct daemon {
    char pipe_dir[PATH_MAX], log_dir[PATH_MAX];
    char sock_path[PATH_MAX + 16], pid_path[PATH_MAX + 32];
    int listen_fd, sig_fd, pid_fd, log_fd;
    double default_pct;
    int nclients;
    bool server_up;             /* a client came once: the server runs on */
    bool quitting;
    struct conn conns[MAX_CONNS];
} D = {.listen_fd = -1, .sig_fd = -1, .pid_fd = -1, .log_fd = -1, .default_pct = 100.0};

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* One "[date time] event" line of control.log; silent when it cannot. */
static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    if (D.log_fd < 0)
        return;
    char line[512];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "[%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03ld] ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(D.log_fd, line, (size_t)n) < 0) {
        /* a full disk loses log lines, never the daemon */
    }
}

static int socket_address(const char *path, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a->sun_path) {
        fprintf(stderr, "fake-nvidia-cuda-mps-control: socket path %s is longer than %zu bytes\n",
                path, sizeof a->sun_path - 1);
        return -1;
    }
    strcpy(a->sun_path, path);
    return 0;
}

/* ---- the control client ------------------------------------------------- */

static int connect_control(const char *pipe_dir)
{
    char path[PATH_MAX];
    struct sockaddr_un a;
    snprintf(path, sizeof path, "%s/control", pipe_dir);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || socket_address(path, &a) || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Sends one command, copies the reply to stdout until the daemon closes. */
static int client_command(const char *pipe_dir, const char *line)
{
    int fd = connect_control(pipe_dir);
    if (fd < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    size_t len = strlen(line);
    if (send(fd, line, len, MSG_NOSIGNAL) != (ssize_t)len || send(fd, "\n", 1, MSG_NOSIGNAL) != 1) {
        close(fd);
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            fwrite(buf, 1, (size_t)n, stdout);
    close(fd);
    fflush(stdout);
    return 0;
}

static int run_client(void)
{
    const char *pipe_dir = env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
    char line[LINE_MAX_LEN + 2];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            rc = client_command(pipe_dir, line);
    }
    return rc;
}

/* ---- the daemon: connections ---------------------------------------------- */

static void reply(struct conn *c, const char *text)
{
    size_t len = strlen(text);
    if (len && send(c->fd, text, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len)
        logf_("reply of %zu bytes not delivered", len);
}

static void conn_close(struct conn *c)
{
    if (c->kind == CONN_CLIENT) {
        D.nclients--;
        logf_("client %ld gone (%d clients)", c->pid, D.nclients);
    }
    close(c->fd);
    c->kind = CONN_FREE;
    c->fd = -1;
}

static void register_client(struct conn *c, const char *arg)
{
    char *end;
    errno = 0;
    long pid = strtol(arg, &end, 10);
    if (errno || end == arg || *end || pid <= 0) {
        reply(c, "error bad pid\n");
        logf_("refused client '%s': not a pid", arg);
        conn_close(c);
        return;
    }
    if (D.nclients >= MAX_CLIENTS) {
        reply(c, "error too many clients\n");
        logf_("refused client %ld: %d clients already (the limit)", pid, D.nclients);
        conn_close(c);
        return;
    }
    char ok[64];
    snprintf(ok, sizeof ok, "ok %g\n", D.default_pct);
    c->kind = CONN_CLIENT;
    c->pid = pid;
    D.nclients++;
    D.server_up = true;
    reply(c, ok);
    logf_("client %ld connected (%d clients)", pid, D.nclients);
}

static void client_list(char *out, size_t len, const char *arg)
{
    out[0] = '\0';
    char *end;
    long server = strtol(arg, &end, 10);
    if (end == arg || *end || server != (long)getpid() || !D.server_up)
        return;
    size_t o = 0;
    for (int i = 0; i < MAX_CONNS && o < len; i++)
        if (D.conns[i].kind == CONN_CLIENT)
            o += (size_t)snprintf(out + o, len - o, "%ld\n", D.conns[i].pid);
}

static void set_default_pct(char *out, size_t len, const char *arg)
{
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v > 0 && v <= 100)) {
        snprintf(out, len, "error percentage must be in (0, 100]\n");
        return;
    }
    D.default_pct = v;
    snprintf(out, len, "%.1f\n", v);
}

/* A command connection's line: answered, then closed. */
static void command(struct conn *c, char *line)
{
    char out[MAX_CLIENTS * 24 + 64] = "";
    char *arg = strchr(line, ' ');
    if (arg)
        *arg++ = '\0';
    else
        arg = line + strlen(line);
    if (!strcmp(line, "client")) {
        register_client(c, arg);
        return;
    }
    logf_("command %s%s%s", line, *arg ? " " : "", arg);
    if (!strcmp(line, "get_server_list")) {
        if (D.server_up)
            snprintf(out, sizeof out, "%d\n", (int)getpid());
    } else if (!strcmp(line, "get_client_list")) {
        client_list(out, sizeof out, arg);
    } else if (!strcmp(line, "set_default_active_thread_percentage")) {
        set_default_pct(out, sizeof out, arg);
    } else if (!strcmp(line, "get_default_active_thread_percentage")) {
        snprintf(out, sizeof out, "%.1f\n", D.default_pct);
    } else if (!strcmp(line, "quit")) {
        D.quitting = true;
    } else {
        snprintf(out, sizeof out, "error unknown command\n");
    }
    reply(c, out);
    conn_close(c);
}

static void conn_readable(struct conn *c)
{
    if (c->kind == CONN_CLIENT) {
        char scratch[256];
        ssize_t n = read(c->fd, scratch, sizeof scratch);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            conn_close(c); /* the client process is gone */
        return;
    }
    ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    char *nl = memchr(c->buf, '\n', c->len);
    if (!nl) {
        if (c->len == sizeof c->buf) {
            logf_("dropped a connection: line longer than %d bytes", LINE_MAX_LEN);
            conn_close(c);
        }
        return;
    }
    *nl = '\0';
    if (nl > c->buf && nl[-1] == '\r')
        nl[-1] = '\0';
    command(c, c->buf);
}

static void accept_one(void)
{
    int fd = accept4(D.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = 0; i < MAX_CONNS; i++)
        if (D.conns[i].kind == CONN_FREE) {
            D.conns[i] = (struct conn){.kind = CONN_NEW, .fd = fd};
            return;
        }
    logf_("refused a connection: %d connections open", MAX_CONNS);
    close(fd);
}

/* ---- the daemon: life ------------------------------------------------------ */

static void daemon_exit(void)
{
    unlink(D.sock_path);
    close(D.listen_fd);
    for (int i = 0; i < MAX_CONNS; i++)
        if (D.conns[i].kind != CONN_FREE)
            conn_close(&D.conns[i]);
    /* The pid file last: while it names us, nobody else starts here. */
    unlink(D.pid_path);
    logf_("exit");
    exit(0);
}

static void event_loop(void)
{
    struct pollfd p[2 + MAX_CONNS];
    int who[2 + MAX_CONNS];
    while (!D.quitting) {
        int n = 0;
        p[n++] = (struct pollfd){.fd = D.listen_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = D.sig_fd, .events = POLLIN};
        for (int i = 0; i < MAX_CONNS; i++)
            if (D.conns[i].kind != CONN_FREE) {
                who[n] = i;
                p[n++] = (struct pollfd){.fd = D.conns[i].fd, .events = POLLIN};
            }
        if (poll(p, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            logf_("poll: %s", strerror(errno));
            break;
        }
        if (p[1].revents) {
            struct signalfd_siginfo si;
            if (read(D.sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
                logf_("signal %u", si.ssi_signo);
            break;
        }
        for (int k = 2; k < n && !D.quitting; k++)
            if (p[k].revents && D.conns[who[k]].kind != CONN_FREE)
                conn_readable(&D.conns[who[k]]);
        if (p[0].revents && !D.quitting)
            accept_one();
    }
    daemon_exit();
}

/* In the daemon (the forked child): detach, write the pid, tell the
 * starter it answers now, serve. */
static void daemon_main(int ready_fd)
{
    setsid();
    if (chdir("/")) {
        /* "/" always exists */
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    D.sig_fd = signalfd(-1, &set, SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);
    long start_us = atol(env_or("FAKECUDA_MPS_START_US", "0"));
    if (start_us > 0) {
        struct timespec ts = {start_us / 1000000, (start_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) && errno == EINTR) {
        }
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (D.sig_fd < 0 || ftruncate(D.pid_fd, 0) || pwrite(D.pid_fd, pid, (size_t)len, 0) != len)
        _exit(1); /* the starter reads EOF: not started */
    logf_("started: pid %d, pipe directory %s", (int)getpid(), D.pipe_dir);
    if (write(ready_fd, "r", 1) != 1)
        logf_("the starter went away");
    close(ready_fd);
    event_loop();
}

static int make_dir(const char *dir)
{
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "fake-nvidia-cuda-mps-control: cannot create %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* Takes the pipe directory (lock, socket), forks the daemon, returns once
 * it answers. */
static int start_daemon(void)
{
    snprintf(D.pipe_dir, sizeof D.pipe_dir, "%s", env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"));
    snprintf(D.log_dir, sizeof D.log_dir, "%s", env_or("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"));
    snprintf(D.sock_path, sizeof D.sock_path, "%s/control", D.pipe_dir);
    snprintf(D.pid_path, sizeof D.pid_path, "%s/" PID_FILE, D.pipe_dir);
    if (make_dir(D.pipe_dir) || make_dir(D.log_dir))
        return 1;
    char log_path[PATH_MAX + 16];
    snprintf(log_path, sizeof log_path, "%s/control.log", D.log_dir);
    D.log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    D.pid_fd = open(D.pid_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (D.pid_fd < 0) {
        fprintf(stderr, "fake-nvidia-cuda-mps-control: cannot open %s: %s\n", D.pid_path,
                strerror(errno));
        return 1;
    }
    /* The lock is the daemon's for its whole life: fork shares it. */
    if (flock(D.pid_fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "An instance of this daemon is already running (pipe directory %s)\n",
                D.pipe_dir);
        logf_("refused a second daemon");
        return 1;
    }
    struct sockaddr_un a;
    if (socket_address(D.sock_path, &a))
        return 1;
    unlink(D.sock_path); /* a dead daemon's; the lock says none lives */
    D.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (D.listen_fd < 0 || bind(D.listen_fd, (struct sockaddr *)&a, sizeof a) ||
        listen(D.listen_fd, 64)) {
        fprintf(stderr, "fake-nvidia-cuda-mps-control: cannot listen on %s: %s\n", D.sock_path,
                strerror(errno));
        return 1;
    }
    int ready[2];
    if (pipe2(ready, O_CLOEXEC))
        return 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(ready[0]);
        daemon_main(ready[1]);
    }
    close(ready[1]);
    char c;
    ssize_t n;
    while ((n = read(ready[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) {
        fprintf(stderr, "fake-nvidia-cuda-mps-control: the daemon did not start\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "-d"))
        return start_daemon();
    if (argc == 1)
        return run_client();
    fprintf(stderr, "usage: fake-nvidia-cuda-mps-control [-d]   (commands on stdin without -d)\n");
    return 2;
}
