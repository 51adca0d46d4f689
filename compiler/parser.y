/*
 * parser.y — the model language's grammar; builds the AST of netc.h.
 *
 * A pure bison parser with locations.  A model file holds blocks of
 * layers, then the model:
 *
 *   block basic(planes) {              # layers written once ...
 *       conv2d(planes, kernel=3, padding=1)
 *       ...
 *   }
 *   model NAME {
 *       input  image[1, 8, 8]          # one statement a line
 *       conv2d(16, kernel=3)           # a layer: [name =] op(args)
 *       layer1 = basic(16) * 2         # ... used as a layer, or a sequence
 *       ...
 *   }
 *
 * 'block' is a keyword only where a block may start, so a layer may still
 * be called block. *
 * The grammar knows only the shapes of statements; which ops exist and what
 * arguments they take is the business of ops.c and sema.c.  On a syntax
 * error the parser skips to the end of the line and goes on, so one run
 * reports every broken line.  Values are allocated in the compilation's
 * arena and never freed one by one.
 */
%define api.pure full
%locations
%define api.location.type {Loc}
%define parse.error custom
%define parse.lac full
%define api.token.prefix {TOK_}
%expect 0
%param {void *scanner}
%parse-param {struct ParseState *ps}

%code requires {
#include "netc.h"

/* The lexer's state, its flex "extra". */
struct LexState {
    Diag *diag;
    Arena *arena;
    int line, col;
    int error_line;   /* the last line with a lexical error */
    int end_line, end_col; /* where the last token ended */
    /* the '(' and '[' not yet closed (open_n of them, the first 8 kept);
     * a newline (a statement's end) clears them, keeping their count and
     * the innermost in newline_open*: what a syntax error at that newline
     * was left open by its line */
    int open_n, newline_open_n;
    Loc open[8], newline_open;
    char open_c[8], newline_open_c;
    /* the last token and the one before, if identifiers; else NULL */
    const char *ident, *prev_ident;
};

/* A growable list of arguments, while a call is being parsed. */
typedef struct ArgList {
    Arg *v;
    int n, cap;
} ArgList;

/* The items of a layer statement, while it is being parsed. */
struct ItemList {
    Item *v;
    int n, cap;
};

struct ParseState {
    Diag *diag;
    Arena *arena;
    Model *model;
    Stmt *first, *last;
    BlockDef *blocks_last;
    Loc brace;        /* the model block's '{' */
    bool in_block;
    bool no_model;    /* the file held no tokens but newlines */
    struct LexState *lex;
};
}

