/*
 * Harness of the parking tests: tenant processes (park_tenant) under the
 * preloaded library over the fake driver, talked to through pipes, the
 * `cushare` command, and read-only views of the fake's state and of the
 * tenant's ledger. Each test has its own directory under
 * $CS_BUILD_DIR/tmp/park/<test>/.
 */
#ifndef CS_TESTS_PARK_TEST_H
#define CS_TESTS_PARK_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "check.h"
#include "cushare/ledger.h"
#include "fakecuda/fakecuda_state.h"
#include "support/support.h"

#define MIB (1ull << 20)

static char pt_dir[4096];

static inline const char *pt_path(const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    char *p = malloc(4700);
    CHECK(p != NULL);
    snprintf(p, 4700, "%s/%s", pt_dir, name);
    return p;
}

static inline void pt_setup(const char *test)
{
    const char *b = getenv("CS_BUILD_DIR");
    CHECK(b != NULL);
    char parent[2048];
    CHECK(strlen(b) < sizeof parent - 16);
    snprintf(parent, sizeof parent, "%s/tmp/park", b);
    CHECK(mkdir(parent, 0755) == 0 || errno == EEXIST);
    snprintf(pt_dir, sizeof pt_dir, "%s/%s", parent, test);
    cs_rmtree(pt_dir);
    CHECK(mkdir(pt_dir, 0755) == 0);
    setenv("FAKECUDA_STATE", pt_path("gpu.state"), 1);
}

struct pt_tenant {
    pid_t pid;
    int in, out;   /* its stdin (we write), its stdout (we read) */
};

/* One line from t, within the scaled `ms`; fails the test otherwise. */
static inline void pt_line(struct pt_tenant *t, char *buf, size_t len, double ms)
{
    size_t n = 0;
    int64_t dl = cs_deadline_ns(ms);
    while (n + 1 < len) {
        struct pollfd p = {.fd = t->out, .events = POLLIN};
        int64_t left = (dl - cs_now_ns()) / 1000000;
        CHECK(left > 0);
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        CHECK(pr == 1);
        char c;
        ssize_t r = read(t->out, &c, 1);
        CHECK(r == 1);
        if (c == '\n')
            break;
        buf[n++] = c;
    }
    buf[n] = '\0';
}

/* Starts a tenant on `ledger` with the given budget (MiB, 0 none). */
static inline struct pt_tenant pt_spawn(const char *ledger, unsigned budget_mib)
{
    int in[2], out[2];
    CHECK(pipe(in) == 0 && pipe(out) == 0);
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        char bin[4096], lim[64];
        snprintf(bin, sizeof bin, "%s/park_tenant", getenv("CS_BUILD_DIR"));
        snprintf(lim, sizeof lim, "%um", budget_mib);
        setenv("LD_PRELOAD", getenv("CUSHARE_LIBRARY"), 1);
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
        setenv("CUDA_DEVICE_MEMORY_LIMIT", lim, 1);
        execl(bin, bin, (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    struct pt_tenant t = {.pid = pid, .in = in[1], .out = out[0]};
    char line[128];
    pt_line(&t, line, sizeof line, 10000);
    CHECK(!strncmp(line, "ready ", 6));
    return t;
}

/* Sends a command; returns the CUresult it answered. */
static inline int pt_cmd(struct pt_tenant *t, const char *cmd, double ms)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s\n", cmd);
    CHECK(write(t->in, buf, strlen(buf)) == (ssize_t)strlen(buf));
    pt_line(t, buf, sizeof buf, ms);
    CHECK(!strncmp(buf, "ok ", 3));
    return atoi(buf + 3);
}

static inline void pt_quit(struct pt_tenant *t)
{
    CHECK(write(t->in, "q\n", 2) == 2);
    cs_wait_ok(t->pid, 10000);
    close(t->in), close(t->out);
}

static inline void pt_kill(struct pt_tenant *t)
{
    kill(t->pid, SIGKILL);
    int st;
    waitpid(t->pid, &st, 0);
    close(t->in), close(t->out);
}

/* Runs `cushare ARGS` with `extra_env` ("K=V" or NULL); exit code. */
static inline int pt_cli(const char *extra_env, const char *fmt, ...)
{
    char args[3000], cmd[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "env %s '%s/cushare' %s", extra_env ? extra_env : "",
             getenv("CS_BUILD_DIR"), args);
    fflush(stdout);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The ledger, mapped read-only as a monitor maps it. */
static inline const struct cs_ledger_header *pt_ledger(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    void *m = mmap(NULL, CS_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    close(fd);
    return m;
}

static inline const struct cs_ledger_slot *pt_slot_of(const struct cs_ledger_header *h, int pid)
{
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        const struct cs_ledger_slot *s =
            (const void *)((const char *)h + CS_LEDGER_HEADER_SIZE + (size_t)i * 2048);
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == CS_SLOT_LIVE && s->pid == pid)
            return s;
    }
    return NULL;
}

static inline uint32_t pt_park_state(const struct cs_ledger_header *h)
{
    return __atomic_load_n(&h->park.state, __ATOMIC_ACQUIRE);
}

static inline uint32_t pt_ckpt_state(struct fakecuda_state *s, int pid)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(s, pid);
    CHECK(p != NULL);
    return __atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE);
}

static inline uint64_t pt_checkpointed(struct fakecuda_state *s, int pid)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(s, pid);
    CHECK(p != NULL);
    uint64_t sum = 0;
    for (int k = 0; k < FAKECUDA_KIND_COUNT; k++)
        sum += p->checkpointed[0][k];
    return sum;
}

#endif
