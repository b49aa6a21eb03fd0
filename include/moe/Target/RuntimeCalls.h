//===- RuntimeCalls.h - the one table: moe op -> moe_rt call ----*- C++ -*-===//
//
// Which moe_rt function (runtime/include/moe_rt/ops.h) each op of a
// scheduled step calls, with which arguments in which order, on which
// stream class — and the same for each op's vjp. Written once, for the two
// ways a step runs:
//   lib/Target/Interpreter (moe-run) makes the calls;
//   lib/Target/EmitC (--moe-convert-to-emitc) prints them as C++.
//
// An entry is a specialisation of RuntimeCall<OpT> (below) that describes
// its calls to a visitor `v`, which makes or prints them:
//
//   v.call(MOE_RT_FN(moe_rt_linear), v.stream(), v.in(op.getInput()),
//          v.in(op.getWeight()), v.in(op.getBias()), v.out(op.getResult()))
//
// MOE_RT_FN names the function and wraps the call in a generic lambda. Only
// a visitor that calls the function instantiates that lambda, so the EmitC
// side references no runtime symbol (the compiler never links the
// runtime), while both visitors check their arguments against the
// function's declaration in moe_rt/ops.h at compile time.
//
// What a visitor provides, with the C type of what it passes:
//   stream()          moe_rt_stream   the op's stream (#moe.stream)
//   comm(op)          moe_rt_comm     the group of a collective's grid/axes
//   in(v)             moe_rt_tensor*  operand v of the op (for a vjp: the
//                                     primal bound to it); NULL when v is
//                                     null (an absent optional operand)
//   out(v)            moe_rt_tensor*  result v of a forward op
//   cotangent(v)      moe_rt_tensor*  a vjp's cotangent of result v
//   grad(v)           moe_rt_tensor*  a vjp's gradient of operand v; NULL
//                                     when v is null
//   i64(x) / flag(b)  int64_t / int   a number; a bool as 0 / 1
//   f64(x)            double          printed as a float attribute
//   f64Text(x)        double          printed as 17 significant digits
//                                     (both exact; f64Text is the form
//                                     generated code has always given τ)
//   named(n)          T               a Named<T> constant of moe_rt's
//                                     headers, printed by name
//   gateSeed()        uint64_t        this training step's noise seed
//   routingLog()      moe_rt_routing_log*  the step's routing log
//                                     (moe_rt/routing_stats.h), or NULL
//   aggregate(s, fields...)  const T*  a C struct of moe_rt's headers
//   call(fn, args...) -> LogicalResult
//   unsupported(why)  -> failure, reported on the op
// Arguments are read left to right: generated code fetches buffers in the
// order the call lists them.
//
// An entry may also say `static constexpr bool writesResults = true;`
// (its forward calls write every element of the op's results on a CPU
// stream) and `writesGradients` (the same for its backward's gradients):
// moe-run and generated steps then skip zeroing those buffers when the
// step reaches the op (every other value's buffer is zeroed first).
//
// Adding an op: docs/design.md, "Adding an op".
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_RUNTIMECALLS_H
#define MOE_TARGET_RUNTIMECALLS_H

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/STLExtras.h"

#include "moe_rt/ops.h"

#include <algorithm>
#include <type_traits>

namespace mlir::moe::target {

/// The stream a runtime call queues its work on: a compute stream, a
/// communication stream (FlowMoE's priority pool), or a host stream (a host
/// planner's thread, docs/host-planners.md).
enum class StreamClass { compute, comm, host };

/// A moe_rt function as an entry names it: its C name, its declared type
/// `Sig` (decltype of the declaration, which references no symbol) and
/// `invoke`, a generic lambda that calls it.
template <class Sig, class Invoke> struct RuntimeFn {
  const char *name;
  Invoke invoke;
};
template <class Sig, class Invoke>
RuntimeFn<Sig, Invoke> runtimeFn(const char *name, Invoke invoke) {
  return {name, invoke};
}
#define MOE_RT_FN(fn)                                                          \
  ::mlir::moe::target::runtimeFn<decltype(fn)>(                                \
      #fn, [](auto... args) { return fn(args...); })

/// Whether `fn` can be called with arguments of the C types `Args`: both
/// visitors assert it for every call.
template <class Sig, class... Args>
inline constexpr bool callableWith =
    std::is_invocable_r_v<moe_rt_status, Sig *, Args...>;

/// A constant of moe_rt's headers (an enumerator, a macro): its value for
/// the interpreter, its name for generated code.
template <class T> struct Named {
  T value;
  const char *name;
};
#define MOE_RT_NAMED(constant)                                                 \
  ::mlir::moe::target::Named<std::decay_t<decltype(constant)>> {               \
    constant, #constant                                                        \
  }

/// A C struct type of moe_rt's headers, by name for generated code.
template <class T> struct CStruct {
  const char *name;
};
#define MOE_RT_STRUCT(type)                                                    \
  ::mlir::moe::target::CStruct<type> { #type }

//===----------------------------------------------------------------------===//
// Dialect enums as moe_rt constants
//===----------------------------------------------------------------------===//

inline Named<moe_rt_norm_kind> normKind(NormKind kind) {
  return kind == NormKind::rms ? MOE_RT_NAMED(MOE_RT_NORM_RMS)
                               : MOE_RT_NAMED(MOE_RT_NORM_LAYER);
}

inline Named<moe_rt_activation> activation(Activation act) {
  switch (act) {
  case Activation::relu:
    return MOE_RT_NAMED(MOE_RT_RELU);
  case Activation::gelu:
    return MOE_RT_NAMED(MOE_RT_GELU);
  case Activation::silu:
    return MOE_RT_NAMED(MOE_RT_SILU);
  }
  llvm_unreachable("an activation the runtime does not know");
}

inline Named<moe_rt_gate_kind> gateKind(GateKind kind) {
  switch (kind) {
  case GateKind::softmax_topk:
    return MOE_RT_NAMED(MOE_RT_GATE_SOFTMAX_TOPK);
  case GateKind::noisy_topk:
    return MOE_RT_NAMED(MOE_RT_GATE_NOISY_TOPK);
  case GateKind::sigmoid:
    return MOE_RT_NAMED(MOE_RT_GATE_SIGMOID);
  case GateKind::cosine:
    return MOE_RT_NAMED(MOE_RT_GATE_COSINE);
  case GateKind::expert_choice:
    return MOE_RT_NAMED(MOE_RT_GATE_EXPERT_CHOICE);
  }
  llvm_unreachable("a gate kind the runtime does not know");
}

/// Entry `i` of a variadic operand group, or null past its end.
inline Value nth(ValueRange values, size_t i) {
  return i < values.size() ? values[i] : Value();
}

inline int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

/// The model block of a step op (its #moe.task, or its vjp's), -1 when
/// unlabelled: runtime errors about a block's routing name it.
inline int64_t blockIndexOf(Operation *op) {
  for (Operation *o = op; o; o = o->getParentOp())
    if (auto task = o->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName()))
      return task.getBlock();
  return -1;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

/// An op without a runtime call: the primary template. An entry
/// specialises it with
///   static constexpr StreamClass stream;
///   template <class V> static LogicalResult forward(OpT op, V &v);
/// and, when the op can be differentiated,
///   template <class V> static LogicalResult backward(OpT op, V &v);
/// where `op` is the vjp's body op and v.cotangent / v.grad name the vjp's
/// values.
template <class OpT> struct RuntimeCall {
  static constexpr bool exists = false;
};

template <> struct RuntimeCall<EmbeddingOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(EmbeddingOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_embedding), v.stream(), v.in(op.getIds()),
                  v.in(op.getTable()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(EmbeddingOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_embedding_grad), v.stream(),
                  v.in(op.getIds()), v.cotangent(op.getResult()),
                  v.grad(op.getTable()));
  }
};

template <> struct RuntimeCall<PositionEmbeddingOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(PositionEmbeddingOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_position_embedding), v.stream(),
                  v.in(op.getInput()), v.in(op.getTable()),
                  v.out(op.getResult()));
  }
  template <class V>
  static LogicalResult backward(PositionEmbeddingOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_position_embedding_grad), v.stream(),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getTable()));
  }
};

