/*
 * test_data.c — unit test of runtime/data.c: text and cifar10 loading, the
 * exact error messages, held-out splits, statistics and standardization.
 *
 * Every input is written to a temporary file (under $TMPDIR or /tmp) and
 * removed at the end.  The Boston housing check runs only when
 * NETC_TOP_SRCDIR names a tree holding data/boston_housing.data.
 *
 * Prints one line to stderr per failed check and a summary to stdout;
 * exits 0 when every check passed, 1 otherwise.
 */
#include "netrt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int checks, failures;

#define CHECK(cond, ...) check((cond), __LINE__, __VA_ARGS__)

static void check(int ok, int line, const char *fmt, ...)
{
    checks++;
    if (ok)
        return;
    failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_data.c:%d: FAIL: ", line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------ temp files */

#define MAX_TEMPS 64

/* Everything created, removed at exit: files first, then directories. */
static char *temps[MAX_TEMPS];
static int ntemps;

static const char *tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static void remember(char *path)
{
    if (ntemps < MAX_TEMPS)
        temps[ntemps++] = path;
    else
        free(path);
}

static void cleanup(void)
{
    for (int i = ntemps - 1; i >= 0; i--) {
        if (remove(temps[i]) != 0)
            fprintf(stderr, "cannot remove %s: %s\n", temps[i],
                    strerror(errno));
        free(temps[i]);
    }
    ntemps = 0;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* Writes len bytes to a new temporary file; returns its path (owned by the
 * temp list).  Aborts the test on failure: nothing else could be checked. */
static const char *temp_file(const void *data, size_t len)
{
    char *path = malloc(strlen(tmpdir()) + 32);
    if (!path)
        abort();
    sprintf(path, "%s/netc_data_XXXXXX", tmpdir());
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    close(fd);
    if (write_file(path, data, len) != 0) {
        perror(path);
        exit(1);
    }
    remember(path);
    return path;
}

static const char *temp_text(const char *text)
{
    return temp_file(text, strlen(text));
}

static const char *temp_dir(void)
{
    char *path = malloc(strlen(tmpdir()) + 32);
    if (!path)
        abort();
    sprintf(path, "%s/netc_data_XXXXXX", tmpdir());
    if (!mkdtemp(path)) {
        perror("mkdtemp");
        exit(1);
    }
    remember(path);
    return path;
}

/* Creates dir/name holding len bytes (removed at exit). */
static void dir_file(const char *dir, const char *name, const void *data,
                     size_t len)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    if (!path)
        abort();
    sprintf(path, "%s/%s", dir, name);
    if (write_file(path, data, len) != 0) {
        perror(path);
        exit(1);
    }
    remember(path);
}

/* -------------------------------------------------------------- helpers */

static nrt_source text_source(const char *kind, const char *path, int label,
                              int header)
{
    nrt_source s = {.kind = kind, .path = path, .label = label,
                    .header = header, .scale = 1};
    return s;
}

static int zeroed(const nrt_dataset *d)
{
    return d->n == 0 && d->dim == 0 && !d->x && !d->label && !d->y &&
           d->ydim == 0;
}

static int feq(float a, float b)
{
    return fabsf(a - b) <= 1e-6f * (1 + fabsf(b));
}

static int floats_are(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!feq(got[i], want[i]))
            return 0;
    return 1;
}

static int labels_are(const int32_t *got, const int32_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            return 0;
    return 1;
}

/* Loads text of the given kind as class data; checks shape and values. */
static void expect_class(int line, const char *kind, const char *text,
                         int label, int header, size_t dim, int ncls,
                         size_t n, const float *x, const int32_t *lab)
{
    const char *path = temp_text(text);
    nrt_source s = text_source(kind, path, label, header);
    nrt_dataset d;
    nrt_error err = {""};
    int rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, dim, ncls, 0, &d, &err);
    check(rc == 0, line, "load failed: %s", err.msg);
    if (rc != 0)
        return;
    check(d.n == n && d.dim == dim && d.label && !d.y && d.ydim == 0, line,
          "shape: n=%zu dim=%zu", d.n, d.dim);
    if (d.n == n && d.dim == dim && d.label) {
        check(floats_are(d.x, x, n * dim), line, "features differ");
        check(labels_are(d.label, lab, n), line, "labels differ");
    }
    nrt_dataset_free(&d);
    check(zeroed(&d), line, "free does not zero the dataset");
}

