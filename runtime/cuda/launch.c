/*
 * launch.c — the launchers of generated host code: each computes a grid,
 * checks the sizes the kernel's 32-bit index arithmetic relies on, and
 * enqueues a kernel of the net's module (module.c) on net->stream.  None
 * synchronises.
 *
 * Kernels are launched through cudaLaunchKernel with a cudaKernel_t from
 * the loaded library, so plain C launches them and a stream capture
 * records them like any other launch.
 */
#include "netrt_cuda.h"
#include "netrt_blocks.h"

#include <limits.h>
#include <string.h>

/* Grid-stride kernels need no more blocks than a few waves of the largest
 * GPU; beyond that, more blocks only cost scheduling. */
enum { EACH_THREADS = 256, MAX_GRID = 8192, MAX_ARGS = 16 };

static int cdiv(long long a, long long b) { return (int)((a + b - 1) / b); }

/* Blocks for count elements at threads a block: at least 1 (a kernel
 * launched on nothing is harmless), at most MAX_GRID. */
static unsigned grid_for(size_t count, unsigned threads)
{
    size_t b = count / threads + (count % threads != 0);
    return b < 1 ? 1 : b > MAX_GRID ? MAX_GRID : (unsigned)b;
}

static int fits_int(long long v) { return v >= 0 && v <= INT_MAX; }

static int too_big(const nrt_cuda_net *net, int k, nrt_error *err)
{
    return nrt_errorf(err, "%s: a tensor of 2^31 elements or more",
                      nrt_cuda_kernel_name(net, k));
}

int nrt_cu_launch(nrt_cuda_net *net, int k, unsigned gx, unsigned gy, unsigned gz,
                  unsigned threads, void **args, int nargs, nrt_error *err)
{
    (void)nargs; /* the kernel's signature decides how many it reads */
    dim3 grid = {gx, gy, gz}, block = {threads, 1, 1};
    cudaError_t e = cudaLaunchKernel((const void *)net->kernel[k], grid, block, args, 0,
                                     net->stream);
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return nrt_errorf(err, "launch of %s failed: %s", nrt_cuda_kernel_name(net, k),
                      cudaGetErrorString(e));
}

/* args with first in front. */
static int with_first(void **all, void *first, void **args, int nargs, const nrt_cuda_net *net,
                      int k, nrt_error *err)
{
    if (nargs + 1 > MAX_ARGS)
        return nrt_errorf(err, "internal error: %s given %d arguments",
                          nrt_cuda_kernel_name(net, k), nargs);
    all[0] = first;
    if (nargs > 0)
        memcpy(all + 1, args, sizeof(void *) * (size_t)nargs);
    return 0;
}

/* A grid-stride kernel over count elements; first points at the count as
 * the kernel takes it. */
static int each(nrt_cuda_net *net, int k, size_t count, void *first, void **args, int nargs,
                nrt_error *err)
{
    void *all[MAX_ARGS];
    if (count == 0)
        return 0;
    if (with_first(all, first, args, nargs, net, k, err))
        return -1;
    return nrt_cu_launch(net, k, grid_for(count, EACH_THREADS), 1, 1, EACH_THREADS, all,
                         nargs + 1, err);
}

int nrt_cu_each(nrt_cuda_net *net, int k, size_t count, void **args, int nargs,
                nrt_error *err)
{
    return each(net, k, count, &count, args, nargs, err);
}

int nrt_cu_each_int(nrt_cuda_net *net, int k, long long count, void **args, int nargs,
                    nrt_error *err)
{
    if (!fits_int(count))
        return too_big(net, k, err);
    int total = (int)count;
    return each(net, k, (size_t)total, &total, args, nargs, err);
}

int nrt_cu_igemm(nrt_cuda_net *net, int k, const nrt_cu_tile *t, int n, void **args,
                 int nargs, nrt_error *err)
{
    void *all[MAX_ARGS];
    if (n < 0)
        return nrt_errorf(err, "%s: negative batch size", t->what);
    if (!fits_int((long long)n * t->in) || !fits_int((long long)n * t->out))
        return too_big(net, k, err);
    if (n == 0)
        return 0;
    if (with_first(all, &n, args, nargs, net, k, err))
        return -1;
    return nrt_cu_launch(net, k, (unsigned)cdiv((long long)n * t->cols, t->bn),
                         (unsigned)cdiv(t->rows, t->bm), 1, (unsigned)t->threads, all,
                         nargs + 1, err);
}

