/*
 * test_kernels.c — unit tests of runtime/kernels.c.
 *
 * Every kernel is checked against a naive reference written here from the
 * definition (in double where rounding matters), and the gradients against
 * the adjoint identity or central finite differences.  nrt_sgemm is also
 * checked to give bit-identical results with 1, 2 and 3 OpenMP threads, and
 * so are the batched col2im, the convolutions and the sums.  Where a kernel has a
 * second, faster form of another (the batched col2im, the 2x2 pools), the
 * two must agree bit for bit.
 *
 *   test_kernels          run the tests: failures to stderr, a summary to
 *                         stdout, exit status 0 if all passed
 *   test_kernels --bench  GFLOP/s of nrt_sgemm on the shapes netc's programs
 *                         use, and of cblas_sgemm beside it when built with
 *                         -DNRT_TEST_CBLAS=1 (or -DNETRT_HAVE_OPENBLAS=1)
 *                         and -lopenblas; then milliseconds of the other
 *                         layer kernels on cifar10's shapes, beside what
 *                         they replace
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "netrt.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(NRT_TEST_CBLAS) || defined(NETRT_HAVE_OPENBLAS)
#define HAVE_CBLAS 1
#include <cblas.h>
#endif

#include "check.h"

static nrt_rng rng;

static float frand(void) /* uniform in [-1, 1) */
{
    return (float)(2.0 * nrt_rng_uniform(&rng) - 1.0);
}

static float *randv(size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

/* ------------------------------------------------------------------ sgemm */

/* One product checked against a double reference.  A and B are stored with
 * row strides larger than needed when pad is set, and C too; the padding of
 * C must come back untouched.  nanc: C starts as NaN (used with beta = 0). */
static void check_gemm_at(int dot, int ta, int tb, int m, int n, int k, float alpha,
                          float beta, int pad, int nanc)
{
    int ar = ta ? k : m, ac = ta ? m : k; /* A as stored */
    int br = tb ? n : k, bc = tb ? k : n;
    int lda = ac + (pad ? 3 : 0), ldb = bc + (pad ? 5 : 0);
    int ldc = n + (pad ? 2 : 0);
    float *a = randv((size_t)ar * lda), *b = randv((size_t)br * ldb);
    float *c = randv((size_t)m * ldc), *c0 = malloc(((size_t)m * ldc + 1) * 4);
    if (dot != NRT_DOT_F32) { /* the bf16 dots: bf16 values, as a bf16 run's */
        nrt_round_lowp(NRT_BF16, a, (size_t)ar * lda);
        nrt_round_lowp(NRT_BF16, b, (size_t)br * ldb);
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++)
            if (j >= n)
                c[(size_t)i * ldc + j] = 12345.0f;
            else if (nanc)
                c[(size_t)i * ldc + j] = NAN;
    memcpy(c0, c, (size_t)m * ldc * sizeof *c);
    nrt_gemm(dot, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int bad = 0;
    for (int i = 0; i < m && bad < 3; i++) {
        for (int j = 0; j < ldc && bad < 3; j++) {
            float got = c[(size_t)i * ldc + j];
            if (j >= n) {
                if (got != 12345.0f) {
                    bad++;
                    CHECK(0, "sgemm ta=%d tb=%d %dx%dx%d: padding of C "
                             "changed at [%d][%d]", ta, tb, m, n, k, i, j);
                }
                continue;
            }
            double s = 0.0, abss = 0.0;
            for (int p = 0; p < k; p++) {
                double x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += x * y;
                abss += fabs(x * y);
            }
            double want = alpha * s, bound = fabs(alpha) * abss;
            if (beta != 0.0f) {
                want += beta * (double)c0[(size_t)i * ldc + j];
                bound += fabs(beta * (double)c0[(size_t)i * ldc + j]);
            }
            double err = fabs(got - want);
            double tol = 2.0 * FLT_EPSILON * (k + 4) * bound + 1e-30;
            if (!(err <= tol)) { /* catches NaN too */
                bad++;
                CHECK(0, "gemm dot=%d ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g "
                         "pad=%d nanc=%d: C[%d][%d] = %.9g, want %.9g",
                      dot, ta, tb, m, n, k, alpha, beta, pad, nanc, i, j, got,
                      want);
            }
        }
    }
    if (!bad)
        CHECK(1, "ok");
    free(a);
    free(b);
    free(c);
    free(c0);
}

/* The products below the packing threshold (m n k < 4096, gemm_small):
 * each element of C is the fp32 sum, in the order of p from 0, of its
 * products rounded, then alpha s, or alpha s + beta c (no FMA), whatever
 * the blocking of the loops around it: the same bits as one element at a
 * time.  Shapes with one row, one column and k = 1 among them (boston_mlp's
 * last layer and its gradients). */
static void test_sgemm_small_order(void)
{
    static const int sh[][3] = {{32, 1, 32}, {1, 32, 32}, {32, 32, 1}, {7, 9, 5},
                                {13, 3, 17}, {3, 30, 11}, {9, 8, 1}, {1, 1, 40}};
    int bad = 0;
    for (size_t t = 0; t < sizeof sh / sizeof *sh; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int bi = 0; bi < 3; bi++) {
                    const int m = sh[t][0], n = sh[t][1], k = sh[t][2];
                    const float alpha = bi == 2 ? 0.7f : 1.0f, beta = bi == 0 ? 0.0f : 0.37f;
                    const int lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
                    float *a = randv((size_t)(ta ? k : m) * lda);
                    float *b = randv((size_t)(tb ? n : k) * ldb), *c = randv((size_t)m * ldc);
                    float *c0 = malloc((size_t)m * ldc * sizeof *c0);
                    memcpy(c0, c, (size_t)m * ldc * sizeof *c);
                    nrt_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) {
                            float s = 0.0f;
                            for (int p = 0; p < k; p++) {
                                const float x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                                const float y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                                const float xy = x * y;
                                s += xy;
                            }
                            const float e = c0[(size_t)i * ldc + j];
                            const float want = beta == 0.0f ? alpha * s : alpha * s + beta * e;
                            if (memcmp(&want, &c[(size_t)i * ldc + j], sizeof want) && bad++ < 3)
                                CHECK(0, "small sgemm ta=%d tb=%d %dx%dx%d beta=%g: C[%d][%d] = "
                                         "%.9g, the in-order sum %.9g", ta, tb, m, n, k, beta, i,
                                      j, c[(size_t)i * ldc + j], want);
                        }
                    free(a), free(b), free(c), free(c0);
                }
    CHECK(bad == 0, "small sgemm: %d elements not the in-order sum", bad);
}

static void check_gemm(int ta, int tb, int m, int n, int k, float alpha, float beta, int pad,
                       int nanc)
{
    check_gemm_at(NRT_DOT_F32, ta, tb, m, n, k, alpha, beta, pad, nanc);
}

static void check_gemm_dot(int dot, int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    check_gemm_at(dot, ta, tb, m, n, k, alpha, beta, 1, beta == 0.0f);
}

static void test_sgemm(void)
{
    static const int sizes[] = {1, 2, 5, 7, 16, 17, 33, 64, 100, 257};
    const int ns = (int)(sizeof sizes / sizeof *sizes);
    static const float alphas[] = {1.0f, -0.5f, 2.0f};
    static const float betas[] = {0.0f, 1.0f, 0.25f};
    int runs = 0;
    /* All four transposes on a deterministic spread of shapes. */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int r = 0; r < 40; r++) {
                int m = sizes[nrt_rng_below(&rng, ns)];
                int n = sizes[nrt_rng_below(&rng, ns)];
                int k = sizes[nrt_rng_below(&rng, ns)];
                if ((double)m * n * k > 400000.0)
                    k = 7;
                float al = alphas[nrt_rng_below(&rng, 3)];
                float be = betas[nrt_rng_below(&rng, 3)];
                check_gemm(ta, tb, m, n, k, al, be, r & 1, 0);
                runs++;
            }
    /* Shapes across the block boundaries: several K blocks (KC = 256),
     * several M blocks (MC = 144), several N blocks (NC = 4080). */
    static const int big[][3] = {
        {257, 33, 300}, {150, 40, 513}, {300, 17, 100}, {6, 16, 700},
        {7, 4100, 9}, {12, 32, 256}, {145, 33, 257}, {64, 256, 800},
        {32, 1024, 75}, {75, 64, 32}, {1, 1000, 50}, {1000, 1, 50},
        {50, 50, 1}, {3, 3, 3}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++)
        for (int t = 0; t < 4; t++) {
            check_gemm(t & 1, t >> 1, big[s][0], big[s][1], big[s][2], 1.0f,
                       t == 3 ? 0.5f : (float)(t & 1), t & 1, 0);
            runs++;
        }
    /* beta = 0 must ignore what C holds, NaN included. */
    for (int t = 0; t < 4; t++) {
        check_gemm(t & 1, t >> 1, 3, 4, 5, 1.0f, 0.0f, 0, 1);
        check_gemm(t & 1, t >> 1, 37, 70, 41, -1.5f, 0.0f, 1, 1);
        check_gemm(t & 1, t >> 1, 37, 70, 300, 1.0f, 0.0f, 0, 1);
        runs += 3;
    }
    /* k = 0 and alpha = 0: C = beta C, NaN-proof when beta = 0. */
    {
        float c[6] = {NAN, 1, 2, 3, 4, NAN}, one = 1.0f;
        nrt_sgemm(0, 0, 2, 3, 0, 1.0f, &one, 1, &one, 1, 0.0f, c, 3);
        int zero = 1;
        for (int i = 0; i < 6; i++)
            zero &= c[i] == 0.0f;
        CHECK(zero, "sgemm k=0 beta=0 did not zero C");
        float d[4] = {1, 2, 3, 4}, a[4] = {NAN, 1, 1, 1};
        nrt_sgemm(0, 0, 2, 2, 2, 0.0f, a, 2, a, 2, 2.0f, d, 2);
        CHECK(d[0] == 2 && d[1] == 4 && d[2] == 6 && d[3] == 8,
              "sgemm alpha=0: C = %g %g %g %g, want 2 4 6 8", d[0], d[1],
              d[2], d[3]);
    }
    printf("sgemm: %d products checked\n", runs);
}

/* Results must not depend on the number of threads.  Every shape is
 * work enough (m n k of at least kernels.c's PAR_MIN_GEMM, 2^23) to be
 * shared out among them. */
static void test_sgemm_threads(void)
{
#ifdef _OPENMP
    static const int shapes[][3] = {{256, 256, 256}, {32, 4096, 75},
                                    {75, 4096, 32},  {64, 800, 256},
                                    {301, 77, 530},  {17, 13000, 40}};
    int saved = omp_get_max_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            float *a = randv((size_t)m * k), *b = randv((size_t)k * n);
            float *c1 = randv((size_t)m * n);
            float *c2 = malloc((size_t)m * n * sizeof *c2);
            float *c3 = malloc((size_t)m * n * sizeof *c3);
            memcpy(c2, c1, (size_t)m * n * sizeof *c2);
            memcpy(c3, c1, (size_t)m * n * sizeof *c3);
            int lda = ta ? m : k, ldb = tb ? k : n;
            omp_set_num_threads(1);
            nrt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.5f, c1, n);
            omp_set_num_threads(2);
            nrt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.5f, c2, n);
            omp_set_num_threads(3);
            nrt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.5f, c3, n);
            CHECK(!memcmp(c1, c2, (size_t)m * n * sizeof *c1) &&
                      !memcmp(c1, c3, (size_t)m * n * sizeof *c1),
                  "sgemm ta=%d tb=%d %dx%dx%d differs between 1, 2 and 3 "
                  "threads", ta, tb, m, n, k);
            free(a);
            free(b);
            free(c1);
            free(c2);
            free(c3);
        }
    }
    omp_set_num_threads(saved);
    printf("sgemm: thread-count independence checked\n");
#else
    printf("sgemm: no OpenMP, thread-count check skipped\n");
#endif
}

/* ------------------------------------------------------- the products' dots */

static float *bf16v(size_t n) /* random bf16 values, as floats */
{
    float *v = randv(n);
    nrt_round_lowp(NRT_BF16, v, n);
    return v;
}

/* What NRT_DOT_BF16 computes on AVX512-BF16, from nrt_sgemm's contract and
 * vdpbf16ps's definition: k cut into ceil(k / 256) blocks of equal size
 * (rounded up); over each block, acc = 0, then for each pair (2q, 2q+1)
 * of it, acc += a[2q+1] b[2q+1], acc += a[2q] b[2q] (a product of bf16
 * values is exact in float; each sum rounded to float), an odd block's
 * last pair completed by zeros; c = alpha acc + beta c on the first block
 * (fused, beta c rounded first; alpha acc alone if beta is 0), alpha acc
 * + c on the others.  Products of m n k < 4096 are the plain loop's. */
static float dot_bf16_ref(const float *ai, size_t sa, const float *bj, size_t sb, int k,
                          float alpha, float beta, float c)
{
    const int nb = (k + 255) / 256, kcb = (k + nb - 1) / nb;
    for (int p0 = 0; p0 < k; p0 += kcb) {
        const int kc = k - p0 < kcb ? k - p0 : kcb;
        float acc = 0.0f;
        for (int p = p0; p < p0 + kc; p += 2) {
            const float odd = p + 1 < p0 + kc ? ai[(p + 1) * sa] * bj[(p + 1) * sb] : 0.0f;
            acc += odd;
            acc += ai[p * sa] * bj[p * sb];
        }
        if (p0 == 0)
            c = beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * c);
        else
            c = fmaf(alpha, acc, c);
    }
    return c;
}

/* nrt_gemm's dots on one product: NRT_DOT_F32 (AVX-512 where the cpu has
 * it) the same bits as NRT_DOT_AVX2; NRT_DOT_BF16 on bf16 values the same
 * bits as dot_bf16_ref where the cpu has AVX512-BF16, else as F32's. */
static void check_dots(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    const int lda = ta ? m : k, ldb = tb ? k : n;
    float *a = bf16v((size_t)m * k), *b = bf16v((size_t)k * n), *c0 = randv((size_t)m * n);
    float *cf = malloc((size_t)m * n * sizeof *cf), *c2 = malloc((size_t)m * n * sizeof *c2);
    float *cb = malloc((size_t)m * n * sizeof *cb);
    memcpy(cf, c0, (size_t)m * n * sizeof *cf);
    memcpy(c2, c0, (size_t)m * n * sizeof *c2);
    memcpy(cb, c0, (size_t)m * n * sizeof *cb);
    nrt_gemm(NRT_DOT_F32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cf, n);
    nrt_gemm(NRT_DOT_AVX2, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c2, n);
    nrt_gemm(NRT_DOT_BF16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cb, n);
    CHECK(!memcmp(cf, c2, (size_t)m * n * sizeof *cf),
          "gemm ta=%d tb=%d %dx%dx%d: %s and AVX2 differ", ta, tb, m, n, k, nrt_gemm_isa());
    if (!nrt_dot_native() || (double)m * n * k < 4096.0) /* fp32's product, the plain loop's */
        CHECK(!memcmp(cf, cb, (size_t)m * n * sizeof *cf),
              "gemm bf16 ta=%d tb=%d %dx%dx%d: not fp32's bits", ta, tb, m, n, k);
    else
        for (int i = 0, bad = 0; i < m && !bad; i++)
            for (int j = 0; j < n && !bad; j++) {
                const float want = dot_bf16_ref(ta ? a + i : a + (size_t)i * lda, ta ? lda : 1,
                                                tb ? b + (size_t)j * ldb : b + j, tb ? 1 : ldb,
                                                k, alpha, beta, c0[(size_t)i * n + j]);
                const float got = cb[(size_t)i * n + j];
                if (memcmp(&got, &want, sizeof got)) {
                    bad = 1;
                    CHECK(0, "gemm bf16 ta=%d tb=%d %dx%dx%d: C[%d][%d] = %.9g, vdpbf16ps's "
                          "sums give %.9g", ta, tb, m, n, k, i, j, got, want);
                }
            }
    free(a), free(b), free(c0), free(cf), free(c2), free(cb);
}

static void test_dots(void)
{
    static const int shapes[][3] = {
        {1, 1, 1},     {3, 5, 7},     {6, 16, 2},     {7, 17, 3},    {12, 32, 256},
        {13, 33, 257}, {32, 1024, 75}, {75, 64, 32},  {64, 256, 800}, {145, 33, 513},
        {5, 4100, 9},  {100, 100, 1}, {257, 40, 300}, {1, 1000, 50}, {33, 17, 31}};
    int runs = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++, runs++)
            check_dots(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                       t == 2 ? -0.5f : 1.0f, t == 0 ? 0.0f : t == 3 ? 1.0f : 0.25f);
