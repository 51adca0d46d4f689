/*
 * test_tfevents.c — unit test of runtime/tfevents.c, TensorBoard's event
 * files: CRC-32C against published vectors, and files written here read
 * back by a small TFRecord and protobuf reader of the test's own (both
 * CRCs of every record, the file-version record, each event's step, tag
 * and value, the exact bytes of one event), the file names, mkdir -p, and
 * the error messages.
 *
 * The reader here is written from the format (event.proto, TensorFlow's
 * record_writer), not from tfevents.c, and skips fields it does not know,
 * as a real reader would; tests/tfevents_check.py checks the same files
 * with TensorBoard's own reader.
 *
 * Everything is written under a temporary directory (under $TMPDIR or
 * /tmp) and removed at the end.  Prints one line to stderr per failed
 * check and a summary to stdout; exits 0 when every check passed, 1
 * otherwise.
 */
#include "netrt.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* ------------------------------------------------------------ temp files */

#define MAX_TEMPS 128

/* Everything created, removed at exit in reverse order, so a directory is
 * remembered before what is made in it. */
static char *temps[MAX_TEMPS];
static int ntemps;
static char *base; /* the test's own temporary directory */

static const char *tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static char *xstrdup(const char *s)
{
    char *p = malloc(strlen(s) + 1);
    if (!p)
        abort();
    return strcpy(p, s);
}