/* Loads and expects failure with exactly the message fmt % path. */
static void expect_error_src(int line, const nrt_source *s, int target,
                             size_t dim, int ncls, int test, const char *want)
{
    nrt_dataset d;
    memset(&d, 0xAB, sizeof d); /* must come back zeroed */
    nrt_error err = {""};
    int rc = nrt_dataset_load(s, target, dim, ncls, test, &d, &err);
    check(rc == -1, line, "load of %s succeeded, expected \"%s\"", s->path,
          want);
    check(strcmp(err.msg, want) == 0, line, "message\n    got:  \"%s\"\n"
          "    want: \"%s\"", err.msg, want);
    check(zeroed(&d), line, "output not zeroed after an error");
    if (rc == 0)
        nrt_dataset_free(&d);
}

/* Writes text to a file and expects loading it as class data to fail with
 * the message want_fmt, whose one %s is the path. */
static void expect_error(int line, const char *kind, const char *text,
                         int label, int header, size_t dim, int ncls,
                         const char *want_fmt)
{
    const char *path = temp_text(text);
    nrt_source s = text_source(kind, path, label, header);
    char want[1024];
    snprintf(want, sizeof want, want_fmt, path);
    expect_error_src(line, &s, NRT_TARGET_CLASS, dim, ncls, 0, want);
}

/* ------------------------------------------------------------ text tests */

