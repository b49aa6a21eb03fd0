//===- driver.cpp - run a generated training step ---------------------------===//
//
// A minimal trainer around the C++ that moe_compile_model generates
// (docs/codegen.md): it declares the step, fills its arguments, runs N
// steps, prints moe-run's loss lines and can write the results in moe-run's
// --dump format, which python/compare_dumps.py compares.
//
//   mpirun -np P codegen-driver --inputs PREFIX [--dump PREFIX] [--steps N]
//                               [--timeout SECONDS] [--params FILE]
//                               [--backend cpu|cuda] [--seed S]
//                               [--routing-trace FILE]
//                               [--expert-placement [BLOCK=]RANKS|@FILE]...
//                               [--expert-placement-at STEP:[BLOCK=]RANKS]...
//   mpirun -np P codegen-driver --data TEXT --params FILE [--steps N] ...
//
// --inputs PREFIX reads every argument from what `moe-run --dump-inputs`
// wrote (so both start from the same parameters and tokens).
//
// --params FILE (the parameter file moe_compile_model writes) sets the
// parameters to the model's initial weights, replacing those of --inputs.
//
// --data TEXT trains a byte-level model on a text file as `moe-run --data`
// does, with no moe-run involved: each step fills the token ids and labels
// of every rank with the same byte windows (moe_rt/text_data.h, shared with
// moe-run), so the loss lines are moe-run's. The parameters come from
// --params (or --inputs). The step's token ids and labels are its two
// unnamed arguments (moe_step_argument_name NULL), token ids first as the
// frontends write them (tokens, labels, then the parameters), and the
// embedding table, `embed.table` (the name both frontends give it), needs
// 256 rows, one per byte.
//
// --seed S is moe-run's --seed for the noise of noisy_topk gates
// (moe_step_set_gate_seed); parameters come from --params / --inputs.
//
// --expert-placement [BLOCK=]RANKS|@FILE (expert -> rank of every block, or
// of block BLOCK; repeatable; as moe-run's option) sets the expert
// placement of a step scheduled with expert-placement=1
// (moe_step_set_expert_slots); --inputs from moe-run with the same option
// hold the parameters in that layout. --expert-placement-at
// STEP:[BLOCK=]RANKS (STEP >= 2, repeatable, as moe-run's option) changes
// it before step STEP: the step moves the changed blocks' expert weights
// and optimizer state first (moe_step_set_expert_slots). A resumed run
// continues under the checkpoint's placement (moe_step_resume); an
// --expert-placement must then name the same.
//
// --routing-trace FILE records the routing trace of a step scheduled with
// routing statistics (moe_step_set_routing_trace), as moe-run's option;
// rank 0 then also prints each step's balance line on stderr, as moe-run.
//
// With more than one step, rank 0 prints moe-run's progress line
// ("[s/N] X s/step, Y s left") on stderr after each step.
//
// --backend cuda (default cpu) runs the step on one GPU per rank (buffers on
// the device, CUDA streams, NCCL collectives: moe_step_create_on); without a
// CUDA device it stops with "no CUDA device" and exit status 1.
//
// PREFIX.rank<r> is each rank's file. The model's functions are
// <MOE_MODEL>_declare and <MOE_MODEL>_step (moe_compile_model's PREFIX,
// `model` by default), declared by the generated <MOE_MODEL>.h.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/command_line.h"
#include "moe_rt/expert_placement.h"
#include "moe_rt/text_data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#ifndef MOE_MODEL
#define MOE_MODEL model
#endif
#define MOE_CAT2(a, b) a##b
#define MOE_CAT(a, b) MOE_CAT2(a, b)
#define MOE_STR2(x) #x
#define MOE_STR(x) MOE_STR2(x)

// The header moe_compile_model generates for the model (<prefix>.h on the
// library's include path): <prefix>_declare, <prefix>_step and the runtime's
// step API, as a trainer of one model would include it by name.
#include MOE_STR(MOE_MODEL.h)

