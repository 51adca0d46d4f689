/*
 * ops.c — the table of layer ops, and what their passes share: shape
 * rules' and emitters' helpers for the cpu and the GPU (ops.h).  Each op
 * family is a file of compiler/ops/; the argument binder is args.c, the
 * losses, optimizers, schedules, data sources and initializers
 * registry.c.
 */
#include "ops.h"

#include <ctype.h>
#include <string.h>

/* ----------------------------------------------------- shape helpers */

const Shape *in_shape(Program *p, const Node *n)
{
    return &p->values[n->in].shape;
}

Shape *out_shape(Program *p, Node *n)
{
    return &p->values[n->out].shape;
}

double arg(const Node *n, int i)
{
    return n->args[i].v[0];
}

bool need_image(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    if (s->rank == 3)
        return true;
    diag_error(p->diag, n->stmt->call->loc,
               "%s expects an image input [channels, height, width], got %s",
               n->op->sig.name, shape_str(p->arena, s));
    if (s->rank == 1)
        diag_note(p->diag, n->stmt->call->loc,
                  "declare the input as an image, e.g. 'input image[1, 8, 8]'");
    else if (s->rank == 2 && n->in == 0)
        diag_note(p->diag, n->stmt->call->loc,
                  "give the input a channel dimension: [1, %lld, %lld]",
                  (long long)s->d[0], (long long)s->d[1]);
    return false;
}

/* PyTorch's output size: floor((in + 2 pad - kernel) / stride) + 1. */
bool window(Program *p, Node *n, int64_t in, int k, int s, int pad,
                   const char *what, int64_t *out)
{
    int64_t span = in + 2 * (int64_t)pad;
    if (span < k) {
        diag_error(p->diag, n->stmt->call->loc,
                   "%s kernel %d is larger than the padded input %s %lld",
                   n->op->sig.name, k, what, (long long)span);
        diag_note(p->diag, n->stmt->call->loc, "the input here is %s",
                  shape_str(p->arena, in_shape(p, n)));
        return false;
    }
    *out = (span - k) / s + 1;
    return true;
}


bool same_shape(Program *p, Node *n)
{
    *out_shape(p, n) = *in_shape(p, n);
    return true;
}

bool selects_always(const Program *p, const Node *n, bool bwd)
{
    (void)p, (void)n, (void)bwd;
    return true;
}

bool keeps_rounding(const Program *p, const Node *n, bool bwd)
{
    return n->op->selects && p->values[n->in].lowp && n->op->selects(p, n, bwd);
}

int second_input(Program *p, Node *n, const ArgVal *a)
{
    const char *what = arena_printf(p->arena, "%s reads", n->op->sig.name);
    n->in2 = named_value(p, n, a->s, a->loc, what);
    return n->in2;
}

void operands_error(Program *p, const Node *n, const char *why)
{
    const Shape *x = &p->values[n->in].shape, *s = &p->values[n->in2].shape;
    const char *name = n->args[0].s;
    diag_error(p->diag, n->stmt->call->loc, "%s of %s (%s) and %s ('%s'): %s", n->op->sig.name,
               shape_str(p->arena, x), n->stmt->from ? "its input" : "the layer before",
               shape_str(p->arena, s), name, why);
    for (int i = 0; i < p->nnodes; i++) /* (not a block's unnamed last layer) */
        if (p->nodes[i].out == n->in2 && p->nodes[i].stmt->name)
            diag_note(p->diag, p->nodes[i].stmt->loc, "'%s' is here, %s", name,
                      shape_str(p->arena, s));
}

