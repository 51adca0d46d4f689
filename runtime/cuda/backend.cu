/*
 * backend.cu — the GPU as an nrt_backend: main.c's training loop drives it
 * through set_data, set_order, step, take_loss_sum and evaluate.
 *
 * A training step never waits for the host.  The epoch's order (philox.h's
 * keyed permutation: a few words, evaluated by the gather kernel itself),
 * a cursor into it, the step counter and the epoch's loss sum all live on
 * the device, so one step — gather the batch, forward, backward, update, count —
 * is the same sequence of launches every time.  It is captured once per
 * batch size as a CUDA graph and replayed: a step costs one launch.
 *
 * The kernels of the step other than the model's passes (the gather, the
 * optimizer, the step's end, evaluation's count) are in device.cu.
 *
 * The training set stays on the host only when it does not fit in device
 * memory; each batch is then gathered on the host and copied.
 */
#include "netrt_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ALLOCS = 40, MAX_GRAPHS = 4 };

/* cuBLAS's recommended workspace on Hopper; given explicitly so that graph
 * captures reuse it instead of each getting one of their own. */
static const size_t BLAS_WORKSPACE = (size_t)32 << 20;
/* Device memory left free after the data sets for what is allocated later:
 * graphs, cuBLAS's and the driver's own needs. */
static const size_t DATA_RESERVE = (size_t)256 << 20;

/* The scalars of a run, one allocation on the device and a pinned mirror
 * on the host for asynchronous copies.  eval_loss and correct are adjacent:
 * evaluate zeroes and reads them with one copy. */
struct Scalars {
    double loss_sum;            /* sum of loss * n since take_loss_sum */
    double eval_loss;           /* evaluate's sum of loss * n */
    unsigned long long correct; /* evaluate's correct predictions */
    unsigned long long cursor;  /* position in the epoch's order */
    unsigned long long step;    /* steps done so far (dropout; Adam's t - 1) */
    float loss;                 /* the batch's mean loss, written by forward */
    /* fp16: the loss scaler, whether this step's gradients overflowed, and
     * the updates done (steps not skipped: the optimizer's count) */
    nrt_scaler scaler;
    int found;
    unsigned long long updates;
    nrt_order order;            /* the epoch's order (the host reads its
                                   pinned mirror: host mode, checks) */
};

/* Several ranks: the flat gradient buffer, and the loss in the slot past
 * it, summed over NCCL in buckets while backward goes on, as DDP does.
 * Backward says when the gradients from param[from] on are final
 * (nrt_cu_grads_final, after each layer with parameters); each bucket that
 * lies there by then is weighted by the rank's share of the batch and
 * summed on a stream of its own, which waits for the run's stream at that
 * point (fork); the run's stream waits for it before the optimizer (join).
 * A captured step holds both streams as two branches of one graph.
 * Buckets are cut at tensor boundaries from the last tensor back, the
 * order backward finishes them: the first up to 1 MiB, so that the sums
 * start early, the others up to the cap (--bucket-mb, DDP's bucket_cap_mb,
 * 25 MiB by default); a bucket closes once it reaches its limit. */
struct Buckets {
    int n, next;          /* buckets; the next to sum in this step */
    size_t *lo;           /* bucket i is [lo[i], lo[i - 1]) (lo[-1]: np + 1) */
    float w;              /* this step's weight: the rank's share */
    cudaStream_t stream;  /* where they are summed */
    cudaEvent_t fork, join;
};

static const size_t FIRST_BUCKET = (size_t)1 << 20, BUCKET_CAP = (size_t)25 << 20;

struct Alloc { void *p; size_t bytes; int pinned; };
struct Graph { int n; cudaGraphExec_t exec; };
struct DevData { size_t n; float *x; int32_t *label; float *y; }; /* a data set on the device */

struct Ctx {
    const nrt_model *m;
    nrt_cuda_net net;
    nrt_cuda_mem mem;
    nrt_optim h;
    int sms;
    int major;             /* the GPU's compute capability's */
    Alloc allocs[MAX_ALLOCS];
    int nallocs;
    Scalars *dev, *host;
    float *opt_m, *opt_v;  /* optimizer state (sgd: momentum buffer) */
    float *bx, *by;        /* the batch buffers every pass reads */
    float *dinput;         /* --gradcheck's d loss / d input, or NULL */
    int32_t *blabel;
    nrt_cublas cublas;
    char *blas_ws;
    /* several ranks: the gradients summed over NCCL (else comm NULL) */
    const nrt_comm *comm;
    nrt_nccl nccl;
    ncclComm_t nc;
    Buckets bk;
    /* data */
    int data_tried, has_data, resident;
    int has_eval[2];       /* a validation set, a test set (NRT_EVAL_*) */
    nrt_dataset train;     /* the caller's, by value: host mode reads it */
    DevData dtrain, deval[2];
    cudaEvent_t order_copied;
    size_t cursor;         /* the host's view of the device cursor */
    /* host mode: two pinned batches, so one fills while the other copies */
    uint32_t *host_idx;    /* the samples of the batch being staged */
    float *pin_x[2], *pin_y[2];
    int32_t *pin_label[2];
    cudaEvent_t staged[2];
    int slot;
    Graph graphs[MAX_GRAPHS];
    int ngraphs, evict;
};

/* -------------------------------------------------------------- memory */

/* Device memory (tracked, and zeroed as the cpu's calloc: no buffer starts
 * with garbage) or pinned host memory, so that copies from and to it are
 * asynchronous.  Zero bytes: no allocation, *p = NULL.  close frees all. */
static int track(Ctx *c, void **p, size_t count, size_t size, int pinned, const char *what,
                 nrt_error *err)
{
    *p = NULL;
    if (count == 0 || size == 0)
        return 0;
    if (count > (size_t)-1 / size || c->nallocs == MAX_ALLOCS)
        return nrt_errorf(err, "internal error: cannot allocate %s (%zu x %zu bytes)", what,
                          count, size);
    const size_t bytes = count * size;
    if (pinned ? NRT_CUDA(cudaMallocHost(p, bytes), err)
               : nrt_cuda_alloc(&c->mem, p, bytes, what, err)) {
        *p = NULL;
        return -1;
    }
    Alloc a = {*p, bytes, pinned};
    c->allocs[c->nallocs++] = a;
    if (pinned)
        memset(*p, 0, bytes);
    return pinned ? 0 : NRT_CUDA(cudaMemsetAsync(*p, 0, bytes, c->net.stream), err);
}

