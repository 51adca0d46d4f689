/*
 * test_jit.c — unit test of runtime/cuda/jit.c: NVRTC compiles and the
 * disk cache.  Needs NVRTC (libnvrtc.so.13), not a GPU.
 *
 * Build and run, from the top of the source tree:
 *
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror \
 *       -I/usr/local/cuda/include -Iruntime -Iruntime/cuda \
 *       -o /tmp/test_jit tests/unit/test_jit.c runtime/cuda/jit.c \
 *       runtime/libnetrt.a -ldl && /tmp/test_jit
 *
 * Every case runs with the cache in a fresh directory under $TMPDIR (or
 * /tmp), removed afterwards.  Prints "ok N - what" or "not ok N - what"
 * per check and a "1..N" plan at the end, TAP style; compile errors that
 * the test provokes also put NVRTC's log on stderr.  Exits 0 if all
 * checks passed, 1 otherwise.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "netrt_jit.h"

#include <cuda.h>
#include <nvrtc.h>

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int nchecks, nfailed;

#define CHECK(cond, what) check(!!(cond), what, __LINE__)

static int check(int ok, const char *what, int line)
{
    nchecks++;
    if (ok) {
        printf("ok %d - %s\n", nchecks, what);
    } else {
        nfailed++;
        printf("not ok %d - %s (test_jit.c:%d)\n", nchecks, what, line);
    }
    return ok;
}

static void skip(const char *what, const char *why)
{
    printf("ok %d - %s # SKIP %s\n", ++nchecks, what, why);
}

/* ------------------------------------------------------------ sources */

/* Two kernels, one of them with launch bounds, one using a header; the
 * expression in the second decides whether it compiles. */
#define KERNELS(scale_expr)                                                   \
    "#include \"act.h\"\n"                                                    \
    "\n"                                                                      \
    "extern \"C\" __global__ void relu_0_fwd(int n, const float *x, float *y)\n" \
    "{\n"                                                                     \
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                    \
    "    if (i < n)\n"                                                        \
    "        y[i] = relu(x[i]);\n"                                            \
    "}\n"                                                                     \
    "\n"                                                                      \
    "extern \"C\" __global__ void __launch_bounds__(128)\n"                   \
    "scale_1_fwd(int n, float a, float *y)\n"                                 \
    "{\n"                                                                     \
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                    \
    "    if (i < n)\n"                                                        \
    "        y[i] = " scale_expr ";\n"                                        \
    "}\n"

static const char *const header_names[] = {"act.h"};
static const char *const header_texts[] = {
    "__device__ inline float relu(float x) { return x > 0.0f ? x : 0.0f; }\n"};

static const nrt_jit_source good = {"tiny.cu", KERNELS("a * y[i]"), 1,
                                    header_names, header_texts};
static const nrt_jit_source bad = {"tiny.cu", KERNELS("a * y[i] + undefined_thing"),
                                   1, header_names, header_texts};

/* ------------------------------------------------------------ helpers */

typedef struct Result {
    int rc;
    void *image;
    size_t size;
    int is_ptx;
    nrt_jit_info info;
    nrt_error err;
} Result;

static void jit(Result *r, const nrt_jit_source *src, int arch)
{
    free(r->image);
    memset(r, 0, sizeof *r);
    r->rc = nrt_jit_compile(src, arch, &r->image, &r->size, &r->is_ptx,
                            &r->info, &r->err);
}

static int is_elf(const Result *r)
{
    return r->rc == 0 && !r->is_ptx && r->size > 4 &&
           memcmp(r->image, "\x7f" "ELF", 4) == 0;
}

static int same_image(const Result *r, const void *image, size_t size)
{
    return r->rc == 0 && r->size == size && memcmp(r->image, image, size) == 0;
}

static char tmp[256];

