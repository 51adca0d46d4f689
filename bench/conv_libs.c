/*
 * bench/conv_libs.c — the seed models' convolutions in netc's runtime
 * (nrt_conv2d_pad + fwd, dw, dx: the padded input's columns read by the
 * built-in GEMM, or direct tiles, or, for 5x5 and 3x3 layers of 16
 * channels or more on a cpu with AVX2, Winograd's form) against oneDNN, the library PyTorch's CPU convolutions are,
 * on the same shapes, in the same process, one thread unless OMP_NUM_THREADS
 * says otherwise.  Not built by make: bench/conv_libs.sh compiles it against
 * the build tree's runtime and Debian's libdnnl-dev, and runs it.
 *
 * oneDNN is measured with its own blocked layouts (format "any": what a
 * program that keeps every activation in oneDNN's layout would pay), the
 * same plus the reorders a pass would need to read and write netc's NCHW
 * (what a drop-in call would pay), and with plain NCHW in and out (oneDNN
 * choosing its kernels for that layout).  Each figure is the best of
 * repeated runs over about a quarter of a second.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "netrt.h"

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define DNNL_CHECK(call)                                                                    \
    do {                                                                                    \
        dnnl_status_t st_ = (call);                                                         \
        if (st_ != dnnl_success) {                                                          \
            fprintf(stderr, "conv_libs: %s: oneDNN status %d\n", #call, (int)st_);         \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

struct shape {
    const char *what;
    int n, c, o, h, k, p;
};

/* One pass, timed: the best of runs over about 0.25 s, in ms. */
typedef void (*pass_fn)(void *ctx);

static double best_ms(pass_fn f, void *ctx)
{
    double best = 1e30, start = bench_now();
    f(ctx); /* warm up */
    for (int reps = 0; reps < 5 || bench_now() - start < 0.25; reps++) {
        double t0 = bench_now();
        f(ctx);
        double dt = bench_now() - t0;
        if (dt < best)
            best = dt;
    }
    return best * 1e3;
}

/* ------------------------------------------------------------------ netc */

struct nrt_ctx {
    nrt_conv g;
    int n;
    float *x, *xp, *w, *y, *dy, *dw, *dx, *scratch;
};

static void nrt_fwd(void *c)
{
    struct nrt_ctx *t = c;
    nrt_conv2d_pad(&t->g, t->n, 0, t->x, t->xp);
    nrt_conv2d_fwd(&t->g, t->n, t->w, NULL, t->xp, t->y);
}

static void nrt_dw(void *c)
{
    struct nrt_ctx *t = c;
    nrt_conv2d_dw(&t->g, t->n, t->dy, t->xp, t->dw);
}

static void nrt_dx(void *c)
{
    struct nrt_ctx *t = c;
    nrt_conv2d_dx(&t->g, t->n, 0, t->w, t->dy, t->scratch, t->dx);
}

/* ---------------------------------------------------------------- oneDNN */

struct dnnl_ctx {
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[6];
};

static void dnnl_run(void *c)
{
    struct dnnl_ctx *t = c;
    DNNL_CHECK(dnnl_primitive_execute(t->prim, t->stream, t->nargs, t->args));
    DNNL_CHECK(dnnl_stream_wait(t->stream));
}

/* Memory for what pd wants as `what` (its index-th: the bias is the
 * weights' second), filled with values. */
static dnnl_memory_t dnnl_mem(dnnl_engine_t eng, const_dnnl_primitive_desc_t pd,
                              dnnl_query_t what, int index, unsigned seed)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, index);
    dnnl_memory_t m;
    DNNL_CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    void *h;
    DNNL_CHECK(dnnl_memory_get_data_handle(m, &h));
    const size_t bytes = dnnl_memory_desc_get_size(md);
    float *v = bench_values(bytes / sizeof(float), seed);
    memcpy(h, v, bytes);
    free(v);
    return m;
}

/* The time of a reorder from a to b (one of them oneDNN's blocked layout,
 * the other NCHW), ms. */
static double reorder_ms(dnnl_engine_t eng, dnnl_stream_t stream, const dnnl_memory_desc_t *a,
                         const dnnl_memory_desc_t *b)
{
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, a, eng, b, eng, NULL));
    dnnl_memory_t ma, mb;
    DNNL_CHECK(dnnl_memory_create(&ma, a, eng, DNNL_MEMORY_ALLOCATE));
    DNNL_CHECK(dnnl_memory_create(&mb, b, eng, DNNL_MEMORY_ALLOCATE));
    void *h;
    DNNL_CHECK(dnnl_memory_get_data_handle(ma, &h));
    memset(h, 0, dnnl_memory_desc_get_size(a));
    struct dnnl_ctx c = {.stream = stream, .nargs = 2};
    DNNL_CHECK(dnnl_primitive_create(&c.prim, pd));
    c.args[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, ma};
    c.args[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, mb};
    const double ms = best_ms(dnnl_run, &c);
    dnnl_primitive_destroy(c.prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    return ms;
}

