//===- Interpreter.cpp - a scheduled step run with the runtime ------------===//
//
// Walks the step once per training step, in program order: constants are
// filled on the host, events become runtime events, and every other op's
// calls come from the runtime-call table through CallMaker, the table's
// visitor that makes them. Runtime calls only queue work; the step's end
// (or the after-op hook) synchronises the streams.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/Interpreter.h"

#include "moe/Analysis/StreamOrder.h"
#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Target/ProfileOpClass.h"
#include "moe/Target/RuntimeCalls.h"
#include "moe/Target/StepState.h"

#include "moe_rt/collectives.h"
#include "moe_rt/expert_placement.h"
#include "moe_rt/kept_activations.h"
#include "moe_rt/ops.h"
#include "moe_rt/profile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include <map>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

moe_rt_tensor *Buffer::view() {
  tensor.data = isInt ? static_cast<void *>(i.data()) : f.data();
  tensor.rank = shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    tensor.shape[d] = shape[d];
  tensor.dtype = isInt ? MOE_RT_I64 : MOE_RT_F32;
  tensor.backend = MOE_RT_CPU;
  return &tensor;
}

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

class Interpreter::Impl {
public:
  Impl(FunctionOpInterface func, Options options)
      : func(func), options(options) {}
  ~Impl();

  llvm::Error prepare();
  llvm::Error run(int64_t step);
  llvm::Error execute(Operation *op);
  /// A zeroed buffer for `v` (an earlier step's, refilled in place);
  /// `zero` false: as the previous step left it (its op writes all of it).
  llvm::Error allocate(Value v, bool zero = true);
  Buffer *buffer(Value v) {
    auto it = buffers.find(v);
    return it == buffers.end() ? nullptr : it->second.get();
  }
  llvm::Expected<moe_rt_stream> streamFor(StreamAttr s);
  llvm::Expected<moe_rt_comm> commFor(Operation *op, FlatSymbolRefAttr grid,
                                      ArrayRef<int16_t> axes);

  FunctionOpInterface func;
  Options options;
  int64_t step = 1;
  std::function<llvm::Error(Operation *)> afterOp;

private:
  llvm::Error fill(arith::ConstantOp c);
  llvm::Error fillStepInputs();

  DenseMap<Value, std::unique_ptr<Buffer>> buffers;
  std::map<std::pair<int, int64_t>, moe_rt_stream> streams;
  DenseMap<Value, moe_rt_event> events;
  std::map<std::string, moe_rt_comm> comms;
  moe_rt_comm worldComm = nullptr;
};

namespace {

/// The runtime-call table's visitor that makes the calls
/// (include/moe/Target/RuntimeCalls.h lists what it provides). The first
/// failure is kept in `failure` and stops the op's later calls.
class CallMaker {
public:
  CallMaker(Interpreter::Impl &run, Operation *stepOp, moe_rt_stream s)
      : run(run), values(stepOp), s(s) {}

  moe_rt_stream stream() { return s; }
  moe_rt_comm comm(CollectiveOpInterface c) {
    llvm::Expected<moe_rt_comm> comm =
        run.commFor(c.getOperation(), c.getGridAttr(), c.getAxes());
    if (!comm) {
      keep(comm.takeError());
      return nullptr;
    }
    return *comm;
  }
  moe_rt_tensor *in(Value v) { return tensor(values.in(v)); }
  moe_rt_tensor *out(Value v) { return tensor(values.out(v)); }
  moe_rt_tensor *cotangent(Value v) { return tensor(values.cotangent(v)); }
  moe_rt_tensor *grad(Value v) { return tensor(values.grad(v)); }
  int64_t i64(int64_t x) { return x; }
  int flag(bool x) { return x ? 1 : 0; }
  double f64(double x) { return x; }
  double f64Text(double x) { return x; }
  template <class T> T named(Named<T> n) { return n.value; }
  uint64_t gateSeed() {
    return moe_rt_gate_step_seed(run.options.seed, run.step);
  }
  moe_rt_routing_log *routingLog() { return run.options.routingLog; }
  /// The struct lives until the op's calls are made (the runtime copies it
  /// when it queues the task).
  template <class T, class... Fields>
  const T *aggregate(CStruct<T>, Fields... fields) {
    auto value = std::make_shared<T>(T{fields...});
    kept.push_back(value);
    return value.get();
  }

