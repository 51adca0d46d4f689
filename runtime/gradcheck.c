/*
 * gradcheck.c — every gradient of the generated backward pass against
 * central finite differences of the forward pass, on the device the run
 * selected: PROG --gradcheck N [--device cuda] [--precision bf16|fp16],
 * which the tests run on every model, on the cpu and on the (emulated) GPU,
 * in the three precisions.
 *
 * Each parameter tensor is sampled (at most about 64 values of each) and so
 * is the input (about 256 values); each value is moved by +-h (1e-3, or
 * $NETRT_GRADCHECK_STEP) and the loss evaluated again.  A derivative agrees
 * within 2e-4 + 5e-3 * its size (plus 4 |loss| FLT_EPSILON / h, what the
 * float loss's rounding leaves the differences), or it sits on a kink
 * (relu at 0, a maxpool tie) where the one-sided differences disagree and
 * it matches one of them, or it agrees over [-h/10, h/10] (two kinks
 * within h, or one and the curvature beside it: counted as at a kink).
 * The loss is computed in float: the step is a compromise between rounding
 * and curvature, which the tolerances allow for.
 *
 * On a GPU the loss (to 1e-5) and the analytic gradients are also compared
 * with the cpu's, every value of them, far tighter than finite differences
 * can: two backward passes of the same arithmetic in another order agree
 * within 1e-5 of the tensor's largest gradient plus 1e-6 of the model's
 * largest.
 *
 * In bf16 and fp16 finite differences say nothing: bf16 keeps 8 bits of
 * significand (its unit roundoff u, the largest relative error of a
 * rounding, is 2^-8), fp16 11 (u = 2^-11), and a weight moved by 1e-3
 * mostly rounds to the value it had.  From the same weights on the same
 * batch, three checks instead:
 *  - fp32's passes against finite differences, as above, on an fp32 cpu
 *    backend beside the run's;
 *  - the forward pass: the loss against fp32's, within 4 u S, where
 *    S = sum |w dL/dw| + sum |x dL/dx| over the weights and the input
 *    (fp32's gradients): rounding each of them by up to u moves the loss by
 *    at most u S, to first order, and the rounding of each layer's output
 *    by about as much again;
 *  - the backward pass: every gradient, of the parameters and of the input,
 *    against the same backward pass in fp32 over the same forward pass
 *    (nrt_backend's gradient with fp32_backward: the same values, the same
 *    relu and maxpool decisions; in fp16 from the loss unscaled, so that
 *    the loss scale's way in and out is checked too), within 8 u of the
 *    model's largest gradient.  A value's error is the sum of the
 *    roundings on its way from the loss: the gradient of each layer's
 *    output between, each product's rounded weights, its own; up to about
 *    8 in these models, each within u of what it rounds, which has the
 *    scale of the model's gradients, not the value's own (a sum that
 *    cancels, as the gradient of a bias before batchnorm, exactly 0, has
 *    none).
 * Measured (the tests' models, tests/gradcheck and boston_mlp, seeds 1 to
 * 10, 4 samples): the loss at worst 0.93 u S (standalone_acts, bf16), the
 * gradients 3.0 u (standalone_acts, bf16; 2.3 u in fp16); in fp16 from the
 * largest loss scale that fits (--loss-scale 1e30) and batches of 2 to 8,
 * 2.0 u S and 3.9 u, and 4.5 u for tests/flags.sh's 2-sample model; the
 * models of models/ with their data, seeds 1 to 5, 0.23 u S and 2.6 u
 * (airline_rnn).  So 4 and 8 hold with room to spare, and the check still
 * fails a layer's largest gradient 1 + 16 u times what it should be, or
 * the loss scale left in or taken out twice.
 * Why not against fp32's own gradients: where a relu's input is within
 * the roundings of 0, or a maxpool window's two largest values are within
 * them of each other, low precision decides the other way and sends the
 * gradient elsewhere, far more than u away (the same sweep: 27 u of the
 * model's largest gradient, a whole channel of conv_stride_pad's first
 * weights, in bf16); the loss, continuous there, does not jump.
 * On a GPU the run's own passes are checked so, fp32's finite differences
 * on the cpu; the GPU's bf16 and fp16 against the cpu's are
 * tests/gpu/parity.sh's.
 */
