/*
 * kernels.c — the numeric kernels every generated program calls: the matrix
 * product, convolutions as matrix products (over the whole batch, the
 * columns read straight from the padded input), col2im for the strided
 * ones' input gradient, pooling, the row and column sums of bias gradients,
 * dropout, and the losses.
 *
 * Almost all of a training run's time is spent in nrt_sgemm, so it is the one
 * function here written for speed.  With OpenBLAS (NETRT_HAVE_OPENBLAS) it is
 * cblas_sgemm and nothing more.  Without, it is a small BLIS-style kernel:
 * the K dimension is cut in blocks of at most KC, M in blocks of at most MC
 * and N in blocks of at most NC; for each block, op(A) and op(B) are copied
 * ("packed") into contiguous, aligned buffers, in the order the micro-kernel
 * reads them — which is also where the transposes are absorbed, so the four
 * combinations share one compute path.  The micro-kernel keeps a 6x16 tile
 * of C in registers while it walks K: twelve 8-float accumulators, two loads
 * of B and six broadcasts of A per step.  It exists three times: for
 * AVX-512 (a 6x32 tile, two panels of B at once), for AVX2+FMA (GCC vector
 * types, with the fused multiply-add spelled out since ISO C mode does not
 * contract a*b+c), each chosen at run time with __builtin_cpu_supports so
 * that one binary runs everywhere, with packing routines that transpose 8x8
 * blocks in registers; and portable, in GCC vector extensions (SSE2, NEON).
 * All three give every element the same operations, so the same bits.
 * Matrices too small to repay packing go through a plain loop.  A
 * convolution's cols are packed from the padded input (never stored whole),
 * and on AVX-512, where every panel is a run along one output row (stride
 * 1, output rows of a multiple of 16), not packed at all: the micro-kernel
 * reads them in place, a row offset a step.  A bf16
 * run's products (nrt_gemm's dot) may instead convert the packed panels to
 * bf16 pairs for AVX512-BF16's vdpbf16ps or AMX's tiles.  On the shapes
 * netc's programs produce the AVX2 kernel ran at the speed of OpenBLAS,
 * single-threaded, and the AVX-512 one 1.5-2x faster (test_kernels --bench).
 *
 * Threads (OpenMP): C is cut into one rectangle of whole tiles per thread,
 * and each thread runs the blocked product on its rectangle alone — packing
 * what it needs, no barrier until the end.  K is never split, and every
 * element of C is computed by the same sequence of operations whichever
 * thread computes it and wherever its tile lies (edge tiles run the same
 * micro-kernel on a zero-padded copy), so the result is bit-identical for
 * any number of threads.  The same holds for the other kernels: threads only
 * ever split independent outputs (images, channels, rows of a sum, pieces of
 * im2col's matrix), never one sum.
 *
 * The rest follows PyTorch exactly where PyTorch defines a behaviour: conv
 * padding is zero padding; max pooling ignores padded cells, gives ties to
 * the first cell in scan order and lets NaN win; average pooling divides by
 * k*k (count_include_pad); the losses are means, accumulated in double.
 */
#define _DEFAULT_SOURCE /* syscall */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "netrt.h"
#include "conv_dnnl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NETRT_HAVE_OPENBLAS
#include <cblas.h>
#endif

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#define NRT_OMP(x) _Pragma(#x)
#else
#define NRT_OMP(x)
#endif

/* Below this much work (multiply-adds) a loop is not worth a thread team. */
#define PAR_MIN_WORK 262144.0

/* ------------------------------------------------------------------ sgemm */

/* C[0..m)[0..n) = beta * C, with beta == 0 storing zeros (NaN-proof). */
static void scale_c(int m, int n, float beta, float *c, int ldc)
{
    if (beta == 1.0f)
        return;
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(ci, 0, (size_t)n * sizeof *ci);
        else
            for (int j = 0; j < n; j++)
                ci[j] *= beta;
    }
}

#define MR 6      /* micro-tile rows */
#define NR 16     /* micro-tile columns */
#define KC 256    /* largest K block: a 16-wide panel of B, 16 KiB, in L1 */
#define MC 144    /* largest M block (multiple of MR): packed A in L2 */
#define NC 1024   /* largest N block (multiple of NR): packed B, 1 MiB, in L2 */
#define SMALL_PACK 16384 /* packed operands up to this many floats: on the stack */

/* Work (m*n*k) below which packing does not pay. */
#define SMALL_WORK 4096.0
/* Work (m*n*k) from which a product is shared out among threads: waking
 * the team (passive waits, main.c) costs tens of microseconds, what a
 * product of a few million multiply-adds takes on one core.  At 2^21,
 * digits_cnn's 32 x 512 x 144 products woke it three times a step, and
 * two threads trained 30 % slower than one (Intel Xeon, AVX-512). */
#define PAR_MIN_GEMM 8388608.0

#ifndef NETRT_HAVE_OPENBLAS
/* gemm_small's columns: C[i][j] (at c + i ci + j cj) for each j, eight
 * rows at a time, eight sums apart.  Rows past m repeat row m-1 and are
 * not stored. */
static void small_rows(int m, int n, int k, float alpha, const float *a, size_t ai, size_t ap,
                       const float *b, size_t bp, size_t bj, float beta, float *c, size_t ci,
                       size_t cj)
{
    enum { R = 8 };
    for (int i0 = 0; i0 < m; i0 += R) {
        const int mr = m - i0 < R ? m - i0 : R;
        const float *ar[R];
        for (int r = 0; r < R; r++)
            ar[r] = a + (size_t)(i0 + (r < mr ? r : mr - 1)) * ai;
        for (int j = 0; j < n; j++) {
            const float *bq = b + (size_t)j * bj;
            float s[R] = {0.0f};
            for (size_t p = 0; p < (size_t)k; p++) {
                const float y = bq[p * bp];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    s[r] += ar[r][p * ap] * y;
            }
            for (int r = 0; r < mr; r++) {
                float *e = c + (size_t)(i0 + r) * ci + (size_t)j * cj;
                *e = beta == 0.0f ? alpha * s[r] : alpha * s[r] + beta * *e;
            }
        }
    }
}

/* The plain loop for small products: each element of C the sum, in the
 * order of p, of its products rounded (no FMA), then alpha s, or alpha s +
 * beta c.  Eight elements of a column at a time (small_rows), or of a row
 * where C has fewer rows than columns, so that eight sums advance together
 * where one element at a time waited on each add before the next
 * (boston_mlp's last layer, 32 x 1 x 32, took 1.4 us on AMD Zen 5). */
static void gemm_small(int transa, int transb, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b,
                       int ldb, float beta, float *c, int ldc)
{
    const size_t sai = transa ? 1 : (size_t)lda, sap = transa ? (size_t)lda : 1;
    const size_t sbp = transb ? 1 : (size_t)ldb, sbj = transb ? (size_t)ldb : 1;
    if (k == 1) { /* an outer product (a dx through one output): row by row */
        for (int i = 0; i < m; i++) {
            const float x = a[(size_t)i * sai];
            float *ci = c + (size_t)i * ldc;
            for (int j = 0; j < n; j++) {
                const float s = 0.0f + x * b[(size_t)j * sbj];
                ci[j] = beta == 0.0f ? alpha * s : alpha * s + beta * ci[j];
            }
        }
        return;
    }
    if (m >= n)
        small_rows(m, n, k, alpha, a, sai, sap, b, sbp, sbj, beta, c, (size_t)ldc, 1);
    else /* C^T = op(B)^T op(A)^T: a[i][p] b[p][j] = b[p][j] a[i][p] */
        small_rows(n, m, k, alpha, b, sbj, sbp, a, sap, sai, beta, c, 1, (size_t)ldc);
}
#endif

/* Packs rows [i0, i0+mr) x columns [p0, p0+kc) of op(A) as kc groups of MR
 * floats (a column of the tile each); rows past mr are zeros. */
static void pack_a(int transa, const float *a, int lda, int i0, int mr,
                   int p0, int kc, float *restrict dst)
{
    if (transa) { /* op(A)[i][p] = a[p][i]: each column is contiguous */
        for (int p = 0; p < kc; p++) {
            const float *src = a + (size_t)(p0 + p) * lda + i0;
            float *d = dst + (size_t)p * MR;
            if (mr == MR) { /* a fixed size: moves, not a call to memcpy */
                memcpy(d, src, MR * sizeof *d);
                continue;
            }
            int i = 0;
            for (; i < mr; i++)
                d[i] = src[i];
            for (; i < MR; i++)
                d[i] = 0.0f;
        }
    } else {
        int i = 0;
        for (; i < mr; i++) {
            const float *src = a + (size_t)(i0 + i) * lda + p0;
            for (int p = 0; p < kc; p++)
                dst[(size_t)p * MR + i] = src[p];
        }
        for (; i < MR; i++)
            for (int p = 0; p < kc; p++)
                dst[(size_t)p * MR + i] = 0.0f;
    }
}

/* Packs rows [p0, p0+kc) x columns [j0, j0+nc) of an untransposed B as
 * panels of NR columns, each kc groups of NR floats (a row of the panel);
 * columns past nc are zeros.  Row by row, so B is read sequentially. */
static void pack_b_rows(const float *b, int ldb, int p0, int kc, int j0,
                        int nc, float *restrict dst)
{
    const int full = nc / NR, rest = nc % NR;
    for (int p = 0; p < kc; p++) {
        const float *src = b + (size_t)(p0 + p) * ldb + j0;
        float *d = dst + (size_t)p * NR;
        for (int jp = 0; jp < full; jp++)
            memcpy(d + (size_t)jp * NR * kc, src + jp * NR,
                   NR * sizeof *d);
        if (rest) {
            float *e = d + (size_t)full * NR * kc;
            int j = 0;
            for (; j < rest; j++)
                e[j] = src[full * NR + j];
            for (; j < NR; j++)
                e[j] = 0.0f;
        }
    }
}

/* Packs rows [p0, p0+kc) x columns [j0, j0+nr) of op(B) = B^T, a panel of
 * kc groups of NR floats; columns past nr are zeros. */
static void pack_b_cols(const float *b, int ldb, int p0, int kc, int j0,
                        int nr, float *restrict dst)
{
    int j = 0;
    for (; j < nr; j++) {
        const float *src = b + (size_t)(j0 + j) * ldb + p0;
        for (int p = 0; p < kc; p++)
            dst[(size_t)p * NR + j] = src[p];
    }
    for (; j < NR; j++)
        for (int p = 0; p < kc; p++)
            dst[(size_t)p * NR + j] = 0.0f;
}

/* A micro-kernel: with acc = sum over p < kc of a[p*MR+i] * b[p*NR+j],
 * stores c[i][j] = alpha * acc + beta * c[i][j] for the whole MR x NR tile,
 * not reading c at all when beta == 0. */
typedef void (*ukernel_fn)(int kc, const float *a, const float *b, float *c,
                           size_t ldc, float alpha, float beta);

/* The portable kernel: 4-float vectors, the tile in two 6x8 halves so that
 * its 12 accumulators fit in 16 vector registers (SSE2, NEON). */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f ld4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4f v)
{
    memcpy(p, &v, sizeof v);
}

static inline void store_row(float *ci, v4f x0, v4f x1, float alpha,
                             float beta)
{
    x0 = alpha * x0;
    x1 = alpha * x1;
    if (beta != 0.0f) {
        x0 += beta * ld4(ci);
        x1 += beta * ld4(ci + 4);
    }
    st4(ci, x0);
    st4(ci + 4, x1);
}

static void ukernel_generic(int kc, const float *a, const float *b, float *c,
                            size_t ldc, float alpha, float beta)
{
    for (int h = 0; h < NR; h += 8) {
        v4f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
        v4f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
        const float *ap = a, *bp = b + h;
        for (int p = 0; p < kc; p++, ap += MR, bp += NR) {
            v4f b0 = ld4(bp), b1 = ld4(bp + 4);
            c00 += ap[0] * b0;
            c01 += ap[0] * b1;
            c10 += ap[1] * b0;
            c11 += ap[1] * b1;
            c20 += ap[2] * b0;
            c21 += ap[2] * b1;
            c30 += ap[3] * b0;
            c31 += ap[3] * b1;
            c40 += ap[4] * b0;
            c41 += ap[4] * b1;
            c50 += ap[5] * b0;
            c51 += ap[5] * b1;
        }
        store_row(c + 0 * ldc + h, c00, c01, alpha, beta);
        store_row(c + 1 * ldc + h, c10, c11, alpha, beta);
        store_row(c + 2 * ldc + h, c20, c21, alpha, beta);
        store_row(c + 3 * ldc + h, c30, c31, alpha, beta);
        store_row(c + 4 * ldc + h, c40, c41, alpha, beta);
        store_row(c + 5 * ldc + h, c50, c51, alpha, beta);
    }
}


/* NETRT_NO_AVX2 builds the portable path alone (to test it on an AVX2
 * machine). */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(NETRT_NO_AVX2)
#define NRT_X86_AVX2 1
#include <cpuid.h>
#include <immintrin.h>

/* Bit `bit` of register `reg` (0-3: eax, ebx, ecx, edx) of cpuid's leaf
 * and subleaf: the features __builtin_cpu_supports does not name in every
 * compiler (clang 14 knows neither "f16c" nor the AMX ones) */
static int cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit)
{
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]))
        return 0;
    return (r[reg] >> bit) & 1u;
}

/* Those bits, read once as the program starts, before any thread or pass
 * and never written again: a cpuid instruction traps to the hypervisor on
 * a virtual machine (7 us each on 2026-12-04's AMD Zen 4 VM), and the
 * passes ask at every call (an fp16 run's roundings paid 0.6 ms a step of
 * a small CNN's 0.17).  F16C: cpuid 1's ecx bit 29; AMX-TILE and AMX-BF16:
 * cpuid 7.0's edx bits 24 and 22. */
static struct {
    unsigned char f16c, amx, intel;
} cpu_bits;

__attribute__((constructor)) static void read_cpu_bits(void)
{
    cpu_bits.f16c = (unsigned char)cpuid_bit(1, 0, 2, 29);
    cpu_bits.amx = (unsigned char)(cpuid_bit(7, 0, 3, 24) && cpuid_bit(7, 0, 3, 22));
    unsigned r[4]; /* the vendor: "GenuineIntel" in ebx, edx, ecx */
    cpu_bits.intel = __get_cpuid(0, &r[0], &r[1], &r[2], &r[3]) && r[1] == 0x756e6547u &&
                     r[3] == 0x49656e69u && r[2] == 0x6c65746eu;
}

typedef float v8f __attribute__((vector_size(32)));

/* The mask of the first n of eight lanes (a masked load's or store's) */
__attribute__((target("avx2"), always_inline)) static inline __m256i lanes_below(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The AVX2+FMA kernel: the 6x16 tile in twelve ymm accumulators. */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2(int kc, const float *a, const float *b, float *c, size_t ldc,
             float alpha, float beta)
{
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int p = 0; p < kc; p++, a += MR, b += NR) {
        v8f b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        v8f x;
        x = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(x, b0, c40);
        c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(x, b0, c50);
        c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    v8f va = _mm256_set1_ps(alpha);
    v8f acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                      {c30, c31}, {c40, c41}, {c50, c51}};
    if (beta == 0.0f) {
        for (int i = 0; i < MR; i++) {
            _mm256_storeu_ps(c + i * ldc, va * acc[i][0]);
            _mm256_storeu_ps(c + i * ldc + 8, va * acc[i][1]);
        }
    } else {
        v8f vb = _mm256_set1_ps(beta);
        for (int i = 0; i < MR; i++) {
            float *ci = c + i * ldc;
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, acc[i][0],
                                                 vb * _mm256_loadu_ps(ci)));
            _mm256_storeu_ps(ci + 8,
                             _mm256_fmadd_ps(va, acc[i][1],
                                             vb * _mm256_loadu_ps(ci + 8)));
        }
    }
}

/* The first mr rows (mr < MR) of the micro-kernel's tile, full width,
 * written straight into C: the bottom edge of a matrix whose row count is
 * not a multiple of MR (32 and 64 channels are the common case).  Each
 * element goes through exactly the operations of ukernel_avx2, so the
 * result is the same bits as computing the whole tile. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
ukernel_rows_avx2(const int mr, int kc, const float *a, const float *b,
                  float *c, size_t ldc, float alpha, float beta)
{
    v8f acc[MR][2];
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = (v8f){0};
    for (int p = 0; p < kc; p++, a += MR, b += NR) {
        v8f b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        for (int i = 0; i < mr; i++) {
            v8f x = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
        }
    }
    v8f va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f) {
            _mm256_storeu_ps(ci, va * acc[i][0]);
            _mm256_storeu_ps(ci + 8, va * acc[i][1]);
        } else {
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, acc[i][0], vb * _mm256_loadu_ps(ci)));
            _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(va, acc[i][1], vb * _mm256_loadu_ps(ci + 8)));
        }
    }
}

/* ukernel_rows_avx2 with mr a constant in each case, so that its
 * accumulators stay in registers. */
__attribute__((target("avx2,fma"))) static void
ukernel_part_avx2(int mr, int kc, const float *a, const float *b, float *c,
                  size_t ldc, float alpha, float beta)
{
    switch (mr) {
    case 1: ukernel_rows_avx2(1, kc, a, b, c, ldc, alpha, beta); break;
    case 2: ukernel_rows_avx2(2, kc, a, b, c, ldc, alpha, beta); break;
    case 3: ukernel_rows_avx2(3, kc, a, b, c, ldc, alpha, beta); break;
    case 4: ukernel_rows_avx2(4, kc, a, b, c, ldc, alpha, beta); break;
    default: ukernel_rows_avx2(5, kc, a, b, c, ldc, alpha, beta); break;
    }
}

/* Transposes the 8x8 block r[0..8) in registers. */
__attribute__((target("avx2,fma"))) static inline void tr8x8(v8f r[8])
{
    v8f t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    v8f t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    v8f t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    v8f t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    v8f s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    v8f s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    v8f s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    v8f s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Rows j0 to j0 + 7 (cs apart) at positions x to x + 7, transposed: r[q]
 * holds position x + q of each row. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
rows_tr8(const float *src, size_t cs, size_t x, int j0, v8f r[8])
{
    for (int j = 0; j < 8; j++)
        r[j] = _mm256_loadu_ps(src + (size_t)(j0 + j) * cs + x);
    tr8x8(r);
}

/* nrt_interleave on AVX2: eight rows by eight positions at a time,
 * transposed in registers. */
__attribute__((target("avx2,fma"))) static void
interleave_avx2(const float *src, size_t cs, size_t w, int nb, float *restrict d)
{
    for (size_t x = 0; x + 8 <= w; x += 8)
        for (int j0 = 0; j0 < nb; j0 += 8) {
            v8f r[8];
            rows_tr8(src, cs, x, j0, r);
            for (int q = 0; q < 8; q++)
                _mm256_storeu_ps(d + (x + q) * nb + j0, r[q]);
        }
}

/* Rows past the edge of a matrix read as zeros from here. */
static const float zeros[KC];

/* pack_a for an untransposed A, eight columns at a time through a register
 * transpose: the same values as pack_a. */
__attribute__((target("avx2,fma"))) static void
pack_a_avx2(const float *a, int lda, int i0, int mr, int p0, int kc,
            float *restrict dst)
{
    const float *row[MR];
    for (int i = 0; i < MR; i++)
        row[i] = i < mr ? a + (size_t)(i0 + i) * lda + p0 : zeros;
    int p = 0;
    for (; p + 8 <= kc; p += 8) {
        v8f r[8];
        for (int i = 0; i < MR; i++)
            r[i] = _mm256_loadu_ps(row[i] + p);
        r[6] = r[7] = _mm256_setzero_ps();
        tr8x8(r);
        for (int q = 0; q < 8; q++) {
            float *d = dst + (size_t)(p + q) * MR;
            _mm_storeu_ps(d, _mm256_castps256_ps128(r[q]));
            _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(r[q], 1));
        }
    }
    for (; p < kc; p++)
        for (int i = 0; i < MR; i++)
            dst[(size_t)p * MR + i] = row[i][p];
}

/* dst[q*NR + j] = row[j][q] for q < len, j < NR: sixteen rows made one
 * panel, eight rows at a time, eight columns per register transpose.  Eight
 * rows, not all sixteen, are read together so that rows a page apart do not
 * evict each other from the 8-way L1 cache.  Rows past the edge point at
 * `zeros` (len <= KC). */
__attribute__((target("avx2,fma"))) static void
transpose_rows_avx2(const float *const row[NR], int len, float *restrict dst)
{
    for (int h = 0; h < NR; h += 8) {
        const float *const *r8 = row + h;
        int p = 0;
        for (; p + 8 <= len; p += 8) {
            v8f r[8];
            for (int j = 0; j < 8; j++)
                r[j] = _mm256_loadu_ps(r8[j] + p);
            tr8x8(r);
            for (int q = 0; q < 8; q++)
                _mm256_storeu_ps(dst + (size_t)(p + q) * NR + h, r[q]);
        }
        for (; p < len; p++)
            for (int j = 0; j < 8; j++)
                dst[(size_t)p * NR + h + j] = r8[j][p];
    }
}

/* pack_b_cols through transpose_rows_avx2: the same values. */
__attribute__((target("avx2,fma"))) static void
pack_bt_avx2(const float *b, int ldb, int p0, int kc, int j0, int nr,
             float *restrict dst)
{
    const float *row[NR];
    for (int j = 0; j < NR; j++)
        row[j] = j < nr ? b + (size_t)(j0 + j) * ldb + p0 : zeros;
    transpose_rows_avx2(row, kc, dst);
}

/* The rows of one panel of a convolution's cols (pack_conv), its sixteen
 * positions being nrun runs at xp + at[r] of len[r] floats: each row is
 * zeroed, then each run is copied in pieces of up to eight, read with a
 * mask (never past the run) and stored whole.  A store's lanes past its
 * piece hold zeros and land on the next piece or row, written later, or on
 * the zeroed end of the row — or, for the very last row, up to 7 floats
 * past the panel, which gemm_block leaves room for. */
__attribute__((target("avx2,fma"))) static void
pack_conv_rows_avx2(const float *xp, const size_t *roff, int kc,
                    const size_t *at, const int *len, int nrun, float *d)
{
    struct {
        size_t src;
        int dst;
        __m256i mask;
    } piece[NR];
    int npiece = 0;
    for (int r = 0, t = 0; r < nrun; t += len[r++])
        for (int c = 0; c < len[r]; c += 8, npiece++) {
            const int n = len[r] - c < 8 ? len[r] - c : 8;
            piece[npiece].src = at[r] + (size_t)c;
            piece[npiece].dst = t + c;
            piece[npiece].mask = lanes_below(n);
        }
    if (nrun == 2 && len[0] == 8 && len[1] == 8) { /* two runs of 8: plain moves */
        for (int p = 0; p < kc; p++, d += NR) {
            _mm256_storeu_ps(d, _mm256_loadu_ps(xp + at[0] + roff[p]));
            _mm256_storeu_ps(d + 8, _mm256_loadu_ps(xp + at[1] + roff[p]));
        }
        return;
    }
    const v8f zero = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++, d += NR) {
        _mm256_storeu_ps(d, zero);
        _mm256_storeu_ps(d + 8, zero);
        for (int q = 0; q < npiece; q++)
            _mm256_storeu_ps(d + piece[q].dst,
                             _mm256_maskload_ps(xp + piece[q].src + roff[p], piece[q].mask));
    }
}
#endif

/* The AVX-512 kernel: the tile of MR rows and one panel (NR columns) or
 * two side by side (2 NR: twelve zmm accumulators, enough independent
 * sums to keep both FMA units busy, where six leave them waiting), storing
 * its first mr rows and nr columns (masked) straight into C — the edge
 * tiles included, with no padded copy.  Each element goes through exactly
 * ukernel_avx2's operations (acc = fma(a, b, acc) along the block, then
 * alpha * acc or fma(alpha, acc, beta * c)), so either kernel, and any mix
 * of them across tiles, gives the same bits. */
#if defined(NRT_X86_AVX2) && !defined(NETRT_NO_AVX512) &&                                  \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#define NRT_X86_AVX512 1
/* The AVX-512 functions' target; tests/unit/avx512_emu.h's build
 * (NRT_AVX512_EMU) runs them on emulated zmm registers, compiled for AVX2. */
#ifdef NRT_AVX512_EMU
#define AVX512_TARGET __attribute__((target("avx2,fma")))
#define AVX512_FMA_TARGET AVX512_TARGET
#else
#define AVX512_TARGET __attribute__((target("avx512f")))
#define AVX512_FMA_TARGET __attribute__((target("avx512f,avx2,fma"))) /* with ymm FMAs */
#endif

/* ci[0, w) = alpha * acc + beta * ci (beta 0: ci not read), as the AVX2
 * kernel stores a row: alpha * acc, or fma(alpha, acc, beta * c); cols is
 * the mask of the w columns.  Every AVX-512 kernel's store. */
AVX512_TARGET __attribute__((always_inline)) static inline void
store_row_avx512(float *ci, __m512 acc, __mmask16 cols, float alpha, float beta)
{
    const __m512 va = _mm512_set1_ps(alpha);
    __m512 r = _mm512_mul_ps(va, acc);
    if (beta != 0.0f)
        r = _mm512_fmadd_ps(va, acc,
                            _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(cols, ci)));
    _mm512_mask_storeu_ps(ci, cols, r);
}

/* The tile's `panels` panels; row p of them is at b0 + p NR and b1 + p NR
 * (packed), or, with off, at b0 + off[p] and b1 + off[p] (a convolution's
 * cols read in place).  Both are constants where this is inlined. */
AVX512_TARGET __attribute__((always_inline)) static inline void
tile_avx512(const int panels, int kc, const float *a, const float *b0,
            const float *b1, const size_t *off, float *c, size_t ldc, float alpha, float beta,
            int mr, int nr)
{
    __m512 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++, a += MR) {
        const float *r0 = b0 + (off ? off[p] : (size_t)p * NR);
        const float *r1 = b1 + (off ? off[p] : (size_t)p * NR);
        const __m512 x0 = _mm512_loadu_ps(r0), x1 = panels == 2 ? _mm512_loadu_ps(r1) : x0;
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, x0, acc[i][0]);
            if (panels == 2)
                acc[i][1] = _mm512_fmadd_ps(ai, x1, acc[i][1]);
        }
    }
    for (int h = 0; h < panels; h++) {
        const int w = nr - h * NR > NR ? NR : nr - h * NR;
        const __mmask16 cols = (__mmask16)((1u << w) - 1u);
        for (int i = 0; i < mr; i++)
            store_row_avx512(c + (size_t)i * ldc + h * NR, acc[i][h], cols, alpha, beta);
    }
}

