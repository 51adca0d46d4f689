/*
 * ops.c — every op of the language, each defined in one place.
 *
 * A layer op is one OpDef: its signature (arguments, PyTorch's names and
 * defaults), its shape rule, and the C it emits for the forward and the
 * backward pass.  Losses, optimizers, data sources, targets and
 * initializers have signatures only; what they do lives in the runtime.
 * Adding a layer means adding an entry to `ops` below and, where it needs
 * one, a kernel to the runtime.
 *
 * Emitted code conventions.  A forward pass function sees
 *     int n;            the batch size (the only thing known at run time)
 *     const float *x;   the input  [n, in shape] (or [C, n, H, W]: see the
 *                       layouts in fuse.c)
 *     float *y;         the output, likewise
 *     const float *W, *b;   the weight and bias, if the op has them (other
 *                           parameters by their state_dict suffix, with
 *                           weight and bias shortened: W_ih_l0, b_hh_l0)
 * and a backward pass function sees x, y, W (not b) and
 *     float *dy;        d loss / d y; the pass may overwrite it
 *     float *dx;        d loss / d x to be written, or NULL when not needed
 *     float *dW, *db;   d loss / d W and d b, to be overwritten (dW_ih_l0, ...)
 * plus what the node keeps for backward (aux_size floats per sample, named
 * by OpDef.aux_name: `mask`, `xp`) and `arg` (int32, iaux_size per
 * sample); an op takes its scratch from net->scratch itself.
 */
#include "netc.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INT_MAX_ARG 16777216.0 /* 2^24: the largest size a model may name */

/* ---------------------------------------------------- binding arguments */

static const char *type_name(ArgType t)
{
    switch (t) {
    case A_INT: return "a whole number";
    case A_NUM: return "a number";
    case A_BOOL: return "true or false";
    case A_PAIR: return "a whole number or a pair (h, w)";
    case A_NUMS2: return "a pair of numbers (a, b)";
    case A_NUMS: return "a number or a tuple of up to 3 (a, b, c)";
    case A_STR: return "a string in double quotes";
    case A_INIT: return "an initializer";
    case A_WORD: return "one of";
    }
    return "?";
}

/* "linear(out_features, bias=true, weight_init, bias_init)" */
static const char *usage(Arena *a, const Sig *s)
{
    char buf[512];
    size_t len = (size_t)snprintf(buf, sizeof buf, "%s(", s->name);
    for (int i = 0; i < MAX_ARGS && s->args[i].name && len < sizeof buf; i++) {
        const ArgSpec *as = &s->args[i];
        if (as->def && as->def[0])
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s=%s",
                                    i ? ", " : "", as->name, as->def);
        else
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                                    i ? ", " : "", as->name);
    }
    if (len < sizeof buf)
        snprintf(buf + len, sizeof buf - len, ")");
    return arena_strdup(a, buf);
}

/* Levenshtein distance, for "did you mean" notes. */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 32 || lb > 32)
        return 99;
    int d[33][33];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = c < del ? (c < ins ? c : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* The closest of names[0..n) to s, if close enough to be a likely typo. */
const char *suggest(const char *s, const char *const *names, int n)
{
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < n; i++) {
        int dd = distance(s, names[i]);
        if (dd < bestd || (dd == bestd && best == NULL)) {
            if (dd <= (int)strlen(s) / 2 + 1 && dd < 3)
                best = names[i], bestd = dd;
        }
    }
    return best;
}

static bool parse_default(const ArgSpec *as, ArgVal *v)
{
    const char *d = as->def;
    switch (as->type) {
    case A_BOOL:
        v->v[0] = strcmp(d, "true") == 0;
        return true;
    case A_PAIR:
        v->v[0] = v->v[1] = strtod(d, NULL);
        return true;
    case A_NUMS2:
        return sscanf(d, "(%lf, %lf)", &v->v[0], &v->v[1]) == 2;
    case A_STR:
    case A_WORD:
        v->s = d;
        return true;
    case A_INIT:
        return false; /* initializers have no written default */
    default:
        v->v[0] = strtod(d, NULL);
        return true;
    }
}

/* A limit as a person writes it: 16777216, 0.999999999, 9007199254740991. */
static const char *limit_str(Arena *a, double v)
{
    if (v == floor(v) && fabs(v) < 1e18)
        return arena_printf(a, "%.0f", v);
    return arena_printf(a, "%.15g", v);
}

static bool check_number(Program *p, const Sig *s, const ArgSpec *as,
                         const Value *v, bool whole)
{
    if (v->kind != V_NUM) {
        diag_error(p->diag, v->loc, "argument '%s' of %s must be %s",
                   as->name, s->name, type_name(as->type));
        return false;
    }
    if (whole && v->num != floor(v->num)) {
        diag_error(p->diag, v->loc,
                   "argument '%s' of %s must be a whole number, got %s",
                   as->name, s->name, v->text);
        return false;
    }
    if (v->num < as->min) {
        diag_error(p->diag, v->loc, "argument '%s' of %s must be at least %s, got %s",
                   as->name, s->name, limit_str(p->arena, as->min), v->text);
        return false;
    }
    if (v->num > as->max) {
        diag_error(p->diag, v->loc, "argument '%s' of %s must be at most %s, got %s",
                   as->name, s->name, limit_str(p->arena, as->max), v->text);
        return false;
    }
    return true;
}

static bool bind_one(Program *p, const Sig *s, const ArgSpec *as,
                     const Value *v, ArgVal *out)
{
    out->given = true;
    out->loc = v->loc;
    switch (as->type) {
    case A_INT:
    case A_NUM:
        if (!check_number(p, s, as, v, as->type == A_INT))
            return false;
        out->v[0] = v->num;
        return true;
    case A_BOOL:
        if (v->kind == V_IDENT && (!strcmp(v->text, "true") || !strcmp(v->text, "True")))
            out->v[0] = 1;
        else if (v->kind == V_IDENT && (!strcmp(v->text, "false") || !strcmp(v->text, "False")))
            out->v[0] = 0;
        else {
            diag_error(p->diag, v->loc, "argument '%s' of %s must be true or false",
                       as->name, s->name);
            return false;
        }
        return true;
    case A_PAIR:
        if (v->kind == V_TUPLE) {
            if (v->nargs != 2) {
                diag_error(p->diag, v->loc,
                           "argument '%s' of %s must be a whole number or a pair (h, w), got %d values",
                           as->name, s->name, v->nargs);
                return false;
            }
            for (int i = 0; i < 2; i++) {
                if (!check_number(p, s, as, v->args[i].val, true))
                    return false;
                out->v[i] = v->args[i].val->num;
            }
            return true;
        }
        if (!check_number(p, s, as, v, true))
            return false;
        out->v[0] = out->v[1] = v->num;
        return true;
    case A_NUMS2:
        if (v->kind != V_TUPLE || v->nargs != 2) {
            diag_error(p->diag, v->loc, "argument '%s' of %s must be a pair of numbers (a, b)",
                       as->name, s->name);
            return false;
        }
        for (int i = 0; i < 2; i++) {
            if (!check_number(p, s, as, v->args[i].val, false))
                return false;
            out->v[i] = v->args[i].val->num;
        }
        return true;
    case A_NUMS: {
        const int n = v->kind == V_TUPLE ? v->nargs : 1;
        if (n < 1 || n > 3) {
            diag_error(p->diag, v->loc, "argument '%s' of %s must be %s, got %d values",
                       as->name, s->name, type_name(as->type), n);
            return false;
        }
        for (int i = 0; i < n; i++) {
            const Value *e = v->kind == V_TUPLE ? v->args[i].val : v;
            if (!check_number(p, s, as, e, false))
                return false;
            out->v[i] = e->num;
        }
        out->nv = n;
        return true;
    }
    case A_STR:
        if (v->kind != V_STR) {
            diag_error(p->diag, v->loc, "argument '%s' of %s must be a string in double quotes",
                       as->name, s->name);
            return false;
        }
        out->s = v->text;
        return true;
    case A_INIT:
        return bind_init(p, v, &out->init);
    case A_WORD: {
        const char *words[MAX_ARGS];
        int nwords = 0;
        for (const char *w = as->words; *w && nwords < MAX_ARGS;) {
            const char *bar = strchr(w, '|');
            size_t wl = bar ? (size_t)(bar - w) : strlen(w);
            words[nwords++] = arena_printf(p->arena, "%.*s", (int)wl, w);
            w += wl + (bar != NULL);
        }
        /* a word, or in quotes as PyTorch's strings are: tanh or "tanh" */
        const bool word = v->kind == V_IDENT || v->kind == V_STR;
        for (int i = 0; i < nwords && word; i++)
            if (!strcmp(words[i], v->text)) {
                out->s = words[i];
                return true;
            }
        diag_error(p->diag, v->loc, "argument '%s' of %s must be one of: %s",
                   as->name, s->name, as->words);
        const char *near = word ? suggest(v->text, words, nwords) : NULL;
        if (near)
            diag_note(p->diag, v->loc, "did you mean '%s'?", near);
        return false;
    }
    }
    return false;
}

bool bind_args(Program *p, const Sig *s, const Value *call, ArgVal *out)
{
    bool ok = true, seen_key = false, too_many = false;
    int npos = 0, nspec = 0;
    while (nspec < MAX_ARGS && s->args[nspec].name)
        nspec++;
    memset(out, 0, sizeof *out * MAX_ARGS);

    for (int i = 0; i < call->nargs; i++) {
        const Arg *a = &call->args[i];
        int k = -1;
        if (a->key) {
            seen_key = true;
            for (int j = 0; j < nspec; j++)
                if (!strcmp(a->key, s->args[j].name) ||
                    (s->args[j].alias && !strcmp(a->key, s->args[j].alias)))
                    k = j;
            if (k < 0) {
                const char *names[MAX_ARGS];
                for (int j = 0; j < nspec; j++)
                    names[j] = s->args[j].name;
                diag_error(p->diag, a->key_loc, "%s has no argument '%s'", s->name, a->key);
                const char *near = suggest(a->key, names, nspec);
                if (near)
                    diag_note(p->diag, a->key_loc, "did you mean '%s'?", near);
                else if (nspec)
                    diag_note(p->diag, call->loc, "usage: %s", usage(p->arena, s));
                else
                    diag_note(p->diag, call->loc, "%s takes no arguments", s->name);
                ok = false;
                continue;
            }
        } else {
            if (seen_key) {
                diag_error(p->diag, a->key_loc, "positional argument after a keyword argument");
                ok = false;
                continue;
            }
            k = npos++;
            if (k >= nspec) {
                if (too_many)
                    continue;
                too_many = true;
                if (nspec == 0) {
                    diag_error(p->diag, a->val->loc, "%s takes no arguments", s->name);
                } else {
                    diag_error(p->diag, a->val->loc, "too many arguments to %s", s->name);
                    diag_note(p->diag, call->loc, "usage: %s", usage(p->arena, s));
                }
                ok = false;
                continue;
            }
        }
        if (out[k].given) {
            diag_error(p->diag, a->key ? a->key_loc : a->val->loc,
                       "argument '%s' of %s is given twice", s->args[k].name, s->name);
            ok = false;
            continue;
        }
        if (!bind_one(p, s, &s->args[k], a->val, &out[k]))
            ok = false;
    }
    for (int j = 0; j < nspec; j++) {
        const ArgSpec *as = &s->args[j];
        if (out[j].given)
            continue;
        if (!as->def && ok) {
            diag_error(p->diag, call->loc, "%s needs the argument '%s'", s->name, as->name);
            diag_note(p->diag, call->loc, "usage: %s", usage(p->arena, s));
            ok = false;
        } else if (as->def && as->def[0]) {
            parse_default(as, &out[j]);
        }
    }
    return ok;
}

/* ------------------------------------------------------- the signatures */

#define BIG 1e30
#define SIZE(nm) {nm, A_INT, NULL, 1, INT_MAX_ARG, NULL, NULL}
#define INITS {"weight_init", A_INIT, "", 0, 0, NULL, NULL}, \
              {"bias_init", A_INIT, "", 0, 0, NULL, NULL}

