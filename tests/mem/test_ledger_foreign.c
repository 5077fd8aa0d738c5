/*
 * A ledger another user prepared is not this tenant's budget, through the
 * real preload path. A throwaway user (root only;
 * skipped, visibly, otherwise) runs a CUDA program with a 15 GiB budget at
 * the victim's ledger path and makes the file writable by everybody, as
 * an attacker would. The victim, asking for 1 GiB there, fails CUDA
 * initialisation with one message naming the file and its owner, so its
 * 8 GiB allocation is refused. With CUSHARE_LEDGER_TRUST=directory (the
 * documented deployment: a directory private to the tenant) the same file
 * is accepted. On c17f7cb the victim allocates 8 GiB.
 */
#include "mem_test.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "multiuser.h"

#define GiB (1024ull * MiB)

/* Modes, run as their own processes with the environment set up below. */
static int attacker(void)
{
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS)
        return 2;
    return chmod(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"), 0666) ? 3 : 0;
}

static int victim(bool trusting)
{
    int err[2];
    CHECK_EQ(pipe(err), 0);
    int saved = dup(2);
    dup2(err[1], 2);
    CUresult init = cuInit(0);
    CUdeviceptr p = 0;
    CUresult big = CUDA_ERROR_NOT_INITIALIZED;
    if (init == CUDA_SUCCESS) {
        CUdevice dev;
        CUcontext ctx;
        CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
        CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
        CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        big = cuMemAlloc_v2(&p, 8 * GiB);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(err[1]);
    char buf[8192] = "";
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("victim (%s): cuInit %d, 8 GiB allocation %d\n%s", trusting ? "trusting" : "default",
           (int)init, (int)big, buf);
    if (trusting)
        return init == CUDA_SUCCESS ? 0 : 1;
    CHECK_EQ(init, CUDA_ERROR_NOT_INITIALIZED);
    CHECK_EQ(big, CUDA_ERROR_NOT_INITIALIZED);
    CHECK_CONTAINS(buf, "cushare: ledger: error: ledger ");
    CHECK_CONTAINS(buf, getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    CHECK_CONTAINS(buf, "is owned by uid");
    CHECK_CONTAINS(buf, "CUSHARE_LEDGER_TRUST=directory");
    return 0;
}

/* Runs this program in `mode` as `u` (NULL: ourselves) with a fresh fake
 * device of 16 GiB of its own in `dir`, the ledger and the budget given. */
static int run_mode(const struct cs_test_user *u, const char *mode, const char *dir,
                    const char *ledger, const char *limit, const char *trust)
{
    char state[4200];
    snprintf(state, sizeof state, "%s/%s.fake", dir, mode);
    setenv("FAKECUDA_STATE", state, 1);
    setenv("FAKECUDA_MEM", "16g", 1);
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", limit, 1);
    if (trust)
        setenv("CUSHARE_LEDGER_TRUST", trust, 1);
    else
        unsetenv("CUSHARE_LEDGER_TRUST");
    char *argv[] = {(char *)cs_test_self(), (char *)mode, NULL};
    if (u)
        return cs_test_run_as(u, argv);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "attacker"))
        return attacker();
    if (argc == 2 && !strcmp(argv[1], "victim"))
        return victim(false);
    if (argc == 2 && !strcmp(argv[1], "trusting"))
        return victim(true);

    const struct cs_test_user *u = cs_test_user();
    char dir[] = "/tmp/cs-foreign-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_EQ(chmod(dir, 01777), 0); /* like /tmp: both users may create files */
    char ledger[4200];
    snprintf(ledger, sizeof ledger, "%s/victim.ledger", dir);

    CHECK_EQ(run_mode(u, "attacker", dir, ledger, "15g", NULL), 0);
    struct stat st;
    CHECK_EQ(stat(ledger, &st), 0);
    CHECK_EQ(st.st_uid, u->uid);
    CHECK_EQ(st.st_mode & 0777, 0666);
    int v = run_mode(NULL, "victim", dir, ledger, "1g", NULL);
    int t = run_mode(NULL, "trusting", dir, ledger, "1g", "directory");

    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(t, 0);
    printf("a ledger another user prepared is refused\n");
    return 0;
}