/* oneDNN's forward, backward-weights and backward-data times for s, with
 * the activations' and weights' layout `tag` (dnnl_format_tag_any: its
 * choice); with reo, the reorders each pass would add to read and write
 * NCHW (forward: x in, y out; dW: dy in; dx: dx out — backward reusing
 * forward's x and dW's dy). */
static void dnnl_times(dnnl_engine_t eng, dnnl_stream_t stream, const struct shape *s,
                       dnnl_format_tag_t tag, double ms[3], double reo[3])
{
    const int oh = s->h + 2 * s->p - s->k + 1;
    dnnl_dims_t src = {s->n, s->c, s->h, s->h}, wei = {s->o, s->c, s->k, s->k};
    dnnl_dims_t bia = {s->o}, dst = {s->n, s->o, oh, oh};
    dnnl_dims_t strides = {1, 1}, pad = {s->p, s->p};
    dnnl_memory_desc_t src_md, wei_md, bia_md, dst_md;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&src_md, 4, src, dnnl_f32, tag));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&wei_md, 4, wei, dnnl_f32,
                                            tag == dnnl_format_tag_any ? tag : dnnl_oihw));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&bia_md, 1, bia, dnnl_f32, dnnl_x));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst, dnnl_f32, tag));

    dnnl_convolution_desc_t fd, bd, wd;
    DNNL_CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                  dnnl_convolution_direct, &src_md, &wei_md,
                                                  &bia_md, &dst_md, strides, pad, pad));
    dnnl_primitive_desc_t fpd, bpd, wpd;
    DNNL_CHECK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src_md,
                                                        &wei_md, &dst_md, strides, pad, pad));
    DNNL_CHECK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct,
                                                           &src_md, &wei_md, &bia_md, &dst_md,
                                                           strides, pad, pad));
    DNNL_CHECK(dnnl_primitive_desc_create(&wpd, &wd, NULL, eng, fpd));

    dnnl_memory_t x = dnnl_mem(eng, fpd, dnnl_query_src_md, 0, 1);
    dnnl_memory_t w = dnnl_mem(eng, fpd, dnnl_query_weights_md, 0, 2);
    dnnl_memory_t b = dnnl_mem(eng, fpd, dnnl_query_weights_md, 1, 3);
    dnnl_memory_t y = dnnl_mem(eng, fpd, dnnl_query_dst_md, 0, 4);
    dnnl_memory_t dy = dnnl_mem(eng, bpd, dnnl_query_diff_dst_md, 0, 5);
    dnnl_memory_t dx = dnnl_mem(eng, bpd, dnnl_query_diff_src_md, 0, 6);
    dnnl_memory_t dw = dnnl_mem(eng, wpd, dnnl_query_diff_weights_md, 0, 7);
    dnnl_memory_t db = dnnl_mem(eng, wpd, dnnl_query_diff_weights_md, 1, 8);

    if (reo) {
        dnnl_memory_desc_t x_nchw, y_nchw;
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&x_nchw, 4, src, dnnl_f32, dnnl_nchw));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&y_nchw, 4, dst, dnnl_f32, dnnl_nchw));
        const dnnl_memory_desc_t *xb = dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0);
        const dnnl_memory_desc_t *yb = dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0);
        const dnnl_memory_desc_t *dyb = dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_dst_md, 0);
        const dnnl_memory_desc_t *dxb = dnnl_primitive_desc_query_md(bpd, dnnl_query_diff_src_md, 0);
        reo[0] = reorder_ms(eng, stream, &x_nchw, xb) + reorder_ms(eng, stream, yb, &y_nchw);
        reo[1] = reorder_ms(eng, stream, &y_nchw, dyb);
        reo[2] = reorder_ms(eng, stream, dxb, &x_nchw);
    }

    struct dnnl_ctx c = {.stream = stream};
    DNNL_CHECK(dnnl_primitive_create(&c.prim, fpd));
    c.nargs = 4;
    c.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, x};
    c.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, w};
    c.args[2] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, b};
    c.args[3] = (dnnl_exec_arg_t){DNNL_ARG_DST, y};
    ms[0] = best_ms(dnnl_run, &c);
    dnnl_primitive_destroy(c.prim);

    DNNL_CHECK(dnnl_primitive_create(&c.prim, wpd));
    c.nargs = 4;
    c.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, x};
    c.args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, dy};
    c.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, dw};
    c.args[3] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, db};
    ms[1] = best_ms(dnnl_run, &c);
    dnnl_primitive_destroy(c.prim);

    DNNL_CHECK(dnnl_primitive_create(&c.prim, bpd));
    c.nargs = 3;
    c.args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, dy};
    c.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, w};
    c.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, dx};
    ms[2] = best_ms(dnnl_run, &c);
    dnnl_primitive_destroy(c.prim);

    dnnl_memory_t all[] = {x, w, b, y, dy, dx, dw, db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dnnl_memory_destroy(all[i]);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    dnnl_primitive_desc_destroy(wpd);
}

