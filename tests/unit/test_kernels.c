/*
 * test_kernels.c — unit tests of runtime/kernels.c.
 *
 * Every kernel is checked against a naive reference written here from the
 * definition (in double where rounding matters), and the gradients against
 * the adjoint identity or central finite differences.  nrt_sgemm is also
 * checked to give bit-identical results with 1, 2 and 3 OpenMP threads.
 *
 *   test_kernels          run the tests: failures to stderr, a summary to
 *                         stdout, exit status 0 if all passed
 *   test_kernels --bench  GFLOP/s of nrt_sgemm on the shapes netc's programs
 *                         use, and of cblas_sgemm beside it when built with
 *                         -DNRT_TEST_CBLAS=1 (or -DNETRT_HAVE_OPENBLAS=1)
 *                         and -lopenblas
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

static int checks, failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        checks++;                                                             \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

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
static void check_gemm(int ta, int tb, int m, int n, int k, float alpha,
                       float beta, int pad, int nanc)
{
    int ar = ta ? k : m, ac = ta ? m : k; /* A as stored */
    int br = tb ? n : k, bc = tb ? k : n;
    int lda = ac + (pad ? 3 : 0), ldb = bc + (pad ? 5 : 0);
    int ldc = n + (pad ? 2 : 0);
    float *a = randv((size_t)ar * lda), *b = randv((size_t)br * ldb);
    float *c = randv((size_t)m * ldc), *c0 = malloc(((size_t)m * ldc + 1) * 4);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++)
            if (j >= n)
                c[(size_t)i * ldc + j] = 12345.0f;
            else if (nanc)
                c[(size_t)i * ldc + j] = NAN;
    memcpy(c0, c, (size_t)m * ldc * sizeof *c);
    nrt_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
                CHECK(0, "sgemm ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g "
                         "pad=%d nanc=%d: C[%d][%d] = %.9g, want %.9g",
                      ta, tb, m, n, k, alpha, beta, pad, nanc, i, j, got,
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

/* Results must not depend on the number of threads. */
static void test_sgemm_threads(void)
{
#ifdef _OPENMP
    static const int shapes[][3] = {{256, 256, 256}, {32, 1024, 75},
                                    {75, 1024, 32},  {64, 800, 256},
                                    {301, 77, 530},  {17, 5000, 40}};
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
    {1, 3, 32, 32, 2, 2, 0}};
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
        for (int mode = 0; mode < 3; mode++) {
            float *x = randv(xs);
            if (mode == 1) /* ties everywhere: few distinct values */
                for (size_t i = 0; i < xs; i++)
                    x[i] = (float)(int)(x[i] * 2.0f);
            if (mode == 2) /* all negative: padding (0) must not win */
                for (size_t i = 0; i < xs; i++)
                    x[i] = -1.0f - fabsf(x[i]);
            float *y = malloc(ys * sizeof *y), *ry = malloc(ys * sizeof *ry);
            int32_t *arg = malloc(ys * sizeof *arg);
            int32_t *rarg = malloc(ys * sizeof *rarg);
            nrt_maxpool2d_fwd(x, v.n, v.c, v.h, v.w, v.k, v.s, v.p, oh, ow, y,
                              arg);
            ref_maxpool(x, v, oh, ow, ry, rarg);
            int bad = 0;
            for (size_t i = 0; i < ys; i++)
                if (y[i] != ry[i] || arg[i] != rarg[i])
                    bad++;
            CHECK(bad == 0, "maxpool case %d mode %d: %d outputs wrong", t,
                  mode, bad);

            /* Backward: dx overwritten with the scatter of dy through arg. */
            float *dy = randv(ys), *dx = randv(xs);
            double *ref = calloc(xs, sizeof *ref);
            nrt_maxpool2d_bwd(dy, arg, v.n, v.c, v.h, v.w, oh, ow, dx);
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
        float loss = nrt_mse(y, t, 2, 2, d);
        CHECK(loss == 2.25f, "mse = %g, want 2.25", loss);
        CHECK(d[0] == 0.5f && d[1] == 1.0f && d[2] == 0.0f && d[3] == -1.0f,
              "mse gradient %g %g %g %g, want 0.5 1 0 -1", d[0], d[1], d[2],
              d[3]);
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
    {
        enum { N = 4, D = 6 };
        float y[N * D], t[N * D], d[N * D];
        double yd[N * D], td[N * D];
        for (int i = 0; i < N * D; i++) {
            yd[i] = y[i] = frand();
            td[i] = t[i] = frand();
        }
        float loss = nrt_mse(y, t, N, D, d);
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
    return 0;
}

int main(int argc, char **argv)
{
    nrt_rng_seed(&rng, 20240611);
    if (argc > 1 && !strcmp(argv[1], "--bench"))
        return bench();
    test_sgemm();
    test_sgemm_threads();
    test_im2col();
    test_maxpool();
    test_avgpool();
    test_losses();
    printf("test_kernels: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
