/*
 * session.c — a model as an object a C program holds: open it on a
 * device, load or save its weights, predict, train a step, close it.
 *
 * This is what `netc --emit=lib` wraps in functions named after the model
 * (digits_cnn_create, digits_cnn_predict, …).  A session is a backend (the
 * cpu's or a GPU's, as backend.c chooses) with the host's copy of the
 * weights; everything the caller passes is checked here, so a backend never
 * sees a label out of range or a batch larger than its buffers.
 *
 * A model whose training source standardizes its features keeps the
 * statistics with its weights (netrt.h: nrt_stats): they come with a
 * weights file (nrt_session_load) or from the caller
 * (nrt_session_set_stats), and predict and train_step standardize the
 * caller's rows with them, as the generated program does; without any,
 * those calls are refused rather than fed rows on the wrong scale.
 */
#include "netrt.h"

#include <stdlib.h>
#include <string.h>

struct nrt_session {
    const nrt_model *m;
    nrt_backend be;
    float *param; /* the host's copy, for load and save */
    void *buffers; /* likewise: the model's buffers */
    nrt_stats stats; /* the standardization's (dim 0: none yet) */
    float *x;      /* cap rows: the caller's, standardized */
    int cap;
};

int nrt_session_open(const nrt_model *m, const char *dev, int cap, nrt_session **out,
                     nrt_error *err)
{
    *out = NULL;
    if (m->abi != NETRT_ABI)
        return nrt_errorf(err, "model '%s' was generated for netrt ABI %d, this library is ABI %d",
                          m->name, m->abi, NETRT_ABI);
    if (m->loss.kind && !nrt_loss_name(m->loss.kind))
        return nrt_errorf(err, "model '%s': loss kind %d: netrt %s has no such loss; rebuild "
                          "with its netc", m->name, m->loss.kind, NETRT_VERSION);
    if (cap < 0 || cap > (1 << 20))
        return nrt_errorf(err, "a batch capacity of %d (expected 1 to 1048576, or 0: the model's)",
                          cap);
    nrt_session *s = calloc(1, sizeof *s);
    if (!s)
        return nrt_errorf(err, "out of memory");
    s->m = m;
    s->cap = cap ? cap : m->batch;
    s->param = calloc(m->param_count ? m->param_count : 1, sizeof(float));
    s->buffers = calloc(m->buffer_bytes ? m->buffer_bytes : 1, 1);
    s->x = m->train.standardize ? malloc(sizeof(float) * m->in_size * (size_t)s->cap) : NULL;
    if (!s->param || !s->buffers || (m->train.standardize && !s->x)) {
        nrt_session_close(s);
        return nrt_errorf(err, "out of memory");
    }
    nrt_rng init;
    nrt_rng_seed(&init, nrt_stream_key(m->seed, NRT_STREAM_INIT));
    nrt_init_params(m->params, m->n_params, s->param, &init);
    nrt_init_buffers(m->buffers, m->n_buffers, s->buffers);
    nrt_run_config rc = {.cap = s->cap, .dropout_key = nrt_stream_key(m->seed, NRT_STREAM_DROPOUT),
                         .optim = m->optim, .precision = m->precision};
    char note[256];
    if (nrt_backend_open(m, dev ? dev : m->device, &rc, &s->be, note, sizeof note, err) ||
        s->be.set_params(s->be.ctx, s->param, s->buffers, err)) {
        nrt_session_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

const char *nrt_session_device(const nrt_session *s)
{
    return s->be.name;
}

int nrt_session_load(nrt_session *s, const char *path, nrt_error *err)
{
    /* into the host copy first: a bad file changes nothing */
    float *p = malloc(sizeof(float) * (s->m->param_count ? s->m->param_count : 1));
    void *b = malloc(s->m->buffer_bytes ? s->m->buffer_bytes : 1);
    nrt_stats st = {0};
    int rc = p && b ? nrt_weights_load(s->m, p, b, path, err) : nrt_errorf(err, "out of memory");
    if (rc == 0 && s->m->train.standardize)
        rc = nrt_weights_stats(path, s->m->in_size, &st, err);
    if (rc == 0)
        rc = s->be.set_params(s->be.ctx, p, b, err);
    if (rc == 0) {
        memcpy(s->param, p, sizeof(float) * s->m->param_count);
        memcpy(s->buffers, b, s->m->buffer_bytes);
        if (st.dim) { /* a file without them leaves those set before */
            nrt_stats_free(&s->stats);
            s->stats = st;
            st = (nrt_stats){0};
        }
    }
    nrt_stats_free(&st);
    free(p);
    free(b);
    return rc;
}

int nrt_session_save(nrt_session *s, const char *path, nrt_error *err)
{
    if (s->be.get_params(s->be.ctx, s->param, s->buffers, err))
        return -1;
    return nrt_weights_save(s->m, s->param, s->buffers, &s->stats, path, err);
}

size_t nrt_session_stats(const nrt_session *s, const float **mean, const float **std)
{
    if (mean)
        *mean = s->stats.mean;
    if (std)
        *std = s->stats.std;
    return s->stats.dim;
}

int nrt_session_set_stats(nrt_session *s, const float *mean, const float *std, nrt_error *err)
{
    if (!s->m->train.standardize)
        return nrt_errorf(err, "set_stats: model '%s' does not standardize its features",
                          s->m->name);
    if (!mean || !std)
        return nrt_errorf(err, "set_stats: mean and std must not be NULL");
    return nrt_stats_set(&s->stats, s->m->in_size, mean, std, "set_stats", err);
}

/* The caller's n rows x as the model takes them: standardized into s->x
 * (n at most cap) if the model standardizes; NULL if it has no statistics
 * to do it with. */
static const float *prepared(nrt_session *s, const float *x, size_t n, const char *call,
                             nrt_error *err)
{
    const nrt_model *m = s->m;
    if (!m->train.standardize)
        return x;
    if (!s->stats.dim) {
        nrt_errorf(err, "%s: model '%s' standardizes its features, and the session has no "
                   "statistics: load weights saved with them, or set them (set_stats)", call,
                   m->name);
        return NULL;
    }
    memcpy(s->x, x, sizeof(float) * m->in_size * n);
    nrt_stats_apply(&s->stats, s->x, n);
    return s->x;
}

int nrt_session_predict(nrt_session *s, const float *x, size_t n, float *out, nrt_error *err)
{
    if (n == 0)
        return 0;
    if (!x || !out)
        return nrt_errorf(err, "predict: x and out must not be NULL");
    if (!s->m->train.standardize)
        return s->be.predict(s->be.ctx, x, n, out, err);
    /* through s->x, cap rows at a time */
    const size_t k = s->m->in_size, cap = (size_t)s->cap, nout = (size_t)s->m->n_out;
    for (size_t i = 0; i < n; i += cap) {
        size_t c = n - i < cap ? n - i : cap;
        const float *xs = prepared(s, x + i * k, c, "predict", err);
        if (!xs || s->be.predict(s->be.ctx, xs, c, out + i * nout, err))
            return -1;
    }
    return 0;
}

int nrt_session_train_step(nrt_session *s, const float *x, const int32_t *label, const float *y,
                           int n, float *loss, nrt_error *err)
{
    const nrt_model *m = s->m;
    int cls = m->target_kind == NRT_TARGET_CLASS;
    if (n < 1 || n > s->cap)
        return nrt_errorf(err, "train_step: a batch of %d samples (expected 1 to %d, the "
                          "session's capacity)", n, s->cap);
    if (!x)
        return nrt_errorf(err, "train_step: x must not be NULL");
    if (cls ? !label : !y)
        return nrt_errorf(err, "train_step: model '%s' trains on %s", m->name,
                          cls ? "class labels: label must not be NULL"
                              : "target values: y must not be NULL");
    for (int i = 0; cls && i < n; i++)
        if (label[i] < 0 || label[i] >= m->n_out)
            return nrt_errorf(err, "train_step: sample %d has label %d, outside [0, %d)", i,
                              (int)label[i], m->n_out);
    const float *xs = prepared(s, x, (size_t)n, "train_step", err);
    if (!xs)
        return -1;
    nrt_batch b = {n, xs, cls ? label : NULL, cls ? NULL : y, 0};
    return s->be.train_batch(s->be.ctx, &b, loss, err);
}

void nrt_session_close(nrt_session *s)
{
    if (!s)
        return;
    if (s->be.close)
        s->be.close(s->be.ctx);
    free(s->param);
    free(s->buffers);
    free(s->x);
    nrt_stats_free(&s->stats);
    free(s);
}
