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
 *               "error too many clients": CUDA_ERROR_MPS_MAX_CLIENTS_REACHED;
 *               any other answer or a hang-up: cuInit fails with
 *               CUDA_ERROR_MPS_CONNECTION_FAILED, and a later one retries;
 *               the connection lives exactly as long as the client
 *               (a fork child does not keep its parent's).
 *   nvml list   nvmlDeviceGetMPSComputeRunningProcesses_v3 lists a client
 *               with a context on the device (pid + FAKECUDA_NVML_PID_OFFSET,
 *               its own memory), never an ordinary process, a phantom of
 *               FAKECUDA_NVML_EXTRA_PROCS or a device without its context;
 *               too small a count: NVML_ERROR_INSUFFICIENT_SIZE and the
 *               count; FAKECUDA_FAIL_<sym> is honoured. The compute list
 *               holds the client, the ordinary process and, as on the
 *               H200, the server (here the daemon) with 66 MiB.
 *   occupancy   FAKECUDA_SMS, cuOccupancyMaxActiveBlocksPerMultiprocessor
 *               [WithFlags] and the cooperative-launch limit.
 *   timeline    clients' small kernels overlap (two clients' N kernels of
 *               occupancy 0.2 take the time of one's; time-sliced: the
 *               sum), full-occupancy kernels share (the sum), a thread
 *               percentage stretches a kernel and leaves the rest of the
 *               SMs to others, no switch cost among clients but one
 *               between the MPS server and an ordinary process, graphs
 *               occupy their largest node's share, events span their own
 *               stream's work, NVML's busy time is the union, a profile
 *               with more breakpoints than the state holds is coarsened
 *               without moving placed work.
 *   faults      a kernel named fakecuda_illegal_address: its client's and
 *               every other client's next calls fail with
 *               CUDA_ERROR_ILLEGAL_ADDRESS, an ordinary process's do not,
 *               a client that connects afterwards is served.
 *
 * Verdicts read simulated time (the intervals the fake placed on the
 * device timeline in the state file), never the wall clock: each timeline
 * scenario first puts an "anchor" kernel of ANCHOR_MS (scaled) on its own
 * device, so every later launch of the scenario is made before the anchor
 * ends and starts at a point fixed by the model, whatever the scheduler
 * does. Only the two event checks wait for the device, and bound their
 * result by the wall time the launches took.
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
#include "fake_bringup.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ULL * 1024ULL)
#define SMS 100             /* FAKECUDA_SMS of this test */
#define NDEV 9              /* FAKECUDA_DEVICES: a fresh device per timeline scenario */
#define US 1000ULL
#define SW (50 * US)        /* FAKECUDA_CTX_SWITCH_US=50 */
#define ANCHOR_MS 3000.0
/* Kernels of 128-thread blocks (16 resident per SM: 1600 fill the device)
 * at FAKECUDA_NS_PER_BLOCK=1000. */
#define SMALL 320u          /* occupancy 0.2, 320 us */
#define FULL 1600u          /* occupancy 1, 1.6 ms */
#define D_SMALL (SMALL * US)
#define D_FULL (FULL * US)
#define CTX_BYTES (100 * MiB)
#define MPS_CTX_BYTES (64 * MiB)
#define CHILD_MS 10000.0
#define PPM(pct) ((uint32_t)(pct) * 10000u) /* a thread percentage in ppm */

static char g_dir[] = "/tmp/fakecuda-mps-XXXXXX";
static char g_pipe[256];  /* the daemon's pipe directory */
static char g_state[256]; /* FAKECUDA_STATE */
static char g_none[300];  /* a pipe directory without a daemon */
static int g_launched[2]; /* timeline children write a byte once launched */
static pid_t g_kids[64];  /* timeline children to reap */
static int g_nkids;
static struct fakecuda_state *g_st;

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
    CHECK_EQ(p->mps_mask, (1u << NDEV) - 1); /* every visible device */
    CHECK_EQ(p->mps_cap_ppm, ppm);
    CHECK_EQ_U(fakecuda_load(&p->kind_used[0][FAKECUDA_KIND_CONTEXT]), MPS_CTX_BYTES);
    /* Each client with its own memory, as on the H200 (docs/mps.md). */
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

/* A child's start: a context on device 0 (an MPS client when `dir` has the
 * daemon), "r" on `ready` once it is up, then a byte awaited on `go`. */
