/*
 * registry.c — what a model names besides its layers: initializers,
 * losses, optimizers, learning-rate schedules, data sources, transforms
 * and targets, each an entry (its arguments, and how they set the
 * runtime's descriptor) read by sema.c and the emitters.
 */
#include "ops.h"

#include <string.h>

/* -------------------------------------------------------------- initializers */

/* Each with the runtime's kind (init.c); a and b are its first two
 * arguments. */
const InitDef inits[] = {
    {{"zeros", "all zeros", {{0}}}, NRT_INIT_ZEROS},
    {{"ones", "all ones", {{0}}}, NRT_INIT_ONES},
    {{"constant", "every value val", {{"val", A_NUM, NULL, -BIG, BIG, NULL, NULL}}},
     NRT_INIT_CONSTANT},
    {{"normal", "N(mean, std^2)",
      {{"mean", A_NUM, "0", -BIG, BIG, NULL, NULL}, {"std", A_NUM, "1", 0, BIG, NULL, NULL}}},
     NRT_INIT_NORMAL},
    {{"uniform", "U(a, b)",
      {{"a", A_NUM, "0", -BIG, BIG, NULL, NULL}, {"b", A_NUM, "1", -BIG, BIG, NULL, NULL}}},
     NRT_INIT_UNIFORM},
    {{"xavier_normal", "N(0, gain^2 * 2 / (fan_in + fan_out))",
      {{"gain", A_NUM, "1", 0, BIG, NULL, NULL}}},
     NRT_INIT_XAVIER_NORMAL},
    {{"xavier_uniform", "U(±gain * sqrt(6 / (fan_in + fan_out)))",
      {{"gain", A_NUM, "1", 0, BIG, NULL, NULL}}},
     NRT_INIT_XAVIER_UNIFORM},
    {{"kaiming_normal", "N(0, 2 / ((1 + a^2) fan_in))", {{"a", A_NUM, "0", 0, BIG, NULL, NULL}}},
     NRT_INIT_KAIMING_NORMAL},
    {{"kaiming_uniform", "U(±sqrt(6 / ((1 + a^2) fan_in)))",
      {{"a", A_NUM, "0", 0, BIG, NULL, NULL}}},
     NRT_INIT_KAIMING_UNIFORM},
    {{NULL, NULL, {{0}}}, 0}};

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

/* The pointwise losses (losses.h): the runtime's, of the kind and
 * argument in the model's descriptor (driver.c). */
static void pointwise_c(Emit *e, const char *out)
{
    emitf(e, "float loss = nrt_loss(&net->model->loss, %s, b->y, n, %d, dlast);", out,
          e->p->n_out);
}

static void pointwise_cuda(Emit *e, const char *out)
{
    emitf(e, "TRY(nrt_cu_loss(net, %s, net->y, n, %d, dlast, net->loss, err));", out,
          e->p->n_out);
}

/* The pointwise ones' kinds are losses.h's rows: the runtime's value and
 * derivative of one error; their one argument, if any, the row's arg. */
const LossDef losses[] = {
    {{"cross_entropy", "softmax cross-entropy over class logits, mean over the batch", {{0}}},
     NRT_TARGET_CLASS, xent_c, xent_cuda, "log-softmax fused in: d%N = (softmax - onehot) / n", 0},
    {{"mse", "torch.nn.MSELoss: mean squared error over all outputs", {{0}}},
     NRT_TARGET_VALUE, pointwise_c, pointwise_cuda, "d%N = 2 (y - t) / (n * outputs)",
     NRT_LOSS_MSE},
    {{"l1", "torch.nn.L1Loss: mean absolute error over all outputs", {{0}}},
     NRT_TARGET_VALUE, pointwise_c, pointwise_cuda, "d%N = sign(y - t) / (n * outputs)",
     NRT_LOSS_L1},
    {{"smooth_l1", "torch.nn.SmoothL1Loss: 0.5 e^2 / beta where |e| < beta, else |e| - beta / 2",
      {{"beta", A_NUM, "1", 0, BIG, NULL, NULL}}},
     NRT_TARGET_VALUE, pointwise_c, pointwise_cuda,
     "d%N = clamp((y - t) / beta, -1, 1) / (n * outputs)", NRT_LOSS_SMOOTH_L1},
    {{NULL, NULL, {{0}}}, 0, NULL, NULL, NULL, 0}};

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


bool bind_init(Program *p, const Value *v, nrt_init *out)
{
    if (v->kind != V_IDENT && v->kind != V_CALL) {
        diag_error(p->diag, v->loc, "expected an initializer such as xavier_normal or normal(0, 0.01)");
        return false;
    }
    const InitDef *def = (const InitDef *)sig_find(ENTRIES(inits), v->text);
    if (!def) {
        const char *names[16];
        int n = 0;
        for (const InitDef *t = inits; t->sig.name; t++)
            names[n++] = t->sig.name;
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
    if (!bind_args(p, &def->sig, &call, a))
        return false;
    out->kind = def->kind;
    out->a = (float)a[0].v[0];
    out->b = (float)a[1].v[0];
    if (out->kind == NRT_INIT_UNIFORM && out->b < out->a) {
        diag_error(p->diag, v->loc, "uniform(a, b) needs a <= b");
        return false;
    }
    return true;
}

