//===- CudaBackend.cpp - streams and events on CUDA -----------------------===//
//
// Host-side CUDA runtime calls, compiled by the host compiler and linked with
// cudart, cuBLAS and NCCL. Every CUDA error becomes a status + message; a
// machine without a driver or device gets MOE_RT_UNAVAILABLE, never an abort.
//
//===----------------------------------------------------------------------===//

#include "../Backend.h"
#include "../Error.h"
#include "CudaKernels.h"
#include "CudaStreams.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace moe_rt {
namespace {

moe_rt_status cudaFail(const char *what, cudaError_t err) {
  return fail(err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                  ? MOE_RT_UNAVAILABLE
                  : MOE_RT_BACKEND_ERROR,
              std::string(what) + ": " + cudaGetErrorString(err));
}

moe_rt_status requireDevice(const char *what) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError(); // clear the sticky error of a failed probe
    return fail(MOE_RT_UNAVAILABLE,
                std::string(what) + ": no CUDA device is available" +
                    (err != cudaSuccess
                         ? std::string(" (") + cudaGetErrorString(err) + ")"
                         : std::string()));
  }
  return MOE_RT_OK;
}

class CudaEvent final : public EventImpl {
public:
  explicit CudaEvent(cudaEvent_t event) : event(event) {}
  ~CudaEvent() override { cudaEventDestroy(event); }
  moe_rt_backend backend() const override { return MOE_RT_CUDA; }
  bool query() override { return cudaEventQuery(event) == cudaSuccess; }
  cudaEvent_t event;
};

/// What a plain CUDA stream and the CUDA pool share: the error word kernels
/// raise codes in, the communicator watches, and a bounded synchronize.
class CudaStreamBase : public StreamImpl {
public:
  ~CudaStreamBase() override {
    if (errorHost)
      cudaFreeHost(errorHost);
  }
  moe_rt_backend backend() const override { return MOE_RT_CUDA; }

  moe_rt_status enqueue(moe_rt_task_fn, void *) override {
    return fail(MOE_RT_INVALID_ARGUMENT,
                "host tasks run on CPU streams only; enqueue kernels on a "
                "CUDA stream through the op API");
  }

  moe_rt_status enqueueHost(HostTask, bool) override {
    return fail(MOE_RT_INVALID_ARGUMENT, "host tasks run on CPU streams only");
  }

  /// The CUDA stream work of a priority class goes to.
  virtual cudaStream_t streamFor(bool lowPriority) = 0;

  moe_rt_status synchronize(double timeoutSeconds) override {
    return waitMarked([&](cudaEvent_t marker) { return recordMarker(marker); },
                      timeoutSeconds);
  }

  /// Like synchronize, for the work queued so far on one of its CUDA
  /// streams only (a pool's all-reduces may go on while the host reads
  /// what its high-priority stream computed).
  moe_rt_status waitOne(bool lowPriority, double timeoutSeconds) {
    return waitMarked(
        [&](cudaEvent_t marker) {
          if (cudaError_t err = cudaEventRecord(marker, streamFor(lowPriority)))
            return cudaFail("cudaEventRecord", err);
          return MOE_RT_OK;
        },
        timeoutSeconds);
  }

  /// Records a marker with `record`, then polls it to the timeout.
  template <class Record>
  moe_rt_status waitMarked(const Record &record, double timeoutSeconds) {
    // CUDA has no timed stream wait; poll a marker that completes after
    // everything queued so far, so a hung peer cannot hang us.
    cudaEvent_t marker;
    if (cudaError_t err =
            cudaEventCreateWithFlags(&marker, cudaEventDisableTiming))
      return cudaFail("cudaEventCreate", err);
    moe_rt_status status = record(marker);
    if (status == MOE_RT_OK)
      status = pollEvent(marker, timeoutSeconds);
    cudaEventDestroy(marker);
    if (status == MOE_RT_OK && errorHost && *errorHost != 0)
      return fail(MOE_RT_BACKEND_ERROR, errorMessage(*errorHost));
    return status;
  }

