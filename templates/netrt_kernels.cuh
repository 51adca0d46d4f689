/*
 * netrt_kernels.cuh — the device code of the netc runtime: the kernels a
 * model's generated kernel source (MODEL.cu) instantiates with its shapes.
 * Device code only, no host header: the same text compiles with nvcc ahead
 * of time (into a fatbin the program embeds) and with NVRTC at run time
 * (the JIT, which gets this file from the runtime library by name).
 *
 * The templates in nrt_k are __device__ bodies; the generated source wraps
 * each launch site in an extern "C" __global__ function with every shape
 * and the tiling written in, so a kernel is found in the loaded module by
 * its plain name.  Their semantics are exactly those of the cpu kernels of
 * netrt.h (kernels.c):
 *
 *   conv2d_fwd/dw/dx nrt_conv2d_fwd/dw/dx (and for any stride, the
 *                    adjoint of im2col), read from the unpadded input in
 *                    either layout: implicit GEMMs, no column buffer
 *   maxpool2d_*      nrt_maxpool2d_* (bit for bit: the same comparisons,
 *   avgpool2d_*      nrt_avgpool2d_*  the same sums in the same order)
 *   batchnorm_*      nrt_batchnorm_train/eval/bwd (sums in double, in a
 *                    fixed order of their own)
 *   xent             nrt_xent (the loss into device memory)
 *   cn_to_nc,        the transposes between [C, n, HW] and [n, C*HW]
 *   nc_to_cn
 *
 * and, as extern "C" kernels every module carries (their launchers are
 * nrt_cu_* in launch.c):
 *
 *   nrt_dev_gemm_scale   C = beta C, the degenerate case of nrt_sgemm
 *   nrt_dev_dropout_fwd  nrt_dropout_fwd, bit for bit: the masks are
 *                        Philox words of counters (philox.h), the cpu's
 *                        and the GPU's
 *   nrt_dev_loss         nrt_loss (the pointwise losses of losses.h)
 *   nrt_dev_col_sums,    nrt_col_sums, nrt_row_sums
 *   nrt_dev_row_sums
 *   nrt_dev_round_lowp   nrt_round_lowp_to (lowp.h's rounding)
 *   nrt_dev_to_half      nrt_half_bits (a product's 16-bit operand)
 *   nrt_dev_half_load    nrt_half_load (a value kept in 16 bits)
 *
 * (nrt_dev_: the cpu functions they mirror have C linkage too)
 *
 * Determinism: every sum is taken in an order fixed by the shapes alone
 * (never by timing), with no floating-point atomics, so one input gives
 * one result bit for bit on one GPU model.
 *
 * The tilings (Tiling<...>) are chosen by netc, which writes the same
 * numbers into the host code that computes the grids.
 */
#ifndef NETRT_KERNELS_CUH
#define NETRT_KERNELS_CUH

/* NVRTC has no C library headers: the few types and constants used here. */
#ifdef __CUDACC_RTC__
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long long nrt_uptr;
#else
#include <stdint.h>
typedef uintptr_t nrt_uptr;
#endif
#define NRT_INT_MAX 2147483647
#define NRT_INT_MIN (-NRT_INT_MAX - 1)
#define NRT_INF __int_as_float(0x7f800000)
#define NRT_NAN __longlong_as_double(0x7ff8000000000000LL)

#include "losses.h"
#include "lowp.h"
#include "philox.h"
#include "netrt_blocks.h"

/* for (size_t i ...) over [0, count) as a grid-stride loop: the body of
 * every elementwise kernel. */
#define NRT_EACH(i, count)                                                       \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count); \
         i += (size_t)gridDim.x * blockDim.x)

