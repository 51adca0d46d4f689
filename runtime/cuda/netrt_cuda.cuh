/*
 * netrt_cuda.cuh — the device kernels of the netc runtime, as templates that
 * a generated .cu file includes and instantiates with its model's shapes:
 * every kernel is specialised at compile time, only the batch size n (and,
 * for the generic ones, the sizes given as arguments) varies at run time.
 *
 * Every launcher takes the run's nrt_cuda_net, enqueues on net->stream,
 * returns 0, or -1 with a message in err, and never synchronises.  The
 * semantics are exactly those of the cpu kernels of netrt.h (kernels.c):
 *
 *   gemm             nrt_sgemm (row-major), through cuBLAS
 *   conv2d_fwd/dw/dx nrt_conv2d_fwd/dw/dx (and for any stride, the
 *                    adjoint of im2col), read from the unpadded input in
 *                    either layout: implicit GEMMs, no column buffer
 *   maxpool2d_*      nrt_maxpool2d_* (bit for bit: the same comparisons,
 *   avgpool2d_*      nrt_avgpool2d_*  the same sums in the same order)
 *   dropout_*        nrt_dropout_fwd, bit for bit: the masks are Philox
 *                    words of counters (philox.h), the cpu's and the GPU's
 *   xent, mse        nrt_xent, nrt_mse (the loss into device memory)
 *   col_sums,        nrt_col_sums, nrt_row_sums
 *   row_sums
 *   cn_to_nc,        the transposes between [C, n, HW] and [n, C*HW]
 *   nc_to_cn
 *
 * Determinism: every sum is taken in an order fixed by the shapes alone
 * (never by timing), with no floating-point atomics, so one input gives
 * one result bit for bit on one GPU model.
 *
 * One launcher, conv2d_dw, keeps partial sums in the net's workspace
 * (net->workspace, at most 8 MiB; conv2d_dw_workspace gives the bytes a
 * geometry needs, and the generated file's WORKSPACE the largest need of
 * its layers, which the backend allocates).
 *
 * Everything here has internal linkage (an unnamed namespace): each .cu
 * that includes this file gets its own copy of what it instantiates.
 */
#ifndef NETRT_CUDA_CUH
#define NETRT_CUDA_CUH

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "netrt_cuda.h"

namespace nrt_cu {
namespace {

/* ============================================================== helpers */

/* Grid-stride kernels need no more blocks than a few waves of the largest
 * GPU; beyond that, more blocks only cost scheduling. */
constexpr int MAX_GRID = 8192;

/* Blocks for count elements at threads per block, at least 1 (a kernel
 * launched on nothing is harmless) and at most MAX_GRID. */
inline int grid_for(size_t count, int threads)
{
    if (threads <= 0)
        threads = 256;
    size_t b = count / (size_t)threads + (count % (size_t)threads != 0);
    if (b < 1)
        b = 1;
    if (b > (size_t)MAX_GRID)
        b = MAX_GRID;
    return (int)b;
}

template <class F> __global__ void each_kernel(size_t count, F f)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        f(i);
}

/* f(i) for i in [0, count), on the net's stream: the elementwise passes of
 * generated code (epilogues, activations) are device lambdas run by this. */
template <class F>
inline int for_each(nrt_cuda_net *net, size_t count, F f, nrt_error *err)
{
    if (count == 0)
        return 0;
    each_kernel<<<grid_for(count, 256), 256, 0, net->stream>>>(count, f);
    return NRT_LAUNCHED("nrt_cu::for_each", err);
}

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

__host__ __device__ constexpr int pow2_at_least(int v) { return v <= 1 ? 1 : 2 * pow2_at_least((v + 1) / 2); }

/* Index arithmetic in the kernels is 32-bit; the launchers check that
 * every tensor they touch has fewer than 2^31 elements. */
inline bool fits_int(long long v) { return v >= 0 && v <= (long long)INT_MAX; }

inline int too_big(const char *what, nrt_error *err)
{
    return nrt_errorf(err, "nrt_cu::%s: a tensor of 2^31 elements or more", what);
}

inline int bad_arg(const char *what, const char *why, nrt_error *err)
{
    return nrt_errorf(err, "nrt_cu::%s: %s", what, why);
}

/* ================================================================ gemm */

__global__ void gemm_scale_kernel(int m, int n, float beta, float *__restrict__ c, int ldc)
{
    const long long total = (long long)m * n;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        float *p = c + (size_t)(e / n) * (size_t)ldc + (size_t)(e % n);
        *p = beta == 0.0f ? 0.0f : *p * beta;
    }
}

/* C[m, n] = alpha op(A) op(B) + beta C, all row-major with row strides
 * lda, ldb, ldc: nrt_sgemm.  A row-major matrix is the column-major matrix
 * of its transpose, so cuBLAS computes C^T = op(B)^T op(A)^T.  As on the
 * cpu, k <= 0 or alpha == 0 only scales C (beta == 0 stores zeros).  The
 * handle must already be bound to net->stream (setting it here would reset
 * the workspace the runtime gave it). */
inline int gemm(nrt_cuda_net *net, int transa, int transb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc, nrt_error *err)
{
    if (m <= 0 || n <= 0)
        return 0;
    if (k <= 0 || alpha == 0.0f) {
        if (beta == 1.0f)
            return 0;
        gemm_scale_kernel<<<grid_for((size_t)m * n, 256), 256, 0, net->stream>>>(m, n, beta,
                                                                                c, ldc);
        return NRT_LAUNCHED("nrt_cu::gemm", err);
    }
    cudaStream_t bound = NULL;
    if (NRT_CUBLAS(cublasGetStream(net->blas, &bound), err))
        return -1;
    if (bound != net->stream)
        return bad_arg("gemm", "the cuBLAS handle is not bound to the net's stream", err);
    cublasPointerMode_t mode;
    if (NRT_CUBLAS(cublasGetPointerMode(net->blas, &mode), err))
        return -1;
    if (mode != CUBLAS_POINTER_MODE_HOST &&
        NRT_CUBLAS(cublasSetPointerMode(net->blas, CUBLAS_POINTER_MODE_HOST), err))
        return -1;
    if (NRT_CUBLAS(cublasSgemm(net->blas, transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               transa ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                               a, lda, &beta, c, ldc),
                   err))
        return -1;
    return NRT_LAUNCHED("nrt_cu::gemm", err);
}

/* ====================================================== implicit GEMM */

/* A 2-D convolution's geometry (nrt_conv's), at compile time. */
template <int C_, int H_, int W_, int O_, int OH_, int OW_, int KH_, int KW_, int SH_,
          int SW_, int PH_, int PW_>