const Sig init_sigs[] = {
    {"zeros", "all zeros", {{0}}},
    {"ones", "all ones", {{0}}},
    {"constant", "every value val", {{"val", A_NUM, NULL, -BIG, BIG, NULL, NULL}}},
    {"normal", "N(mean, std^2)",
     {{"mean", A_NUM, "0", -BIG, BIG, NULL, NULL}, {"std", A_NUM, "1", 0, BIG, NULL, NULL}}},
    {"uniform", "U(a, b)",
     {{"a", A_NUM, "0", -BIG, BIG, NULL, NULL}, {"b", A_NUM, "1", -BIG, BIG, NULL, NULL}}},
    {"xavier_normal", "N(0, gain^2 * 2 / (fan_in + fan_out))",
     {{"gain", A_NUM, "1", 0, BIG, NULL, NULL}}},
    {"xavier_uniform", "U(±gain * sqrt(6 / (fan_in + fan_out)))",
     {{"gain", A_NUM, "1", 0, BIG, NULL, NULL}}},
    {"kaiming_normal", "N(0, 2 / ((1 + a^2) fan_in))",
     {{"a", A_NUM, "0", 0, BIG, NULL, NULL}}},
    {"kaiming_uniform", "U(±sqrt(6 / ((1 + a^2) fan_in)))",
     {{"a", A_NUM, "0", 0, BIG, NULL, NULL}}},
    {NULL, NULL, {{0}}}};

static const int init_kinds[] = {
    NRT_INIT_ZEROS, NRT_INIT_ONES, NRT_INIT_CONSTANT, NRT_INIT_NORMAL,
    NRT_INIT_UNIFORM, NRT_INIT_XAVIER_NORMAL, NRT_INIT_XAVIER_UNIFORM,
    NRT_INIT_KAIMING_NORMAL, NRT_INIT_KAIMING_UNIFORM};

/* ---------------------------------------------------------------- losses */

static void xent_c(Emit *e, const char *out)
{
    emitf(e, "float loss = nrt_xent(%s, b->label, n, %d, dlast); /* fused log-softmax */", out,
          e->p->n_out);
}

/* a kernel with the classes written in */
static void xent_cuda(Emit *e, const char *out)
{
    const char *body[1] = {arena_printf(e->arena, "nrt_k::xent<%d>(logits, label, n, d, loss);",
                                        e->p->n_out)};
    const char *k = cu_kernel(e, NULL, "loss", 1024,
                              "const float *logits, const int32_t *label, int n, float *d, "
                              "float *loss", body, 1);
    emitf(e, "TRY(nrt_cu_xent(net, %s, %s, net->label, n, dlast, net->loss, err)); "
          "/* fused log-softmax */", k, out);
}

static void mse_c(Emit *e, const char *out)
{
    emitf(e, "float loss = nrt_mse(%s, b->y, n, %d, dlast);", out, e->p->n_out);
}

static void mse_cuda(Emit *e, const char *out)
{
    emitf(e, "TRY(nrt_cu_mse(net, %s, net->y, n, %d, dlast, net->loss, err));", out, e->p->n_out);
}

const LossDef losses[] = {
    {{"cross_entropy", "softmax cross-entropy over class logits, mean over the batch", {{0}}},
     NRT_TARGET_CLASS, xent_c, xent_cuda, "log-softmax fused in: d%N = (softmax - onehot) / n"},
    {{"mse", "mean squared error over all outputs", {{0}}},
     NRT_TARGET_VALUE, mse_c, mse_cuda, "d%N = 2 (y - t) / (n * outputs)"},
    {{NULL, NULL, {{0}}}, 0, NULL, NULL, NULL}};

/* ------------------------------------------------------------ optimizers */

static void bind_sgd(Program *p, const Value *call, const ArgVal *a, nrt_optim *o)
{
    o->momentum = (float)a[1].v[0];
    o->dampening = (float)a[2].v[0];
    o->weight_decay = (float)a[3].v[0];
    o->nesterov = a[4].v[0] != 0;
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0)) {
        diag_error(p->diag, call->loc, "nesterov momentum requires a momentum and zero dampening");
        diag_note(p->diag, call->loc, "PyTorch refuses this too: give momentum > 0 and dampening=0");
    }
}

static void bind_adam(Program *p, const Value *call, const ArgVal *a, nrt_optim *o)
{
    (void)p, (void)call;
    o->beta1 = (float)a[1].v[0];
    o->beta2 = (float)a[1].v[1];
    o->eps = (float)a[2].v[0];
    o->weight_decay = (float)a[3].v[0];
}

#define ADAM_ARGS(wd)                                                     \
    {{"lr", A_NUM, "0.001", 0, BIG, NULL, NULL},                          \
     {"betas", A_NUMS2, "(0.9, 0.999)", 0, 0.999999999, NULL, NULL},      \
     {"eps", A_NUM, "1e-08", 0, BIG, NULL, NULL},                         \
     {"weight_decay", A_NUM, wd, 0, BIG, NULL, NULL}}

/* The first argument of each is lr.  Its kind is optimizers.h's row: the
 * runtime's update, checkpoint names and the GPU's kernel. */
const OptimDef optimizers[] = {
    {{"sgd", "torch.optim.SGD",
      {{"lr", A_NUM, "0.001", 0, BIG, NULL, NULL},
       {"momentum", A_NUM, "0", 0, BIG, NULL, NULL},
       {"dampening", A_NUM, "0", -BIG, BIG, NULL, NULL},
       {"weight_decay", A_NUM, "0", 0, BIG, NULL, NULL},
       {"nesterov", A_BOOL, "false", 0, 1, NULL, NULL}}},
     NRT_SGD, bind_sgd, {"lr", "momentum", "dampening", "weight_decay", "nesterov"}},
    {{"adam", "torch.optim.Adam", ADAM_ARGS("0")},
     NRT_ADAM, bind_adam, {"lr", "weight_decay", "beta1", "beta2", "eps"}},
    {{"adamw", "torch.optim.AdamW: Adam with decoupled weight decay, p *= 1 - lr wd",
      ADAM_ARGS("0.01")},
     NRT_ADAMW, bind_adam, {"lr", "weight_decay", "beta1", "beta2", "eps"}},
    {{NULL, NULL, {{0}}}, 0, NULL, {NULL}}};

/* ------------------------------------------------------------- schedules */

static void bind_step(const ArgVal *a, nrt_schedule *s)
{
    s->step_size = (int)a[0].v[0];
    s->gamma = a[1].v[0];
}

static void bind_cosine(const ArgVal *a, nrt_schedule *s)
{
    s->t_max = (int)a[0].v[0];
    s->eta_min = a[1].v[0];
}

static void bind_plateau(const ArgVal *a, nrt_schedule *s)
{
    s->factor = a[0].v[0];
    s->patience = (int)a[1].v[0];
    s->threshold = a[2].v[0];
    s->threshold_abs = !strcmp(a[3].s, "abs");
    s->cooldown = (int)a[4].v[0];
    s->min_lr = a[5].v[0];
    s->eps = a[6].v[0];
}

/* Their kinds are netrt.h's NRT_SCHEDULES rows: the runtime's lr_NAME. */
const ScheduleDef schedules[] = {
    {{"step", "torch.optim.lr_scheduler.StepLR: lr *= gamma every size epochs",
      {{"size", A_INT, NULL, 1, INT_MAX_ARG, "step_size", NULL},
       {"gamma", A_NUM, "0.1", 0, BIG, NULL, NULL}}},
     NRT_SCHED_STEP, bind_step, {"step_size", "gamma"}},
    {{"cosine", "CosineAnnealingLR: from lr down to eta_min over t_max epochs",
      {{"t_max", A_INT, NULL, 1, INT_MAX_ARG, "T_max", NULL},
       {"eta_min", A_NUM, "0", 0, BIG, NULL, NULL}}},
     NRT_SCHED_COSINE, bind_cosine, {"t_max", "eta_min"}},
    {{"reduce_on_plateau", "ReduceLROnPlateau: lr *= factor when the validation loss stalls",
      {{"factor", A_NUM, "0.1", 0, 0.999999999, NULL, NULL},
       {"patience", A_INT, "10", 0, INT_MAX_ARG, NULL, NULL},
       {"threshold", A_NUM, "0.0001", 0, BIG, NULL, NULL},
       {"threshold_mode", A_WORD, "rel", 0, 0, NULL, "rel|abs"},
       {"cooldown", A_INT, "0", 0, INT_MAX_ARG, NULL, NULL},
       {"min_lr", A_NUM, "0", 0, BIG, NULL, NULL},
       {"eps", A_NUM, "1e-08", 0, BIG, NULL, NULL}}},
     NRT_SCHED_PLATEAU, bind_plateau,
     {"factor", "patience", "threshold", "threshold_abs", "cooldown", "min_lr", "eps"}},
    {{NULL, NULL, {{0}}}, 0, NULL, {NULL}}};

#define TEXT_SOURCE_ARGS                                                  \
    {{"path", A_STR, NULL, 0, 0, NULL, NULL},                             \
     {"label", A_INT, "-1", -INT_MAX_ARG, INT_MAX_ARG, NULL, NULL},       \
     {"header", A_INT, "0", 0, INT_MAX_ARG, NULL, NULL},                  \
     {"scale", A_NUM, "1", -BIG, BIG, NULL, NULL},                        \
     {"standardize", A_BOOL, "false", 0, 1, NULL, NULL}}

/* ---------------------------------------------------------- data sources */

/* Each binds its arguments but the first, the path (or holdout's
 * fraction), which check_source reads. */
static void bind_text(const ArgVal *a, nrt_source *src)
{
    src->label = (int)a[1].v[0];
    src->header = (int)a[2].v[0];
    src->scale = (float)a[3].v[0];
    src->standardize = a[4].v[0] != 0;
}

static void bind_scaled(const ArgVal *a, nrt_source *src)
{
    src->scale = (float)a[1].v[0];
}

static void bind_images(const ArgVal *a, nrt_source *src)
{
    src->root = a[1].given && a[1].s[0] ? a[1].s : NULL;
}

static void bind_holdout(const ArgVal *a, nrt_source *src)
{
    src->fraction = a[0].v[0];
}

/* The runtime reads each by its name: data.c's loaders, images.c, or
 * (holdout) a part of the training set. */
const SourceDef sources[] = {
    {{"csv", "comma-separated numbers, one sample a line", TEXT_SOURCE_ARGS}, bind_text, false},
    {{"table", "whitespace-separated numbers, one sample a line", TEXT_SOURCE_ARGS}, bind_text,
     false},
    {{"cifar10", "CIFAR-10 binary batches: a file, or a directory of data_batch_*.bin",
      {{"path", A_STR, NULL, 0, 0, NULL, NULL}, {"scale", A_NUM, "1", -BIG, BIG, NULL, NULL}}},
     bind_scaled, false},
    {{"mnist", "MNIST's IDX files: a directory, or the images file",
      {{"path", A_STR, NULL, 0, 0, NULL, NULL}, {"scale", A_NUM, "1", -BIG, BIG, NULL, NULL}}},
     bind_scaled, false},
    {{"images", "a CSV list of image files: path,label rows (PNG, JPEG, ...)",
      {{"path", A_STR, NULL, 0, 0, NULL, NULL}, {"root", A_STR, "", 0, 0, NULL, NULL}}},
     bind_images, false},
    {{"holdout", "(valid and test only) this fraction of the training data, held out",
      {{"fraction", A_NUM, NULL, 0, 1, NULL, NULL}}},
     bind_holdout, true},
    {{NULL, NULL, {{0}}}, NULL, false}};

/* torchvision's transforms of images(...) data, done in this order. */
const Sig transform_sigs[] = {
    {"resize", "Resize((height, width)): PIL's bilinear filter, antialiased",
     {{"height", A_INT, NULL, 1, 65536, NULL, NULL},
      {"width", A_INT, NULL, 1, 65536, NULL, NULL}}},
    {"random_horizontal_flip", "RandomHorizontalFlip(p): training batches only",
     {{"p", A_NUM, "0.5", 0, 1, NULL, NULL}}},
    {"to_tensor", "ToTensor: pixels 0..255 to floats 0..1", {{0}}},
    {"normalize", "Normalize(mean, std): (x - mean) / std, per channel",
     {{"mean", A_NUMS, NULL, -BIG, BIG, NULL, NULL},
      {"std", A_NUMS, NULL, -BIG, BIG, NULL, NULL}}},
    {NULL, NULL, {{0}}}};

const Sig target_sigs[] = {
    {"class", "one integer label in [0, classes) per sample", {SIZE("classes")}},
    {"value", "size real numbers per sample", {{"size", A_INT, "1", 1, INT_MAX_ARG, NULL, NULL}}},
    {NULL, NULL, {{0}}}};

