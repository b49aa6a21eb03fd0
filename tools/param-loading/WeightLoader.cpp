//===- WeightLoader.cpp - a parameter's values from its moe.source --------===//

#include "WeightLoader.h"

#include "moe/Frontend/TensorData.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <sstream>

using namespace mlir;
using namespace mlir::moe::frontend;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string dims(llvm::ArrayRef<int64_t> shape) {
  std::string s;
  for (int64_t d : shape)
    s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f,
           mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Bytes of the tensor's data: raw_data inline or the external file range,
/// found by the importer's rules (Onnx/TensorData.h).
llvm::Expected<std::string> rawBytes(const onnx::TensorProto &t,
                                     llvm::StringRef modelDir) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL)
    return t.raw_data();
  auto range = externalRange(t, modelDir);
  if (!range)
    return fail("initializer '" + t.name() +
                "' has external data without a usable location, offset or "
                "length (locations must be relative paths inside the "
                "model's directory)");
  auto size = regularFileSize(*range);
  if (!size)
    return fail("initializer '" + t.name() + "': its external data file '" +
                range->file +
                "' is absent (the model was imported shape-only; copy the "
                "data next to the model to use its weights)");
  if (range->offset > *size || range->length > *size - range->offset)
    return fail("initializer '" + t.name() + "': external data file '" +
                range->file + "' is too short (" + std::to_string(*size) +
                " bytes, needs " +
                std::to_string(range->offset + range->length) + ")");
  auto bytes = readExternal(*range);
  if (!bytes)
    return fail("initializer '" + t.name() + "': cannot read '" +
                range->file + "'");
  return std::move(*bytes);
}

} // namespace

llvm::Expected<HostTensor>
mlir::moe::frontend::readTensor(const onnx::TensorProto &t,
                                llvm::StringRef modelDir) {
  HostTensor out;
  auto elements = elementCount(t);
  if (!elements)
    return fail("initializer '" + t.name() +
                "' has a negative dimension or too many elements");
  out.shape.assign(t.dims().begin(), t.dims().end());
  int64_t count = int64_t(*elements);
  auto bytes = rawBytes(t, modelDir);
  if (!bytes)
    return bytes.takeError();
  bool raw = t.data_location() == onnx::TensorProto::EXTERNAL ||
             t.has_raw_data();
  int32_t dt = t.data_type();
  bool half = dt == onnx::TensorProto::FLOAT16;
  if (dt != onnx::TensorProto::FLOAT && dt != onnx::TensorProto::DOUBLE &&
      !half && dt != onnx::TensorProto::BFLOAT16)
    return fail("initializer '" + t.name() + "' has ONNX data type " +
                std::to_string(dt) +
                "; weights must be float32, float16, bfloat16 or float64");
  // The values the data holds (16-bit types keep one per int32_data entry
  // when typed), checked against the shape before anything is allocated:
  // a corrupt file's claimed shape must not decide how much we allocate.
  size_t have = raw                              ? bytes->size() / elementSize(dt)
                : dt == onnx::TensorProto::FLOAT  ? size_t(t.float_data_size())
                : dt == onnx::TensorProto::DOUBLE ? size_t(t.double_data_size())
                                                  : size_t(t.int32_data_size());
  if (int64_t(have) != count)
    return fail("initializer '" + t.name() + "' has " + std::to_string(have) +
                " values for shape " + dims(out.shape));
  out.values.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const char *at = raw ? bytes->data() + i * elementSize(dt) : nullptr;
    switch (dt) {
    case onnx::TensorProto::FLOAT: {
      float v;
      if (raw)
        std::memcpy(&v, at, 4);
      out.values[i] = raw ? v : t.float_data(i);
      break;
    }
    case onnx::TensorProto::DOUBLE: {
      double v;
      if (raw)
        std::memcpy(&v, at, 8);
      out.values[i] = float(raw ? v : t.double_data(i));
      break;
    }
    default: { // float16, bfloat16
      uint16_t v = uint16_t(raw ? 0 : t.int32_data(i));
      if (raw)
        std::memcpy(&v, at, 2);
      out.values[i] = half ? halfToFloat(v) : bf16ToFloat(v);
      break;
    }
    }
  }
  return out;
}

WeightLoader::WeightLoader() = default;
WeightLoader::~WeightLoader() = default;

llvm::Expected<const onnx::ModelProto *>
WeightLoader::model(const std::string &path) {
  if (auto it = models.find(path); it != models.end())
    return it->second.get();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail("cannot open '" + path + "'");
  auto m = std::make_unique<onnx::ModelProto>();
  if (!m->ParseFromIstream(&in))
    return fail("'" + path + "' is not a valid ONNX model");
  return (models[path] = std::move(m)).get();
}