static void ctx_ready_then_wait(const char *dir, int ready, int go)
{
    pipe_dir(dir);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    ctx_up(0);
    CHECK_EQ(write(ready, "r", 1), 1);
    char c;
    CHECK_EQ(read(go, &c, 1), 1);
}

/* A process of the fault scenario: a client or not; says "ready" on
 * `ready` once its context is up, then waits for a byte on `go` and checks
 * that its next calls fail with the sticky error (`hit`) or still work. */
static void child_bystander(const char *dir, int ready, int go, int hit)
{
    ctx_ready_then_wait(dir, ready, go);
    CUresult want = hit ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
    CHECK_EQ(cuCtxSynchronize(), want);
    CUdeviceptr p = 0;
    CHECK_EQ(cuMemAlloc_v2(&p, 1 << 20), want);
    exit(0);
}

/* The client that launches a kernel that faults: the launch succeeds, its
 * next call fails, and so does every later one. */
static void child_faulting(void)
{
    pipe_dir(g_pipe);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    ctx_up(0);
    CUmodule mod;
    CUfunction f;
    CHECK_EQ(cuModuleLoadData(&mod, "fake cubin"), CUDA_SUCCESS);
    CHECK_EQ(cuModuleGetFunction(&f, mod, "fakecuda_illegal_address"), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    exit(0);
}

/* A fatal fault of one MPS client reaches every client of the server (as
 * measured on the H200), not an ordinary process; a client that connects
 * afterwards is served. */
static void fault_spreads(void)
{
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid_t client = fork_child();
    if (client == 0)
        child_bystander(g_pipe, ready[1], go[0], 1);
    pid_t ordinary = fork_child();
    if (ordinary == 0)
        child_bystander(g_none, ready[1], go[0], 0);
    char c[2];
    cs_read_full(ready[0], c, 2, CHILD_MS);
    pid_t faulting = fork_child();
    if (faulting == 0)
        child_faulting();
    cs_wait_ok(faulting, CHILD_MS);
    CHECK_EQ(write(go[1], "gg", 2), 2);
    cs_wait_ok(client, CHILD_MS);
    cs_wait_ok(ordinary, CHILD_MS);
    pid_t later = fork_child();
    if (later == 0)
        child_bystander(g_pipe, ready[1], go[0], 0);
    cs_read_full(ready[0], c, 1, CHILD_MS);
    CHECK_EQ(write(go[1], "g", 1), 1);
    cs_wait_ok(later, CHILD_MS);
    CHECK_EQ_U(__atomic_load_n(&g_st->dev[0].mps_faults, __ATOMIC_ACQUIRE), 1);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(go[i]);
    }
}

/* A process with a context on device 0 (an MPS client when `dir` has the
 * daemon): says so on `ready`, then lives until a byte on `hold`. */
static void child_holder(const char *dir, int ready, int hold)
{
    ctx_ready_then_wait(dir, ready, hold);
    exit(0);
}

static nvmlDevice_t nvml_dev(unsigned idx)
{
    nvmlDevice_t dev;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(idx, &dev), NVML_SUCCESS);
    return dev;
}

/* NVML's two lists while `client` (an MPS client) and `ordinary` hold
 * contexts on device 0, seen by a process whose NVML adds `offset`. */
static void child_nvml_lists(pid_t client, pid_t ordinary, int offset)
{
    char off[16];
    snprintf(off, sizeof off, "%d", offset);
    setenv("FAKECUDA_NVML_PID_OFFSET", off, 1);
    setenv("FAKECUDA_NVML_EXTRA_PROCS", "3", 1);
    nvmlDevice_t dev = nvml_dev(0);
    unsigned n = 0;
    CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ(n, 1);
    nvmlProcessInfo_t info[8];
    n = 8;
    CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, &n, info), NVML_SUCCESS);
    CHECK_EQ(n, 1);
    CHECK_EQ(info[0].pid, (unsigned)(client + offset));
    CHECK_EQ_U(info[0].usedGpuMemory, MPS_CTX_BYTES);
    /* The compute list has both, after the 3 phantoms and the MPS server:
     * the daemon, a thread of this test's parent (66 MiB, as the H200's
     * server process). */
    n = 8;
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, info), NVML_SUCCESS);
    CHECK_EQ(n, 6);
    CHECK_EQ(info[3].pid, (unsigned)(getppid() + offset));
    CHECK_EQ_U(info[3].usedGpuMemory, 66ull << 20);
    CHECK_EQ(info[4].pid + info[5].pid, (unsigned)(client + ordinary + 2 * offset));
    /* Device 1: the client's too (mps_mask), but no context there. */
    n = 0;
    CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(nvml_dev(1), &n, NULL), NVML_SUCCESS);
    CHECK_EQ(n, 0);
    CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(NULL, &n, NULL),
             NVML_ERROR_INVALID_ARGUMENT);
    exit(0);
}

