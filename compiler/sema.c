/*
 * sema.c — checks and shape inference: from the AST to a Program.
 *
 * One walk over the statements sorts them (input, target, layers, loss,
 * optimizer, device, train, test, init), reporting duplicates and unknown
 * names; then the layers are bound to their ops and their shapes inferred
 * in order, each layer's shape rule seeing the shape before it; then the
 * loss is checked against the last shape and the target.  Every error is
 * reported with its place and the walk goes on, so one run shows them all.
 *
 * The result is the graph IR (nodes over values, a flat parameter table)
 * with every default filled in: later passes never look at the AST again,
 * except to quote a statement's line in the generated code.
 */
#include "netc.h"

#include <math.h>
#include <string.h>

#define MAX_ELEMS 2147483647.0 /* floats a tensor or a buffer may hold */

typedef struct Seen {
    const Stmt *input, *target, *loss, *optimizer, *device, *train, *valid, *test, *schedule,
        *precision;
} Seen;

static const char *stmt_word(StmtKind k)
{
    static const char *const words[] = {"input", "target", "", "loss", "optimizer",
                                        "device", "train", "test", "init", "valid",
                                        "schedule", "transform", "precision"};
    return words[k];
}

static void once(Program *p, const Stmt **slot, const Stmt *s)
{
    if (*slot) {
        diag_error(p->diag, s->loc, "a second '%s' statement", stmt_word(s->kind));
        diag_note(p->diag, (*slot)->loc, "the first is here");
        return;
    }
    *slot = s;
}

/* The plural of the nouns unknown() is given: "losses", "layers". */
static const char *plural(Arena *a, const char *noun)
{
    size_t n = strlen(noun);
    return arena_printf(a, "%s%s", noun, n && noun[n - 1] == 's' ? "es" : "s");
}

static void unknown(Program *p, Loc loc, const char *what, const char *name,
                    const char *const *names, int n, const char *list)
{
    diag_error(p->diag, loc, "unknown %s '%s'", what, name);
    const char *near = suggest(name, names, n);
    if (near)
        diag_note(p->diag, loc, "did you mean '%s'?", near);
    else
        diag_note(p->diag, loc, "%s: %s", plural(p->arena, what), list);
}

/* Looks up call->text in a signature table, reporting unknown names. */
static const Sig *find_sig(Program *p, const Sig *table, size_t stride, const Value *call,
                           const char *what)
{
    const Sig *s = sig_find(table, stride, call->text);
    if (s)
        return s;
    const char *names[16];
    char list[256] = "";
    int n = 0;
    size_t len = 0;
    for (const Sig *t = table; t->name && n < 16; t = sig_next(t, stride)) {
        names[n++] = t->name;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", t->name);
    }
    unknown(p, call->loc, what, call->text, names, n, list);
    return NULL;
}

/* ------------------------------------------------------------- the input */

static void check_input(Program *p, const Stmt *s)
{
    p->input_name = s->name;
    if (s->ndims == 0) {
        diag_error(p->diag, s->loc, "input '%s' has no shape", s->name);
        diag_note(p->diag, s->loc, "give its dimensions, e.g. 'input %s[13]' or 'input %s[3, 32, 32]'",
                  s->name, s->name);
        return;
    }
    if (s->ndims > 3) {
        diag_error(p->diag, s->dims[3]->loc, "input '%s' has %d dimensions; at most 3 are supported",
                   s->name, s->ndims);
        return;
    }
    double total = 1;
    p->input.rank = s->ndims;
    for (int i = 0; i < s->ndims; i++) {
        const Value *v = s->dims[i];
        if (v->kind != V_NUM || v->num != floor(v->num) || v->num < 1) {
            if (v->kind == V_NUM)
                diag_error(p->diag, v->loc, "dimension %d of input '%s' must be a positive whole number, got %s",
                           i + 1, s->name, v->text);
            else
                diag_error(p->diag, v->loc, "dimension %d of input '%s' must be a positive whole number",
                           i + 1, s->name);
            p->input.rank = 0;
            return;
        }
        total *= v->num;
        p->input.d[i] = (int64_t)fmin(v->num, MAX_ELEMS);
    }
    if (total > MAX_ELEMS) {
        diag_error(p->diag, s->loc, "input '%s' is too large: %.0f values a sample",
                   s->name, total);
        p->input.rank = 0;
    }
}

/* ---------------------------------------------------------------- layers */

/* The init a parameter gets when its layer names none: the model's
 * `init KIND ...` for its kind, else the model's `init ...`, else
 * PyTorch's default. */
typedef struct Inits {
    const char *kind;     /* NULL: every layer */
    nrt_init weight, bias;
    bool has_weight, has_bias;
} Inits;

/* Whether layers of op take initializers: those with weight_init and
 * bias_init arguments (not batchnorm, whose ones and zeros stay). */
static bool takes_inits(const OpDef *op)
{
    for (int i = 0; i < MAX_ARGS && op->sig.args[i].name; i++)
        if (op->sig.args[i].type == A_INIT)
            return true;
    return false;
}