template <typename T>
static int dalloc(Ctx *c, T **p, size_t count, const char *what, nrt_error *err)
{
    return track(c, (void **)p, count, sizeof(T), 0, what, err);
}

template <typename T>
static int palloc(Ctx *c, T **p, size_t count, const char *what, nrt_error *err)
{
    return track(c, (void **)p, count, sizeof(T), 1, what, err);
}

static void free_all(Ctx *c)
{
    /* cleanup: a failure has nobody to be reported to */
    while (c->nallocs > 0) {
        Alloc a = c->allocs[--c->nallocs];
        if (a.pinned)
            (void)cudaFreeHost(a.p);
        else
            nrt_cuda_free(&c->mem, a.p, a.bytes);
    }
}

/* --------------------------------------------------------------- graphs */

static void drop_graphs(Ctx *c)
{
    for (int i = 0; i < c->ngraphs; i++)
        (void)cudaGraphExecDestroy(c->graphs[i].exec); /* freed when done if in flight */
    c->ngraphs = c->evict = 0;
}

static cudaGraphExec_t find_graph(const Ctx *c, int n)
{
    for (int i = 0; i < c->ngraphs; i++)
        if (c->graphs[i].n == n)
            return c->graphs[i].exec;
    return NULL;
}

/* Keeps exec for n; a full cache gives up its oldest entry.  In practice
 * a run has two batch sizes: the full batch and the epoch's last. */
static void keep_graph(Ctx *c, int n, cudaGraphExec_t exec)
{
    Graph g = {n, exec};
    if (c->ngraphs < MAX_GRAPHS) {
        c->graphs[c->ngraphs++] = g;
        return;
    }
    (void)cudaGraphExecDestroy(c->graphs[c->evict].exec);
    c->graphs[c->evict] = g;
    c->evict = (c->evict + 1) % MAX_GRAPHS;
}

/* -------------------------------------------------------------- buckets */

static int plan_buckets(Ctx *c, size_t cap_bytes, nrt_error *err)
{
    const nrt_model *m = c->m;
    Buckets *b = &c->bk;
    b->lo = (size_t *)malloc(sizeof(size_t) * (size_t)(m->n_params + 1));
    if (!b->lo)
        return nrt_errorf(err, "out of memory");
    size_t limit = cap_bytes < FIRST_BUCKET ? cap_bytes : FIRST_BUCKET, bytes = 0;
    for (int i = m->n_params - 1; i > 0; i--) {
        bytes += sizeof(float) * m->params[i].size;
        if (bytes >= limit) {
            b->lo[b->n++] = m->params[i].offset;
            bytes = 0;
            limit = cap_bytes;
        }
    }
    b->lo[b->n++] = 0;
    return NRT_CUDA(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), err) ||
                   NRT_CUDA(cudaEventCreateWithFlags(&b->fork, cudaEventDisableTiming), err) ||
                   NRT_CUDA(cudaEventCreateWithFlags(&b->join, cudaEventDisableTiming), err)
               ? -1
               : 0;
}

/* Sums the buckets not summed yet that lie at or past from. */
static int sum_buckets(Ctx *c, size_t from, nrt_error *err)
{
    Buckets *b = &c->bk;
    nrt_cuda_net *net = &c->net;
    const size_t np = c->m->param_count;
    if (b->next == b->n || b->lo[b->next] < from)
        return 0;
    if (NRT_CUDA(cudaEventRecord(b->fork, net->stream), err) ||
        NRT_CUDA(cudaStreamWaitEvent(b->stream, b->fork, 0), err))
        return -1;
    for (; b->next < b->n && b->lo[b->next] >= from; b->next++) {
        const size_t lo = b->lo[b->next], hi = b->next ? b->lo[b->next - 1] : np + 1;
        float *g = net->grad + lo;
        if (nrt_cuda_weigh(b->stream, c->sms, g, b->next ? hi - lo : np - lo,
                           b->next ? NULL : &c->dev->loss, b->w, err) ||
            NRT_NCCL(&c->nccl, c->nccl.AllReduce(g, g, hi - lo, ncclFloat, ncclSum, c->nc,
                                                 b->stream), err))
            return -1;
    }
    return 0;
}

static int grads_final(nrt_cuda_net *net, size_t from, nrt_error *err)
{
    return sum_buckets((Ctx *)net->grads_ctx, from, err);
}

/* The rest of the buckets, and the run's stream made to wait for them. */
static int join_buckets(Ctx *c, nrt_error *err)
{
    Buckets *b = &c->bk;
    return sum_buckets(c, 0, err) || NRT_CUDA(cudaEventRecord(b->join, b->stream), err) ||
                   NRT_CUDA(cudaStreamWaitEvent(c->net.stream, b->join, 0), err)
               ? -1
               : 0;
}

/* ----------------------------------------------------------------- step */

/* The whole step on the stream: what a graph captures.  Its batch is k
 * samples from position offset past the device cursor (gather: from the
 * resident training set; else they are in the batch buffers already);
 * with several ranks, this rank's share of the step's n (alone k == n),
 * whose gradients and loss NCCL sums, weighted by the shares, in buckets
 * as backward makes them.  A rank with no sample (the last batch smaller
 * than the ranks) adds zeros. */
static int enqueue_step(Ctx *c, int k, int n, size_t offset, int gather, nrt_error *err)
{
    nrt_cuda_net *net = &c->net;
    cudaStream_t s = net->stream;
    const size_t np = c->m->param_count;
    net->x = c->bx;
    net->label = c->blabel;
    net->y = c->by;
    net->training = 1;
    const DevData *d = &c->dtrain;
    Scalars *sc = c->dev;
    c->bk.next = 0;
    c->bk.w = (float)((double)k / n);
    if (k > 0 ? (gather && nrt_cuda_gather(s, c->sms, d->x, d->label, d->y, &sc->order,
                                           &sc->cursor, offset, k, c->train.dim,
                                           c->train.ydim, c->bx, c->blabel, c->by, err)) ||
                    c->m->cuda->forward(net, k, err) || c->m->cuda->backward(net, k, err)
              : NRT_CUDA(cudaMemsetAsync(net->grad, 0, sizeof(float) * np, s), err) ||
                    NRT_CUDA(cudaMemsetAsync(&sc->loss, 0, sizeof(float), s), err))
        return -1;
    if (c->comm &&
        (join_buckets(c, err) || nrt_cuda_copy_loss(s, net->grad + np, &sc->loss, err)))
        return -1;
    /* fp16: the summed gradients unscaled and the update skipped if one is
     * not finite (on every rank alike: they hold the same sums) */
    const int fp16 = net->lowp == NRT_FP16;
    if ((fp16 && nrt_cuda_unscale(s, c->sms, net->grad, np, &sc->scaler, &sc->found, err)) ||
        nrt_cuda_optim(s, c->sms, &c->h, net->param, net->grad, c->opt_m, c->opt_v, np,
                       fp16 ? &sc->updates : &sc->step, fp16 ? &sc->found : NULL, err) ||
        (fp16 && nrt_cuda_scaler_update(s, &sc->scaler, &sc->found, &sc->updates, err)))
        return -1;
    return nrt_cuda_end_step(s, &sc->loss, n, &sc->loss_sum, &sc->cursor, &sc->step, err);
}

