//===- StaticEval.cpp - values of an ONNX graph known without running it --===//
//
// See StaticEval.h. The op kernels are written for clarity on small tensors
// (masks, tables, shape vectors, probes), not for speed.
//
//===----------------------------------------------------------------------===//
#include "StaticEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <limits>

namespace mlir::moe::frontend {

using onnx::NodeProto;
using T = StaticTensor;
using Out = std::vector<std::optional<StaticTensor>>;

int64_t StaticTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> StaticTensor::strides() const {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

namespace {

bool floatType(int64_t onnxType) {
  return onnxType == onnx::TensorProto::FLOAT ||
         onnxType == onnx::TensorProto::DOUBLE ||
         onnxType == onnx::TensorProto::FLOAT16 ||
         onnxType == onnx::TensorProto::BFLOAT16;
}

bool sizeOk(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return false;
    if (d && n > StaticEval::kMaxElements / d)
      return false;
    n *= d;
  }
  return n <= StaticEval::kMaxElements;
}

int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

/// Shape of the numpy broadcast of a and b; nullopt when incompatible.
std::optional<std::vector<int64_t>> broadcastShape(const std::vector<int64_t> &a,
                                                   const std::vector<int64_t> &b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

/// Index into `t` (broadcast to `shape`) of the element at linear index
/// `i` of `shape`.
struct Broadcaster {
  std::vector<int64_t> outShape, srcStrides;
  Broadcaster(const T &t, const std::vector<int64_t> &shape) : outShape(shape) {
    std::vector<int64_t> st = t.strides();
    size_t off = shape.size() - t.shape.size();
    srcStrides.assign(shape.size(), 0);
    for (size_t i = 0; i < t.shape.size(); ++i)
      srcStrides[off + i] = t.shape[i] == 1 ? 0 : st[i];
  }
  int64_t at(int64_t linear) const {
    int64_t src = 0;
    for (int i = int(outShape.size()) - 1; i >= 0; --i) {
      int64_t d = outShape[i];
      int64_t idx = d ? linear % d : 0;
      linear = d ? linear / d : 0;
      src += idx * srcStrides[i];
    }
    return src;
  }
};

std::optional<T> nary(const std::vector<const T *> &ins,
                      const std::function<double(const std::vector<double> &)> &f,
                      bool isFloat) {
  std::vector<int64_t> shape;
  for (const T *t : ins) {
    auto s = broadcastShape(shape, t->shape);
    if (!s)
      return std::nullopt;
    shape = *s;
  }
  if (!sizeOk(shape))
    return std::nullopt;
  std::vector<Broadcaster> bs;
  for (const T *t : ins)
    bs.emplace_back(*t, shape);
  T out;
  out.shape = shape;
  out.isFloat = isFloat;
  int64_t n = out.numel();
  out.data.resize(n);
  std::vector<double> args(ins.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < ins.size(); ++k)
      args[k] = ins[k]->data[bs[k].at(i)];
    out.data[i] = f(args);
  }
  return out;
}

std::optional<T> unary(const T &a, const std::function<double(double)> &f,
                       bool isFloat) {
  T out = a;
  out.isFloat = isFloat;
  for (double &x : out.data)
    x = f(x);
  return out;
}

/// Integer vector operand (axes, shapes, bounds).
std::optional<std::vector<int64_t>> ints(const T *t) {
  if (!t)
    return std::nullopt;
  std::vector<int64_t> v;
  for (double d : t->data) {
    if (d != std::floor(d) && std::isfinite(d))
      return std::nullopt;
    // INT64_MAX (torch's "to the end") reads back as 2^63 in a double.
    v.push_back(std::fabs(d) < 9e18 ? static_cast<int64_t>(d)
                : d > 0           ? std::numeric_limits<int64_t>::max()
                                  : std::numeric_limits<int64_t>::min());
  }
  return v;
}

const T *in(const std::vector<const T *> &ins, int i) {
  return i < int(ins.size()) ? ins[i] : nullptr;
}

/// Axes from the attribute (older opsets) or the input at `idx` (newer).
std::optional<std::vector<int64_t>> axesOf(const NodeProto &n,
                                           const std::vector<const T *> &ins,
                                           int idx) {
  if (hasAttr(n, "axes"))
    return attrInts(n, "axes");
  if (idx < n.input_size() && !n.input(idx).empty())
    return ints(in(ins, idx));
  return std::vector<int64_t>{};
}

std::optional<T> transpose(const T &a, std::vector<int64_t> perm) {
  int64_t r = a.shape.size();
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i)
      perm.push_back(i);
  if (int64_t(perm.size()) != r)
    return std::nullopt;
  T out;
  out.isFloat = a.isFloat;
  for (int64_t p : perm) {
    if (p < 0 || p >= r)
      return std::nullopt;
    out.shape.push_back(a.shape[p]);
  }
  std::vector<int64_t> ost = out.strides(), ist = a.strides();
  out.data.resize(a.data.size());
  for (int64_t i = 0; i < int64_t(a.data.size()); ++i) {
    int64_t rem = i, src = 0;
    for (int64_t k = 0; k < r; ++k) {
      int64_t idx = rem / ost[k];
      rem %= ost[k];
      src += idx * ist[perm[k]];
    }
    out.data[i] = a.data[src];
  }
  return out;
}

std::optional<T> reshape(const T &a, const std::vector<int64_t> &target,
                         bool allowZero) {
  std::vector<int64_t> shape = target;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (i >= a.shape.size())
        return std::nullopt;
      shape[i] = a.shape[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0)
        return std::nullopt;
      infer = i;
    } else if (shape[i] < 0) {
      return std::nullopt;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known)
      return std::nullopt;
    shape[infer] = a.numel() / known;
  }
  T out = a;
  out.shape = shape;
  if (out.numel() != a.numel())
    return std::nullopt;
  return out;
}

/// A row-major shape seen around dimension `axis`: `outer` blocks of
/// `size` slices of `inner` elements.
struct AroundAxis {
  int64_t outer = 1, size = 1, inner = 1;
};

AroundAxis aroundAxis(const std::vector<int64_t> &shape, int64_t axis) {
  AroundAxis s;
  s.size = shape[axis];
  for (int64_t k = 0; k < axis; ++k)
    s.outer *= shape[k];
  for (int64_t k = axis + 1; k < int64_t(shape.size()); ++k)
    s.inner *= shape[k];
  return s;
}

