/*
 * netrt_cuda.h — the CUDA part of the netc runtime (libnetrt_cuda.a): what
 * generated host code (C) and the runtime's own CUDA sources see.
 *
 * libnetrt (C, no CUDA) reaches this part only through the function
 * pointers of a model's nrt_cuda_model, which generated code fills in; a
 * program built without CUDA has none, links no CUDA library and says so.
 *
 * The device state of a run is an nrt_cuda_net: the GPU's nrt_net.  Its
 * buffers follow the model's memory plan exactly as on the cpu (the same
 * offsets, layouts and gradient buffers), so one IR serves both backends.
 *
 * Conventions:
 *  - Every CUDA call and kernel launch is checked; a failure names the call,
 *    the file and line, and CUDA's error string, in an nrt_error.
 *  - Kernels of one run go on its stream; nothing synchronises the device
 *    except where a value must reach the host (a logged loss, an epoch's
 *    totals, saved weights).
 *  - Reductions (bias gradients, losses) are deterministic: a fixed order,
 *    no floating-point atomics, so one seed gives one result on one GPU.
 */
#ifndef NETRT_CUDA_H
#define NETRT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#else
/* NCCL is loaded with dlopen (libs.c): without its header, the few types
 * of its stable C API (NCCL 2) that the runtime uses. */
#define NCCL_MAJOR 2
typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
#endif

#include "netrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLAS, loaded at run time (libs.c): the functions the runtime calls. */
typedef struct nrt_cublas {
    void *lib;
    cublasStatus_t (*Create)(cublasHandle_t *);
    cublasStatus_t (*Destroy)(cublasHandle_t);
    cublasStatus_t (*SetStream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*SetWorkspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*SetMathMode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*SetAtomicsMode)(cublasHandle_t, cublasAtomicsMode_t);
    cublasStatus_t (*Sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
    /* the tensor cores' products of bf16 and fp16 runs */
    cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                             const void *, const void *, cudaDataType, int, const void *,
                             cudaDataType, int, const void *, void *, cudaDataType, int,
                             cublasComputeType_t, cublasGemmAlgo_t);
    const char *(*GetStatusName)(cublasStatus_t);
    const char *(*GetStatusString)(cublasStatus_t);
} nrt_cublas;

/* NCCL, loaded with dlopen by a run of several ranks on GPUs. */
typedef struct nrt_nccl {
    void *lib;
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*CommAbort)(ncclComm_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                              ncclComm_t, cudaStream_t);
    const char *(*GetErrorString)(ncclResult_t);
} nrt_nccl;

/* A run's device state.  Pointers are device memory, sized for cap
 * samples a batch. */
struct nrt_cuda_net {
    const nrt_model *model;
    int device;
    int cap;
    float *param;          /* flat parameters, model->param_count floats */
    float *grad;           /* flat gradients, same layout */
    unsigned char *buffers;/* flat buffers, model->buffer_bytes (batchnorm's) */
    float *act;            /* value v of sample i: act + cap * offset + i * size */
    float *gbuf[NRT_GBUF_MAX]; /* gradient buffers, cap * grad_size each (nrt_net's) */
    float *scratch;        /* cap * scratch_size floats */
    int32_t *iact;         /* cap * iact_size int32s (maxpool argmax) */
    /* The batch of the current forward pass, set by the runtime. */
    const float *x;        /* [n, in_size] */
    const int32_t *label;  /* [n] (class targets) or NULL */
    const float *y;        /* [n, n_out] (value targets) or NULL */
    /* Written by forward: the batch's mean loss (one float) and the
     * model's output [n, n_out]. */
    float *loss;
    const float *out;
    /* If not NULL, backward writes d loss / d input [n, in_size] here
     * (--gradcheck; training never needs it). */
    float *dinput;
    int training;          /* dropout active; forward leaves d loss / d out in gbuf[0] */
    /* Dropout: the mask of value i is a function of the key, the layer,
     * *step and i (philox.h, as on the cpu), so a captured graph replays
     * new masks: the runtime advances *step on the device. */
    uint64_t dropout_key;
    /* Device memory the passes borrow within a launcher (conv2d_dw's
     * split-K partial sums): model->cuda->workspace bytes. */
    void *workspace;
    size_t workspace_bytes;
    unsigned long long *step;
    cudaStream_t stream;
    const nrt_cublas *cublas; /* the loaded library */
    cublasHandle_t blas;      /* its handle, bound to stream */
    /* The model's device code, loaded (module.c): kernel[NRT_K_*] are the
     * runtime's kernels every module carries, kernel[NRT_K_MODEL + i] the
     * model's i-th (its code->kernels[i]). */
    cudaLibrary_t library;
    cudaKernel_t *kernel;
    /* A bf16 or fp16 run (as the cpu's nrt_net): lowp the precision (0:
     * fp32), the products' weights rounded into wlp [param_count] by each
     * forward pass, the first product's input into xlp [cap *
     * lowp_in_size]; NULL in fp32. */
    int lowp;
    float *wlp, *xlp;
    const float *loss_scale; /* fp16: the scaler's scale, on the device; else NULL */
    /* A bf16 or fp16 run keeping its values in 16 bits (the GPU's 16-bit
     * plan, model->cuda->half_act_size): their format, NRT_BF16 or
     * NRT_FP16, else 0.  The generated cu_forward_half and cu_backward_half
     * run the passes on fp32 working copies and keep (nrt_cu_half_keep)
     * and load (nrt_cu_half_load) the 16 bits of each value, as the cpu's
     * forward_half and backward_half do. */
    int half;
    /* bf16, fp16: nrt_cu_gemm's operands in 16 bits, for the tensor cores
     * (cublasGemmEx): A into operand16[0], B into operand16[1], each
     * operand16_count elements, as many as the largest buffer a product
     * reads; and whalf [param_count], wlp's 16 bits, written with it (every
     * write of wlp is nrt_cu_round_lowp's), read by the products in place
     * of a conversion of the weights at each.  NULL in fp32. */
    uint16_t *operand16[2], *whalf;
    size_t operand16_count;
    /* Several ranks: backward calls this (nrt_cu_grads_final) once the
     * gradients from param[from] on are final, so that their sum over the
     * ranks starts while it goes on (backend.cu's buckets); NULL alone. */
    int (*grads_final)(nrt_cuda_net *net, size_t from, nrt_error *err);
    void *grads_ctx;
};

