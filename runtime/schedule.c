/*
 * schedule.c — learning-rate schedules: StepLR, CosineAnnealingLR and
 * ReduceLROnPlateau, as torch.optim.lr_scheduler computes them.
 *
 * The training loop calls nrt_schedule_step once at the end of each epoch,
 * after the validation set was evaluated, as a PyTorch script calls
 * scheduler.step() (or scheduler.step(val_loss)); the lr it returns is the
 * next epoch's.  The arithmetic is PyTorch's, in double, including its
 * recursive forms: StepLR multiplies the current lr by gamma rather than
 * raising gamma to a power, and CosineAnnealingLR moves the current lr by
 * the ratio of two cosines.  The results then match PyTorch's to the last
 * bit, which the optimizer sees as a float.
 */
#include "netrt.h"

#include <math.h>

void nrt_schedule_init(nrt_sched_state *st, double base_lr)
{
    *st = (nrt_sched_state){.base_lr = base_lr, .lr = base_lr, .best = INFINITY};
}

const char *nrt_schedule_name(int kind)
{
#define NAME(K, name, cls) [NRT_SCHED_##K] = #name,
    static const char *const names[NRT_SCHED_KINDS] = {[NRT_SCHED_NONE] = "none",
                                                      NRT_SCHEDULES(NAME)};
#undef NAME
    return kind >= 0 && kind < NRT_SCHED_KINDS ? names[kind] : NULL;
}

/* StepLR.get_lr */
static double lr_step(nrt_sched_state *st, const nrt_schedule *s, double metric)
{
    (void)metric;
    if (st->epoch == 0 || st->epoch % s->step_size != 0)
        return st->lr;
    return st->lr * s->gamma;
}

/* CosineAnnealingLR.get_lr: the recursive form, which keeps going past
 * t_max (the lr climbs back up, and so on: a cosine of period 2 t_max). */
static double lr_cosine(nrt_sched_state *st, const nrt_schedule *s, double metric)
{
    (void)metric;
    const double pi = 3.14159265358979323846, t = (double)s->t_max;
    const int64_t e = st->epoch;
    if (e == 0)
        return st->lr;
    if ((e - 1 - s->t_max) % (2 * (int64_t)s->t_max) == 0)
        return st->lr + (st->base_lr - s->eta_min) * (1 - cos(pi / t)) / 2;
    return (1 + cos(pi * (double)e / t)) / (1 + cos(pi * (double)(e - 1) / t)) *
               (st->lr - s->eta_min) +
           s->eta_min;
}

/* ReduceLROnPlateau.step, mode "min": a loss better than the best by the
 * threshold resets the count of bad epochs; more than patience of them in
 * a row multiply the lr by factor (not below min_lr, and not by less than
 * eps), after which cooldown epochs are not counted. */
static double lr_reduce_on_plateau(nrt_sched_state *st, const nrt_schedule *s, double metric)
{
    const int better = s->threshold_abs ? metric < st->best - s->threshold
                                        : metric < st->best * (1 - s->threshold);
    if (better) {
        st->best = metric;
        st->bad_epochs = 0;
    } else {
        st->bad_epochs++;
    }
    if (st->cooldown_left > 0) {
        st->cooldown_left--;
        st->bad_epochs = 0;
    }
    if (st->bad_epochs > s->patience) {
        double lr = fmax(st->lr * s->factor, s->min_lr);
        st->cooldown_left = s->cooldown;
        st->bad_epochs = 0;
        if (st->lr - lr > s->eps)
            return lr;
    }
    return st->lr;
}

double nrt_schedule_step(nrt_sched_state *st, const nrt_schedule *s, double metric)
{
    st->epoch++;
#define STEP(K, name, cls)                   \
    case NRT_SCHED_##K:                      \
        st->lr = lr_##name(st, s, metric);   \
        break;
    switch (s->kind) {
        NRT_SCHEDULES(STEP)
    }
#undef STEP
    return st->lr;
}
