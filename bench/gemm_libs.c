/* bench/gemm_libs.c — the seed models' products (their linear layers'
 * forward, dW and dx) through netc's built-in nrt_sgemm and through the
 * field's libraries: each BLAS whose shared library is named on the command
 * line (cblas_sgemm, loaded with dlopen: OpenBLAS, BLIS) and, built with
 * -DHAVE_LIBXSMM, libxsmm's JIT kernels (Debian ships it static only).
 *
 * Reads lines "MODEL TRANSA TRANSB M N K" from stdin (bench/gemm_libs.sh
 * takes them from the generated C) and prints a markdown table: each
 * library's time per product (the best of REPS runs of enough calls to
 * take about 0.2 ms) and whether it gives the built-in path's bits, then
 * each model's sum over its products.
 *
 *   gemm_libs NAME=LIB.so ...   e.g. openblas=/usr/lib/.../libopenblas.so.0
 *
 * Row-major C = op(A) op(B), alpha 1, beta 0, as the generated code calls
 * nrt_gemm.  libxsmm is column-major: the same product is its
 * C^T = op(B)^T op(A)^T; its 1.17 JIT has no kernel for some transposes
 * (shown as "-"). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netrt.h>

#include "bench.h"

#ifdef HAVE_LIBXSMM
#include <libxsmm.h>
#endif

enum { MAX_LIBS = 4, MAX_SHAPES = 256, REPS = 15 };

typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);

struct shape {
    char model[64];
    int ta, tb, m, n, k;
};

struct lib {
    const char *name;
    cblas_sgemm_fn sgemm; /* NULL: libxsmm */
};

/* One product, its operands and, where built with it, its libxsmm kernel;
 * run() computes it by library l (NULL: the built-in path), 0 if l has no
 * kernel for it. */
typedef struct {
    const struct shape *s;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
#ifdef HAVE_LIBXSMM
    libxsmm_smmfunction xsmm;
#endif
} call;

static int run(const call *q, const struct lib *l)
{
    const struct shape *s = q->s;
    if (!l) {
        nrt_sgemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, q->a, q->lda, q->b, q->ldb, 0.0f, q->c,
                  q->ldc);
        return 1;
    }
    if (l->sgemm) {
        /* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112 */
        l->sgemm(101, s->ta ? 112 : 111, s->tb ? 112 : 111, s->m, s->n, s->k, 1.0f, q->a, q->lda,
                 q->b, q->ldb, 0.0f, q->c, q->ldc);
        return 1;
    }
#ifdef HAVE_LIBXSMM
    if (q->xsmm) {
        q->xsmm(q->b, q->a, q->c);
        return 1;
    }
#endif
    return 0;
}

/* Microseconds a call, the best of REPS; -1 if the library has no kernel. */
static double time_call(const call *q, const struct lib *l)
{
    if (!run(q, l))
        return -1.0;
    double t0 = bench_now();
    int calls = 0;
    while (bench_now() - t0 < 2e-4 || calls < 3) {
        run(q, l);
        calls++;
    }
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        t0 = bench_now();
        for (int i = 0; i < calls; i++)
            run(q, l);
        double t = (bench_now() - t0) / calls;
        if (t < best)
            best = t;
    }
    return best * 1e6;
}

