/*
 * ops/batchnorm.c — batchnorm1d and batchnorm2d, with their running statistics.
 */
#include "ops.h"

#include <string.h>

/* nn.BatchNorm1d on [F] and nn.BatchNorm2d on [C, H, W]: each channel
 * (feature) normalised by the batch's mean and biased variance in
 * training, by the running statistics in evaluation, then scaled by weight
 * (gamma, ones at first) and shifted by bias (beta, zeros) unless
 * affine=false.  The running statistics move in training by momentum
 * towards the batch's mean and unbiased variance, and num_batches_tracked
 * counts the batches: buffers, not parameters.  Forward keeps the batch's
 * mean and 1/std per channel ("stats") for backward; the memory plan
 * gives an aux per sample, so it reserves 2C floats a sample and uses the
 * first 2C.  Either layout: a channel's values lie at [n, C, HW] or, after
 * a convolution, channel first at [C, n, HW] (runtime's nrt_bn). */

enum { BN_EPS, BN_MOMENTUM, BN_AFFINE };

static bool batchnorm_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    bool two_d = !strcmp(n->op->sig.name, "batchnorm2d");
    if (two_d && s->rank != 3) {
        diag_error(p->diag, n->stmt->call->loc,
                   "batchnorm2d expects an image input [channels, height, width], got %s",
                   shape_str(p->arena, s));
        if (s->rank == 1)
            diag_note(p->diag, n->stmt->call->loc, "use batchnorm1d for a flat input");
        return false;
    }
    if (!two_d && s->rank != 1) {
        diag_error(p->diag, n->stmt->call->loc, "batchnorm1d expects a flat input [features], got %s",
                   shape_str(p->arena, s));
        diag_note(p->diag, n->stmt->call->loc, s->rank == 3
                  ? "use batchnorm2d for an image input, or insert 'flatten' before this layer"
                  : "insert 'flatten' before this layer");
        return false;
    }
    same_shape(p, n);
    int64_t C = s->d[0];
    if (arg(n, BN_AFFINE)) {
        int w = ir_add_param(p, n, "weight", 1, (int64_t[]){C}, (int)C, (int)C, false);
        int b = ir_add_param(p, n, "bias", 1, (int64_t[]){C}, (int)C, (int)C, true);
        p->params[w].init.kind = NRT_INIT_ONES;
        p->params[b].init.kind = NRT_INIT_ZEROS;
    }
    ir_add_buffer(p, n, "running_mean", NRT_F32, 1, (int64_t[]){C}, 0.0f);
    ir_add_buffer(p, n, "running_var", NRT_F32, 1, (int64_t[]){C}, 1.0f);
    ir_add_buffer(p, n, "num_batches_tracked", NRT_I64, 0, NULL, 0.0f);
    n->aux_size = 2 * C;
    return true;
}

/* C, HW (1 for batchnorm1d) and whether the input is channel first */
static struct bn { long long C, HW; int cn; } bn_of(const Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    return (struct bn){s->d[0], s->rank == 3 ? s->d[1] * s->d[2] : 1, input_cn(e, n)};
}

static void bn_geometry(Emit *e, const Node *n)
{
    struct bn g = bn_of(e, n);
    emitf(e, "static const nrt_bn g = {.c = %lld, .hw = %lld, .cn = %d, .eps = %s, .momentum = %s};",
          g.C, g.HW, g.cn, c_double(e->arena, arg(n, BN_EPS)), c_double(e->arena, arg(n, BN_MOMENTUM)));
}

static void batchnorm_fwd(Emit *e, const Node *n)
{
    const char *wb = n->nparams ? "W, b" : "NULL, NULL";
    bn_geometry(e, n);
    emitf(e, "if (net->training) /* the batch's statistics; the running ones move */");
    emitf(e, "    nrt_batchnorm_train(&g, n, x, %s, running_mean, running_var, num_batches_tracked,", wb);
    emitf(e, "                        stats, y);");
    emitf(e, "else");
    emitf(e, "    nrt_batchnorm_eval(&g, n, x, %s, running_mean, running_var, y);", wb);
}

static void batchnorm_bwd(Emit *e, const Node *n)
{
    bn_geometry(e, n);
    emitf(e, "nrt_batchnorm_bwd(&g, n, x, dy, %s, stats, %s, dx);", n->nparams ? "W" : "NULL",
          n->nparams ? "dW, db" : "NULL, NULL");
}

