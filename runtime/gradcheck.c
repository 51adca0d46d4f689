/*
 * gradcheck.c — every gradient of the generated backward pass against
 * central finite differences of the forward pass, on the device the run
 * selected: PROG --gradcheck N [--device cuda], which the tests run on
 * every model, on the cpu and on the (emulated) GPU.
 *
 * Each parameter tensor is sampled (at most about 64 values of each) and so
 * is the input (about 256 values); each value is moved by +-h (1e-3, or
 * $NETRT_GRADCHECK_STEP) and the loss evaluated again.  A derivative agrees
 * within 2e-4 + 5e-3 * its size (plus 4 |loss| FLT_EPSILON / h, what the
 * float loss's rounding leaves the differences), or it sits on a kink
 * (relu at 0, a maxpool tie) where the one-sided differences disagree and
 * it matches one of them.
 * The loss is computed in float: the step is a compromise between rounding
 * and curvature, which the tolerances allow for.
 *
 * On a GPU the loss (to 1e-5) and the analytic gradients are also compared
 * with the cpu's, every value of them, far tighter than finite differences
 * can: two backward passes of the same arithmetic in another order agree
 * within 1e-5 of the tensor's largest gradient plus 1e-6 of the model's
 * largest.
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
        p->be->gradient(p->be->ctx, &p->b, &l, NULL, NULL, p->err))
        return -1;
    *loss = (double)l;
    return 0;
}

typedef struct Check {
    long long checked, kinks, failed;
    double max_err;
    double noise; /* the largest error the loss's rounding allows */
} Check;

/* Compares the analytic derivative of value *v (a parameter when moved,
 * else an input) with central differences; -1 on a backend error. */
static int check_one(const Probe *p, float *v, int moved, double analytic, const char *what,
                     long long index, Check *c, int verbose)
{
    const char *step = getenv("NETRT_GRADCHECK_STEP");
    const double h = step ? atof(step) : 1e-3, rtol = 5e-3;
    float saved = *v;
    double up, down, mid;
    *v = saved + (float)h;
    int rc = loss_at(p, moved, &up);
    *v = saved - (float)h;
    rc = rc || loss_at(p, moved, &down);
    *v = saved;
    if (rc || loss_at(p, moved, &mid))
        return -1;
    double central = (up - down) / (2 * h);
    double right = (up - mid) / h, left = (mid - down) / h;
    /* The loss is a float, each evaluation off by a few of its last bits,
     * which the differences divide by h: a large loss (an MSE of prices in
     * the hundreds) bounds what they can resolve, and the tolerance says so. */
    const double noise = 4 * fabs(mid) * FLT_EPSILON / h, atol = 2e-4 + noise;
    if (noise > c->noise)
        c->noise = noise;
    c->checked++;
    double err = fabs(analytic - central);
    double tol = atol + rtol * fmax(fabs(analytic), fabs(central));
    if (err <= tol) {
        if (err > c->max_err)
            c->max_err = err;
        return 0;
    }
    /* a kink (relu at 0, a maxpool tie) inside [-h, h]: the one-sided
     * derivatives disagree, and the analytic one must be one of them */
    if (fabs(right - left) > tol) {
        double el = fabs(analytic - left), er = fabs(analytic - right);
        if (el <= atol + rtol * fabs(left) || er <= atol + rtol * fabs(right)) {
            c->kinks++;
            if (verbose)
                printf("kink %s[%lld]: analytic %.6g, left %.6g, right %.6g\n", what, index,
                       analytic, left, right);
            return 0;
        }
    }
    c->failed++;
    printf("MISMATCH %s[%lld]: analytic %.6g, numeric %.6g (left %.6g, right %.6g)\n", what,
           index, analytic, central, left, right);
    return 0;
}

/* One tensor of gradients against the reference's: every value within
 * 1e-5 of the tensor's largest reference gradient, or 1e-6 of the model's
 * largest (a gradient that is 0 but for rounding, as a bias's before a
 * batchnorm, has no scale of its own).  Returns the worst difference as a
 * share of its tolerance, and counts a failure. */
