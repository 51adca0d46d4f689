/*
 * rng.c — the runtime's random numbers: xoshiro256** (Blackman and Vigna),
 * seeded through splitmix64, for the choices made once (initial weights,
 * held-out splits), and the keys of the epoch orders whose permutation is
 * philox.h's.  Every random choice of a run comes from the run's --seed,
 * so one seed and one set of flags give bit-identical runs.
 */
#include "netrt.h"

#include <math.h>
#include <string.h>

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void nrt_rng_seed(nrt_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t nrt_rng_next(nrt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Lemire's multiply-and-reject: unbiased, one multiply in the common case. */
uint32_t nrt_rng_below(nrt_rng *r, uint32_t n)
{
    uint64_t m = (uint64_t)(uint32_t)(nrt_rng_next(r) >> 32) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)-n % n;
        while (low < threshold) {
            m = (uint64_t)(uint32_t)(nrt_rng_next(r) >> 32) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double nrt_rng_uniform(nrt_rng *r)
{
    return (double)(nrt_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Box–Muller; the second variate is thrown away so the stream of draws does
 * not depend on how calls to uniform and normal interleave. */
double nrt_rng_normal(nrt_rng *r)
{
    double u1 = 1.0 - nrt_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = nrt_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void nrt_shuffle(nrt_rng *r, uint32_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = nrt_rng_below(r, (uint32_t)i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

void nrt_order_init(nrt_order *o, uint64_t key, uint64_t epoch, size_t n, int shuffle)
{
    memset(o, 0, sizeof *o);
    o->n = (uint32_t)n;
    if (!shuffle || n < 2)
        return;
    /* the smallest 2^(2 half) >= n */
    o->half = 1;
    while (o->half < 16 && ((uint64_t)1 << (2 * o->half)) < n)
        o->half++;
    nrt_rng r;
    nrt_rng_seed(&r, key + epoch * 0x9e3779b97f4a7c15ull);
    for (int k = 0; k < NRT_ORDER_ROUNDS; k++)
        o->key[k] = (uint32_t)(nrt_rng_next(&r) >> 32);
}

/* The walks of up to ORDER_CHUNK indices go together: a pass of the
 * Feistel network over all of them (one loop the compiler vectorises),
 * then the indices that landed below n are written out and the others
 * packed to walk on, without a branch.  An index still walking writes a
 * value that its last pass overwrites.  Every pass is the one
 * nrt_order_at makes, so the order is the same. */
enum { ORDER_CHUNK = 512 };

static inline __attribute__((always_inline)) void
order_fill(const nrt_order *o, size_t first, size_t count, uint32_t *out)
{
    uint32_t x[ORDER_CHUNK], slot[ORDER_CHUNK];
    for (size_t c = 0; c < count; c += ORDER_CHUNK) {
        size_t m = count - c < ORDER_CHUNK ? count - c : ORDER_CHUNK;
        for (size_t j = 0; j < m; j++) {
            x[j] = (uint32_t)(first + c + j);
            slot[j] = (uint32_t)(c + j);
        }
        while (m > 0) {
            for (size_t j = 0; j < m; j++)
                x[j] = nrt_order_feistel(o, x[j]);
            size_t r = 0;
            for (size_t j = 0; j < m; j++) {
                const uint32_t v = x[j], s = slot[j];
                out[s] = v;
                x[r] = v;
                slot[r] = s;
                r += v >= o->n;
            }
            m = r;
        }
    }
}

static void order_fill_generic(const nrt_order *o, size_t first, size_t count, uint32_t *out)
{
    order_fill(o, first, count, out);
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(NETRT_NO_AVX2)
#define NRT_X86_AVX2 1
/* eight 32-bit multiplies a cycle (vpmulld) */
__attribute__((target("avx2"))) static void
order_fill_avx2(const nrt_order *o, size_t first, size_t count, uint32_t *out)
{
    order_fill(o, first, count, out);
}
#endif

void nrt_order_fill(const nrt_order *o, size_t first, size_t count, uint32_t *out)
{
    if (o->half == 0) {
        for (size_t k = 0; k < count; k++)
            out[k] = (uint32_t)(first + k);
        return;
    }
#ifdef NRT_X86_AVX2
    if (__builtin_cpu_supports("avx2")) {
        order_fill_avx2(o, first, count, out);
        return;
    }
#endif
    order_fill_generic(o, first, count, out);
}

uint64_t nrt_stream_key(uint64_t seed, enum nrt_stream stream)
{
    return seed ^ ((uint64_t)stream * 0xd1b54a32d192ed03ull);
}