namespace nrt_k {

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

__host__ __device__ constexpr int pow2_at_least(int v) { return v <= 1 ? 1 : 2 * pow2_at_least((v + 1) / 2); }

/* ======================================================= tensor cores */

/* D = A B + C on the tensor cores, for the warp (every lane calls it): A
 * 16 x 16 and B 16 x 8 in bf16 (BF16) or fp16, C and D 16 x 8 in fp32,
 * as PTX's mma.sync.m16n8k16 (sm_80 and later) lays them out over the
 * lanes: with g = lane / 4 and t = lane % 4, two 16-bit values a word,
 * the first in its low half,
 *   a[0] A[g][2t, 2t+1]      a[1] A[g+8][2t, 2t+1]
 *   a[2] A[g][2t+8, 2t+9]    a[3] A[g+8][2t+8, 2t+9]
 *   b[0] B[2t, 2t+1][g]      b[1] B[2t+8, 2t+9][g]
 *   c[0], c[1] C[g][2t, 2t+1]      c[2], c[3] C[g+8][2t, 2t+1]   (d alike)
 * The products are exact, their sums fp32 in the hardware's order; the
 * emulated device (tests/emu/emu.h) adds them to C in k's order. */
template <bool BF16>
__device__ __forceinline__ void mma_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                            const float c[4])
{
#if defined(NETC_EMU_H)
    netc_emu_mma_16x8x16(BF16, d, a, b, c, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
              "f"(c[1]), "f"(c[2]), "f"(c[3]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
              "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    (void)d, (void)a, (void)b, (void)c;
    __trap(); /* no tensor cores' mma before sm_80 */
#endif
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
    static_assert((long long)O * CKK < NRT_INT_MAX && (long long)C * HW < NRT_INT_MAX,
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

/* The shared memory of a tiling's products: the double-buffered slices,
 * As [2][BK][AS] then Bs [2][BK][BS], and afterwards (the tensor cores'
 * path) the tile of D [BM][BN] they stage.  One array for every path of
 * a kernel: a static __shared__ array is the kernel's whatever the path. */
template <class T>
struct Smem {
    static constexpr int SLICES = 2 * T::BK * (T::AS + T::BS);
    static constexpr int SIZE = SLICES > T::BM * T::BN ? SLICES : T::BM * T::BN;
    static_assert(SIZE * 4 <= 48 * 1024, "static shared memory");
    static __device__ __forceinline__ float *get()
    {
        __shared__ __align__(16) float s[SIZE];
        return s;
    }
};

/* The tensor cores' share of a tiling: the tile of D in 16 x 8 pieces
 * (mma_16x8x16's).  Warp w takes every 16-row band (MB of them) in the
 * 8-column strips w, w + NW, w + 2 NW, ... (NR of them), so that each A
 * fragment it loads serves NR pieces and each B fragment MB.  The slices
 * are kept in shared memory in 16 bits, each row padded by 8 values (16
 * bytes) so that the eight rows of an ldmatrix matrix fall in distinct
 * banks: A as [m][k]; B as [n][k] where its loads are k-fast, else as
 * [k][n], which ldmatrix reads transposed. */
template <class T>
struct MmaTiles {
    static constexpr int NW = T::NT / 32, MB = T::BM / 16, NR = T::BN / 8 / NW;
    static constexpr int AK = T::BK + 8;                              /* an A row */
    static constexpr int BROWS = T::B_KFAST ? T::BN : T::BK;
    static constexpr int BROW = T::B_KFAST ? T::BK + 8 : T::BN + 8;   /* a B row */
    static constexpr int A_HALVES = T::BM * AK, B_HALVES = BROWS * BROW;
    static constexpr bool OK = T::NT % 32 == 0 && T::BM % 16 == 0 && T::BK % 16 == 0 &&
                               T::BN % (8 * NW) == 0 && NR % 2 == 0 && T::BN % 32 == 0;
    static_assert(2 * 2 * (A_HALVES + B_HALVES) <= 4 * Smem<T>::SIZE,
                  "the 16-bit slices fit the tiling's shared memory");
    /* the 8-column strip of D of a warp's piece r */
    static __device__ __forceinline__ int n(int w, int r) { return (w + r * NW) * 8; }
    /* where D's column c of row r lies when D goes through shared memory
     * (BN floats a row, no padding: the slices' memory is no larger):
     * groups of four columns swapped within 32 by the row's last three
     * bits, so that the eight rows a warp's store or load touches at once
     * fall in different banks */
    static __device__ __forceinline__ int dcol(int r, int c) { return c ^ ((r & 7) << 2); }
};

/* A value in a 16-bit precision (NRT_BF16 or NRT_FP16), rounded to
 * nearest even as nrt_half_bits does: one cvt.rn instruction on the GPU
 * (sm_80 on, where the mma is). */
template <int PREC>
__device__ __forceinline__ uint16_t half_bits(float v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(NETC_EMU_H)
    uint16_t r;
    if (PREC == NRT_BF16)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
    return r;
#else
    return nrt_half_bits(PREC, v);
#endif
}

/* Four 8 x 8 matrices of 16-bit values from shared memory, for the warp
 * (every lane calls it), as PTX's ldmatrix.sync.aligned.m8n8.x4 (sm_75
 * on): lane 8i + j gives the address of matrix i's row j (16 bytes,
 * 16-byte aligned); r[i] is matrix i's row lane / 4, values 2 (lane % 4)
 * and 2 (lane % 4) + 1 (the first in the low half), or with TRANS its
 * column lane / 4, rows 2 (lane % 4) and 2 (lane % 4) + 1: an mma
 * fragment, straight. */
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t *row)
{
#if defined(NETC_EMU_H)
    netc_emu_ldmatrix_x4(TRANS, r, row, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
#else
    (void)r, (void)row;
    __trap();
#endif
}

/* The block's accumulators over k in [kbeg, kend): acc[i][j] is the sum,
 * k ascending, of A[m][k] B[k][n] (fmaf), for the thread's (m, n) =
 * (row(ty, i), col(tx, j)) of the tile.  The loaders la and lb fill a
 * thread's registers with its elements of the slice at k0 (0 outside the
 * matrices and for k >= kend).  kbeg, kend are the same for the block. */
template <class T, class LA, class LB>
__device__ __forceinline__ void igemm_fp32(float (&acc)[T::TM][T::TN], int kbeg, int kend,
                                           const LA &la, const LB &lb)
{
    float *const sm = Smem<T>::get();
    auto As = reinterpret_cast<float (*)[T::BK][T::AS]>(sm);
    auto Bs = reinterpret_cast<float (*)[T::BK][T::BS]>(sm + 2 * T::BK * T::AS);
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
            for (int gr = 0; gr < T::TM / 4; gr++) {
                const float4 v =
                    *reinterpret_cast<const float4 *>(&As[buf][kk][gr * (T::TY * 4) + ty * 4]);
                a[4 * gr] = v.x, a[4 * gr + 1] = v.y, a[4 * gr + 2] = v.z, a[4 * gr + 3] = v.w;
            }
#pragma unroll
            for (int gr = 0; gr < T::TN / 4; gr++) {
                const float4 v =
                    *reinterpret_cast<const float4 *>(&Bs[buf][kk][gr * (T::TX * 4) + tx * 4]);
                b[4 * gr] = v.x, b[4 * gr + 1] = v.y, b[4 * gr + 2] = v.z, b[4 * gr + 3] = v.w;
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

/* igemm_fp32's sums on the tensor cores, for a bf16 or fp16 run (PREC):
 * the slices' values (low precision already: the runs round them where
 * autocast does) stored in 16 bits as they go to shared memory, each
 * warp's fragments read with ldmatrix, 16 deep at a time, and its pieces
 * of D summed in k's order; then D goes through shared memory to the
 * threads' accumulators as igemm_fp32 holds them, so the passes'
 * epilogues are the same for every precision. */
template <class T, int PREC, class LA, class LB>
__device__ __forceinline__ void igemm_mma(float (&acc)[T::TM][T::TN], int kbeg, int kend,
                                          const LA &la, const LB &lb)
{
    using MT = MmaTiles<T>;
    float *const sm = Smem<T>::get();
    uint16_t *const sh = reinterpret_cast<uint16_t *>(sm);
    auto As = reinterpret_cast<uint16_t (*)[T::BM][MT::AK]>(sh);
    auto Bs = reinterpret_cast<uint16_t (*)[MT::BROWS][MT::BROW]>(sh + 2 * MT::A_HALVES);
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const int w = t / 32, lane = t % 32;
    float ra[T::A_PER], rb[T::B_PER];
    float d[MT::MB][MT::NR][4];

#pragma unroll
    for (int i = 0; i < T::TM; i++)
#pragma unroll
        for (int j = 0; j < T::TN; j++)
            acc[i][j] = 0.0f;
    if (kbeg >= kend)
        return;
#pragma unroll
    for (int mb = 0; mb < MT::MB; mb++)
#pragma unroll
        for (int r = 0; r < MT::NR; r++)
            d[mb][r][0] = d[mb][r][1] = d[mb][r][2] = d[mb][r][3] = 0.0f;

    la.load(kbeg, kend, ra);
    lb.load(kbeg, kend, rb);
    int buf = 0;
    for (int k0 = kbeg;; k0 += T::BK) {
#pragma unroll
        for (int i = 0; i < T::A_PER; i++)
            As[buf][T::a_m(t, i)][T::a_k(t)] = half_bits<PREC>(ra[i]);
#pragma unroll
        for (int i = 0; i < T::B_PER; i++) {
            if (T::B_KFAST)
                Bs[buf][T::bk_n(t, i)][T::bk_k(t)] = half_bits<PREC>(rb[i]);
            else
                Bs[buf][T::bn_k(t, i)][T::bn_n(t, i)] = half_bits<PREC>(rb[i]);
        }
        __syncthreads(); /* as igemm_fp32's */
        const bool more = k0 + T::BK < kend;
        if (more) {
            la.load(k0 + T::BK, kend, ra);
            lb.load(k0 + T::BK, kend, rb);
        }
#pragma unroll
        for (int k = 0; k < T::BK; k += 16) {
            /* A: the band's four 8 x 8 quarters (rows + 0 and + 8, at k
             * and k + 8); B: two strips' two halves (k and k + 8) */
            uint32_t fa[MT::MB][4], fb[MT::NR][4];
#pragma unroll
            for (int mb = 0; mb < MT::MB; mb++)
                ldmatrix_x4<false>(fa[mb], &As[buf][mb * 16 + lane % 16][k + 8 * (lane / 16)]);
#pragma unroll
            for (int r = 0; r < MT::NR; r += 2) {
                uint32_t f[4];
                const int n = MT::n(w, r + lane / 16);
                if (T::B_KFAST)
                    ldmatrix_x4<false>(f, &Bs[buf][n + lane % 8][k + 8 * (lane / 8 % 2)]);
                else
                    ldmatrix_x4<true>(f, &Bs[buf][k + lane % 16][n]);
                fb[r][0] = f[0], fb[r][1] = f[1], fb[r + 1][0] = f[2], fb[r + 1][1] = f[3];
            }
#pragma unroll
            for (int mb = 0; mb < MT::MB; mb++)
#pragma unroll
                for (int r = 0; r < MT::NR; r++)
                    mma_16x8x16<PREC == NRT_BF16>(d[mb][r], fa[mb], fb[r], d[mb][r]);
        }
        if (!more)
            break;
        buf ^= 1;
    }
    /* D's pieces into shared memory (once every warp is done with the
     * slices there), then each thread's values out of it */
    auto D = reinterpret_cast<float (*)[T::BN]>(sm);
    const int g = lane / 4, q = lane % 4;
    __syncthreads();
#pragma unroll
    for (int mb = 0; mb < MT::MB; mb++)
#pragma unroll
        for (int r = 0; r < MT::NR; r++)
#pragma unroll
            for (int h = 0; h < 2; h++) { /* rows g and g + 8, two columns each */
                const int row = mb * 16 + g + 8 * h;
                *reinterpret_cast<float2 *>(&D[row][MT::dcol(row, MT::n(w, r) + 2 * q)]) =
                    make_float2(d[mb][r][2 * h], d[mb][r][2 * h + 1]);
            }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < T::TM; i++)
#pragma unroll
        for (int gr = 0; gr < T::TN / 4; gr++) { /* four columns together, as stored */
            const int row = T::row(ty, i);
            const float4 v =
                *reinterpret_cast<const float4 *>(&D[row][MT::dcol(row, T::col(tx, 4 * gr))]);
            acc[i][4 * gr] = v.x, acc[i][4 * gr + 1] = v.y;
            acc[i][4 * gr + 2] = v.z, acc[i][4 * gr + 3] = v.w;
        }
}

/* The implicit GEMMs' sums in the run's precision prec: fp32's FMAs, or
 * bf16's or fp16's tensor cores where the tiling suits them
 * (MmaTiles::OK) and the GPU has them (sm_80 on; fp32's FMAs of the
 * rounded values before). */
template <class T, class LA, class LB>
__device__ __forceinline__ void igemm(float (&acc)[T::TM][T::TN], int kbeg, int kend,
                                      const LA &la, const LB &lb, int prec)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if constexpr (MmaTiles<T>::OK) {
        if (prec == NRT_BF16)
            return igemm_mma<T, NRT_BF16>(acc, kbeg, kend, la, lb);
        if (prec == NRT_FP16)
            return igemm_mma<T, NRT_FP16>(acc, kbeg, kend, la, lb);
    }
#endif
    (void)prec;
    igemm_fp32<T>(acc, kbeg, kend, la, lb);
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
                ih0[j] = NRT_INT_MIN / 2;
                iw0[j] = NRT_INT_MIN / 2;
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
            /* k >= 0: unsigned, its division a multiply and a shift */
            const int c = (int)((unsigned)k / G::KK), q = (int)((unsigned)k % G::KK);
            const int kh = (int)((unsigned)q / G::KW), kw = (int)((unsigned)q % G::KW);
            const bool ok = k < kend && (unsigned)(ih0[j] + kh) < (unsigned)G::H &&
                            (unsigned)(iw0[j] + kw) < (unsigned)G::W;
            r[i] = ok ? x[base[j] + c * cstride + kh * G::W + kw] : 0.0f;
        }
    }
};

template <class G, class T, bool CN>
__device__ __forceinline__ void conv2d_fwd(int n, const float *__restrict__ x, const float *__restrict__ w,
                      float *__restrict__ y, int prec)
{
    const int P = n * G::OHW;
    const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const FwdA<G, T> la = {w, m0, t};
    const FwdB<G, T, CN> lb(x, n, n0, t);
    float acc[T::TM][T::TN];
    igemm<T>(acc, 0, G::CKK, la, lb, prec);

    const bool vec = (P & 3) == 0 && ((nrt_uptr)y & 15) == 0;
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
__device__ __forceinline__ void conv2d_dw(int n, int chunk, const float *__restrict__ x,
                     const float *__restrict__ dy, float *__restrict__ dw,
                     float *__restrict__ partial, int prec)
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
    igemm<T>(acc, kbeg, kend, la, lb, prec);

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
__device__ __forceinline__ void conv2d_dw_reduce(int splits, const float *__restrict__ partial,
                                        float *__restrict__ dw)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < TOTAL; i += gridDim.x * blockDim.x) {
        float s = partial[i];
        for (int q = 1; q < splits; q++)
            s += partial[(size_t)q * TOTAL + i];
        dw[i] = s;
    }
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
                th0[j] = NRT_INT_MIN / 2;
                tw0[j] = NRT_INT_MIN / 2;
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
            /* k >= 0: unsigned, as FwdB's */
            const int o = (int)((unsigned)k / G::KK), q = (int)((unsigned)k % G::KK);
            const int th = th0[j] - (int)((unsigned)q / G::KW);
            const int tw = tw0[j] - (int)((unsigned)q % G::KW);
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
__device__ __forceinline__ void conv2d_dx(int n, const float *__restrict__ w, const float *__restrict__ dy,
                     float *__restrict__ dx, int prec)
{
    const int NP = n * G::HW;
    const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
    const int t = threadIdx.x, tx = t % T::TX, ty = t / T::TX;
    const DxA<G, T> la = {w, m0, t};
    const DxB<G, T> lb(dy, n, n0, t);
    float acc[T::TM][T::TN];
    igemm<T>(acc, 0, G::O * G::KK, la, lb, prec);

    /* Four consecutive positions from a multiple of 4 lie in one plane if
     * the planes' length is a multiple of 4. */
    const bool vec = (CN_OUT ? (NP & 3) == 0 : (G::HW & 3) == 0) && ((nrt_uptr)dx & 15) == 0;
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
__device__ __forceinline__ void maxpool2d_fwd(int total, const float *__restrict__ x,
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
        float best = -NRT_INF;
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
__device__ __forceinline__ void maxpool2d_bwd(int total, const float *__restrict__ dy,
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
__device__ __forceinline__ void avgpool2d_fwd(int total, const float *__restrict__ x,
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
__device__ __forceinline__ void avgpool2d_bwd(int total, const float *__restrict__ dy,
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

/* ================================================== batch normalization */

/* nrt_batchnorm_*: block c (of THREADS, a power of two) takes channel c's
 * n*HW values, [n, C, HW] or channel first [C, n, HW]; thread t sums
 * values t, t + THREADS, ... in double, and the block adds the threads'
 * sums as a fixed tree, so the order depends on the shapes alone. */
template <int C, int HW, bool CN>
__device__ __forceinline__ size_t bn_at(int n, int c, size_t j)
{
    const size_t i = j / HW, k = j % HW;
    return (CN ? (size_t)c * n + i : i * C + c) * HW + k;
}

/* a and b summed over the block, in every thread */
template <int THREADS>
__device__ __forceinline__ void bn_block_sums(double &a, double &b)
{
    __shared__ double sa[THREADS], sb[THREADS];
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) {
            sa[threadIdx.x] += sa[threadIdx.x + s];
            sb[threadIdx.x] += sb[threadIdx.x + s];
        }
        __syncthreads();
    }
    a = sa[0];
    b = sb[0];
}

/* y = x * a + b over channel c's values: the normalisation and the affine
 * map as one scale and one shift */
template <int C, int HW, bool CN, int THREADS>
__device__ __forceinline__ void bn_apply(int n, int c, const float *__restrict__ x, float a, float b,
                                         float *__restrict__ y)
{
    for (size_t j = threadIdx.x; j < (size_t)n * HW; j += THREADS) {
        const size_t at = bn_at<C, HW, CN>(n, c, j);
        y[at] = x[at] * a + b;
    }
}

template <int C, int HW, bool CN, int THREADS>
__device__ __forceinline__ void batchnorm_train(int n, const float *__restrict__ x,
                                                const float *__restrict__ gamma,
                                                const float *__restrict__ beta, float *running_mean,
                                                float *running_var, long long *num_batches_tracked,
                                                float *stats, float *__restrict__ y, float eps,
                                                float momentum)
{
    const int c = blockIdx.x;
    const size_t count = (size_t)n * HW;
    double s = 0.0, ss = 0.0;
    for (size_t j = threadIdx.x; j < count; j += THREADS) {
        const float v = x[bn_at<C, HW, CN>(n, c, j)];
        s += v;
        ss += (double)v * v;
    }
    bn_block_sums<THREADS>(s, ss);
    const double mean = s / (double)count;
    double var = ss / (double)count - mean * mean; /* biased */
    if (var < 0)
        var = 0;
    const float invstd = (float)(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
        stats[c] = (float)mean;
        stats[C + c] = invstd;
        const double unbiased = count > 1 ? var * (double)count / (double)(count - 1) : var;
        running_mean[c] = (1 - momentum) * running_mean[c] + momentum * (float)mean;
        running_var[c] = (1 - momentum) * running_var[c] + momentum * (float)unbiased;
        if (c == 0)
            ++*num_batches_tracked;
    }
    const float a = gamma ? gamma[c] * invstd : invstd;
    bn_apply<C, HW, CN, THREADS>(n, c, x, a, (beta ? beta[c] : 0.0f) - (float)mean * a, y);
}

template <int C, int HW, bool CN, int THREADS>
__device__ __forceinline__ void batchnorm_eval(int n, const float *__restrict__ x,
                                               const float *__restrict__ gamma,
                                               const float *__restrict__ beta,
                                               const float *__restrict__ running_mean,
                                               const float *__restrict__ running_var,
                                               float *__restrict__ y, float eps)
{
    const int c = blockIdx.x;
    const float invstd = 1.0f / sqrtf(running_var[c] + eps);
    const float a = gamma ? gamma[c] * invstd : invstd;
    bn_apply<C, HW, CN, THREADS>(n, c, x, a, (beta ? beta[c] : 0.0f) - running_mean[c] * a, y);
}

template <int C, int HW, bool CN, int THREADS>
__device__ __forceinline__ void batchnorm_bwd(int n, const float *__restrict__ x,
                                              const float *__restrict__ dy,
                                              const float *__restrict__ gamma,
                                              const float *__restrict__ stats, float *dgamma,
                                              float *dbeta, float *__restrict__ dx)
{
    const int c = blockIdx.x;
    const size_t count = (size_t)n * HW;
    const float mean = stats[c], invstd = stats[C + c];
    double sdy = 0.0, sdyxh = 0.0;
    for (size_t j = threadIdx.x; j < count; j += THREADS) {
        const size_t at = bn_at<C, HW, CN>(n, c, j);
        sdy += dy[at];
        sdyxh += (double)dy[at] * ((x[at] - mean) * invstd);
    }
    bn_block_sums<THREADS>(sdy, sdyxh);
    if (gamma && threadIdx.x == 0) {
        dgamma[c] = (float)sdyxh;
        dbeta[c] = (float)sdy;
    }
    if (!dx)
        return;
    const float scale = (gamma ? gamma[c] : 1.0f) * invstd;
    const float mdy = (float)(sdy / (double)count), mdyxh = (float)(sdyxh / (double)count);
    for (size_t j = threadIdx.x; j < count; j += THREADS) {
        const size_t at = bn_at<C, HW, CN>(n, c, j);
        dx[at] = scale * (dy[at] - mdy - (x[at] - mean) * invstd * mdyxh);
    }
}

/* ============================================================== losses */

constexpr int LOSS_THREADS = NRT_LOSS_THREADS;

/* One block: groups of G lanes (G = K rounded up to a power of two, at
 * most a warp) take a row each, rows grp, grp + GROUPS, ...; a row's max
 * and sum of exponentials are reduced over its lanes by a fixed butterfly
 * (sums in double); each group adds its rows' losses in row order (in
 * double), and thread 0 the groups' in group order. */
template <int K>
__device__ __forceinline__ void xent(const float *__restrict__ logits, const int32_t *__restrict__ label, int n,
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
        float mx = -NRT_INF;
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
            acc += log(sum) - (lok ? (double)x[l] - (double)mx : NRT_NAN);
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

/* ========================================================== transposes */

template <int C, int HW>
__device__ __forceinline__ void cn_to_nc(int n, int total, const float *__restrict__ x,
                                float *__restrict__ y)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int s = e / (C * HW), r = e % (C * HW);
        const int c = r / HW, hw = r % HW;
        y[e] = x[(c * n + s) * HW + hw];
    }
}

template <int C, int HW>
__device__ __forceinline__ void nc_to_cn(int n, int total, const float *__restrict__ x,
                                float *__restrict__ y)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int s = e / (C * HW), r = e % (C * HW);
        const int c = r / HW, hw = r % HW;
        y[(c * n + s) * HW + hw] = x[e];
    }
}

} /* namespace nrt_k */

/* ============================================ the runtime's kernels */

/* Launched by the nrt_cu_* launchers of launch.c, found in every module
 * under these names. */

/* C[m, n] (row stride ldc) = beta C; beta == 0 stores zeros. */
extern "C" __global__ void nrt_dev_gemm_scale(int m, int n, float beta, float *__restrict__ c, int ldc)
{
    const long long total = (long long)m * n;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        float *p = c + (size_t)(e / n) * (size_t)ldc + (size_t)(e % n);
        *p = beta == 0.0f ? 0.0f : *p * beta;
    }
}