llvm::Expected<std::vector<float>>
WeightLoader::load(SourceAttr source, llvm::ArrayRef<int64_t> shape,
                   int64_t firstExpert) {
  // The fields were checked when the attribute was built (SourceAttr).
  llvm::ArrayRef<StringAttr> names = source.getNames();
  bool stacked = source.getStacked();
  bool transpose = source.getTranspose();
  llvm::ArrayRef<int64_t> slice = source.getSlice();
  double scale = source.getScaleOrOne();

  std::string path = source.getFile().getValue().str();
  if (!fallbackDir.empty() && llvm::sys::path::is_relative(path) &&
      !llvm::sys::fs::exists(path)) {
    llvm::SmallString<256> next(fallbackDir);
    llvm::sys::path::append(next, path);
    if (llvm::sys::fs::exists(next))
      path = std::string(next);
  }
  auto m = model(path);
  if (!m)
    return m.takeError();
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  auto find = [&](llvm::StringRef name) -> const onnx::TensorProto * {
    for (const auto &init : (*m)->graph().initializer())
      if (init.name() == name)
        return &init;
    return nullptr;
  };

  // Initializer n of the list -> its values after slice and transpose (a
  // slice's fourth entry moves initializer n's begin by n * stride).
  auto one = [&](llvm::StringRef name,
                 int64_t n = 0) -> llvm::Expected<HostTensor> {
    const onnx::TensorProto *t = find(name);
    if (!t)
      return fail("'" + path + "' has no initializer '" + name + "'");
    auto h = readTensor(*t, dir);
    if (!h)
      return h.takeError();
    if (!slice.empty()) {
      int64_t axis = slice[0], size = slice[2],
              begin = slice[1] + (slice.size() > 3 ? n * slice[3] : 0);
      int64_t rank = h->shape.size();
      if (axis < 0 || axis >= rank || begin < 0 || size <= 0 ||
          begin + size > h->shape[axis])
        return fail("moe.source slice [" + std::to_string(axis) + ", " +
                    std::to_string(begin) + ", " + std::to_string(size) +
                    "] is out of range for '" + name + "' (" +
                    dims(h->shape) + ")");
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d)
        outer *= h->shape[d];
      for (int64_t d = axis + 1; d < rank; ++d)
        inner *= h->shape[d];
      std::vector<float> v;
      v.reserve(outer * size * inner);
      for (int64_t o = 0; o < outer; ++o) {
        auto base = h->values.begin() + (o * h->shape[axis] + begin) * inner;
        v.insert(v.end(), base, base + size * inner);
      }
      h->values = std::move(v);
      h->shape[axis] = size;
    }
    if (transpose) {
      if (h->shape.size() < 2)
        return fail("moe.source transposes '" + name +
                    "', which has fewer than 2 dimensions");
      size_t r = h->shape.size();
      int64_t rows = h->shape[r - 2], cols = h->shape[r - 1],
              batch = int64_t(h->values.size()) / std::max<int64_t>(1, rows * cols);
      std::vector<float> v(h->values.size());
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            v[b * rows * cols + j * rows + i] =
                h->values[b * rows * cols + i * cols + j];
      h->values = std::move(v);
      std::swap(h->shape[r - 2], h->shape[r - 1]);
    }
    return h;
  };

  HostTensor all;
  if (stacked) {
    int64_t local = shape.empty() ? 0 : shape[0];
    if (firstExpert < 0 || firstExpert + local > int64_t(names.size()))
      return fail("moe.source of a " + dims(shape) + " parameter lists " +
                  std::to_string(names.size()) + " experts; experts " +
                  std::to_string(firstExpert) + ".." +
                  std::to_string(firstExpert + local - 1) +
                  " do not exist");
    all.shape.push_back(local);
    for (int64_t e = firstExpert; e < firstExpert + local; ++e) {
      StringAttr name = names[e];
      auto h = one(name.getValue(), e);
      if (!h)
        return h.takeError();
      if (e == firstExpert)
        all.shape.insert(all.shape.end(), h->shape.begin(), h->shape.end());
      else if (!llvm::equal(llvm::ArrayRef<int64_t>(all.shape).drop_front(),
                            h->shape))
        return fail("expert initializers differ in shape: '" +
                    name.getValue() + "' is " + dims(h->shape));
      all.values.insert(all.values.end(), h->values.begin(), h->values.end());
    }
  } else {
    StringAttr name = names[0];
    auto h = one(name.getValue());
    if (!h)
      return h.takeError();
    all = std::move(*h);
    // A single [E, ...] tensor of all experts: this rank's rows.
    if (all.shape.size() == shape.size() && !shape.empty() &&
        all.shape[0] > shape[0] &&
        llvm::equal(llvm::ArrayRef<int64_t>(all.shape).drop_front(),
                    shape.drop_front())) {
      int64_t row = all.values.size() / all.shape[0];
      if (firstExpert < 0 || firstExpert + shape[0] > all.shape[0])
        return fail("'" + name.getValue() + "' holds " +
                    std::to_string(all.shape[0]) + " experts; experts " +
                    std::to_string(firstExpert) + ".." +
                    std::to_string(firstExpert + shape[0] - 1) +
                    " do not exist");
      all.values = std::vector<float>(
          all.values.begin() + firstExpert * row,
          all.values.begin() + (firstExpert + shape[0]) * row);
      all.shape[0] = shape[0];
    }
  }
  if (!llvm::equal(all.shape, shape))
    return fail("'" + path + "': the source of a " + dims(shape) +
                " parameter is " + dims(all.shape) + " after " +
                (!slice.empty() ? "slicing, " : "") +
                (transpose ? "transposing, " : "") +
                (stacked ? "stacking" : "loading"));
  if (scale != 1.0)
    for (float &v : all.values)
      v = float(v * scale);
  return std::move(all.values);
}
