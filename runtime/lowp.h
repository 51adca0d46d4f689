/*
 * lowp.h — the precisions, and the rounding of a value to the low one a
 * mixed-precision run stores it in, shared word for word by the cpu runtime (netrt.h) and
 * the GPU kernels (netrt_kernels.cuh): the two backends round the same
 * values to the same bits.
 *
 * This header is C and CUDA: NRT_HD marks the functions for both.
 */
#ifndef NETRT_LOWP_H
#define NETRT_LOWP_H

#ifndef __CUDACC_RTC__ /* NVRTC: netrt_kernels.cuh defines the types */
#include <stdint.h>
#endif

/* The precision of a model's products and of the values between its
 * layers (`precision` in the model, --precision): the parameters, the
 * losses and the optimizer stay in fp32. */
enum nrt_precision { NRT_FP32 = 0, NRT_BF16 = 1, NRT_FP16 = 2 };

#ifndef NRT_HD
#ifdef __CUDACC__
#define NRT_HD __host__ __device__
#else
#define NRT_HD
#endif
#endif

/* A float's bits, and the float of bits. */
static inline NRT_HD uint32_t nrt_f32_bits(float v)
{
    union {
        float f;
        uint32_t u;
    } b;
    b.f = v;
    return b.u;
}

static inline NRT_HD float nrt_f32_of(uint32_t u)
{
    union {
        float f;
        uint32_t u;
    } b;
    b.u = u;
    return b.f;
}

/* v rounded to bfloat16 (8 bits of significand), to nearest, ties to
 * even, as a float: what PyTorch's .bfloat16() gives.  NaN stays NaN;
 * a value past bf16's largest goes to infinity. */
static inline NRT_HD float nrt_bf16(float v)
{
    uint32_t u = nrt_f32_bits(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
        u |= 0x00400000u;
    else
        u += 0x7fffu + ((u >> 16) & 1u);
    return nrt_f32_of(u & 0xffff0000u);
}

/* v rounded to IEEE binary16 (11 bits of significand), to nearest, ties
 * to even, as a float: what PyTorch's .half() gives.  From 65520 on (the
 * tie above the largest, 65504) infinity; below 2^-14 the subnormals, in
 * steps of 2^-24; a NaN the quiet NaN of its sign (half's 0x7e00). */
static inline NRT_HD float nrt_fp16(float v)
{
    const uint32_t u = nrt_f32_bits(v), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return nrt_f32_of(sign | 0x7fc00000u);
    if (a >= 0x477ff000u)
        return nrt_f32_of(sign | 0x7f800000u);
    if (a < 0x38800000u) /* 0.5 + |v| rounds (in fp32, to nearest even) to a
                            multiple of 2^-24, 0.5's step: the subnormal |v|
                            rounds to */
        return nrt_f32_of(sign | nrt_f32_bits((nrt_f32_of(a) + 0.5f) - 0.5f));
    return nrt_f32_of((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
}

/* v in precision p: rounded to bf16 or fp16, or as it is (fp32) */
static inline NRT_HD float nrt_lowp(int p, float v)
{
    return p == NRT_BF16 ? nrt_bf16(v) : p == NRT_FP16 ? nrt_fp16(v) : v;
}

#endif
