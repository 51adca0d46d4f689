/*
 * conv_dnnl.c — convolution passes on oneDNN, where configure found it
 * (NETRT_HAVE_ONEDNN; Debian's libdnnl-dev): the library PyTorch's cpu
 * convolutions are.  Its direct convolutions, in its own blocked layouts
 * (16 channels innermost), took 0.55x the time of the built-in
 * columns-and-GEMM path on the seed models' shapes, 0.62x with the reorders
 * from and to netc's layouts (bench/conv_libs.sh); so each pass here
 * reorders its operands into the layouts oneDNN picks, runs, and reorders
 * its result back, and netc's layouts stay what they are everywhere else.
 * A pass reads what the built-in one reads: the forward pass the interior
 * of the padded, channel-first input xp (copied into oneDNN's 16-channel
 * blocks here: its own reorder from that strided view was several times
 * slower than from a dense layout), dx the output gradient, channel first;
 * the weights [O, C, KH, KW].
 *
 * Which passes (nrt_dnnl_wanted): fp32 products (NRT_DOT_F32) of at least
 * NRT_DNNL_MIN_WORK multiply-adds a sample (digits_cnn's conv2 has 74 k, 2.4 M
 * a batch of 32: its dx
 * took 0.065 ms against the built-in path's 0.13, the primitives coming
 * from oneDNN's cache and the wrapper costing under 40 us), with 16
 * input channels or more (below, its first-layer kernels lost to the
 * built-in path): the forward pass, dx and dW.  oneDNN's forward pass and
 * dx give the same bits for any number of threads (each value is summed by
 * one thread) and any batch size; its dW splits the batch's sum among its
 * threads by their number, so dW is summed here in pieces of the batch cut
 * by its size alone, each on one thread (nrt_dnnl_dw): the same bits for
 * any number of threads, as the built-in path gives.  Measured on an Intel
 * Xeon (AVX-512), steps against the built-in path's: cifar10 47 -> 39 ms
 * on one thread, 35 -> 24 ms on two; cnn101 13.7 -> 11.8 and 9.7 -> 8.6;
 * digits_cnn 0.50 -> 0.37 ms.  Otherwise, or if oneDNN fails, or with
 * NETRT_CPU_CONV=builtin in the environment, the caller runs the built-in
 * path.  oneDNN's threads are OpenMP's, the runtime's.
 *
 * oneDNN is not linked: a pass loads it with dlopen (RTLD_NODELETE: the
 * first pass maps it, the others find it mapped, with its cache of
 * primitives), so a program starts, and runs on the built-in path, where
 * libdnnl is not installed.  Only its header is needed to build.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "conv_dnnl.h"

#ifdef NETRT_HAVE_ONEDNN

#include <dlfcn.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define NRT_OMP(x) _Pragma(#x)
#else
#define NRT_OMP(x)
#endif

/* A convolution of less work (multiply-adds) a sample stays built in: by
 * the sample, not the batch, so that a model predicts the same bits
 * whatever batches it is given.  A pass of less work than the second runs
 * on one thread (waking the passive team costs what such a pass takes:
 * kernels.c's PAR_MIN_GEMM; digits_cnn's steps took twice as long on two
 * threads). */
#define NRT_DNNL_MIN_WORK 65536.0
#define NRT_DNNL_PAR_WORK 8388608.0

static double work_of(const nrt_conv *g, int n)
{
    return (double)n * g->o * g->oh * g->ow * g->c * g->kh * g->kw;
}

int nrt_dnnl_wanted(const nrt_conv *g)
{
    if (g->dot != NRT_DOT_F32 && g->dot != NRT_DOT_AVX2)
        return 0;
    const char *e = getenv("NETRT_CPU_CONV");
    if (e && !strcmp(e, "builtin"))
        return 0;
    return g->c % 16 == 0 && work_of(g, 1) >= NRT_DNNL_MIN_WORK;
}

