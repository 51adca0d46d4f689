/*
 * ops/rnn.c — rnn: an Elman RNN, one text of passes for the cpu and the GPU.
 */
#include "ops.h"

#include <string.h>

/* An Elman RNN over a sequence x [T, F] (nn.RNN with batch_first and a
 * zero initial state): h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T +
 * b_hh), each layer's states the sequence of the next; the output is the
 * top layer's last state [H].
 *
 * Forward keeps every state of every layer in hs, layer by layer [n, T,
 * H] (a sample's steps side by side, as in x), so that the batch at one
 * step is a matrix whose rows lie T*H floats apart: the input's part of
 * every step is one product, then one product a step adds h_{t-1} W_hh^T
 * before the activation.  Backward walks back through time: g, d loss / d
 * pre-activation [n, T, H], starts as what comes from above (dy at the
 * top layer's last step; for a lower layer, the d input of the layer
 * above) and step by step gets g_{t+1} W_hh and the activation's
 * derivative, a function of h_t alone.  Then dW_ih = g^T x and dx = g W_ih
 * are one product each, dW_hh the sum over steps of g_t^T h_{t-1}, and
 * both biases the column sums of g.  The g of each layer lives in the
 * scratch, two buffers in turn: a layer's d input is the g of the one
 * below.
 *
 * In a bf16 run the products read bf16 weights (and the first layer's
 * input, cast, or the bf16 states of the layer below) and each step is
 * what PyTorch 1.13's nn.RNN does under autocast: ih = x W_ih^T + b_ih for
 * every step at once, hh = bf16(h_{t-1} W_hh^T + b_hh) (its product into a
 * buffer of its own, hh), h_t = bf16(act(bf16(ih + hh))); ih is rounded
 * once above the first layer, but twice in it, bf16(bf16(x W_ih^T) +
 * b_ih): PyTorch's view of a batch-first input, time first, is not
 * contiguous, so its linear is a product, rounded, then the bias added.
 * Backward rounds each step's g once, after act' (autocast rounds the
 * sum g_{t+1} W_hh + what comes from above twice, its parts first), and
 * the weights' gradients at the end.
 *
 * The passes are one text for both backends: products are nrt_gemm on
 * the cpu and nrt_cu_gemm (cuBLAS) on the GPU with the same arguments,
 * elementwise steps loops or kernels with the same body (rnn_each). */

enum { RNN_HIDDEN, RNN_LAYERS, RNN_NONLINEARITY, RNN_BIAS };

struct rnn {
    long long T, F, H, L, TH;
    bool bias;
    const OpDef *act; /* tanh or relu, from this table */
};

static struct rnn rnn_of(const Program *p, const Node *n)
{
    const Shape *s = &p->values[n->in].shape;
    struct rnn r = {s->d[0], s->d[1], (long long)arg(n, RNN_HIDDEN), (long long)arg(n, RNN_LAYERS),
                    0, arg(n, RNN_BIAS) != 0, op_find(n->args[RNN_NONLINEARITY].s)};
    r.TH = r.T * r.H;
    return r;
}

