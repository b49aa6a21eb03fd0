//===- RotaryTable.h - cos/sin tables of rotary embeddings ------*- C++ -*-===//
//
// Rotary turns lane pair j of a head at position n by the angle
// n * theta^(-2j/D) (RoFormer, eq. 15). The angles depend only on
// (seq, D, theta), so the CPU kernel reads them from a table built once per
// such key instead of calling pow/cos/sin for every token of every call
// (issue 12 measured those at ~5% of a step). Tables are kept for the
// process's life: a model has one key per distinct (seq, head size, base),
// i.e. a handful.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ROTARYTABLE_H
#define MOE_RT_KERNELS_ROTARYTABLE_H

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace moe_rt::kernels {

/// cos and sin of the angle of position p, pair j at [p * D/2 + j], in
/// double (the kernel rotates in double and rounds once, as before).
struct RotaryTable {
  int64_t seq, half;
  std::vector<double> cos, sin;
};

/// The angle of pair j of a head of size d at position pos.
inline double rotaryAngle(int64_t pos, int64_t j, int64_t d, double theta) {
  return double(pos) * std::pow(theta, -2.0 * double(j) / double(d));
}

/// The table of (seq, d, theta), built on first use; safe to call from
/// several streams' threads at once (tables are immutable once built).
inline std::shared_ptr<const RotaryTable> rotaryTable(int64_t seq, int64_t d,
                                                      double theta) {
  using Key = std::tuple<int64_t, int64_t, double>;
  static std::mutex lock;
  static std::map<Key, std::shared_ptr<const RotaryTable>> tables;
  std::lock_guard<std::mutex> guard(lock);
  auto &slot = tables[Key{seq, d, theta}];
  if (!slot) {
    auto t = std::make_shared<RotaryTable>();
    t->seq = seq;
    t->half = d / 2;
    t->cos.resize(seq * t->half);
    t->sin.resize(seq * t->half);
    for (int64_t p = 0; p < seq; ++p)
      for (int64_t j = 0; j < t->half; ++j) {
        double a = rotaryAngle(p, j, d, theta);
        t->cos[p * t->half + j] = std::cos(a);
        t->sin[p * t->half + j] = std::sin(a);
      }
    slot = std::move(t);
  }
  return slot;
}

/// The lanes (first, second) of pair j: rotate-half (j, j + D/2) or
/// interleaved (2j, 2j + 1).
inline std::pair<int64_t, int64_t> rotaryLanes(bool interleaved, int64_t j,
                                               int64_t d) {
  return interleaved ? std::make_pair(2 * j, 2 * j + 1)
                     : std::make_pair(j, j + d / 2);
}

/// Rotates (in place) the heads x D vectors of one token at position `pos`;
/// `inverse` applies the transpose (the adjoint, for gradients).
template <typename T>
void rotaryApply(const RotaryTable &t, bool interleaved, T *v, int64_t heads,
                 int64_t d, int64_t pos, bool inverse) {
  const double *cs = t.cos.data() + pos * t.half,
               *sn = t.sin.data() + pos * t.half;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < t.half; ++j) {
      double c = cs[j], s = inverse ? -sn[j] : sn[j];
      auto [p, q] = rotaryLanes(interleaved, j, d);
      T &a = v[h * d + p], &b = v[h * d + q];
      T x = a, y = b;
      a = T(x * c - y * s);
      b = T(y * c + x * s);
    }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ROTARYTABLE_H
