/*
 * main.c — the netc command: reads the flags, runs the passes in order and
 * writes what was asked for (a summary, the C source, or a program).
 *
 * Output files are written whole or not at all: to a temporary file first,
 * renamed into place once complete.  Any error in the model means exit
 * status 1 and no output file.
 */
#include "config.h"
#include "netc.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MODEL_BYTES (16 << 20)

static void usage(FILE *out)
{
    fputs("usage: netc [options] MODEL.net\n"
          "\n"
          "Compiles a model file into a standalone training program.\n"
          "\n"
          "  -o FILE         write the program (or, with --emit, the source) to FILE;\n"
          "                  default: the model's file name without .net\n"
          "  --emit=KIND     write KIND instead of a program (to stdout without -o,\n"
          "                  or with -o -):\n"
          "                    c        the generated C (with CUDA: its host passes\n"
          "                             and kernel source too, as --jit builds it)\n"
          "                    cuda     the generated CUDA kernels (.cu)\n"
          "                    ir       the graph: shapes, passes, fusion groups and\n"
          "                             the memory plan, as text\n"
          "                    dot      the graph for graphviz (dot -Tsvg)\n"
          "                    summary  each layer's output shape and parameters\n"
          "                    lib      a C library: FILE.h and FILE.c, the model\n"
          "                             behind create, load, save, predict,\n"
          "                             train_step and destroy (with CUDA, its\n"
          "                             kernels compiled at run time, as --jit)\n"
          "  --no-line       no #line directives in generated C and CUDA (by default\n"
          "                  they point compilers and debuggers at the model file)\n"
          "  -MD             also write make dependencies of the output (FILE.d)\n"
          "  -MF FILE        ... to FILE (implies -MD)\n"
          "  -MP             ... with a phony target for each dependency\n"
          "  -MT TARGET      ... naming TARGET instead of the output\n"
          "  --no-cuda       build a cpu-only program (default: with the CUDA backend\n"
          "                  when netc was configured with CUDA)\n"
          "  --jit           the program carries its kernels' source and compiles them\n"
          "                  with NVRTC on first run, for the GPU present, through a\n"
          "                  disk cache (no nvcc needed; default: nvcc, ahead of time)\n"
          "  --mpi           the program trains data-parallel when mpirun (or srun)\n"
          "                  starts it: each rank its share of every batch, the\n"
          "                  gradients averaged over MPI (netc configured --with-mpi)\n"
          "  --cuda-arch=LIST  the GPUs nvcc compiles the kernels for, ahead of time:\n"
          "                  sm_90, or sm_80,sm_90 (default: configure's, " NETC_CUDA_ARCH ");\n"
          "                  the last's PTX too, for newer GPUs\n"
          "  --check         check the model and print its summary: each layer, its\n"
          "                  output shape and parameter count, and the totals\n"
          "  -v, --verbose   show the compilers' command lines\n"
          "  --version       print netc's version\n"
          "  --help          print this help\n"
          "\n"
          "Environment: NETC_CC (C compiler), NETC_CFLAGS (default -O3 -fno-math-errno),\n"
          "NETC_INCLUDE_DIR and NETC_LIB_DIR (where netrt.h and libnetrt.a are),\n"
          "NETC_NVCC (CUDA's compiler), NETC_CUDA_LIBS (the CUDA libraries a program\n"
          "links), NETC_CUDA=no (as --no-cuda).\n"
          "The language and the generated program's flags are described in README.md,\n"
          "installed as " NETC_DOCDIR "/README.md (and in netc(1)).\n",
          out);
}

/* Reads the whole file; NULL (with a message) on failure. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "netc: error: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "netc: error: '%s' is a directory\n", path);
        fclose(f);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > MAX_MODEL_BYTES) {
            fprintf(stderr, "netc: error: '%s' is larger than %d MiB; is it a model file?\n",
                    path, MAX_MODEL_BYTES >> 20);
            free(buf);
            fclose(f);
            return NULL;
        }
        if (n < cap) {
            if (ferror(f)) {
                fprintf(stderr, "netc: error: cannot read '%s': %s\n", path, strerror(errno));
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown)
            free(buf);
        buf = grown;
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "netc: error: out of memory reading '%s'\n", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* What netc can write: --emit=KIND (and the C a CUDA build compiles, with
 * the unit of nvcc's fatbin). */
