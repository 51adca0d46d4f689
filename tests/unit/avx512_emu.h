/* tests/unit/avx512_emu.h -- the AVX-512F intrinsics the runtime's kernels
 * use, written in portable C from Intel's descriptions of them, so that
 * tests/unit/test_kernels_avx512emu runs the AVX-512 code paths on a cpu
 * without AVX-512 (AVX2 and FMA are enough).  kernels.c is compiled with
 * this header forced in first (-include) and NRT_AVX512_EMU defined: its
 * AVX-512 functions are then compiled for AVX2 (AVX512_TARGET), have_avx512()
 * answers yes, and every _mm512_* name below is this file's function.  An
 * intrinsic missing here stays GCC's own and fails to compile in an AVX2
 * function ("target specific option mismatch"): none is used unemulated.
 * AVX512-BF16's instructions are emulated too (vdpbf16ps with its DAZ and
 * FTZ, the conversions to bf16); AMX's tiles are not, and the emulated
 * build leaves them out (NRT_X86_AMX undefined).
 *
 * Each lane does what the instruction does to it: fmadd is fused (one
 * rounding), a masked load reads only its mask's lanes (and zeroes the
 * others), a masked store writes only those, an aligned load checks its
 * alignment.  So a kernel's bits here are the bits it gives on an AVX-512
 * cpu, and test_kernels' checks of them (against exact sums, and against
 * the AVX2 kernels bit for bit) hold there as here.  Slow, and only for
 * tests. */
#ifndef NRT_AVX512_EMU_H
#define NRT_AVX512_EMU_H
#if defined(__x86_64__) && defined(__GNUC__) /* elsewhere: nothing (no AVX-512 code) */

#include <immintrin.h> /* GCC's own first: the names below then replace them */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRT_AVX512_EMU 1

typedef float emu_m512 __attribute__((vector_size(64)));
typedef long long emu_m512i __attribute__((vector_size(64)));
typedef int32_t emu_v16si __attribute__((vector_size(64)));

/* (the target of the functions they are inlined into, AVX512_TARGET's here:
 * clang refuses a 256-bit vector argument to a function without AVX) */
#define EMU static inline __attribute__((always_inline, unused, target("avx2,fma")))

EMU emu_m512 emu_setzero_ps(void) { return (emu_m512){0}; }
EMU emu_m512 emu_set1_ps(float f) { return (emu_m512){0} + f; }
EMU emu_m512i emu_setzero_si512(void) { return (emu_m512i){0}; }
EMU emu_m512i emu_set1_epi32(int32_t i) { return (emu_m512i)((emu_v16si){0} + i); }

EMU emu_m512i emu_setr_epi32(int32_t e0, int32_t e1, int32_t e2, int32_t e3, int32_t e4,
                             int32_t e5, int32_t e6, int32_t e7, int32_t e8, int32_t e9,
                             int32_t e10, int32_t e11, int32_t e12, int32_t e13, int32_t e14,
                             int32_t e15)
{
    return (emu_m512i)(emu_v16si){e0, e1, e2, e3, e4, e5, e6, e7,
                                  e8, e9, e10, e11, e12, e13, e14, e15};
}

EMU emu_m512 emu_loadu_ps(const void *p)
{
    emu_m512 r;
    memcpy(&r, p, sizeof r);
    return r;
}

EMU emu_m512 emu_load_ps(const void *p) /* vmovaps: a fault if not 64-byte aligned */
{
    if ((uintptr_t)p % 64) {
        fprintf(stderr, "avx512_emu: _mm512_load_ps(%p): not 64-byte aligned\n", p);
        abort();
    }
    return emu_loadu_ps(p);
}

EMU emu_m512i emu_loadu_si512(const void *p)
{
    emu_m512i r;
    memcpy(&r, p, sizeof r);
    return r;
}

EMU void emu_storeu_ps(void *p, emu_m512 a) { memcpy(p, &a, sizeof a); }
EMU void emu_storeu_si512(void *p, emu_m512i a) { memcpy(p, &a, sizeof a); }

/* Masked: the 4-byte lanes i of src where bit i of k is set into dst's;
 * the others neither read nor written.  Every masked load (from zeros),
 * store and move below. */
EMU void emu_lanes(void *dst, const void *src, __mmask16 k)
{
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy((char *)dst + 4 * i, (const char *)src + 4 * i, 4);
}

EMU emu_m512 emu_maskz_loadu_ps(__mmask16 k, const void *p)
{
    emu_m512 r = {0};
    emu_lanes(&r, p, k);
    return r;
}

EMU emu_m512i emu_maskz_loadu_epi32(__mmask16 k, const void *p)
{
    emu_m512i r = {0};
    emu_lanes(&r, p, k);
    return r;
}

