/*
 * driver.c — the end of every generated program: the parameter table, the
 * model descriptor the runtime trains from, and main().
 *
 * Everything that is the same for every model (flags, data, the training
 * loop, metrics, checkpoints) is in the runtime; what is written here is
 * only what this model is: its shapes, its parameters with their names in
 * PyTorch's state_dict and their initializers, its optimizer and its
 * defaults for data and training.
 */
#include "netc.h"

#include <string.h>

/* A field of nrt_optim or nrt_schedule that a registry's entry may name
 * (OptimDef.fields, ScheduleDef.fields), and the C initializer of such a
 * struct: {NRT_SGD, .lr = 0.1, .momentum = 0.9f, ...}. */
typedef struct Field {
    const char *name;
    size_t offset;
    char type; /* 'i' int, 'f' float, 'd' double */
} Field;

#define OPTIM_FIELD(name, type) {#name, offsetof(nrt_optim, name), type}
static const Field optim_fields[] = {
    OPTIM_FIELD(lr, 'd'),        OPTIM_FIELD(momentum, 'f'), OPTIM_FIELD(dampening, 'f'),
    OPTIM_FIELD(weight_decay, 'f'), OPTIM_FIELD(nesterov, 'i'), OPTIM_FIELD(beta1, 'f'),
    OPTIM_FIELD(beta2, 'f'),     OPTIM_FIELD(eps, 'f'),      {NULL, 0, 0}};

#define SCHED_FIELD(name, type) {#name, offsetof(nrt_schedule, name), type}
static const Field sched_fields[] = {
    SCHED_FIELD(step_size, 'i'), SCHED_FIELD(gamma, 'd'),    SCHED_FIELD(t_max, 'i'),
    SCHED_FIELD(eta_min, 'd'),   SCHED_FIELD(factor, 'd'),   SCHED_FIELD(patience, 'i'),
    SCHED_FIELD(threshold, 'd'), SCHED_FIELD(threshold_abs, 'i'), SCHED_FIELD(cooldown, 'i'),
    SCHED_FIELD(min_lr, 'd'),    SCHED_FIELD(eps, 'd'),      {NULL, 0, 0}};

static const char *struct_init(Arena *a, const char *kind, const void *base, const Field *table,
                               const char *const *names, int n)
{
    char *s = arena_printf(a, "{%s", kind);
    for (int i = 0; i < n && names[i]; i++) {
        const Field *f = table;
        while (f[1].name && strcmp(f->name, names[i]))
            f++; /* (every field an entry names is in its table) */
        const char *at = (const char *)base + f->offset;
        s = arena_printf(a, "%s, .%s = %s", s, f->name,
                         f->type == 'i'   ? arena_printf(a, "%d", *(const int *)at)
                         : f->type == 'f' ? c_float(a, *(const float *)at)
                                          : c_double(a, *(const double *)at));
    }
    return arena_printf(a, "%s}", s);
}

#define OPTIM_ROW(K, name, cls, s0, s1) [NRT_##K] = {"NRT_" #K, cls},
static const struct {
    const char *kind, *torch;
} optim_rows[NRT_OPTIM_KINDS] = {NRT_OPTIMIZERS(OPTIM_ROW)};
#undef OPTIM_ROW

#define LOSS_ROW(K, name, cls) [NRT_LOSS_##K] = "NRT_LOSS_" #K,
static const char *const loss_kinds[NRT_LOSS_KINDS] = {NRT_LOSSES(LOSS_ROW)};
#undef LOSS_ROW

#define SCHED_ROW(K, name, cls) [NRT_SCHED_##K] = "NRT_SCHED_" #K,
static const char *const sched_kinds[NRT_SCHED_KINDS] = {NRT_SCHEDULES(SCHED_ROW)};
#undef SCHED_ROW

/* torch.optim's class of an optimizer: "SGD", "AdamW". */
static const char *optim_class(int kind)
{
    return optim_rows[kind].torch;
}

static const char *optim_init(Arena *a, const Program *p)
{
    return struct_init(a, optim_rows[p->optim.kind].kind, &p->optim, optim_fields,
                       p->optimizer->fields, 8);
}

static void emit_lib_functions(Emit *e);

