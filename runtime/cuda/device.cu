/*
 * device.cu — the small things every CUDA source of the runtime needs:
 * error messages for failed calls, tracked device memory, finding the
 * devices; and the runtime's own kernels (backend.cu's batch gather,
 * optimizers and counters).
 *
 * Nothing here keeps state between calls: the memory tracker is the
 * caller's nrt_cuda_mem.
 */
#include "netrt_cuda.h"

#include <stdio.h>

static const double MiB = 1048576.0;
static const double GiB = 1073741824.0;

/* --------------------------------------------------------------- errors */

int nrt_cuda_check(cudaError_t e, const char *call, const char *file, int line,
                   nrt_error *err)
{
    if (e == cudaSuccess)
        return 0;
    /* The failed call also left e as the thread's last error; clear it so
     * that the next NRT_LAUNCHED does not blame an innocent launch. */
    (void)cudaGetLastError();
    return nrt_errorf(err, "%s failed at %s:%d: %s", call, file, line,
                      cudaGetErrorString(e));
}

int nrt_cublas_check(const nrt_cublas *b, cublasStatus_t s, const char *call,
                     const char *file, int line, nrt_error *err)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return nrt_errorf(err, "%s failed at %s:%d: %s (%s)", call, file, line,
                      b->GetStatusName(s), b->GetStatusString(s));
}

int nrt_nccl_check(const nrt_nccl *n, ncclResult_t r, const char *call, const char *file,
                   int line, nrt_error *err)
{
    if (r == ncclSuccess)
        return 0;
    return nrt_errorf(err, "%s failed at %s:%d: %s", call, file, line, n->GetErrorString(r));
}

int nrt_cuda_launched(const char *what, const char *file, int line,
                      nrt_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 0;
    return nrt_errorf(err, "launch of %s failed at %s:%d: %s", what, file,
                      line, cudaGetErrorString(e));
}

/* --------------------------------------------------------------- memory */

/* Bytes as MiB: whole ones when there are many, else with a decimal. */
static const char *mib(char *buf, size_t len, size_t bytes)
{
    double v = (double)bytes / MiB;
    snprintf(buf, len, v >= 100 ? "%.0f MiB" : "%.1f MiB", v);
    return buf;
}

int nrt_cuda_alloc(nrt_cuda_mem *m, void **p, size_t bytes, const char *what,
                   nrt_error *err)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
    }
    char need[32], free_s[32], total_s[32];
    if (e == cudaErrorMemoryAllocation) {
        /* Running out of memory is the user's problem to solve (a smaller
         * batch, a smaller model): say how far off the request is. */
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            (void)cudaGetLastError();
            return nrt_errorf(err, "out of memory on the GPU: %s needs %s", what,
                              mib(need, sizeof need, bytes));
        }
        return nrt_errorf(err, "out of memory on the GPU: %s needs %s, %s free of %s", what,
                          mib(need, sizeof need, bytes), mib(free_s, sizeof free_s, free_b),
                          mib(total_s, sizeof total_s, total_b));
    }
    if (e != cudaSuccess)
        return nrt_errorf(err, "cudaMalloc(&p, %zu) for %s failed at %s:%d: %s", bytes, what,
                          __FILE__, __LINE__, cudaGetErrorString(e));
    m->in_use += bytes;
    if (m->in_use > m->peak)
        m->peak = m->in_use;
    return 0;
}

void nrt_cuda_free(nrt_cuda_mem *m, void *p, size_t bytes)
{
    if (!p)
        return;
    /* A failing cudaFree has nobody to tell: this is cleanup, and the
     * error (a sticky one from an earlier fault) was reported already. */
    (void)cudaFree(p);
    m->in_use -= bytes <= m->in_use ? bytes : m->in_use;
}

/* -------------------------------------------------------------- devices */

