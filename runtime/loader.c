/*
 * loader.c — training batches made on worker threads while the step runs.
 *
 * A training set with random augmentation (random_horizontal_flip) cannot
 * be gathered as it lies in memory: every epoch sees other images.  The
 * loader's workers assemble the epoch's batches ahead of the training
 * loop, as PyTorch's DataLoader workers do: batch j goes to slot j % S of a
 * ring of S = workers + 2 buffers; a worker takes the next batch as soon as
 * its slot is free (the loop is done with the batch S before it), so up to
 * S - 1 batches wait ready while the step runs.
 *
 * Batches are functions of (order, epoch, position) alone: the flips come
 * from philox.h's nrt_flip, never from a generator's running state, so the
 * number of workers and the order they finish in change nothing.
 *
 * The dataset may still be being decoded (nrt_images_open, the first
 * epoch): a worker then waits for each sample before it copies it, and a
 * sample that could not be decoded fails its batch.
 *
 * One mutex and one condition variable guard the ring; the copying is done
 * outside the lock.  A new epoch waits for the batches being filled to be
 * done before it reuses their slots.
 */
#include "netrt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct Slot {
    float *x, *y;
    int32_t *label;
    uint32_t *idx;   /* the batch's samples */
    int n;
    int total;       /* the whole batch's samples, on all ranks */
    int failed;      /* an image could not be decoded: why in err */
    nrt_error err;
    uint64_t gen;    /* the epoch generation it was filled for */
    size_t batch;    /* and the batch: ready when both match */
    int ready;
} Slot;

struct nrt_loader {
    const nrt_dataset *d;
    nrt_images *images; /* decoding d, or NULL: decoded */
    int c, h, w;
    uint64_t cut, key;
    int cap;
    int nslots;
    Slot *slot;
    int nthreads;
    pthread_t *thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the epoch under way, under mu */
    uint64_t gen;
    int active;
    nrt_order order;
    uint64_t epoch;
    size_t start, nbatches;
    int batch;
    int rank, ranks; /* the share of each batch made (nrt_share) */
    size_t claimed;  /* batches handed to workers */
    size_t taken;    /* batches handed to the training loop */
    int busy;        /* workers filling a slot */
    int quit;
};

/* Batch j of the epoch (the rank's share of it) into s: its samples'
 * features, flipped left to right when the coin says so, and their
 * targets; each waited for while it is being decoded. */
static void fill(const nrt_loader *l, const nrt_order *order, uint64_t epoch, size_t start,
                 int batch, size_t j, Slot *s)
{
    const nrt_dataset *d = l->d;
    const size_t whole = start + j * (size_t)batch;
    const size_t total = d->n - whole < (size_t)batch ? d->n - whole : (size_t)batch;
    size_t first;
    const size_t n = nrt_share(l->rank, l->ranks, whole, total, &first);
    const size_t w = (size_t)l->w, rows = (size_t)l->c * (size_t)l->h;
    s->failed = 0;
    s->total = (int)total;
    nrt_order_fill(order, first, n, s->idx);
    for (size_t k = 0; k < n; k++) {
        const uint32_t i = s->idx[k];
        if (l->images && nrt_images_wait(l->images, i, &s->err)) {
            s->failed = 1;
            break;
        }
        const float *src = d->x + (size_t)i * d->dim;
        float *dst = s->x + k * d->dim;
        if (l->cut && nrt_flip(l->key, epoch, i, l->cut)) {
            for (size_t r = 0; r < rows; r++)
                for (size_t x = 0; x < w; x++)
                    dst[r * w + x] = src[r * w + w - 1 - x];
        } else {
            memcpy(dst, src, sizeof(float) * d->dim);
        }
        if (d->label)
            s->label[k] = d->label[i];
        if (d->y)
            memcpy(s->y + k * d->ydim, d->y + (size_t)i * d->ydim, sizeof(float) * d->ydim);
    }
    s->n = (int)n;
}

