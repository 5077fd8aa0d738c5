/*
 * TEST of the test tool tests/fakecuda (never shipped): the MPS client side
 * of the fake driver (fake_mps.c). The test plays the MPS control daemon
 * itself: a thread listening on <pipe>/control that answers each
 * "client <pid>" line with the reply the current scenario wants and keeps
 * the connection. Each scenario runs in forked children (CUDA state and
 * the fake's configuration are per process; the parent never calls CUDA).
 *
 *   detection   no daemon, a stale socket: ordinary processes (attribute
 *               133 = 0); "ok <pct>": a client (133 = 1, entry marked, its
 *               context charged FAKECUDA_MPS_CTX_BYTES, NVML lists it);
 *               thread percentage = min(daemon's, the client's own);
 *               any other answer or a hang-up: cuInit fails with
 *               CUDA_ERROR_MPS_CONNECTION_FAILED, and a later one retries;
 *               the connection lives exactly as long as the client
 *               (a fork child does not keep its parent's).
 *   occupancy   FAKECUDA_SMS, cuOccupancyMaxActiveBlocksPerMultiprocessor
 *               [WithFlags] and the cooperative-launch limit.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ULL * 1024ULL)
#define SMS 100             /* FAKECUDA_SMS of this test */
#define CTX_BYTES (100 * MiB)
#define MPS_CTX_BYTES (64 * MiB)
#define CHILD_MS 10000.0
#define PPM(pct) ((uint32_t)(pct) * 10000u) /* a thread percentage in ppm */

static char g_dir[] = "/tmp/fakecuda-mps-XXXXXX";
static char g_pipe[256];  /* the daemon's pipe directory */
static char g_state[256]; /* FAKECUDA_STATE */

/* ---- the test's MPS control daemon --------------------------------------- */

#define MAX_CONNS 64
static struct {
    int lfd;
    pthread_t th;
    pthread_mutex_t mu;
    char reply[32];                      /* under mu; "" = hang up at once */
    int n;                               /* under mu */
    struct { int fd, pid; } conn[MAX_CONNS]; /* under mu; written by the thread */
} D = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void daemon_reply(const char *r)
{
    pthread_mutex_lock(&D.mu);
    snprintf(D.reply, sizeof D.reply, "%s", r);
    pthread_mutex_unlock(&D.mu);
}

/* One "client <pid>\n" line, or -1. */
static int read_client(int fd)
{
    char line[64];
    size_t n = 0;
    while (n + 1 < sizeof line) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(5000 * cs_test_scale())) <= 0 || read(fd, line + n, 1) != 1)
            return -1;
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = 0;
    int pid;
    return sscanf(line, "client %d", &pid) == 1 ? pid : -1;
}

static void *daemon_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept4(D.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && errno == EINTR)
            continue;
        if (fd < 0)
            return NULL; /* shut down */
        int pid = read_client(fd);
        pthread_mutex_lock(&D.mu);
        char reply[32];
        snprintf(reply, sizeof reply, "%s", D.reply);
        CHECK(D.n < MAX_CONNS);
        D.conn[D.n].fd = fd;
        D.conn[D.n].pid = pid;
        D.n++;
        pthread_mutex_unlock(&D.mu);
        if (!*reply)
            shutdown(fd, SHUT_RDWR);
        else
            CHECK(write(fd, reply, strlen(reply)) == (ssize_t)strlen(reply));
    }
}

static int listen_on(const char *dir)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(fd, 16) == 0);
    return fd;
}

static void daemon_start(void)
{
    D.lfd = listen_on(g_pipe);
    daemon_reply("ok 100\n");
    CHECK(pthread_create(&D.th, NULL, daemon_main, NULL) == 0);
}

static void daemon_stop(void)
{
    shutdown(D.lfd, SHUT_RDWR); /* accept() returns: the thread ends */
    CHECK(pthread_join(D.th, NULL) == 0);
    close(D.lfd);
    for (int i = 0; i < D.n; i++)
        close(D.conn[i].fd);
}

/* The daemon's end of pid's connection, or -1 (never connected). */
static int conn_of(int pid)
{
    int fd = -1;
    pthread_mutex_lock(&D.mu);
    for (int i = 0; i < D.n; i++)
        if (D.conn[i].pid == pid)
            fd = D.conn[i].fd;
    pthread_mutex_unlock(&D.mu);
    return fd;
}

/* Whether the client end of the connection is still open (no EOF now). */
static int conn_open(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* Waits (scaled) until the client end of the connection is closed. */
static void conn_wait_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, (int)(CHILD_MS * cs_test_scale())), 1);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
}

/* ---- children ------------------------------------------------------------- */

