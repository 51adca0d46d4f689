/*
 * data.c — datasets: reading them from disk, splitting off a held-out part,
 * and standardizing their features.
 *
 * A dataset lives entirely in memory as an nrt_dataset: n samples of dim
 * float features, row-major, plus either one int32 class label a sample
 * (NRT_TARGET_CLASS) or ydim float target values a sample (NRT_TARGET_VALUE).
 *
 * Three formats are read:
 *
 *  - "csv": comma-separated numbers; "table": numbers separated by runs of
 *    blanks and tabs (leading blanks allowed), like the UCI housing file.
 *    The whole file is read into memory and parsed in one pass; the output
 *    arrays grow geometrically.  The first `header` lines are skipped, lines
 *    holding only whitespace are ignored, CRLF line ends, a UTF-8 byte order
 *    mark and a missing final newline are tolerated.  Every other line is a
 *    sample and must have exactly dim + T columns, T being 1 for a class
 *    label or ncls for value targets.  The targets are the T adjacent
 *    columns starting at column `label` (0-based); a negative `label` counts
 *    from the end so that the target block ends there: -1 means "the last T
 *    columns".  The features are all other columns, in order.  Numbers are
 *    read with strtod in the C locale; inf, nan and anything that would not
 *    fit a float are errors, and so are NUL bytes and lines over 1 MiB.
 *    Class labels must be integers in [0, ncls).
 *
 *  - "cifar10": the CIFAR-10 binary batches, records of one label byte and
 *    3072 pixel bytes (the R, G and B 32x32 planes, row-major).  Pixels are
 *    divided by 255 in float, as torchvision's ToTensor does.  The path is
 *    one batch file, or a directory holding data_batch_1.bin ..
 *    data_batch_5.bin (those that exist, in that order) or, for the test
 *    set, test_batch.bin.
 *
 * Features are multiplied by the source's scale while loading (0 counts as
 * 1); standardization is left to the caller, which computes the statistics
 * on the training set alone (nrt_dataset_stats) and applies them to every
 * set (nrt_dataset_standardize).
 *
 * Conventions: failing functions write one line into the nrt_error, return
 * -1, leak nothing and leave their output dataset zeroed.  Error messages
 * name the file as given and a 1-based line (and field) or record number.
 */
#include "netrt.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINE ((size_t)1 << 20)  /* longest text line accepted, bytes */
#define CIFAR_PIXELS 3072           /* 3 x 32 x 32 */
#define CIFAR_RECORD 3073           /* label byte + pixels */
#define CIFAR_CHUNK 256             /* records read at a time */
#define STATS_BLOCK 256             /* features summed together */
#define SHOWN_FIELD 64              /* most bytes of a bad field quoted */

static int oom(nrt_error *err)
{
    return nrt_errorf(err, "out of memory");
}

/* ------------------------------------------------------------- storage */

/* Grows d's arrays to hold at least `need` samples, doubling capacity.  On
 * failure the arrays already grown stay valid (and owned by d). */
static int reserve(nrt_dataset *d, size_t *cap, size_t need, int has_label,
                   nrt_error *err)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return oom(err);
        ncap *= 2;
    }
    size_t row = d->dim > d->ydim ? d->dim : d->ydim;
    if (row && ncap > SIZE_MAX / sizeof(float) / row)
        return oom(err);

    float *x = realloc(d->x, ncap * d->dim * sizeof *x);
    if (!x)
        return oom(err);
    d->x = x;
    if (has_label) {
        int32_t *label = realloc(d->label, ncap * sizeof *label);
        if (!label)
            return oom(err);
        d->label = label;
    } else {
        float *y = realloc(d->y, ncap * d->ydim * sizeof *y);
        if (!y)
            return oom(err);
        d->y = y;
    }
    *cap = ncap;
    return 0;
}

/* Gives back the unused tail of an array; keeps the old block if the
 * allocator declines. */
static void *shrink(void *p, size_t bytes)
{
    if (!p || bytes == 0)
        return p;
    void *q = realloc(p, bytes);
    return q ? q : p;
}

