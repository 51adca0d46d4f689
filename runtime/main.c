/*
 * main.c — the generated program's main: flags, data, the training loop
 * with its validation, schedule, metrics, TensorBoard log and checkpoints,
 * the test at the end; --eval, --predict.  The backends it trains on are
 * backend.c's and libnetrt_cuda's; weights go in and out through
 * safetensors.c, a run's whole state through checkpoint.c.
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
 * backend; which is why a checkpoint of the weights, the optimizer's state
 * and the counters is all a run needs to go on exactly as it would have.
 *
 * The data: the training set; a validation set, evaluated after every
 * epoch (what reduce_on_plateau watches); a test set, evaluated once at the
 * end.  The latter two are files or parts of the training set held out.
 */
#include "netrt.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef NETRT_HAVE_OPENBLAS
#include <cblas.h>
#endif

typedef struct Options {
    const char *prog;       /* argv[0], for messages */
    const char *device, *data, *valid_data, *test_data, *save, *load, *metrics;
    const char *logdir;     /* --logdir: TensorBoard event files */
    const char *checkpoint; /* --checkpoint DIR (and --resume's) */
    const char *resume;     /* --resume DIR */
    const char *predict;    /* --predict INPUT */
    const char *output;     /* --output FILE (--predict's; default stdout) */
    int epochs, batch, threads, log_every, quiet, shuffle;
    int workers;            /* --workers: threads decoding and assembling images */
    int skip_bad;           /* --skip-bad: an unreadable image is left out */
    int eval;               /* --eval: evaluate the test data, no training */
    long long max_steps;    /* -1: no limit */
    double lr;              /* < 0: the model's */
    size_t bucket_bytes;    /* --bucket-mb, in bytes; 0: the default */
    int precision;          /* --precision, else the model's (enum nrt_precision) */
    float init_scale;       /* --loss-scale (fp16), 0: GradScaler's default */
    uint64_t seed;
    /* flags a checkpoint must agree with, and --epochs, a resumed run's new length */
    int given_seed, given_batch, given_shuffle, given_data, given_epochs, given_precision;
    int gradcheck;          /* > 0: check gradients on this many samples */
    int list_devices;       /* --list-devices */
    int jit_info;           /* --jit-info */
    const char *jit_arch;   /* --jit-arch: for this architecture, no GPU needed */
} Options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "PROG: error: MESSAGE", written whole at once: stderr is unbuffered, and
 * a line written in pieces can be cut by other output (mpirun forwards a
 * rank's as it comes, and prints its own). */
static void fail(const char *prog, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: error: %s\n", prog, msg);
}

/* ------------------------------------------------------------------ flags */

static const char *source_text(const nrt_source *s)
{
    if (!s->kind)
        return "none";
    return strcmp(s->kind, "holdout") ? s->path : "a held-out part of the training data";
}

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
            "  --valid-data PATH  validation data, evaluated after each epoch\n"
            "                     (default: %s)\n"
            "  --test-data PATH   test data, evaluated at the end (default: %s)\n"
            "  --no-shuffle       keep the training data in file order\n"
            "  --max-steps N      stop after N optimizer steps (0: no training)\n"
            "  --save FILE        write the weights to FILE (safetensors) at the end\n"
            "  --load FILE        start from the weights in FILE (safetensors)\n"
            "  --checkpoint DIR   save the run's whole state in DIR after each epoch,\n"
            "                     and on Ctrl-C or SIGTERM\n"
            "  --resume DIR       go on from DIR's checkpoint (and keep saving there)\n"
            "  --metrics FILE     write one JSON record per epoch to FILE (JSON Lines)\n"
            "  --log-every N      also write the loss of every Nth step to the metrics\n"
            "  --logdir DIR       write TensorBoard event files to DIR\n"
            "  --eval             evaluate the test data (with --load's weights), print\n"
            "                     the loss and accuracy, and exit\n"
            "  --predict INPUT    write the model's predictions for INPUT's samples as\n"
            "                     CSV to --output (default: stdout), and exit\n"
            "  -o, --output FILE  where --predict writes\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --workers N        threads that decode images and assemble augmented\n"
            "                     batches while the step runs (default: the cores, up\n"
            "                     to 8)\n"
            "  --skip-bad         leave out images that cannot be read, with a count\n"
            "                     at the end, instead of stopping at the first\n"
            "  --quiet            print nothing but errors\n"
            "  --precision P      fp32 | bf16 | fp16: the products' and the\n"
            "                     activations' precision, as torch.autocast (default:\n"
            "                     the model's, %s); fp16 scales the loss as GradScaler\n"
            "  --loss-scale S     fp16: the first loss scale (default 65536)\n"
            "  --bucket-mb X      with several ranks on GPUs: the gradients are summed\n"
            "                     in buckets of up to X MiB while backward runs\n"
            "                     (DDP's bucket_cap_mb; default 25; netc --mpi)\n"
            "  --gradcheck N      check the gradients on N training samples against\n"
            "                     central finite differences, on the --device (on a\n"
            "                     GPU also against the cpu's), and exit; in bf16 and\n"
            "                     fp16 fp32's passes so, the loss against fp32's and\n"
            "                     the gradients against the backward pass in fp32,\n"
            "                     within a few units of roundoff\n"
            "  --help             print this help\n",
            prog, m->name, NETRT_VERSION, m->source, m->device, m->epochs, m->batch,
            (double)m->optim.lr, (unsigned long long)m->seed,
            m->train.path ? m->train.path : "none", source_text(&m->valid),
            source_text(&m->test), nrt_precision_name(m->precision));
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

/* A flag's value: where it goes (a string, or a number with its range). */
typedef struct Flag {
    const char *name;
    const char **str;
    long long *num;
    long long lo, hi;
} Flag;

