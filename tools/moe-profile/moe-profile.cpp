//===- moe-profile.cpp - measure a hardware profile -----------------------===//
//
// Measures the machine it runs on, nccl-tests style: a size sweep of each
// collective (MPI, or NCCL with --gpu) on the two groups FSMoE schedules
// apart -- the ranks of one node (intra) and one rank per node (inter) --,
// of GEMMs (OpenBLAS or cuBLAS) and of memory copies, a least-squares
// alpha-beta fit per model with its r^2, and the per-task launch cost of
// the runtime's CPU streams. Writes a profile in the format moe-simulate
// reads (docs/profile-format.md, which defines the bytes each fit counts).
//
//   mpirun -np 4 moe-profile -o machine.json
//
//===----------------------------------------------------------------------===//

#include "AlphaBetaFit.h"
#include "CommCpuShare.h"
#include "GpuSweeps.h"

#include "moe_rt/collectives.h"
#include "moe_rt/command_line.h"
#include "moe_rt/moe_rt.h"

#include <cblas.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

using moe_profile::Fit;
using moe_profile::fitAlphaBeta;

namespace {

struct Options {
  std::string output = "-", name = "measured";
  long minBytes = 1024, maxBytes = 16 << 20;
  int iters = 10, warmup = 3, gemmMax = 768, retries = 2;
  int ranksPerNode = 0; // 0: ranks that share memory form a node
  bool quiet = false, gpu = false;
};

const char *kUsage =
    "usage: mpirun -np P moe-profile [options]\n"
    "Measures collectives, GEMMs and memory copies on this machine and\n"
    "writes a hardware profile for moe-opt --moe-simulate.\n"
    "  -o FILE            output profile (default '-': stdout)\n"
    "  --name NAME        profile name (default 'measured')\n"
    "  --min-bytes N      smallest message (default 1024)\n"
    "  --max-bytes N      largest message (default 16777216)\n"
    "  --iters N          timed repetitions per size (default 10)\n"
    "  --warmup N         untimed repetitions per size (default 3)\n"
    "  --gemm-max N       largest square GEMM side (default 768)\n"
    "  --retries N        re-measure a sweep whose fit fails (noise: a\n"
    "                     slope <= 0) up to N times, with twice the\n"
    "                     repetitions each time (default 2)\n"
    "  --ranks-per-node N consecutive ranks forming a node (default: the\n"
    "                     ranks that share memory; set it for emulated\n"
    "                     clusters, e.g. network namespaces on one host)\n"
    "  --gpu              measure NCCL collectives and cuBLAS on one GPU per\n"
    "                     rank instead of MPI and OpenBLAS on CPUs\n"
    "  --quiet            no report on stderr\n";

/// Parses argv (moe_rt/command_line.h, the reader of moe-run and the
/// other tools); returns an error message, or "" on success.
std::string parse(int argc, char **argv, Options &o, bool &help) {
  moe_rt::options::CommandLine args(argc, argv);
  uint64_t minBytes = o.minBytes, maxBytes = o.maxBytes, iters = o.iters,
           warmup = o.warmup, gemmMax = o.gemmMax, retries = o.retries,
           perNode = o.ranksPerNode;
  while (args.next()) {
    if (args.flag("-h") || args.flag("--help"))
      help = true;
    else if (args.flag("--quiet"))
      o.quiet = true;
    else if (args.flag("--gpu"))
      o.gpu = true;
    else if (!args.text("-o", o.output) && !args.text("--name", o.name) &&
             !args.integer("--min-bytes", 16, 1ull << 32, minBytes) &&
             !args.integer("--max-bytes", 16, 1ull << 32, maxBytes) &&
             !args.integer("--iters", 1, 10000, iters) &&
             !args.integer("--warmup", 0, 10000, warmup) &&
             !args.integer("--gemm-max", 32, 8192, gemmMax) &&
             !args.integer("--retries", 0, 10, retries) &&
             !args.integer("--ranks-per-node", 1, 10000, perNode))
      args.unknown();
  }
  if (!args.error().empty())
    return args.error();
  if (o.output.empty() || o.name.empty())
    return std::string(o.output.empty() ? "-o" : "--name") +
           " needs a non-empty value";
  o.minBytes = long(minBytes);
  o.maxBytes = long(maxBytes);
  o.iters = int(iters);
  o.warmup = int(warmup);
  o.gemmMax = int(gemmMax);
  o.retries = int(retries);
  o.ranksPerNode = int(perNode);
  if (o.minBytes * 4 > o.maxBytes)
    return "--max-bytes must be at least 4 x --min-bytes (a sweep needs "
           "several sizes)";
  return "";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median over `iters` of the slowest rank's time for `op`, in us.
double timeIt(MPI_Comm comm, int warmup, int iters,
              const std::function<void()> &op) {
  for (int i = 0; i < warmup; ++i)
    op();
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    op();
    double t = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    samples.push_back(slowest * 1e6);
  }
  return median(samples);
}

struct Measured {
  std::vector<double> n, t;
  Fit fit;
};

Measured sweepCollective(const char *which, MPI_Comm comm, const Options &o) {
  int size;
  MPI_Comm_size(comm, &size);
  Measured m;
  for (long bytes = o.minBytes; bytes <= o.maxBytes; bytes *= 2) {
    // Counts in floats, divisible by the group size where the collective
    // splits the buffer.
    long count = std::max<long>(size, bytes / 4 / size * size);
    std::vector<float> send(count, 1.0f),
        recv(count * (std::strcmp(which, "all_gather") ? 1 : size));
    std::function<void()> op;
    // The bytes docs/profile-format.md says each model counts: what an
    // all-to-all sends to other ranks, an all-gather's gathered result,
    // a reduce-scatter's or all-reduce's whole buffer.
    double n = count * 4.0;
    if (!std::strcmp(which, "all_to_all"))
      n *= double(size - 1) / size;
    else if (!std::strcmp(which, "all_gather"))
      n *= size;
    if (!std::strcmp(which, "all_to_all"))
      op = [&] {
        MPI_Alltoall(send.data(), count / size, MPI_FLOAT, recv.data(),
                     count / size, MPI_FLOAT, comm);
      };
    else if (!std::strcmp(which, "all_reduce"))
      op = [&] {
        MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM,
                      comm);
      };
    else if (!std::strcmp(which, "all_gather"))
      op = [&] {
        MPI_Allgather(send.data(), count, MPI_FLOAT, recv.data(), count,
                      MPI_FLOAT, comm);
      };
    else
      op = [&] {
        MPI_Reduce_scatter_block(send.data(), recv.data(), count / size,
                                 MPI_FLOAT, MPI_SUM, comm);
      };
    m.n.push_back(n);
    m.t.push_back(timeIt(comm, o.warmup, o.iters, op));
  }
  m.fit = fitAlphaBeta(m.n, m.t);
  return m;
}

