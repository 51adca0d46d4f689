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
 *  - "mnist": IDX files, the format of MNIST and its kin (Fashion-MNIST,
 *    KMNIST, EMNIST): the magic bytes 00 00 TYPE NDIMS, NDIMS big-endian
 *    uint32 sizes, then the values row-major and big-endian; TYPE is 0x08
 *    unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32, 0x0D float32
 *    or 0x0E float64, NDIMS 1 to 4.  A dataset is two files: the images,
 *    n samples whose sizes after the first multiply to dim, and the labels,
 *    n integer class labels (one dimension) or, for value targets, n x ncls
 *    values of any type (just n when ncls is 1).  Unsigned bytes of the
 *    images are divided by 255 in float as for cifar10, other types are
 *    taken as they are; nan, inf and float64 values beyond a float's range
 *    are errors.  Each file is read whole and its size must be exactly
 *    what its header says.  The path is a directory holding
 *    train-images-idx3-ubyte and train-labels-idx1-ubyte (for the test set
 *    t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte), or the mirrors'
 *    train-images.idx3-ubyte and so on; or it is an images file, whose
 *    labels file is the same path with its last "images" made "labels" and
 *    its last "idx3" made "idx1".  Compressed (.gz) files are not read: the
 *    error says to gunzip them.
 *
 * Features are multiplied by the source's scale while loading (0 counts as
 * 1); standardization is left to the caller, which computes the statistics
 * on the training set alone (nrt_dataset_stats) and applies them to every
 * set (nrt_dataset_standardize).
 *
 * Conventions: failing functions write one line into the nrt_error, return
 * -1, leak nothing and leave their output dataset zeroed.  Error messages
 * name the file as given and a 1-based line (and field), record or sample
 * number.
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
    } else if (d->ydim) {
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
    free(d->line);
    memset(d, 0, sizeof *d);
}

/* --------------------------------------------------------- reading files */

/* Reads the whole file at path into a NUL-terminated buffer. */
int nrt_read_file(const char *path, char **buf, size_t *len, nrt_error *err)
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
    int lines;        /* keep each sample's line number */
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

/* Whether the n fields of a line that failed as the first sample are a
 * header the source does not skip: none is a number, and one has a letter
 * (so a row of "nan" and "inf" is, a row of empty fields is not). */
static int looks_like_header(const field *f, size_t n)
{
    int letter = 0;
    for (size_t c = 0; c < n; c++) {
        double v;
        if (parse_number(&f[c], &v) != -1)
            return 0;
        for (size_t k = 0; k < f[c].len; k++)
            letter |= (f[c].s[k] | 0x20) >= 'a' &&
                      (f[c].s[k] | 0x20) <= 'z';
    }
    return letter;
}