struct ConvGeom {
    static constexpr int C = C_, H = H_, W = W_, O = O_, OH = OH_, OW = OW_;
    static constexpr int KH = KH_, KW = KW_, SH = SH_, SW = SW_, PH = PH_, PW = PW_;
    static constexpr int KK = KH * KW, CKK = C * KK, HW = H * W, OHW = OH * OW;
    static_assert(C > 0 && H > 0 && W > 0 && O > 0 && OH > 0 && OW > 0,
                  "conv2d: sizes must be positive");
    static_assert(KH > 0 && KW > 0 && SH > 0 && SW > 0 && PH >= 0 && PW >= 0,
                  "conv2d: kernel, stride and padding");
    static_assert((long long)O * CKK < INT_MAX && (long long)C * HW < INT_MAX,
                  "conv2d: a sample or the weight has 2^31 elements or more");
    static_assert(KH < 32768 && KW < 32768, "conv2d: kernel offsets packed in 16 bits");
};

/* The tiling of a product D[M, N] = A[M, K] B[K, N] by a block: a BM x BN
 * tile of D, K in slices of BK; each of the (BM/TM) x (BN/TN) threads owns
 * TM x TN values of the tile, as groups of four consecutive rows and
 * columns (rows ty*4 + g*(BM/(TM/4)) + 0..3 for g < TM/4, columns likewise)
 * so that its reads of the slices in shared memory are float4s, and the
 * four columns of a group are contiguous in D.
 *
 * The slices are read from global memory into registers one slice ahead,
 * then stored to a double-buffered shared tile: As[k][m] and Bs[k][n].
 * A is always read k fastest (thread t: k = t % BK, m = t/BK + i NT/BK);
 * B either n fastest (consecutive threads, consecutive columns: the
 * convolution's output positions) or k fastest (B_KFAST).  The k-fastest
 * tiles are padded by four floats a row against bank conflicts. */
template <int BM_, int BN_, int BK_, int TM_, int TN_, bool B_KFAST_>
struct Tiling {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static constexpr bool B_KFAST = B_KFAST_;
    static constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
    static constexpr int AS = BM + 4;
    static constexpr int BS = BN + (B_KFAST ? 4 : 0);
    static constexpr int A_PER = BM * BK / NT; /* A values a thread loads a slice */
    static constexpr int B_PER = BK * BN / NT;
    static constexpr int B_COLS = BN > NT ? BN / NT : 1; /* n-fast B: columns a thread */
    static constexpr int B_KSTEP = NT > BN ? NT / BN : 1;

    static_assert(TM == 4 || TM == 8, "TM");
    static_assert(TN == 4 || TN == 8, "TN");
    static_assert(BM % TM == 0 && BN % TN == 0, "tile");
    static_assert(NT % BK == 0 && (BM * BK) % NT == 0 && (BK * BN) % NT == 0, "loads");
    static_assert(B_KFAST || BN % NT == 0 || NT % BN == 0, "n-fast loads");
    static_assert(!B_KFAST || (BN * BK) % NT == 0, "k-fast loads");
    static_assert(2 * BK * (AS + BS) * 4 <= 48 * 1024, "static shared memory");

    /* element i of a thread's A load: (m, k) */
    static __device__ __forceinline__ int a_m(int t, int i) { return t / BK + i * (NT / BK); }
    static __device__ __forceinline__ int a_k(int t) { return t % BK; }
    /* element i of a thread's n-fast B load: (k, n) */
    static __device__ __forceinline__ int bn_n(int t, int i) { return t % BN + (i % B_COLS) * NT; }
    static __device__ __forceinline__ int bn_k(int t, int i) { return t / BN + (i / B_COLS) * B_KSTEP; }
    /* element i of a thread's k-fast B load: (k, n) */
    static __device__ __forceinline__ int bk_n(int t, int i) { return t / BK + i * (NT / BK); }
    static __device__ __forceinline__ int bk_k(int t) { return t % BK; }
    /* the tile row of a thread's accumulator row i, and column j */
    static __device__ __forceinline__ int row(int ty, int i)
    {
        return (i / 4) * (TY * 4) + ty * 4 + i % 4;
    }
    static __device__ __forceinline__ int col(int tx, int j)
    {
        return (j / 4) * (TX * 4) + tx * 4 + j % 4;
    }
};

/* Tilings of the convolutions by the product's M (the output's channels;
 * the input's for dx): 16, 32 or 64 rows a tile, 128 threads. */
template <int M>
using ConvTiling = typename std::conditional<
    (M <= 16), Tiling<16, 256, 16, 4, 8, false>,
    typename std::conditional<(M <= 32), Tiling<32, 128, 16, 4, 8, false>,
                              Tiling<64, 128, 16, 8, 8, false>>::type>::type;
/* dw: N = C*KH*KW is small, K = n*OH*OW long (split among blocks). */
template <int M>
using DwTiling = typename std::conditional<
    (M <= 16), Tiling<16, 64, 32, 4, 4, true>,
    typename std::conditional<(M <= 32), Tiling<32, 64, 32, 4, 4, true>,
                              Tiling<64, 64, 32, 8, 4, true>>::type>::type;

/* The block's accumulators over k in [kbeg, kend): acc[i][j] is the sum,
 * k ascending, of A[m][k] B[k][n] (fmaf), for the thread's (m, n) =
 * (row(ty, i), col(tx, j)) of the tile.  The loaders la and lb fill a
 * thread's registers with its elements of the slice at k0 (0 outside the
 * matrices and for k >= kend).  kbeg, kend are the same for the block. */
