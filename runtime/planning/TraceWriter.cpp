//===- TraceWriter.cpp - writes routing traces the reader accepts ---------===//
//
// Every record is checked with the reader's rules (TraceChecks.h) before a
// byte of it is written, so a trace on disk always reads back; numbers go
// through std::to_chars into one line buffer (a record of 1024 samples x
// 64 experts is one write per line, no iostream formatting).
//
//===----------------------------------------------------------------------===//

#include "TraceChecks.h"

#include <charconv>
#include <fstream>
#include <iostream>

namespace moe_rt {
namespace planning {

namespace {

void append(std::string &buf, int64_t v) {
  char tmp[24];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
  (void)ec; // 24 characters hold any int64
  buf.append(tmp, end);
}

} // namespace

TraceWriter::TraceWriter() = default;
TraceWriter::~TraceWriter() = default;

bool TraceWriter::open(const std::string &path, const TraceHeader &header,
                       std::string &error) {
  if (path == "-") {
    out = &std::cout;
  } else {
    owned = std::make_unique<std::ofstream>(path, std::ios::binary |
                                                      std::ios::trunc);
    if (!*owned) {
      error = path + ": cannot create the routing trace";
      owned.reset();
      return false;
    }
    out = owned.get();
  }
  name = path;
  return start(header, error);
}

bool TraceWriter::open(std::ostream &o, const std::string &n,
                       const TraceHeader &header, std::string &error) {
  out = &o;
  name = n;
  return start(header, error);
}

bool TraceWriter::start(const TraceHeader &header, std::string &error) {
  std::string e = checkHeader(header);
  if (!e.empty()) {
    error = name + ": refusing to write a routing trace: " + e;
    out = nullptr;
    return false;
  }
  head = header;
  sequence = std::make_unique<RecordSequence>(head);
  std::string &b = buffer;
  b.clear();
  b += std::string(kTraceMagic) + " ";
  append(b, kTraceVersion);
  b += "\n";
  if (!head.source.empty())
    b += "source " + head.source + "\n";
  b += "grid nodes ";
  append(b, head.grid.nodes);
  b += " ranks-per-node ";
  append(b, head.grid.ranksPerNode);
  b += "\nbatch samples ";
  append(b, head.samples);
  b += " tokens ";
  append(b, head.tokensPerSample);
  b += "\n";
  for (const TraceBlock &blk : head.blocks) {
    b += "block ";
    append(b, blk.block);
    b += " experts ";
    append(b, blk.experts);
    if (blk.routing == RoutingKind::TokenChoice) {
      b += " token-choice ";
      append(b, blk.topK);
    } else {
      b += " expert-choice";
    }
    b += " expert-ranks";
    for (int r : blk.expertRank) {
      b += ' ';
      append(b, r);
    }
    b += "\n";
  }
  b += "records\n";
  out->write(b.data(), std::streamsize(b.size()));
  if (!*out) {
    error = name + ": writing the routing trace failed";
    return false;
  }
  return true;
}

bool TraceWriter::write(const TraceRecord &r, std::string &error) {
  if (!out || !sequence) {
    error = "no routing trace open for writing";
    return false;
  }
  int64_t index = sequence->count();
  std::string e = checkRecord(head, r);
  if (e.empty())
    e = sequence->accept(r.step, r.micro, r.block);
  if (!e.empty()) {
    error = name + ": refusing to write " + describeRecord(index, r) + ": " + e;
    return false;
  }
  std::string &b = buffer;
  b.clear();
  b += "record ";
  append(b, index);
  b += " step ";
  append(b, r.step);
  b += " micro ";
  append(b, r.micro);
  b += " block ";
  append(b, r.block);
  b += "\nsample-ranks";
  for (int q : r.sampleRank) {
    b += ' ';
    append(b, q);
  }
  b += '\n';
  for (int i = 0; i < r.counts.rows; ++i) {
    const uint32_t *row = r.counts.row(i);
    for (int x = 0; x < r.counts.experts; ++x) {
      if (x)
        b += ' ';
      append(b, row[x]);
    }
    b += '\n';
  }
  out->write(b.data(), std::streamsize(b.size()));
  if (!*out) {
    error = name + ": writing " + describeRecord(index, r) + " failed";
    return false;
  }
  return true;
}

bool TraceWriter::close(std::string &error) {
  if (!out || !sequence) {
    error = "no routing trace open for writing";
    return false;
  }
  std::string e = sequence->finish();
  if (!e.empty()) {
    error = name + ": cannot close the routing trace: " + e;
    return false;
  }
  std::string &b = buffer;
  b = "end ";
  append(b, sequence->count());
  b += " records\n";
  out->write(b.data(), std::streamsize(b.size()));
  out->flush();
  bool ok = bool(*out);
  if (owned) {
    owned->close();
    ok = ok && !owned->fail();
  }
  out = nullptr;
  sequence.reset();
  if (!ok)
    error = name + ": writing the routing trace failed (disk full?)";
  return ok;
}

} // namespace planning
} // namespace moe_rt
