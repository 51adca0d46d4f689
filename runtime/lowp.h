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

/* v rounded to bfloat16 (8 bits of significand), to nearest, ties to
 * even, as a float: what PyTorch's .bfloat16() gives.  NaN stays NaN;
 * a value past bf16's largest goes to infinity. */
static inline NRT_HD float nrt_bf16(float v)
{
    union {
        float f;
        uint32_t u;
    } b;
    b.f = v;
    if ((b.u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
        b.u |= 0x00400000u;
    else
        b.u += 0x7fffu + ((b.u >> 16) & 1u);
    b.u &= 0xffff0000u;
    return b.f;
}

/* v rounded to IEEE binary16 (11 bits of significand), to nearest, ties
 * to even, as a float: what PyTorch's .half() gives.  From 65520 on (the
 * tie above the largest, 65504) infinity; below 2^-14 the subnormals, in
 * steps of 2^-24; a NaN the quiet NaN of its sign (half's 0x7e00). */
static inline NRT_HD float nrt_fp16(float v)
{
    union {
        float f;
        uint32_t u;
    } b;
    b.f = v;
    const uint32_t sign = b.u & 0x80000000u, a = b.u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        b.u = sign | 0x7fc00000u;
    } else if (a >= 0x477ff000u) {
        b.u = sign | 0x7f800000u;
    } else if (a < 0x38800000u) {
        /* 0.5 + |v| rounds (in fp32, to nearest even) to a multiple of
         * 2^-24, 0.5's step: the subnormal |v| rounds to */
        b.u = a;
        b.f = (b.f + 0.5f) - 0.5f;
        b.u |= sign;
    } else {
        b.u += 0xfffu + ((b.u >> 13) & 1u);
        b.u &= 0xffffe000u;
    }
    return b.f;
}

/* v in precision p: rounded to bf16 or fp16, or as it is (fp32) */
static inline NRT_HD float nrt_lowp(int p, float v)
{
    return p == NRT_BF16 ? nrt_bf16(v) : p == NRT_FP16 ? nrt_fp16(v) : v;
}

#endif