bool broadcast_operands(Program *p, Node *n, const ArgVal *a)
{
    if (second_input(p, n, a) < 0)
        return false;
    const Shape *x = in_shape(p, n), *s = &p->values[n->in2].shape;
    const char *other = n->stmt->from ? "its input" : "the layer before";
    if (x->rank != s->rank) { /* (PyTorch would align one's batch with the other's channels) */
        operands_error(p, n, arena_printf(p->arena, "the shapes differ, and do not broadcast: "
                                          "they have %d and %d dimensions", x->rank, s->rank));
        diag_note(p->diag, n->stmt->call->loc, "a value repeats along the dimensions where it "
                  "has 1, as a [C, 1, 1] along a [C, H, W]");
        return false;
    }
    for (int k = 1; k <= s->rank; k++) {
        int64_t xd = x->d[x->rank - k], sd = s->d[s->rank - k];
        if (sd == xd || sd == 1)
            continue;
        if (xd == 1) {
            operands_error(p, n, arena_printf(p->arena, "%s would be repeated along '%s' "
                                              "(only the named value repeats)",
                                              other, a->s));
            diag_note(p->diag, n->stmt->call->loc, "write it the other way round: name %s "
                      "(g = ...) and write %s(g) from %s", other, n->op->sig.name, a->s);
        } else {
            operands_error(p, n, arena_printf(p->arena, "the shapes differ, and do not "
                                              "broadcast: their %s dimensions, %lld and %lld, "
                                              "differ and neither is 1",
                                              k == 1 ? "last" : k == 2 ? "second-to-last"
                                                                       : "third-to-last",
                                              (long long)xd, (long long)sd));
        }
        return false;
    }
    *out_shape(p, n) = *x;
    return true;
}

int64_t value_size(const Emit *e, const Node *n)
{
    return shape_size(&e->p->values[n->out].shape);
}


/* 1 when the input is laid out channel first, else 0 */
int input_cn(const Emit *e, const Node *n)
{
    return e->p->values[n->in].cn ? 1 : 0;
}

/* ------------------------------------------------ emission helpers */

/* The expressions of act's backward with dy, and x and y where it needs
 * them (names of arrays indexed by i, or of values). */
const char *act_grad(Arena *a, const Node *n, const Act *act, const char *dy,
                            const char *x, const char *y)
{
    return act->bwd(a, n, dy, act->needs & NEEDS_X ? x : NULL, act->needs & NEEDS_Y ? y : NULL);
}

/* The epilogue of a linear or conv2d layer (the bias, unless the product
 * added it, then the fused activation), for the cpu and the GPU alike:
 * says what it holds in a comment and returns the expression of v (the
 * product's value plus the bias) it stores; NULL, and nothing emitted,
 * when there is none. */
const char *epilogue(Emit *e, const Node *n, bool bias)
{
    if (!bias && !n->fused)
        return NULL;
    emitf(e, "/* epilogue: %s%s%s */", bias ? "bias" : "", bias && n->fused ? " + " : "",
          n->fused ? n->fused->op->sig.name : "");
    return n->fused ? n->fused->op->act->fwd(e->arena, n->fused, "v") : "v";
}

/* Whether the run is in bf16, as a pass reads it: the net's lowp on the
 * cpu, a GPU kernel's parameter lowp (cu_lowp: the net's, passed). */
const char *lowp_flag(const Emit *e)
{
    return e->cuda ? "lowp" : "net->lowp";
}

/* expr rounded to bf16 when the run is (where autocast rounds inside a
 * fused pass), else expr */
const char *lowp_expr(Emit *e, const char *expr)
{
    return arena_printf(e->arena, "nrt_lowp(%s, %s)", lowp_flag(e), expr);
}

/* Before an elementwise loop over `values` values, size a sample: the
 * loop on the threads (NRT_PAR_FOR, each value on one: the same bits) where
 * a batch of 128 samples reaches NRT_PAR_MIN_VALUES; smaller layers never
 * do, and their loops stay plain (an OpenMP region not taken still costs a
 * call).  cifar10's conv1 epilogue, 2^21 values a batch of 64, had the
 * main thread alone for 0.4 ms of a 12.5 ms step on two threads. */
void emit_par_for(Emit *e, int64_t size, const char *values)
{
    if (size * 128 >= NRT_PAR_MIN_VALUES)
        emitf(e, "NRT_PAR_FOR(%s)", values);
}

/* The head of a generated elementwise loop over a batch of values of
 * `size` a sample, i the index (on the threads where emit_par_for says). */
void emit_each(Emit *e, int64_t size)
{
    const char *values = arena_printf(e->arena, "(size_t)n * %lld", (long long)size);
    emit_par_for(e, size, values);
    emitf(e, "for (size_t i = 0; i < %s; i++)", values);
}

static void emit_loop(Emit *e, int64_t size, const char *const *lines, int nl)
{
    const char *values = batch_count(e, (long long)size);
    emit_par_for(e, size, values);
    emitf(e, "for (size_t i = 0; i < %s; i++)%s", values, nl > 1 ? " {" : "");
    for (int k = 0; k < nl; k++)
        emitf(e, "    %s", lines[k]);
    if (nl > 1)
        emitf(e, "}");
}