const Sig *sig_find(const Sig *table, size_t stride, const char *name)
{
    for (; table->name; table = sig_next(table, stride))
        if (!strcmp(table->name, name))
            return table;
    return NULL;
}

bool bind_init(Program *p, const Value *v, nrt_init *out)
{
    if (v->kind != V_IDENT && v->kind != V_CALL) {
        diag_error(p->diag, v->loc, "expected an initializer such as xavier_normal or normal(0, 0.01)");
        return false;
    }
    const Sig *s = sig_find(SIGS(init_sigs), v->text);
    if (!s) {
        const char *names[16];
        int n = 0;
        for (const Sig *t = init_sigs; t->name; t++)
            names[n++] = t->name;
        diag_error(p->diag, v->loc, "unknown initializer '%s'", v->text);
        const char *near = suggest(v->text, names, n);
        if (near)
            diag_note(p->diag, v->loc, "did you mean '%s'?", near);
        else
            diag_note(p->diag, v->loc, "initializers: zeros, ones, constant, normal, uniform, "
                      "xavier_normal, xavier_uniform, kaiming_normal, kaiming_uniform");
        return false;
    }
    ArgVal a[MAX_ARGS];
    Value call = *v;
    if (call.kind == V_IDENT)
        call.nargs = 0;
    if (!bind_args(p, s, &call, a))
        return false;
    out->kind = init_kinds[s - init_sigs];
    out->a = (float)a[0].v[0];
    out->b = (float)a[1].v[0];
    if (out->kind == NRT_INIT_UNIFORM && out->b < out->a) {
        diag_error(p->diag, v->loc, "uniform(a, b) needs a <= b");
        return false;
    }
    return true;
}

/* ----------------------------------------------------- shape helpers */

static const Shape *in_shape(Program *p, const Node *n)
{
    return &p->values[n->in].shape;
}

static Shape *out_shape(Program *p, Node *n)
{
    return &p->values[n->out].shape;
}

static double arg(const Node *n, int i)
{
    return n->args[i].v[0];
}

static bool need_image(Program *p, Node *n)
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
static bool window(Program *p, Node *n, int64_t in, int k, int s, int pad,
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

/* ------------------------------------------------ emission helpers */

/* The expressions of act's backward with dy, and x and y where it needs
 * them (names of arrays indexed by i, or of values). */
static const char *act_grad(Arena *a, const Node *n, const Act *act, const char *dy,
                            const char *x, const char *y)
{
    return act->bwd(a, n, dy, act->needs & NEEDS_X ? x : NULL, act->needs & NEEDS_Y ? y : NULL);
}

/* The epilogue of a linear or conv2d layer (the bias, unless the product
 * added it, then the fused activation), for the cpu and the GPU alike:
 * says what it holds in a comment and returns the expression of v (the
 * product's value plus the bias) it stores; NULL, and nothing emitted,
 * when there is none. */
static const char *epilogue(Emit *e, const Node *n, bool bias)
{
    if (!bias && !n->fused)
        return NULL;
    emitf(e, "/* epilogue: %s%s%s */", bias ? "bias" : "", bias && n->fused ? " + " : "",
          n->fused ? n->fused->op->sig.name : "");
    return n->fused ? n->fused->op->act->fwd(e->arena, n->fused, "v") : "v";
}

/* Whether the run is in bf16, as a pass reads it: the net's lowp on the
 * cpu, a GPU kernel's parameter lowp (cu_lowp: the net's, passed). */
static const char *lowp_flag(const Emit *e)
{
    return e->cuda ? "lowp" : "net->lowp";
}

/* expr rounded to bf16 when the run is (where autocast rounds inside a
 * fused pass), else expr */
static const char *lowp_expr(Emit *e, const char *expr)
{
    return arena_printf(e->arena, "nrt_lowp(%s, %s)", lowp_flag(e), expr);
}

/* Before an elementwise loop over `values` values, size a sample: the
 * loop on the threads (NRT_PAR_FOR, each value on one: the same bits) where
 * a batch of 128 samples reaches NRT_PAR_MIN_VALUES; smaller layers never
 * do, and their loops stay plain (an OpenMP region not taken still costs a
 * call).  cifar10's conv1 epilogue, 2^21 values a batch of 64, had the
 * main thread alone for 0.4 ms of a 12.5 ms step on two threads. */
static void emit_par_for(Emit *e, int64_t size, const char *values)
{
    if (size * 128 >= NRT_PAR_MIN_VALUES)
        emitf(e, "NRT_PAR_FOR(%s)", values);
}

/* The head of a generated elementwise loop over a batch of values of
 * `size` a sample, i the index (on the threads where emit_par_for says). */
static void emit_each(Emit *e, int64_t size)
{
    const char *values = arena_printf(e->arena, "(size_t)n * %lld", (long long)size);
    emit_par_for(e, size, values);
    emitf(e, "for (size_t i = 0; i < %s; i++)", values);
}

/* The cpu's epilogue of a linear or conv2d layer, over `rows` rows of y,
 * each of `len` values: the bias added (bias_at: its value at value k of
 * row i; NULL where the product added it, as a convolution's does), then,
 * with a fused activation, in bf16 and fp16 the sum rounded (as autocast's
 * low-precision product with its bias is) and the activation.  Each a pass
 * of its own over the row, none branching on the precision, so that they
 * vectorise at -O2 too (one loop rounding each value did not, where -O3
 * unswitched it: cifar10's -O2 step 23.2 -> 22.2 ms).  Without an
 * activation the caller's rounding of the layer's output is the sum's. */
static void emit_epilogue(Emit *e, const Node *n, const char *rows, const char *len,
                          const char *bias_at)
{
    bool bias = bias_at && n->nparams > 1;
    if (!epilogue(e, n, bias))
        return;
    emit_par_for(e, e->p->values[n->out].size, arena_printf(e->arena, "%s * %s", rows, len));
    emitf(e, "for (size_t i = 0; i < %s; i++) {", rows);
    emitf(e, "    float *r = y + i * %s;", len);
    if (bias) {
        emitf(e, "    for (size_t k = 0; k < %s; k++)", len);
        emitf(e, "        r[k] += %s;", bias_at);
    }
    if (n->fused) {
        emitf(e, "    if (%s)", lowp_flag(e));
        emitf(e, "        nrt_round_lowp(%s, r, %s);", lowp_flag(e), len);
        emitf(e, "    for (size_t k = 0; k < %s; k++)", len);
        emitf(e, "        r[k] = %s;", n->fused->op->act->fwd(e->arena, n->fused, "r[k]"));
    }
    emitf(e, "}");
}

/* dy = dy * act'(y), for a fused activation, before the layer's own
 * backward; in bf16 rounded after, as a pass of its own (the loop then
 * has no branch on the precision, and vectorises: relu's select inside
 * one cost a mispredicted branch every other value). */
static void emit_act_grad(Emit *e, const Node *n, int64_t size)
{
    if (!n->fused)
        return;
    emitf(e, "/* through the fused %s */", n->fused->op->sig.name);
    emit_each(e, size);
    emitf(e, "    dy[i] = %s;", act_grad(e->arena, n->fused, n->fused->op->act, "dy[i]", NULL, "y[i]"));
    emitf(e, "if (net->lowp)");
    emitf(e, "    nrt_round_lowp(net->lowp, dy, (size_t)n * %lld);", (long long)size);
}

/* --------------------------------------------------------------- linear */

enum { LIN_OUT, LIN_BIAS };

static bool linear_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    if (s->rank != 1) {
        diag_error(p->diag, n->stmt->call->loc, "linear expects a flat input, got %s",
                   shape_str(p->arena, s));
        if (s->rank == 2)
            diag_note(p->diag, n->stmt->call->loc, "insert 'flatten' before this layer, or "
                      "'rnn(HIDDEN)' to read the %lld steps as a sequence", (long long)s->d[0]);
        else
            diag_note(p->diag, n->stmt->call->loc, "insert 'flatten' before this layer");
        return false;
    }
    int64_t in = s->d[0], out = (int64_t)arg(n, LIN_OUT);
    *out_shape(p, n) = (Shape){1, {out}};
    ir_add_param(p, n, "weight", 2, (int64_t[]){out, in}, (int)in, (int)out, false);
    if (arg(n, LIN_BIAS))
        ir_add_param(p, n, "bias", 1, (int64_t[]){out}, (int)in, (int)out, true);
    return true;
}

static void linear_fwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emitf(e, "/* y[n, %lld] = x[n, %lld] W^T */", M, K);
    emitf(e, "nrt_gemm(net->dot, 0, 1, n, %lld, %lld, 1.0f, x, %lld, W, %lld, 0.0f, y, %lld);",
          M, K, K, K, M);
    emit_epilogue(e, n, "(size_t)n", arena_printf(e->arena, "(size_t)%lld", M), "b[k]");
}

static void linear_bwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emit_act_grad(e, n, M);
    emitf(e, "/* dW[%lld, %lld] = dy^T x */", M, K);
    emitf(e, "nrt_gemm(net->dot, 1, 0, %lld, %lld, n, 1.0f, dy, %lld, x, %lld, 0.0f, dW, %lld);",
          M, K, M, K, K);
    if (n->nparams > 1)
        emitf(e, "nrt_col_sums(dy, n, %lld, db);", M);
    emitf(e, "/* dx[n, %lld] = dy W */", K);
    emitf(e, "if (dx)");
    emitf(e, "    nrt_gemm(net->dot, 0, 0, n, %lld, %lld, 1.0f, dy, %lld, W, %lld, 0.0f, dx, %lld);",
          K, M, M, K, K);
}

/* --------------------------------------------------------------- conv2d */

/* A convolution is one matrix product over the whole batch: the weight W
 * [O, C*KH*KW] times cols [C*KH*KW, n*P] (P = OH*OW), the columns of every
 * sample side by side, gives y [O, n*P] — the output channel first,
 * [O, n, OH, OW], which is how it stays (fuse.c's layouts) — and the bias
 * and a fused activation are applied in place.  cols is never stored: the
 * runtime's product reads it from xp, the input zero-padded and channel
 * first, which forward keeps for the backward pass: dW = dy cols^T.  dx is,
 * for stride 1, the convolution of dy with W flipped (nrt_conv2d_dx);
 * otherwise dcols = W^T dy, folded back into dx with col2im. */

enum { CV_OUT, CV_KERNEL, CV_STRIDE, CV_PAD, CV_BIAS };

struct conv {
    long long C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, CKK, P;
};

static struct conv conv_of(const Program *p, const Node *n)
{
    const Shape *i = &p->values[n->in].shape, *o = &p->values[n->out].shape;
    struct conv c = {i->d[0], i->d[1], i->d[2], o->d[0], o->d[1], o->d[2],
                     (long long)n->args[CV_KERNEL].v[0], (long long)n->args[CV_KERNEL].v[1],
                     (long long)n->args[CV_STRIDE].v[0], (long long)n->args[CV_STRIDE].v[1],
                     (long long)n->args[CV_PAD].v[0], (long long)n->args[CV_PAD].v[1], 0, 0};
    c.CKK = c.C * c.KH * c.KW;
    c.P = c.OH * c.OW;
    return c;
}

/* dx as a convolution of dy (nrt_conv2d_dx) */
static bool conv_dx_direct(struct conv c)
{
    return c.SH == 1 && c.SW == 1 && c.PH < c.KH && c.PW < c.KW;
}

static bool conv2d_shape(Program *p, Node *n)
{
    if (!need_image(p, n))
        return false;
    const Shape *s = in_shape(p, n);
    int64_t oh, ow, O = (int64_t)arg(n, CV_OUT);
    int kh = (int)n->args[CV_KERNEL].v[0], kw = (int)n->args[CV_KERNEL].v[1];
    if (!window(p, n, s->d[1], kh, (int)n->args[CV_STRIDE].v[0], (int)n->args[CV_PAD].v[0], "height", &oh) ||
        !window(p, n, s->d[2], kw, (int)n->args[CV_STRIDE].v[1], (int)n->args[CV_PAD].v[1], "width", &ow))
        return false;
    *out_shape(p, n) = (Shape){3, {O, oh, ow}};
    int64_t C = s->d[0];
    int fan_in = (int)(C * kh * kw), fan_out = (int)(O * kh * kw);
    ir_add_param(p, n, "weight", 4, (int64_t[]){O, C, kh, kw}, fan_in, fan_out, false);
    if (arg(n, CV_BIAS))
        ir_add_param(p, n, "bias", 1, (int64_t[]){O}, fan_in, fan_out, true);
    struct conv c = conv_of(p, n);
    n->aux_size = c.C * (c.H + 2 * c.PH) * (c.W + 2 * c.PW); /* xp, kept for backward */
    if (conv_dx_direct(c)) /* dy padded, and dx if not channel first: what
                              nrt_conv2d_dx_scratch says, per sample */
        n->scratch = c.O * (c.OH + 2 * (c.KH - 1 - c.PH)) * (c.OW + 2 * (c.KW - 1 - c.PW)) +
                     c.C * c.H * c.W;
    else
        n->scratch = c.CKK * c.P; /* dcols */
    return true;
}

