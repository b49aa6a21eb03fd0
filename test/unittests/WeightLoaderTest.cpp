//===- WeightLoaderTest.cpp - moe.source values on known answers ----------===//
//
// Writes a small ONNX file (inline, typed, float16 and external data), then
// checks that WeightLoader applies slice, transpose, stacking, expert
// selection and scale exactly as docs/frontend/builder.md says, and that
// every mismatch is an error rather than wrong values.
//
//===----------------------------------------------------------------------===//

#include "WeightLoader.h"

#include "moe/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

using namespace mlir;
using namespace mlir::moe::frontend;
using mlir::moe::SourceAttr;

namespace {

/// A rows x cols float tensor with value 100*i + j at (i, j) (+ base).
void addMatrix(onnx::GraphProto &g, const std::string &name, int rows,
               int cols, float base = 0, bool raw = true) {
  auto *t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(rows);
  t->add_dims(cols);
  std::vector<float> v;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      v.push_back(base + 100 * i + j);
  if (raw)
    t->set_raw_data(std::string(reinterpret_cast<char *>(v.data()),
                                v.size() * 4));
  else
    for (float x : v)
      t->add_float_data(x);
}

class WeightLoaderTest : public ::testing::Test {
protected:
  void SetUp() override {
    ctx.loadDialect<mlir::moe::MoeDialect>();
    llvm::SmallString<128> dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("moe-weights", dir));
    tmp = std::string(dir);
    path = tmp + "/m.onnx";
    onnx::ModelProto m;
    auto *g = m.mutable_graph();
    addMatrix(*g, "w", 2, 3);                // [[0,1,2],[100,101,102]]
    addMatrix(*g, "typed", 2, 2, 0, false);  // float_data, not raw
    addMatrix(*g, "packed", 6, 2);           // Q, K, V rows 0-1, 2-3, 4-5
    for (int e = 0; e < 4; ++e)
      addMatrix(*g, "e" + std::to_string(e), 2, 3, 1000 * e);
    // float16: 1.0, -2.0, 0.5 (0x3c00, 0xc000, 0x3800).
    auto *h = g->add_initializer();
    h->set_name("half");
    h->set_data_type(onnx::TensorProto::FLOAT16);
    h->add_dims(3);
    uint16_t hv[3] = {0x3c00, 0xc000, 0x3800};
    h->set_raw_data(std::string(reinterpret_cast<char *>(hv), 6));
    // External data: 4 floats at offset 8 of ext.bin.
    auto *x = g->add_initializer();
    x->set_name("ext");
    x->set_data_type(onnx::TensorProto::FLOAT);
    x->add_dims(4);
    x->set_data_location(onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char *k, const std::string &v) {
      auto *e = x->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", "ext.bin");
    // A tensor whose shape claims 2^40 values but holds none, and one whose
    // external data points outside the model's directory.
    auto *huge = g->add_initializer();
    huge->set_name("huge");
    huge->set_data_type(onnx::TensorProto::FLOAT);
    huge->add_dims(int64_t(1) << 20);
    huge->add_dims(int64_t(1) << 20);
    auto *escape = g->add_initializer();
    escape->set_name("escape");
    escape->set_data_type(onnx::TensorProto::FLOAT);
    escape->add_dims(4);
    escape->set_data_location(onnx::TensorProto::EXTERNAL);
    auto *where = escape->add_external_data();
    where->set_key("location");
    where->set_value("../ext.bin");
    kv("offset", "8");
    kv("length", "16");
    float ext[6] = {-1, -1, 7, 8, 9, 10};
    std::ofstream(tmp + "/ext.bin", std::ios::binary)
        .write(reinterpret_cast<char *>(ext), sizeof(ext));
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&out));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(tmp); }

  /// A #moe.source; null (with its verifier's message in `refused`) when
  /// the attribute refuses the fields.
  SourceAttr source(std::vector<std::string> names, bool stacked = false,
                    bool transpose = false, std::vector<int64_t> slice = {},
                    double scale = 1) {
    Builder b(&ctx);
    std::vector<StringAttr> n;
    for (auto &s : names)
      n.push_back(b.getStringAttr(s));
    refused.clear();
    ScopedDiagnosticHandler keep(&ctx, [&](Diagnostic &d) {
      refused = d.str();
      return success();
    });
    return SourceAttr::getChecked(
        [&] { return emitError(UnknownLoc::get(&ctx)); }, &ctx,
        b.getStringAttr(path), ArrayRef<StringAttr>(n),
        scale != 1 ? b.getF64FloatAttr(scale) : FloatAttr(),
        ArrayRef<int64_t>(slice), stacked, transpose);
  }

  std::vector<float> load(SourceAttr s, std::vector<int64_t> shape,
                          int64_t first = 0) {
    auto v = loader.load(s, shape, first);
    if (!v) {
      ADD_FAILURE() << llvm::toString(v.takeError());
      return {};
    }
    return *v;
  }
  std::string error(SourceAttr s, std::vector<int64_t> shape,
                    int64_t first = 0) {
    auto v = loader.load(s, shape, first);
    if (v) {
      ADD_FAILURE() << "expected an error";
      return "";
    }
    return llvm::toString(v.takeError());
  }

  MLIRContext ctx;
  std::string refused;
  WeightLoader loader;
  std::string tmp, path;
};

