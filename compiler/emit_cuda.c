/*
 * emit_cuda.c — the CUDA emitter: the same graph IR, the same memory plan,
 * as two texts.
 *
 *  - The kernel source (--emit=cuda, MODEL.cu): device code only, one
 *    extern "C" __global__ function a launch site, each instantiating a
 *    kernel of the runtime's netrt_kernels.cuh with every shape and the
 *    tiling written in, or holding an elementwise loop (epilogues,
 *    activations).  nvcc compiles it ahead of time into a fatbin the
 *    program embeds; with --jit the program carries the text and NVRTC
 *    compiles it on first run for the GPU present.
 *  - The host passes (C, in the .c file): each layer's cu_NAME_INDEX_fwd
 *    and _bwd launch those kernels by handle through libnetrt_cuda's
 *    launchers (nrt_cu_*), which compute the grids from the same tilings;
 *    cuBLAS does the linear layers' products.  The file defines the
 *    model's nrt_cuda_model, which the descriptor points at, and its
 *    nrt_cuda_code with the kernel source for the JIT.  Compiled ahead of
 *    time, the code is a third text's (emit_cuda_fatbin: MODEL.fatbin.c,
 *    where the assembler includes nvcc's fatbin), so that the host code
 *    compiles while nvcc does.
 *
 * The ops' cu_fwd and cu_bwd write both: host lines with emitf, kernels
 * with cu_kernel.  The graph is walked twice — for the kernel source
 * (host lines dropped) and for the host code (kernel definitions
 * dropped) — so the host code can start with the enum of every kernel.
 */
#include "netc.h"

#include <stdlib.h>
#include <string.h>

struct KernelList {
    const char **name;
    int n, cap;
};

const char *cu_kernel(Emit *e, const Node *n, const char *what, int bounds, const char *params,
                      const char *const *body, int nbody)
{
    const char *name = n ? arena_printf(e->arena, "%s_%s_%s", n->op->sig.name, n->cname, what)
                         : arena_strdup(e->arena, what);
    Emit *k = e->kern;
    if (k) {
        KernelList *l = e->kernels;
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 16;
            const char **grown = arena_alloc(e->arena, sizeof *grown * (size_t)cap);
            if (l->n)
                memcpy(grown, l->name, sizeof *grown * (size_t)l->n);
            l->name = grown;
            l->cap = cap;
        }
        l->name[l->n++] = name;
        emitf(k, "extern \"C\" __global__ void %s%s(%s)",
              bounds ? arena_printf(e->arena, "__launch_bounds__(%d) ", bounds) : "", name, params);
        emitf(k, "{");
        k->indent++;
        for (int i = 0; i < nbody; i++)
            emitf(k, "%s", body[i]);
        k->indent--;
        emitf(k, "}");
        emit_blank(k);
    }
    return arena_printf(e->arena, "K_%s", name);
}

/* The host pass functions are cu_ + the cpu's names. */
static const char *cu_pass(Emit *e, const Node *n, const char *pass)
{
    return arena_printf(e->arena, "cu_%s", pass_name(e, n, pass));
}

static void emit_host_node(Emit *e, const Node *n)
{
    emit_layer_comment(e, n);
    emit_at(e, n->stmt->loc.first_line);
    emitf(e, "static int %s(nrt_cuda_net *net, int n, const float *x, float *y, nrt_error *err)",
          cu_pass(e, n, "fwd"));
    emitf(e, "{");
    e->indent++;
    emitf(e, "(void)net, (void)n, (void)x, (void)y, (void)err;");
    emit_pass_locals(e, n, false);
    n->op->cu_fwd(e, n);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
    const bool halves = bwd_halves(e);
    emitf(e, "static int %s(nrt_cuda_net *net, int n, const float *x, const float *y,%s float *dy, "
          "float *dx, nrt_error *err)", cu_pass(e, n, "bwd"),
          halves ? " const uint16_t *hx, const uint16_t *hy," : "");
    emitf(e, "{");
    e->indent++;
    emitf(e, "(void)net, (void)n, (void)x, (void)y, (void)dy, (void)dx, (void)err;");
    if (halves)
        emitf(e, "(void)hx, (void)hy;");
    emit_pass_locals(e, n, true);
    n->op->cu_bwd(e, n);
    emit_grad_part(e, n);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emit_at(e, 0);
    emit_blank(e);
}

