/*
 * expand.c — blocks and sequences into one list of layers.
 *
 *   block basic(planes, stride=1) {     layers written once: a block
 *       conv1 = conv2d(planes, kernel=3, stride=stride, padding=1)
 *       ...
 *       add(in)                         'in': what the block reads
 *   }
 *   model m {
 *       ...
 *       layer1 = basic(16) * 3          a sequence of three uses
 *       layer2 = basic(32, stride=2), basic(32) * 2
 *
 * A use of a block becomes a copy of the block's layers, each argument of
 * theirs that names a parameter of the block replaced by the use's value
 * (its location the use's, so an error points at what the user wrote
 * there).  A sequence's items become layers (or uses) named by position,
 * as nn.Sequential names its modules.  Every layer gets its path, the
 * names from the model's level down ("layer2.0.conv1"), the prefix of its
 * parameters' names: a checkpoint loads into the PyTorch module a user
 * would write for the same model.  The names a layer reads (from, add's)
 * are resolved by sema.c in the scope of the block it is written in.
 *
 * A block may use the blocks defined before it, so there is no recursion
 * to guard against.  A model without blocks or sequences comes out as it
 * went in, its layers named by position as before.
 */
#include "netc.h"

#include <string.h>

/* Most layers a model may expand to, and most uses in one item. */
#define MAX_LAYERS 10000
#define MAX_COUNT 1000

/* A block's parameters bound to a use's values. */
typedef struct Env {
    const char *const *names;
    Value **values;
    int n;
} Env;

typedef struct Expand {
    Diag *diag;
    Arena *arena;
    Model *m;
    Stmt *first, *last;  /* the expanded list */
    Use **uses;
    int nuses, uses_cap;
    int nlayers;
} Expand;

/* ---------------------------------------------------------- the blocks */

static const BlockDef *find_block(const Model *m, const char *name)
{
    for (const BlockDef *b = m->blocks; b; b = b->next)
        if (!strcmp(b->name, name))
            return b;
    return NULL;
}

/* A block's name, parameters and body, checked once, where it is defined. */
static void check_block(Expand *x, const BlockDef *b)
{
    Diag *d = x->diag;
    const BlockDef *first = find_block(x->m, b->name);
    if (first != b) {
        diag_error(d, b->loc, "a second block named '%s'", b->name);
        diag_note(d, first->loc, "the first is here");
    }
    if (op_find(b->name))
        diag_error(d, b->loc, "'%s' is a layer op; give the block another name", b->name);
    for (int i = 0; i < b->nparams; i++) {
        const Arg *a = &b->params[i];
        const char *name = a->key ? a->key : a->val->kind == V_IDENT ? a->val->text : NULL;
        if (!name) {
            diag_error(d, a->val->loc, "a block's parameter is a name, or name = default");
            continue;
        }
        for (int j = 0; j < i; j++) {
            const Arg *o = &b->params[j];
            if (!strcmp(name, o->key ? o->key : o->val->text))
                diag_error(d, a->key ? a->key_loc : a->val->loc, "a second parameter named '%s'",
                           name);
        }
    }
    if (!b->body)
        diag_error(d, b->loc, "block '%s' has no layers", b->name);
    for (const Stmt *s = b->body; s; s = s->next)
        if (s->kind != S_LAYER)
            diag_error(d, s->loc, "a block holds layers only; this belongs in the model");
        else if (s->name && !strcmp(s->name, "in"))
            diag_error(d, s->name_loc, "'in' is the block's input; give the layer another name");
}

static const char *param_name(const Arg *a)
{
    return a->key ? a->key : a->val->text;
}

/* ---------------------------------------------------------- substitution */