static void test_text(void)
{
    {
        const float x[] = {1.5f, 2, -3, 0.4f, 0.001f, -2};
        const int32_t l[] = {0, 1, 1};
        expect_class(__LINE__, "csv", "1.5,2,0\n-3,4e-1,1\n1e-3,-2,1\n", -1,
                     0, 2, 2, 3, x, l);
    }
    { /* table: leading whitespace, tabs, runs, no final newline */
        const float x[] = {2, 3, 5, 6};
        const int32_t l[] = {1, 4};
        expect_class(__LINE__, "table", "  1 2\t3 \n\t4   5 \t 6", 0, 0, 2,
                     10, 2, x, l);
    }
    { /* csv with spaces around fields and no final newline */
        const float x[] = {1, 2, 3, 4};
        const int32_t l[] = {0, 1};
        expect_class(__LINE__, "csv", " 1 , 2,0\n3,4 ,\t1", -1, 0, 2, 2, 2, x,
                     l);
    }
    { /* header lines skipped, even when they hold numbers */
        const float x[] = {1, 2};
        const int32_t l[] = {2};
        expect_class(__LINE__, "csv", "a,b,c\n9,9,9\n1,2,2\n", -1, 2, 2, 3, 1,
                     x, l);
    }
    { /* CRLF, blank lines (empty, spaces, CR only), header */
        const float x[] = {1, 2, 3, 4};
        const int32_t l[] = {0, 1};
        expect_class(__LINE__, "csv",
                     "x,y,c\r\n\r\n1,2,0\r\n   \r\n\t\n\n3,4,1\r\n\r\n", -1, 1,
                     2, 2, 2, x, l);
        expect_class(__LINE__, "table", "1 2 0\r\n\r\n3 4 1\r\n", -1, 0, 2, 2,
                     2, x, l);
    }
    { /* label column in the middle, and counted from the end */
        const float x[] = {1, 2, 3, 4};
        const int32_t l[] = {0, 1};
        expect_class(__LINE__, "csv", "1,0,2\n3,1,4\n", 1, 0, 2, 2, 2, x, l);
        expect_class(__LINE__, "csv", "1,0,2\n3,1,4\n", -2, 0, 2, 2, 2, x, l);
        expect_class(__LINE__, "csv", "0,1,2\n1,3,4\n", -3, 0, 2, 2, 2, x, l);
    }
    { /* a UTF-8 byte order mark is skipped; labels written as 1.0 */
        const float x[] = {1, 2};
        const int32_t l[] = {1};
        expect_class(__LINE__, "csv", "\xEF\xBB\xBF" "1,2,1.0\n", -1, 0, 2, 2,
                     1, x, l);
    }

    /* Value targets, two of them, at the end, the start and the middle. */
    const char *text = "1,2,3,4\n5,6,7,8\n";
    const char *path = temp_text(text);
    struct {
        int label;
        float x[4], y[4];
    } cases[] = {
        {-1, {1, 2, 5, 6}, {3, 4, 7, 8}},
        {2, {1, 2, 5, 6}, {3, 4, 7, 8}},
        {0, {3, 4, 7, 8}, {1, 2, 5, 6}},
        {1, {1, 4, 5, 8}, {2, 3, 6, 7}},
        {-2, {1, 4, 5, 8}, {2, 3, 6, 7}},
        {-3, {3, 4, 7, 8}, {1, 2, 5, 6}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nrt_source s = text_source("csv", path, cases[c].label, 0);
        nrt_dataset d;
        nrt_error err = {""};
        int rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 2, 2, 0, &d, &err);
        CHECK(rc == 0, "value targets, label %d: %s", cases[c].label,
              err.msg);
        if (rc != 0)
            continue;
        CHECK(d.n == 2 && d.dim == 2 && d.ydim == 2 && d.y && !d.label,
              "value targets, label %d: shape", cases[c].label);
        if (d.n == 2 && d.y) {
            CHECK(floats_are(d.x, cases[c].x, 4), "value targets, label %d: "
                  "features", cases[c].label);
            CHECK(floats_are(d.y, cases[c].y, 4), "value targets, label %d: "
                  "targets", cases[c].label);
        }
        nrt_dataset_free(&d);
    }
    { /* label 1 is past the end of a 4-column row holding 3 targets */
        nrt_source s = text_source("csv", path, 2, 0);
        char want[1024];
        snprintf(want, sizeof want,
                 "%s: label column 2 is outside the 4 columns of a row", path);
        expect_error_src(__LINE__, &s, NRT_TARGET_VALUE, 1, 3, 0, want);
        s.label = -4; /* block would start at column -1 */
        snprintf(want, sizeof want,
                 "%s: label column -4 is outside the 4 columns of a row",
                 path);
        expect_error_src(__LINE__, &s, NRT_TARGET_VALUE, 2, 2, 0, want);
    }

    { /* scale multiplies the features, not the targets; 0 means 1 */
        nrt_source s = text_source("csv", path, -1, 0);
        s.scale = 0.5f;
        nrt_dataset d;
        nrt_error err = {""};
        int rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 2, 2, 0, &d, &err);
        CHECK(rc == 0, "scale: %s", err.msg);
        if (rc == 0) {
            const float x[] = {0.5f, 1, 2.5f, 3}, y[] = {3, 4, 7, 8};
            CHECK(floats_are(d.x, x, 4) && floats_are(d.y, y, 4),
                  "scale 0.5 applied wrongly");
            nrt_dataset_free(&d);
        }
        s.scale = 0;
        s.standardize = 1; /* ignored by load */
        rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 2, 2, 0, &d, &err);
        CHECK(rc == 0, "scale 0: %s", err.msg);
        if (rc == 0) {
            const float x[] = {1, 2, 5, 6};
            CHECK(floats_are(d.x, x, 4), "scale 0 is not 1");
            nrt_dataset_free(&d);
        }
    }

    /* A larger file, to run the geometric growth over many rows. */
    enum { ROWS = 5000 };
    char *big = malloc(ROWS * 40);
    if (!big)
        abort();
    size_t len = 0;
    for (int i = 0; i < ROWS; i++)
        len += (size_t)sprintf(big + len, "%d %d.25 %d\n", i, i, i % 7);
    const char *bpath = temp_file(big, len);
    free(big);
    nrt_source s = text_source("table", bpath, -1, 0);
    nrt_dataset d;
    nrt_error err = {""};
    int rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, 2, 7, 0, &d, &err);
    CHECK(rc == 0 && d.n == ROWS, "big table: %s", err.msg);
    if (rc == 0) {
        int ok = 1;
        for (size_t i = 0; i < d.n; i++)
            ok &= d.x[2 * i] == (float)i && d.x[2 * i + 1] == (float)i + 0.25f &&
                  d.label[i] == (int32_t)(i % 7);
        CHECK(ok, "big table: values");
        nrt_dataset_free(&d);
    }
}