static void shrink_to_fit(nrt_dataset *d)
{
    d->x = shrink(d->x, d->n * d->dim * sizeof *d->x);
    d->label = shrink(d->label, d->n * sizeof *d->label);
    d->y = shrink(d->y, d->n * d->ydim * sizeof *d->y);
}

void nrt_dataset_free(nrt_dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->label);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* --------------------------------------------------------- reading files */

/* Reads the whole file at path into a NUL-terminated buffer. */
static int read_all(const char *path, char **buf, size_t *len, nrt_error *err)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return nrt_errorf(err, "%s: cannot open: %s", path, strerror(errno));

    struct stat st;
    size_t cap = 1 << 16;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (unsigned long long)st.st_size < SIZE_MAX - 1)
        cap = (size_t)st.st_size + 1; /* +1: see EOF without a regrow */
    char *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        return oom(err);
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            if (cap > (SIZE_MAX - 1) / 2) {
                free(b);
                close(fd);
                return oom(err);
            }
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                close(fd);
                return oom(err);
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(b);
            close(fd);
            return nrt_errorf(err, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

/* Reads exactly want bytes unless the file ends first; returns the number
 * read, or -1 with errno set. */
static ssize_t read_full(int fd, unsigned char *p, size_t want)
{
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, p + got, want - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* --------------------------------------------------------- text formats */

/* One field of a line: its bytes, without surrounding whitespace. */
typedef struct field {
    const char *s;
    size_t len;
} field;

/* What a text file must look like, resolved from the caller's arguments. */
typedef struct text_spec {
    const char *path;
    int csv;          /* 1: comma separated; 0: whitespace separated */
    int target_kind;
    int ncls;
    size_t dim;       /* feature columns */
    size_t ntarget;   /* target columns */
    size_t ncols;     /* dim + ntarget */
    size_t tcol;      /* first target column */
    double scale;
} text_spec;

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Splits line[0..len) into fields, storing the first max of them in f, and
 * returns how many there are in all. */
static size_t split_fields(const char *line, size_t len, int csv, field *f,
                           size_t max)
{
    const char *p = line, *end = line + len;
    size_t n = 0;
    if (csv) {
        for (;;) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            const char *fe = comma ? comma : end;
            const char *fs = p;
            while (fs < fe && is_space(*fs))
                fs++;
            while (fe > fs && is_space(fe[-1]))
                fe--;
            if (n < max) {
                f[n].s = fs;
                f[n].len = (size_t)(fe - fs);
            }
            n++;
            if (!comma)
                break;
            p = comma + 1;
        }
    } else {
        for (;;) {
            while (p < end && is_space(*p))
                p++;
            if (p == end)
                break;
            const char *fs = p;
            while (p < end && !is_space(*p))
                p++;
            if (n < max) {
                f[n].s = fs;
                f[n].len = (size_t)(p - fs);
            }
            n++;
        }
    }
    return n;
}

/* Parses one field as a number that fits a float.  The field starts with a
 * non-space and is followed by a separator, a line end or the buffer's NUL,
 * none of which strtod consumes, so strtod never reads past it.  Returns 0,
 * or -1 for text that is not a finite number, or -2 for a number too large
 * for a float. */
static int parse_number(const field *f, double *v)
{
    if (f->len == 0)
        return -1;
    char *end;
    errno = 0;
    double d = strtod(f->s, &end);
    if (end != f->s + f->len || isnan(d))
        return -1;
    if (isinf(d) && errno != ERANGE)
        return -1; /* "inf", "infinity" */
    if (isinf(d) || fabs(d) > FLT_MAX)
        return -2;
    *v = d;
    return 0;
}

/* Parses the fields of one sample line into row n of d. */
static int parse_row(const text_spec *sp, const field *f, size_t lineno,
                     nrt_dataset *d, nrt_error *err)
{
    float *x = d->x + d->n * sp->dim;
    for (size_t c = 0; c < sp->ncols; c++) {
        double v;
        int rc = parse_number(&f[c], &v);
        if (rc != 0) {
            int shown = f[c].len > SHOWN_FIELD ? SHOWN_FIELD : (int)f[c].len;
            return nrt_errorf(err, "%s:%zu:%zu: %s: '%.*s'", sp->path, lineno,
                              c + 1,
                              rc == -1 ? "not a number" : "number out of range",
                              shown, f[c].s);
        }
        if (c < sp->tcol || c >= sp->tcol + sp->ntarget) {
            *x++ = (float)(v * sp->scale);
        } else if (sp->target_kind == NRT_TARGET_CLASS) {
            if (v != floor(v))
                return nrt_errorf(err, "%s:%zu: label %g is not an integer "
                                  "class", sp->path, lineno, v);
            if (v < 0 || v >= sp->ncls)
                return nrt_errorf(err, "%s:%zu: label %.0f out of range "
                                  "[0, %d)", sp->path, lineno, v, sp->ncls);
            d->label[d->n] = (int32_t)v;
        } else {
            d->y[d->n * sp->ntarget + (c - sp->tcol)] = (float)v;
        }
    }
    d->n++;
    return 0;
}

/* Parses the text buf[0..len) (NUL-terminated) into d. */
static int parse_text(const text_spec *sp, int header, const char *buf,
                      size_t len, nrt_dataset *d, nrt_error *err)
{
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        size_t line = 1;
        for (const char *q = buf; q < nul; q++)
            line += *q == '\n';
        return nrt_errorf(err, "%s:%zu: NUL byte (not a text file?)",
                          sp->path, line);
    }

    field *f = malloc(sp->ncols * sizeof *f);
    if (!f)
        return oom(err);

    const char *p = buf, *end = buf + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3; /* UTF-8 byte order mark */
    size_t cap = 0, lineno = 0;
    int rc = 0;
    while (p < end && rc == 0) {
        lineno++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *line = p;
        p = nl ? nl + 1 : end;

        size_t n = (size_t)(le - line);
        if (n > MAX_LINE) {
            rc = nrt_errorf(err, "%s:%zu: line longer than %zu bytes",
                            sp->path, lineno, MAX_LINE);
            break;
        }
        if (lineno <= (size_t)header)
            continue;
        size_t k = 0;
        while (k < n && is_space(line[k]))
            k++;
        if (k == n)
            continue; /* blank */

        size_t cols = split_fields(line, n, sp->csv, f, sp->ncols);
        if (cols != sp->ncols) {
            rc = nrt_errorf(err, "%s:%zu: expected %zu columns, found %zu",
                            sp->path, lineno, sp->ncols, cols);
            break;
        }
        rc = reserve(d, &cap, d->n + 1, sp->target_kind == NRT_TARGET_CLASS,
                     err);
        if (rc == 0)
            rc = parse_row(sp, f, lineno, d, err);
    }
    free(f);
    if (rc == 0 && d->n == 0)
        rc = nrt_errorf(err, "%s: no samples", sp->path);
    return rc;
}

