/* tests/embed/predict_boston.c — the C API of a model that standardizes
 * its features (tests/serve.sh builds it with bos.h, netc --emit=lib):
 *     predict_boston WEIGHTS ROWS
 * prints the predictions of ROWS (a table of 13 features and the target)
 * with the weights and statistics in WEIGHTS, one a line, after checking
 * that predict is refused before any statistics are had, and that
 * set_stats with those statistics gives the same predictions. */
#include "bos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond, ...)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    EXPECT(argc == 3, "usage: %s WEIGHTS ROWS", argv[0]);
    nrt_error err;
    nrt_source src = {.kind = "table", .path = argv[2], .label = -1, .scale = 1};
    nrt_dataset d;
    const nrt_model *model = bos_model();
    EXPECT(nrt_dataset_load(&src, model->target_kind, BOS_INPUT_SIZE, BOS_OUTPUT_SIZE, 1, &d,
                            &err) == 0,
           "%s", err.msg);
    float *out = malloc(sizeof(float) * d.n * BOS_OUTPUT_SIZE);
    float *again = malloc(sizeof(float) * d.n * BOS_OUTPUT_SIZE);
    bos *m = bos_create("cpu", 0, &err), *m2 = bos_create("cpu", 0, &err);
    EXPECT(out && again && m && m2, "create: %s", err.msg);

    /* no statistics yet: refused, not fed rows on the wrong scale */
    EXPECT(bos_stats(m, NULL, NULL) == 0, "statistics before any were had");
    EXPECT(bos_predict(m, d.x, d.n, out, &err) != 0 && strstr(err.msg, "no statistics"),
           "predict without statistics was not refused");

    EXPECT(bos_load(m, argv[1], &err) == 0, "load: %s", err.msg);
    const float *mean, *std;
    EXPECT(bos_stats(m, &mean, &std) == BOS_INPUT_SIZE, "load: no statistics");
    EXPECT(bos_predict(m, d.x, d.n, out, &err) == 0, "predict: %s", err.msg);

    /* the same statistics set by hand, the weights loaded: the same */
    EXPECT(bos_set_stats(m2, mean, std, &err) == 0, "set_stats: %s", err.msg);
    EXPECT(bos_load(m2, argv[1], &err) == 0, "load: %s", err.msg);
    EXPECT(bos_predict(m2, d.x, d.n, again, &err) == 0, "predict: %s", err.msg);
    EXPECT(memcmp(out, again, sizeof(float) * d.n) == 0, "set_stats predicts otherwise");

    float bad[BOS_INPUT_SIZE];
    memcpy(bad, std, sizeof bad);
    bad[3] = -1;
    EXPECT(bos_set_stats(m2, mean, bad, &err) != 0 && strstr(err.msg, "feature 3"),
           "a negative std was taken");

    for (size_t i = 0; i < d.n; i++)
        printf("%.9g\n", (double)out[i]);
    bos_destroy(m);
    bos_destroy(m2);
    free(out);
    free(again);
    nrt_dataset_free(&d);
    return 0;
}