std::optional<T> concat(const std::vector<const T *> &ins, int64_t axis) {
  if (ins.empty())
    return std::nullopt;
  int64_t r = ins[0]->shape.size();
  axis = normAxis(axis, r);
  if (axis < 0 || axis >= r)
    return std::nullopt;
  T out;
  out.shape = ins[0]->shape;
  out.shape[axis] = 0;
  out.isFloat = ins[0]->isFloat;
  for (const T *t : ins) {
    if (int64_t(t->shape.size()) != r)
      return std::nullopt;
    for (int64_t k = 0; k < r; ++k)
      if (k != axis && t->shape[k] != ins[0]->shape[k])
        return std::nullopt;
    out.shape[axis] += t->shape[axis];
  }
  if (!sizeOk(out.shape))
    return std::nullopt;
  AroundAxis s = aroundAxis(out.shape, axis);
  for (int64_t o = 0; o < s.outer; ++o)
    for (const T *t : ins) {
      int64_t chunk = t->shape[axis] * s.inner;
      out.data.insert(out.data.end(), t->data.begin() + o * chunk,
                      t->data.begin() + (o + 1) * chunk);
    }
  return out;
}

/// General strided slice: per axis [start, end) with step.
std::optional<T> slice(const T &a, const std::vector<int64_t> &starts,
                       const std::vector<int64_t> &ends,
                       std::vector<int64_t> axes, std::vector<int64_t> steps) {
  int64_t r = a.shape.size();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return std::nullopt;
  std::vector<int64_t> b(r, 0), st(r, 1), cnt = a.shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = normAxis(axes[i], r);
    if (ax < 0 || ax >= r || steps[i] == 0)
      return std::nullopt;
    int64_t d = a.shape[ax], s = starts[i], e = ends[i], step = steps[i];
    auto clampIdx = [&](int64_t v) {
      if (v < 0)
        v = v < -d ? (step > 0 ? 0 : -1) : v + d;
      if (step > 0)
        return std::min(v, d);
      return std::min(v, d - 1);
    };
    s = clampIdx(s);
    e = clampIdx(e);
    int64_t n = step > 0 ? std::max<int64_t>(0, (e - s + step - 1) / step)
                         : std::max<int64_t>(0, (s - e - step - 1) / -step);
    b[ax] = s;
    st[ax] = step;
    cnt[ax] = n;
  }
  T out;
  out.isFloat = a.isFloat;
  out.shape = cnt;
  std::vector<int64_t> ist = a.strides(), ost = out.strides();
  int64_t n = out.numel();
  out.data.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, src = 0;
    for (int64_t k = 0; k < r; ++k) {
      int64_t idx = rem / ost[k];
      rem %= ost[k];
      src += (b[k] + idx * st[k]) * ist[k];
    }
    out.data[i] = a.data[src];
  }
  return out;
}

std::optional<T> gather(const T &data, const T &idx, int64_t axis) {
  int64_t r = data.shape.size();
  axis = normAxis(axis, r);
  if (axis < 0 || axis >= r)
    return std::nullopt;
  T out;
  out.isFloat = data.isFloat;
  for (int64_t k = 0; k < axis; ++k)
    out.shape.push_back(data.shape[k]);
  for (int64_t d : idx.shape)
    out.shape.push_back(d);
  for (int64_t k = axis + 1; k < r; ++k)
    out.shape.push_back(data.shape[k]);
  if (!sizeOk(out.shape))
    return std::nullopt;
  auto [outer, d, inner] = aroundAxis(data.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (double fi : idx.data) {
      int64_t i = static_cast<int64_t>(fi);
      if (i < 0)
        i += d;
      if (i < 0 || i >= d)
        return std::nullopt;
      auto first = data.data.begin() + (o * d + i) * inner;
      out.data.insert(out.data.end(), first, first + inner);
    }
  return out;
}

std::optional<T> matmul(const T &a, const T &b) {
  if (a.shape.size() < 2 || b.shape.size() < 2)
    return std::nullopt; // 1-D operands: not needed so far
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  int64_t k2 = b.shape[b.shape.size() - 2], n = b.shape.back();
  if (k != k2)
    return std::nullopt;
  std::vector<int64_t> ab(a.shape.begin(), a.shape.end() - 2),
      bb(b.shape.begin(), b.shape.end() - 2);
  auto batch = broadcastShape(ab, bb);
  if (!batch)
    return std::nullopt;
  T out;
  out.shape = *batch;
  out.shape.push_back(m);
  out.shape.push_back(n);
  if (!sizeOk(out.shape))
    return std::nullopt;
  T ba{ab, {}, true}, bbt{bb, {}, true};
  Broadcaster bA(ba, *batch), bB(bbt, *batch);
  int64_t nb = 1;
  for (int64_t d : *batch)
    nb *= d;
  out.data.assign(nb * m * n, 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const double *pa = a.data.data() + bA.at(bi) * m * k;
    const double *pb = b.data.data() + bB.at(bi) * k * n;
    double *po = out.data.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < k; ++l)
        for (int64_t j = 0; j < n; ++j)
          po[i * n + j] += pa[i * k + l] * pb[l * n + j];
  }
  return out;
}

