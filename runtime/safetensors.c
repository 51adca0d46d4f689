/*
 * safetensors.c — the runtime's weight files, in Hugging Face's safetensors
 * format, the one PyTorch users already load with safetensors.torch.
 *
 * A file is: 8 bytes, a little-endian uint64 N; N bytes of UTF-8 JSON, an
 * object mapping each tensor name to {"dtype", "shape", "data_offsets"} and
 * an optional "__metadata__" object of string values; then the data section,
 * every tensor little-endian, contiguous, in no particular order but covering
 * the section exactly, with offsets relative to the section's start.
 *
 * Writing is atomic (temporary file, fsync, rename) and deterministic: the
 * same tensors give the same bytes.  The temporary, PATH.tmp.PID.XXXXXX,
 * bears its writer's process id, so that a save can remove what saves of
 * the same file killed part way (kill -9, a crash) left, and only that.
 * Reading trusts nothing: the header goes through a small strict JSON
 * parser, every offset and size is checked, and a bad file gives a
 * one-line "not a safetensors file (...)" message naming what is wrong,
 * never a crash; one of another kind says what it seems to be (torch.save's,
 * with how to save safetensors instead, or text).  A model's weights must
 * moreover be finite numbers.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "netrt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest header we accept (the safetensors library's own limit). */
#define ST_MAX_HEADER 100000000ull
/* The deepest nesting of JSON arrays and objects we accept. */
#define ST_MAX_DEPTH 64
/* The most of a tensor name an error message shows. */
#define ST_SHOW_MAX 96

/* ------------------------------------------------------------- helpers */

static int host_little_endian(void)
{
    uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

int nrt_utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

/* A name as error messages show it: control bytes as \xNN, long names cut
 * (at a character boundary) and ended with "...". */
static const char *show(char *buf, size_t cap, const char *s)
{
    size_t w = 0, lim = cap < ST_SHOW_MAX ? cap : ST_SHOW_MAX;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (w + 8 > lim) {
            while (w > 0 && ((unsigned char)buf[w - 1] & 0xc0) == 0x80)
                w--;
            if (w > 0 && ((unsigned char)buf[w - 1] & 0xc0) == 0xc0)
                w--;
            memcpy(buf + w, "...", 3);
            w += 3;
            break;
        }
        if (*p < 0x20 || *p == 0x7f)
            w += (size_t)snprintf(buf + w, cap - w, "\\x%02x", *p);
        else
            buf[w++] = (char)*p;
    }
    buf[w] = '\0';
    return buf;
}

/* A growing byte string; oom is set once an allocation fails. */
struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_u64(struct sbuf *b, uint64_t v)
{
    char tmp[24];
    int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)k);
}

/* s as a JSON string: quotes, backslashes and control characters escaped,
 * the latter always as \u00XX; everything else (UTF-8 included) verbatim. */
static void sb_json_string(struct sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\' || c < 0x20) {
            char esc[8];
            int k;
            sb_put(b, run, (size_t)(p - run));
            if (c == '"' || c == '\\')
                k = snprintf(esc, sizeof esc, "\\%c", c);
            else
                k = snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, (size_t)k);
            run = p + 1;
        }
    }
    sb_put(b, run, strlen(run));
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice in names[0..n), or NULL; *oom is set
 * to 1 if memory ran out. */
static const char *first_duplicate(const char *const *names, size_t n,
                                   int *oom)
{
    *oom = 0;
    if (n < 2)
        return NULL;
    const char **v = malloc(n * sizeof *v);
    if (!v) {
        *oom = 1;
        return NULL;
    }
    memcpy(v, names, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_str_ptr);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(v[i - 1], v[i]) == 0)
            dup = v[i];
    free(v);
    return dup;
}

/* ------------------------------------------------------------- writing */

/* The element size of a dtype netc writes, and its name. */
static size_t dtype_size(int dtype)
{
    return dtype == NRT_I64 ? sizeof(int64_t) : sizeof(float);
}

static const char *dtype_name(int dtype)
{
    return dtype == NRT_I64 ? "I64" : "F32";
}

