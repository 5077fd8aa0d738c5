/*
 * cuInit's set-up runs beside the driver's cuInit (src/hook/init.c), and
 * still fails closed. The interposer is linked in (label sanitize: the
 * ASan+UBSan build; tsan: the set-up thread under TSan) so the ledger's
 * test hook can stop the set-up at a point of its choosing: just before
 * the new ledger is linked at its path, it waits until the fake driver
 * counts its cuInit entered. Run before the driver, as it used to be, the
 * set-up would wait there for ever (the test fails at its deadline); run
 * beside it, it goes on. No timing thresholds: the order is forced.
 *
 *   overlap  cuInit succeeds; the set-up ran on another thread while the
 *            driver's cuInit was entered; the phases say so in order; a
 *            context and an allocation are charged to our slot.
 *   fail     the hook then plants a foreign file at the ledger's path, so
 *            the set-up fails after the driver's cuInit was entered (and
 *            succeeded): cuInit still returns CUDA_ERROR_NOT_INITIALIZED,
 *            every later call too, and no context or byte of device
 *            memory is ever obtained through us.
 */
#include "mem_test.h"

#include <errno.h>
#include <stdbool.h>

#include "cushare/phases.h"
#include "ledger/ledger.h"

#define WAIT_MS 10000.0

/* Linked in: the export itself, as dlsym would find it under the preload. */
void cushare_phases(struct cushare_phases *out);

static struct fakecuda_state *fs;
static bool plant_foreign;
static pid_t main_tid, hook_tid;

static void beside_the_driver(void)
{
    __atomic_store_n(&hook_tid, gettid(), __ATOMIC_RELEASE);
    CS_WAIT_FOR(fakecuda_calls(fs, FAKECUDA_CALL_cuInit) >= 1, WAIT_MS,
                "the driver's cuInit while the ledger set-up waits (set-up not beside it?)");
    if (!plant_foreign)
        return;
    const char *path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "not a ledger\n", 13), 13);
    close(fd);
}

static struct cushare_phases phases_now(void)
{
    struct cushare_phases p = {.version = CUSHARE_PHASES_VERSION};
    cushare_phases(&p);
    CHECK_EQ(p.version, CUSHARE_PHASES_VERSION);
    return p;
}

static void overlap(void)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    struct cushare_phases p = phases_now();
    CHECK_NE(__atomic_load_n(&hook_tid, __ATOMIC_ACQUIRE), 0);
    CHECK_NE(hook_tid, main_tid);
    /* wrapper <= driver < (the hook saw the driver entered) < ledger */
    CHECK(p.wrapper_enter_ns && p.driver_enter_ns && p.setup_begin_ns && p.ledger_ready_ns &&
          p.setup_end_ns && p.real_init_done_ns && p.joined_ns);
    CHECK_LE_U(p.wrapper_enter_ns, p.driver_enter_ns);
    CHECK_LE_U(p.wrapper_enter_ns, p.setup_begin_ns);
    CHECK_LE_U(p.driver_enter_ns, p.ledger_ready_ns);
    CHECK_LE_U(p.setup_begin_ns, p.ledger_ready_ns);
    CHECK_LE_U(p.ledger_ready_ns, p.setup_end_ns);
    CHECK_LE_U(p.setup_end_ns, p.joined_ns);
    CHECK_LE_U(p.driver_enter_ns, p.real_init_done_ns);
    CHECK_LE_U(p.real_init_done_ns, p.joined_ns);

    struct cs_ledger_header *h = ledger_map();
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc_v2(&d, 4 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(slot_bytes(h, getpid(), 0, CS_MEM_DATA), 4 * MiB);
    CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
    printf("overlap: set-up on thread %d beside the driver's cuInit on %d; "
           "ledger ready %.3f ms after the driver was called, joined %.3f ms after it returned\n",
           (int)hook_tid, (int)main_tid, (double)(p.ledger_ready_ns - p.driver_enter_ns) / 1e6,
           (double)(p.joined_ns - p.real_init_done_ns) / 1e6);
}

static void fail(void)
{
    plant_foreign = true;
    CHECK_EQ(cuInit(0), CUDA_ERROR_NOT_INITIALIZED);
    /* The driver's cuInit did run (and succeed) meanwhile. */
    CHECK_EQ(fakecuda_calls(fs, FAKECUDA_CALL_cuInit), 1);
    struct cushare_phases p = phases_now();
    CHECK_NE(hook_tid, main_tid);
    CHECK(p.real_init_done_ns && p.setup_end_ns && p.joined_ns);
    CHECK_LE_U(p.driver_enter_ns, p.setup_end_ns);
    CHECK_LE_U(p.setup_end_ns, p.joined_ns);

    /* Sticky: nothing goes through us, whatever the program tries. */
    CHECK_EQ(cuInit(0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_EQ(fakecuda_calls(fs, FAKECUDA_CALL_cuInit), 1);
    CUcontext ctx = NULL;
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc_v2(&d, MiB), CUDA_ERROR_NOT_INITIALIZED);
    size_t free_b, total_b;
    CHECK_EQ(cuMemGetInfo_v2(&free_b, &total_b), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(ctx == NULL);
    CHECK_EQ_U(fakecuda_load(&fs->dev[0].used), 0);
    CHECK_EQ_U(fakecuda_load(&fs->dev[0].allocs), 0);
    CHECK_EQ(fakecuda_hook_calls(fs, FAKECUDA_HOOK_cuDevicePrimaryCtxRetain), 0);
    CHECK_EQ(fakecuda_hook_calls(fs, FAKECUDA_HOOK_cuCtxCreate_v2), 0);
    CHECK_EQ(fakecuda_hook_calls(fs, FAKECUDA_HOOK_cuMemAlloc_v2), 0);
    printf("fail: the driver's cuInit succeeded beside a failed set-up; cuInit and every "
           "later call answered CUDA_ERROR_NOT_INITIALIZED, no context, no memory\n");
}

int main(int argc, char **argv)
{
    CHECK_EQ(argc, 2);
    main_tid = gettid();
    /* A fresh ledger (the hook is on its creation path) and a fresh fake
     * device whose cuInit count starts at 0, whatever ran before. */
    unlink(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    unlink(getenv("FAKECUDA_STATE"));
    fs = fake_state();
    cs__ledger_test_hooks.before_link = beside_the_driver;
    if (!strcmp(argv[1], "overlap"))
        overlap();
    else if (!strcmp(argv[1], "fail"))
        fail();
    else
        CHECK(!"case: overlap or fail");
    return 0;
}