void emit_each_16(Emit *e, const Node *n, bool y, int64_t size, const char *const *lines,
                  const char *const *lines16, int nl)
{
    if (!reads_16(e, n, y)) {
        emit_loop(e, size, lines, nl);
        return;
    }
    emitf(e, "if (h%c) { /* %c kept in 16 bits */", y ? 'y' : 'x', y ? 'y' : 'x');
    e->indent++;
    emit_loop(e, size, lines16, nl);
    e->indent--;
    emitf(e, "} else {");
    e->indent++;
    emit_loop(e, size, lines, nl);
    e->indent--;
    emitf(e, "}");
}

const char *half_at(Emit *e, bool y)
{
    return arena_printf(e->arena, "nrt_half_value(net->half, h%c[i])", y ? 'y' : 'x');
}

const char *cu_value_at(Emit *e, const Node *n, bool y)
{
    const char c = y ? 'y' : 'x';
    if (!reads_16(e, n, y))
        return arena_printf(e->arena, "%c[i]", c);
    return arena_printf(e->arena, "(h%c ? nrt_half_value(half, h%c[i]) : %c[i])", c, c, c);
}

const char *cu_value_params(Emit *e, const Node *n, bool y)
{
    const char c = y ? 'y' : 'x';
    const char *h = reads_16(e, n, y) ? arena_printf(e->arena, "const uint16_t *h%c, int half, ", c)
                                      : "";
    return arena_printf(e->arena, "const float *%c, %s", c, h);
}

/* ---------------------------------------------------- broadcasting */

/* Whether the value is laid out channel first ([C, n, H, W]) */
static bool is_cn(const Emit *e, int v)
{
    return e->p->values[v].cn && e->p->values[v].shape.rank > 0;
}

bool broadcasts(const Emit *e, const Node *n)
{
    const Shape *x = &e->p->values[n->in].shape, *s = &e->p->values[n->in2].shape;
    return shape_size(x) != shape_size(s) || is_cn(e, n->in) != is_cn(e, n->in2);
}

/* A size or stride: c, times the batch size n where with_n */
typedef struct Extent {
    int64_t c;
    bool with_n;
} Extent;

static Extent ext_times(Extent a, Extent b)
{
    return (Extent){a.c * b.c, a.with_n || b.with_n};
}

/* As C, parenthesised where it is a product and paren says so (after a
 * '/' or '%') */
static const char *ext_str(Arena *a, Extent x, bool paren)
{
    if (!x.with_n)
        return arena_printf(a, "%lld", (long long)x.c);
    if (x.c == 1)
        return "(size_t)n";
    return arena_printf(a, paren ? "((size_t)n * %lld)" : "(size_t)n * %lld", (long long)x.c);
}

static bool ext_eq(Extent a, Extent b)
{
    return a.c == b.c && a.with_n == b.with_n;
}

/* A run of adjacent dimensions, in memory order, that s either has all
 * of (kept) or repeats along (each 1 in s): its size, and the
 * strides of its last dimension in x and in s. */
typedef struct Run {
    Extent size, xstride, sstride;
    bool kept;
    bool souter; /* kept, and holds s's outermost dimension of those kept */
} Run;

/* A value's dimensions in memory order, into dim (-1: the batch, first,
 * or second where the value is laid out channel first); returns how many. */
static int memory_order(int rank, bool cn, int *dim)
{
    int nd = 0;
    for (int k = 0; k <= rank; k++)
        dim[nd++] = k == (cn ? 1 : 0) ? -1 : cn && k == 0 ? 0 : k - 1;
    return nd;
}

/* x's dimensions in memory order, merged into runs (adjacent ones in s
 * too, where s is laid out otherwise: the batch elsewhere); returns how
 * many. */
