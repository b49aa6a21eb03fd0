//===- MoeToEmitC.cpp - scheduled steps as EmitC calls into the runtime ---===//
//
// --moe-convert-to-emitc: every scheduled step becomes two emitc.funcs,
// `<prefix>_declare` (buffers, arguments, results, grids) and
// `<prefix>_step` (the step itself), which mlir-translate --mlir-to-cpp
// prints as C++ against moe_rt/step_support.h and moe_rt/ops.h.
//
// The step is moe-run's interpreter unrolled: the same op order, the same
// stream per #moe.stream, the same event edges and group communicators,
// and the same runtime call per op and vjp — both read the calls from one
// table, include/moe/Target/RuntimeCalls.h; CallPrinter below is the
// table's visitor that prints them. test/Conversion/codegen-e2e.test
// compares the two byte for byte.
//
// Tensors are not SSA values of the generated code: every tensor value of
// the step gets a buffer id, allocated once by the support library, and
// `moe_step_tensor(s, id)` fetches its moe_rt_tensor* the first time the
// step touches it. That keeps buffers alive across the asynchronous runtime
// calls (which only queue work) and across steps.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/EmitC/Passes.h"

#include "moe/Analysis/StreamOrder.h"
#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Target/ProfileOpClass.h"
#include "moe/Target/RuntimeCalls.h"
#include "moe/Target/StepState.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <functional>
#include <map>
#include <variant>

namespace mlir::moe {
#define GEN_PASS_DEF_MOECONVERTTOEMITC
#include "moe/Target/EmitC/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

namespace {

/// One argument of a generated call: an SSA value of the generated code or
/// a constant printed in place (number, enum name, string, NULL).
using Arg = std::variant<Value, Attribute>;

/// Emits the body of one generated function. The emitc values of buffers,
/// streams and communicators are fetched once, where first needed.
class StepEmitter {
public:
  StepEmitter(Location loc, OpBuilder &b, Value ctx,
              const DenseMap<Value, int64_t> &ids)
      : b(b), ctx(ctx), ids(ids), loc(loc) {
    MLIRContext *c = b.getContext();
    tensorPtr = emitc::PointerType::get(emitc::OpaqueType::get(c, "moe_rt_tensor"));
    streamTy = emitc::OpaqueType::get(c, "moe_rt_stream");
    commTy = emitc::OpaqueType::get(c, "moe_rt_comm");
    eventTy = emitc::OpaqueType::get(c, "moe_rt_event");
    statusTy = emitc::OpaqueType::get(c, "moe_rt_status");
  }

  /// Emits the calls of one top-level op of the step.
  LogicalResult emit(Operation *op, int64_t index);

  // Constants printed in place.
  Attribute i64(int64_t v) { return b.getI64IntegerAttr(v); }
  Attribute f64(double v) { return b.getF64FloatAttr(v); }
  Attribute opaque(StringRef text) {
    return emitc::OpaqueAttr::get(b.getContext(), text);
  }
  Attribute str(StringRef s) {
    std::string out = "\"";
    for (char ch : s) {
      if (ch == '\n') {
        out += "\\n";
        continue;
      }
      if (ch == '"' || ch == '\\')
        out += '\\';
      out += ch;
    }
    return opaque(out + "\"");
  }
  Attribute null() { return opaque("NULL"); }

  /// `callee(args...)`, returning `result` (or nothing for a null type).
  Value call(StringRef callee, Type result, ArrayRef<Arg> args) {
    SmallVector<Value> operands;
    SmallVector<Attribute> order;
    for (const Arg &a : args) {
      if (auto *v = std::get_if<Value>(&a)) {
        order.push_back(b.getIndexAttr(operands.size()));
        operands.push_back(*v);
      } else {
        order.push_back(std::get<Attribute>(a));
      }
    }
    SmallVector<Type> results;
    if (result)
      results.push_back(result);
    auto callOp = emitc::CallOpaqueOp::create(b, loc, results, callee, operands,
                                              b.getArrayAttr(order));
    return result ? callOp.getResult(0) : Value();
  }