#ifdef _OPENMP
    /* bf16's products do not depend on the thread count either */
    int saved = omp_get_max_threads(), same = 1;
    const int m = 64, n = 1100, k = 300;
    float *a = bf16v((size_t)m * k), *b = bf16v((size_t)k * n);
    float *c1 = malloc((size_t)m * n * sizeof *c1), *c2 = malloc((size_t)m * n * sizeof *c2);
    for (int dot = NRT_DOT_BF16; dot <= NRT_DOT_AMX; dot += NRT_DOT_AMX - NRT_DOT_BF16) {
        if (dot == NRT_DOT_AMX && !nrt_amx_enable())
            break;
        omp_set_num_threads(1);
        nrt_gemm(dot, 0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c1, n);
        for (int t = 2; t <= 3; t++) {
            omp_set_num_threads(t);
            nrt_gemm(dot, 0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n);
            same &= !memcmp(c1, c2, (size_t)m * n * sizeof *c1);
        }
        omp_set_num_threads(saved);
        CHECK(same, "gemm dot %d %dx%dx%d: threads change the result", dot, m, n, k);
    }
    free(a), free(b), free(c1), free(c2);
#endif
    /* AMX's tiles: the same products summed in the hardware's order, so
     * against the double reference within fp32's rounding of the sums (the
     * convolutions: test_conv_batch) */
    const int amx = nrt_amx_enable();
    if (amx) {
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++, runs++)
                check_gemm_dot(NRT_DOT_AMX, t & 1, t >> 1, shapes[s][0], shapes[s][1],
                               shapes[s][2], t == 2 ? -0.5f : 1.0f,
                               t == 0 ? 0.0f : t == 3 ? 1.0f : 0.25f);
    }
    printf("gemm dots: %d products, %s%s%s\n", runs, nrt_gemm_isa(),
           nrt_dot_native() ? " and AVX512-BF16" : " (no AVX512-BF16: bf16 as fp32)",
           amx ? " and AMX" : " (no AMX)");
}

/* ---------------------------------------------------------- im2col/col2im */

struct conv {
    int c, h, w, kh, kw, sh, sw, ph, pw;
};

static int out_size(int in, int k, int s, int p)
{
    return (in + 2 * p - k) / s + 1;
}

static void test_im2col(void)
{
    static const struct conv cs[] = {
        {1, 1, 1, 1, 1, 1, 1, 0, 0},  {3, 5, 7, 3, 3, 1, 1, 1, 1},
        {2, 8, 8, 3, 2, 2, 1, 0, 1},  {4, 9, 6, 5, 5, 2, 2, 2, 2},
        {3, 4, 4, 5, 5, 1, 1, 2, 2},  {2, 7, 11, 1, 3, 3, 2, 0, 1},
        {5, 32, 32, 5, 5, 1, 1, 0, 0}, {3, 6, 5, 4, 3, 3, 2, 3, 2},
        {16, 16, 16, 3, 3, 1, 1, 1, 1}};
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++) {
        struct conv v = cs[t];
        int oh = out_size(v.h, v.kh, v.sh, v.ph);
        int ow = out_size(v.w, v.kw, v.sw, v.pw);
        size_t rows = (size_t)v.c * v.kh * v.kw, cols = (size_t)oh * ow;
        size_t xs = (size_t)v.c * v.h * v.w;
        float *x = randv(xs), *col = randv(rows * cols);

        /* Every entry against the definition. */
        nrt_im2col(x, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, oh,
                   ow, col);
        int bad = 0;
        for (int ch = 0; ch < v.c; ch++)
            for (int ki = 0; ki < v.kh; ki++)
                for (int kj = 0; kj < v.kw; kj++)
                    for (int oy = 0; oy < oh; oy++)
                        for (int ox = 0; ox < ow; ox++) {
                            int iy = oy * v.sh - v.ph + ki;
                            int ix = ox * v.sw - v.pw + kj;
                            float want =
                                (iy >= 0 && iy < v.h && ix >= 0 && ix < v.w)
                                    ? x[((size_t)ch * v.h + iy) * v.w + ix]
                                    : 0.0f;
                            size_t r = ((size_t)ch * v.kh + ki) * v.kw + kj;
                            if (col[r * cols + (size_t)oy * ow + ox] != want)
                                bad++;
                        }
        CHECK(bad == 0, "im2col case %zu: %d entries wrong", t, bad);

        /* A convolution through im2col + sgemm against the direct one. */
        int oc = 3;
        float *wt = randv((size_t)oc * rows), *y = randv((size_t)oc * cols);
        nrt_sgemm(0, 0, oc, (int)cols, (int)rows, 1.0f, wt, (int)rows, col,
                  (int)cols, 0.0f, y, (int)cols);
        double worst = 0.0;
        for (int o = 0; o < oc; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double s = 0.0, abss = 0.0;
                    for (int ch = 0; ch < v.c; ch++)
                        for (int ki = 0; ki < v.kh; ki++)
                            for (int kj = 0; kj < v.kw; kj++) {
                                int iy = oy * v.sh - v.ph + ki;
                                int ix = ox * v.sw - v.pw + kj;
                                if (iy < 0 || iy >= v.h || ix < 0 || ix >= v.w)
                                    continue;
                                double p =
                                    (double)wt[(size_t)o * rows +
                                               ((size_t)ch * v.kh + ki) * v.kw +
                                               kj] *
                                    x[((size_t)ch * v.h + iy) * v.w + ix];
                                s += p;
                                abss += fabs(p);
                            }
                    double e = fabs(y[(size_t)o * cols + (size_t)oy * ow + ox] - s) /
                               (abss + 1e-30);
                    if (e > worst)
                        worst = e;
                }
        CHECK(worst < 1e-5, "conv via im2col case %zu: relative error %g", t,
              worst);

        /* col2im is the adjoint: <im2col(x), g> = <x, col2im(g)>, and it
         * accumulates into dx. */
        float *g = randv(rows * cols), *dx = malloc(xs * sizeof *dx);
        for (size_t i = 0; i < xs; i++)
            dx[i] = 1.0f;
        nrt_col2im(g, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, oh,
                   ow, dx);
        double lhs = 0.0, rhs = 0.0, abss = 0.0;
        for (size_t i = 0; i < rows * cols; i++) {
            lhs += (double)col[i] * g[i];
            abss += fabs((double)col[i] * g[i]);
        }
        for (size_t i = 0; i < xs; i++)
            rhs += (double)x[i] * (dx[i] - 1.0);
        CHECK(fabs(lhs - rhs) <= 1e-5 * abss + 1e-12,
              "col2im case %zu: <im2col(x),g> = %.9g but <x,col2im(g)> = %.9g",
              t, lhs, rhs);
        /* And entry by entry against a naive scatter. */
        double *ref = calloc(xs, sizeof *ref);
        for (int ch = 0; ch < v.c; ch++)
            for (int ki = 0; ki < v.kh; ki++)
                for (int kj = 0; kj < v.kw; kj++)
                    for (int oy = 0; oy < oh; oy++)
                        for (int ox = 0; ox < ow; ox++) {
                            int iy = oy * v.sh - v.ph + ki;
                            int ix = ox * v.sw - v.pw + kj;
                            if (iy < 0 || iy >= v.h || ix < 0 || ix >= v.w)
                                continue;
                            size_t r = ((size_t)ch * v.kh + ki) * v.kw + kj;
                            ref[((size_t)ch * v.h + iy) * v.w + ix] +=
                                g[r * cols + (size_t)oy * ow + ox];
                        }
        bad = 0;
        for (size_t i = 0; i < xs; i++)
            if (fabs(dx[i] - 1.0 - ref[i]) > 1e-5)
                bad++;
        CHECK(bad == 0, "col2im case %zu: %d entries wrong", t, bad);
        free(ref);
        free(x);
        free(col);
        free(wt);
        free(y);
        free(g);
        free(dx);
    }
    printf("im2col/col2im: %zu geometries checked\n", sizeof cs / sizeof *cs);
}

/* ---------------------------------------------------------------- pooling */

struct pool {
    int n, c, h, w, k, s, p;
};

static const struct pool pools[] = {
    {2, 3, 8, 8, 2, 2, 0}, {1, 2, 7, 5, 3, 2, 1}, {2, 1, 6, 6, 3, 1, 1},
    {1, 1, 1, 1, 1, 1, 0}, {3, 4, 9, 9, 4, 3, 2}, {2, 2, 5, 7, 5, 1, 2},
    {1, 3, 32, 32, 2, 2, 0},
    /* a 2x2 pool leaving a row and a column no window has; a 3x3 pool
     * with as many outputs as a 2x2 one, whose windows overlap */
    {2, 2, 35, 41, 2, 2, 0}, {1, 2, 32, 32, 3, 2, 1}};
static const int npools = (int)(sizeof pools / sizeof *pools);

/* The naive max pooling: PyTorch's rule, a strictly larger value or a NaN
 * takes over, starting from -inf at the first real cell. */
static void ref_maxpool(const float *x, struct pool v, int oh, int ow,
                        float *y, int32_t *arg)
{
    for (int q = 0; q < v.n * v.c; q++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float best = -INFINITY;
                int32_t bi = -1;
                for (int ki = 0; ki < v.k; ki++)
                    for (int kj = 0; kj < v.k; kj++) {
                        int iy = oy * v.s - v.p + ki, ix = ox * v.s - v.p + kj;
                        if (iy < 0 || iy >= v.h || ix < 0 || ix >= v.w)
                            continue;
                        float val = x[(size_t)q * v.h * v.w + iy * v.w + ix];
                        if (bi < 0)
                            bi = iy * v.w + ix;
                        if (val > best || isnan(val)) {
                            best = val;
                            bi = iy * v.w + ix;
                        }
                    }
                y[(size_t)q * oh * ow + oy * ow + ox] = best;
                arg[(size_t)q * oh * ow + oy * ow + ox] = bi;
            }
}

static void test_maxpool(void)
{
    for (int t = 0; t < npools; t++) {
        struct pool v = pools[t];
        int oh = out_size(v.h, v.k, v.s, v.p), ow = out_size(v.w, v.k, v.s, v.p);
        size_t xs = (size_t)v.n * v.c * v.h * v.w;
        size_t ys = (size_t)v.n * v.c * oh * ow;
        for (int mode = 0; mode < 4; mode++) {
            float *x = randv(xs);
            if (mode == 1) /* ties everywhere: few distinct values */
                for (size_t i = 0; i < xs; i++)
                    x[i] = (float)(int)(x[i] * 2.0f);
            if (mode == 2) /* all negative: padding (0) must not win */
                for (size_t i = 0; i < xs; i++)
                    x[i] = -1.0f - fabsf(x[i]);
            if (mode == 3) /* NaNs: a NaN wins its window */
                for (size_t i = 3; i < xs; i += 7)
                    x[i] = NAN;
            float *y = malloc(ys * sizeof *y), *ry = malloc(ys * sizeof *ry);
            int32_t *arg = malloc(ys * sizeof *arg);
            int32_t *rarg = malloc(ys * sizeof *rarg);
            nrt_maxpool2d_fwd(x, v.n, v.c, v.h, v.w, v.k, v.s, v.p, oh, ow, y,
                              arg);
            ref_maxpool(x, v, oh, ow, ry, rarg);
            int bad = 0;
            for (size_t i = 0; i < ys; i++)
                if ((y[i] != ry[i] && !(isnan(y[i]) && isnan(ry[i]))) || arg[i] != rarg[i])
                    bad++;
            CHECK(bad == 0, "maxpool case %d mode %d: %d outputs wrong", t,
                  mode, bad);

            /* Backward: dx overwritten with the scatter of dy through arg. */
            float *dy = randv(ys), *dx = randv(xs);
            double *ref = calloc(xs, sizeof *ref);
            nrt_maxpool2d_bwd(dy, arg, v.n, v.c, v.h, v.w, v.k, v.s, v.p, oh, ow, dx);
            for (int q = 0; q < v.n * v.c; q++)
                for (int o = 0; o < oh * ow; o++)
                    ref[(size_t)q * v.h * v.w + rarg[(size_t)q * oh * ow + o]] +=
                        dy[(size_t)q * oh * ow + o];
            bad = 0;
            for (size_t i = 0; i < xs; i++)
                if (fabs(dx[i] - ref[i]) > 1e-6)
                    bad++;
            CHECK(bad == 0, "maxpool bwd case %d mode %d: %d entries wrong",
                  t, mode, bad);
            free(x);
            free(y);
            free(ry);
            free(arg);
            free(rarg);
            free(dy);
            free(dx);
            free(ref);
        }
    }

    /* Hand-made cases.  Ties: the first cell in scan order. */
    {
        float x[4] = {5, 5, 5, 5}, y;
        int32_t a;
        nrt_maxpool2d_fwd(x, 1, 1, 2, 2, 2, 2, 0, 1, 1, &y, &a);
        CHECK(y == 5 && a == 0, "maxpool tie: y=%g arg=%d, want 5 0", y,
              (int)a);
        float x2[4] = {1, 7, 7, 7};
        nrt_maxpool2d_fwd(x2, 1, 1, 2, 2, 2, 2, 0, 1, 1, &y, &a);
        CHECK(y == 7 && a == 1, "maxpool tie: y=%g arg=%d, want 7 1", y,
              (int)a);
    }
    /* Padding never wins, even over -inf: the first real cell does. */
    {
        float x[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        /* 3x3 outputs of 2x2 windows over the padded 4x4; check corners. */
        float yy[9];
        int32_t aa[9];
        nrt_maxpool2d_fwd(x, 1, 1, 2, 2, 2, 1, 1, 3, 3, yy, aa);
        CHECK(yy[0] == -INFINITY && aa[0] == 0 && aa[2] == 1 && aa[6] == 2 &&
                  aa[8] == 3 && aa[4] == 0,
              "maxpool -inf with padding: arg %d %d %d %d %d", (int)aa[0],
              (int)aa[2], (int)aa[6], (int)aa[8], (int)aa[4]);
    }
    /* NaN wins, as in PyTorch. */
    {
        float x[4] = {1, NAN, 3, 2}, y;
        int32_t a;
        nrt_maxpool2d_fwd(x, 1, 1, 2, 2, 2, 2, 0, 1, 1, &y, &a);
        CHECK(isnan(y) && a == 1, "maxpool NaN: y=%g arg=%d, want nan 1", y,
              (int)a);
    }
    printf("maxpool: %d geometries checked\n", npools);
}

static void test_avgpool(void)
{
    for (int t = 0; t < npools; t++) {
        struct pool v = pools[t];
        int oh = out_size(v.h, v.k, v.s, v.p), ow = out_size(v.w, v.k, v.s, v.p);
        size_t xs = (size_t)v.n * v.c * v.h * v.w;
        size_t ys = (size_t)v.n * v.c * oh * ow;
        float *x = randv(xs), *y = malloc(ys * sizeof *y);
        nrt_avgpool2d_fwd(x, v.n, v.c, v.h, v.w, v.k, v.s, v.p, oh, ow, y);
        int bad = 0;
        for (int q = 0; q < v.n * v.c; q++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double s = 0.0;
                    for (int ki = 0; ki < v.k; ki++)
                        for (int kj = 0; kj < v.k; kj++) {
                            int iy = oy * v.s - v.p + ki;
                            int ix = ox * v.s - v.p + kj;
                            if (iy >= 0 && iy < v.h && ix >= 0 && ix < v.w)
                                s += x[(size_t)q * v.h * v.w + iy * v.w + ix];
                        }
                    s /= v.k * v.k; /* count_include_pad */
                    if (fabs(y[(size_t)q * oh * ow + oy * ow + ox] - s) > 1e-6)
                        bad++;
                }
        CHECK(bad == 0, "avgpool case %d: %d outputs wrong", t, bad);

        /* Backward is the adjoint, and overwrites dx. */
        float *g = randv(ys), *dx = randv(xs);
        nrt_avgpool2d_bwd(g, v.n, v.c, v.h, v.w, v.k, v.s, v.p, oh, ow, dx);
        double lhs = 0.0, rhs = 0.0, abss = 0.0;
        for (size_t i = 0; i < ys; i++) {
            lhs += (double)y[i] * g[i];
            abss += fabs((double)y[i] * g[i]);
        }
        for (size_t i = 0; i < xs; i++)
            rhs += (double)x[i] * dx[i];
        CHECK(fabs(lhs - rhs) <= 1e-5 * abss + 1e-9,
              "avgpool bwd case %d: <f(x),g> = %.9g, <x,f'(g)> = %.9g", t, lhs,
              rhs);
        free(x);
        free(y);
        free(g);
        free(dx);
    }
    /* Hand-made: 2x2 of ones, k=2, s=1, p=1: the corner output sees one
     * real cell, the centre four; the divisor is 4 regardless. */
    {
        float x[4] = {1, 1, 1, 1}, y[9];
        nrt_avgpool2d_fwd(x, 1, 1, 2, 2, 2, 1, 1, 3, 3, y);
        CHECK(y[0] == 0.25f && y[1] == 0.5f && y[4] == 1.0f,
              "avgpool padding: %g %g %g, want 0.25 0.5 1", y[0], y[1], y[4]);
    }
    printf("avgpool: %d geometries checked\n", npools);
}

/* ------------------------------------------------- batched im2col/col2im */

/* nrt_col2im_batch against nrt_col2im one sample at a time: bit for bit,
 * since the same sums are made in the same order.  It overwrites dx, so dx
 * starts as garbage. */
static void check_col2im_batch(int n, struct conv v)
{
    int oh = out_size(v.h, v.kh, v.sh, v.ph);
    int ow = out_size(v.w, v.kw, v.sw, v.pw);
    size_t rows = (size_t)v.c * v.kh * v.kw, plane = (size_t)oh * ow;
    size_t ld = (size_t)n * plane, xs = (size_t)v.c * v.h * v.w;
    float *one = malloc(rows * plane * sizeof *one);
    float *g = randv(rows * ld), *dx = malloc((size_t)n * xs * sizeof *dx);
    float *ref = malloc(xs * sizeof *ref);
    for (size_t i = 0; i < (size_t)n * xs; i++)
        dx[i] = (i & 1) ? NAN : 1e30f;
    nrt_col2im_batch(g, n, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw,
                     oh, ow, dx);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        for (size_t r = 0; r < rows; r++)
            memcpy(one + r * plane, g + r * ld + (size_t)i * plane,
                   plane * sizeof *one);
        memset(ref, 0, xs * sizeof *ref);
        nrt_col2im(one, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, oh,
                   ow, ref);
        bad += memcmp(dx + (size_t)i * xs, ref, xs * sizeof *ref) != 0;
    }
    CHECK(bad == 0,
          "col2im_batch n=%d c=%d %dx%d k=%dx%d s=%d,%d p=%d,%d: %d samples "
          "differ from nrt_col2im", n, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw,
          v.ph, v.pw, bad);

    /* The channel-first layout [C, N, H, W]: the transpose of the same
     * gradients. */
    {
        size_t in = (size_t)v.h * v.w;
        float *dxc = malloc((size_t)n * xs * sizeof *dxc);
        for (size_t i = 0; i < (size_t)n * xs; i++)
            dxc[i] = NAN;
        nrt_col2im_batch_cn(g, n, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw,
                            oh, ow, dxc);
        int same = 1;
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < v.c; ch++)
                same &= !memcmp(dxc + ((size_t)ch * n + i) * in,
                                dx + ((size_t)i * v.c + ch) * in, in * sizeof *dx);
        CHECK(same, "col2im_batch_cn n=%d c=%d %dx%d k=%dx%d: differs from the "
                    "[N, C, H, W] version", n, v.c, v.h, v.w, v.kh, v.kw);
        free(dxc);
    }

