//===- moe-fsmoe-predict.cpp - FSMoE's plans and predicted step times -----===//
//
// Runs the FSMoE planning library on layers or models described by numbers
// (no IR): Algorithm 1's forward degree, §5's gradient partition and
// backward degrees, and the simulated step of each schedule FSMoE compares
// (DeepSpeed-MoE vanilla, Tutel, Tutel-Improved, FSMoE-No-IIo, FSMoE) on a
// hardware profile. Prints one JSON object per configuration; every time is
// SIMULATED. bench/fsmoe_tables.py drives it; docs/tools/moe-fsmoe-predict.md.
//
//   moe-fsmoe-predict --profile fsmoe-testbed-b --batch 2 --seq 512 \
//       --embed 2048 --hidden 8192 --trace fsmoe.json
//   moe-fsmoe-predict --profile fsmoe-testbed-a --input configs.jsonl
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/FsmoeTimeline.h"
#include "moe/Analysis/OpCosts.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <optional>

using namespace mlir::moe;
namespace cl = llvm::cl;
namespace json = llvm::json;

static cl::OptionCategory category("moe-fsmoe-predict options");
static cl::opt<std::string> profileName(
    "profile", cl::desc("Hardware profile: a preset name or a JSON file"),
    cl::cat(category));
static cl::opt<std::string> inputFile(
    "input",
    cl::desc("JSON lines, one configuration each (fields as the flags, "
             "with '_' for '-'); '-' reads stdin. Without it the flags "
             "describe one configuration"),
    cl::cat(category));
static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("Write the Perfetto timeline of --trace-schedule's step (one "
             "configuration only)"),
    cl::cat(category));
static cl::opt<std::string> traceSchedule("trace-schedule",
                                          cl::desc("Schedule to trace"),
                                          cl::init("fsmoe"), cl::cat(category));
static cl::opt<std::string> scheduleList(
    "schedules", cl::desc("Comma-separated schedules to plan and simulate"),
    cl::init("deepspeed-moe,tutel,tutel-improved,fsmoe-no-iio,fsmoe"),
    cl::cat(category));
static cl::opt<std::string> degreeList(
    "degrees", cl::desc("Allowed pipeline degrees, comma-separated"),
    cl::init("1,2,4,8"), cl::cat(category));
static cl::opt<bool> noEvolution(
    "no-evolution",
    cl::desc("Gradient partition by step 1 only (no differential evolution)"),
    cl::cat(category));
static cl::opt<bool> smallA2aRule(
    "small-a2a-rule",
    cl::desc("FSMoE's code, not the paper: degree 1 when a forward "
             "all-to-all takes under 1 ms"),
    cl::cat(category));
static cl::opt<bool> sharedNic(
    "shared-nic",
    cl::desc("Not the paper's model: the node's ranks share its NIC, so each "
             "inter-node collective's bandwidth term is GPUs-per-node x the "
             "profile's"),
    cl::cat(category));
static cl::opt<bool> literalBackward(
    "literal-backward",
    cl::desc("FSMoE §4.4 read literally: FSMoE plans the backward expert "
             "with alpha, beta and n all doubled (its volume term 4x the "
             "forward's); the step is still simulated at the profile's "
             "backward factor"),
    cl::cat(category));
static cl::opt<bool> enumerate(
    "enumerate",
    cl::desc("Algorithm 1 by enumerating the degrees instead of SLSQP"),
    cl::cat(category));

// One configuration from flags (the same names the JSON lines use).
static cl::opt<int64_t> batch("batch", cl::init(1), cl::cat(category));
static cl::opt<int64_t> seq("seq", cl::init(1024), cl::cat(category));
static cl::opt<int64_t> embed("embed", cl::init(1024), cl::cat(category));
static cl::opt<int64_t> hidden("hidden", cl::init(4096), cl::cat(category));
static cl::opt<int64_t> heads("heads", cl::init(16), cl::cat(category));
static cl::opt<int64_t> kvHeads("kv-heads", cl::desc("(default: heads)"),
                                cl::init(0), cl::cat(category));
