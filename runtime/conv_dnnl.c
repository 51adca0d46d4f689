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
 * slower than from a dense layout) and the bias, dx the output gradient,
 * channel first; the weights [O, C, KH, KW].  (Copying dx's input and
 * the outputs through the same register transposes instead of oneDNN's
 * reorders, from and to dense layouts, measured the same, Zen 5.)
 *
 * Which passes (nrt_dnnl_wanted): fp32 products (NRT_DOT_F32), and bf16's
 * on AMX (NRT_DOT_AMX: oneDNN's bf16 convolutions on AMX's tiles, operands
 * in bf16, sums in fp32, as the built-in AMX products; its dW lost to
 * kernels.c's conv_dw_amx, which runs first), of at least
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
 * NETRT_CPU_CONV=builtin or direct in the environment, the caller runs the
 * built-in path (kernels.c, whose Winograd form comes before oneDNN where
 * it applies).  oneDNN's threads are OpenMP's, the runtime's.
 *
 * A pass is made once, at its first call (oneDNN's descriptions, its
 * primitives, the buffers in its layouts, the steps in order: struct
 * plan), kept in the net's nrt_dnnl (nrt_conv.dnnl), and run at the next
 * calls of the same shape on the caller's pointers.  Made at every call,
 * as it was, oneDNN's descriptions alone (its primitive cache spares only
 * the JIT) took 5 % of the samples of cifar10's main thread, most of it
 * in 96 k memsets of 8 bytes a step; kept, cifar10's step 12.9 -> 12.65 ms
 * on two threads with the inline padding (kernels.c), Zen 5.
 *
 * oneDNN is not linked: a net's first pass loads it with dlopen
 * (RTLD_NODELETE: it stays mapped), so a program starts, and runs on the
 * built-in path, where libdnnl is not installed.  Only its header is
 * needed to build.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "conv_dnnl.h"

#include <stdlib.h>

/* A net's workspace for the built-in passes that keep nothing between
 * calls but want their buffers kept (nrt_conv_workspace): the first
 * member of struct nrt_dnnl, with or without oneDNN. */
struct workspace {
    void *p;
    size_t bytes;
};

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
    if (g->dot != NRT_DOT_F32 && g->dot != NRT_DOT_AVX2 && g->dot != NRT_DOT_AMX)
        return 0;
    const int mode = nrt_conv_mode();
    if (mode == NRT_CONV_BUILTIN || mode == NRT_CONV_DIRECT)
        return 0;
    return g->c % 16 == 0 && work_of(g, 1) >= NRT_DNNL_MIN_WORK;
}

/* The oneDNN functions a pass calls, loaded from the library by name. */
#define DNNL_FUNCS(X)                                                                       \
    X(engine_create) X(engine_destroy) X(stream_create) X(stream_destroy) X(stream_wait)   \
    X(memory_desc_init_by_strides) X(memory_desc_init_by_tag) X(memory_desc_equal)          \
    X(memory_desc_get_size) X(memory_create) X(memory_destroy) X(memory_get_memory_desc)    \
    X(memory_set_data_handle)                                                               \
    X(primitive_desc_create) X(primitive_desc_destroy) X(primitive_desc_query_md)           \
    X(primitive_desc_query)                                                                 \
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

/* The caller's buffers a pass reads and writes, by role: xp (the forward
 * pass's and dW's input), dy (dW's and dx's), the weights, the bias (the
 * forward pass's, if any), and the output (y, dW's piece of the batch, or
 * dx). */
enum { R_XP, R_DY, R_W, R_B, R_OUT, NROLE };

/* The padded channel-first tensor a pass copies into blocks of channels:
 * [C, N, H + 2 PH, W + 2 PW], its interior (the pointer given at each run). */
struct tensor {
    int c, n, h, w, ph, pw;
};

/* A step of a pass: a primitive and its arguments; or, where p is NULL, a
 * copy of m samples of the tensor `role` (from the sample each run names)
 * into blocks of nb channels at `blocks`, rounded to bf16 where bf16. */
struct step {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[4];
    struct tensor t;
    int role, m, nb, bf16;
    void *blocks;
};

/* What a pass was made for: its kind (the forward pass with or without a
 * bias), the convolution (geometry and dot), the batch, dx channel first,
 * the samples it reads (dW's pieces), the thread that runs it (each of
 * dW's pieces on the team runs its thread's own) and the threads oneDNN
 * was given when it made it. */