static const char *init_kind(int k)
{
    static const char *const names[] = {
        "NRT_INIT_DEFAULT", "NRT_INIT_ZEROS", "NRT_INIT_ONES", "NRT_INIT_CONSTANT",
        "NRT_INIT_NORMAL", "NRT_INIT_UNIFORM", "NRT_INIT_XAVIER_NORMAL",
        "NRT_INIT_XAVIER_UNIFORM", "NRT_INIT_KAIMING_NORMAL", "NRT_INIT_KAIMING_UNIFORM"};
    return names[k];
}

static void emit_source(Emit *e, const char *field, const nrt_source *s)
{
    emitf(e, ".%s = {%s, %s, %d, %d, %s, %d, %s, %s},", field, c_string(e->arena, s->kind),
          c_string(e->arena, s->path), s->label, s->header,
          c_float(e->arena, s->scale ? s->scale : 1.0), s->standardize,
          c_double(e->arena, s->fraction), c_string(e->arena, s->root));
}

/* A pointwise loss's kind, and its argument where it takes one. */
static void emit_loss(Emit *e, const Program *p)
{
    const nrt_loss_spec *l = &p->loss_spec;
    if (!l->kind)
        return;
    if (p->loss->sig.args[0].name)
        emitf(e, ".loss = {%s, .arg = %s},", loss_kinds[l->kind], c_float(e->arena, l->arg));
    else
        emitf(e, ".loss = {%s},", loss_kinds[l->kind]);
}

static void emit_schedule(Emit *e, const Program *p)
{
    if (p->scheduler)
        emitf(e, ".schedule = %s,",
              struct_init(e->arena, sched_kinds[p->schedule.kind], &p->schedule, sched_fields,
                          p->scheduler->fields, 8));
}

static const char *floats(Arena *a, const float *v, int n)
{
    const char *s = "";
    for (int i = 0; i < n; i++)
        s = arena_printf(a, "%s%s%s", s, i ? ", " : "", c_float(a, v[i]));
    return s;
}

static void emit_transforms(Emit *e, const nrt_transforms *t)
{
    if (!t->resize_h && !t->flip_p && !t->to_tensor && !t->normalize)
        return;
    Arena *a = e->arena;
    emitf(e, ".transforms = {.resize_h = %d, .resize_w = %d, .flip_p = %s, .to_tensor = %d, "
          ".normalize = %d,", t->resize_h, t->resize_w, c_double(a, t->flip_p), t->to_tensor,
          t->normalize);
    emitf(e, "               .mean = {%s}, .std = {%s}},", floats(a, t->mean, NRT_MAX_CHANNELS),
          floats(a, t->std, NRT_MAX_CHANNELS));
}