/* Adds to err's message about line lineno how to skip it as a header. */
static int header_hint(const text_spec *sp, size_t lineno, nrt_error *err)
{
    if (!err)
        return -1;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    return nrt_errorf(err, "%s; the line looks like a header: skip it with "
                      "header=%zu in the source, as %s(\"%s\", header=%zu)",
                      msg, lineno, sp->csv ? "csv" : "table", sp->path,
                      lineno);
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
    size_t cap = 0, lineno = 0, line_cap = 0;
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
        if (header > 0 && lineno <= (size_t)header)
            continue;
        size_t k = 0;
        while (k < n && is_space(line[k]))
            k++;
        if (k == n)
            continue; /* blank */

        size_t cols = split_fields(line, n, sp->csv, f, sp->ncols);
        int header_like = d->n == 0 &&
                          looks_like_header(f, cols < sp->ncols ? cols
                                                                : sp->ncols);
        if (header < 0 && header_like)
            continue; /* header=-1: a header line, before the first row */
        if (sp->lines && d->n + 1 > line_cap) {
            size_t *l = realloc(d->line, (line_cap = 2 * d->n + 256) * sizeof *l);
            if (!l) {
                rc = oom(err);
                break;
            }
            d->line = l;
        }
        if (sp->lines)
            d->line[d->n] = lineno;
        if (cols != sp->ncols)
            rc = nrt_errorf(err, "%s:%zu: expected %zu columns, found %zu",
                            sp->path, lineno, sp->ncols, cols);
        if (rc == 0)
            rc = reserve(d, &cap, d->n + 1,
                         sp->target_kind == NRT_TARGET_CLASS, err);
        if (rc == 0)
            rc = parse_row(sp, f, lineno, d, err);
        if (rc != 0 && header_like)
            header_hint(sp, lineno, err);
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
        .ntarget = target_kind == NRT_TARGET_CLASS   ? 1
                   : target_kind == NRT_TARGET_VALUE ? (size_t)ncls
                                                     : 0,
        .scale = scale,
        .lines = src->lines,
    };
    sp.ncols = dim + sp.ntarget;

    /* A negative label L names the column that ends the target block, -1
     * being the last: the block then starts at ncols + L - (ntarget - 1). */
    long long first = src->label;
    if (first < 0)
        first += (long long)sp.ncols - ((long long)sp.ntarget - 1);
    if (first < 0 || (unsigned long long)first + sp.ntarget > sp.ncols)
        return nrt_errorf(err, "%s: label column %d is outside the %zu "
                          "columns of a row", src->path, src->label, sp.ncols);
    sp.tcol = (size_t)first;
    if (src->header < -1)
        return nrt_errorf(err, "%s: header line count %d is negative",
                          src->path, src->header);

    char *buf;
    size_t len;
    if (nrt_read_file(src->path, &buf, &len, err) != 0)
        return -1;
    int rc = parse_text(&sp, src->header, buf, len, d, err);
    free(buf);
    return rc;
}

/* -------------------------------------------------------------- cifar10 */

char *nrt_path_join(const char *dir, const char *name)
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
        file[0] = nrt_path_join("", src->path);
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
            char *p = nrt_path_join(src->path, name[i]);
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

/* ---------------------------------------------------------------- mnist */

/* IDX files (the MNIST format): the magic 00 00 TYPE NDIMS, NDIMS
 * big-endian uint32 sizes, then the values row-major, big-endian. */

#define IDX_MAX_DIMS 4

enum {
    IDX_U8 = 0x08,
    IDX_I8 = 0x09,
    IDX_I16 = 0x0B,
    IDX_I32 = 0x0C,
    IDX_F32 = 0x0D,
    IDX_F64 = 0x0E
};

/* One IDX file read into memory, its header checked. */
typedef struct idx_file {
    const char *path;
    char *buf;                   /* the whole file */
    int type;                    /* IDX_U8 .. IDX_F64 */
    size_t size;                 /* bytes a value */
    int ndims;
    size_t dim[IDX_MAX_DIMS];
    const unsigned char *data;   /* dim[0] * ... values */
    size_t count;                /* values in all */
} idx_file;

/* The name of an IDX type and the bytes of one value; 0 if unknown. */
static size_t idx_type_size(int type, const char **name)
{
    switch (type) {
    case IDX_U8: *name = "unsigned byte"; return 1;
    case IDX_I8: *name = "signed byte"; return 1;
    case IDX_I16: *name = "int16"; return 2;
    case IDX_I32: *name = "int32"; return 4;
    case IDX_F32: *name = "float32"; return 4;
    case IDX_F64: *name = "float64"; return 8;
    default: *name = "?"; return 0;
    }
}