static int usage(const char *message) {
  std::fprintf(stderr,
               "codegen-driver: error: %s\nusage: mpirun -np P codegen-driver "
               "(--inputs PREFIX | --data TEXT --params FILE) [--dump PREFIX] "
               "[--steps N] [--timeout S] [--params FILE] "
               "[--backend cpu|cuda] [--seed S] [--routing-trace FILE] "
               "[--expert-placement [BLOCK=]RANKS|@FILE]... "
               "[--expert-placement-at STEP:[BLOCK=]RANKS|@FILE]... "
               "[--save-every N --checkpoint DIR] [--resume DIR]\n",
               message);
  moe_rt_mpi_finalize();
  return 2;
}

/// The step's token-id and label arguments (indices), found from the
/// argument table: its unnamed arguments, token ids first.
struct TextArguments {
  int tokens = -1, labels = -1;
};

/// Finds the token ids and labels and checks what --data needs of the
/// step; on failure returns the message. Every rank sees the same step, so
/// every rank gets the same answer.
static std::string findTextArguments(moe_step *s, TextArguments &out) {
  std::vector<int> unnamed;
  const moe_rt_tensor *table = nullptr;
  for (int i = 0; i < moe_step_num_arguments(s); ++i) {
    const char *name = moe_step_argument_name(s, i);
    if (!name)
      unnamed.push_back(i);
    else if (std::string(name) == "embed.table")
      table = moe_step_argument_tensor(s, i);
  }
  if (unnamed.size() != 2)
    return "--data needs a step whose token ids and labels are its two "
           "unnamed arguments; this one has " +
           std::to_string(unnamed.size()) + " unnamed arguments";
  const moe_rt_tensor *t = moe_step_argument_tensor(s, unnamed[0]),
                      *l = moe_step_argument_tensor(s, unnamed[1]);
  if (t->dtype != MOE_RT_I64 || l->dtype != MOE_RT_I64 || t->rank != 2 ||
      l->rank != 2 || t->shape[0] != l->shape[0] ||
      t->shape[1] != l->shape[1])
    return "--data needs token ids and labels of one integer [samples, "
           "sequence] shape; the step's unnamed arguments are not";
  if (!table)
    return "--data cannot check the vocabulary: the step has no "
           "'embed.table' parameter";
  if (table->rank != 2 || table->shape[0] < moe_rt::text_data::kByteVocabulary)
    return moe_rt::text_data::vocabularyError();
  out.tokens = unnamed[0];
  out.labels = unnamed[1];
  return "";
}

/// Fills this rank's token ids and labels of the step that begins at data
/// position `position` (samples all ranks read before it) from the text,
/// as moe-run --data does. An empty return means success.
static std::string fillText(moe_step *s, const TextArguments &args,
                            const std::string &text, uint64_t position) {
  for (int which : {args.tokens, args.labels}) {
    moe_rt_tensor *arg = moe_step_argument_tensor(s, which);
    // Through a host tensor: on the CUDA backend the argument is on the GPU.
    moe_rt_tensor host;
    if (moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_I64, arg->rank, arg->shape,
                             &host) != MOE_RT_OK)
      return moe_rt_last_error();
    std::string error;
    bool ok = moe_rt::text_data::fill(
        text, position, moe_step_rank(s), arg->shape[0], arg->shape[1],
        which == args.labels, static_cast<int64_t *>(host.data), error);
    if (ok && moe_rt_tensor_copy(arg, &host) != MOE_RT_OK)
      error = moe_rt_last_error(), ok = false;
    moe_rt_tensor_destroy(&host);
    if (!ok)
      return "--data: " + error;
  }
  return "";
}

/// Ends every rank alike with status 1 after an error all ranks found (the
/// step's shape, the text's length): rank 0 says why.
static int stop(moe_step *s, const std::string &message) {
  if (moe_step_rank(s) == 0)
    std::fprintf(stderr, "codegen-driver: error: %s\n", message.c_str());
  moe_step_destroy(s);
  moe_rt_mpi_finalize();
  return 1;
}