static void apply_inits(Program *p, Node *n, const Inits *inits, int ninits)
{
    if (!takes_inits(n->op))
        return;
    for (int k = 0; k < n->nparams; k++) {
        Param *prm = &p->params[n->param0 + k];
        /* per-layer weight_init / bias_init */
        int slot = -1;
        for (int i = 0; i < MAX_ARGS && n->op->sig.args[i].name; i++)
            if (!strcmp(n->op->sig.args[i].name, prm->is_bias ? "bias_init" : "weight_init"))
                slot = i;
        if (slot >= 0 && n->args[slot].given) {
            prm->init = n->args[slot].init;
            continue;
        }
        /* kind-specific first, then model-wide */
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < ninits; i++) {
                const Inits *in = &inits[i];
                if (pass == 0 ? !in->kind || strcmp(in->kind, n->op->sig.name) : in->kind != NULL)
                    continue;
                if (prm->is_bias ? in->has_bias : in->has_weight) {
                    prm->init = prm->is_bias ? in->bias : in->weight;
                    goto next;
                }
            }
    next:;
    }
}

static bool check_name(Program *p, const Stmt *s, int index)
{
    if (!s->name)
        return true;
    if (p->input_name && !strcmp(s->path, p->input_name)) {
        diag_error(p->diag, s->name_loc, "'%s' is the model's input; give the layer another name",
                   s->name);
        return false;
    }
    for (int i = 0; i < index; i++) {
        const Stmt *t = p->nodes[i].stmt;
        if (t->name && !strcmp(t->path, s->path)) {
            diag_error(p->diag, s->name_loc, "a second layer named '%s'", s->name);
            diag_note(p->diag, t->name_loc, "the first is here");
            return false;
        }
    }
    for (int i = 0; i < p->model->nuses; i++) {
        const Use *u = p->model->uses[i];
        if (u->stmt->name && !strcmp(u->name, s->path) && u->stmt != s) {
            diag_error(p->diag, s->name_loc, "a second layer named '%s'", s->name);
            diag_note(p->diag, u->stmt->name_loc, "the first is here");
            return false;
        }
    }
    return true;
}

/* The block a layer is written in (its innermost use of a block), or
 * NULL: the model's level.  Names are read in that scope. */
static const Use *block_scope(const Use *u)
{
    while (u && !u->block)
        u = u->outer;
    return u;
}

/* The path `name` written in scope (a use of a block, or NULL) stands for. */
static const char *scoped_path(const Program *p, const Use *scope, const char *name)
{
    return scope ? arena_printf(p->arena, "%s.%s", scope->name, name) : name;
}

/* The value `name` written in scope (a use of a block, or NULL) gives: a
 * layer's, or the last of a block's or a sequence's, built before; -1 if
 * none. */
static int lookup(const Program *p, const Use *scope, const char *name)
{
    if (scope && !strcmp(name, "in"))
        return p->use_in[scope->index];
    if (!scope && p->input_name && !strcmp(name, p->input_name))
        return 0; /* the model's input */
    const char *path = scoped_path(p, scope, name);
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i].stmt->name && !strcmp(p->nodes[i].stmt->path, path))
            return p->nodes[i].out;
    for (int i = 0; i < p->model->nuses; i++) {
        const Use *u = p->model->uses[i];
        if (u->stmt->name && p->use_out[i] >= 0 && !strcmp(u->name, path))
            return p->use_out[i];
    }
    return -1;
}

/* The value `name` gives, written in the statement `at` (whose scope is
 * that of use `in`), or -1 with an error saying why not. */
static int resolve(Program *p, const Use *in, const Stmt *at, const char *name, Loc loc,
                   const char *what)
{
    const Use *scope = block_scope(in);
    int v = lookup(p, scope, name);
    if (v >= 0)
        return v;
    const char *names[64];
    int k = 0;
    for (int i = 0; i < p->nnodes && k < 64; i++) { /* the layers before, in this scope */
        const Stmt *t = p->nodes[i].stmt;
        if (t->name && block_scope(t->use) == scope)
            names[k++] = t->name;
    }
    if (scope && k < 64)
        names[k++] = "in";
    diag_error(p->diag, loc, "no layer named '%s' before this one", name);
    const char *near = suggest(name, names, k);
    const char *path = scoped_path(p, scope, name);
    const Stmt *later = at->next;
    while (later && !(later->kind == S_LAYER && later->name && !strcmp(later->path, path)))
        later = later->next;
    if (later)
        diag_note(p->diag, later->name_loc, "'%s' is a later layer: %s one before it", name, what);
    else if (scope && p->input_name && !strcmp(name, p->input_name))
        diag_note(p->diag, loc, "the model's input is out of a block's sight: 'in' is the "
                  "block's input");
    else if (near)
        diag_note(p->diag, loc, "did you mean '%s'?", near);
    else if (!scope && !strcmp(name, "in"))
        diag_note(p->diag, loc, "'in' is a block's input, inside a block");
    else
        diag_note(p->diag, loc, "name the layer to read by writing '%s = ' before it", name);
    return -1;
}

