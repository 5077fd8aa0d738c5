/*
 * cli_run_{limits,signals,killed}: the built `cushare run`.
 *
 *   limits: with CUDA_DEVICE_MEMORY_LIMIT_0=8GiB and CUDA_DEVICE_SM_LIMIT_0=0
 *     inherited, `--mem 1GiB --sm 10` gave the command 8 GiB and no compute
 *     limit on device 0. The command's own configuration (as its library
 *     parses it) must be --mem and --sm on every device, with one line
 *     naming each replaced variable.
 *   signals: INT, TERM, HUP and QUIT sent to `cushare run` reach the
 *     command, whose status becomes run's; the private ledger that existed
 *     while it ran is gone afterwards.
 *   killed: `cushare run` killed with SIGKILL left its command running and
 *     its ledger in place. The command must die with it, and the next run
 *     must sweep the ledger.
 *   terminal: ^C and ^\ on the controlling terminal are sent by the kernel
 *     to the whole foreground process group, the command's too: run must
 *     not relay them (the command would get them twice). SKIP without
 *     pseudo-terminals.
 *
 * The test binary is also the command ("report", "wait-signal", "hold"),
 * reporting through a pipe it inherits.
 */
#include "ledger/ledger_test.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <sys/prctl.h>

#include "core/config.h"

static char cli[4200];
static char xdg[4200]; /* XDG_RUNTIME_DIR of every run: our own directory */

/* Starts `cushare run ARGS -- this-binary ROLE <fd>` with stderr to
 * err_path; returns its pid and the read end of the command's pipe. */
static pid_t start_run(const char *const *args, const char *role, const char *err_path,
                       int *from_cmd)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    char self[4200], fd[16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    snprintf(fd, sizeof fd, "%d", fds[1]);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        /* A failed test takes run along (and run its command). */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
            _exit(126);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (e < 0 || dup2(e, 2) < 0)
            _exit(126);
        const char *argv[32] = {cli, "run"};
        int k = 2;
        for (int i = 0; args[i] && k < 26; i++)
            argv[k++] = args[i];
        argv[k++] = "--";
        argv[k++] = self;
        argv[k++] = role;
        argv[k++] = fd;
        argv[k] = NULL;
        execv(cli, (char **)argv);
        _exit(127);
    }
    close(fds[1]);
    *from_cmd = fds[0];
    return pid;
}

/* ---- the command's roles ---- */

struct limits {
    uint64_t mem[CS_MAX_DEVICES];
    uint32_t sm[CS_MAX_DEVICES];
};

static int role_report(int out)
{
    struct cs_config c;
    CHECK_EQ(cs__config_from_env(&c), 0);
    struct limits l;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        l.mem[d] = cs__config_mem_limit(&c, d);
        l.sm[d] = cs__config_sm_limit(&c, d);
    }
    lt_write_full(out, &l, sizeof l);
    return 0;
}

static int out_fd;
static void on_signal(int sig)
{
    char c = (char)sig;
    lt_write_full(out_fd, &c, 1);
    _exit(40 + sig);
}

struct ready {
    pid_t pid;
    char ledger[256];
};

static void report_ready(int out)
{
    struct ready r = {.pid = getpid()};
    const char *l = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    CHECK(l != NULL);
    snprintf(r.ledger, sizeof r.ledger, "%s", l);
    lt_write_full(out, &r, sizeof r);
}

/* Waits for a relayed signal, reports which, exits 40 + its number. */
static int role_wait_signal(int out)
{
    out_fd = out;
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        CHECK(signal(sigs[i], on_signal) != SIG_ERR);
    report_ready(out);
    for (;;)
        pause();
}

/* Logs every INT and TERM it gets; TERM ends it. Runs in a process group
 * of its own, so that the terminal's ^C does not reach it directly: an INT
 * here can only come from run. */
static void log_signal(int sig)
{
    char c = (char)sig;
    lt_write_full(out_fd, &c, 1);
    if (sig == SIGTERM)
        _exit(40 + sig);
}

static int role_log_signals(int out)
{
    out_fd = out;
    CHECK(setpgid(0, 0) == 0);
    CHECK(signal(SIGINT, log_signal) != SIG_ERR);
    CHECK(signal(SIGTERM, log_signal) != SIG_ERR);
    report_ready(out);
    for (;;)
        pause();
}

