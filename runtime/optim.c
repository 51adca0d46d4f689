/*
 * optim.c — torch.optim.SGD and torch.optim.Adam over one flat buffer.
 *
 * The formulas are PyTorch's, step for step (torch/optim/sgd.py and
 * adam.py, single-tensor path), so that a model trained here and one trained
 * in PyTorch from the same weights on the same batches stay together:
 *
 *   SGD:  g = grad + wd * p
 *         buf = g                              (first step)
 *         buf = momentum * buf + (1 - dampening) * g   (later steps)
 *         g = nesterov ? g + momentum * buf : buf      (if momentum != 0)
 *         p = p - lr * g
 *
 *   Adam: g = grad + wd * p
 *         m = beta1 * m + (1 - beta1) * g
 *         v = beta2 * v + (1 - beta2) * g^2
 *         p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * and fp16's loss scaler, torch.cuda.amp.GradScaler's (nrt_scaler_step).
 *
 * One difference, on x86: the step runs with subnormal numbers flushed to
 * zero (MXCSR's FTZ and DAZ, as torch.set_flush_denormal(True) sets them),
 * and only the step.  A momentum buffer whose gradient stays zero (a
 * never-lit input pixel's weights) decays through the subnormals for
 * about 150 steps, and every vector instruction that meets one takes a
 * microcode assist of about a hundred cycles: digits_mlp spent 40 % of its
 * time in a step over 9610 floats.  What changes is values below 2^-126,
 * and a weight only where it is itself that small.
 */
#include "netrt.h"

#include <math.h>
#include <stdlib.h>

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define NRT_MXCSR_FLUSH 0x8040u /* FTZ (bit 15) and DAZ (bit 6) */
#endif

int nrt_optim_init(nrt_optim_state *s, const nrt_optim *h, size_t n,
                   nrt_error *err)
{
    *s = (nrt_optim_state){0};
    s->h = *h;
    s->n = n;
    int need_m = h->kind == NRT_ADAM || h->momentum != 0;
    int need_v = h->kind == NRT_ADAM;
    if (need_m && !(s->m = calloc(n ? n : 1, sizeof *s->m)))
        return nrt_errorf(err, "out of memory for the optimizer state (%zu floats)", n);
    if (need_v && !(s->v = calloc(n ? n : 1, sizeof *s->v))) {
        free(s->m);
        s->m = NULL;
        return nrt_errorf(err, "out of memory for the optimizer state (%zu floats)", n);
    }
    return 0;
}

/* The loops take their operands as restrict locals, with the options as
 * loop-invariant values, so that the compiler vectorises them — twice: for
 * any x86-64 (or other) processor, and with AVX2's wider vectors, chosen at
 * run time.  AVX2 without FMA, and ISO C (no contraction of a * b + c): the
 * two give the same bits. */
static inline __attribute__((always_inline)) void
sgd(nrt_optim_state *s, float *restrict p, const float *restrict grad)
{
    const nrt_optim *h = &s->h;
    const float lr = (float)h->lr, wd = h->weight_decay, mom = h->momentum;
    const float damp = 1.0f - h->dampening;
    const size_t n = s->n;
    float *restrict m = s->m;
    if (mom == 0) {
        for (size_t i = 0; i < n; i++)
            p[i] -= lr * (grad[i] + wd * p[i]);
        return;
    }
    const int first = s->step == 1, nesterov = h->nesterov;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] + wd * p[i];
        float buf = first ? g : mom * m[i] + damp * g;
        m[i] = buf;
        p[i] -= lr * (nesterov ? g + mom * buf : buf);
    }
}

static inline __attribute__((always_inline)) void
adam(nrt_optim_state *s, float *restrict p, const float *restrict grad)
{
    const nrt_optim *h = &s->h;
    const float b1 = h->beta1, b2 = h->beta2, wd = h->weight_decay, eps = h->eps;
    const double bc1 = 1.0 - pow(b1, (double)s->step);
    const double bc2 = 1.0 - pow(b2, (double)s->step);
    const float step_size = (float)(h->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const size_t n = s->n;
    float *restrict m = s->m, *restrict v = s->v;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] + wd * p[i];
        float mi = m[i] = b1 * m[i] + (1.0f - b1) * g;
        float vi = v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        p[i] -= step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}

static void step_generic(nrt_optim_state *s, float *param, const float *grad)
{
    if (s->h.kind == NRT_ADAM)
        adam(s, param, grad);
    else
        sgd(s, param, grad);
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(NETRT_NO_AVX2)
__attribute__((target("avx2"))) static void
step_avx2(nrt_optim_state *s, float *param, const float *grad)
{
    if (s->h.kind == NRT_ADAM)
        adam(s, param, grad);
    else
        sgd(s, param, grad);
}
#endif

static void step_any(nrt_optim_state *s, float *param, const float *grad)
{
#if (defined(__x86_64__) || defined(__i386__)) && !defined(NETRT_NO_AVX2)
    if (__builtin_cpu_supports("avx2")) {
        step_avx2(s, param, grad);
        return;
    }
#endif
    step_generic(s, param, grad);
}

void nrt_optim_step(nrt_optim_state *s, float *param, const float *grad)
{
    s->step++;
#ifdef NRT_MXCSR_FLUSH
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | NRT_MXCSR_FLUSH);
    step_any(s, param, grad);
    _mm_setcsr(csr);
#else
    step_any(s, param, grad);
#endif
}

void nrt_optim_free(nrt_optim_state *s)
{
    free(s->m);
    free(s->v);
    s->m = s->v = NULL;
}

int nrt_unscale(const nrt_scaler *s, float *grad, size_t n)
{
    const float inv = nrt_scaler_inv(s);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        found |= !nrt_f32_finite(grad[i]);
        grad[i] *= inv;
    }
    return found;
}

int nrt_scaler_step(nrt_scaler *s, float *grad, size_t n)
{
    const int found = nrt_unscale(s, grad, n);
    nrt_scaler_update(s, found);
    return found;
}