/* The runtime's kernels in every module (netrt_kernels.cuh), by index. */
enum { NRT_K_GEMM_SCALE, NRT_K_DROPOUT_FWD, NRT_K_LOSS, NRT_K_COL_SUMS, NRT_K_ROW_SUMS,
       NRT_K_ROUND_LOWP, NRT_K_TO_HALF, NRT_K_HALF_LOAD, NRT_K_MODEL };

/* Checks a CUDA runtime result: 0 if cudaSuccess, else -1 with
 * "CALL failed at FILE:LINE: REASON" in err. */
int nrt_cuda_check(cudaError_t e, const char *call, const char *file, int line,
                   nrt_error *err);
int nrt_cublas_check(const nrt_cublas *b, cublasStatus_t s, const char *call,
                     const char *file, int line, nrt_error *err);
/* Checks the launches before it (cudaGetLastError); what names the kernel. */
int nrt_cuda_launched(const char *what, const char *file, int line,
                      nrt_error *err);

#define NRT_CUDA(call, err) nrt_cuda_check((call), #call, __FILE__, __LINE__, (err))
#define NRT_CUBLAS(b, call, err) nrt_cublas_check((b), (call), #call, __FILE__, __LINE__, (err))
int nrt_nccl_check(const nrt_nccl *n, ncclResult_t r, const char *call, const char *file,
                   int line, nrt_error *err);
#define NRT_NCCL(n, call, err) nrt_nccl_check((n), (call), #call, __FILE__, __LINE__, (err))
#define NRT_LAUNCHED(what, err) nrt_cuda_launched((what), __FILE__, __LINE__, (err))

/* Device memory, tracked: nrt_cuda_alloc counts what is in use and its
 * peak; out of memory says how much was asked for and how much is free. */
typedef struct nrt_cuda_mem {
    size_t in_use, peak;
} nrt_cuda_mem;
int nrt_cuda_alloc(nrt_cuda_mem *m, void **p, size_t bytes, const char *what,
                   nrt_error *err);
void nrt_cuda_free(nrt_cuda_mem *m, void *p, size_t bytes);

/* The entry points generated code puts in its nrt_cuda_model. */
int nrt_cuda_device_count(nrt_error *err);
int nrt_cuda_list_devices(FILE *out, nrt_error *err);
int nrt_cuda_open(const nrt_model *m, const nrt_run_config *c,
                  nrt_backend *out, nrt_error *err);
/* PROG --jit-info: how the model's kernels are had on device (or, given
 * arch like "sm_90", for that architecture without a GPU): ahead of time,
 * or the JIT's target, NVRTC version, cache entry, hit or miss and compile
 * time, printed to out. */
int nrt_cuda_jit_info(const nrt_model *m, const char *arch, int device, FILE *out,
                      nrt_error *err);

/* -------------------------------------------------------------- libs.c */

/* Loads STEM.so.MAJOR (major: the library's; the CUDA major version built
 * with for CUDA's own), else STEM.so; NULL with "cannot load WHAT: ..." in
 * err. */