/* Captures the step for a batch of n (k of them this rank's, from offset).
 * The capture ends even when the step failed: a stream left capturing is
 * unusable. */
static int capture_step(Ctx *c, int k, int n, size_t offset, cudaGraphExec_t *exec,
                        nrt_error *err)
{
    cudaStream_t s = c->net.stream;
    cudaGraph_t g = NULL;
    *exec = NULL;
    if (NRT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), err))
        return -1;
    int rc = enqueue_step(c, k, n, offset, c->resident, err);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (rc == 0)
        rc = NRT_CUDA(e, err);
    else
        (void)cudaGetLastError();
    if (rc == 0)
        rc = NRT_CUDA(cudaGraphInstantiate(exec, g, 0), err);
    if (g && NRT_CUDA(cudaGraphDestroy(g), rc ? NULL : err))
        rc = -1;
    if (rc && *exec) {
        (void)cudaGraphExecDestroy(*exec);
        *exec = NULL;
    }
    if (rc && err) {
        /* Most likely a pass that synchronises or allocates, which a
         * capture forbids: say where it happened. */
        nrt_error why = *err;
        nrt_errorf(err, "capturing a step as a CUDA graph: %.440s", why.msg);
    }
    return rc;
}

/* An asynchronous copy on the run's stream; nothing to copy is no call. */
static int copy(Ctx *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                nrt_error *err)
{
    if (!src || bytes == 0)
        return 0;
    return NRT_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, c->net.stream), err);
}

/* Copies n samples (x, and label or y, whichever is given) into the
 * batch buffers. */
static int to_batch(Ctx *c, const float *x, const int32_t *label, const float *y, size_t n,
                    cudaMemcpyKind kind, nrt_error *err)
{
    const size_t dim = c->m->in_size, ydim = (size_t)c->m->n_out;
    return copy(c, c->bx, x, sizeof(float) * n * dim, kind, err) ||
                   copy(c, c->blabel, label, sizeof(int32_t) * n, kind, err) ||
                   copy(c, c->by, y, sizeof(float) * n * ydim, kind, err)
               ? -1
               : 0;
}

/* Host mode: gathers the batch on the host into a pinned buffer and
 * copies it to the batch buffers, ahead of the step on the stream.  Two
 * buffers: the host fills one while the other may still be copied. */
static int stage_batch(Ctx *c, size_t start, int n, nrt_error *err)
{
    const int k = c->slot;
    c->slot ^= 1;
    if (NRT_CUDA(cudaEventSynchronize(c->staged[k]), err))
        return -1;
    nrt_order_fill(&c->host->order, start, (size_t)n, c->host_idx);
    nrt_dataset_gather(&c->train, c->host_idx, (size_t)n, c->pin_x[k], c->pin_label[k],
                       c->pin_y[k]);
    if (to_batch(c, c->pin_x[k], c->pin_label[k], c->pin_y[k], (size_t)n,
                 cudaMemcpyHostToDevice, err))
        return -1;
    return NRT_CUDA(cudaEventRecord(c->staged[k], c->net.stream), err);
}

/* The mean loss of the last forward pass, waited for. */
static int read_loss(Ctx *c, float *loss, nrt_error *err)
{
    if (copy(c, &c->host->loss, &c->dev->loss, sizeof(float), cudaMemcpyDeviceToHost, err) ||
        NRT_CUDA(cudaStreamSynchronize(c->net.stream), err))
        return -1;
    *loss = c->host->loss;
    return 0;
}

static int be_step(void *ctx, size_t start, int n, float *loss, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    if (!c->has_data)
        return nrt_errorf(err, "internal error: a step before the data was set");
    size_t first = start; /* this rank's share: k samples from first */
    const int k = c->comm ? (int)nrt_share(c->comm->rank, c->comm->size, start, (size_t)n, &first)
                          : n;
    if (n < 1 || k > c->net.cap)
        return nrt_errorf(err, "internal error: a step of %d samples (the batch capacity is %d)",
                          k, c->net.cap);
    /* The device's cursor says where the step starts; the host's copy of
     * it checks that the caller agrees. */
    if (start != c->cursor)
        return nrt_errorf(err, "internal error: a step at sample %zu of the epoch, expected %zu",
                          start, c->cursor);
    if ((size_t)n > c->host->order.n - start)
        return nrt_errorf(err, "internal error: a step past the end of the epoch's order "
                          "(%zu + %d > %u)", start, n, c->host->order.n);
    if (!c->resident && stage_batch(c, first, k, err))
        return -1;
    cudaGraphExec_t exec = find_graph(c, n);
    if (exec) {
        if (NRT_CUDA(cudaGraphLaunch(exec, c->net.stream), err))
            return -1;
    } else {
        /* The first step of a size runs eagerly, which also loads every
         * kernel and sets cuBLAS up outside of a capture; the graph is
         * captured (not run) right after, for the next ones. */
        if (enqueue_step(c, k, n, first - start, c->resident, err) ||
            capture_step(c, k, n, first - start, &exec, err))
            return -1;
        keep_graph(c, n, exec);
    }
    c->cursor += (size_t)n;
    return loss ? read_loss(c, loss, err) : 0;
}

/* ----------------------------------------------------------------- data */

static int check_shape(const nrt_model *m, const nrt_dataset *d, const char *what,
                       nrt_error *err)
{
    if (d->dim != m->in_size)
        return nrt_errorf(err, "internal error: the %s has %zu features per sample, the model "
                          "takes %zu", what, d->dim, m->in_size);
    if (m->target_kind == NRT_TARGET_CLASS ? !d->label
                                           : !d->y || d->ydim != (size_t)m->n_out)
        return nrt_errorf(err, "internal error: the %s's targets do not match the model's",
                          what);
    return 0;
}