int named_value(Program *p, const Node *n, const char *name, Loc loc, const char *what)
{
    return resolve(p, n->stmt->use, n->stmt, name, loc, what);
}

/* The value the layer of s reads: its `from`, else the input of the uses
 * that start with it (which are given theirs here, outermost first), else
 * the value before. */
static int input_of(Program *p, const Stmt *s)
{
    const Use *chain[64];
    int k = 0;
    for (const Use *u = s->use; u && u->first == s && k < 64; u = u->outer)
        chain[k++] = u;
    while (k-- > 0) {
        const Use *u = chain[k];
        int in = u->outer && u->outer->first == s ? p->use_in[u->outer->index] : p->nvalues - 1;
        if (u->stmt->from)
            in = resolve(p, u->outer, s, u->stmt->from, u->stmt->from_loc, "a layer reads");
        if (in < 0)
            return -1;
        p->use_in[u->index] = in;
    }
    if (s->from)
        return resolve(p, s->use, s, s->from, s->from_loc, "a layer reads");
    return s->use && s->use->first == s ? p->use_in[s->use->index] : p->nvalues - 1;
}

/* The uses that end with s (the layer of node n) give n's output. */
static void close_uses(Program *p, const Stmt *s, const Node *n)
{
    for (const Use *u = s->use; u && u->last == s; u = u->outer)
        p->use_out[u->index] = n->out;
}

/* After an error in a layer of a block: which use of it this was. */
static void note_uses(Program *p, const Stmt *s)
{
    for (const Use *u = block_scope(s->use); u; u = block_scope(u->outer))
        diag_note(p->diag, u->stmt->loc, "in '%s', a use of block '%s'", u->name, u->block->name);
}

/* The name in C identifiers: the path with '_' for '.', made unique. */
static const char *c_name(Program *p, const Node *n)
{
    char *c = arena_strdup(p->arena, n->name);
    for (char *q = c; *q; q++)
        if (*q == '.')
            *q = '_';
    for (int i = 0; i < p->nnodes; i++)
        if (!strcmp(p->nodes[i].cname, c))
            return arena_printf(p->arena, "%s_%d", c, n->index);
    return c;
}

/* Node n for layer s, its shape inferred; false on an error. */
static bool build_layer(Program *p, Node *n, const Stmt *s, bool shapes, const Inits *inits,
                        int ninits, const char *const *names, int nops, const char *list)
{
    n->stmt = s;
    n->name = s->path;
    n->cname = c_name(p, n);
    n->op = op_find(s->call->text);
    if (!n->op) {
        if (sig_find(ENTRIES(losses), s->call->text)) {
            diag_error(p->diag, s->call->loc, "'%s' is a loss, not a layer", s->call->text);
            diag_note(p->diag, s->call->loc, "write 'loss %s'", s->call->text);
            p->misplaced_loss = true;
        } else if (sig_find(ENTRIES(optimizers), s->call->text)) {
            diag_error(p->diag, s->call->loc, "'%s' is an optimizer, not a layer", s->call->text);
            diag_note(p->diag, s->call->loc, "write 'optimizer %s(...)'", s->call->text);
            p->misplaced_optimizer = true;
        } else {
            unknown(p, s->call->loc, "layer", s->call->text, names, nops, list);
        }
        return false;
    }
    bool named = check_name(p, s, p->nnodes);
    if (!bind_args(p, &n->op->sig, s->call, n->args) || !named || !shapes)
        return false; /* no shapes after an error: they would only cascade */
    n->in = input_of(p, s);
    n->in2 = -1;
    if (n->in < 0)
        return false;
    n->out = p->nvalues++;
    p->values[n->out].alias = -1;
    if (!n->op->shape(p, n))
        return false;
    Shape *o = &p->values[n->out].shape;
    double size = 1;
    for (int i = 0; i < o->rank; i++)
        size *= (double)o->d[i];
    if (size > MAX_ELEMS || (double)p->param_count > MAX_ELEMS) {
        diag_error(p->diag, s->loc, "this layer makes the model too large (%s values a sample, "
                   "%zu parameters; the limit is %.0f of each)",
                   shape_str(p->arena, o), p->param_count, MAX_ELEMS);
        return false;
    }
    p->values[n->out].size = shape_size(o);
    apply_inits(p, n, inits, ninits);
    close_uses(p, s, n);
    return true;
}

