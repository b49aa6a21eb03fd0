/*===- step_support.h - what generated training steps call --------*- C++ -*-===*
 *
 * moe-opt --moe-convert-to-emitc | mlir-translate --mlir-to-cpp prints two
 * functions per scheduled step (docs/codegen.md):
 *
 *   void <model>_declare(moe_step *s);  // buffers, arguments, results, grids
 *   void <model>_step(moe_step *s);     // one training step
 *
 * The step queues moe_rt/ops.h calls on streams; this header holds the
 * bookkeeping those calls need, so that the generated code stays a flat,
 * readable list of runtime calls: one buffer per tensor value of the step
 * (allocated once, alive across the asynchronous calls and across steps),
 * one runtime stream per #moe.stream, one event per moe.record_event, the
 * group communicator of each (grid, axes), and status checks that name the
 * op. A trainer creates a moe_step, calls <model>_declare once, fills the
 * arguments, then calls <model>_step per step.
 *
 * A C++ header (the generated code is C++), linked from moe_runtime
 * (src/step/StepSupport.cpp). Every function here reports a failure on stderr
 * and ends the MPI job
 * (moe_rt_mpi_abort), as moe-run does: a rank that stopped alone would leave
 * its peers waiting in a collective.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_STEP_SUPPORT_H
#define MOE_RT_STEP_SUPPORT_H

#include "moe_rt/collectives.h"
#include "moe_rt/lr_schedule.h"
#include "moe_rt/moe_rt.h"
#include "moe_rt/ops.h"

#include <stdint.h>

typedef struct moe_step moe_step;

/*--- Trainer side ----------------------------------------------------------*/

/* MPI must be initialised (moe_rt_mpi_init). timeout_s bounds collectives,
 * event waits and (4x) the end-of-step synchronisation, as moe-run's
 * --timeout does. */
moe_step *moe_step_create(double timeout_s);
/* The same on a backend. MOE_RT_CUDA: each rank takes the GPU of its
 * node-local rank (moe_rt_cuda_select_device), buffers live there, compute
 * streams are CUDA streams, comm streams the CUDA pool with NCCL
 * collectives; load_inputs / dump_results / global_loss / advance and the
 * fills stage through host copies. Without a CUDA device (or a runtime
 * built without CUDA) it reports "no CUDA ..." and ends the job. */
moe_step *moe_step_create_on(double timeout_s, moe_rt_backend backend);
/* Synchronises and frees streams, events, communicators and buffers. */
void moe_step_destroy(moe_step *s);
int moe_step_rank(const moe_step *s);
int moe_step_world_size(const moe_step *s);

/* The step's arguments in the order of the step function's arguments
 * (generated steps: token ids, labels, then the parameters). */
int moe_step_num_arguments(const moe_step *s);
moe_rt_tensor *moe_step_argument_tensor(moe_step *s, int i);
/* The parameter's name, or NULL for token ids / labels. */
const char *moe_step_argument_name(const moe_step *s, int i);

/* Reads every argument from moe-run --dump-inputs output (one line per
 * argument: "name DIMS values..."), checking names and shapes. */
void moe_step_load_inputs(moe_step *s, const char *path);
/* Fills this rank's parameter arguments (not token ids / labels) from a
 * parameter file for the job's number of ranks (moe_rt/params_file.h; the
 * one moe_compile_model writes, <PREFIX>_PARAMS_FILE), checking that it
 * holds exactly the step's parameters with the step's shapes. */
void moe_step_load_params(moe_step *s, const char *path);
/* Writes the results as moe-run --dump does: "name NUMEL values..." per
 * result (the loss, then every updated parameter). */
void moe_step_dump_results(moe_step *s, const char *path);
/* The loss averaged over all ranks (moe-run's "step N loss X" line). */
double moe_step_global_loss(moe_step *s);
/* The updated parameters and optimizer state become the next step's
 * arguments. */
void moe_step_advance(moe_step *s);
/* Checkpoints (docs/checkpoint-format.md), as moe-run --checkpoint /
 * --resume write and read them: collective (every rank calls). Saving
 * writes the carried state after moe_step_advance, with the update count
 * (the steps begun so far), `data_position` (the trainer's: samples all
 * ranks have read, moe_rt/text_data.h, so that a run resumed on another
 * grid continues from the same sample) and the noise seed. Resuming checks the latest checkpoint
 * under `root` against this step and job before it overwrites anything,
 * restores the state, continues the update count and seed, and returns
 * the data position. */
