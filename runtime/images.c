/*
 * images.c — image datasets: a list of image files and their labels, read
 * into memory as the floats the model takes, the way torchvision's
 * ImageFolder-style datasets and transforms make them.
 *
 * The list is a CSV file of `path,label` rows, as the PyTorch scripts'
 * desc_train.csv: a first row whose label is not a whole number is a
 * header; blank lines are skipped; a path may be double-quoted ("" is a
 * quote inside it); relative paths start from the source's root, else
 * from the list's directory.  A folder is read as torchvision's
 * ImageFolder reads one (a folder a class).  A path that is itself an
 * image is a list of that one image (--predict photo.png).
 *
 * Every image is decoded once, on `workers` threads, with stb_image:
 * nrt_images_load decodes a whole list before it returns; nrt_images_open
 * and nrt_images_start decode one in the background, in the order given
 * (the first epoch's), and nrt_images_wait waits for a sample, so that
 * training starts at once.  Each image is then made what PIL and
 * torchvision make of it, pixel for pixel:
 *  - channels as Image.convert: "L" from RGB is (19595 R + 38470 G +
 *    7471 B + 2^15) >> 16, "RGB" from grey repeats it, alpha is dropped;
 *  - resize(h, w) as Image.resize((w, h), BILINEAR): a separable
 *    triangle filter widened by the scale when shrinking (antialiased),
 *    coefficients in 22-bit fixed point, rows first then columns, each
 *    pass rounded to 8 bits (Pillow's Resample.c);
 *  - to_tensor: pixel / 255 in float; normalize: (x - mean) / std in float.
 * random_horizontal_flip is not done here: it changes every epoch, and is
 * done as the loader assembles a training batch (loader.c).  So a dataset
 * holds 4 bytes a pixel, and an epoch decodes nothing.
 *
 * Errors name the list, its line and the image:
 *   data/desc_train.csv:17: img/cat_3.png: cannot open: No such file or directory
 */
#include "netrt.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#ifdef NETRT_HAVE_STB
#include <stb_image.h>
#endif

#define PRECISION_BITS (32 - 8 - 2) /* Pillow's fixed point for 8-bit images */
#define SHOWN 64                    /* most bytes of a bad field quoted */

/* One row of the list. */
typedef struct Row {
    char *path;    /* as joined with the root */
    size_t line;
    int32_t label;
} Row;

typedef struct List {
    Row *row;
    size_t n, cap;
} List;

static void list_free(List *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->row[i].path);
    free(l->row);
}

/* ----------------------------------------------------------------- list */

/* The next field of the line at *p (which ends at end): unquoted up to a
 * comma, or double-quoted.  Returns a new string, or NULL (out of memory,
 * or a quote left open: *bad). */
static char *field(const char **p, const char *end, int *bad)
{
    const char *s = *p;
    size_t cap = (size_t)(end - s) + 1, n = 0;
    char *f = malloc(cap);
    if (!f)
        return NULL;
    if (s < end && *s == '"') {
        for (s++;; s++) {
            if (s >= end) {
                *bad = 1;
                free(f);
                return NULL;
            }
            if (*s == '"') {
                if (s + 1 < end && s[1] == '"') {
                    f[n++] = '"';
                    s++;
                    continue;
                }
                s++;
                break;
            }
            f[n++] = *s;
        }
        while (s < end && (*s == ' ' || *s == '\t')) /* before the comma */
            s++;
    } else {
        while (s < end && *s != ',')
            f[n++] = *s++;
        while (n > 0 && (f[n - 1] == ' ' || f[n - 1] == '\t'))
            n--;
    }
    f[n] = '\0';
    *p = s;
    return f;
}

static int whole_number(const char *s, long long *v)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return 0;
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return errno == 0 && *end == '\0';
}