static void nrt_times(const struct shape *s, double ms[3])
{
    const int oh = s->h + 2 * s->p - s->k + 1;
    struct nrt_ctx t = {.g = {s->c, s->h, s->h, s->o, oh, oh, s->k, s->k, 1, 1, s->p, s->p,
                              NRT_DOT_F32},
                        .n = s->n};
    const size_t hp = (size_t)s->h + 2 * s->p;
    const size_t xs = (size_t)s->n * s->c * s->h * s->h, ys = (size_t)s->n * s->o * oh * oh;
    const size_t ws = (size_t)s->o * s->c * s->k * s->k;
    t.x = bench_values(xs, 1), t.w = bench_values(ws, 2), t.dy = bench_values(ys, 5);
    t.xp = bench_values((size_t)s->n * s->c * hp * hp, 0), t.y = bench_values(ys, 4);
    t.dw = bench_values(ws, 7), t.dx = bench_values(xs, 6);
    t.scratch = bench_values((size_t)s->n * nrt_conv2d_dx_scratch(&t.g), 0);
    ms[0] = best_ms(nrt_fwd, &t);
    ms[1] = best_ms(nrt_dw, &t);
    ms[2] = s->p < s->k ? best_ms(nrt_dx, &t) : 0.0;
    free(t.x), free(t.w), free(t.dy), free(t.xp), free(t.y), free(t.dw), free(t.dx);
    free(t.scratch);
}

int main(void)
{
    static const struct shape shapes[] = {
        {"cifar10 conv1", 64, 3, 32, 32, 5, 2},  {"cifar10 conv2", 64, 32, 32, 16, 5, 2},
        {"cifar10 conv3", 64, 32, 64, 8, 5, 2},  {"cnn101 conv1", 32, 3, 32, 32, 3, 0},
        {"cnn101 conv2", 32, 32, 64, 15, 3, 0},  {"digits_cnn conv1", 32, 1, 16, 8, 3, 1},
        {"digits_cnn conv2", 32, 16, 32, 4, 3, 1},
    };
    /* netc's column: its own kernels, even where the runtime would hand a
     * pass to oneDNN (runtime/conv_dnnl.c); Winograd's form on every cpu
     * with AVX2 (AVX-512's too, where auto would not take it yet) */
    setenv("NETRT_CPU_CONV", "builtin", 1);
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    DNNL_CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (cpu runtime %s); netc's products on %s\n\n", v->major, v->minor,
           v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", nrt_gemm_isa());
    printf("| shape | pass | netc ms | oneDNN blocked ms | + reorders ms | oneDNN NCHW ms | "
           "blocked / netc | + reorders / netc |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    static const char *pass[3] = {"fwd", "dW", "dx"};
    double tot[4] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const struct shape *s = &shapes[i];
        double a[3], b[3], r[3], c[3];
        nrt_times(s, a);
        dnnl_times(eng, stream, s, dnnl_format_tag_any, b, r);
        dnnl_times(eng, stream, s, dnnl_nchw, c, NULL);
        for (int q = 0; q < 3; q++) {
            if (q == 2 && s->c <= 3) /* a first layer's dx is never computed */
                continue;
            printf("| %s (n %d, %d->%d, %dx%d, k%d p%d) | %s | %.3f | %.3f | %.3f | %.3f | %.2f "
                   "| %.2f |\n",
                   s->what, s->n, s->c, s->o, s->h, s->h, s->k, s->p, pass[q], a[q], b[q],
                   b[q] + r[q], c[q], b[q] / a[q], (b[q] + r[q]) / a[q]);
            tot[0] += a[q], tot[1] += b[q], tot[2] += b[q] + r[q], tot[3] += c[q];
        }
    }
    printf("| all | | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", tot[0], tot[1], tot[2],
           tot[3], tot[1] / tot[0], tot[2] / tot[0]);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