/* batchnorm: a block of BN_THREADS threads a channel (nrt_k::batchnorm_*),
 * its sums in a fixed order; eps and momentum written into the kernels */
#define BN_THREADS 256

static const char *bn_targs(Emit *e, const Node *n)
{
    struct bn g = bn_of(e, n);
    return arena_printf(e->arena, "%lld, %lld, %s, %d", g.C, g.HW, g.cn ? "true" : "false",
                        BN_THREADS);
}

static void batchnorm_cu_fwd(Emit *e, const Node *n)
{
    bool affine = n->nparams > 0;
    const char *wb = affine ? "W, b" : "nullptr, nullptr", *eps = c_double(e->arena, arg(n, BN_EPS));
    const char *wbp = affine ? "const float *W, const float *b, " : "";
    const char *train = cu_call(
        e, n, "fwd_train", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, %sfloat *running_mean, float *running_var, "
                     "long long *num_batches_tracked, float *stats, float *y", wbp),
        arena_printf(e->arena, "nrt_k::batchnorm_train<%s>(n, x, %s, running_mean, running_var, "
                     "num_batches_tracked, stats, y, %s, %s);", bn_targs(e, n), wb, eps,
                     c_double(e->arena, arg(n, BN_MOMENTUM))));
    const char *eval = cu_call(
        e, n, "fwd_eval", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, %sconst float *running_mean, "
                     "const float *running_var, float *y", wbp),
        arena_printf(e->arena, "nrt_k::batchnorm_eval<%s>(n, x, %s, running_mean, running_var, y, "
                     "%s);", bn_targs(e, n), wb, eps));
    const char *wba = affine ? "&W, &b, " : "";
    long long C = bn_of(e, n).C;
    emitf(e, "if (net->training) /* the batch's statistics; the running ones move */");
    emitf(e, "    TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, %s&running_mean, "
          "&running_var,", train, C, BN_THREADS, wba);
    emitf(e, "                      &num_batches_tracked, &stats, &y), err));");
    emitf(e, "else");
    emitf(e, "    TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, %s&running_mean, "
          "&running_var, &y),", eval, C, BN_THREADS, wba);
    emitf(e, "                      err));");
}

static void batchnorm_cu_bwd(Emit *e, const Node *n)
{
    bool affine = n->nparams > 0;
    const char *k = cu_call(
        e, n, "bwd", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, const float *dy, %sconst float *stats, "
                     "%sfloat *dx", affine ? "const float *W, " : "",
                     affine ? "float *dW, float *db, " : ""),
        arena_printf(e->arena, "nrt_k::batchnorm_bwd<%s>(n, x, dy, %s, stats, %s, dx);",
                     bn_targs(e, n), affine ? "W" : "nullptr", affine ? "dW, db" : "nullptr, nullptr"));
    emitf(e, "TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, &dy, %s&stats, %s&dx), "
          "err));", k, bn_of(e, n).C, BN_THREADS, affine ? "&W, " : "", affine ? "&dW, &db, " : "");
}

/* A batch normalization: its arguments and passes (1d or 2d by its name). */
#define BATCHNORM(name, summary)                                                            \
    .sig = {name, summary,                                                                  \
            {{"eps", A_NUM, "1e-05", 0, BIG, NULL, NULL},                                   \
             {"momentum", A_NUM, "0.1", 0, 1, NULL, NULL},                                  \
             {"affine", A_BOOL, "true", 0, 1, NULL, NULL}}},                                \
    .shape = batchnorm_shape, .emit_fwd = batchnorm_fwd, .emit_bwd = batchnorm_bwd,         \
    .aux_name = "stats", .layout = LAYOUT_KEEP, .cu_fwd = batchnorm_cu_fwd,                 \
    .cu_bwd = batchnorm_cu_bwd

const OpDef op_batchnorm1d = {
    BATCHNORM("batchnorm1d", "per-feature batch normalization of a flat input (nn.BatchNorm1d)")};
const OpDef op_batchnorm2d = {
    BATCHNORM("batchnorm2d", "per-channel batch normalization of an image (nn.BatchNorm2d)")};