static void build_layers(Program *p, const Stmt *first, int nlayers,
                         const Inits *inits, int ninits)
{
    p->nodes = arena_alloc(p->arena, sizeof *p->nodes * (size_t)(nlayers + 1));
    p->values = arena_alloc(p->arena, sizeof *p->values * (size_t)(nlayers + 2));
    p->values[0].shape = p->input;
    p->nvalues = 1;
    int nuses = p->model->nuses;
    p->use_in = arena_alloc(p->arena, sizeof *p->use_in * (size_t)(nuses + 1));
    p->use_out = arena_alloc(p->arena, sizeof *p->use_out * (size_t)(nuses + 1));
    for (int i = 0; i < nuses; i++)
        p->use_in[i] = p->use_out[i] = -1;
    int nops;
    const OpDef *const *table = op_table(&nops);
    const char *names[32];
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < nops && i < 32; i++) {
        names[i] = table[i]->sig.name;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    }

    bool ok = p->input.rank > 0;
    int index = 0;
    for (const Stmt *s = first; s; s = s->next) {
        if (s->kind != S_LAYER)
            continue;
        Node *n = &p->nodes[p->nnodes];
        n->index = index++;
        int errors = p->diag->errors;
        if (build_layer(p, n, s, ok, inits, ninits, names, nops, list))
            p->nnodes++;
        else
            ok = false;
        if (p->diag->errors > errors)
            note_uses(p, s);
    }
    p->values[0].size = shape_size(&p->input);
    p->values[0].alias = -1;
}

/* ------------------------------------------------------ loss and target */

/* The first loss for targets of kind: what a note suggests. */
static const char *loss_for(int kind)
{
    for (const LossDef *l = losses; l->sig.name; l++)
        if (l->target == kind)
            return l->sig.name;
    return "?";
}

static void check_loss(Program *p, const Seen *seen)
{
    const Shape *out = &p->values[p->nvalues - 1].shape;
    const char *name = p->loss->sig.name;
    if (out->rank != 1) {
        diag_error(p->diag, seen->loss->loc, "%s needs a flat model output, got %s", name,
                   shape_str(p->arena, out));
        diag_note(p->diag, seen->loss->loc, "end the model with 'flatten' and a linear layer");
        return;
    }
    int64_t k = out->d[0];
    if (seen->target && p->target_kind == 0)
        return; /* the target statement was wrong, and said so */
    if (!seen->target) {
        p->target_kind = p->loss->target;
        p->n_out = (int)k;
        return;
    }
    const char *tname = p->target_kind == NRT_TARGET_CLASS ? "class" : "value";
    if (p->loss->target != p->target_kind) {
        const bool cls = p->loss->target == NRT_TARGET_CLASS;
        diag_error(p->diag, seen->loss->loc, "%s needs %s targets, but the target is %s(%d)", name,
                   cls ? "class" : "value", tname, p->n_out);
        diag_note(p->diag, seen->target->loc, "declare 'target %s' or use 'loss %s'",
                  cls ? "class(N)" : "value(N)", loss_for(p->target_kind));
    } else if (k != p->n_out) {
        diag_error(p->diag, seen->loss->loc, "the model's output %s does not match the target %s(%d)",
                   shape_str(p->arena, out), tname, p->n_out);
        diag_note(p->diag, p->nodes[p->nnodes - 1].stmt->loc,
                  "the last layer should produce %d value%s, e.g. linear(%d)", p->n_out,
                  p->n_out == 1 ? "" : "s", p->n_out);
    }
}

static void check_optimizer(Program *p, const Stmt *s)
{
    const OptimDef *def =
        (const OptimDef *)find_sig(p, ENTRIES(optimizers), s->call, "optimizer");
    ArgVal a[MAX_ARGS];
    if (!def || !bind_args(p, &def->sig, s->call, a))
        return;
    p->optimizer = def;
    p->optim = (nrt_optim){.kind = def->kind, .lr = a[0].v[0]};
    def->bind(p, s->call, a, &p->optim);
}

/* ---------------------------------------------------------------- schedule */

static void check_schedule(Program *p, const Stmt *s)
{
    const ScheduleDef *def =
        (const ScheduleDef *)find_sig(p, ENTRIES(schedules), s->call, "schedule");
    ArgVal a[MAX_ARGS];
    if (!def || !bind_args(p, &def->sig, s->call, a))
        return;
    p->schedule = (nrt_schedule){.kind = def->kind};
    p->scheduler = def;
    def->bind(a, &p->schedule);
}

/* ------------------------------------------------------------ data, device */

/* train, valid or test's source; the latter two may be a part of the
 * training set held out. */
static bool check_source(Program *p, const Value *call, nrt_source *src,
                         bool training)
{
    const SourceDef *def = (const SourceDef *)find_sig(p, ENTRIES(sources), call, "data source");
    ArgVal a[MAX_ARGS];
    if (!def || !bind_args(p, &def->sig, call, a))
        return false;
    src->kind = def->sig.name;
    if (def->part) {
        if (training) {
            diag_error(p->diag, call->loc, "%s(...) is a part of the training data; "
                       "training needs a file", def->sig.name);
            diag_note(p->diag, call->loc, "'valid %s(F)' or 'test %s(F)' hold a part out",
                      def->sig.name, def->sig.name);
            return false;
        }
        if (a[0].v[0] <= 0 || a[0].v[0] >= 1) {
            diag_error(p->diag, a[0].loc, "the held-out fraction must be between 0 and 1 (exclusive)");
            return false;
        }
        def->bind(a, src);
        return true;
    }
    src->path = a[0].s;
    src->label = -1;
    src->scale = 1;
    def->bind(a, src);
    if (!src->path[0]) {
        diag_error(p->diag, call->loc, "the data path is empty");
        return false;
    }
    return true;
}

