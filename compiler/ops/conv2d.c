/*
 * ops/conv2d.c — conv2d: the convolution, its passes and their GPU kernels.
 */
#include "ops.h"

#include <string.h>

/* A convolution is one matrix product over the whole batch: the weight W
 * [O, C*KH*KW] times cols [C*KH*KW, n*P] (P = OH*OW), the columns of every
 * sample side by side, gives y [O, n*P] — the output channel first,
 * [O, n, OH, OW], which is how it stays (fuse.c's layouts) — and the bias
 * and a fused activation are applied in place.  cols is never stored: the
 * runtime's product reads it from xp, the input zero-padded and channel
 * first, which forward keeps for the backward pass: dW = dy cols^T.  dx is,
 * for stride 1, the convolution of dy with W flipped (nrt_conv2d_dx);
 * otherwise dcols = W^T dy, folded back into dx with col2im. */

enum { CV_OUT, CV_KERNEL, CV_STRIDE, CV_PAD, CV_BIAS };

struct conv {
    long long C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, CKK, P;
};

static struct conv conv_of(const Program *p, const Node *n)
{
    const Shape *i = &p->values[n->in].shape, *o = &p->values[n->out].shape;
    struct conv c = {i->d[0], i->d[1], i->d[2], o->d[0], o->d[1], o->d[2],
                     (long long)n->args[CV_KERNEL].v[0], (long long)n->args[CV_KERNEL].v[1],
                     (long long)n->args[CV_STRIDE].v[0], (long long)n->args[CV_STRIDE].v[1],
                     (long long)n->args[CV_PAD].v[0], (long long)n->args[CV_PAD].v[1], 0, 0};
    c.CKK = c.C * c.KH * c.KW;
    c.P = c.OH * c.OW;
    return c;
}

/* dx as a convolution of dy (nrt_conv2d_dx) */
static bool conv_dx_direct(struct conv c)
{
    return c.SH == 1 && c.SW == 1 && c.PH < c.KH && c.PW < c.KW;
}

static bool conv2d_shape(Program *p, Node *n)
{
    if (!need_image(p, n))
        return false;
    const Shape *s = in_shape(p, n);
    int64_t oh, ow, O = (int64_t)arg(n, CV_OUT);
    int kh = (int)n->args[CV_KERNEL].v[0], kw = (int)n->args[CV_KERNEL].v[1];
    if (!window(p, n, s->d[1], kh, (int)n->args[CV_STRIDE].v[0], (int)n->args[CV_PAD].v[0], "height", &oh) ||
        !window(p, n, s->d[2], kw, (int)n->args[CV_STRIDE].v[1], (int)n->args[CV_PAD].v[1], "width", &ow))
        return false;
    *out_shape(p, n) = (Shape){3, {O, oh, ow}};
    int64_t C = s->d[0];
    int fan_in = (int)(C * kh * kw), fan_out = (int)(O * kh * kw);
    ir_add_param(p, n, "weight", 4, (int64_t[]){O, C, kh, kw}, fan_in, fan_out, false);
    if (arg(n, CV_BIAS))
        ir_add_param(p, n, "bias", 1, (int64_t[]){O}, fan_in, fan_out, true);
    struct conv c = conv_of(p, n);
    n->aux_size = c.C * (c.H + 2 * c.PH) * (c.W + 2 * c.PW); /* xp, kept for backward */
    if (conv_dx_direct(c)) /* dy padded, and dx if not channel first: what
                              nrt_conv2d_dx_scratch says, per sample */
        n->scratch = c.O * (c.OH + 2 * (c.KH - 1 - c.PH)) * (c.OW + 2 * (c.KW - 1 - c.PW)) +
                     c.C * c.H * c.W;
    else
        n->scratch = c.CKK * c.P; /* dcols */
    return true;
}

/* The geometry as the runtime takes it, and the run's arithmetic. */
static void conv_geometry(Emit *e, struct conv c)
{
    emitf(e, "const nrt_conv g = {.c = %lld, .h = %lld, .w = %lld, .o = %lld, .oh = %lld, "
          ".ow = %lld,", c.C, c.H, c.W, c.O, c.OH, c.OW);
    emitf(e, "                    .kh = %lld, .kw = %lld, .sh = %lld, .sw = %lld, .ph = %lld, "
          ".pw = %lld, .dot = net->dot,", c.KH, c.KW, c.SH, c.SW, c.PH, c.PW);
    emitf(e, "                    .dnnl = net->dnnl};");
}