Measured sweepGemm(MPI_Comm comm, const Options &o) {
  Measured m;
  for (int s = 32; s <= o.gemmMax; s += std::max(32, s / 2)) {
    std::vector<float> a(size_t(s) * s, 1.0f), b(a), c(a.size());
    m.n.push_back(2.0 * s * s * s);
    m.t.push_back(timeIt(comm, o.warmup, o.iters, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f,
                  a.data(), s, b.data(), s, 0.0f, c.data(), s);
    }));
  }
  m.fit = fitAlphaBeta(m.n, m.t);
  return m;
}

Measured sweepMemory(MPI_Comm comm, const Options &o) {
  Measured m;
  for (long bytes = std::max(o.minBytes, 4096L); bytes <= 4 * o.maxBytes;
       bytes *= 2) {
    std::vector<char> src(bytes, 1), dst(bytes);
    m.n.push_back(2.0 * bytes); // read + write traffic
    m.t.push_back(timeIt(comm, o.warmup, o.iters,
                         [&] { std::memcpy(dst.data(), src.data(), bytes); }));
  }
  m.fit = fitAlphaBeta(m.n, m.t);
  return m;
}

/// Re-measures a sweep whose fit fails (moe_profile::sweepUntilFit). Every
/// rank sees the same MPI_MAX-reduced times, hence the same fit, so all take
/// the same decision and the collectives inside `sweep` stay matched.
Measured measureUntilFit(const Options &o, int &remeasured,
                         const std::function<Measured(const Options &)> &sweep) {
  return moe_profile::sweepUntilFit(o.retries, remeasured, [&](int scale) {
    Options more = o;
    more.iters *= scale;
    more.warmup = scale == 1 ? o.warmup : std::max(1, o.warmup * scale);
    return sweep(more);
  });
}