  /// The mapped error word kernels raise codes in (created on first use).
  int32_t *errorWordDevice() {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!errorHost) {
      if (cudaHostAlloc(reinterpret_cast<void **>(&errorHost), sizeof(int32_t),
                        cudaHostAllocMapped) != cudaSuccess)
        return nullptr;
      *errorHost = 0;
      if (cudaHostGetDevicePointer(reinterpret_cast<void **>(&errorDevice),
                                   errorHost, 0) != cudaSuccess)
        return nullptr;
    }
    return errorDevice;
  }
  int32_t registerError(std::string message) {
    // An op registers its message on every call: the same message keeps its
    // code, so a long run does not grow the table step by step.
    std::lock_guard<std::mutex> lock(errorMutex);
    for (size_t i = 0; i < messages.size(); ++i)
      if (messages[i] == message)
        return static_cast<int32_t>(i + 1);
    messages.push_back(std::move(message));
    return static_cast<int32_t>(messages.size());
  }
  std::string errorMessage(int32_t code) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (code > 0 && size_t(code) <= messages.size())
      return messages[code - 1];
    return "a kernel raised unknown error code " + std::to_string(code);
  }

  void watch(std::weak_ptr<CommWatch> w) {
    std::lock_guard<std::mutex> lock(errorMutex);
    auto shared = w.lock();
    if (!shared)
      return;
    for (auto it = watches.begin(); it != watches.end();) {
      auto other = it->lock();
      if (!other) {
        it = watches.erase(it);
        continue;
      }
      if (other == shared)
        return;
      ++it;
    }
    watches.push_back(std::move(w));
  }

protected:
  /// Records `marker` so that it completes after all work queued so far.
  virtual moe_rt_status recordMarker(cudaEvent_t marker) = 0;

private:
  std::vector<std::shared_ptr<CommWatch>> liveWatches() {
    std::lock_guard<std::mutex> lock(errorMutex);
    std::vector<std::shared_ptr<CommWatch>> live;
    for (auto &w : watches)
      if (auto shared = w.lock())
        live.push_back(std::move(shared));
    return live;
  }

  moe_rt_status pollEvent(cudaEvent_t event, double timeoutSeconds);

  std::mutex errorMutex;
  int32_t *errorHost = nullptr, *errorDevice = nullptr;
  std::vector<std::string> messages;
  std::vector<std::weak_ptr<CommWatch>> watches;
};

class CudaStream final : public CudaStreamBase {
public:
  explicit CudaStream(cudaStream_t stream) : stream(stream) {}
  ~CudaStream() override {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }

  cudaStream_t streamFor(bool) override { return stream; }

  moe_rt_status record(EventImpl &event) override {
    if (cudaError_t err =
            cudaEventRecord(static_cast<CudaEvent &>(event).event, stream))
      return cudaFail("cudaEventRecord", err);
    return ok();
  }

  moe_rt_status wait(EventImpl &event, double) override {
    // The device-side wait has no timeout; synchronize() bounds the host.
    if (cudaError_t err = cudaStreamWaitEvent(
            stream, static_cast<CudaEvent &>(event).event, 0))
      return cudaFail("cudaStreamWaitEvent", err);
    return ok();
  }

  cudaStream_t stream;

protected:
  moe_rt_status recordMarker(cudaEvent_t marker) override {
    if (cudaError_t err = cudaEventRecord(marker, stream))
      return cudaFail("cudaEventRecord", err);
    return ok();
  }
};

