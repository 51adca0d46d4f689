/*
 * ops/mul.c — mul(NAME): the elementwise product y = x * s, x the output
 * of the layer before and s that of the earlier layer named NAME (a gate,
 * as a sigmoid's output gating a value), of the same shape, or smaller
 * and repeated along x as PyTorch broadcasts it (ops.c's
 * broadcast_operands: a squeeze-and-excitation gate's [C, 1, 1] onto
 * [C, H, W], a spatial attention map's [1, H, W]).
 *
 * Backward: d s = d y * x, then d x = d y * s, over d y (mul is
 * elementwise: the memory plan, fuse.c, writes d x in d y's buffer, so d s
 * reads d y first).  Both need the operands, which stay as forward left
 * them: every value the plan does not alias has memory of its own, and no
 * pass writes another's.  d s is written into its gradient's buffer, or
 * added to it where a later reader of s gave it a part first
 * (Node.skip_acc), as add's; in a bf16 run the product rounded where s is
 * bf16 (autograd's bf16 product, or its cast of an fp32 one to s's type),
 * and the sum as add's; d x as every layer's (emit_c.c's emit_lowp_bwd).
 * Broadcast, each value of s gets the sum of its parts over the values it
 * multiplied (ops.c's bcast_ds), each part rounded, then the sum.
 */
#include "ops.h"

enum { MUL_NAME };

static bool mul_shape(Program *p, Node *n)
{
    return broadcast_operands(p, n, &n->args[MUL_NAME]);
}

/* The memory of s, the named layer's output, inside a pass. */
static void emit_s(Emit *e, const Node *n)
{
    emitf(e, "const float *s = %s; /* '%s' */", value_memory(e, n->in2), n->args[MUL_NAME].s);
}

static void emit_ds(Emit *e, const Node *n)
{
    emitf(e, "float *ds = %s; /* d '%s'%s */", operand_grad(e, n), n->args[MUL_NAME].s,
          n->skip_acc ? ", added to what its later reader gave" : "");
}

/* d y x at index at, rounded where s is bf16 */
static const char *ds_part(Emit *e, const Node *n, const char *at)
{
    const char *part = arena_printf(e->arena, "dy[%s] * x[%s]", at, at);
    return e->p->values[n->in2].lowp ? lowp_expr(e, part) : part;
}

/* s's value for x's value i */
static const char *s_at(Emit *e, const Node *n)
{
    return arena_printf(e->arena, "s[%s]", broadcasts(e, n) ? bcast(e, n).s_at : "i");
}

/* The statement giving d s its part, d y x: written, or added; the part
 * and the sum rounded where s is bf16. */
static const char *ds_update(Emit *e, const Node *n)
{
    const bool lowp = e->p->values[n->in2].lowp;
    const char *part = ds_part(e, n, "i");
    if (!n->skip_acc)
        return arena_printf(e->arena, "ds[i] = %s;", part);
    const char *sum = arena_printf(e->arena, "ds[i] + %s", part);
    return arena_printf(e->arena, "ds[i] = %s;", lowp ? lowp_expr(e, sum) : sum);
}

static void mul_fwd(Emit *e, const Node *n)
{
    emit_s(e, n);
    emit_each(e, value_size(e, n));
    emitf(e, "    y[i] = x[i] * %s;", s_at(e, n));
}

static void mul_bwd(Emit *e, const Node *n)
{
    emit_s(e, n);
    emit_ds(e, n);
    emitf(e, "/* d s first: d x may be written over d y */");
    if (broadcasts(e, n)) {
        emit_bcast_ds(e, n, ds_part(e, n, "at"));
    } else {
        emit_each(e, value_size(e, n));
        emitf(e, "    %s", ds_update(e, n));
    }
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emit_each(e, value_size(e, n));
    emitf(e, "    dx[i] = dy[i] * %s;", s_at(e, n));
}

static void mul_cu_fwd(Emit *e, const Node *n)
{
    emit_s(e, n);
    const char *body[1] = {arena_printf(e->arena, "y[i] = x[i] * %s;", s_at(e, n))};
    cu_each(e, n, "fwd", batch_count(e, (long long)value_size(e, n)),
            bcast_params(e, n, "const float *x, const float *s, float *y"), body, 1);
}

static void mul_cu_bwd(Emit *e, const Node *n)
{
    emit_s(e, n);
    emit_ds(e, n);
    emitf(e, "/* d s first: d x may be written over d y */");
    const char *count = batch_count(e, (long long)value_size(e, n));
    const char *params = "const float *dy, const float *x, float *ds";
    if (broadcasts(e, n)) {
        cu_bcast_ds(e, n, "bwd_s", ds_part(e, n, "at"), params);
    } else {
        const char *ds_body[1] = {ds_update(e, n)};
        cu_each(e, n, "bwd_s", count, e->p->values[n->in2].lowp ? cu_lowp(e, params) : params,
                ds_body, 1);
    }
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    const char *dx_body[1] = {arena_printf(e->arena, "dx[i] = dy[i] * %s;", s_at(e, n))};
    cu_each(e, n, "bwd_x", count, bcast_params(e, n, "const float *dy, const float *s, float *dx"),
            dx_body, 1);
}

const OpDef op_mul = {
    .sig = {"mul", "x * NAME: the layer before's output times an earlier layer's, elementwise "
            "(a gate)",
            {{"name", A_NAME, NULL, 0, 0, NULL, NULL}}},
    .shape = mul_shape, .emit_fwd = mul_fwd, .emit_bwd = mul_bwd, .elementwise = true,
    .bwd_reads_x = true, .bwd_reads_s = true,
    .layout = LAYOUT_KEEP, .cu_fwd = mul_cu_fwd, .cu_bwd = mul_cu_bwd};
