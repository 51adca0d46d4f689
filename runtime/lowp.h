/*
 * lowp.h — the precisions, the rounding of a value to the low one a
 * mixed-precision run stores it in, and fp16's loss scaler, shared word
 * for word by the cpu runtime (netrt.h) and the GPU's code
 * (netrt_kernels.cuh, device.cu): the two backends round the same values
 * to the same bits and scale the loss alike.
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

/* The 16 bits that store v rounded to precision p (bf16 or fp16, as
 * nrt_lowp): bf16's are the top half of the rounded float's; fp16's the
 * IEEE binary16 encoding (a NaN its quiet NaN 0x7e00, with v's sign).
 * What the GPU's tensor-core products read (cublasGemmEx's
 * CUDA_R_16BF and CUDA_R_16F). */
static inline NRT_HD uint16_t nrt_half_bits(int p, float v)
{
    const float r = nrt_lowp(p, v);
    const uint32_t u = nrt_f32_bits(r), a = u & 0x7fffffffu;
    if (p == NRT_BF16)
        return (uint16_t)(u >> 16);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a == 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) /* a subnormal (or zero): r is a multiple of 2^-24 */
        return (uint16_t)(sign | (uint16_t)(nrt_f32_of(a) * 16777216.0f));
    return (uint16_t)(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}

/* The float that 16 bits of precision p (bf16 or fp16) store: the
 * inverse of nrt_half_bits, exact (every bf16 and fp16 value is a float). */
static inline NRT_HD float nrt_half_value(int p, uint16_t h)
{
    if (p == NRT_BF16)
        return nrt_f32_of((uint32_t)h << 16);
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) /* infinity, or a NaN (its payload kept, quiet) */
        return nrt_f32_of(sign | 0x7f800000u | m << 13 | (m ? 0x00400000u : 0u));
    if (e == 0) /* zero or a subnormal: m steps of 2^-24 */
        return nrt_f32_of(sign | nrt_f32_bits((float)m * 5.9604644775390625e-8f));
    return nrt_f32_of(sign | (e + 112u) << 23 | m << 13);
}

/* Whether v is neither infinite nor NaN. */
static inline NRT_HD int nrt_f32_finite(float v)
{
    return (nrt_f32_bits(v) & 0x7f800000u) != 0x7f800000u;
}

#ifndef __CUDACC_RTC__ /* the runtime's, on either side (not the model's kernels) */
/* fp16's dynamic loss scaling, as torch.cuda.amp.GradScaler with its
 * defaults: the loss's gradient is multiplied by scale before backward;
 * after it the gradients are multiplied by the scale's reciprocal (an inf
 * or a NaN among them noted first), and a step whose gradients hold one
 * is skipped and the scale halved; 2000 steps in a row without one double
 * it (if the double is finite). */
#define NRT_SCALE_INIT 65536.0f
#define NRT_SCALE_GROWTH 2.0f
#define NRT_SCALE_BACKOFF 0.5f
#define NRT_SCALE_INTERVAL 2000
typedef struct nrt_scaler {
    float scale;     /* GradScaler's _scale */
    int32_t tracker; /* steps since the last skipped one or growth (_growth_tracker) */
    int64_t skipped; /* steps skipped so far */
} nrt_scaler;

/* What the gradients are multiplied by: the scale's reciprocal, worked
 * out in double (as _amp_foreach_non_finite_check_and_unscale_'s). */
static inline NRT_HD float nrt_scaler_inv(const nrt_scaler *s)
{
    return (float)(1.0 / (double)s->scale);
}

/* After a step whose gradients held an inf or a NaN (found) or not: the
 * scale's update, as _amp_update_scale_. */
static inline NRT_HD void nrt_scaler_update(nrt_scaler *s, int found)
{
    if (found) {
        s->scale *= NRT_SCALE_BACKOFF;
        s->tracker = 0;
        s->skipped++;
    } else if (s->tracker + 1 == NRT_SCALE_INTERVAL) {
        const float grown = s->scale * NRT_SCALE_GROWTH;
        if (nrt_f32_finite(grown))
            s->scale = grown;
        s->tracker = 0;
    } else {
        s->tracker++;
    }
}
#endif

#endif
