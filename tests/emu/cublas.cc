/*
 * cublas.cc — the cuBLAS calls netc makes, on the emulated device, built as
 * libcublas.so.13: from cuBLAS's documented column-major semantics, with
 * its argument checks (a leading dimension too small is
 * CUBLAS_STATUS_INVALID_VALUE, as the library says) and one it does not
 * make: every matrix's extent is checked against its allocation.  The
 * product runs on the handle's stream, lazily, like a kernel; each sum
 * adds its k terms in order, in float, with fused multiply-adds.
 */
#include "impl.h"

#include <cublas_v2.h>

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
    default: return "unknown error";
    }
}

} /* extern "C" */

/* A's extent: rows x cols column-major with leading dimension ld. */
static bool fits(const char *what, const float *a, int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0)
        return true;
    size_t left = 0;
    if (kind_of(a, &left) != DEVICE) {
        fail("cublasSgemm: %s (%p) is not device memory", what, (const void *)a);
        return false;
    }
    const size_t need = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * sizeof(float);
    if (need > left) {
        fail("cublasSgemm: %s is %d x %d with leading dimension %d: %zu bytes from %p, but its "
             "allocation has %zu bytes there", what, rows, cols, ld, need, (const void *)a, left);
        return false;
    }
    return true;
}

extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         const float *B, int ldb, const float *beta, float *C,
                                         int ldc)
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
    const float al = *alpha, be = *beta;
    if (!fits("C", C, m, n, ldc) ||
        (k > 0 && al != 0.0f &&
         (!fits("A", A, at ? k : m, at ? m : k, lda) || !fits("B", B, bt ? n : k, bt ? k : n, ldb))))
        return CUBLAS_STATUS_INVALID_VALUE;
    enqueue_op(h->stream, [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float acc = 0.0f;
                if (al != 0.0f)
                    for (int p = 0; p < k; p++) {
                        const float a = at ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                        const float b = bt ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                        acc = fmaf(a, b, acc);
                    }
                float &c = C[i + (size_t)j * ldc];
                c = be == 0.0f ? al * acc : al * acc + be * c;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