/* The geometry as the runtime takes it, and the run's arithmetic. */
static void conv_geometry(Emit *e, struct conv c)
{
    emitf(e, "const nrt_conv g = {.c = %lld, .h = %lld, .w = %lld, .o = %lld, .oh = %lld, "
          ".ow = %lld,", c.C, c.H, c.W, c.O, c.OH, c.OW);
    emitf(e, "                    .kh = %lld, .kw = %lld, .sh = %lld, .sw = %lld, .ph = %lld, "
          ".pw = %lld, .dot = net->dot,", c.KH, c.KW, c.SH, c.SW, c.PH, c.PW);
    emitf(e, "                    .dnnl = net->dnnl};");
}

/* 1 when the input is laid out channel first, else 0 */
static int input_cn(const Emit *e, const Node *n)
{
    return e->p->values[n->in].cn ? 1 : 0;
}

static void conv2d_fwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    conv_geometry(e, c);
    emitf(e, "/* xp[%lld, n, %lld, %lld]: the input padded, channel first, kept for backward */",
          c.C, c.H + 2 * c.PH, c.W + 2 * c.PW);
    emitf(e, "nrt_conv2d_pad(&g, n, %d, x, xp);", input_cn(e, n));
    bool bias = n->nparams > 1;
    emitf(e, "/* y[%lld, n*%lld] = W[%lld, %lld] cols[%lld, n*%lld]%s, the columns read from xp */",
          c.O, c.P, c.O, c.CKK, c.CKK, c.P, bias ? " + b" : "");
    emitf(e, "nrt_conv2d_fwd(&g, n, W, %s, xp, y);", bias ? "b" : "NULL");
    emit_epilogue(e, n, arena_printf(e->arena, "%lld", c.O),
                  arena_printf(e->arena, "(size_t)n * %lld", c.P), NULL);
}

static void conv2d_bwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    conv_geometry(e, c);
    emitf(e, "(void)x; /* xp, kept by forward, stands for it */");
    emit_act_grad(e, n, c.O * c.P);
    if (n->nparams > 1)
        emitf(e, "nrt_row_sums(dy, %lld, (size_t)n * %lld, db);", c.O, c.P);
    emitf(e, "/* dW[%lld, %lld] = dy cols^T */", c.O, c.CKK);
    emitf(e, "nrt_conv2d_dw(&g, n, dy, xp, dW);");
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    if (conv_dx_direct(c)) {
        emitf(e, "/* dx = dy convolved with W turned half round (stride 1) */");
        emitf(e, "nrt_conv2d_dx(&g, n, %d, W, dy, net->scratch, dx);", input_cn(e, n));
        return;
    }
    emitf(e, "/* dcols[%lld, n*%lld] = W^T dy, folded back into dx */", c.CKK, c.P);
    emitf(e, "float *dcols = net->scratch;");
    emitf(e, "const int np = n * %lld;", c.P);
    emitf(e, "nrt_gemm(net->dot, 1, 0, %lld, np, %lld, 1.0f, W, %lld, dy, np, 0.0f, dcols, np);",
          c.CKK, c.O, c.CKK);
    emitf(e, "nrt_col2im_batch%s(dcols, n, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
          "%lld, %lld, dx);", input_cn(e, n) ? "_cn" : "", c.C, c.H, c.W, c.KH, c.KW, c.SH,
          c.SW, c.PH, c.PW, c.OH, c.OW);
}

/* -------------------------------------------------------------- pooling */

enum { PL_KERNEL, PL_STRIDE, PL_PAD };

static bool pool_shape(Program *p, Node *n)
{
    if (!need_image(p, n))
        return false;
    const Shape *s = in_shape(p, n);
    int k = (int)arg(n, PL_KERNEL);
    if (!n->args[PL_STRIDE].given)
        n->args[PL_STRIDE].v[0] = k;
    int st = (int)arg(n, PL_STRIDE), pad = (int)arg(n, PL_PAD);
    if (2 * pad > k) {
        diag_error(p->diag, n->args[PL_PAD].loc,
                   "%s padding %d is more than half the kernel size %d",
                   n->op->sig.name, pad, k);
        return false;
    }
    int64_t oh, ow;
    if (!window(p, n, s->d[1], k, st, pad, "height", &oh) ||
        !window(p, n, s->d[2], k, st, pad, "width", &ow))
        return false;
    *out_shape(p, n) = (Shape){3, {s->d[0], oh, ow}};
    if (!strcmp(n->op->sig.name, "maxpool2d"))
        n->iaux_size = s->d[0] * oh * ow;
    return true;
}

#define POOL_ARGS "n, %lld, %lld, %lld, %d, %d, %d, %lld, %lld"

static void pool_fwd(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    bool max = n->iaux_size > 0;
    emitf(e, "nrt_%s_fwd(x, " POOL_ARGS ", y%s);", n->op->sig.name,
          (long long)i->d[0], (long long)i->d[1], (long long)i->d[2], (int)arg(n, PL_KERNEL),
          (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD), (long long)o->d[1], (long long)o->d[2],
          max ? ", arg" : "");
}

static void pool_bwd(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    if (n->iaux_size > 0)
        emitf(e, "nrt_maxpool2d_bwd(dy, arg, n, %lld, %lld, %lld, %lld, %lld, dx);",
              (long long)i->d[0], (long long)i->d[1], (long long)i->d[2],
              (long long)o->d[1], (long long)o->d[2]);
    else
        emitf(e, "nrt_avgpool2d_bwd(dy, " POOL_ARGS ", dx);",
              (long long)i->d[0], (long long)i->d[1], (long long)i->d[2], (int)arg(n, PL_KERNEL),
              (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD), (long long)o->d[1], (long long)o->d[2]);
}

/* ---------------------------------------------------------- activations */

static bool same_shape(Program *p, Node *n)
{
    *out_shape(p, n) = *in_shape(p, n);
    return true;
}

static const char *relu_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "%s > 0.0f ? %s : 0.0f", x, x);
}

static const char *relu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : 0.0f", y, dy);
}

static const char *leaky_f(Arena *a, const Node *n, const char *x)
{
    return arena_printf(a, "%s > 0.0f ? %s : %s * %s", x, x, c_float(a, arg(n, 0)), x);
}

static const char *leaky_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : %s * %s", y, dy, c_float(a, arg(n, 0)), dy);
}

static const char *tanh_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "tanhf(%s)", x);
}

static const char *tanh_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s * (1.0f - %s * %s)", dy, y, y);
}

static const char *sigmoid_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "1.0f / (1.0f + expf(-%s))", x);
}

static const char *sigmoid_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)x;
    return arena_printf(a, "%s * %s * (1.0f - %s)", dy, y, y);
}

/* nn.GELU: x Phi(x); dy (Phi(x) + x phi(x)), as PyTorch's GeluBackward.
 * approximate=tanh: Phi(x) ~ (1 + tanh(t)) / 2, t = sqrt(2/pi) (x + 0.044715
 * x^3), and its derivative so (PyTorch's formula). */
static bool gelu_tanh(const Node *n)
{
    return !strcmp(n->args[0].s, "tanh");
}

static const char *gelu_t(Arena *a, const char *x)
{
    return arena_printf(a, "tanhf(0.79788456f * (%s + 0.044715f * %s * %s * %s))", x, x, x, x);
}

static const char *gelu_f(Arena *a, const Node *n, const char *x)
{
    if (gelu_tanh(n))
        return arena_printf(a, "0.5f * %s * (1.0f + %s)", x, gelu_t(a, x));
    return arena_printf(a, "0.5f * %s * (1.0f + erff(%s * 0.70710678f))", x, x);
}

static const char *gelu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)y;
    if (gelu_tanh(n))
        return arena_printf(a, "%s * (0.5f * (1.0f + %s) + 0.5f * %s * (1.0f - %s * %s) * "
                               "0.79788456f * (1.0f + 0.134145f * %s * %s))",
                            dy, gelu_t(a, x), x, gelu_t(a, x), gelu_t(a, x), x, x);
    return arena_printf(a, "%s * (0.5f * (1.0f + erff(%s * 0.70710678f)) + "
                           "%s * 0.39894228f * expf(-0.5f * %s * %s))", dy, x, x, x, x);
}

/* nn.SiLU: x sigmoid(x); dy s (1 + x (1 - s)), s = sigmoid(x) */
static const char *silu_f(Arena *a, const Node *n, const char *x)
{
    (void)n;
    return arena_printf(a, "%s / (1.0f + expf(-%s))", x, x);
}

static const char *silu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)n, (void)y;
    const char *s = arena_printf(a, "(1.0f / (1.0f + expf(-%s)))", x);
    return arena_printf(a, "%s * %s * (1.0f + %s * (1.0f - %s))", dy, s, x, s);
}

/* nn.ELU(alpha): x, or alpha (e^x - 1) at x <= 0; its derivative there is
 * y + alpha, so it needs y alone (alpha >= 0: y > 0 where x > 0) */
static const char *elu_f(Arena *a, const Node *n, const char *x)
{
    return arena_printf(a, "%s > 0.0f ? %s : %s * expm1f(%s)", x, x, c_float(a, arg(n, 0)), x);
}

static const char *elu_b(Arena *a, const Node *n, const char *dy, const char *x, const char *y)
{
    (void)x;
    return arena_printf(a, "%s > 0.0f ? %s : %s * (%s + %s)", y, dy, dy, y,
                        c_float(a, arg(n, 0)));
}

/* nn.Softplus(beta, threshold): log(1 + e^(beta x)) / beta, x itself where
 * beta x > threshold; dy sigmoid(beta x) (1 there) */
static const char *softplus_f(Arena *a, const Node *n, const char *x)
{
    const char *beta = c_float(a, arg(n, 0)), *th = c_float(a, arg(n, 1));
    return arena_printf(a, "%s * %s > %s ? %s : log1pf(expf(%s * %s)) / %s", x, beta, th, x, x,
                        beta, beta);
}

static const char *softplus_b(Arena *a, const Node *n, const char *dy, const char *x,
                              const char *y)
{
    const char *beta = c_float(a, arg(n, 0)), *th = c_float(a, arg(n, 1));
    (void)y;
    return arena_printf(a, "%s * %s > %s ? %s : %s / (1.0f + expf(-%s * %s))", x, beta, th, dy,
                        dy, x, beta);
}

static const Act relu_act = {relu_f, relu_b, NEEDS_Y}, leaky_act = {leaky_f, leaky_b, NEEDS_Y},
                 tanh_act = {tanh_f, tanh_b, NEEDS_Y}, sigmoid_act = {sigmoid_f, sigmoid_b, NEEDS_Y},
                 gelu_act = {gelu_f, gelu_b, NEEDS_X}, silu_act = {silu_f, silu_b, NEEDS_X},
                 elu_act = {elu_f, elu_b, NEEDS_Y}, softplus_act = {softplus_f, softplus_b, NEEDS_X};

static int64_t value_size(const Emit *e, const Node *n)
{
    return shape_size(&e->p->values[n->out].shape);
}

static void act_fwd(Emit *e, const Node *n)
{
    emit_each(e, value_size(e, n));
    emitf(e, "    y[i] = %s;", n->op->act->fwd(e->arena, n, "x[i]"));
}

static void act_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emit_each(e, value_size(e, n));
    emitf(e, "    dx[i] = %s;", act_grad(e->arena, n, n->op->act, "dy[i]", "x[i]", "y[i]"));
}

/* -------------------------------------------------------------- flatten */

static bool flatten_shape(Program *p, Node *n)
{
    *out_shape(p, n) = (Shape){1, {shape_size(in_shape(p, n))}};
    return true;
}

/* Only reached for a channel-first input (otherwise flatten is a view):
 * [C, n, HW] -> [n, C*HW], and back for the gradient. */
