/*
 * fuse.c — fusion and the memory plan.
 *
 * Fusion: an activation right after a linear or conv2d layer is folded into
 * that layer's epilogue (y = act(x W^T + b) in one sweep over y), and its
 * backward into the layer's backward prologue (dy *= act'(y)), where the
 * activation's derivative is a function of its output alone (Act.needs:
 * relu, tanh, elu, ...; gelu, silu and softplus, which need x, run as
 * passes of their own).  The activation node stays in the graph, marked
 * absorbed, so names and indices still match PyTorch's nn.Sequential.
 *
 * Memory plan: every value a backward pass needs stays alive from forward
 * to backward, so each non-aliased value gets its own slice of the
 * activation buffer (per-sample offsets; the runtime multiplies by the
 * batch capacity).  Views (flatten) and absorbed activations alias the
 * value they come from.  What a node keeps for its backward pass (aux)
 * follows: first what both backends use (dropout's mask), then what only
 * the cpu's passes do (conv2d's padded input), so that the GPU allocates
 * the buffer up to cuda_act_size.  Gradients need only two buffers: each backward
 * pass reads d y from one and writes d x to the other, except elementwise
 * ops and views, which work in place.
 */
#include "netc.h"

static void fuse(Program *p)
{
    for (int i = 0; i + 1 < p->nnodes; i++) {
        Node *n = &p->nodes[i], *next = &p->nodes[i + 1];
        if (n->op->takes_epilogue && next->op->act && !(next->op->act->needs & NEEDS_X)) {
            n->fused = next;
            next->absorbed = true;
            p->values[next->out].alias = n->out;
            i++;
        }
    }
}

/* Layouts: a convolution writes channel first ([C, n, H, W]: its matrix
 * product's natural order); pooling, activations and dropout work plane
 * by plane or value by value and keep whatever they get; flatten and
 * linear want [n, ...], so a flatten of a channel-first value becomes a
 * transpose, and every other flatten a mere view. */
static void choose_layouts(Program *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        int rule = n->op->layout;
        p->values[n->out].cn = rule == LAYOUT_CN || (rule == LAYOUT_KEEP && p->values[n->in].cn);
        if (ir_is_view(p, n))
            p->values[n->out].alias = n->in;
    }
}

/* Elementwise ops and views can write d x over d y. */
static bool in_place(const Program *p, const Node *n)
{
    return ir_is_view(p, n) || n->op->act || n->op->elementwise;
}

void fuse_and_plan(Program *p)
{
    fuse(p);
    choose_layouts(p);

    int64_t off = 0, ioff = 0;
    for (int v = 1; v < p->nvalues; v++) {
        IrValue *val = &p->values[v];
        val->offset = -1;
        if (val->alias < 0) {
            val->offset = off;
            off += val->size;
        }
    }
    for (int cpu_only = 0; cpu_only < 2; cpu_only++) {
        if (cpu_only)
            p->cuda_act_size = off;
        for (int i = 0; i < p->nnodes; i++) {
            Node *n = &p->nodes[i];
            if (n->op->aux_cpu_only == cpu_only) {
                n->aux_offset = off;
                off += n->aux_size;
            }
        }
    }
    for (int i = 0; i < p->nnodes; i++) {
        Node *n = &p->nodes[i];
        n->iaux_offset = ioff;
        ioff += n->iaux_size;
        if (n->scratch > p->scratch_size)
            p->scratch_size = n->scratch;
    }
    p->act_size = off;
    p->iact_size = ioff;

    /* gradients, walking backward from the loss */
    p->values[p->nvalues - 1].grad_buf = 0;
    for (int k = 0; k < p->nbwd; k++) {
        const Node *n = &p->nodes[p->bwd[k]];
        int b = p->values[n->out].grad_buf;
        p->values[n->in].grad_buf = n->absorbed || in_place(p, n) ? b : 1 - b;
        if (p->values[n->out].size > p->grad_size)
            p->grad_size = p->values[n->out].size;
    }
}
