/*
 * TEST of the test tool tests/fakecuda (never shipped): the fake driver
 * honours CUDA_VISIBLE_DEVICES like the real one (indices or "GPU-" UUID
 * prefixes, the list ends at the first bad entry) while NVML keeps showing
 * every physical device; memory used through a remapped CUDA ordinal is
 * charged to the physical device. Each case runs in a fresh fork child.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fake_scratch.h"
#include "fakecuda/fakecuda_state.h"
#include "nvml/nvml.h"

#define MiB (1024ULL * 1024ULL)
#define UUID0 "GPU-11111111-2222-3333-4444-555555555555"

static struct fakecuda_state *st;

static void nvml_uuid(unsigned phys, char out[NVML_DEVICE_UUID_V2_BUFFER_SIZE])
{
    nvmlDevice_t d;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(phys, &d), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetUUID(d, out, NVML_DEVICE_UUID_V2_BUFFER_SIZE), NVML_SUCCESS);
}

static void cuda_uuid(int ordinal, char out[41])
{
    CUdevice d;
    CUuuid u;
    CHECK_EQ(cuDeviceGet(&d, ordinal), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetUuid(&u, d), CUDA_SUCCESS);
    fakecuda_uuid_string((const uint8_t *)u.bytes, out);
}

/* CUDA ordinal `ordinal` is physical device `phys`. */
static void expect_maps(int ordinal, unsigned phys)
{
    char cu[41], nv[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    cuda_uuid(ordinal, cu);
    nvml_uuid(phys, nv);
    CHECK_STREQ(cu, nv);
    size_t total;
    CHECK_EQ(cuDeviceTotalMem(&total, ordinal), CUDA_SUCCESS);
    CHECK_EQ_U(total, st->dev[phys].total);
    char bus[32];
    CHECK_EQ(cuDeviceGetPCIBusId(bus, sizeof(bus), ordinal), CUDA_SUCCESS);
    char want[32];
    snprintf(want, sizeof(want), "0000:%02x:00.0", 0x10 + phys);
    CHECK_STREQ(bus, want);
}

static int count(void)
{
    int n = -1;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    unsigned nv = 0;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetCount_v2(&nv), NVML_SUCCESS);
    CHECK_EQ(nv, 2); /* NVML ignores CUDA_VISIBLE_DEVICES */
    return n;
}

static void case_unset(void)
{
    CHECK_EQ(count(), 2);
    expect_maps(0, 0);
    expect_maps(1, 1);
    char nv[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvml_uuid(0, nv);
    CHECK_STREQ(nv, UUID0); /* FAKECUDA_UUID_0 */
}

static void case_one(void)
{
    CHECK_EQ(count(), 1);
    expect_maps(0, 1);
    CUdevice d;
    CHECK_EQ(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    /* Memory through ordinal 0 lands on physical device 1. */
    CUcontext ctx;
    CUdeviceptr p;
    CHECK_EQ(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_SUCCESS);
    uint64_t used0 = fakecuda_load(&st->dev[0].used), used1 = fakecuda_load(&st->dev[1].used);
    CHECK_EQ(cuMemAlloc(&p, 3 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&st->dev[0].used), used0);
    CHECK_EQ_U(fakecuda_load(&st->dev[1].used), used1 + 3 * MiB);
    size_t fr, tot;
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U(tot, 2048 * MiB);
    /* NVML lists this process on physical device 1 only. */
    nvmlDevice_t nd;
    nvmlProcessInfo_t infos[4];
    unsigned n = 4;
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &nd), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(nd, &n, infos), NVML_SUCCESS);
    CHECK_EQ(n, 1);
    CHECK_EQ(infos[0].pid, getpid());
    CHECK_EQ_U(infos[0].usedGpuMemory, 3 * MiB);
    n = 4;
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &nd), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(nd, &n, infos), NVML_SUCCESS);
    CHECK_EQ(n, 0);
    CHECK_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
    CHECK_EQ_U(fakecuda_load(&st->dev[1].used), used1);
}

static void case_swap(void)
{
    CHECK_EQ(count(), 2);
    expect_maps(0, 1);
    expect_maps(1, 0);
    CUdevice d;
    CHECK_EQ(cuDeviceGetByPCIBusId(&d, "0000:11:00.0"), CUDA_SUCCESS);
    CHECK_EQ(d, 0);
}

static void case_uuid_prefix(void)
{
    CHECK_EQ(count(), 1);
    expect_maps(0, 1);
}

static void case_uuid_override(void)
{
    CHECK_EQ(count(), 1);
    expect_maps(0, 0);
}

static void case_stops_at_bad(void)
{
    CHECK_EQ(count(), 1);
    expect_maps(0, 0);
}

static void case_duplicate(void)
{
    CHECK_EQ(count(), 1);
    expect_maps(0, 1);
}

static void case_none(void)
{
    int n;
    CHECK_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
}

static void run(const char *name, const char *cvd, void (*fn)(void))
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        fn();
        exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        fprintf(stderr, "case %s (CUDA_VISIBLE_DEVICES=%s) failed\n", name, cvd ? cvd : "(unset)");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    struct fake_scratch scratch;
    fake_scratch_open(&scratch, "vis");
    const char *path = scratch.path;
    setenv("FAKECUDA_DEVICES", "2", 1);
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("FAKECUDA_MEM_1", "2g", 1);
    setenv("FAKECUDA_UUID_0", UUID0, 1);
    unsetenv("FAKECUDA_UUID_1");
    st = fakecuda_state_open(path);
    CHECK(st != NULL);
    CHECK_EQ(st->ndevices, 2);
    CHECK_EQ_U(st->dev[0].total, 1024 * MiB);
    CHECK_EQ_U(st->dev[1].total, 2048 * MiB);

    char uuid1[41], prefix[16];
    fakecuda_uuid_string(st->dev[1].uuid, uuid1);
    CHECK(strcmp(uuid1, UUID0) != 0);
    snprintf(prefix, sizeof(prefix), "%.12s", uuid1); /* "GPU-" + 8 hex digits */

    run("unset", NULL, case_unset);
    run("one", "1", case_one);
    run("swap", "1,0", case_swap);
    run("uuid-prefix", prefix, case_uuid_prefix);
    run("uuid-full", uuid1, case_uuid_prefix);
    run("uuid-override", "GPU-1111", case_uuid_override);
    run("stops-at-bad", "0,5,1", case_stops_at_bad);
    run("duplicate", "1,1", case_duplicate);
    run("empty", "", case_none);
    run("garbage", "abc", case_none);
    run("spaces", " 1 ", case_duplicate);

    fakecuda_state_close(st);
    fake_scratch_close(&scratch);
    printf("visible devices: ok (device 1 is %s)\n", uuid1);
    return 0;
}