static void flatten_fwd(Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    emitf(e, "/* [%lld, n, %lld] (channel first) -> [n, %lld] */", C, HW, C * HW);
    emitf(e, "for (int c = 0; c < %lld; c++)", C);
    emitf(e, "    for (int i = 0; i < n; i++)");
    emitf(e, "        memcpy(y + (size_t)i * %lld + (size_t)c * %lld, x + ((size_t)c * n + i) * %lld,",
          C * HW, HW, HW);
    emitf(e, "               sizeof(float) * %lld);", HW);
}

static void flatten_bwd(Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emitf(e, "for (int c = 0; c < %lld; c++)", C);
    emitf(e, "    for (int i = 0; i < n; i++)");
    emitf(e, "        memcpy(dx + ((size_t)c * n + i) * %lld, dy + (size_t)i * %lld + (size_t)c * %lld,",
          HW, C * HW, HW);
    emitf(e, "               sizeof(float) * %lld);", HW);
}

/* -------------------------------------------------------------- dropout */

static bool dropout_shape(Program *p, Node *n)
{
    same_shape(p, n);
    n->aux_size = shape_size(in_shape(p, n));
    return true;
}

/* In training, each value is kept with probability 1 - p and scaled by
 * 1 / (1 - p) (PyTorch's inverted dropout); in evaluation y = x. */
static void dropout_fwd(Emit *e, const Node *n)
{
    long long size = (long long)value_size(e, n);
    emitf(e, "if (!net->training) {");
    emitf(e, "    memcpy(y, x, sizeof(float) * (size_t)n * %lld);", size);
    emitf(e, "    return;");
    emitf(e, "}");
    emitf(e, "/* masks (philox.h): a function of the run's dropout key, layer %d, the step */",
          n->index);
    emitf(e, "nrt_dropout_fwd(net, %d, x, y, mask, (size_t)n * %lld, %s);", n->index, size,
          c_double(e->arena, arg(n, 0)));
}

static void dropout_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return;");
    emit_each(e, value_size(e, n));
    emitf(e, "    dx[i] = dy[i] * mask[i];");
}

/* ------------------------------------------------------------ batchnorm */

/* nn.BatchNorm1d on [F] and nn.BatchNorm2d on [C, H, W]: each channel
 * (feature) normalised by the batch's mean and biased variance in
 * training, by the running statistics in evaluation, then scaled by weight
 * (gamma, ones at first) and shifted by bias (beta, zeros) unless
 * affine=false.  The running statistics move in training by momentum
 * towards the batch's mean and unbiased variance, and num_batches_tracked
 * counts the batches: buffers, not parameters.  Forward keeps the batch's
 * mean and 1/std per channel ("stats") for backward; the memory plan
 * gives an aux per sample, so it reserves 2C floats a sample and uses the
 * first 2C.  Either layout: a channel's values lie at [n, C, HW] or, after
 * a convolution, channel first at [C, n, HW] (runtime's nrt_bn). */

enum { BN_EPS, BN_MOMENTUM, BN_AFFINE };

static bool batchnorm_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    bool two_d = !strcmp(n->op->sig.name, "batchnorm2d");
    if (two_d && s->rank != 3) {
        diag_error(p->diag, n->stmt->call->loc,
                   "batchnorm2d expects an image input [channels, height, width], got %s",
                   shape_str(p->arena, s));
        if (s->rank == 1)
            diag_note(p->diag, n->stmt->call->loc, "use batchnorm1d for a flat input");
        return false;
    }
    if (!two_d && s->rank != 1) {
        diag_error(p->diag, n->stmt->call->loc, "batchnorm1d expects a flat input [features], got %s",
                   shape_str(p->arena, s));
        diag_note(p->diag, n->stmt->call->loc, s->rank == 3
                  ? "use batchnorm2d for an image input, or insert 'flatten' before this layer"
                  : "insert 'flatten' before this layer");
        return false;
    }
    same_shape(p, n);
    int64_t C = s->d[0];
    if (arg(n, BN_AFFINE)) {
        int w = ir_add_param(p, n, "weight", 1, (int64_t[]){C}, (int)C, (int)C, false);
        int b = ir_add_param(p, n, "bias", 1, (int64_t[]){C}, (int)C, (int)C, true);
        p->params[w].init.kind = NRT_INIT_ONES;
        p->params[b].init.kind = NRT_INIT_ZEROS;
    }
    ir_add_buffer(p, n, "running_mean", NRT_F32, 1, (int64_t[]){C}, 0.0f);
    ir_add_buffer(p, n, "running_var", NRT_F32, 1, (int64_t[]){C}, 1.0f);
    ir_add_buffer(p, n, "num_batches_tracked", NRT_I64, 0, NULL, 0.0f);
    n->aux_size = 2 * C;
    return true;
}

/* C, HW (1 for batchnorm1d) and whether the input is channel first */
static struct bn { long long C, HW; int cn; } bn_of(const Emit *e, const Node *n)
{
    const Shape *s = &e->p->values[n->in].shape;
    return (struct bn){s->d[0], s->rank == 3 ? s->d[1] * s->d[2] : 1, input_cn(e, n)};
}

static void bn_geometry(Emit *e, const Node *n)
{
    struct bn g = bn_of(e, n);
    emitf(e, "static const nrt_bn g = {.c = %lld, .hw = %lld, .cn = %d, .eps = %s, .momentum = %s};",
          g.C, g.HW, g.cn, c_double(e->arena, arg(n, BN_EPS)), c_double(e->arena, arg(n, BN_MOMENTUM)));
}

static void batchnorm_fwd(Emit *e, const Node *n)
{
    const char *wb = n->nparams ? "W, b" : "NULL, NULL";
    bn_geometry(e, n);
    emitf(e, "if (net->training) /* the batch's statistics; the running ones move */");
    emitf(e, "    nrt_batchnorm_train(&g, n, x, %s, running_mean, running_var, num_batches_tracked,", wb);
    emitf(e, "                        stats, y);");
    emitf(e, "else");
    emitf(e, "    nrt_batchnorm_eval(&g, n, x, %s, running_mean, running_var, y);", wb);
}

static void batchnorm_bwd(Emit *e, const Node *n)
{
    bn_geometry(e, n);
    emitf(e, "nrt_batchnorm_bwd(&g, n, x, dy, %s, stats, %s, dx);", n->nparams ? "W" : "NULL",
          n->nparams ? "dW, db" : "NULL, NULL");
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
 * the same names; lowp is the net's: "&net->lowp"). */
static const char *param_names(Emit *e, const char *params, const char *prefix)
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
                             (end - id == 4 && !strncmp(id, "lowp", 4)) ? "net->" : "",
                             (int)(end - id), id);
        p = *end ? end + 1 : end;
    }
    return names;
}

/* An elementwise kernel NAME_INDEX_WHAT over count values and its launch:
 * params are its parameters after the count ("float *y, const float *b"),
 * each passed from the host local of the same name; body, its statements
 * for value i. */
static void cu_each(Emit *e, const Node *n, const char *what, const char *count,
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
static const char *cu_lowp(Emit *e, const char *params)
{
    return arena_printf(e->arena, "%s, int lowp", params);
}

/* y = act(y + b): the bias and the fused activation as one kernel. */
static void cu_epilogue(Emit *e, const Node *n, const char *count, const char *bias_index,
                        bool np)
{
    const char *expr = epilogue(e, n, n->nparams > 1);
    if (!expr)
        return;
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
static const char *batch_count(Emit *e, long long size)
{
    return arena_printf(e->arena, "(size_t)n * %lld", size);
}

static void cu_act_grad(Emit *e, const Node *n, const char *count)
{
    if (!n->fused)
        return;
    emitf(e, "/* through the fused %s */", n->fused->op->sig.name);
    const char *body[1] = {arena_printf(
        e->arena, "dy[i] = %s;",
        lowp_expr(e, act_grad(e->arena, n->fused, n->fused->op->act, "dy[i]", NULL, "y[i]")))};
    cu_each(e, n, "bwd_act", count, cu_lowp(e, "float *dy, const float *y"), body, 1);
}

static void linear_cu_fwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    emitf(e, "/* y[n, %lld] = x[n, %lld] W^T (cuBLAS) */", M, K);
    emitf(e, "TRY(nrt_cu_gemm(net, 0, 1, n, %lld, %lld, 1.0f, x, %lld, W, %lld, 0.0f, y, %lld, err));",
          M, K, K, K, M);
    cu_epilogue(e, n, batch_count(e, M), arena_printf(e->arena, "i %% %lld", M), false);
}

static void linear_cu_bwd(Emit *e, const Node *n)
{
    const Program *p = e->p;
    long long K = p->values[n->in].shape.d[0], M = p->values[n->out].shape.d[0];
    cu_act_grad(e, n, batch_count(e, M));
    emitf(e, "/* dW[%lld, %lld] = dy^T x */", M, K);
    emitf(e, "TRY(nrt_cu_gemm(net, 1, 0, %lld, %lld, n, 1.0f, dy, %lld, x, %lld, 0.0f, dW, %lld, err));",
          M, K, M, K, K);
    if (n->nparams > 1)
        emitf(e, "TRY(nrt_cu_col_sums(net, dy, n, %lld, db, err));", M);
    emitf(e, "/* dx[n, %lld] = dy W */", K);
    emitf(e, "if (dx)");
    emitf(e, "    TRY(nrt_cu_gemm(net, 0, 0, n, %lld, %lld, 1.0f, dy, %lld, W, %lld, 0.0f, dx, %lld, err));",
          K, M, M, K, K);
}

/* A tiling of netrt_kernels.cuh (Tiling<BM, BN, BK, TM, TN, B_KFAST>) and
 * its threads, (BN / TN) * (BM / TM). */
struct tiling {
    int bm, bn, bk, tm, tn;
    bool kfast;
};

static int tiling_threads(struct tiling t)
{
    return (t.bn / t.tn) * (t.bm / t.tm);
}

static const char *tiling_type(Emit *e, struct tiling t)
{
    return arena_printf(e->arena, "nrt_k::Tiling<%d, %d, %d, %d, %d, %s>", t.bm, t.bn, t.bk,
                        t.tm, t.tn, t.kfast ? "true" : "false");
}

/* The tilings of the convolutions' products by their M (the output's
 * channels; the input's for dx): 16, 32 or 64 rows a tile; dw's N =
 * C*KH*KW is small and its K = n*OH*OW long (split among blocks). */
static struct tiling conv_tiling(long long m)
{
    if (m <= 16)
        return (struct tiling){16, 256, 16, 4, 8, false};
    if (m <= 32)
        return (struct tiling){32, 128, 16, 4, 8, false};
    return (struct tiling){64, 128, 16, 8, 8, false};
}

static struct tiling dw_tiling(long long m)
{
    if (m <= 16)
        return (struct tiling){16, 64, 32, 4, 4, true};
    if (m <= 32)
        return (struct tiling){32, 64, 32, 4, 4, true};
    return (struct tiling){64, 64, 32, 8, 4, true};
}

/* nrt_k::ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW> */
static const char *conv_geom(Emit *e, struct conv c)
{
    return arena_printf(e->arena, "nrt_k::ConvGeom<%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                        "%lld, %lld, %lld, %lld>", c.C, c.H, c.W, c.O, c.OH, c.OW, c.KH, c.KW,
                        c.SH, c.SW, c.PH, c.PW);
}

/* A kernel whose body is one call of a netrt_kernels.cuh template. */
static const char *cu_call(Emit *e, const Node *n, const char *what, int bounds,
                           const char *params, const char *call)
{
    const char *body[1] = {call};
    return cu_kernel(e, n, what, bounds, params, body, 1);
}

/* An implicit GEMM's launch: its nrt_cu_tile (what, floats a sample in and
 * out, the product's rows and columns a sample, the tiling), then
 * nrt_cu_igemm. */
static void cu_igemm(Emit *e, const Node *n, const char *k, const char *what, long long in,
                     long long out, long long rows, long long cols, struct tiling t,
                     const char *args)
{
    emitf(e, "static const nrt_cu_tile %s_tile = {\"%s\", %lld, %lld, %lld, %lld, %d, %d, %d};",
          what, pass_name(e, n, what), in, out, rows, cols, t.bm, t.bn, tiling_threads(t));
    emitf(e, "TRY(nrt_cu_igemm(net, %s, &%s_tile, n, NRT_ARGS(%s), err));", k, what, args);
}

static void conv2d_cu_fwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    struct tiling t = conv_tiling(c.O);
    const char *k = cu_call(e, n, "fwd", tiling_threads(t),
                            "int n, const float *x, const float *w, float *y, int prec",
                            arena_printf(e->arena, "nrt_k::conv2d_fwd<%s, %s, %s>(n, x, w, y, prec);",
                                         conv_geom(e, c), tiling_type(e, t),
                                         input_cn(e, n) ? "true" : "false"));
    emitf(e, "/* y[%lld, n*%lld] = W[%lld, %lld] cols(x): implicit GEMM, no columns stored */",
          c.O, c.P, c.O, c.CKK);
    cu_igemm(e, n, k, "fwd", c.C * c.H * c.W, c.O * c.P, c.O, c.P, t, "&x, &W, &y, &net->lowp");
    if (n->fused || n->nparams > 1)
        emitf(e, "size_t np = (size_t)n * %lld;", c.P);
    cu_epilogue(e, n, arena_printf(e->arena, "(size_t)%lld * np", c.O), "i / np", true);
}

