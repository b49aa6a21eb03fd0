/*===- command_line.h - a tool's arguments, read word by word ---*- C++ -*-===*
 *
 * The one option reader of the tools that run or export a step (moe-run,
 * moe-export-params, moe-export-onnx) and of the generated-step driver, so
 * that a flag given to two of them is read by the same rule and refused
 * with the same message, naming the flag and the word refused:
 *
 *   moe_rt::options::CommandLine args(argc, argv);
 *   while (args.next())
 *     if (!args.count("--steps", steps) && !args.text("-o", output) &&
 *         !args.positional(input, "step"))
 *       args.unknown();
 *   if (!args.error().empty()) ... // "--steps needs a positive integer,
 *                                  //  got '3x'"
 *
 * Each reader returns true when the current word is its flag (whether or
 * not its value was good); a bad or missing value records the error and
 * ends the loop. No exceptions (the tools build without them); numbers
 * are read by option_values.h. Header-only C++: the driver links only the
 * runtime.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_COMMAND_LINE_H
#define MOE_RT_COMMAND_LINE_H

#include "moe_rt/option_values.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace moe_rt::options {

class CommandLine {
public:
  CommandLine(int argc, char **argv) {
    for (int i = 1; i < argc; ++i)
      words.emplace_back(argv[i]);
  }

  /// Moves to the next word; false at the end or once an error is recorded.
  bool next() {
    if (!failure.empty() || ahead >= words.size())
      return false;
    at = ahead++;
    return true;
  }
  /// The current word (a flag stays current while its value is read).
  const std::string &word() const { return words[at]; }

  /// A flag without a value.
  bool flag(const char *name) const { return word() == name; }

  /// `name VALUE`, any text (a file, a directory, a map).
  bool text(const char *name, std::string &out) {
    if (word() != name)
      return false;
    if (ahead >= words.size())
      fail(word() + " needs a value");
    else
      out = words[ahead++];
    return true;
  }

  /// `name VALUE`, repeatable: each value appended to `out`, in order
  /// (per-block expert maps).
  bool repeated(const char *name, std::vector<std::string> &out) {
    std::string v;
    if (!text(name, v))
      return false;
    if (failure.empty())
      out.push_back(std::move(v));
    return true;
  }

  /// `name N`, N a whole number >= 1 that fits an int (steps, intervals).
  bool count(const char *name, int &out) {
    uint64_t n = 0;
    if (!ranged(name, 1, INT32_MAX, "a positive integer", n))
      return false;
    if (n) // 0: refused
      out = int(n);
    return true;
  }

  /// `name N`, N a whole number >= 0 (a seed, a size).
  bool whole(const char *name, uint64_t &out) {
    return ranged(name, 0, UINT64_MAX, "a non-negative integer", out);
  }

  /// `name N`, N a whole number in [lo, hi] (a size, a repetition count).
  bool integer(const char *name, uint64_t lo, uint64_t hi, uint64_t &out) {
    return ranged(name, lo, hi,
                  "an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]",
                  out);
  }

  /// `name S`, S a finite number of seconds >= 0.
  bool seconds(const char *name, double &out) {
    std::string v;
    if (!text(name, v))
      return false;
    if (std::optional<double> t = nonNegativeNumber(v))
      out = *t;
    else
      refuse(name, "a number of seconds >= 0", v);
    return true;
  }

  /// `name WORD`, WORD one of `allowed`.
  bool choice(const char *name, std::initializer_list<const char *> allowed,
              std::string &out) {
    std::string v;
    if (!text(name, v))
      return false;
    std::string list;
    for (const char *a : allowed) {
      if (v == a) {
        out = v;
        return true;
      }
      list += (list.empty() ? "'" : " or '") + std::string(a) + "'";
    }
    refuse(name, list, v);
    return true;
  }

  /// A word that is not a flag ("-" counts as a file): into `out`; a
  /// second one is an error naming both (`what` says what they are).
  bool positional(std::string &out, const char *what) {
    const std::string &w = word();
    if (w.size() > 1 && w[0] == '-')
      return false;
    if (!out.empty())
      fail(std::string("more than one ") + what + " ('" + out + "', '" + w +
           "')");
    else
      out = w;
    return true;
  }

  /// The current word is no flag the tool knows.
  void unknown() { fail("unknown argument '" + word() + "'"); }
  /// Records an error of the tool's own (the first one stays).
  void fail(const std::string &message) {
    if (failure.empty())
      failure = message;
  }
  /// "" or the first error.
  const std::string &error() const { return failure; }

private:
  /// `name N`, N whole in [lo, hi] into `out`; else refused as not `what`.
  bool ranged(const char *name, uint64_t lo, uint64_t hi,
              const std::string &what, uint64_t &out) {
    std::string v;
    if (!text(name, v))
      return false;
    std::optional<uint64_t> n = wholeNumber(v);
    if (n && *n >= lo && *n <= hi)
      out = *n;
    else
      refuse(name, what, v);
    return true;
  }

  /// A value that is not what `name` takes (a missing value was refused
  /// already: fail keeps the first error).
  void refuse(const char *name, const std::string &what, const std::string &v) {
    fail(std::string(name) + " needs " + what + ", got '" + v + "'");
  }

  std::vector<std::string> words;
  size_t at = 0, ahead = 0; // the current word, the next one
  std::string failure;
};

} // namespace moe_rt::options

#endif /* MOE_RT_COMMAND_LINE_H */
