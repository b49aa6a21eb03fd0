/*===- sp_tuner.h - tuning the all-reduce chunk size S_p -------*- C -*-===*
 *
 * FlowMoE §4.1 / App. D: S_p trades overlap against per-chunk start-up
 * cost, and the iteration time as a function of S_p has no closed form, so
 * it is tuned by Bayesian optimisation: a Gaussian process with a Matern 5/2
 * kernel, Expected Improvement with xi = 0.1, 8 samples in (0, max], one
 * random initial sample. Grid and random search are offered beside it for
 * comparison.
 *
 * Online use from a trainer:
 *   while (!moe_rt_sp_tuner_done(t)) {
 *     moe_rt_sp_tuner_next(t, &sp);           // run ~10 iterations with sp
 *     moe_rt_sp_tuner_report(t, sp, mean_ms);
 *   }
 *   moe_rt_sp_tuner_best(t, &sp, &expected);   // then train with sp, and
 *   if (moe_rt_sp_tuner_should_retune(t, measured_ms, 0.1))  // Eq. A.11
 *     moe_rt_sp_tuner_reset(t);                // tune again
 * The compiler's --moe-autotune drives the same tuner with simulated times.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_SP_TUNER_H
#define MOE_RT_SP_TUNER_H

#include "moe_rt/moe_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum moe_rt_tune_method {
  MOE_RT_TUNE_BAYES = 0,
  MOE_RT_TUNE_GRID = 1,
  MOE_RT_TUNE_RANDOM = 2
} moe_rt_tune_method;

typedef struct moe_rt_sp_tuner_impl *moe_rt_sp_tuner;

/* Searches S_p in (0, max_bytes] with `samples` evaluations (>= 1). */
moe_rt_status moe_rt_sp_tuner_create(moe_rt_tune_method method,
                                     double max_bytes, int samples,
                                     uint64_t seed, moe_rt_sp_tuner *out);
moe_rt_status moe_rt_sp_tuner_destroy(moe_rt_sp_tuner tuner);
/* The next S_p to measure; once done, the best one found. */
moe_rt_status moe_rt_sp_tuner_next(moe_rt_sp_tuner tuner, double *sp_bytes);
/* The measured (mean) iteration time for sp_bytes; time must be positive. */
moe_rt_status moe_rt_sp_tuner_report(moe_rt_sp_tuner tuner, double sp_bytes,
                                     double iteration_time);
/* 1 once `samples` times have been reported. */
int moe_rt_sp_tuner_done(moe_rt_sp_tuner tuner);
/* The best S_p so far and its time; MOE_RT_UNAVAILABLE before any report. */
moe_rt_status moe_rt_sp_tuner_best(moe_rt_sp_tuner tuner, double *sp_bytes,
                                   double *iteration_time);
/* Eq. A.11: 1 if |T - F(S_p best)| / F(S_p best) > delta. */
int moe_rt_sp_tuner_should_retune(moe_rt_sp_tuner tuner, double current_time,
                                  double delta);
/* Forgets all samples (re-tuning after the hardware changed). */
moe_rt_status moe_rt_sp_tuner_reset(moe_rt_sp_tuner tuner);

#ifdef __cplusplus
} /* extern "C" */

#include <cstdint>
#include <random>
#include <vector>

namespace moe_rt {

/// The tuner behind the C API.
class SpTuner {
public:
  SpTuner(moe_rt_tune_method method, double maxBytes, int samples,
          uint64_t seed);
  double next();
  void report(double sp, double time);
  bool done() const { return static_cast<int>(xs.size()) >= samples; }
  bool hasBest() const { return !xs.empty(); }
  double bestSp() const;
  double bestTime() const;
  bool shouldRetune(double currentTime, double delta) const;
  void reset();

  /// GP posterior mean and standard deviation of log(time) at normalised
  /// u in (0, 1] (exposed for tests); refits if samples were added.
  void posterior(double u, double &mean, double &stddev);

private:
  double nextBayes();
  void fit();

  moe_rt_tune_method method;
  double maxBytes;
  int samples;
  uint64_t seed;
  std::mt19937_64 rng;
  std::vector<double> xs, ys; // normalised S_p in (0, 1], time
  // Fitted GP state.
  double lengthScale = 0.2, yMean = 0, yStd = 1;
  std::vector<double> alpha;    // K^-1 (y - mean) / std
  std::vector<double> cholesky; // lower factor of K, row-major n x n
  size_t fitted = 0;            // samples the fit above used
};

} // namespace moe_rt
#endif

#endif /* MOE_RT_SP_TUNER_H */