enum { EMIT_C, EMIT_C_FOR_CUDA, EMIT_CUDA, EMIT_IR, EMIT_DOT, EMIT_SUMMARY, EMIT_LIB,
       EMIT_LIB_HEADER, EMIT_FATBIN };
static const char *const kind_names[] = {"c", NULL, "cuda", "ir", "dot", "summary", "lib", NULL,
                                         NULL};

#ifdef NETC_HAVE_CUDA
#define NETC_WITH_CUDA true
#else
#define NETC_WITH_CUDA false
#endif
#ifdef NETC_HAVE_MPI
#define NETC_WITH_MPI true
#else
#define NETC_WITH_MPI false
#endif

/* "models/digits.net" -> "digits" */
static char *default_output(Arena *a, const char *model)
{
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    size_t n = strlen(base);
    if (n > 4 && !strcmp(base + n - 4, ".net"))
        n -= 4;
    else
        return "a.out";
    char *s = arena_alloc(a, n + 1);
    memcpy(s, base, n);
    return s;
}

/* The name the generated code gives its source: as written, but never an
 * absolute path, so output does not depend on where the tree lives. */
static const char *source_name(const char *path)
{
    if (path[0] != '/')
        return path;
    const char *base = strrchr(path, '/');
    return base + 1;
}

/* Writes one output kind to f; out_name is what #line calls f. */
static void emit_kind(FILE *f, const Program *p, const EmitOptions *o, Arena *a, int kind)
{
    switch (kind) {
    case EMIT_CUDA:
        emit_cuda(f, p, o, a);
        break;
    case EMIT_IR:
        emit_ir(f, p, o, a);
        break;
    case EMIT_DOT:
        emit_dot(f, p, o, a);
        break;
    case EMIT_SUMMARY:
        print_summary(f, p);
        break;
    case EMIT_LIB_HEADER:
        emit_lib_header(f, p, o, a);
        break;
    case EMIT_FATBIN:
        emit_cuda_fatbin(f, p, o, a);
        break;
    default:
        emit_c(f, p, o, a, kind == EMIT_C_FOR_CUDA);
    }
}

/* Says err, netc's way. */
static int said(const nrt_error *err)
{
    fprintf(stderr, "netc: error: %s\n", err->msg);
    return -1;
}

/* Writes the outputs kinds[i] to paths[i], all or none: each to a
 * temporary file beside it (nrt_atomic), renamed into place once all are
 * complete. */
static int write_files(const Program *p, const EmitOptions *o0, Arena *a, int n,
                       const char *const *paths, const int *kinds)
{
    nrt_atomic w[4] = {{0}};
    nrt_error err;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        EmitOptions o = *o0;
        o.out_name = paths[i];
        if (nrt_atomic_open(&w[i], paths[i], &err)) {
            rc = said(&err);
            break;
        }
        emit_kind(w[i].f, p, &o, a, kinds[i]);
        if (nrt_atomic_close(&w[i], &err))
            rc = said(&err);
    }
    for (int i = 0; i < n && rc == 0; i++)
        if (nrt_atomic_commit(&w[i], &err))
            rc = said(&err);
    for (int i = 0; i < n; i++)
        nrt_atomic_abort(&w[i]);
    return rc;
}

/* Writes the output to path atomically, or to stdout if path is NULL. */
static int write_out(const Program *p, const EmitOptions *o0, const char *path, Arena *a, int kind)
{
    if (path)
        return write_files(p, o0, a, 1, &path, &kind);
    EmitOptions o = *o0;
    o.out_name = NULL;
    emit_kind(stdout, p, &o, a, kind);
    return fflush(stdout) == 0 ? 0 : -1;
}