int emptyTask(void *) { return 0; }

/// Issue + completion of an empty task on a runtime CPU stream, in us.
double launchCost(const Options &o) {
  moe_rt_stream stream;
  if (moe_rt_stream_create(MOE_RT_CPU, &stream) != MOE_RT_OK)
    return 0;
  std::vector<double> samples;
  for (int i = 0; i < o.warmup + 50; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    moe_rt_stream_enqueue(stream, emptyTask, nullptr);
    moe_rt_stream_synchronize(stream, 10.0);
    std::chrono::duration<double, std::micro> d =
        std::chrono::steady_clock::now() - t0;
    if (i >= o.warmup)
      samples.push_back(d.count());
  }
  moe_rt_stream_destroy(stream);
  return median(samples);
}

nlohmann::json alphaBeta(const Fit &f, const char *beta) {
  return {{"alpha_us", f.alpha}, {beta, f.beta}};
}

const char *kCollectives[] = {"all_to_all", "all_reduce", "all_gather",
                              "reduce_scatter"};

/// The intra-node group (a node's ranks) and the inter-node group (one
/// rank per node: the ranks with the same place in their node).
struct Groups {
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  int perNode = 1, local = 0, nodes = 1;

  /// The group intra-node sweeps run on: the world when a node has one
  /// rank.
  MPI_Comm intra() const { return perNode > 1 ? node : MPI_COMM_WORLD; }
  void free() {
    MPI_Comm_free(&cross);
    MPI_Comm_free(&node);
  }
};

/// Splits the world into nodes (--ranks-per-node consecutive ranks, else
/// the ranks that share memory); returns an error message, or "".
std::string splitGroups(const Options &o, int rank, int world, Groups &g) {
  if (o.ranksPerNode) {
    if (world % o.ranksPerNode)
      return "--ranks-per-node " + std::to_string(o.ranksPerNode) +
             " does not divide the " + std::to_string(world) + " ranks";
    MPI_Comm_split(MPI_COMM_WORLD, rank / o.ranksPerNode, rank, &g.node);
  } else {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                        MPI_INFO_NULL, &g.node);
  }
  MPI_Comm_size(g.node, &g.perNode);
  MPI_Comm_rank(g.node, &g.local);
  MPI_Comm_split(MPI_COMM_WORLD, g.local, rank, &g.cross);
  g.nodes = world / g.perNode;
  return "";
}

/// The fitted models: the profile's collectives, the report's rows, the
/// models whose fit failed and how many sweeps were re-measured.
struct Fits {
  nlohmann::json collectives, report = nlohmann::json::array();
  std::vector<std::string> failed;
  int remeasured = 0;
  Measured gemm, memory;

  void record(const std::string &what, const Measured &m, const char *unit) {
    if (!m.fit.ok)
      failed.push_back(what);
    report.push_back({{"model", what},
                      {"fit", m.fit.ok},
                      {"alpha_us", m.fit.alpha},
                      {"beta", m.fit.beta},
                      {"unit", unit},
                      {"r2", m.fit.r2},
                      {"points", m.n.size()}});
  }
};