static cl::opt<int64_t> experts("experts",
                                cl::desc("(default: the profile's nodes)"),
                                cl::init(0), cl::cat(category));
static cl::opt<int64_t> topK("top-k", cl::init(2), cl::cat(category));
static cl::opt<double> capacityFactor("capacity-factor", cl::init(1.2),
                                      cl::cat(category));
static cl::opt<int64_t> expertGemms("expert-gemms", cl::init(2),
                                    cl::cat(category));
static cl::opt<int64_t> gateAux("gate-aux-columns", cl::init(0),
                                cl::cat(category));
static cl::opt<bool> noBias("no-attention-bias", cl::cat(category));
static cl::opt<int64_t> layers("layers", cl::init(1), cl::cat(category));
static cl::opt<int64_t> vocab(
    "vocab", cl::desc("A whole model with this vocabulary (LM head, tied "
                      "embedding, optimizer); 0: a configured layer stack"),
    cl::init(0), cl::cat(category));
static cl::opt<bool> notSteady(
    "not-steady",
    cl::desc("A configured layer stack whose first layer's gradient is "
             "reduced at the end (default: handed to the next period)"),
    cl::cat(category));

namespace {

struct Config {
  std::string name;
  FsmoeLayerShape shape;
  int64_t layers = 1, vocab = 0;
  /// Default: a stack without a vocabulary is a configured-layer period.
  std::optional<bool> steadyState;
};

/// Reads a configuration; the error names the field.
std::optional<Config> readConfig(const json::Object &o, int64_t defaultExperts,
                                 std::string &error) {
  Config c;
  static const llvm::StringRef known[] = {
      "name",         "batch",           "seq",         "embed",
      "hidden",       "heads",           "kv_heads",    "experts",
      "top_k",        "capacity_factor", "expert_gemms", "gate_aux_columns",
      "attention_bias", "layers",        "vocab",      "steady_state"};
  for (const auto &kv : o)
    if (!llvm::is_contained(known, llvm::StringRef(kv.first))) {
      error = "unknown field '" + kv.first.str() + "'";
      return std::nullopt;
    }
  auto integer = [&](llvm::StringRef key, int64_t &out) {
    if (const json::Value *v = o.get(key)) {
      std::optional<int64_t> i = v->getAsInteger();
      if (!i) {
        error = "field '" + key.str() + "' must be an integer";
        return false;
      }
      out = *i;
    }
    return true;
  };
  FsmoeLayerShape &s = c.shape;
  s.experts = defaultExperts;
  s.sharedNic = sharedNic;
  s.kvHeads = 0;
  if (!integer("batch", s.batch) || !integer("seq", s.seq) ||
      !integer("embed", s.embed) || !integer("hidden", s.hidden) ||
      !integer("heads", s.heads) || !integer("kv_heads", s.kvHeads) ||
      !integer("experts", s.experts) || !integer("top_k", s.topK) ||
      !integer("expert_gemms", s.expertGemms) ||
      !integer("gate_aux_columns", s.gateAuxColumns) ||
      !integer("layers", c.layers) || !integer("vocab", c.vocab))
    return std::nullopt;
  if (s.kvHeads == 0)
    s.kvHeads = s.heads;
  if (const json::Value *v = o.get("capacity_factor")) {
    std::optional<double> d = v->getAsNumber();
    if (!d) {
      error = "field 'capacity_factor' must be a number";
      return std::nullopt;
    }
    s.capacityFactor = *d;
  }
  for (auto [key, field] :
       {std::pair<llvm::StringRef, std::optional<bool> *>{"attention_bias",
                                                           nullptr},
        {"steady_state", &c.steadyState}}) {
    const json::Value *v = o.get(key);
    if (!v)
      continue;
    std::optional<bool> b = v->getAsBoolean();
    if (!b) {
      error = "field '" + key.str() + "' must be true or false";
      return std::nullopt;
    }
    if (field)
      *field = *b;
    else
      s.attentionBias = *b;
  }
  if (auto n = o.getString("name"))
    c.name = n->str();
  if (c.layers < 1 || c.vocab < 0) {
    error = c.layers < 1 ? "layers must be positive"
                         : "vocab must not be negative";
    return std::nullopt;
  }
  if (c.vocab > 0 && c.steadyState.value_or(false)) {
    error = "steady_state is for configured layers (vocab 0)";
    return std::nullopt;
  }
  return c;
}

/// The stack a configuration describes.
FsmoeStack stackOf(const Config &c, const FsmoeLayerShape &shape,
                   const HardwareProfile &p) {
  FsmoeStack s;
  s.layer = fsmoeLayerCosts(shape, p);
  s.layers = c.layers;
  const double node = p.gpusPerNode, m = shape.embed;
  if (c.vocab == 0) {
    // FSMoE §6.3: a configured layer "with its gradient aggregation added".
    s.steadyState = c.steadyState.value_or(true);
    return s;
  }
  // LM head tied to the embedding, both vocabulary-parallel over the node.
  const double tokens = double(shape.batch) * shape.seq;
  s.headUs = p.gemm.time(2 * tokens * m * c.vocab / node) + p.launchUs;
  s.embeddingBackwardUs = p.memory.time(2 * tokens * m * 4) + p.launchUs;
  s.headGradientBytes = double(c.vocab) / node * m * 4;
  // SGD over this rank's weights (moe.sgd: read weight and gradient,
  // write weight), as the project's training step updates.
  double params = c.layers * (s.layer.gradientBytes / 4 +
                              double(shape.experts) / p.nodes *
                                  shape.expertGemms * m * shape.hidden /
                                  node) +
                  s.headGradientBytes / 4;
  s.optimizerUs = p.memory.time(3 * params * 4) + p.launchUs;
  return s;
}

json::Array degrees(const std::vector<int64_t> &d) {
  json::Array a;
  for (int64_t r : d)
    a.push_back(r);
  return a;
}

const char *sourceName(GradientPlan::Source s) {
  switch (s) {
  case GradientPlan::Source::Greedy:
    return "greedy";
  case GradientPlan::Source::Trivial:
    return "trivial";
  case GradientPlan::Source::DifferentialEvolution:
    return "differential-evolution";
  }
  return "?";
}

json::Object report(const Config &c, const HardwareProfile &p,
                    const std::vector<LayerSchedule> &schedules,
                    const PlanOptions &options, SimulationResult *traced) {
  json::Object schedulesOut;
  FsmoeStack sparse = stackOf(c, c.shape, p);
  FsmoeLayerShape einsumShape = c.shape;
  einsumShape.order = TokenOrder::Einsum;
  FsmoeStack einsum = stackOf(c, einsumShape, p);
  for (LayerSchedule schedule : schedules) {
    const FsmoeStack &stack =
        schedule == LayerSchedule::DeepSpeedMoE ? einsum : sparse;
    // What the planner believes; the simulation below runs `stack`.
    FsmoeStack believed = stack;
    if (literalBackward && (schedule == LayerSchedule::Fsmoe ||
                            schedule == LayerSchedule::FsmoeNoIIo))
      believed.layer.backward.expert.workUs *= 2;
    auto start = std::chrono::steady_clock::now();
    StepPlan plan = planStep(believed, schedule, options);
    std::chrono::duration<double, std::milli> planning =
        std::chrono::steady_clock::now() - start;
    SimulationResult sim = simulateStep(stack, plan);
    json::Object out{{"iteration_us", sim.iterationUs},
                     {"forward_degree", degrees(plan.forwardDegree)},
                     {"backward_degree", degrees(plan.backwardDegree)},
                     {"compute_busy_us", sim.computeBusyUs},
                     {"inter_node_busy_us", sim.interCommBusyUs},
                     {"intra_node_busy_us", sim.intraCommBusyUs},
                     {"link_overlap_us", sim.linkOverlapUs},
                     {"exposed_comm_us", sim.exposedCommUs},
                     {"planning_ms", planning.count()},
                     // The first layer's forward MoE phase alone, without
                     // a slice: how the MoE layer itself fares.
                     {"forward_moe_us",
                      simulateMoePhase(stack.layer.forward,
                                       plan.forwardDegree.front(), 0,
                                       plan.overlapIntraInter)}};
    if (schedule == LayerSchedule::Fsmoe ||
        schedule == LayerSchedule::FsmoeNoIIo ||
        schedule == LayerSchedule::TutelImproved) {
      const GradientPlan &g = plan.gradients;
      double sliced = 0;
      for (const WindowPlan &w : g.windows)
        sliced += w.bytes;
      out["gradient"] = json::Object{{"source", sourceName(g.source)},
                                     {"predicted_us", g.predictedUs},
                                     {"greedy_us", g.greedyUs},
                                     {"trivial_us", g.trivialUs},
                                     {"sliced_bytes", sliced},
                                     {"tail_bytes", g.tailBytes}};
      if (!g.evolutionError.empty())
        out["evolution_error"] = g.evolutionError;
    }
    if (schedule == LayerSchedule::Fsmoe) {
      DegreeChoice f =
          findOptimalPipelineDegree(stack.layer.forward, 0, options.degrees);
      auto choice = [](const DegreeChoice &d) {
        return json::Object{{"degree", d.degree},
                            {"time_us", d.timeUs},
                            {"case", int64_t(d.pipelineCase)}};
      };
      out["algorithm1_forward"] = choice(f);
      out["algorithm1_backward_no_gar"] = choice(findOptimalPipelineDegree(
          believed.layer.backward, 0, options.degrees));
    }
    if (traced && traceSchedule == scheduleName(schedule))
      *traced = sim;
    schedulesOut[scheduleName(schedule)] = std::move(out);
  }
  const FsmoeLayerCosts &l = sparse.layer;
  return json::Object{
      {"name", c.name},
      {"profile", p.name},
      {"simulated", true},
      {"layer",
       json::Object{{"capacity", l.capacity},
                    {"a2a_bytes", l.a2aBytes},
                    {"ag_bytes", l.agBytes},
                    {"expert_flops", l.expertFlops},
                    {"gradient_bytes", l.gradientBytes},
                    {"a2a_us", l.forward.allToAll.whole()},
                    {"ag_us", l.forward.allGather.whole()},
                    {"rs_us", l.forward.reduceScatter.whole()},
                    {"expert_us", l.forward.expert.whole()},
                    {"attention_us", l.attentionUs},
                    {"gate_us", l.gateUs},
                    {"order_us", l.orderUs},
                    {"gradient_all_reduce_us",
                     l.gradientAllReduce(l.gradientBytes)}}},
      {"schedules", std::move(schedulesOut)}};
}

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-fsmoe-predict: error: " << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "FSMoE's planning decisions and simulated step times per schedule\n");
  llvm::Expected<HardwareProfile> profile =
      HardwareProfile::loadOption("--profile ", profileName);
  if (!profile)
    return fail(llvm::toString(profile.takeError()));