static bool rnn_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    Loc at = n->stmt->call->loc;
    if (s->rank != 2) {
        diag_error(p->diag, at, "rnn expects a sequence input [steps, features], got %s",
                   shape_str(p->arena, s));
        if (s->rank == 1 && n->in == 0)
            diag_note(p->diag, at, "declare the input as a sequence: 'input %s[%lld, 1]' is %lld "
                      "steps of one feature", p->input_name, (long long)s->d[0], (long long)s->d[0]);
        else if (s->rank == 1 && p->nodes[n->in - 1].op == n->op)
            diag_note(p->diag, at, "an rnn gives its last state only: stack rnn layers with "
                      "'layers=N'");
        else if (s->rank == 1)
            diag_note(p->diag, at, "an rnn reads the model's input declared as a sequence, "
                      "e.g. 'input x[12, 1]'");
        else if (s->d[0] == 1)
            diag_note(p->diag, at, "to read the image's rows as steps, declare 'input %s[%lld, "
                      "%lld]'", p->input_name, (long long)s->d[1], (long long)s->d[2]);
        else
            diag_note(p->diag, at, "give each step's features as one dimension: 'input %s[%lld, "
                      "%lld]'", p->input_name, (long long)s->d[0], (long long)(s->d[1] * s->d[2]));
        return false;
    }
    const int64_t T = s->d[0], F = s->d[1], H = (int64_t)arg(n, RNN_HIDDEN);
    const int L = (int)arg(n, RNN_LAYERS);
    if ((double)L * T * H * 2 > 2147483647.0) {
        diag_error(p->diag, at, "rnn(%lld, layers=%d) over %lld steps keeps too many states "
                   "(%.0f floats a sample)", (long long)H, L, (long long)T, (double)L * T * H);
        return false;
    }
    *out_shape(p, n) = (Shape){1, {H}};
    /* PyTorch's names and order; its init, every parameter U(±1/sqrt(H)),
     * unless the model says otherwise (the fans are then torch.nn.init's) */
    for (int l = 0; l < L; l++) {
        const int64_t in = l ? H : F;
        ir_add_param(p, n, arena_printf(p->arena, "weight_ih_l%d", l), 2, (int64_t[]){H, in},
                     (int)in, (int)H, false);
        ir_add_param(p, n, arena_printf(p->arena, "weight_hh_l%d", l), 2, (int64_t[]){H, H},
                     (int)H, (int)H, false);
        if (arg(n, RNN_BIAS)) {
            ir_add_param(p, n, arena_printf(p->arena, "bias_ih_l%d", l), 1, (int64_t[]){H},
                         (int)in, (int)H, true);
            ir_add_param(p, n, arena_printf(p->arena, "bias_hh_l%d", l), 1, (int64_t[]){H},
                         (int)H, (int)H, true);
        }
    }
    const float bound = (float)(1 / sqrt((double)H));
    for (int k = 0; k < n->nparams; k++)
        p->params[n->param0 + k].init = (nrt_init){NRT_INIT_UNIFORM, -bound, bound};
    n->aux_size = L * T * H;                /* hs: every state, for backward */
    n->scratch = (L > 1 ? 2 : 1) * T * H;   /* g, and the layer below's */
    return true;
}

/* base + n * floats: where a batch's part of a buffer starts */
static const char *rnn_at(Emit *e, const char *base, long long floats)
{
    return floats ? arena_printf(e->arena, "%s + (size_t)n * %lld", base, floats) : base;
}