/* The oneDNN functions a pass calls, loaded from the library by name. */
#define DNNL_FUNCS(X)                                                                       \
    X(engine_create) X(engine_destroy) X(stream_create) X(stream_destroy) X(stream_wait)   \
    X(memory_desc_init_by_strides) X(memory_desc_init_by_tag) X(memory_desc_equal)          \
    X(memory_desc_get_size) X(memory_create) X(memory_destroy) X(memory_get_memory_desc)    \
    X(primitive_desc_create) X(primitive_desc_destroy) X(primitive_desc_query_md)           \
    X(primitive_create) X(primitive_destroy) X(primitive_execute)                           \
    X(reorder_primitive_desc_create) X(convolution_forward_desc_init)                       \
    X(convolution_backward_data_desc_init) X(convolution_backward_weights_desc_init)          \
    X(set_max_cpu_isa)

struct api {
#define X(f) __typeof__(dnnl_##f) *f;
    DNNL_FUNCS(X)
#undef X
};

/* Fills a from the library (mapped by the first call, found by the
 * others); -1 if it cannot be loaded. */
static int load(struct api *a)
{
    char name[32];
    snprintf(name, sizeof name, "libdnnl.so.%d", DNNL_VERSION_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib)
        return -1;
    int ok = 1;
    /* POSIX: dlsym's void * converts to a function pointer (memcpy, as ISO
     * C has no such conversion) */
#define X(f)                                                                                \
    {                                                                                       \
        void *p = dlsym(lib, "dnnl_" #f);                                                   \
        ok &= p != NULL;                                                                    \
        memcpy(&a->f, &p, sizeof p);                                                        \
    }
    DNNL_FUNCS(X)
#undef X
    dlclose(lib); /* a reference dropped; NODELETE keeps it mapped */
    return ok ? 0 : -1;
}

/* A pass in flight: the library, the engine, the stream, what to free,
 * and the caller's thread count where the pass runs on one (else 0). */
struct run {
    struct api d;
    int threads;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int nmem, nprim, npd, nbuf;
    void *buf[8]; /* oneDNN's layouts' buffers, ours: malloc's reuses freed pages */
    dnnl_memory_t mem[16];
    dnnl_primitive_t prim[8];
    dnnl_primitive_desc_t pd[8];
};

#define OK(call) ((call) == dnnl_success)

static dnnl_memory_t keep_mem(struct run *r, dnnl_memory_t m)
{
    return r->mem[r->nmem++] = m;
}

static dnnl_primitive_desc_t keep_pd(struct run *r, dnnl_primitive_desc_t pd)
{
    return r->pd[r->npd++] = pd;
}

/* Runs the reorder from memory a to memory b. */
static int reorder(struct run *r, dnnl_memory_t a, dnnl_memory_t b)
{
    const dnnl_memory_desc_t *am, *bm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    if (!OK(r->d.memory_get_memory_desc(a, &am)) || !OK(r->d.memory_get_memory_desc(b, &bm)) ||
        !OK(r->d.reorder_primitive_desc_create(&pd, am, r->eng, bm, r->eng, NULL)))
        return -1;
    keep_pd(r, pd);
    if (!OK(r->d.primitive_create(&p, pd)))
        return -1;
    r->prim[r->nprim++] = p;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
    return OK(r->d.primitive_execute(p, r->stream, 2, args)) ? 0 : -1;
}

/* The memory a primitive (pd) wants for `what` (index i of it): the user's
 * buffer at ptr, seen as user, if that is what it wants; else a buffer of
 * its own, into which, for an input (in), the user's is reordered. */
static dnnl_memory_t operand(struct run *r, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                             const dnnl_memory_desc_t *user, void *ptr, int in,
                             dnnl_memory_t *user_mem)
{
    const dnnl_memory_desc_t *want = r->d.primitive_desc_query_md(pd, what, 0);
    dnnl_memory_t u, m;
    if (!want || !OK(r->d.memory_create(&u, user, r->eng, ptr)))
        return NULL;
    keep_mem(r, u);
    *user_mem = u;
    if (r->d.memory_desc_equal(want, user))
        return u;
    const size_t bytes = r->d.memory_desc_get_size(want);
    void *b = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!b)
        return NULL;
    r->buf[r->nbuf++] = b;
    if (!OK(r->d.memory_create(&m, want, r->eng, b)))
        return NULL;
    keep_mem(r, m);
    if (in && reorder(r, u, m) != 0)
        return NULL;
    return m;
}

