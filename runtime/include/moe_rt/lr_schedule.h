/*===- lr_schedule.h - the learning rate of update t ------------*- C -*-===*
 *
 * The "lr" step input of a step built with an optimizer
 * (moe-build-train-step optimizer=adamw|sgd): the host evaluates the
 * schedule for the 1-based update count t before each step and writes it
 * into the step's lr tensor — moe-run (lib/Target/Interpreter) and
 * generated steps (moe_step_begin) alike, from the same function below.
 *
 *   constant: lr
 *   cosine:   lr * t / warmup                          for t <= warmup,
 *             min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2 after, with
 *             p = min(1, (t - warmup) / (total - warmup))
 *
 * (linear warm-up, then cosine decay to min_lr at update `total`; held
 * there afterwards). docs/optimizers.md.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_LR_SCHEDULE_H
#define MOE_RT_LR_SCHEDULE_H

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum moe_rt_lr_kind {
  MOE_RT_LR_CONSTANT = 0,
  MOE_RT_LR_COSINE = 1
} moe_rt_lr_kind;

typedef struct moe_rt_lr_schedule {
  moe_rt_lr_kind kind;
  double lr, min_lr;
  int64_t warmup, total;
} moe_rt_lr_schedule;

static inline double moe_rt_lr_at(const moe_rt_lr_schedule *s, int64_t t) {
  if (s->kind == MOE_RT_LR_CONSTANT)
    return s->lr;
  if (t <= s->warmup)
    return s->lr * (double)t / (double)s->warmup;
  double span = (double)(s->total - s->warmup);
  double p = span > 0 ? (double)(t - s->warmup) / span : 1.0;
  if (p > 1.0)
    p = 1.0;
  return s->min_lr +
         (s->lr - s->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_RT_LR_SCHEDULE_H */