static size_t data_bytes(const nrt_dataset *d)
{
    return d->n * (sizeof(float) * d->dim + (d->label ? sizeof(int32_t) : 0) +
                   (d->y ? sizeof(float) * d->ydim : 0));
}

/* Copies a data set to the device (done by set_data's synchronisation). */
static int upload(Ctx *c, const nrt_dataset *d, DevData *out, const char *what,
                  nrt_error *err)
{
    const cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    const int cls = c->m->target_kind == NRT_TARGET_CLASS;
    out->n = d->n;
    return dalloc(c, &out->x, d->n * d->dim, what, err) ||
                   (cls && dalloc(c, &out->label, d->n, what, err)) ||
                   (!cls && dalloc(c, &out->y, d->n * d->ydim, what, err)) ||
                   copy(c, out->x, d->x, sizeof(float) * d->n * d->dim, h2d, err) ||
                   (cls && copy(c, out->label, d->label, sizeof(int32_t) * d->n, h2d, err)) ||
                   (!cls && copy(c, out->y, d->y, sizeof(float) * d->n * d->ydim, h2d, err))
               ? -1
               : 0;
}

/* Host mode's pinned batches and their events. */
static int host_mode(Ctx *c, nrt_error *err)
{
    const size_t cap = (size_t)c->net.cap;
    const int cls = c->m->target_kind == NRT_TARGET_CLASS;
    if (palloc(c, &c->host_idx, cap, "a staged batch", err))
        return -1;
    for (int k = 0; k < 2; k++)
        if (palloc(c, &c->pin_x[k], cap * c->train.dim, "a staged batch", err) ||
            (cls && palloc(c, &c->pin_label[k], cap, "a staged batch", err)) ||
            (!cls && palloc(c, &c->pin_y[k], cap * c->train.ydim, "a staged batch", err)) ||
            NRT_CUDA(cudaEventCreateWithFlags(&c->staged[k], cudaEventDisableTiming), err))
            return -1;
    return 0;
}

/* Whether the training set goes to the device: when it fits, the normal
 * case.  The free memory already excludes the net's buffers (allocated at
 * open); what must fit beside it is the test set and a reserve.  NETRT_CUDA_HOST_DATA=1 keeps it on the host, to test that. */
static int fits(const nrt_dataset *train, size_t eval_bytes, int *yes, nrt_error *err)
{
    size_t free_b = 0, total_b = 0;
    if (NRT_CUDA(cudaMemGetInfo(&free_b, &total_b), err))
        return -1;
    const size_t need = data_bytes(train) + eval_bytes + DATA_RESERVE;
    const char *force = getenv("NETRT_CUDA_HOST_DATA");
    *yes = need <= free_b && !(force && !strcmp(force, "1"));
    return 0;
}

/* Once a run: the graphs hold the data's addresses.  A failure leaves
 * what was allocated to close. */
static int be_set_data(void *ctx, const nrt_dataset *train, const nrt_dataset *valid,
                       const nrt_dataset *test, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    const nrt_dataset *eval[2] = {valid, test};
    static const char *const what[2] = {"the validation set", "the test set"};
    if (c->data_tried)
        return nrt_errorf(err, "internal error: the data was set twice");
    c->data_tried = 1;
    size_t eval_bytes = 0;
    for (int k = 0; k < 2; k++) {
        if (eval[k] && check_shape(c->m, eval[k], what[k], err))
            return -1;
        eval_bytes += eval[k] ? data_bytes(eval[k]) : 0;
    }
    if (train) {
        if (check_shape(c->m, train, "training set", err) ||
            fits(train, eval_bytes, &c->resident, err))
            return -1;
        c->train = *train; /* host mode reads the caller's data, which outlives the run */
        if ((c->resident ? upload(c, train, &c->dtrain, "the training set", err)
                         : host_mode(c, err)) ||
            NRT_CUDA(cudaEventCreateWithFlags(&c->order_copied, cudaEventDisableTiming), err))
            return -1;
    }
    for (int k = 0; k < 2; k++)
        if (eval[k] && upload(c, eval[k], &c->deval[k], what[k], err))
            return -1;
    if (NRT_CUDA(cudaStreamSynchronize(c->net.stream), err))
        return -1;
    c->has_data = train != NULL;
    c->has_eval[0] = valid != NULL;
    c->has_eval[1] = test != NULL;
    return 0;
}

static int be_set_order(void *ctx, const nrt_order *order, size_t start, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    if (!c->has_data)
        return nrt_errorf(err, "internal error: an order before the data was set");
    if (order->n > c->train.n || start > order->n)
        return nrt_errorf(err, "internal error: an order of %u samples for %zu from %zu",
                          order->n, c->train.n, start);
    /* The previous order's copy must be done before its staging is
     * reused; the device's copy is replaced in stream order, after the
     * last step that reads it.  The cursor starts again at start (0,
     * unless a run resumes).  The order and the cursor are not adjacent
     * in Scalars: two copies. */
    if (NRT_CUDA(cudaEventSynchronize(c->order_copied), err))
        return -1;
    c->host->order = *order;
    c->host->cursor = start;
    if (copy(c, &c->dev->order, &c->host->order, sizeof(nrt_order), cudaMemcpyHostToDevice,
             err) ||
        copy(c, &c->dev->cursor, &c->host->cursor, sizeof c->dev->cursor,
             cudaMemcpyHostToDevice, err) ||
        NRT_CUDA(cudaEventRecord(c->order_copied, c->net.stream), err))
        return -1;
    c->cursor = start;
    return 0;
}

static int be_take_loss_sum(void *ctx, double *sum, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    cudaStream_t s = c->net.stream;
    if (copy(c, &c->host->loss_sum, &c->dev->loss_sum, sizeof(double), cudaMemcpyDeviceToHost,
             err) ||
        NRT_CUDA(cudaMemsetAsync(&c->dev->loss_sum, 0, sizeof(double), s), err) ||
        NRT_CUDA(cudaStreamSynchronize(s), err))
        return -1;
    *sum = c->host->loss_sum;
    return 0;
}

/* A set's samples lo .. hi - 1 in order, batches of up to cap, each
 * counted by k_eval. */