int main(int argc, char **argv)
{
    struct lib libs[MAX_LIBS];
    int nlibs = 0;
    for (int i = 1; i < argc && nlibs < MAX_LIBS; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "gemm_libs: '%s': expected NAME=LIBRARY.so\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        void *h = dlopen(eq + 1, RTLD_NOW | RTLD_LOCAL);
        void *f = h ? dlsym(h, "cblas_sgemm") : NULL;
        if (!f) {
            fprintf(stderr, "gemm_libs: %s: %s\n", eq + 1, h ? "no cblas_sgemm" : dlerror());
            continue;
        }
        libs[nlibs].name = argv[i];
        memcpy(&libs[nlibs].sgemm, &f, sizeof f);
        nlibs++;
    }
#ifdef HAVE_LIBXSMM
    libxsmm_init();
    if (nlibs < MAX_LIBS)
        libs[nlibs++] = (struct lib){"libxsmm", NULL};
#endif

    static struct shape sh[MAX_SHAPES];
    int ns = 0;
    while (ns < MAX_SHAPES && scanf("%63s %d %d %d %d %d", sh[ns].model, &sh[ns].ta, &sh[ns].tb,
                                    &sh[ns].m, &sh[ns].n, &sh[ns].k) == 6)
        ns++;

    printf("| model | op(A) op(B) | m | n | k | built-in us |");
    for (int l = 0; l < nlibs; l++)
        printf(" %s us | %s bits |", libs[l].name, libs[l].name);
    printf("\n|---|---|---:|---:|---:|---:|");
    for (int l = 0; l < nlibs; l++)
        printf("---:|---|");
    printf("\n");

    double sum[MAX_LIBS + 1] = {0};
    int missing[MAX_LIBS] = {0};
    for (int i = 0; i < ns; i++) {
        const struct shape *s = &sh[i];
        call q = {.s = s, .lda = s->ta ? s->m : s->k, .ldb = s->tb ? s->k : s->n, .ldc = s->n};
        float *a = bench_values((size_t)s->m * s->k, 1);
        float *b = bench_values((size_t)s->k * s->n, 2);
        float *ref = bench_values((size_t)s->m * s->n, 3);
        float *c = bench_values((size_t)s->m * s->n, 4);
        q.a = a, q.b = b;
#ifdef HAVE_LIBXSMM
        {
            const int flags = (s->tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) |
                              (s->ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
            const float alpha = 1.0f, beta = 0.0f;
            const libxsmm_blasint lda = q.ldb, ldb = q.lda, ldc = q.ldc;
            q.xsmm = libxsmm_smmdispatch(s->n, s->m, s->k, &lda, &ldb, &ldc, &alpha, &beta,
                                         &flags, NULL);
        }
#endif
        q.c = ref;
        const double tb = time_call(&q, NULL);
        sum[0] += tb;
        printf("| %s | %s%s | %d | %d | %d | %.2f |", s->model, s->ta ? "T" : "N", s->tb ? "T" : "N",
               s->m, s->n, s->k, tb);
        q.c = c;
        for (int l = 0; l < nlibs; l++) {
            const double t = time_call(&q, &libs[l]);
            if (t < 0) {
                missing[l]++;
                sum[l + 1] += tb; /* counted at the built-in path's time */
                printf(" - | - |");
                continue;
            }
            sum[l + 1] += t;
            double worst = 0.0;
            for (size_t j = 0; j < (size_t)s->m * s->n; j++) {
                const double d = fabs((double)c[j] - ref[j]) / (fabs((double)ref[j]) + 1e-30);
                if (d > worst)
                    worst = d;
            }
            if (worst == 0.0)
                printf(" %.2f (%.2fx) | same |", t, tb / t);
            else
                printf(" %.2f (%.2fx) | %.1e |", t, tb / t, worst);
        }
        printf("\n");
        free(a), free(b), free(ref), free(c);
        /* a model's sum after its last product */
        if (i + 1 == ns || strcmp(sh[i + 1].model, s->model)) {
            printf("| **%s, a step** | | | | | **%.2f** |", s->model, sum[0]);
            for (int l = 0; l < nlibs; l++)
                printf(" **%.2f** (%.2fx)%s | |", sum[l + 1], sum[0] / sum[l + 1],
                       missing[l] ? " *" : "");
            printf("\n");
            memset(sum, 0, sizeof sum);
            memset(missing, 0, sizeof missing);
        }
    }
    printf("\n(x: the built-in path's time over the library's, > 1: the library is faster; bits: "
           "the largest relative difference from the built-in path's result, or the same bits; "
           "-: no kernel for the shape; *: a sum with such a product counted at the built-in "
           "path's time.)\n");
    return 0;
}