  PlanOptions options;
  options.differentialEvolution = !noEvolution;
  options.smallAllToAllRule = smallA2aRule;
  if (enumerate)
    options.degrees.solver = DegreeOptions::Solver::Enumerate;
  options.degrees.degrees.clear();
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(degreeList).split(parts, ',');
  for (llvm::StringRef part : parts) {
    int64_t r;
    if (part.trim().getAsInteger(10, r) || r < 1 ||
        (!options.degrees.degrees.empty() && r <= options.degrees.degrees.back()))
      return fail("--degrees must be increasing positive integers, got '" +
                  degreeList + "'");
    options.degrees.degrees.push_back(r);
  }
  std::vector<LayerSchedule> schedules;
  parts.clear();
  llvm::StringRef(scheduleList).split(parts, ',');
  for (llvm::StringRef part : parts) {
    std::optional<LayerSchedule> found;
    for (LayerSchedule s :
         {LayerSchedule::DeepSpeedMoE, LayerSchedule::Tutel,
          LayerSchedule::TutelImproved, LayerSchedule::FsmoeNoIIo,
          LayerSchedule::Fsmoe})
      if (part.trim() == scheduleName(s))
        found = s;
    if (!found)
      return fail("unknown schedule '" + part + "' in --schedules");
    schedules.push_back(*found);
  }

