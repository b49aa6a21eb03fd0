//===- MoeToEmitC.cpp - scheduled steps as EmitC calls into the runtime ---===//
//
// --moe-convert-to-emitc: every scheduled step becomes two emitc.funcs,
// `<prefix>_declare` (buffers, arguments, results, grids) and
// `<prefix>_step` (the step itself), which mlir-translate --mlir-to-cpp
// prints as C++ against moe_rt/step_support.h and moe_rt/ops.h.
//
// The step is tools/moe-run's interpreter unrolled: the same op order, the
// same runtime call per op and vjp with the same arguments, the same stream
// per #moe.stream, the same event edges and group communicators. Where the
// two could drift (which operand goes where), the code below mirrors
// moe-run.cpp's issueForward / issueBackward / issueRouting line by line,
// and test/Conversion/codegen-e2e.test compares their dumps.
//
// Tensors are not SSA values of the generated code: every tensor value of
// the step gets a buffer id, allocated once by the support library, and
// `moe_step_tensor(s, id)` fetches its moe_rt_tensor* the first time the
// step touches it. That keeps buffers alive across the asynchronous runtime
// calls (which only queue work) and across steps.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"

#include "moe/Analysis/StreamOrder.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <variant>

namespace mlir::moe {
#define GEN_PASS_DEF_MOECONVERTTOEMITC
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

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

  /// A double printed with 17 significant digits, so the generated code
  /// passes the very double moe-run reads from the attribute.
  Attribute exact(double v) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::format("%.17g", v);
    return opaque(text);
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

  Value tensor(Value v) {
    auto it = tensors.find(v);
    if (it != tensors.end())
      return it->second;
    return tensors[v] = call("moe_step_tensor", tensorPtr, {ctx, i64(ids.lookup(v))});
  }

private:
  /// A runtime op call: its status goes to moe_step_check, which names the
  /// op if it failed (the runtime only queues work, so most errors surface
  /// at moe_step_end's synchronisation, also with a message).
  void runtime(StringRef callee, ArrayRef<Arg> args) {
    Value status = call(callee, statusTy, args);
    call("moe_step_check", Type(), {ctx, status, str(what)});
  }
  Arg opt(ArrayRef<Value> vs, size_t i) {
    if (i < vs.size())
      return tensor(vs[i]);
    return null();
  }
  Value stream(StreamAttr s);
  Value comm(FlatSymbolRefAttr grid, ArrayRef<int16_t> axes);
  LogicalResult forward(Operation *op, Value s, ArrayRef<Value> in,
                        ArrayRef<Value> out);
  LogicalResult backward(Operation *fwd, Value s, ArrayRef<Value> in,
                         ArrayRef<Value> ct, ArrayRef<Value> g);
  LogicalResult routing(Operation *op, Value s, bool isBackward,
                        ArrayRef<Value> in, ArrayRef<Value> out);
  Attribute attentionAttrs(AttentionOp a);

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
  Value stepSeed;
  /// The op being emitted, for error messages of the generated code.
  std::string what;
};

