/*
 * build.c — runs the C compiler on the generated program.
 *
 * No shell is involved: the compiler is started with posix_spawnp and an
 * argument vector, so paths with spaces, quotes or dollars are safe.  The
 * executable is linked under a temporary name beside the target and renamed
 * over it only when the compiler succeeded, so a failed build never leaves a
 * half-written program behind.
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

/* Appends the words of s (split on blanks) to argv. */
static void add_words(Arena *a, const char **argv, int *argc, const char *s)
{
    if (!s)
        return;
    char *copy = arena_strdup(a, s);
    for (char *w = strtok(copy, " \t\n"); w && *argc < MAX_ARGV - 8; w = strtok(NULL, " \t\n"))
        argv[(*argc)++] = w;
}

int build_program(const BuildOptions *o, const char *csrc, const char *out)
{
    Arena *a = arena_new();
    char *tmp = arena_printf(a, "%s.netc-%ld", out, (long)getpid());
    const char *argv[MAX_ARGV];
    int argc = 0;

    add_words(a, argv, &argc, o->cc);
    argv[argc++] = "-std=c11";
    const char *cflags = getenv("NETC_CFLAGS");
    add_words(a, argv, &argc, cflags ? cflags : NETC_DEFAULT_CFLAGS);
    add_words(a, argv, &argc, NETC_OPENMP_CFLAGS);
    argv[argc++] = arena_printf(a, "-I%s", o->incdir);
    argv[argc++] = csrc;
    argv[argc++] = arena_printf(a, "%s/libnetrt.a", o->libdir);
    add_words(a, argv, &argc, NETC_LINK);
    argv[argc++] = "-o";
    argv[argc++] = tmp;
    argv[argc] = NULL;

    if (o->verbose) {
        for (int i = 0; i < argc; i++)
            fprintf(stderr, "%s%s", i ? " " : "", argv[i]);
        fputc('\n', stderr);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ);
    if (rc != 0) {
        fprintf(stderr, "netc: error: cannot run the C compiler '%s': %s\n", argv[0], strerror(rc));
        fprintf(stderr, "netc: note: set NETC_CC to a C compiler\n");
        arena_free(a);
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(tmp);
        if (status != -1 && WIFSIGNALED(status))
            fprintf(stderr, "netc: error: the C compiler was killed by signal %d\n", WTERMSIG(status));
        else
            fprintf(stderr, "netc: error: the C compiler failed on the generated code "
                    "(exit status %d)\n", status == -1 ? -1 : WEXITSTATUS(status));
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