  /// A comment saying what the next runtime call is (describeCall).
  void commentCall() {
    emitc::VerbatimOp::create(b, loc, b.getStringAttr("// " + comment));
  }

  /// A runtime op call, its status to moe_step_check, which names the op
  /// if it failed (the runtime only queues work, so most errors surface at
  /// moe_step_end's synchronisation, also with a message).
  void runtime(StringRef callee, ArrayRef<Arg> args) {
    Value status = call(callee, statusTy, args);
    call("moe_step_check", Type(), {ctx, status, str(what)});
  }

  /// `value` in a local of the generated step, and its address: a C struct
  /// argument (the runtime copies it when it queues the task).
  Value local(StringRef type, StringRef initializer) {
    auto ty = emitc::OpaqueType::get(b.getContext(), type);
    auto var = emitc::VariableOp::create(b, loc, emitc::LValueType::get(ty),
                                         opaque(initializer));
    return emitc::AddressOfOp::create(b, loc, emitc::PointerType::get(ty),
                                      var);
  }

  /// noisy_topk's seed of the running step, moe_step_gate_seed(s): fetched
  /// once per step function, so forward and backward gates share it.
  Value gateSeed() {
    if (!stepSeed)
      stepSeed = call("moe_step_gate_seed",
                      emitc::OpaqueType::get(b.getContext(), "uint64_t"),
                      {ctx});
    return stepSeed;
  }

  /// The step's routing log, moe_step_routing_log(s): fetched once per
  /// step function.
  Value routingLog() {
    if (!stepLog)
      stepLog = call("moe_step_routing_log",
                     emitc::PointerType::get(emitc::OpaqueType::get(
                         b.getContext(), "moe_rt_routing_log")),
                     {ctx});
    return stepLog;
  }

  Value tensor(Value v) {
    auto it = tensors.find(v);
    if (it != tensors.end())
      return it->second;
    return tensors[v] = call("moe_step_tensor", tensorPtr, {ctx, i64(ids.lookup(v))});
  }

  Value stream(StreamAttr s);
  Value comm(FlatSymbolRefAttr grid, ArrayRef<int16_t> axes);

private:
  OpBuilder &b;
  Value ctx;
  const DenseMap<Value, int64_t> &ids;
  Location loc;
  Type tensorPtr, streamTy, commTy, eventTy, statusTy;
  DenseMap<Value, Value> tensors;
  std::map<std::pair<int, int64_t>, Value> streams;
  std::map<std::string, Value> comms;
  DenseMap<Value, Value> events;
  int64_t nextEvent = 0;
  Value stepSeed, stepLog;
  /// The op being emitted, for error messages of the generated code and the
  /// comment above each of its calls.
  std::string what, comment;
};

Value StepEmitter::stream(StreamAttr s) {
  auto key = std::make_pair(int(s.getKind()), s.getIndex());
  auto it = streams.find(key);
  if (it != streams.end())
    return it->second;
  // Compute streams are plain CPU streams, communication streams FlowMoE's
  // priority pool (all-to-alls high, all-reduce chunks low), host streams
  // a CPU thread for host planners, as in moe-run.
  const char *kind = s.getKind() == StreamKind::comm   ? "MOE_STEP_COMM"
                     : s.getKind() == StreamKind::host ? "MOE_STEP_HOST"
                                                       : "MOE_STEP_COMPUTE";
  return streams[key] = call("moe_step_stream", streamTy,
                             {ctx, opaque(kind), i64(s.getIndex())});
}

Value StepEmitter::comm(FlatSymbolRefAttr grid, ArrayRef<int16_t> axes) {
  std::string key = grid.getValue().str();
  for (int16_t a : axes)
    key += "," + std::to_string(a);
  auto it = comms.find(key);
  if (it != comms.end())
    return it->second;
  SmallVector<Arg> args = {ctx, str(grid.getValue())};
  for (int16_t a : axes)
    args.push_back(i64(a));
  return comms[key] = call("moe_step_comm", commTy, args);
}

/// One argument of a runtime call as generated code passes it, of C type
/// T: made when the call is emitted, in argument order, so that buffers,
/// streams and communicators are fetched in the order the call lists them.
template <class T> struct GenArg {
  std::function<Arg()> make;
};

/// A double with 17 significant digits: the very double moe-run passes.
std::string decimal(double x) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format("%.17g", x);
  return text;
}

/// A constant argument as C text inside an aggregate initializer.
std::string cText(Attribute a) {
  if (auto i = dyn_cast<IntegerAttr>(a))
    return std::to_string(i.getInt());
  if (auto f = dyn_cast<FloatAttr>(a))
    return decimal(f.getValueAsDouble());
  return cast<emitc::OpaqueAttr>(a).getValue().str();
}

/// The runtime-call table's visitor for generated code
/// (include/moe/Target/RuntimeCalls.h lists what it provides): each call
/// becomes an emitc.call_opaque of the moe_rt function, its status checked.
class CallPrinter {
public:
  CallPrinter(StepEmitter &e, Operation *stepOp, StreamAttr streamAttr)
      : e(e), values(stepOp), streamAttr(streamAttr) {}

