/*
 * emit_ir.c — the graph IR as text (--emit=ir) and as graphviz (--emit=dot).
 *
 * What the C and CUDA emitters are given, made readable: the values with
 * their shapes and layouts, the forward passes in order, the backward
 * passes in theirs, the fusion groups (one generated function each way per
 * group) and the memory plan — where each value, gradient and saved
 * tensor lives and which of them share memory.  Sizes are per sample,
 * as everywhere in the IR; the runtime multiplies them by the batch.
 *
 * Both outputs depend on nothing but the model, like the code emitters.
 */
#include "netc.h"

#include <string.h>

/* The cpu's plan (fuse.c): where each value, working copy and saved
 * tensor lies in an fp32 run (plan 0) or one keeping its values in 16
 * bits (1). */
static void emit_cpu_plan(Emit *e, int plan)
{
    const Program *p = e->p;
    for (int v = 1; v < p->nvalues; v++) {
        const IrValue *val = &p->values[v];
        const char *name = arena_printf(e->arena, "%%%d", v);
        const int64_t off = val->cpu_offset[plan];
        const bool half = plan && val->half;
        if (val->alias >= 0)
            emitf(e, "    %-18s shares %%%d's memory (%s)", name, ir_root(p, v),
                  p->nodes[v - 1].absorbed ? "fused" : "a view");
        else if (off < 0)
            emitf(e, "    %-18s none: read by the next pass alone, in forward's working copies", name);
        else
            emitf(e, "    %-18s [%lld, %lld)%s", name, (long long)off,
                  (long long)(off + ir_floats(val->size, half)), half ? " 16 bits" : "");
    }
    static const char *const work[3] = {"backward's x", "backward's y", "a named value"};
    for (int k = 0; k < 3 && plan; k++)
        if (p->half_work[k] >= 0)
            emitf(e, "    %-18s [%lld, %lld)", work[k], (long long)p->half_work[k],
                  (long long)(p->half_work[k] + p->half_work_size[k]));
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        const bool half = plan && n->aux_half;
        if (n->aux_size)
            emitf(e, "    %-18s [%lld, %lld)%s%s", arena_printf(e->arena, "layer %d %s", n->index, n->op->aux_name),
                  (long long)n->aux_cpu_offset[plan],
                  (long long)(n->aux_cpu_offset[plan] + ir_floats(n->aux_size, half)),
                  n->op->aux_cpu_only ? " cpu only" : "", half ? ", 16 bits (made in backward's x)" : "");
    }
}

/* The fusion group a node belongs to: g0, g1, …, or -1 for a view. */
static int group_of(const Program *p, const Node *n)
{
    int g = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *m = &p->nodes[i];
        if (m == n || (m->fused == n))
            return ir_emits_passes(p, m) ? g : -1;
        if (ir_emits_passes(p, m))
            g++;
    }
    return -1;
}

static const char *value_name(Emit *e, int v)
{
    const IrValue *val = &e->p->values[v];
    return arena_printf(e->arena, "%%%d %s%s%s", v, shape_str(e->arena, &val->shape),
                        val->cn ? " cn" : "", val->lowp ? " lowp" : "");
}

static void emit_values(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "input");
    emitf(e, "  %-28s %s, the batch as loaded: [n, ...]", value_name(e, 0),
          p->input_name ? p->input_name : "input");
    emit_blank(e);
    emitf(e, "forward");
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        int g = group_of(p, n);
        const char *where = g < 0 ? "a view: no pass"
                            : n->absorbed ? arena_printf(e->arena, "g%d, in its epilogue", g)
                                          : arena_printf(e->arena, "g%d", g);
        const char *what = n->op->is_view && g >= 0 ? "; a transpose from channel first"
                           : n->sunk ? arena_printf(e->arena, "; run after the max pool, layer %d "
                                                    "(reorder.c)", n[-1].index)
                                     : "";
        emitf(e, "  %-28s = %s %%%d%s", value_name(e, n->out), source_line(p, n->stmt), n->in,
              n->in2 >= 0 ? arena_printf(e->arena, ", %%%d", n->in2) : "");
        emitf(e, "  %-28s   layer %d, line %d, %s%s", "", n->index, n->stmt->loc.first_line, where,
              what);
        for (int k = 0; k < n->nparams; k++) {
            const Param *prm = &p->params[n->param0 + k];
            emitf(e, "  %-28s   param %s [%s]", "", prm->name,
                  dims_list(e->arena, prm->rank, prm->dim));
        }
    }
    int last = p->nvalues - 1;
    emitf(e, "  %-28s = %s(%%%d, %s)", "loss", p->loss->sig.name, last,
          p->target_kind == NRT_TARGET_CLASS ? "label" : "target");
    emitf(e, "  %-28s   line %d; %s", "", p->loss_stmt->loc.first_line, p->loss->grad);
    emit_blank(e);
}

