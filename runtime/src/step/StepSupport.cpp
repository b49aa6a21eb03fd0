//===- StepSupport.cpp - bookkeeping for generated training steps ---------===//
//
// The state behind moe_rt/step_support.h. It follows tools/moe-run's Runner
// (streams per #moe.stream, communicators split from the world by grid
// coordinates, dump formats), so that a generated step and moe-run compute
// the same thing from the same inputs.
//
// On the CUDA backend (moe_step_create_on) buffers live on the rank's GPU,
// compute streams are CUDA streams and comm streams the CUDA pool; what the
// trainer and the host-side splats touch is staged through host copies
// (moe_rt_tensor_copy), each after the step's streams were synchronised.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/expert_placement.h"
#include "moe_rt/kept_activations.h"
#include "moe_rt/profile.h"
#include "moe_rt/step_support.h"

#include "../Backend.h"
#include "../Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Buffer {
  moe_rt_tensor t{};
  bool declared = false;
  /// A host buffer the running step has not reached yet: zeroed when the
  /// step first asks for it (moe_step_tensor).
  bool stale = false;
  /// Its op writes all of it: never zeroed (moe_step_buffer_written).
  bool written = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t d = 0; d < t.rank; ++d)
      n *= t.shape[d];
    return n;
  }
  size_t bytes() const { return numel() * moe_rt_dtype_size(t.dtype); }
};

/// A host tensor shaped like `like`, for staging a device buffer.
struct HostCopy {
  std::vector<int64_t> storage; // 8-byte aligned for I64 and F32 alike
  moe_rt_tensor t{};
  explicit HostCopy(const moe_rt_tensor &like) : t(like) {
    size_t bytes = size_t(std::max<int64_t>(0, moe_rt_tensor_numel(&like))) *
                   moe_rt_dtype_size(like.dtype);
    storage.resize((bytes + 7) / 8 + 1);
    t.data = storage.data();
    t.backend = MOE_RT_CPU;
  }
};

[[noreturn]] void fail(const moe_step *s, const std::string &message);

} // namespace

struct moe_step {
  double timeout = 60;
  moe_rt_backend backend = MOE_RT_CPU;
  int rank = 0, world = 1;
  moe_rt_comm worldComm = nullptr;
  /// MOE_STEP_CHECK_COLLECTIVES=every-step: signatures exchanged on every
  /// step, not only the first (moe-run's --check-collectives).
  bool checkCollectivesEveryStep = false;
  /// moe_step_global_loss's stream and world group, made with the step:
  /// creating a communicator is a collective without a timeout, which a
  /// rank that stops between two steps would leave the others waiting in.
  moe_rt_stream lossStream = nullptr;
  moe_rt_comm lossComm = nullptr;
  std::vector<Buffer> buffers;
  std::vector<int64_t> arguments;
  std::vector<std::string> argumentNames; // "" for token ids / labels
  std::vector<bool> argumentNamed;
  /// What each argument is (moe/Target/StepState.h's roles).
  enum class Role { input, param, state, stepInput };
  std::vector<Role> argumentRoles;
  /// The "lr" step input's schedule (moe_step_lr_schedule).
  moe_rt_lr_schedule schedule{MOE_RT_LR_CONSTANT, 0, 0, 0, 0};
  /// The checkpoint manifest moe-convert-to-emitc computed (counters 0);
  /// empty: the step cannot be checkpointed.
  std::string manifest;
  std::vector<std::pair<std::string, int64_t>> results;
  std::map<std::string, std::vector<int64_t>> grids;
  std::map<std::pair<int, int64_t>, moe_rt_stream> streams;
  std::map<std::string, moe_rt_comm> comms;
  std::vector<moe_rt_event> events;
  // noisy_topk: moe-run's --seed and the number of steps begun so far.
  uint64_t gateSeedBase = MOE_RT_GATE_NOISE_SEED;
  int64_t stepsBegun = 0;
  // moe.routing_counts' statistics: the balance line, the routing trace.
  moe_rt_routing_log *routingLog = moe_rt_routing_log_create();
  // The expert placement asked for (moe_step_set_expert_slots: block ->
  // table, -1 for every block; none: expert parallelism's layout) and the
  // one each block's weights are in since step 1 (or the resumed
  // checkpoint's).
  moe_rt::expert_placement::Placement expertSlots, expertSlotsInUse;

  Buffer &buffer(int64_t id) {
    if (id < 0 || id >= int64_t(buffers.size()) || !buffers[id].declared)
      fail(this, "buffer " + std::to_string(id) + " was never declared");
    return buffers[id];
  }
};

namespace {

void fail(const moe_step *s, const std::string &message) {
  std::fprintf(stderr, "moe step: rank %d: error: %s\n", s ? s->rank : -1,
               message.c_str());
  std::fflush(stderr);
  moe_rt_mpi_abort(2);
  std::exit(2);
}

void check(const moe_step *s, moe_rt_status st, const std::string &what) {
  if (st != MOE_RT_OK)
    fail(s, what + ": " + moe_rt_last_error());
}

} // namespace

moe_step *moe_step_create(double timeout_s) {
  return moe_step_create_on(timeout_s, MOE_RT_CPU);
}