static void finish(struct run *r)
{
#ifdef _OPENMP
    if (r->threads)
        omp_set_num_threads(r->threads);
#endif
    if (!r->d.engine_destroy) /* not loaded: nothing made */
        return;
    for (int i = 0; i < r->nprim; i++)
        r->d.primitive_destroy(r->prim[i]);
    for (int i = 0; i < r->npd; i++)
        r->d.primitive_desc_destroy(r->pd[i]);
    for (int i = 0; i < r->nmem; i++)
        r->d.memory_destroy(r->mem[i]);
    for (int i = 0; i < r->nbuf; i++)
        free(r->buf[i]);
    if (r->stream)
        r->d.stream_destroy(r->stream);
    if (r->eng)
        r->d.engine_destroy(r->eng);
}

/* The descriptions of a pass's tensors: the user's (x: xp's interior, or
 * dx; y: the channel-first output or its gradient; w) and oneDNN's choice
 * (any) of each, and the convolution's geometry. */
struct geom {
    dnnl_memory_desc_t x, y, w, xa, ya, wa;
    dnnl_dims_t strides, pad_l, pad_r;
};

/* x_cn: the user's x is channel first ([C, N, H, W]); xp: it is the
 * interior of xp, the input padded by PH, PW (channel first). */
static int describe(struct run *r, const nrt_conv *g, int n, int x_cn, int xp, struct geom *d)
{
    const dnnl_dim_t c = g->c, o = g->o, oh = g->oh, ow = g->ow, h = g->h, w = g->w;
    const dnnl_dim_t hp = xp ? h + 2 * g->ph : h, wp = xp ? w + 2 * g->pw : w;
    dnnl_dims_t xd = {n, c, h, w}, yd = {n, o, oh, ow}, wd = {o, c, g->kh, g->kw};
    dnnl_dims_t xs, ys = {oh * ow, n * oh * ow, ow, 1};
    if (x_cn || xp)
        xs[0] = hp * wp, xs[1] = n * hp * wp;
    else
        xs[0] = c * hp * wp, xs[1] = hp * wp;
    xs[2] = wp, xs[3] = 1;
    if (!OK(r->d.memory_desc_init_by_strides(&d->x, 4, xd, dnnl_f32, xs)) ||
        !OK(r->d.memory_desc_init_by_strides(&d->y, 4, yd, dnnl_f32, ys)) ||
        !OK(r->d.memory_desc_init_by_tag(&d->w, 4, wd, dnnl_f32, dnnl_oihw)) ||
        !OK(r->d.memory_desc_init_by_tag(&d->xa, 4, xd, dnnl_f32, dnnl_format_tag_any)) ||
        !OK(r->d.memory_desc_init_by_tag(&d->ya, 4, yd, dnnl_f32, dnnl_format_tag_any)) ||
        !OK(r->d.memory_desc_init_by_tag(&d->wa, 4, wd, dnnl_f32, dnnl_format_tag_any)))
        return -1;
    if (xp)
        d->x.offset0 = g->ph * wp + g->pw;
    d->strides[0] = g->sh, d->strides[1] = g->sw;
    d->pad_l[0] = g->ph, d->pad_l[1] = g->pw;
    d->pad_r[0] = (oh - 1) * g->sh + g->kh - h - g->ph;
    d->pad_r[1] = (ow - 1) * g->sw + g->kw - w - g->pw;
    return d->pad_r[0] >= 0 && d->pad_r[1] >= 0 ? 0 : -1;
}

/* The forward pass's primitive description: what the backward passes
 * take as their hint. */