#include "netrt.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The batch, the weights as the host holds them, and the backend. */
typedef struct Probe {
    const nrt_backend *be;
    nrt_batch b;
    float *param;
    const void *buffers;
    nrt_error *err;
} Probe;

/* The batch's loss with the weights in p->param, sent to the device first
 * when they moved.  The step counter does not move, so every evaluation
 * sees the same dropout masks. */
static int loss_at(const Probe *p, int moved, double *loss)
{
    float l;
    if ((moved && p->be->set_params(p->be->ctx, p->param, p->buffers, p->err)) ||
        p->be->gradient(p->be->ctx, &p->b, 0, &l, NULL, NULL, p->err))
        return -1;
    *loss = (double)l;
    return 0;
}

typedef struct Check {
    long long checked, kinks, failed;
    double max_err;
    double noise; /* the largest error the loss's rounding allows */
} Check;

/* The loss's differences over [-h, h] about *v: central, one-sided, and
 * what the loss's rounding leaves in them. */
typedef struct Diffs {
    double central, left, right, noise;
} Diffs;

static int diffs_at(const Probe *p, float *v, int moved, double h, Diffs *d)
{
    float saved = *v;
    double up, down, mid;
    *v = saved + (float)h;
    int rc = loss_at(p, moved, &up);
    *v = saved - (float)h;
    rc = rc || loss_at(p, moved, &down);
    *v = saved;
    if (rc || loss_at(p, moved, &mid))
        return -1;
    d->central = (up - down) / (2 * h);
    d->right = (up - mid) / h;
    d->left = (mid - down) / h;
    /* The loss is a float, each evaluation off by a few of its last bits,
     * which the differences divide by h: a large loss (an MSE of prices in
     * the hundreds) bounds what they can resolve, and the tolerance says so. */
    d->noise = 4 * fabs(mid) * FLT_EPSILON / h;
    return 0;
}

enum { AGREES, ON_KINK, DIFFERS };

/* The analytic derivative against the differences, within atol + 5e-3
 * of the larger: it agrees with the central one, or [-h, h] holds a kink
 * (relu at 0, a maxpool tie) where the one-sided ones disagree and it
 * matches one of them. */
static int judge(double analytic, const Diffs *d, double atol, double *err)
{
    const double rtol = 5e-3, tol = atol + rtol * fmax(fabs(analytic), fabs(d->central));
    *err = fabs(analytic - d->central);
    if (*err <= tol)
        return AGREES;
    if (fabs(d->right - d->left) > tol &&
        (fabs(analytic - d->left) <= atol + rtol * fabs(d->left) ||
         fabs(analytic - d->right) <= atol + rtol * fabs(d->right)))
        return ON_KINK;
    return DIFFERS;
}

/* Compares the analytic derivative of value *v (a parameter when moved,
 * else an input) with central differences; -1 on a backend error.  Where
 * it differs, [-h, h] may hold two kinks, or one with the curvature beside
 * it (moving one weight of a convolution moves every pixel's relu input):
 * the differences over [-h/10, h/10], which hold them ten times less often,
 * decide, within the same tolerance, and a value that agrees there counts
 * as at a kink. */
static int check_one(const Probe *p, float *v, int moved, double analytic, const char *what,
                     long long index, Check *c, int verbose)
{
    const char *step = getenv("NETRT_GRADCHECK_STEP");
    const double h = step ? atof(step) : 1e-3;
    Diffs d, near;
    double err, near_err;
    if (diffs_at(p, v, moved, h, &d))
        return -1;
    if (d.noise > c->noise)
        c->noise = d.noise;
    c->checked++;
    /* (the same atol over h / 10: no looser for the loss's rounding there) */
    const double atol = 2e-4 + d.noise;
    int verdict = judge(analytic, &d, atol, &err);
    if (verdict == DIFFERS) {
        if (diffs_at(p, v, moved, h / 10, &near))
            return -1;
        if (judge(analytic, &near, atol, &near_err) != DIFFERS)
            verdict = ON_KINK;
    }
    switch (verdict) {
    case AGREES:
        if (err > c->max_err)
            c->max_err = err;
        return 0;
    case ON_KINK:
        c->kinks++;
        if (verbose)
            printf("kink %s[%lld]: analytic %.6g, left %.6g, right %.6g\n", what, index,
                   analytic, d.left, d.right);
        return 0;
    }
    c->failed++;
    printf("MISMATCH %s[%lld]: analytic %.6g, numeric %.6g (left %.6g, right %.6g)\n", what,
           index, analytic, d.central, d.left, d.right);
    return 0;
}