moe_step *moe_step_create_on(double timeout_s, moe_rt_backend backend) {
  auto s = std::make_unique<moe_step>();
  s->timeout = timeout_s;
  if (backend != MOE_RT_CPU && backend != MOE_RT_CUDA)
    fail(s.get(), "unknown backend " + std::to_string(int(backend)));
  s->backend = backend;
  if (const char *p = std::getenv("MOE_RT_PROFILE"); p && *p && *p != '0')
    moe_rt_profile_enable(1);
  if (const char *p = std::getenv("MOE_STEP_CHECK_COLLECTIVES"); p && *p) {
    std::string v = p;
    if (v != "first-step" && v != "every-step")
      fail(s.get(), "MOE_STEP_CHECK_COLLECTIVES must be 'first-step' or "
                    "'every-step', not '" + v + "'");
    s->checkCollectivesEveryStep = v == "every-step";
  }
  // Shape checks on, as moe-run: a mismatched collective is reported, not a
  // hang or corrupted memory.
  check(s.get(), moe_rt_comm_create_world(timeout_s, 1, &s->worldComm),
        "creating the world communicator");
  s->rank = moe_rt_comm_rank(s->worldComm);
  s->world = moe_rt_comm_size(s->worldComm);
  check(s.get(), moe_rt_stream_create_pool(&s->lossStream),
        "creating a stream");
  check(s.get(), moe_rt_comm_create_world(timeout_s, 0, &s->lossComm),
        "creating the world communicator");
  if (backend == MOE_RT_CUDA) {
    if (!moe_rt_cuda_compiled())
      fail(s.get(), "no CUDA backend: the runtime was built without CUDA");
    if (moe_rt_cuda_device_count() == 0)
      fail(s.get(), "no CUDA device is available on this machine (the "
                    "step's CUDA backend needs one GPU per rank)");
    // One GPU per rank of a node, by node-local rank.
    int local = 0, localSize = 1;
    check(s.get(), moe_rt_comm_node_rank(s->worldComm, &local, &localSize),
          "finding the node-local rank");
    check(s.get(), moe_rt_cuda_select_device(local), "selecting a GPU");
  }
  return s.release();
}

void moe_step_destroy(moe_step *s) {
  if (!s)
    return;
  for (auto &[key, st] : s->streams)
    moe_rt_stream_destroy(st);
  for (moe_rt_event e : s->events)
    if (e)
      moe_rt_event_destroy(e);
  for (auto &[key, c] : s->comms)
    moe_rt_comm_destroy(c);
  for (Buffer &b : s->buffers)
    if (b.declared)
      moe_rt_tensor_destroy(&b.t);
  moe_rt_routing_log_destroy(s->routingLog); // after the streams' last task
  if (s->lossStream)
    moe_rt_stream_destroy(s->lossStream);
  if (s->lossComm)
    moe_rt_comm_destroy(s->lossComm);
  if (s->worldComm)
    moe_rt_comm_destroy(s->worldComm);
  delete s;
}

int moe_step_rank(const moe_step *s) { return s->rank; }
int moe_step_world_size(const moe_step *s) { return s->world; }
int moe_step_num_arguments(const moe_step *s) {
  return static_cast<int>(s->arguments.size());
}

moe_rt_tensor *moe_step_argument_tensor(moe_step *s, int i) {
  if (i < 0 || i >= moe_step_num_arguments(s))
    fail(s, "no argument " + std::to_string(i));
  return &s->buffer(s->arguments[i]).t;
}

const char *moe_step_argument_name(const moe_step *s, int i) {
  if (i < 0 || i >= moe_step_num_arguments(s))
    fail(s, "no argument " + std::to_string(i));
  return s->argumentNamed[i] ? s->argumentNames[i].c_str() : nullptr;
}

//===--- declarations -----------------------------------------------------===//

void moe_step_grid_v(moe_step *s, const char *name, int rank,
                     const int64_t *shape) {
  std::vector<int64_t> dims(shape, shape + rank);
  int64_t size = 1;
  for (int64_t d : dims)
    size *= d;
  if (size != s->world)
    fail(s, "grid @" + std::string(name) + " has " + std::to_string(size) +
                " ranks but the job has " + std::to_string(s->world) +
                " (use mpirun -np " + std::to_string(size) + ")");
  s->grids[name] = dims;
}

void moe_step_buffer_v(moe_step *s, int64_t id, moe_rt_dtype dtype, int rank,
                       const int64_t *shape) {
  if (id < 0)
    fail(s, "negative buffer id");
  if (id >= int64_t(s->buffers.size()))
    s->buffers.resize(id + 1);
  Buffer &b = s->buffers[id];
  if (b.declared)
    fail(s, "buffer " + std::to_string(id) + " declared twice");
  check(s, moe_rt_tensor_create(s->backend, dtype, rank, shape, &b.t),
        "allocating buffer " + std::to_string(id));
  b.declared = true;
}

void moe_step_buffer_written(moe_step *s, int64_t id) {
  s->buffer(id).written = true;
}

namespace {
void addArgument(moe_step *s, int64_t id, const char *name,
                 moe_step::Role role) {
  s->buffer(id);
  s->arguments.push_back(id);
  s->argumentNamed.push_back(name != nullptr);
  s->argumentNames.push_back(name ? name : "");
  s->argumentRoles.push_back(role);
}
} // namespace