%code {
#include <string.h>

/* From the flex scanner (lexer.l, prefix netc_yy). */
struct yy_buffer_state;
int netc_yylex(YYSTYPE *lval, YYLTYPE *lloc, void *scanner);
int netc_yylex_init_extra(struct LexState *extra, void **scanner);
struct yy_buffer_state *netc_yy_scan_bytes(const char *bytes, int len,
                                           void *scanner);
void netc_yy_delete_buffer(struct yy_buffer_state *b, void *scanner);
int netc_yylex_destroy(void *scanner);
#define yylex netc_yylex

static void yyerror(YYLTYPE *loc, void *scanner, struct ParseState *ps,
                    const char *msg)
{
    (void)scanner;
    if (!strcmp(msg, "memory exhausted"))
        msg = "the model is nested too deeply";
    diag_error(ps->diag, *loc, "%s", msg);
}

static Loc span(Loc a, Loc b)
{
    Loc l = {a.first_line, a.first_column, b.last_line, b.last_column};
    return l;
}

static void push(struct ParseState *ps, ArgList *l, Arg a)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        Arg *v = arena_alloc(ps->arena, sizeof *v * (size_t)cap);
        if (l->n)
            memcpy(v, l->v, sizeof *v * (size_t)l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = a;
}

static Value *value(struct ParseState *ps, ValueKind k, Loc loc)
{
    Value *v = arena_alloc(ps->arena, sizeof *v);
    v->kind = k;
    v->loc = loc;
    return v;
}

static Value *call(struct ParseState *ps, const char *name, Loc loc,
                   ArgList args)
{
    Value *v = value(ps, V_CALL, loc);
    v->text = name;
    v->args = args.v;
    v->nargs = args.n;
    return v;
}

static Stmt *stmt(struct ParseState *ps, StmtKind k, Loc loc)
{
    Stmt *s = arena_alloc(ps->arena, sizeof *s);
    s->kind = k;
    s->loc = loc;
    s->device_index = -1;
    return s;
}

static void add(struct ParseState *ps, Stmt *s)
{
    if (!s)
        return;
    if (ps->last)
        ps->last->next = s;
    else
        ps->first = s;
    ps->last = s;
}

/* A layer statement: one op or block as a plain call, else a sequence. */
static Stmt *layer(struct ParseState *ps, Loc loc, struct ItemList l)
{
    Stmt *s = stmt(ps, S_LAYER, loc);
    s->call = l.v[0].call;
    if (l.n > 1 || l.v[0].count) {
        s->items = l.v;
        s->nitems = l.n;
    }
    return s;
}

static void push_item(struct ParseState *ps, struct ItemList *l, Value *call, Value *count)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        Item *v = arena_alloc(ps->arena, sizeof *v * (size_t)cap);
        if (l->n)
            memcpy(v, l->v, sizeof *v * (size_t)l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (Item){call, count};
}

/* `block NAME(params) { ... }`: the statements parsed since the last
 * block are its body. */
static void define(struct ParseState *ps, const char *word, Loc word_loc, Value *head)
{
    ps->in_block = false;
    Stmt *body = ps->first;
    ps->first = ps->last = NULL;
    if (strcmp(word, "block")) {
        diag_error(ps->diag, word_loc, "expected 'model' or 'block' before '%s'", word);
        return;
    }
    BlockDef *b = arena_alloc(ps->arena, sizeof *b);
    b->name = head->text;
    b->loc = head->loc;
    b->params = head->args;
    b->nparams = head->nargs;
    b->body = body;
    if (ps->blocks_last)
        ps->blocks_last->next = b;
    else
        ps->model->blocks = b;
    ps->blocks_last = b;
}

static Arg arg(const char *key, Loc key_loc, Value *v)
{
    Arg a = {key, key_loc, v};
    return a;
}
}

%union {
    struct { double v; const char *text; } num;
    const char *str;
    Value *val;
    Stmt *stmt;
    ArgList args;
    struct ItemList items;
}

%token NL "newline"
%token <num> NUMBER "number"
%token <str> IDENT "identifier"
%token <str> STRING "string"
%token MODEL "'model'" INPUT "'input'" TARGET "'target'" LOSS "'loss'"
%token OPTIMIZER "'optimizer'" DEVICE "'device'" TRAIN "'train'"
%token TEST "'test'" INIT "'init'" VALID "'valid'" SCHEDULE "'schedule'"
%token TRANSFORM "'transform'" PRECISION "'precision'" FROM "'from'"

%type <val> value call
%type <stmt> stmt layer
%type <args> args arglist tuple dims kvs train_opts
%type <items> items

%%

file
    : nls blocks model nls
    | nls blocks    { ps->no_model = true; }
    ;

blocks
    : %empty
    | blocks block nls
    ;

block
    : IDENT call nls open stmts '}'         { define(ps, $1, @1, $2); }
    | IDENT call nls open stmts stmt '}'    { add(ps, $6); define(ps, $1, @1, $2); }
    ;

nls
    : %empty
    | nls NL
    ;

model
    : MODEL IDENT nls open stmts '}'        { ps->model->name = $2; ps->model->loc = @2; ps->in_block = false; }
    | MODEL IDENT nls open stmts stmt '}'   { ps->model->name = $2; ps->model->loc = @2; add(ps, $6); ps->in_block = false; }
    ;