/* One tensor of gradients against the reference's (ref names it): every
 * value within rel of the tensor's largest reference gradient plus
 * rel_model of model_scale, the model's largest.  Returns the worst
 * difference as a share of its tolerance, and counts a failure. */
static double compare_tensor(const char *be, const char *ref, const char *what, const float *got,
                             const float *want, size_t n, double rel, double rel_model,
                             double model_scale, long long *failed)
{
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    const double tol = rel * scale + rel_model * model_scale;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / tol; /* NaN: fails below */
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    if (!(worst <= 1)) {
        (*failed)++;
        printf("MISMATCH %s[%zu] on %s: %.9g, %s %.9g (tolerance %.3g)\n", what, at, be, got[at],
               ref, want[at], tol);
    }
    return worst;
}

static double largest(const float *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* Every gradient, of the parameters and of the input (nin values), against
 * ref's, by compare_tensor; the worst share of its tolerance. */
static double compare_all(const nrt_model *m, const char *be, const char *ref, const float *grad,
                          const float *dinput, const float *rgrad, const float *rdinput,
                          size_t nin, double rel, double rel_model, long long *failed)
{
    const double scale = fmax(largest(rgrad, m->param_count), largest(rdinput, nin));
    double worst = 0;
    for (int i = 0; i < m->n_params; i++) {
        const nrt_param *t = &m->params[i];
        worst = fmax(worst, compare_tensor(be, ref, t->name, grad + t->offset, rgrad + t->offset,
                                           t->size, rel, rel_model, scale, failed));
    }
    return fmax(worst, compare_tensor(be, ref, "input", dinput, rdinput, nin, rel, rel_model,
                                      scale, failed));
}

static int all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!nrt_f32_finite(v[i]))
            return 0;
    return 1;
}

/* The gradients of the batch b at param, into grad [np] and dinput [nin]
 * (be->gradient with fp32_backward), and the loss. */
static int gradients(const nrt_backend *be, const nrt_batch *b, int fp32_backward,
                     const float *param, const void *buffers, float *loss, float *grad,
                     float *dinput, nrt_error *err)
{
    return be->set_params(be->ctx, param, buffers, err) ||
                   be->gradient(be->ctx, b, fp32_backward, loss, grad, dinput, err)
               ? -1
               : 0;
}

/* fp16: the gradients at the scaler's scale, or, where they overflow, at
 * the first of its halvings where they do not: what GradScaler comes to
 * after skipping the steps that overflow (said when it moved).  The
 * scaler's state is left in *first, the scale used in *used. */
static int fp16_gradients(const nrt_backend *be, const nrt_batch *b, const float *param,
                          const void *buffers, float *loss, float *grad, size_t np,
                          float *dinput, size_t nin, nrt_scaler *first, float *used,
                          nrt_error *err)
{
    if (be->get_scaler(be->ctx, first, err) ||
        gradients(be, b, 0, param, buffers, loss, grad, dinput, err))
        return -1;
    nrt_scaler s = *first;
    int fit;
    while (!(fit = all_finite(grad, np) && all_finite(dinput, nin)) && s.scale > FLT_MIN) {
        s.scale *= NRT_SCALE_BACKOFF;
        if (be->set_scaler(be->ctx, &s, err) ||
            gradients(be, b, 0, param, buffers, loss, grad, dinput, err))
            return -1;
    }
    if (!fit)
        printf("gradcheck: fp16's gradients overflow at every loss scale from %g down\n",
               (double)first->scale);
    else if (s.scale != first->scale)
        printf("gradcheck: fp16's gradients overflow at the loss scale %g: checked at %g, the "
               "first of its halvings where they do not\n", (double)first->scale,
               (double)s.scale);
    *used = s.scale;
    return 0;
}

/* bf16's and fp16's tolerances, in units of the precision's unit roundoff
 * (the comment at the top says why): the loss's, of what rounding the
 * weights and the input moves it by; the gradients', of the largest. */
