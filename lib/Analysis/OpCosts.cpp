//===- OpCosts.cpp - work of an op and time of a collective ---------------===//

#include "moe/Analysis/OpCosts.h"

#include <algorithm>

using namespace mlir::moe;

double mlir::moe::attentionFlops(double batch, double seq, double embed,
                                 double heads, double kvHeads,
                                 double headDim) {
  double t = batch * seq;
  double projections = 2 * t * embed * (heads * headDim + 2 * kvHeads * headDim) +
                       2 * t * heads * headDim * embed;
  double scores = 2 * 2 * batch * heads * seq * seq * headDim; // QK^T, PV
  return projections + scores;
}

double mlir::moe::attentionMemoryBytes(double inputBytes) {
  return 4 * inputBytes;
}

double mlir::moe::gateFlops(double tokens, double embed, double experts,
                            double auxColumns) {
  return 2 * tokens * embed * experts + 2 * tokens * embed * auxColumns;
}

double mlir::moe::expertFlops(double localExperts, double slots, double embed,
                              double hidden, double gemms) {
  return 2 * localExperts * slots * embed * hidden * gemms;
}

Link mlir::moe::collectiveLink(int64_t size, int64_t perNode) {
  if (size <= 1)
    return Link::None;
  return size > perNode ? Link::Inter : Link::Intra;
}

double mlir::moe::collectiveUs(const HardwareProfile &profile,
                               CollectiveKind kind, double bytes,
                               int64_t size, int64_t perNode) {
  const CollectiveModel &model = profile.collective(kind);
  Link link = collectiveLink(size, perNode);
  if (link == Link::None)
    return 0;
  // What the runtime adds to every collective over the α–β fit (measured).
  double latency = profile.collectiveLatencyUs;
  // The runtime's non-blocking collective against what the latency and the
  // fit of MPI's blocking one give (measured).
  double scale = profile.runtimeScaleOf(kind, bytes);
  if (kind != CollectiveKind::AllToAll)
    return scale * (latency + (link == Link::Inter ? model.inter : model.intra)
                                  .time(bytes));
  // The intra- and inter-node shares of the traffic run concurrently.
  double intraShare = double(perNode - 1) / size;
  double interShare = double(size - perNode) / size;
  double intra = intraShare > 0 ? model.intra.time(bytes * intraShare) : 0;
  double inter = interShare > 0 ? model.inter.time(bytes * interShare) : 0;
  return scale * (latency + std::max(intra, inter));
}
