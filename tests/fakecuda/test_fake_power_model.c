/*
 * TEST of the test tool tests/fakecuda (never shipped): the power and DVFS
 * model. With FAKECUDA_POWER_BUSY_W=1400, IDLE 100 W, CAP 700 W and 1 ms
 * kernels (1000 blocks x 1000 ns):
 *   (b) kernels at 25 % duty (one per 4 ms): the clock stays at 1, kernels
 *       last 1 ms, power ~ 100 + 0.25 x 1300 W;
 *   (a) back-to-back kernels (duty 1): clock sqrt(600/1300) = 0.679, kernels
 *       (and a graph launch) last nominal / 0.679, power ~ 700 W, SM clock
 *       ~ 1345 MHz;
 *   (c) model off: nominal durations, 100 W, limit 700000 mW, 1980 MHz;
 *   (d) FAKECUDA_FAIL_nvmlDeviceGetPowerUsage=999 gives 999.
 * The configuration is read once per process, so each case runs in a fresh
 * exec of this program (argv[1] = on | off | fail), each with its own
 * anonymous device state. (b) runs before (a) on a cold device: the power
 * is a 1 s average, so each phase lasts just over 1 s.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_bringup.h"
#include "support/support.h"
#include "fakecuda/fake_nvml_extra.h"
#include "fakecuda/fakecuda_state.h"

#define MS 1000000ULL
#define BLOCKS 1000 /* x FAKECUDA_NS_PER_BLOCK=1000: 1 ms nominal */
#define QDEPTH 160 /* ~235 ms of work at duty 1: more than the DVFS window */

/* The tests' monotonic clock (tests/support), unsigned as these sums want. */
static uint64_t now_ns(void)
{
    return (uint64_t)cs_now_ns();
}

static void sleep_until(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* |got - want| <= rel * want */
static void check_near(const char *what, double got, double want, double rel)
{
    if (fabs(got - want) > rel * want) {
        fprintf(stderr, "%s: %.4f, expected %.4f +- %.0f %%\n", what, got, want, rel * 100);
        exit(1);
    }
}

/* The model's relative clock at duty d (BUSY 1400, IDLE 100, CAP 700). */
static double clock_at_duty(double d)
{
    d = d < 0.01 ? 0.01 : d > 1 ? 1 : d;
    double c = sqrt(600.0 / (d * 1300.0));
    return c > 1 ? 1 : c;
}

/* Device duty over the 200 ms DVFS window ending at `t`. */
static double window_duty(struct fakecuda_state *st, uint64_t t)
{
    return (double)fakecuda_busy_in_window(st, 0, 0, t - 200 * MS, t) / (200.0 * MS);
}

static CUfunction g_fn;
static nvmlDevice_t g_dev;

static void up(void)
{
    fake_ctx_up();
    g_fn = fake_kernel("spin", NULL);
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &g_dev), NVML_SUCCESS);
}

