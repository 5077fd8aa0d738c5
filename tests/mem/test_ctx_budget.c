/*
 * A context that does not fit the budget is refused. Contexts cost 24 MiB
 * each on the fake (FAKECUDA_CTX_BYTES = FAKECUDA_CTX_EXTRA_BYTES, like the
 * H200's 518 MiB); the tenant's budget is 32 MiB.
 *
 * 1. Three processes sharing the ledger make a context at once (two by
 *    cuDevicePrimaryCtxRetain, one by cuCtxCreate_v2): exactly one is
 *    admitted, the others get CUDA_ERROR_OUT_OF_MEMORY and one error line
 *    each, and the fake GPU's own high-water mark (what nvidia-smi would
 *    show, all processes) never passes the budget. The refused processes
 *    hold no context on the fake (NVML does not list them).
 * 2. A tenant whose budget (16 MiB) is smaller than one context: the
 *    context is made, measured, refused and destroyed; a second attempt is
 *    refused on the measured size without asking the driver.
 */
#include "mem_test.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define LIMIT (32 * MiB)
#define CTX (24 * MiB)
#define NKIDS 3

enum how { RETAIN, CREATE };

/* Pipes shared by the parent and every process it starts: one token on
 * `go` starts one process, one on `quit` ends one; each reports
 * {pid, CUresult} on `result` (one write, atomic below PIPE_BUF). */
static int go[2], quit[2], result[2];

struct kid {
    pid_t pid;
    int32_t r;
    char err_path[4200];
};

/* A process of the tenant: on a "go" token it makes one context, reports
 * the result and holds the context until a "quit" token. stderr goes to a
 * file so the parent can read the refusal line. */