template <> struct RuntimeCall<NormOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(NormOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_norm), v.stream(),
                  v.named(normKind(op.getKind())),
                  v.f64(op.getEpsilon().convertToDouble()),
                  v.in(op.getInput()), v.in(op.getScale()),
                  v.in(op.getBias()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(NormOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_norm_grad), v.stream(),
                  v.named(normKind(op.getKind())),
                  v.f64(op.getEpsilon().convertToDouble()),
                  v.in(op.getInput()), v.in(op.getScale()),
                  v.in(op.getBias()), v.cotangent(op.getResult()),
                  v.grad(op.getInput()), v.grad(op.getScale()),
                  v.grad(op.getBias()));
  }
};

template <> struct RuntimeCall<LinearOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(LinearOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_linear), v.stream(), v.in(op.getInput()),
                  v.in(op.getWeight()), v.in(op.getBias()),
                  v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(LinearOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_linear_grad), v.stream(),
                  v.in(op.getInput()), v.in(op.getWeight()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getWeight()), v.grad(op.getBias()));
  }
};

template <> struct RuntimeCall<BiasAddOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(BiasAddOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_bias_add), v.stream(), v.in(op.getInput()),
                  v.in(op.getBias()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(BiasAddOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_bias_add_grad), v.stream(),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getBias()));
  }
};

template <> struct RuntimeCall<CrossEntropyOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(CrossEntropyOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_cross_entropy), v.stream(),
                  v.in(op.getLogits()), v.in(op.getLabels()),
                  v.out(op.getLoss()));
  }
  template <class V> static LogicalResult backward(CrossEntropyOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_cross_entropy_grad), v.stream(),
                  v.in(op.getLogits()), v.in(op.getLabels()),
                  v.cotangent(op.getLoss()), v.grad(op.getLogits()));
  }
};