/* base/rel (or a/b when rel is a full path joined by the caller). */
static char *join(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    if (!p)
        abort();
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static void remember(const char *path)
{
    for (int i = 0; i < ntemps; i++)
        if (strcmp(temps[i], path) == 0)
            return;
    if (ntemps < MAX_TEMPS)
        temps[ntemps++] = xstrdup(path);
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

static void make_base(void)
{
    base = join(tmpdir(), "netc_tfevents_XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        exit(1);
    }
    remember(base);
}

/* The event files in dir, sorted by name (as TensorBoard reads them),
 * each remembered for removal; returns how many (at most max). */
static int event_files(const char *dir, char **out, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0)
            continue;
        char *p = join(dir, e->d_name);
        remember(p);
        if (n < max)
            out[n++] = p;
        else
            free(p);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(out[j - 1], out[j]) > 0; j--) {
            char *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static void free_all(char **p, int n)
{
    for (int i = 0; i < n; i++)
        free(p[i]);
}

/* The whole of a file; NULL if it cannot be read. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *b = malloc(cap);
    if (!b)
        abort();
    size_t r;
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap);
            if (!b)
                abort();
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return NULL;
    }
    *len = n;
    return b;
}

/* ------------------------------------------------------ the reader here */

static uint64_t get_le(const unsigned char *b, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* A varint at *p (< end); 0 on success, -1 if truncated or over 10 bytes.
 * *nbytes is its length. */
static int get_varint(const unsigned char **p, const unsigned char *end,
                      uint64_t *v, int *nbytes)
{
    uint64_t x = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        unsigned char c = *(*p)++;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            if (nbytes)
                *nbytes = i + 1;
            return 0;
        }
    }
    return -1;
}

/* One field of a message: number, wire type and either its value (varint,
 * fixed) or its bytes (length-delimited). */
struct field {
    unsigned num, wire;
    uint64_t v;
    int vbytes; /* a varint's length */
    const unsigned char *data;
    size_t len;
};

/* The next field of [*p, end); 1 if there was one, 0 at the end, -1 if
 * malformed. */
static int next_field(const unsigned char **p, const unsigned char *end,
                      struct field *f)
{
    if (*p == end)
        return 0;
    uint64_t key;
    if (get_varint(p, end, &key, NULL) != 0)
        return -1;
    f->num = (unsigned)(key >> 3);
    f->wire = (unsigned)(key & 7);
    f->vbytes = 0;
    switch (f->wire) {
    case 0:
        return get_varint(p, end, &f->v, &f->vbytes) == 0 ? 1 : -1;
    case 1:
        if (end - *p < 8)
            return -1;
        f->v = get_le(*p, 8);
        *p += 8;
        return 1;
    case 5:
        if (end - *p < 4)
            return -1;
        f->v = get_le(*p, 4);
        *p += 4;
        return 1;
    case 2:
        if (get_varint(p, end, &f->v, NULL) != 0 ||
            f->v > (uint64_t)(end - *p))
            return -1;
        f->data = *p;
        f->len = (size_t)f->v;
        *p += f->len;
        return 1;
    default:
        return -1;
    }
}

struct event {
    double wall_time;
    int64_t step;
    int step_bytes; /* the step varint's length; 0 if absent */
    int has_version, has_value, nvalues;
    char version[64];
    char tag[256];
    float value;
    const unsigned char *data; /* the record's data, in the file buffer */
    size_t len;
};

static void copy_str(char *dst, size_t cap, const unsigned char *s, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* Summary.Value {1 tag, 2 simple_value}. */
static int parse_value(const unsigned char *p, const unsigned char *end,
                       struct event *ev)
{
    struct field f;
    int r;
    while ((r = next_field(&p, end, &f)) == 1) {
        if (f.num == 1 && f.wire == 2) {
            copy_str(ev->tag, sizeof ev->tag, f.data, f.len);
        } else if (f.num == 2 && f.wire == 5) {
            uint32_t u = (uint32_t)f.v;
            memcpy(&ev->value, &u, 4);
            ev->has_value = 1;
        }
    }
    return r;
}

/* Event {1 wall_time, 2 step, 3 file_version, 5 summary {1 value}}. */
static int parse_event(const unsigned char *p, size_t n, struct event *ev)
{
    const unsigned char *end = p + n;
    memset(ev, 0, sizeof *ev);
    ev->data = p;
    ev->len = n;
    struct field f;
    int r;
    while ((r = next_field(&p, end, &f)) == 1) {
        if (f.num == 1 && f.wire == 1) {
            memcpy(&ev->wall_time, &f.v, 8);
        } else if (f.num == 2 && f.wire == 0) {
            ev->step = (int64_t)f.v;
            ev->step_bytes = f.vbytes;
        } else if (f.num == 3 && f.wire == 2) {
            copy_str(ev->version, sizeof ev->version, f.data, f.len);
            ev->has_version = 1;
        } else if (f.num == 5 && f.wire == 2) {
            const unsigned char *q = f.data, *qend = f.data + f.len;
            struct field g;
            int s;
            while ((s = next_field(&q, qend, &g)) == 1) {
                if (g.num == 1 && g.wire == 2) {
                    ev->nvalues++;
                    if (parse_value(g.data, g.data + g.len, ev) != 0)
                        return -1;
                }
            }
            if (s != 0)
                return -1;
        }
    }
    return r;
}

#define MAX_EVENTS 64

struct file {
    unsigned char *buf;
    size_t len;
    int n;
    struct event ev[MAX_EVENTS];
};

/* Reads a whole event file, checking the framing and both CRCs of every
 * record; 0 if all is well, else -1 with the reason in why. */
static int read_events(const char *path, struct file *fl, char *why,
                       size_t cap)
{
    fl->n = 0;
    fl->buf = slurp(path, &fl->len);
    if (!fl->buf) {
        snprintf(why, cap, "cannot read %s", path);
        return -1;
    }
    size_t at = 0;
    while (at < fl->len) {
        const unsigned char *b = fl->buf + at;
        if (fl->len - at < 12) {
            snprintf(why, cap, "record %d: truncated header", fl->n);
            return -1;
        }
        uint64_t n = get_le(b, 8);
        if ((uint32_t)get_le(b + 8, 4) != nrt_crc32c_mask(nrt_crc32c(b, 8))) {
            snprintf(why, cap, "record %d: bad length CRC", fl->n);
            return -1;
        }
        if (n > fl->len - at - 12 || fl->len - at - 12 - n < 4) {
            snprintf(why, cap, "record %d: truncated data", fl->n);
            return -1;
        }
        if ((uint32_t)get_le(b + 12 + n, 4) !=
            nrt_crc32c_mask(nrt_crc32c(b + 12, (size_t)n))) {
            snprintf(why, cap, "record %d: bad data CRC", fl->n);
            return -1;
        }
        if (fl->n == MAX_EVENTS) {
            snprintf(why, cap, "more than %d records", MAX_EVENTS);
            return -1;
        }
        if (parse_event(b + 12, (size_t)n, &fl->ev[fl->n]) != 0) {
            snprintf(why, cap, "record %d: bad Event protobuf", fl->n);
            return -1;
        }
        fl->n++;
        at += 16 + (size_t)n;
    }
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Same float, bit for bit (so NaN equals NaN). */
static int same_float(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

/* Reads the one event file expected in dir and checks it is well formed
 * and begins with the file-version record; 0 and fl filled if so. */
static int read_only_file(int line, const char *dir, struct file *fl,
                          char **name)
{
    char *files[4];
    int n = event_files(dir, files, 4);
    check(n == 1, line, "%s: %d event files, expected 1", dir, n);
    if (n != 1) {
        free_all(files, n);
        return -1;
    }
    char why[256];
    int rc = read_events(files[0], fl, why, sizeof why);
    check(rc == 0, line, "%s: %s", files[0], why);
    if (rc == 0) {
        check(fl->n >= 1 && fl->ev[0].has_version &&
                  strcmp(fl->ev[0].version, "brain.Event:2") == 0 &&
                  fl->ev[0].step_bytes == 0 && fl->ev[0].nvalues == 0,
              line, "%s: first record is not the file version", files[0]);
    }
    if (name)
        *name = files[0];
    else
        free(files[0]);
    if (rc != 0)
        free(fl->buf);
    return rc;
}

/* ------------------------------------------------------------------ CRC */

/* The CRC bit by bit, to check the table against. */
static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (c & 1 ? 0x82f63b78u : 0);
    }
    return ~c;
}

static void test_crc(void)
{
    unsigned char b[256];
    CHECK(nrt_crc32c("123456789", 9) == 0xe3069283u, "crc32c(123456789) = %08x",
          (unsigned)nrt_crc32c("123456789", 9));
    CHECK(nrt_crc32c("", 0) == 0, "crc32c of nothing is not 0");
    /* RFC 3720 (iSCSI) appendix B.4 */
    memset(b, 0, 32);
    CHECK(nrt_crc32c(b, 32) == 0x8a9136aau, "crc32c(32 zeros) = %08x",
          (unsigned)nrt_crc32c(b, 32));
    memset(b, 0xff, 32);
    CHECK(nrt_crc32c(b, 32) == 0x62a8ab43u, "crc32c(32 x ff) = %08x",
          (unsigned)nrt_crc32c(b, 32));
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)i;
    CHECK(nrt_crc32c(b, 32) == 0x46dd794eu, "crc32c(0..31) = %08x",
          (unsigned)nrt_crc32c(b, 32));
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)(31 - i);
    CHECK(nrt_crc32c(b, 32) == 0x113fdb5cu, "crc32c(31..0) = %08x",
          (unsigned)nrt_crc32c(b, 32));

    /* every table entry: each byte value alone, and a longer mixed run */
    int same = 1;
    for (int i = 0; i < 256; i++) {
        b[0] = (unsigned char)i;
        same &= nrt_crc32c(b, 1) == crc_bitwise(b, 1);
    }
    for (int i = 0; i < 256; i++)
        b[i] = (unsigned char)(i * 151 + 7);
    for (size_t n = 0; n <= 256; n += 17)
        same &= nrt_crc32c(b, n) == crc_bitwise(b, n);
    CHECK(same, "crc32c differs from the bitwise CRC");

    CHECK(nrt_crc32c_mask(0) == 0xa282ead8u, "mask(0) = %08x",
          (unsigned)nrt_crc32c_mask(0));
    CHECK(nrt_crc32c_mask(0x12345678u) ==
              (uint32_t)(((0x12345678u >> 15) | (0x12345678u << 17)) +
                         0xa282ead8u),
          "mask(12345678) = %08x", (unsigned)nrt_crc32c_mask(0x12345678u));
    /* the header CRC of an empty record, as TensorBoard's Python writer
     * (masked_crc32c) computes it */
    memset(b, 0, 8);
    CHECK(nrt_crc32c_mask(nrt_crc32c(b, 8)) == 0x07980329u,
          "masked crc of a zero length = %08x",
          (unsigned)nrt_crc32c_mask(nrt_crc32c(b, 8)));
}

