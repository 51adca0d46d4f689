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
 *    samples are done, the updates done, the seed, the batch size and
 *    whether the epochs are shuffled, the epoch's loss sum so far and the
 *    learning-rate schedule's state.  Doubles are written in C's hexadecimal
 *    notation (%a), which reads back exactly.
 *
 * Nothing else is needed: every random choice of a run is a function of
 * the seed and these counters (philox.h).  The file is written to a
 * temporary name and renamed (nrt_safetensors_save), so an interrupted
 * save leaves the previous checkpoint whole.
 */
#include "netrt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "1"
#define FILE_NAME "checkpoint.safetensors"
#define MAX_META 17

int nrt_optim_slots(const nrt_optim *h)
{
    return h->kind == NRT_ADAM ? 2 : h->momentum != 0 ? 1 : 0;
}

static const char *slot_name(const nrt_optim *h, int slot)
{
    return h->kind == NRT_ADAM ? (slot ? "exp_avg_sq" : "exp_avg") : "momentum_buffer";
}

static char *file_path(const char *dir, nrt_error *err)
{
    size_t n = strlen(dir) + sizeof FILE_NAME + 1;
    char *p = malloc(n);
    if (!p) {
        nrt_errorf(err, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/%s", dir, FILE_NAME);
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
    const int slots = nrt_optim_slots(h), n = m->n_params * (1 + slots) + m->n_buffers;
    nrt_tensor *t = calloc((size_t)n + 1, sizeof *t);
    char **names = calloc((size_t)n + 1, sizeof *names);
    char *path = file_path(dir, err);
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
            snprintf(name, len, "optimizer.%s.%s", p->name, slot_name(h, s - 1));
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
    put_str(&mt, "optimizer", h->kind == NRT_ADAM ? "adam" : "sgd");
    put(&mt, "epoch", "%" PRId64, c->epoch);
    put(&mt, "position", "%" PRIu64, c->position);
    put(&mt, "step", "%" PRIu64, c->step);
    put(&mt, "seed", "%" PRIu64, c->seed);
    put(&mt, "batch", "%" PRId64, c->batch);
    put(&mt, "shuffle", "%d", c->shuffle);
    put(&mt, "loss_sum", "%a", c->loss_sum);
    put(&mt, "lr", "%a", c->sched.lr);
    put(&mt, "base_lr", "%a", c->sched.base_lr);
    put(&mt, "schedule_epoch", "%" PRId64, c->sched.epoch);
    put(&mt, "schedule_best", "%a", c->sched.best);
    put(&mt, "schedule_bad_epochs", "%" PRId64, c->sched.bad_epochs);
    put(&mt, "schedule_cooldown", "%" PRId64, c->sched.cooldown_left);
    rc = nrt_safetensors_save(path, t, n, mt.kv, mt.n, err);
out:
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

static void bad_value(Reader *r, const char *key, const char *v)
{
    if (!r->failed)
        nrt_errorf(r->err, "%s: metadata '%s' = '%.40s' is not a valid value", r->path, key, v);
    r->failed = 1;
}

/* A count, at least lo (the unsigned ones too: none reaches 2^63). */
static int64_t get_int(Reader *r, const char *key, int64_t lo)
{
    const char *v = need(r, key);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo)
        bad_value(r, key, v);
    return x;
}

static double get_double(Reader *r, const char *key)
{
    const char *v = need(r, key);
    if (!v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || isnan(x))
        bad_value(r, key, v);
    return x;
}

/* The optimizer's tensors, each the shape of its parameter. */
static int read_slots(Reader *r, const nrt_model *m, const nrt_optim *h, nrt_checkpoint *c)
{
    const int slots = nrt_optim_slots(h);
    for (int s = 0; s < slots; s++) {
        float *buf = s == 0 ? c->m : c->v;
        for (int i = 0; i < m->n_params; i++) {
            const nrt_param *p = &m->params[i];
            char name[320];
            snprintf(name, sizeof name, "optimizer.%s.%s", p->name, slot_name(h, s));
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
    const char *want_optim = h->kind == NRT_ADAM ? "adam" : "sgd";
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
    c->epoch = get_int(&r, "epoch", 1);
    c->position = (uint64_t)get_int(&r, "position", 0);
    c->step = (uint64_t)get_int(&r, "step", 0);
    c->seed = (uint64_t)get_int(&r, "seed", 0);
    c->batch = get_int(&r, "batch", 1);
    c->shuffle = (int)get_int(&r, "shuffle", 0);
    c->loss_sum = get_double(&r, "loss_sum");
    c->sched.lr = get_double(&r, "lr");
    c->sched.base_lr = get_double(&r, "base_lr");
    c->sched.epoch = get_int(&r, "schedule_epoch", 0);
    c->sched.best = get_double(&r, "schedule_best");
    c->sched.bad_epochs = get_int(&r, "schedule_bad_epochs", 0);
    c->sched.cooldown_left = get_int(&r, "schedule_cooldown", 0);
    if (r.failed || read_slots(&r, m, h, c))
        goto out;
    nrt_safetensors_close(f);
    f = NULL;
    /* the weights, and that nothing but them and the optimizer's are there */
    rc = nrt_weights_load(m, c->param, c->buffers, path, err);
out:
    nrt_safetensors_close(f);
    free(path);
    return rc;
}