/* The C identifier of a library's API: the output's base name, every
 * other character an underscore ("my-net" -> my_net). */
static const char *lib_prefix(Arena *a, const char *out)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    char *id = arena_printf(a, "%s%s", *base >= '0' && *base <= '9' ? "m" : "", base);
    for (char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            *c = '_';
    return id;
}

/* --emit=lib: OUT.h and OUT.c (with CUDA, the kernels' source in it). */
static int write_lib(const Program *p, const EmitOptions *o0, const char *out, Arena *a)
{
    EmitOptions o = *o0;
    o.lib = lib_prefix(a, out);
    const char *base = strrchr(out, '/');
    o.lib_header = arena_printf(a, "%s.h", base ? base + 1 : out);
    const char *paths[2] = {arena_printf(a, "%s.h", out), arena_printf(a, "%s.c", out)};
    const int kinds[2] = {EMIT_LIB_HEADER, o.cuda ? EMIT_C_FOR_CUDA : EMIT_C};
    return write_files(p, &o, a, 2, paths, kinds);
}

/* A temporary file DIR/STEM.SUFFIX holding one output kind, and named so
 * by its #line directives: the same wherever DIR is, so that the program
 * is too.  NULL (with the error said) on failure. */
static char *write_temp(const Program *p, const EmitOptions *o0, Arena *a, const char *dir,
                        const char *stem, int kind, const char *suffix)
{
    char *path = arena_printf(a, "%s/%s%s", dir, stem, suffix);
    build_temp(path);
    FILE *f = fopen(path, "wx");
    if (!f) {
        fprintf(stderr, "netc: error: cannot create '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    EmitOptions o = *o0;
    o.out_name = path + strlen(dir) + 1;
    emit_kind(f, p, &o, a, kind);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "netc: error: cannot write '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    return path;
}

/* Writes the program's sources into dir, named after the model, and
 * builds the program out from them: one C file, or with eo->cuda ahead of
 * time (not jit), the kernels compiled by nvcc while the host code is by
 * the C compiler, then the fatbin's unit, and the link.  0 or -1, the
 * error said. */
static int build(const Program *p, EmitOptions *eo, const BuildOptions *bo, Arena *a,
                 const char *dir, const char *model_path, bool jit, const char *out)
{
    const char *stem = default_output(a, source_name(model_path));
    if (!eo->cuda || jit) {
        char *csrc = write_temp(p, eo, a, dir, stem, eo->cuda ? EMIT_C_FOR_CUDA : EMIT_C, ".c");
        return csrc ? build_program(bo, csrc, NULL, eo->cuda, out) : -1;
    }
    char *cusrc = write_temp(p, eo, a, dir, stem, EMIT_CUDA, ".cu");
    if (!cusrc)
        return -1;
    eo->fatbin_path = arena_printf(a, "%s.fatbin", cusrc);
    char *csrc = write_temp(p, eo, a, dir, stem, EMIT_C_FOR_CUDA, ".c");
    const char *obj = arena_printf(a, "%s/%s.o", dir, stem);
    if (!csrc || build_objects(bo, cusrc, csrc, obj, &eo->fatbin_size))
        return -1;
    char *fsrc = write_temp(p, eo, a, dir, stem, EMIT_FATBIN, ".fatbin.c");
    return fsrc ? build_program(bo, fsrc, obj, true, out) : -1;
}

/* -MD, -MF, -MP, -MT: make dependencies of the output, as gcc writes them. */
typedef struct Deps {
    bool on, phony;
    const char *file, *target;
} Deps;

/* A file name as make reads it in a rule: blanks, '#' and '$' escaped. */
static void put_make_name(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == ' ' || *s == '\t' || *s == '#' || *s == '\\')
            fputc('\\', f);
        else if (*s == '$')
            fputc('$', f);
        fputc(*s, f);
    }
}

/* Writes "targets: prereqs" (and with phony an empty rule for each
 * prerequisite) to path, atomically. */
