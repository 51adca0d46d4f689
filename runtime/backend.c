/*
 * backend.c — the cpu as an nrt_backend, and the choice of a backend by
 * device name.
 *
 * The cpu backend runs the generated passes on this machine's cores over
 * an nrt_net (buffers sized for a batch capacity).  main.c's training loop
 * and session.c's C API drive it, or the GPU's (libnetrt_cuda, reached
 * through the model's CUDA descriptor), through the same calls.
 */
#include "netrt.h"
#include "conv_dnnl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the net */

void nrt_net_free(nrt_net *net)
{
    free(net->param);
    free(net->grad);
    free(net->buffers);
    free(net->act);
    free(net->iact);
    for (int i = 0; i < NRT_GBUF_MAX; i++)
        free(net->gbuf[i]);
    free(net->scratch);
    free(net->dinput);
    free(net->wlp);
    free(net->xlp);
    nrt_dnnl_free(net->dnnl);
    *net = (nrt_net){0};
}

static void *alloc_floats(size_t n, size_t size, int *ok)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        *ok = 0;
    return p;
}

/* The products' arithmetic in precision prec.  bf16's values are exact in
 * fp32, so a bf16 product can run as fp32 multiply-adds on them, as
 * AVX512-BF16's pairs (vdpbf16ps) or on AMX's tiles (tdpbf16ps), the same
 * products summed in another order, and the fastest is chosen.
 * NETRT_CPU_BF16 chooses: amx, avx512bf16 (each where the cpu has it, else
 * the next), fp32 (the order the GPU's products are compared with), or
 * auto, the default: AMX where the cpu has it, else fp32, which measured
 * faster than the pairs on the cpus without AMX it ran on: an Intel Xeon
 * (its AVX-512 FMAs did twice the multiply-adds of its vdpbf16ps) and an
 * AMD Zen 5 (cifar10's bf16 step 26.5 ms in fp32 against 34.2 in pairs,
 * bench/RESULTS.md).  NETRT_CPU_ISA=avx2 keeps every product on AVX2, in
 * every precision (oneDNN's convolutions too, conv_dnnl.c): what a cpu
 * without AVX-512 runs, in the same bits where the built-in kernels run
 * (tests/isa.sh). */
int nrt_dot_of(int prec, nrt_error *err)
{
    static const char *const names[] = {"auto", "amx", "avx512bf16", "fp32"};
    const char *how = getenv("NETRT_CPU_BF16"), *isa = getenv("NETRT_CPU_ISA");
    int want = 0;
    while (how && *how && want < 4 && strcmp(how, names[want]))
        want++;
    if (want == 4)
        return nrt_errorf(err, "NETRT_CPU_BF16 is '%s': auto, amx, avx512bf16 or fp32", how);
    const int avx2 = isa && !strcmp(isa, "avx2");
    if (isa && *isa && !avx2 && strcmp(isa, "auto"))
        return nrt_errorf(err, "NETRT_CPU_ISA is '%s': auto or avx2", isa);
    if (nrt_conv_mode() == NRT_CONV_BAD)
        return nrt_errorf(err, "NETRT_CPU_CONV is '%s': auto, builtin, direct or onednn",
                          getenv("NETRT_CPU_CONV"));
    if (avx2)
        return NRT_DOT_AVX2;
    if (prec != NRT_BF16 || want == 3)
        return NRT_DOT_F32;
    if (want <= 1 && nrt_amx_enable())
        return NRT_DOT_AMX;
    return want != 0 && nrt_dot_native() ? NRT_DOT_BF16 : NRT_DOT_F32;
}

int nrt_half_of(size_t half, size_t full, int prec, nrt_error *err)
{
    const char *bits = getenv("NETRT_ACT_BITS");
    const int auto_ = !bits || !*bits || !strcmp(bits, "auto");
    if (!auto_ && strcmp(bits, "16") && strcmp(bits, "32"))
        return nrt_errorf(err, "NETRT_ACT_BITS is '%s': auto, 16 or 32", bits);
    if (prec == NRT_FP32 || !half || (bits && !strcmp(bits, "32")))
        return 0;
    return !auto_ || half < full;
}