/* dst[i] = src[i] (times *scale, unless scale is NULL) in precision prec
 * (lowp.h's nrt_lowp, the cpu's bits); dst may be src.  bits, unless
 * NULL: the same values' 16 bits (nrt_half_bits), for the tensor cores. */
extern "C" __global__ void nrt_dev_round_lowp(size_t count, const float *src, float *dst, int prec,
                                              const float *scale, uint16_t *bits)
{
    const float s = scale ? *scale : 1.0f;
    NRT_EACH(i, count) {
        const float v = nrt_lowp(prec, scale ? src[i] * s : src[i]);
        dst[i] = v;
        if (bits)
            bits[i] = nrt_half_bits(prec, v);
    }
}

/* dst[i] = the 16 bits of src[i] in precision prec (lowp.h's
 * nrt_half_bits): a product's operand as the tensor cores read it. */
extern "C" __global__ void nrt_dev_to_half(size_t count, const float *__restrict__ src,
                                           uint16_t *__restrict__ dst, int prec)
{
    NRT_EACH(i, count)
        dst[i] = nrt_half_bits(prec, src[i]);
}

/* dst[i] = the value src[i]'s 16 bits store in precision prec (lowp.h's
 * nrt_half_value): a value kept in 16 bits, loaded. */
extern "C" __global__ void nrt_dev_half_load(size_t count, const uint16_t *__restrict__ src,
                                             float *__restrict__ dst, int prec)
{
    NRT_EACH(i, count)
        dst[i] = nrt_half_value(prec, src[i]);
}

