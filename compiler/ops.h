/*
 * ops.h — what the layer ops share (compiler/ops.c) and define
 * (compiler/ops/, a file an op family, each holding its ops' arguments,
 * shape rules, the C of their forward and backward passes and their CUDA,
 * and their OpDefs); the table of them is ops.c's.  Adding a layer: its file (or an
 * entry in its family's), its line in ops.c's table, and where it needs
 * one a kernel in the runtime.
 *
 * Emitted code conventions.  A forward pass function sees
 *     int n;            the batch size (the only thing known at run time)
 *     const float *x;   the input  [n, in shape] (or [C, n, H, W]: see the
 *                       layouts in fuse.c)
 *     float *y;         the output, likewise
 *     const float *W, *b;   the weight and bias, if the op has them (other
 *                           parameters by their state_dict suffix, with
 *                           weight and bias shortened: W_ih_l0, b_hh_l0)
 * and a backward pass function sees x, y, W (not b) and
 *     const uint16_t *hx, *hy;  in a program whose bf16 and fp16 runs may keep
 *                       values in 16 bits: their bits, where this run does
 *                       and the pass reads them itself (an activation's
 *                       derivative: reads_16), else NULL
 *     float *dy;        d loss / d y; the pass may overwrite it
 *     float *dx;        d loss / d x to be written, or NULL when not needed
 *     float *dW, *db;   d loss / d W and d b, to be overwritten (dW_ih_l0, ...)
 * plus what the node keeps for backward (aux_size floats per sample, named
 * by OpDef.aux_name: `mask`, `xp`) and `arg` (int32, iaux_size per
 * sample); an op takes its scratch from net->scratch itself.
 */
#ifndef NETC_OPS_H
#define NETC_OPS_H

#include "netc.h"

#define INT_MAX_ARG 16777216.0 /* 2^24: the largest size a model may name */
#define BIG 1e30
#define SIZE(nm) {nm, A_INT, NULL, 1, INT_MAX_ARG, NULL, NULL}
#define INITS {"weight_init", A_INIT, "", 0, 0, NULL, NULL}, \
              {"bias_init", A_INIT, "", 0, 0, NULL, NULL}
#define NOARGS {{0}}

/* ------------------------------------------------------------ the ops */

/* Every layer op, each an OpDef op_NAME in its family's file under ops/,
 * in the order the language reference and "did you mean" list them: a new
 * op is its OpDef and a row here. */
#define NETC_OPS(X)                                                          \
    X(linear) X(conv2d) X(maxpool2d) X(avgpool2d) X(relu) X(leaky_relu)     \
    X(tanh) X(sigmoid) X(gelu) X(silu) X(elu) X(softplus) X(flatten)         \
    X(dropout) X(batchnorm1d) X(batchnorm2d) X(rnn) X(add) X(concat) X(mul)

#define NETC_OP_DECL_(name) extern const OpDef op_##name;
NETC_OPS(NETC_OP_DECL_)
#undef NETC_OP_DECL_

/* ---------------------------------------------------- shape helpers */

const Shape *in_shape(Program *p, const Node *n);
Shape *out_shape(Program *p, Node *n);
/* the first number of argument i */
double arg(const Node *n, int i);
/* true if n's input is an image [C, H, W], else false with the error said */
bool need_image(Program *p, Node *n);
/* PyTorch's output size: floor((in + 2 pad - kernel) / stride) + 1; false
 * (the error said) where the kernel is larger than the padded input */
bool window(Program *p, Node *n, int64_t in, int k, int s, int pad, const char *what,
            int64_t *out);
/* the shape rule of an op whose output is shaped as its input */
bool same_shape(Program *p, Node *n);
/* OpDef.selects of an op whose values are its input's both ways */
bool selects_always(const Program *p, const Node *n, bool bwd);
/* The value the name argument a of a two-input op (add, mul, concat)
 * names, set as n's second input (Node.in2); -1 with the error said. */
int second_input(Program *p, Node *n, const ArgVal *a);
/* The error of a two-input op whose inputs do not fit (why), naming both
 * with their shapes. */
void operands_error(Program *p, const Node *n, const char *why);

