/*
 * ops/pool.c — maxpool2d and avgpool2d.
 */
#include "ops.h"

#include <string.h>

enum { PL_KERNEL, PL_STRIDE, PL_PAD };

static bool pool_shape(Program *p, Node *n)
{
    if (!need_image(p, n))
        return false;
    const Shape *s = in_shape(p, n);
    int k = (int)arg(n, PL_KERNEL);
    if (!n->args[PL_STRIDE].given)
        n->args[PL_STRIDE].v[0] = k;
    int st = (int)arg(n, PL_STRIDE), pad = (int)arg(n, PL_PAD);
    if (2 * pad > k) {
        diag_error(p->diag, n->args[PL_PAD].loc,
                   "%s padding %d is more than half the kernel size %d",
                   n->op->sig.name, pad, k);
        return false;
    }
    int64_t oh, ow;
    if (!window(p, n, s->d[1], k, st, pad, "height", &oh) ||
        !window(p, n, s->d[2], k, st, pad, "width", &ow))
        return false;
    *out_shape(p, n) = (Shape){3, {s->d[0], oh, ow}};
    if (!strcmp(n->op->sig.name, "maxpool2d"))
        n->iaux_size = s->d[0] * oh * ow;
    return true;
}

#define POOL_ARGS "n, %lld, %lld, %lld, %d, %d, %d, %lld, %lld"

static void pool_fwd(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    bool max = n->iaux_size > 0;
    emitf(e, "nrt_%s_fwd(x, " POOL_ARGS ", y%s);", n->op->sig.name,
          (long long)i->d[0], (long long)i->d[1], (long long)i->d[2], (int)arg(n, PL_KERNEL),
          (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD), (long long)o->d[1], (long long)o->d[2],
          max ? ", arg" : "");
}

static void pool_bwd(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emitf(e, "nrt_%s_bwd(dy, %s" POOL_ARGS ", dx);", n->op->sig.name,
          n->iaux_size > 0 ? "arg, " : "", (long long)i->d[0], (long long)i->d[1],
          (long long)i->d[2], (int)arg(n, PL_KERNEL), (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD),
          (long long)o->d[1], (long long)o->d[2]);
}

/* H, W, OH, OW, K, S, P */
static const char *pool_targs(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    return arena_printf(e->arena, "%lld, %lld, %lld, %lld, %d, %d, %d", (long long)i->d[1],
                        (long long)i->d[2], (long long)o->d[1], (long long)o->d[2],
                        (int)arg(n, PL_KERNEL), (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD));
}

/* A pooling pass: one thread an output value (forward) or an input value
 * (backward), over the n*C planes whatever the layout. */
static void cu_pool(Emit *e, const Node *n, bool bwd)
{
    const Shape *in = &e->p->values[n->in].shape, *out = &e->p->values[n->out].shape;
    /* the template's parameters after the count, by pass and kind (max
     * pooling keeps its argmax) */
    static const char *const params_of[2][2] = {
        {"const float *x, float *y", "const float *x, float *y, int32_t *arg"},
        {"const float *dy, float *dx", "const float *dy, const int32_t *arg, float *dx"}};
    const char *params = params_of[bwd][n->iaux_size > 0];
    const char *k = cu_call(e, n, bwd ? "bwd" : "fwd", 0,
                            arena_printf(e->arena, "int total, %s", params),
                            arena_printf(e->arena, "nrt_k::%s_%s<%s>(total, %s);", n->op->sig.name,
                                         bwd ? "bwd" : "fwd", pool_targs(e, n),
                                         param_names(e, params, "")));
    const Shape *s = bwd ? in : out;
    if (bwd)
        emitf(e, "if (dx)");
    emitf(e, "%sTRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(%s), err));",
          bwd ? "    " : "", k, (long long)shape_size(s), param_names(e, params, "&"));
}

static void pool_cu_fwd(Emit *e, const Node *n) { cu_pool(e, n, false); }

static void pool_cu_bwd(Emit *e, const Node *n) { cu_pool(e, n, true); }

/* A pooling layer: its arguments and passes (max or average by its name). */
#define POOLING(name, summary)                                                              \
    .sig = {name, summary,                                                                  \
            {{"kernel", A_INT, NULL, 1, 4096, "kernel_size", NULL},                         \
             {"stride", A_INT, "", 1, 4096, NULL, NULL},                                    \
             {"padding", A_INT, "0", 0, 4096, NULL, NULL}}},                                \
    .shape = pool_shape, .emit_fwd = pool_fwd, .emit_bwd = pool_bwd, .layout = LAYOUT_KEEP, \
    .cu_fwd = pool_cu_fwd, .cu_bwd = pool_cu_bwd

/* A max pool's output is some of its input's values; its d input holds d
 * output's values and zeros where no two windows share an input value */
static bool maxpool_selects(const Program *p, const Node *n, bool bwd)
{
    (void)p;
    return !bwd || arg(n, PL_KERNEL) <= arg(n, PL_STRIDE);
}

const OpDef op_maxpool2d = {POOLING("maxpool2d", "max pooling (nn.MaxPool2d; stride defaults to kernel)"),
                            .selects = maxpool_selects, .picks_max = true};
const OpDef op_avgpool2d = {POOLING("avgpool2d", "average pooling (nn.AvgPool2d, count_include_pad=True)")};
