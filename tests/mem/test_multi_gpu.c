/*
 * Two simulated devices, CUDA_DEVICE_MEMORY_LIMIT_0=64m and _1=128m: the
 * budget of visible index i applies to whatever physical device is i-th in
 * CUDA_VISIBLE_DEVICES (unset, "1", "1,0", a UUID); CUDA views, NVML views
 * (NVML numbers devices physically) and `cushare status` agree on which
 * device is which.
 */
#include "mem_test.h"

#include <sys/wait.h>


#define L0 (64 * MiB)
#define L1 (128 * MiB)
#define PHYS (1024 * MiB)

static void uuid_string(const CUuuid *u, char out[41])
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* CUDA's view of visible device `ord`: total from cuMemGetInfo in its
 * context, and its UUID. */
static uint64_t cuda_total(int ord, char uuid[41])
{
    CUdevice dev;
    CUcontext ctx;
    CUuuid u;
    size_t f, t, dt;
    CHECK_EQ(cuDeviceGet(&dev, ord), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetUuid_v2(&u, dev), CUDA_SUCCESS);
    uuid_string(&u, uuid);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceTotalMem_v2(&dt, dev), CUDA_SUCCESS);
    CHECK_EQ_U(dt, t);
    /* An allocation over this device's budget is refused; under it works. */
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, t + MiB), t < PHYS ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS);
    if (t >= PHYS)
        cuMemFree_v2(p);
    return t;
}

/* NVML's view of the device with this UUID (NVML ignores visibility). */
static uint64_t nvml_total(const char *uuid)
{
    struct nvml_api n = nvml_open();
    nvmlDevice_t d;
    CHECK_EQ(n.by_uuid(uuid, &d), NVML_SUCCESS);
    return nvml_memory(&n, d).total;
}

static void status_names(const char *uuid0)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/cushare status --json %s", getenv("CS_BUILD_DIR"),
             getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    CHECK_EQ(pclose(f), 0);
    char want[128];
    snprintf(want, sizeof want, "\"index\": 0, \"uuid\": \"%s\"", uuid0);
    char want2[128];
    snprintf(want2, sizeof want2, "\"index\":0,\"uuid\":\"%s\"", uuid0);
    if (!strstr(out, want) && !strstr(out, want2)) {
        fprintf(stderr, "status does not name device 0 as %s:\n%s\n", uuid0, out);
        exit(1);
    }
}

/* One scenario: expected physical index of visible 0 and 1 (-1: none). */
static int scenario(int phys_of_0, int phys_of_1)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    int count = 0;
    CHECK_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
    CHECK_EQ(count, phys_of_1 >= 0 ? 2 : 1);
    struct fakecuda_state *F = fake_state();
    char u0[41], u1[41], p[41];
    CHECK_EQ_U(cuda_total(0, u0), L0);
    fakecuda_uuid_string(F->dev[phys_of_0].uuid, p);
    CHECK_STREQ(u0, p);
    CHECK_EQ_U(nvml_total(u0), L0);
    if (phys_of_1 >= 0) {
        CHECK_EQ_U(cuda_total(1, u1), L1);
        fakecuda_uuid_string(F->dev[phys_of_1].uuid, p);
        CHECK_STREQ(u1, p);
        CHECK_EQ_U(nvml_total(u1), L1);
    } else {
        /* The hidden device shows NVML's physical truth. */
        fakecuda_uuid_string(F->dev[1 - phys_of_0].uuid, p);
        CHECK_EQ_U(nvml_total(p), PHYS);
    }
    status_names(u0);
    return 0;
}

static void run_child(const char *self, const char *cvd, const char *arg0, const char *arg1,
                      const char *tag)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char ledger[4096];
        snprintf(ledger, sizeof ledger, "%s.%s", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"), tag);
        unlink(ledger);
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        execl(self, self, arg0, arg1, (char *)NULL);
        _exit(127);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "scenario CUDA_VISIBLE_DEVICES=%s failed\n", cvd ? cvd : "(unset)");
        exit(1);
    }
    printf("CUDA_VISIBLE_DEVICES=%s: budgets follow the visible order\n", cvd ? cvd : "(unset)");
}

int main(int argc, char **argv)
{
    if (argc == 3)
        return scenario(atoi(argv[1]), atoi(argv[2]));
    struct fakecuda_state *F = fake_state();
    CHECK_EQ(F->ndevices, 2);
    char u1[41];
    fakecuda_uuid_string(F->dev[1].uuid, u1);
    run_child(argv[0], NULL, "0", "1", "unset");
    run_child(argv[0], "1", "1", "-1", "one");
    run_child(argv[0], "1,0", "1", "0", "swapped");
    run_child(argv[0], u1, "1", "-1", "uuid");
    return 0;
}