/* Reverses the bytes of each of count words of width bytes at p. */
static void swap_words(unsigned char *p, size_t count, size_t width)
{
    for (size_t i = 0; i < count; i++, p += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* count words of width bytes (4: F32, 8: I64), little-endian. */
static int write_words(FILE *fp, const void *x, uint64_t count, size_t width)
{
    if (count == 0)
        return 0;
    if (host_little_endian())
        return fwrite(x, width, (size_t)count, fp) == count ? 0 : -1;
    unsigned char tmp[8192];
    const unsigned char *src = x;
    while (count > 0) {
        size_t k = count < sizeof tmp / width ? (size_t)count : sizeof tmp / width;
        memcpy(tmp, src, k * width);
        swap_words(tmp, k, width);
        if (fwrite(tmp, width, k, fp) != k)
            return -1;
        src += k * width;
        count -= k;
    }
    return 0;
}

int nrt_safetensors_save(const char *path, const nrt_tensor *t, int n,
                         const char *const *meta, int nmeta, nrt_error *err)
{
    char nb[ST_SHOW_MAX + 8];
    if (!path || !*path)
        return nrt_errorf(err, "safetensors: no file name to save to");
    if (n < 0 || (n > 0 && !t) || nmeta < 0 || (nmeta > 0 && !meta))
        return nrt_errorf(err, "%s: bad tensor or metadata list", path);

    /* Check the tensors and size them. */
    uint64_t *bytes = malloc(((size_t)n + 1) * sizeof *bytes);
    const char **names = malloc(((size_t)n + (size_t)nmeta + 1) *
                                sizeof *names);
    if (!bytes || !names) {
        free(bytes);
        free(names);
        return nrt_errorf(err, "%s: out of memory", path);
    }
    int rc = -1;
    struct sbuf h = {0};
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const nrt_tensor *x = &t[i];
        if (!x->name) {
            nrt_errorf(err, "%s: tensor %d has no name", path, i);
            goto out;
        }
        show(nb, sizeof nb, x->name);
        if (!nrt_utf8_valid(x->name)) {
            nrt_errorf(err, "%s: tensor name '%s' is not valid UTF-8", path,
                       nb);
            goto out;
        }
        if (strcmp(x->name, "__metadata__") == 0) {
            nrt_errorf(err, "%s: '__metadata__' is reserved, not a tensor "
                       "name", path);
            goto out;
        }
        if (x->rank < 0 || x->rank > 4) {
            nrt_errorf(err, "%s: tensor '%s': rank %d is not in 0..4", path,
                       nb, x->rank);
            goto out;
        }
        if (x->dtype != NRT_F32 && x->dtype != NRT_I64) {
            nrt_errorf(err, "%s: tensor '%s': unknown dtype %d", path, nb, x->dtype);
            goto out;
        }
        uint64_t b = dtype_size(x->dtype);
        for (int d = 0; d < x->rank; d++) {
            if (x->dim[d] < 0) {
                nrt_errorf(err, "%s: tensor '%s': dimension %d is negative "
                           "(%lld)", path, nb, d, (long long)x->dim[d]);
                goto out;
            }
            uint64_t v = (uint64_t)x->dim[d];
            if (v != 0 && b > UINT64_MAX / v) {
                nrt_errorf(err, "%s: tensor '%s' is too large", path, nb);
                goto out;
            }
            b *= v;
        }
        if (b > SIZE_MAX || total > UINT64_MAX - b) {
            nrt_errorf(err, "%s: tensor '%s' is too large", path, nb);
            goto out;
        }
        if (b > 0 && !x->data) {
            nrt_errorf(err, "%s: tensor '%s' has no data", path, nb);
            goto out;
        }
        bytes[i] = b;
        total += b;
        names[i] = x->name;
    }
    int oom;
    const char *dup = first_duplicate(names, (size_t)n, &oom);
    if (oom) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    if (dup) {
        nrt_errorf(err, "%s: duplicate tensor name '%s'", path,
                   show(nb, sizeof nb, dup));
        goto out;
    }
    for (int i = 0; i < nmeta; i++) {
        const char *k = meta[2 * i], *v = meta[2 * i + 1];
        if (!k || !v) {
            nrt_errorf(err, "%s: metadata entry %d is NULL", path, i);
            goto out;
        }
        if (!nrt_utf8_valid(k) || !nrt_utf8_valid(v)) {
            nrt_errorf(err, "%s: metadata entry '%s' is not valid UTF-8",
                       path, show(nb, sizeof nb, k));
            goto out;
        }
        names[i] = k;
    }
    dup = first_duplicate(names, (size_t)nmeta, &oom);
    if (oom) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    if (dup) {
        nrt_errorf(err, "%s: duplicate metadata key '%s'", path,
                   show(nb, sizeof nb, dup));
        goto out;
    }

    /* The header: metadata first (as the safetensors library writes it),
     * then the tensors in the order given, padded with spaces so that the
     * data section starts at a multiple of 8. */
    sb_put(&h, "{", 1);
    if (nmeta > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i)
                sb_put(&h, ",", 1);
            sb_json_string(&h, meta[2 * i]);
            sb_put(&h, ":", 1);
            sb_json_string(&h, meta[2 * i + 1]);
        }
        sb_puts(&h, "}");
        if (n > 0)
            sb_put(&h, ",", 1);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (i)
            sb_put(&h, ",", 1);
        sb_json_string(&h, t[i].name);
        sb_puts(&h, ":{\"dtype\":\"");
        sb_puts(&h, dtype_name(t[i].dtype));
        sb_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < t[i].rank; d++) {
            if (d)
                sb_put(&h, ",", 1);
            sb_u64(&h, (uint64_t)t[i].dim[d]);
        }
        sb_puts(&h, "],\"data_offsets\":[");
        sb_u64(&h, off);
        sb_put(&h, ",", 1);
        sb_u64(&h, off + bytes[i]);
        sb_puts(&h, "]}");
        off += bytes[i];
    }
    sb_put(&h, "}", 1);
    while (!h.oom && h.n % 8 != 0)
        sb_put(&h, " ", 1);
    if (h.oom) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));

    /* Write it all to a temporary file beside path, then rename. */
    nrt_atomic w;
    if (nrt_atomic_open(&w, path, err))
        goto out;
    errno = 0;
    int bad = fwrite(len8, 1, 8, w.f) != 8 || fwrite(h.p, 1, h.n, w.f) != h.n;
    for (int i = 0; i < n && !bad; i++)
        bad = write_words(w.f, t[i].data, bytes[i] / dtype_size(t[i].dtype),
                          dtype_size(t[i].dtype));
    if (bad) {
        nrt_errorf(err, "%s: cannot write: %s", path, strerror(errno ? errno : EIO));
        nrt_atomic_abort(&w);
        goto out;
    }
    if (nrt_atomic_commit(&w, err))
        goto out;
    rc = 0;
out:
    free(h.p);
    free(bytes);
    free(names);
    return rc;
}

/* ------------------------------------------------------------- JSON */

/* A strict RFC 8259 parser into a tree of values.  Strings are decoded in
 * place in the (writable) text, which is never longer than its escapes; a
 * decoded string is NUL-terminated, and len says how long it really is
 * (a \u0000 escape may put a NUL inside). */

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    int type;
    size_t pos;           /* offset of the value in the text */
    struct jv *next;      /* next element or member of the parent */
    const char *key;      /* member name (in an object) */
    size_t keylen;
    const char *s;        /* J_STR: decoded; J_NUM: the raw text */
    size_t len;
    int is_uint;          /* J_NUM: a non-negative integer that fits... */
    uint64_t u;           /* ...in u */
    struct jv *child;     /* J_ARR, J_OBJ: first element or member */
    size_t count;         /* J_ARR, J_OBJ: how many */
};