/* nr <= NR: the one panel b0; else the two, b0 and b1. */
AVX512_TARGET static void
ukernel_avx512(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc,
               float alpha, float beta, int mr, int nr)
{
    if (nr > NR)
        tile_avx512(2, kc, a, b0, b1, NULL, c, ldc, alpha, beta, mr, nr);
    else
        tile_avx512(1, kc, a, b0, b0, NULL, c, ldc, alpha, beta, mr, nr);
}

/* Two whole panels of a convolution's cols read in place: row p is NR
 * floats at b0 + off[p] and NR at b1 + off[p] (each panel's positions one
 * run along an output row of the padded input). */
AVX512_TARGET static void
ukernel_avx512_conv(int kc, const float *a, const float *b0, const float *b1,
                    const size_t *off, float *c, size_t ldc, float alpha, float beta, int mr)
{
    tile_avx512(2, kc, a, b0, b1, off, c, ldc, alpha, beta, mr, 2 * NR);
}
#endif

/* The bf16 products (NRT_DOT_BF16) on AVX512-BF16: vdpbf16ps multiplies
 * pairs of bf16 values and adds both products to fp32 lanes, 32
 * multiply-adds an instruction against AVX2's 8.  Its operands are the
 * packed fp32 panels above, converted (pairs_a, pairs_b) into the pairs
 * it reads: k = 2q in the low half of each 32-bit lane, 2q + 1 in the
 * high, an odd block's last pair completed with a zero.  Its arithmetic,
 * the instruction's: a product of two bf16 values is exact in fp32, and
 * each lane takes acc += a[2q+1] b[2q+1], then acc += a[2q] b[2q], each
 * sum rounded to nearest even, bf16 subnormals read as zero and fp32
 * subnormal sums flushed to zero.  So a bf16 product differs from
 * NRT_DOT_F32's on the same (bf16) values only in the order of its sums
 * — and, as that, does not depend on the thread count either. */
#ifdef NRT_X86_AVX512
#define NRT_X86_BF16 1
#ifdef NRT_AVX512_EMU
#define BF16_TARGET AVX512_TARGET
#define BF16_VL_TARGET AVX512_TARGET
#else
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define BF16_VL_TARGET __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bf16")))
#endif

/* The micro-kernel: the MR x NR tile in six zmm accumulators over kp
 * pairs; stores its first mr rows and nr columns (c as ukernel_fn). */
BF16_TARGET static void ukernel_bf16(int kp, const uint32_t *a, const uint16_t *b, float *c,
                                     size_t ldc, float alpha, float beta, int mr, int nr)
{
    __m512 acc[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        acc[i] = _mm512_setzero_ps();
    for (int q = 0; q < kp; q++, a += MR, b += 2 * NR) {
        const __m512bh bq = (__m512bh)_mm512_loadu_si512(b);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32((int)a[i]), bq);
    }
    const __mmask16 cols = (__mmask16)((1u << nr) - 1u);
    for (int i = 0; i < mr; i++)
        store_row_avx512(c + (size_t)i * ldc, acc[i], cols, alpha, beta);
}

/* Row i's pair q of a packed tile of A (kc groups of MR floats): a[2q]
 * in the low half, a[2q+1] in the high, bf16 each; zeros past kc. */
static uint32_t a_pair(const float *tile, int kc, int i, int q)
{
    uint32_t v = 0;
    if (2 * q < kc)
        v = nrt_f32_bits(nrt_bf16(tile[(size_t)2 * q * MR + i])) >> 16;
    if (2 * q + 1 < kc)
        v |= nrt_f32_bits(nrt_bf16(tile[(size_t)(2 * q + 1) * MR + i])) & 0xffff0000u;
    return v;
}

/* ntile packed tiles of A (kc groups of MR floats each) as pairs: tile t
 * at dst + t * MR * kp, group q holding (a[2q][i], a[2q+1][i]). */
static void pairs_a(int kc, int kp, int ntile, const float *src, uint32_t *restrict dst)
{
    for (int t = 0; t < ntile; t++, src += (size_t)MR * kc, dst += (size_t)MR * kp)
        for (int q = 0; q < kp; q++)
            for (int i = 0; i < MR; i++)
                dst[(size_t)q * MR + i] = a_pair(src, kc, i, q);
}

/* npanel packed panels of B (kc groups of NR floats each) as pairs: panel
 * p at dst + p * 2 * NR * kp, group q holding (b[2q][j], b[2q+1][j]) for
 * j < NR, sixteen rounded at once (vcvtne2ps2bf16) and interleaved; kp
 * groups a panel, those past kc's pairs zeros (AMX's tiles take 16). */
BF16_TARGET static void pairs_b(int kc, int kp, int npanel, const float *src,
                                uint16_t *restrict dst)
{
    static const uint16_t weave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(weave);
    for (int t = 0; t < npanel; t++, src += (size_t)NR * kc, dst += (size_t)2 * NR * kp)
        for (int q = 0; q < kp; q++) {
            if (2 * q >= kc) {
                _mm512_storeu_si512(dst + (size_t)q * 2 * NR, _mm512_setzero_si512());
                continue;
            }
            const __m512 lo = _mm512_loadu_ps(src + (size_t)2 * q * NR);
            const __m512 hi = 2 * q + 1 < kc ? _mm512_loadu_ps(src + (size_t)(2 * q + 1) * NR)
                                             : _mm512_setzero_ps();
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* lo in lanes 0-15 */
            _mm512_storeu_si512(dst + (size_t)q * 2 * NR, _mm512_permutexvar_epi16(idx, both));
        }
}
#endif

#if defined(NRT_X86_BF16) && !defined(NRT_AVX512_EMU) /* (AMX's tiles are not emulated) */

/* bf16 products on AMX (NRT_DOT_AMX): tdpbf16ps multiplies a tile of A,
 * 16 rows of 16 pairs, by a tile of B, 16 pairs of 16 columns (pairs_b's
 * layout, 16 groups at a time), into a 16 x 16 tile of fp32 sums: 8192
 * multiply-adds an instruction.  The same exact products as the other
 * dots, summed in the order of the hardware (pairs, in fp32, bf16
 * subnormals as zero): within fp32's rounding of NRT_DOT_F32's, and the
 * same bits whatever the thread count.  Here C is computed in blocks of
 * 32 x 32, four accumulator tiles (0-3), two of A (4, 5) and two of B
 * (6, 7). */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))
#define NRT_X86_AMX 1

/* The tile configuration: palette 1, every tile 16 rows of 64 bytes. */
struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* The packed A (ntile tiles of MR rows, kc groups each) as AMX's rows:
 * row r (< round_up(mc, 32)) at dst + r * kp, its pairs (a[r][2q],
 * a[r][2q+1]); rows past mc and pairs past kc zeros. */
static void amx_rows_a(int kc, int kp, int mc, const float *pa, uint32_t *restrict dst)
{
    const int rows = (mc + 31) / 32 * 32;
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < kp; q++)
            dst[(size_t)r * kp + q] =
                r < mc ? a_pair(pa + (size_t)(r / MR) * MR * kc, kc, r % MR, q) : 0;
}

/* dst[0, len) = src's values in bf16, 32 rounded at once (vcvtne2ps2bf16,
 * as pairs_b): AMX's operands copied from fp32 runs. */
AMX_TARGET static void amx_bf16_run(uint16_t *restrict dst, const float *src, size_t len)
{
    for (size_t j = 0; j < len; j += 32) {
        const size_t left = len - j;
        const __mmask16 lo = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
        const __mmask16 hi = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u) : 0;
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + j + 16),
                                                          _mm512_maskz_loadu_ps(lo, src + j));
        _mm512_mask_storeu_epi16(dst + j, left >= 32 ? ~0u : (__mmask32)((1ull << left) - 1u), both);
    }
}

/* Every tile 16 rows of 64 bytes (palette 1). */
AMX_TARGET static void amx_tiles_16x64(void)
{
    struct amx_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* ldtilecfg reads the whole of cfg: said so to the compiler, which
     * GCC 12's _tile_loadconfig does not (its operand is cfg's first 8
     * bytes, the rest free to be left unwritten) */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

/* The same rows straight from an untransposed A (rows [i0, i0 + mc),
 * columns [p0, p0 + kc), lda apart), rounded by amx_bf16_run: no packed
 * tiles in between, which took as long as the products themselves on
 * cifar10's first convolution's dW (a_pair one value at a time). */
AMX_TARGET static void amx_rows_a_direct(const float *a, int lda, int i0, int p0, int kc, int kp,
                                         int mc, uint32_t *restrict dst)
{
    const int rows = (mc + 31) / 32 * 32;
    for (int r = 0; r < rows; r++) {
        uint16_t *d = (uint16_t *)(dst + (size_t)r * kp);
        size_t j = 0;
        if (r < mc) {
            amx_bf16_run(d, a + (size_t)(i0 + r) * lda + p0, (size_t)kc);
            j = (size_t)kc;
        }
        memset(d + j, 0, (2 * (size_t)kp - j) * sizeof *d);
    }
}

/* C[0, mc) x [0, nc) = alpha * sums + beta * C (beta 0: C not read), from
 * amx_rows_a's A and pairs_b's panels (npanel, with a zero panel after an
 * odd count), kp a multiple of 16. */
AMX_TARGET static void amx_block(int kp, int mc, int nc, int npanel, const uint32_t *a,
                                 const uint16_t *b, float *c, size_t ldc, float alpha,
                                 float beta)
{
    amx_tiles_16x64();
    const size_t sa = (size_t)kp * 4, panel = (size_t)2 * NR * kp;
    _Alignas(64) float out[4][16 * 16];
    for (int r = 0; r < mc; r += 32)
        for (int jp = 0; jp < npanel; jp += 2) {
            const uint32_t *a0 = a + (size_t)r * kp, *a1 = a0 + (size_t)16 * kp;
            const uint16_t *b0 = b + (size_t)jp * panel, *b1 = b0 + panel;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int q = 0; q < kp; q += 16) {
                _tile_loadd(4, a0 + q, sa);
                _tile_loadd(5, a1 + q, sa);
                _tile_loadd(6, b0 + (size_t)q * 2 * NR, 64);
                _tile_loadd(7, b1 + (size_t)q * 2 * NR, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, out[0], 64);
            _tile_stored(1, out[1], 64);
            _tile_stored(2, out[2], 64);
            _tile_stored(3, out[3], 64);
            for (int t = 0; t < 4; t++) {
                const int i0 = r + 16 * (t / 2), j0 = (jp + t % 2) * NR;
                const int w = nc - j0 > NR ? NR : nc - j0;
                if (w <= 0)
                    continue;
                const __mmask16 cols = (__mmask16)((1u << w) - 1u);
                for (int i = 0; i < 16 && i0 + i < mc; i++)
                    store_row_avx512(c + (size_t)(i0 + i) * ldc + j0,
                                     _mm512_load_ps(out[t] + 16 * i), cols, alpha, beta);
            }
        }
    _tile_release();
}
#endif