enum { K_FWD, K_FWD_BIAS, K_DW, K_DX };
struct key { /* ints alone, no padding: compared with memcmp */
    int kind, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, dot;
    int n, cn, m, thread, threads;
};

/* A pass, made once and run at every call of the same key: its steps
 * (the primitives among them), its stream, and what else to free (the
 * primitives' descriptions, the memories, the buffers in oneDNN's layouts); the memories over the
 * caller's buffers, by role, get the caller's pointers at each run. */
struct plan {
    struct key key;
    uint64_t used;  /* the call that last ran it (nrt_dnnl's clock) */
    int failed;     /* oneDNN refused it: the built-in path, without asking again */
    dnnl_stream_t stream;
    int nmem, npd, nbuf, nstep;
    void *buf[8]; /* ours, for oneDNN's layouts: malloc's reuses freed pages */
    dnnl_memory_t mem[16];
    dnnl_primitive_desc_t pd[8];
    dnnl_memory_t user[NROLE];
    struct step step[8];
};

/* A net's passes on oneDNN (nrt_net.dnnl): the library's functions, the
 * engine, and the passes made so far, the least recently run given up
 * past NPLAN (a C API caller may ask for ever new batch sizes). */
enum { NPLAN = 48 };
struct nrt_dnnl {
    struct workspace ws; /* first: see nrt_conv_workspace */
    struct api d;
    int state; /* 0: oneDNN not loaded yet; 1: loaded, the engine made; -1: cannot be */
    dnnl_engine_t eng;
    uint64_t clock;
    int n, cap;
    struct plan **plan;
};

#define OK(call) ((call) == dnnl_success)

static void plan_free(struct nrt_dnnl *c, struct plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nstep; i++)
        if (p->step[i].p)
            c->d.primitive_destroy(p->step[i].p);
    for (int i = 0; i < p->npd; i++)
        c->d.primitive_desc_destroy(p->pd[i]);
    for (int i = 0; i < p->nmem; i++)
        c->d.memory_destroy(p->mem[i]);
    for (int i = 0; i < p->nbuf; i++)
        free(p->buf[i]);
    if (p->stream)
        c->d.stream_destroy(p->stream);
    free(p);
}

struct nrt_dnnl *nrt_dnnl_new(void)
{
    return calloc(1, sizeof(struct nrt_dnnl));
}

void nrt_dnnl_free(struct nrt_dnnl *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        plan_free(c, c->plan[i]);
    free(c->plan);
    if (c->state == 1)
        c->d.engine_destroy(c->eng);
    free(c->ws.p);
    free(c);
}

/* Loads oneDNN and makes the engine, at c's first pass.  An NRT_DOT_AVX2
 * pass (NETRT_CPU_ISA=avx2) first caps oneDNN's kernels at AVX2, as on a
 * cpu without AVX-512: oneDNN takes that only before its first primitive,
 * and a program's passes all have the same dot. */
static int ready(struct nrt_dnnl *c, const nrt_conv *g)
{
    if (c->state == 0) {
        c->state = -1;
        if (load(&c->d) == 0) {
            if (g->dot == NRT_DOT_AVX2)
                (void)c->d.set_max_cpu_isa(dnnl_cpu_isa_avx2); /* refused once set: the same cap */
            if (OK(c->d.engine_create(&c->eng, dnnl_cpu, 0)))
                c->state = 1;
        }
    }
    return c->state == 1 ? 0 : -1;
}

/* A pass of less than NRT_DNNL_PAR_WORK multiply-adds runs on one thread,
 * oneDNN making and running it so: the caller's thread count, for widen,
 * or 0. */
static int narrow(double work)
{
#ifdef _OPENMP
    if (work < NRT_DNNL_PAR_WORK && omp_get_max_threads() > 1) {
        const int t = omp_get_max_threads();
        omp_set_num_threads(1);
        return t;
    }
#else
    (void)work;
#endif
    return 0;
}

static void widen(int threads)
{
#ifdef _OPENMP
    if (threads)
        omp_set_num_threads(threads);
#else
    (void)threads;
#endif
}

static struct key key_of(int kind, const nrt_conv *g, int n, int cn, int m, int thread)
{
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    return (struct key){kind, g->c, g->h, g->w, g->o, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw,
                        g->ph, g->pw, g->dot, n, cn, m, thread, threads};
}