/* "13.0" from CUDA's 13000. */
static void version_str(char *buf, size_t len, int v)
{
    snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

/* Where there is none, says why in err: no GPU, or no driver. */
int nrt_cuda_device_count(nrt_error *err)
{
    int n = 0;
    if (err)
        err->msg[0] = '\0';
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess)
        return n;
    (void)cudaGetLastError();
    if (e == cudaErrorNoDevice || e == cudaErrorStubLibrary) {
        nrt_errorf(err, "no CUDA device found%s",
                   e == cudaErrorStubLibrary ? " (only the CUDA toolkit's stub driver)" : "");
        return 0;
    }
    int driver = 0, runtime = 0;
    if (e == cudaErrorInsufficientDriver) {
        /* The runtime reports a machine with no driver at all the same
         * way as one with an old driver; only the second is broken. */
        if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
            (void)cudaGetLastError();
            nrt_errorf(err, "no CUDA device found: the NVIDIA driver is not installed "
                       "(no libcuda.so.1)");
            return 0;
        }
        (void)cudaRuntimeGetVersion(&runtime);
        char d[16], r[16];
        version_str(d, sizeof d, driver);
        version_str(r, sizeof r, runtime);
        return nrt_errorf(err,
                          "the CUDA driver is older than this program's CUDA "
                          "runtime (the driver supports CUDA %s, the program "
                          "needs %s); update the NVIDIA driver",
                          d, r);
    }
    return nrt_errorf(err, "cannot use CUDA: %s (%s)", cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

int nrt_cuda_list_devices(FILE *out, nrt_error *err)
{
    int n = nrt_cuda_device_count(err);
    if (n < 0)
        return -1;
    if (n == 0) {
        fprintf(out, "%s\n", err && err->msg[0] ? err->msg : "no CUDA device found");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        if (NRT_CUDA(cudaGetDeviceProperties(&p, i), err))
            return -1;
        fprintf(out, "cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB\n", i, p.name,
                p.major, p.minor, p.multiProcessorCount,
                (double)p.totalGlobalMem / GiB);
    }
    return 0;
}

/* -------------------------------------------------------------- kernels */

/* The runtime's own kernels, which backend.cu launches through the
 * functions below (C++ linkage: a declaration there that disagrees with a
 * definition here fails to link).  Launch geometry: 256 threads, grid-
 * stride loops over enough blocks to fill the device. */
enum { THREADS = 256 };

static unsigned blocks_for(int sms, size_t work)
{
    size_t b = (work + THREADS - 1) / THREADS, most = (size_t)(sms > 0 ? sms : 1) * 8;
    b = b < most ? b : most;
    return b ? (unsigned)b : 1u;
}

/* Copies the samples at positions *cursor .. *cursor + n - 1 of the
 * epoch's order into the batch; one warp per sample, so that rows of any
 * width are read coalesced.  The order is philox.h's permutation,
 * evaluated here: shuffling costs no pass of its own. */
static __global__ void k_gather(const float *__restrict__ sx, const int32_t *__restrict__ sl,
                                const float *__restrict__ sy, const nrt_order *__restrict__ order,
                                const unsigned long long *__restrict__ cursor,
                                unsigned long long offset, int n, size_t dim, size_t ydim,
                                float *__restrict__ x, int32_t *__restrict__ label,
                                float *__restrict__ y)
{
    const unsigned long long first = *cursor + offset;
    const nrt_order o = *order;
    const unsigned lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < (size_t)n;
         i += warps) {
        const size_t s = nrt_order_at(&o, (uint32_t)(first + i));
        for (size_t j = lane; j < dim; j += 32)
            x[i * dim + j] = sx[s * dim + j];
        if (sy)
            for (size_t j = lane; j < ydim; j += 32)
                y[i * ydim + j] = sy[s * ydim + j];
        if (sl && lane == 0)
            label[i] = sl[s];
    }
}

int nrt_cuda_gather(cudaStream_t s, int sms, const float *sx, const int32_t *sl,
                    const float *sy, const nrt_order *order, const unsigned long long *cursor,
                    size_t offset, int n, size_t dim, size_t ydim, float *x, int32_t *label,
                    float *y, nrt_error *err)
{
    k_gather<<<blocks_for(sms, (size_t)n * 32), THREADS, 0, s>>>(
        sx, sl, sy, order, cursor, (unsigned long long)offset, n, dim, ydim, x, label, y);
    return NRT_LAUNCHED("k_gather", err);
}

/* Several ranks: this rank's gradients (a bucket of them) weighted by its
 * share w of the batch, to be summed; with loss, the loss too, in the slot
 * past them. */
static __global__ void k_weigh(float *__restrict__ g, size_t n, const float *__restrict__ loss,
                               float w)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = __fmul_rn(g[i], w);
    if (loss && blockIdx.x == 0 && threadIdx.x == 0)
        g[n] = __fmul_rn(*loss, w);
}

static __global__ void k_copy_loss(const float *from, float *loss)
{
    *loss = *from;
}

int nrt_cuda_weigh(cudaStream_t s, int sms, float *grad, size_t n, const float *loss, float w,
                   nrt_error *err)
{
    k_weigh<<<blocks_for(sms, n), THREADS, 0, s>>>(grad, n, loss, w);
    return NRT_LAUNCHED("k_weigh", err);
}

int nrt_cuda_copy_loss(cudaStream_t s, const float *from, float *loss, nrt_error *err)
{
    k_copy_loss<<<1, 1, 0, s>>>(from, loss);
    return NRT_LAUNCHED("k_copy_loss", err);
}

/* The optimizers: a kernel for each, made from its update in
 * optimizers.h, which optim.c's loop runs too (the same bits).  t, the
 * update's number, is the updates done (on the device) + 1; none where
 * skip, read on the device, is nonzero (fp16's overflow). */
#define KERNEL(K, name, cls, s0, s1)                                                    \
    static __global__ void k_##name(float *__restrict__ p, const float *__restrict__ g, \
                                    float *__restrict__ m, float *__restrict__ v,       \
                                    size_t n, const unsigned long long *__restrict__ step, \
                                    const int *skip, nrt_optim h)                       \
    {                                                                                   \
        if (skip && *skip)                                                              \
            return;                                                                     \
        const nrt_optim_k k = nrt_optim_consts(&h, (double)(*step + 1));                \
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;           \
             i += (size_t)gridDim.x * blockDim.x)                                       \
            nrt_update_##name(&k, p, g, m, v, i);                                       \
    }