int nrt_net_alloc(nrt_net *net, const nrt_model *m, int cap, int half, nrt_error *err)
{
    int ok = 1;
    *net = (nrt_net){0};
    net->model = m;
    net->cap = cap;
    net->half = half;
    size_t c = (size_t)cap, act_size = half ? m->half_act_size : m->act_size;
    net->param = alloc_floats(m->param_count, sizeof(float), &ok);
    net->grad = alloc_floats(m->param_count + 1, sizeof(float), &ok); /* + a rank's loss */
    net->buffers = alloc_floats(m->buffer_bytes, 1, &ok);
    net->act = alloc_floats(c * act_size, sizeof(float), &ok);
    net->iact = alloc_floats(c * m->iact_size, sizeof(int32_t), &ok);
    for (int i = 0; i < nrt_grad_buffers(m); i++)
        net->gbuf[i] = alloc_floats(c * m->grad_size, sizeof(float), &ok);
    net->scratch = alloc_floats(c * m->scratch_size, sizeof(float), &ok);
    net->dnnl = nrt_dnnl_new(); /* NULL: each pass makes its own */
    if (!ok) {
        nrt_net_free(net);
        return nrt_errorf(err, "out of memory for a batch of %d (%.1f MiB of activations)",
                          cap, (double)(c * (act_size + 2 * m->grad_size + m->scratch_size)) * 4 / 1048576);
    }
    return 0;
}

/* --------------------------------------------------------------- batches */

/* A batch gathered from a dataset into buffers of capacity cap. */
typedef struct Batcher {
    float *x, *y;
    int32_t *label;
} Batcher;

static int batcher_init(Batcher *b, const nrt_model *m, int cap)
{
    size_t c = (size_t)cap;
    b->x = malloc(sizeof(float) * c * m->in_size);
    b->label = malloc(sizeof(int32_t) * c);
    b->y = malloc(sizeof(float) * c * (size_t)m->n_out);
    return b->x && b->label && b->y ? 0 : -1;
}

static void batcher_free(Batcher *b)
{
    free(b->x);
    free(b->label);
    free(b->y);
}

static nrt_batch gather(Batcher *bt, const nrt_dataset *d, const uint32_t *idx, size_t n)
{
    nrt_dataset_gather(d, idx, n, bt->x, d->label ? bt->label : NULL, d->y ? bt->y : NULL);
    nrt_batch b = {(int)n, bt->x, bt->label, bt->y, 0};
    return b;
}

/* ------------------------------------------------------------- evaluation */

/* The sums of a set's samples lo .. hi - 1 in evaluation mode: the loss
 * times the samples, and the correct predictions (class targets). */
typedef struct Eval {
    double loss, correct;
} Eval;

static Eval evaluate(nrt_net *net, Batcher *bt, const nrt_dataset *d, size_t lo, size_t hi,
                     int cap, uint32_t *idx)
{
    const nrt_model *m = net->model;
    Eval e = {0, 0};
    net->training = 0;
    for (size_t i = lo; i < hi; i++)
        idx[i - lo] = (uint32_t)i;
    for (size_t s = lo; s < hi; s += (size_t)cap) {
        size_t n = hi - s < (size_t)cap ? hi - s : (size_t)cap;
        nrt_batch b = gather(bt, d, idx + (s - lo), n);
        const float *out;
        e.loss += (double)m->forward(net, &b, &out) * (double)n;
        if (m->target_kind == NRT_TARGET_CLASS)
            e.correct += (double)nrt_correct(out, b.label, b.n, m->n_out);
    }
    return e;
}

/* This rank's share of n samples from start (all of them alone). */
typedef struct Share {
    size_t start, n;
} Share;

