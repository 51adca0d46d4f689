/*
 * ops/concat.c — concat(NAME): y = torch.cat((x, s), dim=1), x the output
 * of the layer before and s that of the earlier layer named NAME, joined
 * along the first dimension of a sample: an image's channels ([C, H, W],
 * the heights and widths equal), a flat vector's features.  x's part
 * comes first.
 *
 * Layouts (fuse.c): y is laid out as x is.  Sample first, [n, ...], a
 * sample of y is x's sample then s's: value i of a part of P floats a
 * sample lies at i / P * Y + i % P of the part's start (Y, y's floats a
 * sample).  Channel first, [C, n, H, W], y's channels are x's then s's,
 * each a block of the whole batch: x's part is the first n X floats of y,
 * s's the n S after, value i at i.  s in the other layout than x (an
 * image made before any convolution joined to one made after) has its
 * value i (channel c, sample j, position k of HW) at its place in y's
 * order: c n HW + j HW + k channel first, j Y + c HW + k sample first.
 *
 * Backward: d x and d s are the two parts of d y, copied out; d x in a
 * buffer of its own (concat is not elementwise: the memory plan gives d x
 * another buffer than d y's), d s like add's d s: copied, or added where
 * a later reader of s gave it a part first (Node.skip_acc).  In a bf16
 * run d s is rounded where s is bf16 and y is not (autograd casts a
 * gradient to its input's type; an fp32 y's gradient is fp32), and its
 * sum where s is bf16, as add's; d x as every layer's.
 */
#include "ops.h"

#include <string.h>

enum { CONCAT_NAME };

static bool concat_shape(Program *p, Node *n)
{
    if (second_input(p, n, &n->args[CONCAT_NAME]) < 0)
        return false;
    const Shape *x = in_shape(p, n), *s = &p->values[n->in2].shape;
    const char *why = NULL;
    if (x->rank != s->rank)
        why = x->rank == 1 || s->rank == 1 ? "one is flat and the other is not"
                                           : "the numbers of dimensions differ";
    else if (x->rank > 1 && memcmp(x->d + 1, s->d + 1, sizeof(int64_t) * (size_t)(x->rank - 1)))
        why = x->rank == 3 ? "the heights and widths differ (concat joins channels)"
                           : "the dimensions after the first differ (concat joins the first)";
    if (why) {
        operands_error(p, n, why);
        return false;
    }
    Shape *y = out_shape(p, n);
    *y = *x;
    y->d[0] = x->d[0] + s->d[0];
    return true;
}

/* The floats a sample of x's and of s's parts. */
static int64_t x_size(const Emit *e, const Node *n)
{
    return e->p->values[n->in].size;
}

static int64_t s_size(const Emit *e, const Node *n)
{
    return e->p->values[n->in2].size;
}

/* Where value i of a part of `part` floats a sample lies in y (or d y),
 * from the part's start. */
static const char *at(Emit *e, const Node *n, int64_t part)
{
    if (input_cn(e, n))
        return "i";
    return arena_printf(e->arena, "i / %lld * %lld + i %% %lld", (long long)part,
                        (long long)value_size(e, n), (long long)part);
}

/* Where s's value i lies in y (or d y) from s's part's start: as at(),
 * or, s laid out otherwise than x (and y), at its place in y's order */
static const char *s_at(Emit *e, const Node *n)
{
    const IrValue *s = &e->p->values[n->in2];
    if (s->cn == e->p->values[n->in].cn)
        return at(e, n, s_size(e, n));
    const long long c = s->shape.d[0], hw = s->shape.d[1] * s->shape.d[2];
    if (s->cn) /* into a sample-first y: i = (c, j, k) */
        return arena_printf(e->arena, "i / ((size_t)n * %lld) * %lld + i / %lld %% (size_t)n * %lld + "
                            "i %% %lld", hw, hw, hw, (long long)value_size(e, n), hw);
    /* into a channel-first y: i = (j, c, k) */
    return arena_printf(e->arena, "i / %lld * %lld + i / %lld %% %lld * ((size_t)n * %lld) + i %% %lld",
                        c * hw, hw, hw, c, hw, hw);
}

/* s's kernel's parameters: the batch size after them where s_at reads it */
static const char *s_params(Emit *e, const Node *n, const char *params)
{
    return strstr(s_at(e, n), "(size_t)n") ? arena_printf(e->arena, "%s, int n", params) : params;
}

