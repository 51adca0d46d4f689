/*
 * ops/add.c — add(NAME): the residual sum y = x + s, x the output of the
 * layer before and s that of the earlier layer named NAME (`h = relu`
 * names one), as a ResNet block adds its input to its last convolution's
 * output.  s may be smaller, repeated along x as PyTorch broadcasts it
 * (ops.c's broadcast_operands: a squeeze-and-excitation gate's [C, 1, 1]
 * onto [C, H, W], a [1] onto [F]).
 *
 * Backward: d x = d y, in place (add reads and writes no other memory for
 * it); s gets d y as well: copied into its gradient's buffer, or added to
 * it where a later reader of s gave it a part first (the memory plan,
 * fuse.c, says which: Node.skip_acc), the sum rounded in a bf16 run as
 * autograd's sum of two bf16 gradients is.  Broadcast, each value of s
 * gets the sum of d y over the values it was added to (ops.c's bcast_ds).
 */
#include "ops.h"

enum { ADD_NAME };

static bool add_shape(Program *p, Node *n)
{
    return broadcast_operands(p, n, &n->args[ADD_NAME]);
}

/* The memory of s, the named layer's output, inside a pass. */
static void emit_s(Emit *e, const Node *n, const char *decl)
{
    emitf(e, "%s = %s; /* '%s' */", decl, value_memory(e, n->in2), n->args[ADD_NAME].s);
}

/* The statement giving d s d y: copied, or added (the sum rounded in a
 * bf16 run where s is bf16); d y itself rounded where s is bf16 and y is
 * not (an fp32 sum's gradient is fp32; autograd casts s's part to s's
 * type, as the broadcast's sum is rounded); whether it rounds. */
static bool part_rounds(const Emit *e, const Node *n)
{
    return e->p->values[n->in2].lowp && !e->p->values[n->out].lowp;
}

static bool ds_rounds(const Emit *e, const Node *n)
{
    return (n->skip_acc && e->p->values[n->in2].lowp) || part_rounds(e, n);
}

static const char *ds_update(Emit *e, const Node *n)
{
    const char *part = part_rounds(e, n) ? lowp_expr(e, "dy[i]") : "dy[i]";
    if (!n->skip_acc)
        return arena_printf(e->arena, "ds[i] = %s;", part);
    const char *sum = arena_printf(e->arena, "ds[i] + %s", part);
    return arena_printf(e->arena, "ds[i] = %s;",
                        e->p->values[n->in2].lowp ? lowp_expr(e, sum) : sum);
}

/* y's value i: x[i] + s[i], or s's value broadcast onto x's i */
static const char *add_expr(Emit *e, const Node *n)
{
    return arena_printf(e->arena, "y[i] = x[i] + s[%s];",
                        broadcasts(e, n) ? bcast(e, n).s_at : "i");
}

static void add_fwd(Emit *e, const Node *n)
{
    emit_s(e, n, "const float *s");
    emit_each(e, value_size(e, n));
    emitf(e, "    %s", add_expr(e, n));
}

static void add_bwd(Emit *e, const Node *n)
{
    emitf(e, "(void)dx; /* d x = d y, the same buffer */");
    emitf(e, "float *ds = %s; /* d '%s'%s */", operand_grad(e, n), n->args[ADD_NAME].s,
          n->skip_acc ? ", added to what its later reader gave" : "");
    if (broadcasts(e, n)) {
        emit_bcast_ds(e, n, "dy[at]");
        return;
    }
    emit_each(e, value_size(e, n));
    emitf(e, "    %s", ds_update(e, n));
}

static void add_cu_fwd(Emit *e, const Node *n)
{
    emit_s(e, n, "const float *s");
    const char *body[1] = {add_expr(e, n)};
    cu_each(e, n, "fwd", batch_count(e, (long long)value_size(e, n)),
            bcast_params(e, n, "const float *x, const float *s, float *y"),
            body, 1);
}

static void add_cu_bwd(Emit *e, const Node *n)
{
    emitf(e, "float *ds = %s; /* d '%s' */", operand_grad(e, n), n->args[ADD_NAME].s);
    if (broadcasts(e, n)) {
        cu_bcast_ds(e, n, "bwd", "dy[at]", "const float *dy, float *ds");
        return;
    }
    const char *body[1] = {ds_update(e, n)};
    const char *params = ds_rounds(e, n) ? cu_lowp(e, "const float *dy, float *ds")
                                         : "const float *dy, float *ds";
    cu_each(e, n, "bwd", batch_count(e, (long long)value_size(e, n)), params, body, 1);
}

const OpDef op_add = {
    .sig = {"add", "x + NAME: the layer before's output plus an earlier layer's (a residual)",
            {{"name", A_NAME, NULL, 0, 0, NULL, NULL}}},
    .shape = add_shape, .emit_fwd = add_fwd, .emit_bwd = add_bwd, .elementwise = true,
    .layout = LAYOUT_KEEP, .cu_fwd = add_cu_fwd, .cu_bwd = add_cu_bwd};
