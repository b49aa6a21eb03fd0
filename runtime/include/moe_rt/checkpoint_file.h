/*===- checkpoint_file.h - a training run's state on disk -------*- C++ -*-===*
 *
 * What `moe-run --checkpoint DIR --save-every N` and generated steps
 * (moe_step_save_checkpoint) write, and `--resume DIR` reads back
 * (docs/checkpoint-format.md):
 *
 *   DIR/LATEST              "step-<N>\n": the last complete checkpoint
 *   DIR/step-<N>/manifest   text: model, grid, counters, parameter layout
 *   DIR/step-<N>/rank<r>.bin  binary: rank r's parameters and optimizer
 *                           state, each tensor with its own checksum
 *
 * Atomic: every file is written to a temporary name, fsync'ed and renamed;
 * a checkpoint is assembled in DIR/.staging-<N>, renamed to DIR/step-<N>
 * only when every rank's file and the manifest are there, and LATEST moves
 * last. A writer killed at any point leaves LATEST naming the previous
 * complete checkpoint (or no LATEST at all).
 *
 * Header-only C++ with no dependency beyond POSIX, so that the runtime
 * (moe-run, generated steps) and compiler-side tools read one format.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_CHECKPOINT_FILE_H
#define MOE_RT_CHECKPOINT_FILE_H

#include "moe_rt/expert_placement.h"
#include "moe_rt/params_file.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moe_rt {
namespace checkpoint {

constexpr char kRankMagic[8] = {'M', 'O', 'E', 'C', 'K', 'P', 'T', '1'};
constexpr const char *kManifestMagic = "moe-checkpoint";
// Version 2: data_position counts samples over all ranks (text_data.h);
// version 1 counted steps, which resuming on another grid cannot use.
constexpr int kVersion = 2;

/// What a tensor of the step is: a parameter or optimizer state.
enum class Role : uint8_t { param = 0, state = 1 };

/// One tensor of one rank (F32, row-major).
struct Tensor {
  std::string name;
  Role role = Role::param;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// The counters a run resumes from: updates done, where the data reader
/// is (windows consumed per rank) and the base seed of the step's noise.
struct Counters {
  uint64_t step = 0, dataPosition = 0, seed = 0;
};

/// Each placed block's slot table (moe_rt/expert_placement.h; a block
/// without one: expert parallelism's layout).
using expert_placement::Placement;

/// One rank's file.
struct RankState {
  int rank = 0, ranks = 1;
  Counters counters;
  std::vector<Tensor> tensors;
  /// The expert placement `tensors` are laid out in (set by reading: the
  /// checkpoint's on its own grid, the reader's when resharded).
  Placement placement;
};

/// How a tensor is laid out over the grid: replicated on every rank, or
/// split along dimension 0 over the expert-parallel group (each rank holds
/// its experts' slice).
enum class Layout { replicated, experts };

struct LayoutEntry {
  std::string name;
  Role role = Role::param;
  Layout layout = Layout::replicated;
  std::vector<int64_t> localShape;
  /// An expert tensor's MoE block, whose expert placement lays it out
  /// (-1: none known). Not part of the fingerprint.
  int64_t block = -1;
};

/// DIR/step-<N>/manifest.
struct Manifest {
  std::string model; // a fingerprint of the step's parameters
  std::vector<int64_t> grid;
  std::vector<int64_t> epAxes;
  int ranks = 1;
  Counters counters;
  std::vector<LayoutEntry> tensors;
  /// The expert placement the expert tensors were saved in: the tables
  /// that are not expert parallelism's layout.
  Placement placement;
};

// Shapes are spelt as in the parameter file ("4x8", "-" for a scalar).
using params_file::formatShape;
using params_file::parseShape;

inline const char *roleName(Role r) {
  return r == Role::param ? "param" : "state";
}

/// FNV-1a, 64 bits: the checksum of each tensor record and of each file.
inline uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

/*--- Atomic files ----------------------------------------------------------*/