static Share share(const nrt_comm *comm, size_t start, size_t n)
{
    Share sh = {start, n};
    if (comm)
        sh.n = nrt_share(comm->rank, comm->size, start, n, &sh.start);
    return sh;
}

/* ------------------------------------------------------------------- cpu */

/* The cpu backend: the generated passes on this machine's cores. */
typedef struct Cpu {
    const nrt_model *m;
    const nrt_comm *comm;  /* several ranks, or NULL */
    nrt_net net;
    nrt_optim_state opt;
    Batcher bt;
    const nrt_dataset *train, *eval[2]; /* eval: validation, test */
    uint32_t *order;       /* the epoch's order, train->n indices */
    uint32_t *eval_idx;    /* 0 .. the larger eval set's n - 1 */
    double loss_sum;
    nrt_scaler scaler;     /* fp16's */
} Cpu;

static int cpu_set_data(void *ctx, const nrt_dataset *train, const nrt_dataset *valid,
                        const nrt_dataset *test, nrt_error *err)
{
    Cpu *c = ctx;
    c->train = train;
    c->eval[NRT_EVAL_VALID] = valid;
    c->eval[NRT_EVAL_TEST] = test;
    size_t n = 1, ne = 1;
    if (train && train->n > n)
        n = train->n;
    for (int k = 0; k < 2; k++)
        if (c->eval[k] && c->eval[k]->n > ne)
            ne = c->eval[k]->n;
    free(c->order);
    free(c->eval_idx);
    c->order = malloc(sizeof *c->order * n);
    c->eval_idx = malloc(sizeof *c->eval_idx * ne);
    return c->order && c->eval_idx ? 0 : nrt_errorf(err, "out of memory");
}

static int cpu_set_params(void *ctx, const float *param, const void *buffers, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    memcpy(c->net.param, param, sizeof(float) * c->m->param_count);
    if (c->m->buffer_bytes)
        memcpy(c->net.buffers, buffers, c->m->buffer_bytes);
    return 0;
}

static int cpu_get_params(void *ctx, float *param, void *buffers, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    memcpy(param, c->net.param, sizeof(float) * c->m->param_count);
    if (c->m->buffer_bytes)
        memcpy(buffers, c->net.buffers, c->m->buffer_bytes);
    return 0;
}

static int cpu_set_order(void *ctx, const nrt_order *order, size_t start, nrt_error *err)
{
    Cpu *c = ctx;
    (void)start; /* each step says where it starts */
    if (!c->train || order->n > c->train->n)
        return nrt_errorf(err, "internal error: an order of %u samples for %zu", order->n,
                          c->train ? c->train->n : 0);
    nrt_order_fill(order, 0, order->n, c->order);
    return 0;
}

/* Several ranks: the gradient of the rank's share of the batch (k of n
 * samples, k maybe 0) weighted by k / n, and its loss, summed over the
 * ranks in one reduction of the flat buffer (the loss in the slot past the
 * gradients): the batch's mean gradient and loss on every rank. */
static int reduce(Cpu *c, float *loss, size_t k, size_t n, nrt_error *err)
{
    const size_t np = c->m->param_count;
    float *g = c->net.grad;
    if (k == 0) {
        memset(g, 0, sizeof(float) * np);
        *loss = 0;
    }
    const float w = (float)((double)k / (double)n);
    for (size_t i = 0; i < np; i++)
        g[i] *= w;
    g[np] = *loss * w;
    if (c->comm->sum_floats(c->comm->ctx, g, np + 1, err))
        return -1;
    *loss = g[np];
    return 0;
}

/* A step on b, this rank's share (maybe empty) of a batch of total
 * samples: forward, backward, the ranks' sum, the update. */
