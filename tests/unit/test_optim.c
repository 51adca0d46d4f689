/*
 * test_optim.c — SGD, Adam and AdamW against PyTorch's update formulas.
 *
 * Two kinds of checks:
 *  1. Three steps from p = 1 with gradients 0.5, -0.25, 1.0, for every
 *     option, against values worked out by hand from the formulas of
 *     torch.optim.SGD, Adam and AdamW (the comments show the first
 *     steps; the numbers were cross-checked in double precision).
 *  2. 100 steps on 1000 random parameters against a double-precision
 *     transcription of the same formulas: |error| <= 1e-5 + 1e-4 |p| (float
 *     rounding accumulates over the steps; a wrong formula is off by far more).
 */
#include "netrt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

static int failures, checks;

static void expect(const char *what, double got, double want, double rtol)
{
    checks++;
    if (fabs(got - want) > rtol * fabs(want) + 1e-7) {
        fprintf(stderr, "FAIL: %s: got %.9g, want %.9g\n", what, got, want);
        failures++;
    }
}

static float run3(nrt_optim h)
{
    nrt_optim_state s;
    float p = 1.0f;
    const float g[3] = {0.5f, -0.25f, 1.0f};
    if (nrt_optim_init(&s, &h, 1, NULL))
        abort();
    for (int i = 0; i < 3; i++)
        nrt_optim_step(&s, &p, &g[i]);
    nrt_optim_free(&s);
    return p;
}

static int same(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static void expect_row(int kind, const char *name, const char *torch, const char *s0,
                       const char *s1)
{
    const nrt_optim_def *d = nrt_optim_find(kind);
    checks++;
    if (!d || !same(d->name, name) || !same(d->torch, torch) || !same(d->state[0], s0) ||
        !same(d->state[1], s1)) {
        fprintf(stderr, "FAIL: optimizer kind %d's row is not %s, %s, %s, %s\n", kind, name, torch,
                s0, s1 ? s1 : "-");
        failures++;
    }
}

/* Double-precision reference, transcribed from torch/optim/sgd.py, adam.py
 * and adamw.py. */
static void reference(const nrt_optim *h, double *p, double *m, double *v, const double *g,
                      size_t n, int t)
{
    for (size_t i = 0; i < n; i++) {
        double d = g[i] + h->weight_decay * p[i];
        if (h->kind == NRT_ADAMW) { /* decoupled: p *= 1 - lr wd, g alone */
            p[i] *= 1 - h->lr * h->weight_decay;
            d = g[i];
        }
        if (h->kind == NRT_SGD) {
            if (h->momentum != 0) {
                m[i] = t == 1 ? d : h->momentum * m[i] + (1 - h->dampening) * d;
                d = h->nesterov ? d + h->momentum * m[i] : m[i];
            }
            p[i] -= h->lr * d;
        } else {
            m[i] = h->beta1 * m[i] + (1 - h->beta1) * d;
            v[i] = h->beta2 * v[i] + (1 - h->beta2) * d * d;
            double bc1 = 1 - pow(h->beta1, t), bc2 = 1 - pow(h->beta2, t);
            p[i] -= h->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + h->eps);
        }
    }
}

static void random_walk(const char *name, nrt_optim h)
{
    enum { N = 1000, STEPS = 100 };
    static float p[N], g[N];
    static double pd[N], m[N], v[N], gd[N];
    nrt_rng r;
    nrt_rng_seed(&r, 42);
    for (int i = 0; i < N; i++) {
        p[i] = (float)nrt_rng_normal(&r);
        pd[i] = p[i];
        m[i] = v[i] = 0;
    }
    nrt_optim_state s;
    if (nrt_optim_init(&s, &h, N, NULL))
        abort();
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)(0.1 * nrt_rng_normal(&r) + 0.05 * p[i]);
            gd[i] = g[i];
        }
        nrt_optim_step(&s, p, g);
        reference(&h, pd, m, v, gd, N, t);
    }
    double worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(p[i] - pd[i]) / (1e-5 + 1e-4 * fabs(pd[i])));
    checks++;
    if (worst > 1) {
        fprintf(stderr, "FAIL: %s: 100 steps drift from the reference by %.3g tolerances\n",
                name, worst);
        failures++;
    }
    nrt_optim_free(&s);
}