void emit_driver(Emit *e, bool cuda)
{
    const Program *p = e->p;
    emitf(e, "/* The parameters, in one flat buffer, in the order and with the names");
    emitf(e, " * of PyTorch's state_dict for the same nn.Sequential. */");
    emitf(e, "static const nrt_param params[] = {");
    for (int i = 0; i < p->nparams; i++) {
        const Param *prm = &p->params[i];
        emitf(e, "    {%s, %d, {%s}, %zu, %zu, %d, %d, %d, {%s, %s, %s}},",
              c_string(e->arena, prm->name), prm->rank,
              dims_list(e->arena, prm->rank, prm->dim), prm->offset, prm->size,
              prm->fan_in, prm->fan_out, prm->is_bias, init_kind(prm->init.kind),
              c_float(e->arena, prm->init.a), c_float(e->arena, prm->init.b));
    }
    emitf(e, "};");
    emit_blank(e);
    if (p->nbuffers) {
        emitf(e, "/* The buffers (state that is not a parameter), in one flat area of");
        emitf(e, " * bytes, with their place among the parameters in the state_dict. */");
        emitf(e, "static const nrt_buffer buffers[] = {");
        for (int i = 0; i < p->nbuffers; i++) {
            const Buffer *b = &p->buffers[i];
            emitf(e, "    {%s, %s, %d, {%s}, %zu, %zu, %s, %d},", c_string(e->arena, b->name),
                  b->dtype == NRT_I64 ? "NRT_I64" : "NRT_F32", b->rank,
                  b->rank ? dims_list(e->arena, b->rank, b->dim) : "0", b->offset, b->size,
                  c_float(e->arena, b->init), b->after);
        }
        emitf(e, "};");
        emit_blank(e);
    }
    /* not "model": a library's API may be named so (-o model), its
     * handle's type with it */
    emitf(e, "static const nrt_model netc_model = {");
    e->indent++;
    emitf(e, ".abi = NETRT_ABI,");
    emitf(e, ".name = %s,", c_string(e->arena, p->name));
    emitf(e, ".source = %s,", c_string(e->arena, e->opt->source));
    emitf(e, ".in_rank = %d,", p->input.rank);
    emitf(e, ".in_dim = {%s},", dims_list(e->arena, p->input.rank, p->input.d));
    emitf(e, ".in_size = %lld,", (long long)shape_size(&p->input));
    emitf(e, ".target_kind = %s,", p->target_kind == NRT_TARGET_CLASS ? "NRT_TARGET_CLASS" : "NRT_TARGET_VALUE");
    emitf(e, ".n_out = %d,", p->n_out);
    emitf(e, ".params = params,");
    emitf(e, ".n_params = %d,", p->nparams);
    emitf(e, ".param_count = %zu,", p->param_count);
    if (p->nbuffers) {
        emitf(e, ".buffers = buffers,");
        emitf(e, ".n_buffers = %d,", p->nbuffers);
        emitf(e, ".buffer_bytes = %zu,", p->buffer_bytes);
    }
    emitf(e, ".act_size = %lld,", (long long)p->act_size);
    emitf(e, ".iact_size = %lld,", (long long)p->iact_size);
    emitf(e, ".grad_size = %lld,", (long long)p->grad_size);
    if (p->grad_buffers > 2)
        emitf(e, ".grad_buffers = %d,", p->grad_buffers);
    emitf(e, ".scratch_size = %lld,", (long long)p->scratch_size);
    emitf(e, ".optim = %s,", optim_init(e->arena, p));
    emit_loss(e, p);
    emitf(e, ".device = %s,", c_string(e->arena, p->device));
    emit_source(e, "train", &p->train);
    emit_source(e, "valid", &p->valid);
    emit_source(e, "test", &p->test);
    emit_schedule(e, p);
    emit_transforms(e, &p->transforms);
    emitf(e, ".batch = %d,", p->batch);
    emitf(e, ".epochs = %d,", p->epochs);
    emitf(e, ".seed = %lluu,", (unsigned long long)p->seed);
    emitf(e, ".forward = forward,");
    emitf(e, ".backward = backward,");
    if (cuda)
        emitf(e, ".cuda = &cuda_model,");
    if (e->opt->mpi)
        emitf(e, ".dist = &nrt_mpi, /* mpirun: data-parallel over MPI (libnetrt_mpi) */");
    if (p->precision != NRT_FP32)
        emitf(e, ".precision = %s,", p->precision == NRT_BF16 ? "NRT_BF16" : "NRT_FP16");
    if (p->cast_size)
        emitf(e, ".lowp_in_size = %lld, /* the %s, cast in a bf16 run */",
              (long long)p->cast_size,
              p->cast_size == p->values[p->nodes[p->first_product].in].size
                  ? "first product's input" : "products' fp32 inputs");
    if (p->half_act_size)
        emitf(e, ".half_act_size = %lld, /* bf16, fp16: values kept in 16 bits */",
              (long long)p->half_act_size);
    e->indent--;
    emitf(e, "};");
    emit_blank(e);
    if (e->opt->lib) {
        emit_lib_functions(e);
        return;
    }
    emitf(e, "int main(int argc, char **argv)");
    emitf(e, "{");
    emitf(e, "    return nrt_main(&netc_model, argc, argv);");
    emitf(e, "}");
}


/* What a train step of the model takes besides x: labels or values. */
static const char *target_param(const Program *p)
{
    return p->target_kind == NRT_TARGET_CLASS ? "const int32_t *label" : "const float *y";
}

/* A function whose body is the one statement body. */
static void emit_function(Emit *e, const char *signature, const char *body)
{
    emitf(e, "%s", signature);
    emitf(e, "{");
    emitf(e, "    %s", body);
    emitf(e, "}");
}

/* The C API's functions, each a typed call of session.c's: the model's
 * handle is its session, under a type of its own. */
