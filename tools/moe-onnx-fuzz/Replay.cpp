//===- Replay.cpp - replay and mutate fuzz inputs without libFuzzer -------===//
//
// moe-onnx-fuzz-replay [-v] [--mutations N] [--seed S] FILE|DIR...
//
// Runs every input file through the importer (the same target the libFuzzer
// binary runs); with --mutations, also N random mutations of each (byte
// flips, truncations, splices of varint-sized chunks: the damage a corrupt
// download or a buggy exporter does). Built with the project's compiler, so
// it works where libFuzzer cannot be linked; under -DMOE_FUZZ_ASAN=ON it
// is built with AddressSanitizer. A failing input is written to
// moe-onnx-fuzz-crash.onnx before the target runs, so a crash leaves it
// behind for replay.
//
//===----------------------------------------------------------------------===//

#include "FuzzTarget.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

std::string mutate(const std::string &in, std::mt19937_64 &rng) {
  std::string s = in;
  if (s.empty())
    return s;
  int steps = 1 + int(rng() % 4);
  for (int i = 0; i < steps && !s.empty(); ++i) {
    size_t pos = rng() % s.size();
    switch (rng() % 6) {
    case 0: // flip a bit
      s[pos] ^= char(1u << (rng() % 8));
      break;
    case 1: // a random byte
      s[pos] = char(rng());
      break;
    case 2: // truncate
      s.resize(pos);
      break;
    case 3: { // erase a chunk
      size_t n = std::min<size_t>(s.size() - pos, 1 + rng() % 16);
      s.erase(pos, n);
      break;
    }
    case 4: { // duplicate a chunk elsewhere
      size_t n = std::min<size_t>(s.size() - pos, 1 + rng() % 32);
      std::string chunk = s.substr(pos, n);
      s.insert(rng() % (s.size() + 1), chunk);
      break;
    }
    case 5: // an extreme varint-ish byte run (huge dims, lengths)
      s[pos] = char(0xff);
      if (pos + 1 < s.size())
        s[pos + 1] = char(0x7f);
      break;
    }
  }
  return s;
}

void run(const std::string &bytes, bool verbose) {
  {
    std::error_code ec;
    llvm::raw_fd_ostream os("moe-onnx-fuzz-crash.onnx", ec);
    if (!ec)
      os << bytes;
  }
  moeFuzzOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(),
                  verbose);
}

} // namespace

int main(int argc, char **argv) {
  bool verbose = false;
  unsigned long mutations = 0, seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-v")
      verbose = true;
    else if (a == "--mutations" && i + 1 < argc)
      mutations = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::strtoul(argv[++i], nullptr, 10);
    else if (llvm::sys::fs::is_directory(a)) {
      std::error_code ec;
      for (llvm::sys::fs::directory_iterator it(a, ec), end; it != end && !ec;
           it.increment(ec))
        if (llvm::sys::fs::is_regular_file(it->path()))
          files.push_back(it->path());
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    llvm::errs() << "usage: moe-onnx-fuzz-replay [-v] [--mutations N] "
                    "[--seed S] FILE|DIR...\n";
    return 2;
  }
  std::sort(files.begin(), files.end());
  std::mt19937_64 rng(seed);
  unsigned long runs = 0;
  for (const std::string &f : files) {
    auto buf = llvm::MemoryBuffer::getFile(f, false, false);
    if (!buf) {
      llvm::errs() << "moe-onnx-fuzz-replay: cannot read " << f << "\n";
      return 2;
    }
    std::string bytes = (*buf)->getBuffer().str();
    if (verbose)
      llvm::errs() << f << "\n";
    run(bytes, verbose);
    ++runs;
    for (unsigned long i = 0; i < mutations; ++i, ++runs)
      run(mutate(bytes, rng), false);
  }
  llvm::sys::fs::remove("moe-onnx-fuzz-crash.onnx");
  llvm::outs() << "moe-onnx-fuzz-replay: " << runs << " inputs, no crash\n";
  return 0;
}
