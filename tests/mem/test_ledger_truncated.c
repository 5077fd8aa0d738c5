/*
 * A tenant whose ledger is truncated under it (`truncate -s 0`) keeps
 * running, through the real preload path: it says so
 * once, refuses every further allocation (CUDA_ERROR_OUT_OF_MEMORY),
 * shows nothing free, frees what it has, and the application's own
 * SIGBUS handler, installed before CUDA was initialised, still gets the
 * faults that are its own. On c17f7cb the allocation after the truncation
 * dies of SIGBUS (here: reaches the application's handler, which fails
 * the test).
 */
#include "mem_test.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

static sigjmp_buf jump;
static volatile sig_atomic_t app_faults;
static char *app_map;
static int test_stderr = 2; /* the real stderr, also while it is captured */

/* The application's handler: a fault in its own mapping is expected (it
 * jumps back); one anywhere else (the ledger) must never reach it. */
static void app_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    if ((char *)si->si_addr >= app_map && (char *)si->si_addr < app_map + 8192) {
        app_faults++;
        siglongjmp(jump, 1);
    }
    static const char msg[] = "FAIL: a SIGBUS outside the application's mapping reached it\n";
    if (write(test_stderr, msg, sizeof msg - 1) < 0) {
    }
    _exit(1);
}

static void capture_stderr(int *saved, int fds[2])
{
    CHECK_EQ(pipe(fds), 0);
    *saved = dup(2);
    test_stderr = *saved;
    dup2(fds[1], 2);
}

static char *end_capture(int saved, int fds[2])
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    test_stderr = 2;
    close(fds[1]);
    static char buf[8192];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fds[0]);
    return buf;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = app_handler;
    sa.sa_flags = SA_SIGINFO;
    CHECK_EQ(sigaction(SIGBUS, &sa, NULL), 0);

    context_on_device0();
    CUdeviceptr a, b;
    CHECK_EQ(cuMemAlloc_v2(&a, 8 * MiB), CUDA_SUCCESS);

    const char *ledger = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    int saved, fds[2];
    capture_stderr(&saved, fds);
    CHECK_EQ(truncate(ledger, 0), 0);
    CUresult r = cuMemAlloc_v2(&b, 8 * MiB);
    CUresult r2 = cuMemAlloc_v2(&b, 1);
    size_t free_b = 1, total_b = 0;
    CUresult info = cuMemGetInfo_v2(&free_b, &total_b);
    CUresult freed = cuMemFree_v2(a);
    char *err = end_capture(saved, fds);

    CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(r2, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(info, CUDA_SUCCESS);
    CHECK_EQ(free_b, 0);
    CHECK_EQ(total_b, 64 * MiB);
    CHECK_EQ(freed, CUDA_SUCCESS);
    CHECK_CONTAINS(err, "cushare: ledger: error: ledger ");
    CHECK_CONTAINS(err, ledger);
    CHECK_CONTAINS(err, "was truncated while in use");
    CHECK_EQ(strchr(err, '\n') - err + 1, (int64_t)strlen(err)); /* one line */
    printf("refused after the truncation: %s", err);

    /* The application's own mapping faults into its own handler. */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.app", ledger);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(ftruncate(fd, 8192), 0);
    app_map = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(app_map != MAP_FAILED);
    close(fd);
    CHECK_EQ(truncate(tmp, 0), 0);
    if (!sigsetjmp(jump, 1))
        ((volatile char *)app_map)[0] = 1;
    CHECK_EQ(app_faults, 1);
    unlink(tmp);
    /* The damaged ledger would fail the next run's cuInit (ctest --repeat
     * runs no fixture in between): leave none behind. */
    unlink(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    printf("the application's SIGBUS handler still gets its own faults\n");
    return 0;
}