static void emit_lib_functions(Emit *e)
{
    const char *m = e->opt->lib;
    Arena *a = e->arena;
    bool cls = e->p->target_kind == NRT_TARGET_CLASS;
    emitf(e, "/* The C API of %s.h: a %s is an nrt_session of this model. */", m, m);
    emit_function(e, arena_printf(a, "const nrt_model *%s_model(void)", m), "return &netc_model;");
    emit_blank(e);
    emitf(e, "%s *%s_create(const char *device, int batch, nrt_error *err)", m, m);
    emitf(e, "{");
    emitf(e, "    nrt_session *s;");
    emitf(e, "    return nrt_session_open(&netc_model, device, batch, &s, err) ? NULL : (%s *)s;", m);
    emitf(e, "}");
    emit_blank(e);
    emit_function(e, arena_printf(a, "const char *%s_device(const %s *m)", m, m),
                  "return nrt_session_device((const nrt_session *)m);");
    emit_blank(e);
    emit_function(e, arena_printf(a, "int %s_load(%s *m, const char *path, nrt_error *err)", m, m),
                  "return nrt_session_load((nrt_session *)m, path, err);");
    emit_blank(e);
    emit_function(e, arena_printf(a, "int %s_save(%s *m, const char *path, nrt_error *err)", m, m),
                  "return nrt_session_save((nrt_session *)m, path, err);");
    emit_blank(e);
    emit_function(e, arena_printf(a, "int %s_predict(%s *m, const float *x, size_t n, float *out, "
                                  "nrt_error *err)", m, m),
                  "return nrt_session_predict((nrt_session *)m, x, n, out, err);");
    emit_blank(e);
    emit_function(e, arena_printf(a, "int %s_train_step(%s *m, const float *x, %s, int n, float *loss, "
                                  "nrt_error *err)", m, m, target_param(e->p)),
                  arena_printf(a, "return nrt_session_train_step((nrt_session *)m, x, %s, n, loss, err);",
                               cls ? "label, NULL" : "NULL, y"));
    emit_blank(e);
    if (e->p->train.standardize) {
        emit_function(e, arena_printf(a, "size_t %s_stats(const %s *m, const float **mean, "
                                      "const float **std)", m, m),
                      "return nrt_session_stats((const nrt_session *)m, mean, std);");
        emit_blank(e);
        emit_function(e, arena_printf(a, "int %s_set_stats(%s *m, const float *mean, "
                                      "const float *std, nrt_error *err)", m, m),
                      "return nrt_session_set_stats((nrt_session *)m, mean, std, err);");
        emit_blank(e);
    }
    emit_function(e, arena_printf(a, "void %s_destroy(%s *m)", m, m),
                  "nrt_session_close((nrt_session *)m);");
}