static dnnl_memory_t keep_mem(struct plan *p, dnnl_memory_t m)
{
    return p->mem[p->nmem++] = m;
}

static dnnl_primitive_desc_t keep_pd(struct plan *p, dnnl_primitive_desc_t pd)
{
    return p->pd[p->npd++] = pd;
}

/* Adds the step running pd's primitive with its arguments. */
static int add_step(struct nrt_dnnl *c, struct plan *p, const_dnnl_primitive_desc_t pd, int nargs,
                    const dnnl_exec_arg_t *args)
{
    dnnl_primitive_t q;
    if (!OK(c->d.primitive_create(&q, pd)))
        return -1;
    struct step *s = &p->step[p->nstep++];
    *s = (struct step){.p = q, .nargs = nargs};
    memcpy(s->args, args, sizeof *args * (size_t)nargs);
    return 0;
}

/* Adds the reorder from memory a to memory b. */
static int reorder(struct nrt_dnnl *c, struct plan *p, dnnl_memory_t a, dnnl_memory_t b)
{
    const dnnl_memory_desc_t *am, *bm;
    dnnl_primitive_desc_t pd;
    if (!OK(c->d.memory_get_memory_desc(a, &am)) || !OK(c->d.memory_get_memory_desc(b, &bm)) ||
        !OK(c->d.reorder_primitive_desc_create(&pd, am, c->eng, bm, c->eng, NULL)))
        return -1;
    keep_pd(p, pd);
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
    return add_step(c, p, pd, 2, args);
}

/* The memory over the caller's buffer of role `role` (user its layout). */
static dnnl_memory_t user_mem(struct nrt_dnnl *c, struct plan *p, const dnnl_memory_desc_t *user,
                              int role)
{
    dnnl_memory_t u;
    if (!OK(c->d.memory_create(&u, user, c->eng, DNNL_MEMORY_NONE)))
        return NULL;
    return p->user[role] = keep_mem(p, u);
}

/* The memory pd wants for `what` (index 0 of it): the caller's buffer of
 * role `role`, seen as user, if that is what it wants; else a buffer of
 * its own, into which, for an input (in), the caller's is reordered. */
static dnnl_memory_t operand(struct nrt_dnnl *c, struct plan *p, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what, const dnnl_memory_desc_t *user, int role, int in)
{
    const dnnl_memory_desc_t *want = c->d.primitive_desc_query_md(pd, what, 0);
    dnnl_memory_t u = want ? user_mem(c, p, user, role) : NULL, m;
    if (!u)
        return NULL;
    if (c->d.memory_desc_equal(want, user))
        return u;
    const size_t bytes = c->d.memory_desc_get_size(want);
    void *b = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!b)
        return NULL;
    p->buf[p->nbuf++] = b;
    if (!OK(c->d.memory_create(&m, want, c->eng, b)))
        return NULL;
    keep_mem(p, m);
    if (in && reorder(c, p, u, m) != 0)
        return NULL;
    return m;
}

/* Adds the step running pd (its output out) and, where out is not the
 * caller's buffer (role R_OUT), the reorder into it. */
static int run_into(struct nrt_dnnl *c, struct plan *p, const_dnnl_primitive_desc_t pd,
                    int nargs, const dnnl_exec_arg_t *args, dnnl_memory_t out)
{
    if (add_step(c, p, pd, nargs, args) != 0)
        return -1;
    return out != p->user[R_OUT] ? reorder(c, p, out, p->user[R_OUT]) : 0;
}

/* The descriptions of a pass's tensors: the user's (x: xp's interior, or
 * dx; y: the channel-first output or its gradient; w), oneDNN's choice
 * (any) of each as a product's input (xa, ya, wa: bf16 for NRT_DOT_AMX,
 * else fp32) and as its output (xo, yo, wo: fp32, the sums), and the
 * convolution's geometry. */
struct geom {
    dnnl_memory_desc_t x, y, w, xa, ya, wa, xo, yo, wo, b;
    dnnl_dims_t strides, pad_l, pad_r;
    int bias; /* the forward pass adds b */
};

/* The type of a pass's inputs in oneDNN: bf16 for bf16's products on AMX
 * (the values are bf16 already: the copies into it are exact), else fp32. */
