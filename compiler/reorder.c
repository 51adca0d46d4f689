/*
 * reorder.c — a monotone activation followed by a max pool runs after it.
 *
 * max(relu(a), relu(b)) is relu(max(a, b)), bit for bit: relu is a
 * comparison and a select, and a max pool only picks values.  So
 * `conv2d; relu; maxpool2d(2)` computes, as `conv2d; maxpool2d(2); relu`,
 * the same outputs, and the same gradients: the pool's gradient goes to its
 * window's largest value in either order (both orders pick the same one
 * wherever it is above 0), and relu's derivative there, read from its
 * output, is the same 0 or 1 (where the largest is 0 or below, every
 * position of the window gets 0 either way).  The second order runs relu
 * and its derivative on the pooled values, a quarter of them for a 2x2
 * pool, and keeps the pooled output rather than the convolution's for
 * relu's backward: cnn101's first layer no longer keeps or sweeps its
 * 32 x 30 x 30 values a sample a second time.  (A NaN in a window is
 * where the orders could differ; the loss is NaN then either way.)
 *
 * The two nodes change places in the list, keeping their names and
 * indices (nn.Sequential's, which the checkpoints' names come from); the
 * value between them becomes the pooled pre-activation.  Only where
 * nothing else reads that value (an add by name, a block's output) and
 * the pool reads it alone.  --check's summary still lists the layers as
 * written; the generated code says where a layer was moved.
 */
#include "netc.h"

/* Whether value v is a block's (a `use`'s) input or output, which its
 * names may reach. */
static bool use_boundary(const Program *p, int v)
{
    for (int u = 0; u < p->model->nuses; u++)
        if (p->use_in[u] == v || p->use_out[u] == v)
            return true;
    return false;
}

void sink_activations(Program *p)
{
    const int *readers = ir_readers(p);
    for (int i = 0; i + 1 < p->nnodes; i++) {
        Node *a = &p->nodes[i], *b = &p->nodes[i + 1];
        if (!a->op->act || !a->op->act->monotone || !b->op->picks_max || b->in != a->out ||
            a->in2 >= 0 || b->in2 >= 0 || readers[a->out] != 1 || use_boundary(p, a->out))
            continue;
        /* node i writes value i + 1: the pool now writes it, pooled */
        const int x = a->in, mid = a->out, y = b->out;
        const Node act = *a;
        *a = *b;
        a->in = x, a->out = mid;
        *b = act;
        b->in = mid, b->out = y, b->sunk = true;
        p->values[mid].shape = p->values[y].shape;
        p->values[mid].size = p->values[y].size;
        i++;
    }
}