int nrt_cu_conv2d_dw(nrt_cuda_net *net, int k, int reduce, const nrt_cu_dw *t, int n,
                     const float *x, const float *dy, float *dw, nrt_error *err)
{
    const int total = t->rows * t->cols;
    if (n < 0)
        return nrt_errorf(err, "%s: negative batch size", t->what);
    if (!fits_int((long long)n * t->in) || !fits_int((long long)n * t->out))
        return too_big(net, k, err);
    if (n == 0)
        return NRT_CUDA(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)total, net->stream), err);
    /* The number of splits depends on n and the geometry only. */
    const int P = n * t->positions;
    const int tiles = cdiv(t->cols, t->bn) * cdiv(t->rows, t->bm);
    int splits = cdiv(NRT_DW_BLOCKS, tiles);
    if (splits > t->max_splits)
        splits = t->max_splits;
    if (splits > P / NRT_DW_MIN_CHUNK)
        splits = P / NRT_DW_MIN_CHUNK;
    if (splits < 1)
        splits = 1;
    int chunk = cdiv(cdiv(P, splits), t->bk) * t->bk;
    splits = cdiv(P, chunk);
    float *partial = (float *)net->workspace;
    if (splits > 1 && (!partial || net->workspace_bytes < sizeof(float) * (size_t)splits * total))
        return nrt_errorf(err, "%s: the net's workspace is smaller than the split-K partial "
                          "sums need", t->what);
    void *args[] = {&n, &chunk, &x, &dy, &dw, &partial, &net->lowp};
    if (nrt_cu_launch(net, k, (unsigned)cdiv(t->cols, t->bn), (unsigned)cdiv(t->rows, t->bm),
                      (unsigned)splits, (unsigned)t->threads, args, 7, err))
        return -1;
    if (splits == 1)
        return 0;
    void *rargs[] = {&splits, &partial, &dw};
    return nrt_cu_launch(net, reduce, grid_for((size_t)total, EACH_THREADS), 1, 1,
                         EACH_THREADS, rargs, 3, err);
}

/* Where src..src + count lies in the weights' cast (wlp), its offset
 * there, else -1: the weights' 16-bit copy (whalf) mirrors wlp, the cast
 * writing both. */
static ptrdiff_t in_weights(const nrt_cuda_net *net, const float *src, size_t count)
{
    if (!net->whalf)
        return -1;
    const size_t np = net->model->param_count;
    if (src < net->wlp || src >= net->wlp + np || count > np - (size_t)(src - net->wlp))
        return -1;
    return src - net->wlp;
}

/* A row-major operand of rows x cols, its rows ld apart, in the run's 16
 * bits: *out the weights' copy where src is in wlp, else buf, written
 * with every element from its first to its last (the gaps between rows
 * too, which the product skips). */
static int to_half(nrt_cuda_net *net, const float *src, int rows, int cols, int ld,
                   uint16_t *buf, const uint16_t **out, nrt_error *err)
{
    const size_t count = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
    const ptrdiff_t w = in_weights(net, src, count);
    *out = w >= 0 ? net->whalf + w : buf;
    if (w >= 0)
        return 0;
    if (count > net->operand16_count)
        return nrt_errorf(err, "internal error: a product's operand of %zu elements, more than "
                          "the %zu of its 16-bit buffer", count, net->operand16_count);
    return nrt_cu_each(net, NRT_K_TO_HALF, count, NRT_ARGS(&src, &buf, &net->lowp), err);
}

/* C^T = op(B)^T op(A)^T: a row-major matrix is the column-major matrix of
 * its transpose.  As on the cpu, k <= 0 or alpha == 0 only scales C (beta
 * == 0 stores zeros).  The handle is bound to net->stream by the backend
 * (setting it here would reset the workspace the runtime gave it).
 *
 * In bf16 and fp16 the operands (rounded already, as autocast casts them)
 * go to 16-bit copies and the product to the tensor cores, as torch's
 * autocast has it: cublasGemmEx, 16-bit inputs, fp32 sums and C.  The
 * weights' copy is made once a forward pass, with their cast. */
int nrt_cu_gemm(nrt_cuda_net *net, int transa, int transb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc, nrt_error *err)
{
    if (m <= 0 || n <= 0)
        return 0;
    if (k <= 0 || alpha == 0.0f) {
        if (beta == 1.0f)
            return 0;
        void *args[] = {&m, &n, &beta, &c, &ldc};
        return nrt_cu_launch(net, NRT_K_GEMM_SCALE, grid_for((size_t)m * (size_t)n, 256), 1, 1,
                             256, args, 5, err);
    }
    const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!net->lowp)
        return NRT_CUBLAS(net->cublas,
                          net->cublas->Sgemm(net->blas, opb, opa, n, m, k, &alpha,
                                             b, ldb, a, lda, &beta, c, ldc),
                          err);
    const cudaDataType t = net->lowp == NRT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const uint16_t *ha, *hb;
    return to_half(net, a, transa ? k : m, transa ? m : k, lda, net->operand16[0], &ha, err) ||
                   to_half(net, b, transb ? n : k, transb ? k : n, ldb, net->operand16[1], &hb, err) ||
                   NRT_CUBLAS(net->cublas,
                              net->cublas->GemmEx(net->blas, opb, opa, n, m, k, &alpha, hb, t,
                                                  ldb, ha, t, lda, &beta, c, CUDA_R_32F, ldc,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                              err)
               ? -1
               : 0;
}

