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

int ir_add_param(Program *p, Node *n, const char *suffix, int rank,
                 const int64_t *dim, int fan_in, int fan_out, bool is_bias)
{
    if (p->nparams == p->params_cap) { /* an rnn declares 4 a layer */
        int cap = p->params_cap ? 2 * p->params_cap : 16;
        Param *grown = arena_alloc(p->arena, sizeof *grown * (size_t)cap);
        if (p->nparams)
            memcpy(grown, p->params, sizeof *grown * (size_t)p->nparams);
        p->params = grown;
        p->params_cap = cap;
    }
    Param *prm = &p->params[p->nparams];
    prm->name = arena_printf(p->arena, "%s.%s", n->name, suffix);
    prm->rank = rank;
    prm->size = 1;
    for (int i = 0; i < rank; i++) {
        prm->dim[i] = dim[i];
        prm->size *= (size_t)dim[i];
    }
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
    Buffer *b = &p->buffers[p->nbuffers];
    b->name = arena_printf(p->arena, "%s.%s", n->name, suffix);
    b->local = suffix;
    b->dtype = dtype;
    b->rank = rank;
    b->size = 1;
    for (int i = 0; i < rank; i++) {
        b->dim[i] = dim[i];
        b->size *= (size_t)dim[i];
    }
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

bool ir_is_view(const Program *p, const Node *n)
{
    return n->op->is_view && !p->values[n->in].cn;
}