/* tmp/name, in one of two static buffers used in turn. */
static const char *at(const char *name)
{
    static char buf[2][512];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

/* No temporary file of jit.c's left in dir (absent counts as none). */
static int no_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    int none = 1;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp."))
            none = 0;
    closedir(d);
    return none;
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void flip_byte(const char *path, long offset)
{
    FILE *fp = fopen(path, "r+b");
    if (!fp)
        return;
    fseek(fp, offset, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, offset, SEEK_SET);
    fputc(c ^ 0x20, fp);
    fclose(fp);
}

static void append_byte(const char *path)
{
    FILE *fp = fopen(path, "ab");
    if (fp) {
        fputc(0, fp);
        fclose(fp);
    }
}

/* The oldest and newest architectures NVRTC supports, asked directly. */
static int nvrtc_arch_range(int *oldest, int *newest)
{
    char name[32];
    snprintf(name, sizeof name, "libnvrtc.so.%d", CUDA_VERSION / 1000);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return -1;
    nvrtcResult (*num)(int *), (*get)(int *);
    void *p = dlsym(lib, "nvrtcGetNumSupportedArchs");
    memcpy(&num, &p, sizeof p);
    p = dlsym(lib, "nvrtcGetSupportedArchs");
    memcpy(&get, &p, sizeof p);
    int n = 0, archs[256];
    int rc = -1;
    if (num && get && num(&n) == NVRTC_SUCCESS && n > 0 && n <= 256 &&
        get(archs) == NVRTC_SUCCESS) {
        *oldest = *newest = archs[0];
        for (int i = 1; i < n; i++) {
            if (archs[i] < *oldest)
                *oldest = archs[i];
            if (archs[i] > *newest)
                *newest = archs[i];
        }
        rc = 0;
    }
    dlclose(lib);
    return rc;
}

/* -------------------------------------------------------------- cases */

static void test_cache_dir(void)
{
    char buf[256];
    setenv("NETC_CACHE_DIR", "/a", 1);
    setenv("XDG_CACHE_HOME", "/b", 1);
    setenv("HOME", "/c", 1);
    CHECK(nrt_jit_cache_dir(buf, sizeof buf) == 0 && strcmp(buf, "/a") == 0,
          "cache dir: NETC_CACHE_DIR comes first");
    setenv("NETC_CACHE_DIR", "", 1);
    CHECK(nrt_jit_cache_dir(buf, sizeof buf) == 0 && strcmp(buf, "/b/netc") == 0,
          "cache dir: then XDG_CACHE_HOME/netc (an empty NETC_CACHE_DIR is unset)");
    unsetenv("NETC_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "", 1);
    CHECK(nrt_jit_cache_dir(buf, sizeof buf) == 0 &&
          strcmp(buf, "/c/.cache/netc") == 0,
          "cache dir: then HOME/.cache/netc (an empty XDG_CACHE_HOME is unset)");
    unsetenv("XDG_CACHE_HOME");
    CHECK(nrt_jit_cache_dir(buf, 8) == -2 && buf[0] == '\0',
          "cache dir: a path too long for the buffer is none, and said to be");
    unsetenv("HOME");
    CHECK(nrt_jit_cache_dir(buf, sizeof buf) == -1 && buf[0] == '\0',
          "cache dir: none without HOME");
}

/* Damages the entry at file in one way each time, and checks that it is
 * caught and rebuilt to image, and that the next compile hits. */
static void test_corrupt(Result *r, const char *file, const void *image,
                         size_t size)
{
    static const char *const ways[] = {
        "emptied", "cut in the header", "cut by one byte", "a payload byte flipped",
        "a key byte flipped", "the magic flipped", "a byte appended", "a FIFO"};
    for (int w = 0; w < 8; w++) {
        long n = file_size(file);
        switch (w) {
        case 0: truncate(file, 0); break;
        case 1: truncate(file, 20); break;
        case 2: truncate(file, n - 1); break;
        case 3: flip_byte(file, 48 + (long)size / 2); break;
        case 4: flip_byte(file, 40); break;
        case 5: flip_byte(file, 0); break;
        case 6: append_byte(file); break;
        case 7: unlink(file), mkfifo(file, 0600); break; /* no hang (main's alarm) */
        }
        char what[128], note[4200];
        snprintf(note, sizeof note, "corrupt cache entry %s rebuilt", file);
        jit(r, &good, 90);
        snprintf(what, sizeof what, "entry %s: caught and rebuilt", ways[w]);
        CHECK(same_image(r, image, size) && r->info.cache == NRT_JIT_MISS &&
              strstr(r->info.note, note), what);
        printf("# %s\n", r->info.note);
        jit(r, &good, 90);
        snprintf(what, sizeof what, "entry %s: the next compile hits", ways[w]);
        CHECK(same_image(r, image, size) && r->info.cache == NRT_JIT_HIT, what);
        CHECK(no_temps(at("a/b/cache")), "no temporary files left");
    }
}

static void test_cache(void)
{
    Result r = {0};
    setenv("NETC_CACHE_DIR", at("a/b/cache"), 1);

    jit(&r, &good, 90);
    CHECK(r.rc == 0, "sm_90: compiles");
    if (r.rc != 0)
        printf("# %s\n", r.err.msg);
    CHECK(is_elf(&r), "sm_90: a cubin (ELF)");
    CHECK(strcmp(r.info.target, "sm_90") == 0, "sm_90: target sm_90");
    CHECK(r.info.nvrtc_major == CUDA_VERSION / 1000, "sm_90: NVRTC's version");
    CHECK(r.info.cache == NRT_JIT_MISS && r.info.note[0] == '\0' &&
          r.info.compile_seconds > 0, "sm_90: a miss, compiled");
    const char *file = r.info.cache_file;
    size_t dlen = strlen(at("a/b/cache"));
    CHECK(strncmp(file, at("a/b/cache"), dlen) == 0 && file[dlen] == '/' &&
          strlen(file + dlen + 1) == 32 + strlen(".cubin") &&
          strcmp(file + dlen + 33, ".cubin") == 0,
          "sm_90: the entry is CACHEDIR/<32 hex digits>.cubin");
    CHECK(file_size(file) == 48 + (long)r.size, "sm_90: entry = header + cubin");
    struct stat st;
    CHECK(stat(at("a"), &st) == 0 && (st.st_mode & 0777) == 0700 &&
          stat(at("a/b/cache"), &st) == 0 && (st.st_mode & 0777) == 0700,
          "sm_90: the cache directory and its parents created 0700");
    CHECK(no_temps(at("a/b/cache")), "no temporary files left");

    size_t size = r.size;
    void *image = malloc(size);
    char entry[4096];
    if (!image)
        return;
    memcpy(image, r.image, size);
    snprintf(entry, sizeof entry, "%s", file);

    jit(&r, &good, 90);
    CHECK(same_image(&r, image, size), "sm_90 again: the same cubin");
    CHECK(r.info.cache == NRT_JIT_HIT && r.info.compile_seconds == 0 &&
          r.info.note[0] == '\0' && strcmp(r.info.cache_file, entry) == 0,
          "sm_90 again: a hit, not compiled");

    jit(&r, &good, 80);
    CHECK(is_elf(&r) && strcmp(r.info.target, "sm_80") == 0,
          "sm_80: a cubin for sm_80");
    CHECK(r.info.cache == NRT_JIT_MISS && strcmp(r.info.cache_file, entry) != 0,
          "sm_80: an entry of its own");

    test_corrupt(&r, entry, image, size);

    free(image);
    free(r.image);
}

static void test_no_cache(void)
{
    Result r = {0};
    struct stat st;

    if (geteuid() == 0) {
        skip("read-only cache directory: uncached", "root ignores permissions");
    } else {
        mkdir(at("ro"), 0700);
        chmod(at("ro"), 0500);
        setenv("NETC_CACHE_DIR", at("ro"), 1);
        jit(&r, &good, 90);
        CHECK(is_elf(&r) && r.info.cache == NRT_JIT_UNCACHED &&
              strstr(r.info.note, "is not writable"),
              "read-only cache directory: uncached, with a note");
        printf("# %s\n", r.info.note);
        chmod(at("ro"), 0700);
        CHECK(no_temps(at("ro")), "no temporary files left");
    }

    setenv("NETC_CACHE_DIR", "/proc/nonexistent/x", 1);
    jit(&r, &good, 90);
    CHECK(is_elf(&r) && r.info.cache == NRT_JIT_UNCACHED &&
          strstr(r.info.note, "cannot create cache directory /proc/nonexistent/x"),
          "cache directory under /proc: uncached, with a note");
    printf("# %s\n", r.info.note);

    FILE *fp = fopen(at("file"), "w");
    if (fp)
        fclose(fp);
    setenv("NETC_CACHE_DIR", at("file/x"), 1);
    jit(&r, &good, 90);
    CHECK(is_elf(&r) && r.info.cache == NRT_JIT_UNCACHED &&
          strstr(r.info.note, "Not a directory") && stat(at("file/x"), &st) != 0,
          "cache directory under a regular file: uncached, with a note");
    printf("# %s\n", r.info.note);

    char *lengthy = malloc(5001);
    if (lengthy) {
        memset(lengthy, 'x', 5000);
        lengthy[0] = '/', lengthy[5000] = '\0';
        setenv("NETC_CACHE_DIR", lengthy, 1);
        free(lengthy);
        jit(&r, &good, 90);
        CHECK(is_elf(&r) && r.info.cache == NRT_JIT_UNCACHED && r.info.cache_file[0] == '\0' &&
              strstr(r.info.note, "longer than 4095 bytes") && !strstr(r.info.note, "unset"),
              "a cache directory too long: uncached, with a note that says so");
        printf("# %s\n", r.info.note);
    }

    unsetenv("NETC_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    jit(&r, &good, 90);
    CHECK(is_elf(&r) && r.info.cache == NRT_JIT_UNCACHED &&
          r.info.cache_file[0] == '\0' && strstr(r.info.note, "no cache directory"),
          "no cache directory at all: uncached, with a note");
    printf("# %s\n", r.info.note);

    free(r.image);
}

static void test_archs(void)
{
    Result r = {0};
    int oldest = 0, newest = 0;
    setenv("NETC_CACHE_DIR", at("a/b/cache"), 1);
    if (!CHECK(nvrtc_arch_range(&oldest, &newest) == 0, "NVRTC lists its archs"))
        return;

    char want[64];
    jit(&r, &good, 1000);
    snprintf(want, sizeof want, "compute_%d", newest);
    CHECK(r.rc == 0 && r.is_ptx && strcmp(r.info.target, want) == 0,
          "arch 1000: PTX for the newest arch NVRTC knows");
    CHECK(r.rc == 0 && r.size > 0 && ((char *)r.image)[r.size - 1] == '\0' &&
          strstr(r.image, ".entry relu_0_fwd") && strstr(r.image, ".entry scale_1_fwd"),
          "arch 1000: NUL-terminated PTX with both kernels");
    CHECK(r.info.cache == NRT_JIT_MISS &&
          strcmp(r.info.cache_file + strlen(r.info.cache_file) - 4, ".ptx") == 0,
          "arch 1000: stored as a .ptx entry");
    jit(&r, &good, 1000);
    CHECK(r.rc == 0 && r.is_ptx && r.info.cache == NRT_JIT_HIT &&
          ((char *)r.image)[r.size - 1] == '\0', "arch 1000 again: a hit");

    jit(&r, &good, 95);
    CHECK(r.rc == 0 && r.is_ptx && strcmp(r.info.target, "compute_90") == 0,
          "arch 95, unknown but not newest: PTX for the arch below, compute_90");

    jit(&r, &good, 20);
    snprintf(want, sizeof want, "sm_%d", oldest);
    CHECK(r.rc == -1 && r.image == NULL && strstr(r.err.msg, "sm_20") &&
          strstr(r.err.msg, "oldest") && strstr(r.err.msg, want),
          "arch 20: an error naming the oldest arch NVRTC supports");
    printf("# %s\n", r.err.msg);
    CHECK(no_temps(at("a/b/cache")), "no temporary files left");
    free(r.image);
}

static void test_compile_error(void)
{
    Result r = {0};
    setenv("NETC_CACHE_DIR", at("a/b/cache"), 1);
    jit(&r, &bad, 90);
    CHECK(r.rc == -1 && r.image == NULL, "compile error: fails");
    CHECK(strstr(r.err.msg, "NVRTC could not compile tiny.cu for sm_90: "
                            "kernel scale_1_fwd: tiny.cu(15): error:") &&
          strstr(r.err.msg, "undefined_thing") && !strchr(r.err.msg, '\n'),
          "compile error: one line naming the kernel, the line and the error");
    printf("# %s\n", r.err.msg);
    CHECK(no_temps(at("a/b/cache")), "no temporary files left");
    free(r.image);
}

/* The headers NVRTC gets by name are the files' text, byte for byte
 * (scripts/text2c.sh made the strings; an escaping slip there broke every
 * macro continued over lines on one machine and not another). */
extern const char nrt_kernels_cuh_text[], nrt_philox_h_text[], nrt_blocks_h_text[];

static void test_embedded_headers(void)
{
    const char *top = getenv("NETC_TOP_SRCDIR");
    static const struct {
        const char *path, *text;
    } headers[] = {
        {"templates/netrt_kernels.cuh", nrt_kernels_cuh_text},
        {"runtime/philox.h", nrt_philox_h_text},
        {"runtime/cuda/netrt_blocks.h", nrt_blocks_h_text},
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        char path[4096], what[512];
        snprintf(path, sizeof path, "%s/%s", top && *top ? top : ".", headers[i].path);
        FILE *fp = fopen(path, "rb");
        size_t len = strlen(headers[i].text), n = 0;
        char *buf = malloc(len + 2);
        if (fp && buf) {
            n = fread(buf, 1, len + 1, fp);
            fclose(fp);
        } else if (fp) {
            fclose(fp);
        }
        snprintf(what, sizeof what, "the embedded %s is the file's text", headers[i].path);
        CHECK(fp && buf && n == len && memcmp(buf, headers[i].text, len) == 0, what);
        free(buf);
    }
}

int main(void)
{
    alarm(120); /* a hang (a FIFO in the cache) fails, by SIGALRM */
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/test_jit.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) {
        perror(tmp);
        return 1;
    }
    test_embedded_headers();
    test_cache();
    test_archs();
    test_compile_error();
    test_no_cache();
    test_cache_dir();
    remove_tree(tmp);
    printf("1..%d\n", nchecks);
    if (nfailed)
        printf("# %d of %d checks failed\n", nfailed, nchecks);
    return nfailed ? 1 : 0;
}