static int have_avx512(void)
{
#ifdef NRT_AVX512_EMU /* emulated on AVX2 and FMA */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#elif defined(NRT_X86_AVX512)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static int have_bf16(void)
{
#ifdef NRT_AVX512_EMU
    return have_avx512();
#elif defined(NRT_X86_BF16)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int have_amx(void)
{
#ifdef NRT_X86_AMX
    /* AMX-TILE and AMX-BF16 (cpu_bits); whether Linux lets this process
     * use the tiles is nrt_amx_enable's question */
    return have_bf16() && cpu_bits.amx;
#else
    return 0;
#endif
}

static int have_avx2(void)
{
#ifdef NRT_X86_AVX2
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

void nrt_interleave(const float *src, size_t cs, size_t w, int nb, float *d)
{
    size_t x = 0;
#ifdef NRT_X86_AVX2
    if (nb % 8 == 0 && have_avx2()) {
        interleave_avx2(src, cs, w, nb, d);
        x = w / 8 * 8;
    }
#endif
    for (; x < w; x++)
        for (int j = 0; j < nb; j++)
            d[x * nb + j] = src[j * cs + x];
}

#ifdef NRT_X86_BF16
/* nrt_interleave_bf16 where the cpu has AVX512-BF16: eight rows by eight
 * positions transposed in registers, each row of eight rounded at once
 * (vcvtneps2bf16). */
BF16_VL_TARGET static void
interleave_bf16_avx512(const float *src, size_t cs, size_t w, int nb, uint16_t *restrict d)
{
    for (size_t x = 0; x + 8 <= w; x += 8)
        for (int j0 = 0; j0 < nb; j0 += 8) {
            v8f r[8];
            rows_tr8(src, cs, x, j0, r);
            for (int q = 0; q < 8; q++)
                _mm_storeu_si128((__m128i *)(d + (x + q) * nb + j0),
                                 (__m128i)_mm256_cvtneps_pbh(r[q]));
        }
}
#endif

void nrt_interleave_bf16(const float *src, size_t cs, size_t w, int nb, uint16_t *d)
{
    size_t x = 0;
#ifdef NRT_X86_BF16
    if (nb % 8 == 0 && have_bf16()) {
        interleave_bf16_avx512(src, cs, w, nb, d);
        x = w / 8 * 8;
    }
#endif
    for (; x < w; x++)
        for (int j = 0; j < nb; j++)
            d[x * nb + j] = nrt_half_bits(NRT_BF16, src[j * cs + x]);
}

static ukernel_fn pick_ukernel(int avx2)
{
#ifdef NRT_X86_AVX2
    if (avx2)
        return ukernel_avx2;
#endif
    (void)avx2;
    return ukernel_generic;
}

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

/* Splits len into the fewest blocks of at most max, of equal size rounded up
 * to a multiple of unit; returns that size. */
static int block_size(int len, int max, int unit)
{
    int nb = (len + max - 1) / max;
    return (int)round_up((size_t)((len + nb - 1) / nb), (size_t)unit);
}

/* A convolution's input seen as a matrix that is never stored: im2col's
 * cols [K, N], K = C*KH*KW rows (channel, kernel row, kernel column), N =
 * n*OH*OW columns (sample, output row, output column), element (k, j) the
 * input value kernel offset k sees at output position j.  The input is xp,
 * zero-padded and channel first, [C, n, HP, WP], so that no element needs a
 * bounds test: element (k, j) is xp[conv_pos(j) + conv_row(k)]. */
struct conv_src {
    const float *xp;
    int kh, kw, sw, oh, ow;
    size_t wp, sh_wp, hw, cs; /* WP, SH*WP, HP*WP (a sample), n*HP*WP (a channel) */
};

/* Where row k of cols reads, from a position's window origin. */
static size_t conv_row(const struct conv_src *s, int k)
{
    const int kk = s->kh * s->kw, r = k % kk;
    return (size_t)(k / kk) * s->cs + (size_t)(r / s->kw) * s->wp + (size_t)(r % s->kw);
}

/* The window origin of position j; *run: the positions from j on in its
 * output row (which lie sw apart in xp). */
static size_t conv_pos(const struct conv_src *s, int j, int *run)
{
    const int plane = s->oh * s->ow, r = j % plane, ox = r % s->ow;
    *run = s->ow - ox;
    return (size_t)(j / plane) * s->hw + (size_t)(r / s->ow) * s->sh_wp + (size_t)ox * s->sw;
}

/* One product C = alpha op(A) op(B) + beta C.  Normally the operands are
 * as nrt_sgemm received them; for a convolution, op(B) is cols (or cols^T
 * when transb) and b is unused, and op(A) may be a convolution weight
 * [O, C, KH, KW] read as [C, O*KH*KW] with each kernel turned half round
 * (flip = KH*KW): the weight of the transposed convolution. */
struct gemm {
    int transa, transb, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
    const struct conv_src *cv;
    int flip;
    int dot; /* enum nrt_dot: what gemm_run makes of it, below */
    ukernel_fn uk;
    int avx2;   /* the AVX2 packing routines may be used */
    int avx512; /* the micro-kernel is ukernel_avx512 */
    int bf16;   /* the bf16 products: pairs_a, pairs_b, ukernel_bf16 */
    int amx;    /* on AMX: amx_rows_a, pairs_b, amx_block */
};

/* The bf16 products' pairs a group of kc rows packs into: AMX's in whole
 * tiles of 16. */
static int pair_groups(const struct gemm *g, int kc)
{
    const int kp = (kc + 1) / 2;
    return g->amx ? (kp + 15) / 16 * 16 : kp;
}

/* op(A)[i][p] and op(B)[p][j], one at a time. */
static float a_at(const struct gemm *g, int i, int p)
{
    if (g->flip)
        return g->a[(size_t)(p / g->flip) * g->lda + (size_t)i * g->flip + (g->flip - 1 - p % g->flip)];
    return g->transa ? g->a[(size_t)p * g->lda + i] : g->a[(size_t)i * g->lda + p];
}

static float b_at(const struct gemm *g, int p, int j)
{
    int run;
    if (g->cv)
        return g->transb ? g->cv->xp[conv_pos(g->cv, p, &run) + conv_row(g->cv, j)]
                         : g->cv->xp[conv_pos(g->cv, j, &run) + conv_row(g->cv, p)];
    return g->transb ? g->b[(size_t)j * g->ldb + p] : g->b[(size_t)p * g->ldb + j];
}

/* The block C[i0, i0+m) x [j0, j0+n) of g by the definition: what a
 * product falls back to when there is no memory to pack into. */
static void gemm_naive(const struct gemm *g, int i0, int m, int j0, int n)
{
    for (int i = i0; i < i0 + m; i++)
        for (int j = j0; j < j0 + n; j++) {
            float s = 0.0f, *c = g->c + (size_t)i * g->ldc + j;
            for (int p = 0; p < g->k; p++)
                s += a_at(g, i, p) * b_at(g, p, j);
            *c = g->beta == 0.0f ? g->alpha * s : g->alpha * s + g->beta * *c;
        }
}

/* Packs rows [p0, p0+kc) x columns [j0, j0+nc) of a convolution's cols as
 * pack_b_rows packs B, reading the padded input: each panel's sixteen
 * positions are one or more runs along output rows, and each row of the
 * panel is those runs copied from where kernel offset p0+p looks. */
static void pack_conv(const struct conv_src *s, int avx2, int p0, int kc,
                      int j0, int nc, float *restrict dst)
{
    size_t roff[KC];
    for (int p = 0; p < kc; p++)
        roff[p] = conv_row(s, p0 + p);
    const size_t sw = (size_t)s->sw;
    (void)avx2;
    for (int jp = 0; jp * NR < nc; jp++) {
        const int nr = nc - jp * NR < NR ? nc - jp * NR : NR;
        float *d = dst + (size_t)jp * NR * kc;
        size_t at[NR];
        int len[NR], nrun = 0;
        for (int t = 0; t < nr; t += len[nrun++]) {
            at[nrun] = conv_pos(s, j0 + jp * NR + t, &len[nrun]);
            if (len[nrun] > nr - t)
                len[nrun] = nr - t;
        }
        if (sw == 1 && nrun == 1 && nr == NR) { /* one whole run: 16 floats a row */
            for (int p = 0; p < kc; p++)
                memcpy(d + (size_t)p * NR, s->xp + at[0] + roff[p], NR * sizeof *d);
            continue;
        }
#ifdef NRT_X86_AVX2
        if (avx2 && sw == 1) {
            pack_conv_rows_avx2(s->xp, roff, kc, at, len, nrun, d);
            continue;
        }
#endif
        for (int p = 0; p < kc; p++) {
            float *restrict dp = d + (size_t)p * NR;
            int t = 0;
            for (int r = 0; r < nrun; t += len[r++]) {
                const float *src = s->xp + at[r] + roff[p];
                for (int q = 0; q < len[r]; q++)
                    dp[t + q] = src[q * sw];
            }
            for (; t < NR; t++)
                dp[t] = 0.0f;
        }
    }
}

/* Packs rows [p0, p0+kc) x columns [j0, j0+nr) of cols^T (positions down,
 * kernel offsets across) as one panel: for each run of positions along an
 * output row, nr rows of cols, transposed. */
static void pack_conv_t(const struct gemm *g, int p0, int kc, int j0, int nr,
                        float *restrict dst)
{
    const struct conv_src *s = g->cv;
    size_t joff[NR];
    for (int j = 0; j < nr; j++)
        joff[j] = conv_row(s, j0 + j);
    for (int t = 0, run; t < kc; t += run) {
        const size_t at = conv_pos(s, p0 + t, &run);
        if (run > kc - t)
            run = kc - t;
        float *d = dst + (size_t)t * NR;
#ifdef NRT_X86_AVX2
        if (g->avx2 && s->sw == 1) {
            const float *row[NR];
            for (int j = 0; j < NR; j++)
                row[j] = j < nr ? s->xp + at + joff[j] : zeros;
            transpose_rows_avx2(row, run, d);
            continue;
        }
#endif
        for (int q = 0; q < run; q++)
            for (int j = 0; j < NR; j++)
                d[(size_t)q * NR + j] =
                    j < nr ? s->xp[at + joff[j] + (size_t)q * s->sw] : 0.0f;
    }
}

/* pack_a for an op(A) read through a_at (the flipped convolution weight). */
static void pack_a_any(const struct gemm *g, int i0, int mr, int p0, int kc,
                       float *restrict dst)
{
    for (int p = 0; p < kc; p++)
        for (int i = 0; i < MR; i++)
            dst[(size_t)p * MR + i] = i < mr ? a_at(g, i0 + i, p0 + p) : 0.0f;
}

static float *alloc_floats(size_t n)
{
    /* 64-byte alignment: no packed vector straddles a cache line. */
    return aligned_alloc(64, round_up(n * sizeof(float), 64));
}

/* The block C[i0, i0+m) x [j0, j0+n) of g, by one thread, packing into
 * pa and pb (gemm_block's sizes). */
static __attribute__((noinline)) void
gemm_block_in(const struct gemm *g, int i0, int m, int j0, int n, float *pa,
              float *pb, void *pa2, void *pb2)
{
    const int k = g->k;
    const int kcb = block_size(k, KC, 1); /* from k alone: see below */
#ifndef NRT_X86_BF16
    (void)pa2, (void)pb2; /* the bf16 products' pairs: none in this build */
#endif
    /* A convolution on AVX-512 whose output rows are whole panels, and a
     * block of whole pairs of them: cols read in place, nothing packed.
     * Its micro-kernel computes two panels at a time, so its N blocks are
     * whole pairs too (an odd one out would have it write the 16 columns
     * past the block: another thread's, or past C's row). */
    int direct = 0;
#ifdef NRT_X86_AVX512
    direct = g->avx512 && !g->transb && g->cv && g->cv->sw == 1 && g->cv->ow % NR == 0 &&
             n % (2 * NR) == 0;
#endif
    const int mcb = block_size(m, MC, MR);
    const int ncb = block_size(n, NC, direct ? 2 * NR : NR);
    const size_t ldc = (size_t)g->ldc;
    /* Every element of C gets: acc = the sum over one K block, in order;
     * c = alpha * acc + beta * c on the first block, alpha * acc + c on
     * the others.  The K blocks depend on k only, so that sequence is the
     * same whichever block of C, and whichever thread, the element is in. */
    for (int jc = 0; jc < n; jc += ncb) {
        const int nc = n - jc < ncb ? n - jc : ncb;
        const int npanel = (nc + NR - 1) / NR;
        for (int pc = 0; pc < k; pc += kcb) {
            const int kc = k - pc < kcb ? k - pc : kcb;
            const float beta = pc == 0 ? g->beta : 1.0f;
            size_t roff[KC]; /* direct: where row p of cols reads */
#ifndef NRT_X86_AVX512
            (void)roff; /* never direct */
#endif
            if (direct)
                for (int p = 0; p < kc; p++)
                    roff[p] = conv_row(g->cv, pc + p);
            else if (!g->transb && g->cv)
                pack_conv(g->cv, g->avx2, pc, kc, j0 + jc, nc, pb);
            else if (!g->transb)
                pack_b_rows(g->b, g->ldb, pc, kc, j0 + jc, nc, pb);
            else
                for (int jp = 0; jp < npanel; jp++) {
                    int j = jc + jp * NR, nr = n - j < NR ? n - j : NR;
                    float *d = pb + (size_t)jp * NR * kc;
                    if (g->cv) {
                        pack_conv_t(g, pc, kc, j0 + j, nr, d);
                        continue;
                    }
#ifdef NRT_X86_AVX2
                    if (g->avx2) {
                        pack_bt_avx2(g->b, g->ldb, pc, kc, j0 + j, nr, d);
                        continue;
                    }
#endif
                    pack_b_cols(g->b, g->ldb, pc, kc, j0 + j, nr, d);
                }
#ifdef NRT_X86_BF16
            const int kp = pair_groups(g, kc);
            if (g->bf16 || g->amx)
                pairs_b(kc, kp, npanel, pb, pb2);
            if (g->amx && npanel % 2) /* and a zero panel beside an odd one out */
                memset((uint16_t *)pb2 + (size_t)npanel * 2 * NR * kp, 0,
                       (size_t)2 * NR * kp * sizeof(uint16_t));
#endif
            for (int ic = 0; ic < m; ic += mcb) {
                const int mc = m - ic < mcb ? m - ic : mcb;
                const int ntile = (mc + MR - 1) / MR;
#ifdef NRT_X86_AMX
                if (g->amx && !g->transa && !g->flip) {
                    amx_rows_a_direct(g->a, g->lda, i0 + ic, pc, kc, kp, mc, pa2);
                    amx_block(kp, mc, nc, npanel, pa2, pb2, g->c + (size_t)(i0 + ic) * ldc + j0 + jc,
                              ldc, g->alpha, beta);
                    continue;
                }
#endif
                for (int it = 0; it < ntile; it++) {
                    int i = ic + it * MR, mr = m - i < MR ? m - i : MR;
                    float *d = pa + (size_t)it * MR * kc;
                    if (g->flip) {
                        pack_a_any(g, i0 + i, mr, pc, kc, d);
                        continue;
                    }
#ifdef NRT_X86_AVX2
                    if (g->avx2 && !g->transa) {
                        pack_a_avx2(g->a, g->lda, i0 + i, mr, pc, kc, d);
                        continue;
                    }
#endif
                    pack_a(g->transa, g->a, g->lda, i0 + i, mr, pc, kc, d);
                }
#ifdef NRT_X86_BF16
                if (g->bf16)
                    pairs_a(kc, kp, ntile, pa, pa2);
#endif
#ifdef NRT_X86_AMX
                if (g->amx) {
                    amx_rows_a(kc, kp, mc, pa, pa2);
                    amx_block(kp, mc, nc, npanel, pa2, pb2, g->c + (size_t)(i0 + ic) * ldc + j0 + jc,
                              ldc, g->alpha, beta);
                    continue;
                }
#endif
                /* AVX-512 takes two panels at a time where there are two */
                for (int jp = 0, step; jp < npanel; jp += step) {
                    step = g->avx512 && jp + 1 < npanel ? 2 : 1;
                    const int j = jc + jp * NR, nr = n - j < step * NR ? n - j : step * NR;
                    const float *tb = pb + (size_t)jp * NR * kc;
                    for (int it = 0; it < ntile; it++) {
                        const int i = ic + it * MR, mr = m - i < MR ? m - i : MR;
                        const float *ta = pa + (size_t)it * MR * kc;
                        float *tc = g->c + (size_t)(i0 + i) * ldc + j0 + j;
#ifdef NRT_X86_BF16
                        if (g->bf16) {
                            ukernel_bf16(kp, (const uint32_t *)pa2 + (size_t)it * MR * kp,
                                         (const uint16_t *)pb2 + (size_t)jp * 2 * NR * kp, tc,
                                         ldc, g->alpha, beta, mr, nr);
                            continue;
                        }
#endif
#ifdef NRT_X86_AVX512
                        if (direct) {
                            int run;
                            const size_t at0 = conv_pos(g->cv, j0 + j, &run);
                            const size_t at1 = conv_pos(g->cv, j0 + j + NR, &run);
                            ukernel_avx512_conv(kc, ta, g->cv->xp + at0, g->cv->xp + at1,
                                                roff, tc, ldc, g->alpha, beta, mr);
                            continue;
                        }
                        if (g->avx512) {
                            ukernel_avx512(kc, ta, tb, tb + (size_t)NR * kc, tc, ldc, g->alpha,
                                           beta, mr, nr);
                            continue;
                        }
#endif
                        if (mr == MR && nr == NR) {
                            g->uk(kc, ta, tb, tc, ldc, g->alpha, beta);
                            continue;
                        }
#ifdef NRT_X86_AVX2
                        if (g->avx2 && nr == NR) {
                            ukernel_part_avx2(mr, kc, ta, tb, tc, ldc, g->alpha, beta);
                            continue;
                        }
#endif
                        /* Edge tile: the same kernel on a padded copy. */
                        float tmp[MR * NR] = {0};
                        if (beta != 0.0f)
                            for (int r = 0; r < mr; r++)
                                memcpy(tmp + r * NR, tc + r * ldc,
                                       (size_t)nr * sizeof *tmp);
                        g->uk(kc, ta, tb, tmp, NR, g->alpha, beta);
                        for (int r = 0; r < mr; r++)
                            memcpy(tc + r * ldc, tmp + r * NR,
                                   (size_t)nr * sizeof *tmp);
                    }
                }
            }
        }
    }
}

/* Packing space up to this many floats comes from the stack: small
 * products (an MLP's, at every step) then call no allocator. */
enum { PACK_STACK = 16384 };

/* The block C[i0, i0+m) x [j0, j0+n) of g, by one thread; returns -1
 * (having done nothing) if out of memory. */
static int gemm_block(const struct gemm *g, int i0, int m, int j0, int n)
{
    const int kcb = block_size(g->k, KC, 1);
    const size_t mcb = (size_t)block_size(m, MC, MR), ncb = (size_t)block_size(n, NC, NR);
    const size_t na = mcb * kcb;
    const size_t nb = ncb * kcb + 8; /* + pack_conv_rows_avx2's spill */
    /* the bf16 products' pairs: 4 bytes a pair, a float's room (AMX's in
     * whole tiles: 16 pairs, 32 rows of A, an even count of B's panels) */
    const size_t kp = g->bf16 || g->amx ? (size_t)pair_groups(g, kcb) : 0;
    const size_t na2 = (g->amx ? round_up(mcb, 32) : mcb) * kp;
    const size_t nb2 = (g->amx ? ncb + NR : ncb) * kp;
    const size_t at_b = round_up(na, 16), at_a2 = at_b + round_up(nb, 16);
    const size_t at_b2 = at_a2 + round_up(na2, 16), all = at_b2 + nb2;
    if (all <= PACK_STACK) {
        _Alignas(64) float buf[PACK_STACK];
        gemm_block_in(g, i0, m, j0, n, buf, buf + at_b, buf + at_a2, buf + at_b2);
        return 0;
    }
    float *p = alloc_floats(all);
    if (p)
        gemm_block_in(g, i0, m, j0, n, p, p + at_b, p + at_a2, p + at_b2);
    free(p);
    return p ? 0 : -1;
}

/* Thread t of nt's share of C: the tiles of C form a grid of mt x np
 * (MR x NR each), cut into tm x tn rectangles, one per thread, with
 * tm * tn = nt chosen to balance multiply-adds plus packing (a thread
 * packs the rows of op(A) and the columns of op(B) its rectangle needs). */
static void gemm_share(int m, int n, int k, int t, int nt, int *i0, int *mm,
                       int *j0, int *nn)
{
    const long mt = (m + MR - 1) / MR, np = (n + NR - 1) / NR;
    long tm = 1;
    double best = -1.0;
    for (long d = 1; d <= nt; d++) {
        if (nt % d)
            continue;
        long rows = (mt + d - 1) / d, cols = (np + nt / d - 1) / (nt / d);
        double cost = (double)rows * cols * MR * NR * k +
                      8.0 * (double)(rows * MR + cols * NR) * k;
        if (best < 0.0 || cost < best) {
            best = cost;
            tm = d;
        }
    }
    const long tn = nt / tm, ti = t / tn, tj = t % tn;
    long lo = ti * mt / tm, hi = (ti + 1) * mt / tm;
    *i0 = (int)(lo * MR);
    *mm = (int)(hi * MR < m ? hi * MR : m) - *i0;
    lo = tj * np / tn, hi = (tj + 1) * np / tn;
    *j0 = (int)(lo * NR);
    *nn = (int)(hi * NR < n ? hi * NR : n) - *j0;
}

/* Computes g's C [m, n], on threads when it is big enough. */
static void gemm_run(struct gemm *g, int m, int n)
{
    g->avx2 = have_avx2();
    g->uk = pick_ukernel(g->avx2);
    g->amx = g->dot == NRT_DOT_AMX && have_amx();
    g->bf16 = !g->amx && (g->dot == NRT_DOT_BF16 || g->dot == NRT_DOT_AMX) && have_bf16();
    g->avx512 = !g->amx && !g->bf16 && g->dot != NRT_DOT_AVX2 && have_avx512();
    int nt = 1;
#ifdef _OPENMP
    if ((double)m * n * g->k >= PAR_MIN_GEMM && !omp_in_parallel())
        nt = omp_get_max_threads();
#endif
    if (nt <= 1) {
        if (gemm_block(g, 0, m, 0, n) != 0)
            gemm_naive(g, 0, m, 0, n);
        return;
    }
    /* No barrier anywhere: each thread packs what it needs and computes its
     * rectangle of C alone. */
    NRT_OMP(omp parallel num_threads(nt))
    {
        int t = 0, team = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        team = omp_get_num_threads();
#endif
        int i0, mm, j0, nn;
        gemm_share(m, n, g->k, t, team, &i0, &mm, &j0, &nn);
        if (mm > 0 && nn > 0 && gemm_block(g, i0, mm, j0, nn) != 0)
            gemm_naive(g, i0, mm, j0, nn);
    }
}

const char *nrt_gemm_isa(void)
{
#ifdef NETRT_HAVE_OPENBLAS
    return "OpenBLAS";
#else
    return have_avx512() ? "AVX-512" : have_avx2() ? "AVX2" : "portable";
#endif
}

const char *nrt_dot_isa(int dot)
{
#ifndef NETRT_HAVE_OPENBLAS
    if (dot == NRT_DOT_AVX2)
        return have_avx2() ? "AVX2" : "portable";
#endif
    (void)dot;
    return nrt_gemm_isa();
}

int nrt_amx_enable(void)
{
#if defined(NRT_X86_AMX) && defined(__linux__)
    /* Linux gives a process AMX's 8 KiB of tile state only when asked
     * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) */
    return have_amx() && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

int nrt_dot_native(void)
{
#ifdef NETRT_HAVE_OPENBLAS
    return 0;
#else
    return have_bf16();
#endif
}

void nrt_sgemm(int transa, int transb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc)
{
    nrt_gemm(NRT_DOT_F32, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void nrt_gemm(int dot, int transa, int transb, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
#ifdef NETRT_HAVE_OPENBLAS
    (void)dot;
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
#else
    if ((double)m * n * k < SMALL_WORK) {
        gemm_small(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
        return;
    }
    struct gemm g = {.transa = transa, .transb = transb, .k = k, .alpha = alpha, .beta = beta,
                     .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb, .ldc = ldc, .dot = dot};
    gemm_run(&g, m, n);
#endif
}

/* ---------------------------------------------------------- im2col/col2im */

/* The range [lo, hi) of output positions o < on whose input position
 * o*s - p + kk lies in [0, len). */
static void valid_range(int on, int s, int p, int kk, int len, int *lo,
                        int *hi)
{
    int off = kk - p; /* input = o*s + off */
    int l = off >= 0 ? 0 : (-off + s - 1) / s;
    int h = len - off <= 0 ? 0 : (len - off + s - 1) / s;
    if (h > on)
        h = on;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

void nrt_im2col(const float *x, int c, int h, int w, int kh, int kw, int sh,
                int sw, int ph, int pw, int oh, int ow, float *col)
{
    const size_t plane = (size_t)oh * ow;
    NRT_OMP(omp parallel for schedule(static)
                if ((double)c * kh * kw * plane >= PAR_MIN_WORK))
    for (int ch = 0; ch < c; ch++) {
        const float *xc = x + (size_t)ch * h * w;
        for (int ki = 0; ki < kh; ki++) {
            for (int kj = 0; kj < kw; kj++) {
                float *row = col + ((size_t)(ch * kh + ki) * kw + kj) * plane;
                int xlo, xhi;
                valid_range(ow, sw, pw, kj, w, &xlo, &xhi);
                for (int oy = 0; oy < oh; oy++) {
                    float *r = row + (size_t)oy * ow;
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h) {
                        memset(r, 0, (size_t)ow * sizeof *r);
                        continue;
                    }
                    /* input column of output ox: ox*sw + kj - pw */
                    const float *xr = xc + (size_t)iy * w;
                    for (int ox = 0; ox < xlo; ox++)
                        r[ox] = 0.0f;
                    if (sw == 1) {
                        if (xhi > xlo)
                            memcpy(r + xlo, xr + (xlo + kj - pw),
                                   (size_t)(xhi - xlo) * sizeof *r);
                    } else {
                        for (int ox = xlo; ox < xhi; ox++)
                            r[ox] = xr[ox * sw + kj - pw];
                    }
                    for (int ox = xhi; ox < ow; ox++)
                        r[ox] = 0.0f;
                }
            }
        }
    }
}

void nrt_col2im(const float *col, int c, int h, int w, int kh, int kw,
                int sh, int sw, int ph, int pw, int oh, int ow, float *dx)
{
    const size_t plane = (size_t)oh * ow;
    NRT_OMP(omp parallel for schedule(static)
                if ((double)c * kh * kw * plane >= PAR_MIN_WORK))
    for (int ch = 0; ch < c; ch++) {
        float *dc = dx + (size_t)ch * h * w;
        for (int ki = 0; ki < kh; ki++) {
            for (int kj = 0; kj < kw; kj++) {
                const float *row =
                    col + ((size_t)(ch * kh + ki) * kw + kj) * plane;
                int xlo, xhi;
                valid_range(ow, sw, pw, kj, w, &xlo, &xhi);
                for (int oy = 0; oy < oh; oy++) {
                    int iy = oy * sh - ph + ki;
                    if (iy < 0 || iy >= h)
                        continue;
                    const float *r = row + (size_t)oy * ow;
                    float *dr = dc + (size_t)iy * w;
                    for (int ox = xlo; ox < xhi; ox++)
                        dr[ox * sw + kj - pw] += r[ox];
                }
            }
        }
    }
}

/* nrt_col2im_batch's col [C*KH*KW, N*OH*OW], row r = (ch*kh + ki)*kw + kj,
 * holds for each sample i in turn the OH*OW values that kernel offset
 * (ki, kj) sees of channel ch of sample i: a "piece".  Read in order, col is
 * a sequence of pieces, piece q = r*N + i at q*OH*OW. */
struct im2col_geom {
    int h, w, kh, kw, sh, sw, ph, pw, oh, ow;
};

/* What the pieces of one row share: output rows [ylo, yhi) and columns
 * [xlo, xhi) see real input, output (oy, ox) input (oy*sh - ph + ki,
 * ox*sw + off). */
struct im2col_span {
    int ki, off, ylo, yhi, xlo, xhi;
};

static void im2col_span_of(const struct im2col_geom *g, int ki, int kj,
                           struct im2col_span *sp)
{
    sp->ki = ki;
    sp->off = kj - g->pw;
    valid_range(g->oh, g->sh, g->ph, ki, g->h, &sp->ylo, &sp->yhi);
    valid_range(g->ow, g->sw, g->pw, kj, g->w, &sp->xlo, &sp->xhi);
    if (sp->xhi <= sp->xlo)
        sp->ylo = sp->yhi = 0; /* no column is real: all padding */
}

/* Adds a piece back into dc, the channel's plane of dx: output rows
 * [ylo, yhi) and columns [xlo, xhi) of the piece land on the input, the rest
 * on padding.  For one kernel offset each cell of dc gets at most one
 * value. */
static void col2im_piece(const struct im2col_geom *g,
                         const struct im2col_span *sp,
                         const float *restrict piece, float *restrict dc)
{
    const int ow = g->ow, w = g->w, sw = g->sw;
    const int xlo = sp->xlo, xhi = sp->xhi, off = sp->off;
    if (sp->ylo >= sp->yhi)
        return;
    float *dr = dc + (size_t)(sp->ylo * g->sh - g->ph + sp->ki) * w;
    const size_t dstep = (size_t)g->sh * w;
    for (int oy = sp->ylo; oy < sp->yhi; oy++, dr += dstep) {
        const float *restrict r = piece + (size_t)oy * ow;
        if (sw == 1)
            for (int ox = xlo; ox < xhi; ox++)
                dr[ox + off] += r[ox];
        else
            for (int ox = xlo; ox < xhi; ox++)
                dr[ox * sw + off] += r[ox];
    }
}

/* How far ahead of its reading nrt_col2im_batch prefetches col, in floats. */
#define COL_AHEAD 1024

/* dx's plane of sample i, channel ch at dx + i*ss + ch*cs: ss = C*H*W,
 * cs = H*W for [N, C, H, W]; ss = H*W, cs = N*H*W for [C, N, H, W]. */
static void col2im_batch(const float *col, size_t ss, size_t cs, int n, int c,
                         int h, int w, int kh, int kw, int sh, int sw, int ph,
                         int pw, int oh, int ow, float *dx)
{
    if (n <= 0 || c <= 0)
        return;
    const size_t in = (size_t)h * w;
    if (kh <= 0 || kw <= 0 || oh <= 0 || ow <= 0) {
        memset(dx, 0, (size_t)n * c * in * sizeof *dx);
        return;
    }
    const struct im2col_geom g = {h, w, kh, kw, sh, sw, ph, pw, oh, ow};
    const size_t plane = (size_t)oh * ow, ld = (size_t)n * plane;
    const int par = (double)n * c * kh * kw * plane >= PAR_MIN_WORK;
    /* Units of one channel and a block of consecutive samples: for each
     * kernel offset, a unit reads one contiguous run of its row of col, as
     * long as can be while leaving about four units to each thread.  (Units
     * of one sample, reading kh*kw runs of OH*OW floats N*OH*OW apart, were
     * half as fast at 16x16.) */
    int nt = 1;
#ifdef _OPENMP
    if (par && !omp_in_parallel())
        nt = omp_get_max_threads();
#endif
    (void)par;
    int nb = (4 * nt + c - 1) / c;
    if (nb > n)
        nb = n;
    const int bs = (n + nb - 1) / nb;
    nb = (n + bs - 1) / bs;
    const int units = c * nb;
    const size_t total = (size_t)c * kh * kw * ld;
    /* A unit owns its planes of dx: no races.  Every cell of dx is the sum
     * 0 + its values in the order (ki, kj), that is nrt_col2im's order,
     * whatever the blocks and the threads. */
    NRT_OMP(omp parallel for schedule(static) if (par))
    for (int u = 0; u < units; u++) {
        const int ch = u / nb, i0 = u % nb * bs;
        const int i1 = n - i0 < bs ? n : i0 + bs;
        float *d = dx + (size_t)i0 * ss + (size_t)ch * cs;
        for (int i = i0; i < i1; i++)
            memset(d + (size_t)(i - i0) * ss, 0, in * sizeof *dx);
        for (int ki = 0; ki < kh; ki++)
            for (int kj = 0; kj < kw; kj++) {
                struct im2col_span sp;
                im2col_span_of(&g, ki, kj, &sp);
                size_t at = ((size_t)(ch * kh + ki) * kw + kj) * ld +
                            (size_t)i0 * plane;
                for (int i = i0; i < i1; i++, at += plane) {
                    col2im_piece(&g, &sp, col + at, d + (size_t)(i - i0) * ss);
                    /* The hardware's prefetcher stops at page ends, and
                     * runs here are a few pages long: ask for the next
                     * piece's worth a page or so ahead (a quarter faster). */
                    for (size_t o = at + COL_AHEAD, e = o + plane;
                         o < e && o < total; o += 64 / sizeof *col)
                        __builtin_prefetch(col + o);
                }
            }
    }
}

void nrt_col2im_batch(const float *col, int n, int c, int h, int w, int kh,
                      int kw, int sh, int sw, int ph, int pw, int oh, int ow,
                      float *dx)
{
    const size_t in = (size_t)h * w;
    col2im_batch(col, (size_t)c * in, in, n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow, dx);
}

void nrt_col2im_batch_cn(const float *col, int n, int c, int h, int w, int kh,
                         int kw, int sh, int sw, int ph, int pw, int oh,
                         int ow, float *dx)
{
    const size_t in = (size_t)h * w;
    col2im_batch(col, in, (size_t)n * in, n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow, dx);
}

/* ------------------------------------------------------------ convolution */

/* A convolution is three products over the whole batch, all on cols, the
 * batch's im2col matrix [C*KH*KW, n*OH*OW] — which is never written out:
 * the products pack their panels of it straight from the padded input
 * (struct conv_src), so the columns cost no memory traffic beyond the
 * input itself.  Forward: y = W cols.  Backward: dW = dy cols^T; and for
 * stride 1, dx = the convolution of dy, padded by KH-1-PH and KW-1-PW, with
 * the weight flipped and its two channel axes swapped (a transposed
 * convolution is a convolution), so that dx too is one product. */

static struct conv_src conv_src_of(const nrt_conv *g, int n, const float *xp)
{
    const size_t hp = (size_t)g->h + 2 * (size_t)g->ph, wp = (size_t)g->w + 2 * (size_t)g->pw;
    return (struct conv_src){xp, g->kh, g->kw, g->sw, g->oh, g->ow,
                             wp, (size_t)g->sh * wp, hp * wp, (size_t)n * hp * wp};
}

/* w floats from s to d, for rows of a few dozen: inline, without libc's
 * calls (and no loop over the tail, which the compiler would make a call
 * again).  nrt_conv2d_pad made 2^15 calls of memcpy and memset a pass for
 * cifar10's conv2 (rows of 16); its pass 210 -> 150 us, Zen 5. */
static inline void copy_row(float *restrict d, const float *restrict s, int w)
{
    int j = 0;
    for (; j + 8 <= w; j += 8)
        __builtin_memcpy(d + j, s + j, 8 * sizeof *d);
    if (j + 4 <= w)
        __builtin_memcpy(d + j, s + j, 4 * sizeof *d), j += 4;
    if (j + 2 <= w)
        __builtin_memcpy(d + j, s + j, 2 * sizeof *d), j += 2;
    if (j < w)
        d[j] = s[j];
}

void nrt_conv2d_pad(const nrt_conv *g, int n, int cn, const float *x, float *xp)
{
    const int h = g->h, w = g->w, ph = g->ph, pw = g->pw;
    const size_t hp = (size_t)h + 2 * (size_t)ph, wp = (size_t)w + 2 * (size_t)pw;
    const long planes = (long)g->c * n;
    NRT_OMP(omp parallel for schedule(static)
                if ((double)planes * hp * wp >= 4 * PAR_MIN_WORK))
    for (long q = 0; q < planes; q++) {
        const long ch = q / n, i = q % n;
        const float *src = x + (size_t)(cn ? q : i * g->c + ch) * h * w;
        float *dst = xp + (size_t)q * hp * wp;
        memset(dst, 0, hp * wp * sizeof *dst); /* a plane in L1: zeroed whole, then the rows */
        for (int y = 0; y < h; y++)
            copy_row(dst + ((size_t)ph + y) * wp + pw, src + (size_t)y * w, w);
    }
}

/* The fp32 products' kind of dot (gemm_run's choice, see there). */
static int dot_fp32(int dot)
{
    if (dot == NRT_DOT_AMX && have_amx())
        return 0;
    return !((dot == NRT_DOT_BF16 || dot == NRT_DOT_AMX) && have_bf16());
}

/* The forward pass of a stride-1 convolution whose sums fit one K block
 * (C*KH*KW <= KC), its output rows in runs of 16 (a row's last run
 * masked: cnn101's first layer, rows of 30, 16 + 14), on AVX-512,
 * without the product's machinery: tiles of 8 output channels by 3 runs
 * of 16 positions (24 zmm sums; a step loads 3 runs of the padded input
 * in place and broadcasts 8 weights, packed [K][8] per block of channels).
 * The product's tiles are 6 channels by 2 runs: 32 channels took 6 of
 * them, 4 rows wasted, and 8 loads fed 12 multiply-adds where here 11
 * feed 24.  cifar10's first layer: 1.58 -> 1.28 ms (Zen 5, one thread).
 * Each value is the product's: from 0, one fused multiply-add per k in
 * order (the product's times alpha = 1 changes no bit), then + its
 * channel's bias: the same bits as the product and its bias pass and as
 * AVX2, for any threads (each value computed whole by one).
 * On AVX2 the same tiles hold runs of 8 positions, each block of 8
 * channels in two halves of 4 by 3 runs (12 ymm sums of the 16 registers):
 * cifar10's first layer, one thread, on an AMD Zen 3 (AVX2 only): about
 * 6.1 ms a step through the product (its columns packed first), 4.4 here
 * (shares of perf's samples of the step).  test_kernels checks the bits
 * against im2col and sgemm. */
#define FW_OB 8
#define FW_VB 3
#ifdef NRT_X86_AVX2
__attribute__((target("avx2,fma"))) static void
conv_fwd_tile_avx2(int k, const float *wp, const float *b, const float *const *src,
                   const size_t *roff, float *const *dst, size_t ldy, int no, int nv,
                   const int *lanes)
{
    (void)lanes; /* (whole runs of 8 alone: conv_fwd_direct) */
    for (int h = 0; h < no; h += 4, wp += 4) {
        __m256 acc[4][FW_VB];
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
            for (int v = 0; v < FW_VB; v++)
                acc[a][v] = _mm256_setzero_ps();
        const float *wk = wp;
        for (int p = 0; p < k; p++, wk += FW_OB) {
            __m256 x[FW_VB];
#pragma GCC unroll 4
            for (int v = 0; v < FW_VB; v++)
                x[v] = _mm256_loadu_ps(src[v] + roff[p]);
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                const __m256 wa = _mm256_broadcast_ss(wk + a);
#pragma GCC unroll 4
                for (int v = 0; v < FW_VB; v++)
                    acc[a][v] = _mm256_fmadd_ps(wa, x[v], acc[a][v]);
            }
        }
        /* constant indices: the sums stay in registers */
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const __m256 ba = _mm256_set1_ps(b && h + a < no ? b[h + a] : 0.0f);
#pragma GCC unroll 4
            for (int v = 0; v < FW_VB; v++)
                if (h + a < no && v < nv)
                    _mm256_storeu_ps(dst[v] + (size_t)(h + a) * ldy,
                                     _mm256_add_ps(acc[a][v], ba));
        }
    }
}
#endif
#ifdef NRT_X86_AVX512
AVX512_TARGET static void
conv_fwd_tile_avx512(int k, const float *wp, const float *b, const float *const *src,
                     const size_t *roff, float *const *dst, size_t ldy, int no, int nv,
                     const int *lanes)
{
    __m512 acc[FW_OB][FW_VB];
    __mmask16 m[FW_VB]; /* a run's positions in its row (the loads read no further) */
#pragma GCC unroll 4
    for (int v = 0; v < FW_VB; v++)
        m[v] = (__mmask16)((1u << lanes[v]) - 1);
#pragma GCC unroll 8
    for (int a = 0; a < FW_OB; a++)
#pragma GCC unroll 4
        for (int v = 0; v < FW_VB; v++)
            acc[a][v] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++, wp += FW_OB) {
        __m512 x[FW_VB];
#pragma GCC unroll 4
        for (int v = 0; v < FW_VB; v++)
            x[v] = _mm512_maskz_loadu_ps(m[v], src[v] + roff[p]);
#pragma GCC unroll 8
        for (int a = 0; a < FW_OB; a++) {
            const __m512 wa = _mm512_set1_ps(wp[a]);
#pragma GCC unroll 4
            for (int v = 0; v < FW_VB; v++)
                acc[a][v] = _mm512_fmadd_ps(wa, x[v], acc[a][v]);
        }
    }
    for (int a = 0; a < no; a++) {
        const __m512 ba = _mm512_set1_ps(b ? b[a] : 0.0f);
        for (int v = 0; v < nv; v++)
            _mm512_mask_storeu_ps(dst[v] + a * ldy, m[v], _mm512_add_ps(acc[a][v], ba));
    }
}
#endif

/* nrt_conv2d_fwd by the path above where it applies and its buffer can be
 * had: 0; else -1, and the caller takes the product's path. */
typedef void conv_fwd_tile_fn(int k, const float *wp, const float *b, const float *const *src,
                              const size_t *roff, float *const *dst, size_t ldy, int no, int nv,
                              const int *lanes);

static int conv_fwd_direct(const nrt_conv *g, int n, const float *w, const float *b,
                           const float *xp, float *y)
{
#if defined(NRT_X86_AVX2) || defined(NRT_X86_AVX512)
    const int k = g->c * g->kh * g->kw, nob = (g->o + FW_OB - 1) / FW_OB;
    conv_fwd_tile_fn *tile = NULL;
    int width = 0; /* positions a run */
#ifdef NRT_X86_AVX2
    if (have_avx2())
        tile = conv_fwd_tile_avx2, width = 8;
#endif
#ifdef NRT_X86_AVX512
    if (g->dot != NRT_DOT_AVX2 && have_avx512())
        tile = conv_fwd_tile_avx512, width = 16;
#endif
    /* AVX-512 masks a row's last run (cnn101's rows of 30: 16 + 14);
     * AVX2, whole runs of 8 alone */
    if (!tile || !dot_fp32(g->dot) || g->sw != 1 || (width == 8 && g->ow % width) || k > KC ||
        n <= 0 || g->o <= 0 || g->oh <= 0)
        return -1;
    const struct conv_src s = conv_src_of(g, n, xp);
    const size_t np = (size_t)n * g->oh * g->ow;
    float *pw = calloc((size_t)nob * k * FW_OB, sizeof *pw); /* rows past O: zeros */
    if (!pw)
        return -1;
    for (int o = 0; o < g->o; o++)
        for (int p = 0; p < k; p++)
            pw[((size_t)(o / FW_OB) * k + p) * FW_OB + o % FW_OB] = w[(size_t)o * k + p];
    size_t roff[KC];
    for (int p = 0; p < k; p++)
        roff[p] = conv_row(&s, p);
    const int per_row = (g->ow + width - 1) / width; /* runs an output row */
    const long runs = (long)n * g->oh * per_row, rblocks = (runs + FW_VB - 1) / FW_VB;
    const long items = rblocks * nob; /* item q: runs of block q / nob, channels of q % nob */
    NRT_OMP(omp parallel for schedule(static) if ((double)np * g->o * k >= PAR_MIN_GEMM))
    for (long q = 0; q < items; q++) {
        const long r0 = q / nob * FW_VB;
        const int ob = (int)(q % nob), nv = runs - r0 < FW_VB ? (int)(runs - r0) : FW_VB;
        const int no = g->o - ob * FW_OB < FW_OB ? g->o - ob * FW_OB : FW_OB;
        const float *src[FW_VB];
        float *dst[FW_VB];
        int lanes[FW_VB];
        for (int v = 0; v < FW_VB; v++) {
            const long r = r0 + (v < nv ? v : 0); /* past the last run: its first again, not stored */
            const int x0 = (int)(r % per_row) * width;
            const size_t j = (size_t)(r / per_row) * g->ow + x0; /* its first position */
            int run;
            src[v] = xp + conv_pos(&s, (int)j, &run);
            dst[v] = y + (size_t)ob * FW_OB * np + j;
            lanes[v] = run < width ? run : width;
        }
        tile(k, pw + (size_t)ob * k * FW_OB, b ? b + ob * FW_OB : NULL, src, roff, dst, np, no,
             nv, lanes);
    }
    free(pw);
    return 0;
#else
    (void)g, (void)n, (void)w, (void)b, (void)xp, (void)y;
    return -1;
#endif
}

/* ---------------------- Winograd F(4x4, 5x5), F(2x2, 5x5), F(4x4, 3x3) */

/* A stride-1 convolution with 16 channels or more in (3 for a 5x5) and
 * 16 or more out, padded by less than the kernel, 5x5 (cifar10's conv1's
 * forward pass, conv2 and conv3) or 3x3 on an
 * output plane of 8x8 or more (resnet20's stride-1 layers, cnn101's conv2
 * and its input gradient, a 3x3 padded by 2),
 * in Lavin and Gray's minimal filtering F(m x m, r x r), m = 2 or 4: each m x m
 * block of an output plane (a tile) comes from the n x n block of the padded
 * input under it (n = m + r - 1: 8 for F(4x4, 5x5), else 6), as
 *
 *     Y = A^T [ sum over c of (G g G^T) (.) (B^T d B) ] A,
 *
 * so that the sums over the input channels are n n products [O, C] x [C,
 * tiles]: 64 multiply-adds a tile of 16 outputs and channel pair where the
 * direct sum does 400 (F(4x4, 5x5)), 36 a tile of 4 where it does 100
 * (F(2x2, 5x5), on planes under 3 across) or a tile of 16 where it does
 * 144 (F(4x4, 3x3)).  The 6x6 forms take the points 0, 1, -1, 2, -2 and
 * infinity, and so one B^T (F(4x4, 3x3)'s), F(4x4, 5x5) those and 1/2 and
 * -1/2 (F(6x6, 3x3)'s B^T); G carries the fractions.
 * The input gradient is the transposed convolution's forward pass in this
 * form (conv_winograd with flipped kernels), the weight gradient the form's
 * own gradient (conv_dw_winograd).  The transforms cost precision: against
 * the exact sums, relative to the sums of the terms' magnitudes, outputs,
 * dx and dW lie 1e-6 to 4e-6 away, F(4x4, 5x5)'s as F(2x2, 5x5)'s
 * (tests/unit/test_kernels), the direct
 * sums 1e-7 (fp32 either way): far below what a step's loss notices.  Each
 * result is one fixed sequence of operations, whichever thread runs it; the
 * transforms are AVX2's wherever they run, and the products, AVX-512's on
 * such cpus, sum in the same order as AVX2's, so that the bits do not
 * depend on the instruction set either (test_kernels_avx512emu checks it
 * on any AVX2 cpu).  cifar10 (AMD Zen 3, one thread): conv2's forward
 * pass 8.3 ms on oneDNN, 5.2 here (F(2x2, 5x5)); dW 10.2 and 6.6; the
 * whole step 60 -> 42.5 ms; on AMD Zen 4 (AVX-512) 41.0 -> 32.7 ms; Intel
 * Xeon (AMX), one thread: 36.5 ms (oneDNN's 5x5 passes) -> 28.0
 * (F(4x4, 5x5)).
 *
 * The work goes in blocks of WG_TB tiles (any samples'): the block's n n x
 * C transformed inputs (v, [n n][C][WG_TB], in L2), then WG_OC output
 * channels at a time the n n products, WG_OB channels a run (m,
 * [n n][WG_OC][WG_TB]), and their output transforms.  The transformed
 * weights (u, [n n][O][C], O up to whole WG_OB) are made once a call. */
#ifdef NRT_X86_AVX2
#define WG_TB 24 /* tiles a block: a micro-kernel run */
#define WG_OB 4  /* output channels a run */
#define WG_OC 16 /* output channels a chunk (the runs over one x) */

/* G k for the r taps (5 or 3) k[0], k[ks], ... of a kernel's row or
 * column, into out[0], out[os], ... out[(n - 1) os], n = 6 or 8 (the
 * window's side).  n = 6: G's rows, scaled so that
 * B^T is in integers, are the taps' polynomial at the points 0, 1, -1, 2,
 * -2 times 1/4, -1/6, -1/6, 1/24 and 1/24, and its leading coefficient
 * (for r = 5: (1/4, 0, 0, 0, 0), -1/6 (1, 1, 1, 1, 1), -1/6 (1, -1, 1, -1,
 * 1), 1/24 (1, 2, 4, 8, 16), 1/24 (1, -2, 4, -8, 16), (0, 0, 0, 0, 1)),
 * taken here as sums of the even and the odd taps.  n = 8 (F(4x4, 5x5),
 * the points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity): (1, 0, 0, 0, 0),
 * -2/9 (1, 1, 1, 1, 1), -2/9 (1, -1, 1, -1, 1), 1/90 (1, 2, 4, 8, 16),
 * 1/90 (1, -2, 4, -8, 16), 2/45 (16, 8, 4, 2, 1), 2/45 (16, -8, 4, -2, 1),
 * (0, 0, 0, 0, 1).  Eight kernels', one a lane. */
__attribute__((target("avx2"), always_inline)) static inline void
wg_g(const v8f *k, size_t ks, int r, int n, v8f *out, size_t os)
{
    const v8f zero = {0};
    const v8f k0 = k[0], k1 = k[ks], k2 = k[2 * ks], k3 = r > 3 ? k[3 * ks] : zero,
              k4 = r > 4 ? k[4 * ks] : zero;
    const v8f e = k0 + k2 + k4, d = k1 + k3;
    const v8f e4 = k0 + 4.0f * k2 + 16.0f * k4, d4 = 2.0f * k1 + 8.0f * k3;
    if (n == 8) {
        const v8f eh = 16.0f * k0 + 4.0f * k2 + k4, dh = 8.0f * k1 + 2.0f * k3;
        out[0] = k0;
        out[os] = (e + d) * (-2.0f / 9);
        out[2 * os] = (e - d) * (-2.0f / 9);
        out[3 * os] = (e4 + d4) * (1.0f / 90);
        out[4 * os] = (e4 - d4) * (1.0f / 90);
        out[5 * os] = (eh + dh) * (2.0f / 45);
        out[6 * os] = (eh - dh) * (2.0f / 45);
        out[7 * os] = k4;
        return;
    }
    out[0] = k0 * (1.0f / 4);
    out[os] = (e + d) * (-1.0f / 6);
    out[2 * os] = (e - d) * (-1.0f / 6);
    out[3 * os] = (e4 + d4) * (1.0f / 24);
    out[4 * os] = (e4 - d4) * (1.0f / 24);
    out[5 * os] = k[(size_t)(r - 1) * ks];
}

/* The kernels' transforms: u[x][o][c] = (G g G^T)[x / n][x % n] for the
 * r x r kernel g of output channel o and input channel c; o from o_n to
 * opad: zeros.  flip: the transposed convolution's kernels (dx), g of (o,
 * c) being w's (c, o) turned half round, w [c_n][o_n][r][r]; else w is
 * [o_n][c_n][r][r].  Eight input channels at a time, a vector's lanes,
 * each lane the operations of one kernel's transform: wg_weights8 those
 * of channels c0.. of output channel o. */
__attribute__((target("avx2"))) static void wg_weights8(int o_n, int c_n, int opad, int r,
                                                        int n, const float *w, int flip,
                                                        float *u, int o, int c0)
{
    const size_t rr = (size_t)r * r;
    const int nc = c_n - c0 < 8 ? c_n - c0 : 8; /* lanes of channels */
    const int nl = o < o_n ? nc : 0;             /* of them, w's (else zeros) */
    v8f k[5][5], t[8][5] = {{{0}}}, rt[8][8];     /* (t: r columns used) */
    for (int i = 0; i < r; i++)
        for (int j = 0; j < r; j++) {
            float lane[8] = {0};
            for (int l = 0; l < nl; l++) {
                const size_t c = (size_t)c0 + l;
                lane[l] = flip ? w[(c * o_n + o) * rr + (size_t)(r - 1 - i) * r +
                                   (size_t)(r - 1 - j)]
                               : w[((size_t)o * c_n + c) * rr + (size_t)i * r + j];
            }
            k[i][j] = _mm256_loadu_ps(lane);
        }
    for (int j = 0; j < r; j++) /* G g */
        wg_g(&k[0][j], 5, r, n, &t[0][j], 5);
    for (int a = 0; a < n; a++) /* (G g) G^T */
        wg_g(t[a], 1, r, n, rt[a], 1);
    for (int x = 0; x < n * n; x++) {
        float *d = u + ((size_t)x * opad + o) * c_n + c0, lane[8];
        if (nc == 8) {
            _mm256_storeu_ps(d, rt[x / n][x % n]);
            continue;
        }
        _mm256_storeu_ps(lane, rt[x / n][x % n]);
        memcpy(d, lane, (size_t)nc * sizeof *d);
    }
}

/* (the loop in a function without vectors of its own: clang's outlined
 * OpenMP body does not inherit a function's target) */
static void wg_weights(int o_n, int c_n, int opad, int r, int n, const float *w, int flip,
                       float *u)
{
    NRT_OMP(omp parallel for schedule(static) if ((double)opad * c_n >= 4096))
    for (int o = 0; o < opad; o++)
        for (int c0 = 0; c0 < c_n; c0 += 8)
            wg_weights8(o_n, c_n, opad, r, n, w, flip, u, o, c0);
}

struct wg {
    const float *xp, *u, *b;
    float *y;
    int m;                  /* a tile's outputs a side: 2 (F(2x2, 5x5)) or 4 */
    int n;                  /* its window's side, m + r - 1: 6, or 8 (F(4x4, 5x5)) */
    const int *lane;        /* wg_lane2 or wg_lane4 */
    int c, o, opad, oh, ow;
    long tiles, tw, tplane; /* tiles: all, a row's, a plane's (the last ones in part) */
    size_t wp, hw, cs;      /* the padded input's row, plane, channel */
    size_t np;              /* an output channel's positions */
};

/* Tile t's window origin in a channel of xp, and its first output in a
 * channel of y. */
static size_t wg_in(const struct wg *g, long t)
{
    const long r = t % g->tplane;
    return (size_t)(t / g->tplane) * g->hw + (size_t)(r / g->tw) * g->m * g->wp +
           (size_t)(r % g->tw) * g->m;
}

/* Tile t's outputs in the plane, rows and columns (m, or fewer for the
 * last tiles of a plane that is not whole tiles). */
static void wg_part(const struct wg *g, long t, int *rows, int *cols)
{
    const long r = t % g->tplane;
    const int y = (int)(r / g->tw) * g->m, x = (int)(r % g->tw) * g->m;
    *rows = g->oh - y < g->m ? g->oh - y : g->m;
    *cols = g->ow - x < g->m ? g->ow - x : g->m;
}

static size_t wg_out(const struct wg *g, long t)
{
    const long r = t % g->tplane;
    return (size_t)(t / g->tplane) * g->oh * g->ow + (size_t)(r / g->tw) * g->m * g->ow +
           (size_t)(r % g->tw) * g->m;
}

/* B^T r for eight tiles at once: r[j] holds entry j of each tile's run of
 * n (6 or 8).  n = 8: B^T's rows are those of the points' polynomials
 * (wg_g's leading coefficients undone), each pair at +-p as an even part
 * plus or minus an odd one: (1, 0, -21/4, 0, 21/4, 0, -1, 0), (0, 1, 1,
 * -17/4, -17/4, 1, 1, 0) and (0, -1, 1, 17/4, -17/4, -1, 1, 0) (+-1),
 * (0, 1/2, 1/4, -5/2, -5/4, 2, 1, 0) and its odd part negated (+-2), (0,
 * 2, 4, -5/2, -5, 1/2, 1, 0) and its odd part negated (+-1/2), (0, -1, 0,
 * 21/4, 0, -21/4, 0, 1). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_bt(const v8f *r, int n, v8f *u)
{
    if (n == 8) {
        const v8f e1 = (r[2] + r[6]) - 4.25f * r[4], o1 = (r[1] + r[5]) - 4.25f * r[3];
        const v8f e2 = (0.25f * r[2] + r[6]) - 1.25f * r[4],
                  o2 = (0.5f * r[1] + 2.0f * r[5]) - 2.5f * r[3];
        const v8f eh = (4.0f * r[2] + r[6]) - 5.0f * r[4],
                  oh = (2.0f * r[1] + 0.5f * r[5]) - 2.5f * r[3];
        u[0] = (r[0] - r[6]) + 5.25f * (r[4] - r[2]);
        u[1] = e1 + o1, u[2] = e1 - o1;
        u[3] = e2 + o2, u[4] = e2 - o2;
        u[5] = eh + oh, u[6] = eh - oh;
        u[7] = (r[7] - r[1]) + 5.25f * (r[3] - r[5]);
        return;
    }
    const v8f r42 = r[4] - r[2], d31 = r[3] - r[1];
    u[0] = 4.0f * r[0] - 5.0f * r[2] + r[4];
    u[1] = (r[3] + r[4]) - 4.0f * (r[1] + r[2]);
    u[2] = (r[4] - r[3]) + 4.0f * (r[1] - r[2]);
    u[3] = r42 + 2.0f * d31;
    u[4] = r42 - 2.0f * d31;
    u[5] = 4.0f * r[1] - 5.0f * r[3] + r[5];
}

/* The tiles of a block go eight to a vector, lane l holding tile lane[l]
 * of the eight: the order in which the shuffles below take a column of
 * every window from the rows of two runs of four tiles (tiles m columns
 * apart). */
static const int wg_lane2[8] = {0, 1, 4, 5, 2, 3, 6, 7}, wg_lane4[8] = {0, 4, 2, 6, 1, 5, 3, 7};

/* Eight columns of a row from p; those from avail on (where avail < 8)
 * read as zeros where cut says so, and are not read. */
__attribute__((target("avx2"), always_inline)) static inline v8f wg_load(const float *p,
                                                                         int avail, int cut)
{
    if (avail >= 8 || !cut)
        return _mm256_loadu_ps(p);
    if (avail <= 0)
        return (v8f){0};
    return _mm256_maskload_ps(p, lanes_below(avail));
}

/* What wg_load may read of row i of windows with rows rows and cols
 * columns in xp (full of them if none is cut off): cols, or 0 below the
 * plane; *cut where the rest must read as zeros and not be read (columns
 * cut off by the plane's edge, or the last channel's last row, at the end
 * of xp). */
static inline int wg_avail(int i, int rows, int cols, int full, int last_channel, int *cut)
{
    if (i >= rows) { /* below the plane: zeros */
        *cut = 1;
        return 0;
    }
    *cut = cols < full || (last_channel && i == rows - 1);
    return cols;
}

/* The block of tiles from t0: v[x][c][l0 + l] = (B^T d B)[x / n][x % n] of
 * the n x n window d in channel c of tile t0 + l0 + lane[l] (past the last tile:
 * the last one's).  Where the eight tiles are two runs of four, each in a
 * row (cifar10's conv2: a row of eight; conv3 and resnet20's layers: two
 * rows of four or a row of eight), the windows' column j of a row comes
 * from the two runs' rows by shuffles of a few loads (for m = 2 every
 * other column of two loads); else each window's row is loaded and the
 * eight transposed.  (n a constant: wg_input's.) */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_input_n(const struct wg *g, int n, long t0, float *v)
{
    const float *in[WG_TB];
    int run[WG_TB / 8], wrows[WG_TB], wcols[WG_TB]; /* a window's rows and columns in xp */
    for (int l = 0; l < WG_TB; l++) {
        const long t = t0 + l < g->tiles ? t0 + l : g->tiles - 1;
        int rows, cols;
        in[l] = g->xp + wg_in(g, t);
        wg_part(g, t, &rows, &cols);
        wrows[l] = rows + n - g->m, wcols[l] = cols + n - g->m;
    }
    for (int l0 = 0; l0 < WG_TB; l0 += 8) /* two runs of four tiles, each in a row */
        run[l0 / 8] = (t0 + l0) % g->tw + 4 <= g->tw && (t0 + l0 + 4) % g->tw + 4 <= g->tw &&
                      t0 + l0 + 8 <= g->tiles;
    const int *lane = g->lane, mt = g->m;
    const size_t wp = g->wp, cs = g->cs, xs = (size_t)g->c * WG_TB; /* v's x apart */
    const int nc = g->c;
    for (int c = 0; c < nc; c++)
        for (int l0 = 0; l0 < WG_TB; l0 += 8) {
            v8f s[8][8];
            for (int i = 0; i < n; i++) { /* row i of the eight windows: r[j], column j */
                v8f r[8];
                const size_t at = (size_t)c * cs + (size_t)i * wp;
                const float *p = in[l0] + at, *p4 = in[l0 + 4] + at;
                if (run[l0 / 8] && c + 1 < nc) /* the next channel's rows, while these are worked */
                    _mm_prefetch((const char *)(p + cs), _MM_HINT_T0),
                        _mm_prefetch((const char *)(p4 + cs), _MM_HINT_T0);
                /* each run's columns in xp from its first window's (3 mt + n if
                 * its last tile is whole) */
                int cut, cut4;
                const int av = wg_avail(i, wrows[l0], 3 * mt + wcols[l0 + 3], 3 * mt + n,
                                        c == nc - 1, &cut),
                          av4 = wg_avail(i, wrows[l0 + 4], 3 * mt + wcols[l0 + 7], 3 * mt + n,
                                         c == nc - 1, &cut4);
                if (run[l0 / 8] && n == 6 && mt == 2) { /* up to each run's last column */
#pragma GCC unroll 3
                    for (int q = 0; q < 3; q++) {
                        const v8f a = wg_load(p + 2 * q, av - 2 * q, cut),
                                  b = wg_load(p4 + 2 * q, av4 - 2 * q, cut4);
                        r[2 * q] = _mm256_shuffle_ps(a, b, 0x88);
                        r[2 * q + 1] = _mm256_shuffle_ps(a, b, 0xdd);
                    }
                } else if (run[l0 / 8]) { /* m = 4: n - 4 columns past the last run's last */
                    for (int h = 0; h < 2; h++) { /* columns 0-3, then 4-5 (or 4-7) */
                        const float *ph = p + 4 * h, *p4h = p4 + 4 * h;
                        const int o = 4 * h;
                        const v8f a = wg_load(ph, av - o, cut), b = wg_load(ph + 8, av - o - 8, cut),
                                  e = wg_load(p4h, av4 - o, cut4),
                                  f = wg_load(p4h + 8, av4 - o - 8, cut4);
                        const v8f lo0 = _mm256_unpacklo_ps(a, e), lo1 = _mm256_unpacklo_ps(b, f);
                        r[4 * h] = _mm256_shuffle_ps(lo0, lo1, 0x44);
                        r[4 * h + 1] = _mm256_shuffle_ps(lo0, lo1, 0xee);
                        if (h == 0 || n == 8) {
                            const v8f hi0 = _mm256_unpackhi_ps(a, e),
                                      hi1 = _mm256_unpackhi_ps(b, f);
                            r[4 * h + 2] = _mm256_shuffle_ps(hi0, hi1, 0x44);
                            r[4 * h + 3] = _mm256_shuffle_ps(hi0, hi1, 0xee);
                        }
                    }
                } else {
                    for (int l = 0; l < 8; l++) { /* eight columns: where not cut,
                                                   * past the window the next row's
                                                   * (not used) */
                        const int k = l0 + lane[l];
                        int cut;
                        const int av = wg_avail(i, wrows[k], wcols[k], n, c == nc - 1, &cut);
                        r[l] = wg_load(in[k] + at, av, cut);
                    }
                    tr8x8(r);
                }
                wg_bt(r, n, s[i]);
            }
            float *vc = v + (size_t)c * WG_TB + l0;
#pragma GCC unroll 8
            for (int b = 0; b < n; b++) {
                v8f col[8], out[8];
#pragma GCC unroll 8
                for (int i = 0; i < n; i++)
                    col[i] = s[i][b];
                wg_bt(col, n, out);
#pragma GCC unroll 8
                for (int a = 0; a < n; a++)
                    _mm256_storeu_ps(vc + (size_t)(a * n + b) * xs, out[a]);
            }
        }
}

__attribute__((target("avx2,fma"))) static void wg_input(const struct wg *g, long t0, float *v)
{
    if (g->n == 8)
        wg_input_n(g, 8, t0, v);
    else
        wg_input_n(g, 6, t0, v);
}

/* m [WG_OB][WG_TB] = u [WG_OB][nc] v [nc][WG_TB]: the sums over c in
 * order, one multiply-add (fused) each. */
__attribute__((target("avx2,fma"))) static void wg_product(int nc, const float *u, const float *v,
                                                          float *m)
{
    for (int h = 0; h < WG_TB; h += 24) {
        v8f acc[WG_OB][3];
#pragma GCC unroll 4
        for (int a = 0; a < WG_OB; a++)
            acc[a][0] = acc[a][1] = acc[a][2] = (v8f){0};
        const float *vc = v + h;
        for (int c = 0; c < nc; c++, vc += WG_TB) {
            const v8f x0 = _mm256_loadu_ps(vc), x1 = _mm256_loadu_ps(vc + 8),
                      x2 = _mm256_loadu_ps(vc + 16);
#pragma GCC unroll 4
            for (int a = 0; a < WG_OB; a++) {
                const v8f ua = _mm256_broadcast_ss(u + (size_t)a * nc + c);
                acc[a][0] = _mm256_fmadd_ps(ua, x0, acc[a][0]);
                acc[a][1] = _mm256_fmadd_ps(ua, x1, acc[a][1]);
                acc[a][2] = _mm256_fmadd_ps(ua, x2, acc[a][2]);
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < WG_OB; a++)
            for (int q = 0; q < 3; q++)
                _mm256_storeu_ps(m + (size_t)a * WG_TB + h + 8 * q, acc[a][q]);
    }
}

/* A^T r (m values) for eight tiles: r[j], entry j of a run of n; A^T's
 * rows are the powers 0 to m - 1 of the points 0, 1, -1, 2, -2 (and 1/2,
 * -1/2 where n = 8), and the last row takes r[n - 1] too (for m = 2: (1,
 * 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 1)). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_at(const v8f *r, int m, int n, v8f *y)
{
    if (n == 8) { /* m = 4 */
        const v8f s12 = r[1] + r[2], d12 = r[1] - r[2], s34 = r[3] + r[4], d34 = r[3] - r[4],
                  s56 = r[5] + r[6], d56 = r[5] - r[6];
        y[0] = ((r[0] + s12) + s34) + s56;
        y[1] = (d12 + 2.0f * d34) + 0.5f * d56;
        y[2] = (s12 + 4.0f * s34) + 0.25f * s56;
        y[3] = ((d12 + 8.0f * d34) + 0.125f * d56) + r[7];
        return;
    }
    y[0] = (((r[0] + r[1]) + (r[2] + r[3])) + r[4]);
    if (m == 2) {
        y[1] = ((r[1] - r[2]) + 2.0f * (r[3] - r[4])) + r[5];
        return;
    }
    const v8f s12 = r[1] + r[2], d12 = r[1] - r[2], s34 = r[3] + r[4], d34 = r[3] - r[4];
    y[1] = d12 + 2.0f * d34;
    y[2] = s12 + 4.0f * s34;
    y[3] = (d12 + 8.0f * d34) + r[5];
}

/* Output channels o0 .. o0 + nm - 1 of the block's tiles from t0: A^T m A
 * + the bias, into y; m [n n][WG_OC][WG_TB].  (n a constant: wg_output's.) */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_output_n(const struct wg *g, int n, long t0, int o0, int nm, const float *m)
{
    const size_t ow = (size_t)g->ow;
    const int mt = g->m;
    size_t out[WG_TB];
    int rows[WG_TB], cols[WG_TB]; /* a tile's outputs in the plane */
    for (int l = 0; l < WG_TB && t0 + l < g->tiles; l++) {
        out[l] = wg_out(g, t0 + l);
        wg_part(g, t0 + l, &rows[l], &cols[l]);
    }
    const int nl = g->tiles - t0 < WG_TB ? (int)(g->tiles - t0) : WG_TB;
    for (int a = 0; a < nm && o0 + a < g->o; a++) {
        const v8f bias = _mm256_set1_ps(g->b ? g->b[o0 + a] : 0.0f);
        float *yo = g->y + (size_t)(o0 + a) * g->np;
        for (int l0 = 0; l0 < nl; l0 += 8) {
            v8f t[4][8], y[4][4]; /* t[q][i]: column q of row i's A^T; y[q][p]: output (p, q) */
            for (int i = 0; i < n; i++) {
                v8f r[8], q[4];
#pragma GCC unroll 8
                for (int j = 0; j < n; j++)
                    r[j] = _mm256_loadu_ps(m + ((size_t)(i * n + j) * WG_OC + a) * WG_TB + l0);
                wg_at(r, mt, n, q);
                for (int c = 0; c < mt; c++)
                    t[c][i] = q[c];
            }
            for (int c = 0; c < mt; c++)
                wg_at(t[c], mt, n, y[c]);
            if (mt == 4) { /* each row of a tile's four outputs in one store */
                for (int p = 0; p < 4; p++) {
                    const v8f y0 = y[0][p] + bias, y1 = y[1][p] + bias, y2 = y[2][p] + bias,
                              y3 = y[3][p] + bias;
                    const v8f u0 = _mm256_unpacklo_ps(y0, y1), u1 = _mm256_unpacklo_ps(y2, y3),
                              u2 = _mm256_unpackhi_ps(y0, y1), u3 = _mm256_unpackhi_ps(y2, y3);
                    const v8f s[4] = {
                        _mm256_shuffle_ps(u0, u1, 0x44), _mm256_shuffle_ps(u0, u1, 0xee),
                        _mm256_shuffle_ps(u2, u3, 0x44), _mm256_shuffle_ps(u2, u3, 0xee)};
                    for (int l = 0; l < 8; l++) { /* lane l's row: s[l % 4]'s half l / 4 */
                        const int k = l0 + g->lane[l];
                        if (k >= nl || p >= rows[k])
                            continue;
                        const __m128 row = l < 4 ? _mm256_castps256_ps128(s[l])
                                                 : _mm256_extractf128_ps(s[l - 4], 1);
                        float *d = yo + out[k] + (size_t)p * ow;
                        if (cols[k] == 4) {
                            _mm_storeu_ps(d, row);
                        } else if (cols[k] == 1) { /* the plane's last columns */
                            _mm_store_ss(d, row);
                        } else {
                            _mm_storel_pi((__m64 *)(void *)d, row);
                            if (cols[k] == 3)
                                _mm_store_ss(d + 2, _mm_movehl_ps(row, row));
                        }
                    }
                }
                continue;
            }
            float o[4][8];
            _mm256_storeu_ps(o[0], y[0][0] + bias);
            _mm256_storeu_ps(o[1], y[1][0] + bias);
            _mm256_storeu_ps(o[2], y[0][1] + bias);
            _mm256_storeu_ps(o[3], y[1][1] + bias);
            for (int l = 0; l < 8; l++) {
                const int k = l0 + g->lane[l];
                if (k >= nl)
                    continue;
                float *d = yo + out[k];
                d[0] = o[0][l];
                if (cols[k] > 1)
                    d[1] = o[1][l];
                if (rows[k] > 1) {
                    d[ow] = o[2][l];
                    if (cols[k] > 1)
                        d[ow + 1] = o[3][l];
                }
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void wg_output(const struct wg *g, long t0, int o0,
                                                         int nm, const float *m)
{
    if (g->n == 8)
        wg_output_n(g, 8, t0, o0, nm, m);
    else
        wg_output_n(g, 6, t0, o0, nm, m);
}

/* The threads a pass's team takes. */
static int wg_team(void)
{
#ifdef _OPENMP
    if (!omp_in_parallel())
        return omp_get_max_threads();
#endif
    return 1;
}

/* ... and which of them runs this. */
static int wg_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* floats floats: the net's workspace (ws_of's), or else *own, allocated
 * here (the caller frees it; NULL where the workspace served). */
static float *wg_buffer(const nrt_conv *ws_of, size_t floats, float **own)
{
    const size_t bytes = floats * sizeof(float);
    float *ws = nrt_conv_workspace(ws_of, bytes);
    *own = ws ? NULL : aligned_alloc(64, round_up(bytes, 64));
    return ws ? ws : *own;
}

/* The geometry of g's tiles of m x m outputs over n samples, and the
 * pass's operands (u: the caller's, once it has its buffer). */
static struct wg wg_of(const nrt_conv *g, int m, int n, const float *xp, const float *b,
                       float *y)
{
    const size_t wp = (size_t)g->ow + g->kw - 1, hw = ((size_t)g->oh + g->kh - 1) * wp;
    const long tw = (g->ow + m - 1) / m, tplane = (long)((g->oh + m - 1) / m) * tw;
    return (struct wg){xp, NULL, b, y, m, m + g->kh - 1, m == 2 ? wg_lane2 : wg_lane4, g->c, g->o,
                       (int)round_up((size_t)g->o, WG_OB), g->oh, g->ow, (long)n * tplane, tw,
                       tplane, wp, hw, (size_t)n * hw, (size_t)n * g->oh * g->ow};
}

/* The weight gradient's tiles from t0 (nl of them): y[x][l][o] = (A dy
 * A^T)[x / n][x % n], the n x n image of the m x m output gradient dy in
 * channel o of the tile at place l of wg_input's v (tile l0 + lane[l -
 * l0], l0 = l rounded down to 8; none past the last: zeros), from dyt
 * [positions][O] (the output gradient transposed), eight channels a
 * vector. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_a(const v8f *y, int m, int n, v8f *r)
{
    if (n == 6 && m == 2) { /* (m = 4 where n = 8) */
        r[0] = y[0], r[1] = y[0] + y[1], r[2] = y[0] - y[1];
        r[3] = y[0] + 2.0f * y[1], r[4] = y[0] - 2.0f * y[1], r[5] = y[1];
        return;
    }
    const v8f e = y[0] + y[2], d = y[1] + y[3], e4 = y[0] + 4.0f * y[2],
              d4 = 2.0f * y[1] + 8.0f * y[3];
    r[0] = y[0], r[1] = e + d, r[2] = e - d, r[3] = e4 + d4, r[4] = e4 - d4;
    if (n == 8) {
        const v8f eh = y[0] + 0.25f * y[2], dh = 0.5f * y[1] + 0.125f * y[3];
        r[5] = eh + dh, r[6] = eh - dh;
    }
    r[n - 1] = y[3];
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_dy_n(const struct wg *g, int n, long t0, int nl, const float *dyt, float *y)
{
    const size_t no = (size_t)g->o, ow = (size_t)g->ow, xs = (size_t)WG_TB * no;
    const int mt = g->m;
    for (int l = 0; l < (int)round_up((size_t)nl, 8); l++) {
        const int tile = l / 8 * 8 + g->lane[l % 8]; /* as wg_input's v */
        float *yl = y + (size_t)l * no;
        if (tile >= nl) { /* none: zeros, which add nothing */
            for (int x = 0; x < n * n; x++)
                memset(yl + (size_t)x * xs, 0, no * sizeof *yl);
            continue;
        }
        const float *d = dyt + wg_out(g, t0 + tile) * no;
        int nr, nq; /* the tile's outputs in the plane; past them, zeros */
        wg_part(g, t0 + tile, &nr, &nq);
        for (size_t o = 0; o < no; o += 8) {
            v8f rows[4][8]; /* each output row's A dy */
            for (int p = 0; p < mt; p++) {
                v8f yp[4] = {{0}};
                for (int q = 0; q < nq && p < nr; q++)
                    yp[q] = _mm256_loadu_ps(d + ((size_t)p * ow + q) * no + o);
                wg_a(yp, mt, n, rows[p]);
            }
#pragma GCC unroll 8
            for (int b = 0; b < n; b++) {
                v8f r[8], col[4] = {{0}};
                for (int p = 0; p < mt; p++)
                    col[p] = rows[p][b];
                wg_a(col, mt, n, r);
#pragma GCC unroll 8
                for (int a = 0; a < n; a++)
                    _mm256_storeu_ps(yl + (size_t)(a * n + b) * xs + o, r[a]);
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void wg_dy(const struct wg *g, long t0, int nl,
                                                     const float *dyt, float *y)
{
    if (g->n == 8)
        wg_dy_n(g, 8, t0, nl, dyt, y);
    else
        wg_dy_n(g, 6, t0, nl, dyt, y);
}

/* du [4][no] (rows no apart, from column o0, 16 of them) += v [4][WG_TB]
 * (rows WG_TB apart) y [nl][no]: each sum over the tiles in order, one
 * multiply-add (fused) a tile. */
__attribute__((target("avx2,fma"))) static void wg_dw_product(int nl, const float *v,
                                                             const float *y, size_t no,
                                                             float *du)
{
    v8f acc[4][2];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        acc[a][0] = _mm256_loadu_ps(du + a * no), acc[a][1] = _mm256_loadu_ps(du + a * no + 8);
    for (int l = 0; l < nl; l++, y += no) {
        const v8f y0 = _mm256_loadu_ps(y), y1 = _mm256_loadu_ps(y + 8);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const v8f va = _mm256_broadcast_ss(v + (size_t)a * WG_TB + l);
            acc[a][0] = _mm256_fmadd_ps(va, y0, acc[a][0]);
            acc[a][1] = _mm256_fmadd_ps(va, y1, acc[a][1]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        _mm256_storeu_ps(du + a * no, acc[a][0]), _mm256_storeu_ps(du + a * no + 8, acc[a][1]);
}

#ifdef NRT_X86_AVX512
/* wg_product for rows (4 or 8) output channels on AVX-512: a row's 24
 * tiles in a zmm and a ymm, each sum the same chain of multiply-adds (over
 * c in order, fused), so the same bits as wg_product's. */
AVX512_FMA_TARGET __attribute__((always_inline)) static inline void
wg_product512_rows(int rows, int nc, const float *u, const float *v, float *m)
{
    __m512 lo[8];
    __m256 hi[8];
#pragma GCC unroll 8
    for (int a = 0; a < rows; a++)
        lo[a] = _mm512_setzero_ps(), hi[a] = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++, v += WG_TB) {
        const __m512 x0 = _mm512_loadu_ps(v);
        const __m256 x1 = _mm256_loadu_ps(v + 16);
#pragma GCC unroll 8
        for (int a = 0; a < rows; a++) {
            const float ua = u[(size_t)a * nc + c];
            lo[a] = _mm512_fmadd_ps(_mm512_set1_ps(ua), x0, lo[a]);
            hi[a] = _mm256_fmadd_ps(_mm256_set1_ps(ua), x1, hi[a]);
        }
    }
#pragma GCC unroll 8
    for (int a = 0; a < rows; a++)
        _mm512_storeu_ps(m + (size_t)a * WG_TB, lo[a]),
            _mm256_storeu_ps(m + (size_t)a * WG_TB + 16, hi[a]);
}

/* m [rows][WG_TB] = u [rows][nc] v [nc][WG_TB], rows 4 or 8 */
AVX512_FMA_TARGET static void wg_product512(int rows, int nc, const float *u, const float *v,
                                            float *m)
{
    if (rows == 8)
        wg_product512_rows(8, nc, u, v, m);
    else
        wg_product512_rows(WG_OB, nc, u, v, m);
}

/* wg_dw_product for 32 columns (o0 to o0 + 31) on AVX-512: two zmm a row,
 * each sum the same chain as there. */
AVX512_FMA_TARGET static void wg_dw_product512(int nl, const float *v, const float *y, size_t no,
                                               float *du)
{
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        acc[a][0] = _mm512_loadu_ps(du + a * no), acc[a][1] = _mm512_loadu_ps(du + a * no + 16);
    for (int l = 0; l < nl; l++, y += no) {
        const __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const __m512 va = _mm512_set1_ps(v[(size_t)a * WG_TB + l]);
            acc[a][0] = _mm512_fmadd_ps(va, y0, acc[a][0]);
            acc[a][1] = _mm512_fmadd_ps(va, y1, acc[a][1]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        _mm512_storeu_ps(du + a * no, acc[a][0]), _mm512_storeu_ps(du + a * no + 16, acc[a][1]);
}
#endif

/* Whether the form's products run on AVX-512 (wg_product512,
 * wg_dw_product512) rather than AVX2: where the cpu has it and g's dot
 * lets them. */
static int wg_zmm(const nrt_conv *g)
{
    return g->dot != NRT_DOT_AVX2 && have_avx512();
}

/* Whether NETRT_CPU_CONV lets g run in Winograd's form: builtin and auto
 * do, on AVX-512 too, where the form's products are wg_product512's
 * (bench/conv_libs.sh, AMD Zen 4, one thread: cifar10's conv2 forward
 * 4.9 ms against oneDNN's 6.2, dW 5.6 and 6.5, dx 4.9 and 6.3; cnn101's
 * conv2 forward 1.18 and 1.70). */
static int wg_mode_allows(void)
{
    const int mode = nrt_conv_mode();
    return mode == NRT_CONV_BUILTIN || mode == NRT_CONV_AUTO;
}
#endif /* NRT_X86_AVX2 */

/* The form's tile for g's kernel and output plane, its outputs a side (0:
 * none).  3x3: F(4x4, 3x3) on planes of 8x8 or more; digits_cnn's 4x4
 * plane of one tile a sample gained nothing measurable, and its Adam's
 * first step, which turns a gradient near 0 into +-lr, took the form's
 * 1e-6 past tests/pytorch.sh's tolerance on its weights.  5x5: F(4x4, 5x5)
 * on a plane of 3x3 or more (fewer products an output than F(2x2, 5x5)'s
 * even where most of its one tile is past the plane), else F(2x2, 5x5); a
 * plane below 3 rounded up to whole tiles of 2 stays below 3, and one of 3
 * or more to whole tiles of 4 stays there: a plane in part is one of whole
 * tiles in the same form (test_kernels' check_wg_parts). */
#ifdef NRT_X86_AVX2
static int wg_tile(const nrt_conv *g)
{
    if (g->kh == 5)
        return g->oh >= 3 && g->ow >= 3 ? 4 : 2;
    return g->kh == 3 && g->oh >= 8 && g->ow >= 8 ? 4 : 0;
}
#endif

/* Whether NETRT_CPU_CONV=auto leaves g to oneDNN's direct sums rather than
 * Winograd's form: on an Intel cpu with AVX-512, whose multiply-adds are
 * a full 512 bits wide (two a cycle on a Xeon), where oneDNN takes g and
 * is loaded.  bench/conv_libs.sh, Intel Xeon (AMX), one thread, oneDNN
 * with its reorders against the form: cifar10's conv2 4.11 / 4.19 / 4.11
 * ms against 4.29 / 4.52 / 4.61 (forward, dW, dx), conv3 1.81 / 2.10 /
 * 1.84 against 1.85 / 2.55 / 2.34, cnn101's conv2 1.26 / 1.31 / 1.20
 * against 1.18 / 1.66 / 1.44; whole steps 2-6 % faster.  AMD's Zen 4
 * runs AVX-512 in two 256-bit halves, and there the form wins every pass
 * by 4-50 % (2026-12-04).  Zen 5, full width too, is not measured: the
 * form.  F(4x4, 5x5), a sixth of the direct sums' multiply-adds, is
 * ahead on the Xeon too (cifar10's step, one thread: 28.0 ms against 36.5
 * with oneDNN's 5x5 passes), and keeps its layers. */
static int dnnl_first(const nrt_conv *g)
{
#ifdef NRT_X86_AVX2
    return cpu_bits.intel && g->dot != NRT_DOT_AVX2 && have_avx512() &&
           nrt_conv_mode() == NRT_CONV_AUTO && !(g->kh == 5 && wg_tile(g) == 4) &&
           nrt_dnnl_wanted(g) && nrt_dnnl_ready(g);
#else
    (void)g;
    return 0;
#endif
}

/* Whether the convolution g of n samples runs in Winograd's form: a
 * tile's outputs a side, m (F(2x2, 5x5): 2, F(4x4, 3x3) and F(4x4, 5x5):
 * 4), or 0. */
static int wg_wanted(const nrt_conv *g, int n)
{
#ifdef NRT_X86_AVX2
    const int m = wg_tile(g);
    /* any padding the transposed convolution has, up to the kernel less
     * 1 (xp is padded already); with more than half the kernel (the input
     * gradient of an unpadded layer: cnn101's conv2, a 3x3 padded by 2) a
     * tile's edge lies over zeros, and an output there of few terms gets
     * the rounding of the whole tile's: 1.6e-5 of its own terms'
     * magnitudes, 1e-6 of the tile's (test_kernels measures the form
     * against the tile's).  Channels in: 16 or more, but 3 for a 5x5,
     * whose form does a sixth of the direct sums' multiply-adds
     * (cifar10's first layer's forward pass, 3 channels in, in the form:
     * its step 29.5 -> 27.7 ms, Intel Xeon, one thread) */
    const int ok = m && have_avx2() && (g->dot == NRT_DOT_F32 || g->dot == NRT_DOT_AVX2) &&
                   g->kw == g->kh && g->sh == 1 && g->sw == 1 && g->ph < g->kh &&
                   g->pw < g->kw && g->c >= (g->kh == 5 ? 3 : 16) && g->o >= 16 &&
                   n > 0 && g->oh > 0 && g->ow > 0 && wg_mode_allows();
    return ok ? m : 0;
#else
    (void)g, (void)n;
    return 0;
#endif
}

#ifdef NRT_X86_AVX2
static int wg_forward(const nrt_conv *g, int mt, const nrt_conv *ws_of, int n, const float *w,
                      int flip, const float *b, const float *xp, float *y)
{
    struct wg s = wg_of(g, mt, n, xp, b, y);
    const int nt = wg_team(), opad = s.opad, zmm = wg_zmm(g);
    (void)zmm; /* (without AVX-512 code) */
    const size_t nn = (size_t)s.n * s.n; /* a window's values */
    const size_t nu = round_up(nn * opad * g->c, 16), nv = nn * g->c * WG_TB,
                 nm = nn * WG_OC * WG_TB, per = round_up(nv + nm, 16);
    float *own, *u = wg_buffer(ws_of, nu + (size_t)nt * per, &own);
    if (!u)
        return -1;
    float *blocks_ws = u + nu;
    s.u = u;
    wg_weights(g->o, g->c, opad, g->kh, s.n, w, flip, u);
    const long blocks = (s.tiles + WG_TB - 1) / WG_TB;
    NRT_OMP(omp parallel for num_threads(nt) schedule(static))
    for (long q = 0; q < blocks; q++) {
        float *v = blocks_ws + (size_t)wg_thread() * per, *m = v + nv;
        wg_input(&s, q * WG_TB, v);
        for (int o0 = 0; o0 < opad; o0 += WG_OC) {
            const int nm = opad - o0 < WG_OC ? opad - o0 : WG_OC;
            for (size_t x = 0; x < nn; x++) /* v's x in L1 for the chunk's runs */
                for (int a = 0; a < nm;) {
                    const float *ux = u + ((size_t)x * opad + o0 + a) * g->c,
                                *vx = v + (size_t)x * g->c * WG_TB;
                    float *mx = m + ((size_t)x * WG_OC + a) * WG_TB;
#ifdef NRT_X86_AVX512
                    if (zmm) { /* two runs at once where there are two */
                        const int rows = nm - a >= 2 * WG_OB ? 2 * WG_OB : WG_OB;
                        wg_product512(rows, g->c, ux, vx, mx);
                        a += rows;
                        continue;
                    }
#endif
                    wg_product(g->c, ux, vx, mx);
                    a += WG_OB;
                }
            wg_output(&s, q * WG_TB, o0, nm, m);
        }
    }
    free(own);
    return 0;
}
#endif

/* y [O, N*OH*OW] from xp as nrt_conv2d_fwd (flip: the kernels are the
 * transposed convolution's, as wg_weights), where the geometry and the cpu
 * allow it and its buffers can be had: 0; else -1, and the caller takes
 * another path.  The workspace is ws_of's (the net's).  On an output
 * plane that is not whole tiles (cnn101's 13x13), the last tiles of its
 * rows and columns are in part outside it: their windows read zeros past
 * the padded input's edges, and only their outputs inside the plane are
 * stored (wg_input, wg_output), which is the plane of whole tiles around
 * it computed from the input widened by zeros, without the copies. */
static int conv_winograd(const nrt_conv *g, const nrt_conv *ws_of, int n, const float *w,
                         int flip, const float *b, const float *xp, float *y)
{
#ifdef NRT_X86_AVX2
    const int mt = wg_wanted(g, n);
    return mt ? wg_forward(g, mt, ws_of, n, w, flip, b, xp, y) : -1;
#else
    (void)g, (void)ws_of, (void)n, (void)w, (void)flip, (void)b, (void)xp, (void)y;
    return -1;
#endif
}

#ifdef NRT_X86_AVX2
/* G^T d for the n values d[0], d[ds], ...: r values, out[0], out[os],
 * ... (wg_g's adjoint). */
static void wg_gt1(const float *d, size_t ds, int r, int n, float *out, size_t os)
{
    float t[5];
    if (n == 8) { /* r = 5 */
        const float d0 = d[0], d1 = d[ds] * (-2.0f / 9), d2 = d[2 * ds] * (-2.0f / 9),
                    d3 = d[3 * ds] * (1.0f / 90), d4 = d[4 * ds] * (1.0f / 90),
                    d5 = d[5 * ds] * (2.0f / 45), d6 = d[6 * ds] * (2.0f / 45);
        const float s12 = d1 + d2, m12 = d1 - d2, s34 = d3 + d4, m34 = d3 - d4, s56 = d5 + d6,
                    m56 = d5 - d6;
        t[0] = ((d0 + s12) + s34) + 16.0f * s56;
        t[1] = (m12 + 2.0f * m34) + 8.0f * m56;
        t[2] = (s12 + 4.0f * s34) + 4.0f * s56;
        t[3] = (m12 + 8.0f * m34) + 2.0f * m56;
        t[4] = ((s12 + 16.0f * s34) + s56) + d[7 * ds];
    } else {
        const float d0 = d[0] * (1.0f / 4), d1 = d[ds] * (-1.0f / 6),
                    d2 = d[2 * ds] * (-1.0f / 6), d3 = d[3 * ds] * (1.0f / 24),
                    d4 = d[4 * ds] * (1.0f / 24), d5 = d[5 * ds];
        const float s12 = d1 + d2, m12 = d1 - d2, s34 = d3 + d4, m34 = d3 - d4;
        t[0] = (d0 + s12) + s34;
        t[1] = m12 + 2.0f * m34;
        t[2] = s12 + 4.0f * s34;
        t[3] = m12 + 8.0f * m34;
        t[4] = s12 + 16.0f * s34;
        t[r - 1] += d5;
    }
    for (int i = 0; i < r; i++)
        out[(size_t)i * os] = t[i];
}

/* G^T d G, r x r from n x n (d's rows 8 apart, dw's r): the adjoint of
 * wg_weights' transform. */
static void wg_gt(const float d[8][8], int r, int n, float *dw)
{
    float t[5][8];
    for (int b = 0; b < n; b++) /* G^T d, column b */
        wg_gt1(&d[0][b], 8, r, n, &t[0][b], 8);
    for (int i = 0; i < r; i++) /* (G^T d) G, row i */
        wg_gt1(t[i], 1, r, n, dw + (size_t)i * r, 1);
}
#endif

/* nrt_conv2d_dw in Winograd's form, where conv_winograd's forward pass
 * runs, C a multiple of 4 and O of 16: the gradient of the forward form
 * (the same function of w in exact arithmetic, so the convolution's),
 *
 *     dW[o][c] = G^T [ sum over tiles of (A dy A^T)[o] (.) (B^T d B)[c] ] G,
 *
 * n n (36 or 64) products [C, tiles] x [tiles, O].  The tiles' sum is cut into
 * WG_PIECES pieces of whole blocks by the batch's size alone, each summed
 * in order on one thread, then the pieces in order: the same bits for any
 * number of threads.  0, or -1 where it does not run. */
#define WG_PIECES 8

#ifdef NRT_X86_AVX2
static int wg_dw(const nrt_conv *g, int mt, int n, const float *dy, const float *xp, float *dw)
{
    const int r = g->kh;
    const int nt = wg_team(), zmm = wg_zmm(g);
    (void)zmm; /* (without AVX-512 code) */
    const struct wg s = wg_of(g, mt, n, xp, NULL, NULL);
    const long blocks = (s.tiles + WG_TB - 1) / WG_TB;
    const int pieces = blocks < WG_PIECES ? (int)blocks : WG_PIECES;
    const size_t nn = (size_t)s.n * s.n; /* a window's values */
    const size_t no = (size_t)g->o, nc = (size_t)g->c, ndu = nn * nc * no;
    const size_t nv = nn * nc * WG_TB, per = round_up(nv + nn * WG_TB * no, 16);
    const size_t ndyt = round_up(s.np * no, 16);
    float *own, *dyt = wg_buffer(g, ndyt + (size_t)pieces * ndu + (size_t)nt * per, &own);
    if (!dyt)
        return -1;
    float *du = dyt + ndyt, *blocks_ws = du + (size_t)pieces * ndu;
    NRT_OMP(omp parallel for num_threads(nt) schedule(static))
    for (int part = 0; part < nt; part++) { /* dyt [positions][O] */
        const size_t x0 = s.np * part / nt, x1 = s.np * (part + 1) / nt;
        nrt_interleave(dy + x0, s.np, x1 - x0, g->o, dyt + x0 * no);
    }
    NRT_OMP(omp parallel for num_threads(nt) schedule(static))
    for (int p = 0; p < pieces; p++) {
        float *v = blocks_ws + (size_t)wg_thread() * per, *y = v + nv;
        float *dup = du + (size_t)p * ndu;
        memset(dup, 0, ndu * sizeof *dup);
        for (long q = blocks * p / pieces; q < blocks * (p + 1) / pieces; q++) {
            const long t0 = q * WG_TB;
            const int nl = s.tiles - t0 < WG_TB ? (int)(s.tiles - t0) : WG_TB;
            const int nl8 = (int)round_up((size_t)nl, 8); /* places in v: whole vectors */
            wg_input(&s, t0, v);
            wg_dy(&s, t0, nl, dyt, y);
            for (size_t x = 0; x < nn; x++)
                for (size_t c = 0; c < nc; c += 4)
                    for (size_t o = 0; o < no;) {
                        const float *vx = v + ((size_t)x * nc + c) * WG_TB,
                                    *yx = y + (size_t)x * WG_TB * no + o;
                        float *dx = dup + ((size_t)x * nc + c) * no + o;
#ifdef NRT_X86_AVX512
                        if (zmm && o + 32 <= no) {
                            wg_dw_product512(nl8, vx, yx, no, dx);
                            o += 32;
                            continue;
                        }
#endif
                        wg_dw_product(nl8, vx, yx, no, dx);
                        o += 16;
                    }
        }
    }
    for (int p = 1; p < pieces; p++) /* the pieces' sums, in order */
        for (size_t e = 0; e < ndu; e++)
            du[e] += du[(size_t)p * ndu + e];
    NRT_OMP(omp parallel for num_threads(nt) schedule(static))
    for (int o = 0; o < g->o; o++)
        for (size_t c = 0; c < nc; c++) {
            float d[8][8];
            for (size_t x = 0; x < nn; x++)
                d[x / s.n][x % s.n] = du[(x * nc + c) * no + (size_t)o];
            wg_gt(d, r, s.n, dw + ((size_t)o * nc + c) * (size_t)(r * r));
        }
    free(own);
    return 0;
}
#endif

/* ... where the output plane is not whole tiles, the tiles in part read
 * zeros past the plane's edges, of dy as of xp (the terms they add are 0:
 * wg_dy). */
static int conv_dw_winograd(const nrt_conv *g, int n, const float *dy, const float *xp,
                            float *dw)
{
#ifdef NRT_X86_AVX2
    const int mt = wg_wanted(g, n);
    return mt && g->c % 4 == 0 && g->o % 16 == 0 ? wg_dw(g, mt, n, dy, xp, dw) : -1;
#else
    (void)g, (void)n, (void)dy, (void)xp, (void)dw;
    return -1;
#endif
}

void nrt_conv2d_fwd(const nrt_conv *g, int n, const float *w, const float *b, const float *xp,
                    float *y)
{
    if (!dnnl_first(g) && conv_winograd(g, g, n, w, 0, b, xp, y) == 0)
        return;
    if (nrt_dnnl_wanted(g) && nrt_dnnl_fwd(g, n, w, b, xp, y) == 0)
        return;
    if (conv_fwd_direct(g, n, w, b, xp, y) == 0)
        return;
    const struct conv_src s = conv_src_of(g, n, xp);
    const int k = g->c * g->kh * g->kw, np = n * g->oh * g->ow;
    struct gemm gm = {.k = k, .alpha = 1.0f, .a = w, .c = y, .lda = k, .ldc = np, .cv = &s,
                      .dot = g->dot};
    if (g->o <= 0 || np <= 0)
        return;
    gemm_run(&gm, g->o, np);
    if (!b)
        return;
    NRT_OMP(omp parallel for schedule(static) if ((double)g->o * np >= 2 * PAR_MIN_WORK))
    for (int o = 0; o < g->o; o++) {
        float *r = y + (size_t)o * np;
        for (int j = 0; j < np; j++)
            r[j] += b[o];
    }
}

/* The weight gradient of a stride-1 convolution whose output rows hold 16
 * positions or more, without its columns: dW[o][r] sums, over the batch's
 * positions, dy[o][pos] times cols[r][pos], and along an output row both
 * are runs in memory (dy's row; the padded input's row under kernel offset
 * r), so the product reads them in place, sixteen positions at a time,
 * into sixteen partial sums (lanes) per element of dW.  The GEMM path packs
 * (transposes) the columns for every block of the sum, which costs as much
 * as its multiply-adds where dW is a first layer's ([32, 75]): cifar10's
 * conv1 took 2.09 ms that way, 1.38 this way, cnn101's 0.42 and 0.33 (AMD
 * Zen 5, one thread).
 *
 * The order of the sums, whatever the instruction set and the threads:
 * lane l of element (o, r) adds, from +0, the products at positions l,
 * l + 16, ... of the whole runs of sixteen of each output row, row after
 * row through a chunk of samples, then those of the rows' partial last
 * runs (zeros past each row's end) through the chunk, chunk after chunk;
 * dW is then the lanes summed pairwise (l + 8, + 4, + 2, + 1).  The lanes
 * are independent sums, so a kernel takes them sixteen (AVX-512), eight
 * (AVX2) or four (portable) at a time; each adds d * v with one rounding
 * (fused), the portable one with two, so that in fp32 it differs from the
 * others, as its GEMM does, and in bf16 (exact products) it does not. */
struct dw_direct {
    const struct conv_src *s; /* xp, and where its rows lie */
    const float *dy;
    const size_t *roff; /* row r of cols: xp + (a row's start) + roff[r] (conv_row) */
    size_t ld;          /* dy's rows (n*OH*OW) */
    int o, r;
    float *acc; /* [O][R][16]: the partial sums */
};

/* A tile of ob x rb elements of dW at (o0, r0): its rows of dy and of
 * cols; past dW's edges, the last real ones (computed, never stored). */
static void dw_tile_rows(const struct dw_direct *d, int o0, int ob, int r0, int rb,
                         const float **dyr, size_t *ro)
{
    for (int a = 0; a < ob; a++)
        dyr[a] = d->dy + (size_t)(o0 + a < d->o ? o0 + a : d->o - 1) * d->ld;
    for (int b = 0; b < rb; b++)
        ro[b] = d->roff[r0 + b < d->r ? r0 + b : d->r - 1];
}

/* Element (o, r)'s lanes from l0, or NULL past dW's edges. */
static float *dw_lanes(const struct dw_direct *d, int o, int r, int l0)
{
    return o < d->o && r < d->r ? d->acc + ((size_t)o * d->r + r) * 16 + l0 : NULL;
}

/* Samples [i0, i1) into the tile at (o0, r0): the rows' whole runs, or
 * (tail) their last, partial ones. */
typedef void dw_tile_fn(const struct dw_direct *d, int o0, int r0, int i0, int i1, int tail);

/* Portable: four lanes at a time, a 2 x 4 tile. */
#define DW_OB_GEN 2
#define DW_RB_GEN 4
static void dw_tile_generic(const struct dw_direct *d, int o0, int r0, int i0, int i1,
                            int tail)
{
    const float *dyr[DW_OB_GEN];
    size_t ro[DW_RB_GEN];
    dw_tile_rows(d, o0, DW_OB_GEN, r0, DW_RB_GEN, dyr, ro);
    const int xw = d->s->ow / 16 * 16, x0 = tail ? xw : 0, x1 = tail ? xw + 1 : xw;
    for (int l0 = 0; l0 < 16; l0 += 4) {
        const int w = tail ? d->s->ow - xw - l0 : 4; /* lanes with positions */
        if (w <= 0)
            break;
        v4f acc[DW_OB_GEN][DW_RB_GEN];
        for (int a = 0; a < DW_OB_GEN; a++)
            for (int b = 0; b < DW_RB_GEN; b++) {
                const float *p = dw_lanes(d, o0 + a, r0 + b, l0);
                acc[a][b] = p ? ld4(p) : (v4f){0};
            }
        for (int i = i0; i < i1; i++)
            for (int oy = 0; oy < d->s->oh; oy++) {
                const size_t dpos = ((size_t)i * d->s->oh + oy) * d->s->ow + l0;
                const float *s = d->s->xp + (size_t)i * d->s->hw + (size_t)oy * d->s->sh_wp + l0;
                for (int x = x0; x < x1; x += 16) {
                    v4f dv[DW_OB_GEN] = {{0}}, sv;
                    for (int a = 0; a < DW_OB_GEN; a++)
                        for (int l = 0; l < w && l < 4; l++)
                            dv[a][l] = dyr[a][dpos + x + l];
                    for (int b = 0; b < DW_RB_GEN; b++) {
                        sv = (v4f){0};
                        for (int l = 0; l < w && l < 4; l++)
                            sv[l] = s[ro[b] + x + l];
                        for (int a = 0; a < DW_OB_GEN; a++)
                            acc[a][b] += dv[a] * sv;
                    }
                }
            }
        for (int a = 0; a < DW_OB_GEN; a++)
            for (int b = 0; b < DW_RB_GEN; b++) {
                float *p = dw_lanes(d, o0 + a, r0 + b, l0);
                if (p)
                    memcpy(p, &acc[a][b], sizeof acc[a][b]);
            }
    }
}

#ifdef NRT_X86_AVX2
/* AVX2: eight lanes at a time, a 3 x 4 tile (twelve ymm sums). */
#define DW_OB_AVX2 3
#define DW_RB_AVX2 4
__attribute__((target("avx2,fma"), always_inline)) static inline void
dw_tile_avx2_body(const struct dw_direct *d, int o0, int r0, int i0, int i1, const int tail)
{
    const float *dyr[DW_OB_AVX2];
    size_t ro[DW_RB_AVX2];
    dw_tile_rows(d, o0, DW_OB_AVX2, r0, DW_RB_AVX2, dyr, ro);
    const int xw = d->s->ow / 16 * 16, x0 = tail ? xw : 0, x1 = tail ? xw + 1 : xw;
    for (int l0 = 0; l0 < 16; l0 += 8) {
        const int w = tail ? d->s->ow - xw - l0 : 8; /* lanes with positions */
        if (w <= 0)
            break;
        const __m256i m = lanes_below(w);
        v8f acc[DW_OB_AVX2][DW_RB_AVX2];
#pragma GCC unroll 4
        for (int a = 0; a < DW_OB_AVX2; a++)
#pragma GCC unroll 4
            for (int b = 0; b < DW_RB_AVX2; b++) {
                const float *p = dw_lanes(d, o0 + a, r0 + b, l0);
                acc[a][b] = p ? _mm256_loadu_ps(p) : _mm256_setzero_ps();
            }
        for (int i = i0; i < i1; i++)
            for (int oy = 0; oy < d->s->oh; oy++) {
                const size_t dpos = ((size_t)i * d->s->oh + oy) * d->s->ow + l0;
                const float *s = d->s->xp + (size_t)i * d->s->hw + (size_t)oy * d->s->sh_wp + l0;
                for (int x = x0; x < x1; x += 16) {
                    v8f dv[DW_OB_AVX2];
#pragma GCC unroll 4
                    for (int a = 0; a < DW_OB_AVX2; a++)
                        dv[a] = tail ? _mm256_maskload_ps(dyr[a] + dpos + x, m)
                                     : _mm256_loadu_ps(dyr[a] + dpos + x);
#pragma GCC unroll 4
                    for (int b = 0; b < DW_RB_AVX2; b++) {
                        const v8f sv = tail ? _mm256_maskload_ps(s + ro[b] + x, m)
                                            : _mm256_loadu_ps(s + ro[b] + x);
#pragma GCC unroll 4
                        for (int a = 0; a < DW_OB_AVX2; a++)
                            acc[a][b] = _mm256_fmadd_ps(dv[a], sv, acc[a][b]);
                    }
                }
            }
#pragma GCC unroll 4
        for (int a = 0; a < DW_OB_AVX2; a++)
#pragma GCC unroll 4
            for (int b = 0; b < DW_RB_AVX2; b++) {
                float *p = dw_lanes(d, o0 + a, r0 + b, l0);
                if (p)
                    _mm256_storeu_ps(p, acc[a][b]);
            }
    }
}

/* Whole runs and partial ones, each its own copy of the body (see
 * dw_tile_avx512). */
__attribute__((target("avx2,fma"))) static void
dw_tile_avx2(const struct dw_direct *d, int o0, int r0, int i0, int i1, int tail)
{
    if (tail)
        dw_tile_avx2_body(d, o0, r0, i0, i1, 1);
    else
        dw_tile_avx2_body(d, o0, r0, i0, i1, 0);
}
#endif

#ifdef NRT_X86_AVX512
/* AVX-512: the sixteen lanes at once, a 4 x 6 tile (24 zmm sums; with the
 * four rows of dy and a row of cols, 29 of the 32 registers).  Whole runs
 * are read unmasked: masked loads made it 1.6x slower on Zen 5.  The body
 * is inlined twice, whole runs and partial ones, so that each copy keeps
 * its sums in registers (one loop with both spilled them). */
#define DW_OB_AVX512 4
#define DW_RB_AVX512 6
AVX512_TARGET __attribute__((always_inline)) static inline void
dw_tile_avx512_body(const struct dw_direct *d, int o0, int r0, int i0, int i1, const int tail)
{
    const float *dyr[DW_OB_AVX512];
    size_t ro[DW_RB_AVX512];
    dw_tile_rows(d, o0, DW_OB_AVX512, r0, DW_RB_AVX512, dyr, ro);
    const int xw = d->s->ow / 16 * 16, x0 = tail ? xw : 0, x1 = tail ? xw + 1 : xw;
    const __mmask16 m = (__mmask16)((1u << (tail ? d->s->ow - xw : 0)) - 1u);
    __m512 acc[DW_OB_AVX512][DW_RB_AVX512];
#pragma GCC unroll 8
    for (int a = 0; a < DW_OB_AVX512; a++)
#pragma GCC unroll 8
        for (int b = 0; b < DW_RB_AVX512; b++) {
            const float *p = dw_lanes(d, o0 + a, r0 + b, 0);
            acc[a][b] = p ? _mm512_loadu_ps(p) : _mm512_setzero_ps();
        }
    for (int i = i0; i < i1; i++)
        for (int oy = 0; oy < d->s->oh; oy++) {
            const size_t dpos = ((size_t)i * d->s->oh + oy) * d->s->ow;
            const float *s = d->s->xp + (size_t)i * d->s->hw + (size_t)oy * d->s->sh_wp;
            for (int x = x0; x < x1; x += 16) {
                __m512 dv[DW_OB_AVX512];
#pragma GCC unroll 8
                for (int a = 0; a < DW_OB_AVX512; a++)
                    dv[a] = tail ? _mm512_maskz_loadu_ps(m, dyr[a] + dpos + x)
                                 : _mm512_loadu_ps(dyr[a] + dpos + x);
#pragma GCC unroll 8
                for (int b = 0; b < DW_RB_AVX512; b++) {
                    const __m512 sv = tail ? _mm512_maskz_loadu_ps(m, s + ro[b] + x)
                                           : _mm512_loadu_ps(s + ro[b] + x);
#pragma GCC unroll 8
                    for (int a = 0; a < DW_OB_AVX512; a++)
                        acc[a][b] = _mm512_fmadd_ps(dv[a], sv, acc[a][b]);
                }
            }
        }
#pragma GCC unroll 8
    for (int a = 0; a < DW_OB_AVX512; a++)
#pragma GCC unroll 8
        for (int b = 0; b < DW_RB_AVX512; b++) {
            float *p = dw_lanes(d, o0 + a, r0 + b, 0);
            if (p)
                _mm512_storeu_ps(p, acc[a][b]);
        }
}

AVX512_TARGET static void
dw_tile_avx512(const struct dw_direct *d, int o0, int r0, int i0, int i1, int tail)
{
    if (tail)
        dw_tile_avx512_body(d, o0, r0, i0, i1, 1);
    else
        dw_tile_avx512_body(d, o0, r0, i0, i1, 0);
}
#endif

/* How many samples' rows a tile runs through before the next tile: dy's
 * rows of a chunk (all O of them) are 64 Ki floats at most, 256 KiB,
 * which stay in L2 while every tile reads them.  By the shape alone, so
 * that the sums' order is. */
#define DW_CHUNK 65536

/* nrt_conv2d_dw by the direct path above, where it applies and its
 * buffers can be had: 0; else -1, and the caller takes the GEMM path. */
static int conv_dw_direct(const nrt_conv *g, int n, const float *dy, const float *xp,
                          float *dw)
{
    if (g->sw != 1 || g->ow < 16 || !dot_fp32(g->dot) || n <= 0 || g->oh <= 0)
        return -1;
    dw_tile_fn *tile = dw_tile_generic;
    int ob = DW_OB_GEN, rb = DW_RB_GEN;
#ifdef NRT_X86_AVX2
    if (have_avx2())
        tile = dw_tile_avx2, ob = DW_OB_AVX2, rb = DW_RB_AVX2;
#endif
#ifdef NRT_X86_AVX512
    if (g->dot != NRT_DOT_AVX2 && have_avx512())
        tile = dw_tile_avx512, ob = DW_OB_AVX512, rb = DW_RB_AVX512;
#endif
    const int r = g->c * g->kh * g->kw;
    const struct conv_src s = conv_src_of(g, n, xp);
    size_t *roff = malloc((size_t)r * sizeof *roff);
    float *acc = calloc((size_t)g->o * r * 16, sizeof *acc);
    if (!roff || !acc) {
        free(roff), free(acc);
        return -1;
    }
    for (int p = 0; p < r; p++)
        roff[p] = conv_row(&s, p);
    const struct dw_direct d = {&s, dy, roff, (size_t)n * g->oh * g->ow, g->o, r, acc};
    const int chunk = DW_CHUNK / (g->o * g->oh * g->ow) > 1 ? DW_CHUNK / (g->o * g->oh * g->ow) : 1;
    const int tr = (r + rb - 1) / rb, tiles = (g->o + ob - 1) / ob * tr;
    const int par = (double)n * g->o * g->oh * g->ow * r >= PAR_MIN_GEMM;
    (void)par;
    /* Each thread its run of tiles, every sample through them. */
    NRT_OMP(omp parallel if (par))
    {
        int t = 0, team = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        team = omp_get_num_threads();
#endif
        const int t0 = (int)((long)tiles * t / team), t1 = (int)((long)tiles * (t + 1) / team);
        for (int i0 = 0; i0 < n; i0 += chunk) {
            const int i1 = n - i0 < chunk ? n : i0 + chunk;
            for (int q = t0; q < t1; q++) {
                tile(&d, q / tr * ob, q % tr * rb, i0, i1, 0);
                if (g->ow % 16)
                    tile(&d, q / tr * ob, q % tr * rb, i0, i1, 1);
            }
        }
    }
    for (size_t e = 0; e < (size_t)g->o * r; e++) {
        const float *l = acc + e * 16;
        float s8[8], s4[4];
        for (int i = 0; i < 8; i++)
            s8[i] = l[i] + l[i + 8];
        for (int i = 0; i < 4; i++)
            s4[i] = s8[i] + s8[i + 4];
        dw[e] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    }
    free(roff), free(acc);
    return 0;
}

#ifdef NRT_X86_AMX
/* The weight gradient of a stride-1 convolution on AMX (NRT_DOT_AMX),
 * from the padded input where it lies, with no columns in between.  For
 * a tap (ki, kj), dW[o][c][ki][kj] is the sum over the samples and output
 * positions (y, x) of dy[o][y][x] xp[c][y + ki][x + kj].  Number a
 * sample's positions over the padded width, t = y * WP + x (x < WP, dy
 * taken as 0 where x >= OW), and xp's index is t + ki * WP + kj: a tap's
 * positions are a run of xp's plane, and a tile of A (16 channels by 32
 * positions) is 16 runs a channel apart, loaded in place.  So the
 * operands are copied once, as bf16 (xb: each plane of xp, zeros after it
 * as far as the last tap reads; db: dy as tiles of B, 16 pairs of
 * positions by 16 channels, zeros for x >= OW), and each 16 x 16 block of
 * a tap's dW is a tile summed over the whole batch: cifar10's second
 * convolution's dW in 1.5 ms a batch of 64, where oneDNN's bf16 one took
 * 2.5 and its fp32 one 3.9 (Intel Xeon, one thread; the tiles themselves
 * about 1 ms, the copies the rest).  The positions x >= OW
 * cost 1 - OW / WP of the work; they meet dy's zeros with xp values that
 * real positions read too (so an infinite xp, whose product with 0 is NaN,
 * makes NaN of a sum that is infinite or NaN anyway but where all its dy
 * are 0).  Each block's sum runs in the same order on any thread: the
 * same bits for any thread count. */
struct dw_amx {
    const uint16_t *xb, *db;
    size_t cs, ls, nq; /* xb's channel stride and plane; db's steps of 32 a sample */
    int wp, ob;        /* padded width, dy's blocks of 16 channels */
};

/* Samples [i0, i1) of tap (ki, kj) into nc x no tiles (each 1 or 2) of
 * sums, channels from block c0, dy's from block o0: acc (tile a * 2 + b
 * of 256 floats) taken up where it was left, or zero where first. */
AMX_TARGET static void dw_amx_run(const struct dw_amx *d, int ki, int kj, int c0, int nc, int o0,
                                  int no, int i0, int i1, float *acc, int first)
{
    amx_tiles_16x64();
    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, acc, 64);
        _tile_loadd(1, acc + 256, 64);
        _tile_loadd(2, acc + 512, 64);
        _tile_loadd(3, acc + 768, 64);
    }
    const size_t sa = d->cs * 2, off = (size_t)ki * d->wp + kj;
    for (int i = i0; i < i1; i++)
        for (size_t q = 0; q < d->nq; q++) {
            const uint16_t *a = d->xb + (size_t)c0 * 16 * d->cs + i * d->ls + q * 32 + off;
            const uint16_t *b = d->db + (((size_t)i * d->nq + q) * d->ob + o0) * 512;
            _tile_loadd(4, a, sa);
            _tile_loadd(6, b, 64);
            if (no == 2)
                _tile_loadd(7, b + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (no == 2)
                _tile_dpbf16ps(1, 4, 7);
            if (nc == 2) {
                _tile_loadd(5, a + 16 * d->cs, sa);
                _tile_dpbf16ps(2, 5, 6);
                if (no == 2)
                    _tile_dpbf16ps(3, 5, 7);
            }
        }
    _tile_stored(0, acc, 64);
    _tile_stored(1, acc + 256, 64);
    _tile_stored(2, acc + 512, 64);
    _tile_stored(3, acc + 768, 64);
    _tile_release();
}

/* db's tiles from dyp (dy in bf16, each channel's sample a row of ps
 * positions): tile (i, q, block) row r holds the pairs 16 q + r of the
 * block's 16 channels, a 16 x 16 transpose of pairs, gathered a row at a
 * time.  rs: dyp's channel stride in pairs. */
AMX_TARGET static void dw_amx_tiles(const struct dw_amx *d, const uint16_t *dyp, size_t rs, int i,
                                    uint16_t *restrict db)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                            5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)rs));
    for (size_t q = 0; q < d->nq; q++)
        for (int b = 0; b < d->ob; b++) {
            const int *src = (const int *)(const void *)dyp + (size_t)b * 16 * rs +
                             (size_t)i * d->nq * 16 + q * 16;
            uint16_t *tile = db + (((size_t)i * d->nq + q) * d->ob + b) * 512;
            for (int r = 0; r < 16; r++)
                _mm512_storeu_si512(tile + r * 32, _mm512_i32gather_epi32(idx, src + r, 4));
        }
}

/* Samples a pass over the taps sums before the next: their xb and db
 * (cifar10's second convolution: 100 and 80 KiB) stay in L2 while every
 * tap reads them.  By the shape alone, so that the sums' order is. */
#define DWA_CHUNK 8

/* nrt_conv2d_dw on AMX where it applies (a bf16 run's products on AMX,
 * stride 1, 16 input channels or more) and its buffers can be had: 0;
 * else -1. */
static int conv_dw_amx(const nrt_conv *g, int n, const float *dy, const float *xp, float *dw)
{
    const int hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;
    if (g->dot != NRT_DOT_AMX || !have_amx() || g->sh != 1 || g->sw != 1 || g->c < 16 ||
        n <= 0 || g->o <= 0 || g->oh != hp - g->kh + 1 || g->ow != wp - g->kw + 1)
        return -1;
    const int cb = (g->c + 15) / 16, ob = (g->o + 15) / 16, taps = g->kh * g->kw;
    const size_t plane = (size_t)hp * wp, ps = round_up((size_t)g->oh * wp, 32);
    const size_t ls = round_up(ps + (size_t)(g->kh - 1) * wp + (size_t)g->kw - 1, 32);
    const size_t cs = (size_t)n * ls, nq = ps / 32;
    const int cpair = (cb + 1) / 2, opair = (ob + 1) / 2, tasks = taps * cpair * opair;
    /* the operands and the sums in the net's workspace, or in buffers of
     * this call's own */
    const size_t nxb = (size_t)cb * 16 * cs, ndb = (size_t)n * nq * ob * 512;
    const size_t ndyp = (size_t)ob * 16 * n * ps, bytes = 2 * (nxb + ndb + ndyp) + 4096 * (size_t)tasks;
    if ((double)ndyp >= 2147483648.0) /* dw_amx_tiles' int offsets */
        return -1;
    char *ws = nrt_conv_workspace(g, bytes), *own = ws ? NULL : aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!ws && !(ws = own))
        return -1;
    float *acc = (float *)(void *)ws; /* first: 4 KiB a task, 64-byte aligned */
    uint16_t *xb = (uint16_t *)(void *)(ws + 4096 * (size_t)tasks), *db = xb + nxb, *dyp = db + ndb;
    const struct dw_amx d = {xb, db, cs, ls, nq, wp, ob};
    const int par = (double)n * g->o * g->oh * g->ow * g->c * taps >= PAR_MIN_GEMM;
    (void)par;
    /* xb: each plane of xp in bf16, zeros after it and in the channels up
     * to a whole block */
    NRT_OMP(omp parallel for schedule(static) if (par))
    for (long r = 0; r < (long)cb * 16 * n; r++) {
        uint16_t *row = xb + (size_t)r * ls;
        size_t j = 0;
        if (r < (long)g->c * n) {
            amx_bf16_run(row, xp + (size_t)r * plane, plane);
            j = plane;
        }
        memset(row + j, 0, (ls - j) * sizeof *row);
    }
    /* dyp: dy's positions of a sample over the padded width, in bf16,
     * zeros where x >= OW, past the last row and past O; then db, its
     * tiles */
    NRT_OMP(omp parallel for schedule(static) if (par))
    for (long r = 0; r < (long)ob * 16 * n; r++) {
        uint16_t *row = dyp + (size_t)r * ps;
        memset(row, 0, ps * sizeof *row);
        for (int y = 0; y < g->oh && r < (long)g->o * n; y++)
            amx_bf16_run(row + (size_t)y * wp, dy + ((size_t)r * g->oh + y) * g->ow, (size_t)g->ow);
    }
    NRT_OMP(omp parallel for schedule(static) if (par))
    for (int i = 0; i < n; i++)
        dw_amx_tiles(&d, dyp, (size_t)n * ps / 2, i, db);
    /* the tasks (tap, pair of channel blocks, pair of dy's), chunk by
     * chunk of samples; each thread the same tasks at every chunk */
    for (int i0 = 0; i0 < n; i0 += DWA_CHUNK) {
        const int i1 = n - i0 < DWA_CHUNK ? n : i0 + DWA_CHUNK;
        NRT_OMP(omp parallel for schedule(static) if (par))
        for (int t = 0; t < tasks; t++) {
            const int tap = t / (cpair * opair), c0 = t / opair % cpair * 2, o0 = t % opair * 2;
            dw_amx_run(&d, tap / g->kw, tap % g->kw, c0, cb - c0 < 2 ? 1 : 2, o0,
                       ob - o0 < 2 ? 1 : 2, i0, i1, acc + (size_t)t * 1024, i0 == 0);
        }
    }
    /* tile a * 2 + b of a task: rows channels c0 + a's, columns dy's o0 + b's */
    for (int t = 0; t < tasks; t++) {
        const int tap = t / (cpair * opair), c0 = t / opair % cpair * 2, o0 = t % opair * 2;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int r = 0; r < 16; r++) {
                    const int c = (c0 + a) * 16 + r;
                    for (int k = 0; k < 16 && c < g->c; k++) {
                        const int o = (o0 + b) * 16 + k;
                        if (o < g->o)
                            dw[((size_t)o * g->c + c) * taps + tap] =
                                acc[(size_t)t * 1024 + (a * 2 + b) * 256 + r * 16 + k];
                    }
                }
    }
    free(own);
    return 0;
}
#else
static int conv_dw_amx(const nrt_conv *g, int n, const float *dy, const float *xp, float *dw)
{
    (void)g, (void)n, (void)dy, (void)xp, (void)dw;
    return -1;
}
#endif

void nrt_conv2d_dw(const nrt_conv *g, int n, const float *dy, const float *xp,
                   float *dw)
{
    if (conv_dw_amx(g, n, dy, xp, dw) == 0)
        return;
    if (!dnnl_first(g) && conv_dw_winograd(g, n, dy, xp, dw) == 0)
        return;
    if (nrt_dnnl_wanted(g) && nrt_dnnl_dw(g, n, dy, xp, dw) == 0)
        return;
    if (conv_dw_direct(g, n, dy, xp, dw) == 0)
        return;
    const struct conv_src s = conv_src_of(g, n, xp);
    const int k = g->c * g->kh * g->kw, np = n * g->oh * g->ow;
    struct gemm gm = {.transb = 1, .k = np, .alpha = 1.0f, .a = dy, .c = dw, .lda = np, .ldc = k,
                      .cv = &s, .dot = g->dot};
    if (g->o > 0 && k > 0)
        gemm_run(&gm, g->o, k);
}

size_t nrt_conv2d_dx_scratch(const nrt_conv *g)
{
    const size_t hp = (size_t)g->oh + 2 * (size_t)(g->kh - 1 - g->ph);
    const size_t wp = (size_t)g->ow + 2 * (size_t)(g->kw - 1 - g->pw);
    return (size_t)g->o * hp * wp + (size_t)g->c * g->h * g->w;
}

void nrt_conv2d_dx(const nrt_conv *g, int n, int cn, const float *w,
                   const float *dy, float *scratch, float *dx)
{
    /* The transposed convolution: dy's channels in, x's out. */
    const nrt_conv t = {g->o, g->oh, g->ow, g->c, g->h, g->w, g->kh, g->kw,
                        1, 1, g->kh - 1 - g->ph, g->kw - 1 - g->pw, g->dot, NULL};
    const int kk = g->kh * g->kw, np = n * g->h * g->w;
    if (g->c <= 0 || np <= 0)
        return;
    const int wino = dnnl_first(g) ? 0 : wg_wanted(&t, n);
    if (!wino && nrt_dnnl_wanted(g) && nrt_dnnl_dx(g, n, cn, w, dy, dx) == 0)
        return;
    float *dyp = scratch;
    nrt_conv2d_pad(&t, n, 1, dy, dyp);
    /* channel first: straight into dx; else into scratch, then transposed */
    float *out = cn ? dx : scratch + (size_t)n * (nrt_conv2d_dx_scratch(g) - (size_t)g->c * g->h * g->w);
    if (!wino || conv_winograd(&t, g, n, w, 1, NULL, dyp, out) != 0) {
        const struct conv_src s = conv_src_of(&t, n, dyp);
        struct gemm gm = {.k = g->o * kk, .alpha = 1.0f, .a = w, .c = out, .lda = g->c * kk,
                          .ldc = np, .cv = &s, .flip = kk, .dot = g->dot};
        gemm_run(&gm, g->c, np);
    }
    if (cn)
        return;
    const size_t hw = (size_t)g->h * g->w;
    const long planes = (long)n * g->c;
    NRT_OMP(omp parallel for schedule(static) if ((double)planes * hw >= 4 * PAR_MIN_WORK))
    for (long q = 0; q < planes; q++) {
        const long i = q / g->c, ch = q % g->c;
        memcpy(dx + (size_t)q * hw, out + ((size_t)ch * n + i) * hw, hw * sizeof *dx);
    }
}

/* ---------------------------------------------------------------- pooling */

/* The input rows (or columns) [*lo, *hi) that output o's window covers:
 * its k cells from o * s - p, clipped to the input's n. */
static void pool_window(int o, int s, int p, int k, int n, int *lo, int *hi)
{
    *lo = o * s - p;
    *hi = *lo + k;
    if (*lo < 0)
        *lo = 0;
    if (*hi > n)
        *hi = n;
}

/* One plane of max pooling, any geometry: as PyTorch, start at -inf on the
 * first real cell of the window; a larger value or a NaN takes over.  So
 * the result is the last NaN of the window if there is one, else its first
 * maximum in scan order. */
static void maxpool_plane(const float *xp, int h, int w, int k, int s, int p,
                          int oh, int ow, float *yp, int32_t *ap)
{
    for (int oy = 0; oy < oh; oy++) {
        int y0, y1;
        pool_window(oy, s, p, k, h, &y0, &y1);
        for (int ox = 0; ox < ow; ox++) {
            int x0, x1;
            pool_window(ox, s, p, k, w, &x0, &x1);
            float best = -INFINITY;
            int32_t bi = (y0 < y1 && x0 < x1) ? y0 * w + x0 : -1;
            for (int iy = y0; iy < y1; iy++)
                for (int ix = x0; ix < x1; ix++) {
                    float v = xp[(size_t)iy * w + ix];
                    if (v > best || isnan(v)) {
                        best = v;
                        bi = iy * w + ix;
                    }
                }
            yp[(size_t)oy * ow + ox] = best;
            ap[(size_t)oy * ow + ox] = bi;
        }
    }
}

/* One plane of 2x2, stride 2, unpadded max pooling (every window inside
 * the plane): maxpool_plane's rule spelled out as selects over the four
 * cells in scan order, a whole output row at a time, so that the compiler
 * vectorises it.  Starting from the first cell is the same as starting from
 * -inf on it: -inf > -inf is false, and the index is that cell's anyway. */
static void maxpool_plane_2x2(const float *restrict xp, int w, int oh, int ow,
                              float *restrict yp, int32_t *restrict ap)
{
    for (int oy = 0; oy < oh; oy++) {
        const float *restrict r0 = xp + (size_t)2 * oy * w;
        const float *restrict r1 = r0 + w;
        float *restrict yr = yp + (size_t)oy * ow;
        int32_t *restrict ar = ap + (size_t)oy * ow;
        const int32_t base = 2 * oy * w;
        for (int ox = 0; ox < ow; ox++) {
            const float v0 = r0[2 * ox], v1 = r0[2 * ox + 1];
            const float v2 = r1[2 * ox], v3 = r1[2 * ox + 1];
            const int32_t i0 = base + 2 * ox;
            float best = v0;
            int32_t bi = i0;
            int t = (v1 > best) | (v1 != v1);
            best = t ? v1 : best;
            bi = t ? i0 + 1 : bi;
            t = (v2 > best) | (v2 != v2);
            best = t ? v2 : best;
            bi = t ? i0 + w : bi;
            t = (v3 > best) | (v3 != v3);
            best = t ? v3 : best;
            bi = t ? i0 + w + 1 : bi;
            yr[ox] = best;
            ar[ox] = bi;
        }
    }
}

#ifdef NRT_X86_AVX512
/* maxpool_plane_2x2 sixteen outputs at a time: a row pair's 32 + 32 cells
 * split into the windows' four cells (even and odd columns of each row),
 * then the same selects in the same order, lane by lane.  The last
 * columns of a row masked: a row of 8 or 4 outputs (cifar10's second and
 * third pools) is one masked vector. */
static const int32_t even_odd[2][16] = {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
                                        {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};

/* The cells of 16 windows of one row from r (2 * rem of them, rem <= 16):
 * the first cells in *c0, the second in *c1. */
AVX512_TARGET __attribute__((always_inline)) static inline void
pool_row_cells(const float *r, int rem, __m512i ev, __m512i od, __m512 *c0, __m512 *c1)
{
    const __mmask16 lo = (__mmask16)(rem >= 8 ? 0xffffu : (1u << 2 * rem) - 1u);
    const __mmask16 hi = (__mmask16)(rem <= 8 ? 0u : rem == 16 ? 0xffffu : (1u << 2 * (rem - 8)) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(lo, r), b = _mm512_maskz_loadu_ps(hi, r + 16);
    *c0 = _mm512_permutex2var_ps(a, ev, b);
    *c1 = _mm512_permutex2var_ps(a, od, b);
}

/* best, bi = v, at where v > best or v is NaN (maxpool_plane_2x2's rule) */
AVX512_TARGET __attribute__((always_inline)) static inline void
pool_pick(__m512 v, __m512i at, __m512 *best, __m512i *bi)
{
    const __mmask16 t = _mm512_cmp_ps_mask(v, *best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    *best = _mm512_mask_mov_ps(*best, t, v);
    *bi = _mm512_mask_mov_epi32(*bi, t, at);
}

AVX512_TARGET static void
maxpool_plane_2x2_avx512(const float *xp, int w, int oh, int ow, float *yp, int32_t *ap)
{
    const __m512i ev = _mm512_loadu_si512(even_odd[0]), od = _mm512_loadu_si512(even_odd[1]);
    const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    for (int oy = 0; oy < oh; oy++) {
        const float *r0 = xp + (size_t)2 * oy * w, *r1 = r0 + w;
        for (int ox = 0; ox < ow; ox += 16) {
            const int rem = ow - ox < 16 ? ow - ox : 16;
            const __mmask16 m = (__mmask16)((1u << rem) - 1u);
            __m512 v0, v1, v2, v3;
            pool_row_cells(r0 + 2 * ox, rem, ev, od, &v0, &v1);
            pool_row_cells(r1 + 2 * ox, rem, ev, od, &v2, &v3);
            const __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + 2 * ox), lane2);
            __m512 best = v0;
            __m512i bi = i0;
            pool_pick(v1, _mm512_add_epi32(i0, _mm512_set1_epi32(1)), &best, &bi);
            pool_pick(v2, _mm512_add_epi32(i0, _mm512_set1_epi32(w)), &best, &bi);
            pool_pick(v3, _mm512_add_epi32(i0, _mm512_set1_epi32(w + 1)), &best, &bi);
            _mm512_mask_storeu_ps(yp + (size_t)oy * ow + ox, m, best);
            _mm512_mask_storeu_epi32(ap + (size_t)oy * ow + ox, m, bi);
        }
    }
}

/* maxpool_plane_2x2_bwd sixteen windows at a time: each cell's value
 * chosen as there, then the even and odd columns woven back together. */
AVX512_TARGET __attribute__((always_inline)) static inline void
pool_row_store(float *r, int rem, __m512 c0, __m512 c1)
{
    const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __mmask16 lo = (__mmask16)(rem >= 8 ? 0xffffu : (1u << 2 * rem) - 1u);
    const __mmask16 hi = (__mmask16)(rem <= 8 ? 0u : rem == 16 ? 0xffffu : (1u << 2 * (rem - 8)) - 1u);
    _mm512_mask_storeu_ps(r, lo, _mm512_permutex2var_ps(c0, lo_idx, c1));
    _mm512_mask_storeu_ps(r + 16, hi, _mm512_permutex2var_ps(c0, hi_idx, c1));
}

AVX512_TARGET static void
maxpool_plane_2x2_bwd_avx512(const float *gp, const int32_t *ap, int w, int oh, int ow, float *dp)
{
    const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    const __m512 zero = _mm512_setzero_ps();
    for (int oy = 0; oy < oh; oy++) {
        float *r0 = dp + (size_t)2 * oy * w, *r1 = r0 + w;
        for (int ox = 0; ox < ow; ox += 16) {
            const int rem = ow - ox < 16 ? ow - ox : 16;
            const __mmask16 m = (__mmask16)((1u << rem) - 1u);
            const __m512 g = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(m, gp + (size_t)oy * ow + ox));
            const __m512i at = _mm512_sub_epi32(
                _mm512_maskz_loadu_epi32(m, ap + (size_t)oy * ow + ox),
                _mm512_add_epi32(_mm512_set1_epi32(2 * oy * w + 2 * ox), lane2));
            const __m512 c0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_setzero_si512()), g);
            const __m512 c1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(1)), g);
            const __m512 c2 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(w)), g);
            const __m512 c3 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(w + 1)), g);
            pool_row_store(r0 + 2 * ox, rem, c0, c1);
            pool_row_store(r1 + 2 * ox, rem, c2, c3);
        }
    }
}
#endif