/* The directory part of path, with its slash ("" for a bare name). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

static int add_row(List *l, char *path, size_t line, int32_t label, nrt_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        Row *r = realloc(l->row, cap * sizeof *r);
        if (!r) {
            free(path);
            return nrt_errorf(err, "out of memory");
        }
        l->row = r;
        l->cap = cap;
    }
    l->row[l->n++] = (Row){path, line, label};
    return 0;
}

/* Parses the list in buf (NUL-terminated, len bytes). */
static int parse_list(const char *name, const char *root, const char *buf, size_t len,
                      int target_kind, int ncls, List *l, nrt_error *err)
{
    const char *p = buf, *end = buf + len;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) /* a UTF-8 byte order mark */
        p += 3;
    int first = 1;
    for (size_t line = 1; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *e = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        const char *s = p;
        p = eol + 1;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        if (s == e)
            continue;
        if (memchr(s, '\0', (size_t)(e - s)))
            return nrt_errorf(err, "%s:%zu: a NUL byte: not a text file", name, line);
        int bad = 0;
        char *path = field(&s, e, &bad);
        if (!path)
            return bad ? nrt_errorf(err, "%s:%zu: a quote is left open", name, line)
                       : nrt_errorf(err, "out of memory");
        char *label = NULL;
        int fields = 1;
        while (s < e && *s == ',' && fields < 3) {
            s++;
            while (s < e && (*s == ' ' || *s == '\t'))
                s++;
            free(label);
            label = field(&s, e, &bad);
            if (!label) {
                free(path);
                return bad ? nrt_errorf(err, "%s:%zu: a quote is left open", name, line)
                           : nrt_errorf(err, "out of memory");
            }
            fields++;
        }
        long long v = 0;
        int numeric = label && whole_number(label, &v);
        int rc = 0;
        if (fields > 2 || s < e)
            rc = nrt_errorf(err, "%s:%zu: expected two fields, path,label", name, line);
        else if (first && label && !numeric) { /* a header */
            free(path);
            free(label);
            first = 0;
            continue;
        } else if (!path[0])
            rc = nrt_errorf(err, "%s:%zu: the path is empty", name, line);
        else if (!label && target_kind != NRT_TARGET_NONE)
            rc = nrt_errorf(err, "%s:%zu: no label: expected path,label", name, line);
        else if (label && !numeric)
            rc = nrt_errorf(err, "%s:%zu: label '%.*s' is not a whole number", name, line,
                            SHOWN, label);
        else if (label && target_kind == NRT_TARGET_CLASS && (v < 0 || v >= ncls))
            rc = nrt_errorf(err, "%s:%zu: label %lld is out of range: the model has %d "
                            "classes, 0 to %d", name, line, v, ncls, ncls - 1);
        free(label);
        first = 0;
        if (rc) {
            free(path);
            return -1;
        }
        char *full = path[0] == '/' ? path : nrt_path_join(root, path);
        if (full != path)
            free(path);
        if (!full || add_row(l, full, line, (int32_t)v, err))
            return full ? -1 : nrt_errorf(err, "out of memory");
    }
    if (l->n == 0)
        return nrt_errorf(err, "%s: no images listed", name);
    return 0;
}

/* --------------------------------------------------------------- folders */

/* A folder of class folders, as torchvision's ImageFolder reads one: the
 * classes are the folder's subfolders sorted by name (label 0 the first),
 * and a class's images every file below its folder, at any depth, whose
 * name ends (in any case) with one of ImageFolder's extensions, sorted
 * as sorted(os.walk(...)) then sorted(names) sort them: by the folder
 * they lie in, then by name. */
static const char *const image_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                         ".pgm", ".tif", ".tiff", ".webp"};

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_image_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof image_exts / sizeof *image_exts; i++) {
        size_t e = strlen(image_exts[i]);
        if (n >= e && !strcasecmp(name + n - e, image_exts[i]))
            return 1;
    }
    return 0;
}

/* Strings: a folder's entries, or the image files found below one. */
typedef struct Names {
    char **v;
    size_t n, cap;
} Names;

static void names_free(Names *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i]);
    free(d->v);
}

/* Appends s (taken over; NULL: out of memory) to d. */
static int names_add(Names *d, char *s, nrt_error *err)
{
    if (s && d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        char **v = realloc(d->v, cap * sizeof *v);
        if (!v) {
            free(s);
            s = NULL;
        } else {
            d->v = v;
            d->cap = cap;
        }
    }
    if (!s)
        return nrt_errorf(err, "out of memory");
    d->v[d->n++] = s;
    return 0;
}

/* Sorts d by cmp (qsort must not be given the NULL of an empty d). */
static void names_sort(Names *d, int (*cmp)(const void *, const void *))
{
    if (d->n > 1)
        qsort(d->v, d->n, sizeof *d->v, cmp);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A folder's entries, sorted by name (strcmp: Python's order for UTF-8). */