void moe_step_save_checkpoint(moe_step *s, const char *root,
                              uint64_t data_position);
uint64_t moe_step_resume(moe_step *s, const char *root);
/* The updates done so far (the steps begun; after moe_step_resume, the
 * checkpoint's count): the number the next step's loss line follows. */
int64_t moe_step_updates_done(const moe_step *s);
/* noisy_topk's base seed (moe-run's --seed; 1, moe-run's default, unless
 * set). Step n (the n-th <model>_step call) draws its noise from
 * moe_rt_gate_step_seed(base, n), as moe-run's step n does. */
void moe_step_set_gate_seed(moe_step *s, uint64_t base);
/* The expert placement of a step scheduled with expert-placement=1
 * (docs/load-aware.md §2): MoE block `block`'s slot table, G x S integers,
 * slot s of expert-parallel rank g holding logical expert slots[g S + s]
 * (moe_rt/expert_placement.h turns expert -> rank into it); block -1:
 * every block. Written into the block's step input `expert_slots.<block>`
 * before each step; unset: expert parallelism's own layout. Set it before the first step, with the
 * parameters in that layout (moe-run --dump-inputs / moe-export-params
 * --expert-placement write them so). A different table before a later step
 * moves every expert weight and its optimizer state (the tensors the
 * checkpoint manifest lays out as "experts") to it first, with
 * moe_step_move_experts, as moe-run --expert-placement-at does. */
void moe_step_set_expert_slots(moe_step *s, int64_t block,
                               const int64_t *slots, int64_t n);
/* Block `block`'s slot table for the next step (the one set, else the
 * resumed checkpoint's, else expert parallelism's layout) into `out` when
 * it has room for all of them; returns G x S, or 0 when the step has no
 * expert_slots.<block> input. */
int64_t moe_step_expert_slots(moe_step *s, int64_t block, int64_t *out,
                              int64_t n);
/* The migration behind a placement change, one tensor at a time; shared by
 * moe_step_set_expert_slots and moe-run --expert-placement-at. `data`
 * (host memory) holds this rank's `slots` experts, `per` floats each, in
 * slot table `from` (G x S, G = `groups`, this rank index `group` of
 * them); afterwards it holds those `to` gives it. The world holds
 * size(world) / G expert-parallel groups (the other grid axes), this rank
 * being in group `replica`: every rank adds its experts to its group's
 * section of one (size / G) G S `per` buffer, summed over `world` on
 * `sync` (one non-zero term per value: exact; each group moves its own
 * copies), and takes its new slots from that section. Unlike the rest
 * of this header it returns the status (moe_rt_last_error says why), so
 * that moe-run reports it its own way. */
moe_rt_status moe_step_move_experts(moe_rt_stream sync, moe_rt_comm world,
                                    double timeout_s, float *data,
                                    int64_t slots, int64_t per,
                                    const int64_t *from, const int64_t *to,
                                    int64_t group, int64_t groups,
                                    int64_t replica);
/* Routing statistics (moe.routing_counts, moe-opt --moe-routing-stats):
 * rank 0 records every later step's counts to the routing trace `path`
 * (docs/routing-trace-format.md), as moe-run --routing-trace does; the
 * other ranks ignore the call. */
void moe_step_set_routing_trace(moe_step *s, const char *path);
/* The last step's balance line ("step S balance: tokens/rank max/mean
 * ..."), or "" when the step has no routing statistics. */
const char *moe_step_routing_balance(const moe_step *s);

/*--- Generated <model>_declare ---------------------------------------------*/

typedef enum moe_step_stream_kind {
  MOE_STEP_COMPUTE = 0,
  MOE_STEP_COMM = 1
} moe_step_stream_kind;

void moe_step_grid_v(moe_step *s, const char *name, int rank,
                     const int64_t *shape);
void moe_step_buffer_v(moe_step *s, int64_t id, moe_rt_dtype dtype, int rank,
                       const int64_t *shape);
/* The op that defines buffer `id` writes all of it on a CPU stream
 * (RuntimeCalls.h, writesResults): a host buffer is not zeroed when the
 * step reaches it. */
void moe_step_buffer_written(moe_step *s, int64_t id);
/* Buffer `id` is the next argument; name: its moe.param, or NULL. */
void moe_step_argument(moe_step *s, int64_t id, const char *name);
/* Buffer `id` is the next argument, optimizer state `name` (moe.state:
 * zero at the start, carried from step to step like a parameter;
 * docs/optimizers.md). */