/* --------------------------------------------------------------- writing */

struct scalar {
    const char *tag;
    int64_t step;
    double value;
    float want;
};

static void test_scalars(void)
{
    char *dir = join(base, "run1");
    remember(dir);
    nrt_error err = {""};
    nrt_tb *tb = NULL;
    double t0 = (double)(long long)now(); /* whole seconds, as in the name */
    int rc = nrt_tb_open(dir, &tb, &err);
    CHECK(rc == 0 && tb, "open %s: %s", dir, err.msg);
    if (rc != 0) {
        free(dir);
        return;
    }
    const struct scalar sc[] = {
        {"train/loss", 1, 0.5, 0.5f},
        {"train/loss", 2, 0.25, 0.25f},
        {"test/accuracy", 2, 0.875, 0.875f},
        {"train/loss", 0, 2.0, 2.0f},
        {"lr", 3, 1.0 / 3.0, (float)(1.0 / 3.0)},
        {"big", (int64_t)1 << 40, -1e-30, -1e-30f},
        {"max", INT64_MAX, 1e300, HUGE_VALF},
        {"min", INT64_MIN, -1e300, -HUGE_VALF},
        /* FLT_MAX plus half an ulp, a tie, rounds to even: infinity */
        {"neg", -1, (double)FLT_MAX + 0x1p103, HUGE_VALF},
        {"neg", -2, (double)FLT_MAX + 0x1p102, FLT_MAX},
        {"neg", -123456789, 3.4028235e38, 3.4028235e38f},
        {"nan", 5, NAN, NAN},
        {"tiny", 6, 1e-50, 0.0f},
        {"\xce\xbb/\xc3\xbc ber", 7, -0.0, -0.0f}, /* "λ/über" */
        {"", 8, 42.0, 42.0f},
    };
    int nsc = (int)(sizeof sc / sizeof sc[0]);
    for (int i = 0; i < nsc; i++) {
        rc = nrt_tb_scalar(tb, sc[i].tag, sc[i].step, sc[i].value, &err);
        CHECK(rc == 0, "scalar %d: %s", i, err.msg);
    }

    /* refused, and the file still good after */
    err.msg[0] = '\0';
    CHECK(nrt_tb_scalar(tb, NULL, 1, 1, &err) == -1 && strstr(err.msg, dir),
          "NULL tag: %s", err.msg);
    err.msg[0] = '\0';
    CHECK(nrt_tb_scalar(tb, "bad\xff", 1, 1, &err) == -1 &&
              strstr(err.msg, "UTF-8") && strstr(err.msg, dir),
          "invalid UTF-8 tag: %s", err.msg);
    CHECK(nrt_tb_scalar(tb, "\xc0\xaf", 1, 1, &err) == -1,
          "overlong UTF-8 tag accepted");

    /* flushed, the file holds every record already */
    rc = nrt_tb_flush(tb, &err);
    CHECK(rc == 0, "flush: %s", err.msg);
    struct file fl;
    char *name = NULL;
    if (read_only_file(__LINE__, dir, &fl, &name) == 0) {
        CHECK(fl.n == 1 + nsc, "after flush: %d records, expected %d", fl.n,
              1 + nsc);
        free(fl.buf);
    }
    rc = nrt_tb_close(tb, &err);
    CHECK(rc == 0, "close: %s", err.msg);
    double t1 = now();

    /* the name: events.out.tfevents.SECONDS.HOST.PID.0 */
    if (name) {
        const char *b = strrchr(name, '/') + 1;
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        char want[512];
        snprintf(want, sizeof want, ".%s.%ld.0", host, (long)getpid());
        long long secs = strtoll(b + 20, NULL, 10);
        CHECK(strncmp(b, "events.out.tfevents.", 20) == 0 &&
                  secs >= (long long)t0 && secs <= (long long)t1 &&
                  strlen(b) > strlen(want) &&
                  strcmp(b + strlen(b) - strlen(want), want) == 0,
              "file name %s, expected events.out.tfevents.SECONDS%s", b,
              want);
        free(name);
    }

    if (read_only_file(__LINE__, dir, &fl, NULL) != 0) {
        free(dir);
        return;
    }
    CHECK(fl.n == 1 + nsc, "%d records, expected %d", fl.n, 1 + nsc);
    for (int i = 0; i < fl.n; i++)
        CHECK(fl.ev[i].wall_time >= t0 && fl.ev[i].wall_time <= t1 + 1,
              "record %d: wall_time %f not in [%f, %f]", i,
              fl.ev[i].wall_time, t0, t1);
    for (int i = 0; i < nsc && i + 1 < fl.n; i++) {
        const struct event *e = &fl.ev[i + 1];
        CHECK(!e->has_version && e->nvalues == 1 && e->has_value,
              "scalar %d: not one simple_value", i);
        CHECK(e->step == sc[i].step, "scalar %d: step %lld, expected %lld",
              i, (long long)e->step, (long long)sc[i].step);
        CHECK(strcmp(e->tag, sc[i].tag) == 0, "scalar %d: tag '%s'", i,
              e->tag);
        CHECK(same_float(e->value, sc[i].want), "scalar %d: value %.9g, "
              "expected %.9g", i, (double)e->value, (double)sc[i].want);
        /* int64 varints: absent at 0, 10 bytes for every negative step */
        int want_bytes = sc[i].step == 0 ? 0 : sc[i].step < 0 ? 10 : -1;
        if (want_bytes >= 0)
            CHECK(e->step_bytes == want_bytes, "scalar %d: step in %d bytes, "
                  "expected %d", i, e->step_bytes, want_bytes);
    }
    CHECK(fl.ev[1 + 5].step_bytes == 6, "step 2^40 in %d bytes",
          fl.ev[1 + 5].step_bytes);
    CHECK(fl.ev[1 + 6].step_bytes == 9, "INT64_MAX in %d bytes",
          fl.ev[1 + 6].step_bytes);
    CHECK(fl.ev[1 + 5].wall_time <= fl.ev[1 + 6].wall_time,
          "wall_time goes back");

    /* one event byte for byte, all but the wall_time's 8 bytes:
     * Event {1: wall_time, 2: 1, 5: {1: {1: "train/loss", 2: 0.5f}}}, the
     * bytes protobuf's Python serializer gives for it */
    static const unsigned char want1[] = {
        0x09, 0, 0, 0, 0, 0, 0, 0, 0, /* wall_time, skipped */
        0x10, 0x01,                   /* step 1 */
        0x2a, 0x13,                   /* summary, 19 bytes */
        0x0a, 0x11,                   /* value, 17 bytes */
        0x0a, 0x0a, 't', 'r', 'a', 'i', 'n', '/', 'l', 'o', 's', 's',
        0x15, 0x00, 0x00, 0x00, 0x3f, /* simple_value 0.5f */
    };
    const struct event *e1 = &fl.ev[1];
    CHECK(e1->len == sizeof want1 && e1->data[0] == 0x09 &&
              memcmp(e1->data + 9, want1 + 9, sizeof want1 - 9) == 0,
          "the bytes of event 1 differ");
    /* the file-version event: {1: wall_time, 3: "brain.Event:2"} */
    const struct event *e0 = &fl.ev[0];
    CHECK(e0->len == 24 && e0->data[0] == 0x09 && e0->data[9] == 0x1a &&
              e0->data[10] == 13 &&
              memcmp(e0->data + 11, "brain.Event:2", 13) == 0,
          "the bytes of the file-version event differ");
    free(fl.buf);
    free(dir);
}