/// FlowMoE's communication pool (Alg. 2) on a GPU: all-to-alls go to a
/// stream of the device's greatest priority, all-reduce chunks to one of its
/// least. Unlike the CPU pool this is not a non-preemptive scheduler: both
/// streams run concurrently and the priority only tells the block scheduler
/// which pending blocks to start first, so a chunk in flight shares the
/// GPU with a newly ready all-to-all rather than delaying it by its length.
/// Records and waits are stronger than the CPU pool's (which order per
/// task): an event recorded on the pool completes after everything queued
/// on either stream before it, and a wait gates both streams, so every
/// dependency the compiler's sync pass relies on holds (more ordering,
/// never less). The two streams are joined on a third, otherwise idle
/// stream, so that a record adds no dependency between them.
class CudaPoolStream final : public CudaStreamBase {
public:
  CudaPoolStream(cudaStream_t high, cudaStream_t low, cudaStream_t join,
                 cudaEvent_t highDone, cudaEvent_t lowDone)
      : high(high), low(low), join(join), highDone(highDone),
        lowDone(lowDone) {}
  ~CudaPoolStream() override {
    for (cudaStream_t s : {high, low, join}) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    cudaEventDestroy(highDone);
    cudaEventDestroy(lowDone);
  }

  cudaStream_t streamFor(bool lowPriority) override {
    return lowPriority ? low : high;
  }

  moe_rt_status record(EventImpl &event) override {
    return recordJoined(static_cast<CudaEvent &>(event).event);
  }

  moe_rt_status wait(EventImpl &event, double) override {
    cudaEvent_t e = static_cast<CudaEvent &>(event).event;
    for (cudaStream_t s : {high, low})
      if (cudaError_t err = cudaStreamWaitEvent(s, e, 0))
        return cudaFail("cudaStreamWaitEvent", err);
    return ok();
  }

protected:
  moe_rt_status recordMarker(cudaEvent_t marker) override {
    return recordJoined(marker);
  }

private:
  /// `event` completes once both streams' work queued so far has.
  moe_rt_status recordJoined(cudaEvent_t event) {
    // cudaStreamWaitEvent captures the internal events' current records,
    // so re-recording them next time does not disturb this join.
    std::lock_guard<std::mutex> lock(joinMutex);
    cudaError_t err = cudaEventRecord(highDone, high);
    if (!err)
      err = cudaEventRecord(lowDone, low);
    if (!err)
      err = cudaStreamWaitEvent(join, highDone, 0);
    if (!err)
      err = cudaStreamWaitEvent(join, lowDone, 0);
    if (!err)
      err = cudaEventRecord(event, join);
    if (err)
      return cudaFail("recording an event on the communication pool", err);
    return ok();
  }

  cudaStream_t high, low, join;
  cudaEvent_t highDone, lowDone;
  std::mutex joinMutex;
};

CudaStreamBase *cudaStreamOf(moe_rt_stream s) {
  return s ? dynamic_cast<CudaStreamBase *>(s->impl.get()) : nullptr;
}

} // namespace

moe_rt_status CudaStreamBase::pollEvent(cudaEvent_t event,
                                        double timeoutSeconds) {
  auto start = std::chrono::steady_clock::now();
  auto lastWatch = start;
  for (;;) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess)
      return ok();
    if (err != cudaErrorNotReady)
      return cudaFail("stream failed", err);
    auto now = std::chrono::steady_clock::now();
    // A communicator that failed asynchronously (a peer's connection
    // closed) leaves its kernels spinning: report it instead of waiting.
    if (now - lastWatch > std::chrono::milliseconds(10)) {
      lastWatch = now;
      for (auto &w : liveWatches())
        if (std::string message = w->poll(); !message.empty())
          return fail(MOE_RT_BACKEND_ERROR, message);
    }
    std::chrono::duration<double> waited = now - start;
    if (timeoutSeconds > 0 && waited.count() > timeoutSeconds) {
      std::string message = "CUDA stream did not finish within " +
                            std::to_string(timeoutSeconds) + " s";
      for (auto &w : liveWatches())
        if (std::string why = w->onTimeout(); !why.empty())
          message += "; " + why;
      return fail(MOE_RT_TIMEOUT, message);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

moe_rt_status createCudaStream(std::unique_ptr<StreamImpl> &out) {
  if (moe_rt_status s = requireDevice("moe_rt_stream_create"))
    return s;
  cudaStream_t stream;
  if (cudaError_t err =
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking))
    return cudaFail("cudaStreamCreate", err);
  out = std::make_unique<CudaStream>(stream);
  return ok();
}

