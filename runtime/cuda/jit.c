/*
 * jit.c — compiles a model's CUDA source with NVRTC for the GPU at hand,
 * through a disk cache (netrt_jit.h).
 *
 * It takes the source (with the headers it includes, given by name and
 * text) and an architecture, and gives a cubin, or PTX when NVRTC is older
 * than the GPU.  One call does everything and keeps nothing: it loads
 * libnvrtc with dlopen, looks in the cache, compiles if it must, stores the
 * result, and closes the library again.
 *
 * The cache is a directory of files named by a 128-bit key over everything
 * that decides NVRTC's output: the source and headers, the options (the
 * target among them) and NVRTC's version.  Even a hit loads NVRTC, for two
 * cheap questions that the key and the target depend on (its version and
 * the architectures it knows): loading it takes some 20 ms, compiling a
 * model's kernels seconds.  So a missing NVRTC is an error even when the
 * cache holds the kernels: the program could not know which entry to use.
 *
 * The one convention a reader must know: the cache never fails a compile.
 * Whatever goes wrong with it (no directory, no permission, a damaged
 * entry) only costs time, and says so in info->note; errors are for the
 * compile itself.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "netrt_jit.h"
#include "netrt_cuda.h" /* nrt_dl_open */

#include <nvrtc.h> /* types only: the functions come from dlsym */

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Bumped whenever the entry layout or the key's recipe changes: old
 * entries are then never looked up again. */
#define JIT_FORMAT 1

/* An entry: magic "NETCJIT\0", u32 format, u32 kind, u64 payload size,
 * u64 payload checksum, the 16-byte key, then the payload.  Integers are
 * little-endian. */
#define JIT_MAGIC "NETCJIT"
#define JIT_HEADER (8 + 4 + 4 + 8 + 8 + 16)
enum { KIND_CUBIN = 1, KIND_PTX = 2 };

/* ------------------------------------------------------------- helpers */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* snprintf for messages that may be cut short (notes name paths of up to
 * 4 KiB in 512 bytes): vsnprintf, so that gcc does not warn of it. */
static void textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void textf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------- hashing */

/* Two 64-bit hashes of different construction run side by side over the
 * same bytes — FNV-1a, and a rotate-xor-multiply in the manner of rustc's
 * FxHash — each finished with MurmurHash3's fmix64, so that every input
 * bit reaches every output bit.  Not cryptographic: the key guards against
 * accidents (a changed source finding a stale kernel), and whoever can
 * write the cache directory can replace its kernels anyway. */
typedef struct Hash {
    uint64_t a, b;
} Hash;

static void hash_init(Hash *h)
{
    h->a = 0xcbf29ce484222325u; /* FNV's offset basis */
    h->b = 0x243f6a8885a308d3u; /* the digits of pi: any odd-looking seed */
}

static void hash_bytes(Hash *h, const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t a = h->a, b = h->b;
    for (size_t i = 0; i < n; i++) {
        a = (a ^ s[i]) * 0x100000001b3u;
        b = ((b << 5 | b >> 59) ^ s[i]) * 0x9e3779b97f4a7c15u;
    }
    h->a = a, h->b = b;
}

static void hash_u64(Hash *h, uint64_t v)
{
    unsigned char b[8];
    put_u64(b, v);
    hash_bytes(h, b, 8);
}

/* A string, length first, so that ("ab", "c") and ("a", "bc") differ. */
static void hash_str(Hash *h, const char *s)
{
    size_t n = strlen(s);
    hash_u64(h, n);
    hash_bytes(h, s, n);
}

static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdu;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53u;
    k ^= k >> 33;
    return k;
}

static void hash_final(const Hash *h, unsigned char out[16])
{
    put_u64(out, fmix64(h->a));
    put_u64(out + 8, fmix64(h->b));
}

static uint64_t checksum(const void *p, size_t n)
{
    Hash h;
    hash_init(&h);
    hash_bytes(&h, p, n);
    return fmix64(h.a);
}

/* --------------------------------------------------------------- NVRTC */

/* The NVRTC functions used here, as pointer types for dlsym's results. */
typedef const char *(*nvrtcGetErrorString_fn)(nvrtcResult);
typedef nvrtcResult (*nvrtcVersion_fn)(int *, int *);
typedef nvrtcResult (*nvrtcGetNumSupportedArchs_fn)(int *);
typedef nvrtcResult (*nvrtcGetSupportedArchs_fn)(int *);
typedef nvrtcResult (*nvrtcCreateProgram_fn)(nvrtcProgram *, const char *,
                                             const char *, int,
                                             const char *const *,
                                             const char *const *);