/// Einsum without ellipsis or repeated letters within one operand.
std::optional<T> einsum(std::string eq, const std::vector<const T *> &ins) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  size_t arrow = eq.find("->");
  if (arrow == std::string::npos || eq.find('.') != std::string::npos)
    return std::nullopt;
  std::string lhs = eq.substr(0, arrow), res = eq.substr(arrow + 2);
  std::vector<std::string> terms;
  for (size_t p = 0;;) {
    size_t c = lhs.find(',', p);
    terms.push_back(lhs.substr(p, c - p));
    if (c == std::string::npos)
      break;
    p = c + 1;
  }
  if (terms.size() != ins.size())
    return std::nullopt;
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].size() != ins[t]->shape.size())
      return std::nullopt;
    for (size_t i = 0; i < terms[t].size(); ++i) {
      char c = terms[t][i];
      if (terms[t].find(c) != i)
        return std::nullopt;
      auto [it, fresh] = size.insert({c, ins[t]->shape[i]});
      if (!fresh && it->second != ins[t]->shape[i])
        return std::nullopt;
    }
  }
  std::string letters;
  for (auto &[c, d] : size)
    letters += c;
  T out;
  for (char c : res) {
    if (!size.count(c))
      return std::nullopt;
    out.shape.push_back(size[c]);
  }
  int64_t total = 1;
  for (auto &[c, d] : size)
    total *= std::max<int64_t>(d, 1);
  if (!sizeOk(out.shape) || total > StaticEval::kMaxElements * 4)
    return std::nullopt;
  out.data.assign(out.numel(), 0.0);
  std::map<char, int64_t> idx;
  std::vector<std::vector<int64_t>> inStrides;
  for (const T *t : ins)
    inStrides.push_back(t->strides());
  std::vector<int64_t> ost = out.strides();
  std::vector<int64_t> cur(letters.size(), 0);
  for (int64_t it = 0; it < total; ++it) {
    int64_t rem = it;
    for (int i = int(letters.size()) - 1; i >= 0; --i) {
      int64_t d = size[letters[i]];
      cur[i] = d ? rem % d : 0;
      rem = d ? rem / d : 0;
      idx[letters[i]] = cur[i];
    }
    double prod = 1.0;
    for (size_t t = 0; t < ins.size(); ++t) {
      int64_t off = 0;
      for (size_t i = 0; i < terms[t].size(); ++i)
        off += idx[terms[t][i]] * inStrides[t][i];
      prod *= ins[t]->data[off];
    }
    int64_t o = 0;
    for (size_t i = 0; i < res.size(); ++i)
      o += idx[res[i]] * ost[i];
    out.data[o] += prod;
  }
  return out;
}

std::optional<T> reduce(const NodeProto &n, const std::vector<const T *> &ins,
                        llvm::StringRef op) {
  const T &a = *ins[0];
  int64_t r = a.shape.size();
  auto axesOpt = axesOf(n, ins, 1);
  if (!axesOpt)
    return std::nullopt;
  std::vector<int64_t> axes = *axesOpt;
  if (axes.empty()) {
    if (attrInt(n, "noop_with_empty_axes", 0))
      return a;
    for (int64_t i = 0; i < r; ++i)
      axes.push_back(i);
  }
  std::vector<bool> red(r, false);
  for (int64_t x : axes) {
    x = normAxis(x, r);
    if (x < 0 || x >= r)
      return std::nullopt;
    red[x] = true;
  }
  bool keep = attrInt(n, "keepdims", 1) != 0;
  std::vector<int64_t> kshape;
  for (int64_t k = 0; k < r; ++k)
    kshape.push_back(red[k] ? 1 : a.shape[k]);
  T out;
  out.isFloat = a.isFloat || op == "ReduceMean";
  out.shape = kshape;
  int64_t n0 = out.numel();
  double init = op == "ReduceMax"   ? -INFINITY
                : op == "ReduceMin" ? INFINITY
                : op == "ReduceProd" ? 1.0
                                     : 0.0;
  out.data.assign(n0, init);
  std::vector<int64_t> count(n0, 0), ost = out.strides(), ist = a.strides();
  for (int64_t i = 0; i < a.numel(); ++i) {
    int64_t rem = i, o = 0;
    for (int64_t k = 0; k < r; ++k) {
      int64_t idx = rem / ist[k];
      rem %= ist[k];
      if (!red[k])
        o += idx * ost[k];
    }
    double v = a.data[i];
    double &acc = out.data[o];
    if (op == "ReduceMax")
      acc = std::max(acc, v);
    else if (op == "ReduceMin")
      acc = std::min(acc, v);
    else if (op == "ReduceProd")
      acc *= v;
    else
      acc += v;
    ++count[o];
  }
  if (op == "ReduceMean")
    for (int64_t i = 0; i < n0; ++i)
      out.data[i] /= std::max<int64_t>(count[i], 1);
  if (!keep) {
    std::vector<int64_t> s;
    for (int64_t k = 0; k < r; ++k)
      if (!red[k])
        s.push_back(a.shape[k]);
    out.shape = s;
  }
  return out;
}

std::optional<T> softmax(const T &a, int64_t axis, bool log) {
  int64_t r = a.shape.size();
  axis = normAxis(axis, r);
  if (axis < 0 || axis >= r)
    return std::nullopt;
  T out = a;
  auto [outer, d, inner] = aroundAxis(a.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < d; ++j)
        mx = std::max(mx, a.data[(o * d + j) * inner + i]);
      for (int64_t j = 0; j < d; ++j)
        sum += std::exp(a.data[(o * d + j) * inner + i] - mx);
      for (int64_t j = 0; j < d; ++j) {
        double &v = out.data[(o * d + j) * inner + i];
        v = log ? v - mx - std::log(sum) : std::exp(v - mx) / sum;
      }
    }
  return out;
}

double castTo(double v, int64_t to) {
  if (floatType(to))
    return to == onnx::TensorProto::FLOAT ? double(float(v)) : v;
  if (to == onnx::TensorProto::BOOL)
    return v != 0.0 ? 1.0 : 0.0;
  return std::isfinite(v) ? std::trunc(v) : v;
}

bool isIntDiv(const std::vector<const T *> &ins) {
  return !ins[0]->isFloat && !ins[1]->isFloat;
}

} // namespace
Out evalNode(const NodeProto &n, const std::vector<const T *> &ins,
             int64_t opset);
namespace {

/// A shape whose element count fits in int64 (shape-only tensors are
/// never allocated, so the evaluation size limit does not apply).
bool sizeOkShape(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d && n > (int64_t(1) << 62) / d))
      return false;
    n *= d;
  }
  return true;
}

T shapeOnly(std::vector<int64_t> shape, bool isFloat = true) {
  T t;
  t.shape = std::move(shape);
  t.isFloat = isFloat;
  t.shapeOnly = true;
  return t;
}

