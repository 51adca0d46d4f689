/*
 * module.c — a model's device code on the device: its fatbin (compiled
 * ahead of time by nvcc) or its source compiled now by NVRTC (jit.c,
 * through the disk cache), loaded as a CUDA library, and the handles of
 * its kernels.  Also PROG --jit-info.
 *
 * The source includes netrt_kernels.cuh, philox.h, lowp.h, losses.h and
 * netrt_blocks.h; NVRTC gets them by name from this library
 * (kernels_text.c, generated from the headers when the runtime is
 * built), so a program carries only its own kernels' text,
 * and a new runtime's headers make a new cache key.
 */
#include "netrt_cuda.h"
#include "netrt_jit.h"

#include <stdlib.h>
#include <string.h>

extern const char nrt_kernels_cuh_text[], nrt_philox_h_text[], nrt_lowp_h_text[],
    nrt_losses_h_text[], nrt_blocks_h_text[];

static const char *const runtime_kernels[NRT_K_MODEL] = {
    "nrt_dev_gemm_scale", "nrt_dev_dropout_fwd", "nrt_dev_loss", "nrt_dev_col_sums",
    "nrt_dev_row_sums", "nrt_dev_round_lowp", "nrt_dev_to_half", "nrt_dev_half_load"};

const char *nrt_cuda_kernel_name(const nrt_cuda_net *net, int k)
{
    if (k >= 0 && k < NRT_K_MODEL)
        return runtime_kernels[k];
    const nrt_cuda_code *code = net->model->cuda->code;
    if (k >= NRT_K_MODEL && k - NRT_K_MODEL < code->nkernels)
        return code->kernels[k - NRT_K_MODEL];
    return "an unknown kernel";
}

/* The source as NVRTC sees it: the model's text and the runtime's headers. */
static nrt_jit_source jit_source(const nrt_cuda_code *code)
{
    static const char *const names[] = {"netrt_kernels.cuh", "philox.h", "lowp.h", "losses.h",
                                        "netrt_blocks.h"};
    static const char *const texts[] = {nrt_kernels_cuh_text, nrt_philox_h_text, nrt_lowp_h_text,
                                        nrt_losses_h_text, nrt_blocks_h_text};
    nrt_jit_source s = {code->name, code->source, 5, names, texts};
    return s;
}

static int device_arch(int device, int *arch, nrt_error *err)
{
    int major, minor;
    if (NRT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), err) ||
        NRT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), err))
        return -1;
    *arch = major * 10 + minor;
    return 0;
}

/* The image to load: the fatbin, or the JIT's cubin or PTX (*owned, to
 * free after loading). */
static int image_for(const nrt_cuda_code *code, int arch, const void **image, void **owned,
                     nrt_error *err)
{
    *owned = NULL;
    if (code->fatbin) {
        *image = code->fatbin;
        return 0;
    }
    nrt_jit_source src = jit_source(code);
    size_t size;
    int is_ptx;
    if (nrt_jit_compile(&src, arch, owned, &size, &is_ptx, NULL, err))
        return -1;
    *image = *owned;
    return 0;
}

int nrt_cuda_module_load(const nrt_cuda_code *code, int device, cudaLibrary_t *library,
                         cudaKernel_t **kernel, nrt_error *err)
{
    *library = NULL;
    *kernel = NULL;
    int arch;
    const void *image;
    void *owned;
    if (device_arch(device, &arch, err) || image_for(code, arch, &image, &owned, err))
        return -1;
    int rc = NRT_CUDA(cudaLibraryLoadData(library, image, NULL, NULL, 0, NULL, NULL, 0), err);
    free(owned);
    if (rc) {
        *library = NULL;
        return -1;
    }
    const int n = NRT_K_MODEL + code->nkernels;
    cudaKernel_t *k = calloc((size_t)n, sizeof *k);
    if (!k) {
        nrt_cuda_module_unload(*library, NULL);
        *library = NULL;
        return nrt_errorf(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        const char *name = i < NRT_K_MODEL ? runtime_kernels[i] : code->kernels[i - NRT_K_MODEL];
        cudaError_t e = cudaLibraryGetKernel(&k[i], *library, name);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            nrt_cuda_module_unload(*library, k);
            *library = NULL;
            return nrt_errorf(err, "%s: no kernel %s in the loaded code: %s", code->name, name,
                              cudaGetErrorString(e));
        }
    }
    *kernel = k;
    return 0;
}

void nrt_cuda_module_unload(cudaLibrary_t library, cudaKernel_t *kernel)
{
    if (library)
        (void)cudaLibraryUnload(library);
    free(kernel);
}

/* "sm_90" (or "90", "compute_90") to 90. */
static int parse_arch(const char *s, int *arch, nrt_error *err)
{
    const char *d = s;
    if (!strncmp(d, "sm_", 3))
        d += 3;
    else if (!strncmp(d, "compute_", 8))
        d += 8;
    char *end;
    long v = strtol(d, &end, 10);
    if (end == d || *end || v < 10 || v > 10000)
        return nrt_errorf(err, "--jit-arch %s: not an architecture like sm_90", s);
    *arch = (int)v;
    return 0;
}

static const char *cache_word(nrt_jit_cache c)
{
    return c == NRT_JIT_HIT ? "hit" : c == NRT_JIT_MISS ? "miss (compiled and stored)"
                                                        : "not used";
}

int nrt_cuda_jit_info(const nrt_model *m, const char *arch_name, int device, FILE *out,
                      nrt_error *err)
{
    const nrt_cuda_code *code = m->cuda->code;
    int arch = 0;
    if (arch_name) {
        if (parse_arch(arch_name, &arch, err))
            return -1;
    } else {
        int count = nrt_cuda_device_count(err);
        if (count < 0)
            return -1;
        if (count == 0)
            return nrt_errorf(err, "--jit-info: there is no CUDA device (--jit-arch sm_XX "
                              "compiles for an architecture without one)");
        if (device >= count)
            return nrt_errorf(err, "--jit-info: there is no CUDA device %d", device);
        if (device_arch(device, &arch, err))
            return -1;
    }
    fprintf(out, "kernels:       %s, %d of the model's and %d of the runtime's\n", code->name,
            code->nkernels, NRT_K_MODEL);
    fprintf(out, "architecture:  sm_%d%s\n", arch, arch_name ? " (--jit-arch)" : "");
    if (code->fatbin) {
        fprintf(out, "compiled:      ahead of time by nvcc (a %zu-byte fatbin); no JIT\n",
                code->fatbin_size);
        return 0;
    }
    nrt_jit_source src = jit_source(code);
    nrt_jit_info info;
    void *image;
    size_t size;
    int is_ptx;
    if (nrt_jit_compile(&src, arch, &image, &size, &is_ptx, &info, err))
        return -1;
    free(image);
    fprintf(out, "compiled:      at run time by NVRTC %d.%d, for %s (%s, %zu bytes)\n",
            info.nvrtc_major, info.nvrtc_minor, info.target, is_ptx ? "PTX" : "cubin", size);
    fprintf(out, "cache:         %s\n", cache_word(info.cache));
    fprintf(out, "cache entry:   %s\n", info.cache_file[0] ? info.cache_file : "(none)");
    if (info.note[0])
        fprintf(out, "note:          %s\n", info.note);
    fprintf(out, "compile time:  %.3f s\n", info.compile_seconds);
    return 0;
}
