//===- OpShapes.h - a call's checked sizes, for the backends ----*- C++ -*-===//
//
// The C API (src/api) checks a call's tensors, then hands the backend of
// the call's stream (src/cpu or src/cuda) the sizes it read from them:
// these structs, and kernels::AttentionShape for attention. Plain data,
// shared by both backends and by the device op templates (src/device).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_OPSHAPES_H
#define MOE_RT_SRC_OPSHAPES_H

#include "moe_rt/ops.h"

#include <cstdint>

namespace moe_rt {

/// The sizes of a gate call and its attributes: T tokens of M features, E
/// experts, D the cosine projection width (M for the other kinds), seq the
/// sequence length (x's second-to-last dimension: noisy_topk's noise varies
/// along it), k the choices per token (the capacity C for expert_choice).
struct GateShape {
  moe_rt_gate_kind kind = MOE_RT_GATE_SOFTMAX_TOPK;
  int64_t tokens = 0, m = 0, experts = 0, d = 0, seq = 1, k = 1;
  bool normalize = false;
  uint64_t seed = 0;
  int64_t firstSample = 0; // noisy_topk: the batch index of x's sample 0
  double tau = 1;
};

/// Experts, slots, M and H of an expert call: 3-D weights are per local
/// expert; 2-D weights make one expert of every token (experts = 1,
/// slots = tokens).
struct ExpertShape {
  int64_t experts = 1, slots = 0, m = 0, h = 0;
};

/// Shapes of a routed op: T tokens with k choices, E experts over G ranks
/// (El local), capacity C, embedding M. `ec`: expert-choice routing,
/// indices E x C token ids (k unused). A token chunk (FSMoE/PipeMoE
/// token-level pipelining) moves only the capacity slots [O, O + C) of each
/// expert: C is then the window's width and the buffers are E x C x M.
struct RouteShape {
  int64_t T = 0, k = 1, E = 0, G = 1, El = 0, C = 0, M = 0;
  int64_t O = 0; ///< first capacity slot of the window
  bool ec = false;
};

/// Shapes of a dropless (variable-count) routed op: T tokens with k
/// choices, E experts over G ranks (El local, this rank `rank`), R the
/// expert side's bound (rows per local expert), embedding M; `block` names
/// the model block in errors (-1: unknown).
struct VarRouteShape {
  int64_t T = 0, k = 1, E = 0, G = 1, El = 0, R = 0, M = 0, rank = 0;
  int64_t block = -1;
  /// The expert placement (moe.dispatch's `expert_slots`): G x E_l, slot s
  /// of rank g holds logical expert slots[g E_l + s]; null: expert
  /// parallelism's order (rank g holds experts g E_l ... in order). Read
  /// when the op's tasks run, as the data is.
  const int64_t *slots = nullptr;
  /// Token chunk `part` of `parts` (moe-token-pipeline): of the rows each
  /// rank sends each expert, only the part-th of `parts` contiguous runs
  /// travel (kernels::keepPart); 0 of 1: all of them.
  int64_t part = 0, parts = 1;
  /// The layer's exchanged counts (moe.dispatch's `all_counts`, G x E by
  /// logical expert, whole rows; moe_rt_exchange_counts), or null: the op
  /// then all-gathers the counts itself. Read when the op's tasks run.
  const int64_t *allCounts = nullptr;
};

/// moe_rt_rows_window: E_l x G row tables, the forward chunk's buffer
/// (E_l x chunkRows x M) and the backward chunk's (E_l x outRows x M);
/// forward chunk fromPart of fromParts re-cut into chunk part of parts.
struct RowsWindowShape {
  int64_t El = 0, G = 0, chunkRows = 0, outRows = 0, M = 0;
  int64_t fromPart = 0, fromParts = 1, part = 0, parts = 1;
};

namespace device {
using moe_rt::ExpertShape;
using moe_rt::RowsWindowShape;
using moe_rt::GateShape;
using moe_rt::RouteShape;
using moe_rt::VarRouteShape;
} // namespace device

} // namespace moe_rt

#endif // MOE_RT_SRC_OPSHAPES_H
