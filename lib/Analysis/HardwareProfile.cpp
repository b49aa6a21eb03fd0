//===- HardwareProfile.cpp - alpha-beta models of a cluster ---------------===//
//
// JSON through llvm::json (already linked, no exceptions, which LLVM-style
// builds disable); every field is checked by name so that a typo in a
// hand-written profile is an error, not a silent default.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/HardwareProfile.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using llvm::json::Object;

namespace {

// The shipped presets (profiles/*.json), embedded at build time.
struct Preset {
  const char *name;
  const char *json;
};
const Preset presets[] = {
#include "moe/Analysis/ProfilePresets.inc"
};

/// The collectives' JSON names, in CollectiveKind order.
const llvm::StringRef kCollectiveNames[] = {"all_to_all", "all_reduce",
                                            "all_gather", "reduce_scatter"};

class Reader {
public:
  explicit Reader(llvm::StringRef source) : source(source.str()) {}

  llvm::Error error(const llvm::Twine &path, const llvm::Twine &message) {
    return llvm::createStringError(
        llvm::formatv("{0}: {1}: {2}", source, path.str(), message.str()).str(),
        std::make_error_code(std::errc::invalid_argument));
  }

  llvm::Error keys(const Object &object, const llvm::Twine &path,
                   std::initializer_list<llvm::StringRef> allowed) {
    llvm::StringSet<> set;
    for (llvm::StringRef k : allowed)
      set.insert(k);
    for (const auto &entry : object)
      if (!set.contains(entry.first))
        return error(path, "unknown field '" + entry.first.str() + "'");
    return llvm::Error::success();
  }

  llvm::Expected<const Object *>
  object(const Object &parent, llvm::StringRef key, const llvm::Twine &path) {
    const llvm::json::Value *v = parent.get(key);
    if (!v)
      return error(path, "missing field '" + key + "'");
    const Object *o = v->getAsObject();
    if (!o)
      return error(path.concat(".").concat(key), "must be an object");
    return o;
  }

  llvm::Expected<double> number(const Object &parent, llvm::StringRef key,
                                const llvm::Twine &path, bool positive) {
    const llvm::json::Value *v = parent.get(key);
    if (!v)
      return error(path, "missing field '" + key + "'");
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d))
      return error(path.concat(".").concat(key), "must be a finite number");
    if (*d < 0 || (positive && *d == 0))
      return error(path.concat(".").concat(key),
                   positive ? "must be positive" : "must not be negative");
    return *d;
  }

  llvm::Expected<AlphaBeta> alphaBeta(const Object &parent, llvm::StringRef key,
                                      const llvm::Twine &path,
                                      llvm::StringRef betaName) {
    auto o = object(parent, key, path);
    if (!o)
      return o.takeError();
    std::string here = (path + "." + key).str();
    if (auto e = keys(**o, here, {"alpha_us", betaName}))
      return std::move(e);
    auto alpha = number(**o, "alpha_us", here, false);
    if (!alpha)
      return alpha.takeError();
    auto beta = number(**o, betaName, here, true);
    if (!beta)
      return beta.takeError();
    return AlphaBeta{*alpha, *beta};
  }

private:
  std::string source;
};

/// `host_planners`: {"<planner op>": [{<shape field>: int, ..., "us": t}]}.
llvm::Error parseHostPlanners(Reader &r, const Object &root,
                              HardwareProfile &p) {
  auto planners = r.object(root, "host_planners", "(profile)");
  if (!planners)
    return planners.takeError();
  static const llvm::Regex opName("^[a-z_]+\\.[a-z_0-9]+$");
  for (const auto &[key, value] : **planners) {
    std::string here = "host_planners." + key.str();
    if (!opName.match(key))
      return r.error(here, "not a planner op name (e.g. moe.plan_placement)");
    const llvm::json::Array *points = value.getAsArray();
    if (!points || points->empty())
      return r.error(here, "must be a non-empty array of measured solves");
    std::vector<HostPlannerPoint> &list = p.hostPlanners[key.str()];
    for (auto [i, v] : llvm::enumerate(*points)) {
      std::string at = here + "[" + std::to_string(i) + "]";
      const Object *o = v.getAsObject();
      if (!o)
        return r.error(at, "must be an object");
      HostPlannerPoint point;
      auto us = r.number(*o, "us", at, false);
      if (!us)
        return us.takeError();
      point.us = *us;
      for (const auto &[field, size] : *o) {
        if (field == "us")
          continue;
        std::optional<int64_t> n = size.getAsInteger();
        if (!n || *n < 1)
          return r.error(at + "." + field.str(),
                         "must be a positive integer (a problem size)");
        point.shape[field.str()] = *n;
      }
      if (point.shape.empty())
        return r.error(at, "names no problem size (e.g. samples, nodes)");
      for (const HostPlannerPoint &earlier : list)
        if (earlier.shape == point.shape)
          return r.error(at, "measures the same shape as an earlier entry");
      list.push_back(std::move(point));
    }
  }
  return llvm::Error::success();
}

} // namespace