moe_rt_status createCudaPoolStream(std::unique_ptr<StreamImpl> &out) {
  if (moe_rt_status s = requireDevice("moe_rt_stream_create_pool_on"))
    return s;
  // Numerically lower is higher priority: `greatest` is the high one.
  int least = 0, greatest = 0;
  if (cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest))
    return cudaFail("cudaDeviceGetStreamPriorityRange", err);
  cudaStream_t high = nullptr, low = nullptr, join = nullptr;
  cudaEvent_t highDone = nullptr, lowDone = nullptr;
  cudaError_t err = cudaStreamCreateWithPriority(
      &high, cudaStreamNonBlocking, greatest);
  if (!err)
    err = cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, least);
  if (!err)
    err = cudaStreamCreateWithFlags(&join, cudaStreamNonBlocking);
  if (!err)
    err = cudaEventCreateWithFlags(&highDone, cudaEventDisableTiming);
  if (!err)
    err = cudaEventCreateWithFlags(&lowDone, cudaEventDisableTiming);
  if (err) {
    for (cudaStream_t s : {high, low, join})
      if (s)
        cudaStreamDestroy(s);
    for (cudaEvent_t e : {highDone, lowDone})
      if (e)
        cudaEventDestroy(e);
    return cudaFail("creating the CUDA communication pool", err);
  }
  out = std::make_unique<CudaPoolStream>(high, low, join, highDone, lowDone);
  return ok();
}

moe_rt_status createCudaEvent(std::unique_ptr<EventImpl> &out) {
  if (moe_rt_status s = requireDevice("moe_rt_event_create"))
    return s;
  cudaEvent_t event;
  if (cudaError_t err =
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming))
    return cudaFail("cudaEventCreate", err);
  out = std::make_unique<CudaEvent>(event);
  return ok();
}

moe_rt_status cudaAllocZeroed(size_t bytes, void **out) {
  if (moe_rt_status s = requireDevice("moe_rt_tensor_create"))
    return s;
  if (cudaError_t err = cudaMalloc(out, bytes))
    return fail(MOE_RT_OUT_OF_MEMORY,
                "cudaMalloc(" + std::to_string(bytes) +
                    " bytes): " + cudaGetErrorString(err));
  if (cudaError_t err = cudaMemset(*out, 0, bytes)) {
    ::cudaFree(*out);
    return cudaFail("cudaMemset", err);
  }
  return ok();
}

moe_rt_status cudaFree(void *ptr) {
  if (cudaError_t err = ::cudaFree(ptr))
    return cudaFail("cudaFree", err);
  return ok();
}

moe_rt_status cudaCopyBytes(void *dst, moe_rt_backend dstBackend,
                            const void *src, moe_rt_backend srcBackend,
                            size_t bytes) {
  if (moe_rt_status s = requireDevice("moe_rt_tensor_copy"))
    return s;
  cudaMemcpyKind kind = srcBackend == MOE_RT_CUDA
                            ? (dstBackend == MOE_RT_CUDA ? cudaMemcpyDeviceToDevice
                                                         : cudaMemcpyDeviceToHost)
                            : (dstBackend == MOE_RT_CUDA ? cudaMemcpyHostToDevice
                                                         : cudaMemcpyHostToHost);
  // On the legacy default stream, then wait for it: the runtime's streams
  // are non-blocking, so this neither waits for nor is seen late by them,
  // and a pageable-memory copy has really landed when we return.
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, 0);
  if (!err)
    err = cudaStreamSynchronize(0);
  if (err)
    return cudaFail("moe_rt_tensor_copy (cudaMemcpy)", err);
  return ok();
}

moe_rt_status cudaZeroBytes(void *ptr, size_t bytes) {
  if (moe_rt_status s = requireDevice("zeroing a CUDA buffer"))
    return s;
  cudaError_t err = cudaMemsetAsync(ptr, 0, bytes, 0);
  if (!err)
    err = cudaStreamSynchronize(0);
  if (err)
    return cudaFail("cudaMemset", err);
  return ok();
}

