/*===- routing_trace.h - the routing trace file format -----------*- C++ -*-===*
 *
 * A routing trace records, per training step, micro-batch and MoE block,
 * what the gate decided -- the sample x expert token counts (NetMoE Eq. 2)
 * -- and where each sample sat when that block's dispatch ran, so the
 * per-rank x expert sums, the load balance and every all-to-all's volumes
 * follow (routing_counts.h). moe-run --routing-trace and generated steps
 * write it, the synthetic generator (synthetic_routing.h) writes it,
 * --moe-simulate, the NetMoE bench and the FlexMoE / Pro-Prophet planners
 * read it. The format is specified in docs/routing-trace-format.md; this
 * file and RoutingTrace*.cpp are its only implementation.
 *
 * Text, line-oriented, so a reader can look at it and the counts round-trip
 * exactly:
 *
 *   moe-routing-trace 1
 *   source <free text to the end of the line>
 *   grid nodes N ranks-per-node P
 *   batch samples I tokens L
 *   block <b> experts E token-choice K expert-ranks r_0 ... r_{E-1}
 *   block <b> experts E expert-choice expert-ranks r_0 ... r_{E-1}
 *   records
 *   record <n> step <s> micro <m> block <b>
 *   sample-ranks q_0 ... q_{I-1}
 *   <I lines of E counts>
 *   ...
 *   end <n> records
 *
 * The reader streams (one record in memory at a time) and refuses anything
 * malformed with "FILE:LINE: record n (step s, micro m, block b): what";
 * the writer refuses a record the reader would refuse. No call throws.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_ROUTING_TRACE_H
#define MOE_RT_ROUTING_TRACE_H

#include "moe_rt/routing_counts.h"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace moe_rt {
namespace planning {

constexpr const char *kTraceMagic = "moe-routing-trace";
constexpr int kTraceVersion = 1;

/// Bounds a header may declare: a damaged number is refused before it
/// sizes anything (docs/routing-trace-format.md "Limits").
constexpr int kTraceMaxRanks = 1 << 16;
constexpr int kTraceMaxSamples = 1 << 22;
constexpr int kTraceMaxExperts = 1 << 16;
constexpr int kTraceMaxTokens = 1 << 24;
constexpr int kTraceMaxBlocks = 1 << 12;
constexpr int64_t kTraceMaxCountsPerRecord = int64_t(1) << 28;

enum class RoutingKind { TokenChoice, ExpertChoice };

/// One MoE block as the header declares it.
struct TraceBlock {
  int block = 0; ///< the model's block index (moe.block l)
  int experts = 0;
  RoutingKind routing = RoutingKind::TokenChoice;
  int topK = 1; ///< token choice: distinct experts per token
  /// ExpDev: the rank holding expert e while the trace was recorded.
  std::vector<int> expertRank;
};

struct TraceHeader {
  std::string source; ///< free text: the writer, model, seed (one line)
  Grid grid;
  int samples = 0;         ///< I: samples in one record (all ranks)
  int tokensPerSample = 0; ///< L
  std::vector<TraceBlock> blocks; ///< in increasing block index

  /// The declaration of block `block`, or null.
  const TraceBlock *findBlock(int block) const;
};

/// One dispatch: block `block` of micro-batch `micro` of step `step`.
struct TraceRecord {
  int64_t step = 0;
  int micro = 0;
  int block = 0;
  /// SmpDev: the rank sample i sits on when this block's dispatch runs.
  /// Sample i is the same sample in every block of one (step, micro).
  std::vector<int> sampleRank;
  CountMatrix counts; ///< samples x the block's experts
};

/// What is wrong with a header, or "" when it is valid.
std::string checkHeader(const TraceHeader &header);
class RecordSequence; // the record order rule (runtime/planning/TraceChecks.h)

/// What is wrong with a record on its own (shapes, ranks, the per-rank
/// balance, count bounds) given a valid header, or "".
std::string checkRecord(const TraceHeader &header, const TraceRecord &record);

/// "record n (step s, micro m, block b)", as error messages name records.
std::string describeRecord(int64_t index, const TraceRecord &record);

/// Streams a trace: the header on open, then one record per next().
class TraceReader {
public:
  TraceReader();
  ~TraceReader();
  TraceReader(const TraceReader &) = delete;
  TraceReader &operator=(const TraceReader &) = delete;

  /// Opens `path` and reads the header. False with `error` set when the
  /// file cannot be opened or its header is malformed.
  bool open(const std::string &path, std::string &error);
  /// The same over text already in memory; `name` stands for the file in
  /// error messages.
  bool openText(std::string text, const std::string &name,
                std::string &error);

  const TraceHeader &header() const { return head; }

  enum class Next { Record, End, Error };
  /// The next record; End after the "end" line (which must count the
  /// records read); Error with `error` naming file, line and record.
  Next next(TraceRecord &record, std::string &error);

private:
  bool readHeader(std::string &error);
  bool readLine(std::string &line);
  std::string where() const;

  std::unique_ptr<std::istream> in;
  std::string name;
  int64_t lineNo = 0;
  TraceHeader head;
  std::unique_ptr<RecordSequence> sequence;
  bool done = false;
};

/// Reads a whole trace into memory.
bool readTrace(const std::string &path, TraceHeader &header,
               std::vector<TraceRecord> &records, std::string &error);
bool parseTrace(std::string text, const std::string &name,
                TraceHeader &header, std::vector<TraceRecord> &records,
                std::string &error);

/// Writes a trace; each record is checked as the reader checks it, so a
/// written file always reads back.
class TraceWriter {
public:
  TraceWriter();
  ~TraceWriter();
  TraceWriter(const TraceWriter &) = delete;
  TraceWriter &operator=(const TraceWriter &) = delete;

  /// Creates `path` and writes the header ("-" is stdout).
  bool open(const std::string &path, const TraceHeader &header,
            std::string &error);
  /// Writes into `out` (which must outlive the writer).
  bool open(std::ostream &out, const std::string &name,
            const TraceHeader &header, std::string &error);
  bool write(const TraceRecord &record, std::string &error);
  /// Writes the end line and flushes; an error when a group is incomplete
  /// or the stream failed (a full disk).
  bool close(std::string &error);

private:
  bool start(const TraceHeader &header, std::string &error);

  std::unique_ptr<std::ofstream> owned;
  std::ostream *out = nullptr;
  std::string name;
  TraceHeader head;
  std::unique_ptr<RecordSequence> sequence;
  std::string buffer;
};

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_ROUTING_TRACE_H
