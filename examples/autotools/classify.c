/* examples/autotools/classify.c — a C program with a model inside: blobs.net,
 * compiled to blobs.h and blobs.c by the suffix rule in Makefile.am, trained
 * here on points the program makes, then asked to classify new ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "blobs.h"

enum { N = 300 };

/* n points around three centres, label i % 3, from a fixed sequence. */
static void make_points(float *x, int32_t *label, int n, unsigned seed)
{
    static const float centre[3][2] = {{-2, 0}, {2, 0}, {0, 2.5f}};
    srand(seed);
    for (int i = 0; i < n; i++) {
        label[i] = i % 3;
        for (int k = 0; k < 2; k++)
            x[2 * i + k] = centre[i % 3][k] + ((float)rand() / RAND_MAX - 0.5f) * 1.5f;
    }
}

int main(void)
{
    static float x[N * BLOBS_INPUT_SIZE], out[N * BLOBS_OUTPUT_SIZE];
    static int32_t label[N];
    nrt_error err;
    blobs *m = blobs_create("cpu", 30, &err);
    if (!m) {
        fprintf(stderr, "blobs_create: %s\n", err.msg);
        return 1;
    }
    make_points(x, label, N, 1);
    float loss = 0;
    for (int epoch = 0; epoch < 30; epoch++)
        for (int s = 0; s < N; s += 30)
            if (blobs_train_step(m, x + s * BLOBS_INPUT_SIZE, label + s, 30, &loss, &err)) {
                fprintf(stderr, "blobs_train_step: %s\n", err.msg);
                return 1;
            }
    make_points(x, label, N, 2); /* new points */
    if (blobs_predict(m, x, N, out, &err)) {
        fprintf(stderr, "blobs_predict: %s\n", err.msg);
        return 1;
    }
    int correct = 0;
    for (int i = 0; i < N; i++) {
        const float *o = out + i * BLOBS_OUTPUT_SIZE;
        int best = o[1] > o[0] ? 1 : 0;
        best = o[2] > o[best] ? 2 : best;
        correct += best == label[i];
    }
    printf("blobs on %s: last loss %.4f, %d of %d new points right\n", blobs_device(m), loss,
           correct, N);
    blobs_destroy(m);
    return correct >= N * 9 / 10 ? 0 : 1;
}