/* A product: nrt_sgemm's arguments, for the cpu (nrt_gemm) or cuBLAS. */
static void rnn_gemm(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rnn_gemm(Emit *e, const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (e->cuda)
        emitf(e, "TRY(nrt_cu_gemm(net, %s, err));", args);
    else
        emitf(e, "nrt_gemm(net->dot, %s);", args);
}

/* body for every row < rows (a C expression) and column j < H of a
 * matrix whose rows lie stride floats apart (k = row * stride + j): two
 * loops on the cpu; on the GPU, kernel WHAT of parameters params (host
 * locals of the same names) and its launch. */
static void rnn_each(Emit *e, const Node *n, const char *what, const char *params,
                     const char *rows, long long stride, const char *body)
{
    const long long H = (long long)arg(n, RNN_HIDDEN);
    if (e->cuda) {
        const char *lines[2] = {
            arena_printf(e->arena, "size_t row = i / %lld, j = i %% %lld, k = row * %lld + j;", H,
                         H, stride),
            body};
        cu_each(e, n, what, arena_printf(e->arena, "(size_t)%s * %lld", rows, H), params, lines, 2);
        return;
    }
    emitf(e, "for (size_t row = 0; row < (size_t)%s; row++)", rows);
    emitf(e, "    for (size_t j = 0; j < %lld; j++) {", H);
    emitf(e, "        size_t k = row * %lld + j;", stride);
    emitf(e, "        %s", body);
    emitf(e, "    }");
}

static void rnn_fwd(Emit *e, const Node *n)
{
    const struct rnn r = rnn_of(e->p, n);
    Arena *a = e->arena;
    const char *lp = lowp_flag(e);
    if (r.T > 1)
        emitf(e, "float *hh = net->scratch; /* bf16: h_{t-1} W_hh^T [n, %lld], rounded alone */",
              r.H);
    for (int l = 0; l < r.L; l++) {
        const long long in = l ? r.H : r.F;
        const char *x = l ? arena_printf(a, "h%d", l - 1) : "x";
        emitf(e, "/* layer %d: h%d[n, %lld, %lld], its state at every step */", l, l, r.T, r.H);
        emitf(e, "float *h%d = %s;", l, rnn_at(e, "hs", l * r.TH));
        emitf(e, "/* the input's part of every step: h%d[n*%lld, %lld] = %s[n*%lld, %lld] "
              "W_ih_l%d^T%s */", l, r.T, r.H, x, r.T, in, l, r.bias ? " + b_ih + b_hh" : "");
        rnn_gemm(e, "0, 1, n * %lld, %lld, %lld, 1.0f, %s, %lld, W_ih_l%d, %lld, 0.0f, h%d, %lld",
                 r.T, r.H, in, x, in, l, in, l, r.H);
        if (r.bias) {
            emitf(e, "/* (bf16: ih rounded%s, b_hh added at each step with its product) */",
                  l ? "" : " before and after b_ih");
            rnn_each(e, n, arena_printf(a, "fwd_bias_l%d", l),
                     cu_lowp(e, arena_printf(a, "float *h%d, const float *b_ih_l%d, "
                                             "const float *b_hh_l%d", l, l, l)),
                     arena_printf(a, "n * %lld", r.T), r.H,
                     arena_printf(a, "h%d[k] = %s ? nrt_lowp(%s, %s + b_ih_l%d[j]) : "
                                  "h%d[k] + (b_ih_l%d[j] + b_hh_l%d[j]);", l, lp, lp,
                                  l ? arena_printf(a, "h%d[k]", l)
                                    : arena_printf(a, "nrt_lowp(%s, h%d[k])", lp, l),
                                  l, l, l, l));
        } else {
            emitf(e, "if (net->lowp) /* ih rounded */");
            rnn_each(e, n, arena_printf(a, "fwd_round_l%d", l),
                     cu_lowp(e, arena_printf(a, "float *h%d", l)), arena_printf(a, "n * %lld", r.T), r.H,
                     arena_printf(a, "h%d[k] = nrt_lowp(%s, h%d[k]);", l, lp, l));
        }
        emitf(e, "for (int t = 0; t < %lld; t++) {", r.T);
        e->indent++;
        emitf(e, "float *ht = h%d + (size_t)t * %lld; /* sample i's at ht + i*%lld */", l, r.H,
              r.TH);
        if (r.T > 1) {
            emitf(e, "if (t > 0) /* + h_{t-1} W_hh_l%d^T (bf16: into hh) */", l);
            e->indent++;
            rnn_gemm(e, "0, 1, n, %lld, %lld, 1.0f, ht - %lld, %lld, W_hh_l%d, %lld, "
                     "net->lowp ? 0.0f : 1.0f, net->lowp ? hh : ht, net->lowp ? %lld : %lld",
                     r.H, r.H, r.H, r.TH, l, r.H, r.H, r.TH);
            e->indent--;
        }
        /* bf16: hh = bf16(h_{t-1} W_hh^T + b_hh) (b_hh alone at t = 0), v = bf16(ih + hh) (as
         * fp16 likewise) */
        const char *hh = r.T > 1 ? arena_printf(a, "(t > 0 ? hh[row * %lld + j] : 0.0f)", r.H)
                                 : "0.0f";
        const char *hh_b = r.bias ? arena_printf(a, "nrt_lowp(%s, %s + b_hh_l%d[j])", lp, hh, l)
                                  : arena_printf(a, "nrt_lowp(%s, %s)", lp, hh);
        const char *params = arena_printf(a, "float *ht%s%s", r.T > 1 ? ", const float *hh, int t" : "",
                                          r.bias ? arena_printf(a, ", const float *b_hh_l%d", l) : "");
        rnn_each(e, n, arena_printf(a, "fwd_act_l%d", l), cu_lowp(e, params), "n", r.TH,
                 arena_printf(a, "float v = %s ? nrt_lowp(%s, %s + ht[k]) : ht[k]; ht[k] = %s;", lp,
                              lp, hh_b, lowp_expr(e, r.act->act->fwd(a, n, "v"))));
        e->indent--;
        emitf(e, "}");
        if (r.T == 1)
            emitf(e, "(void)W_hh_l%d; /* one step: no state before it */", l);
    }
    emitf(e, "/* y[n, %lld]: the top layer's last state */", r.H);
    rnn_each(e, n, "fwd_last", arena_printf(a, "const float *h%lld, float *y", r.L - 1), "n", r.TH,
             arena_printf(a, "y[row * %lld + j] = h%lld[k + %lld];", r.H, r.L - 1, (r.T - 1) * r.H));
}

static void rnn_bwd(Emit *e, const Node *n)
{
    const struct rnn r = rnn_of(e->p, n);
    Arena *a = e->arena;
    for (int l = 0; l < r.L; l++)
        emitf(e, "const float *h%d = %s; /* layer %d's states */", l, rnn_at(e, "hs", l * r.TH),
              l);
    if (r.L > 1)
        emitf(e, "/* g%lld..g0[n, %lld, %lld]: d loss / d each layer's pre-activations, in two "
              "buffers in turn */", r.L - 1, r.T, r.H);
    else
        emitf(e, "/* g0[n, %lld, %lld]: d loss / d the pre-activations */", r.T, r.H);
    for (long long l = r.L - 1; l >= 0; l--)
        emitf(e, "float *g%lld = %s;", l, rnn_at(e, "net->scratch", (r.L - 1 - l) % 2 * r.TH));
    emitf(e, "/* d loss reaches the top layer at its last step only */");
    rnn_each(e, n, "bwd_last", arena_printf(a, "const float *dy, float *g%lld", r.L - 1),
             arena_printf(a, "n * %lld", r.T), r.H,
             arena_printf(a, "g%lld[k] = row %% %lld == %lld ? dy[row / %lld * %lld + j] : 0.0f;",
                          r.L - 1, r.T, r.T - 1, r.T, r.H));
    for (int l = (int)r.L - 1; l >= 0; l--) {
        const long long in = l ? r.H : r.F;
        const char *x = l ? arena_printf(a, "h%d", l - 1) : "x";
        emitf(e, "/* layer %d, back through time: g_t = (g_t + g_{t+1} W_hh_l%d) * act'(h_t) */",
              l, l);
        emitf(e, "for (int t = %lld; t >= 0; t--) {", r.T - 1);
        e->indent++;
        emitf(e, "float *gt = g%d + (size_t)t * %lld;", l, r.H);
        emitf(e, "const float *ht = h%d + (size_t)t * %lld;", l, r.H);
        if (r.T > 1) {
            emitf(e, "if (t < %lld)", r.T - 1);
            e->indent++;
            rnn_gemm(e, "0, 0, n, %lld, %lld, 1.0f, gt + %lld, %lld, W_hh_l%d, %lld, 1.0f, gt, %lld",
                     r.H, r.H, r.H, r.TH, l, r.H, r.TH);
            e->indent--;
        }
        rnn_each(e, n, arena_printf(a, "bwd_act_l%d", l), cu_lowp(e, "float *gt, const float *ht"),
                 "n", r.TH,
                 arena_printf(a, "gt[k] = %s;",
                              lowp_expr(e, act_grad(a, n, r.act->act, lowp_expr(e, "gt[k]"), NULL, "ht[k]"))));
        e->indent--;
        emitf(e, "}");
        emitf(e, "/* dW_ih_l%d = g%d^T %s, over every sample and step */", l, l, x);
        rnn_gemm(e, "1, 0, %lld, %lld, n * %lld, 1.0f, g%d, %lld, %s, %lld, 0.0f, dW_ih_l%d, %lld",
                 r.H, in, r.T, l, r.H, x, in, l, in);
        if (r.T > 1) {
            emitf(e, "/* dW_hh_l%d = the sum over steps of g_t^T h_{t-1} */", l);
            emitf(e, "for (int t = 1; t < %lld; t++)", r.T);
            e->indent++;
            rnn_gemm(e, "1, 0, %lld, %lld, n, 1.0f, g%d + (size_t)t * %lld, %lld, h%d + (size_t)(t "
                     "- 1) * %lld, %lld, t > 1 ? 1.0f : 0.0f, dW_hh_l%d, %lld", r.H, r.H, l, r.H,
                     r.TH, l, r.H, r.TH, l, r.H);
            e->indent--;
        } else {
            emitf(e, "/* dW_hh_l%d = 0: one step, no state before it (a product over none) */", l);
            rnn_gemm(e, "1, 0, %lld, %lld, 0, 1.0f, g%d, %lld, h%d, %lld, 0.0f, dW_hh_l%d, %lld",
                     r.H, r.H, l, r.TH, l, r.TH, l, r.H);
            emitf(e, "(void)W_hh_l%d;", l);
        }
        if (r.bias) {
            const char *sums = e->cuda ? "TRY(nrt_cu_col_sums(net, g%d, n * %lld, %lld, %s, err));"
                                       : "nrt_col_sums(g%d, n * %lld, %lld, %s);";
            for (int k = 0; k < 2; k++)
                emitf(e, sums, l, r.T, r.H, arena_printf(a, "db_%s_l%d", k ? "hh" : "ih", l));
        }
        if (l > 0) {
            emitf(e, "/* what layer %d's states get: g%d = g%d W_ih_l%d */", l - 1, l - 1, l, l);
            rnn_gemm(e, "0, 0, n * %lld, %lld, %lld, 1.0f, g%d, %lld, W_ih_l%d, %lld, 0.0f, g%d, %lld",
                     r.T, r.H, r.H, l, r.H, l, r.H, l - 1, r.H);
        } else {
            emitf(e, "/* dx[n, %lld, %lld] = g0 W_ih_l0 */", r.T, r.F);
            emitf(e, "if (dx)");
            e->indent++;
            rnn_gemm(e, "0, 0, n * %lld, %lld, %lld, 1.0f, g0, %lld, W_ih_l0, %lld, 0.0f, dx, %lld",
                     r.T, r.F, r.H, r.H, r.F, r.F);
            e->indent--;
        }
    }
}

const OpDef op_rnn = {
    .sig = {"rnn", "Elman RNN over a sequence [T, F] (nn.RNN, batch_first): its last state",
            {{"hidden", A_INT, NULL, 1, INT_MAX_ARG, "hidden_size", NULL},
             {"layers", A_INT, "1", 1, 1024, "num_layers", NULL},
             {"nonlinearity", A_WORD, "tanh", 0, 0, NULL, "tanh|relu"},
             {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
    .shape = rnn_shape, .emit_fwd = rnn_fwd, .emit_bwd = rnn_bwd, .aux_name = "hs",
    .layout = LAYOUT_NC, .cu_fwd = rnn_fwd, .cu_bwd = rnn_bwd, .product = true, .cu_gemm = true,
    .rounds_output = true};