static const Sig train_sig = {
    "train", "training options",
    {{"batch", A_INT, "32", 1, 1048576, NULL, NULL},
     {"epochs", A_INT, "10", 0, 1e9, NULL, NULL},
     {"seed", A_INT, "0", 0, 9007199254740991.0, NULL, NULL}}};

static void check_train(Program *p, const Stmt *s)
{
    check_source(p, s->call, &p->train, true);
    Value opts = {V_CALL, s->loc, 0, "train", s->opts, s->nopts};
    ArgVal a[MAX_ARGS];
    for (int i = 0; i < s->nopts; i++)
        if (!s->opts[i].key)
            return;
    if (bind_args(p, &train_sig, &opts, a)) {
        p->batch = (int)a[0].v[0];
        p->epochs = (int)a[1].v[0];
        p->seed = (uint64_t)a[2].v[0];
    }
}

/* The precision of the products and of the values between layers (the
 * parameters, the losses and the optimizer stay in fp32). */
static void check_precision(Program *p, const Stmt *s)
{
    p->precision = nrt_precision_parse(s->name);
    if (p->precision >= 0)
        return;
    p->precision = NRT_FP32;
    const char *const names[] = {nrt_precision_name(NRT_FP32), nrt_precision_name(NRT_BF16),
                                 nrt_precision_name(NRT_FP16)};
    unknown(p, s->name_loc, "precision", s->name, names, 3, "fp32, bf16, fp16");
}

/* Which values are bf16 in a bf16 run, as torch.autocast has them: a
 * product's output (linear, conv2d, rnn: bf16 inputs, fp32 accumulation,
 * the bias added, then rounded), and what a layer makes of a bf16 value
 * (an activation, pooling, dropout, batchnorm: computed in fp32 from it,
 * the result rounded).  The values before the first product are fp32, and
 * so are the layers' passes there; a product whose input is fp32 (the
 * first, and one reading such a value again: add(x) of the input) casts
 * it (a copy, the fp32 value kept for the other readers). */
/* Every layer's output is read: by a later layer or the loss. */
static void check_all_read(Program *p)
{
    const int *readers = ir_readers(p);
    for (int i = 0; i + 1 < p->nnodes; i++) {
        const Node *n = &p->nodes[i], *next = &p->nodes[i + 1];
        if (readers[n->out])
            continue;
        diag_error(p->diag, n->stmt->loc, "nothing reads this layer's output");
        const Stmt *from = next->stmt; /* the next layer's `from`, or its block's */
        for (const Use *u = from->use; !from->from && u && u->first == next->stmt; u = u->outer)
            from = u->stmt;
        if (from->from)
            diag_note(p->diag, from->from_loc, "the next layer reads '%s' instead: name this "
                      "one and add it, or leave it out", from->from);
    }
}

static void plan_precision(Program *p)
{
    p->first_product = -1;
    p->cast_size = 0;
    for (int i = 0; i < p->nnodes; i++) {
        Node *n = &p->nodes[i];
        n->cast_offset = -1;
        if (n->op->product && !p->values[n->in].lowp) { /* a copy cast, as autocast's */
            n->cast_offset = p->cast_size;
            p->cast_size += p->values[n->in].size;
        }
        if (n->op->product && p->first_product < 0)
            p->first_product = i;
        /* (a sum of a bf16 value and an fp32 one is fp32, as PyTorch's) */
        p->values[n->out].lowp = n->op->product || (p->values[n->in].lowp &&
                                                    (n->in2 < 0 || p->values[n->in2].lowp));
    }
}

static void check_device(Program *p, const Stmt *s)
{
    p->device_stmt = s;
    if (!strcmp(s->name, "cuda") && s->device_index >= 0) {
        p->device = arena_printf(p->arena, "cuda:%d", s->device_index);
        return;
    }
    if (s->device_index == -1 &&
        (!strcmp(s->name, "cpu") || !strcmp(s->name, "cuda") || !strcmp(s->name, "auto"))) {
        p->device = s->name;
        return;
    }
    if (!strcmp(s->name, "cuda") && s->device_index == -2) {
        diag_error(p->diag, s->name_loc, "the device index of '%s' must be a whole number",
                   s->device_text);
        return;
    }
    diag_error(p->diag, s->name_loc, "unknown device '%s'",
               s->device_text ? s->device_text : s->name);
    diag_note(p->diag, s->name_loc, "devices: cpu, cuda, cuda:N, auto");
}

static const Sig init_stmt_sig = {
    "init", "initializers",
    {{"weight", A_INIT, "", 0, 0, NULL, NULL}, {"bias", A_INIT, "", 0, 0, NULL, NULL}}};

