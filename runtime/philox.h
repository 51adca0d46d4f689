/*
 * philox.h — the random choices a training step makes, as pure functions
 * of counters, shared word for word by the cpu runtime and the GPU kernels.
 *
 * A step's dropout masks and an epoch's sample order are not drawn from a
 * generator's running state but computed from (key, counter): any value
 * can be computed alone, in any order, by any thread, on the host or on a
 * device.  So the GPU computes exactly the masks and the order the cpu
 * does (the parity of the two backends), a CUDA graph replayed with a new
 * step counter draws new masks, and a run resumed at step t needs only t.
 *
 *  - Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
 *    as easy as 1, 2, 3", SC 2011; Random123), the generator of cuRAND's
 *    and PyTorch's GPU dropout: a 128-bit counter and a 64-bit key give
 *    four 32-bit words.
 *  - The epoch's order: a keyed pseudo-random permutation of 0 .. n-1, a
 *    balanced Feistel network on the smallest 2^(2h) >= n with cycle
 *    walking (an index at or past n is permuted again until it falls
 *    below n), the way TensorFlow's index_shuffle and Grain shuffle
 *    without materialising an order.
 *
 * This header is C and CUDA: NRT_HD marks the functions for both.
 */
#ifndef NETRT_PHILOX_H
#define NETRT_PHILOX_H

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

typedef struct nrt_philox4 {
    uint32_t v[4];
} nrt_philox4;

/* Ten rounds; a round maps the counter (c0, c1, c2, c3) under the key
 * (k0, k1) to (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1,
 * lo(M0 c0)), M0 = 0xD2511F53, M1 = 0xCD9E8D57, and the key is bumped by
 * the Weyl constants (0x9E3779B9, 0xBB67AE85) between rounds. */