static int runs(Emit *e, const Node *n, Run *r)
{
    const Shape *x = &e->p->values[n->in].shape, *s = &e->p->values[n->in2].shape;
    int xdim[4], sdim[4];
    const int nd = memory_order(x->rank, is_cn(e, n->in), xdim); /* (the ranks are equal) */
    memory_order(s->rank, is_cn(e, n->in2), sdim);
    Extent size[4], ssize[4], xs[4], ss[4], sstride[5], xacc = {1, false}, sacc = {1, false};
    int xpos[5]; /* where each dimension (the batch first) lies in x's order */
    for (int k = nd - 1; k >= 0; k--) { /* strides, from the innermost dimension out */
        const int xd = xdim[k], sd = sdim[k];
        xpos[xd + 1] = k;
        size[k] = xd < 0 ? (Extent){1, true} : (Extent){x->d[xd], false};
        ssize[k] = xd < 0 ? (Extent){1, true} : (Extent){s->d[xd], false};
        xs[k] = xacc;
        xacc = ext_times(size[k], xacc);
        sstride[sd + 1] = sacc; /* s's, by dimension */
        sacc = ext_times(sd < 0 ? (Extent){1, true} : (Extent){s->d[sd], false}, sacc);
    }
    for (int k = 0; k < nd; k++)
        ss[k] = sstride[xdim[k] + 1];
    int nr = 0, run_of[4] = {0};
    bool kept[4] = {false};
    for (int k = 0; k < nd; k++) {
        kept[k] = size[k].with_n || ssize[k].c == size[k].c;
        if (nr > 0 && r[nr - 1].kept == kept[k] &&
            (!kept[k] || ext_eq(r[nr - 1].sstride, ext_times(ssize[k], ss[k])))) {
            Run *last = &r[nr - 1];
            last->size = ext_times(last->size, size[k]);
            last->xstride = xs[k], last->sstride = ss[k];
        } else {
            r[nr++] = (Run){size[k], xs[k], ss[k], kept[k], false};
        }
        run_of[k] = nr - 1;
    }
    for (int j = 0; j < nd; j++) { /* s's dimensions from the outermost: the first kept */
        const int k = xpos[sdim[j] + 1];
        if (kept[k]) {
            r[run_of[k]].souter = true;
            break;
        }
    }
    return nr;
}

/* "i / STRIDE % SIZE * MUL" for a run, leaving out what is 1 or not
 * needed (no modulo for the outermost run: first) */
static const char *coord(Emit *e, const char *i, const Run *r, bool first, Extent stride,
                         Extent mul)
{
    const char *c = stride.c == 1 && !stride.with_n
                        ? i : arena_printf(e->arena, "%s / %s", i, ext_str(e->arena, stride, true));
    if (!first)
        c = arena_printf(e->arena, "%s %% %s", c, ext_str(e->arena, r->size, true));
    if (mul.c == 1 && !mul.with_n)
        return c;
    return arena_printf(e->arena, "%s * %s", c, ext_str(e->arena, mul, false));
}

static const char *plus(Arena *a, const char *sum, const char *term)
{
    return *sum ? arena_printf(a, "%s + %s", sum, term) : term;
}

Bcast bcast(Emit *e, const Node *n)
{
    Run r[4];
    const int nr = runs(e, n, r);
    Bcast b = {"", "", "", 1, false};
    Extent inner = {1, false};
    int outer_rep = nr;
    for (int k = 0; k < nr && outer_rep == nr; k++)
        if (!r[k].kept)
            outer_rep = k;
    for (int k = nr - 1; k >= 0; k--) { /* the repeated runs, the innermost fastest */
        if (r[k].kept)
            continue;
        b.step = plus(e->arena, b.step,
                      coord(e, "k", &r[k], k == outer_rep, inner, r[k].xstride));
        inner = ext_times(inner, r[k].size);
    }
    b.reps = inner.c;
    for (int k = 0; k < nr; k++) {
        if (!r[k].kept)
            continue;
        /* (x's index runs over every run, s's over the kept ones) */
        b.s_at = plus(e->arena, b.s_at, coord(e, "i", &r[k], k == 0, r[k].xstride, r[k].sstride));
        /* (s's index runs over s's runs: no modulo for its outermost) */
        b.base = plus(e->arena, b.base,
                      coord(e, "i", &r[k], r[k].souter, r[k].sstride, r[k].xstride));
    }
    b.uses_n = strstr(b.s_at, "(size_t)n") || strstr(b.base, "(size_t)n") ||
               strstr(b.step, "(size_t)n");
    return b;
}

const char *bcast_params(Emit *e, const Node *n, const char *params)
{
    if (!broadcasts(e, n) || !bcast(e, n).uses_n)
        return params;
    return arena_printf(e->arena, "%s, int n", params);
}

/* The statements giving d s's value i over a broadcast: the sum of part
 * (an expression of at, x's index: "dy[at]") over the values s[i]
 * repeated onto, written into ds[i] or added (Node.skip_acc), rounded
 * where s is bf16 (as autograd's sum_to_size and gradient sum are). */