/// Without biases, moe_rt_attention; with any, moe_rt_attention_biased
/// (the same call with the Q, K, V, output biases after the pre-norm's).
template <> struct RuntimeCall<AttentionOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  /// moe_rt_attention_attrs, in its field order.
  template <class V> static auto attrs(AttentionOp op, V &v) {
    std::optional<NormKind> norm = op.getNorm();
    return v.aggregate(
        MOE_RT_STRUCT(moe_rt_attention_attrs), v.i64(op.getNumHeads()),
        v.i64(op.getNumKvHeads()), v.i64(op.getHeadDim()),
        v.flag(op.getCausal()), v.flag(op.getRotary()),
        v.named(norm ? normKind(*norm) : MOE_RT_NAMED(MOE_RT_NORM_NONE)),
        v.f64(op.getEpsilon().convertToDouble()), v.f64(op.getRotaryTheta()),
        v.flag(op.getRotaryLayout() == RotaryLayout::interleaved),
        v.f64(op.getClipBound()));
  }
  static bool biased(AttentionOp op) {
    return !op.getQkvBias().empty() || op.getOutBias();
  }
  template <class V> static LogicalResult forward(AttentionOp op, V &v) {
    ValueRange norm = op.getNormParams();
    if (biased(op))
      return v.call(MOE_RT_FN(moe_rt_attention_biased), v.stream(),
                    attrs(op, v), v.in(op.getInput()), v.in(op.getWq()),
                    v.in(op.getWk()), v.in(op.getWv()), v.in(op.getWo()),
                    v.in(nth(norm, 0)), v.in(nth(norm, 1)), v.in(op.getBq()),
                    v.in(op.getBk()), v.in(op.getBv()), v.in(op.getOutBias()),
                    v.out(op.getResult()));
    return v.call(MOE_RT_FN(moe_rt_attention), v.stream(), attrs(op, v),
                  v.in(op.getInput()), v.in(op.getWq()), v.in(op.getWk()),
                  v.in(op.getWv()), v.in(op.getWo()), v.in(nth(norm, 0)),
                  v.in(nth(norm, 1)), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(AttentionOp op, V &v) {
    ValueRange norm = op.getNormParams();
    if (biased(op))
      return v.call(
          MOE_RT_FN(moe_rt_attention_biased_grad), v.stream(), attrs(op, v),
          v.in(op.getInput()), v.in(op.getWq()), v.in(op.getWk()),
          v.in(op.getWv()), v.in(op.getWo()), v.in(nth(norm, 0)),
          v.in(nth(norm, 1)), v.in(op.getBq()), v.in(op.getBk()),
          v.in(op.getBv()), v.in(op.getOutBias()), v.cotangent(op.getResult()),
          v.grad(op.getInput()), v.grad(op.getWq()), v.grad(op.getWk()),
          v.grad(op.getWv()), v.grad(op.getWo()), v.grad(nth(norm, 0)),
          v.grad(nth(norm, 1)), v.grad(op.getBq()), v.grad(op.getBk()),
          v.grad(op.getBv()), v.grad(op.getOutBias()));
    return v.call(MOE_RT_FN(moe_rt_attention_grad), v.stream(), attrs(op, v),
                  v.in(op.getInput()), v.in(op.getWq()), v.in(op.getWk()),
                  v.in(op.getWv()), v.in(op.getWo()), v.in(nth(norm, 0)),
                  v.in(nth(norm, 1)), v.cotangent(op.getResult()),
                  v.grad(op.getInput()), v.grad(op.getWq()),
                  v.grad(op.getWk()), v.grad(op.getWv()), v.grad(op.getWo()),
                  v.grad(nth(norm, 0)), v.grad(nth(norm, 1)));
  }
};

/// softmax_topk has its own calls; noisy_topk passes the step's seed and
/// the micro-batch's first sample; the other kinds draw no noise, so
/// neither matters and moe_rt_gate takes the default seed.
template <> struct RuntimeCall<GateOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(GateOp op, V &v) {
    if (op.getKind() == GateKind::softmax_topk)
      return v.call(MOE_RT_FN(moe_rt_gate_topk), v.stream(),
                    v.i64(op.getTopK()), v.flag(op.getNormalize()),
                    v.in(op.getInput()), v.in(op.getWeight()),
                    v.out(op.getIndices()), v.out(op.getWeights()),
                    v.out(op.getCounts()));
    if (op.getKind() == GateKind::noisy_topk)
      return v.call(MOE_RT_FN(moe_rt_gate_at), v.stream(),
                    v.named(gateKind(op.getKind())), v.i64(op.getTopK()),
                    v.flag(op.getNormalize()), v.gateSeed(),
                    v.i64(op.getSampleOffsetOrZero()),
                    v.f64Text(op.getTauOrDefault()), v.in(op.getInput()),
                    v.in(op.getWeight()), v.in(op.getAuxWeight()),
                    v.out(op.getIndices()), v.out(op.getWeights()),
                    v.out(op.getCounts()));
    return v.call(MOE_RT_FN(moe_rt_gate), v.stream(),
                  v.named(gateKind(op.getKind())), v.i64(op.getTopK()),
                  v.flag(op.getNormalize()),
                  v.named(MOE_RT_NAMED(MOE_RT_GATE_NOISE_SEED)),
                  v.f64Text(op.getTauOrDefault()), v.in(op.getInput()),
                  v.in(op.getWeight()), v.in(op.getAuxWeight()),
                  v.out(op.getIndices()), v.out(op.getWeights()),
                  v.out(op.getCounts()));
  }
  template <class V> static LogicalResult backward(GateOp op, V &v) {
    if (op.getKind() == GateKind::softmax_topk)
      return v.call(MOE_RT_FN(moe_rt_gate_topk_grad), v.stream(),
                    v.i64(op.getTopK()), v.flag(op.getNormalize()),
                    v.in(op.getInput()), v.in(op.getWeight()),
                    v.cotangent(op.getWeights()), v.grad(op.getInput()),
                    v.grad(op.getWeight()));
    if (op.getKind() == GateKind::noisy_topk)
      return v.call(MOE_RT_FN(moe_rt_gate_grad_at), v.stream(),
                    v.named(gateKind(op.getKind())), v.i64(op.getTopK()),
                    v.flag(op.getNormalize()), v.gateSeed(),
                    v.i64(op.getSampleOffsetOrZero()),
                    v.f64Text(op.getTauOrDefault()), v.in(op.getInput()),
                    v.in(op.getWeight()), v.in(op.getAuxWeight()),
                    v.cotangent(op.getWeights()), v.grad(op.getInput()),
                    v.grad(op.getWeight()), v.grad(op.getAuxWeight()));
    return v.call(MOE_RT_FN(moe_rt_gate_grad), v.stream(),
                  v.named(gateKind(op.getKind())), v.i64(op.getTopK()),
                  v.flag(op.getNormalize()),
                  v.named(MOE_RT_NAMED(MOE_RT_GATE_NOISE_SEED)),
                  v.f64Text(op.getTauOrDefault()), v.in(op.getInput()),
                  v.in(op.getWeight()), v.in(op.getAuxWeight()),
                  v.cotangent(op.getWeights()), v.grad(op.getInput()),
                  v.grad(op.getWeight()), v.grad(op.getAuxWeight()));
  }
};