/* The 2x2 windows of stride 2 (maxpool_plane_2x2's) backward: each cell of
 * the windows written once, 0 + the window's gradient where its maximum
 * is, else 0 (what the scatter onto zeros gives), a row pair at a time. */
static void maxpool_windows_2x2_bwd(const float *restrict gp, const int32_t *restrict ap, int w,
                                    int oh, int ow, float *restrict dp)
{
    for (int oy = 0; oy < oh; oy++) {
        float *restrict r0 = dp + (size_t)2 * oy * w;
        float *restrict r1 = r0 + w;
        const float *restrict gr = gp + (size_t)oy * ow;
        const int32_t *restrict ar = ap + (size_t)oy * ow;
        const int32_t base = 2 * oy * w;
        for (int ox = 0; ox < ow; ox++) {
            const float g = 0.0f + gr[ox];
            const int32_t at = ar[ox] - base - 2 * ox; /* 0, 1, w or w + 1 */
            r0[2 * ox] = at == 0 ? g : 0.0f;
            r0[2 * ox + 1] = at == 1 ? g : 0.0f;
            r1[2 * ox] = at == w ? g : 0.0f;
            r1[2 * ox + 1] = at == w + 1 ? g : 0.0f;
        }
    }
}

/* The 2x2 pools' kernels on this cpu for rows of ow windows: AVX-512's
 * from 8 windows a row forward and 16 backward, where they gained (one
 * thread, Intel Xeon model 207, batch 64: cifar10's first pool 0.66 ->
 * 0.48 ms forward, 0.59 -> 0.52 backward, its second 0.165 -> 0.12 ms
 * forward and the same backward; its third, 4 windows a row, 0.10 -> 0.12
 * and 0.055 -> 0.10 ms on them). */
