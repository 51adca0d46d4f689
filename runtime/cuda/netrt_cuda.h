/*
 * netrt_cuda.h — the CUDA part of the netc runtime (libnetrt_cuda.a): what
 * generated .cu files and the runtime's own CUDA sources see.
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

#include "netrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run's device state.  Pointers are device memory, sized for cap
 * samples a batch. */
struct nrt_cuda_net {
    const nrt_model *model;
    int device;
    int cap;
    float *param;          /* flat parameters, model->param_count floats */
    float *grad;           /* flat gradients, same layout */
    float *act;            /* value v of sample i: act + cap * offset + i * size */
    float *gbuf[2];        /* gradient ping-pong buffers, cap * grad_size each */
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
    cublasHandle_t blas;
};

/* Checks a CUDA runtime result: 0 if cudaSuccess, else -1 with
 * "CALL failed at FILE:LINE: REASON" in err. */
int nrt_cuda_check(cudaError_t e, const char *call, const char *file, int line,
                   nrt_error *err);
int nrt_cublas_check(cublasStatus_t s, const char *call, const char *file,
                     int line, nrt_error *err);
/* Checks the launches before it (cudaGetLastError); what names the kernel. */
int nrt_cuda_launched(const char *what, const char *file, int line,
                      nrt_error *err);

#define NRT_CUDA(call, err) nrt_cuda_check((call), #call, __FILE__, __LINE__, (err))
#define NRT_CUBLAS(call, err) nrt_cublas_check((call), #call, __FILE__, __LINE__, (err))
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

#ifdef __cplusplus
}

/* The runtime's own kernels (device.cu), launched by backend.cu on stream
 * s: the batch gather at the device cursor, the optimizer over the flat
 * buffers, the end of a step (loss sum, cursor, step counter) and an
 * evaluation batch's loss and correct predictions. */
int nrt_cuda_gather(cudaStream_t s, int sms, const float *sx, const int32_t *sl,
                    const float *sy, const nrt_order *order, const unsigned long long *cursor,
                    int n, size_t dim, size_t ydim, float *x, int32_t *label, float *y,
                    nrt_error *err);
int nrt_cuda_optim(cudaStream_t s, int sms, const nrt_optim *h, float *param,
                   const float *grad, float *m, float *v, size_t n,
                   const unsigned long long *step, nrt_error *err);
int nrt_cuda_end_step(cudaStream_t s, const float *loss, int n, double *loss_sum,
                      unsigned long long *cursor, unsigned long long *step, nrt_error *err);
int nrt_cuda_count_eval(cudaStream_t s, const float *loss, const float *out,
                        const int32_t *label, int n, int k, double *loss_sum,
                        unsigned long long *correct, nrt_error *err);
#endif

#endif /* NETRT_CUDA_H */
