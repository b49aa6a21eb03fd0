//===- KeptActivations.cpp - forward intermediates kept for the vjp -------===//

#include "KeptActivations.h"

#include <set>

namespace moe_rt::cpu {

namespace {
std::mutex streamsMutex;
std::set<const void *> &keepingStreams() {
  static std::set<const void *> streams;
  return streams;
}
} // namespace

void setKeeping(const void *stream, bool keep) {
  std::lock_guard<std::mutex> lock(streamsMutex);
  if (keep)
    keepingStreams().insert(stream);
  else
    keepingStreams().erase(stream);
}

bool keeping(const void *stream) {
  std::lock_guard<std::mutex> lock(streamsMutex);
  return keepingStreams().count(stream) != 0;
}

KeptTable<KeptExpert> &keptExperts() {
  static KeptTable<KeptExpert> table;
  return table;
}

KeptTable<kernels::AttentionKept<float>> &keptAttention() {
  static KeptTable<kernels::AttentionKept<float>> table;
  return table;
}

} // namespace moe_rt::cpu
