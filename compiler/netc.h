/*
 * netc.h — the compiler's one internal header.
 *
 * netc reads a model file and writes a training program.  The passes, each
 * in a file of its own, run in this order:
 *
 *   lexer.l     bytes → tokens with locations
 *   parser.y    tokens → AST (Model, Stmt, Value), recovering from errors
 *   expand.c    blocks and sequences → one list of layers, each with the
 *               path that names its parameters ("layer1.0.conv1")
 *   sema.c      AST → checked Program: arguments bound to the op tables,
 *               shapes inferred, parameters laid out in one flat buffer
 *   ir.c        Program → graph IR: nodes over values, in execution order
 *   autodiff.c  forward graph → backward graph, built at compile time
 *   fuse.c      fusion (activation into its producer's epilogue) and the
 *               memory plan (where each value and gradient lives)
 *   emit_c.c    graph → C functions, one per layer pass (emit_cuda.c:
 *               the same as CUDA; emit_ir.c: as text or graphviz)
 *   driver.c    the model descriptor and main() of the program, or the
 *               C API of a library (--emit=lib)
 *   build.c     the C compiler run on the result, without a shell
 *
 * Each layer op is an OpDef in a file of its family under ops/ (its
 * arguments and defaults, shape rule, and the C and CUDA it emits forward
 * and backward), listed in ops.c's table; ops.h is what they share.  The
 * rest a model names (initializers, losses, optimizers, schedules, data
 * sources) are registry.c's entries; args.c binds every call's arguments
 * to its signature.  diag.c prints errors in GNU format with the line and
 * a caret.  Memory comes from one arena per compilation (arena_*) and
 * is released at once at the end, so passes never free.
 *
 * This header is split in sections, one per file.
 */
#ifndef NETC_H
#define NETC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "netrt.h"

#define NETC_VERSION NETRT_VERSION

/* A span of the model file: 1-based line, 1-based byte column. */
typedef struct Loc {
    int first_line, first_column;
    int last_line, last_column;
} Loc;

/* ------------------------------------------------------------- arena (diag.c) */

typedef struct Arena Arena;
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n); /* zeroed; exits on out of memory */
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* ------------------------------------------------------------------ diag.c */

typedef struct Report Report;

typedef struct Diag {
    const char *file;   /* as given on the command line */
    const char *src;    /* the whole file */
    size_t len;
    int errors;
    FILE *out;          /* stderr */
    Report *reports;    /* held until diag_flush, to print in line order */
    int nreports, cap;
    bool muted;         /* the last error was a repeat: its notes are left out */
} Diag;

