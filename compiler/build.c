/*
 * build.c — runs the compilers on the generated program.
 *
 * No shell is involved: each compiler is started with posix_spawnp and an
 * argument vector, so paths with spaces, quotes or dollars are safe.  The
 * executable is linked under a temporary name beside the target and renamed
 * over it only when every step succeeded, so a failed build never leaves a
 * half-written program behind.
 *
 * The program is one C file, compiled and linked by the C compiler: with
 * CUDA, against libnetrt_cuda, cuBLAS and the CUDA runtime too.  Its
 * kernels are either compiled ahead of time — nvcc turns the kernel
 * source into a fatbin (build_fatbin), which the C file embeds — or (--jit)
 * carried as source and compiled by NVRTC when the program first runs.
 */
#include "netc.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_ARGV 64

/* Generated loops are simple and hot: vectorise them, and let sqrtf and
 * expf be plain instructions (no errno) — results are unchanged. */
#define NETC_DEFAULT_CFLAGS "-O3 -fno-math-errno"

typedef struct Cmd {
    const char *argv[MAX_ARGV];
    int argc;
} Cmd;

/* Appends the words of s (split on blanks) to c. */
static void add_words(Arena *a, Cmd *c, const char *s)
{
    if (!s)
        return;
    char *copy = arena_strdup(a, s);
    for (char *w = strtok(copy, " \t\n"); w && c->argc < MAX_ARGV - 8; w = strtok(NULL, " \t\n"))
        c->argv[c->argc++] = w;
}

static void add(Cmd *c, const char *word)
{
    if (c->argc < MAX_ARGV - 1)
        c->argv[c->argc++] = word;
}

/* Runs c; what names the tool in messages ("the C compiler"), hint says
 * which variable chooses it. */
static int run(const Cmd *c0, bool verbose, const char *what, const char *hint)
{
    Cmd c = *c0;
    c.argv[c.argc] = NULL;
    if (verbose) {
        for (int i = 0; i < c.argc; i++)
            fprintf(stderr, "%s%s", i ? " " : "", c.argv[i]);
        fputc('\n', stderr);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, c.argv[0], NULL, NULL, (char *const *)c.argv, environ);
    if (rc != 0) {
        fprintf(stderr, "netc: error: cannot run %s '%s': %s\n", what, c.argv[0], strerror(rc));
        fprintf(stderr, "netc: note: %s\n", hint);
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    if (status == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (status != -1 && WIFSIGNALED(status))
        fprintf(stderr, "netc: error: %s was killed by signal %d\n", what, WTERMSIG(status));
    else
        fprintf(stderr, "netc: error: %s failed on the generated code (exit status %d)\n", what,
                status == -1 ? -1 : WEXITSTATUS(status));
    return -1;
}

static const char *const CC_HINT = "set NETC_CC to a C compiler";
static const char *const NVCC_HINT = "set NETC_NVCC to CUDA's nvcc, or build with --no-cuda";

/* cc's flags for generated C: the standard, optimisation, OpenMP, netrt.h */
static void c_flags(Arena *a, Cmd *c, const BuildOptions *o)
{
    add_words(a, c, o->cc);
    add(c, "-std=c11");
    const char *cflags = getenv("NETC_CFLAGS");
    add_words(a, c, cflags ? cflags : NETC_DEFAULT_CFLAGS);
    add_words(a, c, NETC_OPENMP_CFLAGS);
    add(c, arena_printf(a, "-I%s", o->incdir));
}

int build_fatbin(const BuildOptions *o, const char *cusrc, unsigned char **bytes, size_t *size)
{
    Arena *a = arena_new();
    const char *fatbin = arena_printf(a, "%s.fatbin", cusrc);
    const char *nvcc = getenv("NETC_NVCC");
    if (!nvcc || !*nvcc)
        nvcc = NETC_NVCC;
    Cmd cu = {.argc = 0};
    add_words(a, &cu, nvcc);
    add_words(a, &cu, "-std=c++17 -O3 -fatbin");
    add_words(a, &cu, NETC_CUDA_GENCODE);
    add(&cu, arena_printf(a, "-I%s", o->incdir));
    add(&cu, arena_printf(a, "-I%s/cuda", o->incdir));
    add(&cu, cusrc);
    add(&cu, "-o");
    add(&cu, fatbin);
    int rc = run(&cu, o->verbose, "nvcc", NVCC_HINT);
    *bytes = NULL;
    if (rc == 0) {
        FILE *f = fopen(fatbin, "rb");
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (*bytes = malloc((size_t)n)) && fread(*bytes, 1, (size_t)n, f) == (size_t)n) {
            *size = (size_t)n;
        } else {
            fprintf(stderr, "netc: error: cannot read nvcc's fatbin '%s': %s\n", fatbin,
                    n == 0 ? "empty" : strerror(errno));
            free(*bytes);
            *bytes = NULL;
            rc = -1;
        }
        if (f)
            fclose(f);
    }
    unlink(fatbin);
    arena_free(a);
    return rc;
}

int build_program(const BuildOptions *o, const char *csrc, bool cuda, const char *out)
{
    Arena *a = arena_new();
    char *tmp = arena_printf(a, "%s.netc-%ld", out, (long)getpid());
    Cmd c = {.argc = 0};
    c_flags(a, &c, o);
    if (cuda) { /* the source tree's runtime/cuda, or an installed include/netc */
        add(&c, arena_printf(a, "-I%s/cuda", o->incdir));
        add_words(a, &c, NETC_CUDA_CFLAGS);
    }
    add(&c, csrc);
    if (cuda)
        add(&c, arena_printf(a, "%s/libnetrt_cuda.a", o->libdir));
    add(&c, arena_printf(a, "%s/libnetrt.a", o->libdir));
    if (cuda)
        add_words(a, &c, NETC_CUDA_LIBS);
    add_words(a, &c, NETC_LINK);
    add(&c, "-o");
    add(&c, tmp);
    int rc = run(&c, o->verbose, "the C compiler", CC_HINT);
    if (rc != 0) {
        unlink(tmp);
        arena_free(a);
        return -1;
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "netc: error: cannot write '%s': %s\n", out, strerror(errno));
        unlink(tmp);
        arena_free(a);
        return -1;
    }
    arena_free(a);
    return 0;
}
