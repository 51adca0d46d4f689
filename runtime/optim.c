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
 */
#include "netrt.h"

#include <math.h>
#include <stdlib.h>

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

static void sgd(nrt_optim_state *s, float *p, const float *grad)
{
    const nrt_optim *h = &s->h;
    float lr = h->lr, wd = h->weight_decay, mom = h->momentum;
    float damp = 1.0f - h->dampening;
    int first = s->step == 1;
    for (size_t i = 0; i < s->n; i++) {
        float g = grad[i];
        if (wd != 0)
            g += wd * p[i];
        if (mom != 0) {
            float buf = first ? g : mom * s->m[i] + damp * g;
            s->m[i] = buf;
            g = h->nesterov ? g + mom * buf : buf;
        }
        p[i] -= lr * g;
    }
}

static void adam(nrt_optim_state *s, float *p, const float *grad)
{
    const nrt_optim *h = &s->h;
    float b1 = h->beta1, b2 = h->beta2, wd = h->weight_decay, eps = h->eps;
    double bc1 = 1.0 - pow(b1, (double)s->step);
    double bc2 = 1.0 - pow(b2, (double)s->step);
    float step_size = (float)(h->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    for (size_t i = 0; i < s->n; i++) {
        float g = grad[i];
        if (wd != 0)
            g += wd * p[i];
        float m = s->m[i] = b1 * s->m[i] + (1.0f - b1) * g;
        float v = s->v[i] = b2 * s->v[i] + (1.0f - b2) * g * g;
        float denom = sqrtf(v) / bc2_sqrt + eps;
        p[i] -= step_size * (m / denom);
    }
}

void nrt_optim_step(nrt_optim_state *s, float *param, const float *grad)
{
    s->step++;
    if (s->h.kind == NRT_ADAM)
        adam(s, param, grad);
    else
        sgd(s, param, grad);
}

void nrt_optim_free(nrt_optim_state *s)
{
    free(s->m);
    free(s->v);
    s->m = s->v = NULL;
}
