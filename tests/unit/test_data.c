/*
 * test_data.c — unit test of runtime/data.c: text, cifar10 and mnist (IDX)
 * loading, the exact error messages, held-out splits, statistics and
 * standardization.
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

#include "check.h"

/* ------------------------------------------------------------ temp files */

#define MAX_TEMPS 256

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

/* Like expect_error, for a first line that is a header the source does not
 * skip: the message must end with the hint to skip `skip` lines. */
static void expect_header_error(int line, const char *kind, const char *text,
                                int header, const char *want_fmt, int skip)
{
    const char *path = temp_text(text);
    nrt_source s = text_source(kind, path, -1, header);
    char want[1024];
    int n = snprintf(want, sizeof want, want_fmt, path);
    snprintf(want + n, sizeof want - (size_t)n, "; the line looks like a "
             "header: skip it with header=%d in the source, as %s(\"%s\", "
             "header=%d)", skip, kind, path, skip);
    expect_error_src(line, &s, NRT_TARGET_CLASS, 2, 2, 0, want);
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

    /* a header not skipped: the hint says how, whether its columns are
     * counted right or not; a first line with a number is data */
    expect_header_error(__LINE__, "csv", "sepal_length,sepal_width,species\n"
                        "1,2,0\n", 0, "%s:1:1: not a number: 'sepal_length'",
                        1);
    expect_header_error(__LINE__, "table", "# iris\n\nx y  class\n1 2 0\n",
                        1, "%s:3:1: not a number: 'x'", 3);
    expect_header_error(__LINE__, "csv", "x,label\n1,2,0\n", 0,
                        "%s:1: expected 3 columns, found 2", 1);
    expect_header_error(__LINE__, "csv", "nan,\"y\",\n1,2,0\n", 0,
                        "%s:1:1: not a number: 'nan'", 1);
    expect_error(__LINE__, "csv", "1,2,0\nx,y,label\n", -1, 0, 2, 2,
                 "%s:2:1: not a number: 'x'");
    expect_error(__LINE__, "csv", "x,2,label\n", -1, 0, 2, 2,
                 "%s:1:1: not a number: 'x'");
    expect_error(__LINE__, "csv", ",,\n", -1, 0, 2, 2,
                 "%s:1:1: not a number: ''");

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
        snprintf(want, sizeof want, "%s: unknown data kind 'json' (expected one of "
                 "csv, table, cifar10, mnist)", path);
        expect_error_src(__LINE__, &s, NRT_TARGET_CLASS, 2, 3, 0, want);
        s.kind = "csv";
        snprintf(want, sizeof want, "%s: unknown target kind 7", path);
        expect_error_src(__LINE__, &s, 7, 2, 3, 0, want);
        s.header = -2; /* -1 is "told by the content" */
        snprintf(want, sizeof want, "%s: header line count -2 is negative",
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

/* ----------------------------------------------------------------- mnist */

enum { U8 = 0x08, I8 = 0x09, I16 = 0x0B, I32 = 0x0C, F32 = 0x0D, F64 = 0x0E };

static size_t idx_size(int type)
{
    switch (type) {
    case I16: return 2;
    case I32: case F32: return 4;
    case F64: return 8;
    default: return 1;
    }
}

/* An IDX file: the header for type and dims, then nv values (which need not
 * be as many as the dims say) converted to the type, big-endian. */
static unsigned char *idx_make(int type, int ndims, const uint32_t *dims,
                               const double *v, size_t nv, size_t *len)
{
    size_t size = idx_size(type), head = 4 + 4 * (size_t)ndims;
    *len = head + nv * size;
    unsigned char *b = malloc(*len + 1);
    if (!b)
        abort();
    b[0] = 0;
    b[1] = 0;
    b[2] = (unsigned char)type;
    b[3] = (unsigned char)ndims;
    for (int i = 0; i < ndims; i++)
        for (int k = 0; k < 4; k++)
            b[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    unsigned char *p = b + head;
    for (size_t i = 0; i < nv; i++, p += size) {
        uint64_t u;
        if (type == F32) {
            float f = (float)v[i];
            uint32_t w;
            memcpy(&w, &f, sizeof w);
            u = w;
        } else if (type == F64) {
            memcpy(&u, &v[i], sizeof u);
        } else {
            u = (uint64_t)(int64_t)v[i]; /* two's complement, low bytes */
        }
        for (size_t k = 0; k < size; k++)
            p[k] = (unsigned char)(u >> (8 * (size - 1 - k)));
    }
    return b;
}

/* Writes an IDX file as dir/name (removed at exit). */
static void idx_put(const char *dir, const char *name, int type, int ndims,
                    const uint32_t *dims, const double *v, size_t nv)
{
    size_t len;
    unsigned char *b = idx_make(type, ndims, dims, v, nv, &len);
    dir_file(dir, name, b, len);
    free(b);
}

/* Creates the directory dir/name (removed at exit, after its files). */
static const char *sub_dir(const char *dir, const char *name)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    if (!path)
        abort();
    sprintf(path, "%s/%s", dir, name);
    if (mkdir(path, 0700) != 0) {
        perror(path);
        exit(1);
    }
    remember(path);
    return path;
}

static nrt_source mnist_source(const char *path)
{
    nrt_source s = {.kind = "mnist", .path = path, .scale = 1};
    return s;
}

/* The training and test sets of the MNIST-like directories below. */
static const double tr_img[18] = {0,  255, 1,  2,  3,  128, 10,  20,  30,
                                  40, 50,  60, 200, 201, 202, 203, 204, 254};
static const double tr_lab[3] = {3, 0, 9};
static const double te_img[12] = {7, 7, 7, 7, 7, 7, 8, 9, 10, 11, 12, 13};
static const double te_lab[2] = {5, 1};
static const uint32_t tr_dims[3] = {3, 2, 3}, te_dims[3] = {2, 2, 3};
static const uint32_t tr_n[1] = {3}, te_n[1] = {2};

/* Whether x holds the n bytes b as ToTensor has them, times scale. */
static int bytes_are(const float *x, const double *b, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] != (float)b[i] / 255.0f * scale)
            return 0;
    return 1;
}