  GenArg<moe_rt_stream> stream() {
    return {[this] { return Arg(e.stream(streamAttr)); }};
  }
  GenArg<moe_rt_comm> comm(CollectiveOpInterface c) {
    return {[this, c]() mutable {
      return Arg(e.comm(c.getGridAttr(), c.getAxes()));
    }};
  }
  GenArg<moe_rt_tensor *> in(Value v) { return tensor(values.in(v)); }
  GenArg<moe_rt_tensor *> out(Value v) { return tensor(values.out(v)); }
  GenArg<moe_rt_tensor *> cotangent(Value v) {
    return tensor(values.cotangent(v));
  }
  GenArg<moe_rt_tensor *> grad(Value v) { return tensor(values.grad(v)); }
  GenArg<int64_t> i64(int64_t x) { return constant<int64_t>(e.i64(x)); }
  GenArg<int> flag(bool x) { return constant<int>(e.i64(x ? 1 : 0)); }
  GenArg<double> f64(double x) { return constant<double>(e.f64(x)); }
  GenArg<double> f64Text(double x) {
    return constant<double>(e.opaque(decimal(x)));
  }
  template <class T> GenArg<T> named(Named<T> n) {
    return constant<T>(e.opaque(n.name));
  }
  GenArg<uint64_t> gateSeed() {
    return {[this] { return Arg(e.gateSeed()); }};
  }
  GenArg<moe_rt_routing_log *> routingLog() {
    return {[this] { return Arg(e.routingLog()); }};
  }
  /// A struct of constants, as a local initialised in field order.
  template <class T, class... Fields>
  GenArg<const T *> aggregate(CStruct<T> type, GenArg<Fields>... fields) {
    static_assert(std::is_same_v<decltype(T{std::declval<Fields>()...}), T>,
                  "the fields do not initialise the runtime's struct");
    return {[this, type, fields...] {
      std::string init;
      for (const Arg &f : {fields.make()...})
        init += (init.empty() ? "{" : ", ") + cText(std::get<Attribute>(f));
      return Arg(e.local(type.name, init + "}"));
    }};
  }

  template <class Sig, class Invoke, class... Args>
  LogicalResult call(RuntimeFn<Sig, Invoke> fn, GenArg<Args>... args) {
    static_assert(callableWith<Sig, Args...>,
                  "the entry's arguments do not match the runtime function");
    e.commentCall();
    // A braced list is evaluated left to right.
    e.runtime(fn.name, {args.make()...});
    return success();
  }

  LogicalResult unsupported(const Twine &why) {
    return values.stepOp()->emitOpError() << "cannot be converted: " << why;
  }

private:
  template <class T> GenArg<T> constant(Attribute a) {
    return {[a] { return Arg(a); }};
  }
  GenArg<moe_rt_tensor *> tensor(Value v) {
    if (!v)
      return constant<moe_rt_tensor *>(e.null());
    return {[this, v] { return Arg(e.tensor(v)); }};
  }

