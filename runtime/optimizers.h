/*
 * optimizers.h — the optimizers, each defined in one place: a row of
 * NRT_OPTIMIZERS (its name, torch.optim's class, the state PyTorch keeps
 * for each parameter) and two functions here, how many of those states a
 * run keeps and the update of one parameter.  The cpu's loop (optim.c)
 * and the GPU's kernel (device.cu) are made from them, so the two
 * backends update the same values to the same bits; the compiler's table
 * of arguments (compiler/registry.c, optimizers[]) is the rest.
 *
 * The formulas are PyTorch's, step for step (torch/optim/sgd.py, adam.py
 * and adamw.py, the single-tensor path), so that a model trained here and
 * one trained in PyTorch from the same weights on the same batches stay
 * together:
 *
 *   sgd:   g = grad + wd * p
 *          buf = g                              (first step)
 *          buf = momentum * buf + (1 - dampening) * g   (later steps)
 *          g = nesterov ? g + momentum * buf : buf      (if momentum != 0)
 *          p = p - lr * g
 *
 *   adam:  g = grad + wd * p
 *          m = beta1 * m + (1 - beta1) * g
 *          v = beta2 * v + (1 - beta2) * g^2
 *          p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 *   adamw: p = p * (1 - lr * wd)                (decoupled weight decay)
 *          then adam's m, v and p with g = grad
 *
 * Every operation is rounded on its own (NRT_FMUL ...): ISO C does not
 * contract a * b + c into one FMA, and CUDA's _rn intrinsics are never
 * contracted either.
 *
 * Adding an optimizer: its row, nrt_slots_NAME and nrt_update_NAME here;
 * its arguments and how they set nrt_optim in compiler/registry.c; a test of
 * its formula (tests/unit/test_optim.c) and against PyTorch
 * (tests/pytorch_check.py); its line in README.md.  A row without its
 * functions does not compile.
 *
 * This header is C and CUDA (NRT_HD, lowp.h).
 */
#ifndef NETRT_OPTIMIZERS_H
#define NETRT_OPTIMIZERS_H

#include "lowp.h"

#ifndef __CUDACC_RTC__
#include <math.h>
#include <stddef.h>
#endif

/* X(KIND, name, torch.optim's class, state 0, state 1): the states with
 * PyTorch's names (optimizer.state_dict()), NULL where there is none. */
#define NRT_OPTIMIZERS(X)                                  \
    X(SGD, sgd, "SGD", "momentum_buffer", NULL)            \
    X(ADAM, adam, "Adam", "exp_avg", "exp_avg_sq")         \
    X(ADAMW, adamw, "AdamW", "exp_avg", "exp_avg_sq")

#define NRT_OPTIM_ENUM_(K, name, cls, s0, s1) NRT_##K,
enum nrt_optim_kind { NRT_OPTIM_NONE = 0, NRT_OPTIMIZERS(NRT_OPTIM_ENUM_) NRT_OPTIM_KINDS };
#undef NRT_OPTIM_ENUM_

/* Hyperparameters, with PyTorch's names and meanings; each optimizer
 * reads its own. */
typedef struct nrt_optim {
    int kind;                                /* enum nrt_optim_kind */
    double lr;   /* as PyTorch keeps it; the updates use it as a float */
    float momentum, dampening, weight_decay; /* sgd (weight_decay: all) */
    int nesterov;
    float beta1, beta2, eps;                 /* adam, adamw */
} nrt_optim;

/* A step's constants, the same for every parameter, worked out from the
 * hyperparameters and t, the update's number (1: the first). */
typedef struct nrt_optim_k {
    float lr, wd, mom, damp, b1, b2, one_b1, one_b2, eps;
    int first, nesterov;
    float step_size, bc2_sqrt; /* lr / (1 - beta1^t), sqrt(1 - beta2^t): in
                                  double, then rounded, as PyTorch's */
    float decay;               /* 1 - lr * wd, in double, then rounded */
} nrt_optim_k;

