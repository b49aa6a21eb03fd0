//===- Stream.cpp - C API for streams and events --------------------------===//

#include "../Backend.h"
#include "../Error.h"
#include "../cpu/HeapRetention.h"
#include "../cpu/KeptActivations.h"

#include "moe_rt/kept_activations.h"

#include <new>

using namespace moe_rt;

extern "C" moe_rt_status moe_rt_stream_create(moe_rt_backend backend,
                                              moe_rt_stream *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_stream_create: out is NULL");
  *out = nullptr;
  std::unique_ptr<StreamImpl> impl;
  switch (backend) {
  case MOE_RT_CPU:
    cpu::retainFreedHeapMemory();
    try {
      impl = createCpuStream();
    } catch (const std::exception &e) {
      return fail(MOE_RT_BACKEND_ERROR,
                  std::string("cannot start a CPU stream thread: ") + e.what());
    }
    break;
  case MOE_RT_CUDA:
    if (moe_rt_status status = createCudaStream(impl); status != MOE_RT_OK)
      return status;
    break;
  default:
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_create: unknown backend " +
                    std::to_string(static_cast<int>(backend)));
  }
  *out = new (std::nothrow) moe_rt_stream_impl{std::move(impl)};
  if (!*out)
    return fail(MOE_RT_OUT_OF_MEMORY, "moe_rt_stream_create: out of memory");
  return ok();
}

extern "C" moe_rt_status moe_rt_stream_create_pool(moe_rt_stream *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_create_pool: out is NULL");
  *out = nullptr;
  std::unique_ptr<StreamImpl> impl;
  cpu::retainFreedHeapMemory();
  try {
    impl = createCpuPoolStream();
  } catch (const std::exception &e) {
    return fail(MOE_RT_BACKEND_ERROR,
                std::string("cannot start a pool thread: ") + e.what());
  }
  *out = new (std::nothrow) moe_rt_stream_impl{std::move(impl)};
  if (!*out)
    return fail(MOE_RT_OUT_OF_MEMORY,
                "moe_rt_stream_create_pool: out of memory");
  return ok();
}

extern "C" moe_rt_status moe_rt_stream_create_pool_on(moe_rt_backend backend,
                                                      moe_rt_stream *out) {
  if (backend == MOE_RT_CPU)
    return moe_rt_stream_create_pool(out);
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_create_pool_on: out is NULL");
  *out = nullptr;
  if (backend != MOE_RT_CUDA)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_create_pool_on: unknown backend " +
                    std::to_string(static_cast<int>(backend)));
  std::unique_ptr<StreamImpl> impl;
  if (moe_rt_status status = createCudaPoolStream(impl); status != MOE_RT_OK)
    return status;
  *out = new (std::nothrow) moe_rt_stream_impl{std::move(impl)};
  if (!*out)
    return fail(MOE_RT_OUT_OF_MEMORY,
                "moe_rt_stream_create_pool_on: out of memory");
  return ok();
}

extern "C" moe_rt_status
moe_rt_stream_enqueue_low(moe_rt_stream stream, moe_rt_task_fn fn, void *arg) {
  if (!stream || !fn)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_enqueue_low: NULL stream or task");
  return stream->impl->enqueueHost(hostTask(fn, arg), /*lowPriority=*/true);
}

extern "C" moe_rt_status moe_rt_stream_destroy(moe_rt_stream stream) {
  if (!stream)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_stream_destroy: NULL stream");
  delete stream;
  // A later stream may get the same address.
  cpu::setKeeping(stream, false);
  return ok();
}

extern "C" moe_rt_status moe_rt_stream_enqueue(moe_rt_stream stream,
                                               moe_rt_task_fn fn, void *arg) {
  if (!stream || !fn)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_enqueue: NULL stream or task");
  return stream->impl->enqueue(fn, arg);
}

extern "C" moe_rt_status moe_rt_stream_synchronize(moe_rt_stream stream,
                                                   double timeout_s) {
  if (!stream)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_synchronize: NULL stream");
  return stream->impl->synchronize(timeout_s);
}

extern "C" moe_rt_status moe_rt_stream_keep_activations(moe_rt_stream stream,
                                                       int keep) {
  if (!stream)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_stream_keep_activations: NULL stream");
  cpu::setKeeping(stream, keep != 0);
  return ok();
}

extern "C" moe_rt_status moe_rt_event_create(moe_rt_backend backend,
                                             moe_rt_event *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_event_create: out is NULL");
  *out = nullptr;
  std::unique_ptr<EventImpl> impl;
  if (backend == MOE_RT_CPU)
    impl = createCpuEvent();
  else if (backend == MOE_RT_CUDA) {
    if (moe_rt_status status = createCudaEvent(impl); status != MOE_RT_OK)
      return status;
  } else
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_event_create: unknown backend " +
                    std::to_string(static_cast<int>(backend)));
  *out = new (std::nothrow) moe_rt_event_impl{std::move(impl)};
  if (!*out)
    return fail(MOE_RT_OUT_OF_MEMORY, "moe_rt_event_create: out of memory");
  return ok();
}

extern "C" moe_rt_status moe_rt_event_destroy(moe_rt_event event) {
  if (!event)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_event_destroy: NULL event");
  delete event;
  return ok();
}

static moe_rt_status checkPair(const char *what, moe_rt_stream stream,
                               moe_rt_event event) {
  if (!stream || !event)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": NULL stream or event");
  if (stream->impl->backend() != event->impl->backend())
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) +
                    ": stream and event belong to different backends");
  return MOE_RT_OK;
}

extern "C" moe_rt_status moe_rt_event_record(moe_rt_event event,
                                             moe_rt_stream stream) {
  if (moe_rt_status s = checkPair("moe_rt_event_record", stream, event))
    return s;
  return stream->impl->record(*event->impl);
}

extern "C" moe_rt_status moe_rt_stream_wait_event(moe_rt_stream stream,
                                                  moe_rt_event event,
                                                  double wait_timeout_s) {
  if (moe_rt_status s = checkPair("moe_rt_stream_wait_event", stream, event))
    return s;
  return stream->impl->wait(*event->impl, wait_timeout_s);
}

extern "C" int moe_rt_event_query(moe_rt_event event) {
  return event && event->impl->query() ? 1 : 0;
}
