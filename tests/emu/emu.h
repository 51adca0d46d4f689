/*
 * emu.h — what CUDA C++ device code sees on netc's emulated device: the
 * built-in variables, __syncthreads, warp shuffles, the intrinsics the
 * kernels use, and the launch and registration of kernels.  The emulated
 * nvcc (tests/emu/nvcc) and NVRTC (nvrtc.cc) compile every CUDA source with
 * the host C++ compiler and this header included first; the device itself
 * (threads as fibers, memory, streams) is libcudart.so in this folder
 * (device.cc, cudart.cc).  See tests/emu/README.md.
 *
 * Device code runs on one host thread at a time, so the current CUDA
 * thread is a plain global (netc_emu_cur), not thread-local.
 */
#ifndef NETC_EMU_H
#define NETC_EMU_H

#include <cuda_runtime.h> /* the host's vector types, dim3, error codes */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

/* ----------------------------------------------- the current CUDA thread */

struct netc_emu_thread {
    uint3 tid;   /* threadIdx */
    uint3 bid;   /* blockIdx */
    dim3 bdim;   /* blockDim */
    dim3 gdim;   /* gridDim */
};

extern "C" {
extern struct netc_emu_thread *netc_emu_cur;
void netc_emu_syncthreads(const char *file, int line);
/* A warp-wide exchange: every lane of mask deposits size bytes (at most
 * NETC_EMU_WARP_BYTES) at mine and waits for the others; the result holds
 * every lane's bytes, lane i's NETC_EMU_WARP_BYTES i on, read in place until
 * the calling lane's next warp operation (which writes the other of the
 * warp's two buffers). */
#define NETC_EMU_WARP_BYTES 48
const unsigned char *netc_emu_warp_exchange(unsigned mask, const void *mine, size_t size,
                                            const char *file, int line);
/* A kernel's parameters as the registry keeps them. */
typedef void (*netc_emu_trampoline)(void *fn, void **args);
void netc_emu_register(const char *name, void *fn, netc_emu_trampoline call, int nparams,
                       const size_t *size, const size_t *align, const unsigned char *is_pointer,
                       int max_threads);
void netc_emu_add_shared(char *begin, char *end);
/* Whether [p, p + size) lies in a block's shared memory at an address
 * aligned to align; if not, the block's error names what, file and line. */
int netc_emu_shared_ok(const void *p, size_t size, size_t align, const char *what,
                       const char *file, int line);
cudaError_t netc_emu_launch_fn(void *fn, netc_emu_trampoline call, int nparams,
                               const size_t *size, const size_t *align,
                               const unsigned char *is_pointer, int max_threads,
                               const char *name, dim3 grid, dim3 block, void **args,
                               size_t shared, cudaStream_t stream);
}

#define threadIdx (netc_emu_cur->tid)
#define blockIdx (netc_emu_cur->bid)
#define blockDim (netc_emu_cur->bdim)
#define gridDim (netc_emu_cur->gdim)
static constexpr int warpSize = 32;

/* ---------------------------------------------------------- qualifiers */

/* the CUDA headers' host definitions give way to the emulated ones */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __align__
#undef __launch_bounds__
#undef __shared__
#undef __constant__

#define __global__ __attribute__((netc_global))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) [[netc::launch_bounds(__VA_ARGS__)]]
/* A block's shared arrays: statics in a section of their own, which the
 * device fills with NaN bytes before each block (blocks run one at a time).
 * `retain' marks them (flag R) where the section is lost: GCC puts a
 * template's statics in a section of their own; nvcc.py counts each
 * kernel's by that mark, as ptxas refuses more than 48 KiB. */
#define __shared__ static __attribute__((section("netc_emu_shared"), retain))
#define __constant__ static

extern "C" char __start_netc_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_netc_emu_shared[] __attribute__((weak, visibility("hidden")));
__attribute__((constructor)) static void netc_emu_shared_here(void)
{
    if (__start_netc_emu_shared)
        netc_emu_add_shared(__start_netc_emu_shared, __stop_netc_emu_shared);
}

/* ------------------------------------------------------------- barriers */