static dnnl_data_type_t in_type(const nrt_conv *g)
{
    return g->dot == NRT_DOT_AMX ? dnnl_bf16 : dnnl_f32;
}

/* x_cn: the user's x is channel first ([C, N, H, W]); xp: it is the
 * interior of xp, the input padded by PH, PW (channel first). */
static int describe(struct nrt_dnnl *c, const nrt_conv *g, int n, int x_cn, int xp,
                    struct geom *d)
{
    const dnnl_dim_t ch = g->c, o = g->o, oh = g->oh, ow = g->ow, h = g->h, w = g->w;
    const dnnl_dim_t hp = xp ? h + 2 * g->ph : h, wp = xp ? w + 2 * g->pw : w;
    dnnl_dims_t xd = {n, ch, h, w}, yd = {n, o, oh, ow}, wd = {o, ch, g->kh, g->kw}, bd = {o};
    dnnl_dims_t xs, ys = {oh * ow, n * oh * ow, ow, 1};
    if (x_cn || xp)
        xs[0] = hp * wp, xs[1] = n * hp * wp;
    else
        xs[0] = ch * hp * wp, xs[1] = hp * wp;
    xs[2] = wp, xs[3] = 1;
    const dnnl_data_type_t in = in_type(g);
    const dnnl_format_tag_t any = dnnl_format_tag_any;
    if (!OK(c->d.memory_desc_init_by_strides(&d->x, 4, xd, dnnl_f32, xs)) ||
        !OK(c->d.memory_desc_init_by_strides(&d->y, 4, yd, dnnl_f32, ys)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->w, 4, wd, dnnl_f32, dnnl_oihw)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->xa, 4, xd, in, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->ya, 4, yd, in, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->wa, 4, wd, in, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->xo, 4, xd, dnnl_f32, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->yo, 4, yd, dnnl_f32, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->wo, 4, wd, dnnl_f32, any)) ||
        !OK(c->d.memory_desc_init_by_tag(&d->b, 1, bd, dnnl_f32, dnnl_a)))
        return -1;
    d->bias = 0;
    if (xp)
        d->x.offset0 = g->ph * wp + g->pw;
    d->strides[0] = g->sh, d->strides[1] = g->sw;
    d->pad_l[0] = g->ph, d->pad_l[1] = g->pw;
    d->pad_r[0] = (oh - 1) * g->sh + g->kh - h - g->ph;
    d->pad_r[1] = (ow - 1) * g->sw + g->kw - w - g->pw;
    return d->pad_r[0] >= 0 && d->pad_r[1] >= 0 ? 0 : -1;
}

/* pd, kept; NULL where oneDNN found only its reference code for it
 * (orders of magnitude slower than the built-in path: a bf16 pass on a
 * cpu its kernels do not know). */
static dnnl_primitive_desc_t chosen(struct nrt_dnnl *c, struct plan *p, dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    keep_pd(p, pd);
    if (!OK(c->d.primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl)) || !impl ||
        !strncmp(impl, "ref", 3))
        return NULL;
    return pd;
}

/* The forward pass's primitive description: what the backward passes
 * take as their hint. */
static dnnl_primitive_desc_t fwd_pd(struct nrt_dnnl *c, struct plan *p, struct geom *d)
{
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    if (!OK(c->d.convolution_forward_desc_init(&cd, dnnl_forward_training,
                                               dnnl_convolution_direct, &d->xa, &d->wa,
                                               d->bias ? &d->b : NULL, &d->yo, d->strides,
                                               d->pad_l, d->pad_r)) ||
        !OK(c->d.primitive_desc_create(&pd, &cd, NULL, c->eng, NULL)))
        return NULL;
    return chosen(c, p, pd);
}

/* A backward pass's primitive description, dW's (weights) or dx's, with
 * the forward pass's as its hint. */
static dnnl_primitive_desc_t backward_pd(struct nrt_dnnl *c, struct plan *p, struct geom *d,
                                         int weights)
{
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd, hint = fwd_pd(c, p, d);
    const dnnl_alg_kind_t alg = dnnl_convolution_direct;
    if (!hint ||
        !OK(weights ? c->d.convolution_backward_weights_desc_init(&cd, alg, &d->xa, &d->wo, NULL,
                                                                   &d->ya, d->strides, d->pad_l,
                                                                   d->pad_r)
                    : c->d.convolution_backward_data_desc_init(&cd, alg, &d->xo, &d->wa, &d->ya,
                                                                d->strides, d->pad_l, d->pad_r)) ||
        !OK(c->d.primitive_desc_create(&pd, &cd, NULL, c->eng, hint)))
        return NULL;
    return chosen(c, p, pd);
}