namespace detail {

inline bool syncPath(const std::string &path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

inline std::string parentOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace detail

/// Writes `bytes` to `path` atomically: PATH.tmp, fsync, rename, fsync of
/// the directory.
inline bool writeAtomically(const std::string &path, const std::string &bytes,
                            std::string &error) {
  std::string tmp = path + ".tmp";
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    error = "cannot write '" + tmp + "': " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot write '" + path + "': " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  if (!detail::syncPath(detail::parentOf(path), true)) {
    error = "cannot sync the directory of '" + path + "'";
    return false;
  }
  return true;
}

inline bool readWhole(const std::string &path, std::string &bytes,
                      std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read '" + path + "'";
    return false;
  }
  std::ostringstream s;
  s << in.rdbuf();
  bytes = s.str();
  return true;
}

/*--- Rank files ------------------------------------------------------------*/

namespace detail {

inline void put(std::string &out, const void *p, size_t n) {
  out.append(static_cast<const char *>(p), n);
}
template <class T> void putValue(std::string &out, T v) { put(out, &v, sizeof v); }

/// A bounds-checked reader over a file's bytes.
struct Reader {
  const std::string &bytes;
  size_t pos = 0;
  bool take(void *dst, size_t n) {
    if (n > bytes.size() - pos)
      return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  }
  template <class T> bool value(T &v) { return take(&v, sizeof v); }
};

} // namespace detail

inline std::string encodeRank(const RankState &s) {
  std::string out;
  detail::put(out, kRankMagic, sizeof kRankMagic);
  detail::putValue<uint32_t>(out, kVersion);
  detail::putValue<uint32_t>(out, uint32_t(s.rank));
  detail::putValue<uint32_t>(out, uint32_t(s.ranks));
  detail::putValue<uint64_t>(out, s.counters.step);
  detail::putValue<uint64_t>(out, s.counters.dataPosition);
  detail::putValue<uint64_t>(out, s.counters.seed);
  detail::putValue<uint32_t>(out, uint32_t(s.tensors.size()));
  for (const Tensor &t : s.tensors) {
    size_t start = out.size();
    detail::putValue<uint32_t>(out, uint32_t(t.name.size()));
    detail::put(out, t.name.data(), t.name.size());
    detail::putValue<uint8_t>(out, uint8_t(t.role));
    detail::putValue<uint32_t>(out, uint32_t(t.shape.size()));
    for (int64_t d : t.shape)
      detail::putValue<int64_t>(out, d);
    detail::putValue<uint64_t>(out, uint64_t(t.values.size()));
    detail::put(out, t.values.data(), t.values.size() * sizeof(float));
    detail::putValue<uint64_t>(out, fnv1a(out.data() + start, out.size() - start));
  }
  detail::putValue<uint64_t>(out, fnv1a(out.data(), out.size()));
  return out;
}