static const char **bcast_ds(Emit *e, const Node *n, const char *part, int *nlines)
{
    const Bcast b = bcast(e, n);
    const bool lowp = e->p->values[n->in2].lowp;
    const char *sum = lowp ? lowp_expr(e, "sum") : "sum";
    if (n->skip_acc)
        sum = lowp ? lowp_expr(e, arena_printf(e->arena, "ds[i] + %s", sum)) : "ds[i] + sum";
    const char **l = arena_alloc(e->arena, sizeof *l * 7);
    if (b.reps == 1) { /* no repeat: s laid out otherwise than x; the sum of one part */
        l[0] = arena_printf(e->arena, "const size_t at = %s; /* x's value s[i] goes with */",
                            b.base);
        l[1] = arena_printf(e->arena, "const float sum = %s;", part);
        l[2] = arena_printf(e->arena, "ds[i] = %s;", sum);
        *nlines = 3;
        return l;
    }
    l[0] = arena_printf(e->arena, "const size_t base = %s; /* x's first value s[i] repeats onto */",
                        b.base);
    l[1] = "float sum = 0.0f;";
    l[2] = arena_printf(e->arena, "for (size_t k = 0; k < %lld; k++) {", (long long)b.reps);
    l[3] = arena_printf(e->arena, "    const size_t at = base + %s;", b.step);
    l[4] = arena_printf(e->arena, "    sum += %s;", part);
    l[5] = "}";
    l[6] = arena_printf(e->arena, "ds[i] = %s;", sum);
    *nlines = 7;
    return l;
}

void emit_bcast_ds(Emit *e, const Node *n, const char *part)
{
    int nl;
    const char **l = bcast_ds(e, n, part, &nl);
    const char *values = batch_count(e, (long long)shape_size(&e->p->values[n->in2].shape));
    emit_par_for(e, shape_size(&e->p->values[n->in2].shape), values);
    emitf(e, "for (size_t i = 0; i < %s; i++) {", values);
    for (int k = 0; k < nl; k++)
        emitf(e, "    %s", l[k]);
    emitf(e, "}");
}

void cu_bcast_ds(Emit *e, const Node *n, const char *what, const char *part, const char *params)
{
    int nl;
    const char **l = bcast_ds(e, n, part, &nl);
    params = bcast_params(e, n, params);
    cu_each(e, n, what, batch_count(e, (long long)shape_size(&e->p->values[n->in2].shape)),
            e->p->values[n->in2].lowp ? cu_lowp(e, params) : params, l, nl);
}

/* The cpu's epilogue of a linear or conv2d layer, over `rows` rows of y,
 * each of `len` values: the bias added (bias_at: its value at value k of
 * row i; NULL where the product added it, as a convolution's does), in
 * bf16 and fp16 the sum rounded (as autocast's low-precision product with
 * its bias is), then a fused activation, its value rounded again unless
 * the activation keeps the rounding (keeps_rounding: relu's does).  Each a
 * pass of its own over the row, none branching on the precision, so that
 * they vectorise at -O2 too (one loop rounding each value did not, where
 * -O3 unswitched it: cifar10's -O2 step 23.2 -> 22.2 ms).  Without a bias
 * or an activation here, the rounding pass is all of it: the layer's
 * output leaves its pass rounded (OpDef.rounds_output). */
void emit_epilogue(Emit *e, const Node *n, const char *rows, const char *len,
                          const char *bias_at)
{
    bool bias = bias_at && n->nparams > 1;
    if (!epilogue(e, n, bias)) {
        emitf(e, "/* bf16, fp16: the sum rounded */");
        emit_round(e, "net->lowp", "y", NULL, arena_printf(e->arena, "%s * %s", rows, len));
        return;
    }
    emit_par_for(e, e->p->values[n->out].size, arena_printf(e->arena, "%s * %s", rows, len));
    emitf(e, "for (size_t i = 0; i < %s; i++) {", rows);
    emitf(e, "    float *r = y + i * %s;", len);
    if (bias) {
        emitf(e, "    for (size_t k = 0; k < %s; k++)", len);
        emitf(e, "        r[k] += %s;", bias_at);
    }
    e->indent++;
    emit_round(e, "net->lowp", "r", NULL, len);
    if (n->fused) {
        emitf(e, "for (size_t k = 0; k < %s; k++)", len);
        emitf(e, "    r[k] = %s;", n->fused->op->act->fwd(e->arena, n->fused, "r[k]"));
        if (!keeps_rounding(e->p, n->fused, false))
            emit_round(e, "net->lowp", "r", NULL, len);
    }
    e->indent--;
    emitf(e, "}");
}