struct jchunk {
    struct jchunk *prev;
    size_t used;
    struct jv v[512];
};

struct jp {
    char *s;
    size_t n, i;
    struct jchunk *chunks;
    const char *err;      /* first error: what */
    size_t errpos;        /* and where */
    int oom;
};

static int jfail(struct jp *p, size_t pos, const char *msg)
{
    if (!p->err) {
        p->err = msg;
        p->errpos = pos;
    }
    return -1;
}

static struct jv *jnew(struct jp *p, int type, size_t pos)
{
    struct jchunk *c = p->chunks;
    if (!c || c->used == sizeof c->v / sizeof c->v[0]) {
        c = malloc(sizeof *c);
        if (!c) {
            p->oom = 1;
            jfail(p, pos, "out of memory");
            return NULL;
        }
        c->prev = p->chunks;
        c->used = 0;
        p->chunks = c;
    }
    struct jv *v = &c->v[c->used++];
    memset(v, 0, sizeof *v);
    v->type = type;
    v->pos = pos;
    return v;
}

static void jfree(struct jp *p)
{
    while (p->chunks) {
        struct jchunk *c = p->chunks;
        p->chunks = c->prev;
        free(c);
    }
}

static void jws(struct jp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                           p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* The string at p->i (which is a '"'), decoded in place. */
static int jstring(struct jp *p, const char **out, size_t *outlen)
{
    size_t start = p->i, r = p->i + 1, w = r;
    char *s = p->s;
    for (;;) {
        if (r >= p->n)
            return jfail(p, start, "unterminated string");
        unsigned char c = (unsigned char)s[r];
        if (c == '"') {
            s[w] = '\0'; /* w <= r: over the closing quote at the latest */
            *out = s + start + 1;
            *outlen = w - (start + 1);
            p->i = r + 1;
            return 0;
        }
        if (c < 0x20)
            return jfail(p, r, "control character in string");
        if (c >= 0x80) {
            size_t k = utf8_seq((const unsigned char *)s + r, p->n - r);
            if (!k)
                return jfail(p, r, "invalid UTF-8 in string");
            memmove(s + w, s + r, k);
            w += k;
            r += k;
            continue;
        }
        if (c != '\\') {
            s[w++] = (char)c;
            r++;
            continue;
        }
        if (r + 1 >= p->n)
            return jfail(p, start, "unterminated string");
        char e = s[r + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            s[w++] = to[simple - "\"\\/bfnrt"];
            r += 2;
            continue;
        }
        if (e != 'u')
            return jfail(p, r, "invalid escape in string");
        uint32_t cp, lo;
        if (p->n - r < 6 || hex4(s + r + 2, &cp) != 0)
            return jfail(p, r, "invalid \\u escape in string");
        size_t at = r;
        r += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return jfail(p, at, "unpaired surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (p->n - r < 6 || s[r] != '\\' || s[r + 1] != 'u' ||
                hex4(s + r + 2, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
                return jfail(p, at, "unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            r += 6;
        }
        if (cp < 0x80) {
            s[w++] = (char)cp;
        } else if (cp < 0x800) {
            s[w++] = (char)(0xc0 | (cp >> 6));
            s[w++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            s[w++] = (char)(0xe0 | (cp >> 12));
            s[w++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            s[w++] = (char)(0x80 | (cp & 0x3f));
        } else {
            s[w++] = (char)(0xf0 | (cp >> 18));
            s[w++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            s[w++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            s[w++] = (char)(0x80 | (cp & 0x3f));
        }
    }
}

static int isdigit_(char c)
{
    return c >= '0' && c <= '9';
}

static struct jv *jnumber(struct jp *p)
{
    size_t start = p->i, i = p->i;
    const char *s = p->s;
    int neg = 0, integral = 1;
    if (s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= p->n || !isdigit_(s[i])) {
        jfail(p, start, "bad number");
        return NULL;
    }
    uint64_t u = 0;
    int fits = 1;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < p->n && isdigit_(s[i])) {
            unsigned d = (unsigned)(s[i] - '0');
            if (u > (UINT64_MAX - d) / 10)
                fits = 0;
            else
                u = u * 10 + d;
            i++;
        }
    }
    if (i < p->n && s[i] == '.') {
        integral = 0;
        i++;
        if (i >= p->n || !isdigit_(s[i])) {
            jfail(p, start, "bad number");
            return NULL;
        }
        while (i < p->n && isdigit_(s[i]))
            i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= p->n || !isdigit_(s[i])) {
            jfail(p, start, "bad number");
            return NULL;
        }
        while (i < p->n && isdigit_(s[i]))
            i++;
    }
    struct jv *v = jnew(p, J_NUM, start);
    if (!v)
        return NULL;
    v->s = s + start;
    v->len = i - start;
    v->is_uint = !neg && integral && fits;
    v->u = v->is_uint ? u : 0;
    p->i = i;
    return v;
}

static struct jv *jvalue(struct jp *p, int depth)
{
    jws(p);
    if (p->i >= p->n) {
        jfail(p, p->i, "expected a value");
        return NULL;
    }
    size_t start = p->i;
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        if (depth >= ST_MAX_DEPTH) {
            jfail(p, start, "nesting too deep");
            return NULL;
        }
        struct jv *v = jnew(p, c == '{' ? J_OBJ : J_ARR, start), *last = NULL;
        if (!v)
            return NULL;
        p->i++;
        jws(p);
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return v;
        }
        for (;;) {
            const char *key = NULL;
            size_t keylen = 0;
            if (c == '{') {
                jws(p);
                if (p->i >= p->n || p->s[p->i] != '"') {
                    jfail(p, p->i, "expected a string key");
                    return NULL;
                }
                if (jstring(p, &key, &keylen) != 0)
                    return NULL;
                jws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    jfail(p, p->i, "expected ':'");
                    return NULL;
                }
                p->i++;
            }
            struct jv *e = jvalue(p, depth + 1);
            if (!e)
                return NULL;
            e->key = key;
            e->keylen = keylen;
            if (last)
                last->next = e;
            else
                v->child = e;
            last = e;
            v->count++;
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == close) {
                p->i++;
                return v;
            }
            jfail(p, p->i, c == '{' ? "expected ',' or '}'"
                                    : "expected ',' or ']'");
            return NULL;
        }
    }
    if (c == '"') {
        struct jv *v = jnew(p, J_STR, start);
        if (!v || jstring(p, &v->s, &v->len) != 0)
            return NULL;
        return v;
    }
    if (c == '-' || isdigit_(c))
        return jnumber(p);
    static const struct {
        const char *word;
        int type;
    } lit[] = {{"true", J_TRUE}, {"false", J_FALSE}, {"null", J_NULL}};
    for (size_t k = 0; k < sizeof lit / sizeof lit[0]; k++) {
        size_t len = strlen(lit[k].word);
        if (p->n - p->i >= len && memcmp(p->s + p->i, lit[k].word, len) == 0) {
            p->i += len;
            return jnew(p, lit[k].type, start);
        }
    }
    jfail(p, start, "expected a value");
    return NULL;
}

