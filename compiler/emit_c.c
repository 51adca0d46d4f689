/*
 * emit_c.c — the C emitter: the graph IR as C a person can read.
 *
 * Each layer becomes two functions, NAME_INDEX_fwd and NAME_INDEX_bwd
 * (conv2d_0_fwd, linear_fc1_bwd), with a comment quoting the model line and
 * the shapes; their bodies come from the op table (ops.c, ops/) with every shape
 * written in as a constant, so only the batch size is left to run time.
 * Then forward() and backward() call them in order, with the buffers of the
 * memory plan, and driver.c adds the model descriptor and main().  Where
 * the model has fuse.c's second plan, forward_half() and backward_half()
 * call the same passes for a bf16 or fp16 run that keeps its values in 16
 * bits, copying them to and from fp32 working copies around the passes
 * (Glue tracks which copy holds what), and forward() and backward()
 * hand such a run to them.
 *
 * Output depends on nothing but the model: no dates, no absolute paths, so
 * the same input gives byte-identical output.
 */
#include "netc.h"

#include <stdlib.h>
#include <string.h>

/* Forward and backward over the fp32 plan (plan 0), or forward_half and
 * backward_half over the 16-bit one (1), the cpu's or (e->cuda) the GPU's
 * cu_forward, cu_backward and their _half twins: the value each fp32
 * working copy w0, w1, w2 holds (a root value, or -1), the one last
 * written or loaded, and the locals the function uses. */
typedef struct Glue {
    int plan;
    bool bwd;    /* backward */
    int held[3];
    int last;
    bool *used;  /* [nvalues]: h%d, a value's 16 bits */
    bool work[3];/* w0, w1, w2 */
} Glue;

/* Working copy k's local (w0, w1, w2), now used. */
static const char *work_name(Emit *e, int k)
{
    e->glue->work[k] = true;
    return arena_printf(e->arena, "w%d", k);
}

/* A value's per-sample offset in the plan being written (-1: none). */
static int64_t plan_offset(const Emit *e, const IrValue *val)
{
    const int plan = e->glue ? e->glue->plan : 0;
    return e->cuda ? val->cuda_offset[plan] : val->cpu_offset[plan];
}

/* The activations a sample in the 16-bit plan of the code being written
 * (the cpu's or the GPU's); 0: it has none. */
int64_t half_plan_size(const Emit *e)
{
    return e->cuda ? e->p->cuda_half_act_size : e->p->half_act_size;
}

/* Whether root r lives in forward's working copies: a value no pass reads
 * but the next (no memory of its own in the plan), or one kept in 16 bits. */
static bool in_work(const Emit *e, int r)
{
    const IrValue *val = &e->p->values[r];
    return e->glue && r > 0 && (plan_offset(e, val) < 0 || (e->glue->plan && val->half));
}

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

/* On the cpu a value living in working copies (in_work) is read and
 * written in the one holding it; NULL where backward does not read it. */