open
    : '{'   { ps->brace = @1; ps->in_block = true; }
    ;

stmts
    : %empty
    | stmts NL
    | stmts stmt NL     { add(ps, $2); }
    | stmts error NL    { yyerrok; }
    ;

stmt
    : layer
    | INPUT IDENT '[' dims ']'          { $$ = stmt(ps, S_INPUT, @$); $$->name = $2; $$->name_loc = @2;
                                          $$->dims = arena_alloc(ps->arena, sizeof *$$->dims * (size_t)($4.n + 1));
                                          for (int i = 0; i < $4.n; i++) $$->dims[i] = $4.v[i].val;
                                          $$->ndims = $4.n; }
    | INPUT IDENT                       { $$ = stmt(ps, S_INPUT, @$); $$->name = $2; $$->name_loc = @2; }
    | TARGET call                       { $$ = stmt(ps, S_TARGET, @$); $$->call = $2; }
    | LOSS call                         { $$ = stmt(ps, S_LOSS, @$); $$->call = $2; }
    | OPTIMIZER call                    { $$ = stmt(ps, S_OPTIMIZER, @$); $$->call = $2; }
    | DEVICE IDENT                      { $$ = stmt(ps, S_DEVICE, @$); $$->name = $2; $$->name_loc = @2; }
    | DEVICE IDENT ':' NUMBER           { $$ = stmt(ps, S_DEVICE, @$); $$->name = $2; $$->name_loc = span(@2, @4);
                                          $$->device_text = arena_printf(ps->arena, "%s:%s", $2, $4.text);
                                          $$->device_index = $4.v >= 0 && $4.v < 1e6 && $4.v == (int)$4.v ? (int)$4.v : -2; }
    | TRAIN call train_opts             { $$ = stmt(ps, S_TRAIN, @$); $$->call = $2; $$->opts = $3.v; $$->nopts = $3.n; }
    | VALID call                        { $$ = stmt(ps, S_VALID, @$); $$->call = $2; }
    | TEST call                         { $$ = stmt(ps, S_TEST, @$); $$->call = $2; }
    | SCHEDULE call                     { $$ = stmt(ps, S_SCHEDULE, @$); $$->call = $2; }
    | TRANSFORM call                    { $$ = stmt(ps, S_TRANSFORM, @$); $$->call = $2; }
    | PRECISION IDENT                   { $$ = stmt(ps, S_PRECISION, @$); $$->name = $2; $$->name_loc = @2; }
    | INIT kvs                          { $$ = stmt(ps, S_INIT, @$); $$->opts = $2.v; $$->nopts = $2.n; }
    | INIT IDENT kvs                    { $$ = stmt(ps, S_INIT, @$); $$->name = $2; $$->name_loc = @2;
                                          $$->opts = $3.v; $$->nopts = $3.n; }
    ;

layer
    : items             { $$ = layer(ps, @$, $1); }
    | IDENT '=' items   { $$ = layer(ps, @$, $3); $$->name = $1; $$->name_loc = @1; }
    | items FROM IDENT  { $$ = layer(ps, @$, $1); $$->from = $3; $$->from_loc = @3; }
    | IDENT '=' items FROM IDENT
                        { $$ = layer(ps, @$, $3); $$->name = $1; $$->name_loc = @1;
                          $$->from = $5; $$->from_loc = @5; }
    ;

call
    : IDENT                 { ArgList none = {0}; $$ = call(ps, $1, @1, none); }
    | IDENT '(' args ')'    { $$ = call(ps, $1, @$, $3); }
    ;

items
    : call              { $$.v = NULL; $$.n = $$.cap = 0; push_item(ps, &$$, $1, NULL); }
    | call '*' value    { $$.v = NULL; $$.n = $$.cap = 0; push_item(ps, &$$, $1, $3); }
    | items ',' call    { $$ = $1; push_item(ps, &$$, $3, NULL); }
    | items ',' call '*' value
                        { $$ = $1; push_item(ps, &$$, $3, $5); }
    ;