#ifdef _OPENMP
    /* And the same with one thread as with two and three. */
    int saved = omp_get_max_threads();
    float *dx1 = malloc((size_t)n * xs * sizeof *dx1);
    int same = 1;
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        nrt_col2im_batch(g, n, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph,
                         v.pw, oh, ow, dx1);
        same &= !memcmp(dx, dx1, (size_t)n * xs * sizeof *dx);
    }
    omp_set_num_threads(saved);
    CHECK(same, "col2im_batch n=%d c=%d %dx%d: threads change the result", n,
          v.c, v.h, v.w);
    free(dx1);
#endif
    free(one);
    free(g);
    free(dx);
    free(ref);
}

/* The relative error of got against ref, each entry measured against the
 * sum of the magnitudes of the terms it adds up (scale). */
static double worst_error(const float *got, const double *ref,
                          const double *scale, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (scale[i] + 1e-30);
        if (!(e <= worst)) /* NaN too */
            worst = e;
    }
    return worst;
}

/* worst_error where Winograd's form computed got, planes of h x w in
 * tiles of t x t from the top left: each value's error relative to the
 * largest magnitude of the terms of its tile's values, which the form
 * computes together from one window (an output at a tile's edge over
 * zeros, of few terms itself, gets the rounding of the whole tile's) */
static double worst_error_tiles(const float *got, const double *ref, const double *scale,
                                size_t planes, int h, int w, int t)
{
    double worst = 0.0;
    for (size_t q = 0; q < planes; q++)
        for (int y0 = 0; y0 < h; y0 += t)
            for (int x0 = 0; x0 < w; x0 += t) {
                const size_t at = q * h * w;
                double big = 0.0;
                for (int y = y0; y < y0 + t && y < h; y++)
                    for (int x = x0; x < x0 + t && x < w; x++)
                        big = fmax(big, scale[at + (size_t)y * w + x]);
                for (int y = y0; y < y0 + t && y < h; y++)
                    for (int x = x0; x < x0 + t && x < w; x++) {
                        const size_t i = at + (size_t)y * w + x;
                        const double e = fabs(got[i] - ref[i]) / (big + 1e-30);
                        if (!(e <= worst)) /* NaN too */
                            worst = e;
                    }
            }
    return worst;
}

/* nrt_conv2d_pad/fwd/dw/dx against the convolution's definition, in
 * double: y = W * x, dW and dx from a random dy; x given [N, C, H, W] and
 * channel first; dx computed when the geometry allows (stride 1, padding
 * below the kernel), in both layouts; and every result the same, bit for
 * bit, with 1, 2 and 3 threads. */
/* Winograd's form on a plane that is not whole tiles (its last tiles in
 * part, kernels.c's wg_input and wg_output) against the same form on the
 * plane of whole tiles around it, computed from the padded input and dy
 * widened by zeros (an unpadded convolution): y's top left and dW (where
 * it takes the form), bit for bit (the same tiles, the same zeros, the
 * same operations).  With
 * AVX2 (the form's code) and NETRT_CPU_CONV=builtin, where both take it. */
static void check_wg_parts(int n, const nrt_conv *g, int tile, const float *w, const float *b,
                           const float *xp, const float *y, const float *dy, const float *dw)
{
#if defined(__x86_64__) || defined(__i386__)
    if (!strcmp(nrt_gemm_isa(), "portable"))
        return;
    const int k = g->kh - 1, oh2 = (g->oh + tile - 1) / tile * tile,
              ow2 = (g->ow + tile - 1) / tile * tile;
    const int hp = g->oh + k, wp = g->ow + k; /* the padded input's sides */
    const nrt_conv g2 = {g->c, oh2 + k, ow2 + k, g->o, oh2, ow2, g->kh, g->kw, 1, 1, 0, 0,
                         g->dot, NULL};
    const size_t planes = (size_t)g->c * n, outs = (size_t)g->o * n;
    float *xw = calloc(planes * (oh2 + k) * (ow2 + k), sizeof *xw);
    float *dyw = calloc(outs * oh2 * ow2, sizeof *dyw), *y2 = malloc(outs * oh2 * ow2 * 4);
    float *dw2 = malloc((size_t)g->o * g->c * g->kh * g->kw * sizeof *dw2);
    for (size_t q = 0; q < planes; q++)
        for (int r = 0; r < hp; r++)
            memcpy(xw + (q * (oh2 + k) + r) * (ow2 + k), xp + (q * hp + r) * wp,
                   (size_t)wp * sizeof *xw);
    for (size_t q = 0; q < outs; q++)
        for (int r = 0; r < g->oh; r++)
            memcpy(dyw + (q * oh2 + r) * ow2, dy + (q * g->oh + r) * g->ow,
                   (size_t)g->ow * sizeof *dyw);
    nrt_conv2d_fwd(&g2, n, w, b, xw, y2);
    nrt_conv2d_dw(&g2, n, dyw, xw, dw2);
    /* dW in the form where C is a multiple of 4 and O of 16 */
    int same = g->c % 4 || g->o % 16 ||
               !memcmp(dw, dw2, (size_t)g->o * g->c * g->kh * g->kw * sizeof *dw);
    for (size_t q = 0; q < outs; q++)
        for (int r = 0; r < g->oh; r++)
            same &= !memcmp(y + (q * g->oh + r) * g->ow, y2 + (q * oh2 + r) * ow2,
                            (size_t)g->ow * sizeof *y);
    CHECK(same, "conv2d c=%d o=%d %dx%d out, tiles of %d: not the bits of the whole tiles' plane",
          g->c, g->o, g->oh, g->ow, tile);
    free(xw), free(dyw), free(y2), free(dw2);
#else
    (void)n, (void)g, (void)tile, (void)w, (void)b, (void)xp, (void)y, (void)dy, (void)dw;
#endif
}

static void check_conv2d_dot(int n, struct conv v, int o, int dot)
{
    const int oh = out_size(v.h, v.kh, v.sh, v.ph), ow = out_size(v.w, v.kw, v.sw, v.pw);
    const nrt_conv g = {v.c, v.h, v.w, o, oh, ow, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, dot, NULL};
    const size_t in = (size_t)v.h * v.w, xs = (size_t)n * v.c * in;
    const size_t ys = (size_t)o * n * oh * ow, ws = (size_t)o * v.c * v.kh * v.kw;
    const size_t xps = (size_t)v.c * n * (v.h + 2 * v.ph) * (v.w + 2 * v.pw);
    float *x = randv(xs), *xc = malloc(xs * sizeof *xc), *w = randv(ws), *dy = randv(ys);
    float *bias = randv((size_t)o), *b = (n + o) % 3 ? bias : NULL; /* with a bias, or none */
    if (dot != NRT_DOT_F32) { /* the bf16 dots: bf16 values, as a bf16 run's */
        nrt_round_lowp(NRT_BF16, x, xs);
        nrt_round_lowp(NRT_BF16, w, ws);
        nrt_round_lowp(NRT_BF16, dy, ys);
        nrt_round_lowp(NRT_BF16, bias, (size_t)o);
    }
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < v.c; ch++)
            memcpy(xc + ((size_t)ch * n + i) * in, x + ((size_t)i * v.c + ch) * in,
                   in * sizeof *x);
    double *yr = calloc(ys, sizeof *yr), *ya = calloc(ys, sizeof *ya);
    double *dwr = calloc(ws, sizeof *dwr), *dwa = calloc(ws, sizeof *dwa);
    double *dxr = calloc(xs, sizeof *dxr), *dxa = calloc(xs, sizeof *dxa);
    for (int co = 0; co < o; co++)
        for (int i = 0; i < n; i++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    size_t yi = (((size_t)co * n + i) * oh + oy) * ow + ox;
                    yr[yi] = b ? b[co] : 0.0, ya[yi] = b ? fabs(b[co]) : 0.0;
                    for (int ch = 0; ch < v.c; ch++)
                        for (int ki = 0; ki < v.kh; ki++)
                            for (int kj = 0; kj < v.kw; kj++) {
                                int iy = oy * v.sh - v.ph + ki, ix = ox * v.sw - v.pw + kj;
                                if (iy < 0 || iy >= v.h || ix < 0 || ix >= v.w)
                                    continue;
                                size_t xi = ((size_t)i * v.c + ch) * in + (size_t)iy * v.w + ix;
                                size_t wi = (((size_t)co * v.c + ch) * v.kh + ki) * v.kw + kj;
                                yr[yi] += (double)w[wi] * x[xi];
                                ya[yi] += fabs((double)w[wi] * x[xi]);
                                dwr[wi] += (double)dy[yi] * x[xi];
                                dwa[wi] += fabs((double)dy[yi] * x[xi]);
                                dxr[xi] += (double)dy[yi] * w[wi];
                                dxa[xi] += fabs((double)dy[yi] * w[wi]);
                            }
                }
    const int dx_ok = v.sh == 1 && v.sw == 1 && v.ph < v.kh && v.pw < v.kw;
    float *xp = malloc(xps * sizeof *xp), *xp2 = malloc(xps * sizeof *xp2);
    float *y = malloc(ys * sizeof *y), *dw = malloc(ws * sizeof *dw);
    float *dx = malloc(xs * sizeof *dx), *dxc = malloc(xs * sizeof *dxc);
    float *scratch = malloc((size_t)n * nrt_conv2d_dx_scratch(&g) * sizeof *scratch);
    for (size_t i = 0; i < xps; i++)
        xp[i] = xp2[i] = NAN; /* every entry must be written */
    nrt_conv2d_pad(&g, n, 0, x, xp);
    nrt_conv2d_pad(&g, n, 1, xc, xp2);
    CHECK(!memcmp(xp, xp2, xps * sizeof *xp),
          "conv2d_pad n=%d c=%d %dx%d p=%d,%d: the two layouts pad differently", n,
          v.c, v.h, v.w, v.ph, v.pw);
    /* Winograd's form (kernels.c: stride 1, 16 channels or more in (3 for
     * a 5x5) and out; 5x5, or 3x3 on an output plane of 8x8 or more; any
     * padding below the kernel, the plane in whole tiles or not) sums otherwise;
     * its code is AVX2's, taken under NETRT_CPU_CONV=auto where the
     * products are AVX2's, and on every cpu under builtin */
    const int tile = v.kh == 5 ? (oh >= 3 && ow >= 3 ? 4 : 2)
                               : v.kh == 3 && oh >= 8 && ow >= 8 ? 4 : 0;
    const int winograd = tile && v.kw == v.kh && v.sh == 1 && v.sw == 1 && v.ph < v.kh &&
                         v.pw < v.kw && v.c >= (v.kh == 5 ? 3 : 16) && o >= 16;
    /* dx: the transposed convolution's (o channels in, c out, on x's plane,
     * padded by the kernel less 1 less the padding) */
    const int dx_tile = v.kh == 5 ? (v.h >= 3 && v.w >= 3 ? 4 : 2)
                                  : v.kh == 3 && v.h >= 8 && v.w >= 8 ? 4 : 0;
    const int dx_winograd = dx_tile && v.kw == v.kh && v.sh == 1 && v.sw == 1 && v.ph < v.kh &&
                            v.pw < v.kw && o >= (v.kh == 5 ? 3 : 16) && v.c >= 16;
    nrt_conv2d_fwd(&g, n, w, b, xp, y);
    nrt_conv2d_dw(&g, n, dy, xp, dw);
    /* (the form's where it may have run: oneDNN's direct sums pass either;
     * the form's dW against the largest magnitude of its kernel's terms, as
     * a tap that sees only the padding gets rounding, not 0) */
    double ey = winograd ? worst_error_tiles(y, yr, ya, (size_t)o * n, oh, ow, tile)
                         : worst_error(y, yr, ya, ys),
           edw = winograd ? worst_error_tiles(dw, dwr, dwa, (size_t)o * v.c, v.kh, v.kw, v.kh)
                          : worst_error(dw, dwr, dwa, ws),
           edx = 0.0;
    if (dx_ok) {
        nrt_conv2d_dx(&g, n, 0, w, dy, scratch, dx);
        nrt_conv2d_dx(&g, n, 1, w, dy, scratch, dxc);
        edx = dx_winograd ? worst_error_tiles(dx, dxr, dxa, (size_t)n * v.c, v.h, v.w, dx_tile)
                          : worst_error(dx, dxr, dxa, xs);
        int same = 1;
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < v.c; ch++)
                same &= !memcmp(dxc + ((size_t)ch * n + i) * in,
                                dx + ((size_t)i * v.c + ch) * in, in * sizeof *dx);
        CHECK(same, "conv2d_dx n=%d c=%d %dx%d: the two layouts differ", n, v.c, v.h, v.w);
    }
    /* the AVX2 kernels (always packed) give the same bits as the built-in
     * path's AVX-512 ones; a convolution with 16 input channels or more and
     * 2^16 multiply-adds a sample may run on oneDNN (runtime/conv_dnnl.c),
     * which sums in its own order, but not under NETRT_CPU_CONV=builtin */
    const double work = (double)o * oh * ow * v.c * v.kh * v.kw;
    const char *mode = getenv("NETRT_CPU_CONV");
    const int builtin = mode && !strcmp(mode, "builtin");
    if (dot == NRT_DOT_F32 && (builtin || v.c % 16 || work < 65536.0) && (!winograd || builtin)) {
        nrt_conv g2 = g;
        g2.dot = NRT_DOT_AVX2;
        float *y2 = malloc(ys * sizeof *y2), *dw2 = malloc(ws * sizeof *dw2);
        float *dx2 = malloc(xs * sizeof *dx2);
        nrt_conv2d_fwd(&g2, n, w, b, xp, y2);
        nrt_conv2d_dw(&g2, n, dy, xp, dw2);
        int same = !memcmp(y, y2, ys * sizeof *y) && !memcmp(dw, dw2, ws * sizeof *dw);
        if (dx_ok && (!dx_winograd || builtin)) {
            nrt_conv2d_dx(&g2, n, 0, w, dy, scratch, dx2);
            same &= !memcmp(dx, dx2, xs * sizeof *dx);
        }
        CHECK(same, "conv2d n=%d c=%d %dx%d o=%d: %s and AVX2 differ", n, v.c, v.h, v.w, o,
              nrt_gemm_isa());
        free(y2), free(dw2), free(dx2);
    }
    /* ... and y is the product's: each sample's columns (nrt_im2col)
     * through nrt_sgemm, then + the bias, bit for bit, whichever kernels
     * (the direct first-layer tiles among them) computed it, but Winograd's */
    if (dot == NRT_DOT_F32 && (v.c % 16 || work < 65536.0) && work >= 4096.0 && !winograd) {
        const size_t rows = (size_t)v.c * v.kh * v.kw, cols = (size_t)oh * ow;
        float *col = malloc(rows * cols * sizeof *col), *yg = malloc(ys * sizeof *yg);
        for (int i = 0; i < n; i++) {
            nrt_im2col(x + (size_t)i * v.c * in, v.c, v.h, v.w, v.kh, v.kw, v.sh, v.sw, v.ph,
                       v.pw, oh, ow, col);
            nrt_sgemm(0, 0, o, (int)cols, (int)rows, 1.0f, w, (int)rows, col, (int)cols, 0.0f,
                      yg + (size_t)i * cols, n * (int)cols);
        }
        for (size_t e = 0; b && e < ys; e++)
            yg[e] += b[e / ((size_t)n * cols)];
        CHECK(!memcmp(y, yg, ys * sizeof *y),
              "conv2d n=%d c=%d %dx%d o=%d: not the bits of im2col and sgemm (%s)", n, v.c, v.h,
              v.w, o, nrt_gemm_isa());
        free(col), free(yg);
    }
    CHECK(ey < 1e-5 && edw < 1e-5 && edx < 1e-5,
          "conv2d n=%d c=%d %dx%d o=%d k=%dx%d s=%d,%d p=%d,%d: relative errors y %g, "
          "dW %g, dx %g", n, v.c, v.h, v.w, o, v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, ey, edw, edx);
    /* Passes kept from call to call, as a net keeps them (nrt_conv.dnnl;
     * g's are made at every call): the same bits with 1, 2 and 3 threads,
     * made at the first round, run again at the second on other buffers. */
    nrt_conv gk = g;
    gk.dnnl = nrt_dnnl_new();
    float *y1[2], *dw1[2], *dx1[2], *xq[2] = {xp2, malloc(xps * sizeof *xp2)};
    int same = 1;
    for (int r = 0; r < 2; r++) {
        y1[r] = malloc(ys * sizeof *y1[r]), dw1[r] = malloc(ws * sizeof *dw1[r]);
        dx1[r] = malloc(xs * sizeof *dx1[r]);
        for (int t = 1; t <= 3; t++) {
#ifdef _OPENMP
            const int saved = omp_get_max_threads();
            omp_set_num_threads(t);
#endif
            nrt_conv2d_pad(&gk, n, 0, x, xq[r]);
            nrt_conv2d_fwd(&gk, n, w, b, xq[r], y1[r]);
            nrt_conv2d_dw(&gk, n, dy, xq[r], dw1[r]);
            same &= !memcmp(xp, xq[r], xps * sizeof *xp) && !memcmp(y, y1[r], ys * sizeof *y) &&
                    !memcmp(dw, dw1[r], ws * sizeof *dw);
            if (dx_ok) {
                nrt_conv2d_dx(&gk, n, 0, w, dy, scratch, dx1[r]);
                same &= !memcmp(dx, dx1[r], xs * sizeof *dx);
            }
#ifdef _OPENMP
            omp_set_num_threads(saved);
#endif
        }
    }
    CHECK(same, "conv2d n=%d c=%d %dx%d o=%d: threads or kept passes change the result", n,
          v.c, v.h, v.w, o);
    nrt_dnnl_free(gk.dnnl);
    for (int r = 0; r < 2; r++)
        free(y1[r]), free(dw1[r]), free(dx1[r]);
    free(xq[1]);
    if (winograd && builtin && (oh % tile || ow % tile))
        check_wg_parts(n, &g, tile, w, b, xp, y, dy, dw);
    free(x), free(xc), free(w), free(dy), free(bias), free(xp), free(xp2), free(y), free(dw);
    free(dx), free(dxc), free(scratch);
    free(yr), free(ya), free(dwr), free(dwa), free(dxr), free(dxa);
}