static void child_nvml_fails(void)
{
    setenv("FAKECUDA_FAIL_nvmlDeviceGetMPSComputeRunningProcesses_v3", "3", 1);
    unsigned n = 8;
    nvmlProcessInfo_t info[8];
    CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(nvml_dev(0), &n, info),
             NVML_ERROR_NOT_SUPPORTED);
    exit(0);
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
static void child_refused(CUresult expect, int tell, int told)
{
    pipe_dir(g_pipe);
    CHECK_EQ(cuInit(0), expect);
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
            child_refused(CUDA_ERROR_MPS_CONNECTION_FAILED, -1, -1);
        cs_wait_ok(pid, CHILD_MS);
        int fd = conn_of(pid);
        CHECK(fd >= 0);
        conn_wait_closed(fd); /* the client closed its end at once */
    }
    /* The fake daemon's refusal past its client limit. */
    daemon_reply("error too many clients\n");
    pid_t full = fork_child();
    if (full == 0)
        child_refused(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, -1, -1);
    cs_wait_ok(full, CHILD_MS);
    /* The driver asks again at the next cuInit. */
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    daemon_reply("nope\n");
    pid_t pid = fork_child();
    if (pid == 0)
        child_refused(CUDA_ERROR_MPS_CONNECTION_FAILED, up[1], down[0]);
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

static void nvml_list(void)
{
    int ready[2], hold[2];
    CHECK(pipe(ready) == 0 && pipe(hold) == 0);
    pid_t client = fork_child();
    if (client == 0)
        child_holder(g_pipe, ready[1], hold[0]);
    pid_t ordinary = fork_child();
    if (ordinary == 0)
        child_holder(g_none, ready[1], hold[0]);
    char c[2];
    cs_read_full(ready[0], c, 2, CHILD_MS);
    for (int offset = 0; offset <= 1000; offset += 1000) {
        pid_t pid = fork_child();
        if (pid == 0)
            child_nvml_lists(client, ordinary, offset);
        cs_wait_ok(pid, CHILD_MS);
    }
    pid_t pid = fork_child();
    if (pid == 0)
        child_nvml_fails();
    cs_wait_ok(pid, CHILD_MS);
    CHECK(write(hold[1], "xx", 2) == 2);
    cs_wait_ok(client, CHILD_MS);
    cs_wait_ok(ordinary, CHILD_MS);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(hold[i]);
    }
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
    CUfunction f = fake_kernel("k", NULL);
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

/* ---- the timeline ---------------------------------------------------------- */

/* What a child does on device `dev`: n launches of `blocks` 128-thread
 * blocks on one stream (graph: one launch of a captured graph of n such
 * kernels instead), then it says so on g_launched and exits without
 * waiting for the device: the parent reads where the work went from the
 * state as soon as the child has launched (not when it has exited: an
 * exit may take long, e.g. TSan sleeps a second in it). */
struct plan {
    int dev;
    int client;
    const char *pct;       /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, or NULL */
    unsigned blocks;
    int n;
    int graph;
    int alternate;         /* every other kernel has half the blocks */
    struct cs_gate *gate;  /* arrive there before launching, or NULL */
};

