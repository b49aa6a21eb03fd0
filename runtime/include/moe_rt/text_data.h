/*===- text_data.h - token ids and labels from a byte-level text -*- C++ -*-===*
 *
 * How a trainer feeds a byte-level language model from a text file: one
 * token per byte (token id = the byte, 0..255), the labels the next bytes.
 * moe-run --data and the example driver around a generated step
 * (examples/codegen/driver.cpp --data) both call this, so that the same
 * step, ranks and step number read the same bytes and print the same loss.
 *
 * The text is cut into W = (size - 1) / N consecutive windows of N bytes
 * (N: the sequence length; the last byte is only ever a label). The data
 * position p is the number of windows (samples) all ranks have read
 * before a step; in that step rank r fills its sample i (of B) from window
 *
 *   w = (p + r * B + i) mod W
 *
 * and the step moves p on by P * B (P ranks). So the ranks read disjoint
 * consecutive windows and walk through the text, wrapping around at its
 * end; a checkpoint records p, and a run resumed on another grid (other P,
 * other B) continues from the same sample — nothing is read twice or
 * skipped. Token ids are bytes w*N .. w*N+N-1, labels bytes w*N+1 ..
 * w*N+N. (With p = t * P * B at step t this is the rule of a run that
 * never changes grid: w = ((t * P + r) * B + i) mod W.)
 *
 * Header-only C++ with no dependencies (moe-run is a compiler tool, the
 * driver links only the runtime).
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_TEXT_DATA_H
#define MOE_RT_TEXT_DATA_H

#include <cstdint>
#include <string>

namespace moe_rt {
namespace text_data {

/// Token ids are bytes: the embedding table needs this many rows.
constexpr int64_t kByteVocabulary = 256;

/// The message for an embedding table with fewer than kByteVocabulary
/// rows.
inline std::string vocabularyError() {
  return "--data feeds bytes (256 token ids) but the embedding table has "
         "fewer rows";
}

/// The message for a text with no window of `len` bytes.
inline std::string shortTextError(int64_t len) {
  return "the text is shorter than one sequence (" + std::to_string(len + 1) +
         " bytes)";
}

/// Windows of `len` bytes (each followed by its label byte) in `text`;
/// 0 when the text is shorter than one sequence plus its last label.
inline int64_t windows(const std::string &text, int64_t len) {
  if (len < 1 || text.size() < 2)
    return 0;
  return (int64_t(text.size()) - 1) / len;
}

/// Fills `out` (samples x len, row-major) with the token ids (labels =
/// false) or labels (labels = true) of `rank` in the step that begins at
/// data position `position` (the windows all ranks read before it).
/// Returns false with `error` set ("the text is shorter than one sequence
/// (N bytes)") when the text has no window.
inline bool fill(const std::string &text, uint64_t position, int rank,
                 int64_t samples, int64_t len, bool labels, int64_t *out,
                 std::string &error) {
  int64_t w = windows(text, len);
  if (w < 1) {
    error = shortTextError(len);
    return false;
  }
  for (int64_t i = 0; i < samples; ++i) {
    int64_t window =
        int64_t((position + uint64_t(rank * samples + i)) % uint64_t(w));
    for (int64_t t = 0; t < len; ++t)
      out[i * len + t] = static_cast<unsigned char>(
          text[window * len + t + (labels ? 1 : 0)]);
  }
  return true;
}

/// The data position after a step of `world` ranks reading `samples`
/// windows each.
inline uint64_t advance(uint64_t position, int world, int64_t samples) {
  return position + uint64_t(world) * uint64_t(samples);
}

} // namespace text_data
} // namespace moe_rt

#endif /* MOE_RT_TEXT_DATA_H */
