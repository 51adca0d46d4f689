/*
 * gradcheck.c — every gradient of the generated backward pass against
 * central finite differences of the forward pass: PROG --gradcheck N, which
 * the tests run on every model.
 *
 * Each parameter tensor is sampled (at most about 64 values of each) and so
 * is the input (about 256 values); each value is moved by +-h (1e-3, or
 * $NETRT_GRADCHECK_STEP) and the loss evaluated again.  A derivative agrees
 * within 2e-4 + 5e-3 * its size, or it sits on a kink (relu at 0, a maxpool
 * tie) where the one-sided differences disagree and it matches one of them.
 * The loss is computed in float: the step is a compromise between rounding
 * and curvature, which the tolerances allow for.
 */
#include "netrt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loss of the batch.  net->step does not move, so every evaluation of
 * the loss sees the same dropout masks. */
static double loss_at(nrt_net *net, const nrt_batch *b)
{
    const float *out;
    return (double)net->model->forward(net, b, &out);
}

typedef struct Check {
    long long checked, kinks, failed;
    double max_err;
} Check;

/* Compares the analytic derivative of value *v with central differences. */
static void check_one(nrt_net *net, const nrt_batch *b, float *v,
                      double analytic, const char *what, long long index, Check *c, int verbose)
{
    const char *step = getenv("NETRT_GRADCHECK_STEP");
    const double h = step ? atof(step) : 1e-3, atol = 2e-4, rtol = 5e-3;
    float saved = *v;
    *v = saved + (float)h;
    double up = loss_at(net, b);
    *v = saved - (float)h;
    double down = loss_at(net, b);
    *v = saved;
    double mid = loss_at(net, b);
    double central = (up - down) / (2 * h);
    double right = (up - mid) / h, left = (mid - down) / h;
    c->checked++;
    double err = fabs(analytic - central);
    double tol = atol + rtol * fmax(fabs(analytic), fabs(central));
    if (err <= tol) {
        if (err > c->max_err)
            c->max_err = err;
        return;
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
            return;
        }
    }
    c->failed++;
    printf("MISMATCH %s[%lld]: analytic %.6g, numeric %.6g (left %.6g, right %.6g)\n", what,
           index, analytic, central, left, right);
}

int nrt_gradcheck(nrt_net *net, const nrt_dataset *d, int nsamples, uint64_t seed)
{
    const nrt_model *m = net->model;
    size_t n = (size_t)nsamples < d->n ? (size_t)nsamples : d->n;
    uint32_t *idx = malloc(sizeof *idx * n);
    float *x = malloc(sizeof(float) * n * m->in_size);
    int32_t *label = d->label ? malloc(sizeof(int32_t) * n) : NULL;
    float *y = d->y ? malloc(sizeof(float) * n * d->ydim) : NULL;
    float *analytic = malloc(sizeof(float) * m->param_count + 1);
    float *dinput = calloc(n * m->in_size, sizeof(float));
    if (!idx || !x || (d->label && !label) || (d->y && !y) || !analytic || !dinput) {
        fprintf(stderr, "gradcheck: out of memory\n");
        free(idx), free(x), free(label), free(y), free(analytic), free(dinput);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nrt_dataset_gather(d, idx, n, x, label, y);
    nrt_batch b = {(int)n, x, label, y};
    net->dropout_key = nrt_stream_key(seed, NRT_STREAM_DROPOUT);
    net->training = 1;
    net->dinput = dinput;
    loss_at(net, &b);
    m->backward(net, &b);
    memcpy(analytic, net->grad, sizeof(float) * m->param_count);
    net->dinput = NULL;

    Check c = {0};
    int verbose = getenv("NETRT_GRADCHECK_VERBOSE") != NULL;
    for (int i = 0; i < m->n_params; i++) {
        const nrt_param *p = &m->params[i];
        size_t stride = p->size > 64 ? p->size / 64 : 1; /* at most ~64 per tensor */
        for (size_t k = 0; k < p->size; k += stride)
            check_one(net, &b, net->param + p->offset + k, analytic[p->offset + k],
                      p->name, (long long)k, &c, verbose);
    }
    size_t nin = n * m->in_size, stride = nin > 256 ? nin / 256 : 1;
    for (size_t k = 0; k < nin; k += stride)
        check_one(net, &b, x + k, dinput[k], "input", (long long)k, &c, verbose);
    printf("gradcheck: %lld values checked on %zu samples, %lld at kinks, max error %.3g: %s\n",
           c.checked, n, c.kinks, c.max_err, c.failed ? "FAILED" : "ok");
    free(x);
    free(label);
    free(y);
    free(idx);
    free(analytic);
    net->dinput = NULL;
    free(dinput);
    return c.failed ? 1 : 0;
}
