//===- moe-run.cpp - run a scheduled training step on the CPU runtime -----===//
//
// Runs a scheduled step (the output of moe-flowmoe-pipeline) on this
// machine's ranks with the runtime's interpreter (lib/Target/Interpreter:
// each op's runtime calls from the one op -> call table). This file is the
// tool around it: options, MPI start-up, the step's arguments (parameters,
// token ids, labels) and what is printed and dumped. It is how every
// schedule is run and checked here: the loss and the updated parameters of
// one step must not depend on the policy or the pipelining degree.
//
//   mpirun -np 4 moe-run step.mlir [--steps N] [--seed S] [--dump FILE]
//
// Parameters imported from ONNX (`moe.source`) start from the file's
// weights, each rank reading its own experts; others (and all of them with
// --random-weights) are drawn from the seed (ParamLoading.h).
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "WeightLoader.h"
#include "moe/Target/Interpreter.h"

#include "Checkpointing.h"
#include "ExpertPlacement.h"
#include "ParamLoading.h"

#include "moe_rt/collectives.h"
#include "moe_rt/command_line.h"
#include "moe_rt/expert_placement.h"
#include "moe_rt/moe_rt.h"
#include "moe_rt/ops.h"
#include "moe_rt/profile.h"
#include "moe_rt/text_data.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

using namespace mlir;
using namespace mlir::moe;
using target::Buffer;
using target::Interpreter;

namespace {

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moe-run: error: %s\n", message.c_str());
  moe_rt_mpi_abort(2);
  std::exit(2);
}

void check(llvm::Error e) {
  if (e)
    die(llvm::toString(std::move(e)));
}

struct Options {
  std::string input, dump, dumpInputs, dataPath, routingTrace;
  // --expert-placement: expert -> rank for every block ("1,0,1,0"), or
  // BLOCK=RANKS for one, or @FILE; repeatable, applied in order.
  // --expert-placement-at S:MAP: MAP from step S on (the experts move).
  std::vector<std::string> expertPlacement;
  std::vector<std::pair<int, std::string>> laterPlacement;
  int steps = 1;
  uint64_t seed = 1;
  bool seedGiven = false;
  // Checkpoints (docs/checkpoint-format.md): every saveEvery steps into
  // checkpointDir; resume from resumeDir's latest.
  int saveEvery = 0;
  std::string checkpointDir, resumeDir;
  bool randomWeights = false, profile = false;
  // --check-collectives every-step: signatures exchanged before every
  // collective of every step, not only the first step's.
  bool checkEveryStep = false;
  double timeout = 60;
};

const char *kUsage =
    "usage: mpirun -np P moe-run STEP.mlir [--steps N] [--seed S] "
    "[--data TEXT] [--random-weights] [--dump FILE] [--dump-inputs FILE] "
    "[--routing-trace FILE] [--expert-placement [BLOCK=]RANKS|@FILE]... "
    "[--expert-placement-at STEP:[BLOCK=]RANKS|@FILE]... [--timeout SECONDS] "
    "[--profile] [--check-collectives first-step|every-step] "
    "[--save-every N --checkpoint DIR] [--resume DIR]\n";

/// One word of the command line into `o`; false for a word it does not
/// know. Values are read by moe_rt/command_line.h (shared with the other
/// tools and the generated-step driver).
bool readOption(moe_rt::options::CommandLine &args, Options &o) {
  std::string checks;
  if (args.whole("--seed", o.seed)) {
    o.seedGiven = true;
    return true;
  }
  if (args.choice("--check-collectives", {"first-step", "every-step"},
                  checks)) {
    o.checkEveryStep = checks == "every-step";
    return true;
  }
  if (moe_rt::expert_placement::readLaterMap(args, o.laterPlacement))
    return true;
  if (args.flag("--profile")) {
    o.profile = true;
    return true;
  }
  if (args.flag("--random-weights")) {
    o.randomWeights = true;
    return true;
  }
  return args.count("--steps", o.steps) ||
         args.count("--save-every", o.saveEvery) ||
         args.seconds("--timeout", o.timeout) ||
         args.text("--checkpoint", o.checkpointDir) ||
         args.text("--resume", o.resumeDir) || args.text("--dump", o.dump) ||
         args.text("--data", o.dataPath) ||
         args.text("--routing-trace", o.routingTrace) ||
         args.repeated("--expert-placement", o.expertPlacement) ||
         args.text("--dump-inputs", o.dumpInputs) ||
         args.positional(o.input, "input step");
}