static void test_text_errors(void)
{
    expect_error(__LINE__, "csv", "1,2,0\n\n1,2\n", -1, 0, 2, 2,
                 "%s:3: expected 3 columns, found 2");
    expect_error(__LINE__, "csv", "h\n1,2,0,4\n", -1, 1, 2, 2,
                 "%s:2: expected 3 columns, found 4");
    expect_error(__LINE__, "csv", "1,2,0,\n", -1, 0, 2, 2,
                 "%s:1: expected 3 columns, found 4");
    expect_error(__LINE__, "table", "1 2 0\n1 2 0 5 6\n", -1, 0, 2, 2,
                 "%s:2: expected 3 columns, found 5");
    expect_error(__LINE__, "csv", "1,2,0\n\n1,abc,0\n", -1, 0, 2, 2,
                 "%s:3:2: not a number: 'abc'");
    expect_error(__LINE__, "csv", "1, ,0\n", -1, 0, 2, 2,
                 "%s:1:2: not a number: ''");
    expect_error(__LINE__, "csv", "1,2,0\n1,2,x\n", -1, 0, 2, 2,
                 "%s:2:3: not a number: 'x'");
    expect_error(__LINE__, "table", "1 2 0\n1 2x 0\n", -1, 0, 2, 2,
                 "%s:2:2: not a number: '2x'");
    expect_error(__LINE__, "csv", "inf,2,0\n", -1, 0, 2, 2,
                 "%s:1:1: not a number: 'inf'");
    expect_error(__LINE__, "csv", "1,-Infinity,0\n", -1, 0, 2, 2,
                 "%s:1:2: not a number: '-Infinity'");
    expect_error(__LINE__, "csv", "1,nan,0\n", -1, 0, 2, 2,
                 "%s:1:2: not a number: 'nan'");
    expect_error(__LINE__, "csv", "1,1e999,0\n", -1, 0, 2, 2,
                 "%s:1:2: number out of range: '1e999'");
    expect_error(__LINE__, "csv", "1,1e39,0\n", -1, 0, 2, 2,
                 "%s:1:2: number out of range: '1e39'");
    expect_error(__LINE__, "csv", "1,2,0.5\n", -1, 0, 2, 2,
                 "%s:1: label 0.5 is not an integer class");
    expect_error(__LINE__, "csv", "1,2,0\n\n1,2,3\n", -1, 0, 2, 3,
                 "%s:3: label 3 out of range [0, 3)");
    expect_error(__LINE__, "csv", "1,2,-1\n", -1, 0, 2, 3,
                 "%s:1: label -1 out of range [0, 3)");
    expect_error(__LINE__, "csv", "", -1, 0, 2, 3, "%s: no samples");
    expect_error(__LINE__, "csv", "\n  \r\n\t\n", -1, 0, 2, 3,
                 "%s: no samples");
    expect_error(__LINE__, "csv", "a,b,c\n", -1, 1, 2, 3, "%s: no samples");

    { /* NUL byte */
        const char text[] = "1,2,0\n1,2\0,0\n";
        const char *path = temp_file(text, sizeof text - 1);
        nrt_source s = text_source("csv", path, -1, 0);
        char want[1024];
        snprintf(want, sizeof want, "%s:2: NUL byte (not a text file?)",
                 path);
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
    }
    { /* a line over 1 MiB */
        size_t n = ((size_t)1 << 20) + 10;
        char *text = malloc(n + 1);
        if (!text)
            abort();
        strcpy(text, "1,2,0\n");
        memset(text + 6, '1', n - 6);
        text[n] = '\0';
        const char *path = temp_file(text, n);
        free(text);
        nrt_source s = text_source("csv", path, -1, 0);
        char want[1024];
        snprintf(want, sizeof want, "%s:2: line longer than 1048576 bytes",
                 path);
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
    }
    { /* a file that does not exist */
        char path[512];
        snprintf(path, sizeof path, "%s/netc_data_no_such_file.csv",
                 tmpdir());
        nrt_source s = text_source("csv", path, -1, 0);
        char want[1024];
        snprintf(want, sizeof want, "%s: cannot open: %s", path,
                 strerror(ENOENT));
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
    }
    { /* a directory is not a text file */
        const char *dir = temp_dir();
        nrt_source s = text_source("table", dir, -1, 0);
        char want[1024];
        snprintf(want, sizeof want, "%s: read error: %s", dir,
                 strerror(EISDIR));
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
    }
    { /* unknown kind, bad arguments */
        const char *path = temp_text("1,2,0\n");
        nrt_source s = text_source("json", path, -1, 0);
        char want[1024];
        snprintf(want, sizeof want, "%s: unknown data kind 'json' (expected "
                 "csv, table or cifar10)", path);
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
        s.kind = "csv";
        snprintf(want, sizeof want, "%s: unknown target kind 7", path);
        expect_error_src(__LINE__, &s, 7, 2, 3, 0, want);
        s.header = -1;
        snprintf(want, sizeof want, "%s: header line count -1 is negative",
                 path);
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
    }
}