/* oneDNN's reorder from xp's interior (a strided view) is several times
 * slower than from a dense layout (1.4 ms of cifar10's conv2, batch 64);
 * where a pass wants its input in blocks of 16 channels ([N, C/16, H, W,
 * 16], as on AVX-512), of 8 (on AVX2) or of all of them ([N, H, W, C], as
 * its bf16 passes on AMX), the blocks are copied here, one row of a block
 * at a time (nrt_interleave: 3.4 % of cifar10's one-thread step as a
 * gather, 2.1 % transposed in registers, Zen 5).  Whether want is m
 * samples of t in blocks of nb channels of type dt (bd, then). */
static int in_blocks(struct nrt_dnnl *c, const dnnl_memory_desc_t *want, const struct tensor *t,
                     int m, int nb, dnnl_data_type_t dt, dnnl_memory_desc_t *bd)
{
    dnnl_dims_t dims = {m, t->c, t->h, t->w};
    const dnnl_format_tag_t tag = nb == t->c ? dnnl_acdb : nb == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    return want && t->c % nb == 0 && OK(c->d.memory_desc_init_by_tag(bd, 4, dims, dt, tag)) &&
           c->d.memory_desc_equal(want, bd);
}

/* The channels of the blocks want is of m samples of t (bd, then) in
 * fp32 or bf16, or 0 where it is no such blocks. */
static int block_size(struct nrt_dnnl *c, const dnnl_memory_desc_t *want,
                      const struct tensor *t, int m, dnnl_memory_desc_t *bd)
{
    const dnnl_data_type_t dt = want && want->data_type == dnnl_bf16 ? dnnl_bf16 : dnnl_f32;
    const int each[3] = {16, 8, t->c};
    for (int i = 0; i < 3; i++)
        if (in_blocks(c, want, t, m, each[i], dt, bd))
            return each[i];
    return 0;
}

/* Adds the copy of m samples of the tensor `role` (t) into the blocks pd
 * wants for `what`, and returns their memory; NULL where it wants others. */
static dnnl_memory_t blocked(struct nrt_dnnl *c, struct plan *p, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what, const struct tensor *t, int role, int m)
{
    const dnnl_memory_desc_t *want = c->d.primitive_desc_query_md(pd, what, 0);
    dnnl_memory_desc_t bd;
    const int nb = block_size(c, want, t, m, &bd), bf16 = nb && want->data_type == dnnl_bf16;
    if (!nb)
        return NULL;
    const size_t bytes = (size_t)m * t->c * t->h * t->w * (bf16 ? 2 : 4);
    void *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    dnnl_memory_t mem;
    if (!dst)
        return NULL;
    p->buf[p->nbuf++] = dst;
    if (!OK(c->d.memory_create(&mem, &bd, c->eng, dst)))
        return NULL;
    p->step[p->nstep++] =
        (struct step){.t = *t, .role = role, .m = m, .nb = nb, .bf16 = bf16, .blocks = dst};
    return keep_mem(p, mem);
}

/* Runs a copy step on samples [i0, i0 + s->m) of the tensor at src. */
static void copy_blocks(const struct step *s, const float *src, int i0)
{
    const struct tensor *t = &s->t;
    const int nb = s->nb;
    const size_t h = (size_t)t->h, w = (size_t)t->w, wp = w + 2 * (size_t)t->pw;
    const size_t plane = (h + 2 * (size_t)t->ph) * wp, cs = (size_t)t->n * plane;
    const long blocks = t->c / nb, rows = (long)s->m * blocks * t->h;
    /* on the team from 2^19 values: cifar10's conv2 input, batch 64 (its
     * step on two threads 16.0 -> 13.5 ms, AMD Zen 5); cnn101's smaller
     * copies ran 4 % slower on it (2^17) */
    NRT_OMP(omp parallel for schedule(static) if (rows * w * nb >= 524288))
    for (long q = 0; q < rows; q++) { /* q = (sample i, block b, row y) */
        const long y = q % t->h, b = q / t->h % blocks, i = i0 + q / t->h / blocks;
        const float *row = src + (size_t)b * nb * cs + (size_t)i * plane +
                           ((size_t)y + (size_t)t->ph) * wp + (size_t)t->pw;
        if (s->bf16)
            nrt_interleave_bf16(row, cs, w, nb, (uint16_t *)s->blocks + (size_t)q * w * nb);
        else
            nrt_interleave(row, cs, w, nb, (float *)s->blocks + (size_t)q * w * nb);
    }
}