/* Loads s as class data and checks it holds the given unsigned-byte images
 * (n of 6 values) and labels. */
static void expect_mnist(int line, const nrt_source *s, int test, size_t n,
                         const double *img, const double *lab)
{
    nrt_dataset d;
    nrt_error err = {""};
    int rc = nrt_dataset_load(s, NRT_TARGET_CLASS, 6, 10, test, &d, &err);
    check(rc == 0, line, "mnist %s (test %d): %s", s->path, test, err.msg);
    if (rc != 0)
        return;
    check(d.n == n && d.dim == 6 && d.label && !d.y && d.ydim == 0, line,
          "mnist %s: shape n=%zu dim=%zu", s->path, d.n, d.dim);
    if (d.n == n && d.dim == 6 && d.label) {
        float scale = s->scale != 0 ? s->scale : 1.0f;
        check(bytes_are(d.x, img, 6 * n, scale), line,
              "mnist %s: features", s->path);
        int ok = 1;
        for (size_t i = 0; i < n; i++)
            ok &= d.label[i] == (int32_t)lab[i];
        check(ok, line, "mnist %s: labels", s->path);
    }
    nrt_dataset_free(&d);
}

/* Expects loading s to fail with want, which must name the file `names`. */
static void expect_mnist_error(int line, const nrt_source *s, int target,
                               size_t dim, int ncls, int test,
                               const char *names, const char *want)
{
    check(strstr(want, names) != NULL, line, "\"%s\" does not name %s", want,
          names);
    expect_error_src(line, s, target, dim, ncls, test, want);
}

