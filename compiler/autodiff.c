/*
 * autodiff.c — reverse-mode differentiation, done at compile time.
 *
 * The loss is the last node of every model, so the backward graph visits
 * the layers in reverse: each layer's backward pass takes d loss / d y of
 * its output and produces d loss / d W, d loss / d b of its parameters and
 * d loss / d x of its input, which is the d loss / d y of the layer before.
 * The gradient of the model's input is produced only when asked for at run
 * time (gradient checks), so the first layer skips its most expensive step.
 *
 * What this pass decides is the order; which buffer holds which gradient
 * is decided by the memory plan (fuse.c), after fusion has merged nodes.
 */
#include "netc.h"

void autodiff(Program *p)
{
    p->bwd = arena_alloc(p->arena, sizeof *p->bwd * (size_t)(p->nnodes + 1));
    p->nbwd = 0;
    for (int i = p->nnodes - 1; i >= 0; i--)
        p->bwd[p->nbwd++] = i;
}