/* Makes p, the pass of its key (p->key: n samples, m of them for dW's
 * pieces). */
typedef int make_fn(struct nrt_dnnl *c, struct plan *p, const nrt_conv *g);

/* The pass of key k, made by make where it is not made yet; NULL where
 * oneDNN refused it (then or before) or memory ran out.  Not on a team:
 * the cache is the caller's alone. */
static struct plan *plan_of(struct nrt_dnnl *c, const nrt_conv *g, const struct key *k,
                            make_fn *make)
{
    for (int i = 0; i < c->n; i++)
        if (!memcmp(&c->plan[i]->key, k, sizeof *k)) {
            c->plan[i]->used = c->clock;
            return c->plan[i]->failed ? NULL : c->plan[i];
        }
    struct plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->key = *k;
    p->used = c->clock;
    p->failed = !OK(c->d.stream_create(&p->stream, c->eng, dnnl_stream_default_flags)) ||
                make(c, p, g) != 0;
    /* a slot: the least recently run pass of an earlier call past NPLAN */
    int slot = c->n;
    for (int i = 0; c->n >= NPLAN && i < c->n; i++)
        if (c->plan[i]->used < c->clock && (slot == c->n || c->plan[i]->used < c->plan[slot]->used))
            slot = i;
    if (slot == c->n && c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 16;
        struct plan **grown = realloc(c->plan, sizeof *grown * (size_t)cap);
        if (!grown) {
            plan_free(c, p);
            return NULL;
        }
        c->plan = grown, c->cap = cap;
    }
    if (slot == c->n)
        c->n++;
    else
        plan_free(c, c->plan[slot]);
    c->plan[slot] = p;
    return p->failed ? NULL : p;
}

/* Runs p on the caller's buffers (by role), its copies reading from
 * sample i0. */
static int run(struct nrt_dnnl *c, struct plan *p, void *const user[NROLE], int i0)
{
    for (int r = 0; r < NROLE; r++)
        if (p->user[r] && !OK(c->d.memory_set_data_handle(p->user[r], user[r])))
            return -1;
    for (int i = 0; i < p->nstep; i++) {
        const struct step *s = &p->step[i];
        if (!s->p)
            copy_blocks(s, user[s->role], i0);
        else if (!OK(c->d.primitive_execute(s->p, p->stream, s->nargs, s->args)))
            return -1;
    }
    return OK(c->d.stream_wait(p->stream)) ? 0 : -1;
}

/* g's passes: the net's (nrt_conv.dnnl), or, without one, made for this
 * call alone (*own, for nrt_dnnl_free); NULL without memory. */
static struct nrt_dnnl *passes_of(const nrt_conv *g, struct nrt_dnnl **own)
{
    *own = g->dnnl ? NULL : nrt_dnnl_new();
    return g->dnnl ? g->dnnl : *own;
}

/* (g without the net's state, a state of its own for the call, as pass's) */
int nrt_dnnl_ready(const nrt_conv *g)
{
    struct nrt_dnnl *own, *c = passes_of(g, &own);
    const int ok = c && ready(c, g) == 0;
    nrt_dnnl_free(own);
    return ok;
}

/* The forward pass or dx, on n samples, made by make at its first call. */
static int pass(const nrt_conv *g, int kind, int n, int cn, make_fn *make, void *const user[NROLE])
{
    struct nrt_dnnl *own, *c = passes_of(g, &own);
    int rc = -1;
    const int threads = narrow(work_of(g, n));
    if (c && ready(c, g) == 0) {
        c->clock++;
        const struct key k = key_of(kind, g, n, cn, n, 0);
        struct plan *p = plan_of(c, g, &k, make);
        rc = p ? run(c, p, user, 0) : -1;
    }
    widen(threads);
    nrt_dnnl_free(own);
    return rc;
}

/* xp as a tensor: g's input, padded */
static struct tensor input_of(const nrt_conv *g, int n)
{
    return (struct tensor){g->c, n, g->h, g->w, g->ph, g->pw};
}