static int load_text(const nrt_source *src, int csv, int target_kind,
                     size_t dim, int ncls, double scale, nrt_dataset *d,
                     nrt_error *err)
{
    text_spec sp = {
        .path = src->path,
        .csv = csv,
        .target_kind = target_kind,
        .ncls = ncls,
        .dim = dim,
        .ntarget = target_kind == NRT_TARGET_CLASS ? 1 : (size_t)ncls,
        .scale = scale,
    };
    sp.ncols = dim + sp.ntarget;

    /* A negative label L names the column that ends the target block, -1
     * being the last: the block then starts at ncols + L - (ntarget - 1). */
    long long first = src->label;
    if (first < 0)
        first += (long long)sp.ncols - (long long)(sp.ntarget - 1);
    if (first < 0 || (unsigned long long)first + sp.ntarget > sp.ncols)
        return nrt_errorf(err, "%s: label column %d is outside the %zu "
                          "columns of a row", src->path, src->label, sp.ncols);
    sp.tcol = (size_t)first;
    if (src->header < 0)
        return nrt_errorf(err, "%s: header line count %d is negative",
                          src->path, src->header);

    char *buf;
    size_t len;
    if (read_all(src->path, &buf, &len, err) != 0)
        return -1;
    int rc = parse_text(&sp, src->header, buf, len, d, err);
    free(buf);
    return rc;
}