static int idx_is_integer(int type)
{
    return type == IDX_U8 || type == IDX_I8 || type == IDX_I16 ||
           type == IDX_I32;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Value i of f, exactly (every IDX value fits a double). */
static double idx_value(const idx_file *f, size_t i)
{
    const unsigned char *p = f->data + i * f->size;
    switch (f->type) {
    case IDX_U8:
        return p[0];
    case IDX_I8:
        return p[0] < 0x80 ? p[0] : (int)p[0] - 0x100;
    case IDX_I16: {
        unsigned u = (unsigned)p[0] << 8 | p[1];
        return u < 0x8000 ? (double)u : (double)u - 0x10000;
    }
    case IDX_I32: {
        uint32_t u = be32(p);
        return u < 0x80000000u ? (double)u : (double)u - 4294967296.0;
    }
    case IDX_F32: {
        uint32_t u = be32(p);
        float v;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    default: { /* IDX_F64 */
        uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
        double v;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    }
}

/* Writes the sizes dim[from..to) as "28x28" into s (of cap bytes). */
static void shape_text(char *s, size_t cap, const size_t *dim, int from,
                       int to)
{
    size_t k = 0;
    s[0] = '\0';
    for (int i = from; i < to && k < cap; i++) {
        int w = snprintf(s + k, cap - k, "%s%zu", i > from ? "x" : "",
                         dim[i]);
        if (w < 0)
            break;
        k += (size_t)w;
    }
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static int gunzip_first(const char *path, nrt_error *err)
{
    return nrt_errorf(err, "%s: compressed; gunzip it first", path);
}

/* Reads the IDX file at path into f and checks its header against its
 * size.  On failure f holds nothing. */
static int idx_read(const char *path, idx_file *f, nrt_error *err)
{
    memset(f, 0, sizeof *f);
    char *buf;
    size_t len;
    if (nrt_read_file(path, &buf, &len, err) != 0)
        return -1;
    const unsigned char *b = (const unsigned char *)buf;
    const char *tname = "?";
    size_t size = len >= 4 ? idx_type_size(b[2], &tname) : 0;
    size_t head = len >= 4 ? 4 + 4 * (size_t)b[3] : 4;
    int rc = 0;
    if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        rc = gunzip_first(path, err);
    else if (len < 4)
        rc = nrt_errorf(err, "%s: %zu bytes, shorter than an IDX header",
                        path, len);
    else if (b[0] != 0 || b[1] != 0)
        rc = nrt_errorf(err, "%s: not an IDX file (magic %02x %02x %02x %02x, "
                        "expected 00 00 TYPE NDIMS)", path, b[0], b[1], b[2],
                        b[3]);
    else if (size == 0)
        rc = nrt_errorf(err, "%s: unknown IDX data type 0x%02x", path, b[2]);
    else if (b[3] == 0 || b[3] > IDX_MAX_DIMS)
        rc = nrt_errorf(err, "%s: IDX file of %d dimensions (1 to %d are "
                        "read)", path, b[3], IDX_MAX_DIMS);
    else if (len < head)
        rc = nrt_errorf(err, "%s: %zu bytes, shorter than its %zu-byte IDX "
                        "header", path, len, head);
    if (rc != 0) {
        free(buf);
        return rc;
    }

    f->path = path;
    f->type = b[2];
    f->size = size;
    f->ndims = b[3];
    size_t count = 1;
    int overflow = 0;
    for (int i = 0; i < f->ndims; i++) {
        f->dim[i] = be32(b + 4 + 4 * i);
        if (f->dim[i] == 0) {
            rc = nrt_errorf(err, "%s: IDX size %d of %d is 0", path, i + 1,
                            f->ndims);
            break;
        }
        if (f->dim[i] > SIZE_MAX / count)
            overflow = 1;
        else
            count *= f->dim[i];
    }
    char shape[IDX_MAX_DIMS * 12];
    shape_text(shape, sizeof shape, f->dim, 0, f->ndims);
    if (rc == 0 && (overflow || count > (SIZE_MAX - head) / size))
        rc = nrt_errorf(err, "%s: IDX sizes %s are too large", path, shape);
    else if (rc == 0 && len != head + count * size)
        rc = nrt_errorf(err, "%s: expected %zu bytes (a header of %zu and "
                        "%s %s values), found %zu", path, head + count * size,
                        head, shape, tname, len);
    if (rc != 0) {
        free(buf);
        memset(f, 0, sizeof *f);
        return rc;
    }
    f->buf = buf;
    f->data = b + head;
    f->count = count;
    return 0;
}

/* Value i of f as a float, or an error naming the sample (of per values)
 * for a value that is not finite or does not fit a float. */
static int idx_float(const idx_file *f, size_t i, size_t per, float *v,
                     nrt_error *err)
{
    double x = idx_value(f, i);
    if (isfinite(x) && fabs(x) <= FLT_MAX) {
        *v = (float)x;
        return 0;
    }
    if (isfinite(x))
        return nrt_errorf(err, "%s: sample %zu, value %zu: %g does not fit "
                          "a float", f->path, i / per + 1, i % per + 1, x);
    return nrt_errorf(err, "%s: sample %zu, value %zu is %s", f->path,
                      i / per + 1, i % per + 1,
                      isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

/* 1 if path.gz exists, 0 if not, -1 when out of memory. */
static int gz_exists(const char *path)
{
    size_t n = strlen(path);
    char *gz = malloc(n + 4);
    if (!gz)
        return -1;
    memcpy(gz, path, n);
    memcpy(gz + n, ".gz", 4);
    struct stat st;
    int there = stat(gz, &st) == 0;
    free(gz);
    return there;
}

/* Says why path, which stat failed on with errno e, cannot be read: when
 * missing, perhaps only its .gz is there.  `of` names the images file a
 * labels file belongs to, or is NULL. */
static int idx_missing(const char *path, int e, const char *of,
                       nrt_error *err)
{
    if (e == ENOENT) {
        int gz = gz_exists(path);
        if (gz < 0)
            return oom(err);
        if (gz)
            return nrt_errorf(err, "%s.gz: compressed; gunzip it first",
                              path);
    }
    if (of)
        return nrt_errorf(err, "%s: cannot open: %s (the labels of %s)", path,
                          strerror(e), of);
    return nrt_errorf(err, "%s: cannot open: %s", path, strerror(e));
}

/* The file of directory dir called name, or else alt, into *out. */
static int idx_find(const char *dir, const char *name, const char *alt,
                    char **out, nrt_error *err)
{
    const char *names[2] = {name, alt};
    *out = NULL;
    for (int i = 0; i < 2; i++) {
        char *p = nrt_path_join(dir, names[i]);
        if (!p)
            return oom(err);
        struct stat st;
        if (stat(p, &st) == 0) {
            *out = p;
            return 0;
        }
        int e = errno, rc = e == ENOENT ? 0 : idx_missing(p, e, NULL, err);
        free(p);
        if (rc != 0)
            return rc;
    }
    for (int i = 0; i < 2; i++) { /* neither: perhaps still compressed */
        char *p = nrt_path_join(dir, names[i]);
        int gz = p ? gz_exists(p) : -1;
        int rc = gz < 0 ? oom(err)
                 : gz ? nrt_errorf(err, "%s.gz: compressed; gunzip it first", p)
                      : 0;
        free(p);
        if (rc != 0)
            return rc;
    }
    return nrt_errorf(err, "%s: no %s (or %s) file", dir, name, alt);
}

/* The labels file of an images file: the path with its last "images" made
 * "labels" and its last "idx3" made "idx1"; NULL when out of memory, and
 * *found 0 when the path holds no "images". */
static char *idx_labels_path(const char *images, int *found)
{
    char *p = nrt_path_join("", images);
    if (!p)
        return NULL;
    static const char *const from[2] = {"images", "idx3"};
    static const char *const to[2] = {"labels", "idx1"};
    *found = 0;
    for (int k = 0; k < 2; k++) {
        char *last = NULL;
        for (char *q = strstr(p, from[k]); q; q = strstr(q + 1, from[k]))
            last = q;
        if (last) {
            memcpy(last, to[k], strlen(to[k]));
            *found |= k == 0;
        }
    }
    return p;
}

/* The feature file's values, in d->x: unsigned bytes as ToTensor has them
 * (byte / 255 in float), anything else as is; then times scale. */
static int idx_features(const idx_file *f, float scale, nrt_dataset *d,
                        nrt_error *err)
{
    size_t per = f->count / f->dim[0];
    if (f->type == IDX_U8) {
        float pixel[256];
        for (int b = 0; b < 256; b++)
            pixel[b] = (float)b / 255.0f * scale;
        for (size_t i = 0; i < f->count; i++)
            d->x[i] = pixel[f->data[i]];
        return 0;
    }
    for (size_t i = 0; i < f->count; i++) {
        float v;
        if (idx_float(f, i, per, &v, err) != 0)
            return -1;
        d->x[i] = v * scale;
    }
    return 0;
}

/* The labels file's class labels, in d->label. */
static int idx_classes(const idx_file *f, int ncls, nrt_dataset *d,
                       nrt_error *err)
{
    for (size_t i = 0; i < f->count; i++) {
        double v = idx_value(f, i);
        if (v < 0 || v >= ncls)
            return nrt_errorf(err, "%s: label %.0f of sample %zu is outside "
                              "0..%d", f->path, v, i + 1, ncls - 1);
        d->label[i] = (int32_t)v;
    }
    return 0;
}

/* The labels file's target values, in d->y. */
static int idx_targets(const idx_file *f, nrt_dataset *d, nrt_error *err)
{
    size_t per = f->count / f->dim[0];
    for (size_t i = 0; i < f->count; i++)
        if (idx_float(f, i, per, &d->y[i], err) != 0)
            return -1;
    return 0;
}

/* Checks the images file im against the model's input size. */
static int idx_check_images(const idx_file *im, size_t dim, nrt_error *err)
{
    if (im->count / im->dim[0] == dim)
        return 0;
    char shape[IDX_MAX_DIMS * 12];
    shape_text(shape, sizeof shape, im->dim, 1, im->ndims);
    return nrt_errorf(err, "%s: images of %s, but the model's input has %zu "
                      "values", im->path, im->ndims > 1 ? shape : "one value",
                      dim);
}

/* Checks the labels file lb against the images file im and the targets. */
static int idx_check_labels(const idx_file *im, const idx_file *lb,
                            int target_kind, int ncls, nrt_error *err)
{
    char shape[IDX_MAX_DIMS * 12];
    const char *tname;
    shape_text(shape, sizeof shape, lb->dim, 0, lb->ndims);
    size_t n = im->dim[0];
    if (target_kind == NRT_TARGET_CLASS) {
        idx_type_size(lb->type, &tname);
        if (!idx_is_integer(lb->type))
            return nrt_errorf(err, "%s: labels of type %s, but class labels "
                              "must be integers", lb->path, tname);
        if (lb->ndims != 1)
            return nrt_errorf(err, "%s: labels of shape %s, expected one "
                              "label a sample", lb->path, shape);
    } else if (!(lb->ndims == 1 && ncls == 1) &&
               !(lb->ndims == 2 && lb->dim[1] == (size_t)ncls)) {
        if (ncls == 1)
            return nrt_errorf(err, "%s: targets of shape %s, expected %zu or "
                              "%zux1 (one value a sample)", lb->path, shape,
                              lb->dim[0], lb->dim[0]);
        return nrt_errorf(err, "%s: targets of shape %s, expected %zux%d (%d "
                          "values a sample)", lb->path, shape, lb->dim[0],
                          ncls, ncls);
    }
    if (lb->dim[0] != n)
        return nrt_errorf(err, "%s: %zu labels, but %s holds %zu images",
                          lb->path, lb->dim[0], im->path, n);
    return 0;
}

static int load_mnist(const nrt_source *src, int target_kind, size_t dim,
                      int ncls, int test, float scale, nrt_dataset *d,
                      nrt_error *err)
{
    const char *path = src->path;
    if (ends_with(path, ".gz"))
        return gunzip_first(path, err);
    struct stat st;
    if (stat(path, &st) != 0)
        return idx_missing(path, errno, NULL, err);

    /* The two files. */
    char *imname = NULL, *lbname = NULL;
    int rc = 0;
    if (S_ISDIR(st.st_mode)) {
        const char *set = test ? "t10k" : "train";
        char name[2][2][32];
        snprintf(name[0][0], sizeof name[0][0], "%s-images-idx3-ubyte", set);
        snprintf(name[0][1], sizeof name[0][1], "%s-images.idx3-ubyte", set);
        snprintf(name[1][0], sizeof name[1][0], "%s-labels-idx1-ubyte", set);
        snprintf(name[1][1], sizeof name[1][1], "%s-labels.idx1-ubyte", set);
        rc = idx_find(path, name[0][0], name[0][1], &imname, err);
        if (rc == 0)
            rc = idx_find(path, name[1][0], name[1][1], &lbname, err);
    } else {
        int found;
        imname = nrt_path_join("", path);
        lbname = idx_labels_path(path, &found);
        if (!imname || !lbname)
            rc = oom(err);
        else if (!found)
            rc = nrt_errorf(err, "%s: cannot tell the labels file: it is this "
                            "path with its last \"images\" replaced by "
                            "\"labels\" (and \"idx3\" by \"idx1\"), and the "
                            "path has no \"images\"", path);
        else if (stat(lbname, &st) != 0)
            rc = idx_missing(lbname, errno, path, err);
    }

    idx_file im = {0}, lb = {0};
    if (rc == 0)
        rc = idx_read(imname, &im, err);
    if (rc == 0)
        rc = idx_check_images(&im, dim, err);
    if (rc == 0)
        rc = idx_read(lbname, &lb, err);
    if (rc == 0)
        rc = idx_check_labels(&im, &lb, target_kind, ncls, err);
    if (rc == 0) {
        size_t cap = 0;
        rc = reserve(d, &cap, im.dim[0], target_kind == NRT_TARGET_CLASS,
                     err);
    }
    if (rc == 0)
        rc = target_kind == NRT_TARGET_CLASS ? idx_classes(&lb, ncls, d, err)
                                             : idx_targets(&lb, d, err);
    if (rc == 0)
        rc = idx_features(&im, scale, d, err);
    if (rc == 0)
        d->n = im.dim[0];
    free(im.buf);
    free(lb.buf);
    free(imname);
    free(lbname);
    return rc;
}

/* ---------------------------------------------------------- the loaders */

/* What the model wants of a source's data. */
typedef struct Want {
    int target_kind;
    size_t dim;
    int ncls, test;
    float scale;
} Want;

static int load_csv(const nrt_source *s, const Want *w, nrt_dataset *d, nrt_error *err)
{
    return load_text(s, 1, w->target_kind, w->dim, w->ncls, w->scale, d, err);
}

static int load_table(const nrt_source *s, const Want *w, nrt_dataset *d, nrt_error *err)
{
    return load_text(s, 0, w->target_kind, w->dim, w->ncls, w->scale, d, err);
}

static int load_cifar10(const nrt_source *s, const Want *w, nrt_dataset *d, nrt_error *err)
{
    return load_cifar(s, w->target_kind, w->dim, w->ncls, w->test, w->scale, d, err);
}

static int load_idx(const nrt_source *s, const Want *w, nrt_dataset *d, nrt_error *err)
{
    return load_mnist(s, w->target_kind, w->dim, w->ncls, w->test, w->scale, d, err);
}

/* The sources read here, by the model's names for them (the compiler's
 * table: compiler/registry.c, sources[]; images(...) is images.c's, holdout(...)
 * a part of another).  text: it may hold no targets (--predict's input). */
typedef struct Loader {
    const char *name;
    int (*load)(const nrt_source *s, const Want *w, nrt_dataset *d, nrt_error *err);
    int text;
} Loader;

static const Loader loaders[] = {
    {"csv", load_csv, 1},
    {"table", load_table, 1},
    {"cifar10", load_cifar10, 0},
    {"mnist", load_idx, 0},
};

#define NLOADERS (sizeof loaders / sizeof *loaders)

static const Loader *loader_of(const char *kind)
{
    for (size_t i = 0; i < NLOADERS; i++)
        if (!strcmp(loaders[i].name, kind))
            return &loaders[i];
    return NULL;
}
/* ------------------------------------------------------------ interface */

int nrt_dataset_load(const nrt_source *src, int target_kind, size_t dim,
                     int ncls, int test, nrt_dataset *out, nrt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!src || !src->kind || !src->path)
        return nrt_errorf(err, "no data source given");
    const Loader *ld = loader_of(src->kind);
    if (!ld) {
        char names[128] = "";
        for (size_t i = 0, k = 0; i < NLOADERS; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "",
                                  loaders[i].name);
        return nrt_errorf(err, "%s: unknown data kind '%s' (expected one of %s)", src->path,
                          src->kind, names);
    }
    if (target_kind != NRT_TARGET_CLASS && target_kind != NRT_TARGET_VALUE &&
        !(target_kind == NRT_TARGET_NONE && ld->text))
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

    const Want w = {target_kind, dim, ncls, test, scale};
    int rc = ld->load(src, &w, &d, err);
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

/* The n rows of dim features at x, standardized in place. */
static void standardize_rows(float *x, size_t n, size_t dim, const float *mean,
                             const float *std)
{
    for (size_t i = 0; i < n; i++) {
        float *row = x + i * dim;
        for (size_t j = 0; j < dim; j++) {
            float s = std[j] < 1e-12f ? 1.0f : std[j]; /* constant feature */
            row[j] = (row[j] - mean[j]) / s;
        }
    }
}

void nrt_dataset_standardize(nrt_dataset *d, const float *mean,
                             const float *std)
{
    standardize_rows(d->x, d->n, d->dim, mean, std);
}

static int stats_alloc(nrt_stats *s, size_t dim, nrt_error *err)
{
    s->dim = 0;
    s->mean = malloc(2 * sizeof(float) * (dim ? dim : 1));
    s->std = s->mean ? s->mean + dim : NULL;
    if (!s->mean)
        return nrt_errorf(err, "out of memory");
    s->dim = dim;
    return 0;
}

int nrt_stats_compute(const nrt_dataset *d, nrt_stats *s, nrt_error *err)
{
    if (stats_alloc(s, d->dim, err))
        return -1;
    nrt_dataset_stats(d, s->mean, s->std);
    return 0;
}

int nrt_stats_set(nrt_stats *s, size_t dim, const float *mean, const float *std,
                  const char *what, nrt_error *err)
{
    for (size_t j = 0; j < dim; j++)
        if (!isfinite(mean[j]) || !isfinite(std[j]) || std[j] < 0)
            return nrt_errorf(err, "%s: the standardization's %s of feature %zu is %g: "
                              "expected a finite number%s", what,
                              isfinite(mean[j]) ? "std" : "mean", j,
                              (double)(isfinite(mean[j]) ? std[j] : mean[j]),
                              isfinite(mean[j]) ? ", not negative" : "");
    nrt_stats t;
    if (stats_alloc(&t, dim, err))
        return -1;
    memcpy(t.mean, mean, sizeof(float) * dim);
    memcpy(t.std, std, sizeof(float) * dim);
    nrt_stats_free(s);
    *s = t;
    return 0;
}

void nrt_stats_apply(const nrt_stats *s, float *x, size_t n)
{
    standardize_rows(x, n, s->dim, s->mean, s->std);
}

void nrt_stats_free(nrt_stats *s)
{
    free(s->mean);
    *s = (nrt_stats){0};
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
