//===- Error.h - status + thread-local message ------------------*- C++ -*-===//
#ifndef MOE_RT_SRC_ERROR_H
#define MOE_RT_SRC_ERROR_H

#include "moe_rt/moe_rt.h"

#include <string>

namespace moe_rt {

/// Records `message` as this thread's last error and returns `status`.
moe_rt_status fail(moe_rt_status status, std::string message);
/// Clears the last error and returns MOE_RT_OK.
moe_rt_status ok();

} // namespace moe_rt

#endif // MOE_RT_SRC_ERROR_H
