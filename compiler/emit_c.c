/*
 * emit_c.c — the C emitter: the graph IR as C a person can read.
 *
 * Each layer becomes two functions, NAME_INDEX_fwd and NAME_INDEX_bwd
 * (conv2d_0_fwd, linear_fc1_bwd), with a comment quoting the model line and
 * the shapes; their bodies come from the op table (ops.c, ops/) with every shape
 * written in as a constant, so only the batch size is left to run time.
 * Then forward() and backward() call them in order, with the buffers of the
 * memory plan, and driver.c adds the model descriptor and main().
 *
 * Output depends on nothing but the model: no dates, no absolute paths, so
 * the same input gives byte-identical output.
 */
#include "netc.h"

#include <stdlib.h>
#include <string.h>

void emitf(Emit *e, const char *fmt, ...)
{
    if (!e->out)
        return;
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    int len = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *text = line;
    if (len >= (int)sizeof line) {
        text = arena_alloc(e->arena, (size_t)len + 1);
        va_start(ap, fmt);
        vsnprintf(text, (size_t)len + 1, fmt, ap);
        va_end(ap);
    }
    /* in a model line's region, each line of code gets its #line; a
     * comment of one line needs none, the next line has its own */
    size_t n = strlen(text);
    bool comment = n >= 4 && !strncmp(text, "/*", 2) && !strcmp(text + n - 2, "*/");
    for (int i = 0; i < e->indent; i++)
        fputs("    ", e->out);
    if (e->model_line > 0 && !comment) {
        fprintf(e->out, "#line %d %s\n", e->model_line, c_string(e->arena, e->opt->source));
        for (int i = 0; i < e->indent; i++)
            fputs("    ", e->out);
        e->line++;
    }
    fputs(text, e->out);
    fputc('\n', e->out);
    e->line++;
}

void emit_blank(Emit *e)
{
    if (!e->out)
        return;
    fputc('\n', e->out);
    e->line++;
}

/* A compiler counts lines after #line from the one that follows it, so
 * every line of a model line's region gets its own: the C of one layer is
 * many lines, and all of them are that layer's line. */
void emit_at(Emit *e, int model_line)
{
    if (!e->out || !e->opt->lines || model_line == e->model_line)
        return;
    e->model_line = model_line;
    if (model_line == 0) {
        /* this directive is line e->line + 1; the next is e->line + 2 */
        const char *name = e->opt->out_name ? e->opt->out_name : "<stdout>";
        fprintf(e->out, "#line %d %s\n", e->line + 2, c_string(e->arena, name));
        e->line++;
    }
}

const char *c_string(Arena *a, const char *s)
{
    if (!s)
        return "NULL";
    size_t n = strlen(s);
    char *out = arena_alloc(a, 4 * n + 3), *o = out;
    *o++ = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            *o++ = '\\', *o++ = (char)*c;
        else if (*c < 0x20 || *c >= 0x7f || *c == '?')
            o += sprintf(o, "\\%03o", *c);
        else
            *o++ = (char)*c;
    }
    *o++ = '"';
    return out;
}

const char *c_float(Arena *a, double v)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", (double)(float)v);
    if (!strpbrk(buf, ".en"))
        strcat(buf, ".0");
    return arena_printf(a, "%sf", buf);
}

const char *c_double(Arena *a, double v)
{
    char buf[64];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".en"))
        strcat(buf, ".0");
    return arena_strdup(a, buf);
}

const char *value_expr(Emit *e, int v)
{
    int r = ir_root(e->p, v);
    if (r == 0)
        return e->cuda ? "net->x" : "b->x";
    return arena_printf(e->arena, "a%d", r);
}

const char *grad_expr(Emit *e, int v)
{
    if (ir_root(e->p, v) == 0)
        return "net->dinput"; /* NULL but for --gradcheck */
    return arena_printf(e->arena, "net->gbuf[%d]", e->p->values[v].grad_buf);
}

/* The gradient of n's second operand (add's, mul's, concat's NAME); the
 * model's input's is the caller's net->dinput, or, where that is NULL, a
 * buffer whose contents nothing reads (the memory plan's Node.ds_buf). */