static void emit_backward(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "backward  (in this order; d%%0 only when asked for, as by gradient checks)");
    for (int k = 0; k < p->nbwd; k++) {
        const Node *n = &p->nodes[p->bwd[k]];
        if (!ir_emits_passes(p, n))
            continue;
        int out = last_visible(n)->out;
        char grads[256] = "";
        size_t len = 0;
        for (int j = 0; j < n->nparams; j++)
            len += (size_t)snprintf(grads + len, sizeof grads - len, ", d%s",
                                    p->params[n->param0 + j].name);
        const char *through = n->fused ? arena_printf(e->arena, " through %s %d", n->fused->op->sig.name,
                                                      n->fused->index)
                                       : "";
        emitf(e, "  g%-3d %-12s d%%%d%s -> d%%%d%s", group_of(p, n),
              arena_printf(e->arena, "%s %d", n->op->sig.name, n->index), out, through, n->in, grads);
    }
    emit_blank(e);
}

static void emit_groups(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "fusion groups  (each is one forward and one backward function)");
    int g = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (!ir_emits_passes(p, n))
            continue;
        const char *members = n->fused ? arena_printf(e->arena, "%s %d + %s %d", n->op->sig.name, n->index,
                                                      n->fused->op->sig.name, n->fused->index)
                                       : arena_printf(e->arena, "%s %d", n->op->sig.name, n->index);
        emitf(e, "  g%-3d %-24s %s, %s", g++, members, pass_name(e, n, "fwd"), pass_name(e, n, "bwd"));
    }
    emit_blank(e);
}

static void emit_plan(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "memory plan  (floats a sample unless said)");
    emitf(e, "  parameters   %zu floats in one buffer; their gradients and the optimizer's",
          p->param_count);
    emitf(e, "               state are buffers of the same layout");
    for (int i = 0; i < p->nparams; i++)
        emitf(e, "    %-18s [%zu, %zu)", p->params[i].name, p->params[i].offset,
              p->params[i].offset + p->params[i].size);
    if (p->nbuffers)
        emitf(e, "  buffers      %zu bytes in an area of their own (not parameters)",
              p->buffer_bytes);
    for (int i = 0; i < p->nbuffers; i++) {
        const Buffer *b = &p->buffers[i];
        emitf(e, "    %-18s bytes [%zu, %zu) %s", b->name, b->offset,
              b->offset + b->size * (b->dtype == NRT_I64 ? 8 : 4), b->dtype == NRT_I64 ? "int64" : "float32");
    }
    emitf(e, "  activations  %lld on the cpu (on a GPU %lld: every value its own, no cpu-only",
          (long long)p->act_size, (long long)p->cuda_act_size);
    emitf(e, "               saved tensors); forward's working copies are gbuf[0] and gbuf[1]");
    emit_cpu_plan(e, 0);
    if (p->half_act_size) {
        const bool smaller = p->half_act_size < p->act_size;
        emitf(e, "  in 16 bits   %lld where a bf16 or fp16 run on the cpu keeps its values so",
              (long long)p->half_act_size);
        emitf(e, "               (NETRT_ACT_BITS; auto does %s: %s than %lld)", smaller ? "so" : "not",
              smaller ? "less" : "no less", (long long)p->act_size);
        emit_cpu_plan(e, 1);
    }
    if (p->cuda_half_act_size) {
        const bool smaller = p->cuda_half_act_size < p->cuda_act_size;
        emitf(e, "  GPU 16 bits  %lld where a bf16 or fp16 run on a GPU keeps its values so (auto",
              (long long)p->cuda_half_act_size);
        emitf(e, "               does %s: %s than %lld); every value its own, backward's working",
              smaller ? "so" : "not", smaller ? "less" : "no less", (long long)p->cuda_act_size);
        emitf(e, "               copies of x, y and a named value at %lld, %lld, %lld (-1: none)",
              (long long)p->cuda_half_work[0], (long long)p->cuda_half_work[1],
              (long long)p->cuda_half_work[2]);
    }
    emitf(e, "  int32        %lld", (long long)p->iact_size);
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (n->iaux_size)
            emitf(e, "    %-18s [%lld, %lld)", arena_printf(e->arena, "layer %d arg", n->index),
                  (long long)n->iaux_offset, (long long)(n->iaux_offset + n->iaux_size));
    }
    if (p->grad_buffers > 2) {
        emitf(e, "  gradients    %d buffers of %lld; a value read twice keeps its own while the",
              p->grad_buffers, (long long)p->grad_size);
        emitf(e, "               layers between use the others; activations, views, dropout and add");
        emitf(e, "               write d x over d y");
    } else {
        emitf(e, "  gradients    2 buffers of %lld, used in turn; activations, views and",
              (long long)p->grad_size);
        emitf(e, "               dropout write d x over d y");
    }
    for (int v = p->nvalues - 1; v >= 1; v--)
        emitf(e, "    %-18s gbuf[%d]", arena_printf(e->arena, "d%%%d", v), p->values[v].grad_buf);
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (n->dx_buf >= 0)
            emitf(e, "    %-18s layer %d's part of d%%%d in gbuf[%d], then added", "", n->index,
                  n->in, n->dx_buf);
    }
    emitf(e, "    %-18s net->dinput, when asked for", "d%0");
    emitf(e, "  scratch      %lld, reused by every layer's pass", (long long)p->scratch_size);
}