/* The directory and its parents are made, with any run of slashes. */
static void test_mkdir(void)
{
    char *a = join(base, "a"), *ab = join(a, "b"), *abc = join(ab, "c");
    remember(a);
    remember(ab);
    remember(abc);
    nrt_error err = {""};
    nrt_tb *tb = NULL;
    int rc = nrt_tb_open(abc, &tb, &err);
    CHECK(rc == 0, "open %s: %s", abc, err.msg);
    struct stat st;
    CHECK(stat(abc, &st) == 0 && S_ISDIR(st.st_mode), "%s not made", abc);
    CHECK(nrt_tb_close(tb, &err) == 0, "close: %s", err.msg);
    struct file fl;
    if (read_only_file(__LINE__, abc, &fl, NULL) == 0) {
        CHECK(fl.n == 1, "%s: %d records, expected 1", abc, fl.n);
        free(fl.buf);
    }

    /* existing parents, doubled and trailing slashes */
    char *odd = join(ab, "/d//e/");
    char *d = join(ab, "d"), *de = join(d, "e");
    remember(d);
    remember(de);
    rc = nrt_tb_open(odd, &tb, &err);
    CHECK(rc == 0, "open %s: %s", odd, err.msg);
    CHECK(stat(de, &st) == 0 && S_ISDIR(st.st_mode), "%s not made", de);
    CHECK(nrt_tb_close(tb, &err) == 0, "close: %s", err.msg);
    if (read_only_file(__LINE__, de, &fl, NULL) == 0)
        free(fl.buf);
    free(odd);
    free(d);
    free(de);
    free(a);
    free(ab);
    free(abc);
}