/* The whole text: one object, then nothing but whitespace (the padding). */
static struct jv *jparse(struct jp *p)
{
    jws(p);
    if (p->i >= p->n || p->s[p->i] != '{') {
        jfail(p, p->i, "expected '{'");
        return NULL;
    }
    struct jv *v = jvalue(p, 0);
    if (!v)
        return NULL;
    jws(p);
    if (p->i < p->n) {
        jfail(p, p->i, "unexpected data after the header object");
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------- reading */

static const struct {
    const char *name;
    unsigned bits;
} dtypes[] = {
    {"BOOL", 8},         {"F4", 4},           {"F6_E2M3", 6},
    {"F6_E3M2", 6},      {"U8", 8},           {"I8", 8},
    {"F8_E5M2", 8},      {"F8_E4M3", 8},      {"F8_E8M0", 8},
    {"F8_E4M3FNUZ", 8},  {"F8_E5M2FNUZ", 8},  {"I16", 16},
    {"U16", 16},         {"F16", 16},         {"BF16", 16},
    {"I32", 32},         {"U32", 32},         {"F32", 32},
    {"C64", 64},         {"F64", 64},         {"I64", 64},
    {"U64", 64},
};

struct st_ent {
    nrt_tensor t;         /* name, rank, dim; data for F32 and I64 only */
    const char *dtype;    /* from dtypes[] */
    uint64_t begin, end;  /* data_offsets */
    int order;            /* position in the header */
    void *copy;           /* an aligned (or byte-swapped) copy, if made */
};

struct nrt_st_file {
    char *header;         /* the header text; tensor names point into it */
    unsigned char *data;  /* the data section (malloc: aligned) */
    size_t datalen;
    int n;
    struct st_ent *ent;   /* in header order */
    int *byname;          /* indices into ent, sorted by name */
    const char **meta;    /* __metadata__: key, value, key, ... (in header) */
    size_t nmeta;
};

void nrt_safetensors_close(nrt_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; f->ent && i < f->n; i++)
        free(f->ent[i].copy);
    free(f->ent);
    free(f->byname);
    free(f->meta);
    free(f->data);
    free(f->header);
    free(f);
}

/* "path: not a safetensors file (reason)". */
static int bad(nrt_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(nrt_error *err, const char *path, const char *fmt, ...)
{
    char why[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return nrt_errorf(err, "%s: not a safetensors file (%s)", path, why);
}

/* For a file whose header length is impossible, says what its first 8
 * bytes b show it to be instead, if they show anything: torch.save's
 * formats (a zip archive since PyTorch 1.6; before, a pickle whose first
 * object is the magic number 0x1950a86a20f9469cfc6c), another pickle, or
 * text (a CSV file given for weights).  Returns -1 with err set, or 0. */
static int foreign(nrt_error *err, const char *path, const unsigned char b[8])
{
    static const unsigned char torch_legacy[8] = {0x80, 0x02, 0x8a, 0x0a,
                                                  0x6c, 0xfc, 0x9c, 0x46};
    const char *what = NULL;
    if (!memcmp(b, "PK\x03\x04", 4))
        what = "a zip archive, as torch.save writes";
    else if (!memcmp(b, torch_legacy, 8))
        what = "a pickle, as torch.save wrote before PyTorch 1.6";
    else if (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) /* PROTO 2 to 5 */
        what = "a Python pickle";
    if (what)
        return nrt_errorf(err, "%s: not a safetensors file (%s); in PyTorch, save the weights "
                          "with: from safetensors.torch import save_file; "
                          "save_file(model.state_dict(), \"model.safetensors\")", path, what);
    char head[9], text[48];
    for (int k = 0; k < 8; k++) {
        if ((b[k] < 0x20 || b[k] >= 0x7f) && b[k] != '\t' && b[k] != '\n' && b[k] != '\r')
            return 0;
        head[k] = (char)b[k];
    }
    head[8] = '\0';
    return bad(err, path, "it begins with text, '%s', not a header length",
               show(text, sizeof text, head));
}

static void shape_text(char *buf, size_t cap, const nrt_tensor *t)
{
    size_t w = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->rank && w < cap; d++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%lld", d ? ", " : "",
                              (long long)t->dim[d]);
    if (w < cap)
        snprintf(buf + w, cap - w, "]");
}

/* Reads everything left in fp into a fresh buffer (at least 1 byte). */
static int read_rest(FILE *fp, size_t hint, unsigned char **out, size_t *len)
{
    size_t cap = hint + 1, n = 0;
    unsigned char *b = malloc(cap);
    if (!b)
        return -2;
    for (;;) {
        if (n == cap) {
            if (cap > SIZE_MAX / 2) {
                free(b);
                return -2;
            }
            unsigned char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return -2;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n, fp);
        n += got;
        if (n < cap) { /* a short read: the end of the file, or an error */
            if (ferror(fp)) {
                free(b);
                return -1;
            }
            break;
        }
    }
    *out = b;
    *len = n;
    return 0;
}

/* A merge sort of indices into ent (stable, and with its context passed
 * explicitly, which qsort cannot). */
static void merge_sort(int *a, int *tmp, int n, const struct st_ent *ent,
                       int (*cmp)(const struct st_ent *, const struct st_ent *))
{
    if (n < 2)
        return;
    int h = n / 2;
    merge_sort(a, tmp, h, ent, cmp);
    merge_sort(a + h, tmp, n - h, ent, cmp);
    int i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp(&ent[a[j]], &ent[a[i]]) < 0 ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

static int ent_by_offset(const struct st_ent *x, const struct st_ent *y)
{
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->order - y->order;
}

static int ent_by_name(const struct st_ent *x, const struct st_ent *y)
{
    int c = strcmp(x->t.name, y->t.name);
    return c ? c : x->order - y->order;
}

/* Checks one tensor's entry of the header and fills e. */
static int parse_tensor(const char *path, const struct jv *m,
                        size_t datalen, struct st_ent *e, nrt_error *err)
{
    char nb[ST_SHOW_MAX + 8];
    show(nb, sizeof nb, m->key);
    if (m->type != J_OBJ)
        return bad(err, path, "tensor '%s': not a JSON object", nb);
    const struct jv *dt = NULL, *sh = NULL, *off = NULL;
    for (const struct jv *f = m->child; f; f = f->next) {
        const struct jv **slot = NULL;
        if (strcmp(f->key, "dtype") == 0 && f->keylen == 5)
            slot = &dt;
        else if (strcmp(f->key, "shape") == 0 && f->keylen == 5)
            slot = &sh;
        else if (strcmp(f->key, "data_offsets") == 0 && f->keylen == 12)
            slot = &off;
        else
            continue; /* unknown keys are ignored, as by the safetensors
                         library */
        if (*slot)
            return bad(err, path, "tensor '%s': duplicate key \"%s\"", nb,
                       f->key);
        *slot = f;
    }
    if (!dt)
        return bad(err, path, "tensor '%s': no \"dtype\"", nb);
    if (!sh)
        return bad(err, path, "tensor '%s': no \"shape\"", nb);
    if (!off)
        return bad(err, path, "tensor '%s': no \"data_offsets\"", nb);

    if (dt->type != J_STR)
        return bad(err, path, "tensor '%s': dtype is not a string", nb);
    unsigned bits = 0;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (strcmp(dt->s, dtypes[k].name) == 0 &&
            dt->len == strlen(dtypes[k].name)) {
            e->dtype = dtypes[k].name;
            bits = dtypes[k].bits;
        }
    if (!bits) {
        char db[ST_SHOW_MAX + 8];
        return bad(err, path, "tensor '%s': unknown dtype '%s'", nb,
                   show(db, sizeof db, dt->s));
    }

    if (sh->type != J_ARR)
        return bad(err, path, "tensor '%s': shape is not an array", nb);
    if (sh->count > 4)
        return bad(err, path, "tensor '%s': rank %zu exceeds the limit of 4",
                   nb, sh->count);
    e->t.rank = (int)sh->count;
    int d = 0, zero = 0;
    for (const struct jv *x = sh->child; x; x = x->next, d++) {
        if (x->type != J_NUM || !x->is_uint || x->u > (uint64_t)INT64_MAX)
            return bad(err, path, "tensor '%s': shape entry %d is not a "
                       "non-negative integer", nb, d);
        e->t.dim[d] = (int64_t)x->u;
        zero |= x->u == 0;
    }
    char st[128];
    shape_text(st, sizeof st, &e->t);
    uint64_t size = bits; /* in bits */
    for (d = 0; d < e->t.rank && !zero; d++) {
        uint64_t v = (uint64_t)e->t.dim[d];
        if (size > UINT64_MAX / v)
            return bad(err, path, "tensor '%s': shape %s is too large", nb,
                       st);
        size *= v;
    }
    if (zero)
        size = 0;
    if (size % 8 != 0)
        return bad(err, path, "tensor '%s': shape %s of %s is not a whole "
                   "number of bytes", nb, st, e->dtype);
    size /= 8;

    if (off->type != J_ARR || off->count != 2 || off->child->type != J_NUM ||
        !off->child->is_uint || off->child->next->type != J_NUM ||
        !off->child->next->is_uint)
        return bad(err, path, "tensor '%s': data_offsets is not a pair of "
                   "non-negative integers", nb);
    e->begin = off->child->u;
    e->end = off->child->next->u;
    if (e->end < e->begin || e->end - e->begin != size)
        return bad(err, path, "tensor '%s': data_offsets [%llu, %llu] do not "
                   "match shape %s of %s", nb, (unsigned long long)e->begin,
                   (unsigned long long)e->end, st, e->dtype);
    if (e->end > datalen)
        return bad(err, path, "tensor '%s': data_offsets [%llu, %llu] exceed "
                   "the data section of %zu bytes", nb,
                   (unsigned long long)e->begin, (unsigned long long)e->end,
                   datalen);
    e->t.name = m->key;
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    const struct jv *x = *(const struct jv *const *)a;
    const struct jv *y = *(const struct jv *const *)b;
    size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->keylen < y->keylen ? -1 : x->keylen > y->keylen;
}

/* Checks "__metadata__": an object of string values, no key twice. */
static int check_metadata(const char *path, const struct jv *m,
                          nrt_error *err)
{
    char nb[ST_SHOW_MAX + 8];
    if (m->type != J_OBJ)
        return bad(err, path, "__metadata__ is not a JSON object");
    if (m->count == 0)
        return 0;
    const struct jv **v = malloc(m->count * sizeof *v);
    if (!v)
        return nrt_errorf(err, "%s: out of memory", path);
    size_t k = 0;
    for (const struct jv *x = m->child; x; x = x->next) {
        if (x->type != J_STR) {
            free(v);
            return bad(err, path, "__metadata__ value of '%s' is not a "
                       "string", show(nb, sizeof nb, x->key));
        }
        v[k++] = x;
    }
    qsort(v, k, sizeof *v, cmp_key);
    for (size_t i = 1; i < k; i++)
        if (cmp_key(&v[i - 1], &v[i]) == 0) {
            show(nb, sizeof nb, v[i]->key);
            free(v);
            return bad(err, path, "duplicate __metadata__ key '%s'", nb);
        }
    free(v);
    return 0;
}

int nrt_safetensors_open(const char *path, nrt_st_file **out, nrt_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return nrt_errorf(err, "safetensors: no file to open");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return nrt_errorf(err, "%s: %s", path, strerror(errno));

    int rc = -1;
    struct jp p = {0};
    int *idx = NULL, *tmp = NULL;
    char nb[ST_SHOW_MAX + 8], nb2[ST_SHOW_MAX + 8];
    nrt_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }

    /* The header length, checked against the file's size before anything
     * is allocated; then the header and the data section. */
    long long fsize = -1;
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode))
        fsize = (long long)st.st_size;
    unsigned char len8[8];
    size_t got = fread(len8, 1, 8, fp);
    if (got < 8) {
        if (ferror(fp))
            nrt_errorf(err, "%s: %s", path, strerror(errno));
        else
            bad(err, path, "file is %zu bytes, too short for a header", got);
        goto out;
    }
    uint64_t hn = 0;
    for (int k = 0; k < 8; k++)
        hn |= (uint64_t)len8[k] << (8 * k);
    if (((fsize >= 0 && hn > (uint64_t)fsize - 8) || hn > ST_MAX_HEADER) &&
        foreign(err, path, len8))
        goto out;
    if (fsize >= 0 && hn > (uint64_t)fsize - 8) {
        bad(err, path, "header length %llu exceeds file size %lld",
            (unsigned long long)hn, fsize);
        goto out;
    }
    if (hn > ST_MAX_HEADER) {
        bad(err, path, "header length %llu exceeds the limit of %llu bytes",
            (unsigned long long)hn, ST_MAX_HEADER);
        goto out;
    }
    f->header = malloc((size_t)hn + 1);
    if (!f->header) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    if (fread(f->header, 1, (size_t)hn, fp) != hn) {
        if (ferror(fp))
            nrt_errorf(err, "%s: %s", path, strerror(errno));
        else
            bad(err, path, "file ends inside the header");
        goto out;
    }
    f->header[hn] = '\0';
    size_t hint = 65536;
    if (fsize >= 0 && (unsigned long long)fsize - 8 - hn < SIZE_MAX)
        hint = (size_t)((unsigned long long)fsize - 8 - hn);
    int r = read_rest(fp, hint, &f->data, &f->datalen);
    if (r != 0) {
        if (r == -1)
            nrt_errorf(err, "%s: %s", path, strerror(errno));
        else
            nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    fclose(fp);
    fp = NULL;

    /* The header's JSON (errors give the 0-based offset of the offending
     * byte in the header), then its meaning. */
    p.s = f->header;
    p.n = (size_t)hn;
    struct jv *root = jparse(&p);
    if (!root) {
        if (p.oom)
            nrt_errorf(err, "%s: out of memory", path);
        else
            bad(err, path, "bad JSON at byte %zu of the header: %s", p.errpos,
                p.err);
        goto out;
    }
    size_t ntensors = 0;
    int seen_meta = 0;
    for (const struct jv *m = root->child; m; m = m->next) {
        if (m->keylen == 12 && strcmp(m->key, "__metadata__") == 0) {
            if (seen_meta++) {
                bad(err, path, "duplicate key '__metadata__'");
                goto out;
            }
            if (check_metadata(path, m, err) != 0)
                goto out;
            if (m->count > 0 && !(f->meta = malloc(2 * m->count * sizeof *f->meta))) {
                nrt_errorf(err, "%s: out of memory", path);
                goto out;
            }
            for (const struct jv *x = m->child; x; x = x->next) {
                f->meta[2 * f->nmeta] = x->key;
                f->meta[2 * f->nmeta++ + 1] = x->s;
            }
        } else {
            ntensors++;
        }
    }
    if (ntensors > INT_MAX) {
        bad(err, path, "too many tensors");
        goto out;
    }
    f->n = (int)ntensors;
    f->ent = calloc(ntensors + 1, sizeof *f->ent);
    f->byname = malloc((ntensors + 1) * sizeof *f->byname);
    idx = malloc((ntensors + 1) * sizeof *idx);
    tmp = malloc((ntensors + 1) * sizeof *tmp);
    if (!f->ent || !f->byname || !idx || !tmp) {
        nrt_errorf(err, "%s: out of memory", path);
        goto out;
    }
    int n = 0;
    for (const struct jv *m = root->child; m; m = m->next) {
        if (m->keylen == 12 && strcmp(m->key, "__metadata__") == 0)
            continue;
        if (strlen(m->key) != m->keylen) {
            bad(err, path, "tensor name '%s' contains a NUL character",
                show(nb, sizeof nb, m->key));
            goto out;
        }
        struct st_ent *e = &f->ent[n];
        e->order = n;
        if (parse_tensor(path, m, f->datalen, e, err) != 0)
            goto out;
        f->byname[n] = n;
        idx[n] = n;
        n++;
    }

    /* Names unique; the data section covered exactly, without overlap. */
    merge_sort(f->byname, tmp, n, f->ent, ent_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(f->ent[f->byname[i - 1]].t.name,
                   f->ent[f->byname[i]].t.name) == 0) {
            bad(err, path, "duplicate tensor name '%s'",
                show(nb, sizeof nb, f->ent[f->byname[i]].t.name));
            goto out;
        }
    merge_sort(idx, tmp, n, f->ent, ent_by_offset);
    uint64_t covered = 0;
    const struct st_ent *prev = NULL;
    for (int i = 0; i < n; i++) {
        const struct st_ent *e = &f->ent[idx[i]];
        if (e->begin < covered) {
            bad(err, path, "tensors '%s' and '%s' overlap: data_offsets "
                "[%llu, %llu] and [%llu, %llu]",
                show(nb, sizeof nb, prev->t.name),
                show(nb2, sizeof nb2, e->t.name),
                (unsigned long long)prev->begin,
                (unsigned long long)prev->end,
                (unsigned long long)e->begin, (unsigned long long)e->end);
            goto out;
        }
        if (e->begin > covered) {
            bad(err, path, "bytes [%llu, %llu) of the data section belong "
                "to no tensor", (unsigned long long)covered,
                (unsigned long long)e->begin);
            goto out;
        }
        covered = e->end;
        prev = e;
    }
    if (covered != f->datalen) {
        bad(err, path, "bytes [%llu, %zu) of the data section belong to no "
            "tensor", (unsigned long long)covered, f->datalen);
        goto out;
    }

    /* F32 and I64 data, aligned and in the host's byte order: in place
     * when it can be, else copied. */
    int le = host_little_endian();
    for (int i = 0; i < n; i++) {
        struct st_ent *e = &f->ent[i];
        if (strcmp(e->dtype, "F32") == 0)
            e->t.dtype = NRT_F32;
        else if (strcmp(e->dtype, "I64") == 0)
            e->t.dtype = NRT_I64;
        else
            continue;
        const size_t width = dtype_size(e->t.dtype), bytes = (size_t)(e->end - e->begin);
        const void *at;
        if (bytes == 0) {
            at = f->data;
        } else if (le && e->begin % width == 0) {
            at = f->data + e->begin;
        } else {
            e->copy = malloc(bytes);
            if (!e->copy) {
                nrt_errorf(err, "%s: out of memory", path);
                goto out;
            }
            memcpy(e->copy, f->data + e->begin, bytes);
            if (!le)
                swap_words(e->copy, bytes / width, width);
            at = e->copy;
        }
        if (e->t.dtype == NRT_I64)
            e->t.i64 = at;
        else
            e->t.data = at;
    }
    *out = f;
    f = NULL;
    rc = 0;
out:
    if (fp)
        fclose(fp);
    jfree(&p);
    free(idx);
    free(tmp);
    nrt_safetensors_close(f);
    return rc;
}

const nrt_tensor *nrt_safetensors_find(const nrt_st_file *f, const char *name,
                                       const char **dtype)
{
    if (dtype)
        *dtype = NULL;
    if (!f || !name)
        return NULL;
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const struct st_ent *e = &f->ent[f->byname[mid]];
        int c = strcmp(name, e->t.name);
        if (c == 0) {
            if (dtype)
                *dtype = e->dtype;
            return strcmp(e->dtype, "F32") == 0 || strcmp(e->dtype, "I64") == 0 ? &e->t : NULL;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *nrt_safetensors_meta(const nrt_st_file *f, const char *key)
{
    for (size_t i = 0; f && i < f->nmeta; i++)
        if (!strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}

int nrt_safetensors_count(const nrt_st_file *f)
{
    return f ? f->n : 0;
}

const char *nrt_safetensors_name(const nrt_st_file *f, int i)
{
    if (!f || i < 0 || i >= f->n)
        return NULL;
    return f->ent[i].t.name;
}

/* ------------------------------------------------------- a model's weights */

static const char *dims_str(char *buf, size_t len, int rank, const int64_t *dim)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)dim[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

int nrt_weights_tensors(const nrt_model *m, const float *param, const void *buffers,
                        nrt_tensor *t)
{
    int n = 0, b = 0;
    for (int i = 0; i <= m->n_params; i++) {
        for (; b < m->n_buffers && m->buffers[b].after <= i; b++) {
            const nrt_buffer *x = &m->buffers[b];
            const unsigned char *at = (const unsigned char *)buffers + x->offset;
            t[n] = (nrt_tensor){.name = x->name, .rank = x->rank, .dtype = x->dtype};
            memcpy(t[n].dim, x->dim, sizeof t[n].dim);
            if (x->dtype == NRT_I64)
                t[n].i64 = (const int64_t *)(const void *)at;
            else
                t[n].data = (const float *)(const void *)at;
            n++;
        }
        if (i == m->n_params)
            break;
        const nrt_param *p = &m->params[i];
        t[n] = (nrt_tensor){.name = p->name, .rank = p->rank, .data = param + p->offset};
        memcpy(t[n].dim, p->dim, sizeof t[n].dim);
        n++;
    }
    return n;
}

/* Elements of t. */
static size_t elements(const nrt_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dim[d];
    return n;
}

int nrt_tensor_check_finite(const char *path, const nrt_tensor *t, nrt_error *err)
{
    if (t->dtype != NRT_F32)
        return 0;
    const size_t n = elements(t);
    size_t nonfinite = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(t->data[i]) && nonfinite++ == 0)
            first = i;
    if (!nonfinite)
        return 0;
    /* the first bad value's index, [i, j, ...], from its flat position */
    int64_t idx[4];
    size_t rest = first;
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = (int64_t)(rest % (size_t)t->dim[d]);
        rest /= (size_t)t->dim[d];
    }
    char at[96];
    const float v = t->data[first];
    return nrt_errorf(err, "%s: tensor '%s' holds %s at %s (%zu non-finite value%s of %zu); "
                      "weights must be finite (were they saved by a run that diverged?)",
                      path, t->name, isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf",
                      dims_str(at, sizeof at, t->rank, idx), nonfinite,
                      nonfinite == 1 ? "" : "s", n);
}

int nrt_weights_load(const nrt_model *m, float *param, void *buffers, const char *path,
                     nrt_error *err)
{
    nrt_tensor *want = calloc((size_t)(m->n_params + m->n_buffers) + 1, sizeof *want);
    if (!want)
        return nrt_errorf(err, "out of memory");
    const int n = nrt_weights_tensors(m, param, buffers, want);
    nrt_st_file *f;
    if (nrt_safetensors_open(path, &f, err)) {
        free(want);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const nrt_tensor *w = &want[i];
        const char *dtype = NULL;
        const nrt_tensor *t = nrt_safetensors_find(f, w->name, &dtype);
        char shape[96], got[96];
        dims_str(shape, sizeof shape, w->rank, w->dim);
        if (!dtype)
            rc = nrt_errorf(err, "%s: no tensor '%s' (the model has %s %s %s)", path, w->name,
                            w->name, dtype_name(w->dtype), shape);
        else if (!t || t->dtype != w->dtype)
            rc = nrt_errorf(err, "%s: tensor '%s' has dtype %s; netc needs %s", path, w->name,
                            dtype, dtype_name(w->dtype));
        else if (t->rank != w->rank || memcmp(t->dim, w->dim, sizeof(int64_t) * (size_t)w->rank))
            rc = nrt_errorf(err, "%s: tensor '%s' has shape %s, the model expects %s", path,
                            w->name, dims_str(got, sizeof got, t->rank, t->dim), shape);
        else if (nrt_tensor_check_finite(path, t, err))
            rc = -1;
        else /* w's data points into param or buffers */
            memcpy((void *)w->data, t->data, elements(w) * dtype_size(w->dtype));
    }
    for (int i = 0; i < nrt_safetensors_count(f) && rc == 0; i++) {
        const char *name = nrt_safetensors_name(f, i);
        int found = !strncmp(name, "optimizer.", 10); /* a checkpoint's */
        for (int k = 0; k < n; k++)
            found |= !strcmp(name, want[k].name);
        if (!found)
            rc = nrt_errorf(err, "%s: tensor '%s' is not a parameter or buffer of model '%s'",
                            path, name, m->name);
    }
    nrt_safetensors_close(f);
    free(want);
    return rc;
}

int nrt_weights_save(const nrt_model *m, const float *param, const void *buffers,
                     const nrt_stats *stats, const char *path, nrt_error *err)
{
    nrt_tensor *t = calloc((size_t)(m->n_params + m->n_buffers) + 1, sizeof *t);
    char *text[2] = {NULL, NULL};
    const int with_stats = stats && stats->dim;
    if (!t || (with_stats && nrt_stats_meta(stats, text, err))) {
        free(t);
        return t ? -1 : nrt_errorf(err, "out of memory");
    }
    const int n = nrt_weights_tensors(m, param, buffers, t);
    const char *meta[] = {"format", "pt", "netc_model", m->name,
                          "standardize_mean", text[0], "standardize_std", text[1]};
    int rc = nrt_safetensors_save(path, t, n, meta, with_stats ? 4 : 2, err);
    free(text[0]);
    free(text[1]);
    free(t);
    return rc;
}

/* ------------------------------------------------ standardization statistics */

static const char *const stats_keys[2] = {"standardize_mean", "standardize_std"};

int nrt_stats_meta(const nrt_stats *s, char *text[2], nrt_error *err)
{
    const float *v[2] = {s->mean, s->std};
    for (int k = 0; k < 2; k++) {
        size_t cap = 2 + 18 * (s->dim ? s->dim : 1), len = 0; /* "-1.23456789e-38, " */
        char *t = text[k] = malloc(cap);
        if (!t) {
            free(text[0]);
            text[0] = text[1] = NULL;
            return nrt_errorf(err, "out of memory");
        }
        t[len++] = '[';
        for (size_t j = 0; j < s->dim; j++)
            len += (size_t)snprintf(t + len, cap - len, "%s%.9g", j ? ", " : "", (double)v[k][j]);
        snprintf(t + len, cap - len, "]");
    }
    return 0;
}

/* The dim numbers of the JSON array text into out; -1 if it is not one. */
static int parse_floats(const char *text, size_t dim, float *out)
{
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p++ != '[')
        return -1;
    for (size_t j = 0; j < dim; j++) {
        char *end;
        errno = 0;
        out[j] = strtof(p, &end);
        if (end == p || errno == ERANGE)
            return -1;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p != (j + 1 < dim ? ',' : ']'))
            return -1;
        p++;
    }
    while (isspace((unsigned char)*p))
        p++;
    return *p ? -1 : 0;
}