#define __syncthreads() netc_emu_syncthreads(__FILE__, __LINE__)

/* ---------------------------------------------------------- warp level */

static inline unsigned netc_emu_lane(void)
{
    const netc_emu_thread *t = netc_emu_cur;
    return (t->tid.x + t->bdim.x * (t->tid.y + t->bdim.y * t->tid.z)) & 31;
}

template <class T> static inline T netc_emu_shfl(unsigned mask, T v, int src, const char *f, int l)
{
    const unsigned char *all = netc_emu_warp_exchange(mask, &v, sizeof v, f, l);
    memcpy(&v, all + NETC_EMU_WARP_BYTES * (src & 31), sizeof v);
    return v;
}

/* width: lanes in segments of width, as CUDA's. */
#define __shfl_sync(m, v, src, ...) netc_emu_shfl_sync(m, v, src, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_xor_sync(m, v, x, ...) netc_emu_shfl_xor_sync(m, v, x, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_down_sync(m, v, d, ...) netc_emu_shfl_down_sync(m, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_up_sync(m, v, d, ...) netc_emu_shfl_up_sync(m, v, d, __FILE__, __LINE__, ##__VA_ARGS__)

template <class T>
static inline T netc_emu_shfl_sync(unsigned m, T v, int src, const char *f, int l, int w = 32)
{
    const int lane = (int)netc_emu_lane();
    return netc_emu_shfl(m, v, (lane & ~(w - 1)) + (src & (w - 1)), f, l);
}
template <class T>
static inline T netc_emu_shfl_xor_sync(unsigned m, T v, int x, const char *f, int l, int w = 32)
{
    const int lane = (int)netc_emu_lane();
    const int to = lane ^ x;
    return netc_emu_shfl(m, v, (to & ~(w - 1)) == (lane & ~(w - 1)) ? to : lane, f, l);
}
template <class T>
static inline T netc_emu_shfl_down_sync(unsigned m, T v, unsigned d, const char *f, int l,
                                        int w = 32)
{
    const int lane = (int)netc_emu_lane(), to = lane + (int)d;
    return netc_emu_shfl(m, v, (to & ~(w - 1)) == (lane & ~(w - 1)) ? to : lane, f, l);
}
template <class T>
static inline T netc_emu_shfl_up_sync(unsigned m, T v, unsigned d, const char *f, int l,
                                      int w = 32)
{
    const int lane = (int)netc_emu_lane(), to = lane - (int)d;
    return netc_emu_shfl(m, v, to >= (lane & ~(w - 1)) ? to : lane, f, l);
}

static inline unsigned netc_emu_ballot(unsigned m, int p, const char *f, int l)
{
    const unsigned char *all = netc_emu_warp_exchange(m, &p, sizeof p, f, l);
    unsigned b = 0;
    for (int i = 0; i < 32; i++) {
        memcpy(&p, all + NETC_EMU_WARP_BYTES * i, sizeof p);
        if ((m >> i & 1) && p)
            b |= 1u << i;
    }
    return b;
}
#define __ballot_sync(m, p) netc_emu_ballot(m, (p) != 0, __FILE__, __LINE__)
#define __any_sync(m, p) (netc_emu_ballot(m, (p) != 0, __FILE__, __LINE__) != 0)
#define __all_sync(m, p) (netc_emu_ballot(m, (p) != 0, __FILE__, __LINE__) == (m))
#define __syncwarp(...) ((void)netc_emu_ballot(0xffffffffu, 1, __FILE__, __LINE__))

/* ------------------------------------------------------- tensor cores */

/* An fp16 value's float (exact): a normal value's exponent rebiased (15
 * to 127), its significand moved up 13 bits; a subnormal its significand
 * times 2^-24; infinities and NaNs with the float's largest exponent. */
static inline float netc_emu_half_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
    uint32_t u;
    if (e == 0) {
        const float v = (float)m * 0x1p-24f;
        memcpy(&u, &v, sizeof u);
    } else {
        u = (e == 31 ? 0x7f800000u : (e + 112) << 23) | m << 13;
    }
    u |= sign;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A bf16 value's float (exact): its bits are the float's top half. */