static int write_deps(const char *path, const char *const *targets, int ntargets,
                      const char *const *prereqs, int nprereqs, bool phony)
{
    nrt_atomic w;
    nrt_error err;
    if (nrt_atomic_open(&w, path, &err))
        return said(&err);
    FILE *f = w.f;
    for (int i = 0; i < ntargets; i++) {
        fputs(i ? " " : "", f);
        put_make_name(f, targets[i]);
    }
    fputc(':', f);
    for (int i = 0; i < nprereqs; i++) {
        fputs(" \\\n ", f);
        put_make_name(f, prereqs[i]);
    }
    fputc('\n', f);
    for (int i = 0; phony && i < nprereqs; i++) {
        fputc('\n', f);
        put_make_name(f, prereqs[i]);
        fputs(":\n", f);
    }
    return nrt_atomic_commit(&w, &err) ? said(&err) : 0;
}

/* An installed directory, moved with netc: when netc runs from elsewhere
 * than the bindir it was installed to (a staged `make install
 * DESTDIR=...`, a relocated package), the runtime is looked for where it
 * lies relative to netc, as at install time: PREFIX/bin/netc ->
 * PREFIX/include/netc, PREFIX/lib. */
static const char *relocate(Arena *a, const char *exe_dir, const char *dir)
{
    const size_t np = strlen(NETC_PREFIX);
    if (strncmp(NETC_BINDIR, NETC_PREFIX, np) || strncmp(dir, NETC_PREFIX, np))
        return dir;
    const char *bin = &NETC_BINDIR[np]; /* "/bin" */
    const size_t ne = strlen(exe_dir), nb = strlen(bin);
    if (ne < nb || strcmp(exe_dir + ne - nb, bin))
        return dir;
    return arena_printf(a, "%.*s%s", (int)(ne - nb), exe_dir, dir + np);
}

/* Where the runtime is: the environment, else the build tree when netc
 * runs from it, else the installed tree, wherever it now is. */
