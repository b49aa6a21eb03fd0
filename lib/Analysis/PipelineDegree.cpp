//===- PipelineDegree.cpp - FSMoE Algorithm 1 -----------------------------===//
//
// Every quantity of §4.2 (the chunk times, r x a chunk time, (r-1) x a
// chunk time, Q1..Q7, f1..f4) is a + b/r + c r in the degree r, so each is
// one `Affine` and SLSQP gets exact gradients. A predicate changes sign
// where c r^2 + a r + b = 0, at most twice; between consecutive sign
// changes every disjunct of every case is either true or false, so a case
// holds on a union of intervals we can list, and SLSQP minimises f_i on
// each (the published code starts SLSQP once per disjunct and can miss an
// interval). Each f_i is convex on such an interval, so the allowed
// degrees next to its continuous optimum include the best allowed degree
// of the interval.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/PipelineDegree.h"

#include <nlopt.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <optional>

using namespace mlir::moe;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// a + b / r + c r.
struct Affine {
  double a = 0, b = 0, c = 0;
  double operator()(double r) const { return a + b / r + c * r; }
  double derivative(double r) const { return -b / (r * r) + c; }
  Affine operator+(const Affine &o) const { return {a + o.a, b + o.b, c + o.c}; }
  Affine operator-(const Affine &o) const { return {a - o.a, b - o.b, c - o.c}; }
  Affine operator*(double k) const { return {a * k, b * k, c * k}; }
};

Affine constant(double v) { return {v, 0, 0}; }
/// t_x,r = alpha + W / r.
Affine chunk(const ChunkedCost &x) { return {x.alphaUs, x.workUs, 0}; }
/// r t_x,r = W + alpha r.
Affine times_r(const ChunkedCost &x) { return {x.workUs, 0, x.alphaUs}; }
/// (r - 1) t_x,r = W - alpha - W / r + alpha r.
Affine times_r_minus_1(const ChunkedCost &x) {
  return {x.workUs - x.alphaUs, -x.workUs, x.alphaUs};
}

/// Q1..Q7 as "expression > 0" (FSMoE §4.2).
struct Predicates {
  std::array<Affine, 8> q; // q[1]..q[7]
  Predicates(const MoePhaseCosts &k, double tGar) {
    const Affine a2a = chunk(k.allToAll), ag = chunk(k.allGather),
                 rs = chunk(k.reduceScatter);
    const Affine rExp = times_r(k.expert);
    const Affine a2aIdle = times_r_minus_1(k.allToAll) * 2; // 2(r-1)t_a2a,r
    const Affine gar = constant(tGar);
    q[1] = a2a - ag;
    q[2] = rExp - a2aIdle;
    q[3] = rExp - (times_r_minus_1(k.allGather) +
                   times_r_minus_1(k.reduceScatter));
    q[4] = gar - (ag + rs);
    q[5] = gar - (rExp - a2aIdle + ag + rs);
    q[6] = gar - (times_r(k.allGather) + times_r(k.reduceScatter) - a2aIdle);
    q[7] = q[5]; // the paper's Q7 is the same expression, for the ¬Q1 branch
  }
  bool holds(int i, double r) const { return q[i](r) > 0; }
};

/// A literal Q_i (positive) or ¬Q_i (negative).
struct Literal {
  int index;
  bool positive;
};
using Disjunct = std::array<Literal, 3>;

/// The conditions of Cases 1..4, disjunct by disjunct (§4.2).
const std::vector<Disjunct> &disjunctsOf(PipelineCase which) {
  static const std::vector<Disjunct> table[4] = {
      {{{{1, true}, {2, false}, {4, true}}},
       {{{1, true}, {2, true}, {5, true}}},
       {{{1, false}, {3, false}, {6, true}}},
       {{{1, false}, {3, true}, {7, true}}}},
      {{{{1, true}, {2, true}, {5, false}}},
       {{{1, false}, {3, true}, {7, false}}}},
      {{{{1, true}, {2, false}, {4, false}}}},
      {{{{1, false}, {3, false}, {6, false}}}},
  };
  return table[static_cast<int>(which) - 1];
}