/* On x86 the step flushes subnormal numbers to zero (optim.c says why),
 * and leaves the caller's floating-point mode as it found it. */
static void flush_subnormals(void)
{
#if defined(__SSE__) || defined(__x86_64__)
    nrt_optim h = {NRT_SGD, .lr = 0.1f, .momentum = 0.5f};
    nrt_optim_state s;
    if (nrt_optim_init(&s, &h, 2, NULL))
        abort();
    float p[2] = {1.0f, 1.0f}, g[2] = {2e-38f, 1.0f}; /* 2e-38: normal */
    const float zero[2] = {0.0f, 0.0f};
    nrt_optim_step(&s, p, g);                         /* buf = g */
    const unsigned csr = _mm_getcsr();
    nrt_optim_step(&s, p, zero); /* buf = 0.5 buf: 1e-38, a subnormal */
    checks += 3;
    if (s.m[0] != 0.0f || s.m[1] != 0.5f) {
        fprintf(stderr, "FAIL: flush: buf %g %g, want 0 and 0.5\n", s.m[0], s.m[1]);
        failures++;
    }
    if ((_mm_getcsr() ^ csr) & ~0x3fu) { /* the modes; not the sticky flags, bits 0-5 */
        fprintf(stderr, "FAIL: flush: the step left MXCSR %#x (was %#x)\n", _mm_getcsr(), csr);
        failures++;
    }
    volatile float tiny = 2e-38f; /* and this code still computes subnormals */
    if (tiny * 0.5f == 0.0f) {
        fprintf(stderr, "FAIL: flush: subnormals flushed outside the step\n");
        failures++;
    }
    nrt_optim_free(&s);
#endif
}