const char *operand_grad(Emit *e, const Node *n)
{
    if (ir_root(e->p, n->in2) == 0)
        return arena_printf(e->arena, "net->dinput ? net->dinput : net->gbuf[%d]", n->ds_buf);
    return grad_expr(e, n->in2);
}

const char *pass_name(Emit *e, const Node *n, const char *pass)
{
    return arena_printf(e->arena, "%s_%s_%s", n->op->sig.name, n->cname, pass);
}

/* The model line a node comes from, without leading blanks or comment. */
const char *source_line(const Program *prog, const Stmt *s)
{
    const Diag *d = prog->diag;
    const char *p = d->src, *end = d->src + d->len;
    for (int l = 1; l < s->loc.first_line && p < end; p++)
        if (*p == '\n')
            l++;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    const char *q = p;
    while (q < end && *q != '\n' && *q != '\r' && *q != '#')
        q++;
    while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
        q--;
    char *text = arena_alloc(prog->arena, (size_t)(q - p) + 1);
    memcpy(text, p, (size_t)(q - p));
    /* keep the comment closed whatever the line holds */
    for (char *c = text; *c; c++)
        if (c[0] == '*' && c[1] == '/')
            c[1] = '|';
    return text;
}

void emit_layer_comment(Emit *e, const Node *n)
{
    const Program *p = e->p;
    emitf(e, "/*");
    emitf(e, " * layer %d: %s    (line %d)", n->index, source_line(p, n->stmt),
          n->stmt->loc.first_line);
    const Shape *out = &p->values[n->out].shape;
    if (n->fused) {
        emitf(e, " * fused with layer %d: %s    (line %d)", n->fused->index,
              source_line(p, n->fused->stmt), n->fused->stmt->loc.first_line);
        out = &p->values[n->fused->out].shape;
    }
    /* where a batch lies channel first, say so: [C, n, H, W] */
    bool in_cn = p->values[n->in].cn, out_cn = p->values[n->out].cn;
    emitf(e, " * %s%s -> %s%s", shape_str(e->arena, &p->values[n->in].shape),
          in_cn ? " (channel first)" : "", shape_str(e->arena, out), out_cn ? " (channel first)" : "");
    for (int k = 0; k < n->nparams; k++) {
        const Param *prm = &p->params[n->param0 + k];
        emitf(e, " * %s [%s] at param[%zu]", prm->name, dims_list(e->arena, prm->rank, prm->dim),
              prm->offset);
    }
    emitf(e, " */");
}

/* The local naming a parameter in its layer's passes: its state_dict
 * suffix with "weight" and "bias" written W and b ("0.weight" -> W,
 * "0.bias_hh_l1" -> b_hh_l1). */
static const char *param_local(Arena *a, const Node *n, const Param *prm)
{
    const char *s = prm->name + strlen(n->name) + 1;
    if (!strncmp(s, "weight", 6))
        return arena_printf(a, "W%s", s + 6);
    if (!strncmp(s, "bias", 4))
        return arena_printf(a, "b%s", s + 4);
    return s;
}

/* Where a pass reads n's parameters: a product's from the rounded copy in
 * a bf16 run. */
static const char *lowp_weights(const Node *n)
{
    return n->op->product ? "(net->lowp ? net->wlp : net->param)" : "net->param";
}

/* Declarations every pass function of n starts with. */
void emit_pass_locals(Emit *e, const Node *n, bool bwd)
{
    const Program *p = e->p;
    for (int k = 0; k < n->nparams; k++) {
        const Param *prm = &p->params[n->param0 + k];
        const char *w = param_local(e->arena, n, prm);
        if (!bwd || !prm->is_bias) /* backward needs W for dx, never b */
            emitf(e, "const float *%s = %s + %zu;", w, lowp_weights(n), prm->offset);
        if (bwd)
            emitf(e, "float *d%s = net->grad + %zu;", w, prm->offset);
    }
    for (int k = 0; k < n->nbufs && !bwd; k++) { /* buffers change in forward only */
        const Buffer *b = &p->buffers[n->buf0 + k];
        const char *type = b->dtype == NRT_I64 ? "int64_t" : "float";
        emitf(e, "%s *%s = (%s *)(void *)(net->buffers + %zu);", type, b->local, type, b->offset);
    }
    /* (the GPU's convolutions read x itself, not the cpu's padded copy) */
    if (n->aux_size && !(e->cuda && !strcmp(n->op->aux_name, "xp")))
        emitf(e, "float *%s = net->act + (size_t)net->cap * %lld;", n->op->aux_name,
              (long long)n->aux_offset);
    if (n->iaux_size)
        emitf(e, "int32_t *arg = net->iact + (size_t)net->cap * %lld;", (long long)n->iaux_offset);
}