typedef nvrtcResult (*nvrtcDestroyProgram_fn)(nvrtcProgram *);
typedef nvrtcResult (*nvrtcCompileProgram_fn)(nvrtcProgram, int,
                                              const char *const *);
/* nvrtcGetPTXSize, nvrtcGetCUBINSize and nvrtcGetProgramLogSize */
typedef nvrtcResult (*nvrtcGetSize_fn)(nvrtcProgram, size_t *);
/* nvrtcGetPTX, nvrtcGetCUBIN and nvrtcGetProgramLog */
typedef nvrtcResult (*nvrtcGetBytes_fn)(nvrtcProgram, char *);

/* A loaded NVRTC, for the length of one nrt_jit_compile. */
typedef struct Nvrtc {
    void *lib;
    int major, minor;
    int *archs, narchs; /* the architectures it compiles for */
    nvrtcGetErrorString_fn GetErrorString;
    nvrtcVersion_fn Version;
    nvrtcGetNumSupportedArchs_fn GetNumSupportedArchs;
    nvrtcGetSupportedArchs_fn GetSupportedArchs;
    nvrtcCreateProgram_fn CreateProgram;
    nvrtcDestroyProgram_fn DestroyProgram;
    nvrtcCompileProgram_fn CompileProgram;
    nvrtcGetSize_fn GetPTXSize, GetCUBINSize, GetProgramLogSize;
    nvrtcGetBytes_fn GetPTX, GetCUBIN, GetProgramLog;
} Nvrtc;

static void nvrtc_close(Nvrtc *nv)
{
    free(nv->archs);
    dlclose(nv->lib);
}

/* Loads the NVRTC of the CUDA major version we were built with, else
 * whichever libnvrtc.so names, and asks its version and architectures. */
static int nvrtc_open(Nvrtc *nv, nrt_error *err)
{
    memset(nv, 0, sizeof *nv);
    nv->lib = nrt_dl_open("libnvrtc", CUDART_VERSION / 1000, "NVRTC", err);
    if (!nv->lib)
        return -1;
#define LOAD(f) nrt_dl_sym(nv->lib, "nvrtc" #f, &nv->f, "NVRTC", err)
    if (LOAD(GetErrorString) || LOAD(Version) || LOAD(GetNumSupportedArchs) ||
        LOAD(GetSupportedArchs) || LOAD(CreateProgram) ||
        LOAD(DestroyProgram) || LOAD(CompileProgram) || LOAD(GetPTXSize) ||
        LOAD(GetCUBINSize) || LOAD(GetProgramLogSize) || LOAD(GetPTX) ||
        LOAD(GetCUBIN) || LOAD(GetProgramLog)) {
        nvrtc_close(nv);
        return -1;
    }
#undef LOAD
    nvrtcResult r = nv->Version(&nv->major, &nv->minor);
    if (r == NVRTC_SUCCESS)
        r = nv->GetNumSupportedArchs(&nv->narchs);
    if (r == NVRTC_SUCCESS && nv->narchs > 0) {
        nv->archs = malloc((size_t)nv->narchs * sizeof *nv->archs);
        if (!nv->archs) {
            nvrtc_close(nv);
            return nrt_errorf(err, "out of memory");
        }
        r = nv->GetSupportedArchs(nv->archs);
    }
    if (r != NVRTC_SUCCESS || nv->narchs <= 0) {
        if (r != NVRTC_SUCCESS)
            nrt_errorf(err, "NVRTC: %s", nv->GetErrorString(r));
        else
            nrt_errorf(err, "NVRTC %d.%d knows no GPU architecture", nv->major,
                       nv->minor);
        nvrtc_close(nv);
        return -1;
    }
    return 0;
}

/* The target for arch: the arch itself when NVRTC knows it (a cubin), else
 * the highest arch it knows below it, as PTX, which the driver compiles on
 * for the GPU when loading it (PTX runs on any later architecture). */
