/*
 * test_images.c — unit test of runtime/images.c and runtime/loader.c.
 *
 *   test_images                      the checks below
 *   test_images --dump LIST C H W RH RW OUT
 *                                    LIST read for an input [C, H, W] with
 *                                    resize(RH, RW) (0 0: none) and
 *                                    to_tensor, its floats written to OUT
 *                                    (tests/images.sh compares them with
 *                                    PIL's and torchvision's, exactly)
 *
 * The checks write small PNGs with known pixels (stb_image_write, which
 * Debian's libstb carries beside stb_image) and read them back:
 * PIL's grey conversion and its rounding, the grey-to-RGB and alpha
 * cases, to_tensor and normalize, resize to the same size as a copy, the
 * order of a list and its labels, --skip-bad's count and the first bad
 * line, folders with nothing in them (an error naming the folder: under
 * test_images_ubsan, built with -fsanitize=undefined, also no undefined
 * behaviour on the way, such as qsort of no names), the loader's batches (every sample once an epoch, in the order's
 * order, flipped exactly where nrt_flip says, the same for 1 and 5
 * workers, and a resumed epoch's batches those of an unbroken one).
 *
 * Prints one line to stderr per failed check and a summary to stdout;
 * exits 0 when every check passed, 1 otherwise, 77 (skipped) in a
 * runtime built without stb_image.
 */
#include "netrt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef NETRT_HAVE_STB
#include <stb_image_write.h>
#endif

#include "check.h"

