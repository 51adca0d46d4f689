/*
 * init.c — parameter initialisation, with torch.nn.init's formulas.
 *
 * The default is what PyTorch's nn.Linear and nn.Conv2d do in
 * reset_parameters(): weights kaiming_uniform_(a=sqrt(5)), which is
 * U(±1/sqrt(fan_in)), and biases U(±1/sqrt(fan_in)).  The random stream is
 * netc's own (rng.c), so values differ from PyTorch's while the
 * distributions are the same.
 */
#include "netrt.h"

#include <math.h>

static void fill_uniform(float *w, size_t n, double lo, double hi, nrt_rng *r)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(lo + (hi - lo) * nrt_rng_uniform(r));
}

static void fill_normal(float *w, size_t n, double mean, double std, nrt_rng *r)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(mean + std * nrt_rng_normal(r));
}

static void init_one(const nrt_param *p, float *w, nrt_rng *r)
{
    double fan_in = p->fan_in, fan_out = p->fan_out;
    double a = p->init.a, b = p->init.b, bound;
    switch (p->init.kind) {
    case NRT_INIT_DEFAULT:
        bound = fan_in > 0 ? 1.0 / sqrt(fan_in) : 0;
        fill_uniform(w, p->size, -bound, bound, r);
        break;
    case NRT_INIT_ZEROS:
    case NRT_INIT_ONES:
    case NRT_INIT_CONSTANT: {
        float v = p->init.kind == NRT_INIT_ZEROS ? 0.0f : p->init.kind == NRT_INIT_ONES ? 1.0f : (float)a;
        for (size_t i = 0; i < p->size; i++)
            w[i] = v;
        break;
    }
    case NRT_INIT_NORMAL:
        fill_normal(w, p->size, a, b, r);
        break;
    case NRT_INIT_UNIFORM:
        fill_uniform(w, p->size, a, b, r);
        break;
    case NRT_INIT_XAVIER_NORMAL:
        fill_normal(w, p->size, 0, a * sqrt(2.0 / (fan_in + fan_out)), r);
        break;
    case NRT_INIT_XAVIER_UNIFORM:
        bound = a * sqrt(6.0 / (fan_in + fan_out));
        fill_uniform(w, p->size, -bound, bound, r);
        break;
    case NRT_INIT_KAIMING_NORMAL:
        fill_normal(w, p->size, 0, sqrt(2.0 / (1 + a * a)) / sqrt(fan_in), r);
        break;
    case NRT_INIT_KAIMING_UNIFORM:
        bound = sqrt(3.0) * sqrt(2.0 / (1 + a * a)) / sqrt(fan_in);
        fill_uniform(w, p->size, -bound, bound, r);
        break;
    }
}

void nrt_init_params(const nrt_param *p, int n, float *buf, nrt_rng *r)
{
    for (int i = 0; i < n; i++)
        init_one(&p[i], buf + p[i].offset, r);
}

void nrt_init_buffers(const nrt_buffer *b, int n, void *area)
{
    for (int i = 0; i < n; i++) {
        unsigned char *at = (unsigned char *)area + b[i].offset;
        for (size_t k = 0; k < b[i].size; k++)
            if (b[i].dtype == NRT_I64)
                ((int64_t *)(void *)at)[k] = (int64_t)b[i].init;
            else
                ((float *)(void *)at)[k] = b[i].init;
    }
}
