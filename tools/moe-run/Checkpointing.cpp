//===- Checkpointing.cpp - moe-run's --checkpoint / --resume --------------===//

#include "Checkpointing.h"

#include "moe/Target/StepState.h"

#include <map>

using namespace mlir;
using namespace mlir::moe;
namespace ckpt = moe_rt::checkpoint;

static llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The manifest this job writes: the step's, for the job's world size,
/// with the expert placement its expert tensors are in.
static ckpt::Manifest jobManifest(target::Interpreter &run,
                                  ckpt::Counters counters,
                                  const ckpt::Placement &placement) {
  ckpt::Manifest m = target::checkpointManifest(run.step(), counters);
  m.ranks = run.options().world;
  m.placement = moe_rt::expert_placement::withoutIdentity(placement);
  return m;
}

llvm::Error run::saveCheckpoint(target::Interpreter &run,
                                const std::string &root,
                                ckpt::Counters counters,
                                const std::function<bool(bool)> &agree) {
  FunctionOpInterface step = run.step();
  int rank = run.options().rank;
  ckpt::RankState state;
  state.rank = rank;
  state.ranks = run.options().world;
  state.counters = counters;
  for (BlockArgument arg : target::carriedArguments(step)) {
    ckpt::Tensor t;
    t.name = target::argumentName(step, arg);
    t.role = target::roleOf(step, arg) == target::ArgRole::param
                 ? ckpt::Role::param
                 : ckpt::Role::state;
    t.shape = run.buffer(arg)->shape;
    t.values = run.buffer(arg)->f;
    state.tensors.push_back(std::move(t));
  }
  std::string message;
  std::string staging = ckpt::stagingDir(root, counters.step);
  bool ok = ckpt::makeDir(root, message) && ckpt::makeDir(staging, message) &&
            ckpt::writeAtomically(staging + "/" + ckpt::rankFileName(rank),
                                  ckpt::encodeRank(state), message);
  std::string where = "checkpoint of step " + std::to_string(counters.step);
  if (!agree(ok))
    return error(ok ? where + ": another rank could not write its file"
                    : message);
  if (rank == 0 &&
      !ckpt::commit(root,
                    jobManifest(run, counters, run.options().expertSlots),
                    message))
    ok = false;
  if (!agree(ok))
    return error(rank == 0 ? message : where + ": rank 0 could not commit it");
  return llvm::Error::success();
}

llvm::Expected<ckpt::RankState>
run::readCheckpoint(target::Interpreter &run, const std::string &root,
                    const ckpt::Placement &placement) {
  ckpt::RankState state;
  std::string message;
  if (!ckpt::readResharded(root, jobManifest(run, {}, placement),
                           run.options().rank,
                            state,
                        message))
    return error(message);
  return state;
}

void run::restoreCheckpoint(target::Interpreter &run,
                            const ckpt::RankState &state) {
  // readLatest checked that the names match the step's carried tensors.
  std::map<std::string, const ckpt::Tensor *> byName;
  for (const ckpt::Tensor &t : state.tensors)
    byName[t.name] = &t;
  FunctionOpInterface step = run.step();
  for (BlockArgument arg : target::carriedArguments(step))
    run.buffer(arg)->f = byName.at(target::argumentName(step, arg))->values;
}