/* -------------------------------------------------------------- cifar10 */

static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    if (slash)
        p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
    return p;
}

/* Appends the records of one batch file, which holds nrec of them, to d,
 * whose arrays have room for them. */
static int read_cifar_file(const char *path, size_t nrec, int ncls,
                           const float *pixel, unsigned char *chunk,
                           nrt_dataset *d, nrt_error *err)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return nrt_errorf(err, "%s: cannot open: %s", path, strerror(errno));
    size_t rec = 0;
    while (rec < nrec) {
        size_t m = nrec - rec < CIFAR_CHUNK ? nrec - rec : CIFAR_CHUNK;
        ssize_t got = read_full(fd, chunk, m * CIFAR_RECORD);
        if (got < 0 || (size_t)got != m * CIFAR_RECORD) {
            int e = errno;
            close(fd);
            return nrt_errorf(err, "%s: read error: %s", path,
                              got < 0 ? strerror(e) : "unexpected end of file");
        }
        for (size_t i = 0; i < m; i++, rec++) {
            const unsigned char *r = chunk + i * CIFAR_RECORD;
            if (r[0] >= ncls) {
                close(fd);
                return nrt_errorf(err, "%s: record %zu: label %d out of "
                                  "range [0, %d)", path, rec + 1, r[0], ncls);
            }
            d->label[d->n] = r[0];
            float *x = d->x + d->n * CIFAR_PIXELS;
            for (size_t j = 0; j < CIFAR_PIXELS; j++)
                x[j] = pixel[r[1 + j]];
            d->n++;
        }
    }
    close(fd);
    return 0;
}

static int load_cifar(const nrt_source *src, int target_kind, size_t dim,
                      int ncls, int test, float scale, nrt_dataset *d,
                      nrt_error *err)
{
    if (target_kind != NRT_TARGET_CLASS)
        return nrt_errorf(err, "%s: cifar10 holds class labels, not value "
                          "targets", src->path);
    if (dim != CIFAR_PIXELS)
        return nrt_errorf(err, "%s: cifar10 records hold 3x32x32 images, "
                          "the model expects %zu features", src->path, dim);

    struct stat st;
    if (stat(src->path, &st) != 0)
        return nrt_errorf(err, "%s: cannot open: %s", src->path,
                          strerror(errno));

    /* The batch files to read, and their record counts. */
    char *file[5] = {0};
    size_t nrec[5] = {0};
    int nfile = 0, rc = 0;
    if (!S_ISDIR(st.st_mode)) {
        file[0] = join_path("", src->path);
        if (!file[0])
            return oom(err);
        nfile = 1;
    } else {
        static const char *const train[] = {
            "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
            "data_batch_4.bin", "data_batch_5.bin",
        };
        static const char *const testset[] = {"test_batch.bin"};
        const char *const *name = test ? testset : train;
        int nname = test ? 1 : 5;
        for (int i = 0; i < nname && rc == 0; i++) {
            char *p = join_path(src->path, name[i]);
            if (!p) {
                rc = oom(err);
                break;
            }
            struct stat fs;
            if (stat(p, &fs) == 0) {
                file[nfile++] = p;
            } else if (errno == ENOENT) {
                free(p);
            } else {
                rc = nrt_errorf(err, "%s: cannot open: %s", p,
                                strerror(errno));
                free(p);
            }
        }
        if (rc == 0 && nfile == 0)
            rc = nrt_errorf(err, test ? "%s: no test_batch.bin file"
                                      : "%s: no data_batch_*.bin files",
                            src->path);
    }

    /* Sizes first, so that a bad file is reported before a big allocation. */
    size_t total = 0;
    for (int i = 0; i < nfile && rc == 0; i++) {
        struct stat fs;
        if (stat(file[i], &fs) != 0) {
            rc = nrt_errorf(err, "%s: cannot open: %s", file[i],
                            strerror(errno));
        } else if (fs.st_size % CIFAR_RECORD != 0) {
            rc = nrt_errorf(err, "%s: size %lld is not a multiple of %d bytes "
                            "(truncated record?)", file[i],
                            (long long)fs.st_size, CIFAR_RECORD);
        } else {
            nrec[i] = (size_t)(fs.st_size / CIFAR_RECORD);
            total += nrec[i];
        }
    }
    if (rc == 0 && total == 0)
        rc = nrt_errorf(err, "%s: no samples", src->path);

    unsigned char *chunk = NULL;
    if (rc == 0) {
        size_t cap = 0;
        d->dim = CIFAR_PIXELS;
        rc = reserve(d, &cap, total, 1, err);
        if (rc == 0 && !(chunk = malloc((size_t)CIFAR_CHUNK * CIFAR_RECORD)))
            rc = oom(err);
    }
    if (rc == 0) {
        /* ToTensor's byte / 255 in float, then the source's scale. */
        float pixel[256];
        for (int b = 0; b < 256; b++)
            pixel[b] = (float)b / 255.0f * scale;
        for (int i = 0; i < nfile && rc == 0; i++)
            rc = read_cifar_file(file[i], nrec[i], ncls, pixel, chunk, d, err);
    }
    free(chunk);
    for (int i = 0; i < nfile; i++)
        free(file[i]);
    return rc;
}