void moe_step_state(moe_step *s, int64_t id, const char *name);
/* Buffer `id` is the next argument, step input `name`: "lr" (F32, from
 * the schedule) or "step" (I64, the update count), written by
 * moe_step_begin. */
void moe_step_step_input(moe_step *s, int64_t id, const char *name);
/* The step's checkpoint manifest (moe_rt/checkpoint_file.h text, counters
 * 0), computed by the compiler from the step's sharding. */
void moe_step_checkpoint_manifest(moe_step *s, const char *manifest);
/* The schedule of the "lr" step input (moe_rt/lr_schedule.h). */
void moe_step_lr_schedule(moe_step *s, moe_rt_lr_kind kind, double lr,
                          int64_t warmup, int64_t total, double min_lr);
/* Buffer `id` is the next result, dumped as `name`. */
void moe_step_result(moe_step *s, const char *name, int64_t id);

/*--- Generated <model>_step -------------------------------------------------*/

/* Every buffer but the arguments starts the step zero-filled (moe-run
 * starts each step from fresh zero-filled buffers): a host buffer is
 * zeroed by the step's first moe_step_tensor of it (its defining op, which
 * moe-run also reaches before allocating the value), a device buffer
 * here. */
void moe_step_begin(moe_step *s);
moe_rt_tensor *moe_step_tensor(moe_step *s, int64_t id);
/* The stream of #moe.stream<kind, index>, created on first use: a CPU
 * stream for compute, the priority pool for comm. */
moe_rt_stream moe_step_stream(moe_step *s, moe_step_stream_kind kind,
                              int64_t index);
moe_rt_comm moe_step_comm_v(moe_step *s, const char *grid, int naxes,
                            const int64_t *axes);
/* Records event `id` (one per moe.record_event, reused across steps). */
moe_rt_event moe_step_record(moe_step *s, int64_t id, moe_rt_stream stream);
void moe_step_wait(moe_step *s, moe_rt_stream stream, moe_rt_event event);
/* Host-side splat constants. */
void moe_step_fill_f32(moe_step *s, moe_rt_tensor *t, double value);
void moe_step_fill_i64(moe_step *s, moe_rt_tensor *t, int64_t value);
/* The noise seed of the running step (moe_step_begin counts the steps):
 * what the generated noisy_topk gate calls pass, forward and backward. */
uint64_t moe_step_gate_seed(const moe_step *s);
/* The routing log moe.routing_counts' calls hand their counts to. */
moe_rt_routing_log *moe_step_routing_log(moe_step *s);
/* Ends the job with `what` (the op) if a runtime call failed. */
void moe_step_check(moe_step *s, moe_rt_status status, const char *what);
/* The op class the next calls' tasks are charged to when profiling
 * (moe_rt/profile.h): the generated step names each op before its calls. */
void moe_step_op(moe_step *s, const char *op_class);
/* Waits for every stream; a failed task ends the job with its message.
 * With MOE_RT_PROFILE=1 in the environment (read by moe_step_create_on),
 * it then writes the step's profile (moe_rt/profile.h, the lines moe-run
 * --profile prints) to stderr. */
void moe_step_end(moe_step *s);

#ifdef __cplusplus
/* Shapes and axes as plain argument lists, so the generated calls read
 * `moe_step_buffer(s, 7, MOE_RT_F32, 4, 16, 128)`. Templates (not C
 * varargs) convert each literal to int64_t. */
template <typename... Dims>
inline void moe_step_grid(moe_step *s, const char *name, Dims... dims) {
  const int64_t shape[] = {static_cast<int64_t>(dims)..., 0};
  moe_step_grid_v(s, name, static_cast<int>(sizeof...(Dims)), shape);
}
template <typename... Dims>
inline void moe_step_buffer(moe_step *s, int64_t id, moe_rt_dtype dtype,
                            Dims... dims) {
  const int64_t shape[] = {static_cast<int64_t>(dims)..., 0};
  moe_step_buffer_v(s, id, dtype, static_cast<int>(sizeof...(Dims)), shape);
}
template <typename... Axes>
inline moe_rt_comm moe_step_comm(moe_step *s, const char *grid,
                                 Axes... axes) {
  const int64_t list[] = {static_cast<int64_t>(axes)..., 0};
  return moe_step_comm_v(s, grid, static_cast<int>(sizeof...(Axes)), list);
}
#endif

#endif /* MOE_RT_STEP_SUPPORT_H */
