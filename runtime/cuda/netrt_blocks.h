/*
 * netrt_blocks.h — the block sizes that both the runtime's kernels
 * (netrt_kernels.cuh: their __launch_bounds__ and shared arrays) and their
 * launchers (launch.c) depend on, kept in one place: a kernel launched
 * with another block size than it was compiled for fails only on a GPU.
 * Read by C, nvcc and NVRTC (which gets it by name, as philox.h).
 */
#ifndef NETRT_BLOCKS_H
#define NETRT_BLOCKS_H

enum {
    NRT_LOSS_THREADS = 1024,   /* cross-entropy and the pointwise losses: one block */
    NRT_COLSUM_COLS = 32,      /* column sums: 32 columns a block ... */
    NRT_COLSUM_LANES = 32,     /* ... of 32 lanes each */
    NRT_ROWSUM_THREADS = 1024  /* row sums: a block a row */
};

#endif
