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
    emitf(e, ".%s = {%s, %s, %d, %d, %s, %d},", field, c_string(e->arena, s->kind),
          c_string(e->arena, s->path), s->label, s->header,
          c_float(e->arena, s->scale ? s->scale : 1.0), s->standardize);
}

void emit_driver(Emit *e, bool cuda)
{
    const Program *p = e->p;
    if (cuda) {
        emitf(e, "/* The CUDA passes, in the .cu file built with this one. */");
        emitf(e, "extern const nrt_cuda_model netc_cuda_model;");
        emit_blank(e);
    }
    emitf(e, "/* The parameters, in one flat buffer, in the order and with the names");
    emitf(e, " * of PyTorch's state_dict for the same nn.Sequential. */");
    emitf(e, "static const nrt_param params[] = {");
    for (int i = 0; i < p->nparams; i++) {
        const Param *prm = &p->params[i];
        char dims[96] = "";
        size_t len = 0;
        for (int k = 0; k < prm->rank; k++)
            len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", k ? ", " : "",
                                    (long long)prm->dim[k]);
        emitf(e, "    {%s, %d, {%s}, %zu, %zu, %d, %d, %d, {%s, %s, %s}},",
              c_string(e->arena, prm->name), prm->rank, dims, prm->offset, prm->size,
              prm->fan_in, prm->fan_out, prm->is_bias, init_kind(prm->init.kind),
              c_float(e->arena, prm->init.a), c_float(e->arena, prm->init.b));
    }
    emitf(e, "};");
    emit_blank(e);
    const nrt_optim *o = &p->optim;
    emitf(e, "static const nrt_model model = {");
    e->indent++;
    emitf(e, ".abi = NETRT_ABI,");
    emitf(e, ".name = %s,", c_string(e->arena, p->name));
    emitf(e, ".source = %s,", c_string(e->arena, e->opt->source));
    char dims[96] = "";
    size_t len = 0;
    for (int k = 0; k < p->input.rank; k++)
        len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", k ? ", " : "",
                                (long long)p->input.d[k]);
    emitf(e, ".in_rank = %d,", p->input.rank);
    emitf(e, ".in_dim = {%s},", dims);
    emitf(e, ".in_size = %lld,", (long long)shape_size(&p->input));
    emitf(e, ".target_kind = %s,", p->target_kind == NRT_TARGET_CLASS ? "NRT_TARGET_CLASS" : "NRT_TARGET_VALUE");
    emitf(e, ".n_out = %d,", p->n_out);
    emitf(e, ".params = params,");
    emitf(e, ".n_params = %d,", p->nparams);
    emitf(e, ".param_count = %zu,", p->param_count);
    emitf(e, ".act_size = %lld,", (long long)p->act_size);
    emitf(e, ".iact_size = %lld,", (long long)p->iact_size);
    emitf(e, ".grad_size = %lld,", (long long)p->grad_size);
    emitf(e, ".scratch_size = %lld,", (long long)p->scratch_size);
    if (o->kind == NRT_SGD)
        emitf(e, ".optim = {NRT_SGD, .lr = %s, .momentum = %s, .dampening = %s, "
              ".weight_decay = %s, .nesterov = %d},", c_float(e->arena, o->lr),
              c_float(e->arena, o->momentum), c_float(e->arena, o->dampening),
              c_float(e->arena, o->weight_decay), o->nesterov);
    else
        emitf(e, ".optim = {NRT_ADAM, .lr = %s, .weight_decay = %s, .beta1 = %s, "
              ".beta2 = %s, .eps = %s},", c_float(e->arena, o->lr),
              c_float(e->arena, o->weight_decay), c_float(e->arena, o->beta1),
              c_float(e->arena, o->beta2), c_float(e->arena, o->eps));
    emitf(e, ".device = %s,", c_string(e->arena, p->device));
    emit_source(e, "train", &p->train);
    emit_source(e, "test", &p->test);
    emitf(e, ".holdout = %s,", c_double(e->arena, p->holdout));
    emitf(e, ".batch = %d,", p->batch);
    emitf(e, ".epochs = %d,", p->epochs);
    emitf(e, ".seed = %lluu,", (unsigned long long)p->seed);
    emitf(e, ".forward = forward,");
    emitf(e, ".backward = backward,");
    if (cuda)
        emitf(e, ".cuda = &netc_cuda_model,");
    e->indent--;
    emitf(e, "};");
    emit_blank(e);
    emitf(e, "int main(int argc, char **argv)");
    emitf(e, "{");
    emitf(e, "    return nrt_main(&model, argc, argv);");
    emitf(e, "}");
}