static void check_conv2d(int n, struct conv v, int o)
{
    check_conv2d_dot(n, v, o, NRT_DOT_F32);
}

static void test_conv_batch(void)
{
    static const struct conv cs[] = {
        {1, 1, 1, 1, 1, 1, 1, 0, 0},   /* 1x1 everything */
        {3, 5, 7, 3, 3, 1, 1, 1, 1},   /* same padding */
        {2, 8, 8, 3, 2, 2, 1, 0, 1},   /* rectangular kernel, mixed stride */
        {4, 9, 6, 5, 5, 2, 2, 2, 2},   /* stride 2, padding 2 */
        {3, 4, 4, 5, 5, 1, 1, 2, 2},   /* kernel larger than the input */
        {2, 7, 11, 1, 3, 3, 2, 0, 1},
        {3, 6, 5, 4, 3, 3, 2, 3, 2},   /* padding wider than some windows */
        {5, 6, 7, 1, 1, 1, 1, 0, 0},   /* 1x1 conv: whole-plane copies */
        {2, 9, 9, 1, 1, 2, 2, 0, 0},   /* 1x1, stride 2 */
        {3, 12, 10, 2, 4, 2, 3, 1, 0}, /* rectangular, strides 2 and 3 */
        {2, 5, 5, 3, 3, 1, 1, 4, 4},   /* rows and columns of padding only */
        {3, 32, 32, 5, 5, 1, 1, 2, 2}, /* cifar10 conv1 */
        {8, 16, 16, 5, 5, 1, 1, 2, 2}, /* cifar10 conv2, fewer channels */
        {4, 13, 13, 3, 3, 1, 1, 0, 0},
        {32, 8, 8, 5, 5, 1, 1, 2, 2},  /* cifar10 conv3: runs of 8 */
        {3, 30, 30, 3, 3, 1, 1, 0, 0}, /* cnn101 conv1: runs of 28 */
        {2, 3, 5, 2, 2, 1, 1, 1, 0}};  /* positions of 16 spanning samples */
    static const int ns[] = {1, 2, 3, 5};
    int runs = 0;
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            if (cs[t].h * cs[t].w > 200 && ns[i] > 3)
                continue;
            check_col2im_batch(ns[i], cs[t]);
            check_conv2d(ns[i], cs[t], 1 + (int)(t + i) % 7);
            runs++;
        }
    /* batches whose output columns the product cuts into blocks of an odd
     * number of 16-column panels (AVX-512 reads these cols in place, two
     * panels at a time): 22 x 16 x 16 on one thread, cifar10's conv1 on an
     * epoch's last batch of 11 on two (with 15 channels out: with 16 or
     * more, Winograd's form takes it, as the next one), and with three K
     * blocks */
    check_conv2d(22, (struct conv){3, 16, 16, 5, 5, 1, 1, 2, 2}, 8);
    check_conv2d(11, (struct conv){3, 32, 32, 5, 5, 1, 1, 2, 2}, 15);
    check_conv2d(11, (struct conv){3, 32, 32, 5, 5, 1, 1, 2, 2}, 32);
    check_conv2d(11, (struct conv){24, 16, 16, 5, 5, 1, 1, 2, 2}, 24);
    /* AVX-512's forward tiles of 8 channels by 3 runs of 16 (stride 1,
     * rows of whole runs, one K block): 13 channels, a block and 5; 320
     * runs, 106 tiles and 2 runs */
    check_conv2d(5, (struct conv){3, 32, 32, 5, 5, 1, 1, 2, 2}, 13);
    /* rows of 30, a run of 16 and one of 14 masked (cnn101's first layer),
     * and rows of 9 (one masked run, under 16) */
    check_conv2d(5, (struct conv){3, 32, 32, 3, 3, 1, 1, 0, 0}, 32);
    check_conv2d(3, (struct conv){2, 11, 11, 3, 3, 1, 1, 0, 0}, 9);
    runs += 7;
    /* products of millions of multiply-adds with 16 input channels or
     * more: oneDNN's where the build and the machine have it (the forward
     * pass and dx), the built-in path's elsewhere */
    check_conv2d(8, (struct conv){32, 16, 16, 5, 5, 1, 1, 2, 2}, 32);
    check_conv2d(8, (struct conv){32, 15, 15, 3, 3, 1, 1, 0, 0}, 64);
    /* Winograd's form (with AVX2; cifar10's conv2 above), F(4x4, 5x5): a
     * block's tiles (24) past the last tile, output channels past the last
     * run of 4, in and out channels not alike (dx's flipped kernels);
     * blocks of runs of four tiles in a row (two loads a window's row
     * half) and of tiles of several rows; cifar10's conv2 with three
     * samples; F(2x2, 5x5) on planes 2 rows or columns across.  dW too
     * where C is a multiple of 4 and O of 16: pieces of one block and of
     * several, a last block in part, 16 and three runs of 16 output
     * channels.  Then the 3x3 form (resnet20's layers): 4 tiles a sample,
     * 6, 64 (its first stage's plane), 8; not on 6x8 nor digits_cnn's 4x4
     * (kernels.c's wg_tile says why).  Planes not of whole tiles (computed
     * as the plane of whole tiles around them): 6x10 and 7x8 above, 5x5
     * unpadded (5x7 out), 5x5 on 14x13 (runs of four, the last tile 1
     * column), F(2x2, 5x5) on 2x9 and 9x1, 3x3 on 10x9, cnn101's conv2
     * (15x15 unpadded, 13x13 out), 10x15 out (tiles of 3 columns, and a
     * row of them in part first in a run of eight) and 14x14 (2 columns
     * and rows); not 3x3 padded by 2 (14x12 out; nor the unpadded layers'
     * dx) */
    static const struct conv wg[] = {{17, 6, 10, 5, 5, 1, 1, 2, 2}, {16, 8, 8, 5, 5, 1, 1, 2, 2},
                                     {16, 4, 20, 5, 5, 1, 1, 2, 2}, {16, 7, 8, 5, 5, 1, 1, 2, 2},
                                     {32, 16, 16, 5, 5, 1, 1, 2, 2}, {20, 8, 8, 5, 5, 1, 1, 2, 2},
                                     /* F(4x4, 3x3) */
                                     {16, 8, 8, 3, 3, 1, 1, 1, 1}, {17, 12, 8, 3, 3, 1, 1, 1, 1},
                                     {16, 32, 32, 3, 3, 1, 1, 1, 1}, {32, 8, 16, 3, 3, 1, 1, 1, 1},
                                     {16, 6, 8, 3, 3, 1, 1, 1, 1}, {16, 4, 4, 3, 3, 1, 1, 1, 1},
                                     /* planes not of whole tiles */
                                     {16, 9, 11, 5, 5, 1, 1, 0, 0}, {16, 10, 9, 3, 3, 1, 1, 1, 1},
                                     {20, 12, 10, 3, 3, 1, 1, 2, 2}, {32, 15, 15, 3, 3, 1, 1, 0, 0},
                                     {16, 12, 17, 3, 3, 1, 1, 0, 0}, {16, 14, 14, 3, 3, 1, 1, 1, 1},
                                     {16, 14, 13, 5, 5, 1, 1, 2, 2}, {16, 2, 9, 5, 5, 1, 1, 2, 2},
                                     {16, 9, 1, 5, 5, 1, 1, 2, 2}};
    static const int wn[] = {3, 5, 3, 2, 3, 4, 3, 2, 2, 5, 2, 32, 3, 2, 3, 3, 2, 1, 2, 5, 3},
                     wo[] = {18, 20, 16, 16, 32, 48, 16, 19, 16, 32, 16, 32, 16, 17, 32, 64, 16, 16,
                             16, 32, 16};
    /* ... under NETRT_CPU_CONV=auto, then builtin (Winograd's on AVX-512
     * too, and the same bits there with NRT_DOT_AVX2) */
    char *mode = getenv("NETRT_CPU_CONV") ? strdup(getenv("NETRT_CPU_CONV")) : NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t t = 0; t < sizeof wg / sizeof *wg; t++)
            check_conv2d(wn[t], wg[t], wo[t]);
        setenv("NETRT_CPU_CONV", "builtin", 1);
    }
    if (mode)
        setenv("NETRT_CPU_CONV", mode, 1);
    else
        unsetenv("NETRT_CPU_CONV");
    free(mode);
    runs += 42;
    check_conv2d(4, (struct conv){16, 8, 8, 3, 3, 1, 1, 0, 0}, 32); /* on one thread */
    check_conv2d(20, (struct conv){16, 8, 8, 3, 3, 1, 1, 1, 1}, 16); /* dW in 2 pieces */
    runs += 4;
#ifdef _OPENMP
    { /* a pass run on one thread gives the caller its thread count back */
        const int before = omp_get_max_threads();
        check_conv2d(4, (struct conv){16, 8, 8, 3, 3, 1, 1, 1, 1}, 32);
        CHECK(omp_get_max_threads() == before, "conv2d: %d threads after, %d before",
              omp_get_max_threads(), before);
    }
#endif
    /* the bf16 dots' convolutions (their products packed from the padded
     * input), on bf16 values, against the same reference */
    static const struct conv lp[] = {{3, 32, 32, 5, 5, 1, 1, 2, 2}, {8, 16, 16, 5, 5, 1, 1, 2, 2},
                                     {3, 6, 5, 4, 3, 3, 2, 3, 2}, {32, 8, 8, 5, 5, 1, 1, 2, 2}};
    for (size_t t = 0; t < sizeof lp / sizeof *lp; t++) {
        check_conv2d_dot(2, lp[t], 5, NRT_DOT_BF16);
        if (nrt_amx_enable())
            check_conv2d_dot(3, lp[t], 33, NRT_DOT_AMX);
        runs++;
    }
    /* on AMX, convolutions of 16 input channels or more: dW from the
     * padded input in place (kernels.c's conv_dw_amx: blocks of channels
     * and of dy's channels in pairs and alone, a batch past its chunks of
     * 8), the forward pass and dx on oneDNN in bf16 where it is built in */
    if (nrt_amx_enable()) {
        check_conv2d_dot(20, (struct conv){32, 8, 8, 3, 3, 1, 1, 1, 1}, 16, NRT_DOT_AMX);
        check_conv2d_dot(9, (struct conv){48, 7, 9, 3, 2, 1, 1, 1, 0}, 40, NRT_DOT_AMX);
        check_conv2d_dot(3, (struct conv){16, 13, 13, 3, 3, 2, 2, 1, 1}, 24, NRT_DOT_AMX);
        runs += 3;
    }
    printf("col2im_batch and conv2d: %d batches checked\n", runs);
}

/* ------------------------------------------------------------------ sums */

