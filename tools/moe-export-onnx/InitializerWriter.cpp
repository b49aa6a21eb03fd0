//===- InitializerWriter.cpp - trained values back into ONNX initializers -===//

#include "InitializerWriter.h"

#include "WeightLoader.h"
#include "moe/Frontend/TensorData.h"
#include "moe_rt/params_file.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>

using namespace mlir;
using namespace mlir::moe::frontend;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// "4x64x32" (the parameter file's spelling; "-" for a scalar).
std::string dims(llvm::ArrayRef<int64_t> shape) {
  return moe_rt::params_file::formatShape(
      std::vector<int64_t>(shape.begin(), shape.end()));
}

int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// float32 -> IEEE half, rounding to nearest even (the inverse of the
/// loader's halfToFloat on every half value).
uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf, nan (kept a nan)
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u) // rounds past the largest half: inf
    return sign | 0x7c00u;
  if (absx < 0x38800000u) { // a half subnormal (or zero)
    float scaled = std::fabs(f) * 16777216.0f; // 2^24: units of 2^-24
    return sign | uint16_t(std::nearbyint(scaled));
  }
  uint32_t mant = absx & 0x7fffffu, exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h; // may carry into the exponent, as it should
  return sign | uint16_t(h);
}

/// float32 -> bfloat16, rounding to nearest even.
uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40u); // a quiet nan
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// `values` in the ONNX data type `dt` (float, double, float16, bfloat16),
/// little-endian, as raw_data holds them.
std::string encode(const std::vector<float> &values, int32_t dt) {
  std::string out;
  auto put = [&](const void *p, size_t n) {
    out.append(static_cast<const char *>(p), n);
  };
  for (float v : values) {
    if (dt == onnx::TensorProto::DOUBLE) {
      double d = v;
      put(&d, 8);
    } else if (dt == onnx::TensorProto::FLOAT16) {
      uint16_t h = floatToHalf(v);
      put(&h, 2);
    } else if (dt == onnx::TensorProto::BFLOAT16) {
      uint16_t h = floatToBf16(v);
      put(&h, 2);
    } else {
      put(&v, 4);
    }
  }
  return out;
}

/// Makes `t` hold `raw` inline (no typed fields, no external data).
void setInline(onnx::TensorProto &t, std::string raw) {
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::DEFAULT);
  t.set_raw_data(std::move(raw));
}

/// Undoes the loader's transpose of the last two dimensions: `values` are
/// [..., r, c] and become [..., c, r].
std::vector<float> transposeBack(llvm::ArrayRef<float> values,
                                 std::vector<int64_t> &shape) {
  size_t k = shape.size();
  int64_t rows = shape[k - 2], cols = shape[k - 1];
  int64_t batch = rows > 0 && cols > 0 ? int64_t(values.size()) / (rows * cols) : 0;
  std::vector<float> out(values.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out[b * rows * cols + j * rows + i] = values[b * rows * cols + i * cols + j];
  std::swap(shape[k - 2], shape[k - 1]);
  return out;
}

} // namespace

InitializerWriter::InitializerWriter(std::string path)
    : path(std::move(path)), model(std::make_unique<onnx::ModelProto>()) {}
InitializerWriter::~InitializerWriter() = default;

