/*
 * build.c — runs the compilers on the generated program.
 *
 * No shell is involved: each compiler is started with posix_spawnp and an
 * argument vector, so paths with spaces, quotes or dollars are safe.  The
 * executable is linked under a temporary name beside the target and renamed
 * over it only when every step succeeded, so a failed build never leaves a
 * half-written program behind.
 *
 * Without CUDA, or with --jit (the kernels carried as source, compiled by
 * NVRTC when the program first runs), the program is one C file, compiled
 * and linked by the C compiler at once (build_program).  Ahead of time,
 * two compilers run at once (build_objects): nvcc turns the kernel source
 * into a fatbin while the C compiler compiles the host code into an
 * object; then a small second C file, whose assembler includes the fatbin
 * (.incbin), is compiled and linked with that object, against
 * libnetrt_cuda and the CUDA runtime (statically) too.  Whichever compiler
 * fails first is reported and the other stopped.
 *
 * The sources go in a private temporary directory under names taken from
 * the model ("digits_cnn.c"), so that the same model and flags give the
 * same program: a compiler writes its input's name into the program.  A
 * compiler's output is passed on to stderr, a whole line at a time, and
 * read on the way, to tell an error in the code netc generated (a bug in
 * netc) from any other failure (a full disk, a missing library).  If netc
 * is stopped by SIGINT, SIGTERM or SIGHUP, it stops the compilers and
 * removes its temporary files first.
 */
#include "netc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
 * directory (where the compilers write theirs too), and the compilers
 * still running.  A signal handler can read only static storage, hence
 * this state. */
#define MAX_TEMPS 8
#define MAX_JOBS 2 /* compilers at once: nvcc and the C compiler */
static char temps[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t ntemps;
static volatile sig_atomic_t running[MAX_JOBS]; /* the compilers' process groups, or 0 */
static volatile sig_atomic_t output[MAX_JOBS] = {-1, -1}; /* the pipes they write to, or -1 */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
static char **compiler_env; /* environ, with TMPDIR netc's directory */

/* Removes what is in the directory fd (closed then): what the compilers
 * left, under names netc does not know (nvcc stopped leaves its own
 * files, a Python stand-in its folders), depth folders deep at most.
 * With openat, getdents64 and unlinkat, which a signal handler may call,
 * not opendir. */
static void empty_dir(int fd, int depth)
{
#ifdef SYS_getdents64
    _Alignas(8) char buf[2048];
    long n;
    while (fd >= 0 && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long at = 0; at < n;) { /* linux_dirent64: ino, off, reclen, type, name */
            unsigned short reclen;
            memcpy(&reclen, buf + at + 16, sizeof reclen);
            const char *name = buf + at + 19;
            at += reclen;
            if (!strcmp(name, ".") || !strcmp(name, "..") || unlinkat(fd, name, 0) == 0 ||
                errno != EISDIR || depth == 0)
                continue;
            empty_dir(openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC), depth - 1);
            unlinkat(fd, name, AT_REMOVEDIR);
        }
#else
    (void)depth;
#endif
    if (fd >= 0)
        close(fd);
}

void build_remove_temps(void)
{
    /* last first: the directory after the files in it; unlink and rmdir
     * because a signal handler may not call remove */
    while (ntemps > 0) {
        const char *path = temps[--ntemps];
        if (unlink(path) != 0 && errno != ENOENT) {
            empty_dir(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), 8);
            rmdir(path);
        }
    }
}

/* Waits for the end of a compiler that was sent SIGTERM: of its output
 * fd, that is of every process of its group that holds it (nvcc's cicc
 * and ptxas, which write files of their own), then of the compiler pid.
 * What it writes meanwhile is dropped.  As a signal handler may. */