static int dump(char **argv)
{
    nrt_transforms tf = {.resize_h = atoi(argv[5]), .resize_w = atoi(argv[6]), .to_tensor = 1};
    nrt_images_opts o = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), &tf, 2, 0};
    nrt_source src = {.kind = "images", .path = argv[1]};
    nrt_dataset d;
    size_t skipped;
    nrt_error first, err;
    if (nrt_images_load(&src, &o, NRT_TARGET_CLASS, 1000, &d, &skipped, &first, NULL, &err)) {
        fprintf(stderr, "test_images: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(argv[7], "wb");
    int ok = f && fwrite(d.x, sizeof(float), d.n * d.dim, f) == d.n * d.dim;
    ok &= f && fclose(f) == 0;
    nrt_dataset_free(&d);
    return ok ? 0 : 1;
}

#ifdef NETRT_HAVE_STB
static char dir[64];

static char *path(const char *name)
{
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_text(const char *name, const char *text)
{
    FILE *f = fopen(path(name), "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A 3x2 image of n channels whose byte k is k * 11 + seed. */
static void write_png(const char *name, int n, int seed)
{
    unsigned char px[3 * 2 * 4];
    for (int k = 0; k < 3 * 2 * n; k++)
        px[k] = (unsigned char)(k * 11 + seed);
    stbi_write_png(path(name), 3, 2, n, px, 3 * n);
}

static int load(const char *list, int c, const nrt_transforms *tf, int skip, nrt_dataset *d,
                size_t *skipped, nrt_error *first, nrt_error *err)
{
    nrt_images_opts o = {c, 2, 3, tf, 3, skip};
    nrt_source src = {.kind = "images", .path = path(list)};
    return nrt_images_load(&src, &o, NRT_TARGET_CLASS, 10, d, skipped, first, NULL, err);
}

static void conversions(void)
{
    write_png("rgb.png", 3, 0);
    write_png("grey.png", 1, 7);
    write_png("rgba.png", 4, 3);
    write_text("l.csv", "path,label\nrgb.png,4\ngrey.png,2\nrgba.png,9\n");
    nrt_transforms raw = {0};
    nrt_dataset d;
    size_t skipped;
    nrt_error first, err;
    /* grey: PIL's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 */
    int rc = load("l.csv", 1, &raw, 0, &d, &skipped, &first, &err);
    CHECK(rc == 0 && d.n == 3 && d.dim == 6, "grey load: %s", rc ? err.msg : "");
    if (rc == 0) {
        int ok = 1;
        for (int p = 0; p < 6; p++) {
            unsigned r = (unsigned)(p * 3 * 11), g = r + 11, b = r + 22;
            float want = (float)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
            ok &= d.x[p] == want;
            ok &= d.x[6 + p] == (float)(p * 11 + 7); /* grey stays */
            unsigned ra = (unsigned)(p * 4 * 11 + 3), ga = ra + 11, ba = ra + 22;
            ok &= d.x[12 + p] == (float)((ra * 19595 + ga * 38470 + ba * 7471 + 0x8000) >> 16);
        }
        CHECK(ok, "grey from RGB, grey and RGBA: not PIL's convert(\"L\")");
        CHECK(d.label[0] == 4 && d.label[1] == 2 && d.label[2] == 9, "labels out of order");
        nrt_dataset_free(&d);
    }
    /* RGB planes; grey repeated; to_tensor and normalize in float */
    nrt_transforms tn = {.to_tensor = 1, .normalize = 1, .mean = {0.5f, 0.25f, 0.125f},
                         .std = {0.5f, 2.0f, 0.25f}};
    rc = load("l.csv", 3, &tn, 0, &d, &skipped, &first, &err);
    CHECK(rc == 0 && d.n == 3 && d.dim == 18, "RGB load: %s", rc ? err.msg : "");
    if (rc == 0) {
        int ok = 1;
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 6; p++) {
                float v = (float)(p * 3 * 11 + c * 11) / 255.0f;
                ok &= d.x[c * 6 + p] == (v - tn.mean[c]) / tn.std[c];
                float g = (float)(p * 11 + 7) / 255.0f;
                ok &= d.x[18 + c * 6 + p] == (g - tn.mean[c]) / tn.std[c];
            }
        CHECK(ok, "RGB planes with to_tensor and normalize: other values");
        nrt_dataset_free(&d);
    }
    /* resize to the size it has: the pixels as they are */
    nrt_transforms same = {.resize_h = 2, .resize_w = 3};
    rc = load("l.csv", 3, &same, 0, &d, &skipped, &first, &err);
    CHECK(rc == 0 && d.x[5] == 5 * 33 && d.x[6] == 11, "resize to the same size changed pixels");
    if (rc == 0)
        nrt_dataset_free(&d);
}

static void bad_files(void)
{
    write_text("junk.png", "not a png");
    write_text("b.csv", "rgb.png,1\n\njunk.png,2\nmissing.png,3\ngrey.png,4\n");
    nrt_transforms raw = {0};
    nrt_dataset d;
    size_t skipped;
    nrt_error first, err;
    int rc = load("b.csv", 1, &raw, 0, &d, &skipped, &first, &err);
    char want[256];
    snprintf(want, sizeof want, "%s:3: %s: not an image stb_image can read", path("b.csv"),
             path("junk.png"));
    CHECK(rc != 0 && strstr(err.msg, want), "a bad image: expected '%s', got '%s'", want,
          err.msg);
    rc = load("b.csv", 1, &raw, 1, &d, &skipped, &first, &err);
    CHECK(rc == 0 && d.n == 2 && skipped == 2 && strstr(first.msg, want) &&
              d.label[0] == 1 && d.label[1] == 4,
          "skip_bad: %zu kept, %zu skipped, first '%s'", rc ? 0 : d.n, skipped, first.msg);
    if (rc == 0)
        nrt_dataset_free(&d);
}

/* A folder of class folders with none in it, and a class folder with only
 * an empty folder below it: an error naming the folder, no crash. */
static void empty_folders(void)
{
    nrt_transforms raw = {0};
    nrt_images_opts o = {1, 2, 3, &raw, 1, 0};
    nrt_source src = {.kind = "images", .path = path("empty")};
    nrt_dataset d;
    size_t skipped;
    nrt_error first, err;
    mkdir(path("empty"), 0700);
    int rc = nrt_images_load(&src, &o, NRT_TARGET_CLASS, 10, &d, &skipped, &first, NULL, &err);
    CHECK(rc != 0 && strstr(err.msg, "needs a folder for each class, and it has none"),
          "a folder with nothing in it: '%s'", rc ? err.msg : "loaded");
    mkdir(path("empty/c0"), 0700);
    mkdir(path("empty/c0/sub"), 0700);
    rc = nrt_images_load(&src, &o, NRT_TARGET_CLASS, 10, &d, &skipped, &first, NULL, &err);
    CHECK(rc != 0 && strstr(err.msg, "empty/c0: no image files in the class folder"),
          "a class folder with only an empty folder: '%s'", rc ? err.msg : "loaded");
    rmdir(path("empty/c0/sub"));
    rmdir(path("empty/c0"));
    rmdir(path("empty"));
}

/* Decoding as training runs: the samples, in any order waited for, are
 * those an eager load gives; a bad image fails the wait, naming it. */
static void streaming(void)
{
    nrt_transforms tn = {.to_tensor = 1};
    nrt_images_opts o = {3, 2, 3, &tn, 2, 0};
    nrt_source src = {.kind = "images", .path = path("l.csv")};
    nrt_dataset want, d;
    size_t skipped;
    nrt_error first, err;
    if (nrt_images_load(&src, &o, NRT_TARGET_CLASS, 10, &want, &skipped, &first, NULL, &err)) {
        CHECK(0, "eager load: %s", err.msg);
        return;
    }
    nrt_images *h;
    int rc = nrt_images_open(&src, &o, NRT_TARGET_CLASS, 10, &d, &h, &err);
    CHECK(rc == 0 && d.n == 3 && d.label[2] == 9, "open: %s", rc ? err.msg : "");
    if (rc == 0) {
        nrt_order order;
        nrt_order_init(&order, 7, 1, 3, 1);
        rc = nrt_images_start(h, &order, 2, &err);
        int ok = rc == 0;
        for (size_t i = 3; ok && i-- > 0;)
            ok = nrt_images_wait(h, i, &err) == 0;
        CHECK(ok && !memcmp(d.x, want.x, sizeof(float) * 18), "streamed samples differ: %s",
              ok ? "" : err.msg);
        nrt_images_close(h);
        nrt_dataset_free(&d);
    }
    nrt_dataset_free(&want);

    src.path = path("b.csv"); /* rgb, junk (line 3), missing (line 4), grey */
    rc = nrt_images_open(&src, &o, NRT_TARGET_CLASS, 10, &d, &h, &err);
    CHECK(rc == 0 && d.n == 4, "open b.csv: %s", rc ? err.msg : "");
    if (rc == 0) {
        rc = nrt_images_start(h, NULL, 0, &err);
        char line3[160], line4[160];
        snprintf(line3, sizeof line3, "b.csv:3: %s: not an image", path("junk.png"));
        snprintf(line4, sizeof line4, "b.csv:4: %s: cannot open", path("missing.png"));
        rc = rc || nrt_images_wait(h, 1, &err) == 0;
        CHECK(!rc && (strstr(err.msg, line3) || strstr(err.msg, line4)),
              "waiting for a bad image: '%s'", err.msg);
        nrt_images_close(h);
        nrt_dataset_free(&d);
    }
}

/* Runs an epoch of the loader from start and checks every batch. */
static void epoch(const nrt_dataset *d, int workers, size_t start, int flip, float *seen)
{
    const uint64_t key = 99, e = 3, cut = nrt_dropout_cut(0.5);
    nrt_loader *l;
    nrt_error err;
    int rc = nrt_loader_open(d, NULL, 1, 2, 3, 0.5, key, 4, workers, &l, &err);
    CHECK(rc == 0, "loader: %s", rc ? err.msg : "");
    if (rc)
        return;
    nrt_order order;
    nrt_order_init(&order, 5, e, d->n, 1);
    nrt_loader_epoch(l, &order, e, start, 4);
    nrt_batch b;
    size_t pos = start;
    int ok = 1, flips = 0;
    while (nrt_loader_next(l, &b, &err) == 0) {
        for (int k = 0; k < b.n; k++, pos++) {
            uint32_t i = nrt_order_at(&order, (uint32_t)pos);
            int f = nrt_flip(key, e, i, cut);
            flips += f;
            for (int r = 0; r < 2; r++)
                for (int x = 0; x < 3; x++)
                    ok &= b.x[k * 6 + r * 3 + x] == d->x[i * 6 + r * 3 + (f ? 2 - x : x)];
            ok &= b.label[k] == d->label[i];
            memcpy(seen + pos * 6, b.x + k * 6, sizeof(float) * 6);
        }
    }
    CHECK(ok && pos == d->n, "loader (%d workers, from %zu): wrong batches", workers, start);
    CHECK(!flip || (flips > 0 && flips < (int)(d->n - start)), "loader: %d of %zu flipped",
          flips, d->n - start);
    nrt_loader_close(l);
}

static void loader(void)
{
    nrt_dataset d = {.n = 37, .dim = 6};
    d.x = malloc(sizeof(float) * 37 * 6);
    d.label = malloc(sizeof(int32_t) * 37);
    float *a = calloc(37 * 6, sizeof(float)), *b = calloc(37 * 6, sizeof(float));
    if (!d.x || !d.label || !a || !b)
        return;
    for (int i = 0; i < 37 * 6; i++)
        d.x[i] = (float)i;
    for (int i = 0; i < 37; i++)
        d.label[i] = i % 10;
    epoch(&d, 1, 0, 1, a);
    epoch(&d, 5, 0, 1, b);
    CHECK(!memcmp(a, b, sizeof(float) * 37 * 6), "1 and 5 workers: other batches");
    memset(b, 0, sizeof(float) * 37 * 6);
    epoch(&d, 2, 13, 0, b);
    CHECK(!memcmp(a + 13 * 6, b + 13 * 6, sizeof(float) * 24 * 6),
          "an epoch resumed at sample 13: other batches than the unbroken one's");
    free(a);
    free(b);
    nrt_dataset_free(&d);
}
#endif

int main(int argc, char **argv)
{
    if (argc == 9 && !strcmp(argv[1], "--dump"))
        return dump(argv + 1);
#ifdef NETRT_HAVE_STB
    snprintf(dir, sizeof dir, "%s/netc-images.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    conversions();
    bad_files();
    empty_folders();
    streaming();
    loader();
    const char *names[] = {"rgb.png", "grey.png", "rgba.png", "junk.png", "l.csv", "b.csv"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        remove(path(names[i]));
    rmdir(dir);
    return check_summary("test_images");
#else
    printf("test_images: the runtime was built without stb_image\n");
    return 77;
#endif
}