  StepEmitter &e;
  StepValues values;
  StreamAttr streamAttr;
};

/// What a call is, for a reader of the generated C++ beside
/// moe-print-schedule: the FlowMoE task label (TaskAttr::getLabel, as the
/// schedule prints it), the block and micro-batch as the IR numbers them,
/// the op and its stream.
std::string describeCall(Operation *op, StreamAttr stream) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName())) {
    os << "task " << task.getLabel();
    bool perMicroBatch = llvm::is_contained(
        {TaskKind::AT, TaskKind::D, TaskKind::E, TaskKind::C}, task.getKind());
    if (task.getBlock() >= 0) {
      os << " (block = " << task.getBlock();
      if (perMicroBatch)
        os << ", micro = " << task.getMicro();
      os << ")";
    }
    os << ": ";
  }
  os << op->getName();
  if (auto vjp = dyn_cast<VjpOp>(op))
    if (Operation *fwd = vjp.getForwardOp())
      os << " of " << fwd->getName();
  os << " on " << stringifyStreamKind(stream.getKind()) << " stream "
     << stream.getIndex();
  return text;
}

LogicalResult StepEmitter::emit(Operation *op, int64_t index) {
  if (isa<func::ReturnOp>(op))
    return success();
  {
    what.clear();
    llvm::raw_string_ostream os(what);
    os << "op " << index << " " << op->getName();
    if (auto vjp = dyn_cast<VjpOp>(op))
      if (Operation *fwd = vjp.getForwardOp())
        os << " of " << fwd->getName();
    if (Attribute task = op->getAttr("moe.task"))
      os << " " << task;
  }
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    // Host values (moe-run fills them when it reaches them): the cotangent
    // seed of the loss, zeros.
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense || !dense.isSplat() || !isa<RankedTensorType>(c.getType()))
      return op->emitOpError()
             << "cannot be converted: only splat tensor constants are "
                "supported";
    Value v = tensor(c.getResult());
    if (isa<IntegerType>(dense.getElementType()))
      call("moe_step_fill_i64", Type(),
           {ctx, v, i64(dense.getSplatValue<APInt>().getSExtValue())});
    else
      call("moe_step_fill_f32", Type(),
           {ctx, v, f64(dense.getSplatValue<APFloat>().convertToFloat())});
    return success();
  }
  StreamAttr streamAttr = StreamOrder::getStream(op);
  if (!streamAttr)
    return op->emitOpError()
           << "is not on a stream: run moe-opt --moe-flowmoe-pipeline before "
              "--moe-convert-to-emitc";
  Value s = stream(streamAttr);
  if (auto r = dyn_cast<RecordEventOp>(op)) {
    // Each record op owns one runtime event, reused by later steps.
    events[r.getEvent()] =
        call("moe_step_record", eventTy, {ctx, i64(nextEvent++), s});
    return success();
  }
  if (auto w = dyn_cast<WaitEventOp>(op)) {
    Value e = events.lookup(w.getEvent());
    if (!e)
      return op->emitOpError() << "waits on an event recorded after it";
    call("moe_step_wait", Type(), {ctx, s, e});
    return success();
  }
  comment = describeCall(op, streamAttr);
  // The class its tasks are charged to when profiling (moe_rt/profile.h).
  call("moe_step_op", Type(), {ctx, str(profileOpClass(op))});
  CallPrinter printer(*this, op, streamAttr);
  return issueRuntimeCalls(op, printer);
}

/// The C expression of a dtype: integer tensors are I64 in the runtime
/// whatever their IR width (moe-run does the same).
static const char *dtypeName(Type elem) {
  return isa<IntegerType>(elem) ? "MOE_RT_I64" : "MOE_RT_F32";
}

struct MoeConvertToEmitCPass
    : public mlir::moe::impl::MoeConvertToEmitCBase<MoeConvertToEmitCPass> {
  using Base::Base;

  void runOnOperation() override;
  LogicalResult convert(FunctionOpInterface step, StringRef name,
                        OpBuilder &b);
};