static dnnl_primitive_desc_t fwd_pd(struct run *r, struct geom *d)
{
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    if (!OK(r->d.convolution_forward_desc_init(&cd, dnnl_forward_training,
                                               dnnl_convolution_direct, &d->xa, &d->wa, NULL,
                                               &d->ya, d->strides, d->pad_l, d->pad_r)) ||
        !OK(r->d.primitive_desc_create(&pd, &cd, NULL, r->eng, NULL)))
        return NULL;
    return keep_pd(r, pd);
}

/* A backward pass's primitive description, dW's (weights) or dx's, with
 * the forward pass's as its hint. */
static dnnl_primitive_desc_t backward_pd(struct run *r, struct geom *d, int weights)
{
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd, hint = fwd_pd(r, d);
    const dnnl_alg_kind_t alg = dnnl_convolution_direct;
    if (!hint ||
        !OK(weights ? r->d.convolution_backward_weights_desc_init(&cd, alg, &d->xa, &d->wa, NULL,
                                                                   &d->ya, d->strides, d->pad_l,
                                                                   d->pad_r)
                    : r->d.convolution_backward_data_desc_init(&cd, alg, &d->xa, &d->wa, &d->ya,
                                                                d->strides, d->pad_l, d->pad_r)) ||
        !OK(r->d.primitive_desc_create(&pd, &cd, NULL, r->eng, hint)))
        return NULL;
    return keep_pd(r, pd);
}

/* Loads oneDNN and makes the engine and the stream for a pass of `work`
 * multiply-adds (finish undoes it all, whatever start returned).  An
 * NRT_DOT_AVX2 pass (NETRT_CPU_ISA=avx2) first caps oneDNN's kernels at
 * AVX2, as on a cpu without AVX-512: oneDNN takes that only before its
 * first primitive, and a program's passes all have the same dot. */
static int start(struct run *r, const nrt_conv *g, double work)
{
    *r = (struct run){0};
#ifdef _OPENMP
    if (work < NRT_DNNL_PAR_WORK && omp_get_max_threads() > 1) {
        r->threads = omp_get_max_threads();
        omp_set_num_threads(1);
    }
#else
    (void)work;
#endif
    if (load(&r->d) != 0) {
        r->d.engine_destroy = NULL;
        return -1;
    }
    if (g->dot == NRT_DOT_AVX2)
        (void)r->d.set_max_cpu_isa(dnnl_cpu_isa_avx2); /* refused once set: the same cap */
    if (!OK(r->d.engine_create(&r->eng, dnnl_cpu, 0)))
        return -1;
    return OK(r->d.stream_create(&r->stream, r->eng, dnnl_stream_default_flags)) ? 0 : -1;
}

/* Executes p with its arguments, then reorders its result back into the
 * user's buffer (out: oneDNN's; user: the user's; the same: nothing). */
static int execute(struct run *r, const_dnnl_primitive_desc_t pd, int nargs,
                   const dnnl_exec_arg_t *args, dnnl_memory_t out, dnnl_memory_t user)
{
    dnnl_primitive_t p;
    if (!OK(r->d.primitive_create(&p, pd)))
        return -1;
    r->prim[r->nprim++] = p;
    if (!OK(r->d.primitive_execute(p, r->stream, nargs, args)))
        return -1;
    if (out != user && reorder(r, out, user) != 0)
        return -1;
    return OK(r->d.stream_wait(r->stream)) ? 0 : -1;
}

/* oneDNN's reorder from xp's interior (a strided view) is several times
 * slower than from a dense layout (1.4 ms of cifar10's conv2, batch 64);
 * where a pass wants its input in blocks of 16 channels ([N, C/16, H, W,
 * 16], as on AVX-512) or of 8 (on AVX2), the blocks are copied here, one
 * row of a block at a time (nrt_interleave: 3.4 % of cifar10's one-thread
 * step as a gather, 2.1 % transposed in registers, Zen 5): samples
 * [i0, i0 + m) of t, channel first ([C, N, H + 2 PH, W + 2 PW], its
 * interior), as pd's `what`; else NULL. */
