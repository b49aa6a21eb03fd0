/*===- option_values.h - numbers given on a command line --------*- C++ -*-===*
 *
 * How a numeric option is read (command_line.h, the reader of moe-run,
 * the export tools, moe-profile and the example driver; moe-trace's
 * options): the whole text must be the number ("5x", "", "-1" for a count,
 * "abc" are refused), so that a mistyped flag is an error naming it rather
 * than a silent 0 (an atoi'd "--timeout abc" used to mean "no limit").
 * Header-only C++ (the driver links only the runtime).
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_OPTION_VALUES_H
#define MOE_RT_OPTION_VALUES_H

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace moe_rt::options {

/// A whole number >= 0 written in full, or nullopt.
inline std::optional<uint64_t> wholeNumber(const std::string &text) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (*end || errno)
    return std::nullopt;
  return static_cast<uint64_t>(v);
}

/// A finite number >= 0 written in full ("1.5", "30"), or nullopt.
inline std::optional<double> nonNegativeNumber(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (*end || errno || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v;
}

} // namespace moe_rt::options

#endif /* MOE_RT_OPTION_VALUES_H */