Options parseOptions(int argc, char **argv) {
  Options o;
  moe_rt::options::CommandLine args(argc, argv);
  while (args.next()) {
    if (args.flag("-h") || args.flag("--help")) {
      std::printf("%s", kUsage);
      moe_rt_mpi_finalize();
      std::exit(0);
    }
    if (!readOption(args, o))
      args.unknown();
  }
  if (!args.error().empty())
    die(args.error());
  if (o.input.empty())
    die("no input step (moe-run STEP.mlir)");
  if ((o.saveEvery > 0) != !o.checkpointDir.empty())
    die("--save-every N and --checkpoint DIR go together");
  if (!o.laterPlacement.empty() && o.expertPlacement.empty() &&
      o.resumeDir.empty())
    die("--expert-placement-at needs a first map (--expert-placement)");
  return o;
}

/// This process's rank and the number of ranks.
std::pair<int, int> rankAndWorld(double timeout) {
  moe_rt_comm probe;
  if (moe_rt_comm_create_world(timeout, 0, &probe) != MOE_RT_OK)
    die(moe_rt_last_error());
  std::pair<int, int> rw = {moe_rt_comm_rank(probe),
                            moe_rt_comm_size(probe)};
  moe_rt_comm_destroy(probe);
  return rw;
}

/// Every argument from ParamLoading (shared with moe-export-params, which
/// writes the same values for every rank at build time); returns how many
/// parameters came from their moe.source.
int initArguments(Interpreter &run, bool useSources, StringRef stepPath) {
  const moe_rt::expert_placement::Placement &slots = run.options().expertSlots;
  frontend::WeightLoader weights;
  // Relative moe.source files not found from the working directory are
  // looked up next to the step's IR file.
  StringRef dir = llvm::sys::path::parent_path(stepPath);
  weights.setFallbackDirectory(dir.empty() ? "." : dir);
  FunctionOpInterface func = run.step();
  int fromSource = 0;
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    Buffer &b = *run.buffer(arg);
    auto values =
        run::initialValues(func, arg, run.options().rank, run.options().seed,
                           useSources ? &weights : nullptr, slots);
    if (!values)
      die(llvm::toString(values.takeError()));
    if (b.isInt)
      b.i = std::move(values->i);
    else
      b.f = std::move(values->f);
    fromSource += values->fromSource;
  }
  return fromSource;
}

/// `placement` with --expert-placement(-at)'s `maps` applied, or the
/// error naming the option, block and entry.
moe_rt::expert_placement::Placement
placementOrDie(FunctionOpInterface step, const std::vector<std::string> &maps,
               moe_rt::expert_placement::Placement placement,
               const std::string &option) {
  for (const std::string &map : maps)
    if (llvm::Error e = run::applyExpertPlacement(step, map, placement))
      die(option + ": " + llvm::toString(std::move(e)));
  return placement;
}

/// The balance line's per-rank loads and the trace follow each block's
/// placement.
void setLogPlacement(moe_rt_routing_log *log, FunctionOpInterface step,
                     const moe_rt::expert_placement::Placement &placement) {
  if (!log)
    return;
  for (const auto &[block, shape] : run::placementShapes(step)) {
    std::vector<int64_t> ranks = moe_rt::expert_placement::ranksOf(
        moe_rt::expert_placement::tableOf(placement, block, shape),
        shape.groups);
    if (moe_rt_routing_log_set_expert_ranks(log, block, ranks.data(),
                                            int64_t(ranks.size())) !=
        MOE_RT_OK)
      die(moe_rt_last_error());
  }
}

