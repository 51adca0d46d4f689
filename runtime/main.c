/*
 * main.c — the generated program's main: flags, data, the training loop,
 * metrics, gradient checks.  The backends it trains on are backend.c's and
 * libnetrt_cuda's; weights go in and out through safetensors.c.
 *
 * A generated program calls nrt_main(&model, argc, argv) and nothing else;
 * the model descriptor tells this file the shapes, the parameters, the
 * defaults and the forward and backward functions.  The flags are a
 * contract scripts rely on (README.md lists them); the model's defaults
 * apply where a flag is not given.
 *
 * Random streams: initial weights, shuffling and dropout each have a key
 * of their own derived from --seed, so changing one (say, --no-shuffle)
 * does not change the others, and one seed with one set of flags gives
 * bit-identical runs.  The shuffle and the dropout masks are functions of
 * counters (philox.h: the epoch, the step), computed alike by every
 * backend.
 */
#include "netrt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef NETRT_HAVE_OPENBLAS
#include <cblas.h>
#endif

typedef struct Options {
    const char *device, *data, *test_data, *save, *load, *metrics;
    int epochs, batch, threads, log_every, quiet, shuffle;
    long long max_steps; /* -1: no limit */
    double lr;           /* < 0: the model's */
    uint64_t seed;
    int gradcheck;       /* > 0: check gradients on this many samples */
    int list_devices;    /* --list-devices */
    int jit_info;        /* --jit-info */
    const char *jit_arch;/* --jit-arch: for this architecture, no GPU needed */
} Options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fail(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: error: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------ flags */

static void usage(const nrt_model *m, const char *prog, FILE *out)
{
    fprintf(out,
            "usage: %s [options]\n"
            "\n"
            "Trains the model '%s' (compiled by netc %s from %s).\n"
            "\n"
            "  --device D         cpu | cuda | cuda:N | auto (default: %s)\n"
            "  --list-devices     print the CUDA devices (index, name, compute\n"
            "                     capability, SMs, memory) and exit\n"
            "  --jit-info         how the kernels are had for the GPU (--device):\n"
            "                     compiled ahead of time, or by NVRTC (version,\n"
            "                     target, cache entry, hit or miss, compile time)\n"
            "  --jit-arch ARCH    ... for ARCH (sm_90) instead, without a GPU\n"
            "  --epochs N         passes over the training data (default: %d)\n"
            "  --batch N          samples per step (default: %d)\n"
            "  --lr X             learning rate (default: %g)\n"
            "  --seed N           seed of every random choice (default: %llu)\n"
            "  --data PATH        training data (default: %s)\n"
            "  --test-data PATH   test data, evaluated after each epoch (default: %s)\n"
            "  --no-shuffle       keep the training data in file order\n"
            "  --max-steps N      stop after N optimizer steps (0: no training)\n"
            "  --save FILE        write the weights to FILE (safetensors) at the end\n"
            "  --load FILE        start from the weights in FILE (safetensors)\n"
            "  --metrics FILE     write one JSON record per epoch to FILE (JSON Lines)\n"
            "  --log-every N      also write the loss of every Nth step to the metrics\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --quiet            print nothing but errors\n"
            "  --gradcheck N      check the gradients on N training samples against\n"
            "                     central finite differences, and exit\n"
            "  --help             print this help\n",
            prog, m->name, NETRT_VERSION, m->source, m->device, m->epochs, m->batch,
            (double)m->optim.lr, (unsigned long long)m->seed,
            m->train.path ? m->train.path : "none",
            m->test.path ? m->test.path : m->holdout > 0 ? "a held-out part of the training data" : "none");
}

static int parse_int(const char *prog, const char *flag, const char *s, long long lo,
                     long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fail(prog, "%s expects a whole number from %lld to %lld, got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_flags(const nrt_model *m, int argc, char **argv, Options *o)
{
    const char *prog = argv[0];
    *o = (Options){m->device, m->train.path, m->test.path, NULL, NULL, NULL,
                   m->epochs, m->batch, 0, 0, 0, 1, -1, -1, m->seed, 0, 0, 0, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(m, prog, stdout);
            exit(0);
        } else if (!strcmp(a, "--no-shuffle")) {
            o->shuffle = 0;
            continue;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o->quiet = 1;
            continue;
        } else if (!strcmp(a, "--list-devices")) {
            o->list_devices = 1;
            continue;
        } else if (!strcmp(a, "--jit-info")) {
            o->jit_info = 1;
            continue;
        }
        static const char *const with_value[] = {
            "--device", "--epochs", "--batch", "--lr", "--seed", "--data", "--test-data",
            "--max-steps", "--save", "--load", "--metrics", "--log-every", "--threads",
            "--gradcheck", "--jit-arch", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fail(prog, "unknown option '%s'", a);
            fprintf(stderr, "%s: note: '%s --help' lists the options\n", prog, prog);
            return -1;
        }
        if (i + 1 == argc) {
            fail(prog, "%s needs a value", a);
            return -1;
        }
        const char *s = argv[++i];
        if (!strcmp(a, "--device")) {
            o->device = s;
        } else if (!strcmp(a, "--jit-arch")) {
            o->jit_arch = s;
            o->jit_info = 1;
        } else if (!strcmp(a, "--data")) {
            o->data = s;
        } else if (!strcmp(a, "--test-data")) {
            o->test_data = s;
        } else if (!strcmp(a, "--save")) {
            o->save = s;
        } else if (!strcmp(a, "--load")) {
            o->load = s;
        } else if (!strcmp(a, "--metrics")) {
            o->metrics = s;
        } else if (!strcmp(a, "--lr")) {
            char *end;
            errno = 0;
            o->lr = strtod(s, &end);
            if (errno || end == s || *end || !(o->lr >= 0) || isinf(o->lr)) {
                fail(prog, "--lr expects a non-negative number, got '%s'", s);
                return -1;
            }
        } else {
            long long lo = 0, hi = 2147483647;
            if (!strcmp(a, "--batch") || !strcmp(a, "--log-every") || !strcmp(a, "--threads") ||
                !strcmp(a, "--gradcheck"))
                lo = 1;
            if (!strcmp(a, "--batch"))
                hi = 1048576;
            if (!strcmp(a, "--seed") || !strcmp(a, "--max-steps"))
                hi = 9007199254740991ll;
            if (parse_int(prog, a, s, lo, hi, &v))
                return -1;
            if (!strcmp(a, "--epochs"))
                o->epochs = (int)v;
            else if (!strcmp(a, "--batch"))
                o->batch = (int)v;
            else if (!strcmp(a, "--seed"))
                o->seed = (uint64_t)v;
            else if (!strcmp(a, "--max-steps"))
                o->max_steps = v;
            else if (!strcmp(a, "--log-every"))
                o->log_every = (int)v;
            else if (!strcmp(a, "--threads"))
                o->threads = (int)v;
            else
                o->gradcheck = (int)v;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------- data */

typedef struct Data {
    nrt_dataset train, test;
    int has_train, has_test;
} Data;

static void data_free(Data *d)
{
    if (d->has_train)
        nrt_dataset_free(&d->train);
    if (d->has_test)
        nrt_dataset_free(&d->test);
}

static int load_data(const nrt_model *m, const Options *o, Data *d, nrt_error *err)
{
    *d = (Data){0};
    nrt_source src = m->train;
    src.path = o->data;
    if (!src.kind)
        src.kind = "csv";
    if (!src.path)
        return nrt_errorf(err, "no training data: the model names none; give --data PATH");
    if (nrt_dataset_load(&src, m->target_kind, m->in_size, m->n_out, 0, &d->train, err))
        return -1;
    d->has_train = 1;
    if (o->test_data) {
        nrt_source t = m->test.kind ? m->test : m->train;
        t.path = o->test_data;
        if (!t.kind)
            t.kind = src.kind;
        if (nrt_dataset_load(&t, m->target_kind, m->in_size, m->n_out, 1, &d->test, err))
            return -1;
        d->has_test = 1;
    } else if (m->holdout > 0) {
        if (nrt_dataset_split(&d->train, m->holdout, o->seed, &d->test, err))
            return -1;
        d->has_test = 1;
    }
    if (src.standardize) {
        size_t dim = d->train.dim;
        float *mean = malloc(sizeof(float) * dim), *std = malloc(sizeof(float) * dim);
        if (!mean || !std) {
            free(mean);
            free(std);
            return nrt_errorf(err, "out of memory");
        }
        nrt_dataset_stats(&d->train, mean, std);
        nrt_dataset_standardize(&d->train, mean, std);
        if (d->has_test)
            nrt_dataset_standardize(&d->test, mean, std);
        free(mean);
        free(std);
    }
    return 0;
}

/* ---------------------------------------------------------------- gradcheck */

/* Loss of the batch.  net->step does not move, so every evaluation of
 * the loss sees the same dropout masks. */
static double loss_at(nrt_net *net, const nrt_batch *b)
{
    const float *out;
    return (double)net->model->forward(net, b, &out);
}

typedef struct Check {
    long long checked, kinks, failed;
    double max_err;
} Check;

/* Compares the analytic derivative of value *v with central differences. */
static void check_one(nrt_net *net, const nrt_batch *b, float *v,
                      double analytic, const char *what, long long index, Check *c, int verbose)
{
    const char *step = getenv("NETRT_GRADCHECK_STEP");
    const double h = step ? atof(step) : 1e-3, atol = 2e-4, rtol = 5e-3;
    float saved = *v;
    *v = saved + (float)h;
    double up = loss_at(net, b);
    *v = saved - (float)h;
    double down = loss_at(net, b);
    *v = saved;
    double mid = loss_at(net, b);
    double central = (up - down) / (2 * h);
    double right = (up - mid) / h, left = (mid - down) / h;
    c->checked++;
    double err = fabs(analytic - central);
    double tol = atol + rtol * fmax(fabs(analytic), fabs(central));
    if (err <= tol) {
        if (err > c->max_err)
            c->max_err = err;
        return;
    }
    /* a kink (relu at 0, a maxpool tie) inside [-h, h]: the one-sided
     * derivatives disagree, and the analytic one must be one of them */
    if (fabs(right - left) > tol) {
        double el = fabs(analytic - left), er = fabs(analytic - right);
        if (el <= atol + rtol * fabs(left) || er <= atol + rtol * fabs(right)) {
            c->kinks++;
            if (verbose)
                printf("kink %s[%lld]: analytic %.6g, left %.6g, right %.6g\n", what, index,
                       analytic, left, right);
            return;
        }
    }
    c->failed++;
    printf("MISMATCH %s[%lld]: analytic %.6g, numeric %.6g (left %.6g, right %.6g)\n", what,
           index, analytic, central, left, right);
}

static int gradcheck(nrt_net *net, const nrt_dataset *d, int nsamples, uint64_t seed)
{
    const nrt_model *m = net->model;
    size_t n = (size_t)nsamples < d->n ? (size_t)nsamples : d->n;
    uint32_t *idx = malloc(sizeof *idx * n);
    float *x = malloc(sizeof(float) * n * m->in_size);
    int32_t *label = d->label ? malloc(sizeof(int32_t) * n) : NULL;
    float *y = d->y ? malloc(sizeof(float) * n * d->ydim) : NULL;
    float *analytic = malloc(sizeof(float) * m->param_count + 1);
    float *dinput = calloc(n * m->in_size, sizeof(float));
    if (!idx || !x || (d->label && !label) || (d->y && !y) || !analytic || !dinput) {
        fprintf(stderr, "gradcheck: out of memory\n");
        free(idx), free(x), free(label), free(y), free(analytic), free(dinput);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    nrt_dataset_gather(d, idx, n, x, label, y);
    nrt_batch b = {(int)n, x, label, y};
    net->dropout_key = nrt_stream_key(seed, NRT_STREAM_DROPOUT);
    net->training = 1;
    net->dinput = dinput;
    loss_at(net, &b);
    m->backward(net, &b);
    memcpy(analytic, net->grad, sizeof(float) * m->param_count);
    net->dinput = NULL;

    Check c = {0};
    int verbose = getenv("NETRT_GRADCHECK_VERBOSE") != NULL;
    for (int i = 0; i < m->n_params; i++) {
        const nrt_param *p = &m->params[i];
        size_t stride = p->size > 64 ? p->size / 64 : 1; /* at most ~64 per tensor */
        for (size_t k = 0; k < p->size; k += stride)
            check_one(net, &b, net->param + p->offset + k, analytic[p->offset + k],
                      p->name, (long long)k, &c, verbose);
    }
    size_t nin = n * m->in_size, stride = nin > 256 ? nin / 256 : 1;
    for (size_t k = 0; k < nin; k += stride)
        check_one(net, &b, x + k, dinput[k], "input", (long long)k, &c, verbose);
    printf("gradcheck: %lld values checked on %zu samples, %lld at kinks, max error %.3g: %s\n",
           c.checked, n, c.kinks, c.max_err, c.failed ? "FAILED" : "ok");
    free(x);
    free(label);
    free(y);
    free(idx);
    free(analytic);
    net->dinput = NULL;
    free(dinput);
    return c.failed ? 1 : 0;
}

/* ------------------------------------------------------------------ train */

typedef struct Run {
    const nrt_model *m;
    const Options *o;
    const char *prog;
    nrt_backend be;
    float *param;      /* the weights on the host: initial, loaded, saved */
    Data data;
    FILE *metrics;
    long long steps;
    float lr;          /* the optimizer's, --lr applied */
    nrt_error err;
} Run;

static void progress(const Run *r, int epoch, size_t done, size_t total, double loss)
{
    fprintf(stderr, "\r  epoch %d/%d %3d%%  loss %.4f ", epoch, r->o->epochs,
            (int)(100.0 * (double)done / (double)total), loss);
    fflush(stderr);
}

static void bad_loss(Run *r, double loss, const char *when, int epoch)
{
    fail(r->prog, "the loss is %s %s %lld (epoch %d); lower the learning rate (now %g)",
         isnan(loss) ? "NaN" : "infinite", when, r->steps, epoch, (double)r->lr);
}

/* The epochs: the order of the samples, the steps, the epoch's line and
 * metrics.  The loss of a step is read from the backend only when it is
 * needed (a logged step, the live progress line) unless reading it costs
 * nothing (the cpu): on a GPU a read waits for the step. */
static int train(Run *r)
{
    const nrt_model *m = r->m;
    const Options *o = r->o;
    nrt_backend *be = &r->be;
    nrt_error *err = &r->err;
    const uint64_t shuffle_key = nrt_stream_key(o->seed, NRT_STREAM_SHUFFLE);
    const nrt_dataset *d = &r->data.train;
    int live = !o->quiet && isatty(2);
    double t0 = now(), total_samples = 0;
    int epochs_done = 0;

    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        if (o->max_steps >= 0 && r->steps >= o->max_steps)
            break;
        nrt_order order;
        nrt_order_init(&order, shuffle_key, (uint64_t)epoch, d->n, o->shuffle);
        if (be->set_order(be->ctx, &order, err))
            return -1;
        double te = now(), shown_sum = 0, last_shown = te;
        size_t seen = 0, shown = 0;
        for (size_t s = 0; s < d->n; s += (size_t)o->batch) {
            if (o->max_steps >= 0 && r->steps >= o->max_steps)
                break;
            size_t n = d->n - s < (size_t)o->batch ? d->n - s : (size_t)o->batch;
            int logged = r->metrics && o->log_every && (r->steps + 1) % o->log_every == 0;
            int show = live && now() - last_shown > 0.1;
            int want = be->loss_free || logged || show;
            float loss;
            if (be->step(be->ctx, s, (int)n, want ? &loss : NULL, err))
                return -1;
            r->steps++;
            seen += n;
            if (!want)
                continue;
            if (!isfinite(loss)) {
                if (live)
                    fputc('\n', stderr);
                bad_loss(r, loss, "at step", epoch);
                return 1;
            }
            shown_sum += (double)loss * (double)n;
            shown += n;
            if (logged)
                fprintf(r->metrics, "{\"step\": %lld, \"loss\": %.9g}\n", r->steps, (double)loss);
            if (show) {
                progress(r, epoch, s + n, d->n, shown_sum / (double)shown);
                last_shown = now();
            }
        }
        if (seen == 0)
            break;
        double loss_sum;
        if (be->take_loss_sum(be->ctx, &loss_sum, err))
            return -1;
        double secs = now() - te;
        total_samples += (double)seen;
        epochs_done++;
        if (live)
            fputs("\r\033[K", stderr);
        double train_loss = loss_sum / (double)seen;
        if (!isfinite(train_loss)) {
            bad_loss(r, train_loss, "by step", epoch);
            return 1;
        }
        double test_loss = NAN, accuracy = NAN;
        if (r->data.has_test && be->evaluate(be->ctx, &test_loss, &accuracy, err))
            return -1;
        if (!o->quiet) {
            printf("epoch %3d/%d  train_loss %.6f", epoch, o->epochs, train_loss);
            if (r->data.has_test) {
                printf("  test_loss %.6f", test_loss);
                if (m->target_kind == NRT_TARGET_CLASS)
                    printf("  test_accuracy %.2f%%", 100 * accuracy);
            }
            printf("  %.2fs  %.0f samples/s\n", secs, (double)seen / secs);
            fflush(stdout);
        }
        if (r->metrics) {
            fprintf(r->metrics, "{\"epoch\": %d, \"train_loss\": %.9g", epoch, train_loss);
            if (r->data.has_test) {
                fprintf(r->metrics, ", \"test_loss\": %.9g", test_loss);
                if (m->target_kind == NRT_TARGET_CLASS)
                    fprintf(r->metrics, ", \"test_accuracy\": %.9g", accuracy);
            }
            fprintf(r->metrics, ", \"lr\": %.7g, \"seconds\": %.6f, \"samples_per_sec\": %.3f}\n",
                    (double)r->lr, secs, (double)seen / secs);
            fflush(r->metrics);
        }
    }
    double secs = now() - t0;
    if (!o->quiet && epochs_done > 0)
        printf("trained %d epoch%s (%lld steps) in %.2f s: %.0f samples/s\n", epochs_done,
               epochs_done == 1 ? "" : "s", r->steps, secs, total_samples / secs);
    return 0;
}

/* ---------------------------------------------------------------- devices */

/* --list-devices: what torch.cuda tells a PyTorch user. */
static int list_devices(const nrt_model *m, nrt_error *err)
{
    if (!m->cuda) {
        printf("cpu (this program was built without CUDA)\n");
        return 0;
    }
    return m->cuda->list_devices(stdout, err);
}

/* --jit-info, --jit-arch */
static int jit_info(const nrt_model *m, const Options *o, nrt_error *err)
{
    if (!m->cuda)
        return nrt_errorf(err, "--jit-info: this program was built without CUDA");
    int device;
    if (nrt_device_parse(o->device, &device, err) < 0)
        return -1;
    return m->cuda->jit_info(m, o->jit_arch, device < 0 ? 0 : device, stdout, err);
}

/* OpenMP threads that wait for work by spinning (libgomp's default) are
 * fast on an idle machine and disastrous on a busy one: a spinning thread
 * holds a core the thread it waits for needs, and a step gets 5-50 times
 * slower.  libgomp reads OMP_WAIT_POLICY once, before main, so the program
 * sets it to passive and starts itself again, unless the user chose. */
static void prefer_passive_waits(char **argv)
{
#if defined(_OPENMP) && defined(__linux__)
    if (getenv("OMP_WAIT_POLICY") || setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* no exec: go on as we are */
#else
    (void)argv;
#endif
}

/* --gradcheck: the cpu's passes against finite differences. */
static int run_gradcheck(Run *r)
{
    nrt_net net;
    if (nrt_net_alloc(&net, r->m, r->o->gradcheck, &r->err))
        return -1;
    memcpy(net.param, r->param, sizeof(float) * r->m->param_count);
    int status = gradcheck(&net, &r->data.train, r->o->gradcheck, r->o->seed);
    nrt_net_free(&net);
    return status;
}

int nrt_main(const nrt_model *m, int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : m->name;
    if (argc > 0)
        prefer_passive_waits(argv);
    if (m->abi != NETRT_ABI) {
        fail(prog, "compiled for netrt ABI %d, linked with ABI %d", m->abi, NETRT_ABI);
        return 1;
    }
    Options o;
    if (parse_flags(m, argc, argv, &o))
        return 2;
#ifdef _OPENMP
    if (o.threads > 0)
        omp_set_num_threads(o.threads);
#endif
#ifdef NETRT_HAVE_OPENBLAS
    if (o.threads > 0)
        openblas_set_num_threads(o.threads);
#endif

    Run r = {0};
    r.m = m;
    r.o = &o;
    r.prog = prog;
    nrt_error *err = &r.err;
    int status = 1;
    if (o.list_devices || o.jit_info) {
        if (o.list_devices ? list_devices(m, err) : jit_info(m, &o, err))
            goto fail;
        return 0;
    }
    int dev_index;
    nrt_run_config rc = {.dropout_key = nrt_stream_key(o.seed, NRT_STREAM_DROPOUT), .optim = m->optim};
    if (nrt_device_parse(o.device, &dev_index, err) < 0)
        goto fail;
    int need_data = o.max_steps != 0 || o.gradcheck > 0;

    if (need_data && load_data(m, &o, &r.data, err))
        goto fail;
    r.param = calloc(m->param_count ? m->param_count : 1, sizeof(float));
    if (!r.param) {
        nrt_errorf(err, "out of memory");
        goto fail;
    }
    nrt_rng init;
    nrt_rng_seed(&init, nrt_stream_key(o.seed, NRT_STREAM_INIT));
    nrt_init_params(m->params, m->n_params, r.param, &init);
    if (o.load && nrt_weights_load(m, r.param, o.load, err))
        goto fail;
    if (o.gradcheck > 0) {
        status = run_gradcheck(&r);
        if (status < 0)
            goto fail;
        goto done;
    }
    rc.cap = o.batch;
    if (o.lr >= 0)
        rc.optim.lr = (float)o.lr;
    r.lr = rc.optim.lr;
    char note[256];
    if (nrt_backend_open(m, o.device, &rc, &r.be, note, sizeof note, err))
        goto fail;
    if (note[0] && !o.quiet)
        printf("device: %s\n", note);
    if (r.be.set_params(r.be.ctx, r.param, err))
        goto fail;
    if (o.metrics) {
        r.metrics = fopen(o.metrics, "w");
        if (!r.metrics) {
            nrt_errorf(err, "%s: cannot write: %s", o.metrics, strerror(errno));
            goto fail;
        }
    }
    if (need_data) {
        if (r.be.set_data(r.be.ctx, &r.data.train, r.data.has_test ? &r.data.test : NULL, err))
            goto fail;
        if (!o.quiet)
            printf("model %s: %zu parameters; %zu training samples%s\n", m->name, m->param_count,
                   r.data.train.n,
                   r.data.has_test ? "" : " (no test data)");
        int t = train(&r);
        if (t < 0)
            goto fail;
        if (t > 0)
            goto done;
    }
    if (o.save && (r.be.get_params(r.be.ctx, r.param, err) || nrt_weights_save(m, r.param, o.save, err)))
        goto fail;
    if (r.metrics && fclose(r.metrics) != 0) {
        r.metrics = NULL;
        nrt_errorf(err, "%s: write error: %s", o.metrics, strerror(errno));
        goto fail;
    }
    r.metrics = NULL;
    size_t peak = r.be.peak_memory(r.be.ctx);
    if (peak && !o.quiet)
        printf("peak device memory: %.1f MiB\n", (double)peak / 1048576);
    status = 0;
    goto done;
fail:
    fail(prog, "%s", err->msg);
done:
    if (r.metrics)
        fclose(r.metrics);
    if (r.be.close)
        r.be.close(r.be.ctx);
    free(r.param);
    data_free(&r.data);
    return status;
}