static int64_t conv2d_cu_workspace(const Program *p, const Node *n)
{
    struct conv c = conv_of(p, n);
    int64_t total = c.O * c.CKK, splits = cu_dw_max_splits(total);
    return splits > 1 ? (int64_t)sizeof(float) * splits * total : 0;
}

static void conv2d_cu_bwd(Emit *e, const Node *n)
{
    struct conv c = conv_of(e->p, n);
    const char *cn = input_cn(e, n) ? "true" : "false";
    if (n->fused || n->nparams > 1)
        emitf(e, "size_t np = (size_t)n * %lld;", c.P);
    cu_act_grad(e, n, arena_printf(e->arena, "(size_t)%lld * np", c.O));
    if (n->nparams > 1)
        emitf(e, "TRY(nrt_cu_row_sums(net, dy, %lld, np, db, err));", c.O);

    struct tiling t = dw_tiling(c.O);
    int64_t total = c.O * c.CKK, splits = cu_dw_max_splits(total);
    const char *k = cu_call(e, n, "dw", tiling_threads(t),
                            "int n, int chunk, const float *x, const float *dy, float *dw, "
                            "float *partial, int prec",
                            arena_printf(e->arena, "nrt_k::conv2d_dw<%s, %s, %s>(n, chunk, x, dy, "
                                         "dw, partial, prec);", conv_geom(e, c), tiling_type(e, t),
                                         cn));
    const char *reduce = splits > 1
        ? cu_call(e, n, "dw_reduce", 0, "int splits, const float *partial, float *dw",
                  arena_printf(e->arena, "nrt_k::conv2d_dw_reduce<%lld>(splits, partial, dw);",
                               (long long)total))
        : "-1";
    emitf(e, "/* dW[%lld, %lld] = dy cols(x)^T, the sum over n*%lld positions split in chunks */",
          c.O, c.CKK, c.P);
    emitf(e, "static const nrt_cu_dw dw_tile = {\"%s\", %lld, %lld, %lld, %lld, %lld, %d, %d, %d, %d, "
          "%lld};", pass_name(e, n, "dw"), c.C * c.H * c.W, c.O * c.P, c.O, c.CKK, c.P, t.bm, t.bn, t.bk,
          tiling_threads(t), (long long)splits);
    emitf(e, "TRY(nrt_cu_conv2d_dw(net, %s, %s, &dw_tile, n, x, dy, dW, err));", k, reduce);
    struct tiling tx = conv_tiling(c.C);
    const char *kx = cu_call(e, n, "dx", tiling_threads(tx),
                             "int n, const float *w, const float *dy, float *dx, int prec",
                             arena_printf(e->arena, "nrt_k::conv2d_dx<%s, %s, %s>(n, w, dy, dx, prec);",
                                          conv_geom(e, c), tiling_type(e, tx), cn));
    emitf(e, "/* dx = the adjoint of cols applied to W^T dy */");
    emitf(e, "if (dx) {");
    e->indent++;
    cu_igemm(e, n, kx, "dx", c.O * c.P, c.C * c.H * c.W, c.C, c.H * c.W, tx,
             "&W, &dy, &dx, &net->lowp");
    e->indent--;
    emitf(e, "}");
}

/* H, W, OH, OW, K, S, P */
static const char *pool_targs(Emit *e, const Node *n)
{
    const Shape *i = &e->p->values[n->in].shape, *o = &e->p->values[n->out].shape;
    return arena_printf(e->arena, "%lld, %lld, %lld, %lld, %d, %d, %d", (long long)i->d[1],
                        (long long)i->d[2], (long long)o->d[1], (long long)o->d[2],
                        (int)arg(n, PL_KERNEL), (int)arg(n, PL_STRIDE), (int)arg(n, PL_PAD));
}

/* A pooling pass: one thread an output value (forward) or an input value
 * (backward), over the n*C planes whatever the layout. */
static void cu_pool(Emit *e, const Node *n, bool bwd)
{
    const Shape *in = &e->p->values[n->in].shape, *out = &e->p->values[n->out].shape;
    /* the template's parameters after the count, by pass and kind (max
     * pooling keeps its argmax) */
    static const char *const params_of[2][2] = {
        {"const float *x, float *y", "const float *x, float *y, int32_t *arg"},
        {"const float *dy, float *dx", "const float *dy, const int32_t *arg, float *dx"}};
    const char *params = params_of[bwd][n->iaux_size > 0];
    const char *k = cu_call(e, n, bwd ? "bwd" : "fwd", 0,
                            arena_printf(e->arena, "int total, %s", params),
                            arena_printf(e->arena, "nrt_k::%s_%s<%s>(total, %s);", n->op->sig.name,
                                         bwd ? "bwd" : "fwd", pool_targs(e, n),
                                         param_names(e, params, "")));
    const Shape *s = bwd ? in : out;
    if (bwd)
        emitf(e, "if (dx)");
    emitf(e, "%sTRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(%s), err));",
          bwd ? "    " : "", k, (long long)shape_size(s), param_names(e, params, "&"));
}

static void pool_cu_fwd(Emit *e, const Node *n) { cu_pool(e, n, false); }

static void pool_cu_bwd(Emit *e, const Node *n) { cu_pool(e, n, true); }

static void act_cu_fwd(Emit *e, const Node *n)
{
    const char *body[1] = {arena_printf(e->arena, "y[i] = %s;", n->op->act->fwd(e->arena, n, "x[i]"))};
    cu_each(e, n, "fwd", batch_count(e, (long long)value_size(e, n)), "const float *x, float *y",
            body, 1);
}

static void act_cu_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    const Act *act = n->op->act;
    const char *body[1] = {arena_printf(e->arena, "dx[i] = %s;",
                                        act_grad(e->arena, n, act, "dy[i]", "x[i]", "y[i]"))};
    cu_each(e, n, "bwd", batch_count(e, (long long)value_size(e, n)),
            arena_printf(e->arena, "const float *dy, %s%sfloat *dx",
                         act->needs & NEEDS_X ? "const float *x, " : "",
                         act->needs & NEEDS_Y ? "const float *y, " : ""),
            body, 1);
}

/* flatten of a channel-first value: the transposes [C, n, HW] <-> [n, C*HW] */
static void cu_flatten(Emit *e, const Node *n, bool bwd)
{
    const Shape *s = &e->p->values[n->in].shape;
    long long C = s->d[0], HW = s->d[1] * s->d[2];
    const char *k = cu_call(e, n, bwd ? "bwd" : "fwd", 0,
                            "int total, int n, const float *x, float *y",
                            arena_printf(e->arena, "nrt_k::%s<%lld, %lld>(n, total, x, y);",
                                         bwd ? "nc_to_cn" : "cn_to_nc", C, HW));
    if (bwd) {
        emitf(e, "if (dx)");
        emitf(e, "    TRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(&n, &dy, &dx), "
              "err));", k, C * HW);
    } else {
        emitf(e, "/* [%lld, n, %lld] (channel first) -> [n, %lld] */", C, HW, C * HW);
        emitf(e, "TRY(nrt_cu_each_int(net, %s, (long long)n * %lld, NRT_ARGS(&n, &x, &y), err));",
              k, C * HW);
    }
}

static void flatten_cu_fwd(Emit *e, const Node *n) { cu_flatten(e, n, false); }

static void flatten_cu_bwd(Emit *e, const Node *n) { cu_flatten(e, n, true); }

static void dropout_cu_fwd(Emit *e, const Node *n)
{
    const char *count = batch_count(e, (long long)value_size(e, n));
    emitf(e, "if (!net->training) {");
    e->indent++;
    const char *body[1] = {"y[i] = x[i];"};
    cu_each(e, n, "fwd_eval", count, "const float *x, float *y", body, 1);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emitf(e, "/* masks (philox.h): a function of the run's dropout key, layer %d, the step */",
          n->index);
    emitf(e, "TRY(nrt_cu_dropout_fwd(net, %d, x, y, mask, %s, %s, err));", n->index, count,
          c_double(e->arena, arg(n, 0)));
}

static void dropout_cu_bwd(Emit *e, const Node *n)
{
    emitf(e, "if (!dx)");
    emitf(e, "    return 0;");
    const char *body[1] = {"dx[i] = dy[i] * mask[i];"};
    cu_each(e, n, "bwd", batch_count(e, (long long)value_size(e, n)),
            "const float *dy, const float *mask, float *dx", body, 1);
}

/* batchnorm: a block of BN_THREADS threads a channel (nrt_k::batchnorm_*),
 * its sums in a fixed order; eps and momentum written into the kernels */
#define BN_THREADS 256

static const char *bn_targs(Emit *e, const Node *n)
{
    struct bn g = bn_of(e, n);
    return arena_printf(e->arena, "%lld, %lld, %s, %d", g.C, g.HW, g.cn ? "true" : "false",
                        BN_THREADS);
}

static void batchnorm_cu_fwd(Emit *e, const Node *n)
{
    bool affine = n->nparams > 0;
    const char *wb = affine ? "W, b" : "nullptr, nullptr", *eps = c_double(e->arena, arg(n, BN_EPS));
    const char *wbp = affine ? "const float *W, const float *b, " : "";
    const char *train = cu_call(
        e, n, "fwd_train", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, %sfloat *running_mean, float *running_var, "
                     "long long *num_batches_tracked, float *stats, float *y", wbp),
        arena_printf(e->arena, "nrt_k::batchnorm_train<%s>(n, x, %s, running_mean, running_var, "
                     "num_batches_tracked, stats, y, %s, %s);", bn_targs(e, n), wb, eps,
                     c_double(e->arena, arg(n, BN_MOMENTUM))));
    const char *eval = cu_call(
        e, n, "fwd_eval", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, %sconst float *running_mean, "
                     "const float *running_var, float *y", wbp),
        arena_printf(e->arena, "nrt_k::batchnorm_eval<%s>(n, x, %s, running_mean, running_var, y, "
                     "%s);", bn_targs(e, n), wb, eps));
    const char *wba = affine ? "&W, &b, " : "";
    long long C = bn_of(e, n).C;
    emitf(e, "if (net->training) /* the batch's statistics; the running ones move */");
    emitf(e, "    TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, %s&running_mean, "
          "&running_var,", train, C, BN_THREADS, wba);
    emitf(e, "                      &num_batches_tracked, &stats, &y), err));");
    emitf(e, "else");
    emitf(e, "    TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, %s&running_mean, "
          "&running_var, &y),", eval, C, BN_THREADS, wba);
    emitf(e, "                      err));");
}

static void batchnorm_cu_bwd(Emit *e, const Node *n)
{
    bool affine = n->nparams > 0;
    const char *k = cu_call(
        e, n, "bwd", BN_THREADS,
        arena_printf(e->arena, "int n, const float *x, const float *dy, %sconst float *stats, "
                     "%sfloat *dx", affine ? "const float *W, " : "",
                     affine ? "float *dW, float *db, " : ""),
        arena_printf(e->arena, "nrt_k::batchnorm_bwd<%s>(n, x, dy, %s, stats, %s, dx);",
                     bn_targs(e, n), affine ? "W" : "nullptr", affine ? "dW, db" : "nullptr, nullptr"));
    emitf(e, "TRY(nrt_cu_launch(net, %s, %lld, 1, 1, %d, NRT_ARGS(&n, &x, &dy, %s&stats, %s&dx), "
          "err));", k, bn_of(e, n).C, BN_THREADS, affine ? "&W, " : "", affine ? "&dW, &db, " : "");
}

/* ------------------------------------------------------------------ rnn */