static void run_kid(struct kid *k, enum how how)
{
    /* A failed CHECK in the parent must not leave us waiting for "quit". */
    CHECK_EQ(prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
    int fd = open(k->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(dup2(fd, 2), 2);
    char c;
    CHECK_EQ(read(go[0], &c, 1), 1);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CUcontext ctx = NULL;
    int32_t msg[2] = {getpid(), how == RETAIN ? (int32_t)cuDevicePrimaryCtxRetain(&ctx, dev)
                                               : (int32_t)cuCtxCreate_v2(&ctx, 0, dev)};
    CHECK_EQ(write(result[1], msg, sizeof msg), (ssize_t)sizeof msg);
    CHECK_EQ(read(quit[0], &c, 1), 1);
    exit(0); /* a normal exit leaves the ledger slot */
}

static void start_kid(struct kid *k, int i, enum how how)
{
    snprintf(k->err_path, sizeof k->err_path, "%s.err%d", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"), i);
    fflush(NULL);
    k->pid = fork();
    CHECK(k->pid >= 0);
    if (k->pid == 0)
        run_kid(k, how);
}

static void collect_results(struct kid *k, int n)
{
    for (int i = 0; i < n; i++) {
        /* A process that died before reporting must fail the test, not
         * hang it: its stderr file says why. */
        struct pollfd p = {.fd = result[0], .events = POLLIN};
        CHECK_EQ(poll(&p, 1, (int)(30000 * cs_test_scale())), 1);
        int32_t msg[2];
        CHECK_EQ(read(result[0], msg, sizeof msg), (ssize_t)sizeof msg);
        for (int j = 0; j < n; j++)
            if (k[j].pid == msg[0])
                k[j].r = msg[1];
    }
}

static void stop_kids(struct kid *k, int n)
{
    for (int i = 0; i < n; i++)
        CHECK_EQ(write(quit[1], "q", 1), 1);
    for (int i = 0; i < n; i++) {
        int st;
        CHECK_EQ(waitpid(k[i].pid, &st, 0), k[i].pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* Lines of the process's stderr that are cushare memory errors. */
static int refusal_lines(const char *path, char *last, size_t len)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "cushare: mem:")) {
            n++;
            snprintf(last, len, "%s", line);
        }
    fclose(f);
    return n;
}

/* True when the fake (NVML's process list) shows `pid` with a context. */
static int listed(struct fakecuda_state *F, pid_t pid)
{
    const struct fakecuda_proc *p = fakecuda_proc_find(F, pid);
    return p && (__atomic_load_n(&p->ctx_mask, __ATOMIC_ACQUIRE) & 1u);
}

static void three_tenants_one_fits(struct fakecuda_state *F)
{
    struct kid k[NKIDS] = {{0}};
    for (int i = 0; i < NKIDS; i++)
        start_kid(&k[i], i, i == NKIDS - 1 ? CREATE : RETAIN);
    CHECK_EQ(write(go[1], "ggg", NKIDS), NKIDS);
    collect_results(k, NKIDS);
    int admitted = -1, refused = 0;
    for (int i = 0; i < NKIDS; i++) {
        int32_t r = k[i].r;
        if (r == CUDA_SUCCESS) {
            CHECK_EQ(admitted, -1);
            admitted = i;
        } else {
            CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
            refused++;
        }
    }
    CHECK(admitted >= 0);
    CHECK_EQ(refused, NKIDS - 1);
    struct cs_ledger_header *L = ledger_map(); /* made by the first of them */
    /* What nvidia-smi would have shown at any instant, every process. */
    CHECK_LE_U(fakecuda_load(&F->dev[0].peak_used), LIMIT);
    CHECK_EQ_U(fakecuda_load(&F->dev[0].used), CTX);
    CHECK_EQ_U(ledger_used(L, 0), CTX);
    CHECK_EQ_U(slot_bytes(L, k[admitted].pid, 0, CS_MEM_CONTEXT), CTX);
    for (int i = 0; i < NKIDS; i++) {
        char line[2048] = "";
        int n = refusal_lines(k[i].err_path, line, sizeof line);
        if (i == admitted) {
            CHECK(listed(F, k[i].pid));
            CHECK_EQ(n, 0);
            continue;
        }
        CHECK(!listed(F, k[i].pid));
        CHECK_EQ(n, 1);
        CHECK_CONTAINS(line, "device 0");
        CHECK_CONTAINS(line, "24.0 MiB");
        CHECK_CONTAINS(line, "32.0 MiB budget");
        CHECK_CONTAINS(line, "only 8.0 MiB");
        CHECK_CONTAINS(line, "CUDA_DEVICE_MEMORY_LIMIT");
        printf("refused: %s", line);
    }
    stop_kids(k, NKIDS);
    CHECK_EQ_U(ledger_used(L, 0), 0);
}

static void budget_below_one_context(struct fakecuda_state *F)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.small", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(path);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", path, 1);
        setenv("CUDA_DEVICE_MEMORY_LIMIT", "16m", 1);
        CHECK_EQ(cuInit(0), CUDA_SUCCESS);
        CUcontext ctx;
        uint64_t calls = fakecuda_calls(F, FAKECUDA_CALL_cuDevicePrimaryCtxRetain);
        CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_OUT_OF_MEMORY);
        /* Made, measured, refused, gone: not listed, nothing charged. */
        CHECK_EQ_U(fakecuda_calls(F, FAKECUDA_CALL_cuDevicePrimaryCtxRetain), calls + 1);
        CHECK(!listed(F, getpid()));
        const struct fakecuda_proc *me = fakecuda_proc_find(F, getpid());
        CHECK(!me || fakecuda_load(&me->used[0]) == 0);
        int active = 1;
        unsigned flags;
        CHECK_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
        CHECK_EQ(active, 0);
        /* Now the size is known: refused before the driver is asked. */
        uint64_t creates = fakecuda_calls(F, FAKECUDA_CALL_cuCtxCreate_v2);
        CHECK_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_EQ_U(fakecuda_calls(F, FAKECUDA_CALL_cuDevicePrimaryCtxRetain), calls + 1);
        CHECK_EQ_U(fakecuda_calls(F, FAKECUDA_CALL_cuCtxCreate_v2), creates);
        _exit(0);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    unlink(path);
}

int main(void)
{
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(quit), 0);
    CHECK_EQ(pipe(result), 0);
    struct fakecuda_state *F = fake_state();
    three_tenants_one_fits(F);
    budget_below_one_context(F);
    printf("one context of three admitted in a budget for one; peak %llu MiB of %llu\n",
           (unsigned long long)(F->dev[0].peak_used / MiB), (unsigned long long)(LIMIT / MiB));
    return 0;
}