template <class T, class LA, class LB>
__device__ __forceinline__ void igemm(float (&acc)[T::TM][T::TN], int kbeg, int kend,
                                      const LA &la, const LB &lb)
{
    __shared__ __align__(16) float As[2][T::BK][T::AS];
    __shared__ __align__(16) float Bs[2][T::BK][T::BS];
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    float ra[T::A_PER], rb[T::B_PER];

#pragma unroll
    for (int i = 0; i < T::TM; i++)
#pragma unroll
        for (int j = 0; j < T::TN; j++)
            acc[i][j] = 0.0f;
    if (kbeg >= kend)
        return;

    la.load(kbeg, kend, ra);
    lb.load(kbeg, kend, rb);
    int buf = 0;
    for (int k0 = kbeg;; k0 += T::BK) {
        /* the slice in registers to the shared buffer buf */
#pragma unroll
        for (int i = 0; i < T::A_PER; i++)
            As[buf][T::a_k(t)][T::a_m(t, i)] = ra[i];
#pragma unroll
        for (int i = 0; i < T::B_PER; i++) {
            if (T::B_KFAST)
                Bs[buf][T::bk_k(t)][T::bk_n(t, i)] = rb[i];
            else
                Bs[buf][T::bn_k(t, i)][T::bn_n(t, i)] = rb[i];
        }
        /* the stores of this slice before anyone reads it; and everyone
         * done with the other buffer (read in the last iteration) before
         * the next stores to it */
        __syncthreads();
        const bool more = k0 + T::BK < kend;
        if (more) {
            la.load(k0 + T::BK, kend, ra);
            lb.load(k0 + T::BK, kend, rb);
        }
#pragma unroll
        for (int kk = 0; kk < T::BK; kk++) {
            float a[T::TM], b[T::TN];
#pragma unroll
            for (int g = 0; g < T::TM / 4; g++) {
                const float4 v = *reinterpret_cast<const float4 *>(
                    &As[buf][kk][g * (T::TY * 4) + ty * 4]);
                a[4 * g] = v.x, a[4 * g + 1] = v.y, a[4 * g + 2] = v.z, a[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < T::TN / 4; g++) {
                const float4 v = *reinterpret_cast<const float4 *>(
                    &Bs[buf][kk][g * (T::TX * 4) + tx * 4]);
                b[4 * g] = v.x, b[4 * g + 1] = v.y, b[4 * g + 2] = v.z, b[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < T::TM; i++)
#pragma unroll
                for (int j = 0; j < T::TN; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (!more)
            break;
        buf ^= 1;
        /* With two buffers one barrier an iteration suffices: the next
         * stores go to the buffer last read before the barrier above. */
    }
}

/* ------------------------------------------------------ conv2d forward */

/* A = w [O, CKK], read k fastest. */
template <class G, class T>
struct FwdA {
    const float *w;
    int m0, t;
    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::A_PER]) const
    {
        const int k = k0 + T::a_k(t);
#pragma unroll
        for (int i = 0; i < T::A_PER; i++) {
            const int m = m0 + T::a_m(t, i);
            r[i] = (m < G::O && k < kend) ? w[m * G::CKK + k] : 0.0f;
        }
    }
};

/* B = cols(x) [CKK, n*OH*OW]: column p is sample p / OHW at output
 * position p % OHW; row k is channel k / KK at kernel offset k % KK.
 * x is [n, C, H, W] or (CN) [C, n, H, W]; padding reads as 0.  A thread's
 * columns are fixed: their sample and window origin are worked out once. */
template <class G, class T, bool CN>
struct FwdB {
    const float *x;
    int cstride, t;
    int base[T::B_COLS], ih0[T::B_COLS], iw0[T::B_COLS];

    __device__ __forceinline__ FwdB(const float *x_, int n, int n0, int t_) : x(x_), t(t_)
    {
        cstride = CN ? n * G::HW : G::HW;
        const int P = n * G::OHW;
#pragma unroll
        for (int j = 0; j < T::B_COLS; j++) {
            const int p = n0 + T::bn_n(t, j);
            if (p < P) {
                const int s = p / G::OHW, r = p % G::OHW;
                const int oh = r / G::OW, ow = r % G::OW;
                ih0[j] = oh * G::SH - G::PH;
                iw0[j] = ow * G::SW - G::PW;
                base[j] = (CN ? s * G::HW : s * G::C * G::HW) + ih0[j] * G::W + iw0[j];
            } else { /* past the end: no kernel offset lands inside */
                ih0[j] = INT_MIN / 2;
                iw0[j] = INT_MIN / 2;
                base[j] = 0;
            }
        }
    }

    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::B_PER]) const
    {
#pragma unroll
        for (int i = 0; i < T::B_PER; i++) {
            const int j = i % T::B_COLS;
            const int k = k0 + T::bn_k(t, i);
            const int c = k / G::KK, q = k % G::KK;
            const int kh = q / G::KW, kw = q % G::KW;
            const bool ok = k < kend && (unsigned)(ih0[j] + kh) < (unsigned)G::H &&
                            (unsigned)(iw0[j] + kw) < (unsigned)G::W;
            r[i] = ok ? x[base[j] + c * cstride + kh * G::W + kw] : 0.0f;
        }
    }
};

template <class G, class T, bool CN>
__global__ void __launch_bounds__(T::NT)
    conv2d_fwd_kernel(int n, const float *__restrict__ x, const float *__restrict__ w,
                      float *__restrict__ y)
{
    const int P = n * G::OHW;
    const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const FwdA<G, T> la = {w, m0, t};
    const FwdB<G, T, CN> lb(x, n, n0, t);
    float acc[T::TM][T::TN];
    igemm<T>(acc, 0, G::CKK, la, lb);

    const bool vec = (P & 3) == 0 && ((uintptr_t)y & 15) == 0;
#pragma unroll
    for (int i = 0; i < T::TM; i++) {
        const int m = m0 + T::row(ty, i);
        if (m >= G::O)
            continue;
        float *yr = y + (size_t)m * P;
#pragma unroll
        for (int g = 0; g < T::TN / 4; g++) {
            const int p = n0 + T::col(tx, 4 * g);
            if (vec && p + 3 < P) {
                *reinterpret_cast<float4 *>(yr + p) =
                    make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2],
                                acc[i][4 * g + 3]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; q++)
                    if (p + q < P)
                        yr[p + q] = acc[i][4 * g + q];
            }
        }
    }
}

/* y [O, n*OH*OW] = w [O, C*KH*KW] cols(x): nrt_conv2d_fwd, without the
 * padded copy (x is [n, C, H, W], or [C, n, H, W] if CN_IN).  No bias. */
template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN_IN>
inline int conv2d_fwd(nrt_cuda_net *net, int n, const float *x, const float *w, float *y,
                      nrt_error *err)
{
    using G = ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW>;
    using T = ConvTiling<O>;
    if (n < 0)
        return bad_arg("conv2d_fwd", "negative batch size", err);
    if (!fits_int((long long)n * C * H * W) || !fits_int((long long)O * n * OH * OW))
        return too_big("conv2d_fwd", err);
    if (n == 0)
        return 0;
    const int P = n * G::OHW;
    const dim3 grid(cdiv(P, T::BN), cdiv(O, T::BM));
    conv2d_fwd_kernel<G, T, CN_IN><<<grid, T::NT, 0, net->stream>>>(n, x, w, y);
    return NRT_LAUNCHED("nrt_cu::conv2d_fwd", err);
}

/* ----------------------------------------------- conv2d weight gradient */

/* Splits of the long K of dw: as many as give about DW_BLOCKS blocks,
 * each at least DW_MIN_CHUNK products long, and at most what fits in
 * DW_PARTIAL_MAX floats of partial sums (and 256). */
constexpr int DW_BLOCKS = 1024;
constexpr int DW_MIN_CHUNK = 256;
constexpr int DW_PARTIAL_MAX = 1 << 21;

template <int TOTAL>
struct DwSplits {
    static constexpr int MAX_RAW = DW_PARTIAL_MAX / TOTAL;
    static constexpr int MAX = MAX_RAW > 256 ? 256 : MAX_RAW < 1 ? 1 : MAX_RAW;
    static constexpr int SIZE = MAX > 1 ? MAX * TOTAL : 0; /* floats of partial sums */
};

