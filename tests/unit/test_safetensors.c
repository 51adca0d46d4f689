/*
 * test_safetensors.c — unit test of runtime/safetensors.c.
 *
 *   test_safetensors
 *       Runs every check in a fresh directory under $TMPDIR (or /tmp),
 *       removed afterwards.  Prints each failed check to stderr and one
 *       summary line to stdout; exits 0 if all passed, 1 otherwise.
 *
 *   test_safetensors --write FILE
 *       Writes the interop file FILE with nrt_safetensors_save, for
 *       tests/unit/safetensors_interop.py --read FILE to check with the
 *       Python safetensors library: "a" [2, 3] = 0..5, "b.weight" [4] =
 *       1.5 * i, "s" [] = 42.5, "w4" [2, 1, 2, 3] = 0.25 * i - 1, "esc\"ape\\
 *       \n\u00e9" [1] = 7, and __metadata__ {"format": "pt", "note": "x\"y"}.
 *
 *   test_safetensors --read FILE
 *       Checks FILE as tests/unit/safetensors_interop.py --write FILE wrote
 *       it with the Python safetensors library: "a" [2, 3] = 0..5 and
 *       "b.weight" [4] = 1.5 * i, float32.
 *
 * Both modes exit 0 on success and 1 on failure.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "netrt.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int nchecks, nfailed;

#define CHECK(cond) check(!!(cond), #cond, __LINE__)

static int check(int ok, const char *what, int line)
{
    nchecks++;
    if (!ok) {
        nfailed++;
        fprintf(stderr, "test_safetensors.c:%d: check failed: %s\n", line,
                what);
    }
    return ok;
}

static char dir[256];

/* dir/name, in a static buffer (two in rotation). */
static const char *at(const char *name)
{
    static char buf[2][512];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* The whole file, malloc'd (NULL if unreadable); its size in *n. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1024, len = 0, got;
    unsigned char *b = malloc(cap);
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

/* A file from a header text and n bytes of data: the 8-byte length, the
 * header unpadded, the data. */
static void write_st(const char *path, const char *header, const void *data,
                     size_t n)
{
    size_t hn = strlen(header);
    unsigned char *b = malloc(8 + hn + n + 1);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)hn >> (8 * k));
    memcpy(b + 8, header, hn);
    if (n)
        memcpy(b + 8 + hn, data, n);
    CHECK(write_bytes(path, b, 8 + hn + n) == 0);
    free(b);
}

/* Opens path, which must fail with a message that equals (exact) or
 * contains "path: not a safetensors file (" + why + ")" or why. */
static void expect_bad(const char *path, const char *why, int exact,
                       int line)
{
    nrt_st_file *f = (nrt_st_file *)&f; /* must be reset to NULL */
    nrt_error err = {{0}};
    int rc = nrt_safetensors_open(path, &f, &err);
    char want[700];
    snprintf(want, sizeof want, "%s: not a safetensors file (%s)", path, why);
    int ok = rc == -1 && f == NULL &&
             (exact ? strcmp(err.msg, want) == 0
                    : strstr(err.msg, why) != NULL &&
                          strncmp(err.msg, want, strlen(path) + 26) == 0);
    nchecks++;
    if (!ok) {
        nfailed++;
        fprintf(stderr, "test_safetensors.c:%d: open %s: rc %d, message\n"
                "  got:  %s\n  want: %s%s\n", line, path, rc, err.msg,
                exact ? "" : "... ", exact ? want : why);
    }
    if (rc == 0)
        nrt_safetensors_close(f);
}

#define EXPECT_BAD(path, why) expect_bad((path), (why), 0, __LINE__)
#define EXPECT_BAD_EXACT(path, why) expect_bad((path), (why), 1, __LINE__)

/* Header text + data written, then expected to be rejected. */
static void bad_header(const char *header, const void *data, size_t n,
                       const char *why, int exact, int line)
{
    const char *path = at("bad.safetensors");
    write_st(path, header, data, n);
    expect_bad(path, why, exact, line);
}

#define BAD_HEADER(h, d, n, why) bad_header((h), (d), (n), (why), 0, __LINE__)
#define BAD_HEADER_EXACT(h, d, n, why) \
    bad_header((h), (d), (n), (why), 1, __LINE__)

static int files_equal(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *pa = read_bytes(a, &na), *pb = read_bytes(b, &nb);
    int eq = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return eq;
}

/* Number of directory entries of d whose name contains s. */
static int count_entries(const char *d, const char *s)
{
    DIR *dp = opendir(d);
    if (!dp)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        if (strstr(e->d_name, s))
            n++;
    closedir(dp);
    return n;
}

static void rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *dp = opendir(path);
        struct dirent *e;
        while (dp && (e = readdir(dp)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rmtree(sub);
        }
        if (dp)
            closedir(dp);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Checks that f holds tensor want, F32, with the same shape and values. */
static int same_tensor(const nrt_st_file *f, const nrt_tensor *want)
{
    const char *dt = "unset";
    const nrt_tensor *t = nrt_safetensors_find(f, want->name, &dt);
    if (!t || !dt || strcmp(dt, "F32") != 0)
        return 0;
    if (strcmp(t->name, want->name) != 0 || t->rank != want->rank)
        return 0;
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dim[d] != want->dim[d])
            return 0;
        n *= (size_t)t->dim[d];
    }
    if ((uintptr_t)t->data % 4 != 0)
        return 0;
    return n == 0 || memcmp(t->data, want->data, n * sizeof(float)) == 0;
}

/* ------------------------------------------------------------ the checks */

static float v0[1] = {3.25f};
static float v1[5] = {1, -2, 3.5f, 1e-30f, -0.0f};
static float v2[6] = {0, 1, 2, 3, 4, 5};
static float v3[24], v4[120];