/* --------------------------------------------------------------- cifar10 */

enum { REC = 3073, PIX = 3072 };

/* n records; record r has label labels[r] and pixel j = (r * 31 + j) % 256,
 * plus base so different batches differ. */
static unsigned char *cifar_records(size_t n, const unsigned char *labels,
                                    int base)
{
    unsigned char *b = malloc(n * REC + 1);
    if (!b)
        abort();
    for (size_t r = 0; r < n; r++) {
        b[r * REC] = labels[r];
        for (size_t j = 0; j < PIX; j++)
            b[r * REC + 1 + j] = (unsigned char)((r * 31 + j + (size_t)base) %
                                                 256);
    }
    return b;
}

static int cifar_pixels_ok(const float *x, size_t r, int base, float scale)
{
    for (size_t j = 0; j < PIX; j++) {
        unsigned char b = (unsigned char)((r * 31 + j + (size_t)base) % 256);
        if (x[j] != (float)b / 255.0f * scale)
            return 0;
    }
    return 1;
}

static void test_cifar(void)
{
    const unsigned char lab1[] = {3, 0, 9}, lab2[] = {1, 2}, labt[] = {7};
    unsigned char *b1 = cifar_records(3, lab1, 0);
    unsigned char *b2 = cifar_records(2, lab2, 100);
    unsigned char *bt = cifar_records(1, labt, 200);
    nrt_source s = {.kind = "cifar10", .scale = 1};
    nrt_dataset d;
    nrt_error err = {""};
    char want[1024];

    /* One batch file. */
    s.path = temp_file(b1, 3 * REC);
    int rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, PIX, 10, 0, &d, &err);
    CHECK(rc == 0, "cifar file: %s", err.msg);
    if (rc == 0) {
        CHECK(d.n == 3 && d.dim == PIX && d.label && !d.y, "cifar file shape");
        if (d.n == 3) {
            CHECK(labels_are(d.label, (const int32_t[]){3, 0, 9}, 3),
                  "cifar file labels");
            for (size_t r = 0; r < 3; r++)
                CHECK(cifar_pixels_ok(d.x + r * PIX, r, 0, 1),
                      "cifar file pixels of record %zu", r);
            CHECK(d.x[0] == 0 && d.x[255] == 1.0f, "cifar 0 and 255");
        }
        nrt_dataset_free(&d);
    }
    s.scale = 2;
    rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, PIX, 10, 1, &d, &err);
    CHECK(rc == 0, "cifar scaled: %s", err.msg);
    if (rc == 0) {
        CHECK(d.n == 3 && cifar_pixels_ok(d.x + PIX, 1, 0, 2),
              "cifar scale 2");
        nrt_dataset_free(&d);
    }
    s.scale = 1;

    /* Errors on a file. */
    snprintf(want, sizeof want, "%s: record 3: label 9 out of range [0, 5)",
             s.path);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 5, 0, want);
    snprintf(want, sizeof want, "%s: cifar10 records hold 3x32x32 images, "
             "the model expects 784 features", s.path);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 784, 10, 0, want);
    snprintf(want, sizeof want, "%s: cifar10 holds class labels, not value "
             "targets", s.path);
    expect_error_src(__LINE__, &s, NRT_TARGET_VALUE, PIX, 10, 0, want);
    s.path = temp_file(b1, 2 * REC + 5);
    snprintf(want, sizeof want, "%s: size %d is not a multiple of 3073 bytes "
             "(truncated record?)", s.path, 2 * REC + 5);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 10, 0, want);
    s.path = temp_file("", 0);
    snprintf(want, sizeof want, "%s: no samples", s.path);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 10, 0, want);

    /* A directory: data_batch_1 and _2, and test_batch. */
    const char *dir = temp_dir();
    s.path = dir;
    snprintf(want, sizeof want, "%s: no data_batch_*.bin files", dir);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 10, 0, want);
    snprintf(want, sizeof want, "%s: no test_batch.bin file", dir);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 10, 1, want);

    dir_file(dir, "data_batch_1.bin", b1, 3 * REC);
    dir_file(dir, "data_batch_2.bin", b2, 2 * REC);
    dir_file(dir, "test_batch.bin", bt, REC);
    rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, PIX, 10, 0, &d, &err);
    CHECK(rc == 0, "cifar dir: %s", err.msg);
    if (rc == 0) {
        CHECK(d.n == 5, "cifar dir: %zu samples, expected 5", d.n);
        if (d.n == 5) {
            CHECK(labels_are(d.label, (const int32_t[]){3, 0, 9, 1, 2}, 5),
                  "cifar dir labels");
            CHECK(cifar_pixels_ok(d.x + 2 * PIX, 2, 0, 1) &&
                      cifar_pixels_ok(d.x + 3 * PIX, 0, 100, 1) &&
                      cifar_pixels_ok(d.x + 4 * PIX, 1, 100, 1),
                  "cifar dir pixels");
        }
        nrt_dataset_free(&d);
    }
    rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, PIX, 10, 1, &d, &err);
    CHECK(rc == 0, "cifar test batch: %s", err.msg);
    if (rc == 0) {
        CHECK(d.n == 1 && d.label[0] == 7 && cifar_pixels_ok(d.x, 0, 200, 1),
              "cifar test batch contents");
        nrt_dataset_free(&d);
    }
    { /* the same directory named with a trailing slash */
        char slashed[512];
        snprintf(slashed, sizeof slashed, "%s/", dir);
        nrt_source t = s;
        t.path = slashed;
        rc = nrt_dataset_load(&t, NRT_TARGET_CLASS, PIX, 10, 0, &d, &err);
        CHECK(rc == 0 && d.n == 5, "cifar dir/: %s", err.msg);
        if (rc == 0)
            nrt_dataset_free(&d);
    }
    /* A truncated batch in the directory, named in the message. */
    dir_file(dir, "data_batch_4.bin", b2, REC + 100);
    snprintf(want, sizeof want, "%s/data_batch_4.bin: size %d is not a "
             "multiple of 3073 bytes (truncated record?)", dir, REC + 100);
    expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, PIX, 10, 0, want);

    free(b1);
    free(b2);
    free(bt);
}