static void emit_node(Emit *e, const Node *n)
{
    emit_layer_comment(e, n);
    emit_at(e, n->stmt->loc.first_line);
    emitf(e, "NRT_PASS static void %s(nrt_net *net, int n, const float *x, float *y)", pass_name(e, n, "fwd"));
    emitf(e, "{");
    e->indent++;
    bool uses_net =
        n->nparams || n->nbufs || n->aux_size || n->iaux_size || n->scratch || n->in2 >= 0;
    if (!uses_net)
        emitf(e, "(void)net;");
    emit_pass_locals(e, n, false);
    n->op->emit_fwd(e, n);
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
    emitf(e, "NRT_PASS static void %s(nrt_net *net, int n, const float *x, const float *y, float *dy, float *dx)",
          pass_name(e, n, "bwd"));
    emitf(e, "{");
    e->indent++;
    if (!uses_net)
        emitf(e, "(void)net;");
    /* a layer with weights reads x, and an activation whose derivative needs it */
    if (!n->op->takes_epilogue && !n->nparams && !n->nbufs && !n->op->bwd_reads_x &&
        !(n->op->act && n->op->act->needs & NEEDS_X))
        emitf(e, "(void)x;");
    if (!(n->op->act && n->op->act->needs & NEEDS_Y) && !n->fused)
        emitf(e, "(void)y;");
    emit_pass_locals(e, n, true);
    n->op->emit_bwd(e, n);
    emit_grad_part(e, n);
    e->indent--;
    emitf(e, "}");
    emit_at(e, 0);
    emit_blank(e);
}

/* The node whose output a (possibly fused) node writes. */
const Node *last_visible(const Node *n)
{
    return n->fused ? n->fused : n;
}

const char *value_memory(Emit *e, int v)
{
    if (ir_root(e->p, v) == 0)
        return "net->x";
    return arena_printf(e->arena, "net->act + (size_t)net->cap * %lld",
                        (long long)e->p->values[ir_root(e->p, v)].offset);
}

void emit_value_locals(Emit *e)
{
    const Program *p = e->p;
    for (int v = 1; v < p->nvalues; v++)
        if (p->values[v].alias < 0)
            emitf(e, "float *a%d = %s; /* %s */", v, value_memory(e, v),
                  shape_str(e->arena, &p->values[v].shape));
}

void emit_round(Emit *e, const char *cond, const char *dst, const char *src,
                const char *count)
{
    emitf(e, "if (%s)", cond);
    if (e->cuda)
        emitf(e, "    TRY(nrt_cu_round_lowp(net, %s, %s, %s, err));", dst, src ? src : dst, count);
    else if (!src)
        emitf(e, "    nrt_round_lowp(net->lowp, %s, %s);", dst, count);
    else
        emitf(e, "    nrt_round_lowp_to(net->lowp, %s, %s, %s);", dst, src, count);
}

/* value v of the batch rounded in place */
static void emit_round_value(Emit *e, const char *expr, int v)
{
    emit_round(e, "net->lowp", expr, NULL,
               arena_printf(e->arena, "(size_t)n * %lld", (long long)e->p->values[v].size));
}

/* Whether n is a product of an fp32 input: its input is cast (rounded
 * into net->xlp) in a bf16 run. */
bool casts_input(const Emit *e, const Node *n)
{
    (void)e;
    return n->cast_offset >= 0;
}

/* The local naming n's input as it reads it: "cast" (the first product's),
 * "cast_NAME" */
static const char *cast_name(Emit *e, const Node *n)
{
    return n - e->p->nodes == e->p->first_product ? "cast"
                                                   : arena_printf(e->arena, "cast_%s", n->cname);
}

/* Where n's copy lies in net->xlp */
static const char *cast_memory(Emit *e, const Node *n)
{
    return n->cast_offset ? arena_printf(e->arena, "net->xlp + (size_t)net->cap * %lld",
                                         (long long)n->cast_offset)
                          : "net->xlp";
}