/* v with the parameters it names replaced by their values. */
static Value *subst(Expand *x, Value *v, const Env *env)
{
    if (!v || env->n == 0)
        return v;
    if (v->kind == V_IDENT) {
        for (int i = 0; i < env->n; i++)
            if (!strcmp(v->text, env->names[i]))
                return env->values[i];
        return v;
    }
    if (v->kind != V_CALL && v->kind != V_TUPLE)
        return v;
    Value *c = arena_alloc(x->arena, sizeof *c);
    *c = *v;
    c->args = arena_alloc(x->arena, sizeof *c->args * (size_t)(v->nargs + 1));
    for (int i = 0; i < v->nargs; i++) {
        c->args[i] = v->args[i];
        c->args[i].val = subst(x, v->args[i].val, env);
    }
    return c;
}

/* The use's arguments bound to the block's parameters (call already
 * substituted); false on an error. */
static bool bind(Expand *x, const BlockDef *b, const Value *call, Env *env)
{
    Diag *d = x->diag;
    const char **names = arena_alloc(x->arena, sizeof *names * (size_t)(b->nparams + 1));
    Value **values = arena_alloc(x->arena, sizeof *values * (size_t)(b->nparams + 1));
    for (int i = 0; i < b->nparams; i++) {
        names[i] = param_name(&b->params[i]);
        values[i] = b->params[i].key ? b->params[i].val : NULL; /* the default */
    }
    bool ok = true, *given = arena_alloc(x->arena, (size_t)b->nparams + 1);
    for (int i = 0, pos = 0; i < call->nargs; i++) {
        const Arg *a = &call->args[i];
        int k = -1;
        if (!a->key) {
            if (pos >= b->nparams) {
                diag_error(d, a->val->loc, "block '%s' takes %d argument%s", b->name, b->nparams,
                           b->nparams == 1 ? "" : "s");
                diag_note(d, b->loc, "'%s' is defined here", b->name);
                ok = false;
                continue;
            }
            k = pos++;
        } else {
            for (int j = 0; j < b->nparams; j++)
                if (!strcmp(a->key, names[j]))
                    k = j;
            if (k < 0) {
                diag_error(d, a->key_loc, "block '%s' has no parameter '%s'", b->name, a->key);
                const char *near = suggest(a->key, names, b->nparams);
                if (near)
                    diag_note(d, a->key_loc, "did you mean '%s'?", near);
                else
                    diag_note(d, b->loc, "'%s' is defined here", b->name);
                ok = false;
                continue;
            }
        }
        if (given[k]) {
            diag_error(d, a->key ? a->key_loc : a->val->loc, "'%s' is given twice", names[k]);
            ok = false;
        }
        given[k] = true;
        values[k] = a->val;
    }
    for (int i = 0; i < b->nparams && ok; i++)
        if (!values[i]) {
            diag_error(d, call->loc, "block '%s' needs its parameter '%s'", b->name, names[i]);
            diag_note(d, b->params[i].val->loc, "'%s' is declared here", names[i]);
            ok = false;
        }
    *env = (Env){names, values, b->nparams};
    return ok;
}

/* How many times an item is used: a whole number in 1..MAX_COUNT. */
static int count_of(Expand *x, const Value *v)
{
    if (!v)
        return 1;
    if (v->kind != V_NUM || v->num != (int)v->num || v->num < 1 || v->num > MAX_COUNT) {
        diag_error(x->diag, v->loc, "a count is a whole number from 1 to %d", MAX_COUNT);
        return 0;
    }
    return (int)v->num;
}

/* ------------------------------------------------------------- expansion */

static void append(Expand *x, Stmt *s)
{
    s->next = NULL;
    if (x->last)
        x->last->next = s;
    else
        x->first = s;
    x->last = s;
}

static Use *new_use(Expand *x, const char *path, const Stmt *s, const BlockDef *b,
                    const Use *outer)
{
    Use *u = arena_alloc(x->arena, sizeof *u);
    *u = (Use){path, s, b, outer, NULL, NULL, x->nuses};
    if (x->nuses == x->uses_cap) {
        x->uses_cap = x->uses_cap ? 2 * x->uses_cap : 16;
        Use **v = arena_alloc(x->arena, sizeof *v * (size_t)x->uses_cap);
        if (x->nuses)
            memcpy(v, x->uses, sizeof *v * (size_t)x->nuses);
        x->uses = v;
    }
    x->uses[x->nuses++] = u;
    return u;
}

