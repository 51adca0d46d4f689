/*
 * test_cuda_kernels.cu — the device kernels of templates/netrt_kernels.cuh,
 * launched by the launchers of runtime/cuda/launch.c, against the cpu
 * kernels of libnetrt (runtime/kernels.c).
 *
 * Every kernel runs on random inputs, for several geometries (padding,
 * strides, odd sizes, tiles only partly filled) and batch sizes (1 among
 * them), and its result is compared with the cpu function's.  Each
 * comparison prints one line; the last line is
 *   test_cuda_kernels: N checks, M failed
 * Exit status: 0 if all passed, 1 if any failed, 77 (automake's "skipped")
 * if there is no CUDA device.  (Philox's known answers are checked on the
 * cpu, by test_kernels.)  With --bench it times the convolutions of
 * models/cifar10.net instead (batch 64, 256, 1024).
 *
 * The kernels are launched as a model's are.  The test defines them as
 * netc writes a model's kernel source (netc --emit=cuda MODEL.net): extern
 * "C" __global__ wrappers, each one line instantiating an nrt_k:: template
 * with every shape written in and the tiling netc would choose, one set for
 * each shape tested (CONV_KERNELS, POOL_KERNELS, XENT_KERNEL and
 * TRANSPOSE_KERNELS below).  They and the runtime's own kernels go in the
 * net's kernel table (nrt_cuda_net.kernel, which module.c fills for a
 * loaded model), and the host side calls the nrt_cu_* launchers with the
 * numbers netc writes into host code (NETC_CUDA=yes netc --emit=c MODEL.net).
 *
 * Tolerances:
 *  - sums of products (gemm, the convolutions, col_sums, row_sums):
 *      |gpu - cpu| <= 1e-5 * M, M the same operation on the absolute values
 *    of the operands (sum |a_i b_i|): relative 1e-5 of the terms' size, so
 *    that cancellation does not make the test flaky.
 *  - xent: the loss to 1e-5 relative; the gradient to 1e-5 (|cpu| + 1/n)
 *    (its terms are softmax/n and 1/n).  NaN where the cpu has NaN.
 *  - the pointwise losses (every row of losses.h, through nrt_dev_loss): the
 *    loss to 1e-6 relative (both sum in double); dy bit for bit.
 *  - bit for bit (NaN matching NaN): pooling (values and argmax), dropout
 *    (against the cpu's nrt_dropout_fwd: the same masks), the transposes.
 * Device outputs are filled with NaN bytes before each call, so that a
 * value a kernel fails to write is caught.
 *
 * The kernels netc writes for each model (every layer's passes, the
 * activations, the fused epilogues) are not here: tests/gradcheck.sh checks
 * them on the device, every layer netc knows and every activation fused and
 * not, against finite differences and against the cpu's gradients.
 *
 * Build (the launchers are in the CUDA runtime library, libnetrt_cuda.a):
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Iruntime -Iruntime/cuda \
 *     tests/gpu/test_cuda_kernels.cu runtime/libnetrt_cuda.a runtime/libnetrt.a \
 *     -ldl -lgomp -lm -o test_cuda_kernels
 * (cuBLAS is loaded at run time, as in a generated program.)
 */
#include "netrt.h"
#include "netrt_cuda.h"

#include "netrt_kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <string>
#include <vector>

/* --------------------------------------------------------------- checks */

static int g_checks, g_failed;

static void __attribute__((format(printf, 2, 3))) result(bool ok, const char *fmt, ...)
{
    g_checks++;
    if (!ok)
        g_failed++;
    printf("%s ", ok ? "ok  " : "FAIL");
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static void die_cuda(cudaError_t e, const char *call, int line)
{
    if (e == cudaSuccess)
        return;
    printf("FAIL %s at line %d: %s\n", call, line, cudaGetErrorString(e));
    printf("test_cuda_kernels: %d checks, %d failed (stopped on a CUDA error)\n", g_checks + 1,
           g_failed + 1);
    exit(1);
}
#define CK(call) die_cuda((call), #call, __LINE__)

static nrt_cublas g_cublas;

static void die_blas(cublasStatus_t s, const char *call, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return;
    printf("FAIL %s at line %d: %s\n", call, line, g_cublas.GetStatusString(s));
    exit(1);
}
#define CB(call) die_blas((call), #call, __LINE__)

static nrt_rng g_rng;

static float frand() { return (float)(2.0 * nrt_rng_uniform(&g_rng) - 1.0); }

static std::vector<float> randv(size_t n, float scale = 1.0f)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = scale * frand();
    return v;
}

static std::vector<float> absv(const std::vector<float> &v)
{
    std::vector<float> a(v.size());
    for (size_t i = 0; i < v.size(); i++)
        a[i] = fabsf(v[i]);
    return a;
}

/* A device buffer, filled with NaN bytes (0xff) when made or poisoned.
 * Exactly its size, no slack: a write past its end is then the emulated
 * device's (and compute-sanitizer's) to catch, and cudaFree's error fails
 * the test. */
