/*
 * Device memory holder for tests/gpu/parking/run.sh (plain driver API, so
 * it runs on the H200 and on tests/fakecuda alike).
 *
 *   hold MIB            holds MIB MiB written with a pattern, then obeys
 *                       stdin: "t" times one 4-byte copy back (a call
 *                       through cushare's gate: it includes the wake of a
 *                       parked tenant) and prints "t MICROSECONDS"; "v"
 *                       checks the pattern, "v ok" / "v bad N"; "q" exits.
 *                       Prints "ready PID" first.
 *   hold MIB --bursts K --seed S --gap-ms A B
 *                       the stand-in of the LLM tenant (FAKE=1): K bursts,
 *                       each after a seeded idle gap in [A, B] ms, each a
 *                       timed first copy, memsets and a copy back; one JSON
 *                       line per burst on stdout as llm_tenant.py writes.
 *   hold --reference T K  the stand-in's outputs of T tenants x K bursts.
 * Exit 1 with a message on any driver error; an out-of-memory error is
 * reported as {"oom": ...} and exit 3.
 */
#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define CHUNK (64 * MIB)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, CUresult r)
{
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        printf("{\"oom\": \"%s\"}\n", what);
        fflush(stdout);
        exit(3);
    }
    fprintf(stderr, "hold: %s: CUresult %d\n", what, (int)r);
    exit(1);
}

#define CK(call)                        \
    do {                                \
        CUresult r_ = (call);           \
        if (r_ != CUDA_SUCCESS)         \
            die(#call, r_);             \
    } while (0)

static uint32_t pattern(uint64_t chunk)
{
    return 0xC0DE0000u ^ (uint32_t)(chunk * 2654435761u);
}

/* splitmix64: the seeded choices of the stand-in */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t token(uint64_t seed, int burst)
{
    return mix(seed * 1000 + (uint64_t)burst) % 32000;
}

static void up(void)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
}

static CUdeviceptr fill(uint64_t bytes)
{
    CUdeviceptr d;
    CK(cuMemAlloc(&d, bytes));
    for (uint64_t off = 0; off < bytes; off += CHUNK) {
        uint64_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        CK(cuMemsetD32(d + off, pattern(off / CHUNK), n / 4));
    }
    CK(cuCtxSynchronize());
    return d;
}

static int verify(CUdeviceptr d, uint64_t bytes)
{
    int bad = 0;
    for (uint64_t off = 0; off < bytes; off += CHUNK) {
        uint32_t v;
        CK(cuMemcpyDtoH(&v, d + off, 4));
        bad += v != pattern(off / CHUNK);
    }
    return bad;
}

static int bursts(CUdeviceptr d, uint64_t bytes, int k, uint64_t seed, long a, long b)
{
    for (int i = 0; i < k; i++) {
        uint64_t gap = (uint64_t)a + mix(seed * 7919 + (uint64_t)i) % (uint64_t)(b - a + 1);
        usleep((useconds_t)(gap * 1000));
        uint32_t v;
        double t0 = now_us();
        CK(cuMemcpyDtoH(&v, d, 4));
        double t1 = now_us();
        for (int s = 0; s < 8; s++)
            CK(cuMemsetD8(d + (uint64_t)s * MIB, (unsigned char)s, MIB));
        CK(cuCtxSynchronize());
        printf("{\"tenant\": %" PRIu64 ", \"burst\": %d, \"first_op_ms\": %.3f, \"gen_ms\": %.3f, "
               "\"gap_ms\": %" PRIu64 ", \"tokens\": [%" PRIu64 "]}\n",
               seed, i, (t1 - t0) / 1e3, (now_us() - t1) / 1e3, gap, token(seed, i));
        fflush(stdout);
    }
    (void)bytes;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--reference")) {
        int t = atoi(argv[2]), k = atoi(argv[3]);
        for (int s = 0; s < t; s++)
            for (int i = 0; i < k; i++)
                printf("{\"tenant\": %d, \"burst\": %d, \"tokens\": [%" PRIu64 "]}\n", s, i,
                       token((uint64_t)s, i));
        return 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: hold MIB [--bursts K --seed S --gap-ms A B] | hold --reference T K\n");
        return 2;
    }
    uint64_t bytes = strtoull(argv[1], NULL, 10) * MIB;
    up();
    CUdeviceptr d = fill(bytes);
    if (argc == 9 && !strcmp(argv[2], "--bursts") && !strcmp(argv[4], "--seed") &&
        !strcmp(argv[6], "--gap-ms"))
        return bursts(d, bytes, atoi(argv[3]), strtoull(argv[5], NULL, 10), atol(argv[7]),
                      atol(argv[8]));
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 't') {
            uint32_t v;
            double t0 = now_us();
            CK(cuMemcpyDtoH(&v, d, 4));
            printf("t %.0f\n", now_us() - t0);
        } else if (line[0] == 'v') {
            int bad = getenv("HOLD_NO_DATA") ? 0 : verify(d, bytes);
            if (bad)
                printf("v bad %d\n", bad);
            else
                printf("v ok\n");
        } else if (line[0] == 'q') {
            return 0;
        }
    }
    return 0;
}
