/*
 * cublas.cc — the cuBLAS calls netc makes, on the emulated device, built as
 * libcublas.so.13 (cublasSgemm, and cublasGemmEx with 16-bit inputs):
 * from cuBLAS's documented column-major semantics, with
 * its argument checks (a leading dimension too small is
 * CUBLAS_STATUS_INVALID_VALUE, as the library says) and one it does not
 * make: every matrix's extent is checked against its allocation.  The
 * product runs on the handle's stream, lazily, like a kernel; each sum
 * adds its k terms in order, in float, with fused multiply-adds.
 */
#include "impl.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdlib.h>

using namespace emu;

struct cublasContext {
    cudaStream_t stream = nullptr;
};

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *w, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && kind_of(w, NULL) != DEVICE) {
        fail("cublasSetWorkspace: %p is not device memory", w);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    (void)m;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t m)
{
    (void)m;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

} /* extern "C" */

/* A's extent: rows x cols column-major with leading dimension ld, of
 * elements size bytes each. */
static bool fits(const char *call, const char *what, const void *a, int rows, int cols, int ld,
                 size_t size)
{
    if (rows == 0 || cols == 0)
        return true;
    size_t left = 0;
    if (kind_of(a, &left) != DEVICE) {
        fail("%s: %s (%p) is not device memory", call, what, a);
        return false;
    }
    const size_t need = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * size;
    if (need > left) {
        fail("%s: %s is %d x %d with leading dimension %d: %zu bytes from %p, but its "
             "allocation has %zu bytes there", call, what, rows, cols, ld, need, a, left);
        return false;
    }
    return true;
}

/* An element of A or B as the product reads it: a float, or the bf16 or
 * fp16 bits of one (exact in float; cuda_bf16.h's and cuda_fp16.h's host
 * conversions). */
static float element(const void *p, size_t i, cudaDataType t)
{
    switch (t) {
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static size_t element_size(cudaDataType t)
{
    return t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 4;
}

/* C = alpha op(A) op(B) + beta C, column-major, C float: the argument
 * checks of cuBLAS's documentation and the extents', then the product on
 * the handle's stream, each sum its k terms in order with fused
 * multiply-adds in float (whatever A's and B's type: a tensor core's
 * products of 16-bit values are exact, its sums fp32). */
static cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k, float al, const void *A,
                           cudaDataType at_, int lda, const void *B, cudaDataType bt_, int ldb,
                           float be, float *C, int ldc)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool at = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 ||
        k < 0 || lda < (at ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) ||
        ldb < (bt ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!fits(call, "C", C, m, n, ldc, sizeof(float)) ||
        (k > 0 && al != 0.0f &&
         (!fits(call, "A", A, at ? k : m, at ? m : k, lda, element_size(at_)) ||
          !fits(call, "B", B, bt ? n : k, bt ? k : n, ldb, element_size(bt_)))))
        return CUBLAS_STATUS_INVALID_VALUE;
    enqueue_op(h->stream, [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float acc = 0.0f;
                if (al != 0.0f)
                    for (int p = 0; p < k; p++) {
                        const float a = element(A, at ? p + (size_t)i * lda : i + (size_t)p * lda, at_);
                        const float b = element(B, bt ? j + (size_t)p * ldb : p + (size_t)j * ldb, bt_);
                        acc = fmaf(a, b, acc);
                    }
                float &c = C[i + (size_t)j * ldc];
                c = be == 0.0f ? al * acc : al * acc + be * c;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         const float *B, int ldb, const float *beta, float *C,
                                         int ldc)
{
    return gemm("cublasSgemm", h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                ldb, *beta, C, ldc);
}

/* cublasGemmEx as netc calls it: A and B both float, bf16 or fp16, C
 * float, fp32 compute (alpha and beta floats, on the host); any other
 * combination is CUBLAS_STATUS_NOT_SUPPORTED, as cuBLAS says of the
 * combinations its table leaves out. */
extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                       cublasOperation_t tb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType at,
                                       int lda, const void *B, cudaDataType bt, int ldb,
                                       const void *beta, void *C, cudaDataType ct, int ldc,
                                       cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ab = at == bt && (at == CUDA_R_32F || at == CUDA_R_16BF || at == CUDA_R_16F);
    if (!ab || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) {
        fail("cublasGemmEx: A, B, C of types %d, %d, %d and compute type %d: not emulated",
             (int)at, (int)bt, (int)ct, (int)compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return gemm("cublasGemmEx", h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt,
                ldb, *(const float *)beta, (float *)C, ldc);
}
