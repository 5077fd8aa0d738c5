/*
 * mps_node_<case>: `cushare mps start|stop|status` and `cushare run --mps`
 * (src/cli/mps.c, docs/mps.md) against the fake MPS control daemon
 * (CUSHARE_MPS_CONTROL = tests/fakecuda/fake_mps_control.c) and the fake
 * NVML's GPUs.
 *
 *   start_stop   status, start, start again (one daemon: one "started" in
 *                its log, the same pid), stop (the pid exits, pid file and
 *                socket go), stop again (nothing to do)
 *   concurrent   two `mps start` released together by a gate, the daemon
 *                slow to start (FAKECUDA_MPS_START_US): both succeed, one
 *                started it, the other joined it, one daemon
 *   stale        a pid file naming a dead pid and a socket left behind:
 *                status says stale, start removes them and starts anew
 *   killed       the daemon SIGKILLed: the next `run --mps` starts it
 *                again, says so, and its command is a client-to-be
 *   missing      no binary ($CUSHARE_MPS_CONTROL wrong, none in PATH), a
 *                relative or too long --dir: exit 2, one message naming
 *                the fix, nothing started
 *   run_env      `run --mps` gives the command the daemon's pipe and log
 *                directories and its GPU by UUID (the command prints
 *                them), for GPU 0 and for CUDA_VISIBLE_DEVICES=1 of two;
 *                the daemon it starts keeps none of run's descriptors
 *   two_gpus     `run --mps` with two GPUs visible: exit 2 naming
 *                CUDA_VISIBLE_DEVICES, no daemon, the command not run
 *   clients      a client (a process of a ledger, registered with the
 *                daemon): `mps status` and `cushare status` show it as
 *                concurrent; `mps stop` refuses, `--force` stops; then
 *                status shows it time-sliced
 *   fake_daemon  the fake's own protocol: a second daemon refused, client
 *                registration and its end, the 48-client limit, thread
 *                percentage, quit removing its files
 *   lock_held    another user (a throwaway one) holds flock on the GPU's
 *                lock file: `mps stop` gives up within its bounded wait,
 *                exit 1, naming the holder's pid and uid; once the holder
 *                is gone it stops the daemon
 *   squat        another user made <dir>/<GPU-UUID> first, with no daemon
 *                of theirs in it: root's `mps start` moves it aside,
 *                saying so, and starts the daemon
 *
 * The test is the subreaper of the daemons (they are orphaned when `-d`
 * returns), so a killed daemon is known dead when waitpid says so, and
 * every daemon left is killed at exit.
 */
#include "ledger/ledger_test.h"
#include "multiuser.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>

static char cli[4200];
static char mps_dir[4200];
static char fake[4200];

/* ---- running the command ---- */

/* `cushare ARGS...` with stdout and stderr captured: its exit code;
 * *out and *err (freed by the caller) get what it wrote. */
static int run_cli(char **out, char **err, const char *const *args)
{
    char op[4300], ep[4300];
    static int n;
    snprintf(op, sizeof op, "%s/cli-%d.out", lt_dir(), n);
    snprintf(ep, sizeof ep, "%s/cli-%d.err", lt_dir(), n++);
    fflush(NULL);
    pid_t pid = cs_fork_tied();
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        const char *argv[32] = {cli};
        int k = 1;
        for (int i = 0; args[i] && k < 31; i++)
            argv[k++] = args[i];
        argv[k] = NULL;
        execv(cli, (char **)argv);
        _exit(127);
    }
    int rc = cs_exit_code(lt_wait(pid, 60));
    *out = lt_read_file(op, NULL);
    *err = lt_read_file(ep, NULL);
    CHECK(*out && *err);
    printf("$ cushare");
    for (int i = 0; args[i]; i++)
        printf(" %s", args[i]);
    printf("  -> %d\n%s%s", rc, *out, *err);
    return rc;
}