static int update(Cpu *c, const nrt_batch *b, size_t total, float *loss, nrt_error *err)
{
    float l = 0;
    if (b->n > 0) {
        const float *out;
        c->net.training = 1;
        c->net.loss_scale = c->net.lowp == NRT_FP16 ? c->scaler.scale : 1.0f;
        l = c->m->forward(&c->net, b, &out);
        c->m->backward(&c->net, b);
    }
    if (c->comm && reduce(c, &l, (size_t)b->n, total, err))
        return -1;
    /* fp16: the summed gradients unscaled, the step skipped if one is not
     * finite (the same on every rank: they hold the same sums) */
    if (c->net.lowp != NRT_FP16 || !nrt_scaler_step(&c->scaler, c->net.grad, c->m->param_count))
        nrt_optim_step(&c->opt, c->net.param, c->net.grad);
    c->net.step++;
    c->loss_sum += (double)l * (double)total;
    if (loss)
        *loss = l;
    return 0;
}

static int cpu_step(void *ctx, size_t start, int n, float *loss, nrt_error *err)
{
    Cpu *c = ctx;
    const Share sh = share(c->comm, start, (size_t)n);
    nrt_batch b = gather(&c->bt, c->train, c->order + sh.start, sh.n);
    return update(c, &b, (size_t)n, loss, err);
}

static int cpu_take_loss_sum(void *ctx, double *sum, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    *sum = c->loss_sum;
    c->loss_sum = 0;
    return 0;
}

/* Several ranks: each evaluates its share of the set, with rank 0's
 * buffers (running statistics; DDP's broadcast_buffers), and the sums are
 * added up, exactly as one process would count them. */
static int cpu_evaluate(void *ctx, int which, double *loss, double *accuracy, nrt_error *err)
{
    Cpu *c = ctx;
    const nrt_dataset *d = which == NRT_EVAL_TEST ? c->eval[1] : c->eval[0];
    if (!d || d->n == 0)
        return nrt_errorf(err, "internal error: no %s data to evaluate",
                          which == NRT_EVAL_TEST ? "test" : "validation");
    const nrt_comm *comm = c->comm;
    if (comm && c->m->buffer_bytes &&
        comm->broadcast(comm->ctx, c->net.buffers, c->m->buffer_bytes, err))
        return -1;
    const Share sh = share(comm, 0, d->n);
    Eval e = evaluate(&c->net, &c->bt, d, sh.start, sh.start + sh.n, c->net.cap, c->eval_idx);
    double sums[2] = {e.loss, e.correct};
    if (comm && comm->sum_doubles(comm->ctx, sums, 2, err))
        return -1;
    *loss = sums[0] / (double)d->n;
    *accuracy = c->m->target_kind == NRT_TARGET_CLASS ? sums[1] / (double)d->n : NAN;
    return 0;
}

/* The model's output for n samples x, in batches of up to cap, in
 * evaluation mode (no dropout). */
static int cpu_predict(void *ctx, const float *x, size_t n, float *out, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    const nrt_model *m = c->m;
    const size_t cap = (size_t)c->net.cap, nout = (size_t)m->n_out;
    c->net.training = 0;
    /* the loss the forward pass computes is not wanted: any targets do */
    memset(c->bt.label, 0, sizeof(int32_t) * cap);
    memset(c->bt.y, 0, sizeof(float) * cap * nout);
    for (size_t s = 0; s < n; s += cap) {
        size_t k = n - s < cap ? n - s : cap;
        nrt_batch b = {(int)k, x + s * m->in_size, c->bt.label, c->bt.y, 0};
        const float *y;
        m->forward(&c->net, &b, &y);
        memcpy(out + s * nout, y, sizeof(float) * k * nout);
    }
    return 0;
}

/* One update from a batch the caller holds: with several ranks, this
 * rank's share of the step's (b->total samples). */
static int cpu_train_batch(void *ctx, const nrt_batch *b, float *loss, nrt_error *err)
{
    return update(ctx, b, b->total > 0 ? (size_t)b->total : (size_t)b->n, loss, err);
}

