/*
 * tests/embed/train_digits.c — a C program that embeds a model through the
 * API `netc --emit=lib models/digits_cnn.net -o digits` writes: it trains
 * one epoch over the training set in file order, saves the weights, loads
 * them into a second instance, and checks both predict the same; then it
 * checks that bad calls fail with a message and change nothing.
 *
 * usage: train_digits TRAIN.csv TEST.csv WEIGHTS_OUT
 * Prints "accuracy A" (the test set's, in %) and "ok", or what failed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

static int failures;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            failures++;                                                     \
        }                                                                   \
    } while (0)

static int load(const char *path, nrt_dataset *d)
{
    nrt_source src = {.kind = "csv", .path = path, .label = -1, .scale = 0.0625f};
    nrt_error err;
    if (nrt_dataset_load(&src, NRT_TARGET_CLASS, DIGITS_INPUT_SIZE, DIGITS_OUTPUT_SIZE, 0, d,
                         &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Percent of d's samples whose largest output is at the label. */
static double accuracy(const nrt_dataset *d, const float *out)
{
    size_t correct = 0;
    for (size_t i = 0; i < d->n; i++) {
        const float *o = out + i * DIGITS_OUTPUT_SIZE;
        int best = 0;
        for (int k = 1; k < DIGITS_OUTPUT_SIZE; k++)
            if (o[k] > o[best])
                best = k;
        correct += best == d->label[i];
    }
    return 100.0 * (double)correct / (double)d->n;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s TRAIN.csv TEST.csv WEIGHTS_OUT\n", argv[0]);
        return 2;
    }
    nrt_dataset train, test;
    if (load(argv[1], &train) || load(argv[2], &test))
        return 1;
    nrt_error err;
    const int batch = 32;
    digits *m = digits_create("cpu", batch, &err);
    if (!m) {
        fprintf(stderr, "digits_create: %s\n", err.msg);
        return 1;
    }
    EXPECT(!strcmp(digits_device(m), "cpu"), "device '%s'", digits_device(m));

    /* one epoch in file order, as `digits --no-shuffle --epochs 1` */
    double first = 0, last = 0;
    for (size_t s = 0; s < train.n; s += batch) {
        int n = train.n - s < (size_t)batch ? (int)(train.n - s) : batch;
        float loss;
        if (digits_train_step(m, train.x + s * DIGITS_INPUT_SIZE, train.label + s, n, &loss,
                              &err) != 0) {
            fprintf(stderr, "digits_train_step: %s\n", err.msg);
            return 1;
        }
        if (s == 0)
            first = loss;
        last = loss;
    }
    EXPECT(last < first, "the loss did not fall: %g -> %g", first, last);
    if (digits_save(m, argv[3], &err) != 0) {
        fprintf(stderr, "digits_save: %s\n", err.msg);
        return 1;
    }

    float *out = malloc(sizeof(float) * test.n * DIGITS_OUTPUT_SIZE);
    float *out2 = malloc(sizeof(float) * test.n * DIGITS_OUTPUT_SIZE);
    if (!out || !out2)
        return 1;
    /* the whole test set in one call: predict batches it */
    EXPECT(digits_predict(m, test.x, test.n, out, &err) == 0, "digits_predict: %s", err.msg);
    double acc = accuracy(&test, out);
    printf("accuracy %.2f\n", acc);

    /* a second instance, with another capacity, from the saved weights:
     * on the cpu too (the model's "auto" would take a GPU where there is
     * one), bit for bit */
    digits *m2 = digits_create("cpu", 7, &err);
    EXPECT(m2 != NULL, "digits_create(\"cpu\", 7): %s", err.msg);
    if (m2) {
        EXPECT(digits_load(m2, argv[3], &err) == 0, "digits_load: %s", err.msg);
        EXPECT(digits_predict(m2, test.x, test.n, out2, &err) == 0, "digits_predict: %s",
               err.msg);
        EXPECT(!memcmp(out, out2, sizeof(float) * test.n * DIGITS_OUTPUT_SIZE),
               "the loaded copy predicts otherwise");
    }

    /* on a GPU, where there is one and the library has CUDA: the same
     * predictions within float rounding (other summation orders) */
    digits *m3 = digits_create("cuda", 0, &err);
    if (m3 && !strncmp(digits_device(m3), "cuda", 4)) {
        EXPECT(digits_load(m3, argv[3], &err) == 0 &&
                   digits_predict(m3, test.x, test.n, out2, &err) == 0,
               "on %s: %s", digits_device(m3), err.msg);
        double worst = 0;
        for (size_t i = 0; i < test.n * DIGITS_OUTPUT_SIZE; i++) {
            double d = fabs((double)out2[i] - (double)out[i]) / (1 + fabs((double)out[i]));
            worst = d > worst ? d : worst;
        }
        EXPECT(worst <= 1e-4, "%s predicts otherwise than the cpu: %g", digits_device(m3), worst);
        printf("%s: within %.2g of the cpu\n", digits_device(m3), worst);
    } else {
        printf("no GPU (%s): the comparison with the cpu is skipped\n", m3 ? "" : err.msg);
    }
    digits_destroy(m3);

    /* bad calls: a message, and nothing changed */
    int32_t bad_label[2] = {3, 10};
    EXPECT(digits_train_step(m, test.x, bad_label, 2, NULL, &err) != 0 &&
               strstr(err.msg, "sample 1 has label 10, outside [0, 10)"),
           "a label out of range: '%s'", err.msg);
    EXPECT(digits_train_step(m, test.x, test.label, batch + 1, NULL, &err) != 0 &&
               strstr(err.msg, "a batch of 33 samples (expected 1 to 32"),
           "a batch over the capacity: '%s'", err.msg);
    EXPECT(digits_train_step(m, test.x, NULL, 2, NULL, &err) != 0 &&
               strstr(err.msg, "label must not be NULL"), "no labels: '%s'", err.msg);
    EXPECT(digits_load(m, "no/such/weights.safetensors", &err) != 0 &&
               strstr(err.msg, "no/such/weights.safetensors"), "a missing file: '%s'", err.msg);
    EXPECT(digits_create("tpu", 0, &err) == NULL && strstr(err.msg, "unknown device 'tpu'"),
           "an unknown device: '%s'", err.msg);
    EXPECT(digits_create("cpu", -1, NULL) == NULL, "a negative capacity");
    EXPECT(digits_predict(m, test.x, test.n, out2, &err) == 0 &&
               !memcmp(out, out2, sizeof(float) * test.n * DIGITS_OUTPUT_SIZE),
           "a failed call changed the model");

    digits_destroy(m);
    digits_destroy(m2);
    free(out);
    free(out2);
    nrt_dataset_free(&train);
    nrt_dataset_free(&test);
    if (failures)
        return 1;
    printf("ok\n");
    return 0;
}