static int evaluate_batches(Ctx *c, const DevData *d, size_t lo, size_t hi, nrt_error *err)
{
    nrt_cuda_net *net = &c->net;
    const size_t cap = (size_t)net->cap, dim = c->m->in_size, ydim = (size_t)c->m->n_out;
    net->x = c->bx;
    net->label = c->blabel;
    net->y = c->by;
    for (size_t first = lo; first < hi; first += cap) {
        const size_t n = hi - first < cap ? hi - first : cap;
        if (to_batch(c, d->x ? d->x + first * dim : NULL, d->label ? d->label + first : NULL,
                     d->y ? d->y + first * ydim : NULL, n, cudaMemcpyDeviceToDevice, err) ||
            c->m->cuda->forward(net, (int)n, err))
            return -1;
        if (nrt_cuda_count_eval(net->stream, &c->dev->loss, net->out, c->blabel, (int)n,
                                c->m->n_out, &c->dev->eval_loss, &c->dev->correct, err))
            return -1;
    }
    return 0;
}

/* Rank 0's buffers (running statistics) on every rank, through the host:
 * DDP's broadcast_buffers, before an evaluation. */
static int share_buffers(Ctx *c, nrt_error *err)
{
    const size_t bytes = c->m->buffer_bytes;
    if (!bytes)
        return 0;
    void *h = malloc(bytes);
    if (!h)
        return nrt_errorf(err, "out of memory");
    int rc = copy(c, h, c->net.buffers, bytes, cudaMemcpyDeviceToHost, err) ||
                     NRT_CUDA(cudaStreamSynchronize(c->net.stream), err) ||
                     c->comm->broadcast(c->comm->ctx, h, bytes, err) ||
                     copy(c, c->net.buffers, h, bytes, cudaMemcpyHostToDevice, err) ||
                     NRT_CUDA(cudaStreamSynchronize(c->net.stream), err)
                 ? -1
                 : 0;
    free(h);
    return rc;
}

static int be_evaluate(void *ctx, int which, double *loss, double *accuracy, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    const int k = which == NRT_EVAL_TEST ? 1 : 0;
    if (!c->has_eval[k] || c->deval[k].n == 0)
        return nrt_errorf(err, "internal error: no %s data to evaluate",
                          k ? "test" : "validation");
    cudaStream_t s = c->net.stream;
    /* eval_loss and correct are adjacent: zeroed and read as one */
    const size_t both = sizeof(double) + sizeof(unsigned long long);
    if (NRT_CUDA(cudaMemsetAsync(&c->dev->eval_loss, 0, both, s), err))
        return -1;
    /* several ranks: each its share, with rank 0's buffers, then the sums */
    size_t lo = 0, count = c->deval[k].n;
    if (c->comm) {
        count = nrt_share(c->comm->rank, c->comm->size, 0, c->deval[k].n, &lo);
        if (share_buffers(c, err))
            return -1;
    }
    c->net.training = 0;
    int rc = evaluate_batches(c, &c->deval[k], lo, lo + count, err);
    c->net.training = 1;
    if (rc || copy(c, &c->host->eval_loss, &c->dev->eval_loss, both, cudaMemcpyDeviceToHost,
                   err) ||
        NRT_CUDA(cudaStreamSynchronize(s), err))
        return -1;
    double sums[2] = {c->host->eval_loss, (double)c->host->correct};
    if (c->comm && c->comm->sum_doubles(c->comm->ctx, sums, 2, err))
        return -1;
    const double n = (double)c->deval[k].n;
    *loss = sums[0] / n;
    *accuracy = c->m->target_kind == NRT_TARGET_CLASS ? sums[1] / n : NAN;
    return 0;
}

/* The caller's samples, cap at a time: copied in, forward in evaluation
 * mode, the output copied out.  The forward pass also computes a loss,
 * against whatever targets the batch buffers hold (zeroed at open, or a
 * past batch's: labels in range), which nobody reads. */
static int be_predict(void *ctx, const float *x, size_t n, float *out, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    nrt_cuda_net *net = &c->net;
    const size_t cap = (size_t)net->cap, dim = c->m->in_size, nout = (size_t)c->m->n_out;
    net->x = c->bx;
    net->label = c->blabel;
    net->y = c->by;
    net->training = 0;
    int rc = 0;
    for (size_t s = 0; s < n && rc == 0; s += cap) {
        const size_t k = n - s < cap ? n - s : cap;
        rc = copy(c, c->bx, x + s * dim, sizeof(float) * k * dim, cudaMemcpyHostToDevice, err) ||
                     c->m->cuda->forward(net, (int)k, err) ||
                     copy(c, out + s * nout, net->out, sizeof(float) * k * nout,
                          cudaMemcpyDeviceToHost, err) ||
                     NRT_CUDA(cudaStreamSynchronize(net->stream), err)
                 ? -1
                 : 0;
    }
    net->training = 1;
    return rc;
}

/* A step on the caller's batch: copied in, then the step without its
 * gather, run eagerly (the graphs are the training loop's). */
static int be_train_batch(void *ctx, const nrt_batch *b, float *loss, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    const int n = b->total > 0 ? b->total : b->n; /* b: this rank's share of n */
    if (b->n < (c->comm ? 0 : 1) || b->n > c->net.cap || n < b->n)
        return nrt_errorf(err, "internal error: a batch of %d samples (the capacity is %d)", b->n,
                          c->net.cap);
    if (to_batch(c, b->x, b->label, b->y, (size_t)b->n, cudaMemcpyHostToDevice, err) ||
        enqueue_step(c, b->n, n, 0, 0, err))
        return -1;
    return loss ? read_loss(c, loss, err)
                : NRT_CUDA(cudaStreamSynchronize(c->net.stream), err); /* the caller's x is free */
}

/* --gradcheck: forward and backward on the caller's batch, eagerly and
 * without an update.  The input's gradient, which training never needs,
 * goes to a buffer of its own, allocated the first time it is asked for.
 * fp16: backward from the loss times the device's scale (net->loss_scale
 * points at it), both gradients then unscaled on the host, as the cpu's
 * (nrt_unscale), the scaler untouched.  fp32_backward: the backward
 * pass's kernels launched as in fp32, over the low-precision forward's
 * values. */