  template <class Sig, class Invoke, class... Args>
  LogicalResult call(RuntimeFn<Sig, Invoke> fn, Args... args) {
    static_assert(callableWith<Sig, Args...>,
                  "the entry's arguments do not match the runtime function");
    if (failure)
      return mlir::failure();
    if (fn.invoke(args...) != MOE_RT_OK) {
      keep(error(moe_rt_last_error()));
      return mlir::failure();
    }
    return success();
  }

  LogicalResult unsupported(const Twine &why) {
    keep(error("cannot run '" +
               values.stepOp()->getName().getStringRef() + "': " + why));
    return mlir::failure();
  }

  llvm::Error takeFailure() {
    return failure ? std::move(failure) : error("internal: an op failed");
  }

private:
  moe_rt_tensor *tensor(Value v) {
    if (!v)
      return nullptr;
    Buffer *b = run.buffer(v);
    if (!b) {
      keep(error("internal: value without a buffer"));
      return nullptr;
    }
    return b->view();
  }
  void keep(llvm::Error e) {
    if (failure)
      llvm::consumeError(std::move(e));
    else
      failure = std::move(e);
  }

  Interpreter::Impl &run;
  StepValues values;
  moe_rt_stream s;
  std::vector<std::shared_ptr<void>> kept;
  llvm::Error failure = llvm::Error::success();
};

} // namespace

Interpreter::Impl::~Impl() {
  // Queued work may still point at buffers: wait for it first.
  for (auto &[key, s] : streams)
    moe_rt_stream_destroy(s);
  for (auto &[value, e] : events)
    moe_rt_event_destroy(e);
}

llvm::Error Interpreter::Impl::allocate(Value v, bool zero) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return llvm::Error::success();
  if (!type.hasStaticShape())
    return error("the step has dynamic shapes (dropless routing); compile "
                 "it with --moe-flowmoe-pipeline (which runs "
                 "moe-variable-dropless) or bound it with "
                 "--moe-bound-dropless");
  // A later step refills the value's buffer with zeros in place: the same
  // fresh zero-filled start without a new allocation and its page faults
  // (the previous step's work on it ended with its synchronisation).
  std::unique_ptr<Buffer> &b = buffers[v];
  if (!b) {
    b = std::make_unique<Buffer>();
    b->shape.assign(type.getShape().begin(), type.getShape().end());
    b->isInt = isa<IntegerType>(type.getElementType());
  } else if (!zero) {
    return llvm::Error::success();
  }
  if (b->isInt)
    b->i.assign(b->numel(), 0);
  else
    b->f.assign(b->numel(), 0.0f);
  return llvm::Error::success();
}

llvm::Expected<moe_rt_stream> Interpreter::Impl::streamFor(StreamAttr s) {
  auto key = std::make_pair(int(s.getKind()), s.getIndex());
  auto it = streams.find(key);
  if (it != streams.end())
    return it->second;
  moe_rt_stream stream;
  moe_rt_status st = s.getKind() == StreamKind::comm
                         ? moe_rt_stream_create_pool(&stream)
                         : moe_rt_stream_create(MOE_RT_CPU, &stream);
  // A step's values do not change between an op and its vjp: the expert
  // vjps may use their forwards' pre-activations (moe_rt.h).
  if (st == MOE_RT_OK && s.getKind() != StreamKind::comm)
    st = moe_rt_stream_keep_activations(stream, 1);
  if (st != MOE_RT_OK)
    return error(moe_rt_last_error());
  moe_rt_profile_name_stream(stream,
                             (stringifyStreamKind(s.getKind()) + "." +
                              std::to_string(s.getIndex()))
                                 .str()
                                 .c_str());
  return streams[key] = stream;
}