static void test_mnist(void)
{
    char want[2048], p[512], q[512];
    nrt_dataset d;
    nrt_error err = {""};

    /* A directory with MNIST's names: the training set, then the test set. */
    const char *dir = temp_dir();
    idx_put(dir, "train-images-idx3-ubyte", U8, 3, tr_dims, tr_img, 18);
    idx_put(dir, "train-labels-idx1-ubyte", U8, 1, tr_n, tr_lab, 3);
    idx_put(dir, "t10k-images-idx3-ubyte", U8, 3, te_dims, te_img, 12);
    idx_put(dir, "t10k-labels-idx1-ubyte", U8, 1, te_n, te_lab, 2);
    nrt_source s = mnist_source(dir);
    expect_mnist(__LINE__, &s, 0, 3, tr_img, tr_lab);
    expect_mnist(__LINE__, &s, 1, 2, te_img, te_lab);
    if (nrt_dataset_load(&s, NRT_TARGET_CLASS, 6, 10, 0, &d, &err) == 0) {
        CHECK(d.x[0] == 0.0f && d.x[1] == 1.0f && d.x[5] == 128.0f / 255.0f,
              "mnist bytes 0, 255, 128: %g %g %g", d.x[0], d.x[1], d.x[5]);
        nrt_dataset_free(&d);
    }
    snprintf(p, sizeof p, "%s/", dir); /* a trailing slash */
    s.path = p;
    expect_mnist(__LINE__, &s, 0, 3, tr_img, tr_lab);
    s.path = dir;
    s.scale = 2; /* scaled after the division, as cifar10 */
    expect_mnist(__LINE__, &s, 0, 3, tr_img, tr_lab);
    s.scale = 0; /* counts as 1 */
    expect_mnist(__LINE__, &s, 1, 2, te_img, te_lab);
    s.scale = 1;

    /* A file: its labels are found by name, whatever the test flag says. */
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    s.path = p;
    expect_mnist(__LINE__, &s, 0, 2, te_img, te_lab);
    expect_mnist(__LINE__, &s, 1, 2, te_img, te_lab);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    expect_mnist(__LINE__, &s, 1, 3, tr_img, tr_lab);

    /* The mirrors' dotted names; the first spelling wins over the second. */
    const char *dotted = temp_dir();
    idx_put(dotted, "train-images.idx3-ubyte", U8, 3, tr_dims, tr_img, 18);
    idx_put(dotted, "train-labels.idx1-ubyte", U8, 1, tr_n, tr_lab, 3);
    idx_put(dotted, "t10k-images.idx3-ubyte", U8, 3, te_dims, te_img, 12);
    idx_put(dotted, "t10k-labels.idx1-ubyte", U8, 1, te_n, te_lab, 2);
    s.path = dotted;
    expect_mnist(__LINE__, &s, 0, 3, tr_img, tr_lab);
    expect_mnist(__LINE__, &s, 1, 2, te_img, te_lab);
    snprintf(p, sizeof p, "%s/t10k-images.idx3-ubyte", dotted);
    s.path = p;
    expect_mnist(__LINE__, &s, 0, 2, te_img, te_lab);
    idx_put(dotted, "t10k-images-idx3-ubyte", U8, 3, tr_dims, tr_img, 18);
    idx_put(dotted, "t10k-labels-idx1-ubyte", U8, 1, tr_n, tr_lab, 3);
    s.path = dotted;
    expect_mnist(__LINE__, &s, 1, 3, tr_img, tr_lab);

    /* The last "images" of the path is replaced, here in the file's name
     * and not in its directory's; and "idx3" need not be there. */
    const char *imdir = sub_dir(dir, "images");
    idx_put(imdir, "my-images.bin", U8, 3, te_dims, te_img, 12);
    idx_put(imdir, "my-labels.bin", U8, 1, te_n, te_lab, 2);
    snprintf(p, sizeof p, "%s/my-images.bin", imdir);
    s.path = p;
    expect_mnist(__LINE__, &s, 0, 2, te_img, te_lab);

    /* Other types: int16 and float32 features (scaled, not divided), signed
     * byte, int16 and int32 labels; 2x3 reshaped as 6 or seen as 3x2. */
    const double i16[6] = {-32768, -1, 0, 1, 300, 32767};
    const double f32[6] = {0.5, -1.25, 3e-3, 1e10, -0.0, 65504};
    const uint32_t d23[3] = {1, 2, 3}, d32[3] = {1, 3, 2}, d16[2] = {1, 6};
    const double lab1[1] = {4};
    struct {
        int type, ndims;
        const uint32_t *dims;
        const double *v;
        int ltype;
        float scale;
    } ty[] = {
        {I16, 3, d23, i16, I8, 1},    {I16, 2, d16, i16, I16, 0.5f},
        {F32, 3, d32, f32, I32, 1},   {F32, 3, d23, f32, U8, -2},
        {F64, 3, d23, f32, I16, 0},   {I32, 2, d16, i16, I32, 0.25f},
        {I8, 2, d16, (const double[]){-128, -1, 0, 1, 2, 127}, U8, 1},
    };
    const uint32_t one[1] = {1};
    for (size_t c = 0; c < sizeof ty / sizeof ty[0]; c++) {
        const char *tdir = temp_dir();
        idx_put(tdir, "x-images", ty[c].type, ty[c].ndims, ty[c].dims, ty[c].v,
                6);
        idx_put(tdir, "x-labels", ty[c].ltype, 1, one, lab1, 1);
        snprintf(p, sizeof p, "%s/x-images", tdir);
        s = mnist_source(p);
        s.scale = ty[c].scale;
        int rc = nrt_dataset_load(&s, NRT_TARGET_CLASS, 6, 5, 0, &d, &err);
        CHECK(rc == 0, "mnist type 0x%02x: %s", ty[c].type, err.msg);
        if (rc != 0)
            continue;
        float scale = s.scale != 0 ? s.scale : 1.0f;
        int ok = d.n == 1 && d.dim == 6 && d.label && d.label[0] == 4;
        for (size_t i = 0; ok && i < 6; i++)
            ok = d.x[i] == (float)ty[c].v[i] * scale;
        CHECK(ok, "mnist type 0x%02x, labels 0x%02x, scale %g: values",
              ty[c].type, ty[c].ltype, scale);
        nrt_dataset_free(&d);
    }
    s = mnist_source(dir);

    /* Value targets: float32 [n, 2], and [n] or [n, 1] for one value. */
    {
        const char *vdir = temp_dir();
        const double y2[6] = {0.5, -1, 2.25, 1e-3, -7, 1e6};
        const double y1[3] = {-15, 0, 123456789};
        const uint32_t n2[2] = {3, 2}, n11[2] = {3, 1};
        idx_put(vdir, "a-images", U8, 3, tr_dims, tr_img, 18);
        idx_put(vdir, "a-labels", F32, 2, n2, y2, 6);
        idx_put(vdir, "b-images", U8, 3, tr_dims, tr_img, 18);
        idx_put(vdir, "b-labels", I32, 1, tr_n, y1, 3);
        idx_put(vdir, "c-images", U8, 3, tr_dims, tr_img, 18);
        idx_put(vdir, "c-labels", F64, 2, n11, y1, 3);
        const struct {
            const char *name;
            int ncls;
            const double *y;
        } vc[] = {{"a-images", 2, y2}, {"b-images", 1, y1},
                  {"c-images", 1, y1}};
        for (size_t c = 0; c < 3; c++) {
            snprintf(p, sizeof p, "%s/%s", vdir, vc[c].name);
            s = mnist_source(p);
            s.scale = 0.5f;
            int rc = nrt_dataset_load(&s, NRT_TARGET_VALUE, 6, vc[c].ncls, 0,
                                      &d, &err);
            CHECK(rc == 0, "mnist value targets %s: %s", vc[c].name, err.msg);
            if (rc != 0)
                continue;
            size_t ny = 3 * (size_t)vc[c].ncls;
            int ok = d.n == 3 && d.dim == 6 && d.y && !d.label &&
                     d.ydim == (size_t)vc[c].ncls;
            for (size_t i = 0; ok && i < ny; i++)
                ok = d.y[i] == (float)vc[c].y[i]; /* targets not scaled */
            CHECK(ok, "mnist value targets %s", vc[c].name);
            CHECK(ok && bytes_are(d.x, tr_img, 18, 0.5f),
                  "mnist value targets %s: features", vc[c].name);
            nrt_dataset_free(&d);
        }

        /* Wrong shapes of value targets. */
        snprintf(p, sizeof p, "%s/a-images", vdir);
        snprintf(q, sizeof q, "%s/a-labels", vdir);
        s = mnist_source(p);
        snprintf(want, sizeof want, "%s: targets of shape 3x2, expected 3x3 "
                 "(3 values a sample)", q);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 6, 3, 0, q, want);
        snprintf(want, sizeof want, "%s: targets of shape 3x2, expected 3 or "
                 "3x1 (one value a sample)", q);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 6, 1, 0, q, want);
        snprintf(p, sizeof p, "%s/b-images", vdir);
        snprintf(q, sizeof q, "%s/b-labels", vdir);
        snprintf(want, sizeof want, "%s: targets of shape 3, expected 3x2 "
                 "(2 values a sample)", q);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 6, 2, 0, q, want);
    }

    /* ---- errors */

    /* The model's input size. */
    s = mnist_source(dir);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    snprintf(want, sizeof want, "%s: images of 2x3, but the model's input "
             "has 5 values", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 5, 10, 0, p, want);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    snprintf(want, sizeof want, "%s: images of 2x3, but the model's input "
             "has 784 values", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 784, 10, 1, p, want);

    /* Labels outside the classes: too large (sample 3 of the training set),
     * and negative. */
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    snprintf(want, sizeof want, "%s: label 9 of sample 3 is outside 0..4", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 5, 0, p, want);
    snprintf(want, sizeof want, "%s: label 3 of sample 1 is outside 0..0", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 1, 0, p, want);

    const char *edir = temp_dir();
    const double neg[3] = {1, 2, -1};
    idx_put(edir, "neg-images", U8, 3, tr_dims, tr_img, 18);
    idx_put(edir, "neg-labels", I16, 1, tr_n, neg, 3);
    snprintf(p, sizeof p, "%s/neg-images", edir);
    snprintf(q, sizeof q, "%s/neg-labels", edir);
    s = mnist_source(p);
    snprintf(want, sizeof want, "%s: label -1 of sample 3 is outside 0..9", q);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);

    /* As many labels as images, both files named. */
    idx_put(edir, "cnt-images", U8, 3, tr_dims, tr_img, 18);
    idx_put(edir, "cnt-labels", U8, 1, te_n, te_lab, 2);
    snprintf(p, sizeof p, "%s/cnt-images", edir);
    snprintf(q, sizeof q, "%s/cnt-labels", edir);
    s = mnist_source(p);
    snprintf(want, sizeof want, "%s: 2 labels, but %s holds 3 images", q, p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 6, 1, 0, q, want);

    /* Class labels must be integers of one dimension. */
    const uint32_t n32[2] = {3, 2};
    idx_put(edir, "flt-images", U8, 3, tr_dims, tr_img, 18);
    idx_put(edir, "flt-labels", F32, 1, tr_n, tr_lab, 3);
    idx_put(edir, "two-images", U8, 3, tr_dims, tr_img, 18);
    idx_put(edir, "two-labels", U8, 2, n32, tr_img, 6);
    snprintf(p, sizeof p, "%s/flt-images", edir);
    snprintf(q, sizeof q, "%s/flt-labels", edir);
    s = mnist_source(p);
    snprintf(want, sizeof want, "%s: labels of type float32, but class "
             "labels must be integers", q);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);
    snprintf(p, sizeof p, "%s/two-images", edir);
    snprintf(q, sizeof q, "%s/two-labels", edir);
    snprintf(want, sizeof want, "%s: labels of shape 3x2, expected one label "
             "a sample", q);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);

    /* Headers and sizes: each file below is the images of a set whose
     * labels are fine. */
    const uint32_t z3[3] = {3, 0, 3}, big[4] = {0xFFFFFFFFu, 0xFFFFFFFFu,
                                               0xFFFFFFFFu, 0xFFFFFFFFu};
    size_t len;
    unsigned char *good = idx_make(U8, 3, tr_dims, tr_img, 18, &len);
    unsigned char *bad = malloc(len + 8);
    if (!bad)
        abort();
    struct {
        const char *name;
        size_t len;        /* of the good file; 0: build from the fields */
        int patch, value;  /* byte patch set to value, when patch >= 0 */
        const char *msg;   /* %s: the path */
    } hc[] = {
        {"trunc", 30, -1, 0, "%s: expected 34 bytes (a header of 16 and "
                             "3x2x3 unsigned byte values), found 30"},
        {"long", 35, -1, 0, "%s: expected 34 bytes (a header of 16 and "
                            "3x2x3 unsigned byte values), found 35"},
        {"empty", 0, -1, 0, "%s: 0 bytes, shorter than an IDX header"},
        {"three", 3, -1, 0, "%s: 3 bytes, shorter than an IDX header"},
        {"head", 10, -1, 0, "%s: 10 bytes, shorter than its 16-byte IDX "
                            "header"},
        {"magic", 34, 0, 1, "%s: not an IDX file (magic 01 00 08 03, "
                            "expected 00 00 TYPE NDIMS)"},
        {"magic2", 34, 1, 8, "%s: not an IDX file (magic 00 08 08 03, "
                             "expected 00 00 TYPE NDIMS)"},
        {"gzip", 34, -2, 0, "%s: compressed; gunzip it first"},
        {"type", 34, 2, 0x0A, "%s: unknown IDX data type 0x0a"},
        {"ndims0", 34, 3, 0, "%s: IDX file of 0 dimensions (1 to 4 are "
                             "read)"},
        {"ndims5", 34, 3, 5, "%s: IDX file of 5 dimensions (1 to 4 are "
                             "read)"},
        {"wide", 34, 2, F32, "%s: expected 88 bytes (a header of 16 and "
                             "3x2x3 float32 values), found 34"},
    };
    for (size_t c = 0; c < sizeof hc / sizeof hc[0]; c++) {
        size_t n = hc[c].len;
        memcpy(bad, good, len);
        if (n > len)
            bad[len] = 7;
        if (hc[c].patch >= 0)
            bad[hc[c].patch] = (unsigned char)hc[c].value;
        if (hc[c].patch == -2) {
            bad[0] = 0x1f;
            bad[1] = 0x8b;
        }
        char name[64];
        snprintf(name, sizeof name, "%s-images", hc[c].name);
        dir_file(edir, name, bad, n);
        snprintf(name, sizeof name, "%s-labels", hc[c].name);
        idx_put(edir, name, U8, 1, tr_n, tr_lab, 3);
        snprintf(p, sizeof p, "%s/%s-images", edir, hc[c].name);
        s = mnist_source(p);
        snprintf(want, sizeof want, hc[c].msg, p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
    }
    free(good);
    free(bad);
    {   /* a zero size; sizes whose product overflows */
        idx_put(edir, "zero-images", U8, 3, z3, NULL, 0);
        idx_put(edir, "zero-labels", U8, 1, tr_n, tr_lab, 3);
        snprintf(p, sizeof p, "%s/zero-images", edir);
        s = mnist_source(p);
        snprintf(want, sizeof want, "%s: IDX size 2 of 3 is 0", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
        idx_put(edir, "huge-images", F64, 4, big, NULL, 0);
        idx_put(edir, "huge-labels", U8, 1, tr_n, tr_lab, 3);
        snprintf(p, sizeof p, "%s/huge-images", edir);
        s = mnist_source(p);
        snprintf(want, sizeof want, "%s: IDX sizes 4294967295x4294967295x"
                 "4294967295x4294967295 are too large", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
        const uint32_t mid[2] = {0xFFFFFFFFu, 0x10000000u}; /* 2^60 bytes */
        idx_put(edir, "mid-images", F64, 2, mid, NULL, 0);
        idx_put(edir, "mid-labels", U8, 1, tr_n, tr_lab, 3);
        snprintf(p, sizeof p, "%s/mid-images", edir);
        s = mnist_source(p);
        if (sizeof(size_t) >= 8)
            snprintf(want, sizeof want, "%s: expected %zu bytes (a header of "
                     "12 and 4294967295x268435456 float64 values), found "
                     "12", p, (size_t)12 + (size_t)0xFFFFFFFFu * 0x10000000u *
                     8);
        else
            snprintf(want, sizeof want, "%s: IDX sizes 4294967295x268435456 "
                     "are too large", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 0x10000000, 10, 0,
                           p, want);
    }
    {   /* a bad labels file is named too */
        idx_put(edir, "lt-images", U8, 3, tr_dims, tr_img, 18);
        idx_put(edir, "lt-labels", U8, 1, tr_n, tr_lab, 2);
        snprintf(p, sizeof p, "%s/lt-images", edir);
        snprintf(q, sizeof q, "%s/lt-labels", edir);
        s = mnist_source(p);
        snprintf(want, sizeof want, "%s: expected 11 bytes (a header of 8 "
                 "and 3 unsigned byte values), found 10", q);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);
    }

    /* Values that are not finite, or too large for a float: features and
     * targets, naming the sample and the value (1-based). */
    {
        const double fx[6] = {1, 2, 3, 4, NAN, 6};
        const double fy[4] = {1, 2, 3, -INFINITY};
        const double dx[6] = {1, 2, 3, 1e300, 5, 6};
        const double ok2[4] = {1, 2, 3, 4}, ok6[6] = {1, 2, 3, 4, 5, 6};
        const uint32_t x2[3] = {2, 1, 3}, y2[2] = {2, 2};
        idx_put(edir, "nan-images", F32, 3, x2, fx, 6);
        idx_put(edir, "nan-labels", F32, 2, y2, ok2, 4);
        idx_put(edir, "short-images", I16, 3, x2, ok2, 4); /* too short */
        idx_put(edir, "short-labels", F64, 2, y2, ok2, 4);
        idx_put(edir, "inf-images", I16, 3, x2, ok6, 6);
        idx_put(edir, "inf-labels", F64, 2, y2, fy, 4);
        idx_put(edir, "dbl-images", F64, 3, x2, dx, 6);
        idx_put(edir, "dbl-labels", F32, 2, y2, ok2, 4);
        snprintf(p, sizeof p, "%s/nan-images", edir);
        s = mnist_source(p);
        snprintf(want, sizeof want, "%s: sample 2, value 2 is nan", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 3, 2, 0, p, want);
        snprintf(p, sizeof p, "%s/short-images", edir);
        snprintf(want, sizeof want, "%s: expected 28 bytes (a header of 16 "
                 "and 2x1x3 int16 values), found 24", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 3, 2, 0, p, want);
        snprintf(p, sizeof p, "%s/inf-images", edir);
        snprintf(q, sizeof q, "%s/inf-labels", edir);
        snprintf(want, sizeof want, "%s: sample 2, value 2 is -inf", q);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 3, 2, 0, q, want);
        snprintf(p, sizeof p, "%s/dbl-images", edir);
        snprintf(want, sizeof want, "%s: sample 2, value 1: 1e+300 does not "
                 "fit a float", p);
        expect_mnist_error(__LINE__, &s, NRT_TARGET_VALUE, 3, 2, 0, p, want);
    }

    /* Compressed files. */
    s = mnist_source("data/mnist/train-images-idx3-ubyte.gz");
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 784, 10, 0,
                       s.path, "data/mnist/train-images-idx3-ubyte.gz: "
                       "compressed; gunzip it first");
    const char *gzdir = temp_dir();
    dir_file(gzdir, "train-images-idx3-ubyte.gz", "\x1f\x8b", 2);
    dir_file(gzdir, "train-labels-idx1-ubyte.gz", "\x1f\x8b", 2);
    dir_file(gzdir, "t10k-images.idx3-ubyte.gz", "\x1f\x8b", 2);
    s = mnist_source(gzdir);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", gzdir);
    snprintf(want, sizeof want, "%s: compressed; gunzip it first", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
    snprintf(p, sizeof p, "%s/t10k-images.idx3-ubyte.gz", gzdir);
    snprintf(want, sizeof want, "%s: compressed; gunzip it first", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 1, p, want);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", gzdir);
    s.path = p; /* the file named without its .gz */
    snprintf(want, sizeof want, "%s.gz: compressed; gunzip it first", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);
    idx_put(gzdir, "train-images-idx3-ubyte", U8, 3, tr_dims, tr_img, 18);
    snprintf(q, sizeof q, "%s/train-labels-idx1-ubyte.gz", gzdir);
    snprintf(want, sizeof want, "%s: compressed; gunzip it first", q);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);
    s.path = gzdir;
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);

    /* Missing files. */
    const char *none = temp_dir();
    s = mnist_source(none);
    snprintf(want, sizeof want, "%s: no train-images-idx3-ubyte (or "
             "train-images.idx3-ubyte) file", none);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, none, want);
    idx_put(none, "t10k-images.idx3-ubyte", U8, 3, te_dims, te_img, 12);
    snprintf(want, sizeof want, "%s: no t10k-labels-idx1-ubyte (or "
             "t10k-labels.idx1-ubyte) file", none);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 1, none, want);
    snprintf(p, sizeof p, "%s/t10k-images.idx3-ubyte", none);
    snprintf(q, sizeof q, "%s/t10k-labels.idx1-ubyte", none);
    s.path = p;
    snprintf(want, sizeof want, "%s: cannot open: %s (the labels of %s)", q,
             strerror(ENOENT), p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, q, want);
    snprintf(p, sizeof p, "%s/no-such-images", none);
    snprintf(want, sizeof want, "%s: cannot open: %s", p, strerror(ENOENT));
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);

    /* A file whose name holds no "images". */
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    s.path = p;
    snprintf(want, sizeof want, "%s: cannot tell the labels file: it is this "
             "path with its last \"images\" replaced by \"labels\" (and "
             "\"idx3\" by \"idx1\"), and the path has no \"images\"", p);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 10, 0, p, want);

    /* Only class labels in a directory; the arguments checked first. */
    s = mnist_source(dir);
    snprintf(want, sizeof want, "%s: 0 classes (need at least 1)", dir);
    expect_mnist_error(__LINE__, &s, NRT_TARGET_CLASS, 6, 0, 0, dir, want);
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
    test_mnist();
    test_split();
    test_stats();
    test_boston();
    cleanup();
    return check_summary("test_data");
}
