/*===- params_file.h - a model's initial parameters for every rank -*- C++ -*-===*
 *
 * The parameter file moe_compile_model writes next to a generated step
 * (docs/codegen.md "Initial parameters"): moe-export-params computes each
 * rank's initial parameters as moe-run does (the ONNX file's weights, each
 * rank its own experts) and writes them here; moe_step_load_params reads
 * this rank's section back. Text, so that a reader can look at it and the
 * values round-trip exactly (%.9g is exact for float32):
 *
 *   moe-params 1 ranks P parameters N
 *   rank 0
 *   <name> <d0>x<d1>... v v v ...        N lines, in the step's order
 *   rank 1
 *   ...
 *
 * A scalar's shape is written "-". Header-only C++ (the writer runs in a
 * compiler tool, the reader in the runtime) with no dependencies.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_PARAMS_FILE_H
#define MOE_RT_PARAMS_FILE_H

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace moe_rt {
namespace params_file {

constexpr const char *kMagic = "moe-params";
constexpr int kVersion = 1;

/// One parameter of one rank.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// "4x8" ("-" for a scalar), as the file and error messages spell shapes.
inline std::string formatShape(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "-";
  std::string s;
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? "x" : "") + std::to_string(shape[d]);
  return s;
}

/// The inverse of formatShape; false for anything it does not write
/// (an empty or non-numeric dimension, one over 12 digits, "4x").
inline bool parseShape(const std::string &text, std::vector<int64_t> &shape) {
  shape.clear();
  if (text == "-")
    return true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('x', pos);
    if (end == std::string::npos)
      end = text.size();
    std::string dim = text.substr(pos, end - pos);
    if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos ||
        dim.size() > 12)
      return false;
    shape.push_back(std::stoll(dim));
    pos = end + 1;
  }
  return !shape.empty();
}

/*--- Writing ---------------------------------------------------------------*/

inline void writeHeader(std::FILE *f, int ranks, int parameters) {
  std::fprintf(f, "%s %d ranks %d parameters %d\n", kMagic, kVersion, ranks,
               parameters);
}
inline void writeRank(std::FILE *f, int rank) {
  std::fprintf(f, "rank %d\n", rank);
}
inline void writeTensor(std::FILE *f, const std::string &name,
                        const std::vector<int64_t> &shape,
                        const float *values) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::fprintf(f, "%s %s", name.c_str(), formatShape(shape).c_str());
  for (int64_t k = 0; k < n; ++k)
    std::fprintf(f, " %.9g", values[k]);
  std::fprintf(f, "\n");
}

/*--- Reading ---------------------------------------------------------------*/

namespace detail {


/// One "<name> <shape> values..." line.
inline bool parseTensor(const std::string &line, Tensor &t,
                        std::string &error) {
  const char *p = line.c_str();
  auto skipSpace = [&] {
    while (*p == ' ' || *p == '\t' || *p == '\r')
      ++p;
  };
  auto word = [&] {
    skipSpace();
    const char *b = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\r')
      ++p;
    return std::string(b, p);
  };
  t.name = word();
  std::string dims = word();
  if (t.name.empty() || dims.empty()) {
    error = "expected '<name> <shape> values...', got '" +
            line.substr(0, 60) + "'";
    return false;
  }
  if (!parseShape(dims, t.shape)) {
    error = "parameter '" + t.name + "': bad shape '" + dims + "'";
    return false;
  }
  // Each value takes at least one character of the line, so a shape that
  // claims more than the line holds is refused before anything is
  // allocated (a damaged "999999999999x999999999999" would overflow).
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d != 0 && n > static_cast<int64_t>(line.size()) / d) {
      error = "parameter '" + t.name + "': shape " + dims +
              " claims more values than its line holds";
      return false;
    }
    n *= d;
  }
  t.values.clear();
  t.values.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    skipSpace();
    char *end = nullptr;
    errno = 0;
    float v = std::strtof(p, &end);
    // ERANGE on a denormal is fine (%.9g wrote it); only "no number" is not.
    if (end == p) {
      error = "parameter '" + t.name + "' (" + dims + "): " +
              std::to_string(k) + " values, expected " + std::to_string(n);
      return false;
    }
    t.values.push_back(v);
    p = end;
  }
  skipSpace();
  if (*p) {
    error = "parameter '" + t.name + "' (" + dims + "): more than " +
            std::to_string(n) + " values";
    return false;
  }
  return true;
}

} // namespace detail

/// Reads the parameters of `rank` from a file written for `ranks` ranks.
/// Returns false with `error` set (what is wrong, and where) when the
/// stream is not a parameter file, was written for another number of
/// ranks, lacks the rank's section, or a line is malformed.
inline bool readRank(std::istream &in, int rank, int ranks,
                     std::vector<Tensor> &out, std::string &error) {
  out.clear();
  std::string line;
  if (!std::getline(in, line)) {
    error = "empty file, not a parameter file";
    return false;
  }
  std::istringstream header(line);
  std::string magic, ranksWord, paramsWord;
  int version = 0, fileRanks = 0, parameters = -1;
  header >> magic >> version >> ranksWord >> fileRanks >> paramsWord >>
      parameters;
  if (magic != kMagic || ranksWord != "ranks" || paramsWord != "parameters" ||
      !header || fileRanks < 1 || parameters < 0) {
    error = "not a parameter file (first line '" + line.substr(0, 60) +
            "', expected '" + kMagic + " " + std::to_string(kVersion) +
            " ranks P parameters N')";
    return false;
  }
  if (version != kVersion) {
    error = "parameter file version " + std::to_string(version) +
            ", this runtime reads version " + std::to_string(kVersion);
    return false;
  }
  if (fileRanks != ranks) {
    error = "written for " + std::to_string(fileRanks) +
            " ranks, the job has " + std::to_string(ranks) +
            " (rebuild it for this grid, or run with mpirun -np " +
            std::to_string(fileRanks) + ")";
    return false;
  }
  const std::string want = "rank " + std::to_string(rank);
  int64_t lineNo = 1;
  bool found = false;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line == want || line == want + "\r") {
      found = true;
      break;
    }
  }
  if (!found) {
    error = "no section '" + want + "' (the file is truncated)";
    return false;
  }
  std::set<std::string> names;
  for (int k = 0; k < parameters; ++k) {
    if (!std::getline(in, line) || line.compare(0, 5, "rank ") == 0) {
      error = "'" + want + "' has " + std::to_string(k) +
              " parameters, the header says " + std::to_string(parameters);
      return false;
    }
    ++lineNo;
    Tensor t;
    std::string lineError;
    if (!detail::parseTensor(line, t, lineError)) {
      error = "line " + std::to_string(lineNo) + ": " + lineError;
      return false;
    }
    if (!names.insert(t.name).second) {
      error = "line " + std::to_string(lineNo) + ": parameter '" + t.name +
              "' appears twice in '" + want + "'";
      return false;
    }
    out.push_back(std::move(t));
  }
  return true;
}

} // namespace params_file
} // namespace moe_rt

#endif /* MOE_RT_PARAMS_FILE_H */