/// The group of `axes` of `grid`: ranks sharing their coordinates on the
/// other axes (row-major rank order).
llvm::Expected<moe_rt_comm>
Interpreter::Impl::commFor(Operation *op, FlatSymbolRefAttr gridName,
                           ArrayRef<int16_t> axes) {
  std::string key = gridName.getValue().str();
  for (int16_t a : axes)
    key += "," + std::to_string(a);
  if (auto it = comms.find(key); it != comms.end())
    return it->second;
  SymbolTableCollection table;
  auto grid = table.lookupNearestSymbolFrom<shard::GridOp>(op, gridName);
  if (!grid)
    return error("no shard.grid @" + gridName.getValue());
  ArrayRef<int64_t> shape = grid.getShape();
  int64_t size = 1;
  for (int64_t d : shape)
    size *= d;
  int world = options.world, rank = options.rank;
  if (size != world)
    return error("the step's grid has " + std::to_string(size) +
                 " ranks but moe-run runs on " + std::to_string(world) +
                 " (use mpirun -np " + std::to_string(size) + ")");
  // Coordinates of this rank; color = index over the non-group axes.
  std::vector<int64_t> coord(shape.size());
  for (int64_t r = rank, d = shape.size() - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  int color = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!llvm::is_contained(axes, int16_t(d)))
      color = color * shape[d] + coord[d];
  moe_rt_comm comm;
  if (moe_rt_comm_split(worldComm, color, &comm) != MOE_RT_OK)
    return error(moe_rt_last_error());
  return comms[key] = comm;
}

llvm::Error Interpreter::Impl::fill(arith::ConstantOp c) {
  if (llvm::Error e = allocate(c.getResult()))
    return e;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  Buffer *b = buffer(c.getResult());
  if (!dense || !dense.isSplat() || !b)
    return error("moe-run supports splat tensor constants only");
  if (b->isInt)
    std::fill(b->i.begin(), b->i.end(),
              dense.getSplatValue<APInt>().getSExtValue());
  else
    std::fill(b->f.begin(), b->f.end(),
              dense.getSplatValue<APFloat>().convertToFloat());
  return llvm::Error::success();
}

llvm::Error Interpreter::Impl::execute(Operation *op) {
  if (auto c = dyn_cast<arith::ConstantOp>(op))
    return fill(c);
  StreamAttr stream = StreamOrder::getStream(op);
  if (!stream)
    return error("'" + op->getName().getStringRef() +
                 "' is not on a stream: run moe-opt --moe-flowmoe-pipeline "
                 "first");
  llvm::Expected<moe_rt_stream> s = streamFor(stream);
  if (!s)
    return s.takeError();
  if (auto r = dyn_cast<RecordEventOp>(op)) {
    // One runtime event per record op, recorded again every step.
    moe_rt_event &e = events[r.getEvent()];
    if ((!e && moe_rt_event_create(MOE_RT_CPU, &e) != MOE_RT_OK) ||
        moe_rt_event_record(e, *s) != MOE_RT_OK)
      return error(moe_rt_last_error());
    return llvm::Error::success();
  }
  if (auto w = dyn_cast<WaitEventOp>(op)) {
    if (moe_rt_stream_wait_event(*s, events.lookup(w.getEvent()),
                                 options.timeout) != MOE_RT_OK)
      return error(moe_rt_last_error());
    return llvm::Error::success();
  }
  // Zeroing costs a pass over each buffer per step: skipped where the
  // op's calls write all of it (RuntimeCalls.h, writesResults).
  bool whole = writesWholeResults(op);
  for (Value r : op->getResults())
    if (llvm::Error e = allocate(r, !whole))
      return e;
  if (moe_rt_profile_enabled())
    moe_rt_profile_set_op(profileOpClass(op).c_str());
  CallMaker maker(*this, op, *s);
  if (failed(issueRuntimeCalls(op, maker)))
    return maker.takeFailure();
  if (!afterOp)
    return llvm::Error::success();
  if (moe_rt_stream_synchronize(*s, options.timeout) != MOE_RT_OK)
    return error("rank " + std::to_string(options.rank) + ": " +
                 moe_rt_last_error());
  return afterOp(op);
}

llvm::Error Interpreter::Impl::prepare() {
  if (moe_rt_comm_create_world(options.timeout, 1, &worldComm) != MOE_RT_OK)
    return error(moe_rt_last_error());
  for (BlockArgument arg : func.getFunctionBody().front().getArguments())
    if (llvm::Error e = allocate(arg))
      return e;
  return llvm::Error::success();
}

