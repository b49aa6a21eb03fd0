/*===- moe_rt.h - moe runtime C API ----------------------------*- C -*-===*
 *
 * The runtime that generated training steps and trainers link. It never
 * includes compiler headers. Every call returns a status; on failure
 * moe_rt_last_error() (per thread) says why. No call aborts the process.
 *
 * Backends: MOE_RT_CPU runs each stream on a worker thread (always built);
 * MOE_RT_CUDA wraps CUDA streams and events (built when nvcc is found; it
 * answers MOE_RT_UNAVAILABLE on a machine without a CUDA device).
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_MOE_RT_H
#define MOE_RT_MOE_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum moe_rt_status {
  MOE_RT_OK = 0,
  MOE_RT_INVALID_ARGUMENT = 1,
  MOE_RT_OUT_OF_MEMORY = 2,
  MOE_RT_BACKEND_ERROR = 3,
  MOE_RT_TIMEOUT = 4,
  MOE_RT_UNAVAILABLE = 5
} moe_rt_status;

typedef enum moe_rt_backend { MOE_RT_CPU = 0, MOE_RT_CUDA = 1 } moe_rt_backend;

typedef enum moe_rt_dtype {
  MOE_RT_F32 = 0,
  MOE_RT_F16 = 1,
  MOE_RT_BF16 = 2,
  MOE_RT_I32 = 3,
  MOE_RT_I64 = 4
} moe_rt_dtype;

/* Message of the last failed call on this thread ("" if none). */
const char *moe_rt_last_error(void);
/* Name of a status code, e.g. "MOE_RT_TIMEOUT". */
const char *moe_rt_status_name(moe_rt_status status);

/*--- Tensors -------------------------------------------------------------*/

#define MOE_RT_MAX_RANK 8

typedef struct moe_rt_tensor {
  void *data;
  int64_t shape[MOE_RT_MAX_RANK];
  int32_t rank;
  moe_rt_dtype dtype;
  moe_rt_backend backend;
} moe_rt_tensor;

size_t moe_rt_dtype_size(moe_rt_dtype dtype);
/* Allocates a zero-filled tensor. shape may be NULL when rank is 0. */
moe_rt_status moe_rt_tensor_create(moe_rt_backend backend, moe_rt_dtype dtype,
                                   int32_t rank, const int64_t *shape,
                                   moe_rt_tensor *out);
moe_rt_status moe_rt_tensor_destroy(moe_rt_tensor *tensor);
/* Number of elements, or -1 for an invalid tensor. */
int64_t moe_rt_tensor_numel(const moe_rt_tensor *tensor);
/* Copies src into dst: any pair of backends (host <-> device, device <->
 * device, host <-> host), same dtype and element count. Synchronous: it
 * returns once the bytes are in dst. It is not ordered with work queued on
 * streams; synchronize the streams that use either tensor first. */
moe_rt_status moe_rt_tensor_copy(moe_rt_tensor *dst, const moe_rt_tensor *src);

/*--- Streams and events ----------------------------------------------------*/

typedef struct moe_rt_stream_impl *moe_rt_stream;
typedef struct moe_rt_event_impl *moe_rt_event;

/* A host task run on a CPU stream. A non-zero return fails the stream:
 * later tasks are skipped and moe_rt_stream_synchronize reports the error. */
typedef int (*moe_rt_task_fn)(void *arg);

moe_rt_status moe_rt_stream_create(moe_rt_backend backend, moe_rt_stream *out);
/* A CPU communication stream that is FlowMoE's priority pool (Alg. 2): two
 * in-order queues on one worker. moe_rt_stream_enqueue adds to the
 * high-priority queue (all-to-alls), moe_rt_stream_enqueue_low to the
 * low-priority one (all-reduce chunks); the worker runs the first ready
 * high-priority task, or else the first ready low-priority one, never
 * preempting. A wait gates the next task enqueued after it; an event
 * completes with the task enqueued before it. */
moe_rt_status moe_rt_stream_create_pool(moe_rt_stream *out);
/* The communication pool on a backend: MOE_RT_CPU is
 * moe_rt_stream_create_pool; MOE_RT_CUDA is two CUDA streams of the
 * device's greatest (all-to-alls) and least (all-reduce chunks) priority.
 * On CUDA the priority only orders the GPU's scheduling of pending blocks
 * (both streams run concurrently, nothing is held back), an event recorded
 * on the pool completes after the work queued on both streams before it,
 * and a wait gates both. Collectives pick the stream themselves;
 * moe_rt_stream_enqueue_low is CPU only. */
moe_rt_status moe_rt_stream_create_pool_on(moe_rt_backend backend,
                                           moe_rt_stream *out);
moe_rt_status moe_rt_stream_enqueue_low(moe_rt_stream stream, moe_rt_task_fn fn,
                                        void *arg);
/* Waits for queued work, then frees the stream. */
moe_rt_status moe_rt_stream_destroy(moe_rt_stream stream);
/* Queues a host task after all work already on the stream (CPU only). */
moe_rt_status moe_rt_stream_enqueue(moe_rt_stream stream, moe_rt_task_fn fn,
                                    void *arg);
/* Blocks until the stream is idle; MOE_RT_TIMEOUT after timeout_s seconds
 * (timeout_s <= 0 waits without limit). Reports a failed task or wait. */
moe_rt_status moe_rt_stream_synchronize(moe_rt_stream stream, double timeout_s);

moe_rt_status moe_rt_event_create(moe_rt_backend backend, moe_rt_event *out);
moe_rt_status moe_rt_event_destroy(moe_rt_event event);
/* The event completes once all work queued on stream before it is done. */
moe_rt_status moe_rt_event_record(moe_rt_event event, moe_rt_stream stream);
/* Work queued on stream after this call starts only once the event's most
 * recent record (at the time of this call) has completed. A wait longer than
 * wait_timeout_s (<= 0: no limit) fails the stream with MOE_RT_TIMEOUT, so a
 * peer that never records cannot hang the step. */
moe_rt_status moe_rt_stream_wait_event(moe_rt_stream stream, moe_rt_event event,
                                       double wait_timeout_s);
/* 1 if the event's latest record has completed (or it was never recorded). */
int moe_rt_event_query(moe_rt_event event);

/*--- Ops ------------------------------------------------------------------*/

/* tensor *= factor (F32), queued on stream; tensor and stream must share a
 * backend. Used for 1/R loss scaling and gradient averaging. */
moe_rt_status moe_rt_tensor_scale(moe_rt_stream stream, moe_rt_tensor *tensor,
                                  float factor);

/*--- CUDA backend
 * ------------------------------------------------------------*/

/* 1 if the runtime was built with CUDA (nvcc found at build time). */
int moe_rt_cuda_compiled(void);
/* Number of usable CUDA devices; 0 without a driver or device. */
int moe_rt_cuda_device_count(void);
/* Makes device (local_rank mod device count) current for the calling host
 * thread: streams, tensors and NCCL communicators it creates afterwards
 * live there. local_rank is the rank among the processes of one node
 * (moe_rt_comm_node_rank). MOE_RT_UNAVAILABLE without a device. */
moe_rt_status moe_rt_cuda_select_device(int local_rank);
/* Versions of the linked NCCL and cuBLAS (queried without a device).
 * MOE_RT_UNAVAILABLE when built without CUDA. */
moe_rt_status moe_rt_cuda_library_versions(int *nccl_version,
                                           int *cublas_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_RT_MOE_RT_H */