static int read_names(const char *dir, Names *out, nrt_error *err)
{
    *out = (Names){0};
    DIR *d = opendir(dir);
    if (!d)
        return nrt_errorf(err, "%s: cannot open the folder: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = names_add(out, strdup(e->d_name), err);
    closedir(d);
    if (rc) {
        names_free(out);
        return -1;
    }
    names_sort(out, by_name);
    return 0;
}

/* Image files as sorted(os.walk(...)) then sorted(names) order them: by
 * the folder they lie in, then by name. */
static int by_place(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const size_t dx = (size_t)(strrchr(x, '/') - x), dy = (size_t)(strrchr(y, '/') - y);
    const int c = memcmp(x, y, dx < dy ? dx : dy);
    if (c || dx != dy)
        return c ? c : dx < dy ? -1 : 1;
    return strcmp(x + dx + 1, y + dy + 1);
}

/* The image files below dir, at any depth, appended to found (unsorted). */
static int walk(const char *dir, int depth, Names *found, nrt_error *err)
{
    if (depth > 64)
        return nrt_errorf(err, "%s: folders nested more than 64 deep (a link to a folder "
                          "above?)", dir);
    Names d;
    if (read_names(dir, &d, err))
        return -1;
    int rc = 0;
    for (size_t i = 0; i < d.n && rc == 0; i++) {
        char *path = nrt_path_join(dir, d.v[i]);
        if (!path)
            rc = nrt_errorf(err, "out of memory");
        else if (is_dir(path)) {
            rc = walk(path, depth + 1, found, err);
            free(path);
        } else if (has_image_ext(d.v[i]))
            rc = names_add(found, path, err);
        else
            free(path);
    }
    names_free(&d);
    return rc;
}

static int list_folder(const char *root, int target_kind, int ncls, List *l, nrt_error *err)
{
    Names classes; /* the subfolders, in name order */
    if (read_names(root, &classes, err))
        return -1;
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; i < classes.n; i++) {
        char *name = classes.v[i], *path = nrt_path_join(root, name);
        classes.v[i] = NULL;
        if (path && is_dir(path))
            classes.v[k++] = name;
        else
            free(name);
        if (!path)
            rc = nrt_errorf(err, "out of memory");
        free(path);
    }
    classes.n = k;
    if (rc == 0 && classes.n == 0)
        rc = nrt_errorf(err, "%s: a folder of images needs a folder for each class, and it "
                        "has none", root);
    if (rc == 0 && target_kind == NRT_TARGET_CLASS && classes.n > (size_t)ncls)
        rc = nrt_errorf(err, "%s: %zu class folders (%s to %s), but the model has %d classes",
                        root, classes.n, classes.v[0], classes.v[classes.n - 1], ncls);
    for (size_t c = 0; c < classes.n && rc == 0; c++) {
        char *dir = nrt_path_join(root, classes.v[c]);
        Names found = {0};
        rc = dir ? walk(dir, 0, &found, err) : nrt_errorf(err, "out of memory");
        if (rc == 0 && found.n == 0)
            rc = nrt_errorf(err, "%s: no image files in the class folder (.png, .jpg, ...)",
                            dir);
        names_sort(&found, by_place);
        for (size_t i = 0; i < found.n; i++) { /* the paths go to the list */
            if (rc == 0)
                rc = add_row(l, found.v[i], 0, (int32_t)c, err);
            else
                free(found.v[i]);
        }
        free(found.v);
        free(dir);
    }
    names_free(&classes);
    return rc;
}

/* ---------------------------------------------------- PIL's conversions */

/* The image's n channels (stb's: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA),
 * interleaved, to c planes [c][h*w], as Image.convert("L" or "RGB"). */
static void to_planes(const unsigned char *px, int n, size_t hw, int c, unsigned char *out)
{
    for (size_t i = 0; i < hw; i++) {
        const unsigned char *q = px + i * (size_t)n;
        if (c == 1) {
            out[i] = n >= 3 ? (unsigned char)((q[0] * 19595u + q[1] * 38470u + q[2] * 7471u +
                                               0x8000u) >> 16)
                            : q[0];
        } else {
            for (int k = 0; k < 3; k++)
                out[(size_t)k * hw + i] = n >= 3 ? q[k] : q[0];
        }
    }
}