static inline float netc_emu_bf16_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* PTX's mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
 * d, a, b, c: D = A B + C for the warp, A 16 x 16, B 16 x 8, C and D
 * 16 x 8 fp32, each lane holding the fragments of the PTX ISA's layout
 * (g = lane / 4, t = lane % 4; two 16-bit values a word, the first in
 * its low half): a[0] A[g][2t..2t+1], a[1] A[g+8][2t..], a[2]
 * A[g][2t+8..], a[3] A[g+8][2t+8..]; b[0] B[2t..2t+1][g], b[1]
 * B[2t+8..2t+9][g]; c[0..1] C[g][2t..2t+1], c[2..3] C[g+8][2t..].  Every
 * lane must come (the lanes exchange their A and B: one that does not is
 * reported as a shuffle's would be); each of D's values is its C plus
 * the 16 exact products in k's order, with fused multiply-adds in float. */
static inline void netc_emu_mma_16x8x16(bool bf16, float d[4], const uint32_t a[4],
                                        const uint32_t b[2], const float c[4], const char *f,
                                        int l)
{
    /* each lane's A and B as floats (a_i: word i / 2, half i % 2) */
    struct frag {
        float a[8], b[4];
    } mine;
    static_assert(sizeof mine <= NETC_EMU_WARP_BYTES, "an mma's fragments fit a warp exchange");
    for (int i = 0; i < 8; i++) {
        const uint16_t h = (uint16_t)(a[i / 2] >> (16 * (i % 2)));
        mine.a[i] = bf16 ? netc_emu_bf16_float(h) : netc_emu_half_float(h);
    }
    for (int i = 0; i < 4; i++) {
        const uint16_t h = (uint16_t)(b[i / 2] >> (16 * (i % 2)));
        mine.b[i] = bf16 ? netc_emu_bf16_float(h) : netc_emu_half_float(h);
    }
    const unsigned char *all = netc_emu_warp_exchange(0xffffffffu, &mine, sizeof mine, f, l);
    /* A[row][k]: lane (row % 8) 4 + (k % 8) / 2, a_i for i = 2 (row / 8) +
     * 4 (k / 8) + k % 2; B[k][n]: lane n 4 + (k % 8) / 2, b_i for i = 2 (k
     * / 8) + k % 2; C and D: the lane's own.  The lane's rows g and g + 8
     * are in lanes 4g..4g+3, its columns 2t and 2t + 1 in lanes 8t..8t+3
     * and 8t+4..8t+7: those twelve lanes' values copied, no more. */
    const int lane = (int)netc_emu_lane(), g = lane / 4, t = lane % 4;
    float ra[4][8], rb[2][4][4];
    for (int j = 0; j < 4; j++) {
        memcpy(ra[j], all + NETC_EMU_WARP_BYTES * (4 * g + j) + offsetof(frag, a), sizeof ra[j]);
        for (int n = 0; n < 2; n++)
            memcpy(rb[n][j], all + NETC_EMU_WARP_BYTES * (4 * (2 * t + n) + j) + offsetof(frag, b),
                   sizeof rb[n][j]);
    }
    for (int i = 0; i < 4; i++) {
        float acc = c[i];
        for (int k = 0; k < 16; k++)
            acc = fmaf(ra[(k % 8) / 2][2 * (i / 2) + 4 * (k / 8) + k % 2],
                       rb[i % 2][(k % 8) / 2][2 * (k / 8) + k % 2], acc);
        d[i] = acc;
    }
}

/* PTX's ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 r, [p]: four
 * 8 x 8 matrices of 16-bit values, lane 8i + j giving matrix i's row j
 * (16 bytes of shared memory, 16-byte aligned: else the block's error);
 * lane l receives in r[i] matrix i's row l / 4, values 2 (l % 4) and
 * 2 (l % 4) + 1, the first in the low half, or (trans) its column l / 4,
 * rows 2 (l % 4) and 2 (l % 4) + 1.  A warp operation: each lane reads its
 * row where it comes, and the lanes exchange them. */
static inline void netc_emu_ldmatrix_x4(bool trans, uint32_t r[4], const void *p, const char *f,
                                        int l)
{
    uint16_t row[8] = {0};
    if (netc_emu_shared_ok(p, sizeof row, 16, "ldmatrix", f, l))
        memcpy(row, p, sizeof row);
    const unsigned char *all = netc_emu_warp_exchange(0xffffffffu, row, sizeof row, f, l);
    const int lane = (int)netc_emu_lane();
    for (int i = 0; i < 4; i++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) {
            const int rr = trans ? 2 * (lane % 4) + e : lane / 4;
            const int cc = trans ? lane / 4 : 2 * (lane % 4) + e;
            memcpy(&h[e], all + NETC_EMU_WARP_BYTES * (8 * i + rr) + 2 * cc, sizeof h[e]);
        }
        r[i] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    }
}