/// The output shapes of `n` when some data input is known only by its
/// shape. Operands whose values decide the shape (Reshape's target, Slice's
/// bounds, ...) must be known values.
Out shapeOnlyNode(const NodeProto &n, const std::vector<const T *> &ins,
                  int64_t opset) {
  llvm::StringRef op = n.op_type();
  Out none(std::max(n.output_size(), 1));
  auto one = [&](std::optional<std::vector<int64_t>> s, bool fl = true) {
    Out o(std::max(n.output_size(), 1));
    if (s && sizeOkShape(*s))
      o[0] = shapeOnly(*s, fl);
    return o;
  };
  const T *a = in(ins, 0), *b = in(ins, 1);
  if (!a)
    return none;
  static const llvm::StringSet<> same = {
      "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tanh",
      "Erf", "Sigmoid", "Relu", "Floor", "Ceil", "Softplus", "Sign", "Not",
      "IsInf", "IsNaN", "Identity", "Dropout", "Cast", "CastLike", "Softmax",
      "LogSoftmax", "Clip", "CumSum", "Trilu", "Gelu", "LayerNormalization",
      "SimplifiedLayerNormalization", "RMSNormalization", "ScatterND",
      "ScatterElements", "Elu", "LeakyRelu", "HardSigmoid"};
  static const llvm::StringSet<> bcast = {
      "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual",
      "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Max", "Min",
      "Sum", "Mean", "Mod", "PRelu"};
  static const llvm::StringSet<> logical = {
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And",
      "Or", "Xor", "Not", "IsInf", "IsNaN"};
  bool fl = !logical.contains(op) &&
            (op != "Cast" || floatType(attrInt(n, "to", 1)));
  if (same.contains(op))
    return one(a->shape, fl);
  if (bcast.contains(op)) {
    std::vector<int64_t> s;
    for (const T *t : ins) {
      if (!t)
        return none;
      auto r = broadcastShape(s, t->shape);
      if (!r)
        return none;
      s = *r;
    }
    return one(s, fl);
  }
  if (op == "MatMul" && b) {
    if (a->shape.size() < 2 || b->shape.size() < 2)
      return none;
    std::vector<int64_t> ab(a->shape.begin(), a->shape.end() - 2),
        bb(b->shape.begin(), b->shape.end() - 2);
    auto s = broadcastShape(ab, bb);
    if (!s || a->shape.back() != b->shape[b->shape.size() - 2])
      return none;
    s->push_back(a->shape[a->shape.size() - 2]);
    s->push_back(b->shape.back());
    return one(s);
  }
  if (op == "Gemm" && b && a->shape.size() == 2 && b->shape.size() == 2) {
    int64_t m = attrInt(n, "transA", 0) ? a->shape[1] : a->shape[0];
    int64_t nn = attrInt(n, "transB", 0) ? b->shape[0] : b->shape[1];
    return one(std::vector<int64_t>{m, nn});
  }
  auto valuesOf = [&](const T *t) -> std::optional<std::vector<int64_t>> {
    if (!t || t->shapeOnly)
      return std::nullopt;
    return ints(t);
  };
  if (op == "Reshape" && b) {
    auto target = valuesOf(b);
    if (!target)
      return none;
    T fake = *a; // reshape() reads only the shape and element count
    fake.shapeOnly = false;
    std::vector<int64_t> s = *target;
    int64_t known = 1, infer = -1, total = 1;
    for (int64_t d : a->shape)
      total *= d;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 0 && !attrInt(n, "allowzero", 0)) {
        if (i >= a->shape.size())
          return none;
        s[i] = a->shape[i];
      }
      if (s[i] == -1) {
        if (infer >= 0)
          return none;
        infer = i;
      } else if (s[i] < 0) {
        return none;
      } else {
        known *= s[i];
      }
    }
    if (infer >= 0) {
      if (known == 0 || total % known)
        return none;
      s[infer] = total / known;
    }
    return one(s, a->isFloat);
  }
  if (op == "Flatten") {
    int64_t r = a->shape.size(), axis = normAxis(attrInt(n, "axis", 1), r);
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < r; ++k)
      (k < axis ? outer : inner) *= a->shape[k];
    return one(std::vector<int64_t>{outer, inner}, a->isFloat);
  }
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Transpose" ||
      op == "Concat" || op == "Slice" || op == "Gather" || op == "Expand" ||
      op == "Tile" || op == "Split" || op == "Einsum" ||
      op.starts_with("Reduce")) {
    // The data kernels decide these shapes from the shapes alone: run them
    // on a one-element stand-in per input and keep the output shape.
    // (Element values are irrelevant to the shape for these ops.)
    std::vector<T> stand;
    std::vector<const T *> ptrs;
    stand.reserve(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      const T *t = ins[i];
      if (t && t->shapeOnly) {
        // Shape-determining operands are never shape-only: only data
        // operands get here. Keep the shape, fake the data with zeros only
        // when small; else give up.
        int64_t count = 1;
        for (int64_t d : t->shape)
          count = d > 0 && count <= (1 << 16) ? count * d : (1 << 17);
        if (count > (1 << 16))
          return none; // too large to stand in for: shape unknown
        
        T z = *t;
        z.shapeOnly = false;
        z.data.assign(z.numel(), 0.0);
        stand.push_back(std::move(z));
      } else {
        stand.push_back(t ? *t : T());
      }
      ptrs.push_back(t ? &stand.back() : nullptr);
    }
    Out o = evalNode(n, ptrs, opset);
    for (auto &t : o)
      if (t) {
        t->data.clear();
        t->shapeOnly = true;
      }
    return o;
  }
  if (op == "TopK" && b) {
    auto k = valuesOf(b);
    int64_t r = a->shape.size(), axis = normAxis(attrInt(n, "axis", -1), r);
    if (!k || k->size() != 1 || axis < 0 || axis >= r)
      return none;
    std::vector<int64_t> s = a->shape;
    s[axis] = (*k)[0];
    Out o(std::max(n.output_size(), 1));
    o[0] = shapeOnly(s);
    if (o.size() > 1)
      o[1] = shapeOnly(s, false);
    return o;
  }
  if (op == "ArgMax" || op == "ArgMin") {
    int64_t r = a->shape.size(), axis = normAxis(attrInt(n, "axis", 0), r);
    if (axis < 0 || axis >= r)
      return none;
    std::vector<int64_t> s = a->shape;
    if (attrInt(n, "keepdims", 1))
      s[axis] = 1;
    else
      s.erase(s.begin() + axis);
    return one(s, false);
  }
  if (op == "OneHot" && b) {
    auto depth = valuesOf(b);
    if (!depth || depth->size() != 1)
      return none;
    std::vector<int64_t> s = a->shape;
    int64_t r = s.size() + 1, axis = normAxis(attrInt(n, "axis", -1), r);
    if (axis < 0 || axis >= r)
      return none;
    s.insert(s.begin() + axis, (*depth)[0]);
    return one(s);
  }
  if (op == "GatherElements" && b)
    return one(b->shape, a->isFloat);
  return none;
}