void moe_step_argument(moe_step *s, int64_t id, const char *name) {
  addArgument(s, id, name,
              name ? moe_step::Role::param : moe_step::Role::input);
}

void moe_step_state(moe_step *s, int64_t id, const char *name) {
  if (!name)
    fail(s, "optimizer state needs a name");
  addArgument(s, id, name, moe_step::Role::state);
}

void moe_step_step_input(moe_step *s, int64_t id, const char *name) {
  std::string n = name ? name : "NULL";
  if (n != "lr" && n != "step" &&
      moe_rt::expert_placement::blockOfSlotsInput(n) < 0)
    fail(s, "unknown step input '" + n + "' (lr, step or expert_slots.<block>)");
  addArgument(s, id, name, moe_step::Role::stepInput);
}

void moe_step_lr_schedule(moe_step *s, moe_rt_lr_kind kind, double lr,
                          int64_t warmup, int64_t total, double min_lr) {
  s->schedule = moe_rt_lr_schedule{kind, lr, min_lr, warmup, total};
}

void moe_step_result(moe_step *s, const char *name, int64_t id) {
  s->buffer(id);
  s->results.emplace_back(name, id);
}

//===--- the step -----------------------------------------------------------===//

void moe_step_set_gate_seed(moe_step *s, uint64_t base) {
  s->gateSeedBase = base;
}

uint64_t moe_step_gate_seed(const moe_step *s) {
  return moe_rt_gate_step_seed(s->gateSeedBase, s->stepsBegun);
}

void moe_step_set_expert_slots(moe_step *s, int64_t block,
                               const int64_t *slots, int64_t n) {
  if (block < 0)
    s->expertSlots.clear(); // one table for every block
  s->expertSlots[std::max<int64_t>(block, -1)].assign(
      slots, slots + std::max<int64_t>(n, 0));
}

moe_rt_status moe_step_move_experts(moe_rt_stream sync, moe_rt_comm world,
                                    double timeout_s, float *data,
                                    int64_t slots, int64_t per,
                                    const int64_t *from, const int64_t *to,
                                    int64_t group, int64_t groups,
                                    int64_t replica) {
  int64_t size = moe_rt_comm_size(world);
  if (groups < 1 || size % groups || replica < 0 ||
      replica >= size / groups || group < 0 || group >= groups)
    return moe_rt::fail(
        MOE_RT_INVALID_ARGUMENT,
        "moving experts to a new placement: rank " + std::to_string(group) +
            " of a " + std::to_string(groups) + "-rank expert-parallel "
            "group in replica " + std::to_string(replica) + " does not fit " +
            std::to_string(size) + " ranks");
  // One section of G S `per` floats per replica: each expert-parallel
  // group moves its own copies (the compiler does not tie replicas' expert
  // weights together), and every value has one non-zero term.
  moe_rt_tensor all;
  int64_t section = groups * slots * per, n = (size / groups) * section;
  if (moe_rt_status st =
          moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 1, &n, &all);
      st != MOE_RT_OK)
    return st;
  float *a = static_cast<float *>(all.data);
  std::fill_n(a, n, 0.0f);
  float *mine = a + replica * section;
  for (int64_t s = 0; s < slots; ++s)
    std::copy_n(data + s * per, per, mine + from[group * slots + s] * per);
  moe_rt_status st = moe_rt_all_reduce(sync, world, &all, 0, -1);
  if (st == MOE_RT_OK)
    st = moe_rt_stream_synchronize(sync, timeout_s);
  if (st == MOE_RT_OK)
    for (int64_t s = 0; s < slots; ++s)
      std::copy_n(mine + to[group * slots + s] * per, per, data + s * per);
  moe_rt_tensor_destroy(&all);
  return st;
}