/* ----------------------------------------------------------- intrinsics */

/* Rounded to nearest, as written: the host's IEEE operations. */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline float __double2float_rn(double a) { return (float)a; }
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
static inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double d) { long long v; memcpy(&v, &d, 8); return v; }
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }

/* Atomics: device code runs on one host thread, one CUDA thread at a time
 * between switches, so a read-modify-write is atomic as it stands. */
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

/* ---------------------------------------------- kernels: launch, registry */

namespace netc_emu {

template <class F> struct Params;
template <class... A> struct Params<void (*)(A...)> {
    static constexpr int n = (int)sizeof...(A);
    static constexpr size_t size[sizeof...(A) + 1] = {sizeof(std::decay_t<A>)..., 0};
    static constexpr size_t align[sizeof...(A) + 1] = {alignof(std::decay_t<A>)..., 0};
    static constexpr unsigned char is_pointer[sizeof...(A) + 1] = {
        (unsigned char)std::is_pointer<std::decay_t<A>>::value..., 0};
    template <size_t... I> static void call(void *fn, void **args, std::index_sequence<I...>)
    {
        ((void (*)(A...))fn)(*(std::decay_t<A> *)args[I]...);
    }
    static void trampoline(void *fn, void **args)
    {
        call(fn, args, std::index_sequence_for<A...>{});
    }
};

/* kernel<<<grid, block, shared, stream>>>(args), as the emulated nvcc
 * rewrites it: launch(kernel, grid, block, shared, stream)(args). */
template <class F> struct Launch {
    F fn;
    const char *name;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    template <class... B> void operator()(B &&...b) const
    {
        using P = Params<F>;
        static_assert(sizeof...(B) == P::n, "a kernel launched with the wrong number of arguments");
        launch_with(std::index_sequence_for<B...>{}, std::forward<B>(b)...);
    }
    template <size_t... I, class... B> void launch_with(std::index_sequence<I...>, B &&...b) const;
};

template <class F> struct Converted;
template <class... A> struct Converted<void (*)(A...)> {
    template <size_t I> using T = std::decay_t<std::tuple_element_t<I, std::tuple<A...>>>;
};

template <class F>
template <size_t... I, class... B>
void Launch<F>::launch_with(std::index_sequence<I...>, B &&...b) const
{
    using P = Params<F>;
    /* each argument converted to its parameter's type, as a call would */
    std::tuple<typename Converted<F>::template T<I>...> conv(std::forward<B>(b)...);
    void *args[sizeof...(I) + 1] = {(void *)&std::get<I>(conv)..., nullptr};
    netc_emu_launch_fn((void *)fn, &P::trampoline, P::n, P::size, P::align, P::is_pointer, 0,
                       name, grid, block, args, shared, stream);
}

template <class F>
static inline Launch<F> launch(F fn, const char *name, dim3 grid, dim3 block, size_t shared = 0,
                               cudaStream_t stream = 0)
{
    return Launch<F>{fn, name, grid, block, shared, stream};
}

/* The emulated nvcc appends one of these to a source for each __global__
 * function it defines. */
template <class F> struct Registrar {
    Registrar(F fn, const char *name, int max_threads)
    {
        using P = Params<F>;
        netc_emu_register(name, (void *)fn, &P::trampoline, P::n, P::size, P::align,
                          P::is_pointer, max_threads);
    }
};

} /* namespace netc_emu */

#endif /* NETC_EMU_H */