int main(void)
{
    /* plain SGD: p = 1 - 0.1 (0.5 - 0.25 + 1.0) = 0.875 */
    expect("sgd", run3((nrt_optim){NRT_SGD, .lr = 0.1f}), 0.875, 1e-6);
    /* momentum 0.9, dampening 0.1, weight decay 0.01:
     *   step 1: d = 0.5 + 0.01 * 1 = 0.51, buf = 0.51, p = 0.949
     *   step 2: d = -0.25 + 0.00949 = -0.24051,
     *           buf = 0.9 * 0.51 + 0.9 * -0.24051 = 0.242541, p = 0.9247459
     *   step 3: d = 1.009247459, buf = 1.1266096131, p = 0.81208493869 */
    expect("sgd momentum dampening weight_decay",
           run3((nrt_optim){NRT_SGD, .lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f,
                            .weight_decay = 0.01f}),
           0.81208493869, 1e-6);
    /* nesterov: step 1: buf = 0.5, d = 0.5 + 0.9 * 0.5 = 0.95, p = 0.905;
     *           step 2: buf = 0.45 - 0.25 = 0.2, d = -0.25 + 0.18, p = 0.912 */
    expect("sgd nesterov",
           run3((nrt_optim){NRT_SGD, .lr = 0.1f, .momentum = 0.9f, .nesterov = 1}), 0.7058, 1e-6);
    expect("sgd nesterov weight_decay",
           run3((nrt_optim){NRT_SGD, .lr = 0.1f, .momentum = 0.9f, .nesterov = 1,
                            .weight_decay = 0.01f}),
           0.6981892081909999, 1e-6);
    /* Adam, defaults: step 1: m = 0.05, v = 0.00025, bias corrections 0.1 and
     * 0.001, so p = 1 - 0.1 * (0.05 / 0.1) / (sqrt(0.00025 / 0.001) + 1e-8) = 0.9 */
    expect("adam", run3((nrt_optim){NRT_ADAM, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                                    .eps = 1e-8f}),
           0.8075551396770898, 1e-6);
    expect("adam betas eps weight_decay",
           run3((nrt_optim){NRT_ADAM, .lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-3f,
                            .weight_decay = 0.1f}),
           0.7838348163161047, 1e-6);
    /* AdamW, lr 0.1, weight decay 0.1: step 1: p = 1 (1 - 0.01) = 0.99, then
     * Adam's step without the decay in g: p = 0.99 - 0.1 = 0.89; step 2:
     * p = 0.89 * 0.99 - 0.1 * (0.02 / 0.19) / (sqrt(0.00031225 / 0.001999)
     * + 1e-8) = 0.8544662987; step 3: 0.7801104767.  (Adam with weight_decay
     * 0.1, the L2 form, ends at 0.7815043999: 1.8e-3 away.) */
    const nrt_optim adamw = {NRT_ADAMW, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                             .eps = 1e-8f, .weight_decay = 0.1f};
    expect("adamw", run3(adamw), 0.7801104766702113, 1e-6);
    expect("adamw without weight_decay is adam",
           run3((nrt_optim){NRT_ADAMW, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                            .eps = 1e-8f}),
           0.8075551396770898, 1e-6);

    /* a kind this runtime does not have is refused, not run as another */
    nrt_optim_state none;
    nrt_error err = {0};
    checks += 3;
    if (nrt_optim_find(NRT_OPTIM_KINDS) || nrt_optim_slots(&(nrt_optim){.kind = NRT_OPTIM_KINDS}) != -1 ||
        nrt_optim_init(&none, &(nrt_optim){NRT_OPTIM_KINDS, .lr = 0.1}, 4, &err) != -1) {
        fprintf(stderr, "FAIL: an unknown optimizer kind was accepted\n");
        failures++;
    }
    /* and a schedule's */
    checks += 2;
    if (nrt_schedule_name(NRT_SCHED_KINDS) || nrt_schedule_name(-1)) {
        fprintf(stderr, "FAIL: an unknown schedule kind was named\n");
        failures++;
    }
    if (strcmp(nrt_schedule_name(NRT_SCHED_PLATEAU), "reduce_on_plateau") ||
        strcmp(nrt_schedule_name(NRT_SCHED_NONE), "none")) {
        fprintf(stderr, "FAIL: the schedules' names\n");
        failures++;
    }
    /* the rows: checkpoint names as PyTorch's state_dict has them */
    expect_row(NRT_SGD, "sgd", "SGD", "momentum_buffer", NULL);
    expect_row(NRT_ADAM, "adam", "Adam", "exp_avg", "exp_avg_sq");
    expect_row(NRT_ADAMW, "adamw", "AdamW", "exp_avg", "exp_avg_sq");

    random_walk("sgd", (nrt_optim){NRT_SGD, .lr = 0.05f});
    random_walk("sgd momentum", (nrt_optim){NRT_SGD, .lr = 0.05f, .momentum = 0.9f,
                                            .dampening = 0.1f, .weight_decay = 1e-3f});
    random_walk("sgd nesterov", (nrt_optim){NRT_SGD, .lr = 0.05f, .momentum = 0.8f,
                                            .nesterov = 1, .weight_decay = 1e-2f});
    random_walk("adam", (nrt_optim){NRT_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                    .eps = 1e-8f});
    random_walk("adam weight_decay", (nrt_optim){NRT_ADAM, .lr = 1e-2f, .beta1 = 0.85f,
                                                 .beta2 = 0.99f, .eps = 1e-6f,
                                                 .weight_decay = 0.05f});
    random_walk("adamw", (nrt_optim){NRT_ADAMW, .lr = 1e-2f, .beta1 = 0.85f, .beta2 = 0.99f,
                                     .eps = 1e-6f, .weight_decay = 0.05f});
    flush_subnormals();
    printf("test_optim: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
