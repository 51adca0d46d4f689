/*
 * netrt_jit.h — compiling a model's CUDA source at run time, through NVRTC
 * and a disk cache (jit.c).
 *
 * A generated program can carry its kernels as CUDA C++ text and compile
 * them for the GPU it finds, instead of shipping a fat binary built for a
 * guessed list of architectures.  Compiling takes seconds, so every result
 * is kept on disk, keyed by everything that decides the bytes NVRTC gives:
 * the source, its headers, the options (the target among them) and NVRTC's
 * version.  The second run of a program loads its kernels from there.
 *
 * Conventions:
 *  - The cache only ever costs or saves time: a missing, read-only or
 *    unnamable cache directory, or a damaged entry, never fails a compile.
 *    Such things are reported in nrt_jit_info.note.
 *  - NVRTC is not linked: jit.c loads libnvrtc with dlopen for the length
 *    of one call, so a program that never compiles needs no NVRTC at all.
 *  - Errors follow netrt.h: return -1 with a one-line message in the
 *    caller's nrt_error.  A compile error's full log also goes to stderr,
 *    since a 512-byte message cannot hold it.
 */
#ifndef NETRT_JIT_H
#define NETRT_JIT_H

#include <stddef.h>

#include "netrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NRT_JIT_MISS,    /* compiled, and stored in the cache */
    NRT_JIT_HIT,     /* loaded from the cache; NVRTC compiled nothing */
    NRT_JIT_UNCACHED /* compiled, not stored: info.note says why */
} nrt_jit_cache;

typedef struct nrt_jit_source {
    const char *name;  /* program name NVRTC uses in its messages: "digits_cnn.cu" */
    const char *text;  /* device-only CUDA C++ source, NUL-terminated */
    int nheaders;      /* headers the source #includes, given by name and text */
    const char *const *header_names;
    const char *const *header_texts;
} nrt_jit_source;

typedef struct nrt_jit_info {
    /* "sm_90" (a cubin), or "compute_89" (PTX, which the driver finishes
     * compiling) when NVRTC does not know the GPU's architecture: the
     * highest one it knows below it. */
    char target[32];
    int nvrtc_major, nvrtc_minor;
    nrt_jit_cache cache;
    /* The entry's path, or "" when there is no cache directory. */
    char cache_file[4096];
    /* "", or why the cache was not used, or that a corrupt entry was
     * rebuilt (and what was wrong with it). */
    char note[512];
    double compile_seconds; /* NVRTC's wall time; 0 on a hit */
} nrt_jit_info;

/* Compiles src for the GPU architecture arch (major * 10 + minor: 90 for
 * sm_90), with -std=c++17 and otherwise NVRTC's defaults (no fast math, as
 * nvcc), through the disk cache of nrt_jit_cache_dir.
 *
 * On success *image gets malloc'd bytes the caller frees, *size their
 * length, and *is_ptx says what they are: 0 for a cubin, 1 for PTX, which
 * is NUL-terminated (the NUL is counted in *size).  info (may be NULL) says
 * how it went.  An arch older than every one NVRTC supports is an error. */
int nrt_jit_compile(const nrt_jit_source *src, int arch, void **image,
                    size_t *size, int *is_ptx, nrt_jit_info *info,
                    nrt_error *err);

/* The cache directory, into buf: $NETC_CACHE_DIR, else $XDG_CACHE_HOME/netc,
 * else $HOME/.cache/netc (an empty variable counts as unset).  Returns 0;
 * or, with buf "", -1 when none is set, -2 when it is longer than len - 1. */
int nrt_jit_cache_dir(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