/// `n`'s outputs with the first one `t` (unknown when nullopt), the others
/// unknown.
Out firstOutput(const NodeProto &n, std::optional<T> t) {
  Out o(std::max(n.output_size(), 1));
  o[0] = std::move(t);
  return o;
}

using V = const std::vector<double> &;

/// One-operand elementwise ops, casts and clamps: true when `n` is one of
/// them with its operand known, its value (nullopt: unknown) in `out`.
bool unaryElementwise(const NodeProto &n, const std::vector<const T *> &ins,
                 int64_t opset, std::optional<T> &out) {
  llvm::StringRef op = n.op_type();
  const T *a = in(ins, 0), *b = in(ins, 1);
  static const std::map<std::string, std::function<double(double)>> unaries = {
      {"Neg", [](double x) { return -x; }},
      {"Abs", [](double x) { return std::fabs(x); }},
      {"Sqrt", [](double x) { return std::sqrt(x); }},
      {"Reciprocal", [](double x) { return 1.0 / x; }},
      {"Exp", [](double x) { return std::exp(x); }},
      {"Log", [](double x) { return std::log(x); }},
      {"Sin", [](double x) { return std::sin(x); }},
      {"Cos", [](double x) { return std::cos(x); }},
      {"Tanh", [](double x) { return std::tanh(x); }},
      {"Erf", [](double x) { return std::erf(x); }},
      {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"Relu", [](double x) { return x > 0 ? x : 0.0; }},
      {"Floor", [](double x) { return std::floor(x); }},
      {"Ceil", [](double x) { return std::ceil(x); }},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }},
      {"Sign", [](double x) { return double((x > 0) - (x < 0)); }},
  };
  if (auto it = unaries.find(op.str()); it != unaries.end() && a) {
    out = unary(*a, it->second, a->isFloat);
    return true;
  }
  if (op == "Not" && a) {
    out = unary(*a, [](double x) { return x == 0 ? 1.0 : 0.0; }, false);
    return true;
  }
  if (op == "IsInf" && a) {
    out = unary(*a, [](double x) { return std::isinf(x) ? 1.0 : 0.0; }, false);
    return true;
  }
  if (op == "IsNaN" && a) {
    out = unary(*a, [](double x) { return std::isnan(x) ? 1.0 : 0.0; }, false);
    return true;
  }
  if (op == "Clip" && a) {
    double lo = -INFINITY, hi = INFINITY;
    if (opset < 11) {
      lo = attrFloat(n, "min", -INFINITY);
      hi = attrFloat(n, "max", INFINITY);
    } else {
      if (const T *m = in(ins, 1); m && m->data.size() == 1)
        lo = m->data[0];
      if (const T *m = in(ins, 2); m && m->data.size() == 1)
        hi = m->data[0];
    }
    out = unary(*a, [&](double x) { return std::min(std::max(x, lo), hi); },
                a->isFloat);
    return true;
  }
  if ((op == "Identity" || op == "Dropout") && a) {
    out = *a;
    return true;
  }
  if (op == "Cast" && a) {
    int64_t to = attrInt(n, "to", onnx::TensorProto::FLOAT);
    out = unary(*a, [&](double x) { return castTo(x, to); }, floatType(to));
    return true;
  }
  if (op == "CastLike" && a && b) {
    out = unary(
        *a, [&](double x) { return b->isFloat ? x : castTo(x, onnx::TensorProto::INT64); },
        b->isFloat);
    return true;
  }
  return false;
}

/// Elementwise ops of two or more operands (arithmetic, comparisons,
/// Max / Min / Sum / Mean, Where): true when `n` is one of them with its
/// operands known, its value (nullopt: unknown) in `out`.
bool naryElementwise(const NodeProto &n, const std::vector<const T *> &ins,
                     std::optional<T> &out) {
  llvm::StringRef op = n.op_type();
  const T *a = in(ins, 0), *b = in(ins, 1);
  bool anyFloat = llvm::any_of(ins, [](const T *t) { return t && t->isFloat; });
  static const std::map<std::string, std::function<double(double, double)>>
      binaries = {{"Add", [](double x, double y) { return x + y; }},
                  {"Sub", [](double x, double y) { return x - y; }},
                  {"Mul", [](double x, double y) { return x * y; }},
                  {"Pow", [](double x, double y) { return std::pow(x, y); }}};
  static const std::map<std::string, std::function<double(double, double)>>
      compares = {{"Equal", [](double x, double y) { return double(x == y); }},
                  {"Less", [](double x, double y) { return double(x < y); }},
                  {"LessOrEqual",
                   [](double x, double y) { return double(x <= y); }},
                  {"Greater", [](double x, double y) { return double(x > y); }},
                  {"GreaterOrEqual",
                   [](double x, double y) { return double(x >= y); }},
                  {"And",
                   [](double x, double y) { return double(x != 0 && y != 0); }},
                  {"Or",
                   [](double x, double y) { return double(x != 0 || y != 0); }},
                  {"Xor", [](double x, double y) {
                     return double((x != 0) != (y != 0));
                   }}};
  if (a && b && n.input_size() == 2) {
    if (auto it = binaries.find(op.str()); it != binaries.end()) {
      auto f = it->second;
      out = nary({a, b}, [&](V v) { return f(v[0], v[1]); },
                 op == "Pow" ? a->isFloat : anyFloat);
      return true;
    }
    if (auto it = compares.find(op.str()); it != compares.end()) {
      auto f = it->second;
      out = nary({a, b}, [&](V v) { return f(v[0], v[1]); }, false);
      return true;
    }
    if (op == "Div") {
      bool intDiv = isIntDiv(ins);
      out = nary(
          {a, b},
          [&](V v) {
            if (!intDiv)
              return v[0] / v[1];
            return v[1] == 0 ? NAN : std::trunc(v[0] / v[1]);
          },
          !intDiv);
      return true;
    }
    if (op == "Mod") {
      bool fm = attrInt(n, "fmod", 0) != 0;
      out = nary(
          {a, b},
          [&](V v) {
            if (v[1] == 0)
              return double(NAN);
            double r = std::fmod(v[0], v[1]);
            if (!fm && r != 0 && ((r < 0) != (v[1] < 0)))
              r += v[1];
            return r;
          },
          anyFloat);
      return true;
    }
  }
  if ((op == "Max" || op == "Min" || op == "Sum" || op == "Mean") &&
      !ins.empty()) {
    out = nary(
        ins,
        [&](V v) {
          double r = v[0];
          for (size_t i = 1; i < v.size(); ++i)
            r = op == "Max"   ? std::max(r, v[i])
                : op == "Min" ? std::min(r, v[i])
                              : r + v[i];
          return op == "Mean" ? r / v.size() : r;
        },
        anyFloat);
    return true;
  }
  if (op == "Where" && ins.size() == 3) {
    out = nary({a, b, ins[2]}, [](V v) { return v[0] != 0 ? v[1] : v[2]; },
               b->isFloat || ins[2]->isFloat);
    return true;
  }
  return false;
}