Affine caseAffine(const MoePhaseCosts &k, PipelineCase which, double tGar) {
  const Affine a2a = chunk(k.allToAll), ag = chunk(k.allGather),
               rs = chunk(k.reduceScatter);
  switch (which) {
  case PipelineCase::InterNodeBound: // Eq. 2
    return times_r(k.allToAll) * 2 + constant(tGar);
  case PipelineCase::ExpertBound:
    return a2a * 2 + ag + rs + times_r(k.expert);
  case PipelineCase::AllToAllBound:
    return times_r(k.allToAll) * 2 + ag + rs;
  case PipelineCase::IntraNodeBound:
    return a2a * 2 + times_r(k.allGather) + times_r(k.reduceScatter);
  }
  return {};
}

bool disjunctHolds(const Predicates &p, const Disjunct &d, double r) {
  return std::all_of(d.begin(), d.end(), [&](const Literal &l) {
    return p.holds(l.index, r) == l.positive;
  });
}

/// Where some predicate may change sign in (lo, hi): the positive roots of
/// c r^2 + a r + b.
std::vector<double> signChanges(const Predicates &p, double lo, double hi) {
  std::vector<double> points{lo, hi};
  for (int i = 1; i <= 7; ++i) {
    const Affine &e = p.q[i];
    auto add = [&](double r) {
      if (std::isfinite(r) && r > lo && r < hi)
        points.push_back(r);
    };
    if (e.c == 0) {
      if (e.a != 0)
        add(-e.b / e.a);
      continue;
    }
    double disc = e.a * e.a - 4 * e.c * e.b;
    if (disc < 0)
      continue;
    double s = std::sqrt(disc);
    add((-e.a + s) / (2 * e.c));
    add((-e.a - s) / (2 * e.c));
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

double objective(unsigned, const double *x, double *grad, void *data) {
  const Affine &f = *static_cast<const Affine *>(data);
  if (grad)
    grad[0] = f.derivative(x[0]);
  return f(x[0]);
}

/// SLSQP for min f over [lo, hi], an interval on which a disjunct of the
/// case holds throughout, from its midpoint. The case condition is posed as
/// these bounds: posed as its three nonlinear predicates instead, NLopt's
/// SLSQP stalls (NLOPT_ROUNDOFF_LIMITED) short of an active predicate on
/// some instances (test/unittests/PipelineDegreeTest.cpp has them).
std::optional<double> slsqp(const Affine &f, double lo, double hi) {
  if (hi <= lo)
    return lo;
  nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 1);
  if (!opt)
    return std::nullopt;
  nlopt_set_lower_bounds1(opt, lo);
  nlopt_set_upper_bounds1(opt, hi);
  double start = 0.5 * (lo + hi);
  // SLSQP works on values of order one; times in us reach 1e5.
  double magnitude = std::abs(f.a) + std::abs(f.b / start) +
                     std::abs(f.c * start) + 1e-300;
  Affine scaled = f * (1.0 / magnitude);
  nlopt_set_min_objective(opt, objective, &scaled);
  nlopt_set_xtol_rel(opt, 1e-10);
  nlopt_set_maxeval(opt, 200);
  double x = start, value = 0;
  nlopt_result status = nlopt_optimize(opt, &x, &value);
  nlopt_destroy(opt);
  if (status < 0 && status != NLOPT_ROUNDOFF_LIMITED)
    return std::nullopt;
  return std::clamp(x, lo, hi);
}

/// The SLSQP local optima of case `which` on [lo, hi], one per maximal
/// interval where one of its disjuncts holds.
std::vector<double> caseLocalOptima(const MoePhaseCosts &costs,
                                    PipelineCase which, double tGar, double lo,
                                    double hi) {
  Predicates p(costs, tGar);
  Affine f = caseAffine(costs, which, tGar);
  std::vector<double> cuts = signChanges(p, lo, hi), optima;
  if (cuts.size() == 1) { // lo == hi
    if (classifyPipelineCase(costs, lo, tGar) == which)
      optima.push_back(lo);
    return optima;
  }
  for (const Disjunct &d : disjunctsOf(which)) {
    for (size_t i = 0; i + 1 < cuts.size();) {
      if (!disjunctHolds(p, d, 0.5 * (cuts[i] + cuts[i + 1]))) {
        ++i;
        continue;
      }
      // Merge the following pieces where it still holds (another
      // predicate changed sign at the cut between them).
      size_t j = i + 1;
      while (j + 1 < cuts.size() &&
             disjunctHolds(p, d, 0.5 * (cuts[j] + cuts[j + 1])))
        ++j;
      if (std::optional<double> r = slsqp(f, cuts[i], cuts[j]))
        optima.push_back(*r);
      i = j;
    }
  }
  return optima;
}

} // namespace