/* A = dy [O, n*OH*OW] (k = output position), k fastest. */
template <class G, class T>
struct DwA {
    const float *dy;
    int P, m0, t;
    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::A_PER]) const
    {
        const int p = k0 + T::a_k(t);
#pragma unroll
        for (int i = 0; i < T::A_PER; i++) {
            const int m = m0 + T::a_m(t, i);
            r[i] = (m < G::O && p < kend) ? dy[m * P + p] : 0.0f;
        }
    }
};

/* B = cols(x)^T [n*OH*OW, CKK], k (the output position) fastest: a
 * thread's position changes each slice, its kernel rows do not.  The
 * block's BN kernel rows are decoded once into shared memory: koff, the
 * row's offset in x from its window origin, and kpos, (kh << 16) | kw, or
 * -1 past the last row. */
template <class G, class T, bool CN>
struct DwB {
    const float *x;
    const int *koff, *kpos;
    int t;
    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::B_PER]) const
    {
        const int p = k0 + T::bk_k(t);
        const bool pv = p < kend;
        const int s = p / G::OHW, rr = p % G::OHW;
        const int ih0 = (rr / G::OW) * G::SH - G::PH, iw0 = (rr % G::OW) * G::SW - G::PW;
        const int sbase = (CN ? s * G::HW : s * G::C * G::HW) + ih0 * G::W + iw0;
#pragma unroll
        for (int i = 0; i < T::B_PER; i++) {
            const int j = T::bk_n(t, i);
            const int kp = kpos[j];
            const bool ok = pv && kp >= 0 && (unsigned)(ih0 + (kp >> 16)) < (unsigned)G::H &&
                            (unsigned)(iw0 + (kp & 0xffff)) < (unsigned)G::W;
            r[i] = ok ? x[sbase + koff[j]] : 0.0f;
        }
    }
};

template <class G, class T, bool CN>
__global__ void __launch_bounds__(T::NT)
    conv2d_dw_kernel(int n, int chunk, const float *__restrict__ x,
                     const float *__restrict__ dy, float *__restrict__ dw,
                     float *__restrict__ partial)
{
    __shared__ int koff[T::BN], kpos[T::BN];
    const int P = n * G::OHW;
    const int split = blockIdx.z;
    const int kbeg = split * chunk;
    const int kend = P - kbeg < chunk ? P : kbeg + chunk;
    const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const int cstride = CN ? n * G::HW : G::HW;
    for (int j = t; j < T::BN; j += T::NT) {
        const int kk = n0 + j;
        const int c = kk / G::KK, q = kk % G::KK;
        const int kh = q / G::KW, kw = q % G::KW;
        koff[j] = kk < G::CKK ? c * cstride + kh * G::W + kw : 0;
        kpos[j] = kk < G::CKK ? (kh << 16) | kw : -1;
    }
    __syncthreads();
    const DwA<G, T> la = {dy, P, m0, t};
    const DwB<G, T, CN> lb = {x, koff, kpos, t};
    float acc[T::TM][T::TN];
    igemm<T>(acc, kbeg, kend, la, lb);

    float *out = gridDim.z == 1 ? dw : partial + (size_t)split * (G::O * G::CKK);
#pragma unroll
    for (int i = 0; i < T::TM; i++) {
        const int m = m0 + T::row(ty, i);
        if (m >= G::O)
            continue;
#pragma unroll
        for (int j = 0; j < T::TN; j++) {
            const int kk = n0 + T::col(tx, j);
            if (kk < G::CKK)
                out[m * G::CKK + kk] = acc[i][j];
        }
    }
}

/* dw[i] = the partials of the splits summed in split order. */
template <int TOTAL>
__global__ void conv2d_dw_reduce_kernel(int splits, const float *__restrict__ partial,
                                        float *__restrict__ dw)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < TOTAL; i += gridDim.x * blockDim.x) {
        float s = partial[i];
        for (int q = 1; q < splits; q++)
            s += partial[(size_t)q * TOTAL + i];
        dw[i] = s;
    }
}

/* The bytes of workspace conv2d_dw needs for a geometry. */
template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN_IN>
constexpr size_t conv2d_dw_workspace()
{
    return sizeof(float) * (size_t)DwSplits<O * C * KH * KW>::SIZE;
}

/* dw [O, C*KH*KW] = dy [O, n*OH*OW] cols(x)^T, overwritten:
 * nrt_conv2d_dw.  The sum over the n*OH*OW positions is split in chunks
 * (their number depends on n and the geometry only), each summed in
 * order by one block, then the chunks' sums added in order. */
template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN_IN>
inline int conv2d_dw(nrt_cuda_net *net, int n, const float *x, const float *dy, float *dw,
                     nrt_error *err)
{
    using G = ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW>;
    using T = DwTiling<O>;
    constexpr int TOTAL = O * G::CKK;
    using S = DwSplits<TOTAL>;
    if (n < 0)
        return bad_arg("conv2d_dw", "negative batch size", err);
    if (!fits_int((long long)n * C * H * W) || !fits_int((long long)O * n * OH * OW))
        return too_big("conv2d_dw", err);
    if (n == 0) {
        if (NRT_CUDA(cudaMemsetAsync(dw, 0, sizeof(float) * TOTAL, net->stream), err))
            return -1;
        return NRT_LAUNCHED("nrt_cu::conv2d_dw", err);
    }
    const int P = n * G::OHW;
    const int tiles = cdiv(G::CKK, T::BN) * cdiv(O, T::BM);
    int splits = cdiv(DW_BLOCKS, tiles);
    if (splits > S::MAX)
        splits = S::MAX;
    if (splits > P / DW_MIN_CHUNK)
        splits = P / DW_MIN_CHUNK;
    if (splits < 1)
        splits = 1;
    const int chunk = cdiv(cdiv(P, splits), T::BK) * T::BK;
    splits = cdiv(P, chunk);
    float *partial = static_cast<float *>(net->workspace);
    if (splits > 1 && (!partial || net->workspace_bytes < sizeof(float) * (size_t)S::SIZE))
        return bad_arg("conv2d_dw", "the net's workspace is smaller than the split-K partial "
                       "sums need (conv2d_dw_workspace)", err);
    const dim3 grid(cdiv(G::CKK, T::BN), cdiv(O, T::BM), splits);
    conv2d_dw_kernel<G, T, CN_IN><<<grid, T::NT, 0, net->stream>>>(n, chunk, x, dy, dw, partial);
    if (splits > 1)
        conv2d_dw_reduce_kernel<TOTAL>
            <<<grid_for(TOTAL, 256), 256, 0, net->stream>>>(splits, partial, dw);
    return NRT_LAUNCHED("nrt_cu::conv2d_dw", err);
}

/* ------------------------------------------------ conv2d input gradient */

/* The product dx = w^T dy read as D [C, n*H*W] = A [C, O*KK] B [O*KK, n*H*W]:
 * A[c][(o, kh, kw)] = w[o, c, kh, kw]; B[(o, kh, kw)][(s, ih, iw)] =
 * dy[o, s, oh, ow] where ih = oh*SH - PH + kh, iw = ow*SW - PW + kw, if
 * such an output position exists, else 0.  A gather: each value of dx is
 * one thread's sum, over (o, kh, kw) ascending. */