void emit_lib_header(FILE *out, const Program *p, const EmitOptions *o, Arena *a)
{
    Emit e0 = {.out = out, .p = p, .arena = a, .opt = o}, *e = &e0;
    const char *m = o->lib;
    char *up = arena_strdup(a, m);
    for (char *c = up; *c; c++)
        if (*c >= 'a' && *c <= 'z')
            *c = (char)(*c - 'a' + 'A');
    bool cls = p->target_kind == NRT_TARGET_CLASS;
    emitf(e, "/* Generated by netc %s from %s: the C API of model %s. Do not edit.", NETC_VERSION,
          o->source, p->name);
    emitf(e, " *");
    emitf(e, " *     nrt_error err;");
    emitf(e, " *     %s *m = %s_create(\"auto\", 0, &err);", m, m);
    emitf(e, " *     if (!m || %s_train_step(m, x, %s, n, &loss, &err) != 0)", m, cls ? "label" : "y");
    emitf(e, " *         fprintf(stderr, \"%%s\\n\", err.msg);");
    emitf(e, " *");
    emitf(e, " * Every function that can fail returns 0 (or a pointer) on success and");
    emitf(e, " * -1 (or NULL) on failure, with one line saying why in err (which may be");
    emitf(e, " * NULL).  Built with netrt's flags, from pkg-config:");
    char *file = arena_strdup(a, o->lib_header); /* "digits.h" -> "digits" */
    file[strlen(file) - 2] = '\0';
    emitf(e, " *     cc -c %s.c $(pkg-config --cflags netrt%s)", file, o->cuda ? "-cuda" : "");
    emitf(e, " *     cc prog.o %s.o $(pkg-config --libs netrt%s)", file, o->cuda ? "-cuda" : "");
    if (o->cuda)
        emitf(e, " * The model's CUDA kernels are in %s.c as source, compiled by NVRTC when a "
              "model is first created on a GPU (cached on disk).", file);
    emitf(e, " */");
    emitf(e, "#ifndef %s_H", up);
    emitf(e, "#define %s_H", up);
    emit_blank(e);
    emitf(e, "#include <stddef.h>");
    emitf(e, "#include <stdint.h>");
    emit_blank(e);
    emitf(e, "#include <netrt.h>");
    emit_blank(e);
    emitf(e, "#ifdef __cplusplus");
    emitf(e, "extern \"C\" {");
    emitf(e, "#endif");
    emit_blank(e);
    emitf(e, "/* Floats in one sample: %s %s, row-major. */",
          p->input_name ? p->input_name : "input", shape_str(a, &p->input));
    emitf(e, "#define %s_INPUT_SIZE %lld", up, (long long)shape_size(&p->input));
    emitf(e, "/* Floats of output per sample: %s */", cls ? arena_printf(a, "the logits of the %d classes.", p->n_out)
          : arena_printf(a, "the %d predicted values.", p->n_out));
    emitf(e, "#define %s_OUTPUT_SIZE %d", up, p->n_out);
    emit_blank(e);
    emitf(e, "typedef struct %s %s;", m, m);
    emit_blank(e);
    emitf(e, "/* A model on device \"cpu\", \"cuda\", \"cuda:N\" or \"auto\" (NULL: the model");
    emitf(e, " * file's, %s) for batches of up to batch samples (0: the model's, %d).", p->device, p->batch);
    emitf(e, " * The weights start as the model's initializers make them (seed %llu). */",
          (unsigned long long)p->seed);
    emitf(e, "%s *%s_create(const char *device, int batch, nrt_error *err);", m, m);
    emitf(e, "/* The device it runs on: \"cpu\", \"cuda:0 (NVIDIA H100 80GB HBM3)\". */");
    emitf(e, "const char *%s_device(const %s *m);", m, m);
    emitf(e, "/* Weights from and to a safetensors file, with PyTorch's state_dict names;");
    emitf(e, " * the program netc builds from the same model reads and writes the same. */");
    emitf(e, "int %s_load(%s *m, const char *path, nrt_error *err);", m, m);
    emitf(e, "int %s_save(%s *m, const char *path, nrt_error *err);", m, m);
    emitf(e, "/* out[n * %s_OUTPUT_SIZE] = the model's output for x[n * %s_INPUT_SIZE],", up, up);
    emitf(e, " * in evaluation mode (no dropout); any n. */");
    emitf(e, "int %s_predict(%s *m, const float *x, size_t n, float *out, nrt_error *err);", m, m);
    emitf(e, "/* One %s step on n samples (1 to the batch given to create):",
          optim_class(p->optim.kind));
    emitf(e, " * x[n * %s_INPUT_SIZE] and %s; *loss (if loss", up,
          cls ? arena_printf(a, "label[n] in [0, %d)", p->n_out)
              : arena_printf(a, "y[n * %s_OUTPUT_SIZE]", up));
    emitf(e, " * is not NULL) receives the batch's mean %s before the update. */", p->loss->sig.name);
    emitf(e, "int %s_train_step(%s *m, const float *x, %s, int n, float *loss, nrt_error *err);", m, m,
          target_param(p));
    if (p->train.standardize) {
        emitf(e, "/* The model standardizes its features (standardize=true): predict and");
        emitf(e, " * train_step take them as the data file holds them and apply");
        emitf(e, " * (x - mean[j]) / std[j] (a std below 1e-12 counting as 1), with the");
        emitf(e, " * statistics of the training rows (population std) that load reads with");
        emitf(e, " * the weights, or set_stats sets (%s_INPUT_SIZE values each); without", up);
        emitf(e, " * any, they fail.  save writes them.  stats: their count (0: none yet). */");
        emitf(e, "size_t %s_stats(const %s *m, const float **mean, const float **std);", m, m);
        emitf(e, "int %s_set_stats(%s *m, const float *mean, const float *std, nrt_error *err);",
              m, m);
    }
    emitf(e, "void %s_destroy(%s *m);", m, m);
    emitf(e, "/* The model descriptor, for the rest of netrt.h. */");
    emitf(e, "const nrt_model *%s_model(void);", m);
    emit_blank(e);
    emitf(e, "#ifdef __cplusplus");
    emitf(e, "}");
    emitf(e, "#endif");
    emit_blank(e);
    emitf(e, "#endif /* %s_H */", up);
}