MoePhaseCosts MoePhaseCosts::withExpertScaled(double factor) const {
  MoePhaseCosts scaled = *this;
  scaled.expert.alphaUs *= factor;
  scaled.expert.workUs *= factor;
  return scaled;
}

PipelineCase mlir::moe::classifyPipelineCase(const MoePhaseCosts &costs,
                                             double r, double tGarUs) {
  Predicates p(costs, tGarUs);
  if (p.holds(1, r)) {
    if (p.holds(2, r))
      return p.holds(5, r) ? PipelineCase::InterNodeBound
                           : PipelineCase::ExpertBound;
    return p.holds(4, r) ? PipelineCase::InterNodeBound
                         : PipelineCase::AllToAllBound;
  }
  if (p.holds(3, r))
    return p.holds(7, r) ? PipelineCase::InterNodeBound
                         : PipelineCase::ExpertBound;
  return p.holds(6, r) ? PipelineCase::InterNodeBound
                       : PipelineCase::IntraNodeBound;
}

double mlir::moe::pipelineCaseTime(const MoePhaseCosts &costs,
                                   PipelineCase which, double r,
                                   double tGarUs) {
  return caseAffine(costs, which, tGarUs)(r);
}

double mlir::moe::pipelineTime(const MoePhaseCosts &costs, double r,
                               double tGarUs) {
  return pipelineCaseTime(costs, classifyPipelineCase(costs, r, tGarUs), r,
                          tGarUs);
}

double mlir::moe::pipelineOverlapWindow(const MoePhaseCosts &costs,
                                        double r) {
  // With t_gar = 0 only Cases 2-4 occur; the window is the case time minus
  // the 2r all-to-alls that keep the link busy.
  double busy = 2 * r * costs.allToAll.chunk(r);
  return std::max(0.0, pipelineTime(costs, r, 0.0) - busy);
}

ContinuousOptimum mlir::moe::solvePipelineCase(const MoePhaseCosts &costs,
                                               PipelineCase which,
                                               double tGarUs, double rMax) {
  ContinuousOptimum best;
  for (double r : caseLocalOptima(costs, which, tGarUs, 1.0,
                                  std::max(1.0, rMax))) {
    double t = pipelineCaseTime(costs, which, r, tGarUs);
    if (!best.feasible || t < best.timeUs)
      best = {true, r, t};
  }
  return best;
}

DegreeChoice mlir::moe::findOptimalPipelineDegree(const MoePhaseCosts &costs,
                                                  double tGarUs,
                                                  const DegreeOptions &opts) {
  assert(!opts.degrees.empty() && opts.degrees.front() >= 1 &&
         std::is_sorted(opts.degrees.begin(), opts.degrees.end()));
  DegreeChoice best;
  best.timeUs = kInf;
  auto consider = [&](int64_t r, PipelineCase which) {
    // An integer next to a case's optimum counts only where that case holds.
    if (classifyPipelineCase(costs, r, tGarUs) != which)
      return;
    double t = pipelineCaseTime(costs, which, r, tGarUs);
    if (t < best.timeUs || (t == best.timeUs && r < best.degree))
      best = {r, t, which};
  };
  if (opts.solver == DegreeOptions::Solver::Enumerate) {
    for (int64_t r : opts.degrees)
      consider(r, classifyPipelineCase(costs, r, tGarUs));
    return best;
  }
  const std::vector<int64_t> &d = opts.degrees;
  for (PipelineCase which :
       {PipelineCase::InterNodeBound, PipelineCase::ExpertBound,
        PipelineCase::AllToAllBound, PipelineCase::IntraNodeBound}) {
    for (double r : caseLocalOptima(costs, which, tGarUs, double(d.front()),
                                    double(d.back()))) {
      // The allowed degrees on either side of the continuous optimum
      // (FSMoE's code: the `downer` / `upper` tables for {1, 2, 4, 8}).
      auto above = std::lower_bound(d.begin(), d.end(), r - 1e-9);
      if (above != d.end())
        consider(*above, which);
      if (above != d.begin())
        consider(*(above - 1), which);
    }
  }
  if (best.timeUs == kInf) {
    // Every SLSQP run failed (never seen on the tests' instances): answer
    // by enumeration, and say so.
    DegreeOptions enumerate = opts;
    enumerate.solver = DegreeOptions::Solver::Enumerate;
    best = findOptimalPipelineDegree(costs, tGarUs, enumerate);
    best.solverFailed = true;
  }
  return best;
}
