/*
 * ops/act.c — the activations: each a forward expression of x and a backward one of dy
 * and what it declares it needs (netc.h's Act), through one pair of passes
 * for the cpu and the GPU, or fused into a linear's or conv2d's epilogue.
 */
#include "ops.h"

#include <string.h>

static const char *relu_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "%s > 0.0f ? %s : 0.0f", x, x);
}

static const char *relu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : 0.0f", y, dy);
}

static const char *leaky_f(Arena *a, const Node *n, const char *x)
{
    return arena_printf(a, "%s > 0.0f ? %s : %s * %s", x, x, c_float(a, arg(n, 0)), x);
}

static const char *leaky_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : %s * %s", y, dy, c_float(a, arg(n, 0)), dy);
}

static const char *tanh_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "tanhf(%s)", x);
}

static const char *tanh_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s * (1.0f - %s * %s)", dy, y, y);
}

static const char *sigmoid_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "1.0f / (1.0f + expf(-%s))", x);
}

static const char *sigmoid_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s * %s * (1.0f - %s)", dy, y, y);
}

/* nn.GELU: x Phi(x); dy (Phi(x) + x phi(x)), as PyTorch's GeluBackward.
 * approximate=tanh: Phi(x) ~ (1 + tanh(t)) / 2, t = sqrt(2/pi) (x + 0.044715
 * x^3), and its derivative so (PyTorch's formula). */
static bool gelu_tanh(const Node *n)
{
    return !strcmp(n->args[0].s, "tanh");
}

static const char *gelu_t(Arena *a, const char *x)
{
    return arena_printf(a, "tanhf(0.79788456f * (%s + 0.044715f * %s * %s * %s))", x, x, x, x);
}

static const char *gelu_f(Arena *a, const Node *n, const char *x)
{
    if (gelu_tanh(n))
        return arena_printf(a, "0.5f * %s * (1.0f + %s)", x, gelu_t(a, x));
    return arena_printf(a, "0.5f * %s * (1.0f + erff(%s * 0.70710678f))", x, x);
}

static const char *gelu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)y;
    if (gelu_tanh(n))
        return arena_printf(a, "%s * (0.5f * (1.0f + %s) + 0.5f * %s * (1.0f - %s * %s) * "
                               "0.79788456f * (1.0f + 0.134145f * %s * %s))",
                            dy, gelu_t(a, x), x, gelu_t(a, x), gelu_t(a, x), x, x);
    return arena_printf(a, "%s * (0.5f * (1.0f + erff(%s * 0.70710678f)) + "
                           "%s * 0.39894228f * expf(-0.5f * %s * %s))", dy, x, x, x, x);
}

/* nn.SiLU: x sigmoid(x); dy s (1 + x (1 - s)), s = sigmoid(x) */
static const char *silu_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "%s / (1.0f + expf(-%s))", x, x);
}

static const char *silu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)y;
    const char *s = arena_printf(a, "(1.0f / (1.0f + expf(-%s)))", x);
    return arena_printf(a, "%s * %s * (1.0f + %s * (1.0f - %s))", dy, s, x, s);
}

/* nn.ELU(alpha): x, or alpha (e^x - 1) at x <= 0; its derivative there is
 * y + alpha, so it needs y alone (alpha >= 0: y > 0 where x > 0) */
static const char *elu_f(Arena *a, const Node *n, const char *x)
{
    return arena_printf(a, "%s > 0.0f ? %s : %s * expm1f(%s)", x, x, c_float(a, arg(n, 0)), x);
}

static const char *elu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : %s * (%s + %s)", y, dy, dy, y,
                        c_float(a, arg(n, 0)));
}

/* nn.Softplus(beta, threshold): log(1 + e^(beta x)) / beta, x itself where
 * beta x > threshold; dy sigmoid(beta x) (1 there) */
static const char *softplus_f(Arena *a, const Node *n, const char *x)
{
    const char *beta = c_float(a, arg(n, 0)), *th = c_float(a, arg(n, 1));
    return arena_printf(a, "%s * %s > %s ? %s : log1pf(expf(%s * %s)) / %s", x, beta, th, x, x,
                        beta, beta);
}

static const char *softplus_b(Arena *a, const Node *n, const char *dy, const char *x,
                              const char *y)
{
    const char *beta = c_float(a, arg(n, 0)), *th = c_float(a, arg(n, 1));
    (void)y;
    return arena_printf(a, "%s * %s > %s ? %s : %s / (1.0f + expf(-%s * %s))", x, beta, th, dy,
                        dy, x, beta);
}

/* (relu's monotone: a comparison and a select, exact; leaky_relu's negative
 * slope, an argument, may be below 0, and tanh, sigmoid and elu are libm's
 * functions, not promised monotone to the last bit) */