/* ---------------------------------------------------- split, stats, etc. */

/* n samples: feature 0 = i, feature 1 = 10 i, label = i % 3. */
static int make_dataset(size_t n, nrt_dataset *d)
{
    char *text = malloc(n * 32 + 1);
    if (!text)
        abort();
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "%zu,%zu,%zu\n", i, 10 * i, i % 3);
    text[len] = '\0';
    nrt_source s = text_source("csv", temp_text(text), -1, 0);
    free(text);
    nrt_error err = {""};
    int rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, 2, 3, 0, d, &err);
    CHECK(rc == 0, "make_dataset: %s", err.msg);
    return rc;
}

/* Checks the rows of d are samples of make_dataset in increasing order,
 * marking each in seen. */
static int consistent(const nrt_dataset *d, unsigned char *seen)
{
    float last = -1;
    for (size_t i = 0; i < d->n; i++) {
        float v = d->x[2 * i];
        size_t k = (size_t)v;
        if (v <= last || d->x[2 * i + 1] != 10 * v ||
            d->label[i] != (int32_t)(k % 3) || seen[k])
            return 0;
        seen[k] = 1;
        last = v;
    }
    return 1;
}

static void test_split(void)
{
    enum { N = 20 };
    nrt_dataset a, b, ha, hb;
    nrt_error err = {""};
    if (make_dataset(N, &a) != 0 || make_dataset(N, &b) != 0)
        return;

    int rc = nrt_dataset_split(&a, 0.3, 42, &ha, &err);
    CHECK(rc == 0, "split: %s", err.msg);
    rc |= nrt_dataset_split(&b, 0.3, 42, &hb, &err);
    if (rc == 0) {
        CHECK(a.n == 14 && ha.n == 6 && ha.dim == 2 && ha.label && !ha.y,
              "split sizes %zu + %zu", a.n, ha.n);
        unsigned char seen[N] = {0};
        CHECK(consistent(&a, seen) && consistent(&ha, seen),
              "split parts are not ordered, disjoint samples");
        int all = 1;
        for (int i = 0; i < N; i++)
            all &= seen[i];
        CHECK(all, "split lost samples");
        CHECK(a.n == b.n && ha.n == hb.n &&
                  memcmp(ha.x, hb.x, ha.n * 2 * sizeof(float)) == 0 &&
                  memcmp(a.x, b.x, a.n * 2 * sizeof(float)) == 0,
              "same seed, different split");
        nrt_dataset_free(&ha);
        nrt_dataset_free(&hb);
    }
    nrt_dataset_free(&a);
    nrt_dataset_free(&b);

    /* Different seeds give different splits (for some seed). */
    int differs = 0;
    for (uint64_t seed = 1; seed < 6 && !differs; seed++) {
        if (make_dataset(N, &a) != 0 || make_dataset(N, &b) != 0)
            return;
        if (nrt_dataset_split(&a, 0.5, 0, &ha, &err) == 0) {
            if (nrt_dataset_split(&b, 0.5, seed, &hb, &err) == 0) {
                differs = memcmp(ha.x, hb.x, ha.n * 2 * sizeof(float)) != 0;
                nrt_dataset_free(&hb);
            }
            nrt_dataset_free(&ha);
        }
        nrt_dataset_free(&a);
        nrt_dataset_free(&b);
    }
    CHECK(differs, "the seed does not change the split");

    /* Sizes are rounded and clamped to [1, n-1]. */
    const struct {
        size_t n;
        double f;
        size_t k;
    } sz[] = {{10, 0.01, 1}, {10, 0.99, 9}, {10, 0.25, 3}, {10, 0.24, 2},
              {2, 0.5, 1}, {3, 0.9, 2}};
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
        if (make_dataset(sz[c].n, &a) != 0)
            return;
        rc = nrt_dataset_split(&a, sz[c].f, 7, &ha, &err);
        CHECK(rc == 0 && ha.n == sz[c].k && a.n == sz[c].n - sz[c].k,
              "split %zu by %g: held %zu, expected %zu", sz[c].n, sz[c].f,
              rc == 0 ? ha.n : 0, sz[c].k);
        if (rc == 0)
            nrt_dataset_free(&ha);
        nrt_dataset_free(&a);
    }

    /* Errors: bad fractions, too few samples; d stays as it was. */
    if (make_dataset(5, &a) != 0)
        return;
    const double bad[] = {0, 1, -0.5, 1.5, NAN};
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        memset(&ha, 0xAB, sizeof ha);
        rc = nrt_dataset_split(&a, bad[c], 1, &ha, &err);
        char want[128];
        snprintf(want, sizeof want, "held-out fraction %g is not in (0, 1)",
                 bad[c]);
        CHECK(rc == -1 && strcmp(err.msg, want) == 0 && zeroed(&ha) &&
                  a.n == 5,
              "split by %g: \"%s\"", bad[c], err.msg);
    }
    nrt_dataset_free(&a);
    if (make_dataset(1, &a) != 0)
        return;
    memset(&ha, 0xAB, sizeof ha);
    rc = nrt_dataset_split(&a, 0.5, 1, &ha, &err);
    CHECK(rc == -1 &&
              strcmp(err.msg,
                     "cannot split 1 sample into two non-empty parts") == 0 &&
              zeroed(&ha) && a.n == 1,
          "split of one sample: \"%s\"", err.msg);
    nrt_dataset_free(&a);

    /* Value targets travel with their samples. */
    const char *path = temp_text("1,10,11\n2,20,21\n3,30,31\n4,40,41\n");
    nrt_source s = text_source("csv", path, -1, 0);
    rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 1, 2, 0, &a, &err);
    CHECK(rc == 0, "load value set: %s", err.msg);
    if (rc == 0) {
        rc = nrt_dataset_split(&a, 0.5, 3, &ha, &err);
        CHECK(rc == 0 && ha.y && !ha.label && ha.ydim == 2, "value split: %s",
              err.msg);
        if (rc == 0) {
            int ok = 1;
            for (size_t i = 0; i < a.n; i++)
                ok &= a.y[2 * i] == 10 * a.x[i] &&
                      a.y[2 * i + 1] == 10 * a.x[i] + 1;
            for (size_t i = 0; i < ha.n; i++)
                ok &= ha.y[2 * i] == 10 * ha.x[i] &&
                      ha.y[2 * i + 1] == 10 * ha.x[i] + 1;
            CHECK(ok && a.n == 2 && ha.n == 2, "value split contents");
            nrt_dataset_free(&ha);
        }
        nrt_dataset_free(&a);
    }
}