/* Two writers of one directory in the same second and process: two files,
 * .0 and .1, each whole. */
static void test_two(void)
{
    char *dir = join(base, "two");
    remember(dir);
    nrt_error err = {""};
    nrt_tb *t1 = NULL, *t2 = NULL;
    int r1 = nrt_tb_open(dir, &t1, &err);
    CHECK(r1 == 0, "open 1: %s", err.msg);
    int r2 = nrt_tb_open(dir, &t2, &err);
    CHECK(r2 == 0, "open 2: %s", err.msg);
    CHECK(nrt_tb_scalar(t2, "x", 2, 2, &err) == 0, "scalar 2: %s", err.msg);
    CHECK(nrt_tb_scalar(t1, "x", 1, 1, &err) == 0, "scalar 1: %s", err.msg);
    CHECK(nrt_tb_close(t1, &err) == 0, "close 1: %s", err.msg);
    CHECK(nrt_tb_close(t2, &err) == 0, "close 2: %s", err.msg);
    char *files[4];
    int n = event_files(dir, files, 4);
    CHECK(n == 2, "%d event files, expected 2", n);
    if (n == 2) {
        CHECK(strcmp(files[0], files[1]) != 0, "the same file twice");
        /* same second (the usual case): the names differ only in N */
        size_t l0 = strlen(files[0]), l1 = strlen(files[1]);
        if (l0 == l1 && strncmp(files[0], files[1], l0 - 1) == 0)
            CHECK(files[0][l0 - 1] == '0' && files[1][l1 - 1] == '1',
                  "same-second names %s and %s", files[0], files[1]);
        for (int i = 0; i < 2; i++) {
            struct file fl;
            char why[256];
            if (read_events(files[i], &fl, why, sizeof why) != 0) {
                CHECK(0, "%s: %s", files[i], why);
                free(fl.buf);
                continue;
            }
            CHECK(fl.n == 2 && fl.ev[0].has_version && fl.ev[1].has_value,
                  "%s: %d records", files[i], fl.n);
            free(fl.buf);
        }
    }
    free_all(files, n);
    free(dir);
}