static const Act relu_act = {relu_f, relu_b, NEEDS_Y, true},
                 leaky_act = {leaky_f, leaky_b, NEEDS_Y, false},
                 tanh_act = {tanh_f, tanh_b, NEEDS_Y, false},
                 sigmoid_act = {sigmoid_f, sigmoid_b, NEEDS_Y, false},
                 gelu_act = {gelu_f, gelu_b, NEEDS_X, false},
                 silu_act = {silu_f, silu_b, NEEDS_X, false},
                 elu_act = {elu_f, elu_b, NEEDS_Y, false},
                 softplus_act = {softplus_f, softplus_b, NEEDS_X, false};

static void act_fwd(Emit *e, const Node *n)
{
    emit_each(e, value_size(e, n));
    emitf(e, "    y[i] = %s;", n->op->act->fwd(e->arena, n, "x[i]"));
}

/* dy[i] read into g before the select: a load under relu's condition
 * (y[i] > 0 ? dy[i] : 0) kept GCC from vectorising the loop, dx possibly
 * not dy, and each value cost a branch, mispredicted every other one:
 * resnet20's relu passes were 23 % of its step (a test loop of 2^21
 * values on Zen 5, in place: 8.95 ms so, 0.23 ms with g). */
static void act_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    const Act *act = n->op->act;
    const char *lines[2] = {"float g = dy[i];", arena_printf(e->arena, "dx[i] = %s;",
                                                             act_grad(e->arena, n, act, "g", "x[i]", "y[i]"))},
               *lines16[2] = {lines[0], arena_printf(e->arena, "dx[i] = %s;",
                                                     act_grad(e->arena, n, act, "g", half_at(e, false),
                                                              half_at(e, true)))};
    emit_each_16(e, n, act->needs & NEEDS_Y, value_size(e, n), lines, lines16, 2);
}

static void act_cu_fwd(Emit *e, const Node *n)
{
    const char *body[1] = {arena_printf(e->arena, "y[i] = %s;", n->op->act->fwd(e->arena, n, "x[i]"))};
    cu_each(e, n, "fwd", batch_count(e, (long long)value_size(e, n)), "const float *x, float *y",
            body, 1);
}

static void act_cu_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    const Act *act = n->op->act;
    const char *body[1] = {arena_printf(e->arena, "dx[i] = %s;",
                                        act_grad(e->arena, n, act, "dy[i]", cu_value_at(e, n, false),
                                                 cu_value_at(e, n, true)))};
    cu_each(e, n, "bwd", batch_count(e, (long long)value_size(e, n)),
            arena_printf(e->arena, "const float *dy, %s%sfloat *dx",
                         act->needs & NEEDS_X ? cu_value_params(e, n, false) : "",
                         act->needs & NEEDS_Y ? cu_value_params(e, n, true) : ""),
            body, 1);
}

/* An activation: its expressions (act) through the shared passes. */
#define ACTIVATION(a)                                                                       \
    .shape = same_shape, .emit_fwd = act_fwd, .emit_bwd = act_bwd, .act = &(a),            \
    .layout = LAYOUT_KEEP, .cu_fwd = act_cu_fwd, .cu_bwd = act_cu_bwd

const OpDef op_relu = {.sig = {"relu", "max(x, 0)", NOARGS}, ACTIVATION(relu_act),
                       .selects = selects_always};
const OpDef op_leaky_relu = {.sig = {"leaky_relu", "x if x > 0 else negative_slope * x",
                                     {{"negative_slope", A_NUM, "0.01", 0, BIG, NULL, NULL}}},
                             ACTIVATION(leaky_act)};
const OpDef op_tanh = {.sig = {"tanh", "tanh(x)", NOARGS}, ACTIVATION(tanh_act)};
const OpDef op_sigmoid = {.sig = {"sigmoid", "1 / (1 + exp(-x))", NOARGS}, ACTIVATION(sigmoid_act)};
const OpDef op_gelu = {.sig = {"gelu", "x Phi(x), Phi the normal distribution (nn.GELU)",
                               {{"approximate", A_WORD, "none", 0, 0, NULL, "none|tanh"}}},
                       ACTIVATION(gelu_act)};
const OpDef op_silu = {.sig = {"silu", "x sigmoid(x) (nn.SiLU)", NOARGS}, ACTIVATION(silu_act)};
const OpDef op_elu = {.sig = {"elu", "x if x > 0 else alpha (exp(x) - 1) (nn.ELU)",
                              {{"alpha", A_NUM, "1.0", 0, BIG, NULL, NULL}}},
                      ACTIVATION(elu_act)};
const OpDef op_softplus = {
    .sig = {"softplus", "log(1 + exp(beta x)) / beta, x where beta x > threshold (nn.Softplus)",
            {{"beta", A_NUM, "1.0", 1e-6, BIG, NULL, NULL},
             {"threshold", A_NUM, "20.0", 0, BIG, NULL, NULL}}},
    ACTIVATION(softplus_act)};