static int be_gradient(void *ctx, const nrt_batch *b, int fp32_backward, float *loss,
                       float *grad, float *dinput, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    nrt_cuda_net *net = &c->net;
    const size_t nin = (size_t)b->n * c->m->in_size;
    if (b->n < 1 || b->n > net->cap)
        return nrt_errorf(err, "internal error: a batch of %d samples (the capacity is %d)", b->n,
                          net->cap);
    if (grad && dinput && !c->dinput && dalloc(c, &c->dinput, (size_t)net->cap * c->m->in_size,
                                               "the input's gradient", err))
        return -1;
    net->x = c->bx;
    net->label = c->blabel;
    net->y = c->by;
    net->training = 1;
    net->dinput = grad && dinput ? c->dinput : NULL;
    /* (the kernels take lowp as an argument, read as they are launched) */
    const int lowp = net->lowp;
    int rc = to_batch(c, b->x, b->label, b->y, (size_t)b->n, cudaMemcpyHostToDevice, err) ||
             c->m->cuda->forward(net, b->n, err);
    if (!rc && grad) {
        if (fp32_backward)
            net->lowp = NRT_FP32;
        rc = c->m->cuda->backward(net, b->n, err) ||
             copy(c, grad, net->grad, sizeof(float) * c->m->param_count, cudaMemcpyDeviceToHost,
                  err) ||
             (net->dinput &&
              copy(c, dinput, c->dinput, sizeof(float) * nin, cudaMemcpyDeviceToHost, err)) ||
             (lowp == NRT_FP16 && copy(c, &c->host->scaler, &c->dev->scaler,
                                       sizeof c->host->scaler, cudaMemcpyDeviceToHost, err));
        net->lowp = lowp;
    }
    rc = rc || read_loss(c, loss, err) ? -1 : 0; /* (read_loss waits for the copies) */
    if (!rc && grad && lowp == NRT_FP16) {
        nrt_unscale(&c->host->scaler, grad, c->m->param_count);
        if (net->dinput)
            nrt_unscale(&c->host->scaler, dinput, nin);
    }
    net->dinput = NULL;
    return rc;
}

/* ----------------------------------------------------------- parameters */

/* On the run's stream: a plain cudaMemcpy would not wait for a
 * non-blocking stream's work. */
static int be_get_params(void *ctx, float *param, void *buffers, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    return copy(c, param, c->net.param, sizeof(float) * c->m->param_count,
                cudaMemcpyDeviceToHost, err) ||
                   copy(c, buffers, c->net.buffers, c->m->buffer_bytes, cudaMemcpyDeviceToHost,
                        err) ||
                   NRT_CUDA(cudaStreamSynchronize(c->net.stream), err)
               ? -1
               : 0;
}

static int be_set_params(void *ctx, const float *param, const void *buffers, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    return copy(c, c->net.param, param, sizeof(float) * c->m->param_count,
                cudaMemcpyHostToDevice, err) ||
                   copy(c, c->net.buffers, buffers, c->m->buffer_bytes, cudaMemcpyHostToDevice,
                        err) ||
                   NRT_CUDA(cudaStreamSynchronize(c->net.stream), err)
               ? -1
               : 0;
}

/* The optimizer's hyperparameters are the graphs' kernel arguments: a
 * new lr makes new graphs (captured at the next step of each size). */
static int be_set_lr(void *ctx, double lr, nrt_error *err)
{
    (void)err;
    Ctx *c = (Ctx *)ctx;
    if (c->h.lr != lr) {
        c->h.lr = lr;
        drop_graphs(c);
    }
    return 0;
}

/* The step counter and the loss sum are not adjacent in Scalars: a copy
 * each. */
static int be_get_state(void *ctx, float *m, float *v, uint64_t *step, double *loss_sum,
                        nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    const size_t bytes = sizeof(float) * c->m->param_count;
    const cudaMemcpyKind d2h = cudaMemcpyDeviceToHost;
    if ((m && c->opt_m && copy(c, m, c->opt_m, bytes, d2h, err)) ||
        (v && c->opt_v && copy(c, v, c->opt_v, bytes, d2h, err)) ||
        copy(c, &c->host->step, &c->dev->step, sizeof c->dev->step, d2h, err) ||
        copy(c, &c->host->loss_sum, &c->dev->loss_sum, sizeof(double), d2h, err) ||
        NRT_CUDA(cudaStreamSynchronize(c->net.stream), err))
        return -1;
    *step = c->host->step;
    *loss_sum = c->host->loss_sum;
    return 0;
}

static int be_set_state(void *ctx, const float *m, const float *v, uint64_t step,
                        double loss_sum, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    const size_t bytes = sizeof(float) * c->m->param_count;
    const cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    c->host->step = step;
    c->host->loss_sum = loss_sum;
    /* (fp16: the scaler, set first, says how many steps were skipped) */
    c->host->updates = step - (unsigned long long)c->host->scaler.skipped;
    return (m && c->opt_m && copy(c, c->opt_m, m, bytes, h2d, err)) ||
                   (v && c->opt_v && copy(c, c->opt_v, v, bytes, h2d, err)) ||
                   copy(c, &c->dev->step, &c->host->step, sizeof c->dev->step, h2d, err) ||
                   copy(c, &c->dev->updates, &c->host->updates, sizeof c->dev->updates, h2d,
                        err) ||
                   copy(c, &c->dev->loss_sum, &c->host->loss_sum, sizeof(double), h2d, err) ||
                   NRT_CUDA(cudaStreamSynchronize(c->net.stream), err)
               ? -1
               : 0;
}

static int be_get_scaler(void *ctx, nrt_scaler *s, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    if (copy(c, &c->host->scaler, &c->dev->scaler, sizeof *s, cudaMemcpyDeviceToHost, err) ||
        NRT_CUDA(cudaStreamSynchronize(c->net.stream), err))
        return -1;
    *s = c->host->scaler;
    return 0;
}

static int be_set_scaler(void *ctx, const nrt_scaler *s, nrt_error *err)
{
    Ctx *c = (Ctx *)ctx;
    c->host->scaler = *s;
    return copy(c, &c->dev->scaler, &c->host->scaler, sizeof *s, cudaMemcpyHostToDevice, err) ||
                   NRT_CUDA(cudaStreamSynchronize(c->net.stream), err)
               ? -1
               : 0;
}

static size_t be_peak_memory(void *ctx)
{
    return ((const Ctx *)ctx)->mem.peak;
}

/* Safe on a context open failed half way through.  Errors are ignored:
 * there is nobody left to report them to. */