static void child_run(const struct plan *p)
{
    pipe_dir(p->client ? g_pipe : g_none);
    if (p->pct)
        setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", p->pct, 1);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(mps_attr(p->dev), p->client);
    ctx_up(p->dev);
    CUfunction f = fake_kernel("k", NULL);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUgraphExec x = NULL;
    if (p->graph) {
        CUgraph g;
        CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
        for (int i = 0; i < p->n; i++)
            CHECK_EQ(cuLaunchKernel(f, p->blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
        CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        CHECK_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
    }
    if (p->gate)
        cs_gate_arrive(p->gate);
    if (x)
        CHECK_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
    for (int i = 0; !x && i < p->n; i++) {
        unsigned blocks = p->alternate && i % 2 ? p->blocks / 2 : p->blocks;
        CHECK_EQ(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
    }
    CHECK(write(g_launched[1], "x", 1) == 1);
    exit(0);
}

/* Forks a child for p (reaped by reap_kids). */
static pid_t spawn_plan(const struct plan *p)
{
    pid_t pid = fork_child();
    if (pid == 0)
        child_run(p);
    CHECK(g_nkids < (int)(sizeof g_kids / sizeof g_kids[0]));
    g_kids[g_nkids++] = pid;
    return pid;
}

static void wait_launched(int n)
{
    for (int i = 0; i < n; i++) {
        char c;
        cs_read_full(g_launched[0], &c, 1, CHILD_MS);
    }
}

/* A child for p, returned once it has launched everything. */
static pid_t start(const struct plan *p)
{
    pid_t pid = spawn_plan(p);
    wait_launched(1);
    return pid;
}

static void run(const struct plan *p)
{
    start(p);
}

/* Two children of these plans launching at once (a start gate). */
static void run_pair(struct plan a, struct plan b, pid_t *pa, pid_t *pb)
{
    struct cs_gate g;
    cs_gate_init(&g);
    a.gate = b.gate = &g;
    *pa = spawn_plan(&a);
    *pb = spawn_plan(&b);
    cs_gate_open(&g, 2, CHILD_MS);
    wait_launched(2);
}

/* Every timeline child exited cleanly (their checks passed). */
static void reap_kids(void)
{
    for (int i = 0; i < g_nkids; i++)
        cs_wait_ok(g_kids[i], CHILD_MS);
    g_nkids = 0;
}

static uint64_t busy_until(int dev)
{
    return fakecuda_load(&g_st->dev[dev].busy_until_ns);
}

/* Puts an anchor on `dev` (a kernel filling the device for ANCHOR_MS,
 * scaled) by a client or an ordinary process; returns its end T. */
static uint64_t anchor(int dev, int client)
{
    unsigned blocks = (unsigned)(ANCHOR_MS * cs_test_scale() * 1000.0); /* 1 us each */
    run(&(struct plan){.dev = dev, .client = client, .blocks = blocks, .n = 1});
    return busy_until(dev);
}

/* pid's intervals on dev's timeline (pid -1: context switches) from T on:
 * the first start, the last end, the busy time, how many. */
struct span {
    uint64_t first, end, busy;
    int n;
};

static struct span span_of(int dev, int pid, uint64_t T)
{
    struct fakecuda_device *D = &g_st->dev[dev];
    struct span sp = {UINT64_MAX, 0, 0, 0};
    fakecuda_lock(&D->lock);
    for (uint64_t i = 0; i < D->ring_head && i < FAKECUDA_RING; i++) {
        const struct fakecuda_interval *iv = &D->ring[i];
        if (iv->pid != pid || iv->end_ns <= T)
            continue;
        if (iv->start_ns < sp.first)
            sp.first = iv->start_ns;
        if (iv->end_ns > sp.end)
            sp.end = iv->end_ns;
        sp.busy += iv->end_ns - iv->start_ns;
        sp.n++;
    }
    fakecuda_unlock(&D->lock);
    return sp;
}

/* Work that should start exactly where the model puts it (`at`, relative
 * to the anchor's end T). Once the anchor has ended, a later start may
 * mean a launch came after T rather than a wrong model: say so. */
static void check_starts(const struct span *sp, uint64_t T, uint64_t at)
{
    if (sp->first == at)
        return;
    fprintf(stderr, "work starts at T%+lld ns, the model puts it at T%+lld ns\n", (long long)(sp->first - T),
            (long long)(at - T));
    if ((uint64_t)cs_now_ns() >= T)
        fprintf(stderr, "the %.0f ms anchor has ended: were the launches made after it? (raise CS_TEST_SCALE)\n",
                ANCHOR_MS * cs_test_scale());
    CHECK_EQ_U(sp->first, at);
}

/* Two clients, N = 10 kernels of occupancy 0.2 each, launching at once:
 * they run side by side, done in the time of one client's (10 x 320 us);
 * NVML's busy time is the union, not the sum. */
static void overlap(int dev)
{
    uint64_t anchor_ns = (uint64_t)(ANCHOR_MS * cs_test_scale() * 1000.0) * US;
    uint64_t T = anchor(dev, 1);
    pid_t a, b;
    struct plan p = {.dev = dev, .client = 1, .blocks = SMALL, .n = 10};
    run_pair(p, p, &a, &b);
    struct span sa = span_of(dev, a, T), sb = span_of(dev, b, T);
    check_starts(&sa, T, T);
    check_starts(&sb, T, T);
    CHECK_EQ_U(sa.end, T + 10 * D_SMALL);
    CHECK_EQ_U(sb.end, T + 10 * D_SMALL);
    CHECK_EQ_U(sa.busy, 10 * D_SMALL);
    CHECK_EQ_U(busy_until(dev), T + 10 * D_SMALL);
    CHECK_EQ_U(fakecuda_busy_in_window(g_st, dev, 0, T, T + 1000 * D_SMALL), 10 * D_SMALL);
    CHECK_EQ_U(fakecuda_busy_in_window(g_st, dev, a, T, T + 1000 * D_SMALL), 10 * D_SMALL);
    CHECK_EQ_U(fakecuda_load(&g_st->dev[dev].busy_ns), anchor_ns + 10 * D_SMALL);
    CHECK_EQ(span_of(dev, -1, 0).n, 0); /* clients pay no switch */
}

/* The same two workloads in ordinary processes take the sum (and the
 * switches between them). */
static void time_sliced(int dev)
{
    uint64_t T = anchor(dev, 0);
    pid_t a, b;
    struct plan p = {.dev = dev, .client = 0, .blocks = SMALL, .n = 10};
    run_pair(p, p, &a, &b);
    CHECK_EQ_U(span_of(dev, a, T).busy, 10 * D_SMALL);
    CHECK_EQ_U(span_of(dev, b, T).busy, 10 * D_SMALL);
    CHECK_GE(busy_until(dev) - T, 20 * D_SMALL + SW);
    CHECK_EQ_U(fakecuda_busy_in_window(g_st, dev, 0, T, busy_until(dev)), busy_until(dev) - T);
}

/* Kernels that fill the device share it: two clients' 5 kernels each take
 * the sum, whatever the interleaving; each client's own busy time is its
 * 5 kernels'. */
static void full_share(int dev)
{
    uint64_t T = anchor(dev, 1);
    pid_t a, b;
    struct plan p = {.dev = dev, .client = 1, .blocks = FULL, .n = 5};
    run_pair(p, p, &a, &b);
    struct span sa = span_of(dev, a, T), sb = span_of(dev, b, T);
    CHECK_EQ_U(sa.first < sb.first ? sa.first : sb.first, T);
    CHECK_EQ_U(sa.busy, 5 * D_FULL);
    CHECK_EQ_U(sb.busy, 5 * D_FULL);
    CHECK_EQ_U(busy_until(dev), T + 10 * D_FULL);
    CHECK_EQ_U(fakecuda_busy_in_window(g_st, dev, 0, T, T + 100 * D_FULL), 10 * D_FULL);
}

/* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25: a full kernel holds a quarter of
 * the SMs for four times as long, a kernel of occupancy 0.2 is not
 * slowed; a client of 100 % beside it gets the other 3/4 (stretched to
 * 4/3); a client the daemon gives 50 % gets half of what is then free. */
static void thread_percentage(int dev)
{
    uint64_t T = anchor(dev, 1);
    pid_t a = start(&(struct plan){.dev = dev, .client = 1, .pct = "25", .blocks = FULL, .n = 1});
    pid_t a2 = start(&(struct plan){.dev = dev, .client = 1, .pct = "25", .blocks = SMALL, .n = 1});
    struct span sa = span_of(dev, a, T), sa2 = span_of(dev, a2, T);
    check_starts(&sa, T, T);
    CHECK_EQ_U(sa.end, T + 4 * D_FULL);
    check_starts(&sa2, T, T); /* 0.25 + 0.2 fit */
    CHECK_EQ_U(sa2.end, T + D_SMALL);

    pid_t b = start(&(struct plan){.dev = dev, .client = 1, .blocks = FULL, .n = 1});
    struct span sb = span_of(dev, b, T);
    check_starts(&sb, T, T);
    /* 0.55 of the SMs free while the small kernel runs, then 0.75: its
     * 1.6 ms x 1 of SM time ends at T + 320 us + the rest / 0.75. */
    uint64_t b_end = T + D_SMALL + (D_FULL * 1000000ULL - 550000 * D_SMALL + 750000 - 1) / 750000;
    CHECK_EQ_U(sb.end, b_end);

    daemon_reply("ok 50\n");
    pid_t c = start(&(struct plan){.dev = dev, .client = 1, .blocks = FULL, .n = 1});
    daemon_reply("ok 100\n");
    struct span sc = span_of(dev, c, T);
    check_starts(&sc, T, b_end); /* the SMs were all taken until b ended */
    CHECK_EQ_U(sc.end, b_end + 2 * D_FULL);
    CHECK_EQ_U(busy_until(dev), T + 4 * D_FULL);
}

/* Clients follow each other and the anchor without a switch; an ordinary
 * process pays FAKECUDA_CTX_SWITCH_US after the MPS server's work, and
 * the server after it. */
static void switch_cost(int dev)
{
    uint64_t T = anchor(dev, 1);
    pid_t c1 = start(&(struct plan){.dev = dev, .client = 1, .blocks = SMALL, .n = 1});
    pid_t c2 = start(&(struct plan){.dev = dev, .client = 1, .blocks = SMALL, .n = 1});
    pid_t o = start(&(struct plan){.dev = dev, .client = 0, .blocks = SMALL, .n = 1});
    pid_t c3 = start(&(struct plan){.dev = dev, .client = 1, .blocks = SMALL, .n = 1});
    struct span s1 = span_of(dev, c1, T), s2 = span_of(dev, c2, T);
    check_starts(&s1, T, T);
    check_starts(&s2, T, T);
    struct span so = span_of(dev, o, T), s3 = span_of(dev, c3, T);
    check_starts(&so, T, T + D_SMALL + SW);
    check_starts(&s3, T, T + 2 * D_SMALL + 2 * SW);
    CHECK_EQ_U(s3.end, T + 3 * D_SMALL + 2 * SW);
    struct span sw = span_of(dev, -1, 0);
    CHECK_EQ(sw.n, 2);
    CHECK_EQ_U(sw.busy, 2 * SW);
    CHECK_EQ_U(sw.first, T + D_SMALL);
}

/* A graph launch holds its largest node's share for FAKECUDA_GRAPH_US
 * plus its nodes: two clients' graphs of two 0.1 kernels run side by side. */
static void graphs(int dev)
{
    uint64_t T = anchor(dev, 1);
    pid_t a, b;
    struct plan p = {.dev = dev, .client = 1, .blocks = SMALL / 2, .n = 2, .graph = 1};
    run_pair(p, p, &a, &b);
    struct span sa = span_of(dev, a, T), sb = span_of(dev, b, T);
    uint64_t g = 100 * US + 2 * (SMALL / 2) * US;
    check_starts(&sa, T, T);
    check_starts(&sb, T, T);
    CHECK_EQ_U(sa.end, T + g);
    CHECK_EQ_U(sb.end, T + g);
}

/* Events: a pair around a client's kernel spans that kernel, stretched by
 * its thread percentage, and not another client's queue beside it. */
static void child_events(int dev, const char *pct, unsigned blocks, uint64_t expect_ns)
{
    pipe_dir(g_pipe);
    if (pct)
        setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    ctx_up(dev);
    CUfunction f = fake_kernel("k", NULL);
    CUstream s;
    CUevent e0, e1;
    fake_timed_stream(&s, &e0, &e1);
    int64_t t0 = cs_now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    int64_t t1 = cs_now_ns();
    CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
    float ms;
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    /* The kernel starts when it is launched, at most t1 - t0 after e0. */
    double got = ms * 1e6, want = (double)expect_ns;
    if (got < want - 1e3 || got > want + (double)(t1 - t0) + 1e3) {
        fprintf(stderr, "event pair %.0f ns, the kernel's own time %.0f ns (launches took %lld ns)\n", got,
                want, (long long)(t1 - t0));
        exit(1);
    }
    exit(0);
}

static void events(int dev)
{
    /* Another client's queue of 1000 kernels at half the SMs: 0.8 s of
     * work the pairs below must not span (should the machine stall that
     * long, they still span only their own kernels). */
    run(&(struct plan){.dev = dev, .client = 1, .blocks = FULL / 2, .n = 1000});
    pid_t pid = fork_child();
    if (pid == 0)
        child_events(dev, NULL, SMALL, D_SMALL); /* 0.2 fits beside 0.5 */
    cs_wait_ok(pid, CHILD_MS);
    pid = fork_child();
    if (pid == 0)
        child_events(dev, "25", FULL, 4 * D_FULL); /* a quarter of the SMs: 4 x as long */
    cs_wait_ok(pid, CHILD_MS);
}

/* More breakpoints than the state holds (FAKECUDA_CAPSEGS): a client's
 * 2100 kernels alternating occupancy 0.2 and 0.1 keep exactly their times;
 * the profile is coarsened (neighbours merged at the higher share), so a
 * full kernel beside them finds at least 0.8 and at most 0.9 free. */
static void profile_full(int dev)
{
    uint64_t T = anchor(dev, 1);
    pid_t a = start(&(struct plan){.dev = dev, .client = 1, .blocks = SMALL, .n = 2100, .alternate = 1});
    pid_t b = start(&(struct plan){.dev = dev, .client = 1, .blocks = FULL, .n = 1});
    struct span sa = span_of(dev, a, T), sb = span_of(dev, b, T);
    check_starts(&sa, T, T);
    CHECK_EQ_U(sa.end, T + 1050 * (D_SMALL + D_SMALL / 2));
    CHECK_EQ_U(sa.busy, 1050 * (D_SMALL + D_SMALL / 2));
    check_starts(&sb, T, T);
    CHECK_GE(sb.end, T + (D_FULL * 10 + 8) / 9);
    CHECK_LE(sb.end, T + (D_FULL * 10 + 7) / 8);
    const struct fakecuda_device *D = &g_st->dev[dev];
    CHECK_LE(D->nseg, FAKECUDA_CAPSEGS);
    CHECK_GT(D->nseg, FAKECUDA_CAPSEGS / 2); /* it was full, not emptied */
    for (uint32_t i = 0; i < D->nseg; i++) {
        CHECK_LE(D->seg[i].used_ppm, 1000000);
        if (i)
            CHECK_GT(D->seg[i].t, D->seg[i - 1].t);
    }
    CHECK_EQ(D->seg[D->nseg - 1].used_ppm, 0);
}

int main(void)
{
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_pipe, sizeof g_pipe, "%s/pipe", g_dir);
    snprintf(g_state, sizeof g_state, "%s/state", g_dir);
    snprintf(g_none, sizeof g_none, "%s/none", g_dir);
    CHECK(mkdir(g_pipe, 0700) == 0);
    setenv("FAKECUDA_STATE", g_state, 1);
    setenv("FAKECUDA_DEVICES", "9", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    setenv("FAKECUDA_GRAPH_US", "100", 1);
    setenv("FAKECUDA_CTX_SWITCH_US", "50", 1);
    unsetenv("FAKECUDA_POWER_BUSY_W");
    unsetenv("FAKECUDA_EVENT_TIMESLICE");
    setenv("FAKECUDA_SMS", "100", 1);
    setenv("FAKECUDA_CTX_BYTES", "100m", 1);
    setenv("FAKECUDA_MPS_CTX_BYTES", "64m", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    struct fakecuda_state *st = fakecuda_state_open(g_state); /* created with this environment */
    CHECK(st != NULL);
    CHECK_EQ(st->dev[0].sms, SMS);
    g_st = st;
    daemon_start();

    detection_off();
    detection_on();
    detection_refused();
    detection_fork();
    nvml_list();
    ctx_bytes_default();
    pid_t pid = fork_child();
    if (pid == 0)
        child_occupancy();
    cs_wait_ok(pid, CHILD_MS);

    CHECK(pipe(g_launched) == 0);
    overlap(1);
    time_sliced(2);
    full_share(3);
    thread_percentage(4);
    switch_cost(5);
    graphs(6);
    events(7);
    profile_full(8);
    reap_kids();
    fault_spreads();

    daemon_stop();
    fakecuda_state_close(st);
    cs_rmtree(g_dir);
    printf("mps: detection, attribute 133, NVML's MPS list, context bytes, occupancy, "
           "concurrent timeline\n");
    return 0;
}
