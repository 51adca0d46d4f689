/*
 * tfevents.c — TensorBoard's event files: a writer of scalar summaries, so
 * that `tensorboard --logdir DIR` plots a run's losses and accuracies.
 *
 * An event file is a TFRecord file: a sequence of records, each
 *
 *     uint64  length of the data, little-endian
 *     uint32  masked CRC-32C of those 8 length bytes, little-endian
 *     byte    data[length]
 *     uint32  masked CRC-32C of the data, little-endian
 *
 * where the CRC is CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and
 * its mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8 (TensorFlow masks
 * every CRC it stores, since CRCs of data holding CRCs are weak).  Each
 * record's data is one serialized tensorflow.Event protocol
 * buffer (event.proto, summary.proto), written here by hand, only the fields
 * we use, in field-number order:
 *
 *     Event          1 wall_time     double  (wire type 1, fixed 64)
 *                    2 step          int64   (wire type 0, varint)
 *                    3 file_version  string  (wire type 2, length-delimited)
 *                    5 summary       Summary (wire type 2)
 *     Summary        1 value         repeated Summary.Value (wire type 2)
 *     Summary.Value  1 tag           string  (wire type 2)
 *                    2 simple_value  float   (wire type 5, fixed 32)
 *
 * The first record of a file is the event {wall_time, file_version:
 * "brain.Event:2"}; every scalar is then one event holding a one-value
 * summary.  As protobuf's own serializers do, a step of 0 is left out (it is
 * the default), and a negative step is the 10-byte varint of its two's
 * complement, as int64 (not sint64) fields are encoded.
 *
 * The one convention a reader must know: TensorBoard finds event files by
 * name (any file of the directory whose name holds "tfevents"), reads them
 * in name order, each from start to end, and stops reading a file at the
 * first bad CRC or short record without a word.  So a file is
 * events.out.tfevents.SECONDS.HOST.PID.N, a writer never reuses a name
 * (O_EXCL, N counting up) and only ever appends whole records.  The
 * file-version record matters too: from version 2 on, TensorBoard no longer
 * takes a step lower than one before it for a restart after a crash (and
 * drops the later steps of that tag), so steps may go back or be negative.
 * Values are float32 on the wire (simple_value): a double passed in is
 * rounded to float, out-of-range ones to infinity.
 *
 * Records are assembled in a buffer owned by the writer, one after the
 * other; nothing reaches the disk before nrt_tb_flush or nrt_tb_close, or
 * before the buffer holds TB_FLUSH_AT bytes, and then the buffer goes out
 * by nrt_append_whole: a write cut short (a full disk, a file size limit)
 * is taken back, so the file never ends in half a record, and the error
 * names the file.  nrt_tb_open flushes the file-version record at once, so
 * that a full disk shows at open rather than at the first flush.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "netrt.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* How many names events.out.tfevents.S.H.P.N an open tries (N = 0, 1, ...)
 * before giving up: only a directory full of our own same-second files
 * could need more than a few. */
#define TB_MAX_TRIES 10000
/* The longest host name put in a file name. */
#define TB_HOST_MAX 255
/* Upper bound on the bytes of a record that are not the tag: the framing
 * (16), wall_time (9), step (11), and the summary, value and tag keys and
 * lengths and simple_value (3 x 11 + 5), rounded up. */
#define TB_RECORD_OVERHEAD 80
/* Buffered records are written out when they reach this many bytes. */
#define TB_FLUSH_AT 65536

struct nrt_tb {
    int fd;
    char *path; /* the event file, for error messages */
    unsigned char *buf; /* whole records not yet written, then the one
                           being assembled */
    size_t used, cap;   /* bytes of whole records in buf; its size */
};

/* ------------------------------------------------------------------ CRC */

/* CRC-32C of each byte value, the reflected table for polynomial
 * 0x82F63B78: t[i] is i shifted right through 8 rounds of
 * c = (c >> 1) ^ (c & 1 ? 0x82F63B78 : 0).  Generated once by that loop;
 * tests/unit/test_tfevents.c checks the known CRC-32C vectors. */
