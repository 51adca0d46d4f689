/* bench/bench.h — what the benchmark programs (conv_libs.c, gemm_libs.c)
 * share: a monotonic clock and reproducible operands. */
#ifndef NETC_BENCH_H
#define NETC_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on a monotonic clock. */
static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n values in [-0.5, 0.5) from seed, the same on every run; exits, saying
 * so, if out of memory. */
static inline float *bench_values(size_t n, unsigned seed)
{
    float *v = malloc(n * sizeof *v);
    if (!v) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return v;
}

#endif
