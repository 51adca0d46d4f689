/*
 * netrt.h — the netc runtime, the slim C library every generated training
 * program links.
 *
 * A program that netc generates holds only what is specific to its model:
 * the shapes, the parameter table, one forward and one backward function per
 * layer.  Everything else — flags, datasets, shuffling, batching, the
 * training loop, optimizers, metrics, safetensors, the numeric kernels — is
 * here, written once and tested once.
 *
 * Conventions a reader must know:
 *  - Tensors are float32, row-major, batch first: a batch of images is
 *    [N, C, H, W] and lies contiguous in memory.
 *  - Functions that can fail return 0 on success and -1 on failure, with a
 *    one-line message in an nrt_error the caller owns.  Nothing here prints
 *    an error by itself and nothing calls exit(), except nrt_main.
 *  - There is no global mutable state: a run's state is an nrt_net, a
 *    dataset's an nrt_dataset, and each has its own free function.
 *
 * The file is split in sections, one per source file of runtime/.
 */
#ifndef NETRT_H
#define NETRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "losses.h"
#include "lowp.h"
#include "optimizers.h"
#include "philox.h"

#define NETRT_VERSION "0.1.0"
/* Bumped whenever the interface between generated code and this library
 * changes; generated code refuses to compile against another one. */
#define NETRT_ABI 23

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- error.c */

typedef struct nrt_error {
    char msg[512];
} nrt_error;

/* Formats a message into e (if e is not NULL) and returns -1, so that
 * `return nrt_errorf(err, "...", ...);` reads naturally. */
