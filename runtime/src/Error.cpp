//===- Error.cpp - status + thread-local message --------------------------===//

#include "Error.h"

namespace moe_rt {
namespace {
thread_local std::string lastError;
} // namespace

moe_rt_status fail(moe_rt_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

moe_rt_status ok() {
  lastError.clear();
  return MOE_RT_OK;
}

} // namespace moe_rt

extern "C" const char *moe_rt_last_error(void) {
  return moe_rt::lastError.c_str();
}

extern "C" const char *moe_rt_status_name(moe_rt_status status) {
  switch (status) {
  case MOE_RT_OK:
    return "MOE_RT_OK";
  case MOE_RT_INVALID_ARGUMENT:
    return "MOE_RT_INVALID_ARGUMENT";
  case MOE_RT_OUT_OF_MEMORY:
    return "MOE_RT_OUT_OF_MEMORY";
  case MOE_RT_BACKEND_ERROR:
    return "MOE_RT_BACKEND_ERROR";
  case MOE_RT_TIMEOUT:
    return "MOE_RT_TIMEOUT";
  case MOE_RT_UNAVAILABLE:
    return "MOE_RT_UNAVAILABLE";
  }
  return "MOE_RT_UNKNOWN_STATUS";
}