/// moe.expert and moe.shared_expert: one grouped-FFN call (2-D weights make
/// the shared expert one expert of every token).
template <class OpT> struct ExpertCall {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  // Every slot of y and of dx, every weight gradient (empty rows: zeros).
  static constexpr bool writesResults = true;
  static constexpr bool writesGradients = true;
  template <class V> static LogicalResult forward(OpT op, V &v) {
    if constexpr (std::is_same_v<OpT, ExpertOp>)
      if (op.getRows())
        return variableForward(op, v);
    return v.call(MOE_RT_FN(moe_rt_expert), v.stream(),
                  v.named(activation(op.getActivation())),
                  v.in(op.getInput()), v.in(op.getUp()),
                  v.in(op.getGateProj()), v.in(op.getDown()),
                  v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(OpT op, V &v) {
    if constexpr (std::is_same_v<OpT, ExpertOp>)
      if (op.getRows())
        return variableBackward(op, v);
    return v.call(MOE_RT_FN(moe_rt_expert_grad), v.stream(),
                  v.named(activation(op.getActivation())),
                  v.in(op.getInput()), v.in(op.getUp()),
                  v.in(op.getGateProj()), v.in(op.getDown()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getUp()), v.grad(op.getGateProj()),
                  v.grad(op.getDown()));
  }
  /// Variable-count (dropless) experts: only the filled rows of each.
  template <class V> static LogicalResult variableForward(OpT op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_expert_v), v.stream(),
                  v.named(activation(op.getActivation())), v.in(op.getRows()),
                  v.in(op.getInput()), v.in(op.getUp()),
                  v.in(op.getGateProj()), v.in(op.getDown()),
                  v.out(op.getResult()));
  }
  template <class V> static LogicalResult variableBackward(OpT op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_expert_v_grad), v.stream(),
                  v.named(activation(op.getActivation())), v.in(op.getRows()),
                  v.in(op.getInput()), v.in(op.getUp()),
                  v.in(op.getGateProj()), v.in(op.getDown()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getUp()), v.grad(op.getGateProj()),
                  v.grad(op.getDown()));
  }
};
template <> struct RuntimeCall<ExpertOp> : ExpertCall<ExpertOp> {};
template <> struct RuntimeCall<SharedExpertOp> : ExpertCall<SharedExpertOp> {};

template <> struct RuntimeCall<SigmoidGateOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(SigmoidGateOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_sigmoid_gate), v.stream(),
                  v.in(op.getInput()), v.in(op.getWeight()),
                  v.in(op.getValue()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(SigmoidGateOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_sigmoid_gate_grad), v.stream(),
                  v.in(op.getInput()), v.in(op.getWeight()),
                  v.in(op.getValue()), v.cotangent(op.getResult()),
                  v.grad(op.getInput()), v.grad(op.getWeight()),
                  v.grad(op.getValue()));
  }
};

/// Dispatch and combine queue their layout kernels around the group's
/// all-to-all; they need a capacity, or the variable-count form
/// (moe-variable-dropless: `rows`), whose calls exchange counts and
/// all-to-all-v only the routed rows.
template <class V, class OpT>
FailureOr<RoutingShape> cappedRouting(OpT op, V &v) {
  RoutingShape shape = *routingShape(op);
  if (!shape.capacity) {
    (void)v.unsupported("dropless routing needs moe-variable-dropless (or "
                        "moe-bound-dropless) before it has a runtime call");
    return failure();
  }
  return shape;
}

template <> struct RuntimeCall<DispatchOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(DispatchOp op, V &v) {
    if (op.isVariable() && op.getPart())
      return v.call(MOE_RT_FN(moe_rt_dispatch_v_part), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.i64(blockIndexOf(op)),
                    v.i64((*op.getPart())[0]), v.i64((*op.getPart())[1]),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getAllCounts()),
                    v.out(op.getResult()), v.out(op.getRows()));
    if (op.isVariable())
      return v.call(MOE_RT_FN(moe_rt_dispatch_v), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.i64(blockIndexOf(op)),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.out(op.getResult()),
                    v.out(op.getRows()));
    FailureOr<RoutingShape> r = cappedRouting(op, v);
    if (failed(r))
      return failure();
    if (r->isWindow())
      return v.call(MOE_RT_FN(moe_rt_dispatch_slots), v.stream(), v.comm(op),
                    v.i64(r->experts), v.i64(*r->capacity),
                    v.i64(r->firstSlot), v.i64(*r->slotCount),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.out(op.getResult()));
    return v.call(MOE_RT_FN(moe_rt_dispatch), v.stream(), v.comm(op),
                  v.i64(r->experts), v.i64(*r->capacity), v.in(op.getInput()),
                  v.in(op.getIndices()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(DispatchOp op, V &v) {
    if (op.isVariable() && op.getPart())
      return v.call(MOE_RT_FN(moe_rt_dispatch_v_part_grad), v.stream(),
                    v.comm(op), v.i64(op.getNumExperts()),
                    v.i64(blockIndexOf(op)), v.i64((*op.getPart())[0]),
                    v.i64((*op.getPart())[1]), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getAllCounts()),
                    v.cotangent(op.getResult()), v.grad(op.getInput()));
    if (op.isVariable())
      return v.call(MOE_RT_FN(moe_rt_dispatch_v_grad), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.i64(blockIndexOf(op)),
                    v.in(op.getIndices()), v.in(op.getExpertSlots()),
                    v.cotangent(op.getResult()), v.grad(op.getInput()));
    FailureOr<RoutingShape> r = cappedRouting(op, v);
    if (failed(r))
      return failure();
    if (r->isWindow())
      return v.call(MOE_RT_FN(moe_rt_dispatch_slots_grad), v.stream(),
                    v.comm(op), v.i64(r->experts), v.i64(*r->capacity),
                    v.i64(r->firstSlot), v.i64(*r->slotCount),
                    v.in(op.getIndices()), v.cotangent(op.getResult()),
                    v.grad(op.getInput()));
    return v.call(MOE_RT_FN(moe_rt_dispatch_grad), v.stream(), v.comm(op),
                  v.i64(r->experts), v.i64(*r->capacity),
                  v.in(op.getIndices()), v.cotangent(op.getResult()),
                  v.grad(op.getInput()));
  }
};

