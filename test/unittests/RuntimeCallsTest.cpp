//===- RuntimeCallsTest.cpp - the op -> runtime-call table ----------------===//
//
// include/moe/Target/RuntimeCalls.h is the one place that says which
// moe_rt call an op makes. These tests hold it to the dialect: every moe op
// has an entry or a reason not to, the stream classes agree with the
// dialect's verifier, and a vjp's entry reads the vjp's own primals,
// cotangents and gradients (through a third visitor that records calls).
//
//===----------------------------------------------------------------------===//

#include "moe/Target/RuntimeCalls.h"

#include "moe/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <set>
#include <variant>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

namespace {

void loadDialects(MLIRContext &context) {
  context.loadDialect<MoeDialect, arith::ArithDialect, func::FuncDialect,
                      shard::ShardDialect, tensor::TensorDialect>();
}

// A new moe op must get an entry (or a stated reason for none): otherwise
// moe-run and generated code would both refuse it at run time.
TEST(RuntimeCalls, EveryMoeOpHasAnEntryOrAReason) {
  MLIRContext context;
  loadDialects(context);
  std::vector<StringRef> entries = opsWithRuntimeCall();
  std::set<StringRef> withEntry(entries.begin(), entries.end()), without;
  for (auto &[name, why] : opsWithoutRuntimeCall()) {
    EXPECT_FALSE(why.empty());
    EXPECT_FALSE(withEntry.count(name))
        << name.str() << " has an entry and a reason";
    without.insert(name);
  }
  std::set<StringRef> registered;
  for (RegisteredOperationName op : context.getRegisteredOperations()) {
    if (op.getDialectNamespace() != MoeDialect::getDialectNamespace())
      continue;
    registered.insert(op.getStringRef());
    EXPECT_TRUE(withEntry.count(op.getStringRef()) ||
                without.count(op.getStringRef()))
        << op.getStringRef().str()
        << " has no runtime-call entry (include/moe/Target/RuntimeCalls.h) "
           "and is not listed in opsWithoutRuntimeCall()";
  }
  for (StringRef name : without)
    EXPECT_TRUE(registered.count(name)) << name.str() << " is not a moe op";
  // Residual adds are upstream ops with an entry too.
  EXPECT_TRUE(withEntry.count("arith.addf"));
}

// Every op that the training-step pass differentiates has a backward call.
TEST(RuntimeCalls, DifferentiatedOpsHaveBackwardCalls) {
  std::vector<StringRef> backward = opsWithBackwardCall();
  std::set<StringRef> has(backward.begin(), backward.end());
  for (StringRef name :
       {"moe.embedding", "moe.position_embedding", "moe.norm", "moe.linear",
        "moe.cross_entropy", "moe.attention", "moe.gate", "moe.expert",
        "moe.shared_expert", "moe.dispatch", "moe.combine"})
    EXPECT_TRUE(has.count(name)) << name.str() << " has no backward call";
  for (StringRef name : {"moe.sgd", "moe.all_reduce", "moe.split",
                         "moe.merge", "arith.addf"})
    EXPECT_FALSE(has.count(name)) << name.str();
}

// The table's stream class is the one the dialect's verifier allows
// (isCommunicationTask, isHostPlanner), so a scheduled op's call queues
// where it must.
TEST(RuntimeCalls, StreamClassesAgreeWithTheDialect) {
  MLIRContext context;
  loadDialects(context);
  context.allowUnregisteredDialects();
  Location loc = UnknownLoc::get(&context);
  for (StringRef name : opsWithRuntimeCall()) {
    // A bare op is enough to ask its interfaces.
    OperationState state(loc, name);
    Operation *op = Operation::create(state);
    std::optional<StreamClass> cls = streamClassOf(op);
    ASSERT_TRUE(cls) << name.str();
    EXPECT_EQ(*cls == StreamClass::comm, isCommunicationTask(op))
        << name.str();
    EXPECT_EQ(*cls == StreamClass::host, isHostPlanner(op)) << name.str();
    op->destroy();
  }
}

/// The visitor of this test: records each call's callee and arguments,
/// with the C types the table's contract gives them.
template <class T> struct Recorded {
  std::variant<Value, std::string, int64_t, double> value;
};

struct Call {
  std::string callee;
  std::vector<std::variant<Value, std::string, int64_t, double>> args;
};

class Recorder {
public:
  explicit Recorder(Operation *op) : values(op) {}