/* Pillow's resampling coefficients for in -> out samples, bilinear:
 * bounds[2j] the first input of output j, bounds[2j+1] how many; k[j *
 * ksize ..] their fixed-point weights.  Returns ksize, or 0 (no memory). */
static int coeffs(int in, int out, int **bounds, int32_t **kk)
{
    double scale = (double)in / out, fscale = scale < 1 ? 1 : scale;
    double support = 1.0 * fscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *k = malloc(sizeof *k * (size_t)ksize);
    *bounds = malloc(sizeof **bounds * 2 * (size_t)out);
    *kk = malloc(sizeof **kk * (size_t)ksize * (size_t)out);
    if (!k || !*bounds || !*kk) {
        free(k);
        free(*bounds);
        free(*kk);
        return 0;
    }
    for (int j = 0; j < out; j++) {
        double center = (j + 0.5) * scale, ww = 0, ss = 1.0 / fscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in)
            xmax = in;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            k[x] = t < 1 ? 1 - t : 0;
            ww += k[x];
        }
        for (int x = 0; x < ksize; x++) {
            double w = x < xmax && ww != 0 ? k[x] / ww : 0;
            (*kk)[(size_t)j * (size_t)ksize + (size_t)x] =
                (int32_t)(w < 0 ? -0.5 + w * (1 << PRECISION_BITS)
                                : 0.5 + w * (1 << PRECISION_BITS));
        }
        (*bounds)[2 * j] = xmin;
        (*bounds)[2 * j + 1] = xmax;
    }
    free(k);
    return ksize;
}

static unsigned char clip8(int32_t v)
{
    if (v >= (1 << PRECISION_BITS << 8))
        return 255;
    if (v <= 0)
        return 0;
    return (unsigned char)(v >> PRECISION_BITS);
}

/* One plane src [h][w] resampled along its rows (horiz) or its columns to
 * dst [h][ow] or [oh][w]; the other dimension is unchanged. */
static void resample(const unsigned char *src, int h, int w, int horiz, int out, const int *bounds,
                     const int32_t *kk, int ksize, unsigned char *dst)
{
    if (horiz) {
        for (int y = 0; y < h; y++)
            for (int j = 0; j < out; j++) {
                const int32_t *k = kk + (size_t)j * (size_t)ksize;
                const unsigned char *s = src + (size_t)y * (size_t)w + bounds[2 * j];
                int32_t acc = 1 << (PRECISION_BITS - 1);
                for (int x = 0; x < bounds[2 * j + 1]; x++)
                    acc += s[x] * k[x];
                dst[(size_t)y * (size_t)out + (size_t)j] = clip8(acc);
            }
    } else {
        for (int j = 0; j < out; j++) {
            const int32_t *k = kk + (size_t)j * (size_t)ksize;
            for (int x = 0; x < w; x++) {
                const unsigned char *s = src + (size_t)bounds[2 * j] * (size_t)w + (size_t)x;
                int32_t acc = 1 << (PRECISION_BITS - 1);
                for (int y = 0; y < bounds[2 * j + 1]; y++)
                    acc += s[(size_t)y * (size_t)w] * k[y];
                dst[(size_t)j * (size_t)w + (size_t)x] = clip8(acc);
            }
        }
    }
}

/* c planes [h][w] to [oh][ow], as Image.resize((ow, oh), BILINEAR): the
 * rows pass, then the columns pass, each only if its size changes.
 * Returns the new planes, or NULL (no memory). */
static unsigned char *resize(const unsigned char *px, int c, int h, int w, int oh, int ow)
{
    int *bh = NULL, *bv = NULL;
    int32_t *kh = NULL, *kv = NULL;
    int ksh = ow != w ? coeffs(w, ow, &bh, &kh) : 1;
    int ksv = oh != h ? coeffs(h, oh, &bv, &kv) : 1;
    unsigned char *mid = malloc((size_t)c * (size_t)h * (size_t)ow);
    unsigned char *out = malloc((size_t)c * (size_t)oh * (size_t)ow);
    if (!ksh || !ksv || !mid || !out) {
        free(out);
        out = NULL;
        goto done;
    }
    for (int k = 0; k < c; k++) {
        const unsigned char *p = px + (size_t)k * (size_t)h * (size_t)w;
        unsigned char *m = mid + (size_t)k * (size_t)h * (size_t)ow;
        if (ow != w)
            resample(p, h, w, 1, ow, bh, kh, ksh, m);
        else
            memcpy(m, p, (size_t)h * (size_t)w);
        unsigned char *o = out + (size_t)k * (size_t)oh * (size_t)ow;
        if (oh != h)
            resample(m, h, ow, 0, oh, bv, kv, ksv, o);
        else
            memcpy(o, m, (size_t)h * (size_t)ow);
    }
done:
    free(bh);
    free(bv);
    free(kh);
    free(kv);
    free(mid);
    return out;
}

