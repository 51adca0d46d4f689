/*
 * args.c — binding a call's arguments to its signature (Sig): positional
 * and keyword, PyTorch's names as aliases, defaults, ranges, "did you
 * mean"; every op, loss, optimizer, schedule, source and initializer is
 * bound here.
 */
#include "ops.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    case A_NAME: return "the name of an earlier layer";
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
    case A_NAME: /* which layer it names: the op's shape rule looks it up */
        if (v->kind != V_IDENT) {
            diag_error(p->diag, v->loc, "argument '%s' of %s must be the name of an earlier layer",
                       as->name, s->name);
            diag_note(p->diag, v->loc, "name a layer by writing 'NAME = ' before it, e.g. "
                      "'h = relu', then '%s(h)'", s->name);
            return false;
        }
        out->s = v->text;
        return true;
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


const Sig *sig_find(const Sig *table, size_t stride, const char *name)
{
    for (; table->name; table = sig_next(table, stride))
        if (!strcmp(table->name, name))
            return table;
    return NULL;
}