static void check_sums(int rows, int cols)
{
    size_t size = (size_t)rows * cols;
    float *a = randv(size), *out = malloc((size_t)(rows > cols ? rows : cols) *
                                              sizeof *out + 4);
    /* Rows: against a double sum, within the worst case of any order. */
    nrt_row_sums(a, rows, (size_t)cols, out);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        double s = 0.0, abss = 0.0;
        for (int j = 0; j < cols; j++) {
            s += a[(size_t)r * cols + j];
            abss += fabs(a[(size_t)r * cols + j]);
        }
        if (!(fabs(out[r] - s) <= (cols + 1) * FLT_EPSILON * abss))
            bad++;
    }
    CHECK(bad == 0, "row_sums %dx%d: %d rows wrong", rows, cols, bad);
    /* Columns: the same. */
    nrt_col_sums(a, rows, cols, out);
    bad = 0;
    for (int j = 0; j < cols; j++) {
        double s = 0.0, abss = 0.0;
        for (int r = 0; r < rows; r++) {
            s += a[(size_t)r * cols + j];
            abss += fabs(a[(size_t)r * cols + j]);
        }
        if (!(fabs(out[j] - s) <= (rows + 1) * FLT_EPSILON * abss))
            bad++;
    }
    CHECK(bad == 0, "col_sums %dx%d: %d columns wrong", rows, cols, bad);
#ifdef _OPENMP
    /* Bit for bit the same with 1, 2 and 3 threads. */
    int saved = omp_get_max_threads();
    float *o[3];
    for (int t = 0; t < 3; t++)
        o[t] = malloc((size_t)(rows + cols + 1) * sizeof *o[t]);
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        nrt_row_sums(a, rows, (size_t)cols, o[t]);
        nrt_col_sums(a, rows, cols, o[t] + rows);
    }
    omp_set_num_threads(saved);
    CHECK(!memcmp(o[0], o[1], (size_t)(rows + cols) * sizeof *o[0]) &&
              !memcmp(o[0], o[2], (size_t)(rows + cols) * sizeof *o[0]),
          "row/col_sums %dx%d: threads change the result", rows, cols);
    for (int t = 0; t < 3; t++)
        free(o[t]);
#endif
    free(a);
    free(out);
}

static void test_sums(void)
{
    static const int shapes[][2] = {
        {1, 1},   {1, 15},  {1, 16},  {1, 17},   {3, 33},    {7, 100},
        {16, 1},  {100, 7}, {64, 10}, {64, 512}, {64, 1000}, {5, 1500},
        {32, 4096}, {300, 600}, {2, 70000}, {1000, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        check_sums(shapes[s][0], shapes[s][1]);
    /* No rows: column sums are zeros.  No columns: row sums are zeros. */
    {
        float one = 1.0f, out[3] = {NAN, NAN, NAN};
        nrt_col_sums(&one, 0, 3, out);
        CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0,
              "col_sums of no rows: %g %g %g", out[0], out[1], out[2]);
        out[0] = out[1] = NAN;
        nrt_row_sums(&one, 2, 0, out);
        CHECK(out[0] == 0 && out[1] == 0, "row_sums of no columns: %g %g",
              out[0], out[1]);
    }
    /* Exact where every order is exact. */
    {
        float a[2 * 37];
        for (int i = 0; i < 2 * 37; i++)
            a[i] = (float)(i % 37);
        float rs[2], cs[37];
        nrt_row_sums(a, 2, 37, rs);
        nrt_col_sums(a, 2, 37, cs);
        CHECK(rs[0] == 666.0f && rs[1] == 666.0f && cs[5] == 10.0f &&
                  cs[36] == 72.0f,
              "sums of integers: %g %g %g %g", rs[0], rs[1], cs[5], cs[36]);
    }
    printf("row/col sums: %zu shapes checked\n",
           sizeof shapes / sizeof *shapes);
}

/* --------------------------------------------------------------- dropout */

/* Random123's known-answer vectors for Philox4x32-10 (kat_vectors). */
static void test_philox(void)
{
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[3] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (int k = 0; k < 3; k++) {
        nrt_philox4 c = {{kat[k].ctr[0], kat[k].ctr[1], kat[k].ctr[2], kat[k].ctr[3]}};
        nrt_philox4 r = nrt_philox4x32_10(c, kat[k].key[0], kat[k].key[1]);
        CHECK(!memcmp(r.v, kat[k].out, sizeof r.v),
              "philox4x32_10: known-answer vector %d: %08x %08x %08x %08x", k, r.v[0], r.v[1],
              r.v[2], r.v[3]);
    }
    /* nrt_dropout_block's packing: counter (b, layer, step), key */
    const uint64_t key = (uint64_t)kat[2].key[1] << 32 | kat[2].key[0];
    const uint64_t step = (uint64_t)kat[2].ctr[3] << 32 | kat[2].ctr[2];
    nrt_philox4 r = nrt_dropout_block(key, kat[2].ctr[1], step, kat[2].ctr[0]);
    CHECK(!memcmp(r.v, kat[2].out, sizeof r.v), "nrt_dropout_block: key and counter packing");
    printf("philox: 3 known answers checked\n");
}

/* nrt_dropout_fwd against its definition, value by value: dropped when
 * nrt_dropout_word(key, layer, step, i) < ceil(p 2^32) (computed here in
 * long double arithmetic, not as nrt_dropout_cut does), a kept value
 * scaled by (float)(1/(1-p)). */
static void check_dropout(double pd, size_t n, uint32_t layer, uint64_t step)
{
    float *x = randv(n), *y = malloc((n + 1) * sizeof *y);
    float *mask = malloc((n + 1) * sizeof *mask);
    float *rmask = malloc((n + 1) * sizeof *rmask);
    float *ry = malloc((n + 1) * sizeof *ry);
    if (n > 3)
        x[3] = INFINITY; /* x * 0 is NaN, as x[i] * mask[i] was */
    nrt_net net = {.dropout_key = 0x0123456789abcdefull ^ n, .step = step};
    nrt_dropout_fwd(&net, layer, x, y, mask, n, pd);
    const float scale = (float)(1.0 / (1.0 - pd));
    const long double cut = ceill((long double)pd * 4294967296.0L);
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = nrt_dropout_word(net.dropout_key, layer, step, i);
        rmask[i] = pd >= 1 || (long double)u < cut ? 0.0f : scale;
        ry[i] = x[i] * rmask[i];
        dropped += rmask[i] == 0.0f;
    }
    CHECK(!memcmp(mask, rmask, n * sizeof *mask) &&
              !memcmp(y, ry, n * sizeof *y),
          "dropout p=%g n=%zu layer %u step %llu: masks or outputs differ from the reference",
          pd, n, layer, (unsigned long long)step);
    if (n >= 10000)
        CHECK(fabs((double)dropped / n - (pd < 1 ? pd : 1)) < 0.02,
              "dropout p=%g: dropped %zu of %zu", pd, dropped, n);
    free(x);
    free(y);
    free(mask);
    free(rmask);
    free(ry);
}

/* The masks of two layers, or of two steps, are unrelated: of the values
 * one drops, the other drops about p, not all. */
static void check_dropout_streams(void)
{
    const size_t n = 1 << 16;
    float *x = randv(n), *y = malloc(n * sizeof *y);
    float *m[3];
    for (int k = 0; k < 3; k++)
        m[k] = malloc(n * sizeof *m[k]);
    nrt_net net = {.dropout_key = 42, .step = 7};
    nrt_dropout_fwd(&net, 1, x, y, m[0], n, 0.5);
    nrt_dropout_fwd(&net, 2, x, y, m[1], n, 0.5);
    net.step = 8;
    nrt_dropout_fwd(&net, 1, x, y, m[2], n, 0.5);
    for (int k = 1; k < 3; k++) {
        size_t both = 0, first = 0;
        for (size_t i = 0; i < n; i++) {
            first += m[0][i] == 0.0f;
            both += m[0][i] == 0.0f && m[k][i] == 0.0f;
        }
        CHECK(fabs((double)both / (double)first - 0.5) < 0.02,
              "dropout: %s share %zu of %zu dropped values", k == 1 ? "two layers" : "two steps",
              both, first);
    }
    free(x);
    free(y);
    for (int k = 0; k < 3; k++)
        free(m[k]);
}

static void test_dropout(void)
{
    /* 0.6, 0.8, 0.9: (float)(1 / (1 - (double)pf)) would be off by ulps. */
    static const double ps[] = {0.0, 0.1, 0.5, 1.0, 0.25, 0.6, 0.8,
                                0.9, 0.111, 0.33, 0.05, 0.999, 1.5, 0x1p-33};
    static const size_t ns[] = {0, 1, 7, 8, 255, 256, 257, 1000, 30000};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
            check_dropout(ps[i], ns[j], (uint32_t)j, (uint64_t)i << 33 | j);
    check_dropout_streams();
    printf("dropout: %zu probabilities checked\n", sizeof ps / sizeof *ps);
}

/* nrt_order_at is a permutation of 0 .. n-1 for every n, identity without
 * shuffling, different for another epoch or key, and not close to the
 * identity: few samples stay near their place. */
static void test_order(void)
{
    static const size_t ns[] = {0, 1, 2, 3, 4, 5, 17, 64, 65, 1000, 1797, 65537, 300000};
    unsigned char *seen = malloc(300000);
    for (size_t j = 0; j < sizeof ns / sizeof *ns; j++) {
        const size_t n = ns[j];
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            nrt_order o, o2;
            nrt_order_init(&o, 99, 3, n, shuffle);
            nrt_order_init(&o2, 99, 4, n, shuffle);
            memset(seen, 0, n);
            size_t bad = 0, fixed = 0, near = 0, same = 0;
            for (size_t i = 0; i < n; i++) {
                uint32_t k = nrt_order_at(&o, (uint32_t)i);
                if (k >= n || seen[k]++)
                    bad++;
                fixed += k == i;
                near += (k > i ? k - i : i - k) < n / 100;
                same += k == nrt_order_at(&o2, (uint32_t)i);
            }
            CHECK(bad == 0, "order n=%zu shuffle=%d: not a permutation (%zu bad)", n, shuffle,
                  bad);
            if (!shuffle)
                CHECK(fixed == n, "order n=%zu: file order moved %zu samples", n, n - fixed);
            else if (n >= 1000)
                CHECK(fixed < 10 && near < n / 20 && same < 10,
                      "order n=%zu: %zu fixed, %zu within 1%%, %zu as the next epoch", n, fixed,
                      near, same);
        }
    }
    free(seen);
    printf("order: %zu sizes checked\n", sizeof ns / sizeof *ns);
}

/* nrt_order_fill gives nrt_order_at's samples, over whole epochs and
 * ranges that start and end anywhere (across its chunks of 512), for
 * every n up to 2100 and some larger, with and without shuffling. */
static void test_order_fill(void)
{
    uint32_t *got = malloc(sizeof *got * 300000);
    size_t sizes = 0, ranges = 0, bad = 0;
    nrt_rng r;
    nrt_rng_seed(&r, 11);
    for (size_t n = 0; n <= 300000; n = n < 2100 ? n + 1 : n * 3 + 1, sizes++)
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            nrt_order o;
            nrt_order_init(&o, 5 + n, n & 7, n, shuffle);
            for (int t = 0; t < 4; t++, ranges++) {
                size_t first = t ? nrt_rng_below(&r, (uint32_t)n + 1) : 0;
                size_t count = t ? nrt_rng_below(&r, (uint32_t)(n - first) + 1) : n;
                if (t == 3 && n > first + 1100)
                    count = 1100; /* three chunks, the last partial */
                got[count] = 0xdeadbeef;
                nrt_order_fill(&o, first, count, got);
                for (size_t k = 0; k < count; k++)
                    bad += got[k] != nrt_order_at(&o, (uint32_t)(first + k));
                bad += got[count] != 0xdeadbeef; /* nothing written past count */
            }
        }
    CHECK(bad == 0, "order fill: %zu samples differ from nrt_order_at", bad);
    free(got);
    printf("order fill: %zu sizes, %zu ranges checked\n", sizes, ranges);
}

/* ------------------------------------------------- maxpool 2x2 fast path */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float nan_with(uint32_t payload)
{
    uint32_t u = 0x7fc00000u | (payload & 0x3fffffu);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* 2x2, stride 2, no padding (the fast path) against ref_maxpool, bit for
 * bit: ties, -inf, NaN (several per window, with distinct payloads, so
 * that the last one must win), odd sizes. */
static void test_maxpool_fast(void)
{
    static const int shapes[][4] = {
        {1, 1, 2, 2},  {1, 1, 3, 3},  {2, 3, 8, 8},   {1, 2, 5, 7},
        {2, 2, 13, 13}, {1, 1, 2, 31}, {1, 1, 31, 2}, {3, 2, 30, 30},
        {2, 4, 32, 32}, {1, 1, 1, 4},  {1, 3, 17, 9}, {64, 4, 16, 16},
        {1, 2, 6, 40}, {1, 1, 5, 35}, {2, 1, 4, 66}};
    int runs = 0;
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        struct pool v = {shapes[t][0], shapes[t][1], shapes[t][2],
                         shapes[t][3], 2, 2, 0};
        int oh = out_size(v.h, 2, 2, 0), ow = out_size(v.w, 2, 2, 0);
        size_t xs = (size_t)v.n * v.c * v.h * v.w;
        size_t ys = (size_t)v.n * v.c * oh * ow;
        for (int mode = 0; mode < 6; mode++) {
            float *x = randv(xs);
            for (size_t i = 0; i < xs; i++) {
                uint32_t d = nrt_rng_below(&rng, 8);
                switch (mode) {
                case 1: /* ties everywhere */
                    x[i] = (float)(d & 1);
                    break;
                case 2: /* -inf, and windows of nothing but -inf */
                    x[i] = d < 6 ? -INFINITY : x[i];
                    break;
                case 3: /* NaNs, often several in a window */
                    x[i] = d < 3 ? nan_with((uint32_t)i + 1) : x[i];
                    break;
                case 4: /* everything at once, signed zeros included */
                    x[i] = d == 0   ? nan_with((uint32_t)i + 1)
                           : d == 1 ? -INFINITY
                           : d == 2 ? INFINITY
                           : d == 3 ? -0.0f
                           : d == 4 ? 0.0f
                                    : (float)(int)(x[i] * 2.0f);
                    break;
                case 5: /* all NaN */
                    x[i] = nan_with((uint32_t)i + 1);
                    break;
                }
            }
            float *y = malloc((ys + 1) * sizeof *y);
            float *ry = malloc((ys + 1) * sizeof *ry);
            int32_t *arg = malloc((ys + 1) * sizeof *arg);
            int32_t *rarg = malloc((ys + 1) * sizeof *rarg);
            nrt_maxpool2d_fwd(x, v.n, v.c, v.h, v.w, 2, 2, 0, oh, ow, y, arg);
            ref_maxpool(x, v, oh, ow, ry, rarg);
            int bad = 0;
            for (size_t i = 0; i < ys; i++)
                if (float_bits(y[i]) != float_bits(ry[i]) || arg[i] != rarg[i])
                    bad++;
            CHECK(bad == 0, "maxpool 2x2 [%d,%d,%d,%d] mode %d: %d outputs "
                            "wrong", v.n, v.c, v.h, v.w, mode, bad);
            /* Backward: every cell of dx written (it starts as NaN), each
             * 0 + its window's gradient or 0, bit for bit (signed zeros and
             * NaNs among the gradients too), the rows and columns no window
             * covers 0. */
            float *dy = randv(ys), *dx = malloc(xs * sizeof *dx);
            for (size_t i = 0; i < ys; i++)
                dy[i] = i % 5 == 1 ? -0.0f : i % 7 == 3 ? nan_with((uint32_t)i + 1) : dy[i];
            for (size_t i = 0; i < xs; i++)
                dx[i] = NAN;
            nrt_maxpool2d_bwd(dy, arg, v.n, v.c, v.h, v.w, 2, 2, 0, oh, ow, dx);
            bad = 0;
            for (size_t i = 0; i < xs; i++) {
                const size_t q = i / ((size_t)v.h * v.w), cell = i % ((size_t)v.h * v.w);
                float want = 0.0f;
                for (size_t o = 0; o < (size_t)oh * ow; o++)
                    if ((size_t)rarg[q * oh * ow + o] == cell)
                        want = 0.0f + dy[q * oh * ow + o];
                bad += float_bits(dx[i]) != float_bits(want);
            }
            CHECK(bad == 0, "maxpool 2x2 bwd [%d,%d,%d,%d] mode %d: %d entries wrong", v.n,
                  v.c, v.h, v.w, mode, bad);
            free(dy);
            free(dx);
            free(x);
            free(y);
            free(ry);
            free(arg);
            free(rarg);
            runs++;
        }
    }
    /* Hand-made: the last NaN wins, and a NaN beats a later +inf. */
    {
        float x[4] = {nan_with(1), 5, nan_with(2), INFINITY}, y;
        int32_t a;
        nrt_maxpool2d_fwd(x, 1, 1, 2, 2, 2, 2, 0, 1, 1, &y, &a);
        CHECK(float_bits(y) == float_bits(x[2]) && a == 2,
              "maxpool 2x2 NaNs: arg %d, want 2", (int)a);
        float z[4] = {-0.0f, 0.0f, 0.0f, -0.0f};
        nrt_maxpool2d_fwd(z, 1, 1, 2, 2, 2, 2, 0, 1, 1, &y, &a);
        CHECK(a == 0 && signbit(y), "maxpool 2x2 signed zeros: arg %d",
              (int)a);
    }
    printf("maxpool 2x2 fast path: %d cases checked\n", runs);
}