template <class G, class T>
struct DxA {
    const float *w;
    int m0, t;
    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::A_PER]) const
    {
        const int k = k0 + T::a_k(t);
        const int o = k / G::KK, q = k % G::KK;
#pragma unroll
        for (int i = 0; i < T::A_PER; i++) {
            const int c = m0 + T::a_m(t, i);
            r[i] = (c < G::C && k < kend) ? w[(o * G::C + c) * G::KK + q] : 0.0f;
        }
    }
};

template <class G, class T>
struct DxB {
    const float *dy;
    int P, t;
    int base[T::B_COLS], th0[T::B_COLS], tw0[T::B_COLS];

    __device__ __forceinline__ DxB(const float *dy_, int n, int n0, int t_) : dy(dy_), t(t_)
    {
        P = n * G::OHW;
        const int NP = n * G::HW;
#pragma unroll
        for (int j = 0; j < T::B_COLS; j++) {
            const int p = n0 + T::bn_n(t, j);
            if (p < NP) {
                const int s = p / G::HW, r = p % G::HW;
                th0[j] = r / G::W + G::PH; /* oh*SH + kh */
                tw0[j] = r % G::W + G::PW;
                base[j] = s * G::OHW;
            } else { /* past the end: no output position */
                th0[j] = INT_MIN / 2;
                tw0[j] = INT_MIN / 2;
                base[j] = 0;
            }
        }
    }

    __device__ __forceinline__ void load(int k0, int kend, float (&r)[T::B_PER]) const
    {
#pragma unroll
        for (int i = 0; i < T::B_PER; i++) {
            const int j = i % T::B_COLS;
            const int k = k0 + T::bn_k(t, i);
            const int o = k / G::KK, q = k % G::KK;
            const int th = th0[j] - q / G::KW, tw = tw0[j] - q % G::KW;
            bool ok = k < kend;
            int oh, ow;
            if (G::SH == 1) {
                oh = th;
                ok = ok && (unsigned)oh < (unsigned)G::OH;
            } else {
                oh = th / G::SH;
                ok = ok && th >= 0 && th % G::SH == 0 && oh < G::OH;
            }
            if (G::SW == 1) {
                ow = tw;
                ok = ok && (unsigned)ow < (unsigned)G::OW;
            } else {
                ow = tw / G::SW;
                ok = ok && tw >= 0 && tw % G::SW == 0 && ow < G::OW;
            }
            r[i] = ok ? dy[o * P + base[j] + oh * G::OW + ow] : 0.0f;
        }
    }
};

template <class G, class T, bool CN_OUT>
__global__ void __launch_bounds__(T::NT)
    conv2d_dx_kernel(int n, const float *__restrict__ w, const float *__restrict__ dy,
                     float *__restrict__ dx)
{
    const int NP = n * G::HW;
    const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const DxA<G, T> la = {w, m0, t};
    const DxB<G, T> lb(dy, n, n0, t);
    float acc[T::TM][T::TN];
    igemm<T>(acc, 0, G::O * G::KK, la, lb);

    /* Four consecutive positions from a multiple of 4 lie in one plane if
     * the planes' length is a multiple of 4. */
    const bool vec = (CN_OUT ? (NP & 3) == 0 : (G::HW & 3) == 0) && ((uintptr_t)dx & 15) == 0;
#pragma unroll
    for (int i = 0; i < T::TM; i++) {
        const int c = m0 + T::row(ty, i);
        if (c >= G::C)
            continue;
#pragma unroll
        for (int g = 0; g < T::TN / 4; g++) {
            const int p = n0 + T::col(tx, 4 * g);
            if (p >= NP)
                continue;
            float *d = CN_OUT ? dx + (size_t)c * NP + p
                              : dx + ((size_t)(p / G::HW) * G::C + c) * G::HW + p % G::HW;
            if (vec && p + 3 < NP) {
                *reinterpret_cast<float4 *>(d) = make_float4(
                    acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int pq = p + q;
                    if (pq >= NP)
                        break;
                    if (CN_OUT)
                        dx[(size_t)c * NP + pq] = acc[i][4 * g + q];
                    else
                        dx[((size_t)(pq / G::HW) * G::C + c) * G::HW + pq % G::HW] =
                            acc[i][4 * g + q];
                }
            }
        }
    }
}

/* dx (overwritten; [n, C, H, W], or [C, n, H, W] if CN_OUT) = the adjoint
 * of cols applied to w^T dy: for every input value, the sum over the
 * (o, kh, kw) whose window covers it of w[o, c, kh, kw] dy[o, s, oh, ow].
 * nrt_conv2d_dx for stride 1, nrt_col2im_batch(_cn) of w^T dy for any. */
template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN_OUT>
inline int conv2d_dx(nrt_cuda_net *net, int n, const float *w, const float *dy, float *dx,
                     nrt_error *err)
{
    using G = ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW>;
    using T = ConvTiling<C>;
    if (n < 0)
        return bad_arg("conv2d_dx", "negative batch size", err);
    if (!fits_int((long long)n * C * H * W) || !fits_int((long long)O * n * OH * OW))
        return too_big("conv2d_dx", err);
    if (n == 0)
        return 0;
    const int NP = n * G::HW;
    const dim3 grid(cdiv(NP, T::BN), cdiv(C, T::BM));
    conv2d_dx_kernel<G, T, CN_OUT><<<grid, T::NT, 0, net->stream>>>(n, w, dy, dx);
    return NRT_LAUNCHED("nrt_cu::conv2d_dx", err);
}

/* ============================================================= pooling */

/* The first output row (or column) whose window, k cells from o*S - P,
 * covers input i, and the last; an empty range if none. */
template <int K, int S, int P, int ON>
__device__ __forceinline__ void pool_outputs(int i, int &lo, int &hi)
{
    const int a = i + P - K + 1; /* o*S >= a */
    lo = a <= 0 ? 0 : (a + S - 1) / S;
    hi = (i + P) / S; /* o*S <= i + P */
    if (hi > ON - 1)
        hi = ON - 1;
}

template <int H, int W, int OH, int OW, int K, int S, int P>
__global__ void maxpool2d_fwd_kernel(int total, const float *__restrict__ x,
                                     float *__restrict__ y, int32_t *__restrict__ arg)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int q = e / (OH * OW), o = e % (OH * OW);
        const int oy = o / OW, ox = o % OW;
        int y0 = oy * S - P, x0 = ox * S - P;
        int y1 = y0 + K, x1 = x0 + K;
        y0 = y0 < 0 ? 0 : y0;
        x0 = x0 < 0 ? 0 : x0;
        y1 = y1 > H ? H : y1;
        x1 = x1 > W ? W : x1;
        const float *xp = x + (size_t)q * (H * W);
        /* nrt_maxpool2d_fwd's rule: from -inf, a larger value or a NaN
         * takes over; the index starts at the window's first real cell. */
        float best = -INFINITY;
        int32_t bi = (y0 < y1 && x0 < x1) ? y0 * W + x0 : -1;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++) {
                const float v = xp[iy * W + ix];
                if (v > best || isnan(v)) {
                    best = v;
                    bi = iy * W + ix;
                }
            }
        y[e] = best;
        arg[e] = bi;
    }
}