static void pipe_dir(const char *dir)
{
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
}

static CUcontext ctx_up(int ordinal)
{
    CUcontext ctx;
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, ordinal), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
}

static CUfunction kernel(void)
{
    static const char image[] = "fake cubin";
    CUmodule mod;
    CUfunction f;
    CHECK_EQ(cuModuleLoadData(&mod, image), CUDA_SUCCESS);
    CHECK_EQ(cuModuleGetFunction(&f, mod, "k"), CUDA_SUCCESS);
    return f;
}

static int mps_attr(int ordinal)
{
    int v = -1;
    CHECK_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, ordinal), CUDA_SUCCESS);
    return v;
}

static const struct fakecuda_proc *my_entry(void)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(fakecuda_driver_state(), getpid());
    CHECK(p != NULL);
    return p;
}

/* NVML's view of this process on device 0: its listed memory, or -1. */
static long long nvml_listed(void)
{
    nvmlDevice_t dev;
    nvmlProcessInfo_t info[8];
    unsigned n = 8;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, info), NVML_SUCCESS);
    long long mem = -1;
    for (unsigned i = 0; i < n; i++)
        if (info[i].pid == (unsigned)getpid())
            mem = (long long)info[i].usedGpuMemory;
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
    return mem;
}

/* An ordinary process: no MPS attribute, time-sliced context bytes. */
static void child_ordinary(const char *dir)
{
    pipe_dir(dir);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(mps_attr(0), 0);
    ctx_up(0);
    const struct fakecuda_proc *p = my_entry();
    CHECK_EQ(p->mps_mask, 0);
    CHECK_EQ_U(fakecuda_load(&p->kind_used[0][FAKECUDA_KIND_CONTEXT]), CTX_BYTES);
    exit(0);
}

/* A client with thread percentage `ppm`; waits for a byte on `hold`
 * (if >= 0) before exiting, so the parent can look at its connection. */
static void child_client(uint32_t ppm, int hold)
{
    pipe_dir(g_pipe);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS); /* once per process: no second connection */
    CHECK_EQ(mps_attr(0), 1);
    CHECK_EQ(mps_attr(1), 1);
    ctx_up(0);
    const struct fakecuda_proc *p = my_entry();
    CHECK_EQ(p->mps_mask, 3); /* every visible device */
    CHECK_EQ(p->mps_cap_ppm, ppm);
    CHECK_EQ_U(fakecuda_load(&p->kind_used[0][FAKECUDA_KIND_CONTEXT]), MPS_CTX_BYTES);
    /* TODO(H200): what NVML lists for MPS clients; until measured each
     * client is listed with its own memory. */
    CHECK_EQ(nvml_listed(), (long long)MPS_CTX_BYTES);
    if (hold >= 0) {
        char c;
        CHECK_EQ(read(hold, &c, 1), 1);
    }
    exit(0);
}

static pid_t fork_child(void)
{
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    return pid;
}

/* ---- scenarios ------------------------------------------------------------ */

static void detection_off(void)
{
    /* No daemon: nothing at the path. */
    char none[300];
    snprintf(none, sizeof none, "%s/none", g_dir);
    pid_t pid = fork_child();
    if (pid == 0)
        child_ordinary(none);
    cs_wait_ok(pid, CHILD_MS);

    /* A stale socket: a daemon that died left its file, nobody listens. */
    char stale[300];
    snprintf(stale, sizeof stale, "%s/stale", g_dir);
    CHECK(mkdir(stale, 0700) == 0);
    close(listen_on(stale));
    pid = fork_child();
    if (pid == 0)
        child_ordinary(stale);
    cs_wait_ok(pid, CHILD_MS);
}

static void detection_on(void)
{
    /* A client holds its connection while it lives. */
    int hold[2];
    CHECK(pipe(hold) == 0);
    daemon_reply("ok 100\n");
    pid_t pid = fork_child();
    if (pid == 0) {
        close(hold[1]);
        child_client(PPM(100), hold[0]);
    }
    close(hold[0]);
    int fd;
    CS_WAIT_FOR((fd = conn_of(pid)) >= 0, CHILD_MS, "the client's connection");
    CHECK(conn_open(fd));
    CHECK(write(hold[1], "x", 1) == 1);
    cs_wait_ok(pid, CHILD_MS);
    conn_wait_closed(fd);
    close(hold[1]);

    /* The thread percentage: the lower of the daemon's and the client's. */
    daemon_reply("ok 50\n");
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "80", 1);
    pid = fork_child();
    if (pid == 0)
        child_client(PPM(50), -1);
    cs_wait_ok(pid, CHILD_MS);
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30", 1);
    pid = fork_child();
    if (pid == 0)
        child_client(PPM(30), -1);
    cs_wait_ok(pid, CHILD_MS);
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    daemon_reply("ok 100\n");
}