/* Joins the run's ledger (a slot, through the fake driver), then waits to
 * be killed. */
static int role_hold(int out)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    report_ready(out);
    for (;;)
        pause();
}

/* ---- the cases ---- */

static int count_entries(const char *d)
{
    DIR *dir = opendir(d);
    if (!dir)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dir);
    return n;
}

static void case_limits(void)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "8GiB", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_3", "2g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "1GiB", 1); /* agrees: not named */
    setenv("CUDA_DEVICE_SM_LIMIT_0", "0", 1);
    setenv("CUDA_DEVICE_SM_LIMIT", "50", 1);
    const char *args[] = {"--mem", "1GiB", "--sm", "10", NULL};
    const char *err = lt_path("limits.err");
    int in;
    pid_t run = start_run(args, "report", err, &in);
    struct limits l;
    cs_read_full(in, &l, sizeof l, 30000);
    close(in);
    cs_wait_ok(run, 30000);
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        CHECK_EQ_U(l.mem[d], 1ull << 30);
        CHECK_EQ(l.sm[d], 10);
    }
    char *msg = lt_read_file(err, NULL);
    printf("%s", msg);
    CHECK_EQ(lt_count_lines(msg), 2);
    CHECK_CONTAINS(msg, "cushare: run: --mem 1GiB replaces the inherited ");
    CHECK_CONTAINS(msg, "CUDA_DEVICE_MEMORY_LIMIT_0=8GiB");
    CHECK_CONTAINS(msg, "CUDA_DEVICE_MEMORY_LIMIT_3=2g");
    CHECK(strstr(msg, "CUDA_DEVICE_MEMORY_LIMIT=1GiB") == NULL);
    CHECK_CONTAINS(msg, "cushare: run: --sm 10 replaces the inherited ");
    CHECK_CONTAINS(msg, "CUDA_DEVICE_SM_LIMIT_0=0");
    CHECK_CONTAINS(msg, "CUDA_DEVICE_SM_LIMIT=50");
    free(msg);

    /* Without --mem/--sm the inherited variables are the configuration. */
    const char *none[] = {NULL};
    run = start_run(none, "report", err, &in);
    cs_read_full(in, &l, sizeof l, 30000);
    close(in);
    cs_wait_ok(run, 30000);
    CHECK_EQ_U(l.mem[0], 8ull << 30);
    CHECK_EQ_U(l.mem[3], 2ull << 30);
    CHECK_EQ_U(l.mem[1], 1ull << 30);
    CHECK_EQ(l.sm[0], 0);
    CHECK_EQ(l.sm[1], 50);
    msg = lt_read_file(err, NULL);
    CHECK_STREQ(msg, "");
    free(msg);
    printf("cli_run_limits: ok\n");
}

static void case_signals(void)
{
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/cushare-%u", xdg, (unsigned)getuid());
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        const char *args[] = {NULL};
        int in;
        pid_t run = start_run(args, "wait-signal", lt_path("signals.err"), &in);
        struct ready r;
        cs_read_full(in, &r, sizeof r, 30000);
        CHECK(access(r.ledger, F_OK) == 0); /* made by run, kept while it runs */
        CHECK(kill(run, sigs[i]) == 0);
        char got;
        cs_read_full(in, &got, 1, 30000);
        close(in);
        CHECK_EQ(got, sigs[i]);
        int st = lt_wait(run, 30);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 40 + sigs[i]);
        CHECK(access(r.ledger, F_OK) != 0 && errno == ENOENT);
        CHECK_EQ(count_entries(dir), 0);
    }
    printf("cli_run_signals: ok\n");
}

static void case_killed(void)
{
    /* Orphans of the killed run come to us, so we can wait for them. */
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    const char *args[] = {"--mem", "64m", NULL};
    int in;
    pid_t run = start_run(args, "hold", lt_path("killed.err"), &in);
    struct ready r;
    cs_read_full(in, &r, sizeof r, 30000);
    close(in);
    CHECK(access(r.ledger, F_OK) == 0);
    CHECK(kill(run, SIGKILL) == 0);
    int st = lt_wait(run, 30);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* The command dies with it (it would wait for a signal for ever). */
    st = lt_wait(r.pid, 30);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Nobody was left to remove the ledger: the next run sweeps it. */
    CHECK(access(r.ledger, F_OK) == 0);
    const char *none[] = {NULL};
    run = start_run(none, "report", lt_path("next.err"), &in);
    struct limits l;
    cs_read_full(in, &l, sizeof l, 30000);
    close(in);
    cs_wait_ok(run, 30000);
    CHECK(access(r.ledger, F_OK) != 0 && errno == ENOENT);
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/cushare-%u", xdg, (unsigned)getuid());
    CHECK_EQ(count_entries(dir), 0);
    printf("cli_run_killed: ok\n");
}

