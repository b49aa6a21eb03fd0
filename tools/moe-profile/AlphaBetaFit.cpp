//===- AlphaBetaFit.cpp - least-squares t = alpha + beta * n --------------===//

#include "AlphaBetaFit.h"

#include <cmath>
#include <numeric>

namespace moe_profile {

Fit fitAlphaBeta(const std::vector<double> &n, const std::vector<double> &t) {
  Fit fit;
  size_t count = std::min(n.size(), t.size());
  if (count < 2)
    return fit;
  double mn = std::accumulate(n.begin(), n.begin() + count, 0.0) / count;
  double mt = std::accumulate(t.begin(), t.begin() + count, 0.0) / count;
  double snn = 0, snt = 0, stt = 0;
  for (size_t i = 0; i < count; ++i) {
    snn += (n[i] - mn) * (n[i] - mn);
    snt += (n[i] - mn) * (t[i] - mt);
    stt += (t[i] - mt) * (t[i] - mt);
  }
  if (snn == 0)
    return fit;
  fit.beta = snt / snn;
  fit.alpha = mt - fit.beta * mn;
  if (fit.alpha < 0) {
    double sn2 = 0, snt0 = 0;
    for (size_t i = 0; i < count; ++i) {
      sn2 += n[i] * n[i];
      snt0 += n[i] * t[i];
    }
    fit.alpha = 0;
    fit.beta = snt0 / sn2;
  }
  double ssRes = 0;
  for (size_t i = 0; i < count; ++i) {
    double e = t[i] - (fit.alpha + fit.beta * n[i]);
    ssRes += e * e;
  }
  fit.r2 = stt > 0 ? 1 - ssRes / stt : 1.0;
  fit.ok = fit.beta > 0 && std::isfinite(fit.beta);
  return fit;
}

} // namespace moe_profile