void watchCudaStream(moe_rt_stream_impl *stream,
                     std::weak_ptr<CommWatch> watch) {
  if (auto *cuda = cudaStreamOf(stream))
    cuda->watch(std::move(watch));
}

namespace cuda {

cudaStream_t streamOf(moe_rt_stream s, bool lowPriority) {
  // A plain stream ignores the priority; a pool picks its stream.
  auto *cudaStream = cudaStreamOf(s);
  return cudaStream ? cudaStream->streamFor(lowPriority) : nullptr;
}

moe_rt_status waitStream(moe_rt_stream s, bool lowPriority,
                         double timeoutSeconds) {
  auto *cudaStream = cudaStreamOf(s);
  if (!cudaStream)
    return fail(MOE_RT_INVALID_ARGUMENT, "not a CUDA stream");
  return cudaStream->waitOne(lowPriority, timeoutSeconds);
}

int32_t *errorWordOf(moe_rt_stream s) {
  // A pool's two streams share one word: its synchronize covers both.
  auto *cudaStream = cudaStreamOf(s);
  return cudaStream ? cudaStream->errorWordDevice() : nullptr;
}

int32_t registerError(moe_rt_stream s, std::string message) {
  auto *cudaStream = cudaStreamOf(s);
  return cudaStream ? cudaStream->registerError(std::move(message)) : 0;
}

void *cublasHandle() {
  // One handle per host thread: cuBLAS handles are not safe to share between
  // threads that issue concurrently. Freed at thread exit.
  struct Handle {
    cublasHandle_t h = nullptr;
    Handle() {
      if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        h = nullptr;
      else
        cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    }
    ~Handle() {
      if (h)
        cublasDestroy(h);
    }
  };
  thread_local Handle handle;
  return handle.h;
}

} // namespace cuda

moe_rt_status cudaScale(moe_rt_stream_impl *stream, float *data, int64_t n,
                        float factor) {
  auto *cuda = cudaStreamOf(stream);
  if (!cuda)
    return fail(MOE_RT_INVALID_ARGUMENT, "not a CUDA stream");
  if (cudaError_t err = launchScale(data, n, factor, cuda->streamFor(false)))
    return cudaFail("scale kernel", err);
  return ok();
}

} // namespace moe_rt


extern "C" int moe_rt_cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

extern "C" moe_rt_status moe_rt_cuda_select_device(int local_rank) {
  if (local_rank < 0)
    return moe_rt::fail(MOE_RT_INVALID_ARGUMENT,
                        "moe_rt_cuda_select_device: negative local rank " +
                            std::to_string(local_rank));
  if (moe_rt_status s = moe_rt::requireDevice("moe_rt_cuda_select_device"))
    return s;
  int count = moe_rt_cuda_device_count();
  // Ranks beyond the node's device count share devices round-robin (NCCL
  // refuses two ranks of one communicator on one device, so that is only
  // useful for groups that stay apart).
  if (cudaError_t err = cudaSetDevice(local_rank % count))
    return moe_rt::cudaFail("cudaSetDevice", err);
  return moe_rt::ok();
}

extern "C" moe_rt_status moe_rt_cuda_library_versions(int *nccl_version,
                                                      int *cublas_version) {
  if (!nccl_version || !cublas_version)
    return moe_rt::fail(MOE_RT_INVALID_ARGUMENT,
                        "moe_rt_cuda_library_versions: NULL output");
  if (ncclResult_t r = ncclGetVersion(nccl_version); r != ncclSuccess)
    return moe_rt::fail(MOE_RT_BACKEND_ERROR, std::string("ncclGetVersion: ") +
                                                  ncclGetErrorString(r));
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return moe_rt::fail(MOE_RT_BACKEND_ERROR, "cublasGetProperty failed");
  *cublas_version = major * 10000 + minor * 100 + patch;
  return moe_rt::ok();
}