void diag_error(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As an error, with its line and caret, but the output is still made. */
void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An error about the file as a whole (no line). */
void diag_file_error(Diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Checks that src is UTF-8 without NUL bytes; reports the first bad byte. */
bool diag_check_utf8(Diag *d);
/* Prints the held errors, each with its notes, in the order of their lines
 * (passes find them in their own order), and forgets them. */
void diag_flush(Diag *d);

/* -------------------------------------------------------------- AST (parser.y) */

typedef enum ValueKind { V_NUM, V_STR, V_IDENT, V_TUPLE, V_CALL } ValueKind;

typedef struct Value Value;

/* An argument of a call: positional (key == NULL) or keyword. */
typedef struct Arg {
    const char *key;
    Loc key_loc;
    Value *val;
} Arg;

/* A value in the model file: 3, 1e-3, "path", relu, (0.9, 0.999), or a
 * call such as normal(0, 0.01).  A bare identifier where a call is expected
 * (flatten, relu, mse) is a call without arguments. */
struct Value {
    ValueKind kind;
    Loc loc;
    double num;        /* V_NUM */
    const char *text;  /* V_NUM: as written; V_STR: contents; V_IDENT, V_CALL: name */
    Arg *args;         /* V_CALL: arguments; V_TUPLE: elements (no keys) */
    int nargs;
};

typedef enum StmtKind {
    S_INPUT,     /* input NAME[d, ...] */
    S_TARGET,    /* target class(N) | value(N) */
    S_LAYER,     /* [NAME =] op(args) [from NAME], or a block or sequence:
                    [NAME =] item, item * N, ... [from NAME] */
    S_LOSS,      /* loss op */
    S_OPTIMIZER, /* optimizer op(args) */
    S_DEVICE,    /* device cpu | cuda | cuda:N | auto */
    S_TRAIN,     /* train source(args) [batch N] [epochs N] [seed N] */
    S_TEST,      /* test source(args) | test holdout(f) */
    S_INIT,      /* init [KIND] weight=INIT bias=INIT */
    S_VALID,     /* valid source(args) | valid holdout(f) */
    S_SCHEDULE,  /* schedule op(args) */
    S_TRANSFORM, /* transform op(args): one of the image data's transforms */
    S_PRECISION  /* precision bf16 | fp16 | fp32 */
} StmtKind;

typedef struct Item Item;
typedef struct Use Use;

typedef struct Stmt {
    StmtKind kind;
    Loc loc;            /* the whole statement */
    const char *name;   /* S_INPUT, named S_LAYER, S_DEVICE, S_INIT kind */
    Loc name_loc;
    const char *from;   /* S_LAYER: the earlier layer it reads, or NULL: the one before */
    Loc from_loc;
    Value *call;        /* the op or source as a V_CALL */
    Value **dims;       /* S_INPUT */
    int ndims;
    Arg *opts;          /* S_TRAIN: batch/epochs/seed; S_INIT: weight/bias */
    int nopts;
    int device_index;   /* S_DEVICE: N of cuda:N, -1 if none, -2 if not a whole number */
    const char *device_text; /* S_DEVICE: "cuda:N" as written */
    Item *items;        /* S_LAYER as written: a sequence (NULL: one op or block) */
    int nitems;
    /* after expand.c: */
    const char *path;   /* S_LAYER: the full name, its parameters' prefix */
    const Use *use;     /* the block or sequence it came from; NULL: the model's */
    struct Stmt *next;
} Stmt;

/* An item of a sequence: `call` or `call * count`. */
struct Item {
    Value *call;
    Value *count;       /* NULL: once */
};

/* `block NAME(params) { layers }`: layers written once, used as a layer. */
typedef struct BlockDef {
    const char *name;
    Loc loc;
    Arg *params;        /* a name, or name = default */
    int nparams;
    Stmt *body;
    struct BlockDef *next;
} BlockDef;

/* A use of a block or a sequence, made by expand.c: its layers have it as
 * Stmt.use (the innermost) and their paths start with its name. */
struct Use {
    const char *name;   /* its path: "layer1", "layer1.0" */
    const Stmt *stmt;   /* the statement of the use, as written */
    const BlockDef *block; /* NULL: a sequence */
    const Use *outer;   /* the use it is in; NULL: the model's level */
    const Stmt *first, *last; /* its first and last layer, expanded */
    int index;          /* in 0..Model.nuses */
};

typedef struct Model {
    const char *name;
    Loc loc;
    Stmt *stmts;
    BlockDef *blocks;   /* in the order of the file */
    Use **uses;         /* expand.c's, in the order they start */
    int nuses;
} Model;

/* Parses the file held by d; returns NULL when nothing usable was parsed.
 * Errors are reported through d (d->errors counts them). */
Model *parse_model(Diag *d, Arena *a);

/* ---------------------------------------------------------------- expand.c */

/* Replaces each use of a block and each sequence by the layers they stand
 * for, and gives every layer its path.  Errors go through d. */
void expand_blocks(Diag *d, Arena *a, Model *m);

/* ----------------------------- ops.c, ops/, args.c, registry.c: the tables */

typedef struct Node Node;
typedef struct Emit Emit;
typedef struct Program Program;

typedef enum ArgType {
    A_INT,    /* a whole number */
    A_NUM,    /* any number */
    A_BOOL,   /* true | false */
    A_PAIR,   /* N or (N, M): kernel, stride, padding */
    A_NUMS2,  /* (x, y): betas */
    A_NUMS,   /* a number or a tuple of up to 3: normalize's mean, std */
    A_STR,    /* "text" */
    A_INIT,   /* an initializer: xavier_normal, normal(0, 0.01), … */
    A_WORD,   /* one of a set of identifiers (ArgSpec.words) */
    A_NAME    /* the name of an earlier layer: its output (add's) */
} ArgType;

typedef struct ArgSpec {
    const char *name;
    ArgType type;
    const char *def;    /* default as written in the model language; NULL:
                           required */
    double min, max;    /* allowed range of numbers (inclusive) */
    const char *alias;  /* another accepted name (PyTorch's), or NULL */
    const char *words;  /* A_WORD: "|"-separated choices */
} ArgSpec;

#define MAX_ARGS 8

/* An argument after binding: numbers in v[], initializers in init. */
typedef struct ArgVal {
    bool given;
    double v[3];
    int nv;             /* A_NUMS: how many numbers were given */
    const char *s;
    nrt_init init;
    Loc loc;
} ArgVal;

/* What a call accepts: its name and arguments. */
typedef struct Sig {
    const char *name;
    const char *summary;         /* one line, for the language reference */
    ArgSpec args[MAX_ARGS];
} Sig;

/* A per-sample shape: rank 1..3 (the batch dimension is implicit). */
typedef struct Shape {
    int rank;
    int64_t d[3];
} Shape;

/* An elementwise op y = f(x) (an activation), for the cpu and the GPU
 * alike as C expressions: fwd, f of the expression x; bwd, dy f'(x),
 * written with dy and what `needs` declares of x and y (NEEDS_X, NEEDS_Y;
 * the other is passed as NULL).  An op that needs y alone fuses into the
 * epilogue of a linear or conv2d before it, which keeps y and not x; one
 * that needs x (gelu, silu, softplus) runs as a pass of its own. */
enum { NEEDS_X = 1, NEEDS_Y = 2 };
typedef struct Act {
    const char *(*fwd)(Arena *a, const Node *n, const char *x);
    const char *(*bwd)(Arena *a, const Node *n, const char *dy, const char *x, const char *y);
    int needs;
    /* nondecreasing as computed, to the last bit (relu: max(x, 0)), so that
     * max(f(a), f(b)) is f(max(a, b)) exactly and a max pool after it can
     * run first (reorder.c) */
    bool monotone;
} Act;

/* A layer op: everything netc knows about it, in one place. */
typedef struct OpDef {
    Sig sig;
    /* Shape rule: checks n->in, sets n->out and declares parameters with
     * ir_add_param.  Reports errors through the program's Diag and returns
     * false on error. */
    bool (*shape)(Program *p, Node *n);
    /* Emits the C statements of the forward and backward passes. */
    void (*emit_fwd)(Emit *e, const Node *n);
    void (*emit_bwd)(Emit *e, const Node *n);
    /* Activations: their expressions (emit_fwd/emit_bwd and the CUDA
     * passes write their loops); NULL for other layers. */
    const Act *act;
    bool takes_epilogue; /* linear, conv2d: can absorb a following activation */
    bool is_view;        /* flatten: the output shares the input's memory */
    const char *aux_name;/* what the node keeps for backward: "mask", "xp" */
    bool elementwise;    /* not an activation, but d x can overwrite d y (dropout) */
    bool bwd_reads_x;    /* its backward reads x, having no weights (mul) */
    bool bwd_reads_s;    /* its backward reads the value it names (mul's s) */
    bool x_in_aux;       /* its cpu backward reads the copy of x it keeps (aux),
                            not x (conv2d's padded xp) */
    int layout;          /* the layout of its output: LAYOUT_KEEP (as its
                            input), LAYOUT_CN or LAYOUT_NC */
    /* The CUDA passes (emit_cuda.c): host statements (emitf) that launch
     * kernels they define (cu_kernel) from netrt_kernels.cuh's templates
     * or as elementwise loops. */
    void (*cu_fwd)(Emit *e, const Node *n);
    void (*cu_bwd)(Emit *e, const Node *n);
    /* The bytes of device workspace its passes borrow (conv2d_dw's
     * partial sums), or NULL: none. */
    int64_t (*cu_workspace)(const Program *p, const Node *n);
    bool aux_cpu_only;   /* its aux is the cpu passes' alone (conv2d's "xp") */
    bool product;        /* linear, conv2d, rnn: matrix products, which take
                            bf16 inputs in a bf16 run (autocast's list) */
    bool cu_gemm;        /* its GPU passes' products are nrt_cu_gemm's
                            (cuBLAS), reading its input, its output's
                            gradient, its aux or the scratch (not conv2d:
                            its kernels are netc's own) */
    /* Whether its output holds only its input's values and zeros (relu,
     * maxpool2d, flatten), or, bwd, its d input only d output's values and
     * zeros (not a max pool whose windows overlap, where they add up): a
     * rounded input then gives a rounded output, and a bf16 run needs no
     * rounding pass after it.  NULL: never. */
    bool (*selects)(const Program *p, const Node *n, bool bwd);
    bool picks_max;      /* maxpool2d: its output is the largest of each window
                            (what a monotone activation commutes with) */
    bool rounds_output;  /* linear, conv2d, rnn: its pass leaves its output
                            rounded in a bf16 run (in its epilogue) */
} OpDef;

/* How a batch of images lies in memory: [n, C, H, W] (NC, the data's) or
 * [C, n, H, W] (CN, channel first: what a convolution's product gives). */
enum { LAYOUT_KEEP = 0, LAYOUT_NC = 1, LAYOUT_CN = 2 };

const OpDef *op_find(const char *name);
/* The closest of names[0..n) to s when it looks like a typo of it, or NULL. */
const char *suggest(const char *s, const char *const *names, int n);
const OpDef *const *op_table(int *n);
/* The entry of table named name, or NULL.  A table is an array of Sigs,
 * or of a registry's entries that start with their Sig, stride bytes
 * apart, ended by a NULL name: SIGS(table) or ENTRIES(table) says both. */
const Sig *sig_find(const Sig *table, size_t stride, const char *name);
#define SIGS(table) (table), sizeof *(table)
#define ENTRIES(table) &(table)[0].sig, sizeof *(table)
static inline const Sig *sig_next(const Sig *s, size_t stride)
{
    return (const Sig *)((const char *)s + stride);
}
extern const Sig target_sigs[], transform_sigs[];

/* An initializer: its arguments (a and b of nrt_init) and the runtime's
 * kind (init.c). */
typedef struct InitDef {
    Sig sig;
    int kind;
} InitDef;
extern const InitDef inits[];

/* A data source: its arguments (the first is the path, or a part's
 * fraction), how the others set nrt_source, and whether it is a part of
 * the training data rather than a file (holdout: valid and test only).
 * The runtime reads nrt_source.kind, the name (data.c, images.c). */
typedef struct SourceDef {
    Sig sig;
    void (*bind)(const ArgVal *a, nrt_source *src);
    bool part;
} SourceDef;
extern const SourceDef sources[];

/* A loss: its arguments, the target it compares the model's output with
 * (NRT_TARGET_CLASS or NRT_TARGET_VALUE: the data's), and forward()'s
 * statements that compute it (`float loss`) and its gradient (into
 * dlast, where not NULL) from out, the output's C expression: the cpu's
 * (emit_c.c) and the GPU's (emit_cuda.c, launching what it defines); the
 * gradient's formula, for --emit=ir; and a pointwise loss's kind
 * (losses.h's row; its one argument, if any, is nrt_loss_spec's arg),
 * 0 for cross-entropy. */
typedef struct LossDef {
    Sig sig;
    int target;
    void (*emit_c)(Emit *e, const char *out);
    void (*emit_cuda)(Emit *e, const char *out);
    const char *grad; /* "d%N = 2 (y - t) / (n * outputs)" */
    int kind;         /* enum nrt_loss_kind */
} LossDef;
extern const LossDef losses[];

/* An optimizer: its arguments (the first is lr), the runtime's kind
 * (optimizers.h: its update, states and checkpoint names), how the bound
 * arguments set nrt_optim but lr (reporting what PyTorch refuses too), and
 * the fields so set, in the order the program's descriptor writes them. */
typedef struct OptimDef {
    Sig sig;
    int kind;
    void (*bind)(Program *p, const Value *call, const ArgVal *a, nrt_optim *o);
    const char *fields[8];
} OptimDef;
extern const OptimDef optimizers[];

/* A learning-rate schedule: its arguments, the runtime's kind (netrt.h's
 * NRT_SCHEDULES: its lr), how the arguments set nrt_schedule, and the
 * fields so set, in the descriptor's order. */
typedef struct ScheduleDef {
    Sig sig;
    int kind;
    void (*bind)(const ArgVal *a, nrt_schedule *s);
    const char *fields[8];
} ScheduleDef;
extern const ScheduleDef schedules[];

/* Binds the arguments of call to sig; reports unknown, missing, duplicate
 * and ill-typed arguments.  Returns false on error. */
bool bind_args(Program *p, const Sig *sig, const Value *call, ArgVal *out);
/* Turns a V_IDENT or V_CALL naming an initializer into an nrt_init. */
bool bind_init(Program *p, const Value *v, nrt_init *out);

/* -------------------------------------------------------------------- ir.c */

typedef struct Param {
    const char *name;   /* "0.weight" */
    int rank;           /* up to 4: a conv2d weight is [O, C, KH, KW] */
    int64_t dim[4];
    size_t offset, size;
    int fan_in, fan_out;
    bool is_bias;
    nrt_init init;
} Param;

/* A buffer: state of a node that is not a parameter (a batchnorm's
 * running statistics), in a flat area of bytes of its own. */
typedef struct Buffer {
    const char *name;   /* "1.running_mean" */
    const char *local;  /* the pass's local: "running_mean" */
    int dtype;          /* NRT_F32 or NRT_I64 */
    int rank;           /* 0: a scalar */
    int64_t dim[4];
    size_t offset, size;/* bytes into the area (8-aligned), elements */
    float init;         /* every element's initial value */
    int after;          /* the parameters before it in the state_dict */
} Buffer;

/* A value flowing between nodes: the input, each layer's output. */
typedef struct IrValue {
    Shape shape;
    int64_t size;       /* floats per sample */
    int alias;          /* the value whose memory this one shares, or -1 */
    int64_t cuda_offset[2]; /* its per-sample offset in the GPU's plans, in
                           floats: [0] fp32, [1] 16-bit; -1 for the input (the
                           batch itself) */
    int grad_buf;       /* which gradient buffer holds d loss / d value */
    bool cn;            /* laid out [C, n, H, W] (chosen by fuse.c) */
    bool lowp;          /* bf16 when the run is: a product's output (linear,
                           conv2d), or a value made from one */
    bool half;          /* 16 bits where a bf16 or fp16 run uses a 16-bit plan
                           (a lowp value, not the output) */
    int64_t cpu_offset[2]; /* its per-sample offset in the cpu's plans (fuse.c),
                           in floats: [0] fp32, [1] 16-bit; -1: a value that no
                           pass reads but the next, which lives in forward's
                           working copies alone */
} IrValue;

struct Node {
    const OpDef *op;
    const Stmt *stmt;   /* where it came from */
    const char *name;   /* state_dict prefix: "0", "3", "fc1", "layer1.0.conv1" */
    const char *cname;  /* the name in C identifiers: "layer1_0_conv1" */
    int index;          /* position in nn.Sequential */
    ArgVal args[MAX_ARGS];
    int in, out;        /* value ids */
    int in2;            /* a second input (add's named one), or -1 */
    int dx_buf;         /* the memory plan's: -1, backward writes d in where d in
                           lives; else into gbuf[dx_buf], then adds it there
                           (in has other readers whose backward came first) */
    bool skip_acc;      /* add: d in2 is added to (not copied into) its buffer */
    int64_t cast_offset;/* a product reading an fp32 value: where its copy cast to
                           bf16 lies in the net's xlp (per sample); else -1 */
    int ds_buf;         /* in2 the model's input: gbuf[ds_buf] takes d in2 where
                           net->dinput is NULL (a buffer free there; -1 otherwise) */
    int param0, nparams;/* its parameters in the program's table */
    int buf0, nbufs;    /* its buffers in the program's table */
    const Node *fused;  /* activation fused into this node's epilogue */
    bool absorbed;      /* this activation lives in its producer's epilogue */
    bool sunk;          /* this activation runs after the max pool that followed it
                           in the model, on the pooled values (reorder.c) */
    int64_t aux_size;   /* floats per sample kept for backward (dropout mask) */
    int64_t iaux_size;  /* int32s per sample kept for backward (maxpool argmax) */
    int64_t scratch;    /* floats of scratch a sample, alive within one pass */
    int64_t aux_offset, iaux_offset; /* placed by the memory plan */
    int64_t aux_cpu_offset[2]; /* aux_offset in the cpu's plans */
    /* in the cpu's 16-bit plan, its aux in 16 bits (fuse.c chooses): the
     * copy of x its backward reads instead of x (conv2d's padded input),
     * which its passes then write and read in backward's x working copy
     * (Program.half_work[0]), forward_half keeping its 16 bits after the
     * pass and backward_half loading them before */
    bool aux_half;
};

struct Program {
    Diag *diag;
    Arena *arena;
    const Model *model;
    const char *name;
    Shape input;
    const char *input_name;
    int target_kind;    /* NRT_TARGET_CLASS / NRT_TARGET_VALUE */
    int n_out;
    Node *nodes;        /* layers in order */
    int nnodes;
    int *use_in, *use_out; /* each use's (Model.uses) input and output value, -1
                              until its first and last layers are built */
    IrValue *values;    /* values[0] is the input; node i writes values[i+1] */
    int nvalues;
    Param *params;
    int nparams, params_cap;
    size_t param_count;
    Buffer *buffers;
    int nbuffers, buffers_cap;
    size_t buffer_bytes;
    const LossDef *loss;
    const Stmt *loss_stmt;
    nrt_loss_spec loss_spec; /* a pointwise loss's kind and argument */
    nrt_optim optim;
    const OptimDef *optimizer; /* its entry; NULL until bound */
    const char *device;
    const Stmt *device_stmt; /* NULL: the model names no device */
    int precision;      /* NRT_FP32 (default), NRT_BF16, NRT_FP16 */
    int first_product;   /* the first linear or conv2d (a node), -1 if none: a
                            bf16 run casts its fp32 input into the net's xlp */
    int64_t cast_size;   /* per sample, the copies in xlp of the fp32 inputs of
                            products (Node.cast_offset) */
    nrt_source train, valid, test;
    nrt_schedule schedule;
    const ScheduleDef *scheduler; /* its entry; NULL: none */
    nrt_transforms transforms;
    int batch, epochs;
    uint64_t seed;
    bool misplaced_loss, misplaced_optimizer; /* 'mse' written as a layer */
    /* memory plans (fuse.c): the cpu's activations a sample in fp32
     * (act_size), the integer ones, a gradient buffer, the scratch */
    int64_t act_size, iact_size, grad_size, scratch_size;
    int grad_buffers;   /* how many gradient buffers backward uses (2 or more) */
    int64_t cuda_act_size; /* the GPU's plan: every value, and the aux but the
                              cpu-only */
    /* the GPU's 16-bit plan (0: none): the same with the half values in 16
     * bits, and backward's working copies (x, y, a value read by name; -1:
     * none), as the cpu's */
    int64_t cuda_half_act_size, cuda_half_work[3];
    /* the cpu's 16-bit plan, a bf16 or fp16 run's: the size (0: no value is
     * in 16 bits), and where backward's working copies lie: x (and, in
     * forward and backward, the padded inputs kept in 16 bits: aux_half),
     * y (none loads it today), a value read by name (-1: none); forward's
     * are gbuf[0] and gbuf[1] */
    int64_t half_act_size, half_work[3], half_work_size[3];
    /* backward order (autodiff.c): node indices, last layer first */
    int *bwd;
    int nbwd;
};

/* Declares a parameter of node n; returns its index in p->params. */
int ir_add_param(Program *p, Node *n, const char *suffix, int rank,
                 const int64_t *dim, int fan_in, int fan_out, bool is_bias);
/* Declares a buffer of node n (dtype NRT_F32 or NRT_I64), after its
 * parameters; returns its index in p->buffers. */
int ir_add_buffer(Program *p, Node *n, const char *suffix, int dtype, int rank,
                  const int64_t *dim, float init);
/* How many nodes read each value (in or in2), for values[0..nvalues). */
int *ir_readers(const Program *p);
/* Whether n moves no data: a flatten of an [n, C, H, W] value. */
bool ir_is_view(const Program *p, const Node *n);
/* The value whose memory v lives in (following views and fusions). */
int ir_root(const Program *p, int v);
/* "[3, 32, 32]"; dims_list gives "3, 32, 32" of any dimensions. */
const char *shape_str(Arena *a, const Shape *s);
const char *dims_list(Arena *a, int rank, const int64_t *d);
/* Whether n has pass functions of its own: not a view, not an activation
 * living in its producer's epilogue (each such node is a fusion group). */
bool ir_emits_passes(const Program *p, const Node *n);
/* Whether n's backward pass reads x: a layer with weights or state does
 * (but on the cpu one reading the copy it keeps, conv2d's xp), and an
 * activation whose derivative needs it; y: one whose derivative needs it,
 * itself or fused. */
bool ir_bwd_reads_x(const Node *n, bool cuda);
bool ir_bwd_reads_y(const Node *n);
/* The floats that size values take in a memory plan: 4 bytes each, or in
 * 16 bits (half), two to a float. */
int64_t ir_floats(int64_t size, bool half);
/* Whether it reads y (or x) in elementwise loops alone, which read a
 * value's 16 bits where the run keeps it so (hy, hx): an activation's
 * derivative, its own or fused; the others read fp32 working copies. */
bool ir_bwd_reads_16(const Node *n, bool y);
int64_t shape_size(const Shape *s);

/* ------------------------------------------------------------------ sema.c */

/* Checks the model and infers shapes; fills a Program (graph IR included).
 * Returns NULL if any error was reported. */
Program *sema_check(Diag *d, Arena *a, const Model *m);
/* The value layer n reads by the name of an earlier layer; -1, the error
 * said at loc (what: "add reads"), where no layer before n has that name. */
int named_value(Program *p, const Node *n, const char *name, Loc loc, const char *what);
/* The --check summary: each layer, its output shape and parameter count. */
void print_summary(FILE *out, const Program *p);

/* --------------------------------------------------------------- reorder.c */

/* A monotone activation followed by a max pool runs after it. */
void sink_activations(Program *p);

/* -------------------------------------------------------------- autodiff.c */

/* Builds the backward graph: the order of backward passes and which
 * gradients each produces. */
void autodiff(Program *p);

/* ------------------------------------------------------------------ fuse.c */

/* Fuses activations into the epilogue of the linear or conv2d before them,
 * then plans memory: activation offsets, gradient buffers, scratch. */
void fuse_and_plan(Program *p);

/* ---------------------------------------------------------------- emit_c.c */

/* What every emitter is told besides the program. */
typedef struct EmitOptions {
    const char *source;   /* the model file, as the output names it */
    const char *out_name; /* the output's own name, for #line ("<stdout>") */
    bool lines;           /* #line directives back to the model file */
    const char *lib;      /* --emit=lib: the API's prefix ("digits_cnn"); NULL:
                             a program, with main() */
    const char *lib_header; /* --emit=lib: the header's file name, included */
    bool cuda;            /* the C file holds the CUDA passes too */
    bool mpi;             /* the program joins data-parallel runs (--mpi) */
    const char *fatbin_path; /* with cuda: the kernels compiled ahead of time
                                (nvcc), a file the assembler includes in the
                                program (.incbin) through the fatbin's own
                                unit (EMIT_FATBIN); NULL: their source, for
                                the JIT */
    size_t fatbin_size;      /* its bytes, for the fatbin's unit */
} EmitOptions;

typedef struct KernelList KernelList;

struct Emit {
    FILE *out;
    const Program *p;
    Arena *arena;
    int indent;
    bool cuda;          /* emitting CUDA passes (emit_cuda.c) */
    struct Glue *glue;  /* emitting the cpu's forward and backward (emit_c.c) */
    const EmitOptions *opt;
    Emit *kern;         /* the kernel source, while emit_cuda.c writes it */
    KernelList *kernels;/* the kernels' names, in order */
    int line;           /* lines written so far */
    int model_line;     /* > 0: the lines being written are this model line's */
};

/* Prints one line of C at the current indentation; inside emit_at's
 * region it is preceded by a #line naming the model line.  Nothing when
 * e->out is NULL. */
void emitf(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void emit_blank(Emit *e);
/* Attributes the lines that follow to line model_line of the model file
 * (compiler messages and debuggers then point there), or with 0 returns
 * to the output's own numbering.  Nothing without opt->lines. */
void emit_at(Emit *e, int model_line);
/* A C string literal for s ("NULL" for NULL). */
const char *c_string(Arena *a, const char *s);
/* Writes the whole C program: layer passes (emit_c.c), with cuda the CUDA
 * passes (emit_cuda.c), then the model descriptor and main (driver.c). */
void emit_c(FILE *out, const Program *p, const EmitOptions *o, Arena *a, bool cuda);
/* A C float literal for v: "0.01f", "1.0f". */
const char *c_float(Arena *a, double v);
/* The shortest C double literal that reads back as v: "0.1", "1.0". */
const char *c_double(Arena *a, double v);
/* The C expression of value v's memory, or of its gradient's. */
const char *value_expr(Emit *e, int v);
const char *grad_expr(Emit *e, int v);
/* Whether n's pass gives values rounded already, in a bf16 run: values of
 * its bf16 input (bwd: of its output's gradient, rounded as the gradient
 * of a bf16 value) and zeros (OpDef.selects). */
bool keeps_rounding(const Program *p, const Node *n, bool bwd);
/* "if (cond) dst[0..count) = src rounded to the run's precision;" (src
 * NULL: dst in place), on the cpu or the GPU. */
void emit_round(Emit *e, const char *cond, const char *dst, const char *src,
                const char *count);
/* Whether n is a product of an fp32 input, which it casts in a bf16 run. */
bool casts_input(const Emit *e, const Node *n);
/* The end of n's backward pass where its d x is a part of d x (ops.c). */
void emit_grad_part(Emit *e, const Node *n);
/* Value v's memory as a pass reaches it (through net->act; the model's
 * input, net->x), and the gradient of n's second operand (NAME's). */
const char *value_memory(Emit *e, int v);
const char *operand_grad(Emit *e, const Node *n);
/* Shared with emit_cuda.c: a pass's function name (linear_0_fwd), the
 * comment above a layer's passes, the locals its passes start with (W, b,
 * dW, db, mask, arg), the node whose output a fused node writes, and one
 * pointer per value of the memory plan (a1, a2, …). */
const char *pass_name(Emit *e, const Node *n, const char *pass);
void emit_layer_comment(Emit *e, const Node *n);
void emit_pass_locals(Emit *e, const Node *n, bool bwd);
const Node *last_visible(const Node *n);
/* Whether the backward passes (the cpu's, or e->cuda the GPU's) take hx
 * and hy (a program with a plan keeping values in 16 bits), and whether
 * n's reads y's (or x's) there: ir_bwd_reads_16 of a value so kept. */
bool bwd_halves(const Emit *e);
bool reads_16(const Emit *e, const Node *n, bool y);
void emit_value_locals(Emit *e);
/* The plans: e->glue for plan's forward or backward (0 fp32, 1 16-bit),
 * written next, and the plan being written; the locals of that function
 * (the value pointers, the 16 bits and working copies its calls use); its
 * start, which hands a run keeping its values in 16 bits to the _half
 * twin; and the size of the 16-bit plan of the code being written (the
 * cpu's or, e->cuda, the GPU's; 0: none). */
void emit_use_plan(Emit *e, int plan);
int glue_plan(const Emit *e);
void emit_glue_locals(Emit *e, bool bwd);
void emit_half_dispatch(Emit *e, bool bwd);
int64_t half_plan_size(const Emit *e);
/* The calls of the layers' passes in forward() or backward(), and the
 * #if that checks the runtime's ABI. */
void emit_pass_calls(Emit *e, bool bwd);
/* At the start of forward (fwd: the products' weights rounded in a bf16
 * run) or of backward ("cast", the first product's input as forward cast
 * it); and after the loss, its gradient rounded in a bf16 run. */
void emit_lowp_input(Emit *e, bool fwd);
void emit_lowp_dlast(Emit *e);
void emit_abi_check(Emit *e);
/* The model line a statement comes from, without indentation or comment. */
const char *source_line(const Program *p, const Stmt *s);

/* ------------------------------------------------------------- emit_cuda.c */

/* Writes the kernel source of the program (--emit=cuda, MODEL.cu). */
void emit_cuda(FILE *out, const Program *p, const EmitOptions *o, Arena *a);
/* Writes the CUDA host passes, the kernels (their source, or the fatbin
 * unit's declaration) and the static nrt_cuda_model cuda_model, inside
 * the C file. */
void emit_cuda_host(Emit *e);
/* The program's unit of nvcc's fatbin (o->fatbin_path and _size): the
 * model's nrt_cuda_code, which emit_cuda_host's host code declares. */
void emit_cuda_fatbin(FILE *out, const Program *p, const EmitOptions *o, Arena *a);
/* Kernel NAME_INDEX_WHAT of node n (n NULL: kernel WHAT): while the
 * kernel source is written, its definition — extern "C" __global__, with
 * __launch_bounds__(bounds) unless 0, the parameters and the body's
 * lines — and its name in the list.  Returns the host's name, K_NAME. */
const char *cu_kernel(Emit *e, const Node *n, const char *what, int bounds, const char *params,
                      const char *const *body, int nbody);
/* conv2d_dw's most splits for a weight of total floats (netrt.h's
 * NRT_DW_MAX_SPLITS and NRT_DW_PARTIAL_MAX). */
int64_t cu_dw_max_splits(int64_t total);

/* ---------------------------------------------------------------- emit_ir.c */

/* --emit=ir: the graph as readable text — values with shapes and layouts,
 * the forward and backward passes, fusion groups and the memory plan. */
void emit_ir(FILE *out, const Program *p, const EmitOptions *o, Arena *a);
/* --emit=dot: the same graph for graphviz. */
void emit_dot(FILE *out, const Program *p, const EmitOptions *o, Arena *a);

/* ---------------------------------------------------------------- driver.c */

void emit_driver(Emit *e, bool cuda);
/* --emit=lib's header: the C API of the model. */
void emit_lib_header(FILE *out, const Program *p, const EmitOptions *o, Arena *a);

/* ---------------------------------------------------------------- build.c */

typedef struct BuildOptions {
    const char *cc;        /* NETC_CC or the configured compiler */
    const char *incdir;    /* where netrt.h is */
    const char *libdir;    /* where libnetrt.a is */
    const char *model;     /* the model file, as #line names it */
    const char *cuda_arch; /* the GPU architectures nvcc compiles for
                              ("sm_80,sm_90"); NULL: configure's */
    bool mpi;              /* link libnetrt_mpi and MPI (--mpi) */
    bool verbose;
} BuildOptions;

/* A new private temporary directory (TMPDIR or /tmp) for a build's files,
 * and the compilers' own (their TMPDIR); from now on a stop signal stops
 * the compilers and removes what build_temp was given.  NULL (with the
 * error said) on failure. */
const char *build_tempdir(Arena *a);
/* Marks path (a file, or a directory, removed with what is in it) as
 * temporary: removed by build_remove_temps or a stop signal, the last
 * marked first. */
void build_temp(const char *path);
/* Where the runtime's CUDA headers ("cuda") or kernel templates
 * ("../templates") lie, from netrt.h's directory incdir. */
const char *runtime_dir(Arena *a, const char *incdir, const char *sub);
void build_remove_temps(void);

/* Compiles the C file csrc (with cuda, its CUDA passes too) and links it
 * with obj (an object of build_objects, or NULL) into the executable out,
 * atomically.  0 or -1, the error said. */
int build_program(const BuildOptions *o, const char *csrc, const char *obj, bool cuda,
                  const char *out);
/* Two compilers at once: nvcc's fatbin of the kernel source cusrc, for
 * o->cuda_arch, in the file cusrc.fatbin (its *fatbin_size), and the C
 * compiler's object obj of the host code csrc (both removed with the
 * temporaries).  0, or -1 with the error said and the other compiler
 * stopped. */
int build_objects(const BuildOptions *o, const char *cusrc, const char *csrc, const char *obj,
                  size_t *fatbin_size);
/* NULL if list is a comma-separated list of architectures like sm_90,
 * else the first word that is not. */
const char *build_bad_arch(Arena *a, const char *list);

#endif /* NETC_H */