namespace {
void moveExperts(moe_step *s, int64_t block, const std::vector<int64_t> &from,
                 const std::vector<int64_t> &to, int64_t groups);

/// The step's placed blocks (its expert_slots.<block> inputs): G and E.
std::map<int64_t, moe_rt::expert_placement::BlockShape>
placementShapes(moe_step *s) {
  std::map<int64_t, moe_rt::expert_placement::BlockShape> shapes;
  for (size_t i = 0; i < s->arguments.size(); ++i) {
    int64_t block =
        moe_rt::expert_placement::blockOfSlotsInput(s->argumentNames[i]);
    if (s->argumentRoles[i] == moe_step::Role::stepInput && block >= 0) {
      Buffer &b = s->buffer(s->arguments[i]);
      if (b.t.rank == 2)
        shapes[block] = {b.t.shape[0], b.numel()};
    }
  }
  return shapes;
}

/// The table asked for block `block`: its own, else the every-block one,
/// else expert parallelism's layout.
std::vector<int64_t> askedTable(const moe_step *s, int64_t block,
                                const moe_rt::expert_placement::BlockShape &shape) {
  auto it = s->expertSlots.find(block);
  if (it == s->expertSlots.end())
    it = s->expertSlots.find(-1);
  return it != s->expertSlots.end()
             ? it->second
             : moe_rt::expert_placement::tableOf({}, block, shape);
}

/// Block `block`'s expert placement into its step input (G x S): checked,
/// the block's experts moved to it when it differs from the last step's,
/// and handed to the routing log, whose per-rank loads follow it.
void fillExpertSlots(moe_step *s, Buffer &b, int64_t block,
                     const std::string &name) {
  if (b.t.rank != 2 || b.t.dtype != MOE_RT_I64)
    fail(s, "step input '" + name + "' must be G x S I64");
  int64_t groups = b.t.shape[0], slots = b.t.shape[1];
  std::vector<int64_t> t = askedTable(s, block, {groups, groups * slots});
  std::string where = "moe_step_set_expert_slots (block " +
                      std::to_string(block) + "): ";
  if (int64_t(t.size()) != groups * slots)
    fail(s, where + std::to_string(t.size()) + " slots, the step has " +
                std::to_string(groups) + " x " + std::to_string(slots));
  if (std::string why =
          moe_rt::expert_placement::checkSlots(t.data(), groups, slots);
      !why.empty())
    fail(s, where + why);
  auto used = s->expertSlotsInUse.find(block);
  if (used != s->expertSlotsInUse.end() && t != used->second)
    moveExperts(s, block, used->second, t, groups);
  s->expertSlotsInUse[block] = t;
  std::vector<int64_t> ranks = moe_rt::expert_placement::ranksOf(t, groups);
  check(s,
        moe_rt_routing_log_set_expert_ranks(s->routingLog, block, ranks.data(),
                                            int64_t(ranks.size())),
        "the routing log's expert placement");
  HostCopy host(b.t);
  std::copy(t.begin(), t.end(), static_cast<int64_t *>(host.t.data));
  check(s, moe_rt_tensor_copy(&b.t, &host.t),
        "writing step input 'expert_slots'");
}

/// The step inputs of update s->stepsBegun: its learning rate and count,
/// and the expert placement.
void fillStepInputs(moe_step *s) {
  for (size_t i = 0; i < s->arguments.size(); ++i) {
    if (s->argumentRoles[i] != moe_step::Role::stepInput)
      continue;
    Buffer &b = s->buffer(s->arguments[i]);
    if (int64_t block =
            moe_rt::expert_placement::blockOfSlotsInput(s->argumentNames[i]);
        block >= 0) {
      fillExpertSlots(s, b, block, s->argumentNames[i]);
      continue;
    }
    bool lr = s->argumentNames[i] == "lr";
    if (b.numel() != 1 || b.t.dtype != (lr ? MOE_RT_F32 : MOE_RT_I64))
      fail(s, "step input '" + s->argumentNames[i] +
                  "' must be one " + (lr ? "F32" : "I64"));
    HostCopy host(b.t);
    if (lr)
      *static_cast<float *>(host.t.data) =
          float(moe_rt_lr_at(&s->schedule, s->stepsBegun));
    else
      *static_cast<int64_t *>(host.t.data) = s->stepsBegun;
    check(s, moe_rt_tensor_copy(&b.t, &host.t),
          "writing step input '" + s->argumentNames[i] + "'");
  }
}
} // namespace

void moe_step_begin(moe_step *s) {
  ++s->stepsBegun; // step n of the run, as moe-run counts them
  moe_rt_profile_step_begin();
  std::vector<bool> isArgument(s->buffers.size());
  for (int64_t id : s->arguments)
    isArgument[id] = true;
  for (size_t id = 0; id < s->buffers.size(); ++id) {
    Buffer &b = s->buffers[id];
    if (!b.declared || isArgument[id])
      continue;
    // Host buffers are zeroed when the step reaches them (as moe-run
    // allocates each value when it reaches its op), so that zeroing
    // overlaps the streams' work instead of delaying the step's start.
    if (b.t.backend == MOE_RT_CUDA)
      check(s, moe_rt::cudaZeroBytes(b.t.data, b.bytes()),
            "zeroing buffer " + std::to_string(id));
    else
      b.stale = !b.written;
  }
  fillStepInputs(s);
}

moe_rt_tensor *moe_step_tensor(moe_step *s, int64_t id) {
  Buffer &b = s->buffer(id);
  // The first use of a value in the step is its defining op (the previous
  // step's work on it ended with moe_step_end).
  if (b.stale) {
    std::fill_n(static_cast<char *>(b.t.data), b.bytes(), 0);
    b.stale = false;
  }
  return &b.t;
}

moe_rt_stream moe_step_stream(moe_step *s, moe_step_stream_kind kind,
                              int64_t index) {
  auto key = std::make_pair(int(kind), index);
  auto it = s->streams.find(key);
  if (it != s->streams.end())
    return it->second;
  moe_rt_stream stream;
  check(s,
        kind == MOE_STEP_COMM ? moe_rt_stream_create_pool_on(s->backend, &stream)
                              : moe_rt_stream_create(s->backend, &stream),
        "creating a stream");
  // A step's values do not change between an op and its vjp: the expert
  // vjps may use their forwards' pre-activations (moe_rt.h).
  if (kind != MOE_STEP_COMM)
    check(s, moe_rt_stream_keep_activations(stream, 1), "creating a stream");
  moe_rt_profile_name_stream(stream, (std::string(kind == MOE_STEP_COMM
                                                      ? "comm."
                                                      : "compute.") +
                                      std::to_string(index))
                                         .c_str());
  return s->streams[key] = stream;
}