struct pool2 {
    void (*fwd)(const float *xp, int w, int oh, int ow, float *yp, int32_t *ap);
    void (*bwd)(const float *gp, const int32_t *ap, int w, int oh, int ow, float *dp);
};

static struct pool2 pool2_kernels(int ow)
{
    struct pool2 k = {maxpool_plane_2x2, maxpool_windows_2x2_bwd};
#ifdef NRT_X86_AVX512
    if (have_avx512() && ow >= 8)
        k.fwd = maxpool_plane_2x2_avx512;
    if (have_avx512() && ow >= 16)
        k.bwd = maxpool_plane_2x2_bwd_avx512;
#else
    (void)ow;
#endif
    return k;
}

/* A plane's dx: its windows', then 0 in the columns and rows no window
 * covers -- without the plane's memset first (the scatter's). */
static void maxpool_plane_2x2_bwd(const struct pool2 *k, const float *gp, const int32_t *ap, int h,
                                  int w, int oh, int ow, float *dp)
{
    k->bwd(gp, ap, w, oh, ow, dp);
    for (int y = 0; 2 * ow < w && y < 2 * oh; y++)
        memset(dp + (size_t)y * w + 2 * ow, 0, (size_t)(w - 2 * ow) * sizeof *dp);
    if (2 * oh < h)
        memset(dp + (size_t)2 * oh * w, 0, (size_t)(h - 2 * oh) * w * sizeof *dp);
}