/// --gpu: NCCL collectives, cuBLAS GEMMs and device copies on one GPU per
/// rank, by its place in the node; the intra-node group also times GEMMs
/// and copies, the inter-node group collectives only. Returns an error
/// message, or "".
std::string measureGpu(const Options &o, const Groups &g, Fits &fits) {
  moe_profile::GpuSweeps gpu, gpuInter;
  std::string error =
      moe_profile::runGpuSweeps(g.intra(), g.local, false, o.minBytes,
                                o.maxBytes, o.gemmMax, o.warmup, o.iters, gpu);
  if (error.empty() && g.nodes > 1)
    error = moe_profile::runGpuSweeps(g.cross, g.local, true, o.minBytes,
                                      o.maxBytes, o.gemmMax, o.warmup, o.iters,
                                      gpuInter);
  if (!error.empty())
    return error;
  for (int k = 0; k < 4; ++k) {
    nlohmann::json entry;
    for (auto [group, sweeps] :
         {std::pair<const char *, moe_profile::GpuSweeps *>{"intra", &gpu},
          {"inter", &gpuInter}}) {
      if (group == std::string("inter") && g.nodes == 1)
        continue;
      const moe_profile::Sweep *sweep[] = {
          &sweeps->allToAll, &sweeps->allReduce, &sweeps->allGather,
          &sweeps->reduceScatter};
      Measured m{sweep[k]->n, sweep[k]->t,
                 fitAlphaBeta(sweep[k]->n, sweep[k]->t)};
      fits.record(std::string(kCollectives[k]) + " " + group + " (NCCL)", m,
                  "us/B");
      entry[group] = alphaBeta(m.fit, "beta_us_per_byte");
    }
    fits.collectives[kCollectives[k]] = entry;
  }
  fits.gemm = {gpu.gemm.n, gpu.gemm.t, fitAlphaBeta(gpu.gemm.n, gpu.gemm.t)};
  fits.memory = {gpu.memory.n, gpu.memory.t,
                 fitAlphaBeta(gpu.memory.n, gpu.memory.t)};
  return "";
}

/// MPI collectives inside a node and, when there are several, across
/// nodes over one rank per node (FSMoE's ESP and EP / DP groups); OpenBLAS
/// GEMMs and memcpy. A sweep whose fit fails is measured again.
void measureCpu(const Options &o, const Groups &g, Fits &fits) {
  for (const char *kind : kCollectives) {
    Measured intra = measureUntilFit(o, fits.remeasured, [&](const Options &t) {
      return sweepCollective(kind, g.intra(), t);
    });
    fits.record(std::string(kind) + " intra", intra, "us/B");
    nlohmann::json entry = {
        {"intra", alphaBeta(intra.fit, "beta_us_per_byte")}};
    if (g.nodes > 1) {
      Measured inter =
          measureUntilFit(o, fits.remeasured, [&](const Options &t) {
            return sweepCollective(kind, g.cross, t);
          });
      fits.record(std::string(kind) + " inter", inter, "us/B");
      entry["inter"] = alphaBeta(inter.fit, "beta_us_per_byte");
    }
    fits.collectives[kind] = entry;
  }
  fits.gemm = measureUntilFit(o, fits.remeasured, [&](const Options &t) {
    return sweepGemm(MPI_COMM_WORLD, t);
  });
  fits.memory = measureUntilFit(o, fits.remeasured, [&](const Options &t) {
    return sweepMemory(MPI_COMM_WORLD, t);
  });
}

/// What the runtime's own collectives cost on a CPU cluster: how much a
/// running collective takes from compute, a 1-float all-to-all, and the
/// runtime's all-to-all and all-reduce (its non-blocking MPI, progressed
/// by the pool's polling) at 64 KiB, 256 KiB and 1 MiB (up to
/// --max-bytes), to set against the sweeps' blocking MPI collectives.
struct RuntimeCosts {
  moe_profile::CommCpuShare commCpu;
  double smallUs = 0;
  std::vector<long> bytes;
  std::vector<double> us[2]; // all-to-all, all-reduce; per size
};