static void await_end(pid_t pid, int fd)
{
    char drop[512];
    while (fd >= 0) {
        ssize_t n = read(fd, drop, sizeof drop);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            close(fd);
            fd = -1;
        }
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Stops the compilers (each is in a process group of its own: the driver
 * and the cc1, as or ld it started) with SIGTERM, whatever stopped netc
 * (nvcc cleans up after itself then, if not always), waits for their end
 * so that nothing writes after the files are removed, removes them, and
 * dies of sig as if not caught. */
static void on_stop_signal(int sig)
{
    for (int i = 0; i < MAX_JOBS; i++)
        if (running[i] > 0)
            kill(-(pid_t)running[i], SIGTERM);
    for (int i = 0; i < MAX_JOBS; i++)
        if (running[i] > 0)
            await_end((pid_t)running[i], (int)output[i]);
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

/* environ with TMPDIR dir: the compilers' temporary files in netc's
 * directory, removed with it whatever happens to them. */
static char **with_tmpdir(Arena *a, const char *dir)
{
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    char **env = arena_alloc(a, (n + 2) * sizeof *env);
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TMPDIR=", 7) != 0)
            env[k++] = environ[i];
    env[k++] = arena_printf(a, "TMPDIR=%s", dir);
    env[k] = NULL;
    return env;
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
    compiler_env = with_tmpdir(a, dir);
    return dir;
}

/* ------------------------------------------------------ running compilers */

/* A compiler netc runs: its command line, its name in messages ("nvcc"),
 * the hint for when it cannot be started, and the files whose errors are
 * in code netc generated (the source netc wrote, its base name, the model
 * its #line directives name). */
typedef struct Job {
    Cmd cmd;
    const char *what, *hint;
    const char *ours[4];
    int slot;             /* its place in running and output */
    pid_t pid;            /* 0: not running */
    int out;              /* its stdout and stderr (a pipe); -1 at their end */
    char text[8192 + 1];  /* what it wrote since its last whole line */
    size_t len;
    bool said;            /* it wrote something */
    bool blamed;          /* a line of it is an error in ours */
} Job;

static void job(Job *j, const Cmd *c, const char *what, const char *hint, const char *src,
                const char *model)
{
    const char *base = strrchr(src, '/');
    *j = (Job){.cmd = *c, .what = what, .hint = hint, .out = -1,
               .ours = {src, base ? base + 1 : src, model, NULL}};
    j->cmd.argv[j->cmd.argc] = NULL;
}

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

/* Passes on to stderr what j wrote up to its last whole line (at its end,
 * or a line longer than j->text, all of it), and reads those lines. */
static void pass_on(Job *j, bool end)
{
    size_t n = j->len;
    while (!end && n > 0 && j->text[n - 1] != '\n')
        n--;
    if (n == 0 && j->len == sizeof j->text - 1)
        n = j->len;
    for (size_t s = 0, e; s < n; s = e + 1) {
        for (e = s; e < n && j->text[e] != '\n'; e++)
            ;
        char was = j->text[e];
        j->text[e] = '\0';
        j->blamed = j->blamed || error_in(j->text + s, j->ours);
        j->text[e] = was;
    }
    fwrite(j->text, 1, n, stderr);
    j->said = j->said || n > 0;
    memmove(j->text, j->text + n, j->len - n);
    j->len -= n;
}

/* Reads what j wrote since the last call, its output's end included. */
static void take(Job *j)
{
    ssize_t n = read(j->out, j->text + j->len, sizeof j->text - 1 - j->len);
    if (n < 0 && errno == EINTR)
        return;
    if (n > 0) {
        j->len += (size_t)n;
        pass_on(j, false);
        return;
    }
    pass_on(j, true);
    output[j->slot] = -1;
    close(j->out);
    j->out = -1;
}

/* Starts j in a process group of its own, with its stdout and stderr into
 * a pipe, the stop signals blocked until running[slot] names it; says why
 * it could not be started.  0 or -1. */
static int start(Job *j, int slot, bool verbose)
{
    j->slot = slot;
    if (verbose) {
        for (int i = 0; i < j->cmd.argc; i++)
            fprintf(stderr, "%s%s", i ? " " : "", j->cmd.argv[i]);
        fputc('\n', stderr);
    }
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "netc: error: cannot run %s: %s\n", j->what, strerror(errno));
        return -1;
    }
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
    int rc = posix_spawnp(&j->pid, j->cmd.argv[0], &fa, &attr, (char *const *)j->cmd.argv,
                          compiler_env ? compiler_env : environ);
    if (rc == 0) {
        running[slot] = j->pid;
        output[slot] = fds[0];
    } else {
        j->pid = 0;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        fprintf(stderr, "netc: error: cannot run %s '%s': %s\n", j->what, j->cmd.argv[0],
                strerror(rc));
        fprintf(stderr, "netc: note: %s\n", j->hint);
        return -1;
    }
    j->out = fds[0];
    return 0;
}