Value StepEmitter::stream(StreamAttr s) {
  auto key = std::make_pair(int(s.getKind()), s.getIndex());
  auto it = streams.find(key);
  if (it != streams.end())
    return it->second;
  // Compute streams are plain CPU streams, communication streams FlowMoE's
  // priority pool (all-to-alls high, all-reduce chunks low), as in moe-run.
  return streams[key] = call(
             "moe_step_stream", streamTy,
             {ctx,
              opaque(s.getKind() == StreamKind::comm ? "MOE_STEP_COMM"
                                                     : "MOE_STEP_COMPUTE"),
              i64(s.getIndex())});
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

/// The runtime's enumerator for a gate kind (moe_rt_gate's first argument).
static const char *gateKindName(GateKind k) {
  switch (k) {
  case GateKind::softmax_topk:
    return "MOE_RT_GATE_SOFTMAX_TOPK";
  case GateKind::noisy_topk:
    return "MOE_RT_GATE_NOISY_TOPK";
  case GateKind::sigmoid:
    return "MOE_RT_GATE_SIGMOID";
  case GateKind::cosine:
    return "MOE_RT_GATE_COSINE";
  case GateKind::expert_choice:
    return "MOE_RT_GATE_EXPERT_CHOICE";
  }
  return "MOE_RT_GATE_SOFTMAX_TOPK";
}

static const char *normName(NormKind k) {
  return k == NormKind::rms ? "MOE_RT_NORM_RMS" : "MOE_RT_NORM_LAYER";
}

static FailureOr<const char *> activationName(Activation a) {
  switch (a) {
  case Activation::relu:
    return "MOE_RT_RELU";
  case Activation::gelu:
    return "MOE_RT_GELU";
  case Activation::silu:
    return "MOE_RT_SILU";
  }
  return failure();
}

/// moe_rt_attention_attrs as an aggregate initializer, in its field order
/// (heads, kv_heads, head_dim, causal, rotary, norm, eps).
Attribute StepEmitter::attentionAttrs(AttentionOp a) {
  std::optional<NormKind> norm = a.getNorm();
  std::string eps;
  llvm::raw_string_ostream os(eps);
  // %.17g round-trips the double moe-run passes.
  os << llvm::format("%.17g", a.getEpsilon().convertToDouble());
  return opaque(llvm::formatv("{{{0}, {1}, {2}, {3}, {4}, {5}, {6}}",
                              a.getNumHeads(), a.getNumKvHeads(),
                              a.getHeadDim(), a.getCausal() ? 1 : 0,
                              a.getRotary() ? 1 : 0,
                              norm ? normName(*norm) : "MOE_RT_NORM_NONE", eps)
                    .str());
}

LogicalResult StepEmitter::forward(Operation *op, Value s, ArrayRef<Value> in,
                                   ArrayRef<Value> out) {
  auto t = [&](Value v) -> Arg { return tensor(v); };
  if (auto a = dyn_cast<AttentionOp>(op)) {
    // The attrs live in a local of the step: moe_rt_attention copies them
    // when it queues the task.
    auto var = emitc::VariableOp::create(
        b, loc,
        emitc::LValueType::get(
            emitc::OpaqueType::get(b.getContext(), "moe_rt_attention_attrs")),
        attentionAttrs(a));
    Value ptr = emitc::AddressOfOp::create(
        b, loc,
        emitc::PointerType::get(emitc::OpaqueType::get(
            b.getContext(), "moe_rt_attention_attrs")),
        var);
    runtime("moe_rt_attention",
            {s, ptr, t(in[0]), t(in[1]), t(in[2]), t(in[3]), t(in[4]),
             opt(in, 5), opt(in, 6), t(out[0])});
  } else if (auto n = dyn_cast<NormOp>(op)) {
    runtime("moe_rt_norm", {s, opaque(normName(n.getKind())),
                            f64(n.getEpsilon().convertToDouble()), t(in[0]),
                            t(in[1]), opt(in, 2), t(out[0])});
  } else if (isa<LinearOp>(op)) {
    runtime("moe_rt_linear", {s, t(in[0]), t(in[1]), opt(in, 2), t(out[0])});
  } else if (isa<EmbeddingOp>(op)) {
    runtime("moe_rt_embedding", {s, t(in[0]), t(in[1]), t(out[0])});
  } else if (isa<CrossEntropyOp>(op)) {
    runtime("moe_rt_cross_entropy", {s, t(in[0]), t(in[1]), t(out[0])});
  } else if (auto g = dyn_cast<GateOp>(op)) {
    if (g.getKind() == GateKind::softmax_topk)
      runtime("moe_rt_gate_topk",
              {s, i64(g.getTopK()), i64(g.getNormalize() ? 1 : 0), t(in[0]),
               t(in[1]), t(out[0]), t(out[1]), t(out[2])});
    else if (g.getKind() == GateKind::noisy_topk)
      runtime("moe_rt_gate_at",
              {s, opaque(gateKindName(g.getKind())), i64(g.getTopK()),
               i64(g.getNormalize() ? 1 : 0), gateSeed(),
               i64(g.getSampleOffsetOrZero()), exact(g.getTauOrDefault()),
               t(in[0]), t(in[1]), opt(in, 2), t(out[0]), t(out[1]),
               t(out[2])});
    else // no noise: neither the step's seed nor the sample matters
      runtime("moe_rt_gate",
              {s, opaque(gateKindName(g.getKind())), i64(g.getTopK()),
               i64(g.getNormalize() ? 1 : 0), opaque("MOE_RT_GATE_NOISE_SEED"),
               exact(g.getTauOrDefault()), t(in[0]), t(in[1]), opt(in, 2),
               t(out[0]), t(out[1]), t(out[2])});
  } else if (isa<ExpertOp, SharedExpertOp>(op)) {
    bool gated = isa<ExpertOp>(op)
                     ? cast<ExpertOp>(op).isGated()
                     : static_cast<bool>(cast<SharedExpertOp>(op).getGateProj());
    Activation act = isa<ExpertOp>(op)
                         ? cast<ExpertOp>(op).getActivation()
                         : cast<SharedExpertOp>(op).getActivation();
    FailureOr<const char *> actName = activationName(act);
    if (failed(actName))
      return op->emitOpError() << "cannot be converted: unknown activation";
    runtime("moe_rt_expert",
            {s, opaque(*actName), t(in[0]), t(in[1]),
             gated ? t(in[2]) : Arg(null()), t(in[gated ? 3 : 2]), t(out[0])});
  } else if (isa<arith::AddFOp>(op)) {
    runtime("moe_rt_add", {s, t(in[0]), t(in[1]), t(out[0])});
  } else if (isa<SplitOp>(op)) {
    // Each result is the next contiguous run of the input's elements.
    int64_t offset = 0;
    for (Value o : out) {
      int64_t n = cast<RankedTensorType>(o.getType()).getNumElements();
      runtime("moe_rt_copy", {s, t(in[0]), i64(offset), t(o), i64(0), i64(n)});
      offset += n;
    }
  } else if (isa<MergeOp>(op)) {
    int64_t offset = 0;
    for (Value i : in) {
      int64_t n = cast<RankedTensorType>(i.getType()).getNumElements();
      runtime("moe_rt_copy",
              {s, t(i), i64(0), t(out[0]), i64(offset), i64(n)});
      offset += n;
    }
  } else if (auto sgd = dyn_cast<SgdOp>(op)) {
    runtime("moe_rt_sgd", {s, t(in[0]), t(in[1]),
                           f64(sgd.getLr().convertToDouble()), t(out[0])});
  } else {
    return op->emitOpError()
           << "cannot be converted to a moe runtime call (moe_rt/ops.h has "
              "none for it)";
  }
  return success();
}

LogicalResult StepEmitter::backward(Operation *fwd, Value s,
                                    ArrayRef<Value> in, ArrayRef<Value> ct,
                                    ArrayRef<Value> g) {
  auto t = [&](Value v) -> Arg { return tensor(v); };
  if (auto a = dyn_cast<AttentionOp>(fwd)) {
    auto attrsTy = emitc::OpaqueType::get(b.getContext(), "moe_rt_attention_attrs");
    auto var = emitc::VariableOp::create(b, loc, emitc::LValueType::get(attrsTy),
                                         attentionAttrs(a));
    Value ptr = emitc::AddressOfOp::create(
        b, loc, emitc::PointerType::get(attrsTy), var);
    runtime("moe_rt_attention_grad",
            {s, ptr, t(in[0]), t(in[1]), t(in[2]), t(in[3]), t(in[4]),
             opt(in, 5), opt(in, 6), t(ct[0]), t(g[0]), t(g[1]), t(g[2]),
             t(g[3]), t(g[4]), opt(g, 5), opt(g, 6)});
  } else if (auto n = dyn_cast<NormOp>(fwd)) {
    runtime("moe_rt_norm_grad",
            {s, opaque(normName(n.getKind())),
             f64(n.getEpsilon().convertToDouble()), t(in[0]), t(in[1]),
             opt(in, 2), t(ct[0]), t(g[0]), t(g[1]), opt(g, 2)});
  } else if (isa<LinearOp>(fwd)) {
    runtime("moe_rt_linear_grad", {s, t(in[0]), t(in[1]), t(ct[0]), t(g[0]),
                                   t(g[1]), opt(g, 2)});
  } else if (isa<EmbeddingOp>(fwd)) {
    runtime("moe_rt_embedding_grad", {s, t(in[0]), t(ct[0]), t(g[0])});
  } else if (isa<CrossEntropyOp>(fwd)) {
    runtime("moe_rt_cross_entropy_grad",
            {s, t(in[0]), t(in[1]), t(ct[0]), t(g[0])});
  } else if (auto gate = dyn_cast<GateOp>(fwd)) {
    if (gate.getKind() == GateKind::softmax_topk)
      runtime("moe_rt_gate_topk_grad",
              {s, i64(gate.getTopK()), i64(gate.getNormalize() ? 1 : 0),
               t(in[0]), t(in[1]), t(ct[0]), t(g[0]), t(g[1])});
    else if (gate.getKind() == GateKind::noisy_topk)
      runtime("moe_rt_gate_grad_at",
              {s, opaque(gateKindName(gate.getKind())), i64(gate.getTopK()),
               i64(gate.getNormalize() ? 1 : 0), gateSeed(),
               i64(gate.getSampleOffsetOrZero()), exact(gate.getTauOrDefault()),
               t(in[0]), t(in[1]), opt(in, 2), t(ct[0]), t(g[0]), t(g[1]),
               opt(g, 2)});
    else
      runtime("moe_rt_gate_grad",
              {s, opaque(gateKindName(gate.getKind())), i64(gate.getTopK()),
               i64(gate.getNormalize() ? 1 : 0),
               opaque("MOE_RT_GATE_NOISE_SEED"),
               exact(gate.getTauOrDefault()), t(in[0]), t(in[1]), opt(in, 2),
               t(ct[0]), t(g[0]), t(g[1]), opt(g, 2)});
  } else if (isa<ExpertOp, SharedExpertOp>(fwd)) {
    bool gated = isa<ExpertOp>(fwd)
                     ? cast<ExpertOp>(fwd).isGated()
                     : static_cast<bool>(cast<SharedExpertOp>(fwd).getGateProj());
    Activation act = isa<ExpertOp>(fwd)
                         ? cast<ExpertOp>(fwd).getActivation()
                         : cast<SharedExpertOp>(fwd).getActivation();
    FailureOr<const char *> actName = activationName(act);
    if (failed(actName))
      return fwd->emitOpError() << "cannot be converted: unknown activation";
    // Operands x, up, [gate], down; gradients dx, dup, [dgate], ddown.
    runtime("moe_rt_expert_grad",
            {s, opaque(*actName), t(in[0]), t(in[1]),
             gated ? t(in[2]) : Arg(null()), t(in[gated ? 3 : 2]), t(ct[0]),
             t(g[0]), t(g[1]), gated ? t(g[2]) : Arg(null()),
             t(g[gated ? 3 : 2])});
  } else {
    return fwd->emitOpError()
           << "cannot be differentiated by the moe runtime (moe_rt/ops.h has "
              "no backward call for it)";
  }
  return success();
}

LogicalResult StepEmitter::routing(Operation *op, Value s, bool isBackward,
                                   ArrayRef<Value> in, ArrayRef<Value> out) {
  auto collective = cast<CollectiveOpInterface>(op);
  Value c = comm(collective.getGridAttr(), collective.getAxes());
  bool isDispatch = isa<DispatchOp>(op);
  RoutingShape shape = *routingShape(op);
  int64_t experts = shape.experts;
  std::optional<int64_t> cap = shape.capacity;
  if (!cap)
    return op->emitOpError()
           << "cannot be converted: dropless routing (no capacity) is not "
              "supported by the runtime's step ops yet";
  auto t = [&](Value v) -> Arg { return tensor(v); };
  if (isDispatch && !isBackward)
    runtime("moe_rt_dispatch",
            {s, c, i64(experts), i64(*cap), t(in[0]), t(in[1]), t(out[0])});
  else if (isDispatch) // operands x, indices, counts; cotangent d(result)
    runtime("moe_rt_dispatch_grad",
            {s, c, i64(experts), i64(*cap), t(in[1]), t(in[3]), t(out[0])});
  else if (!isBackward)
    runtime("moe_rt_combine", {s, c, i64(experts), i64(*cap), t(in[0]),
                               t(in[1]), t(in[2]), t(out[0])});
  else // operands expert_out, indices, weights, counts; cotangent d(result)
    runtime("moe_rt_combine_grad",
            {s, c, i64(experts), i64(*cap), t(in[0]), t(in[1]), t(in[2]),
             t(in[4]), t(out[0]), t(out[1])});
  return success();
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
  SmallVector<Value> in(op->getOperands()), out(op->getResults());
  if (auto ar = dyn_cast<AllReduceOp>(op)) {
    // Copy and reduce on the pool's low-priority queue (FlowMoE: chunks
    // yield to all-to-alls).
    Value c = comm(ar.getGridAttr(), ar.getAxes());
    int64_t offset = 0, size = -1;
    if (auto bytes = ar.getBytes()) {
      offset = (*bytes)[0];
      size = (*bytes)[1];
    }
    for (auto [src, dst] : llvm::zip(in, out))
      runtime("moe_rt_all_reduce_into", {s, c, tensor(src), tensor(dst),
                                         i64(offset), i64(size)});
    return success();
  }
  if (isa<DispatchOp, CombineOp>(op))
    return routing(op, s, false, in, out);
  if (auto vjp = dyn_cast<VjpOp>(op)) {
    Operation *fwd = vjp.getForwardOp();
    if (!fwd)
      return op->emitOpError() << "has no forward op";
    size_t primals = vjp.getPrimals().size();
    if (isa<DispatchOp, CombineOp>(fwd))
      return routing(fwd, s, true, in, out);
    return backward(fwd, s, ArrayRef(in).take_front(primals),
                    ArrayRef(in).drop_front(primals), out);
  }
  return forward(op, s, in, out);
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
    }
    // Arguments in order: parameters by name, token ids / labels unnamed
    // ("arg<N>" in the dumps, as moe-run names them).
    std::vector<std::string> resultNames = {"loss"};
    for (BlockArgument a : entry.getArguments()) {
      auto pname = step.getArgAttrOfType<StringAttr>(
          a.getArgNumber(), MoeDialect::getParamAttrName());
      if (pname)
        resultNames.push_back(pname.getValue().str());
      if (!ids.count(a))
        return step.emitError() << "argument " << a.getArgNumber()
                                << " is not a tensor";
      e.call("moe_step_argument", Type(),
             {db->getArgument(0), e.i64(ids[a]),
              pname ? e.str(pname.getValue()) : e.null()});
    }
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