#define LOWP_LOSS_K 4
#define LOWP_GRAD_K 8

/* Low precision's checks (the comment at the top): be's loss against
 * loss32, fp32's from the same weights, whose gradients are g32 and dx32;
 * be's gradients against its backward pass in fp32 over the same forward.
 * grad and dinput: room for two sets. */
static int check_lowp(const nrt_model *m, const nrt_backend *be, int precision,
                      const nrt_batch *b, const float *param, const void *buffers, float loss32,
                      const float *g32, const float *dx32, float *grad, float *dinput,
                      nrt_error *err)
{
    const size_t np = m->param_count, nin = (size_t)b->n * m->in_size;
    const char *prec = nrt_precision_name(precision);
    const int log2u = precision == NRT_BF16 ? -8 : -11;
    const double u = ldexp(1, log2u);
    float *rgrad = grad + np, *rdinput = dinput + nin, loss, rloss, used = 1;
    /* fp16: the reference from the loss unscaled (a scale of 1, or less
     * where the gradients need it), so that the way of the scale into the
     * gradients and out of them is checked too */
    nrt_scaler first, one = {1.0f, 0, 0};
    if (precision == NRT_FP16
            ? fp16_gradients(be, b, param, buffers, &loss, grad, np, dinput, nin, &first, &used,
                             err) ||
                  (one.scale = fminf(1.0f, used), be->set_scaler(be->ctx, &one, err)) ||
                  gradients(be, b, 1, param, buffers, &rloss, rgrad, rdinput, err) ||
                  be->set_scaler(be->ctx, &first, err)
            : gradients(be, b, 0, param, buffers, &loss, grad, dinput, err) ||
                  gradients(be, b, 1, param, buffers, &rloss, rgrad, rdinput, err))
        return -1;

    /* the forward pass: the loss, against fp32's */
    double moves = 0; /* what rounding the weights and the input by u moves it by, / u */
    for (size_t i = 0; i < np; i++)
        moves += fabs((double)param[i] * g32[i]);
    for (size_t i = 0; i < nin; i++)
        moves += fabs((double)b->x[i] * dx32[i]);
    /* (plus a few of fp32's own roundings of the loss) */
    const double ltol = LOWP_LOSS_K * u * moves + 1e-7 * fabs((double)loss32);
    const double lworst = fabs((double)loss - loss32) / ltol;
    long long lfailed = !(lworst <= 1);
    if (lfailed)
        printf("MISMATCH the loss on %s in %s: %.9g, fp32's %.9g (tolerance %.3g)\n", be->name,
               prec, loss, loss32, ltol);
    printf("gradcheck: %s's loss on %s %.7g against fp32's %.7g, within %d u (u = 2^%d) of "
           "what rounding the weights and the input moves it by: %.2g of that: %s\n", prec,
           be->name, loss, loss32, LOWP_LOSS_K, log2u, lworst, lfailed ? "FAILED" : "ok");

    /* the backward pass: every gradient, against the same without its
     * roundings */
    char bname[sizeof be->name + 16];
    snprintf(bname, sizeof bname, "%s in %s", be->name, prec);
    long long failed = 0;
    const double worst = compare_all(m, bname, "in fp32", grad, dinput, rgrad, rdinput, nin, 0,
                                     LOWP_GRAD_K * u, &failed);
    printf("gradcheck: %s's gradients on %s against its backward pass in fp32 over the same "
           "forward pass: %zu values within %d u of the largest, the largest difference %.2g "
           "of that: %s\n", prec, be->name, np + nin, LOWP_GRAD_K, worst,
           failed ? "FAILED" : "ok");
    return lfailed || failed ? 1 : 0;
}