/* In run's process group beside it: reports the INT and QUIT the terminal
 * sends that group. Dies with run. */
static void witness(int out)
{
    out_fd = out;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || signal(SIGINT, log_signal) == SIG_ERR ||
        signal(SIGQUIT, log_signal) == SIG_ERR)
        _exit(126);
    lt_write_full(out, "w", 1);
    for (;;)
        pause();
}

/* Reads one byte that must be `want`. */
static void expect_byte(int fd, char want)
{
    char got;
    cs_read_full(fd, &got, 1, 30000);
    CHECK_EQ(got, want);
}

/* `cushare run -- log-signals` as the session leader of a new pseudo-
 * terminal, a witness in its process group, the command in a group of its
 * own. ^C then ^\: the terminal signals every member of run's group with
 * INT, then with QUIT, so once the witness has its QUIT, run has its INT
 * (and QUIT) pending or handled. Then TERM to run, which relays it. Run
 * handles INT before that TERM (earlier, or pending together: lower
 * numbers first), so an INT it wrongly relayed would reach the command
 * before TERM: the command's log must read TERM alone. */
static int case_terminal(void)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
        cs_skip("no pseudo-terminal here (%s)", strerror(errno));
    char slave[256];
    CHECK(ptsname_r(master, slave, sizeof slave) == 0);
    int cmd[2], wit[2];
    CHECK(pipe(cmd) == 0 && pipe2(wit, O_CLOEXEC) == 0);
    fflush(NULL);
    pid_t run = fork();
    CHECK(run >= 0);
    if (run == 0) {
        close(cmd[0]);
        close(wit[0]);
        if (setsid() < 0)
            _exit(126);
        int tty = open(slave, O_RDWR); /* becomes the controlling terminal */
        if (tty < 0 || dup2(tty, 0) < 0)
            _exit(126);
        pid_t w = fork();
        if (w < 0)
            _exit(126);
        if (w == 0)
            witness(wit[1]);
        char self[4200], fd[16];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            _exit(126);
        self[n] = '\0';
        snprintf(fd, sizeof fd, "%d", cmd[1]);
        execl(cli, cli, "run", "--", self, "log-signals", fd, (char *)NULL);
        _exit(127);
    }
    close(cmd[1]);
    close(wit[1]);
    struct ready r;
    cs_read_full(cmd[0], &r, sizeof r, 30000);
    expect_byte(wit[0], 'w');
    CHECK_EQ(write(master, "\003\034", 2), 2);
    char got[2]; /* in either order: one handler may interrupt the other */
    cs_read_full(wit[0], got, 2, 30000);
    CHECK((got[0] == SIGINT && got[1] == SIGQUIT) || (got[0] == SIGQUIT && got[1] == SIGINT));
    CHECK(kill(run, SIGTERM) == 0);
    expect_byte(cmd[0], SIGTERM);
    int st = lt_wait(run, 30);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 40 + SIGTERM);
    close(cmd[0]);
    close(wit[0]);
    close(master);
    printf("cli_run_terminal: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "report"))
        return role_report(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "wait-signal"))
        return role_wait_signal(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "hold"))
        return role_hold(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "log-signals"))
        return role_log_signals(atoi(argv[2]));
    CHECK(argc == 2);
    const char *b = getenv("CS_BUILD_DIR");
    CHECK(b != NULL);
    snprintf(cli, sizeof cli, "%s/cushare", b);
    CHECK(access(cli, X_OK) == 0);
    snprintf(xdg, sizeof xdg, "%s", lt_path("xdg"));
    CHECK(mkdir(xdg, 0700) == 0);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (!strcmp(argv[1], "limits"))
        case_limits();
    else if (!strcmp(argv[1], "signals"))
        case_signals();
    else if (!strcmp(argv[1], "killed"))
        case_killed();
    else if (!strcmp(argv[1], "terminal"))
        return case_terminal();
    else
        CHECK(!"unknown case");
    return 0;
}