#ifdef __CUDA_ARCH__
#define NRT_FADD __fadd_rn
#define NRT_FSUB __fsub_rn
#define NRT_FMUL __fmul_rn
#define NRT_FDIV __fdiv_rn
#define NRT_FSQRT __fsqrt_rn
#define NRT_DMUL __dmul_rn
#else
#define NRT_FADD(a, b) ((a) + (b))
#define NRT_FSUB(a, b) ((a) - (b))
#define NRT_FMUL(a, b) ((a) * (b))
#define NRT_FDIV(a, b) ((a) / (b))
#define NRT_FSQRT sqrtf
#define NRT_DMUL(a, b) ((a) * (b))
#endif

static inline NRT_HD nrt_optim_k nrt_optim_consts(const nrt_optim *h, double t)
{
    nrt_optim_k k;
    k.lr = (float)h->lr;
    k.wd = h->weight_decay;
    k.mom = h->momentum;
    k.damp = 1.0f - h->dampening;
    k.b1 = h->beta1;
    k.b2 = h->beta2;
    k.one_b1 = 1.0f - h->beta1;
    k.one_b2 = 1.0f - h->beta2;
    k.eps = h->eps;
    k.first = t == 1;
    k.nesterov = h->nesterov;
    k.step_size = (float)(h->lr / (1.0 - pow((double)h->beta1, t)));
    k.bc2_sqrt = (float)sqrt(1.0 - pow((double)h->beta2, t));
    k.decay = (float)(1.0 - NRT_DMUL(h->lr, (double)h->weight_decay));
    return k;
}

/* ------------------------------------------------------------------ sgd */

static inline NRT_HD int nrt_slots_sgd(const nrt_optim *h)
{
    return h->momentum != 0; /* PyTorch keeps no buffer without momentum */
}

static inline NRT_HD void nrt_update_sgd(const nrt_optim_k *k, float *p, const float *g,
                                         float *m, float *v, size_t i)
{
    (void)v;
    const float gi = NRT_FADD(g[i], NRT_FMUL(k->wd, p[i]));
    if (k->mom == 0) {
        p[i] = NRT_FSUB(p[i], NRT_FMUL(k->lr, gi));
        return;
    }
    const float buf = k->first ? gi : NRT_FADD(NRT_FMUL(k->mom, m[i]), NRT_FMUL(k->damp, gi));
    m[i] = buf;
    p[i] = NRT_FSUB(p[i], NRT_FMUL(k->lr, k->nesterov ? NRT_FADD(gi, NRT_FMUL(k->mom, buf)) : buf));
}

/* ----------------------------------------------------------- adam, adamw */

static inline NRT_HD int nrt_slots_adam(const nrt_optim *h)
{
    (void)h;
    return 2;
}

/* m, v and p from g (the weight decay already in it, or decoupled). */
static inline NRT_HD void nrt_adam_moments(const nrt_optim_k *k, float *p, float g, float *m,
                                           float *v, size_t i)
{
    const float mi = NRT_FADD(NRT_FMUL(k->b1, m[i]), NRT_FMUL(k->one_b1, g));
    const float vi = NRT_FADD(NRT_FMUL(k->b2, v[i]), NRT_FMUL(NRT_FMUL(k->one_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float den = NRT_FADD(NRT_FDIV(NRT_FSQRT(vi), k->bc2_sqrt), k->eps);
    p[i] = NRT_FSUB(p[i], NRT_FMUL(k->step_size, NRT_FDIV(mi, den)));
}

static inline NRT_HD void nrt_update_adam(const nrt_optim_k *k, float *p, const float *g,
                                          float *m, float *v, size_t i)
{
    nrt_adam_moments(k, p, NRT_FADD(g[i], NRT_FMUL(k->wd, p[i])), m, v, i);
}

static inline NRT_HD int nrt_slots_adamw(const nrt_optim *h)
{
    return nrt_slots_adam(h);
}

static inline NRT_HD void nrt_update_adamw(const nrt_optim_k *k, float *p, const float *g,
                                           float *m, float *v, size_t i)
{
    p[i] = NRT_FMUL(p[i], k->decay);
    nrt_adam_moments(k, p, g[i], m, v, i);
}

#endif /* NETRT_OPTIMIZERS_H */