void nrt_maxpool2d_fwd(const float *x, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *y, int32_t *arg)
{
    const int planes = n * c;
    /* The pools of the usual CNNs; trailing rows and columns that fill no
     * window (odd H or W) are ignored, as by the general path. */
    const int fast2 = k == 2 && s == 2 && p == 0 && 2 * oh <= h && 2 * ow <= w;
    const struct pool2 pool2 = pool2_kernels(ow);
    NRT_OMP(omp parallel for schedule(static)
                if ((double)planes * oh * ow * k * k >= PAR_MIN_WORK))
    for (int q = 0; q < planes; q++) {
        const float *xp = x + (size_t)q * h * w;
        float *yp = y + (size_t)q * oh * ow;
        int32_t *ap = arg + (size_t)q * oh * ow;
        if (fast2)
            pool2.fwd(xp, w, oh, ow, yp, ap);
        else
            maxpool_plane(xp, h, w, k, s, p, oh, ow, yp, ap);
    }
}

void nrt_maxpool2d_bwd(const float *dy, const int32_t *arg, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *dx)
{
    const int planes = n * c;
    const size_t in = (size_t)h * w, out = (size_t)oh * ow;
    const int fast2 = k == 2 && s == 2 && p == 0 && 2 * oh <= h && 2 * ow <= w;
    const struct pool2 pool2 = pool2_kernels(ow);
    NRT_OMP(omp parallel for schedule(static)
                if ((double)planes * (in + out) >= PAR_MIN_WORK))
    for (int q = 0; q < planes; q++) {
        float *dp = dx + (size_t)q * in;
        const float *gp = dy + (size_t)q * out;
        const int32_t *ap = arg + (size_t)q * out;
        if (fast2) {
            maxpool_plane_2x2_bwd(&pool2, gp, ap, h, w, oh, ow, dp);
            continue;
        }
        memset(dp, 0, in * sizeof *dp);
        for (size_t o = 0; o < out; o++)
            if (ap[o] >= 0)
                dp[ap[o]] += gp[o];
    }
}