struct tensor {
    const float *p;
    int c, n, h, w, ph, pw;
};

/* Whether want is t's m samples in blocks of nb channels (bd, then). */
static int in_blocks(struct run *r, const dnnl_memory_desc_t *want, const struct tensor *t, int m,
                     int nb, dnnl_memory_desc_t *bd)
{
    dnnl_dims_t dims = {m, t->c, t->h, t->w};
    return want && t->c % nb == 0 &&
           OK(r->d.memory_desc_init_by_tag(bd, 4, dims, dnnl_f32,
                                           nb == 16 ? dnnl_aBcd16b : dnnl_aBcd8b)) &&
           r->d.memory_desc_equal(want, bd);
}

static dnnl_memory_t blocked(struct run *r, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                             const struct tensor *t, int i0, int m)
{
    const dnnl_memory_desc_t *want = r->d.primitive_desc_query_md(pd, what, 0);
    dnnl_memory_desc_t bd;
    const int nb = in_blocks(r, want, t, m, 16, &bd) ? 16 : in_blocks(r, want, t, m, 8, &bd) ? 8 : 0;
    if (!nb)
        return NULL;
    const size_t h = (size_t)t->h, w = (size_t)t->w, wp = w + 2 * (size_t)t->pw;
    const size_t plane = (h + 2 * (size_t)t->ph) * wp, cs = (size_t)t->n * plane;
    const long blocks = t->c / nb, rows = (long)m * blocks * t->h;
    float *dst = aligned_alloc(64, (size_t)rows * w * nb * sizeof *dst);
    dnnl_memory_t mem;
    if (!dst)
        return NULL;
    r->buf[r->nbuf++] = dst;
    /* on the team from 2^19 values: cifar10's conv2 input, batch 64 (its
     * step on two threads 16.0 -> 13.5 ms, AMD Zen 5); cnn101's smaller
     * copies ran 4 % slower on it (2^17) */
    NRT_OMP(omp parallel for schedule(static) if (rows * w * nb >= 524288))
    for (long q = 0; q < rows; q++) { /* q = (sample i, block b, row y) */
        const long y = q % t->h, b = q / t->h % blocks, i = i0 + q / t->h / blocks;
        const float *src = t->p + (size_t)b * nb * cs + (size_t)i * plane +
                           ((size_t)y + (size_t)t->ph) * wp + (size_t)t->pw;
        nrt_interleave(src, cs, w, nb, dst + (size_t)q * w * nb);
    }
    if (!OK(r->d.memory_create(&mem, &bd, r->eng, dst)))
        return NULL;
    return keep_mem(r, mem);
}

/* xp as a tensor: g's input, padded */
static struct tensor input_of(const nrt_conv *g, int n, const float *xp)
{
    return (struct tensor){xp, g->c, n, g->h, g->w, g->ph, g->pw};
}

int nrt_dnnl_fwd(const nrt_conv *g, int n, const float *w, const float *xp, float *y)
{
    struct run r;
    struct geom d;
    int rc = -1;
    dnnl_memory_t ux, uw, uy;
    if (start(&r, g, work_of(g, n)) == 0 && describe(&r, g, n, 1, 1, &d) == 0) {
        dnnl_primitive_desc_t pd = fwd_pd(&r, &d);
        const struct tensor xt = input_of(g, n, xp);
        dnnl_memory_t x = pd ? blocked(&r, pd, dnnl_query_src_md, &xt, 0, n) : NULL;
        if (pd && !x)
            x = operand(&r, pd, dnnl_query_src_md, &d.x, (void *)xp, 1, &ux);
        dnnl_memory_t k = x ? operand(&r, pd, dnnl_query_weights_md, &d.w, (void *)w, 1, &uw) : NULL;
        dnnl_memory_t o = k ? operand(&r, pd, dnnl_query_dst_md, &d.y, y, 0, &uy) : NULL;
        if (o) {
            dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DST, o}};
            rc = execute(&r, pd, 3, args, o, uy);
        }
    }
    finish(&r);
    return rc;
}

