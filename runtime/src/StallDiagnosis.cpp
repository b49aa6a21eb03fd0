//===- StallDiagnosis.cpp - naming the rank a timed-out wait waited for ---===//
//
// Backend.h's stall diagnosis: the streams ask, the MPI transport answers.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"

#include <atomic>

namespace moe_rt {
namespace {
std::atomic<StallDiagnosis> installed{nullptr};
} // namespace

void setStallDiagnosis(StallDiagnosis diagnosis) { installed = diagnosis; }

std::string withStallDiagnosis(std::string message, double timeoutSeconds) {
  StallDiagnosis diagnose = installed;
  std::string why = diagnose ? diagnose(timeoutSeconds) : std::string();
  return why.empty() ? message : message + "; " + why;
}

} // namespace moe_rt