/* dy = dy * act'(y), for a fused activation, before the layer's own
 * backward; in bf16 rounded after, as a pass of its own (the loop then
 * has no branch on the precision, and vectorises: relu's select inside
 * one cost a mispredicted branch every other value), but for a relu's,
 * which are some of dy's values, rounded, and zeros. */
void emit_act_grad(Emit *e, const Node *n, int64_t size)
{
    if (!n->fused)
        return;
    emitf(e, "/* through the fused %s */", n->fused->op->sig.name);
    const Act *act = n->fused->op->act;
    const char *line = arena_printf(e->arena, "dy[i] = %s;",
                                    act_grad(e->arena, n->fused, act, "dy[i]", NULL, "y[i]")),
               *line16 = arena_printf(e->arena, "dy[i] = %s;",
                                      act_grad(e->arena, n->fused, act, "dy[i]", NULL, half_at(e, true)));
    emit_each_16(e, n, true, size, &line, &line16, 1);
    if (!keeps_rounding(e->p, n->fused, true))
        emit_round(e, "net->lowp", "dy", NULL, batch_count(e, (long long)size));
}


/* ------------------------------------------------------------ CUDA passes */

/* The same passes for the GPU (emit_cuda.c): the host statements launch,
 * through libnetrt_cuda's nrt_cu_* launchers, kernels defined here with
 * cu_kernel — netrt_kernels.cuh's templates with the shapes and tilings
 * written in, or elementwise loops (epilogues, activations) — over the
 * same memory plan.  Each launcher returns nonzero on a CUDA error; TRY
 * returns it. */

/* The names of a parameter list ("const float *x, float *y" -> "x, y"),
 * each after prefix ("&": "&x, &y", the host's NRT_ARGS of its locals of
 * the same names; lowp and half are the net's: "&net->lowp"). */
const char *param_names(Emit *e, const char *params, const char *prefix)
{
    const char *names = "";
    for (const char *p = params; *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *id = end;
        while (id > p && (isalnum((unsigned char)id[-1]) || id[-1] == '_'))
            id--;
        names = arena_printf(e->arena, "%s%s%s%s%.*s", names, *names ? ", " : "", prefix,
                             (end - id == 4 && (!strncmp(id, "lowp", 4) || !strncmp(id, "half", 4)))
                                 ? "net->"
                                 : "",
                             (int)(end - id), id);
        p = *end ? end + 1 : end;
    }
    return names;
}

/* An elementwise kernel NAME_INDEX_WHAT over count values and its launch:
 * params are its parameters after the count ("float *y, const float *b"),
 * each passed from the host local of the same name; body, its statements
 * for value i. */
void cu_each(Emit *e, const Node *n, const char *what, const char *count,
                    const char *params, const char *const *body, int nbody)
{
    const char **lines = arena_alloc(e->arena, sizeof *lines * (size_t)(nbody + 2));
    lines[0] = "NRT_EACH(i, count) {";
    for (int k = 0; k < nbody; k++)
        lines[k + 1] = arena_printf(e->arena, "    %s", body[k]);
    lines[nbody + 1] = "}";
    const char *k = cu_kernel(e, n, what, 0, arena_printf(e->arena, "size_t count, %s", params),
                              lines, nbody + 2);
    emitf(e, "TRY(nrt_cu_each(net, %s, %s, NRT_ARGS(%s), err));", k, count,
          param_names(e, params, "&"));
}

/* An elementwise kernel's parameters with the run's lowp after them, for
 * a body that rounds (lowp_expr). */
const char *cu_lowp(Emit *e, const char *params)
{
    return arena_printf(e->arena, "%s, int lowp", params);
}

/* y = act(y + b): the bias and the fused activation as one kernel, the
 * sum rounded in a bf16 run (and the activation's value, where it does not
 * keep the rounding); without either, the rounding alone: the layer's
 * output leaves it rounded (OpDef.rounds_output). */
