/*
 * build.c — runs the compilers on the generated program.
 *
 * No shell is involved: each compiler is started with posix_spawnp and an
 * argument vector, so paths with spaces, quotes or dollars are safe.  The
 * executable is linked under a temporary name beside the target and renamed
 * over it only when every step succeeded, so a failed build never leaves a
 * half-written program behind.
 *
 * Without CUDA: one C compiler run, source to executable.  With CUDA: the
 * C file and the .cu file are compiled to objects (cc, nvcc), and nvcc
 * links them with libnetrt_cuda, libnetrt, cuBLAS and the CUDA runtime.
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

static int build_cuda(Arena *a, const BuildOptions *o, const char *csrc, const char *cusrc,
                      const char *tmp)
{
    const char *co = arena_printf(a, "%s.c.o", tmp), *cuo = arena_printf(a, "%s.cu.o", tmp);
    const char *nvcc = getenv("NETC_NVCC");
    if (!nvcc || !*nvcc)
        nvcc = NETC_NVCC;
    Cmd c = {.argc = 0};
    c_flags(a, &c, o);
    add(&c, "-c");
    add(&c, csrc);
    add(&c, "-o");
    add(&c, co);
    Cmd cu = {.argc = 0};
    add_words(a, &cu, nvcc);
    add_words(a, &cu, "-std=c++17 -O3 --extended-lambda");
    add_words(a, &cu, NETC_CUDA_GENCODE);
    add(&cu, arena_printf(a, "-I%s", o->incdir));
    add(&cu, arena_printf(a, "-I%s/cuda", o->incdir));
    add(&cu, "-c");
    add(&cu, cusrc);
    add(&cu, "-o");
    add(&cu, cuo);
    Cmd ld = {.argc = 0};
    add_words(a, &ld, nvcc);
    add(&ld, co);
    add(&ld, cuo);
    add(&ld, arena_printf(a, "%s/libnetrt_cuda.a", o->libdir));
    add(&ld, arena_printf(a, "%s/libnetrt.a", o->libdir));
    add_words(a, &ld, NETC_CUDA_LIBS);
    if (*NETC_OPENMP_CFLAGS)
        add(&ld, arena_printf(a, "-Xcompiler=%s", NETC_OPENMP_CFLAGS));
    add_words(a, &ld, NETC_LINK_NO_OPENMP);
    add(&ld, "-o");
    add(&ld, tmp);
    int rc = run(&c, o->verbose, "the C compiler", CC_HINT);
    if (rc == 0)
        rc = run(&cu, o->verbose, "nvcc", NVCC_HINT);
    if (rc == 0)
        rc = run(&ld, o->verbose, "nvcc (linking)", NVCC_HINT);
    unlink(co);
    unlink(cuo);
    return rc;
}

int build_program(const BuildOptions *o, const char *csrc, const char *cusrc, const char *out)
{
    Arena *a = arena_new();
    char *tmp = arena_printf(a, "%s.netc-%ld", out, (long)getpid());
    int rc;
    if (cusrc) {
        rc = build_cuda(a, o, csrc, cusrc, tmp);
    } else {
        Cmd c = {.argc = 0};
        c_flags(a, &c, o);
        add(&c, csrc);
        add(&c, arena_printf(a, "%s/libnetrt.a", o->libdir));
        add_words(a, &c, NETC_LINK);
        add(&c, "-o");
        add(&c, tmp);
        rc = run(&c, o->verbose, "the C compiler", CC_HINT);
    }
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
