//===- Interpreter.h - a scheduled step run with the runtime ----*- C++ -*-===//
//
// moe-run's engine. Executes a scheduled step (the output of
// moe-flowmoe-pipeline) on this process's rank: every op's runtime calls
// come from the runtime-call table (RuntimeCalls.h) and are made on the
// op's stream (compute: a CPU stream; communication: FlowMoE's priority
// pool), moe.record_event / moe.wait_event become runtime events, and
// collectives run on the group communicator of their grid axes.
//
// The library calls the runtime's C API but does not link it: a program
// that uses it links moe_runtime too (tools/moe-run does), so that no
// compiler library carries the runtime's MPI, OpenBLAS and CUDA.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_INTERPRETER_H
#define MOE_TARGET_INTERPRETER_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/Error.h"

#include "moe_rt/expert_placement.h"
#include "moe_rt/moe_rt.h"
#include "moe_rt/routing_stats.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mlir::moe::target {

/// The host buffer of one tensor value: F32 (`f`) or, for integer element
/// types, I64 (`i`), row-major. Its data never moves once allocated, as
/// the runtime's queued calls require.
struct Buffer {
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  bool isInt = false;

  int64_t numel() const;
  /// The runtime's view of the buffer, valid as long as the buffer.
  moe_rt_tensor *view();

private:
  moe_rt_tensor tensor{};
};

class Interpreter {
public:
  struct Options {
    int rank = 0, world = 1;
    /// Base seed of noisy_topk's noise (moe_rt_gate_step_seed).
    uint64_t seed = 1;
    /// Seconds any wait may take (<= 0: no limit); moe-run's --timeout.
    double timeout = 60;
    /// Where moe.routing_counts hands each step's counts (moe-run
    /// --routing-trace and its balance line); null: nowhere.
    moe_rt_routing_log *routingLog = nullptr;
    /// Exchange every collective's signature on every step (moe-run
    /// --check-collectives=every-step); false: on the first step only,
    /// which proves a static step's signatures for the later ones.
    bool checkCollectivesEveryStep = false;
    /// The expert placement: each block's slot table (G x S,
    /// moe_rt/expert_placement.h) written into its step input
    /// `expert_slots.<block>` before every step; a block without one:
    /// expert parallelism's own layout.
    moe_rt::expert_placement::Placement expertSlots;
  };

  Interpreter(FunctionOpInterface step, Options options);
  ~Interpreter();

  /// Creates the world communicator and a zeroed buffer per argument of
  /// the step, which the caller then fills (buffer(arg)).
  llvm::Error prepare();

  /// Runs training step `step` (1, 2, ...): issues every op, then waits for
  /// every stream.
  llvm::Error run(int64_t step);

  /// The buffer of `v`: an argument's after prepare(), an op result's once
  /// the op has been issued (each step gives results fresh, zeroed
  /// buffers); null for anything else (events, values not reached yet).
  /// Results are complete after run() returns, or in the after-op hook.
  Buffer *buffer(Value v);

  /// Called with each op of the step once its calls have run: the
  /// interpreter synchronises the op's stream first, so buffer() of the
  /// op's results (and of everything computed before it) holds their
  /// values. For tools that read values during a step (e.g. dumping every
  /// value to compare with another implementation); waiting after each op
  /// removes the overlap of the streams. Null (the default) waits only at
  /// the end of the step.
  void setAfterOp(std::function<llvm::Error(Operation *)> hook);
  /// A new expert placement for the next steps (Options::expertSlots);
  /// the caller has moved the expert weights to it.
  void setExpertSlots(moe_rt::expert_placement::Placement slots);

  /// The step's results by name: "loss", then each updated parameter by
  /// its moe.param name, then the optimizer state by its moe.state name
  /// (others "result<N>").
  std::vector<std::pair<std::string, Buffer *>> results();

  /// Makes the updated parameters and optimizer state the next step's
  /// arguments (StepState.h: the step returns the loss, then the carried
  /// values).
  void advance();

  FunctionOpInterface step() const;
  const Options &options() const;

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace mlir::moe::target

#endif // MOE_TARGET_INTERPRETER_H