/* avgpool's 2x2 fast paths against the general loop's float sums, in its
 * order: bit for bit, odd sizes included. */
static void test_avgpool_fast(void)
{
    static const int shapes[][4] = {{1, 1, 2, 2}, {2, 3, 7, 9}, {1, 2, 13, 13},
                                    {3, 1, 16, 16}, {1, 1, 3, 1}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int n = shapes[t][0], c = shapes[t][1], h = shapes[t][2];
        int w = shapes[t][3], oh = h / 2, ow = w / 2;
        size_t xs = (size_t)n * c * h * w, ys = (size_t)n * c * oh * ow;
        float *x = randv(xs), *y = malloc((ys + 1) * sizeof *y);
        float *g = randv(ys), *dx = randv(xs);
        float *ry = malloc((ys + 1) * sizeof *ry);
        float *rdx = calloc(xs, sizeof *rdx);
        nrt_avgpool2d_fwd(x, n, c, h, w, 2, 2, 0, oh, ow, y);
        nrt_avgpool2d_bwd(g, n, c, h, w, 2, 2, 0, oh, ow, dx);
        for (int q = 0; q < n * c; q++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    float s = 0.0f;
                    size_t o = (size_t)q * oh * ow + (size_t)oy * ow + ox;
                    for (int ki = 0; ki < 2; ki++)
                        for (int kj = 0; kj < 2; kj++) {
                            size_t i = (size_t)q * h * w +
                                       (size_t)(2 * oy + ki) * w + 2 * ox + kj;
                            s += x[i];
                            rdx[i] += g[o] / 4.0f;
                        }
                    ry[o] = s / 4.0f;
                }
        CHECK(!memcmp(y, ry, ys * sizeof *y) && !memcmp(dx, rdx, xs * sizeof *dx),
              "avgpool 2x2 [%d,%d,%d,%d]: fast path differs from the general "
              "loop", n, c, h, w);
        free(x);
        free(y);
        free(g);
        free(dx);
        free(ry);
        free(rdx);
    }
    printf("avgpool 2x2 fast path: checked\n");
}

/* ----------------------------------------------------------------- losses */

/* The mean cross-entropy in double, straight from the definition. */
static double ref_xent(const double *z, const int32_t *label, int n, int k)
{
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < k; j++)
            s += exp(z[i * k + j]);
        loss += log(s) - z[i * k + label[i]];
    }
    return loss / n;
}

static double ref_mse(const double *y, const double *t, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (y[i] - t[i]) * (y[i] - t[i]);
    return s / n;
}

static void test_losses(void)
{
    /* Hand computations. */
    {
        float z[3] = {1, 2, 3}, d[3];
        int32_t l = 2;
        float loss = nrt_xent(z, &l, 1, 3, d);
        double s = exp(1.0) + exp(2.0) + exp(3.0);
        CHECK(fabs(loss - (log(s) - 3.0)) < 1e-6,
              "xent [1 2 3]/2 = %.9g, want %.9g", loss, log(s) - 3.0);
        CHECK(fabs(d[0] - exp(1.0) / s) < 1e-7 &&
                  fabs(d[2] - (exp(3.0) / s - 1.0)) < 1e-7,
              "xent gradient [1 2 3]/2 wrong: %g %g %g", d[0], d[1], d[2]);
        float z2[4] = {0, 0, 0, 0};
        int32_t l2[2] = {0, 1};
        loss = nrt_xent(z2, l2, 2, 2, NULL);
        CHECK(fabs(loss - log(2.0)) < 1e-7, "xent zeros = %.9g, want log 2",
              loss);
        /* Stability: huge logits do not overflow. */
        float z3[2] = {1000, 0};
        int32_t l3 = 1;
        loss = nrt_xent(z3, &l3, 1, 2, d);
        CHECK(loss == 1000.0f && d[0] == 1.0f && d[1] == -1.0f,
              "xent [1000 0]/1 = %g (grad %g %g), want 1000 (1 -1)", loss,
              d[0], d[1]);
        float z4[2] = {-1e4f, 1e4f};
        int32_t l4 = 1;
        loss = nrt_xent(z4, &l4, 1, 2, NULL);
        CHECK(loss == 0.0f, "xent [-1e4 1e4]/1 = %g, want 0", loss);
    }
    {
        float y[4] = {1, 2, 0, -1}, t[4] = {0, 0, 0, 1}, d[4];
        const nrt_loss_spec mse = {NRT_LOSS_MSE, 0};
        float loss = nrt_loss(&mse, y, t, 2, 2, d);
        CHECK(loss == 2.25f, "mse = %g, want 2.25", loss);
        CHECK(d[0] == 0.5f && d[1] == 1.0f && d[2] == 0.0f && d[3] == -1.0f,
              "mse gradient %g %g %g %g, want 0.5 1 0 -1", d[0], d[1], d[2],
              d[3]);
        /* l1: |1| + |2| + |0| + |-2|, over 4; sign(0) = 0, as PyTorch's */
        const nrt_loss_spec l1 = {NRT_LOSS_L1, 0};
        loss = nrt_loss(&l1, y, t, 2, 2, d);
        CHECK(loss == 1.25f, "l1 = %g, want 1.25", loss);
        CHECK(d[0] == 0.25f && d[1] == 0.25f && d[2] == 0.0f && d[3] == -0.25f,
              "l1 gradient %g %g %g %g, want 0.25 0.25 0 -0.25", d[0], d[1], d[2], d[3]);
    }
    {
        /* smooth_l1, e = 0, 0.25, 0.5, -2 (over 4): beta 0.5 puts one at
         * |e| = beta (the linear side, PyTorch's z < beta), beta 1 the
         * first three in the square, beta 0 is l1's value, its
         * gradient -1/N at e = 0 (PyTorch's smooth_l1_loss_backward) */
        float y[4] = {0, 0.25f, 1, -1}, t[4] = {0, 0, 0.5f, 1}, d[4];
        const struct {
            float beta, loss, d[4];
        } c[] = {{0.5f, (0 + 0.0625f + 0.25f + 1.75f) / 4, {0, 0.125f, 0.25f, -0.25f}},
                 {1.0f, (0 + 0.03125f + 0.125f + 1.5f) / 4, {0, 0.0625f, 0.125f, -0.25f}},
                 {0.0f, (0 + 0.25f + 0.5f + 2) / 4, {-0.25f, 0.25f, 0.25f, -0.25f}}};
        for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
            const nrt_loss_spec sl1 = {NRT_LOSS_SMOOTH_L1, c[k].beta};
            float loss = nrt_loss(&sl1, y, t, 2, 2, d);
            CHECK(loss == c[k].loss, "smooth_l1(beta=%g) = %.9g, want %.9g", c[k].beta, loss,
                  c[k].loss);
            CHECK(!memcmp(d, c[k].d, sizeof d),
                  "smooth_l1(beta=%g) gradient %g %g %g %g, want %g %g %g %g", c[k].beta, d[0],
                  d[1], d[2], d[3], c[k].d[0], c[k].d[1], c[k].d[2], c[k].d[3]);
        }
        /* at |e| = beta = 1 both sides give 0.5 */
        float y1 = 1, t1 = 0, d1;
        const nrt_loss_spec sl1 = {NRT_LOSS_SMOOTH_L1, 1.0f};
        float loss = nrt_loss(&sl1, &y1, &t1, 1, 1, &d1);
        CHECK(loss == 0.5f && d1 == 1.0f, "smooth_l1 at |e| = beta = 1: %g (d %g), want 0.5 (1)",
              loss, d1);
    }
    {
        float z[9] = {1, 3, 3, 0, -1, -2, 5, 5, 5};
        int32_t l[3] = {1, 0, 0};
        CHECK(nrt_correct(z, l, 3, 3) == 3, "correct: %d, want 3",
              nrt_correct(z, l, 3, 3));
        int32_t l2[3] = {2, 1, 2};
        CHECK(nrt_correct(z, l2, 3, 3) == 0, "correct (ties): %d, want 0",
              nrt_correct(z, l2, 3, 3));
    }

    /* Values against the double reference and gradients against its
     * central differences. */
    {
        enum { N = 5, K = 7 };
        float z[N * K], d[N * K];
        double zd[N * K];
        int32_t l[N];
        for (int i = 0; i < N * K; i++)
            zd[i] = z[i] = 3.0f * frand();
        for (int i = 0; i < N; i++)
            l[i] = (int32_t)nrt_rng_below(&rng, K);
        float loss = nrt_xent(z, l, N, K, d);
        double want = ref_xent(zd, l, N, K);
        CHECK(fabs(loss - want) < 1e-6 * (1 + fabs(want)),
              "xent = %.9g, want %.9g", loss, want);
        double worst = 0.0;
        for (int i = 0; i < N * K; i++) {
            double h = 1e-5, save = zd[i];
            zd[i] = save + h;
            double fp = ref_xent(zd, l, N, K);
            zd[i] = save - h;
            double fm = ref_xent(zd, l, N, K);
            zd[i] = save;
            double e = fabs(d[i] - (fp - fm) / (2 * h));
            if (e > worst)
                worst = e;
        }
        CHECK(worst < 1e-6, "xent gradient off by %g from finite differences",
              worst);
    }
    /* The exponential across its whole range: with logits [0, z] and
     * label 0, the gradient's second value is e^z / (1 + e^z).  Below
     * -87.3 the exponential is flushed to 0. */
    {
        double worst = 0.0;
        int zeros_ok = 1;
        for (double t = 0.0; t < 100.0; t += 0.0173) {
            float z[2] = {0.0f, (float)-t}, d[2];
            int32_t l = 0;
            nrt_xent(z, &l, 1, 2, d);
            double e = exp((double)z[1]);
            if (z[1] >= -87.3f) {
                double r = fabs(d[1] - e / (1 + e)) / (e / (1 + e));
                if (r > worst)
                    worst = r;
            } else if (d[1] != 0.0f)
                zeros_ok = 0;
        }
        CHECK(worst < 4e-7, "xent softmax of [0, -t] off by %g relative",
              worst);
        CHECK(zeros_ok, "xent exp(z) for z < -87.3 is not 0");
    }
    /* Many rows: with the gradient (all rows in it at once) and without
     * (rows in stack-sized blocks); long rows without the gradient (libm);
     * and rows holding NaN or infinity between ordinary rows. */
    {
        static const int shapes[][2] = {{300, 13}, {700, 10}, {2, 3000},
                                        {3, 2048}, {1, 1}};
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int n = shapes[s][0], k = shapes[s][1];
            float *z = randv((size_t)n * k), *d = randv((size_t)n * k);
            double *zd = malloc(sizeof *zd * (size_t)n * k);
            int32_t *l = malloc(sizeof *l * (size_t)n);
            for (size_t i = 0; i < (size_t)n * k; i++)
                zd[i] = z[i] *= 8.0f;
            for (int i = 0; i < n; i++)
                l[i] = (int32_t)nrt_rng_below(&rng, (uint32_t)k);
            double want = ref_xent(zd, l, n, k);
            float with = nrt_xent(z, l, n, k, d);
            float without = nrt_xent(z, l, n, k, NULL);
            CHECK(fabs(with - want) < 1e-6 * (1 + fabs(want)) &&
                      fabs(without - want) < 1e-6 * (1 + fabs(want)),
                  "xent %dx%d = %.9g / %.9g (without gradient), want %.9g",
                  n, k, with, without, want);
            double worst = 0.0;
            for (int i = 0; i < n; i++) {
                double mx = zd[(size_t)i * k], sum = 0.0;
                for (int j = 1; j < k; j++)
                    mx = fmax(mx, zd[(size_t)i * k + j]);
                for (int j = 0; j < k; j++)
                    sum += exp(zd[(size_t)i * k + j] - mx);
                for (int j = 0; j < k; j++) {
                    double p = exp(zd[(size_t)i * k + j] - mx) / sum;
                    double g = (p - (j == l[i])) / n;
                    /* softmax values, in [0, 1], to within 5e-7 */
                    double e = fabs(d[(size_t)i * k + j] - g) * n;
                    if (e > worst)
                        worst = e;
                }
            }
            CHECK(worst < 5e-7, "xent %dx%d gradient off by %g (times n)", n,
                  k, worst);
            if (n >= 3) { /* row 1 holds a NaN, row 2 an infinity */
                z[(size_t)1 * k + k / 2] = NAN;
                z[(size_t)2 * k] = INFINITY;
                float loss = nrt_xent(z, l, n, k, d);
                int rows_ok = 1;
                for (int j = 0; j < k; j++)
                    rows_ok &= isnan(d[(size_t)1 * k + j]) &&
                               isnan(d[(size_t)2 * k + j]);
                /* the rows after them are as before */
                float *d2 = randv((size_t)(n - 3) * k);
                nrt_xent(z + (size_t)3 * k, l + 3, n - 3, k, d2);
                for (size_t i = 0; i < (size_t)(n - 3) * k; i++)
                    rows_ok &= d2[i] * (n - 3) / n == d[(size_t)3 * k + i] ||
                               fabs(d2[i] * (n - 3) / n -
                                    d[(size_t)3 * k + i]) < 1e-7f;
                CHECK(isnan(loss) && rows_ok,
                      "xent %dx%d with NaN and inf rows: loss %g, gradients "
                      "%s", n, k, loss, rows_ok ? "right" : "wrong");
                free(d2);
            }
            free(z);
            free(d);
            free(zd);
            free(l);
        }
    }
    {
        enum { N = 4, D = 6 };
        float y[N * D], t[N * D], d[N * D];
        double yd[N * D], td[N * D];
        for (int i = 0; i < N * D; i++) {
            yd[i] = y[i] = frand();
            td[i] = t[i] = frand();
        }
        const nrt_loss_spec mse = {NRT_LOSS_MSE, 0};
        float loss = nrt_loss(&mse, y, t, N, D, d);
        double want = ref_mse(yd, td, N * D);
        CHECK(fabs(loss - want) < 1e-6 * (1 + want), "mse = %.9g, want %.9g",
              loss, want);
        double worst = 0.0;
        for (int i = 0; i < N * D; i++) {
            double h = 1e-5, save = yd[i];
            yd[i] = save + h;
            double fp = ref_mse(yd, td, N * D);
            yd[i] = save - h;
            double fm = ref_mse(yd, td, N * D);
            yd[i] = save;
            double e = fabs(d[i] - (fp - fm) / (2 * h));
            if (e > worst)
                worst = e;
        }
        CHECK(worst < 1e-6, "mse gradient off by %g from finite differences",
              worst);
    }
    printf("losses: checked\n");
}

/* ------------------------------------------------------------------ bench */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int,
                        const float *, int, float, float *, int);