template <int H, int W, int OH, int OW, int K, int S, int P>
__global__ void maxpool2d_bwd_kernel(int total, const float *__restrict__ dy,
                                     const int32_t *__restrict__ arg, float *__restrict__ dx)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int q = e / (H * W), cell = e % (H * W);
        const int iy = cell / W, ix = cell % W;
        int oy0, oy1, ox0, ox1;
        pool_outputs<K, S, P, OH>(iy, oy0, oy1);
        pool_outputs<K, S, P, OW>(ix, ox0, ox1);
        const float *g = dy + (size_t)q * (OH * OW);
        const int32_t *a = arg + (size_t)q * (OH * OW);
        /* the outputs that chose this cell, in output order: the cpu's
         * scatter adds them in that order too */
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++)
                if (a[oy * OW + ox] == cell)
                    acc += g[oy * OW + ox];
        dx[e] = acc;
    }
}

template <int H, int W, int OH, int OW, int K, int S, int P>
__global__ void avgpool2d_fwd_kernel(int total, const float *__restrict__ x,
                                     float *__restrict__ y)
{
    const float div = (float)(K * K);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int q = e / (OH * OW), o = e % (OH * OW);
        const int oy = o / OW, ox = o % OW;
        int y0 = oy * S - P, x0 = ox * S - P;
        int y1 = y0 + K, x1 = x0 + K;
        y0 = y0 < 0 ? 0 : y0;
        x0 = x0 < 0 ? 0 : x0;
        y1 = y1 > H ? H : y1;
        x1 = x1 > W ? W : x1;
        const float *xp = x + (size_t)q * (H * W);
        float sum = 0.0f;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++)
                sum += xp[iy * W + ix];
        y[e] = sum / div;
    }
}

template <int H, int W, int OH, int OW, int K, int S, int P>
__global__ void avgpool2d_bwd_kernel(int total, const float *__restrict__ dy,
                                     float *__restrict__ dx)
{
    const float div = (float)(K * K);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int q = e / (H * W), cell = e % (H * W);
        const int iy = cell / W, ix = cell % W;
        int oy0, oy1, ox0, ox1;
        pool_outputs<K, S, P, OH>(iy, oy0, oy1);
        pool_outputs<K, S, P, OW>(ix, ox0, ox1);
        const float *g = dy + (size_t)q * (OH * OW);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++)
                acc += g[oy * OW + ox] / div;
        dx[e] = acc;
    }
}

/* The checks every pooling launcher starts with: *total receives planes *
 * per_plane, the threads to launch (0: nothing to do); -1 (err) when
 * planes is negative or a count overflows int. */
template <int H, int W, int OH, int OW, int K, int S, int P>
inline int pool_threads(const char *what, int planes, int per_plane, int *total, nrt_error *err)
{
    static_assert(H > 0 && W > 0 && OH > 0 && OW > 0 && K > 0 && S > 0 && P >= 0,
                  "pool2d: sizes");
    *total = 0;
    if (planes < 0)
        return bad_arg(what, "negative plane count", err);
    if (!fits_int((long long)planes * H * W) || !fits_int((long long)planes * OH * OW))
        return too_big(what, err);
    *total = planes * per_plane;
    return 0;
}

/* nrt_maxpool2d_fwd over planes planes of H x W (planes = n*C whatever the
 * layout): y and arg [planes, OH, OW], arg the index in the plane. */
template <int H, int W, int OH, int OW, int K, int S, int P>
inline int maxpool2d_fwd(nrt_cuda_net *net, int planes, const float *x, float *y,
                         int32_t *arg, nrt_error *err)
{
    int total;
    if (pool_threads<H, W, OH, OW, K, S, P>("maxpool2d_fwd", planes, OH * OW, &total, err))
        return -1;
    if (total == 0)
        return 0;
    maxpool2d_fwd_kernel<H, W, OH, OW, K, S, P>
        <<<grid_for(total, 256), 256, 0, net->stream>>>(total, x, y, arg);
    return NRT_LAUNCHED("nrt_cu::maxpool2d_fwd", err);
}

/* nrt_maxpool2d_bwd: dx (overwritten) gathers, for each input cell, dy of
 * the outputs whose arg is that cell, in output order. */
template <int H, int W, int OH, int OW, int K, int S, int P>
inline int maxpool2d_bwd(nrt_cuda_net *net, int planes, const float *dy, const int32_t *arg,
                         float *dx, nrt_error *err)
{
    int total;
    if (pool_threads<H, W, OH, OW, K, S, P>("maxpool2d_bwd", planes, H * W, &total, err))
        return -1;
    if (total == 0)
        return 0;
    maxpool2d_bwd_kernel<H, W, OH, OW, K, S, P>
        <<<grid_for(total, 256), 256, 0, net->stream>>>(total, dy, arg, dx);
    return NRT_LAUNCHED("nrt_cu::maxpool2d_bwd", err);
}

/* nrt_avgpool2d_fwd: count_include_pad, the divisor is K*K. */
template <int H, int W, int OH, int OW, int K, int S, int P>
inline int avgpool2d_fwd(nrt_cuda_net *net, int planes, const float *x, float *y,
                         nrt_error *err)
{
    int total;
    if (pool_threads<H, W, OH, OW, K, S, P>("avgpool2d_fwd", planes, OH * OW, &total, err))
        return -1;
    if (total == 0)
        return 0;
    avgpool2d_fwd_kernel<H, W, OH, OW, K, S, P>
        <<<grid_for(total, 256), 256, 0, net->stream>>>(total, x, y);
    return NRT_LAUNCHED("nrt_cu::avgpool2d_fwd", err);
}

/* nrt_avgpool2d_bwd: dx (overwritten) gathers dy / (K*K) of the windows
 * that cover each cell, in output order. */
template <int H, int W, int OH, int OW, int K, int S, int P>
inline int avgpool2d_bwd(nrt_cuda_net *net, int planes, const float *dy, float *dx,
                         nrt_error *err)
{
    int total;
    if (pool_threads<H, W, OH, OW, K, S, P>("avgpool2d_bwd", planes, H * W, &total, err))
        return -1;
    if (total == 0)
        return 0;
    avgpool2d_bwd_kernel<H, W, OH, OW, K, S, P>
        <<<grid_for(total, 256), 256, 0, net->stream>>>(total, dy, dx);
    return NRT_LAUNCHED("nrt_cu::avgpool2d_bwd", err);
}