int nrt_errorf(nrt_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ rng.c */

/* xoshiro256** seeded through splitmix64: fast, small, and the same stream
 * on every platform, so one seed gives bit-identical runs. */
typedef struct nrt_rng {
    uint64_t s[4];
} nrt_rng;

void nrt_rng_seed(nrt_rng *r, uint64_t seed);
uint64_t nrt_rng_next(nrt_rng *r);
uint32_t nrt_rng_below(nrt_rng *r, uint32_t n); /* uniform in [0, n) */
double nrt_rng_uniform(nrt_rng *r);             /* uniform in [0, 1) */
double nrt_rng_normal(nrt_rng *r);              /* standard normal */
/* Fisher–Yates shuffle of idx[0..n). */
void nrt_shuffle(nrt_rng *r, uint32_t *idx, size_t n);
/* The order of an epoch's n samples (philox.h): a permutation keyed by
 * key and the epoch if shuffle, else file order.  n < 2^32. */
void nrt_order_init(nrt_order *o, uint64_t key, uint64_t epoch, size_t n, int shuffle);
/* out[k] = nrt_order_at(o, first + k) for k < count (first + count <= n):
 * the same samples, many Feistel passes at once in vector registers and
 * no branch to mispredict, several times faster than one at a time. */
void nrt_order_fill(const nrt_order *o, size_t first, size_t count, uint32_t *out);

/* A run's random streams each have a key of their own derived from the
 * seed, so that changing one (say, no shuffling) leaves the others be. */
enum nrt_stream {
    NRT_STREAM_INIT = 1, NRT_STREAM_SHUFFLE = 2, NRT_STREAM_DROPOUT = 3, NRT_STREAM_VALID = 4,
    NRT_STREAM_AUGMENT = 5
};
uint64_t nrt_stream_key(uint64_t seed, enum nrt_stream stream);

/* ----------------------------------------------------------------- data.c */

enum nrt_target_kind {
    NRT_TARGET_NONE = 0,  /* features alone (text data to predict from) */
    NRT_TARGET_CLASS = 1, /* one integer label in [0, classes) per sample */
    NRT_TARGET_VALUE = 2  /* ydim real values per sample */
};

/* Where a dataset comes from, as the model file or the flags say. */
typedef struct nrt_source {
    const char *kind;  /* "csv" (comma separated), "table" (whitespace
                          separated), "cifar10" (binary batches), "mnist"
                          (IDX files), "images" (a list of image files,
                          images.c), or "holdout" (a part of the training
                          set) */
    const char *path;  /* file, or for cifar10 and mnist a file or a
                          directory */
    int label;         /* column of the (first) target value; negative
                          counts from the end: -1 is the last column */
    int header;        /* lines to skip at the top of a text file; -1:
                          those before the first that holds a number (a
                          header, if there is one: --predict's input) */
    float scale;       /* features are multiplied by this (1 = unchanged) */
    int standardize;   /* 1: features scaled to zero mean, unit variance
                          with the training set's statistics */
    double fraction;   /* holdout: the part of the training set */
    const char *root;  /* images: the directory relative paths start
                          from (NULL: the list's own directory) */
    int lines;         /* text: keep each sample's line number (.line) */
} nrt_source;

/* A whole dataset in memory. */
typedef struct nrt_dataset {
    size_t n;      /* samples */
    size_t dim;    /* features per sample (floats) */
    float *x;      /* n * dim features */
    int32_t *label; /* n class labels (NRT_TARGET_CLASS), else NULL */
    float *y;      /* n * ydim values (NRT_TARGET_VALUE), else NULL */
    size_t ydim;
    size_t *line;  /* n line numbers in the file, from 1 (text sources read
                      with .lines), else NULL */
} nrt_dataset;

/* Reads a dataset.  dim is the number of features the model expects per
 * sample; for class targets, ncls is the number of classes (a label outside
 * [0, ncls) is an error); for value targets ncls is the number of target
 * values per sample; NRT_TARGET_NONE reads text rows of features alone.
 * test: for a cifar10 or mnist directory, read the test files
 * (test_batch.bin, t10k-*) instead of the training ones.  mnist's path is
 * a directory or the images file, whose labels file is the path with its
 * last "images" and "idx3" made "labels" and "idx1"; .gz is not read.
 * Errors name the file and the line (text), the record or the sample
 * (binary): "data/x.csv:17: expected 14 columns, found 13". */
int nrt_dataset_load(const nrt_source *src, int target_kind, size_t dim,
                     int ncls, int test, nrt_dataset *out, nrt_error *err);
void nrt_dataset_free(nrt_dataset *d);

/* Reads the whole file at path into a NUL-terminated buffer the caller
 * frees; its length (without the NUL) in *len. */
int nrt_read_file(const char *path, char **buf, size_t *len, nrt_error *err);
/* dir/name in a new string (NULL: out of memory). */
char *nrt_path_join(const char *dir, const char *name);

/* Moves a fraction of d's samples, chosen with a generator seeded by seed,
 * into held_out; d keeps the rest in their original order. */
int nrt_dataset_split(nrt_dataset *d, double fraction, uint64_t seed,
                      nrt_dataset *held_out, nrt_error *err);

/* Feature statistics of d (mean and standard deviation of each feature,
 * over all samples), and their application to a dataset. */
void nrt_dataset_stats(const nrt_dataset *d, float *mean, float *std);
void nrt_dataset_standardize(nrt_dataset *d, const float *mean,
                             const float *std);

/* The standardization of a model whose training source says
 * standardize=true, the one preprocessing step that depends on the data
 * rather than on the model file: feature j becomes (x - mean[j]) / std[j],
 * a std below 1e-12 (a constant feature) counting as 1.  mean and std are
 * the population statistics (ddof=0) of the rows training trains on (the
 * held-out parts left out).  They belong with the weights: saved in a
 * safetensors file's metadata (nrt_weights_save, checkpoints), read back
 * with them, and applied by training, --eval, --predict and the C API
 * alike through nrt_stats_apply. */
typedef struct nrt_stats {
    size_t dim;  /* 0: none */
    float *mean; /* dim each, in one allocation with mean */
    float *std;
} nrt_stats;
/* s = the statistics of d's features (allocated; nrt_stats_free). */
int nrt_stats_compute(const nrt_dataset *d, nrt_stats *s, nrt_error *err);
/* s = a copy of dim values each of mean and std, which must be finite (std
 * not negative); what is wrong is said of `what` (a file's name). */
int nrt_stats_set(nrt_stats *s, size_t dim, const float *mean, const float *std,
                  const char *what, nrt_error *err);
/* Standardizes the n rows of s->dim features at x, in place. */
void nrt_stats_apply(const nrt_stats *s, float *x, size_t n);
void nrt_stats_free(nrt_stats *s);

/* Copies the samples idx[0..n) of d into x (n * dim floats) and label or y
 * (whichever d has). */
void nrt_dataset_gather(const nrt_dataset *d, const uint32_t *idx, size_t n,
                        float *x, int32_t *label, float *y);

/* --------------------------------------------------------------- images.c */

/* The transforms a model declares for its image data, torchvision's, done
 * in this order: resize and flip work on the decoded 8-bit pixels (flip
 * commutes with the others and is done last, as the batch is assembled),
 * to_tensor and normalize on the floats. */
#define NRT_MAX_CHANNELS 3
typedef struct nrt_transforms {
    int resize_h, resize_w;  /* Resize((h, w)): PIL's bilinear filter,
                                antialiased; 0: the images must already
                                be the input's size */
    double flip_p;           /* RandomHorizontalFlip(p), training only;
                                0: none */
    int to_tensor;           /* ToTensor: pixel / 255 (else 0 .. 255) */
    int normalize;           /* Normalize: (x - mean[c]) / std[c] */
    float mean[NRT_MAX_CHANNELS], std[NRT_MAX_CHANNELS];
} nrt_transforms;

/* How nrt_images_load reads a list. */
typedef struct nrt_images_opts {
    int channels, height, width; /* the model's input [C, H, W]; C is 1
                                    (PIL's "L") or 3 ("RGB") */
    const nrt_transforms *tf;
    int workers;                 /* decoding threads (at least 1) */
    int skip_bad;                /* 1: a bad image is left out and counted */
} nrt_images_opts;

/* Reads an image dataset: src->path is a list, a CSV file of `path,label`
 * rows (a first row whose label is not a whole number is a header; for
 * NRT_TARGET_NONE, --predict's input, the label may be left out), a
 * folder of class folders (torchvision's ImageFolder), or a single image.  Relative paths start from src->root, else from the
 * list's directory.  Each image (PNG, JPEG, BMP, GIF, TGA, PNM: what
 * stb_image reads) is decoded, converted to the model's channels as PIL's
 * convert() does, resized, and made floats by to_tensor and normalize,
 * into out->x [n, C, H, W]; flips are the loader's.  A file that cannot be
 * read is an error "LIST:LINE: PATH: why", or with opts->skip_bad is left
 * out: *skipped counts those and *first_skipped holds the first one's
 * message.  paths (NULL: not wanted) gets the files of the samples read,
 * out->n of them, as joined with the root: the caller frees each and the
 * array.  Fails with a message saying so in a runtime built without
 * stb_image. */
int nrt_images_load(const nrt_source *src, const nrt_images_opts *opts, int target_kind,
                    int ncls, nrt_dataset *out, size_t *skipped, nrt_error *first_skipped,
                    char ***paths, nrt_error *err);
/* Whether the runtime was built with stb_image. */
int nrt_images_available(void);

/* The same list decoded while training runs: nrt_images_open parses it
 * and gives the dataset, its images not yet decoded (labels there, x
 * allocated), and a handle; nrt_images_start starts opts->workers threads
 * decoding in the order the first epoch takes the samples (order from
 * position start, then the rest; NULL: the list's order); a reader of
 * sample i first waits for it with nrt_images_wait, which fails, with
 * "LIST:LINE: PATH: why", once an image could not be read (the threads
 * then stop).  nrt_images_close stops and joins the threads and frees the
 * handle, not the dataset.  No skip_bad: the samples are known before
 * they are read. */
typedef struct nrt_images nrt_images;
int nrt_images_open(const nrt_source *src, const nrt_images_opts *opts, int target_kind,
                    int ncls, nrt_dataset *out, nrt_images **handle, nrt_error *err);
int nrt_images_start(nrt_images *h, const nrt_order *order, size_t start, nrt_error *err);
int nrt_images_wait(nrt_images *h, size_t i, nrt_error *err);
void nrt_images_close(nrt_images *h);

/* ------------------------------------------------------------- loader.c */

/* Training batches assembled on worker threads ahead of the step that
 * takes them: the epoch's samples, in its order, from a dataset in memory,
 * each image flipped left to right with probability p (random
 * augmentation).  Whether sample i is flipped in epoch e is a function of
 * (key, e, i) alone (philox.h's nrt_flip), so batches do not depend on
 * the number of workers or on when they run, and a run resumed mid-epoch
 * sees the flips an unbroken one would. */
typedef struct nrt_loader nrt_loader;

/* d's samples are images [c, h, w]; batches of up to cap samples.  With
 * images (else NULL), d is being decoded by it: each sample is waited for
 * before it is read. */
int nrt_loader_open(const nrt_dataset *d, nrt_images *images, int c, int h, int w,
                    double flip_p, uint64_t key, int cap, int workers, nrt_loader **out,
                    nrt_error *err);
/* With several ranks (data parallel), the loader's batches are rank's
 * share of each (nrt_share), their total the whole batch's size; by
 * default rank 0 of 1. */
void nrt_loader_share(nrt_loader *l, int rank, int ranks);
/* Starts an epoch (abandoning any under way): batches of `batch`
 * samples, the first at position start of order. */
void nrt_loader_epoch(nrt_loader *l, const nrt_order *order, uint64_t epoch, size_t start,
                      int batch);
/* The epoch's next batch, waiting for it if the workers are behind; it is
 * the caller's until the next call.  0, or -1 with the reason in err: an
 * image that could not be decoded, or past the epoch's end. */
struct nrt_batch;
int nrt_loader_next(nrt_loader *l, struct nrt_batch *b, nrt_error *err);
/* Stops the workers and frees l (NULL: nothing). */
void nrt_loader_close(nrt_loader *l);

/* ---------------------------------------------------------- safetensors.c */

/* The dtypes netc reads and writes: F32 (parameters, running statistics)
 * and I64 (a batchnorm's num_batches_tracked). */
enum nrt_dtype { NRT_F32 = 0, NRT_I64 = 1 };

/* One tensor of a safetensors file. */
typedef struct nrt_tensor {
    const char *name;
    int rank;
    int64_t dim[4];
    union {
        const float *data;   /* dtype NRT_F32 */
        const int64_t *i64;  /* dtype NRT_I64 */
    };
    int dtype;               /* enum nrt_dtype; 0 (F32) when left out */
} nrt_tensor;

/* Writes the tensors to path atomically: to a temporary file in the same
 * directory, then rename().  A failure leaves no file behind.  The header
 * lists the tensors in the order given, with "__metadata__" holding the
 * key/value pairs meta[0..2*nmeta) (may be NULL). */
int nrt_safetensors_save(const char *path, const nrt_tensor *t, int n,
                         const char *const *meta, int nmeta, nrt_error *err);

/* An opened safetensors file: the header parsed, the data in memory. */
typedef struct nrt_st_file nrt_st_file;

int nrt_safetensors_open(const char *path, nrt_st_file **out, nrt_error *err);
/* Finds a tensor by name; returns NULL if absent.  Only F32 and I64
 * tensors are returned (t->dtype says which); *dtype receives the dtype
 * string of whatever was found. */
const nrt_tensor *nrt_safetensors_find(const nrt_st_file *f, const char *name,
                                       const char **dtype);
/* Whether the NUL-terminated s is valid UTF-8 (no overlong forms, no
 * surrogates), as JSON and protobuf strings must be. */
int nrt_utf8_valid(const char *s);
/* The value of a key of the file's __metadata__, or NULL. */
const char *nrt_safetensors_meta(const nrt_st_file *f, const char *key);
int nrt_safetensors_count(const nrt_st_file *f);
const char *nrt_safetensors_name(const nrt_st_file *f, int i);
void nrt_safetensors_close(nrt_st_file *f);

/* A model's flat parameters and flat buffers (its state_dict) from and to
 * a safetensors file, tensor by tensor with PyTorch's names and in its
 * state_dict's order; a missing, extra, misshapen or mistyped tensor, or
 * one holding a NaN or an infinity, is an error naming it.  buffers may be
 * NULL for a model without any.  (Defined with the model's types, below.) */
struct nrt_model;
int nrt_weights_load(const struct nrt_model *m, float *param, void *buffers, const char *path,
                     nrt_error *err);
int nrt_weights_save(const struct nrt_model *m, const float *param, const void *buffers,
                     const nrt_stats *stats, const char *path, nrt_error *err);
/* The standardization statistics in a weights file's metadata, keys
 * "standardize_mean" and "standardize_std", each a JSON array of dim
 * float32 values to 9 significant digits (which read back exactly):
 * nrt_stats_meta makes the two texts (allocated, in text[0] and text[1]),
 * nrt_stats_read reads them into s (s->dim 0 if the file has none); a
 * wrong count, a value that is not a finite number, or a negative std is
 * an error naming the file and the key. */
int nrt_stats_meta(const nrt_stats *s, char *text[2], nrt_error *err);
int nrt_stats_read(const nrt_st_file *f, const char *path, size_t dim, nrt_stats *s,
                   nrt_error *err);
/* Reads just the statistics of the weights file at path. */
int nrt_weights_stats(const char *path, size_t dim, nrt_stats *s, nrt_error *err);
/* 0 if the F32 tensor t (read from path) holds only finite numbers, or if it
 * is not F32; else -1, err naming path, the tensor, the first NaN or
 * infinity's index and how many there are.  Loading refuses such weights:
 * training from them gives NaN losses, predicting from them garbage. */
int nrt_tensor_check_finite(const char *path, const nrt_tensor *t, nrt_error *err);
/* The tensors of the model's state_dict in its order (each layer's
 * parameters, then its buffers: weight, bias, running_mean, running_var,
 * num_batches_tracked), their data in param and buffers, into t (room for
 * n_params + n_buffers); returns how many. */
int nrt_weights_tensors(const struct nrt_model *m, const float *param, const void *buffers,
                        nrt_tensor *t);

/* ------------------------------------------------------------- tfevents.c */

/* TensorBoard's event files: a writer of scalar summaries (--logdir).  A
 * file is a sequence of TFRecords, each an Event protocol buffer framed by
 * its length and masked CRC-32Cs; TensorBoard reads every
 * events.out.tfevents.* file of a directory. */
#define NRT_TB_API 1
typedef struct nrt_tb nrt_tb;
/* Creates dir (and its parents) if needed and a new event file in it,
 * events.out.tfevents.SECONDS.HOST.PID.N, its first record the file
 * version ("brain.Event:2"). */
int nrt_tb_open(const char *dir, nrt_tb **out, nrt_error *err);
/* One scalar: its tag ("train/loss"), the global step and the value, at
 * the wall-clock time of the call.  Buffered. */
int nrt_tb_scalar(nrt_tb *tb, const char *tag, int64_t step, double value, nrt_error *err);
/* Writes what is buffered to the file. */
int nrt_tb_flush(nrt_tb *tb, nrt_error *err);
/* Flushes, closes and frees tb, reporting a write error; NULL: nothing. */
int nrt_tb_close(nrt_tb *tb, nrt_error *err);
/* mkdir -p: dir and its missing parents (--logdir's, --checkpoint's);
 * messages begin with dir. */
int nrt_make_dirs(const char *dir, nrt_error *err);
/* Appends n bytes at the end of fd (opened O_APPEND) whole, or not at
 * all: a write cut short (a full disk, a file size limit) is taken back
 * where fd is a regular file, so a log never ends in half a record (the
 * event files, --metrics).  Messages begin with path. */
int nrt_append_whole(int fd, const void *p, size_t n, const char *path, nrt_error *err);
/* CRC-32C (Castagnoli) of n bytes, and the TFRecord's mask of a CRC. */
uint32_t nrt_crc32c(const void *p, size_t n);
uint32_t nrt_crc32c_mask(uint32_t crc);

/* -------------------------------------------------------------- kernels.c */

/* The numeric kernels generated code calls.  All row-major.
 *
 * C[m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * C, op(X) = X or X^T.
 * lda, ldb, ldc are row strides of A, B, C as stored.  With OpenBLAS this
 * is cblas_sgemm; otherwise a blocked, vectorised, threaded kernel whose
 * result does not depend on the number of threads. */
void nrt_sgemm(int transa, int transb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc);

/* How a product multiplies (nrt_gemm's dot, nrt_conv's): NRT_DOT_F32 in
 * fp32 multiply-adds, on the widest vectors the cpu has (AVX-512, AVX2,
 * or portable: the same bits from each); NRT_DOT_AVX2 the same, never on
 * AVX-512 (to compare them, and NETRT_CPU_ISA=avx2's products, oneDNN's
 * convolutions then capped at AVX2 too); NRT_DOT_BF16, for operands that are bf16
 * values (a bf16 run's), with AVX512-BF16's vdpbf16ps where the cpu has
 * it (nrt_dot_native) — the same exact products, summed in pairs, so the
 * result differs from NRT_DOT_F32's in the order of the sums alone — and
 * as NRT_DOT_F32 where it has not. */
enum nrt_dot { NRT_DOT_F32, NRT_DOT_BF16, NRT_DOT_AVX2, NRT_DOT_AMX };
int nrt_dot_native(void);
/* NRT_DOT_AMX: bf16 products on AMX's tiles, the same products summed in
 * the hardware's order; only once nrt_amx_enable has returned 1 (the cpu
 * has AMX, and the process has asked the kernel for the tiles' state). */
int nrt_amx_enable(void);
/* The instruction set NRT_DOT_F32's products run on: "AVX-512", "AVX2",
 * "portable" or "OpenBLAS". */
const char *nrt_gemm_isa(void);
/* ... and the products of a dot (NRT_DOT_AVX2: AVX2, where the cpu has it). */
const char *nrt_dot_isa(int dot);
/* nrt_sgemm, its products as dot says. */
void nrt_gemm(int dot, int transa, int transb, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc);

/* A 2-D convolution's geometry: input [C, H, W], output [O, OH, OW], kernel
 * KH x KW, stride SH, SW, zero padding PH, PW (PyTorch's nn.Conv2d); how
 * its products multiply (enum nrt_dot); and where its passes on oneDNN,
 * made at their first call, are kept (NULL: made at every call). */
typedef struct nrt_conv {
    int c, h, w;
    int o, oh, ow;
    int kh, kw, sh, sw, ph, pw;
    int dot;
    struct nrt_dnnl *dnnl; /* the net's convolution state (nrt_net.dnnl), or NULL */
} nrt_conv;

/* A net's convolution state (conv_dnnl.c): its passes on oneDNN, where
 * the runtime is built with it, made at their first call and run at the
 * next ones (oneDNN's descriptions, primitives and buffers in its layouts
 * kept), and the built-in passes' workspace; NULL without memory. */
struct nrt_dnnl *nrt_dnnl_new(void);
void nrt_dnnl_free(struct nrt_dnnl *dnnl);

/* A batch x, [N, C, H, W] or channel first [C, N, H, W] (cn = 1), to xp
 * [C, N, H+2PH, W+2PW]: zero-padded and channel first. */
void nrt_conv2d_pad(const nrt_conv *g, int n, int cn, const float *x, float *xp);
/* y [O, N*OH*OW] = w [O, C*KH*KW] cols(xp) + b, cols being the batch's
 * im2col matrix [C*KH*KW, N*OH*OW], read from xp and never stored, and b
 * [O] each channel's bias (NULL: none), added to the finished sum. */
void nrt_conv2d_fwd(const nrt_conv *g, int n, const float *w, const float *b, const float *xp,
                    float *y);
/* dw [O, C*KH*KW] = dy [O, N*OH*OW] cols(xp)^T. */
void nrt_conv2d_dw(const nrt_conv *g, int n, const float *dy, const float *xp,
                   float *dw);
/* For stride 1 and PH < KH, PW < KW: dx (overwritten; [N, C, H, W], or
 * [C, N, H, W] if cn) from dy [O, N*OH*OW] and w, as one convolution of dy
 * (the transposed convolution).  scratch holds N * nrt_conv2d_dx_scratch(g)
 * floats. */
void nrt_conv2d_dx(const nrt_conv *g, int n, int cn, const float *w,
                   const float *dy, float *scratch, float *dx);
size_t nrt_conv2d_dx_scratch(const nrt_conv *g);

/* One image x [C, H, W] to columns col [C*KH*KW, OH*OW]; zero padding. */
void nrt_im2col(const float *x, int c, int h, int w, int kh, int kw, int sh,
                int sw, int ph, int pw, int oh, int ow, float *col);
/* The adjoint: accumulates col [C*KH*KW, OH*OW] into dx [C, H, W]. */
void nrt_col2im(const float *col, int c, int h, int w, int kh, int kw,
                int sh, int sw, int ph, int pw, int oh, int ow, float *dx);

/* The adjoint of im2col over a batch: dx [N, C, H, W] (overwritten) from
 * col [C*KH*KW, N*OH*OW], sample i's columns being i*OH*OW ..
 * (i+1)*OH*OW - 1 — the input gradient of a strided convolution. */
void nrt_col2im_batch(const float *col, int n, int c, int h, int w, int kh,
                      int kw, int sh, int sw, int ph, int pw, int oh, int ow,
                      float *dx);
/* The same into dx laid out channel first, [C, N, H, W]. */
void nrt_col2im_batch_cn(const float *col, int n, int c, int h, int w, int kh,
                         int kw, int sh, int sw, int ph, int pw, int oh,
                         int ow, float *dx);

/* Batch normalization over a batch of n samples of c channels of hw
 * values each (PyTorch's BatchNorm1d: hw 1; BatchNorm2d: hw = H*W),
 * laid out [n, c, hw], or channel first [c, n, hw] (cn = 1). */
typedef struct nrt_bn {
    int c, hw, cn;
    float eps, momentum;
} nrt_bn;

/* Training mode: y = (x - mean) / sqrt(var + eps) * gamma + beta with the
 * batch's mean and biased variance per channel, which stats [2c] keeps
 * (the mean, then 1 / sqrt(var + eps)) for backward; running_mean and
 * running_var move by momentum towards the mean and the unbiased variance,
 * and *num_batches_tracked counts the batch.  gamma and beta may be NULL
 * (affine=False). */
void nrt_batchnorm_train(const nrt_bn *g, int n, const float *x, const float *gamma,
                         const float *beta, float *running_mean, float *running_var,
                         int64_t *num_batches_tracked, float *stats, float *y);
/* Evaluation mode: the same with the running statistics; nothing moves. */
void nrt_batchnorm_eval(const nrt_bn *g, int n, const float *x, const float *gamma,
                        const float *beta, const float *running_mean,
                        const float *running_var, float *y);
/* Backward through training mode's batch statistics: dgamma, dbeta (if
 * gamma is not NULL) and dx (if not NULL) from dy, x and forward's stats. */
void nrt_batchnorm_bwd(const nrt_bn *g, int n, const float *x, const float *dy,
                       const float *gamma, const float *stats, float *dgamma, float *dbeta,
                       float *dx);

/* out[r] = sum of row r of a [rows, cols], in a fixed order. */
void nrt_row_sums(const float *a, int rows, size_t cols, float *out);
/* out[j] = sum over r of a[r, j], a [rows, cols], in a fixed order. */
void nrt_col_sums(const float *a, int rows, int cols, float *out);

/* Inverted dropout over n values (n <= NRT_DROPOUT_MAX): mask[i] = 0
 * with probability p, else 1 / (1 - p), y = x * mask.  Value i is dropped
 * when nrt_dropout_word(net->dropout_key, layer, net->step, i) is below
 * nrt_dropout_cut(p) (philox.h): the GPU's masks, bit for bit. */
struct nrt_net;
void nrt_dropout_fwd(const struct nrt_net *net, uint32_t layer, const float *x, float *y,
                     float *mask, size_t n, double p);

/* Max pooling over [N, C, H, W] with padding p (padded cells never win).
 * arg receives, per output, the index within its input plane (h*W + w) of
 * the maximum; ties go to the first in scan order, as in PyTorch. */
void nrt_maxpool2d_fwd(const float *x, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *y, int32_t *arg);
/* dx [N, C, H, W] = scatter of dy through arg (dx is overwritten). */
void nrt_maxpool2d_bwd(const float *dy, const int32_t *arg, int n, int c,
                       int h, int w, int k, int s, int p, int oh, int ow, float *dx);

/* Average pooling, PyTorch's count_include_pad=True: the divisor is k*k. */
void nrt_avgpool2d_fwd(const float *x, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *y);
void nrt_avgpool2d_bwd(const float *dy, int n, int c, int h, int w, int k,
                       int s, int p, int oh, int ow, float *dx);

/* Cross-entropy of logits [N, K] against labels, mean over N, through a
 * numerically stable log-softmax.  If dlogits is not NULL it receives the
 * gradient of the mean loss: (softmax - onehot) / N.  Returns the loss. */
float nrt_xent(const float *logits, const int32_t *label, int n, int k,
               float *dlogits);
/* A pointwise loss (losses.h: l->kind's row, l->arg its argument) over
 * all N*D values: the mean of f(y - t); dy (if not NULL) = f'(y - t) / ND.
 * Returns the loss (0 for a kind losses.h has no row of). */
float nrt_loss(const nrt_loss_spec *l, const float *y, const float *t, int n, int d, float *dy);
/* The name of a pointwise loss's kind ("mse"); NULL where this runtime
 * has no such loss. */
const char *nrt_loss_name(int kind);
/* Number of rows of logits [N, K] whose largest entry is at label. */
int nrt_correct(const float *logits, const int32_t *label, int n, int k);

/* ------------------------------------------------------------ precision */

/* enum nrt_precision, nrt_bf16, nrt_fp16, nrt_lowp: lowp.h.  A
 * precision's name, as the model language, --precision and checkpoints
 * write it; and the precision a name is (-1: none). */
static inline const char *nrt_precision_name(int p)
{
    return p == NRT_BF16 ? "bf16" : p == NRT_FP16 ? "fp16" : "fp32";
}
static inline int nrt_precision_parse(const char *s)
{
    for (int p = NRT_FP32; p <= NRT_FP16; p++)
        if (!strcmp(s, nrt_precision_name(p)))
            return p;
    return -1;
}

/* In precision prec (nrt_lowp): p[0..n) rounded in place; dst[0..n) =
 * src rounded; p[0..n) scaled by s (an fp32 product), then rounded. */
void nrt_round_lowp(int prec, float *p, size_t n);
void nrt_round_lowp_to(int prec, float *dst, const float *src, size_t n);
void nrt_round_lowp_scaled(int prec, float *p, size_t n, float s);
/* A value kept in 16 bits (nrt_net.half): dst[0..n) the 16 bits of src
 * rounded to prec (nrt_half_bits); and back, dst[0..n) the floats that
 * src's bits store (nrt_half_value).  Of a value already rounded to prec,
 * the round trip gives back the same bits. */
void nrt_half_keep(int prec, uint16_t *dst, const float *src, size_t n);
void nrt_half_load(int prec, float *dst, const uint16_t *src, size_t n);
/* p[0..n) rounded in place (nrt_round_lowp), and its 16 bits kept in dst:
 * one sweep for both. */
void nrt_half_round_keep(int prec, uint16_t *dst, float *p, size_t n);
/* Whether a run in precision prec keeps a model's low-precision values in
 * 16 bits, given its memory plans' activations a sample (the cpu's
 * half_act_size and act_size, or the GPU's): NETRT_ACT_BITS=16 where the
 * model has such values (half != 0), 32 never, auto (the default) where
 * that takes less memory than 4 bytes each (the working copies weigh
 * against it in a small model); -1 (err) for another value. */
int nrt_half_of(size_t half, size_t full, int prec, nrt_error *err);
/* (nrt_net.half: prec where nrt_half_of says, else 0) */

/* --------------------------------------------------------------- atomic.c */

/* A file written whole or not at all, beside its destination
 * (PATH.tmp.PID.XXXXXX): nrt_atomic_open makes it, open for writing in
 * w->f, with a plain fopen's mode; nrt_atomic_commit flushes, syncs and
 * closes it and renames it over PATH.  Several files are made all or none
 * by closing each (nrt_atomic_close) before committing any.  On an error
 * (said in err as "PATH: cannot write: REASON") the temporary is removed;
 * nrt_atomic_abort removes it too.  w->path is the caller's, kept. */
typedef struct nrt_atomic {
    FILE *f;
    char *tmp;
    const char *path;
} nrt_atomic;

int nrt_atomic_open(nrt_atomic *w, const char *path, nrt_error *err);
/* 0 if a file written whole can go to path: nothing is there, or a
 * regular file; -1 (err) for a directory, a device or a pipe, which the
 * rename would replace (-o /dev/null, as root).  nrt_atomic_open checks. */
int nrt_atomic_target(const char *path, nrt_error *err);
int nrt_atomic_close(nrt_atomic *w, nrt_error *err);
int nrt_atomic_commit(nrt_atomic *w, nrt_error *err);
void nrt_atomic_abort(nrt_atomic *w);

/* ---------------------------------------------------------------- optim.c */

/* enum nrt_optim_kind, nrt_optim (the hyperparameters) and each
 * optimizer's update: optimizers.h.  An optimizer's row: its name as the
 * model and checkpoints write it, torch.optim's class, the per-parameter
 * state PyTorch keeps (state[0], state[1]; NULL: none). */
typedef struct nrt_optim_def {
    const char *name, *torch, *state[2];
} nrt_optim_def;

/* kind's row; NULL where this runtime has no such optimizer. */
const nrt_optim_def *nrt_optim_find(int kind);
/* How many of its states a run of h keeps (sgd without momentum: none);
 * -1 for a kind nrt_optim_find does not know. */
int nrt_optim_slots(const nrt_optim *h);

/* An optimizer's state over one flat parameter buffer. */
typedef struct nrt_optim_state {
    nrt_optim h;
    size_t n;
    float *m; /* the optimizer's first state (sgd: momentum buffer; adam: first moment) */
    float *v; /* its second (adam: second moment) */
    int64_t step;
} nrt_optim_state;

/* -1 with the error said for an optimizer this runtime does not have, or
 * out of memory. */
int nrt_optim_init(nrt_optim_state *s, const nrt_optim *h, size_t n,
                   nrt_error *err);
/* One update of param[0..n) with grad[0..n), exactly torch.optim's. */
void nrt_optim_step(nrt_optim_state *s, float *param, const float *grad);
void nrt_optim_free(nrt_optim_state *s);

/* fp16's loss scaler (nrt_scaler, its rules: lowp.h), over the cpu's
 * gradients: nrt_unscale multiplies grad[0..n) in place by the scale's
 * reciprocal, 1 if one of them was not finite, else 0; nrt_scaler_step
 * unscales them and updates the scaler, 1 if the step is to be skipped. */
int nrt_unscale(const nrt_scaler *s, float *grad, size_t n);
int nrt_scaler_step(nrt_scaler *s, float *grad, size_t n);

/* ------------------------------------------------------------- schedule.c */

/* Learning-rate schedules, stepped once an epoch as PyTorch's are
 * (scheduler.step() after the epoch's validation), with PyTorch's
 * arithmetic.  X(KIND, name, torch.optim.lr_scheduler's class): each
 * one's next lr is schedule.c's lr_NAME, its arguments nrt_schedule's
 * fields (the compiler's table of them: compiler/registry.c, schedules[]). */
#define NRT_SCHEDULES(X)                                                   \
    X(STEP, step, "StepLR")                       /* lr *= gamma every step_size epochs */ \
    X(COSINE, cosine, "CosineAnnealingLR")        /* from the base lr to eta_min over t_max */ \
    X(PLATEAU, reduce_on_plateau, "ReduceLROnPlateau") /* lr *= factor when the loss stalls */

#define NRT_SCHED_ENUM_(K, name, cls) NRT_SCHED_##K,
enum nrt_schedule_kind { NRT_SCHED_NONE = 0, NRT_SCHEDULES(NRT_SCHED_ENUM_) NRT_SCHED_KINDS };
#undef NRT_SCHED_ENUM_

typedef struct nrt_schedule {
    int kind;
    int step_size;        /* step */
    double gamma;         /* step */
    int t_max;            /* cosine */
    double eta_min;       /* cosine */
    double factor;        /* plateau, and PyTorch's defaults: 0.1 */
    int patience;         /* 10 */
    double threshold;     /* 1e-4 */
    int threshold_abs;    /* threshold_mode: 0 "rel", 1 "abs" */
    int cooldown;         /* 0 */
    double min_lr;        /* 0 */
    double eps;           /* 1e-8 */
} nrt_schedule;

/* Where a schedule stands: what a checkpoint keeps of it. */
typedef struct nrt_sched_state {
    double base_lr, lr;   /* the optimizer's lr, and the current one */
    int64_t epoch;        /* steps taken (PyTorch's last_epoch) */
    double best;          /* plateau: the best loss seen (inf at first) */
    int64_t bad_epochs, cooldown_left;
} nrt_sched_state;

void nrt_schedule_init(nrt_sched_state *st, double base_lr);
/* A schedule's name as the model writes it ("step"); "none" for
 * NRT_SCHED_NONE, NULL for a kind this runtime does not have. */
const char *nrt_schedule_name(int kind);
/* The end of an epoch whose watched loss (plateau: the validation loss)
 * was metric: moves the schedule on and returns the next epoch's lr. */
double nrt_schedule_step(nrt_sched_state *st, const nrt_schedule *s, double metric);

/* ----------------------------------------------------------------- init.c */

enum nrt_init_kind {
    NRT_INIT_DEFAULT = 0,        /* PyTorch's default for the parameter */
    NRT_INIT_ZEROS,
    NRT_INIT_ONES,
    NRT_INIT_CONSTANT,           /* a */
    NRT_INIT_NORMAL,             /* mean a, std b */
    NRT_INIT_UNIFORM,            /* [a, b) */
    NRT_INIT_XAVIER_NORMAL,      /* gain a */
    NRT_INIT_XAVIER_UNIFORM,     /* gain a */
    NRT_INIT_KAIMING_NORMAL,     /* negative slope a, gain sqrt(2/(1+a^2)) */
    NRT_INIT_KAIMING_UNIFORM     /* negative slope a */
};

typedef struct nrt_init {
    int kind;
    float a, b;
} nrt_init;

/* ---------------------------------------------------------------- model */

/* A generated elementwise loop (an epilogue, an activation's gradient) of
 * at least NRT_PAR_MIN_VALUES values runs on the threads, each value on
 * one of them (the same bits on any number); without OpenMP, on one.  At
 * 2^19 values the loop takes about what waking the team does. */
#define NRT_PAR_MIN_VALUES 524288
#ifdef _OPENMP
#define NRT_PRAGMA(x) _Pragma(#x)
#define NRT_PAR_FOR(values) \
    NRT_PRAGMA(omp parallel for schedule(static) if ((values) >= NRT_PAR_MIN_VALUES))
#else
#define NRT_PAR_FOR(values)
#endif

/* A generated pass (and forward and backward) is compiled twice where the
 * compiler can, for AVX2 and for the x86-64 baseline (SSE2), and the
 * program runs the one its cpu has, chosen as it starts (GCC's and
 * Clang's (18 and later) target_clones, through an ifunc): one binary whose elementwise
 * loops take 8-float vectors wherever there are.  Both give the same bits:
 * the loops are elementwise or sum in the order written (no -ffast-math),
 * and AVX2 alone brings no FMA to contract a multiply and an add into.
 * Not at -O0, which vectorises nothing: a debugger finds each pass under
 * its own name. */
#if !defined(NRT_PASS) && defined(__OPTIMIZE__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__CUDACC__) && defined(__has_attribute)
/* (clang before 18 names the ifunc "f.ifunc", not f, so that another
 * file's call of f finds no symbol: llvm-project PR 71706) */
#if __has_attribute(target_clones) && (!defined(__clang__) || __clang_major__ >= 18)
#define NRT_PASS __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef NRT_PASS /* (-DNRT_PASS= builds the baseline alone) */
#define NRT_PASS
#endif

/* One parameter tensor of a model, as generated code describes it. */
typedef struct nrt_param {
    const char *name;  /* PyTorch's state_dict name: "0.weight", "fc1.bias" */
    int rank;
    int64_t dim[4];
    size_t offset;     /* in floats, into the flat parameter buffer */
    size_t size;       /* in floats */
    int fan_in, fan_out;
    int is_bias;       /* default init: U(±1/sqrt(fan_in)) instead of
                          kaiming_uniform(a=sqrt(5)) */
    nrt_init init;
} nrt_param;

/* Fills each parameter of the flat buffer by its init, drawing from r in
 * table order. */
void nrt_init_params(const nrt_param *p, int n, float *buf, nrt_rng *r);

/* One buffer of a model: state that is not a parameter (a batchnorm's
 * running statistics).  The optimizer never sees it; it is saved, loaded
 * and checkpointed with the parameters.  All of a model's buffers lie in
 * one flat area of bytes of their own, beside the flat parameters. */
typedef struct nrt_buffer {
    const char *name;  /* PyTorch's state_dict name: "1.running_mean" */
    int dtype;         /* NRT_F32 or NRT_I64 */
    int rank;          /* 0: a scalar (num_batches_tracked) */
    int64_t dim[4];
    size_t offset;     /* in bytes, into the flat buffer area; 8-aligned */
    size_t size;       /* elements */
    float init;        /* every element's initial value */
    int after;         /* its place in the state_dict: after the first
                          `after` parameters of the model's table */
} nrt_buffer;

/* Sets each buffer of the flat area to its initial value. */
void nrt_init_buffers(const nrt_buffer *b, int n, void *area);

/* The most gradient buffers a model's backward pass may use. */
#define NRT_GBUF_MAX 8

/* A training run's state, shared by the runtime and the generated code.
 * Buffers are sized for `cap` samples a batch. */
typedef struct nrt_net {
    const struct nrt_model *model;
    int cap;           /* batch capacity of the buffers below */
    float *param;      /* flat parameters */
    float *grad;       /* flat gradients, same layout */
    unsigned char *buffers; /* flat buffers (model->buffer_bytes) */
    float *act;        /* activations: value v of sample i of the batch
                          lies at act + cap * v_offset + i * v_size */
    float *gbuf[NRT_GBUF_MAX]; /* gradient buffers, cap * grad_size each: two
                          used in turn, more where a value has several
                          readers (model->grad_buffers) */
    float *scratch;    /* per-layer scratch, cap * scratch_size floats */
    int32_t *iact;     /* integer activations (maxpool argmax) */
    float *dinput;     /* if not NULL, backward writes d loss / d input */
    const float *x;    /* the batch's input, where a pass reads it by name
                          (add(x)): set by the generated forward and backward */
    uint64_t dropout_key; /* dropout masks: a function of the key, */
    uint64_t step;     /* the updates done so far, the layer and the value */
    int training;      /* dropout active; batchnorm on the batch's statistics */
    /* precision bf16 or fp16 (the cpu's emulation: fp32 arithmetic on
     * values rounded where PyTorch's autocast rounds them): lowp the
     * precision (0: fp32), the weights of the products rounded into wlp by
     * each forward pass, the first product's input into xlp [cap *
     * lowp_in_size]; fp16's loss scale (GradScaler's; else 1), which the
     * loss's gradient is multiplied by */
    int lowp;
    float *wlp, *xlp;
    float loss_scale;
    /* a bf16 or fp16 run's values kept in 16 bits (the model's second
     * memory plan, half_act_size): their format, NRT_BF16 or NRT_FP16 (0:
     * 4 bytes), which the backward pass reads them in even where it runs
     * in fp32 (--gradcheck's reference); the generated forward_half and
     * backward_half run each layer's passes on fp32 working copies (in
     * forward gbuf[0] and gbuf[1]) and keep in act the 16 bits of each
     * value read again (nrt_half_keep, nrt_half_load) */
    int half;
    int dot; /* the products' arithmetic: enum nrt_dot */
    struct nrt_dnnl *dnnl; /* the convolutions' state: their passes on oneDNN,
                              made at their first call and kept, and the
                              built-in passes' workspace (conv_dnnl.c) */
} nrt_net;

typedef struct nrt_batch {
    int n;
    const float *x;
    const int32_t *label;
    const float *y;
    /* With several ranks: the samples of the step's batch on all of them
     * (n of which are this rank's, maybe none); 0 where it is n. */
    int total;
} nrt_batch;

/* A rank's share of the n samples from start of a step's batch: the batch
 * cut in `ranks` contiguous parts that differ by one sample at most.  Its
 * count; its first sample's position at *first. */
static inline size_t nrt_share(int rank, int ranks, size_t start, size_t n, size_t *first)
{
    const size_t lo = n * (size_t)rank / (size_t)ranks,
                 hi = n * ((size_t)rank + 1) / (size_t)ranks;
    *first = start + lo;
    return hi - lo;
}

/* ---------------------------------------------------------- backends */

/* What a run asks of the device it trains on. */
/* The processes of a data-parallel run (mpirun, srun): rank of size, the
 * processes started together, each training on its share of every batch.
 * libnetrt_mpi gives one over MPI (a program built with netc --mpi).  All
 * calls are collective (every rank makes them, in the same order) and
 * return 0, or -1 with a message in err. */
typedef struct nrt_comm {
    int rank, size;
    int local_rank;          /* among the ranks on this host */
    int hosts;               /* the hosts the ranks run on */
    void *ctx;
    /* v = the sum of every rank's v, on every rank */
    int (*sum_floats)(void *ctx, float *v, size_t n, nrt_error *err);
    int (*sum_doubles)(void *ctx, double *v, size_t n, nrt_error *err);
    /* bytes from rank 0 to every rank */
    int (*broadcast)(void *ctx, void *v, size_t bytes, nrt_error *err);
    /* all[k] = rank k's mine, on every rank */
    int (*gather_u64)(void *ctx, uint64_t mine, uint64_t *all, nrt_error *err);
    /* Seconds this rank has spent in the calls above (waiting for the
     * others included). */
    double (*seconds)(void *ctx);
    /* Ends every rank's process with status (a rank that cannot go on
     * while the others wait in a collective). */
    void (*abort)(void *ctx, int status);
    void (*close)(void *ctx);
} nrt_comm;

/* Whether ok holds on every rank: 1, or 0 with the ranks where it does not
 * in who ("rank 1", "ranks 1, 3"); -1 on an error.  Collective. */
int nrt_comm_agree(const nrt_comm *comm, int ok, char *who, size_t len, nrt_error *err);

/* How a program joins a data-parallel run: in a program built with netc
 * --mpi, nrt_mpi (libnetrt_mpi). */
typedef struct nrt_dist {
    const char *name;        /* "MPI" */
    /* 1 and *comm where the process was started as a rank of a run of
     * several (mpirun, srun), 0 where it runs alone, -1 on an error. */
    int (*open)(nrt_comm *comm, nrt_error *err);
} nrt_dist;

extern const nrt_dist nrt_mpi;

typedef struct nrt_run_config {
    int device;              /* CUDA device index (cuda backends) */
    int cap;                 /* largest batch */
    uint64_t dropout_key;    /* from the run's --seed (main.c) */
    nrt_optim optim;         /* hyperparameters, the --lr flag applied */
    /* Several ranks, or NULL: a step's batch is then the global batch,
     * of which the backend trains on its rank's share, and the gradients
     * are averaged over the ranks; evaluation shares the set and sums. */
    const nrt_comm *comm;
    /* Several ranks on GPUs: the largest bucket of gradients summed at
     * once while backward goes on (--bucket-mb); 0: the default. */
    size_t bucket_bytes;
    int precision;           /* enum nrt_precision: the cpu's bf16 emulation */
    float init_scale;        /* fp16: the first loss scale (0: NRT_SCALE_INIT) */
} nrt_run_config;

enum nrt_eval_set { NRT_EVAL_VALID = 0, NRT_EVAL_TEST = 1 };

/* A device that trains a model: the cpu (main.c) or a GPU (libnetrt_cuda).
 * The training loop, metrics and checkpoints in main.c are written once
 * over these calls.  All return 0, or -1 with a message in err. */
typedef struct nrt_backend {
    void *ctx;
    char name[160];          /* "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)" */
    int loss_free;           /* reading a step's loss costs nothing (cpu) */
    char products[192];      /* bf16, fp16: how the products run, in words */
    int buckets;             /* several ranks: the buckets the gradients are
                                summed in as backward runs (0: at once, after) */
    /* fp16: the loss scaler's state, read after a step (metrics,
     * checkpoints) and set before set_state when a run resumes; both NULL
     * unless the run is in fp16 */
    int (*get_scaler)(void *ctx, nrt_scaler *s, nrt_error *err);
    int (*set_scaler)(void *ctx, const nrt_scaler *s, nrt_error *err);
    /* The run's data: the backend keeps what it needs (a GPU copies a
     * training set that fits to device memory, once).  Any may be NULL
     * (--eval has no training set). */
    int (*set_data)(void *ctx, const nrt_dataset *train, const nrt_dataset *valid,
                    const nrt_dataset *test, nrt_error *err);
    /* The weights: the flat parameters and the flat buffers (NULL when
     * the model has none). */
    int (*set_params)(void *ctx, const float *param, const void *buffers, nrt_error *err);
    int (*get_params)(void *ctx, float *param, void *buffers, nrt_error *err);
    /* The order of the training samples for the epoch that starts, or
     * resumes at position start; the backend computes it (a GPU, on the
     * device, as it gathers a batch). */
    int (*set_order)(void *ctx, const nrt_order *order, size_t start, nrt_error *err);
    /* Forward, backward and update on the samples at positions
     * start .. start + n - 1 of the epoch's order.
     * If loss is not NULL it receives the batch's mean loss before the
     * update; a GPU then waits for the step, so ask only when needed. */
    int (*step)(void *ctx, size_t start, int n, float *loss, nrt_error *err);
    /* The sum of loss * n over the steps since the last call. */
    int (*take_loss_sum)(void *ctx, double *sum, nrt_error *err);
    /* Mean loss and accuracy (class targets; else NaN) over the
     * validation set (NRT_EVAL_VALID) or the test set (NRT_EVAL_TEST). */
    int (*evaluate)(void *ctx, int which, double *loss, double *accuracy, nrt_error *err);
    /* The optimizer's learning rate from the next step on (schedules). */
    int (*set_lr)(void *ctx, double lr, nrt_error *err);
    /* What a checkpoint holds beyond the weights: the optimizer's state m
     * and v (as nrt_optim_state's; NULL where the optimizer keeps none),
     * the updates done, and the loss sum since take_loss_sum. */
    int (*get_state)(void *ctx, float *m, float *v, uint64_t *step, double *loss_sum,
                     nrt_error *err);
    int (*set_state)(void *ctx, const float *m, const float *v, uint64_t step,
                     double loss_sum, nrt_error *err);
    /* The model's output ([n, n_out]: logits or values) for n samples of
     * the caller's, x [n, in_size], in evaluation mode (no dropout). */
    int (*predict)(void *ctx, const float *x, size_t n, float *out, nrt_error *err);
    /* Forward, backward and update on a batch the caller holds (n up to
     * the capacity; labels already checked); loss as for step, and added
     * to the loss sum as step's is. */
    int (*train_batch)(void *ctx, const nrt_batch *b, float *loss, nrt_error *err);
    /* --gradcheck: the forward pass on a batch the caller holds, in
     * training mode with the dropout masks of the current step, and no
     * update: its mean loss; with grad not NULL, then the backward pass:
     * d loss / d parameters into grad [param_count] and, with dinput not
     * NULL, d loss / d input into dinput [n, in_size].  fp16: backward
     * from the loss scaled by the scaler's scale, and both gradients then
     * unscaled, as a step's (an inf or a NaN where they overflowed); the
     * scaler is left as it was.  In bf16 and fp16 with fp32_backward, the
     * backward pass is fp32's, over the forward's low-precision values:
     * the same arithmetic without the roundings (the reference of
     * --gradcheck's low-precision check). */
    int (*gradient)(void *ctx, const nrt_batch *b, int fp32_backward, float *loss, float *grad,
                    float *dinput, nrt_error *err);
    /* Bytes of device memory in use at the peak (0 on the cpu). */
    size_t (*peak_memory)(void *ctx);
    void (*close)(void *ctx);
} nrt_backend;

/* What generated CUDA code adds to a model.  The runtime's CUDA entry
 * points are reached through it, so that libnetrt itself links no CUDA;
 * a program built without CUDA has model->cuda == NULL. */
typedef struct nrt_cuda_net nrt_cuda_net;

/* A model's device code: the kernel source netc generated (MODEL.cu,
 * which includes the runtime's netrt_kernels.cuh), and, when it was
 * compiled ahead of time, nvcc's fatbin of it.  Without a fatbin the
 * runtime compiles the source with NVRTC for the GPU present (the JIT),
 * through a disk cache. */
typedef struct nrt_cuda_code {
    const char *name;             /* "digits_cnn.cu", in NVRTC's messages */
    const char *source;           /* the kernel source, NUL-terminated */
    const unsigned char *fatbin;  /* NULL: compile source at run time */
    size_t fatbin_size;
    const char *const *kernels;   /* the model's extern "C" kernels, in the
                                     order of the host code's K_ enum */
    int nkernels;
} nrt_cuda_code;

/* A convolution's weight gradient on the GPU sums over n*OH*OW positions
 * in chunks, each block's partial sums kept in the net's workspace: at
 * most NRT_DW_MAX_SPLITS chunks, and no more than NRT_DW_PARTIAL_MAX
 * floats of partial sums.  netc sizes the workspace by these; the
 * launcher (launch.c) never exceeds them. */
#define NRT_DW_MAX_SPLITS 256
#define NRT_DW_PARTIAL_MAX (1 << 21)

#define NRT_UNAVAILABLE (-2)
/* An error every rank of a data-parallel run has at once (a collective
 * decision): rank 0 says it, and none aborts the others. */
#define NRT_ALL_RANKS (-3)

typedef struct nrt_cuda_model {
    /* The passes on the device, over the net's stream; 0 or -1 (err). */
    int (*forward)(nrt_cuda_net *net, int n, nrt_error *err);
    int (*backward)(nrt_cuda_net *net, int n, nrt_error *err);
    /* libnetrt_cuda's nrt_cuda_device_count, _list_devices and _open.
     * open returns NRT_UNAVAILABLE where a CUDA library it loads at run
     * time is missing (device auto then falls back to the cpu). */
    int (*device_count)(nrt_error *err);
    int (*list_devices)(FILE *out, nrt_error *err);
    int (*open)(const struct nrt_model *m, const nrt_run_config *c,
                nrt_backend *out, nrt_error *err);
    /* libnetrt_cuda's nrt_cuda_jit_info: PROG --jit-info. */
    int (*jit_info)(const struct nrt_model *m, const char *arch, int device, FILE *out,
                    nrt_error *err);
    const nrt_cuda_code *code;
    size_t workspace;        /* bytes of device workspace the passes need */
    size_t act_size;         /* floats of activations per sample on the GPU:
                                every value, and the aux but the cpu-only */
    size_t half_act_size;    /* the same where a bf16 or fp16 run keeps its
                                values in 16 bits (nrt_cuda_net.half), with
                                backward's working copies; 0: the model has
                                no such value */
    size_t operand_size;     /* elements a sample of the longest operand a
                                product reads through nrt_cu_gemm: a bf16
                                or fp16 run's 16-bit copies are as long */
} nrt_cuda_model;

/* Everything generated code tells the runtime about a model. */
typedef struct nrt_model {
    int abi;                 /* NETRT_ABI of the generated code */
    const char *name;        /* model name */
    const char *source;      /* model file, as given to netc */
    int in_rank;
    int in_dim[4];
    size_t in_size;          /* floats per sample */
    int target_kind;         /* enum nrt_target_kind */
    int n_out;               /* classes, or target values per sample */
    const nrt_param *params;
    int n_params;
    size_t param_count;      /* floats in the flat buffer */
    const nrt_buffer *buffers; /* non-parameter state, in state_dict order */
    int n_buffers;
    size_t buffer_bytes;     /* bytes of the flat buffer area */
    size_t act_size;         /* floats of activations per sample */
    size_t iact_size;        /* int32 activations per sample */
    size_t grad_size;        /* floats of one gradient buffer per sample */
    int grad_buffers;        /* gradient buffers backward uses (0: 2) */
    size_t scratch_size;     /* floats of scratch per sample */
    nrt_optim optim;
    nrt_loss_spec loss;      /* the pointwise loss (losses.h) that forward
                                computes; kind 0: cross-entropy */
    const char *device;      /* "cpu", "cuda", "cuda:N", "auto" */
    nrt_source train;        /* default training data (path may be NULL) */
    nrt_source valid;        /* default validation data, evaluated every
                                epoch (kind NULL: none) */
    nrt_source test;         /* default test data, evaluated at the end
                                (kind NULL: none) */
    nrt_schedule schedule;   /* the learning rate's schedule */
    nrt_transforms transforms; /* for images data */
    int batch, epochs;
    uint64_t seed;
    /* Forward pass over a batch: returns the mean loss; the model's output
     * (logits or predictions, [n, n_out]) is left at *out. */
    float (*forward)(nrt_net *net, const nrt_batch *b, const float **out);
    /* Backward pass after forward on the same batch: overwrites net->grad. */
    void (*backward)(nrt_net *net, const nrt_batch *b);
    /* The CUDA passes, or NULL in a program built without CUDA. */
    const nrt_cuda_model *cuda;
    /* Data parallelism across processes, or NULL (netc without --mpi). */
    const nrt_dist *dist;
    int precision;           /* enum nrt_precision: the model's `precision` */
    /* floats a sample of the first product's input, which a bf16 run casts
     * (rounds into the net's xlp); 0: the model has no product */
    size_t lowp_in_size;
    /* floats of activations per sample where a bf16 or fp16 run keeps its
     * low-precision values in 16 bits (nrt_net.half): those read again at
     * half their size, those not read again nowhere, backward's fp32
     * working copies, the rest as in act_size; 0: the model has no such
     * value */
    size_t half_act_size;
} nrt_model;

/* The gradient buffers m's backward uses. */
static inline int nrt_grad_buffers(const nrt_model *m)
{
    return m->grad_buffers > 2 ? m->grad_buffers : 2;
}

/* ----------------------------------------------------------- checkpoint.c */

/* The limits of a run's numbers, which the flags (--epochs, --batch,
 * --seed, --max-steps, --lr) and a checkpoint's metadata are both held to. */
#define NRT_EPOCHS_MAX 2147483647LL
#define NRT_BATCH_MAX 1048576LL
#define NRT_SEED_MAX 9007199254740991LL  /* 2^53 - 1: exact as a JSON number */
#define NRT_STEPS_MAX 9007199254740991LL
/* Whether lr is a learning rate: a non-negative number. */
int nrt_lr_valid(double lr);

#define NRT_CHECKPOINT_FILE "checkpoint.safetensors"

/* A training run's state between two steps, in DIR/checkpoint.safetensors:
 * what --resume needs to go on as if the run had never stopped, and what
 * the run was started with (its length, its data). */
typedef struct nrt_checkpoint {
    int64_t epoch;          /* the epoch under way, from 1 */
    uint64_t position;      /* samples of it done */
    uint64_t step;          /* updates done */
    uint64_t seed;
    int64_t batch;          /* on each rank */
    int ranks;              /* of a data-parallel run (1: alone) */
    int precision;          /* enum nrt_precision of the run */
    int shuffle;
    int64_t epochs;         /* the run's length */
    const char *data;       /* the training data's path */
    const char *valid_data; /* --valid-data's, or "" (or NULL, to save): the model's */
    const char *test_data;  /* --test-data's, likewise */
    char *text;             /* load: where those three lie (the caller frees it) */
    double loss_sum;        /* the epoch's loss sum so far */
    nrt_sched_state sched;
    nrt_scaler scaler;      /* fp16's loss scaler */
    float *param;           /* param_count floats each; m and v NULL */
    float *m, *v;           /* where the optimizer keeps none */
    void *buffers;          /* buffer_bytes (NULL: the model has none) */
    nrt_stats stats;        /* the standardization's (dim 0: none); load: allocated,
                               the caller frees it */
} nrt_checkpoint;

/* Writes c to DIR/checkpoint.safetensors, creating DIR, atomically: the
 * weights under the model's names (so --load reads a checkpoint too), the
 * optimizer's state as optimizer.NAME.exp_avg (and .exp_avg_sq, or
 * .momentum_buffer), the rest as metadata. */
int nrt_checkpoint_save(const char *dir, const struct nrt_model *m, const nrt_optim *h,
                        const nrt_checkpoint *c, nrt_error *err);
/* Reads it back into c, whose param, m and v the caller allocated; one of
 * another model or optimizer is refused, naming what differs, and so is a
 * value of the metadata out of its range (the flags'), naming the field. */
int nrt_checkpoint_load(const char *dir, const struct nrt_model *m, const nrt_optim *h,
                        nrt_checkpoint *c, nrt_error *err);

/* -------------------------------------------------------------- backend.c */

/* The cpu's buffers for a batch of up to cap samples, zeroed; and their
 * release (safe on a zeroed or half-allocated net). */
int nrt_net_alloc(nrt_net *net, const nrt_model *m, int cap, int half, nrt_error *err);
/* The cpu's products' arithmetic (enum nrt_dot) in precision prec, as
 * NETRT_CPU_BF16 asks (-1, err set, for a value it does not know). */
int nrt_dot_of(int prec, nrt_error *err);
void nrt_net_free(nrt_net *net);

/* The cpu backend. */
int nrt_cpu_open(const nrt_model *m, const nrt_run_config *rc, nrt_backend *be,
                 nrt_error *err);

enum nrt_device_kind { NRT_DEVICE_CPU = 0, NRT_DEVICE_AUTO = 1, NRT_DEVICE_CUDA = 2 };

/* "cpu", "auto", "cuda" or "cuda:N": its kind (and N in *index), or -1
 * with the reason in err. */
int nrt_device_parse(const char *dev, int *index, nrt_error *err);

/* Opens the backend dev names (rc->device is replaced by dev's index).
 * "auto" is the first CUDA device when there is one, else the cpu; what
 * it chose, and why, goes to note ("cpu (auto: no CUDA device)"), which
 * is left empty for a device named outright.  With rc->comm, each rank
 * takes the GPU of its local rank (unless dev is cuda:N), and the ranks
 * all take GPUs or all the cpu.  0, -1, or NRT_ALL_RANKS (every rank has
 * the error). */
int nrt_backend_open(const nrt_model *m, const char *dev, const nrt_run_config *rc,
                     nrt_backend *be, char *note, size_t note_len, nrt_error *err);

/* -------------------------------------------------------------- session.c */

/* A model as an object a C program holds: the API `netc --emit=lib`
 * writes a typed wrapper of.  Not thread-safe: one thread at a time. */
typedef struct nrt_session nrt_session;

/* Opens a session on dev ("cpu", "cuda", "cuda:N", "auto"; NULL: the
 * model's device) for batches of up to cap samples (0: the model's batch).
 * The weights start as a program's do: the model's initializers, drawn
 * with its seed. */
int nrt_session_open(const nrt_model *m, const char *dev, int cap, nrt_session **out,
                     nrt_error *err);
/* "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)" */
const char *nrt_session_device(const nrt_session *s);
/* Weights from and to safetensors files, with PyTorch's names. */
int nrt_session_load(nrt_session *s, const char *path, nrt_error *err);
int nrt_session_save(nrt_session *s, const char *path, nrt_error *err);
/* out [n, n_out] = the model's output (logits, or predicted values) for
 * x [n, in_size]; any n, in batches of up to the capacity. */
int nrt_session_predict(nrt_session *s, const float *x, size_t n, float *out,
                        nrt_error *err);
/* One optimizer step on n samples (1 to the capacity): x [n, in_size] and
 * label [n] (class targets) or y [n, n_out] (value targets; the other is
 * NULL).  *loss (if loss is not NULL) receives the batch's mean loss. */
int nrt_session_train_step(nrt_session *s, const float *x, const int32_t *label,
                           const float *y, int n, float *loss, nrt_error *err);
/* The standardization statistics of a model whose source says
 * standardize=true (netrt.h: nrt_stats): predict and train_step apply them
 * to the caller's rows, which are features as the data file holds them
 * (times the source's scale, as nrt_dataset_load gives them).  They come
 * with nrt_session_load's file, or from set_stats (in_size values each);
 * nrt_session_save writes them.  nrt_session_stats: their count (0: none
 * yet), and where they are in *mean and *std (either may be NULL). */
size_t nrt_session_stats(const nrt_session *s, const float **mean, const float **std);
int nrt_session_set_stats(nrt_session *s, const float *mean, const float *std, nrt_error *err);
void nrt_session_close(nrt_session *s);

/* ------------------------------------------------------------ gradcheck.c */

/* Compares the gradients of be's backward pass (sampled) with central
 * finite differences on the first nsamples samples of d, from the weights
 * param and buffers (param is moved and put back); with ref (the cpu in
 * fp32, when be is a GPU) not NULL, also every gradient with ref's.  be in
 * precision bf16 or fp16 (ref then the cpu in fp32 on any device): ref's
 * gradients against finite differences, be's loss against ref's, and be's
 * gradients against its backward pass in fp32 (gradcheck.c says why and
 * within what).  Prints the verdicts; returns 0 if all agree, 1 if not, -1
 * on an error (err). */
int nrt_gradcheck(const nrt_model *m, const nrt_backend *be, int precision,
                  const nrt_backend *ref, const nrt_dataset *d, int nsamples, float *param,
                  const void *buffers, nrt_error *err);

/* ----------------------------------------------------------------- main.c */

/* The generated program's main: parses the flags, loads the data, builds
 * the net, trains, evaluates, saves.  Returns the process exit status. */
int nrt_main(const nrt_model *m, int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* NETRT_H */