static bool check_init(Program *p, const Stmt *s, Inits *out)
{
    out->kind = s->name;
    if (s->name) {
        /* the layers that take initializers (an A_INIT argument), from the op table */
        int nops, nkinds = 0;
        const OpDef *const *ops = op_table(&nops);
        const char *kinds[64], *list = "";
        for (int i = 0; i < nops && nkinds < 64; i++)
            if (takes_inits(ops[i])) {
                kinds[nkinds++] = ops[i]->sig.name;
                list = arena_printf(p->arena, "%s%s%s", list, *list ? ", " : "", ops[i]->sig.name);
            }
        const OpDef *op = op_find(s->name);
        if (!op) {
            unknown(p, s->name_loc, "layer", s->name, kinds, nkinds, list);
            return false;
        }
        if (!takes_inits(op)) {
            diag_error(p->diag, s->name_loc, "'init %s': %s takes no initializers (the layers "
                       "that do: %s)", s->name, s->name, list);
            if (!strncmp(s->name, "batchnorm", 9))
                diag_note(p->diag, s->name_loc, "a batchnorm's weight starts at ones and its bias "
                          "at zeros, as PyTorch's");
            return false;
        }
    }
    Value opts = {V_CALL, s->loc, 0, "init", s->opts, s->nopts};
    ArgVal a[MAX_ARGS];
    if (!bind_args(p, &init_stmt_sig, &opts, a))
        return false;
    out->has_weight = a[0].given;
    out->weight = a[0].init;
    out->has_bias = a[1].given;
    out->bias = a[1].init;
    return true;
}

/* ------------------------------------------------------------ transforms */

static bool is_source(const nrt_source *s, const char *kind)
{
    return s->kind && !strcmp(s->kind, kind);
}

static bool reads_images(const Program *p)
{
    return is_source(&p->train, "images") || is_source(&p->valid, "images") ||
           is_source(&p->test, "images");
}

/* transform_sigs' entries, in its order */
enum { TF_RESIZE, TF_FLIP, TF_TO_TENSOR, TF_NORMALIZE, TF_KINDS };

/* The transform statements, in the order written: each at most once,
 * resize before to_tensor (torchvision resizes a tensor with another
 * filter) and normalize after it (Normalize takes a tensor); flips go
 * anywhere, as they commute with the rest. */
static void check_transforms(Program *p, const Model *m)
{
    nrt_transforms *t = &p->transforms;
    const Stmt *first[TF_KINDS] = {0};
    for (const Stmt *s = m->stmts; s; s = s->next) {
        if (s->kind != S_TRANSFORM)
            continue;
        const Sig *sig = find_sig(p, SIGS(transform_sigs), s->call, "transform");
        ArgVal a[MAX_ARGS];
        if (!sig || !bind_args(p, sig, s->call, a))
            continue;
        const int k = (int)(sig - transform_sigs);
        if (first[k]) {
            diag_error(p->diag, s->call->loc, "a second '%s' transform", sig->name);
            diag_note(p->diag, first[k]->call->loc, "the first is here");
            continue;
        }
        first[k] = s;
        if (!reads_images(p)) {
            diag_error(p->diag, s->call->loc, "transforms apply to images(...) data, and the "
                       "model reads none");
            diag_note(p->diag, s->call->loc, "e.g. 'train images(\"data/desc_train.csv\")'");
            continue;
        }
        const int c = p->input.rank == 3 ? (int)p->input.d[0] : 0;
        switch (k) {
        case TF_RESIZE:
            if (first[TF_TO_TENSOR]) {
                diag_error(p->diag, s->call->loc, "resize works on the decoded pixels: put it "
                           "before to_tensor");
                continue;
            }
            if (p->input.rank == 3 && (a[0].v[0] != (double)p->input.d[1] ||
                                       a[1].v[0] != (double)p->input.d[2])) {
                diag_error(p->diag, s->call->loc, "resize(%g, %g) makes %gx%g images, but the "
                           "input is %s", a[0].v[0], a[1].v[0], a[1].v[0], a[0].v[0],
                           shape_str(p->arena, &p->input));
                diag_note(p->diag, s->call->loc, "resize(height, width): 'resize(%lld, %lld)'",
                          (long long)p->input.d[1], (long long)p->input.d[2]);
                continue;
            }
            t->resize_h = (int)a[0].v[0];
            t->resize_w = (int)a[1].v[0];
            break;
        case TF_FLIP:
            t->flip_p = a[0].v[0];
            break;
        case TF_TO_TENSOR:
            t->to_tensor = 1;
            break;
        case TF_NORMALIZE:
            for (int i = 0; i < 2; i++) {
                if (c && a[i].nv != 1 && a[i].nv != c) {
                    diag_error(p->diag, a[i].loc, "normalize's %s has %d values, but the "
                               "input has %d channel%s", i ? "std" : "mean", a[i].nv, c,
                               c == 1 ? "" : "s");
                    diag_note(p->diag, a[i].loc, "give one value a channel, or one for all");
                    goto next;
                }
                for (int ch = 0; ch < NRT_MAX_CHANNELS; ch++) {
                    const double v = a[i].v[a[i].nv == 1 ? 0 : ch];
                    if (i && v == 0) {
                        diag_error(p->diag, a[i].loc, "normalize's std must not be 0");
                        goto next;
                    }
                    (i ? t->std : t->mean)[ch] = (float)v;
                }
            }
            t->normalize = 1;
            break;
        }
        if (k == TF_TO_TENSOR && first[TF_NORMALIZE])
            diag_error(p->diag, first[TF_NORMALIZE]->call->loc, "normalize works on to_tensor's floats: "
                       "put it after to_tensor");
    next:;
    }
}