EMU void emu_mask_storeu_ps(void *p, __mmask16 k, emu_m512 a) { emu_lanes(p, &a, k); }
EMU void emu_mask_storeu_epi32(void *p, __mmask16 k, emu_m512i a) { emu_lanes(p, &a, k); }

EMU emu_m512 emu_add_ps(emu_m512 a, emu_m512 b) { return a + b; }
EMU emu_m512 emu_mul_ps(emu_m512 a, emu_m512 b) { return a * b; }

EMU emu_m512 emu_fmadd_ps(emu_m512 a, emu_m512 b, emu_m512 c) /* a b + c, rounded once */
{
    emu_m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}

EMU emu_m512i emu_add_epi32(emu_m512i a, emu_m512i b)
{
    return (emu_m512i)((emu_v16si)a + (emu_v16si)b);
}

EMU emu_m512i emu_sub_epi32(emu_m512i a, emu_m512i b)
{
    return (emu_m512i)((emu_v16si)a - (emu_v16si)b);
}

EMU emu_m512i emu_slli_epi32(emu_m512i a, unsigned n) /* 0 from a count of 32 on */
{
    typedef uint32_t v16su __attribute__((vector_size(64)));
    return n > 31 ? (emu_m512i){0} : (emu_m512i)((v16su)a << n);
}

/* The comparisons' predicates (imm8's low four bits; bit 4 only says
 * whether a quiet NaN signals, which changes no result). */
EMU __mmask16 emu_cmp_ps_mask(emu_m512 a, emu_m512 b, int imm)
{
    __mmask16 k = 0;
    for (int i = 0; i < 16; i++) {
        const int u = isnan(a[i]) || isnan(b[i]);
        int t = 0;
        switch (imm & 15) {
        case 0: t = !u && a[i] == b[i]; break;  /* EQ_OQ */
        case 1: t = !u && a[i] < b[i]; break;   /* LT_OS */
        case 2: t = !u && a[i] <= b[i]; break;  /* LE_OS */
        case 3: t = u; break;                   /* UNORD_Q */
        case 4: t = u || a[i] != b[i]; break;   /* NEQ_UQ */
        case 5: t = u || !(a[i] < b[i]); break; /* NLT_US */
        case 6: t = u || !(a[i] <= b[i]); break; /* NLE_US */
        case 7: t = !u; break;                  /* ORD_Q */
        case 8: t = u || a[i] == b[i]; break;   /* EQ_UQ */
        case 9: t = u || a[i] < b[i]; break;    /* NGE_US */
        case 10: t = u || a[i] <= b[i]; break;  /* NGT_US */
        case 11: t = 0; break;                  /* FALSE_OQ */
        case 12: t = !u && a[i] != b[i]; break; /* NEQ_OQ */
        case 13: t = !u && a[i] >= b[i]; break; /* GE_OS */
        case 14: t = !u && a[i] > b[i]; break;  /* GT_OS */
        default: t = 1; break;                  /* TRUE_UQ */
        }
        k |= (__mmask16)(t << i);
    }
    return k;
}

EMU __mmask16 emu_cmpeq_epi32_mask(emu_m512i a, emu_m512i b)
{
    const emu_v16si x = (emu_v16si)a, y = (emu_v16si)b;
    __mmask16 k = 0;
    for (int i = 0; i < 16; i++)
        k |= (__mmask16)((x[i] == y[i]) << i);
    return k;
}

EMU emu_m512 emu_mask_mov_ps(emu_m512 src, __mmask16 k, emu_m512 a)
{
    emu_lanes(&src, &a, k);
    return src;
}

EMU emu_m512 emu_maskz_mov_ps(__mmask16 k, emu_m512 a)
{
    return emu_mask_mov_ps((emu_m512){0}, k, a);
}

EMU emu_m512i emu_mask_mov_epi32(emu_m512i src, __mmask16 k, emu_m512i a)
{
    emu_lanes(&src, &a, k);
    return src;
}

/* vpermt2ps: lane i takes lane idx[i] % 16 of a (idx[i] bit 4 clear) or
 * of b (set). */
EMU emu_m512 emu_permutex2var_ps(emu_m512 a, emu_m512i idx, emu_m512 b)
{
    const emu_v16si x = (emu_v16si)idx;
    emu_m512 r;
    for (int i = 0; i < 16; i++)
        r[i] = (x[i] & 16) ? b[x[i] & 15] : a[x[i] & 15];
    return r;
}

/* AVX512-BF16 (and AVX512BW's word permute its code uses) */
typedef int16_t emu_m512bh __attribute__((vector_size(64)));
typedef int16_t emu_m128bh __attribute__((vector_size(16)));

EMU uint32_t emu_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