std::optional<double> HardwareProfile::hostPlannerUs(
    llvm::StringRef op, const std::map<std::string, int64_t> &shape) const {
  auto it = hostPlanners.find(op.str());
  if (it == hostPlanners.end())
    return std::nullopt;
  for (const HostPlannerPoint &point : it->second)
    if (point.shape == shape)
      return point.us;
  return std::nullopt;
}

const CollectiveModel &HardwareProfile::collective(CollectiveKind kind) const {
  switch (kind) {
  case CollectiveKind::AllToAll:
    return allToAll;
  case CollectiveKind::AllReduce:
    return allReduce;
  case CollectiveKind::AllGather:
    return allGather;
  case CollectiveKind::ReduceScatter:
    return reduceScatter;
  }
  return allToAll;
}

llvm::Expected<HardwareProfile> HardwareProfile::parse(llvm::StringRef text,
                                                       llvm::StringRef source) {
  Reader r(source);
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return r.error("(file)",
                   "not valid JSON: " + llvm::toString(parsed.takeError()));
  const Object *root = parsed->getAsObject();
  if (!root)
    return r.error("(file)", "the profile must be a JSON object");
  if (auto e = r.keys(*root, "(profile)",
                      {"name", "description", "mesh", "launch_us",
                       "backward_factor", "compute", "collectives",
                       "op_scale", "comm_cpu_share", "comm_stretch",
                       "comm_stretch_partial",
                       "collective_latency_us", "runtime_collective_scale",
                       "host_planners"}))
    return std::move(e);

  HardwareProfile p;
  if (auto name = root->getString("name"))
    p.name = name->str();
  else
    return r.error("(profile)", "missing string field 'name'");
  if (auto description = root->getString("description"))
    p.description = description->str();

  auto mesh = r.object(*root, "mesh", "(profile)");
  if (!mesh)
    return mesh.takeError();
  if (auto e = r.keys(**mesh, "mesh", {"nodes", "gpus_per_node"}))
    return std::move(e);
  for (auto [key, field] :
       {std::pair<llvm::StringRef, int64_t *>{"nodes", &p.nodes},
        {"gpus_per_node", &p.gpusPerNode}}) {
    std::optional<int64_t> v = (*mesh)->getInteger(key);
    if (!v || *v < 1)
      return r.error("mesh." + key, "must be a positive integer");
    *field = *v;
  }
  auto launch = r.number(*root, "launch_us", "(profile)", false);
  if (!launch)
    return launch.takeError();
  p.launchUs = *launch;
  if (root->get("backward_factor")) {
    auto factor = r.number(*root, "backward_factor", "(profile)", true);
    if (!factor)
      return factor.takeError();
    p.backwardFactor = *factor;
  }

  if (root->get("comm_cpu_share")) {
    auto share = r.number(*root, "comm_cpu_share", "(profile)", false);
    if (!share)
      return share.takeError();
    // A collective that takes the whole core would stop compute forever.
    if (*share >= 0.95)
      return r.error("comm_cpu_share", "must be below 0.95");
    p.commCpuShare = *share;
  }
  if (root->get("comm_stretch")) {
    auto stretch = r.number(*root, "comm_stretch", "(profile)", true);
    if (!stretch)
      return stretch.takeError();
    // Compute never speeds a collective up; a stretch past 100 would be a
    // measurement of something else (a stalled rank).
    if (*stretch < 1 || *stretch > 100)
      return r.error("comm_stretch", "must be between 1 and 100");
    p.commStretch = *stretch;
  }
  if (root->get("comm_stretch_partial")) {
    auto stretch = r.number(*root, "comm_stretch_partial", "(profile)", true);
    if (!stretch)
      return stretch.takeError();
    if (*stretch < 1 || *stretch > 100)
      return r.error("comm_stretch_partial", "must be between 1 and 100");
    p.commStretchPartial = *stretch;
  }
  if (root->get("collective_latency_us")) {
    auto latency =
        r.number(*root, "collective_latency_us", "(profile)", false);
    if (!latency)
      return latency.takeError();
    p.collectiveLatencyUs = *latency;
  }
  if (root->get("runtime_collective_scale")) {
    auto scales = r.object(*root, "runtime_collective_scale", "(profile)");
    if (!scales)
      return scales.takeError();
    if (auto e = r.keys(**scales, "runtime_collective_scale",
                        {"all_to_all", "all_reduce", "all_gather",
                         "reduce_scatter"}))
      return std::move(e);
    for (auto [i, kind] : llvm::enumerate(kCollectiveNames)) {
      if (!(*scales)->get(kind))
        continue;
      std::string here = ("runtime_collective_scale." + kind).str();
      // A number: one ratio for every size; else the measured sizes.
      ScaleBySize &table = p.runtimeCollectiveScale[i];
      if ((*scales)->get(kind)->getAsNumber()) {
        auto scale =
            r.number(**scales, kind, "runtime_collective_scale", true);
        if (!scale)
          return scale.takeError();
        table.bytes = {1};
        table.scale = {*scale};
      } else {
        const Object *o = (*scales)->get(kind)->getAsObject();
        if (!o)
          return r.error(here, "must be a number or {\"bytes\": [...], "
                               "\"scale\": [...]}");
        if (auto e = r.keys(*o, here, {"bytes", "scale"}))
          return std::move(e);
        for (auto [key, out] :
             {std::pair<llvm::StringRef, std::vector<double> *>{
                  "bytes", &table.bytes},
              {"scale", &table.scale}}) {
          const llvm::json::Array *a = o->getArray(key);
          if (!a || a->empty())
            return r.error(here + "." + key,
                           "must be a non-empty array of numbers");
          for (const llvm::json::Value &v : *a) {
            std::optional<double> d = v.getAsNumber();
            if (!d || !std::isfinite(*d) || *d <= 0)
              return r.error(here + "." + key,
                             "must hold positive finite numbers");
            out->push_back(*d);
          }
        }
        if (table.bytes.size() != table.scale.size())
          return r.error(here, "'bytes' and 'scale' must have one entry "
                               "each per measured size");
        for (size_t j = 1; j < table.bytes.size(); ++j)
          if (table.bytes[j] <= table.bytes[j - 1])
            return r.error(here + ".bytes", "must increase");
      }
      // moe-profile clamps its ratio to [0.1, 10]; outside that is a typo
      // or a stalled rank, not a measurement.
      for (double scale : table.scale)
        if (scale < 0.1 || scale > 10)
          return r.error(here, "must be between 0.1 and 10");
    }
  }
  if (root->get("host_planners"))
    if (llvm::Error e = parseHostPlanners(r, *root, p))
      return std::move(e);
  if (root->get("op_scale")) {
    auto scales = r.object(*root, "op_scale", "(profile)");
    if (!scales)
      return scales.takeError();
    for (const auto &entry : **scales) {
      // A class as moe-run --profile names it: "dialect.op" or
      // "moe.vjp(dialect.op)"; a typo must not be silently ignored.
      static const llvm::Regex opClass(
          "^[a-z_]+\\.[a-z_0-9]+(\\([a-z_]+\\.[a-z_0-9]+\\))?$");
      if (!opClass.match(entry.first))
        return r.error("op_scale." + entry.first.str(),
                       "not an op class (e.g. moe.attention, "
                       "moe.vjp(moe.expert))");
      auto scale = r.number(**scales, entry.first, "op_scale", true);
      if (!scale)
        return scale.takeError();
      p.opScale[entry.first.str()] = *scale;
    }
  }

  auto compute = r.object(*root, "compute", "(profile)");
  if (!compute)
    return compute.takeError();
  if (auto e = r.keys(**compute, "compute", {"gemm", "memory"}))
    return std::move(e);
  auto gemm = r.alphaBeta(**compute, "gemm", "compute", "beta_us_per_flop");
  if (!gemm)
    return gemm.takeError();
  auto memory = r.alphaBeta(**compute, "memory", "compute", "beta_us_per_byte");
  if (!memory)
    return memory.takeError();
  p.gemm = *gemm;
  p.memory = *memory;

  auto collectives = r.object(*root, "collectives", "(profile)");
  if (!collectives)
    return collectives.takeError();
  if (auto e =
          r.keys(**collectives, "collectives",
                 {"all_to_all", "all_reduce", "all_gather", "reduce_scatter"}))
    return std::move(e);
  for (auto [key, model] : {std::pair<llvm::StringRef, CollectiveModel *>{
                                "all_to_all", &p.allToAll},
                            {"all_reduce", &p.allReduce},
                            {"all_gather", &p.allGather},
                            {"reduce_scatter", &p.reduceScatter}}) {
    auto o = r.object(**collectives, key, "collectives");
    if (!o)
      return o.takeError();
    std::string here = ("collectives." + key).str();
    if (auto e = r.keys(**o, here, {"intra", "inter"}))
      return std::move(e);
    auto intra = r.alphaBeta(**o, "intra", here, "beta_us_per_byte");
    if (!intra)
      return intra.takeError();
    model->intra = *intra;
    // A single-node profile may omit the inter-node model.
    if ((*o)->get("inter") || p.nodes > 1) {
      auto inter = r.alphaBeta(**o, "inter", here, "beta_us_per_byte");
      if (!inter)
        return inter.takeError();
      model->inter = *inter;
    } else {
      model->inter = model->intra;
    }
  }
  return p;
}

