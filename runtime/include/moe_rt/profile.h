/*===- profile.h - where a step's time goes ------------------------*- C -*-===*
 *
 * Off by default (then every call here but moe_rt_profile_enable is a
 * no-op). While on, every task a CPU stream runs is timed: a compute task
 * from its start to its end, a collective from its first progress call to
 * its completion. Each task is charged to the op class named on the
 * enqueuing thread when it was queued (moe_rt_profile_set_op: moe-run and
 * generated steps name the IR op, e.g. "moe.expert", "moe.vjp(moe.expert)")
 * and to its stream. At the end of a step the report gives, at microsecond
 * resolution: the step's wall time, per op class the number of tasks and
 * their summed time, and per stream its busy time (the union of its tasks'
 * intervals) and idle time (wall - busy). docs/tools/moe-run.md describes
 * the lines. CUDA streams' work runs on the device and is not timed here.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_PROFILE_H
#define MOE_RT_PROFILE_H

#include "moe_rt/moe_rt.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

void moe_rt_profile_enable(int on);
int moe_rt_profile_enabled(void);
/* The op class of the tasks the calling thread queues next (copied; NULL:
 * "(unnamed)"). */
void moe_rt_profile_set_op(const char *op_class);
/* The stream's name in reports ("compute.0", "comm.0"); unnamed streams
 * are "stream.N" in order of first use. */
void moe_rt_profile_name_stream(moe_rt_stream stream, const char *name);
/* Starts a step: forgets earlier tasks, starts the wall clock. */
void moe_rt_profile_step_begin(void);
/* Ends the step (call it after the step's streams were synchronised) and
 * writes its report lines to `out`, each prefixed "profile rank R step N". */
void moe_rt_profile_step_end(FILE *out, int rank, int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* MOE_RT_PROFILE_H */