/* Waits for j, whose output has ended, and says how it failed.  0 or -1. */
static int reap(Job *j)
{
    int status;
    while (waitpid(j->pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    running[j->slot] = 0;
    j->pid = 0;
    if (status == -1)
        fprintf(stderr, "netc: error: lost %s: %s\n", j->what, strerror(errno));
    else if (WIFSIGNALED(status))
        fprintf(stderr, "netc: error: %s was killed by signal %d (%s)\n", j->what,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status) == 0)
        return 0;
    else if (j->blamed) {
        fprintf(stderr, "netc: error: %s rejected the code netc generated (exit status %d)\n",
                j->what, WEXITSTATUS(status));
        fprintf(stderr, "netc: note: this is a bug in netc: please report it, with the model\n");
    } else
        fprintf(stderr, "netc: error: %s failed (exit status %d)%s\n", j->what,
                WEXITSTATUS(status), j->said ? "; its messages above say why" : " and said nothing");
    return -1;
}

/* Stops j, still running because another compiler failed: what it
 * writes from now on is dropped, and its end not reported. */
static void stop(Job *j)
{
    kill(-j->pid, SIGTERM);
    await_end(j->pid, j->out);
    output[j->slot] = -1;
    running[j->slot] = 0;
    j->out = -1;
    j->pid = 0;
}

/* Runs the n jobs at once, passing on their output; the first to fail is
 * reported and the others stopped.  0 when all succeeded, or -1. */
static int run(Job *jobs, int n, bool verbose)
{
    int rc = 0, left = 0;
    for (int i = 0; i < n && rc == 0; i++, left++)
        rc = start(&jobs[i], i, verbose);
    while (rc == 0 && left > 0) {
        struct pollfd fds[MAX_JOBS];
        int slot[MAX_JOBS], nfds = 0;
        for (int i = 0; i < n; i++)
            if (jobs[i].out >= 0) {
                fds[nfds] = (struct pollfd){.fd = jobs[i].out, .events = POLLIN};
                slot[nfds++] = i;
            }
        if (poll(fds, (nfds_t)nfds, -1) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "netc: error: cannot read the compilers' output: %s\n",
                    strerror(errno));
            rc = -1;
            break;
        }
        for (int k = 0; k < nfds && rc == 0; k++) {
            Job *j = &jobs[slot[k]];
            if (!fds[k].revents)
                continue;
            take(j);
            if (j->out < 0) {
                rc = reap(j);
                left--;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (jobs[i].pid > 0)
            stop(&jobs[i]);
    return rc;
}

static const char *const CC_HINT = "set NETC_CC to a C compiler";
static const char *const NVCC_HINT = "set NETC_NVCC to CUDA's nvcc, or build with --no-cuda";


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

/* nvcc's command: the kernel source cusrc into the fatbin file. */
static void nvcc_cmd(Arena *a, Cmd *c, const BuildOptions *o, const char *cusrc,
                     const char *fatbin)
{
    const char *nvcc = getenv("NETC_NVCC");
    add_words(a, c, nvcc && *nvcc ? nvcc : NETC_NVCC);
    /* --threads 0: the architectures compiled at once, one a core */
    add_words(a, c, "-std=c++17 -O3 -fatbin --threads 0");
    add_gencode(a, c, o->cuda_arch ? o->cuda_arch : NETC_CUDA_ARCH);
    add(c, arena_printf(a, "-I%s", o->incdir));
    add(c, arena_printf(a, "-I%s", runtime_dir(a, o->incdir, "cuda")));
    add(c, arena_printf(a, "-I%s", runtime_dir(a, o->incdir, "../templates")));
    add(c, cusrc);
    add(c, "-o");
    add(c, fatbin);
}

/* Where the runtime's CUDA headers (sub "cuda") or kernel templates (sub
 * "../templates") lie: beside the source tree's runtime/ (incdir), or, in
 * an installed tree, with netrt.h in incdir. */
const char *runtime_dir(Arena *a, const char *incdir, const char *sub)
{
    const char *dir = arena_printf(a, "%s/%s", incdir, sub);
    return access(dir, F_OK) == 0 ? dir : incdir;
}

/* The C compiler and its flags for generated C: the standard,
 * optimisation, OpenMP, netrt.h; with cuda, the CUDA headers too (the
 * source tree's runtime/cuda, or an installed include/netc). */
static void cc_cmd(Arena *a, Cmd *c, const BuildOptions *o, bool cuda)
{
    add_words(a, c, o->cc);
    add(c, "-std=c11");
    const char *cflags = getenv("NETC_CFLAGS");
    add_words(a, c, cflags ? cflags : NETC_DEFAULT_CFLAGS);
    add_words(a, c, NETC_OPENMP_CFLAGS);
    add(c, arena_printf(a, "-I%s", o->incdir));
    if (cuda) {
        add(c, arena_printf(a, "-I%s", runtime_dir(a, o->incdir, "cuda")));
        add_words(a, c, NETC_CUDA_CFLAGS);
    }
}

int build_objects(const BuildOptions *o, const char *cusrc, const char *csrc, const char *obj,
                  size_t *fatbin_size)
{
    Arena *a = arena_new();
    const char *fatbin = arena_printf(a, "%s.fatbin", cusrc);
    Cmd cu = {.argc = 0}, c = {.argc = 0};
    nvcc_cmd(a, &cu, o, cusrc, fatbin);
    cc_cmd(a, &c, o, true);
    add(&c, "-c");
    add(&c, csrc);
    add(&c, "-o");
    add(&c, obj);
    build_temp(fatbin);
    build_temp(obj);
    Job jobs[2];
    job(&jobs[0], &cu, "nvcc", NVCC_HINT, cusrc, o->model);
    job(&jobs[1], &c, "the C compiler", CC_HINT, csrc, o->model);
    int rc = run(jobs, 2, o->verbose);
    struct stat st;
    *fatbin_size = 0;
    if (rc == 0 && stat(fatbin, &st) != 0) {
        fprintf(stderr, "netc: error: nvcc's fatbin '%s': %s\n", fatbin, strerror(errno));
        rc = -1;
    } else if (rc == 0 && st.st_size <= 0) {
        fprintf(stderr, "netc: error: nvcc's fatbin '%s' is empty\n", fatbin);
        rc = -1;
    } else if (rc == 0) {
        *fatbin_size = (size_t)st.st_size;
    }
    arena_free(a);
    return rc;
}

int build_program(const BuildOptions *o, const char *csrc, const char *obj, bool cuda,
                  const char *out)
{
    /* the linker writes a temporary file beside out (nrt_atomic), renamed
     * over it once complete */
    nrt_atomic w;
    nrt_error err;
    if (nrt_atomic_open(&w, out, &err) || nrt_atomic_close(&w, &err)) {
        fprintf(stderr, "netc: error: %s\n", err.msg);
        return -1;
    }
    Arena *a = arena_new();
    Cmd c = {.argc = 0};
    cc_cmd(a, &c, o, cuda);
    if (obj)
        add(&c, obj);
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
    add(&c, w.tmp);
    build_temp(w.tmp);
    Job j;
    job(&j, &c, "the C compiler", CC_HINT, csrc, o->model);
    int rc = run(&j, 1, o->verbose);
    if (rc == 0 && nrt_atomic_commit(&w, &err)) {
        fprintf(stderr, "netc: error: %s\n", err.msg);
        rc = -1;
    }
    nrt_atomic_abort(&w);
    arena_free(a);
    return rc;
}