/// Measures RuntimeCosts; returns an error message, or "".
std::string measureRuntimeCosts(const Options &o, RuntimeCosts &r) {
  for (long b = 64 << 10; b <= std::min(o.maxBytes, 1L << 20); b *= 4)
    r.bytes.push_back(b);
  if (r.bytes.empty())
    r.bytes.push_back(o.maxBytes);
  std::string why = moe_profile::measureCommCpuShare(
      std::min(o.maxBytes, 1L << 20), 5, r.commCpu);
  if (why.empty())
    why = moe_profile::measureSmallCollective(30, r.smallUs);
  for (int k = 0; k < 2; ++k)
    for (long b : r.bytes) {
      r.us[k].push_back(0);
      if (why.empty())
        why = moe_profile::measureRuntimeCollective(k == 1, b, 10,
                                                    r.us[k].back());
    }
  return why;
}

/// One runtime collective against the cost model, for the report.
struct RuntimeRow {
  const char *kind;
  double bytes, us, modelledUs, scale;
};

/// The profile's CPU-cluster terms from RuntimeCosts: comm_cpu_share,
/// comm_stretch, collective_latency_us (returned) and
/// runtime_collective_scale, whose rows go to `rows`.
double addRuntimeTerms(nlohmann::json &profile, const Groups &g, int world,
                       const RuntimeCosts &r, std::vector<RuntimeRow> &rows) {
  nlohmann::json &collectives = profile["collectives"];
  profile["comm_cpu_share"] = r.commCpu.share;
  profile["comm_stretch"] = r.commCpu.stretch;
  profile["comm_stretch_partial"] = r.commCpu.stretchPartial;
  // Beyond the all-to-all fit's α over the links the whole world spans.
  double alpha =
      collectives["all_to_all"][g.nodes > 1 ? "inter" : "intra"]["alpha_us"];
  double latencyUs = std::max(0.0, r.smallUs - alpha);
  profile["collective_latency_us"] = latencyUs;
  // What the cost model charges the same collective over the whole world
  // (OpCosts' collectiveUs), and the runtime's measured time against it.
  auto fit = [&](const char *kind, const char *link, double n) {
    auto &m = collectives[kind][link];
    return m["alpha_us"].get<double>() +
           m["beta_us_per_byte"].get<double>() * n;
  };
  double intraShare = double(g.perNode - 1) / world,
         interShare = double(world - g.perNode) / world;
  const char *names[2] = {"all_to_all", "all_reduce"};
  for (int k = 0; k < 2 && world > 1; ++k) {
    nlohmann::json bytes = nlohmann::json::array(),
                   scales = nlohmann::json::array();
    for (size_t j = 0; j < r.bytes.size(); ++j) {
      double b =
          double(std::max<long>(world, r.bytes[j] / 4 / world * world)) * 4;
      double modelled =
          k == 0 ? std::max(intraShare > 0
                                ? fit("all_to_all", "intra", b * intraShare)
                                : 0.0,
                            interShare > 0
                                ? fit("all_to_all", "inter", b * interShare)
                                : 0.0)
                 : fit("all_reduce", g.nodes > 1 ? "inter" : "intra", b);
      // Against latency + fit, which the cost model charges without it:
      // well-defined at small sizes too, where the fit is near 0.
      modelled += latencyUs;
      double scale =
          modelled > 0 ? std::clamp(r.us[k][j] / modelled, 0.1, 10.0) : 1.0;
      bytes.push_back(b);
      scales.push_back(scale);
      rows.push_back({names[k], b, r.us[k][j], modelled, scale});
    }
    profile["runtime_collective_scale"][names[k]] = {{"bytes", bytes},
                                                     {"scale", scales}};
  }
  return latencyUs;
}