static double compare_tensor(const char *be, const char *what, const float *got,
                             const float *want, size_t n, double model_scale, long long *failed)
{
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    const double tol = 1e-5 * scale + 1e-6 * model_scale;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / tol; /* NaN: fails below */
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    if (!(worst <= 1)) {
        (*failed)++;
        printf("MISMATCH %s[%zu] on %s: %.9g, the cpu's %.9g (tolerance %.3g)\n", what, at, be,
               got[at], want[at], tol);
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

int nrt_gradcheck(const nrt_model *m, const nrt_backend *be, const nrt_backend *ref,
                  const nrt_dataset *d, int nsamples, float *param, const void *buffers,
                  nrt_error *err)
{
    const size_t n = (size_t)nsamples < d->n ? (size_t)nsamples : d->n;
    const size_t np = m->param_count, nin = n * m->in_size;
    uint32_t *idx = malloc(sizeof *idx * n);
    float *x = malloc(sizeof(float) * nin);
    int32_t *label = d->label ? malloc(sizeof(int32_t) * n) : NULL;
    float *y = d->y ? malloc(sizeof(float) * n * d->ydim) : NULL;
    /* the gradients: be's, then (with ref) the cpu's */
    float *grad = calloc(2 * np + 1, sizeof(float)), *dinput = calloc(2 * nin, sizeof(float));
    int status = -1;
    if (!idx || !x || (d->label && !label) || (d->y && !y) || !grad || !dinput) {
        nrt_errorf(err, "gradcheck: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nrt_dataset_gather(d, idx, n, x, label, y);
    Probe p = {be, {(int)n, x, label, y, 0}, param, buffers, err};
    float loss;
    if (be->set_params(be->ctx, param, buffers, err) ||
        be->gradient(be->ctx, &p.b, &loss, grad, dinput, err))
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
    if (be->set_params(be->ctx, param, buffers, err))
        goto done;
    size_t stride = nin > 256 ? nin / 256 : 1;
    for (size_t k = 0; k < nin; k += stride)
        if (check_one(&p, x + k, 0, dinput[k], "input", (long long)k, &c, verbose))
            goto done;
    if (c.noise > 2e-3) /* a loss past about 4 */
        printf("gradcheck: the loss (%.4g) is a float: its differences resolve derivatives to "
               "%.2g at best, which the tolerance allows (a smaller loss checks closer)\n",
               (double)loss, c.noise);
    printf("gradcheck on %s: %lld values checked on %zu samples, %lld at kinks, max error "
           "%.3g: %s\n", be->name, c.checked, n, c.kinks, c.max_err, c.failed ? "FAILED" : "ok");
    status = c.failed ? 1 : 0;
    if (!ref)
        goto done;

    float *rgrad = grad + np, *rdinput = dinput + nin, rloss;
    if (ref->set_params(ref->ctx, param, buffers, err) ||
        ref->gradient(ref->ctx, &p.b, &rloss, rgrad, rdinput, err)) {
        status = -1;
        goto done;
    }
    /* the loss (the forward pass) to 1e-5, then the gradients */
    long long failed = !(fabs((double)loss - rloss) <= 1e-5 * fabs((double)rloss) + 1e-7);
    if (failed)
        printf("MISMATCH the loss on %s: %.9g, the cpu's %.9g\n", be->name, loss, rloss);
    const double scale = fmax(largest(rgrad, np), largest(rdinput, nin));
    double worst = 0;
    for (int i = 0; i < m->n_params; i++) {
        const nrt_param *t = &m->params[i];
        worst = fmax(worst, compare_tensor(be->name, t->name, grad + t->offset,
                                           rgrad + t->offset, t->size, scale, &failed));
    }
    worst = fmax(worst, compare_tensor(be->name, "input", dinput, rdinput, nin, scale, &failed));
    printf("gradcheck: %s's loss and gradients against the cpu's: loss %.7g (cpu %.7g), %zu "
           "gradients, the largest difference %.2g of its tolerance: %s\n", be->name, loss, rloss,
           np + nin, worst, failed ? "FAILED" : "ok");
    if (failed)
        status = 1;
done:
    free(idx);
    free(x);
    free(label);
    free(y);
    free(grad);
    free(dinput);
    return status;
}