static const uint32_t crc32c_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu,
    0x26a1e7e8u, 0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu,
    0x4d43cfd0u, 0xbf284cd3u, 0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu,
    0xf165b798u, 0x030e349bu, 0xd7c45070u, 0x25afd373u, 0x36ff2087u, 0xc494a384u,
    0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u, 0x5d1d08bfu, 0xaf768bbcu,
    0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u, 0x33ed7d2au,
    0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau,
    0x30e349b1u, 0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu,
    0x1642ae59u, 0xe4292d5au, 0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au,
    0x7da08661u, 0x8fcb0562u, 0x9c9bf696u, 0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu,
    0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u, 0x67dafa54u, 0x95b17957u,
    0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu, 0xfe53516fu,
    0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu,
    0x3ac7f2ebu, 0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u,
    0x61c69362u, 0x93ad1061u, 0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu,
    0x4767748au, 0xb50cf789u, 0xeb1fcbadu, 0x197448aeu, 0x0a24bb5au, 0xf84f3859u,
    0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u, 0x7198540du, 0x83f3d70eu,
    0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u, 0xa55230e6u,
    0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu,
    0x456cac67u, 0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u,
    0xe9141340u, 0x1b7f9043u, 0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu,
    0x92a8fc17u, 0x60c37f14u, 0x73938ce0u, 0x81f80fe3u, 0x55326b08u, 0xa759e80bu,
    0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu, 0xf94ad42fu, 0x0b21572cu,
    0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u, 0x502036a5u,
    0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u,
    0x0e330a81u, 0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du,
    0x758fe5d6u, 0x87e466d5u, 0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u,
    0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u, 0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu,
    0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u, 0x0417b1dbu, 0xf67c32d8u,
    0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu, 0x5a048dffu,
    0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u,
    0x590ab964u, 0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u,
    0x7fab5e8cu, 0x8dc0dd8fu, 0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu,
    0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u, 0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u,
    0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u, 0x4f48173du, 0xbd23943eu,
    0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au, 0xc69f7b69u,
    0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

