//===- KeptActivations.h - forward intermediates kept for the vjp -*- C++ -*-===//
//
// moe_rt_stream_keep_activations (moe_rt/kept_activations.h): on such a
// stream, moe_rt_expert(_v) keeps its experts' pre-activations (up and
// gate projections over the filled rows) and moe_rt_attention its
// intermediates (normed x, Q, K, V, softmax P, O per sample), and the vjp
// of the same call site uses them instead of recomputing them
// (kernels/Expert.h, kernels/Attention.h). A call site is the addresses
// and shapes of the call's tensors: in a step every value has a buffer of
// its own for the whole step and no call changes it, so the forward and
// its vjp name the same tensors with the same contents — the promise the
// stream's owner gives by turning keeping on.
//
// An entry lives from the forward that publishes it to the first vjp that
// takes it; a vjp that finds none recomputes. Taken entries go back to a
// pool with their storage, so a training loop reaches a steady state
// without new allocations. Memory: what the forwards whose vjps have not
// run yet kept — filled rows x H floats per expert call (x 2 when gated);
// per attention call and sample, N x (M + 2 HD + 2 KV·D) + heads x N x N
// floats.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_KEPTACTIVATIONS_H
#define MOE_RT_SRC_CPU_KEPTACTIVATIONS_H

#include "../OpShapes.h"
#include "kernels/Attention.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace moe_rt::cpu {

/// Whether the expert and attention ops queued on `stream` keep
/// (moe_rt_stream_keep_activations).
void setKeeping(const void *stream, bool keep);
bool keeping(const void *stream);

/// The tensors and sizes that identify a call site.
struct CallSite {
  std::vector<const void *> tensors;
  std::vector<double> sizes; // shapes, flags and attributes, as numbers
  bool operator<(const CallSite &o) const {
    return tensors != o.tensors ? tensors < o.tensors : sizes < o.sizes;
  }
};

/// An expert call's site (rows: the variable-count op's, else null).
inline CallSite expertSite(int act, const ExpertShape &f, const void *x,
                           const void *up, const void *gate, const void *down,
                           const void *rows = nullptr) {
  return {{x, up, gate, down, rows},
          {double(act), double(f.experts), double(f.slots), double(f.m),
           double(f.h)}};
}

/// One table of kept forwards of one kind (Kept: what one forward keeps).
template <class Kept> class KeptTable {
public:
  /// Storage for a forward to fill (pooled; contents unspecified).
  std::shared_ptr<Kept> acquire() {
    std::lock_guard<std::mutex> lock(mutex);
    if (pool.empty())
      return std::make_shared<Kept>();
    std::shared_ptr<Kept> kept = std::move(pool.back());
    pool.pop_back();
    return kept;
  }
  /// The forward at `site` is done: its vjp may take `kept`.
  void publish(const CallSite &site, std::shared_ptr<Kept> kept) {
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<Kept> &slot = published[site];
    // A forward whose vjp never ran (a forward-only step): replaced.
    recycle(std::move(slot));
    slot = std::move(kept);
  }
  /// The kept forward of `site`, removed from the table, or null.
  std::shared_ptr<Kept> take(const CallSite &site) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = published.find(site);
    if (it == published.end())
      return nullptr;
    std::shared_ptr<Kept> kept = std::move(it->second);
    published.erase(it);
    return kept;
  }
  /// A taken entry's storage, back to the pool.
  void release(std::shared_ptr<Kept> kept) {
    std::lock_guard<std::mutex> lock(mutex);
    recycle(std::move(kept));
  }

private:
  /// Pooled entries beyond this are freed: a step keeps a few per block
  /// and micro-batch.
  static constexpr size_t kPoolLimit = 256;
  void recycle(std::shared_ptr<Kept> kept) {
    if (kept && pool.size() < kPoolLimit)
      pool.push_back(std::move(kept));
  }
  std::mutex mutex;
  std::map<CallSite, std::shared_ptr<Kept>> published;
  std::vector<std::shared_ptr<Kept>> pool;
};

/// One expert forward's pre-activations: expert l's filled[l] rows of H
/// start at row offset(l) of `hidden` (and `gated`).
struct KeptExpert {
  std::vector<float> hidden, gated;
  std::vector<int64_t> filled;
  int64_t offset(int64_t l) const {
    int64_t rows = 0;
    for (int64_t j = 0; j < l; ++j)
      rows += filled[j];
    return rows;
  }
};

/// The process's tables (CPU streams share them: a forward and its vjp may
/// run on different compute streams).
KeptTable<KeptExpert> &keptExperts();
KeptTable<kernels::AttentionKept<float>> &keptAttention();

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_KEPTACTIVATIONS_H
