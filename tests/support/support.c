/*
 * The tests' helper library (support.h says what each helper promises).
 * Failures here print where and why and exit 1, like CHECK.
 */
#define _GNU_SOURCE
#include "support/support.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("test support: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

double cs_test_scale(void)
{
    const char *s = getenv("CS_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

int64_t cs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double cs_ms_since(int64_t t0_ns)
{
    return (double)(cs_now_ns() - t0_ns) / 1e6;
}

int64_t cs_deadline_ns(double ms)
{
    return cs_now_ns() + (int64_t)(ms * cs_test_scale() * 1e6);
}

void cs_sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool cs_wait_until(bool (*cond)(void *), void *arg, double ms)
{
    int64_t deadline = cs_deadline_ns(ms);
    for (;;) {
        if (cond(arg))
            return true;
        if (cs_now_ns() > deadline)
            return false;
        cs_sleep_ms(1);
    }
}

void cs_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIPPED: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    exit(CS_TEST_SKIP);
}

void cs_require_root(const char *why)
{
    if (geteuid() != 0)
        cs_skip("needs root (%s); run the suite as root to include it", why);
}

pid_t cs_fork_tied(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Parent died before prctl? (0: pid 1 of a new namespace, whose
         * parent lies outside it and cannot be named.) */
        pid_t pp = getppid();
        if (pp != parent && pp != 0)
            _exit(99);
    }
    return pid;
}

pid_t cs_spawn(char *const argv[], char *const env[])
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid > 0)
        return pid;
    for (int i = 0; env && env[i]; i++)
        putenv(env[i]);
    execv(argv[0], argv);
    fprintf(stderr, "test support: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int cs_run(char *const argv[], bool quiet)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0)
                dup2(fd, STDOUT_FILENO);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            fail("waitpid(%d): %s", (int)pid, strerror(errno));
    return cs_exit_code(st);
}

void cs_prefer_cpu(pid_t pid)
{
    if (setpriority(PRIO_PROCESS, (id_t)pid, -10) != 0 && !getenv("CS_PREFER_CPU_WARNED")) {
        fprintf(stderr, "test support: cannot raise the priority of a measured process (%s): "
                        "CPU hogs beside the suite may lower its measured share\n",
                strerror(errno));
        setenv("CS_PREFER_CPU_WARNED", "1", 1);
    }
}

int cs_wait_child(pid_t pid, double ms)
{
    int64_t deadline = cs_deadline_ns(ms);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            fail("waitpid(%d): %s", (int)pid, strerror(errno));
        if (cs_now_ns() > deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
            return -1;
        }
        cs_sleep_ms(1);
    }
}

int cs_exit_code(int status)
{
    if (status < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void cs_wait_ok(pid_t pid, double ms)
{
    int st = cs_wait_child(pid, ms);
    if (st < 0)
        fail("child %d did not finish within %.0f ms (x%g)", (int)pid, ms, cs_test_scale());
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("child %d failed: %s %d", (int)pid, WIFEXITED(st) ? "exit" : "signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

void cs_read_full(int fd, void *buf, size_t len, double ms)
{
    int64_t deadline = cs_deadline_ns(ms);
    size_t got = 0;
    while (got < len) {
        int64_t left = deadline - cs_now_ns();
        if (left <= 0)
            fail("read of %zu bytes from fd %d: %zu after %.0f ms (x%g)", len, fd, got, ms,
                 cs_test_scale());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left / 1000000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("poll: %s", strerror(errno));
        if (r == 0)
            continue;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("read from fd %d: %s", fd, n ? strerror(errno) : "end of file");
        got += (size_t)n;
    }
}

void *cs_shared(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("mmap %zu shared bytes: %s", len, strerror(errno));
    memset(p, 0, len);
    return p;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

void cs_rmtree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

void cs_gate_init(struct cs_gate *g)
{
    if (pipe2(g->arrived, O_CLOEXEC) != 0 || pipe2(g->go, O_CLOEXEC) != 0)
        fail("pipe: %s", strerror(errno));
}

void cs_gate_child(struct cs_gate *g)
{
    /* Every copy of go[1] outside the parent must go, or EOF never comes. */
    if (g->go[1] >= 0)
        close(g->go[1]);
    if (g->arrived[0] >= 0)
        close(g->arrived[0]);
    g->go[1] = g->arrived[0] = -1;
}

void cs_gate_arrive(struct cs_gate *g)
{
    cs_gate_child(g);
    char c = 1, x;
    if (write(g->arrived[1], &c, 1) != 1)
        _exit(98);
    close(g->arrived[1]);
    while (read(g->go[0], &x, 1) < 0 && errno == EINTR) {
    }
    close(g->go[0]);
}

void cs_gate_open(struct cs_gate *g, int n, double ms)
{
    close(g->arrived[1]);
    close(g->go[0]);
    for (int i = 0; i < n; i++) {
        char c;
        cs_read_full(g->arrived[0], &c, 1, ms);
    }
    close(g->arrived[0]);
    close(g->go[1]);
}

/* State letter of /proc/<id>/stat (any thread id works there, listed or
 * not): after the ")" that ends the name. */
static char task_state(pid_t id)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)id);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return '?';
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' ? rp[2] : '?';
}

void cs_wait_blocked(pid_t tid, double ms)
{
    int64_t deadline = cs_deadline_ns(ms);
    for (;;) {
        char s = task_state(tid);
        if (s == 'S' || s == 'D')
            return;
        if (cs_now_ns() > deadline)
            fail("task %d never blocked within %.0f ms (x%g), state %c", (int)tid, ms,
                 cs_test_scale(), s);
        cs_sleep_ms(0.1);
    }
}
