//===- Rotary.cpp - recognise rotary embeddings by what they compute ------===//
//
// See Rotary.h. With D the head size and f_j = theta^(-2j/D), rotary turns
// each lane pair (p, q) of a head at position n by the angle n·f_j:
//   out[p] = x[p] cos - x[q] sin,   out[q] = x[q] cos + x[p] sin,
// rotate-half pairing p = j, q = j + D/2, interleaved p = 2j, q = 2j + 1.
// fitRotary probes: zero (the map is linear, no offset), one basis vector
// on pair 1's first lane (its angle at position 1 is f_1, which gives
// theta), then two pseudo-random tensors compared with the rotary of each
// layout and candidate position axis.
//
//===----------------------------------------------------------------------===//
#include "Rotary.h"

#include <cmath>

namespace mlir::moe::frontend {

namespace {

/// True when a probe of `shape` is small enough to evaluate (every dim
/// positive, the product checked without overflow).
bool probeable(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || n > StaticEval::kMaxElements / 4 / d)
      return false;
    n *= d;
  }
  return true;
}

StaticTensor filled(const std::vector<int64_t> &shape, double v) {
  StaticTensor t;
  t.shape = shape;
  t.data.assign(t.numel(), v);
  return t;
}

/// Deterministic values in [-1, 1].
StaticTensor pseudoRandom(const std::vector<int64_t> &shape, uint64_t seed) {
  StaticTensor t = filled(shape, 0);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double &x : t.data) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = double((s >> 11) & ((1ULL << 40) - 1)) / double(1ULL << 39) - 1.0;
  }
  return t;
}

/// The lane paired with `lane` and whether `lane` is the pair's first.
std::pair<int64_t, bool> partner(RotaryLayout layout, int64_t lane,
                                 int64_t d) {
  if (layout == RotaryLayout::rotate_half)
    return lane < d / 2 ? std::make_pair(lane + d / 2, true)
                        : std::make_pair(lane - d / 2, false);
  return lane % 2 == 0 ? std::make_pair(lane + 1, true)
                       : std::make_pair(lane - 1, false);
}

int64_t pairIndex(RotaryLayout layout, int64_t lane, int64_t d) {
  return layout == RotaryLayout::rotate_half ? lane % (d / 2) : lane / 2;
}

/// The rotary of `x` with positions along `axis`.
StaticTensor rotate(const StaticTensor &x, RotaryLayout layout, double theta,
                    int64_t axis) {
  StaticTensor out = x;
  std::vector<int64_t> st = x.strides();
  int64_t d = x.shape.back();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t lane = i % d;
    int64_t pos = (i / st[axis]) % x.shape[axis];
    auto [other, first] = partner(layout, lane, d);
    double f = std::pow(theta, -2.0 * pairIndex(layout, lane, d) / d);
    double c = std::cos(pos * f), s = std::sin(pos * f);
    double xo = x.data[i - lane + other];
    out.data[i] = first ? x.data[i] * c - xo * s : x.data[i] * c + xo * s;
  }
  return out;
}

double maxAbsDiff(const StaticTensor &a, const StaticTensor &b) {
  double m = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::fabs(a.data[i] - b.data[i]));
  return m;
}

} // namespace

std::optional<std::vector<int64_t>> shapeFrom(StaticEval &eval,
                                              const OnnxGraph &g,
                                              llvm::StringRef a,
                                              llvm::StringRef b) {
  auto known = [](const std::optional<std::vector<int64_t>> &s) {
    return s && llvm::all_of(*s, [](int64_t d) { return d > 0; });
  };
  auto sb = g.shape(b);
  if (known(sb))
    return sb;
  auto sa = g.shape(a);
  if (!known(sa) || !probeable(*sa))
    return std::nullopt;
  StaticTensor z = filled(*sa, 0);
  auto y = eval.probe({{a.str(), z}}, b);
  if (!y)
    return std::nullopt;
  return y->shape;
}