/* Runs it and expects `rc`; returns stdout (stderr into *err if asked). */
static char *expect(int rc, char **err, const char *const *args)
{
    char *out, *e;
    CHECK_EQ(run_cli(&out, &e, args), rc);
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The UUID of NVML's GPU `idx`, from `cushare mps status`. */
static void gpu_uuid(int idx, char out[48])
{
    char *s = expect(0, NULL, ARGS("mps", "status"));
    char want[16];
    snprintf(want, sizeof want, "GPU %d ", idx);
    const char *p = strstr(s, want);
    CHECK(p != NULL);
    p += strlen(want);
    size_t n = strcspn(p, ":");
    CHECK(n > 4 && n < 48 && !strncmp(p, "GPU-", 4));
    memcpy(out, p, n);
    out[n] = '\0';
    free(s);
}

static const char *gpu_path(const char *uuid, const char *rest)
{
    static char buf[4][4400];
    static int k;
    char *b = buf[k++ % 4];
    int n = snprintf(b, sizeof buf[0], "%s/%s/%s", mps_dir, uuid, rest);
    CHECK(n > 0 && (size_t)n < sizeof buf[0]);
    return b;
}

static pid_t daemon_pid(const char *uuid)
{
    char *s = lt_read_file(gpu_path(uuid, "pipe/nvidia-cuda-mps-control.pid"), NULL);
    if (!s)
        return 0;
    pid_t p = (pid_t)atoi(s);
    free(s);
    return p;
}

/* How often the daemons of this GPU have logged "started". */
static int starts_logged(const char *uuid)
{
    char *s = lt_read_file(gpu_path(uuid, "log/control.log"), NULL);
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, "] started: ")); p++)
        n++;
    free(s);
    return n;
}

/* Our child (we are the daemons' subreaper) and not yet reaped. */
static bool running(pid_t pid)
{
    return pid > 0 && waitpid(pid, NULL, WNOHANG) == 0;
}

/* The number that follows `key` in s, e.g. "(pid " -> 123. */
static pid_t pid_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    CHECK(p != NULL);
    return (pid_t)atoi(p + strlen(key));
}

/* ---- the command's roles ---- */

/* Prints the MPS variables it was given. */
static int role_print_env(void)
{
    const char *v[] = {"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
                       "CUDA_VISIBLE_DEVICES"};
    for (size_t i = 0; i < 3; i++)
        printf("%s=%s\n", v[i], getenv(v[i]) ? getenv(v[i]) : "(unset)");
    return 0;
}

/* A daemon client as a CUDA process announces itself (the fake libcuda
 * does this at cuInit; here explicitly, for the daemon's own cases): send
 * "client <pid>", get "ok <pct>". The socket stays open while we live. */
static int connect_client(const char *pipe_dir, char *reply, size_t len)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/control", pipe_dir);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    char line[64];
    int n = snprintf(line, sizeof line, "client %d\n", (int)getpid());
    CHECK_EQ(write(fd, line, (size_t)n), n);
    size_t got = 0;
    while (got < len - 1 && (got == 0 || reply[got - 1] != '\n')) {
        ssize_t r = read(fd, reply + got, len - 1 - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    reply[got] = '\0';
    return fd;
}

/* In a slice under --mps: joins its ledger and, as the fake libcuda does
 * at cuInit when a daemon answers, becomes its client (the driver then
 * says so: CU_DEVICE_ATTRIBUTE_MPS_ENABLED); reports its pid on fd `out`,
 * waits to be killed. */
static int role_client(int out)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    int mps = 0;
    CHECK_EQ(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev), CUDA_SUCCESS);
    CHECK_EQ(mps, 1);
    pid_t me = getpid();
    lt_write_full(out, &me, sizeof me);
    for (;;)
        pause();
}

/* Nothing was started: the MPS directory holds no GPU's directory. */
static void check_mps_dir_empty(void)
{
    DIR *d = opendir(mps_dir);
    CHECK(d != NULL);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += e->d_name[0] != '.';
    closedir(d);
    CHECK_EQ(entries, 0);
}

/* ---- the cases ---- */