/* The shape rule of add and mul: NAME's value s broadcast onto x as
 * PyTorch broadcasts (as many dimensions; where s has 1, it repeats along
 * x's); the output shaped as x.  x does not repeat: the error says to
 * write the two the other way round. */
bool broadcast_operands(Program *p, Node *n, const ArgVal *a);

/* ------------------------------------------------- emission helpers */

int64_t value_size(const Emit *e, const Node *n);
/* 1 when n's input is laid out channel first, else 0 */
int input_cn(const Emit *e, const Node *n);
const char *act_grad(Arena *a, const Node *n, const Act *act, const char *dy, const char *x,
                     const char *y);
const char *epilogue(Emit *e, const Node *n, bool bias);
const char *lowp_flag(const Emit *e);
const char *lowp_expr(Emit *e, const char *expr);
void emit_par_for(Emit *e, int64_t size, const char *values);
void emit_each(Emit *e, int64_t size);
/* A backward loop of an activation's derivative over size values a
 * sample, its body lines reading x[i] or y[i] (y): in a run keeping that
 * value in 16 bits, where the pass reads them (reads_16), twice, as
 * lines16 reading hx[i] or hy[i] too. */
void emit_each_16(Emit *e, const Node *n, bool y, int64_t size, const char *const *lines,
                  const char *const *lines16, int nl);
/* x[i] or y[i] from the 16 bits of hx or hy: "nrt_half_value(net->half, hy[i])" */
const char *half_at(Emit *e, bool y);
/* In a GPU kernel, n's backward reading x or y (y): "y[i]", or where the
 * pass reads it in 16 bits (reads_16), from hy when the host passes it
 * (the run keeps y so) — "(hy ? nrt_half_value(half, hy[i]) : y[i])" —
 * and the kernel's parameters for it, with a comma and a blank after:
 * "const float *y, const uint16_t *hy, int half, " */
const char *cu_value_at(Emit *e, const Node *n, bool y);
const char *cu_value_params(Emit *e, const Node *n, bool y);
void emit_epilogue(Emit *e, const Node *n, const char *rows, const char *len,
                   const char *bias_at);
void emit_act_grad(Emit *e, const Node *n, int64_t size);

/* Whether n's s (Node.in2) repeats onto its x (broadcast_operands) */
bool broadcasts(const Emit *e, const Node *n);
/* The index expressions of a broadcast: s_at, s's index for x's value i;
 * for s's value i, base + step (over k < reps) the x values it repeats
 * onto; uses_n: they hold the batch size n (x laid out channel first). */
typedef struct Bcast {
    const char *s_at, *base, *step;
    int64_t reps;
    bool uses_n;
} Bcast;
Bcast bcast(Emit *e, const Node *n);
/* A kernel's parameters, with the batch size after them where a
 * broadcast's indices need it */
const char *bcast_params(Emit *e, const Node *n, const char *params);
/* d s over a broadcast, as a loop over s's values: each the sum of part
 * (an expression of at, x's index: "dy[at]") over the values it repeated
 * onto, written into ds or added to it (Node.skip_acc), rounded where s
 * is bf16 (as autograd's sum_to_size and gradient sum are); the same
 * statements in a kernel named what, of params (the batch size and lowp
 * added as needed), for the GPU. */
void emit_bcast_ds(Emit *e, const Node *n, const char *part);
void cu_bcast_ds(Emit *e, const Node *n, const char *what, const char *part, const char *params);

/* ------------------------------------------------------ CUDA helpers */

const char *param_names(Emit *e, const char *params, const char *prefix);
void cu_each(Emit *e, const Node *n, const char *what, const char *count, const char *params,
             const char *const *body, int nbody);
const char *cu_lowp(Emit *e, const char *params);
void cu_epilogue(Emit *e, const Node *n, const char *count, const char *bias_index, bool np);
const char *batch_count(Emit *e, long long size);
void cu_act_grad(Emit *e, const Node *n, const char *count);
const char *cu_call(Emit *e, const Node *n, const char *what, int bounds, const char *params,
                    const char *call);

#endif /* NETC_OPS_H */
