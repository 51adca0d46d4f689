/*
 * selftest.cu — the emulated device catches what it is there to catch.
 * Each mode (the first argument) runs one small program with one bug, or
 * none; tests/emu.sh runs them and reads the messages.
 *
 *   ok          a correct reduction: the block's sum, in every order
 *   race        the reduction without its barrier: a wrong sum in some order
 *   divergent   a barrier inside a branch not all threads take
 *   hostread    the host reads device memory
 *   overflow    a kernel writes one element past its allocation
 *   stale       the host reads a pinned result before the stream is waited for
 *   capture     cudaStreamSynchronize while the stream is captured
 *   lda         cublasSgemm with lda smaller than the rows
 *   hostptr     a kernel given a pageable host pointer
 *   bounds      a kernel launched with more threads than its __launch_bounds__
 *   unset       a template kernel reads its __shared__ array unwritten: NaN
 *   shared      a kernel with 48 KiB of static shared data, the most ptxas
 *               allows: built with -DSHARED_KIB=49, this file must be refused
 *               by the emulated nvcc, as by ptxas
 *   branches    a graph of two streams (fork, join) replayed right every
 *               time, and a stream waiting for another's event outside one
 *   early       a graph that reads a branch's result before the join: wrong
 *               in some replays
 *   unjoined    a capture that ends with a branch not joined: refused
 *   halfs       bf16 and fp16 in a kernel (cuda_bf16.h, cuda_fp16.h):
 *               conversions rounded to nearest even, arithmetic, against
 *               bit patterns worked out by hand
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256

__global__ void __launch_bounds__(N) block_sum(const float *x, float *out, int barrier)
{
    __shared__ float s[N];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    for (int w = N / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        if (barrier)
            __syncthreads();
    }
    float v = threadIdx.x < 32 ? s[threadIdx.x] : 0.0f; /* lane sums, by shuffles */
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0)
        out[0] = s[0], out[1] = v;
}

__global__ void divergent(float *out)
{
    if (threadIdx.x < 16)
        __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ void fill(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) /* the bug: <= */
        out[i] = 2.0f;
}

/* A template's shared array, read where no thread wrote it (write is 0):
 * NaN bytes, as every shared array is filled before each block. */