static void case_start_stop(void)
{
    char uuid[48];
    gpu_uuid(0, uuid);
    char *s = expect(0, NULL, ARGS("mps", "status", "--json"));
    CHECK_CONTAINS(s, "\"state\":\"stopped\",\"pid\":null");
    free(s);

    s = expect(0, NULL, ARGS("mps", "start"));
    pid_t pid = pid_after(s, "started (pid ");
    free(s);
    CHECK_EQ(daemon_pid(uuid), pid);
    CHECK(running(pid));
    CHECK(access(gpu_path(uuid, "pipe/control"), F_OK) == 0);
    CHECK(access(gpu_path(uuid, "lock"), F_OK) == 0);

    /* Twice: the same daemon, joined, never a second one. */
    s = expect(0, NULL, ARGS("mps", "start", "--gpu", uuid));
    CHECK_EQ(pid_after(s, "already running (pid "), pid);
    free(s);
    CHECK_EQ(starts_logged(uuid), 1);

    s = expect(0, NULL, ARGS("mps", "status", "--json", "--gpu", "0"));
    char want[128];
    snprintf(want, sizeof want, "\"state\":\"running\",\"pid\":%d,\"servers\":[],\"clients\":[]",
             (int)pid);
    CHECK_CONTAINS(s, want);
    free(s);

    s = expect(0, NULL, ARGS("mps", "stop"));
    snprintf(want, sizeof want, "stopped (pid %d)", (int)pid);
    CHECK_CONTAINS(s, want);
    free(s);
    /* stop waited for the pid to exit: it is a zombie of ours by now. */
    CHECK_EQ(waitpid(pid, NULL, WNOHANG), pid);
    CHECK(access(gpu_path(uuid, "pipe/control"), F_OK) != 0);
    CHECK(access(gpu_path(uuid, "pipe/nvidia-cuda-mps-control.pid"), F_OK) != 0);

    s = expect(0, NULL, ARGS("mps", "stop"));
    CHECK_CONTAINS(s, ": not running\n");
    free(s);
    s = expect(0, NULL, ARGS("mps", "status"));
    CHECK_CONTAINS(s, ": stopped\n");
    free(s);
}