void *nrt_dl_open(const char *stem, int major, const char *what, nrt_error *err);
/* Stores LIB's symbol NAME into the function pointer at fn; 0 or -1. */
int nrt_dl_sym(void *lib, const char *name, void *fn, const char *what, nrt_error *err);
/* Loads cuBLAS: 0, or NRT_UNAVAILABLE with the reason in err. */
int nrt_cublas_load(nrt_cublas *b, nrt_error *err);
void nrt_cublas_unload(nrt_cublas *b);
/* Loads NCCL: 0, or NRT_UNAVAILABLE with the reason in err. */
int nrt_nccl_load(nrt_nccl *n, nrt_error *err);
void nrt_nccl_unload(nrt_nccl *n);

/* ------------------------------------------------------------ module.c */

/* Loads a model's device code for the current device: its fatbin, or its
 * source compiled by NVRTC (through the cache); *kernel gets a malloc'd
 * table of NRT_K_MODEL + code->nkernels handles.  The name of kernel k,
 * for messages. */
int nrt_cuda_module_load(const nrt_cuda_code *code, int device, cudaLibrary_t *library,
                         cudaKernel_t **kernel, nrt_error *err);
void nrt_cuda_module_unload(cudaLibrary_t library, cudaKernel_t *kernel);
const char *nrt_cuda_kernel_name(const nrt_cuda_net *net, int k);

/* ------------------------------------------------------------ launch.c */

/* The launchers generated host code calls: each enqueues kernel k of the
 * net's module on net->stream and returns 0, or -1 with a message naming
 * the kernel in err.  args and nargs are a kernel's arguments after the
 * ones the launcher adds; NRT_ARGS(&a, &b) writes both (in C). */
#define NRT_ARGS(...) (void *[]){__VA_ARGS__}, \
        (int)(sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))

/* Any kernel: grid gx x gy x gz of threads each; the arguments as given. */
int nrt_cu_launch(nrt_cuda_net *net, int k, unsigned gx, unsigned gy, unsigned gz,
                  unsigned threads, void **args, int nargs, nrt_error *err);
/* A grid-stride kernel over count elements, 256 threads a block: its first
 * argument is the count, as a size_t (nrt_cu_each), or an int
 * (nrt_cu_each_int, which checks that it fits). */
int nrt_cu_each(nrt_cuda_net *net, int k, size_t count, void **args, int nargs,
                nrt_error *err);
int nrt_cu_each_int(nrt_cuda_net *net, int k, long long count, void **args, int nargs,
                    nrt_error *err);

/* An implicit GEMM of a convolution, D [rows, n*cols] in tiles of bm x bn
 * (nrt_k::conv2d_fwd, conv2d_dx): the kernel takes (int n, args...).  in
 * and out are the floats a sample it reads and writes, checked to stay
 * below 2^31 for the batch. */
typedef struct nrt_cu_tile {
    const char *what;
    long long in, out;
    int rows, cols;
    int bm, bn, threads;
} nrt_cu_tile;
int nrt_cu_igemm(nrt_cuda_net *net, int k, const nrt_cu_tile *t, int n, void **args,
                 int nargs, nrt_error *err);

/* A convolution's weight gradient dw [rows, cols] = dy [rows, n*positions]
 * cols(x)^T (nrt_k::conv2d_dw, kernel k: (int n, int chunk, x, dy, dw,
 * partial, int prec), prec the run's net->lowp), the long sum split in
 * chunks whose partial sums kernel reduce ((int splits, partial, dw))
 * adds in order. */
typedef struct nrt_cu_dw {
    const char *what;
    long long in, out;
    int rows, cols, positions;  /* O, C*KH*KW, OH*OW */
    int bm, bn, bk, threads;
    int max_splits;             /* 1: never split (no workspace) */
} nrt_cu_dw;
/* Splits of the long sum: as many as give about NRT_DW_BLOCKS blocks,
 * each at least NRT_DW_MIN_CHUNK products long, and at most max_splits,
 * which netc computes from netrt.h's NRT_DW_MAX_SPLITS and
 * NRT_DW_PARTIAL_MAX with the workspace ((max_splits > 1 ? max_splits : 0)
 * * rows * cols floats). */
#define NRT_DW_BLOCKS 1024
#define NRT_DW_MIN_CHUNK 256
int nrt_cu_conv2d_dw(nrt_cuda_net *net, int k, int reduce, const nrt_cu_dw *t, int n,
                     const float *x, const float *dy, float *dw, nrt_error *err);

/* C[m, n] = alpha op(A) op(B) + beta C, row-major: nrt_sgemm, on cuBLAS. */
int nrt_cu_gemm(nrt_cuda_net *net, int transa, int transb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc, nrt_error *err);
/* out[j] = sum over rows of a [rows, cols] (nrt_col_sums); out[r] = sum of
 * row r (nrt_row_sums). */
