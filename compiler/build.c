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
 * CUDA, against libnetrt_cuda and the CUDA runtime (statically) too.  Its
 * kernels are either compiled ahead of time — nvcc turns the kernel
 * source into a fatbin (build_fatbin), which the assembler includes — or
 * (--jit) carried as source and compiled by NVRTC when the program first
 * runs.
 *
 * The sources go in a private temporary directory under names taken from
 * the model ("digits_cnn.c"), so that the same model and flags give the
 * same program: a compiler writes its input's name into the program.  A
 * compiler's output is passed on to stderr and read on the way, to tell an
 * error in the code netc generated (a bug in netc) from any other failure
 * (a full disk, a missing library).  If netc is stopped by SIGINT, SIGTERM
 * or SIGHUP, it stops the compiler and removes its temporary files first.
 */
#include "netc.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* ------------------------------------------------------ what a stop leaves */

/* What an interrupted netc must not leave behind: its temporary files and
 * directory, and a compiler still running.  A signal handler can read
 * only static storage, hence this state. */
#define MAX_TEMPS 8
static char temps[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t ntemps;
static volatile sig_atomic_t running; /* the compiler's process group, or 0 */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

void build_remove_temps(void)
{
    /* last first: the directory after the files in it; unlink and rmdir
     * because a signal handler may not call remove */
    while (ntemps > 0) {
        const char *path = temps[--ntemps];
        if (unlink(path) != 0)
            rmdir(path);
    }
}

/* Stops the compiler (it is in a process group of its own: the driver and
 * the cc1, as or ld it started), waits for it so that nothing writes after
 * the files are removed, removes them, and dies of sig as if not caught. */
static void on_stop_signal(int sig)
{
    pid_t pg = running;
    if (pg > 0) {
        kill(-pg, sig);
        while (waitpid(pg, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    build_remove_temps();
    raise(sig); /* SA_RESETHAND: the default action, once this returns */
}

/* Catches the stop signals, those not ignored (nohup, a script's
 * background job) from the start: those stay ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        sigaddset(&sa.sa_mask, stop_signals[i]);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) {
        struct sigaction old;
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(stop_signals[i], &sa, NULL);
    }
}

void build_temp(const char *path)
{
    if (ntemps < MAX_TEMPS && strlen(path) < PATH_MAX) {
        strcpy(temps[ntemps], path);
        ntemps++; /* only now may the handler read it */
    }
}

const char *build_tempdir(Arena *a)
{
    const char *tmpdir = getenv("TMPDIR");
    if (!tmpdir || !*tmpdir)
        tmpdir = "/tmp";
    char *dir = arena_printf(a, "%s/netc-XXXXXX", tmpdir);
    catch_stop_signals();
    if (!mkdtemp(dir)) {
        fprintf(stderr, "netc: error: cannot create a temporary directory in '%s': %s\n", tmpdir,
                strerror(errno));
        return NULL;
    }
    build_temp(dir);
    return dir;
}

/* ------------------------------------------------------ running a compiler */

/* Whether line is an error the compiler found in one of files (gcc and
 * clang: "FILE:LINE:COL: error: ...", nvcc: "FILE(LINE): error: ...").
 * "fatal error:" is not one: a missing header, a file it cannot write. */
static bool error_in(const char *line, const char *const *files)
{
    for (; *files; files++) {
        size_t n = strlen(*files);
        if (!strncmp(line, *files, n) && (line[n] == ':' || line[n] == '(') &&
            line[n + 1] >= '0' && line[n + 1] <= '9' && strstr(line + n, ": error:"))
            return true;
    }
    return false;
}

/* Passes the compiler's output on to stderr up to its end; *said: whether
 * there was any.  Returns whether a line of it is an error in files. */
static bool pass_on(int fd, const char *const *files, bool *said)
{
    char buf[4096], line[2 * PATH_MAX];
    size_t len = 0;
    bool blamed = false;
    *said = false;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                line[len] = '\0';
                blamed = blamed || error_in(line, files);
                len = 0;
            } else if (len < sizeof line - 1) {
                line[len++] = buf[i];
            }
        }
        if (n <= 0)
            break;
        fwrite(buf, 1, (size_t)n, stderr);
        *said = true;
    }
    line[len] = '\0';
    return blamed || error_in(line, files);
}

/* Starts c in a process group of its own, with its stdout and stderr into
 * a pipe (*out), the stop signals blocked until running names it. */
static int spawn(const Cmd *c, pid_t *pid, int *out)
{
    int fds[2];
    if (pipe(fds) != 0)
        return errno;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    posix_spawnattr_init(&attr);
    sigset_t stops, old;
    sigemptyset(&stops);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        sigaddset(&stops, stop_signals[i]);
    sigprocmask(SIG_BLOCK, &stops, &old);
    posix_spawnattr_setsigmask(&attr, &old);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
    int rc = posix_spawnp(pid, c->argv[0], &fa, &attr, (char *const *)c->argv, environ);
    if (rc == 0)
        running = *pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0)
        close(fds[0]);
    *out = fds[0];
    return rc;
}

/* Runs c on src (a file netc wrote; model: the model file, which its
 * #line directives name); what names the tool in messages ("the C
 * compiler"), hint says which variable chooses it. */