/* ---------------------------------------------------------------- decode */

/* ---------------------------------------------------------------- decode */

enum { PENDING, DONE, BAD };

struct nrt_images {
    const char *name;         /* the list, for messages */
    List list;
    nrt_images_opts o;
    nrt_transforms tf;
    float *x;                 /* [n, C, H, W]: the dataset's */
    _Atomic unsigned char *state; /* per row: PENDING, DONE or BAD */
    uint32_t *sched;          /* the rows in the order to decode them */
    atomic_size_t next;       /* the next place in sched to take */
    int stop;                 /* a failure without skip_bad: take no more */
    pthread_mutex_t mu;       /* over stop, first_bad, first and cv */
    pthread_cond_t cv;        /* a row is done, or the decoding stopped */
    size_t first_bad;         /* the lowest bad row, and its message */
    nrt_error first;
    pthread_t *thread;
    int nthreads;
};

/* The file's pixels, interleaved, n channels; NULL with the reason in err.
 * Freed with free_pixels. */
static unsigned char *load_pixels(const char *path, int *w, int *h, int *n, nrt_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        nrt_errorf(err, "cannot open: %s", strerror(errno));
        return NULL;
    }
#ifdef NETRT_HAVE_STB
    unsigned char *px = stbi_load_from_file(f, w, h, n, 0);
    if (!px)
        nrt_errorf(err, "not an image stb_image can read (%s)", stbi_failure_reason());
#else
    unsigned char *px = NULL;
    (void)w, (void)h, (void)n;
    nrt_errorf(err, "this runtime was built without stb_image");
#endif
    fclose(f);
    return px;
}

static void free_pixels(unsigned char *px)
{
#ifdef NETRT_HAVE_STB
    stbi_image_free(px);
#else
    (void)px;
#endif
}

/* Row i's image into x; 0, or -1 with the reason in err. */
static int decode(const nrt_images *j, size_t i, nrt_error *err)
{
    const Row *r = &j->list.row[i];
    const nrt_images_opts *o = &j->o;
    const nrt_transforms *tf = &j->tf;
    int w, h, n;
    unsigned char *px = load_pixels(r->path, &w, &h, &n, err);
    if (!px)
        return -1;
    const int c = o->channels, oh = tf->resize_h ? tf->resize_h : h,
              ow = tf->resize_w ? tf->resize_w : w;
    if (oh != o->height || ow != o->width) {
        free_pixels(px);
        return nrt_errorf(err, "is %dx%d pixels, but the model's input is %dx%d: add "
                          "'transform resize(%d, %d)' to the model", w, h, o->width,
                          o->height, o->height, o->width);
    }
    unsigned char *planes = malloc((size_t)c * (size_t)h * (size_t)w);
    if (!planes) {
        free_pixels(px);
        return nrt_errorf(err, "out of memory");
    }
    to_planes(px, n, (size_t)h * (size_t)w, c, planes);
    free_pixels(px);
    if (oh != h || ow != w) {
        unsigned char *sized = resize(planes, c, h, w, oh, ow);
        free(planes);
        if (!sized)
            return nrt_errorf(err, "out of memory");
        planes = sized;
    }
    const size_t hw = (size_t)oh * (size_t)ow;
    float *x = j->x + i * (size_t)c * hw;
    for (int k = 0; k < c; k++)
        for (size_t p = 0; p < hw; p++) {
            float v = planes[(size_t)k * hw + p];
            if (tf->to_tensor)
                v = v / 255.0f;
            if (tf->normalize)
                v = (v - tf->mean[k]) / tf->std[k];
            x[(size_t)k * hw + p] = v;
        }
    free(planes);
    return 0;
}

