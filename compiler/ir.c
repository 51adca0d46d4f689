/*
 * ir.c — the graph IR: values, nodes and the flat parameter table.
 *
 * The IR of a model is a list of nodes in execution order, each reading one
 * value and writing the next (values[0] is the input, node i writes
 * values[i + 1]).  Parameters of all nodes live in one flat buffer, in the
 * order of the layers, weight before bias — the order of PyTorch's
 * state_dict — so the optimizer is one loop over one buffer and a future
 * data-parallel backend reduces one buffer.  State that is not a
 * parameter (a batchnorm's running statistics and batch count) lies in a
 * flat area of bytes of its own, the buffers, which the optimizer never
 * sees.  Shapes here are per sample;
 * the batch dimension is implicit everywhere.
 */
#include "netc.h"

#include <string.h>

int64_t shape_size(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

const char *dims_list(Arena *a, int rank, const int64_t *d)
{
    char buf[128];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && len < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%lld", i ? ", " : "",
                                (long long)d[i]);
    return arena_strdup(a, buf);
}

const char *shape_str(Arena *a, const Shape *s)
{
    return arena_printf(a, "[%s]", dims_list(a, s->rank, s->d));
}

bool ir_emits_passes(const Program *p, const Node *n)
{
    return !n->absorbed && !ir_is_view(p, n);
}

bool ir_bwd_reads_x(const Node *n, bool cuda)
{
    if (n->op->x_in_aux)
        return cuda;
    return n->op->takes_epilogue || n->nparams || n->nbufs || n->op->bwd_reads_x ||
           (n->op->act && n->op->act->needs & NEEDS_X);
}

int64_t ir_floats(int64_t size, bool half)
{
    return half ? (size + 1) / 2 : size;
}

bool ir_bwd_reads_y(const Node *n)
{
    return (n->op->act && n->op->act->needs & NEEDS_Y) || n->fused;
}

bool ir_bwd_reads_16(const Node *n, bool y)
{
    return y ? ir_bwd_reads_y(n) : n->op->act && n->op->act->needs & NEEDS_X;
}

/* v with room for one more of its n elements of elem bytes: itself, or a
 * copy twice as large (*cap grows) in the arena. */
static void *room_for_one(Arena *a, void *v, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return v;
    *cap = *cap ? 2 * *cap : 16;
    void *grown = arena_alloc(a, elem * (size_t)*cap);
    if (n)
        memcpy(grown, v, elem * (size_t)n);
    return grown;
}

/* dim[0..rank) into to; returns the number of elements. */
static size_t copy_dims(int64_t *to, const int64_t *dim, int rank)
{
    size_t size = 1;
    for (int i = 0; i < rank; i++) {
        to[i] = dim[i];
        size *= (size_t)dim[i];
    }
    return size;
}

int ir_add_param(Program *p, Node *n, const char *suffix, int rank,
                 const int64_t *dim, int fan_in, int fan_out, bool is_bias)
{
    /* as many as the layers declare: an rnn 4 a layer */
    p->params = room_for_one(p->arena, p->params, p->nparams, &p->params_cap, sizeof *p->params);
    Param *prm = &p->params[p->nparams];
    prm->name = arena_printf(p->arena, "%s.%s", n->name, suffix);
    prm->rank = rank;
    prm->size = copy_dims(prm->dim, dim, rank);
    prm->offset = p->param_count;
    prm->fan_in = fan_in;
    prm->fan_out = fan_out;
    prm->is_bias = is_bias;
    p->param_count += prm->size;
    if (n->nparams == 0)
        n->param0 = p->nparams;
    n->nparams++;
    return p->nparams++;
}

int ir_add_buffer(Program *p, Node *n, const char *suffix, int dtype, int rank,
                  const int64_t *dim, float init)
{
    p->buffers =
        room_for_one(p->arena, p->buffers, p->nbuffers, &p->buffers_cap, sizeof *p->buffers);
    Buffer *b = &p->buffers[p->nbuffers];
    b->name = arena_printf(p->arena, "%s.%s", n->name, suffix);
    b->local = suffix;
    b->dtype = dtype;
    b->rank = rank;
    b->size = copy_dims(b->dim, dim, rank);
    b->offset = p->buffer_bytes;
    b->init = init;
    b->after = p->nparams;
    size_t bytes = b->size * (dtype == NRT_I64 ? sizeof(int64_t) : sizeof(float));
    p->buffer_bytes += (bytes + 7) / 8 * 8;
    if (n->nbufs == 0)
        n->buf0 = p->nbuffers;
    n->nbufs++;
    return p->nbuffers++;
}

int ir_root(const Program *p, int v)
{
    while (p->values[v].alias >= 0)
        v = p->values[v].alias;
    return v;
}

int *ir_readers(const Program *p)
{
    int *readers = arena_alloc(p->arena, sizeof *readers * (size_t)p->nvalues);
    for (int i = 0; i < p->nnodes; i++) {
        readers[p->nodes[i].in]++;
        if (p->nodes[i].in2 >= 0)
            readers[p->nodes[i].in2]++;
    }
    return readers;
}

bool ir_is_view(const Program *p, const Node *n)
{
    return n->op->is_view && !p->values[n->in].cn;
}