void nrt_avgpool2d_fwd(const float *x, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *y)
{
    const int planes = n * c;
    const float div = (float)(k * k);
    const int fast2 = k == 2 && s == 2 && p == 0 && 2 * oh <= h && 2 * ow <= w;
    NRT_OMP(omp parallel for schedule(static)
                if ((double)planes * oh * ow * k * k >= PAR_MIN_WORK))
    for (int q = 0; q < planes; q++) {
        const float *xp = x + (size_t)q * h * w;
        float *yp = y + (size_t)q * oh * ow;
        if (fast2) {
            /* The general loop's sums, in its order, without its loops. */
            for (int oy = 0; oy < oh; oy++) {
                const float *restrict r0 = xp + (size_t)2 * oy * w;
                const float *restrict r1 = r0 + w;
                float *restrict yr = yp + (size_t)oy * ow;
                for (int ox = 0; ox < ow; ox++)
                    yr[ox] = (0.0f + r0[2 * ox] + r0[2 * ox + 1] +
                              r1[2 * ox] + r1[2 * ox + 1]) / div;
            }
            continue;
        }
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            pool_window(oy, s, p, k, h, &y0, &y1);
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                pool_window(ox, s, p, k, w, &x0, &x1);
                float sum = 0.0f;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        sum += xp[(size_t)iy * w + ix];
                yp[(size_t)oy * ow + ox] = sum / div;
            }
        }
    }
}

/* dx is overwritten, as by nrt_maxpool2d_bwd. */
void nrt_avgpool2d_bwd(const float *dy, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *dx)
{
    const int planes = n * c;
    const float div = (float)(k * k);
    const int fast2 = k == 2 && s == 2 && p == 0 && 2 * oh <= h && 2 * ow <= w;
    NRT_OMP(omp parallel for schedule(static)
                if ((double)planes * oh * ow * k * k >= PAR_MIN_WORK))
    for (int q = 0; q < planes; q++) {
        float *dp = dx + (size_t)q * h * w;
        const float *gp = dy + (size_t)q * oh * ow;
        memset(dp, 0, (size_t)h * w * sizeof *dp);
        if (fast2) {
            /* Disjoint windows: each cell gets 0 + g once, as above. */
            for (int oy = 0; oy < oh; oy++) {
                float *restrict r0 = dp + (size_t)2 * oy * w;
                float *restrict r1 = r0 + w;
                const float *restrict gr = gp + (size_t)oy * ow;
                for (int ox = 0; ox < ow; ox++) {
                    const float g = 0.0f + gr[ox] / div;
                    r0[2 * ox] = r0[2 * ox + 1] = g;
                    r1[2 * ox] = r1[2 * ox + 1] = g;
                }
            }
            continue;
        }
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            pool_window(oy, s, p, k, h, &y0, &y1);
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                pool_window(ox, s, p, k, w, &x0, &x1);
                float g = gp[(size_t)oy * ow + ox] / div;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        dp[(size_t)iy * w + ix] += g;
            }
        }
    }
}

/* ------------------------------------------------------- sums and dropout */

/* Lanes of the row sum: 16 independent partial sums, so that the compiler
 * keeps them in vector registers and the adds do not wait on each other. */
#define SUM_LANES 16

/* The sum of p[0..n): element i goes to partial sum i % SUM_LANES, in
 * order, and the partial sums are combined as a fixed binary tree. */
static float sum_floats(const float *restrict p, size_t n)
{
    float acc[SUM_LANES] = {0};
    size_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            acc[l] += p[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += p[i];
    for (int half = SUM_LANES / 2; half > 0; half /= 2)
        for (int l = 0; l < half; l++)
            acc[l] += acc[l + half];
    return acc[0];
}

/* ------------------------------------------------- batch normalization */

/* Where the hw values of sample i, channel ch begin. */
static size_t bn_plane(const nrt_bn *g, int n, int i, int ch)
{
    return (g->cn ? (size_t)ch * (size_t)n + (size_t)i : (size_t)i * (size_t)g->c + (size_t)ch) *
           (size_t)g->hw;
}

/* y = x * a + b over channel ch's values: the normalisation and the affine
 * map as one scale and one shift. */
static void bn_apply(const nrt_bn *g, int n, int ch, const float *x, float a, float b, float *y)
{
    for (int i = 0; i < n; i++) {
        const size_t at = bn_plane(g, n, i, ch);
        for (int k = 0; k < g->hw; k++)
            y[at + k] = x[at + k] * a + b;
    }
}

/* Lanes of a channel's sums in double: value k of each plane goes to lane
 * k % BN_LANES, planes in order, and the lanes are combined as a fixed
 * binary tree (sum_floats' scheme): the same bits on every instruction set
 * (each lane's operations are the same, in the same order) and team, and
 * eight independent adds where one chain of them waited on each other
 * (resnet20's batchnorms had been 15 % of its step). */
#define BN_LANES 8

/* The lanes' sum, in place: a[0]. */
static double bn_lanes_sum(double a[BN_LANES])
{
    for (int half = BN_LANES / 2; half > 0; half /= 2)
        for (int l = 0; l < half; l++)
            a[l] += a[l + half];
    return a[0];
}

/* The sums of a plane's values into the lanes: s[l] += a[k] and t[l] +=
 * a[k] b[k] for k = l mod BN_LANES, b[k] taken as (b[k] - mean) invstd
 * in float where centre (backward's dy and xh; forward's x and x with a
 * = b, not centre).  bn_pairs_from: from k0 on, the tail past the last
 * whole run of lanes too. */
static void bn_pairs_from(const float *a, const float *b, int centre, float mean, float invstd,
                          int k0, int hw, double *s, double *t)
{
    int k = k0;
    for (; k + BN_LANES <= hw; k += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            const float v = centre ? (b[k + l] - mean) * invstd : b[k + l];
            s[l] += a[k + l];
            t[l] += (double)a[k + l] * v;
        }
    for (int l = 0; k < hw; k++, l++) {
        const float v = centre ? (b[k] - mean) * invstd : b[k];
        s[l] += a[k];
        t[l] += (double)a[k] * v;
    }
}

#ifdef NRT_X86_AVX2
/* The whole runs of bn_pairs_from on AVX2, lanes 0-3 and 4-7 in two
 * vectors: the same operations, lane by lane (no fused multiply-adds).
 * The first value not taken. */
__attribute__((target("avx2"))) static int bn_pairs_avx2(const float *a, const float *b,
                                                         int centre, float mean, float invstd,
                                                         int hw, double *s, double *t)
{
    __m256d s0 = _mm256_loadu_pd(s), s1 = _mm256_loadu_pd(s + 4);
    __m256d t0 = _mm256_loadu_pd(t), t1 = _mm256_loadu_pd(t + 4);
    const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(invstd);
    int k = 0;
    for (; k + BN_LANES <= hw; k += BN_LANES) {
        const __m256 av = _mm256_loadu_ps(a + k), bk = _mm256_loadu_ps(b + k),
                     bv = centre ? _mm256_mul_ps(_mm256_sub_ps(bk, vm), vi) : bk;
        const __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(av)),
                      ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(av, 1)),
                      blo = _mm256_cvtps_pd(_mm256_castps256_ps128(bv)),
                      bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(bv, 1));
        s0 = _mm256_add_pd(s0, alo), s1 = _mm256_add_pd(s1, ahi);
        t0 = _mm256_add_pd(t0, _mm256_mul_pd(alo, blo));
        t1 = _mm256_add_pd(t1, _mm256_mul_pd(ahi, bhi));
    }
    _mm256_storeu_pd(s, s0), _mm256_storeu_pd(s + 4, s1);
    _mm256_storeu_pd(t, t0), _mm256_storeu_pd(t + 4, t1);
    return k;
}
#endif