template <> struct RuntimeCall<CombineOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(CombineOp op, V &v) {
    if (op.getRows() && op.getPlacement())
      return v.call(MOE_RT_FN(moe_rt_combine_v_place), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.in(op.getRows()),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getWeights()),
                    v.in(op.getResidual()), v.in(op.getPlacement()),
                    v.out(op.getResult()));
    if (op.getRows() && op.getPart())
      return v.call(MOE_RT_FN(moe_rt_combine_v_part), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.i64((*op.getPart())[0]),
                    v.i64((*op.getPart())[1]), v.in(op.getRows()),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getWeights()),
                    v.out(op.getResult()));
    if (op.getRows())
      return v.call(MOE_RT_FN(moe_rt_combine_v), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.in(op.getRows()),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getWeights()),
                    v.out(op.getResult()));
    FailureOr<RoutingShape> r = cappedRouting(op, v);
    if (failed(r))
      return failure();
    if (r->isWindow())
      return v.call(MOE_RT_FN(moe_rt_combine_slots), v.stream(), v.comm(op),
                    v.i64(r->experts), v.i64(*r->capacity),
                    v.i64(r->firstSlot), v.i64(*r->slotCount),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getWeights()), v.out(op.getResult()));
    return v.call(MOE_RT_FN(moe_rt_combine), v.stream(), v.comm(op),
                  v.i64(r->experts), v.i64(*r->capacity), v.in(op.getInput()),
                  v.in(op.getIndices()), v.in(op.getWeights()),
                  v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(CombineOp op, V &v) {
    if (op.getRows() && op.getPlacement())
      return v.call(MOE_RT_FN(moe_rt_combine_v_place_grad), v.stream(),
                    v.comm(op), v.i64(op.getNumExperts()), v.in(op.getRows()),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getWeights()),
                    v.in(op.getResidual()), v.in(op.getPlacement()),
                    v.cotangent(op.getResult()), v.grad(op.getInput()),
                    v.grad(op.getWeights()), v.grad(op.getResidual()));
    if (op.getRows() && op.getPart())
      return v.call(MOE_RT_FN(moe_rt_combine_v_part_grad), v.stream(),
                    v.comm(op), v.i64(op.getNumExperts()),
                    v.i64((*op.getPart())[0]), v.i64((*op.getPart())[1]),
                    v.in(op.getRows()), v.in(op.getInput()),
                    v.in(op.getIndices()), v.in(op.getExpertSlots()),
                    v.in(op.getWeights()), v.cotangent(op.getResult()),
                    v.grad(op.getInput()), v.grad(op.getWeights()));
    if (op.getRows())
      return v.call(MOE_RT_FN(moe_rt_combine_v_grad), v.stream(), v.comm(op),
                    v.i64(op.getNumExperts()), v.in(op.getRows()),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getExpertSlots()), v.in(op.getWeights()),
                    v.cotangent(op.getResult()), v.grad(op.getInput()),
                    v.grad(op.getWeights()));
    FailureOr<RoutingShape> r = cappedRouting(op, v);
    if (failed(r))
      return failure();
    if (r->isWindow())
      return v.call(MOE_RT_FN(moe_rt_combine_slots_grad), v.stream(),
                    v.comm(op), v.i64(r->experts), v.i64(*r->capacity),
                    v.i64(r->firstSlot), v.i64(*r->slotCount),
                    v.in(op.getInput()), v.in(op.getIndices()),
                    v.in(op.getWeights()), v.cotangent(op.getResult()),
                    v.grad(op.getInput()), v.grad(op.getWeights()));
    return v.call(MOE_RT_FN(moe_rt_combine_grad), v.stream(), v.comm(op),
                  v.i64(r->experts), v.i64(*r->capacity), v.in(op.getInput()),
                  v.in(op.getIndices()), v.in(op.getWeights()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()),
                  v.grad(op.getWeights()));
  }
};

/// Routing statistics: this rank's per-sample counts, all-gathered, and
/// handed to the step's routing log as (block, micro) of the op's task.
template <> struct RuntimeCall<RoutingCountsOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(RoutingCountsOp op, V &v) {
    auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
    auto [nodes, perNode] = op.getNodeGrid();
    return v.call(MOE_RT_FN(moe_rt_routing_counts), v.stream(), v.comm(op),
                  v.routingLog(),
                  v.aggregate(MOE_RT_STRUCT(moe_rt_routing_site),
                              v.i64(task ? task.getBlock() : -1),
                              v.i64(task ? task.getMicro() : 0),
                              v.i64(op.getNumExperts()), v.i64(nodes),
                              v.i64(perNode)),
                  v.in(op.getIndices()), v.out(op.getResult()));
  }
};

/// One counts exchange per chunked variable-count layer: its dispatch
/// chunks (forward and vjp) read it as `all_counts`.
template <> struct RuntimeCall<ExchangeCountsOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(ExchangeCountsOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_exchange_counts), v.stream(), v.comm(op),
                  v.i64(op.getNumExperts()), v.i64(blockIndexOf(op)),
                  v.in(op.getIndices()), v.out(op.getResult()));
  }
};