static void be_close(void *ctx)
{
    Ctx *c = (Ctx *)ctx;
    if (!c)
        return;
    if (c->net.stream)
        (void)cudaStreamSynchronize(c->net.stream);
    drop_graphs(c);
    cudaEvent_t ev[3] = {c->order_copied, c->staged[0], c->staged[1]};
    for (int i = 0; i < 3; i++)
        if (ev[i])
            (void)cudaEventDestroy(ev[i]);
    if (c->bk.stream)
        (void)cudaStreamSynchronize(c->bk.stream);
    if (c->bk.fork)
        (void)cudaEventDestroy(c->bk.fork);
    if (c->bk.join)
        (void)cudaEventDestroy(c->bk.join);
    if (c->bk.stream)
        (void)cudaStreamDestroy(c->bk.stream);
    free(c->bk.lo);
    if (c->nc)
        (void)c->nccl.CommDestroy(c->nc);
    nrt_nccl_unload(&c->nccl);
    if (c->net.blas)
        (void)c->cublas.Destroy(c->net.blas);
    nrt_cublas_unload(&c->cublas);
    nrt_cuda_module_unload(c->net.library, c->net.kernel);
    free_all(c);
    if (c->net.stream)
        (void)cudaStreamDestroy(c->net.stream);
    free(c);
}

/* ----------------------------------------------------------------- open */

static int setup_blas(Ctx *c, nrt_error *err)
{
    nrt_cuda_net *net = &c->net;
    const nrt_cublas *b = &c->cublas;
    net->cublas = b;
    if (NRT_CUBLAS(b, b->Create(&net->blas), err)) {
        net->blas = NULL;
        return -1;
    }
    /* Default math: exact fp32, no TF32.  No atomics: one seed, one result.
     * The workspace after the stream: cublasSetStream resets it. */
    return NRT_CUBLAS(b, b->SetStream(net->blas, net->stream), err) ||
                   NRT_CUBLAS(b, b->SetMathMode(net->blas, CUBLAS_DEFAULT_MATH), err) ||
                   NRT_CUBLAS(b, b->SetAtomicsMode(net->blas, CUBLAS_ATOMICS_NOT_ALLOWED), err) ||
                   dalloc(c, &c->blas_ws, BLAS_WORKSPACE, "cuBLAS's workspace", err) ||
                   NRT_CUBLAS(b, b->SetWorkspace(net->blas, c->blas_ws, BLAS_WORKSPACE), err)
               ? -1
               : 0;
}

static int alloc_gbufs(Ctx *c, nrt_error *err)
{
    const size_t count = (size_t)c->net.cap * c->m->grad_size;
    for (int i = 0; i < nrt_grad_buffers(c->m); i++)
        if (dalloc(c, &c->net.gbuf[i], count, "the gradient buffers", err))
            return -1;
    return 0;
}

static int alloc_net(Ctx *c, nrt_error *err)
{
    const nrt_model *m = c->m;
    nrt_cuda_net *net = &c->net;
    const size_t cap = (size_t)net->cap, np = m->param_count;
    const int cls = m->target_kind == NRT_TARGET_CLASS;
    const int slots = nrt_optim_slots(&c->h);
    /* a product reads the weights (their 16-bit copy made with their cast)
     * or an operand of at most operand_size elements a sample: its
     * operands' 16-bit copies are as long */
    const size_t act = cap * (net->half ? m->cuda->half_act_size : m->cuda->act_size),
                 half = cap * m->cuda->operand_size;
    if (dalloc(c, &net->param, np, "the parameters", err) ||
        dalloc(c, &net->grad, np + 1, "the gradients", err) || /* + a rank's loss */
        dalloc(c, &net->buffers, m->buffer_bytes, "the buffers", err) ||
        dalloc(c, &net->act, act, "the activations", err) ||
        alloc_gbufs(c, err) ||
        dalloc(c, &net->scratch, cap * m->scratch_size, "the scratch buffer", err) ||
        dalloc(c, &net->iact, cap * m->iact_size, "the integer activations", err) ||
        dalloc(c, (char **)&net->workspace, m->cuda->workspace, "the workspace", err) ||
        dalloc(c, &c->bx, cap * m->in_size, "the batch", err) ||
        (cls && dalloc(c, &c->blabel, cap, "the batch", err)) ||
        (!cls && dalloc(c, &c->by, cap * (size_t)m->n_out, "the batch", err)) ||
        (slots > 0 && dalloc(c, &c->opt_m, np, "the optimizer state", err)) ||
        (slots > 1 && dalloc(c, &c->opt_v, np, "the optimizer state", err)) ||
        (net->lowp && (dalloc(c, &net->wlp, np, "the bf16 weights", err) ||
                       dalloc(c, &net->xlp, cap * m->lowp_in_size, "the bf16 input", err) ||
                       dalloc(c, &net->operand16[0], half, "the products' 16-bit operands", err) ||
                       dalloc(c, &net->operand16[1], half, "the products' 16-bit operands", err) ||
                       dalloc(c, &net->whalf, np, "the products' 16-bit weights", err))) ||
        dalloc(c, &c->dev, 1, "the run's scalars", err) ||
        palloc(c, &c->host, 1, "the run's scalars", err))
        return -1;
    net->workspace_bytes = m->cuda->workspace;
    net->operand16_count = net->lowp ? half : 0;
    net->loss = &c->dev->loss;
    net->step = &c->dev->step;
    if (net->lowp == NRT_FP16)
        net->loss_scale = &c->dev->scaler.scale;
    return 0;
}

static int setup(Ctx *c, const nrt_model *m, const nrt_run_config *cfg, char *name,
                 size_t name_len, nrt_error *err)
{
    nrt_cuda_net *net = &c->net;
    c->m = m;
    c->h = cfg->optim;
    net->model = m;
    net->device = cfg->device;
    net->cap = cfg->cap;
    net->dropout_key = cfg->dropout_key;
    net->training = 1;
    net->lowp = cfg->precision;
    const int half = nrt_half_of(m->cuda->half_act_size, m->cuda->act_size, cfg->precision, err);
    if (half < 0)
        return -1;
    net->half = half ? cfg->precision : 0;
    cudaDeviceProp p;
    if (NRT_CUDA(cudaSetDevice(cfg->device), err) ||
        NRT_CUDA(cudaGetDeviceProperties(&p, cfg->device), err))
        return -1;
    c->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
    c->major = p.major;
    snprintf(name, name_len, "cuda:%d (%.120s)", cfg->device, p.name);
    if (NRT_CUDA(cudaStreamCreateWithFlags(&net->stream, cudaStreamNonBlocking), err)) {
        net->stream = NULL;
        return -1;
    }
    if (nrt_cuda_module_load(m->cuda->code, cfg->device, &net->library, &net->kernel, err) ||
        setup_blas(c, err) || alloc_net(c, err))
        return -1;
    memset(c->host, 0, sizeof *c->host); /* (pinned memory comes as it is) */
    /* fp16's scaler from its first scale (set_scaler when resumed) */
    const nrt_scaler first = {cfg->init_scale > 0 ? cfg->init_scale : NRT_SCALE_INIT, 0, 0};
    /* the zeroing of every buffer is done before the first use */
    return (net->lowp == NRT_FP16 && be_set_scaler(c, &first, err)) ||
                   NRT_CUDA(cudaStreamSynchronize(net->stream), err)
               ? -1
               : 0;
}