/// Elementwise ops: true when `n` is one with its operands known, its value
/// (nullopt: unknown) in `out`.
bool elementwise(const NodeProto &n, const std::vector<const T *> &ins,
                 int64_t opset, std::optional<T> &out) {
  return unaryElementwise(n, ins, opset, out) || naryElementwise(n, ins, out);
}

std::optional<T> squeezeOrUnsqueeze(const NodeProto &n,
                                    const std::vector<const T *> &ins,
                                    const T &a) {
  auto axes = axesOf(n, ins, 1);
  if (!axes)
    return std::nullopt;
  T out = a;
  if (n.op_type() == "Squeeze") {
    std::vector<int64_t> s;
    int64_t r = a.shape.size();
    std::vector<bool> drop(r, false);
    for (int64_t x : *axes)
      if (int64_t k = normAxis(x, r); k >= 0 && k < r)
        drop[k] = true;
    for (int64_t k = 0; k < r; ++k)
      if (!(axes->empty() ? a.shape[k] == 1 : bool(drop[k])))
        s.push_back(a.shape[k]);
    out.shape = s;
  } else {
    int64_t r = a.shape.size() + axes->size();
    std::vector<bool> add(r, false);
    for (int64_t x : *axes) {
      int64_t k = normAxis(x, r);
      if (k < 0 || k >= r)
        return std::nullopt;
      add[k] = true;
    }
    std::vector<int64_t> s;
    size_t src = 0;
    for (int64_t k = 0; k < r; ++k)
      s.push_back(add[k] ? 1 : (src < a.shape.size() ? a.shape[src++] : 1));
    out.shape = s;
  }
  return out;
}

/// Shape: dimensions [start, end) of `a`'s shape, as I64 values.
T shapeOf(const NodeProto &n, const T &a) {
  int64_t r = a.shape.size();
  auto clampR = [&](int64_t i) {
    return std::clamp<int64_t>(normAxis(i, r), 0, r);
  };
  int64_t s = clampR(attrInt(n, "start", 0)), e = clampR(attrInt(n, "end", r));
  T out;
  out.isFloat = false;
  out.shape = {std::max<int64_t>(0, e - s)};
  for (int64_t k = s; k < e; ++k)
    out.data.push_back(a.shape[k]);
  return out;
}

/// Slice, its bounds from attributes (opset < 10) or known inputs.
std::optional<T> sliceNode(const NodeProto &n,
                           const std::vector<const T *> &ins, int64_t opset,
                           const T &a) {
  std::vector<int64_t> st, en, ax, sp;
  if (opset < 10) {
    st = attrInts(n, "starts");
    en = attrInts(n, "ends");
    ax = attrInts(n, "axes");
  } else {
    auto s1 = ints(in(ins, 1)), e1 = ints(in(ins, 2));
    if (!s1 || !e1)
      return std::nullopt;
    st = *s1;
    en = *e1;
    if (n.input_size() > 3 && !n.input(3).empty()) {
      auto v = ints(in(ins, 3));
      if (!v)
        return std::nullopt;
      ax = *v;
    }
    if (n.input_size() > 4 && !n.input(4).empty()) {
      auto v = ints(in(ins, 4));
      if (!v)
        return std::nullopt;
      sp = *v;
    }
  }
  return slice(a, st, en, ax, sp);
}

std::optional<T> expand(const T &a, const T &b) {
  auto target = ints(&b);
  if (!target)
    return std::nullopt;
  auto s = broadcastShape(a.shape, *target);
  if (!s || !sizeOk(*s))
    return std::nullopt;
  // Expand broadcasts both ways: to the broadcast of the two shapes.
  T zeros{*s, std::vector<double>(), a.isFloat};
  zeros.data.assign(zeros.numel(), 0.0);
  return nary({&a, &zeros}, [](V v) { return v[0]; }, a.isFloat);
}

std::optional<T> tile(const T &a, const T &b) {
  auto reps = ints(&b);
  if (!reps || reps->size() != a.shape.size())
    return std::nullopt;
  T out = a;
  for (size_t k = 0; k < reps->size(); ++k) {
    if ((*reps)[k] < 1)
      return std::nullopt;
    T tmp = out;
    std::vector<const T *> cs((*reps)[k], &tmp);
    auto c = concat(cs, k);
    if (!c)
      return std::nullopt;
    out = *c;
  }
  return out;
}

std::optional<T> range(const T &start, const T &limit, const T &delta) {
  double s = start.data.at(0), lim = limit.data.at(0), d = delta.data.at(0);
  if (d == 0)
    return std::nullopt;
  int64_t cnt = std::max<int64_t>(0, int64_t(std::ceil((lim - s) / d)));
  if (cnt > StaticEval::kMaxElements)
    return std::nullopt;
  T out;
  out.isFloat = start.isFloat;
  out.shape = {cnt};
  for (int64_t i = 0; i < cnt; ++i)
    out.data.push_back(s + i * d);
  return out;
}