args
    : %empty            { $$ = (ArgList){0}; }
    | arglist
    | arglist ','
    ;

arglist
    : value                     { $$ = (ArgList){0}; push(ps, &$$, arg(NULL, @1, $1)); }
    | IDENT '=' value           { $$ = (ArgList){0}; push(ps, &$$, arg($1, @1, $3)); }
    | arglist ',' value         { $$ = $1; push(ps, &$$, arg(NULL, @3, $3)); }
    | arglist ',' IDENT '=' value { $$ = $1; push(ps, &$$, arg($3, @3, $5)); }
    ;

value
    : NUMBER            { $$ = value(ps, V_NUM, @1); $$->num = $1.v; $$->text = $1.text; }
    | '-' NUMBER        { $$ = value(ps, V_NUM, @$); $$->num = -$2.v;
                          $$->text = arena_printf(ps->arena, "-%s", $2.text); }
    | STRING            { $$ = value(ps, V_STR, @1); $$->text = $1; }
    | IDENT             { $$ = value(ps, V_IDENT, @1); $$->text = $1; }
    | IDENT '(' args ')' { $$ = call(ps, $1, @$, $3); }
    | '(' tuple ')'     { $$ = value(ps, V_TUPLE, @$); $$->args = $2.v; $$->nargs = $2.n; }
    ;

tuple
    : value             { $$ = (ArgList){0}; push(ps, &$$, arg(NULL, @1, $1)); }
    | tuple ',' value   { $$ = $1; push(ps, &$$, arg(NULL, @3, $3)); }
    ;

dims
    : value             { $$ = (ArgList){0}; push(ps, &$$, arg(NULL, @1, $1)); }
    | dims ',' value    { $$ = $1; push(ps, &$$, arg(NULL, @3, $3)); }
    ;

kvs
    : IDENT '=' value           { $$ = (ArgList){0}; push(ps, &$$, arg($1, @1, $3)); }
    | kvs IDENT '=' value       { $$ = $1; push(ps, &$$, arg($2, @2, $4)); }
    | kvs ',' IDENT '=' value   { $$ = $1; push(ps, &$$, arg($3, @3, $5)); }
    ;

train_opts
    : %empty                    { $$ = (ArgList){0}; }
    | train_opts IDENT value    { $$ = $1; push(ps, &$$, arg($2, @2, $3)); }
    ;

%%