static const nrt_tensor tens[] = {
    {"scalar", 0, {0}, {v0}, NRT_F32},
    {"0.weight", 1, {5}, {v1}, NRT_F32},
    {"quo\"te and back\\slash", 2, {2, 3}, {v2}, NRT_F32},
    {"ctl\x01\n\t/\xc3\xa9\xf0\x9f\x98\x80", 3, {2, 3, 4}, {v3}, NRT_F32},
    {"fc.w", 4, {2, 3, 4, 5}, {v4}, NRT_F32},
    {"empty", 2, {0, 3}, {NULL}, NRT_F32},
};
#define NTENS ((int)(sizeof tens / sizeof tens[0]))

static const char *const meta[] = {"format", "pt", "k\"ey", "v\\al\x1f"};

static void test_round_trip(void)
{
    for (int i = 0; i < 24; i++)
        v3[i] = (float)i * 0.5f - 3;
    for (int i = 0; i < 120; i++)
        v4[i] = 1.0f / (float)(i + 1);
    nrt_error err = {{0}};
    const char *p1 = at("rt.safetensors");
    if (!CHECK(nrt_safetensors_save(p1, tens, NTENS, meta, 2, &err) == 0)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK(count_entries(dir, ".tmp.") == 0);

    /* The file as bytes: header length a multiple of 8, escapes as wanted. */
    size_t n;
    unsigned char *b = read_bytes(p1, &n);
    if (!CHECK(b && n > 8))
        return;
    uint64_t hn = 0;
    for (int k = 0; k < 8; k++)
        hn |= (uint64_t)b[k] << (8 * k);
    CHECK(hn % 8 == 0 && 8 + hn <= n);
    size_t data = 4 * (1 + 5 + 6 + 24 + 120);
    CHECK(n == 8 + hn + data);
    char *h = malloc(hn + 1);
    memcpy(h, b + 8, hn);
    h[hn] = '\0';
    const char *head = "{\"__metadata__\":{\"format\":\"pt\",\"k\\\"ey\":"
                       "\"v\\\\al\\u001f\"},\"scalar\":{\"dtype\":\"F32\","
                       "\"shape\":[],\"data_offsets\":[0,4]},\"0.weight\":{";
    CHECK(strncmp(h, head, strlen(head)) == 0);
    CHECK(strstr(h, "\"quo\\\"te and back\\\\slash\":{\"dtype\":\"F32\","
                    "\"shape\":[2,3],\"data_offsets\":[24,48]}"));
    CHECK(strstr(h, "\"ctl\\u0001\\u000a\\u0009/\xc3\xa9\xf0\x9f\x98\x80\""));
    CHECK(strstr(h, "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],"
                    "\"data_offsets\":[624,624]}}"));
    /* Padded with fewer than 8 spaces after the closing brace. */
    char *close = strrchr(h, '}');
    CHECK(strlen(h) == hn && close && hn - (size_t)(close - h) - 1 < 8 &&
          strspn(close + 1, " ") == hn - (size_t)(close - h) - 1);
    CHECK(memcmp(b + 8 + hn, v0, 4) == 0 && memcmp(b + 8 + hn + 4, v1, 20)
          == 0);
    free(h);
    free(b);

    /* Reading it back. */
    nrt_st_file *f = NULL;
    if (!CHECK(nrt_safetensors_open(p1, &f, &err) == 0 && f)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK(nrt_safetensors_count(f) == NTENS);
    for (int i = 0; i < NTENS; i++) {
        const char *nm = nrt_safetensors_name(f, i);
        CHECK(nm && strcmp(nm, tens[i].name) == 0);
        if (!CHECK(same_tensor(f, &tens[i])))
            fprintf(stderr, "  tensor %d differs\n", i);
    }
    CHECK(nrt_safetensors_name(f, -1) == NULL);
    CHECK(nrt_safetensors_name(f, NTENS) == NULL);
    const char *dt = "unset";
    CHECK(nrt_safetensors_find(f, "nope", &dt) == NULL && dt == NULL);
    CHECK(nrt_safetensors_find(f, "fc.w", NULL) != NULL);
    CHECK(nrt_safetensors_find(f, "__metadata__", &dt) == NULL && !dt);

    /* Saved again from what was read: the same bytes; and saved twice. */
    nrt_tensor again[NTENS];
    for (int i = 0; i < NTENS; i++) {
        const nrt_tensor *t = nrt_safetensors_find(f, nrt_safetensors_name(f,
                                                   i), NULL);
        again[i] = t ? *t : tens[i];
    }
    const char *p2 = at("rt2.safetensors");
    CHECK(nrt_safetensors_save(p2, again, NTENS, meta, 2, &err) == 0);
    CHECK(files_equal(p1, p2));
    nrt_safetensors_close(f);
    CHECK(nrt_safetensors_save(p2, tens, NTENS, meta, 2, &err) == 0);
    CHECK(files_equal(p1, p2));

    /* The mode a plain fopen would give, not mkstemp's 0600. */
    mode_t mask = umask(022);
    umask(mask);
    struct stat st;
    CHECK(stat(p1, &st) == 0 && (st.st_mode & 0777) == (0666 & ~mask));

    /* No tensors, no metadata: "{}" padded to 8 bytes. */
    const char *p3 = at("none.safetensors");
    CHECK(nrt_safetensors_save(p3, NULL, 0, NULL, 0, &err) == 0);
    b = read_bytes(p3, &n);
    CHECK(b && n == 16 && b[0] == 8 && memcmp(b + 8, "{}      ", 8) == 0);
    free(b);
    CHECK(nrt_safetensors_open(p3, &f, &err) == 0 &&
          nrt_safetensors_count(f) == 0);
    nrt_safetensors_close(f);
    nrt_safetensors_close(NULL);
    CHECK(nrt_safetensors_count(NULL) == 0);
    CHECK(nrt_safetensors_find(NULL, "x", &dt) == NULL && dt == NULL);
}

static void test_save_errors(void)
{
    nrt_error err = {{0}};
    char want[600];
    float x[4] = {0};

    /* Into a directory that does not exist: an error, no file. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/w.safetensors", dir);
    CHECK(nrt_safetensors_save(missing, tens, 1, NULL, 0, &err) == -1);
    snprintf(want, sizeof want, "%s: cannot write: No such file or directory", missing);
    if (!CHECK(strcmp(err.msg, want) == 0))
        fprintf(stderr, "  got: %s\n", err.msg);
    struct stat st;
    CHECK(stat(at("no"), &st) != 0);

    /* rename fails (the target is a directory): the temporary removed. */
    CHECK(mkdir(at("sub"), 0777) == 0);
    CHECK(mkdir(at("sub/target"), 0777) == 0);
    CHECK(nrt_safetensors_save(at("sub/target"), tens, 1, NULL, 0, &err)
          == -1);
    snprintf(want, sizeof want, "%s: cannot write: %s", at("sub/target"),
             strerror(EISDIR));
    if (!CHECK(strcmp(err.msg, want) == 0))
        fprintf(stderr, "  got: %s\n", err.msg);
    CHECK(count_entries(at("sub"), ".tmp.") == 0);

    /* Over an existing file: replaced. */
    const char *p = at("sub/old.safetensors");
    CHECK(write_bytes(p, "old contents, not safetensors", 29) == 0);
    nrt_tensor t = {"x", 1, {4}, {x}, NRT_F32};
    CHECK(nrt_safetensors_save(p, &t, 1, NULL, 0, &err) == 0);
    nrt_st_file *f = NULL;
    CHECK(nrt_safetensors_open(p, &f, &err) == 0 &&
          nrt_safetensors_find(f, "x", NULL));
    nrt_safetensors_close(f);
    CHECK(count_entries(at("sub"), ".tmp.") == 0);

    /* Bad tensors: refused before any file is made. */
    const char *q = at("sub/refused.safetensors");
    nrt_tensor r5 = {"r5", 5, {1, 1, 1, 1}, {x}, NRT_F32};
    CHECK(nrt_safetensors_save(q, &r5, 1, NULL, 0, &err) == -1);
    snprintf(want, sizeof want, "%s: tensor 'r5': rank 5 is not in 0..4", q);
    CHECK(strcmp(err.msg, want) == 0);
    nrt_tensor two[2] = {{"d", 1, {4}, {x}, NRT_F32}, {"d", 0, {0}, {x}, NRT_F32}};
    CHECK(nrt_safetensors_save(q, two, 2, NULL, 0, &err) == -1);
    snprintf(want, sizeof want, "%s: duplicate tensor name 'd'", q);
    CHECK(strcmp(err.msg, want) == 0);
    nrt_tensor neg = {"n", 2, {2, -1}, {x}, NRT_F32};
    CHECK(nrt_safetensors_save(q, &neg, 1, NULL, 0, &err) == -1);
    nrt_tensor nodata = {"n", 1, {3}, {NULL}, NRT_F32};
    CHECK(nrt_safetensors_save(q, &nodata, 1, NULL, 0, &err) == -1);
    nrt_tensor md = {"__metadata__", 0, {0}, {x}, NRT_F32};
    CHECK(nrt_safetensors_save(q, &md, 1, NULL, 0, &err) == -1);
    nrt_tensor badutf = {"\xff", 0, {0}, {x}, NRT_F32};
    CHECK(nrt_safetensors_save(q, &badutf, 1, NULL, 0, &err) == -1);
    const char *dupmeta[] = {"a", "1", "a", "2"};
    CHECK(nrt_safetensors_save(q, &t, 1, dupmeta, 2, &err) == -1);
    CHECK(stat(q, &st) != 0);
    CHECK(count_entries(at("sub"), ".tmp.") == 0);
}

static void test_hand_written(void)
{
    nrt_error err = {{0}};
    nrt_st_file *f = NULL;
    const char *p = at("hand.safetensors");

    /* Metadata, whitespace, escapes, padding; an F16 tensor first, so that
     * the F32 one after it lies at an offset that is not a multiple of 4. */
    const char *h =
        "{ \"__metadata__\" : { \"format\" : \"pt\", \"\" : \"\\u00e9\" },\n"
        "  \"half\": {\"dtype\": \"F16\", \"shape\": [1], "
        "\"data_offsets\": [0, 2], \"extra\": [null, true, false, -1.5e3]},\n"
        "  \"w\\u00e9\\ud83d\\ude00\\/\": {\"shape\":[3],\"dtype\":\"F32\","
        "\"data_offsets\":[2,14]},"
        "\"i\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [14, 22]}"
        "}        ";
    unsigned char data[22] = {0x00, 0x3c};
    float w[3] = {1.5f, -2.0f, 1e10f};
    memcpy(data + 2, w, 12);
    data[14] = 7;
    write_st(p, h, data, sizeof data);
    if (!CHECK(nrt_safetensors_open(p, &f, &err) == 0)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK(nrt_safetensors_count(f) == 3);
    CHECK(strcmp(nrt_safetensors_name(f, 0), "half") == 0);
    CHECK(strcmp(nrt_safetensors_name(f, 1),
                 "w\xc3\xa9\xf0\x9f\x98\x80/") == 0);
    CHECK(strcmp(nrt_safetensors_name(f, 2), "i") == 0);
    const char *dt = NULL;
    CHECK(nrt_safetensors_find(f, "half", &dt) == NULL && dt &&
          strcmp(dt, "F16") == 0);
    const nrt_tensor *t = nrt_safetensors_find(f, "i", &dt);
    /* at offset 14: an I64 whose data is not 8-aligned, copied */
    CHECK(t && dt && strcmp(dt, "I64") == 0 && t->dtype == NRT_I64 && t->rank == 0);
    if (t) {
        CHECK((uintptr_t)t->i64 % 8 == 0);
        CHECK(t->i64[0] == 7);
    }
    t = nrt_safetensors_find(
        f, "w\xc3\xa9\xf0\x9f\x98\x80/", &dt);
    CHECK(t && dt && strcmp(dt, "F32") == 0 && t->dtype == NRT_F32);
    if (t) {
        CHECK(t->rank == 1 && t->dim[0] == 3);
        CHECK((uintptr_t)t->data % 4 == 0);
        CHECK(t->data[0] == 1.5f && t->data[1] == -2.0f &&
              t->data[2] == 1e10f);
    }
    nrt_safetensors_close(f);

    /* The same bytes as the safetensors library writes for
     * save({"z": zeros(2, f32), "a": ones(1, f16), "s": array(3, f32)},
     * metadata={"k": "v"}). */
    const char *py =
        "{\"__metadata__\":{\"k\":\"v\"},\"s\":{\"dtype\":\"F32\",\"shape\":"
        "[],\"data_offsets\":[0,4]},\"z\":{\"dtype\":\"F32\",\"shape\":[2],"
        "\"data_offsets\":[4,12]},\"a\":{\"dtype\":\"F16\",\"shape\":[1],"
        "\"data_offsets\":[12,14]}}     ";
    unsigned char pd[14] = {0, 0, 0x40, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0x3c};
    write_st(p, py, pd, sizeof pd);
    CHECK(nrt_safetensors_open(p, &f, &err) == 0);
    t = nrt_safetensors_find(f, "s", &dt);
    CHECK(t && t->rank == 0 && t->data[0] == 3.0f);
    t = nrt_safetensors_find(f, "z", &dt);
    CHECK(t && t->rank == 1 && t->dim[0] == 2 && t->data[1] == 0.0f);
    nrt_safetensors_close(f);
}

/* I64 tensors (a batchnorm's num_batches_tracked) beside F32 ones: written
 * little-endian with dtype "I64", read back exactly, 8-aligned. */
static void test_i64(void)
{
    nrt_error err = {{0}};
    nrt_st_file *f = NULL;
    const char *p = at("i64.safetensors");
    static const int64_t count[1] = {123456789012345LL};
    static const int64_t many[4] = {0, -1, INT64_MAX, INT64_MIN};
    static const float w[3] = {1.5f, -2.0f, 0.25f};
    /* a F32 of 3 values first, so that the I64s after it start at byte 12 of
     * the data unless the writer keeps them where they belong */
    nrt_tensor t[3] = {{.name = "w", .rank = 1, .dim = {3}, .data = w},
                       {.name = "n", .rank = 0, .i64 = count, .dtype = NRT_I64},
                       {.name = "v", .rank = 2, .dim = {2, 2}, .i64 = many, .dtype = NRT_I64}};
    if (!CHECK(nrt_safetensors_save(p, t, 3, NULL, 0, &err) == 0)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    size_t len;
    unsigned char *b = read_bytes(p, &len);
    if (CHECK(b != NULL)) {
        const char *want = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                           "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]},"
                           "\"v\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[20,52]}}";
        CHECK(len > 8 + strlen(want) && memcmp(b + 8, want, strlen(want)) == 0);
        /* little-endian on disk: the scalar's low byte first */
        size_t h = 0;
        for (int k = 0; k < 8; k++)
            h |= (size_t)b[k] << (8 * k);
        CHECK(len == 8 + h + 52 && b[8 + h + 12] == (unsigned char)(count[0] & 0xff) &&
              b[8 + h + 19] == (unsigned char)((uint64_t)count[0] >> 56));
        free(b);
    }
    if (!CHECK(nrt_safetensors_open(p, &f, &err) == 0)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    const char *dt = NULL;
    const nrt_tensor *n = nrt_safetensors_find(f, "n", &dt);
    CHECK(n && dt && strcmp(dt, "I64") == 0 && n->dtype == NRT_I64 && n->rank == 0 &&
          (uintptr_t)n->i64 % 8 == 0 && n->i64[0] == count[0]);
    const nrt_tensor *v = nrt_safetensors_find(f, "v", &dt);
    CHECK(v && v->dtype == NRT_I64 && v->rank == 2 && v->dim[0] == 2 && v->dim[1] == 2 &&
          (uintptr_t)v->i64 % 8 == 0 && memcmp(v->i64, many, sizeof many) == 0);
    const nrt_tensor *x = nrt_safetensors_find(f, "w", &dt);
    CHECK(x && x->dtype == NRT_F32 && memcmp(x->data, w, sizeof w) == 0);
    nrt_safetensors_close(f);

    /* an I64 whose byte count does not fit its shape: refused */
    const char *h = "{\"n\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,12]}}    ";
    unsigned char data[12] = {0};
    write_st(p, h, data, sizeof data);
    CHECK(nrt_safetensors_open(p, &f, &err) == -1 && !f);
    /* a dtype netc cannot write: refused, no file */
    const char *q = at("i64_refused.safetensors");
    nrt_tensor bad = {.name = "b", .rank = 1, .dim = {1}, .i64 = count, .dtype = 7};
    CHECK(nrt_safetensors_save(q, &bad, 1, NULL, 0, &err) == -1);
    CHECK(strstr(err.msg, "unknown dtype") != NULL);
    struct stat st;
    CHECK(stat(q, &st) != 0);
}

/* Files of other formats given for weights: said what they are, and for
 * torch.save's, how to save safetensors instead; only when their first
 * bytes cannot be a header's length. */
static void test_foreign(void)
{
    const char *p = at("w.pt");
    static const char hint[] = "; in PyTorch, save the weights with: from safetensors.torch "
                               "import save_file; save_file(model.state_dict(), "
                               "\"model.safetensors\")";
    /* torch.save's zip (a local file header: version, flags, method, time,
     * CRC, sizes, name length, extra length, name); its older pickle (the
     * protocol, then the magic number as a LONG1); a plain pickle */
    static const unsigned char zip[46] = "PK\x03\x04\0\0\x08\x08\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
                                         "\0\0\x10\0\x12\0archive/data.pkl";
    static const unsigned char legacy[16] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                             0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e, 0x80};
    static const unsigned char pickle[14] = {0x80, 0x04, 0x95, 0x10, 0, 0, 0, 0,
                                             0, 0, 0, 0x7d, 0x94, 0x2e};
    const struct {
        const unsigned char *b;
        size_t n;
        const char *what;
    } torch[] = {
        {zip, sizeof zip, "a zip archive, as torch.save writes"},
        {legacy, sizeof legacy, "a pickle, as torch.save wrote before PyTorch 1.6"},
        {pickle, sizeof pickle, "a Python pickle"},
    };
    for (size_t i = 0; i < sizeof torch / sizeof torch[0]; i++) {
        nrt_st_file *f = NULL;
        nrt_error err = {{0}};
        char want[700];
        snprintf(want, sizeof want, "%s: not a safetensors file (%s)%s", p, torch[i].what, hint);
        CHECK(write_bytes(p, torch[i].b, torch[i].n) == 0);
        if (!CHECK(nrt_safetensors_open(p, &f, &err) == -1 && !f && !strcmp(err.msg, want)))
            fprintf(stderr, "  got:  %s\n  want: %s\n", err.msg, want);
    }

    /* text: a CSV file, or one with tabs and line ends (shown escaped) */
    p = at("data.csv");
    CHECK(write_bytes(p, "sepal_length,species\n5.1,0\n", 27) == 0);
    EXPECT_BAD_EXACT(p, "it begins with text, 'sepal_le', not a header length");
    CHECK(write_bytes(p, "1\t2\r\n3\t4\r\n", 10) == 0);
    EXPECT_BAD_EXACT(p, "it begins with text, '1\\x092\\x0d\\x0a3\\x094', not a header length");

    /* anything else as before: the length it would have */
    CHECK(write_bytes(p, "\xff\xe7\x76\x48\x17\0\0\0PK\x03\x04", 12) == 0);
    EXPECT_BAD_EXACT(p, "header length 99999999999 exceeds file size 12");
}

/* nrt_weights_load, for a model of fc.weight [2, 3], fc.bias [2] and a
 * batchnorm's buffers: a tensor of the right name but the wrong dtype or
 * shape, one holding NaN or an infinity, or a truncated file is refused,
 * naming the file and the tensor. */
static const nrt_param wparams[] = {
    {.name = "fc.weight", .rank = 2, .dim = {2, 3}, .offset = 0, .size = 6},
    {.name = "fc.bias", .rank = 1, .dim = {2}, .offset = 6, .size = 2},
};
static const nrt_buffer wbuffers[] = {
    {.name = "bn.running_var", .dtype = NRT_F32, .rank = 1, .dim = {2}, .offset = 0,
     .size = 2, .after = 2},
    {.name = "bn.num_batches_tracked", .dtype = NRT_I64, .rank = 0, .offset = 8, .size = 1,
     .after = 2},
};
static const nrt_model wmodel = {.name = "tiny", .params = wparams, .n_params = 2,
                                 .param_count = 8, .buffers = wbuffers, .n_buffers = 2,
                                 .buffer_bytes = 16};

/* Loads t[0..4) (saved to a file) into the model: the message, or "" */
static const char *load_tensors(const nrt_tensor *t, const char *path, nrt_error *err)
{
    float param[8];
    int64_t area[2];
    err->msg[0] = '\0';
    CHECK(nrt_safetensors_save(path, t, 4, NULL, 0, err) == 0);
    nrt_weights_load(&wmodel, param, area, path, err);
    return err->msg;
}

static void expect_refused(const nrt_tensor *t, const char *why, int line)
{
    nrt_error err;
    const char *p = at("weights.safetensors");
    char want[700];
    snprintf(want, sizeof want, "%s: %s", p, why);
    if (!check(!strcmp(load_tensors(t, p, &err), want), "message", line))
        fprintf(stderr, "  got:  %s\n  want: %s\n", err.msg, want);
}

static void test_weights(void)
{
    float param[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    int64_t area[2] = {0, 41}, got_area[2];
    const float running_var[2] = {0.5f, 2};
    memcpy(area, running_var, sizeof running_var);
    const char *p = at("weights.safetensors");
    nrt_error err = {{0}};
    CHECK(nrt_weights_save(&wmodel, param, area, NULL, p, &err) == 0);
    CHECK(nrt_weights_load(&wmodel, got, got_area, p, &err) == 0);
    CHECK(!memcmp(got, param, sizeof param) && !memcmp(got_area, area, sizeof area));

    nrt_tensor t[4];
    CHECK(nrt_weights_tensors(&wmodel, param, area, t) == 4);
    CHECK(!strcmp(load_tensors(t, p, &err), ""));
    const char *nan = "weights must be finite (were they saved by a run that diverged?)";
    char why[300];

    float w[6] = {1, 2, 3, 4, 5, NAN};
    t[0].data = w;
    snprintf(why, sizeof why, "tensor 'fc.weight' holds NaN at [1, 2] (1 non-finite value of "
             "6); %s", nan);
    expect_refused(t, why, __LINE__);
    w[5] = 6;
    w[1] = -INFINITY;
    snprintf(why, sizeof why, "tensor 'fc.weight' holds -inf at [0, 1] (1 non-finite value of "
             "6); %s", nan);
    expect_refused(t, why, __LINE__);
    t[0].data = param;
    const float rv[2] = {INFINITY, NAN};
    t[2].data = rv;
    snprintf(why, sizeof why, "tensor 'bn.running_var' holds inf at [0] (2 non-finite values "
             "of 2); %s", nan);
    expect_refused(t, why, __LINE__);
    t[2].data = running_var;

    /* the right names, the wrong dtype or shape */
    t[1].dtype = NRT_I64;
    expect_refused(t, "tensor 'fc.bias' has dtype I64; netc needs F32", __LINE__);
    t[1].dtype = NRT_F32;
    t[3].dtype = NRT_F32;
    expect_refused(t, "tensor 'bn.num_batches_tracked' has dtype F32; netc needs I64", __LINE__);
    t[3].dtype = NRT_I64;
    t[0].dim[0] = 3, t[0].dim[1] = 2;
    expect_refused(t, "tensor 'fc.weight' has shape [3, 2], the model expects [2, 3]", __LINE__);
    t[0].dim[0] = 2, t[0].dim[1] = 3;
    t[3].rank = 1, t[3].dim[0] = 1;
    expect_refused(t, "tensor 'bn.num_batches_tracked' has shape [1], the model expects []",
                   __LINE__);
    t[3].rank = 0;
    CHECK(!strcmp(load_tensors(t, p, &err), ""));

    /* a file cut short, in the data and in the header */
    size_t n;
    unsigned char *b = read_bytes(p, &n);
    if (!CHECK(b && n > 64))
        return;
    CHECK(write_bytes(p, b, n - 4) == 0);
    CHECK(nrt_weights_load(&wmodel, got, got_area, p, &err) == -1);
    CHECK(strstr(err.msg, p) == err.msg && strstr(err.msg, "tensor 'bn.num_batches_tracked': "
                                                  "data_offsets [40, 48] exceed the data "
                                                  "section of 44 bytes"));
    CHECK(write_bytes(p, b, 40) == 0);
    CHECK(nrt_weights_load(&wmodel, got, got_area, p, &err) == -1);
    CHECK(strstr(err.msg, p) == err.msg && strstr(err.msg, "exceeds file size 40"));
    free(b);
}

/* A small valid file (as bytes) the mutation tests start from. */
static unsigned char *valid_file(size_t *n)
{
    nrt_error err;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {7, 8};
    nrt_tensor t[3] = {{"a", 2, {2, 3}, {a}, NRT_F32}, {"b", 1, {2}, {b}, NRT_F32},
                       {"c", 0, {0}, {b}, NRT_F32}};
    const char *m[] = {"k", "v"};
    const char *p = at("valid.safetensors");
    if (nrt_safetensors_save(p, t, 3, m, 1, &err) != 0)
        return NULL;
    return read_bytes(p, n);
}

static void test_corrupt(void)
{
    const char *p = at("bad.safetensors");
    float z[8] = {0};

    /* Short files. */
    CHECK(write_bytes(p, "", 0) == 0);
    EXPECT_BAD_EXACT(p, "file is 0 bytes, too short for a header");
    CHECK(write_bytes(p, "\x10\0\0\0\0", 5) == 0);
    EXPECT_BAD_EXACT(p, "file is 5 bytes, too short for a header");

    /* Header lengths past the end of the file, or past the limit (in a
     * sparse file big enough for it). */
    unsigned char big[16] = {0xff, 0xe7, 0x76, 0x48, 0x17}; /* 99999999999 */
    CHECK(write_bytes(p, big, 16) == 0);
    EXPECT_BAD_EXACT(p, "header length 99999999999 exceeds file size 16");
    unsigned char huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    CHECK(write_bytes(p, huge, 8) == 0);
    EXPECT_BAD_EXACT(p, "header length 9223372036854775808 exceeds file "
                        "size 8");
    unsigned char lim[8] = {0x00, 0xc2, 0xeb, 0x0b}; /* 200000000 */
    FILE *fp = fopen(p, "wb");
    CHECK(fp && fwrite(lim, 1, 8, fp) == 8 &&
          ftruncate(fileno(fp), 8 + 200000000) == 0);
    if (fp)
        fclose(fp);
    EXPECT_BAD_EXACT(p, "header length 200000000 exceeds the limit of "
                        "100000000 bytes");

    /* Bad JSON. */
    BAD_HEADER_EXACT("{\"a\" 1}", NULL, 0,
                     "bad JSON at byte 5 of the header: expected ':'");
    BAD_HEADER_EXACT("[]", NULL, 0,
                     "bad JSON at byte 0 of the header: expected '{'");
    BAD_HEADER_EXACT("{} x", NULL, 0, "bad JSON at byte 3 of the header: "
                     "unexpected data after the header object");
    BAD_HEADER_EXACT("{\"a\":{},}", NULL, 0, "bad JSON at byte 8 of the "
                     "header: expected a string key");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\" \"shape\":[]}}", NULL, 0,
               "expected ',' or '}'");
    BAD_HEADER("{\"a\":[1 2]}", NULL, 0, "expected ',' or ']'");
    BAD_HEADER("{\"a", NULL, 0, "unterminated string");
    BAD_HEADER("{\"a\x01\":1}", NULL, 0, "control character in string");
    BAD_HEADER("{\"a\xc0\xaf\":1}", NULL, 0, "invalid UTF-8 in string");
    BAD_HEADER("{\"a\\ud800\":1}", NULL, 0, "unpaired surrogate");
    BAD_HEADER("{\"a\\udc00\\ud800\":1}", NULL, 0, "unpaired surrogate");
    BAD_HEADER("{\"a\\u12g4\":1}", NULL, 0, "invalid \\u escape");
    BAD_HEADER("{\"a\\x\":1}", NULL, 0, "invalid escape");
    BAD_HEADER("{\"a\":01}", NULL, 0, "expected ',' or '}'");
    BAD_HEADER("{\"a\":-}", NULL, 0, "bad number");
    BAD_HEADER("{\"a\":1.}", NULL, 0, "bad number");
    BAD_HEADER("{\"a\":tru}", NULL, 0, "expected a value");
    BAD_HEADER("{\"a\":", NULL, 0, "expected a value");
    BAD_HEADER("{\"a\":{\"b\":1}", NULL, 0, "expected ',' or '}'");
    BAD_HEADER("", NULL, 0, "expected '{'");
    char deep[300] = "{\"__metadata__\":";
    for (int i = 0; i < 100; i++)
        strcat(deep, "[");
    BAD_HEADER(deep, NULL, 0, "nesting too deep");

    /* Bad tensor entries. */
    BAD_HEADER_EXACT("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                     "\"data_offsets\":[0,12]}}", z, 12,
                     "tensor '0.weight': data_offsets [0, 12] do not match "
                     "shape [2, 2] of F32");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                     "\"data_offsets\":[0,16]}}", z, 8,
                     "tensor 'a': data_offsets [0, 16] exceed the data "
                     "section of 8 bytes");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                     "\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\","
                     "\"shape\":[4],\"data_offsets\":[8,24]}}", z, 24,
                     "tensors 'a' and 'b' overlap: data_offsets [0, 16] and "
                     "[8, 24]");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                     "\"data_offsets\":[4,8]}}", z, 8,
                     "bytes [0, 4) of the data section belong to no tensor");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                     "\"data_offsets\":[0,4]}}", z, 8,
                     "bytes [4, 8) of the data section belong to no tensor");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                     "\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\","
                     "\"shape\":[1],\"data_offsets\":[4,8]}}", z, 8,
                     "duplicate tensor name 'a'");
    BAD_HEADER_EXACT("{\"r\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],"
                     "\"data_offsets\":[0,4]}}", z, 4,
                     "tensor 'r': rank 5 exceeds the limit of 4");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],"
                     "\"data_offsets\":[0,8]}}", z, 8,
                     "tensor 'a': shape entry 0 is not a non-negative "
                     "integer");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],"
               "\"data_offsets\":[0,8]}}", z, 8,
               "shape entry 0 is not a non-negative integer");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],"
               "\"data_offsets\":[0,8]}}", z, 8,
               "shape entry 0 is not a non-negative integer");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}", z, 8,
               "shape [4294967296, 4294967296] is too large");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":2,"
               "\"data_offsets\":[0,8]}}", z, 8, "shape is not an array");
    BAD_HEADER_EXACT("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", z, 8,
                     "tensor 'a': no \"dtype\"");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", z, 8,
               "tensor 'a': no \"shape\"");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", z, 8,
               "tensor 'a': no \"data_offsets\"");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],"
               "\"data_offsets\":[0,8]}}", z, 8,
               "tensor 'a': duplicate key \"dtype\"");
    BAD_HEADER("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}",
               z, 8, "dtype is not a string");
    BAD_HEADER_EXACT("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],"
                     "\"data_offsets\":[0,8]}}", z, 8,
                     "tensor 'a': unknown dtype 'Q7'");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
               "\"data_offsets\":[0]}}", z, 8,
               "data_offsets is not a pair of non-negative integers");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
               "\"data_offsets\":[8,0]}}", z, 8,
               "data_offsets [8, 0] do not match shape [2] of F32");
    BAD_HEADER("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],"
               "\"data_offsets\":[0,1]}}", z, 1,
               "shape [3] of F4 is not a whole number of bytes");
    BAD_HEADER("{\"a\":[]}", NULL, 0, "tensor 'a': not a JSON object");
    BAD_HEADER("{\"a\\u0000b\":{}}", NULL, 0,
               "tensor name 'a' contains a NUL character");
    BAD_HEADER("{\"ctl\\n\":{\"dtype\":\"F32\",\"shape\":[3],"
               "\"data_offsets\":[0,8]}}", z, 8, "tensor 'ctl\\x0a'");
    BAD_HEADER("{\"__metadata__\":[]}", NULL, 0,
               "__metadata__ is not a JSON object");
    BAD_HEADER("{\"__metadata__\":{\"k\":1}}", NULL, 0,
               "__metadata__ value of 'k' is not a string");
    BAD_HEADER("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", NULL, 0,
               "duplicate __metadata__ key 'k'");
    BAD_HEADER("{\"__metadata__\":{},\"__metadata__\":{}}", NULL, 0,
               "duplicate key '__metadata__'");

    /* Not a file at all. */
    nrt_st_file *f = NULL;
    nrt_error err = {{0}};
    char want[600];
    CHECK(nrt_safetensors_open(at("absent"), &f, &err) == -1 && !f);
    snprintf(want, sizeof want, "%s: No such file or directory",
             at("absent"));
    CHECK(strcmp(err.msg, want) == 0);
    CHECK(nrt_safetensors_open(dir, &f, &err) == -1 && !f);
    snprintf(want, sizeof want, "%s: %s", dir, strerror(EISDIR));
    CHECK(strcmp(err.msg, want) == 0);

    /* Random garbage: rejected. */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int rep = 0; rep < 50; rep++) {
        unsigned char g[200];
        size_t len = 8 + (size_t)rep * 3;
        for (size_t i = 0; i < len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            g[i] = (unsigned char)(s >> 56);
        }
        if (rep % 2) { /* a plausible length, garbage after it */
            memset(g, 0, 8);
            g[0] = (unsigned char)(len - 8);
        }
        CHECK(write_bytes(p, g, len) == 0);
        EXPECT_BAD(p, "");
    }

    /* Every truncation of a valid file is rejected; every one-byte change
     * either is rejected or gives a file that reads consistently. */
    size_t n;
    unsigned char *v = valid_file(&n);
    if (!CHECK(v != NULL))
        return;
    for (size_t len = 0; len < n; len++) {
        CHECK(write_bytes(p, v, len) == 0);
        EXPECT_BAD(p, "");
    }
    int accepted = 0;
    static const unsigned char subst[] = {0, ' ', '"', '\\', '{', '}', '[',
                                          ']', ',', ':', '9', 0x80, 0xff};
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            if (v[i] == subst[k])
                continue;
            unsigned char old = v[i];
            v[i] = subst[k];
            CHECK(write_bytes(p, v, n) == 0);
            v[i] = old;
            if (nrt_safetensors_open(p, &f, &err) == 0) {
                accepted++;
                int c = nrt_safetensors_count(f);
                for (int j = 0; j < c; j++) {
                    const char *dt = NULL;
                    const nrt_tensor *t = nrt_safetensors_find(
                        f, nrt_safetensors_name(f, j), &dt);
                    if (t) {
                        size_t m = 1;
                        for (int d = 0; d < t->rank; d++)
                            m *= (size_t)t->dim[d];
                        volatile float sum = 0;
                        for (size_t q = 0; q < m; q++)
                            sum += t->data[q];
                        (void)sum;
                    }
                    CHECK(dt != NULL);
                }
                nrt_safetensors_close(f);
            } else {
                CHECK(f == NULL && strncmp(err.msg, p, strlen(p)) == 0);
            }
        }
    }
    CHECK(accepted > 0); /* data bytes changed: still a valid file */
    free(v);
}