using V = std::vector<float>;

TEST_F(WeightLoaderTest, WholeAndTransposed) {
  EXPECT_EQ(load(source({"w"}), {2, 3}), (V{0, 1, 2, 100, 101, 102}));
  EXPECT_EQ(load(source({"w"}, false, true), {3, 2}),
            (V{0, 100, 1, 101, 2, 102}));
  EXPECT_EQ(load(source({"typed"}), {2, 2}), (V{0, 1, 100, 101}));
}

TEST_F(WeightLoaderTest, SliceOfAPackedProjectionThenTranspose) {
  // K = rows 2..3 of packed (6x2), transposed to 2x2: [[200,300],[201,301]].
  EXPECT_EQ(load(source({"packed"}, false, true, {0, 2, 2}), {2, 2}),
            (V{200, 300, 201, 301}));
  // Columns: axis 1, column 1 only.
  EXPECT_EQ(load(source({"packed"}, false, false, {1, 1, 1}), {6, 1}),
            (V{1, 101, 201, 301, 401, 501}));
}

TEST_F(WeightLoaderTest, StackedExpertsPickThisRanksShare) {
  auto s = source({"e0", "e1", "e2", "e3"}, true, true);
  // Rank holding experts 2 and 3, each transposed to 3x2.
  V want;
  for (int e = 2; e < 4; ++e)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i)
        want.push_back(1000 * e + 100 * i + j);
  EXPECT_EQ(load(s, {2, 3, 2}, 2), want);
  EXPECT_NE(error(s, {2, 3, 2}, 3).find("do not exist"), std::string::npos);
}

TEST_F(WeightLoaderTest, ScaleHalfAndExternalData) {
  EXPECT_EQ(load(source({"w"}, false, false, {}, 0.5), {2, 3}),
            (V{0, 0.5, 1, 50, 50.5, 51}));
  EXPECT_EQ(load(source({"half"}), {3}), (V{1, -2, 0.5}));
  EXPECT_EQ(load(source({"ext"}), {4}), (V{7, 8, 9, 10}));
}

TEST_F(WeightLoaderTest, MismatchesAreErrorsNamingTheInitializer) {
  EXPECT_NE(error(source({"w"}), {3, 2}).find("2x3"), std::string::npos);
  EXPECT_NE(error(source({"nope"}), {1}).find("no initializer 'nope'"),
            std::string::npos);
  EXPECT_NE(error(source({"packed"}, false, false, {0, 5, 2}), {2, 2})
                .find("out of range"),
            std::string::npos);
  // Two initializers without `stacked` never reach the loader: the
  // attribute refuses them.
  EXPECT_FALSE(source({"w", "typed"}));
  EXPECT_NE(refused.find("not `stacked`"), std::string::npos) << refused;
  llvm::sys::fs::remove(tmp + "/ext.bin");
  WeightLoader fresh;
  auto v = fresh.load(source({"ext"}), {4});
  ASSERT_FALSE(static_cast<bool>(v));
  EXPECT_NE(llvm::toString(v.takeError()).find("shape-only"),
            std::string::npos);
}

TEST_F(WeightLoaderTest, ClaimedShapesAndLocationsAreCheckedBeforeUse) {
  // Checked against the data before allocating 4 TiB.
  EXPECT_NE(error(source({"huge"}), {int64_t(1) << 20, int64_t(1) << 20})
                .find("has 0 values for shape 1048576x1048576"),
            std::string::npos);
  // ONNX external data must be a relative path inside the model's directory.
  EXPECT_NE(error(source({"escape"}), {4}).find("without a usable location"),
            std::string::npos);
}

TEST_F(WeightLoaderTest, NotAModelIsAnError) {
  std::ofstream(path, std::ios::trunc) << "this is not a protobuf\x01\xff";
  WeightLoader fresh;
  auto v = fresh.load(source({"w"}), {2, 3});
  ASSERT_FALSE(static_cast<bool>(v));
  EXPECT_NE(llvm::toString(v.takeError()).find("not a valid ONNX model"),
            std::string::npos);
}

} // namespace