static void case_concurrent(void)
{
    char uuid[48];
    gpu_uuid(0, uuid);
    /* The daemon takes 300 ms to answer: both starters look while the
     * first one's is coming up. Without the GPU's lock the second would
     * run `-d` too and fail on the daemon's own pid-file lock. */
    setenv("FAKECUDA_MPS_START_US", "300000", 1);
    struct cs_gate gate;
    cs_gate_init(&gate);
    pid_t kid[2];
    char outp[2][4300];
    for (int i = 0; i < 2; i++) {
        snprintf(outp[i], sizeof outp[i], "%s/start-%d.out", lt_dir(), i);
        fflush(NULL);
        kid[i] = cs_fork_tied();
        if (kid[i] == 0) {
            int o = open(outp[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (o < 0 || dup2(o, 1) < 0)
                _exit(126);
            cs_gate_arrive(&gate);
            execl(cli, cli, "mps", "start", (char *)NULL);
            _exit(127);
        }
    }
    cs_gate_open(&gate, 2, 30000);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(cs_exit_code(lt_wait(kid[i], 60)), 0);
    unsetenv("FAKECUDA_MPS_START_US");
    char *a = lt_read_file(outp[0], NULL), *b = lt_read_file(outp[1], NULL);
    printf("starter 0: %sstarter 1: %s", a, b);
    bool a_started = strstr(a, "started (pid ") != NULL;
    const char *started = a_started ? a : b, *joined = a_started ? b : a;
    pid_t pid = pid_after(started, "started (pid ");
    CHECK_EQ(pid_after(joined, "already running (pid "), pid);
    CHECK_EQ(starts_logged(uuid), 1);
    CHECK_EQ(daemon_pid(uuid), pid);
    CHECK(running(pid));
    free(a);
    free(b);
}

static void case_stale(void)
{
    char uuid[48];
    gpu_uuid(0, uuid);
    /* What a SIGKILLed daemon leaves: its pid file and its socket. */
    CHECK(mkdir(gpu_path(uuid, ""), 0755) == 0);
    CHECK(mkdir(gpu_path(uuid, "pipe"), 0755) == 0);
    pid_t dead = fork();
    CHECK(dead >= 0);
    if (dead == 0)
        _exit(0);
    CHECK_EQ(cs_exit_code(lt_wait(dead, 30)), 0);
    char line[32];
    snprintf(line, sizeof line, "%d\n", (int)dead);
    lt_write_file(gpu_path(uuid, "pipe/nvidia-cuda-mps-control.pid"), line, strlen(line));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", gpu_path(uuid, "pipe/control"));
    int sfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(sfd >= 0 && bind(sfd, (struct sockaddr *)&a, sizeof a) == 0);
    close(sfd); /* the socket file stays; nobody listens */

    char *s = expect(0, NULL, ARGS("mps", "status", "--json"));
    char want[160];
    snprintf(want, sizeof want, "\"state\":\"stale\",\"pid\":%d", (int)dead);
    CHECK_CONTAINS(s, want);
    free(s);

    s = expect(0, NULL, ARGS("mps", "start"));
    snprintf(want, sizeof want, "after removing what dead pid %d left", (int)dead);
    CHECK_CONTAINS(s, want);
    pid_t pid = pid_after(s, "started (pid ");
    free(s);
    CHECK(pid != dead && running(pid));
    CHECK_EQ(daemon_pid(uuid), pid);
    s = expect(0, NULL, ARGS("mps", "status"));
    CHECK_CONTAINS(s, ": running, pid ");
    free(s);
}

static void case_killed(void)
{
    char uuid[48];
    gpu_uuid(0, uuid);
    char *s = expect(0, NULL, ARGS("mps", "start"));
    pid_t pid = pid_after(s, "started (pid ");
    free(s);
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 30);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK_EQ(daemon_pid(uuid), pid); /* left behind */

    char self[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char *err;
    s = expect(0, &err, ARGS("run", "--mps", "--", self, "print-env"));
    char want[200];
    snprintf(want, sizeof want, "the MPS control daemon (dead pid %d) was gone: removed its "
             "files, started it again (pid ", (int)pid);
    CHECK_CONTAINS(err, want);
    pid_t again = pid_after(err, "started it again (pid ");
    CHECK(again != pid && running(again));
    CHECK_EQ(daemon_pid(uuid), again);
    snprintf(want, sizeof want, "CUDA_MPS_PIPE_DIRECTORY=%s\n", gpu_path(uuid, "pipe"));
    CHECK_CONTAINS(s, want);
    CHECK_EQ(starts_logged(uuid), 2);
    free(s);
    free(err);
}

static void case_missing(void)
{
    char *err;
    const char *ctl = getenv("CUSHARE_MPS_CONTROL");
    char saved[4200];
    snprintf(saved, sizeof saved, "%s", ctl);

    setenv("CUSHARE_MPS_CONTROL", "/nonexistent/nvidia-cuda-mps-control", 1);
    free(expect(2, &err, ARGS("mps", "start")));
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK_CONTAINS(err, "cushare: mps start: CUSHARE_MPS_CONTROL=/nonexistent/nvidia-cuda-mps-"
                        "control is not an executable file");
    free(err);

    unsetenv("CUSHARE_MPS_CONTROL");
    const char *path = getenv("PATH");
    char saved_path[8192];
    snprintf(saved_path, sizeof saved_path, "%s", path ? path : "");
    setenv("PATH", lt_dir(), 1); /* holds no nvidia-cuda-mps-control */
    free(expect(2, &err, ARGS("run", "--mps", "--", "/bin/true")));
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK_CONTAINS(err, "cushare: run: cannot find nvidia-cuda-mps-control in PATH");
    CHECK_CONTAINS(err, "set CUSHARE_MPS_CONTROL");
    free(err);
    setenv("PATH", saved_path, 1);
    setenv("CUSHARE_MPS_CONTROL", saved, 1);

    free(expect(2, &err, ARGS("mps", "start", "--dir", "relative/dir")));
    CHECK_CONTAINS(err, "--dir 'relative/dir' is not an absolute path");
    free(err);
    char longdir[200];
    memset(longdir, 'x', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    free(expect(2, &err, ARGS("mps", "start", "--dir", longdir)));
    CHECK_CONTAINS(err, "is too long: the daemon's socket");
    free(err);
    free(expect(2, &err, ARGS("mps", "start", "--gpu", "7")));
    CHECK_CONTAINS(err, "--gpu '7' is no GPU of this node");
    free(err);
    free(expect(2, &err, ARGS("mps", "restart")));
    CHECK_CONTAINS(err, "unknown action 'restart'");
    free(err);
    /* Nothing was started by any of them. */
    check_mps_dir_empty();
}

static void case_run_env(void)
{
    char self[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char uuid0[48], uuid1[48], want[4600], *err;

    gpu_uuid(0, uuid0);
    /* A descriptor cushare inherits (not close-on-exec) must not stay
     * open in the daemon it starts, which outlives it. */
    int inherited[2];
    CHECK(pipe(inherited) == 0);
    char *s = expect(0, &err, ARGS("run", "--mps", "--", self, "print-env"));
    CHECK_CONTAINS(err, "started the MPS control daemon (pid ");
    close(inherited[1]);
    CHECK(fcntl(inherited[0], F_SETFL, O_NONBLOCK) == 0);
    char c;
    CHECK_EQ(read(inherited[0], &c, 1), 0); /* EOF: nobody holds the write end */
    close(inherited[0]);
    snprintf(want, sizeof want,
             "CUDA_MPS_PIPE_DIRECTORY=%s\nCUDA_MPS_LOG_DIRECTORY=%s\nCUDA_VISIBLE_DEVICES=%s\n",
             gpu_path(uuid0, "pipe"), gpu_path(uuid0, "log"), uuid0);
    CHECK_STREQ(s, want);
    free(s);
    free(err);
    /* A second run joins quietly. */
    s = expect(0, &err, ARGS("run", "--mps", "--", self, "print-env"));
    CHECK_STREQ(s, want);
    CHECK_STREQ(err, "");
    free(s);
    free(err);

    /* Two GPUs, the second one picked by index: its own daemon. */
    setenv("FAKECUDA_DEVICES", "2", 1);
    gpu_uuid(1, uuid1);
    CHECK(strcmp(uuid0, uuid1) != 0);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    s = expect(0, &err, ARGS("run", "--mps", "--", self, "print-env"));
    snprintf(want, sizeof want,
             "CUDA_MPS_PIPE_DIRECTORY=%s\nCUDA_MPS_LOG_DIRECTORY=%s\nCUDA_VISIBLE_DEVICES=%s\n",
             gpu_path(uuid1, "pipe"), gpu_path(uuid1, "log"), uuid1);
    CHECK_STREQ(s, want);
    CHECK(running(daemon_pid(uuid1)) && running(daemon_pid(uuid0)));
    CHECK(daemon_pid(uuid0) != daemon_pid(uuid1));
    free(s);
    free(err);
    unsetenv("CUDA_VISIBLE_DEVICES");
}

static void case_two_gpus(void)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    const char *ran = lt_path("ran");
    char touch[4400];
    snprintf(touch, sizeof touch, "echo ran > '%s'", ran);
    char *err;
    unsetenv("CUDA_VISIBLE_DEVICES");
    free(expect(2, &err, ARGS("run", "--mps", "--", "/bin/sh", "-c", touch)));
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK_CONTAINS(err, "cushare: run: --mps needs exactly one visible GPU; 2 are visible "
                        "(CUDA_VISIBLE_DEVICES is unset)");
    CHECK_CONTAINS(err, "pick one with CUDA_VISIBLE_DEVICES, e.g. CUDA_VISIBLE_DEVICES=0");
    free(err);
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    free(expect(2, &err, ARGS("run", "--mps", "--", "/bin/sh", "-c", touch)));
    CHECK_CONTAINS(err, "CUDA_VISIBLE_DEVICES=0,1 makes more than one visible");
    free(err);
    setenv("CUDA_VISIBLE_DEVICES", "MIG-1234", 1);
    free(expect(2, &err, ARGS("run", "--mps", "--", "/bin/sh", "-c", touch)));
    CHECK_CONTAINS(err, "CUDA_VISIBLE_DEVICES=MIG-1234 names no GPU of this node");
    free(err);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK(access(ran, F_OK) != 0);
    check_mps_dir_empty();
}

static void case_clients(void)
{
    char uuid[48];
    gpu_uuid(0, uuid);
    char self[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char ledger[4300];
    snprintf(ledger, sizeof ledger, "%s", lt_path("t.ledger"));
    int fds[2];
    CHECK(pipe(fds) == 0);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", fds[1]);
    fflush(NULL);
    pid_t run = cs_fork_tied();
    if (run == 0) {
        close(fds[0]);
        execl(cli, cli, "run", "--mps", "--mem", "1GiB", "--ledger", ledger, "--", self,
              "client", fd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    pid_t client;
    cs_read_full(fds[0], &client, sizeof client, 30000);
    pid_t daemon = daemon_pid(uuid);
    CHECK(running(daemon));

    char want[200];
    char *s = expect(0, NULL, ARGS("mps", "status", "--json"));
    snprintf(want, sizeof want, "\"pid\":%d,\"servers\":[%d],\"clients\":[%d]", (int)daemon,
             (int)daemon, (int)client);
    CHECK_CONTAINS(s, want);
    free(s);
    s = expect(0, NULL, ARGS("status", "--json", ledger));
    snprintf(want, sizeof want, "\"mps_daemon\":%d,", (int)daemon);
    CHECK_CONTAINS(s, want);
    snprintf(want, sizeof want, "\"pid\":%d,", (int)client);
    CHECK_CONTAINS(s, want);
    CHECK_CONTAINS(strstr(s, want), "\"mode\":\"mps\"");
    free(s);
    s = expect(0, NULL, ARGS("status", ledger));
    CHECK_CONTAINS(s, "device 0: concurrent: cushare's MPS control daemon (pid ");
    free(s);

    /* A daemon with a client is not stopped without --force. */
    char *err;
    free(expect(1, &err, ARGS("mps", "stop")));
    snprintf(want, sizeof want, "serves clients (pids %d): not stopped; --force", (int)client);
    CHECK_CONTAINS(err, want);
    free(err);
    CHECK(running(daemon));
    s = expect(0, NULL, ARGS("mps", "stop", "--force"));
    snprintf(want, sizeof want, "stopped (pid %d; its clients %d lost MPS)", (int)daemon,
             (int)client);
    CHECK_CONTAINS(s, want);
    free(s);
    CHECK_EQ(waitpid(daemon, NULL, WNOHANG), daemon);

    s = expect(0, NULL, ARGS("status", "--json", ledger));
    CHECK_CONTAINS(s, "\"mps_daemon\":null,");
    CHECK_CONTAINS(s, "\"mode\":\"time-sliced\"");
    free(s);
    CHECK(kill(run, SIGTERM) == 0);
    lt_wait(run, 30);
    close(fds[0]);
}

/* `fake-nvidia-cuda-mps-control` ARG with `input` on stdin: exit code,
 * stdout into out (freed by the caller). */
static int fake_ctl(const char *pipe_dir, const char *arg, const char *input, char **out)
{
    const char *in = lt_path("fake.in"), *op = lt_path("fake.out");
    char ip[4300], opc[4300];
    snprintf(ip, sizeof ip, "%s", in);
    snprintf(opc, sizeof opc, "%s", op);
    lt_write_file(ip, input, strlen(input));
    fflush(NULL);
    pid_t pid = cs_fork_tied();
    if (pid == 0) {
        int i = open(ip, O_RDONLY | O_CLOEXEC);
        int o = open(opc, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (i < 0 || o < 0 || dup2(i, 0) < 0 || dup2(o, 1) < 0)
            _exit(126);
        setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
        execl(fake, fake, arg, (char *)NULL);
        _exit(127);
    }
    int rc = cs_exit_code(lt_wait(pid, 30));
    *out = lt_read_file(opc, NULL);
    CHECK(*out != NULL);
    return rc;
}

struct list_arg {
    const char *pipe;
    const char *query;
    const char *want;
};

static bool reply_is(void *p)
{
    const struct list_arg *a = p;
    char *out;
    fake_ctl(a->pipe, NULL, a->query, &out);
    bool ok = !strcmp(out, a->want);
    free(out);
    return ok;
}

static void case_fake_daemon(void)
{
    char pipe_dir[4300], log_dir[4300], *out;
    snprintf(pipe_dir, sizeof pipe_dir, "%s/fake-pipe", mps_dir);
    snprintf(log_dir, sizeof log_dir, "%s/fake-log", mps_dir);
    setenv("CUDA_MPS_LOG_DIRECTORY", log_dir, 1);
    CHECK_EQ(fake_ctl(pipe_dir, NULL, "get_server_list\n", &out), 1); /* none yet */
    free(out);
    CHECK_EQ(fake_ctl(pipe_dir, "-d", "", &out), 0);
    free(out);
    char pidp[4400];
    snprintf(pidp, sizeof pidp, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
    char *ps = lt_read_file(pidp, NULL);
    CHECK(ps != NULL);
    pid_t daemon = (pid_t)atoi(ps);
    free(ps);
    CHECK(running(daemon));
    /* One daemon per pipe directory. */
    CHECK_EQ(fake_ctl(pipe_dir, "-d", "", &out), 1);
    free(out);

    CHECK_EQ(fake_ctl(pipe_dir, NULL, "get_server_list\nset_default_active_thread_percentage 25\n"
                      "get_default_active_thread_percentage\nbogus\n", &out), 0);
    CHECK_STREQ(out, "25.0\n25.0\nerror unknown command\n");
    free(out);

    /* 48 clients, the 49th refused; the pid of each is listed. */
    int fd[49];
    char reply[64];
    for (int i = 0; i < 48; i++) {
        fd[i] = connect_client(pipe_dir, reply, sizeof reply);
        CHECK_STREQ(reply, "ok 25\n");
    }
    fd[48] = connect_client(pipe_dir, reply, sizeof reply);
    CHECK_STREQ(reply, "error too many clients\n");
    close(fd[48]);
    char want[64];
    snprintf(want, sizeof want, "%d\n", (int)daemon);
    CHECK_EQ(fake_ctl(pipe_dir, NULL, "get_server_list\n", &out), 0);
    CHECK_STREQ(out, want);
    free(out);
    char query[64];
    snprintf(query, sizeof query, "get_client_list %d\n", (int)daemon);
    CHECK_EQ(fake_ctl(pipe_dir, NULL, query, &out), 0);
    CHECK_EQ(lt_count_lines(out), 48);
    snprintf(want, sizeof want, "%d\n", (int)getpid());
    CHECK(!strncmp(out, want, strlen(want)));
    free(out);
    /* Clients gone: no server any more. */
    for (int i = 0; i < 48; i++)
        close(fd[i]);
    struct list_arg none = {pipe_dir, "get_server_list\n", ""};
    CHECK(cs_wait_until(reply_is, &none, 10000));

    CHECK_EQ(fake_ctl(pipe_dir, NULL, "quit\n", &out), 0);
    free(out);
    CHECK_EQ(cs_exit_code(lt_wait(daemon, 30)), 0);
    CHECK(access(pidp, F_OK) != 0);
    char sock[4400];
    snprintf(sock, sizeof sock, "%s/control", pipe_dir);
    CHECK(access(sock, F_OK) != 0);
    char logf[4400];
    snprintf(logf, sizeof logf, "%s/control.log", log_dir);
    char *log = lt_read_file(logf, NULL);
    CHECK(log != NULL);
    CHECK_CONTAINS(log, "refused a second daemon");
    CHECK_CONTAINS(log, "refused client ");
    CHECK_CONTAINS(log, "gone (0 clients)");
    CHECK_CONTAINS(log, "] exit\n");
    free(log);
    unsetenv("CUDA_MPS_LOG_DIRECTORY");
}

/* At exit: every daemon still running in our directory is killed (they
 * are ours: reaped too). Runs before the directory is removed. */
/* The directories a throwaway user must reach: the test's (traversable)
 * and the MPS directory (shared as the node's is: 1777). */
static const struct cs_test_user *share_with_attacker(void)
{
    const struct cs_test_user *u = cs_test_user();
    CHECK(chmod(lt_dir(), 0755) == 0);
    CHECK(chmod(mps_dir, 01777) == 0);
    return u;
}

static bool file_exists(void *path)
{
    return access(path, F_OK) == 0;
}

static pid_t lock_holder_pid;

/* At exit, before the throwaway user is deleted (atexit runs in
 * reverse): a failed check must not leave the holder running. */
static void stop_lock_holder(void)
{
    if (lock_holder_pid > 0) {
        kill(lock_holder_pid, SIGKILL);
        waitpid(lock_holder_pid, NULL, 0);
        lock_holder_pid = 0;
    }
}

/* As the attacker: opens `path` read-only (all a 0644 file allows),
 * takes flock on it, says so by creating `ready`, and holds it until
 * killed. */
static int role_hold_lock(const char *path, const char *ready)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX))
        return 1;
    int r = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (r < 0)
        return 1;
    close(r);
    for (;;)
        pause();
}

static void case_lock_held(void)
{
    const struct cs_test_user *u = share_with_attacker();
    char uuid[48];
    gpu_uuid(0, uuid);
    char *s = expect(0, NULL, ARGS("mps", "start"));
    pid_t daemon = pid_after(s, "started (pid ");
    free(s);
    char ready[4400];
    snprintf(ready, sizeof ready, "%s/attacker.ready", mps_dir);
    char *argv[] = {(char *)cs_test_self(), "hold-lock", (char *)gpu_path(uuid, "lock"), ready,
                    NULL};
    pid_t holder = lock_holder_pid = cs_test_spawn_as(u, argv);
    atexit(stop_lock_holder);
    CHECK(cs_wait_until(file_exists, ready, 10000));

    /* Bounded: run_cli fails the test if the command takes 60 s. */
    char *err;
    s = expect(1, &err, ARGS("mps", "stop"));
    char want[128];
    snprintf(want, sizeof want, "held by pid %d (uid %u, ", (int)holder, (unsigned)u->uid);
    CHECK_CONTAINS(err, want);
    free(s);
    free(err);
    CHECK(running(daemon));

    stop_lock_holder();
    s = expect(0, NULL, ARGS("mps", "stop"));
    snprintf(want, sizeof want, "stopped (pid %d)", (int)daemon);
    CHECK_CONTAINS(s, want);
    free(s);
}

static void case_squat(void)
{
    const struct cs_test_user *u = share_with_attacker();
    char uuid[48];
    gpu_uuid(0, uuid);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s", mps_dir, uuid);
    char *argv[] = {"mkdir", "-m", "0755", dir, NULL};
    CHECK_EQ(cs_test_run_as(u, argv), 0);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && st.st_uid == u->uid);

    char *err;
    char *s = expect(0, &err, ARGS("mps", "start"));
    pid_t daemon = pid_after(s, "started (pid ");
    CHECK_CONTAINS(err, "was made by uid");
    CHECK_CONTAINS(err, "moved aside to");
    free(s);
    free(err);
    CHECK(stat(dir, &st) == 0 && st.st_uid == 0);
    CHECK_EQ(daemon_pid(uuid), daemon);
    s = expect(0, NULL, ARGS("mps", "stop"));
    CHECK_CONTAINS(s, "stopped (pid ");
    free(s);
}

static void kill_daemons(void)
{
    static pid_t owner;
    if (!owner) {
        owner = getpid();
        return;
    }
    if (getpid() != owner)
        return; /* a forked child that failed: the daemons are the test's */
    DIR *d = opendir(mps_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        pid_t p = daemon_pid(e->d_name);
        if (p > 0 && running(p)) {
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
        }
    }
    if (d)
        closedir(d);
}

static void at_exit(void)
{
    kill_daemons();
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "print-env"))
        return role_print_env();
    if (argc == 3 && !strcmp(argv[1], "client"))
        return role_client(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "hold-lock"))
        return role_hold_lock(argv[2], argv[3]);
    CHECK(argc == 2);
    const char *b = getenv("CS_BUILD_DIR");
    const char *ctl = getenv("CUSHARE_MPS_CONTROL");
    CHECK(b != NULL && ctl != NULL);
    snprintf(cli, sizeof cli, "%s/cushare", b);
    snprintf(fake, sizeof fake, "%s", ctl);
    CHECK(access(cli, X_OK) == 0 && access(fake, X_OK) == 0);
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    snprintf(mps_dir, sizeof mps_dir, "%s", lt_path("mps"));
    CHECK(mkdir(mps_dir, 0700) == 0);
    setenv("CUSHARE_MPS_DIR", mps_dir, 1);
    char xdg[4300];
    snprintf(xdg, sizeof xdg, "%s", lt_path("xdg"));
    CHECK(mkdir(xdg, 0700) == 0);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    kill_daemons(); /* notes the owner: forked children never kill */
    atexit(at_exit); /* after lt_dir's: runs first */
    if (!strcmp(argv[1], "start_stop"))
        case_start_stop();
    else if (!strcmp(argv[1], "concurrent"))
        case_concurrent();
    else if (!strcmp(argv[1], "stale"))
        case_stale();
    else if (!strcmp(argv[1], "killed"))
        case_killed();
    else if (!strcmp(argv[1], "missing"))
        case_missing();
    else if (!strcmp(argv[1], "run_env"))
        case_run_env();
    else if (!strcmp(argv[1], "two_gpus"))
        case_two_gpus();
    else if (!strcmp(argv[1], "clients"))
        case_clients();
    else if (!strcmp(argv[1], "fake_daemon"))
        case_fake_daemon();
    else if (!strcmp(argv[1], "lock_held"))
        case_lock_held();
    else if (!strcmp(argv[1], "squat"))
        case_squat();
    else
        CHECK(!"unknown case");
    printf("mps_node_%s: ok\n", argv[1]);
    return 0;
}
