//===- moe-trace.cpp - routing traces from the command line ---------------===//
//
//   moe-trace check FILE          is it a valid trace? (a summary)
//   moe-trace stats FILE          per record: balance and all-to-all volumes
//   moe-trace synth ... -o FILE   a synthetic trace (skew, locality)
//   moe-trace netmoe FILE         NetMoE's placement replayed over a trace
//   moe-trace time-solve ...      the placement solve's time (benchmark)
//
// docs/tools/moe-trace.md.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "moe_rt/option_values.h"

#include <cstdio>

namespace moe_trace {

bool Options::parse(const std::vector<std::string> &args,
                    const std::set<std::string> &valued,
                    const std::set<std::string> &flags, std::string &error) {
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string &a = args[k];
    if (a.size() < 2 || a[0] != '-' || a == "-") {
      positional.push_back(a);
      continue;
    }
    std::string name = a.substr(a[1] == '-' ? 2 : 1), value;
    size_t eq = name.find('=');
    bool inline_ = eq != std::string::npos;
    if (inline_) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name) && !inline_) {
      values[name] = "1";
    } else if (valued.count(name)) {
      if (!inline_) {
        if (k + 1 >= args.size()) {
          error = "option --" + name + " needs a value";
          return false;
        }
        value = args[++k];
      }
      values[name] = value;
    } else {
      error = "unknown option '" + a + "' (see moe-trace --help)";
      return false;
    }
  }
  return true;
}

std::string Options::text(const std::string &name,
                          const std::string &fallback) const {
  auto it = values.find(name);
  return it == values.end() ? fallback : it->second;
}

bool Options::integer(const std::string &name, int64_t lo, int64_t hi,
                      int64_t fallback, int64_t &out,
                      std::string &error) const {
  auto it = values.find(name);
  if (it == values.end()) {
    out = fallback;
    return true;
  }
  std::optional<uint64_t> v = moe_rt::options::wholeNumber(it->second);
  if (!v || *v > uint64_t(INT64_MAX) || int64_t(*v) < lo ||
      int64_t(*v) > hi) {
    error = "--" + name + " '" + it->second + "' is not a whole number in [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  out = int64_t(*v);
  return true;
}

bool Options::number(const std::string &name, double lo, double hi,
                     double fallback, double &out, std::string &error) const {
  auto it = values.find(name);
  if (it == values.end()) {
    out = fallback;
    return true;
  }
  std::optional<double> v = moe_rt::options::nonNegativeNumber(it->second);
  if (!v || *v < lo || *v > hi) {
    error = "--" + name + " '" + it->second + "' is not a number in [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  out = *v;
  return true;
}

int fail(const std::string &command, const std::string &message) {
  std::fprintf(stderr, "moe-trace %s: error: %s\n", command.c_str(),
               message.c_str());
  return 1;
}

} // namespace moe_trace

static const char *kUsage =
    "usage: moe-trace <command> [options]\n"
    "  check FILE               validate a routing trace, print a summary\n"
    "  stats FILE [--json]      per record: load balance, all-to-all volumes\n"
    "  synth -o FILE [options]  write a synthetic trace (see docs)\n"
    "  netmoe FILE [--predictor none|transition|oracle] [--decay D] [--json]\n"
    "                           replay NetMoE's sample placement over a trace\n"
    "  time-solve [options]     time the placement solve (benchmark)\n"
    "docs/tools/moe-trace.md describes every option.\n";

int main(int argc, char **argv) {
  using namespace moe_trace;
  if (argc < 2 || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "check")
    return runCheck(args);
  if (command == "stats")
    return runStats(args);
  if (command == "synth")
    return runSynth(args);
  if (command == "netmoe")
    return runNetMoe(args);
  if (command == "time-solve")
    return runTimeSolve(args);
  std::fprintf(stderr, "moe-trace: error: unknown command '%s'\n%s",
               command.c_str(), kUsage);
  return 1;
}