int nrt_stats_read(const nrt_st_file *f, const char *path, size_t dim, nrt_stats *s,
                   nrt_error *err)
{
    const char *text[2] = {nrt_safetensors_meta(f, stats_keys[0]),
                           nrt_safetensors_meta(f, stats_keys[1])};
    s->dim = 0;
    if (!text[0] && !text[1])
        return 0;
    float *v = malloc(2 * sizeof(float) * (dim ? dim : 1));
    if (!v)
        return nrt_errorf(err, "out of memory");
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++)
        if (!text[k] || parse_floats(text[k], dim, v + (size_t)k * dim))
            rc = nrt_errorf(err, "%s: metadata '%s' %s: expected a JSON array of %zu numbers, "
                            "one a feature", path, stats_keys[k],
                            text[k] ? "is not one" : "is missing", dim);
    if (rc == 0) {
        nrt_stats t = {0};
        rc = nrt_stats_set(&t, dim, v, v + dim, path, err);
        *s = t;
    }
    free(v);
    return rc;
}

int nrt_weights_stats(const char *path, size_t dim, nrt_stats *s, nrt_error *err)
{
    nrt_st_file *f;
    s->dim = 0;
    if (nrt_safetensors_open(path, &f, err))
        return -1;
    int rc = nrt_stats_read(f, path, dim, s, err);
    nrt_safetensors_close(f);
    return rc;
}