/* Whether a library (what) loaded on every rank, where loaded says this
 * rank's: 1, or 0 with the reason in err (this rank's own, or the ranks
 * it failed on), or -1.  Alone (comm NULL), this rank's word. */
static int loaded_everywhere(const nrt_comm *comm, int loaded, const char *what,
                             nrt_error *err)
{
    if (!comm)
        return loaded;
    char who[160];
    nrt_error why = *err;
    int all = nrt_comm_agree(comm, loaded, who, sizeof who, err);
    if (all == 0 && loaded)
        nrt_errorf(err, "%s cannot be loaded on %s", what, who);
    else if (all == 0)
        *err = why;
    return all;
}

/* Several ranks: NCCL loaded on every rank (else none goes on: the
 * device is unavailable, and auto trains on the cpu everywhere), its id
 * from rank 0 over the ranks' own channel (MPI), and the communicator. */
static int join_ranks(Ctx *c, const nrt_comm *comm, size_t bucket_bytes, nrt_error *err)
{
    int all = loaded_everywhere(comm, nrt_nccl_load(&c->nccl, err) == 0, "NCCL", err);
    if (all != 1)
        return all < 0 ? -1 : NRT_UNAVAILABLE;
    c->comm = comm;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    /* rank 0's failure here leaves the others in the broadcast: it aborts */
    if ((comm->rank == 0 && NRT_NCCL(&c->nccl, c->nccl.GetUniqueId(&id), err)) ||
        comm->broadcast(comm->ctx, &id, sizeof id, err) ||
        NRT_NCCL(&c->nccl, c->nccl.CommInitRank(&c->nc, comm->size, id, comm->rank), err)) {
        c->nc = NULL;
        return -1;
    }
    if (plan_buckets(c, bucket_bytes ? bucket_bytes : BUCKET_CAP, err))
        return -1;
    c->net.grads_final = grads_final;
    c->net.grads_ctx = c;
    return 0;
}

static int no_such_device(int device, int count, nrt_error *err)
{
    if (count == 0)
        return nrt_errorf(err, "cuda:%d: there is no CUDA device", device);
    if (count == 1)
        return nrt_errorf(err, "cuda:%d: there is only 1 CUDA device", device);
    return nrt_errorf(err, "cuda:%d: there are only %d CUDA devices", device, count);
}

extern "C" int nrt_cuda_open(const nrt_model *m, const nrt_run_config *cfg, nrt_backend *out,
                             nrt_error *err)
{
    if (!m->cuda || !m->cuda->forward || !m->cuda->backward || !m->cuda->code)
        return nrt_errorf(err, "internal error: model '%s' has no CUDA passes", m->name);
    if (cfg->cap < 1)
        return nrt_errorf(err, "internal error: a batch capacity of %d", cfg->cap);
    if (!nrt_optim_find(cfg->optim.kind))
        return nrt_errorf(err, "internal error: unknown optimizer kind %d", cfg->optim.kind);
    const int count = nrt_cuda_device_count(err);
    if (count < 0)
        return -1;
    if (cfg->device < 0 || cfg->device >= count)
        return no_such_device(cfg->device, count, err);
    Ctx *c = (Ctx *)calloc(1, sizeof *c);
    if (!c)
        return nrt_errorf(err, "out of memory");
    /* cuBLAS first: without it the device is unavailable, not broken (and
     * with several ranks, unavailable to all if to one) */
    const int all = loaded_everywhere(cfg->comm, nrt_cublas_load(&c->cublas, err) == 0,
                                      "cuBLAS", err);
    if (all != 1) {
        nrt_cublas_unload(&c->cublas);
        free(c);
        return all < 0 ? -1 : NRT_UNAVAILABLE;
    }
    nrt_backend b;
    memset(&b, 0, sizeof b);
    if (setup(c, m, cfg, b.name, sizeof b.name, err)) {
        be_close(c);
        return -1;
    }
    if (cfg->comm) {
        int joined = join_ranks(c, cfg->comm, cfg->bucket_bytes, err);
        if (joined) {
            be_close(c);
            return joined;
        }
    }
    b.ctx = c;
    b.buckets = c->bk.n;
    b.set_data = be_set_data;
    b.set_params = be_set_params;
    b.get_params = be_get_params;
    b.set_order = be_set_order;
    b.step = be_step;
    b.take_loss_sum = be_take_loss_sum;
    b.evaluate = be_evaluate;
    b.predict = be_predict;
    b.set_lr = be_set_lr;
    b.get_state = be_get_state;
    b.set_state = be_set_state;
    b.train_batch = be_train_batch;
    b.gradient = be_gradient;
    b.peak_memory = be_peak_memory;
    if (cfg->precision == NRT_FP16) {
        b.get_scaler = be_get_scaler;
        b.set_scaler = be_set_scaler;
    }
    if (cfg->precision != NRT_FP32 && c->major >= 8)
        snprintf(b.products, sizeof b.products,
                 "%s on the tensor cores (cuBLAS's cublasGemmEx, netc's mma.sync), summed in fp32",
                 nrt_precision_name(cfg->precision));
    else if (cfg->precision != NRT_FP32) /* netrt_kernels.cuh's mma: sm_80 on */
        snprintf(b.products, sizeof b.products,
                 "%s on the tensor cores (cuBLAS's cublasGemmEx); convolutions as fp32 of the "
                 "rounded values (mma.m16n8k16 needs compute capability 8.0)",
                 nrt_precision_name(cfg->precision));
    if (c->net.half)
        strcat(b.products, "; values kept in 16 bits");
    b.close = be_close;
    *out = b;
    return 0;
}