/// The step inputs of update `stepNumber`: its learning rate from the
/// schedule and the count itself (moe_rt/lr_schedule.h).
llvm::Error Interpreter::Impl::fillStepInputs() {
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    if (roleOf(func, arg) != ArgRole::stepInput)
      continue;
    Buffer *b = buffer(arg);
    std::string name = argumentName(func, arg);
    if (name == "step" && b->isInt && b->numel() == 1) {
      b->i[0] = step;
    } else if (name == "lr" && !b->isInt && b->numel() == 1) {
      llvm::Expected<moe_rt_lr_schedule> schedule = lrSchedule(func);
      if (!schedule)
        return schedule.takeError();
      b->f[0] = float(moe_rt_lr_at(&*schedule, step));
    } else if (int64_t block =
                   moe_rt::expert_placement::blockOfSlotsInput(name);
               block >= 0 && b->isInt && b->shape.size() == 2) {
      // The block's expert placement (moe-run --expert-placement); by
      // default expert parallelism's layout.
      std::vector<int64_t> t = moe_rt::expert_placement::tableOf(
          options.expertSlots, block, {b->shape[0], b->numel()});
      if (int64_t(t.size()) != b->numel())
        return error("step input '" + name + "': the placement has " +
                     std::to_string(t.size()) + " slots, the step " +
                     std::to_string(b->numel()));
      b->i = std::move(t);
    } else {
      return error("step input '" + name +
                   "': moe-run fills 'lr' (f32) and 'step' (i64) scalars "
                   "and 'expert_slots.<block>' (G x S integers)");
    }
  }
  return llvm::Error::success();
}

llvm::Error Interpreter::Impl::run(int64_t stepNumber) {
  step = stepNumber;
  if (llvm::Error e = fillStepInputs())
    return e;
  for (Operation &op : func.getFunctionBody().front())
    if (!op.hasTrait<OpTrait::IsTerminator>())
      if (llvm::Error e = execute(&op))
        return e;
  for (auto &[key, s] : streams)
    if (moe_rt_stream_synchronize(s, options.timeout > 0 ? 4 * options.timeout
                                                         : 0) != MOE_RT_OK)
      return error("rank " + std::to_string(options.rank) + ": " +
                   moe_rt_last_error());
  // Every rank is past its first step here: later steps repeat its
  // collectives (moe_rt_comm_end_shape_checks).
  if (!options.checkCollectivesEveryStep &&
      moe_rt_comm_end_shape_checks(worldComm) != MOE_RT_OK)
    return error(moe_rt_last_error());
  return llvm::Error::success();
}

Interpreter::Interpreter(FunctionOpInterface step, Options options)
    : impl(std::make_unique<Impl>(step, options)) {}
Interpreter::~Interpreter() = default;

llvm::Error Interpreter::prepare() { return impl->prepare(); }
llvm::Error Interpreter::run(int64_t step) { return impl->run(step); }
Buffer *Interpreter::buffer(Value v) { return impl->buffer(v); }
void Interpreter::setAfterOp(std::function<llvm::Error(Operation *)> hook) {
  impl->afterOp = std::move(hook);
}
void Interpreter::setExpertSlots(moe_rt::expert_placement::Placement slots) {
  impl->options.expertSlots = std::move(slots);
}
FunctionOpInterface Interpreter::step() const { return impl->func; }
const Interpreter::Options &Interpreter::options() const {
  return impl->options;
}

std::vector<std::pair<std::string, Buffer *>> Interpreter::results() {
  FunctionOpInterface func = impl->func;
  Block &entry = func.getFunctionBody().front();
  std::vector<std::string> names = {"loss"};
  for (BlockArgument arg : carriedArguments(func))
    names.push_back(argumentName(func, arg));
  std::vector<std::pair<std::string, Buffer *>> out;
  for (auto [i, v] : llvm::enumerate(entry.getTerminator()->getOperands()))
    out.push_back({i < names.size() ? names[i] : "result" + std::to_string(i),
                   buffer(v)});
  return out;
}

void Interpreter::advance() {
  FunctionOpInterface func = impl->func;
  Block &entry = func.getFunctionBody().front();
  Operation *ret = entry.getTerminator();
  unsigned next = 1;
  for (BlockArgument arg : carriedArguments(func))
    buffer(arg)->f = buffer(ret->getOperand(next++))->f;
}