  std::vector<Config> configs;
  if (inputFile.empty()) {
    json::Object o{{"batch", int64_t(batch)},
                   {"seq", int64_t(seq)},
                   {"embed", int64_t(embed)},
                   {"hidden", int64_t(hidden)},
                   {"heads", int64_t(heads)},
                   {"kv_heads", int64_t(kvHeads)},
                   {"top_k", int64_t(topK)},
                   {"capacity_factor", double(capacityFactor)},
                   {"expert_gemms", int64_t(expertGemms)},
                   {"gate_aux_columns", int64_t(gateAux)},
                   {"attention_bias", !noBias},
                   {"layers", int64_t(layers)},
                   {"vocab", int64_t(vocab)}};
    if (notSteady)
      o["steady_state"] = false;
    if (experts)
      o["experts"] = int64_t(experts);
    std::string error;
    std::optional<Config> c = readConfig(o, profile->nodes, error);
    if (!c)
      return fail(error);
    configs.push_back(*c);
  } else {
    auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(inputFile);
    if (!buffer)
      return fail("cannot read '" + inputFile +
                  "': " + buffer.getError().message());
    llvm::SmallVector<llvm::StringRef> lines;
    (*buffer)->getBuffer().split(lines, '\n');
    for (auto [number, line] : llvm::enumerate(lines)) {
      if (line.trim().empty())
        continue;
      auto where = llvm::formatv("{0}:{1}", inputFile, number + 1).str();
      llvm::Expected<json::Value> v = json::parse(line);
      if (!v)
        return fail(where + ": not JSON: " + llvm::toString(v.takeError()));
      const json::Object *o = v->getAsObject();
      if (!o)
        return fail(where + ": a configuration must be a JSON object");
      std::string error;
      std::optional<Config> c = readConfig(*o, profile->nodes, error);
      if (!c)
        return fail(where + ": " + error);
      configs.push_back(*c);
    }
  }
  if (!traceFile.empty() && configs.size() != 1)
    return fail("--trace needs exactly one configuration");
  if (!traceFile.empty() &&
      llvm::none_of(schedules, [](LayerSchedule s) {
        return traceSchedule == scheduleName(s);
      }))
    return fail("--trace-schedule '" + traceSchedule +
                "' is not among --schedules");
  // Every configuration is checked before any output.
  for (const Config &c : configs) {
    std::string error = checkFsmoeLayer(c.shape, *profile);
    if (!error.empty())
      return fail((c.name.empty() ? "configuration" : c.name) + ": " + error);
  }
  std::optional<llvm::ToolOutputFile> trace;
  if (!traceFile.empty()) {
    std::error_code ec;
    trace.emplace(traceFile, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + traceFile + "': " + ec.message());
  }

  for (const Config &c : configs) {
    SimulationResult traced;
    json::Object out = report(c, *profile, schedules, options,
                              traceFile.empty() ? nullptr : &traced);
    llvm::outs() << json::Value(std::move(out)) << "\n";
    if (trace) {
      trace->os() << chromeTrace(traced, profile->nodes * profile->gpusPerNode,
                                 traceSchedule)
                  << "\n";
      trace->keep();
    }
  }
  return 0;
}
