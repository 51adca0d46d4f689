/*
 * losses.h — the pointwise regression losses, each defined in one place:
 * a row of NRT_LOSSES (its name, torch.nn's class) and two functions
 * here, its value and its derivative at one error e = y - t.  The cpu's
 * loss (kernels.c, nrt_loss) and the GPU's kernel (netrt_kernels.cuh,
 * nrt_dev_loss) are made from them; the compiler's table of arguments
 * (compiler/registry.c, losses[]) is the rest.  Cross-entropy is not one
 * of them: its log-softmax is fused in (nrt_xent).
 *
 * Each is PyTorch's with reduction='mean', over every output of the batch
 * (N values):
 *
 *   loss = sum_i f(y_i - t_i) / N         d loss / d y_i = f'(y_i - t_i) / N
 *
 *   mse:        f(e) = e^2                f'(e) = 2 e
 *   l1:         f(e) = |e|                f'(e) = sign(e), sign(0) = 0
 *                                         (autograd's abs: PyTorch's too)
 *   smooth_l1:  f(e) = 0.5 e^2 / beta     f'(e) = e / beta      if |e| < beta
 *                    = |e| - 0.5 beta           = sign(e)       otherwise
 *               (beta = 0: l1's value; f'(0) = -1, autograd's
 *               smooth_l1_loss_backward, which PyTorch uses there too)
 *
 * The values are summed in double, in order, and the derivatives worked
 * out in double and rounded once: the cpu's and the GPU's dy agree bit
 * for bit.  A loss's one argument, where it takes one (smooth_l1's beta),
 * is nrt_loss_spec's arg, a float, as PyTorch's float32 kernels use it.
 *
 * Adding a loss: its row, nrt_loss_NAME and nrt_dloss_NAME here; its
 * arguments in compiler/registry.c (losses[]); a test of its values
 * (tests/unit/test_kernels.c) and against PyTorch (tests/pytorch_check.py);
 * its line in README.md.  A row without its functions does not compile.
 *
 * This header is C and CUDA, NVRTC included (NRT_HD, lowp.h).
 */
#ifndef NETRT_LOSSES_H
#define NETRT_LOSSES_H

#include "lowp.h"

/* X(KIND, name, torch.nn's class) */
#define NRT_LOSSES(X)              \
    X(MSE, mse, "MSELoss")         \
    X(L1, l1, "L1Loss")            \
    X(SMOOTH_L1, smooth_l1, "SmoothL1Loss")

#define NRT_LOSS_ENUM_(K, name, cls) NRT_LOSS_##K,
enum nrt_loss_kind { NRT_LOSS_NONE = 0, NRT_LOSSES(NRT_LOSS_ENUM_) NRT_LOSS_KINDS };
#undef NRT_LOSS_ENUM_

/* A model's pointwise loss (kind NRT_LOSS_NONE: cross-entropy). */
typedef struct nrt_loss_spec {
    int kind;  /* enum nrt_loss_kind */
    float arg; /* its argument (smooth_l1's beta); 0 where it has none */
} nrt_loss_spec;

/* ------------------------------------------------------------------ mse */

static inline NRT_HD double nrt_loss_mse(double e, double arg)
{
    (void)arg;
    return e * e;
}

static inline NRT_HD double nrt_dloss_mse(double e, double arg)
{
    (void)arg;
    return 2.0 * e;
}

/* ------------------------------------------------------------------- l1 */

static inline NRT_HD double nrt_loss_l1(double e, double arg)
{
    (void)arg;
    return e < 0 ? -e : e;
}

static inline NRT_HD double nrt_dloss_l1(double e, double arg)
{
    (void)arg;
    return e > 0 ? 1.0 : e < 0 ? -1.0 : 0.0;
}

/* ------------------------------------------------------------ smooth_l1 */

/* ATen's smooth_l1 kernel: z < beta ? 0.5 * z * z / beta : z - 0.5 * beta,
 * z = |e| (beta = 0: z, l1's value). */
static inline NRT_HD double nrt_loss_smooth_l1(double e, double beta)
{
    const double z = e < 0 ? -e : e;
    return z < beta ? 0.5 * z * z / beta : z - 0.5 * beta;
}

/* ATen's smooth_l1_backward: -1 at e <= -beta, 1 at e >= beta, else
 * e / beta.  (beta = 0: sign(e) but -1 at 0, not l1's 0: PyTorch's
 * autograd runs this formula for smooth_l1_loss with beta 0 too.) */
static inline NRT_HD double nrt_dloss_smooth_l1(double e, double beta)
{
    return e <= -beta ? -1.0 : e >= beta ? 1.0 : e / beta;
}

/* ----------------------------------------------------------- by kind */

/* f(e) and f'(e) of the loss of kind (a row above; 0 for another). */
static inline NRT_HD double nrt_loss_value(int kind, double e, double arg)
{
#define NRT_LOSS_VALUE_(K, name, cls) case NRT_LOSS_##K: return nrt_loss_##name(e, arg);
    switch (kind) {
        NRT_LOSSES(NRT_LOSS_VALUE_)
    }
#undef NRT_LOSS_VALUE_
    return 0.0;
}

static inline NRT_HD double nrt_loss_deriv(int kind, double e, double arg)
{
#define NRT_LOSS_DERIV_(K, name, cls) case NRT_LOSS_##K: return nrt_dloss_##name(e, arg);
    switch (kind) {
        NRT_LOSSES(NRT_LOSS_DERIV_)
    }
#undef NRT_LOSS_DERIV_
    return 0.0;
}

#endif /* NETRT_LOSSES_H */