static int cpu_gradient(void *ctx, const nrt_batch *b, int fp32_backward, float *loss,
                        float *grad, float *dinput, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    const float *out;
    c->net.training = 1;
    c->net.loss_scale = c->net.lowp == NRT_FP16 ? c->scaler.scale : 1.0f;
    *loss = c->m->forward(&c->net, b, &out);
    if (!grad)
        return 0;
    c->net.dinput = dinput; /* the caller's: not the net's to free */
    const int lowp = c->net.lowp;
    if (fp32_backward)
        c->net.lowp = NRT_FP32;
    c->m->backward(&c->net, b);
    c->net.lowp = lowp;
    c->net.dinput = NULL;
    memcpy(grad, c->net.grad, sizeof(float) * c->m->param_count);
    if (c->net.lowp == NRT_FP16) { /* unscaled as a step's are, the scaler left as it is */
        nrt_unscale(&c->scaler, grad, c->m->param_count);
        if (dinput)
            nrt_unscale(&c->scaler, dinput, (size_t)b->n * c->m->in_size);
    }
    return 0;
}

static int cpu_set_lr(void *ctx, double lr, nrt_error *err)
{
    (void)err;
    ((Cpu *)ctx)->opt.h.lr = lr;
    return 0;
}

static int cpu_get_state(void *ctx, float *m, float *v, uint64_t *step, double *loss_sum,
                         nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    const size_t bytes = sizeof(float) * c->m->param_count;
    if (m && c->opt.m)
        memcpy(m, c->opt.m, bytes);
    if (v && c->opt.v)
        memcpy(v, c->opt.v, bytes);
    *step = c->net.step;
    *loss_sum = c->loss_sum;
    return 0;
}

static int cpu_set_state(void *ctx, const float *m, const float *v, uint64_t step,
                         double loss_sum, nrt_error *err)
{
    (void)err;
    Cpu *c = ctx;
    const size_t bytes = sizeof(float) * c->m->param_count;
    if (m && c->opt.m)
        memcpy(c->opt.m, m, bytes);
    if (v && c->opt.v)
        memcpy(c->opt.v, v, bytes);
    c->net.step = step;
    c->opt.step = (int64_t)step - c->scaler.skipped; /* (the scaler is set first) */
    c->loss_sum = loss_sum;
    return 0;
}

static int cpu_get_scaler(void *ctx, nrt_scaler *s, nrt_error *err)
{
    (void)err;
    *s = ((Cpu *)ctx)->scaler;
    return 0;
}

static int cpu_set_scaler(void *ctx, const nrt_scaler *s, nrt_error *err)
{
    (void)err;
    ((Cpu *)ctx)->scaler = *s;
    return 0;
}

static size_t cpu_peak_memory(void *ctx)
{
    (void)ctx;
    return 0;
}

static void cpu_close(void *ctx)
{
    Cpu *c = ctx;
    if (!c)
        return;
    free(c->order);
    free(c->eval_idx);
    batcher_free(&c->bt);
    nrt_optim_free(&c->opt);
    nrt_net_free(&c->net);
    free(c);
}