static void emit_host_forward(Emit *e)
{
    const Program *p = e->p;
    const bool half = glue_plan(e);
    if (half) {
        emitf(e, "/* The forward pass where a bf16 or fp16 run keeps its values in 16 bits");
        emitf(e, " * (net->half), as the cpu's forward_half: the passes read and write fp32");
        emitf(e, " * working copies (w0 and w1, the gradient buffers, free until the loss; w2");
        emitf(e, " * a value read by name), and each value's 16 bits are kept (h1, ...). */");
    } else {
        emitf(e, "/* The forward pass over the batch in net->x; the mean loss goes to");
        emitf(e, " * net->loss on the device, and in training d loss / d output to");
        emitf(e, " * %s. */", grad_expr(e, p->nvalues - 1));
    }
    emitf(e, "static int cu_forward%s(nrt_cuda_net *net, int n, nrt_error *err)", half ? "_half" : "");
    emitf(e, "{");
    e->indent++;
    emit_half_dispatch(e, false);
    emit_glue_locals(e, false);
    emit_lowp_input(e, true);
    emit_pass_calls(e, false);
    int last = p->nvalues - 1;
    emitf(e, "net->out = %s;", value_expr(e, last));
    emitf(e, "float *dlast = net->training ? %s : NULL;", grad_expr(e, last));
    emit_at(e, p->loss_stmt->loc.first_line);
    p->loss->emit_cuda(e, value_expr(e, last));
    emit_at(e, 0);
    emit_lowp_dlast(e);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
}

static void emit_host_backward(Emit *e)
{
    const bool half = glue_plan(e);
    if (half) {
        emitf(e, "/* The backward pass after cu_forward_half: what each pass reads is loaded");
        emitf(e, " * from its 16 bits into a working copy (w0 x, w1 y, w2 a value read by");
        emitf(e, " * name). */");
    } else {
        emitf(e, "/* The backward pass, after cu_forward() on the same batch in training mode. */");
    }
    emitf(e, "static int cu_backward%s(nrt_cuda_net *net, int n, nrt_error *err)", half ? "_half" : "");
    emitf(e, "{");
    e->indent++;
    emit_half_dispatch(e, true);
    emit_glue_locals(e, true);
    emit_lowp_input(e, false);
    emit_pass_calls(e, true);
    emitf(e, "return 0;");
    e->indent--;
    emitf(e, "}");
    emit_blank(e);
}

/* Every pass's kernels, in the order the host code names them. */
static void walk(Emit *e)
{
    const Program *p = e->p;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (!ir_emits_passes(p, n))
            continue;
        if (e->kern) {
            emit_layer_comment(e->kern, n);
            n->op->cu_fwd(e, n);
            n->op->cu_bwd(e, n);
            emit_grad_part(e, n);
        } else {
            emit_host_node(e, n);
        }
    }
}

/* The kernel source to fk; the kernels' names to l.  fk may be NULL (only
 * the names wanted). */
static void kernel_source(FILE *fk, const Program *p, const EmitOptions *o, Arena *a,
                          KernelList *l)
{
    EmitOptions ko = *o;
    ko.lines = false; /* NVRTC's messages then name lines of this text */
    Emit k = {.out = fk, .p = p, .arena = a, .cuda = true, .opt = &ko};
    Emit e = {.out = NULL, .p = p, .arena = a, .cuda = true, .opt = &ko, .kern = &k,
              .kernels = l};
    emitf(&k, "/* Generated by netc %s from %s: the CUDA kernels. Do not edit. */", NETC_VERSION,
          o->source);
    emitf(&k, "#include \"netrt_kernels.cuh\"");
    emit_blank(&k);
    walk(&e);
    emitf(&k, "/* the loss */");
    p->loss->emit_cuda(&e, value_expr(&e, p->nvalues - 1));
}

