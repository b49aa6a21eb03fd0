//===- RuntimeCalls.cpp - the table's lookups that need no visitor --------===//
//
// The entries themselves are templates in include/moe/Target/RuntimeCalls.h;
// this file holds what does not depend on how the calls are issued: which
// step values an entry's accessors stand for, and which ops have entries.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/RuntimeCalls.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

StepValues::StepValues(Operation *stepOp) : op(stepOp), body(stepOp) {
  if ((vjp = dyn_cast<VjpOp>(stepOp)))
    body = vjp.getForwardOp();
}

/// The operand number of `v` in `op`.
static unsigned operandNumber(Operation *op, Value v) {
  for (OpOperand &operand : op->getOpOperands())
    if (operand.get() == v)
      return operand.getOperandNumber();
  llvm_unreachable("an entry named a value that is not an operand of its op");
}

static unsigned resultNumber(Operation *op, Value v) {
  auto result = dyn_cast<OpResult>(v);
  assert(result && result.getOwner() == op &&
         "an entry named a value that is not a result of its op");
  (void)op;
  return result.getResultNumber();
}

Value StepValues::in(Value v) const {
  if (!v || !vjp)
    return v;
  // The body op takes the body's arguments, in order (VjpOp::verify).
  return vjp.getPrimals()[operandNumber(body, v)];
}

Value StepValues::out(Value v) const {
  assert(!vjp && "a vjp's entry names gradients, not results");
  resultNumber(op, v);
  return v;
}

Value StepValues::cotangent(Value v) const {
  assert(vjp && "only a vjp has cotangents");
  return vjp.getCotangentOf(resultNumber(body, v));
}

Value StepValues::grad(Value v) const {
  assert(vjp && "only a vjp has gradients");
  if (!v)
    return v;
  return vjp.getGradientOf(operandNumber(body, v));
}

std::optional<StreamClass> target::streamClassOf(Operation *op) {
  if (auto vjp = dyn_cast<VjpOp>(op))
    op = vjp.getForwardOp();
  if (!op)
    return std::nullopt;
  Lookup found = withEntry(TableOps(), op, [](auto, auto) {});
  if (!found.found)
    return std::nullopt;
  return found.stream;
}

bool target::writesWholeResults(Operation *op) {
  auto vjp = dyn_cast<VjpOp>(op);
  Operation *described = vjp ? vjp.getForwardOp() : op;
  if (!described)
    return false;
  bool whole = false;
  withEntry(TableOps(), described, [&](auto entry, auto) {
    using Entry = decltype(entry);
    whole = vjp ? WritesGradients<Entry>::value : WritesResults<Entry>::value;
  });
  return whole;
}

template <class... Ops>
static std::vector<StringRef> namesOf(OpList<Ops...>, bool backwardOnly) {
  std::vector<StringRef> names;
  auto add = [&](auto tag) {
    using OpT = typename decltype(tag)::type;
    using Entry = RuntimeCall<OpT>;
    if constexpr (Entry::exists)
      if (!backwardOnly || HasBackward<Entry, OpT>::value)
        names.push_back(OpT::getOperationName());
  };
  (add(Tag<Ops>()), ...);
  return names;
}

std::vector<StringRef> target::opsWithRuntimeCall() {
  return namesOf(TableOps(), false);
}

std::vector<StringRef> target::opsWithBackwardCall() {
  return namesOf(TableOps(), true);
}

ArrayRef<std::pair<StringRef, StringRef>> target::opsWithoutRuntimeCall() {
  static const std::pair<StringRef, StringRef> ops[] = {
      {"moe.block", "structure: a scheduled step is flat, with no blocks"},
      {"moe.yield", "a terminator of a block or vjp body"},
      {"moe.vjp", "issues its body op's backward call"},
      {"moe.record_event", "stream plumbing, issued by each issuer itself "
                           "(moe_rt_event_record / moe_step_record)"},
      {"moe.wait_event", "stream plumbing, issued by each issuer itself "
                         "(moe_rt_stream_wait_event / moe_step_wait)"},
  };
  return ops;
}