static void find_runtime(BuildOptions *o, Arena *a)
{
    o->incdir = getenv("NETC_INCLUDE_DIR");
    o->libdir = getenv("NETC_LIB_DIR");
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    const char *exe_dir = NETC_BINDIR;
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            exe_dir = self;
        }
    }
    bool in_build_tree = !strcmp(exe_dir, NETC_BUILDDIR);
    if (!o->incdir || !*o->incdir)
        o->incdir = in_build_tree ? NETC_SRCDIR "/runtime" : relocate(a, exe_dir, NETC_INCLUDEDIR);
    if (!o->libdir || !*o->libdir)
        o->libdir = in_build_tree ? NETC_BUILDDIR "/runtime" : relocate(a, exe_dir, NETC_LIBDIR);
    o->cc = getenv("NETC_CC");
    if (!o->cc || !*o->cc)
        o->cc = NETC_CC;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *out = NULL, *cuda_arch = NULL;
    bool check = false, emit = false, verbose = false, no_cuda = false, lines = true, jit = false,
         mpi = false;
    int kind = EMIT_C;
    Deps deps = {0};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("netc %s\n", NETC_VERSION);
            return 0;
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else if (!strncmp(a, "--emit=", 7)) {
            emit = true;
            kind = -1;
            for (int k = 0; k < (int)(sizeof kind_names / sizeof *kind_names); k++)
                if (kind_names[k] && !strcmp(a + 7, kind_names[k]))
                    kind = k;
            if (kind < 0) {
                fprintf(stderr, "netc: error: unknown output kind '%s' (expected c, cuda, ir, dot, "
                        "summary or lib)\n", a + 7);
                return 2;
            }
        } else if (!strcmp(a, "--no-line")) {
            lines = false;
        } else if (!strcmp(a, "--no-cuda")) {
            no_cuda = true;
        } else if (!strcmp(a, "--jit")) {
            jit = true;
        } else if (!strcmp(a, "--mpi")) {
            if (!NETC_WITH_MPI) {
                fprintf(stderr, "netc: error: --mpi: this netc was built without MPI "
                        "(configure --with-mpi, with OpenMPI's mpicc on the PATH)\n");
                return 2;
            }
            mpi = true;
        } else if (!strncmp(a, "--cuda-arch=", 12)) {
            Arena *tmp = arena_new();
            const char *bad = build_bad_arch(tmp, a + 12);
            if (bad)
                fprintf(stderr, "netc: error: --cuda-arch: '%s' is not an architecture like sm_90 "
                        "(a list: sm_80,sm_90)\n", bad);
            arena_free(tmp);
            if (bad)
                return 2;
            cuda_arch = a + 12;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "-MF") || !strcmp(a, "-MT")) {
            if (++i == argc) {
                fprintf(stderr, "netc: error: %s needs a %s\n", a, a[1] == 'o' || a[2] == 'F'
                                                                         ? "file name" : "target");
                return 2;
            }
            if (a[1] == 'o')
                out = argv[i];
            else if (a[2] == 'F')
                deps.on = true, deps.file = argv[i];
            else
                deps.target = argv[i];
        } else if (!strcmp(a, "-MD")) {
            deps.on = true;
        } else if (!strcmp(a, "-MP")) {
            deps.phony = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "netc: error: unknown option '%s'\n", a);
            fprintf(stderr, "netc: note: 'netc --help' lists the options\n");
            return 2;
        } else if (model_path) {
            fprintf(stderr, "netc: error: more than one model file ('%s' and '%s')\n", model_path, a);
            return 2;
        } else {
            model_path = a;
        }
    }
    if (!model_path) {
        fprintf(stderr, "netc: error: no model file\n");
        usage(stderr);
        return 2;
    }
    if (deps.on && (check || (emit && kind != EMIT_LIB && !out && !(deps.file && deps.target)))) {
        fprintf(stderr, "netc: error: -MD needs an output file: give -o FILE (or -MF and -MT)\n");
        return 2;
    }

    size_t len;
    char *src = read_file(model_path, &len);
    if (!src)
        return 1;
    Arena *arena = arena_new();
    Diag d = {model_path, src, len, 0, stderr, NULL, 0, 0, false};
    int status = 1;
    Model *m = NULL;
    Program *p = NULL;
    if (diag_check_utf8(&d))
        m = parse_model(&d, arena);
    if (m && d.errors == 0)
        expand_blocks(&d, arena, m);
    if (m && d.errors == 0)
        p = sema_check(&d, arena, m);
    if (p && d.errors == 0) { /* the memory plan refuses what it cannot place */
        const char *reorder = getenv("NETC_REORDER"); /* no: as written (tests) */
        if (!reorder || strcmp(reorder, "no"))
            sink_activations(p);
        autodiff(p);
        fuse_and_plan(p);
    }
    diag_flush(&d);
    if (!p || d.errors) {
        if (d.errors > 1)
            fprintf(stderr, "%d errors\n", d.errors);
        goto done;
    }
    if (check) {
        print_summary(stdout, p);
        status = 0;
        goto done;
    }

    /* CUDA when this netc was built with it, unless --no-cuda, NETC_CUDA=no
     * (the test suite's cpu tests) or the model's device is cpu */
    const char *env_cuda = getenv("NETC_CUDA");
    bool env_off = env_cuda && !strcmp(env_cuda, "no");
    bool cpu_model = !strcmp(p->device, "cpu");
    bool cuda = NETC_WITH_CUDA && !no_cuda && !env_off && !cpu_model;
    const char *cuda_off = !NETC_WITH_CUDA ? "this netc was built without CUDA"
                           : no_cuda       ? "CUDA is off (--no-cuda)"
                           : env_off       ? "CUDA is off (NETC_CUDA=no)"
                                           : "the model's device is cpu";
    if (jit && !cuda) {
        fprintf(stderr, "netc: error: --jit compiles CUDA kernels, but %s\n", cuda_off);
        goto done;
    }
    /* a program (or its C) that will refuse the model's own device */
    if (!cuda && p->device_stmt && !strncmp(p->device, "cuda", 4) &&
        (!emit || kind == EMIT_C || kind == EMIT_LIB)) {
        diag_warning(&d, p->device_stmt->name_loc, "device %s, but %s", p->device, cuda_off);
        diag_note(&d, p->device_stmt->name_loc, "the program will refuse to run unless given "
                  "--device cpu; 'device auto' falls back to the cpu");
        diag_flush(&d);
    }
    if (mpi && kind == EMIT_LIB && emit) {
        fprintf(stderr, "netc: error: --mpi builds a program (mpirun starts it); --emit=lib "
                "makes a library\n");
        goto done;
    }
    EmitOptions eo = {.source = source_name(model_path), .lines = lines, .cuda = cuda, .mpi = mpi};
    const char *targets[3] = {out};
    int ntargets = 1;
    const char *prereqs[10] = {model_path};
    int nprereqs = 1;
    if (kind == EMIT_LIB) {
        if (!out)
            out = default_output(arena, model_path);
        status = write_lib(p, &eo, out, arena) ? 1 : 0;
        targets[0] = arena_printf(arena, "%s.h", out);
        targets[1] = arena_printf(arena, "%s.c", out);
        ntargets = 2;
        goto deps;
    }
    if (emit) {
        if (kind == EMIT_C && cuda)
            kind = EMIT_C_FOR_CUDA;
        if (out && !strcmp(out, "-")) /* -o -: stdout, as without -o */
            out = NULL;
        status = write_out(p, &eo, out, arena, kind) == 0 ? 0 : 1;
        goto deps;
    }

    if (!out)
        out = default_output(arena, model_path);
    targets[0] = out;
    BuildOptions bo = {0};
    find_runtime(&bo, arena);
    bo.verbose = verbose;
    bo.cuda_arch = cuda_arch;
    bo.mpi = mpi;
    if (cuda_arch && (jit || !cuda || emit))
        fprintf(stderr, "netc: warning: --cuda-arch is ignored: %s\n",
                jit ? "--jit compiles for the GPU present" : emit ? "--emit writes no kernels' "
                "binary" : cuda_off);
    /* a program is rebuilt when the runtime it includes and links is */
    prereqs[nprereqs++] = arena_printf(arena, "%s/netrt.h", bo.incdir);
    prereqs[nprereqs++] = arena_printf(arena, "%s/philox.h", bo.incdir);
    prereqs[nprereqs++] = arena_printf(arena, "%s/libnetrt.a", bo.libdir);
    if (mpi)
        prereqs[nprereqs++] = arena_printf(arena, "%s/libnetrt_mpi.a", bo.libdir);
    if (cuda) {
        const char *cudainc = runtime_dir(arena, bo.incdir, "cuda");
        prereqs[nprereqs++] = arena_printf(arena, "%s/netrt_cuda.h", cudainc);
        prereqs[nprereqs++] = arena_printf(arena, "%s/netrt_kernels.cuh",
                                           runtime_dir(arena, bo.incdir, "../templates"));
        prereqs[nprereqs++] = arena_printf(arena, "%s/netrt_blocks.h", cudainc);
        prereqs[nprereqs++] = arena_printf(arena, "%s/libnetrt_cuda.a", bo.libdir);
    }
    bo.model = eo.source;
    const char *tmpdir = build_tempdir(arena);
    if (tmpdir)
        status = build(p, &eo, &bo, arena, tmpdir, model_path, jit, out) == 0 ? 0 : 1;
    build_remove_temps();

deps:
    if (status == 0 && deps.on) {
        if (deps.target) {
            targets[0] = deps.target;
            ntargets = 1;
        }
        const char *file = deps.file ? deps.file : arena_printf(arena, "%s.d", out);
        if (write_deps(file, targets, ntargets, prereqs, nprereqs, deps.phony))
            status = 1;
    }
done:
    arena_free(arena);
    free(src);
    return status;
}