/* "cast": a product's fp32 input as it reads it (in a bf16 run, the copy
 * rounded into net->xlp: what autocast's cast gives) */
static void emit_cast(Emit *e, const Node *n)
{
    emitf(e, "const float *%s = net->lowp ? %s : %s;", cast_name(e, n), cast_memory(e, n),
          value_expr(e, n->in));
}

void emit_lowp_input(Emit *e, bool fwd)
{
    const Program *p = e->p;
    if (p->first_product < 0)
        return;
    if (fwd) {
        emitf(e, "/* bf16, fp16: the products' weights rounded, as autocast casts them */");
        emit_round(e, "net->lowp", "net->wlp", "net->param",
                   arena_printf(e->arena, "%zu", p->param_count));
    } else {
        for (int i = 0; i < p->nnodes; i++) /* as forward() made them */
            if (casts_input(e, &p->nodes[i]))
                emit_cast(e, &p->nodes[i]);
    }
}

void emit_lowp_dlast(Emit *e)
{
    const Program *p = e->p;
    if (!p->values[p->nvalues - 1].lowp)
        return;
    const char *count = arena_printf(e->arena, "(size_t)n * %d", p->n_out);
    emitf(e, "/* the loss in fp32; its gradient scaled (fp16: GradScaler's factor, else 1) and");
    emitf(e, " * cast to the output's precision */");
    emitf(e, "if (net->lowp && dlast)");
    if (e->cuda)
        emitf(e, "    TRY(nrt_cu_round_lowp_scaled(net, dlast, %s, err));", count);
    else
        emitf(e, "    nrt_round_lowp_scaled(net->lowp, dlast, %s, net->loss_scale);", count);
}

/* After n's backward pass in a bf16 run: the gradient of a bf16 input
 * rounded, and a product's weight gradients (autocast's bf16 ones, cast
 * to the fp32 parameters' .grad). */
static void emit_lowp_bwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    /* (a part of a gradient is rounded where it is added: emit_grad_part) */
    if ((p->values[n->in].lowp || casts_input(e, n)) && ir_root(p, n->in) != 0 && n->dx_buf < 0 &&
        !keeps_rounding(p, n, true))
        emit_round_value(e, grad_expr(e, n->in), n->in);
    if (n->op->product && n->nparams > 0) {
        const Param *first = &p->params[n->param0], *last = &p->params[n->param0 + n->nparams - 1];
        const char *g = arena_printf(e->arena, "net->grad + %zu", first->offset);
        emit_round(e, "net->lowp", g, NULL,
                   arena_printf(e->arena, "%zu", last->offset + last->size - first->offset));
    }
}

/* The calls of the layers' passes, in order: forward, or backward from
 * the loss.  The .cu file's passes take err and return nonzero on error. */
void emit_pass_calls(Emit *e, bool bwd)
{
    const Program *p = e->p;
    /* the CUDA host passes are cu_ and the cpu's names (emit_cuda.c) */
    const char *open = e->cuda ? "TRY(cu_" : "", *close = e->cuda ? ", err));" : ");";
    size_t final = p->param_count; /* backward: the gradients from here on are final */
    for (int k = 0; k < (bwd ? p->nbwd : p->nnodes); k++) {
        const Node *n = &p->nodes[bwd ? p->bwd[k] : k];
        if (!ir_emits_passes(p, n))
            continue;
        int out = last_visible(n)->out;
        const char *in = casts_input(e, n) ? cast_name(e, n) : value_expr(e, n->in);
        if (bwd) {
            /* (a later part of the input's gradient: none where it is not asked for) */
            const char *dx = n->dx_buf < 0 ? grad_expr(e, n->in)
                             : ir_root(p, n->in) == 0
                                 ? arena_printf(e->arena, "net->dinput ? net->gbuf[%d] : NULL", n->dx_buf)
                                 : arena_printf(e->arena, "net->gbuf[%d]", n->dx_buf);
            emitf(e, "%s%s(net, n, %s, %s, %s, %s%s", open, pass_name(e, n, "bwd"),
                  in, value_expr(e, out), grad_expr(e, out), dx, close);
            emit_lowp_bwd(e, n);
            /* on a GPU, several ranks start summing them while backward goes on */
            if (e->cuda && n->nparams > 0 && p->params[n->param0].offset < final) {
                final = p->params[n->param0].offset;
                emitf(e, "TRY(nrt_cu_grads_final(net, %zu, err)); /* param[%zu...] done */",
                      final, final);
            }
        } else {
            if (casts_input(e, n)) { /* a product casts its fp32 input */
                emit_round(e, "net->lowp", cast_memory(e, n), value_expr(e, n->in),
                           arena_printf(e->arena, "(size_t)n * %lld",
                                        (long long)p->values[n->in].size));
                emit_cast(e, n);
            }
            emitf(e, "%s%s(net, n, %s, %s%s", open, pass_name(e, n, "fwd"), in,
                  value_expr(e, out), close);
            if (!n->op->is_view && e->p->values[out].lowp && !n->op->rounds_output &&
                !keeps_rounding(p, n, false))
                emit_round_value(e, value_expr(e, out), out);
        }
    }
}