/// NetMoE's planner, a host planner: it solves inline on its host stream
/// (whose thread is the planner's), started and joined by the schedule's
/// events; every rank solves the same problem from the gathered counts.
template <> struct RuntimeCall<PlanPlacementOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::host;
  template <class V> static LogicalResult forward(PlanPlacementOp op, V &v) {
    auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
    auto [nodes, perNode] = nodeGridOf(op, op.getGridAttr(), op.getAxes());
    return v.call(MOE_RT_FN(moe_rt_plan_placement), v.stream(),
                  v.i64(op.getNumExperts()), v.i64(nodes), v.i64(perNode),
                  v.i64(task ? task.getBlock() : -1),
                  v.i64(task ? task.getMicro() : 0),
                  v.i64(op.getIdentity() ? 1 : op.getGatherOnly() ? 2 : 0),
                  v.in(op.getCounts()), v.out(op.getResult()));
  }
};

/// What follows a sample (labels) moves with it.
template <> struct RuntimeCall<MoveSamplesOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(MoveSamplesOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_move_samples), v.stream(), v.comm(op),
                  v.in(op.getPlacement()), v.in(op.getInput()),
                  v.out(op.getResult()));
  }
};

/// One call per gradient, on the pool's low-priority queue (FlowMoE:
/// all-reduce chunks yield to the all-to-alls); `bytes [offset, size]`
/// makes it an S_p chunk, size -1 the whole tensor.
template <> struct RuntimeCall<AllReduceOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(AllReduceOp op, V &v) {
    int64_t offset = 0, size = -1;
    if (auto bytes = op.getBytes()) {
      offset = (*bytes)[0];
      size = (*bytes)[1];
    }
    // Several tensors: one collective of them packed (the cost model's one
    // alpha per task), not one each.
    bool group = op.getInputs().size() > 1;
    if (group &&
        failed(v.call(MOE_RT_FN(moe_rt_all_reduce_group_begin), v.stream())))
      return failure();
    for (auto [src, dst] : llvm::zip(op.getInputs(), op.getResults()))
      if (failed(v.call(MOE_RT_FN(moe_rt_all_reduce_into), v.stream(),
                        v.comm(op), v.in(src), v.out(dst), v.i64(offset),
                        v.i64(size))))
        return failure();
    if (group &&
        failed(v.call(MOE_RT_FN(moe_rt_all_reduce_group_end), v.stream())))
      return failure();
    return success();
  }
};

template <> struct RuntimeCall<SgdOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  static constexpr bool writesResults = true;
  template <class V> static LogicalResult forward(SgdOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_sgd), v.stream(), v.in(op.getParam()),
                  v.in(op.getGrad()), v.f64(op.getLr().convertToDouble()),
                  v.out(op.getResult()));
  }
};

/// Token chunks re-cut (moe.slot_window): for every local expert l and
/// source rank g, the slots an input shares with the window, one copy each
/// (buffers are l-major, then g, then slot, then M).
template <> struct RuntimeCall<SlotWindowOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(SlotWindowOp op, V &v) {
    auto result = cast<ShapedType>(op.getResult().getType());
    int64_t locals = result.getDimSize(0), m = result.getDimSize(2);
    int64_t groups = op.getGroups(), first = op.getWindow()[0],
            count = op.getWindow()[1], start = op.getFrom();
    for (Value input : op.getInputs()) {
      int64_t width = op.slotsOf(input);
      int64_t lo = std::max(first, start),
              hi = std::min(first + count, start + width);
      for (int64_t l = 0; lo < hi && l < locals; ++l)
        for (int64_t g = 0; g < groups; ++g)
          if (failed(v.call(
                  MOE_RT_FN(moe_rt_copy), v.stream(), v.in(input),
                  v.i64(((l * groups + g) * width + lo - start) * m),
                  v.out(op.getResult()),
                  v.i64(((l * groups + g) * count + lo - first) * m),
                  v.i64((hi - lo) * m))))
            return failure();
      start += width;
    }
    return success();
  }
};

/// Variable-count token chunks re-cut (moe.rows_window): the result's rows
/// first hold the sum of the inputs' (every (local expert, source rank)'s
/// whole count), each forward chunk then copies the rows it shares with
/// the window, and the rows become the window's own.
template <> struct RuntimeCall<RowsWindowOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(RowsWindowOp op, V &v) {
    int64_t part = op.getPart()[0], parts = op.getPart()[1],
            fromParts = op.getInputs().size();
    for (auto [j, rows] : llvm::enumerate(op.getInputRows()))
      if (failed(v.call(MOE_RT_FN(moe_rt_rows_sum), v.stream(), v.in(rows),
                        v.out(op.getRows()), v.i64(j > 0))))
        return failure();
    for (auto [j, chunk] : llvm::enumerate(op.getInputs()))
      if (failed(v.call(MOE_RT_FN(moe_rt_rows_window), v.stream(),
                        v.i64(int64_t(j)), v.i64(fromParts), v.i64(part),
                        v.i64(parts), v.out(op.getRows()),
                        v.in(op.getInputRows()[j]), v.in(chunk),
                        v.out(op.getResult()))))
        return failure();
    return v.call(MOE_RT_FN(moe_rt_rows_part), v.stream(), v.i64(part),
                  v.i64(parts), v.out(op.getRows()));
  }
};

/// Optimizers and clipping (docs/optimizers.md): the step inputs (lr,
/// step) and the clip coefficient are tensors the runtime reads when the
/// update runs; an absent scale is NULL.
template <> struct RuntimeCall<AdamWOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(AdamWOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_adamw), v.stream(),
                  v.f64Text(op.getBeta1().convertToDouble()),
                  v.f64Text(op.getBeta2().convertToDouble()),
                  v.f64Text(op.getEps().convertToDouble()),
                  v.f64Text(op.getWeightDecay().convertToDouble()),
                  v.in(op.getLr()), v.in(op.getStep()), v.in(op.getScale()),
                  v.in(op.getParam()), v.in(op.getGrad()),
                  v.in(op.getExpAvg()), v.in(op.getExpAvgSq()),
                  v.out(op.getNewParam()), v.out(op.getNewExpAvg()),
                  v.out(op.getNewExpAvgSq()));
  }
};