/// The first element of a ConstantOfShape's `value` tensor; `otherwise`
/// when it holds none.
double firstElement(const onnx::TensorProto &t, double otherwise) {
  if (t.float_data_size())
    return t.float_data(0);
  if (t.int64_data_size())
    return t.int64_data(0);
  if (t.int32_data_size())
    return t.int32_data(0);
  if (t.double_data_size())
    return t.double_data(0);
  double v = otherwise;
  if (t.has_raw_data() && !t.raw_data().empty()) {
    const std::string &r = t.raw_data();
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (r.size() >= 4) { float f; std::memcpy(&f, r.data(), 4); v = f; }
      break;
    case onnx::TensorProto::DOUBLE:
      if (r.size() >= 8) std::memcpy(&v, r.data(), 8);
      break;
    case onnx::TensorProto::INT64:
      if (r.size() >= 8) { int64_t x; std::memcpy(&x, r.data(), 8); v = double(x); }
      break;
    case onnx::TensorProto::INT32:
      if (r.size() >= 4) { int32_t x; std::memcpy(&x, r.data(), 4); v = x; }
      break;
    default:
      v = static_cast<unsigned char>(r[0]);
    }
  }
  return v;
}

std::optional<T> constantOfShape(const NodeProto &n, const T &shapeIn) {
  auto shape = ints(&shapeIn);
  if (!shape || !sizeOk(*shape))
    return std::nullopt;
  T out;
  out.shape = *shape;
  double v = 0;
  out.isFloat = true;
  for (const auto &at : n.attribute())
    if (at.name() == "value" && at.has_t()) {
      out.isFloat = floatType(at.t().data_type());
      v = firstElement(at.t(), v);
    }
  out.data.assign(out.numel(), v);
  return out;
}

std::optional<T> trilu(const NodeProto &n, const std::vector<const T *> &ins,
                       const T &a) {
  int64_t k = 0;
  if (const T *kt = in(ins, 1); kt && !kt->data.empty())
    k = int64_t(kt->data[0]);
  bool upper = attrInt(n, "upper", 1) != 0;
  if (a.shape.size() < 2)
    return std::nullopt;
  T out = a;
  int64_t rows = a.shape[a.shape.size() - 2], cols = a.shape.back();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    if (!keep)
      out.data[i] = 0;
  }
  return out;
}

std::optional<T> cumSum(const NodeProto &n, const T &a, const T &b) {
  int64_t r = a.shape.size();
  int64_t axis = normAxis(int64_t(b.data.at(0)), r);
  if (axis < 0 || axis >= r)
    return std::nullopt;
  bool excl = attrInt(n, "exclusive", 0), rev = attrInt(n, "reverse", 0);
  T out = a;
  auto [outer, d, inner] = aroundAxis(a.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t jj = 0; jj < d; ++jj) {
        int64_t j = rev ? d - 1 - jj : jj;
        double v = a.data[(o * d + j) * inner + i];
        if (excl) {
          out.data[(o * d + j) * inner + i] = acc;
          acc += v;
        } else {
          acc += v;
          out.data[(o * d + j) * inner + i] = acc;
        }
      }
    }
  return out;
}

/// Split: one output per part, all unknown when the sizes are.
Out split(const NodeProto &n, const std::vector<const T *> &ins, const T &a) {
  Out none(std::max(n.output_size(), 1));
  int64_t r = a.shape.size();
  int64_t axis = normAxis(attrInt(n, "axis", 0), r);
  if (axis < 0 || axis >= r)
    return none;
  std::vector<int64_t> sizes;
  if (hasAttr(n, "split"))
    sizes = attrInts(n, "split");
  else if (const T *s = in(ins, 1)) {
    auto v = ints(s);
    if (!v)
      return none;
    sizes = *v;
  } else {
    int64_t parts = n.output_size();
    if (parts <= 0 || a.shape[axis] % parts)
      return none;
    sizes.assign(parts, a.shape[axis] / parts);
  }
  if (int64_t(sizes.size()) != n.output_size())
    return none;
  Out o;
  int64_t begin = 0;
  for (int64_t sz : sizes) {
    o.push_back(slice(a, {begin}, {begin + sz}, {axis}, {1}));
    begin += sz;
  }
  return o;
}

/// evalNode for a node whose inputs are all known values, in the default
/// domain.
Out evalKnown(const NodeProto &n, const std::vector<const T *> &ins,
              int64_t opset) {
  llvm::StringRef op = n.op_type();
  Out none(std::max(n.output_size(), 1));
  auto one = [&](std::optional<T> t) { return firstOutput(n, std::move(t)); };
  const T *a = in(ins, 0), *b = in(ins, 1);
  if (std::optional<T> value; elementwise(n, ins, opset, value))
    return one(std::move(value));
  if (op == "Reshape" && a && b) {
    auto target = ints(b);
    if (!target)
      return none;
    return one(reshape(*a, *target, attrInt(n, "allowzero", 0) != 0));
  }
  if (op == "Flatten" && a) {
    int64_t r = a->shape.size(), axis = normAxis(attrInt(n, "axis", 1), r);
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k)
      outer *= a->shape[k];
    return one(reshape(*a, {outer, -1}, false));
  }
  if ((op == "Squeeze" || op == "Unsqueeze") && a)
    return one(squeezeOrUnsqueeze(n, ins, *a));
  if (op == "Transpose" && a)
    return one(transpose(*a, attrInts(n, "perm")));
  if (op == "Concat")
    return one(concat(ins, attrInt(n, "axis", 0)));
  if (op == "Shape" && a)
    return one(shapeOf(n, *a));
  if (op == "Size" && a)
    return one(T{{}, {double(a->numel())}, false});
  if (op == "Slice" && a)
    return one(sliceNode(n, ins, opset, *a));
  if (op == "Gather" && a && b)
    return one(gather(*a, *b, attrInt(n, "axis", 0)));
  if (op == "Expand" && a && b)
    return one(expand(*a, *b));
  if (op == "Tile" && a && b)
    return one(tile(*a, *b));
  if (op == "Range" && ins.size() == 3)
    return one(range(*a, *b, *ins[2]));
  if (op == "ConstantOfShape" && a)
    return one(constantOfShape(n, *a));
  if (op == "Trilu" && a)
    return one(trilu(n, ins, *a));
  if (op == "Einsum")
    return one(einsum(attrString(n, "equation"), ins));
  if (op == "MatMul" && a && b)
    return one(matmul(*a, *b));
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" ||
      op == "ReduceMin" || op == "ReduceProd")
    return one(reduce(n, ins, op));
  if ((op == "Softmax" || op == "LogSoftmax") && a)
    return one(softmax(*a, attrInt(n, "axis", opset >= 13 ? -1 : 1),
                       op == "LogSoftmax"));
  if (op == "CumSum" && a && b)
    return one(cumSum(n, *a, *b));
  if (op == "Split" && a)
    return split(n, ins, *a);
  return none;
}

} // namespace