/* ------------------------------------------------------------ interface */

int nrt_dataset_load(const nrt_source *src, int target_kind, size_t dim,
                     int ncls, int test, nrt_dataset *out, nrt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!src || !src->kind || !src->path)
        return nrt_errorf(err, "no data source given");
    if (target_kind != NRT_TARGET_CLASS && target_kind != NRT_TARGET_VALUE)
        return nrt_errorf(err, "%s: unknown target kind %d", src->path,
                          target_kind);
    if (dim == 0)
        return nrt_errorf(err, "%s: the model expects no features",
                          src->path);
    if (ncls < 1)
        return nrt_errorf(err, "%s: %d %s", src->path, ncls,
                          target_kind == NRT_TARGET_CLASS
                              ? "classes (need at least 1)"
                              : "target values (need at least 1)");

    float scale = src->scale != 0 ? src->scale : 1.0f;
    nrt_dataset d = {0};
    d.dim = dim;
    d.ydim = target_kind == NRT_TARGET_VALUE ? (size_t)ncls : 0;

    int rc;
    if (strcmp(src->kind, "csv") == 0 || strcmp(src->kind, "table") == 0)
        rc = load_text(src, src->kind[0] == 'c', target_kind, dim, ncls,
                       scale, &d, err);
    else if (strcmp(src->kind, "cifar10") == 0)
        rc = load_cifar(src, target_kind, dim, ncls, test, scale, &d, err);
    else
        rc = nrt_errorf(err, "%s: unknown data kind '%s' (expected csv, "
                        "table or cifar10)", src->path, src->kind);
    if (rc != 0) {
        nrt_dataset_free(&d);
        return -1;
    }
    shrink_to_fit(&d);
    *out = d;
    return 0;
}