/* One thread per lane b of philox.h's layout: its stream decides the
 * values 256 (b / 8) + b % 8 + 8t, t = 0..31 — consecutive threads,
 * consecutive values. */
extern "C" __global__ void nrt_dev_dropout_fwd(const float *__restrict__ x, float *__restrict__ y,
                                           float *__restrict__ mask, size_t count, uint64_t key,
                                           uint32_t layer,
                                           const unsigned long long *__restrict__ step,
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

/* The pointwise loss of kind (losses.h) with its argument arg.  One
 * block: thread t sums the values of t, t + 1024, ... in double, then a
 * fixed tree over the threads. */
extern "C" __global__ void __launch_bounds__(nrt_k::LOSS_THREADS)
    nrt_dev_loss(int kind, float arg, const float *__restrict__ y, const float *__restrict__ t,
                 size_t nd, float *__restrict__ dy, float *__restrict__ loss)
{
    __shared__ double part[nrt_k::LOSS_THREADS];
    double s = 0.0;
    const double dn = (double)nd, a = (double)arg;
    for (size_t i = threadIdx.x; i < nd; i += nrt_k::LOSS_THREADS) {
        const double e = (double)y[i] - (double)t[i];
        s += nrt_loss_value(kind, e, a);
        if (dy)
            dy[i] = (float)(nrt_loss_deriv(kind, e, a) / dn);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = nrt_k::LOSS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *loss = nd > 0 ? (float)(part[0] / dn) : 0.0f;
}

/* ================================================================ sums */

namespace nrt_k {
constexpr int COLSUM_COLS = NRT_COLSUM_COLS, COLSUM_LANES = NRT_COLSUM_LANES;
constexpr int ROWSUM_THREADS = NRT_ROWSUM_THREADS;
} /* namespace nrt_k */

/* A block of 32 columns; lane ty of a column sums rows ty, ty + 32, ...
 * in order, then a fixed tree over the lanes. */
extern "C" __global__ void __launch_bounds__(nrt_k::COLSUM_COLS *nrt_k::COLSUM_LANES)
    nrt_dev_col_sums(const float *__restrict__ a, int rows, int cols, float *__restrict__ out)
{
    __shared__ float part[nrt_k::COLSUM_LANES][nrt_k::COLSUM_COLS + 1];
    const int tx = threadIdx.x % nrt_k::COLSUM_COLS, ty = threadIdx.x / nrt_k::COLSUM_COLS;
    const int j = blockIdx.x * nrt_k::COLSUM_COLS + tx;
    float s = 0.0f;
    if (j < cols)
        for (int r = ty; r < rows; r += nrt_k::COLSUM_LANES)
            s += a[(size_t)r * cols + j];
    part[ty][tx] = s;
    __syncthreads();
    for (int h = nrt_k::COLSUM_LANES / 2; h > 0; h /= 2) {
        if (ty < h)
            part[ty][tx] += part[ty + h][tx];
        __syncthreads();
    }
    if (ty == 0 && j < cols)
        out[j] = part[0][tx];
}

/* A block a row.  Thread t sums the row's float4s t, t + 1024, ... (or
 * floats, when the rows are not 16-byte aligned) in order, four lanes
 * kept apart; then (l0 + l1) + (l2 + l3); then a fixed tree over the
 * threads. */
extern "C" __global__ void __launch_bounds__(nrt_k::ROWSUM_THREADS)
    nrt_dev_row_sums(const float *__restrict__ a, size_t cols, int vec, float *__restrict__ out)
{
    __shared__ float part[nrt_k::ROWSUM_THREADS];
    const float *row = a + (size_t)blockIdx.x * cols;
    float s;
    if (vec) {
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        const size_t n4 = cols / 4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (size_t i = threadIdx.x; i < n4; i += nrt_k::ROWSUM_THREADS) {
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
        for (size_t i = threadIdx.x; i < cols; i += nrt_k::ROWSUM_THREADS)
            s += row[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = nrt_k::ROWSUM_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
}

#endif /* NETRT_KERNELS_CUH */