/* ------------------------------------------------------------ interop */

static float interop_a[6] = {0, 1, 2, 3, 4, 5};
static float interop_b[4] = {0, 1.5f, 3.0f, 4.5f};

static int mode_write(const char *path)
{
    static float s[1] = {42.5f}, w4[12], e[1] = {7};
    for (int i = 0; i < 12; i++)
        w4[i] = 0.25f * (float)i - 1;
    nrt_tensor t[] = {
        {"a", 2, {2, 3}, {interop_a}, NRT_F32},
        {"b.weight", 1, {4}, {interop_b}, NRT_F32},
        {"s", 0, {0}, {s}, NRT_F32},
        {"w4", 4, {2, 1, 2, 3}, {w4}, NRT_F32},
        {"esc\"ape\\\n\xc3\xa9", 1, {1}, {e}, NRT_F32},
    };
    const char *m[] = {"format", "pt", "note", "x\"y"};
    nrt_error err;
    if (nrt_safetensors_save(path, t, 5, m, 2, &err) != 0) {
        fprintf(stderr, "test_safetensors: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static int mode_read(const char *path)
{
    nrt_st_file *f;
    nrt_error err;
    if (nrt_safetensors_open(path, &f, &err) != 0) {
        fprintf(stderr, "test_safetensors: %s\n", err.msg);
        return 1;
    }
    nrt_tensor a = {"a", 2, {2, 3}, {interop_a}, NRT_F32};
    nrt_tensor b = {"b.weight", 1, {4}, {interop_b}, NRT_F32};
    CHECK(nrt_safetensors_count(f) == 2);
    CHECK(same_tensor(f, &a));
    CHECK(same_tensor(f, &b));
    nrt_safetensors_close(f);
    printf("test_safetensors: %s: %d checks, %d failed\n", path, nchecks,
           nfailed);
    return nfailed ? 1 : 0;
}

/* An empty file dir/name. */
static void touch(const char *name)
{
    FILE *f = fopen(at(name), "w");
    if (f)
        fclose(f);
}

/* A save removes the temporaries that saves of the same file killed part
 * way left (their process is gone), and nothing else. */
static void test_stale_temps(void)
{
    pid_t dead = fork(); /* a process that has come and gone */
    if (dead == 0)
        _exit(0);
    if (!CHECK(dead > 0 && waitpid(dead, NULL, 0) == dead))
        return;
    char stale[128], live[128], other[128], near[128];
    snprintf(stale, sizeof stale, "w.safetensors.tmp.%ld.aB3xY9", (long)dead);
    snprintf(live, sizeof live, "w.safetensors.tmp.%ld.aB3xY9", (long)getppid());
    snprintf(other, sizeof other, "v.safetensors.tmp.%ld.aB3xY9", (long)dead);
    snprintf(near, sizeof near, "w.safetensors.tmp.%ld.aB3xY", (long)dead);
    const char *names[] = {stale, live, other, near, "w.safetensors.tmp.Qz81kf"};
    for (int i = 0; i < 5; i++)
        touch(names[i]);
    nrt_error err = {{0}};
    CHECK(nrt_safetensors_save(at("w.safetensors"), tens, 1, NULL, 0, &err) == 0);
    CHECK(access(at(stale), F_OK) != 0);
    for (int i = 1; i < 5; i++)
        CHECK(access(at(names[i]), F_OK) == 0);
    for (int i = 1; i < 5; i++)
        unlink(at(names[i]));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0)
        return mode_write(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--read") == 0)
        return mode_read(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_safetensors [--write FILE | --read "
                "FILE]\n");
        return 1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_safetensors.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "test_safetensors: mkdtemp %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    test_round_trip();
    test_save_errors();
    test_hand_written();
    test_i64();
    test_corrupt();
    test_foreign();
    test_weights();
    test_stale_temps();
    rmtree(dir);
    printf("test_safetensors: %d checks, %d failed\n", nchecks, nfailed);
    return nfailed ? 1 : 0;
}