template <> struct RuntimeCall<SgdMomentumOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(SgdMomentumOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_sgd_momentum), v.stream(),
                  v.f64Text(op.getMomentum().convertToDouble()),
                  v.f64Text(op.getWeightDecay().convertToDouble()),
                  v.in(op.getLr()), v.in(op.getScale()), v.in(op.getParam()),
                  v.in(op.getGrad()), v.in(op.getBuffer()),
                  v.out(op.getNewParam()), v.out(op.getNewBuffer()));
  }
};

/// One call per input, the first overwriting the result.
template <> struct RuntimeCall<SumSquaresOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(SumSquaresOp op, V &v) {
    for (auto [i, input] : llvm::enumerate(op.getInputs()))
      if (failed(v.call(MOE_RT_FN(moe_rt_sum_squares), v.stream(),
                        v.in(input), v.flag(i > 0), v.out(op.getResult()))))
        return failure();
    return success();
  }
};

template <> struct RuntimeCall<ClipCoefOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(ClipCoefOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_clip_coef), v.stream(), v.in(op.getSumSq()),
                  v.f64Text(op.getMaxNorm().convertToDouble()),
                  v.out(op.getResult()));
  }
};

/// Micro-batches: each part is the next contiguous run of the whole's
/// elements.
template <> struct RuntimeCall<SplitOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(SplitOp op, V &v) {
    int64_t offset = 0;
    for (Value part : op.getResults()) {
      if (failed(v.call(MOE_RT_FN(moe_rt_copy), v.stream(),
                        v.in(op.getInput()), v.i64(offset), v.out(part),
                        v.i64(0), v.i64(numElements(part)))))
        return failure();
      offset += numElements(part);
    }
    return success();
  }
};

template <> struct RuntimeCall<MergeOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  template <class V> static LogicalResult forward(MergeOp op, V &v) {
    int64_t offset = 0;
    for (Value part : op.getInputs()) {
      if (failed(v.call(MOE_RT_FN(moe_rt_copy), v.stream(), v.in(part),
                        v.i64(0), v.out(op.getResult()), v.i64(offset),
                        v.i64(numElements(part)))))
        return failure();
      offset += numElements(part);
    }
    return success();
  }
};

/// Residual adds (upstream arith.addf on tensors).
template <> struct RuntimeCall<arith::AddFOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::compute;
  static constexpr bool writesResults = true;
  template <class V> static LogicalResult forward(arith::AddFOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_add), v.stream(), v.in(op.getLhs()),
                  v.in(op.getRhs()), v.out(op.getResult()));
  }
};

/// Expert sharding's collectives (upstream shard ops; moe-expert-sharding):
/// along their axis over the group of `grid_axes`, on the intra-node
/// communication stream. No backward: moe-build-train-step emits each one's
/// adjoint as the other collective.
template <> struct RuntimeCall<shard::AllGatherOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(shard::AllGatherOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_all_gather_axis), v.stream(),
                  v.comm(cast<CollectiveOpInterface>(op.getOperation())),
                  v.i64(op.getGatherAxis().getSExtValue()),
                  v.in(op.getInput()), v.out(op.getResult()));
  }
};

template <> struct RuntimeCall<shard::ReduceScatterOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V>
  static LogicalResult forward(shard::ReduceScatterOp op, V &v) {
    if (op.getReduction() != shard::ReductionKind::Sum)
      return v.unsupported("moe_rt reduces only by sum");
    return v.call(MOE_RT_FN(moe_rt_reduce_scatter_axis), v.stream(),
                  v.comm(cast<CollectiveOpInterface>(op.getOperation())),
                  v.i64(op.getScatterAxis().getSExtValue()),
                  v.in(op.getInput()), v.out(op.getResult()));
  }
};

/// Their variable-count forms (moe-expert-sharding on a dropless layer):
/// an all-gather-v and a reduce-scatter-v of each local expert's filled
/// rows, each the other's vjp.
template <> struct RuntimeCall<GatherRowsOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(GatherRowsOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_gather_rows), v.stream(), v.comm(op),
                  v.i64(blockIndexOf(op)), v.in(op.getInput()),
                  v.in(op.getRows()), v.out(op.getResult()),
                  v.out(op.getGatheredRows()));
  }
  template <class V> static LogicalResult backward(GatherRowsOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_gather_rows_grad), v.stream(), v.comm(op),
                  v.i64(blockIndexOf(op)), v.in(op.getRows()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()));
  }
};

template <> struct RuntimeCall<ScatterRowsOp> {
  static constexpr bool exists = true;
  static constexpr StreamClass stream = StreamClass::comm;
  template <class V> static LogicalResult forward(ScatterRowsOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_scatter_rows), v.stream(), v.comm(op),
                  v.i64(blockIndexOf(op)), v.in(op.getRows()),
                  v.in(op.getInput()), v.out(op.getResult()));
  }
  template <class V> static LogicalResult backward(ScatterRowsOp op, V &v) {
    return v.call(MOE_RT_FN(moe_rt_scatter_rows_grad), v.stream(), v.comm(op),
                  v.i64(blockIndexOf(op)), v.in(op.getRows()),
                  v.cotangent(op.getResult()), v.grad(op.getInput()));
  }
};

//===----------------------------------------------------------------------===//
// Looking an op up
//===----------------------------------------------------------------------===//

