/*
 * limiter_board_truncate: `truncate -s 0` on the
 * node board, again and again, under a running `--sm 50 --policy force`
 * tenant (limiter_worker under the preloaded library). The tenant never
 * faults, repairs its board file at its next post, keeps its share and
 * exits 0. On c17f7cb it dies of SIGBUS (exit 135) at the first tick
 * after the first truncation. The same attack by another user is in
 * limiter_board_hostile.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>

#include "limiter/board.h"
#include "limiter/lim_test.h"
#include "limiter/board_test.h"

/* Size of the worker's board file (it runs as we do): board.<uid>.<pod>, or
 * `board` itself in layout 1 (c17f7cb), of the same size. -1 if absent. */
static off_t own_board_size(void)
{
    struct stat st;
    char own[4300];
    board_own_file(own, sizeof own, lim_path("board"), (unsigned)geteuid());
    if (!stat(own, &st) ||
        !stat(lim_path("board"), &st))
        return st.st_size;
    return -1;
}

static int truncate_board_files(void)
{
    DIR *d = opendir(lim_path(""));
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    char path[sizeof lim_dir_path + 300];
    while ((de = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", lim_dir_path, de->d_name);
        if (!strncmp(de->d_name, "board", 5) && !truncate(path, 0))
            n++;
    }
    closedir(d);
    return n;
}

/* Waits until the worker's board file is whole (it posted), or fails:
 * on a deadline, or as soon as the worker is gone. */
static void await_whole_board(pid_t worker, const char *when)
{
    const int64_t deadline = cs_now_ns() + (int64_t)(10e9 * cs_test_scale());
    while (own_board_size() != CS_BOARD_SIZE) {
        int st;
        if (waitpid(worker, &st, WNOHANG) == worker) {
            fprintf(stderr, "the tenant died %s: %s %d\n", when,
                    WIFSIGNALED(st) ? "signal" : "exit",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            exit(1);
        }
        if (cs_now_ns() > deadline) {
            fprintf(stderr, "no whole board file %s\n", when);
            kill(worker, SIGKILL);
            exit(1);
        }
        cs_sleep_ms(2);
    }
}

int main(void)
{
    lim_dir("board_truncate");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         "FAKECUDA_NS_PER_BLOCK=1000",
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("t.ledger")),
                         "CUDA_DEVICE_SM_LIMIT=50", "GPU_CORE_UTILIZATION_POLICY=force",
                         lim_kv("CUSHARE_BOARD=%s", lim_path("board")), NULL};
    const char *secs = lim_kv("%.1f", 3.0 * cs_test_scale());
    const char *args[] = {"--secs", secs, "--blocks", "1000", "--sync", "4", NULL};
    const int64_t t0 = cs_now_ns();
    pid_t w = lim_spawn(env, args);
    await_whole_board(w, "before any truncation");
    for (int round = 0; round < 5; round++) {
        CHECK_GE(truncate_board_files(), 1);
        await_whole_board(w, lim_kv("after truncation %d", round + 1));
    }
    CHECK_EQ(lim_wait(w), 0);
    const int64_t from = t0 + 1000000000ll, to = cs_now_ns() - 200000000ll;
    CHECK_GT(to - from, 500000000ll);
    double share = 100.0 * (double)lim_busy(gpu, 0, w, from, to) / (double)(to - from);
    printf("5 truncations survived; share from 1 s to the end: %.1f%% (limit 50)\n", share);
    CHECK_SHARE(share, 50, 5, 10);
    return 0;
}