static inline NRT_HD nrt_philox4 nrt_philox4x32_10(nrt_philox4 c, uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c.v[0];
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c.v[2];
        const nrt_philox4 o = {{(uint32_t)(p1 >> 32) ^ c.v[1] ^ k0, (uint32_t)p1,
                                (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1, (uint32_t)p0}};
        c = o;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

/* ------------------------------------------------------------- dropout */

/* A dropout layer drops value i (of the batch's n * size values) when its
 * 32-bit word is below ceil(p 2^32): probability p to within 2^-32.  The
 * words come from short xoshiro128** streams (Blackman and Vigna) seeded
 * by Philox: in each run of 256 values, lane j = i % 8 is one stream whose
 * 32 outputs decide values j, j+8, ..., j+248, and its 128-bit state is
 * block b = i / 256 * 8 + j of Philox, counter (b, layer, step low, step
 * high) under the run's dropout key.  So eight lanes decide eight
 * consecutive values with one vector compare on the cpu, a GPU thread
 * runs one lane, Philox is paid once per 32 values, and every lane of
 * every step and layer starts from an independent random state.  layer
 * tells the dropout layers of a model apart; step counts the run's
 * updates. */
static inline NRT_HD nrt_philox4 nrt_dropout_block(uint64_t key, uint32_t layer, uint64_t step,
                                                   uint32_t b)
{
    const nrt_philox4 c = {{b, layer, (uint32_t)step, (uint32_t)(step >> 32)}};
    return nrt_philox4x32_10(c, (uint32_t)key, (uint32_t)(key >> 32));
}

/* A lane's state: its Philox block; the all-zero state, from which
 * xoshiro never leaves (probability 2^-128), is made nonzero. */
static inline NRT_HD nrt_philox4 nrt_dropout_lane(uint64_t key, uint32_t layer, uint64_t step,
                                                  uint32_t b)
{
    nrt_philox4 s = nrt_dropout_block(key, layer, step, b);
    s.v[0] |= (s.v[0] | s.v[1] | s.v[2] | s.v[3]) == 0;
    return s;
}

/* xoshiro128**: the next output of state s. */
static inline NRT_HD uint32_t nrt_xoshiro128ss(nrt_philox4 *s)
{
    const uint32_t x = s->v[1] * 5, out = (x << 7 | x >> 25) * 9, t = s->v[1] << 9;
    s->v[2] ^= s->v[0];
    s->v[3] ^= s->v[1];
    s->v[1] ^= s->v[2];
    s->v[0] ^= s->v[3];
    s->v[2] ^= t;
    s->v[3] = s->v[3] << 11 | s->v[3] >> 21;
    return out;
}

/* Value i's word, by the definition (a reference: it runs the lane from
 * its start). */
static inline NRT_HD uint32_t nrt_dropout_word(uint64_t key, uint32_t layer, uint64_t step,
                                               uint64_t i)
{
    nrt_philox4 s = nrt_dropout_lane(key, layer, step, (uint32_t)((i >> 8) << 3 | (i & 7)));
    uint32_t u = 0;
    for (uint64_t t = 0; t <= (i >> 3 & 31); t++)
        u = nrt_xoshiro128ss(&s);
    return u;
}

/* The cut for probability p: 0 for p <= 0 (nothing dropped), 2^32 for
 * p >= 1 (everything); a value is kept when its word is >= the cut. */
static inline NRT_HD uint64_t nrt_dropout_cut(double p)
{
    if (!(p > 0.0))
        return 0;
    const double c = p * 4294967296.0;
    if (c >= 4294967296.0)
        return (uint64_t)1 << 32;
    const uint64_t t = (uint64_t)c; /* ceil, without libm on either side */
    return (double)t < c ? t + 1 : t;
}

/* The largest count of values one dropout call can take: b fits in 32
 * bits. */
#define NRT_DROPOUT_MAX ((uint64_t)1 << 37)

/* -------------------------------------------------------- augmentation */

/* random_horizontal_flip: sample i of the dataset is flipped in epoch e
 * when the first word of Philox's block (i, e low, e high, 0) under the
 * run's augmentation key is below cut (nrt_dropout_cut(p)). */
static inline NRT_HD int nrt_flip(uint64_t key, uint64_t epoch, uint32_t i, uint64_t cut)
{
    const nrt_philox4 c = {{i, (uint32_t)epoch, (uint32_t)(epoch >> 32), 0}};
    return nrt_philox4x32_10(c, (uint32_t)key, (uint32_t)(key >> 32)).v[0] < cut;
}

/* --------------------------------------------------------------- order */

#define NRT_ORDER_ROUNDS 6

/* The order of an epoch's n samples: sample nrt_order_at(o, i) is the
 * i-th.  half = 0 is file order (--no-shuffle).  nrt_order_init (rng.c)
 * fills it from the run's seed and the epoch. */
typedef struct nrt_order {
    uint32_t n;                      /* samples */
    uint32_t half;                   /* bits of each half of the domain; 0: identity */
    uint32_t key[NRT_ORDER_ROUNDS];  /* round keys */
} nrt_order;

/* A round's function: Chris Wellons' lowbias32 integer hash of x ^ key. */
static inline NRT_HD uint32_t nrt_order_round(uint32_t x, uint32_t key)
{
    x ^= key;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* One pass of the Feistel network over 2^(2 half) values. */
static inline NRT_HD uint32_t nrt_order_feistel(const nrt_order *o, uint32_t x)
{
    const uint32_t mask = ((uint32_t)1 << o->half) - 1;
    uint32_t l = x >> o->half, r = x & mask;
    for (int k = 0; k < NRT_ORDER_ROUNDS; k++) {
        const uint32_t t = l ^ (nrt_order_round(r, o->key[k]) & mask);
        l = r;
        r = t;
    }
    return l << o->half | r;
}

/* The i-th sample of the epoch, i < n.  The domain is less than 4n, so a
 * walk takes fewer than four passes on average. */
static inline NRT_HD uint32_t nrt_order_at(const nrt_order *o, uint32_t i)
{
    if (o->half == 0)
        return i;
    do
        i = nrt_order_feistel(o, i);
    while (i >= o->n);
    return i;
}

#endif /* NETRT_PHILOX_H */