static void expand_layer(Expand *x, const Stmt *s, const Use *scope, const char *local,
                         const Env *env, const BlockDef *within);

/* The layers of use u of block b, or of sequence u. */
static void expand_use(Expand *x, Use *u, const Stmt *s, const Env *env, const BlockDef *within)
{
    Stmt *before = x->last;
    if (u->block) {
        Env inner;
        if (!bind(x, u->block, subst(x, s->call, env), &inner))
            return;
        int pos = 0;
        for (const Stmt *t = u->block->body; t; t = t->next)
            if (t->kind == S_LAYER) {
                expand_layer(x, t, u, t->name ? t->name : arena_printf(x->arena, "%d", pos), &inner,
                             u->block);
                pos++;
            }
    } else {
        int pos = 0;
        for (int i = 0; i < s->nitems; i++) {
            int n = count_of(x, subst(x, s->items[i].count, env));
            for (int k = 0; k < n; k++) {
                Stmt *t = arena_alloc(x->arena, sizeof *t);
                t->kind = S_LAYER;
                t->loc = s->items[i].call->loc;
                t->call = s->items[i].call;
                t->device_index = -1;
                expand_layer(x, t, u, arena_printf(x->arena, "%d", pos++), env, within);
            }
        }
    }
    if (x->last != before) {
        u->first = before ? before->next : x->first;
        u->last = x->last;
    }
}

/* Appends the layers s stands for, s written in scope (NULL: the
 * model's) under the name local, in a body of block within (NULL: the
 * model's) whose parameters env binds. */
static void expand_layer(Expand *x, const Stmt *s, const Use *scope, const char *local,
                         const Env *env, const BlockDef *within)
{
    const char *path = scope ? arena_printf(x->arena, "%s.%s", scope->name, local) : local;
    const BlockDef *b = s->items ? NULL : find_block(x->m, s->call->text);
    if (b && within) { /* a body uses the blocks defined before it */
        const BlockDef *t = x->m->blocks;
        while (t != within && t != b)
            t = t->next;
        if (t == within) {
            diag_error(x->diag, s->call->loc, b == within ? "block '%s' uses itself"
                       : "block '%s' is defined after this one; define it first", b->name);
            return;
        }
    }
    if (b || s->items) {
        expand_use(x, new_use(x, path, s, b, scope), s, env, within);
        return;
    }
    if (++x->nlayers > MAX_LAYERS) {
        if (x->nlayers == MAX_LAYERS + 1)
            diag_error(x->diag, s->loc, "the model has more than %d layers", MAX_LAYERS);
        return;
    }
    Stmt *t = arena_alloc(x->arena, sizeof *t);
    *t = *s;
    t->call = subst(x, s->call, env);
    t->path = path;
    t->use = scope;
    append(x, t);
}

void expand_blocks(Diag *d, Arena *a, Model *m)
{
    Expand x = {d, a, m, NULL, NULL, NULL, 0, 0, 0};
    for (const BlockDef *b = m->blocks; b; b = b->next)
        check_block(&x, b);
    if (d->errors)
        return;
    const Env none = {NULL, NULL, 0};
    int pos = 0;
    for (Stmt *s = m->stmts, *next; s; s = next) {
        next = s->next;
        if (s->kind != S_LAYER) {
            append(&x, s);
            continue;
        }
        expand_layer(&x, s, NULL, s->name ? s->name : arena_printf(a, "%d", pos), &none, NULL);
        pos++;
    }
    m->stmts = x.first;
    m->uses = x.uses;
    m->nuses = x.nuses;
}