template <int M> __global__ void unset(float *out, int write)
{
    __shared__ float t[M];
    if (write)
        t[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = t[threadIdx.x];
}

/* big_shared's static shared data, SHARED_KIB KiB in all (floats): its own
 * array, a template's it inlines and an array of a function it calls;
 * block_sum's 1 KiB is another kernel's and does not count. */
#ifndef SHARED_KIB
#define SHARED_KIB 48
#endif
#define FAR 1024
#define NEAR 8192
#define OWN (SHARED_KIB * 256 - NEAR - FAR)

template <int M> __device__ float staged(const float *x)
{
    __shared__ float t[M];
    for (int i = threadIdx.x; i < M; i += blockDim.x)
        t[i] = x[i % N];
    __syncthreads();
    return t[M - 1 - threadIdx.x];
}

/* a call, not inlined (no __noinline__: emu.h cannot define it, libstdc++
 * writes __attribute__((__noinline__))) */
__device__ __attribute__((noinline)) float staged_far(const float *x)
{
    __shared__ float u[FAR];
    for (int i = threadIdx.x; i < FAR; i += blockDim.x)
        u[i] = x[i % N];
    __syncthreads();
    return u[FAR - 1 - threadIdx.x];
}

__global__ void big_shared(const float *x, float *out)
{
    __shared__ float own[OWN];
    for (int i = threadIdx.x; i < OWN; i += blockDim.x)
        own[i] = x[i % N];
    __syncthreads();
    out[threadIdx.x] = own[OWN - 1 - threadIdx.x] + staged<NEAR>(x) + staged_far(x);
}

__global__ void scale(const float *x, float *y, float k)
{
    y[threadIdx.x] = k * x[threadIdx.x];
}

__global__ void add(const float *a, const float *b, float *y)
{
    y[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

/* Captures, on s and s2: c = 2x; then, forked, b = 3c on s2 while d = b + c
 * waits for the join on s (early: d before the join; unjoined: no join).
 * Returns EndCapture's error; the graph in *exec. */
static cudaError_t branches(cudaStream_t s, cudaStream_t s2, const float *x, float *b, float *c,
                            float *d, const char *mode, cudaGraphExec_t *exec)
{
    cudaEvent_t fork, join;
    cudaGraph_t g;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    scale<<<1, N, 0, s>>>(x, c, 2.0f);
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(s2, fork, 0);
    scale<<<1, N, 0, s2>>>(c, b, 3.0f);
    if (!strcmp(mode, "early"))
        add<<<1, N, 0, s>>>(b, c, d); /* the bug: before the join */
    cudaEventRecord(join, s2);
    if (strcmp(mode, "unjoined"))
        cudaStreamWaitEvent(s, join, 0);
    if (strcmp(mode, "early"))
        add<<<1, N, 0, s>>>(b, c, d);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (e == cudaSuccess) {
        e = cudaGraphInstantiate(exec, g, 0);
        cudaGraphDestroy(g);
    }
    return e;
}

/* Each x to bf16 and to fp16 (their bits), and the bf16 sum x + x and the
 * fp16 product x * x back to float. */
__global__ void halfs(const float *x, unsigned short *bits, float *y, int n)
{
    int i = threadIdx.x;
    if (i >= n)
        return;
    __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
    __half h = __float2half_rn(x[i]);
    bits[2 * i] = __bfloat16_as_ushort(b);
    bits[2 * i + 1] = __half_as_ushort(h);
    y[2 * i] = __bfloat162float(__hadd(b, b));
    y[2 * i + 1] = __half2float(__hmul(h, h));
}

static int fail(const char *what, cudaError_t e)
{
    printf("%s: %s\n", what, cudaGetErrorString(e));
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    float h[N], *x, *out, r[2];
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc((void **)&x, sizeof h);
    cudaMalloc((void **)&out, N * sizeof(float));
    cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
    if (!strcmp(mode, "ok") || !strcmp(mode, "race")) {
        block_sum<<<1, N, 0, s>>>(x, out, !strcmp(mode, "ok"));
        cudaError_t e = cudaMemcpyAsync(r, out, sizeof r, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess)
            return fail("copy", e);
        /* 0 + ... + 255, and the 32 lane sums s[0..31] after the reduction */
        printf("sum %g lanes %g\n", r[0], r[1]);
        return r[0] == 32640.0f ? 0 : 1;
    }
    if (!strcmp(mode, "divergent")) {
        divergent<<<1, 32, 0, s>>>(out);
        return fail("sync", cudaStreamSynchronize(s));
    }
    if (!strcmp(mode, "hostread")) {
        printf("%g\n", x[3]);
        return 0;
    }
    if (!strcmp(mode, "overflow")) {
        fill<<<2, N, 0, s>>>(out, N); /* out has N floats */
        return fail("sync", cudaStreamSynchronize(s));
    }
    if (!strcmp(mode, "stale")) {
        float *pinned;
        cudaMallocHost((void **)&pinned, sizeof(float));
        pinned[0] = -1.0f;
        block_sum<<<1, N, 0, s>>>(x, out, 1);
        cudaMemcpyAsync(pinned, out, sizeof(float), cudaMemcpyDeviceToHost, s);
        printf("before the wait: %g\n", pinned[0]); /* the bug: no wait */
        cudaStreamSynchronize(s);
        printf("after the wait: %g\n", pinned[0]);
        return 0;
    }
    if (!strcmp(mode, "capture")) {
        cudaGraph_t g;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        block_sum<<<1, N, 0, s>>>(x, out, 1);
        cudaError_t e = cudaStreamSynchronize(s);
        printf("sync in capture: %s\n", cudaGetErrorName(e));
        e = cudaStreamEndCapture(s, &g);
        printf("end capture: %s\n", cudaGetErrorName(e));
        return 0;
    }
    if (!strcmp(mode, "lda")) {
        cublasHandle_t b;
        float one = 1.0f, zero = 0.0f;
        cublasCreate(&b);
        /* C[8 x 8] = A[8 x 8] B[8 x 8], A's leading dimension 4 */
        cublasStatus_t st = cublasSgemm(b, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, x, 4, x, 8,
                                        &zero, out, 8);
        printf("sgemm: %s\n", cublasGetStatusName(st));
        return 0;
    }
    if (!strcmp(mode, "hostptr")) {
        block_sum<<<1, N, 0, s>>>(h, out, 1);
        return fail("launch", cudaGetLastError());
    }
    if (!strcmp(mode, "bounds")) {
        block_sum<<<1, 2 * N, 0, s>>>(x, out, 1);
        return fail("launch", cudaGetLastError());
    }
    if (!strcmp(mode, "unset")) {
        unset<N><<<1, N, 0, s>>>(out, 0);
        cudaError_t e = cudaMemcpyAsync(r, out, sizeof r, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess || (e = cudaStreamSynchronize(s)) != cudaSuccess)
            return fail("unset", e);
        printf("unset %s\n", isnan(r[0]) && isnan(r[1]) ? "nan" : "a number");
        return 0;
    }
    if (!strcmp(mode, "shared")) {
        big_shared<<<1, N, 0, s>>>(x, out);
        cudaError_t e = cudaMemcpyAsync(r, out, sizeof r, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess || (e = cudaStreamSynchronize(s)) != cudaSuccess)
            return fail("shared", e);
        printf("shared %g %g\n", r[0], r[1]); /* 3 (255 - t), t = 0, 1 */
        return 0;
    }
    if (!strcmp(mode, "branches") || !strcmp(mode, "early") || !strcmp(mode, "unjoined")) {
        cudaStream_t s2;
        cudaGraphExec_t exec;
        float *b, *c, *d, *pinned;
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        cudaMalloc((void **)&b, N * sizeof(float));
        cudaMalloc((void **)&c, N * sizeof(float));
        cudaMalloc((void **)&d, N * sizeof(float));
        cudaMallocHost((void **)&pinned, N * sizeof(float));
        cudaError_t e = branches(s, s2, x, b, c, d, mode, &exec);
        printf("end capture: %s\n", cudaGetErrorName(e));
        if (e != cudaSuccess)
            return 0;
        int right = 0;
        for (int r = 0; r < 20; r++) {
            cudaMemsetAsync(b, 0, N * sizeof(float), s);
            cudaGraphLaunch(exec, s);
            cudaMemcpyAsync(pinned, d, N * sizeof(float), cudaMemcpyDeviceToHost, s);
            if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
                return fail("replay", e);
            right += pinned[N - 1] == 8.0f * (N - 1);
        }
        printf("replays right: %d of 20\n", right);
        /* outside a capture: s2 waits for s's event, then copies */
        cudaEvent_t ev;
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        scale<<<1, N, 0, s>>>(x, c, 5.0f);
        cudaEventRecord(ev, s);
        cudaStreamWaitEvent(s2, ev, 0);
        cudaMemcpyAsync(pinned, c, N * sizeof(float), cudaMemcpyDeviceToHost, s2);
        if ((e = cudaStreamSynchronize(s2)) != cudaSuccess)
            return fail("wait", e);
        printf("waited: %g\n", pinned[N - 1]);
        return 0;
    }
    if (!strcmp(mode, "halfs")) {
        /* 1; 1 + 2^-8 (a tie in bf16: to even, 1; exact in fp16); 1 + 3 2^-8
         * (a tie: to even, up); 65520 (fp16 overflows to infinity); 2^-24
         * (fp16's smallest subnormal); -2.5 */
        const float v[6] = {1.0f, 1.00390625f, 1.01171875f, 65520.0f, 5.9604645e-8f, -2.5f};
        const unsigned short want[12] = {0x3f80, 0x3c00, 0x3f80, 0x3c04, 0x3f82, 0x3c0c,
                                         0x4780, 0x7c00, 0x3380, 0x0001, 0xc020, 0xc100};
        unsigned short *bits, got[12];
        float *y, hy[12];
        cudaMalloc((void **)&bits, sizeof got);
        cudaMalloc((void **)&y, sizeof hy);
        cudaMemcpy(x, v, sizeof v, cudaMemcpyHostToDevice);
        halfs<<<1, 32, 0, s>>>(x, bits, y, 6);
        cudaError_t e = cudaMemcpyAsync(got, bits, sizeof got, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess || (e = cudaMemcpyAsync(hy, y, sizeof hy, cudaMemcpyDeviceToHost, s)) ||
            (e = cudaStreamSynchronize(s)) != cudaSuccess)
            return fail("halfs", e);
        int wrong = 0;
        for (int i = 0; i < 12; i++)
            if (got[i] != want[i]) {
                printf("%s of %g: 0x%04x, want 0x%04x\n", i % 2 ? "fp16" : "bf16", v[i / 2],
                       got[i], want[i]);
                wrong++;
            }
        /* bf16 1 + 1; fp16 (1 + 2^-8)^2 = 1.0078278 rounded to 1.0078125; bf16
         * 1.015625 doubled; fp16 inf squared; fp16 2^-48, under its smallest
         * subnormal: 0; fp16 6.25 */
        printf("halfs: %d wrong; %.9g %.9g %.9g %.9g %.9g %.9g\n", wrong, hy[0], hy[3], hy[4],
               hy[7], hy[9], hy[11]);
        return wrong != 0;
    }
    printf("no mode %s\n", mode);
    return 2;
}