NRT_OPTIMIZERS(KERNEL)
#undef KERNEL

/* One update of param[0..n); step counts the updates done before it.  m,
 * v: the optimizer's states (optimizers.h), as nrt_optim_slots keeps them. */
int nrt_cuda_optim(cudaStream_t s, int sms, const nrt_optim *h, float *param,
                   const float *grad, float *m, float *v, size_t n,
                   const unsigned long long *step, const int *skip, nrt_error *err)
{
    if (n == 0)
        return 0;
    const unsigned b = blocks_for(sms, n);
#define LAUNCH(K, name, cls, s0, s1)                                        \
    case NRT_##K:                                                           \
        k_##name<<<b, THREADS, 0, s>>>(param, grad, m, v, n, step, skip, *h); \
        return NRT_LAUNCHED("k_" #name, err);
    switch (h->kind) {
        NRT_OPTIMIZERS(LAUNCH)
    }
#undef LAUNCH
    return nrt_errorf(err, "internal error: unknown optimizer kind %d", h->kind);
}

/* fp16's scaler, nrt_scaler_step's two halves (lowp.h's rules): the
 * gradients multiplied by the scale's reciprocal, an inf or NaN among them
 * (before) noted in *found; then the scale's update, and the optimizer's
 * count of updates done (the step not skipped). */
static __global__ void k_unscale(float *__restrict__ g, size_t n, const nrt_scaler *sc, int *found)
{
    const float inv = nrt_scaler_inv(sc);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        if (!nrt_f32_finite(gi))
            *found = 1; /* (every writer writes 1: no order to keep) */
        g[i] = __fmul_rn(gi, inv);
    }
}

static __global__ void k_scaler_update(nrt_scaler *sc, const int *found,
                                       unsigned long long *updates)
{
    nrt_scaler_update(sc, *found);
    *updates += !*found;
}

int nrt_cuda_unscale(cudaStream_t s, int sms, float *grad, size_t n, const nrt_scaler *sc,
                     int *found, nrt_error *err)
{
    if (NRT_CUDA(cudaMemsetAsync(found, 0, sizeof *found, s), err))
        return -1;
    if (n == 0)
        return 0;
    k_unscale<<<blocks_for(sms, n), THREADS, 0, s>>>(grad, n, sc, found);
    return NRT_LAUNCHED("k_unscale", err);
}

int nrt_cuda_scaler_update(cudaStream_t s, nrt_scaler *sc, const int *found,
                           unsigned long long *updates, nrt_error *err)
{
    k_scaler_update<<<1, 1, 0, s>>>(sc, found, updates);
    return NRT_LAUNCHED("k_scaler_update", err);
}

/* The end of a step: the epoch's loss sum as main.c keeps it (in double,
 * in step order, no FMA), the cursor, the step counter. */
static __global__ void k_end_step(const float *loss, int n, double *loss_sum,
                                  unsigned long long *cursor, unsigned long long *step)
{
    *loss_sum = __dadd_rn(*loss_sum, __dmul_rn((double)*loss, (double)n));
    *cursor += (unsigned long long)n;
    *step += 1;
}

int nrt_cuda_end_step(cudaStream_t s, const float *loss, int n, double *loss_sum,
                      unsigned long long *cursor, unsigned long long *step, nrt_error *err)
{
    k_end_step<<<1, 1, 0, s>>>(loss, n, loss_sum, cursor, step);
    return NRT_LAUNCHED("k_end_step", err);
}

/* nrt_correct's argmax: the first maximum; a NaN is the maximum. */
static __device__ int argmax_row(const float *x, int k)
{
    int best = 0;
    for (int j = 1; j < k && !isnan(x[best]); j++)
        if (x[j] > x[best] || isnan(x[j]))
            best = j;
    return best;
}

/* One evaluated batch: adds loss * n to *loss_sum and the rows of out
 * [n, k] whose argmax is the label to *correct (label NULL: none).  One
 * block: the count is reduced in shared memory in a fixed order, no
 * atomics. */
static __global__ void k_eval(const float *loss, const float *__restrict__ out,
                              const int32_t *__restrict__ label, int n, int k,
                              double *loss_sum, unsigned long long *correct)
{
    __shared__ unsigned count[THREADS];
    unsigned c = 0;
    if (label)
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            c += argmax_row(out + (size_t)i * k, k) == label[i];
    count[threadIdx.x] = c;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            count[threadIdx.x] += count[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss_sum = __dadd_rn(*loss_sum, __dmul_rn((double)*loss, (double)n));
        *correct += count[0];
    }
}

int nrt_cuda_count_eval(cudaStream_t s, const float *loss, const float *out,
                        const int32_t *label, int n, int k, double *loss_sum,
                        unsigned long long *correct, nrt_error *err)
{
    k_eval<<<1, THREADS, 0, s>>>(loss, out, label, n, k, loss_sum, correct);
    return NRT_LAUNCHED("k_eval", err);
}