static void test_stats(void)
{
    const char *path = temp_text("1,7,0\n2,7,1\n3,7,0\n4,7,1\n");
    nrt_source s = text_source("csv", path, -1, 0);
    nrt_dataset d;
    nrt_error err = {""};
    if (nrt_dataset_load(&s, NRT_TARGET_CLASS, 2, 2, 0, &d, &err) != 0) {
        CHECK(0, "stats load: %s", err.msg);
        return;
    }
    float mean[2], std[2];
    nrt_dataset_stats(&d, mean, std);
    CHECK(feq(mean[0], 2.5f) && feq(mean[1], 7),
          "mean %g %g", mean[0], mean[1]);
    CHECK(feq(std[0], sqrtf(1.25f)) && std[1] == 0,
          "std %g %g", std[0], std[1]);
    nrt_dataset_standardize(&d, mean, std);
    const float want[] = {-1.5f / sqrtf(1.25f), 0, -0.5f / sqrtf(1.25f), 0,
                          0.5f / sqrtf(1.25f), 0, 1.5f / sqrtf(1.25f), 0};
    CHECK(floats_are(d.x, want, 8), "standardized values");
    nrt_dataset_stats(&d, mean, std);
    CHECK(fabsf(mean[0]) < 1e-6f && feq(std[0], 1) && mean[1] == 0 &&
              std[1] == 0,
          "stats after standardize: %g %g %g %g", mean[0], std[0], mean[1],
          std[1]);

    /* gather */
    const uint32_t idx[] = {3, 0, 3};
    float x[6];
    int32_t label[3];
    nrt_dataset_gather(&d, idx, 3, x, label, NULL);
    const float gx[] = {want[6], 0, want[0], 0, want[6], 0};
    CHECK(floats_are(x, gx, 6) &&
              labels_are(label, (const int32_t[]){1, 0, 1}, 3),
          "gather");
    nrt_dataset_free(&d);

    /* Many features: more than one block of the stats' accumulators. */
    enum { DIM = 600, N = 9 };
    char *text = malloc((size_t)N * DIM * 8 + 1);
    if (!text)
        abort();
    size_t len = 0;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < DIM; j++)
            len += (size_t)sprintf(text + len, "%d ", i * (j % 5) + j);
        len += (size_t)sprintf(text + len, "%d\n", i % 2);
    }
    s = text_source("table", temp_file(text, len), -1, 0);
    free(text);
    if (nrt_dataset_load(&s, NRT_TARGET_CLASS, DIM, 2, 0, &d, &err) != 0) {
        CHECK(0, "wide load: %s", err.msg);
        return;
    }
    float *m = malloc(2 * DIM * sizeof *m);
    if (!m)
        abort();
    nrt_dataset_stats(&d, m, m + DIM);
    int ok = 1;
    for (int j = 0; j < DIM; j++) {
        /* feature j = a i + j over i = 0..8, a = j % 5: mean 4a + j, std
         * a sqrt(60/9) */
        double a = j % 5;
        ok &= feq(m[j], (float)(4 * a + j)) &&
              fabs(m[DIM + j] - a * sqrt(60.0 / 9)) < 1e-5;
    }
    CHECK(ok, "wide stats");
    free(m);
    nrt_dataset_free(&d);
}