/* The guard that generated code and the runtime agree. */
void emit_abi_check(Emit *e)
{
    emitf(e, "#if NETRT_ABI != %d", NETRT_ABI);
    emitf(e, "#error \"generated for netrt ABI %d: this runtime differs; regenerate with its netc\"",
          NETRT_ABI);
    emitf(e, "#endif");
}

/* Where a pass reads the model's input by name (add(x)): the batch's,
 * in net->x. */
static void emit_named_input(Emit *e)
{
    for (int i = 0; i < e->p->nnodes; i++)
        if (e->p->nodes[i].in2 >= 0 && ir_root(e->p, e->p->nodes[i].in2) == 0) {
            emitf(e, "net->x = b->x; /* the input, which a pass reads by name */");
            return;
        }
}

static void emit_forward(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "/* The forward pass over a batch; returns the mean loss. */");
    emitf(e, "NRT_PASS static float forward(nrt_net *net, const nrt_batch *b, const float **out)");
    emitf(e, "{");
    e->indent++;
    emitf(e, "int n = b->n;");
    emit_named_input(e);
    emit_value_locals(e);
    emit_lowp_input(e, true);
    emit_pass_calls(e, false);
    int last = p->nvalues - 1;
    emitf(e, "*out = %s;", value_expr(e, last));
    emitf(e, "float *dlast = net->training ? %s : NULL;", grad_expr(e, last));
    emit_at(e, p->loss_stmt->loc.first_line);
    p->loss->emit_c(e, value_expr(e, last));
    emit_at(e, 0);
    emit_lowp_dlast(e);
    emitf(e, "return loss;");
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
}

static void emit_backward(Emit *e)
{
    const Program *p = e->p;
    emitf(e, "/* The backward pass, after forward() on the same batch in training mode:");
    emitf(e, " * d loss / d output is already in %s. */", grad_expr(e, p->nvalues - 1));
    emitf(e, "NRT_PASS static void backward(nrt_net *net, const nrt_batch *b)");
    emitf(e, "{");
    e->indent++;
    emitf(e, "int n = b->n;");
    emit_named_input(e);
    emit_value_locals(e);
    emit_lowp_input(e, false);
    emit_pass_calls(e, true);
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
}

void emit_c(FILE *out, const Program *p, const EmitOptions *o, Arena *a, bool cuda)
{
    Emit e = {.out = out, .p = p, .arena = a, .opt = o};
    emitf(&e, "/* Generated by netc %s from %s. Do not edit. */", NETC_VERSION, o->source);
    emitf(&e, "#include <math.h>");
    emitf(&e, "#include <string.h>");
    emit_blank(&e);
    emitf(&e, "#include <netrt.h>");
    if (cuda)
        emitf(&e, "#include <netrt_cuda.h>");
    if (o->lib)
        emitf(&e, "#include %s", c_string(a, o->lib_header));
    emit_blank(&e);
    emit_abi_check(&e);
    emit_blank(&e);
    for (int i = 0; i < p->nnodes; i++)
        if (ir_emits_passes(p, &p->nodes[i]))
            emit_node(&e, &p->nodes[i]);
    emit_forward(&e);
    emit_backward(&e);
    if (cuda)
        emit_cuda_host(&e);
    emit_driver(&e, cuda);
}
