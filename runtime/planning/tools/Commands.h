//===- Commands.h - moe-trace's subcommands and their options ---*- C++ -*-===//
//
// docs/tools/moe-trace.md. Each subcommand reads its options through
// Options, which refuses unknown options and numbers that are not whole
// (moe_rt/option_values.h), naming the option.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRACE_COMMANDS_H
#define MOE_TRACE_COMMANDS_H

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace moe_trace {

class Options {
public:
  /// Parses "--name=value", "--name value" (for names in `valued`),
  /// "--flag" (for names in `flags`) and positional words.
  bool parse(const std::vector<std::string> &args,
             const std::set<std::string> &valued,
             const std::set<std::string> &flags, std::string &error);

  bool has(const std::string &name) const { return values.count(name); }
  std::string text(const std::string &name, const std::string &fallback) const;
  /// The option as an integer in [lo, hi] (fallback when absent); false
  /// with `error` naming the option when it is not one.
  bool integer(const std::string &name, int64_t lo, int64_t hi,
               int64_t fallback, int64_t &out, std::string &error) const;
  bool number(const std::string &name, double lo, double hi, double fallback,
              double &out, std::string &error) const;

  std::vector<std::string> positional;

private:
  std::map<std::string, std::string> values;
};

/// Each returns the process exit status; errors go to stderr as
/// "moe-trace <command>: error: ...".
int runCheck(const std::vector<std::string> &args);
int runStats(const std::vector<std::string> &args);
int runSynth(const std::vector<std::string> &args);
int runNetMoe(const std::vector<std::string> &args);
int runTimeSolve(const std::vector<std::string> &args);

int fail(const std::string &command, const std::string &message);

} // namespace moe_trace

#endif // MOE_TRACE_COMMANDS_H
