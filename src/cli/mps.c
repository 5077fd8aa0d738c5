/*
 * cushare's MPS control daemons (mps.h, docs/mps.md): finding the GPU and
 * the binary, asking the daemon (a second invocation of the binary with
 * the command on its stdin, bounded), and starting, joining and stopping
 * it under the GPU's lock.
 *
 * Whose is the daemon: the pid in <pipe>/nvidia-cuda-mps-control.pid,
 * when that process lives (a zombie does not) and its comm is the control
 * binary's name. A pid that lives but is another program is a reused pid:
 * stale state, as a dead one.
 */
#define _GNU_SOURCE
#include "cli/mps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/node_model.h"
#include "cli/text.h"
#include "core/clock.h"
#include "core/config.h"

extern char **environ;

static void fail_msg(const struct cs_mps *m, const char *uuid, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_msg(const struct cs_mps *m, const char *uuid, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cushare: %s: %s: ", m->cmd, uuid);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *cs_mps_state_name(enum cs_mps_state s)
{
    switch (s) {
    case CS_MPS_RUNNING: return "running";
    case CS_MPS_UNRESPONSIVE: return "unresponsive";
    case CS_MPS_STALE: return "stale";
    default: return "stopped";
    }
}

/* ---- set-up: directory, binary, GPUs ---------------------------------- */

/* `name` with a '/' is a path; else the first executable in PATH. */
static bool find_binary(const char *name, char *out, size_t len)
{
    if (strchr(name, '/')) {
        snprintf(out, len, "%s", name);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        if ((size_t)snprintf(out, len, "%.*s/%s", (int)n, n ? p : ".", name) < len &&
            access(out, X_OK) == 0)
            return true;
        p += n;
        if (*p)
            p++;
    }
    out[0] = '\0';
    return false;
}

int cs_mps_setup(struct cs_mps *m, const char *cmd, const char *dir_arg, bool quiet)
{
    memset(m, 0, sizeof *m);
    m->cmd = cmd;
    const char *env = getenv("CUSHARE_MPS_DIR");
    const char *dir = dir_arg ? dir_arg : env && *env ? env : CS_MPS_DEFAULT_DIR;
    const char *what = dir_arg ? "--dir" : env && *env ? "CUSHARE_MPS_DIR" : "the default";
    if (dir[0] != '/')
        return quiet ? CS_EXIT_USAGE
                     : cs_cli_usage_error(cmd, "%s '%s' is not an absolute path", what, dir);
    /* The daemon's socket <dir>/<GPU-UUID>/pipe/control must fit in
     * sun_path (108 bytes with its NUL). */
    size_t need = strlen(dir) + 1 + 40 + sizeof "/pipe/control" - 1;
    if (need >= sizeof(((struct sockaddr_un *)0)->sun_path) || strlen(dir) >= sizeof m->dir)
        return quiet ? CS_EXIT_USAGE
                     : cs_cli_usage_error(cmd, "%s '%s' is too long: the daemon's socket "
                                          "<dir>/<GPU-UUID>/pipe/control would be %zu bytes, "
                                          "more than a unix socket path holds (107); choose a "
                                          "shorter --dir or CUSHARE_MPS_DIR", what, dir, need);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    const char *bin = getenv("CUSHARE_MPS_CONTROL");
    bool from_env = bin && *bin;
    if (find_binary(from_env ? bin : CS_MPS_CONTROL_NAME, m->control, sizeof m->control))
        return CS_EXIT_OK;
    m->control[0] = '\0';
    if (quiet)
        return CS_EXIT_OK;
    if (from_env)
        return cs_cli_usage_error(cmd, "CUSHARE_MPS_CONTROL=%s is not an executable file: set "
                                  "it to the path of nvidia-cuda-mps-control", bin);
    return cs_cli_usage_error(cmd, "cannot find " CS_MPS_CONTROL_NAME " in PATH: install "
                              "NVIDIA's MPS (it comes with the driver) or set "
                              "CUSHARE_MPS_CONTROL to its path");
}

int cs_mps_gpus(const char *cmd, struct cs_mps_gpu *out, int max)
{
    char uuid[CS_MPS_MAX_GPUS][48];
    int n = cs_node_nvml_uuids(uuid, max < CS_MPS_MAX_GPUS ? max : CS_MPS_MAX_GPUS);
    if (n < 0) {
        fprintf(stderr, "cushare: %s: cannot list the GPUs: NVML (libnvidia-ml.so.1) could not "
                        "be loaded or initialised\n", cmd);
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (uuid[i][0]) {
            out[k].index = i;
            memcpy(out[k].uuid, uuid[i], sizeof out[k].uuid);
            out[k].uuid[sizeof out[k].uuid - 1] = '\0';
            k++;
        }
    return k;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* `sel` among g[0..n): an NVML index, else a UUID or a unique prefix of
 * one ("GPU-" optional, any case). Position, -1 none, -2 ambiguous. */
static int find_gpu(const char *sel, const struct cs_mps_gpu *g, int n)
{
    if (all_digits(sel)) {
        for (int i = 0; i < n; i++)
            if (strlen(sel) < 6 && g[i].index == atoi(sel))
                return i;
        return -1;
    }
    const char *want = strncasecmp(sel, "GPU-", 4) ? sel : sel + 4;
    int found = -1;
    for (int i = 0; i < n; i++)
        if (*want && !strncasecmp(g[i].uuid + 4, want, strlen(want))) {
            if (found >= 0)
                return -2;
            found = i;
        }
    return found;
}

int cs_mps_pick(const char *cmd, const char *sel, const struct cs_mps_gpu *g, int n)
{
    int i = find_gpu(sel, g, n);
    if (i == -2)
        cs_cli_usage_error(cmd, "--gpu '%s' matches more than one GPU: give more of its UUID",
                           sel);
    else if (i < 0)
        cs_cli_usage_error(cmd, "--gpu '%s' is no GPU of this node: give an NVML index "
                           "(nvidia-smi's, 0..%d) or a GPU UUID", sel, n - 1);
    return i;
}

int cs_mps_visible_gpu(const char *cmd, struct cs_mps_gpu *out)
{
    struct cs_mps_gpu g[CS_MPS_MAX_GPUS];
    int n = cs_mps_gpus(cmd, g, CS_MPS_MAX_GPUS);
    if (n < 0)
        return CS_EXIT_FAIL;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char why[160];  /* the example is the command that asked: run, bench limiter */
    snprintf(why, sizeof why, "an MPS client connects to the daemon of one GPU: pick one "
             "with CUDA_VISIBLE_DEVICES, e.g. CUDA_VISIBLE_DEVICES=0 cushare %s --mps ...", cmd);
    if (!cvd) {
        if (n == 1) {
            *out = g[0];
            return CS_EXIT_OK;
        }
        return cs_cli_usage_error(cmd, "--mps needs exactly one visible GPU; %d are visible "
                                  "(CUDA_VISIBLE_DEVICES is unset): %s", n, why);
    }
    char list[256];
    if (strlen(cvd) >= sizeof list)
        return cs_cli_usage_error(cmd, "CUDA_VISIBLE_DEVICES is too long for --mps: %s", why);
    snprintf(list, sizeof list, "%s", cvd);
    char *items[CS_MPS_MAX_GPUS + 1];
    int k = cs__split_list(list, items, CS_MPS_MAX_GPUS + 1);
    if (k != 1)
        return cs_cli_usage_error(cmd, "--mps needs exactly one visible GPU; "
                                  "CUDA_VISIBLE_DEVICES=%s makes %s: %s", cvd,
                                  k > 1 ? "more than one visible" : "none visible", why);
    int i = find_gpu(items[0], g, n);
    if (i < 0)
        return cs_cli_usage_error(cmd, "CUDA_VISIBLE_DEVICES=%s names %s GPU of this node "
                                  "(NVML lists %d; MIG instances are not supported with "
                                  "--mps): give an index or a GPU UUID", cvd,
                                  i == -2 ? "more than one" : "no", n);
    *out = g[i];
    return CS_EXIT_OK;
}

/* ---- processes --------------------------------------------------------- */

/* Alive and not a zombie (a daemon nobody reaped is dead for us: the
 * node's init may not reap promptly). EPERM: alive, another user's. */
static bool pid_alive(pid_t pid)
{
    if (pid <= 0 || (kill(pid, 0) && errno != EPERM))
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true; /* no procfs: kill's word */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* Whether `pid` runs the control binary: its comm (readable for every
 * user, kept across upgrades of the file) is the binary's name, as the
 * kernel truncates it to 15 bytes. Unreadable: yes (nobody is called
 * dead on a guess). */
static bool pid_is_control(const struct cs_mps *m, pid_t pid)
{
    char path[64], comm[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true;
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n <= 0)
        return true;
    comm[n] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    const char *base = strrchr(m->control, '/');
    base = base ? base + 1 : m->control;
    /* NVIDIA's daemon keeps its name when CUSHARE_MPS_CONTROL is a
     * wrapper that execs it. */
    if (!strncmp(comm, CS_MPS_CONTROL_NAME, 15))
        return true;
    return !strncmp(comm, base, 15) && (strlen(base) >= 15 || !strcmp(comm, base));
}

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Waits until `pid` (not our child) has exited, at most `ms`: a pidfd
 * when the kernel has them, else a 10 ms poll of pid_alive. */
static bool wait_gone(pid_t pid, int ms)
{
    int64_t end = (int64_t)cs__now_ns() + (int64_t)ms * 1000000;
    int pfd = pidfd_open_(pid);
    while (pid_alive(pid)) {
        int64_t left = (end - (int64_t)cs__now_ns()) / 1000000;
        if (left <= 0) {
            if (pfd >= 0)
                close(pfd);
            return false;
        }
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        if (pfd >= 0)
            poll(&p, 1, (int)left);
        else
            poll(NULL, 0, left < 10 ? (int)left : 10);
    }
    if (pfd >= 0)
        close(pfd);
    return true;
}

/* ---- running the control binary ------------------------------------------ */

static void free_env(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

/* Appends "name=value" to env at *k; false when out of memory. */
static bool add_var(char **env, size_t *k, const char *name, const char *value)
{
    char *s;
    if (asprintf(&s, "%s=%s", name, value) < 0)
        return false;
    env[(*k)++] = s;
    return true;
}

/* The environment of the daemon and of the control client: ours, without
 * libcushare.so in LD_PRELOAD (the daemon's MPS server is the node's, not
 * a tenant), with the GPU and the two directories. NULL when out of
 * memory; free with free_env. */
static char **tool_env(const struct cs_mps_daemon *d, const char *uuid)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const char *e = environ[i];
        if (!strncmp(e, "CUDA_VISIBLE_DEVICES=", 21) ||
            !strncmp(e, "CUDA_MPS_PIPE_DIRECTORY=", 24) ||
            !strncmp(e, "CUDA_MPS_LOG_DIRECTORY=", 23))
            continue;
        if (!strncmp(e, "LD_PRELOAD=", 11)) {
            char *v = cs_cli_preload(e + 11, NULL, false);
            ok = v && (!*v || add_var(env, &k, "LD_PRELOAD", v));
            free(v);
            continue;
        }
        char *copy = strdup(e);
        if (copy)
            env[k++] = copy;
        ok = copy != NULL;
    }
    ok = ok && add_var(env, &k, "CUDA_VISIBLE_DEVICES", uuid) &&
         add_var(env, &k, "CUDA_MPS_PIPE_DIRECTORY", d->pipe) &&
         add_var(env, &k, "CUDA_MPS_LOG_DIRECTORY", d->log);
    if (!ok) {
        free_env(env);
        return NULL;
    }
    return env;
}

/* A descriptor at 3 or above (close-on-exec), so that moving it onto
 * 0, 1 or 2 in the child can never clobber another we move. */
static int high_fd(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return h;
}

struct tool_io {
    int in, out, err;           /* become the child's 0, 1, 2 */
};

/* In the child before exec (async-signal-safe calls only): its stdio,
 * and nothing else of ours or of whoever started us. The daemon outlives
 * this command: a pipe it inherited (a caller's, a test's) would never
 * see its end. */
static void tool_child(void *arg)
{
    const struct tool_io *io = arg;
    if (dup2(io->in, 0) < 0 || dup2(io->out, 1) < 0 || dup2(io->err, 2) < 0)
        _exit(126);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
        return;
#endif
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
}

/* Reads what the non-blocking `fd` has now into out (what does not fit
 * is dropped): 1 read some, 0 nothing yet, -1 end of file or error. */
static int take_output(int fd, char *out, size_t len, size_t *got)
{
    char buf[1024];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (r == 0)
        return -1;
    size_t room = *got + 1 < len ? len - 1 - *got : 0;
    size_t n = (size_t)r < room ? (size_t)r : room;
    memcpy(out + *got, buf, n);
    *got += n;
    out[*got] = '\0';
    return 1;
}

/* Runs `<control> [arg]` with `input` on its stdin (NULL: /dev/null) and
 * its stdout (and stderr when `with_err`, else /dev/null) into out, which
 * is NUL-terminated and may be truncated. Ends when the program exits,
 * even if a daemon it started keeps the output pipe open. Bounded by
 * `ms`: then it is killed. Its exit status (128 + signal), or -1 with
 * errno (ETIMEDOUT, or why it could not run). */
static int run_tool(const struct cs_mps *m, char **envp, const char *arg, const char *input,
                    bool with_err, char *out, size_t len, int ms)
{
    out[0] = '\0';
    int in[2] = {-1, -1}, pipe_out[2] = {-1, -1};
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || pipe2(pipe_out, O_CLOEXEC) || (input && pipe2(in, O_CLOEXEC))) {
        int e = errno;
        close(null);
        close(pipe_out[0]);
        close(pipe_out[1]);
        errno = e;
        return -1;
    }
    null = high_fd(null);
    pipe_out[1] = high_fd(pipe_out[1]);
    in[0] = high_fd(in[0]);
    /* Small enough for the pipe's buffer: written before the child runs,
     * so no SIGPIPE can reach us if it never reads. */
    if (input && write(in[1], input, strlen(input)) < 0) {
        /* the child then reads EOF at once */
    }
    if (in[1] >= 0)
        close(in[1]);
    struct tool_io io = {.in = input ? in[0] : null, .out = pipe_out[1],
                         .err = with_err ? pipe_out[1] : null};
    char *argv[] = {(char *)m->control, (char *)arg, NULL};
    struct cs_cli_spawn s = {.argv = argv, .envp = envp, .quiet = true,
                             .in_child = tool_child, .arg = &io};
    pid_t pid = cs_cli_spawn(m->cmd, &s);
    int e = errno;
    close(null);
    close(pipe_out[1]);
    if (in[0] >= 0)
        close(in[0]);
    if (pid < 0) {
        close(pipe_out[0]);
        errno = e;
        return -1;
    }
    fcntl(pipe_out[0], F_SETFL, O_NONBLOCK);
    int pfd = pidfd_open_(pid);
    int64_t end = (int64_t)cs__now_ns() + (int64_t)ms * 1000000;
    size_t got = 0;
    int status = 0;
    bool exited = false, open_out = true;
    while (!exited) {
        int64_t left = (end - (int64_t)cs__now_ns()) / 1000000;
        if (left <= 0)
            break;
        struct pollfd p[2] = {{.fd = open_out ? pipe_out[0] : -1, .events = POLLIN},
                              {.fd = pfd, .events = POLLIN}};
        int wait = pfd >= 0 ? (int)left : (left < 10 ? (int)left : 10);
        if (poll(p, 2, wait) < 0 && errno != EINTR)
            break;
        if (open_out && p[0].revents)
            open_out = take_output(pipe_out[0], out, len, &got) >= 0;
        if (pfd < 0 || p[1].revents)
            exited = waitpid(pid, &status, WNOHANG) == pid;
    }
    if (exited) /* what it wrote before it exited is in the pipe */
        while (open_out && take_output(pipe_out[0], out, len, &got) > 0) {
        }
    close(pipe_out[0]);
    if (pfd >= 0)
        close(pfd);
    if (!exited) {
        kill(pid, SIGKILL);
        cs_cli_wait(pid);
        errno = ETIMEDOUT;
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* One control command to the daemon of d: the control client's exit
 * status (0: answered), its output in out; -1 when it could not run. */
static int control(const struct cs_mps *m, const struct cs_mps_daemon *d, const char *uuid,
                   const char *line, char *out, size_t len)
{
    char **env = tool_env(d, uuid);
    if (!env) {
        errno = ENOMEM;
        return -1;
    }
    char input[256];
    snprintf(input, sizeof input, "%s\n", line);
    int rc = run_tool(m, env, NULL, input, false, out, len, CS_MPS_WAIT_MS);
    free_env(env);
    return rc;
}

/* Pids, one a line (other lines ignored), into v[0..max). */
static int parse_pids(const char *s, pid_t *v, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long p = strtol(s, &end, 10);
        if (end != s && p > 0 && p <= INT32_MAX && (*end == '\n' || !*end))
            v[n++] = (pid_t)p;
        s += strcspn(s, "\n");
        if (*s)
            s++;
    }
    return n;
}

/* ---- state on disk ------------------------------------------------------- */

static void paths(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->gpu_dir, sizeof d->gpu_dir, "%s/%s", m->dir, uuid);
    snprintf(d->pipe, sizeof d->pipe, "%s/pipe", d->gpu_dir);
    snprintf(d->log, sizeof d->log, "%s/log", d->gpu_dir);
}

/* The pid in the pid file: 0 when there is none or it is not one number. */
static pid_t read_pid_file(const struct cs_mps_daemon *d, bool *exists)
{
    char path[sizeof d->pipe + 32], buf[32];
    snprintf(path, sizeof path, "%s/" CS_MPS_PID_FILE, d->pipe);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    *exists = fd >= 0;
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long p = strtol(buf, &end, 10);
    return end != buf && (*end == '\n' || !*end) && p > 0 && p <= INT32_MAX ? (pid_t)p : 0;
}

static bool socket_left(const struct cs_mps_daemon *d)
{
    char path[sizeof d->pipe + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/control", d->pipe);
    return lstat(path, &st) == 0;
}

void cs_mps_probe(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d)
{
    paths(m, uuid, d);
    bool pid_file;
    d->pid = read_pid_file(d, &pid_file);
    d->state = pid_file || socket_left(d) ? CS_MPS_STALE : CS_MPS_STOPPED;
    if (!pid_alive(d->pid) || !pid_is_control(m, d->pid))
        return;
    char out[2048];
    if (!m->control[0] || control(m, d, uuid, "get_server_list", out, sizeof out) != 0) {
        d->state = CS_MPS_UNRESPONSIVE;
        return;
    }
    d->state = CS_MPS_RUNNING;
    d->nservers = parse_pids(out, d->servers, CS_MPS_MAX_SERVERS);
    for (int i = 0; i < d->nservers && d->nclients < CS_MPS_MAX_CLIENTS; i++) {
        char line[64];
        snprintf(line, sizeof line, "get_client_list %d", (int)d->servers[i]);
        if (control(m, d, uuid, line, out, sizeof out) == 0)
            d->nclients += parse_pids(out, d->clients + d->nclients,
                                      CS_MPS_MAX_CLIENTS - d->nclients);
    }
}

/* A directory of ours (or root's) that only its owner writes: created
 * 0755 if missing. 0, or -1 after a message. */
static int own_dir(const struct cs_mps *m, const char *uuid, const char *dir)
{
    bool made = mkdir(dir, 0755) == 0;
    if (!made && errno != EEXIST) {
        fail_msg(m, uuid, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        fail_msg(m, uuid, "cannot open %s: %s (it must be a directory, not a symlink)", dir,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (made) /* the mode is ours to set, never the umask's */
        fchmod(fd, 0755);
    close(fd);
    if ((st.st_uid != geteuid() && st.st_uid != 0) || (!made && (st.st_mode & 022))) {
        fail_msg(m, uuid, "%s belongs to uid %u or others may write it: the daemon's "
                 "directory must be yours or root's, writable by its owner only (MPS runs "
                 "one user's server on a GPU at a time: ask its owner to `cushare mps stop`, "
                 "or use another --dir)", dir, (unsigned)st.st_uid);
        return -1;
    }
    return 0;
}

/* Whether another user's control daemon runs for the directory `owner`
 * made: the pid file's process lives, runs the control binary and is
 * that user's. Its pid, else 0. Nothing is asked of it: the directory
 * is not ours, nor is its socket. */
static pid_t foreign_daemon(const struct cs_mps *m, const struct cs_mps_daemon *d, uid_t owner)
{
    bool exists;
    pid_t pid = read_pid_file(d, &exists);
    char path[64];
    struct stat ps;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return pid_alive(pid) && pid_is_control(m, pid) && !stat(path, &ps) && ps.st_uid == owner
               ? pid : 0;
}

/* The GPU's directory made by another user before us (a squat that would
 * block every start on this GPU). Root moves it aside, loudly, unless
 * that user's own daemon runs in it; anyone else gets own_dir's refusal
 * naming the owner. 0, or -1 after a message. */
static int clear_squat(const struct cs_mps *m, const char *uuid, const struct cs_mps_daemon *d)
{
    struct stat st;
    if (geteuid() != 0 || lstat(d->gpu_dir, &st) ||
        ((st.st_uid == 0) && S_ISDIR(st.st_mode) && !(st.st_mode & 022)))
        return 0;
    pid_t pid = S_ISDIR(st.st_mode) ? foreign_daemon(m, d, st.st_uid) : 0;
    if (pid) {
        fail_msg(m, uuid, "%s belongs to uid %u, whose MPS control daemon (pid %d) runs there: "
                 "MPS runs one daemon per GPU; `cushare mps stop --force --gpu %s` ends it",
                 d->gpu_dir, (unsigned)st.st_uid, (int)pid, uuid);
        return -1;
    }
    char aside[sizeof d->gpu_dir + 64];
    snprintf(aside, sizeof aside, "%s/.squatted-%s-uid%u-%lld", m->dir, uuid,
             (unsigned)st.st_uid, (long long)cs__now_ns());
    if (rename(d->gpu_dir, aside)) {
        fail_msg(m, uuid, "%s belongs to uid %u (or others may write it) and cannot be moved "
                 "aside: %s; remove it", d->gpu_dir, (unsigned)st.st_uid, strerror(errno));
        return -1;
    }
    fprintf(stderr, "cushare: %s: %s: warning: %s was made by uid %u, mode %04o, with no "
            "daemon of theirs in it (it would block this GPU's daemon): moved aside to %s\n",
            m->cmd, uuid, d->gpu_dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
            aside);
    return 0;
}

/* The MPS directory (the default one inside the node directory, made as
 * the node's shared directories are: 1777 one level), trusted as they
 * are, then the GPU's own directories. CS_EXIT_* after a message. */
static int make_dirs(const struct cs_mps *m, const char *uuid, const struct cs_mps_daemon *d)
{
    if (!strcmp(m->dir, CS_MPS_DEFAULT_DIR)) {
        int fd = cs__node_dir_open(CS_NODE_DIR);
        if (fd >= 0)
            close(fd);
    }
    int fd = cs__node_dir_open(m->dir);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int e = fd < 0 ? -fd : errno;
        if (fd >= 0)
            close(fd);
        return cs_cli_usage_error(m->cmd, "cannot use the MPS directory %s: %s (its parent "
                                  "must exist; set --dir or CUSHARE_MPS_DIR)", m->dir,
                                  strerror(e));
    }
    close(fd);
    if (cs__node_dir_trust(&st))
        return cs_cli_usage_error(m->cmd, "the MPS directory %s belongs to uid %u or others "
                                  "may write it without the sticky bit: anyone could replace "
                                  "a daemon's socket there; fix its owner or mode, or choose "
                                  "another --dir", m->dir, (unsigned)st.st_uid);
    if (clear_squat(m, uuid, d) || own_dir(m, uuid, d->gpu_dir) || own_dir(m, uuid, d->pipe) ||
        own_dir(m, uuid, d->log))
        return CS_EXIT_FAIL;
    return CS_EXIT_OK;
}

/* "pid 123 (uid 1001, sleep)" for the process holding a flock on the file
 * st names, from /proc/locks; "an unknown process" when it cannot be
 * told (another PID namespace, no procfs). The name is the holder's
 * choice: shown as terminal-safe text. */
static void lock_holder(const struct stat *st, char *out, size_t len)
{
    snprintf(out, len, "an unknown process");
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char type[16];
        int pid;
        unsigned maj, min;
        unsigned long ino;
        if (strstr(line, "->") ||
            sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", type, &pid, &maj, &min, &ino) != 5 ||
            strcmp(type, "FLOCK") || ino != (unsigned long)st->st_ino ||
            maj != major(st->st_dev) || min != minor(st->st_dev) || pid <= 0)
            continue;
        char path[64], comm[64] = "?", safe[64];
        struct stat ps;
        snprintf(path, sizeof path, "/proc/%d/comm", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, comm, sizeof comm - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n > 0)
            comm[n] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        snprintf(path, sizeof path, "/proc/%d", pid);
        if (stat(path, &ps))
            snprintf(out, len, "pid %d (%s)", pid, cs_text_terminal(safe, sizeof safe, comm));
        else
            snprintf(out, len, "pid %d (uid %u, %s)", pid, (unsigned)ps.st_uid,
                     cs_text_terminal(safe, sizeof safe, comm));
        break;
    }
    fclose(f);
}

/* The GPU's lock, held (flock) until the descriptor closes; -1 after a
 * message. Another user's directory lets us read the file: enough. The
 * wait is bounded: anyone who can open the file can flock it, and an
 * administrator's command must not hang on another user's lock. */
static int lock_gpu(const struct cs_mps *m, const char *uuid, const struct cs_mps_daemon *d)
{
    char path[sizeof d->gpu_dir + 16];
    snprintf(path, sizeof path, "%s/lock", d->gpu_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EACCES)
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
        errno = EINVAL;
    }
    if (fd < 0) {
        fail_msg(m, uuid, "cannot open %s: %s (it must be a regular file)", path,
                 strerror(errno));
        return -1;
    }
    int64_t end = cs__now_ns() + (int64_t)CS_MPS_WAIT_MS * 1000000;
    while (flock(fd, LOCK_EX | LOCK_NB)) {
        if (errno != EINTR && errno != EWOULDBLOCK) {
            fail_msg(m, uuid, "cannot lock %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (cs__now_ns() >= end) {
            char who[160];
            lock_holder(&st, who, sizeof who);
            fail_msg(m, uuid, "%s is held by %s for more than %d s: another start or stop of "
                     "this GPU's daemon, or a process keeping everyone out (end it, then try "
                     "again)", path, who, CS_MPS_WAIT_MS / 1000);
            close(fd);
            return -1;
        }
        /* Pacing: flock has no bounded wait; the holder is asked again. */
        poll(NULL, 0, 20);
    }
    return fd;
}

/* A dead daemon's leftovers: every entry of the pipe directory but
 * directories (its socket, pid file, server pipes). Under the lock. */
static void remove_stale(const struct cs_mps_daemon *d)
{
    int dfd = open(d->pipe, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        struct stat st;
        if (!fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) && !S_ISDIR(st.st_mode))
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(dir);
}

/* ---- start, stop --------------------------------------------------------- */

/* `<control> -d`, then until the daemon answers (bounded). */
static int launch(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d)
{
    char **env = tool_env(d, uuid);
    if (!env) {
        fail_msg(m, uuid, "out of memory");
        return CS_EXIT_FAIL;
    }
    char out[2048];
    int rc = run_tool(m, env, "-d", NULL, true, out, sizeof out, CS_MPS_WAIT_MS);
    int e = errno;
    free_env(env);
    out[strcspn(out, "\n")] = '\0';
    if (rc != 0) {
        if (rc < 0)
            fail_msg(m, uuid, "cannot start the MPS control daemon: %s -d: %s", m->control,
                     e == ETIMEDOUT ? "did not return within 10 s" : strerror(e));
        else
            fail_msg(m, uuid, "cannot start the MPS control daemon: %s -d exited %d%s%s",
                     m->control, rc, out[0] ? ": " : "", out);
        return CS_EXIT_FAIL;
    }
    pid_t stale = d->stale_pid;
    int64_t end = (int64_t)cs__now_ns() + (int64_t)CS_MPS_WAIT_MS * 1000000;
    for (;;) {
        cs_mps_probe(m, uuid, d);
        d->stale_pid = stale;
        if (d->state == CS_MPS_RUNNING)
            return CS_EXIT_OK;
        if ((int64_t)cs__now_ns() > end)
            break;
        /* Pacing while it comes up (NVIDIA's -d may return before its
         * daemon answers): at most 10 s of 20 ms steps. */
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    fail_msg(m, uuid, "the MPS control daemon started by %s -d does not answer within 10 s "
             "(%s; see %s/control.log)", m->control, cs_mps_state_name(d->state), d->log);
    return CS_EXIT_FAIL;
}

int cs_mps_start(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d,
                 enum cs_mps_started *how)
{
    paths(m, uuid, d);
    int rc = make_dirs(m, uuid, d);
    if (rc)
        return rc;
    int lk = lock_gpu(m, uuid, d);
    if (lk < 0)
        return CS_EXIT_FAIL;
    cs_mps_probe(m, uuid, d);
    switch (d->state) {
    case CS_MPS_RUNNING:
        *how = CS_MPS_JOINED;
        break;
    case CS_MPS_UNRESPONSIVE:
        fail_msg(m, uuid, "the MPS control daemon (pid %d) runs but does not answer "
                 "get_server_list within 10 s; `cushare mps stop --force --gpu %s` ends it",
                 (int)d->pid, uuid);
        rc = CS_EXIT_FAIL;
        break;
    case CS_MPS_STALE:
        d->stale_pid = d->pid;
        remove_stale(d);
        *how = CS_MPS_RESTARTED;
        rc = launch(m, uuid, d);
        break;
    case CS_MPS_STOPPED:
        *how = CS_MPS_STARTED;
        rc = launch(m, uuid, d);
        break;
    }
    close(lk);
    return rc;
}

static void list_pids(char *out, size_t len, const pid_t *v, int n)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", i ? ", " : "", (int)v[i]);
}

/* Under the lock: the daemon answered; quit it unless it has clients. */
static int stop_running(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d,
                        bool force, char *did, size_t len)
{
    char pids[512];
    list_pids(pids, sizeof pids, d->clients, d->nclients);
    if (d->nservers && !force) {
        fail_msg(m, uuid, "the MPS control daemon (pid %d) serves clients (pids %s): not "
                 "stopped; --force asks it to quit anyway (NVIDIA's daemon then takes no new "
                 "clients and exits when these end)", (int)d->pid,
                 d->nclients ? pids : "unknown");
        return CS_EXIT_FAIL;
    }
    char out[256];
    if (control(m, d, uuid, "quit", out, sizeof out) != 0) {
        fail_msg(m, uuid, "the MPS control daemon (pid %d) did not take `quit`", (int)d->pid);
        return CS_EXIT_FAIL;
    }
    if (!wait_gone(d->pid, CS_MPS_WAIT_MS)) {
        fail_msg(m, uuid, "asked the MPS control daemon (pid %d) to quit; it still runs after "
                 "10 s%s%s", (int)d->pid, d->nclients ? ", waiting for its clients: " : "",
                 d->nclients ? pids : "");
        return CS_EXIT_FAIL;
    }
    remove_stale(d);
    if (d->nservers)
        snprintf(did, len, "stopped (pid %d; its clients %s lost MPS)", (int)d->pid, pids);
    else
        snprintf(did, len, "stopped (pid %d)", (int)d->pid);
    return CS_EXIT_OK;
}

/* Under the lock: a daemon process that does not answer. */
static int stop_unresponsive(const struct cs_mps *m, const char *uuid,
                             struct cs_mps_daemon *d, bool force, char *did, size_t len)
{
    if (!force) {
        fail_msg(m, uuid, "the MPS control daemon (pid %d) does not answer; --force ends it "
                 "with SIGTERM, then SIGKILL", (int)d->pid);
        return CS_EXIT_FAIL;
    }
    const char *how = "SIGTERM";
    kill(d->pid, SIGTERM);
    if (!wait_gone(d->pid, CS_MPS_WAIT_MS)) {
        how = "SIGKILL";
        kill(d->pid, SIGKILL);
        if (!wait_gone(d->pid, CS_MPS_WAIT_MS)) {
            fail_msg(m, uuid, "the MPS control daemon (pid %d) survives SIGKILL for 10 s",
                     (int)d->pid);
            return CS_EXIT_FAIL;
        }
    }
    remove_stale(d);
    snprintf(did, len, "ended (pid %d did not answer; %s)", (int)d->pid, how);
    return CS_EXIT_OK;
}

int cs_mps_stop(const struct cs_mps *m, const char *uuid, bool force, char *did, size_t len)
{
    struct cs_mps_daemon d;
    paths(m, uuid, &d);
    struct stat st;
    if (lstat(d.gpu_dir, &st) && errno == ENOENT) {
        snprintf(did, len, "not running");
        return CS_EXIT_OK;
    }
    int lk = lock_gpu(m, uuid, &d);
    if (lk < 0)
        return CS_EXIT_FAIL;
    cs_mps_probe(m, uuid, &d);
    int rc = CS_EXIT_OK;
    switch (d.state) {
    case CS_MPS_STOPPED:
        snprintf(did, len, "not running");
        break;
    case CS_MPS_STALE:
        remove_stale(&d);
        if (d.pid)
            snprintf(did, len, "not running (removed what dead pid %d left)", (int)d.pid);
        else
            snprintf(did, len, "not running (removed a dead daemon's files)");
        break;
    case CS_MPS_UNRESPONSIVE:
        rc = stop_unresponsive(m, uuid, &d, force, did, len);
        break;
    case CS_MPS_RUNNING:
        rc = stop_running(m, uuid, &d, force, did, len);
        break;
    }
    close(lk);
    return rc;
}

/* ---- cushare status ------------------------------------------------------- */

void cs_mps_annotate(struct cs_status *st)
{
    struct cs_mps m;
    bool ready = false;
    for (int i = 0; i < st->ndev; i++) {
        struct cs_status_device *dev = &st->dev[i];
        if (!dev->uuid[0])
            continue;
        /* Set up (cheap: a PATH search) only once a GPU is known. */
        if (!ready && (cs_mps_setup(&m, "status", NULL, true) || !m.control[0]))
            return;
        ready = true;
        struct cs_mps_daemon d;
        paths(&m, dev->uuid, &d);
        bool exists;
        struct stat ds;
        /* Only a daemon directory of root's or ours is asked: another
         * user's could hold a socket that never answers, and each
         * question waits up to CS_MPS_WAIT_MS. */
        if (lstat(d.gpu_dir, &ds) || (ds.st_uid != 0 && ds.st_uid != geteuid()) ||
            !pid_alive(read_pid_file(&d, &exists)))
            continue;
        cs_mps_probe(&m, dev->uuid, &d);
        if (d.state != CS_MPS_RUNNING)
            continue;
        dev->mps_pid = d.pid;
        for (int k = 0; k < st->nproc; k++)
            for (int c = 0; c < d.nclients; c++)
                if (d.clients[c] == st->proc[k].pid || d.clients[c] == st->proc[k].host_pid)
                    st->proc[k].mps = true;
    }
}
