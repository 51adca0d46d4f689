/*
 * lowp.h — the rounding of a value to the low precision a mixed-precision
 * run stores it in, shared word for word by the cpu runtime (netrt.h) and
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

/* on, v rounded to bf16; off, v */
static inline NRT_HD float nrt_lowp(int on, float v) { return on ? nrt_bf16(v) : v; }

#endif