int nrt_gradcheck(const nrt_model *m, const nrt_backend *be, int precision,
                  const nrt_backend *ref, const nrt_dataset *d, int nsamples, float *param,
                  const void *buffers, nrt_error *err)
{
    const size_t n = (size_t)nsamples < d->n ? (size_t)nsamples : d->n;
    const size_t np = m->param_count, nin = n * m->in_size;
    uint32_t *idx = malloc(sizeof *idx * n);
    float *x = malloc(sizeof(float) * nin);
    int32_t *label = d->label ? malloc(sizeof(int32_t) * n) : NULL;
    float *y = d->y ? malloc(sizeof(float) * n * d->ydim) : NULL;
    /* the gradients: the fp32 ones the differences check, then two sets
     * more (a GPU's and the cpu's; low precision's and the reference's) */
    float *grad = calloc(3 * np + 1, sizeof(float)), *dinput = calloc(3 * nin + 1, sizeof(float));
    int status = -1;
    if (!idx || !x || (d->label && !label) || (d->y && !y) || !grad || !dinput) {
        nrt_errorf(err, "gradcheck: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nrt_dataset_gather(d, idx, n, x, label, y);
    /* finite differences check fp32's passes: be's, or (in bf16 and fp16)
     * the cpu's */
    const nrt_backend *fd = precision == NRT_FP32 ? be : ref;
    if (!fd) {
        nrt_errorf(err, "internal error: --gradcheck in %s without an fp32 reference",
                   nrt_precision_name(precision));
        goto done;
    }
    Probe p = {fd, {(int)n, x, label, y, 0}, param, buffers, err};
    float loss;
    if (gradients(fd, &p.b, 0, param, buffers, &loss, grad, dinput, err))
        goto done;

    Check c = {0};
    int verbose = getenv("NETRT_GRADCHECK_VERBOSE") != NULL;
    for (int i = 0; i < m->n_params; i++) {
        const nrt_param *t = &m->params[i];
        size_t stride = t->size > 64 ? t->size / 64 : 1; /* at most ~64 per tensor */
        for (size_t k = 0; k < t->size; k += stride)
            if (check_one(&p, param + t->offset + k, 1, grad[t->offset + k], t->name,
                          (long long)k, &c, verbose))
                goto done;
    }
    /* the weights as they were, for the input's checks */
    if (fd->set_params(fd->ctx, param, buffers, err))
        goto done;
    size_t stride = nin > 256 ? nin / 256 : 1;
    for (size_t k = 0; k < nin; k += stride)
        if (check_one(&p, x + k, 0, dinput[k], "input", (long long)k, &c, verbose))
            goto done;
    if (c.noise > 2e-3) /* a loss past about 4 */
        printf("gradcheck: the loss (%.4g) is a float: its differences resolve derivatives to "
               "%.2g at best, which the tolerance allows (a smaller loss checks closer)\n",
               (double)loss, c.noise);
    printf("gradcheck on %s%s: %lld values checked on %zu samples, %lld at kinks, max error "
           "%.3g: %s\n", fd->name, fd == be ? "" : " in fp32", c.checked, n, c.kinks, c.max_err,
           c.failed ? "FAILED" : "ok");
    status = c.failed ? 1 : 0;

    int more = 0; /* the checks below: 0 if they pass, 1 if not, -1 on an error */
    if (precision != NRT_FP32) {
        more = check_lowp(m, be, precision, &p.b, param, buffers, loss, grad, dinput, grad + np,
                          dinput + nin, err);
    } else if (ref) {
        /* a GPU against the cpu: the loss (the forward pass) to 1e-5, then
         * every gradient */
        float *rgrad = grad + np, *rdinput = dinput + nin, rloss;
        if (gradients(ref, &p.b, 0, param, buffers, &rloss, rgrad, rdinput, err)) {
            status = -1;
            goto done;
        }
        long long failed = !(fabs((double)loss - rloss) <= 1e-5 * fabs((double)rloss) + 1e-7);
        if (failed)
            printf("MISMATCH the loss on %s: %.9g, the cpu's %.9g\n", be->name, loss, rloss);
        double worst = compare_all(m, be->name, "the cpu's", grad, dinput, rgrad, rdinput, nin,
                                   1e-5, 1e-6, &failed);
        printf("gradcheck: %s's loss and gradients against the cpu's: loss %.7g (cpu %.7g), %zu "
               "gradients, the largest difference %.2g of its tolerance: %s\n", be->name, loss,
               rloss, np + nin, worst, failed ? "FAILED" : "ok");
        more = failed ? 1 : 0;
    }
    status = more < 0 ? -1 : status || more;
done:
    free(idx);
    free(x);
    free(label);
    free(y);
    free(grad);
    free(dinput);
    return status;
}