/// True when `v` reaches an op of type OpT through what carries a value
/// without changing what it is: micro-batch splits and merges, NetMoE's
/// sample moves (moe.move_samples), and moe.block boundaries (an input is
/// its region's argument, a yielded value the block's result: moe-netmoe
/// threads the labels through the blocks to the loss).
template <typename OpT> bool reaches(Value v) {
  for (OpOperand &use : v.getUses()) {
    Operation *u = use.getOwner();
    if (isa<OpT>(u))
      return true;
    Value next;
    if (isa<SplitOp, MergeOp, MoveSamplesOp>(u)) {
      for (Value r : u->getResults())
        if (reaches<OpT>(r))
          return true;
    } else if (auto block = dyn_cast<BlockOp>(u)) {
      next = block.getBody().front().getArgument(use.getOperandNumber());
    } else if (auto yield = dyn_cast<YieldOp>(u)) {
      if (auto block = dyn_cast<BlockOp>(yield->getParentOp()))
        next = block->getResult(use.getOperandNumber());
    }
    if (next && reaches<OpT>(next))
      return true;
  }
  return false;
}

/// The samples (sequences) a rank reads per step: the token ids' first
/// dimension; 0 for a step without token ids.
int64_t samplesPerRank(Interpreter &run) {
  FunctionOpInterface func = run.step();
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    Buffer &b = *run.buffer(arg);
    if (b.isInt && b.shape.size() == 2 && reaches<EmbeddingOp>(arg))
      return b.shape[0];
  }
  return 0;
}

/// Token ids and labels of the step that begins at data position
/// `position` (windows all ranks read before it) from a byte-level text
/// corpus: each rank reads its own consecutive windows; labels are the
/// next bytes.
void loadText(Interpreter &run, const std::string &text, uint64_t position) {
  FunctionOpInterface func = run.step();
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    Buffer &b = *run.buffer(arg);
    bool tokens = reaches<EmbeddingOp>(arg),
         labels = reaches<CrossEntropyOp>(arg);
    if (!b.isInt || (!tokens && !labels) || b.shape.size() != 2)
      continue;
    if (tokens)
      for (Operation *u : arg.getUsers())
        if (auto e = dyn_cast<EmbeddingOp>(u))
          if (cast<RankedTensorType>(e.getTable().getType()).getDimSize(0) <
              moe_rt::text_data::kByteVocabulary)
            die(moe_rt::text_data::vocabularyError());
    // The windows rule is shared with the generated-step driver
    // (examples/codegen/driver.cpp --data): moe_rt/text_data.h.
    std::string error;
    if (!moe_rt::text_data::fill(text, position, run.options().rank,
                                 b.shape[0], b.shape[1], labels, b.i.data(),
                                 error))
      die("--data: " + error);
  }
}

