/*
 * checkpoint.c — a training run's whole state in one safetensors file, so
 * that a run stopped (by --max-steps, Ctrl-C, SIGTERM, a crash after the
 * last epoch's save) and resumed gives the losses it would have given had
 * it never stopped, bit for bit on the cpu.
 *
 * DIR/checkpoint.safetensors holds
 *  - the weights and buffers (a batchnorm's running statistics), under the
 *    model's state_dict names, so that it is also a weights file (--load,
 *    or PyTorch's load_file, which ignores the rest);
 *  - the optimizer's state under PyTorch's names for it, prefixed by
 *    "optimizer." and the parameter's name: optimizer.0.weight.exp_avg,
 *    .exp_avg_sq (Adam), .momentum_buffer (SGD with momentum);
 *  - in the metadata, the counters: the epoch under way and how many of its
 *    samples are done, the updates done, the seed, the batch size (a
 *    rank's) and the ranks, whether the epochs are shuffled, the epoch's
 *    loss sum so far, the learning-rate schedule's state and, in fp16, the
 *    loss scaler's (GradScaler's scale and growth tracker, the steps
 *    skipped); and what a resumed run takes from the
 *    checkpoint unless told otherwise: the number of epochs and the data.
 *    Doubles are written in C's hexadecimal notation (%a), which reads
 *    back exactly.
 *
 * A checkpoint is read as untrusted input: each value must lie in the
 * range its flag allows (NRT_BATCH_MAX, ...), or the file is refused with
 * the field named.
 *
 * Nothing else is needed: every random choice of a run is a function of
 * the seed and these counters (philox.h).  The file is written to a
 * temporary name and renamed (nrt_safetensors_save), so an interrupted
 * save leaves the previous checkpoint whole.
 */
#include "netrt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "2" /* 2: the epochs and the data */
#define MAX_META 32 /* keys: 28 at most (fp16, standardized), and room */

int nrt_lr_valid(double lr)
{
    return lr >= 0 && isfinite(lr);
}