/// The profile of the measured fits (docs/profile-format.md), without the
/// CPU-cluster terms of addRuntimeTerms.
nlohmann::json profileOf(const Options &o, int world, const Groups &g,
                         const Fits &fits, double launch) {
  return {{"name", o.name},
          {"description",
           "Measured by moe-profile on " + std::to_string(world) +
               " MPI ranks (" + std::to_string(g.nodes) + " node(s) x " +
               std::to_string(g.perNode) +
               (o.gpu ? "): NCCL collectives, cuBLAS SGEMM, device copies"
                      : "): MPI collectives, OpenBLAS SGEMM, memcpy") +
               "; least-squares alpha-beta fits, median of " +
               std::to_string(o.iters) + " runs per size."},
          {"mesh", {{"nodes", g.nodes}, {"gpus_per_node", g.perNode}}},
          {"launch_us", launch},
          {"backward_factor", 2.0},
          {"compute",
           {{"gemm", alphaBeta(fits.gemm.fit, "beta_us_per_flop")},
            {"memory", alphaBeta(fits.memory.fit, "beta_us_per_byte")}}},
          {"collectives", fits.collectives}};
}

/// The report on stderr: every fit, the launch cost and, on a CPU
/// cluster, the runtime's terms.
void printReport(const Options &o, int world, const Groups &g, const Fits &fits,
                 double launch, const RuntimeCosts &r, double latencyUs,
                 const std::vector<RuntimeRow> &rows) {
  std::fprintf(stderr,
               "moe-profile: %d ranks on %d node(s) [measured on this "
               "machine]\n  %-22s %12s %14s %8s\n",
               world, g.nodes, "model", "alpha (us)", "beta", "r^2");
  for (const auto &row : fits.report)
    std::fprintf(
        stderr, "  %-22s %12.3f %10.3e %-4s %8.5f%s\n",
        row["model"].get<std::string>().c_str(), row["alpha_us"].get<double>(),
        row["beta"].get<double>(), row["unit"].get<std::string>().c_str(),
        row["r2"].get<double>(), row["fit"].get<bool>() ? "" : "  FIT FAILED");
  std::fprintf(stderr, "  %-22s %12.3f\n", "launch (CPU stream)", launch);
  if (!o.gpu) {
    const moe_profile::CommCpuShare &c = r.commCpu;
    std::fprintf(stderr,
                 "  %-22s %12.3f  (GEMMs/s %.0f beside an idle thread, "
                 "%.0f beside all-to-alls)\n",
                 "comm cpu share", c.share, c.gemmsPerSecondAlone,
                 c.gemmsPerSecondBesideComm);
    std::fprintf(stderr,
                 "  %-22s %12.3f  (an all-to-all %.3f ms alone, %.3f ms "
                 "beside GEMMs)\n",
                 "comm stretch", c.stretch, c.commSecondsAlone * 1e3,
                 c.commSecondsBesideCompute * 1e3);
    std::fprintf(stderr,
                 "  %-22s %12.3f  (an all-to-all %.3f ms beside GEMMs on "
                 "the odd ranks only)\n",
                 "comm stretch partial", c.stretchPartial,
                 c.commSecondsBesidePartial * 1e3);
    std::fprintf(stderr,
                 "  %-22s %12.3f  (a 1-float all-to-all through the "
                 "runtime: %.1f us)\n",
                 "collective latency", latencyUs, r.smallUs);
    for (const RuntimeRow &row : rows)
      std::fprintf(stderr,
                   "  %-22s %12.3f  (the runtime's %s of %.0f B: %.1f "
                   "us; latency + the fit: %.1f us)\n",
                   "runtime collective", row.scale, row.kind, row.bytes, row.us,
                   row.modelledUs);
  }
  if (fits.remeasured)
    std::fprintf(stderr,
                 "  (%d sweep(s) re-measured with more repetitions after "
                 "a noisy fit)\n",
                 fits.remeasured);
}