void cu_epilogue(Emit *e, const Node *n, const char *count, const char *bias_index,
                        bool np)
{
    const char *expr = epilogue(e, n, n->nparams > 1);
    if (!expr) {
        emitf(e, "/* bf16, fp16: the sum rounded */");
        emit_round(e, "net->lowp", "y", NULL, count);
        return;
    }
    if (n->fused && !keeps_rounding(e->p, n->fused, false))
        expr = lowp_expr(e, expr); /* (the activation's value rounded too) */
    bool bias = n->nparams > 1;
    /* with np, the bias index is i / np */
    const char *params = !bias ? "float *y" : np ? "float *y, const float *b, size_t np"
                                                 : "float *y, const float *b";
    const char *body[2] = {
        arena_printf(e->arena, "float v = %s;",
                     lowp_expr(e, arena_printf(e->arena, "y[i]%s",
                                               bias ? arena_printf(e->arena, " + b[%s]", bias_index)
                                                    : ""))),
        arena_printf(e->arena, "y[i] = %s;", expr)};
    cu_each(e, n, "fwd_epilogue", count, cu_lowp(e, params), body, 2);
}

/* "(size_t)n * SIZE": the values of a batch of n samples of size floats */
const char *batch_count(Emit *e, long long size)
{
    return arena_printf(e->arena, "(size_t)n * %lld", size);
}

void cu_act_grad(Emit *e, const Node *n, const char *count)
{
    if (!n->fused)
        return;
    emitf(e, "/* through the fused %s */", n->fused->op->sig.name);
    const char *body[1] = {arena_printf(
        e->arena, "dy[i] = %s;",
        lowp_expr(e, act_grad(e->arena, n->fused, n->fused->op->act, "dy[i]", NULL,
                              cu_value_at(e, n, true))))};
    cu_each(e, n, "bwd_act", count,
            arena_printf(e->arena, "float *dy, %sint lowp", cu_value_params(e, n, true)), body, 1);
}


/* A kernel whose body is one call of a netrt_kernels.cuh template. */
const char *cu_call(Emit *e, const Node *n, const char *what, int bounds,
                           const char *params, const char *call)
{
    const char *body[1] = {call};
    return cu_kernel(e, n, what, bounds, params, body, 1);
}

/* At the end of n's backward pass, where its d x is a later part of the
 * gradient of x (x has other readers, whose backward came first: the
 * memory plan's Node.dx_buf): d x added to what is there.  In a bf16 run
 * the part is rounded where it is a bf16 gradient (x bf16, or the first
 * product's cast of it), the sum where x is bf16 (autograd sums two bf16
 * gradients in bf16, fp32 ones in fp32). */
void emit_grad_part(Emit *e, const Node *n)
{
    if (n->dx_buf < 0)
        return;
    const IrValue *x = &e->p->values[n->in];
    const char *part = x->lowp || casts_input(e, n) ? lowp_expr(e, "dx[i]") : "dx[i]";
    const char *sum = arena_printf(e->arena, "d_in[i] + %s", part);
    if (x->lowp)
        sum = lowp_expr(e, sum);
    const int64_t size = x->size;
    emitf(e, "/* d x is a part of d %%%d: added to the rest, in %s */", n->in,
          grad_expr(e, n->in));
    emitf(e, "float *d_in = %s;", grad_expr(e, n->in));
    if (ir_root(e->p, n->in) == 0) { /* the input's, where the caller asks for it */
        emitf(e, "if (!d_in)");
        emitf(e, "    return%s;", e->cuda ? " 0" : "");
    }
    if (e->cuda) {
        const char *body[1] = {arena_printf(e->arena, "d_in[i] = %s;", sum)};
        const char *params = "const float *dx, float *d_in";
        cu_each(e, n, "bwd_sum", batch_count(e, (long long)size),
                strstr(sum, "lowp") ? cu_lowp(e, params) : params, body, 1);
        return;
    }
    emit_each(e, size);
    emitf(e, "    d_in[i] = %s;", sum);
}

/* ------------------------------------------------------------ the table */

/* ops.h's NETC_OPS, in its order. */
#define NETC_OP_PTR_(name) &op_##name,
static const OpDef *const ops[] = {NETC_OPS(NETC_OP_PTR_)};
#undef NETC_OP_PTR_

const OpDef *const *op_table(int *n)
{
    *n = (int)(sizeof ops / sizeof ops[0]);
    return ops;
}

const OpDef *op_find(const char *name)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i]->sig.name, name))
            return ops[i];
    return NULL;
}