/// Applies `option`'s maps (expert -> rank for every block, or
/// BLOCK=RANKS, or @FILE; moe_rt/expert_placement.h's applySpec) to
/// `placement` for the step's expert_slots.<block> inputs; "" or why not.
std::string applyPlacement(moe_step *s, const std::string &option,
                           const std::vector<std::string> &maps,
                           moe_rt::expert_placement::Placement &placement) {
  namespace ep = moe_rt::expert_placement;
  std::map<int64_t, ep::BlockShape> shapes;
  for (int i = 0; i < moe_step_num_arguments(s); ++i) {
    const char *name = moe_step_argument_name(s, i);
    int64_t block = name ? ep::blockOfSlotsInput(name) : -1;
    if (block < 0)
      continue;
    moe_rt_tensor *t = moe_step_argument_tensor(s, i);
    shapes[block] = {t->shape[0], t->shape[0] * t->shape[1]};
  }
  if (shapes.empty())
    return option + ": the step has no expert placement input "
           "(schedule it with expert-placement=1)";
  for (std::string text : maps) {
    if (!text.empty() && text[0] == '@') {
      std::ifstream in(text.substr(1));
      if (!in)
        return option + ": cannot read '" + text.substr(1) + "'";
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (std::string why = ep::applySpec(text, shapes, placement); !why.empty())
      return option + ": " + why;
  }
  return "";
}

/// Hands every table of `placement` to the step.
static void setPlacement(moe_step *s,
                  const moe_rt::expert_placement::Placement &placement) {
  for (const auto &[block, table] : placement)
    moe_step_set_expert_slots(s, block, table.data(), int64_t(table.size()));
}

/// The command line (every flag takes a value; see the top of this file).
struct Options {
  std::string inputs, dump, params, data, routingTrace, checkpoint, resume;
  std::vector<std::string> placement; // --expert-placement, in order
  std::vector<std::pair<int, std::string>> laterPlacement; // STEP, map
  int steps = 1, saveEvery = 0;
  double timeout = 60;
  std::optional<uint64_t> seed; // moe-run's default when absent
  moe_rt_backend backend = MOE_RT_CPU;
};

/// One word of the command line into `o` (moe_rt/command_line.h, moe-run's
/// reader, so a flag both take is read and refused alike); false for a
/// word it does not know.
static bool readOption(moe_rt::options::CommandLine &args, Options &o) {
  std::string backend;
  uint64_t seed = 0;
  if (moe_rt::expert_placement::readLaterMap(args, o.laterPlacement))
    return true;
  if (args.choice("--backend", {"cpu", "cuda"}, backend)) {
    o.backend = backend == "cuda" ? MOE_RT_CUDA : MOE_RT_CPU;
    return true;
  }
  if (args.whole("--seed", seed)) {
    o.seed = seed;
    return true;
  }
  return args.text("--inputs", o.inputs) || args.text("--dump", o.dump) ||
         args.text("--params", o.params) || // moe_compile_model's file
         args.text("--data", o.data) ||
         args.repeated("--expert-placement", o.placement) ||
         args.text("--routing-trace", o.routingTrace) ||
         args.text("--checkpoint", o.checkpoint) || // the save directory
         args.text("--resume", o.resume) ||
         args.count("--save-every", o.saveEvery) ||
         args.count("--steps", o.steps) || args.seconds("--timeout", o.timeout);
}

/// The options; `error` is "" or what is wrong with them.
static Options parseOptions(int argc, char **argv, std::string &error) {
  Options o;
  moe_rt::options::CommandLine args(argc, argv);
  while (args.next())
    if (!readOption(args, o))
      args.unknown();
  error = args.error();
  if (!error.empty())
    return o;
  if (o.data.empty() && o.inputs.empty())
    error = "--inputs is required (write them with moe-run --dump-inputs), "
            "or --data TEXT with --params FILE";
  else if (!o.laterPlacement.empty() && o.placement.empty() &&
           o.resume.empty())
    error = "--expert-placement-at needs a first map (--expert-placement)";
  else if ((o.saveEvery > 0) != !o.checkpoint.empty())
    error = "--save-every N and --checkpoint DIR go together";
  else if (!o.data.empty() && o.inputs.empty() && o.params.empty())
    error = "--data needs the initial parameters: --params FILE (the "
            "parameter file moe_compile_model writes)";
  return o;
}

/// --expert-placement's maps set on the step; "" or why not.
static std::string setPlacements(moe_step *s, const Options &o) {
  if (o.placement.empty())
    return "";
  moe_rt::expert_placement::Placement slots;
  std::string error =
      applyPlacement(s, "--expert-placement", o.placement, slots);
  if (error.empty())
    setPlacement(s, slots);
  return error;
}

/// --expert-placement-at's maps, as moe-run's: each on top of the one
/// before, in step order (`o`'s are sorted), the first on top of the
/// placement in force (a resumed checkpoint's); "" or why not.
static std::string
laterPlacements(moe_step *s, Options &o,
                std::vector<moe_rt::expert_placement::Placement> &later) {
  std::stable_sort(o.laterPlacement.begin(), o.laterPlacement.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  for (size_t k = 0; k < o.laterPlacement.size(); ++k) {
    if (later.empty()) {
      later.emplace_back();
      for (int i = 0; i < moe_step_num_arguments(s); ++i) {
        const char *name = moe_step_argument_name(s, i);
        int64_t block =
            name ? moe_rt::expert_placement::blockOfSlotsInput(name) : -1;
        std::vector<int64_t> t(size_t(
            block < 0 ? 0 : moe_step_expert_slots(s, block, nullptr, 0)));
        if (!t.empty()) {
          moe_step_expert_slots(s, block, t.data(), int64_t(t.size()));
          later.back()[block] = std::move(t);
        }
      }
    } else {
      later.push_back(later.back());
    }
    std::string error = applyPlacement(s, "--expert-placement-at",
                                       {o.laterPlacement[k].second},
                                       later.back());
    if (!error.empty())
      return error;
  }
  return "";
}

/// --data's step arguments into `args`, and a text long enough for one
/// window; "" or why not.
static std::string checkText(moe_step *s, const std::string &text,
                             TextArguments &args) {
  std::string error = findTextArguments(s, args);
  if (!error.empty())
    return error;
  int64_t len = moe_step_argument_tensor(s, args.tokens)->shape[1];
  if (moe_rt::text_data::windows(text, len) < 1)
    return "--data: " + moe_rt::text_data::shortTextError(len);
  return "";
}

/// Every argument from --inputs (this rank's file, `rank` its suffix),
/// then the parameters from the build-time file; token ids / labels come
/// from --inputs or --data.
static void loadArguments(moe_step *s, const Options &o,
                          const std::string &rank) {
  if (!o.inputs.empty())
    moe_step_load_inputs(s, (o.inputs + rank).c_str());
  if (o.params.empty())
    return;
  moe_step_load_params(s, o.params.c_str());
  if (moe_step_rank(s) == 0) {
    int n = 0;
    for (int i = 0; i < moe_step_num_arguments(s); ++i)
      n += moe_step_argument_name(s, i) != nullptr;
    std::fprintf(stderr, "codegen-driver: %d parameters from '%s'\n", n,
                 o.params.c_str());
  }
}

/// Rank 0's lines after step `step` (the `i`th of `steps`), as moe-run's:
/// the loss on stdout, the routing balance and the progress on stderr.
static void printStep(moe_step *s, int step, int i, int steps, double loss,
                      std::chrono::steady_clock::time_point began) {
  std::printf("step %d loss %.6f\n", step, loss);
  if (*moe_step_routing_balance(s))
    std::fprintf(stderr, "%s\n", moe_step_routing_balance(s));
  if (steps > 1) { // as moe-run: progress on stderr, stdout parseable
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - began;
    std::fprintf(stderr, "[%d/%d] %.2f s/step, %.0f s left\n", i, steps,
                 elapsed.count() / i, elapsed.count() / i * (steps - i));
  }
}

int main(int argc, char **argv) {
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "codegen-driver: error: %s\n", moe_rt_last_error());
    return 2;
  }
  std::string optionError;
  Options o = parseOptions(argc, argv, optionError);
  if (!optionError.empty())
    return usage(optionError.c_str());

  // Every rank sees the same answer here (the build, the node's devices),
  // so all stop together with status 1 instead of an MPI abort.
  if (o.backend == MOE_RT_CUDA &&
      (!moe_rt_cuda_compiled() || moe_rt_cuda_device_count() == 0)) {
    std::fprintf(stderr, "codegen-driver: error: %s\n",
                 moe_rt_cuda_compiled()
                     ? "no CUDA device is available on this machine "
                       "(--backend cuda needs one GPU per rank)"
                     : "no CUDA backend: the runtime was built without CUDA");
    moe_rt_mpi_finalize();
    return 1;
  }
  // The text, read by every rank before any collective. A rank that cannot
  // read it ends the job (its peers would wait for it otherwise).
  std::string text;
  if (!o.data.empty()) {
    std::ifstream in(o.data, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "codegen-driver: error: cannot read --data '%s'\n",
                   o.data.c_str());
      moe_rt_mpi_abort(1);
      return 1;
    }
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  moe_step *s = moe_step_create_on(o.timeout, o.backend);
  std::string rank = ".rank" + std::to_string(moe_step_rank(s));
  MOE_CAT(MOE_MODEL, _declare)(s);
  if (o.seed)
    moe_step_set_gate_seed(s, *o.seed);
  if (!o.routingTrace.empty())
    moe_step_set_routing_trace(s, o.routingTrace.c_str());
  TextArguments textArgs;
  std::string error = setPlacements(s, o);
  if (error.empty() && !o.data.empty())
    error = checkText(s, text, textArgs);
  if (!error.empty())
    return stop(s, error);
  loadArguments(s, o, rank);
  // A resumed run continues the checkpoint's update count, seed and data
  // position (samples over all ranks: moe_rt/text_data.h), on any grid.
  int done = 0;
  uint64_t position = 0;
  if (!o.resume.empty()) {
    position = moe_step_resume(s, o.resume.c_str());
    done = int(moe_step_updates_done(s));
    if (moe_step_rank(s) == 0)
      std::fprintf(stderr, "codegen-driver: resumed from '%s' after step %d\n",
                   o.resume.c_str(), done);
  }
  std::vector<moe_rt::expert_placement::Placement> later;
  error = laterPlacements(s, o, later);
  if (!error.empty())
    return stop(s, error);
  // Samples a rank reads per step (the token ids' first dimension).
  int64_t samples =
      o.data.empty() ? 0 : moe_step_argument_tensor(s, textArgs.tokens)->shape[0];
  auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= o.steps; ++i) {
    int step = done + i;
    if (!o.data.empty()) {
      std::string error = fillText(s, textArgs, text, position);
      if (!error.empty()) // checked above; a failed host copy lands here
        return stop(s, error);
    }
    for (size_t k = 0; k < later.size(); ++k)
      if (step == o.laterPlacement[k].first) // the step moves the experts first
        setPlacement(s, later[k]);
    MOE_CAT(MOE_MODEL, _step)(s);
    double loss = moe_step_global_loss(s);
    if (moe_step_rank(s) == 0)
      printStep(s, step, i, o.steps, loss, start);
    std::fflush(stdout);
    moe_step_advance(s);
    position =
        moe_rt::text_data::advance(position, moe_step_world_size(s), samples);
    if (o.saveEvery && step % o.saveEvery == 0)
      moe_step_save_checkpoint(s, o.checkpoint.c_str(), position);
  }
  if (!o.dump.empty())
    moe_step_dump_results(s, (o.dump + rank).c_str());
  moe_step_destroy(s);
  moe_rt_mpi_finalize();
  return 0;
}