int nrt_cpu_open(const nrt_model *m, const nrt_run_config *rc, nrt_backend *be, nrt_error *err)
{
    Cpu *c = calloc(1, sizeof *c);
    if (!c)
        return nrt_errorf(err, "out of memory");
    c->m = m;
    const int half = nrt_half_of(m->half_act_size, m->act_size, rc->precision, err);
    if (half < 0 || nrt_net_alloc(&c->net, m, rc->cap, half ? rc->precision : 0, err) ||
        nrt_optim_init(&c->opt, &rc->optim, m->param_count, err)) {
        cpu_close(c);
        return -1;
    }
    if (batcher_init(&c->bt, m, rc->cap)) {
        cpu_close(c);
        return nrt_errorf(err, "out of memory");
    }
    c->net.dropout_key = rc->dropout_key;
    c->comm = rc->comm;
    c->net.loss_scale = 1.0f;
    c->scaler = (nrt_scaler){rc->init_scale > 0 ? rc->init_scale : NRT_SCALE_INIT, 0, 0};
    c->net.dot = nrt_dot_of(rc->precision, err);
    if (c->net.dot < 0) {
        cpu_close(c);
        return -1;
    }
    if (rc->precision != NRT_FP32) {
        int ok = 1;
        c->net.lowp = rc->precision;
        c->net.wlp = alloc_floats(m->param_count, sizeof(float), &ok);
        c->net.xlp = alloc_floats((size_t)rc->cap * m->lowp_in_size, sizeof(float), &ok);
        if (!ok) {
            cpu_close(c);
            return nrt_errorf(err, "out of memory");
        }
    }
    *be = (nrt_backend){.ctx = c,
                        .name = "cpu",
                        .loss_free = 1,
                        .set_data = cpu_set_data,
                        .set_params = cpu_set_params,
                        .get_params = cpu_get_params,
                        .set_order = cpu_set_order,
                        .step = cpu_step,
                        .take_loss_sum = cpu_take_loss_sum,
                        .evaluate = cpu_evaluate,
                        .predict = cpu_predict,
                        .set_lr = cpu_set_lr,
                        .get_state = cpu_get_state,
                        .set_state = cpu_set_state,
                        .train_batch = cpu_train_batch,
                        .gradient = cpu_gradient,
                        .peak_memory = cpu_peak_memory,
                        .close = cpu_close};
    if (rc->precision == NRT_FP16) {
        be->get_scaler = cpu_get_scaler;
        be->set_scaler = cpu_set_scaler;
    }
    if (c->net.dot == NRT_DOT_AMX)
        snprintf(be->products, sizeof be->products, "bf16 tiles on AMX (tdpbf16ps), summed in fp32");
    else if (c->net.dot == NRT_DOT_BF16)
        snprintf(be->products, sizeof be->products, "bf16 pairs on AVX512-BF16 (vdpbf16ps), summed in fp32");
    else if (rc->precision != NRT_FP32)
        snprintf(be->products, sizeof be->products, "fp32 multiply-adds (%s) of the rounded values",
                 nrt_dot_isa(c->net.dot));
    else if (c->net.dot == NRT_DOT_AVX2)
        snprintf(be->products, sizeof be->products, "fp32 multiply-adds (%s, NETRT_CPU_ISA)",
                 nrt_dot_isa(c->net.dot));
    if (c->net.half) /* (the line's 192 bytes hold the longest of both) */
        strcat(be->products, "; values kept in 16 bits");
    return 0;
}

/* ---------------------------------------------------------------- devices */

int nrt_device_parse(const char *dev, int *index, nrt_error *err)
{
    *index = 0;
    if (!strcmp(dev, "cpu"))
        return NRT_DEVICE_CPU;
    if (!strcmp(dev, "auto"))
        return NRT_DEVICE_AUTO;
    if (strncmp(dev, "cuda", 4) || (dev[4] != '\0' && dev[4] != ':'))
        return nrt_errorf(err, "unknown device '%s' (expected cpu, cuda, cuda:N or auto)", dev);
    if (dev[4] == ':') {
        char *end;
        errno = 0;
        long k = strtol(dev + 5, &end, 10);
        if (errno || end == dev + 5 || *end || k < 0 || k > 1000000)
            return nrt_errorf(err, "device %s: the device index must be a whole number", dev);
        *index = (int)k;
    }
    return NRT_DEVICE_CUDA;
}