/* nrt_gemm's other dots, as gemm_fns */
static void via_avx2(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    nrt_gemm(NRT_DOT_AVX2, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void via_bf16(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    nrt_gemm(NRT_DOT_BF16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void via_amx(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc)
{
    nrt_gemm(NRT_DOT_AMX, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#ifdef HAVE_CBLAS
static void via_cblas(int ta, int tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb,
                      float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
}
#endif

/* Best GFLOP/s over repeated calls, about 0.3 s of them. */
static double gflops(gemm_fn f, int ta, int tb, int m, int n, int k,
                     float beta, const float *a, const float *b, float *c)
{
    int lda = ta ? m : k, ldb = tb ? k : n;
    double best = 1e30, start = now();
    f(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n); /* warm up */
    int reps = 0;
    while (reps < 5 || now() - start < 0.3) {
        double t0 = now();
        f(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
        double dt = now() - t0;
        if (dt < best)
            best = dt;
        reps++;
    }
    return 2.0 * m * n * k / best * 1e-9;
}

static void set_threads(int t)
{
#ifdef _OPENMP
    omp_set_num_threads(t);
#endif
#ifdef HAVE_CBLAS
    openblas_set_num_threads(t);
#endif
    (void)t;
}

#ifdef HAVE_CBLAS
/* Lets the other library's idle threads stop spinning before a timing. */
static void pause_a_little(void)
{
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
}
#endif

/* The layer kernels besides sgemm, on cifar10's shapes (batch 64), each
 * beside what it replaces: nrt_im2col/nrt_col2im once per sample, the
 * general max pooling loop (a copy of it below), nrt_rng_uniform per
 * value, plain loops for the sums. */

/* nrt_maxpool2d_fwd as it was before its 2x2 fast path, for comparison. */
static void old_maxpool2d_fwd(const float *x, int n, int c, int h, int w,
                              int k, int s, int p, int oh, int ow, float *y,
                              int32_t *arg)
{
    const int planes = n * c;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) \
    if ((double)planes * oh * ow * k * k >= 65536.0)
#endif
    for (int q = 0; q < planes; q++) {
        const float *xp = x + (size_t)q * h * w;
        float *yp = y + (size_t)q * oh * ow;
        int32_t *ap = arg + (size_t)q * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int y0 = oy * s - p, y1 = y0 + k;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > h ? h : y1;
            for (int ox = 0; ox < ow; ox++) {
                int x0 = ox * s - p, x1 = x0 + k;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > w ? w : x1;
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
}

enum job_kind {
    J_CONV_FWD, J_CONV_DW, J_CONV_DX, J_COL2IM_LOOP, J_COL2IM_BATCH,
    J_MAXPOOL_OLD, J_MAXPOOL, J_MAXPOOL_BWD, J_AVGPOOL, J_AVGPOOL_BWD,
    J_ROWSUM_LOOP, J_ROWSUM, J_COLSUM_LOOP, J_COLSUM, J_DROPOUT_LOOP,
    J_DROPOUT
};

struct job {
    int kind;
    int n, c, h, w, k, p; /* conv and pool shapes; sums: rows n, cols c */
    const float *in;
    float *out;
    int32_t *iout;
    nrt_rng *r;
    const float *wt; /* convolutions: a weight [c, c, k, k] */
    float *tmp;      /* and the padded input (or dx's scratch) */
};

static void run_job(const struct job *j)
{
    const int n = j->n, c = j->c, h = j->h, w = j->w, k = j->k, p = j->p;
    const int oh = out_size(h, k, 1, p), ow = out_size(w, k, 1, p);
    const int ph = h / 2, pw = w / 2; /* 2x2 pool outputs */
    const size_t plane = (size_t)oh * ow, rows = (size_t)c * k * k;
    switch (j->kind) {
    case J_CONV_FWD: { /* c channels in and out; in: x, out: y */
        const nrt_conv g = {c, h, w, c, oh, ow, k, k, 1, 1, p, p, NRT_DOT_F32, NULL};
        nrt_conv2d_pad(&g, n, 1, j->in, j->tmp);
        nrt_conv2d_fwd(&g, n, j->wt, NULL, j->tmp, j->out);
        break;
    }
    case J_CONV_DW: { /* in: dy, tmp: the padded input, out: dW */
        const nrt_conv g = {c, h, w, c, oh, ow, k, k, 1, 1, p, p, NRT_DOT_F32, NULL};
        nrt_conv2d_dw(&g, n, j->in, j->tmp, j->out);
        break;
    }
    case J_CONV_DX: { /* in: dy, out: dx */
        const nrt_conv g = {c, h, w, c, oh, ow, k, k, 1, 1, p, p, NRT_DOT_F32, NULL};
        nrt_conv2d_dx(&g, n, 1, j->wt, j->in, j->tmp, j->out);
        break;
    }
    case J_COL2IM_LOOP:
        memset(j->out, 0, (size_t)n * c * h * w * sizeof *j->out);
        for (int i = 0; i < n; i++)
            nrt_col2im(j->in + (size_t)i * rows * plane, c, h, w, k, k, 1, 1,
                       p, p, oh, ow, j->out + (size_t)i * c * h * w);
        break;
    case J_COL2IM_BATCH:
        nrt_col2im_batch(j->in, n, c, h, w, k, k, 1, 1, p, p, oh, ow, j->out);
        break;
    case J_MAXPOOL_OLD:
        old_maxpool2d_fwd(j->in, n, c, h, w, 2, 2, 0, ph, pw, j->out, j->iout);
        break;
    case J_MAXPOOL:
        nrt_maxpool2d_fwd(j->in, n, c, h, w, 2, 2, 0, ph, pw, j->out, j->iout);
        break;
    case J_MAXPOOL_BWD:
        nrt_maxpool2d_bwd(j->in, j->iout, n, c, h, w, 2, 2, 0, ph, pw, j->out);
        break;
    case J_AVGPOOL:
        nrt_avgpool2d_fwd(j->in, n, c, h, w, 2, 2, 0, ph, pw, j->out);
        break;
    case J_AVGPOOL_BWD:
        nrt_avgpool2d_bwd(j->in, n, c, h, w, 2, 2, 0, ph, pw, j->out);
        break;
    case J_ROWSUM_LOOP:
        for (int r = 0; r < n; r++) {
            float s = 0.0f;
            for (int i = 0; i < c; i++)
                s += j->in[(size_t)r * c + i];
            j->out[r] = s;
        }
        break;
    case J_ROWSUM:
        nrt_row_sums(j->in, n, (size_t)c, j->out);
        break;
    case J_COLSUM_LOOP:
        for (int i = 0; i < c; i++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++)
                s += j->in[(size_t)r * c + i];
            j->out[i] = s;
        }
        break;
    case J_COLSUM:
        nrt_col_sums(j->in, n, c, j->out);
        break;
    case J_DROPOUT_LOOP: /* what netc generated: out = [mask, y] */
        for (size_t i = 0; i < (size_t)n; i++) {
            j->out[i] = nrt_rng_uniform(j->r) < 0.5 ? 0.0f : 2.0f;
            j->out[n + i] = j->in[i] * j->out[i];
        }
        break;
    case J_DROPOUT: {
        nrt_net net = {.dropout_key = nrt_rng_next(j->r)};
        nrt_dropout_fwd(&net, 1, j->in, j->out + n, j->out, (size_t)n, 0.5f);
        break;
    }
    }
}

static size_t round_page(size_t bytes)
{
    return (bytes + 4095) / 4096 * 4096;
}

/* randv on whole pages: the timings below change by half with how the
 * buffers lie relative to each other (a malloc after the sgemm benchmark's
 * frees comes from elsewhere than one in a fresh process); generated
 * programs' buffers are large allocations, page-aligned but for a header. */
static float *page_randv(size_t n)
{
    float *v = aligned_alloc(4096, round_page(n * sizeof *v));
    if (!v) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

/* Best milliseconds of repeated runs, about 0.2 s of them. */
static double best_ms(const struct job *j)
{
    double best = 1e30, start = now();
    run_job(j); /* warm up */
    int reps = 0;
    while (reps < 5 || now() - start < 0.2) {
        double t0 = now();
        run_job(j);
        double dt = now() - t0;
        if (dt < best)
            best = dt;
        reps++;
    }
    return best * 1e3;
}

static void bench_layers(int maxt)
{
    static const struct {
        const char *what;
        int old, new_; /* job kinds: the old way (-1: none) and the new */
        int n, c, h, w, k, p;
    } b[] = {
        {"conv 32x16x16 k5 p2 fwd", -1, J_CONV_FWD, 64, 32, 16, 16, 5, 2},
        {"conv 32x16x16 k5 p2 dW", -1, J_CONV_DW, 64, 32, 16, 16, 5, 2},
        {"conv 32x16x16 k5 p2 dx", -1, J_CONV_DX, 64, 32, 16, 16, 5, 2},
        {"conv 64x8x8 k5 p2 fwd", -1, J_CONV_FWD, 64, 64, 8, 8, 5, 2},
        {"col2im 3x32x32 k5 p2", J_COL2IM_LOOP, J_COL2IM_BATCH, 64, 3, 32, 32, 5, 2},
        {"col2im 32x16x16 k5 p2", J_COL2IM_LOOP, J_COL2IM_BATCH, 64, 32, 16, 16, 5, 2},
        {"maxpool 32x32x32 2x2", J_MAXPOOL_OLD, J_MAXPOOL, 64, 32, 32, 32, 0, 0},
        {"maxpool bwd 32x32x32", -1, J_MAXPOOL_BWD, 64, 32, 32, 32, 0, 0},
        {"avgpool 32x32x32 2x2", -1, J_AVGPOOL, 64, 32, 32, 32, 0, 0},
        {"avgpool bwd 32x32x32", -1, J_AVGPOOL_BWD, 64, 32, 32, 32, 0, 0},
        {"row sums 32 x 65536", J_ROWSUM_LOOP, J_ROWSUM, 32, 65536, 0, 0, 0, 0},
        {"col sums 64 x 4096", J_COLSUM_LOOP, J_COLSUM, 64, 4096, 0, 0, 0, 0},
        {"dropout 0.5, 1M values", J_DROPOUT_LOOP, J_DROPOUT, 1 << 20, 0, 0, 0, 0, 0},
    };
    printf("\n%-24s | %8s %8s %6s", "ms (batch 64)", "old 1t", "new 1t",
           "ratio");
    if (maxt > 1)
        printf(" | %8s %8s %6s", "old Nt", "new Nt", "ratio");
    printf("\n");
    for (size_t s = 0; s < sizeof b / sizeof *b; s++) {
        struct job j = {0, b[s].n, b[s].c, b[s].h, b[s].w, b[s].k, b[s].p,
                        NULL, NULL, NULL, NULL, NULL, NULL};
        size_t in, out;
        const int oh = out_size(j.h, j.k, 1, j.p), ow = out_size(j.w, j.k, 1, j.p);
        const size_t img = (size_t)j.n * j.c * j.h * j.w;
        const size_t cols = (size_t)j.c * j.k * j.k * j.n * oh * ow;
        switch (b[s].new_) {
        case J_CONV_FWD: case J_CONV_DX: in = out = img; break;
        case J_CONV_DW: in = img, out = (size_t)j.c * j.c * j.k * j.k; break;
        case J_COL2IM_BATCH: in = cols, out = img; break;
        case J_ROWSUM: case J_COLSUM:
            in = (size_t)j.n * j.c, out = (size_t)j.n + j.c; break;
        case J_DROPOUT: in = (size_t)j.n, out = 2 * (size_t)j.n; break;
        default: in = out = img; break; /* pooling: generous */
        }
        float *x = page_randv(in), *y = page_randv(out);
        int32_t *arg = aligned_alloc(4096, round_page(img * sizeof *arg));
        nrt_rng r;
        nrt_rng_seed(&r, 1);
        float *wt = page_randv((size_t)j.c * j.c * j.k * j.k);
        float *tmp = page_randv(4 * img); /* generous: padded input, scratch */
        j.in = x, j.out = y, j.iout = arg, j.r = &r, j.wt = wt, j.tmp = tmp;
        if (b[s].new_ == J_MAXPOOL_BWD) { /* needs a real arg */
            j.kind = J_MAXPOOL;
            run_job(&j);
        }
        double t[2][2] = {{0}};
        for (int nt = 0; nt < (maxt > 1 ? 2 : 1); nt++) {
            set_threads(nt ? maxt : 1);
            for (int v = 0; v < 2; v++) {
                j.kind = v ? b[s].new_ : b[s].old;
                if (j.kind >= 0)
                    t[nt][v] = best_ms(&j);
            }
        }
        printf("%-24s |", b[s].what);
        for (int nt = 0; nt < (maxt > 1 ? 2 : 1); nt++) {
            const char *sep = nt || maxt == 1 ? "" : " |";
            if (b[s].old >= 0)
                printf(" %8.3f %8.3f %6.2f%s", t[nt][0], t[nt][1],
                       t[nt][0] / t[nt][1], sep);
            else
                printf(" %8s %8.3f %6s%s", "-", t[nt][1], "", sep);
        }
        printf("\n");
        free(x);
        free(y);
        free(arg);
        free(wt);
        free(tmp);
    }
    set_threads(maxt);
    printf("(ratio = old / new; old: col2im once per sample, maxpool's "
           "general loop,\n nrt_rng_uniform per value, plain loops for the "
           "sums; Nt = %d threads)\n", maxt);
}

static int bench(void)
{
    static const struct {
        const char *what;
        int ta, tb, m, n, k;
        float beta;
    } sh[] = {
        {"square NN", 0, 0, 256, 256, 256, 0.0f},
        {"square TT", 1, 1, 256, 256, 256, 0.0f},
        {"conv1 fwd W*col", 0, 0, 32, 1024, 75, 0.0f},
        {"conv1 dW += dy*col^T", 0, 1, 32, 75, 1024, 1.0f},
        {"conv1 dcol = W^T*dy", 1, 0, 75, 1024, 32, 0.0f},
        {"conv2 fwd W*col", 0, 0, 64, 256, 800, 0.0f},
        {"conv2 dW += dy*col^T", 0, 1, 64, 800, 256, 1.0f},
        {"conv2 dcol = W^T*dy", 1, 0, 800, 256, 64, 0.0f},
        {"linear fwd x*W^T", 0, 1, 64, 256, 1024, 0.0f},
        {"linear dW = dy^T*x", 1, 0, 256, 1024, 64, 0.0f},
        {"linear dx = dy*W", 0, 0, 64, 1024, 256, 0.0f},
        {"square NN 512", 0, 0, 512, 512, 512, 0.0f},
    };
    enum { NS = sizeof sh / sizeof *sh };
    /* [shape][0: nrt 1 thread, 1: nrt all, 2: blas 1, 3: blas all] */
    double r[NS][4] = {{0}};
    int maxt = 1;
#ifdef _OPENMP
    maxt = omp_get_max_threads();
#endif
    /* All of one library, then all of the other, so that neither's idle
     * threads compete with the other's. */
    for (int lib = 0; lib < 2; lib++) {
        gemm_fn f = nrt_sgemm;
        if (lib == 1) {
#ifdef HAVE_CBLAS
            f = via_cblas;
            pause_a_little();
#else
            break;
#endif
        }
        for (int s = 0; s < NS; s++) {
            int m = sh[s].m, n = sh[s].n, k = sh[s].k;
            float *a = randv((size_t)m * k), *b = randv((size_t)k * n);
            float *c = randv((size_t)m * n);
            set_threads(1);
            r[s][2 * lib] =
                gflops(f, sh[s].ta, sh[s].tb, m, n, k, sh[s].beta, a, b, c);
            if (maxt > 1) {
                set_threads(maxt);
                r[s][2 * lib + 1] = gflops(f, sh[s].ta, sh[s].tb, m, n, k,
                                           sh[s].beta, a, b, c);
            }
            free(a);
            free(b);
            free(c);
        }
    }
#ifdef NETRT_HAVE_OPENBLAS
    printf("(nrt_sgemm is OpenBLAS in this build)\n");
#endif
    printf("%-22s %4s %4s %4s %2s | %7s", "GFLOP/s", "m", "n", "k", "op",
           "nrt 1t");
#ifdef HAVE_CBLAS
    printf(" %7s %6s", "blas 1t", "ratio");
#endif
    if (maxt > 1) {
        printf(" %7s", "nrt Nt");
#ifdef HAVE_CBLAS
        printf(" %7s", "blas Nt");
#endif
    }
    printf("\n");
    for (int s = 0; s < NS; s++) {
        printf("%-22s %4d %4d %4d %c%c | %7.1f", sh[s].what, sh[s].m, sh[s].n,
               sh[s].k, sh[s].ta ? 'T' : 'N', sh[s].tb ? 'T' : 'N', r[s][0]);
#ifdef HAVE_CBLAS
        printf(" %7.1f %6.2f", r[s][2], r[s][2] / r[s][0]);
#endif
        if (maxt > 1) {
            printf(" %7.1f", r[s][1]);
#ifdef HAVE_CBLAS
            printf(" %7.1f", r[s][3]);
#endif
        }
        printf("\n");
    }
    printf("(ratio = OpenBLAS / nrt, one thread; Nt = %d threads)\n", maxt);
    /* nrt_gemm's kernels side by side, one thread: fp32 on AVX2, fp32 on
     * the widest the cpu has, bf16 values in pairs (AVX512-BF16) */
    set_threads(1);
    const int amx = nrt_amx_enable();
    printf("\n%-22s %4s %4s %4s %2s | %7s %7s %7s %7s\n", "GFLOP/s, 1 thread", "m", "n", "k",
           "op", "AVX2", nrt_gemm_isa(), nrt_dot_native() ? "bf16" : "(bf16)",
           amx ? "AMX" : "(no AMX)");
    for (int s = 0; s < NS; s++) {
        int m = sh[s].m, n = sh[s].n, k = sh[s].k;
        float *a = bf16v((size_t)m * k), *b = bf16v((size_t)k * n), *c = randv((size_t)m * n);
        printf("%-22s %4d %4d %4d %c%c | %7.1f %7.1f %7.1f %7.1f\n", sh[s].what, m, n, k,
               sh[s].ta ? 'T' : 'N', sh[s].tb ? 'T' : 'N',
               gflops(via_avx2, sh[s].ta, sh[s].tb, m, n, k, sh[s].beta, a, b, c),
               gflops(nrt_sgemm, sh[s].ta, sh[s].tb, m, n, k, sh[s].beta, a, b, c),
               gflops(via_bf16, sh[s].ta, sh[s].tb, m, n, k, sh[s].beta, a, b, c),
               amx ? gflops(via_amx, sh[s].ta, sh[s].tb, m, n, k, sh[s].beta, a, b, c) : 0.0);
        free(a), free(b), free(c);
    }
    bench_layers(maxt);
    return 0;
}

/* A rounding function f against bit patterns worked out by hand. */
typedef struct Bits {
    uint32_t in, out;
} Bits;

static void rounding_cases(const char *name, float (*f)(float), const Bits *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t got = nrt_f32_bits(f(nrt_f32_of(cases[i].in)));
        CHECK(got == cases[i].out, "%s(0x%08x) = 0x%08x, want 0x%08x", name, cases[i].in, got,
              cases[i].out);
    }
}

/* nrt_bf16 against bit patterns worked out by hand: PyTorch's .bfloat16()
 * (round to nearest, ties to even; NaN kept; overflow to infinity). */
static void test_bf16(void)
{
    static const Bits cases[] = {
        {0x3f800000, 0x3f800000}, /* 1 */
        {0x3f808000, 0x3f800000}, /* 1 + 2^-8: a tie, to even (down) */
        {0x3f818000, 0x3f820000}, /* 1 + 3 2^-8: a tie, to even (up) */
        {0x3f808001, 0x3f810000}, /* just past the tie: up */
        {0x3f807fff, 0x3f800000}, /* just short of it: down */
        {0xbfc18000, 0xbfc20000}, /* a negative tie, to even: away from zero here */
        {0x7f7fffff, 0x7f800000}, /* FLT_MAX: past bf16's largest, infinity */
        {0x7f7f7fff, 0x7f7f0000}, /* bf16's largest stays */
        {0x00000001, 0x00000000}, /* the smallest subnormal: 0 */
        {0x00018000, 0x00020000}, /* a subnormal tie: to even */
        {0x7f800000, 0x7f800000}, /* infinity */
        {0x7f800001, 0x7fc00000}, /* a signalling NaN: quiet NaN */
        {0xffc12345, 0xffc10000}, /* a quiet NaN keeps its sign and top bits */
    };
    rounding_cases("nrt_bf16", nrt_bf16, cases, sizeof cases / sizeof cases[0]);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = nrt_half_bits(NRT_BF16, nrt_f32_of(cases[i].in));
        CHECK(got == cases[i].out >> 16, "nrt_half_bits bf16 of 0x%08x: 0x%04x, want 0x%04x",
              (unsigned)cases[i].in, (unsigned)got, (unsigned)(cases[i].out >> 16));
    }
    float a[3] = {1.00390625f, -2.5f, 3.14159265f}, b[3];
    nrt_round_lowp_to(NRT_BF16, b, a, 3);
    nrt_round_lowp(NRT_BF16, a, 3);
    CHECK(!memcmp(a, b, sizeof a) && a[0] == 1.0f && a[1] == -2.5f && a[2] == 3.140625f,
          "nrt_round_lowp bf16: %g %g %g", a[0], a[1], a[2]);
}

/* nrt_fp16 against bit patterns worked out by hand: PyTorch's .half()
 * (c10's fp16_ieee_from_fp32_value: to nearest, ties to even; subnormals
 * from 2^-14 down in steps of 2^-24; from 65520 on infinity; a NaN the
 * quiet NaN of its sign). */
static void test_fp16(void)
{
    static const Bits cases[] = {
        {0x3f800000, 0x3f800000}, /* 1 */
        {0x3f801000, 0x3f800000}, /* 1 + 2^-11: a tie, to even (down) */
        {0x3f803000, 0x3f804000}, /* 1 + 3 2^-11: a tie, to even (up) */
        {0x3f801001, 0x3f802000}, /* just past the tie: up */
        {0x477fe000, 0x477fe000}, /* 65504, the largest */
        {0x477fefff, 0x477fe000}, /* just short of 65520: 65504 */
        {0x477ff000, 0x7f800000}, /* 65520, the tie past it: infinity */
        {0xc77ff000, 0xff800000}, /* -65520: -infinity */
        {0x7f7fffff, 0x7f800000}, /* FLT_MAX */
        {0x38800000, 0x38800000}, /* 2^-14, the smallest normal */
        {0x387fffff, 0x38800000}, /* just below it: up to it */
        {0x33800000, 0x33800000}, /* 2^-24, the smallest subnormal */
        {0x33000000, 0x00000000}, /* 2^-25: a tie, to even (0) */
        {0x33000001, 0x33800000}, /* just past it: 2^-24 */
        {0x33c00000, 0x34000000}, /* 3 2^-25: a tie, to even (2^-23) */
        {0xb3000000, 0x80000000}, /* -2^-25: -0 */
        {0x38000001, 0x38000000}, /* 2^-15 and a little: 2^-15, a subnormal */
        {0x00000001, 0x00000000}, /* fp32's smallest subnormal: 0 */
        {0x7f800000, 0x7f800000}, /* infinity */
        {0x7f800001, 0x7fc00000}, /* a signalling NaN: the quiet one */
        {0xffc12345, 0xffc00000}, /* a NaN keeps its sign alone */
    };
    rounding_cases("nrt_fp16", nrt_fp16, cases, sizeof cases / sizeof cases[0]);
#ifdef __FLT16_MAX__
    /* and against the compiler's own conversion, IEEE's, over every
     * exponent with random significands (NaNs aside: C leaves their bits
     * open) */
    long long differ = 0;
    for (uint32_t e = 0; e < 256; e++)
        for (int k = 0; k < 4096; k++) {
            const float v = nrt_f32_of(e << 23 | ((uint32_t)nrt_rng_next(&rng) & 0x807fffffu));
            if (!isnan(v))
                differ += nrt_f32_bits(nrt_fp16(v)) != nrt_f32_bits((float)(_Float16)v);
        }
    CHECK(differ == 0, "nrt_fp16 differs from (_Float16) on %lld values", differ);
    /* the stored bits, nrt_half_bits, against the compiler's _Float16's */
    differ = 0;
    for (uint32_t e = 0; e < 256; e++)
        for (int k = 0; k < 4096; k++) {
            const float v = nrt_f32_of(e << 23 | ((uint32_t)nrt_rng_next(&rng) & 0x807fffffu));
            const _Float16 h = (_Float16)v;
            uint16_t want;
            memcpy(&want, &h, sizeof want);
            if (!isnan(v))
                differ += nrt_half_bits(NRT_FP16, v) != want;
        }
    CHECK(differ == 0, "nrt_half_bits fp16 differs from _Float16's bits on %lld values", differ);
#endif
    /* by hand: 1, -2, 65504, 2^-14, 2^-24, 3 2^-24 (subnormals), -0, inf,
     * a NaN (the quiet one, its sign kept), a value that rounds up to 2 */
    static const struct {
        uint32_t in;
        uint16_t want;
    } half[] = {{0x3f800000, 0x3c00}, {0xc0000000, 0xc000}, {0x477fe000, 0x7bff},
                {0x38800000, 0x0400}, {0x33800000, 0x0001}, {0x34400000, 0x0003},
                {0x80000000, 0x8000}, {0x7f800000, 0x7c00}, {0xff812345, 0xfe00},
                {0x3ffff000, 0x4000}};
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
        const uint16_t got = nrt_half_bits(NRT_FP16, nrt_f32_of(half[i].in));
        CHECK(got == half[i].want, "nrt_half_bits fp16 of 0x%08x: 0x%04x, want 0x%04x",
              (unsigned)half[i].in, (unsigned)got, (unsigned)half[i].want);
    }
    float a[3] = {3.14159265f, 1e5f, 2.0f}, s[3] = {1.0f, 0.5f, 4096.0f};
    nrt_round_lowp_scaled(NRT_FP16, s, 3, 16.0f); /* scaled, then rounded */
    nrt_round_lowp(NRT_FP16, a, 3);
    CHECK(a[0] == 3.140625f && isinf(a[1]) && a[2] == 2.0f && s[0] == 16.0f && s[1] == 8.0f &&
              isinf(s[2]),
          "nrt_round_lowp fp16: %g %g %g; scaled %g %g %g", a[0], a[1], a[2], s[0], s[1], s[2]);
}

/* GradScaler's step, by its rules: unscaling by the fp32 reciprocal of
 * the scale, a non-finite gradient found before it (and the step skipped,
 * the scale halved, the tracker reset), growth after NRT_SCALE_INTERVAL
 * clean steps, and none where the grown scale would not be finite. */
/* A value kept in 16 bits (nrt_net.half): every one of the 65536 bit
 * patterns, bf16's and fp16's, read as a float (nrt_half_value; fp16's
 * against the compiler's _Float16 where it has one), and that float's
 * bits again (nrt_half_bits) the same (NaNs aside: they come back quiet);
 * nrt_half_keep and nrt_half_load over an array (bf16's vectorised
 * loops), a rounded value back as it was, an unrounded one as
 * nrt_lowp rounds it; nrt_half_round_keep rounding both. */
static void test_half_storage(void)
{
    for (int p = NRT_BF16; p <= NRT_FP16; p++) {
        long long differ = 0, nans = 0, wrong_value = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            const float v = nrt_half_value(p, (uint16_t)h);
            if (isnan(v)) {
                nans++;
                continue;
            }
            differ += nrt_half_bits(p, v) != h;
            wrong_value += nrt_lowp(p, v) != v && !isnan(v);
#ifdef __FLT16_MAX__
            if (p == NRT_FP16) {
                _Float16 f;
                const uint16_t bits = (uint16_t)h;
                memcpy(&f, &bits, sizeof f);
                wrong_value += nrt_f32_bits((float)f) != nrt_f32_bits(v);
            }
#endif
        }
        CHECK(differ == 0 && wrong_value == 0 && nans == (p == NRT_BF16 ? 254 : 2046),
              "nrt_half_value %s: %lld patterns not back to their bits, %lld values wrong, %lld NaNs",
              nrt_precision_name(p), differ, wrong_value, nans);
        enum { N = 1000 };
        float src[N], round[N], back[N];
        uint16_t kept[N];
        for (int i = 0; i < N; i++) {
            src[i] = (float)(nrt_rng_uniform(&rng) * 8.0 - 4.0) * (i % 7 == 0 ? 1e-6f : 1.0f);
            round[i] = nrt_lowp(p, src[i]);
        }
        nrt_half_keep(p, kept, src, N);
        nrt_half_load(p, back, kept, N);
        CHECK(!memcmp(back, round, sizeof back), "nrt_half_keep/load %s: not the rounded values",
              nrt_precision_name(p));
        nrt_half_keep(p, kept, round, N);
        nrt_half_load(p, back, kept, N);
        CHECK(!memcmp(back, round, sizeof back), "nrt_half_keep/load %s: a rounded value changed",
              nrt_precision_name(p));
        memset(kept, 0, sizeof kept);
        nrt_half_round_keep(p, kept, src, N);
        nrt_half_load(p, back, kept, N);
        CHECK(!memcmp(src, round, sizeof src) && !memcmp(back, round, sizeof back),
              "nrt_half_round_keep %s: the values or their 16 bits not rounded",
              nrt_precision_name(p));
    }
}

/* fp16's rounding and 16 bits over arrays (on F16C where the cpu has
 * it, eight at a time, the rest one by one) against nrt_fp16,
 * nrt_half_bits and nrt_half_value value by value, bit for bit: values of
 * every exponent with random significands, NaNs and infinities among
 * them, at a length that leaves a remainder; and every 16-bit pattern
 * read back. */
static void test_fp16_arrays(void)
{
    enum { N = 256 * 16 + 5 };
    static float src[N], got[N], back[N];
    static uint16_t bits[N];
    for (int i = 0; i < N; i++)
        src[i] = nrt_f32_of((uint32_t)(i % 256) << 23 | ((uint32_t)nrt_rng_next(&rng) & 0x807fffffu));
    long long wrong = 0;
    nrt_round_lowp_to(NRT_FP16, got, src, N);
    for (int i = 0; i < N; i++)
        wrong += nrt_f32_bits(got[i]) != nrt_f32_bits(nrt_fp16(src[i]));
    nrt_half_keep(NRT_FP16, bits, src, N);
    for (int i = 0; i < N; i++)
        wrong += bits[i] != nrt_half_bits(NRT_FP16, src[i]);
    memcpy(back, src, sizeof back);
    memset(bits, 0, sizeof bits);
    nrt_half_round_keep(NRT_FP16, bits, back, N);
    for (int i = 0; i < N; i++)
        wrong += nrt_f32_bits(back[i]) != nrt_f32_bits(got[i]) ||
                 bits[i] != nrt_half_bits(NRT_FP16, src[i]);
    static uint16_t all[65536];
    static float all_back[65536];
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    nrt_half_load(NRT_FP16, all_back, all, 65536);
    for (uint32_t h = 0; h < 65536; h++)
        wrong += nrt_f32_bits(all_back[h]) != nrt_f32_bits(nrt_half_value(NRT_FP16, (uint16_t)h));
    CHECK(wrong == 0, "fp16 over arrays: %lld values or bits not those of one by one", wrong);
}

static void test_scaler(void)
{
    nrt_scaler s = {3.0f, 0, 0};
    float g[3] = {3.0f, -6.0f, 1.0f};
    int skip = nrt_scaler_step(&s, g, 3);
    const float inv3 = (float)(1.0 / 3.0);
    CHECK(!skip && g[0] == 3.0f * inv3 && g[1] == -6.0f * inv3 && g[2] == inv3 &&
              s.scale == 3.0f && s.tracker == 1 && s.skipped == 0,
          "a clean step: %d, %g %g %g, scale %g tracker %d", skip, g[0], g[1], g[2], s.scale,
          (int)s.tracker);
    float bad[2] = {INFINITY, 2.0f};
    skip = nrt_scaler_step(&s, bad, 2);
    CHECK(skip && s.scale == 1.5f && s.tracker == 0 && s.skipped == 1 && bad[1] == 2.0f * inv3,
          "an inf: %d, scale %g tracker %d skipped %lld", skip, s.scale, (int)s.tracker,
          (long long)s.skipped);
    float nan[1] = {NAN};
    CHECK(nrt_scaler_step(&s, nan, 1) && s.scale == 0.75f && s.skipped == 2, "a NaN: scale %g",
          s.scale);
    s = (nrt_scaler){1024.0f, NRT_SCALE_INTERVAL - 2, 0};
    float z[1] = {0.0f};
    nrt_scaler_step(&s, z, 1);
    CHECK(s.scale == 1024.0f && s.tracker == NRT_SCALE_INTERVAL - 1, "before growth: %g %d",
          s.scale, (int)s.tracker);
    nrt_scaler_step(&s, z, 1);
    CHECK(s.scale == 2048.0f && s.tracker == 0, "growth after %d clean steps: %g %d",
          NRT_SCALE_INTERVAL, s.scale, (int)s.tracker);
    s = (nrt_scaler){FLT_MAX, NRT_SCALE_INTERVAL - 1, 0};
    nrt_scaler_step(&s, z, 1);
    CHECK(s.scale == FLT_MAX && s.tracker == 0, "no growth to infinity: %g", s.scale);
}

int main(int argc, char **argv)
{
    nrt_rng_seed(&rng, 20240611);
    if (argc > 1 && !strcmp(argv[1], "--bench"))
        return bench();
    test_sgemm();
    test_sgemm_threads();
    test_sgemm_small_order();
    test_dots();
    test_im2col();
    test_maxpool();
    test_avgpool();
    test_conv_batch();
    test_sums();
    test_philox();
    test_dropout();
    test_order();
    test_order_fill();
    test_maxpool_fast();
    test_avgpool_fast();
    test_losses();
    test_bf16();
    test_fp16();
    test_half_storage();
    test_fp16_arrays();
    test_scaler();
    return check_summary("test_kernels");
}