static void conv2d_fwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    conv_geometry(e, c);
    emitf(e, "/* xp[%lld, n, %lld, %lld]: the input padded, channel first, kept for backward */",
          c.C, c.H + 2 * c.PH, c.W + 2 * c.PW);
    emitf(e, "nrt_conv2d_pad(&g, n, %d, x, xp);", input_cn(e, n));
    bool bias = n->nparams > 1;
    emitf(e, "/* y[%lld, n*%lld] = W[%lld, %lld] cols[%lld, n*%lld]%s, the columns read from xp */",
          c.O, c.P, c.O, c.CKK, c.CKK, c.P, bias ? " + b" : "");
    emitf(e, "nrt_conv2d_fwd(&g, n, W, %s, xp, y);", bias ? "b" : "NULL");
    emit_epilogue(e, n, arena_printf(e->arena, "%lld", c.O),
                  arena_printf(e->arena, "(size_t)n * %lld", c.P), NULL);
}

static void conv2d_bwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    conv_geometry(e, c);
    emit_act_grad(e, n, c.O * c.P);
    if (n->nparams > 1)
        emitf(e, "nrt_row_sums(dy, %lld, (size_t)n * %lld, db);", c.O, c.P);
    emitf(e, "/* dW[%lld, %lld] = dy cols^T */", c.O, c.CKK);
    emitf(e, "nrt_conv2d_dw(&g, n, dy, xp, dW);");
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    if (conv_dx_direct(c)) {
        emitf(e, "/* dx = dy convolved with W turned half round (stride 1) */");
        emitf(e, "nrt_conv2d_dx(&g, n, %d, W, dy, net->scratch, dx);", input_cn(e, n));
        return;
    }
    emitf(e, "/* dcols[%lld, n*%lld] = W^T dy, folded back into dx */", c.CKK, c.P);
    emitf(e, "float *dcols = net->scratch;");
    emitf(e, "const int np = n * %lld;", c.P);
    emitf(e, "nrt_gemm(net->dot, 1, 0, %lld, np, %lld, 1.0f, W, %lld, dy, np, 0.0f, dcols, np);",
          c.CKK, c.O, c.CKK);
    emitf(e, "nrt_col2im_batch%s(dcols, n, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
          "%lld, %lld, dx);", input_cn(e, n) ? "_cn" : "", c.C, c.H, c.W, c.KH, c.KW, c.SH,
          c.SW, c.PH, c.PW, c.OH, c.OW);
}

/* A tiling of netrt_kernels.cuh (Tiling<BM, BN, BK, TM, TN, B_KFAST>) and
 * its threads, (BN / TN) * (BM / TM). */
struct tiling {
    int bm, bn, bk, tm, tn;
    bool kfast;
};

static int tiling_threads(struct tiling t)
{
    return (t.bn / t.tn) * (t.bm / t.tm);
}

static const char *tiling_type(Emit *e, struct tiling t)
{
    return arena_printf(e->arena, "nrt_k::Tiling<%d, %d, %d, %d, %d, %s>", t.bm, t.bn, t.bk,
                        t.tm, t.tn, t.kfast ? "true" : "false");
}

/* The tilings of the convolutions' products by their M (the output's
 * channels; the input's for dx): 16, 32 or 64 rows a tile; dw's N =
 * C*KH*KW is small and its K = n*OH*OW long (split among blocks). */
static struct tiling conv_tiling(long long m)
{
    if (m <= 16)
        return (struct tiling){16, 256, 16, 4, 8, false};
    if (m <= 32)
        return (struct tiling){32, 128, 16, 4, 8, false};
    return (struct tiling){64, 128, 16, 8, 8, false};
}

static struct tiling dw_tiling(long long m)
{
    if (m <= 16)
        return (struct tiling){16, 64, 32, 4, 4, true};
    if (m <= 32)
        return (struct tiling){32, 64, 32, 4, 4, true};
    return (struct tiling){64, 64, 32, 8, 4, true};
}

/* nrt_k::ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW> */
static const char *conv_geom(Emit *e, struct conv c)
{
    return arena_printf(e->arena, "nrt_k::ConvGeom<%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                        "%lld, %lld, %lld, %lld>", c.C, c.H, c.W, c.O, c.OH, c.OW, c.KH, c.KW,
                        c.SH, c.SW, c.PH, c.PW);
}

/* An implicit GEMM's launch: its nrt_cu_tile (what, floats a sample in and
 * out, the product's rows and columns a sample, the tiling), then
 * nrt_cu_igemm. */
static void cu_igemm(Emit *e, const Node *n, const char *k, const char *what, long long in,
                     long long out, long long rows, long long cols, struct tiling t,
                     const char *args)
{
    emitf(e, "static const nrt_cu_tile %s_tile = {\"%s\", %lld, %lld, %lld, %lld, %d, %d, %d};",
          what, pass_name(e, n, what), in, out, rows, cols, t.bm, t.bn, tiling_threads(t));
    emitf(e, "TRY(nrt_cu_igemm(net, %s, &%s_tile, n, NRT_ARGS(%s), err));", k, what, args);
}