template <class... Ops> struct OpList {};

/// Every op the table may hold an entry for: the moe dialect's (all of
/// them, so that a new op needs nothing but its entry) and the upstream
/// ops a step issues.
using TableOps = OpList<
#define GET_OP_LIST
#include "moe/Dialect/Moe/MoeOps.cpp.inc"
    , arith::AddFOp, shard::AllGatherOp, shard::ReduceScatterOp>;

/// Whether entry E has a backward for OpT (any visitor type will do: a
/// backward is a template over it).
struct AnyVisitor;
template <class E, class OpT, class = void>
struct HasBackward : std::false_type {};
template <class E, class OpT>
struct HasBackward<E, OpT,
                   std::void_t<decltype(E::backward(
                       std::declval<OpT>(), std::declval<AnyVisitor &>()))>>
    : std::true_type {};

/// An entry's writesResults / writesGradients, false when it has none.
template <class E, class = void> struct WritesResults : std::false_type {};
template <class E>
struct WritesResults<E, std::void_t<decltype(E::writesResults)>>
    : std::bool_constant<E::writesResults> {};
template <class E, class = void> struct WritesGradients : std::false_type {};
template <class E>
struct WritesGradients<E, std::void_t<decltype(E::writesGradients)>>
    : std::bool_constant<E::writesGradients> {};

template <class T> struct Tag {
  using type = T;
};

/// What the table says about an op: whether it has an entry, whether the
/// entry has a backward, and its stream class.
struct Lookup {
  bool found = false;
  bool differentiable = false;
  StreamClass stream = StreamClass::compute;
};

/// Calls `fn(Entry(), typedOp)` with the entry of `op`'s type, if any;
/// returns what the table knows about the op.
template <class Fn, class... Ops>
Lookup withEntry(OpList<Ops...>, Operation *op, Fn &&fn) {
  Lookup result;
  auto tryOne = [&](auto tag) {
    using OpT = typename decltype(tag)::type;
    using Entry = RuntimeCall<OpT>;
    if constexpr (Entry::exists) {
      if (auto typed = dyn_cast<OpT>(op)) {
        result.found = true;
        result.stream = Entry::stream;
        result.differentiable = HasBackward<Entry, OpT>::value;
        fn(Entry(), typed);
        return true;
      }
    }
    return false;
  };
  (void)(tryOne(Tag<Ops>()) || ...);
  return result;
}

/// Issues (through `v`) the runtime calls of one step op: its entry's
/// forward calls, or for a moe.vjp its body op's backward calls. Reports
/// an op the table has no call for through v.unsupported.
template <class V> LogicalResult issueRuntimeCalls(Operation *op, V &v) {
  auto vjp = dyn_cast<VjpOp>(op);
  Operation *described = vjp ? vjp.getForwardOp() : op;
  if (!described)
    return v.unsupported("a moe.vjp without a body op");
  LogicalResult status = failure();
  Lookup found = withEntry(TableOps(), described, [&](auto entry,
                                                      auto typed) {
    using Entry = decltype(entry);
    if (!vjp)
      status = Entry::forward(typed, v);
    else if constexpr (HasBackward<Entry, decltype(typed)>::value)
      status = Entry::backward(typed, v);
  });
  if (!found.found)
    return v.unsupported("moe_rt/ops.h has no call for it (no entry in "
                         "include/moe/Target/RuntimeCalls.h)");
  if (vjp && !found.differentiable)
    return v.unsupported("moe_rt/ops.h has no backward call for it (its "
                         "entry in include/moe/Target/RuntimeCalls.h has no "
                         "backward)");
  return status;
}

//===----------------------------------------------------------------------===//
// The step's values an entry names (RuntimeCalls.cpp)
//===----------------------------------------------------------------------===//

/// Maps the values an entry names — the operands and results of the op it
/// describes, which for a vjp is the copy in its body — to the step's
/// values: a vjp's primals, cotangents and gradients.
class StepValues {
public:
  explicit StepValues(Operation *stepOp);

  /// The step's op (a forward op, or the moe.vjp).
  Operation *stepOp() const { return op; }
  /// The op whose entry describes the calls (the vjp's body op).
  Operation *described() const { return body; }
  bool isBackward() const { return static_cast<bool>(vjp); }

  /// Operand `v` of the described op; null for null.
  Value in(Value v) const;
  /// Result `v` of a forward op.
  Value out(Value v) const;
  /// A vjp's cotangent of result `v`.
  Value cotangent(Value v) const;
  /// A vjp's gradient of operand `v`; null for null.
  Value grad(Value v) const;

private:
  Operation *op, *body;
  /// Op handles are values; their accessors are not const.
  mutable VjpOp vjp;
};

/// The stream class the table gives `op` (a vjp: its body op's), or none
/// if it has no entry.
std::optional<StreamClass> streamClassOf(Operation *op);

/// Whether the calls of `op` (a forward op, or a moe.vjp: its gradients)
/// write every element of its results on a CPU stream, so that the step
/// need not zero their buffers first (the entry's writesResults /
/// writesGradients).
bool writesWholeResults(Operation *op);

/// The names of the ops that have an entry, and of those whose entry has a
/// backward (test/unittests/RuntimeCallsTest.cpp checks them against the
/// dialect).
std::vector<StringRef> opsWithRuntimeCall();
std::vector<StringRef> opsWithBackwardCall();

/// The moe ops that need no entry, with the reason: structure the issuers
/// walk (moe.block, moe.yield), moe.vjp (its body op's entry), and the
/// event ops, which each issuer maps to its own stream calls.
ArrayRef<std::pair<StringRef, StringRef>> opsWithoutRuntimeCall();

} // namespace mlir::moe::target

#endif // MOE_TARGET_RUNTIMECALLS_H
