/*
 * ops/flatten.c — flatten: a view of a [C, H, W] value, or a transpose of a channel-first one.
 */
#include "ops.h"

#include <string.h>

static bool flatten_shape(Program *p, Node *n)
{
    *out_shape(p, n) = (Shape){1, {shape_size(in_shape(p, n))}};
    return true;
}

/* Only reached for a channel-first input (otherwise flatten is a view):
 * [C, n, HW] -> [n, C*HW], and back for the gradient. */
static void flatten_fwd(Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    emitf(e, "/* [%lld, n, %lld] (channel first) -> [n, %lld] */", C, HW, C * HW);
    emitf(e, "for (int c = 0; c < %lld; c++)", C);
    emitf(e, "    for (int i = 0; i < n; i++)");
    emitf(e, "        memcpy(y + (size_t)i * %lld + (size_t)c * %lld, x + ((size_t)c * n + i) * %lld,",
          C * HW, HW, HW);
    emitf(e, "               sizeof(float) * %lld);", HW);
}

static void flatten_bwd(Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emitf(e, "for (int c = 0; c < %lld; c++)", C);
    emitf(e, "    for (int i = 0; i < n; i++)");
    emitf(e, "        memcpy(dx + ((size_t)c * n + i) * %lld, dy + (size_t)i * %lld + (size_t)c * %lld,",
          HW, C * HW, HW);
    emitf(e, "               sizeof(float) * %lld);", HW);
}

/* flatten of a channel-first value: the transposes [C, n, HW] <-> [n, C*HW] */
static void cu_flatten(Emit *e, const Node *n, bool bwd)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    const char *k = cu_call(e, n, bwd ? "bwd" : "fwd", 0,
                            "int total, int n, const float *x, float *y",
                            arena_printf(e->arena, "nrt_k::%s<%lld, %lld>(n, total, x, y);",
                                         bwd ? "nc_to_cn" : "cn_to_nc", C, HW));
    if (bwd) {
        emitf(e, "if (dx)");
        emitf(e, "    TRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(&n, &dy, &dx), "
              "err));", k, C * HW);
    } else {
        emitf(e, "/* [%lld, n, %lld] (channel first) -> [n, %lld] */", C, HW, C * HW);
        emitf(e, "TRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(&n, &x, &y), err));",
              k, C * HW);
    }
}

static void flatten_cu_fwd(Emit *e, const Node *n) { cu_flatten(e, n, false); }

static void flatten_cu_bwd(Emit *e, const Node *n) { cu_flatten(e, n, true); }

const OpDef op_flatten = {
    .sig = {"flatten", "[C, H, W] -> [C*H*W] (nn.Flatten)", NOARGS},
    .shape = flatten_shape, .emit_fwd = flatten_fwd, .emit_bwd = flatten_bwd, .is_view = true,
    .layout = LAYOUT_NC, .cu_fwd = flatten_cu_fwd, .cu_bwd = flatten_cu_bwd,
    .selects = selects_always};