int nrt_dataset_split(nrt_dataset *d, double fraction, uint64_t seed,
                      nrt_dataset *held_out, nrt_error *err)
{
    memset(held_out, 0, sizeof *held_out);
    size_t n = d->n;
    if (!(fraction > 0 && fraction < 1))
        return nrt_errorf(err, "held-out fraction %g is not in (0, 1)",
                          fraction);
    if (n < 2)
        return nrt_errorf(err, "cannot split %zu sample%s into two "
                          "non-empty parts", n, n == 1 ? "" : "s");
    if (n > UINT32_MAX)
        return nrt_errorf(err, "cannot split %zu samples: too many", n);
    size_t k = (size_t)round(fraction * (double)n);
    if (k < 1)
        k = 1;
    if (k > n - 1)
        k = n - 1;

    size_t dim = d->dim, ydim = d->ydim;
    nrt_dataset h = {.n = k, .dim = dim, .ydim = ydim};
    uint32_t *perm = malloc(n * sizeof *perm);
    unsigned char *held = calloc(n, 1);
    h.x = malloc(k * dim * sizeof *h.x + 1);
    if (d->label)
        h.label = malloc(k * sizeof *h.label);
    if (d->y)
        h.y = malloc(k * ydim * sizeof *h.y + 1);
    if (!perm || !held || !h.x || (d->label && !h.label) ||
        (d->y && !h.y)) {
        free(perm);
        free(held);
        nrt_dataset_free(&h);
        return oom(err);
    }

    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    nrt_rng rng;
    nrt_rng_seed(&rng, seed);
    nrt_shuffle(&rng, perm, n);
    for (size_t i = 0; i < k; i++)
        held[perm[i]] = 1;
    free(perm);

    /* One sweep in the original order: held samples are copied out, kept
     * ones slide down (m <= i, so the moves never overwrite unread rows). */
    size_t j = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        nrt_dataset *to = held[i] ? &h : d;
        size_t t = held[i] ? j++ : m++;
        if (to == d && t == i)
            continue;
        memmove(to->x + t * dim, d->x + i * dim, dim * sizeof *d->x);
        if (d->label)
            to->label[t] = d->label[i];
        if (d->y)
            memmove(to->y + t * ydim, d->y + i * ydim, ydim * sizeof *d->y);
    }
    free(held);
    d->n = m;
    shrink_to_fit(d);
    *held_out = h;
    return 0;
}

void nrt_dataset_stats(const nrt_dataset *d, float *mean, float *std)
{
    /* Two passes (mean, then squared deviations) in double, over blocks of
     * features so that the accumulators stay on the stack and every pass
     * reads rows contiguously. */
    double acc[STATS_BLOCK], mu[STATS_BLOCK];
    size_t n = d->n, dim = d->dim;
    for (size_t j0 = 0; j0 < dim; j0 += STATS_BLOCK) {
        size_t w = dim - j0 < STATS_BLOCK ? dim - j0 : STATS_BLOCK;
        for (size_t j = 0; j < w; j++)
            acc[j] = 0;
        for (size_t i = 0; i < n; i++) {
            const float *row = d->x + i * dim + j0;
            for (size_t j = 0; j < w; j++)
                acc[j] += row[j];
        }
        for (size_t j = 0; j < w; j++) {
            mu[j] = n ? acc[j] / (double)n : 0;
            mean[j0 + j] = (float)mu[j];
            acc[j] = 0;
        }
        for (size_t i = 0; i < n; i++) {
            const float *row = d->x + i * dim + j0;
            for (size_t j = 0; j < w; j++) {
                double t = row[j] - mu[j];
                acc[j] += t * t;
            }
        }
        for (size_t j = 0; j < w; j++)
            std[j0 + j] = n ? (float)sqrt(acc[j] / (double)n) : 0.0f;
    }
}

void nrt_dataset_standardize(nrt_dataset *d, const float *mean,
                             const float *std)
{
    size_t dim = d->dim;
    for (size_t i = 0; i < d->n; i++) {
        float *row = d->x + i * dim;
        for (size_t j = 0; j < dim; j++) {
            float s = std[j] < 1e-12f ? 1.0f : std[j]; /* constant feature */
            row[j] = (row[j] - mean[j]) / s;
        }
    }
}

void nrt_dataset_gather(const nrt_dataset *d, const uint32_t *idx, size_t n,
                        float *x, int32_t *label, float *y)
{
    size_t dim = d->dim, ydim = d->ydim;
    for (size_t k = 0; k < n; k++) {
        size_t i = idx[k];
        memcpy(x + k * dim, d->x + i * dim, dim * sizeof *x);
        if (label && d->label)
            label[k] = d->label[i];
        if (y && d->y)
            memcpy(y + k * ydim, d->y + i * ydim, ydim * sizeof *y);
    }
}