/* dW of samples [i0, i0 + m) into part, on one thread (both operands in
 * blocks of channels, or -1). */
static int dw_chunk(const nrt_conv *g, int n, int i0, int m, const float *dy, const float *xp,
                    float *part)
{
    struct run r;
    struct geom d;
    int rc = -1;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t udw;
    const struct tensor xt = input_of(g, n, xp), yt = {dy, g->o, n, g->oh, g->ow, 0, 0};
    if (start(&r, g, 0.0) == 0 && describe(&r, g, m, 1, 1, &d) == 0) {
        if ((pd = backward_pd(&r, &d, 1))) {
            dnnl_memory_t x = blocked(&r, pd, dnnl_query_src_md, &xt, i0, m);
            dnnl_memory_t e = x ? blocked(&r, pd, dnnl_query_diff_dst_md, &yt, i0, m) : NULL;
            dnnl_memory_t o = e ? operand(&r, pd, dnnl_query_diff_weights_md, &d.w, part, 0, &udw) : NULL;
            if (o) {
                dnnl_exec_arg_t args[3] = {
                    {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, e}, {DNNL_ARG_DIFF_WEIGHTS, o}};
                rc = execute(&r, pd, 3, args, o, udw);
            }
        }
    }
    finish(&r);
    return rc;
}

/* oneDNN sums dW over the batch split among its threads by their number;
 * here the batch is cut by its size alone, into pieces of DW_PIECE
 * samples, each summed by oneDNN on one thread (the pieces side by side on
 * the team), and the pieces' dW added in order: the same bits for any
 * number of threads. */
enum { DW_PIECE = 16 };

int nrt_dnnl_dw(const nrt_conv *g, int n, const float *dy, const float *xp, float *dw)
{
    if (g->o % 8) /* dy in blocks of channels too */
        return -1;
    const int pieces = (n + DW_PIECE - 1) / DW_PIECE;
    const size_t nw = (size_t)g->o * g->c * g->kh * g->kw;
    float *part = malloc((size_t)pieces * nw * sizeof *part);
    if (!part)
        return -1;
    int failed = 0;
    NRT_OMP(omp parallel for schedule(static) reduction(| : failed)
                if (pieces > 1 && work_of(g, n) >= NRT_DNNL_PAR_WORK))
    for (int k = 0; k < pieces; k++) {
        const int i0 = k * DW_PIECE, m = n - i0 < DW_PIECE ? n - i0 : DW_PIECE;
        failed |= dw_chunk(g, n, i0, m, dy, xp, part + (size_t)k * nw) != 0;
    }
    if (!failed)
        for (size_t j = 0; j < nw; j++) {
            float sum = part[j];
            for (int k = 1; k < pieces; k++)
                sum += part[(size_t)k * nw + j];
            dw[j] = sum;
        }
    free(part);
    return failed ? -1 : 0;
}

int nrt_dnnl_dx(const nrt_conv *g, int n, int cn, const float *w, const float *dy, float *dx)
{
    struct run r;
    struct geom d;
    int rc = -1;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t uw, udy, udx;
    if (start(&r, g, work_of(g, n)) == 0 && describe(&r, g, n, cn, 0, &d) == 0) {
        if ((pd = backward_pd(&r, &d, 0))) {
            dnnl_memory_t e = operand(&r, pd, dnnl_query_diff_dst_md, &d.y, (void *)dy, 1, &udy);
            dnnl_memory_t k = e ? operand(&r, pd, dnnl_query_weights_md, &d.w, (void *)w, 1, &uw) : NULL;
            dnnl_memory_t o = k ? operand(&r, pd, dnnl_query_diff_src_md, &d.x, dx, 0, &udx) : NULL;
            if (o) {
                dnnl_exec_arg_t args[3] = {
                    {DNNL_ARG_DIFF_DST, e}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DIFF_SRC, o}};
                rc = execute(&r, pd, 3, args, o, udx);
            }
        }
    }
    finish(&r);
    return rc;
}

#endif /* NETRT_HAVE_ONEDNN */