/// The group of `axes` of the grid: ranks that share their coordinates on
/// the other axes (row-major rank order), as moe-run forms it.
moe_rt_comm moe_step_comm_v(moe_step *s, const char *grid, int naxes,
                            const int64_t *axes) {
  std::string key = grid;
  for (int i = 0; i < naxes; ++i)
    key += "," + std::to_string(axes[i]);
  auto it = s->comms.find(key);
  if (it != s->comms.end())
    return it->second;
  auto g = s->grids.find(grid);
  if (g == s->grids.end())
    fail(s, "grid @" + std::string(grid) + " was never declared");
  const std::vector<int64_t> &shape = g->second;
  std::vector<int64_t> coord(shape.size());
  for (int64_t r = s->rank, d = int64_t(shape.size()) - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  int color = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (std::find(axes, axes + naxes, int64_t(d)) == axes + naxes)
      color = color * shape[d] + coord[d];
  moe_rt_comm comm;
  check(s, moe_rt_comm_split(s->worldComm, color, &comm),
        "forming the group " + key);
  return s->comms[key] = comm;
}

moe_rt_event moe_step_record(moe_step *s, int64_t id, moe_rt_stream stream) {
  if (id >= int64_t(s->events.size()))
    s->events.resize(id + 1, nullptr);
  if (!s->events[id])
    check(s, moe_rt_event_create(s->backend, &s->events[id]),
          "creating an event");
  check(s, moe_rt_event_record(s->events[id], stream), "recording an event");
  return s->events[id];
}

void moe_step_wait(moe_step *s, moe_rt_stream stream, moe_rt_event event) {
  check(s, moe_rt_stream_wait_event(stream, event, s->timeout),
        "waiting on an event");
}

/// Fills `t` with `value` on the host, or through a host copy on a device.
/// The buffer is not in use by queued work: the generated step fills a
/// splat when it reaches it, before queueing its users.
template <class T>
static void fillHost(moe_step *s, moe_rt_tensor *t, T value) {
  if (t->backend == MOE_RT_CPU) {
    std::fill_n(static_cast<T *>(t->data), moe_rt_tensor_numel(t), value);
    return;
  }
  HostCopy host(*t);
  std::fill_n(static_cast<T *>(host.t.data), moe_rt_tensor_numel(t), value);
  check(s, moe_rt_tensor_copy(t, &host.t), "filling a constant");
}

void moe_step_fill_f32(moe_step *s, moe_rt_tensor *t, double value) {
  if (t->dtype != MOE_RT_F32)
    fail(s, "moe_step_fill_f32 on a non-F32 tensor");
  fillHost(s, t, static_cast<float>(value));
}

void moe_step_fill_i64(moe_step *s, moe_rt_tensor *t, int64_t value) {
  if (t->dtype != MOE_RT_I64)
    fail(s, "moe_step_fill_i64 on a non-I64 tensor");
  fillHost(s, t, value);
}

void moe_step_check(moe_step *s, moe_rt_status status, const char *what) {
  check(s, status, what);
}

void moe_step_op(moe_step *, const char *opClass) {
  moe_rt_profile_set_op(opClass);
}

void moe_step_end(moe_step *s) {
  for (auto &[key, st] : s->streams)
    check(s,
          moe_rt_stream_synchronize(st, s->timeout > 0 ? 4 * s->timeout : 0),
          "the step");
  check(s, moe_rt_routing_log_end_step(s->routingLog, s->stepsBegun),
        "the routing statistics");
  // Later steps repeat the first one's collectives: its signature checks
  // prove theirs (moe_rt_comm_end_shape_checks), unless
  // MOE_STEP_CHECK_COLLECTIVES=every-step.
  if (!s->checkCollectivesEveryStep)
    check(s, moe_rt_comm_end_shape_checks(s->worldComm), "the step");
  moe_rt_profile_step_end(stderr, s->rank, s->stepsBegun);
}

moe_rt_routing_log *moe_step_routing_log(moe_step *s) { return s->routingLog; }

void moe_step_set_routing_trace(moe_step *s, const char *path) {
  if (s->rank == 0) // every rank holds the same counts; one writes them
    check(s,
          moe_rt_routing_log_open_trace(s->routingLog, path,
                                        "a generated step (moe_step)"),
          "the routing trace");
}

const char *moe_step_routing_balance(const moe_step *s) {
  return moe_rt_routing_log_balance(s->routingLog);
}

//===--- trainer I/O --------------------------------------------------------===//

void moe_step_load_inputs(moe_step *s, const char *path) {
  std::ifstream in(path);
  if (!in)
    fail(s, std::string("cannot read '") + path + "'");
  std::string line;
  for (int i = 0; i < moe_step_num_arguments(s); ++i) {
    if (!std::getline(in, line))
      fail(s, std::string("'") + path + "' has " + std::to_string(i) +
                  " arguments, the step " +
                  std::to_string(moe_step_num_arguments(s)));
    std::istringstream ls(line);
    std::string name, dims;
    ls >> name >> dims;
    std::string want = s->argumentNamed[i] ? s->argumentNames[i]
                                           : "arg" + std::to_string(i);
    if (name != want)
      fail(s, std::string("'") + path + "' line " + std::to_string(i + 1) +
                  ": argument '" + name + "', the step expects '" + want +
                  "'");
    if (s->argumentRoles[i] == moe_step::Role::stepInput)
      continue; // written by moe_step_begin
    Buffer &b = s->buffer(s->arguments[i]);
    std::string shape;
    for (int32_t d = 0; d < b.t.rank; ++d)
      shape += (d ? "x" : "") + std::to_string(b.t.shape[d]);
    if (dims != shape)
      fail(s, "argument '" + name + "' has shape " + dims + " in '" + path +
                  "', " + shape + " in the step");
    int64_t n = b.numel();
    HostCopy host(b.t);
    for (int64_t k = 0; k < n; ++k) {
      bool ok;
      if (b.t.dtype == MOE_RT_I64) {
        long long v;
        ok = static_cast<bool>(ls >> v);
        static_cast<int64_t *>(host.t.data)[k] = v;
      } else {
        float v;
        ok = static_cast<bool>(ls >> v);
        static_cast<float *>(host.t.data)[k] = v;
      }
      if (!ok)
        fail(s, "argument '" + name + "': fewer than " + std::to_string(n) +
                    " values in '" + path + "'");
    }
    check(s, moe_rt_tensor_copy(&b.t, &host.t),
          "loading argument '" + name + "'");
  }
}

// The parameter file's reader (header-only, shared with moe-export-params).
#include "moe_rt/params_file.h"

void moe_step_load_params(moe_step *s, const char *path) {
  std::ifstream in(path);
  if (!in)
    fail(s, std::string("cannot read the parameter file '") + path + "'");
  std::vector<moe_rt::params_file::Tensor> params;
  std::string error;
  if (!moe_rt::params_file::readRank(in, s->rank, s->world, params, error))
    fail(s, std::string("parameter file '") + path + "': " + error);
  std::map<std::string, const moe_rt::params_file::Tensor *> byName;
  for (const auto &t : params)
    byName[t.name] = &t;
  for (int i = 0; i < moe_step_num_arguments(s); ++i) {
    if (s->argumentRoles[i] != moe_step::Role::param)
      continue; // token ids / labels: the trainer's data; state: zero
    const std::string &name = s->argumentNames[i];
    auto it = byName.find(name);
    if (it == byName.end())
      fail(s, std::string("parameter file '") + path +
                  "' has no parameter '" + name +
                  "' (written for another model?)");
    Buffer &b = s->buffer(s->arguments[i]);
    std::vector<int64_t> shape(b.t.shape, b.t.shape + b.t.rank);
    if (b.t.dtype != MOE_RT_F32)
      fail(s, "parameter '" + name + "' is not F32");
    if (it->second->shape != shape)
      fail(s, "parameter '" + name + "' has shape " +
                  moe_rt::params_file::formatShape(it->second->shape) +
                  " in '" + path + "', " +
                  moe_rt::params_file::formatShape(shape) + " in the step");
    HostCopy host(b.t);
    std::copy(it->second->values.begin(), it->second->values.end(),
              static_cast<float *>(host.t.data));
    check(s, moe_rt_tensor_copy(&b.t, &host.t),
          "loading parameter '" + name + "'");
    byName.erase(it);
  }
  if (!byName.empty())
    fail(s, std::string("parameter file '") + path + "' has parameter '" +
                byName.begin()->first +
                "', which the step does not take (written for another "
                "model?)");
}

void moe_step_dump_results(moe_step *s, const char *path) {
  FILE *f = std::fopen(path, "w");
  if (!f)
    fail(s, std::string("cannot write '") + path + "'");
  for (auto &[name, id] : s->results) {
    Buffer &b = s->buffer(id);
    if (b.t.dtype != MOE_RT_F32)
      fail(s, "result '" + name + "' is not F32");
    std::fprintf(f, "%s %lld", name.c_str(), (long long)b.numel());
    HostCopy host(b.t);
    check(s, moe_rt_tensor_copy(&host.t, &b.t),
          "reading result '" + name + "'");
    const float *v = static_cast<const float *>(host.t.data);
    for (int64_t k = 0; k < b.numel(); ++k)
      std::fprintf(f, " %.9g", v[k]);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

double moe_step_global_loss(moe_step *s) {
  if (s->results.empty())
    fail(s, "the step has no results");
  Buffer &loss = s->buffer(s->results[0].second);
  moe_rt_tensor total;
  check(s, moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 0, nullptr, &total),
        "allocating the loss");
  // The sum runs on the host (a CPU pool over MPI) whatever the backend:
  // one float per step.
  HostCopy host(loss.t);
  check(s, moe_rt_tensor_copy(&host.t, &loss.t), "reading the loss");
  *static_cast<float *>(total.data) = *static_cast<const float *>(host.t.data);
  check(s, moe_rt_all_reduce(s->lossStream, s->lossComm, &total, 0, -1),
        "summing the loss");
  check(s, moe_rt_stream_synchronize(s->lossStream, s->timeout),
        "summing the loss");
  double mean = *static_cast<float *>(total.data) / s->world;
  moe_rt_tensor_destroy(&total);
  return mean;
}

void moe_step_advance(moe_step *s) {
  // Results: the loss, then the new parameters in argument order, then the
  // new optimizer state in argument order (moe/Target/StepState.h).
  std::vector<size_t> carried;
  for (moe_step::Role role : {moe_step::Role::param, moe_step::Role::state})
    for (size_t i = 0; i < s->arguments.size(); ++i)
      if (s->argumentRoles[i] == role)
        carried.push_back(i);
  size_t next = 1;
  for (size_t i : carried) {
    if (next >= s->results.size())
      fail(s, "fewer results than parameters");
    Buffer &param = s->buffer(s->arguments[i]);
    Buffer &updated = s->buffer(s->results[next++].second);
    if (updated.bytes() != param.bytes())
      fail(s, "result '" + s->results[next - 1].first +
                  "' does not match its parameter's size");
    if (updated.t.dtype != param.t.dtype)
      fail(s, "result '" + s->results[next - 1].first +
                  "' does not match its parameter's dtype");
    check(s, moe_rt_tensor_copy(&param.t, &updated.t),
          "advancing parameter '" + s->argumentNames[i] + "'");
  }
}

//===--- checkpoints (moe_rt/checkpoint_file.h) ------------------------------===//

#include "moe_rt/checkpoint_file.h"

namespace ckpt = moe_rt::checkpoint;

void moe_step_checkpoint_manifest(moe_step *s, const char *manifest) {
  ckpt::Manifest m;
  std::string error;
  if (!manifest || !ckpt::decodeManifest(manifest, "<generated>", m, error))
    fail(s, "the generated checkpoint manifest does not parse: " + error);
  s->manifest = manifest;
}

namespace {

/// The generated manifest for this job at `counters`.
ckpt::Manifest jobManifest(moe_step *s, ckpt::Counters counters) {
  if (s->manifest.empty())
    fail(s, "this step was generated without a checkpoint manifest");
  ckpt::Manifest m;
  std::string error;
  ckpt::decodeManifest(s->manifest, "<generated>", m, error);
  m.counters = counters;
  m.ranks = s->world;
  return m;
}

/// The argument index of each tensor of `m`, by name.
std::vector<size_t> carriedIndices(moe_step *s, const ckpt::Manifest &m) {
  std::vector<size_t> out;
  for (const ckpt::LayoutEntry &e : m.tensors) {
    size_t i = 0;
    while (i < s->arguments.size() && s->argumentNames[i] != e.name)
      ++i;
    if (i == s->arguments.size())
      fail(s, "the step has no argument '" + e.name + "' of its manifest");
    out.push_back(i);
  }
  return out;
}

/// Moves block `block`'s experts' weights and optimizer state (the
/// manifest's "experts" tensors of that block) from slot table `from` to
/// `to`, through host copies.
void moveExperts(moe_step *s, int64_t block, const std::vector<int64_t> &from,
                 const std::vector<int64_t> &to, int64_t groups) {
  ckpt::Manifest m = jobManifest(s, {});
  int64_t g = ckpt::expertIndex(m.grid, m.epAxes, s->rank);
  int64_t replica = ckpt::replicaIndex(m.grid, m.epAxes, s->rank);
  std::vector<size_t> index = carriedIndices(s, m);
  for (size_t k = 0; k < index.size(); ++k) {
    if (m.tensors[k].layout != ckpt::Layout::experts)
      continue;
    if (m.tensors[k].block < 0)
      fail(s, "expert tensor '" + m.tensors[k].name +
                  "' has no block in the step's manifest; regenerate the "
                  "step");
    if (m.tensors[k].block != block)
      continue;
    Buffer &b = s->buffer(s->arguments[index[k]]);
    if (b.t.dtype != MOE_RT_F32 || b.t.rank < 1 || b.t.shape[0] < 1)
      fail(s, "expert tensor '" + m.tensors[k].name + "' is not F32 S x ...");
    HostCopy host(b.t);
    check(s, moe_rt_tensor_copy(&host.t, &b.t),
          "reading '" + m.tensors[k].name + "' to move it");
    check(s,
          moe_step_move_experts(s->lossStream, s->lossComm, s->timeout,
                                static_cast<float *>(host.t.data),
                                b.t.shape[0], b.numel() / b.t.shape[0],
                                from.data(), to.data(), g, groups, replica),
          "moving '" + m.tensors[k].name + "' to the new expert placement");
    check(s, moe_rt_tensor_copy(&b.t, &host.t),
          "writing '" + m.tensors[k].name + "' after moving it");
  }
}

/// Whether every rank passes `ok` (a sum over the world).
bool agree(moe_step *s, bool ok) {
  moe_rt_tensor flag;
  check(s, moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 0, nullptr, &flag),
        "allocating a flag");
  *static_cast<float *>(flag.data) = ok ? 1.0f : 0.0f;
  check(s, moe_rt_all_reduce(s->lossStream, s->lossComm, &flag, 0, -1),
        "agreeing on a checkpoint");
  check(s, moe_rt_stream_synchronize(s->lossStream, s->timeout),
        "agreeing on a checkpoint");
  bool all = *static_cast<float *>(flag.data) == float(s->world);
  moe_rt_tensor_destroy(&flag);
  return all;
}

} // namespace

int64_t moe_step_expert_slots(moe_step *s, int64_t block, int64_t *out,
                              int64_t n) {
  auto shapes = placementShapes(s);
  auto shape = shapes.find(block);
  if (shape == shapes.end())
    return 0;
  std::vector<int64_t> t = askedTable(s, block, shape->second);
  if (out && n >= int64_t(t.size()))
    std::copy(t.begin(), t.end(), out);
  return int64_t(t.size());
}

namespace {

/// The placement asked for, every placed block's table.
moe_rt::expert_placement::Placement askedPlacement(moe_step *s) {
  moe_rt::expert_placement::Placement p;
  for (const auto &[block, shape] : placementShapes(s))
    p[block] = askedTable(s, block, shape);
  return p;
}

} // namespace

void moe_step_save_checkpoint(moe_step *s, const char *root,
                              uint64_t data_position) {
  ckpt::Counters counters{uint64_t(s->stepsBegun), data_position,
                          s->gateSeedBase};
  ckpt::Manifest m = jobManifest(s, counters);
  // The placement the expert tensors are in (docs/checkpoint-format.md).
  m.placement = moe_rt::expert_placement::withoutIdentity(s->expertSlotsInUse);
  ckpt::RankState state;
  state.rank = s->rank;
  state.ranks = s->world;
  state.counters = counters;
  std::vector<size_t> index = carriedIndices(s, m);
  for (size_t k = 0; k < index.size(); ++k) {
    Buffer &b = s->buffer(s->arguments[index[k]]);
    HostCopy host(b.t);
    check(s, moe_rt_tensor_copy(&host.t, &b.t),
          "reading '" + m.tensors[k].name + "' for a checkpoint");
    const float *v = static_cast<const float *>(host.t.data);
    state.tensors.push_back({m.tensors[k].name, m.tensors[k].role,
                             m.tensors[k].localShape,
                             std::vector<float>(v, v + b.numel())});
  }
  std::string error, dir = root ? root : "";
  std::string staging = ckpt::stagingDir(dir, counters.step);
  bool ok = ckpt::makeDir(dir, error) && ckpt::makeDir(staging, error) &&
            ckpt::writeAtomically(staging + "/" + ckpt::rankFileName(s->rank),
                                  ckpt::encodeRank(state), error);
  if (!agree(s, ok))
    fail(s, ok ? "another rank could not write its checkpoint file" : error);
  ok = s->rank != 0 || ckpt::commit(dir, m, error);
  if (!agree(s, ok))
    fail(s, s->rank == 0 ? error : "rank 0 could not commit the checkpoint");
}

int64_t moe_step_updates_done(const moe_step *s) { return s->stepsBegun; }

uint64_t moe_step_resume(moe_step *s, const char *root) {
  ckpt::Manifest want = jobManifest(s, {});
  // On another grid the experts are resharded into the placement asked
  // for; on the checkpoint's grid the job continues under the
  // checkpoint's, which an asked-for one must equal.
  auto shapes = placementShapes(s);
  bool asked = !s->expertSlots.empty();
  want.placement =
      moe_rt::expert_placement::withoutIdentity(askedPlacement(s));
  ckpt::RankState state;
  std::string error;
  if (!ckpt::readResharded(root ? root : "", want, s->rank, state, error))
    fail(s, error);
  if (shapes.empty() && !state.placement.empty())
    fail(s, "moe_step_resume: the checkpoint was saved under an expert "
            "placement (of block " +
                std::to_string(state.placement.begin()->first) +
                "), and this step has no expert placement input");
  if (asked && !moe_rt::expert_placement::samePlacement(
                   state.placement, want.placement, shapes))
    fail(s, "moe_step_resume: the checkpoint was saved under expert "
            "placement " +
                moe_rt::expert_placement::describe(state.placement, shapes) +
                "; moe_step_set_expert_slots asks for " +
                moe_rt::expert_placement::describe(want.placement, shapes) +
                " (resume without setting it, then change it)");
  s->expertSlots = state.placement;
  s->expertSlotsInUse.clear();
  for (const auto &[block, shape] : shapes)
    s->expertSlotsInUse[block] =
        moe_rt::expert_placement::tableOf(state.placement, block, shape);
  std::vector<size_t> index = carriedIndices(s, want);
  for (size_t k = 0; k < index.size(); ++k) {
    const ckpt::Tensor *t = nullptr;
    for (const ckpt::Tensor &c : state.tensors)
      if (c.name == want.tensors[k].name)
        t = &c;
    Buffer &b = s->buffer(s->arguments[index[k]]);
    HostCopy host(b.t);
    std::copy(t->values.begin(), t->values.end(),
              static_cast<float *>(host.t.data));
    check(s, moe_rt_tensor_copy(&b.t, &host.t),
          "restoring '" + t->name + "' from a checkpoint");
  }
  s->stepsBegun = int64_t(state.counters.step);
  s->gateSeedBase = state.counters.seed;
  return state.counters.dataPosition;
}