template <class T>
struct Dev {
    T *p = nullptr;
    size_t n = 0;
    explicit Dev(size_t count) : n(count)
    {
        CK(cudaMalloc((void **)&p, std::max<size_t>(n, 1) * sizeof(T)));
        poison();
    }
    Dev(const std::vector<T> &h) : Dev(h.size()) { put(h); }
    ~Dev() { CK(cudaFree(p)); }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    void poison() { CK(cudaMemset(p, 0xff, std::max<size_t>(n, 1) * sizeof(T))); }
    void put(const std::vector<T> &h)
    {
        if (!h.empty())
            CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> get(size_t count = (size_t)-1) const
    {
        if (count == (size_t)-1)
            count = n;
        std::vector<T> h(count);
        CK(cudaDeviceSynchronize());
        if (count)
            CK(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

/* A launcher's return code and the stream's completion: a failed check if
 * either went wrong. */
static bool launched(nrt_cuda_net *net, int rc, const nrt_error &err, const char *what)
{
    if (rc != 0) {
        result(false, "%s: launcher returned %d: %s", what, rc, err.msg);
        return false;
    }
    CK(cudaStreamSynchronize(net->stream));
    return true;
}

static bool same_bits(float a, float b)
{
    if (std::isnan(a) || std::isnan(b))
        return std::isnan(a) && std::isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* |got - want| <= rel * mag + abs_tol, NaN against NaN.  One line. */
static void compare(const char *what, const std::vector<float> &got,
                    const std::vector<float> &want, const std::vector<float> *mag, double rel,
                    double abs_tol)
{
    size_t bad = 0, first = 0;
    double worst = 0.0; /* largest error / tolerance */
    for (size_t i = 0; i < want.size(); i++) {
        const double g = got[i], w = want[i];
        bool ok;
        double tol = rel * (mag ? (double)(*mag)[i] : fabs(w)) + abs_tol;
        if (std::isnan(w) || std::isnan(g))
            ok = std::isnan(w) && std::isnan(g);
        else if (std::isinf(w) || std::isinf(g))
            ok = w == g;
        else {
            const double e = fabs(g - w);
            ok = e <= tol;
            if (tol > 0 && e / tol > worst)
                worst = e / tol;
            else if (tol == 0 && e > 0)
                worst = INFINITY;
        }
        if (!ok && bad++ == 0)
            first = i;
    }
    if (bad)
        result(false, "%s: %zu of %zu values off, first [%zu] = %.9g, want %.9g (tol %.3g)",
               what, bad, want.size(), first, (double)got[first], (double)want[first],
               rel * (mag ? (double)(*mag)[first] : fabs((double)want[first])) + abs_tol);
    else
        result(true, "%s: %zu values, worst error %.3f of tolerance", what, want.size(), worst);
}

template <class T>
static bool equal_bits(const T &a, const T &b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static bool equal_bits(const float &a, const float &b) { return same_bits(a, b); }

template <class T>
static void compare_exact(const char *what, const std::vector<T> &got,
                          const std::vector<T> &want)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (!equal_bits(got[i], want[i]) && bad++ == 0)
            first = i;
    if (bad)
        result(false, "%s: %zu of %zu values differ, first [%zu] = %.9g, want %.9g", what, bad,
               want.size(), first, (double)got[first], (double)want[first]);
    else
        result(true, "%s: %zu values bit for bit", what, want.size());
}

static char g_name[512];

static const char *__attribute__((format(printf, 1, 2))) name(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_name, sizeof g_name, fmt, ap);
    va_end(ap);
    return g_name;
}

/* -------------------------------------------------------- kernel table */

/* The net's kernel table, as module.c fills it for a loaded model: the
 * runtime's kernels at NRT_K_*, then the test's from NRT_K_MODEL on, each
 * added the first time a test asks for it (KERNEL).  The net's model is
 * there for its kernels' names only, which the launchers' messages read
 * (nrt_cuda_kernel_name: model->cuda->code->kernels). */
enum { MAX_KERNELS = 256 };
static cudaKernel_t g_kernel[MAX_KERNELS];
static const void *g_kernel_fn[MAX_KERNELS];
static const char *g_kernel_name[MAX_KERNELS];
static int g_nkernels;
static nrt_cuda_code g_code;
static nrt_cuda_model g_cuda_model;
static nrt_model g_model;

/* The index in the table of the __global__ function fn, named name. */
static int kernel_index(const void *fn, const char *name)
{
    for (int i = 0; i < g_nkernels; i++)
        if (g_kernel_fn[i] == fn)
            return i;
    if (g_nkernels == MAX_KERNELS) {
        printf("FAIL %s: the kernel table is full (MAX_KERNELS = %d)\n", name, MAX_KERNELS);
        exit(1);
    }
    CK(cudaGetKernel(&g_kernel[g_nkernels], fn));
    g_kernel_fn[g_nkernels] = fn;
    g_kernel_name[g_nkernels] = name;
    g_nkernels++;
    g_code.nkernels = std::max(0, g_nkernels - (int)NRT_K_MODEL);
    return g_nkernels - 1;
}
#define KERNEL(fn) kernel_index((const void *)(fn), #fn)

/* The net's table and model; the runtime's kernels in it. */
static void kernel_table(nrt_cuda_net *net)
{
    g_code.name = "test_cuda_kernels.cu";
    g_code.kernels = g_kernel_name + NRT_K_MODEL;
    g_cuda_model.code = &g_code;
    g_model.name = "test_cuda_kernels";
    g_model.cuda = &g_cuda_model;
    net->model = &g_model;
    net->kernel = g_kernel;
    /* in the order of NRT_K_GEMM_SCALE .. NRT_K_HALF_LOAD */
    static_assert(NRT_K_MODEL == 8, "netrt_cuda.h has a new runtime kernel: add it here");
    const void *const runtime[NRT_K_MODEL] = {
        (const void *)nrt_dev_gemm_scale, (const void *)nrt_dev_dropout_fwd,
        (const void *)nrt_dev_loss,       (const void *)nrt_dev_col_sums,
        (const void *)nrt_dev_row_sums,   (const void *)nrt_dev_round_lowp,
        (const void *)nrt_dev_to_half,    (const void *)nrt_dev_half_load};
    for (int k = 0; k < NRT_K_MODEL; k++)
        kernel_index(runtime[k], nrt_cuda_kernel_name(net, k));
}

/* ------------------------------------------------------------- kernels */

/* netc's tilings (compiler/ops.c conv_tiling, dw_tiling), by the
 * product's M: the output's channels for the forward pass and the weight
 * gradient, the input's for the input gradient. */
template <int M>
using ConvTiling = std::conditional_t<
    (M <= 16), nrt_k::Tiling<16, 256, 16, 4, 8, false>,
    std::conditional_t<(M <= 32), nrt_k::Tiling<32, 128, 16, 4, 8, false>,
                       nrt_k::Tiling<64, 128, 16, 8, 8, false>>>;
template <int M>
using DwTiling = std::conditional_t<
    (M <= 16), nrt_k::Tiling<16, 64, 32, 4, 4, true>,
    std::conditional_t<(M <= 32), nrt_k::Tiling<32, 64, 32, 4, 4, true>,
                       nrt_k::Tiling<64, 64, 32, 8, 4, true>>>;
template <class G>
using FwdT = ConvTiling<G::O>;
template <class G>
using DwT = DwTiling<G::O>;
template <class G>
using DxT = ConvTiling<G::C>;

/* netc's split-K bound for a weight gradient of total floats
 * (compiler/emit_cuda.c cu_dw_max_splits), and the workspace it gives the
 * layer (compiler/ops.c conv2d_cu_workspace). */
constexpr int dw_max_splits(long long total)
{
    return NRT_DW_PARTIAL_MAX / total > 256 ? 256
           : NRT_DW_PARTIAL_MAX / total < 1 ? 1
                                            : (int)(NRT_DW_PARTIAL_MAX / total);
}

template <class G>
constexpr size_t dw_workspace()
{
    constexpr long long total = (long long)G::O * G::CKK;
    return dw_max_splits(total) > 1 ? sizeof(float) * (size_t)dw_max_splits(total) * total : 0;
}

/* A convolution's kernels, as netc writes them for a conv2d layer (here
 * the input gradient in both layouts), by geometry and input layout.
 * Each set comes from CONV_KERNELS(id, CN, C, H, W, O, OH, OW, KH, KW, SH,
 * SW, PH, PW); a geometry without one is a compile error. */
struct ConvKernels {
    int fwd, dw, dw_reduce;
    int dx_nc, dx_cn; /* dx [n, C, H, W] and [C, n, H, W] */
};

template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN>
ConvKernels conv_kernels() = delete;

#define CONV_KERNELS(id, cn, ...)                                                          \
    using id##_geom = nrt_k::ConvGeom<__VA_ARGS__>;                                       \
    extern "C" __global__ void __launch_bounds__(FwdT<id##_geom>::NT)                     \
        id##_fwd(int n, const float *x, const float *w, float *y, int prec)                \
    {                                                                                      \
        nrt_k::conv2d_fwd<id##_geom, FwdT<id##_geom>, cn>(n, x, w, y, prec);              \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(DwT<id##_geom>::NT)                      \
        id##_dw(int n, int chunk, const float *x, const float *dy, float *dw,              \
                float *partial, int prec)                                                  \
    {                                                                                      \
        nrt_k::conv2d_dw<id##_geom, DwT<id##_geom>, cn>(n, chunk, x, dy, dw, partial,     \
                                                         prec);                            \
    }                                                                                      \
    extern "C" __global__ void id##_dw_reduce(int splits, const float *partial, float *dw) \
    {                                                                                      \
        nrt_k::conv2d_dw_reduce<id##_geom::O * id##_geom::CKK>(splits, partial, dw);      \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(DxT<id##_geom>::NT)                      \
        id##_dx_nc(int n, const float *w, const float *dy, float *dx, int prec)            \
    {                                                                                      \
        nrt_k::conv2d_dx<id##_geom, DxT<id##_geom>, false>(n, w, dy, dx, prec);           \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(DxT<id##_geom>::NT)                      \
        id##_dx_cn(int n, const float *w, const float *dy, float *dx, int prec)            \
    {                                                                                      \
        nrt_k::conv2d_dx<id##_geom, DxT<id##_geom>, true>(n, w, dy, dx, prec);            \
    }                                                                                      \
    template <>                                                                            \
    ConvKernels conv_kernels<__VA_ARGS__, cn>()                                            \
    {                                                                                      \
        return {KERNEL(id##_fwd), KERNEL(id##_dw), KERNEL(id##_dw_reduce),                 \
                KERNEL(id##_dx_nc), KERNEL(id##_dx_cn)};                                   \
    }

/* One warp's mma_16x8x16 over A [16, 16] and B [16, 8] (row-major, 16-bit
 * values), C and D [16, 8] floats: each lane gathers its fragments by the
 * layout netrt_kernels.cuh states, and scatters D by it. */
template <bool BF16>
__device__ void mma_probe(const uint16_t *A, const uint16_t *B, const float *C, float *D)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    auto pair = [](const uint16_t *p, int stride) {
        return (uint32_t)p[0] | (uint32_t)p[stride] << 16;
    };
    const uint32_t a[4] = {pair(A + g * 16 + 2 * t, 1), pair(A + (g + 8) * 16 + 2 * t, 1),
                           pair(A + g * 16 + 2 * t + 8, 1),
                           pair(A + (g + 8) * 16 + 2 * t + 8, 1)};
    const uint32_t b[2] = {pair(B + 2 * t * 8 + g, 8), pair(B + (2 * t + 8) * 8 + g, 8)};
    const float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                        C[(g + 8) * 8 + 2 * t + 1]};
    float d[4];
    nrt_k::mma_16x8x16<BF16>(d, a, b, c);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
extern "C" __global__ void mma_probe_bf16(const uint16_t *A, const uint16_t *B, const float *C,
                                          float *D)
{
    mma_probe<true>(A, B, C, D);
}
/* One warp's ldmatrix_x4 of M [16, 16] (16-bit values, row-major) from
 * shared memory, rows padded to 24 values as igemm_mma pads them: lane l
 * points at row l % 16, column 8 (l / 16), so matrix i is rows 8 (i % 2)
 * on, columns 8 (i / 2) on; R [32][4] the lanes' words, then (T) the same
 * read transposed. */
extern "C" __global__ void ldmatrix_probe(const uint16_t *M, uint32_t *R, uint32_t *T)
{
    __shared__ __align__(16) uint16_t s[16][24];
    const int lane = threadIdx.x % 32;
    for (int i = lane; i < 16 * 16; i += 32)
        s[i / 16][i % 16] = M[i];
    __syncthreads();
    uint32_t r[4], t[4];
    nrt_k::ldmatrix_x4<false>(r, &s[lane % 16][8 * (lane / 16)]);
    nrt_k::ldmatrix_x4<true>(t, &s[lane % 16][8 * (lane / 16)]);
    for (int i = 0; i < 4; i++)
        R[lane * 4 + i] = r[i], T[lane * 4 + i] = t[i];
}
extern "C" __global__ void mma_probe_fp16(const uint16_t *A, const uint16_t *B, const float *C,
                                          float *D)
{
    mma_probe<false>(A, B, C, D);
}

/* test_convs' geometries */
CONV_KERNELS(conv_cifar_a, false, 3, 32, 32, 32, 32, 32, 5, 5, 1, 1, 2, 2)
CONV_KERNELS(conv_cifar_b, true, 32, 16, 16, 64, 16, 16, 5, 5, 1, 1, 2, 2)
CONV_KERNELS(conv_cifar_k3, true, 64, 8, 8, 64, 8, 8, 3, 3, 1, 1, 1, 1)
CONV_KERNELS(conv_lenet_a, false, 3, 32, 32, 6, 28, 28, 5, 5, 1, 1, 0, 0)
CONV_KERNELS(conv_lenet_b, true, 6, 14, 14, 16, 10, 10, 5, 5, 1, 1, 0, 0)
CONV_KERNELS(conv_k3s2p1, false, 5, 11, 9, 7, 6, 5, 3, 3, 2, 2, 1, 1)
CONV_KERNELS(conv_k5s2p2, true, 3, 13, 13, 17, 7, 7, 5, 5, 2, 2, 2, 2)
CONV_KERNELS(conv_rect, true, 4, 7, 10, 19, 5, 4, 3, 2, 1, 3, 0, 1)
CONV_KERNELS(conv_k4s3p1, false, 2, 9, 8, 3, 3, 3, 4, 4, 3, 3, 1, 1)
CONV_KERNELS(conv_1x1, false, 33, 5, 5, 65, 5, 5, 1, 1, 1, 1, 0, 0)
/* bench's, besides conv_cifar_a: cifar10.net's second and third layers */
CONV_KERNELS(conv_bench_b, true, 32, 16, 16, 32, 16, 16, 5, 5, 1, 1, 2, 2)
CONV_KERNELS(conv_bench_c, true, 32, 8, 8, 64, 8, 8, 5, 5, 1, 1, 2, 2)

/* A pooling geometry's kernels (H, W, OH, OW, K, S, P), max and average,
 * from POOL_KERNELS(id, H, W, OH, OW, K, S, P). */
struct PoolKernels {
    int max_fwd, max_bwd, avg_fwd, avg_bwd;
};

template <int H, int W, int OH, int OW, int K, int S, int P>
PoolKernels pool_kernels() = delete;

#define POOL_KERNELS(id, ...)                                                                \
    extern "C" __global__ void id##_max_fwd(int total, const float *x, float *y,             \
                                            int32_t *arg)                                    \
    {                                                                                        \
        nrt_k::maxpool2d_fwd<__VA_ARGS__>(total, x, y, arg);                                 \
    }                                                                                        \
    extern "C" __global__ void id##_max_bwd(int total, const float *dy, const int32_t *arg, \
                                            float *dx)                                       \
    {                                                                                        \
        nrt_k::maxpool2d_bwd<__VA_ARGS__>(total, dy, arg, dx);                               \
    }                                                                                        \
    extern "C" __global__ void id##_avg_fwd(int total, const float *x, float *y)             \
    {                                                                                        \
        nrt_k::avgpool2d_fwd<__VA_ARGS__>(total, x, y);                                      \
    }                                                                                        \
    extern "C" __global__ void id##_avg_bwd(int total, const float *dy, float *dx)           \
    {                                                                                        \
        nrt_k::avgpool2d_bwd<__VA_ARGS__>(total, dy, dx);                                    \
    }                                                                                        \
    template <>                                                                              \
    PoolKernels pool_kernels<__VA_ARGS__>()                                                  \
    {                                                                                        \
        return {KERNEL(id##_max_fwd), KERNEL(id##_max_bwd), KERNEL(id##_avg_fwd),            \
                KERNEL(id##_avg_bwd)};                                                       \
    }

POOL_KERNELS(pool_32_k2, 32, 32, 16, 16, 2, 2, 0)
POOL_KERNELS(pool_7_k2, 7, 7, 3, 3, 2, 2, 0)
POOL_KERNELS(pool_7x9_k3s2p1, 7, 9, 4, 5, 3, 2, 1)
POOL_KERNELS(pool_8_k3s1p1, 8, 8, 8, 8, 3, 1, 1)
POOL_KERNELS(pool_9_k3s2, 9, 9, 4, 4, 3, 2, 0)
POOL_KERNELS(pool_5x6_k2s3, 5, 6, 2, 2, 2, 3, 0)
POOL_KERNELS(pool_4_k4, 4, 4, 1, 1, 4, 4, 0)
POOL_KERNELS(pool_10_k4s2p2, 10, 10, 5, 5, 4, 2, 2)

/* Inverted dropout's backward pass, as netc writes it: dx = dy * mask. */
extern "C" __global__ void dropout_bwd(size_t count, const float *dy, const float *mask,
                                       float *dx)
{
    NRT_EACH(i, count) {
        dx[i] = dy[i] * mask[i];
    }
}

/* A model's cross-entropy loss over K classes (its kernel "loss"), from
 * XENT_KERNEL(K). */
template <int K>
int xent_kernel() = delete;

#define XENT_KERNEL(K)                                                                       \
    extern "C" __global__ void __launch_bounds__(nrt_k::LOSS_THREADS)                        \
        xent_##K(const float *logits, const int32_t *label, int n, float *d, float *loss)   \
    {                                                                                        \
        nrt_k::xent<K>(logits, label, n, d, loss);                                           \
    }                                                                                        \
    template <>                                                                              \
    int xent_kernel<K>()                                                                     \
    {                                                                                        \
        return KERNEL(xent_##K);                                                             \
    }

XENT_KERNEL(1)
XENT_KERNEL(10)
XENT_KERNEL(37)
XENT_KERNEL(100)
XENT_KERNEL(1000)

/* flatten of a channel-first value [C, n, HW] and its backward pass, from
 * TRANSPOSE_KERNELS(id, C, HW). */
struct TransposeKernels {
    int cn_to_nc, nc_to_cn;
};

template <int C, int HW>
TransposeKernels transpose_kernels() = delete;

#define TRANSPOSE_KERNELS(id, C, HW)                                                         \
    extern "C" __global__ void id##_cn_to_nc(int total, int n, const float *x, float *y)     \
    {                                                                                        \
        nrt_k::cn_to_nc<C, HW>(n, total, x, y);                                              \
    }                                                                                        \
    extern "C" __global__ void id##_nc_to_cn(int total, int n, const float *x, float *y)     \
    {                                                                                        \
        nrt_k::nc_to_cn<C, HW>(n, total, x, y);                                              \
    }                                                                                        \
    template <>                                                                              \
    TransposeKernels transpose_kernels<C, HW>()                                              \
    {                                                                                        \
        return {KERNEL(id##_cn_to_nc), KERNEL(id##_nc_to_cn)};                               \
    }

TRANSPOSE_KERNELS(flat_3x1024, 3, 1024)
TRANSPOSE_KERNELS(flat_64x16, 64, 16)
TRANSPOSE_KERNELS(flat_5x7, 5, 7)

/* Batch normalization over C channels of HW values, [n, C, HW] or channel
 * first, a block of BN_THREADS a channel, as netc writes it:
 * BN_KERNELS(id, C, HW, CN). */
constexpr int BN_THREADS = 256;

struct BnKernels {
    int train, eval, bwd;
};

template <int C, int HW, bool CN>
BnKernels bn_kernels() = delete;

#define BN_KERNELS(id, C, HW, CN)                                                            \
    extern "C" __global__ void id##_train(int n, const float *x, const float *w,             \
                                          const float *b, float *rm, float *rv,              \
                                          long long *nbt, float *stats, float *y)            \
    {                                                                                        \
        nrt_k::batchnorm_train<C, HW, CN, BN_THREADS>(n, x, w, b, rm, rv, nbt, stats, y,     \
                                                      1e-5f, 0.1f);                          \
    }                                                                                        \
    extern "C" __global__ void id##_eval(int n, const float *x, const float *w,              \
                                         const float *b, const float *rm, const float *rv,   \
                                         float *y)                                           \
    {                                                                                        \
        nrt_k::batchnorm_eval<C, HW, CN, BN_THREADS>(n, x, w, b, rm, rv, y, 1e-5f);          \
    }                                                                                        \
    extern "C" __global__ void id##_bwd(int n, const float *x, const float *dy,              \
                                        const float *w, const float *stats, float *dw,       \
                                        float *db, float *dx)                                \
    {                                                                                        \
        nrt_k::batchnorm_bwd<C, HW, CN, BN_THREADS>(n, x, dy, w, stats, dw, db, dx);         \
    }                                                                                        \
    template <>                                                                              \
    BnKernels bn_kernels<C, HW, CN>()                                                        \
    {                                                                                        \
        return {KERNEL(id##_train), KERNEL(id##_eval), KERNEL(id##_bwd)};                    \
    }

BN_KERNELS(bn_16x64_cn, 16, 64, true)
BN_KERNELS(bn_3x81_nc, 3, 81, false)
BN_KERNELS(bn_64x1_nc, 64, 1, false)

/* ------------------------------------------------------------ launches */

/* A kernel's arguments after the ones its launcher adds, as the array of
 * their addresses and its length: NRT_ARGS(&a, &b) in generated C, a
 * compound literal, which C++ lacks; here a named array a and ARGS(a). */
#define ARGS(a) (a), (int)std::size(a)

/* A conv2d layer's launches, with the numbers netc writes (compiler/ops.c
 * conv2d_cu_fwd, conv2d_cu_bwd): y [O, n*OH*OW] = W cols(x); dW; dx. */
template <class G>
static int conv_fwd(nrt_cuda_net *net, int k, int n, const float *x, const float *w, float *y,
                    nrt_error *err)
{
    using T = FwdT<G>;
    const nrt_cu_tile tile = {g_kernel_name[k], G::C * G::HW, G::O * G::OHW, G::O, G::OHW,
                              T::BM, T::BN, T::NT};
    void *args[] = {&x, &w, &y, &net->lowp};
    return nrt_cu_igemm(net, k, &tile, n, ARGS(args), err);
}

template <class G>
static int conv_dw(nrt_cuda_net *net, int k, int reduce, int n, const float *x, const float *dy,
                   float *dw, nrt_error *err)
{
    using T = DwT<G>;
    constexpr int max_splits = dw_max_splits((long long)G::O * G::CKK);
    const nrt_cu_dw tile = {g_kernel_name[k], G::C * G::HW, G::O * G::OHW, G::O, G::CKK,
                            G::OHW, T::BM, T::BN, T::BK, T::NT, max_splits};
    /* netc writes no reduce kernel where the sum is never split */
    return nrt_cu_conv2d_dw(net, k, max_splits > 1 ? reduce : -1, &tile, n, x, dy, dw, err);
}

template <class G>
static int conv_dx(nrt_cuda_net *net, int k, int n, const float *w, const float *dy, float *dx,
                   nrt_error *err)
{
    using T = DxT<G>;
    const nrt_cu_tile tile = {g_kernel_name[k], G::O * G::OHW, G::C * G::HW, G::C, G::HW,
                              T::BM, T::BN, T::NT};
    void *args[] = {&w, &dy, &dx, &net->lowp};
    return nrt_cu_igemm(net, k, &tile, n, ARGS(args), err);
}

/* ---------------------------------------------------------------- gemm */

/* In bf16 and fp16 (net->lowp) the operands are low-precision values and
 * the product the tensor cores' (cublasGemmEx): the same exact products,
 * summed in fp32 in some order, so within (k + 2) 2^-24 of the sum of
 * their magnitudes of the cpu's (a sum of k terms in any order is within
 * (k - 1) u of it); the emulated device sums as nrt_sgemm, bit for bit. */
static void test_gemm_one(nrt_cuda_net *net, int ta, int tb, int m, int n, int k, float alpha,
                          float beta, int pad)
{
    const int ar = ta ? k : m, ac = ta ? m : k;
    const int br = tb ? n : k, bc = tb ? k : n;
    const int lda = std::max(ac, 1) + (pad ? 3 : 0), ldb = std::max(bc, 1) + (pad ? 5 : 0);
    const int ldc = n + (pad ? 2 : 0);
    std::vector<float> a = randv((size_t)ar * lda), b = randv((size_t)br * ldb);
    std::vector<float> c = randv((size_t)m * ldc);
    if (net->lowp) {
        nrt_round_lowp(net->lowp, a.data(), a.size());
        nrt_round_lowp(net->lowp, b.data(), b.size());
    }
    std::vector<float> want = c, mag = absv(c);
    nrt_sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
    std::vector<float> aa = absv(a), ba = absv(b);
    nrt_sgemm(ta, tb, m, n, k, fabsf(alpha), aa.data(), lda, ba.data(), ldb, fabsf(beta),
              mag.data(), ldc);
    Dev<float> da(a), db(b), dc(c);
    nrt_error err = {};
    const char *what = name("gemm %s ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g pad=%d",
                            nrt_precision_name(net->lowp), ta, tb, m, n, k, alpha, beta, pad);
    if (!launched(net, nrt_cu_gemm(net, ta, tb, m, n, k, alpha, da.p, lda, db.p, ldb, beta,
                                   dc.p, ldc, &err),
                  err, what))
        return;
    compare(what, dc.get(), want, &mag, net->lowp ? (k + 2) * 0x1p-24 : 1e-5, 1e-30);
}

static void test_gemm(nrt_cuda_net *net)
{
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 100, 75}, {33, 17, 129}, {10, 1, 400},
                             {256, 128, 64}};
    for (auto &s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                test_gemm_one(net, ta, tb, s[0], s[1], s[2], ta ? -0.5f : 1.0f,
                              tb ? 0.75f : 0.0f, (ta + tb) % 2);
    /* only C scaled: k = 0 and alpha = 0, as nrt_sgemm */
    test_gemm_one(net, 0, 0, 5, 6, 0, 1.0f, 0.5f, 1);
    test_gemm_one(net, 0, 1, 5, 6, 7, 0.0f, 0.0f, 0);
    test_gemm_one(net, 1, 0, 5, 6, 7, 0.0f, 2.0f, 1);
}

/* A product of the weights (wlp) reads their 16-bit copy (whalf), which
 * their cast writes (nrt_cu_round_lowp into wlp): with both operands
 * there, no conversion and no buffer (operand16_count 0 would refuse one); the
 * copy holds the cast values' bits, and the product is as test_gemm_one's. */
static void test_gemm_weights(nrt_cuda_net *net)
{
    const int m = 33, n = 7, k = 40, at = 5, bt = at + m * k;
    const size_t np = (size_t)bt + (size_t)k * n + 3, saved_np = g_model.param_count;
    const char *p = nrt_precision_name(net->lowp);
    std::vector<float> param = randv(np), w(np);
    nrt_round_lowp_to(net->lowp, w.data(), param.data(), np);
    std::vector<uint16_t> want_bits(np);
    for (size_t i = 0; i < np; i++)
        want_bits[i] = nrt_half_bits(net->lowp, w[i]);
    std::vector<float> want(m * n, 0.0f), mag(m * n, 0.0f), wa = absv(w);
    nrt_sgemm(0, 0, m, n, k, 1.0f, w.data() + at, k, w.data() + bt, n, 0.0f, want.data(), n);
    nrt_sgemm(0, 0, m, n, k, 1.0f, wa.data() + at, k, wa.data() + bt, n, 0.0f, mag.data(), n);
    Dev<float> dparam(param), dw(np), dc(m * n);
    Dev<uint16_t> dh(np);
    g_model.param_count = np;
    net->wlp = dw.p;
    net->whalf = dh.p;
    const size_t operand16_count = net->operand16_count;
    net->operand16_count = 0;
    nrt_error err = {};
    const std::string what = name("gemm %s of the weights", p);
    if (launched(net, nrt_cu_round_lowp(net, dw.p, dparam.p, np, &err), err, what.c_str()) &&
        launched(net, nrt_cu_gemm(net, 0, 0, m, n, k, 1.0f, dw.p + at, k, dw.p + bt, n, 0.0f,
                                  dc.p, n, &err),
                 err, what.c_str())) {
        compare_exact(name("gemm %s of the weights: their 16-bit copy", p), dh.get(), want_bits);
        compare(what.c_str(), dc.get(), want, &mag, (k + 2) * 0x1p-24, 1e-30);
    }
    CK(cudaStreamSynchronize(net->stream));
    g_model.param_count = saved_np;
    net->wlp = NULL;
    net->whalf = NULL;
    net->operand16_count = operand16_count;
}

/* The products of a bf16 or fp16 run: on the tensor cores, from 16-bit
 * copies of the operands, as long as the longest (an operand longer is
 * refused: the runtime sizes them from the buffers a product reads). */
static void test_gemm_lowp(nrt_cuda_net *net, int prec)
{
    const size_t longest = 256 * (128 + 5);
    Dev<uint16_t> h0(longest), h1(longest);
    net->operand16[0] = h0.p;
    net->operand16[1] = h1.p;
    net->operand16_count = longest;
    net->lowp = prec;
    test_gemm(net);
    Dev<float> a(64 * 65), b(64), c(65);
    nrt_error err = {};
    const int rc = nrt_cu_gemm(net, 0, 0, 65, 1, 64, 1.0f, a.p, 64, b.p, 1, 0.0f, c.p, 1, &err);
    net->operand16_count = 64 * 64;
    const int rc2 = nrt_cu_gemm(net, 0, 0, 65, 1, 64, 1.0f, a.p, 64, b.p, 1, 0.0f, c.p, 1, &err);
    result(rc == 0 && rc2 != 0 && strstr(err.msg, "4160 elements, more than the 4096"),
           "gemm %s: an operand longer than the 16-bit buffers refused: %d, %d (%s)",
           nrt_precision_name(prec), rc, rc2, err.msg);
    test_gemm_weights(net);
    CK(cudaStreamSynchronize(net->stream));
    net->lowp = 0;
    net->operand16[0] = net->operand16[1] = NULL;
    net->operand16_count = 0;
}

/* The tensor cores' mma (nrt_k::mma_16x8x16), one warp, bf16 and fp16:
 * every value of A, B and C at a place of its own (a fragment misplaced
 * moves it), against the cpu's sum of the exact products in double,
 * within 18 2^-24 of the sum of their magnitudes (16 products and C added
 * in fp32, in any order). */
template <bool BF16>
static void test_mma_one(cudaStream_t s)
{
    const int prec = BF16 ? NRT_BF16 : NRT_FP16;
    std::vector<float> a = randv(16 * 16), b = randv(16 * 8), c = randv(16 * 8, 4.0f);
    nrt_round_lowp(prec, a.data(), a.size());
    nrt_round_lowp(prec, b.data(), b.size());
    std::vector<uint16_t> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); i++)
        ah[i] = nrt_half_bits(prec, a[i]);
    for (size_t i = 0; i < b.size(); i++)
        bh[i] = nrt_half_bits(prec, b[i]);
    std::vector<float> want(16 * 8), mag(16 * 8);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double sum = c[i * 8 + j], m = fabs(c[i * 8 + j]);
            for (int k = 0; k < 16; k++) {
                sum += (double)a[i * 16 + k] * b[k * 8 + j];
                m += fabs((double)a[i * 16 + k] * b[k * 8 + j]);
            }
            want[i * 8 + j] = (float)sum;
            mag[i * 8 + j] = (float)m;
        }
    Dev<uint16_t> da(ah), db(bh);
    Dev<float> dc(c), dd(16 * 8);
    if (BF16)
        mma_probe_bf16<<<1, 32, 0, s>>>(da.p, db.p, dc.p, dd.p);
    else
        mma_probe_fp16<<<1, 32, 0, s>>>(da.p, db.p, dc.p, dd.p);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    compare(name("mma_16x8x16 %s", nrt_precision_name(prec)), dd.get(), want, &mag,
            18 * 0x1p-24, 1e-30);
}

/* ldmatrix (nrt_k::ldmatrix_x4, sm_75 on), as the PTX ISA lays out its
 * fragments: lane l's word i holds matrix i's row l / 4, values 2 (l % 4)
 * and the next (the first in the low half); transposed, its column l / 4,
 * rows 2 (l % 4) and the next.  Every value distinct, so a word from the
 * wrong place shows. */
static void test_ldmatrix(cudaStream_t s)
{
    std::vector<uint16_t> m(16 * 16);
    for (size_t i = 0; i < m.size(); i++)
        m[i] = (uint16_t)(0x1000 + 37 * i);
    std::vector<uint32_t> want(32 * 4), want_t(32 * 4);
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const int r0 = 8 * (i % 2), c0 = 8 * (i / 2), g = l / 4, q = l % 4;
            want[l * 4 + i] = m[(r0 + g) * 16 + c0 + 2 * q] |
                              (uint32_t)m[(r0 + g) * 16 + c0 + 2 * q + 1] << 16;
            want_t[l * 4 + i] = m[(r0 + 2 * q) * 16 + c0 + g] |
                                (uint32_t)m[(r0 + 2 * q + 1) * 16 + c0 + g] << 16;
        }
    Dev<uint16_t> dm(m);
    Dev<uint32_t> dr(32 * 4), dt(32 * 4);
    ldmatrix_probe<<<1, 32, 0, s>>>(dm.p, dr.p, dt.p);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    compare_exact("ldmatrix.x4", dr.get(), want);
    compare_exact("ldmatrix.x4.trans", dt.get(), want_t);
}

static void test_mma(nrt_cuda_net *net)
{
    int dev = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8) {
        printf("skip mma_16x8x16: compute capability %d.x, before the tensor cores' mma.m16n8k16\n",
               major);
        return;
    }
    test_ldmatrix(net->stream);
    test_mma_one<true>(net->stream);
    test_mma_one<false>(net->stream);
}

/* --------------------------------------------------------- convolution */

/* nrt_conv2d_dx where it applies (stride 1, PH < KH, PW < KW), else the
 * product w^T dy and nrt_col2im_batch(_cn): the cpu's input gradient. */
static void cpu_conv_dx(const nrt_conv *g, int n, int cn, const float *w, const float *dy,
                        float *dx)
{
    if (g->sh == 1 && g->sw == 1 && g->ph < g->kh && g->pw < g->kw) {
        std::vector<float> scratch((size_t)n * nrt_conv2d_dx_scratch(g) + 1);
        nrt_conv2d_dx(g, n, cn, w, dy, scratch.data(), dx);
        return;
    }
    const int ckk = g->c * g->kh * g->kw, np = n * g->oh * g->ow;
    std::vector<float> col((size_t)ckk * np + 1);
    nrt_sgemm(1, 0, ckk, np, g->o, 1.0f, w, ckk, dy, np, 0.0f, col.data(), np);
    if (cn)
        nrt_col2im_batch_cn(col.data(), n, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph,
                            g->pw, g->oh, g->ow, dx);
    else
        nrt_col2im_batch(col.data(), n, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->ph,
                         g->pw, g->oh, g->ow, dx);
}

/* The tolerance of a product's sum of k terms against the cpu's: in fp32
 * 1e-5 of the sum of the magnitudes; on the tensor cores (a bf16 or fp16
 * run's net->lowp: exact products, fp32 sums in the hardware's order,
 * possibly truncated) (k + 2) 2^-23 of it, at least that.  The emulated
 * device sums as the fp32 kernels do, bit for bit. */
static double sum_tol(const nrt_cuda_net *net, long long k)
{
    return net->lowp ? std::max(1e-5, (double)(k + 2) * 0x1p-23) : 1e-5;
}

/* The input gradient into either layout (CN_OUT: [C, n, H, W]), by kernel
 * k (the geometry's dx_cn or dx_nc). */
template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN_OUT>
static void test_conv_dx(nrt_cuda_net *net, int k, const char *geo, int n,
                         const std::vector<float> &w, const std::vector<float> &dy)
{
    using G = nrt_k::ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW>;
    const nrt_conv g = {C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, NRT_DOT_F32, NULL};
    const size_t xs = (size_t)n * C * H * W;
    std::vector<float> want(xs), mag(xs);
    cpu_conv_dx(&g, n, CN_OUT, w.data(), dy.data(), want.data());
    cpu_conv_dx(&g, n, CN_OUT, absv(w).data(), absv(dy).data(), mag.data());
    Dev<float> dw(w), ddy(dy), ddx(xs);
    nrt_error err = {};
    const char *what = name("conv2d_dx %s %s n=%d %s", nrt_precision_name(net->lowp), geo, n,
                            CN_OUT ? "CN" : "NC");
    if (!launched(net, conv_dx<G>(net, k, n, dw.p, ddy.p, ddx.p, &err), err, what))
        return;
    compare(what, ddx.get(), want, &mag, sum_tol(net, (long long)O * KH * KW), 1e-30);
}

template <int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
          int PW, bool CN>
static void test_conv(nrt_cuda_net *net, const char *geo, std::initializer_list<int> batches)
{
    using G = nrt_k::ConvGeom<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW>;
    const ConvKernels k = conv_kernels<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, CN>();
    const nrt_conv g = {C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, NRT_DOT_F32, NULL};
    const int CKK = C * KH * KW;
    for (int n : batches) {
        const size_t xs = (size_t)n * C * H * W, ys = (size_t)O * n * OH * OW;
        const size_t ws = (size_t)O * CKK;
        const size_t xps = (size_t)C * n * (H + 2 * PH) * (W + 2 * PW);
        std::vector<float> x = randv(xs), w = randv(ws), dy = randv(ys);
        if (net->lowp) { /* a bf16 or fp16 run's products read rounded values */
            nrt_round_lowp(net->lowp, x.data(), xs);
            nrt_round_lowp(net->lowp, w.data(), ws);
            nrt_round_lowp(net->lowp, dy.data(), ys);
        }
        const char *p = nrt_precision_name(net->lowp);
        std::vector<float> xp(xps), xpa(xps);
        nrt_conv2d_pad(&g, n, CN, x.data(), xp.data());
        nrt_conv2d_pad(&g, n, CN, absv(x).data(), xpa.data());
        nrt_error err = {};
        Dev<float> dx(x), dw(w), ddy(dy);

        { /* forward */
            std::vector<float> want(ys), mag(ys);
            nrt_conv2d_fwd(&g, n, w.data(), NULL, xp.data(), want.data());
            nrt_conv2d_fwd(&g, n, absv(w).data(), NULL, xpa.data(), mag.data());
            Dev<float> y(ys);
            const char *what = name("conv2d_fwd %s %s n=%d %s", p, geo, n, CN ? "CN" : "NC");
            if (launched(net, conv_fwd<G>(net, k.fwd, n, dx.p, dw.p, y.p, &err), err, what))
                compare(what, y.get(), want, &mag, sum_tol(net, CKK), 1e-30);
        }
        { /* weight gradient, twice: the same bits, in exactly the workspace
             * netc gives the layer */
            constexpr size_t wbytes = dw_workspace<G>();
            Dev<char> wsp(wbytes ? wbytes : 1);
            void *const saved = net->workspace;
            const size_t saved_bytes = net->workspace_bytes;
            net->workspace = wbytes ? wsp.p : NULL;
            net->workspace_bytes = wbytes;
            std::vector<float> want(ws), mag(ws);
            nrt_conv2d_dw(&g, n, dy.data(), xp.data(), want.data());
            nrt_conv2d_dw(&g, n, absv(dy).data(), xpa.data(), mag.data());
            Dev<float> gw(ws);
            const char *what = name("conv2d_dw %s %s n=%d %s", p, geo, n, CN ? "CN" : "NC");
            if (launched(net, conv_dw<G>(net, k.dw, k.dw_reduce, n, dx.p, ddy.p, gw.p, &err),
                         err, what)) {
                const std::vector<float> first = gw.get();
                compare(what, first, want, &mag, sum_tol(net, (long long)n * OH * OW), 1e-30);
                gw.poison();
                if (launched(net,
                             conv_dw<G>(net, k.dw, k.dw_reduce, n, dx.p, ddy.p, gw.p, &err),
                             err, what))
                    compare_exact(name("conv2d_dw %s %s n=%d %s: deterministic", p, geo, n,
                                       CN ? "CN" : "NC"),
                                  gw.get(), first);
            }
            net->workspace = saved;
            net->workspace_bytes = saved_bytes;
        }
        test_conv_dx<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, false>(net, k.dx_nc, geo, n, w,
                                                                        dy);
        test_conv_dx<C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, true>(net, k.dx_cn, geo, n, w,
                                                                       dy);
    }
}

static void test_convs(nrt_cuda_net *net)
{
    /* cifar10's shapes: 5x5 / pad 2 and 3x3 / pad 1 */
    test_conv<3, 32, 32, 32, 32, 32, 5, 5, 1, 1, 2, 2, false>(net, "3x32x32->32 k5 p2", {1, 3, 64});
    test_conv<32, 16, 16, 64, 16, 16, 5, 5, 1, 1, 2, 2, true>(net, "32x16x16->64 k5 p2",
                                                              {1, 5, 32});
    test_conv<64, 8, 8, 64, 8, 8, 3, 3, 1, 1, 1, 1, true>(net, "64x8x8->64 k3 p1", {1, 7, 128});
    /* LeNet: no padding, few output channels (the 16-row tiles) */
    test_conv<3, 32, 32, 6, 28, 28, 5, 5, 1, 1, 0, 0, false>(net, "3x32x32->6 k5", {1, 2, 33});
    test_conv<6, 14, 14, 16, 10, 10, 5, 5, 1, 1, 0, 0, true>(net, "6x14x14->16 k5", {1, 9});
    /* strides and padding */
    test_conv<5, 11, 9, 7, 6, 5, 3, 3, 2, 2, 1, 1, false>(net, "5x11x9->7 k3 s2 p1", {1, 2, 9});
    test_conv<3, 13, 13, 17, 7, 7, 5, 5, 2, 2, 2, 2, true>(net, "3x13x13->17 k5 s2 p2", {1, 4});
    test_conv<4, 7, 10, 19, 5, 4, 3, 2, 1, 3, 0, 1, true>(net, "4x7x10->19 k3x2 s1x3 p0x1",
                                                          {1, 3, 4});
    test_conv<2, 9, 8, 3, 3, 3, 4, 4, 3, 3, 1, 1, false>(net, "2x9x8->3 k4 s3 p1", {1, 5});
    /* 1x1, more output channels than a tile (65 = 64 + 1) */
    test_conv<33, 5, 5, 65, 5, 5, 1, 1, 1, 1, 0, 0, false>(net, "33x5x5->65 k1", {1, 2, 13});
}

/* A bf16 or fp16 run's convolutions, on the tensor cores where the GPU has
 * them: every tiling (16, 32 and 64 rows), edges, strides, both layouts. */
static void test_convs_lowp(nrt_cuda_net *net, int prec)
{
    net->lowp = prec;
    test_conv<32, 16, 16, 64, 16, 16, 5, 5, 1, 1, 2, 2, true>(net, "32x16x16->64 k5 p2", {3});
    test_conv<6, 14, 14, 16, 10, 10, 5, 5, 1, 1, 0, 0, true>(net, "6x14x14->16 k5", {2});
    test_conv<5, 11, 9, 7, 6, 5, 3, 3, 2, 2, 1, 1, false>(net, "5x11x9->7 k3 s2 p1", {3});
    test_conv<33, 5, 5, 65, 5, 5, 1, 1, 1, 1, 0, 0, false>(net, "33x5x5->65 k1", {2});
    net->lowp = 0;
}

/* -------------------------------------------------------------- pooling */

/* planes planes of H x W (n*C whatever the layout): one thread an output
 * value (forward) or an input value (backward), as netc launches them. */
template <int H, int W, int OH, int OW, int K, int S, int P>
static void test_pool(nrt_cuda_net *net, const char *geo, std::initializer_list<int> plane_counts,
                      bool ties, bool nans)
{
    const PoolKernels k = pool_kernels<H, W, OH, OW, K, S, P>();
    for (int planes : plane_counts) {
        const size_t xs = (size_t)planes * H * W, ys = (size_t)planes * OH * OW;
        std::vector<float> x(xs), dy = randv(ys);
        for (auto &v : x)
            v = ties ? (float)(int)(3.0f * frand()) : frand();
        if (nans)
            for (size_t i = 0; i < xs; i += 7 + i % 5)
                x[i] = NAN;
        nrt_error err = {};
        Dev<float> dx(x), ddy(dy);
        const char *tag = nans ? " nan" : ties ? " ties" : "";

        std::vector<float> y(ys);
        std::vector<int32_t> arg(ys);
        nrt_maxpool2d_fwd(x.data(), planes, 1, H, W, K, S, P, OH, OW, y.data(), arg.data());
        Dev<float> gy(ys);
        Dev<int32_t> garg(ys);
        void *fwd_args[] = {&dx.p, &gy.p, &garg.p};
        if (launched(net,
                     nrt_cu_each_int(net, k.max_fwd, (long long)planes * OH * OW,
                                     ARGS(fwd_args), &err),
                     err, "maxpool2d_fwd")) {
            compare_exact(name("maxpool2d_fwd %s planes=%d%s: y", geo, planes, tag), gy.get(), y);
            compare_exact(name("maxpool2d_fwd %s planes=%d%s: argmax", geo, planes, tag),
                          garg.get(), arg);
        }
        std::vector<float> gx(xs);
        nrt_maxpool2d_bwd(dy.data(), arg.data(), planes, 1, H, W, K, S, P, OH, OW, gx.data());
        Dev<int32_t> carg(arg);
        Dev<float> gdx(xs);
        void *bwd_args[] = {&ddy.p, &carg.p, &gdx.p};
        if (launched(net,
                     nrt_cu_each_int(net, k.max_bwd, (long long)planes * H * W, ARGS(bwd_args),
                                     &err),
                     err, "maxpool2d_bwd"))
            compare_exact(name("maxpool2d_bwd %s planes=%d%s", geo, planes, tag), gdx.get(), gx);

        if (nans)
            continue;
        nrt_avgpool2d_fwd(x.data(), planes, 1, H, W, K, S, P, OH, OW, y.data());
        gy.poison();
        void *avg_fwd_args[] = {&dx.p, &gy.p};
        if (launched(net,
                     nrt_cu_each_int(net, k.avg_fwd, (long long)planes * OH * OW,
                                     ARGS(avg_fwd_args), &err),
                     err, "avgpool2d_fwd"))
            compare_exact(name("avgpool2d_fwd %s planes=%d%s", geo, planes, tag), gy.get(), y);
        nrt_avgpool2d_bwd(dy.data(), planes, 1, H, W, K, S, P, OH, OW, gx.data());
        gdx.poison();
        void *avg_bwd_args[] = {&ddy.p, &gdx.p};
        if (launched(net,
                     nrt_cu_each_int(net, k.avg_bwd, (long long)planes * H * W,
                                     ARGS(avg_bwd_args), &err),
                     err, "avgpool2d_bwd"))
            compare_exact(name("avgpool2d_bwd %s planes=%d%s", geo, planes, tag), gdx.get(), gx);
    }
}

static void test_pools(nrt_cuda_net *net)
{
    test_pool<32, 32, 16, 16, 2, 2, 0>(net, "32x32 k2 s2", {1, 3, 64 * 32}, false, false);
    test_pool<32, 32, 16, 16, 2, 2, 0>(net, "32x32 k2 s2", {5}, true, false);
    test_pool<32, 32, 16, 16, 2, 2, 0>(net, "32x32 k2 s2", {5}, false, true);
    test_pool<7, 7, 3, 3, 2, 2, 0>(net, "7x7 k2 s2 (odd)", {1, 6}, true, false);
    test_pool<7, 9, 4, 5, 3, 2, 1>(net, "7x9 k3 s2 p1", {1, 7}, false, false);
    test_pool<7, 9, 4, 5, 3, 2, 1>(net, "7x9 k3 s2 p1", {7}, true, false);
    test_pool<7, 9, 4, 5, 3, 2, 1>(net, "7x9 k3 s2 p1", {7}, false, true);
    test_pool<8, 8, 8, 8, 3, 1, 1>(net, "8x8 k3 s1 p1", {1, 10}, true, false);
    test_pool<9, 9, 4, 4, 3, 2, 0>(net, "9x9 k3 s2", {3}, false, false);
    test_pool<5, 6, 2, 2, 2, 3, 0>(net, "5x6 k2 s3 (gaps)", {1, 4}, false, false);
    test_pool<4, 4, 1, 1, 4, 4, 0>(net, "4x4 k4 (global)", {1, 9}, true, false);
    test_pool<10, 10, 5, 5, 4, 2, 2>(net, "10x10 k4 s2 p2", {2}, false, false);
}

/* -------------------------------------------------------------- dropout */

static void set_step(nrt_cuda_net *net, unsigned long long step)
{
    CK(cudaMemcpy(net->step, &step, sizeof step, cudaMemcpyHostToDevice));
}

/* The cpu runtime's masks for the same key, layer and step. */
static void want_dropout(uint64_t key, uint32_t layer, uint64_t step, double p,
                         const std::vector<float> &x, std::vector<float> &mask,
                         std::vector<float> &y)
{
    nrt_net cpu = {};
    cpu.dropout_key = key;
    cpu.step = step;
    mask.resize(x.size());
    y.resize(x.size());
    nrt_dropout_fwd(&cpu, layer, x.data(), y.data(), mask.data(), x.size(), p);
}

static void test_dropout(nrt_cuda_net *net)
{
    const double ps[] = {0.0, 0.25, 0.5, 0.9, 1.0};
    const size_t counts[] = {1, 1000, ((size_t)1 << 20) + 3};
    unsigned long long step = 41;
    const int bwd = KERNEL(dropout_bwd);
    for (double p : ps)
        for (size_t count : counts) {
            step += 1;
            set_step(net, step);
            std::vector<float> x = randv(count), dy = randv(count), mask, y;
            want_dropout(net->dropout_key, 3, step, p, x, mask, y);
            Dev<float> dx(x), ddy(dy), gy(count), gm(count), gdx(count);
            nrt_error err = {};
            if (!launched(net, nrt_cu_dropout_fwd(net, 3, dx.p, gy.p, gm.p, count, p, &err), err,
                          "dropout_fwd"))
                continue;
            const std::vector<float> hm = gm.get();
            compare_exact(name("dropout_fwd p=%g count=%zu step=%llu: mask", p, count, step), hm,
                          mask);
            compare_exact(name("dropout_fwd p=%g count=%zu step=%llu: y", p, count, step),
                          gy.get(), y);
            if (count > 1000) {
                size_t dropped = 0;
                for (float m : hm)
                    dropped += m == 0.0f;
                const double frac = (double)dropped / count;
                const double sd = sqrt(p * (1 - p) / count);
                result(fabs(frac - p) <= 5 * sd + 1e-12,
                       "dropout_fwd p=%g count=%zu: %.5f dropped", p, count, frac);
            }
            std::vector<float> want(count);
            for (size_t i = 0; i < count; i++)
                want[i] = dy[i] * mask[i];
            void *bwd_args[] = {&ddy.p, &gm.p, &gdx.p};
            if (launched(net, nrt_cu_each(net, bwd, count, ARGS(bwd_args), &err), err,
                         "dropout_bwd"))
                compare_exact(name("dropout_bwd p=%g count=%zu", p, count), gdx.get(), want);
        }

    /* A captured graph reads the step when replayed: new masks each time. */
    const size_t count = 4099;
    const double p = 0.5;
    std::vector<float> x = randv(count);
    Dev<float> dx(x), gy(count), gm(count);
    nrt_error err = {};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(net->stream, cudaStreamCaptureModeThreadLocal));
    const int rc = nrt_cu_dropout_fwd(net, 3, dx.p, gy.p, gm.p, count, p, &err);
    CK(cudaStreamEndCapture(net->stream, &graph));
    if (rc != 0) {
        result(false, "dropout_fwd captured: %s", err.msg);
        return;
    }
    CK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<float> prev;
    for (unsigned long long s : {1000ULL, 1001ULL, 0x123456789ULL}) {
        set_step(net, s);
        CK(cudaGraphLaunch(exec, net->stream));
        CK(cudaStreamSynchronize(net->stream));
        std::vector<float> mask, y;
        want_dropout(net->dropout_key, 3, s, p, x, mask, y);
        const std::vector<float> hm = gm.get();
        compare_exact(name("dropout_fwd in a graph, step %llu: mask", s), hm, mask);
        if (!prev.empty())
            result(hm != prev, "dropout_fwd in a graph, step %llu: a new mask", s);
        prev = hm;
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
}

/* --------------------------------------------------------------- losses */

template <int K>
static void test_xent(nrt_cuda_net *net, std::initializer_list<int> batches)
{
    const int k = xent_kernel<K>();
    for (int n : batches)
        for (int variant = 0; variant < 4; variant++) {
            /* 0 plain, 1 a label out of range, 2 a NaN, 3 an infinity */
            if (variant && n < 3)
                continue;
            std::vector<float> logits = randv((size_t)n * K, 4.0f);
            std::vector<int32_t> label(n);
            for (int i = 0; i < n; i++)
                label[i] = (int32_t)nrt_rng_below(&g_rng, K);
            /* a row with -inf entries is fine */
            if (n > 1 && K > 1)
                logits[(size_t)1 * K + (label[1] + 1) % K] = -INFINITY;
            if (variant == 1)
                label[n / 2] = (n % 2) ? K : -1;
            if (variant == 2)
                logits[(size_t)(n / 2) * K + K / 2] = NAN;
            if (variant == 3)
                logits[(size_t)(n - 1) * K] = INFINITY;
            const char *vname[] = {"", " bad label", " NaN", " inf"};
            std::vector<float> want_d((size_t)n * K);
            const float want = nrt_xent(logits.data(), label.data(), n, K, want_d.data());
            const float want_nog = nrt_xent(logits.data(), label.data(), n, K, NULL);
            Dev<float> dl(logits), dd((size_t)n * K), dloss(1);
            Dev<int32_t> dlab(label);
            nrt_error err = {};
            const std::vector<float> w1 = {want}, w0 = {want_nog};
            const char *what = name("xent K=%d n=%d%s", K, n, vname[variant]);
            if (launched(net, nrt_cu_xent(net, k, dl.p, dlab.p, n, dd.p, dloss.p, &err), err,
                         what)) {
                compare(name("xent K=%d n=%d%s: loss", K, n, vname[variant]), dloss.get(), w1,
                        NULL, 1e-5, 1e-30);
                std::vector<float> mag(want_d.size());
                for (size_t i = 0; i < mag.size(); i++)
                    mag[i] = fabsf(want_d[i]) + 1.0f / n;
                compare(name("xent K=%d n=%d%s: gradient", K, n, vname[variant]), dd.get(),
                        want_d, &mag, 1e-5, 1e-30);
            }
            dloss.poison();
            if (launched(net, nrt_cu_xent(net, k, dl.p, dlab.p, n, NULL, dloss.p, &err), err,
                         what))
                compare(name("xent K=%d n=%d%s: loss without gradient", K, n, vname[variant]),
                        dloss.get(), w0, NULL, 1e-5, 1e-30);
        }
}

/* Every pointwise loss (the model's, net->model->loss), with arguments 0
 * (smooth_l1's l1), 0.5 and 1; every eighth target equal to its output
 * (e = 0, sign(0)). */
static void test_losses(nrt_cuda_net *net)
{
    const int shapes[][2] = {{1, 1}, {7, 3}, {1024, 10}, {1000, 1000}, {3, 0}};
    const float args[] = {0.0f, 0.5f, 1.0f};
    for (int kind = NRT_LOSS_NONE + 1; kind < NRT_LOSS_KINDS; kind++)
        for (float arg : args)
            for (auto &s : shapes) {
                const int n = s[0], d = s[1];
                const size_t nd = (size_t)n * d;
                std::vector<float> y = randv(nd, 3.0f), t = randv(nd, 3.0f), dy(nd);
                for (size_t i = 0; i < nd; i += 8)
                    t[i] = y[i];
                g_model.loss = {kind, arg};
                const char *lname = nrt_loss_name(kind);
                const float want = nrt_loss(&g_model.loss, y.data(), t.data(), n, d, dy.data());
                Dev<float> gy(y), gt(t), gdy(nd), gl(1);
                nrt_error err = {};
                const std::vector<float> w = {want};
                if (launched(net, nrt_cu_loss(net, gy.p, gt.p, n, d, gdy.p, gl.p, &err), err,
                             lname)) {
                    compare(name("%s(%g) n=%d d=%d: loss", lname, arg, n, d), gl.get(), w, NULL,
                            1e-6, 1e-30);
                    compare_exact(name("%s(%g) n=%d d=%d: dy", lname, arg, n, d), gdy.get(), dy);
                }
                gl.poison();
                if (launched(net, nrt_cu_loss(net, gy.p, gt.p, n, d, NULL, gl.p, &err), err,
                             lname))
                    compare(name("%s(%g) n=%d d=%d: loss without gradient", lname, arg, n, d),
                            gl.get(), w, NULL, 1e-6, 1e-30);
            }
    g_model.loss = {NRT_LOSS_NONE, 0.0f};
}

/* ----------------------------------------------------------------- sums */

static void test_sums(nrt_cuda_net *net)
{
    const int cshapes[][2] = {{1, 1}, {1, 10}, {7, 33}, {1024, 10}, {1000, 513}, {64, 4096}};
    for (auto &s : cshapes) {
        const int rows = s[0], cols = s[1];
        std::vector<float> a = randv((size_t)rows * cols), want(cols), mag(cols);
        nrt_col_sums(a.data(), rows, cols, want.data());
        nrt_col_sums(absv(a).data(), rows, cols, mag.data());
        Dev<float> ga(a), go(cols);
        nrt_error err = {};
        if (launched(net, nrt_cu_col_sums(net, ga.p, rows, cols, go.p, &err), err, "col_sums"))
            compare(name("col_sums rows=%d cols=%d", rows, cols), go.get(), want, &mag, 1e-5,
                    1e-30);
    }
    /* rows of float4s, rows of floats (odd lengths; a misaligned start) */
    const long long rshapes[][3] = {{1, 1, 0},     {3, 7, 0},          {64, 64 * 1024, 0},
                                    {6, 1 << 20, 0}, {5, 1000003, 0}, {200, 300, 0},
                                    {4, 1024, 1},  {32, 1024 * 1024, 0}};
    for (auto &s : rshapes) {
        const int rows = (int)s[0];
        const size_t cols = (size_t)s[1];
        const int off = (int)s[2];
        std::vector<float> a = randv((size_t)rows * cols), want(rows), mag(rows);
        nrt_row_sums(a.data(), rows, cols, want.data());
        nrt_row_sums(absv(a).data(), rows, cols, mag.data());
        std::vector<float> padded(off, 0.0f);
        padded.insert(padded.end(), a.begin(), a.end());
        Dev<float> ga(padded), go(rows);
        nrt_error err = {};
        if (launched(net, nrt_cu_row_sums(net, ga.p + off, rows, cols, go.p, &err), err,
                     "row_sums")) {
            const std::vector<float> first = go.get();
            compare(name("row_sums rows=%d cols=%zu%s", rows, cols, off ? " misaligned" : ""),
                    first, want, &mag, 1e-5, 1e-30);
            go.poison();
            if (launched(net, nrt_cu_row_sums(net, ga.p + off, rows, cols, go.p, &err), err,
                         "row_sums"))
                compare_exact(name("row_sums rows=%d cols=%zu: deterministic", rows, cols),
                              go.get(), first);
        }
    }
}

/* ------------------------------------------------------------ rounding */

/* nrt_cu_round_lowp against the cpu's nrt_round_lowp_to, bit for bit, in
 * bf16 and in fp16: random values of every magnitude, and the cases the
 * rounding has —
 * ties to even either way, a carry into the exponent, the largest values
 * (to infinity), subnormals, signed zeros, infinities, NaNs quiet and
 * signalling; in place and into another buffer.  And a value kept in 16
 * bits (a run's 16-bit plan): nrt_cu_half_round_keep, nrt_cu_half_keep
 * and nrt_cu_half_load against the cpu's nrt_half_round_keep, _keep and
 * _load. */
static std::vector<uint32_t> bits(const std::vector<float> &v) /* NaNs' too */
{
    std::vector<uint32_t> u(v.size());
    if (!v.empty())
        memcpy(u.data(), v.data(), v.size() * sizeof(float));
    return u;
}

static void test_round_lowp(nrt_cuda_net *net, int prec)
{
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu,
                                0xff7fffffu, 0x7f7f8000u, 0x00000001u, 0x00008000u, 0x00018000u,
                                0x80000000u, 0x00000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0x7f800001u, 0xff800001u, 0x7fffffffu,
                                /* fp16's: its largest, the tie past it, subnormals and
                                 * their ties, mantissa ties */
                                0x477fe000u, 0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x38800000u,
                                0x387fffffu, 0x33800000u, 0x33000000u, 0x33000001u, 0xb3400000u,
                                0x3f801000u, 0x3f803000u};
    for (size_t count : {(size_t)1, (size_t)18, (size_t)1000, (size_t)(1 << 20) + 3}) {
        std::vector<float> x(count), want(count);
        for (size_t i = 0; i < count; i++) {
            uint32_t u = (uint32_t)(nrt_rng_uniform(&g_rng) * 4294967296.0);
            if (i < sizeof special / sizeof *special)
                u = special[i];
            memcpy(&x[i], &u, sizeof u);
        }
        nrt_round_lowp_to(prec, want.data(), x.data(), count);
        Dev<float> gx(x), gy(count);
        nrt_error err = {};
        const char *p = nrt_precision_name(prec);
        net->lowp = prec;
        if (launched(net, nrt_cu_round_lowp(net, gy.p, gx.p, count, &err), err, "round_lowp"))
            compare_exact(name("round_lowp %s count=%zu", p, count), bits(gy.get()), bits(want));
        if (launched(net, nrt_cu_round_lowp(net, gx.p, gx.p, count, &err), err, "round_lowp"))
            compare_exact(name("round_lowp %s count=%zu in place", p, count), bits(gx.get()),
                          bits(want));
        /* scaled by the loss scale, read on the device (fp16's dlast) */
        std::vector<float> scaled = x;
        nrt_round_lowp_scaled(prec, scaled.data(), count, 1024.0f);
        Dev<float> gz(x), gs(std::vector<float>{1024.0f});
        net->loss_scale = gs.p;
        if (launched(net, nrt_cu_round_lowp_scaled(net, gz.p, count, &err), err,
                     "round_lowp_scaled"))
            /* (bit for bit but the NaNs: a GPU's product of a NaN is its
             * canonical NaN, the cpu's the NaN quieted) */
            compare_exact(name("round_lowp_scaled %s count=%zu", p, count), gz.get(), scaled);
        net->loss_scale = NULL;
        net->lowp = 0;
        std::vector<float> kept = x, loaded(count);
        std::vector<uint16_t> h(count), h_rounded(count);
        nrt_half_round_keep(prec, h.data(), kept.data(), count);
        nrt_half_keep(prec, h_rounded.data(), kept.data(), count);
        nrt_half_load(prec, loaded.data(), h.data(), count);
        Dev<float> gk(x), gl(count);
        Dev<uint16_t> gh(count), gh2(count);
        net->half = prec;
        if (launched(net, nrt_cu_half_round_keep(net, gh.p, gk.p, count, &err), err,
                     "half_round_keep")) {
            compare_exact(name("half_round_keep %s count=%zu: the bits", p, count), gh.get(), h);
            compare_exact(name("half_round_keep %s count=%zu: the values", p, count),
                          bits(gk.get()), bits(kept));
        }
        if (launched(net, nrt_cu_half_keep(net, gh2.p, gk.p, count, &err), err, "half_keep"))
            compare_exact(name("half_keep %s count=%zu", p, count), gh2.get(), h_rounded);
        if (launched(net, nrt_cu_half_load(net, gl.p, gh.p, count, &err), err, "half_load"))
            compare_exact(name("half_load %s count=%zu", p, count), bits(gl.get()), bits(loaded));
        net->half = 0;
    }
}

/* ----------------------------------------------------------- transposes */

template <int C, int HW>
static void test_transpose(nrt_cuda_net *net, std::initializer_list<int> batches)
{
    const TransposeKernels k = transpose_kernels<C, HW>();
    for (int n : batches) {
        const size_t total = (size_t)n * C * HW;
        std::vector<float> x = randv(total), want(total);
        for (int s = 0; s < n; s++)
            for (int c = 0; c < C; c++)
                for (int i = 0; i < HW; i++)
                    want[((size_t)s * C + c) * HW + i] = x[((size_t)c * n + s) * HW + i];
        Dev<float> gx(x), gy(total), gz(total);
        nrt_error err = {};
        void *fwd_args[] = {&n, &gx.p, &gy.p};
        if (launched(net, nrt_cu_each_int(net, k.cn_to_nc, (long long)n * C * HW, ARGS(fwd_args),
                                          &err),
                     err, "cn_to_nc"))
            compare_exact(name("cn_to_nc C=%d HW=%d n=%d", C, HW, n), gy.get(), want);
        void *bwd_args[] = {&n, &gy.p, &gz.p};
        if (launched(net, nrt_cu_each_int(net, k.nc_to_cn, (long long)n * C * HW, ARGS(bwd_args),
                                          &err),
                     err, "nc_to_cn"))
            compare_exact(name("nc_to_cn C=%d HW=%d n=%d (round trip)", C, HW, n), gz.get(), x);
    }
}

/* ---------------------------------------------------------------- bench */

/* ------------------------------------------------------ batch normalization */

/* nrt_k::batchnorm_* against the cpu's nrt_batchnorm_*: the outputs, the
 * saved statistics, the running statistics and the count after a training
 * step, evaluation from them, and the gradients (sums in double on both
 * sides, in other orders: within a few float ulps). */
template <int C, int HW, bool CN>
static void test_batchnorm(nrt_cuda_net *net, const char *geo, std::initializer_list<int> batches)
{
    const BnKernels k = bn_kernels<C, HW, CN>();
    const nrt_bn g = {C, HW, CN, 1e-5f, 0.1f};
    for (int n : batches) {
        const size_t xs = (size_t)n * C * HW;
        std::vector<float> x = randv(xs, 3.0f), dy = randv(xs), w = randv(C), b = randv(C);
        for (size_t i = 0; i < xs; i++)
            x[i] += 0.5f; /* a mean away from 0 */
        std::vector<float> rm = randv(C, 0.1f), rv = absv(randv(C)), y(xs), stats(2 * C);
        std::vector<float> crm = rm, crv = rv;
        int64_t cnbt = 4;
        nrt_batchnorm_train(&g, n, x.data(), w.data(), b.data(), crm.data(), crv.data(), &cnbt,
                            stats.data(), y.data());
        Dev<float> dx_(x), dw(w), db(b), drm(rm), drv(rv), dstats(2 * C), dout(xs), ddy(dy);
        Dev<long long> dnbt(std::vector<long long>{4});
        nrt_error err = {};
        void *train_args[] = {&n, &dx_.p, &dw.p, &db.p, &drm.p, &drv.p, &dnbt.p, &dstats.p,
                              &dout.p};
        if (launched(net, nrt_cu_launch(net, k.train, C, 1, 1, BN_THREADS, ARGS(train_args), &err),
                     err, "batchnorm_train")) {
            /* y = w (x - mean) invstd + b: x - mean rounds at x's scale and
             * invstd (up to 1/sqrt(eps)) magnifies it, so the tolerance is
             * relative to |w| (|x| + |mean|) invstd + |b| (at n=2, where
             * two samples close together make x - mean small, an H200 ran
             * 1.04 times past a tolerance relative to |y|) */
            std::vector<float> mag(xs);
            for (size_t i = 0; i < xs; i++) {
                const int c = CN ? (int)(i / ((size_t)n * HW)) : (int)(i / HW % C);
                mag[i] = fabsf(w[c]) * (fabsf(x[i]) + fabsf(stats[c])) * stats[C + c] +
                         fabsf(b[c]);
            }
            compare(name("batchnorm_train %s n=%d: y", geo, n), dout.get(), y, &mag, 1e-5,
                    1e-5);
            compare(name("batchnorm_train %s n=%d: mean, 1/std", geo, n), dstats.get(), stats,
                    nullptr, 1e-6, 1e-7);
            compare(name("batchnorm_train %s n=%d: running_mean", geo, n), drm.get(), crm,
                    nullptr, 1e-6, 1e-7);
            compare(name("batchnorm_train %s n=%d: running_var", geo, n), drv.get(), crv,
                    nullptr, 1e-6, 1e-7);
            result(dnbt.get()[0] == 5, "batchnorm_train %s n=%d: num_batches_tracked %lld, "
                   "want 5", geo, n, dnbt.get()[0]);
        }

        nrt_batchnorm_eval(&g, n, x.data(), w.data(), b.data(), crm.data(), crv.data(), y.data());
        Dev<float> erm(crm), erv(crv);
        dout.poison();
        void *eval_args[] = {&n, &dx_.p, &dw.p, &db.p, &erm.p, &erv.p, &dout.p};
        if (launched(net, nrt_cu_launch(net, k.eval, C, 1, 1, BN_THREADS, ARGS(eval_args), &err),
                     err, "batchnorm_eval"))
            compare(name("batchnorm_eval %s n=%d", geo, n), dout.get(), y, nullptr, 1e-6, 1e-6);

        std::vector<float> gw(C), gb(C), gx(xs);
        nrt_batchnorm_bwd(&g, n, x.data(), dy.data(), w.data(), stats.data(), gw.data(),
                          gb.data(), gx.data());
        Dev<float> cstats(stats), ddw(C), ddb(C), ddx(xs);
        void *bwd_args[] = {&n, &dx_.p, &ddy.p, &dw.p, &cstats.p, &ddw.p, &ddb.p, &ddx.p};
        if (launched(net, nrt_cu_launch(net, k.bwd, C, 1, 1, BN_THREADS, ARGS(bwd_args), &err),
                     err, "batchnorm_bwd")) {
            compare(name("batchnorm_bwd %s n=%d: dx", geo, n), ddx.get(), gx, nullptr, 1e-4,
                    1e-5);
            compare(name("batchnorm_bwd %s n=%d: dweight", geo, n), ddw.get(), gw, nullptr,
                    1e-5, 1e-5);
            compare(name("batchnorm_bwd %s n=%d: dbias", geo, n), ddb.get(), gb, nullptr, 1e-5,
                    1e-5);
        }
    }
}

static void test_batchnorms(nrt_cuda_net *net)
{
    test_batchnorm<16, 64, true>(net, "16x8x8 channel first", {1, 7, 32});
    test_batchnorm<3, 81, false>(net, "3x9x9", {2, 33});
    test_batchnorm<64, 1, false>(net, "64 features (batchnorm1d)", {2, 16, 1000});
}

/* Milliseconds a launch of f takes (the median of 20 after 3 warm-ups). */
template <class F>
static double time_ms(nrt_cuda_net *net, F f)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    nrt_error err = {};
    for (int r = 0; r < 23; r++) {
        CK(cudaEventRecord(a, net->stream));
        if (f(&err)) {
            printf("bench: %s\n", err.msg);
            exit(1);
        }
        CK(cudaEventRecord(b, net->stream));
        CK(cudaEventSynchronize(b));
        float t = 0;
        CK(cudaEventElapsedTime(&t, a, b));
        if (r >= 3)
            ms.push_back(t);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

template <int C, int H, int W, int O, int K, int P, bool CN>
static void bench_conv(nrt_cuda_net *net, const char *layer, int n)
{
    using G = nrt_k::ConvGeom<C, H, W, O, H, W, K, K, 1, 1, P, P>;
    const ConvKernels k = conv_kernels<C, H, W, O, H, W, K, K, 1, 1, P, P, CN>();
    const size_t xs = (size_t)n * C * H * W, ys = (size_t)O * n * H * W;
    Dev<float> x(randv(xs)), w(randv((size_t)O * C * K * K)), y(ys), dy(randv(ys)),
        dw((size_t)O * C * K * K), dx(xs), b(O);
    const double gflop = 2e-9 * O * C * K * K * (double)n * H * W;
    const double f = time_ms(net, [&](nrt_error *e) {
        return conv_fwd<G>(net, k.fwd, n, x.p, w.p, y.p, e);
    });
    const double g = time_ms(net, [&](nrt_error *e) {
        return conv_dw<G>(net, k.dw, k.dw_reduce, n, x.p, dy.p, dw.p, e);
    });
    const double d = time_ms(net, [&](nrt_error *e) {
        return conv_dx<G>(net, k.dx_cn, n, w.p, dy.p, dx.p, e);
    });
    const double r = time_ms(net, [&](nrt_error *e) {
        return nrt_cu_row_sums(net, dy.p, O, (size_t)n * H * W, b.p, e);
    });
    printf("bench %-28s %s n=%4d  fwd %7.3f ms (%5.1f TFLOP/s)  dw %7.3f ms (%5.1f)  "
           "dx %7.3f ms (%5.1f)  bias %6.3f ms (%5.0f GB/s)\n",
           layer, nrt_precision_name(net->lowp), n, f, gflop / f, g, gflop / g, d, gflop / d, r,
           4e-6 * ys / r);
}

/* cifar10.net's convolutions (its first reads [n, C, H, W], the others
 * channel-first values) */
static void bench(nrt_cuda_net *net)
{
    for (int n : {64, 256, 1024})
        for (int prec : {NRT_FP32, NRT_BF16}) { /* fp32's FMAs, bf16's tensor cores */
            net->lowp = prec;
            bench_conv<3, 32, 32, 32, 5, 2, false>(net, "conv 3x32x32->32 k5 p2 NC", n);
            bench_conv<32, 16, 16, 32, 5, 2, true>(net, "conv 32x16x16->32 k5 p2", n);
            bench_conv<32, 8, 8, 64, 5, 2, true>(net, "conv 32x8x8->64 k5 p2", n);
        }
    net->lowp = 0;
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    const bool do_bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
    nrt_rng_seed(&g_rng, 20240611);

    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("test_cuda_kernels: no CUDA device (%s): skipped\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    CK(cudaSetDevice(0));

    nrt_cuda_net net;
    memset(&net, 0, sizeof net);
    net.device = 0;
    net.dropout_key = 0x0123456789abcdefULL;
    CK(cudaStreamCreate(&net.stream));
    nrt_error err;
    if (nrt_cublas_load(&g_cublas, &err)) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    net.cublas = &g_cublas;
    CB(g_cublas.Create(&net.blas));
    CB(g_cublas.SetStream(net.blas, net.stream));
    CK(cudaMalloc((void **)&net.step, sizeof *net.step));
    /* the most a layer's split-K partial sums take (dw_workspace) */
    net.workspace_bytes = sizeof(float) * NRT_DW_PARTIAL_MAX;
    CK(cudaMalloc(&net.workspace, net.workspace_bytes));
    kernel_table(&net);

    if (do_bench) {
        bench(&net);
        return 0;
    }
    test_gemm(&net);
    test_gemm_lowp(&net, NRT_BF16);
    test_gemm_lowp(&net, NRT_FP16);
    test_mma(&net);
    test_convs(&net);
    test_convs_lowp(&net, NRT_BF16);
    test_convs_lowp(&net, NRT_FP16);
    test_pools(&net);
    test_dropout(&net);
    test_xent<1>(&net, {1, 5});
    test_xent<10>(&net, {1, 7, 256, 1024, 3000});
    test_xent<37>(&net, {1, 64});
    test_xent<100>(&net, {3, 100});
    test_xent<1000>(&net, {2, 33});
    test_losses(&net);
    test_sums(&net);
    test_round_lowp(&net, NRT_BF16);
    test_round_lowp(&net, NRT_FP16);
    test_transpose<3, 1024>(&net, {1, 4});
    test_transpose<64, 16>(&net, {1, 5, 64});
    test_transpose<5, 7>(&net, {1, 3});
    test_batchnorms(&net);

    CK(cudaFree(net.step));
    CK(cudaFree(net.workspace));
    CB(g_cublas.Destroy(net.blas));
    nrt_cublas_unload(&g_cublas);
    CK(cudaStreamDestroy(net.stream));
    printf("test_cuda_kernels: %d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