static void launch(CUstream s)
{
    CHECK_EQ(cuLaunchKernel(g_fn, BLOCKS, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
}

static double power_w(void)
{
    unsigned mw = 0;
    CHECK_EQ(nvmlDeviceGetPowerUsage(g_dev, &mw), NVML_SUCCESS);
    return mw / 1000.0;
}

static unsigned clock_mhz(nvmlClockType_t t)
{
    unsigned mhz = 0;
    CHECK_EQ(nvmlDeviceGetClockInfo(g_dev, t, &mhz), NVML_SUCCESS);
    return mhz;
}

static unsigned limit_mw(void)
{
    unsigned mw = 0;
    CHECK_EQ(nvmlDeviceGetEnforcedPowerLimit(g_dev, &mw), NVML_SUCCESS);
    return mw;
}

/* One timed kernel: events around a launch, synchronised; ms. On an idle
 * device the span also holds the host's own time from the first record to
 * the kernel's enqueue (*host_ms, when asked: an upper bound of it). */
static float timed_kernel_host(CUstream s, CUevent e0, CUevent e1, double *host_ms)
{
    float ms = -1;
    uint64_t h0 = now_ns();
    CHECK_EQ(cuEventRecord(e0, s), CUDA_SUCCESS);
    launch(s);
    if (host_ms)
        *host_ms = (double)(now_ns() - h0) / 1e6;
    CHECK_EQ(cuEventRecord(e1, s), CUDA_SUCCESS);
    CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
    CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    return ms;
}

static float timed_kernel(CUstream s, CUevent e0, CUevent e1)
{
    return timed_kernel_host(s, e0, e1, NULL);
}

static int run_on(void)
{
    up();
    const double c_full = sqrt(600.0 / 1300.0); /* clock at duty 1 */
    CUstream s;
    CUevent b0, e0;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&b0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);

    /* Idle device: idle power, maximum clock, the cap as limit. */
    CHECK_EQ(power_w() * 1000, 100000);
    CHECK_EQ(clock_mhz(NVML_CLOCK_SM), 1980);
    CHECK_EQ(limit_mw(), 700000);

    /* (b) 25 % duty: one 1 ms kernel every 4 ms (absolute deadlines, so
     * oversleeping does not lower the duty), for 1.05 s. */
    uint64_t t0 = now_ns();
    double sum = 0, lo = 1e9, hi = 0, host = 0;
    int n = 0;
    for (uint64_t k = 0; k * 4 * MS < 1050 * MS; k++) {
        sleep_until(t0 + k * 4 * MS);
        double h;
        float ms = timed_kernel_host(s, b0, e0, &h);
        sum += ms;
        host += h;
        n++;
        lo = ms < lo ? ms : lo;
        hi = ms > hi ? ms : hi;
    }
    double dur_b = sum / n, host_b = host / n, pow_b = power_w();
    unsigned sm_b = clock_mhz(NVML_CLOCK_SM);
    nvmlUtilization_t u;
    CHECK_EQ(nvmlDeviceGetUtilizationRates(g_dev, &u), NVML_SUCCESS);
    printf("(b) 25%% duty: %d kernels, %.4f ms (min %.4f max %.4f), power %.1f W, SM %u MHz, util %u %%\n",
           n, dur_b, lo, hi, pow_b, sm_b, u.gpu);
    /* Means: a descheduled host thread inflates one event pair (b) or
     * leaves the device idle for a moment (a); the model itself is exact. */
    /* The span holds the host's launch time too (an idle device starts the
     * kernel when it is enqueued, after the first record): ~5 us here,
     * ~45 us under ASan. The kernel itself lies between the two. */
    printf("(b) host time from the first record to the enqueue: %.4f ms (mean)\n", host_b);
    CHECK(dur_b >= 1.0 * 0.95);
    check_near("(b) mean kernel duration without the host's part / ms",
               dur_b - host_b > 1.0 ? dur_b - host_b : fmin(dur_b, 1.0), 1.0, 0.05);
    check_near("(b) power / W", pow_b, 100 + 0.25 * 1300, 0.10);
    CHECK_EQ(sm_b, 1980);

    /* (a) back-to-back for 1.05 s: QDEPTH kernels (~235 ms of work) always
     * queued, so the device never idles even when this thread is
     * descheduled for a while. Durations of kernels enqueued after 250 ms
     * (the 200 ms DVFS window is then all busy), each against the model at
     * the duty of its enqueue: a stall longer than the queue (a loaded
     * ASan run once drained 16 kernels' worth) lowers that duty, and the
     * kernel rightly runs faster. */
    struct fakecuda_state *st = fakecuda_driver_state();
    CHECK(st != NULL);
    CUevent qb[QDEPTH], qe[QDEPTH];
    uint64_t enq[QDEPTH];
    double want[QDEPTH], want_sum = 0, want_max = 0;
    for (int i = 0; i < QDEPTH; i++) {
        CHECK_EQ(cuEventCreate(&qb[i], CU_EVENT_DEFAULT), CUDA_SUCCESS);
        CHECK_EQ(cuEventCreate(&qe[i], CU_EVENT_DEFAULT), CUDA_SUCCESS);
    }
    /* A kernel whose begin event found the stream idle (this thread was
     * descheduled long enough for the queue to drain) starts when the
     * launch call comes, so its event pair also spans the host's stall:
     * such kernels are left out, measured against the previous kernel's
     * end on one base event. */
    CUevent base;
    CHECK_EQ(cuEventCreate(&base, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(base, s), CUDA_SUCCESS);
    float prev_end = -1;
    int stalled = 0;
    uint64_t ta = now_ns();
    sum = 0, lo = 1e9, hi = 0;
    n = 0;
    for (int i = 0;; i++) {
        int j = i % QDEPTH;
        if (i >= QDEPTH) { /* slot j: kernel i - QDEPTH, wait for it */
            float ms, begin, end;
            CHECK_EQ(cuEventSynchronize(qe[j]), CUDA_SUCCESS);
            CHECK_EQ(cuEventElapsedTime(&ms, qb[j], qe[j]), CUDA_SUCCESS);
            CHECK_EQ(cuEventElapsedTime(&begin, base, qb[j]), CUDA_SUCCESS);
            CHECK_EQ(cuEventElapsedTime(&end, base, qe[j]), CUDA_SUCCESS);
            bool first = prev_end < 0, queued = !first && begin - prev_end < 0.001f;
            prev_end = end;
            stalled += !first && !queued;
            if (queued && enq[j] - ta >= 250 * MS) {
                sum += ms;
                want_sum += want[j];
                want_max = fmax(want_max, want[j]);
                n++;
                lo = ms < lo ? ms : lo;
                hi = ms > hi ? ms : hi;
            }
        }
        if (now_ns() - ta >= 1050 * MS)
            break;
        enq[j] = now_ns();
        want[j] = 1.0 / clock_at_duty(window_duty(st, enq[j]));
        CHECK_EQ(cuEventRecord(qb[j], s), CUDA_SUCCESS);
        launch(s);
        CHECK_EQ(cuEventRecord(qe[j], s), CUDA_SUCCESS);
    }
    /* Still busy (QDEPTH - 1 kernels queued): read NVML now. */
    CHECK_EQ(nvmlDeviceGetUtilizationRates(g_dev, &u), NVML_SUCCESS);
    double pow_a = power_w();
    uint64_t at_a = now_ns();
    unsigned sm_a = clock_mhz(NVML_CLOCK_SM), gr_a = clock_mhz(NVML_CLOCK_GRAPHICS);
    /* A graph launch is stretched the same way. */
    CUgraph graph;
    CUgraphExec exec;
    CHECK_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
    uint64_t busy0 = fakecuda_load(&st->dev[0].busy_ns), at_g = now_ns();
    CHECK_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
    double graph_us = (double)(fakecuda_load(&st->dev[0].busy_ns) - busy0) / 1000.0;
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    double dur_a = sum / n;
    printf("(a) back-to-back: %d kernels, %.4f ms (min %.4f max %.4f; nominal / %.4f = %.4f), "
           "power %.1f W, SM %u MHz, graphics %u MHz, graph launch %.1f us, util %u %% "
           "(%d kernels left out: the queue had drained)\n",
           n, dur_a, lo, hi, c_full, 1.0 / c_full, pow_a, sm_a, gr_a, graph_us, u.gpu, stalled);
    CHECK_GT(n, 100);
    check_near("(a) mean kernel duration / ms", dur_a, want_sum / n, 0.03);
    /* The model at duty 1 was reached: the queue kept the window busy. */
    check_near("(a) longest kernel the model asked for / ms", want_max, 1.0 / c_full, 0.03);
    CHECK(hi <= 1.0 / c_full * 1.03); /* never slower than at duty 1 */
    check_near("(a) power / W", pow_a, 700, 0.05);
    /* NVML's clock is the instant's: that of the duty over the DVFS
     * window just before the read, which a host stall (a loaded CI
     * machine) can lower; compare with the model at that duty. */
    check_near("(a) SM clock / MHz", sm_a, 1980 * clock_at_duty(window_duty(st, at_a)), 0.03);
    CHECK_EQ(gr_a, sm_a);
    /* Stretched by the clock of the duty at its enqueue, like the clock
     * NVML reports (a host stall just before lowers that duty). */
    check_near("(a) graph launch / us", graph_us, 100 / clock_at_duty(window_duty(st, at_g)), 0.05);
    CHECK_EQ(clock_mhz(NVML_CLOCK_MEM), 3201);
    CHECK_EQ(limit_mw(), 700000);
    CHECK_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
    return 0;
}

static int run_off(void)
{
    /* Before nvmlInit: uninitialised, like every device query. */
    unsigned v = 0;
    CHECK_EQ(nvmlDeviceGetPowerUsage(NULL, &v), NVML_ERROR_UNINITIALIZED);
    up();
    CUstream s;
    CUevent e0, e1;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    struct fakecuda_state *st = fakecuda_driver_state();
    CHECK(st != NULL);
    /* Busy the device for 20 ms: durations stay nominal, power idle. */
    double ms = 0;
    for (int i = 0; i < 20; i++)
        ms += timed_kernel(s, e0, e1) / 20.0;
    /* The device timeline says exactly how long the kernels ran; an event
     * pair can only add the host's delay between recording and launching
     * (a loaded machine), never take from it. */
    CHECK_EQ_U(fakecuda_load(&st->dev[0].busy_ns), 20 * MS); /* exactly nominal */
    if (ms < 0.95) {
        fprintf(stderr, "(c) mean kernel duration %.4f ms, under the nominal 1 ms\n", ms);
        return 1;
    }
    CHECK_EQ(power_w() * 1000, 100000);
    CHECK_EQ(limit_mw(), 700000);
    CHECK_EQ(clock_mhz(NVML_CLOCK_SM), 1980);
    CHECK_EQ(clock_mhz(NVML_CLOCK_GRAPHICS), 1980);
    CHECK_EQ(clock_mhz(NVML_CLOCK_MEM), 3201);
    /* Argument checks. */
    CHECK_EQ(nvmlDeviceGetClockInfo(g_dev, NVML_CLOCK_VIDEO, &v), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetClockInfo(g_dev, (nvmlClockType_t)99, &v), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetClockInfo(g_dev, NVML_CLOCK_SM, NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetPowerUsage(g_dev, NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetEnforcedPowerLimit(g_dev, NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvmlDevice_t bad = (nvmlDevice_t)&v;
    CHECK_EQ(nvmlDeviceGetPowerUsage(bad, &v), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetEnforcedPowerLimit(bad, &v), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(nvmlDeviceGetClockInfo(bad, NVML_CLOCK_SM, &v), NVML_ERROR_INVALID_ARGUMENT);
    printf("(c) model off: kernel %.4f ms, power %.1f W, limit %u mW, SM %u MHz\n", ms, power_w(),
           limit_mw(), clock_mhz(NVML_CLOCK_SM));
    return 0;
}

static int run_fail(void)
{
    up();
    unsigned v = 0;
    CHECK_EQ(nvmlDeviceGetPowerUsage(g_dev, &v), 999);
    CHECK_EQ(nvmlDeviceGetPowerUsage(g_dev, &v), 999);
    CHECK_EQ(v, 0); /* nothing written */
    CHECK_EQ(limit_mw(), 700000);
    CHECK_EQ(clock_mhz(NVML_CLOCK_SM), 1980);
    struct fakecuda_state *st = fakecuda_nvml_state();
    CHECK(st != NULL);
    CHECK_EQ(fakecuda_calls(st, FAKECUDA_CALL_nvmlDeviceGetPowerUsage), 2);
    CHECK_EQ(fakecuda_calls(st, FAKECUDA_CALL_nvmlDeviceGetEnforcedPowerLimit), 1);
    CHECK_EQ(fakecuda_calls(st, FAKECUDA_CALL_nvmlDeviceGetClockInfo), 1);
    printf("(d) injected failure: nvmlDeviceGetPowerUsage = 999\n");
    return 0;
}

static void run_child(const char *self, const char *mode)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (!strcmp(mode, "on")) {
            setenv("FAKECUDA_POWER_BUSY_W", "1400", 1);
            setenv("FAKECUDA_POWER_IDLE_W", "100", 1);
            setenv("FAKECUDA_POWER_CAP_W", "700", 1);
        } else if (!strcmp(mode, "fail")) {
            setenv("FAKECUDA_FAIL_nvmlDeviceGetPowerUsage", "999", 1);
        }
        execl(self, self, mode, (char *)NULL);
        perror("exec");
        _exit(127);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "case '%s' failed (status 0x%x)\n", mode, status);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (!strcmp(argv[1], "on"))
            return run_on();
        if (!strcmp(argv[1], "off"))
            return run_off();
        if (!strcmp(argv[1], "fail"))
            return run_fail();
        return 2;
    }
    /* A clean configuration: anonymous state per case, defaults. */
    static const char *const clear[] = {
        "FAKECUDA_STATE", "FAKECUDA_GRAPH_US", "FAKECUDA_UTIL_WINDOW_MS", "FAKECUDA_DVFS_WINDOW_MS",
        "FAKECUDA_POWER_BUSY_W", "FAKECUDA_POWER_IDLE_W", "FAKECUDA_POWER_CAP_W",
        "FAKECUDA_FAIL_nvmlDeviceGetPowerUsage", "FAKECUDA_EVENT_TIMESLICE", "CUDA_VISIBLE_DEVICES",
    };
    for (size_t i = 0; i < sizeof(clear) / sizeof(clear[0]); i++)
        unsetenv(clear[i]);
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_NS_PER_BLOCK", "1000", 1);
    run_child("/proc/self/exe", "off");
    run_child("/proc/self/exe", "fail");
    run_child("/proc/self/exe", "on");
    return 0;
}