static char *file_path(const char *dir, nrt_error *err)
{
    size_t n = strlen(dir) + sizeof NRT_CHECKPOINT_FILE + 1;
    char *p = malloc(n);
    if (!p) {
        nrt_errorf(err, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/%s", dir, NRT_CHECKPOINT_FILE);
    return p;
}

/* The metadata: names and their values' text, in a fixed order. */
typedef struct Meta {
    const char *kv[2 * MAX_META];
    char text[MAX_META][48];
    int n;
} Meta;

static void put_str(Meta *mt, const char *key, const char *value)
{
    if (mt->n == MAX_META)
        abort(); /* a key more than MAX_META: a bug, not bad input */
    mt->kv[2 * mt->n] = key;
    mt->kv[2 * mt->n + 1] = value;
    mt->n++;
}

static void put(Meta *mt, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void put(Meta *mt, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mt->text[mt->n], sizeof mt->text[mt->n], fmt, ap);
    va_end(ap);
    put_str(mt, key, mt->text[mt->n]);
}

int nrt_checkpoint_save(const char *dir, const nrt_model *m, const nrt_optim *h,
                        const nrt_checkpoint *c, nrt_error *err)
{
    if (nrt_make_dirs(dir, err))
        return -1;
    const nrt_optim_def *def = nrt_optim_find(h->kind);
    const int slots = nrt_optim_slots(h), n = m->n_params * (1 + slots) + m->n_buffers;
    nrt_tensor *t = calloc((size_t)n + 1, sizeof *t);
    char **names = calloc((size_t)n + 1, sizeof *names);
    char *path = file_path(dir, err);
    char *stats_text[2] = {NULL, NULL};
    int rc = -1;
    if (!t || !names || !path) {
        if (path)
            nrt_errorf(err, "out of memory");
        goto out;
    }
    /* the state_dict (the weights and buffers), then the optimizer's */
    int k = nrt_weights_tensors(m, c->param, c->buffers, t);
    for (int s = 1; s <= slots; s++) {
        const float *buf = s == 1 ? c->m : c->v;
        for (int i = 0; i < m->n_params; i++, k++) {
            const nrt_param *p = &m->params[i];
            nrt_tensor *x = &t[k];
            size_t len = strlen(p->name) + 32;
            char *name = names[k] = malloc(len);
            if (!name) {
                nrt_errorf(err, "out of memory");
                goto out;
            }
            snprintf(name, len, "optimizer.%s.%s", p->name, def->state[s - 1]);
            x->name = name;
            x->rank = p->rank;
            memcpy(x->dim, p->dim, sizeof x->dim);
            x->data = buf + p->offset;
        }
    }
    Meta mt = {.n = 0};
    put_str(&mt, "format", "pt");
    put_str(&mt, "netc_checkpoint", FORMAT);
    put_str(&mt, "netc_model", m->name);
    put_str(&mt, "optimizer", def->name);
    put(&mt, "epoch", "%" PRId64, c->epoch);
    put(&mt, "position", "%" PRIu64, c->position);
    put(&mt, "step", "%" PRIu64, c->step);
    put(&mt, "seed", "%" PRIu64, c->seed);
    put(&mt, "batch", "%" PRId64, c->batch);
    put(&mt, "ranks", "%d", c->ranks > 1 ? c->ranks : 1);
    put_str(&mt, "precision", nrt_precision_name(c->precision));
    put(&mt, "shuffle", "%d", c->shuffle);
    put(&mt, "epochs", "%" PRId64, c->epochs);
    put_str(&mt, "data", c->data ? c->data : "");
    put_str(&mt, "valid_data", c->valid_data ? c->valid_data : "");
    put_str(&mt, "test_data", c->test_data ? c->test_data : "");
    put(&mt, "loss_sum", "%a", c->loss_sum);
    put(&mt, "lr", "%a", c->sched.lr);
    put(&mt, "base_lr", "%a", c->sched.base_lr);
    put(&mt, "schedule_epoch", "%" PRId64, c->sched.epoch);
    put(&mt, "schedule_best", "%a", c->sched.best);
    put(&mt, "schedule_bad_epochs", "%" PRId64, c->sched.bad_epochs);
    put(&mt, "schedule_cooldown", "%" PRId64, c->sched.cooldown_left);
    if (c->precision == NRT_FP16) {
        put(&mt, "loss_scale", "%a", (double)c->scaler.scale);
        put(&mt, "loss_scale_tracker", "%" PRId32, c->scaler.tracker);
        put(&mt, "skipped_steps", "%" PRId64, c->scaler.skipped);
    }
    if (c->stats.dim) {
        if (nrt_stats_meta(&c->stats, stats_text, err))
            goto out;
        put_str(&mt, "standardize_mean", stats_text[0]);
        put_str(&mt, "standardize_std", stats_text[1]);
    }
    rc = nrt_safetensors_save(path, t, n, mt.kv, mt.n, err);
out:
    free(stats_text[0]);
    free(stats_text[1]);
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(t);
    free(path);
    return rc;
}

/* ------------------------------------------------------------------ load */

typedef struct Reader {
    const nrt_st_file *f;
    const char *path;
    nrt_error *err;
    int failed;
} Reader;

static const char *need(Reader *r, const char *key)
{
    const char *v = nrt_safetensors_meta(r->f, key);
    if (!v && !r->failed) {
        r->failed = 1;
        nrt_errorf(r->err, "%s: not a whole netc checkpoint: no '%s' in its metadata", r->path,
                   key);
    }
    return v;
}

static void bad_value(Reader *r, const char *key, const char *v, const char *expected)
{
    if (!r->failed)
        nrt_errorf(r->err, "%s: metadata '%s' = '%.40s': expected %s", r->path, key, v,
                   expected);
    r->failed = 1;
}

/* A count from lo to hi (the unsigned ones too: none reaches 2^63); 0 if
 * it is not one. */
static int64_t get_int(Reader *r, const char *key, long long lo, long long hi)
{
    const char *v = need(r, key);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        char expected[80];
        snprintf(expected, sizeof expected, "a whole number from %lld to %lld", lo, hi);
        bad_value(r, key, v, expected);
        return 0;
    }
    return x;
}

static int finite(double x)
{
    return isfinite(x);
}

static int not_nan(double x)
{
    return !isnan(x);
}

static int positive_float(double x)
{
    return x > 0 && x <= FLT_MAX && (double)(float)x == x;
}

/* A number that ok accepts (expected: what it accepts, in words). */
static double get_double(Reader *r, const char *key, int (*ok)(double), const char *expected)
{
    const char *v = need(r, key);
    if (!v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !ok(x)) {
        bad_value(r, key, v, expected);
        return 0;
    }
    return x;
}

/* The paths of c's data, copied into c->text. */
static int get_paths(Reader *r, nrt_checkpoint *c)
{
    const char *data = need(r, "data"), *valid = need(r, "valid_data"),
               *test = need(r, "test_data");
    if (r->failed)
        return -1;
    size_t nd = strlen(data) + 1, nv = strlen(valid) + 1, nt = strlen(test) + 1;
    if (!(c->text = malloc(nd + nv + nt)))
        return nrt_errorf(r->err, "out of memory");
    c->data = memcpy(c->text, data, nd);
    c->valid_data = memcpy(c->text + nd, valid, nv);
    c->test_data = memcpy(c->text + nd + nv, test, nt);
    return 0;
}

/* The optimizer's tensors, each the shape of its parameter. */
static int read_slots(Reader *r, const nrt_model *m, const nrt_optim *h, nrt_checkpoint *c)
{
    const nrt_optim_def *def = nrt_optim_find(h->kind);
    const int slots = nrt_optim_slots(h);
    for (int s = 0; s < slots; s++) {
        float *buf = s == 0 ? c->m : c->v;
        for (int i = 0; i < m->n_params; i++) {
            const nrt_param *p = &m->params[i];
            char name[320];
            snprintf(name, sizeof name, "optimizer.%s.%s", p->name, def->state[s]);
            const nrt_tensor *t = nrt_safetensors_find(r->f, name, NULL);
            if (!t || t->dtype != NRT_F32 || t->rank != p->rank ||
                memcmp(t->dim, p->dim, sizeof(int64_t) * (size_t)p->rank))
                return nrt_errorf(r->err, "%s: %s tensor '%s' (of %s's shape)", r->path,
                                  t ? "a misshapen" : "no", name, p->name);
            if (nrt_tensor_check_finite(r->path, t, r->err))
                return -1;
            memcpy(buf + p->offset, t->data, sizeof(float) * p->size);
        }
    }
    return 0;
}

int nrt_checkpoint_load(const char *dir, const nrt_model *m, const nrt_optim *h,
                        nrt_checkpoint *c, nrt_error *err)
{
    c->text = NULL;
    c->stats = (nrt_stats){0};
    char *path = file_path(dir, err);
    if (!path)
        return -1;
    nrt_st_file *f = NULL;
    int rc = -1;
    if (nrt_safetensors_open(path, &f, err))
        goto out;
    Reader r = {f, path, err, 0};
    const char *format = nrt_safetensors_meta(f, "netc_checkpoint");
    const char *model = nrt_safetensors_meta(f, "netc_model");
    const char *optim = nrt_safetensors_meta(f, "optimizer");
    const char *want_optim = nrt_optim_find(h->kind)->name;
    if (!format) {
        nrt_errorf(err, "%s: not a netc checkpoint (its metadata has no netc_checkpoint)", path);
        goto out;
    }
    if (strcmp(format, FORMAT)) {
        nrt_errorf(err, "%s: a checkpoint of format %.20s; this program reads format %s", path,
                   format, FORMAT);
        goto out;
    }
    if (!model || strcmp(model, m->name)) {
        nrt_errorf(err, "%s: a checkpoint of model '%.100s', not '%s'", path,
                   model ? model : "?", m->name);
        goto out;
    }
    if (!optim || strcmp(optim, want_optim)) {
        nrt_errorf(err, "%s: a checkpoint of a run with %.20s, but the model's optimizer is %s",
                   path, optim ? optim : "no optimizer", want_optim);
        goto out;
    }
    /* the epoch after the last is where a finished run's checkpoint is;
     * the position is checked against the data when it is read (main.c) */
    c->epoch = get_int(&r, "epoch", 1, NRT_EPOCHS_MAX + 1);
    c->position = (uint64_t)get_int(&r, "position", 0, INT64_MAX);
    c->step = (uint64_t)get_int(&r, "step", 0, NRT_STEPS_MAX);
    c->seed = (uint64_t)get_int(&r, "seed", 0, NRT_SEED_MAX);
    c->batch = get_int(&r, "batch", 1, NRT_BATCH_MAX);
    /* (a checkpoint from before data parallelism has no ranks: one) */
    c->ranks = nrt_safetensors_meta(f, "ranks") ? (int)get_int(&r, "ranks", 1, INT_MAX) : 1;
    /* (one from before precision was a choice has none: fp32) */
    const char *prec = nrt_safetensors_meta(f, "precision");
    c->precision = prec ? nrt_precision_parse(prec) : NRT_FP32;
    if (c->precision < 0) {
        nrt_errorf(err, "%s: precision \"%.20s\" in the metadata (expected fp32, bf16 or fp16)",
                   path, prec);
        goto out;
    }
    if (c->precision == NRT_FP16) {
        c->scaler.scale = (float)get_double(&r, "loss_scale", positive_float, "a positive float");
        c->scaler.tracker =
            (int32_t)get_int(&r, "loss_scale_tracker", 0, NRT_SCALE_INTERVAL - 1);
        c->scaler.skipped = get_int(&r, "skipped_steps", 0, (long long)c->step);
    }
    c->shuffle = (int)get_int(&r, "shuffle", 0, 1);
    c->epochs = get_int(&r, "epochs", 0, NRT_EPOCHS_MAX);
    c->loss_sum = get_double(&r, "loss_sum", finite, "a finite number");
    c->sched.lr = get_double(&r, "lr", nrt_lr_valid, "a non-negative number");
    c->sched.base_lr = get_double(&r, "base_lr", nrt_lr_valid, "a non-negative number");
    c->sched.epoch = get_int(&r, "schedule_epoch", 0, NRT_EPOCHS_MAX + 1);
    c->sched.best = get_double(&r, "schedule_best", not_nan, "a number");
    c->sched.bad_epochs = get_int(&r, "schedule_bad_epochs", 0, NRT_EPOCHS_MAX + 1);
    c->sched.cooldown_left = get_int(&r, "schedule_cooldown", 0, NRT_EPOCHS_MAX + 1);
    if (r.failed || get_paths(&r, c) || read_slots(&r, m, h, c) ||
        nrt_stats_read(f, path, m->in_size, &c->stats, err))
        goto out;
    nrt_safetensors_close(f);
    f = NULL;
    /* the weights, and that nothing but them and the optimizer's are there */
    rc = nrt_weights_load(m, c->param, c->buffers, path, err);
out:
    if (rc) {
        free(c->text);
        c->text = NULL;
        nrt_stats_free(&c->stats);
    }
    nrt_safetensors_close(f);
    free(path);
    return rc;
}
