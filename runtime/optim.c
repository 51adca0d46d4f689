/*
 * optim.c — the optimizers over one flat buffer (their rows and updates:
 * optimizers.h), and fp16's loss scaler, torch.cuda.amp.GradScaler's
 * (nrt_scaler_step).
 *
 * One difference from PyTorch, on x86: the step runs with subnormal
 * numbers flushed to zero (MXCSR's FTZ and DAZ, as
 * torch.set_flush_denormal(True) sets them), and only the step.  A
 * momentum buffer whose gradient stays zero (a never-lit input pixel's
 * weights) decays through the subnormals for about 150 steps, and every
 * vector instruction that meets one takes a microcode assist of about a
 * hundred cycles: digits_mlp spent 40 % of its time in a step over 9610
 * floats.  What changes is values below 2^-126, and a weight only where
 * it is itself that small.
 */
#include "netrt.h"

#include <math.h>
#include <stdlib.h>

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define NRT_MXCSR_FLUSH 0x8040u /* FTZ (bit 15) and DAZ (bit 6) */
#endif

#define ROW(K, name, cls, s0, s1) [NRT_##K] = {#name, cls, {s0, s1}},
static const nrt_optim_def defs[NRT_OPTIM_KINDS] = {NRT_OPTIMIZERS(ROW)};
#undef ROW

const nrt_optim_def *nrt_optim_find(int kind)
{
    return kind > NRT_OPTIM_NONE && kind < NRT_OPTIM_KINDS ? &defs[kind] : NULL;
}

int nrt_optim_slots(const nrt_optim *h)
{
#define SLOTS(K, name, cls, s0, s1) case NRT_##K: return nrt_slots_##name(h);
    switch (h->kind) {
        NRT_OPTIMIZERS(SLOTS)
    }
#undef SLOTS
    return -1;
}

int nrt_optim_init(nrt_optim_state *s, const nrt_optim *h, size_t n,
                   nrt_error *err)
{
    *s = (nrt_optim_state){0};
    s->h = *h;
    s->n = n;
    const int slots = nrt_optim_slots(h);
    if (slots < 0)
        return nrt_errorf(err, "optimizer kind %d: this runtime (netrt %s) has no such optimizer; "
                          "rebuild the program with its netc", h->kind, NETRT_VERSION);
    if (slots > 0 && !(s->m = calloc(n ? n : 1, sizeof *s->m)))
        return nrt_errorf(err, "out of memory for the optimizer state (%zu floats)", n);
    if (slots > 1 && !(s->v = calloc(n ? n : 1, sizeof *s->v))) {
        free(s->m);
        s->m = NULL;
        return nrt_errorf(err, "out of memory for the optimizer state (%zu floats)", n);
    }
    return 0;
}

/* The loop of each optimizer's update, its operands as restrict locals and
 * the step's constants loop-invariant, so that the compiler vectorises it
 * — twice: for any x86-64 (or other) processor, and with AVX2's wider
 * vectors, chosen at run time.  AVX2 without FMA, and ISO C (no
 * contraction of a * b + c): the two give the same bits. */
static inline __attribute__((always_inline)) void
step_loop(nrt_optim_state *s, float *restrict p, const float *restrict g)
{
    const nrt_optim_k k = nrt_optim_consts(&s->h, (double)s->step);
    float *restrict m = s->m, *restrict v = s->v;
    const size_t n = s->n;
#define LOOP(K, name, cls, s0, s1)                  \
    case NRT_##K:                                    \
        for (size_t i = 0; i < n; i++)               \
            nrt_update_##name(&k, p, g, m, v, i);    \
        break;
    switch (s->h.kind) {
        NRT_OPTIMIZERS(LOOP)
    }
#undef LOOP
}

static void step_generic(nrt_optim_state *s, float *param, const float *grad)
{
    step_loop(s, param, grad);
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(NETRT_NO_AVX2)
__attribute__((target("avx2"))) static void
step_avx2(nrt_optim_state *s, float *param, const float *grad)
{
    step_loop(s, param, grad);
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
