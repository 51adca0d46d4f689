/*
 * ops/linear.c — linear: y = x W^T + b, on the cpu (nrt_gemm) and the GPU (cuBLAS).
 */
#include "ops.h"

#include <string.h>

enum { LIN_OUT, LIN_BIAS };

static bool linear_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    if (s->rank != 1) {
        diag_error(p->diag, n->stmt->call->loc, "linear expects a flat input, got %s",
                   shape_str(p->arena, s));
        if (s->rank == 2)
            diag_note(p->diag, n->stmt->call->loc, "insert 'flatten' before this layer, or "
                      "'rnn(HIDDEN)' to read the %lld steps as a sequence", (long long)s->d[0]);
        else
            diag_note(p->diag, n->stmt->call->loc, "insert 'flatten' before this layer");
        return false;
    }
    int64_t in = s->d[0], out = (int64_t)arg(n, LIN_OUT);
    *out_shape(p, n) = (Shape){1, {out}};
    ir_add_param(p, n, "weight", 2, (int64_t[]){out, in}, (int)in, (int)out, false);
    if (arg(n, LIN_BIAS))
        ir_add_param(p, n, "bias", 1, (int64_t[]){out}, (int)in, (int)out, true);
    return true;
}

static void linear_fwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emitf(e, "/* y[n, %lld] = x[n, %lld] W^T */", M, K);
    emitf(e, "nrt_gemm(net->dot, 0, 1, n, %lld, %lld, 1.0f, x, %lld, W, %lld, 0.0f, y, %lld);",
          M, K, K, K, M);
    emit_epilogue(e, n, "(size_t)n", arena_printf(e->arena, "(size_t)%lld", M), "b[k]");
}

static void linear_bwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emit_act_grad(e, n, M);
    emitf(e, "/* dW[%lld, %lld] = dy^T x */", M, K);
    emitf(e, "nrt_gemm(net->dot, 1, 0, %lld, %lld, n, 1.0f, dy, %lld, x, %lld, 0.0f, dW, %lld);",
          M, K, M, K, K);
    if (n->nparams > 1)
        emitf(e, "nrt_col_sums(dy, n, %lld, db);", M);
    emitf(e, "/* dx[n, %lld] = dy W */", K);
    emitf(e, "if (dx)");
    emitf(e, "    nrt_gemm(net->dot, 0, 0, n, %lld, %lld, 1.0f, dy, %lld, W, %lld, 0.0f, dx, %lld);",
          K, M, M, K, K);
}

static void linear_cu_fwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emitf(e, "/* y[n, %lld] = x[n, %lld] W^T (cuBLAS) */", M, K);
    emitf(e, "TRY(nrt_cu_gemm(net, 0, 1, n, %lld, %lld, 1.0f, x, %lld, W, %lld, 0.0f, y, %lld, err));",
          M, K, K, K, M);
    cu_epilogue(e, n, batch_count(e, M), arena_printf(e->arena, "i %% %lld", M), false);
}

static void linear_cu_bwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    cu_act_grad(e, n, batch_count(e, M));
    emitf(e, "/* dW[%lld, %lld] = dy^T x */", M, K);
    emitf(e, "TRY(nrt_cu_gemm(net, 1, 0, %lld, %lld, n, 1.0f, dy, %lld, x, %lld, 0.0f, dW, %lld, err));",
          M, K, M, K, K);
    if (n->nparams > 1)
        emitf(e, "TRY(nrt_cu_col_sums(net, dy, n, %lld, db, err));", M);
    emitf(e, "/* dx[n, %lld] = dy W */", K);
    emitf(e, "if (dx)");
    emitf(e, "    TRY(nrt_cu_gemm(net, 0, 0, n, %lld, %lld, 1.0f, dy, %lld, W, %lld, 0.0f, dx, %lld, err));",
          K, M, M, K, K);
}

const OpDef op_linear = {
    .sig = {"linear", "y = x W^T + b (nn.Linear; in_features from the input)",
            {SIZE("out_features"), {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
    .shape = linear_shape, .emit_fwd = linear_fwd, .emit_bwd = linear_bwd,
    .takes_epilogue = true, .layout = LAYOUT_NC, .cu_fwd = linear_cu_fwd,
    .cu_bwd = linear_cu_bwd, .product = true, .cu_gemm = true, .rounds_output = true};