EMU float emu_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* vcvtne2ps2bf16's conversion: to nearest even, a NaN quieted, a
 * subnormal input read as zero (the instruction's DAZ) */
EMU int16_t emu_bf16(float f)
{
    uint32_t u = emu_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN */
        return (int16_t)((u >> 16) | 0x40u);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    return (int16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

/* a bf16 as fp32, a subnormal as zero */
EMU float emu_bf16_in(int16_t h)
{
    uint32_t u = (uint32_t)(uint16_t)h << 16;
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    return emu_float(u);
}

EMU float emu_ftz(float f) /* a subnormal result flushed to zero (FTZ) */
{
    const uint32_t u = emu_bits(f);
    return (u & 0x7f800000u) == 0 ? emu_float(u & 0x80000000u) : f;
}

/* b's 16 in lanes 0-15, a's in 16-31 */
EMU emu_m512bh emu_cvtne2ps_pbh(emu_m512 a, emu_m512 b)
{
    emu_m512bh r;
    for (int i = 0; i < 16; i++)
        r[i] = emu_bf16(b[i]), r[i + 16] = emu_bf16(a[i]);
    return r;
}

EMU emu_m128bh emu_cvtneps_pbh(__m256 a)
{
    float f[8];
    emu_m128bh r;
    memcpy(f, &a, sizeof f);
    for (int i = 0; i < 8; i++)
        r[i] = emu_bf16(f[i]);
    return r;
}

/* vdpbf16ps: lane j of acc takes a[2j+1] b[2j+1], then a[2j] b[2j], each
 * sum rounded to nearest even (the products of bf16 values are exact in
 * fp32), subnormal bf16 inputs read as zero, subnormal sums flushed */
EMU emu_m512 emu_dpbf16_ps(emu_m512 acc, emu_m512bh a, emu_m512bh b)
{
    for (int j = 0; j < 16; j++) {
        float t = acc[j];
        t = emu_ftz(fmaf(emu_bf16_in(a[2 * j + 1]), emu_bf16_in(b[2 * j + 1]), t));
        t = emu_ftz(fmaf(emu_bf16_in(a[2 * j]), emu_bf16_in(b[2 * j]), t));
        acc[j] = t;
    }
    return acc;
}

/* vpermw: word i of the result is word idx[i] % 32 of a */
EMU emu_m512i emu_permutexvar_epi16(emu_m512i idx, emu_m512i a)
{
    const emu_m512bh x = (emu_m512bh)idx, v = (emu_m512bh)a;
    emu_m512bh r;
    for (int i = 0; i < 32; i++)
        r[i] = v[x[i] & 31];
    return (emu_m512i)r;
}

#undef EMU

/* The names, from here on the functions above (GCC defines some as macros
 * when not optimising). */
#define __m512 emu_m512
#define __m512i emu_m512i
#undef _mm512_setzero_ps
#define _mm512_setzero_ps emu_setzero_ps
#undef _mm512_set1_ps
#define _mm512_set1_ps emu_set1_ps
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 emu_setzero_si512
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 emu_set1_epi32
#undef _mm512_setr_epi32
#define _mm512_setr_epi32 emu_setr_epi32
#undef _mm512_loadu_ps
#define _mm512_loadu_ps emu_loadu_ps
#undef _mm512_load_ps
#define _mm512_load_ps emu_load_ps
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 emu_loadu_si512
#undef _mm512_storeu_ps
#define _mm512_storeu_ps emu_storeu_ps
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 emu_storeu_si512
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps
#undef _mm512_maskz_loadu_epi32
#define _mm512_maskz_loadu_epi32 emu_maskz_loadu_epi32
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#undef _mm512_mask_storeu_epi32
#define _mm512_mask_storeu_epi32 emu_mask_storeu_epi32
#undef _mm512_add_ps
#define _mm512_add_ps emu_add_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps emu_mul_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps emu_fmadd_ps
#undef _mm512_add_epi32
#define _mm512_add_epi32 emu_add_epi32
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 emu_slli_epi32
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask emu_cmp_ps_mask
#undef _mm512_cmpeq_epi32_mask
#define _mm512_cmpeq_epi32_mask emu_cmpeq_epi32_mask
#undef _mm512_mask_mov_ps
#define _mm512_mask_mov_ps emu_mask_mov_ps
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps emu_maskz_mov_ps
#undef _mm512_mask_mov_epi32
#define _mm512_mask_mov_epi32 emu_mask_mov_epi32
#undef _mm512_permutex2var_ps
#define _mm512_permutex2var_ps emu_permutex2var_ps
#define __m512bh emu_m512bh
#define __m128bh emu_m128bh
#undef _mm512_cvtne2ps_pbh
#define _mm512_cvtne2ps_pbh emu_cvtne2ps_pbh
#undef _mm256_cvtneps_pbh
#define _mm256_cvtneps_pbh emu_cvtneps_pbh
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps emu_dpbf16_ps
#undef _mm512_permutexvar_epi16
#define _mm512_permutexvar_epi16 emu_permutexvar_epi16

#endif
#endif