static void *worker(void *arg)
{
    nrt_images *j = arg;
    const size_t n = j->list.n;
    for (;;) {
        const size_t k = atomic_fetch_add(&j->next, 1);
        if (k >= n)
            break;
        const size_t i = j->sched[k];
        nrt_error e;
        const int rc = decode(j, i, &e);
        pthread_mutex_lock(&j->mu);
        atomic_store_explicit(&j->state[i], rc ? BAD : DONE, memory_order_release);
        if (rc && i < j->first_bad) {
            const Row *r = &j->list.row[i];
            j->first_bad = i;
            if (r->line) /* a list's line */
                nrt_errorf(&j->first, "%s:%zu: %s: %s", j->name, r->line, r->path, e.msg);
            else         /* a folder's file */
                nrt_errorf(&j->first, "%s: %s", r->path, e.msg);
        }
        if (rc && !j->o.skip_bad) {
            j->stop = 1;
            atomic_store(&j->next, n); /* the other workers take no more */
        }
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

/* Whether path is an image file itself rather than a list. */
static int is_image(const char *path)
{
#ifdef NETRT_HAVE_STB
    int w, h, n;
    return stbi_info(path, &w, &h, &n) == 1;
#else
    (void)path;
    return 0;
#endif
}

int nrt_images_available(void)
{
#ifdef NETRT_HAVE_STB
    return 1;
#else
    return 0;
#endif
}

void nrt_images_close(nrt_images *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    atomic_store(&j->next, j->list.n); /* no more rows are taken */
    pthread_mutex_unlock(&j->mu);
    for (int t = 0; t < j->nthreads; t++)
        pthread_join(j->thread[t], NULL);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->thread);
    free(j->sched);
    free((void *)j->state);
    list_free(&j->list);
    free(j);
}

int nrt_images_open(const nrt_source *src, const nrt_images_opts *o, int target_kind, int ncls,
                    nrt_dataset *out, nrt_images **handle, nrt_error *err)
{
    memset(out, 0, sizeof *out);
    *handle = NULL;
    if (!nrt_images_available())
        return nrt_errorf(err, "%s: this runtime was built without stb_image, so it reads "
                          "no images: install libstb-dev and rebuild netc", src->path);
    if ((o->channels != 1 && o->channels != 3) || o->height < 1 || o->width < 1)
        return nrt_errorf(err, "%s: images need an input [1 or 3, H, W]", src->path);
    List l = {0};
    if (is_dir(src->path)) {
        if (list_folder(src->path, target_kind, ncls, &l, err)) {
            list_free(&l);
            return -1;
        }
    } else if (is_image(src->path)) {
        char *p = strdup(src->path);
        if (!p || add_row(&l, p, 1, 0, err))
            return p ? -1 : nrt_errorf(err, "out of memory");
    } else {
        char *buf, *dir = src->root ? NULL : dir_of(src->path);
        size_t len;
        if (!src->root && !dir)
            return nrt_errorf(err, "out of memory");
        int rc = nrt_read_file(src->path, &buf, &len, err);
        if (rc == 0) {
            rc = parse_list(src->path, src->root ? src->root : dir, buf, len, target_kind, ncls,
                            &l, err);
            free(buf);
        }
        free(dir);
        if (rc) {
            list_free(&l);
            return -1;
        }
    }
    if (l.n > UINT32_MAX) {
        list_free(&l);
        return nrt_errorf(err, "%s: %zu images: more than an epoch's order can hold", src->path,
                          l.n);
    }
    const size_t dim = (size_t)o->channels * (size_t)o->height * (size_t)o->width;
    nrt_images *j = calloc(1, sizeof *j);
    int32_t *label = target_kind == NRT_TARGET_CLASS ? malloc(sizeof *label * l.n) : NULL;
    float *x = malloc(sizeof(float) * dim * l.n);
    if (!j || !x || (target_kind == NRT_TARGET_CLASS && !label)) {
        free(j);
        free(x);
        free(label);
        list_free(&l);
        return nrt_errorf(err, "out of memory");
    }
    *j = (nrt_images){.name = src->path, .list = l, .o = *o, .tf = *o->tf, .x = x,
                      .first_bad = (size_t)-1};
    j->o.tf = &j->tf;
    j->state = calloc(l.n, sizeof *j->state);
    j->sched = malloc(sizeof *j->sched * l.n);
    j->thread = calloc((size_t)(o->workers > 1 ? o->workers : 1), sizeof *j->thread);
    atomic_init(&j->next, 0);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (!j->state || !j->sched || !j->thread) {
        nrt_images_close(j);
        free(x);
        free(label);
        return nrt_errorf(err, "out of memory");
    }
    for (size_t i = 0; label && i < l.n; i++)
        label[i] = l.row[i].label;
    out->n = l.n;
    out->dim = dim;
    out->x = x;
    out->label = label;
    *handle = j;
    return 0;
}

int nrt_images_start(nrt_images *j, const nrt_order *order, size_t start, nrt_error *err)
{
    const size_t n = j->list.n;
    if (order) { /* order from start, then what lies before it */
        start = n ? start % n : 0;
        nrt_order_fill(order, start, n - start, j->sched);
        nrt_order_fill(order, 0, start, j->sched + (n - start));
    } else {
        for (size_t k = 0; k < n; k++)
            j->sched[k] = (uint32_t)k;
    }
    const int nt = (size_t)j->o.workers > n ? (int)n : j->o.workers > 1 ? j->o.workers : 1;
    while (j->nthreads < nt)
        if (pthread_create(&j->thread[j->nthreads], NULL, worker, j) == 0)
            j->nthreads++;
        else if (j->nthreads > 0)
            break; /* fewer threads will do */
        else
            return nrt_errorf(err, "cannot start a thread to decode %s", j->name);
    return 0;
}

int nrt_images_wait(nrt_images *j, size_t i, nrt_error *err)
{
    if (atomic_load_explicit(&j->state[i], memory_order_acquire) == DONE)
        return 0;
    pthread_mutex_lock(&j->mu);
    while (atomic_load(&j->state[i]) == PENDING && !j->stop)
        pthread_cond_wait(&j->cv, &j->mu);
    const int ok = atomic_load(&j->state[i]) == DONE;
    if (!ok)
        *err = j->first;
    pthread_mutex_unlock(&j->mu);
    return ok ? 0 : -1;
}

int nrt_images_load(const nrt_source *src, const nrt_images_opts *o, int target_kind,
                    int ncls, nrt_dataset *out, size_t *skipped, nrt_error *first_skipped,
                    char ***paths, nrt_error *err)
{
    *skipped = 0;
    if (paths)
        *paths = NULL;
    nrt_images *j;
    if (nrt_images_open(src, o, target_kind, ncls, out, &j, err))
        return -1;
    if (nrt_images_start(j, NULL, 0, err)) {
        nrt_images_close(j);
        nrt_dataset_free(out);
        return -1;
    }
    for (int t = 0; t < j->nthreads; t++) /* every row decoded, or a failure */
        pthread_join(j->thread[t], NULL);
    j->nthreads = 0;

    const size_t n = out->n, dim = out->dim;
    int rc = 0;
    size_t kept = 0;
    if (j->first_bad != (size_t)-1 && !o->skip_bad) {
        *err = j->first;
        rc = -1;
    } else {
        for (size_t i = 0; i < n; i++) { /* the bad ones out, the order kept */
            if (j->state[i] != DONE)
                continue;
            if (kept != i) {
                memmove(out->x + kept * dim, out->x + i * dim, sizeof(float) * dim);
                if (out->label)
                    out->label[kept] = out->label[i];
            }
            kept++;
        }
        *skipped = n - kept;
        if (*skipped)
            *first_skipped = j->first;
        if (kept == 0)
            rc = nrt_errorf(err, "%s: none of its %zu images could be read; the first: %s",
                            src->path, n, j->first.msg);
    }
    if (rc == 0 && paths) { /* the kept rows' paths, taken from the list */
        if (!(*paths = malloc(sizeof **paths * kept)))
            rc = nrt_errorf(err, "out of memory");
        for (size_t i = 0, k = 0; rc == 0 && i < n; i++)
            if (j->state[i] == DONE) {
                (*paths)[k++] = j->list.row[i].path;
                j->list.row[i].path = NULL;
            }
    }
    nrt_images_close(j);
    out->n = kept;
    if (rc)
        nrt_dataset_free(out);
    return rc;
}