/* Syntax errors read like gcc's: "expected ')' before newline". */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner,
                                 struct ParseState *ps)
{
    (void)scanner;
    enum { MAX = 6 };
    yysymbol_kind_t expected[MAX];
    int n = yypcontext_expected_tokens(ctx, expected, MAX);
    yysymbol_kind_t got = yypcontext_token(ctx);
    const Loc *loc = yypcontext_location(ctx);
    char buf[256] = "";
    size_t len = 0;
    /* the lexer has already reported this line: one error is enough */
    if (loc->first_line == ps->lex->error_line)
        return 0;
    /* newline and end of file are worth naming only when nothing else fits,
     * or (newline) at the end of a statement, where '}' is the other choice */
    bool close_brace = false;
    for (int i = 0; i < n; i++)
        close_brace |= !strcmp(yysymbol_name(expected[i]), "'}'");
    /* what may follow a layer's call (`from NAME`, more items, a count) is
     * not what its line lacks; nor is a block where 'model' is expected */
    bool after_call = false, model = false;
    for (int i = 0; i < n; i++) {
        after_call |= !strcmp(yysymbol_name(expected[i]), "'from'");
        model |= !strcmp(yysymbol_name(expected[i]), "'model'");
    }
    int others = 0;
    for (int i = 0; i < n; i++) {
        const char *name = yysymbol_name(expected[i]);
        bool optional = after_call && (!strcmp(name, "'from'") || !strcmp(name, "','") ||
                                       !strcmp(name, "'*'"));
        if (n == 1 || !(optional || (model && !strcmp(name, "identifier"))))
            expected[others++] = expected[i];
    }
    n = others;
    for (int pass = close_brace; pass < 2; pass++) {
        const char *noise = pass == 0 ? "newline" : "end of file";
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (strcmp(yysymbol_name(expected[i]), noise))
                expected[kept++] = expected[i];
        if (kept > 0)
            n = kept;
    }
    /* a line ended inside a call's '(' or a shape's '[' (open: which) */
    const struct LexState *lx = ps->lex;
    const bool at_nl = got == YYSYMBOL_NL;
    const int open_n = at_nl ? lx->newline_open_n : got == YYSYMBOL_YYEOF ? lx->open_n : 0;
    const int last = open_n < 8 ? open_n - 1 : 7;
    const char open = open_n <= 0 ? 0 : at_nl ? lx->newline_open_c : lx->open_c[last];
    if (!strcmp(yysymbol_name(got), "':'") && lx->prev_ident) {
        diag_error(ps->diag, *loc, "unexpected ':'");
        if (lx->open_n > 0)
            diag_note(ps->diag, *loc, "an argument is given with '=': %s=...", lx->prev_ident);
        else
            diag_note(ps->diag, *loc, "a layer is named with '=': %s = ...", lx->prev_ident);
        return 0;
    }
    if (got == YYSYMBOL_YYEOF && ps->in_block && (close_brace || n == 0)) {
        snprintf(buf, sizeof buf, "expected '}' before end of file");
    } else if (n > 0 && n <= 2) {
        len += (size_t)snprintf(buf, sizeof buf, "expected ");
        for (int i = 0; i < n && len < sizeof buf; i++)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                                    i == 0 ? "" : i == n - 1 ? " or " : ", ",
                                    yysymbol_name(expected[i]));
        snprintf(buf + len, sizeof buf - len, " before %s", yysymbol_name(got));
    } else if (open) {
        snprintf(buf, sizeof buf, "expected '%c' before %s", open == '(' ? ')' : ']',
                 yysymbol_name(got));
    } else {
        snprintf(buf, sizeof buf, "unexpected %s", yysymbol_name(got));
    }
    diag_error(ps->diag, *loc, "%s", buf);
    if (open)
        diag_note(ps->diag, at_nl ? lx->newline_open : lx->open[last], "to match this '%c'",
                  open);
    if (got == YYSYMBOL_YYEOF && ps->in_block)
        diag_note(ps->diag, ps->brace, "to match this '{'");
    return 0;
}

Model *parse_model(Diag *d, Arena *a)
{
    struct LexState ls = {.diag = d, .arena = a, .line = 1, .col = 1, .end_line = 1, .end_col = 1};
    struct ParseState ps = {0};
    ps.diag = d;
    ps.arena = a;
    ps.model = arena_alloc(a, sizeof *ps.model);

    void *scanner;
    if (netc_yylex_init_extra(&ls, &scanner) != 0) {
        diag_file_error(d, "cannot start the lexer");
        return NULL;
    }
    struct yy_buffer_state *buf = netc_yy_scan_bytes(d->src, (int)d->len, scanner);
    ps.lex = &ls;
    int rc = yyparse(scanner, &ps);
    if (rc == 0 && ps.no_model)
        diag_file_error(d, "no model in this file; a model file holds one block: model NAME { ... }");
    netc_yy_delete_buffer(buf, scanner);
    netc_yylex_destroy(scanner);
    if (rc != 0 && d->errors == 0)
        diag_file_error(d, "the parser ran out of memory");
    if (!ps.model->name)
        return NULL;
    ps.model->stmts = ps.first;
    return ps.model;
}