static int choose_target(const Nvrtc *nv, int arch, char *target, size_t cap,
                         int *is_ptx, nrt_error *err)
{
    int below = 0, oldest = nv->archs[0];
    for (int i = 0; i < nv->narchs; i++) {
        if (nv->archs[i] == arch) {
            snprintf(target, cap, "sm_%d", arch);
            *is_ptx = 0;
            return 0;
        }
        if (nv->archs[i] < arch && nv->archs[i] > below)
            below = nv->archs[i];
        if (nv->archs[i] < oldest)
            oldest = nv->archs[i];
    }
    if (!below)
        return nrt_errorf(err, "NVRTC %d.%d cannot compile for sm_%d: the oldest "
                          "architecture it supports is sm_%d",
                          nv->major, nv->minor, arch, oldest);
    snprintf(target, cap, "compute_%d", below);
    *is_ptx = 1;
    return 0;
}

/* ------------------------------------------------------ compile errors */

/* Skips white space and comments. */
static const char *skip_space(const char *p)
{
    for (;;) {
        if (isspace((unsigned char)*p)) {
            p++;
        } else if (p[0] == '/' && p[1] == '/') {
            p += strcspn(p, "\n");
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

static int is_ident(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* p is at '('; returns the character after its matching ')', or NULL. */
static const char *skip_parens(const char *p)
{
    int depth = 0;
    for (; *p; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')' && --depth == 0)
            return p + 1;
    }
    return NULL;
}

/* p follows a "__global__"; if a function definition follows, sets *name
 * and *len to its identifier and returns 1.  Kernels look like
 *     extern "C" __global__ void __launch_bounds__(128) conv2d_0_fwd(int n, ...)
 *     {
 * so we skip words, and __launch_bounds__ with its arguments, up to the
 * identifier that a '(' follows; the '{' after its parameters tells a
 * definition from a declaration. */
static int definition_name(const char *p, const char **name, size_t *len)
{
    for (;;) {
        p = skip_space(p);
        if (!is_ident(*p) || isdigit((unsigned char)*p))
            return 0;
        const char *word = p;
        while (is_ident(*p))
            p++;
        size_t n = (size_t)(p - word);
        p = skip_space(p);
        if (*p != '(')
            continue;
        p = skip_parens(p);
        if (!p)
            return 0;
        if (n == strlen("__launch_bounds__") &&
            memcmp(word, "__launch_bounds__", n) == 0)
            continue;
        if (*skip_space(p) != '{')
            return 0;
        *name = word;
        *len = n;
        return 1;
    }
}

/* The kernel that line `line` (from 1) of text falls in: the last
 * __global__ function definition beginning on or before that line.  Sets
 * *name and *len and returns 1, or returns 0. */
static int kernel_at(const char *text, long line, const char **name,
                     size_t *len)
{
    const char *end = text; /* the end of line `line` */
    for (long l = 0; l < line && end; l++) {
        end = strchr(end, '\n');
        if (end)
            end++;
    }
    if (!end)
        end = text + strlen(text);
    int found = 0;
    for (const char *p = strstr(text, "__global__"); p && p < end;
         p = strstr(p + 1, "__global__")) {
        if (definition_name(p + strlen("__global__"), name, len))
            found = 1;
    }
    return found;
}

/* The failed compile of src: writes NVRTC's whole log to stderr, and its
 * first error line, with the kernel it falls in, to err. */
static int compile_error(const Nvrtc *nv, nvrtcProgram prog,
                         const nrt_jit_source *src, const char *target,
                         nrt_error *err)
{
    size_t n;
    if (nv->GetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n < 2)
        return nrt_errorf(err, "NVRTC could not compile %s for %s, and gave no log",
                          src->name, target);
    char *log = malloc(n);
    if (!log)
        return nrt_errorf(err, "out of memory for NVRTC's log of %s", src->name);
    if (nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) {
        free(log);
        return nrt_errorf(err, "NVRTC could not compile %s for %s, and gave no log",
                          src->name, target);
    }
    log[n - 1] = '\0';
    fprintf(stderr, "NVRTC log for %s (%s):\n", src->name, target);
    fputs(log, stderr);

    /* "digits_cnn.cu(12): error: ...", or "catastrophic error:"; failing
     * both, the log's first line. */
    const char *first = strstr(log, "error:");
    if (first) {
        while (first > log && first[-1] != '\n')
            first--;
    } else {
        first = log;
    }
    int first_len = (int)strcspn(first, "\n");

    /* The line number, when the error is in the source (not a header). */
    long line = 0;
    size_t name_len = strlen(src->name);
    if (strncmp(first, src->name, name_len) == 0 && first[name_len] == '(')
        line = strtol(first + name_len + 1, NULL, 10);
    const char *kernel;
    size_t kernel_len;
    if (line > 0 && kernel_at(src->text, line, &kernel, &kernel_len))
        nrt_errorf(err, "NVRTC could not compile %s for %s: kernel %.*s: %.*s",
                   src->name, target, (int)kernel_len, kernel, first_len, first);
    else
        nrt_errorf(err, "NVRTC could not compile %s for %s: %.*s", src->name,
                   target, first_len, first);
    free(log);
    return -1;
}

/* The compiled program's image: a cubin, or PTX (ended by its NUL, which
 * *size counts). */
static int get_image(const Nvrtc *nv, nvrtcProgram prog,
                     const nrt_jit_source *src, int is_ptx, void **image,
                     size_t *size, nrt_error *err)
{
    const char *what = is_ptx ? "PTX" : "cubin";
    nvrtcResult r = (is_ptx ? nv->GetPTXSize : nv->GetCUBINSize)(prog, size);
    if (r != NVRTC_SUCCESS || *size == 0)
        return nrt_errorf(err, "NVRTC gave no %s for %s: %s", what, src->name,
                          nv->GetErrorString(r));
    *image = malloc(*size);
    if (!*image)
        return nrt_errorf(err, "out of memory for the %zu bytes of %s's %s",
                          *size, src->name, what);
    r = (is_ptx ? nv->GetPTX : nv->GetCUBIN)(prog, *image);
    if (r != NVRTC_SUCCESS) {
        free(*image);
        *image = NULL;
        return nrt_errorf(err, "NVRTC gave no %s for %s: %s", what, src->name,
                          nv->GetErrorString(r));
    }
    return 0;
}

/* Compiles src with opts into *image and *size. */
static int compile(const Nvrtc *nv, const nrt_jit_source *src,
                   const char *target, int is_ptx, const char *const *opts,
                   int nopts, void **image, size_t *size, nrt_error *err)
{
    nvrtcProgram prog;
    nvrtcResult r = nv->CreateProgram(&prog, src->text, src->name, src->nheaders,
                                      src->header_texts, src->header_names);
    if (r != NVRTC_SUCCESS)
        return nrt_errorf(err, "NVRTC could not take %s: %s", src->name,
                          nv->GetErrorString(r));
    int rc = -1;
    r = nv->CompileProgram(prog, nopts, opts);
    if (r == NVRTC_ERROR_COMPILATION)
        compile_error(nv, prog, src, target, err);
    else if (r != NVRTC_SUCCESS)
        nrt_errorf(err, "NVRTC could not compile %s for %s: %s", src->name,
                   target, nv->GetErrorString(r));
    else
        rc = get_image(nv, prog, src, is_ptx, image, size, err);
    nv->DestroyProgram(&prog);
    return rc;
}

/* --------------------------------------------------------------- cache */

int nrt_jit_cache_dir(char *buf, size_t len)
{
    const char *netc = getenv("NETC_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n = -1;
    if (netc && *netc)
        n = snprintf(buf, len, "%s", netc);
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/netc", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/netc", home);
    if (n >= 0 && (size_t)n < len)
        return 0;
    if (len)
        buf[0] = '\0';
    return n < 0 ? -1 : -2;
}

/* The key of one compile: everything that decides NVRTC's output. */
static void cache_key(const Nvrtc *nv, const nrt_jit_source *src,
                      const char *const *opts, int nopts,
                      unsigned char key[16])
{
    Hash h;
    hash_init(&h);
    hash_u64(&h, JIT_FORMAT);
    hash_u64(&h, (uint64_t)nv->major);
    hash_u64(&h, (uint64_t)nv->minor);
    /* The name too: the source can see it, in __FILE__. */
    hash_str(&h, src->name);
    hash_str(&h, src->text);
    hash_u64(&h, (uint64_t)src->nheaders);
    for (int i = 0; i < src->nheaders; i++) {
        hash_str(&h, src->header_names[i]);
        hash_str(&h, src->header_texts[i]);
    }
    hash_u64(&h, (uint64_t)nopts);
    for (int i = 0; i < nopts; i++)
        hash_str(&h, opts[i]);
    hash_final(&h, key);
}

static int read_all(int fd, void *buf, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = read(fd, (char *)buf + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

enum { ENTRY_ABSENT, ENTRY_VALID, ENTRY_CORRUPT };

/* Reads the entry at path, checking everything in it against kind and key.
 * Returns ENTRY_VALID with the payload in *image and *size, ENTRY_ABSENT
 * when there is none to read (for whatever reason: storing a new one will
 * say more), ENTRY_CORRUPT with what is wrong in why, or -1 when out of
 * memory. */
static int read_entry(const char *path, int kind, const unsigned char key[16],
                      void **image, size_t *size, char *why, size_t cap,
                      nrt_error *err)
{
    /* O_NONBLOCK: a FIFO there would block the open until a writer came */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ENTRY_ABSENT;
    int rc = ENTRY_CORRUPT;
    unsigned char h[JIT_HEADER];
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ENTRY_ABSENT;
    } else if (!S_ISREG(st.st_mode)) {
        textf(why, cap, "not a regular file");
    } else if (st.st_size < JIT_HEADER || read_all(fd, h, JIT_HEADER) != 0) {
        textf(why, cap, "truncated: %lld bytes", (long long)st.st_size);
    } else if (memcmp(h, JIT_MAGIC, 8) != 0) {
        textf(why, cap, "not a netc cache entry");
    } else if (get_u32(h + 8) != JIT_FORMAT || get_u32(h + 12) != (uint32_t)kind) {
        textf(why, cap, "format %u kind %u, expected format %u kind %d",
                 get_u32(h + 8), get_u32(h + 12), JIT_FORMAT, kind);
    } else if (memcmp(h + 32, key, 16) != 0) {
        textf(why, cap, "its key differs from its name");
    } else if (get_u64(h + 16) != (uint64_t)st.st_size - JIT_HEADER ||
               get_u64(h + 16) == 0) {
        textf(why, cap, "%lld bytes, for a payload of %llu",
                 (long long)st.st_size, (unsigned long long)get_u64(h + 16));
    } else {
        *size = (size_t)get_u64(h + 16);
        *image = malloc(*size);
        if (!*image) {
            rc = nrt_errorf(err, "out of memory for the %zu bytes of %s", *size, path);
        } else if (read_all(fd, *image, *size) != 0) {
            textf(why, cap, "truncated while reading");
        } else if (checksum(*image, *size) != get_u64(h + 24)) {
            textf(why, cap, "checksum mismatch");
        } else if (kind == KIND_PTX && ((char *)*image)[*size - 1] != '\0') {
            textf(why, cap, "PTX without its NUL");
        } else {
            rc = ENTRY_VALID;
        }
        if (rc != ENTRY_VALID) {
            free(*image);
            *image = NULL;
        }
    }
    close(fd);
    return rc;
}

/* Creates dir and its missing parents, mode 0700. */
static int make_dirs(const char *dir)
{
    char *path = strdup(dir);
    if (!path)
        return -1;
    int rc = 0;
    for (char *p = path + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            rc = -1;
        *p = c;
        if (c == '\0')
            break;
    }
    int e = errno;
    free(path);
    errno = e;
    return rc;
}

/* Stores image as the entry at path in dir, written whole or not at all
 * (nrt_atomic): readers see the old entry or the new, never half of one.
 * Returns 0, or -1 with why it could not in why. */
static int write_entry(const char *dir, const char *path, int kind,
                       const unsigned char key[16], const void *image,
                       size_t size, char *why, size_t cap)
{
    if (make_dirs(dir) != 0) {
        textf(why, cap, "cannot create cache directory %s: %s", dir, strerror(errno));
        return -1;
    }
    /* a corrupt entry that is not a file (read_entry: a FIFO, a device) is
     * the cache's to remove: nrt_atomic will not rename over one */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        (void)unlink(path);
    nrt_atomic w;
    nrt_error err;
    if (nrt_atomic_open(&w, path, &err)) {
        textf(why, cap, "cache directory %s is not writable (%s)", dir, err.msg);
        return -1;
    }
    unsigned char h[JIT_HEADER];
    memcpy(h, JIT_MAGIC, 8);
    put_u32(h + 8, JIT_FORMAT);
    put_u32(h + 12, (uint32_t)kind);
    put_u64(h + 16, size);
    put_u64(h + 24, checksum(image, size));
    memcpy(h + 32, key, 16);
    errno = 0;
    if (fwrite(h, 1, JIT_HEADER, w.f) != JIT_HEADER || fwrite(image, 1, size, w.f) != size) {
        textf(why, cap, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        nrt_atomic_abort(&w);
        return -1;
    }
    if (nrt_atomic_commit(&w, &err)) {
        textf(why, cap, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* -------------------------------------------------------------- compile */

/* Names the cache entry for key in info->cache_file, and its directory in
 * dir; when it cannot, leaves cache_file "" and says why in info->note. */
static void entry_path(const unsigned char key[16], int is_ptx, char *dir,
                       size_t cap, nrt_jit_info *info)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    int rc = nrt_jit_cache_dir(dir, cap);
    if (rc == -1) {
        textf(info->note, sizeof info->note, "no cache directory: NETC_CACHE_DIR, "
              "XDG_CACHE_HOME and HOME are unset or empty");
        return;
    }
    if (rc != 0) {
        textf(info->note, sizeof info->note, "no cache directory: the one NETC_CACHE_DIR, "
              "XDG_CACHE_HOME or HOME names is longer than %zu bytes", cap - 1);
        return;
    }
    int n = snprintf(info->cache_file, sizeof info->cache_file, "%s/%s.%s", dir,
                     hex, is_ptx ? "ptx" : "cubin");
    if (n < 0 || (size_t)n >= sizeof info->cache_file) {
        textf(info->note, sizeof info->note, "cache directory %s: path too long", dir);
        info->cache_file[0] = '\0';
    }
}

/* nrt_jit_compile with NVRTC loaded. */
static int compile_cached(const Nvrtc *nv, const nrt_jit_source *src, int arch,
                          void **image, size_t *size, int *is_ptx,
                          nrt_jit_info *info, nrt_error *err)
{
    if (choose_target(nv, arch, info->target, sizeof info->target, is_ptx, err) != 0)
        return -1;
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "-arch=%s", info->target);
    const char *const opts[] = {"-std=c++17", arch_opt};
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    int kind = *is_ptx ? KIND_PTX : KIND_CUBIN;
    unsigned char key[16];
    cache_key(nv, src, opts, nopts, key);

    char dir[4096], corrupt[128] = "";
    entry_path(key, *is_ptx, dir, sizeof dir, info);
    const char *file = info->cache_file;
    if (file[0]) {
        int r = read_entry(file, kind, key, image, size, corrupt, sizeof corrupt, err);
        if (r < 0)
            return -1;
        if (r == ENTRY_VALID) {
            info->cache = NRT_JIT_HIT;
            return 0;
        }
    }

    double t0 = now();
    if (compile(nv, src, info->target, *is_ptx, opts, nopts, image, size, err) != 0)
        return -1;
    info->compile_seconds = now() - t0;

    /* Store it, if there is somewhere to. */
    info->cache = NRT_JIT_UNCACHED;
    if (!file[0])
        return 0;
    char why[512], *note = info->note;
    size_t cap = sizeof info->note;
    if (write_entry(dir, file, kind, key, *image, *size, why, sizeof why) == 0) {
        info->cache = NRT_JIT_MISS;
        if (corrupt[0])
            textf(note, cap, "corrupt cache entry %s rebuilt (%s)", file, corrupt);
    } else if (corrupt[0]) {
        textf(note, cap, "corrupt cache entry %s (%s) not rebuilt: %s", file,
              corrupt, why);
    } else {
        textf(note, cap, "%s", why);
    }
    return 0;
}

int nrt_jit_compile(const nrt_jit_source *src, int arch, void **image,
                    size_t *size, int *is_ptx, nrt_jit_info *info,
                    nrt_error *err)
{
    nrt_jit_info unused;
    if (!info)
        info = &unused;
    memset(info, 0, sizeof *info);
    *image = NULL;
    *size = 0;
    *is_ptx = 0;
    Nvrtc nv;
    if (nvrtc_open(&nv, err) != 0)
        return -1;
    info->nvrtc_major = nv.major;
    info->nvrtc_minor = nv.minor;
    int rc = compile_cached(&nv, src, arch, image, size, is_ptx, info, err);
    nvrtc_close(&nv);
    return rc;
}