double HardwareProfile::ScaleBySize::at(double n) const {
  if (bytes.empty())
    return 1.0;
  if (n <= bytes.front())
    return scale.front();
  if (n >= bytes.back())
    return scale.back();
  size_t j = std::upper_bound(bytes.begin(), bytes.end(), n) - bytes.begin();
  double t = std::log2(n / bytes[j - 1]) / std::log2(bytes[j] / bytes[j - 1]);
  return scale[j - 1] + t * (scale[j] - scale[j - 1]);
}

double HardwareProfile::opScaleOf(llvm::StringRef opClass) const {
  auto it = opScale.find(opClass.str());
  return it == opScale.end() ? 1.0 : it->second;
}

std::vector<std::string> HardwareProfile::presetNames() {
  std::vector<std::string> names;
  for (const Preset &preset : presets)
    names.push_back(preset.name);
  return names;
}

llvm::Expected<HardwareProfile>
HardwareProfile::load(llvm::StringRef nameOrPath) {
  for (const Preset &preset : presets)
    if (nameOrPath == preset.name)
      return parse(preset.json, std::string("preset ") + preset.name);
  auto buffer = llvm::MemoryBuffer::getFile(nameOrPath);
  if (!buffer)
    return llvm::createStringError(
        llvm::formatv("cannot read profile '{0}' ({1}); presets: {2}",
                      nameOrPath, buffer.getError().message(),
                      llvm::join(presetNames(), ", "))
            .str(),
        buffer.getError());
  return parse((*buffer)->getBuffer(), nameOrPath);
}