/* An Elman RNN over a sequence x [T, F] (nn.RNN with batch_first and a
 * zero initial state): h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T +
 * b_hh), each layer's states the sequence of the next; the output is the
 * top layer's last state [H].
 *
 * Forward keeps every state of every layer in hs, layer by layer [n, T,
 * H] (a sample's steps side by side, as in x), so that the batch at one
 * step is a matrix whose rows lie T*H floats apart: the input's part of
 * every step is one product, then one product a step adds h_{t-1} W_hh^T
 * before the activation.  Backward walks back through time: g, d loss / d
 * pre-activation [n, T, H], starts as what comes from above (dy at the
 * top layer's last step; for a lower layer, the d input of the layer
 * above) and step by step gets g_{t+1} W_hh and the activation's
 * derivative, a function of h_t alone.  Then dW_ih = g^T x and dx = g W_ih
 * are one product each, dW_hh the sum over steps of g_t^T h_{t-1}, and
 * both biases the column sums of g.  The g of each layer lives in the
 * scratch, two buffers in turn: a layer's d input is the g of the one
 * below.
 *
 * In a bf16 run the products read bf16 weights (and the first layer's
 * input, cast, or the bf16 states of the layer below) and each step is
 * what PyTorch 1.13's nn.RNN does under autocast: ih = x W_ih^T + b_ih for
 * every step at once, hh = bf16(h_{t-1} W_hh^T + b_hh) (its product into a
 * buffer of its own, hh), h_t = bf16(act(bf16(ih + hh))); ih is rounded
 * once above the first layer, but twice in it, bf16(bf16(x W_ih^T) +
 * b_ih): PyTorch's view of a batch-first input, time first, is not
 * contiguous, so its linear is a product, rounded, then the bias added.
 * Backward rounds each step's g once, after act' (autocast rounds the
 * sum g_{t+1} W_hh + what comes from above twice, its parts first), and
 * the weights' gradients at the end.
 *
 * The passes are one text for both backends: products are nrt_gemm on
 * the cpu and nrt_cu_gemm (cuBLAS) on the GPU with the same arguments,
 * elementwise steps loops or kernels with the same body (rnn_each). */

enum { RNN_HIDDEN, RNN_LAYERS, RNN_NONLINEARITY, RNN_BIAS };

struct rnn {
    long long T, F, H, L, TH;
    bool bias;
    const OpDef *act; /* tanh or relu, from this table */
};

static struct rnn rnn_of(const Program *p, const Node *n)
{
    const Shape *s = &p->values[n->in].shape;
    struct rnn r = {s->d[0], s->d[1], (long long)arg(n, RNN_HIDDEN), (long long)arg(n, RNN_LAYERS),
                    0, arg(n, RNN_BIAS) != 0, op_find(n->args[RNN_NONLINEARITY].s)};
    r.TH = r.T * r.H;
    return r;
}

static bool rnn_shape(Program *p, Node *n)
{
    const Shape *s = in_shape(p, n);
    Loc at = n->stmt->call->loc;
    if (s->rank != 2) {
        diag_error(p->diag, at, "rnn expects a sequence input [steps, features], got %s",
                   shape_str(p->arena, s));
        if (s->rank == 1 && n->in == 0)
            diag_note(p->diag, at, "declare the input as a sequence: 'input %s[%lld, 1]' is %lld "
                      "steps of one feature", p->input_name, (long long)s->d[0], (long long)s->d[0]);
        else if (s->rank == 1 && p->nodes[n->in - 1].op == n->op)
            diag_note(p->diag, at, "an rnn gives its last state only: stack rnn layers with "
                      "'layers=N'");
        else if (s->rank == 1)
            diag_note(p->diag, at, "an rnn reads the model's input declared as a sequence, "
                      "e.g. 'input x[12, 1]'");
        else if (s->d[0] == 1)
            diag_note(p->diag, at, "to read the image's rows as steps, declare 'input %s[%lld, "
                      "%lld]'", p->input_name, (long long)s->d[1], (long long)s->d[2]);
        else
            diag_note(p->diag, at, "give each step's features as one dimension: 'input %s[%lld, "
                      "%lld]'", p->input_name, (long long)s->d[0], (long long)(s->d[1] * s->d[2]));
        return false;
    }
    const int64_t T = s->d[0], F = s->d[1], H = (int64_t)arg(n, RNN_HIDDEN);
    const int L = (int)arg(n, RNN_LAYERS);
    if ((double)L * T * H * 2 > 2147483647.0) {
        diag_error(p->diag, at, "rnn(%lld, layers=%d) over %lld steps keeps too many states "
                   "(%.0f floats a sample)", (long long)H, L, (long long)T, (double)L * T * H);
        return false;
    }
    *out_shape(p, n) = (Shape){1, {H}};
    /* PyTorch's names and order; its init, every parameter U(±1/sqrt(H)),
     * unless the model says otherwise (the fans are then torch.nn.init's) */
    for (int l = 0; l < L; l++) {
        const int64_t in = l ? H : F;
        ir_add_param(p, n, arena_printf(p->arena, "weight_ih_l%d", l), 2, (int64_t[]){H, in},
                     (int)in, (int)H, false);
        ir_add_param(p, n, arena_printf(p->arena, "weight_hh_l%d", l), 2, (int64_t[]){H, H},
                     (int)H, (int)H, false);
        if (arg(n, RNN_BIAS)) {
            ir_add_param(p, n, arena_printf(p->arena, "bias_ih_l%d", l), 1, (int64_t[]){H},
                         (int)in, (int)H, true);
            ir_add_param(p, n, arena_printf(p->arena, "bias_hh_l%d", l), 1, (int64_t[]){H},
                         (int)H, (int)H, true);
        }
    }
    const float bound = (float)(1 / sqrt((double)H));
    for (int k = 0; k < n->nparams; k++)
        p->params[n->param0 + k].init = (nrt_init){NRT_INIT_UNIFORM, -bound, bound};
    n->aux_size = L * T * H;                /* hs: every state, for backward */
    n->scratch = (L > 1 ? 2 : 1) * T * H;   /* g, and the layer below's */
    return true;
}

/* base + n * floats: where a batch's part of a buffer starts */
static const char *rnn_at(Emit *e, const char *base, long long floats)
{
    return floats ? arena_printf(e->arena, "%s + (size_t)n * %lld", base, floats) : base;
}