static void test_boston(void)
{
    const char *top = getenv("NETC_TOP_SRCDIR");
    if (!top || !*top) {
        printf("test_data: NETC_TOP_SRCDIR not set, Boston check skipped\n");
        return;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/data/boston_housing.data", top);
    if (access(path, R_OK) != 0) {
        printf("test_data: %s not found, Boston check skipped\n", path);
        return;
    }
    nrt_source s = text_source("table", path, -1, 0);
    nrt_dataset d;
    nrt_error err = {""};
    int rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 13, 1, 0, &d, &err);
    CHECK(rc == 0, "boston: %s", err.msg);
    if (rc != 0)
        return;
    CHECK(d.n == 506 && d.dim == 13 && d.ydim == 1, "boston shape %zu x %zu",
          d.n, d.dim);
    CHECK(d.x[0] == 0.00632f && d.x[1] == 18.0f && d.y[0] == 24.0f &&
              d.y[505] == 11.9f,
          "boston values %g %g %g", d.x[0], d.x[1], d.y[0]);
    float mean[13], std[13];
    nrt_dataset_stats(&d, mean, std);
    CHECK(fabsf(mean[5] - 6.2846f) < 1e-3f, "boston mean RM %g", mean[5]);
    nrt_dataset_free(&d);
}

int main(void)
{
    test_text();
    test_text_errors();
    test_cifar();
    test_split();
    test_stats();
    test_boston();
    cleanup();
    printf("test_data: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