/// Parses a rank file's bytes. `file` names it in errors, which also name
/// the tensor at fault.
inline bool decodeRank(const std::string &bytes, const std::string &file,
                       RankState &s, std::string &error) {
  auto bad = [&](const std::string &what) {
    error = "checkpoint file '" + file + "': " + what;
    return false;
  };
  detail::Reader r{bytes};
  char magic[sizeof kRankMagic];
  uint32_t version = 0, rank = 0, ranks = 0, count = 0;
  if (!r.take(magic, sizeof magic) ||
      std::memcmp(magic, kRankMagic, sizeof magic) != 0)
    return bad("not a moe checkpoint rank file");
  if (!r.value(version) || version != kVersion)
    return bad("version " + std::to_string(version) + ", this runtime reads " +
               std::to_string(kVersion));
  if (bytes.size() < sizeof(uint64_t) + r.pos)
    return bad("truncated");
  uint64_t fileSum = 0;
  std::memcpy(&fileSum, bytes.data() + bytes.size() - sizeof fileSum, sizeof fileSum);
  if (!r.value(rank) || !r.value(ranks) || !r.value(s.counters.step) ||
      !r.value(s.counters.dataPosition) || !r.value(s.counters.seed) ||
      !r.value(count))
    return bad("truncated header");
  if (ranks < 1 || rank >= ranks)
    return bad("rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  s.rank = int(rank);
  s.ranks = int(ranks);
  s.tensors.clear();
  std::set<std::string> names;
  for (uint32_t k = 0; k < count; ++k) {
    size_t start = r.pos;
    Tensor t;
    uint32_t nameLen = 0, rankOfShape = 0;
    uint8_t role = 0;
    uint64_t numel = 0, sum = 0;
    std::string where = "tensor #" + std::to_string(k);
    if (!r.value(nameLen) || nameLen > 4096 || nameLen > bytes.size() - r.pos)
      return bad(where + ": truncated or damaged name");
    t.name.assign(bytes.data() + r.pos, nameLen);
    r.pos += nameLen;
    where = "tensor '" + t.name + "'";
    if (!r.value(role) || role > 1 || !r.value(rankOfShape) || rankOfShape > 8)
      return bad(where + ": damaged header");
    t.role = Role(role);
    uint64_t product = 1;
    for (uint32_t d = 0; d < rankOfShape; ++d) {
      int64_t dim = 0;
      if (!r.value(dim) || dim < 0 || (dim && product > (bytes.size() / 4) / uint64_t(dim)))
        return bad(where + ": truncated or damaged (its shape holds more "
                           "values than the file)");
      t.shape.push_back(dim);
      product *= uint64_t(dim);
    }
    if (!r.value(numel) || numel != product)
      return bad(where + ": " + std::to_string(numel) + " values for shape " +
                 formatShape(t.shape));
    if (numel > (bytes.size() - r.pos) / sizeof(float))
      return bad(where + ": truncated (" + std::to_string(numel) +
                 " values expected)");
    t.values.resize(numel);
    r.take(t.values.data(), numel * sizeof(float));
    uint64_t want = fnv1a(bytes.data() + start, r.pos - start);
    if (!r.value(sum))
      return bad(where + ": truncated");
    if (sum != want)
      return bad(where + ": checksum mismatch (the file is corrupted)");
    if (!names.insert(t.name).second)
      return bad(where + " appears twice");
    s.tensors.push_back(std::move(t));
  }
  if (r.pos + sizeof fileSum != bytes.size())
    return bad("unexpected bytes after the last tensor");
  if (fnv1a(bytes.data(), r.pos) != fileSum)
    return bad("file checksum mismatch (the header is corrupted)");
  return true;
}

/*--- Manifests -------------------------------------------------------------*/

inline std::string encodeManifest(const Manifest &m) {
  std::ostringstream o;
  o << kManifestMagic << " " << kVersion << "\n";
  o << "model " << m.model << "\n";
  o << "grid " << formatShape(m.grid) << "\n";
  o << "ep_axes";
  for (int64_t a : m.epAxes)
    o << " " << a;
  o << "\nranks " << m.ranks << "\n";
  o << "step " << m.counters.step << "\n";
  o << "data_position " << m.counters.dataPosition << "\n";
  o << "seed " << m.counters.seed << "\n";
  for (const auto &[block, table] : m.placement) {
    o << "placement " << block << " ";
    for (size_t i = 0; i < table.size(); ++i)
      o << (i ? "," : "") << table[i];
    o << "\n";
  }
  o << "tensors " << m.tensors.size() << "\n";
  for (const LayoutEntry &e : m.tensors) {
    o << e.name << " " << roleName(e.role) << " "
      << (e.layout == Layout::experts ? "experts" : "replicated") << " "
      << formatShape(e.localShape);
    if (e.block >= 0)
      o << " block " << e.block;
    o << "\n";
  }
  return o.str();
}


inline bool decodeManifest(const std::string &text, const std::string &file,
                           Manifest &m, std::string &error) {
  auto bad = [&](const std::string &what) {
    error = "checkpoint manifest '" + file + "': " + what;
    return false;
  };
  std::istringstream in(text);
  std::string line, word;
  int version = 0;
  auto next = [&](const char *key) -> std::istringstream {
    if (!std::getline(in, line))
      line.clear();
    std::istringstream ls(line);
    ls >> word;
    if (word != key)
      ls.setstate(std::ios::failbit);
    return ls;
  };
  {
    std::istringstream ls = next(kManifestMagic);
    if (!(ls >> version))
      return bad("not a moe checkpoint manifest");
    if (version != kVersion)
      return bad("version " + std::to_string(version) +
                 ", this runtime reads " + std::to_string(kVersion));
  }
  {
    std::istringstream ls = next("model");
    if (!(ls >> m.model))
      return bad("no model line");
  }
  {
    std::istringstream ls = next("grid");
    std::string dims;
    if (!(ls >> dims) || !parseShape(dims, m.grid))
      return bad("bad grid line");
  }
  {
    std::istringstream ls = next("ep_axes");
    if (!ls)
      return bad("no ep_axes line");
    m.epAxes.clear();
    int64_t a;
    while (ls >> a)
      m.epAxes.push_back(a);
  }
  {
    std::istringstream ls = next("ranks");
    if (!(ls >> m.ranks) || m.ranks < 1)
      return bad("bad ranks line");
  }
  const char *counterKeys[] = {"step", "data_position", "seed"};
  uint64_t *counters[] = {&m.counters.step, &m.counters.dataPosition,
                          &m.counters.seed};
  for (int k = 0; k < 3; ++k) {
    std::istringstream ls = next(counterKeys[k]);
    if (!(ls >> *counters[k]))
      return bad(std::string("bad ") + counterKeys[k] + " line");
  }
  // Optional: one "placement <block> <slot table>" line per placed block.
  m.placement.clear();
  std::streampos before = in.tellg();
  while (std::getline(in, line) && line.compare(0, 10, "placement ") == 0) {
    std::istringstream ls(line);
    int64_t block = -1;
    std::string list;
    std::vector<int64_t> table;
    if (!(ls >> word >> block >> list) || block < 0 ||
        !expert_placement::parseList(list, table).empty() || table.empty() ||
        !expert_placement::checkSlots(table.data(), 1, int64_t(table.size()))
             .empty() ||
        m.placement.count(block))
      return bad("bad placement line '" + line.substr(0, 80) + "'");
    m.placement[block] = std::move(table);
    before = in.tellg();
  }
  in.clear();
  in.seekg(before);
  size_t count = 0;
  {
    std::istringstream ls = next("tensors");
    if (!(ls >> count) || count > 1000000)
      return bad("bad tensors line");
  }
  m.tensors.clear();
  for (size_t k = 0; k < count; ++k) {
    if (!std::getline(in, line))
      return bad("truncated: " + std::to_string(k) + " of " +
                 std::to_string(count) + " tensors");
    std::istringstream ls(line);
    LayoutEntry e;
    std::string role, layout, dims;
    if (!(ls >> e.name >> role >> layout >> dims) ||
        (role != "param" && role != "state") ||
        (layout != "replicated" && layout != "experts") ||
        !parseShape(dims, e.localShape) ||
        ((ls >> word) && (word != "block" || !(ls >> e.block) || e.block < 0)))
      return bad("bad tensor line '" + line.substr(0, 80) + "'");
    e.role = role == "param" ? Role::param : Role::state;
    e.layout = layout == "experts" ? Layout::experts : Layout::replicated;
    m.tensors.push_back(std::move(e));
  }
  return true;
}

/*--- Checking a checkpoint against a step -----------------------------------*/

/// Whether the checkpoint's manifest `have` (read from `file`) fits the
/// step and job described by `want` (the manifest they would write): the
/// same grid and every tensor with the same role, layout and local shape.
/// The message names the tensor at fault.
inline bool checkManifest(const Manifest &have, const Manifest &want,
                          const std::string &file, std::string &error) {
  auto bad = [&](const std::string &what) {
    error = "checkpoint manifest '" + file + "': " + what;
    return false;
  };
  if (have.grid != want.grid || have.ranks != want.ranks)
    return bad("written on grid " + formatShape(have.grid) + " (" +
               std::to_string(have.ranks) + " ranks), this job runs grid " +
               formatShape(want.grid) + " (" + std::to_string(want.ranks) +
               " ranks)");
  std::vector<bool> seen(want.tensors.size());
  for (const LayoutEntry &e : have.tensors) {
    size_t k = 0;
    while (k < want.tensors.size() && want.tensors[k].name != e.name)
      ++k;
    if (k == want.tensors.size())
      return bad("tensor '" + e.name +
                 "' is not in this step (another model or optimizer?)");
    const LayoutEntry &w = want.tensors[k];
    if (w.localShape != e.localShape || w.role != e.role ||
        w.layout != e.layout)
      return bad("tensor '" + e.name + "' is " + roleName(e.role) + " " +
                 formatShape(e.localShape) + " in the checkpoint, " +
                 roleName(w.role) + " " + formatShape(w.localShape) +
                 " in this step");
    seen[k] = true;
  }
  for (size_t k = 0; k < seen.size(); ++k)
    if (!seen[k])
      return bad("has no tensor '" + want.tensors[k].name +
                 "' of this step (another model or optimizer?)");
  if (have.model != want.model)
    return bad("model fingerprint " + have.model + ", this step's is " +
               want.model);
  return true;
}

/// Whether rank `rank`'s file (already decoded from `file`) holds what the
/// checked manifest `m` says, in its order.
inline bool checkRankState(const RankState &s, const Manifest &m, int rank,
                           const std::string &file, std::string &error) {
  auto bad = [&](const std::string &what) {
    error = "checkpoint file '" + file + "': " + what;
    return false;
  };
  if (s.rank != rank || s.ranks != m.ranks)
    return bad("holds rank " + std::to_string(s.rank) + " of " +
               std::to_string(s.ranks) + ", expected rank " +
               std::to_string(rank) + " of " + std::to_string(m.ranks));
  if (s.counters.step != m.counters.step ||
      s.counters.dataPosition != m.counters.dataPosition ||
      s.counters.seed != m.counters.seed)
    return bad("counters differ from the manifest's");
  if (s.tensors.size() != m.tensors.size())
    return bad("holds " + std::to_string(s.tensors.size()) +
               " tensors, the manifest " + std::to_string(m.tensors.size()));
  for (size_t k = 0; k < s.tensors.size(); ++k) {
    const Tensor &t = s.tensors[k];
    const LayoutEntry &e = m.tensors[k];
    if (t.name != e.name || t.role != e.role || t.shape != e.localShape)
      return bad("tensor #" + std::to_string(k) + " is '" + t.name + "' " +
                 formatShape(t.shape) + ", the manifest says '" + e.name +
                 "' " + formatShape(e.localShape));
  }
  return true;
}

/// The model fingerprint of a manifest's grid and tensors (FNV-1a of
/// their text), so that the runtime and compiler agree on it.
inline std::string fingerprint(const Manifest &m) {
  std::string text = formatShape(m.grid);
  for (const LayoutEntry &e : m.tensors)
    text += " " + e.name + ":" + roleName(e.role) + ":" +
            (e.layout == Layout::experts ? "experts" : "replicated") + ":" +
            formatShape(e.localShape);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)fnv1a(text.data(), text.size()));
  return hex;
}