static int make_fwd(struct nrt_dnnl *c, struct plan *p, const nrt_conv *g)
{
    struct geom d;
    const int n = p->key.n;
    if (describe(c, g, n, 1, 1, &d) != 0)
        return -1;
    d.bias = p->key.kind == K_FWD_BIAS;
    dnnl_primitive_desc_t pd = fwd_pd(c, p, &d);
    const struct tensor xt = input_of(g, n);
    dnnl_memory_t x = pd ? blocked(c, p, pd, dnnl_query_src_md, &xt, R_XP, n) : NULL;
    if (pd && !x)
        x = operand(c, p, pd, dnnl_query_src_md, &d.x, R_XP, 1);
    dnnl_memory_t k = x ? operand(c, p, pd, dnnl_query_weights_md, &d.w, R_W, 1) : NULL;
    dnnl_memory_t bm = k && d.bias ? user_mem(c, p, &d.b, R_B) : NULL; /* as given: [O] */
    dnnl_memory_t o = k && (bm || !d.bias) ? operand(c, p, pd, dnnl_query_dst_md, &d.y, R_OUT, 0) : NULL;
    if (!o)
        return -1;
    const dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DST, o}, {DNNL_ARG_BIAS, bm}};
    return run_into(c, p, pd, d.bias ? 4 : 3, args, o);
}

int nrt_dnnl_fwd(const nrt_conv *g, int n, const float *w, const float *b, const float *xp,
                 float *y)
{
    void *const user[NROLE] = {[R_XP] = (void *)xp, [R_W] = (void *)w, [R_B] = (void *)b,
                               [R_OUT] = y};
    return pass(g, b ? K_FWD_BIAS : K_FWD, n, 0, make_fwd, user);
}

/* dW of m of the n samples (from the sample each run names), on one
 * thread; both operands in blocks of channels, or -1. */
static int make_dw(struct nrt_dnnl *c, struct plan *p, const nrt_conv *g)
{
    struct geom d;
    dnnl_primitive_desc_t pd;
    const int n = p->key.n, m = p->key.m;
    const struct tensor xt = input_of(g, n), yt = {g->o, n, g->oh, g->ow, 0, 0};
    if (describe(c, g, m, 1, 1, &d) != 0 || !(pd = backward_pd(c, p, &d, 1)))
        return -1;
    dnnl_memory_t x = blocked(c, p, pd, dnnl_query_src_md, &xt, R_XP, m);
    dnnl_memory_t e = x ? blocked(c, p, pd, dnnl_query_diff_dst_md, &yt, R_DY, m) : NULL;
    dnnl_memory_t o = e ? operand(c, p, pd, dnnl_query_diff_weights_md, &d.w, R_OUT, 0) : NULL;
    if (!o)
        return -1;
    const dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, e}, {DNNL_ARG_DIFF_WEIGHTS, o}};
    return run_into(c, p, pd, 3, args, o);
}

/* oneDNN sums dW over the batch split among its threads by their number;
 * here the batch is cut by its size alone, into pieces of DW_PIECE
 * samples, each summed by oneDNN on one thread (the pieces side by side on
 * the team, each thread running its own passes, a whole piece's and the
 * last's), and the pieces' dW added in order: the same bits for any
 * number of threads. */
enum { DW_PIECE = 16 };