void emit_cuda(FILE *out, const Program *p, const EmitOptions *o, Arena *a)
{
    KernelList l = {0};
    kernel_source(out, p, o, a, &l);
}

int64_t cu_dw_max_splits(int64_t total)
{
    int64_t m = NRT_DW_PARTIAL_MAX / total;
    return m > NRT_DW_MAX_SPLITS ? NRT_DW_MAX_SPLITS : m < 1 ? 1 : m;
}

/* The text as lines of C string literals. */
static void emit_string(Emit *e, const char *text)
{
    const char *s = text;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s + 1) : strlen(s);
        char *line = arena_alloc(e->arena, len + 1);
        memcpy(line, s, len);
        line[len] = '\0';
        emitf(e, "    %s", c_string(e->arena, line));
        s += len;
    }
}

/* The model's kernels, by name, in the order of the enum. */
static void emit_kernel_names(Emit *e, const KernelList *l)
{
    emitf(e, "/* The model's kernels, by name, in the order of the enum. */");
    emitf(e, "static const char *const kernel_names[] = {");
    for (int i = 0; i < l->n; i++)
        emitf(e, "    \"%s\",", l->name[i]);
    emitf(e, "};");
    emit_blank(e);
}

/* The model's nrt_cuda_code: the kernel source, for the JIT; or, compiled
 * ahead of time, a declaration of the fatbin unit's.  Returns its name. */
static const char *emit_code(Emit *e, const KernelList *l, const char *source)
{
    const EmitOptions *o = e->opt;
    if (o->fatbin_path) {
        emitf(e, "/* The kernel source (netc --emit=cuda), compiled ahead of time by nvcc:");
        emitf(e, " * the program's other unit, %s.fatbin.c, has its fatbin and the", e->p->name);
        emitf(e, " * kernels' names. */");
        emitf(e, "extern const nrt_cuda_code netc_cuda_code_%s;", e->p->name);
        emit_blank(e);
        return arena_printf(e->arena, "netc_cuda_code_%s", e->p->name);
    }
    emit_kernel_names(e, l);
    emitf(e, "/* The kernel source (netc --emit=cuda), compiled on first run by NVRTC for");
    emitf(e, " * the GPU present, through the disk cache. */");
    emitf(e, "static const char kernel_source[] =");
    emit_string(e, source);
    emitf(e, "    ;");
    emit_blank(e);
    emitf(e, "static const nrt_cuda_code cuda_code = {%s, kernel_source, NULL, 0, "
          "kernel_names, %d};", c_string(e->arena, arena_printf(e->arena, "%s.cu", e->p->name)),
          l->n);
    emit_blank(e);
    return "cuda_code";
}

