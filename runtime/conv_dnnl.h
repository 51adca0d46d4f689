/*
 * conv_dnnl.h — the convolutions' passes on oneDNN (conv_dnnl.c), for
 * kernels.c: each returns 0 having written its result, or -1 (oneDNN not
 * installed, or failing) having written nothing: the caller then runs its
 * own.  Without oneDNN
 * (NETRT_HAVE_ONEDNN unset) nothing is ever wanted.
 */
#ifndef NETRT_CONV_DNNL_H
#define NETRT_CONV_DNNL_H

#include "netrt.h"

/* From kernels.c, for the copies into oneDNN's blocks of nb channels: nb
 * rows of w values, cs apart, interleaved: d[x * nb + j] = src[j * cs + x]. */
void nrt_interleave(const float *src, size_t cs, size_t w, int nb, float *d);
/* The same, each value rounded to bf16 (its 16 bits): the copies into
 * oneDNN's layouts of a pass's bf16 operands (NRT_DOT_AMX). */
void nrt_interleave_bf16(const float *src, size_t cs, size_t w, int nb, uint16_t *d);

/* A buffer of at least `bytes` (64-byte aligned) for one of g's passes,
 * valid until that pass returns: the net's, kept and reused from pass to
 * pass (a fresh one at every pass, cifar10's 5 MiB of AMX operands, took
 * longer in page faults than its products); NULL where g has no net
 * (nrt_conv.dnnl) or no memory: the caller then allocates its own. */
void *nrt_conv_workspace(const nrt_conv *g, size_t bytes);

/* NETRT_CPU_CONV, the paths a convolution may take: auto (unset or
 * empty), builtin (the runtime's own kernels, Winograd's form among them),
 * direct (the runtime's own, the direct sums only), onednn (oneDNN's where
 * the build has it, else the direct sums: no Winograd); NRT_CONV_BAD for
 * any other value (nrt_dot_of refuses it). */
enum nrt_conv_mode { NRT_CONV_AUTO, NRT_CONV_BUILTIN, NRT_CONV_DIRECT, NRT_CONV_ONEDNN, NRT_CONV_BAD };
int nrt_conv_mode(void);

#ifdef NETRT_HAVE_ONEDNN
/* Whether g's passes should run on oneDNN (a property of the layer, not
 * of the batch). */
int nrt_dnnl_wanted(const nrt_conv *g);
/* Whether oneDNN can run g's passes: the library found and its engine made
 * (for g's net, loaded by this call at its first). */
int nrt_dnnl_ready(const nrt_conv *g);
/* As nrt_conv2d_fwd, nrt_conv2d_dw and nrt_conv2d_dx (without scratch). */
int nrt_dnnl_fwd(const nrt_conv *g, int n, const float *w, const float *b, const float *xp,
                 float *y);
int nrt_dnnl_dw(const nrt_conv *g, int n, const float *dy, const float *xp, float *dw);
int nrt_dnnl_dx(const nrt_conv *g, int n, int cn, const float *w, const float *dy, float *dx);
#else
#define nrt_dnnl_wanted(g) 0
#define nrt_dnnl_ready(g) 0
#define nrt_dnnl_fwd(g, n, w, b, xp, y) (-1)
#define nrt_dnnl_dw(g, n, dy, xp, dw) (-1)
#define nrt_dnnl_dx(g, n, cn, w, dy, dx) (-1)
#endif

#endif