int nrt_dnnl_dw(const nrt_conv *g, int n, const float *dy, const float *xp, float *dw)
{
    if (g->o % 8) /* dy in blocks of channels too */
        return -1;
    const int pieces = (n + DW_PIECE - 1) / DW_PIECE, last = n - (pieces - 1) * DW_PIECE;
    const int par = pieces > 1 && work_of(g, n) >= NRT_DNNL_PAR_WORK;
    int team = 1;
#ifdef _OPENMP
    if (par)
        team = omp_get_max_threads();
#endif
    const size_t nw = (size_t)g->o * g->c * g->kh * g->kw;
    struct nrt_dnnl *own, *c = passes_of(g, &own);
    float *part = malloc((size_t)pieces * nw * sizeof *part);
    struct plan **mine = calloc(2 * (size_t)team, sizeof *mine); /* thread t's: [2t] whole, [2t + 1] last */
    int failed = !c || !part || !mine || n <= 0 || ready(c, g) != 0;
    if (!failed) {
        c->clock++;
        const int threads = narrow(0.0);
        for (int t = 0; t < team && !failed; t++) {
            const struct key whole = key_of(K_DW, g, n, 1, DW_PIECE, t), end = key_of(K_DW, g, n, 1, last, t);
            mine[2 * t] = pieces > 1 ? plan_of(c, g, &whole, make_dw) : NULL;
            mine[2 * t + 1] = plan_of(c, g, &end, make_dw);
            failed = (pieces > 1 && !mine[2 * t]) || !mine[2 * t + 1];
        }
        widen(threads);
    }
    if (!failed) {
        NRT_OMP(omp parallel for schedule(static) reduction(| : failed) if (par))
        for (int k = 0; k < pieces; k++) {
            int t = 0;
#ifdef _OPENMP
            t = omp_get_thread_num();
#endif
            const int i0 = k * DW_PIECE, threads = narrow(0.0);
            void *const user[NROLE] = {[R_XP] = (void *)xp, [R_DY] = (void *)dy,
                                       [R_OUT] = part + (size_t)k * nw};
            failed |= run(c, mine[2 * t + (k == pieces - 1)], user, i0) != 0;
            widen(threads);
        }
    }
    if (!failed)
        for (size_t j = 0; j < nw; j++) {
            float sum = part[j];
            for (int k = 1; k < pieces; k++)
                sum += part[(size_t)k * nw + j];
            dw[j] = sum;
        }
    free(mine);
    free(part);
    nrt_dnnl_free(own);
    return failed ? -1 : 0;
}

static int make_dx(struct nrt_dnnl *c, struct plan *p, const nrt_conv *g)
{
    struct geom d;
    dnnl_primitive_desc_t pd;
    const int n = p->key.n;
    const struct tensor yt = {g->o, n, g->oh, g->ow, 0, 0};
    if (describe(c, g, n, p->key.cn, 0, &d) != 0 || !(pd = backward_pd(c, p, &d, 0)))
        return -1;
    dnnl_memory_t e = blocked(c, p, pd, dnnl_query_diff_dst_md, &yt, R_DY, n);
    if (!e)
        e = operand(c, p, pd, dnnl_query_diff_dst_md, &d.y, R_DY, 1);
    dnnl_memory_t k = e ? operand(c, p, pd, dnnl_query_weights_md, &d.w, R_W, 1) : NULL;
    dnnl_memory_t o = k ? operand(c, p, pd, dnnl_query_diff_src_md, &d.x, R_OUT, 0) : NULL;
    if (!o)
        return -1;
    const dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_DIFF_DST, e}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DIFF_SRC, o}};
    return run_into(c, p, pd, 3, args, o);
}

int nrt_dnnl_dx(const nrt_conv *g, int n, int cn, const float *w, const float *dy, float *dx)
{
    void *const user[NROLE] = {[R_DY] = (void *)dy, [R_W] = (void *)w, [R_OUT] = dx};
    return pass(g, K_DX, n, cn, make_dx, user);
}

#else /* no oneDNN: the workspace alone */

struct nrt_dnnl {
    struct workspace ws;
};

struct nrt_dnnl *nrt_dnnl_new(void)
{
    return calloc(1, sizeof(struct nrt_dnnl));
}

void nrt_dnnl_free(struct nrt_dnnl *c)
{
    if (c)
        free(c->ws.p);
    free(c);
}

#endif /* NETRT_HAVE_ONEDNN */

int nrt_conv_mode(void)
{
    static const char *const names[] = {"auto", "builtin", "direct", "onednn"};
    const char *e = getenv("NETRT_CPU_CONV");
    int mode = 0;
    if (!e || !*e)
        return NRT_CONV_AUTO;
    while (mode < NRT_CONV_BAD && strcmp(e, names[mode]))
        mode++;
    return mode;
}

void *nrt_conv_workspace(const nrt_conv *g, size_t bytes)
{
    struct workspace *w = g->dnnl ? (struct workspace *)(void *)g->dnnl : NULL;
    if (!w)
        return NULL;
    if (bytes > w->bytes) {
        bytes = (bytes + 63) / 64 * 64;
        void *p = aligned_alloc(64, bytes);
        if (!p)
            return NULL;
        free(w->p);
        w->p = p, w->bytes = bytes;
    }
    return w->p;
}