/* ============================================================= dropout */

/* One thread per lane b of philox.h's layout: its stream decides the
 * values 256 (b / 8) + b % 8 + 8t, t = 0..31 — consecutive threads,
 * consecutive values. */
__global__ void dropout_fwd_kernel(const float *__restrict__ x, float *__restrict__ y,
                                   float *__restrict__ mask, size_t count, uint64_t key,
                                   uint32_t layer, const unsigned long long *__restrict__ step,
                                   uint64_t cut, float scale)
{
    const uint64_t st = *step;
    const size_t lanes = (count + 255) / 256 * 8;
    for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b < lanes;
         b += (size_t)gridDim.x * blockDim.x) {
        nrt_philox4 s = nrt_dropout_lane(key, layer, st, (uint32_t)b);
        for (size_t i = (b >> 3) * 256 + (b & 7); i < count && i < (b >> 3) * 256 + 256;
             i += 8) {
            const float m = nrt_xoshiro128ss(&s) < cut ? 0.0f : scale;
            mask[i] = m;
            y[i] = x[i] * m;
        }
    }
}

__global__ void dropout_bwd_kernel(const float *__restrict__ dy, const float *__restrict__ mask,
                                   float *__restrict__ dx, size_t count)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        dx[i] = dy[i] * mask[i];
}

/* Inverted dropout over count values, the cpu's nrt_dropout_fwd bit for
 * bit: mask[i] = 0 if nrt_dropout_word(net->dropout_key, layer, *net->step,
 * i) < nrt_dropout_cut(p), else 1 / (1 - p); y = x * mask.  The step is
 * read on the device when the kernel runs, so a captured graph draws new
 * masks as the runtime advances *net->step. */
inline int dropout_fwd(nrt_cuda_net *net, uint32_t layer, const float *x, float *y, float *mask,
                       size_t count, double p, nrt_error *err)
{
    if (net->step == NULL)
        return bad_arg("dropout_fwd", "the net has no step counter", err);
    if (count > NRT_DROPOUT_MAX)
        return too_big("dropout_fwd", err);
    if (count == 0)
        return 0;
    dropout_fwd_kernel<<<grid_for((count + 255) / 256 * 8, 256), 256, 0, net->stream>>>(
        x, y, mask, count, net->dropout_key, layer, net->step, nrt_dropout_cut(p),
        (float)(1.0 / (1.0 - p)));
    return NRT_LAUNCHED("nrt_cu::dropout_fwd", err);
}

/* dx = dy * mask. */
inline int dropout_bwd(nrt_cuda_net *net, const float *dy, const float *mask, float *dx,
                       size_t count, nrt_error *err)
{
    if (count == 0)
        return 0;
    dropout_bwd_kernel<<<grid_for(count, 256), 256, 0, net->stream>>>(dy, mask, dx, count);
    return NRT_LAUNCHED("nrt_cu::dropout_bwd", err);
}

/* ============================================================== losses */

constexpr int LOSS_THREADS = 1024;

/* One block: groups of G lanes (G = K rounded up to a power of two, at
 * most a warp) take a row each, rows grp, grp + GROUPS, ...; a row's max
 * and sum of exponentials are reduced over its lanes by a fixed butterfly
 * (sums in double); each group adds its rows' losses in row order (in
 * double), and thread 0 the groups' in group order. */
template <int K>
__global__ void __launch_bounds__(LOSS_THREADS)
    xent_kernel(const float *__restrict__ logits, const int32_t *__restrict__ label, int n,
                float *__restrict__ dlogits, float *__restrict__ loss)
{
    constexpr int G = K >= 32 ? 32 : pow2_at_least(K);
    constexpr int GROUPS = LOSS_THREADS / G;
    __shared__ double part[GROUPS];
    const int lane = threadIdx.x % G, grp = threadIdx.x / G;
    double acc = 0.0;
    for (int r0 = 0; r0 < n; r0 += GROUPS) { /* the same trips for every lane */
        const int r = r0 + grp;
        const bool live = r < n;
        const float *x = logits + (size_t)(live ? r : 0) * K;
        /* nrt_xent's max: a larger value or a NaN takes over */
        float mx = -INFINITY;
        if (live)
            for (int j = lane; j < K; j += G) {
                const float v = x[j];
                if (v > mx || isnan(v))
                    mx = v;
            }
#pragma unroll
        for (int off = G / 2; off > 0; off /= 2) {
            const float o = __shfl_xor_sync(0xffffffffu, mx, off, G);
            if (o > mx || isnan(o))
                mx = o;
        }
        /* exp(x - max) sums to at least 1; a non-finite max, a NaN */
        double sum = 0.0;
        if (live)
            for (int j = lane; j < K; j += G)
                sum += (double)expf(x[j] - mx);
#pragma unroll
        for (int off = G / 2; off > 0; off /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, off, G);
        if (!live)
            continue;
        const int32_t l = label[r];
        const bool lok = l >= 0 && l < K;
        if (lane == 0)
            acc += log(sum) - (lok ? (double)x[l] - (double)mx : (double)NAN);
        if (dlogits) {
            const float g = (float)(1.0 / (sum * n)), inv = (float)(1.0 / n);
            float *d = dlogits + (size_t)r * K;
            for (int j = lane; j < K; j += G) {
                float v = expf(x[j] - mx) * g;
                if (j == l)
                    v -= inv;
                d[j] = v;
            }
        }
    }
    if (lane == 0)
        part[grp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int q = 0; q < GROUPS; q++)
            s += part[q];
        *loss = n > 0 ? (float)(s / n) : 0.0f;
    }
}

/* nrt_xent over logits [n, K]: *loss (device memory) the mean
 * cross-entropy through a stable log-softmax; if dlogits is not NULL,
 * (softmax - onehot) / n.  A label outside [0, K) makes the loss NaN (and
 * its row's gradient softmax / n); a row with a NaN or an infinity, NaN. */
template <int K>
inline int xent(nrt_cuda_net *net, const float *logits, const int32_t *label, int n,
                float *dlogits, float *loss, nrt_error *err)
{
    static_assert(K > 0, "xent: K must be positive");
    if (n < 0)
        return bad_arg("xent", "negative batch size", err);
    if (!fits_int((long long)n * K))
        return too_big("xent", err);
    xent_kernel<K><<<1, LOSS_THREADS, 0, net->stream>>>(logits, label, n, dlogits, loss);
    return NRT_LAUNCHED("nrt_cu::xent", err);
}

/* One block: thread t sums the squared errors of values t, t + 1024, ...
 * in double, then a fixed tree over the threads. */