  Recorded<moe_rt_stream> stream() { return {std::string("stream")}; }
  Recorded<moe_rt_comm> comm(CollectiveOpInterface c) {
    std::string axes;
    for (int16_t a : c.getAxes())
      axes += " " + std::to_string(a);
    return {"comm @" + c.getGridAttr().getValue().str() + axes};
  }
  Recorded<moe_rt_tensor *> in(Value v) { return tensor(values.in(v)); }
  Recorded<moe_rt_tensor *> out(Value v) { return tensor(values.out(v)); }
  Recorded<moe_rt_tensor *> cotangent(Value v) {
    return tensor(values.cotangent(v));
  }
  Recorded<moe_rt_tensor *> grad(Value v) { return tensor(values.grad(v)); }
  Recorded<int64_t> i64(int64_t x) { return {x}; }
  Recorded<int> flag(bool x) { return {int64_t(x)}; }
  Recorded<double> f64(double x) { return {x}; }
  Recorded<double> f64Text(double x) { return {x}; }
  template <class T> Recorded<T> named(Named<T> n) {
    return {std::string(n.name)};
  }
  Recorded<uint64_t> gateSeed() { return {std::string("seed")}; }
  Recorded<moe_rt_routing_log *> routingLog() { return {std::string("log")}; }
  template <class T, class... Fields>
  Recorded<const T *> aggregate(CStruct<T> s, Recorded<Fields>...) {
    return {std::string(s.name)};
  }
  template <class Sig, class Invoke, class... Args>
  LogicalResult call(RuntimeFn<Sig, Invoke> fn, Recorded<Args>... args) {
    static_assert(callableWith<Sig, Args...>);
    calls.push_back({fn.name, {args.value...}});
    return success();
  }
  LogicalResult unsupported(const Twine &why) {
    refused = why.str();
    return failure();
  }

  std::vector<Call> calls;
  std::string refused;

private:
  Recorded<moe_rt_tensor *> tensor(Value v) {
    if (!v)
      return {std::string("NULL")};
    return {v};
  }
  StepValues values;
};

/// The ops of @step, by their result names in the IR below.
const char *kStep = R"mlir(
shard.grid @grid(shape = 1x2)
func.func @step(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>,
                %i: tensor<2x8x2xi32>, %wt: tensor<2x8x2xf32>,
                %c: tensor<4xi32>, %e: tensor<2x16x16xf32>,
                %up: tensor<2x16x32xf32>, %down: tensor<2x32x16xf32>,
                %dy: tensor<2x8x16xf32>, %de: tensor<2x16x16xf32>) {
  %gi, %gw, %gc = moe.gate noisy_topk %x, %w aux(%w) experts = 4 top_k = 2 normalize sample_offset = 6 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  %y = moe.expert relu %e up(%up) down(%down) : (tensor<2x16x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x16x16xf32>
  %dx, %dup, %ddown = moe.vjp (%a = %e : tensor<2x16x16xf32>, %b = %up : tensor<2x16x32xf32>, %d = %down : tensor<2x32x16xf32>) cotangents(%de : tensor<2x16x16xf32>) -> (tensor<2x16x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) {
    %r = moe.expert relu %a up(%b) down(%d) : (tensor<2x16x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x16x16xf32>
    moe.yield %r : tensor<2x16x16xf32>
  }
  %dexp, %dwt = moe.vjp (%a = %e : tensor<2x16x16xf32>, %b = %i : tensor<2x8x2xi32>, %cw = %wt : tensor<2x8x2xf32>, %d = %c : tensor<4xi32>) cotangents(%dy : tensor<2x8x16xf32>) -> (tensor<2x16x16xf32>, tensor<2x8x2xf32>) {
    %o = moe.combine %a, %b, %cw, %d on @grid axes = [1] experts = 4 capacity = 8 : (tensor<2x16x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>) -> tensor<2x8x16xf32>
    moe.yield %o : tensor<2x8x16xf32>
  }
  %m = arith.mulf %x, %x : tensor<2x8x16xf32>
  %rc = moe.routing_counts %i on @grid axes = [1] experts = 4 {moe.task = #moe.task<D, fwd, block = 2, micro = 1>} : (tensor<2x8x2xi32>) -> tensor<4x4xi32>
  return
}
)mlir";

class RecordedCalls : public ::testing::Test {
protected:
  void SetUp() override {
    loadDialects(context);
    module = parseSourceString<ModuleOp>(kStep, &context);
    ASSERT_TRUE(module);
    auto func = cast<func::FuncOp>(module->lookupSymbol("step"));
    args.assign(func.getArguments().begin(), func.getArguments().end());
    for (Operation &op : func.getBody().front())
      ops.push_back(&op);
  }
  /// The calls of `op`, recorded.
  Recorder record(Operation *op) {
    Recorder r(op);
    (void)issueRuntimeCalls(op, r);
    return r;
  }
  Value arg(unsigned i) { return args[i]; }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  SmallVector<Value> args;
  SmallVector<Operation *> ops;
};

using Arg = std::variant<Value, std::string, int64_t, double>;

TEST_F(RecordedCalls, NoisyGatePassesTheStepSeedAndItsFirstSample) {
  Operation *gate = ops[0];
  Recorder r = record(gate);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].callee, "moe_rt_gate_at");
  std::vector<Arg> expected = {
      std::string("stream"), std::string("MOE_RT_GATE_NOISY_TOPK"),
      int64_t(2),            int64_t(1),
      std::string("seed"),   int64_t(6),
      0.07,                  arg(0),
      arg(1),                arg(1),
      gate->getResult(0),    gate->getResult(1),
      gate->getResult(2)};
  EXPECT_EQ(r.calls[0].args, expected);
}

TEST_F(RecordedCalls, AbsentOptionalOperandsAreNull) {
  Operation *expert = ops[1];
  Recorder r = record(expert);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].callee, "moe_rt_expert");
  std::vector<Arg> expected = {std::string("stream"),
                               std::string("MOE_RT_RELU"),
                               arg(5),
                               arg(6),
                               std::string("NULL"),
                               arg(7),
                               expert->getResult(0)};
  EXPECT_EQ(r.calls[0].args, expected);
}