std::optional<RotaryFit> fitRotary(StaticEval &eval, const OnnxGraph &g,
                                   llvm::StringRef a, llvm::StringRef b,
                                   int64_t seq, std::string &why) {
  auto sa = g.shape(a), sb = shapeFrom(eval, g, a, b);
  if (!sa || !sb || *sa != *sb || sa->size() < 2 ||
      llvm::any_of(*sa, [](int64_t d) { return d <= 0; })) {
    why = "its input and output shapes are not both known and equal";
    return std::nullopt;
  }
  const std::vector<int64_t> &shape = *sa;
  int64_t d = shape.back();
  if (d % 2 || !probeable(shape)) {
    why = "its head size is odd or the tensor is too large to probe";
    return std::nullopt;
  }
  StaticTensor probeShape = filled(shape, 0);
  auto run = [&](const StaticTensor &in) {
    return eval.probe({{a.str(), in}}, b);
  };
  auto zero = run(probeShape);
  if (!zero || zero->shape != shape) {
    why = "it cannot be evaluated with the position tables it reads (they "
          "are not statically known, or an op is not supported)";
    return std::nullopt;
  }
  for (double v : zero->data)
    if (std::fabs(v) > 1e-9) {
      why = "it adds something to Q/K (not a rotation)";
      return std::nullopt;
    }
  std::vector<StaticTensor> xs = {pseudoRandom(shape, 1),
                                  pseudoRandom(shape, 2)};
  std::vector<StaticTensor> ys;
  for (const StaticTensor &x : xs) {
    auto y = run(x);
    if (!y)
      return std::nullopt;
    ys.push_back(*y);
  }
  std::vector<int64_t> st = probeShape.strides();
  for (RotaryLayout layout : {RotaryLayout::rotate_half, RotaryLayout::interleaved})
    for (int64_t axis = 0; axis + 1 < int64_t(shape.size()); ++axis) {
      if (shape[axis] != seq)
        continue;
      double theta = 10000.0;
      if (d >= 4 && seq > 1) {
        // Pair 1's first lane, at every position: its angle at position 1
        // is f_1 = theta^(-2/D).
        int64_t lane = layout == RotaryLayout::rotate_half ? 1 : 2;
        StaticTensor e = filled(shape, 0);
        for (int64_t i = lane; i < e.numel(); i += d)
          e.data[i] = 1.0;
        auto y = run(e);
        if (!y)
          return std::nullopt;
        int64_t at = st[axis] + lane; // position 1, other coords 0
        int64_t other = partner(layout, lane, d).first;
        double f1 = std::atan2(y->data[at - lane + other], y->data[at]);
        if (!(f1 > 0 && f1 < 1.0 + 1e-9))
          continue;
        theta = std::pow(f1, -d / 2.0);
        double r = std::round(theta);
        if (std::fabs(theta - r) <= 1e-3 * theta)
          theta = r;
      }
      bool ok = true;
      for (size_t k = 0; k < xs.size() && ok; ++k)
        ok = maxAbsDiff(rotate(xs[k], layout, theta, axis), ys[k]) <= 1e-4;
      if (ok)
        return RotaryFit{layout, theta};
    }
  // Rotary over only the first lanes (GPT-NeoX rotary_pct): the rest pass
  // through unchanged.
  int64_t same = 0;
  for (int64_t lane = d - 1; lane >= 0; --lane) {
    bool unchanged = true;
    for (int64_t i = lane; i < xs[0].numel() && unchanged; i += d)
      unchanged = std::fabs(xs[0].data[i] - ys[0].data[i]) <= 1e-9;
    if (!unchanged)
      break;
    ++same;
  }
  if (same > 0 && same < d) {
    why = "it rotates " + std::to_string(d - same) + " of " +
          std::to_string(d) +
          " head dimensions and passes the rest through (partial rotary)";
    return std::nullopt;
  }
  why = "it is a position-dependent map that is neither rotate-half nor "
        "interleaved rotary with positions 0.." +
        std::to_string(seq - 1);
  return std::nullopt;
}

bool fitKvRepeat(StaticEval &eval, const OnnxGraph &g, llvm::StringRef a,
                 llvm::StringRef b, std::string &why) {
  auto sa = g.shape(a), sb = shapeFrom(eval, g, a, b);
  if (!sa || !sb || sa->size() != sb->size() ||
      llvm::any_of(*sa, [](int64_t d) { return d <= 0; }) ||
      llvm::any_of(*sb, [](int64_t d) { return d <= 0; })) {
    why = "its input and output shapes are not both known with equal rank";
    return false;
  }
  int64_t axis = -1;
  for (size_t k = 0; k < sa->size(); ++k)
    if ((*sa)[k] != (*sb)[k]) {
      if (axis >= 0 || (*sb)[k] % (*sa)[k]) {
        auto str = [](const std::vector<int64_t> &v) {
          std::string o;
          for (int64_t d : v)
            o += (o.empty() ? "" : "x") + std::to_string(d);
          return o;
        };
        why = "it turns a " + str(*sa) + " tensor into " + str(*sb) +
              ", which repeats no single axis (not a KV-head repeat)";
        return false;
      }
      axis = k;
    }
  if (axis < 0) {
    why = "it does not change the number of heads";
    return false;
  }
  if (!probeable(*sa) || !probeable(*sb)) {
    why = "the tensor is too large to probe";
    return false;
  }
  StaticTensor x = pseudoRandom(*sa, 3);
  auto y = eval.probe({{a.str(), x}}, b);
  if (!y || y->shape != *sb) {
    why = "it cannot be evaluated";
    return false;
  }
  int64_t r = (*sb)[axis] / (*sa)[axis];
  std::vector<int64_t> xs = x.strides(), ys = y->strides();
  auto check = [&](bool interleave) {
    for (int64_t i = 0; i < y->numel(); ++i) {
      int64_t src = 0, rem = i;
      for (size_t k = 0; k < sb->size(); ++k) {
        int64_t idx = rem / ys[k];
        rem %= ys[k];
        if (int64_t(k) == axis)
          idx = interleave ? idx / r : idx % (*sa)[axis];
        src += idx * xs[k];
      }
      if (y->data[i] != x.data[src])
        return false;
    }
    return true;
  };
  if (check(true))
    return true;
  why = check(false) ? "it repeats the KV heads in tile order (query head h "
                       "reads KV head h mod kv_heads); moe.attention gives "
                       "query head h KV head h / (heads / kv_heads)"
                     : "it is not a repeat of the KV heads";
  return false;
}

} // namespace mlir::moe::frontend