/* A daemon that answers something else, or hangs up: cuInit fails with
 * CUDA_ERROR_MPS_CONNECTION_FAILED and nothing is initialised. With
 * `told` >= 0 the child then tells the parent (`tell`), which makes the
 * daemon answer, and the next cuInit succeeds: a client. */
static void child_refused(int tell, int told)
{
    pipe_dir(g_pipe);
    CHECK_EQ(cuInit(0), CUDA_ERROR_MPS_CONNECTION_FAILED);
    int n;
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    const char *name;
    CHECK_EQ(cuGetErrorName(CUDA_ERROR_MPS_CONNECTION_FAILED, &name), CUDA_SUCCESS);
    CHECK_STREQ(name, "CUDA_ERROR_MPS_CONNECTION_FAILED");
    if (told >= 0) {
        char c = 'x';
        CHECK(write(tell, &c, 1) == 1);
        CHECK_EQ(read(told, &c, 1), 1);
        CHECK_EQ(cuInit(0), CUDA_SUCCESS);
        CHECK_EQ(mps_attr(0), 1);
    }
    exit(0);
}

static void detection_refused(void)
{
    static const char *const bad[] = {"nope\n", "ok\n", "ok 0\n", "ok 101\n", "ok 50x\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        daemon_reply(bad[i]);
        pid_t pid = fork_child();
        if (pid == 0)
            child_refused(-1, -1);
        cs_wait_ok(pid, CHILD_MS);
        int fd = conn_of(pid);
        CHECK(fd >= 0);
        conn_wait_closed(fd); /* the client closed its end at once */
    }
    /* The driver asks again at the next cuInit. */
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    daemon_reply("nope\n");
    pid_t pid = fork_child();
    if (pid == 0)
        child_refused(up[1], down[0]);
    char c;
    cs_read_full(up[0], &c, 1, CHILD_MS);
    daemon_reply("ok 100\n");
    CHECK(write(down[1], &c, 1) == 1);
    cs_wait_ok(pid, CHILD_MS);
    for (int i = 0; i < 2; i++) {
        close(up[i]);
        close(down[i]);
    }
}

/* A client's fork child holds a copy of nothing: the daemon sees the
 * client go although the child lives; the child's own cuInit makes it a
 * client of its own. */
static void detection_fork(void)
{
    int hold[2], ready[2];
    CHECK(pipe(hold) == 0 && pipe(ready) == 0);
    pid_t pid = fork_child();
    if (pid == 0) {
        pipe_dir(g_pipe);
        CHECK_EQ(cuInit(0), CUDA_SUCCESS);
        CHECK_EQ(mps_attr(0), 1);
        pid_t gc = fork(); /* not tied: it must outlive this process */
        CHECK(gc >= 0);
        if (gc == 0) {
            char c;
            CHECK_EQ(read(hold[0], &c, 1), 1); /* the parent has gone */
            CHECK_EQ(cuDeviceGetAttribute(&(int){0}, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0),
                     CUDA_ERROR_NOT_INITIALIZED);
            CHECK_EQ(cuInit(0), CUDA_SUCCESS);
            CHECK_EQ(mps_attr(0), 1);
            CHECK(write(ready[1], "x", 1) == 1);
            CHECK_EQ(read(hold[0], &c, 1), 1);
            exit(0);
        }
        pid_t gcp = gc;
        CHECK(write(ready[1], &gcp, sizeof gcp) == (ssize_t)sizeof gcp);
        exit(0);
    }
    pid_t gc;
    cs_read_full(ready[0], &gc, sizeof gc, CHILD_MS);
    cs_wait_ok(pid, CHILD_MS);
    conn_wait_closed(conn_of(pid)); /* though the grandchild lives */
    CHECK(write(hold[1], "x", 1) == 1);
    char c;
    cs_read_full(ready[0], &c, 1, CHILD_MS);
    int fd = conn_of(gc);
    CHECK(fd >= 0);
    CHECK(conn_open(fd));
    CHECK(write(hold[1], "x", 1) == 1);
    /* The grandchild is not ours to wait for: its end closes when it exits. */
    conn_wait_closed(fd);
}

