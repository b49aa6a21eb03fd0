//===- Profile.h - timing the tasks streams run (moe_rt/profile.h) -*- C++ -*-===//
//
// A stream wraps each task it is handed with these when profiling is on:
// the wrapper remembers the enqueuing thread's op class and, when the task
// runs, its interval on the stream. Off, they return the task unchanged.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_PROFILE_H
#define MOE_RT_SRC_PROFILE_H

#include "Backend.h"

namespace moe_rt::profile {

StreamImpl::HostTask timed(StreamImpl::HostTask task, const StreamImpl *stream);
StreamImpl::AsyncStep timed(StreamImpl::AsyncStep step,
                            const StreamImpl *stream);

} // namespace moe_rt::profile

#endif // MOE_RT_SRC_PROFILE_H