uint32_t nrt_crc32c(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = crc32c_table[(c ^ s[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t nrt_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------------- encoding */

/* Writers of little-endian integers and protobuf pieces into a buffer the
 * caller has sized; each returns the position after what it wrote. */

static unsigned char *put_le(unsigned char *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *b++ = (unsigned char)(v >> (8 * i));
    return b;
}

static unsigned char *put_varint(unsigned char *b, uint64_t v)
{
    while (v >= 0x80) {
        *b++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *b++ = (unsigned char)v;
    return b;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A field's key: its number and wire type (0 varint, 1 fixed64, 2
 * length-delimited, 5 fixed32).  Every field here is below 16, so the key
 * is one byte. */
static unsigned char *put_key(unsigned char *b, unsigned field, unsigned wire)
{
    *b++ = (unsigned char)(field << 3 | wire);
    return b;
}

static unsigned char *put_double(unsigned char *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return put_le(b, u, 8);
}

static unsigned char *put_float(unsigned char *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return put_le(b, u, 4);
}

/* Now, as seconds since the epoch with the clock's sub-second part, the
 * way TensorFlow stamps events. */
static double wall_time(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (double)time(NULL);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A double as float32, with the rounding IEEE conversion does but without
 * relying on it for values past FLT_MAX (a C conversion out of range is
 * undefined): from FLT_MAX plus half its ulp (2^103) on, infinity. */
static float to_float(double v)
{
    const double lim = (double)FLT_MAX + 0x1p103;
    if (v >= lim)
        return HUGE_VALF;
    if (v <= -lim)
        return -HUGE_VALF;
    return (float)v; /* NaN stays NaN */
}

/* Makes room for a record of up to need bytes in tb->buf after the
 * whole records there. */
static int reserve(nrt_tb *tb, size_t need, nrt_error *err)
{
    if (need > SIZE_MAX - tb->used)
        return nrt_errorf(err, "%s: out of memory", tb->path);
    need += tb->used;
    if (need <= tb->cap)
        return 0;
    size_t cap = tb->cap ? tb->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    unsigned char *p = realloc(tb->buf, cap);
    if (!p)
        return nrt_errorf(err, "%s: out of memory", tb->path);
    tb->buf = p;
    tb->cap = cap;
    return 0;
}

/* Where the next record's event data goes: after the whole records and
 * the 12 bytes of its length and their CRC. */
static unsigned char *record_data(nrt_tb *tb)
{
    return tb->buf + tb->used + 12;
}

/* Frames the event data at record_data(tb) .. + n (reserve left 4 bytes
 * free behind) as a record, which joins the whole ones. */
static int put_record(nrt_tb *tb, size_t n, nrt_error *err)
{
    unsigned char *b = tb->buf + tb->used;
    put_le(b, n, 8);
    put_le(b + 8, nrt_crc32c_mask(nrt_crc32c(b, 8)), 4);
    put_le(b + 12 + n, nrt_crc32c_mask(nrt_crc32c(b + 12, n)), 4);
    tb->used += n + 16;
    return tb->used >= TB_FLUSH_AT ? nrt_tb_flush(tb, err) : 0;
}

int nrt_append_whole(int fd, const void *p, size_t n, const char *path, nrt_error *err)
{
    /* where the file ends now, to cut it back to (-1: not a file) */
    off_t end = lseek(fd, 0, SEEK_END);
    const char *s = p;
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, s + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            /* the partial record taken back where the file lets it be */
            const int left = done && (end < 0 || ftruncate(fd, end) != 0);
            return nrt_errorf(err, "%s: cannot write: %s%s", path, strerror(e),
                              left ? " (a partial record is left at its end)" : "");
        }
        done += (size_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------ the file */

/* mkdir of p, a prefix of dir or dir itself (whole), where a directory
 * already there is success.  mkdir says EEXIST for that, but also for a
 * regular file, and some systems put EACCES or EROFS first for an existing
 * directory they would not let us create; so a failure is judged by what
 * is there.  Messages begin with dir, the name the user gave. */
static int make_dir(const char *p, const char *dir, int whole, nrt_error *err)
{
    if (mkdir(p, 0777) == 0)
        return 0;
    int e = errno;
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    if (e == EEXIST)
        return whole ? nrt_errorf(err, "%s: not a directory", dir)
                     : nrt_errorf(err, "%s: %s is not a directory", dir, p);
    return whole ? nrt_errorf(err, "%s: cannot create directory: %s", dir,
                              strerror(e))
                 : nrt_errorf(err, "%s: cannot create directory %s: %s", dir,
                              p, strerror(e));
}

/* mkdir -p: creates dir and each missing parent, one path prefix ending
 * before a '/' at a time (runs of '/' count as one). */
int nrt_make_dirs(const char *dir, nrt_error *err)
{
    char *p = strdup(dir);
    if (!p)
        return nrt_errorf(err, "%s: out of memory", dir);
    int rc = 0;
    for (char *s = p + 1; *s && rc == 0; s++) {
        if (*s != '/' || s[-1] == '/')
            continue;
        *s = '\0';
        /* "a/b/" ends in its last prefix: that one is the whole dir */
        rc = make_dir(p, dir, strspn(s + 1, "/") == strlen(s + 1), err);
        *s = '/';
    }
    if (rc == 0)
        rc = make_dir(p, dir, 1, err);
    free(p);
    return rc;
}

/* This machine's name for file names: gethostname's, with any '/' (which
 * no host name has, but a file name cannot) as '_'; "localhost" if there
 * is none. */
static void host_name(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || !buf[0])
        snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0'; /* gethostname need not end a truncated name */
    for (char *s = buf; *s; s++)
        if (*s == '/')
            *s = '_';
}

/* Creates a new event file in dir, trying N = 0, 1, ... until a name is
 * free; sets tb->fd and tb->path. */
static int create_file(nrt_tb *tb, const char *dir, nrt_error *err)
{
    char host[TB_HOST_MAX + 1];
    host_name(host, sizeof host);
    long long secs = (long long)wall_time(); /* the events' clock (time() may trail it) */
    long pid = (long)getpid();
    size_t dlen = strlen(dir);
    const char *sep = dlen && dir[dlen - 1] == '/' ? "" : "/";
    const char *fmt = "%s%sevents.out.tfevents.%lld.%s.%ld.%d";
    int len = snprintf(NULL, 0, fmt, dir, sep, secs, host, pid, TB_MAX_TRIES);
    if (len < 0)
        return nrt_errorf(err, "%s: cannot make an event file name", dir);
    char *path = malloc((size_t)len + 1);
    if (!path)
        return nrt_errorf(err, "%s: out of memory", dir);
    for (int n = 0; n < TB_MAX_TRIES; n++) {
        snprintf(path, (size_t)len + 1, fmt, dir, sep, secs, host, pid, n);
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0) {
            nrt_errorf(err, "%s: %s", path, strerror(errno));
            free(path);
            return -1;
        }
        tb->fd = fd;
        tb->path = path;
        return 0;
    }
    nrt_errorf(err, "%s: %d event files of this second and process exist "
               "already", dir, TB_MAX_TRIES);
    free(path);
    return -1;
}

int nrt_tb_open(const char *dir, nrt_tb **out, nrt_error *err)
{
    if (!out)
        return nrt_errorf(err, "tensorboard: nowhere to put the writer");
    *out = NULL;
    if (!dir || !*dir)
        return nrt_errorf(err, "tensorboard: no log directory");
    if (nrt_make_dirs(dir, err) != 0)
        return -1;
    nrt_tb *tb = calloc(1, sizeof *tb);
    if (!tb)
        return nrt_errorf(err, "%s: out of memory", dir);
    if (create_file(tb, dir, err) != 0) {
        free(tb);
        return -1;
    }

    static const char version[] = "brain.Event:2";
    size_t vlen = sizeof version - 1;
    if (reserve(tb, 16 + 9 + 2 + vlen, err) != 0)
        goto fail;
    unsigned char *b = record_data(tb);
    b = put_key(b, 1, 1);
    b = put_double(b, wall_time());
    b = put_key(b, 3, 2);
    b = put_varint(b, vlen);
    memcpy(b, version, vlen);
    b += vlen;
    if (put_record(tb, (size_t)(b - record_data(tb)), err) != 0 ||
        nrt_tb_flush(tb, err) != 0)
        goto fail;
    *out = tb;
    return 0;

fail:
    /* The error is already in err; what is left is an empty or partial
     * file no reader wants. */
    close(tb->fd);
    unlink(tb->path);
    free(tb->path);
    free(tb->buf);
    free(tb);
    return -1;
}

int nrt_tb_scalar(nrt_tb *tb, const char *tag, int64_t step, double value,
                  nrt_error *err)
{
    if (!tb)
        return nrt_errorf(err, "tensorboard: no writer");
    if (!tag)
        return nrt_errorf(err, "%s: scalar without a tag", tb->path);
    /* Event is a proto3 message, and proto3 parsers (Python's included,
     * which TensorBoard uses) refuse a string field that is not UTF-8,
     * dropping the whole event */
    if (!nrt_utf8_valid(tag))
        return nrt_errorf(err, "%s: tag is not valid UTF-8", tb->path);
    size_t tlen = strlen(tag);
    if (tlen > SIZE_MAX - TB_RECORD_OVERHEAD)
        return nrt_errorf(err, "%s: tag is too long", tb->path);
    if (reserve(tb, tlen + TB_RECORD_OVERHEAD, err) != 0)
        return -1;

    /* Inside out: Value {tag, simple_value} in Summary {value} in Event
     * {wall_time, step, summary}. */
    size_t vlen = 1 + varint_len(tlen) + tlen + 1 + 4;
    size_t slen = 1 + varint_len(vlen) + vlen;
    unsigned char *start = record_data(tb), *b = start;
    b = put_key(b, 1, 1);
    b = put_double(b, wall_time());
    if (step != 0) {
        b = put_key(b, 2, 0);
        b = put_varint(b, (uint64_t)step); /* two's complement, 10 bytes if < 0 */
    }
    b = put_key(b, 5, 2);
    b = put_varint(b, slen);
    b = put_key(b, 1, 2);
    b = put_varint(b, vlen);
    b = put_key(b, 1, 2);
    b = put_varint(b, tlen);
    memcpy(b, tag, tlen);
    b += tlen;
    b = put_key(b, 2, 5);
    b = put_float(b, to_float(value));
    return put_record(tb, (size_t)(b - start), err);
}

int nrt_tb_flush(nrt_tb *tb, nrt_error *err)
{
    if (!tb)
        return nrt_errorf(err, "tensorboard: no writer");
    if (nrt_append_whole(tb->fd, tb->buf, tb->used, tb->path, err) != 0)
        return -1; /* the records stay: a later flush tries again */
    tb->used = 0;
    return 0;
}

int nrt_tb_close(nrt_tb *tb, nrt_error *err)
{
    if (!tb)
        return 0;
    /* a failed flush must still close */
    int rc = nrt_tb_flush(tb, err);
    if (close(tb->fd) != 0 && rc == 0)
        rc = nrt_errorf(err, "%s: %s", tb->path, strerror(errno));
    free(tb->path);
    free(tb->buf);
    free(tb);
    return rc;
}