llvm::Expected<HardwareProfile>
HardwareProfile::loadOption(llvm::StringRef option, llvm::StringRef value) {
  if (value.empty())
    return llvm::createStringError(
        "needs " + option.str() + "<preset or JSON file>; presets: " +
        llvm::join(presetNames(), ", "));
  return load(value);
}

std::string HardwareProfile::toJson() const {
  auto ab = [](const AlphaBeta &m, llvm::StringRef beta) {
    return llvm::json::Object{{"alpha_us", m.alphaUs}, {beta, m.betaUs}};
  };
  auto coll = [&](const CollectiveModel &m) {
    return llvm::json::Object{{"intra", ab(m.intra, "beta_us_per_byte")},
                              {"inter", ab(m.inter, "beta_us_per_byte")}};
  };
  llvm::json::Object root{
      {"name", name},
      {"description", description},
      {"mesh",
       llvm::json::Object{{"nodes", nodes}, {"gpus_per_node", gpusPerNode}}},
      {"launch_us", launchUs},
      {"backward_factor", backwardFactor},
      {"compute",
       llvm::json::Object{{"gemm", ab(gemm, "beta_us_per_flop")},
                          {"memory", ab(memory, "beta_us_per_byte")}}},
      {"collectives",
       llvm::json::Object{{"all_to_all", coll(allToAll)},
                          {"all_reduce", coll(allReduce)},
                          {"all_gather", coll(allGather)},
                          {"reduce_scatter", coll(reduceScatter)}}}};
  if (!opScale.empty()) {
    llvm::json::Object scales;
    for (const auto &[opClass, scale] : opScale)
      scales[opClass] = scale;
    root["op_scale"] = std::move(scales);
  }
  if (commCpuShare > 0)
    root["comm_cpu_share"] = commCpuShare;
  if (commStretch > 1)
    root["comm_stretch"] = commStretch;
  if (commStretchPartial)
    root["comm_stretch_partial"] = *commStretchPartial;
  if (collectiveLatencyUs > 0)
    root["collective_latency_us"] = collectiveLatencyUs;
  llvm::json::Object runtimeScales;
  for (auto [i, kind] : llvm::enumerate(kCollectiveNames)) {
    const ScaleBySize &table = runtimeCollectiveScale[i];
    if (!table.bytes.empty())
      runtimeScales[kind] = llvm::json::Object{
          {"bytes", llvm::json::Array(table.bytes)},
          {"scale", llvm::json::Array(table.scale)}};
  }
  if (!runtimeScales.empty())
    root["runtime_collective_scale"] = std::move(runtimeScales);
  if (!hostPlanners.empty()) {
    llvm::json::Object planners;
    for (const auto &[op, points] : hostPlanners) {
      llvm::json::Array list;
      for (const HostPlannerPoint &point : points) {
        llvm::json::Object o{{"us", point.us}};
        for (const auto &[field, n] : point.shape)
          o[field] = n;
        list.push_back(std::move(o));
      }
      planners[op] = std::move(list);
    }
    root["host_planners"] = std::move(planners);
  }
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(root)));
}