/// Every argument (parameters, token ids, labels) as "name DIMS values..."
/// lines, for a reference implementation.
void dumpInputs(Interpreter &run, const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    die("cannot write '" + path + "'");
  FunctionOpInterface func = run.step();
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    Buffer &b = *run.buffer(arg);
    std::string dims;
    for (int64_t d : b.shape)
      dims += (dims.empty() ? "" : "x") + std::to_string(d);
    std::fprintf(f, "%s %s", run::argumentName(func, arg).c_str(),
                 dims.c_str());
    if (b.isInt)
      for (int64_t v : b.i)
        std::fprintf(f, " %lld", (long long)v);
    else
      for (float v : b.f)
        std::fprintf(f, " %.9g", v);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

/// What the ranks sum between steps (the loss, the checkpoint vote): the
/// world's communicator and a pool stream, made once before the first
/// step: creating a communicator is a collective without a timeout, which
/// a rank that stops between two steps would leave the others waiting in.
struct WorldSum {
  int rank, world;
  double timeout;
  moe_rt_stream stream = nullptr;
  moe_rt_comm all = nullptr;

  WorldSum(int rank, int world, double timeout)
      : rank(rank), world(world), timeout(timeout) {
    if (moe_rt_stream_create_pool(&stream) != MOE_RT_OK ||
        moe_rt_comm_create_world(timeout, 0, &all) != MOE_RT_OK)
      die(moe_rt_last_error());
  }
  ~WorldSum() {
    moe_rt_stream_destroy(stream);
    moe_rt_comm_destroy(all);
  }
  WorldSum(const WorldSum &) = delete;
  WorldSum &operator=(const WorldSum &) = delete;

  /// The first value of `b` summed over the world.
  float sum(Buffer b) {
    if (moe_rt_all_reduce(stream, all, b.view(), 0, -1) != MOE_RT_OK ||
        moe_rt_stream_synchronize(stream, timeout) != MOE_RT_OK)
      die("rank " + std::to_string(rank) + ": " + moe_rt_last_error());
    return b.f[0];
  }
  /// The mean loss over the data-parallel ranks.
  float meanLoss(const Buffer &loss) { return sum(loss) / world; }
  /// Whether every rank is `ok`: checkpoint writes agree through it, so a
  /// rank that failed makes every rank stop with an error, none commits
  /// alone.
  bool everyRank(bool ok) {
    Buffer flag;
    flag.f = {ok ? 1.0f : 0.0f};
    return sum(flag) == float(world);
  }
};

void dumpResults(Interpreter &run, const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    die("cannot write '" + path + "'");
  for (auto &[name, b] : run.results()) {
    std::fprintf(f, "%s %lld", name.c_str(), (long long)b->numel());
    for (float v : b->f)
      std::fprintf(f, " %.9g", v);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

/// The routing log of a step with routing statistics (moe.routing_counts;
/// moe-opt --moe-routing-stats), or null; rank 0 writes --routing-trace.
moe_rt_routing_log *routingLog(FunctionOpInterface step, const Options &o,
                               int rank) {
  bool counted = false;
  step.walk([&](RoutingCountsOp) { counted = true; });
  if (!counted) {
    if (!o.routingTrace.empty())
      die("--routing-trace: the step has no routing statistics "
          "(moe.routing_counts); schedule it with "
          "--moe-flowmoe-pipeline='routing-stats=1 ...'");
    return nullptr;
  }
  moe_rt_routing_log *log = moe_rt_routing_log_create();
  if (rank == 0 && !o.routingTrace.empty() &&
      moe_rt_routing_log_open_trace(log, o.routingTrace.c_str(),
                                    ("moe-run " + o.input).c_str()) !=
          MOE_RT_OK)
    die(moe_rt_last_error());
  return log;
}

/// After step `s`: its records to the trace, its balance line (rank 0).
void endRoutingStep(moe_rt_routing_log *log, int s, int rank) {
  if (!log)
    return;
  if (moe_rt_routing_log_end_step(log, s) != MOE_RT_OK)
    die("rank " + std::to_string(rank) + ": " + moe_rt_last_error());
  if (rank == 0)
    std::fprintf(stderr, "%s\n", moe_rt_routing_log_balance(log));
  // NetMoE's planner, if the step has one: how well it predicted the next
  // block's counts this step (every rank scores the same predictions).
  const char *placement = moe_rt_placement_report();
  if (rank == 0 && *placement)
    std::fprintf(stderr, "step %d %s\n", s, placement);
}

namespace ep = moe_rt::expert_placement;

/// The placement the run starts under and the later maps, each applied on
/// top of the one before it in step order (all checked before the first
/// step).
struct Placements {
  ep::Placement slots;
  std::vector<ep::Placement> later; // o.laterPlacement's, sorted by step
};

/// The resumed run's state (--resume), checked against --seed and
/// --expert-placement; none without --resume. On the checkpoint's grid the
/// run continues under the checkpoint's placement (an --expert-placement
/// must name the same); on another grid the experts are resharded into
/// --expert-placement's. `slots` becomes the placement the run starts
/// under.
std::optional<moe_rt::checkpoint::RankState>
resumedState(FunctionOpInterface step, const Options &o, int rank, int world,
             ep::Placement &slots) {
  if (o.resumeDir.empty())
    return std::nullopt;
  Interpreter probe(step, {rank, world, o.seed, o.timeout});
  llvm::Expected<moe_rt::checkpoint::RankState> state =
      run::readCheckpoint(probe, o.resumeDir, slots);
  if (!state)
    die(llvm::toString(state.takeError()));
  auto shapes = run::placementShapes(step);
  if (shapes.empty() && !state->placement.empty())
    die("--resume: the checkpoint in '" + o.resumeDir +
        "' was saved under an expert placement (of block " +
        std::to_string(state->placement.begin()->first) +
        "), and this step has no expert placement input");
  if (!o.expertPlacement.empty() &&
      !ep::samePlacement(state->placement, slots, shapes))
    die("--resume: the checkpoint in '" + o.resumeDir +
        "' was saved under expert placement " +
        ep::describe(state->placement, shapes) + "; --expert-placement gives " +
        ep::describe(slots, shapes) +
        " (resume without --expert-placement, or change it with "
        "--expert-placement-at)");
  slots = state->placement;
  if (o.seedGiven && o.seed != state->counters.seed)
    die("--seed " + std::to_string(o.seed) +
        " differs from the resumed "
        "run's seed " +
        std::to_string(state->counters.seed));
  return std::move(*state);
}

/// --expert-placement-at's maps (sorted by step in `o`), each on top of
/// the one before it, starting from `slots`.
std::vector<ep::Placement> laterPlacements(FunctionOpInterface step,
                                           Options &o,
                                           const ep::Placement &slots) {
  std::stable_sort(o.laterPlacement.begin(), o.laterPlacement.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<ep::Placement> later;
  for (const auto &[at, map] : o.laterPlacement)
    later.push_back(placementOrDie(step, {map},
                                   later.empty() ? slots : later.back(),
                                   "--expert-placement-at"));
  return later;
}

/// The arguments' first values: from the parameters' sources or the seed,
/// then the checkpoint's over them when resuming; rank 0 says which.
void startArguments(
    Interpreter &run, const Options &o,
    const std::optional<moe_rt::checkpoint::RankState> &resumed) {
  int fromSource = initArguments(run, !o.randomWeights, o.input);
  bool talk = run.options().rank == 0;
  if (resumed) {
    run::restoreCheckpoint(run, *resumed);
    if (talk)
      std::fprintf(stderr, "moe-run: resumed from '%s' after step %llu\n",
                   o.resumeDir.c_str(),
                   (unsigned long long)resumed->counters.step);
  } else if (talk && fromSource) {
    std::fprintf(stderr,
                 "moe-run: %d parameters start from their ONNX source\n",
                 fromSource);
  }
}

/// --data's text, whole.
std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    die("cannot read --data '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Rank 0's line for step `s` (the `i`th of this run's `steps`): the loss
/// on stdout; with more than one step the progress on stderr, so that the
/// numbers stay parseable.
void printStep(int s, int i, int steps, float loss,
               std::chrono::steady_clock::time_point began) {
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - began;
  std::printf("step %d loss %.6f\n", s, loss);
  if (steps > 1)
    std::fprintf(stderr, "[%d/%d] %.2f s/step, %.0f s left\n", i, steps,
                 elapsed.count() / i, elapsed.count() / i * (steps - i));
}

} // namespace

int main(int argc, char **argv) {
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "moe-run: error: %s\n", moe_rt_last_error());
    return 2;
  }
  Options o = parseOptions(argc, argv);

  MLIRContext context;
  run::LoadedStep loaded = run::loadScheduledStepOrDie(o.input, context, die);

  auto [rank, world] = rankAndWorld(o.timeout);
  // A resumed run continues the checkpoint's counters: its update count,
  // data position and noise seed.
  Placements placed;
  placed.slots = placementOrDie(loaded.func, o.expertPlacement, {},
                                "--expert-placement");
  std::optional<moe_rt::checkpoint::RankState> resumed =
      resumedState(loaded.func, o, rank, world, placed.slots);
  moe_rt::checkpoint::Counters start =
      resumed ? resumed->counters : moe_rt::checkpoint::Counters{0, 0, o.seed};
  moe_rt_routing_log *log = routingLog(loaded.func, o, rank);
  placed.later = laterPlacements(loaded.func, o, placed.slots);
  setLogPlacement(log, loaded.func, placed.slots);
  Interpreter run(loaded.func, {rank, world, start.seed, o.timeout, log,
                                 o.checkEveryStep, placed.slots});
  check(run.prepare());
  startArguments(run, o, resumed);
  // The data position counts samples over all ranks (text_data.h): a run
  // resumed on another grid continues from the checkpoint's sample.
  uint64_t position = start.dataPosition;
  int64_t samples = samplesPerRank(run);
  std::string text = o.dataPath.empty() ? "" : readText(o.dataPath);
  if (!text.empty())
    loadText(run, text, position);
  if (!o.dumpInputs.empty())
    dumpInputs(run, o.dumpInputs + ".rank" + std::to_string(rank));

  {
    // Destroyed (its communicator freed) before MPI is finalized.
    WorldSum sums(rank, world, o.timeout);
    // Per-op-class and per-stream time of each step on stderr
    // (moe_rt/profile.h, docs/tools/moe-run.md).
    moe_rt_profile_enable(o.profile);
    auto began = std::chrono::steady_clock::now();
    for (int i = 1; i <= o.steps; ++i) {
      int s = int(start.step) + i; // the update count, across resumes
      if (!text.empty() && i > 1)
        loadText(run, text, position);
      // A new expert placement: the experts' weights and optimizer state
      // move first, then the step routes by it.
      for (size_t k = 0; k < placed.later.size(); ++k)
        if (s == o.laterPlacement[k].first) {
          check(run::migrateExperts(run, placed.slots, placed.later[k],
                                    sums.stream, sums.all));
          placed.slots = placed.later[k];
          run.setExpertSlots(placed.slots);
          setLogPlacement(log, loaded.func, placed.slots);
        }
      moe_rt_profile_step_begin();
      check(run.run(s));
      moe_rt_profile_step_end(stderr, rank, s);
      endRoutingStep(log, s, rank);
      float loss = sums.meanLoss(*run.results()[0].second);
      if (rank == 0)
        printStep(s, i, o.steps, loss, began);
      std::fflush(stdout);
      run.advance();
      position = moe_rt::text_data::advance(position, world, samples);
      if (o.saveEvery && s % o.saveEvery == 0) {
        moe_rt::checkpoint::Counters at{uint64_t(s), position, start.seed};
        check(run::saveCheckpoint(run, o.checkpointDir, at,
                                  [&](bool ok) { return sums.everyRank(ok); }));
        if (rank == 0)
          std::fprintf(stderr, "moe-run: checkpoint of step %d in '%s'\n", s,
                       o.checkpointDir.c_str());
      }
    }
  }
  if (!o.dump.empty())
    dumpResults(run, o.dump + ".rank" + std::to_string(rank));
  if (log && moe_rt_routing_log_close(log) != MOE_RT_OK)
    die(moe_rt_last_error());
  moe_rt_routing_log_destroy(log);
  moe_rt_mpi_finalize();
  return 0;
}
