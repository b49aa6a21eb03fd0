//===- CudaBackend.cpp - streams and events on CUDA
//--------------------------===//
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

class CudaStream final : public StreamImpl {
public:
  explicit CudaStream(cudaStream_t stream) : stream(stream) {}
  ~CudaStream() override {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
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

  moe_rt_status synchronize(double timeoutSeconds) override {
    // CUDA has no timed stream wait; poll so a hung peer cannot hang us.
    cudaEvent_t marker;
    if (cudaError_t err =
            cudaEventCreateWithFlags(&marker, cudaEventDisableTiming))
      return cudaFail("cudaEventCreate", err);
    cudaEventRecord(marker, stream);
    moe_rt_status status = pollEvent(marker, timeoutSeconds);
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
    std::lock_guard<std::mutex> lock(errorMutex);
    messages.push_back(std::move(message));
    return static_cast<int32_t>(messages.size());
  }
  std::string errorMessage(int32_t code) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (code > 0 && size_t(code) <= messages.size())
      return messages[code - 1];
    return "a kernel raised unknown error code " + std::to_string(code);
  }

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

private:
  std::mutex errorMutex;
  int32_t *errorHost = nullptr, *errorDevice = nullptr;
  std::vector<std::string> messages;

  static moe_rt_status pollEvent(cudaEvent_t event, double timeoutSeconds);
};

} // namespace

moe_rt_status CudaStream::pollEvent(cudaEvent_t event, double timeoutSeconds) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess)
      return ok();
    if (err != cudaErrorNotReady)
      return cudaFail("stream failed", err);
    std::chrono::duration<double> waited =
        std::chrono::steady_clock::now() - start;
    if (timeoutSeconds > 0 && waited.count() > timeoutSeconds)
      return fail(MOE_RT_TIMEOUT, "CUDA stream did not finish within " +
                                      std::to_string(timeoutSeconds) + " s");
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

namespace cuda {

cudaStream_t streamOf(moe_rt_stream s, bool) {
  auto *cudaStream = s ? dynamic_cast<CudaStream *>(s->impl.get()) : nullptr;
  return cudaStream ? cudaStream->stream : nullptr;
}

int32_t *errorWordOf(moe_rt_stream s) {
  auto *cudaStream = s ? dynamic_cast<CudaStream *>(s->impl.get()) : nullptr;
  return cudaStream ? cudaStream->errorWordDevice() : nullptr;
}

int32_t registerError(moe_rt_stream s, std::string message) {
  auto *cudaStream = s ? dynamic_cast<CudaStream *>(s->impl.get()) : nullptr;
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
  auto *cuda = dynamic_cast<CudaStream *>(stream->impl.get());
  if (!cuda)
    return fail(MOE_RT_INVALID_ARGUMENT, "not a CUDA stream");
  if (cudaError_t err = launchScale(data, n, factor, cuda->stream))
    return cudaFail("scale kernel", err);
  return ok();
}

} // namespace moe_rt

extern "C" int moe_rt_cuda_compiled(void) { return 1; }

extern "C" int moe_rt_cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
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
