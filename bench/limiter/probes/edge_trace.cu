// Where a time-sliced mix loses GPU time at window edges.
//
// A graph-replay workload like bench/limiter/graph.py (LAYERS element-wise
// kernels per replay, synchronised every PER_SYNC replays) whose graph
// also holds two one-thread kernels that write the GPU's %globaltimer, one
// before and one after the work. Each tenant of a mix runs one; since the
// timer is the GPU's, the traces of all tenants merge into one timeline
// (edge_gaps.py): who ran when, and how long the GPU stood idle between
// one tenant's last replay and the next tenant's first. The host's
// CLOCK_REALTIME at each cudaGraphLaunch is kept beside the stamps, so a
// gap can be split into "the next tenant launched late" and "its work was
// queued but did not start".
//
//   edge_trace [--secs S] [--warmup W] [--start-mono NS] [--layers L]
//              [--n ELEMS] [--per-sync K] [--trace FILE]
//
// Prints RESULT workload=edge_trace rate=REPLAYS_PER_S ... like the bench's
// workloads; FILE gets "# measured FIRST LAST" and one line per replay:
// index, launch (host realtime ns), start and end (GPU globaltimer ns).
// Needs a real GPU (nvcc -O2 -o edge_trace edge_trace.cu).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#define CK(call)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "edge_trace: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

__global__ void stamp(unsigned long long *buf, unsigned *ctr, unsigned cap)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    unsigned i = atomicAdd(ctr, 1u);
    if (i < cap)
        buf[i] = t;
}

__global__ void axpy(float a, const float *__restrict__ x, float *__restrict__ y, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

static long long ns_of(clockid_t c)
{
    timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    double secs = 5, warmup = 1;
    long long start_mono = 0;
    unsigned layers = 4, n = 1u << 20, per_sync = 200, cap = 1u << 21;
    const char *trace = nullptr;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--secs"))
            secs = atof(v);
        else if (!strcmp(k, "--warmup"))
            warmup = atof(v);
        else if (!strcmp(k, "--start-mono"))
            start_mono = atoll(v);
        else if (!strcmp(k, "--layers"))
            layers = (unsigned)atoi(v);
        else if (!strcmp(k, "--n"))
            n = (unsigned)strtoul(v, nullptr, 0);
        else if (!strcmp(k, "--per-sync"))
            per_sync = (unsigned)atoi(v);
        else if (!strcmp(k, "--trace"))
            trace = v;
        else {
            fprintf(stderr, "edge_trace: unknown option %s\n", k);
            return 2;
        }
    }
    float *x, *y;
    unsigned long long *buf;
    unsigned *ctr;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemset(x, 0, n * sizeof(float)));
    CK(cudaMemset(y, 0, n * sizeof(float)));
    CK(cudaMalloc(&buf, cap * sizeof(unsigned long long)));
    CK(cudaMalloc(&ctr, sizeof(unsigned)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    stamp<<<1, 1, 0, s>>>(buf, ctr, cap);
    for (unsigned l = 0; l < layers; l++)
        axpy<<<(n + 255) / 256, 256, 0, s>>>(1.0001f, x, y, n);
    stamp<<<1, 1, 0, s>>>(buf, ctr, cap);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemset(ctr, 0, sizeof(unsigned)));
    CK(cudaDeviceSynchronize());

    if (start_mono) {
        timespec ts = {(time_t)(start_mono / 1000000000ll), (long)(start_mono % 1000000000ll)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
    std::vector<long long> launched;
    launched.reserve(cap / 2);
    long long t0 = ns_of(CLOCK_MONOTONIC), t_meas = 0;
    size_t first = 0, counted = 0;
    for (bool measuring = false;;) {
        for (unsigned i = 0; i < per_sync; i++) {
            launched.push_back(ns_of(CLOCK_REALTIME));
            CK(cudaGraphLaunch(ge, s));
        }
        CK(cudaStreamSynchronize(s));
        long long t = ns_of(CLOCK_MONOTONIC);
        if (!measuring && t - t0 >= (long long)(warmup * 1e9)) {
            measuring = true;
            t_meas = t;
            first = launched.size();
            continue;
        }
        if (measuring) {
            counted += per_sync;
            if (t - t_meas >= (long long)(secs * 1e9))
                break;
        }
    }
    double measured = (double)(ns_of(CLOCK_MONOTONIC) - t_meas) / 1e9;
    printf("RESULT workload=edge_trace rate=%.1f kernels=%zu secs=%.3f\n", counted / measured,
           counted, measured);
    fflush(stdout);
    if (!trace)
        return 0;
    size_t nrep = launched.size() < cap / 2 ? launched.size() : cap / 2;
    std::vector<unsigned long long> st(2 * nrep);
    CK(cudaMemcpy(st.data(), buf, st.size() * sizeof(st[0]), cudaMemcpyDeviceToHost));
    FILE *f = fopen(trace, "w");
    if (!f) {
        perror(trace);
        return 1;
    }
    fprintf(f, "# measured %zu %zu\n", first, nrep);
    for (size_t i = 0; i < nrep; i++)
        fprintf(f, "%zu %lld %llu %llu\n", i, launched[i], st[2 * i], st[2 * i + 1]);
    return fclose(f) ? 1 : 0;
}