// A vjp's call reads the vjp's primals and cotangents and writes its
// gradients — never the body op's block arguments.
TEST_F(RecordedCalls, VjpsReadPrimalsAndWriteGradients) {
  Operation *vjp = ops[2];
  Recorder r = record(vjp);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].callee, "moe_rt_expert_grad");
  std::vector<Arg> expected = {
      std::string("stream"), std::string("MOE_RT_RELU"), arg(5),
      arg(6),                std::string("NULL"),        arg(7),
      arg(9),                vjp->getResult(0),          vjp->getResult(1),
      std::string("NULL"),   vjp->getResult(2)};
  EXPECT_EQ(r.calls[0].args, expected);
}

// Integer operands get no gradient: combine's weights gradient is the
// vjp's second result although weights are the third operand.
TEST_F(RecordedCalls, GradientsSkipIntegerOperands) {
  Operation *vjp = ops[3];
  Recorder r = record(vjp);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].callee, "moe_rt_combine_grad");
  std::vector<Arg> expected = {
      std::string("stream"), std::string("comm @grid 1"),
      int64_t(4),            int64_t(8),
      arg(5),                arg(2),
      arg(3),                arg(8),
      vjp->getResult(0),     vjp->getResult(1)};
  EXPECT_EQ(r.calls[0].args, expected);
}

TEST_F(RecordedCalls, AnOpWithoutAnEntryIsRefused) {
  Recorder r = record(ops[4]);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_NE(r.refused.find("no call for it"), std::string::npos) << r.refused;
}

// Routing statistics hand their counts to the step's routing log, with
// the dispatch's (block, micro) and grid in a moe_rt_routing_site.
TEST_F(RecordedCalls, RoutingCountsGoToTheStepsLog) {
  Operation *counts = ops[5];
  Recorder r = record(counts);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].callee, "moe_rt_routing_counts");
  std::vector<Arg> expected = {std::string("stream"),
                               std::string("comm @grid 1"),
                               std::string("log"),
                               std::string("moe_rt_routing_site"),
                               arg(2),
                               counts->getResult(0)};
  EXPECT_EQ(r.calls[0].args, expected);
  auto [nodes, perNode] = cast<RoutingCountsOp>(counts).getNodeGrid();
  EXPECT_EQ(nodes, 1);
  EXPECT_EQ(perNode, 2);
}

} // namespace
