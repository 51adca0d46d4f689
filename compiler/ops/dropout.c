/*
 * ops/dropout.c — dropout: Philox masks (philox.h), the same on the cpu and the GPU.
 */
#include "ops.h"

#include <string.h>

static bool dropout_shape(Program *p, Node *n)
{
    same_shape(p, n);
    n->aux_size = shape_size(in_shape(p, n));
    return true;
}

/* In training, each value is kept with probability 1 - p and scaled by
 * 1 / (1 - p) (PyTorch's inverted dropout); in evaluation y = x. */
static void dropout_fwd(Emit *e, const Node *n)
{
    long long size = (long long)value_size(e, n);
    emitf(e, "if (!net->training) {");
    emitf(e, "    memcpy(y, x, sizeof(float) * (size_t)n * %lld);", size);
    emitf(e, "    return;");
    emitf(e, "}");
    emitf(e, "/* masks (philox.h): a function of the run's dropout key, layer %d, the step */",
          n->index);
    emitf(e, "nrt_dropout_fwd(net, %d, x, y, mask, (size_t)n * %lld, %s);", n->index, size,
          c_double(e->arena, arg(n, 0)));
}

static void dropout_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emit_each(e, value_size(e, n));
    emitf(e, "    dx[i] = dy[i] * mask[i];");
}

static void dropout_cu_fwd(Emit *e, const Node *n)
{
    const char *count = batch_count(e, (long long)value_size(e, n));
    emitf(e, "if (!net->training) {");
    e->indent++;
    const char *body[1] = {"y[i] = x[i];"};
    cu_each(e, n, "fwd_eval", count, "const float *x, float *y", body, 1);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emitf(e, "/* masks (philox.h): a function of the run's dropout key, layer %d, the step */",
          n->index);
    emitf(e, "TRY(nrt_cu_dropout_fwd(net, %d, x, y, mask, %s, %s, err));", n->index, count,
          c_double(e->arena, arg(n, 0)));
}

static void dropout_cu_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    const char *body[1] = {"dx[i] = dy[i] * mask[i];"};
    cu_each(e, n, "bwd", batch_count(e, (long long)value_size(e, n)),
            "const float *dy, const float *mask, float *dx", body, 1);
}

const OpDef op_dropout = {
    .sig = {"dropout", "zeroes each value with probability p in training (nn.Dropout)",
            {{"p", A_NUM, "0.5", 0, 1, NULL, NULL}}},
    .shape = dropout_shape, .emit_fwd = dropout_fwd, .emit_bwd = dropout_bwd, .aux_name = "mask",
    .elementwise = true, .layout = LAYOUT_KEEP, .cu_fwd = dropout_cu_fwd,
    .cu_bwd = dropout_cu_bwd};