static int run(const Cmd *c0, bool verbose, const char *what, const char *hint, const char *src,
               const char *model)
{
    Cmd c = *c0;
    c.argv[c.argc] = NULL;
    if (verbose) {
        for (int i = 0; i < c.argc; i++)
            fprintf(stderr, "%s%s", i ? " " : "", c.argv[i]);
        fputc('\n', stderr);
    }
    pid_t pid;
    int out = -1;
    int rc = spawn(&c, &pid, &out);
    if (rc != 0) {
        fprintf(stderr, "netc: error: cannot run %s '%s': %s\n", what, c.argv[0], strerror(rc));
        fprintf(stderr, "netc: note: %s\n", hint);
        return -1;
    }
    const char *base = strrchr(src, '/');
    const char *ours[] = {src, base ? base + 1 : src, model, NULL};
    bool said;
    bool blamed = pass_on(out, ours, &said);
    close(out);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    running = 0;
    if (status == -1)
        fprintf(stderr, "netc: error: lost %s: %s\n", what, strerror(errno));
    else if (WIFSIGNALED(status))
        fprintf(stderr, "netc: error: %s was killed by signal %d (%s)\n", what, WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status) == 0)
        return 0;
    else if (blamed) {
        fprintf(stderr, "netc: error: %s rejected the code netc generated (exit status %d)\n", what,
                WEXITSTATUS(status));
        fprintf(stderr, "netc: note: this is a bug in netc: please report it, with the model\n");
    } else
        fprintf(stderr, "netc: error: %s failed (exit status %d)%s\n", what, WEXITSTATUS(status),
                said ? "; its messages above say why" : " and said nothing");
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

/* The architecture's number in "sm_90" ("90"; "90a" and "100f" for the
 * architecture-specific and family targets), or NULL. */
static const char *arch_number(const char *arch)
{
    if (strncmp(arch, "sm_", 3) != 0)
        return NULL;
    const char *s = arch + 3;
    while (isdigit((unsigned char)*s))
        s++;
    if (s - arch < 5)
        return NULL; /* two digits at least */
    if (*s == 'a' || *s == 'f')
        s++;
    return *s ? NULL : arch + 3;
}

const char *build_bad_arch(Arena *a, const char *list)
{
    char *copy = arena_strdup(a, list);
    int n = 0;
    for (char *w = strtok(copy, ","); w; w = strtok(NULL, ","), n++)
        if (!arch_number(w))
            return w;
    return n ? NULL : list;
}

/* nvcc's -gencode flags: a cubin for each architecture of list, and the
 * last's PTX, which the driver compiles for a newer GPU. */
static void add_gencode(Arena *a, Cmd *c, const char *list)
{
    char *copy = arena_strdup(a, list);
    const char *last = NULL;
    for (char *w = strtok(copy, ","); w; w = strtok(NULL, ",")) {
        last = arch_number(w);
        add(c, arena_printf(a, "-gencode=arch=compute_%s,code=sm_%s", last, last));
    }
    if (last)
        add(c, arena_printf(a, "-gencode=arch=compute_%s,code=compute_%s", last, last));
}

int build_fatbin(const BuildOptions *o, const char *cusrc, size_t *size)
{
    Arena *a = arena_new();
    const char *fatbin = arena_printf(a, "%s.fatbin", cusrc);
    const char *nvcc = getenv("NETC_NVCC");
    if (!nvcc || !*nvcc)
        nvcc = NETC_NVCC;
    Cmd cu = {.argc = 0};
    add_words(a, &cu, nvcc);
    /* --threads 0: the architectures compiled at once, one a core */
    add_words(a, &cu, "-std=c++17 -O3 -fatbin --threads 0");
    add_gencode(a, &cu, o->cuda_arch ? o->cuda_arch : NETC_CUDA_ARCH);
    add(&cu, arena_printf(a, "-I%s", o->incdir));
    add(&cu, arena_printf(a, "-I%s/cuda", o->incdir));
    add(&cu, cusrc);
    add(&cu, "-o");
    add(&cu, fatbin);
    build_temp(fatbin);
    int rc = run(&cu, o->verbose, "nvcc", NVCC_HINT, cusrc, o->model);
    struct stat st;
    *size = 0;
    if (rc == 0 && stat(fatbin, &st) != 0) {
        fprintf(stderr, "netc: error: nvcc's fatbin '%s': %s\n", fatbin, strerror(errno));
        rc = -1;
    } else if (rc == 0 && st.st_size <= 0) {
        fprintf(stderr, "netc: error: nvcc's fatbin '%s' is empty\n", fatbin);
        rc = -1;
    } else if (rc == 0) {
        *size = (size_t)st.st_size;
    }
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
    if (o->mpi)
        add(&c, arena_printf(a, "%s/libnetrt_mpi.a", o->libdir));
    if (cuda)
        add(&c, arena_printf(a, "%s/libnetrt_cuda.a", o->libdir));
    add(&c, arena_printf(a, "%s/libnetrt.a", o->libdir));
    if (cuda) { /* NETC_CUDA_LIBS: other CUDA libraries (the emulated device's, in the tests) */
        const char *culibs = getenv("NETC_CUDA_LIBS");
        add_words(a, &c, culibs && *culibs ? culibs : NETC_CUDA_LIBS);
    }
    if (o->mpi)
        add_words(a, &c, NETC_MPI_LIBS);
    add_words(a, &c, NETC_LINK);
    add(&c, "-o");
    add(&c, tmp);
    build_temp(tmp);
    int rc = run(&c, o->verbose, "the C compiler", CC_HINT, csrc, o->model);
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
