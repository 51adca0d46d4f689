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
 * Memory plans, per-sample offsets into the activation buffer (the runtime
 * multiplies by the batch capacity); views (flatten) and absorbed
 * activations alias the value they come from.  The GPU's (two, in
 * IrValue.cuda_offset): what a node keeps for its backward pass (aux) and
 * both backends use (dropout's mask), then every value its own slice, up
 * to cuda_act_size; in a bf16 or fp16 run the half values in 16 bits
 * (below), up to cuda_half_act_size.  The cpu's (two, in
 * IrValue.cpu_offset): only a value that a later pass reads (a backward
 * pass, a forward pass but the next, an add by name, the loss) gets memory
 * of its own; one that no pass reads but the next lives in forward's
 * working copies, the gradient buffers, free until the loss; then the aux,
 * the cpu-only too (conv2d's padded input, which its backward reads instead
 * of x).  In the fp32 plan the kept values take 4 bytes and the passes read
 * them where they lie.  In the 16-bit plan, a bf16 or fp16 run's, each
 * low-precision value but the output is in 16 bits (IrValue.half): the
 * passes, the same, run on fp32 working copies, emit_c.c's forward_half and
 * backward_half copying the kept values to and from their 16 bits;
 * backward's activation derivatives read the 16 bits themselves, and what
 * the other passes read is loaded into working copies of backward's own,
 * one for x (a product's, a batchnorm's input), one for y (none reads it
 * today), one for a value read by name, each as large as the largest it
 * takes.  The padded inputs are made in x's working copy and kept in 16
 * bits too, those that save more than they grow it by (choose_aux_half).
 * Where that plan takes no less memory than fp32's, the runtime keeps to
 * fp32's.
 *
 * Gradients: walking backward, each value's gradient takes a buffer when
 * the backward pass of its last reader writes it, and gives it back when
 * its producer's backward pass has read it; elementwise ops and views
 * write d x over d y, in d y's buffer.  A sequence so uses two buffers in
 * turn.  A value read twice (a layer's output that an add reads again)
 * keeps its buffer while the layers between run backward in the others,
 * and the second part of its gradient is written elsewhere, then added
 * (Node.dx_buf, Node.skip_acc).
 */
#include "netc.h"

#include <string.h>

/* (a layer's output read again, by an add, is kept as it is: no
 * activation folds into it) */
static void fuse(Program *p, const int *readers)
{
    for (int i = 0; i + 1 < p->nnodes; i++) {
        Node *n = &p->nodes[i], *next = &p->nodes[i + 1];
        if (n->op->takes_epilogue && next->op->act && !(next->op->act->needs & NEEDS_X) &&
            next->in == n->out && readers[n->out] == 1) {
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

/* Which value's gradient each buffer holds (-1: free), and how many
 * buffers have been used. */
typedef struct Holders {
    int value[NRT_GBUF_MAX];
    int used;
} Holders;

enum { PART = -2 }; /* a holder: a part of a gradient, added where it goes */

/* The lowest free buffer, now holding v; -1 (the error said) if none is. */
static int take(Program *p, const Node *n, Holders *h, int v)
{
    for (int b = 0; b < NRT_GBUF_MAX; b++)
        if (h->value[b] == -1) {
            h->value[b] = v;
            if (b + 1 > h->used)
                h->used = b + 1;
            return b;
        }
    diag_error(p->diag, n->stmt->loc, "more than %d gradients alive at once here: too many "
               "branches for this netc", NRT_GBUF_MAX);
    return -1;
}

static void plan_gradients(Program *p)
{
    Holders h = {.used = 2};
    for (int b = 0; b < NRT_GBUF_MAX; b++)
        h.value[b] = -1;
    for (int v = 0; v < p->nvalues; v++)
        p->values[v].grad_buf = -1;
    p->values[p->nvalues - 1].grad_buf = 0;
    h.value[0] = p->nvalues - 1;
    /* the input's gradient (net->dinput, the caller's; any view of the
     * input shares it) has had a part written */
    bool dinput_part = false;
    for (int k = 0; k < p->nbwd; k++) {
        Node *n = &p->nodes[p->bwd[k]];
        const int b = p->values[n->out].grad_buf, u = n->in;
        const bool inplace = n->absorbed || in_place(p, n);
        if (p->values[n->out].size > p->grad_size)
            p->grad_size = p->values[n->out].size;
        n->ds_buf = -1;
        if (n->in2 >= 0 && ir_root(p, n->in2) == 0) { /* add(x) of the input x */
            n->skip_acc = dinput_part;
            dinput_part = true;
            if ((n->ds_buf = take(p, n, &h, PART)) < 0)
                return;
            h.value[n->ds_buf] = -1;
        } else if (n->in2 >= 0) { /* add's d s = d y, before its d x (the pass's order) */
            IrValue *s = &p->values[n->in2];
            n->skip_acc = s->grad_buf >= 0;
            if (!n->skip_acc && (s->grad_buf = take(p, n, &h, n->in2)) < 0)
                return;
        }
        n->dx_buf = -1;
        /* (a view of the input passes its readers' parts on: it adds none) */
        const bool input_view = ir_root(p, n->out) == 0;
        if (ir_root(p, u) == 0 && (!dinput_part || input_view)) {
            /* net->dinput (the number is what --emit=ir shows) */
            p->values[u].grad_buf = inplace ? b : take(p, n, &h, PART);
            if (!inplace && p->values[u].grad_buf >= 0)
                h.value[p->values[u].grad_buf] = -1;
            dinput_part |= !input_view;
        } else if (ir_root(p, u) != 0 && p->values[u].grad_buf < 0) { /* the first part of d u */
            if (inplace) {
                p->values[u].grad_buf = b;
                h.value[b] = u;
            } else if ((p->values[u].grad_buf = take(p, n, &h, u)) < 0)
                return;
        } else if (!ir_emits_passes(p, n)) {
            diag_error(p->diag, n->stmt->loc, "a value read again after %s is not supported yet",
                       n->op->sig.name);
            return;
        } else { /* a later part: written in d y's buffer or another, then added */
            n->dx_buf = inplace ? b : take(p, n, &h, PART);
            if (n->dx_buf < 0)
                return;
            h.value[n->dx_buf] = -1;
        }
        if (h.value[b] == n->out)
            h.value[b] = -1;
    }
    p->grad_buffers = h.used;
}

/* Places the aux of the nodes whose op keeps it for the cpu alone
 * (cpu_only) or not from off on: in the GPU's plan (plan -1) or the cpu's
 * plan (0 or 1; in 1 an aux_half one in 16 bits). */
static int64_t place_aux(Program *p, int64_t off, bool cpu_only, int plan)
{
    for (int i = 0; i < p->nnodes; i++) {
        Node *n = &p->nodes[i];
        if (n->op->aux_cpu_only == cpu_only) {
            *(plan < 0 ? &n->aux_offset : &n->aux_cpu_offset[plan]) = off;
            off += ir_floats(n->aux_size, plan == 1 && n->aux_half);
        }
    }
    return off;
}

/* Which values (roots) the cpu reads after the pass right after their
 * producer's, so must keep (kept): those a backward pass reads, those
 * read by name, those a later pass reads, and the output (the loss's). */
static void mark_kept(const Program *p, bool *kept)
{
    int prev = -1; /* the last node with passes */
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (!ir_emits_passes(p, n))
            continue;
        const int x = ir_root(p, n->in), y = ir_root(p, (n->fused ? n->fused : n)->out);
        kept[x] |= ir_bwd_reads_x(n, false) || prev != x - 1;
        kept[y] |= ir_bwd_reads_y(n);
        if (n->in2 >= 0)
            kept[ir_root(p, n->in2)] = true;
        prev = i;
    }
    kept[ir_root(p, p->nvalues - 1)] = true;
}

/* A 16-bit plan's working copies for backward, from off on (where[k]; -1:
 * none), each as large as the largest value it takes (size[k], unless
 * NULL): the x and y (none loads it today) a backward pass reads other
 * than in an activation's derivative (which reads the 16 bits itself) on
 * the cpu or (cuda) the GPU, and a value read by name, of those kept in
 * 16 bits (IrValue.half); on the cpu x's is also where the padded inputs
 * kept in 16 bits are written and read (aux_half).  Returns the end. */
static int64_t place_work(const Program *p, bool cuda, int64_t off, int64_t *where, int64_t *size)
{
    int64_t work[3] = {0, 0, 0};
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (!ir_emits_passes(p, n))
            continue;
        const IrValue *x = &p->values[ir_root(p, n->in)],
                      *y = &p->values[ir_root(p, last_visible(n)->out)],
                      *s = n->in2 >= 0 ? &p->values[ir_root(p, n->in2)] : NULL;
        if (x->half && ir_bwd_reads_x(n, cuda) && !ir_bwd_reads_16(n, false) && x->size > work[0])
            work[0] = x->size;
        if (y->half && ir_bwd_reads_y(n) && !ir_bwd_reads_16(n, true) && y->size > work[1])
            work[1] = y->size;
        if (s && s->half && s->size > work[2])
            work[2] = s->size;
        if (!cuda && n->aux_half && n->aux_size > work[0])
            work[0] = n->aux_size;
    }
    for (int k = 0; k < 3; k++) {
        where[k] = work[k] ? off : -1;
        if (size)
            size[k] = work[k];
        off += work[k];
    }
    return off;
}

/* Which padded inputs (the aux a backward reads instead of x) the cpu's
 * 16-bit plan keeps in 16 bits (Node.aux_half): each is then made in
 * backward's x working copy, which must hold the largest of those kept
 * so; the smallest first, as many as take the plan's memory down the most
 * (cifar10's conv2's, 12800 floats a sample, would cost the working copy
 * more than its half saves, its conv1's and conv3's save 664 floats). */
static bool pads_x(const Node *n)
{
    return n->op->x_in_aux && n->aux_size;
}

static void choose_aux_half(Program *p)
{
    int64_t where[3], work[3];
    for (int i = 0; i < p->nnodes; i++)
        p->nodes[i].aux_half = false;
    place_work(p, false, 0, where, work); /* the x working copy without them */
    int64_t best = 0, bound = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *c = &p->nodes[i];
        if (!pads_x(c))
            continue;
        /* those no larger than c's in 16 bits: their halves saved, less what
         * the working copy grows by */
        int64_t saved = work[0] - (c->aux_size > work[0] ? c->aux_size : work[0]);
        for (int j = 0; j < p->nnodes; j++) {
            const Node *m = &p->nodes[j];
            if (pads_x(m) && m->aux_size <= c->aux_size)
                saved += m->aux_size - ir_floats(m->aux_size, true);
        }
        if (saved > best)
            best = saved, bound = c->aux_size;
    }
    for (int i = 0; i < p->nnodes; i++) {
        Node *n = &p->nodes[i];
        n->aux_half = pads_x(n) && n->aux_size <= bound;
    }
}

/* The GPU's plan: fp32 (0) or 16-bit (1), the cpu's 16-bit plan made
 * (IrValue.half).  The aux its passes keep (not the cpu-only) first, at
 * the same place in both, then every value its own memory, in 16 bits
 * where half; then backward's working copies (place_work). */
static void plan_gpu(Program *p, int plan)
{
    int64_t off = place_aux(p, 0, false, -1);
    for (int v = 1; v < p->nvalues; v++) {
        IrValue *val = &p->values[v];
        val->cuda_offset[plan] = val->alias < 0 ? off : -1;
        if (val->alias < 0)
            off += ir_floats(val->size, plan && val->half);
    }
    if (!plan)
        p->cuda_act_size = off;
    else /* (none where no value is in 16 bits) */
        p->cuda_half_act_size =
            p->half_act_size ? place_work(p, true, off, p->cuda_half_work, NULL) : 0;
}

/* The cpu's plan: fp32 (plan 0) or 16-bit (1). */
static void plan_cpu(Program *p, const bool *kept, int plan)
{
    const int out = ir_root(p, p->nvalues - 1);
    int64_t off = 0;
    bool half = false;
    for (int v = 1; v < p->nvalues; v++) {
        IrValue *val = &p->values[v];
        if (val->alias >= 0)
            continue;
        if (plan) {
            val->half = val->lowp && v != out;
            half |= val->half;
        }
        /* (forward's working copies are gbuf[0] and gbuf[1], as large as
         * the largest value: grad_size) */
        const bool home = kept[v] || val->size > p->grad_size;
        val->cpu_offset[plan] = home ? off : -1;
        off += home ? ir_floats(val->size, plan && val->half) : 0;
    }
    if (plan && !half)
        return;
    if (plan) {
        choose_aux_half(p);
        off = place_work(p, false, off, p->half_work, p->half_work_size);
    }
    off = place_aux(p, place_aux(p, off, false, plan), true, plan);
    *(plan ? &p->half_act_size : &p->act_size) = off;
}

void fuse_and_plan(Program *p)
{
    fuse(p, ir_readers(p));
    choose_layouts(p);

    int64_t ioff = 0;
    for (int i = 0; i < p->nnodes; i++) {
        Node *n = &p->nodes[i];
        n->iaux_offset = ioff;
        ioff += n->iaux_size;
        if (n->scratch > p->scratch_size)
            p->scratch_size = n->scratch;
    }
    p->iact_size = ioff;

    plan_gradients(p);
    const size_t nv = (size_t)p->nvalues;
    bool *kept = arena_alloc(p->arena, sizeof(bool) * nv);
    memset(kept, 0, sizeof(bool) * nv);
    mark_kept(p, kept);
    for (int plan = 0; plan < 2; plan++) {
        plan_cpu(p, kept, plan);
        plan_gpu(p, plan);
    }
}