static void conv2d_cu_fwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    struct tiling t = conv_tiling(c.O);
    const char *k = cu_call(e, n, "fwd", tiling_threads(t),
                            "int n, const float *x, const float *w, float *y, int prec",
                            arena_printf(e->arena, "nrt_k::conv2d_fwd<%s, %s, %s>(n, x, w, y, prec);",
                                         conv_geom(e, c), tiling_type(e, t),
                                         input_cn(e, n) ? "true" : "false"));
    emitf(e, "/* y[%lld, n*%lld] = W[%lld, %lld] cols(x): implicit GEMM, no columns stored */",
          c.O, c.P, c.O, c.CKK);
    cu_igemm(e, n, k, "fwd", c.C * c.H * c.W, c.O * c.P, c.O, c.P, t, "&x, &W, &y, &net->lowp");
    emitf(e, "size_t np = (size_t)n * %lld;", c.P);
    cu_epilogue(e, n, arena_printf(e->arena, "(size_t)%lld * np", c.O), "i / np", true);
}

static int64_t conv2d_cu_workspace(const Program *p, const Node *n)
{
    struct conv c = conv_of(p, n);
    int64_t total = c.O * c.CKK, splits = cu_dw_max_splits(total);
    return splits > 1 ? (int64_t)sizeof(float) * splits * total : 0;
}

static void conv2d_cu_bwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    const char *cn = input_cn(e, n) ? "true" : "false";
    if (n->fused || n->nparams > 1)
        emitf(e, "size_t np = (size_t)n * %lld;", c.P);
    cu_act_grad(e, n, arena_printf(e->arena, "(size_t)%lld * np", c.O));
    if (n->nparams > 1)
        emitf(e, "TRY(nrt_cu_row_sums(net, dy, %lld, np, db, err));", c.O);

    struct tiling t = dw_tiling(c.O);
    int64_t total = c.O * c.CKK, splits = cu_dw_max_splits(total);
    const char *k = cu_call(e, n, "dw", tiling_threads(t),
                            "int n, int chunk, const float *x, const float *dy, float *dw, "
                            "float *partial, int prec",
                            arena_printf(e->arena, "nrt_k::conv2d_dw<%s, %s, %s>(n, chunk, x, dy, "
                                         "dw, partial, prec);", conv_geom(e, c), tiling_type(e, t),
                                         cn));
    const char *reduce = splits > 1
        ? cu_call(e, n, "dw_reduce", 0, "int splits, const float *partial, float *dw",
                  arena_printf(e->arena, "nrt_k::conv2d_dw_reduce<%lld>(splits, partial, dw);",
                               (long long)total))
        : "-1";
    emitf(e, "/* dW[%lld, %lld] = dy cols(x)^T, the sum over n*%lld positions split in chunks */",
          c.O, c.CKK, c.P);
    emitf(e, "static const nrt_cu_dw dw_tile = {\"%s\", %lld, %lld, %lld, %lld, %lld, %d, %d, %d, %d, "
          "%lld};", pass_name(e, n, "dw"), c.C * c.H * c.W, c.O * c.P, c.O, c.CKK, c.P, t.bm, t.bn, t.bk,
          tiling_threads(t), (long long)splits);
    emitf(e, "TRY(nrt_cu_conv2d_dw(net, %s, %s, &dw_tile, n, x, dy, dW, err));", k, reduce);
    struct tiling tx = conv_tiling(c.C);
    const char *kx = cu_call(e, n, "dx", tiling_threads(tx),
                             "int n, const float *w, const float *dy, float *dx, int prec",
                             arena_printf(e->arena, "nrt_k::conv2d_dx<%s, %s, %s>(n, w, dy, dx, prec);",
                                          conv_geom(e, c), tiling_type(e, tx), cn));
    emitf(e, "/* dx = the adjoint of cols applied to W^T dy */");
    emitf(e, "if (dx) {");
    e->indent++;
    cu_igemm(e, n, kx, "dx", c.O * c.P, c.C * c.H * c.W, c.C, c.H * c.W, tx,
             "&W, &dy, &dx, &net->lowp");
    e->indent--;
    emitf(e, "}");
}

const OpDef op_conv2d = {
    .sig = {"conv2d", "2-D convolution (nn.Conv2d; in_channels from the input)",
            {SIZE("out_channels"),
             {"kernel", A_PAIR, NULL, 1, 4096, "kernel_size", NULL},
             {"stride", A_PAIR, "1", 1, 4096, NULL, NULL},
             {"padding", A_PAIR, "0", 0, 4096, NULL, NULL},
             {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
    .shape = conv2d_shape, .emit_fwd = conv2d_fwd, .emit_bwd = conv2d_bwd,
    .takes_epilogue = true, .aux_name = "xp", .layout = LAYOUT_CN, .cu_fwd = conv2d_cu_fwd,
    .cu_bwd = conv2d_cu_bwd, .cu_workspace = conv2d_cu_workspace, .aux_cpu_only = true,
    .x_in_aux = true, .product = true, .rounds_output = true};