int nrt_cu_col_sums(nrt_cuda_net *net, const float *a, int rows, int cols, float *out,
                    nrt_error *err);
int nrt_cu_row_sums(nrt_cuda_net *net, const float *a, int rows, size_t cols, float *out,
                    nrt_error *err);
/* dst[0..count) = src in the run's precision net->lowp (nrt_round_lowp_to,
 * bit for bit); dst may be src.  _scaled: p[0..count) multiplied by the
 * loss scale (*net->loss_scale on the device; 1 where NULL), then rounded
 * (nrt_round_lowp_scaled). */
int nrt_cu_round_lowp(nrt_cuda_net *net, float *dst, const float *src, size_t count,
                      nrt_error *err);
int nrt_cu_round_lowp_scaled(nrt_cuda_net *net, float *p, size_t count, nrt_error *err);
/* A value kept in 16 bits (net->half, the format), as nrt_half_keep,
 * nrt_half_round_keep and nrt_half_load: h[0..count) the 16 bits of w
 * rounded to it (_round_keep: and w rounded too, in the same sweep); and
 * back, w[0..count) the floats that h's bits store. */
int nrt_cu_half_keep(nrt_cuda_net *net, uint16_t *h, const float *w, size_t count,
                     nrt_error *err);
int nrt_cu_half_round_keep(nrt_cuda_net *net, uint16_t *h, float *w, size_t count,
                           nrt_error *err);
int nrt_cu_half_load(nrt_cuda_net *net, float *w, const uint16_t *h, size_t count,
                     nrt_error *err);
/* Inverted dropout, nrt_dropout_fwd bit for bit; the step is read on the
 * device, so a captured graph draws new masks. */
int nrt_cu_dropout_fwd(nrt_cuda_net *net, uint32_t layer, const float *x, float *y,
                       float *mask, size_t count, double p, nrt_error *err);
/* The losses into *loss (device memory), their gradient into d unless
 * NULL: cross-entropy through kernel k (the model's K classes written in:
 * (logits, label, n, d, loss), one block of 1024), and the model's
 * pointwise loss (net->model->loss: losses.h's, nrt_loss bit for bit in
 * d, to 1e-6 in the loss: the sums' orders differ). */
int nrt_cu_xent(nrt_cuda_net *net, int k, const float *logits, const int32_t *label, int n,
                float *d, float *loss, nrt_error *err);
int nrt_cu_loss(nrt_cuda_net *net, const float *y, const float *t, int n, int dim, float *d,
                float *loss, nrt_error *err);
/* Backward's word that the gradients from param[from] on are final: with
 * several ranks, their sum starts (net->grads_final); alone, nothing. */
int nrt_cu_grads_final(nrt_cuda_net *net, size_t from, nrt_error *err);

#ifdef __cplusplus
}

/* The runtime's own kernels (device.cu), launched by backend.cu on stream
 * s: the batch gather at the device cursor (plus offset: a rank's share),
 * the optimizer over the flat buffers, the end of a step (loss sum,
 * cursor, step counter) and an evaluation batch's loss and correct
 * predictions; with several ranks, the gradient weighted by the rank's
 * share (with loss not NULL, the loss too, put at grad[n]) and the summed
 * loss copied back. */
int nrt_cuda_gather(cudaStream_t s, int sms, const float *sx, const int32_t *sl,
                    const float *sy, const nrt_order *order, const unsigned long long *cursor,
                    size_t offset, int n, size_t dim, size_t ydim, float *x, int32_t *label,
                    float *y, nrt_error *err);
int nrt_cuda_weigh(cudaStream_t s, int sms, float *grad, size_t n, const float *loss, float w,
                   nrt_error *err);
int nrt_cuda_copy_loss(cudaStream_t s, const float *from, float *loss, nrt_error *err);
int nrt_cuda_optim(cudaStream_t s, int sms, const nrt_optim *h, float *param,
                   const float *grad, float *m, float *v, size_t n,
                   const unsigned long long *step, const int *skip, nrt_error *err);
int nrt_cuda_unscale(cudaStream_t s, int sms, float *grad, size_t n, const nrt_scaler *sc,
                     int *found, nrt_error *err);
int nrt_cuda_scaler_update(cudaStream_t s, nrt_scaler *sc, const int *found,
                           unsigned long long *updates, nrt_error *err);
int nrt_cuda_end_step(cudaStream_t s, const float *loss, int n, double *loss_sum,
                      unsigned long long *cursor, unsigned long long *step, nrt_error *err);
int nrt_cuda_count_eval(cudaStream_t s, const float *loss, const float *out,
                        const int32_t *label, int n, int k, double *loss_sum,
                        unsigned long long *correct, nrt_error *err);
#endif

#endif /* NETRT_CUDA_H */
