/* examples/cmake/fit.c — a C program with a model inside: sine.net, which
 * netc_add_model() in CMakeLists.txt compiles to sine.h and sine.c.  The
 * program fits the curve, saves the weights, loads them into a second
 * instance and checks both predict alike. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sine.h"

enum { N = 256, BATCH = 32 };

int main(void)
{
    static float x[N], y[N], out[N], out2[N];
    for (int i = 0; i < N; i++) {
        x[i] = -3.0f + 6.0f * (float)i / (N - 1);
        y[i] = sinf(x[i]);
    }
    nrt_error err;
    sine *m = sine_create(NULL, BATCH, &err);
    if (!m) {
        fprintf(stderr, "sine_create: %s\n", err.msg);
        return 1;
    }
    /* every epoch the same batches, each a stride through the curve */
    static float bx[BATCH], by[BATCH];
    for (int epoch = 0; epoch < 400; epoch++)
        for (int b = 0; b < N / BATCH; b++) {
            for (int k = 0; k < BATCH; k++) {
                bx[k] = x[k * (N / BATCH) + b];
                by[k] = y[k * (N / BATCH) + b];
            }
            if (sine_train_step(m, bx, by, BATCH, NULL, &err)) {
                fprintf(stderr, "sine_train_step: %s\n", err.msg);
                return 1;
            }
        }
    if (sine_predict(m, x, N, out, &err) || sine_save(m, "sine.safetensors", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double mse = 0;
    for (int i = 0; i < N; i++)
        mse += (out[i] - y[i]) * (out[i] - y[i]) / N;
    sine *m2 = sine_create("cpu", 8, &err);
    if (!m2 || sine_load(m2, "sine.safetensors", &err) || sine_predict(m2, x, N, out2, &err)) {
        fprintf(stderr, "the second instance: %s\n", err.msg);
        return 1;
    }
    int same = !memcmp(out, out2, sizeof out);
    printf("sine on %s: mean squared error %.5f; the reloaded copy %s\n", sine_device(m), mse,
           same ? "agrees" : "DIFFERS");
    sine_destroy(m);
    sine_destroy(m2);
    return mse < 0.01 && same ? 0 : 1;
}