/* The C of the start of s's part of y (or d y: base "dy"). */
static const char *s_part(Emit *e, const Node *n, const char *base)
{
    if (input_cn(e, n))
        return arena_printf(e->arena, "%s + (size_t)n * %lld", base, (long long)x_size(e, n));
    return arena_printf(e->arena, "%s + %lld", base, (long long)x_size(e, n));
}

/* The statement giving d s its part of d y: copied, or added (the sum
 * rounded where s is bf16); the part rounded where s is bf16 and y is not
 * (y is bf16 only where both operands are). */
static const char *ds_update(Emit *e, const Node *n)
{
    const IrValue *s = &e->p->values[n->in2];
    const char *part = arena_printf(e->arena, "dys[%s]", s_at(e, n));
    if (s->lowp && !e->p->values[n->out].lowp)
        part = lowp_expr(e, part);
    if (!n->skip_acc)
        return arena_printf(e->arena, "ds[i] = %s;", part);
    const char *sum = arena_printf(e->arena, "ds[i] + %s", part);
    return arena_printf(e->arena, "ds[i] = %s;", s->lowp ? lowp_expr(e, sum) : sum);
}

/* (d x is rounded where x is bf16 after the pass, or where it is added:
 * emit_c.c's emit_lowp_bwd, emit_grad_part) */
static const char *dx_update(Emit *e, const Node *n)
{
    return arena_printf(e->arena, "dx[i] = dy[%s];", at(e, n, x_size(e, n)));
}

/* The locals of both passes: s's memory, and where s's part of y (ys) or
 * of d y (dys) starts. */
static void emit_locals(Emit *e, const Node *n, bool bwd)
{
    const char *name = n->args[CONCAT_NAME].s;
    if (bwd) {
        emitf(e, "float *ds = %s; /* d '%s'%s */", operand_grad(e, n), name,
              n->skip_acc ? ", added to what its later reader gave" : "");
        emitf(e, "const float *dys = %s; /* its part of d y */", s_part(e, n, "dy"));
    } else {
        emitf(e, "const float *s = %s; /* '%s' */", value_memory(e, n->in2), name);
        emitf(e, "float *ys = %s; /* its part of y, after x's */", s_part(e, n, "y"));
    }
}

static void concat_fwd(Emit *e, const Node *n)
{
    emit_locals(e, n, false);
    emit_each(e, x_size(e, n));
    emitf(e, "    y[%s] = x[i];", at(e, n, x_size(e, n)));
    emit_each(e, s_size(e, n));
    emitf(e, "    ys[%s] = s[i];", s_at(e, n));
}

static void concat_bwd(Emit *e, const Node *n)
{
    emit_locals(e, n, true);
    emit_each(e, s_size(e, n));
    emitf(e, "    %s", ds_update(e, n));
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emit_each(e, x_size(e, n));
    emitf(e, "    %s", dx_update(e, n));
}

/* An elementwise kernel whose parameters take the run's lowp where its
 * statement rounds. */
static void cu_part(Emit *e, const Node *n, const char *what, int64_t size, const char *params,
                    const char *stmt)
{
    const char *body[1] = {stmt};
    cu_each(e, n, what, batch_count(e, (long long)size),
            strstr(stmt, "lowp") ? cu_lowp(e, params) : params, body, 1);
}

static void concat_cu_fwd(Emit *e, const Node *n)
{
    emit_locals(e, n, false);
    cu_part(e, n, "fwd_x", x_size(e, n), "const float *x, float *y",
            arena_printf(e->arena, "y[%s] = x[i];", at(e, n, x_size(e, n))));
    cu_part(e, n, "fwd_s", s_size(e, n), s_params(e, n, "const float *s, float *ys"),
            arena_printf(e->arena, "ys[%s] = s[i];", s_at(e, n)));
}

static void concat_cu_bwd(Emit *e, const Node *n)
{
    emit_locals(e, n, true);
    cu_part(e, n, "bwd_s", s_size(e, n), s_params(e, n, "const float *dys, float *ds"),
            ds_update(e, n));
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    cu_part(e, n, "bwd_x", x_size(e, n), "const float *dy, float *dx", dx_update(e, n));
}

const OpDef op_concat = {
    .sig = {"concat", "(x, NAME) joined along the channels or features: the layer before's "
            "output, then an earlier layer's (torch.cat(dim=1))",
            {{"name", A_NAME, NULL, 0, 0, NULL, NULL}}},
    .shape = concat_shape, .emit_fwd = concat_fwd, .emit_bwd = concat_bwd,
    .layout = LAYOUT_KEEP, .cu_fwd = concat_cu_fwd, .cu_bwd = concat_cu_bwd};