const char *value_expr(Emit *e, int v)
{
    int r = ir_root(e->p, v);
    if (r == 0)
        return e->cuda ? "net->x" : "b->x";
    if (in_work(e, r)) {
        for (int k = 0; k < 2; k++)
            if (e->glue->held[k] == r)
                return work_name(e, k);
        return "NULL";
    }
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
    if (n->sunk) { /* (reorder.c; the pool is the node before it now) */
        const char *f = n->op->sig.name;
        emitf(e, " * run after layer %d, the max pool after it in the model, on the pooled", n[-1].index);
        emitf(e, " * values: %s(max(a, b)) = max(%s(a), %s(b))", f, f, f);
    }
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

/* Inside a pass, the activation memory at per-sample offset off[0] in
 * the fp32 plan, off[1] where the run keeps its values in 16 bits
 * (fuse.c): gpu's on the GPU, cpu's on the cpu. */
static const char *act_memory(Emit *e, const int64_t gpu[2], const int64_t cpu[2])
{
    const int64_t *off = e->cuda ? gpu : cpu;
    if (!half_plan_size(e) || off[0] == off[1])
        return arena_printf(e->arena, "net->act + (size_t)net->cap * %lld", (long long)off[0]);
    return arena_printf(e->arena, "net->act + (size_t)net->cap * (net->half ? %lld : %lld)",
                        (long long)off[1], (long long)off[0]);
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
    /* (the GPU's convolutions read x itself, not the cpu's padded copy;
     * in the cpu's 16-bit plan that copy is made in backward's x working
     * copy, its 16 bits kept elsewhere: aux_16) */
    if (n->aux_size && !(e->cuda && !strcmp(n->op->aux_name, "xp"))) {
        const int64_t cpu[2] = {n->aux_cpu_offset[0],
                                n->aux_half ? e->p->half_work[0] : n->aux_cpu_offset[1]};
        emitf(e, "float *%s = %s;", n->op->aux_name,
              act_memory(e, (const int64_t[2]){n->aux_offset, n->aux_offset}, cpu));
    }
    if (n->iaux_size)
        emitf(e, "int32_t *arg = net->iact + (size_t)net->cap * %lld;", (long long)n->iaux_offset);
}

/* Whether the cpu's backward passes take hx and hy: the 16 bits of x and
 * y where the run keeps them so (and the pass reads them: reads_16). */
bool bwd_halves(const Emit *e)
{
    return half_plan_size(e) != 0;
}

bool reads_16(const Emit *e, const Node *n, bool y)
{
    const int v = y ? last_visible(n)->out : n->in;
    return bwd_halves(e) && ir_bwd_reads_16(n, y) && e->p->values[ir_root(e->p, v)].half;
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
    emitf(e, "NRT_PASS static void %s(nrt_net *net, int n, const float *x, const float *y,%s float *dy, "
          "float *dx)", pass_name(e, n, "bwd"), bwd_halves(e) ? " const uint16_t *hx, const uint16_t *hy," : "");
    emitf(e, "{");
    e->indent++;
    if (!uses_net && !reads_16(e, n, false) && !reads_16(e, n, true))
        emitf(e, "(void)net;");
    if (bwd_halves(e) && !reads_16(e, n, false))
        emitf(e, "(void)hx;");
    if (bwd_halves(e) && !reads_16(e, n, true))
        emitf(e, "(void)hy;");
    if (n->op->x_in_aux)
        emitf(e, "(void)x; /* %s, kept by forward, stands for it */", n->op->aux_name);
    else if (!ir_bwd_reads_x(n, false))
        emitf(e, "(void)x;");
    if (!ir_bwd_reads_y(n))
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

/* A value read by name inside a pass (add's s): where the run keeps it
 * in 16 bits, forward_half and backward_half have loaded it into the
 * third working copy. */
const char *value_memory(Emit *e, int v)
{
    const IrValue *val = &e->p->values[ir_root(e->p, v)];
    if (ir_root(e->p, v) == 0)
        return "net->x";
    const int64_t cpu[2] = {val->cpu_offset[0], val->half ? e->p->half_work[2] : val->cpu_offset[1]},
                  gpu[2] = {val->cuda_offset[0],
                            val->half ? e->p->cuda_half_work[2] : val->cuda_offset[1]};
    return act_memory(e, gpu, cpu);
}

static bool is_half(const Emit *e, int v)
{
    return e->glue && e->glue->plan && e->p->values[ir_root(e->p, v)].half;
}

/* v's 16 bits into working copy k (nothing if it holds them already) */
static void half_load(Emit *e, int v, int k)
{
    Glue *h = e->glue;
    if (h->held[k] == v)
        return;
    h->used[v] = true;
    if (e->cuda)
        emitf(e, "TRY(nrt_cu_half_load(net, %s, h%d, (size_t)n * %lld, err));", work_name(e, k),
              v, (long long)e->p->values[v].size);
    else
        emitf(e, "nrt_half_load(net->half, %s, h%d, (size_t)n * %lld);", work_name(e, k), v,
              (long long)e->p->values[v].size);
    h->held[k] = v;
}

/* Which of w0 and w1 takes a new value, keeping the one that holds keep,
 * or else the last used. */
static int half_free(const Glue *h, int keep)
{
    if (keep >= 0 && (h->held[0] == keep || h->held[1] == keep))
        return h->held[0] == keep;
    return h->held[0] == h->last;
}

/* Root v in forward's w0 or w1: loaded from its 16 bits if in neither
 * (a value with no memory of its own is there, written by the pass
 * before). */
static void half_in(Emit *e, int v)
{
    Glue *h = e->glue;
    if (h->held[0] != v && h->held[1] != v)
        half_load(e, v, half_free(h, -1));
    h->last = v;
}

/* In the cpu's forward_half and backward_half, n's aux kept in 16 bits
 * (aux_half): after its forward pass, which made it in backward's x
 * working copy, its 16 bits kept (bwd false); before its backward pass
 * loaded there again, which then holds no value (bwd). */
static void aux_16(Emit *e, const Node *n, bool bwd)
{
    const Program *p = e->p;
    if (e->cuda || !e->glue->plan || !n->aux_half)
        return;
    const char *work = arena_printf(e->arena, "net->act + (size_t)net->cap * %lld",
                                    (long long)p->half_work[0]);
    const char *bits = arena_printf(e->arena, "(uint16_t *)(void *)(net->act + (size_t)net->cap * %lld)",
                                    (long long)n->aux_cpu_offset[1]);
    const char *count = arena_printf(e->arena, "(size_t)n * %lld", (long long)n->aux_size);
    if (bwd) {
        emitf(e, "nrt_half_load(net->half, %s, %s, %s); /* layer %d's %s */", work, bits, count,
              n->index, n->op->aux_name);
        e->glue->held[0] = -1;
    } else {
        emitf(e, "nrt_half_keep(net->half, %s, %s, %s); /* layer %d's %s */", bits, work, count,
              n->index, n->op->aux_name);
    }
}

/* Before n's pass on the cpu: in forward its operands in working copies
 * where they live there and its output given one; in backward_half those
 * it reads loaded, its aux too where that is in 16 bits. */
static void glue_before(Emit *e, const Node *n, bool bwd)
{
    const Program *p = e->p;
    Glue *h = e->glue;
    const int x = ir_root(p, n->in), y = ir_root(p, last_visible(n)->out);
    if (n->in2 >= 0 && is_half(e, n->in2) && (!bwd || n->op->bwd_reads_s))
        half_load(e, ir_root(p, n->in2), 2);
    if (bwd) { /* x in w0, y in w1 */
        if (is_half(e, y) && ir_bwd_reads_y(n) && !reads_16(e, n, true))
            half_load(e, y, 1);
        if (is_half(e, x) && ir_bwd_reads_x(n, e->cuda) && !reads_16(e, n, false))
            half_load(e, x, 0);
        aux_16(e, n, true);
        return;
    }
    if (in_work(e, x))
        half_in(e, x);
    if (in_work(e, y)) {
        h->held[half_free(h, in_work(e, x) ? x : -1)] = y;
        h->last = y;
    }
}

static void emit_round_value(Emit *e, const char *expr, int v);

/* A backward pass's hx and hy, and a comma: the 16 bits it reads itself
 * (backward_half), or NULL. */
static const char *halves(Emit *e, const Node *n)
{
    const char *h[2];
    for (int y = 0; y < 2; y++) {
        const int v = ir_root(e->p, y ? last_visible(n)->out : n->in);
        const bool bits = e->glue && e->glue->plan && reads_16(e, n, y);
        h[y] = bits ? arena_printf(e->arena, "h%d", v) : "NULL";
        if (bits)
            e->glue->used[v] = true;
    }
    return arena_printf(e->arena, "%s, %s, ", h[0], h[1]);
}

/* After n's forward pass on the cpu: its aux's 16 bits kept where it is
 * in 16 bits; and where its output lives in a working copy, that rounded
 * where the pass leaves it to the caller (round), and in forward_half its
 * 16 bits kept for backward, in the same sweep. */
static void glue_after(Emit *e, const Node *n, bool round)
{
    const int y = ir_root(e->p, last_visible(n)->out);
    aux_16(e, n, false);
    if (!in_work(e, y))
        return;
    if (plan_offset(e, &e->p->values[y]) < 0) { /* read by the next pass alone */
        if (round)
            emit_round_value(e, value_expr(e, y), y);
        return;
    }
    e->glue->used[y] = true;
    if (e->cuda)
        emitf(e, "TRY(nrt_cu_half_%skeep(net, h%d, %s, (size_t)n * %lld, err));",
              round ? "round_" : "", y, value_expr(e, y), (long long)e->p->values[y].size);
    else
        emitf(e, "nrt_half_%skeep(net->half, h%d, %s, (size_t)n * %lld);", round ? "round_" : "",
              y, value_expr(e, y), (long long)e->p->values[y].size);
}

void emit_value_locals(Emit *e)
{
    const Program *p = e->p;
    const Glue *g = e->glue;
    for (int v = 1; v < p->nvalues; v++) {
        const IrValue *val = &p->values[v];
        const int64_t off = plan_offset(e, val);
        if (val->alias >= 0 || off < 0)
            continue;
        if (!g || !g->plan || !val->half)
            emitf(e, "float *a%d = net->act + (size_t)net->cap * %lld; /* %s */", v,
                  (long long)off, shape_str(e->arena, &val->shape));
        else if (g->used[v])
            emitf(e, "uint16_t *h%d = (uint16_t *)(void *)(net->act + (size_t)net->cap * %lld); "
                  "/* %s, 16 bits */", v, (long long)off, shape_str(e->arena, &val->shape));
    }
    if (g && !g->bwd && (g->work[0] || g->work[1]))
        emitf(e, "/* the working copies: the gradient buffers, free until the loss */");
    for (int k = 0; g && k < 3; k++)
        if (g->work[k] && k < 2 && !g->bwd)
            emitf(e, "float *w%d = net->gbuf[%d];", k, k);
        else if (g->work[k])
            emitf(e, "float *w%d = net->act + (size_t)net->cap * %lld;", k,
                  (long long)(e->cuda ? p->cuda_half_work : p->half_work)[k]);
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
        if (e->glue)
            glue_before(e, n, bwd);
        const char *in = casts_input(e, n) ? cast_name(e, n) : value_expr(e, n->in);
        if (bwd) {
            /* (a later part of the input's gradient: none where it is not asked for) */
            const char *dx = n->dx_buf < 0 ? grad_expr(e, n->in)
                             : ir_root(p, n->in) == 0
                                 ? arena_printf(e->arena, "net->dinput ? net->gbuf[%d] : NULL", n->dx_buf)
                                 : arena_printf(e->arena, "net->gbuf[%d]", n->dx_buf);
            emitf(e, "%s%s(net, n, %s, %s, %s%s, %s%s", open, pass_name(e, n, "bwd"), in,
                  value_expr(e, out), bwd_halves(e) ? halves(e, n) : "", grad_expr(e, out), dx,
                  close);
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
            const bool round = !n->op->is_view && e->p->values[out].lowp &&
                               !n->op->rounds_output && !keeps_rounding(p, n, false);
            if (round && !in_work(e, ir_root(p, out)))
                emit_round_value(e, value_expr(e, out), out);
            if (e->glue)
                glue_after(e, n, round);
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

/* The locals of forward or backward; of forward_half and backward_half,
 * those its calls use (found by writing them once to nowhere). */
void emit_glue_locals(Emit *e, bool bwd)
{
    Glue *h = e->glue;
    if (h) {
        h->bwd = bwd;
        h->work[0] = h->work[1] = h->work[2] = false;
        h->held[0] = h->held[1] = h->held[2] = h->last = -1;
        memset(h->used, 0, sizeof(bool) * (size_t)e->p->nvalues);
        FILE *out = e->out;
        e->out = NULL;
        emit_pass_calls(e, bwd);
        e->out = out;
        h->held[0] = h->held[1] = h->held[2] = h->last = -1;
    }
    emit_value_locals(e);
}

/* e->glue for plan's forward or backward, written next. */
void emit_use_plan(Emit *e, int plan)
{
    Glue *g = arena_alloc(e->arena, sizeof *g);
    *g = (Glue){.plan = plan, .held = {-1, -1, -1}, .last = -1,
                .used = arena_alloc(e->arena, sizeof(bool) * (size_t)e->p->nvalues)};
    e->glue = g;
}

int glue_plan(const Emit *e)
{
    return e->glue ? e->glue->plan : 0;
}

/* forward() and backward() begin by handing a run that keeps its values
 * in 16 bits to their _half twins (on the GPU cu_forward, cu_backward). */
void emit_half_dispatch(Emit *e, bool bwd)
{
    if (!half_plan_size(e) || e->glue->plan)
        return;
    if (e->cuda) {
        emitf(e, "if (net->half)");
        emitf(e, "    return cu_%s_half(net, n, err);", bwd ? "backward" : "forward");
    } else if (bwd) {
        emitf(e, "if (net->half) {");
        emitf(e, "    backward_half(net, b);");
        emitf(e, "    return;");
        emitf(e, "}");
    } else {
        emitf(e, "if (net->half)");
        emitf(e, "    return forward_half(net, b, out);");
    }
}

static void emit_forward(Emit *e)
{
    const Program *p = e->p;
    if (e->glue->plan) {
        emitf(e, "/* The forward pass where a bf16 or fp16 run keeps its values in 16 bits");
        emitf(e, " * (net->half): each pass reads and writes fp32 working copies (w0 and w1, the");
        emitf(e, " * gradient buffers, free until the loss; w2 a value read by name), and the");
        emitf(e, " * 16 bits of each value read again are kept (h1, ...). */");
    } else {
        emitf(e, "/* The forward pass over a batch; returns the mean loss. */");
    }
    emitf(e, "NRT_PASS static float forward%s(nrt_net *net, const nrt_batch *b, const float **out)",
          e->glue->plan ? "_half" : "");
    emitf(e, "{");
    e->indent++;
    emit_half_dispatch(e, false);
    emitf(e, "int n = b->n;");
    emit_named_input(e);
    emit_glue_locals(e, false);
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
    if (e->glue->plan) {
        emitf(e, "/* The backward pass after forward_half: an activation's derivative reads");
        emitf(e, " * the 16 bits of its x or y itself (hx, hy); what the other passes read is");
        emitf(e, " * loaded into working copies (w0 x, w2 a value read by name). */");
    } else {
        emitf(e, "/* The backward pass, after forward() on the same batch in training mode:");
        emitf(e, " * d loss / d output is already in %s. */", grad_expr(e, p->nvalues - 1));
    }
    emitf(e, "NRT_PASS static void backward%s(nrt_net *net, const nrt_batch *b)",
          e->glue->plan ? "_half" : "");
    emitf(e, "{");
    e->indent++;
    emit_half_dispatch(e, true);
    emitf(e, "int n = b->n;");
    emit_named_input(e);
    emit_glue_locals(e, true);
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
    for (int plan = p->half_act_size ? 1 : 0; plan >= 0; plan--) {
        emit_use_plan(&e, plan);
        emit_forward(&e);
        emit_backward(&e);
    }
    e.glue = NULL;
    if (cuda)
        emit_cuda_host(&e);
    emit_driver(&e, cuda);
}
