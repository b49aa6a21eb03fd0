//===- PipelineDegree.h - FSMoE Algorithm 1 ---------------------*- C++ -*-===//
//
// FSMoE §4 (Pan et al., ASPLOS '25): an MoE layer whose dispatched tokens
// are cut into r chunks, each running all-to-all (inter-node) -> ESP
// all-gather (intra-node) -> expert (compute) -> ESP reduce-scatter
// (intra-node) -> all-to-all, issued in FSMoE's FIFO order (inter: D1..Dr,
// [gradient all-reduce], C1..Cr; intra: AG1..AGr, RS1..RSr). Eq. 1 models
// each chunk as t_x,r = alpha_x + n_x beta_x / r; predicates Q1..Q7 split
// the degrees into four cases, each with a closed-form time f1..f4, and
// Algorithm 1 (FindOptimalPipelineDegree) minimises each case with SLSQP
// (NLopt) and keeps the best. The forward pass calls it with t_gar = 0; the
// backward pass with expert costs doubled (§4.4) and the gradient
// all-reduce time that §5 assigns to the layer (GradientPartition.h).
//
// docs/passes/fsmoe-planning.md describes the model and the library API.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_PIPELINEDEGREE_H
#define MOE_ANALYSIS_PIPELINEDEGREE_H

#include <cstdint>
#include <vector>

namespace mlir::moe {

/// Eq. 1 for one sub-task: a chunk of r costs alphaUs + workUs / r, where
/// workUs = n * beta is the whole volume's time without start-up.
struct ChunkedCost {
  double alphaUs = 0, workUs = 0;
  double chunk(double r) const { return alphaUs + workUs / r; }
  double whole() const { return alphaUs + workUs; }
};

/// One phase (forward or backward) of an MoE layer as Algorithm 1 sees it.
struct MoePhaseCosts {
  ChunkedCost allToAll, allGather, reduceScatter, expert;
  /// The backward phase: expert alpha and beta `factor` x (FSMoE §4.4: the
  /// input and weight derivatives), collectives unchanged.
  MoePhaseCosts withExpertScaled(double factor) const;
};

/// FSMoE Fig. 4. The numbers are the paper's.
enum class PipelineCase {
  InterNodeBound = 1, // all-to-alls and gradient all-reduce dominate
  ExpertBound = 2,
  AllToAllBound = 3,
  IntraNodeBound = 4, // all-gathers and reduce-scatters dominate
};

/// The case whose condition (a disjunction of Q1..Q7) holds at degree r;
/// exactly one does.
PipelineCase classifyPipelineCase(const MoePhaseCosts &costs, double r,
                                  double tGarUs);
/// f1..f4 at degree r (defined for any r >= 1, whether or not the case
/// holds there).
double pipelineCaseTime(const MoePhaseCosts &costs, PipelineCase which,
                        double r, double tGarUs);
/// t_moe(r): the time of the case that holds at r.
double pipelineTime(const MoePhaseCosts &costs, double r, double tGarUs);
/// t_olp,moe(r) (§5.2): how long the inter-node link idles inside the
/// layer when t_gar = 0, the window a gradient all-reduce slice can fill.
double pipelineOverlapWindow(const MoePhaseCosts &costs, double r);

struct DegreeOptions {
  /// Degrees a plan may use (FSMoE's code: powers of two up to 8, so that
  /// the capacity padding lcm(r_fwd, r_bwd) stays small).
  std::vector<int64_t> degrees = {1, 2, 4, 8};
  enum class Solver {
    Slsqp,     // Algorithm 1 as published: SLSQP per case, then integers
    Enumerate, // t_moe at every allowed degree (the check of the former)
  };
  Solver solver = Solver::Slsqp;
};

struct DegreeChoice {
  int64_t degree = 1;
  double timeUs = 0;
  PipelineCase pipelineCase = PipelineCase::ExpertBound;
  /// SLSQP found no feasible point in any case and the degree came from
  /// enumeration instead.
  bool solverFailed = false;
};

/// Algorithm 1: the allowed degree with the smallest predicted layer time.
/// `options.degrees` must be non-empty, positive and sorted.
DegreeChoice findOptimalPipelineDegree(const MoePhaseCosts &costs,
                                       double tGarUs,
                                       const DegreeOptions &options = {});

/// The continuous relaxation of one case: min f_i(r) over r in [1, rMax]
/// where the case holds, by SLSQP from a start inside every interval of r
/// on which its condition holds. `feasible` is false when it holds nowhere.
struct ContinuousOptimum {
  bool feasible = false;
  double r = 0, timeUs = 0;
};
ContinuousOptimum solvePipelineCase(const MoePhaseCosts &costs,
                                    PipelineCase which, double tGarUs,
                                    double rMax);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_PIPELINEDEGREE_H
