//===- TraceReader.cpp - reads routing traces, refusing bad ones ----------===//
//
// docs/routing-trace-format.md. Line by line: every number is parsed whole
// and bounded before it sizes anything, every rule of TraceChecks.h is
// applied as soon as its line is read, so an error names the file, the
// line and the record. Memory grows with what the file holds, never with
// what a (damaged) header claims.
//
//===----------------------------------------------------------------------===//

#include "TraceChecks.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

namespace moe_rt {
namespace planning {

namespace {

/// The blank-separated words of one line.
class Words {
public:
  explicit Words(const std::string &line)
      : p(line.data()), end(line.data() + line.size()) {}

  std::string_view next() {
    skip();
    const char *b = p;
    while (p < end && *p != ' ' && *p != '\t')
      ++p;
    return std::string_view(b, p - b);
  }
  bool atEnd() {
    skip();
    return p == end;
  }
  /// The rest of the line, leading blanks dropped.
  std::string_view rest() {
    skip();
    return std::string_view(p, end - p);
  }

private:
  void skip() {
    while (p < end && (*p == ' ' || *p == '\t'))
      ++p;
  }
  const char *p, *end;
};

/// `w` as an integer in [lo, hi]; the whole word must be the number.
bool parseInt(std::string_view w, int64_t lo, int64_t hi, int64_t &out) {
  if (w.empty())
    return false;
  const char *b = w.data(), *e = w.data() + w.size();
  auto [ptr, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && ptr == e && out >= lo && out <= hi;
}

/// Input echoed in a message: at most 60 characters, control characters
/// (a damaged file's bytes) shown as '?', in quotes.
std::string quoted(std::string_view text) {
  std::string s(text.substr(0, 60));
  if (text.size() > 60)
    s += "...";
  for (char &c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  return "'" + s + "'";
}

} // namespace

TraceReader::TraceReader() = default;
TraceReader::~TraceReader() = default;

std::string TraceReader::where() const {
  return name + ":" + std::to_string(lineNo) + ": ";
}

bool TraceReader::readLine(std::string &line) {
  while (std::getline(*in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#')
      continue; // blank lines and comments carry nothing
    return true;
  }
  return false;
}

bool TraceReader::open(const std::string &path, std::string &error) {
  auto file = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*file) {
    error = path + ": cannot open the routing trace";
    return false;
  }
  in = std::move(file);
  name = path;
  return readHeader(error);
}

bool TraceReader::openText(std::string text, const std::string &n,
                           std::string &error) {
  in = std::make_unique<std::istringstream>(std::move(text));
  name = n;
  return readHeader(error);
}

bool TraceReader::readHeader(std::string &error) {
  lineNo = 0;
  head = TraceHeader();
  done = false;
  std::string line;
  auto fail = [&](const std::string &what) {
    error = where() + what;
    return false;
  };
  if (!readLine(line))
    return fail("empty file, not a routing trace");
  {
    Words w(line);
    std::string_view magic = w.next(), version = w.next();
    int64_t v = 0;
    if (magic != kTraceMagic || !parseInt(version, 0, 1 << 30, v) ||
        !w.atEnd())
      return fail("not a routing trace (first line " + quoted(line) +
                  ", expected '" + kTraceMagic + " " +
                  std::to_string(kTraceVersion) + "')");
    if (v != kTraceVersion)
      return fail("routing trace version " + std::to_string(v) +
                  ", this reader reads version " +
                  std::to_string(kTraceVersion));
  }
  // The header's lines come in a fixed order, so each is checked against
  // what precedes it as soon as it is read.
  enum { Source, GridLine, Batch, Blocks } due = Source;
  while (true) {
    if (!readLine(line))
      return fail("the file ends inside the header (no 'records' line)");
    Words w(line);
    std::string_view key = w.next();
    int64_t a = 0, b = 0;
    std::string e;
    if (key == "source" && due == Source) {
      head.source = std::string(w.rest());
      due = GridLine;
    } else if (key == "grid" && due <= GridLine) {
      if (w.next() != "nodes" || !parseInt(w.next(), 1, kTraceMaxRanks, a) ||
          w.next() != "ranks-per-node" ||
          !parseInt(w.next(), 1, kTraceMaxRanks, b) || !w.atEnd())
        return fail("expected 'grid nodes N ranks-per-node P' (1.." +
                    std::to_string(kTraceMaxRanks) + "), got " +
                    quoted(line));
      head.grid.nodes = int(a);
      head.grid.ranksPerNode = int(b);
      if (!(e = checkGrid(head.grid)).empty())
        return fail(e);
      due = Batch;
    } else if (key == "batch" && due == Batch) {
      if (w.next() != "samples" ||
          !parseInt(w.next(), 1, kTraceMaxSamples, a) ||
          w.next() != "tokens" || !parseInt(w.next(), 1, kTraceMaxTokens, b) ||
          !w.atEnd())
        return fail("expected 'batch samples I tokens L', got " +
                    quoted(line));
      head.samples = int(a);
      head.tokensPerSample = int(b);
      if (!(e = checkBatch(head)).empty())
        return fail(e);
      due = Blocks;
    } else if (key == "block" && due == Blocks) {
      TraceBlock blk;
      if (!parseInt(w.next(), 0, 1 << 30, a) || w.next() != "experts" ||
          !parseInt(w.next(), 1, kTraceMaxExperts, b))
        return fail("expected 'block B experts E (token-choice K | "
                    "expert-choice) expert-ranks ...', got " +
                    quoted(line));
      blk.block = int(a);
      blk.experts = int(b);
      std::string_view kind = w.next();
      if (kind == "token-choice") {
        if (!parseInt(w.next(), 1, kTraceMaxExperts, a))
          return fail("block " + std::to_string(blk.block) +
                      ": token-choice needs its experts per token");
        blk.topK = int(a);
      } else if (kind == "expert-choice") {
        blk.routing = RoutingKind::ExpertChoice;
        blk.topK = 0;
      } else {
        return fail("block " + std::to_string(blk.block) +
                    ": expected token-choice K or expert-choice, got " +
                    quoted(kind));
      }
      if (w.next() != "expert-ranks")
        return fail("block " + std::to_string(blk.block) +
                    ": expected 'expert-ranks' and one rank per expert");
      for (std::string_view r = w.next(); !r.empty(); r = w.next()) {
        if (blk.expertRank.size() >= size_t(blk.experts))
          return fail("block " + std::to_string(blk.block) +
                      ": more expert-ranks than its " +
                      std::to_string(blk.experts) + " experts");
        if (!parseInt(r, 0, kTraceMaxRanks, a))
          return fail("block " + std::to_string(blk.block) +
                      ": expert-ranks holds " + quoted(r) + ", not a rank");
        blk.expertRank.push_back(int(a));
      }
      head.blocks.push_back(std::move(blk));
      if (!(e = checkBlockAt(head, head.blocks.size() - 1)).empty())
        return fail(e);
    } else if (key == "records" && due == Blocks && w.atEnd()) {
      if (head.blocks.empty())
        return fail("'records' before any block is declared");
      break;
    } else {
      static const char *expected[] = {
          "'source', 'grid' or ...", "'grid nodes N ranks-per-node P'",
          "'batch samples I tokens L'", "'block ...' or 'records'"};
      return fail("unexpected header line " + quoted(line) + ", expected " +
                  expected[due] + " (docs/routing-trace-format.md)");
    }
  }
  sequence = std::make_unique<RecordSequence>(head);
  return true;
}

TraceReader::Next TraceReader::next(TraceRecord &r, std::string &error) {
  if (!in || !sequence) {
    error = "no routing trace open";
    return Next::Error;
  }
  if (done)
    return Next::End;
  std::string line;
  int64_t index = sequence->count();
  std::string what;
  auto fail = [&](const std::string &msg) {
    error = where() + what + msg;
    return Next::Error;
  };
  if (!readLine(line))
    return fail("the file ends after " + std::to_string(index) +
                " records without its 'end " + std::to_string(index) +
                " records' line (truncated, or the writer did not finish)");
  Words w(line);
  std::string_view key = w.next();
  int64_t a = 0;
  if (key == "end") {
    if (!parseInt(w.next(), 0, INT64_MAX, a) || w.next() != "records" ||
        !w.atEnd())
      return fail("expected 'end N records', got " + quoted(line));
    if (a != index)
      return fail("the end line counts " + std::to_string(a) +
                  " records, the file holds " + std::to_string(index));
    std::string e = sequence->finish();
    if (!e.empty())
      return fail(e);
    if (readLine(line))
      return fail("text after the end line: " + quoted(line));
    done = true;
    return Next::End;
  }
  int64_t step = 0, micro = 0, block = 0;
  if (key != "record" || !parseInt(w.next(), 0, INT64_MAX, a) ||
      w.next() != "step" || !parseInt(w.next(), 0, INT64_MAX, step) ||
      w.next() != "micro" || !parseInt(w.next(), 0, 1 << 30, micro) ||
      w.next() != "block" || !parseInt(w.next(), 0, 1 << 30, block) ||
      !w.atEnd())
    return fail("expected 'record " + std::to_string(index) +
                " step S micro M block B' or 'end " + std::to_string(index) +
                " records', got " + quoted(line));
  r.step = step;
  r.micro = int(micro);
  r.block = int(block);
  what = describeRecord(index, r) + ": ";
  if (a != index)
    return fail("numbered " + std::to_string(a) + ", record " +
                std::to_string(index) + " is due");
  std::string e = sequence->accept(step, int(micro), int(block));
  if (!e.empty())
    return fail(e);
  const TraceBlock &blk = *head.findBlock(int(block));

  if (!readLine(line))
    return fail("the file ends before its sample-ranks line");
  Words ranks(line);
  if (ranks.next() != "sample-ranks")
    return fail("expected 'sample-ranks' and one rank per sample, got " +
                quoted(line));
  r.sampleRank.clear();
  for (std::string_view s = ranks.next(); !s.empty(); s = ranks.next()) {
    if (r.sampleRank.size() >= size_t(head.samples))
      return fail("sample-ranks holds more than the " +
                  std::to_string(head.samples) + " samples");
    if (!parseInt(s, 0, kTraceMaxRanks, a))
      return fail("sample-ranks holds " + quoted(s) + ", not a rank");
    r.sampleRank.push_back(int(a));
  }
  if (!(e = checkSampleRanks(head, r.sampleRank)).empty())
    return fail(e);

  r.counts.rows = 0;
  r.counts.experts = blk.experts;
  r.counts.values.clear();
  for (int i = 0; i < head.samples; ++i) {
    if (!readLine(line))
      return fail("the file ends after " + std::to_string(i) + " of " +
                  std::to_string(head.samples) + " count rows");
    Words row(line);
    size_t start = r.counts.values.size();
    for (std::string_view c = row.next(); !c.empty(); c = row.next()) {
      if (r.counts.values.size() - start >= size_t(blk.experts))
        return fail("sample " + std::to_string(i) + ": more than " +
                    std::to_string(blk.experts) + " counts (one per expert)");
      if (!parseInt(c, 0, UINT32_MAX, a))
        return fail("sample " + std::to_string(i) + ": " + quoted(c) +
                    " is not a token count");
      r.counts.values.push_back(uint32_t(a));
    }
    if (r.counts.values.size() - start != size_t(blk.experts))
      return fail("sample " + std::to_string(i) + ": " +
                  std::to_string(r.counts.values.size() - start) +
                  " counts, expected one per expert (" +
                  std::to_string(blk.experts) + ")");
    if (!(e = checkCountRow(head, blk, i, r.counts.values.data() + start))
             .empty())
      return fail(e);
    ++r.counts.rows;
  }
  return Next::Record;
}

namespace {

bool readAll(TraceReader &reader, TraceHeader &header,
             std::vector<TraceRecord> &records, std::string &error) {
  header = reader.header();
  records.clear();
  while (true) {
    TraceRecord r;
    TraceReader::Next n = reader.next(r, error);
    if (n != TraceReader::Next::Record)
      return n == TraceReader::Next::End;
    records.push_back(std::move(r));
  }
}

} // namespace

bool parseTrace(std::string text, const std::string &name,
                TraceHeader &header, std::vector<TraceRecord> &records,
                std::string &error) {
  TraceReader reader;
  return reader.openText(std::move(text), name, error) &&
         readAll(reader, header, records, error);
}

bool readTrace(const std::string &path, TraceHeader &header,
               std::vector<TraceRecord> &records, std::string &error) {
  TraceReader reader;
  return reader.open(path, error) && readAll(reader, header, records, error);
}

} // namespace planning
} // namespace moe_rt