/// Writes the profile to -o, or names the failed fits; the exit status.
int writeProfile(const Options &o, const Fits &fits,
                 const nlohmann::json &profile) {
  if (!fits.failed.empty()) {
    std::string names;
    for (const auto &f : fits.failed)
      names += (names.empty() ? "" : ", ") + f;
    std::fprintf(stderr,
                 "moe-profile: error: the fit of %s failed (slope <= 0) "
                 "after %d re-measurement(s); the machine is too noisy "
                 "for this sweep: raise --iters or widen it with "
                 "--max-bytes\n",
                 names.c_str(), o.retries);
    return 1;
  }
  if (o.output == "-") {
    std::printf("%s\n", profile.dump(2).c_str());
    return 0;
  }
  std::ofstream out(o.output);
  out << profile.dump(2) << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "moe-profile: error: cannot write '%s'\n",
                 o.output.c_str());
    return 1;
  }
  if (!o.quiet)
    std::fprintf(stderr, "wrote %s\n", o.output.c_str());
  return 0;
}

/// Rank 0 prints `message` as moe-profile's error; every rank finalizes
/// MPI. Returns `status`, for main to return.
int finish(int rank, const std::string &message, int status) {
  if (rank == 0 && !message.empty())
    std::fprintf(stderr, "moe-profile: error: %s\n", message.c_str());
  MPI_Finalize();
  return status;
}

} // namespace

int main(int argc, char **argv) {
  // As a step initializes it: the comm-CPU-share measurement runs the
  // runtime's collectives on its pool thread.
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "moe-profile: error: %s\n", moe_rt_last_error());
    return 1;
  }
  // Errors come back as codes (reported below), not aborts.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  Options o;
  bool help = false;
  std::string error = parse(argc, argv, o, help);
  if (help || !error.empty()) {
    if (rank == 0 && !error.empty())
      std::fprintf(stderr, "moe-profile: error: %s\n", error.c_str());
    if (rank == 0)
      std::fputs(kUsage, error.empty() ? stdout : stderr);
    return finish(rank, "", error.empty() ? 0 : 2);
  }
  if (world < 2)
    return finish(rank,
                  "needs at least 2 ranks to measure collectives (mpirun "
                  "-np 2 or more)",
                  2);
  Groups g;
  error = splitGroups(o, rank, world, g);
  if (!error.empty())
    return finish(rank, error, 2);

  Fits fits;
  if (o.gpu) {
    error = measureGpu(o, g, fits);
    if (!error.empty()) {
      g.free();
      return finish(rank, "--gpu: " + error, 1);
    }
  } else {
    measureCpu(o, g, fits);
  }
  fits.record(o.gpu ? "gemm (cuBLAS)" : "gemm", fits.gemm, "us/flop");
  fits.record(o.gpu ? "memory (device copy)" : "memory", fits.memory, "us/B");
  double launch = launchCost(o);
  // What a running collective takes from compute on a CPU cluster; a GPU's
  // copy engines and NIC take nothing from its SMs.
  RuntimeCosts runtime;
  if (!o.gpu) {
    std::string why = measureRuntimeCosts(o, runtime);
    if (!why.empty()) {
      if (rank == 0)
        std::fprintf(stderr,
                     "moe-profile: error: measuring the comm CPU "
                     "share: %s\n",
                     why.c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  int status = 0;
  if (rank == 0) {
    nlohmann::json profile = profileOf(o, world, g, fits, launch);
    double latencyUs = 0;
    std::vector<RuntimeRow> rows;
    if (!o.gpu)
      latencyUs = addRuntimeTerms(profile, g, world, runtime, rows);
    if (!o.quiet)
      printReport(o, world, g, fits, launch, runtime, latencyUs, rows);
    status = writeProfile(o, fits, profile);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  g.free();
  MPI_Finalize();
  return status;
}