static void *work(void *arg)
{
    nrt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && !(l->active && l->claimed < l->nbatches &&
                             l->claimed < l->taken + (size_t)l->nslots - 1))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit)
            break;
        const size_t j = l->claimed++;
        const nrt_order order = l->order;
        const uint64_t gen = l->gen, epoch = l->epoch;
        const size_t start = l->start;
        const int batch = l->batch;
        Slot *s = &l->slot[j % (size_t)l->nslots];
        s->ready = 0;
        l->busy++;
        pthread_mutex_unlock(&l->mu);
        fill(l, &order, epoch, start, batch, j, s);
        pthread_mutex_lock(&l->mu);
        l->busy--;
        s->gen = gen;
        s->batch = j;
        s->ready = 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int nrt_loader_open(const nrt_dataset *d, nrt_images *images, int c, int h, int w,
                    double flip_p, uint64_t key, int cap, int workers, nrt_loader **out,
                    nrt_error *err)
{
    *out = NULL;
    if ((size_t)c * (size_t)h * (size_t)w != d->dim || cap < 1)
        return nrt_errorf(err, "internal error: a loader of [%d, %d, %d] images over samples "
                          "of %zu floats", c, h, w, d->dim);
    if (d->n > UINT32_MAX)
        return nrt_errorf(err, "%zu samples: more than an epoch's order can hold", d->n);
    nrt_loader *l = calloc(1, sizeof *l);
    if (!l)
        return nrt_errorf(err, "out of memory");
    *l = (nrt_loader){.d = d, .images = images, .c = c, .h = h, .w = w, .cut = nrt_dropout_cut(flip_p),
                      .key = key, .cap = cap, .rank = 0, .ranks = 1};
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    const int nthreads = workers > 0 ? workers : 1;
    l->nslots = nthreads + 2;
    l->slot = calloc((size_t)l->nslots, sizeof *l->slot);
    l->thread = calloc((size_t)nthreads, sizeof *l->thread);
    int ok = l->slot && l->thread;
    for (int i = 0; ok && i < l->nslots; i++) {
        Slot *s = &l->slot[i];
        s->x = malloc(sizeof(float) * d->dim * (size_t)cap);
        s->label = d->label ? malloc(sizeof(int32_t) * (size_t)cap) : NULL;
        s->y = d->y ? malloc(sizeof(float) * d->ydim * (size_t)cap + 1) : NULL;
        s->idx = malloc(sizeof(uint32_t) * (size_t)cap);
        ok = s->x && (!d->label || s->label) && (!d->y || s->y) && s->idx;
    }
    while (ok && l->nthreads < nthreads)
        if (pthread_create(&l->thread[l->nthreads], NULL, work, l) == 0)
            l->nthreads++;
        else
            ok = 0;
    if (!ok) {
        nrt_loader_close(l); /* joins the threads started */
        return nrt_errorf(err, "cannot start the loader's %d threads: out of memory or "
                          "threads", workers);
    }
    *out = l;
    return 0;
}

void nrt_loader_share(nrt_loader *l, int rank, int ranks)
{
    pthread_mutex_lock(&l->mu);
    l->rank = rank;
    l->ranks = ranks;
    pthread_mutex_unlock(&l->mu);
}

void nrt_loader_epoch(nrt_loader *l, const nrt_order *order, uint64_t epoch, size_t start,
                      int batch)
{
    pthread_mutex_lock(&l->mu);
    l->active = 0; /* no new batch is claimed; those being filled finish */
    while (l->busy > 0)
        pthread_cond_wait(&l->cv, &l->mu);
    l->gen++;
    l->order = *order;
    l->epoch = epoch;
    l->start = start < l->d->n ? start : l->d->n;
    l->batch = batch;
    l->nbatches = (l->d->n - l->start + (size_t)batch - 1) / (size_t)batch;
    l->claimed = l->taken = 0;
    l->active = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int nrt_loader_next(nrt_loader *l, nrt_batch *b, nrt_error *err)
{
    pthread_mutex_lock(&l->mu);
    if (!l->active || l->taken >= l->nbatches) {
        pthread_mutex_unlock(&l->mu);
        return nrt_errorf(err, "internal error: a batch past the end of the epoch");
    }
    const size_t j = l->taken++; /* frees the slot of batch j - 1 */
    pthread_cond_broadcast(&l->cv);
    Slot *s = &l->slot[j % (size_t)l->nslots];
    while (!(s->ready && s->gen == l->gen && s->batch == j))
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    if (s->failed) {
        *err = s->err;
        return -1;
    }
    *b = (nrt_batch){s->n, s->x, s->label, s->y, s->total};
    return 0;
}

void nrt_loader_close(nrt_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++)
        pthread_join(l->thread[i], NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    for (int i = 0; l->slot && i < l->nslots; i++) {
        free(l->slot[i].x);
        free(l->slot[i].label);
        free(l->slot[i].y);
        free(l->slot[i].idx);
    }
    free(l->slot);
    free(l->thread);
    free(l);
}