void emit_cuda_fatbin(FILE *out, const Program *p, const EmitOptions *o, Arena *a)
{
    KernelList l = {0};
    kernel_source(NULL, p, o, a, &l);
    Emit e = {.out = out, .p = p, .arena = a, .opt = o};
    emitf(&e, "/* Generated by netc %s from %s: nvcc's fatbin of its kernels. Do not edit. */",
          NETC_VERSION, o->source);
    emitf(&e, "#include <netrt.h>");
    emit_blank(&e);
    emit_abi_check(&e);
    emit_blank(&e);
    emit_kernel_names(&e, &l);
    /* the assembler reads the fatbin in: no C compiler parses its bytes */
    emitf(&e, "/* The kernel source (netc --emit=cuda), compiled ahead of time by nvcc: its");
    emitf(&e, " * fatbin, which the assembler includes. */");
    emitf(&e, "__asm__(\".section .rodata\\n.balign 16\\nnetc_fatbin_%s:\\n\"", p->name);
    /* the file's name as an assembler string (C's escapes), in a C string */
    const char *incbin = arena_printf(a, ".incbin %s\n.previous", c_string(a, o->fatbin_path));
    emitf(&e, "        %s);", c_string(a, incbin));
    emitf(&e, "extern const unsigned char netc_fatbin_%s[%zu];", p->name, o->fatbin_size);
    emit_blank(&e);
    emitf(&e, "const nrt_cuda_code netc_cuda_code_%s = {", p->name);
    emitf(&e, "    %s, NULL, netc_fatbin_%s, %zu, kernel_names, %d};",
          c_string(a, arena_printf(a, "%s.cu", p->name)), p->name, o->fatbin_size, l.n);
}

void emit_cuda_host(Emit *c)
{
    const Program *p = c->p;
    KernelList l = {0};
    char *source = NULL;
    size_t source_len = 0;
    FILE *fk = open_memstream(&source, &source_len);
    if (!fk) {
        perror("netc: open_memstream");
        exit(1);
    }
    kernel_source(fk, p, c->opt, c->arena, &l);
    fclose(fk);

    Emit e = *c;
    e.cuda = true;
    emitf(&e, "/* ------------------------------------------------------------ CUDA */");
    emit_blank(&e);
    emitf(&e, "/* Every launch returns nonzero on a CUDA error (the message is in err). */");
    emitf(&e, "#define TRY(call) do { if ((call) != 0) return -1; } while (0)");
    emit_blank(&e);
    emitf(&e, "/* The model's kernels (netc --emit=cuda), after the runtime's. */");
    emitf(&e, "enum {");
    for (int i = 0; i < l.n; i++)
        emitf(&e, "    K_%s%s,", l.name[i], i == 0 ? " = NRT_K_MODEL" : "");
    emitf(&e, "};");
    emit_blank(&e);
    walk(&e);
    for (int plan = p->cuda_half_act_size ? 1 : 0; plan >= 0; plan--) {
        emit_use_plan(&e, plan);
        emit_host_forward(&e);
        emit_host_backward(&e);
    }
    const char *code = emit_code(&e, &l, source);
    free(source);

    /* the workspace; and the longest operand a product reads through
     * nrt_cu_gemm (the run's 16-bit copies of operands are as long): the
     * input, output (its gradient), aux or scratch of a node whose
     * products are nrt_cu_gemm's */
    int64_t ws = 0, operand = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const Node *n = &p->nodes[i];
        if (n->op->cu_workspace && ir_emits_passes(p, n)) {
            int64_t b = n->op->cu_workspace(p, n);
            ws = b > ws ? b : ws;
        }
        const int64_t read[4] = {p->values[n->in].size, p->values[n->out].size, n->aux_size,
                                 n->scratch};
        for (int k = 0; k < 4 && n->op->cu_gemm; k++)
            operand = read[k] > operand ? read[k] : operand;
    }
    emitf(&e, "static const nrt_cuda_model cuda_model = {");
    emitf(&e, "    cu_forward, cu_backward, nrt_cuda_device_count, nrt_cuda_list_devices,");
    emitf(&e, "    nrt_cuda_open, nrt_cuda_jit_info, &%s,", code);
    emitf(&e, "    %lld, /* workspace bytes (split-K partial sums) */", (long long)ws);
    emitf(&e, "    %lld, %lld, /* floats of activations a sample: fp32, and in 16 bits */",
          (long long)p->cuda_act_size, (long long)p->cuda_half_act_size);
    emitf(&e, "    %lld, /* elements a sample of a product's longest operand */", (long long)operand);
    emitf(&e, "};");
    emit_blank(&e);
    c->line = e.line;
}
