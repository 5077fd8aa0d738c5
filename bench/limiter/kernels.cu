// Kernels of the limiter benchmark workload (workload.c loads them as PTX;
// kernels_ptx.h is generated from this file by gen_ptx.sh).
extern "C" __global__ void axpy(float a, const float *__restrict__ x, float *__restrict__ y,
                                unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" __global__ void tiny(unsigned *counter)
{
    if (threadIdx.x == 0)
        atomicAdd(counter, 1u);
}