LogicalResult MoeConvertToEmitCPass::convert(FunctionOpInterface step,
                                             StringRef name, OpBuilder &b) {
  MLIRContext *c = &getContext();
  Location loc = step.getLoc();
  if (!step.getFunctionBody().hasOneBlock())
    return step.emitError() << "a scheduled step must be one block";
  Block &entry = step.getFunctionBody().front();
  auto ctxTy = emitc::PointerType::get(emitc::OpaqueType::get(c, "moe_step"));
  auto fnTy = FunctionType::get(c, {ctxTy}, {});

  // Buffer ids: arguments first, then every op result in op order.
  DenseMap<Value, int64_t> ids;
  SmallVector<Value> values;
  auto assign = [&](Value v) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type)
      return success(); // events
    if (!type.hasStaticShape())
      return emitError(v.getLoc())
             << "cannot be converted: dynamic shape " << type
             << " (dropless routing is not supported yet)";
    if (type.getRank() > 8)
      return emitError(v.getLoc()) << "rank above MOE_RT_MAX_RANK (8)";
    ids[v] = values.size();
    values.push_back(v);
    return success();
  };
  for (BlockArgument a : entry.getArguments())
    if (failed(assign(a)))
      return failure();
  for (Operation &op : entry)
    for (Value r : op.getResults())
      if (failed(assign(r)))
        return failure();

  // <name>_declare: everything the support library allocates up front.
  auto declare =
      emitc::FuncOp::create(b, loc, (name + "_declare").str(), fnTy);
  Block *db = declare.addEntryBlock();
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(db);
    StepEmitter e(loc, b, db->getArgument(0), ids);
    SymbolTableCollection table;
    // Grids named by the step's collectives (and its model), so that the
    // support library can form each group from the rank's coordinates.
    llvm::SetVector<StringRef> gridNames;
    step.walk([&](CollectiveOpInterface op) {
      gridNames.insert(op.getGridAttr().getValue());
    });
    for (StringRef gname : gridNames) {
      auto grid = table.lookupNearestSymbolFrom<shard::GridOp>(
          step.getOperation(), FlatSymbolRefAttr::get(c, gname));
      if (!grid)
        return step.emitError() << "no shard.grid @" << gname;
      SmallVector<Arg> args = {db->getArgument(0), e.str(gname)};
      for (int64_t d : grid.getShape())
        args.push_back(e.i64(d));
      e.call("moe_step_grid", Type(), args);
    }
    for (Value v : values) {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<Arg> args = {db->getArgument(0), e.i64(ids[v]),
                               e.opaque(dtypeName(type.getElementType()))};
      for (int64_t d : type.getShape())
        args.push_back(e.i64(d));
      e.call("moe_step_buffer", Type(), args);
      if (Operation *def = v.getDefiningOp();
          def && target::writesWholeResults(def))
        e.call("moe_step_buffer_written", Type(),
               {db->getArgument(0), e.i64(ids[v])});
    }
    // Arguments in order: parameters by name, token ids / labels unnamed
    // ("arg<N>" in the dumps, as moe-run names them); optimizer state and
    // step inputs by name (StepState.h), the schedule for the lr input.
    std::vector<std::string> resultNames = {"loss"};
    for (BlockArgument a : target::carriedArguments(step))
      resultNames.push_back(target::argumentName(step, a));
    for (BlockArgument a : entry.getArguments()) {
      if (!ids.count(a))
        return step.emitError() << "argument " << a.getArgNumber()
                                << " is not a tensor";
      target::ArgRole role = target::roleOf(step, a);
      std::string aname = target::argumentName(step, a);
      StringRef callee = role == target::ArgRole::state ? "moe_step_state"
                         : role == target::ArgRole::stepInput
                             ? "moe_step_step_input"
                             : "moe_step_argument";
      e.call(callee, Type(),
             {db->getArgument(0), e.i64(ids[a]),
              role == target::ArgRole::input ? e.null() : e.str(aname)});
      if (role == target::ArgRole::stepInput && aname == "lr") {
        llvm::Expected<moe_rt_lr_schedule> schedule =
            target::lrSchedule(step);
        if (!schedule)
          return step.emitError() << llvm::toString(schedule.takeError());
        e.call("moe_step_lr_schedule", Type(),
               {db->getArgument(0),
                e.opaque(schedule->kind == MOE_RT_LR_COSINE
                             ? "MOE_RT_LR_COSINE"
                             : "MOE_RT_LR_CONSTANT"),
                e.f64(schedule->lr), e.i64(schedule->warmup),
                e.i64(schedule->total), e.f64(schedule->min_lr)});
      }
    }
    // What a checkpoint of this step holds, from its sharding
    // (docs/checkpoint-format.md).
    e.call("moe_step_checkpoint_manifest", Type(),
           {db->getArgument(0),
            e.str(moe_rt::checkpoint::encodeManifest(
                target::checkpointManifest(step)))});
    // Results: the loss, then the updated parameters in argument order.
    auto ret = dyn_cast<func::ReturnOp>(entry.getTerminator());
    if (!ret)
      return step.emitError() << "a scheduled step must end in func.return";
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      if (!ids.count(v))
        return ret.emitOpError() << "returns a non-tensor";
      std::string rname = i < resultNames.size()
                              ? resultNames[i]
                              : "result" + std::to_string(i);
      e.call("moe_step_result", Type(),
             {db->getArgument(0), e.str(rname), e.i64(ids[v])});
    }
    emitc::ReturnOp::create(b, loc, Value());
  }

  // <name>_step: the schedule.
  auto stepFn = emitc::FuncOp::create(b, loc, (name + "_step").str(), fnTy);
  Block *sb = stepFn.addEntryBlock();
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(sb);
    StepEmitter e(loc, b, sb->getArgument(0), ids);
    e.call("moe_step_begin", Type(), {sb->getArgument(0)});
    int64_t index = 0;
    for (Operation &op : entry)
      if (failed(e.emit(&op, index++)))
        return failure();
    // Waits for every stream, as moe-run does after the last op.
    e.call("moe_step_end", Type(), {sb->getArgument(0)});
    emitc::ReturnOp::create(b, loc, Value());
  }
  return success();
}