int nrt_comm_agree(const nrt_comm *comm, int ok, char *who, size_t len, nrt_error *err)
{
    uint64_t *all = malloc(sizeof *all * (size_t)comm->size);
    if (!all)
        return nrt_errorf(err, "out of memory");
    if (comm->gather_u64(comm->ctx, ok != 0, all, err)) {
        free(all);
        return -1;
    }
    int bad = 0;
    for (int k = 0; k < comm->size; k++)
        bad += !all[k];
    size_t at = (size_t)snprintf(who, len, "rank%s", bad > 1 ? "s" : "");
    for (int k = 0, n = 0; k < comm->size && at < len; k++)
        if (!all[k])
            at += (size_t)snprintf(who + at, len - at, "%s%d", n++ ? ", " : " ", k);
    free(all);
    return bad == 0;
}

int nrt_backend_open(const nrt_model *m, const char *dev, const nrt_run_config *rc0,
                     nrt_backend *be, char *note, size_t note_len, nrt_error *err)
{
    nrt_run_config rc = *rc0;
    if (note_len)
        note[0] = '\0';
    int kind = nrt_device_parse(dev, &rc.device, err);
    if (kind < 0)
        return -1;
    if (kind == NRT_DEVICE_CPU)
        return nrt_cpu_open(m, &rc, be, err);
    int is_cuda = kind == NRT_DEVICE_CUDA;
    if (!m->cuda) {
        if (is_cuda)
            return nrt_errorf(err, "device %s: this program was built without CUDA (its "
                              "model's device is cpu, netc --no-cuda, or a netc without CUDA); "
                              "use cpu or auto", dev);
        snprintf(note, note_len, "cpu (auto: this program was built without CUDA)");
        return nrt_cpu_open(m, &rc, be, err);
    }
    int count = m->cuda->device_count(err);
    if (rc.comm) {
        /* One GPU a rank, the local rank's unless named (cuda:N), and
         * every rank on a GPU or none: they sum over NCCL or over MPI. */
        if (!strchr(dev, ':'))
            rc.device = rc.comm->local_rank;
        char who[160];
        int all = nrt_comm_agree(rc.comm, count > rc.device, who, sizeof who, err);
        if (all < 0)
            return -1;
        if (!all) {
            /* in rank 0's words, who says it: its host has GPUs, too few, or none */
            const int many = strchr(who, ',') != NULL;
            const char *lack = count > 0 ? (many ? "have no GPU of their own"
                                                 : "has no GPU of its own")
                                         : (many ? "see no CUDA device" : "sees no CUDA device");
            if (is_cuda) {
                nrt_errorf(err, "device %s: %s %s%s", dev, who, lack,
                           count > 0 ? " (a GPU a rank: CUDA_VISIBLE_DEVICES, or fewer ranks "
                                       "a host)" : "");
                return NRT_ALL_RANKS;
            }
            snprintf(note, note_len, "cpu (auto: %.100s %s: every rank on the cpu)", who, lack);
            return nrt_cpu_open(m, &rc, be, err);
        }
    }
    if (count < 0 && is_cuda)
        return -1;
    const char *visible = NULL; /* named where no device was found */
    if (count > 0) {
        if (rc.device >= count)
            return nrt_errorf(err, "device %s: there %s only %d CUDA device%s (cuda:0%s)", dev,
                              count == 1 ? "is" : "are", count, count == 1 ? "" : "s",
                              count == 1 ? "" : " and up");
        int opened = m->cuda->open(m, &rc, be, err);
        if (opened != NRT_UNAVAILABLE) { /* else a CUDA library is missing: err says which */
            if (opened == 0 && !is_cuda)
                snprintf(note, note_len, "%s (auto)", be->name);
            return opened ? -1 : 0;
        }
    } else {
        visible = getenv("CUDA_VISIBLE_DEVICES");
    }
    /* No GPU to be had, err says why: cuda is an error, auto the cpu. */
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg[0] ? err->msg : "no CUDA device found");
    if (is_cuda)
        return nrt_errorf(err, "device %s: %s%s%s%s", dev, why,
                          visible ? " (CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "",
                          visible ? ")" : "");
    snprintf(note, note_len, "cpu (auto: %s)", why);
    return nrt_cpu_open(m, &rc, be, err);
}