llvm::Expected<std::unique_ptr<InitializerWriter>>
InitializerWriter::open(const std::string &path) {
  std::unique_ptr<InitializerWriter> w(new InitializerWriter(path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail("cannot open '" + path + "'");
  if (!w->model->ParseFromIstream(&in))
    return fail("'" + path + "' is not a valid ONNX model");
  return std::move(w);
}

llvm::Expected<InitializerWriter::Edit *>
InitializerWriter::edit(llvm::StringRef name, llvm::StringRef param) {
  auto it = edits.find(name.str());
  if (it != edits.end())
    return &it->second;
  for (const onnx::TensorProto &t : model->graph().initializer()) {
    if (t.name() != name)
      continue;
    // Its current values: parts no parameter covers keep them.
    auto h = readTensor(t, llvm::sys::path::parent_path(path));
    if (!h)
      return fail("'" + path + "': " + llvm::toString(h.takeError()));
    Edit &e = edits[name.str()];
    e.shape = std::move(h->shape);
    e.values = std::move(h->values);
    e.writer.assign(e.values.size(), -1);
    return &e;
  }
  return fail("'" + path + "' has no initializer '" + name +
              "' (the source of parameter '" + param +
              "'): is it the file the step was imported from?");
}

llvm::Error InitializerWriter::store(llvm::StringRef param, SourceAttr source,
                                     llvm::ArrayRef<int64_t> shape,
                                     llvm::ArrayRef<float> values) {
  llvm::ArrayRef<StringAttr> names = source.getNames();
  bool stacked = source.getStacked();
  if (stacked && (shape.empty() || shape[0] != int64_t(names.size())))
    return fail("parameter '" + param + "' (" + dims(shape) +
                ") has a stacked source of " + std::to_string(names.size()) +
                " initializers: one per expert expected");
  if (!stacked && names.size() != 1)
    return fail("parameter '" + param + "' has " +
                std::to_string(names.size()) + " source initializers");
  // Scale: the loader multiplied by s.
  std::vector<float> all(values.begin(), values.end());
  double scale = source.getScaleOrOne();
  if (scale != 1.0)
    for (float &v : all)
      v = float(v / scale);
  int32_t writer = int32_t(params.size());
  params.push_back(param.str());
  std::vector<int64_t> part(shape.begin() + (stacked ? 1 : 0), shape.end());
  int64_t per = product(part);
  for (size_t n = 0; n < names.size(); ++n) {
    llvm::StringRef name = names[n].getValue();
    llvm::ArrayRef<float> block(all.data() + n * per, size_t(per));
    std::vector<int64_t> pshape = part;
    std::vector<float> pvalues = block.vec();
    if (source.getTranspose()) {
      if (pshape.size() < 2)
        return fail("parameter '" + param + "' transposes its source '" +
                    name + "' but has fewer than 2 dimensions");
      pvalues = transposeBack(block, pshape);
    }
    auto e = edit(name, param);
    if (!e)
      return e.takeError();
    // Where the part lies in the initializer: all of it, or a slice.
    int64_t axis = 0, begin = 0;
    std::vector<int64_t> expect = (*e)->shape;
    llvm::ArrayRef<int64_t> slice = source.getSlice();
    if (!slice.empty()) {
      axis = slice[0];
      begin = slice[1] + (slice.size() > 3 ? int64_t(n) * slice[3] : 0);
      if (axis < 0 || axis >= int64_t(expect.size()) ||
          begin + slice[2] > expect[axis])
        return fail("'" + path + "': initializer '" + name + "' (" +
                    dims(expect) + ") has no slice [" + std::to_string(axis) +
                    ", " + std::to_string(begin) + ", " +
                    std::to_string(slice[2]) + "] (the source of parameter '" +
                    param + "')");
      expect[axis] = slice[2];
    }
    if (pshape != expect)
      return fail("'" + path + "': initializer '" + name + "' is " +
                  dims((*e)->shape) + "; parameter '" + param + "' gives " +
                  dims(pshape) +
                  (source.getTranspose() ? " after transposing back" : "") +
                  (slice.empty() ? "" : " for its slice") +
                  ": the ONNX file is not the one the step was imported from");
    int64_t outer = product(llvm::ArrayRef<int64_t>(expect).take_front(axis));
    int64_t inner = product(llvm::ArrayRef<int64_t>(expect).drop_front(axis + 1));
    int64_t full = slice.empty() ? 1 : (*e)->shape[axis];
    int64_t rows = slice.empty() ? 1 : slice[2];
    if (slice.empty()) {
      outer = 1;
      inner = per;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < inner; ++i) {
          size_t to = size_t((o * full + begin + r) * inner + i);
          float v = pvalues[size_t((o * rows + r) * inner + i)];
          int32_t &who = (*e)->writer[to];
          if (who >= 0 && std::memcmp(&(*e)->values[to], &v, 4) != 0)
            return fail("initializer '" + name + "' of '" + path +
                        "' is the source of parameters '" + params[who] +
                        "' and '" + param +
                        "', whose trained values differ (tied weights "
                        "trained apart); the export cannot write both");
          who = writer;
          (*e)->values[to] = v;
        }
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> InitializerWriter::serialize() {
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  for (onnx::TensorProto &t : *model->mutable_graph()->mutable_initializer()) {
    auto it = edits.find(t.name());
    if (it != edits.end()) {
      setInline(t, encode(it->second.values, t.data_type()));
    } else if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      // Inlined: the output need not sit next to the input's data file.
      auto range = externalRange(t, dir);
      auto bytes = range ? readExternal(*range) : std::nullopt;
      if (!bytes)
        return fail("'" + path + "': cannot read the external data of "
                    "initializer '" + t.name() + "'");
      setInline(t, std::move(*bytes));
    }
  }
  if (model->ByteSizeLong() > size_t(INT_MAX))
    return fail("the trained model is over 2 GiB, which one ONNX file "
                "cannot hold without external data (not written by this "
                "exporter yet)");
  std::string bytes;
  if (!model->SerializeToString(&bytes))
    return fail("cannot serialize the trained model");
  return bytes;
}