void MoeConvertToEmitCPass::runOnOperation() {
  ModuleOp module = getOperation();
  SmallVector<FunctionOpInterface> steps;
  for (Operation &op : module.getBody()->getOperations()) {
    if (isa<shard::GridOp, emitc::IncludeOp, emitc::FuncOp>(op))
      continue;
    auto f = dyn_cast<FunctionOpInterface>(op);
    if (f && f->hasAttr(MoeDialect::getScheduleAttrName())) {
      steps.push_back(f);
      continue;
    }
    // Anything else would be left behind in a module that must be all EmitC
    // for mlir-translate --mlir-to-cpp.
    op.emitError() << "'" << op.getName()
                   << "' cannot be converted to EmitC"
                   << (f ? ": it is not a scheduled step (run moe-opt "
                           "--moe-flowmoe-pipeline first)"
                         : "");
    return signalPassFailure();
  }
  if (steps.empty()) {
    module.emitError() << "no scheduled step to convert (run moe-opt "
                          "--moe-flowmoe-pipeline first)";
    return signalPassFailure();
  }
  if (!prefix.empty() && steps.size() > 1) {
    module.emitError() << "prefix= names one step, but the module has "
                       << steps.size();
    return signalPassFailure();
  }
  OpBuilder b(module.getBodyRegion());
  b.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(b, module.getLoc(), "moe_rt/step_support.h",
                           /*isStandardInclude=*/false);
  for (FunctionOpInterface step : steps) {
    b.setInsertionPoint(step);
    StringRef name = prefix.empty() ? step.getName() : StringRef(prefix);
    // The names become C++ function names.
    if (name.empty() || llvm::isDigit(name[0]) ||
        !llvm::all_of(name, [](char ch) {
          return llvm::isAlnum(ch) || ch == '_';
        })) {
      step.emitError() << "'" << name
                       << "' is not a C identifier: name the generated "
                          "functions with --moe-convert-to-emitc=\"prefix=...\"";
      return signalPassFailure();
    }
    if (failed(convert(step, name, b)))
      return signalPassFailure();
  }
  for (FunctionOpInterface step : steps)
    step->erase();
  for (auto grid : llvm::make_early_inc_range(module.getOps<shard::GridOp>()))
    grid->erase();
}

} // namespace
