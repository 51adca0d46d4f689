/*
 * libs.c — the CUDA libraries a program loads only when it first needs
 * the GPU, with dlopen: cuBLAS and NCCL here, NVRTC in jit.c.  With the CUDA
 * runtime linked statically (it finds the driver itself), a generated
 * program links no CUDA library at all: it starts on a machine without
 * any, where `auto` trains on the cpu and `--device cuda` says what is
 * missing.
 */
#include "netrt_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *nrt_dl_open(const char *stem, int major, const char *what, nrt_error *err)
{
    char name[64], why[512];
    snprintf(name, sizeof name, "%s.so.%d", stem, major);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib)
        return lib;
    snprintf(why, sizeof why, "%s", dlerror());
    char any[64];
    snprintf(any, sizeof any, "%s.so", stem);
    lib = dlopen(any, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        nrt_errorf(err, "cannot load %s: %s (install the CUDA toolkit's %s, or name its "
                   "folder in LD_LIBRARY_PATH)", what, why, what);
    return lib;
}

/* ISO C has no conversion from dlsym's void * to a function pointer; POSIX
 * guarantees the two have the same representation, which memcpy relies on. */
int nrt_dl_sym(void *lib, const char *name, void *fn, const char *what, nrt_error *err)
{
    void *p = dlsym(lib, name);
    if (!p)
        return nrt_errorf(err, "%s has no %s: %s", what, name, dlerror());
    memcpy(fn, &p, sizeof p);
    return 0;
}

int nrt_cublas_load(nrt_cublas *b, nrt_error *err)
{
    memset(b, 0, sizeof *b);
    b->lib = nrt_dl_open("libcublas", CUDART_VERSION / 1000, "cuBLAS", err);
    if (!b->lib)
        return NRT_UNAVAILABLE;
#define SYM(f, name) nrt_dl_sym(b->lib, name, &b->f, "cuBLAS", err)
    if (SYM(Create, "cublasCreate_v2") || SYM(Destroy, "cublasDestroy_v2") ||
        SYM(SetStream, "cublasSetStream_v2") || SYM(SetWorkspace, "cublasSetWorkspace_v2") ||
        SYM(SetMathMode, "cublasSetMathMode") || SYM(SetAtomicsMode, "cublasSetAtomicsMode") ||
        SYM(Sgemm, "cublasSgemm_v2") || SYM(GemmEx, "cublasGemmEx") ||
        SYM(GetStatusName, "cublasGetStatusName") ||
        SYM(GetStatusString, "cublasGetStatusString")) {
        nrt_cublas_unload(b);
        return NRT_UNAVAILABLE;
    }
#undef SYM
    return 0;
}

void nrt_cublas_unload(nrt_cublas *b)
{
    if (b->lib)
        dlclose(b->lib);
    memset(b, 0, sizeof *b);
}

int nrt_nccl_load(nrt_nccl *n, nrt_error *err)
{
    memset(n, 0, sizeof *n);
    n->lib = nrt_dl_open("libnccl", NCCL_MAJOR, "NCCL", err);
    if (!n->lib)
        return NRT_UNAVAILABLE;
#define SYM(f, name) nrt_dl_sym(n->lib, name, &n->f, "NCCL", err)
    if (SYM(GetUniqueId, "ncclGetUniqueId") || SYM(CommInitRank, "ncclCommInitRank") ||
        SYM(CommDestroy, "ncclCommDestroy") || SYM(CommAbort, "ncclCommAbort") ||
        SYM(AllReduce, "ncclAllReduce") || SYM(GetErrorString, "ncclGetErrorString")) {
        nrt_nccl_unload(n);
        return NRT_UNAVAILABLE;
    }
#undef SYM
    return 0;
}

void nrt_nccl_unload(nrt_nccl *n)
{
    if (n->lib)
        dlclose(n->lib);
    memset(n, 0, sizeof *n);
}