/*--- Directories -----------------------------------------------------------*/

inline std::string stepDirName(uint64_t step) {
  return "step-" + std::to_string(step);
}
inline std::string stagingDir(const std::string &root, uint64_t step) {
  return root + "/.staging-" + std::to_string(step);
}
inline std::string rankFileName(int rank) {
  return "rank" + std::to_string(rank) + ".bin";
}

inline bool makeDir(const std::string &path, std::string &error) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST)
    return true;
  error = "cannot create '" + path + "': " + std::strerror(errno);
  return false;
}

/// Removes a directory of plain files (a stale staging or old checkpoint).
inline void removeTree(const std::string &path) {
  if (DIR *d = ::opendir(path.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..")
        std::remove((path + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}

/// Rank 0, once every rank's file is in the staging directory: writes the
/// manifest, renames the staging directory to step-<N>, moves LATEST to it
/// and removes the checkpoint it replaces.
inline bool commit(const std::string &root, const Manifest &m,
                   std::string &error) {
  std::string staging = stagingDir(root, m.counters.step);
  for (int r = 0; r < m.ranks; ++r) {
    struct stat st;
    std::string file = staging + "/" + rankFileName(r);
    if (::stat(file.c_str(), &st) != 0) {
      error = "checkpoint: '" + file + "' is missing";
      return false;
    }
  }
  if (!writeAtomically(staging + "/manifest", encodeManifest(m), error))
    return false;
  std::string finalDir = root + "/" + stepDirName(m.counters.step);
  removeTree(finalDir); // a checkpoint of the same step, from an earlier run
  if (std::rename(staging.c_str(), finalDir.c_str()) != 0) {
    error = "cannot rename '" + staging + "' to '" + finalDir + "': " +
            std::strerror(errno);
    return false;
  }
  if (!detail::syncPath(root, true)) {
    error = "cannot sync '" + root + "'";
    return false;
  }
  std::string previous;
  {
    std::ifstream latest(root + "/LATEST");
    std::getline(latest, previous);
  }
  if (!writeAtomically(root + "/LATEST", stepDirName(m.counters.step) + "\n",
                       error))
    return false;
  if (!previous.empty() && previous != stepDirName(m.counters.step) &&
      previous.compare(0, 5, "step-") == 0 &&
      previous.find('/') == std::string::npos)
    removeTree(root + "/" + previous);
  return true;
}

/// The directory LATEST names.
inline bool latestDir(const std::string &root, std::string &dir,
                      std::string &error) {
  std::ifstream latest(root + "/LATEST");
  std::string name;
  if (!latest || !std::getline(latest, name) || name.compare(0, 5, "step-") ||
      name.find('/') != std::string::npos) {
    error = "'" + root + "' holds no complete checkpoint (no valid LATEST)";
    return false;
  }
  dir = root + "/" + name;
  return true;
}

/// The checkpoint directory `path` names: `path` itself when it holds a
/// manifest (DIR/step-<N>), else the one its LATEST names (DIR).
inline bool checkpointDir(const std::string &path, std::string &dir,
                          std::string &error) {
  struct stat st;
  if (::stat((path + "/manifest").c_str(), &st) == 0) {
    dir = path;
    return true;
  }
  return latestDir(path, dir, error);
}

/// Reads and checks the checkpoint in `dir` (DIR/step-<N>) for rank `rank`
/// of a job whose manifest would be `want` (its counters are ignored):
/// nothing is written, and on success `state` holds the rank's tensors in
/// `want`'s order.
inline bool readCheckpointAt(const std::string &dir, const Manifest &want,
                             int rank, RankState &state, std::string &error) {
  std::string bytes;
  std::string manifestPath = dir + "/manifest";
  Manifest have;
  if (!readWhole(manifestPath, bytes, error) ||
      !decodeManifest(bytes, manifestPath, have, error) ||
      !checkManifest(have, want, manifestPath, error))
    return false;
  std::string file = dir + "/" + rankFileName(rank);
  if (!readWhole(file, bytes, error) || !decodeRank(bytes, file, state, error) ||
      !checkRankState(state, have, rank, file, error))
    return false;
  state.placement = have.placement; // the job resumes under it
  return true;
}

/// readCheckpointAt on the latest checkpoint under `root`.
inline bool readLatest(const std::string &root, const Manifest &want, int rank,
                       RankState &state, std::string &error) {
  std::string dir;
  return latestDir(root, dir, error) &&
         readCheckpointAt(dir, want, rank, state, error);
}

/*--- Resharding -------------------------------------------------------------*/

/// Rank `rank`'s coordinates on `grid` (row-major: the last axis fastest).
inline std::vector<int64_t> gridCoord(const std::vector<int64_t> &grid,
                                      int rank) {
  std::vector<int64_t> coord(grid.size());
  int64_t r = rank;
  for (size_t d = grid.size(); d-- > 0;) {
    coord[d] = r % grid[d];
    r /= grid[d];
  }
  return coord;
}

/// Rank `rank`'s index in the expert-parallel group of `grid` (row-major
/// coordinates, the EP axes' in order), as the step shards its experts.
inline int64_t expertIndex(const std::vector<int64_t> &grid,
                           const std::vector<int64_t> &epAxes, int rank) {
  std::vector<int64_t> coord = gridCoord(grid, rank);
  int64_t index = 0;
  for (int64_t a : epAxes)
    index = index * grid[size_t(a)] + coord[size_t(a)];
  return index;
}

/// Rank `rank`'s index over the other axes: which data-parallel replica
/// of its experts it holds (0 on a grid whose EP axes are all axes).
inline int64_t replicaIndex(const std::vector<int64_t> &grid,
                            const std::vector<int64_t> &epAxes, int rank) {
  std::vector<int64_t> coord = gridCoord(grid, rank);
  int64_t index = 0;
  for (size_t a = 0; a < grid.size(); ++a) {
    bool ep = false;
    for (int64_t e : epAxes)
      ep = ep || size_t(e) == a;
    if (!ep)
      index = index * grid[a] + coord[a];
  }
  return index;
}

inline int64_t expertGroupSize(const std::vector<int64_t> &grid,
                               const std::vector<int64_t> &epAxes) {
  int64_t n = 1;
  for (int64_t a : epAxes)
    n *= grid[size_t(a)];
  return n;
}

/// Reads the checkpoint in `dir` (DIR/step-<N>) written on any grid and
/// gives rank `rank` of the job described by `want` its tensors:
/// replicated tensors (checked bit-equal on every rank that wrote them) as
/// they are, expert tensors as this rank's slice of the experts of all
/// ranks (in expert-group order, checked equal where ranks outside the
/// group hold the same experts). Every file is read and checked before
/// `state` is filled; nothing is written. Without a grid change it is
/// readCheckpointAt.
inline bool readReshardedAt(const std::string &dir, const Manifest &want,
                            int rank, RankState &state, std::string &error) {
  std::string bytes;
  std::string manifestPath = dir + "/manifest";
  Manifest have;
  if (!readWhole(manifestPath, bytes, error) ||
      !decodeManifest(bytes, manifestPath, have, error))
    return false;
  if (have.grid == want.grid && have.ranks == want.ranks)
    return readCheckpointAt(dir, want, rank, state, error);
  auto bad = [&](const std::string &what) {
    error = "checkpoint manifest '" + manifestPath + "': " + what;
    return false;
  };
  for (int64_t a : have.epAxes)
    if (a < 0 || size_t(a) >= have.grid.size())
      return bad("ep axis " + std::to_string(a) + " is not an axis of its grid");
  int64_t haveGroup = expertGroupSize(have.grid, have.epAxes),
          wantGroup = expertGroupSize(want.grid, want.epAxes);
  int64_t haveRanks = 1;
  for (int64_t d : have.grid)
    haveRanks *= d;
  if (haveRanks != have.ranks)
    return bad("grid " + formatShape(have.grid) + " is not " +
               std::to_string(have.ranks) + " ranks");
  // The same tensors (each named when it is missing on either side);
  // experts with the same global count.
  for (const LayoutEntry &e : have.tensors) {
    bool known = false;
    for (const LayoutEntry &w : want.tensors)
      known = known || w.name == e.name;
    if (!known)
      return bad("tensor '" + e.name +
                 "' is not in this step (another model or optimizer?)");
  }
  for (const LayoutEntry &w : want.tensors) {
    const LayoutEntry *h = nullptr;
    for (const LayoutEntry &e : have.tensors)
      if (e.name == w.name)
        h = &e;
    if (!h)
      return bad("has no tensor '" + w.name +
                 "' of this step (another model or optimizer?)");
    std::vector<int64_t> hs = h->localShape, ws = w.localShape;
    bool ok = h->role == w.role && h->layout == w.layout &&
              hs.size() == ws.size();
    if (ok && w.layout == Layout::experts && !hs.empty()) {
      ok = hs[0] * haveGroup == ws[0] * wantGroup;
      hs[0] = ws[0] = 0;
    }
    if (!ok || hs != ws)
      return bad("tensor '" + w.name + "' is " + roleName(h->role) + " " +
                 formatShape(h->localShape) + " (" +
                 (h->layout == Layout::experts ? "experts" : "replicated") +
                 ") on grid " + formatShape(have.grid) +
                 ", which does not map to " + roleName(w.role) + " " +
                 formatShape(w.localShape) + " on grid " +
                 formatShape(want.grid));
  }
  if (have.tensors.size() != want.tensors.size())
    return bad("holds " + std::to_string(have.tensors.size()) +
               " tensors for this step's " +
               std::to_string(want.tensors.size()) + " (one listed twice)");
  // Every rank's file, checked, before anything is assembled.
  std::vector<RankState> files(size_t(have.ranks));
  for (int r = 0; r < have.ranks; ++r) {
    std::string file = dir + "/" + rankFileName(r);
    if (!readWhole(file, bytes, error) ||
        !decodeRank(bytes, file, files[size_t(r)], error) ||
        !checkRankState(files[size_t(r)], have, r, file, error))
      return false;
  }
  int64_t mine = expertIndex(want.grid, want.epAxes, rank);
  state = RankState();
  state.rank = rank;
  state.ranks = want.ranks;
  state.counters = have.counters;
  state.placement = want.placement;
  for (const LayoutEntry &w : want.tensors) {
    size_t k = 0;
    while (have.tensors[k].name != w.name)
      ++k;
    Tensor out{w.name, w.role, w.localShape, {}};
    size_t n = files[0].tensors[k].values.size();
    // Ranks that must agree: all (replicated), or those of one EP index.
    std::vector<const Tensor *> byIndex(size_t(haveGroup), nullptr);
    for (int r = 0; r < have.ranks; ++r) {
      const Tensor &t = files[size_t(r)].tensors[k];
      int64_t idx = w.layout == Layout::experts
                        ? expertIndex(have.grid, have.epAxes, r)
                        : 0;
      const Tensor *&first = byIndex[size_t(idx)];
      if (first && std::memcmp(first->values.data(), t.values.data(),
                               n * sizeof(float)) != 0)
        return bad("tensor '" + w.name + "' differs between rank " +
                   std::to_string(r) + " and another rank holding the same " +
                   (w.layout == Layout::experts ? "experts" : "replica"));
      if (!first)
        first = &t;
    }
    if (w.layout == Layout::replicated) {
      out.values = byIndex[0]->values;
    } else {
      // Global expert e lives on source index e / haveLocal; this rank
      // takes [mine * wantLocal, (mine + 1) * wantLocal).
      // Under an expert placement, slots hold other experts: slot j of
      // this job holds expert wantTable[j], which the checkpoint keeps in
      // its slot physical[expert].
      int64_t haveLocal = have.tensors[k].localShape[0],
              wantLocal = w.localShape[0];
      size_t per = haveLocal ? n / size_t(haveLocal) : 0;
      int64_t block = w.block;
      std::vector<int64_t> haveTable = expert_placement::tableOf(
          have.placement, block, {haveGroup, haveGroup * haveLocal});
      std::vector<int64_t> wantTable = expert_placement::tableOf(
          want.placement, block, {wantGroup, wantGroup * wantLocal});
      std::vector<int64_t> physical;
      if ((block < 0 && (have.placement.size() || want.placement.size())) ||
          int64_t(haveTable.size()) != haveGroup * haveLocal ||
          int64_t(wantTable.size()) != wantGroup * wantLocal ||
          !expert_placement::checkSlots(haveTable.data(), 1,
                                        int64_t(haveTable.size()), &physical)
               .empty())
        return bad("tensor '" + w.name +
                   "': its expert placement does not fit its " +
                   std::to_string(haveGroup * haveLocal) + " experts");
      for (int64_t j = mine * wantLocal; j < (mine + 1) * wantLocal; ++j) {
        int64_t p = physical[size_t(wantTable[size_t(j)])];
        const Tensor *src = byIndex[size_t(p / haveLocal)];
        const float *from = src->values.data() + size_t(p % haveLocal) * per;
        out.values.insert(out.values.end(), from, from + per);
      }
    }
    state.tensors.push_back(std::move(out));
  }
  return true;
}

/// readReshardedAt on the latest checkpoint under `root`.
inline bool readResharded(const std::string &root, const Manifest &want,
                          int rank, RankState &state, std::string &error) {
  std::string dir;
  return latestDir(root, dir, error) &&
         readReshardedAt(dir, want, rank, state, error);
}

/// The manifest of the step `m` describes gathered on one rank: no grid
/// axis to shard over, every expert tensor holding all experts. Reading a
/// checkpoint for it (readReshardedAt, rank 0) collects the whole model,
/// every rank's experts in expert order: what an export needs.
inline Manifest wholeModel(const Manifest &m) {
  Manifest one;
  one.grid = {1};
  one.ranks = 1;
  one.counters = m.counters;
  int64_t group = expertGroupSize(m.grid, m.epAxes);
  for (LayoutEntry e : m.tensors) {
    if (e.layout == Layout::experts && !e.localShape.empty())
      e.localShape[0] *= group;
    one.tensors.push_back(std::move(e));
  }
  one.model = fingerprint(one);
  return one;
}

} // namespace checkpoint
} // namespace moe_rt

#endif /* MOE_RT_CHECKPOINT_FILE_H */