/* CIFAR-10 records hold 3x32x32 images and a class, image lists images
 * with a class: the model must take that, which netc can tell now instead
 * of the program at run time. */
static void check_data_shapes(Program *p, const Seen *seen)
{
    const Stmt *stmts[3] = {seen->train, seen->valid, seen->test};
    const nrt_source *srcs[3] = {&p->train, &p->valid, &p->test};
    for (int i = 0; i < 3; i++) {
        if (stmts[i] && is_source(srcs[i], "images")) {
            if (p->input.rank != 3 || (p->input.d[0] != 1 && p->input.d[0] != 3))
                diag_error(p->diag, stmts[i]->call->loc,
                           "images(...) data needs an input [1 or 3, height, width] (grey or "
                           "RGB), but the input is %s", shape_str(p->arena, &p->input));
            else if (p->target_kind != NRT_TARGET_CLASS)
                diag_error(p->diag, stmts[i]->call->loc,
                           "images(...) data holds class labels, but the target is value(%d)",
                           p->n_out);
            continue;
        }
        if (!stmts[i] || !is_source(srcs[i], "cifar10"))
            continue;
        if (shape_size(&p->input) != 3 * 32 * 32)
            diag_error(p->diag, stmts[i]->call->loc,
                       "cifar10 data holds 3x32x32 images, but the input is %s",
                       shape_str(p->arena, &p->input));
        else if (p->target_kind != NRT_TARGET_CLASS)
            diag_error(p->diag, stmts[i]->call->loc,
                       "cifar10 data holds class labels, but the target is value(%d)", p->n_out);
        else if (p->n_out > 256)
            diag_error(p->diag, stmts[i]->call->loc,
                       "cifar10 labels are one byte, but the target has %d classes", p->n_out);
    }
}

/* ------------------------------------------------------------------ sema */