Out evalNode(const NodeProto &n, const std::vector<const T *> &ins,
             int64_t opset) {
  llvm::StringRef op = n.op_type();
  Out none(std::max(n.output_size(), 1));
  // A scatter's result has its data input's shape, whatever the (possibly
  // data-dependent) indices and updates are.
  if ((op == "ScatterND" || op == "ScatterElements") && !ins.empty() &&
      ins[0] && llvm::any_of(ins, [](const T *t) { return !t; })) {
    Out o(std::max(n.output_size(), 1));
    o[0] = shapeOnly(ins[0]->shape, ins[0]->isFloat);
    return o;
  }
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !ins[i])
      return none;
  // Shape and Size read only the shape.
  bool anyShapeOnly = llvm::any_of(ins, [](const T *t) {
    return t && t->shapeOnly;
  });
  if (anyShapeOnly && op != "Shape" && op != "Size")
    return shapeOnlyNode(n, ins, opset);
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return none;
  return evalKnown(n, ins, opset);
}

std::optional<StaticTensor> StaticEval::leaf(const std::string &v) const {
  const onnx::TensorProto *t = g_.constant(v);
  if (!t)
    return std::nullopt;
  T out;
  for (int64_t d : t->dims())
    out.shape.push_back(d);
  if (!sizeOk(out.shape))
    return std::nullopt;
  out.isFloat = floatType(t->data_type());
  if (out.isFloat) {
    auto f = g_.floatValues(v);
    if (!f)
      return std::nullopt;
    out.data = *f;
  } else {
    auto iv = g_.intValues(v);
    if (!iv)
      return std::nullopt;
    out.data.assign(iv->begin(), iv->end());
  }
  if (int64_t(out.data.size()) != out.numel())
    return std::nullopt;
  return out;
}

const StaticTensor *
StaticEval::compute(const std::string &root, Memo &memo,
                    const std::map<std::string, StaticTensor> *overrides,
                    Memo *base) {
  // Iterative post-order over producers: deep graphs cannot overflow the
  // stack.
  std::vector<std::string> stack{root};
  while (!stack.empty()) {
    std::string v = stack.back();
    if (memo.count(v)) {
      stack.pop_back();
      continue;
    }
    if (overrides) {
      if (auto it = overrides->find(v); it != overrides->end()) {
        memo[v] = it->second;
        stack.pop_back();
        continue;
      }
    }
    if (base) {
      if (auto it = base->find(v); it != base->end() && it->second) {
        memo[v] = it->second;
        stack.pop_back();
        continue;
      }
    }
    if (const onnx::TensorProto *c = g_.constant(v)) {
      std::vector<int64_t> dims(c->dims().begin(), c->dims().end());
      int64_t count = 1;
      for (int64_t d : dims)
        count = d >= 0 && count <= 4096 ? count * d : 4097;
      // Shapes mode reads small constants (shape vectors, scalars) and
      // only the dims of the rest (weights).
      if (mode_ == Mode::shapes && count > 4096)
        memo[v] = sizeOkShape(dims) ? std::optional<T>(shapeOnly(dims))
                                    : std::nullopt;
      else
        memo[v] = leaf(v);
      if (mode_ == Mode::shapes && !memo[v] && sizeOkShape(dims))
        memo[v] = shapeOnly(dims); // data absent: the dims still hold
      stack.pop_back();
      continue;
    }
    const NodeProto *p = g_.producer(v);
    if (!p) {
      // A graph input: its data is unknown; in shapes mode its declared
      // static shape is.
      memo[v] = std::nullopt;
      if (mode_ == Mode::shapes)
        if (auto s = g_.shape(v);
            s && llvm::all_of(*s, [](int64_t d) { return d >= 0; }))
          memo[v] = shapeOnly(*s);
      stack.pop_back();
      continue;
    }
    // Shape / Size of a statically shaped value need no data.
    if ((p->op_type() == "Shape" || p->op_type() == "Size") &&
        p->input_size() == 1 && !(overrides && overrides->count(p->input(0)))) {
      auto s = g_.shape(p->input(0));
      if (s && llvm::all_of(*s, [](int64_t d) { return d >= 0; })) {
        T shaped{*s, {}, true};
        auto out = evalNode(*p, {&shaped}, g_.opset());
        memo[v] = out[0];
        stack.pop_back();
        continue;
      }
    }
    bool ready = true;
    for (const std::string &i : p->input())
      if (!i.empty() && !memo.count(i)) {
        ready = false;
        stack.push_back(i);
      }
    if (!ready) {
      if (stack.size() > 1000000) // malformed (cyclic) graphs
        return nullptr;
      continue;
    }
    stack.pop_back();
    std::vector<const T *> ins;
    for (const std::string &i : p->input())
      ins.push_back(i.empty() || !memo[i] ? nullptr : &*memo[i]);
    Out outs = evalNode(*p, ins, g_.opset());
    if (mode_ == Mode::values) // a shape alone is not a known value
      for (auto &t : outs)
        if (t && t->shapeOnly)
          t.reset();
    for (int k = 0; k < p->output_size(); ++k)
      if (!p->output(k).empty())
        memo[p->output(k)] = k < int(outs.size()) ? outs[k] : std::nullopt;
    if (!memo.count(v))
      memo[v] = std::nullopt;
  }
  auto &r = memo[root];
  return r ? &*r : nullptr;
}

const StaticTensor *StaticEval::value(llvm::StringRef v) {
  return compute(v.str(), memo_, nullptr, nullptr);
}

bool StaticEval::knownNode(const onnx::NodeProto &node) {
  for (const std::string &o : node.output())
    if (!o.empty() && !known(o))
      return false;
  return node.output_size() > 0;
}

std::optional<StaticTensor>
StaticEval::probe(const std::map<std::string, StaticTensor> &inputs,
                  llvm::StringRef target) {
  Memo local;
  const StaticTensor *t = compute(target.str(), local, &inputs, &memo_);
  if (!t)
    return std::nullopt;
  return *t;
}

} // namespace mlir::moe::frontend