/* A product: nrt_sgemm's arguments, for the cpu (nrt_gemm) or cuBLAS. */
static void rnn_gemm(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rnn_gemm(Emit *e, const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (e->cuda)
        emitf(e, "TRY(nrt_cu_gemm(net, %s, err));", args);
    else
        emitf(e, "nrt_gemm(net->dot, %s);", args);
}

/* body for every row < rows (a C expression) and column j < H of a
 * matrix whose rows lie stride floats apart (k = row * stride + j): two
 * loops on the cpu; on the GPU, kernel WHAT of parameters params (host
 * locals of the same names) and its launch. */
static void rnn_each(Emit *e, const Node *n, const char *what, const char *params,
                     const char *rows, long long stride, const char *body)
{
    const long long H = (long long)arg(n, RNN_HIDDEN);
    if (e->cuda) {
        const char *lines[2] = {
            arena_printf(e->arena, "size_t row = i / %lld, j = i %% %lld, k = row * %lld + j;", H,
                         H, stride),
            body};
        cu_each(e, n, what, arena_printf(e->arena, "(size_t)%s * %lld", rows, H), params, lines, 2);
        return;
    }
    emitf(e, "for (size_t row = 0; row < (size_t)%s; row++)", rows);
    emitf(e, "    for (size_t j = 0; j < %lld; j++) {", H);
    emitf(e, "        size_t k = row * %lld + j;", stride);
    emitf(e, "        %s", body);
    emitf(e, "    }");
}

static void rnn_fwd(Emit *e, const Node *n)
{
    const struct rnn r = rnn_of(e->p, n);
    Arena *a = e->arena;
    const char *lp = lowp_flag(e);
    if (r.T > 1)
        emitf(e, "float *hh = net->scratch; /* bf16: h_{t-1} W_hh^T [n, %lld], rounded alone */",
              r.H);
    for (int l = 0; l < r.L; l++) {
        const long long in = l ? r.H : r.F;
        const char *x = l ? arena_printf(a, "h%d", l - 1) : "x";
        emitf(e, "/* layer %d: h%d[n, %lld, %lld], its state at every step */", l, l, r.T, r.H);
        emitf(e, "float *h%d = %s;", l, rnn_at(e, "hs", l * r.TH));
        emitf(e, "/* the input's part of every step: h%d[n*%lld, %lld] = %s[n*%lld, %lld] "
              "W_ih_l%d^T%s */", l, r.T, r.H, x, r.T, in, l, r.bias ? " + b_ih + b_hh" : "");
        rnn_gemm(e, "0, 1, n * %lld, %lld, %lld, 1.0f, %s, %lld, W_ih_l%d, %lld, 0.0f, h%d, %lld",
                 r.T, r.H, in, x, in, l, in, l, r.H);
        if (r.bias) {
            emitf(e, "/* (bf16: ih rounded%s, b_hh added at each step with its product) */",
                  l ? "" : " before and after b_ih");
            rnn_each(e, n, arena_printf(a, "fwd_bias_l%d", l),
                     cu_lowp(e, arena_printf(a, "float *h%d, const float *b_ih_l%d, "
                                             "const float *b_hh_l%d", l, l, l)),
                     arena_printf(a, "n * %lld", r.T), r.H,
                     arena_printf(a, "h%d[k] = %s ? nrt_lowp(%s, %s + b_ih_l%d[j]) : "
                                  "h%d[k] + (b_ih_l%d[j] + b_hh_l%d[j]);", l, lp, lp,
                                  l ? arena_printf(a, "h%d[k]", l)
                                    : arena_printf(a, "nrt_lowp(%s, h%d[k])", lp, l),
                                  l, l, l, l));
        } else {
            emitf(e, "if (net->lowp) /* ih rounded */");
            rnn_each(e, n, arena_printf(a, "fwd_round_l%d", l),
                     cu_lowp(e, arena_printf(a, "float *h%d", l)), arena_printf(a, "n * %lld", r.T), r.H,
                     arena_printf(a, "h%d[k] = nrt_lowp(%s, h%d[k]);", l, lp, l));
        }
        emitf(e, "for (int t = 0; t < %lld; t++) {", r.T);
        e->indent++;
        emitf(e, "float *ht = h%d + (size_t)t * %lld; /* sample i's at ht + i*%lld */", l, r.H,
              r.TH);
        if (r.T > 1) {
            emitf(e, "if (t > 0) /* + h_{t-1} W_hh_l%d^T (bf16: into hh) */", l);
            e->indent++;
            rnn_gemm(e, "0, 1, n, %lld, %lld, 1.0f, ht - %lld, %lld, W_hh_l%d, %lld, "
                     "net->lowp ? 0.0f : 1.0f, net->lowp ? hh : ht, net->lowp ? %lld : %lld",
                     r.H, r.H, r.H, r.TH, l, r.H, r.H, r.TH);
            e->indent--;
        }
        /* bf16: hh = bf16(h_{t-1} W_hh^T + b_hh) (b_hh alone at t = 0), v = bf16(ih + hh) (as
         * fp16 likewise) */
        const char *hh = r.T > 1 ? arena_printf(a, "(t > 0 ? hh[row * %lld + j] : 0.0f)", r.H)
                                 : "0.0f";
        const char *hh_b = r.bias ? arena_printf(a, "nrt_lowp(%s, %s + b_hh_l%d[j])", lp, hh, l)
                                  : arena_printf(a, "nrt_lowp(%s, %s)", lp, hh);
        const char *params = arena_printf(a, "float *ht%s%s", r.T > 1 ? ", const float *hh, int t" : "",
                                          r.bias ? arena_printf(a, ", const float *b_hh_l%d", l) : "");
        rnn_each(e, n, arena_printf(a, "fwd_act_l%d", l), cu_lowp(e, params), "n", r.TH,
                 arena_printf(a, "float v = %s ? nrt_lowp(%s, %s + ht[k]) : ht[k]; ht[k] = %s;", lp,
                              lp, hh_b, lowp_expr(e, r.act->act->fwd(a, n, "v"))));
        e->indent--;
        emitf(e, "}");
        if (r.T == 1)
            emitf(e, "(void)W_hh_l%d; /* one step: no state before it */", l);
    }
    emitf(e, "/* y[n, %lld]: the top layer's last state */", r.H);
    rnn_each(e, n, "fwd_last", arena_printf(a, "const float *h%lld, float *y", r.L - 1), "n", r.TH,
             arena_printf(a, "y[row * %lld + j] = h%lld[k + %lld];", r.H, r.L - 1, (r.T - 1) * r.H));
}

static void rnn_bwd(Emit *e, const Node *n)
{
    const struct rnn r = rnn_of(e->p, n);
    Arena *a = e->arena;
    for (int l = 0; l < r.L; l++)
        emitf(e, "const float *h%d = %s; /* layer %d's states */", l, rnn_at(e, "hs", l * r.TH),
              l);
    if (r.L > 1)
        emitf(e, "/* g%lld..g0[n, %lld, %lld]: d loss / d each layer's pre-activations, in two "
              "buffers in turn */", r.L - 1, r.T, r.H);
    else
        emitf(e, "/* g0[n, %lld, %lld]: d loss / d the pre-activations */", r.T, r.H);
    for (long long l = r.L - 1; l >= 0; l--)
        emitf(e, "float *g%lld = %s;", l, rnn_at(e, "net->scratch", (r.L - 1 - l) % 2 * r.TH));
    emitf(e, "/* d loss reaches the top layer at its last step only */");
    rnn_each(e, n, "bwd_last", arena_printf(a, "const float *dy, float *g%lld", r.L - 1),
             arena_printf(a, "n * %lld", r.T), r.H,
             arena_printf(a, "g%lld[k] = row %% %lld == %lld ? dy[row / %lld * %lld + j] : 0.0f;",
                          r.L - 1, r.T, r.T - 1, r.T, r.H));
    for (int l = (int)r.L - 1; l >= 0; l--) {
        const long long in = l ? r.H : r.F;
        const char *x = l ? arena_printf(a, "h%d", l - 1) : "x";
        emitf(e, "/* layer %d, back through time: g_t = (g_t + g_{t+1} W_hh_l%d) * act'(h_t) */",
              l, l);
        emitf(e, "for (int t = %lld; t >= 0; t--) {", r.T - 1);
        e->indent++;
        emitf(e, "float *gt = g%d + (size_t)t * %lld;", l, r.H);
        emitf(e, "const float *ht = h%d + (size_t)t * %lld;", l, r.H);
        if (r.T > 1) {
            emitf(e, "if (t < %lld)", r.T - 1);
            e->indent++;
            rnn_gemm(e, "0, 0, n, %lld, %lld, 1.0f, gt + %lld, %lld, W_hh_l%d, %lld, 1.0f, gt, %lld",
                     r.H, r.H, r.H, r.TH, l, r.H, r.TH);
            e->indent--;
        }
        rnn_each(e, n, arena_printf(a, "bwd_act_l%d", l), cu_lowp(e, "float *gt, const float *ht"),
                 "n", r.TH,
                 arena_printf(a, "gt[k] = %s;",
                              lowp_expr(e, act_grad(a, n, r.act->act, lowp_expr(e, "gt[k]"), NULL, "ht[k]"))));
        e->indent--;
        emitf(e, "}");
        emitf(e, "/* dW_ih_l%d = g%d^T %s, over every sample and step */", l, l, x);
        rnn_gemm(e, "1, 0, %lld, %lld, n * %lld, 1.0f, g%d, %lld, %s, %lld, 0.0f, dW_ih_l%d, %lld",
                 r.H, in, r.T, l, r.H, x, in, l, in);
        if (r.T > 1) {
            emitf(e, "/* dW_hh_l%d = the sum over steps of g_t^T h_{t-1} */", l);
            emitf(e, "for (int t = 1; t < %lld; t++)", r.T);
            e->indent++;
            rnn_gemm(e, "1, 0, %lld, %lld, n, 1.0f, g%d + (size_t)t * %lld, %lld, h%d + (size_t)(t "
                     "- 1) * %lld, %lld, t > 1 ? 1.0f : 0.0f, dW_hh_l%d, %lld", r.H, r.H, l, r.H,
                     r.TH, l, r.H, r.TH, l, r.H);
            e->indent--;
        } else {
            emitf(e, "/* dW_hh_l%d = 0: one step, no state before it (a product over none) */", l);
            rnn_gemm(e, "1, 0, %lld, %lld, 0, 1.0f, g%d, %lld, h%d, %lld, 0.0f, dW_hh_l%d, %lld",
                     r.H, r.H, l, r.TH, l, r.TH, l, r.H);
            emitf(e, "(void)W_hh_l%d;", l);
        }
        if (r.bias) {
            const char *sums = e->cuda ? "TRY(nrt_cu_col_sums(net, g%d, n * %lld, %lld, %s, err));"
                                       : "nrt_col_sums(g%d, n * %lld, %lld, %s);";
            for (int k = 0; k < 2; k++)
                emitf(e, sums, l, r.T, r.H, arena_printf(a, "db_%s_l%d", k ? "hh" : "ih", l));
        }
        if (l > 0) {
            emitf(e, "/* what layer %d's states get: g%d = g%d W_ih_l%d */", l - 1, l - 1, l, l);
            rnn_gemm(e, "0, 0, n * %lld, %lld, %lld, 1.0f, g%d, %lld, W_ih_l%d, %lld, 0.0f, g%d, %lld",
                     r.T, r.H, r.H, l, r.H, l, r.H, l - 1, r.H);
        } else {
            emitf(e, "/* dx[n, %lld, %lld] = g0 W_ih_l0 */", r.T, r.F);
            emitf(e, "if (dx)");
            e->indent++;
            rnn_gemm(e, "0, 0, n * %lld, %lld, %lld, 1.0f, g0, %lld, W_ih_l0, %lld, 0.0f, dx, %lld",
                     r.T, r.F, r.H, r.H, r.F, r.F);
            e->indent--;
        }
    }
}

/* ------------------------------------------------------------ the table */

#define NOARGS {{0}}

/* An activation: its expressions (act) through the shared passes. */
#define ACTIVATION(a)                                                                       \
    .shape = same_shape, .emit_fwd = act_fwd, .emit_bwd = act_bwd, .act = &(a),            \
    .layout = LAYOUT_KEEP, .cu_fwd = act_cu_fwd, .cu_bwd = act_cu_bwd

static const OpDef ops[] = {
    {.sig = {"linear", "y = x W^T + b (nn.Linear; in_features from the input)",
             {SIZE("out_features"), {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
     .shape = linear_shape, .emit_fwd = linear_fwd, .emit_bwd = linear_bwd,
     .takes_epilogue = true, .layout = LAYOUT_NC, .cu_fwd = linear_cu_fwd,
     .cu_bwd = linear_cu_bwd, .product = true},
    {.sig = {"conv2d", "2-D convolution (nn.Conv2d; in_channels from the input)",
             {SIZE("out_channels"),
              {"kernel", A_PAIR, NULL, 1, 4096, "kernel_size", NULL},
              {"stride", A_PAIR, "1", 1, 4096, NULL, NULL},
              {"padding", A_PAIR, "0", 0, 4096, NULL, NULL},
              {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
     .shape = conv2d_shape, .emit_fwd = conv2d_fwd, .emit_bwd = conv2d_bwd,
     .takes_epilogue = true, .aux_name = "xp", .layout = LAYOUT_CN, .cu_fwd = conv2d_cu_fwd,
     .cu_bwd = conv2d_cu_bwd, .cu_workspace = conv2d_cu_workspace, .aux_cpu_only = true,
     .product = true},
/* A pooling layer: its arguments and passes (max or average by its name). */
#define POOLING(name, summary)                                                              \
    .sig = {name, summary,                                                                  \
            {{"kernel", A_INT, NULL, 1, 4096, "kernel_size", NULL},                         \
             {"stride", A_INT, "", 1, 4096, NULL, NULL},                                    \
             {"padding", A_INT, "0", 0, 4096, NULL, NULL}}},                                \
    .shape = pool_shape, .emit_fwd = pool_fwd, .emit_bwd = pool_bwd, .layout = LAYOUT_KEEP, \
    .cu_fwd = pool_cu_fwd, .cu_bwd = pool_cu_bwd
    {POOLING("maxpool2d", "max pooling (nn.MaxPool2d; stride defaults to kernel)")},
    {POOLING("avgpool2d", "average pooling (nn.AvgPool2d, count_include_pad=True)")},
    {.sig = {"relu", "max(x, 0)", NOARGS}, ACTIVATION(relu_act)},
    {.sig = {"leaky_relu", "x if x > 0 else negative_slope * x",
             {{"negative_slope", A_NUM, "0.01", 0, BIG, NULL, NULL}}},
     ACTIVATION(leaky_act)},
    {.sig = {"tanh", "tanh(x)", NOARGS}, ACTIVATION(tanh_act)},
    {.sig = {"sigmoid", "1 / (1 + exp(-x))", NOARGS}, ACTIVATION(sigmoid_act)},
    {.sig = {"gelu", "x Phi(x), Phi the normal distribution (nn.GELU)",
             {{"approximate", A_WORD, "none", 0, 0, NULL, "none|tanh"}}},
     ACTIVATION(gelu_act)},
    {.sig = {"silu", "x sigmoid(x) (nn.SiLU)", NOARGS}, ACTIVATION(silu_act)},
    {.sig = {"elu", "x if x > 0 else alpha (exp(x) - 1) (nn.ELU)",
             {{"alpha", A_NUM, "1.0", 0, BIG, NULL, NULL}}},
     ACTIVATION(elu_act)},
    {.sig = {"softplus", "log(1 + exp(beta x)) / beta, x where beta x > threshold (nn.Softplus)",
             {{"beta", A_NUM, "1.0", 1e-6, BIG, NULL, NULL},
              {"threshold", A_NUM, "20.0", 0, BIG, NULL, NULL}}},
     ACTIVATION(softplus_act)},
    {.sig = {"flatten", "[C, H, W] -> [C*H*W] (nn.Flatten)", NOARGS},
     .shape = flatten_shape, .emit_fwd = flatten_fwd, .emit_bwd = flatten_bwd, .is_view = true,
     .layout = LAYOUT_NC, .cu_fwd = flatten_cu_fwd, .cu_bwd = flatten_cu_bwd},
    {.sig = {"dropout", "zeroes each value with probability p in training (nn.Dropout)",
             {{"p", A_NUM, "0.5", 0, 1, NULL, NULL}}},
     .shape = dropout_shape, .emit_fwd = dropout_fwd, .emit_bwd = dropout_bwd, .aux_name = "mask",
     .elementwise = true, .layout = LAYOUT_KEEP, .cu_fwd = dropout_cu_fwd,
     .cu_bwd = dropout_cu_bwd},
/* A batch normalization: its arguments and passes (1d or 2d by its name). */
#define BATCHNORM(name, summary)                                                            \
    .sig = {name, summary,                                                                  \
            {{"eps", A_NUM, "1e-05", 0, BIG, NULL, NULL},                                   \
             {"momentum", A_NUM, "0.1", 0, 1, NULL, NULL},                                  \
             {"affine", A_BOOL, "true", 0, 1, NULL, NULL}}},                                \
    .shape = batchnorm_shape, .emit_fwd = batchnorm_fwd, .emit_bwd = batchnorm_bwd,         \
    .aux_name = "stats", .layout = LAYOUT_KEEP, .cu_fwd = batchnorm_cu_fwd,                 \
    .cu_bwd = batchnorm_cu_bwd
    {BATCHNORM("batchnorm1d", "per-feature batch normalization of a flat input (nn.BatchNorm1d)")},
    {BATCHNORM("batchnorm2d", "per-channel batch normalization of an image (nn.BatchNorm2d)")},
    {.sig = {"rnn", "Elman RNN over a sequence [T, F] (nn.RNN, batch_first): its last state",
             {{"hidden", A_INT, NULL, 1, INT_MAX_ARG, "hidden_size", NULL},
              {"layers", A_INT, "1", 1, 1024, "num_layers", NULL},
              {"nonlinearity", A_WORD, "tanh", 0, 0, NULL, "tanh|relu"},
              {"bias", A_BOOL, "true", 0, 1, NULL, NULL}, INITS}},
     .shape = rnn_shape, .emit_fwd = rnn_fwd, .emit_bwd = rnn_bwd, .aux_name = "hs",
     .layout = LAYOUT_NC, .cu_fwd = rnn_fwd, .cu_bwd = rnn_bwd, .product = true},
};

const OpDef *op_table(int *n)
{
    *n = (int)(sizeof ops / sizeof ops[0]);
    return ops;
}

const OpDef *op_find(const char *name)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].sig.name, name))
            return &ops[i];
    return NULL;
}