/* Directories that cannot be: the messages name them. */
static void test_errors(void)
{
    nrt_error err = {""};
    nrt_tb *tb = (nrt_tb *)&err; /* to see that failure clears it */

    char *file = join(base, "plain");
    remember(file);
    FILE *f = fopen(file, "w");
    CHECK(f && fclose(f) == 0, "cannot make %s", file);

    char want[1024];
    /* under a regular file */
    char *under = join(file, "sub");
    CHECK(nrt_tb_open(under, &tb, &err) == -1 && tb == NULL,
          "open under a file succeeded");
    snprintf(want, sizeof want, "%s: %s is not a directory", under, file);
    CHECK(strcmp(err.msg, want) == 0, "message '%s', expected '%s'", err.msg,
          want);

    /* deeper under it */
    char *deep = join(under, "x/y");
    tb = (nrt_tb *)&err;
    CHECK(nrt_tb_open(deep, &tb, &err) == -1 && tb == NULL,
          "open deep under a file succeeded");
    snprintf(want, sizeof want, "%s: %s is not a directory", deep, file);
    CHECK(strcmp(err.msg, want) == 0, "message '%s', expected '%s'", err.msg,
          want);

    /* the dir itself a regular file */
    tb = (nrt_tb *)&err;
    CHECK(nrt_tb_open(file, &tb, &err) == -1 && tb == NULL,
          "open of a file as dir succeeded");
    snprintf(want, sizeof want, "%s: not a directory", file);
    CHECK(strcmp(err.msg, want) == 0, "message '%s', expected '%s'", err.msg,
          want);
    /* ... and as a parent, with a trailing slash */
    char *slash = join(file, "");
    CHECK(nrt_tb_open(slash, &tb, &err) == -1, "open of a file/ succeeded");
    snprintf(want, sizeof want, "%s: not a directory", slash);
    CHECK(strcmp(err.msg, want) == 0, "message '%s', expected '%s'", err.msg,
          want);

    /* a directory we may not write (root may write anywhere: skipped) */
    if (geteuid() != 0) {
        char *ro = join(base, "readonly");
        remember(ro);
        CHECK(mkdir(ro, 0555) == 0, "mkdir %s: %s", ro, strerror(errno));
        CHECK(nrt_tb_open(ro, &tb, &err) == -1 && strstr(err.msg, ro) &&
                  strstr(err.msg, strerror(EACCES)),
              "open of a read-only dir: '%s'", err.msg);
        char *files[2];
        int n = event_files(ro, files, 2);
        CHECK(n == 0, "%d files left in %s", n, ro);
        free_all(files, n);
        free(ro);
    }

    CHECK(nrt_tb_open(NULL, &tb, &err) == -1 && err.msg[0], "NULL dir");
    CHECK(nrt_tb_open("", &tb, &err) == -1 && err.msg[0], "empty dir");
    CHECK(nrt_tb_open(base, NULL, &err) == -1, "NULL out");
    CHECK(nrt_tb_close(NULL, &err) == 0, "close(NULL) is not 0");
    CHECK(nrt_tb_scalar(NULL, "x", 1, 1, &err) == -1, "scalar(NULL)");
    CHECK(nrt_tb_flush(NULL, &err) == -1, "flush(NULL)");
    /* a NULL err is allowed, as everywhere in the runtime */
    CHECK(nrt_tb_open(under, &tb, NULL) == -1, "NULL err");

    free(slash);
    free(deep);
    free(under);
    free(file);
}