/* FAKECUDA_MPS_CTX_BYTES defaults to FAKECUDA_CTX_BYTES (not measured). */
static void ctx_bytes_default(void)
{
    pid_t pid = fork_child();
    if (pid == 0) {
        unsetenv("FAKECUDA_MPS_CTX_BYTES");
        pipe_dir(g_pipe);
        CHECK_EQ(cuInit(0), CUDA_SUCCESS);
        CHECK_EQ(mps_attr(0), 1);
        ctx_up(0);
        CHECK_EQ_U(fakecuda_load(&my_entry()->kind_used[0][FAKECUDA_KIND_CONTEXT]), CTX_BYTES);
        exit(0);
    }
    cs_wait_ok(pid, CHILD_MS);
}

/* ---- occupancy -------------------------------------------------------------- */

static int occ(CUfunction f, int threads, size_t shmem)
{
    int n = -1;
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, threads, shmem), CUDA_SUCCESS);
    int m = -1;
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&m, f, threads, shmem,
                                                                  CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE),
             CUDA_SUCCESS);
    CHECK_EQ(m, n);
    return n;
}

static void child_occupancy(void)
{
    pipe_dir(g_pipe);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    int v;
    CHECK_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
    CHECK_EQ(v, SMS);
    int n;
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, (CUfunction)&n, 128, 0), CUDA_ERROR_INVALID_CONTEXT);
    ctx_up(0);
    CUfunction f = kernel();
    /* min(32, 64 warps / warps per block, 233472 / (shmem + 1024)) */
    CHECK_EQ(occ(f, 128, 0), 16);
    CHECK_EQ(occ(f, 100, 0), 16); /* 4 warps */
    CHECK_EQ(occ(f, 1024, 0), 2);
    CHECK_EQ(occ(f, 32, 0), 32);
    CHECK_EQ(occ(f, 1, 0), 32);
    CHECK_EQ(occ(f, 128, 48 * 1024), 4);
    CHECK_EQ(occ(f, 128, 232448), 1);
    CHECK_EQ(occ(f, 128, 232449), 0);
    CHECK_EQ(occ(f, 1025, 0), 0);
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(NULL, f, 128, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, (CUfunction)&n, 128, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 128, 0, 2), CUDA_ERROR_INVALID_VALUE);
    /* A library kernel works too. */
    CUlibrary lib;
    CUkernel k;
    CHECK_EQ(cuLibraryLoadData(&lib, "fake", NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
    CHECK_EQ(cuLibraryGetKernel(&k, lib, "k"), CUDA_SUCCESS);
    CHECK_EQ(occ((CUfunction)k, 256, 0), 8);
    /* cuGetProcAddress resolves both to the exports. */
    void *fn;
    CHECK_EQ(cuGetProcAddress("cuOccupancyMaxActiveBlocksPerMultiprocessor", &fn, 12000, 0, NULL), CUDA_SUCCESS);
    CHECK(fn == (void *)&cuOccupancyMaxActiveBlocksPerMultiprocessor);
    CHECK_EQ(cuGetProcAddress("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", &fn, 12000, 0, NULL),
             CUDA_SUCCESS);
    CHECK(fn == (void *)&cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
    /* A cooperative grid must be resident at once: SMs x occupancy. */
    CHECK_EQ(cuLaunchCooperativeKernel(f, SMS * 16, 1, 1, 128, 1, 1, 0, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchCooperativeKernel(f, SMS * 16 + 1, 1, 1, 128, 1, 1, 0, NULL, NULL),
             CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CHECK_EQ(cuLaunchCooperativeKernel(f, SMS * 2, 1, 1, 1024, 1, 1, 0, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchCooperativeKernel(f, SMS * 2 + 1, 1, 1, 1024, 1, 1, 0, NULL, NULL),
             CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    exit(0);
}

int main(void)
{
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_pipe, sizeof g_pipe, "%s/pipe", g_dir);
    snprintf(g_state, sizeof g_state, "%s/state", g_dir);
    CHECK(mkdir(g_pipe, 0700) == 0);
    setenv("FAKECUDA_STATE", g_state, 1);
    setenv("FAKECUDA_DEVICES", "2", 1);
    setenv("FAKECUDA_SMS", "100", 1);
    setenv("FAKECUDA_CTX_BYTES", "100m", 1);
    setenv("FAKECUDA_MPS_CTX_BYTES", "64m", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    struct fakecuda_state *st = fakecuda_state_open(g_state); /* created with this environment */
    CHECK(st != NULL);
    CHECK_EQ(st->dev[0].sms, SMS);
    daemon_start();

    detection_off();
    detection_on();
    detection_refused();
    detection_fork();
    ctx_bytes_default();
    pid_t pid = fork_child();
    if (pid == 0)
        child_occupancy();
    cs_wait_ok(pid, CHILD_MS);

    daemon_stop();
    fakecuda_state_close(st);
    cs_rmtree(g_dir);
    printf("mps: detection, attribute 133, context bytes, occupancy\n");
    return 0;
}