int nrt_cu_col_sums(nrt_cuda_net *net, const float *a, int rows, int cols, float *out,
                    nrt_error *err)
{
    if (cols <= 0)
        return 0;
    if (rows < 0)
        rows = 0;
    void *args[] = {&a, &rows, &cols, &out};
    return nrt_cu_launch(net, NRT_K_COL_SUMS, (unsigned)cdiv(cols, NRT_COLSUM_COLS), 1, 1,
                         NRT_COLSUM_COLS * NRT_COLSUM_LANES, args, 4, err);
}

int nrt_cu_row_sums(nrt_cuda_net *net, const float *a, int rows, size_t cols, float *out,
                    nrt_error *err)
{
    if (rows <= 0)
        return 0;
    int vec = cols % 4 == 0 && ((uintptr_t)a & 15) == 0;
    void *args[] = {&a, &cols, &vec, &out};
    return nrt_cu_launch(net, NRT_K_ROW_SUMS, (unsigned)rows, 1, 1, NRT_ROWSUM_THREADS, args, 4,
                         err);
}

int nrt_cu_round_lowp(nrt_cuda_net *net, float *dst, const float *src, size_t count,
                      nrt_error *err)
{
    const float *none = NULL;
    const ptrdiff_t w = in_weights(net, dst, count);
    uint16_t *bits = w >= 0 ? net->whalf + w : NULL;
    return nrt_cu_each(net, NRT_K_ROUND_LOWP, count,
                       NRT_ARGS(&src, &dst, &net->lowp, &none, &bits), err);
}

int nrt_cu_round_lowp_scaled(nrt_cuda_net *net, float *p, size_t count, nrt_error *err)
{
    uint16_t *none = NULL;
    return nrt_cu_each(net, NRT_K_ROUND_LOWP, count,
                       NRT_ARGS(&p, &p, &net->lowp, &net->loss_scale, &none), err);
}

int nrt_cu_half_keep(nrt_cuda_net *net, uint16_t *h, const float *w, size_t count,
                     nrt_error *err)
{
    return nrt_cu_each(net, NRT_K_TO_HALF, count, NRT_ARGS(&w, &h, &net->half), err);
}

int nrt_cu_half_round_keep(nrt_cuda_net *net, uint16_t *h, float *w, size_t count,
                           nrt_error *err)
{
    const float *none = NULL;
    return nrt_cu_each(net, NRT_K_ROUND_LOWP, count, NRT_ARGS(&w, &w, &net->half, &none, &h),
                       err);
}

int nrt_cu_half_load(nrt_cuda_net *net, float *w, const uint16_t *h, size_t count,
                     nrt_error *err)
{
    return nrt_cu_each(net, NRT_K_HALF_LOAD, count, NRT_ARGS(&h, &w, &net->half), err);
}

int nrt_cu_dropout_fwd(nrt_cuda_net *net, uint32_t layer, const float *x, float *y,
                       float *mask, size_t count, double p, nrt_error *err)
{
    if (net->step == NULL)
        return nrt_errorf(err, "nrt_dropout_fwd: the net has no step counter");
    if (count > NRT_DROPOUT_MAX)
        return too_big(net, NRT_K_DROPOUT_FWD, err);
    if (count == 0)
        return 0;
    uint64_t key = net->dropout_key, cut = nrt_dropout_cut(p);
    float scale = (float)(1.0 / (1.0 - p));
    const unsigned long long *step = net->step;
    void *args[] = {&x, &y, &mask, &count, &key, &layer, &step, &cut, &scale};
    return nrt_cu_launch(net, NRT_K_DROPOUT_FWD, grid_for((count + 255) / 256 * 8, 256), 1, 1,
                         256, args, 9, err);
}

int nrt_cu_xent(nrt_cuda_net *net, int k, const float *logits, const int32_t *label, int n,
                float *d, float *loss, nrt_error *err)
{
    if (n < 0)
        return nrt_errorf(err, "%s: negative batch size", nrt_cuda_kernel_name(net, k));
    void *args[] = {&logits, &label, &n, &d, &loss};
    return nrt_cu_launch(net, k, 1, 1, 1, NRT_LOSS_THREADS, args, 5, err);
}

int nrt_cu_loss(nrt_cuda_net *net, const float *y, const float *t, int n, int dim, float *d,
                float *loss, nrt_error *err)
{
    const nrt_loss_spec *l = &net->model->loss;
    if (!nrt_loss_name(l->kind))
        return nrt_errorf(err, "internal error: unknown loss kind %d", l->kind);
    size_t nd = (size_t)(n > 0 ? n : 0) * (size_t)(dim > 0 ? dim : 0);
    int kind = l->kind;
    float arg = l->arg;
    void *args[] = {&kind, &arg, &y, &t, &nd, &d, &loss};
    return nrt_cu_launch(net, NRT_K_LOSS, 1, 1, 1, NRT_LOSS_THREADS, args, 7, err);
}

int nrt_cu_grads_final(nrt_cuda_net *net, size_t from, nrt_error *err)
{
    return net->grads_final ? net->grads_final(net, from, err) : 0;
}