/* A plane's sums into the lanes (bn_pairs_from's). */
static void bn_pairs(const float *a, const float *b, int centre, float mean, float invstd, int hw,
                     double *s, double *t)
{
    int k = 0;
#ifdef NRT_X86_AVX2
    if (have_avx2())
        k = bn_pairs_avx2(a, b, centre, mean, invstd, hw, s, t);
#endif
    bn_pairs_from(a, b, centre, mean, invstd, k, hw, s, t);
}

/* Each channel is one thread's, its sums in double in a fixed order: the
 * same bits whatever the team. */
void nrt_batchnorm_train(const nrt_bn *g, int n, const float *x, const float *gamma,
                         const float *beta, float *running_mean, float *running_var,
                         int64_t *num_batches_tracked, float *stats, float *y)
{
    const double count = (double)n * g->hw;
    NRT_OMP(omp parallel for schedule(static) if (g->c > 1 && count * g->c >= PAR_MIN_WORK))
    for (int c = 0; c < g->c; c++) {
        double s[BN_LANES] = {0}, ss[BN_LANES] = {0};
        for (int i = 0; i < n; i++) {
            const float *p = x + bn_plane(g, n, i, c);
            bn_pairs(p, p, 0, 0.0f, 1.0f, g->hw, s, ss);
        }
        const double mean = bn_lanes_sum(s) / count;
        double var = bn_lanes_sum(ss) / count - mean * mean; /* biased */
        if (var < 0)
            var = 0;
        const float invstd = (float)(1.0 / sqrt(var + g->eps));
        stats[c] = (float)mean;
        stats[g->c + c] = invstd;
        /* PyTorch's running statistics take the unbiased variance (one
         * value a channel has none: the biased one, 0, is taken) */
        const double unbiased = count > 1 ? var * count / (count - 1) : var;
        const float m = g->momentum;
        running_mean[c] = (1 - m) * running_mean[c] + m * (float)mean;
        running_var[c] = (1 - m) * running_var[c] + m * (float)unbiased;
        const float a = gamma ? gamma[c] * invstd : invstd;
        bn_apply(g, n, c, x, a, (beta ? beta[c] : 0.0f) - (float)mean * a, y);
    }
    ++*num_batches_tracked;
}

void nrt_batchnorm_eval(const nrt_bn *g, int n, const float *x, const float *gamma,
                        const float *beta, const float *running_mean,
                        const float *running_var, float *y)
{
    NRT_OMP(omp parallel for schedule(static)
                if (g->c > 1 && (double)n * g->hw * g->c >= PAR_MIN_WORK))
    for (int c = 0; c < g->c; c++) {
        const float invstd = 1.0f / sqrtf(running_var[c] + g->eps);
        const float a = gamma ? gamma[c] * invstd : invstd;
        bn_apply(g, n, c, x, a, (beta ? beta[c] : 0.0f) - running_mean[c] * a, y);
    }
}

/* With xh = (x - mean) * invstd and N values a channel:
 *     dbeta = sum dy,  dgamma = sum dy xh,
 *     dx = gamma invstd (dy - dbeta / N - xh dgamma / N). */
void nrt_batchnorm_bwd(const nrt_bn *g, int n, const float *x, const float *dy,
                       const float *gamma, const float *stats, float *dgamma, float *dbeta,
                       float *dx)
{
    const double count = (double)n * g->hw;
    NRT_OMP(omp parallel for schedule(static) if (g->c > 1 && count * g->c >= PAR_MIN_WORK))
    for (int c = 0; c < g->c; c++) {
        const float mean = stats[c], invstd = stats[g->c + c];
        double ld[BN_LANES] = {0}, ldx[BN_LANES] = {0};
        for (int i = 0; i < n; i++) {
            const size_t at = bn_plane(g, n, i, c);
            bn_pairs(dy + at, x + at, 1, mean, invstd, g->hw, ld, ldx);
        }
        const double sdy = bn_lanes_sum(ld), sdyxh = bn_lanes_sum(ldx);
        if (gamma) {
            dgamma[c] = (float)sdyxh;
            dbeta[c] = (float)sdy;
        }
        if (!dx)
            continue;
        const float scale = (gamma ? gamma[c] : 1.0f) * invstd;
        const float mdy = (float)(sdy / count), mdyxh = (float)(sdyxh / count);
        for (int i = 0; i < n; i++) {
            const size_t at = bn_plane(g, n, i, c);
            for (int k = 0; k < g->hw; k++) {
                const float xh = (x[at + k] - mean) * invstd;
                dx[at + k] = scale * (dy[at + k] - mdy - xh * mdyxh);
            }
        }
    }
}

void nrt_row_sums(const float *a, int rows, size_t cols, float *out)
{
    /* A row is one thread's: the same sum whatever the team. */
    NRT_OMP(omp parallel for schedule(static)
                if (rows > 1 && (double)rows * cols >= PAR_MIN_WORK))
    for (int r = 0; r < rows; r++)
        out[r] = sum_floats(a + (size_t)r * cols, cols);
}

/* Columns per block of nrt_col_sums: its partial sums stay in L1. */
#define COL_BLOCK 512

void nrt_col_sums(const float *a, int rows, int cols, float *out)
{
    if (cols <= 0)
        return;
    const int nb = (cols + COL_BLOCK - 1) / COL_BLOCK;
    /* out[j] = ((a[0][j] + a[1][j]) + a[2][j]) + ..., row by row so that
     * the adds run across j in vectors; blocks of columns are independent,
     * so threads change nothing in any sum. */
    NRT_OMP(omp parallel for schedule(static)
                if (nb > 1 && (double)rows * cols >= PAR_MIN_WORK))
    for (int b = 0; b < nb; b++) {
        const int j0 = b * COL_BLOCK;
        const int m = cols - j0 < COL_BLOCK ? cols - j0 : COL_BLOCK;
        float *restrict o = out + j0;
        if (rows <= 0) {
            memset(o, 0, (size_t)m * sizeof *o);
            continue;
        }
        memcpy(o, a + j0, (size_t)m * sizeof *o);
        for (int r = 1; r < rows; r++) {
            const float *restrict ar = a + (size_t)r * cols + j0;
            for (int j = 0; j < m; j++)
                o[j] += ar[j];
        }
    }
}

typedef uint64_t v4u __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8s __attribute__((vector_size(32)));

/* philox.h's dropout, eight lanes side by side in vectors: for each run
 * of 256 values, the eight lanes' Philox blocks (the xoshiro128** states,
 * four words of eight lanes), then 32 steps of the eight streams, step t
 * deciding values 8t .. 8t+7 of the run with one vector compare. */
typedef struct Lanes8 {
    v8u s0, s1, s2, s3;
} Lanes8;

/* The eight lanes' counters for the run g: blocks 8g .. 8g+7. */
static inline __attribute__((always_inline)) Lanes8 lane_counters(size_t g, uint32_t layer,
                                                                  uint64_t step)
{
    const v8u lane = {0, 1, 2, 3, 4, 5, 6, 7}, zero = {0};
    const Lanes8 l = {lane + (uint32_t)(8 * g), zero + layer, zero + (uint32_t)step,
                      zero + (uint32_t)(step >> 32)};
    return l;
}

/* Runs the lanes l (Philox's output, the streams' states) over the values
 * 256g .. 256g+255 below n: kept when the word is >= cut, scaled by sb's
 * float. */
static inline __attribute__((always_inline)) void
lanes_write(const Lanes8 *l, size_t g, uint32_t cut, int32_t sb, const float *x, float *y,
            float *mask, size_t n)
{
    v8u s0 = l->s0, s1 = l->s1, s2 = l->s2, s3 = l->s3;
    s0 |= (v8u)((s0 | s1 | s2 | s3) == 0) & 1; /* the all-zero state */
    for (size_t i = 256 * g; i < n && i < 256 * g + 256; i += 8) {
        const v8u a = (s1 << 2) + s1, b = (a << 7) | (a >> 25), u = (b << 3) + b;
        const v8u t = s1 << 9;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = (s3 << 11) | (s3 >> 21);
        const v8i keep = (v8i)(u >= cut); /* -1 or 0 */
        const v8s m = (v8s)(keep & sb);
        if (n - i >= 8) {
            v8s xv;
            memcpy(&xv, x + i, sizeof xv);
            const v8s yv = xv * m;
            memcpy(mask + i, &m, sizeof m);
            memcpy(y + i, &yv, sizeof yv);
        } else {
            for (size_t q = 0; q < n - i; q++) {
                mask[i + q] = m[q];
                y[i + q] = x[i + q] * m[q];
            }
        }
    }
}

#ifdef NRT_X86_AVX2
/* Philox's rounds with AVX2's 32x32->64 multiply of the even lanes
 * (vpmuludq); the odd lanes' products come from the counters shifted
 * down, and a blend puts the halves back in their lanes. */
__attribute__((target("avx2"))) static void
dropout_avx2(uint64_t key, uint32_t layer, uint64_t step, uint32_t cut, float scale,
             const float *x, float *y, float *mask, size_t n)
{
    int32_t sb;
    memcpy(&sb, &scale, sizeof sb);
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
    for (size_t g = 0; 256 * g < n; g++) {
        Lanes8 l = lane_counters(g, layer, step);
        __m256i c0 = (__m256i)l.s0, c1 = (__m256i)l.s1, c2 = (__m256i)l.s2, c3 = (__m256i)l.s3;
        uint32_t kl = (uint32_t)key, kh = (uint32_t)(key >> 32);
        for (int r = 0; r < 10; r++) {
            const __m256i e0 = _mm256_mul_epu32(c0, m0);
            const __m256i o0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
            const __m256i e1 = _mm256_mul_epu32(c2, m1);
            const __m256i o1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
            const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(e0, 32), o0, 0xAA);
            const __m256i lo0 = _mm256_blend_epi32(e0, _mm256_slli_epi64(o0, 32), 0xAA);
            const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(e1, 32), o1, 0xAA);
            const __m256i lo1 = _mm256_blend_epi32(e1, _mm256_slli_epi64(o1, 32), 0xAA);
            c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)kl));
            c1 = lo1;
            c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)kh));
            c3 = lo0;
            kl += 0x9E3779B9u;
            kh += 0xBB67AE85u;
        }
        const Lanes8 s = {(v8u)c0, (v8u)c1, (v8u)c2, (v8u)c3};
        lanes_write(&s, g, cut, sb, x, y, mask, n);
    }
}
#endif

/* The rounds in GCC's vectors: 64-bit lanes hold the even and the odd
 * lanes' products. */
static void dropout_generic(uint64_t key, uint32_t layer, uint64_t step, uint32_t cut,
                            float scale, const float *x, float *y, float *mask, size_t n)
{
    int32_t sb;
    memcpy(&sb, &scale, sizeof sb);
    for (size_t g = 0; 256 * g < n; g++) {
        Lanes8 l = lane_counters(g, layer, step);
        uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
        for (int r = 0; r < 10; r++) {
            const v4u e0 = ((v4u)l.s0 & 0xffffffffu) * 0xD2511F53u;
            const v4u o0 = ((v4u)l.s0 >> 32) * 0xD2511F53u;
            const v4u e1 = ((v4u)l.s2 & 0xffffffffu) * 0xCD9E8D57u;
            const v4u o1 = ((v4u)l.s2 >> 32) * 0xCD9E8D57u;
            const v8u hi0 = (v8u)((e0 >> 32) | (o0 & 0xffffffff00000000u));
            const v8u lo0 = (v8u)((e0 & 0xffffffffu) | (o0 << 32));
            const v8u hi1 = (v8u)((e1 >> 32) | (o1 & 0xffffffff00000000u));
            const v8u lo1 = (v8u)((e1 & 0xffffffffu) | (o1 << 32));
            l.s0 = hi1 ^ l.s1 ^ k0;
            l.s1 = lo1;
            l.s2 = hi0 ^ l.s3 ^ k1;
            l.s3 = lo0;
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        lanes_write(&l, g, cut, sb, x, y, mask, n);
    }
}

void nrt_dropout_fwd(const struct nrt_net *net, uint32_t layer, const float *x, float *y, float *mask,
                     size_t n, double p)
{
    const uint64_t cut = nrt_dropout_cut(p);
    if (cut > UINT32_MAX) { /* everything dropped */
        for (size_t i = 0; i < n; i++) {
            mask[i] = 0.0f;
            y[i] = x[i] * 0.0f;
        }
        return;
    }
    const float scale = (float)(1.0 / (1.0 - p));
#ifdef NRT_X86_AVX2
    if (have_avx2()) {
        dropout_avx2(net->dropout_key, layer, net->step, (uint32_t)cut, scale, x, y, mask, n);
        return;
    }
#endif
    dropout_generic(net->dropout_key, layer, net->step, (uint32_t)cut, scale, x, y, mask, n);
}

/* ----------------------------------------------------------------- losses */

/* e[j] = exp(z[j]) for z[j] <= 0, eight at a time, as Cephes' expf:
 * z = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, so that n ln 2 is
 * exact), e^r from a degree-7 polynomial, 2^n put in the exponent bits.
 * Relative error below 2e-7.  Below -87.3 the result would be subnormal
 * and is 0 instead: next to the row's maximum, whose exponential is 1, it
 * is lost in the sum anyway.  The same operations in the same order, in
 * vectors or not, give the same bits: no FMA, no contraction.  (In place:
 * a function returning a 32-byte vector has an ABI of its own.) */
static inline __attribute__((always_inline)) void exp_nonpos(v8s *zp)
{
    v8s z = *zp;
    const v8s lo = (v8s){0} - 87.3f;
    const v8i live = z >= lo;
    z = (v8s)((live & (v8i)z) | (~live & (v8i)lo));
    const v8s magic = (v8s){0} + 12582912.0f; /* 1.5 * 2^23: rounds to integer */
    const v8s t = z * 1.44269504088896341f + magic;
    const v8s n = t - magic;
    const v8s r = z - n * 0.693359375f - n * -2.12194440e-4f;
    v8s p = (v8s){0} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const v8i two_n = (((v8i)t - (v8i)magic) + 127) << 23;
    *zp = (v8s)((v8i)(p * (v8s)two_n) & live);
}

/* e[i] = exp(e[i]) in place for m values <= 0, eight at a time; the
 * iterations are independent, so the polynomials of several vectors are in
 * flight at once. */
static inline __attribute__((always_inline)) void exp_flat(float *e, size_t m)
{
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        v8s z;
        memcpy(&z, e + i, sizeof z);
        exp_nonpos(&z);
        memcpy(e + i, &z, sizeof z);
    }
    if (i < m) {
        v8s z = {0};
        memcpy(&z, e + i, (m - i) * sizeof *e);
        exp_nonpos(&z);
        memcpy(e + i, &z, (m - i) * sizeof *e);
    }
}

/* Rows whose shifted logits z = x - max(x) are in e (rows * k values):
 * their exponentials, and if grad, their gradients in place.  Returns the
 * sum of the rows' log-sum-exp. */
static inline __attribute__((always_inline)) double
xent_finish(float *e, const int32_t *label, int rows, int k, int n, int grad)
{
    exp_flat(e, (size_t)rows * k);
    double lse = 0.0;
    for (int r = 0; r < rows; r++) {
        float *er = e + (size_t)r * k;
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += er[j];
        lse += log(sum);
        if (grad) {
            const float g = (float)(1.0 / (sum * n));
            for (int j = 0; j < k; j++)
                er[j] *= g;
            if (label[r] >= 0 && label[r] < k)
                er[label[r]] -= (float)(1.0 / n);
        }
    }
    return lse;
}

/* One row through libm, in double: for rows holding NaN or infinity, and
 * evaluation rows too long for xent_rows' buffer. */
static double xent_row_libm(const float *x, float mx, int32_t l, int k, int n,
                            float *d)
{
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        double e = exp((double)x[j] - mx);
        sum += e;
        if (d)
            d[j] = (float)e;
    }
    if (d)
        for (int j = 0; j < k; j++)
            d[j] = (float)((d[j] / sum - (j == l ? 1.0 : 0.0)) / n);
    return log(sum);
}

enum { XENT_BUF = 2048 }; /* floats of exponentials on the stack, in evaluation */

/* xent_finish on the pend rows before row i, whose shifted logits are in
 * their gradient rows, or at the start of buf when there is no gradient. */
static inline __attribute__((always_inline)) double
xent_flush(float *dlogits, float *buf, const int32_t *label, int i, int pend,
           int k, int n)
{
    const int r0 = i - pend;
    return xent_finish(dlogits ? dlogits + (size_t)r0 * k : buf, label + r0,
                       pend, k, n, dlogits != NULL);
}

/* Mean cross-entropy of n rows of k logits (log-softmax fused), times n;
 * and if dlogits is not NULL its gradient, (softmax - one-hot) / n.  The
 * shifted logits of as many rows as fit go to the gradient (or a buffer on
 * the stack), all their exponentials are taken in one go, then each row's
 * sum and its log in double. */
static inline __attribute__((always_inline)) double
xent_rows(const float *logits, const int32_t *label, int n, int k,
          float *dlogits)
{
    float buf[XENT_BUF];
    double loss = 0.0;
    int pend = 0; /* the rows before row i that await their exponentials */
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * k;
        float mx = x[0];
        for (int j = 1; j < k; j++)
            if (x[j] > mx || isnan(x[j]))
                mx = x[j];
        const int32_t l = label[i];
        /* A label out of range is the caller's bug; make it visible. */
        loss -= (l >= 0 && l < k) ? (double)x[l] - mx : NAN;
        float *d = dlogits ? dlogits + (size_t)i * k : NULL;
        if (!isfinite(mx) || (!d && k > XENT_BUF)) {
            loss += xent_flush(dlogits, buf, label, i, pend, k, n);
            pend = 0;
            loss += xent_row_libm(x, mx, l, k, n, d);
            continue;
        }
        if (!d && (size_t)(pend + 1) * k > XENT_BUF) {
            loss += xent_flush(dlogits, buf, label, i, pend, k, n);
            pend = 0;
        }
        float *z = d ? d : buf + (size_t)pend * k;
        for (int j = 0; j < k; j++)
            z[j] = x[j] - mx;
        pend++;
    }
    return loss + xent_flush(dlogits, buf, label, n, pend, k, n);
}

#ifdef NRT_X86_AVX2
__attribute__((target("avx2"))) static double
xent_avx2(const float *logits, const int32_t *label, int n, int k,
          float *dlogits)
{
    return xent_rows(logits, label, n, k, dlogits);
}
#endif

static double xent_generic(const float *logits, const int32_t *label, int n,
                           int k, float *dlogits)
{
    return xent_rows(logits, label, n, k, dlogits);
}

float nrt_xent(const float *logits, const int32_t *label, int n, int k,
               float *dlogits)
{
    if (n <= 0 || k <= 0)
        return 0.0f;
#ifdef NRT_X86_AVX2
    if (have_avx2())
        return (float)(xent_avx2(logits, label, n, k, dlogits) / n);
#endif
    return (float)(xent_generic(logits, label, n, k, dlogits) / n);
}

#define LOSS_NAME(K, name, cls) [NRT_LOSS_##K] = #name,
static const char *const loss_names[NRT_LOSS_KINDS] = {NRT_LOSSES(LOSS_NAME)};
#undef LOSS_NAME

const char *nrt_loss_name(int kind)
{
    return kind > NRT_LOSS_NONE && kind < NRT_LOSS_KINDS ? loss_names[kind] : NULL;
}

/* The values in order, in double (losses.h); nrt_dev_loss's dy bit for bit. */
float nrt_loss(const nrt_loss_spec *l, const float *y, const float *t, int n, int d, float *dy)
{
    size_t nd = (size_t)(n > 0 ? n : 0) * (size_t)(d > 0 ? d : 0);
    if (nd == 0)
        return 0.0f;
    const int kind = l->kind;
    const double arg = l->arg, dn = (double)nd;
    double sum = 0.0;
    for (size_t i = 0; i < nd; i++) {
        double e = (double)y[i] - (double)t[i];
        sum += nrt_loss_value(kind, e, arg);
        if (dy)
            dy[i] = (float)(nrt_loss_deriv(kind, e, arg) / dn);
    }
    return (float)(sum / dn);
}

int nrt_correct(const float *logits, const int32_t *label, int n, int k)
{
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * k;
        int best = 0;
        /* argmax as torch.argmax: the first maximum; a NaN is the maximum. */
        for (int j = 1; j < k && !isnan(x[best]); j++)
            if (x[j] > x[best] || isnan(x[j]))
                best = j;
        ok += best == label[i];
    }
    return ok;
}

/* ------------------------------------------------------------ precision */

/* fp16 on F16C (every cpu with AVX2 has it): vcvtps2ph rounds to nearest
 * even to binary16 as nrt_fp16 does, subnormals and infinities alike, and
 * vcvtph2ps reads binary16 back exactly; a NaN becomes nrt_fp16's quiet NaN
 * of its sign (0x7e00 in 16 bits: the instruction would keep payload bits),
 * so the values are nrt_fp16's, nrt_half_bits' and nrt_half_value's, bit
 * for bit (test_kernels).  Eight values at a time: dst the rounded floats
 * and bits their 16 bits (either NULL), from src; returns how many it did,
 * the rest being the caller's.  Elsewhere none. */
#ifdef NRT_X86_AVX2
static int have_f16c(void)
{
    return have_avx2() && cpu_bits.f16c;
}

__attribute__((target("avx2,f16c"))) static size_t fp16_f16c(float *dst, uint16_t *bits,
                                                               const float *src, size_t n)
{
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)),
                 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(src + i), nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (dst)
            _mm256_storeu_ps(dst + i, _mm256_blendv_ps(_mm256_cvtph_ps(h),
                                                       _mm256_or_ps(_mm256_and_ps(v, sign), quiet), nan));
        if (bits) {
            const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                                  _mm256_extractf128_si256(_mm256_castps_si256(nan), 1)),
                          canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)),
                                               _mm_set1_epi16(0x7e00));
            h = _mm_blendv_epi8(h, canon, nan16);
            _mm_storeu_si128((__m128i *)(void *)(bits + i), h);
        }
    }
    return i;
}

__attribute__((target("avx2,f16c"))) static size_t fp16_f16c_load(float *dst, const uint16_t *src,
                                                                    size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    return i;
}
#else
static int have_f16c(void)
{
    return 0;
}

static size_t fp16_f16c(float *dst, uint16_t *bits, const float *src, size_t n)
{
    (void)dst, (void)bits, (void)src, (void)n;
    return 0;
}

static size_t fp16_f16c_load(float *dst, const uint16_t *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    return 0;
}
#endif

/* (a loop a precision, so that each is vectorised, and on AVX2 where the
 * cpu has it: integer operations on the floats' bits, the same bits from
 * either clone; fp16's on F16C) */
NRT_PASS void nrt_round_lowp_to(int prec, float *dst, const float *src, size_t n)
{
    if (prec == NRT_BF16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = nrt_bf16(src[i]);
    } else if (prec == NRT_FP16) {
        for (size_t i = have_f16c() ? fp16_f16c(dst, NULL, src, n) : 0; i < n; i++)
            dst[i] = nrt_fp16(src[i]);
    } else if (dst != src) {
        memmove(dst, src, sizeof(float) * n);
    }
}

void nrt_round_lowp(int prec, float *p, size_t n)
{
    nrt_round_lowp_to(prec, p, p, n);
}

void nrt_round_lowp_scaled(int prec, float *p, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        p[i] *= s;
    nrt_round_lowp(prec, p, n);
}

/* (bf16's bits, of a rounded value, are its top half; the loops a
 * precision, so that bf16's is vectorised) */
NRT_PASS void nrt_half_keep(int prec, uint16_t *dst, const float *src, size_t n)
{
    if (prec == NRT_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = (uint16_t)(nrt_f32_bits(nrt_bf16(src[i])) >> 16);
    else
        for (size_t i = have_f16c() ? fp16_f16c(NULL, dst, src, n) : 0; i < n; i++)
            dst[i] = nrt_half_bits(prec, src[i]);
}

NRT_PASS void nrt_half_round_keep(int prec, uint16_t *dst, float *p, size_t n)
{
    if (prec == NRT_BF16) {
        for (size_t i = 0; i < n; i++) {
            const float r = nrt_bf16(p[i]);
            p[i] = r;
            dst[i] = (uint16_t)(nrt_f32_bits(r) >> 16);
        }
    } else {
        for (size_t i = have_f16c() ? fp16_f16c(p, dst, p, n) : 0; i < n; i++) {
            p[i] = nrt_lowp(prec, p[i]);
            dst[i] = nrt_half_bits(prec, p[i]);
        }
    }
}

NRT_PASS void nrt_half_load(int prec, float *dst, const uint16_t *src, size_t n)
{
    if (prec == NRT_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = nrt_f32_of((uint32_t)src[i] << 16);
    else
        for (size_t i = have_f16c() ? fp16_f16c_load(dst, src, n) : 0; i < n; i++)
            dst[i] = nrt_half_value(prec, src[i]);
}