__global__ void __launch_bounds__(LOSS_THREADS)
    mse_kernel(const float *__restrict__ y, const float *__restrict__ t, size_t nd,
               float *__restrict__ dy, float *__restrict__ loss)
{
    __shared__ double part[LOSS_THREADS];
    double s = 0.0;
    const double dn = (double)nd;
    for (size_t i = threadIdx.x; i < nd; i += LOSS_THREADS) {
        const double e = (double)y[i] - (double)t[i];
        s += e * e;
        if (dy)
            dy[i] = (float)(2.0 * e / dn);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = LOSS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *loss = nd > 0 ? (float)(part[0] / dn) : 0.0f;
}

/* nrt_mse over n*d values: *loss (device memory) the mean of the squared
 * errors, accumulated in double; dy (if not NULL) = 2 (y - t) / (n d),
 * bit for bit the cpu's. */
inline int mse(nrt_cuda_net *net, const float *y, const float *t, int n, int d, float *dy,
               float *loss, nrt_error *err)
{
    const size_t nd = (size_t)(n > 0 ? n : 0) * (size_t)(d > 0 ? d : 0);
    mse_kernel<<<1, LOSS_THREADS, 0, net->stream>>>(y, t, nd, dy, loss);
    return NRT_LAUNCHED("nrt_cu::mse", err);
}

/* ================================================================ sums */

constexpr int COLSUM_COLS = 32, COLSUM_LANES = 32;

/* A block of 32 columns; lane ty of a column sums rows ty, ty + 32, ...
 * in order, then a fixed tree over the lanes. */
__global__ void __launch_bounds__(COLSUM_COLS *COLSUM_LANES)
    col_sums_kernel(const float *__restrict__ a, int rows, int cols, float *__restrict__ out)
{
    __shared__ float part[COLSUM_LANES][COLSUM_COLS + 1];
    const int tx = threadIdx.x % COLSUM_COLS, ty = threadIdx.x / COLSUM_COLS;
    const int j = blockIdx.x * COLSUM_COLS + tx;
    float s = 0.0f;
    if (j < cols)
        for (int r = ty; r < rows; r += COLSUM_LANES)
            s += a[(size_t)r * cols + j];
    part[ty][tx] = s;
    __syncthreads();
    for (int h = COLSUM_LANES / 2; h > 0; h /= 2) {
        if (ty < h)
            part[ty][tx] += part[ty + h][tx];
        __syncthreads();
    }
    if (ty == 0 && j < cols)
        out[j] = part[0][tx];
}

/* out[j] = sum over r of a[r, j], a [rows, cols] (a linear layer's bias
 * gradient). */
inline int col_sums(nrt_cuda_net *net, const float *a, int rows, int cols, float *out,
                    nrt_error *err)
{
    if (cols <= 0)
        return 0;
    if (rows < 0)
        rows = 0;
    col_sums_kernel<<<cdiv(cols, COLSUM_COLS), COLSUM_COLS * COLSUM_LANES, 0, net->stream>>>(
        a, rows, cols, out);
    return NRT_LAUNCHED("nrt_cu::col_sums", err);
}

constexpr int ROWSUM_THREADS = 1024;

/* A block a row.  Thread t sums the row's float4s t, t + 1024, ... (or
 * floats, when the rows are not 16-byte aligned) in order, four lanes
 * kept apart; then (l0 + l1) + (l2 + l3); then a fixed tree over the
 * threads. */
__global__ void __launch_bounds__(ROWSUM_THREADS)
    row_sums_kernel(const float *__restrict__ a, size_t cols, bool vec, float *__restrict__ out)
{
    __shared__ float part[ROWSUM_THREADS];
    const float *row = a + (size_t)blockIdx.x * cols;
    float s;
    if (vec) {
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        const size_t n4 = cols / 4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (size_t i = threadIdx.x; i < n4; i += ROWSUM_THREADS) {
            const float4 v = r4[i];
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        s = (acc.x + acc.y) + (acc.z + acc.w);
    } else {
        s = 0.0f;
#pragma unroll 4
        for (size_t i = threadIdx.x; i < cols; i += ROWSUM_THREADS)
            s += row[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = ROWSUM_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
}

/* out[r] = sum of row r of a [rows, cols] (a convolution's bias gradient:
 * row o of dy [O, n*OH*OW]). */
inline int row_sums(nrt_cuda_net *net, const float *a, int rows, size_t cols, float *out,
                    nrt_error *err)
{
    if (rows <= 0)
        return 0;
    const bool vec = cols % 4 == 0 && ((uintptr_t)a & 15) == 0;
    row_sums_kernel<<<rows, ROWSUM_THREADS, 0, net->stream>>>(a, cols, vec, out);
    return NRT_LAUNCHED("nrt_cu::row_sums", err);
}

/* ========================================================== transposes */

template <int C, int HW>
__global__ void cn_to_nc_kernel(int n, int total, const float *__restrict__ x,
                                float *__restrict__ y)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int s = e / (C * HW), r = e % (C * HW);
        const int c = r / HW, hw = r % HW;
        y[e] = x[(c * n + s) * HW + hw];
    }
}

template <int C, int HW>
__global__ void nc_to_cn_kernel(int n, int total, const float *__restrict__ x,
                                float *__restrict__ y)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int s = e / (C * HW), r = e % (C * HW);
        const int c = r / HW, hw = r % HW;
        y[(c * n + s) * HW + hw] = x[e];
    }
}

/* x [C, n, HW] to y [n, C*HW] (flatten of a channel-first value). */
template <int C, int HW>
inline int cn_to_nc(nrt_cuda_net *net, int n, const float *x, float *y, nrt_error *err)
{
    static_assert(C > 0 && HW > 0, "cn_to_nc: sizes");
    if (n < 0)
        return bad_arg("cn_to_nc", "negative batch size", err);
    if (!fits_int((long long)n * C * HW))
        return too_big("cn_to_nc", err);
    if (n == 0)
        return 0;
    const int total = n * C * HW;
    cn_to_nc_kernel<C, HW><<<grid_for(total, 256), 256, 0, net->stream>>>(n, total, x, y);
    return NRT_LAUNCHED("nrt_cu::cn_to_nc", err);
}

/* x [n, C*HW] to y [C, n, HW]: the reverse (flatten's backward). */
template <int C, int HW>
inline int nc_to_cn(nrt_cuda_net *net, int n, const float *x, float *y, nrt_error *err)
{
    static_assert(C > 0 && HW > 0, "nc_to_cn: sizes");
    if (n < 0)
        return bad_arg("nc_to_cn", "negative batch size", err);
    if (!fits_int((long long)n * C * HW))
        return too_big("nc_to_cn", err);
    if (n == 0)
        return 0;
    const int total = n * C * HW;
    nc_to_cn_kernel<C, HW><<<grid_for(total, 256), 256, 0, net->stream>>>(n, total, x, y);
    return NRT_LAUNCHED("nrt_cu::nc_to_cn", err);
}

} /* namespace */
} /* namespace nrt_cu */

#endif /* NETRT_CUDA_CUH */