static int parse_flags(const nrt_model *m, int argc, char **argv, Options *o)
{
    const char *prog = argv[0];
    *o = (Options){.device = m->device, .data = m->train.path, .epochs = m->epochs,
                   .batch = m->batch, .shuffle = 1, .max_steps = -1, .lr = -1, .seed = m->seed,
                   .prog = prog};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long long epochs = o->epochs, batch = o->batch, seed = (long long)o->seed, log_every = 0,
              threads = 0, gradcheck = 0, max_steps = -1,
              workers = cores < 1 ? 1 : cores > 8 ? 8 : cores;
    const char *lr = NULL, *bucket_mb = NULL, *precision = NULL, *loss_scale = NULL;
    const Flag flags[] = {
        {"--device", &o->device, NULL, 0, 0},
        {"--jit-arch", &o->jit_arch, NULL, 0, 0},
        {"--data", &o->data, NULL, 0, 0},
        {"--valid-data", &o->valid_data, NULL, 0, 0},
        {"--test-data", &o->test_data, NULL, 0, 0},
        {"--save", &o->save, NULL, 0, 0},
        {"--load", &o->load, NULL, 0, 0},
        {"--metrics", &o->metrics, NULL, 0, 0},
        {"--logdir", &o->logdir, NULL, 0, 0},
        {"--checkpoint", &o->checkpoint, NULL, 0, 0},
        {"--resume", &o->resume, NULL, 0, 0},
        {"--predict", &o->predict, NULL, 0, 0},
        {"--output", &o->output, NULL, 0, 0},
        {"-o", &o->output, NULL, 0, 0},
        {"--lr", &lr, NULL, 0, 0},
        {"--bucket-mb", &bucket_mb, NULL, 0, 0},
        {"--precision", &precision, NULL, 0, 0},
        {"--loss-scale", &loss_scale, NULL, 0, 0},
        {"--epochs", NULL, &epochs, 0, NRT_EPOCHS_MAX},
        {"--batch", NULL, &batch, 1, NRT_BATCH_MAX},
        {"--seed", NULL, &seed, 0, NRT_SEED_MAX},
        {"--max-steps", NULL, &max_steps, 0, NRT_STEPS_MAX},
        {"--log-every", NULL, &log_every, 1, 2147483647},
        {"--threads", NULL, &threads, 1, 2147483647},
        {"--gradcheck", NULL, &gradcheck, 1, 2147483647},
        {"--workers", NULL, &workers, 1, 256},
        {NULL, NULL, NULL, 0, 0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(m, prog, stdout);
            exit(0);
        }
        int *sw = !strcmp(a, "--no-shuffle")     ? &o->shuffle
                  : !strcmp(a, "--quiet") || !strcmp(a, "-q") ? &o->quiet
                  : !strcmp(a, "--list-devices") ? &o->list_devices
                  : !strcmp(a, "--jit-info")     ? &o->jit_info
                  : !strcmp(a, "--eval")         ? &o->eval
                  : !strcmp(a, "--skip-bad")     ? &o->skip_bad
                                                 : NULL;
        if (sw) { /* a switch turns its option on, except --no-shuffle's off */
            *sw = sw != &o->shuffle;
            o->given_shuffle |= sw == &o->shuffle;
            continue;
        }
        const Flag *f = flags;
        while (f->name && strcmp(a, f->name))
            f++;
        if (!f->name) {
            fail(prog, "unknown option '%s'", a);
            fprintf(stderr, "%s: note: '%s --help' lists the options\n", prog, prog);
            return -1;
        }
        if (i + 1 == argc) {
            fail(prog, "%s needs a value", a);
            return -1;
        }
        const char *v = argv[++i];
        if (f->str)
            *f->str = v;
        else if (parse_int(prog, a, v, f->lo, f->hi, f->num))
            return -1;
        o->given_seed |= f->num == &seed;
        o->given_batch |= f->num == &batch;
        o->given_epochs |= f->num == &epochs;
        o->given_data |= f->str == &o->data;
    }
    if (lr) {
        char *end;
        errno = 0;
        o->lr = strtod(lr, &end);
        if (errno || end == lr || *end || !nrt_lr_valid(o->lr)) {
            fail(prog, "--lr expects a non-negative number, got '%s'", lr);
            return -1;
        }
        if (o->lr != 0 && (float)o->lr == 0) { /* as the model's numbers: sgd steps in float */
            fail(prog, "--lr %s is too small: it would be 0 as a float", lr);
            return -1;
        }
    }
    o->precision = m->precision;
    if (precision) {
        o->precision = nrt_precision_parse(precision);
        if (o->precision < 0) {
            fail(prog, "--precision expects fp32, bf16 or fp16, got '%s'", precision);
            return -1;
        }
        o->given_precision = 1;
    }
    if (loss_scale) {
        char *end;
        errno = 0;
        double s = strtod(loss_scale, &end);
        if (errno || end == loss_scale || *end || !(s > 0 && s <= FLT_MAX) || (float)s == 0) {
            fail(prog, "--loss-scale expects a positive number a float holds, got '%s'",
                 loss_scale);
            return -1;
        }
        if (o->resume) {
            fail(prog, "--loss-scale starts a run; --resume goes on with its checkpoint's scale");
            return -1;
        }
        if (o->precision != NRT_FP16) {
            fail(prog, "--loss-scale: the run is in %s; the loss is scaled in fp16 only",
                 nrt_precision_name(o->precision));
            return -1;
        }
        o->init_scale = (float)s;
    }
    if (bucket_mb) {
        char *end;
        errno = 0;
        double mb = strtod(bucket_mb, &end);
        if (errno || end == bucket_mb || *end || !(mb > 0 && mb <= 65536)) {
            fail(prog, "--bucket-mb expects a number of MiB above 0, up to 65536, got '%s'",
                 bucket_mb);
            return -1;
        }
        if (!m->dist) {
            fail(prog, "--bucket-mb: this program trains in one process (built without "
                 "netc --mpi)");
            return -1;
        }
        o->bucket_bytes = (size_t)(mb * 1048576.0);
    }
    o->epochs = (int)epochs;
    o->batch = (int)batch;
    o->seed = (uint64_t)seed;
    o->log_every = (int)log_every;
    o->threads = (int)threads;
    o->gradcheck = (int)gradcheck;
    o->workers = (int)workers;
    o->max_steps = max_steps;
    o->jit_info |= o->jit_arch != NULL;
    if (o->resume && !o->checkpoint)
        o->checkpoint = o->resume;
    const char *alone = o->eval ? "--eval" : o->predict ? "--predict" : NULL;
    if (o->eval && o->predict) {
        fail(prog, "--eval and --predict: give one");
        return -1;
    }
    if (alone && (o->resume || o->checkpoint || o->gradcheck)) {
        fail(prog, "%s does not train: it takes no %s", alone,
             o->resume ? "--resume" : o->checkpoint ? "--checkpoint" : "--gradcheck");
        return -1;
    }
    if (o->output && !o->predict) {
        fail(prog, "--output is where --predict writes; there is no --predict");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------- data */

typedef struct Data {
    nrt_dataset train, valid, test;
    int has_train, has_valid, has_test;
    size_t skipped;          /* --skip-bad: images left out, */
    nrt_error first_skipped; /* the first of them */
    nrt_images *decoding;    /* the training images, decoded as the first
                                epoch runs (or NULL: all read) */
} Data;

static void data_free(Data *d)
{
    nrt_images_close(d->decoding); /* its threads write into train */
    if (d->has_train)
        nrt_dataset_free(&d->train);
    if (d->has_valid)
        nrt_dataset_free(&d->valid);
    if (d->has_test)
        nrt_dataset_free(&d->test);
}

static int is_holdout(const nrt_source *s)
{
    return s->kind && !strcmp(s->kind, "holdout");
}

static int is_images(const nrt_source *s)
{
    return s->kind && !strcmp(s->kind, "images");
}

/* One dataset from s: images through images.c (the model's transforms but
 * the flips, counting what --skip-bad leaves out), the rest through
 * data.c.  test: a cifar10 or mnist directory's test files.  stream: the
 * images are decoded as they are trained on (d->decoding).  paths (NULL:
 * not wanted): the image files read, or NULL for other data. */
static int read_set(const nrt_model *m, const Options *o, const nrt_source *s, int target_kind,
                    int test, int stream, Data *d, nrt_dataset *out, char ***paths,
                    nrt_error *err)
{
    if (paths)
        *paths = NULL;
    if (!is_images(s))
        return nrt_dataset_load(s, target_kind, m->in_size, m->n_out, test, out, err);
    nrt_images_opts io = {m->in_dim[0], m->in_dim[1], m->in_dim[2], &m->transforms,
                          o->workers, o->skip_bad};
    if (stream)
        return nrt_images_open(s, &io, target_kind, m->n_out, out, &d->decoding, err);
    size_t skipped;
    nrt_error first;
    if (nrt_images_load(s, &io, target_kind, m->n_out, out, &skipped, &first, paths, err))
        return -1;
    if (skipped && !d->skipped)
        d->first_skipped = first;
    d->skipped += skipped;
    return 0;
}

/* --skip-bad's count, at the end of the run. */
static void report_skipped(const char *prog, const Data *d)
{
    if (d->skipped)
        fprintf(stderr, "%s: warning: %zu image%s could not be read and %s left out; the "
                "first: %s\n", prog, d->skipped, d->skipped == 1 ? "" : "s",
                d->skipped == 1 ? "was" : "were", d->first_skipped.msg);
}

/* The validation or test set: the flag's path, read as the model's source
 * for it says (or as the training data), else the model's source: a file,
 * or a part of the training set held out. */
static int load_eval_set(const nrt_model *m, const Options *o, const nrt_source *model_src,
                         const char *flag_path,
                         const nrt_source *train_src, Data *d, uint64_t split_seed,
                         nrt_dataset *out, int *has, nrt_error *err)
{
    if (!flag_path && is_holdout(model_src)) {
        if (nrt_dataset_split(&d->train, model_src->fraction, split_seed, out, err))
            return -1;
        *has = 1;
        return 0;
    }
    if (!flag_path && !model_src->kind)
        return 0;
    nrt_source s = model_src->kind && !is_holdout(model_src) ? *model_src : *train_src;
    if (flag_path)
        s.path = flag_path;
    if (read_set(m, o, &s, m->target_kind, 1, 0, d, out, NULL, err))
        return -1;
    *has = 1;
    return 0;
}

/* The preprocessing that depends on the training data, given a set read
 * through read_set (which applied the source's scale and, for images, the
 * transforms in evaluation mode): training, validation, --eval and
 * --predict all go through here, and the C API through the same
 * nrt_stats_apply (session.c), so that they cannot drift apart. */
static void preprocess(const nrt_model *m, const nrt_stats *stats, nrt_dataset *d)
{
    if (m->train.standardize && stats->dim)
        nrt_stats_apply(stats, d->x, d->n);
}

/* The data the run needs: training data to train or check gradients (or
 * to hold a part of out), validation data to train, test data to train
 * or --eval.  Standardization uses the statistics that came with the
 * weights (--resume's checkpoint, --load's file) or else those of the rows
 * training trains on, the held-out parts split off as training splits
 * them, so that --eval and --predict of weights saved without statistics
 * compute the very values training used.  *stats: those, or dim 0. */
static int load_data(const nrt_model *m, const Options *o, nrt_stats *stats, Data *d,
                     nrt_error *err)
{
    *d = (Data){0};
    nrt_source src = m->train;
    src.path = o->data;
    if (!src.kind)
        src.kind = "csv";
    const int train = !o->eval && !o->predict && (o->max_steps != 0 || o->gradcheck > 0);
    const int compute = src.standardize && !stats->dim && !o->gradcheck &&
                        (train || o->eval || o->predict);
    if (!train && !o->eval && !compute)
        return 0;
    const int held_test = !o->test_data && is_holdout(&m->test);
    const int held_valid = !o->valid_data && is_holdout(&m->valid);
    if (train || compute || (o->eval && held_test)) {
        if (!src.path)
            return compute ? nrt_errorf(err, "the model standardizes its features with the "
                                        "statistics of its training data, and %s%s holds none: "
                                        "give the training data with --data PATH",
                                        o->load ? "" : "no --load file", o->load ? o->load : "")
                           : nrt_errorf(err, "no training data: the model names none; give "
                                        "--data PATH");
        /* A training set of images is decoded as the first epoch runs,
         * unless it must be whole first: --skip-bad's count, a part held
         * out, or no training. */
        const int stream = train && !o->gradcheck && !o->skip_bad && !held_test && !held_valid;
        if (read_set(m, o, &src, m->target_kind, 0, stream, d, &d->train, NULL, err))
            return -1;
        d->has_train = 1;
    }
    if (o->gradcheck > 0)
        return 0;
    if ((train || o->eval || (compute && held_test)) &&
        load_eval_set(m, o, &m->test, o->test_data, &src, d, o->seed, &d->test, &d->has_test, err))
        return -1;
    if (o->eval && !d->has_test)
        return nrt_errorf(err, "--eval: no test data: the model names none; give --test-data PATH");
    if ((train || (compute && held_valid)) &&
        load_eval_set(m, o, &m->valid, o->valid_data, &src, d,
                      nrt_stream_key(o->seed, NRT_STREAM_VALID), &d->valid, &d->has_valid, err))
        return -1;
    if (compute) {
        if (nrt_stats_compute(&d->train, stats, err))
            return -1;
        if (o->load && !o->quiet)
            fprintf(stderr, "%s: warning: %s holds no standardization statistics (weights "
                    "saved by PyTorch, or without training data); computed them from %s, as "
                    "training does\n", o->prog, o->load, src.path);
    }
    if (!train) { /* read for the test set's sake, or for the statistics only */
        if (d->has_train)
            nrt_dataset_free(&d->train);
        if (d->has_valid)
            nrt_dataset_free(&d->valid);
        if (d->has_test && !o->eval)
            nrt_dataset_free(&d->test);
        d->has_train = d->has_valid = 0;
        d->has_test &= o->eval;
    }
    if (d->has_train)
        preprocess(m, stats, &d->train);
    if (d->has_valid)
        preprocess(m, stats, &d->valid);
    if (d->has_test)
        preprocess(m, stats, &d->test);
    return 0;
}

/* ------------------------------------------------------------------ train */

/* Ctrl-C and SIGTERM are caught from the start of nrt_main to its end.
 * They stop the training loop between two steps, where the run's state is
 * whole and can be saved; during start-up, the program stops before the
 * work begins; after the last step (the test, --save) or during --eval or
 * --predict, what is under way is finished and the weights are saved, the
 * test left out.  The exit status says the signal in every case.  A
 * signal handler can only set a flag: the one piece of global state in
 * the runtime, as signals are global to a process.  The handler is reset
 * by the first signal, so a second Ctrl-C stops the program at once (a
 * file being written is then left as it was: saves are atomic).
 * SA_RESTART: a read or write interrupted by the signal goes on. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static const char *signal_name(void)
{
    return stop_signal == SIGINT ? "Ctrl-C" : "SIGTERM";
}

/* A signal the program was started with ignored (Ctrl-C for a job a
 * script put in the background, nohup's) stays ignored. */
static void catch_signals(void)
{
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = (int)(SA_RESETHAND | SA_RESTART);
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

typedef struct Run {
    const nrt_model *m;
    const Options *o;
    const char *prog;
    nrt_backend be;
    float *param;      /* the weights on the host: initial, loaded, saved */
    void *buffers;     /* and the model's buffers (running statistics) */
    float *opt_m, *opt_v; /* the optimizer's state on the host (checkpoints) */
    nrt_stats stats;   /* the standardization's, kept with the weights (dim 0: none) */
    Data data;
    nrt_loader *loader;  /* training batches made on threads (images: flips, the first
                            epoch's decoding), or NULL */
    int metrics;       /* --metrics's file, or -1 */
    nrt_tb *tb;
    nrt_sched_state sched;
    long long steps;
    int64_t start_epoch;   /* where training starts: 1, or a checkpoint's */
    uint64_t start_position;
    double resume_loss_sum; /* the checkpoint's epoch's loss sum so far */
    nrt_scaler resume_scaler; /* and its loss scaler (fp16) */
    int test_left_out;      /* for a signal after the last step */
    char *resumed_paths; /* the checkpoint's data paths, where o's may point */
    int64_t last_epoch;    /* the last epoch ended (TensorBoard's test step) */
    double lr;         /* the optimizer's now */
    nrt_comm comm;     /* the ranks of a data-parallel run (size 0: alone) */
    int world;         /* comm.size, or 1 */
    long long vote_at; /* several ranks: the step before which they next vote, */
    long long voted;   /* ... the step before which they last did, */
    double vote_time;  /* ... and when (0: never) */
    int world_failed;  /* an error every rank has: they end without an abort */
    nrt_error err;
} Run;

/* One JSON Lines record of --metrics, built whole and then written at
 * once (nrt_append_whole), so that a full disk cannot leave half of one.
 * JSON has no infinity or NaN: such a value is null, and a field beside
 * it says what it was ("valid_loss": null, "valid_loss_nonfinite": "inf"),
 * so that every line parses. */
typedef struct Record {
    char text[512]; /* room for the longest record, the epoch's */
    size_t n;
} Record;

static void rec_put(Record *rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void rec_put(Record *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(rc->text + rc->n, sizeof rc->text - rc->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        rc->n = rc->n + (size_t)k < sizeof rc->text ? rc->n + (size_t)k : sizeof rc->text - 1;
}

/* "key": v, to 9 digits: a float's exactly */
static void rec_num(Record *rc, const char *key, double v)
{
    rec_put(rc, "%s\"%s\": ", rc->n ? ", " : "{", key);
    if (isfinite(v))
        rec_put(rc, "%.9g", v);
    else
        rec_put(rc, "null, \"%s_nonfinite\": \"%s\"", key,
                isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static void rec_int(Record *rc, const char *key, long long v)
{
    rec_put(rc, "%s\"%s\": %lld", rc->n ? ", " : "{", key, v);
}

/* fp16: the loss scaler's state, "loss_scale" and "skipped_steps" (so far) */
static void rec_scaler(Record *rc, const nrt_scaler *s)
{
    rec_num(rc, "loss_scale", (double)s->scale);
    rec_int(rc, "skipped_steps", (long long)s->skipped);
}

/* The record, closed, to the metrics file; an error stops the run. */
static int write_record(Run *r, Record *rc)
{
    rec_put(rc, "}\n");
    return nrt_append_whole(r->metrics, rc->text, rc->n, r->o->metrics, &r->err);
}

/* secs as tqdm shows a time: 01:05, or 1:02:05 from an hour on. */
static void put_time(char *buf, size_t cap, double secs)
{
    long long t = secs > 0 && secs < 3.6e9 ? (long long)secs : 0;
    if (t >= 3600)
        snprintf(buf, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%02lld:%02lld", t / 60, t % 60);
}

/* The live line on a terminal, what tqdm shows: the epoch, how much of it
 * is done (samples of total, as a share and in steps), the time it has
 * taken and the time left at this pace, the pace, and the loss of the
 * samples shown:
 *   epoch 3/5  76%  1234/1625  00:12<00:04  812 samples/s  loss 4.382
 * seen of them in secs: those of this run (a resumed epoch began at
 * done - seen).  Cut to 79 columns, so that it never wraps on 80. */
static void progress(const Run *r, int64_t epoch, size_t done, size_t total, size_t seen,
                     double secs, double loss)
{
    const size_t b = (size_t)r->o->batch;
    const double rate = secs > 0 ? (double)seen / secs : 0;
    char took[24], left[24], line[256];
    put_time(took, sizeof took, secs);
    put_time(left, sizeof left, rate > 0 ? (double)(total - done) / rate : 0);
    snprintf(line, sizeof line,
             "  epoch %lld/%d %3d%%  %zu/%zu  %s<%s  %.0f samples/s  loss %.4g",
             (long long)epoch, r->o->epochs, (int)(100.0 * (double)done / (double)total),
             (done + b - 1) / b, (total + b - 1) / b, took, left, rate, loss);
    line[79] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
}

/* A loss (which: "loss", "validation loss") that is not a number stops
 * the run: what follows would be noise.  Returns the exit status, 1. */
static int bad_loss(Run *r, const char *which, double loss, const char *when, int64_t epoch)
{
    fail(r->prog, "the %s is %s %s %lld (epoch %lld); lower the learning rate (now %g)", which,
         isnan(loss) ? "NaN" : "infinite", when, r->steps, (long long)epoch, r->lr);
    return 1;
}

/* One scalar to TensorBoard, if there is a log. */
static int tb_scalar(Run *r, const char *tag, int64_t step, double value)
{
    return r->tb && !isnan(value) ? nrt_tb_scalar(r->tb, tag, step, value, &r->err) : 0;
}

/* The run's state at position of epoch, to --checkpoint's directory. */
static int save_checkpoint(Run *r, int64_t epoch, size_t position)
{
    const Options *o = r->o;
    nrt_checkpoint c = {.epoch = epoch, .position = position, .seed = o->seed,
                        .batch = o->batch, .ranks = r->world, .shuffle = o->shuffle,
                        .precision = o->precision,
                        .epochs = o->epochs,
                        .data = o->data, .valid_data = o->valid_data,
                        .test_data = o->test_data, .sched = r->sched,
                        .param = r->param, .m = r->opt_m, .v = r->opt_v,
                        .buffers = r->buffers, .stats = r->stats};
    return (r->be.get_scaler && r->be.get_scaler(r->be.ctx, &c.scaler, &r->err)) ||
                   r->be.get_params(r->be.ctx, r->param, r->buffers, &r->err) ||
                   r->be.get_state(r->be.ctx, r->opt_m, r->opt_v, &c.step, &c.loss_sum,
                                   &r->err) ||
                   nrt_checkpoint_save(o->checkpoint, r->m, &r->m->optim, &c, &r->err)
               ? -1
               : 0;
}

/* A signal stopped the run at position of epoch: saved, if asked to. */
static int interrupted(Run *r, int64_t epoch, size_t position)
{
    if (r->comm.rank != 0) /* rank 0 says it, and saves */
        return 128 + stop_signal;
    const char *name = signal_name();
    if (!r->o->quiet && isatty(2))
        fputs("\r\033[K", stderr);
    if (!r->o->checkpoint) {
        fprintf(stderr, "%s: stopped by %s in epoch %lld after %lld step%s; nothing saved "
                "(--checkpoint DIR keeps the run's state)\n", r->prog, name, (long long)epoch,
                r->steps, r->steps == 1 ? "" : "s");
        return 128 + stop_signal;
    }
    if (save_checkpoint(r, epoch, position))
        return -1;
    fprintf(stderr, "%s: stopped by %s in epoch %lld after %lld step%s; saved to %s/%s "
            "(--resume %s goes on)\n", r->prog, name, (long long)epoch, r->steps,
            r->steps == 1 ? "" : "s", r->o->checkpoint, NRT_CHECKPOINT_FILE, r->o->checkpoint);
    return 128 + stop_signal;
}

/* The end of an epoch: the validation set, the schedule, the epoch's line,
 * metrics and TensorBoard scalars, and the checkpoint.  full: the epoch
 * was not cut short (by --max-steps), so the schedule moves on.  Returns
 * 0, -1 (r->err) or an exit status (a validation loss not a number, after
 * its line and record). */
static int end_epoch(Run *r, int64_t epoch, double train_loss, size_t seen, double secs,
                     int full)
{
    const Options *o = r->o;
    nrt_backend *be = &r->be;
    const int cls = r->m->target_kind == NRT_TARGET_CLASS, valid = r->data.has_valid;
    double valid_loss = NAN, accuracy = NAN;
    if (valid && be->evaluate(be->ctx, NRT_EVAL_VALID, &valid_loss, &accuracy, &r->err))
        return -1;
    const double lr = r->lr;
    r->last_epoch = epoch;
    nrt_scaler sc;
    if (be->get_scaler && be->get_scaler(be->ctx, &sc, &r->err))
        return -1;
    if (!o->quiet) {
        printf("epoch %3lld/%d  train_loss %.6g", (long long)epoch, o->epochs, train_loss);
        if (valid) {
            printf("  valid_loss %.6g", valid_loss);
            if (cls)
                printf("  valid_accuracy %.2f%%", 100 * accuracy);
        }
        if (r->m->schedule.kind)
            printf("  lr %.4g", lr);
        if (be->get_scaler)
            printf("  loss_scale %g (%lld skipped)", (double)sc.scale, (long long)sc.skipped);
        printf("  %.2fs  %.0f samples/s%s\n", secs, (double)seen / secs,
               full ? "" : "  (stopped part way)");
        fflush(stdout);
    }
    if (r->metrics >= 0) {
        Record rc = {.n = 0};
        rec_int(&rc, "epoch", (long long)epoch);
        rec_num(&rc, "train_loss", train_loss);
        if (valid) {
            rec_num(&rc, "valid_loss", valid_loss);
            if (cls)
                rec_num(&rc, "valid_accuracy", accuracy);
        }
        rec_num(&rc, "lr", lr);
        if (be->get_scaler)
            rec_scaler(&rc, &sc);
        rec_num(&rc, "seconds", secs);
        rec_num(&rc, "samples_per_sec", (double)seen / secs);
        if (!full)
            rec_put(&rc, ", \"partial\": true");
        if (write_record(r, &rc))
            return -1;
    }
    if (valid && !isfinite(valid_loss))
        return bad_loss(r, "validation loss", valid_loss, "after step", epoch);
    /* an epoch cut short is not a point of the curves: a resumed run
     * logs the whole of it */
    if (!full)
        return 0;
    if (tb_scalar(r, "train/loss", epoch, train_loss) ||
        tb_scalar(r, "valid/loss", epoch, valid_loss) ||
        tb_scalar(r, "valid/accuracy", epoch, accuracy) || tb_scalar(r, "lr", epoch, lr) ||
        (be->get_scaler && (tb_scalar(r, "loss_scale", epoch, sc.scale) ||
                            tb_scalar(r, "skipped_steps", epoch, (double)sc.skipped))) ||
        (r->tb && nrt_tb_flush(r->tb, &r->err)))
        return -1;
    if (r->m->schedule.kind) {
        /* reduce_on_plateau watches the validation loss, or without a
         * validation set the training loss */
        double next = nrt_schedule_step(&r->sched, &r->m->schedule,
                                        valid ? valid_loss : train_loss);
        if (next != r->lr && be->set_lr(be->ctx, next, &r->err))
            return -1;
        r->lr = next;
    }
    return o->checkpoint ? save_checkpoint(r, epoch + 1, 0) : 0;
}

/* Several ranks vote on stopping about this often (seconds). */
#define VOTE_EVERY 0.05

/* Whether the run stops before its next step: a signal caught.  Ranks
 * decide it together (a signal may reach them at different steps), so
 * that they stop at the same one.  Their vote is a collective, so it is
 * not held before every step but every so many, about VOTE_EVERY's worth:
 * at each vote every rank also says how many steps that is at its own
 * pace (a whole number, so that every rank gets the same sum; at most 256,
 * in case the machine slows down), and the next vote comes after their
 * mean.  A signal is answered about as soon
 * either way, and small steps are not held back by a collective each.
 * -1 on an error. */
static int stopping(Run *r)
{
    if (r->world == 1)
        return stop_signal != 0;
    if (r->steps < r->vote_at)
        return 0;
    const double t = now(), since = t - r->vote_time;
    const double pace = (double)(r->steps - r->voted) / since; /* steps a second */
    double v[2] = {stop_signal != 0,
                   r->vote_time > 0 && since > 0 ? floor(fmin(fmax(pace * VOTE_EVERY, 1), 256))
                                                 : 1};
    if (r->comm.sum_doubles(r->comm.ctx, v, 2, &r->err))
        return -1;
    r->vote_time = t;
    r->voted = r->steps;
    r->vote_at = r->steps + (long long)(v[1] / r->world);
    if (v[0] > 0 && !stop_signal)
        stop_signal = SIGTERM; /* another rank's (mpirun sends SIGTERM) */
    return v[0] > 0;
}

/* The epochs: the order of the samples, the steps, the epoch's end.  The
 * loss of a step is read from the backend only when it is needed (a
 * logged step, the live progress line) unless reading it costs nothing
 * (the cpu): on a GPU a read waits for the step.  Returns 0, -1 (an error
 * in r->err) or an exit status (a bad loss, a signal). */
static int train(Run *r)
{
    const Options *o = r->o;
    nrt_backend *be = &r->be;
    nrt_error *err = &r->err;
    const uint64_t shuffle_key = nrt_stream_key(o->seed, NRT_STREAM_SHUFFLE);
    const nrt_dataset *d = &r->data.train;
    int live = !o->quiet && isatty(2);
    double t0 = now(), total_samples = 0;
    int epochs_done = 0;
    size_t start = r->start_position;

    for (int64_t epoch = r->start_epoch; epoch <= o->epochs; epoch++, start = 0) {
        if (o->max_steps >= 0 && r->steps >= o->max_steps)
            break;
        double te = now(); /* the epoch's seconds: the shuffle and the steps */
        nrt_order order;
        nrt_order_init(&order, shuffle_key, (uint64_t)epoch, d->n, o->shuffle);
        if (r->data.decoding && epoch == r->start_epoch && /* in the order trained on */
            nrt_images_start(r->data.decoding, &order, start, err))
            return -1;
        if (r->loader)
            nrt_loader_epoch(r->loader, &order, (uint64_t)epoch, start,
                             o->batch * r->world);
        else if (be->set_order(be->ctx, &order, start, err))
            return -1;
        double shown_sum = 0, last_shown = te;
        size_t seen = 0, shown = 0, s = start;
        /* a step's batch: --batch on each rank */
        const size_t batch = (size_t)o->batch * (size_t)r->world;
        for (; s < d->n; s += batch) {
            int stop = stopping(r);
            if (stop < 0)
                return -1;
            if (stop)
                return interrupted(r, epoch, s);
            if (o->max_steps >= 0 && r->steps >= o->max_steps)
                break;
            size_t n = d->n - s < batch ? d->n - s : batch;
            int logged = (r->metrics >= 0 || r->tb) && o->log_every &&
                         (r->steps + 1) % o->log_every == 0;
            int show = live && now() - last_shown > 0.1;
            int want = be->loss_free || logged || show;
            float loss;
            nrt_batch b;
            if (r->loader && nrt_loader_next(r->loader, &b, err))
                return -1;
            if (r->loader ? be->train_batch(be->ctx, &b, want ? &loss : NULL, err)
                          : be->step(be->ctx, s, (int)n, want ? &loss : NULL, err))
                return -1;
            r->steps++;
            seen += n;
            if (!want)
                continue;
            if (!isfinite(loss)) {
                if (live)
                    fputc('\n', stderr);
                return bad_loss(r, "loss", loss, "at step", epoch);
            }
            shown_sum += (double)loss * (double)n;
            shown += n;
            nrt_scaler sc;
            if (logged && be->get_scaler && be->get_scaler(be->ctx, &sc, err))
                return -1;
            if (logged && r->metrics >= 0) {
                Record rc = {.n = 0};
                rec_int(&rc, "step", r->steps);
                rec_num(&rc, "loss", (double)loss);
                if (be->get_scaler)
                    rec_scaler(&rc, &sc);
                if (write_record(r, &rc))
                    return -1;
            }
            if (logged && (tb_scalar(r, "train/step_loss", r->steps, loss) ||
                           (be->get_scaler && tb_scalar(r, "train/loss_scale", r->steps, sc.scale))))
                return -1;
            if (show) {
                progress(r, epoch, s + n, d->n, seen, now() - te, shown_sum / (double)shown);
                last_shown = now();
            }
        }
        const int full = s >= d->n;
        const size_t done = full ? d->n : s; /* samples of the epoch done */
        if (!full && o->checkpoint && save_checkpoint(r, epoch, s)) /* --max-steps */
            return -1;
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
        /* over the epoch's samples so far: a resumed epoch's loss sum
         * started from the checkpoint's, as if never broken */
        double train_loss = loss_sum / (double)done;
        if (!isfinite(train_loss))
            return bad_loss(r, "loss", train_loss, "by step", epoch);
        int e = end_epoch(r, epoch, train_loss, seen, secs, full);
        if (e)
            return e;
    }
    double secs = now() - t0;
    if (!o->quiet && epochs_done > 0)
        printf("trained %d epoch%s (%lld step%s) in %.2f s: %.0f samples/s\n", epochs_done,
               epochs_done == 1 ? "" : "s", r->steps, r->steps == 1 ? "" : "s", secs,
               total_samples / secs);
    if (!o->quiet && epochs_done > 0 && r->world > 1) { /* rank 0's, since the start */
        const double c = r->comm.seconds(r->comm.ctx);
        printf("communication: %.3f ms a step, %.0f%% of the training time (collectives over "
               "%s)\n", 1e3 * c / (double)(r->steps > 0 ? r->steps : 1), 100 * c / secs,
               r->m->dist->name);
    }
    return 0;
}

/* The test set, after training or for --eval: a line, a metrics record
 * and TensorBoard scalars at the last epoch. */
static int test(Run *r, int64_t epoch)
{
    double loss, accuracy;
    const int cls = r->m->target_kind == NRT_TARGET_CLASS;
    if (r->be.evaluate(r->be.ctx, NRT_EVAL_TEST, &loss, &accuracy, &r->err))
        return -1;
    if (!r->o->quiet) {
        printf("test_loss %.6g", loss);
        if (cls)
            printf("  test_accuracy %.2f%%", 100 * accuracy);
        printf("  (%zu samples)\n", r->data.test.n);
    }
    if (r->metrics >= 0) {
        Record rc = {.n = 0};
        rec_num(&rc, "test_loss", loss);
        if (cls)
            rec_num(&rc, "test_accuracy", accuracy);
        rec_int(&rc, "test_samples", (long long)r->data.test.n);
        if (write_record(r, &rc))
            return -1;
    }
    return tb_scalar(r, "test/loss", epoch, loss) || tb_scalar(r, "test/accuracy", epoch, accuracy)
               ? -1
               : 0;
}

/* A data path of a resumed run (*path, the flag's if given): the one the
 * run was started with (kept; "": the model's), which a flag must not
 * contradict. */
static int resume_path(const Options *o, const char *flag, const char **path, int given,
                       const char *kept, nrt_error *err)
{
    if (!given) {
        *path = *kept ? kept : *path;
        return 0;
    }
    if (*path && !strcmp(*path, kept))
        return 0;
    if (!*kept)
        return nrt_errorf(err, "%s: the run was started without %s; resume it without %s",
                          o->resume, flag, flag);
    return nrt_errorf(err, "%s: the run was started with %s '%s'; resume it without %s",
                      o->resume, flag, kept, flag);
}

/* --resume: the checkpoint's weights, optimizer state, counters and
 * schedule, read before the backend opens (its batch is the checkpoint's).
 * The run's seed, batch, order and data are the checkpoint's: a flag
 * saying otherwise is refused.  Its length is the checkpoint's too, unless
 * --epochs gives another: a finished run goes on for more epochs. */
static int read_checkpoint(Run *r, Options *o)
{
    nrt_checkpoint c = {.param = r->param, .m = r->opt_m, .v = r->opt_v, .buffers = r->buffers};
    nrt_error *err = &r->err;
    if (nrt_checkpoint_load(o->resume, r->m, &r->m->optim, &c, err))
        return -1;
    r->resumed_paths = c.text;
    r->stats = c.stats; /* this run's from its start (none if the model does not standardize) */
    if (resume_path(o, "--data", &o->data, o->given_data, c.data, err) ||
        resume_path(o, "--valid-data", &o->valid_data, o->valid_data != NULL, c.valid_data,
                    err) ||
        resume_path(o, "--test-data", &o->test_data, o->test_data != NULL, c.test_data, err))
        return -1;
    if (o->given_seed && o->seed != c.seed)
        return nrt_errorf(err, "%s: the run was seeded with %llu; resume it without --seed",
                          o->resume, (unsigned long long)c.seed);
    if (o->given_batch && o->batch != c.batch)
        return nrt_errorf(err, "%s: the run has batches of %lld; resume it without --batch",
                          o->resume, (long long)c.batch);
    if (c.ranks != r->world)
        return nrt_errorf(err, "%s: the run was on %d rank%s; resume it on %d (mpirun -np %d), "
                          "or start it anew with --load %s/%s", o->resume, c.ranks,
                          c.ranks == 1 ? "" : "s", c.ranks, c.ranks, o->resume,
                          NRT_CHECKPOINT_FILE);
    if (o->given_shuffle && o->shuffle != c.shuffle)
        return nrt_errorf(err, "%s: the run shuffles its epochs; resume it without --no-shuffle",
                          o->resume);
    if (o->given_precision && o->precision != c.precision)
        return nrt_errorf(err, "%s: the run is in %s; resume it without --precision", o->resume,
                          nrt_precision_name(c.precision));
    o->precision = c.precision;
    o->seed = c.seed;
    o->batch = (int)c.batch;
    o->shuffle = c.shuffle;
    if (!o->given_epochs)
        o->epochs = (int)c.epochs;
    r->sched = c.sched;
    r->lr = c.sched.lr;
    r->steps = (long long)c.step;
    r->start_epoch = c.epoch;
    r->start_position = c.position;
    r->resume_loss_sum = c.loss_sum;
    r->resume_scaler = c.scaler;
    return 0;
}

/* ----------------------------------------------------------------- predict */

/* The samples of --predict's INPUT: read as the training data is, but a
 * text file's header is told by its content, not by the model's header=:
 * the lines before the first that holds a number are a header (so a file
 * with a header line and one without both read whole).  A row holds the
 * features and the targets, which are ignored, or the features alone: the
 * number of columns tells which.  Each text sample keeps its line number,
 * which its prediction carries. */
static int load_input(const nrt_model *m, const Options *o, Data *data, nrt_dataset *d,
                      char ***paths, nrt_error *err)
{
    nrt_source s = m->train;
    s.path = o->predict;
    *paths = NULL;
    if (!s.kind)
        s.kind = "csv";
    if (is_images(&s))
        return read_set(m, o, &s, NRT_TARGET_NONE, 1, 0, data, d, paths, err);
    s.header = -1;
    s.lines = 1;
    nrt_error first;
    if (nrt_dataset_load(&s, m->target_kind, m->in_size, m->n_out, 1, d, &first) == 0)
        return 0;
    if (nrt_dataset_load(&s, 0, m->in_size, m->n_out, 1, d, err) == 0)
        return 0;
    *err = first;
    return -1;
}

/* s as a CSV field: double-quoted when it holds a comma, a quote or a line
 * break, its quotes doubled. */
static void put_csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* One CSV line a sample: first what it is in the input (for images the
 * file; for text its line number; else its number, from 1), then the
 * class and each class's probability (the softmax of the logits), or the
 * predicted values. */
static void write_predictions(FILE *f, const nrt_model *m, const float *out,
                              const nrt_dataset *d, char *const *paths)
{
    const int k = m->n_out, cls = m->target_kind == NRT_TARGET_CLASS;
    const size_t n = d->n;
    fputs(paths ? "path," : d->line ? "line," : "sample,", f);
    fputs(cls ? "class" : "value_0", f);
    for (int j = cls ? 0 : 1; j < k; j++)
        fprintf(f, cls ? ",p%d" : ",value_%d", j);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        const float *y = out + i * (size_t)k;
        if (paths) {
            put_csv_field(f, paths[i]);
            fputc(',', f);
        } else {
            fprintf(f, "%zu,", d->line ? d->line[i] : i + 1);
        }
        if (!cls) {
            for (int j = 0; j < k; j++)
                fprintf(f, "%s%.9g", j ? "," : "", (double)y[j]);
            fputc('\n', f);
            continue;
        }
        int best = 0;
        double sum = 0;
        for (int j = 1; j < k; j++)
            best = y[j] > y[best] ? j : best;
        for (int j = 0; j < k; j++)
            sum += exp((double)y[j] - (double)y[best]);
        fprintf(f, "%d", best);
        for (int j = 0; j < k; j++)
            fprintf(f, ",%.6g", exp((double)y[j] - (double)y[best]) / sum);
        fputc('\n', f);
    }
}

/* --predict: to --output through a temporary file renamed at the end, so
 * that a failure leaves no half-written file; or to stdout. */
static int predict(Run *r)
{
    const nrt_model *m = r->m;
    const char *path = r->o->output;
    nrt_dataset d;
    char **paths;
    if (load_input(m, r->o, &r->data, &d, &paths, &r->err))
        return -1;
    preprocess(m, &r->stats, &d);
    float *out = malloc(sizeof(float) * (d.n ? d.n : 1) * (size_t)m->n_out);
    nrt_atomic w = {0}; /* with path: the file, written whole or not at all */
    FILE *f = stdout;
    int rc = -1;
    if (!out) {
        nrt_errorf(&r->err, "out of memory");
        goto out;
    }
    if (r->be.predict(r->be.ctx, d.x, d.n, out, &r->err))
        goto out;
    if (path) {
        if (nrt_atomic_open(&w, path, &r->err))
            goto out;
        f = w.f;
    }
    write_predictions(f, m, out, &d, paths);
    if (path) {
        if (nrt_atomic_commit(&w, &r->err))
            goto out;
        if (!r->o->quiet)
            fprintf(stderr, "%s: %zu predictions written to %s\n", r->prog, d.n, path);
    } else if (fflush(stdout) != 0) {
        nrt_errorf(&r->err, "stdout: write error: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    nrt_atomic_abort(&w);
    free(out);
    for (size_t i = 0; paths && i < d.n; i++)
        free(paths[i]);
    free(paths);
    nrt_dataset_free(&d);
    return rc;
}

/* ---------------------------------------------------------- output paths */

/* Whether a file can be made in dir, for path: one is, and removed. */
static int probe_dir(const char *dir, const char *path, nrt_error *err)
{
    size_t n = strlen(dir) + 32;
    char *t = malloc(n);
    if (!t)
        return nrt_errorf(err, "out of memory");
    snprintf(t, n, "%s/.netc-check.XXXXXX", dir);
    int fd = mkstemp(t), e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(t);
    }
    free(t);
    return fd >= 0 ? 0 : nrt_errorf(err, "%s: cannot write: %s", path, strerror(e));
}

/* An output file: a new one can be made beside it (--save and -o write a
 * temporary there and rename it), or, written in place (--metrics), it
 * is there and writable. */
static int check_file(const char *path, int in_place, nrt_error *err)
{
    struct stat st;
    if (!in_place) {
        if (nrt_atomic_target(path, err))
            return -1;
    } else if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return nrt_errorf(err, "%s: cannot write: %s", path, strerror(EISDIR));
        return access(path, W_OK) == 0
                   ? 0
                   : nrt_errorf(err, "%s: cannot write: %s", path, strerror(errno));
    }
    const char *slash = strrchr(path, '/');
    if (!slash)
        return probe_dir(".", path, err);
    char *dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
    int rc = dir ? probe_dir(dir, path, err) : nrt_errorf(err, "out of memory");
    free(dir);
    return rc;
}

/* An output directory, made when first written to (mkdir -p): it, or the
 * nearest of its parents there, is a directory a file can be made in. */
static int check_dir(const char *dir, nrt_error *err)
{
    char *p = malloc(strlen(dir) + 2);
    if (!p)
        return nrt_errorf(err, "out of memory");
    strcpy(p, dir);
    struct stat st;
    int rc, e;
    while ((rc = stat(p, &st)) != 0 && (e = errno) == ENOENT && strcmp(p, ".")) {
        size_t n = strlen(p);
        while (n > 1 && p[n - 1] == '/') /* "a/b/" is "a/b" */
            p[--n] = '\0';
        char *slash = strrchr(p, '/');
        if (slash)
            slash[slash == p] = '\0'; /* "a/b" goes to "a", "/a" to "/" */
        else
            strcpy(p, ".");
    }
    if (rc != 0)
        rc = nrt_errorf(err, "%s: cannot write: %s", dir, strerror(e));
    else if (!S_ISDIR(st.st_mode) && !strcmp(p, dir))
        rc = nrt_errorf(err, "%s: not a directory", dir);
    else if (!S_ISDIR(st.st_mode))
        rc = nrt_errorf(err, "%s: %s is not a directory", dir, p);
    else
        rc = probe_dir(p, dir, err);
    free(p);
    return rc;
}

/* Every path the run will write, checked before the data is read and the
 * first step taken, so that a typo does not cost a run's time; nothing is
 * made (a file is, and removed at once). */
static int check_outputs(const Options *o, nrt_error *err)
{
    return (o->save && check_file(o->save, 0, err)) ||
                   (o->predict && o->output && check_file(o->output, 0, err)) ||
                   (o->metrics && !o->predict && check_file(o->metrics, 1, err)) ||
                   (o->checkpoint && check_dir(o->checkpoint, err)) ||
                   (o->logdir && !o->predict && check_dir(o->logdir, err))
               ? -1
               : 0;
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

/* OpenMP threads that wait for work by spinning (libgomp's default: about
 * 3 ms) are fast on an idle machine and disastrous on a busy one: a
 * spinning thread holds a core the thread it waits for needs, and a step
 * gets 5-50 times slower.  Threads that sleep at once pay a wake-up at
 * each parallel region instead (cifar10's step opens about 50; on two
 * threads of an AMD Zen 5 it took 12.5 ms sleeping at once, 11.2
 * spinning).  So they spin briefly, then sleep: OMP_WAIT_POLICY=passive
 * with GOMP_SPINCOUNT=1000, some microseconds, which keeps most of the
 * gain (11.5 ms) and loses 5-7 % beside a busy core (3000 spins lost 19 %,
 * 10000 45 %); where libgomp counts more of its threads than cores, the
 * passive policy spins not at all.  libgomp reads both variables once, in
 * its initialiser, before anything of the program runs (even
 * .preinit_array, before libc has set up the environment), so the program
 * sets them and executes itself again, unless the user chose a policy (a
 * GOMP_SPINCOUNT of the user's is kept).  By its file's path, not
 * /proc/self/exe: the kernel names a process after the file it executes,
 * and ps and pgrep must see the program's name, not "exe".  Not under a
 * debugger, which would stop at the exec: there, spinning does no harm. */
#if defined(_OPENMP) && defined(__linux__)
static int being_traced(void)
{
    char line[256];
    int tracer = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "TracerPid:", 10))
            tracer = atoi(line + 10);
    if (f)
        fclose(f);
    return tracer != 0;
}
#endif

static void bound_waits(char **argv)
{
#if defined(_OPENMP) && defined(__linux__)
    char self[4096];
    ssize_t n;
    if (getenv("OMP_WAIT_POLICY") || being_traced() ||
        (n = readlink("/proc/self/exe", self, sizeof self)) <= 0 || n == (ssize_t)sizeof self)
        return;
    self[n] = '\0'; /* "PATH (deleted)" if the file was removed: execv fails */
    const int spin = !getenv("GOMP_SPINCOUNT");
    if (setenv("OMP_WAIT_POLICY", "passive", 1) == 0 &&
        (!spin || setenv("GOMP_SPINCOUNT", "1000", 1) == 0))
        execv(self, argv);
    unsetenv("OMP_WAIT_POLICY"); /* no exec: go on as we are */
    if (spin)
        unsetenv("GOMP_SPINCOUNT");
#else
    (void)argv;
#endif
}

/* --gradcheck: the passes of the device the run selected against finite
 * differences and, on a GPU, against the cpu's; in bf16 and fp16, the
 * cpu's fp32 passes against finite differences and the run's against them
 * (gradcheck.c). */
static int run_gradcheck(Run *r, const nrt_run_config *rc)
{
    nrt_backend cpu = {0};
    nrt_run_config fp32 = *rc;
    fp32.precision = NRT_FP32;
    const int gpu = strcmp(r->be.name, "cpu") != 0;
    if ((gpu || rc->precision != NRT_FP32) && nrt_cpu_open(r->m, &fp32, &cpu, &r->err))
        return -1;
    int status = nrt_gradcheck(r->m, &r->be, rc->precision, cpu.close ? &cpu : NULL,
                               &r->data.train, r->o->gradcheck, r->param, r->buffers, &r->err);
    if (cpu.close)
        cpu.close(cpu.ctx);
    return status;
}

/* The metrics file and the TensorBoard log; a resumed run appends to the
 * metrics (its records go on from the checkpoint's). */
static int open_logs(Run *r)
{
    const Options *o = r->o;
    const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (o->resume ? 0 : O_TRUNC);
    if (o->metrics && (r->metrics = open(o->metrics, flags, 0666)) < 0)
        return nrt_errorf(&r->err, "%s: cannot write: %s", o->metrics, strerror(errno));
    return o->logdir ? nrt_tb_open(o->logdir, &r->tb, &r->err) : 0;
}

static int close_logs(Run *r)
{
    int rc = 0;
    if (r->metrics >= 0) {
        if (close(r->metrics) != 0)
            rc = nrt_errorf(&r->err, "%s: write error: %s", r->o->metrics, strerror(errno));
        r->metrics = -1;
    }
    nrt_error e;
    if (nrt_tb_close(r->tb, &e) && rc == 0) {
        r->err = e;
        rc = -1;
    }
    r->tb = NULL;
    return rc;
}

/* Training, from the start or a checkpoint, and the test set at the end.
 * Returns 0, -1 (r->err) or an exit status. */
static int run_training(Run *r)
{
    nrt_backend *be = &r->be;
    Data *d = &r->data;
    const Options *o = r->o;
    const nrt_model *m = r->m;
    if (r->start_position > 0 && r->start_position >= d->train.n)
        return nrt_errorf(&r->err, "%s/%s: metadata 'position' = %llu: past the end of the "
                          "training data (%zu samples)", o->resume, NRT_CHECKPOINT_FILE,
                          (unsigned long long)r->start_position, d->train.n);
    if ((m->transforms.flip_p > 0 || d->decoding) &&
        nrt_loader_open(&d->train, d->decoding, m->in_dim[0], m->in_dim[1], m->in_dim[2],
                        m->transforms.flip_p, nrt_stream_key(o->seed, NRT_STREAM_AUGMENT),
                        o->batch, o->workers, &r->loader, &r->err))
        return -1;
    if (r->loader && r->world > 1)
        nrt_loader_share(r->loader, r->comm.rank, r->world);
    /* with a loader, the training batches come from the host each step */
    if (be->set_data(be->ctx, r->loader ? NULL : &d->train, d->has_valid ? &d->valid : NULL,
                     d->has_test ? &d->test : NULL, &r->err))
        return -1;
    if (o->resume && be->set_scaler && be->set_scaler(be->ctx, &r->resume_scaler, &r->err))
        return -1;
    if (o->resume && be->set_state(be->ctx, r->opt_m, r->opt_v, (uint64_t)r->steps,
                                      r->resume_loss_sum, &r->err))
        return -1;
    if (!o->quiet) {
        printf("model %s: %zu parameters; %zu training samples", m->name,
               m->param_count, d->train.n);
        if (d->has_valid)
            printf(", %zu validation", d->valid.n);
        if (d->has_test)
            printf(", %zu test", d->test.n);
        printf("\n");
        if (be->products[0])
            printf("precision %s: products as %s\n", nrt_precision_name(o->precision),
                   be->products);
        if (o->resume)
            printf("resuming from %s: epoch %lld, sample %llu of %zu, step %lld\n", o->resume,
                   (long long)r->start_epoch, (unsigned long long)r->start_position, d->train.n,
                   r->steps);
    }
    int t = train(r);
    if (t)
        return t;
    /* a signal after the last step: the test is left out, not the save */
    int stop = stopping(r);
    if (stop < 0)
        return -1;
    r->test_left_out = d->has_test && stop;
    return d->has_test && !stop ? test(r, r->last_epoch) : 0;
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t fnv_set(uint64_t h, const nrt_dataset *d)
{
    h = fnv(h, &d->n, sizeof d->n);
    h = fnv(h, &d->dim, sizeof d->dim);
    if (d->x)
        h = fnv(h, d->x, sizeof(float) * d->n * d->dim);
    if (d->label)
        h = fnv(h, d->label, sizeof(int32_t) * d->n);
    if (d->y)
        h = fnv(h, d->y, sizeof(float) * d->n * d->ydim);
    return h;
}

/* Several ranks: that every rank runs the same program, model, data and
 * flags (a hash of them compared with rank 0's), then rank 0's weights on
 * every rank.  A rank that differs is named, by every rank. */
static int join_world(Run *r)
{
    const Options *o = r->o;
    const nrt_model *m = r->m;
    const Data *d = &r->data;
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, m->name, strlen(m->name));
    const int64_t run[] = {m->abi, (int64_t)m->param_count, (int64_t)m->in_size, o->batch,
                           (int64_t)o->seed, o->epochs, o->shuffle, o->max_steps, o->eval,
                           d->has_valid, d->has_test};
    h = fnv(h, run, sizeof run);
    h = fnv(h, &r->lr, sizeof r->lr);
    h = fnv_set(h, &d->train);
    if (d->has_valid)
        h = fnv_set(h, &d->valid);
    if (d->has_test)
        h = fnv_set(h, &d->test);
    /* rank 0's hash to all, then whose differs */
    uint64_t h0 = h;
    char who[160];
    int same = r->comm.broadcast(r->comm.ctx, &h0, sizeof h0, &r->err)
                   ? -1
                   : nrt_comm_agree(&r->comm, h == h0, who, sizeof who, &r->err);
    if (same < 0)
        return -1;
    if (!same) {
        r->world_failed = 1; /* every rank knows: no need to abort */
        return nrt_errorf(&r->err, "%s differ%s from rank 0 in the program, the model, the data "
                          "or the flags: every rank must run the same", who,
                          strchr(who, ',') ? "" : "s");
    }
    return r->comm.broadcast(r->comm.ctx, r->param, sizeof(float) * m->param_count, &r->err) ||
                   (m->buffer_bytes &&
                    r->comm.broadcast(r->comm.ctx, r->buffers, m->buffer_bytes, &r->err))
               ? -1
               : 0;
}

/* A signal caught during start-up: the work is not begun.  Returns the
 * exit status. */
static int stopped_early(const char *prog)
{
    fprintf(stderr, "%s: stopped by %s while starting; nothing done\n", prog, signal_name());
    return 128 + stop_signal;
}

/* A signal caught after the last step, or during --eval or --predict:
 * what was under way is done, and what was to be saved saved.  Returns the
 * exit status. */
static int stopped_late(const Run *r)
{
    const Options *o = r->o;
    fprintf(stderr, "%s: stopped by %s after %s%s%s%s\n", r->prog, signal_name(),
            o->eval ? "the evaluation" : o->predict ? "the predictions" : "the last step",
            r->test_left_out ? "; the test left out" : "", o->save ? "; weights saved to " : "",
            o->save ? o->save : "");
    return 128 + stop_signal;
}

int nrt_main(const nrt_model *m, int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : m->name;
    if (argc > 0)
        bound_waits(argv);
    catch_signals();
    if (m->abi != NETRT_ABI) {
        fail(prog, "compiled for netrt ABI %d, linked with ABI %d", m->abi, NETRT_ABI);
        return 1;
    }
    if (!nrt_optim_find(m->optim.kind)) {
        fail(prog, "optimizer kind %d: netrt %s has no such optimizer; rebuild with its netc",
             m->optim.kind, NETRT_VERSION);
        return 1;
    }
    if (m->loss.kind && !nrt_loss_name(m->loss.kind)) {
        fail(prog, "loss kind %d: netrt %s has no such loss; rebuild with its netc",
             m->loss.kind, NETRT_VERSION);
        return 1;
    }
    if (!nrt_schedule_name(m->schedule.kind)) {
        fail(prog, "schedule kind %d: netrt %s has no such schedule; rebuild with its netc",
             m->schedule.kind, NETRT_VERSION);
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

    Run r = {.m = m, .o = &o, .prog = prog, .start_epoch = 1, .metrics = -1};
    nrt_error *err = &r.err;
    int status = 1;
    if (o.list_devices || o.jit_info) {
        if (o.list_devices ? list_devices(m, err) : jit_info(m, &o, err))
            goto fail;
        return 0;
    }
    int dev_index;
    if (nrt_device_parse(o.device, &dev_index, err) < 0)
        goto fail;
    char rank_prog[256];
    if (m->dist && m->dist->open(&r.comm, err) < 0)
        goto fail;
    r.world = r.comm.size > 1 ? r.comm.size : 1;
    if (r.world > 1) {
        /* messages name the rank; rank 0 alone writes and prints */
        snprintf(rank_prog, sizeof rank_prog, "%.200s (rank %d of %d)", prog, r.comm.rank,
                 r.world);
        r.prog = prog = rank_prog;
        if (o.gradcheck) {
            nrt_errorf(err, "--gradcheck runs in one process, not in a run of several ranks");
            r.world_failed = 1;
            goto fail;
        }
        if (r.comm.rank != 0) {
            if (o.predict) { /* rank 0's work alone */
                status = 0;
                goto done;
            }
            o.quiet = 1;
            o.metrics = o.logdir = o.save = o.checkpoint = NULL;
        }
    }
    const size_t np = m->param_count ? m->param_count : 1;
    const int slots = nrt_optim_slots(&m->optim);
    r.param = calloc(np, sizeof(float));
    r.buffers = calloc(m->buffer_bytes ? m->buffer_bytes : 1, 1);
    r.opt_m = slots > 0 ? calloc(np, sizeof(float)) : NULL;
    r.opt_v = slots > 1 ? calloc(np, sizeof(float)) : NULL;
    if (!r.param || !r.buffers || (slots > 0 && !r.opt_m) || (slots > 1 && !r.opt_v)) {
        nrt_errorf(err, "out of memory");
        goto fail;
    }
    nrt_schedule_init(&r.sched, o.lr >= 0 ? o.lr : m->optim.lr);
    r.lr = r.sched.lr;
    if (o.resume && read_checkpoint(&r, &o))
        goto fail;
    if (!o.gradcheck && check_outputs(&o, err))
        goto fail;
    if (!o.resume && o.load && m->train.standardize &&
        nrt_weights_stats(o.load, m->in_size, &r.stats, err))
        goto fail;
    if (load_data(m, &o, &r.stats, &r.data, err))
        goto fail;
    if (stop_signal) {
        status = stopped_early(prog);
        goto done;
    }
    if (!o.resume) {
        nrt_rng init;
        nrt_rng_seed(&init, nrt_stream_key(o.seed, NRT_STREAM_INIT));
        nrt_init_params(m->params, m->n_params, r.param, &init);
        nrt_init_buffers(m->buffers, m->n_buffers, r.buffers);
        if (o.load && nrt_weights_load(m, r.param, r.buffers, o.load, err))
            goto fail;
    } else if (o.load) {
        nrt_errorf(err, "--resume and --load: the checkpoint holds the weights; give one");
        goto fail;
    }
    if (r.world > 1 && join_world(&r))
        goto fail;
    /* --gradcheck's batch is its samples, which the training set may
     * have fewer of */
    int cap = o.batch;
    if (o.gradcheck > 0)
        cap = (size_t)o.gradcheck < r.data.train.n ? o.gradcheck : (int)r.data.train.n;
    nrt_run_config rc = {.cap = cap,
                         /* (each rank's masks its own) */
                         .dropout_key = nrt_stream_key(o.seed, NRT_STREAM_DROPOUT) +
                                        (uint64_t)(r.world > 1 ? r.comm.rank : 0),
                         .optim = m->optim,
                         .comm = r.world > 1 ? &r.comm : NULL,
                         .bucket_bytes = o.bucket_bytes,
                         .precision = o.precision,
                         .init_scale = o.init_scale};
    rc.optim.lr = r.lr;
    char note[256];
    int opened = nrt_backend_open(m, o.device, &rc, &r.be, note, sizeof note, err);
    if (opened) {
        r.world_failed = opened == NRT_ALL_RANKS;
        goto fail;
    }
    if (note[0] && !o.quiet && !o.predict)
        printf("device: %s\n", note);
    if (r.world > 1 && !o.quiet) {
        printf("world: %d ranks on %d host%s (%s), %s%s%s; batch %d a rank, %lld in all",
               r.world, r.comm.hosts, r.comm.hosts == 1 ? "" : "s", m->dist->name,
               strcmp(r.be.name, "cpu") ? "a GPU each (rank 0's: " : "each on ", r.be.name,
               strcmp(r.be.name, "cpu") ? ")" : "", o.batch, (long long)o.batch * r.world);
        if (r.be.buckets > 0)
            printf("; gradients summed in %d bucket%s as backward runs", r.be.buckets,
                   r.be.buckets == 1 ? "" : "s");
        putchar('\n');
    }
    if (r.be.set_params(r.be.ctx, r.param, r.buffers, err))
        goto fail;
    if (o.gradcheck > 0) {
        status = run_gradcheck(&r, &rc);
        if (status < 0)
            goto fail;
        goto done;
    }
    if (stop_signal) {
        status = stopped_early(prog);
        goto done;
    }
    if (o.predict) {
        if (predict(&r))
            goto fail;
        status = stop_signal ? stopped_late(&r) : 0;
        goto done;
    }
    if (open_logs(&r))
        goto fail;
    if (o.eval) {
        if (r.be.set_data(r.be.ctx, NULL, NULL, &r.data.test, err) || test(&r, 0))
            goto fail;
    } else if (o.max_steps != 0) {
        int t = run_training(&r);
        if (t < 0)
            goto fail;
        if (t > 0) {
            status = t;
            goto done;
        }
    }
    if (o.save && (r.be.get_params(r.be.ctx, r.param, r.buffers, err) ||
                   nrt_weights_save(m, r.param, r.buffers, &r.stats, o.save, err)))
        goto fail;
    if (close_logs(&r))
        goto fail;
    size_t peak = r.be.peak_memory(r.be.ctx);
    if (peak && !o.quiet)
        printf("peak device memory: %.1f MiB\n", (double)peak / 1048576);
    status = stop_signal ? stopped_late(&r) : 0;
    goto done;
fail:
    if (!r.world_failed || r.comm.rank == 0) /* an error all ranks have: rank 0 says it */
        fail(prog, "%s", err->msg);
    /* a rank that fails alone would leave the others waiting */
    if (r.world > 1 && !r.world_failed) {
        fflush(NULL);
        r.comm.abort(r.comm.ctx, 1);
    }
done:
    close_logs(&r); /* after an error: what it says is not news */
    if (r.be.close)
        r.be.close(r.be.ctx);
    free(r.param);
    free(r.buffers);
    free(r.opt_m);
    free(r.opt_v);
    free(r.resumed_paths);
    nrt_stats_free(&r.stats);
    nrt_loader_close(r.loader);
    report_skipped(prog, &r.data);
    data_free(&r.data);
    if (r.comm.close)
        r.comm.close(r.comm.ctx);
    return status;
}