void emit_ir(FILE *out, const Program *p, const EmitOptions *o, Arena *a)
{
    Emit e = {.out = out, .p = p, .arena = a, .opt = o};
    emitf(&e, "; netc %s: the IR of model %s, from %s", NETC_VERSION, p->name, o->source);
    emitf(&e, "; %%N is a value and d%%N its gradient; shapes and sizes are per sample;");
    emitf(&e, "; cn: laid out channel first, [C, n, H, W]");
    emitf(&e, "; lowp: bf16 in a bf16 run (--precision bf16%s)",
          p->precision == NRT_BF16 ? ", the model's" : "");
    emit_blank(&e);
    emit_values(&e);
    emit_backward(&e);
    emit_groups(&e);
    emit_plan(&e);
}

/* A graphviz string: quotes and backslashes escaped, newlines as \n. */
static const char *dot_string(Arena *a, const char *s)
{
    size_t n = strlen(s);
    char *out = arena_alloc(a, 2 * n + 3), *o = out;
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\' || *s == '\n')
            *o++ = '\\';
        *o++ = *s == '\n' ? 'n' : *s;
    }
    *o++ = '"';
    return out;
}

void emit_dot(FILE *out, const Program *p, const EmitOptions *o, Arena *a)
{
    Emit e = {.out = out, .p = p, .arena = a, .opt = o};
    emitf(&e, "// netc %s: model %s, from %s (render: dot -Tsvg)", NETC_VERSION, p->name, o->source);
    emitf(&e, "digraph %s {", dot_string(a, p->name));
    e.indent++;
    emitf(&e, "rankdir=TB;");
    emitf(&e, "node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=11];");
    emitf(&e, "edge [fontname=\"Helvetica\", fontsize=9];");
    emitf(&e, "v0 [shape=oval, label=%s];",
          dot_string(a, arena_printf(a, "%s %s", p->input_name ? p->input_name : "input",
                                     shape_str(a, &p->input))));
    int g = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        bool grouped = ir_emits_passes(p, n) && n->fused;
        if (grouped) {
            emitf(&e, "subgraph cluster_g%d {", g);
            e.indent++;
            emitf(&e, "label=%s; style=dashed; fontname=\"Helvetica\"; fontsize=9;",
                  dot_string(a, arena_printf(a, "g%d: %s", g, pass_name(&e, n, "fwd"))));
        }
        for (const Node *m = n; m; m = m == n && grouped ? n->fused : NULL) {
            const char *label = arena_printf(a, "%d: %s\nline %d", m->index, source_line(p, m->stmt),
                                             m->stmt->loc.first_line);
            emitf(&e, "v%d [label=%s%s];", m->out, dot_string(a, label),
                  ir_is_view(p, m) ? ", style=\"rounded,dotted\"" : "");
        }
        if (grouped) {
            e.indent--;
            emitf(&e, "}");
        }
        if (ir_emits_passes(p, n))
            g++;
        if (n->fused)
            i++;
    }
    int last = p->nvalues - 1;
    emitf(&e, "loss [shape=oval, label=%s];",
          dot_string(a, arena_printf(a, "loss: %s\nline %d", p->loss->sig.name, p->loss_stmt->loc.first_line)));
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        emitf(&e, "v%d -> v%d [label=%s];", n->in, n->out, dot_string(a, value_name(&e, n->in)));
        if (n->in2 >= 0)
            emitf(&e, "v%d -> v%d [label=%s, style=dashed];", n->in2, n->out,
                  dot_string(a, value_name(&e, n->in2)));
    }
    emitf(&e, "v%d -> loss [label=%s];", last, dot_string(a, value_name(&e, last)));
    e.indent--;
    emitf(&e, "}");
}
