//===- ModelAttrTest.cpp - #moe.model parsing, printing and capacity ------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>
#include <numeric>

using namespace mlir;
using namespace mlir::moe;

namespace {

class ModelAttrTest : public ::testing::Test {
protected:
  ModelAttrTest() { context.loadDialect<MoeDialect>(); }

  ModelAttr parse(StringRef text) {
    return dyn_cast_or_null<ModelAttr>(parseAttribute(text, &context));
  }
  std::string print(Attribute attr) {
    std::string out;
    llvm::raw_string_ostream os(out);
    attr.print(os);
    return out;
  }

  ModelAttr make(int64_t b, int64_t n, int64_t e, int64_t k, double f) {
    return ModelAttr::get(&context, /*layers=*/1, b, n, /*embed=*/8,
                          /*hidden=*/8, e, k, APFloat(f),
                          FlatSymbolRefAttr::get(&context, "g"), {0}, {0}, {});
  }

  MLIRContext context;
};

TEST_F(ModelAttrTest, RoundTripsThroughText) {
  const char *text =
      "#moe.model<layers = 12, batch = 4, seq = 256, embed = 256, "
      "hidden = 512, experts = 16, top_k = 2, capacity_factor = 1.2, "
      "grid = @cluster, ep_axes = [0, 1], dp_axes = [0, 1], "
      "intra_axes = [1]>";
  ModelAttr model = parse(text);
  ASSERT_TRUE(model);
  EXPECT_EQ(model.getLayers(), 12);
  EXPECT_EQ(model.getTopK(), 2);
  EXPECT_DOUBLE_EQ(model.getF(), 1.2);
  EXPECT_EQ(model.getIntraAxes().size(), 1u);
  EXPECT_EQ(print(model), text);
  EXPECT_EQ(parse(print(model)), model);
}

TEST_F(ModelAttrTest, DroplessHasNoCapacity) {
  ModelAttr model =
      parse("#moe.model<layers = 1, batch = 2, seq = 8, embed = 4, hidden = 8, "
            "experts = 4, top_k = 1, dropless, grid = @g, ep_axes = [0], "
            "dp_axes = [0], intra_axes = []>");
  ASSERT_TRUE(model);
  EXPECT_TRUE(model.isDropless());
  EXPECT_TRUE(ShapedType::isDynamic(model.getCapacity()));
  EXPECT_NE(print(model).find("dropless"), std::string::npos);
}

// FlowMoE Table 2: C = ceil(f*k*B*N/E) per expert per rank.
TEST_F(ModelAttrTest, CapacityOfFlowMoETable2Models) {
  // GPT2-Tiny-MoE on 16 GPUs (E/P = 1): 1.0*2*4*256/16 = 128.
  EXPECT_EQ(make(4, 256, 16, 2, 1.0).getCapacity(), 128);
  // BERT-Large-MoE on 16 GPUs (E/P = 2): 1.0*1*4*512/32 = 64.
  EXPECT_EQ(make(4, 512, 32, 1, 1.0).getCapacity(), 64);
  // DeepSeek-V2-S on 16 GPUs (E/P = 2, k = 8): 1.0*8*4*256/32 = 256.
  EXPECT_EQ(make(4, 256, 32, 8, 1.0).getCapacity(), 256);
}

// f values of the layer sweep (1.0, 1.1, 1.2) are not exact in binary; the
// capacity must still equal the exact rational ceiling. Brute force over
// small sizes against integer arithmetic: ceil(p*k*T / (q*E)) with f = p/q.
TEST_F(ModelAttrTest, CapacityMatchesExactRationalCeiling) {
  struct Factor {
    double value;
    int64_t p, q;
  } factors[] = {{1.0, 1, 1},  {1.1, 11, 10}, {1.2, 6, 5},
                 {1.25, 5, 4}, {2.0, 2, 1},   {0.5, 1, 2}};
  int checked = 0;
  for (const Factor &f : factors)
    for (int64_t b = 1; b <= 8; ++b)
      for (int64_t n : {1, 3, 10, 64, 100, 512})
        for (int64_t e : {1, 2, 3, 5, 8, 16, 64})
          for (int64_t k = 1; k <= std::min<int64_t>(e, 4); ++k) {
            int64_t num = f.p * k * b * n, den = f.q * e;
            int64_t exact = (num + den - 1) / den;
            ASSERT_EQ(make(b, n, e, k, f.value).getCapacity(), exact)
                << "f=" << f.value << " k=" << k << " B=" << b << " N=" << n
                << " E=" << e;
            ++checked;
          }
  EXPECT_GT(checked, 1000);
}

TEST_F(ModelAttrTest, RejectsInconsistentFields) {
  // Errors go to the context's diagnostic handler; silence them here.
  ScopedDiagnosticHandler silence(&context,
                                  [](Diagnostic &) { return success(); });
  EXPECT_FALSE(parse("#moe.model<layers = 1, batch = 2, seq = 8, embed = 4, "
                     "hidden = 8, experts = 2, top_k = 3, dropless, "
                     "grid = @g, ep_axes = [0], dp_axes = [0], "
                     "intra_axes = []>"));
  EXPECT_FALSE(parse("#moe.model<layers = 0, batch = 2, seq = 8, embed = 4, "
                     "hidden = 8, experts = 2, top_k = 1, dropless, "
                     "grid = @g, ep_axes = [0], dp_axes = [0], "
                     "intra_axes = []>"));
  EXPECT_FALSE(parse("#moe.model<layers = 1, batch = 2, seq = 8, embed = 4, "
                     "hidden = 8, experts = 2, top_k = 1, "
                     "capacity_factor = 0.0, grid = @g, ep_axes = [0], "
                     "dp_axes = [0], intra_axes = []>"));
  EXPECT_FALSE(parse("#moe.model<layers = 1, batch = 2, seq = 8, embed = 4, "
                     "hidden = 8, experts = 2, top_k = 1, dropless, "
                     "grid = @g, ep_axes = [0, 0], dp_axes = [0], "
                     "intra_axes = []>"));
}

} // namespace
