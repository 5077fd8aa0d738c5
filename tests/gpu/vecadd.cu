// Foundation acceptance: a plain CUDA C program whose output must be the
// same with and without cushare (no limits).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void vecadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main()
{
    const int n = 1 << 24;
    float *a, *b, *c;
    float *h = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++)
        h[i] = (float)(i % 1000) * 0.5f;
    if (cudaMalloc(&a, n * 4) || cudaMalloc(&b, n * 4) || cudaMalloc(&c, n * 4)) {
        printf("cudaMalloc failed\n");
        return 1;
    }
    cudaMemcpy(a, h, n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, h, n * 4, cudaMemcpyHostToDevice);
    vecadd<<<(n + 255) / 256, 256>>>(a, b, c, n);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(h, c, n * 4, cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += h[i];
    size_t free_b, total_b;
    cudaMemGetInfo(&free_b, &total_b);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("device=%s sms=%d total_mem=%zu kernel=%s checksum=%.1f\n", p.name, p.multiProcessorCount,
           total_b, cudaGetErrorString(e), sum);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    free(h);
    return 0;
}