/* A write that fails (the file size limit, EFBIG) is reported by flush
 * and again by close, naming the file. */
static void test_write_error(void)
{
    struct rlimit old, lim;
    if (getrlimit(RLIMIT_FSIZE, &old) != 0)
        return;
    char *dir = join(base, "full");
    remember(dir);
    nrt_error err = {""};
    nrt_tb *tb = NULL;
    int rc = nrt_tb_open(dir, &tb, &err);
    CHECK(rc == 0, "open %s: %s", dir, err.msg);
    if (rc != 0) {
        free(dir);
        return;
    }
    char *files[2];
    int n = event_files(dir, files, 2);
    struct stat before = {0}, after = {0};
    int sized = n == 1 && stat(files[0], &before) == 0;

    static char tag[20000];
    memset(tag, 'x', sizeof tag - 1);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 4096;
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < lim.rlim_cur)
        lim.rlim_cur = old.rlim_cur;
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        rc = nrt_tb_scalar(tb, tag, 1, 1, &err); /* past the size limit */
        if (rc == 0)
            rc = nrt_tb_flush(tb, &err);
        CHECK(rc == -1 && strstr(err.msg, dir) &&
                  strstr(err.msg, strerror(EFBIG)),
              "write past the size limit: '%s'", err.msg);
        /* what was written of the record is taken back */
        sized = sized && stat(files[0], &after) == 0;
        CHECK(sized && after.st_size == before.st_size,
              "a write past the size limit left %lld bytes, not %lld",
              (long long)after.st_size, (long long)before.st_size);
        err.msg[0] = '\0';
        CHECK(nrt_tb_close(tb, &err) == -1 && strstr(err.msg, dir),
              "close after a failed write: '%s'", err.msg);
        setrlimit(RLIMIT_FSIZE, &old);
    } else {
        nrt_tb_close(tb, &err);
    }
    signal(SIGXFSZ, old_handler);
    free_all(files, n);
    free(dir);
}

int main(void)
{
    make_base();
    test_crc();
    test_scalars();
    test_mkdir();
    test_two();
    test_errors();
    test_write_error();
    cleanup();
    free(base);
    return check_summary("test_tfevents");
}