Program *sema_check(Diag *d, Arena *a, const Model *m)
{
    Program *p = arena_alloc(a, sizeof *p);
    p->diag = d;
    p->arena = a;
    p->model = m;
    p->name = m->name;
    p->device = "auto";
    p->batch = 32;
    p->epochs = 10;
    p->seed = 0;
    p->train = p->valid = p->test = (nrt_source){NULL, NULL, -1, 0, 1.0f, 0, 0, NULL, 0};

    Seen seen = {0};
    int nlayers = 0, ninits = 0;
    for (const Stmt *s = m->stmts; s; s = s->next)
        nlayers += s->kind == S_LAYER, ninits += s->kind == S_INIT;
    Inits *inits = arena_alloc(a, sizeof *inits * (size_t)(ninits + 1));
    ninits = 0;

    for (const Stmt *s = m->stmts; s; s = s->next) {
        switch (s->kind) {
        case S_INPUT:
            once(p, &seen.input, s);
            if (seen.input == s)
                check_input(p, s);
            break;
        case S_TARGET: {
            once(p, &seen.target, s);
            const Sig *sig = find_sig(p, SIGS(target_sigs), s->call, "target");
            ArgVal av[MAX_ARGS];
            if (sig && bind_args(p, sig, s->call, av)) {
                p->target_kind = !strcmp(sig->name, "class") ? NRT_TARGET_CLASS : NRT_TARGET_VALUE;
                p->n_out = (int)av[0].v[0];
                if (p->target_kind == NRT_TARGET_CLASS && p->n_out < 2)
                    diag_error(p->diag, av[0].loc, "a classification needs at least 2 classes");
            }
            break;
        }
        case S_LOSS:
            once(p, &seen.loss, s);
            if (seen.loss == s) {
                p->loss = (const LossDef *)find_sig(p, ENTRIES(losses), s->call, "loss");
                p->loss_stmt = s;
                ArgVal av[MAX_ARGS];
                if (p->loss && !bind_args(p, &p->loss->sig, s->call, av))
                    p->loss = NULL;
                if (p->loss)
                    p->loss_spec = (nrt_loss_spec){
                        .kind = p->loss->kind,
                        .arg = p->loss->sig.args[0].name ? (float)av[0].v[0] : 0.0f};
            }
            break;
        case S_OPTIMIZER:
            once(p, &seen.optimizer, s);
            if (seen.optimizer == s)
                check_optimizer(p, s);
            break;
        case S_DEVICE:
            once(p, &seen.device, s);
            if (seen.device == s)
                check_device(p, s);
            break;
        case S_TRAIN:
            once(p, &seen.train, s);
            if (seen.train == s)
                check_train(p, s);
            break;
        case S_VALID:
            once(p, &seen.valid, s);
            if (seen.valid == s)
                check_source(p, s->call, &p->valid, false);
            break;
        case S_TEST:
            once(p, &seen.test, s);
            if (seen.test == s)
                check_source(p, s->call, &p->test, false);
            break;
        case S_PRECISION:
            once(p, &seen.precision, s);
            if (seen.precision == s)
                check_precision(p, s);
            break;
        case S_SCHEDULE:
            once(p, &seen.schedule, s);
            if (seen.schedule == s)
                check_schedule(p, s);
            break;
        case S_INIT:
            if (check_init(p, s, &inits[ninits]))
                ninits++;
            break;
        case S_LAYER:
        case S_TRANSFORM:
            break;
        }
    }

    if (nlayers > 0 && seen.input)
        build_layers(p, m->stmts, nlayers, inits, ninits);
    Loc at = m->loc;
    if (!seen.input) {
        diag_error(d, at, "model '%s' has no input", m->name);
        diag_note(d, at, "declare it first, e.g. 'input x[13]' or 'input image[3, 32, 32]'");
    }
    if (!seen.loss && !p->misplaced_loss) {
        diag_error(d, at, "model '%s' has no loss", m->name);
        diag_note(d, at, "add 'loss cross_entropy' (classes) or 'loss mse' (values)");
    }
    if (!seen.optimizer && !p->misplaced_optimizer) {
        diag_error(d, at, "model '%s' has no optimizer", m->name);
        diag_note(d, at, "add e.g. 'optimizer sgd(lr=0.01)' or 'optimizer adam(lr=1e-3)'");
    }
    if (nlayers == 0) {
        diag_error(d, at, "model '%s' has no layers", m->name);
        diag_note(d, at, "add layers between the input and the loss, e.g. 'linear(10)'");
        return NULL;
    }
    if (seen.input) /* the data's, whatever the layers' errors */
        check_transforms(p, m);
    if (!seen.input || d->errors)
        return NULL;
    if (p->loss)
        check_loss(p, &seen);
    check_data_shapes(p, &seen);
    check_all_read(p);
    if (d->errors)
        return NULL;
    plan_precision(p);
    if (d->errors)
        return NULL;
    return p;
}

/* ----------------------------------------------------------------- summary */

/* A layer's line in --check: its path where it has a name of its own or
 * parameters inside a block, its op, what it reads besides the layer
 * before (add(NAME), from NAME). */
static const char *summary_label(const Program *p, const Node *n)
{
    const char *op = n->in2 >= 0 ? arena_printf(p->arena, "%s(%s)", n->op->sig.name, n->args[0].s)
                                 : n->op->sig.name;
    if (n->stmt->from)
        op = arena_printf(p->arena, "%s from %s", op, n->stmt->from);
    if (n->stmt->name || (n->stmt->use && n->nparams))
        return arena_printf(p->arena, "%s (%s)", n->name, op);
    return op;
}

void print_summary(FILE *out, const Program *p)
{
    int w = 28;
    for (int i = 0; i < p->nnodes; i++) {
        int len = (int)strlen(summary_label(p, &p->nodes[i]));
        w = len > w ? len : w;
    }
    fprintf(out, "model %s\n", p->name);
    fprintf(out, "  %-4s %-*s %-18s %12s\n", "#", w, "layer", "output", "parameters");
    fprintf(out, "  %-4s %-*s %-18s %12s\n", "", w, p->input_name ? p->input_name : "input",
            shape_str(p->arena, &p->input), "");
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        const Shape *shape = &p->values[n->out].shape;
        if (i + 1 < p->nnodes && p->nodes[i + 1].sunk) { /* as written (reorder.c): */
            n = &p->nodes[i + 1];                        /* the activation, of the */
            shape = &p->values[p->nodes[i].in].shape;   /* pool's input shape, */
        } else if (n->sunk) {                            /* then the pool */
            n = &p->nodes[i - 1];
            shape = &p->values[n->out].shape;
        }
        size_t count = 0;
        for (int k = 0; k < n->nparams; k++)
            count += p->params[n->param0 + k].size;
        fprintf(out, "  %-4d %-*s %-18s %12zu\n", n->index, w, summary_label(p, n),
                shape_str(p->arena, shape), count);
    }
    fprintf(out, "  loss %s, optimizer %s, target %s(%d)\n", p->loss->sig.name,
            p->optimizer->sig.name,
            p->target_kind == NRT_TARGET_CLASS ? "class" : "value", p->n_out);
    fprintf(out, "  total parameters: %zu (%.1f KiB as float32)\n", p->param_count,
            (double)p->param_count * 4 / 1024);
}
